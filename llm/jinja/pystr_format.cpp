// pystr_format.cpp: python's string formatting: str.format (fields with attribute / index lookups, !r !s !a, nested
// specs), format(value, spec) for int / float / str (fill, align, sign, #, 0, width, grouping, precision, type), and
// the printf-style "%" operator (mapping keys, flags, * widths, %s %r %a %d %i %u %x %X %o %e %f %g %c %%, Markup's
// escaping). Float digits come from the C library, which rounds exactly as python does.
#include "llm/jinja/pystr.h"

#include "llm/unicode.h"

#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace tessera::jinja::py {

namespace {

bool ascii_digit(char c) {
    return c >= '0' && c <= '9';
}

std::string ascii_repr(const value& v) {
    // ascii(v): repr with every non-ASCII code point escaped
    const std::string r = to_repr(v);
    std::string out;
    for (size_t i = 0; i < r.size();) {
        const uint32_t c = utf8_decode(r, i);
        if (c < 0x80)
            out += char(c);
        else if (c < 0x100)
            out += fmt::format("\\x{:02x}", c);
        else if (c < 0x10000)
            out += fmt::format("\\u{:04x}", c);
        else
            out += fmt::format("\\U{:08x}", c);
    }
    return out;
}

std::string c_format(const char* spec_fmt, int precision, double x) {
    char buf[512];
    const int n = std::snprintf(buf, sizeof buf, spec_fmt, precision, x);
    if (n < 0) fail("float formatting failed");
    if (size_t(n) < sizeof buf) return std::string(buf, size_t(n));
    std::string big(size_t(n) + 1, '\0');
    std::snprintf(big.data(), big.size(), spec_fmt, precision, x);
    big.resize(size_t(n));
    return big;
}

uint64_t magnitude(int64_t n) {
    return n < 0 ? uint64_t(-(n + 1)) + 1 : uint64_t(n);
}

std::string group_digits(const std::string& digits, char sep, size_t every) {
    // digits: the integer part only
    std::string out;
    for (size_t k = 0; k < digits.size(); k++) {
        if (k && (digits.size() - k) % every == 0) out += sep;
        out += digits[k];
    }
    return out;
}

// float digits for a format type, without sign; type 0 is format()'s "no type" (repr, or %g with at least one
// decimal digit when a precision is given)
std::string float_digits(double x, char type, int precision, bool alt) {
    x = std::fabs(x);
    if (std::isinf(x)) return std::isupper(static_cast<unsigned char>(type)) ? "INF" : "inf";
    if (std::isnan(x)) return std::isupper(static_cast<unsigned char>(type)) ? "NAN" : "nan";
    const bool has_prec = precision >= 0;
    switch (type) {
    case 'f':
    case 'F':
        return c_format(alt ? "%#.*f" : "%.*f", has_prec ? precision : 6, x);
    case 'e':
    case 'E':
        return c_format(type == 'e' ? (alt ? "%#.*e" : "%.*e") : (alt ? "%#.*E" : "%.*E"), has_prec ? precision : 6, x);
    case 'g':
    case 'G':
    case 'n':
        return c_format(type == 'G' ? (alt ? "%#.*G" : "%.*G") : (alt ? "%#.*g" : "%.*g"),
                        has_prec ? std::max(precision, 1) : 6, x);
    case '%':
        return c_format(alt ? "%#.*f" : "%.*f", has_prec ? precision : 6, x * 100) + "%";
    default: {
        if (!has_prec) return float_repr(x);
        std::string r = c_format(alt ? "%#.*g" : "%.*g", std::max(precision, 1), x);
        if (r.find_first_of(".e") == std::string::npos) r += ".0";
        return r;
    }
    }
}

} // namespace

