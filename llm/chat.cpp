// chat.cpp: chat templates through the Jinja engine and the cached conversation.
#include "llm/chat.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>

namespace tessera {

using ojson = nlohmann::ordered_json;

const char* const chatml_template =
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

chat_template::chat_template(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), bos_(std::move(bos_token)), eos_(std::move(eos_token)), t_(jinja::parse(source_)) {}

std::string model_chat_template(const gguf_file& f) {
    return f.get_string("tokenizer.chat_template").value_or("");
}

std::string special_token_text(const vocab& v, token id) {
    return id < 0 ? std::string() : v.text(id);
}

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

ojson assistant_message(const std::string& text, const chat_template& t) {
    ojson m = {{"role", "assistant"}, {"content", text}};
    const size_t end = text.find("</think>");
    if (end == std::string::npos || !(t.mentions("</think>") || t.mentions("reasoning_content"))) return m;
    size_t begin = text.rfind("<think>", end);
    begin = begin == std::string::npos ? 0 : begin + 7;
    auto strip_newlines = [](std::string s, bool left, bool right) {
        if (left) s.erase(0, s.find_first_not_of('\n') == std::string::npos ? s.size() : s.find_first_not_of('\n'));
        if (right) s.erase(s.find_last_not_of('\n') + 1);
        return s;
    };
    m["content"] = strip_newlines(text.substr(end + 8), true, false);
    m["reasoning_content"] = strip_newlines(text.substr(begin, end - begin), true, true);
    return m;
}

chat_session::chat_session(session& s, chat_template t, sampler_params sp, std::string system_prompt, ojson kwargs)
    : s_(s), tmpl_(std::move(t)), kwargs_(std::move(kwargs)), sp_(sp), smp_(sp, int32_t(s.mdl().hp.n_vocab)) {
    set_system(system_prompt);
}

static bool is_system(const ojson& m) {
    return m.is_object() && m.value("role", "") == "system";
}

void chat_session::set_system(const std::string& text) {
    if (!messages_.empty() && is_system(messages_.front())) messages_.erase(messages_.begin());
    if (!text.empty()) messages_.insert(messages_.begin(), ojson{{"role", "system"}, {"content", text}});
}

void chat_session::clear() {
    ojson keep = ojson::array();
    if (!messages_.empty() && is_system(messages_.front())) keep.push_back(messages_.front());
    messages_ = std::move(keep);
}

void chat_session::set_messages(ojson m) {
    if (!m.is_array()) throw error("a conversation is a JSON array of messages");
    messages_ = std::move(m);
}

std::string chat_session::prompt_text() const {
    return tmpl_.render(messages_, true, nullptr, kwargs_);
}

std::vector<token> chat_session::prompt_tokens(const ojson& messages) const {
    return tokenize_chat_prompt(s_.mdl().voc, tmpl_.render(messages, true, nullptr, kwargs_));
}

chat_reply chat_session::send(const std::string& user, const std::function<void(const std::string&)>& on_piece,
                              const std::atomic<bool>* stop, int64_t max_tokens) {
    const ojson before = messages_;
    messages_.push_back({{"role", "user"}, {"content", user}});
    try {
        return generate(on_piece, stop, max_tokens);
    } catch (...) {
        messages_ = before; // a turn that could not be answered leaves no trace
        throw;
    }
}

chat_reply chat_session::regenerate(const std::function<void(const std::string&)>& on_piece,
                                    const std::atomic<bool>* stop, int64_t max_tokens) {
    if (messages_.empty() || messages_.back().value("role", "") != "assistant")
        throw error("nothing to regenerate: the last message is not a reply");
    const ojson before = messages_;
    messages_.erase(messages_.end() - 1);
    try {
        return generate(on_piece, stop, max_tokens);
    } catch (...) {
        messages_ = before;
        throw;
    }
}

chat_reply chat_session::generate(const std::function<void(const std::string&)>& on_piece,
                                  const std::atomic<bool>* stop, int64_t max_tokens) {
    chat_reply r;
    const vocab& voc = s_.mdl().voc;
    const int64_t n_ctx = s_.n_ctx();
    // fit: drop the oldest turns (never the system prompt, never the newest message); a turn runs from a user message
    // to the next one, tool calls and results included, so what stays still starts with a user message
    std::vector<token> prompt = prompt_tokens(messages_);
    const int64_t room = std::min<int64_t>(reserve, n_ctx / 4);
    const size_t first = !messages_.empty() && is_system(messages_.front()) ? 1 : 0;
    if (int64_t(prompt.size()) + room > n_ctx) {
        // would the newest message fit with the system prompt alone? if not, change nothing and say so
        ojson minimal = ojson::array();
        if (first) minimal.push_back(messages_.front());
        minimal.push_back(messages_.back());
        const size_t need = prompt_tokens(minimal).size();
        if (int64_t(need) + room > n_ctx)
            throw error(fmt::format("the message needs {} tokens with the system prompt, too many for the context "
                                    "of {} tokens (raise -c)",
                                    need, n_ctx));
    }
    while (int64_t(prompt.size()) + room > n_ctx && messages_.size() > first + 1) {
        messages_.erase(messages_.begin() + long(first));
        while (messages_.size() > first + 1 && messages_[first].value("role", "") != "user")
            messages_.erase(messages_.begin() + long(first));
        r.n_dropped_turns++;
        prompt = prompt_tokens(messages_);
    }
    // reuse the cached prefix; evaluate from the first token that differs
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
    messages_.push_back(assistant_message(r.text, tmpl_));
    return r;
}

} // namespace tessera
