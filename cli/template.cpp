// template.cpp: `tessera template`: renders a model's chat template (tokenizer.chat_template, or a file) for a
// conversation, exactly as transformers' apply_chat_template would, and prints the text (or --json with its token
// count). Only the GGUF metadata is read.
#include "commands.h"
#include "options.h"

#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "llm/chat.h"
#include "llm/vocab.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace tessera::cli {

namespace {

using ojson = nlohmann::ordered_json;

struct template_options {
    std::string model;
    std::string template_file;
    std::string prompt;
    std::string system;
    std::string messages_file;
    std::string tools_file;
    std::string kwargs;
    bool no_generation_prompt = false;
    bool json = false;
};

ojson parse_json(const std::string& text, const std::string& what) {
    try {
        return ojson::parse(text);
    } catch (const nlohmann::json::exception& e) {
        std::string msg = e.what(); // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
        const size_t pos = msg.find("] ");
        throw error(fmt::format("{}: not valid JSON: {}", what, pos == std::string::npos ? msg : msg.substr(pos + 2)));
    }
}

// An OpenAI-style message list: objects with a string "role"; the rest is passed to the template as it is.
ojson read_messages(const std::string& path) {
    ojson m = parse_json(read_text_file(path), path);
    if (!m.is_array()) throw error(fmt::format("{}: expected a JSON array of messages, got {}", path, m.type_name()));
    for (size_t i = 0; i < m.size(); i++)
        if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string())
            throw error(fmt::format("{}: message {} is not an object with a string \"role\"", path, i));
    return m;
}

void template_main(const template_options& o, bool has_prompt, bool has_system) {
    if (has_prompt && !o.messages_file.empty()) throw error("give the conversation as -p or --messages, not both");
    if (!has_prompt && o.messages_file.empty()) throw error("no conversation: give -p TEXT or --messages FILE.json");
    ojson messages = ojson::array();
    if (has_system) messages.push_back({{"role", "system"}, {"content", o.system}});
    if (has_prompt) {
        messages.push_back({{"role", "user"}, {"content", o.prompt}});
    } else {
        for (auto& m : read_messages(o.messages_file)) messages.push_back(std::move(m));
    }
    ojson tools = nullptr;
    if (!o.tools_file.empty()) {
        tools = parse_json(read_text_file(o.tools_file), o.tools_file);
        if (!tools.is_array()) throw error(fmt::format("{}: expected a JSON array of tools", o.tools_file));
    }
    ojson kwargs = ojson::object();
    if (!o.kwargs.empty()) {
        kwargs = parse_json(o.kwargs, "--chat-template-kwargs");
        if (!kwargs.is_object())
            throw error("--chat-template-kwargs: expected a JSON object such as {\"enable_thinking\": false}");
    }

    const gguf_file file = gguf_file::open(o.model);
    const vocab voc = vocab::from_gguf(file);
    std::string source;
    if (!o.template_file.empty()) {
        source = read_text_file(o.template_file);
    } else {
        source = model_chat_template(file);
        if (source.empty())
            throw error(
                fmt::format("{}: the model has no tokenizer.chat_template (give --chat-template-file)", o.model));
    }
    const chat_template tmpl(source, special_token_text(voc, voc.bos()), special_token_text(voc, voc.eos()));
    const std::string text = tmpl.render(messages, !o.no_generation_prompt, tools, kwargs);
    if (o.json) {
        const ojson out = {{"text", text}, {"tokens", tokenize_chat_prompt(voc, text).size()}};
        fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
        std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
}

} // namespace

void add_template(CLI::App& app) {
    auto o = std::make_shared<template_options>();
    CLI::App* cmd = app.add_subcommand(
        "template", "Render the model's chat template for a conversation, as transformers' apply_chat_template does");
    cmd->add_option("-m,--model", o->model, "GGUF model (its vocabulary and tokenizer.chat_template are read)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--chat-template-file", o->template_file, "Use this Jinja template instead of the model's");
    CLI::Option* p = cmd->add_option("-p,--prompt", o->prompt, "One user message");
    CLI::Option* sys = cmd->add_option("--system-prompt,--system", o->system, "A system message first (also -sys)");
    cmd->add_option("--messages", o->messages_file,
                    "The conversation as a JSON file: an OpenAI-style list of {\"role\", \"content\", ...} messages");
    cmd->add_option("--tools", o->tools_file, "Tools as a JSON file: a list of {\"type\": \"function\", ...}");
    cmd->add_option("--chat-template-kwargs", o->kwargs,
                    "Extra template variables as a JSON object, e.g. '{\"enable_thinking\":false}'");
    cmd->add_flag("--no-add-generation-prompt", o->no_generation_prompt,
                  "Do not end with the opening of the assistant's turn");
    cmd->add_flag("--json", o->json, "Print {\"text\", \"tokens\"} (tokens: as chat would evaluate the text)");
    cmd->footer("Example:\n  tessera template -m models/SmolLM2-135M-Instruct.Q4_1.gguf -sys \"Be brief.\" -p \"Hi\"\n"
                "  <|im_start|>system\n  Be brief.<|im_end|>\n  <|im_start|>user\n  Hi<|im_end|>\n"
                "  <|im_start|>assistant");
    cmd->callback([o, p, sys] { template_main(*o, p->count() > 0, sys->count() > 0); });
}

} // namespace tessera::cli
