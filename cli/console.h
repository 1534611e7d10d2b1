// console.h: terminal helpers shared by subcommands: a progress bar on stderr (quantize, perplexity) and human-readable
// sizes and durations. Readline for chat and tables come later, in this file too.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

namespace tessera::cli {

// "93.81 MiB", "512 B"
std::string human_bytes(uint64_t bytes);
// "0.4 s", "2 m 05 s", "1 h 02 m"
std::string human_seconds(double s);

// A progress bar for work measured in units (rows, tokens, chunks).
//   terminal:     "quantize  45% [#########>          ] 95/210  3.2 s  ETA 3.9 s", redrawn in place with \r, at most
//                 every 100 ms (a redraw costs a syscall and makes slow terminals lag);
//   not terminal: the same line without the bar, once per 10% step (logs and CI output stay short).
// update()/add() may be called from several threads.
class progress_bar {
  public:
    // `out` is usually stderr; `is_terminal` -1 asks isatty(fileno(out)), 0/1 forces the mode (tests).
    progress_bar(std::string label, int64_t total, std::FILE* out = stderr, int is_terminal = -1);
    ~progress_bar(); // ends a half-drawn terminal line so that an error message starts on its own line
    progress_bar(const progress_bar&) = delete;
    progress_bar& operator=(const progress_bar&) = delete;

    void update(int64_t done); // sets the count (clamped to total)
    void add(int64_t n);       // adds to the count
    void set_label(std::string label);
    // How "done/total" is written (default: the integers); e.g. millions of weights for quantize.
    void set_count_format(std::function<std::string(int64_t done, int64_t total)> f);
    // Draws the final state (100% unless fewer units were done) and ends the line. Idempotent.
    void finish();

    // The line for `done` of `total` after `elapsed` seconds; `bar_width` 0 leaves the bar out; `count` replaces
    // "done/total" when not empty. Exposed for tests.
    static std::string render(const std::string& label, int64_t done, int64_t total, double elapsed, int bar_width,
                              const std::string& count = "");

  private:
    void draw_locked(bool final);

    std::mutex mu_;
    std::string label_;
    std::function<std::string(int64_t, int64_t)> count_format_;
    int64_t total_;
    int64_t done_ = 0;
    std::FILE* out_;
    bool tty_;
    bool finished_ = false;
    bool line_open_ = false; // a terminal line was drawn without its newline
    int last_step_ = -1;     // last 10% step printed (not a terminal)
    std::chrono::steady_clock::time_point t0_, last_draw_;
};

} // namespace tessera::cli