std::string format_value(const value& v, std::string_view spec) {
    if (spec.empty()) return to_str(v);
    if (!v.is_number() && !v.is_string())
        fail(fmt::format("unsupported format string passed to {}.__format__", type_name(v)));
    size_t p = 0;
    std::string fill = " ";
    char align = 0;
    auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    {
        size_t first_len = std::min(utf8_len(spec[0]), spec.size());
        if (spec.size() > first_len && is_align(spec[first_len])) {
            fill = std::string(spec.substr(0, first_len));
            align = spec[first_len];
            p = first_len + 1;
        } else if (is_align(spec[0])) {
            align = spec[0];
            p = 1;
        }
    }
    char sign = 0;
    if (p < spec.size() && (spec[p] == '+' || spec[p] == '-' || spec[p] == ' ')) sign = spec[p++];
    bool no_neg_zero = false;
    if (p < spec.size() && spec[p] == 'z') {
        no_neg_zero = true;
        p++;
    }
    bool alt = false;
    if (p < spec.size() && spec[p] == '#') {
        alt = true;
        p++;
    }
    if (p < spec.size() && spec[p] == '0') {
        if (!align) {
            fill = "0";
            align = '=';
        }
        p++;
    }
    int64_t width = 0;
    while (p < spec.size() && ascii_digit(spec[p]))
        width = std::min<int64_t>(width * 10 + (spec[p++] - '0'), int64_t(1) << 40);
    char grouping = 0;
    if (p < spec.size() && (spec[p] == ',' || spec[p] == '_')) grouping = spec[p++];
    int precision = -1;
    if (p < spec.size() && spec[p] == '.') {
        p++;
        if (p >= spec.size() || !ascii_digit(spec[p])) fail("Format specifier missing precision");
        precision = 0;
        while (p < spec.size() && ascii_digit(spec[p])) precision = std::min(precision * 10 + (spec[p++] - '0'), 1000);
    }
    char type = p < spec.size() ? spec[p++] : 0;
    if (p != spec.size())
        fail(fmt::format("Invalid format specifier '{}' for object of type '{}'", spec, type_name(v)));

    std::string body;
    bool numeric = false;
    if (v.is_string()) {
        if (type && type != 's') fail(fmt::format("Unknown format code '{}' for object of type 'str'", type));
        if (sign) fail("Sign not allowed in string format specifier");
        if (align == '=') fail("'=' alignment not allowed in string format specifier");
        body = v.str();
        if (precision >= 0) {
            const std::vector<uint32_t> cps = code_points(body);
            body = from_code_points(cps, 0, std::min(cps.size(), size_t(precision)));
        }
    } else {
        numeric = true;
        const bool integral = v.is_int();
        bool neg;
        std::string digits, prefix;
        if (integral && (type == 0 || std::strchr("dnxXobc", type))) {
            if (precision >= 0) fail("Precision not allowed in integer format specifier");
            const int64_t n = v.as_int();
            const uint64_t mag = magnitude(n);
            neg = n < 0;
            switch (type) {
            case 'x':
                digits = fmt::format("{:x}", mag);
                prefix = alt ? "0x" : "";
                break;
            case 'X':
                digits = fmt::format("{:X}", mag);
                prefix = alt ? "0X" : "";
                break;
            case 'o':
                digits = fmt::format("{:o}", mag);
                prefix = alt ? "0o" : "";
                break;
            case 'b':
                digits = fmt::format("{:b}", mag);
                prefix = alt ? "0b" : "";
                break;
            case 'c':
                if (n < 0 || n > 0x10ffff) fail("%c arg not in range(0x110000)");
                utf8_append(digits, uint32_t(n));
                neg = false;
                break;
            default:
                digits = std::to_string(mag);
            }
            if (grouping)
                digits =
                    group_digits(digits, grouping, type == 'x' || type == 'X' || type == 'o' || type == 'b' ? 4 : 3);
        } else if (type == 0 || std::strchr("eEfFgGn%", type)) {
            const double d = v.as_float();
            neg = std::signbit(d) && !(no_neg_zero && d == 0) && !std::isnan(d);
            digits = float_digits(d, type, precision, alt);
            if (grouping) {
                const size_t end = digits.find_first_not_of("0123456789");
                digits = group_digits(digits.substr(0, end), grouping, 3) +
                         (end == std::string::npos ? "" : digits.substr(end));
            }
        } else {
            fail(fmt::format("Unknown format code '{}' for object of type '{}'", type, type_name(v)));
        }
        body = (neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "") + prefix + digits;
    }
    const int64_t n = int64_t(n_code_points(body));
    if (width <= n) return body;
    if (!align) align = numeric ? '>' : '<';
    check_string_size(size_t(width) * fill.size());
    if (align == '=') {
        size_t lead = numeric && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
        if (numeric && body.size() > lead + 1 && body[lead] == '0' && std::strchr("xXob", body[lead + 1])) lead += 2;
        std::string mid;
        for (int64_t k = 0; k < width - n; k++) mid += fill;
        return body.substr(0, lead) + mid + body.substr(lead);
    }
    // format's centring puts the odd fill character on the right (str.center may put it on the left)
    const int64_t marg = width - n, left = align == '<' ? 0 : align == '>' ? marg : marg / 2;
    std::string out;
    for (int64_t k = 0; k < left; k++) out += fill;
    out += body;
    for (int64_t k = 0; k < marg - left; k++) out += fill;
    return out;
}

