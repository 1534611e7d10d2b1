// pystr.cpp: python's str methods on UTF-8 (code point indices, CPython's algorithms: unicodeobject.c's case mapping
// with the final-sigma rule, split / strip over Py_UNICODE_ISSPACE, center's odd-margin rule), markupsafe's escaping
// and the Markup flavour of the methods (arguments escaped, results Markup). Formatting is in pystr_format.cpp.
#include "llm/jinja/pystr.h"

#include "llm/jinja/unicode_db.h"
#include "llm/unicode.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace tessera::jinja::py {

namespace {

using ucd::mapping;

const std::string& str_arg(const value& v, std::string_view fn) {
    if (!v.is_string()) fail(fmt::format("{}() argument must be str, not {}", fn, type_name(v)));
    return v.str();
}

int64_t int_arg(const value& v, std::string_view fn) {
    if (!v.is_int()) fail(fmt::format("{}(): '{}' object cannot be interpreted as an integer", fn, type_name(v)));
    return v.as_int();
}

bool is_cased(uint32_t c) {
    return ucd::has(c, ucd::cased);
}
bool is_ignorable(uint32_t c) {
    return ucd::has(c, ucd::case_ignorable);
}

// CPython's handle_capital_sigma: U+03A3 at i lowers to the final form after a cased letter (case-ignorable ones
// skipped) that no cased letter follows
uint32_t sigma_at(const std::vector<uint32_t>& cps, size_t i) {
    size_t j = i;
    uint32_t c = 0;
    bool found = false;
    while (j > 0) {
        c = cps[--j];
        if (!is_ignorable(c)) {
            found = true;
            break;
        }
    }
    bool final_sigma = found && is_cased(c);
    if (final_sigma && i + 1 < cps.size()) {
        size_t k = i + 1;
        for (; k < cps.size(); k++) {
            c = cps[k];
            if (!is_ignorable(c)) break;
        }
        final_sigma = k == cps.size() || !is_cased(c);
    }
    return final_sigma ? 0x3c2 : 0x3c3;
}

void append_lower(std::string& out, const std::vector<uint32_t>& cps, size_t i) {
    if (cps[i] == 0x3a3)
        utf8_append(out, sigma_at(cps, i));
    else
        ucd::append_mapped(out, mapping::lower, cps[i]);
}

template <class F> std::string map_each(std::string_view s, F f) {
    const std::vector<uint32_t> cps = code_points(s);
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < cps.size(); i++) {
        f(out, cps, i);
        check_string_size(out.size());
    }
    return out;
}

bool is_linebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
}

template <class P> bool all_of_cps(std::string_view s, P p, bool empty_result = false) {
    if (s.empty()) return empty_result;
    for (uint32_t c : code_points(s))
        if (!p(c)) return false;
    return true;
}

// python's slice-index normalisation of str methods' start / end arguments, in code points
void bounds(const call_args& a, size_t first, int64_t n, int64_t& b, int64_t& e) {
    b = 0;
    e = n;
    auto norm = [n](int64_t x) { return x < 0 ? std::max<int64_t>(x + n, 0) : std::min(x, n); };
    if (a.pos.size() > first && !a.pos[first].is_none()) b = norm(int_arg(a.pos[first], "slice"));
    if (a.pos.size() > first + 1 && !a.pos[first + 1].is_none()) e = norm(int_arg(a.pos[first + 1], "slice"));
}

// finds sub in cps[b, e): the first (or last) code point index, -1 when absent
int64_t find_cps(const std::vector<uint32_t>& cps, const std::vector<uint32_t>& sub, int64_t b, int64_t e,
                 bool reverse) {
    const int64_t m = int64_t(sub.size());
    if (e - b < m) return -1;
    if (!reverse) {
        for (int64_t i = b; i + m <= e; i++)
            if (std::equal(sub.begin(), sub.end(), cps.begin() + i)) return i;
    } else {
        for (int64_t i = e - m; i >= b; i--)
            if (std::equal(sub.begin(), sub.end(), cps.begin() + i)) return i;
    }
    return -1;
}

} // namespace

bool is_space(uint32_t cp) {
    return ucd::has(cp, ucd::space);
}

std::string upper(std::string_view s) {
    return map_each(s, [](std::string& o, const auto& c, size_t i) { ucd::append_mapped(o, mapping::upper, c[i]); });
}

std::string lower(std::string_view s) {
    return map_each(s, append_lower);
}

