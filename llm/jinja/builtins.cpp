// builtins.cpp: python's operators on template values (arithmetic with python's floor division and modulo, Markup's
// escaping +, *, %), slicing, the attributes and methods of each type as jinja2's sandbox exposes them (list.append and
// the other mutators exist but are refused), and the globals: range (the sandbox's 100000 limit), dict, namespace,
// joiner, cycler, lipsum, and transformers' raise_exception and strftime_now. Filters and tests are in filters.cpp,
// str methods in pystr.cpp.
#include "llm/jinja/evaluator.h"
#include "llm/jinja/pystr.h"

#include "llm/unicode.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera::jinja {

namespace {

int64_t int_arg(const value& v, std::string_view what) {
    if (!v.is_int()) fail(fmt::format("{}: '{}' object cannot be interpreted as an integer", what, type_name(v)));
    return v.as_int();
}

[[noreturn]] void bad_operands(const char* op, const value& a, const value& b) {
    if ((a.is_string() || (a.is_list() && !a.tuple)) && std::strcmp(op, "+") == 0)
        fail(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a)));
    fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

value repeat(const value& seq, int64_t n) {
    if (n < 0) n = 0;
    if (seq.is_string()) {
        const size_t len = seq.str().size();
        if (len && uint64_t(n) > SIZE_MAX / len) fail("string repetition too large");
        check_string_size(len * size_t(n));
        std::string out;
        out.reserve(len * size_t(n));
        for (int64_t i = 0; i < n; i++) out += seq.str();
        return value::string(std::move(out), seq.markup);
    }
    const size_t len = seq.l->size();
    if (len && uint64_t(n) > (64u << 20) / len) fail("list repetition too large");
    charge(len * size_t(n) * sizeof(value));
    std::vector<value> out;
    for (int64_t i = 0; i < n; i++) out.insert(out.end(), seq.l->begin(), seq.l->end());
    return value::list(std::move(out), seq.tuple);
}

int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

// CPython's float_divmod
void float_divmod(double vx, double wx, double& div_out, double& mod_out) {
    double mod = std::fmod(vx, wx);
    double div = (vx - mod) / wx;
    if (mod != 0) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    } else {
        mod = std::copysign(0.0, wx);
    }
    double floordiv;
    if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = std::copysign(0.0, vx / wx);
    }
    div_out = floordiv;
    mod_out = mod;
}

} // namespace

