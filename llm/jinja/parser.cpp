// parser.cpp: jinja2's lexer and parser for the configuration transformers uses (trim_blocks, lstrip_blocks, one
// trailing newline dropped, loop controls, {% generation %}). The lexer follows jinja2's rules for whitespace control
// ({%- -%} {%+ +%}, lstrip only of tags alone on their line, the newline after a block tag), bracket balancing inside
// tags and python's string escapes; the parser is jinja2's grammar (precedence, chained comparisons, filters, tests,
// slices, call arguments). Nesting is bounded: a hostile template is one error, not a stack overflow.
#include "llm/jinja/ast.h"
#include "llm/jinja/unicode_db.h"

#include "llm/unicode.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

namespace tessera::jinja {

namespace {

constexpr int max_nesting = 100;    // statement blocks or parenthesised expressions inside each other
constexpr int max_expr_depth = 400; // depth of one expression tree (a+a+a+... is left-deep)

[[noreturn]] void syntax_error(int line, std::string msg) {
    throw eval_error{std::move(msg), line};
}

enum class tok : uint8_t { data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct token {
    tok type;
    std::string text; // data, name, op; string: the decoded value; numbers: the digits
    int line;
    value num; // integer / floating
};

// python's \s (str.isspace) at s[p]: the UTF-8 length of the whitespace code point there, else 0
size_t space_at(std::string_view s, size_t p) {
    const unsigned char c = static_cast<unsigned char>(s[p]);
    if (c < 0x80) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) ? 1 : 0;
    size_t q = p;
    const uint32_t cp = utf8_decode(s, q);
    return ucd::has(cp, ucd::space) ? q - p : 0;
}

// python's str.rstrip()
std::string rstrip_ws(std::string_view s) {
    size_t keep = 0;
    for (size_t p = 0; p < s.size();) {
        const size_t n = space_at(s, p);
        if (n) {
            p += n;
        } else {
            p += std::min(utf8_len(s[p]), s.size() - p);
            keep = p;
        }
    }
    return std::string(s.substr(0, keep));
}

// true when s[p:] is one or more whitespace code points (python's \s+ fullmatch)
bool all_space(std::string_view s, size_t p) {
    if (p >= s.size()) return false;
    while (p < s.size()) {
        const size_t n = space_at(s, p);
        if (!n) return false;
        p += n;
    }
    return true;
}

// python's unicode-escape decoding of a string literal's body
std::string unescape(std::string_view s, int line) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        auto hex = [&](int n) {
            uint32_t v = 0;
            for (int k = 1; k <= n; k++) {
                if (i + size_t(k) >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + size_t(k)])))
                    syntax_error(line, fmt::format("truncated \\{} escape in a string", c));
                const char h = s[i + size_t(k)];
                v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
            }
            i += size_t(n);
            return v;
        };
        switch (c) {
        case '\\':
            out += '\\';
            break;
        case '\'':
            out += '\'';
            break;
        case '"':
            out += '"';
            break;
        case 'a':
            out += '\a';
            break;
        case 'b':
            out += '\b';
            break;
        case 'f':
            out += '\f';
            break;
        case 'n':
            out += '\n';
            break;
        case 'r':
            out += '\r';
            break;
        case 't':
            out += '\t';
            break;
        case 'v':
            out += '\v';
            break;
        case '\n':
            break;
        case 'x':
            utf8_append(out, hex(2));
            break;
        case 'u':
            utf8_append(out, hex(4));
            break;
        case 'U': {
            const uint32_t v = hex(8);
            if (v > 0x10ffff) syntax_error(line, "illegal Unicode character in a string");
            utf8_append(out, v);
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = uint32_t(c - '0');
                for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                    v = v * 8 + uint32_t(s[++i] - '0');
                utf8_append(out, v);
            } else {
                out += '\\';
                out += c;
            }
        }
    }
    return out;
}

