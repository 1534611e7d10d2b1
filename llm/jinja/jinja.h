// jinja.h: chat templates (tokenizer.chat_template) rendered byte for byte as Hugging Face transformers'
// apply_chat_template does: jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls and
// {% generation %}, transformers' tojson / raise_exception / strftime_now, python's semantics for values. Our own
// engine (lexer + parser in parser.cpp, evaluator.cpp, builtins.cpp, value.cpp); rendering is bounded in steps,
// nesting and memory, so a hostile template is one tessera::error.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tessera::jinja {

struct program;

// A parsed template; cheap to copy, immutable, may be rendered from several threads.
class template_ {
  public:
    template_() = default;
    const program& prog() const { return *p_; }
    bool empty() const { return !p_; }

  private:
    friend template_ parse(std::string_view source);
    std::shared_ptr<const program> p_;
};

struct options {
    std::function<std::tm()> now;   // strftime_now's clock; empty: the local time now
    size_t max_output = 16u << 20;  // bytes of output, and of any one string the template builds
    size_t max_memory = 512u << 20; // bytes of strings and lists made during one render (all of them, freed or
                                    // not: a bound on the work as much as on what is held)
    uint64_t max_steps = 2'000'000; // expressions, statements, filter calls (~0.3 s; a 400-turn chat on the
                                    // longest real template takes ~50k)
    int max_depth = 200;            // nested macro calls, loops and expressions
};

// Parses jinja2 syntax; a syntax error is a tessera::error "chat template: line N: ...".
template_ parse(std::string_view source);

// Renders with the given variables (a JSON object; key order is kept, as python's dicts keep it). Errors, including
// the template's raise_exception(msg), are a tessera::error "chat template: line N: msg".
std::string render(const template_& t, const nlohmann::ordered_json& context, const options& opt = {});

// The variables transformers passes to a chat template: messages, tools (null when none), documents (null),
// add_generation_prompt, bos_token, eos_token, then the extra keyword arguments (e.g. enable_thinking).
struct chat_inputs {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;                                     // null: none
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object(); // extra variables, override the above
    bool add_generation_prompt = true;
    std::string bos_token, eos_token;
};
nlohmann::ordered_json chat_context(const chat_inputs& in);

} // namespace tessera::jinja
