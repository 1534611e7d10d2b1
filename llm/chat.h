// chat.h: chat templates and a conversation kept in the KV cache. The prompt is the GGUF's own tokenizer.chat_template
// rendered by the Jinja engine (llm/jinja/) as transformers' apply_chat_template renders it, ChatML when the file has
// none (llama.cpp's fallback). Each turn renders the whole conversation and evaluates only what the cache lacks.
#pragma once

#include "llm/jinja/jinja.h"
#include "llm/model.h"
#include "llm/sampler.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace tessera {

// A model's chat template rendered by the Jinja engine with the variables transformers passes: messages, tools,
// add_generation_prompt, bos_token / eos_token (the vocabulary's texts) and extra keyword arguments.
class chat_template {
  public:
    // Parses `source`; a syntax error is tessera::error "chat template: line N: ...".
    chat_template(std::string source, std::string bos_token, std::string eos_token);
    // The file's tokenizer.chat_template, or ChatML when it has none (llama.cpp's fallback).
    static chat_template of_model(const gguf_file& f, const vocab& v);

    // The prompt text; a template error (raise_exception included) is tessera::error "chat template: line N: ...".
    std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& tools = nullptr,
                       const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object()) const;
    const std::string& source() const { return source_; }
    bool mentions(std::string_view name) const { return source_.find(name) != std::string::npos; }
    const std::string& bos_token() const { return bos_; }

  private:
    std::string source_, bos_, eos_;
    jinja::template_ t_;
};

// llama.cpp's fallback for a model without a template: <|im_start|>role\ncontent<|im_end|>\n per message.
extern const char* const chatml_template;
// tokenizer.chat_template of the file; "" when it has none.
std::string model_chat_template(const gguf_file& f);
// The raw vocabulary text of a special token ("" for -1).
std::string special_token_text(const vocab& v, token id);
// The tokens of a rendered prompt as chat evaluates them: special-token text parsed, BOS added when the model adds
// one and the text does not already begin with it (templates often write bos_token themselves).
std::vector<token> tokenize_chat_prompt(const vocab& v, const std::string& text);

// A reply as the conversation keeps it: {"role": "assistant", "content": ...}; when the template knows reasoning
// (it mentions </think> or reasoning_content) and the text has a "...</think>" part, that part goes to
// "reasoning_content" and the content is what follows, as llama.cpp's server stores a reasoning model's reply.
nlohmann::ordered_json assistant_message(const std::string& text, const chat_template& t);

struct chat_reply {
    std::string text;
    int64_t n_prompt_eval = 0; // prompt tokens evaluated (the part not already in the cache)
    int64_t n_generated = 0;
    double prompt_seconds = 0, gen_seconds = 0;
    bool interrupted = false;  // stopped by the caller's flag (Ctrl-C)
    bool context_full = false; // stopped because the context filled up
    int n_dropped_turns = 0;   // oldest turns removed to make room before this reply
};

// A conversation: the messages (OpenAI-style JSON objects), and the tokens of the rendered prompt that are already in
// the session's KV cache. Each turn renders the whole conversation with add_generation_prompt and evaluates from the
// first token that differs from the cache (the new turn; more where the template renders history differently, as
// Qwen3 drops old reasoning).
class chat_session {
  public:
    // kwargs: extra template variables (e.g. {"enable_thinking": false}).
    chat_session(session& s, chat_template t, sampler_params sp, std::string system_prompt,
                 nlohmann::ordered_json kwargs = nlohmann::ordered_json::object());

    // Adds the user message and generates the reply, streaming pieces through on_piece. Drops the oldest turns (the
    // system prompt stays) when the prompt plus `reserve` tokens would not fit. Throws tessera::error when even the
    // latest message alone cannot fit, or when the template fails (the conversation is then left as it was).
    chat_reply send(const std::string& user, const std::function<void(const std::string&)>& on_piece,
                    const std::atomic<bool>* stop = nullptr, int64_t max_tokens = -1);
    // Removes the last assistant reply and generates it again.
    chat_reply regenerate(const std::function<void(const std::string&)>& on_piece,
                          const std::atomic<bool>* stop = nullptr, int64_t max_tokens = -1);
    void clear();                             // forget every turn, keep the system prompt
    void set_system(const std::string& text); // replaces the system prompt (empty: none)
    const nlohmann::ordered_json& messages() const { return messages_; }
    void set_messages(nlohmann::ordered_json m); // e.g. /load: an array of message objects
    const chat_template& tmpl() const { return tmpl_; }
    // The prompt text for the conversation as it stands, ending with the assistant's opening.
    std::string prompt_text() const;
    int64_t tokens_in_context() const { return int64_t(cached_.size()); }
    int64_t n_ctx() const { return s_.n_ctx(); }
    int64_t reserve = 256; // tokens kept free for the reply when fitting the prompt

  private:
    chat_reply generate(const std::function<void(const std::string&)>& on_piece, const std::atomic<bool>* stop,
                        int64_t max_tokens);
    std::vector<token> prompt_tokens(const nlohmann::ordered_json& messages) const;

    session& s_;
    chat_template tmpl_;
    nlohmann::ordered_json kwargs_;
    sampler_params sp_;
    sampler smp_;
    nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
    std::vector<token> cached_; // tokens in the KV cache, in order
};

} // namespace tessera
