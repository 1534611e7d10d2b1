// evaluator.h: the tree-walking renderer of a parsed template (evaluator.cpp) and what the built-in filters, tests,
// methods and globals (builtins.cpp, filters.cpp, pystr.cpp) need from it: calls, attribute and item access as
// jinja2's sandbox does them, the objects a template can make (macros, loops, generators, ranges, dict views, ...),
// the object arena and the step count. Internal to llm/jinja; the public API is jinja.h.
#pragma once

#include "llm/jinja/ast.h"
#include "llm/jinja/jinja.h"
#include "llm/jinja/value.h"

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::jinja {

// Arguments of a call: positional, then keyword.
struct call_args {
    std::vector<value> pos;
    std::vector<std::pair<std::string, value>> kw;

    // The argument at position i or named `name`; null when neither was given.
    const value* get(size_t i, std::string_view name) const;
    value get_or(size_t i, std::string_view name, value def) const;
    const value* keyword(std::string_view name) const;
    // Binds to a python signature: names[i] may be given by position or keyword; the first n_required are required.
    // Fails as python does on too many, unknown, repeated or missing arguments; out[i] is the argument or null.
    void bind(std::string_view fn, std::initializer_list<std::string_view> names, size_t n_required,
              const value** out) const;
};

using builtin_fn = value (*)(evaluator& ev, const value& self, call_args& args);

// A built-in function, class or bound method ("abc".upper, loop.cycle, range, namespace).
struct function_object final : object {
    std::string name;
    std::string type = "builtin_function_or_method";
    std::string text; // repr
    value self;
    builtin_fn fn = nullptr;
    std::string type_name() const override { return type; }
    std::string repr() const override { return text; }
    bool callable() const override { return true; }
    value call(evaluator& ev, call_args& args) override { return fn(ev, self, args); }
};

// Variables of one frame (the template, a macro call, a loop iteration...), looked up through the parents. A loop
// iteration's scope dies with the iteration unless a macro defined in it keeps it.
struct scope : std::enable_shared_from_this<scope> {
    std::shared_ptr<scope> parent;
    std::vector<std::pair<std::string, value>> vars; // a handful each: a flat list beats hashing
    const value* find(const std::string& name) const;
    void set(const std::string& name, value v);
};

// A macro (or the caller() of a call block): its definition and the scope it was defined in.
struct macro_object final : object {
    const stmt* def = nullptr; // st::macro or st::call_block
    std::string name;          // "caller" for a call block's body
    std::shared_ptr<scope> closure;
    std::string type_name() const override { return "Macro"; }
    std::string repr() const override;
    bool callable() const override { return true; }
    value call(evaluator& ev, call_args& args) override;
};

// The `loop` variable of a for loop; callable when the loop is recursive.
struct loop_object final : object {
    list_ptr items;
    size_t index0 = 0;
    int depth0 = 0;
    std::optional<std::vector<value>> changed_last;
    const stmt* recurse = nullptr; // the recursive for loop
    std::shared_ptr<scope> outer;  // the scope it runs in
    std::string type_name() const override { return "LoopContext"; }
    std::string repr() const override;
    bool callable() const override { return recurse != nullptr; }
    value call(evaluator& ev, call_args& args) override;
};

// `joiner(sep)`: "" on the first call, sep after.
struct joiner_object final : object {
    std::string sep;
    bool used = false;
    std::string address;
    std::string type_name() const override { return "Joiner"; }
    std::string repr() const override { return "<jinja2.utils.Joiner object at " + address + ">"; }
    bool callable() const override { return true; }
    value call(evaluator& ev, call_args& args) override;
};

// `cycler(a, b, ...)`: .next(), .current, .reset()
struct cycler_object final : object {
    std::vector<value> items;
    size_t pos = 0;
    std::string address;
    std::string type_name() const override { return "Cycler"; }
    std::string repr() const override { return "<jinja2.utils.Cycler object at " + address + ">"; }
};

// A python generator or iterator (what map, select, unique, batch, items, reverse... return): iterable once, always
// true, no len(), not subscriptable, not JSON. Made eagerly; an error met while making it is raised when it is read,
// as python's lazy generator would raise it then.
struct generator_object final : object {
    std::vector<value> items;
    size_t pos = 0;
    std::optional<eval_error> error;
    std::string kind = "generator"; // python's type: generator, list_reverseiterator, ...
    std::string label;              // "generator object sync_do_map"
    std::string address;
    std::string type_name() const override { return kind; }
    std::string repr() const override { return "<" + label + " at " + address + ">"; }
    bool iterable() const override { return true; }
    std::vector<value> iterate() override;
    std::optional<value> next(); // python's next(): the next item, or none at the end
};

// range(start, stop, step) (at most the sandbox's 100000 items)
struct range_object final : object {
    int64_t start = 0, stop = 0, step = 1;
    int64_t size() const;
    std::string type_name() const override { return "range"; }
    std::string repr() const override;
    bool truthy() const override { return size() > 0; }
    bool iterable() const override { return true; }
    std::vector<value> iterate() override;
    std::optional<int64_t> length() const override { return size(); }
    bool has_getitem() const override { return true; }
    bool getitem(const value& key, value& out) const override;
    bool equals(const object& other) const override;
};

// dict.keys() / values() / items(): live views of an (immutable) dict
struct dict_view_object final : object {
    enum class part { keys, values, items };
    dict_ptr d;
    part which = part::keys;
    int depth = 1; // the dict's nesting
    std::string type_name() const override;
    std::string repr() const override;
    bool truthy() const override { return !d->items.empty(); }
    bool iterable() const override { return true; }
    std::vector<value> iterate() override;
    std::optional<int64_t> length() const override { return int64_t(d->items.size()); }
    bool equals(const object& other) const override;
    int nest() const override { return depth; }
    bool hashable() const override { return false; }
};

class evaluator {
  public:
    explicit evaluator(const options& opt);

    std::string render(const program& prog, const value& context);

    value call(const value& fn, call_args& args);
    value get_attr(const value& obj, const std::string& name);
    value get_item(const value& obj, const value& key);
    value filter(const std::string& name, const value& subject, call_args& args);
    bool test(const std::string& name, const value& subject, call_args& args);
    std::vector<value> iterate(const value& v);               // python's iter() run to the end (for, list(), join()...)
    std::optional<int64_t> length(const value& v);            // python's len(); none when the value has no len()
    bool contains(const value& container, const value& item); // python's `item in container`
    std::tm now() const;
    void
    step(uint64_t n = 1); // n units of work (an expression, a statement, 8 items a filter walks); fails past the limit

    template <class T> T* make() {
        charge(sizeof(T) + 64);
        auto p = std::make_unique<T>();
        T* raw = p.get();
        objects_.push_back(std::move(p));
        return raw;
    }
    // a fake but stable "0x7f..." address for python reprs that show one (stable, so two renders agree)
    std::string address() const;
    value function(const char* name, builtin_fn fn, value self = {}, std::string text = {},
                   std::string type = "builtin_function_or_method");
    // a generator of `items` (python's `label` type `kind`), or of the error that making them raised
    value generator(std::vector<value> items, const char* label, const char* kind = "generator");

    value call_macro(const macro_object& m, call_args& args);
    value loop_call(loop_object& loop, call_args& args);

  private:
    enum class flow { normal, brk, cont };

    const options& opt_;
    std::vector<std::unique_ptr<object>> objects_;
    std::string* out_ = nullptr;
    scope* top_ = nullptr;    // the template's own scope (what a block sees)
    bool autoescape_ = false; // inside {% autoescape true %}
    uint64_t steps_ = 0;
    int depth_ = 0;

    struct depth_guard {
        evaluator& ev;
        explicit depth_guard(evaluator& e);
        ~depth_guard() { ev.depth_--; }
    };

    std::shared_ptr<scope> new_scope(scope* parent);
    void emit(std::string_view s);
    flow exec_body(const body& b, scope* sc);
    flow exec(const stmt& s, scope* sc);
    void exec_for(const stmt& s, scope* sc, const value& seq, int depth0);
    std::string capture(const body& b, scope* sc);
    value apply_filters(const std::vector<expr_ptr>& filters, value v, scope* sc);
    value eval(const expr& e, scope* sc);
    value eval_inner(const expr& e, scope* sc);
    void eval_args(const arg_list& a, scope* sc, call_args& out);
    void assign(scope* sc, const std::vector<target>& targets, const value& v);
    std::vector<value> iterate_all(const value& v);
};

// builtins.cpp
value binary_op(binop op, const value& a, const value& b);
value get_method(evaluator& ev, const value& obj, const std::string& name, bool& found); // python attribute lookup
bool is_unsafe_method(const value& obj, const std::string& name); // one the immutable sandbox blocks
void add_globals(evaluator& ev, scope& globals);
value slice(evaluator& ev, const value& obj, const value& start, const value& stop, const value& step);
// filters.cpp
builtin_fn find_filter(const std::string& name);
using test_fn = bool (*)(evaluator& ev, const value& v, call_args& args);
test_fn find_test(const std::string& name);

} // namespace tessera::jinja
