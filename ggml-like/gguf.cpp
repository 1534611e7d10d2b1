// gguf.cpp: GGUF v2/v3 reader (mmap + a bounds-checked cursor) and writer (v3, atomic_file.h).
// The layout is in ../shared/docs/FORMATS.md §1; tensor types and sizes come from types.h.
#include "gguf.h"

#include "atomic_file.h"
#include "error.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera {

namespace {

constexpr uint32_t gguf_magic = 0x46554747; // "GGUF" read as a little-endian u32
constexpr uint32_t default_alignment = 32;
constexpr uint64_t max_name_bytes = 64; // tensor names are < 64 bytes (ggml's GGML_MAX_NAME)
constexpr uint32_t max_dims = 4;

// Bytes of one element of a metadata type; 0 for string and array (variable size), and for unknown ids.
size_t value_size(gguf_type t) {
    switch (t) {
    case gguf_type::u8:
    case gguf_type::i8:
    case gguf_type::boolean:
        return 1;
    case gguf_type::u16:
    case gguf_type::i16:
        return 2;
    case gguf_type::u32:
    case gguf_type::i32:
    case gguf_type::f32:
        return 4;
    case gguf_type::u64:
    case gguf_type::i64:
    case gguf_type::f64:
        return 8;
    case gguf_type::string:
    case gguf_type::array:
        return 0;
    }
    return 0;
}

bool valid_type_id(uint32_t id) {
    return id <= uint32_t(gguf_type::f64);
}
bool is_integer(gguf_type t) {
    return t == gguf_type::u8 || t == gguf_type::i8 || t == gguf_type::u16 || t == gguf_type::i16 ||
           t == gguf_type::u32 || t == gguf_type::i32 || t == gguf_type::u64 || t == gguf_type::i64;
}
bool is_float(gguf_type t) {
    return t == gguf_type::f32 || t == gguf_type::f64;
}
bool is_pow2(uint64_t a) {
    return a != 0 && (a & (a - 1)) == 0;
}

// align_up(x, a) for a power of two a; false on overflow.
bool align_up(uint64_t x, uint64_t a, uint64_t& out) {
    if (x > std::numeric_limits<uint64_t>::max() - (a - 1)) return false;
    out = (x + a - 1) & ~(a - 1);
    return true;
}

// A float read from a file as an integer: NaN and values outside int64 are an error (the cast would be UB).
int64_t float_to_int(double x) {
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0))
        throw error(fmt::format("gguf value: {} does not fit in int64", x));
    return int64_t(x);
}

template <class T> T load_le(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T)); // GGUF is little-endian and so are the hosts we build for
    return v;
}

// Bytes of a tensor of type `tt` and shape ne (ne[0] a multiple of the block size), its tail included (i2_s keeps its
// f32 scale in 32 bytes after the rows: types.h tensor_bytes); false on overflow.
bool tensor_bytes(const type_traits& tt, const int64_t ne[4], uint64_t& out) {
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(uint64_t(ne[0] / tt.block_size), uint64_t(tt.type_size), &bytes)) return false;
    for (int i = 1; i < 4; i++)
        if (__builtin_mul_overflow(bytes, uint64_t(ne[i]), &bytes)) return false;
    if (__builtin_add_overflow(bytes, uint64_t(tt.tail_bytes), &bytes)) return false;
    out = bytes;
    return true;
}

// Reads the file front to back; every read is checked against the bytes that remain, before anything is allocated.
struct cursor {
    const uint8_t* base;
    uint64_t size;
    uint64_t pos = 0;
    const std::string& name; // file name for error messages

    uint64_t remaining() const { return size - pos; }

    [[noreturn]] void fail(const std::string& what) const { throw error(fmt::format("{}: {}", name, what)); }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining())
            fail(fmt::format("truncated file: {} at byte {}, expected {} bytes, got {}", what, pos, n, remaining()));
    }

    template <class T> T read(std::string_view what) {
        need(sizeof(T), what);
        T v = load_le<T>(base + pos);
        pos += sizeof(T);
        return v;
    }

    std::string read_string(std::string_view what) {
        uint64_t len = read<uint64_t>(what);
        if (len > remaining())
            fail(fmt::format("{} at byte {}: string length past end of file, expected at most {}, got {}", what,
                             pos - 8, remaining(), len));
        std::string s(reinterpret_cast<const char*>(base + pos), size_t(len));
        pos += len;
        return s;
    }

    // A count of records that each take at least `min_bytes`: bounded by what remains before anything is allocated.
    uint64_t read_count(std::string_view what, uint64_t min_bytes) {
        uint64_t n = read<uint64_t>(what);
        if (n > remaining() / min_bytes)
            fail(fmt::format("{} too large for the {} bytes left (truncated or corrupt file), expected at most {}, "
                             "got {}",
                             what, remaining(), remaining() / min_bytes, n));
        return n;
    }
};

