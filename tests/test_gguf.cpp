// test_gguf.cpp: GGUF writer -> reader round trips, byte-exact copies of real files, and corrupt or truncated inputs
// (each must throw tessera::error, never crash). Hand-made corrupt files are built with the `raw` byte builder below.
#include "helpers.h"

#include "ggml-like/atomic_file.h"
#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "quant/format.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tessera;
namespace fs = std::filesystem;

namespace {

// Little-endian byte builder for hand-made (possibly invalid) GGUF files.
struct raw {
    std::vector<uint8_t> b;
    template <class T> raw& put(T v) {
        uint8_t x[sizeof(T)];
        std::memcpy(x, &v, sizeof(T));
        b.insert(b.end(), x, x + sizeof(T));
        return *this;
    }
    raw& u8(uint8_t v) { return put(v); }
    raw& u32(uint32_t v) { return put(v); }
    raw& u64(uint64_t v) { return put(v); }
    raw& str(const std::string& s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    raw& pad(size_t a) {
        b.resize((b.size() + a - 1) / a * a, 0);
        return *this;
    }
    raw& zeros(size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
    raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
    }
    raw& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(uint32_t(gguf_type::u32)).u32(v); }
    raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type_id, uint64_t offset) {
        str(name).u32(uint32_t(ne.size()));
        for (uint64_t x : ne) u64(x);
        return u32(type_id).u64(offset);
    }
};

gguf_file parse(const raw& r) {
    return gguf_file::from_memory(r.b, "test.gguf");
}

// Asserts that parsing throws tessera::error whose message contains `part`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& part) {
    try {
        gguf_file::from_memory(bytes, "test.gguf");
        ADD_FAILURE() << "expected a tessera::error containing \"" << part << "\"";
    } catch (const error& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg;
        EXPECT_EQ(msg.rfind("test.gguf: ", 0), 0u) << "message: " << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "message: " << msg;
    }
}
void expect_error(const raw& r, const std::string& part) {
    expect_error(r.b, part);
}