std::string casefold(std::string_view s) {
    return map_each(s, [](std::string& o, const auto& c, size_t i) { ucd::append_mapped(o, mapping::fold, c[i]); });
}

std::string swapcase(std::string_view s) {
    return map_each(s, [](std::string& o, const auto& c, size_t i) {
        if (ucd::has(c[i], ucd::upper))
            append_lower(o, c, i);
        else if (ucd::has(c[i], ucd::lower))
            ucd::append_mapped(o, mapping::upper, c[i]);
        else
            utf8_append(o, c[i]);
    });
}

std::string title(std::string_view s) {
    bool previous_cased = false;
    return map_each(s, [&](std::string& o, const auto& c, size_t i) {
        if (previous_cased)
            append_lower(o, c, i);
        else
            ucd::append_mapped(o, mapping::title, c[i]);
        previous_cased = is_cased(c[i]);
    });
}

std::string capitalize(std::string_view s) {
    return map_each(s, [](std::string& o, const auto& c, size_t i) {
        if (i == 0)
            ucd::append_mapped(o, mapping::title, c[i]);
        else
            append_lower(o, c, i);
    });
}

bool islower(std::string_view s) {
    bool cased = false;
    for (uint32_t c : code_points(s)) {
        if (ucd::has(c, ucd::upper) || ucd::has(c, ucd::title)) return false;
        if (ucd::has(c, ucd::lower)) cased = true;
    }
    return cased;
}

bool isupper(std::string_view s) {
    bool cased = false;
    for (uint32_t c : code_points(s)) {
        if (ucd::has(c, ucd::lower) || ucd::has(c, ucd::title)) return false;
        if (ucd::has(c, ucd::upper)) cased = true;
    }
    return cased;
}

static bool istitle(std::string_view s) {
    bool cased = false, previous_cased = false;
    for (uint32_t c : code_points(s)) {
        if (ucd::has(c, ucd::upper) || ucd::has(c, ucd::title)) {
            if (previous_cased) return false;
            previous_cased = cased = true;
        } else if (ucd::has(c, ucd::lower)) {
            if (!previous_cased) return false;
            previous_cased = cased = true;
        } else {
            previous_cased = false;
        }
    }
    return cased;
}

std::string strip(std::string_view s, const value* chars, bool left, bool right) {
    std::vector<uint32_t> set;
    const bool custom = chars && !chars->is_none();
    if (custom) set = code_points(str_arg(*chars, "strip"));
    auto drop = [&](uint32_t c) { return custom ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c); };
    const std::vector<uint32_t> cps = code_points(s);
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && drop(cps[b])) b++;
    if (right)
        while (e > b && drop(cps[e - 1])) e--;
    return from_code_points(cps, b, e);
}