value binary_op(binop op, const value& a, const value& b) {
    if (a.is_undefined()) fail(a.s ? *a.s : "value is undefined");
    // str % Undefined is python's str % <a mapping>: fine while nothing reads it ('%s' gives "")
    if (op == binop::mod && a.is_string() && b.is_undefined())
        return value::string(py::percent(a.str(), b, a.markup), a.markup);
    if (b.is_undefined()) fail(b.s ? *b.s : "value is undefined");
    const bool ints = a.is_int() && b.is_int();
    const bool nums = a.is_number() && b.is_number();
    switch (op) {
    case binop::add:
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
            return value::integer(r);
        }
        if (nums) return value::floating(a.as_float() + b.as_float());
        if (a.is_string() && b.is_string()) {
            // Markup + str escapes the str, and so does str + Markup
            const bool markup = a.markup || b.markup;
            const std::string left = markup && !a.markup ? py::html_escape(a.str()) : a.str();
            const std::string right = markup && !b.markup ? py::html_escape(b.str()) : b.str();
            check_string_size(left.size() + right.size());
            return value::string(left + right, markup);
        }
        if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
            charge((a.l->size() + b.l->size()) * sizeof(value));
            std::vector<value> out = *a.l;
            out.insert(out.end(), b.l->begin(), b.l->end());
            return value::list(std::move(out), a.tuple);
        }
        bad_operands("+", a, b);
    case binop::sub:
        if (ints) {
            int64_t r;
            if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
            return value::integer(r);
        }
        if (nums) return value::floating(a.as_float() - b.as_float());
        bad_operands("-", a, b);
    case binop::mul:
        if (ints) {
            int64_t r;
            if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
            return value::integer(r);
        }
        if (nums) return value::floating(a.as_float() * b.as_float());
        if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(a, b.as_int());
        if ((b.is_string() || b.is_list()) && a.is_int()) return repeat(b, a.as_int());
        bad_operands("*", a, b);
    case binop::div:
        if (nums) {
            if (b.as_float() == 0) fail("division by zero");
            return value::floating(a.as_float() / b.as_float());
        }
        bad_operands("/", a, b);
    case binop::floordiv:
        if (ints) {
            if (b.as_int() == 0) fail("integer division or modulo by zero");
            if (a.as_int() == INT64_MIN && b.as_int() == -1) fail("integer overflow");
            return value::integer(floordiv(a.as_int(), b.as_int()));
        }
        if (nums) {
            if (b.as_float() == 0) fail("float floor division by zero");
            double d, m;
            float_divmod(a.as_float(), b.as_float(), d, m);
            return value::floating(d);
        }
        bad_operands("//", a, b);
    case binop::mod:
        if (ints) {
            if (b.as_int() == 0) fail("integer division or modulo by zero");
            if (b.as_int() == -1) return value::integer(0);
            return value::integer(a.as_int() - floordiv(a.as_int(), b.as_int()) * b.as_int());
        }
        if (nums) {
            if (b.as_float() == 0) fail("float modulo");
            double d, m;
            float_divmod(a.as_float(), b.as_float(), d, m);
            return value::floating(m);
        }
        if (a.is_string()) return value::string(py::percent(a.str(), b, a.markup), a.markup);
        bad_operands("%", a, b);
    case binop::pow:
        if (ints && b.as_int() >= 0) {
            int64_t base = a.as_int(), e = b.as_int(), r = 1;
            while (e > 0) {
                if (e & 1)
                    if (__builtin_mul_overflow(r, base, &r)) fail("integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
            }
            return value::integer(r);
        }
        if (nums) {
            const double x = a.as_float(), y = b.as_float();
            if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
            if (x < 0 && y != std::floor(y)) fail("a negative number to a fractional power is complex");
            const double r = std::pow(x, y);
            if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) fail("(34, 'Numerical result out of range')");
            return value::floating(r);
        }
        bad_operands("** or pow()", a, b);
    }
    return value::undefined();
}

value slice(evaluator& ev, const value& obj, const value& start, const value& stop, const value& step) {
    // python's obj[start:stop:step]; where python raises TypeError the sandbox gives undefined
    const auto undefined_slice = [&] {
        return value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
    };
    auto idx_ok = [](const value& v) { return v.is_none() || v.is_int(); };
    if (!idx_ok(start) || !idx_ok(stop) || !idx_ok(step))
        return value::undefined("slice indices must be integers or None or have an __index__ method");
    const int64_t st = step.is_none() ? 1 : step.as_int();
    if (st == 0) fail("slice step cannot be zero");
    std::vector<uint32_t> cps;
    int64_t n;
    auto* range = obj.is_object() ? dynamic_cast<range_object*>(obj.o) : nullptr;
    if (obj.is_string()) {
        cps = code_points(obj.str());
        n = int64_t(cps.size());
    } else if (obj.is_list()) {
        n = int64_t(obj.l->size());
    } else if (range) {
        n = range->size();
    } else {
        return undefined_slice();
    }
    auto norm = [&](const value& v, int64_t def) {
        if (v.is_none()) return def;
        int64_t x = v.as_int();
        if (x < 0) x += n;
        if (st > 0) return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = norm(start, st > 0 ? 0 : n - 1);
    const int64_t e = norm(stop, st > 0 ? n : -1);
    if (range) {
        auto* r = ev.make<range_object>();
        r->start = range->start + b * range->step;
        r->stop = range->start + e * range->step;
        r->step = range->step * st;
        return value::obj(r);
    }
    std::vector<int64_t> picks;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(i);
    if (obj.is_string()) {
        std::string out;
        for (int64_t i : picks) utf8_append(out, cps[size_t(i)]);
        return value::string(std::move(out), obj.markup);
    }
    charge(picks.size() * sizeof(value));
    std::vector<value> out;
    out.reserve(picks.size());
    for (int64_t i : picks) out.push_back((*obj.l)[size_t(i)]);
    return value::list(std::move(out), obj.tuple && !obj.group);
}

// ---- attributes and methods ----

namespace {

const char* const dict_methods[] = {"get", "items", "keys", "values", "copy", "fromkeys"};
const char* const dict_unsafe[] = {"pop", "popitem", "setdefault", "update", "clear"};
const char* const list_methods[] = {"count", "index", "copy"};
const char* const list_unsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
const char* const int_methods[] = {"bit_length", "bit_count", "conjugate", "as_integer_ratio"};
const char* const float_methods[] = {"is_integer", "conjugate", "hex", "as_integer_ratio"};

template <size_t N> bool in(const char* const (&names)[N], std::string_view n) {
    for (const char* x : names)
        if (n == x) return true;
    return false;
}

value list_index(const std::vector<value>& items, const call_args& a, bool count) {
    if (a.pos.empty() || !a.kw.empty()) fail(fmt::format("{}() takes exactly one argument", count ? "count" : "index"));
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); i++) {
        if (!equal(items[i], a.pos[0])) continue;
        if (!count) return value::integer(int64_t(i));
        n++;
    }
    if (!count) fail(fmt::format("{} is not in list", to_repr(a.pos[0])));
    return value::integer(n);
}

