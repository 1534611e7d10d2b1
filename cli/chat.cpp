// chat.cpp: `tessera chat`: an interactive conversation in the terminal (readline line editing and history when built
// with it), or, when stdin is not a terminal, one message per input line answered in turn until end of input.
// Ctrl-C stops a reply; a second Ctrl-C at an empty prompt exits. Commands start with '/'. The prompt is the model's
// Jinja chat template (llm/chat.h), or --chat-template[-file].
#include "commands.h"
#include "options.h"

#include "ggml-like/atomic_file.h"
#include "ggml-like/error.h"
#include "llm/chat.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <cerrno>
#include <sys/select.h>
#include <unistd.h>

#ifdef TESSERA_HAS_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

namespace tessera::cli {

namespace {

struct chat_options {
    model_options m;
    sampler_params s;
    std::string system;
    std::string template_text; // --chat-template: Jinja source
    std::string template_file; // --chat-template-file
    std::string template_kwargs;
    int reasoning_budget = -1;
    int n_predict = -1;
    bool timings = false;
    bool no_history = false;
};

std::atomic<bool> g_interrupt{false}; // set by SIGINT, cleared by whoever handles it
std::atomic<bool> g_generating{false};

void on_sigint(int) { g_interrupt.store(true); }

void install_sigint() {
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; // no SA_RESTART: a blocked read returns EINTR so the prompt can react
    sigaction(SIGINT, &sa, nullptr);
}

const char* help_text =
    "commands:\n"
    "  /help           this list\n"
    "  /clear          forget the conversation (the system prompt stays)\n"
    "  /regen          answer the last message again\n"
    "  /system TEXT    set the system prompt (and start over)\n"
    "  /save FILE      save the conversation as JSON\n"
    "  /load FILE      load a conversation saved with /save\n"
    "  /stats          context use and speed\n"
    "  /exit           quit (also Ctrl-D; Ctrl-C twice at an empty prompt)\n"
    "a line ending in \\ continues on the next line; Ctrl-C stops a reply\n";

// The longest message chat takes (lines joined by trailing backslashes included): far more text than any context
// holds, so a longer one (a file piped in by mistake) is one error line instead of memory filled on the way to it.
constexpr size_t max_message_bytes = size_t(64) << 20;
[[noreturn]] void message_too_long() {
    throw error(fmt::format("a message longer than {} MiB (more than any context holds)", max_message_bytes >> 20));
}

// Reads one line; returns false at end of input. `interrupted` is set when Ctrl-C arrived while reading.
class line_reader {
  public:
    line_reader(bool tty, bool history) : tty_(tty) {
#ifdef TESSERA_HAS_READLINE
        if (tty_) {
            rl_catch_signals = 0; // Ctrl-C is ours: see read()
            if (history) {
                if (const char* home = std::getenv("HOME")) {
                    history_path_ = std::string(home) + "/.tessera_history";
                    read_history(history_path_.c_str());
                }
            }
        }
#else
        (void)history;
#endif
    }
    ~line_reader() {
#ifdef TESSERA_HAS_READLINE
        if (!history_path_.empty()) {
            write_history(history_path_.c_str());
            history_truncate_file(history_path_.c_str(), 1000);
        }
#endif
    }

    // Reads one line; false at end of input. On Ctrl-C: `interrupted`, the partial line dropped, and `was_empty`
    // telling whether anything had been typed.
    bool read(const char* prompt, std::string& line, bool& interrupted, bool& was_empty) {
        interrupted = false;
        was_empty = true;
        g_interrupt.store(false);
        line.clear();
#ifdef TESSERA_HAS_READLINE
        if (tty_) {
            // readline's callback interface inside our own select() loop: a SIGINT interrupts select() (no
            // SA_RESTART), which lets us drop the line at once instead of at the next key press
            static char* got;
            static bool have;
            got = nullptr;
            have = false;
            rl_callback_handler_install(prompt, [](char* l) {
                got = l;
                have = true;
                rl_callback_handler_remove();
            });
            while (!have) {
                fd_set fds;
                FD_ZERO(&fds);
                FD_SET(STDIN_FILENO, &fds);
                if (::select(STDIN_FILENO + 1, &fds, nullptr, nullptr, nullptr) < 0) {
                    if (errno == EINTR && g_interrupt.exchange(false)) {
                        was_empty = rl_end == 0;
                        rl_replace_line("", 0);
                        rl_redisplay();
                        rl_callback_handler_remove();
                        std::fputc('\n', stdout);
                        interrupted = true;
                        return true;
                    }
                    continue;
                }
                rl_callback_read_char();
            }
            if (!got) return false; // Ctrl-D
            const bool too_long = std::strlen(got) > max_message_bytes;
            if (!too_long) line = got;
            std::free(got);
            if (too_long) message_too_long();
            if (!line.empty()) add_history(line.c_str());
            return true;
        }
#endif
        if (tty_) {
            std::fputs(prompt, stdout);
            std::fflush(stdout);
        }
        for (;;) {
            const int c = std::fgetc(stdin);
            if (c == EOF) {
                if (g_interrupt.exchange(false)) {
                    std::clearerr(stdin);
                    interrupted = true;
                    was_empty = line.empty();
                    if (tty_) std::fputc('\n', stdout);
                    line.clear();
                    return true;
                }
                return !line.empty();
            }
            if (c == '\n') return true;
            if (line.size() == max_message_bytes) message_too_long();
            line.push_back(char(c));
        }
    }