template <class T> gguf_value scalar(gguf_type t, T v) {
    gguf_value r;
    r.type = r.elem_type = t;
    r.raw.resize(sizeof(T));
    std::memcpy(r.raw.data(), &v, sizeof(T));
    return r;
}
template <class T> gguf_value array(gguf_type et, std::vector<T> v) {
    gguf_value r;
    r.type = gguf_type::array;
    r.elem_type = et;
    r.n = v.size();
    r.raw.resize(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(r.raw.data(), v.data(), r.raw.size());
    return r;
}

void expect_same_value(const gguf_value& a, const gguf_value& b, const std::string& key) {
    EXPECT_EQ(a.type, b.type) << key;
    EXPECT_EQ(a.elem_type, b.elem_type) << key;
    EXPECT_EQ(a.n, b.n) << key;
    EXPECT_EQ(a.raw, b.raw) << key;
    EXPECT_EQ(a.strs, b.strs) << key;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::vector<uint8_t> b(fs::file_size(path));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return {};
    size_t got = std::fread(b.data(), 1, b.size(), f);
    std::fclose(f);
    b.resize(got);
    return b;
}

// A temporary directory removed at the end of the test.
struct temp_dir {
    fs::path path;
    temp_dir() {
        path = fs::temp_directory_path() / ("tessera_test_gguf_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir() { fs::remove_all(path); }
};

// A small valid file: two kvs, two tensors with padding between them; the last one ends exactly at a multiple of
// the alignment, so the file has no trailing padding and every shorter prefix of it is invalid.
raw small_valid_file() {
    raw r;
    r.header(2, 2);
    r.kv_u32("general.alignment", 32);
    r.str("general.name").u32(uint32_t(gguf_type::string)).str("tiny");
    r.tensor("a", {32}, 8, 0);    // q8_0 32: 34 bytes, padded to 64
    r.tensor("b", {4, 2}, 0, 64); // f32 4x2: 32 bytes, ends at 96
    r.pad(32);
    for (int i = 0; i < 34; i++) r.u8(uint8_t(100 + i));
    r.zeros(30);
    for (int i = 0; i < 32; i++) r.u8(uint8_t(i + 1));
    return r;
}

} // namespace

// ---------------------------------------------------------------------------------------------------------------------
// Round trips

TEST(gguf_round_trip, every_metadata_type_and_several_tensors) {
    gguf_writer w;
    w.set("t.u8", scalar(gguf_type::u8, uint8_t(200)));
    w.set("t.i8", scalar(gguf_type::i8, int8_t(-100)));
    w.set("t.u16", scalar(gguf_type::u16, uint16_t(60000)));
    w.set("t.i16", scalar(gguf_type::i16, int16_t(-30000)));
    w.set("t.u32", gguf_value::of_u32(4000000000u));
    w.set("t.i32", gguf_value::of_i32(-2000000000));
    w.set("t.f32", gguf_value::of_f32(1.5f));
    w.set("t.bool", gguf_value::of_bool(true));
    w.set("t.bool_false", gguf_value::of_bool(false));
    w.set("t.str", gguf_value::of_string("h\xc3\xa9llo\nworld"));
    w.set("t.empty_str", gguf_value::of_string(""));
    w.set("t.u64", gguf_value::of_u64(1ull << 40));
    w.set("t.i64", scalar(gguf_type::i64, int64_t(-(1ll << 50))));
    w.set("t.f64", scalar(gguf_type::f64, 2.25));
    w.set("t.strs", gguf_value::of_strings({"a", "", "bc", std::string("\0z", 2)}));
    w.set("t.empty_strs", gguf_value::of_strings({}));
    const float fs_[] = {1.0f, -2.0f, 3.5f};
    w.set("t.f32s", gguf_value::of_f32s(fs_));
    const int32_t is_[] = {7, -8, 9};
    w.set("t.i32s", gguf_value::of_i32s(is_));
    w.set("t.empty_i32s", gguf_value::of_i32s({}));
    w.set("t.u8s", array(gguf_type::u8, std::vector<uint8_t>{1, 2, 255}));
    w.set("t.bools", array(gguf_type::boolean, std::vector<uint8_t>{1, 0, 1}));
    w.set("t.u64s", array(gguf_type::u64, std::vector<uint64_t>{1, 1ull << 62}));
    w.set("t.f64s", array(gguf_type::f64, std::vector<double>{0.5, -0.25}));
    w.set("t.u32", gguf_value::of_u32(7)); // replaces the value, keeps the first position

    std::vector<uint8_t> f32_data(4 * 3 * 4), f16_data(2 * 2 * 3 * 2 * 2), q4_0_data(2 * 18 * 5), q8_0_data(34 * 2),
        q4_k_data(144), i32_data(4 * 4);
    for (auto* v : {&f32_data, &f16_data, &q4_0_data, &q8_0_data, &q4_k_data, &i32_data})
        for (size_t i = 0; i < v->size(); i++) (*v)[i] = uint8_t(i * 7 + v->size());
    const int64_t ne_f32[] = {4, 3}, ne_f16[] = {2, 2, 3, 2}, ne_q4_0[] = {64, 5}, ne_q8_0[] = {32, 1, 2},
                  ne_q4_k[] = {256}, ne_i32[] = {4}, ne_empty[] = {0, 3};
    w.add_tensor("f32", uint32_t(type::f32), ne_f32, f32_data.data());
    w.add_tensor("f16.4d", uint32_t(type::f16), ne_f16, f16_data.data());
    w.add_tensor("q4_0", uint32_t(type::q4_0), ne_q4_0, q4_0_data.data());
    w.add_tensor("q8_0.3d", uint32_t(type::q8_0), ne_q8_0, q8_0_data.data());
    w.add_tensor("q4_k", uint32_t(type::q4_k), ne_q4_k, q4_k_data.data()); // known, not computable: still readable
    w.add_tensor("empty", uint32_t(type::f32), ne_empty, nullptr);
    w.add_tensor("i32", uint32_t(type::i32), ne_i32, i32_data.data());

    std::vector<uint8_t> bytes = w.to_bytes();
    gguf_file f = gguf_file::from_memory(bytes, "rt.gguf");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.data_offset() % 32, 0u);
    EXPECT_EQ(f.file_size(), bytes.size());
    EXPECT_EQ(f.find("general.alignment"), nullptr); // default alignment is not written

    // kvs: same keys, same order, same values
    std::vector<std::string> keys;
    for (const auto& kv : f.kvs()) keys.push_back(kv.key);
    ASSERT_EQ(keys.size(), 23u);
    EXPECT_EQ(keys[0], "t.u8");
    EXPECT_EQ(keys[4], "t.u32");
    EXPECT_EQ(keys.back(), "t.f64s");
    gguf_file f2 = gguf_file::from_memory(gguf_writer::copy_of(f).to_bytes(), "copy.gguf");
    for (const auto& kv : f.kvs()) {
        ASSERT_NE(f2.find(kv.key), nullptr) << kv.key;
        expect_same_value(*f2.find(kv.key), kv.value, kv.key);
    }

    // getters
    EXPECT_EQ(f.get_int("t.u8"), 200);
    EXPECT_EQ(f.get_int("t.i8"), -100);
    EXPECT_EQ(f.get_int("t.u16"), 60000);
    EXPECT_EQ(f.get_int("t.i16"), -30000);
    EXPECT_EQ(f.get_int("t.u32"), 7);
    EXPECT_EQ(f.get_int("t.i32"), -2000000000);
    EXPECT_EQ(f.get_int("t.u64"), int64_t(1) << 40);
    EXPECT_EQ(f.get_int("t.i64"), -(int64_t(1) << 50));
    EXPECT_EQ(f.get_int("t.bool"), 1);
    EXPECT_EQ(f.get_float("t.f32"), 1.5);
    EXPECT_EQ(f.get_float("t.f64"), 2.25);
    EXPECT_EQ(f.get_float("t.i32"), -2000000000.0);
    EXPECT_EQ(f.get_bool("t.bool"), true);
    EXPECT_EQ(f.get_bool("t.bool_false"), false);
    EXPECT_EQ(f.get_string("t.str"), "h\xc3\xa9llo\nworld");
    EXPECT_EQ(f.get_string("t.empty_str"), "");
    EXPECT_EQ(f.get_strings("t.strs"), (std::vector<std::string>{"a", "", "bc", std::string("\0z", 2)}));
    EXPECT_EQ(f.get_strings("t.empty_strs"), std::vector<std::string>{});
    EXPECT_EQ(f.get_floats("t.f32s"), (std::vector<float>{1.0f, -2.0f, 3.5f}));
    EXPECT_EQ(f.get_floats("t.f64s"), (std::vector<float>{0.5f, -0.25f}));
    EXPECT_EQ(f.get_ints("t.i32s"), (std::vector<int64_t>{7, -8, 9}));
    EXPECT_EQ(f.get_ints("t.u8s"), (std::vector<int64_t>{1, 2, 255}));
    EXPECT_EQ(f.get_ints("t.bools"), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(f.get_ints("t.empty_i32s"), std::vector<int64_t>{});
    EXPECT_EQ(f.find("t.u64s")->int_at(1), int64_t(1) << 62);
    EXPECT_EQ(f.find("t.strs")->n, 4u);

    // absent keys and wrong types
    EXPECT_EQ(f.get_int("nope"), std::nullopt);
    EXPECT_EQ(f.get_strings("nope"), std::nullopt);
    EXPECT_THROW(f.get_int("t.str"), error);
    EXPECT_THROW(f.get_int("t.f32"), error);
    EXPECT_THROW(f.get_int("t.i32s"), error);
    EXPECT_THROW(f.get_float("t.str"), error);
    EXPECT_THROW(f.get_bool("t.u32"), error);
    EXPECT_THROW(f.get_string("t.strs"), error);
    EXPECT_THROW(f.get_strings("t.str"), error);
    EXPECT_THROW(f.get_ints("t.strs"), error);
    EXPECT_THROW(f.get_floats("t.strs"), error);
    EXPECT_THROW(f.find("t.str")->int_at(0), error);
    EXPECT_THROW(f.find("t.i32s")->int_at(3), error);
    try {
        f.get_int("t.str");
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("t.str"), std::string::npos) << e.what();
    }

    // tensors
    ASSERT_EQ(f.tensors().size(), 7u);
    struct want {
        const char* name;
        type t;
        std::vector<int64_t> ne;
        const std::vector<uint8_t>* data;
    };
    std::vector<uint8_t> none;
    const want wants[] = {{"f32", type::f32, {4, 3}, &f32_data},     {"f16.4d", type::f16, {2, 2, 3, 2}, &f16_data},
                          {"q4_0", type::q4_0, {64, 5}, &q4_0_data}, {"q8_0.3d", type::q8_0, {32, 1, 2}, &q8_0_data},
                          {"q4_k", type::q4_k, {256}, &q4_k_data},   {"empty", type::f32, {0, 3}, &none},
                          {"i32", type::i32, {4}, &i32_data}};
    for (size_t i = 0; i < 7; i++) {
        const gguf_tensor_info& t = f.tensors()[i];
        const want& w_ = wants[i];
        EXPECT_EQ(t.name, w_.name);
        EXPECT_EQ(f.find_tensor(w_.name), &t);
        EXPECT_EQ(t.t(), w_.t);
        ASSERT_EQ(t.n_dims, w_.ne.size()) << t.name;
        int64_t n = 1;
        for (size_t d = 0; d < 4; d++) {
            EXPECT_EQ(t.ne[d], d < w_.ne.size() ? w_.ne[d] : 1) << t.name;
            n *= t.ne[d];
        }
        EXPECT_EQ(t.n_elements(), n);
        EXPECT_EQ(t.offset % 32, 0u) << t.name;
        ASSERT_EQ(t.size, w_.data->size()) << t.name;
        if (t.size > 0) {
            EXPECT_EQ(std::memcmp(t.data, w_.data->data(), t.size), 0) << t.name;
        }
    }
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    EXPECT_EQ(f.tensors()[2].size, 2u * 18 * 5);

    // a copy of what was read gives the very same bytes
    EXPECT_EQ(gguf_writer::copy_of(f).to_bytes(), bytes);
}

TEST(gguf_round_trip, alignment_key_written_only_when_not_default) {
    std::vector<uint8_t> data(34 * 3, 0x5a);
    const int64_t ne[] = {32};
    gguf_writer w;
    w.set("general.name", gguf_value::of_string("x"));
    w.set_alignment(64);
    w.add_tensor("a", uint32_t(type::q8_0), ne, data.data());
    w.add_tensor("b", uint32_t(type::q8_0), ne, data.data() + 34);
    std::vector<uint8_t> bytes = w.to_bytes();
    gguf_file f = gguf_file::from_memory(bytes);
    EXPECT_EQ(f.alignment(), 64u);
    EXPECT_EQ(f.get_int("general.alignment"), 64);
    EXPECT_EQ(f.kvs()[1].key, "general.alignment");
    EXPECT_EQ(f.data_offset() % 64, 0u);
    EXPECT_EQ(f.tensors()[1].offset, 64u);
    EXPECT_EQ(bytes.size(), f.data_offset() + 128);
    EXPECT_EQ(gguf_writer::copy_of(f).to_bytes(), bytes);

    // an explicit general.alignment = 32 read from a file is kept as it was
    gguf_file g = parse(small_valid_file());
    EXPECT_EQ(g.get_int("general.alignment"), 32);
    EXPECT_EQ(gguf_writer::copy_of(g).to_bytes(), small_valid_file().b);

    gguf_writer plain;
    plain.set_alignment(32);
    EXPECT_EQ(gguf_file::from_memory(plain.to_bytes()).find("general.alignment"), nullptr);
}

// Every block format (quant/format.h) written and read back byte for byte; i2_s tensors carry their 32-byte scale tail
// (n/4 + 32 bytes) and the next tensor starts at the aligned offset after it.
TEST(gguf_round_trip, every_block_format) {
    gguf_writer w;
    w.set("general.name", gguf_value::of_string("formats"));
    std::vector<std::vector<uint8_t>> data;
    std::vector<std::pair<std::string, type>> written;
    auto add = [&](type t) {
        const int64_t ne[] = {2 * block_size(t), 3};
        data.emplace_back(tensor_bytes(t, ne[0] * ne[1]));
        for (size_t i = 0; i < data.back().size(); i++) data.back()[i] = uint8_t(i * 13 + uint32_t(t));
        written.emplace_back(type_name(t), t);
        w.add_tensor(type_name(t), uint32_t(t), ne, data.back().data());
    };
#define TS_ADD(F) add(F::id);
    TS_BLOCK_FORMATS(TS_ADD)
#undef TS_ADD
    add(type::f32); // after i2_s's tail
    const std::vector<uint8_t> bytes = w.to_bytes();
    gguf_file f = gguf_file::from_memory(bytes, "formats.gguf");
    ASSERT_EQ(f.tensors().size(), written.size());
    uint64_t offset = 0;
    for (size_t i = 0; i < written.size(); i++) {
        const gguf_tensor_info& t = f.tensors()[i];
        EXPECT_EQ(t.name, written[i].first);
        EXPECT_EQ(t.t(), written[i].second);
        EXPECT_EQ(t.offset, offset) << t.name;
        ASSERT_EQ(t.size, data[i].size()) << t.name;
        EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.size), 0) << t.name;
        offset += (t.size + 31) / 32 * 32;
    }
    const gguf_tensor_info* i2 = f.find_tensor("i2_s");
    ASSERT_NE(i2, nullptr);
    EXPECT_EQ(i2->size, uint64_t(256 * 3 / 4 + 32));
    EXPECT_EQ(gguf_writer::copy_of(f).to_bytes(), bytes);
}

