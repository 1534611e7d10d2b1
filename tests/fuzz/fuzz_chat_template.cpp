// fuzz_chat_template.cpp: libFuzzer target for llm/chat.cpp's template handling. Input: fields separated by 0x01; the
// first is a tokenizer.chat_template text (format detection, default system message), each further one a message
// whose first byte picks the role (system, user, assistant, or an odd one) and whose rest is the content. Every
// format renders the messages (with the generation prompt or not, by the field count); the rendering in the detected
// format is then tokenized as chat does (BOS added, special tokens parsed; BPE, SmolLM2's pre-tokenizer) and decoded.
#include "fuzz_vocab.h"

#include "llm/chat.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const vocab voc = fuzz::bpe_vocab("smollm");
    std::vector<std::string> fields(1);
    for (size_t i = 0; i < size; i++) {
        if (data[i] == 0x01)
            fields.emplace_back();
        else
            fields.back().push_back(char(data[i]));
    }
    const std::string& jinja = fields[0];
    const chat_format detected = detect_chat_format(jinja);
    const std::string sys = template_default_system(jinja);
    if (sys.size() > jinja.size()) __builtin_trap(); // it is a piece of the template

    static const char* const roles[] = {"system", "user", "assistant", "tool"};
    std::vector<chat_message> msgs;
    if (!sys.empty()) msgs.push_back({"system", sys});
    for (size_t i = 1; i < fields.size(); i++) {
        const std::string& f = fields[i];
        msgs.push_back({roles[f.empty() ? 1 : uint8_t(f[0]) % 4], f.empty() ? "" : f.substr(1)});
    }
    const bool gen = fields.size() % 2; // with or without the generation prompt, from the input
    for (chat_format f : {chat_format::chatml, chat_format::llama2, chat_format::llama3, chat_format::mistral,
                          chat_format::gemma, chat_format::zephyr, chat_format::phi3}) {
        chat_format named;
        if (!chat_format_from_name(chat_format_name(f), named) || named != f) __builtin_trap();
        if (f != detected) (void)render_chat(f, msgs, gen);
    }
    const std::string prompt = render_chat(detected, msgs, gen);
    try {
        const std::vector<token> ids = voc.tokenize(prompt, true, true);
        (void)voc.detokenize(ids, true, true);
    } catch (const error&) {
    }
    return 0;
}
