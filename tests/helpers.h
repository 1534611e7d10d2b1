// helpers.h: shared test helpers: seeded random data (never zeros), NaN poison, NMSE, paths to data and the model.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tessera::test {

inline std::string data_dir() { return TESSERA_TEST_DATA; }
inline std::string model_path() {
    if (const char* m = std::getenv("TESSERA_MODEL")) return m;
    return TESSERA_TEST_MODEL;
}
inline bool have_model() { return std::filesystem::exists(model_path()); }
#define TS_REQUIRE_MODEL()                                                                                             \
    do {                                                                                                               \
        if (!::tessera::test::have_model())                                                                            \
            GTEST_SKIP() << "default model not found at " << ::tessera::test::model_path()                            \
                         << " (run scripts/fetch-model.sh)";                                                           \
    } while (0)

// Gaussian N(0, sigma) values, seeded; exact zeros are nudged so a test never runs on zeros.
inline std::vector<float> random_normal(size_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) {
        x = d(rng);
        if (x == 0.0f) x = 1e-3f;
    }
    return v;
}

// Heavy-tailed values (Student-t like: normal / sqrt(chi2/3)), seeded.
inline std::vector<float> random_heavy(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) {
        float a = d(rng), b = d(rng), c = d(rng), e = d(rng);
        x = a / std::sqrt((b * b + c * c + e * e) / 3.0f + 1e-6f);
        if (x == 0.0f) x = 1e-3f;
    }
    return v;
}

inline void poison(std::vector<float>& v) { std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN()); }

// Normalized mean squared error sum((a-b)^2) / sum(b^2); NaN anywhere gives +inf.
inline double nmse(const float* a, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(a[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
        double d = double(a[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? num / den : num;
}
// Relative RMS error of a against ref: sqrt(nmse)
inline double rel_rmse(const std::vector<float>& a, const std::vector<float>& ref) {
    return std::sqrt(nmse(a.data(), ref.data(), a.size()));
}

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The writers' temporaries beside PATH (ggml-like/atomic_file.h): the names in its directory that start with its file
// name + ".tmp" (PATH.tmp.<pid>.<random>). Empty after every finished or failed write.
inline std::vector<std::string> temps_of(const std::string& path) {
    std::vector<std::string> v;
    const std::filesystem::path p = std::filesystem::absolute(path);
    const std::string prefix = p.filename().string() + ".tmp";
    for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
        if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path().filename().string());
    return v;
}

} // namespace tessera::test
