// main.cpp: builds the tessera app, registers one subcommand per file, and turns errors into "error: ..." + exit 1.
#include "commands.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>
#include <exception>

namespace {

// CLI11's message for a bad command line, as "<flag>: <what is wrong>".
std::string describe_parse_error(const CLI::ParseError& e, const std::vector<std::string>& args) {
    std::string msg = e.what();
    auto starts = [&](std::string_view p) { return msg.rfind(p, 0) == 0; };
    if (starts("Could not convert: ")) { // "Could not convert: --temp = abc"
        const std::string rest = msg.substr(19);
        const size_t eq = rest.find(" = ");
        if (eq != std::string::npos)
            return rest.substr(0, eq) + ": '" + rest.substr(eq + 3) + "' is not a valid value";
    }
    // CLI::Range on an integer flag: "--ctx-size: Value abc not in range 0 to 16777216" (also for a value that is no
    // number at all, which it checks before converting)
    if (const size_t v = msg.find(": Value "), r = msg.find(" not in range ");
        v != std::string::npos && r != std::string::npos && v < r) {
        const std::string flag = msg.substr(0, v), value = msg.substr(v + 8, r - v - 8);
        const std::string range = msg.substr(r + 14);
        const size_t to = range.find(" to ");
        const size_t sign = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
        const bool integer = sign < value.size() && value.find_first_not_of("0123456789", sign) == std::string::npos;
        if (to != std::string::npos) {
            if (!integer) return flag + ": '" + value + "' is not a whole number";
            return flag + ": " + value + " is out of range (" + range.substr(0, to) + " to " + range.substr(to + 4) +
                   ")";
        }
    }
    if (starts("The following argument")) { // "... were not expected: 3 --foo"
        const size_t colon = msg.find(": ");
        return "unexpected argument(s): " + (colon == std::string::npos ? msg : msg.substr(colon + 2));
    }
    const std::string required = " is required";
    if (msg.size() > required.size() && msg.compare(msg.size() - required.size(), required.size(), required) == 0 &&
        msg.find(' ') == msg.size() - required.size())
        return msg.substr(0, msg.size() - required.size()) + ": missing (required)";
    if (starts("A subcommand is required")) {
        if (args.size() > 1 && !args[1].empty() && args[1][0] != '-') return args[1] + ": unknown subcommand";
        return "a subcommand is required (run, chat, perplexity, bench, compare, quantize, info, tokenize, template)";
    }
    if (msg.find(" required ") != std::string::npos && msg.find(" missing") != std::string::npos) {
        const size_t colon = msg.find(": "); // "--n-predict: 1 required INT:INT in [...] missing"
        if (colon != std::string::npos) return msg.substr(0, colon) + ": a value is missing";
    }
    if (msg.find("At Most 1 required but received") != std::string::npos) {
        const size_t colon = msg.find(": ");
        if (colon != std::string::npos) return msg.substr(0, colon) + ": given more than once";
    }
    return msg;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"tessera: GGUF LLM inference on CPU and CUDA", "tessera"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every subcommand");
    tessera::cli::add_run(app);
    tessera::cli::add_info(app);
    tessera::cli::add_tokenize(app);
    tessera::cli::add_quantize(app);
    tessera::cli::add_perplexity(app);
    tessera::cli::add_chat(app);
    tessera::cli::add_bench(app);
    tessera::cli::add_compare(app);
    tessera::cli::add_template(app);
    // llama.cpp spells some flags with one dash and several letters (-ngl, -sys); CLI11 takes one letter after a
    // single dash, so those are rewritten to their long forms first.
    std::vector<std::string> args(argv, argv + argc);
    static const std::pair<const char*, const char*> long_forms[] = {{"-ngl", "--n-gpu-layers"},
                                                                     {"-sys", "--system-prompt"},
                                                                     {"-sm", "--split-mode"},
                                                                     {"-ts", "--tensor-split"},
                                                                     {"-mg", "--main-gpu"}};
    for (auto& a : args)
        for (const auto& [short_form, long_form] : long_forms) {
            const std::string sf = short_form;
            if (a == sf) a = long_form;
            else if (a.rfind(sf + "=", 0) == 0) a = long_form + a.substr(sf.size());
        }
    std::vector<char*> argp;
    for (auto& a : args) argp.push_back(a.data());
    try {
        app.parse(int(argp.size()), argp.data());
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e); // --help, --help-all
        std::string sub;
        for (const CLI::App* a : app.get_subcommands()) sub = a->get_name();
        fmt::print(stderr, "error: {} (see 'tessera {}--help')\n", describe_parse_error(e, args),
                   sub.empty() ? "" : sub + " ");
        return 1;
    } catch (const tessera::error& e) {
        std::fflush(stdout);
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    return 0;
}
