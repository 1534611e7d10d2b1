// atomic_file.h: a file that replaces PATH only once it is complete. Every writer of a finished file goes through it
// (gguf_writer::write, so `tessera quantize`; the KL-divergence base file; chat /save).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <signal.h>

namespace tessera {

// Written to a temporary file in PATH's directory, fsynced, then renamed over PATH in one step: readers of PATH see
// the old file or the new one, never a part; two processes (or threads) writing the same PATH each have their own
// temporary and the last rename wins, so PATH is always one of the complete files.
//
// Linux: the temporary is opened with O_TMPFILE, so it has no name while it is written and a process killed at any
// point (SIGKILL, a crash) leaves nothing behind. commit() gives it a unique name, PATH.tmp.<pid>.<random> (linkat),
// and renames that over PATH at once; the named window is two system calls. Where the filesystem has no O_TMPFILE
// (EOPNOTSUPP, EISDIR, EINVAL), /proc is missing, or TESSERA_O_TMPFILE=0 is set, the temporary is created under such
// a unique name from the start (O_CREAT | O_EXCL); then a SIGKILL leaves it behind, until the next atomic_file for
// PATH (in any process) removes it: every temporary is flock(LOCK_EX)ed by its writer from creation to rename, and
// the constructor unlinks the regular files in PATH's directory named exactly PATH.tmp.<pid>.<16 hex> whose lock it
// can take (their writers are dead; one readdir, best effort, nothing else is touched). Either way the finished file
// has the mode of any newly created file, 0666 & ~umask.
//
// Errors are tessera::error, one line naming PATH, e.g.
//   PATH: cannot create a temporary file in DIR: Permission denied
//   PATH: write failed: No space left on device (temporary file removed; PATH left as it was)
// After an error, and when the object is destroyed without commit(), the temporary is gone and PATH untouched.
class atomic_file {
  public:
    explicit atomic_file(std::string path);
    ~atomic_file(); // without commit(): the temporary is discarded
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;

    void write(const void* data, size_t n); // all n bytes, or throws
    void write(std::string_view s) { write(s.data(), s.size()); }
    // fsync, name, rename over PATH, fsync of the directory (best effort: PATH is already replaced then).
    void commit();

    const std::string& path() const { return path_; }
    bool nameless() const { return tmpfile_; } // the temporary has no name while written (O_TMPFILE)

  private:
    [[noreturn]] void fail(const std::string& what, int err);
    void discard() noexcept;

    std::string path_, dir_, name_; // name_: the temporary's name once it has one (or will have, while claimed)
    int fd_ = -1;
    int slot_ = -1; // entry in the process-wide list of named temporaries (for signal handlers), -1 if none
    bool tmpfile_ = false;
};

// Async-signal-safe: removes the names of this process's temporaries that are not committed (atomic_file). Waits
// (up to ~2 s) for another thread that is renaming one over its PATH right now, so after the call the directory
// holds either that finished PATH or nothing of ours.
void remove_temp_files_now() noexcept;

// While alive, SIGINT, SIGTERM and SIGHUP remove this process's temporaries (remove_temp_files_now) and then end it
// with the same signal. Signals that are ignored (nohup) or already have a handler are left alone; the previous
// dispositions come back on destruction.
class temp_file_signal_guard {
  public:
    temp_file_signal_guard();
    ~temp_file_signal_guard();
    temp_file_signal_guard(const temp_file_signal_guard&) = delete;
    temp_file_signal_guard& operator=(const temp_file_signal_guard&) = delete;

  private:
    static constexpr int n_signals = 3;
    struct sigaction old_[n_signals];
    bool installed_[n_signals] = {};
};

} // namespace tessera
