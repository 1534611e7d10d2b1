// filters.cpp: jinja2 3.1's filters and tests, each following its python source (jinja2/filters.py, tests.py) with
// transformers' tojson in place of jinja2's: the same signatures (too many, unknown or missing arguments fail), the
// same laziness (map, select, unique, batch, items... give one-shot generators), python's comparisons for sort / min /
// max / unique / groupby, soft_str (Markup kept) where jinja2 keeps it. Tables at the end.
#include "llm/jinja/evaluator.h"
#include "llm/jinja/pystr.h"
#include "llm/jinja/unicode_db.h"

#include "llm/unicode.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace tessera::jinja {

namespace {

// ---- helpers ----

int64_t int_arg(const value& v, std::string_view what) {
    if (!v.is_int()) fail(fmt::format("{}: '{}' object cannot be interpreted as an integer", what, type_name(v)));
    return v.as_int();
}

value str_value(std::string s, bool markup = false) {
    return value::string(std::move(s), markup);
}

// soft_str: a str (or Markup) stays itself, anything else becomes str(value)
value soft_str(const value& v) {
    return v.is_string() ? v : str_value(to_str(v));
}

// jinja2 calls str methods on the filter's subject; a non-str subject fails as python would
const std::string& need_str(const value& v, std::string_view filter) {
    if (!v.is_string()) fail(fmt::format("{}: expected a str, got '{}'", filter, type_name(v)));
    return v.str();
}

// make_attrgetter's parts: "a.b.0" -> "a", "b", 0; an integer attribute is itself
std::vector<value> attribute_parts(const value& attribute) {
    std::vector<value> parts;
    if (attribute.is_none()) return parts;
    if (!attribute.is_string()) {
        parts.push_back(attribute);
        return parts;
    }
    const std::string& s = attribute.str();
    size_t start = 0;
    while (true) {
        const size_t dot = s.find('.', start);
        const std::string part = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        const bool digits = !part.empty() && part.size() < 19 &&
                            std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        parts.push_back(digits ? value::integer(std::stoll(part)) : str_value(part));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return parts;
}

value ignore_case(const value& v) {
    return v.is_string() ? str_value(py::lower(v.str())) : v;
}

struct attrgetter {
    std::vector<value> parts;
    bool lower = false;
    value def; // undefined: none
    value operator()(evaluator& ev, value item) const {
        for (const value& p : parts) {
            item = ev.get_item(item, p);
            if (!def.is_undefined() && item.is_undefined()) item = def;
        }
        return lower ? ignore_case(item) : item;
    }
};

attrgetter make_attrgetter(const value* attribute, bool lower, value def = {}) {
    return {attribute ? attribute_parts(*attribute) : std::vector<value>{}, lower, std::move(def)};
}

// make_multi_attrgetter: "a,b" -> the list of both keys; no attribute -> [item]
value multi_key(evaluator& ev, const value* attribute, bool lower, const value& item) {
    std::vector<value> keys;
    if (attribute && attribute->is_string()) {
        const value comma = str_value(",");
        for (const std::string& part : py::split(attribute->str(), &comma, -1, false)) {
            const value name = str_value(part);
            keys.push_back(make_attrgetter(&name, lower)(ev, item));
        }
    } else {
        keys.push_back(make_attrgetter(attribute, lower)(ev, item));
    }
    return value::list(std::move(keys));
}

bool less(const value& a, const value& b) {
    return compare(a, b, "<") < 0;
}

// python's sorted(items, key, reverse): stable, `<` only
std::vector<value> sorted_by(std::vector<value> items, std::vector<value> keys, bool reverse) {
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]); });
    std::vector<value> out;
    out.reserve(items.size());
    for (size_t i : order) out.push_back(std::move(items[i]));
    return out;
}

// a generator whose items `fill` makes; an error while making them is kept for the first read
template <class F> value lazy(evaluator& ev, const char* label, F fill) {
    std::vector<value> items;
    try {
        fill(items);
    } catch (eval_error& e) {
        value g = ev.generator({}, label);
        static_cast<generator_object*>(g.o)->error = std::move(e);
        return g;
    }
    return ev.generator(std::move(items), label);
}

// ---- filters ----

value f_abs(evaluator&, const value& v, call_args& a) {
    const value* args[1];
    a.bind("abs", {"x"}, 0, args);
    if (v.k == kind::floating) return value::floating(std::fabs(v.f));
    if (v.is_int()) {
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return value::integer(std::llabs(v.as_int()));
    }
    fail(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

value f_attr(evaluator& ev, const value& v, call_args& a) {
    const value* args[1];
    a.bind("do_attr", {"name"}, 1, args);
    if (v.is_undefined()) fail(v.s ? *v.s : "value is undefined");
    const std::string name = to_str(*args[0]);
    bool found = false;
    get_method(ev, v, name, found);
    if (!found) return value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(v), name));
    return ev.get_attr(v, name);
}

value f_batch(evaluator& ev, const value& v, call_args& a) {
    const value* args[2];
    a.bind("do_batch", {"linecount", "fill_with"}, 1, args);
    const int64_t n = int_arg(*args[0], "batch");
    const value fill = args[1] ? *args[1] : value::none();
    return lazy(ev, "generator object do_batch", [&](std::vector<value>& out) {
        std::vector<value> tmp;
        for (const value& item : ev.iterate(v)) {
            if (int64_t(tmp.size()) == n) {
                out.push_back(value::list(std::move(tmp)));
                tmp.clear();
            }
            tmp.push_back(item);
        }
        if (!tmp.empty()) {
            if (!fill.is_none())
                while (int64_t(tmp.size()) < n) tmp.push_back(fill);
            out.push_back(value::list(std::move(tmp)));
        }
    });
}

value f_capitalize(evaluator&, const value& v, call_args& a) {
    a.bind("do_capitalize", {}, 0, nullptr);
    const value s = soft_str(v);
    return str_value(py::capitalize(s.str()), s.markup);
}

value f_center(evaluator&, const value& v, call_args& a) {
    const value* args[1];
    a.bind("do_center", {"width"}, 0, args);
    const value s = soft_str(v);
    return str_value(py::justify(s.str(), args[0] ? int_arg(*args[0], "center") : 80, " ", 0), s.markup);
}

value f_length(evaluator& ev, const value& v, call_args& a) {
    a.bind("len", {}, 0, nullptr);
    const auto n = ev.length(v);
    if (!n) fail(fmt::format("object of type '{}' has no len()", type_name(v)));
    return value::integer(*n);
}

value f_default(evaluator&, const value& v, call_args& a) {
    const value* args[2];
    a.bind("do_default", {"default_value", "boolean"}, 0, args);
    const bool boolean = args[1] && truthy(*args[1]);
    if (v.is_undefined() || (boolean && !truthy(v))) return args[0] ? *args[0] : str_value("");
    return v;
}