void no_args(const call_args& a, const std::string& type, const std::string& name) {
    if (!a.pos.empty() || !a.kw.empty())
        fail(fmt::format("{}.{}() takes no arguments ({} given)", type, name, a.pos.size() + a.kw.size()));
}

// A bound method call: self is the tuple (object, name).
value call_method(evaluator& ev, const value& self, call_args& a) {
    const value& obj = self.items()[0];
    const std::string& name = self.items()[1].str();
    if (obj.is_string()) return py::call_str_method(ev, obj, name, a);
    if (obj.is_dict()) {
        const dict_data& d = *obj.d;
        if (name == "get") {
            if (a.pos.empty() || a.pos.size() > 2 || !a.kw.empty())
                fail(fmt::format("get expected 1 or 2 arguments, got {}", a.pos.size()));
            check_hashable(a.pos[0]);
            const value* v = d.find(a.pos[0]);
            return v ? *v : a.pos.size() > 1 ? a.pos[1] : value::none();
        }
        if (name == "fromkeys") {
            if (a.pos.empty() || a.pos.size() > 2) fail("fromkeys expected 1 or 2 arguments");
            dict_data out;
            for (const value& k : ev.iterate(a.pos[0])) {
                check_hashable(k);
                out.set(k, a.pos.size() > 1 ? a.pos[1] : value::none());
            }
            return value::dict(std::move(out));
        }
        no_args(a, "dict", name);
        if (name == "copy") return obj;
        auto* v = ev.make<dict_view_object>();
        v->d = obj.d;
        v->depth = obj.nest;
        v->which = name == "keys"     ? dict_view_object::part::keys
                   : name == "values" ? dict_view_object::part::values
                                      : dict_view_object::part::items;
        return value::obj(v);
    }
    if (obj.is_list()) {
        if (name == "copy") {
            no_args(a, "list", name);
            return obj;
        }
        return list_index(obj.items(), a, name == "count");
    }
    if (obj.is_int() || obj.k == kind::floating) {
        no_args(a, type_name(obj), name);
        if (obj.is_int()) {
            const int64_t v = obj.as_int();
            const uint64_t mag = v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v);
            if (name == "bit_length") return value::integer(mag ? 64 - __builtin_clzll(mag) : 0);
            if (name == "bit_count") return value::integer(__builtin_popcountll(mag));
            if (name == "conjugate") return value::integer(v);
            return value::list({value::integer(v), value::integer(1)}, true);
        }
        const double f = obj.f;
        if (name == "is_integer") return value::boolean(std::isfinite(f) && f == std::floor(f));
        if (name == "conjugate") return obj;
        if (name == "hex") {
            if (!std::isfinite(f)) return value::string(std::isnan(f) ? "nan" : f < 0 ? "-inf" : "inf");
            char buf[64];
            std::snprintf(buf, sizeof buf, "%a", f);
            std::string s = buf; // C: 0x1.8p+1; python: 0x1.8000000000000p+1
            const size_t dot = s.find('.'), p = s.find('p');
            std::string mant = dot == std::string::npos ? "" : s.substr(dot + 1, p - dot - 1);
            mant.resize(13, '0');
            const size_t x = s.find('x');
            return value::string(s.substr(0, x + 2) + "." + mant + s.substr(p));
        }
        if (!std::isfinite(f)) fail("cannot convert Infinity or NaN to integer ratio");
        int e;
        double m = std::frexp(f, &e);
        int64_t num = 0;
        for (int i = 0; i < 300 && m != std::floor(m); i++) {
            m *= 2;
            e--;
        }
        num = int64_t(m);
        int64_t den = 1;
        if (e > 0) {
            if (e > 62) fail("integer overflow");
            num <<= e;
        } else {
            if (-e > 62) fail("integer overflow");
            den <<= -e;
        }
        return value::list({value::integer(num), value::integer(den)}, true);
    }
    if (obj.is_object()) {
        if (auto* loop = dynamic_cast<loop_object*>(obj.o)) {
            if (name == "cycle") {
                if (!a.kw.empty()) fail("cycle() takes no keyword arguments");
                if (a.pos.empty()) fail("no items for cycling given");
                return a.pos[loop->index0 % a.pos.size()];
            }
            // changed(*values)
            const bool changed =
                !loop->changed_last || !equal(value::list(a.pos, true), value::list(*loop->changed_last, true));
            if (changed) loop->changed_last = a.pos;
            return value::boolean(changed);
        }
        if (auto* c = dynamic_cast<cycler_object*>(obj.o)) {
            no_args(a, "Cycler", name);
            if (name == "reset") {
                c->pos = 0;
                return value::none();
            }
            value v = c->items[c->pos];
            c->pos = (c->pos + 1) % c->items.size();
            return v;
        }
        if (auto* r = dynamic_cast<range_object*>(obj.o)) {
            std::vector<value> items = r->iterate();
            if (name == "index" && a.pos.size() == 1 && !list_index(items, a, true).i)
                fail(fmt::format("{} is not in range", to_repr(a.pos[0])));
            return list_index(items, a, name == "count");
        }
    }
    fail(fmt::format("'{}' object has no attribute '{}'", type_name(obj), name));
}