class lexer {
  public:
    explicit lexer(std::string_view source) {
        // newlines normalised to \n, one trailing newline dropped (keep_trailing_newline=False)
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); i++) {
            if (source[i] == '\r') {
                src_ += '\n';
                if (i + 1 < source.size() && source[i + 1] == '\n') i++;
            } else {
                src_ += source[i];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<token> run() {
        while (pos_ < src_.size()) root();
        tokens_.push_back({tok::eof, "", line_at(src_.size()), {}});
        return std::move(tokens_);
    }

  private:
    std::string src_;
    size_t pos_ = 0;
    size_t line_pos_ = 0; // line_ is the line of line_pos_
    int line_ = 1;
    bool line_starting_ = true;
    std::vector<token> tokens_;

    int line_at(size_t p) {
        if (p < line_pos_) {
            line_pos_ = 0;
            line_ = 1;
        }
        for (; line_pos_ < p; line_pos_++) line_ += src_[line_pos_] == '\n';
        return line_;
    }
    bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }
    size_t skip_ws(size_t p) const {
        while (p < src_.size()) {
            const size_t n = space_at(src_, p);
            if (!n) break;
            p += n;
        }
        return p;
    }

    // Data before a tag, whitespace-controlled by the tag's sign; lstrip_blocks for block and comment tags.
    void emit_data(size_t begin, size_t end, char sign, bool lstrip) {
        std::string text = src_.substr(begin, end - begin);
        if (sign == '-') {
            text = rstrip_ws(text);
        } else if (sign != '+' && lstrip) {
            const size_t nl = text.rfind('\n');
            const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
            if ((l_pos > 0 || line_starting_) && all_space(text, l_pos)) text.resize(l_pos);
        }
        if (!text.empty()) tokens_.push_back({tok::data, std::move(text), line_at(begin), {}});
    }

    // The end of a block-like tag at p ("%}" or "#}" given as `close`): returns the position after it and its
    // trailing whitespace control: "-%}" eats all whitespace, "+%}" none, "%}" one newline.
    size_t close_tag(size_t p, std::string_view close, bool trim) {
        size_t end;
        if (src_[p] == '-') {
            end = skip_ws(p + 1 + close.size());
        } else if (src_[p] == '+') {
            end = p + 1 + close.size();
        } else {
            end = p + close.size();
            if (trim && end < src_.size() && src_[end] == '\n') end++;
        }
        line_starting_ = end > 0 && src_[end - 1] == '\n';
        return end;
    }

    // Position of the next tag start ("{{", "{%", "{#") at or after p, or npos.
    size_t next_tag(size_t p) const {
        while (true) {
            p = src_.find('{', p);
            if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
            const char c = src_[p + 1];
            if (c == '{' || c == '%' || c == '#') return p;
            p++;
        }
    }

    // "{%[-+] raw [-]%}" at p: returns the position after it, or npos when the tag is not raw.
    size_t raw_begin(size_t p) const {
        size_t q = p + 2;
        if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) q++;
        q = skip_ws(q);
        if (!at(q, "raw")) return std::string::npos;
        q = skip_ws(q + 3);
        if (at(q, "-%}")) return skip_ws(q + 3);
        if (at(q, "%}")) return q + 2;
        return std::string::npos;
    }

    void root() {
        const size_t p = next_tag(pos_);
        if (p == std::string::npos) {
            tokens_.push_back({tok::data, src_.substr(pos_), line_at(pos_), {}});
            pos_ = src_.size();
            return;
        }
        const char c = src_[p + 1];
        const char sign = p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
        if (c == '%') {
            const size_t after_raw = raw_begin(p);
            if (after_raw != std::string::npos) {
                emit_data(pos_, p, sign, true);
                line_starting_ = src_[after_raw - 1] == '\n';
                raw_body(after_raw, line_at(p));
                return;
            }
        }
        emit_data(pos_, p, sign, c != '{');
        const size_t body = p + 2 + (sign ? 1 : 0);
        if (c == '#') {
            size_t q = src_.find("#}", body);
            if (q == std::string::npos) syntax_error(line_at(p), "Missing end of comment tag");
            if (q > body && (src_[q - 1] == '-' || src_[q - 1] == '+')) q--;
            pos_ = close_tag(q, "#}", true);
            return;
        }
        tag(p, body, c == '%');
    }

    void raw_body(size_t begin, int line) {
        for (size_t p = src_.find("{%", begin); p != std::string::npos; p = src_.find("{%", p + 1)) {
            size_t q = p + 2;
            const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
            if (sign) q++;
            q = skip_ws(q);
            if (!at(q, "endraw")) continue;
            q = skip_ws(q + 6);
            if (!(at(q, "%}") || at(q, "-%}") || at(q, "+%}"))) continue;
            emit_data(begin, p, sign, true);
            pos_ = close_tag(q, "%}", true);
            return;
        }
        syntax_error(line, "Missing end of raw directive");
    }

    void tag(size_t start, size_t p, bool block) {
        tokens_.push_back({block ? tok::block_begin : tok::var_begin, "", line_at(start), {}});
        std::string balance;
        while (true) {
            if (p >= src_.size())
                syntax_error(line_at(start), block ? "unexpected end of template, expected '%}'"
                                                   : "unexpected end of template, expected '}}'");
            if (balance.empty()) {
                if (block && (at(p, "%}") || at(p, "-%}") || at(p, "+%}"))) {
                    tokens_.push_back({tok::block_end, "", line_at(p), {}});
                    pos_ = close_tag(p, "%}", true);
                    return;
                }
                if (!block && (at(p, "}}") || at(p, "-}}"))) {
                    tokens_.push_back({tok::var_end, "", line_at(p), {}});
                    pos_ = src_[p] == '-' ? skip_ws(p + 3) : p + 2;
                    line_starting_ = src_[pos_ - 1] == '\n';
                    return;
                }
            }
            const char c = src_[p];
            if (const size_t n = space_at(src_, p)) {
                p += n;
                continue;
            }
            if (std::isdigit(static_cast<unsigned char>(c))) {
                p = number(p);
                continue;
            }
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t q = p;
                while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) q++;
                tokens_.push_back({tok::name, src_.substr(p, q - p), line_at(p), {}});
                p = q;
                continue;
            }
            if (c == '\'' || c == '"') {
                size_t q = p + 1;
                while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
                if (q >= src_.size()) syntax_error(line_at(p), "unexpected end of string literal");
                const int line = line_at(p);
                tokens_.push_back(
                    {tok::string, unescape(std::string_view(src_).substr(p + 1, q - p - 1), line), line, {}});
                p = q + 1;
                continue;
            }
            static const char* const ops2[] = {"//", "**", "==", "!=", ">=", "<="};
            std::string op;
            for (const char* o : ops2)
                if (at(p, o)) op = o;
            if (op.empty() && std::strchr("+-/*%~[](){}><=.:|,;", c)) op = std::string(1, c);
            if (op.empty()) syntax_error(line_at(p), fmt::format("unexpected char '{}'", c));
            if (op == "(" || op == "[" || op == "{") {
                balance += op == "(" ? ')' : op == "[" ? ']' : '}';
            } else if (op == ")" || op == "]" || op == "}") {
                if (balance.empty()) syntax_error(line_at(p), fmt::format("unexpected '{}'", op));
                if (balance.back() != op[0])
                    syntax_error(line_at(p), fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
                balance.pop_back();
            }
            tokens_.push_back({tok::op, op, line_at(p), {}});
            p += op.size();
        }
    }

    // integer (decimal, 0b, 0o, 0x, '_' separators) or float (fraction and/or exponent) at p
    size_t number(size_t p) {
        const int line = line_at(p);
        auto digits = [&](size_t q, auto is_digit) {
            size_t r = q;
            while (r < src_.size() &&
                   (is_digit(src_[r]) || (src_[r] == '_' && r + 1 < src_.size() && r > q && is_digit(src_[r + 1]))))
                r++;
            return r;
        };
        auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
        std::string clean;
        if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("bBoOxX", src_[p + 1])) {
            const char base = char(src_[p + 1] | 0x20);
            auto ok = [base](char ch) {
                return base == 'b'   ? (ch == '0' || ch == '1')
                       : base == 'o' ? (ch >= '0' && ch <= '7')
                                     : std::isxdigit(static_cast<unsigned char>(ch)) != 0;
            };
            size_t q = p + 2;
            if (q < src_.size() && src_[q] == '_') q++;
            const size_t end = digits(q, ok);
            if (end > q) {
                for (size_t i = q; i < end; i++)
                    if (src_[i] != '_') clean += src_[i];
                errno = 0;
                const unsigned long long v = std::strtoull(clean.c_str(), nullptr,
                                                           base == 'b'   ? 2
                                                           : base == 'o' ? 8
                                                                         : 16);
                if (errno || v > uint64_t(INT64_MAX)) syntax_error(line, "integer literal too large");
                tokens_.push_back({tok::integer, src_.substr(p, end - p), line, value::integer(int64_t(v))});
                return end;
            }
        }
        size_t end = digits(p, dec);
        bool is_float = false;
        if (end + 1 < src_.size() && src_[end] == '.' && dec(src_[end + 1]) && !(p > 0 && src_[p - 1] == '.')) {
            end = digits(end + 1, dec);
            is_float = true;
        }
        if (end < src_.size() && (src_[end] | 0x20) == 'e' && !(p > 0 && src_[p - 1] == '.')) {
            size_t q = end + 1;
            if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) q++;
            if (q < src_.size() && dec(src_[q])) {
                end = digits(q, dec);
                is_float = true;
            }
        }
        for (size_t i = p; i < end; i++)
            if (src_[i] != '_') clean += src_[i];
        if (is_float) {
            tokens_.push_back({tok::floating, clean, line, value::floating(std::strtod(clean.c_str(), nullptr))});
        } else {
            if (clean.size() > 1 && clean[0] == '0' && clean.find_first_not_of('0') != std::string::npos) {
                // jinja2 reads 007 as 00 then 7: an error in any real expression
                syntax_error(line, "leading zeros in a decimal integer literal are not permitted");
            }
            errno = 0;
            const unsigned long long v = std::strtoull(clean.c_str(), nullptr, 10);
            if (errno || v > uint64_t(INT64_MAX)) syntax_error(line, "integer literal too large");
            tokens_.push_back({tok::integer, clean, line, value::integer(int64_t(v))});
        }
        return end;
    }
};