value f_dictsort(evaluator&, const value& v, call_args& a) {
    const value* args[3];
    a.bind("do_dictsort", {"case_sensitive", "by", "reverse"}, 0, args);
    const bool cs = args[0] && truthy(*args[0]);
    const value by = args[1] ? *args[1] : str_value("key");
    const bool reverse = args[2] && truthy(*args[2]);
    int pos = -1;
    if (by.is_string() && by.str() == "key")
        pos = 0;
    else if (by.is_string() && by.str() == "value")
        pos = 1;
    else
        fail("You can only sort by either \"key\" or \"value\"");
    if (!v.is_dict()) fail(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
    std::vector<value> items, keys;
    for (const auto& [k, x] : v.d->items) {
        items.push_back(value::list({k, x}, true));
        keys.push_back(cs ? (pos ? x : k) : ignore_case(pos ? x : k));
    }
    return value::list(sorted_by(std::move(items), std::move(keys), reverse));
}

value f_escape(evaluator&, const value& v, call_args& a) {
    a.bind("escape", {}, 0, nullptr);
    if (v.is_string() && v.markup) return v;
    return str_value(py::html_escape(to_str(v)), true);
}

value f_forceescape(evaluator&, const value& v, call_args& a) {
    a.bind("do_forceescape", {}, 0, nullptr);
    return str_value(py::html_escape(to_str(v)), true);
}

// python's float(str): whitespace around, '_' between digits, inf / nan / infinity in any case
bool parse_float(const std::string& text, double& out) {
    std::string t = py::strip(text, nullptr, true, true);
    std::string clean;
    for (size_t i = 0; i < t.size(); i++) {
        if (t[i] == '_') {
            if (i == 0 || i + 1 >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i - 1])) ||
                !std::isdigit(static_cast<unsigned char>(t[i + 1])))
                return false;
            continue;
        }
        clean += t[i];
    }
    if (clean.empty()) return false;
    std::string body = clean[0] == '+' || clean[0] == '-' ? clean.substr(1) : clean;
    const std::string low = py::lower(body);
    if (low == "inf" || low == "infinity" || low == "nan") {
        out = low == "nan" ? NAN : HUGE_VAL;
        if (clean[0] == '-') out = -out;
        return true;
    }
    for (char c : body)
        if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-')
            return false;
    char* end = nullptr;
    errno = 0;
    out = std::strtod(clean.c_str(), &end);
    return end && !*end && end != clean.c_str();
}

// python's int(str, base)
bool parse_int(const std::string& text, int base, int64_t& out, bool& overflow) {
    overflow = false;
    std::string t = py::strip(text, nullptr, true, true);
    if (t.empty()) return false;
    bool neg = false;
    size_t p = 0;
    if (t[0] == '+' || t[0] == '-') {
        neg = t[0] == '-';
        p = 1;
    }
    auto prefix = [&](char c) { return p + 1 < t.size() && t[p] == '0' && (t[p + 1] | 0x20) == c; };
    if (base == 0) {
        if (prefix('x'))
            base = 16, p += 2;
        else if (prefix('o'))
            base = 8, p += 2;
        else if (prefix('b'))
            base = 2, p += 2;
        else
            base = 10;
        if (p < t.size() && t[p] == '_') p++;
    } else if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) || (base == 2 && prefix('b'))) {
        p += 2;
        if (p < t.size() && t[p] == '_') p++;
    }
    if (base < 2 || base > 36) return false; // python's ValueError: do_int falls back to its default
    if (p >= t.size()) return false;
    unsigned __int128 acc = 0;
    bool prev_digit = false;
    for (; p < t.size(); p++) {
        const char c = t[p];
        if (c == '_') {
            if (!prev_digit || p + 1 >= t.size()) return false;
            prev_digit = false;
            continue;
        }
        const int d = c >= '0' && c <= '9'                     ? c - '0'
                      : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                               : 99;
        if (d >= base) return false;
        acc = acc * unsigned(base) + unsigned(d);
        if (acc > (unsigned __int128)(uint64_t(INT64_MAX)) + 1)
            overflow = true, acc = (unsigned __int128)(uint64_t(INT64_MAX)) + 2;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    if (!neg && acc > uint64_t(INT64_MAX)) overflow = true;
    if (overflow) return true;
    out = neg ? -int64_t(uint64_t(acc) - 1) - 1 : int64_t(uint64_t(acc));
    if (neg && acc == 0) out = 0;
    return true;
}

value f_filesizeformat(evaluator&, const value& v, call_args& a) {
    const value* args[1];
    a.bind("do_filesizeformat", {"binary"}, 0, args);
    const bool binary = args[0] && truthy(*args[0]);
    double bytes;
    if (v.is_number())
        bytes = v.as_float();
    else if (!v.is_string() || !parse_float(v.str(), bytes))
        fail(fmt::format("could not convert {} to float", to_repr(v)));
    const double base = binary ? 1024 : 1000;
    static const char* const dec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    static const char* const bin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    if (bytes == 1) return str_value("1 Byte");
    if (bytes < base) {
        if (!std::isfinite(bytes)) fail("cannot convert float to integer");
        return str_value(fmt::format("{} Bytes", int64_t(bytes)));
    }
    double unit = base;
    for (int i = 0; i < 8; i++) {
        unit = std::pow(base, i + 2);
        if (bytes < unit || i == 7)
            return str_value(fmt::format("{} {}", py::format_value(value::floating(base * bytes / unit), ".1f"),
                                         binary ? bin[i] : dec[i]));
    }
    return value::undefined();
}

value f_first(evaluator& ev, const value& v, call_args& a) {
    a.bind("sync_do_first", {}, 0, nullptr);
    if (v.is_object())
        if (auto* g = dynamic_cast<generator_object*>(v.o)) {
            auto x = g->next();
            return x ? *x : value::undefined("No first item, sequence was empty.");
        }
    const std::vector<value> items = ev.iterate(v);
    return items.empty() ? value::undefined("No first item, sequence was empty.") : items.front();
}

value f_float(evaluator&, const value& v, call_args& a) {
    const value* args[1];
    a.bind("do_float", {"default"}, 0, args);
    const value def = args[0] ? *args[0] : value::floating(0.0);
    if (v.is_undefined()) fail(v.s ? *v.s : "value is undefined"); // float(Undefined) raises, uncaught
    if (v.is_number()) return value::floating(v.as_float());
    double d;
    if (v.is_string() && parse_float(v.str(), d)) return value::floating(d);
    return def;
}

value f_format(evaluator&, const value& v, call_args& a) {
    if (!a.pos.empty() && !a.kw.empty()) fail("can't handle positional and keyword arguments at the same time");
    const value s = soft_str(v);
    if (!a.kw.empty()) {
        dict_data d;
        for (const auto& [k, x] : a.kw) d.set(str_value(k), x);
        return str_value(py::percent(s.str(), value::dict(std::move(d)), s.markup), s.markup);
    }
    return str_value(py::percent(s.str(), value::list(a.pos, true), s.markup), s.markup);
}

value f_groupby(evaluator& ev, const value& v, call_args& a) {
    const value* args[3];
    a.bind("do_groupby", {"attribute", "default", "case_sensitive"}, 1, args);
    const bool cs = args[2] && truthy(*args[2]);
    const value def = args[1] && !args[1]->is_none() ? *args[1] : value::undefined();
    const attrgetter key = make_attrgetter(args[0], !cs, def);
    const attrgetter real_key = make_attrgetter(args[0], false, def);
    std::vector<value> items = ev.iterate(v), keys;
    for (const value& x : items) keys.push_back(key(ev, x));
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return less(keys[x], keys[y]); });
    std::vector<value> out;
    for (size_t i = 0; i < order.size();) {
        std::vector<value> group;
        size_t j = i;
        while (j < order.size() && equal(keys[order[j]], keys[order[i]])) group.push_back(items[order[j++]]);
        value grouper = cs ? keys[order[i]] : real_key(ev, group.front());
        value t = value::list({grouper, value::list(std::move(group))}, true);
        t.group = true;
        out.push_back(std::move(t));
        i = j;
    }
    return value::list(std::move(out));
}