// One metadata value after its type id: a scalar, a string, or an array of either.
gguf_value read_value(cursor& c, gguf_type type, const std::string& key) {
    gguf_value v;
    v.type = type;
    v.elem_type = type;
    v.n = 1;
    if (type == gguf_type::array) {
        uint32_t et = c.read<uint32_t>("array element type");
        if (!valid_type_id(et))
            c.fail(fmt::format("key '{}': unknown array element type, expected 0..12, got {}", key, et));
        if (gguf_type(et) == gguf_type::array) c.fail(fmt::format("key '{}': nested arrays are not supported", key));
        v.elem_type = gguf_type(et);
        size_t es = value_size(v.elem_type);
        // a string element takes at least its 8-byte length
        v.n = c.read_count(fmt::format("key '{}': array length", key), es ? es : 8);
    }
    gguf_type et = v.scalar_type();
    if (et == gguf_type::string) {
        v.strs.reserve(size_t(std::min<uint64_t>(v.n, 1 << 16))); // n only bounds the file: 8 bytes per string
        const std::string what = fmt::format("key '{}': string", key);
        for (uint64_t i = 0; i < v.n; i++) v.strs.push_back(c.read_string(what));
        return v;
    }
    size_t es = value_size(et);
    uint64_t bytes = v.n * es; // v.n <= remaining / es, so no overflow
    c.need(bytes, fmt::format("key '{}': value", key));
    v.raw.assign(c.base + c.pos, c.base + c.pos + bytes);
    c.pos += bytes;
    if (et == gguf_type::boolean)
        for (uint64_t i = 0; i < v.n; i++)
            if (v.raw[i] > 1) c.fail(fmt::format("key '{}': invalid bool, expected 0 or 1, got {}", key, v.raw[i]));
    return v;
}

struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using name_index = std::unordered_map<std::string, size_t, string_hash, std::equal_to<>>;

} // namespace

// ---------------------------------------------------------------------------------------------------------------------
// gguf_value

const char* gguf_type_name(gguf_type t) {
    switch (t) {
    case gguf_type::u8:
        return "u8";
    case gguf_type::i8:
        return "i8";
    case gguf_type::u16:
        return "u16";
    case gguf_type::i16:
        return "i16";
    case gguf_type::u32:
        return "u32";
    case gguf_type::i32:
        return "i32";
    case gguf_type::f32:
        return "f32";
    case gguf_type::boolean:
        return "bool";
    case gguf_type::string:
        return "str";
    case gguf_type::array:
        return "arr";
    case gguf_type::u64:
        return "u64";
    case gguf_type::i64:
        return "i64";
    case gguf_type::f64:
        return "f64";
    }
    return "unknown";
}

int64_t gguf_value::int_at(uint64_t i) const {
    gguf_type t = scalar_type();
    if (i >= n) throw error(fmt::format("gguf value: index {} out of range, expected < {}", i, n));
    if (!is_integer(t) && !is_float(t) && t != gguf_type::boolean)
        throw error(fmt::format("gguf value: expected a number, got {}", gguf_type_name(t)));
    size_t es = value_size(t);
    if (raw.size() < (i + 1) * es) throw error("gguf value: raw data shorter than its element count");
    const uint8_t* p = raw.data() + i * es;
    switch (t) {
    case gguf_type::u8:
    case gguf_type::boolean:
        return *p;
    case gguf_type::i8:
        return int8_t(*p);
    case gguf_type::u16:
        return load_le<uint16_t>(p);
    case gguf_type::i16:
        return load_le<int16_t>(p);
    case gguf_type::u32:
        return load_le<uint32_t>(p);
    case gguf_type::i32:
        return load_le<int32_t>(p);
    case gguf_type::i64:
        return load_le<int64_t>(p);
    case gguf_type::u64: {
        uint64_t u = load_le<uint64_t>(p);
        if (u > uint64_t(std::numeric_limits<int64_t>::max()))
            throw error(fmt::format("gguf value: u64 {} does not fit in int64", u));
        return int64_t(u);
    }
    case gguf_type::f32:
        return float_to_int(load_le<float>(p));
    case gguf_type::f64:
        return float_to_int(load_le<double>(p));
    default:
        break;
    }
    throw error(fmt::format("gguf value: expected a number, got {}", gguf_type_name(t)));
}

