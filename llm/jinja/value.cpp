// value.cpp: python semantics of template values: truthiness, ==, ordering, str(), repr(), json.dumps and the
// conversion from JSON. Filters and methods live in builtins.cpp.
#include "llm/jinja/value.h"

#include "llm/jinja/unicode_db.h"
#include "llm/unicode.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tessera::jinja {

void fail(std::string msg) {
    throw eval_error{std::move(msg), 0};
}

memory_bounds*& current_bounds() {
    thread_local memory_bounds* bounds = nullptr;
    return bounds;
}

void check_string_size(size_t n_bytes) {
    const memory_bounds* b = current_bounds();
    if (b && n_bytes > b->max_string)
        fail(fmt::format("a string of {} bytes passes the size limit of {} bytes", n_bytes, b->max_string));
}

void charge(size_t n_bytes) {
    memory_bounds* b = current_bounds();
    if (!b) return;
    if (n_bytes > b->budget) fail("the template allocated more memory than its limit allows");
    b->budget -= n_bytes;
}

value value::string(std::string v, bool markup) {
    check_string_size(v.size());
    charge(v.size() + 32);
    value r = with_kind(kind::string);
    r.markup = markup;
    r.s = std::make_shared<const std::string>(std::move(v));
    return r;
}

static uint16_t nest_of(int deepest) {
    if (deepest + 1 > max_value_nesting) fail(fmt::format("values nested deeper than {}", max_value_nesting));
    return uint16_t(deepest + 1);
}

value value::obj(object* p) {
    value r = with_kind(kind::object);
    r.o = p;
    r.nest = uint16_t(std::min(p->nest(), max_value_nesting));
    return r;
}

value value::list(std::vector<value> v, bool tuple) {
    charge(v.size() * sizeof(value) + 32);
    int deepest = 0;
    for (const value& x : v) deepest = std::max<int>(deepest, x.nest);
    value r = with_kind(kind::list);
    r.nest = nest_of(deepest);
    r.tuple = tuple;
    r.l = std::make_shared<const std::vector<value>>(std::move(v));
    return r;
}

value value::dict(dict_data v) {
    charge(v.items.size() * 2 * sizeof(value) + 32);
    int deepest = 0;
    for (const auto& [k, x] : v.items) deepest = std::max<int>(deepest, std::max(k.nest, x.nest));
    value r = with_kind(kind::dict);
    r.nest = nest_of(deepest);
    r.d = std::make_shared<const dict_data>(std::move(v));
    return r;
}

value value::undefined(std::string why) {
    value r;
    if (!why.empty()) r.s = std::make_shared<const std::string>(std::move(why));
    return r;
}

std::string object::repr() const {
    return "<" + type_name() + " object>";
}

std::vector<value> object::iterate() {
    fail(fmt::format("'{}' object is not iterable", type_name()));
}

bool object::getitem(const value&, value&) const {
    return false;
}

value object::call(evaluator&, call_args&) {
    fail(fmt::format("'{}' object is not callable", type_name()));
}

std::string namespace_object::repr() const {
    if (in_repr) return "<Namespace {...}>";
    in_repr = true;
    std::string out = "<Namespace {";
    try {
        bool first = true;
        for (const auto& [k, x] : attrs.items) {
            if (!first) out += ", ";
            first = false;
            out += to_repr(k) + ": " + to_repr(x);
            check_string_size(out.size());
        }
    } catch (...) {
        in_repr = false;
        throw;
    }
    in_repr = false;
    return out + "}>";
}

void namespace_object::set(const std::string& name, value v) {
    if (v.is_object() && v.o == this) {
        depth = std::max(depth, 2);
    } else {
        depth = std::max(depth, int(nest_of(v.nest)));
    }
    attrs.set(value::string(name), std::move(v));
}

void check_hashable(const value& key) {
    if ((key.is_list() && !key.tuple) || key.is_dict() || key.is_undefined() || (key.is_object() && !key.o->hashable()))
        fail(fmt::format("unhashable type: '{}'", type_name(key)));
    if (key.is_list())
        for (const value& x : key.items()) check_hashable(x);
}