std::vector<std::string> split(std::string_view s, const value* sep, int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (!sep || sep->is_none()) {
        // runs of whitespace; no empty pieces; what maxsplit leaves is the rest with its inner whitespace
        const std::vector<uint32_t> cps = code_points(s);
        const int64_t n = int64_t(cps.size());
        if (!from_right) {
            int64_t i = 0;
            while (true) {
                while (i < n && is_space(cps[size_t(i)])) i++;
                if (i == n) break;
                if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
                    int64_t e = n;
                    while (e > i && is_space(cps[size_t(e - 1)])) e--;
                    parts.push_back(from_code_points(cps, size_t(i), size_t(e)));
                    break;
                }
                int64_t j = i;
                while (j < n && !is_space(cps[size_t(j)])) j++;
                parts.push_back(from_code_points(cps, size_t(i), size_t(j)));
                i = j;
            }
        } else {
            int64_t i = n;
            while (true) {
                while (i > 0 && is_space(cps[size_t(i - 1)])) i--;
                if (i == 0) break;
                if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
                    int64_t b = 0;
                    while (b < i && is_space(cps[size_t(b)])) b++;
                    parts.push_back(from_code_points(cps, size_t(b), size_t(i)));
                    break;
                }
                int64_t j = i;
                while (j > 0 && !is_space(cps[size_t(j - 1)])) j--;
                parts.push_back(from_code_points(cps, size_t(j), size_t(i)));
                i = j;
            }
            std::reverse(parts.begin(), parts.end());
        }
    } else {
        const std::string& d = str_arg(*sep, from_right ? "rsplit" : "split");
        if (d.empty()) fail("empty separator");
        if (!from_right) {
            size_t pos = 0;
            while (true) {
                const size_t q = s.find(d, pos);
                if (q == std::string_view::npos || (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit)) break;
                parts.emplace_back(s.substr(pos, q - pos));
                pos = q + d.size();
            }
            parts.emplace_back(s.substr(pos));
        } else {
            size_t end = s.size();
            while (!(maxsplit >= 0 && int64_t(parts.size()) >= maxsplit) && end >= d.size()) {
                const size_t q = s.rfind(d, end - d.size());
                if (q == std::string_view::npos) break;
                parts.emplace_back(s.substr(q + d.size(), end - q - d.size()));
                end = q;
            }
            parts.emplace_back(s.substr(0, end));
            std::reverse(parts.begin(), parts.end());
        }
    }
    charge(parts.size() * 48);
    return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> lines;
    size_t i = 0, start = 0;
    while (i < s.size()) {
        const size_t at = i;
        const uint32_t c = utf8_decode(s, i);
        if (!is_linebreak(c)) continue;
        size_t end = i;
        if (c == '\r' && i < s.size() && s[i] == '\n') end = ++i;
        lines.emplace_back(s.substr(start, (keepends ? end : at) - start));
        start = i;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    charge(lines.size() * 48);
    return lines;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
    std::string out;
    int64_t n = 0;
    if (from.empty()) {
        // python puts `to` before every code point and at the end
        size_t i = 0;
        while (i <= s.size()) {
            if (count >= 0 && n >= count) {
                out.append(s.substr(i));
                break;
            }
            out.append(to);
            n++;
            check_string_size(out.size());
            if (i == s.size()) break;
            const size_t start = i;
            utf8_decode(s, i);
            out.append(s.substr(start, i - start));
        }
        return out;
    }
    size_t pos = 0;
    while (true) {
        const size_t q = s.find(from, pos);
        if (q == std::string_view::npos || (count >= 0 && n >= count)) break;
        out.append(s.substr(pos, q - pos));
        out.append(to);
        check_string_size(out.size());
        pos = q + from.size();
        n++;
    }
    out.append(s.substr(pos));
    return out;
}

std::string justify(std::string_view s, int64_t width, std::string_view fill, int align) {
    if (n_code_points(fill) != 1) fail("The fill character must be exactly one character long");
    const int64_t n = int64_t(n_code_points(s));
    if (width <= n) return std::string(s);
    check_string_size(size_t(width) * fill.size());
    const int64_t marg = width - n;
    const int64_t left = align < 0 ? 0 : align > 0 ? marg : marg / 2 + (marg & width & 1);
    std::string out;
    for (int64_t i = 0; i < left; i++) out.append(fill);
    out.append(s);
    for (int64_t i = 0; i < marg - left; i++) out.append(fill);
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&#34;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out += c;
        }
    }
    check_string_size(out.size());
    return out;
}

std::string html_unescape(std::string_view s) {
    static const std::pair<const char*, uint32_t> named[] = {
        {"amp", '&'},       {"lt", '<'},       {"gt", '>'},       {"quot", '"'},     {"apos", '\''},
        {"nbsp", 0xa0},     {"copy", 0xa9},    {"reg", 0xae},     {"laquo", 0xab},   {"raquo", 0xbb},
        {"hellip", 0x2026}, {"mdash", 0x2014}, {"ndash", 0x2013}, {"lsquo", 0x2018}, {"rsquo", 0x2019},
        {"ldquo", 0x201c},  {"rdquo", 0x201d}, {"middot", 0xb7},  {"times", 0xd7},   {"euro", 0x20ac},
        {"deg", 0xb0},      {"bull", 0x2022},  {"trade", 0x2122}};
    std::string out;
    for (size_t i = 0; i < s.size();) {
        if (s[i] != '&') {
            out += s[i++];
            continue;
        }
        const size_t semi = s.find(';', i);
        if (semi != std::string_view::npos && semi - i <= 12) {
            const std::string_view name = s.substr(i + 1, semi - i - 1);
            uint32_t cp = 0;
            if (name.size() > 1 && name[0] == '#') {
                const bool hex = name[1] == 'x' || name[1] == 'X';
                const std::string digits(name.substr(hex ? 2 : 1));
                char* end = nullptr;
                const unsigned long v = digits.empty() ? 0 : std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
                if (end && !*end) cp = v == 0 || v > 0x10ffff || (v >= 0xd800 && v < 0xe000) ? 0xfffd : uint32_t(v);
            } else {
                for (auto [n, c] : named)
                    if (name == n) cp = c;
            }
            if (cp) {
                utf8_append(out, cp);
                i = semi + 1;
                continue;
            }
        }
        out += s[i++];
    }
    return out;
}