TEST(gguf_broken, i2_s_without_its_tail) {
    // 128 x 1 i2_s: 32 bytes of codes + 32 of tail; a file that ends after the codes is truncated
    raw r;
    r.header(1, 0).tensor("w", {128}, uint32_t(type::i2_s), 0).pad(32).zeros(32);
    expect_error(r, "tensor w: data runs past the end of the file (truncated?), expected at least");
    r.zeros(32);
    EXPECT_NO_THROW(parse(r));
}

TEST(gguf_round_trip, version_2_is_read) {
    raw r = small_valid_file();
    r.b[4] = 2;
    gguf_file f = parse(r);
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.tensors()[0].data[0], 100);
    EXPECT_EQ(f.tensors()[1].data[0], 1);
}

TEST(gguf_round_trip, file_without_tensors_may_lack_final_padding) {
    raw r;
    r.header(0, 1).kv_u32("a.b", 5); // 24 + 15 bytes, not padded
    EXPECT_EQ(parse(r).get_int("a.b"), 5);
}

TEST(gguf_round_trip, writer_rejects_bad_input) {
    gguf_writer w;
    std::vector<uint8_t> data(64);
    const int64_t ne[] = {16}, ne5[] = {1, 1, 1, 1, 1}, ne_odd[] = {33}, ne_neg[] = {-1};
    EXPECT_THROW(w.set("", gguf_value::of_u32(1)), error);
    EXPECT_THROW(w.set("general.alignment", gguf_value::of_u32(3)), error);
    EXPECT_THROW(w.set("general.alignment", gguf_value::of_i32(32)), error);
    EXPECT_THROW(w.set_alignment(0), error);
    gguf_value nested = gguf_value::of_i32s({});
    nested.elem_type = gguf_type::array;
    EXPECT_THROW(w.set("n", nested), error);
    EXPECT_THROW(w.set("b", scalar(gguf_type::boolean, uint8_t(2))), error);
    w.add_tensor("a", uint32_t(type::f32), ne, data.data());
    EXPECT_THROW(w.add_tensor("a", uint32_t(type::f32), ne, data.data()), error);
    EXPECT_THROW(w.add_tensor(std::string(64, 'x'), uint32_t(type::f32), ne, data.data()), error);
    EXPECT_THROW(w.add_tensor("c", uint32_t(type::f32), ne5, data.data()), error);
    EXPECT_THROW(w.add_tensor("d", uint32_t(type::q8_0), ne_odd, data.data()), error);
    EXPECT_THROW(w.add_tensor("e", 1000, ne, data.data()), error);
    EXPECT_THROW(w.add_tensor("f", uint32_t(type::f32), ne_neg, data.data()), error);
    w.add_tensor(std::string(63, 'y'), uint32_t(type::f32), ne, data.data());
    EXPECT_EQ(gguf_file::from_memory(w.to_bytes()).tensors().size(), 2u);
}

// Tensors made while the file is written (add_tensor with a fill): the same bytes as the eager ones, fills called in
// order with buffers of the tensors' sizes, and a fill's exception leaves no file and no temporary.
TEST(gguf_write, tensors_filled_while_written) {
    const int64_t ne_a[] = {16, 3}, ne_b[] = {64}, ne_c[] = {32, 2};
    std::vector<float> a(48);
    std::vector<uint8_t> b(int64_t(64) / 32 * 34), c(tensor_bytes(type::q4_0, 64));
    for (size_t i = 0; i < a.size(); i++) a[i] = float(i) * 0.25f - 3.0f;
    for (size_t i = 0; i < b.size(); i++) b[i] = uint8_t(i * 7 + 1);
    for (size_t i = 0; i < c.size(); i++) c[i] = uint8_t(255 - i);
    gguf_writer eager, lazy;
    for (gguf_writer* w : {&eager, &lazy}) {
        w->set("general.name", gguf_value::of_string("lazy"));
        w->set_alignment(64);
    }
    eager.add_tensor("a", uint32_t(type::f32), ne_a, a.data());
    eager.add_tensor("b", uint32_t(type::q8_0), ne_b, b.data());
    eager.add_tensor("c", uint32_t(type::q4_0), ne_c, c.data());
    std::vector<std::string> order;
    const auto fill_from = [&](const char* name, const void* src, size_t n) {
        return [&order, name, src, n](std::span<uint8_t> out) {
            order.push_back(name);
            EXPECT_EQ(out.size(), n) << name;
            for (uint8_t x : out) EXPECT_EQ(x, 0) << name; // zeroed
            std::memcpy(out.data(), src, std::min(n, out.size()));
        };
    };
    lazy.add_tensor("a", uint32_t(type::f32), ne_a, fill_from("a", a.data(), a.size() * 4));
    lazy.add_tensor("b", uint32_t(type::q8_0), ne_b, b.data()); // eager and lazy mixed
    lazy.add_tensor("c", uint32_t(type::q4_0), ne_c, fill_from("c", c.data(), c.size()));
    EXPECT_TRUE(lazy.to_bytes() == eager.to_bytes());
    EXPECT_EQ(order, (std::vector<std::string>{"a", "c"}));

    temp_dir dir;
    const std::string path = (dir.path / "lazy.gguf").string();
    order.clear();
    lazy.write(path);
    EXPECT_EQ(order, (std::vector<std::string>{"a", "c"}));
    EXPECT_TRUE(file_bytes(path) == eager.to_bytes());
    EXPECT_TRUE(test::temps_of(path).empty());

    gguf_writer failing;
    failing.add_tensor("a", uint32_t(type::f32), ne_a, a.data());
    failing.add_tensor("x", uint32_t(type::f32), ne_b, [](std::span<uint8_t>) { throw error("fill failed"); });
    const std::string bad = (dir.path / "failed.gguf").string();
    EXPECT_THROW(failing.write(bad), error);
    EXPECT_FALSE(fs::exists(bad));
    EXPECT_TRUE(test::temps_of(bad).empty());
    EXPECT_THROW(failing.add_tensor("y", uint32_t(type::f32), ne_b, gguf_writer::fill_fn{}), error);
}

// Real files: reading and writing them back gives the same bytes.
TEST(gguf_round_trip, copy_of_real_files_is_byte_exact) {
    for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
        std::string path = test::data_dir() + "/vocab/" + name;
        if (!fs::exists(path)) GTEST_SKIP() << path << " not found";
        gguf_file f = gguf_file::open(path);
        EXPECT_EQ(f.path(), path);
        EXPECT_EQ(f.file_size(), fs::file_size(path));
        auto tokens = f.get_strings("tokenizer.ggml.tokens");
        ASSERT_TRUE(tokens.has_value()) << name;
        EXPECT_GT(tokens->size(), 1000u);
        EXPECT_TRUE(f.get_string("tokenizer.ggml.model").has_value());
        if (f.version() == 3) {
            EXPECT_TRUE(gguf_writer::copy_of(f).to_bytes() == file_bytes(path)) << name;
        }
    }
}

TEST(gguf_round_trip, copy_of_default_model_is_byte_exact) {
    TS_REQUIRE_MODEL();
    gguf_file f = gguf_file::open(test::model_path());
    ASSERT_GT(f.tensors().size(), 0u);
    EXPECT_TRUE(f.get_string("general.architecture").has_value());
    const gguf_tensor_info* emb = f.find_tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_GT(emb->n_elements(), 0);
    ASSERT_EQ(f.version(), 3u);
    EXPECT_TRUE(gguf_writer::copy_of(f).to_bytes() == file_bytes(test::model_path()));
}