// Small dicts (most: a message, a tool call) are searched in order; from 16 keys on, string keys are hashed.
constexpr size_t dict_index_from = 16;

static size_t find_string_key(const dict_data& d, std::string_view key) {
    if (!d.index.empty()) {
        auto it = d.index.find(std::string(key));
        return it == d.index.end() ? SIZE_MAX : it->second;
    }
    for (size_t i = 0; i < d.items.size(); i++)
        if (d.items[i].first.is_string() && d.items[i].first.str() == key) return i;
    return SIZE_MAX;
}

const value* dict_data::find(std::string_view key) const {
    const size_t i = find_string_key(*this, key);
    return i == SIZE_MAX ? nullptr : &items[i].second;
}

const value* dict_data::find(const value& key) const {
    if (key.is_string()) return find(key.str());
    for (const auto& [k, v] : items)
        if (!k.is_string() && equal(k, key)) return &v;
    return nullptr;
}

void dict_data::set(value key, value v) {
    if (key.is_string()) {
        const size_t i = find_string_key(*this, key.str());
        if (i != SIZE_MAX) {
            items[i].second = std::move(v);
            return;
        }
        if (!index.empty()) {
            index.emplace(key.str(), items.size());
        } else if (items.size() + 1 >= dict_index_from) {
            for (size_t j = 0; j < items.size(); j++)
                if (items[j].first.is_string()) index.emplace(items[j].first.str(), j);
            index.emplace(key.str(), items.size());
        }
    } else {
        for (auto& [k, old] : items)
            if (!k.is_string() && equal(k, key)) {
                old = std::move(v);
                return;
            }
    }
    items.emplace_back(std::move(key), std::move(v));
}

bool truthy(const value& v) {
    switch (v.k) {
    case kind::undefined:
    case kind::none:
        return false;
    case kind::boolean:
        return v.b;
    case kind::integer:
        return v.i != 0;
    case kind::floating:
        return v.f != 0;
    case kind::string:
        return !v.s->empty();
    case kind::list:
        return !v.l->empty();
    case kind::dict:
        return !v.d->items.empty();
    case kind::object:
        return v.o->truthy();
    }
    return false;
}

static double as_double(const value& v) {
    return v.k == kind::floating ? v.f : v.k == kind::integer ? double(v.i) : double(v.b);
}

bool equal(const value& a, const value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.k == kind::floating || b.k == kind::floating) return as_double(a) == as_double(b);
        return (a.k == kind::integer ? a.i : int64_t(a.b)) == (b.k == kind::integer ? b.i : int64_t(b.b));
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case kind::undefined:
    case kind::none:
        return true;
    case kind::string:
        return *a.s == *b.s;
    case kind::list:
        if (a.tuple != b.tuple || a.l->size() != b.l->size()) return false;
        for (size_t i = 0; i < a.l->size(); i++)
            if (!equal((*a.l)[i], (*b.l)[i])) return false;
        return true;
    case kind::dict:
        if (a.d->items.size() != b.d->items.size()) return false;
        for (const auto& [k, v] : a.d->items) {
            const value* o = b.d->find(k);
            if (!o || !equal(v, *o)) return false;
        }
        return true;
    case kind::object:
        return a.o->equals(*b.o);
    default:
        return false;
    }
}

