// evaluator.cpp: renders a parsed template. Scoping follows jinja2: a for loop's body gets a fresh scope each
// iteration, a macro call a scope on top of the one it was defined in, if blocks none; names resolve at run time
// through the chain (globals <- render variables <- template). Attribute and item access, calls and undefined values
// behave as in transformers' ImmutableSandboxedEnvironment. Also the protocols of the objects in evaluator.h and
// parse() / render() / chat_context() of jinja.h.
#include "llm/jinja/evaluator.h"
#include "llm/jinja/pystr.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <algorithm>

namespace tessera::jinja {

// ---- call arguments ----

const value* call_args::get(size_t i, std::string_view name) const {
    if (i < pos.size()) return &pos[i];
    return keyword(name);
}

const value* call_args::keyword(std::string_view name) const {
    for (const auto& [k, v] : kw)
        if (k == name) return &v;
    return nullptr;
}

value call_args::get_or(size_t i, std::string_view name, value def) const {
    const value* v = get(i, name);
    return v ? *v : std::move(def);
}

void call_args::bind(std::string_view fn, std::initializer_list<std::string_view> names, size_t n_required,
                     const value** out) const {
    const size_t n = names.size();
    if (pos.size() > n)
        fail(fmt::format("{}() takes {} {} positional argument{} but {} were given", fn,
                         n_required == n ? "exactly" : "at most", n, n == 1 ? "" : "s", pos.size()));
    for (size_t i = 0; i < n; i++) out[i] = i < pos.size() ? &pos[i] : nullptr;
    for (const auto& [k, v] : kw) {
        size_t i = 0;
        for (auto nm : names) {
            if (nm == k) break;
            i++;
        }
        if (i == n) fail(fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
        if (out[i]) fail(fmt::format("{}() got multiple values for argument '{}'", fn, k));
        out[i] = &v;
    }
    for (size_t i = 0; i < n_required; i++)
        if (!out[i])
            fail(fmt::format("{}() missing required argument '{}' (pos {})", fn, *(names.begin() + long(i)), i + 1));
}

const value* scope::find(const std::string& name) const {
    for (const scope* s = this; s; s = s->parent.get())
        for (const auto& [k, v] : s->vars)
            if (k == name) return &v;
    return nullptr;
}

void scope::set(const std::string& name, value v) {
    for (auto& [k, old] : vars)
        if (k == name) {
            old = std::move(v);
            return;
        }
    vars.emplace_back(name, std::move(v));
}

// ---- objects ----

std::string macro_object::repr() const {
    return "<Macro " + (name.empty() ? "anonymous" : repr_string(name)) + ">";
}

static std::string macro_label(const std::string& name) {
    return name.empty() ? "None" : repr_string(name);
}

value macro_object::call(evaluator& ev, call_args& args) {
    return ev.call_macro(*this, args);
}

std::string loop_object::repr() const {
    return fmt::format("<LoopContext {}/{}>", index0 + 1, items->size());
}

value loop_object::call(evaluator& ev, call_args& args) {
    return ev.loop_call(*this, args);
}

value joiner_object::call(evaluator&, call_args& args) {
    if (!args.pos.empty() || !args.kw.empty()) fail("Joiner.__call__() takes 1 positional argument");
    if (!used) {
        used = true;
        return value::string("");
    }
    return value::string(sep);
}

std::vector<value> generator_object::iterate() {
    if (error) throw *error;
    std::vector<value> rest(items.begin() + long(pos), items.end());
    pos = items.size();
    return rest;
}

std::optional<value> generator_object::next() {
    if (error) throw *error;
    if (pos >= items.size()) return std::nullopt;
    return items[pos++];
}

int64_t range_object::size() const {
    if (step > 0) return start < stop ? (stop - start - 1) / step + 1 : 0;
    return start > stop ? (start - stop - 1) / -step + 1 : 0;
}

std::string range_object::repr() const {
    return step == 1 ? fmt::format("range({}, {})", start, stop) : fmt::format("range({}, {}, {})", start, stop, step);
}

std::vector<value> range_object::iterate() {
    const int64_t n = size();
    charge(size_t(n) * sizeof(value));
    std::vector<value> out;
    out.reserve(size_t(n));
    for (int64_t i = 0; i < n; i++) out.push_back(value::integer(start + i * step));
    return out;
}

bool range_object::getitem(const value& key, value& out) const {
    if (!key.is_int()) return false;
    const int64_t n = size();
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    out = value::integer(start + i * step);
    return true;
}

bool range_object::equals(const object& other) const {
    const auto* r = dynamic_cast<const range_object*>(&other);
    if (!r) return false;
    const int64_t n = size();
    if (n != r->size()) return false;
    if (n == 0) return true;
    return start == r->start && (n == 1 || step == r->step);
}

std::string dict_view_object::type_name() const {
    return which == part::keys ? "dict_keys" : which == part::values ? "dict_values" : "dict_items";
}

std::vector<value> dict_view_object::iterate() {
    std::vector<value> out;
    charge(d->items.size() * sizeof(value));
    out.reserve(d->items.size());
    for (const auto& [k, v] : d->items)
        out.push_back(which == part::keys ? k : which == part::values ? v : value::list({k, v}, true));
    return out;
}

std::string dict_view_object::repr() const {
    std::string out = type_name() + "([";
    bool first = true;
    for (const auto& [k, v] : d->items) {
        if (!first) out += ", ";
        first = false;
        out += which == part::keys     ? to_repr(k)
               : which == part::values ? to_repr(v)
                                       : "(" + to_repr(k) + ", " + to_repr(v) + ")";
        check_string_size(out.size());
    }
    return out + "])";
}

bool dict_view_object::equals(const object& other) const {
    // keys and items views compare as sets; values views only to themselves
    const auto* o = dynamic_cast<const dict_view_object*>(&other);
    if (!o || o->which != which) return false;
    if (which == part::values) return this == o;
    if (d->items.size() != o->d->items.size()) return false;
    for (const auto& [k, v] : d->items) {
        const value* ov = o->d->find(k);
        if (!ov || (which == part::items && !equal(v, *ov))) return false;
    }
    return true;
}

// ---- the evaluator ----

evaluator::depth_guard::depth_guard(evaluator& e) : ev(e) {
    if (++ev.depth_ > ev.opt_.max_depth) {
        ev.depth_--;
        fail(fmt::format("nesting deeper than {} (recursive macro?)", ev.opt_.max_depth));
    }
}

evaluator::evaluator(const options& opt) : opt_(opt) {}

void evaluator::step(uint64_t n) {
    steps_ += n;
    if (steps_ > opt_.max_steps) fail(fmt::format("the template ran past its limit of {} steps", opt_.max_steps));
}

std::tm evaluator::now() const {
    if (opt_.now) return opt_.now();
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
}

std::string evaluator::address() const {
    return fmt::format("0x7f{:010x}", 0x3a000000u + objects_.size() * 48);
}

value evaluator::function(const char* name, builtin_fn fn, value self, std::string text, std::string type) {
    auto* f = make<function_object>();
    f->name = name;
    f->fn = fn;
    f->self = std::move(self);
    f->type = std::move(type);
    f->text = text.empty() ? fmt::format("<built-in function {}>", name) : std::move(text);
    return value::obj(f);
}

value evaluator::generator(std::vector<value> items, const char* label, const char* kind) {
    auto* g = make<generator_object>();
    g->items = std::move(items);
    g->kind = kind;
    g->label = label;
    g->address = address();
    return value::obj(g);
}

std::shared_ptr<scope> evaluator::new_scope(scope* parent) {
    auto s = std::make_shared<scope>();
    if (parent) s->parent = parent->shared_from_this();
    return s;
}

void evaluator::emit(std::string_view s) {
    if (out_->size() + s.size() > opt_.max_output)
        fail(fmt::format("the output passes its limit of {} bytes", opt_.max_output));
    out_->append(s);
}

std::string evaluator::render(const program& prog, const value& context) {
    const std::shared_ptr<scope> globals = new_scope(nullptr);
    add_globals(*this, *globals);
    const std::shared_ptr<scope> vars = new_scope(globals.get());
    if (context.is_dict())
        for (const auto& [k, v] : context.d->items) vars->set(to_str(k), v);
    const std::shared_ptr<scope> top = new_scope(vars.get());
    top_ = top.get();
    std::string out;
    out_ = &out;
    exec_body(prog.root, top.get());
    return out;
}

std::string evaluator::capture(const body& b, scope* sc) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
        exec_body(b, sc);
    } catch (...) {
        out_ = saved;
        throw;
    }
    out_ = saved;
    return buf;
}

