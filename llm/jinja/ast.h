// ast.h: the parsed template: expression and statement nodes as jinja2's parser builds them (parser.cpp), walked by
// evaluator.cpp. Every node keeps its source line for error messages.
#pragma once

#include "llm/jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::jinja {

enum class ex : uint8_t {
    literal, // lit
    name,    // name
    attr,    // kids[0].name
    item,    // kids[0][kids[1]]
    slice,   // kids[0][kids[1]:kids[2]:kids[3]], absent parts null
    call,    // kids[0](args)
    filter,  // kids[0] | name(args); kids empty in a filter block or a block set (the body is the subject)
    test,    // kids[0] is [not] name(args)
    neg,     // -kids[0]
    pos,     // +kids[0]
    not_,    // not kids[0]
    binary,  // kids[0] op kids[1]
    and_,    // kids[0] and kids[1]
    or_,     // kids[0] or kids[1]
    compare, // kids[0] ops[0] kids[1] ops[1] kids[2] ... (python's chained comparison)
    cond,    // kids[0] if kids[1] else kids[2] (kids[2] null: undefined)
    list,    // [kids...]
    tuple,   // (kids...)
    dict,    // {kids[0]: kids[1], ...}
    concat,  // kids[0] ~ kids[1] ~ ...
};

enum class binop : uint8_t { add, sub, mul, div, floordiv, mod, pow };

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct arg_list {
    std::vector<expr_ptr> pos;
    std::vector<std::pair<std::string, expr_ptr>> kw;
    expr_ptr star;  // *args
    expr_ptr star2; // **kwargs
};

struct expr {
    ex type = ex::literal;
    int line = 0;
    int depth = 1; // 1 + the deepest child: the evaluator's recursion is bounded by the parser's depth limit
    value lit;
    std::string name;
    std::vector<expr_ptr> kids;
    std::vector<std::string> ops; // compare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
    binop op = binop::add;
    bool negated = false; // test: is not
    arg_list args;        // call, filter, test
};

// An assignment target: a name, or a namespace attribute (`ns.x`, in set statements only).
struct target {
    std::string name;
    std::string attr; // non-empty: name.attr
};

enum class st : uint8_t {
    text,         // text
    print,        // {{ e }}
    if_,          // conds[i] -> bodies[i]; one more body than conds is the else
    for_,         // for targets in e [if cond] [recursive] body [else else_body]
    set,          // set targets = e
    set_block,    // set targets[0] [| filters] body endset
    macro,        // macro name(params) body
    call_block,   // call(params) e body: e is a call, the body becomes caller()
    filter_block, // filter filters body
    break_,
    continue_,
    generation, // transformers' {% generation %}: renders its body
    with,       // with targets[i] = conds[i], ... body: the values from the outer scope, the body in a new one
    block,      // block name [scoped] body: rendered in place, seeing the template's top-level names (scoped: all)
    autoescape, // autoescape e body: {{ }} output HTML-escaped while e is true
    load,       // include / import / from / extends: jinja2 fails when it runs (no loader); so do we
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body = std::vector<stmt_ptr>;

struct stmt {
    st type = st::text;
    int line = 0;
    std::string text;
    expr_ptr e;
    expr_ptr cond;
    std::string name;            // macro
    std::vector<target> targets; // for, set, set_block
    bool recursive = false;      // for
    bool catch_varargs = false;  // macro / call block: the body reads varargs, kwargs, caller
    bool catch_kwargs = false;
    bool uses_caller = false;
    std::vector<expr_ptr> conds;
    std::vector<body> bodies;
    body main, else_body;
    std::vector<std::pair<std::string, expr_ptr>> params; // default null when none
    std::vector<expr_ptr> filters;                        // ex::filter with no subject
};

// The template as parsed.
struct program {
    body root;
};

// Parses source (jinja2's syntax with trim_blocks, lstrip_blocks and one trailing newline dropped) into a program;
// fails with eval_error naming the line (parser.cpp). An unknown filter or test is an error here, as jinja2's compiler
// makes it one, unless it sits in an if statement or a conditional expression (then it fails when it runs).
std::unique_ptr<program> parse_program(std::string_view source);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

} // namespace tessera::jinja
