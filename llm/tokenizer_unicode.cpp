// tokenizer_unicode.cpp: the Unicode 15.1 lookups of unicode.h (category class, White_Space, simple lowercase, NFD's
// first code point), binary searches over the tables llm/tokenizer_unicode.py generates.
#include "unicode.h"

#include <algorithm>
#include <iterator>

namespace tessera {

namespace {

struct class_run {
    uint32_t first; // the run's first code point; it lasts to the next run's
    uint8_t cls;    // cpt_class
};
struct case_run {
    uint32_t first;
    uint32_t count;  // code points first, first + stride, ... (count of them)
    uint32_t stride; // 1 or 2
    int32_t delta;   // each maps to itself + delta
};
struct nfd_range {
    uint32_t first, last; // inclusive
    uint32_t nfd;         // the first code point of each one's decomposition
};

#include "tokenizer_unicode_tables.inc"

// The last element whose `first` is <= cpt, or end when none is.
template <class T, size_t N> const T* last_at_or_before(const T (&table)[N], uint32_t cpt) {
    const T* it =
        std::upper_bound(std::begin(table), std::end(table), cpt, [](uint32_t c, const T& e) { return c < e.first; });
    return it == std::begin(table) ? std::end(table) : it - 1;
}

} // namespace

cpt_class unicode_class(uint32_t cpt) {
    if (cpt > 0x10FFFF) return cpt_class::unassigned;
    const class_run* r = last_at_or_before(class_runs, cpt);
    return r == std::end(class_runs) ? cpt_class::unassigned : cpt_class(r->cls);
}

bool unicode_is_whitespace(uint32_t cpt) {
    switch (cpt) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return true;
    default:
        return (cpt >= 0x9 && cpt <= 0xD) || (cpt >= 0x2000 && cpt <= 0x200A);
    }
}

uint32_t unicode_simple_lower(uint32_t cpt) {
    const case_run* r = last_at_or_before(lower_runs, cpt);
    if (r == std::end(lower_runs)) return cpt;
    const uint32_t off = cpt - r->first;
    if (off % r->stride != 0 || off / r->stride >= r->count) return cpt;
    return uint32_t(int64_t(cpt) + r->delta);
}

uint32_t unicode_nfd_first(uint32_t cpt) {
    const nfd_range* r = last_at_or_before(nfd_ranges, cpt);
    return r != std::end(nfd_ranges) && cpt <= r->last ? r->nfd : cpt;
}

} // namespace tessera