value f_indent(evaluator&, const value& v, call_args& a) {
    const value* args[3];
    a.bind("do_indent", {"width", "first", "blank"}, 0, args);
    if (!v.is_string()) fail(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
    const value width = args[0] ? *args[0] : value::integer(4);
    const bool first = args[1] && truthy(*args[1]);
    const bool blank = args[2] && truthy(*args[2]);
    const int64_t n_spaces = width.is_string() ? 0 : std::clamp<int64_t>(int_arg(width, "indent"), 0, int64_t(1) << 40);
    check_string_size(size_t(n_spaces));
    std::string ind = width.is_string() ? width.str() : std::string(size_t(n_spaces), ' ');
    if (v.markup && width.is_string()) ind = py::html_escape(ind);
    const std::vector<std::string> lines = py::splitlines(v.str() + "\n", false);
    std::string out;
    for (size_t i = 0; i < lines.size(); i++) {
        if (i) out += "\n";
        if (i && (blank || !lines[i].empty())) out += ind;
        out += lines[i];
        check_string_size(out.size());
    }
    return str_value(first ? ind + out : out, v.markup);
}

value f_int(evaluator&, const value& v, call_args& a) {
    const value* args[2];
    a.bind("do_int", {"default", "base"}, 0, args);
    const value def = args[0] ? *args[0] : value::integer(0);
    if (v.is_undefined()) fail(v.s ? *v.s : "value is undefined"); // int(Undefined) raises, uncaught
    if (v.is_int()) return value::integer(v.as_int());
    if (v.k == kind::floating) {
        if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
        return value::integer(int64_t(std::trunc(v.f)));
    }
    if (v.is_string()) {
        const int base = int(args[1] ? int_arg(*args[1], "int") : 10);
        int64_t r;
        bool overflow;
        if (parse_int(v.str(), base, r, overflow)) {
            if (overflow) fail("integer overflow");
            return value::integer(r);
        }
        double d;
        if (parse_float(v.str(), d) && std::isfinite(d)) {
            if (std::fabs(d) >= 9.2e18) fail("integer overflow");
            return value::integer(int64_t(std::trunc(d)));
        }
    }
    return def;
}

value f_items(evaluator& ev, const value& v, call_args& a) {
    a.bind("do_items", {}, 0, nullptr);
    if (v.is_undefined()) return ev.generator({}, "generator object do_items");
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    std::vector<value> out;
    for (const auto& [k, x] : v.d->items) out.push_back(value::list({k, x}, true));
    return ev.generator(std::move(out), "generator object do_items");
}

value f_join(evaluator& ev, const value& v, call_args& a) {
    const value* args[2];
    a.bind("sync_do_join", {"d", "attribute"}, 0, args);
    const std::string sep = args[0] ? to_str(*args[0]) : "";
    const attrgetter get = make_attrgetter(args[1], false);
    std::string out;
    bool first = true;
    for (const value& x : ev.iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(args[1] && !args[1]->is_none() ? get(ev, x) : x);
        check_string_size(out.size());
    }
    return str_value(std::move(out));
}

value f_last(evaluator& ev, const value& v, call_args& a) {
    a.bind("do_last", {}, 0, nullptr);
    if (v.is_object() && dynamic_cast<generator_object*>(v.o))
        fail(fmt::format("'{}' object is not reversible", type_name(v)));
    if (!v.is_undefined() && !v.is_string() && !v.is_list() && !v.is_dict() && !(v.is_object() && v.o->iterable()))
        fail(fmt::format("'{}' object is not reversible", type_name(v)));
    const std::vector<value> items = ev.iterate(v);
    return items.empty() ? value::undefined("No last item, sequence was empty.") : items.back();
}

value f_list(evaluator& ev, const value& v, call_args& a) {
    a.bind("sync_do_list", {}, 0, nullptr);
    return value::list(ev.iterate(v));
}

value f_lower(evaluator&, const value& v, call_args& a) {
    a.bind("do_lower", {}, 0, nullptr);
    const value s = soft_str(v);
    return str_value(py::lower(s.str()), s.markup);
}

value f_upper(evaluator&, const value& v, call_args& a) {
    a.bind("do_upper", {}, 0, nullptr);
    const value s = soft_str(v);
    return str_value(py::upper(s.str()), s.markup);
}

value f_map(evaluator& ev, const value& v, call_args& a) {
    return lazy(ev, "generator object sync_do_map", [&](std::vector<value>& out) {
        if (!truthy(v)) return;
        std::vector<value> items = ev.iterate(v);
        if (a.pos.empty() && a.keyword("attribute")) {
            value attribute, def;
            for (const auto& [k, x] : a.kw) {
                if (k == "attribute")
                    attribute = x;
                else if (k == "default")
                    def = x;
                else
                    fail(fmt::format("Unexpected keyword argument '{}'", k));
            }
            const attrgetter get = make_attrgetter(&attribute, false, def.is_none() ? value::undefined() : def);
            for (const value& x : items) out.push_back(get(ev, x));
            return;
        }
        if (a.pos.empty()) fail("map requires a filter argument");
        const std::string name = to_str(a.pos[0]);
        for (const value& x : items) {
            call_args rest;
            rest.pos.assign(a.pos.begin() + 1, a.pos.end());
            rest.kw = a.kw;
            out.push_back(ev.filter(name, x, rest));
        }
    });
}

value min_max(evaluator& ev, const value& v, call_args& a, bool max) {
    const value* args[2];
    a.bind(max ? "do_max" : "do_min", {"case_sensitive", "attribute"}, 0, args);
    const bool cs = args[0] && truthy(*args[0]);
    std::vector<value> items = ev.iterate(v);
    if (items.empty()) return value::undefined("No aggregated item, sequence was empty.");
    const attrgetter key = make_attrgetter(args[1], !cs);
    size_t best = 0;
    value best_key = key(ev, items[0]);
    for (size_t i = 1; i < items.size(); i++) {
        value k = key(ev, items[i]);
        if (max ? compare(k, best_key, ">") > 0 : compare(k, best_key, "<") < 0) {
            best = i;
            best_key = std::move(k);
        }
    }
    return items[best];
}
value f_min(evaluator& ev, const value& v, call_args& a) {
    return min_max(ev, v, a, false);
}
value f_max(evaluator& ev, const value& v, call_args& a) {
    return min_max(ev, v, a, true);
}

// pprint.pformat for what fits on one line: repr with dict keys sorted
std::string pformat(const value& v) {
    if (v.is_dict()) {
        std::vector<std::pair<value, value>> items = v.d->items;
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& x, const auto& y) { return less(x.first, y.first); });
        std::string out = "{";
        for (size_t i = 0; i < items.size(); i++)
            out += (i ? ", " : "") + pformat(items[i].first) + ": " + pformat(items[i].second);
        return out + "}";
    }
    if (v.is_list() && !v.group) {
        std::string out = v.tuple ? "(" : "[";
        for (size_t i = 0; i < v.l->size(); i++) out += (i ? ", " : "") + pformat((*v.l)[i]);
        if (v.tuple && v.l->size() == 1) out += ",";
        return out + (v.tuple ? ")" : "]");
    }
    return to_repr(v);
}

value f_pprint(evaluator&, const value& v, call_args& a) {
    a.bind("do_pprint", {}, 0, nullptr);
    return str_value(pformat(v));
}