// write(): goes through a temporary (atomic_file) and replaces PATH in one rename; nothing is left behind on failure.
TEST(gguf_write, atomic_replace_and_no_temp_left) {
    temp_dir dir;
    std::string path = (dir.path / "out.gguf").string();
    {
        std::FILE* old = std::fopen(path.c_str(), "wb");
        ASSERT_NE(old, nullptr);
        std::fputs("old contents", old);
        std::fclose(old);
    }
    gguf_file src = parse(small_valid_file());
    gguf_writer w = gguf_writer::copy_of(src);
    w.write(path);
    EXPECT_TRUE(test::temps_of(path).empty());
    EXPECT_EQ(file_bytes(path), small_valid_file().b);
    gguf_file back = gguf_file::open(path);
    EXPECT_EQ(back.get_string("general.name"), "tiny");
    EXPECT_EQ(back.find_tensor("a")->data[33], 133);

    // rename over a directory fails: the temp file is removed and the directory untouched
    std::string dir_target = (dir.path / "is_a_dir").string();
    fs::create_directories(dir_target + "/inner");
    EXPECT_THROW(w.write(dir_target), error);
    EXPECT_TRUE(test::temps_of(dir_target).empty());
    EXPECT_TRUE(fs::is_directory(dir_target + "/inner"));

    // a missing directory: nothing created
    std::string missing = (dir.path / "no" / "such" / "x.gguf").string();
    EXPECT_THROW(w.write(missing), error);
    EXPECT_FALSE(fs::exists(missing));
}

TEST(gguf_open, missing_file_and_directory) {
    try {
        gguf_file::open("/nonexistent/model.gguf");
        ADD_FAILURE() << "no error";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos) << e.what();
    }
    EXPECT_THROW(gguf_file::open("/tmp"), error);
    temp_dir dir;
    std::string empty = (dir.path / "empty.gguf").string();
    std::fclose(std::fopen(empty.c_str(), "wb"));
    EXPECT_THROW(gguf_file::open(empty), error);
}

// ---------------------------------------------------------------------------------------------------------------------
// Broken inputs

TEST(gguf_broken, truncated_at_every_byte) {
    const std::vector<uint8_t> full = small_valid_file().b;
    EXPECT_NO_THROW(gguf_file::from_memory(full));
    for (size_t n = 0; n < full.size(); n++) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + n);
        EXPECT_THROW(gguf_file::from_memory(std::move(cut), "test.gguf"), error) << "truncated to " << n << " bytes";
    }
    // the data section names the tensor and the sizes
    std::vector<uint8_t> cut(full.begin(), full.end() - 1);
    expect_error(cut, "tensor b: data runs past the end of the file (truncated?), expected at least");
}

TEST(gguf_broken, truncated_real_file_at_many_points) {
    std::string path = test::data_dir() + "/vocab/ggml-vocab-llama-spm.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << path << " not found";
    const std::vector<uint8_t> full = file_bytes(path);
    gguf_file f = gguf_file::from_memory(full);
    // no tensors: every cut before the last (unknown) padding run lies inside the metadata and must fail
    uint64_t meta_end = f.data_offset() - f.alignment();
    // every byte of the header and first records, then 100 points spread over the rest
    for (uint64_t n = 0; n < meta_end; n += (n < 512 ? 1 : meta_end / 100 + 1)) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + n);
        EXPECT_THROW(gguf_file::from_memory(std::move(cut)), error) << n;
    }
}

TEST(gguf_broken, bad_magic) {
    raw r = small_valid_file();
    r.b[0] = 'X';
    expect_error(r, "bad magic");
    expect_error(std::vector<uint8_t>{'G', 'G'}, "not a GGUF file");
}

TEST(gguf_broken, version_1) {
    expect_error(raw().header(0, 0, 1), "version 1 is not supported");
    expect_error(raw().header(0, 0, 4), "expected 2 or 3, got 4");
}

TEST(gguf_broken, byte_swapped) {
    expect_error(raw().header(0, 0, 0x03000000), "byte-swapped");
}

TEST(gguf_broken, absurd_counts) {
    expect_error(raw().header(0, uint64_t(1) << 60), "kv count too large");
    expect_error(raw().header(uint64_t(1) << 60, 0), "tensor count too large");
    expect_error(raw().header(0, 1).u64(uint64_t(1) << 62).u8('a').zeros(16), "string length past end of file");
    expect_error(raw().header(0, 1).str("k").u32(uint32_t(gguf_type::string)).u64(uint64_t(1) << 62).zeros(8),
                 "string length past end of file");
    for (gguf_type et : {gguf_type::u8, gguf_type::u64, gguf_type::string})
        expect_error(
            raw().header(0, 1).str("k").u32(uint32_t(gguf_type::array)).u32(uint32_t(et)).u64(~uint64_t(0)).u64(0),
            "array length too large");
    // a count that fits byte-wise is still bounded by the record size (8 bytes per string)
    expect_error(
        raw().header(0, 1).str("k").u32(uint32_t(gguf_type::array)).u32(uint32_t(gguf_type::string)).u64(3).u64(0),
        "array length too large");
}

TEST(gguf_broken, unknown_value_type) {
    expect_error(raw().header(0, 1).str("k").u32(13).u32(0), "unknown value type, expected 0..12, got 13");
    expect_error(raw().header(0, 1).str("k").u32(uint32_t(gguf_type::array)).u32(99).u64(0), "got 99");
}

TEST(gguf_broken, nested_array) {
    expect_error(raw().header(0, 1).str("k").u32(uint32_t(gguf_type::array)).u32(uint32_t(gguf_type::array)).u64(0),
                 "nested arrays");
}

TEST(gguf_broken, bad_bool) {
    expect_error(raw().header(0, 1).str("k").u32(uint32_t(gguf_type::boolean)).u8(2), "invalid bool");
    expect_error(raw()
                     .header(0, 1)
                     .str("k")
                     .u32(uint32_t(gguf_type::array))
                     .u32(uint32_t(gguf_type::boolean))
                     .u64(3)
                     .u8(1)
                     .u8(0)
                     .u8(7),
                 "invalid bool, expected 0 or 1, got 7");
}

TEST(gguf_broken, empty_and_duplicate_key) {
    expect_error(raw().header(0, 1).kv_u32("", 1), "empty key");
    expect_error(raw().header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2), "duplicate key 'a.b'");
}

TEST(gguf_broken, bad_alignment) {
    expect_error(raw().header(0, 1).kv_u32("general.alignment", 0), "power of two, got 0");
    expect_error(raw().header(0, 1).kv_u32("general.alignment", 3), "power of two, got 3");
    expect_error(raw().header(0, 1).str("general.alignment").u32(uint32_t(gguf_type::u64)).u64(32),
                 "general.alignment: expected type u32, got u64");
    expect_error(raw().header(0, 1).str("general.alignment").u32(uint32_t(gguf_type::string)).str("32"),
                 "expected type u32, got str");
}

namespace {
// A file with the given tensor infos followed by `data_bytes` of data.
raw with_tensors(const std::vector<std::function<void(raw&)>>& infos, size_t data_bytes) {
    raw r;
    r.header(infos.size(), 0);
    for (const auto& f : infos) f(r);
    r.pad(32).zeros(data_bytes);
    return r;
}
auto info(std::string name, std::vector<uint64_t> ne, uint32_t type_id, uint64_t offset) {
    return [=](raw& r) { r.tensor(name, ne, type_id, offset); };
}
} // namespace

TEST(gguf_broken, tensor_infos) {
    expect_error(with_tensors({info(std::string(64, 'n'), {4}, 0, 0)}, 64),
                 "name too long, expected < 64 bytes, got 64");
    EXPECT_NO_THROW(parse(with_tensors({info(std::string(63, 'n'), {4}, 0, 0)}, 64)));
    expect_error(with_tensors({info("a", {4}, 0, 0), info("a", {4}, 0, 32)}, 64), "duplicate tensor 'a'");
    expect_error(with_tensors({info("a", {}, 0, 0)}, 64), "tensor a: n_dims, expected 1..4, got 0");
    expect_error(with_tensors({info("a", {1, 1, 1, 1, 1}, 0, 0)}, 64), "n_dims, expected 1..4, got 5");
    expect_error(with_tensors({info("a", {4}, 31, 0)}, 64), "tensor a: unknown type id 31");
    expect_error(with_tensors({info("a", {4}, 1000000, 0)}, 64), "tensor a: unknown type id 1000000");
    expect_error(with_tensors({info("a", {33}, uint32_t(type::q8_0), 0)}, 64), "multiple of 32, got 33");
    expect_error(with_tensors({info("a", {4}, 0, 16)}, 64), "offset not aligned, expected a multiple of 32, got 16");
    expect_error(with_tensors({info("a", {uint64_t(1) << 63}, 0, 0)}, 64), "ne[0] out of range");
    expect_error(with_tensors({info("a", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0)}, 64), "overflows int64");
    expect_error(with_tensors({info("a", {uint64_t(1) << 62}, 0, 0)}, 64), "byte size overflows");
    // known but not computable types are fine to read
    EXPECT_NO_THROW(parse(with_tensors({info("k", {256}, uint32_t(type::q6_k), 0)}, 224)));
}