double gguf_value::float_at(uint64_t i) const {
    gguf_type t = scalar_type();
    if (i >= n) throw error(fmt::format("gguf value: index {} out of range, expected < {}", i, n));
    size_t es = value_size(t);
    if (t == gguf_type::f32 || t == gguf_type::f64) {
        if (raw.size() < (i + 1) * es) throw error("gguf value: raw data shorter than its element count");
        const uint8_t* p = raw.data() + i * es;
        return t == gguf_type::f32 ? double(load_le<float>(p)) : load_le<double>(p);
    }
    if (t == gguf_type::u64) {
        if (raw.size() < (i + 1) * es) throw error("gguf value: raw data shorter than its element count");
        return double(load_le<uint64_t>(raw.data() + i * es));
    }
    return double(int_at(i));
}

namespace {
template <class T> gguf_value scalar_of(gguf_type t, T v) {
    gguf_value r;
    r.type = r.elem_type = t;
    r.raw.resize(sizeof(T));
    std::memcpy(r.raw.data(), &v, sizeof(T));
    return r;
}
template <class T> gguf_value array_of(gguf_type et, std::span<const T> v) {
    gguf_value r;
    r.type = gguf_type::array;
    r.elem_type = et;
    r.n = v.size();
    r.raw.resize(v.size_bytes());
    if (!v.empty()) std::memcpy(r.raw.data(), v.data(), v.size_bytes());
    return r;
}
} // namespace

gguf_value gguf_value::of_u32(uint32_t v) {
    return scalar_of(gguf_type::u32, v);
}
gguf_value gguf_value::of_i32(int32_t v) {
    return scalar_of(gguf_type::i32, v);
}
gguf_value gguf_value::of_u64(uint64_t v) {
    return scalar_of(gguf_type::u64, v);
}
gguf_value gguf_value::of_f32(float v) {
    return scalar_of(gguf_type::f32, v);
}
gguf_value gguf_value::of_bool(bool v) {
    return scalar_of(gguf_type::boolean, uint8_t(v ? 1 : 0));
}
gguf_value gguf_value::of_string(std::string v) {
    gguf_value r;
    r.type = r.elem_type = gguf_type::string;
    r.strs.push_back(std::move(v));
    return r;
}
gguf_value gguf_value::of_strings(std::vector<std::string> v) {
    gguf_value r;
    r.type = gguf_type::array;
    r.elem_type = gguf_type::string;
    r.n = v.size();
    r.strs = std::move(v);
    return r;
}
gguf_value gguf_value::of_f32s(std::span<const float> v) {
    return array_of(gguf_type::f32, v);
}
gguf_value gguf_value::of_i32s(std::span<const int32_t> v) {
    return array_of(gguf_type::i32, v);
}

// ---------------------------------------------------------------------------------------------------------------------
// A file truncated (or replaced in place) while it is mapped: touching a page past its new end raises SIGBUS. The
// mappings are registered here, and a SIGBUS inside one of them prints one line naming the file and exits with status
// 1 (there is no way to resume the read; the weights are gone). A SIGBUS elsewhere goes to the previous handler.

namespace {

struct mapped_range {
    std::atomic<uintptr_t> begin{0}, end{0};
    char path[512] = {}; // written before `end` is published, read only by the handler
};
constexpr int max_mapped = 64; // mappings watched at once; more are still mapped, just not named on SIGBUS
mapped_range g_mapped[max_mapped];
struct sigaction g_prev_sigbus;

extern "C" void on_sigbus(int sig, siginfo_t* info, void* uctx) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
    for (const mapped_range& m : g_mapped) {
        const uintptr_t b = m.begin.load(std::memory_order_acquire), e = m.end.load(std::memory_order_acquire);
        if (e == 0 || a < b || a >= e) continue;
        // async-signal-safe: write(2) and _exit(2) only
        const char head[] = "error: ";
        const char tail[] = ": the file was truncated or changed on disk while in use; cannot read it any more\n";
        (void)!::write(STDERR_FILENO, head, sizeof(head) - 1);
        (void)!::write(STDERR_FILENO, m.path, ::strnlen(m.path, sizeof(m.path)));
        (void)!::write(STDERR_FILENO, tail, sizeof(tail) - 1);
        ::_exit(1);
    }
    if (g_prev_sigbus.sa_flags & SA_SIGINFO) {
        if (g_prev_sigbus.sa_sigaction) return g_prev_sigbus.sa_sigaction(sig, info, uctx);
    } else if (g_prev_sigbus.sa_handler != SIG_DFL && g_prev_sigbus.sa_handler != SIG_IGN) {
        return g_prev_sigbus.sa_handler(sig);
    }
    std::signal(SIGBUS, SIG_DFL); // returning re-executes the access, which now kills the process as it would have
}