class parser {
  public:
    explicit parser(std::vector<token> tokens) : t_(std::move(tokens)) {}

    std::unique_ptr<program> run() {
        auto prog = std::make_unique<program>();
        std::string end;
        prog->root = parse_body({}, end, 0);
        check_names(prog->root, false);
        return prog;
    }

  private:
    std::vector<token> t_;
    size_t i_ = 0;
    int nesting_ = 0;
    int for_depth_ = 0;   // for loops around the statement being parsed
    int break_depth_ = 0; // the same, counted from the innermost macro (break cannot leave a macro)

    struct nest {
        parser& p;
        explicit nest(parser& pp, int line) : p(pp) {
            if (++p.nesting_ > max_nesting) syntax_error(line, "template nested too deeply");
        }
        ~nest() { p.nesting_--; }
    };

    const token& cur() const { return t_[i_]; }
    const token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
    int line() const { return cur().line; }
    void next() {
        if (i_ + 1 < t_.size()) i_++;
    }
    bool is_op(const char* op) const { return cur().type == tok::op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == tok::name && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }
    static std::string describe(const token& t) {
        switch (t.type) {
        case tok::eof:
            return "end of template";
        case tok::block_end:
            return "end of statement block";
        case tok::var_end:
            return "end of print statement";
        case tok::data:
            return "template data";
        case tok::string:
            return "string";
        default:
            return "'" + t.text + "'";
        }
    }
    [[noreturn]] void unexpected(const char* expected) const {
        syntax_error(line(), fmt::format("expected {}, got {}", expected, describe(cur())));
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) unexpected(fmt::format("'{}'", op).c_str());
    }
    std::string expect_name() {
        if (cur().type != tok::name) unexpected("a name");
        std::string n = cur().text;
        next();
        return n;
    }
    void expect_block_end() {
        if (cur().type != tok::block_end) unexpected("end of statement block");
        next();
    }

    static expr_ptr node(ex type, int line) {
        auto e = std::make_unique<expr>();
        e->type = type;
        e->line = line;
        return e;
    }
    // Sets e's depth from its children; fails past max_expr_depth.
    static expr_ptr done(expr_ptr e) {
        int d = 0;
        for (const auto& k : e->kids)
            if (k) d = std::max(d, k->depth);
        for (const auto& k : e->args.pos) d = std::max(d, k->depth);
        for (const auto& [n, k] : e->args.kw) d = std::max(d, k->depth);
        if (e->args.star) d = std::max(d, e->args.star->depth);
        if (e->args.star2) d = std::max(d, e->args.star2->depth);
        e->depth = d + 1;
        if (e->depth > max_expr_depth) syntax_error(e->line, "expression nested too deeply");
        return e;
    }

    // ---- unknown filters and tests ----

    // jinja2's compiler fails on an unknown filter or test unless it sits in a "soft" frame: an if statement (its
    // tests and bodies) or a conditional expression; macro, call, loop, filter and set-block bodies start hard again.
    static void check_names(const expr* e, bool soft) {
        if (!e) return;
        if (e->type == ex::cond) soft = true;
        if (!soft && e->type == ex::filter && !has_filter(e->name))
            syntax_error(e->line, fmt::format("No filter named '{}'.", e->name));
        if (!soft && e->type == ex::test && !has_test(e->name))
            syntax_error(e->line, fmt::format("No test named '{}'.", e->name));
        for (const auto& k : e->kids) check_names(k.get(), soft);
        for (const auto& k : e->args.pos) check_names(k.get(), soft);
        for (const auto& [n, k] : e->args.kw) check_names(k.get(), soft);
        check_names(e->args.star.get(), soft);
        check_names(e->args.star2.get(), soft);
    }
    static void check_names(const body& b, bool soft) {
        for (const auto& s : b) {
            switch (s->type) {
            case st::if_:
                for (const auto& c : s->conds) check_names(c.get(), true);
                for (const auto& x : s->bodies) check_names(x, true);
                break;
            case st::for_:
                check_names(s->e.get(), soft);
                check_names(s->cond.get(), false);
                check_names(s->main, false);
                check_names(s->else_body, false);
                break;
            case st::macro:
            case st::call_block:
                for (const auto& [n, d] : s->params) check_names(d.get(), false);
                check_names(s->main, false);
                check_names(s->e.get(), soft);
                break;
            case st::set_block:
            case st::filter_block:
                for (const auto& f : s->filters) check_names(f.get(), false);
                check_names(s->main, false);
                break;
            case st::generation:
                check_names(s->main, false);
                break;
            case st::with:
                for (const auto& c : s->conds) check_names(c.get(), soft);
                check_names(s->main, false);
                break;
            case st::block:
            case st::autoescape:
                check_names(s->e.get(), soft);
                check_names(s->main, false);
                break;
            default:
                check_names(s->e.get(), soft);
            }
        }
    }

    // ---- statements ----

    // Parses until a block tag whose name is in `ends` (consumed: block_begin and the name); `end` gets that name.
    body parse_body(std::initializer_list<const char*> ends, std::string& end, int open_line) {
        body out;
        while (true) {
            const token& t = cur();
            if (t.type == tok::eof) {
                if (ends.size() == 0) return out;
                std::string names;
                for (const char* e : ends) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
                syntax_error(t.line, fmt::format("unexpected end of template: the block opened on line {} needs {}",
                                                 open_line, names));
            }
            if (t.type == tok::data) {
                auto s = std::make_unique<stmt>();
                s->type = st::text;
                s->line = t.line;
                s->text = t.text;
                out.push_back(std::move(s));
                next();
            } else if (t.type == tok::var_begin) {
                auto s = std::make_unique<stmt>();
                s->type = st::print;
                s->line = t.line;
                next();
                s->e = parse_tuple(true, {});
                if (cur().type != tok::var_end) unexpected("end of print statement");
                next();
                out.push_back(std::move(s));
            } else if (t.type == tok::block_begin) {
                next();
                if (cur().type != tok::name) unexpected("a tag name");
                const std::string name = cur().text;
                for (const char* e : ends)
                    if (name == e) {
                        end = name;
                        next();
                        return out;
                    }
                out.push_back(parse_statement());
            } else {
                unexpected("template data or a tag");
            }
        }
    }

    stmt_ptr parse_statement() {
        const int ln = line();
        nest guard(*this, ln);
        const std::string name = expect_name();
        auto s = std::make_unique<stmt>();
        s->line = ln;
        std::string end;
        if (name == "if") {
            s->type = st::if_;
            s->conds.push_back(parse_tuple(false, {}));
            expect_block_end();
            while (true) {
                s->bodies.push_back(parse_body({"elif", "else", "endif"}, end, ln));
                if (end == "elif") {
                    s->conds.push_back(parse_tuple(false, {}));
                    expect_block_end();
                } else if (end == "else") {
                    expect_block_end();
                    s->bodies.push_back(parse_body({"endif"}, end, ln));
                    expect_block_end();
                    break;
                } else {
                    expect_block_end();
                    break;
                }
            }
        } else if (name == "for") {
            s->type = st::for_;
            s->targets = parse_targets(false, "in");
            if (!skip_name("in")) unexpected("'in'");
            s->e = parse_tuple(false, {"recursive"});
            if (skip_name("if")) s->cond = parse_expression(true);
            s->recursive = skip_name("recursive");
            expect_block_end();
            for_depth_++;
            break_depth_++;
            s->main = parse_body({"endfor", "else"}, end, ln);
            break_depth_--;
            if (end == "else") {
                expect_block_end();
                s->else_body = parse_body({"endfor"}, end, ln);
            }
            for_depth_--;
            for (const target& t : s->targets)
                if (t.name == "loop") syntax_error(ln, "Can't assign to special loop variable in for-loop target");
            expect_block_end();
        } else if (name == "set") {
            s->targets = parse_targets(true, "=");
            if (skip_op("=")) {
                s->type = st::set;
                s->e = parse_tuple(true, {});
                expect_block_end();
            } else {
                if (s->targets.size() != 1) unexpected("'='");
                s->type = st::set_block;
                while (is_op("|")) {
                    next();
                    s->filters.push_back(parse_filter(nullptr));
                }
                expect_block_end();
                s->main = parse_body({"endset"}, end, ln);
                expect_block_end();
            }
            for (const target& t : s->targets)
                if (for_depth_ > 0 && t.attr.empty() && t.name == "loop")
                    syntax_error(ln, "Can't assign to special loop variable in for-loop target");
        } else if (name == "macro") {
            s->type = st::macro;
            s->name = expect_name();
            parse_signature(s->params);
            expect_block_end();
            const int saved = std::exchange(break_depth_, 0);
            s->main = parse_body({"endmacro"}, end, ln);
            break_depth_ = saved;
            expect_block_end();
            scan_specials(*s);
        } else if (name == "call") {
            s->type = st::call_block;
            if (is_op("(")) parse_signature(s->params);
            s->e = parse_expression(true);
            if (s->e->type != ex::call) syntax_error(ln, "expected a call after {% call %}");
            expect_block_end();
            const int saved = std::exchange(break_depth_, 0);
            s->main = parse_body({"endcall"}, end, ln);
            break_depth_ = saved;
            expect_block_end();
            scan_specials(*s);
        } else if (name == "filter") {
            s->type = st::filter_block;
            s->filters.push_back(parse_filter(nullptr));
            while (skip_op("|")) s->filters.push_back(parse_filter(nullptr));
            expect_block_end();
            s->main = parse_body({"endfilter"}, end, ln);
            expect_block_end();
        } else if (name == "break" || name == "continue") {
            if (break_depth_ == 0) syntax_error(ln, fmt::format("'{}' outside loop", name));
            s->type = name == "break" ? st::break_ : st::continue_;
            expect_block_end();
        } else if (name == "generation") {
            s->type = st::generation;
            expect_block_end();
            s->main = parse_body({"endgeneration"}, end, ln);
            expect_block_end();
        } else if (name == "with") {
            s->type = st::with;
            while (cur().type != tok::block_end) {
                if (!s->targets.empty()) expect_op(",");
                s->targets.push_back({expect_name(), {}});
                expect_op("=");
                s->conds.push_back(parse_expression(true));
            }
            expect_block_end();
            s->main = parse_body({"endwith"}, end, ln);
            expect_block_end();
        } else if (name == "block") {
            s->type = st::block;
            s->name = expect_name();
            s->recursive = skip_name("scoped");
            if (skip_name("required")) syntax_error(ln, "Required blocks can only contain comments or whitespace");
            expect_block_end();
            s->main = parse_body({"endblock"}, end, ln);
            if (cur().type == tok::name && cur().text != s->name)
                syntax_error(line(), fmt::format("mismatching name of block: {} and {}", s->name, cur().text));
            skip_name(s->name.c_str());
            expect_block_end();
        } else if (name == "autoescape") {
            s->type = st::autoescape;
            s->e = parse_expression(true);
            expect_block_end();
            s->main = parse_body({"endautoescape"}, end, ln);
            expect_block_end();
        } else if (name == "include" || name == "import" || name == "from" || name == "extends") {
            s->type = st::load;
            s->e = parse_expression(true);
            while (cur().type != tok::block_end && cur().type != tok::eof) next(); // as, import names, with context
            expect_block_end();
        } else {
            syntax_error(ln, fmt::format("Encountered unknown tag '{}'", name));
        }
        return s;
    }

    // for / set targets: a name or names separated by commas, optionally in parentheses; set also takes ns.attr
    std::vector<target> parse_targets(bool with_namespace, const char* stop) {
        std::vector<target> out;
        const bool paren = skip_op("(");
        while (true) {
            target t{expect_name(), {}};
            if (with_namespace && is_op(".")) {
                next();
                t.attr = expect_name();
            }
            out.push_back(std::move(t));
            if (!skip_op(",")) break;
            if ((paren && is_op(")")) || is_name(stop) || is_op(stop)) break;
        }
        if (paren) expect_op(")");
        return out;
    }

    void parse_signature(std::vector<std::pair<std::string, expr_ptr>>& params) {
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            if (is_op(")")) break;
            std::string n = expect_name();
            expr_ptr def;
            if (skip_op("="))
                def = parse_expression(true);
            else if (!params.empty() && params.back().second)
                syntax_error(line(), "non-default argument follows default argument");
            params.emplace_back(std::move(n), std::move(def));
        }
        expect_op(")");
    }

    // jinja2's find_undeclared(body, (caller, kwargs, varargs)): which of the three names the body of a macro or call
    // block reads (a store of the name before any read takes it out); those the macro then accepts.
    static void scan_specials(stmt& m) {
        std::vector<std::string> names = {"caller", "kwargs", "varargs"};
        std::vector<std::string> found;
        names_visitor v{names, found};
        v.body_(m.main);
        auto has = [&](const char* n) { return std::find(found.begin(), found.end(), n) != found.end(); };
        bool param_kwargs = false, param_varargs = false;
        for (const auto& [n, d] : m.params) {
            param_kwargs = param_kwargs || n == "kwargs";
            param_varargs = param_varargs || n == "varargs";
        }
        m.uses_caller = has("caller");
        m.catch_kwargs = has("kwargs") && !param_kwargs;
        m.catch_varargs = has("varargs") && !param_varargs;
    }

    struct names_visitor {
        std::vector<std::string>& names; // still looked for
        std::vector<std::string>& found; // read before any store
        void name(const std::string& n, bool load) {
            auto it = std::find(names.begin(), names.end(), n);
            if (it == names.end()) return;
            if (load) found.push_back(n);
            names.erase(it);
        }
        void expr_(const expr* e) {
            if (!e) return;
            if (e->type == ex::name) name(e->name, true);
            for (const auto& k : e->kids) expr_(k.get());
            for (const auto& k : e->args.pos) expr_(k.get());
            for (const auto& [n, k] : e->args.kw) expr_(k.get());
            expr_(e->args.star.get());
            expr_(e->args.star2.get());
        }
        void body_(const body& b) {
            for (const auto& st : b) stmt_(*st);
        }
        void stmt_(const stmt& s) {
            expr_(s.e.get());
            for (const auto& t : s.targets)
                if (t.attr.empty()) name(t.name, false);
            expr_(s.cond.get());
            for (const auto& c : s.conds) expr_(c.get());
            for (const auto& b : s.bodies) body_(b);
            for (const auto& [n, d] : s.params) {
                expr_(d.get());
                name(n, false);
            }
            for (const auto& f : s.filters) expr_(f.get());
            body_(s.main);
            body_(s.else_body);
        }
    };

    // ---- expressions ----

    bool tuple_end(std::initializer_list<const char*> extra) const {
        if (cur().type == tok::var_end || cur().type == tok::block_end || cur().type == tok::eof) return true;
        if (is_op(")")) return true;
        for (const char* e : extra)
            if (is_name(e)) return true;
        return false;
    }

    expr_ptr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens = false) {
        const int ln = line();
        std::vector<expr_ptr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (tuple_end(extra)) break;
            items.push_back(parse_expression(with_condexpr));
            if (is_op(","))
                is_tuple = true;
            else
                break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) unexpected("an expression");
        }
        auto e = node(ex::tuple, ln);
        e->kids = std::move(items);
        return done(std::move(e));
    }

    expr_ptr parse_expression(bool with_condexpr) {
        nest guard(*this, line());
        if (!with_condexpr) return parse_or();
        expr_ptr e = parse_or();
        while (is_name("if")) {
            const int ln = line();
            next();
            auto c = node(ex::cond, ln);
            expr_ptr test = parse_or();
            expr_ptr other;
            if (skip_name("else")) other = parse_expression(true);
            c->kids.push_back(std::move(e));
            c->kids.push_back(std::move(test));
            c->kids.push_back(std::move(other));
            e = done(std::move(c));
        }
        return e;
    }

    expr_ptr binary_node(ex type, expr_ptr l, expr_ptr r, int ln) {
        auto e = node(type, ln);
        e->kids.push_back(std::move(l));
        e->kids.push_back(std::move(r));
        return done(std::move(e));
    }

    expr_ptr parse_or() {
        expr_ptr e = parse_and();
        while (is_name("or")) {
            const int ln = line();
            next();
            e = binary_node(ex::or_, std::move(e), parse_and(), ln);
        }
        return e;
    }
    expr_ptr parse_and() {
        expr_ptr e = parse_not();
        while (is_name("and")) {
            const int ln = line();
            next();
            e = binary_node(ex::and_, std::move(e), parse_not(), ln);
        }
        return e;
    }
    expr_ptr parse_not() {
        if (is_name("not")) {
            const int ln = line();
            nest guard(*this, ln);
            next();
            auto e = node(ex::not_, ln);
            e->kids.push_back(parse_not());
            return done(std::move(e));
        }
        return parse_compare();
    }
    expr_ptr parse_compare() {
        const int ln = line();
        expr_ptr first = parse_math1();
        std::vector<std::string> ops;
        std::vector<expr_ptr> rest;
        while (true) {
            std::string op;
            if (cur().type == tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = cur().text;
                next();
            } else if (is_name("in")) {
                op = "in";
                next();
            } else if (is_name("not") && peek().type == tok::name && peek().text == "in") {
                op = "notin";
                next();
                next();
            } else {
                break;
            }
            ops.push_back(op);
            rest.push_back(parse_math1());
        }
        if (ops.empty()) return first;
        auto e = node(ex::compare, ln);
        e->kids.push_back(std::move(first));
        for (auto& r : rest) e->kids.push_back(std::move(r));
        e->ops = std::move(ops);
        return done(std::move(e));
    }
    expr_ptr binop_node(binop op, expr_ptr l, expr_ptr r, int ln) {
        auto e = binary_node(ex::binary, std::move(l), std::move(r), ln);
        e->op = op;
        return e;
    }
    expr_ptr parse_math1() {
        expr_ptr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            const int ln = line();
            const binop op = is_op("+") ? binop::add : binop::sub;
            next();
            e = binop_node(op, std::move(e), parse_concat(), ln);
        }
        return e;
    }
    expr_ptr parse_concat() {
        const int ln = line();
        expr_ptr e = parse_math2();
        if (!is_op("~")) return e;
        auto c = node(ex::concat, ln);
        c->kids.push_back(std::move(e));
        while (skip_op("~")) c->kids.push_back(parse_math2());
        return done(std::move(c));
    }
    expr_ptr parse_math2() {
        expr_ptr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const int ln = line();
            const std::string& o = cur().text;
            const binop op = o == "*" ? binop::mul : o == "/" ? binop::div : o == "//" ? binop::floordiv : binop::mod;
            next();
            e = binop_node(op, std::move(e), parse_pow(), ln);
        }
        return e;
    }
    expr_ptr parse_pow() {
        expr_ptr e = parse_unary(true);
        while (is_op("**")) {
            const int ln = line();
            next();
            e = binop_node(binop::pow, std::move(e), parse_unary(true), ln);
        }
        return e;
    }
    expr_ptr parse_unary(bool with_filter) {
        const int ln = line();
        expr_ptr e;
        if (is_op("-") || is_op("+")) {
            nest guard(*this, ln);
            const ex type = is_op("-") ? ex::neg : ex::pos;
            next();
            e = node(type, ln);
            e->kids.push_back(parse_unary(false));
            e = done(std::move(e));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    expr_ptr parse_primary() {
        const token& t = cur();
        const int ln = t.line;
        if (t.type == tok::name) {
            auto e = node(ex::literal, ln);
            if (t.text == "true" || t.text == "True")
                e->lit = value::boolean(true);
            else if (t.text == "false" || t.text == "False")
                e->lit = value::boolean(false);
            else if (t.text == "none" || t.text == "None")
                e->lit = value::none();
            else {
                e->type = ex::name;
                e->name = t.text;
            }
            next();
            return done(std::move(e));
        }
        if (t.type == tok::string) {
            std::string s;
            while (cur().type == tok::string) {
                s += cur().text;
                next();
            }
            auto e = node(ex::literal, ln);
            e->lit = value::string(std::move(s));
            return done(std::move(e));
        }
        if (t.type == tok::integer || t.type == tok::floating) {
            auto e = node(ex::literal, ln);
            e->lit = t.num;
            next();
            return done(std::move(e));
        }
        if (is_op("(")) {
            next();
            expr_ptr e = parse_tuple(true, {}, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            next();
            auto e = node(ex::list, ln);
            while (!is_op("]")) {
                if (!e->kids.empty()) expect_op(",");
                if (is_op("]")) break;
                e->kids.push_back(parse_expression(true));
            }
            expect_op("]");
            return done(std::move(e));
        }
        if (is_op("{")) {
            next();
            auto e = node(ex::dict, ln);
            while (!is_op("}")) {
                if (!e->kids.empty()) expect_op(",");
                if (is_op("}")) break;
                e->kids.push_back(parse_expression(true));
                expect_op(":");
                e->kids.push_back(parse_expression(true));
            }
            expect_op("}");
            return done(std::move(e));
        }
        syntax_error(ln, fmt::format("unexpected {}", describe(t)));
    }

    expr_ptr parse_postfix(expr_ptr e) {
        while (true) {
            const int ln = line();
            if (is_op(".")) {
                next();
                if (cur().type == tok::name) {
                    auto a = node(ex::attr, ln);
                    a->name = cur().text;
                    next();
                    a->kids.push_back(std::move(e));
                    e = done(std::move(a));
                } else if (cur().type == tok::integer) {
                    auto a = node(ex::item, ln);
                    a->kids.push_back(std::move(e));
                    auto k = node(ex::literal, ln);
                    k->lit = cur().num;
                    next();
                    a->kids.push_back(done(std::move(k)));
                    e = done(std::move(a));
                } else {
                    unexpected("an attribute name");
                }
            } else if (is_op("[")) {
                next();
                e = parse_subscript(std::move(e), ln);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    // jinja2's subscript: one expression or slice; none or several (commas) make a tuple key
    expr_ptr parse_subscript(expr_ptr obj, int ln) {
        nest guard(*this, ln);
        std::vector<expr_ptr> keys;
        bool first_is_slice = false;
        while (!is_op("]")) {
            if (!keys.empty()) expect_op(",");
            if (is_op("]")) break;
            std::array<expr_ptr, 3> sl;
            bool is_slice = false;
            if (is_op(":")) {
                is_slice = true;
            } else {
                sl[0] = parse_expression(true);
                is_slice = is_op(":");
            }
            if (is_slice) {
                next();
                if (!is_op("]") && !is_op(",") && !is_op(":")) sl[1] = parse_expression(true);
                if (skip_op(":"))
                    if (!is_op("]") && !is_op(",")) sl[2] = parse_expression(true);
                auto e = node(ex::slice, ln);
                e->kids.emplace_back(); // the subject, filled in below
                for (auto& p : sl) e->kids.push_back(std::move(p));
                if (keys.empty()) first_is_slice = true;
                keys.push_back(std::move(e));
            } else {
                keys.push_back(std::move(sl[0]));
            }
        }
        expect_op("]");
        if (keys.size() == 1 && first_is_slice) {
            keys[0]->kids[0] = std::move(obj);
            return done(std::move(keys[0]));
        }
        auto e = node(ex::item, ln);
        e->kids.push_back(std::move(obj));
        if (keys.size() == 1) {
            e->kids.push_back(std::move(keys[0]));
        } else {
            // a tuple key; a slice inside one is a key no list or dict has (python's TypeError -> undefined)
            auto t = node(ex::tuple, ln);
            for (auto& k : keys) {
                if (k->type == ex::slice && !k->kids[0]) {
                    auto u = node(ex::literal, ln);
                    u->lit = value::undefined("slice in a tuple subscript");
                    k = done(std::move(u));
                }
                t->kids.push_back(std::move(k));
            }
            e->kids.push_back(done(std::move(t)));
        }
        return done(std::move(e));
    }

    void parse_args(arg_list& args) {
        nest guard(*this, line());
        expect_op("(");
        bool comma = false;
        while (!is_op(")")) {
            if (comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            // jinja2's order: positional, then keywords and *args, then **kwargs
            const int ln = line();
            auto ensure = [ln](bool ok) {
                if (!ok) syntax_error(ln, "invalid syntax for function call expression");
            };
            if (skip_op("*")) {
                ensure(!args.star && !args.star2);
                args.star = parse_expression(true);
            } else if (skip_op("**")) {
                ensure(!args.star2);
                args.star2 = parse_expression(true);
            } else if (cur().type == tok::name && peek().type == tok::op && peek().text == "=") {
                ensure(!args.star2);
                std::string key = cur().text;
                next();
                next();
                args.kw.emplace_back(std::move(key), parse_expression(true));
            } else {
                ensure(!args.star && !args.star2 && args.kw.empty());
                args.pos.push_back(parse_expression(true));
            }
            comma = true;
        }
        expect_op(")");
    }

    expr_ptr parse_call(expr_ptr fn) {
        auto e = node(ex::call, line());
        parse_args(e->args);
        e->kids.push_back(std::move(fn));
        return done(std::move(e));
    }

    std::string dotted_name() {
        std::string n = expect_name();
        while (is_op(".") && peek().type == tok::name) {
            next();
            n += "." + expect_name();
        }
        return n;
    }

    // "name(args)" after a "|" (or first in a filter block); subject null for block filters
    expr_ptr parse_filter(expr_ptr subject) {
        auto e = node(ex::filter, line());
        e->name = dotted_name();
        if (is_op("(")) parse_args(e->args);
        if (subject) e->kids.push_back(std::move(subject));
        return done(std::move(e));
    }

    expr_ptr parse_filter_expr(expr_ptr e) {
        while (true) {
            if (is_op("|")) {
                next();
                e = parse_filter(std::move(e));
            } else if (is_name("is")) {
                e = parse_test(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    expr_ptr parse_test(expr_ptr subject) {
        auto e = node(ex::test, line());
        next(); // is
        if (skip_name("not")) e->negated = true;
        e->name = dotted_name();
        const token& t = cur();
        if (is_op("(")) {
            parse_args(e->args);
        } else if ((t.type == tok::name || t.type == tok::string || t.type == tok::integer || t.type == tok::floating ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) syntax_error(line(), "You cannot chain multiple tests with is");
            e->args.pos.push_back(parse_postfix(parse_primary()));
        }
        e->kids.push_back(std::move(subject));
        return done(std::move(e));
    }
};

} // namespace

std::unique_ptr<program> parse_program(std::string_view source) {
    return parser(lexer(source).run()).run();
}

} // namespace tessera::jinja