TEST(gguf_broken, tensor_data) {
    expect_error(with_tensors({info("a", {4}, 0, 0), info("big", {16}, 0, 32)}, 64),
                 "tensor big: data runs past the end of the file (truncated?), expected at least");
    expect_error(with_tensors({info("far", {4}, 0, uint64_t(1) << 40)}, 64), "tensor far: data runs past");
    expect_error(with_tensors({info("wrap", {4}, 0, ~uint64_t(31))}, 64), "overflows");
    expect_error(with_tensors({info("a", {16}, 0, 0), info("b", {4}, 0, 32)}, 128), "tensor b overlaps tensor a");
    expect_error(with_tensors({info("a", {4}, 0, 0), info("b", {4}, 0, 0)}, 64), "overlaps");
    // zero-sized tensors overlap nothing
    EXPECT_NO_THROW(parse(with_tensors({info("a", {0}, 0, 0), info("b", {16}, 0, 0), info("c", {0}, 0, 32)}, 64)));
    // tensors need not be in offset order
    EXPECT_NO_THROW(parse(with_tensors({info("a", {4}, 0, 32), info("b", {4}, 0, 0)}, 64)));
}

// Flipping any single byte of a valid file either parses or throws tessera::error (the sanitizer build checks reads).
TEST(gguf_broken, single_byte_corruptions_never_crash) {
    const std::vector<uint8_t> full = small_valid_file().b;
    for (size_t i = 0; i < full.size(); i++) {
        for (uint8_t x : {uint8_t(0x00), uint8_t(0xff), uint8_t(0x80), uint8_t(0x01)}) {
            std::vector<uint8_t> b = full;
            b[i] ^= x;
            try {
                gguf_file::from_memory(std::move(b));
            } catch (const error&) {
            }
        }
    }
}

// Random multi-byte corruptions of a valid file (seeded): parse or throw tessera::error, nothing else.
TEST(gguf_broken, random_corruptions_never_crash) {
    const std::vector<uint8_t> full = small_valid_file().b;
    std::mt19937 rng(1234);
    size_t n_ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        std::vector<uint8_t> b = full;
        int n_flips = 1 + int(rng() % 4);
        for (int k = 0; k < n_flips; k++) b[rng() % b.size()] = uint8_t(rng());
        if (rng() % 4 == 0) b.resize(rng() % b.size());
        try {
            gguf_file f = gguf_file::from_memory(std::move(b));
            unsigned sum = 0; // touch every tensor byte: the sanitizer build catches a range outside the buffer
            for (const auto& t : f.tensors())
                for (uint64_t i = 0; i < t.size; i++) sum += t.data[i];
            n_ok += sum != ~0u;
        } catch (const error&) {
        }
    }
    EXPECT_GT(n_ok, 0u); // some corruptions (in string bytes, tensor data) leave a valid file
}

// ---------------------------------------------------------------------------------------------------------------------
// Hardening (#6)

// A cut at each section boundary of a file (and one byte either side) names the section that is incomplete. The
// tensor count is checked against the bytes left first (32 per tensor info), so a cut in the metadata of a file with
// tensors is reported as that; the same metadata without tensors shows each record's own message.
TEST(gguf_broken, truncated_at_each_section_boundary) {
    auto build = [](uint64_t n_tensors, size_t* kv0_end, size_t* kvs_end) {
        raw r;
        r.header(n_tensors, 2);
        r.kv_u32("general.alignment", 32);
        *kv0_end = r.b.size();
        r.str("general.name").u32(uint32_t(gguf_type::string)).str("tiny");
        *kvs_end = r.b.size();
        return r;
    };
    size_t kv0_end = 0, kvs_end = 0;
    const raw meta = build(0, &kv0_end, &kvs_end);
    raw r = build(2, &kv0_end, &kvs_end);
    const size_t header_end = 24;
    r.tensor("a", {32}, 8, 0);
    const size_t info0_end = r.b.size();
    r.tensor("b", {4, 2}, 0, 64);
    const size_t infos_end = r.b.size();
    r.pad(32);
    const size_t data_start = r.b.size();
    r.zeros(34).zeros(30).zeros(32);
    ASSERT_NO_THROW(parse(r));
    ASSERT_NO_THROW(parse(meta));
    ASSERT_GT(data_start, infos_end); // this file has alignment padding to cut into

    const struct {
        const raw& file;
        size_t at;
        const char* message;
    } cuts[] = {
        {r, 0, "not a GGUF file"},
        {r, 3, "not a GGUF file"},
        {r, 4, "truncated file: version at byte 4"},
        {r, 8, "truncated file: tensor count at byte 8"},
        {r, 16, "tensor count too large for the 0 bytes left (truncated or corrupt file), expected at most 0, got 2"},
        {meta, 16, "truncated file: kv count at byte 16"},
        {meta, header_end - 1, "truncated file: kv count"},
        {meta, header_end, "kv count too large for the 0 bytes left"},
        {meta, header_end + 8, "kv count too large for the 8 bytes left"},
        {meta, header_end + 28, "truncated file: value type at byte 49"},
        {meta, kv0_end - 1, "truncated file: key 'general.alignment': value"},
        {meta, kv0_end, "truncated file: key of kv 1"},
        {meta, kvs_end - 1, "key 'general.name': string"},
        {r, kv0_end, "tensor count too large"},
        {r, kvs_end, "truncated file: name of tensor 0"},
        {r, kvs_end + 10, "truncated file: tensor a at byte"},
        {r, info0_end, "truncated file: name of tensor 1"},
        {r, infos_end - 1, "truncated file: tensor b"},
        {r, infos_end, "tensor a: data runs past the end of the file"},      // no padding at all
        {r, data_start - 1, "tensor a: data runs past the end of the file"}, // part of the padding
        {r, data_start, "tensor a: data runs past the end of the file"},
        {r, data_start + 33, "tensor a: data runs past the end of the file"},
        {r, data_start + 64, "tensor b: data runs past the end of the file"},
        {r, r.b.size() - 1, "tensor b: data runs past the end of the file (truncated?), expected at least 288 bytes, "
                            "got 287"},
    };
    for (const auto& c : cuts) {
        SCOPED_TRACE("cut at byte " + std::to_string(c.at));
        expect_error(std::vector<uint8_t>(c.file.b.begin(), c.file.b.begin() + long(c.at)), c.message);
    }
}

// Counts and sizes that no file of this size could hold are refused before anything is allocated (the sanitizer build
// would report an allocation of 2^60 elements), with the count named.
TEST(gguf_broken, absurd_sizes_are_refused_before_allocating) {
    // 2^59 strings of at least 8 bytes each in a file of 60 bytes
    expect_error(raw()
                     .header(0, 1)
                     .str("tokenizer.ggml.tokens")
                     .u32(uint32_t(gguf_type::array))
                     .u32(uint32_t(gguf_type::string))
                     .u64(uint64_t(1) << 59)
                     .zeros(16),
                 "key 'tokenizer.ggml.tokens': array length too large for the 16 bytes left");
    // four dimensions of 2^16: 2^64 elements
    expect_error(with_tensors({info("t", {1 << 16, 1 << 16, 1 << 16, 1 << 16}, 0, 0)}, 64), "overflows int64");
    // 2^40 f32 elements fit int64 but not this file
    expect_error(with_tensors({info("t", {uint64_t(1) << 20, uint64_t(1) << 20}, 0, 0)}, 64),
                 "tensor t: data runs past the end of the file");
    // a tensor count bounded by the 32 bytes a tensor info takes at least
    expect_error(raw().header(3, 0).zeros(72), "tensor count too large for the 80 bytes left");
}

// GGUF strings are bytes: a key or value that is not UTF-8 is kept exactly, and a vocabulary whose tokens are not
// UTF-8 still loads and tokenizes.
TEST(gguf_broken, bad_utf8_in_metadata_is_kept_as_bytes) {
    const std::string bad = "caf\xc3 \xff\xfe \xed\xa0\x80 \xf4\x90\x80\x80";
    raw r;
    r.header(0, 2);
    r.str("general.name").u32(uint32_t(gguf_type::string)).str(bad);
    r.str("x.\xff").u32(uint32_t(gguf_type::u32)).u32(5);
    const gguf_file f = parse(r);
    EXPECT_EQ(f.get_string("general.name"), bad);
    EXPECT_EQ(f.get_int("x.\xff"), 5);
}

