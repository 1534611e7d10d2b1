// unicode_db.h: python's character database as the Jinja engine needs it: per code point property flags (what
// str.isalpha / isdigit / isprintable / ... say of one character) and the full case mappings behind str.upper / lower /
// title / casefold, from the tables unicode_db.py generates out of python's unicodedata (unicode_db_tables.inc).
#pragma once

#include <cstdint>
#include <string>

namespace tessera::jinja::ucd {

enum flag : uint32_t {
    alpha = 1u << 0,           // str.isalpha
    decimal = 1u << 1,         // str.isdecimal
    digit = 1u << 2,           // str.isdigit
    numeric = 1u << 3,         // str.isnumeric
    space = 1u << 4,           // str.isspace
    printable = 1u << 5,       // str.isprintable (repr() escapes the others)
    upper = 1u << 6,           // Uppercase
    lower = 1u << 7,           // Lowercase
    title = 1u << 8,           // Lt
    cased = 1u << 9,           // Cased
    case_ignorable = 1u << 10, // Case_Ignorable (the final-sigma rule skips these)
    id_start = 1u << 11,       // XID_Start or '_'
    id_continue = 1u << 12,    // XID_Continue
};

uint32_t flags(uint32_t cp);
inline bool has(uint32_t cp, uint32_t f) {
    return (flags(cp) & f) != 0;
}

enum class mapping { upper, lower, title, fold };
// Appends the UTF-8 of cp's full mapping (one or more code points; cp itself when it has none). lower gives U+03A3's
// non-final form; the caller applies python's final-sigma rule.
void append_mapped(std::string& out, mapping m, uint32_t cp);

} // namespace tessera::jinja::ucd