value f_random(evaluator& ev, const value& v, call_args& a) {
    // random.choice cannot be matched; a fixed-seed pick from the render's step count
    a.bind("do_random", {}, 0, nullptr);
    std::vector<value> items = ev.iterate(v);
    if (items.empty()) return value::undefined("No random item, sequence was empty.");
    return items[(items.size() * 2654435761u + 12345u) % items.size()];
}

value select_impl(evaluator& ev, const value& v, call_args& a, bool attr, bool keep) {
    return lazy(ev, "generator object select_or_reject", [&](std::vector<value>& out) {
        if (!truthy(v)) return;
        size_t off = 0;
        attrgetter get;
        if (attr) {
            if (a.pos.empty()) fail("Missing parameter for attribute name");
            get = make_attrgetter(&a.pos[0], false);
            off = 1;
        }
        for (const value& x : ev.iterate(v)) {
            const value subject = attr ? get(ev, x) : x;
            bool ok;
            if (a.pos.size() > off) {
                call_args rest;
                rest.pos.assign(a.pos.begin() + long(off) + 1, a.pos.end());
                rest.kw = a.kw;
                ok = ev.test(to_str(a.pos[off]), subject, rest);
            } else {
                ok = truthy(subject);
            }
            if (ok == keep) out.push_back(x);
        }
    });
}
value f_select(evaluator& ev, const value& v, call_args& a) {
    return select_impl(ev, v, a, false, true);
}
value f_reject(evaluator& ev, const value& v, call_args& a) {
    return select_impl(ev, v, a, false, false);
}
value f_selectattr(evaluator& ev, const value& v, call_args& a) {
    return select_impl(ev, v, a, true, true);
}
value f_rejectattr(evaluator& ev, const value& v, call_args& a) {
    return select_impl(ev, v, a, true, false);
}

value f_replace(evaluator&, const value& v, call_args& a) {
    const value* args[3];
    a.bind("do_replace", {"old", "new", "count"}, 2, args);
    const int64_t count = args[2] && !args[2]->is_none() ? int_arg(*args[2], "replace") : -1;
    return str_value(py::replace(to_str(v), to_str(*args[0]), to_str(*args[1]), count));
}

value f_reverse(evaluator& ev, const value& v, call_args& a) {
    a.bind("do_reverse", {}, 0, nullptr);
    if (v.is_string()) {
        std::vector<uint32_t> cps = code_points(v.str());
        std::reverse(cps.begin(), cps.end());
        return str_value(from_code_points(cps, 0, cps.size()), v.markup);
    }
    const bool reversible =
        v.is_list() || v.is_dict() || v.is_undefined() ||
        (v.is_object() && (dynamic_cast<range_object*>(v.o) || dynamic_cast<dict_view_object*>(v.o)));
    std::vector<value> items = ev.iterate(v);
    std::reverse(items.begin(), items.end());
    if (!reversible) return value::list(std::move(items)); // list(value) reversed
    const char* kind = v.is_list()        ? (v.tuple ? "tuple_reverseiterator" : "list_reverseiterator")
                       : v.is_dict()      ? "dict_reversekeyiterator"
                       : v.is_undefined() ? "reversed"
                                          : "range_iterator";
    return ev.generator(std::move(items), (std::string(kind) + " object").c_str(), kind);
}

value f_round(evaluator&, const value& v, call_args& a) {
    const value* args[2];
    a.bind("do_round", {"precision", "method"}, 0, args);
    const int64_t precision = args[0] ? int_arg(*args[0], "round") : 0;
    const std::string method = args[1] ? to_str(*args[1]) : "common";
    if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
    if (!v.is_number()) fail(fmt::format("type {} doesn't define __round__ method", type_name(v)));
    if (method == "common") {
        if (v.is_int()) {
            if (precision >= 0) return value::integer(v.as_int());
            // round(int, -n): to a multiple of 10^n, halves to even
            if (precision < -18) return value::integer(0);
            int64_t m = 1;
            for (int64_t i = 0; i < -precision; i++) m *= 10;
            const int64_t x = v.as_int();
            int64_t q = x / m, r = x % m;
            if (r < 0) {
                q--;
                r += m;
            }
            if (2 * r > m || (2 * r == m && (q & 1))) q++;
            return value::integer(q * m);
        }
        if (!std::isfinite(v.f)) return v;
        if (precision > 300) return v;
        if (precision < -308) return value::floating(std::copysign(0.0, v.f));
        if (precision >= 0) {
            const std::string s = py::format_value(v, fmt::format(".{}f", precision));
            return value::floating(std::strtod(s.c_str(), nullptr));
        }
        const double m = std::pow(10.0, double(-precision));
        const double y = v.f / m;
        double z = std::nearbyint(y);
        return value::floating(z * m);
    }
    const double m = std::pow(10.0, double(precision));
    const double x = v.as_float() * m;
    return value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / m);
}

value f_safe(evaluator&, const value& v, call_args& a) {
    a.bind("do_mark_safe", {}, 0, nullptr);
    return str_value(to_str(v), true);
}

value f_slice(evaluator& ev, const value& v, call_args& a) {
    const value* args[2];
    a.bind("do_slice", {"slices", "fill_with"}, 1, args);
    const int64_t slices = int_arg(*args[0], "slice");
    const value fill = args[1] ? *args[1] : value::none();
    return lazy(ev, "generator object sync_do_slice", [&](std::vector<value>& out) {
        const std::vector<value> seq = ev.iterate(v);
        const int64_t length = int64_t(seq.size());
        if (slices == 0) fail("integer division or modulo by zero");
        const int64_t per = length / slices - (length % slices != 0 && (length < 0) != (slices < 0) ? 1 : 0);
        int64_t extra = length % slices;
        if (extra != 0 && (extra < 0) != (slices < 0)) extra += slices;
        int64_t offset = 0;
        for (int64_t k = 0; k < std::min<int64_t>(slices, 1 << 20); k++) {
            ev.step();
            const int64_t start = offset + k * per;
            if (k < extra) offset++;
            const int64_t end = offset + (k + 1) * per;
            std::vector<value> tmp;
            for (int64_t i = std::clamp<int64_t>(start, 0, length); i < std::clamp<int64_t>(end, 0, length); i++)
                tmp.push_back(seq[size_t(i)]);
            if (!fill.is_none() && k >= extra) tmp.push_back(fill);
            out.push_back(value::list(std::move(tmp)));
        }
    });
}

value f_sort(evaluator& ev, const value& v, call_args& a) {
    const value* args[3];
    a.bind("do_sort", {"reverse", "case_sensitive", "attribute"}, 0, args);
    const bool reverse = args[0] && truthy(*args[0]);
    const bool cs = args[1] && truthy(*args[1]);
    std::vector<value> items = ev.iterate(v), keys;
    for (const value& x : items)
        keys.push_back(multi_key(ev, args[2] && !args[2]->is_none() ? args[2] : nullptr, !cs, x));
    return value::list(sorted_by(std::move(items), std::move(keys), reverse));
}

value f_string(evaluator&, const value& v, call_args& a) {
    a.bind("soft_str", {}, 0, nullptr);
    return soft_str(v);
}

value f_striptags(evaluator& ev, const value& v, call_args& a) {
    a.bind("do_striptags", {}, 0, nullptr);
    call_args none;
    return py::call_str_method(ev, str_value(to_str(v), true), "striptags", none);
}

