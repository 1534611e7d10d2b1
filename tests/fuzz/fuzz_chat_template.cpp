// fuzz_chat_template.cpp: libFuzzer target for llm/chat.cpp's template path, as chat uses it. Input: fields
// separated by 0x01; the first is a tokenizer.chat_template text, each further one a message whose first byte picks
// the role (system, user, assistant, or tool) and whose rest is the content. The template (and the ChatML fallback)
// renders the messages (with the generation prompt or not, by the field count) through the Jinja engine; the text is
// then tokenized as chat does (BOS once, special tokens parsed; BPE, SmolLM2's pre-tokenizer) and decoded. Template
// errors must be tessera::error; the Jinja engine alone has its own target (fuzz_jinja.cpp).
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
    static const char* const roles[] = {"system", "user", "assistant", "tool"};
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (size_t i = 1; i < fields.size(); i++) {
        const std::string& f = fields[i];
        msgs.push_back({{"role", roles[f.empty() ? 1 : uint8_t(f[0]) % 4]}, {"content", f.empty() ? "" : f.substr(1)}});
    }
    const bool gen = fields.size() % 2; // with or without the generation prompt, from the input
    const std::string bos = special_token_text(voc, voc.bos()), eos = special_token_text(voc, voc.eos());
    for (const std::string& source : {fields[0], std::string(chatml_template)}) {
        std::string prompt;
        try {
            const chat_template t(source, bos, eos);
            prompt = t.render(msgs, gen);
        } catch (const error&) {
            continue; // a template that does not parse or render is one error
        }
        try {
            const std::vector<token> ids = tokenize_chat_prompt(voc, prompt);
            (void)voc.detokenize(ids, true, true);
        } catch (const error&) {
        }
    }
    return 0;
}