value bound(evaluator& ev, const value& obj, const std::string& name) {
    std::string text = fmt::format("<built-in method {} of {} object at {}>", name, type_name(obj), ev.address());
    return ev.function(name.c_str(), call_method, value::list({obj, value::string(name)}, true), std::move(text));
}

value macro_attr(const macro_object& m, const std::string& name, bool& found) {
    const stmt& d = *m.def;
    found = true;
    if (name == "name") return value::string(m.name);
    if (name == "arguments" || name == "defaults") {
        std::vector<value> out;
        for (const auto& [n, def] : d.params)
            if (name == "arguments") out.push_back(value::string(n));
        if (name == "defaults" &&
            std::any_of(d.params.begin(), d.params.end(), [](const auto& p) { return p.second != nullptr; }))
            fail("Macro.defaults: default values are not available in templates");
        return value::list(std::move(out), true);
    }
    if (name == "catch_kwargs") return value::boolean(d.catch_kwargs);
    if (name == "catch_varargs") return value::boolean(d.catch_varargs);
    if (name == "caller") return value::boolean(d.uses_caller);
    found = false;
    return {};
}

} // namespace

value get_method(evaluator& ev, const value& obj, const std::string& name, bool& found) {
    found = true;
    switch (obj.k) {
    case kind::string:
        if (py::is_str_method(name, obj.markup)) return bound(ev, obj, name);
        break;
    case kind::dict:
        if (in(dict_methods, name) || in(dict_unsafe, name)) return bound(ev, obj, name);
        break;
    case kind::list:
        if (obj.group && (name == "grouper" || name == "list")) return obj.items()[name == "grouper" ? 0 : 1];
        if (name == "count" || name == "index" || (!obj.tuple && (in(list_methods, name) || in(list_unsafe, name))))
            return bound(ev, obj, name);
        break;
    case kind::boolean:
    case kind::integer:
        if (name == "real" || name == "numerator") return value::integer(obj.as_int());
        if (name == "imag") return value::integer(0);
        if (name == "denominator") return value::integer(1);
        if (in(int_methods, name)) return bound(ev, obj, name);
        break;
    case kind::floating:
        if (name == "real") return obj;
        if (name == "imag") return value::floating(0);
        if (in(float_methods, name)) return bound(ev, obj, name);
        break;
    case kind::object:
        if (auto* ns = dynamic_cast<const namespace_object*>(obj.o)) {
            if (const value* v = ns->attrs.find(std::string_view(name))) return *v;
            break;
        }
        if (auto* m = dynamic_cast<const macro_object*>(obj.o)) {
            value v = macro_attr(*m, name, found);
            if (found) return v;
            break;
        }
        if (auto* loop = dynamic_cast<const loop_object*>(obj.o)) {
            const int64_t i = int64_t(loop->index0), n = int64_t(loop->items->size());
            if (name == "index") return value::integer(i + 1);
            if (name == "index0") return value::integer(i);
            if (name == "revindex") return value::integer(n - i);
            if (name == "revindex0") return value::integer(n - i - 1);
            if (name == "first") return value::boolean(i == 0);
            if (name == "last") return value::boolean(i == n - 1);
            if (name == "length") return value::integer(n);
            if (name == "depth") return value::integer(loop->depth0 + 1);
            if (name == "depth0") return value::integer(loop->depth0);
            if (name == "previtem")
                return i > 0 ? (*loop->items)[size_t(i - 1)] : value::undefined("there is no previous item");
            if (name == "nextitem")
                return i + 1 < n ? (*loop->items)[size_t(i + 1)] : value::undefined("there is no next item");
            if (name == "cycle" || name == "changed") return bound(ev, obj, name);
            break;
        }
        if (auto* c = dynamic_cast<const cycler_object*>(obj.o)) {
            if (name == "current") return c->items[c->pos];
            if (name == "pos") return value::integer(int64_t(c->pos));
            if (name == "items") return value::list(c->items, true);
            if (name == "next" || name == "reset") return bound(ev, obj, name);
            break;
        }
        if (auto* j = dynamic_cast<const joiner_object*>(obj.o)) {
            if (name == "sep") return value::string(j->sep);
            if (name == "used") return value::boolean(j->used);
            break;
        }
        if (auto* r = dynamic_cast<const range_object*>(obj.o)) {
            if (name == "start") return value::integer(r->start);
            if (name == "stop") return value::integer(r->stop);
            if (name == "step") return value::integer(r->step);
            if (name == "count" || name == "index") return bound(ev, obj, name);
        }
        break;
    default:
        break;
    }
    found = false;
    return {};
}

