// atomic_file.cpp: temporary file (O_TMPFILE, else a unique name) + fsync + link + rename; see atomic_file.h.
#include "atomic_file.h"

#include "error.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <string_view>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tessera {

namespace {

// ---- the process-wide list of temporaries that have (or are about to get) a name ----
//
// A signal handler may run on any thread, also while another thread creates, links or renames a temporary. Each
// named temporary holds a slot whose state says who may touch the name:
//   claiming: the writer is filling in the name (not valid yet)
//   busy:     the writer is creating / linking / renaming / removing the name right now; the handler waits for it
//             (another thread) or removes the name itself (the writer is this thread, suspended by the signal)
//   armed:    the name exists and nobody is working on it; the handler takes it (armed -> gone) and removes it
//   gone:     the handler removed it; the slot is the handler's from then on (the process is ending)
enum slot_state : int { slot_free, slot_claiming, slot_busy, slot_armed, slot_gone };
constexpr int n_slots = 64;
constexpr size_t max_name = 4096;

struct temp_slot {
    std::atomic<int> state{slot_free};
    std::atomic<long> tid{0};
    char name[max_name];
};
temp_slot g_slots[n_slots];
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long>::is_always_lock_free);

long this_tid() noexcept {
    return long(::syscall(SYS_gettid));
}

// A slot in state busy holding `name`, or -1 when the list is full or the name too long (then a signal handler
// cannot remove it; everything else works).
int claim_slot(const std::string& name) noexcept {
    if (name.size() >= max_name) return -1;
    for (int i = 0; i < n_slots; i++) {
        int expected = slot_free;
        if (g_slots[i].state.compare_exchange_strong(expected, slot_claiming)) {
            g_slots[i].tid.store(this_tid());
            std::memcpy(g_slots[i].name, name.c_str(), name.size() + 1);
            g_slots[i].state.store(slot_busy);
            return i;
        }
    }
    return -1;
}

// armed -> busy before the writer works on the name; false when a signal handler already removed it.
bool take_slot(int i) noexcept {
    if (i < 0) return true;
    int expected = slot_armed;
    return g_slots[i].state.compare_exchange_strong(expected, slot_busy);
}
void arm_slot(int i) noexcept {
    if (i >= 0) g_slots[i].state.store(slot_armed);
}
void free_slot(int i) noexcept {
    if (i >= 0) g_slots[i].state.store(slot_free); // only from busy: the writer's own state
}

// 16 hex digits from getrandom (a clock and a counter if that fails): with the pid, unique among live processes.
std::string random_suffix() {
    uint64_t r = 0;
    if (::getrandom(&r, sizeof(r), GRND_NONBLOCK) != ssize_t(sizeof(r))) {
        static std::atomic<uint64_t> counter{0};
        r = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull ^
            (counter.fetch_add(1) << 48) ^ uint64_t(this_tid());
    }
    return fmt::format("{:016x}", r);
}

std::string temp_name(const std::string& path) {
    return fmt::format("{}.tmp.{}.{}", path, ::getpid(), random_suffix());
}

bool o_tmpfile_allowed() {
    const char* e = std::getenv("TESSERA_O_TMPFILE");
    return !(e && std::strcmp(e, "0") == 0);
}

// Gives the O_TMPFILE `fd` the name `name`: through /proc (any user), else AT_EMPTY_PATH (needs
// CAP_DAC_READ_SEARCH). The first attempt's errno is the one reported.
bool link_tmpfile(int fd, const char* name) {
    char proc[64];
    std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (::linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0) return true;
    const int e = errno;
    if (e == EEXIST) return false;
    if (::linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH) == 0) return true;
    errno = e;
    return false;
}

// ---- stale temporaries ----
//
// Every temporary is flock(LOCK_EX)ed by its writer from its creation until it is renamed or removed (the lock is on
// the open file description, so it goes when the writer's process dies, however it dies). A temporary whose lock can
// be taken is therefore one whose writer is gone: a named temporary of a SIGKILLed process, or an O_TMPFILE one
// killed between linkat and rename.