void install_sigbus_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &g_prev_sigbus);
    });
}

// Registers [p, p + n) under `path`; returns the slot or -1 when all are taken.
int watch_mapping(const void* p, size_t n, const std::string& path) {
    install_sigbus_handler();
    for (int i = 0; i < max_mapped; i++) {
        uintptr_t expected = 0;
        if (!g_mapped[i].begin.compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(p))) continue;
        const size_t k = std::min(path.size(), sizeof(g_mapped[i].path) - 1);
        std::memcpy(g_mapped[i].path, path.data(), k);
        g_mapped[i].path[k] = 0;
        g_mapped[i].end.store(reinterpret_cast<uintptr_t>(p) + n, std::memory_order_release);
        return i;
    }
    return -1;
}

void unwatch_mapping(int slot) {
    if (slot < 0) return;
    g_mapped[slot].end.store(0, std::memory_order_release);
    g_mapped[slot].begin.store(0, std::memory_order_release);
}

} // namespace

// ---------------------------------------------------------------------------------------------------------------------
// gguf_file: parsing

struct gguf_file::impl {
    std::string path;
    uint32_t version = 0;
    uint32_t alignment = default_alignment;
    uint64_t data_offset = 0;
    uint64_t file_size = 0;
    std::vector<gguf_kv> kvs;
    std::vector<gguf_tensor_info> tensors;
    name_index kv_index;
    name_index tensor_index;

    // the bytes: either a read-only private mapping or an owned buffer
    void* map = nullptr;
    size_t map_size = 0;
    int map_slot = -1; // in the SIGBUS watch list
    std::vector<uint8_t> owned;

    impl() = default;
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;
    ~impl() {
        unwatch_mapping(map_slot);
        if (map) munmap(map, map_size);
    }

    void parse(const uint8_t* base, uint64_t size);
    void parse_header(cursor& c);
    void parse_kvs(cursor& c, uint64_t n_kv);
    void parse_tensor_infos(cursor& c, uint64_t n_tensors);
    void check_tensor_data(const uint8_t* base);
};

void gguf_file::impl::parse(const uint8_t* base, uint64_t size) {
    file_size = size;
    cursor c{base, size, 0, path};
    parse_header(c);
    // the smallest records: a kv is key length (8) + 1 key byte + type (4) + 1 value byte;
    // a tensor info is name length (8) + n_dims (4) + one ne (8) + type (4) + offset (8)
    uint64_t n_tensors = c.read_count("tensor count", 32);
    uint64_t n_kv = c.read_count("kv count", 14);
    parse_kvs(c, n_kv);
    parse_tensor_infos(c, n_tensors);
    if (!align_up(c.pos, alignment, data_offset)) c.fail("data offset overflows");
    check_tensor_data(base);
}

void gguf_file::impl::parse_header(cursor& c) {
    if (c.remaining() < 4) c.fail(fmt::format("not a GGUF file, expected at least 24 bytes, got {}", c.remaining()));
    uint32_t magic = c.read<uint32_t>("magic");
    if (magic != gguf_magic) {
        const uint8_t* m = c.base;
        c.fail(
            fmt::format("not a GGUF file: bad magic, expected 47 47 55 46 (\"GGUF\"), got {:02x} {:02x} {:02x} {:02x}",
                        m[0], m[1], m[2], m[3]));
    }
    version = c.read<uint32_t>("version");
    if ((version & 0xFFFF) == 0)
        c.fail(fmt::format("byte-swapped (big-endian) GGUF is not supported, expected a little-endian version 2 or 3, "
                           "got version 0x{:08x}",
                           version));
    if (version == 1) c.fail("GGUF version 1 is not supported (it uses 32-bit counts), expected version 2 or 3, got 1");
    if (version != 2 && version != 3) c.fail(fmt::format("unsupported GGUF version, expected 2 or 3, got {}", version));
}

