// unicode_db.cpp: lookups in the generated tables (unicode_db_tables.inc): binary search over sorted runs.
#include "llm/jinja/unicode_db.h"

#include "llm/unicode.h"

#include <algorithm>
#include <iterator>

namespace tessera::jinja::ucd {

namespace {

struct flag_run {
    uint32_t first; // the run's first code point; it lasts until the next run's first
    uint32_t flags;
};
struct case_run {
    uint32_t first;
    uint32_t count;  // code points first, first + stride, ...
    uint32_t stride; // 1 or 2
    int32_t delta;   // mapped = cp + delta
};
struct case_multi {
    uint32_t cp;
    uint32_t to[3]; // zero-terminated unless all three are used
};

#include "llm/jinja/unicode_db_tables.inc"

template <size_t N>
void map_with(std::string& out, const case_run (&runs)[N], const case_multi* multi, size_t n_multi, uint32_t cp) {
    const case_multi* m =
        std::lower_bound(multi, multi + n_multi, cp, [](const case_multi& x, uint32_t c) { return x.cp < c; });
    if (m != multi + n_multi && m->cp == cp) {
        for (uint32_t c : m->to)
            if (c) utf8_append(out, c);
        return;
    }
    auto it = std::upper_bound(std::begin(runs), std::end(runs), cp,
                               [](uint32_t c, const case_run& r) { return c < r.first; });
    if (it != std::begin(runs)) {
        const case_run& r = *std::prev(it);
        const uint32_t off = cp - r.first;
        if (off % r.stride == 0 && off / r.stride < r.count) {
            utf8_append(out, uint32_t(int64_t(cp) + r.delta));
            return;
        }
    }
    utf8_append(out, cp);
}

} // namespace

uint32_t flags(uint32_t cp) {
    auto it = std::upper_bound(std::begin(flag_runs), std::end(flag_runs), cp,
                               [](uint32_t c, const flag_run& r) { return c < r.first; });
    return it == std::begin(flag_runs) ? 0 : std::prev(it)->flags;
}

void append_mapped(std::string& out, mapping m, uint32_t cp) {
    switch (m) {
    case mapping::upper:
        map_with(out, upper_runs, upper_multi, std::size(upper_multi), cp);
        return;
    case mapping::lower:
        map_with(out, lower_runs, lower_multi, std::size(lower_multi), cp);
        return;
    case mapping::title:
        map_with(out, title_runs, title_multi, std::size(title_multi), cp);
        return;
    case mapping::fold:
        map_with(out, fold_runs, fold_multi, std::size(fold_multi), cp);
        return;
    }
}

} // namespace tessera::jinja::ucd
