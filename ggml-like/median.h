// median.h: the median of a set of measurements (speeds, bandwidths), the middle two averaged for an even count; 0 for
// none. Shared by the backends' copy_gbs and the CLI's speed tables.
#pragma once

#include <algorithm>
#include <vector>

namespace tessera {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

} // namespace tessera