void gguf_file::impl::parse_kvs(cursor& c, uint64_t n_kv) {
    kvs.reserve(size_t(std::min<uint64_t>(n_kv, 4096))); // n_kv is bounded by the file size; records may be tiny
    for (uint64_t i = 0; i < n_kv; i++) {
        std::string key = c.read_string(fmt::format("key of kv {}", i));
        if (key.empty()) c.fail(fmt::format("kv {}: empty key", i));
        if (kv_index.count(key)) c.fail(fmt::format("duplicate key '{}'", key));
        uint32_t t = c.read<uint32_t>("value type");
        if (!valid_type_id(t)) c.fail(fmt::format("key '{}': unknown value type, expected 0..12, got {}", key, t));
        gguf_value v = read_value(c, gguf_type(t), key);
        kv_index.emplace(key, kvs.size());
        kvs.push_back({std::move(key), std::move(v)});
    }
    if (auto it = kv_index.find("general.alignment"); it != kv_index.end()) {
        const gguf_value& v = kvs[it->second].value;
        if (v.type != gguf_type::u32)
            c.fail(fmt::format("general.alignment: expected type u32, got {}", gguf_type_name(v.type)));
        uint32_t a = uint32_t(v.int_at(0));
        if (!is_pow2(a)) c.fail(fmt::format("general.alignment: expected a non-zero power of two, got {}", a));
        alignment = a;
    }
}

void gguf_file::impl::parse_tensor_infos(cursor& c, uint64_t n_tensors) {
    tensors.reserve(size_t(std::min<uint64_t>(n_tensors, 4096)));
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor_info ti;
        ti.name = c.read_string(fmt::format("name of tensor {}", i));
        if (ti.name.size() >= max_name_bytes)
            c.fail(fmt::format("tensor {}: name too long, expected < {} bytes, got {}", i, max_name_bytes,
                               ti.name.size()));
        if (tensor_index.count(ti.name)) c.fail(fmt::format("duplicate tensor '{}'", ti.name));
        const std::string what = fmt::format("tensor {}", ti.name);
        ti.n_dims = c.read<uint32_t>(what);
        if (ti.n_dims < 1 || ti.n_dims > max_dims)
            c.fail(fmt::format("{}: n_dims, expected 1..{}, got {}", what, max_dims, ti.n_dims));
        for (uint32_t d = 0; d < ti.n_dims; d++) {
            uint64_t ne = c.read<uint64_t>(what);
            if (ne > uint64_t(std::numeric_limits<int64_t>::max()))
                c.fail(fmt::format("{}: ne[{}] out of range, expected < 2^63, got {}", what, d, ne));
            ti.ne[d] = int64_t(ne);
        }
        int64_t n_el = 1;
        for (int64_t ne : ti.ne)
            if (__builtin_mul_overflow(n_el, ne, &n_el))
                c.fail(fmt::format("{}: element count {} x {} x {} x {} overflows int64", what, ti.ne[0], ti.ne[1],
                                   ti.ne[2], ti.ne[3]));
        ti.type_id = c.read<uint32_t>(what);
        const type_traits* tt = find_type(ti.type_id);
        if (!tt) c.fail(fmt::format("{}: unknown type id {}", what, ti.type_id));
        if (ti.ne[0] % tt->block_size != 0)
            c.fail(fmt::format("{}: ne[0] must be a multiple of the {} block size, expected a multiple of {}, got {}",
                               what, tt->name, tt->block_size, ti.ne[0]));
        if (!tensor_bytes(*tt, ti.ne, ti.size)) c.fail(fmt::format("{}: byte size overflows", what));
        ti.offset = c.read<uint64_t>(what);
        if (ti.offset % alignment != 0)
            c.fail(
                fmt::format("{}: offset not aligned, expected a multiple of {}, got {}", what, alignment, ti.offset));
        tensor_index.emplace(ti.name, tensors.size());
        tensors.push_back(std::move(ti));
    }
}

// Every tensor's [offset, offset + size) lies inside the data section, and no two overlap.
void gguf_file::impl::check_tensor_data(const uint8_t* base) {
    if (tensors.empty()) return; // a file without tensors may end before its final padding
    const uint64_t data_bytes = data_offset <= file_size ? file_size - data_offset : 0;
    for (auto& ti : tensors) {
        if (ti.offset > data_bytes || ti.size > data_bytes - ti.offset) {
            uint64_t end = 0;
            bool overflow =
                __builtin_add_overflow(data_offset, ti.offset, &end) || __builtin_add_overflow(end, ti.size, &end);
            if (overflow)
                throw error(fmt::format("{}: tensor {}: data offset {} + size {} overflows", path, ti.name, ti.offset,
                                        ti.size));
            throw error(fmt::format("{}: tensor {}: data runs past the end of the file (truncated?), expected at least "
                                    "{} bytes, got {}",
                                    path, ti.name, end, file_size));
        }
        ti.data = base + data_offset + ti.offset;
    }
    std::vector<const gguf_tensor_info*> by_offset;
    by_offset.reserve(tensors.size());
    for (const auto& ti : tensors)
        if (ti.size > 0) by_offset.push_back(&ti); // an empty tensor holds no bytes, so it overlaps nothing
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); i++) {
        const gguf_tensor_info* a = by_offset[i - 1];
        const gguf_tensor_info* b = by_offset[i];
        if (b->offset < a->offset + a->size)
            throw error(fmt::format("{}: tensor {} overlaps tensor {}, expected offset >= {}, got {}", path, b->name,
                                    a->name, a->offset + a->size, b->offset));
    }
}

