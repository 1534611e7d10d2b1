// test_jinja.cpp: the Jinja chat-template engine (llm/jinja/). (a) every real template of tests/data/templates/ with
// every conversation of conversations.json, byte for byte against python's jinja2 configured as transformers'
// apply_chat_template (expected/, written by tests/ref/render_templates.py; an .error there must be an error here);
// (b) one test per feature, expected strings computed with that same python environment; (c) broken templates,
// the sandbox and the limits: each one tessera::error "chat template: line N: ...", quickly.
#include "helpers.h"

#include "ggml-like/error.h"
#include "llm/jinja/jinja.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using namespace tessera;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

const fs::path templates_dir = TESSERA_TEMPLATES;

// the pinned clock of render_templates.py: 2026-01-15 10:30:05 (a Thursday)
std::tm pinned_now() {
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_hour = 10;
    tm.tm_min = 30;
    tm.tm_sec = 5;
    tm.tm_wday = 4;
    tm.tm_yday = 14;
    return tm;
}

jinja::options pinned_options() {
    jinja::options o;
    o.now = pinned_now;
    return o;
}

// "first difference at byte N (line L): expected «...» got «...»", with some context either side
std::string describe_diff(const std::string& want, const std::string& got) {
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) i++;
    const size_t line = size_t(std::count(want.begin(), want.begin() + long(i), '\n')) + 1;
    const size_t from = i > 60 ? i - 60 : 0;
    auto show = [&](const std::string& s) {
        std::string piece = s.substr(std::min(from, s.size()), 120);
        std::string out;
        for (char c : piece) out += c == '\n' ? std::string("\\n") : std::string(1, c);
        return out;
    };
    return "sizes " + std::to_string(want.size()) + " (expected) vs " + std::to_string(got.size()) +
           "; first difference at byte " + std::to_string(i) + " (line " + std::to_string(line) + ")\n  expected: «" +
           show(want) + "»\n  got:      «" + show(got) + "»";
}

struct template_case {
    std::string tmpl, conv;
};

std::vector<template_case> all_cases() {
    std::vector<template_case> out;
    if (!fs::exists(templates_dir / "expected")) return out;
    for (const auto& e : fs::directory_iterator(templates_dir / "expected")) {
        const std::string stem = e.path().stem().string(); // <template>.<conversation>
        const size_t dot = stem.rfind('.');
        out.push_back({stem.substr(0, dot), stem.substr(dot + 1)});
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.tmpl != b.tmpl ? a.tmpl < b.tmpl : a.conv < b.conv; });
    return out;
}

std::string case_name(const testing::TestParamInfo<template_case>& info) {
    std::string n = info.param.tmpl + "__" + info.param.conv;
    for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return n;
}

// the render exactly as render_templates.py does it
std::string render_case(const template_case& c) {
    const ojson convs = ojson::parse(test::read_file((templates_dir / "conversations.json").string()));
    const ojson& conv = convs.at(c.conv);
    jinja::chat_inputs in;
    in.messages = conv.at("messages");
    if (conv.contains("tools")) in.tools = conv.at("tools");
    if (conv.contains("kwargs")) in.kwargs = conv.at("kwargs");
    in.add_generation_prompt = conv.at("add_generation_prompt").get<bool>();
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    const jinja::template_ t = jinja::parse(test::read_file((templates_dir / (c.tmpl + ".jinja")).string()));
    return jinja::render(t, jinja::chat_context(in), pinned_options());
}

class real_templates : public testing::TestWithParam<template_case> {};

// the variables of the feature tests below (tests/ref/render_templates.py's environment rendered the same)
const char* const default_context = R"({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content":
"hi <there> & 'q'"}, {"role": "assistant", "content": "ok", "tool_calls": [{"function": {"name": "f", "arguments": {"a":
1, "b": [1, 2.5, "x"]}}}]}], "n": 3, "f": 2.5, "s": "Hello World", "l": [3, 1, 2], "d": {"b": 1, "a": 2}, "t": true,
"none": null, "u": "Grüße 👋 ΑΣ ß", "e": ""})";

struct feature_case {
    const char* tmpl;
    const char* want; // null: jinja2 raises, so must we (a tessera::error naming the line)
};

// Renders each template with default_context and compares with what python's jinja2 printed (or raised).
void check_cases(const std::vector<feature_case>& cases) {
    const ojson ctx = ojson::parse(default_context);
    for (const feature_case& c : cases) {
        SCOPED_TRACE(c.tmpl);
        std::string got;
        try {
            got = jinja::render(jinja::parse(c.tmpl), ctx, pinned_options());
        } catch (const error& e) {
            if (c.want)
                ADD_FAILURE() << "jinja2 renders «" << c.want << "» but we fail: " << e.what();
            else
                EXPECT_NE(std::string(e.what()).find("chat template: line "), std::string::npos) << e.what();
            continue;
        }
        if (!c.want)
            ADD_FAILURE() << "jinja2 fails but we render «" << got << "»";
        else if (got != c.want)
            ADD_FAILURE() << describe_diff(c.want, got);
    }
}

void PrintTo(const template_case& c, std::ostream* os) {
    *os << c.tmpl << " x " << c.conv;
}

} // namespace

TEST_P(real_templates, renders_as_transformers) {
    const template_case& c = GetParam();
    const fs::path txt = templates_dir / "expected" / (c.tmpl + "." + c.conv + ".txt");
    const fs::path err = templates_dir / "expected" / (c.tmpl + "." + c.conv + ".error");
    if (fs::exists(err)) {
        try {
            const std::string got = render_case(c);
            ADD_FAILURE() << "jinja2 fails (" << test::read_file(err.string()) << ") but we rendered " << got.size()
                          << " bytes";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find("chat template: line "), std::string::npos) << e.what();
        }
        return;
    }
    const std::string want = test::read_file(txt.string());
    std::string got;
    try {
        got = render_case(c);
    } catch (const error& e) {
        FAIL() << "jinja2 renders " << want.size() << " bytes but we fail: " << e.what();
    }
    if (got != want) ADD_FAILURE() << describe_diff(want, got);
}

INSTANTIATE_TEST_SUITE_P(all, real_templates, testing::ValuesIn(all_cases()), case_name);

TEST(real_templates_data, all_cases_present) {
    // 72 templates x 5 conversations + the thinking pair where the template reads enable_thinking
    EXPECT_EQ(all_cases().size(), 402u);
}

// ---- (b) features, each against python's jinja2 (transformers' environment, jinja2 3.1.6, python 3.11) ----