std::string format(evaluator& ev, std::string_view f, const call_args& args, bool markup) {
    std::string out;
    size_t auto_index = 0;
    bool used_auto = false, used_manual = false;
    for (size_t i = 0; i < f.size(); i++) {
        const char c = f[i];
        if (c == '}') {
            if (i + 1 < f.size() && f[i + 1] == '}')
                i++;
            else
                fail("Single '}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (i + 1 < f.size() && f[i + 1] == '{') {
            out += '{';
            i++;
            continue;
        }
        // the field runs to the matching '}' (a spec may nest one level of {fields})
        size_t close = i + 1;
        int level = 1;
        for (; close < f.size(); close++) {
            if (f[close] == '{')
                level++;
            else if (f[close] == '}' && --level == 0)
                break;
        }
        if (close >= f.size()) fail("expected '}' before end of string");
        std::string field(f.substr(i + 1, close - i - 1));
        i = close;
        std::string spec, conv;
        size_t colon = std::string::npos, bang = std::string::npos;
        for (size_t k = 0, depth = 0; k < field.size(); k++) {
            if (field[k] == '[')
                depth++;
            else if (field[k] == ']' && depth)
                depth--;
            else if (!depth && field[k] == '!' && bang == std::string::npos && colon == std::string::npos)
                bang = k;
            else if (!depth && field[k] == ':' && colon == std::string::npos)
                colon = k;
        }
        if (colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field.resize(colon);
        }
        if (bang != std::string::npos) {
            conv = field.substr(bang + 1);
            field.resize(bang);
            if (conv != "r" && conv != "s" && conv != "a") fail("Unknown conversion specifier " + conv);
        }
        if (spec.find('{') != std::string::npos) spec = format(ev, spec, args, false);
        size_t name_end = field.find_first_of(".[");
        const std::string head = field.substr(0, name_end);
        value v;
        if (head.empty()) {
            if (used_manual) fail("cannot switch from manual field specification to automatic field numbering");
            used_auto = true;
            if (auto_index >= args.pos.size())
                fail(fmt::format("Replacement index {} out of range for positional args tuple", auto_index));
            v = args.pos[auto_index++];
        } else if (std::all_of(head.begin(), head.end(), ascii_digit)) {
            if (used_auto) fail("cannot switch from automatic field numbering to manual field specification");
            used_manual = true;
            const size_t idx = std::stoul(head.substr(0, 9));
            if (idx >= args.pos.size())
                fail(fmt::format("Replacement index {} out of range for positional args tuple", idx));
            v = args.pos[idx];
        } else {
            const value* kw = args.keyword(head);
            if (!kw) fail(fmt::format("KeyError: '{}'", head));
            v = *kw;
        }
        while (name_end != std::string::npos && name_end < field.size()) {
            if (field[name_end] == '.') {
                const size_t e = field.find_first_of(".[", name_end + 1);
                v = ev.get_attr(v, field.substr(name_end + 1, e == std::string::npos ? e : e - name_end - 1));
                name_end = e;
            } else {
                const size_t e = field.find(']', name_end);
                if (e == std::string::npos) fail("Missing ']' in format string");
                const std::string key = field.substr(name_end + 1, e - name_end - 1);
                const bool numeric_key = !key.empty() && std::all_of(key.begin(), key.end(), ascii_digit);
                v = ev.get_item(v, numeric_key ? value::integer(std::stoll(key.substr(0, 18))) : value::string(key));
                name_end = e + 1;
                if (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[')
                    fail("Only '.' or '[' may follow ']' in format field specifier");
            }
        }
        if (conv == "r")
            v = value::string(to_repr(v));
        else if (conv == "s")
            v = value::string(to_str(v));
        else if (conv == "a")
            v = value::string(ascii_repr(v));
        std::string piece = format_value(v, spec);
        if (markup && !(v.is_string() && v.markup)) piece = html_escape(piece);
        out += piece;
        check_string_size(out.size());
    }
    return out;
}

std::string percent(std::string_view f, const value& args, bool markup) {
    // CPython's unicode_format: a tuple gives the arguments in order; anything else is the one argument, and a
    // mapping-like one (dict, list: anything subscriptable but a tuple or str) also serves %(key)s and excuses
    // arguments left unused
    const bool is_tuple = args.is_list() && args.tuple;
    const bool mapping = !is_tuple && (args.is_dict() || args.is_list() || args.is_undefined() ||
                                       (args.is_object() && args.o->has_getitem()));
    std::vector<value> list;
    if (is_tuple) list = args.items();
    size_t next = 0;
    bool single_used = false;
    auto next_arg = [&]() -> value {
        if (is_tuple) {
            if (next >= list.size()) fail("not enough arguments for format string");
            return list[next++];
        }
        if (single_used) fail("not enough arguments for format string");
        single_used = true;
        return args;
    };
    std::string out;
    for (size_t i = 0; i < f.size(); i++) {
        if (f[i] != '%') {
            out += f[i];
            continue;
        }
        if (++i >= f.size()) fail("incomplete format");
        value v;
        bool have = false;
        if (f[i] == '(') {
            if (args.is_undefined()) fail(args.s ? *args.s : "value is undefined");
            if (!args.is_dict()) fail("format requires a mapping");
            size_t depth = 1, close = i + 1;
            for (; close < f.size() && depth; close++) {
                if (f[close] == '(')
                    depth++;
                else if (f[close] == ')')
                    depth--;
            }
            if (depth) fail("incomplete format key");
            const std::string key(f.substr(i + 1, close - i - 2));
            const value* x = args.d->find(std::string_view(key));
            if (!x) fail(fmt::format("KeyError: '{}'", key));
            v = *x;
            have = true;
            i = close;
        }
        std::string flags;
        while (i < f.size() && std::strchr("-+ #0", f[i])) flags += f[i++];
        auto number = [&](int limit) {
            if (i < f.size() && f[i] == '*') {
                i++;
                const value w = next_arg();
                if (!w.is_int()) fail("* wants int");
                return int(std::clamp<int64_t>(w.as_int(), -limit, limit));
            }
            int n = 0;
            while (i < f.size() && ascii_digit(f[i])) n = std::min(n * 10 + (f[i++] - '0'), limit);
            return n;
        };
        int width = number(1 << 30);
        if (width < 0) {
            flags += '-';
            width = -width;
        }
        int precision = -1;
        if (i < f.size() && f[i] == '.') {
            i++;
            precision = std::max(number(1000), 0);
        }
        while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) i++;
        if (i >= f.size()) fail("incomplete format");
        const char c = f[i];
        if (c == '%') {
            out += '%';
            continue;
        }
        if (!have) v = next_arg();
        const bool minus = flags.find('-') != std::string::npos, plus = flags.find('+') != std::string::npos,
                   space = flags.find(' ') != std::string::npos, alt = flags.find('#') != std::string::npos,
                   zero = flags.find('0') != std::string::npos;
        std::string body;
        bool numeric = false;
        switch (c) {
        case 's':
            body = to_str(v);
            break;
        case 'r':
            body = to_repr(v);
            break;
        case 'a':
            body = ascii_repr(v);
            break;
        case 'c':
            if (v.is_string()) {
                if (n_code_points(v.str()) != 1) fail("%c requires int or char");
                body = v.str();
            } else if (v.is_int()) {
                if (v.as_int() < 0 || v.as_int() > 0x10ffff) fail("%c arg not in range(0x110000)");
                utf8_append(body, uint32_t(v.as_int()));
            } else {
                fail("%c requires int or char");
            }
            break;
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': {
            numeric = true;
            if (!v.is_number() || ((c == 'x' || c == 'X' || c == 'o') && !v.is_int()))
                fail(fmt::format("%{} format: {} is required, not {}", c,
                                 c == 'x' || c == 'X' || c == 'o' ? "an integer" : "a real number", type_name(v)));
            if (v.k == kind::floating && !std::isfinite(v.f)) fail("cannot convert float infinity or NaN to integer");
            const int64_t n = v.is_int() ? v.as_int() : int64_t(std::trunc(v.f));
            const uint64_t mag = magnitude(n);
            std::string digits = c == 'x'   ? fmt::format("{:x}", mag)
                                 : c == 'X' ? fmt::format("{:X}", mag)
                                 : c == 'o' ? fmt::format("{:o}", mag)
                                            : std::to_string(mag);
            if (precision > int(digits.size())) digits = std::string(size_t(precision) - digits.size(), '0') + digits;
            if (alt && (c == 'x' || c == 'X' || c == 'o')) digits = (c == 'o' ? "0o" : c == 'x' ? "0x" : "0X") + digits;
            body = (n < 0 ? "-" : plus ? "+" : space ? " " : "") + digits;
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
            numeric = true;
            if (!v.is_number()) fail(fmt::format("must be real number, not {}", type_name(v)));
            const double d = v.as_float();
            body = float_digits(d, c, precision < 0 ? 6 : precision, alt);
            body = (std::signbit(d) && !std::isnan(d) ? "-" : plus ? "+" : space ? " " : "") + body;
            break;
        }
        default:
            fail(fmt::format("unsupported format character '{}' (0x{:x}) at index {}", c, int(c), i));
        }
        if ((c == 's' || c == 'r' || c == 'a') && precision >= 0) {
            const std::vector<uint32_t> cps = code_points(body);
            body = from_code_points(cps, 0, std::min(cps.size(), size_t(precision)));
        }
        if (markup && !numeric && !(c == 's' && v.is_string() && v.markup)) body = html_escape(body);
        const int n = int(n_code_points(body));
        if (width > n) {
            check_string_size(size_t(width));
            if (minus) {
                body += std::string(size_t(width - n), ' ');
            } else if (zero && numeric) {
                size_t lead = !body.empty() && std::strchr("+- ", body[0]) ? 1 : 0;
                if (body.size() > lead + 1 && body[lead] == '0' && std::strchr("xXo", body[lead + 1])) lead += 2;
                body = body.substr(0, lead) + std::string(size_t(width - n), '0') + body.substr(lead);
            } else {
                body = std::string(size_t(width - n), ' ') + body;
            }
        }
        out += body;
        check_string_size(out.size());
    }
    if (!mapping && ((is_tuple && next < list.size()) || (!is_tuple && !single_used)))
        fail("not all arguments converted during string formatting");
    return out;
}

} // namespace tessera::jinja::py