// ---------------------------------------------------------------------------------------------------------------------
// gguf_file: opening and lookups

gguf_file gguf_file::open(const std::string& path) {
    gguf_file f;
    f.p_ = std::make_unique<impl>();
    f.p_->path = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw error(fmt::format("{}: cannot stat: {}", path, std::strerror(e)));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw error(fmt::format("{}: not a regular file", path));
    }
    size_t size = size_t(st.st_size);
    if (size > 0) {
        void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            throw error(fmt::format("{}: cannot map {} bytes: {}", path, size, std::strerror(e)));
        }
        f.p_->map = m;
        f.p_->map_size = size;
        f.p_->map_slot = watch_mapping(m, size, path);
    }
    ::close(fd); // the mapping keeps the file alive
    f.p_->parse(static_cast<const uint8_t*>(f.p_->map), size);
    return f;
}

gguf_file gguf_file::from_memory(std::vector<uint8_t> bytes, std::string name) {
    gguf_file f;
    f.p_ = std::make_unique<impl>();
    f.p_->path = std::move(name);
    f.p_->owned = std::move(bytes);
    f.p_->parse(f.p_->owned.data(), f.p_->owned.size());
    return f;
}

gguf_file::gguf_file(gguf_file&&) noexcept = default;
gguf_file& gguf_file::operator=(gguf_file&&) noexcept = default;
gguf_file::~gguf_file() = default;

const std::string& gguf_file::path() const {
    return p_->path;
}
uint32_t gguf_file::version() const {
    return p_->version;
}
uint32_t gguf_file::alignment() const {
    return p_->alignment;
}
uint64_t gguf_file::data_offset() const {
    return p_->data_offset;
}
uint64_t gguf_file::file_size() const {
    return p_->file_size;
}
const std::vector<gguf_kv>& gguf_file::kvs() const {
    return p_->kvs;
}
const std::vector<gguf_tensor_info>& gguf_file::tensors() const {
    return p_->tensors;
}

const gguf_value* gguf_file::find(std::string_view key) const {
    auto it = p_->kv_index.find(key);
    return it == p_->kv_index.end() ? nullptr : &p_->kvs[it->second].value;
}

const gguf_tensor_info* gguf_file::find_tensor(std::string_view name) const {
    auto it = p_->tensor_index.find(name);
    return it == p_->tensor_index.end() ? nullptr : &p_->tensors[it->second];
}

namespace {
std::string describe(const gguf_value& v) {
    return v.is_array() ? fmt::format("array of {}", gguf_type_name(v.elem_type)) : gguf_type_name(v.type);
}
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const char* expected, const gguf_value& v) {
    throw error(fmt::format("{}: key '{}': expected {}, got {}", path, key, expected, describe(v)));
}
bool int_like(gguf_type t) {
    return is_integer(t) || t == gguf_type::boolean;
}
bool float_like(gguf_type t) {
    return is_float(t) || is_integer(t);
}
} // namespace

std::optional<int64_t> gguf_file::get_int(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_array() || !int_like(v->type)) wrong_type(path(), key, "an integer", *v);
    try {
        return v->int_at(0);
    } catch (const error& e) {
        throw error(fmt::format("{}: key '{}': {}", path(), key, e.what()));
    }
}

std::optional<double> gguf_file::get_float(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_array() || !float_like(v->type)) wrong_type(path(), key, "a number", *v);
    return v->float_at(0);
}

std::optional<bool> gguf_file::get_bool(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != gguf_type::boolean) wrong_type(path(), key, "bool", *v);
    return v->raw.at(0) != 0;
}

std::optional<std::string> gguf_file::get_string(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != gguf_type::string) wrong_type(path(), key, "str", *v);
    return v->strs.at(0);
}

std::optional<std::vector<std::string>> gguf_file::get_strings(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array() || v->elem_type != gguf_type::string) wrong_type(path(), key, "array of str", *v);
    return v->strs;
}

std::optional<std::vector<int64_t>> gguf_file::get_ints(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array() || !int_like(v->elem_type)) wrong_type(path(), key, "array of integers", *v);
    std::vector<int64_t> out(size_t(v->n));
    try {
        for (uint64_t i = 0; i < v->n; i++) out[i] = v->int_at(i);
    } catch (const error& e) {
        throw error(fmt::format("{}: key '{}': {}", path(), key, e.what()));
    }
    return out;
}