TEST(jinja_features, whitespace_control) {
    check_cases({
        {"a\n  {% if true %}\n  b\n  {% endif %}\n  c\n{# comment #}\nd {#- x -#} e\n", "a\n  b\n  c\nde"},
        {"  {{ 'x' }}  \n  {%- if true -%}  y  {%- endif -%}  \n z", "  xyz"},
        {"{%+ if true %}x{% endif +%}\ny", "x\ny"},
        {"line1\n    {% set x = 1 %}\nline2", "line1\nline2"},
        {"{{- '  a  ' -}}\n\n{{ 'b' }}", "  a  b"},
        {"a\n\t {% if true %}\nb\n\t {% endif %}\nc", "a\nb\nc"},
        {"x\r\ny\r\n{% if true %}\r\nz\r\n{% endif %}\r\n", "x\ny\nz\n"},
        {"  {% raw %}  {{ x }}  {% endraw %}  ", "  {{ x }}    "},
        {"{% for i in l %}\n  {{ i }}\n{% endfor %}\n\n", "  3\n  1\n  2\n"},
        {"a {{ 'b' }} {# c #}\n{%- if true %} d {% endif -%}\n e", "a b  d e"},
        {"{% macro m() -%}\n  body\n{%- endmacro %}[{{ m() }}]", "[body]"},
    });
}

TEST(jinja_features, if_elif_else) {
    check_cases({
        {"{% if n > 5 %}a{% elif n > 2 %}b{% else %}c{% endif %}", "b"},
        {"{% if none %}a{% elif e %}b{% else %}c{% endif %}", "c"},
        {"{% if l and not e %}yes{% endif %}{% if [] or {} or '' or 0 or 0.0 or none %}no{% else %}falsy{% endif %}",
         "yesfalsy"},
        {"{{ 'x' if t else 'y' }}|{{ 'x' if none }}|{{ 1 if false else 2 if false else 3 }}", "x||3"},
    });
}

