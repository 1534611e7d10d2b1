// console.cpp: the progress bar and the size/duration formatting declared in console.h.
#include "console.h"

#include <fmt/core.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace tessera::cli {

std::string human_bytes(uint64_t b) {
    if (b < 1024) return fmt::format("{} B", b);
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double x = double(b);
    int u = -1;
    while (x >= 1024 && u < 3) {
        x /= 1024;
        u++;
    }
    return fmt::format("{:.2f} {}", x, units[u]);
}

std::string human_seconds(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    if (s < 60) return fmt::format("{:.1f} s", s);
    const int64_t t = int64_t(std::llround(s));
    if (t < 3600) return fmt::format("{} m {:02} s", t / 60, t % 60);
    return fmt::format("{} h {:02} m", t / 3600, (t % 3600) / 60);
}

namespace {

int terminal_columns(std::FILE* out) {
    winsize ws{};
    if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

} // namespace

progress_bar::progress_bar(std::string label, int64_t total, std::FILE* out, int is_terminal)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 0)), out_(out),
      tty_(is_terminal < 0 ? ::isatty(::fileno(out)) != 0 : is_terminal != 0), t0_(std::chrono::steady_clock::now()),
      last_draw_(t0_ - std::chrono::seconds(1)) {}

progress_bar::~progress_bar() {
    std::lock_guard lock(mu_);
    if (line_open_) {
        std::fputc('\n', out_);
        std::fflush(out_);
    }
}

std::string progress_bar::render(const std::string& label, int64_t done, int64_t total, double elapsed, int bar_width,
                                 const std::string& count) {
    const double frac = total > 0 ? double(done) / double(total) : 1.0;
    std::string line = fmt::format("{} {:3d}%", label, int(frac * 100.0));
    if (bar_width > 0) {
        const int full = int(frac * bar_width);
        std::string bar(size_t(bar_width), ' ');
        std::fill(bar.begin(), bar.begin() + full, '#');
        if (full < bar_width && done > 0) bar[size_t(full)] = '>';
        line += " [" + bar + "]";
    }
    line += fmt::format(" {}  {}", count.empty() ? fmt::format("{}/{}", done, total) : count, human_seconds(elapsed));
    // ETA from the average rate so far; unknown until some work is done
    if (done < total) line += done > 0 ? "  ETA " + human_seconds(elapsed * double(total - done) / double(done)) : "";
    return line;
}

void progress_bar::draw_locked(bool final) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    if (tty_) {
        if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
        last_draw_ = now;
        const int cols = terminal_columns(out_);
        const std::string count = count_format_ ? count_format_(done_, total_) : "";
        // a fixed bar width for the whole run (the text beside it changes length as the ETA comes and goes)
        const int bar_width = std::clamp(cols - int(label_.size()) - 50, 0, 40);
        std::string line = render(label_, done_, total_, elapsed, bar_width < 10 ? 0 : bar_width, count);
        // \r then the line, padded so that a shorter line erases the end of the previous one
        fmt::print(out_, "\r{:<{}}", line, std::min<int>(cols - 1, std::max<int>(int(line.size()), 70)));
        line_open_ = true;
        if (final) {
            std::fputc('\n', out_);
            line_open_ = false;
        }
        std::fflush(out_);
        return;
    }
    const int step = total_ > 0 ? int(done_ * 10 / total_) : 10;
    if (step <= last_step_) return; // also in finish(): that step's line is out already
    last_step_ = step;
    fmt::print(out_, "{}\n",
               render(label_, done_, total_, elapsed, 0, count_format_ ? count_format_(done_, total_) : ""));
    std::fflush(out_);
}

void progress_bar::update(int64_t done) {
    std::lock_guard lock(mu_);
    if (finished_) return;
    done_ = std::clamp<int64_t>(done, 0, total_);
    draw_locked(false);
}

void progress_bar::add(int64_t n) {
    std::lock_guard lock(mu_);
    if (finished_) return;
    done_ = std::clamp<int64_t>(done_ + n, 0, total_);
    draw_locked(false);
}

void progress_bar::set_label(std::string label) {
    std::lock_guard lock(mu_);
    label_ = std::move(label);
}

void progress_bar::set_count_format(std::function<std::string(int64_t, int64_t)> f) {
    std::lock_guard lock(mu_);
    count_format_ = std::move(f);
}

void progress_bar::finish() {
    std::lock_guard lock(mu_);
    if (finished_) return;
    finished_ = true;
    draw_locked(true);
}

} // namespace tessera::cli
