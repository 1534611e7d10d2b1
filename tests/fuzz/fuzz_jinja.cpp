// fuzz_jinja.cpp: libFuzzer target for the Jinja engine (llm/jinja/). Input: fields separated by 0x01; the first is a
// template, each further one a message whose first byte picks its role (low 2 bits: system, user, assistant, tool;
// bit 2: an assistant message carries a tool call; bit 3: the content is a list of text parts) and whose rest is its
// content (any bytes, UTF-8 or not). The template is parsed and rendered with transformers' variables (one tool,
// enable_thinking and add_generation_prompt from the field count) under small limits: a failure must be one
// tessera::error "chat template: ..." line, and a second render (of one input in eight) must agree byte for byte.
#include "ggml-like/error.h"
#include "llm/jinja/jinja.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace tessera;
using ojson = nlohmann::ordered_json;

namespace {

std::string render_or_error(const jinja::template_& t, const ojson& ctx, const jinja::options& opt) {
    try {
        return "ok:" + jinja::render(t, ctx, opt);
    } catch (const error& e) {
        const std::string msg = e.what();
        if (msg.rfind("chat template: ", 0) != 0 || msg.find('\n') != std::string::npos) __builtin_trap();
        return "error:" + msg;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> fields(1);
    for (size_t i = 0; i < size; i++) {
        if (data[i] == 0x01)
            fields.emplace_back();
        else
            fields.back().push_back(char(data[i]));
    }
    jinja::template_ t;
    try {
        t = jinja::parse(fields[0]);
    } catch (const error& e) {
        const std::string msg = e.what();
        if (msg.rfind("chat template: line ", 0) != 0 || msg.find('\n') != std::string::npos) __builtin_trap();
        return 0;
    }

    static const char* const roles[] = {"system", "user", "assistant", "tool"};
    jinja::chat_inputs in;
    for (size_t i = 1; i < fields.size(); i++) {
        const std::string& f = fields[i];
        const uint8_t kind = f.empty() ? 1 : uint8_t(f[0]);
        const std::string content = f.empty() ? "" : f.substr(1);
        ojson m = {{"role", roles[kind & 3]}};
        if (kind & 8)
            m["content"] = ojson::array({{{"type", "text"}, {"text", content}}});
        else
            m["content"] = content;
        if ((kind & 3) == 2 && (kind & 4))
            m["tool_calls"] =
                ojson::array({{{"id", "call0001"},
                               {"type", "function"},
                               {"function", {{"name", "get_weather"}, {"arguments", {{"city", content}}}}}}});
        if ((kind & 3) == 3) m["tool_call_id"] = "call0001";
        in.messages.push_back(std::move(m));
    }
    static const ojson tools = ojson::array(
        {{{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Weather of a city."},
            {"parameters",
             {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}}});
    in.tools = tools;
    in.add_generation_prompt = fields.size() % 2 == 1;
    in.kwargs["enable_thinking"] = fields.size() % 4 < 2;
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    const ojson ctx = jinja::chat_context(in);

    jinja::options opt; // small, so an execution stays short (a real template with a few messages needs ~2000 steps)
    opt.max_steps = 5000;
    opt.max_output = 1 << 14;
    opt.max_memory = 8 << 20;
    opt.now = [] {
        std::tm tm{};
        tm.tm_year = 126;
        tm.tm_mday = 15;
        return tm;
    };
    const std::string once = render_or_error(t, ctx, opt);
    // determinism, checked on one input in eight (a second render doubles the cost of an execution)
    if (size % 8 == 0 && render_or_error(t, ctx, opt) != once) __builtin_trap();
    return 0;
}