// A file truncated on disk while mapped: reading the lost pages ends the process with one line naming the file
// (SIGBUS caught, status 1) instead of a bus error.
TEST(gguf_open_death, truncated_while_mapped_exits_with_one_line) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    temp_dir dir;
    const std::string path = (dir.path / "shrinks.gguf").string();
    std::vector<uint8_t> data(1 << 20);
    for (size_t i = 0; i < data.size(); i++) data[i] = uint8_t(i * 7);
    gguf_writer w;
    const int64_t ne[1] = {int64_t(data.size() / 4)};
    w.add_tensor("big", uint32_t(type::f32), ne, data.data());
    w.write(path);
    auto shrink_and_read = [&] {
        gguf_file f = gguf_file::open(path);
        if (::truncate(path.c_str(), 4096) != 0) std::abort();
        // the mapping outlives the name: remove it now, since this process ends in the SIGBUS handler's _exit (the
        // threadsafe style runs the test again in a child, with a directory of its own)
        fs::remove_all(dir.path);
        const gguf_tensor_info* t = f.find_tensor("big");
        unsigned sum = 0;
        for (uint64_t i = 0; i < t->size; i += 4096) sum += t->data[i];
        std::fprintf(stderr, "read everything (%u)\n", sum);
        std::exit(0);
    };
    EXPECT_EXIT(shrink_and_read(), ::testing::ExitedWithCode(1),
                "error: .*shrinks.gguf: the file was truncated or changed on disk while in use");
}

// ---------------------------------------------------------------------------------------------------------------------
// atomic_file: the temporary file + rename every writer goes through (gguf_writer::write, the KL-divergence base file,
// chat /save). Both ways of making the temporary are tested: O_TMPFILE (no name while written) and, with
// TESSERA_O_TMPFILE=0, a unique name from the start (filesystems without O_TMPFILE).

namespace {

size_t entries_in(const fs::path& dir) {
    return size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}));
}

// After a round: PATH holds `contents`, no temporary of it is left and nothing else is in DIR; PATH is then removed
// for the next round.
void expect_only_committed(const fs::path& dir, const std::string& path, const std::string& contents) {
    EXPECT_EQ(tessera::test::read_file(path), contents);
    EXPECT_TRUE(tessera::test::temps_of(path).empty());
    EXPECT_EQ(entries_in(dir), 1u);
    fs::remove(path);
}

// TESSERA_O_TMPFILE=0 while alive (or unset, for the O_TMPFILE pass).
struct temp_mode {
    explicit temp_mode(bool named) {
        if (named)
            ::setenv("TESSERA_O_TMPFILE", "0", 1);
        else
            ::unsetenv("TESSERA_O_TMPFILE");
    }
    ~temp_mode() { ::unsetenv("TESSERA_O_TMPFILE"); }
};

bool o_tmpfile_works(const fs::path& dir) {
    temp_mode m(false);
    return atomic_file((dir / "probe").string()).nameless();
}

void put_file(const std::string& path, const std::string& contents) {
    std::ofstream(path, std::ios::binary) << contents;
}

// Waits up to 60 s for one byte on `fd`; false on timeout or end of file.
bool wait_for_byte(int fd) {
    pollfd p{fd, POLLIN, 0};
    char c;
    return ::poll(&p, 1, 60000) == 1 && ::read(fd, &c, 1) == 1;
}

// A child process that runs `body`; body calls its argument, `ready`, once it has set things up (a write under way, a
// lock taken), and ready never returns: the child then waits for the signal that ends it, with body's objects alive.
// ready (the result's): the parent saw the child get there within 60 s. pid -1: no pipe or no fork.
struct paused_child {
    pid_t pid = -1;
    bool ready = false;
};
paused_child fork_paused(const std::function<void(const std::function<void()>& ready)>& body) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(pipefd[0]);
        body([fd = pipefd[1]] {
            (void)!::write(fd, "r", 1);
            for (;;) ::pause();
        });
        ::_exit(1); // body returned without getting ready
    }
    ::close(pipefd[1]);
    const bool ready = pid > 0 && wait_for_byte(pipefd[0]);
    ::close(pipefd[0]);
    return {pid, ready};
}

} // namespace

TEST(atomic_file, nameless_while_written_then_replaces_in_one_rename) {
    temp_dir dir;
    if (!o_tmpfile_works(dir.path)) GTEST_SKIP() << "no O_TMPFILE in " << dir.path;
    const std::string path = (dir.path / "out.bin").string();
    put_file(path, "old contents");
    {
        atomic_file f(path);
        EXPECT_TRUE(f.nameless());
        f.write("new contents");
        EXPECT_EQ(entries_in(dir.path), 1u); // the temporary has no name
        EXPECT_EQ(test::read_file(path), "old contents");
        f.commit();
        EXPECT_EQ(test::read_file(path), "new contents");
    }
    EXPECT_EQ(entries_in(dir.path), 1u);
    {
        atomic_file f(path); // destroyed without commit(): discarded
        f.write("partial");
    }
    EXPECT_EQ(test::read_file(path), "new contents");
    EXPECT_EQ(entries_in(dir.path), 1u);
}

TEST(atomic_file, named_temporaries_are_unique_and_removed) {
    temp_dir dir;
    temp_mode named(true);
    const std::string path = (dir.path / "out.bin").string();
    {
        atomic_file a(path), b(path);
        EXPECT_FALSE(a.nameless());
        a.write("a");
        b.write("b");
        const std::vector<std::string> t = test::temps_of(path);
        ASSERT_EQ(t.size(), 2u);
        const std::string prefix = "out.bin.tmp." + std::to_string(::getpid()) + ".";
        for (const std::string& n : t) {
            EXPECT_EQ(n.rfind(prefix, 0), 0u) << n;
            EXPECT_EQ(n.size(), prefix.size() + 16) << n; // 16 random hex digits
        }
        EXPECT_NE(t[0], t[1]);
    }
    EXPECT_TRUE(test::temps_of(path).empty());
    EXPECT_FALSE(fs::exists(path));
    {
        atomic_file f(path);
        f.write("done");
        f.commit();
    }
    EXPECT_EQ(test::read_file(path), "done");
    EXPECT_EQ(entries_in(dir.path), 1u);
    // relative paths: the temporary goes into the current directory
    const fs::path cwd = fs::current_path();
    fs::current_path(dir.path);
    {
        atomic_file f("rel.bin");
        f.write("rel");
        EXPECT_EQ(test::temps_of((dir.path / "rel.bin").string()).size(), 1u);
        f.commit();
    }
    fs::current_path(cwd);
    EXPECT_EQ(test::read_file((dir.path / "rel.bin").string()), "rel");
    EXPECT_EQ(entries_in(dir.path), 2u);
}

TEST(atomic_file, errors_name_the_file_and_leave_nothing) {
    temp_dir dir;
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        temp_mode m(named);
        const std::string missing = (dir.path / "no" / "such" / "x.bin").string();
        try {
            atomic_file f(missing);
            ADD_FAILURE() << "no error for a missing directory";
        } catch (const error& e) {
            EXPECT_EQ(std::string(e.what()), missing + ": cannot create a temporary file in " +
                                                 (dir.path / "no" / "such").string() + ": No such file or directory");
        }
        // rename over a directory fails: the temporary is removed and the directory untouched
        const std::string target = (dir.path / "is_a_dir").string();
        fs::create_directories(target + "/inner");
        try {
            atomic_file f(target);
            f.write("x");
            f.commit();
            ADD_FAILURE() << "no error renaming over a directory";
        } catch (const error& e) {
            const std::string w = e.what();
            EXPECT_EQ(w.rfind(target + ": cannot rename " + target + ".tmp.", 0), 0u) << w;
            EXPECT_NE(w.find(" over it: Is a directory (temporary file removed; " + target + " left as it was)"),
                      std::string::npos)
                << w;
        }
        EXPECT_TRUE(test::temps_of(target).empty());
        EXPECT_TRUE(fs::is_directory(target + "/inner"));
    }
}

// A full disk (RLIMIT_FSIZE, SIGXFSZ ignored: write() fails with EFBIG as with ENOSPC), in a child process.
TEST(atomic_file, write_failure_removes_the_temporary) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        put_file(path, "old contents");
        temp_mode m(named);
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::signal(SIGXFSZ, SIG_IGN);
            const rlimit lim{16384, 16384};
            ::setrlimit(RLIMIT_FSIZE, &lim);
            const std::string big(65536, 'x');
            try {
                atomic_file f(path);
                f.write(big);
                f.commit();
                ::_exit(2);
            } catch (const error& e) {
                const std::string want =
                    path + ": write failed: File too large (temporary file removed; " + path + " left as it was)";
                ::_exit(e.what() == want ? 0 : 3);
            }
        }
        int st = 0;
        ASSERT_EQ(::waitpid(pid, &st, 0), pid);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
        EXPECT_EQ(test::read_file(path), "old contents");
        EXPECT_TRUE(test::temps_of(path).empty());
    }
}