TEST(jinja_features, for_loop) {
    check_cases({
        {"{% for a in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ "
         "loop.last }}{{ loop.length }}|{% endfor %}",
         "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
        {"{% for a in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", "-1|3-2|1-|"},
        {"{% for a in l %}{{ loop.cycle('x', 'y') }}{% endfor %}", "xyx"},
        {"{% for a in [1, 1, 2, 2, 1] %}{% if loop.changed(a) %}{{ a }}{% endif %}{% endfor %}", "121"},
        {"{% for a in l if a > 1 %}{{ a }}{{ loop.index }}{% else %}none{% endfor %}", "3122"},
        {"{% for a in [] %}x{% else %}empty{% endfor %}", "empty"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", "b=1;a=2;ba"},
        {"{% for c in 'héllo' %}{{ c }}.{% endfor %}", "h.é.l.l.o."},
        {"{% for a in l %}{% for b in l %}{{ loop.depth }}{% endfor %}{{ loop }}{% endfor %}",
         "111<LoopContext 1/3>111<LoopContext 2/3>111<LoopContext 3/3>"},
        {"{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}", "1234"},
        {"{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}",
         nullptr},                                  // jinja2: ValueError: too many values to unpack (expected 2)
        {"{% for a in n %}x{% endfor %}", nullptr}, // jinja2: TypeError: 'int' object is not iterable
        {"{% for item in [{'c': [{'c': []}, {'c': [{'c': []}]}]}] recursive %}<{{ loop.depth }}{% if item.c %}{{ "
         "loop(item.c) }}{% endif %}>{% endfor %}",
         "<1<2><2<3>>>"},
        {"{% for i in l %}{{ loop.length }}{% set loop = 5 %}{% endfor %}",
         nullptr}, // jinja2: TemplateAssertionError: Can't assign to special loop variable in for-loop target
    });
}

TEST(jinja_features, loop_controls) {
    check_cases({
        {"{% for a in l %}{% if a == 1 %}{% break %}{% endif %}{{ a }}{% endfor %}", "3"},
        {"{% for a in l %}{% if a == 1 %}{% continue %}{% endif %}{{ a }}{% endfor %}", "32"},
        {"{% for a in l %}{% for b in l %}{% if b == 1 %}{% break %}{% endif %}{{ a }}{{ b }},{% endfor %}{% endfor %}",
         "33,13,23,"},
        {"{% break %}", nullptr}, // jinja2: SyntaxError: 'break' outside loop (<template>, line 11)
    });
}

TEST(jinja_features, set_and_scoping) {
    check_cases({
        {"{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "12121"},
        {"{% set x = 1 %}{% if true %}{% set x = 5 %}{% endif %}{{ x }}", "5"},
        {"{% for i in l %}{% set y = i %}{% endfor %}[{{ y }}]", "[]"},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ d }}", "12y"},
        {"{% set x %}hello {{ n }}{% endset %}{{ x }}|{% set y | upper | trim %} abc {% endset %}{{ y }}",
         "hello 3|ABC"},
        {"{% set content = '' %}{% for m in messages %}{% set content = content + m.role %}{% endfor %}[{{ content }}]",
         "[]"},
        {"{% macro m() %}{{ x }}{% endmacro %}{% set x = 3 %}{{ m() }}", "3"},
    });
}

TEST(jinja_features, namespace) {
    check_cases({
        {"{% set ns = namespace(a=0) %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}", "6"},
        {"{% set ns = namespace(d, c=3) %}{{ ns.a }}{{ ns.c }} {{ ns }}", "23 <Namespace {'b': 1, 'a': 2, 'c': 3}>"},
        {"{% set ns = namespace(x=1) %}{% macro f() %}{% set ns.x = ns.x + 1 %}{% endmacro %}{{ f() }}{{ f() }}{{ ns.x "
         "}}",
         "3"},
        {"{% set ns = namespace() %}{{ ns.zz is defined }}|{{ ns['zz'] }}|{% set ns.items = 1 %}{{ ns.items }}",
         "False||1"},
        {"{% set d.x = 1 %}", nullptr}, // jinja2: TemplateRuntimeError: cannot assign attribute on non-namespace object
    });
}

TEST(jinja_features, macros_and_call) {
    check_cases({
        {"{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=4, a=5) }}", "1-2|1-3|5-4"},
        {"{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, z=3) }}", "(1, 2){'z': 3}"},
        {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
         nullptr}, // jinja2: TypeError: macro 'm' takes not more than 1 argument(s)
        {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}",
         nullptr}, // jinja2: TypeError: macro 'm' takes no keyword argument 'z'
        {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", "[]"},
        {"{% macro m(a, b=a) %}{{ b }}{% endmacro %}{{ m(7) }}", "7"},
        {"{% macro m(a) %}[{{ caller(a) }}]{% endmacro %}{% call(x) m(5) %}in{{ x }}{% endcall %}", "[in5]"},
        {"{% macro m() %}x{% endmacro %}{% call m() %}inner{% endcall %}",
         nullptr}, // jinja2: TypeError: macro 'm' was invoked with two values for the special caller argument. This is
        {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", "54321"},
        {"{% macro f(a) %}{% endmacro %}{{ f }} {{ f.name }} {{ f.arguments }} {{ f.catch_varargs }}",
         "<Macro 'f'> f ('a',) False"},
    });
}

TEST(jinja_features, slicing_and_subscripts) {
    check_cases({
        {"{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ l[1:] }}{{ l[:-1] }}{{ u[1:4] }}{{ l[5:] }}",
         "HdeldlroW olleHHloWrd[1, 2][3, 1]rüß[]"},
        {"{{ s[100] }}|{{ l[10] }}|{{ d.zz }}|{{ d['zz'] }}|{{ l['a'] }}|{{ l.0 }}|{{ (1, 2)[1:] }}", "|||||3|(2,)"},
        {"{{ messages[2].tool_calls[0].function.arguments.b[1] }} {{ messages[-1]['role'] }} {{ "
         "messages[0].get('content') }}",
         "2.5 assistant sys"},
        {"{{ l[0:1.5] }}",
         nullptr}, // jinja2: TypeError: slice indices must be integers or None or have an __index__ method
    });
}

TEST(jinja_features, in_operator) {
    check_cases({
        {"{{ 1 in l }} {{ 'll' in s }} {{ 'x' not in s }} {{ 'a' in d }} {{ 9 in l }} {{ 'a' in d.keys() }} {{ ('a', "
         "2) in d.items() }}",
         "True True True True False True True"},
        {"{{ 1 in 5 }}", nullptr},     // jinja2: TypeError: argument of type 'int' is not iterable
        {"{{ 1 in 'abc' }}", nullptr}, // jinja2: TypeError: 'in <string>' requires string as left operand, not int
    });
}

TEST(jinja_features, tests) {
    check_cases({
        {"{{ n is defined }} {{ zz is defined }} {{ zz is undefined }} {{ none is none }} {{ s is string }} {{ d is "
         "mapping }} {{ l is sequence }} {{ s is sequence }} {{ d is sequence }} {{ n is number }} {{ t is number }} "
         "{{ t is boolean }} {{ n is integer }} {{ t is integer }} {{ f is float }} {{ l is iterable }} {{ n is "
         "iterable }}",
         "True False True True True True True True True True True True True False True True False"},
        {"{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is eq 3 }} {{ n is gt 2 }} {{ n is ge 4 }} {{ n "
         "is lt 4 }} {{ n is ne 3 }} {{ s is lower }} {{ 'AB' is upper }} {{ n is in l }} {{ l is callable }} {{ range "
         "is callable }}",
         "True False True True True False True False False True True False True"},
        {"{{ none is sameas none }} {{ t is true }} {{ t is false }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ n "
         "is not none }} {{ s is not string }} {{ n is equalto 3 }} {{ 3 is lessthan 4 }}",
         "True True False True True True False True True"},
        {"{% if x is nonexistent %}a{% endif %}ok",
         nullptr},                           // jinja2: TemplateRuntimeError: No test named 'nonexistent' found.
        {"{{ x is nonexistent }}", nullptr}, // jinja2: TemplateAssertionError: No test named 'nonexistent'.
    });
}

TEST(jinja_features, str_methods) {
    check_cases({
        {"{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hello world'.capitalize() }} {{ s.swapcase() }}",
         "HELLO WORLD hello world Hello World Hello world hELLO wORLD"},
        {"{{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ "
         "'\\u00a0x\\u2003'.strip() }}",
         "x|x  |  x|a|x"},
        {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ "
         "'a\\nb\\r\\nc'.splitlines() }}",
         "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c'] ['a', 'b', 'c']"},
        {"{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('o') "
         "}} {{ s.index('W') }}",
         "True True 4 7 2 6"},
        {"{{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ 'ab'.replace('', '-') }}",
         "Hell0 W0rld Hell0 World -a-b-"},
        {"{{ s.ljust(15, '*') }} {{ s.rjust(15) }} {{ s.center(16, '-') }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ "
         "'a b'.partition(' ') }} {{ 'abc'.removeprefix('a') }}",
         "Hello World****     Hello World --Hello World--- 00042 -0042 ('a', ' ', 'b') bc"},
        {"{{ 'x'.isdigit() }} {{ '12'.isdigit() }} {{ 'ab1'.isalnum() }} {{ '   '.isspace() }} {{ 'Ab Cd'.istitle() }} "
         "{{ 'abc'.islower() }} {{ 'é_1'.isidentifier() }}",
         "False True True True True True True"},
        {"{{ ', '.join(['a', 'b']) }} {{ ''.join(d) }} {{ 'a-b'.split('-') | join('+') }}", "a, b ba a+b"},
        {"{{ s.nope() }}", nullptr},         // jinja2: UndefinedError: 'str object' has no attribute 'nope'
        {"{{ 'abc'.index('z') }}", nullptr}, // jinja2: ValueError: substring not found
        {"{{ s.upper(1) }}", nullptr},       // jinja2: TypeError: str.upper() takes no arguments (1 given)
    });
}

TEST(jinja_features, unicode_case) {
    check_cases({
        {"{{ u.upper() }}|{{ u.lower() }}|{{ u.title() }}|{{ u.capitalize() }}|{{ u.swapcase() }}|{{ u.casefold() "
         "}}|{{ u | length }}",
         "GRÜSSE 👋 ΑΣ SS|grüße 👋 ας ß|Grüße 👋 Ας Ss|Grüße 👋 ας ß|gRÜSSE 👋 ας SS|grüsse 👋 ασ ss|12"},
        {"{{ 'ΌΣΟΣ ΣΑ' | lower }} {{ 'AΣb' | lower }} {{ 'ǆemal' | title }} {{ 'ﬁ'.upper() }} {{ 'İ'.lower() | length "
         "}}",
         "όσος σα aσb Ǆemal FI 2"},
        {"{{ 'Ⅻ'.isnumeric() }} {{ '½'.isdigit() }} {{ '²'.isdigit() }} {{ '٣'.isdecimal() }} {{ 'αβ'.isalpha() }} {{ "
         "'ÄB'.isupper() }}",
         "True False True True True True"},
        {"{{ ['\\u200d', '\\u00a0', '\\U0001F600', '\\u0378', 'é', \"it's\", '\\x07'] }}",
         "['\\u200d', '\\xa0', '😀', '\\u0378', 'é', \"it's\", '\\x07']"},
    });
}

TEST(jinja_features, dict_methods) {
    check_cases({
        {"{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }} {{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ "
         "d.items() | list }}",
         "2 None 9 dict_keys(['b', 'a']) dict_values([1, 2]) dict_items([('b', 1), ('a', 2)]) [('b', 1), ('a', 2)]"},
        {"{% for k, v in d.items() | sort %}{{ k }}{{ v }}{% endfor %} {{ d.keys() | list }} {{ d.values() | sum }} {{ "
         "d.items() | length }}",
         "a2b1 ['b', 'a'] 3 2"},
        {"{{ d.items() | tojson }}", nullptr}, // jinja2: TypeError: Object of type dict_items is not JSON serializable
        {"{{ d.keys()[0] }}|{{ d.copy() }}", "|{'b': 1, 'a': 2}"},
    });
}

TEST(jinja_features, filters_common) {
    check_cases({
        {"{{ l | join(',') }} {{ l | sort | join }} {{ l | sort(reverse=true) | list }} {{ l | first }} {{ l | last }} "
         "{{ l | min }} {{ l | max }} {{ l | sum }} {{ l | length }} {{ l | count }}",
         "3,1,2 123 [3, 2, 1] 3 2 1 3 6 3 3"},
        {"{{ zz | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | default('d') }} {{ "
         "zz | d('x') }}",
         "d  d None x"},
        {"{{ '  a ' | trim }}|{{ 'xyx' | trim('x') }}|{{ none | string }}|{{ zz | string }}|{{ 3 | string }}|{{ l | "
         "string }}",
         "a|y|None||3|[3, 1, 2]"},
        {"{{ s | upper }} {{ s | lower }} {{ 'hello wORLD' | capitalize }} {{ 'hello-world foo_bar (x)' | title }} {{ "
         "s | replace('l', 'L') }} {{ s | reverse }} {{ l | reverse | list }}",
         "HELLO WORLD hello world Hello world Hello-World Foo_bar (X) HeLLo WorLd dlroW olleH [2, 1, 3]"},
        {"{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }} {{ d | items | list }}",
         "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)]"},
        {"{{ [1, 2, 1, 'a', 'A'] | unique | list }} {{ l | batch(2) | list }} {{ l | batch(2, 0) | list }} {{ l | "
         "slice(2) | list }}",
         "[1, 2, 'a'] [[3, 1], [2]] [[3, 1], [2, 0]] [[3, 1], [2]]"},
        {"{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ "
         "'a\\nb' | indent('>') }}",
         "a\n  b|  a\n  b|a\n  \n  b|a\n>b"},
        {"{{ 'one two three' | wordcount }} {{ '<b>x</b> y' | striptags }} {{ 'a<b' | e }} {{ 'hello world foo' | "
         "truncate(9) }} {{ '%s=%s' | format('a', 1) }} {{ s | center(15) }}",
         "3 x y a&lt;b hello... a=1   Hello World  "},
        {"{{ '3' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '0x1A' | int(base=16) }} {{ "
         "'3.5' | float }} {{ 3 | float }} {{ 'ab' | float }}",
         "4 3 0 7 26 3.5 3.0 0.0"},
        {"{{ -3 | abs }} {{ 2.567 | round(1) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2, 'floor') }} {{ "
         "7 | round }} {{ 1250 | round(-2) }}",
         "3 2.6 2.0 4.0 2.56 7 1200"},
        {"{{ [{'a': 2}, {'a': 1}] | sort(attribute='a') | map(attribute='a') | list }} {{ [{'a': {'b': 1}}] | "
         "map(attribute='a.b') | list }} {{ [{'a': 2}, {'b': 1}] | map(attribute='a', default=0) | list }}",
         "[1, 2] [1] [2, 0]"},
        {"{% for g in [{'k': 1, 'v': 'a'}, {'k': 2, 'v': 'b'}, {'k': 1, 'v': 'c'}] | groupby('k') %}{{ g.grouper }}:{{ "
         "g.list | map(attribute='v') | join }};{% endfor %}",
         "1:ac;2:b;"},
        {"{{ 1234567 | filesizeformat }} {{ {'a': 1, 'b': 'x y'} | urlencode }} {{ {'a': 1, 'class': 'x'} | xmlattr }} "
         "{{ d | pprint }} {{ 'a b c d e f' | wordwrap(5) }}",
         "1.2 MB a=1&b=x+y  a=\"1\" class=\"x\" {'a': 2, 'b': 1} a b c\nd e f"},
        {"{{ 'go to http://x.com/a, or mail a@b.co' | urlize }}",
         "go to <a href=\"http://x.com/a\" rel=\"noopener\">http://x.com/a</a>, or mail <a "
         "href=\"mailto:a@b.co\">a@b.co</a>"},
        {"{{ l | attr('count') is callable }}|{{ d | attr('a') }}|{% filter upper %}abc {{ s }}{% endfilter %}",
         "True||ABC HELLO WORLD"},
        {"{{ l | sort(attribute='x') }}", "[3, 1, 2]"},
        {"{{ x | nonexistent }}", nullptr}, // jinja2: TemplateAssertionError: No filter named 'nonexistent'.
        {"{% if false %}{{ x | nonexistent }}{% endif %}{{ x | nonexistent if false else 'soft' }}", "soft"},
        {"{{ l | join(1, 2, 3) }}",
         nullptr}, // jinja2: TypeError: sync_do_join() takes from 2 to 4 positional arguments but 5 were given
        {"{{ l | map() | list }}", nullptr}, // jinja2: FilterArgumentError: map requires a filter argument
    });
}

TEST(jinja_features, select_map_generators) {
    check_cases({
        {"{{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | "
         "list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }}",
         "system,user,assistant 1 ['system', 'assistant']"},
        {"{{ l | map('string') | join('-') }} {{ [1, 0, 2, none] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | "
         "list }} {{ l | select('gt', 1) | list }}",
         "3-1-2 [1, 2] [2, 4] [3, 2]"},
        {"{{ messages | selectattr('tool_calls', 'defined') | list | length }} {{ messages | selectattr('tool_calls') "
         "| list | length }}",
         "1 1"},
        {"{% if l | select('gt', 100) %}truthy{% else %}falsy{% endif %} {{ l | select('gt', 100) | list | length }}",
         "truthy 0"},
        {"{% set g = l | map('string') %}{{ g | first }}|{{ g | list }}|{{ g | list }}", "3|['1', '2']|[]"},
        {"{{ none | map('upper') | list }} {{ none | select | list }}", "[] []"},
        {"{{ (l | select('gt', 100)) | length }}",
         nullptr}, // jinja2: TypeError: object of type 'generator' has no len()
        {"{{ l | map('string') | tojson }}",
         nullptr}, // jinja2: TypeError: Object of type generator is not JSON serializable
        {"{{ (l | map('string')) | last }}", nullptr}, // jinja2: TypeError: 'generator' object is not reversible
    });
}

TEST(jinja_features, tojson) {
    check_cases({
        {"{{ d | tojson }} {{ messages | tojson }} {{ 'é\"\\n\\u0001' | tojson }} {{ d | tojson(sort_keys=true) }}",
         "{\"b\": 1, \"a\": 2} [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi "
         "<there> & 'q'\"}, {\"role\": \"assistant\", \"content\": \"ok\", \"tool_calls\": [{\"function\": {\"name\": "
         "\"f\", \"arguments\": {\"a\": 1, \"b\": [1, 2.5, \"x\"]}}}]}] \"é\\\"\\n\\u0001\" {\"a\": 2, \"b\": 1}"},
        {"{{ d | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ {'a': []} | tojson(indent=2) }}|{{ l | "
         "tojson(indent='\\t') }}",
         "{\n  \"b\": 1,\n  \"a\": 2\n}|[]|{\n  \"a\": []\n}|[\n\t3,\n\t1,\n\t2\n]"},
        {"{{ 'x' | tojson(ensure_ascii=true) }} {{ u | tojson(ensure_ascii=true) }} {{ u | tojson }}",
         "\"x\" \"Gr\\u00fc\\u00dfe \\ud83d\\udc4b \\u0391\\u03a3 \\u00df\" \"Grüße 👋 ΑΣ ß\""},
        {"{{ {'a': 1, 'b': {'c': [1, 2]}} | tojson(separators=(',', ':')) }} {{ {1: 2, 1.5: 3, none: 4, true: 5} | "
         "tojson }}",
         "{\"a\":1,\"b\":{\"c\":[1,2]}} {\"1\": 5, \"1.5\": 3, \"null\": 4}"},
        {"{{ 1.0 | tojson }} {{ 1e16 | tojson }} {{ 1e-7 | tojson }} {{ (1, 2) | tojson }} {{ none | tojson }} {{ t | "
         "tojson }} {{ (1e308 * 10) | tojson }}",
         "1.0 1e+16 1e-07 [1, 2] null true Infinity"},
        {"{{ range(3) | tojson }}", nullptr}, // jinja2: TypeError: Object of type range is not JSON serializable
        {"{{ zz | tojson }}", nullptr},       // jinja2: TypeError: Object of type Undefined is not JSON serializable
        {"{{ {(1, 2): 3} | tojson }}",
         nullptr}, // jinja2: TypeError: keys must be str, int, float, bool or None, not tuple
    });
}

TEST(jinja_features, python_values) {
    check_cases({
        {"{{ n }} {{ f }} {{ t }} {{ none }} {{ l }} {{ d }} {{ (1,) }} {{ () }} {{ {} }} {{ {'a': (1, 'b')} }} {{ "
         "[none, true, 'x\\'y', \"q\\\"\"] }}",
         "3 2.5 True None [3, 1, 2] {'b': 1, 'a': 2} (1,) () {} {'a': (1, 'b')} [None, True, \"x'y\", 'q\"']"},
        {"{{ 1/3 }} {{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ 7%3 }} {{ -7%3 }} {{ 2**10 }} {{ 2**-1 }} {{ 7.5//2 }} {{ "
         "-7.5%2 }} {{ 0.1+0.2 }} {{ 1e100 }} {{ 1e22 }} {{ 3.14e-10 }} {{ 1e16 }} {{ 1e-5 }} {{ 123456789.125 }}",
         "0.3333333333333333 5.0 3 -4 1 2 1024 0.5 3.0 0.5 0.30000000000000004 1e+100 1e+22 3.14e-10 1e+16 1e-05 "
         "123456789.125"},
        {"{{ 'a' ~ 1 ~ none ~ true ~ [1] }} {{ 'a' * 3 }} {{ [1] * 3 }} {{ l + [4] }} {{ -n }} {{ true + true }} {{ 1 "
         "+ 1.5 }}",
         "a1NoneTrue[1] aaa [1, 1, 1] [3, 1, 2, 4] -3 2 2.5"},
        {"{{ t and 'yes' or 'no' }} {{ none or 'default' }} {{ 0 and 1 }} {{ '' or [] }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 "
         "}} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ (1, 2) == [1, 2] }}",
         "yes default 0 [] True False True True True False"},
        {"{{ 1_000 }} {{ 0x10 }} {{ 0o10 }} {{ 0b11 }} {{ 1.5e3 }} {{ '\\u00e9\\x41\\101\\t' }} {{ \"it's\" }} {{ 'a' "
         "'b' }}",
         "1000 16 8 3 1500.0 éAA\t it's ab"},
        {"{{ range(3) }} {{ range(1, 10, 3) | list }} {{ range(5)[1:3] }} {{ range(10)[::3] }} {{ range(5) | length }} "
         "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }}",
         "range(0, 3) [1, 4, 7] range(1, 3) range(0, 10, 3) 5 {'a': 1, 'b': 2} {'x': 1}"},
        {"{{ 1 < 'a' }}", nullptr},  // jinja2: TypeError: '<' not supported between instances of 'int' and 'str'
        {"{{ none < 1 }}", nullptr}, // jinja2: TypeError: '<' not supported between instances of 'NoneType' and 'int'
        {"{{ 1 + 'a' }}", nullptr},  // jinja2: TypeError: unsupported operand type(s) for +: 'int' and 'str'
        {"{{ 'a' + 1 }}", nullptr},  // jinja2: TypeError: can only concatenate str (not "int") to str
        {"{{ 1 / 0 }}", nullptr},    // jinja2: ZeroDivisionError: division by zero
        {"{{ {[1]: 2} }}", nullptr}, // jinja2: TypeError: unhashable type: 'list'
    });
}

TEST(jinja_features, percent_and_format) {
    check_cases({
        {"{{ '%s-%d-%.2f-%5s-%-5s|' % ('a', 3, 1.5, 'x', 'y') }} {{ '%(a)s' % {'a': 1} }} {{ '%x %o %e %g %c %r %%' % "
         "(255, 8, 12345.678, 0.00001234, 65, 'q') }} {{ '%s' % [1, 2] }} {{ 'x' % [1] }}",
         "a-3-1.50-    x-y    | 1 ff 10 1.234568e+04 1.234e-05 A 'q' % [1, 2] x"},
        {"{{ '{} {}'.format(1, 'a') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}'.format(x=5) }} {{ "
         "'{:>5}|{:<5}|{:^5}'.format(1, 2, 3) }} {{ '{:*^9}'.format('ab') }}",
         "1 a aba 5     1|2    |  3   ***ab****"},
        {"{{ '{:.2f}'.format(3.14159) }} {{ '{:05d}'.format(42) }} {{ '{:,}'.format(1234567) }} {{ '{!r}'.format('a') "
         "}} {{ '{:.3}'.format(1.0) }} {{ '{:#x}'.format(255) }} {{ '{:10.2%}'.format(0.5) }} {{ '{0[a]}'.format(d) }}",
         "3.14 00042 1,234,567 'a' 1.0 0xff     50.00% 2"},
        {"{{ '%s %s' % (1,) }}", nullptr}, // jinja2: TypeError: not enough arguments for format string
        {"{{ '%s' % (1, 2) }}", nullptr},  // jinja2: TypeError: not all arguments converted during string formatting
        {"{{ '%d' % 'a' }}", nullptr},     // jinja2: TypeError: %d format: a real number is required, not str
        {"{{ '{}{1}'.format(1, 2) }}",
         nullptr}, // jinja2: ValueError: cannot switch from manual field specification to automatic field numbering
    });
}

TEST(jinja_features, markup_safe_escape) {
    check_cases({
        {"{{ \"Use '\"|safe + messages[1].content + \"'\"|safe }} {{ 'a<' ~ ('<b>'|safe) ~ 'c' }} {{ "
         "('<b>'|safe).upper() }} {{ ('x%s'|safe) % '<' }}",
         "Use 'hi &lt;there&gt; &amp; &#39;q&#39;' a<<b>c <B> x&lt;"},
        {"{{ '<'|e }} {{ '<'|e|e }} {{ ('a'|safe).join(['<', '>']) }} {{ ('<'|safe) * 2 }} {{ ('{}'|safe).format('<') "
         "}} {{ ('<'|safe) is escaped }} {{ '<' is escaped }} {{ messages[1].content | forceescape }}",
         "&lt; &lt; &lt;a&gt; << &lt; True False hi &lt;there&gt; &amp; &#39;q&#39;"},
        {"{{ ('<p>x</p>'|safe).striptags() }} {{ [('a'|safe)] }} {{ 'x' + ('<'|safe) }} {{ ('<a>'|safe) | trim }} {{ "
         "('<'|safe) | replace('<', '>') }} {{ 5 | safe }}",
         "x [Markup('a')] x< <a> > 5"},
    });
}

TEST(jinja_features, globals) {
    check_cases({
        {"{{ range(5) | list }} {{ range(5, 0, -2) | list }} {{ range is defined }} {{ namespace(a=1).a }} {{ cycler "
         "is defined }} {{ joiner is defined }}",
         "[0, 1, 2, 3, 4] [5, 3, 1] True 1 True True"},
        {"{% set j = joiner('|') %}{% for a in l %}{{ j() }}{{ a }}{% endfor %} {% set c = cycler('a', 'b') %}{{ "
         "c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}",
         "3|1|2 abab"},
        {"{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %b %d %j %p %I %a %y') }}|{{ strftime_now('%z%Z') }}|{{ "
         "strftime_now('%d %B %Y') }}",
         "2026-01-15 10:30:05 Thursday January Jan 15 015 AM 10 Thu 26||15 January 2026"},
        {"{{ raise_exception('boom: roles must alternate') }}",
         nullptr}, // jinja2: TemplateError: boom: roles must alternate
        {"{{ range(100001) | length }}",
         nullptr}, // jinja2: OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).
    });
}

TEST(jinja_features, with_block_autoescape_include) {
    check_cases({
        {"{% set a = 9 %}{% with a = a + 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}|{% with %}{% set x = 5 %}{{ x "
         "}}{% endwith %}[{{ x }}]",
         "1099|5[]"},
        {"{% set y = 3 %}{% block b %}{{ y }}{% endblock %}|{% for i in [1] %}{% block c %}[{{ i }}]{% endblock %}{% "
         "block d scoped %}[{{ i }}]{% endblock d %}{% endfor %}",
         "3|[][1]"},
        {"{% autoescape true %}{{ '<' }}{{ '<' | safe }}{% endautoescape %}{{ '<' }}", "&lt;<<"},
        {"{% if false %}{% include 'x.jinja' %}{% endif %}ok", "ok"},
        {"{% include 'x.jinja' %}", nullptr},       // jinja2: TypeError: no loader for this environment specified
        {"{% from 'x.jinja' import y %}", nullptr}, // jinja2: TypeError: no loader for this environment specified
    });
}

TEST(jinja_features, generation) {
    check_cases({
        {"{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% "
         "else %}{{ m.role }}{% endif %}|{% endfor %}",
         "system|user|ok|"},
        {"{% generation %}{% set inside = 1 %}x{% endgeneration %}[{{ inside }}]", "x[]"},
    });
}

TEST(jinja_features, sandbox) {
    check_cases({
        {"{{ s.__class__ }}|{{ messages.__len__ }}|{{ d._private }}|{{ d.__class__ is defined }}", "|||False"},
        {"{{ s.__class__.__mro__ }}",
         nullptr}, // jinja2: SecurityError: access to attribute '__class__' of 'str' object is unsafe.
        {"{{ l.append(4) }}",
         nullptr}, // jinja2: SecurityError: access to attribute 'append' of 'list' object is unsafe.
        {"{{ messages.append(1) }}",
         nullptr}, // jinja2: SecurityError: access to attribute 'append' of 'list' object is unsafe.
        {"{{ d.update({'c': 3}) }}",
         nullptr},                    // jinja2: SecurityError: access to attribute 'update' of 'dict' object is unsafe.
        {"{{ l.pop() }}", nullptr},   // jinja2: SecurityError: access to attribute 'pop' of 'list' object is unsafe.
        {"{{ d.clear() }}", nullptr}, // jinja2: SecurityError: access to attribute 'clear' of 'dict' object is unsafe.
        {"{{ n() }}", nullptr},       // jinja2: TypeError: 'int' object is not callable
        {"{{ s() }}", nullptr},       // jinja2: TypeError: 'str' object is not callable
        {"{{ zz() }}", nullptr},      // jinja2: UndefinedError: 'zz' is undefined
        {"{{ messages[0].__init__() }}",
         nullptr},                 // jinja2: SecurityError: access to attribute '__init__' of 'dict' object is unsafe.
        {"{{ zz.a }}", nullptr},   // jinja2: UndefinedError: 'zz' is undefined
        {"{{ zz + 1 }}", nullptr}, // jinja2: UndefinedError: 'zz' is undefined
        {"{{ zz }}|{{ zz | length }}|{{ zz ~ 'x' }}|{{ zz | list }}|{{ zz is defined }}", "|0|x|[]|False"},
    });
}

// ---- (c) broken templates, the sandbox, the limits ----

namespace {

// the message of the tessera::error that rendering raises ("" when it renders)
std::string render_error(const std::string& tmpl, const char* ctx = default_context,
                         const jinja::options& opt = pinned_options()) {
    try {
        jinja::render(jinja::parse(tmpl), ojson::parse(ctx), opt);
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

} // namespace

TEST(jinja_errors, syntax_errors_name_the_line_jinja2_names) {
    // each one a TemplateSyntaxError in jinja2, at this line
    const std::pair<const char*, int> cases[] = {
        {"{% if x %}never closed", 1},
        {"line 1\nline 2\n{% for m in messages %}\n{{ m }}\n", 4}, // jinja2 names where the template ends
        {"a\n{{ x ", 2},
        {"a\nb\n{% if %}x{% endif %}", 3},
        {"{{ 'abc }}", 1},
        {"x\n{{ x | }}", 2},
        {"{{ @ }}", 1},
        {"{% endfor %}", 1},
        {"one\n{% foo %}", 2},
        {"{# unclosed comment", 1},
        {"{{ x ) }}", 1},
        {"{{ (x }}", 1},
        {"1\n2\n{{ x | nofilter }}", 3},
        {"{{ x is notest }}", 1},
        {"{% for %}{% endfor %}", 1},
        {"{% set %}", 1},
        {"{% macro %}{% endmacro %}", 1},
        {"{% if x %}{% else %}{% else %}{% endif %}", 1},
        {"{% if x %}{% endfor %}", 1},
        {"{{ x[ }}", 1},
        {"{{ 1 2 }}", 1},
        {"{{ }}", 1},
        {"{% %}", 1},
        {"{% raw %}never", 1},
        {"{% set x = %}", 1},
        {"{{ 'a' if }}", 1},
        {"{{ f(a=1, 2) }}", 1},
        {"{{ x | default( }}", 1},
        {"{% macro m(a=1, b) %}{% endmacro %}", 1},
        {"{% call m() %}", 1},
        {"{% for loop in l %}{% endfor %}", 1},
    };
    for (const auto& [tmpl, line] : cases) {
        SCOPED_TRACE(tmpl);
        try {
            jinja::parse(tmpl);
            ADD_FAILURE() << "parsed";
        } catch (const error& e) {
            EXPECT_TRUE(starts_with(e.what(), "chat template: line " + std::to_string(line) + ": ")) << e.what();
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
        }
    }
}

TEST(jinja_errors, unknown_filters_and_tests_in_soft_frames_fail_when_run) {
    // inside an if or a conditional expression jinja2 compiles them and fails only when they are reached
    EXPECT_EQ(jinja::render(jinja::parse("{% if false %}{{ x | nofilter }}{% endif %}ok"), ojson::object()), "ok");
    EXPECT_EQ(jinja::render(jinja::parse("{{ x | nofilter if false else 'ok' }}"), ojson::object()), "ok");
    EXPECT_TRUE(starts_with(render_error("\n{% if true %}\n{{ 1 | nofilter }}{% endif %}"),
                            "chat template: line 3: No filter named 'nofilter'"));
    EXPECT_TRUE(starts_with(render_error("{% if 1 is notest %}{% endif %}"), "chat template: line 1: No test named"));
}

TEST(jinja_errors, raise_exception_becomes_the_error_line) {
    EXPECT_EQ(render_error("{% for m in messages %}\n{% if m.role == 'assistant' %}\n"
                           "{{ raise_exception('Conversation roles must alternate user/assistant') }}\n"
                           "{% endif %}{% endfor %}"),
              "chat template: line 3: Conversation roles must alternate user/assistant");
    // one line, whatever the message holds
    EXPECT_EQ(render_error("{{ raise_exception('multi\\nline') }}"), "chat template: line 1: multi\\nline");
    EXPECT_EQ(render_error("{{ [1] | map('bad\\nname') | list }}"),
              "chat template: line 1: No filter named 'bad\\nname'.");
}

TEST(jinja_errors, runtime_errors_name_their_line) {
    EXPECT_TRUE(starts_with(render_error("a\nb\n{{ zz.attr }}"), "chat template: line 3: 'zz' is undefined"));
    EXPECT_TRUE(starts_with(render_error("{{ 1 + 'a' }}"), "chat template: line 1: unsupported operand"));
    EXPECT_TRUE(starts_with(render_error("\n{{ 1 < 'a' }}"), "chat template: line 2: '<' not supported"));
    EXPECT_TRUE(starts_with(render_error("{{ 1 / 0 }}"), "chat template: line 1: division by zero"));
    EXPECT_TRUE(starts_with(render_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
                            "chat template: line 1: too many values to unpack"));
}

TEST(jinja_sandbox, private_attributes_are_undefined_and_unusable) {
    // jinja2's sandbox: an attribute starting with '_' is an undefined value (printing it gives "", as there)...
    EXPECT_EQ(jinja::render(jinja::parse("[{{ ''.__class__ }}][{{ messages.__len__ }}][{{ s._x }}]"),
                            ojson::parse(default_context)),
              "[][][]");
    // ...and anything done with it is an error
    for (const char* t :
         {"{{ ''.__class__.__mro__ }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "{{ messages.__init__() }}",
          "{{ x.__init__.__globals__ }}", "{{ range.__call__(3) }}", "{{ cycler.__init__.__globals__.os }}",
          "{{ ''.__class__ + 'x' }}", "{{ lipsum.__globals__['os'] }}"}) {
        SCOPED_TRACE(t);
        EXPECT_TRUE(starts_with(render_error(t), "chat template: line 1: ")) << render_error(t);
    }
}

TEST(jinja_sandbox, lists_and_dicts_are_immutable) {
    // ImmutableSandboxedEnvironment: the mutating methods exist but calling them is a SecurityError
    for (const char* t : {"{{ messages.append(1) }}", "{% set x = messages.pop() %}", "{{ l.insert(0, 1) }}",
                          "{{ l.sort() }}", "{{ l.reverse() }}", "{{ l.extend([1]) }}", "{{ l.remove(1) }}",
                          "{{ l.clear() }}", "{{ d.update({'c': 3}) }}", "{{ d.pop('a') }}", "{{ d.popitem() }}",
                          "{{ d.setdefault('z', 1) }}", "{{ d.clear() }}", "{{ messages[0].update(role='x') }}"}) {
        SCOPED_TRACE(t);
        EXPECT_TRUE(starts_with(render_error(t), "chat template: line 1: access to attribute")) << render_error(t);
    }
    // what they would have changed is unchanged: the reads work and the copies are new values
    EXPECT_EQ(jinja::render(jinja::parse("{{ l.copy() + [4] }} {{ l }} {{ d.copy() | length }}"),
                            ojson::parse(default_context)),
              "[3, 1, 2, 4] [3, 1, 2] 2");
}

TEST(jinja_sandbox, calling_what_is_not_callable_fails) {
    for (const char* t : {"{{ n() }}", "{{ s() }}", "{{ messages() }}", "{{ d() }}", "{{ none() }}", "{{ zz() }}",
                          "{{ (1, 2)() }}", "{% set ns = namespace() %}{{ ns() }}", "{{ l | first() () }}",
                          "{% for x in l %}{{ loop() }}{% endfor %}", "{% set c = cycler(1) %}{{ c() }}"}) {
        SCOPED_TRACE(t);
        EXPECT_TRUE(starts_with(render_error(t), "chat template: line 1: ")) << render_error(t);
    }
}

// A hostile template is one error, fast: each case below must fail in well under a second.
// "Quickly": about 0.4 s for the slowest case in an optimized build on a busy 2-core machine; a sanitizer build runs
// the same work 5-10x slower, so its bound is wider. Either way a hostile template is stopped in seconds, not hours.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
constexpr double kQuickSeconds = 20.0;
#else
constexpr double kQuickSeconds = 2.0;
#endif

TEST(jinja_limits, hostile_templates_fail_quickly) {
    const std::string deep_parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
    const std::string deep_brackets = "{{ " + std::string(100000, '[') + "1" + std::string(100000, ']') + " }}";
    std::string deep_dicts = "{{ ", deep_not = "{{ ", deep_neg = "{{ ", long_sum = "{{ 1", long_filters = "{{ x",
                long_attrs = "{{ x", long_calls = "{{ f", deep_ifs, deep_fors;
    for (int i = 0; i < 50000; i++) deep_dicts += "{'a':";
    deep_dicts += "1" + std::string(50000, '}') + " }}";
    for (int i = 0; i < 100000; i++) {
        deep_not += "not ";
        deep_neg += "-";
        long_sum += " + 1";
        long_filters += " | string";
        long_attrs += ".y";
        long_calls += "()";
        deep_ifs += "{% if true %}";
    }
    deep_not += "x }}";
    deep_neg += "1 }}";
    long_sum += " }}";
    long_filters += " }}";
    long_attrs += " }}";
    long_calls += " }}";
    for (int i = 0; i < 100000; i++) deep_ifs += "{% endif %}";
    for (int i = 0; i < 5000; i++) deep_fors += "{% for i in l %}";
    deep_fors += "x";
    for (int i = 0; i < 5000; i++) deep_fors += "{% endfor %}";
    const std::string cases[] = {
        // the sandbox's range limit
        "{% for i in range(1000000) %}{% endfor %}",
        // gigabytes of output from nested loops
        "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}"
        "{% endfor %}",
        // ten billion iterations with no output
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        // strings and lists doubled until they are huge
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% set ns = namespace(l=[0]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
        "{{ 'x' * 100000000000 }}",
        "{{ [1, 2] * 1000000000 }}",
        "{{ 'x'.center(100000000) }}",
        "{{ '{:100000000}'.format(1) }}",
        "{{ '%100000000d' % 1 }}",
        "{{ 'x' | indent(100000000, true) }}",
        // many large filter pipelines
        "{% for a in range(1000) %}{% set x = range(99999) | map('string') | join(',') %}{% endfor %}",
        // unbounded recursion: a macro, a macro per loop iteration, a recursive loop on itself
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{% for i in range(100) %}{{ f(n + 1) }}{% endfor %}{% endmacro %}{{ f(0) }}",
        "{% for x in [l] recursive %}{{ loop([x]) }}{% endfor %}",
        // values nested without end
        "{% set ns = namespace(v=none) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}",
        "{% set ns = namespace(v=none) %}{% for i in range(100000) %}{% set ns.v = namespace(v=ns.v) %}{% endfor %}",
        // source nested without end: the parser has a depth limit (no stack overflow)
        deep_parens,
        deep_brackets,
        deep_dicts,
        deep_not,
        deep_neg,
        long_sum,
        long_filters,
        long_attrs,
        long_calls,
        deep_ifs,
        deep_fors,
    };
    for (const std::string& t : cases) {
        SCOPED_TRACE(t.substr(0, 120));
        const auto start = std::chrono::steady_clock::now();
        const std::string err = render_error(t, R"({"l": [1, 2], "x": "x"})");
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_TRUE(starts_with(err, "chat template: line 1: ")) << err;
        EXPECT_EQ(err.find('\n'), std::string::npos) << err;
        EXPECT_LT(seconds, kQuickSeconds);
        if (std::getenv("TESSERA_JINJA_TIMES")) std::fprintf(stderr, "%.3f s: %.60s\n", seconds, t.c_str());
    }
}

TEST(jinja_limits, a_namespace_holding_itself_prints_as_python_does) {
    EXPECT_EQ(jinja::render(jinja::parse("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), ojson::object()),
              "<Namespace {'me': <Namespace {...}>}>");
}

TEST(jinja_limits, variables_nested_too_deep_are_an_error) {
    const std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
    try {
        jinja::render(jinja::parse("{{ x }}"), ojson{{"x", ojson::parse(deep)}});
        FAIL() << "rendered";
    } catch (const error& e) {
        EXPECT_TRUE(starts_with(e.what(), "chat template: the variables nest deeper than")) << e.what();
    }
}

TEST(jinja_limits, the_limits_are_options) {
    jinja::options small;
    small.max_output = 10;
    EXPECT_TRUE(starts_with(render_error("{{ 'x' * 11 }}", "{}", small), "chat template: line 1: "));
    EXPECT_EQ(render_error("{{ 'x' * 10 }}", "{}", small), "");
    small = {};
    small.max_steps = 100;
    EXPECT_TRUE(starts_with(render_error("{% for i in range(200) %}{% endfor %}", "{}", small),
                            "chat template: line 1: the template ran past its limit of 100 steps"));
    small = {};
    small.max_depth = 10;
    EXPECT_TRUE(starts_with(render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}", "{}", small),
                            "chat template: line 1: nesting deeper than 10"));
}
