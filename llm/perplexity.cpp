// perplexity.cpp: chunked evaluation, scoring, and llama.cpp's KL-divergence base file (write and read).
#include "llm/perplexity.h"

#include "ggml-like/atomic_file.h"
#include "ggml-like/error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace tessera {

double perplexity_result::ppl() const { return count > 0 ? std::exp(nll / double(count)) : 0.0; }

double perplexity_result::ppl_error() const {
    if (count < 2) return 0.0;
    const double mean = nll / double(count), mean2 = nll2 / double(count);
    const double var = mean2 - mean * mean;
    return var > 0 ? std::sqrt(var / double(count - 1)) * ppl() : 0.0;
}

double token_nll(const float* logits, int64_t n_vocab, int32_t target) {
    return score_nll(logits, n_vocab, target);
}

double encode_log_probs(const float* logits, int64_t n_vocab, int32_t target, uint16_t* record) {
    return score_encode(logits, n_vocab, target, record);
}

namespace {

// Adds one token's comparison to `k` (llama-perplexity's sums); returns (KLD, Δp).
std::pair<double, float> add_comparison(float nll, double kld, bool same_top, const uint16_t* rec, int32_t target,
                                        kld_stats& k) {
    float scale, min_log_prob;
    std::memcpy(&scale, rec, 4);
    std::memcpy(&min_log_prob, rec + 2, 4);
    k.sum_nll += nll;
    k.sum_nll2 += double(nll) * nll;
    const float nll_base = -(scale * rec[4 + target] + min_log_prob);
    k.sum_nll_base += nll_base;
    k.sum_nll_base2 += double(nll_base) * nll_base;
    k.sum_nll_nll_base += double(nll) * nll_base;
    k.sum_kld += kld;
    k.sum_kld2 += kld * kld;
    k.count++;
    if (same_top) k.n_same_top++;
    const float p_diff = std::exp(-nll) - std::exp(-nll_base);
    k.sum_p_diff += p_diff;
    const double d2 = double(p_diff) * p_diff;
    k.sum_p_diff2 += d2;
    k.sum_p_diff4 += d2 * d2;
    k.max_p_diff = std::max(k.max_p_diff, std::fabs(p_diff));
    k.kld_values.push_back(float(kld));
    k.p_diff_values.push_back(p_diff);
    return {kld, p_diff};
}

} // namespace

std::pair<double, float> compare_log_probs(const float* logits, int64_t n_vocab, const uint16_t* rec, int32_t target,
                                           kld_stats& k) {
    const kld_row r = score_compare(logits, n_vocab, rec, target);
    return add_comparison(r.nll, r.kld, r.same_top, rec, target, k);
}

namespace {

// The KL-divergence base file goes through atomic_file: renamed over OUT once complete, the temporary discarded when
// the run fails (an exception, a full disk), so a failed run leaves neither a partial OUT nor a temporary behind.
template <class T> void write_raw(atomic_file& f, const T* v, size_t n) { f.write(v, n * sizeof(T)); }

} // namespace

