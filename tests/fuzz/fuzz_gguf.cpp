// fuzz_gguf.cpp: libFuzzer target for the GGUF reader (ggml-like/gguf.cpp). Any bytes must either parse or throw
// tessera::error; on a parse, every typed getter runs on every key, every tensor byte is read (ASan checks the ranges),
// the file is written back and read again, and the vocabulary reader (llm/vocab.cpp) runs on the metadata.
#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "llm/vocab.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

using namespace tessera;

namespace {

// Every getter on every key: each either answers or throws tessera::error for the wrong type.
void read_every_key(const gguf_file& f) {
    for (const auto& kv : f.kvs()) {
        auto quietly = [](auto&& fn) {
            try {
                fn();
            } catch (const error&) {
            }
        };
        quietly([&] { (void)f.get_int(kv.key); });
        quietly([&] { (void)f.get_float(kv.key); });
        quietly([&] { (void)f.get_bool(kv.key); });
        quietly([&] { (void)f.get_string(kv.key); });
        quietly([&] { (void)f.get_strings(kv.key); });
        quietly([&] { (void)f.get_ints(kv.key); });
        quietly([&] { (void)f.get_floats(kv.key); });
    }
}

unsigned touch_tensors(const gguf_file& f) {
    unsigned sum = 0;
    for (const auto& t : f.tensors())
        for (uint64_t i = 0; i < t.size; i++) sum += t.data[i];
    return sum;
}

// A vocabulary read from the metadata, then used once each way.
void load_vocab(const gguf_file& f) {
    try {
        const vocab v = vocab::from_gguf(f);
        const std::vector<token> ids = v.tokenize("Hello world! <|im_start|>user\n\xC3\xA9\xFF", true, true);
        (void)v.detokenize(ids, false, true);
    } catch (const error&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const gguf_file f = gguf_file::from_memory(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
        read_every_key(f);
        volatile unsigned sum = touch_tensors(f);
        (void)sum;
        // what the writer makes of a file the reader accepted must be readable again, with the same contents
        const gguf_file again = gguf_file::from_memory(gguf_writer::copy_of(f).to_bytes(), "copy.gguf");
        if (again.kvs().size() != f.kvs().size() || again.tensors().size() != f.tensors().size()) std::abort();
        load_vocab(f);
    } catch (const error&) {
    }
    return 0;
}