// `name` is exactly BASE.tmp.<pid>.<16 hex>, as temp_name writes it: pid 1-10 decimal digits without a leading zero,
// then 16 lowercase hex digits.
bool is_temp_of(std::string_view name, std::string_view base) noexcept {
    constexpr std::string_view tmp = ".tmp.";
    if (name.size() <= base.size() + tmp.size() || name.substr(0, base.size()) != base) return false;
    name.remove_prefix(base.size());
    if (name.substr(0, tmp.size()) != tmp) return false;
    name.remove_prefix(tmp.size());
    size_t digits = 0;
    while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') digits++;
    if (digits == 0 || digits > 10 || name[0] == '0') return false;
    name.remove_prefix(digits);
    if (name.size() != 17 || name[0] != '.') return false;
    for (char c : name.substr(1))
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

// Removes the temporaries of `base` in `dir` whose writers are gone (one readdir). Best effort: any error skips the
// entry; only regular files with a matching name, not locked by anybody, still under that name, are unlinked.
void remove_stale_temps(const char* dir, std::string_view base) noexcept {
    if (base.empty()) return;
    const int dfd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    DIR* d = ::fdopendir(dfd);
    if (!d) {
        ::close(dfd);
        return;
    }
    while (const dirent* e = ::readdir(d)) {
        if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN) continue;
        if (!is_temp_of(e->d_name, base)) continue;
        // O_NONBLOCK: never hang on a FIFO; O_NOFOLLOW: never a symlink's target
        const int fd = ::openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat held {};
        struct stat named {};
        if (::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            ::fstatat(dfd, e->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == held.st_dev &&
            named.st_ino == held.st_ino)
            ::unlinkat(dfd, e->d_name, 0); // nobody holds it: its writer is dead
        // else EWOULDBLOCK (a live writer's) or an error: left alone
        ::close(fd);
    }
    ::closedir(d);
}

// The writer's lock on its temporary. False only when another open file description holds a lock on it (a
// remove_stale_temps that took the new name for a dead writer's); where the filesystem has no flock (ENOSYS,
// EOPNOTSUPP, ENOLCK, NFS's EBADF, ...) the temporary goes unlocked, and remove_stale_temps cannot lock it either.
bool lock_temp(int fd) noexcept {
    for (;;) {
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
        if (errno == EINTR) continue;
        return errno != EWOULDBLOCK;
    }
}

// `fd` (created as `name`) is still the file under `name`: no remove_stale_temps unlinked it before lock_temp.
bool still_named(int fd, const char* name) noexcept {
    struct stat held {};
    struct stat named {};
    if (::fstat(fd, &held) != 0) return true; // cannot tell: carry on (the rename reports a missing name)
    if (::lstat(name, &named) != 0) return errno != ENOENT;
    return named.st_dev == held.st_dev && named.st_ino == held.st_ino;
}

} // namespace

void remove_temp_files_now() noexcept {
    const long self = this_tid();
    for (temp_slot& s : g_slots) {
        for (int waited_ms = 0;;) {
            int st = s.state.load();
            if (st == slot_free || st == slot_gone) break;
            if (st == slot_armed) {
                if (s.state.compare_exchange_strong(st, slot_gone)) {
                    ::unlink(s.name);
                    break;
                }
                continue;
            }
            // claiming or busy: a writer is at work on the name
            if (s.tid.load() == self || waited_ms >= 2000) {
                // the writer is this thread (suspended here), or stuck: whatever name it made goes
                if (st == slot_busy) ::unlink(s.name);
                break;
            }
            const timespec ms{0, 1000000};
            ::nanosleep(&ms, nullptr);
            waited_ms++;
        }
    }
}

atomic_file::atomic_file(std::string path) : path_(std::move(path)) {
    const size_t slash = path_.rfind('/');
    dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    // temporaries of PATH left by dead writers (SIGKILL, power loss) go first
    remove_stale_temps(dir_.c_str(), std::string_view(path_).substr(slash == std::string::npos ? 0 : slash + 1));
    if (o_tmpfile_allowed() && ::access("/proc/self/fd", X_OK) == 0) {
        fd_ = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666); // 0666 & ~umask, as a new file
        if (fd_ >= 0) {
            tmpfile_ = true;
            lock_temp(fd_); // held through linkat and rename: the name it gets then is never taken for stale
            return;
        }
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            throw error(fmt::format("{}: cannot create a temporary file in {}: {}", path_, dir_, std::strerror(errno)));
    }
    // no O_TMPFILE here: a unique name in the same directory
    for (int attempt = 0;; attempt++) {
        name_ = temp_name(path_);
        slot_ = claim_slot(name_);
        fd_ = ::open(name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        int e = errno;
        if (fd_ >= 0) {
            // locked before any data; between open and flock another writer's remove_stale_temps may have taken
            // the new name for a dead writer's (it holds the lock then, or has already unlinked it): a fresh name
            const bool locked = lock_temp(fd_);
            if (locked && still_named(fd_, name_.c_str())) {
                arm_slot(slot_);
                return;
            }
            if (!locked) ::unlink(name_.c_str()); // still ours (its remover may unlink it first: then ENOENT)
            ::close(fd_);
            fd_ = -1;
            e = EEXIST;
        }
        free_slot(slot_);
        slot_ = -1;
        if (e != EEXIST || attempt == 100) {
            name_.clear();
            throw error(fmt::format("{}: cannot create a temporary file in {}: {}", path_, dir_, std::strerror(e)));
        }
    }
}