evaluator::flow evaluator::exec_body(const body& b, scope* sc) {
    for (const auto& s : b) {
        const flow f = exec(*s, sc);
        if (f != flow::normal) return f;
    }
    return flow::normal;
}

void evaluator::assign(scope* sc, const std::vector<target>& targets, const value& v) {
    auto set_one = [&](const target& t, const value& x) {
        if (t.attr.empty()) {
            sc->set(t.name, x);
            return;
        }
        const value* ns = sc->find(t.name);
        auto* obj = ns && ns->is_object() ? dynamic_cast<namespace_object*>(ns->o) : nullptr;
        if (!obj) fail("cannot assign attribute on non-namespace object");
        obj->set(t.attr, x);
    };
    if (targets.size() == 1) {
        set_one(targets[0], v);
        return;
    }
    std::vector<value> items = iterate(v);
    if (items.size() != targets.size()) {
        if (items.size() > targets.size()) fail(fmt::format("too many values to unpack (expected {})", targets.size()));
        fail(fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), items.size()));
    }
    for (size_t i = 0; i < targets.size(); i++) set_one(targets[i], items[i]);
}

value evaluator::apply_filters(const std::vector<expr_ptr>& filters, value v, scope* sc) {
    for (const auto& f : filters) {
        call_args args;
        eval_args(f->args, sc, args);
        v = filter(f->name, v, args);
    }
    return v;
}