std::optional<std::vector<float>> gguf_file::get_floats(std::string_view key) const {
    const gguf_value* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array() || !float_like(v->elem_type)) wrong_type(path(), key, "array of numbers", *v);
    std::vector<float> out(size_t(v->n));
    for (uint64_t i = 0; i < v->n; i++) out[i] = float(v->float_at(i));
    return out;
}

// ---------------------------------------------------------------------------------------------------------------------
// gguf_writer

namespace {

// Checks that a value is well-formed before it is written (the writer never writes what the reader would reject).
void check_value(const std::string& key, const gguf_value& v) {
    auto bad = [&](const std::string& what) { throw error(fmt::format("gguf_writer: key '{}': {}", key, what)); };
    if (!valid_type_id(uint32_t(v.type))) bad(fmt::format("unknown value type {}", uint32_t(v.type)));
    if (v.is_array()) {
        if (!valid_type_id(uint32_t(v.elem_type))) bad(fmt::format("unknown element type {}", uint32_t(v.elem_type)));
        if (v.elem_type == gguf_type::array) bad("nested arrays are not supported");
    } else if (v.n != 1) {
        bad(fmt::format("a scalar holds one element, got {}", v.n));
    }
    gguf_type et = v.scalar_type();
    if (et == gguf_type::string) {
        if (v.strs.size() != v.n) bad(fmt::format("expected {} strings, got {}", v.n, v.strs.size()));
        return;
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(v.n, uint64_t(value_size(et)), &bytes) || v.raw.size() != bytes)
        bad(fmt::format("expected {} x {} bytes of data, got {}", v.n, value_size(et), v.raw.size()));
    if (et == gguf_type::boolean)
        for (uint8_t b : v.raw)
            if (b > 1) bad(fmt::format("invalid bool, expected 0 or 1, got {}", b));
}

// Appends little-endian fields to a byte buffer.
struct byte_sink {
    std::vector<uint8_t>& out;
    template <class T> void put(T v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));
        out.insert(out.end(), b, b + sizeof(T));
    }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        out.insert(out.end(), s.begin(), s.end());
    }
    void pad_to(uint64_t a) { out.resize((out.size() + a - 1) / a * a, 0); }
};

} // namespace

void gguf_writer::set(std::string key, gguf_value value) {
    if (key.empty()) throw error("gguf_writer: empty key");
    check_value(key, value);
    if (key == "general.alignment") {
        if (value.type != gguf_type::u32)
            throw error(
                fmt::format("gguf_writer: general.alignment: expected type u32, got {}", gguf_type_name(value.type)));
        uint32_t a = uint32_t(value.int_at(0));
        if (!is_pow2(a))
            throw error(fmt::format("gguf_writer: general.alignment: expected a non-zero power of two, got {}", a));
        alignment_ = a;
    }
    for (auto& kv : kvs_)
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    kvs_.push_back({std::move(key), std::move(value)});
}

void gguf_writer::set_alignment(uint32_t a) {
    if (!is_pow2(a)) throw error(fmt::format("gguf_writer: alignment: expected a non-zero power of two, got {}", a));
    bool have_key = std::any_of(kvs_.begin(), kvs_.end(), [](auto& kv) { return kv.key == "general.alignment"; });
    if (a != default_alignment || have_key) set("general.alignment", gguf_value::of_u32(a));
    alignment_ = a;
}

// The byte size of a tensor that may be added (name, type, shape checked).
uint64_t gguf_writer::check_tensor(const std::string& name, uint32_t type_id, std::span<const int64_t> ne) const {
    auto bad = [&](const std::string& what) { throw error(fmt::format("gguf_writer: tensor {}: {}", name, what)); };
    if (name.size() >= max_name_bytes)
        bad(fmt::format("name too long, expected < {} bytes, got {}", max_name_bytes, name.size()));
    for (const auto& t : tensors_)
        if (t.name == name) bad("duplicate tensor name");
    if (ne.size() < 1 || ne.size() > max_dims) bad(fmt::format("n_dims, expected 1..{}, got {}", max_dims, ne.size()));
    const type_traits* tt = find_type(type_id);
    if (!tt) bad(fmt::format("unknown type id {}", type_id));
    int64_t full[4] = {1, 1, 1, 1};
    int64_t n_el = 1;
    for (size_t i = 0; i < ne.size(); i++) {
        if (ne[i] < 0) bad(fmt::format("ne[{}] must be >= 0, got {}", i, ne[i]));
        if (__builtin_mul_overflow(n_el, ne[i], &n_el)) bad("element count overflows int64");
        full[i] = ne[i];
    }
    if (full[0] % tt->block_size != 0)
        bad(fmt::format("ne[0] must be a multiple of the {} block size, expected a multiple of {}, got {}", tt->name,
                        tt->block_size, full[0]));
    uint64_t size = 0;
    if (!tensor_bytes(*tt, full, size)) bad("byte size overflows");
    return size;
}