value f_sum(evaluator& ev, const value& v, call_args& a) {
    const value* args[2];
    a.bind("sync_do_sum", {"attribute", "start"}, 0, args);
    value total = args[1] ? *args[1] : value::integer(0);
    if (total.is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
    const attrgetter get = make_attrgetter(args[0], false);
    for (const value& x : ev.iterate(v))
        total = binary_op(binop::add, total, args[0] && !args[0]->is_none() ? get(ev, x) : x);
    return total;
}

value f_title(evaluator&, const value& v, call_args& a) {
    // jinja2: the text split at runs of [-\s({[<] (kept), each piece's first character upper, the rest lower
    a.bind("do_title", {}, 0, nullptr);
    const value s = soft_str(v);
    const std::vector<uint32_t> cps = code_points(s.str());
    auto delim = [](uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c); };
    std::string out;
    for (size_t i = 0; i < cps.size();) {
        size_t j = i;
        const bool d = delim(cps[i]);
        while (j < cps.size() && delim(cps[j]) == d) j++;
        const std::string piece = from_code_points(cps, i, j);
        const std::string head = from_code_points(cps, i, i + 1);
        out += py::upper(head) + py::lower(from_code_points(cps, i + 1, j));
        (void)piece;
        check_string_size(out.size());
        i = j;
    }
    return str_value(std::move(out));
}

value f_tojson(evaluator&, const value& v, call_args& a) {
    // transformers' tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)
    const value* args[4];
    a.bind("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, 0, args);
    json_style st;
    st.ensure_ascii = args[0] && truthy(*args[0]);
    if (args[1] && !args[1]->is_none()) {
        st.has_indent = true;
        if (args[1]->is_string())
            st.indent = args[1]->str();
        else
            st.indent = std::string(size_t(std::clamp<int64_t>(int_arg(*args[1], "tojson indent"), 0, 1 << 16)), ' ');
        st.item_sep = ",";
    }
    if (args[2] && !args[2]->is_none()) {
        const value& seps = *args[2];
        if (!seps.is_list() || seps.l->size() != 2) fail("tojson: separators must be a pair of strings");
        if (!seps.items()[0].is_string() || !seps.items()[1].is_string()) fail("tojson: separators must be strings");
        st.item_sep = seps.items()[0].str();
        st.key_sep = seps.items()[1].str();
    }
    st.sort_keys = args[3] && truthy(*args[3]);
    return str_value(to_json(v, st));
}

value f_trim(evaluator&, const value& v, call_args& a) {
    const value* args[1];
    a.bind("do_trim", {"chars"}, 0, args);
    const value s = soft_str(v);
    value chars = args[0] ? *args[0] : value::none();
    if (s.markup && chars.is_string() && !chars.markup) chars = str_value(py::html_escape(chars.str()));
    return str_value(py::strip(s.str(), &chars, true, true), s.markup);
}

value f_truncate(evaluator& ev, const value& v, call_args& a) {
    const value* args[4];
    a.bind("do_truncate", {"length", "killwords", "end", "leeway"}, 0, args);
    const int64_t length = args[0] ? int_arg(*args[0], "truncate") : 255;
    const bool killwords = args[1] && truthy(*args[1]);
    const std::string end = args[2] ? need_str(*args[2], "truncate") : "...";
    const int64_t leeway = args[3] && !args[3]->is_none() ? int_arg(*args[3], "truncate") : 5;
    const int64_t n_end = int64_t(n_code_points(end));
    if (length < n_end) fail(fmt::format("expected length >= {}, got {}", n_end, length));
    if (leeway < 0) fail(fmt::format("expected leeway >= 0, got {}", leeway));
    if (!v.is_string()) {
        // python only needs len() to return a short value as it is; cutting one takes a str
        const auto n = ev.length(v);
        if (!n) fail(fmt::format("object of type '{}' has no len()", type_name(v)));
        if (*n <= length + leeway) return v;
        need_str(v, "truncate");
    }
    const std::string& s = v.str();
    const std::vector<uint32_t> cps = code_points(s);
    if (int64_t(cps.size()) <= length + leeway) return v;
    const std::string head = from_code_points(cps, 0, size_t(std::min<int64_t>(length - n_end, int64_t(cps.size()))));
    const std::string tail = v.markup && !(args[2] && args[2]->markup) ? py::html_escape(end) : end;
    if (killwords) return str_value(head + tail, v.markup);
    const size_t sp = head.rfind(' ');
    return str_value((sp == std::string::npos ? head : head.substr(0, sp)) + tail, v.markup);
}

value f_unique(evaluator& ev, const value& v, call_args& a) {
    const value* args[2];
    a.bind("do_unique", {"case_sensitive", "attribute"}, 0, args);
    const bool cs = args[0] && truthy(*args[0]);
    const attrgetter key = make_attrgetter(args[1], !cs);
    return lazy(ev, "generator object sync_do_unique", [&](std::vector<value>& out) {
        std::vector<value> seen;
        dict_data seen_strings;
        for (const value& x : ev.iterate(v)) {
            const value k = key(ev, x);
            check_hashable(k);
            ev.step();
            if (seen_strings.find(k)) continue;
            seen_strings.set(k, value::none());
            out.push_back(x);
        }
    });
}

std::string url_quote(const std::string& s, bool for_qs) {
    // urllib.parse.quote_from_bytes(safe="/" or ""), "+" for spaces in query strings
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/'))
            out += char(c);
        else if (for_qs && c == ' ')
            out += '+';
        else
            out += fmt::format("%{:02X}", c);
    }
    return out;
}

value f_urlencode(evaluator& ev, const value& v, call_args& a) {
    a.bind("do_urlencode", {}, 0, nullptr);
    if (v.is_string() || !(v.is_list() || v.is_dict() || (v.is_object() && v.o->iterable())))
        return str_value(url_quote(to_str(v), false));
    std::vector<value> items;
    if (v.is_dict()) {
        for (const auto& [k, x] : v.d->items) items.push_back(value::list({k, x}, true));
    } else {
        items = ev.iterate(v);
    }
    std::string out;
    for (size_t i = 0; i < items.size(); i++) {
        const std::vector<value> kv = ev.iterate(items[i]);
        if (kv.size() != 2) fail("urlencode: expected (key, value) pairs");
        out += (i ? "&" : "") + url_quote(to_str(kv[0]), true) + "=" + url_quote(to_str(kv[1]), true);
    }
    return str_value(std::move(out));
}

bool word_char(uint32_t c) {
    return c == '_' || ucd::has(c, ucd::alpha | ucd::decimal | ucd::digit | ucd::numeric);
}

bool all_word(const std::vector<uint32_t>& cps, size_t b, size_t e, bool pct_dash = false) {
    for (size_t i = b; i < e; i++)
        if (!(word_char(cps[i]) || (pct_dash && (cps[i] == '%' || cps[i] == '-')))) return false;
    return true;
}