evaluator::flow evaluator::exec(const stmt& s, scope* sc) {
    step();
    depth_guard guard(*this);
    try {
        switch (s.type) {
        case st::text:
            emit(s.text);
            break;
        case st::print: {
            const value v = eval(*s.e, sc);
            emit(autoescape_ && !(v.is_string() && v.markup) ? py::html_escape(to_str(v)) : to_str(v));
            break;
        }
        case st::if_:
            for (size_t i = 0; i < s.conds.size(); i++)
                if (truthy(eval(*s.conds[i], sc))) return exec_body(s.bodies[i], sc);
            if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back(), sc);
            break;
        case st::for_:
            exec_for(s, sc, eval(*s.e, sc), 0);
            break;
        case st::set:
            assign(sc, s.targets, eval(*s.e, sc));
            break;
        case st::set_block: {
            value v = value::string(capture(s.main, sc));
            assign(sc, s.targets, apply_filters(s.filters, std::move(v), sc));
            break;
        }
        case st::macro: {
            auto* m = make<macro_object>();
            m->def = &s;
            m->name = s.name;
            m->closure = sc->shared_from_this();
            sc->set(m->name, value::obj(m));
            break;
        }
        case st::call_block: {
            auto* m = make<macro_object>();
            m->def = &s;
            m->closure = sc->shared_from_this(); // anonymous, as jinja2's caller
            const expr& c = *s.e;
            value fn = eval(*c.kids[0], sc);
            call_args args;
            eval_args(c.args, sc, args);
            args.kw.emplace_back("caller", value::obj(m));
            emit(to_str(call(fn, args)));
            break;
        }
        case st::filter_block: {
            value v = value::string(capture(s.main, sc));
            emit(to_str(apply_filters(s.filters, std::move(v), sc)));
            break;
        }
        case st::break_:
            return flow::brk;
        case st::continue_:
            return flow::cont;
        case st::generation:
            emit(capture(s.main, new_scope(sc).get()));
            break;
        case st::with: {
            std::vector<value> values;
            for (const auto& c : s.conds) values.push_back(eval(*c, sc));
            const std::shared_ptr<scope> inner = new_scope(sc);
            for (size_t i = 0; i < values.size(); i++) inner->set(s.targets[i].name, values[i]);
            return exec_body(s.main, inner.get());
        }
        case st::block:
            emit(capture(s.main, new_scope(s.recursive ? sc : top_).get()));
            break;
        case st::autoescape: {
            const bool saved = autoescape_;
            autoescape_ = truthy(eval(*s.e, sc));
            try {
                const flow f = exec_body(s.main, sc);
                autoescape_ = saved;
                return f;
            } catch (...) {
                autoescape_ = saved;
                throw;
            }
        }
        case st::load:
            fail("no loader for this environment specified");
        }
    } catch (eval_error& e) {
        if (e.line == 0) e.line = s.line;
        throw;
    }
    return flow::normal;
}

