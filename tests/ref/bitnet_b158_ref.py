#!/usr/bin/env python3
"""NumPy reference of Microsoft's BitNet b1.58 (bitnet-b1.58-2B-4T) forward pass, for checking tessera's
`bitnet-b1.58` architecture. Written from the model card / Hugging Face modeling math, independently of tessera.

usage: bitnet_b158_ref.py MODEL.gguf N_PREDICT ID [ID ...]
  Reads a GGUF (f32 / f16 / I2_S tensors), runs the prompt ids (BOS included by the caller), then greedily generates
  N_PREDICT ids (argmax, ties to the lowest id; end-of-generation tokens do not stop it) and prints `gen: id id ...`.
usage: bitnet_b158_ref.py --check MODEL.gguf PROMPT_IDS GEN_IDS
  Feeds tessera's prompt and generated ids (space-separated strings, `simple --ids` output) through the reference and
  checks every generated id against the reference's logits at its step: it must be the reference's argmax, or within
  TOL of its maximum (a near-tie: tessera keeps K and V in f16 and its int8 activation roundings then differ from the
  float64 reference's in a few places, which moves logits by a few hundredths on these random weights). Exit 1 when
  a token is further off, or when fewer than 3/4 of the steps agree exactly.

Only the Python 3 standard library and NumPy. Computation is in float64, except the per-token activation scale, which
is rounded to float32 as the C implementation computes it.
"""
import struct
import sys

import numpy as np