// jinja2.utils._http_re
bool is_http_url(const std::string& s) {
    const std::string low = py::lower(s);
    size_t p = 0;
    bool scheme = false;
    if (low.rfind("https://", 0) == 0)
        p = 8, scheme = true;
    else if (low.rfind("http://", 0) == 0)
        p = 7, scheme = true;
    const bool www = !scheme && low.rfind("www.", 0) == 0;
    if (www) p = 4;
    const std::vector<uint32_t> cps = code_points(s.substr(p));
    size_t host_end = 0;
    while (host_end < cps.size() && cps[host_end] != ':' && cps[host_end] != '/' && cps[host_end] != '?' &&
           cps[host_end] != '#')
        host_end++;
    auto rest_ok = [&](size_t q) {
        if (q < cps.size() && cps[q] == ':') {
            size_t d = q + 1;
            while (d < cps.size() && d - q <= 5 && cps[d] >= '0' && cps[d] <= '9') d++;
            if (d == q + 1 || d - q > 6) return false;
            q = d;
        }
        return q == cps.size() || cps[q] == '/' || cps[q] == '?' || cps[q] == '#';
    };
    std::vector<std::pair<size_t, size_t>> labels;
    for (size_t b = 0;;) {
        size_t e = b;
        while (e < host_end && cps[e] != '.') e++;
        labels.emplace_back(b, e);
        if (e >= host_end) break;
        b = e + 1;
    }
    auto ascii_letters = [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i++)
            if (!((cps[i] | 0x20) >= 'a' && (cps[i] | 0x20) <= 'z')) return false;
        return true;
    };
    if (scheme || www) {
        bool ok = true;
        for (size_t i = 0; i + 1 < labels.size(); i++)
            ok = ok && labels[i].second > labels[i].first && all_word(cps, labels[i].first, labels[i].second, true);
        const auto [tb, te] = labels.back();
        const std::string tld = py::lower(from_code_points(cps, tb, te));
        const bool tld_ok = (te - tb >= 2 && te - tb <= 63 && ascii_letters(tb, te)) ||
                            (tld.rfind("xn--", 0) == 0 && te - tb >= 6 && te - tb <= 63 && all_word(cps, tb + 4, te));
        if (ok && tld_ok && rest_ok(host_end)) return true;
        if (scheme) {
            // IPv4
            const std::string host = from_code_points(cps, 0, host_end);
            int parts = 0;
            bool ipv4 = true;
            for (const auto& [b, e] : labels) {
                parts++;
                ipv4 = ipv4 && e > b && e - b <= 3 &&
                       std::all_of(cps.begin() + long(b), cps.begin() + long(e),
                                   [](uint32_t c) { return c >= '0' && c <= '9'; });
            }
            if (ipv4 && parts == 4 && rest_ok(host_end)) return true;
            (void)host;
        }
        return false;
    }
    // ([\w%-]{2,63}\.)+(com|net|int|edu|gov|org|info|mil)
    if (labels.size() < 2) return false;
    for (size_t i = 0; i + 1 < labels.size(); i++) {
        const size_t len = labels[i].second - labels[i].first;
        if (len < 2 || len > 63 || !all_word(cps, labels[i].first, labels[i].second, true)) return false;
    }
    const std::string tld = py::lower(from_code_points(cps, labels.back().first, labels.back().second));
    static const char* const tlds[] = {"com", "net", "int", "edu", "gov", "org", "info", "mil"};
    if (std::none_of(std::begin(tlds), std::end(tlds), [&](const char* t) { return tld == t; })) return false;
    return rest_ok(host_end);
}

// jinja2.utils._email_re: ^\S+@\w[\w.-]*\.\w+$
bool is_email(const std::string& s) {
    const std::vector<uint32_t> cps = code_points(s);
    for (size_t at = cps.size(); at-- > 1;) {
        if (cps[at] != '@') continue;
        const size_t b = at + 1;
        if (b >= cps.size() || !word_char(cps[b])) continue;
        size_t dot = cps.size();
        for (size_t i = cps.size(); i-- > b + 1;)
            if (cps[i] == '.') {
                dot = i;
                break;
            }
        if (dot == cps.size() || dot + 1 >= cps.size() || !all_word(cps, dot + 1, cps.size())) continue;
        bool mid = true;
        for (size_t i = b + 1; i < dot; i++) mid = mid && (word_char(cps[i]) || cps[i] == '.' || cps[i] == '-');
        if (mid) return true;
    }
    return false;
}

value f_urlize(evaluator& ev, const value& v, call_args& a) {
    const value* args[5];
    a.bind("do_urlize", {"trim_url_limit", "nofollow", "target", "rel", "extra_schemes"}, 0, args);
    const int64_t limit = args[0] && !args[0]->is_none() ? int_arg(*args[0], "urlize") : -1;
    std::string rel = args[3] && !args[3]->is_none() ? to_str(*args[3]) : "";
    if (args[1] && truthy(*args[1])) rel = rel.empty() ? "nofollow" : rel + " nofollow";
    if (rel.empty() || rel.find("noopener") == std::string::npos) rel = rel.empty() ? "noopener" : rel + " noopener";
    {
        // jinja2 sorts the rel words into a set: join(sorted(set(...)))
        std::vector<std::string> words = py::split(rel, nullptr, -1, false);
        std::sort(words.begin(), words.end());
        words.erase(std::unique(words.begin(), words.end()), words.end());
        rel.clear();
        for (const auto& w : words) rel += (rel.empty() ? "" : " ") + w;
    }
    const std::string target = args[2] && !args[2]->is_none() ? to_str(*args[2]) : "";
    std::vector<std::string> schemes;
    if (args[4] && !args[4]->is_none())
        for (const value& s : ev.iterate(*args[4])) schemes.push_back(to_str(s));
    const std::string rel_attr = " rel=\"" + py::html_escape(rel) + "\"";
    const std::string target_attr = target.empty() ? "" : " target=\"" + py::html_escape(target) + "\"";
    auto trim = [&](const std::string& x) {
        if (limit < 0 || int64_t(n_code_points(x)) <= limit) return x;
        const std::vector<uint32_t> cps = code_points(x);
        return from_code_points(cps, 0, size_t(limit)) + "...";
    };
    const std::string text = py::html_escape(to_str(v));
    // re.split(r"(\s+)", text)
    std::vector<std::string> words;
    {
        const std::vector<uint32_t> cps = code_points(text);
        size_t i = 0;
        while (i < cps.size()) {
            size_t j = i;
            const bool sp = py::is_space(cps[i]);
            while (j < cps.size() && py::is_space(cps[j]) == sp) j++;
            if (!sp && words.size() % 2 == 1) words.emplace_back();
            if (sp && words.size() % 2 == 0) words.emplace_back();
            words.push_back(from_code_points(cps, i, j));
            i = j;
        }
        if (words.empty() || words.size() % 2 == 0) words.emplace_back();
    }
    std::string out;
    for (std::string& word : words) {
        std::string head, middle = word, tail;
        for (bool more = true; more;) {
            more = false;
            for (const char* lead : {"(", "<", "&lt;"})
                if (middle.rfind(lead, 0) == 0) {
                    head += lead;
                    middle.erase(0, std::strlen(lead));
                    more = true;
                }
        }
        for (bool more = true; more;) {
            more = false;
            for (const char* trail : {")", ">", ".", ",", "\n", "&gt;"}) {
                const size_t n = std::strlen(trail);
                if (middle.size() >= n && middle.compare(middle.size() - n, n, trail) == 0) {
                    tail = trail + tail;
                    middle.erase(middle.size() - n);
                    more = true;
                }
            }
        }
        for (auto [open, close] : {std::pair{"(", ")"}, {"<", ">"}, {"&lt;", "&gt;"}}) {
            auto count = [](const std::string& s, const char* x) {
                size_t n = 0;
                for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + std::strlen(x))) n++;
                return n;
            };
            const size_t starts = count(middle, open);
            if (starts <= count(middle, close)) continue;
            for (size_t k = std::min(starts, count(tail, close)); k > 0; k--) {
                const size_t end = tail.find(close) + std::strlen(close);
                middle += tail.substr(0, end);
                tail.erase(0, end);
            }
        }
        if (is_http_url(middle)) {
            const bool has_scheme = middle.rfind("https://", 0) == 0 || middle.rfind("http://", 0) == 0;
            middle = "<a href=\"" + std::string(has_scheme ? "" : "https://") + middle + "\"" + rel_attr + target_attr +
                     ">" + trim(middle) + "</a>";
        } else if (middle.rfind("mailto:", 0) == 0 && is_email(middle.substr(7))) {
            middle = "<a href=\"" + middle + "\">" + middle.substr(7) + "</a>";
        } else if (middle.find('@') != std::string::npos && middle.rfind("www.", 0) != 0 && middle[0] != '@' &&
                   middle.find(':') == std::string::npos && is_email(middle)) {
            middle = "<a href=\"mailto:" + middle + "\">" + middle + "</a>";
        } else {
            for (const std::string& scheme : schemes)
                if (middle != scheme && middle.rfind(scheme, 0) == 0)
                    middle = "<a href=\"" + middle + "\"" + rel_attr + target_attr + ">" + middle + "</a>";
        }
        out += head + middle + tail;
        check_string_size(out.size());
    }
    return str_value(std::move(out));
}