void evaluator::exec_for(const stmt& s, scope* sc, const value& seq, int depth0) {
    std::vector<value> all = iterate(seq);
    if (s.cond) {
        std::vector<value> kept;
        for (auto& item : all) {
            step();
            const std::shared_ptr<scope> it = new_scope(sc);
            assign(it.get(), s.targets, item);
            if (truthy(eval(*s.cond, it.get()))) kept.push_back(std::move(item));
        }
        all = std::move(kept);
    }
    if (all.empty()) {
        if (!s.else_body.empty()) exec_body(s.else_body, new_scope(sc).get());
        return;
    }
    auto* loop = make<loop_object>();
    loop->items = std::make_shared<const std::vector<value>>(std::move(all));
    loop->depth0 = depth0;
    if (s.recursive) {
        loop->recurse = &s;
        loop->outer = sc->shared_from_this();
    }
    const value loop_value = value::obj(loop);
    for (size_t i = 0; i < loop->items->size(); i++) {
        step();
        loop->index0 = i;
        const std::shared_ptr<scope> it = new_scope(sc);
        it->set("loop", loop_value);
        assign(it.get(), s.targets, (*loop->items)[i]);
        if (exec_body(s.main, it.get()) == flow::brk) break;
    }
}

value evaluator::loop_call(loop_object& loop, call_args& args) {
    if (!loop.recurse) fail("The loop must have the 'recursive' marker to be called recursively.");
    if (args.pos.size() != 1 || !args.kw.empty()) fail("loop() takes exactly one argument");
    depth_guard guard(*this);
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
        exec_for(*loop.recurse, loop.outer.get(), args.pos[0], loop.depth0 + 1);
    } catch (...) {
        out_ = saved;
        throw;
    }
    out_ = saved;
    return value::string(std::move(buf));
}

std::vector<value> evaluator::iterate(const value& v) {
    std::vector<value> items = iterate_all(v);
    step(items.size() / 8); // what is walked costs work too
    return items;
}

std::vector<value> evaluator::iterate_all(const value& v) {
    switch (v.k) {
    case kind::undefined:
        return {};
    case kind::list:
        return *v.l;
    case kind::dict: {
        std::vector<value> keys;
        charge(v.d->items.size() * sizeof(value));
        keys.reserve(v.d->items.size());
        for (const auto& [k, x] : v.d->items) keys.push_back(k);
        return keys;
    }
    case kind::string: {
        std::vector<value> chars;
        const std::string& s = *v.s;
        charge(s.size() * sizeof(value));
        for (size_t i = 0; i < s.size();) {
            const size_t start = i;
            i++;
            while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) i++;
            chars.push_back(value::string(s.substr(start, i - start)));
        }
        return chars;
    }
    case kind::object:
        return v.o->iterate();
    default:
        fail(fmt::format("'{}' object is not iterable", type_name(v)));
    }
}

std::optional<int64_t> evaluator::length(const value& v) {
    switch (v.k) {
    case kind::undefined:
        return 0;
    case kind::string:
        return int64_t(n_code_points(v.str()));
    case kind::list:
        return int64_t(v.l->size());
    case kind::dict:
        return int64_t(v.d->items.size());
    case kind::object:
        return v.o->length();
    default:
        return std::nullopt;
    }
}