TEST(atomic_file, final_mode_respects_umask) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    const mode_t saved = ::umask(022);
    for (bool named : {false, true}) {
        temp_mode m(named);
        for (mode_t um : {mode_t(022), mode_t(027), mode_t(077), mode_t(002), mode_t(0)}) {
            ::umask(um);
            atomic_file f(path);
            f.write("x");
            f.commit();
            struct stat sb {};
            ASSERT_EQ(::stat(path.c_str(), &sb), 0);
            EXPECT_EQ(sb.st_mode & 07777, 0666 & ~um) << (named ? "named" : "O_TMPFILE") << ", umask 0" << std::oct
                                                      << um;
        }
    }
    ::umask(saved);
}

// Writers racing on one PATH (threads here; processes in test_cli): PATH is always one complete file, never a mix,
// and no temporary is left. A reader checks every version it sees while they run.
TEST(atomic_file, concurrent_writers_never_mix) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    constexpr int n_threads = 4, n_rounds = 25;
    constexpr size_t size = 256 * 1024, piece = 4096;
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        temp_mode m(named);
        std::atomic<bool> done{false};
        std::atomic<int> seen{0}, bad{0};
        std::mutex failures_mutex;
        std::vector<std::string> failures;
        std::thread reader([&] {
            while (!done.load()) {
                const std::string s = test::read_file(path);
                if (s.empty()) continue; // not there yet
                seen++;
                if (s.size() != size || s.find_first_not_of(s[0]) != std::string::npos) bad++;
            }
        });
        std::vector<std::thread> writers;
        for (int t = 0; t < n_threads; t++)
            writers.emplace_back([&, t] {
                for (int r = 0; r < n_rounds; r++) {
                    const std::string block(piece, char('A' + t * n_rounds + r)); // every file one byte value
                    try {
                        atomic_file f(path);
                        for (size_t done_bytes = 0; done_bytes < size; done_bytes += piece) {
                            f.write(block);
                            if (done_bytes % (16 * piece) == 0) std::this_thread::yield();
                        }
                        f.commit();
                    } catch (const error& e) {
                        const std::lock_guard<std::mutex> lock(failures_mutex);
                        failures.push_back(e.what());
                    }
                }
            });
        for (auto& w : writers) w.join();
        done = true;
        reader.join();
        EXPECT_TRUE(failures.empty()) << failures.size() << " writes failed, e.g. " << failures.front();
        EXPECT_EQ(bad.load(), 0) << "of " << seen.load() << " reads";
        const std::string s = test::read_file(path);
        EXPECT_EQ(s.size(), size);
        EXPECT_EQ(s.find_first_not_of(s[0]), std::string::npos);
        EXPECT_TRUE(test::temps_of(path).empty());
        fs::remove(path);
    }
}

// The same through gguf_writer::write: two different models written to one PATH at once, many times.
TEST(gguf_write, concurrent_writes_leave_one_complete_file) {
    temp_dir dir;
    const std::string path = (dir.path / "out.gguf").string();
    std::vector<float> a(64 * 1024, 1.0f), b(96 * 1024, 2.0f);
    gguf_writer wa, wb;
    wa.set("general.name", gguf_value::of_string("a"));
    wb.set("general.name", gguf_value::of_string("b"));
    const int64_t na[1] = {int64_t(a.size())}, nb[1] = {int64_t(b.size())};
    wa.add_tensor("t", uint32_t(type::f32), na, a.data());
    wb.add_tensor("t", uint32_t(type::f32), nb, b.data());
    const std::vector<uint8_t> ba = wa.to_bytes(), bb = wb.to_bytes();
    for (int round = 0; round < 50; round++) {
        std::string err_a, err_b;
        auto write = [&](const gguf_writer& w, std::string& err) {
            try {
                w.write(path);
            } catch (const error& e) {
                err = e.what();
            }
        };
        std::thread ta(write, std::cref(wa), std::ref(err_a)), tb(write, std::cref(wb), std::ref(err_b));
        ta.join();
        tb.join();
        ASSERT_EQ(err_a + err_b, "") << "round " << round;
        const std::vector<uint8_t> got = file_bytes(path);
        ASSERT_TRUE(got == ba || got == bb) << "round " << round << ": " << got.size() << " bytes, a mix";
        ASSERT_TRUE(test::temps_of(path).empty());
    }
}

// SIGKILL in the middle of writing: no handler runs, and still the old file is intact. With O_TMPFILE nothing else is
// there (the temporary has no name); a named temporary (TESSERA_O_TMPFILE=0) stays behind, and the next write to the
// same PATH removes it (its dead writer's flock is gone). A child process writes half, tells the parent, and waits
// to be killed.
TEST(atomic_file, sigkill_mid_write_leaves_old_file_and_no_temporary) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    const bool have_o_tmpfile = o_tmpfile_works(dir.path);
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        if (!named && !have_o_tmpfile) continue;
        fs::remove(dir.path / "probe");
        ASSERT_EQ(entries_in(dir.path), 0u);
        put_file(path, "old contents");
        temp_mode m(named);
        const paused_child child = fork_paused([&](const std::function<void()>& ready) {
            atomic_file f(path);
            f.write(std::string(1 << 20, 'n'));
            ready();
        });
        const pid_t pid = child.pid;
        ASSERT_GT(pid, 0);
        EXPECT_TRUE(child.ready) << "the child never wrote";
        const size_t temps_while_written = test::temps_of(path).size();
        ::kill(pid, SIGKILL);
        int st = 0;
        ASSERT_EQ(::waitpid(pid, &st, 0), pid);
        EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
        EXPECT_EQ(test::read_file(path), "old contents");
        const std::vector<std::string> left = test::temps_of(path);
        if (named) {
            EXPECT_EQ(temps_while_written, 1u);
            ASSERT_EQ(left.size(), 1u); // the dead writer's
            EXPECT_EQ(left[0].rfind("out.bin.tmp." + std::to_string(pid) + ".", 0), 0u) << left[0];
            EXPECT_EQ(fs::file_size(dir.path / left[0]), size_t(1) << 20);
        } else {
            EXPECT_EQ(temps_while_written, 0u); // mid-write: only the old file has a name
            EXPECT_TRUE(left.empty());
        }
        EXPECT_EQ(entries_in(dir.path), 1 + left.size());
        // the next write to PATH (here with the same kind of temporary) cleans up
        {
            atomic_file f(path);
            EXPECT_EQ(test::temps_of(path).size(), named ? 1u : 0u); // its own only
            for (const std::string& n : left) EXPECT_FALSE(fs::exists(dir.path / n)) << n;
            f.write("new contents");
            f.commit();
        }
        expect_only_committed(dir.path, path, "new contents");
    }
}

// temp_file_signal_guard with named temporaries (the case where there is something to remove): SIGINT, SIGTERM and
// SIGHUP remove it and end the process with that signal, whether the handler runs on the writing thread or on
// another one (the writer's thread blocks the signals, a second thread takes them). An ignored SIGHUP (nohup) stays
// ignored.
TEST(atomic_file, signal_guard_removes_named_temporaries) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    temp_mode named(true);
    struct cas {
        int sig;
        bool other_thread, hup_ignored;
    };
    for (const cas c : {cas{SIGINT, false, false}, cas{SIGTERM, false, false}, cas{SIGHUP, false, false},
                        cas{SIGINT, true, false}, cas{SIGTERM, true, false}, cas{SIGHUP, false, true}}) {
        SCOPED_TRACE(::testing::Message() << "signal " << c.sig << (c.other_thread ? ", other thread" : "")
                                          << (c.hup_ignored ? ", SIGHUP ignored" : ""));
        put_file(path, "old contents");
        const paused_child child = fork_paused([&](const std::function<void()>& ready) {
            if (c.hup_ignored) ::signal(SIGHUP, SIG_IGN);
            temp_file_signal_guard guard;
            if (c.other_thread) {
                sigset_t s;
                sigemptyset(&s);
                for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&s, sig);
                ::pthread_sigmask(SIG_BLOCK, &s, nullptr);
                std::thread([s] {
                    ::pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
                    for (;;) ::pause();
                }).detach();
            }
            atomic_file f(path);
            f.write(std::string(1 << 20, 'n'));
            ready();
        });
        const pid_t pid = child.pid;
        ASSERT_GT(pid, 0);
        EXPECT_TRUE(child.ready) << "the child never wrote";
        EXPECT_EQ(test::temps_of(path).size(), 1u); // named while written
        ::kill(pid, c.sig);
        if (c.hup_ignored) {
            ::usleep(200000);
            EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << "an ignored SIGHUP ended the process";
            ::kill(pid, SIGTERM);
        }
        int st = 0;
        ASSERT_EQ(::waitpid(pid, &st, 0), pid);
        const int want = c.hup_ignored ? SIGTERM : c.sig;
        EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == want) << "status " << st;
        EXPECT_EQ(test::read_file(path), "old contents");
        EXPECT_TRUE(test::temps_of(path).empty()) << test::temps_of(path).front();
    }
}

