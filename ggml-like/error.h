// error.h: tessera::error for a wrong world (files, flags, shapes read from files) and TS_ASSERT for our own bugs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tessera {

// One line naming the thing, with expected vs. got. cli/main.cpp prints it as "error: ..." and exits non-zero.
struct error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void assert_fail(const char* file, int line, const char* cond) {
    std::fprintf(stderr, "%s:%d: internal error: assertion failed: %s\n", file, line, cond);
    std::abort();
}

} // namespace tessera

// A broken invariant of ours (never input): print file:line and abort.
#define TS_ASSERT(cond)                                                                                                \
    do {                                                                                                               \
        if (!(cond)) ::tessera::assert_fail(__FILE__, __LINE__, #cond);                                                \
    } while (0)
