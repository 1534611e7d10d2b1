// chat.h: chat templates and a conversation kept in the KV cache.
// Templates are recognized from the GGUF's tokenizer.chat_template text the way llama.cpp's built-in formats are
// (FORMATS.md §7): ChatML, Llama 2, Llama 3, Mistral, Gemma, Zephyr, Phi-3; ChatML when the model has none.
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

enum class chat_format { chatml, llama2, llama3, mistral, gemma, zephyr, phi3 };

struct chat_message {
    std::string role;    // "system", "user", "assistant"
    std::string content;
};

const char* chat_format_name(chat_format f);
// "chatml", "llama2", ... (case-insensitive); false when unknown
bool chat_format_from_name(const std::string& name, chat_format& out);
// Detects the format from a Jinja template's text; ChatML for an empty template.
chat_format detect_chat_format(const std::string& jinja);
// The system message a template inserts by itself when the conversation has none (SmolLM2's "You are a helpful AI
// assistant named SmolLM, ..."): a literal ChatML system turn written in the template; "" when there is none.
std::string template_default_system(const std::string& jinja);
// The prompt text for `messages`, ending with the assistant's turn opener when add_generation_prompt.
// BOS is not written: the tokenizer adds it when the model asks for it.
std::string render_chat(chat_format f, const std::vector<chat_message>& messages, bool add_generation_prompt);

// A model's chat template rendered by the Jinja engine (llm/jinja/) with the variables transformers passes: messages,
// tools, add_generation_prompt, bos_token / eos_token (the vocabulary's texts) and extra keyword arguments.
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

struct chat_reply {
    std::string text;
    int64_t n_prompt_eval = 0; // prompt tokens evaluated (the part not already in the cache)
    int64_t n_generated = 0;
    double prompt_seconds = 0, gen_seconds = 0;
    bool interrupted = false;  // stopped by the caller's flag (Ctrl-C)
    bool context_full = false; // stopped because the context filled up
    int n_dropped_turns = 0;   // oldest turns removed to make room before this reply
};

// A conversation: the messages, and the tokens of the rendered prompt that are already in the session's KV cache, so
// each turn evaluates only what is new (and /regen or a dropped turn re-evaluates from the first changed token).
class chat_session {
  public:
    chat_session(session& s, chat_format f, sampler_params sp, std::string system_prompt);

    // Adds the user message and generates the reply, streaming pieces through on_piece. Drops the oldest turns (the
    // system prompt stays) when the prompt plus `reserve` tokens would not fit. Throws tessera::error when even the
    // latest message alone cannot fit.
    chat_reply send(const std::string& user, const std::function<void(const std::string&)>& on_piece,
                    const std::atomic<bool>* stop = nullptr, int64_t max_tokens = -1);
    // Removes the last assistant reply and generates it again.
    chat_reply regenerate(const std::function<void(const std::string&)>& on_piece,
                          const std::atomic<bool>* stop = nullptr, int64_t max_tokens = -1);
    void clear();                            // forget every turn, keep the system prompt
    void set_system(const std::string& text); // replaces the system prompt (empty: none)
    const std::vector<chat_message>& messages() const { return messages_; }
    void set_messages(std::vector<chat_message> m); // e.g. /load
    int64_t tokens_in_context() const { return int64_t(cached_.size()); }
    int64_t n_ctx() const { return s_.n_ctx(); }
    chat_format format() const { return format_; }
    int64_t reserve = 256; // tokens kept free for the reply when fitting the prompt

  private:
    chat_reply generate(const std::function<void(const std::string&)>& on_piece, const std::atomic<bool>* stop,
                        int64_t max_tokens);
    std::vector<token> prompt_tokens() const;

    session& s_;
    chat_format format_;
    sampler_params sp_;
    sampler smp_;
    std::vector<chat_message> messages_;
    std::vector<token> cached_; // tokens in the KV cache, in order
};

} // namespace tessera