int compare(const value& a, const value& b, const char* op) {
    if (a.is_number() && b.is_number()) {
        if (a.k == kind::floating || b.k == kind::floating) {
            const double x = as_double(a), y = as_double(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        const int64_t x = a.k == kind::integer ? a.i : a.b, y = b.k == kind::integer ? b.i : b.b;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        const int c = a.s->compare(*b.s); // UTF-8 byte order is code point order
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
        const size_t n = std::min(a.l->size(), b.l->size());
        for (size_t i = 0; i < n; i++)
            if (!equal((*a.l)[i], (*b.l)[i])) return compare((*a.l)[i], (*b.l)[i], op);
        return a.l->size() < b.l->size() ? -1 : a.l->size() > b.l->size() ? 1 : 0;
    }
    fail(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

std::string type_name(const value& v) {
    switch (v.k) {
    case kind::undefined:
        return "Undefined";
    case kind::none:
        return "NoneType";
    case kind::boolean:
        return "bool";
    case kind::integer:
        return "int";
    case kind::floating:
        return "float";
    case kind::string:
        return v.markup ? "Markup" : "str";
    case kind::list:
        return v.group ? "_GroupTuple" : v.tuple ? "tuple" : "list";
    case kind::dict:
        return "dict";
    case kind::object:
        return v.o->type_name();
    }
    return "?";
}

std::string float_repr(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
    // shortest round-trip digits, then python's layout: fixed for 1e-4 <= |f| < 1e16, else d.ddde+XX
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    const size_t epos = sci.find('e');
    const int exp = std::stoi(sci.substr(epos + 1));
    std::string digits = sci.substr(0, epos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp >= 0) {
            if (digits.size() <= size_t(exp) + 1) {
                out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
            } else {
                out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
            }
        } else {
            out = "0." + std::string(size_t(-exp - 1), '0') + digits;
        }
        return sign + out;
    }
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    return sign + m + fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
}

std::string repr_string(std::string_view s) {
    // python: single quotes unless the text has ' and no "; \t \n \r \\ and the quote escaped; any other
    // unprintable character as \xNN, \uNNNN or \UNNNNNNNN (str.isprintable)
    const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
    const char q = dq ? '"' : '\'';
    std::string out(1, q);
    size_t i = 0;
    while (i < s.size()) {
        const size_t start = i;
        const uint32_t c = utf8_decode(s, i);
        if (c == uint32_t(q) || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else if (c < 0x80 || ucd::has(c, ucd::printable)) {
            out.append(s, start, i - start);
        } else if (c < 0x100) {
            out += fmt::format("\\x{:02x}", c);
        } else if (c < 0x10000) {
            out += fmt::format("\\u{:04x}", c);
        } else {
            out += fmt::format("\\U{:08x}", c);
        }
    }
    out += q;
    return out;
}

std::string to_str(const value& v) {
    switch (v.k) {
    case kind::undefined:
        return "";
    case kind::string:
        return *v.s;
    default:
        return to_repr(v);
    }
}

std::string to_repr(const value& v) {
    switch (v.k) {
    case kind::undefined:
        return "Undefined";
    case kind::none:
        return "None";
    case kind::boolean:
        return v.b ? "True" : "False";
    case kind::integer:
        return std::to_string(v.i);
    case kind::floating:
        return float_repr(v.f);
    case kind::string:
        return v.markup ? "Markup(" + repr_string(*v.s) + ")" : repr_string(*v.s);
    case kind::list: {
        std::string out = v.tuple ? "(" : "[";
        for (size_t i = 0; i < v.l->size(); i++) {
            if (i) out += ", ";
            out += to_repr((*v.l)[i]);
            check_string_size(out.size());
        }
        if (v.tuple && v.l->size() == 1) out += ",";
        return out + (v.tuple ? ")" : "]");
    }
    case kind::dict: {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, x] : v.d->items) {
            if (!first) out += ", ";
            first = false;
            out += to_repr(k) + ": " + to_repr(x);
            check_string_size(out.size());
        }
        return out + "}";
    }
    case kind::object:
        return v.o->repr();
    }
    return "";
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    size_t i = 0;
    while (i < s.size()) {
        const size_t start = i;
        const unsigned char ch = static_cast<unsigned char>(s[i]);
        if (ch < 0x80) {
            i++;
            switch (ch) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (ch < 0x20)
                    out += fmt::format("\\u{:04x}", ch);
                else
                    out += char(ch);
            }
            continue;
        }
        const uint32_t c = utf8_decode(s, i);
        if (!ensure_ascii) {
            out.append(s, start, i - start);
        } else if (c >= 0x10000) {
            const uint32_t u = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (u >> 10), 0xdc00 + (u & 0x3ff));
        } else {
            out += fmt::format("\\u{:04x}", c);
        }
    }
    out += '"';
}

