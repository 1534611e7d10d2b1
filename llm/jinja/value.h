// value.h: the values a Jinja template computes with, as python sees them (jinja2 runs on python): undefined, None,
// bool, int, float, str (and markupsafe's Markup, a str that escapes what is added to it), list, tuple, dict, and
// objects (namespaces, macros, loops, generators, range, dict views, bound methods...) that speak python's protocols
// (len, iter, [], repr, ==, truth) through virtual functions. Lists, tuples and dicts are immutable, as in
// transformers' ImmutableSandboxedEnvironment; objects live in the render's arena (evaluator.h), so a namespace that
// holds itself is no leak. str() / repr() / json.dumps() of values live here too.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::jinja {

// Thrown while rendering; line 0 until the statement or expression that failed attaches its line.
struct eval_error {
    std::string msg;
    int line = 0;
};
[[noreturn]] void fail(std::string msg);

struct object;
struct value;
struct dict_data;
struct call_args;
class evaluator;

enum class kind : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, object };

using list_ptr = std::shared_ptr<const std::vector<value>>;
using dict_ptr = std::shared_ptr<const dict_data>;

// Lists, dicts and namespaces nest at most this deep: python code would recurse through deeper ones (repr, ==, json)
// and so would ours.
constexpr int max_value_nesting = 256;

struct value {
    kind k = kind::undefined;
    bool tuple = false;  // kind::list that python has as a tuple
    bool group = false;  // a tuple from groupby (jinja2's _GroupTuple: .grouper and .list name its two items)
    bool markup = false; // kind::string that is a markupsafe.Markup (|safe, |escape)
    bool unsafe = false; // undefined from an attribute the sandbox blocks (list.append): using it is an error
    bool b = false;
    uint16_t nest = 0; // list / dict / object: 1 + the deepest nesting inside (bounded by max_value_nesting)
    int64_t i = 0;
    double f = 0;
    object* o = nullptr;                  // kind::object, owned by the render's arena
    std::shared_ptr<const std::string> s; // kind::string; for undefined: the message an access to it raises
    list_ptr l;                           // kind::list
    dict_ptr d;                           // kind::dict

    static value none() { return with_kind(kind::none); }
    static value boolean(bool v) {
        value r = with_kind(kind::boolean);
        r.b = v;
        return r;
    }
    static value integer(int64_t v) {
        value r = with_kind(kind::integer);
        r.i = v;
        return r;
    }
    static value floating(double v) {
        value r = with_kind(kind::floating);
        r.f = v;
        return r;
    }
    static value string(std::string v, bool markup = false);
    static value list(std::vector<value> v, bool tuple = false);
    static value dict(dict_data v);
    static value obj(object* p);
    // An undefined value; `why` is the error an attribute access, call or arithmetic on it raises.
    static value undefined(std::string why = {});

    bool is_undefined() const { return k == kind::undefined; }
    bool is_none() const { return k == kind::none; }
    bool is_string() const { return k == kind::string; }
    bool is_list() const { return k == kind::list; }
    bool is_dict() const { return k == kind::dict; }
    bool is_object() const { return k == kind::object; }
    bool is_int() const { return k == kind::integer || k == kind::boolean; } // python's int includes bool
    bool is_number() const { return k == kind::boolean || k == kind::integer || k == kind::floating; }
    int64_t as_int() const { return k == kind::integer ? i : int64_t(b); }         // is_int() only
    double as_float() const { return k == kind::floating ? f : double(as_int()); } // is_number() only
    const std::string& str() const { return *s; }                                  // kind::string only
    const std::vector<value>& items() const { return *l; }                         // kind::list only

  private:
    static value with_kind(kind kk) {
        value r;
        r.k = kk;
        return r;
    }
};

// A python dict: insertion order kept; keys are hashable values (str, numbers, None, tuples). String keys are hashed
// once the dict is big (value.cpp); a small one is searched in order.
struct dict_data {
    std::vector<std::pair<value, value>> items;
    std::unordered_map<std::string, size_t> index; // string key -> position in items; empty while the dict is small

    const value* find(const value& key) const;
    const value* find(std::string_view key) const;
    void set(value key, value v); // replaces the value of an existing key in place (the key keeps its position)
};

// Objects with identity and python's protocols. The defaults are those of a plain python object: no len, not
// iterable, not subscriptable, truthy, equal only to itself, repr "<type object>".
struct object {
    virtual ~object() = default;
    virtual std::string type_name() const = 0;
    virtual std::string repr() const;
    virtual bool truthy() const { return true; }
    virtual bool iterable() const { return false; }
    // python's iter() run to the end; a generator gives its remaining items once. Fails when not iterable.
    virtual std::vector<value> iterate();
    virtual std::optional<int64_t> length() const { return std::nullopt; }
    virtual bool has_getitem() const { return false; } // jinja2's `sequence` test wants len() and __getitem__
    // obj[key]: false where python raises TypeError / LookupError (jinja2 then tries an attribute, else undefined)
    virtual bool getitem(const value& key, value& out) const;
    virtual bool equals(const object& other) const { return this == &other; }
    virtual bool callable() const { return false; }
    virtual value call(evaluator& ev, call_args& args); // fails unless callable()
    virtual int nest() const { return 0; }              // how deep values nest inside it
    virtual bool hashable() const { return true; }      // python: hash(obj) works (identity)
};

// The namespace() object: the one mutable thing ({% set ns.x = ... %}).
struct namespace_object final : object {
    dict_data attrs;
    int depth = 1;
    mutable bool in_repr = false; // a namespace that holds itself prints as python prints it: {...}
    std::string type_name() const override { return "Namespace"; }
    std::string repr() const override;
    int nest() const override { return depth; }
    void set(const std::string& name, value v); // fails past max_value_nesting
};

// python semantics
bool truthy(const value& v);
bool equal(const value& a, const value& b);                  // ==, as python (1 == 1.0 == True, [1] != (1,))
int compare(const value& a, const value& b, const char* op); // <0, 0, >0 for ordering; a TypeError otherwise
std::string type_name(const value& v);                       // python's type name: 'str', 'list', 'NoneType', ...
std::string float_repr(double f);                            // python's repr(float): 1.0, 1e+16, 0.0001, 1e-05
std::string to_str(const value& v);                          // str(v); undefined -> ""
std::string to_repr(const value& v);                         // repr(v)
std::string repr_string(std::string_view s);                 // repr(str): quotes, escapes of unprintables
void check_hashable(const value& key);                       // fails as python's dict does for a list or dict key

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as python writes it.
struct json_style {
    bool ensure_ascii = false;
    std::string indent; // used when has_indent
    bool has_indent = false;
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
};
std::string to_json(const value& v, const json_style& style);

value from_json(const nlohmann::ordered_json& j);

// Memory bounds of the render in progress on this thread (set by render(), see evaluator.cpp): every string and list
// made is charged to a budget, and no single string may pass max_string bytes. Outside a render nothing is bounded.
struct memory_bounds {
    size_t max_string = SIZE_MAX;
    size_t budget = SIZE_MAX; // bytes left to allocate
};
memory_bounds*& current_bounds();
void check_string_size(size_t n_bytes); // fails (eval_error) when a string of n_bytes would pass the bound
void charge(size_t n_bytes);            // fails when the budget is spent

// UTF-8 strings indexed by code point, as python's str is.
std::vector<uint32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t n_code_points(std::string_view s);

} // namespace tessera::jinja