  private:
    bool tty_;
    std::string history_path_;
};

void save_conversation(const chat_session& c, const std::string& path) {
    // replies can end inside a UTF-8 sequence (a byte token); such bytes are saved as U+FFFD
    const std::string text = c.messages().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    atomic_file f(path); // the old file stays until the new one is complete
    f.write(text);
    f.commit();
}

// A conversation saved with /save, or any OpenAI-style message list: objects with a string "role".
nlohmann::ordered_json load_conversation(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw error(fmt::format("{}: cannot open", path));
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(f);
    } catch (const std::exception& e) {
        throw error(fmt::format("{}: not JSON: {}", path, e.what()));
    }
    if (!j.is_array()) throw error(fmt::format("{}: expected a JSON array of messages", path));
    for (const auto& m : j)
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw error(fmt::format("{}: each message needs a string field role", path));
    return j;
}

// The template chat uses: --chat-template TEXT, --chat-template-file F, or the model's (ChatML when it has none); a
// short description for the banner and /stats.
chat_template choose_template(const chat_options& o, const model& mdl, std::string& what) {
    const vocab& v = mdl.voc;
    const std::string bos = special_token_text(v, v.bos()), eos = special_token_text(v, v.eos());
    if (!o.template_text.empty() && !o.template_file.empty())
        throw error("give --chat-template or --chat-template-file, not both");
    if (!o.template_text.empty()) {
        what = "from --chat-template";
        return chat_template(o.template_text, bos, eos);
    }
    if (!o.template_file.empty()) {
        what = o.template_file;
        return chat_template(read_text_file(o.template_file), bos, eos);
    }
    std::string src = model_chat_template(mdl.file);
    what = src.empty() ? "ChatML (the model has none)" : "the model's";
    return chat_template(src.empty() ? chatml_template : std::move(src), bos, eos);
}

// --chat-template-kwargs, and --reasoning-budget 0 as enable_thinking=false where the template reads it
nlohmann::ordered_json template_kwargs(const chat_options& o, const chat_template& t) {
    nlohmann::ordered_json kw = nlohmann::ordered_json::object();
    if (!o.template_kwargs.empty()) {
        try {
            kw = nlohmann::ordered_json::parse(o.template_kwargs);
        } catch (const nlohmann::json::exception& e) {
            const std::string msg = e.what();
            const size_t at = msg.find("] ");
            throw error(fmt::format("--chat-template-kwargs: not valid JSON: {}",
                                    at == std::string::npos ? msg : msg.substr(at + 2)));
        }
        if (!kw.is_object()) throw error("--chat-template-kwargs: expected a JSON object such as {\"enable_thinking\": false}");
    }
    if (o.reasoning_budget == 0 && t.mentions("enable_thinking") && !kw.contains("enable_thinking"))
        kw["enable_thinking"] = false;
    return kw;
}

void chat_main(const chat_options& o) {
    const bool tty = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
    auto mdl = model::load(o.m.model);
    const device_choice dev = choose_device(o.m, mdl.get());
    session_params sp = o.m.session;
    sp.device = dev.device;
    session sess(*mdl, sp);
    if (!dev.note.empty() && (tty || o.m.verbose)) fmt::print(stderr, "{}\n", dev.note);

    std::string template_what;
    chat_template tmpl = choose_template(o, *mdl, template_what);
    nlohmann::ordered_json kwargs = template_kwargs(o, tmpl);
    chat_session chat(sess, std::move(tmpl), o.s, o.system, std::move(kwargs));
    if (tty)
        fmt::print(stderr, "tessera chat: {} (chat template: {}; context {}); /help for commands, Ctrl-D to quit\n",
                   mdl->name, template_what, sess.n_ctx());
    install_sigint();
    line_reader reader(tty, !o.no_history);

    auto stream = [&](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    };
    auto after_reply = [&](const chat_reply& r) {
        if (r.interrupted) fmt::print(stderr, "\n[stopped]");
        if (r.context_full) fmt::print(stderr, "\n[context full: the oldest turns will be dropped next time]");
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (o.timings)
            fmt::print(stderr, "[prompt {} tokens, {:.1f} tok/s | reply {} tokens, {:.1f} tok/s]\n", r.n_prompt_eval,
                       r.prompt_seconds > 0 ? double(r.n_prompt_eval) / r.prompt_seconds : 0.0, r.n_generated,
                       r.gen_seconds > 0 ? double(r.n_generated) / r.gen_seconds : 0.0);
    };
    auto respond = [&](auto&& fn) {
        g_interrupt.store(false);
        g_generating.store(true);
        try {
            chat_reply r = fn();
            g_generating.store(false);
            if (r.n_dropped_turns > 0)
                fmt::print(stderr, "[context: dropped the {} oldest turn{} to make room]\n", r.n_dropped_turns,
                           r.n_dropped_turns > 1 ? "s" : "");
            after_reply(r);
        } catch (const error& e) {
            g_generating.store(false);
            if (!tty) throw; // main prints the one error line; a script learns about it through the exit status
            fmt::print(stderr, "error: {}\n", e.what());
        }
    };

    bool last_was_empty_interrupt = false;
    std::string line;
    bool interrupted, was_empty;
    while (true) {
        if (!reader.read(tty ? "> " : "", line, interrupted, was_empty)) break;
        if (interrupted) {
            if (!was_empty) { // Ctrl-C on a half-typed line just drops the line
                last_was_empty_interrupt = false;
                continue;
            }
            if (last_was_empty_interrupt) break;
            last_was_empty_interrupt = true;
            fmt::print(stderr, "(Ctrl-C again to quit)\n");
            continue;
        }
        last_was_empty_interrupt = false;
        // a trailing backslash continues the message on the next line
        while (!line.empty() && line.back() == '\\') {
            line.back() = '\n';
            std::string more;
            if (!reader.read(tty ? ". " : "", more, interrupted, was_empty) || interrupted) break;
            if (line.size() + more.size() > max_message_bytes) message_too_long();
            line += more;
        }
        if (line.empty()) continue;
        if (line[0] == '/') {
            const size_t sp_ = line.find(' ');
            const std::string cmd = line.substr(0, sp_);
            const std::string arg = sp_ == std::string::npos ? "" : line.substr(sp_ + 1);
            if (cmd == "/exit" || cmd == "/quit") break;
            if (cmd == "/help") {
                fmt::print("{}", help_text);
            } else if (cmd == "/clear") {
                chat.clear();
                fmt::print(stderr, "[conversation cleared]\n");
            } else if (cmd == "/regen") {
                respond([&] { return chat.regenerate(stream, &g_interrupt, o.n_predict); });
            } else if (cmd == "/system") {
                chat.clear();
                chat.set_system(arg);
                fmt::print(stderr, "[system prompt {}; conversation cleared]\n", arg.empty() ? "removed" : "set");
            } else if (cmd == "/save" || cmd == "/load") {
                if (arg.empty()) {
                    fmt::print(stderr, "error: {} needs a file name\n", cmd);
                    continue;
                }
                try {
                    if (cmd == "/save") {
                        save_conversation(chat, arg);
                        fmt::print(stderr, "[saved {} messages to {}]\n", chat.messages().size(), arg);
                    } else {
                        chat.set_messages(load_conversation(arg));
                        fmt::print(stderr, "[loaded {} messages from {}]\n", chat.messages().size(), arg);
                    }
                } catch (const error& e) {
                    fmt::print(stderr, "error: {}\n", e.what());
                }
            } else if (cmd == "/stats") {
                fmt::print("context: {} of {} tokens used, {} messages, template {}, backend {}\n",
                           chat.tokens_in_context(), chat.n_ctx(), chat.messages().size(), template_what,
                           sess.be().name());
            } else {
                fmt::print(stderr, "unknown command {} (/help lists them)\n", cmd);
            }
            std::fflush(stdout); // a program driving chat through pipes waits for this answer before its next line
            continue;
        }
        respond([&] { return chat.send(line, stream, &g_interrupt, o.n_predict); });
    }
    if (tty) std::fputc('\n', stdout);
}

} // namespace