kld_base_reader::kld_base_reader(std::istream& in, uint64_t size, std::string name, int64_t model_vocab)
    : in_(in), name_(std::move(name)) {
    const std::string& p = name_;
    char magic[8];
    int32_t hdr[3];
    if (!in.read(magic, 8) || std::memcmp(magic, "_logits_", 8) != 0)
        throw error(fmt::format("{}: not a KL-divergence base file (no _logits_ header)", p));
    if (!in.read(reinterpret_cast<char*>(hdr), sizeof(hdr))) throw error(fmt::format("{}: truncated header", p));
    n_ctx = hdr[0];
    n_vocab = hdr[1];
    n_chunk = hdr[2];
    if (n_ctx < 4 || n_ctx > (1 << 24) || n_vocab < 1 || n_vocab > (1 << 24) || n_chunk < 1)
        throw error(fmt::format("{}: implausible header: n_ctx {}, n_vocab {}, n_chunk {}", p, n_ctx, n_vocab,
                                n_chunk));
    if (n_vocab != model_vocab)
        throw error(fmt::format("{}: base vocabulary has {} tokens, the model {}", p, n_vocab, model_vocab));
    // 20 + n_chunk * (4 n_ctx + 2 n_scored record_size); n_chunk is up to 2^31 and a chunk up to 2^49 bytes
    const uint64_t per_chunk = uint64_t(n_ctx) * 4 + uint64_t(n_scored()) * uint64_t(kld_record_size(n_vocab)) * 2;
    uint64_t need = 0;
    const bool overflow =
        __builtin_mul_overflow(uint64_t(n_chunk), per_chunk, &need) || __builtin_add_overflow(need, 20, &need);
    if (overflow || size < need)
        throw error(fmt::format("{}: file is truncated: {} chunks of {} tokens need {} bytes, file has {}", p, n_chunk,
                                n_ctx, overflow ? std::string("more than 2^64") : std::to_string(need), size));
    tokens.resize(size_t(n_chunk) * size_t(n_ctx));
    if (!in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * 4)))
        throw error(fmt::format("{}: truncated token list", p));
    for (int32_t t : tokens)
        if (t < 0 || t >= n_vocab)
            throw error(fmt::format("{}: token id {} out of range, expected 0..{}", p, t, n_vocab - 1));
}

void kld_base_reader::read_chunk(std::vector<uint16_t>& records) {
    records.resize(size_t(n_scored() * kld_record_size(n_vocab)));
    if (!in_.read(reinterpret_cast<char*>(records.data()), std::streamsize(records.size() * 2)))
        throw error(fmt::format("{}: truncated log-probability records", name_));
}

