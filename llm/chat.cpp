// chat.cpp: built-in chat formats (llama.cpp's llm_chat_apply_template habits) and the cached conversation.
#include "llm/chat.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace tessera {

namespace {

bool has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

struct format_name {
    chat_format f;
    const char* name;
};
constexpr format_name names[] = {{chat_format::chatml, "chatml"}, {chat_format::llama2, "llama2"},
                                 {chat_format::llama3, "llama3"}, {chat_format::mistral, "mistral"},
                                 {chat_format::gemma, "gemma"},   {chat_format::zephyr, "zephyr"},
                                 {chat_format::phi3, "phi3"}};

std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && std::isspace(uint8_t(s[a]))) a++;
    while (b > a && std::isspace(uint8_t(s[b - 1]))) b--;
    return s.substr(a, b - a);
}

} // namespace

const char* chat_format_name(chat_format f) {
    for (const auto& n : names)
        if (n.f == f) return n.name;
    return "?";
}

bool chat_format_from_name(const std::string& name, chat_format& out) {
    std::string lower = name;
    for (auto& c : lower) c = char(std::tolower(uint8_t(c)));
    for (const auto& n : names)
        if (lower == n.name) {
            out = n.f;
            return true;
        }
    return false;
}

chat_format detect_chat_format(const std::string& t) {
    if (t.empty()) return chat_format::chatml;
    if (has(t, "<|im_start|>")) return chat_format::chatml;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return chat_format::llama3;
    if (has(t, "<start_of_turn>")) return chat_format::gemma;
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return chat_format::phi3;
    if (has(t, "<|user|>")) return chat_format::zephyr;
    if (has(t, "[INST]")) return has(t, "<<SYS>>") ? chat_format::llama2 : chat_format::mistral;
    return chat_format::chatml;
}

const char* const chatml_template =
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

chat_template::chat_template(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), bos_(std::move(bos_token)), eos_(std::move(eos_token)), t_(jinja::parse(source_)) {}

std::string model_chat_template(const gguf_file& f) { return f.get_string("tokenizer.chat_template").value_or(""); }

std::string special_token_text(const vocab& v, token id) { return id < 0 ? std::string() : v.text(id); }

chat_template chat_template::of_model(const gguf_file& f, const vocab& v) {
    std::string src = model_chat_template(f);
    return chat_template(src.empty() ? chatml_template : std::move(src), special_token_text(v, v.bos()),
                         special_token_text(v, v.eos()));
}

std::string chat_template::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const nlohmann::ordered_json& tools, const nlohmann::ordered_json& kwargs) const {
    jinja::chat_inputs in;
    in.messages = messages;
    in.tools = tools;
    in.kwargs = kwargs;
    in.add_generation_prompt = add_generation_prompt;
    in.bos_token = bos_;
    in.eos_token = eos_;
    return jinja::render(t_, jinja::chat_context(in));
}