bool is_unsafe_method(const value& obj, const std::string& name) {
    return (obj.is_dict() && in(dict_unsafe, name)) || (obj.is_list() && !obj.tuple && in(list_unsafe, name));
}

// ---- globals ----

namespace {

value g_range(evaluator& ev, const value&, call_args& a) {
    if (!a.kw.empty()) fail("range() takes no keyword arguments");
    if (a.pos.empty()) fail("range expected at least 1 argument, got 0");
    if (a.pos.size() > 3) fail(fmt::format("range expected at most 3 arguments, got {}", a.pos.size()));
    auto* r = ev.make<range_object>();
    if (a.pos.size() == 1) {
        r->stop = int_arg(a.pos[0], "range");
    } else {
        r->start = int_arg(a.pos[0], "range");
        r->stop = int_arg(a.pos[1], "range");
        if (a.pos.size() == 3) r->step = int_arg(a.pos[2], "range");
    }
    if (r->step == 0) fail("range() arg 3 must not be zero");
    const double n = std::ceil((double(r->stop) - double(r->start)) / double(r->step));
    if (n > 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    return value::obj(r);
}

// dict(mapping or iterable of pairs, **kwargs)
dict_data dict_from(evaluator& ev, const call_args& a, const char* fn) {
    if (a.pos.size() > 1) fail(fmt::format("{} expected at most 1 argument, got {}", fn, a.pos.size()));
    dict_data d;
    if (!a.pos.empty()) {
        const value& p = a.pos[0];
        if (p.is_dict()) {
            d = *p.d;
        } else {
            for (const value& item : ev.iterate(p)) {
                std::vector<value> pair = ev.iterate(item);
                if (pair.size() != 2)
                    fail(fmt::format("dictionary update sequence element has length {}; 2 is required", pair.size()));
                check_hashable(pair[0]);
                d.set(pair[0], pair[1]);
            }
        }
    }
    for (const auto& [k, v] : a.kw) d.set(value::string(k), v);
    return d;
}

value g_dict(evaluator& ev, const value&, call_args& a) {
    return value::dict(dict_from(ev, a, "dict"));
}

value g_namespace(evaluator& ev, const value&, call_args& a) {
    auto* ns = ev.make<namespace_object>();
    for (auto& [k, v] : dict_from(ev, a, "Namespace").items) ns->set(to_str(k), v);
    return value::obj(ns);
}

value g_joiner(evaluator& ev, const value&, call_args& a) {
    const value* args[1];
    a.bind("Joiner", {"sep"}, 0, args);
    auto* j = ev.make<joiner_object>();
    j->sep = args[0] ? to_str(*args[0]) : ", ";
    j->address = ev.address();
    return value::obj(j);
}

value g_cycler(evaluator& ev, const value&, call_args& a) {
    if (!a.kw.empty()) fail("Cycler() takes no keyword arguments");
    if (a.pos.empty()) fail("at least one item has to be provided");
    auto* c = ev.make<cycler_object>();
    c->items = a.pos;
    c->address = ev.address();
    return value::obj(c);
}

value g_raise_exception(evaluator&, const value&, call_args& a) {
    if (a.pos.size() != 1 || !a.kw.empty())
        fail(fmt::format("raise_exception() takes 1 positional argument but {} were given", a.pos.size()));
    fail(to_str(a.pos[0]));
}

value g_strftime_now(evaluator& ev, const value&, call_args& a) {
    // datetime.now().strftime(fmt): a naive local time, so %z and %Z are empty; %f is the microseconds
    if (a.pos.size() != 1 || !a.kw.empty()) fail("strftime_now() takes exactly one argument");
    if (!a.pos[0].is_string()) fail("strftime() argument 1 must be str");
    const std::string& f = a.pos[0].str();
    std::string c_fmt;
    for (size_t i = 0; i < f.size(); i++) {
        if (f[i] == '%' && i + 1 < f.size()) {
            const char c = f[i + 1];
            if (c == 'z' || c == 'Z') {
                i++;
                continue;
            }
            if (c == 'f') {
                c_fmt += "000000";
                i++;
                continue;
            }
            c_fmt += f[i];
            c_fmt += f[++i];
            continue;
        }
        c_fmt += f[i];
    }
    c_fmt += '.'; // a non-empty result, so 0 from strftime means "too small"
    const std::tm tm = ev.now();
    std::string buf(c_fmt.size() * 8 + 64, '\0');
    size_t n = 0;
    while ((n = std::strftime(buf.data(), buf.size(), c_fmt.c_str(), &tm)) == 0) {
        if (buf.size() > (1u << 20)) fail("strftime_now: the formatted time is too long");
        buf.resize(buf.size() * 2);
    }
    buf.resize(n - 1);
    return value::string(std::move(buf));
}

value g_lipsum(evaluator& ev, const value&, call_args& a) {
    // jinja2's generate_lorem_ipsum with its word list; python's random module cannot be matched, so the draws come
    // from a fixed-seed generator (the text differs from python's, which differs between runs anyway)
    static const char* const words =
        "a ac accumsan ad adipiscing aenean aliquam aliquet amet ante aptent arcu at auctor augue bibendum blandit "
        "class commodo condimentum congue consectetuer consequat conubia convallis cras cubilia cum curabitur curae "
        "cursus dapibus diam dictum dictumst dignissim dis dolor donec dui duis egestas eget eleifend elementum elit "
        "enim erat eros est et etiam eu euismod facilisi facilisis fames faucibus felis fermentum feugiat fringilla "
        "fusce gravida habitant habitasse hac hendrerit hymenaeos iaculis id imperdiet in inceptos integer interdum "
        "ipsum justo lacinia lacus laoreet lectus leo libero ligula litora lobortis lorem luctus maecenas magna magnis "
        "malesuada massa mattis mauris metus mi molestie mollis montes morbi mus nam nascetur natoque nec neque netus "
        "nibh nisi nisl non nonummy nostra nulla nullam nunc odio orci ornare parturient pede pellentesque penatibus "
        "per pharetra phasellus placerat platea porta porttitor posuere potenti praesent pretium primis proin pulvinar "
        "purus quam quis quisque rhoncus ridiculus risus rutrum sagittis sapien scelerisque sed sem semper senectus "
        "sit "
        "sociis sociosqu sodales sollicitudin suscipit suspendisse taciti tellus tempor tempus tincidunt torquent "
        "tortor tristique turpis ullamcorper ultrices ultricies urna ut varius vehicula vel velit venenatis vestibulum "
        "vitae vivamus viverra volutpat vulputate";
    static const std::vector<std::string> list = [] {
        std::vector<std::string> out;
        for (const auto& w : py::split(words, nullptr, -1, false)) out.push_back(w);
        return out;
    }();
    const value* args[4];
    a.bind("generate_lorem_ipsum", {"n", "html", "min", "max"}, 0, args);
    const int64_t n = args[0] ? int_arg(*args[0], "lipsum") : 5;
    const bool html = args[1] ? truthy(*args[1]) : true;
    const int64_t lo = args[2] ? int_arg(*args[2], "lipsum") : 20, hi = args[3] ? int_arg(*args[3], "lipsum") : 100;
    if (hi <= lo) fail("empty range for randrange()");
    uint64_t state = 0x9e3779b97f4a7c15ull;
    auto rand_below = [&](int64_t k) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return int64_t((state >> 33) % uint64_t(k));
    };
    std::vector<std::string> paragraphs;
    for (int64_t p = 0; p < std::min<int64_t>(n, 10000); p++) {
        ev.step();
        bool next_capitalized = true;
        int64_t last_comma = 0, last_fullstop = 0;
        std::string last, text;
        const int64_t count = lo + rand_below(hi - lo);
        for (int64_t idx = 0; idx < count; idx++) {
            std::string word;
            do word = list[size_t(rand_below(int64_t(list.size())))];
            while (word == last);
            last = word;
            if (next_capitalized) {
                word = py::capitalize(word);
                next_capitalized = false;
            }
            if (idx - (3 + rand_below(5)) > last_comma) {
                last_comma = idx;
                last_fullstop += 2;
                word += ",";
            }
            if (idx - (10 + rand_below(10)) > last_fullstop) {
                last_comma = last_fullstop = idx;
                word += ".";
                next_capitalized = true;
            }
            text += (text.empty() ? "" : " ") + word;
            check_string_size(text.size());
        }
        if (!text.empty() && text.back() == ',')
            text.back() = '.';
        else if (text.empty() || text.back() != '.')
            text += ".";
        paragraphs.push_back(std::move(text));
    }
    std::string out;
    for (size_t i = 0; i < paragraphs.size(); i++) {
        if (html)
            out += (i ? "\n<p>" : "<p>") + py::html_escape(paragraphs[i]) + "</p>";
        else
            out += (i ? "\n\n" : "") + paragraphs[i];
        check_string_size(out.size());
    }
    return value::string(std::move(out), html);
}

} // namespace

void add_globals(evaluator& ev, scope& globals) {
    globals.set("range", ev.function("range", g_range, {}, "<class 'range'>", "type"));
    globals.set("dict", ev.function("dict", g_dict, {}, "<class 'dict'>", "type"));
    globals.set("namespace", ev.function("namespace", g_namespace, {}, "<class 'jinja2.utils.Namespace'>", "type"));
    globals.set("joiner", ev.function("joiner", g_joiner, {}, "<class 'jinja2.utils.Joiner'>", "type"));
    globals.set("cycler", ev.function("cycler", g_cycler, {}, "<class 'jinja2.utils.Cycler'>", "type"));
    globals.set("lipsum", ev.function("lipsum", g_lipsum, {}, "<function generate_lorem_ipsum at " + ev.address() + ">",
                                      "function"));
    globals.set("raise_exception", ev.function("raise_exception", g_raise_exception, {},
                                               "<function raise_exception at " + ev.address() + ">", "function"));
    globals.set("strftime_now", ev.function("strftime_now", g_strftime_now, {},
                                            "<function strftime_now at " + ev.address() + ">", "function"));
}

} // namespace tessera::jinja