// ---- str methods ----

namespace {

const char* const str_methods[] = {
    "capitalize",   "casefold",     "center",     "count",      "endswith",    "expandtabs", "find",
    "format",       "format_map",   "index",      "isalnum",    "isalpha",     "isascii",    "isdecimal",
    "isdigit",      "isidentifier", "islower",    "isnumeric",  "isprintable", "isspace",    "istitle",
    "isupper",      "join",         "ljust",      "lower",      "lstrip",      "partition",  "removeprefix",
    "removesuffix", "replace",      "rfind",      "rindex",     "rjust",       "rpartition", "rsplit",
    "rstrip",       "split",        "splitlines", "startswith", "strip",       "swapcase",   "title",
    "translate",    "upper",        "zfill",      "encode",     "maketrans"};
// Markup's methods that return Markup (markupsafe 3); of their arguments only replace's new, the fill characters,
// join's items and format's fields are escaped
const char* const markup_wrapped[] = {
    "capitalize", "title",      "lower",        "upper",        "replace",   "ljust",      "rjust",
    "lstrip",     "rstrip",     "center",       "strip",        "translate", "expandtabs", "swapcase",
    "zfill",      "casefold",   "removeprefix", "removesuffix", "split",     "rsplit",     "splitlines",
    "partition",  "rpartition", "format",       "format_map",   "join"};

template <size_t N> bool in(const char* const (&names)[N], std::string_view n) {
    for (const char* x : names)
        if (n == x) return true;
    return false;
}

value str_value(std::string s, bool markup = false) {
    return value::string(std::move(s), markup);
}

value plain_str_method(evaluator& ev, const std::string& s, const std::string& name, call_args& a, bool markup) {
    auto want = [&](size_t max_pos, size_t min_pos = 0) {
        if (!a.kw.empty() && name != "split" && name != "rsplit" && name != "splitlines" && name != "format" &&
            name != "expandtabs")
            fail(fmt::format("str.{}() takes no keyword arguments", name));
        if (a.pos.size() > max_pos || a.pos.size() < min_pos)
            fail(max_pos == 0 ? fmt::format("str.{}() takes no arguments ({} given)", name, a.pos.size())
                              : fmt::format("{}() takes {} arguments ({} given)", name,
                                            min_pos == max_pos ? fmt::format("exactly {}", max_pos)
                                                               : fmt::format("from {} to {}", min_pos, max_pos),
                                            a.pos.size()));
    };
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
        name == "casefold") {
        want(0);
        return str_value(name == "upper"        ? upper(s)
                         : name == "lower"      ? lower(s)
                         : name == "title"      ? title(s)
                         : name == "capitalize" ? capitalize(s)
                         : name == "swapcase"   ? swapcase(s)
                                                : casefold(s));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        want(1);
        return str_value(strip(s, a.pos.empty() ? nullptr : &a.pos[0], name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        const value* args[2];
        a.bind(name, {"sep", "maxsplit"}, 0, args);
        const int64_t maxsplit = args[1] ? int_arg(*args[1], name) : -1;
        std::vector<value> out;
        for (auto& p : split(s, args[0], maxsplit, name == "rsplit")) out.push_back(str_value(std::move(p)));
        return value::list(std::move(out));
    }
    if (name == "splitlines") {
        const value* args[1];
        a.bind(name, {"keepends"}, 0, args);
        std::vector<value> out;
        for (auto& l : splitlines(s, args[0] && truthy(*args[0]))) out.push_back(str_value(std::move(l)));
        return value::list(std::move(out));
    }
    if (name == "startswith" || name == "endswith") {
        want(3, 1);
        const std::vector<uint32_t> cps = code_points(s);
        int64_t b, e;
        bounds(a, 1, int64_t(cps.size()), b, e);
        auto one = [&](const value& p) {
            if (!p.is_string())
                fail(fmt::format("{} first arg must be str or a tuple of str, not {}", name, type_name(p)));
            const std::vector<uint32_t> x = code_points(p.str());
            const int64_t m = int64_t(x.size());
            if (e - b < m) return false;
            return name == "startswith" ? std::equal(x.begin(), x.end(), cps.begin() + b)
                                        : std::equal(x.begin(), x.end(), cps.begin() + (e - m));
        };
        const value& p = a.pos[0];
        if (p.is_list() && p.tuple) {
            for (const value& x : p.items())
                if (one(x)) return value::boolean(true);
            return value::boolean(false);
        }
        return value::boolean(one(p));
    }
    if (name == "replace") {
        want(3, 2);
        return str_value(replace(s, str_arg(a.pos[0], name), str_arg(a.pos[1], name),
                                 a.pos.size() > 2 ? int_arg(a.pos[2], name) : -1));
    }
    if (name == "format") return str_value(format(ev, s, a, markup));
    if (name == "format_map") {
        want(1, 1);
        if (!a.pos[0].is_dict()) fail(fmt::format("'{}' object is not a mapping", type_name(a.pos[0])));
        call_args kw;
        for (const auto& [k, v] : a.pos[0].d->items) kw.kw.emplace_back(to_str(k), v);
        return str_value(format(ev, s, kw, markup));
    }
    if (name == "join") {
        want(1, 1);
        std::string out;
        bool first = true;
        for (const value& x : ev.iterate(a.pos[0])) {
            if (!x.is_string()) fail(fmt::format("sequence item: expected str instance, {} found", type_name(x)));
            if (!first) out += s;
            first = false;
            out += x.str();
            check_string_size(out.size());
        }
        return str_value(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
        want(3, 1);
        const std::vector<uint32_t> cps = code_points(s);
        const std::vector<uint32_t> sub = code_points(str_arg(a.pos[0], name));
        int64_t b, e;
        bounds(a, 1, int64_t(cps.size()), b, e);
        if (name == "count") {
            if (b > e) return value::integer(0);
            if (sub.empty()) return value::integer(e - b + 1);
            int64_t n = 0;
            for (int64_t i = b; i + int64_t(sub.size()) <= e;) {
                if (std::equal(sub.begin(), sub.end(), cps.begin() + i)) {
                    n++;
                    i += int64_t(sub.size());
                } else {
                    i++;
                }
            }
            return value::integer(n);
        }
        const int64_t r = b > e ? -1 : find_cps(cps, sub, b, e, name[0] == 'r');
        if (r < 0 && name.find("index") != std::string::npos) fail("substring not found");
        return value::integer(r);
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
        want(2, 1);
        const std::string fill = a.pos.size() > 1 ? str_arg(a.pos[1], name) : " ";
        return str_value(justify(s, int_arg(a.pos[0], name), fill, name == "center" ? 0 : name == "ljust" ? -1 : 1));
    }
    if (name == "zfill") {
        want(1, 1);
        const int64_t width = int_arg(a.pos[0], name), n = int64_t(n_code_points(s));
        if (width <= n) return str_value(s);
        check_string_size(size_t(width));
        const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
        return str_value(s.substr(0, sign) + std::string(size_t(width - n), '0') + s.substr(sign));
    }
    if (name == "expandtabs") {
        const value* args[1];
        a.bind(name, {"tabsize"}, 0, args);
        const int64_t tab = args[0] ? int_arg(*args[0], name) : 8;
        std::string out;
        int64_t col = 0;
        for (uint32_t c : code_points(s)) {
            if (c == '\t') {
                if (tab > 0) {
                    const int64_t n = tab - col % tab;
                    check_string_size(out.size() + size_t(n));
                    out.append(size_t(n), ' ');
                    col += n;
                }
            } else {
                utf8_append(out, c);
                col = c == '\n' || c == '\r' ? 0 : col + 1;
            }
        }
        return str_value(std::move(out));
    }
    if (name == "partition" || name == "rpartition") {
        want(1, 1);
        const std::string& d = str_arg(a.pos[0], name);
        if (d.empty()) fail("empty separator");
        const size_t q = name == "partition" ? s.find(d) : s.rfind(d);
        if (q == std::string::npos)
            return name == "partition" ? value::list({str_value(s), str_value(""), str_value("")}, true)
                                       : value::list({str_value(""), str_value(""), str_value(s)}, true);
        return value::list({str_value(s.substr(0, q)), str_value(d), str_value(s.substr(q + d.size()))}, true);
    }
    if (name == "removeprefix" || name == "removesuffix") {
        want(1, 1);
        const std::string& p = str_arg(a.pos[0], name);
        if (name == "removeprefix") return str_value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
        return str_value(s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0
                             ? s.substr(0, s.size() - p.size())
                             : s);
    }
    if (name == "translate") {
        want(1, 1);
        std::string out;
        for (uint32_t c : code_points(s)) {
            value to = ev.get_item(a.pos[0], value::integer(c));
            if (to.is_undefined())
                utf8_append(out, c);
            else if (to.is_none())
                continue;
            else if (to.is_int())
                utf8_append(out, uint32_t(to.as_int()));
            else if (to.is_string())
                out += to.str();
            else
                fail("character mapping must return integer, None or str");
            check_string_size(out.size());
        }
        return str_value(std::move(out));
    }
    auto flagged = [&](uint32_t f) { return all_of_cps(s, [f](uint32_t c) { return ucd::has(c, f); }); };
    if (name.rfind("is", 0) == 0) want(0);
    if (name == "isalpha") return value::boolean(flagged(ucd::alpha));
    if (name == "isdecimal") return value::boolean(flagged(ucd::decimal));
    if (name == "isdigit") return value::boolean(flagged(ucd::digit));
    if (name == "isnumeric") return value::boolean(flagged(ucd::numeric));
    if (name == "isspace") return value::boolean(flagged(ucd::space));
    if (name == "isalnum") return value::boolean(flagged(ucd::alpha | ucd::decimal | ucd::digit | ucd::numeric));
    if (name == "isprintable")
        return value::boolean(all_of_cps(
            s, [](uint32_t c) { return ucd::has(c, ucd::printable); }, true));
    if (name == "isascii")
        return value::boolean(all_of_cps(
            s, [](uint32_t c) { return c < 0x80; }, true));
    if (name == "islower") return value::boolean(islower(s));
    if (name == "isupper") return value::boolean(isupper(s));
    if (name == "istitle") return value::boolean(istitle(s));
    if (name == "isidentifier") {
        const std::vector<uint32_t> cps = code_points(s);
        bool ok = !cps.empty() && ucd::has(cps[0], ucd::id_start);
        for (size_t i = 1; ok && i < cps.size(); i++) ok = ucd::has(cps[i], ucd::id_continue);
        return value::boolean(ok);
    }
    fail(fmt::format("str.{}() is not supported in templates", name));
}

value markup_of(value v) {
    if (v.is_string()) {
        v.markup = true;
        return v;
    }
    if (v.is_list()) {
        std::vector<value> items = v.items();
        for (auto& x : items) x = markup_of(std::move(x));
        return value::list(std::move(items), v.tuple);
    }
    return v;
}

value escaped(const value& v) {
    return v.is_string() && !v.markup ? value::string(html_escape(v.str()), true) : v;
}

} // namespace

bool is_str_method(const std::string& name, bool markup) {
    return in(str_methods, name) || (markup && (name == "escape" || name == "unescape" || name == "striptags"));
}

value call_str_method(evaluator& ev, const value& self, const std::string& name, call_args& a) {
    const std::string& s = self.str();
    if (!self.markup || !in(markup_wrapped, name)) {
        if (self.markup && (name == "unescape" || name == "striptags" || name == "escape")) {
            if (!a.pos.empty() || !a.kw.empty()) fail(fmt::format("Markup.{}() takes no arguments", name));
            if (name == "escape") return self;
            if (name == "unescape") return str_value(html_unescape(s));
            std::string v = s;
            for (size_t start; (start = v.find("<!--")) != std::string::npos;) {
                const size_t end = v.find("-->", start);
                if (end == std::string::npos) break;
                v = v.substr(0, start) + v.substr(end + 3);
            }
            for (size_t start; (start = v.find('<')) != std::string::npos;) {
                const size_t end = v.find('>', start);
                if (end == std::string::npos) break;
                v = v.substr(0, start) + v.substr(end + 1);
            }
            std::string joined;
            for (const auto& w : split(v, nullptr, -1, false)) joined += (joined.empty() ? "" : " ") + w;
            return str_value(html_unescape(joined));
        }
        return plain_str_method(ev, s, name, a, false);
    }
    // Markup: the result (or its pieces) Markup
    call_args esc = a;
    if (name == "replace" && esc.pos.size() > 1) esc.pos[1] = escaped(esc.pos[1]);
    if ((name == "ljust" || name == "rjust" || name == "center") && esc.pos.size() > 1)
        esc.pos[1] = escaped(esc.pos[1]);
    if (name == "join" && !esc.pos.empty()) {
        std::vector<value> items;
        for (const value& x : ev.iterate(esc.pos[0]))
            items.push_back(escaped(x.is_string() ? x : value::string(to_str(x))));
        esc.pos[0] = value::list(std::move(items));
    }
    return markup_of(plain_str_method(ev, s, name, esc, true));
}

} // namespace tessera::jinja::py