atomic_file::~atomic_file() {
    discard();
}

void atomic_file::discard() noexcept {
    if (!name_.empty() && take_slot(slot_)) { // else a signal handler removed it already
        ::unlink(name_.c_str());              // while still locked
        free_slot(slot_);
    }
    name_.clear();
    slot_ = -1;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void atomic_file::fail(const std::string& what, int err) {
    discard();
    throw error(
        fmt::format("{}: {}: {} (temporary file removed; {} left as it was)", path_, what, std::strerror(err), path_));
}

void atomic_file::write(const void* data, size_t n) {
    if (fd_ < 0) throw error(fmt::format("{}: write after the file was committed or discarded", path_));
    const char* c = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, c, std::min<size_t>(n, size_t(1) << 30));
        if (w < 0) {
            if (errno == EINTR) continue;
            fail("write failed", errno);
        }
        c += w;
        n -= size_t(w);
    }
}

void atomic_file::commit() {
    if (fd_ < 0) throw error(fmt::format("{}: commit after the file was committed or discarded", path_));
    if (::fsync(fd_) != 0) fail("fsync failed", errno);
    if (tmpfile_) {
        // name it (unique, beside PATH), then rename: the name exists for two system calls
        for (int attempt = 0;; attempt++) {
            name_ = temp_name(path_);
            slot_ = claim_slot(name_);
            if (link_tmpfile(fd_, name_.c_str())) break;
            const int e = errno;
            free_slot(slot_);
            slot_ = -1;
            name_.clear();
            if (e != EEXIST || attempt == 100) fail("cannot link the temporary file into " + dir_, e);
        }
    } else if (!take_slot(slot_)) {
        // a signal handler removed the temporary: the process is ending
        name_.clear();
        fail("interrupted", EINTR);
    }
    // slot busy from here on: a handler on another thread waits until the rename is done
    const int fd = fd_;
    fd_ = -1;
    // a second descriptor of the same open file description keeps the flock through the rename, so that close()'s
    // error can still be seen before PATH is replaced (if dup fails, the window between them is unlocked)
    const int lock_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    auto unlock = [lock_fd] {
        if (lock_fd >= 0) ::close(lock_fd);
    };
    if (::close(fd) != 0) {
        const int e = errno;
        ::unlink(name_.c_str());
        unlock();
        free_slot(slot_);
        name_.clear();
        throw error(fmt::format("{}: close failed: {} (temporary file removed; {} left as it was)", path_,
                                std::strerror(e), path_));
    }
    if (::rename(name_.c_str(), path_.c_str()) != 0) {
        const int e = errno;
        ::unlink(name_.c_str());
        unlock();
        free_slot(slot_);
        const std::string name = std::move(name_);
        name_.clear();
        throw error(fmt::format("{}: cannot rename {} over it: {} (temporary file removed; {} left as it was)", path_,
                                name, std::strerror(e), path_));
    }
    unlock();
    free_slot(slot_);
    slot_ = -1;
    name_.clear();
    // make the rename durable; PATH is in place whatever happens here
    const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

// ---- signal guard ----

namespace {

constexpr int guarded[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temps_and_reraise(int sig) {
    const int saved = errno;
    remove_temp_files_now();
    std::signal(sig, SIG_DFL);
    std::raise(sig); // blocked until the handler returns, then the default action ends the process
    errno = saved;
}

} // namespace

temp_file_signal_guard::temp_file_signal_guard() {
    static_assert(std::size(guarded) == n_signals);
    for (int i = 0; i < n_signals; i++) {
        struct sigaction cur {};
        if (::sigaction(guarded[i], nullptr, &cur) != 0) continue;
        if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) continue; // ignored (nohup) or handled
        struct sigaction sa {};
        sa.sa_handler = remove_temps_and_reraise;
        sigemptyset(&sa.sa_mask);
        for (int s : guarded) sigaddset(&sa.sa_mask, s); // one handler at a time
        installed_[i] = ::sigaction(guarded[i], &sa, &old_[i]) == 0;
    }
}

temp_file_signal_guard::~temp_file_signal_guard() {
    for (int i = 0; i < n_signals; i++)
        if (installed_[i]) ::sigaction(guarded[i], &old_[i], nullptr);
}

} // namespace tessera