// ---- stale temporaries: a writer holds flock(LOCK_EX) on its temporary; a new atomic_file for PATH removes PATH's
// temporaries nobody holds (writers killed by SIGKILL in the named mode, or between linkat and rename) ----

namespace {

// PATH.tmp.<pid>.<hex>, the name of a writer's temporary.
std::string temp_of(const std::string& path, long pid, const std::string& hex) {
    return path + ".tmp." + std::to_string(pid) + "." + hex;
}

} // namespace

// Temporaries whose writer is gone (no process holds their lock; one with this process's pid, one with another) are
// removed by the constructor of the next atomic_file for the same PATH, before it writes anything, in both modes.
TEST(atomic_file, stale_temporary_without_lock_holder_is_removed) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    const bool have_o_tmpfile = o_tmpfile_works(dir.path);
    fs::remove(dir.path / "probe");
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        if (!named && !have_o_tmpfile) continue;
        temp_mode m(named);
        put_file(path, "old contents");
        const std::string stale_a = temp_of(path, 4194303, "0123456789abcdef");
        const std::string stale_b = temp_of(path, ::getpid(), "fedcba9876543210");
        put_file(stale_a, "half of a file");
        put_file(stale_b, "");
        ASSERT_EQ(test::temps_of(path).size(), 2u);
        {
            atomic_file f(path);
            EXPECT_FALSE(fs::exists(stale_a));
            EXPECT_FALSE(fs::exists(stale_b));
            EXPECT_EQ(test::temps_of(path).size(), named ? 1u : 0u); // the new writer's own only
            EXPECT_EQ(test::read_file(path), "old contents");
            f.write("new contents");
            f.commit();
        }
        EXPECT_EQ(test::read_file(path), "new contents");
        EXPECT_EQ(entries_in(dir.path), 1u);
        // also when the new writer is then discarded without commit()
        put_file(stale_a, "x");
        { atomic_file f(path); }
        EXPECT_FALSE(fs::exists(stale_a));
        EXPECT_EQ(entries_in(dir.path), 1u);
        EXPECT_EQ(test::read_file(path), "new contents");
    }
}

// A temporary whose flock is held by another open file description is a live writer's: left alone, whoever holds it
// (an open() + flock in this process, a child process, another atomic_file of this process). Once the holder is gone
// (closed, killed), the next writer removes it.
TEST(atomic_file, locked_temporary_is_left_alone) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        temp_mode m(named);
        auto write_path = [&](const std::string& contents) {
            atomic_file f(path);
            f.write(contents);
            f.commit();
        };
        // held by a separate open file description of this process
        const std::string held = temp_of(path, 31337, "00000000deadbeef");
        put_file(held, "live data");
        const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
        write_path("one");
        EXPECT_EQ(test::read_file(held), "live data");
        write_path("two");
        EXPECT_EQ(test::read_file(held), "live data");
        ::close(fd); // the holder is gone
        write_path("three");
        EXPECT_FALSE(fs::exists(held));
        EXPECT_EQ(test::read_file(path), "three");

        // held by a child process (its own open + flock), until it is killed
        const std::string child_held = temp_of(path, 4242, "0123456789abcdef");
        put_file(child_held, "child data");
        const paused_child child = fork_paused([&](const std::function<void()>& ready) {
            const int cfd = ::open(child_held.c_str(), O_RDONLY | O_CLOEXEC);
            if (cfd >= 0 && ::flock(cfd, LOCK_EX) == 0) ready();
        });
        const pid_t pid = child.pid;
        ASSERT_GT(pid, 0);
        ASSERT_TRUE(child.ready) << "the child never locked";
        write_path("four");
        EXPECT_EQ(test::read_file(child_held), "child data");
        ::kill(pid, SIGKILL);
        int st = 0;
        ASSERT_EQ(::waitpid(pid, &st, 0), pid);
        write_path("five");
        EXPECT_FALSE(fs::exists(child_held));

        // a live atomic_file of this process (named: its temporary has a name while written) survives a second
        // writer's constructor and commits
        {
            atomic_file a(path);
            a.write("first");
            const std::vector<std::string> before = test::temps_of(path);
            EXPECT_EQ(before.size(), named ? 1u : 0u);
            write_path("second");
            for (const std::string& n : before) EXPECT_TRUE(fs::exists(dir.path / n)) << n;
            a.commit();
        }
        expect_only_committed(dir.path, path, "first");
    }
}

// Only regular files named exactly BASE.tmp.<pid>.<16 lowercase hex> are candidates: other basenames, bad pids,
// wrong hex lengths or digits, longer names, a directory, symlinks (to a file and dangling) and a FIFO with a matching
// name are all untouched (and the FIFO does not block the scan); a real stale temporary beside them is removed.
TEST(atomic_file, similar_names_are_untouched) {
    temp_dir dir;
    const std::string path = (dir.path / "out.bin").string();
    const fs::path outside = dir.path / "outside";
    fs::create_directories(outside);
    const std::string victim = (outside / "victim").string();
    const std::vector<std::string> files = {
        "other.bin.tmp.123.0123456789abcdef",       // other basename
        "xout.bin.tmp.123.0123456789abcdef",        // basename with a prefix
        "out.bi.tmp.123.0123456789abcdef",          // shorter basename
        "out.bin.x.tmp.123.0123456789abcdef",       // longer basename
        "out.bin.tmp.123.0123456789abcde",          // 15 hex digits
        "out.bin.tmp.123.0123456789abcdef0",        // 17 hex digits
        "out.bin.tmp.123.0123456789abcdeg",         // not hex
        "out.bin.tmp.123.0123456789ABCDEF",         // upper case (temp_name writes lower case)
        "out.bin.tmp.123.0123456789abcdef.bak",     // something after it
        "out.bin.tmp..0123456789abcdef",            // no pid
        "out.bin.tmp.12a.0123456789abcdef",         // pid not decimal
        "out.bin.tmp.0123.0123456789abcdef",        // pid with a leading zero
        "out.bin.tmp.12345678901.0123456789abcdef", // pid of 11 digits
        "out.bin.tmp.-1.0123456789abcdef",          // negative pid
        "out.bin.tmp.123_0123456789abcdef",         // other separator
        "out.bin.tmp",
        "out.bin.tmp.123",
        "out.bin.tmp.123.",
        "out.bin.TMP.123.0123456789abcdef",
    };
    const std::string dir_name = "out.bin.tmp.124.0123456789abcdef";      // a directory
    const std::string link_name = "out.bin.tmp.125.0123456789abcdef";     // a symlink to a file outside
    const std::string dangling_name = "out.bin.tmp.126.0123456789abcdef"; // a dangling symlink
    const std::string fifo_name = "out.bin.tmp.127.0123456789abcdef";     // a FIFO
    const std::string stale_name = "out.bin.tmp.128.0123456789abcdef";    // a real stale temporary
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        temp_mode m(named);
        for (const std::string& n : files) put_file((dir.path / n).string(), n);
        fs::create_directories(dir.path / dir_name / "inner");
        put_file((dir.path / dir_name / "inner" / "f").string(), "inner");
        put_file(victim, "victim");
        fs::create_symlink(victim, dir.path / link_name);
        fs::create_symlink(dir.path / "nowhere", dir.path / dangling_name);
        ASSERT_EQ(::mkfifo((dir.path / fifo_name).c_str(), 0600), 0);
        put_file((dir.path / stale_name).string(), "stale");
        const size_t before = entries_in(dir.path);
        {
            atomic_file f(path);
            f.write("new");
            f.commit();
        }
        EXPECT_EQ(test::read_file(path), "new");
        EXPECT_FALSE(fs::exists(dir.path / stale_name));
        EXPECT_EQ(entries_in(dir.path), before); // less the stale temporary, plus PATH
        for (const std::string& n : files) EXPECT_EQ(test::read_file((dir.path / n).string()), n) << n;
        EXPECT_EQ(test::read_file((dir.path / dir_name / "inner" / "f").string()), "inner");
        EXPECT_TRUE(fs::is_symlink(dir.path / link_name));
        EXPECT_EQ(fs::read_symlink(dir.path / link_name), fs::path(victim));
        EXPECT_EQ(test::read_file(victim), "victim");
        EXPECT_TRUE(fs::is_symlink(dir.path / dangling_name));
        EXPECT_TRUE(fs::is_fifo(fs::symlink_status(dir.path / fifo_name)));
        for (const auto& e : fs::directory_iterator(dir.path))
            if (e.path() != outside) fs::remove_all(e.path());
    }
}
