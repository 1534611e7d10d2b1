// pystr.h: python's str as templates use it, on UTF-8 strings indexed by code point: the methods (case mapping with
// python's full Unicode tables and final-sigma rule, strip / split / partition / find / replace / justify / is...),
// str.format and its format spec mini-language, the "%" operator, and markupsafe's escape. Implemented in pystr.cpp
// (algorithms) and pystr_format.cpp (formatting); the tables are unicode_db.h's.
#pragma once

#include "llm/jinja/evaluator.h"

#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja::py {

bool is_space(uint32_t cp); // str.isspace of one code point: what split() and strip() remove

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string casefold(std::string_view s);
std::string swapcase(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
bool islower(std::string_view s);
bool isupper(std::string_view s);

// strip(chars): chars null or None means whitespace
std::string strip(std::string_view s, const value* chars, bool left, bool right);
// split(sep, maxsplit) / rsplit: sep null or None splits at runs of whitespace
std::vector<std::string> split(std::string_view s, const value* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// str.center / ljust / rjust (align 0 / -1 / 1) with a one-character fill
std::string justify(std::string_view s, int64_t width, std::string_view fill, int align);

// markupsafe.escape of a text: & < > " ' as entities
std::string html_escape(std::string_view s);
// html.unescape as markupsafe's striptags uses it: numeric references and the common named entities
std::string html_unescape(std::string_view s);

// "fmt".format(*args, **kwargs); attribute and item lookups in fields go through the sandbox (ev)
std::string format(evaluator& ev, std::string_view fmt, const call_args& args, bool markup);
// format(v, spec): python's format spec mini-language for int, float, str (and str() for others with no spec)
std::string format_value(const value& v, std::string_view spec);
// "fmt" % args; markup: Markup's % (string arguments escaped)
std::string percent(std::string_view fmt, const value& args, bool markup);

// A str (or Markup) method: found is false when str has no method `name`.
value call_str_method(evaluator& ev, const value& self, const std::string& name, call_args& a);
bool is_str_method(const std::string& name, bool markup);

} // namespace tessera::jinja::py