bool evaluator::contains(const value& c, const value& item) {
    switch (c.k) {
    case kind::undefined:
        return false;
    case kind::string:
        if (!item.is_string())
            fail(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
        return c.str().find(item.str()) != std::string::npos;
    case kind::list:
        for (const value& x : c.items())
            if (equal(x, item)) return true;
        return false;
    case kind::dict:
        check_hashable(item);
        return c.d->find(item) != nullptr;
    case kind::object:
        if (auto* g = dynamic_cast<generator_object*>(c.o)) {
            while (auto x = g->next())
                if (equal(*x, item)) return true;
            return false;
        }
        if (auto* r = dynamic_cast<range_object*>(c.o)) {
            if (!item.is_number()) return false;
            for (const value& x : r->iterate())
                if (equal(x, item)) return true;
            return false;
        }
        if (auto* view = dynamic_cast<dict_view_object*>(c.o)) {
            if (view->which == dict_view_object::part::keys) {
                check_hashable(item);
                return view->d->find(item) != nullptr;
            }
            if (view->which == dict_view_object::part::items) {
                if (!item.is_list() || !item.tuple || item.l->size() != 2) return false;
                check_hashable(item.items()[0]);
                const value* v = view->d->find(item.items()[0]);
                return v && equal(*v, item.items()[1]);
            }
        }
        if (c.o->iterable()) {
            for (const value& x : c.o->iterate())
                if (equal(x, item)) return true;
            return false;
        }
        [[fallthrough]];
    default:
        fail(fmt::format("argument of type '{}' is not iterable", type_name(c)));
    }
}

void evaluator::eval_args(const arg_list& a, scope* sc, call_args& out) {
    for (const auto& p : a.pos) out.pos.push_back(eval(*p, sc));
    if (a.star) {
        for (auto& x : iterate(eval(*a.star, sc))) out.pos.push_back(std::move(x));
    }
    for (const auto& [k, p] : a.kw) out.kw.emplace_back(k, eval(*p, sc));
    if (a.star2) {
        const value d = eval(*a.star2, sc);
        if (!d.is_dict()) fail("argument after ** must be a mapping");
        for (const auto& [k, x] : d.d->items) {
            if (!k.is_string()) fail("keywords must be strings");
            out.kw.emplace_back(k.str(), x);
        }
    }
}

static std::string undefined_message(const value& v) {
    return v.s ? *v.s : std::string("value is undefined");
}

static std::string object_type_repr(const value& v) {
    if (v.is_none()) return "None";
    return type_name(v) + " object";
}

static value unsafe_undefined(const value& obj, const std::string& name) {
    value u = value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
    u.unsafe = true;
    return u;
}

value evaluator::get_attr(const value& obj, const std::string& name) {
    // jinja2's sandbox: getattr(obj, name) when python has the attribute (refused when it starts with '_' or would
    // modify a list or dict), else obj[name], else undefined
    if (obj.is_undefined()) fail(undefined_message(obj));
    if (name.size() > 4 && name.rfind("__", 0) == 0 && name.compare(name.size() - 2, 2, "__") == 0)
        return unsafe_undefined(obj, name);
    bool found = false;
    value attr = get_method(*this, obj, name, found);
    if (found) {
        if (name[0] == '_' || is_unsafe_method(obj, name)) return unsafe_undefined(obj, name);
        return attr;
    }
    value out;
    if (obj.is_dict()) {
        if (const value* v = obj.d->find(std::string_view(name))) return *v;
    } else if (obj.is_object() && obj.o->getitem(value::string(name), out)) {
        return out;
    }
    return value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

value evaluator::get_item(const value& obj, const value& key) {
    // jinja2's sandbox: obj[key], else (TypeError, LookupError) a python attribute named key, else undefined
    if (obj.is_undefined()) fail(undefined_message(obj));
    if (obj.is_dict()) {
        const bool hashable = !(key.is_list() && !key.tuple) && !key.is_dict() && !key.is_undefined();
        if (hashable)
            if (const value* v = obj.d->find(key)) return *v;
    } else if ((obj.is_list() || obj.is_string()) && key.is_int()) {
        const int64_t idx = key.as_int();
        if (obj.is_list()) {
            const int64_t n = int64_t(obj.l->size());
            const int64_t j = idx < 0 ? idx + n : idx;
            if (j >= 0 && j < n) return (*obj.l)[size_t(j)];
        } else {
            const std::vector<uint32_t> cps = code_points(obj.str());
            const int64_t n = int64_t(cps.size());
            const int64_t j = idx < 0 ? idx + n : idx;
            if (j >= 0 && j < n) return value::string(from_code_points(cps, size_t(j), size_t(j) + 1), obj.markup);
        }
    } else if (obj.is_object()) {
        value out;
        if (obj.o->getitem(key, out)) return out;
    }
    if (key.is_string()) {
        const std::string& name = key.str();
        if (name.size() > 4 && name.rfind("__", 0) == 0 && name.compare(name.size() - 2, 2, "__") == 0)
            return unsafe_undefined(obj, name);
        bool found = false;
        value attr = get_method(*this, obj, name, found);
        if (found) return name[0] == '_' || is_unsafe_method(obj, name) ? unsafe_undefined(obj, name) : attr;
        return value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
    }
    return value::undefined(fmt::format("'{}' has no element {}", object_type_repr(obj), to_repr(key)));
}

value evaluator::call(const value& fn, call_args& args) {
    if (fn.is_undefined()) {
        if (fn.unsafe) fail(undefined_message(fn));
        fail(undefined_message(fn).find("is undefined") != std::string::npos || !fn.s ? undefined_message(fn)
                                                                                      : undefined_message(fn));
    }
    if (fn.is_object() && fn.o->callable()) return fn.o->call(*this, args);
    fail(fmt::format("'{}' object is not callable", type_name(fn)));
}

value evaluator::call_macro(const macro_object& m, call_args& args) {
    // jinja2's Macro.__call__: positional arguments first, then keywords by name; caller, kwargs and varargs only for
    // a body that reads them
    depth_guard guard(*this);
    const stmt& def = *m.def;
    const auto& params = def.params;
    const std::shared_ptr<scope> frame = new_scope(m.closure.get());
    scope* sc = frame.get();
    std::vector<std::pair<std::string, value>> kwargs = args.kw;
    auto pop_kw = [&](const std::string& name, value& out) {
        for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
            if (it->first == name) {
                out = std::move(it->second);
                kwargs.erase(it);
                return true;
            }
        return false;
    };
    const size_t n_pos = std::min(args.pos.size(), params.size());
    std::vector<int> given(params.size(), 0);
    bool found_caller = false;
    for (size_t i = 0; i < n_pos; i++) {
        sc->set(params[i].first, args.pos[i]);
        given[i] = 1;
    }
    if (n_pos != params.size()) {
        for (size_t i = n_pos; i < params.size(); i++) {
            value v;
            if (pop_kw(params[i].first, v)) {
                sc->set(params[i].first, std::move(v));
                given[i] = 1;
            }
            found_caller = found_caller || params[i].first == "caller";
        }
    } else {
        for (const auto& p : params) found_caller = found_caller || p.first == "caller";
    }
    if (def.uses_caller && !found_caller) {
        value c;
        if (!pop_kw("caller", c) || c.is_none()) c = value::undefined("No caller defined");
        sc->set("caller", std::move(c));
    }
    if (def.catch_kwargs) {
        dict_data d;
        for (auto& [k, v] : kwargs) d.set(value::string(k), v);
        sc->set("kwargs", value::dict(std::move(d)));
    } else if (!kwargs.empty()) {
        if (std::any_of(kwargs.begin(), kwargs.end(), [](const auto& kv) { return kv.first == "caller"; }))
            fail(fmt::format("macro {} was invoked with two values for the special caller argument. This is most "
                             "likely a bug.",
                             macro_label(m.name)));
        fail(fmt::format("macro {} takes no keyword argument '{}'", macro_label(m.name), kwargs.front().first));
    }
    if (def.catch_varargs) {
        std::vector<value> rest;
        for (size_t i = params.size(); i < args.pos.size(); i++) rest.push_back(args.pos[i]);
        sc->set("varargs", value::list(std::move(rest), true));
    } else if (args.pos.size() > params.size()) {
        fail(fmt::format("macro {} takes not more than {} argument(s)", macro_label(m.name), params.size()));
    }
    for (size_t i = 0; i < params.size(); i++) {
        if (given[i]) continue;
        sc->set(params[i].first,
                params[i].second ? eval(*params[i].second, sc)
                                 : value::undefined(fmt::format("parameter '{}' was not provided", params[i].first)));
    }
    return value::string(capture(def.main, sc));
}

value evaluator::filter(const std::string& name, const value& subject, call_args& args) {
    step();
    builtin_fn fn = find_filter(name);
    if (!fn) fail(fmt::format("No filter named '{}'.", name));
    return fn(*this, subject, args);
}

bool evaluator::test(const std::string& name, const value& subject, call_args& args) {
    step();
    test_fn fn = find_test(name);
    if (!fn) fail(fmt::format("No test named '{}'.", name));
    return fn(*this, subject, args);
}

value evaluator::eval(const expr& e, scope* sc) {
    step();
    depth_guard guard(*this);
    try {
        return eval_inner(e, sc);
    } catch (eval_error& err) {
        if (err.line == 0) err.line = e.line;
        throw;
    }
}

value evaluator::eval_inner(const expr& e, scope* sc) {
    switch (e.type) {
    case ex::literal:
        return e.lit;
    case ex::name: {
        const value* v = sc->find(e.name);
        return v ? *v : value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ex::attr:
        return get_attr(eval(*e.kids[0], sc), e.name);
    case ex::item: {
        const value obj = eval(*e.kids[0], sc);
        return get_item(obj, eval(*e.kids[1], sc));
    }
    case ex::slice: {
        const value obj = eval(*e.kids[0], sc);
        if (obj.is_undefined()) fail(undefined_message(obj));
        value parts[3];
        bool constant = e.kids[0]->type == ex::literal;
        for (int i = 0; i < 3; i++) {
            const expr* k = e.kids[size_t(i) + 1].get();
            parts[i] = k ? eval(*k, sc) : value::none();
            constant = constant && (!k || k->type == ex::literal);
        }
        value r = slice(*this, obj, parts[0], parts[1], parts[2]);
        // jinja2 slices with python's own [], so a bad slice raises; only a slice of constants, which its optimizer
        // folds through the sandbox's getitem, is undefined instead
        if (r.is_undefined() && !constant) fail(*r.s);
        return r;
    }
    case ex::call: {
        const value fn = eval(*e.kids[0], sc);
        call_args args;
        eval_args(e.args, sc, args);
        return call(fn, args);
    }
    case ex::filter: {
        const value subject = e.kids.empty() ? value::undefined() : eval(*e.kids[0], sc);
        call_args args;
        eval_args(e.args, sc, args);
        return filter(e.name, subject, args);
    }
    case ex::test: {
        const value subject = eval(*e.kids[0], sc);
        call_args args;
        eval_args(e.args, sc, args);
        return value::boolean(test(e.name, subject, args) != e.negated);
    }
    case ex::neg:
    case ex::pos: {
        const value v = eval(*e.kids[0], sc);
        if (v.is_undefined()) fail(undefined_message(v));
        if (e.type == ex::pos) {
            if (!v.is_number()) fail(fmt::format("bad operand type for unary +: '{}'", type_name(v)));
            return v.k == kind::boolean ? value::integer(v.b) : v;
        }
        if (v.k == kind::floating) return value::floating(-v.f);
        if (v.k == kind::integer) {
            if (v.i == INT64_MIN) fail("integer overflow");
            return value::integer(-v.i);
        }
        if (v.k == kind::boolean) return value::integer(-int64_t(v.b));
        fail(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
    }
    case ex::not_:
        return value::boolean(!truthy(eval(*e.kids[0], sc)));
    case ex::binary: {
        const value a = eval(*e.kids[0], sc);
        const value b = eval(*e.kids[1], sc);
        return binary_op(e.op, a, b);
    }
    case ex::and_: {
        value a = eval(*e.kids[0], sc);
        return truthy(a) ? eval(*e.kids[1], sc) : a;
    }
    case ex::or_: {
        value a = eval(*e.kids[0], sc);
        return truthy(a) ? a : eval(*e.kids[1], sc);
    }
    case ex::compare: {
        value left = eval(*e.kids[0], sc);
        for (size_t i = 0; i < e.ops.size(); i++) {
            value right = eval(*e.kids[i + 1], sc);
            const std::string& op = e.ops[i];
            bool ok;
            if (op == "==")
                ok = equal(left, right);
            else if (op == "!=")
                ok = !equal(left, right);
            else if (op == "in" || op == "notin")
                ok = contains(right, left) == (op == "in");
            else {
                if (left.is_undefined()) fail(undefined_message(left));
                if (right.is_undefined()) fail(undefined_message(right));
                const int c = compare(left, right, op.c_str());
                ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
            }
            if (!ok) return value::boolean(false);
            left = std::move(right);
        }
        return value::boolean(true);
    }
    case ex::cond:
        if (truthy(eval(*e.kids[1], sc))) return eval(*e.kids[0], sc);
        return e.kids[2] ? eval(*e.kids[2], sc)
                         : value::undefined("the inline if-expression evaluated to false and no else section was "
                                            "defined.");
    case ex::list:
    case ex::tuple: {
        std::vector<value> items;
        items.reserve(e.kids.size());
        for (const auto& k : e.kids) items.push_back(eval(*k, sc));
        return value::list(std::move(items), e.type == ex::tuple);
    }
    case ex::dict: {
        dict_data d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
            value k = eval(*e.kids[i], sc);
            check_hashable(k);
            d.set(std::move(k), eval(*e.kids[i + 1], sc));
        }
        return value::dict(std::move(d));
    }
    case ex::concat: {
        std::string out;
        for (const auto& k : e.kids) {
            out += to_str(eval(*k, sc));
            check_string_size(out.size());
        }
        return value::string(std::move(out));
    }
    }
    return value::undefined();
}

// ---- jinja.h ----

// "chat template: line N: msg" on one line: line breaks in msg (a raise_exception text, a name taken from a string)
// written as \n
static error template_error(const eval_error& e) {
    std::string msg;
    for (char c : e.msg) msg += c == '\n' ? std::string("\\n") : c == '\r' ? std::string("\\r") : std::string(1, c);
    if (e.line == 0) return error("chat template: " + msg); // the variables, before line 1
    return error(fmt::format("chat template: line {}: {}", e.line, msg));
}

template_ parse(std::string_view source) {
    template_ t;
    try {
        t.p_ = parse_program(source);
    } catch (const eval_error& e) {
        throw template_error(e);
    }
    return t;
}

std::string render(const template_& t, const nlohmann::ordered_json& context, const options& opt) {
    if (t.empty()) throw error("chat template: rendering an empty template object");
    memory_bounds bounds{opt.max_output, opt.max_memory};
    memory_bounds* saved = current_bounds();
    current_bounds() = &bounds;
    struct restore {
        memory_bounds* saved;
        ~restore() { current_bounds() = saved; }
    } restore_bounds{saved};
    try {
        evaluator ev(opt); // its strings and lists are charged to `bounds` through current_bounds()
        return ev.render(t.prog(), from_json(context));
    } catch (const eval_error& e) {
        throw template_error(e);
    }
}

nlohmann::ordered_json chat_context(const chat_inputs& in) {
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    ctx["messages"] = in.messages;
    ctx["tools"] = in.tools;
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = in.add_generation_prompt;
    ctx["bos_token"] = in.bos_token;
    ctx["eos_token"] = in.eos_token;
    for (const auto& [k, v] : in.kwargs.items()) ctx[k] = v;
    return ctx;
}

} // namespace tessera::jinja