value f_wordcount(evaluator&, const value& v, call_args& a) {
    a.bind("do_wordcount", {}, 0, nullptr);
    int64_t n = 0;
    bool in_word = false;
    for (uint32_t c : code_points(to_str(v))) {
        const bool w = word_char(c);
        if (w && !in_word) n++;
        in_word = w;
    }
    return value::integer(n);
}

value f_wordwrap(evaluator&, const value& v, call_args& a) {
    // textwrap.wrap per line (expand_tabs=False, replace_whitespace=False, drop_whitespace=True); chunks are runs of
    // ASCII whitespace and words, words also broken after a hyphen between letters when break_on_hyphens
    const value* args[5];
    a.bind("do_wordwrap", {"width", "break_long_words", "wrapstring", "break_on_hyphens"}, 0, args);
    const int64_t width = args[0] ? int_arg(*args[0], "wordwrap") : 79;
    const bool break_long = !args[1] || truthy(*args[1]);
    const std::string wrap = args[2] && !args[2]->is_none() ? to_str(*args[2]) : "\n";
    const bool hyphens = !args[3] || truthy(*args[3]);
    if (width <= 0) fail(fmt::format("invalid width {} (must be > 0)", width));
    auto ws = [](uint32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == 0x0b || c == 0x0c || c == '\r'; };
    auto letter = [](uint32_t c) { return c != '_' && word_char(c) && !ucd::has(c, ucd::decimal | ucd::digit); };
    std::string out;
    bool first_line = true;
    for (const std::string& line : py::splitlines(to_str(v), false)) {
        const std::vector<uint32_t> cps = code_points(line);
        std::vector<std::vector<uint32_t>> chunks;
        for (size_t i = 0; i < cps.size();) {
            size_t j = i;
            if (ws(cps[i])) {
                while (j < cps.size() && ws(cps[j])) j++;
            } else {
                while (j < cps.size() && !ws(cps[j])) {
                    j++;
                    if (hyphens && j < cps.size() && cps[j - 1] == '-' && j >= 3 && letter(cps[j - 2]) &&
                        letter(cps[j - 3]) && letter(cps[j]) && j - 1 > i)
                        break;
                }
            }
            chunks.emplace_back(cps.begin() + long(i), cps.begin() + long(j));
            i = j;
        }
        auto blank = [&](const std::vector<uint32_t>& c) {
            return std::all_of(c.begin(), c.end(), [](uint32_t x) { return py::is_space(x); });
        };
        std::vector<std::string> lines;
        std::reverse(chunks.begin(), chunks.end());
        while (!chunks.empty()) {
            std::vector<std::vector<uint32_t>> cur;
            int64_t len = 0;
            if (blank(chunks.back()) && !lines.empty()) chunks.pop_back();
            while (!chunks.empty() && len + int64_t(chunks.back().size()) <= width) {
                len += int64_t(chunks.back().size());
                cur.push_back(std::move(chunks.back()));
                chunks.pop_back();
            }
            if (!chunks.empty() && int64_t(chunks.back().size()) > width) {
                const int64_t space_left = std::max<int64_t>(width - len, 1);
                if (break_long) {
                    std::vector<uint32_t>& chunk = chunks.back();
                    int64_t end = space_left;
                    if (hyphens && int64_t(chunk.size()) > space_left) {
                        int64_t h = -1;
                        for (int64_t k = std::min<int64_t>(space_left, int64_t(chunk.size())) - 1; k >= 0; k--)
                            if (chunk[size_t(k)] == '-') {
                                h = k;
                                break;
                            }
                        if (h > 0 && std::any_of(chunk.begin(), chunk.begin() + h, [](uint32_t c) { return c != '-'; }))
                            end = h + 1;
                    }
                    cur.emplace_back(chunk.begin(), chunk.begin() + end);
                    chunk.erase(chunk.begin(), chunk.begin() + end);
                } else if (cur.empty()) {
                    cur.push_back(std::move(chunks.back()));
                    chunks.pop_back();
                }
            }
            if (!cur.empty() && blank(cur.back())) cur.pop_back();
            if (!cur.empty()) {
                std::string l;
                for (const auto& c : cur) l += from_code_points(c, 0, c.size());
                lines.push_back(std::move(l));
            }
        }
        if (!first_line) out += wrap;
        first_line = false;
        for (size_t i = 0; i < lines.size(); i++) out += (i ? wrap : "") + lines[i];
        check_string_size(out.size());
    }
    return str_value(std::move(out));
}