# ------------------------------------------------------------------------------------------------ GGUF reader

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
T_F32, T_F16, T_I2_S = 0, 1, 36


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def scalar(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.scalar("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, t):
        if t in GGUF_SCALARS:
            return self.scalar(GGUF_SCALARS[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.scalar("<I"), self.scalar("<Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")


def load_gguf(path):
    """Returns (kv dict, {name: numpy array}); matrices are row-major W[ne1][ne0], ternary ones as (int8 W, scale)."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    r = Reader(buf)
    if bytes(buf[:4]) != b"GGUF":
        raise ValueError("not a GGUF file")
    r.pos = 4
    version, n_tensors, n_kv = r.scalar("<I"), r.scalar("<Q"), r.scalar("<Q")
    if version < 2:
        raise ValueError(f"GGUF version {version} not supported")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.scalar("<I"))
    infos = []
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.scalar("<I")
        ne = [r.scalar("<Q") for _ in range(n_dims)]
        infos.append((name, ne, r.scalar("<I"), r.scalar("<Q")))
    align = kv.get("general.alignment", 32)
    data_start = (r.pos + align - 1) // align * align

    tensors = {}
    for name, ne, t, off in infos:
        n = int(np.prod(ne))
        shape = tuple(reversed(ne))  # ne[0] innermost
        at = data_start + off
        if t == T_F32:
            tensors[name] = np.frombuffer(buf, np.float32, n, at).reshape(shape)
        elif t == T_F16:
            tensors[name] = np.frombuffer(buf, np.float16, n, at).reshape(shape)
        elif t == T_I2_S:
            tensors[name] = decode_i2_s(buf, at, n, shape)
        else:
            raise ValueError(f"{name}: tensor type {t} not supported")
    return kv, tensors


def decode_i2_s(buf, at, n, shape):
    """I2_S: n/4 bytes of 2-bit codes, then a 32-byte tail starting with the tensor's f32 scale. In each block of 128
    elements (32 bytes), byte j holds elements j, j+32, j+64, j+96 in bits 7:6, 5:4, 3:2, 1:0. Code c means c - 1."""
    assert n % 128 == 0
    raw = np.frombuffer(buf, np.uint8, n // 4, at).reshape(-1, 32)
    codes = np.concatenate([(raw >> shift) & 3 for shift in (6, 4, 2, 0)], axis=1)  # (blocks, 128) in element order
    w = (codes.astype(np.int8) - 1).reshape(shape)
    scale = float(np.frombuffer(buf, np.float32, 1, at + n // 4)[0])
    return w, scale


# ------------------------------------------------------------------------------------------------ model math


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def bit_linear(wq, x):
    """W2A8 linear: int8 absmax quantization of the activations (per token), exact integer dot, then rescale."""
    w, w_scale = wq
    amax = max(float(np.max(np.abs(x))), 1e-5)
    s = float(np.float32(127.0 / amax))
    v = x * s
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -128, 127)  # round half away from zero
    # integer-valued float64 dot: |sum| <= 128 * n_in, far below 2^53, so exact
    return (w.astype(np.float64) @ q) * w_scale / s


def rope_neox(x, pos, n_rot, base):
    """x: (heads, head_dim). Rotates pairs (i, i + n_rot/2), i < n_rot/2; dims >= n_rot pass through."""
    half = n_rot // 2
    theta = pos * base ** (-2.0 * np.arange(half) / n_rot)
    c, s = np.cos(theta), np.sin(theta)
    x0, x1 = x[:, :half], x[:, half:n_rot]
    y = x.copy()
    y[:, :half] = x0 * c - x1 * s
    y[:, half:n_rot] = x0 * s + x1 * c
    return y


class BitNet:
    def __init__(self, path):
        kv, t = load_gguf(path)
        p = "bitnet-b1.58."
        self.n_layer = kv[p + "block_count"]
        self.n_embd = kv[p + "embedding_length"]
        self.n_head = kv[p + "attention.head_count"]
        self.n_head_kv = kv[p + "attention.head_count_kv"]
        self.head_dim = kv.get(p + "attention.key_length", self.n_embd // self.n_head)
        self.eps = kv[p + "attention.layer_norm_rms_epsilon"]
        self.base = kv.get(p + "rope.freq_base", 10000.0)
        self.n_rot = kv.get(p + "rope.dimension_count", self.head_dim)

        f64 = lambda a: np.asarray(a, dtype=np.float64)
        self.tok_embd = t["token_embd.weight"]  # (V, E), f16
        out = t.get("output.weight", self.tok_embd)  # absent: tied to the embedding
        self.output = f64(out)
        self.output_norm = f64(t["output_norm.weight"])
        self.layers = []
        for i in range(self.n_layer):
            b = f"blk.{i}."
            L = {k: f64(t[b + k + ".weight"]) for k in ("attn_norm", "attn_sub_norm", "ffn_norm", "ffn_sub_norm")}
            for k in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
                L[k] = t[b + k + ".weight"]
            self.layers.append(L)
        self.cache = [([], []) for _ in range(self.n_layer)]  # per layer: keys, values (each (n_head_kv, head_dim))

    def step(self, tok, pos):
        """Runs one token at position pos (all earlier positions already in the cache); returns its logits."""
        H, KV, D, eps = self.n_head, self.n_head_kv, self.head_dim, self.eps
        x = self.tok_embd[tok].astype(np.float64)
        for L, (ks, vs) in zip(self.layers, self.cache):
            # attention
            h = rms_norm(x, L["attn_norm"], eps)
            q = rope_neox(bit_linear(L["attn_q"], h).reshape(H, D), pos, self.n_rot, self.base)
            k = rope_neox(bit_linear(L["attn_k"], h).reshape(KV, D), pos, self.n_rot, self.base)
            v = bit_linear(L["attn_v"], h).reshape(KV, D)
            ks.append(k)
            vs.append(v)
            K, V = np.stack(ks, axis=1), np.stack(vs, axis=1)  # (KV, pos+1, D)
            att = np.empty((H, D))
            for hh in range(H):
                g = hh // (H // KV)  # GQA: query head -> kv head
                sc = K[g] @ q[hh] / np.sqrt(D)
                p = np.exp(sc - sc.max())
                att[hh] = (p / p.sum()) @ V[g]
            a = rms_norm(att.reshape(-1), L["attn_sub_norm"], eps)
            x = x + bit_linear(L["attn_output"], a)
            # feed-forward: squared ReLU gate
            h = rms_norm(x, L["ffn_norm"], eps)
            g = bit_linear(L["ffn_gate"], h)
            u = bit_linear(L["ffn_up"], h)
            f = rms_norm(np.maximum(g, 0.0) ** 2 * u, L["ffn_sub_norm"], eps)
            x = x + bit_linear(L["ffn_down"], f)
        return self.output @ rms_norm(x, self.output_norm, eps)


TOL = 0.25


def check(argv):
    model = BitNet(argv[2])
    prompt, gen = [int(a) for a in argv[3].split()], [int(a) for a in argv[4].split()]
    logits = None
    for pos, tok in enumerate(prompt):
        logits = model.step(tok, pos)
    same, worst = 0, 0.0
    for i, tok in enumerate(gen):
        gap = float(logits.max() - logits[tok])
        same += gap == 0.0
        worst = max(worst, gap)
        if gap > TOL:
            print(f"step {i}: tessera's token {tok} is {gap:.4f} below the reference's maximum (token "
                  f"{int(np.argmax(logits))})")
            return 1
        logits = model.step(tok, len(prompt) + i)
    print(f"{same} of {len(gen)} tokens are the reference's argmax; the largest gap to its maximum is {worst:.4f}")
    return 0 if 4 * same >= 3 * len(gen) else 1


def main(argv):
    if len(argv) == 5 and argv[1] == "--check":
        sys.exit(check(argv))
    if len(argv) < 4:
        sys.exit("usage: bitnet_b158_ref.py MODEL.gguf N_PREDICT ID [ID ...]")
    model = BitNet(argv[1])
    n_predict, prompt = int(argv[2]), [int(a) for a in argv[3:]]
    logits = None
    for pos, tok in enumerate(prompt):
        logits = model.step(tok, pos)
    gen = []
    for i in range(n_predict):
        tok = int(np.argmax(logits))  # first maximum: ties go to the lowest id
        gen.append(tok)
        if i + 1 < n_predict:
            logits = model.step(tok, len(prompt) + i)
    print("gen: " + " ".join(map(str, gen)))


if __name__ == "__main__":
    main(sys.argv)