void add_chat(CLI::App& app) {
    auto o = std::make_shared<chat_options>();
    CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (or answer stdin line by line)");
    add_model_options(*cmd, o->m);
    add_sampling_options(*cmd, o->s);
    cmd->add_option("--system-prompt", o->system, "System prompt (also -sys)");
    cmd->add_option("--chat-template", o->template_text,
                    "A Jinja chat template to use instead of the model's tokenizer.chat_template");
    cmd->add_option("--chat-template-file", o->template_file, "Read the Jinja chat template from this file");
    cmd->add_option("--chat-template-kwargs", o->template_kwargs,
                    "Extra template variables as a JSON object, e.g. '{\"enable_thinking\":false}'");
    cmd->add_option("--reasoning-budget", o->reasoning_budget,
                    "-1: think as the model likes; 0: no thinking (enable_thinking=false where the template has it)")
        ->check(CLI::IsMember({-1, 0}))
        ->capture_default_str();
    cmd->add_option("-n,--n-predict", o->n_predict, "Most tokens per reply; -1 = until end of turn")->capture_default_str();
    cmd->add_flag("--timings", o->timings, "Print prompt and reply speed after each reply");
    cmd->add_flag("--no-history", o->no_history, "Do not read or write ~/.tessera_history");
    cmd->footer("Examples:\n  tessera chat -m models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
                "  printf 'Hi!\\nWhat is 2+2?\\n' | tessera chat -m models/SmolLM2-135M-Instruct.Q4_1.gguf --temp 0");
    cmd->callback([o] { chat_main(*o); });
}

} // namespace tessera::cli
