// gguf.h: GGUF v2/v3 reader (mmap, every count/offset/size checked against the file through a bounds-checked cursor)
// and writer (data in tensor-info order, zero padding, temp file + rename). Layout: ../shared/docs/FORMATS.md §1.
#pragma once

#include "types.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// GGUF metadata value types (the u32 written before each value).
enum class gguf_type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};
const char* gguf_type_name(gguf_type t);

// One metadata value: a scalar, a string, or an array of either (nested arrays are rejected, as ggml does).
struct gguf_value {
    gguf_type type = gguf_type::u32;
    gguf_type elem_type = gguf_type::u32; // element type when type == array
    uint64_t n = 1;                       // element count (1 for a scalar)
    std::vector<uint8_t> raw;             // numbers and bools: n little-endian elements back to back
    std::vector<std::string> strs;        // string (one) or array of strings (n)

    bool is_array() const { return type == gguf_type::array; }
    gguf_type scalar_type() const { return is_array() ? elem_type : type; } // type of each element

    // Element i as a number (any integer, float or bool type); throws tessera::error on strings.
    int64_t int_at(uint64_t i) const;
    double float_at(uint64_t i) const;

    static gguf_value of_u32(uint32_t v);
    static gguf_value of_i32(int32_t v);
    static gguf_value of_u64(uint64_t v);
    static gguf_value of_f32(float v);
    static gguf_value of_bool(bool v);
    static gguf_value of_string(std::string v);
    static gguf_value of_strings(std::vector<std::string> v);
    static gguf_value of_f32s(std::span<const float> v);
    static gguf_value of_i32s(std::span<const int32_t> v);
};

struct gguf_kv {
    std::string key;
    gguf_value value;
};

struct gguf_tensor_info {
    std::string name;
    uint32_t n_dims = 0;            // 1..4
    int64_t ne[4] = {1, 1, 1, 1};   // elements per dimension, ne[0] innermost; missing dims are 1
    uint32_t type_id = 0;           // raw GGUF type id (may be one tessera cannot compute)
    uint64_t offset = 0;            // relative to the data section
    uint64_t size = 0;              // bytes, from the type's block size
    const uint8_t* data = nullptr;  // into the mapping (or memory buffer); valid while the gguf_file lives

    type t() const { return type(type_id); }
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// A parsed GGUF file. Movable, not copyable; tensor data stays mapped as long as the object lives.
class gguf_file {
  public:
    // Maps and parses a file; throws tessera::error("PATH: what is wrong") on any problem. Should the file be
    // truncated on disk while mapped, a later read of the lost pages (SIGBUS) prints "error: PATH: the file was
    // truncated or changed on disk while in use; ..." and exits with status 1 instead of dying on the signal.
    static gguf_file open(const std::string& path);
    // Parses bytes held in memory (tests, fuzzing); `name` is used in error messages.
    static gguf_file from_memory(std::vector<uint8_t> bytes, std::string name = "<memory>");

    gguf_file(gguf_file&&) noexcept;
    gguf_file& operator=(gguf_file&&) noexcept;
    ~gguf_file();

    const std::string& path() const;
    uint32_t version() const;
    uint32_t alignment() const;
    uint64_t data_offset() const; // start of the tensor data section
    uint64_t file_size() const;

    const std::vector<gguf_kv>& kvs() const;
    const std::vector<gguf_tensor_info>& tensors() const;

    const gguf_value* find(std::string_view key) const;             // nullptr if absent
    const gguf_tensor_info* find_tensor(std::string_view name) const; // nullptr if absent

    // Typed getters. Absent -> nullopt. Present with an incompatible type -> tessera::error naming the key.
    // get_int accepts any integer type (and bool); get_float any float or integer type.
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    // Arrays; absent -> empty optional. Element type checked as above.
    std::optional<std::vector<std::string>> get_strings(std::string_view key) const;
    std::optional<std::vector<int64_t>> get_ints(std::string_view key) const;
    std::optional<std::vector<float>> get_floats(std::string_view key) const;

  private:
    struct impl;
    gguf_file() = default;
    std::unique_ptr<impl> p_;
};

// Builds a GGUF v3 file. Tensor data is written in the order tensors were added, each padded to the alignment.
// A file without tensors ends right after its metadata (no padding), as llama.cpp's vocab-only files do.
class gguf_writer {
  public:
    void set(std::string key, gguf_value value); // replaces a key of the same name, keeps first position
    void set_alignment(uint32_t a);              // also written as general.alignment when != 32
    // `data` must hold exactly the tensor's byte size and stay valid until write().
    void add_tensor(std::string name, uint32_t type_id, std::span<const int64_t> ne, const void* data);
    // A tensor made when write() or to_bytes() comes to it: `fill` gets a zeroed buffer of exactly its byte size, in
    // the order the tensors were added, each time the file is written; write() reuses one buffer for them all, so a
    // file of any size is made one tensor at a time. An exception from `fill` ends the write (nothing is left).
    using fill_fn = std::function<void(std::span<uint8_t>)>;
    void add_tensor(std::string name, uint32_t type_id, std::span<const int64_t> ne, fill_fn fill);

    // Writes through atomic_file (a temporary in PATH's directory, fsync, rename over PATH): PATH is the old file or
    // the complete new one, and on failure no temporary is left.
    void write(const std::string& path) const;
    std::vector<uint8_t> to_bytes() const;

    // A writer that reproduces `f` (same keys in order, same tensors, same alignment, version 3).
    static gguf_writer copy_of(const gguf_file& f);

  private:
    struct tensor_entry {
        std::string name;
        uint32_t type_id;
        std::vector<int64_t> ne;
        const void* data;
        uint64_t size;
        fill_fn fill; // instead of data when set
    };
    uint64_t check_tensor(const std::string& name, uint32_t type_id, std::span<const int64_t> ne) const;
    std::vector<gguf_kv> kvs_;
    std::vector<tensor_entry> tensors_;
    uint32_t alignment_ = 32;
};

} // namespace tessera