value f_xmlattr(evaluator&, const value& v, call_args& a) {
    const value* args[1];
    a.bind("do_xmlattr", {"autospace"}, 0, args);
    const bool autospace = !args[0] || truthy(*args[0]);
    if (!v.is_dict()) fail(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
    std::string out;
    for (const auto& [k, x] : v.d->items) {
        if (x.is_none() || x.is_undefined()) continue;
        const std::string key = to_str(k);
        for (char c : key)
            if (c == ' ' || c == '/' || c == '>' || c == '=' || c == '\t' || c == '\n' || c == '\f')
                fail(fmt::format("Invalid character in attribute name: {}", repr_string(key)));
        out += (out.empty() ? "" : " ") + py::html_escape(key) + "=\"" +
               (x.is_string() && x.markup ? x.str() : py::html_escape(to_str(x))) + "\"";
    }
    if (autospace && !out.empty()) out = " " + out;
    return str_value(std::move(out));
}

// ---- tests ----

void no_test_args(const call_args& a, std::string_view name) {
    a.bind(name, {}, 0, nullptr);
}

const value& one_arg(const call_args& a, std::string_view name, std::string_view arg) {
    const value* args[1];
    a.bind(name, {arg}, 1, args);
    return *args[0];
}

bool t_defined(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_defined"), !v.is_undefined();
}
bool t_undefined(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_undefined"), v.is_undefined();
}
bool t_none(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_none"), v.is_none();
}
bool t_boolean(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_boolean"), v.k == kind::boolean;
}
bool t_true(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_true"), v.k == kind::boolean && v.b;
}
bool t_false(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_false"), v.k == kind::boolean && !v.b;
}
bool t_integer(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_integer"), v.k == kind::integer;
}
bool t_float(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_float"), v.k == kind::floating;
}
bool t_number(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_number"), v.is_number();
}
bool t_string(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_string"), v.is_string();
}
bool t_mapping(evaluator&, const value& v, call_args& a) {
    return no_test_args(a, "test_mapping"), v.is_dict();
}
bool t_iterable(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_iterable");
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || (v.is_object() && v.o->iterable());
}
bool t_sequence(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_sequence");
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || (v.is_object() && v.o->has_getitem());
}
bool t_callable(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "callable");
    return v.is_object() && v.o->callable();
}
bool t_escaped(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_escaped");
    return v.is_string() && v.markup;
}
int64_t int_subject(const value& v, const char* test) {
    if (!v.is_number()) fail(fmt::format("unsupported operand type(s) for %: '{}' and 'int'", type_name(v)));
    (void)test;
    return v.is_int() ? v.as_int() : 0;
}
bool t_odd(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_odd");
    if (v.k == kind::floating) return std::fmod(v.f, 2.0) != 0 && std::fabs(std::fmod(v.f, 2.0)) == 1;
    return (int_subject(v, "odd") & 1) != 0;
}
bool t_even(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_even");
    if (v.k == kind::floating) return std::fmod(v.f, 2.0) == 0;
    return (int_subject(v, "even") & 1) == 0;
}
bool t_divisibleby(evaluator&, const value& v, call_args& a) {
    const value& n = one_arg(a, "test_divisibleby", "num");
    return equal(binary_op(binop::mod, v, n), value::integer(0));
}
bool t_eq(evaluator&, const value& v, call_args& a) {
    return equal(v, one_arg(a, "eq", "b"));
}
bool t_ne(evaluator&, const value& v, call_args& a) {
    return !equal(v, one_arg(a, "ne", "b"));
}
bool ordered(const value& v, const value& o, const char* op) {
    if (v.is_undefined()) fail(v.s ? *v.s : "value is undefined");
    if (o.is_undefined()) fail(o.s ? *o.s : "value is undefined");
    const int c = compare(v, o, op);
    return op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
}
bool t_lt(evaluator&, const value& v, call_args& a) {
    return ordered(v, one_arg(a, "lt", "b"), "<");
}
bool t_le(evaluator&, const value& v, call_args& a) {
    return ordered(v, one_arg(a, "le", "b"), "<=");
}
bool t_gt(evaluator&, const value& v, call_args& a) {
    return ordered(v, one_arg(a, "gt", "b"), ">");
}
bool t_ge(evaluator&, const value& v, call_args& a) {
    return ordered(v, one_arg(a, "ge", "b"), ">=");
}
bool t_sameas(evaluator&, const value& v, call_args& a) {
    // python's `is`: identity; None, booleans and small ints (-5..256) are singletons, containers compare by address
    const value& o = one_arg(a, "test_sameas", "other");
    if (v.k != o.k) return false;
    switch (v.k) {
    case kind::none:
        return true;
    case kind::undefined:
        return false; // each undefined access is a new object
    case kind::boolean:
        return v.b == o.b;
    case kind::integer:
        return v.i == o.i && v.i >= -5 && v.i <= 256;
    case kind::floating:
        return false;
    case kind::string:
        return v.s == o.s;
    case kind::list:
        return v.l == o.l;
    case kind::dict:
        return v.d == o.d;
    case kind::object:
        return v.o == o.o;
    }
    return false;
}
bool t_in(evaluator& ev, const value& v, call_args& a) {
    return ev.contains(one_arg(a, "test_in", "seq"), v);
}
bool t_lower(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_lower");
    return py::islower(to_str(v));
}
bool t_upper(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_upper");
    return py::isupper(to_str(v));
}
bool t_filter(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_filter");
    return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(evaluator&, const value& v, call_args& a) {
    no_test_args(a, "test_test");
    return v.is_string() && find_test(v.str()) != nullptr;
}

// ---- tables ----

const std::unordered_map<std::string, builtin_fn>& filters() {
    static const std::unordered_map<std::string, builtin_fn> table = {
        {"abs", f_abs},
        {"attr", f_attr},
        {"batch", f_batch},
        {"capitalize", f_capitalize},
        {"center", f_center},
        {"count", f_length},
        {"d", f_default},
        {"default", f_default},
        {"dictsort", f_dictsort},
        {"e", f_escape},
        {"escape", f_escape},
        {"filesizeformat", f_filesizeformat},
        {"first", f_first},
        {"float", f_float},
        {"forceescape", f_forceescape},
        {"format", f_format},
        {"groupby", f_groupby},
        {"indent", f_indent},
        {"int", f_int},
        {"items", f_items},
        {"join", f_join},
        {"last", f_last},
        {"length", f_length},
        {"list", f_list},
        {"lower", f_lower},
        {"map", f_map},
        {"max", f_max},
        {"min", f_min},
        {"pprint", f_pprint},
        {"random", f_random},
        {"reject", f_reject},
        {"rejectattr", f_rejectattr},
        {"replace", f_replace},
        {"reverse", f_reverse},
        {"round", f_round},
        {"safe", f_safe},
        {"select", f_select},
        {"selectattr", f_selectattr},
        {"slice", f_slice},
        {"sort", f_sort},
        {"string", f_string},
        {"striptags", f_striptags},
        {"sum", f_sum},
        {"title", f_title},
        {"tojson", f_tojson},
        {"trim", f_trim},
        {"truncate", f_truncate},
        {"unique", f_unique},
        {"upper", f_upper},
        {"urlencode", f_urlencode},
        {"urlize", f_urlize},
        {"wordcount", f_wordcount},
        {"wordwrap", f_wordwrap},
        {"xmlattr", f_xmlattr},
    };
    return table;
}

const std::unordered_map<std::string, test_fn>& tests() {
    static const std::unordered_map<std::string, test_fn> table = {
        {"defined", t_defined},
        {"undefined", t_undefined},
        {"none", t_none},
        {"boolean", t_boolean},
        {"true", t_true},
        {"false", t_false},
        {"integer", t_integer},
        {"float", t_float},
        {"number", t_number},
        {"string", t_string},
        {"mapping", t_mapping},
        {"iterable", t_iterable},
        {"sequence", t_sequence},
        {"callable", t_callable},
        {"odd", t_odd},
        {"even", t_even},
        {"divisibleby", t_divisibleby},
        {"eq", t_eq},
        {"equalto", t_eq},
        {"==", t_eq},
        {"ne", t_ne},
        {"!=", t_ne},
        {"lt", t_lt},
        {"lessthan", t_lt},
        {"<", t_lt},
        {"le", t_le},
        {"<=", t_le},
        {"gt", t_gt},
        {"greaterthan", t_gt},
        {">", t_gt},
        {"ge", t_ge},
        {">=", t_ge},
        {"sameas", t_sameas},
        {"in", t_in},
        {"lower", t_lower},
        {"upper", t_upper},
        {"escaped", t_escaped},
        {"filter", t_filter},
        {"test", t_test},
    };
    return table;
}

} // namespace

builtin_fn find_filter(const std::string& name) {
    auto it = filters().find(name);
    return it == filters().end() ? nullptr : it->second;
}

test_fn find_test(const std::string& name) {
    auto it = tests().find(name);
    return it == tests().end() ? nullptr : it->second;
}

bool has_filter(const std::string& name) {
    return find_filter(name) != nullptr;
}
bool has_test(const std::string& name) {
    return find_test(name) != nullptr;
}

} // namespace tessera::jinja