void gguf_writer::add_tensor(std::string name, uint32_t type_id, std::span<const int64_t> ne, const void* data) {
    const uint64_t size = check_tensor(name, type_id, ne);
    if (size > 0 && !data) throw error(fmt::format("gguf_writer: tensor {}: no data", name));
    tensors_.push_back({std::move(name), type_id, std::vector<int64_t>(ne.begin(), ne.end()), data, size, {}});
}

void gguf_writer::add_tensor(std::string name, uint32_t type_id, std::span<const int64_t> ne, fill_fn fill) {
    const uint64_t size = check_tensor(name, type_id, ne);
    if (!fill) throw error(fmt::format("gguf_writer: tensor {}: no data", name));
    tensors_.push_back(
        {std::move(name), type_id, std::vector<int64_t>(ne.begin(), ne.end()), nullptr, size, std::move(fill)});
}

namespace {

// Everything before the tensor data: header, kvs, tensor infos (offsets packed with padding), zero padding.
// A file without tensors has no data section and so no padding (as the vocab-only files in llama.cpp's tree).
std::vector<uint8_t> write_meta(const std::vector<gguf_kv>& kvs, const auto& tensors, uint32_t alignment) {
    std::vector<uint8_t> out;
    byte_sink s{out};
    s.put<uint32_t>(gguf_magic);
    s.put<uint32_t>(3);
    s.put<uint64_t>(tensors.size());
    s.put<uint64_t>(kvs.size());
    for (const auto& kv : kvs) {
        const gguf_value& v = kv.value;
        s.put_string(kv.key);
        s.put<uint32_t>(uint32_t(v.type));
        if (v.is_array()) {
            s.put<uint32_t>(uint32_t(v.elem_type));
            s.put<uint64_t>(v.n);
        }
        if (v.scalar_type() == gguf_type::string)
            for (const auto& str : v.strs) s.put_string(str);
        else
            out.insert(out.end(), v.raw.begin(), v.raw.end());
    }
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        s.put_string(t.name);
        s.put<uint32_t>(uint32_t(t.ne.size()));
        for (int64_t ne : t.ne) s.put<uint64_t>(uint64_t(ne));
        s.put<uint32_t>(t.type_id);
        s.put<uint64_t>(offset);
        offset += (t.size + alignment - 1) / alignment * alignment;
    }
    if (!tensors.empty()) s.pad_to(alignment);
    return out;
}

} // namespace

std::vector<uint8_t> gguf_writer::to_bytes() const {
    std::vector<uint8_t> out = write_meta(kvs_, tensors_, alignment_);
    byte_sink s{out};
    for (const auto& t : tensors_) {
        if (t.fill) {
            const size_t at = out.size();
            out.resize(at + t.size);
            t.fill(std::span<uint8_t>(out.data() + at, t.size));
        } else if (t.size > 0) {
            const uint8_t* d = static_cast<const uint8_t*>(t.data);
            out.insert(out.end(), d, d + t.size);
        }
        s.pad_to(alignment_);
    }
    return out;
}

void gguf_writer::write(const std::string& path) const {
    atomic_file f(path);
    const std::vector<uint8_t> meta = write_meta(kvs_, tensors_, alignment_);
    f.write(meta.data(), meta.size());
    static const uint8_t zeros[256] = {};
    std::vector<uint8_t> buf; // the filled tensors', one at a time (kept at the largest's size)
    for (const auto& t : tensors_) {
        if (t.fill) {
            buf.assign(t.size, 0);
            t.fill(buf);
            f.write(buf.data(), buf.size());
        } else if (t.size > 0) {
            f.write(t.data, t.size);
        }
        uint64_t pad = (alignment_ - t.size % alignment_) % alignment_;
        while (pad > 0) {
            const size_t k = std::min<uint64_t>(pad, sizeof(zeros));
            f.write(zeros, k);
            pad -= k;
        }
    }
    f.commit();
}

gguf_writer gguf_writer::copy_of(const gguf_file& f) {
    gguf_writer w;
    w.alignment_ = f.alignment();
    w.kvs_ = f.kvs(); // general.alignment, when present, is kept as it was, in its place
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type_id, std::span<const int64_t>(t.ne, t.n_dims), t.data);
    return w;
}

} // namespace tessera