static std::string json_key(const value& k) {
    switch (k.k) {
    case kind::string:
        return *k.s;
    case kind::integer:
        return std::to_string(k.i);
    case kind::floating:
        return float_repr(k.f);
    case kind::boolean:
        return k.b ? "true" : "false";
    case kind::none:
        return "null";
    default:
        fail(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
    }
}

static void json_write(std::string& out, const value& v, const json_style& st, int level) {
    check_string_size(out.size());
    if (level > 512) fail("tojson: nesting too deep");
    auto newline = [&](int lvl) {
        out += '\n';
        for (int i = 0; i < lvl; i++) out += st.indent;
    };
    switch (v.k) {
    case kind::none:
        out += "null";
        return;
    case kind::boolean:
        out += v.b ? "true" : "false";
        return;
    case kind::integer:
        out += std::to_string(v.i);
        return;
    case kind::floating:
        if (std::isnan(v.f))
            out += "NaN";
        else if (std::isinf(v.f))
            out += v.f < 0 ? "-Infinity" : "Infinity";
        else
            out += float_repr(v.f);
        return;
    case kind::string:
        json_string(out, *v.s, st.ensure_ascii);
        return;
    case kind::list: {
        if (v.l->empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (size_t i = 0; i < v.l->size(); i++) {
            if (i) out += st.item_sep;
            if (st.has_indent) newline(level + 1);
            json_write(out, (*v.l)[i], st, level + 1);
        }
        if (st.has_indent) newline(level);
        out += ']';
        return;
    }
    case kind::dict: {
        if (v.d->items.empty()) {
            out += "{}";
            return;
        }
        std::vector<std::pair<std::string, const value*>> items;
        for (const auto& [k, x] : v.d->items) items.emplace_back(json_key(k), &x);
        if (st.sort_keys)
            std::stable_sort(items.begin(), items.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        for (size_t i = 0; i < items.size(); i++) {
            if (i) out += st.item_sep;
            if (st.has_indent) newline(level + 1);
            json_string(out, items[i].first, st.ensure_ascii);
            out += st.key_sep;
            json_write(out, *items[i].second, st, level + 1);
        }
        if (st.has_indent) newline(level);
        out += '}';
        return;
    }
    case kind::undefined:
    case kind::object:
        fail(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
    }
}

std::string to_json(const value& v, const json_style& style) {
    std::string out;
    json_write(out, v, style, 0);
    return out;
}

static value from_json_at(const nlohmann::ordered_json& j, int level);

value from_json(const nlohmann::ordered_json& j) {
    return from_json_at(j, 0);
}

static value from_json_at(const nlohmann::ordered_json& j, int level) {
    if (level > max_value_nesting) fail(fmt::format("the variables nest deeper than {}", max_value_nesting));
    using t = nlohmann::ordered_json::value_t;
    switch (j.type()) {
    case t::null:
        return value::none();
    case t::boolean:
        return value::boolean(j.get<bool>());
    case t::number_integer:
        return value::integer(j.get<int64_t>());
    case t::number_unsigned: {
        const uint64_t u = j.get<uint64_t>();
        return u > uint64_t(INT64_MAX) ? value::floating(double(u)) : value::integer(int64_t(u));
    }
    case t::number_float:
        return value::floating(j.get<double>());
    case t::string:
        return value::string(j.get<std::string>());
    case t::array: {
        std::vector<value> items;
        items.reserve(j.size());
        for (const auto& x : j) items.push_back(from_json_at(x, level + 1));
        return value::list(std::move(items));
    }
    case t::object: {
        dict_data d;
        for (const auto& [k, x] : j.items()) d.set(value::string(k), from_json_at(x, level + 1));
        return value::dict(std::move(d));
    }
    default:
        return value::none(); // binary and discarded values do not come from JSON text
    }
}

std::vector<uint32_t> code_points(std::string_view s) {
    return utf8_decode_all(s);
}

std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
    std::string out;
    for (size_t i = begin; i < end; i++) utf8_append(out, cps[i]);
    return out;
}

size_t n_code_points(std::string_view s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); n++) utf8_decode(s, i);
    return n;
}

} // namespace tessera::jinja