std::vector<token> tokenize_chat_prompt(const vocab& v, const std::string& text) {
    const std::string bos = special_token_text(v, v.bos());
    const bool has_bos = v.add_bos() && !bos.empty() && text.rfind(bos, 0) == 0;
    return v.tokenize(text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

std::string template_default_system(const std::string& t) {
    const std::string open = "<|im_start|>system\n";
    const size_t a = t.find(open);
    if (a == std::string::npos || t.find("messages[0]") == std::string::npos) return "";
    const size_t b = t.find("<|im_end|>", a);
    if (b == std::string::npos) return "";
    std::string text = t.substr(a + open.size(), b - a - open.size());
    // only a literal: anything templated ({{ }}, {% %}) or quoted comes from the messages
    if (text.find("{{") != std::string::npos || text.find("{%") != std::string::npos ||
        text.find('\'') != std::string::npos || text.find('"') != std::string::npos || text.empty())
        return "";
    return text;
}

std::string render_chat(chat_format f, const std::vector<chat_message>& msgs, bool gen) {
    std::string out;
    switch (f) {
    case chat_format::chatml:
        for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        if (gen) out += "<|im_start|>assistant\n";
        break;
    case chat_format::llama3:
        for (const auto& m : msgs)
            out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
        if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
        break;
    case chat_format::phi3:
        for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
        if (gen) out += "<|assistant|>\n";
        break;
    case chat_format::zephyr:
        for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|endoftext|>\n";
        if (gen) out += "<|assistant|>\n";
        break;
    case chat_format::gemma: {
        // no system role: the system text opens the first user turn, separated by a blank line
        std::string sys;
        for (const auto& m : msgs) {
            if (m.role == "system") {
                sys += m.content + "\n\n";
                continue;
            }
            const std::string role = m.role == "assistant" ? "model" : m.role;
            out += "<start_of_turn>" + role + "\n" + (role == "user" ? sys : "") + trim(m.content) + "<end_of_turn>\n";
            if (role == "user") sys.clear();
        }
        if (gen) out += "<start_of_turn>model\n";
        break;
    }
    case chat_format::llama2: {
        // <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] assistant </s><s>[INST] user [/INST]
        std::string sys;
        bool first = true;
        for (const auto& m : msgs) {
            if (m.role == "system") {
                sys = "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n";
            } else if (m.role == "user") {
                out += (first ? "[INST] " : "<s>[INST] ") + sys + trim(m.content) + " [/INST]";
                sys.clear();
                first = false;
            } else {
                out += " " + trim(m.content) + " </s>";
            }
        }
        break;
    }
    case chat_format::mistral: {
        // [INST] user [/INST] assistant</s>; a system message goes in front of the next user turn
        std::string sys;
        for (const auto& m : msgs) {
            if (m.role == "system")
                sys = m.content + "\n\n";
            else if (m.role == "user") {
                out += "[INST] " + sys + trim(m.content) + " [/INST]";
                sys.clear();
            } else
                out += " " + trim(m.content) + "</s>";
        }
        break;
    }
    }
    return out;
}

chat_session::chat_session(session& s, chat_format f, sampler_params sp, std::string system_prompt)
    : s_(s), format_(f), sp_(sp), smp_(sp, int32_t(s.mdl().hp.n_vocab)) {
    set_system(system_prompt);
}

void chat_session::set_system(const std::string& text) {
    if (!messages_.empty() && messages_.front().role == "system") messages_.erase(messages_.begin());
    if (!text.empty()) messages_.insert(messages_.begin(), {"system", text});
}

void chat_session::clear() {
    std::vector<chat_message> keep;
    if (!messages_.empty() && messages_.front().role == "system") keep.push_back(messages_.front());
    messages_ = std::move(keep);
}

void chat_session::set_messages(std::vector<chat_message> m) { messages_ = std::move(m); }

std::vector<token> chat_session::prompt_tokens() const {
    return s_.mdl().voc.tokenize(render_chat(format_, messages_, true), /*add_special=*/true, /*parse_special=*/true);
}

chat_reply chat_session::send(const std::string& user, const std::function<void(const std::string&)>& on_piece,
                              const std::atomic<bool>* stop, int64_t max_tokens) {
    messages_.push_back({"user", user});
    try {
        return generate(on_piece, stop, max_tokens);
    } catch (...) {
        messages_.pop_back(); // a turn that could not be answered leaves no trace
        throw;
    }
}

chat_reply chat_session::regenerate(const std::function<void(const std::string&)>& on_piece,
                                    const std::atomic<bool>* stop, int64_t max_tokens) {
    if (messages_.empty() || messages_.back().role != "assistant")
        throw error("nothing to regenerate: the last message is not a reply");
    messages_.pop_back();
    return generate(on_piece, stop, max_tokens);
}

chat_reply chat_session::generate(const std::function<void(const std::string&)>& on_piece,
                                  const std::atomic<bool>* stop, int64_t max_tokens) {
    chat_reply r;
    const vocab& voc = s_.mdl().voc;
    const int64_t n_ctx = s_.n_ctx();
    // fit: drop the oldest user/assistant turns (never the system prompt, never the newest user message)
    std::vector<token> prompt = prompt_tokens();
    const int64_t room = std::min<int64_t>(reserve, n_ctx / 4);
    const size_t first = (!messages_.empty() && messages_.front().role == "system") ? 1 : 0;
    if (int64_t(prompt.size()) + room > n_ctx) {
        // would the newest message fit with the system prompt alone? if not, change nothing and say so
        std::vector<chat_message> minimal(messages_.begin(), messages_.begin() + long(first));
        minimal.push_back(messages_.back());
        const size_t need = s_.mdl().voc.tokenize(render_chat(format_, minimal, true), true, true).size();
        if (int64_t(need) + room > n_ctx)
            throw error(fmt::format("the message needs {} tokens with the system prompt, too many for the context "
                                    "of {} tokens (raise -c)",
                                    need, n_ctx));
    }
    while (int64_t(prompt.size()) + room > n_ctx) {
        // remove one turn: a user message and the assistant reply after it
        messages_.erase(messages_.begin() + long(first));
        if (messages_.size() > first + 1 && messages_[first].role == "assistant")
            messages_.erase(messages_.begin() + long(first));
        r.n_dropped_turns++;
        prompt = prompt_tokens();
    }
    // reuse the cached prefix
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) common++;
    if (common == prompt.size()) common--; // at least one token must be evaluated to get logits
    s_.truncate(int64_t(common));
    cached_.resize(common);

    auto t0 = std::chrono::steady_clock::now();
    std::span<const float> logits = s_.decode(std::span<const token>(prompt).subspan(common));
    cached_.insert(cached_.end(), prompt.begin() + long(common), prompt.end());
    r.n_prompt_eval = int64_t(prompt.size() - common);
    auto t1 = std::chrono::steady_clock::now();
    r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

    smp_.reset();
    for (token t : prompt) smp_.accept(t);
    const int64_t limit = max_tokens < 0 ? n_ctx : max_tokens;
    while (r.n_generated < limit) {
        if (stop && stop->load()) {
            r.interrupted = true;
            break;
        }
        const token t = smp_.sample(logits);
        smp_.accept(t);
        if (voc.is_eog(t)) break;
        const std::string piece = voc.token_to_piece(t, false);
        r.text += piece;
        if (on_piece) on_piece(piece);
        r.n_generated++;
        if (s_.n_past() >= n_ctx) {
            r.context_full = true;
            break;
        }
        const token one[1] = {t};
        logits = s_.decode(one);
        cached_.push_back(t);
    }
    r.gen_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    messages_.push_back({"assistant", r.text});
    return r;
}

} // namespace tessera