perplexity_result run_perplexity(session& s, const std::string& text, const perplexity_params& p,
                                 const perplexity_progress& progress) {
    const model& m = s.mdl();
    const int64_t n_vocab = m.hp.n_vocab;
    const bool comparing = !p.kld_base_in.empty();
    if (m.voc.add_eos()) throw error("perplexity: the vocabulary adds EOS, which this method does not allow");

    std::ifstream base_file;
    std::unique_ptr<kld_base_reader> base;
    std::vector<token> tokens;
    int64_t n_ctx = p.n_ctx;
    if (comparing) {
        base_file.open(p.kld_base_in, std::ios::binary | std::ios::ate);
        if (!base_file) throw error(fmt::format("{}: cannot open the KL-divergence base file", p.kld_base_in));
        const uint64_t size = uint64_t(base_file.tellg());
        base_file.seekg(0);
        base = std::make_unique<kld_base_reader>(base_file, size, p.kld_base_in, n_vocab);
        n_ctx = base->n_ctx;
        tokens.assign(base->tokens.begin(), base->tokens.end());
    } else {
        tokens = m.voc.tokenize(text, /*add_special=*/true, /*parse_special=*/false);
    }
    if (n_ctx < 4) throw error(fmt::format("perplexity: context {} is too small", n_ctx));
    if (n_ctx > s.n_ctx())
        throw error(fmt::format("perplexity: chunks of {} tokens do not fit the context of {} (raise -c)", n_ctx,
                                s.n_ctx()));
    if (!comparing && int64_t(tokens.size()) < 2 * n_ctx)
        throw error(fmt::format("perplexity: the text has {} tokens; at least {} (2 x context) are needed",
                                tokens.size(), 2 * n_ctx));

    perplexity_result r;
    r.n_tokens = int64_t(tokens.size());
    const int64_t n_chunk_max = int64_t(tokens.size()) / n_ctx;
    r.n_chunks = p.n_chunks < 0 ? n_chunk_max : std::min(p.n_chunks, n_chunk_max);
    const int64_t first = n_ctx / 2, n_scored = n_ctx - 1 - first;
    const int64_t nv = kld_record_size(n_vocab);
    r.has_kld = comparing;

    std::unique_ptr<atomic_file> out;
    if (!p.kld_base_out.empty()) {
        out = std::make_unique<atomic_file>(p.kld_base_out);
        const int32_t hdr[3] = {int32_t(n_ctx), int32_t(n_vocab), int32_t(r.n_chunks)};
        out->write("_logits_", 8);
        write_raw(*out, hdr, 3);
        write_raw(*out, tokens.data(), size_t(r.n_chunks * n_ctx));
    }
    // p.n_seq chunks a batch, packed one after another from cache row 0 (session::score_from's seq_len): the output
    // rows run from chunk 0's first scored token to the batch's last token; row a (token a of the batch) of chunk
    // a / n_ctx at offset o = a % n_ctx predicts the chunk's token o + 1 and is scored when first <= o < n_ctx - 1
    // (the first halves of the later chunks and every last token are evaluated but not counted: target 0)
    const int64_t n_seq = std::max<int64_t>(1, std::min<int64_t>(p.n_seq, r.n_chunks));
    if (n_seq * n_ctx > s.n_ctx())
        throw error(fmt::format("perplexity: {} chunks of {} tokens a batch do not fit the context of {}", n_seq, n_ctx,
                                s.n_ctx()));
    const token bos = m.voc.bos();
    const bool add_bos = m.voc.add_bos() && bos >= 0;
    const score_mode mode = base ? score_mode::compare : out ? score_mode::encode : score_mode::nll;
    const int64_t words = score_row_words(mode, n_vocab);
    std::vector<token> batch(static_cast<size_t>(n_seq * n_ctx));
    std::vector<int32_t> targets(static_cast<size_t>(n_seq * n_ctx - first), 0);
    // compare mode: each output row's base record (zeros for the rows not scored); encode mode: one chunk's records
    std::vector<uint16_t> records, chunk_records;
    if (base) records.assign(size_t((n_seq * n_ctx - first) * nv), 0);
    if (out) chunk_records.resize(size_t(n_scored * nv));
    for (int64_t c0 = 0; c0 < r.n_chunks; c0 += n_seq) {
        const int64_t g = std::min(n_seq, r.n_chunks - c0), n_rows = g * n_ctx - first;
        for (int64_t i = 0; i < g; i++) {
            const int64_t c = c0 + i;
            std::copy(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx, batch.begin() + i * n_ctx);
            if (add_bos) batch[size_t(i * n_ctx)] = bos; // replaced, not inserted: the chunk stays n_ctx long
            for (int64_t j = 0; j < n_scored; j++)
                targets[size_t(i * n_ctx + j)] = tokens[size_t(c * n_ctx + first + j + 1)];
            if (base) {
                base->read_chunk(chunk_records);
                std::copy(chunk_records.begin(), chunk_records.end(), records.begin() + i * n_ctx * nv);
            }
        }
        s.clear();
        // scored where the logits are: only these words per token come back from the backend
        const std::span<const uint16_t> base_records =
            base ? std::span<const uint16_t>(records.data(), size_t(n_rows * nv)) : std::span<const uint16_t>();
        const std::span<const int32_t> sw =
            s.score_from(std::span<const token>(batch.data(), size_t(g * n_ctx)), first,
                         std::span<const int32_t>(targets.data(), size_t(n_rows)), mode, base_records, n_ctx);
        for (int64_t i = 0; i < g; i++) {
            for (int64_t j = 0; j < n_scored; j++) {
                const int64_t row = i * n_ctx + j; // output row of token first + j of chunk i
                const int32_t* w = sw.data() + row * words;
                double nll;
                std::memcpy(&nll, w, 8);
                if (base) {
                    double kld;
                    float nll_f;
                    std::memcpy(&kld, w + 2, 8);
                    std::memcpy(&nll_f, w + 4, 4);
                    add_comparison(nll_f, kld, w[5] != 0, records.data() + row * nv, targets[size_t(row)], r.kld);
                } else if (out) {
                    std::memcpy(chunk_records.data() + j * nv, w + score_header_words, size_t(nv) * 2);
                }
                r.nll += nll;
                r.nll2 += nll * nll;
                r.count++;
            }
            if (out) write_raw(*out, chunk_records.data(), chunk_records.size());
            r.running_ppl.push_back(r.ppl());
            if (progress) progress(c0 + i + 1, r.n_chunks, r);
        }
    }
    if (out) out->commit();
    return r;
}

} // namespace tessera
