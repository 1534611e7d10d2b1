#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpora in corpus/<target>/ (small valid and broken inputs for each fuzz target).
Run from anywhere; the files are committed, so this only needs rerunning when the seeds change."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "..", "shared", "data", "vocab")


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- GGUF ----------------------------------------------------------------------------------------------------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    fmt = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B", U64: "Q", I64: "q", F64: "d"}
    if t == STR:
        return s(v)
    return struct.pack("<" + fmt[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + val(t, v)


def kv_arr(key, et, vs):
    return s(key) + struct.pack("<IIQ", ARR, et, len(vs)) + b"".join(val(et, v) for v in vs)


def gguf(kvs, tensors=(), version=3, align=32, data=b""):
    """tensors: (name, ne list, type id, offset)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, ne, tid, off in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", tid, off)
    if tensors:
        out += b"\0" * (-len(out) % align) + data
    return out


def every_type_kvs():
    return [
        kv("general.architecture", STR, "llama"),
        kv("a.u8", U8, 200), kv("a.i8", I8, -5), kv("a.u16", U16, 65000), kv("a.i16", I16, -300),
        kv("a.u32", U32, 7), kv("a.i32", I32, -7), kv("a.f32", F32, 0.5), kv("a.bool", BOOL, 1),
        kv("a.u64", U64, 1 << 40), kv("a.i64", I64, -(1 << 40)), kv("a.f64", F64, 2.5),
        kv_arr("a.arr_i32", I32, [1, 2, 3]), kv_arr("a.arr_str", STR, ["x", "", "yz"]),
        kv_arr("a.arr_f32", F32, [1.0, -2.0]), kv_arr("a.arr_bool", BOOL, [0, 1]),
    ]


def small_model_like():
    f32 = struct.pack("<8f", *range(8))
    q8 = struct.pack("<e", 0.25) + bytes(range(32))  # one q8_0 block (34 bytes)
    data = f32 + b"\0" * 0 + q8 + b"\0" * (-len(q8) % 32)
    return gguf(every_type_kvs(), [("a", [8], 0, 0), ("b", [32, 1], 8, 32)], data=data)


def spm_vocab_kvs():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581", "\u2581a", "b", "ab", "\u2581ab"]
    return [
        kv("tokenizer.ggml.model", STR, "llama"),
        kv_arr("tokenizer.ggml.tokens", STR, toks),
        kv_arr("tokenizer.ggml.scores", F32, [0.0] * 259 + [-1.0, -2.0, -3.0, -0.5, -0.1]),
        kv_arr("tokenizer.ggml.token_type", I32, [2, 3, 3] + [6] * 256 + [1] * 5),
        kv("tokenizer.ggml.bos_token_id", U32, 1), kv("tokenizer.ggml.eos_token_id", U32, 2),
    ]


def bpe_vocab_kvs(pre="smollm"):
    g = lambda b: chr(b) if (0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE) else None
    table, n = {}, 0
    for b in range(256):
        if g(b):
            table[b] = g(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    toks = [table[b] for b in range(256)] + ["\u0120a", "ab", "\u0120ab", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return [
        kv("tokenizer.ggml.model", STR, "gpt2"), kv("tokenizer.ggml.pre", STR, pre),
        kv_arr("tokenizer.ggml.tokens", STR, toks),
        kv_arr("tokenizer.ggml.token_type", I32, [1] * 259 + [3, 3, 3]),
        kv_arr("tokenizer.ggml.merges", STR, ["\u0120 a", "a b", "\u0120a b"]),
        kv("tokenizer.ggml.bos_token_id", U32, 259), kv("tokenizer.ggml.eos_token_id", U32, 261),
    ]


def wpm_vocab_kvs(lowercase=None):
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581hello", "\u2581un", "aff", "able", "\u2581,", "\u2581\u4e2d"]
    kvs = [
        kv("tokenizer.ggml.model", STR, "bert"),
        kv_arr("tokenizer.ggml.tokens", STR, toks),
        kv_arr("tokenizer.ggml.token_type", I32, [3] * 5 + [1] * 6),
        kv("tokenizer.ggml.bos_token_id", U32, 2), kv("tokenizer.ggml.unknown_token_id", U32, 1),
        kv("tokenizer.ggml.seperator_token_id", U32, 3),
    ]
    if lowercase is not None:
        kvs.append(kv("tokenizer.ggml.normalizer.lowercase", BOOL, lowercase))
    return kvs


def gguf_seeds():
    put("fuzz_gguf", "valid_every_type", small_model_like())
    put("fuzz_gguf", "valid_v2", gguf([kv("k", U32, 1)], [("t", [4], 0, 0)], version=2, data=b"\0" * 16))
    put("fuzz_gguf", "valid_no_tensors", gguf([kv("general.name", STR, "x")]))
    put("fuzz_gguf", "valid_align_64", gguf([kv("general.alignment", U32, 64)], [("t", [4], 1, 0)], align=64,
                                            data=b"\0" * 8))
    put("fuzz_gguf", "vocab_spm", gguf(spm_vocab_kvs()))
    put("fuzz_gguf", "vocab_bpe", gguf(bpe_vocab_kvs()))
    put("fuzz_gguf", "vocab_bpe_llama3", gguf(bpe_vocab_kvs("llama-bpe")))
    put("fuzz_gguf", "vocab_wpm", gguf(wpm_vocab_kvs()))
    put("fuzz_gguf", "vocab_wpm_cased", gguf(wpm_vocab_kvs(0)))
    full = small_model_like()
    put("fuzz_gguf", "broken_truncated_header", full[:20])
    put("fuzz_gguf", "broken_truncated_kv", full[:100])
    put("fuzz_gguf", "broken_truncated_data", full[:-5])
    put("fuzz_gguf", "broken_bad_magic", b"GGUX" + full[4:])
    put("fuzz_gguf", "broken_huge_counts", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1 << 60))
    put("fuzz_gguf", "broken_nested_array", gguf([s("k") + struct.pack("<IIQ", ARR, ARR, 1)]))
    put("fuzz_gguf", "broken_bad_alignment", gguf([kv("general.alignment", U32, 3)], [("t", [4], 0, 0)]))
    put("fuzz_gguf", "broken_overlap", gguf([], [("a", [16], 0, 0), ("b", [4], 0, 32)], data=b"\0" * 64))
    put("fuzz_gguf", "broken_unknown_type", gguf([], [("a", [4], 31, 0)], data=b"\0" * 32))


# ---- tokenizers: one control byte, then the text ----------------------------------------------------------------
TEXTS = [
    b"Hello world", b" Hello  world\n\n", b"\t\r\n  \xe2\x80\x83x", b"1234567890 3.14159", b"I'm don't we'LL",
    "\u00c4pfel \u00fcber na\u00efve caf\u00e9".encode(), "\u4e2d\u6587\u6d4b\u8bd5 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4".encode(),
    "\U0001f600\U0001f44d\U0001f3fd \u200d\u2764\ufe0f".encode(), b"<s>text</s><unk>", b"<|im_start|>user\nhi<|im_end|>",
    b"<|endoftext|><|endoftext|>", b"\xff\xfe\x80\xc0\xaf", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 too big",
    b"\xe2\x82 truncated", b"\x00nul\x00inside", b"a" * 300, b" " * 200 + b"x", b"\xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8",
    b"IMGIMGABCZ <sentinel:12> WordsLikeThis", b"\xe1\xa0\x8e\xc2\x85\xc2\xa0",
]


def tokenizer_seeds():
    for target in ("fuzz_tokenizer_spm", "fuzz_tokenizer_bpe", "fuzz_tokenizer_wpm"):
        for i, t in enumerate(TEXTS):
            for ctl in (0x00, 0x07, 0x03 | (i << 3)):
                put(target, "text_%02d_%02x" % (i, ctl), bytes([ctl & 0xFF]) + t)
    if os.path.exists(os.path.join(DATA, "ggml-vocab-llama-spm.gguf.inp")):
        with open(os.path.join(DATA, "ggml-vocab-llama-spm.gguf.inp"), "rb") as f:
            cases = f.read().split(b"\n__ggml_vocab_test__\n")
        for i, c in enumerate(cases[:40]):
            put("fuzz_tokenizer_spm", "llama_cpp_case_%02d" % i, b"\x01" + c)
            put("fuzz_tokenizer_bpe", "llama_cpp_case_%02d" % i, bytes([0x01 | (i << 3) & 0xFF]) + c)
            put("fuzz_tokenizer_wpm", "llama_cpp_case_%02d" % i, bytes([0x01 | (i << 3) & 0xFF]) + c)


# ---- chat templates: template 0x01 message 0x01 message ... (first byte of a message: role) --------------------
def chat_seeds():
    smollm = (b"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
              b"{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
              b"{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
              b"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    templates = {
        "smollm": smollm, "empty": b"", "llama3": b"<|start_header_id|>{{ role }}<|end_header_id|>",
        "gemma": b"<start_of_turn>user", "phi3": b"<|assistant|> <|end|>", "zephyr": b"<|user|>",
        "llama2": b"[INST] <<SYS>>", "mistral": b"[INST]", "odd_system": b"<|im_start|>system\n<|im_end|> messages[0]",
    }
    msgs = [b"\x01Hello!", b"\x02Hi, how can I help?", b"\x01  trailing spaces  \n", b"\x00Be terse.",
            b"\x01<|im_end|> injected", b"\x01\xff\xfe bad utf8", b"\x03tool output", b"\x01"]
    for name, t in templates.items():
        put("fuzz_chat_template", name, t + b"\x01" + b"\x01".join(msgs[:4]))
        put("fuzz_chat_template", name + "_all", t + b"\x01" + b"\x01".join(msgs))


# ---- KL-divergence base files (n_vocab 7: records of 12 u16) --------------------------------------------------
def kld(n_ctx=4, n_vocab=7, n_chunk=1, tokens=None, records=None):
    n_scored = n_ctx - 1 - n_ctx // 2
    nv = 2 * ((n_vocab + 1) // 2) + 4
    tokens = tokens if tokens is not None else [i % n_vocab for i in range(n_chunk * n_ctx)]
    out = b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk) + struct.pack("<%di" % len(tokens), *tokens)
    if records is None:
        rec = struct.pack("<ff", 0.001, -12.0) + struct.pack("<%dH" % (nv - 4), *[(i * 9000) % 65536 for i in range(nv - 4)])
        records = rec * (n_scored * n_chunk)
    return out + records


def kld_seeds():
    put("fuzz_kld_base", "valid_one_chunk", kld())
    put("fuzz_kld_base", "valid_three_chunks_ctx8", kld(n_ctx=8, n_chunk=3))
    put("fuzz_kld_base", "valid_nan_scale",
        kld(records=struct.pack("<ff", float("nan"), float("inf")) + b"\xff" * 16))
    full = kld(n_ctx=8, n_chunk=2)
    put("fuzz_kld_base", "broken_truncated_records", full[:-3])
    put("fuzz_kld_base", "broken_truncated_tokens", full[:30])
    put("fuzz_kld_base", "broken_magic", b"_logitz_" + full[8:])
    put("fuzz_kld_base", "broken_token_range", kld(tokens=[0, 1, 7, 2]))
    put("fuzz_kld_base", "broken_other_vocab", kld(n_vocab=9))
    # the largest header the reader allows, over a few bytes: refused by the size check before any allocation
    put("fuzz_kld_base", "broken_size_overflow", b"_logits_" + struct.pack("<iii", 1 << 24, 7, 0x7FFFFFFF) + b"\0" * 64)


if __name__ == "__main__":
    gguf_seeds()
    tokenizer_seeds()
    chat_seeds()
    kld_seeds()
