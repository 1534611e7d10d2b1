#!/usr/bin/env python3
"""render_templates.py: renders every tests/data/templates/*.jinja for each conversation of conversations.json with
python's jinja2 configured as Hugging Face transformers' apply_chat_template does, and writes the expected bytes to
tests/data/templates/expected/<template>.<conversation>.txt (or jinja2's error to .error). tests/test_jinja.cpp
renders the same and compares byte for byte.
    python3 tests/ref/render_templates.py
With --features it prints instead the feature tests of tests/test_jinja.cpp (part b): each template of FEATURES rendered
with the context C by this same environment, as C++ check_cases() tables (null where jinja2 raises).
    python3 tests/ref/render_templates.py --features > /tmp/features.cpp"""
import datetime
import json
import pathlib
import sys

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[1] / "data" / "templates"
NOW = datetime.datetime(2026, 1, 15, 10, 30, 5)  # the pinned clock of strftime_now (test_jinja.cpp pins the same)
BOS, EOS = "<s>", "</s>"


class generation(Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


# ---- the feature tests (--features) ----

# the default context of test_jinja.cpp's check_cases (its default_context is this, as JSON)
C = {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi <there> & 'q'"},
                  {"role": "assistant", "content": "ok", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": [1, 2.5, "x"]}}}]}],
     "n": 3, "f": 2.5, "s": "Hello World", "l": [3, 1, 2], "d": {"b": 1, "a": 2}, "t": True, "none": None,
     "u": "Grüße 👋 ΑΣ ß", "e": ""}
FEATURES = {}
FEATURES["whitespace_control"] = [
 "a\n  {% if true %}\n  b\n  {% endif %}\n  c\n{# comment #}\nd {#- x -#} e\n",
 "  {{ 'x' }}  \n  {%- if true -%}  y  {%- endif -%}  \n z",
 "{%+ if true %}x{% endif +%}\ny",
 "line1\n    {% set x = 1 %}\nline2",
 "{{- '  a  ' -}}\n\n{{ 'b' }}",
 "a\n\t {% if true %}\nb\n\t {% endif %}\nc",
 "x\r\ny\r\n{% if true %}\r\nz\r\n{% endif %}\r\n",
 "  {% raw %}  {{ x }}  {% endraw %}  ",
 "{% for i in l %}\n  {{ i }}\n{% endfor %}\n\n",
 "a {{ 'b' }} {# c #}\n{%- if true %} d {% endif -%}\n e",
 "{% macro m() -%}\n  body\n{%- endmacro %}[{{ m() }}]",
]
FEATURES["if_elif_else"] = [
 "{% if n > 5 %}a{% elif n > 2 %}b{% else %}c{% endif %}",
 "{% if none %}a{% elif e %}b{% else %}c{% endif %}",
 "{% if l and not e %}yes{% endif %}{% if [] or {} or '' or 0 or 0.0 or none %}no{% else %}falsy{% endif %}",
 "{{ 'x' if t else 'y' }}|{{ 'x' if none }}|{{ 1 if false else 2 if false else 3 }}",
]
FEATURES["for_loop"] = [
 "{% for a in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
 "{% for a in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
 "{% for a in l %}{{ loop.cycle('x', 'y') }}{% endfor %}",
 "{% for a in [1, 1, 2, 2, 1] %}{% if loop.changed(a) %}{{ a }}{% endif %}{% endfor %}",
 "{% for a in l if a > 1 %}{{ a }}{{ loop.index }}{% else %}none{% endfor %}",
 "{% for a in [] %}x{% else %}empty{% endfor %}",
 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
 "{% for c in 'héllo' %}{{ c }}.{% endfor %}",
 "{% for a in l %}{% for b in l %}{{ loop.depth }}{% endfor %}{{ loop }}{% endfor %}",
 "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}",
 "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}",
 "{% for a in n %}x{% endfor %}",
 "{% for item in [{'c': [{'c': []}, {'c': [{'c': []}]}]}] recursive %}<{{ loop.depth }}{% if item.c %}{{ loop(item.c) }}{% endif %}>{% endfor %}",
 "{% for i in l %}{{ loop.length }}{% set loop = 5 %}{% endfor %}",
]
FEATURES["loop_controls"] = [
 "{% for a in l %}{% if a == 1 %}{% break %}{% endif %}{{ a }}{% endfor %}",
 "{% for a in l %}{% if a == 1 %}{% continue %}{% endif %}{{ a }}{% endfor %}",
 "{% for a in l %}{% for b in l %}{% if b == 1 %}{% break %}{% endif %}{{ a }}{{ b }},{% endfor %}{% endfor %}",
 "{% break %}",
]
FEATURES["set_and_scoping"] = [
 "{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
 "{% set x = 1 %}{% if true %}{% set x = 5 %}{% endif %}{{ x }}",
 "{% for i in l %}{% set y = i %}{% endfor %}[{{ y }}]",
 "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ d }}",
 "{% set x %}hello {{ n }}{% endset %}{{ x }}|{% set y | upper | trim %} abc {% endset %}{{ y }}",
 "{% set content = '' %}{% for m in messages %}{% set content = content + m.role %}{% endfor %}[{{ content }}]",
 "{% macro m() %}{{ x }}{% endmacro %}{% set x = 3 %}{{ m() }}",
]
FEATURES["namespace"] = [
 "{% set ns = namespace(a=0) %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}",
 "{% set ns = namespace(d, c=3) %}{{ ns.a }}{{ ns.c }} {{ ns }}",
 "{% set ns = namespace(x=1) %}{% macro f() %}{% set ns.x = ns.x + 1 %}{% endmacro %}{{ f() }}{{ f() }}{{ ns.x }}",
 "{% set ns = namespace() %}{{ ns.zz is defined }}|{{ ns['zz'] }}|{% set ns.items = 1 %}{{ ns.items }}",
 "{% set d.x = 1 %}",
]
FEATURES["macros_and_call"] = [
 "{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=4, a=5) }}",
 "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, z=3) }}",
 "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
 "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}",
 "{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}",
 "{% macro m(a, b=a) %}{{ b }}{% endmacro %}{{ m(7) }}",
 "{% macro m(a) %}[{{ caller(a) }}]{% endmacro %}{% call(x) m(5) %}in{{ x }}{% endcall %}",
 "{% macro m() %}x{% endmacro %}{% call m() %}inner{% endcall %}",
 "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
 "{% macro f(a) %}{% endmacro %}{{ f }} {{ f.name }} {{ f.arguments }} {{ f.catch_varargs }}",
]
FEATURES["slicing_and_subscripts"] = [
 "{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ l[1:] }}{{ l[:-1] }}{{ u[1:4] }}{{ l[5:] }}",
 "{{ s[100] }}|{{ l[10] }}|{{ d.zz }}|{{ d['zz'] }}|{{ l['a'] }}|{{ l.0 }}|{{ (1, 2)[1:] }}",
 "{{ messages[2].tool_calls[0].function.arguments.b[1] }} {{ messages[-1]['role'] }} {{ messages[0].get('content') }}",
 "{{ l[0:1.5] }}",
]
FEATURES["in_operator"] = [
 "{{ 1 in l }} {{ 'll' in s }} {{ 'x' not in s }} {{ 'a' in d }} {{ 9 in l }} {{ 'a' in d.keys() }} {{ ('a', 2) in d.items() }}",
 "{{ 1 in 5 }}",
 "{{ 1 in 'abc' }}",
]
FEATURES["tests"] = [
 "{{ n is defined }} {{ zz is defined }} {{ zz is undefined }} {{ none is none }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is sequence }} {{ d is sequence }} {{ n is number }} {{ t is number }} {{ t is boolean }} {{ n is integer }} {{ t is integer }} {{ f is float }} {{ l is iterable }} {{ n is iterable }}",
 "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is eq 3 }} {{ n is gt 2 }} {{ n is ge 4 }} {{ n is lt 4 }} {{ n is ne 3 }} {{ s is lower }} {{ 'AB' is upper }} {{ n is in l }} {{ l is callable }} {{ range is callable }}",
 "{{ none is sameas none }} {{ t is true }} {{ t is false }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ n is not none }} {{ s is not string }} {{ n is equalto 3 }} {{ 3 is lessthan 4 }}",
 "{% if x is nonexistent %}a{% endif %}ok",
 "{{ x is nonexistent }}",
]
FEATURES["str_methods"] = [
 "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hello world'.capitalize() }} {{ s.swapcase() }}",
 "{{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\u00a0x\\u2003'.strip() }}",
 "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
 "{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('o') }} {{ s.index('W') }}",
 "{{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ 'ab'.replace('', '-') }}",
 "{{ s.ljust(15, '*') }} {{ s.rjust(15) }} {{ s.center(16, '-') }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'a b'.partition(' ') }} {{ 'abc'.removeprefix('a') }}",
 "{{ 'x'.isdigit() }} {{ '12'.isdigit() }} {{ 'ab1'.isalnum() }} {{ '   '.isspace() }} {{ 'Ab Cd'.istitle() }} {{ 'abc'.islower() }} {{ 'é_1'.isidentifier() }}",
 "{{ ', '.join(['a', 'b']) }} {{ ''.join(d) }} {{ 'a-b'.split('-') | join('+') }}",
 "{{ s.nope() }}",
 "{{ 'abc'.index('z') }}",
 "{{ s.upper(1) }}",
]
FEATURES["unicode_case"] = [
 "{{ u.upper() }}|{{ u.lower() }}|{{ u.title() }}|{{ u.capitalize() }}|{{ u.swapcase() }}|{{ u.casefold() }}|{{ u | length }}",
 "{{ 'ΌΣΟΣ ΣΑ' | lower }} {{ 'AΣb' | lower }} {{ 'ǆemal' | title }} {{ 'ﬁ'.upper() }} {{ 'İ'.lower() | length }}",
 "{{ 'Ⅻ'.isnumeric() }} {{ '½'.isdigit() }} {{ '²'.isdigit() }} {{ '٣'.isdecimal() }} {{ 'αβ'.isalpha() }} {{ 'ÄB'.isupper() }}",
 "{{ ['\\u200d', '\\u00a0', '\\U0001F600', '\\u0378', 'é', \"it's\", '\\x07'] }}",
]
FEATURES["dict_methods"] = [
 "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }} {{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.items() | list }}",
 "{% for k, v in d.items() | sort %}{{ k }}{{ v }}{% endfor %} {{ d.keys() | list }} {{ d.values() | sum }} {{ d.items() | length }}",
 "{{ d.items() | tojson }}",
 "{{ d.keys()[0] }}|{{ d.copy() }}",
]
FEATURES["filters_common"] = [
 "{{ l | join(',') }} {{ l | sort | join }} {{ l | sort(reverse=true) | list }} {{ l | first }} {{ l | last }} {{ l | min }} {{ l | max }} {{ l | sum }} {{ l | length }} {{ l | count }}",
 "{{ zz | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | default('d') }} {{ zz | d('x') }}",
 "{{ '  a ' | trim }}|{{ 'xyx' | trim('x') }}|{{ none | string }}|{{ zz | string }}|{{ 3 | string }}|{{ l | string }}",
 "{{ s | upper }} {{ s | lower }} {{ 'hello wORLD' | capitalize }} {{ 'hello-world foo_bar (x)' | title }} {{ s | replace('l', 'L') }} {{ s | reverse }} {{ l | reverse | list }}",
 "{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }} {{ d | items | list }}",
 "{{ [1, 2, 1, 'a', 'A'] | unique | list }} {{ l | batch(2) | list }} {{ l | batch(2, 0) | list }} {{ l | slice(2) | list }}",
 "{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('>') }}",
 "{{ 'one two three' | wordcount }} {{ '<b>x</b> y' | striptags }} {{ 'a<b' | e }} {{ 'hello world foo' | truncate(9) }} {{ '%s=%s' | format('a', 1) }} {{ s | center(15) }}",
 "{{ '3' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '0x1A' | int(base=16) }} {{ '3.5' | float }} {{ 3 | float }} {{ 'ab' | float }}",
 "{{ -3 | abs }} {{ 2.567 | round(1) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2, 'floor') }} {{ 7 | round }} {{ 1250 | round(-2) }}",
 "{{ [{'a': 2}, {'a': 1}] | sort(attribute='a') | map(attribute='a') | list }} {{ [{'a': {'b': 1}}] | map(attribute='a.b') | list }} {{ [{'a': 2}, {'b': 1}] | map(attribute='a', default=0) | list }}",
 "{% for g in [{'k': 1, 'v': 'a'}, {'k': 2, 'v': 'b'}, {'k': 1, 'v': 'c'}] | groupby('k') %}{{ g.grouper }}:{{ g.list | map(attribute='v') | join }};{% endfor %}",
 "{{ 1234567 | filesizeformat }} {{ {'a': 1, 'b': 'x y'} | urlencode }} {{ {'a': 1, 'class': 'x'} | xmlattr }} {{ d | pprint }} {{ 'a b c d e f' | wordwrap(5) }}",
 "{{ 'go to http://x.com/a, or mail a@b.co' | urlize }}",
 "{{ l | attr('count') is callable }}|{{ d | attr('a') }}|{% filter upper %}abc {{ s }}{% endfilter %}",
 "{{ l | sort(attribute='x') }}",
 "{{ x | nonexistent }}",
 "{% if false %}{{ x | nonexistent }}{% endif %}{{ x | nonexistent if false else 'soft' }}",
 "{{ l | join(1, 2, 3) }}",
 "{{ l | map() | list }}",
]
FEATURES["select_map_generators"] = [
 "{{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }}",
 "{{ l | map('string') | join('-') }} {{ [1, 0, 2, none] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ l | select('gt', 1) | list }}",
 "{{ messages | selectattr('tool_calls', 'defined') | list | length }} {{ messages | selectattr('tool_calls') | list | length }}",
 "{% if l | select('gt', 100) %}truthy{% else %}falsy{% endif %} {{ l | select('gt', 100) | list | length }}",
 "{% set g = l | map('string') %}{{ g | first }}|{{ g | list }}|{{ g | list }}",
 "{{ none | map('upper') | list }} {{ none | select | list }}",
 "{{ (l | select('gt', 100)) | length }}",
 "{{ l | map('string') | tojson }}",
 "{{ (l | map('string')) | last }}",
]
FEATURES["tojson"] = [
 "{{ d | tojson }} {{ messages | tojson }} {{ 'é\"\\n\\u0001' | tojson }} {{ d | tojson(sort_keys=true) }}",
 "{{ d | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ {'a': []} | tojson(indent=2) }}|{{ l | tojson(indent='\\t') }}",
 "{{ 'x' | tojson(ensure_ascii=true) }} {{ u | tojson(ensure_ascii=true) }} {{ u | tojson }}",
 "{{ {'a': 1, 'b': {'c': [1, 2]}} | tojson(separators=(',', ':')) }} {{ {1: 2, 1.5: 3, none: 4, true: 5} | tojson }}",
 "{{ 1.0 | tojson }} {{ 1e16 | tojson }} {{ 1e-7 | tojson }} {{ (1, 2) | tojson }} {{ none | tojson }} {{ t | tojson }} {{ (1e308 * 10) | tojson }}",
 "{{ range(3) | tojson }}",
 "{{ zz | tojson }}",
 "{{ {(1, 2): 3} | tojson }}",
]
FEATURES["python_values"] = [
 "{{ n }} {{ f }} {{ t }} {{ none }} {{ l }} {{ d }} {{ (1,) }} {{ () }} {{ {} }} {{ {'a': (1, 'b')} }} {{ [none, true, 'x\\'y', \"q\\\"\"] }}",
 "{{ 1/3 }} {{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ 7%3 }} {{ -7%3 }} {{ 2**10 }} {{ 2**-1 }} {{ 7.5//2 }} {{ -7.5%2 }} {{ 0.1+0.2 }} {{ 1e100 }} {{ 1e22 }} {{ 3.14e-10 }} {{ 1e16 }} {{ 1e-5 }} {{ 123456789.125 }}",
 "{{ 'a' ~ 1 ~ none ~ true ~ [1] }} {{ 'a' * 3 }} {{ [1] * 3 }} {{ l + [4] }} {{ -n }} {{ true + true }} {{ 1 + 1.5 }}",
 "{{ t and 'yes' or 'no' }} {{ none or 'default' }} {{ 0 and 1 }} {{ '' or [] }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ (1, 2) == [1, 2] }}",
 "{{ 1_000 }} {{ 0x10 }} {{ 0o10 }} {{ 0b11 }} {{ 1.5e3 }} {{ '\\u00e9\\x41\\101\\t' }} {{ \"it's\" }} {{ 'a' 'b' }}",
 "{{ range(3) }} {{ range(1, 10, 3) | list }} {{ range(5)[1:3] }} {{ range(10)[::3] }} {{ range(5) | length }} {{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }}",
 "{{ 1 < 'a' }}",
 "{{ none < 1 }}",
 "{{ 1 + 'a' }}",
 "{{ 'a' + 1 }}",
 "{{ 1 / 0 }}",
 "{{ {[1]: 2} }}",
]
FEATURES["percent_and_format"] = [
 "{{ '%s-%d-%.2f-%5s-%-5s|' % ('a', 3, 1.5, 'x', 'y') }} {{ '%(a)s' % {'a': 1} }} {{ '%x %o %e %g %c %r %%' % (255, 8, 12345.678, 0.00001234, 65, 'q') }} {{ '%s' % [1, 2] }} {{ 'x' % [1] }}",
 "{{ '{} {}'.format(1, 'a') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}'.format(x=5) }} {{ '{:>5}|{:<5}|{:^5}'.format(1, 2, 3) }} {{ '{:*^9}'.format('ab') }}",
 "{{ '{:.2f}'.format(3.14159) }} {{ '{:05d}'.format(42) }} {{ '{:,}'.format(1234567) }} {{ '{!r}'.format('a') }} {{ '{:.3}'.format(1.0) }} {{ '{:#x}'.format(255) }} {{ '{:10.2%}'.format(0.5) }} {{ '{0[a]}'.format(d) }}",
 "{{ '%s %s' % (1,) }}",
 "{{ '%s' % (1, 2) }}",
 "{{ '%d' % 'a' }}",
 "{{ '{}{1}'.format(1, 2) }}",
]
FEATURES["markup_safe_escape"] = [
 "{{ \"Use '\"|safe + messages[1].content + \"'\"|safe }} {{ 'a<' ~ ('<b>'|safe) ~ 'c' }} {{ ('<b>'|safe).upper() }} {{ ('x%s'|safe) % '<' }}",
 "{{ '<'|e }} {{ '<'|e|e }} {{ ('a'|safe).join(['<', '>']) }} {{ ('<'|safe) * 2 }} {{ ('{}'|safe).format('<') }} {{ ('<'|safe) is escaped }} {{ '<' is escaped }} {{ messages[1].content | forceescape }}",
 "{{ ('<p>x</p>'|safe).striptags() }} {{ [('a'|safe)] }} {{ 'x' + ('<'|safe) }} {{ ('<a>'|safe) | trim }} {{ ('<'|safe) | replace('<', '>') }} {{ 5 | safe }}",
]
FEATURES["globals"] = [
 "{{ range(5) | list }} {{ range(5, 0, -2) | list }} {{ range is defined }} {{ namespace(a=1).a }} {{ cycler is defined }} {{ joiner is defined }}",
 "{% set j = joiner('|') %}{% for a in l %}{{ j() }}{{ a }}{% endfor %} {% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}",
 "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %b %d %j %p %I %a %y') }}|{{ strftime_now('%z%Z') }}|{{ strftime_now('%d %B %Y') }}",
 "{{ raise_exception('boom: roles must alternate') }}",
 "{{ range(100001) | length }}",
]
FEATURES["with_block_autoescape_include"] = [
 "{% set a = 9 %}{% with a = a + 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}|{% with %}{% set x = 5 %}{{ x }}{% endwith %}[{{ x }}]",
 "{% set y = 3 %}{% block b %}{{ y }}{% endblock %}|{% for i in [1] %}{% block c %}[{{ i }}]{% endblock %}{% block d scoped %}[{{ i }}]{% endblock d %}{% endfor %}",
 "{% autoescape true %}{{ '<' }}{{ '<' | safe }}{% endautoescape %}{{ '<' }}",
 "{% if false %}{% include 'x.jinja' %}{% endif %}ok",
 "{% include 'x.jinja' %}",
 "{% from 'x.jinja' import y %}",
]
FEATURES["generation"] = [
 "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.role }}{% endif %}|{% endfor %}",
 "{% generation %}{% set inside = 1 %}x{% endgeneration %}[{{ inside }}]",
]
FEATURES["sandbox"] = [
 "{{ s.__class__ }}|{{ messages.__len__ }}|{{ d._private }}|{{ d.__class__ is defined }}",
 "{{ s.__class__.__mro__ }}",
 "{{ l.append(4) }}",
 "{{ messages.append(1) }}",
 "{{ d.update({'c': 3}) }}",
 "{{ l.pop() }}",
 "{{ d.clear() }}",
 "{{ n() }}",
 "{{ s() }}",
 "{{ zz() }}",
 "{{ messages[0].__init__() }}",
 "{{ zz.a }}",
 "{{ zz + 1 }}",
 "{{ zz }}|{{ zz | length }}|{{ zz ~ 'x' }}|{{ zz | list }}|{{ zz is defined }}",
]


def cpp_string(s):
    out = '"'
    for ch in s:
        o = ord(ch)
        if ch == '\\':
            out += '\\\\'
        elif ch == '"':
            out += '\\"'
        elif ch == '\n':
            out += '\\n'
        elif ch == '\t':
            out += '\\t'
        elif ch == '\r':
            out += '\\r'
        elif o < 0x20 or o == 0x7f:
            out += '\\%03o' % o
        else:
            out += ch
    return out + '"'


def features():
    env = environment()
    out = []
    for group, cases in FEATURES.items():
        out.append(f"TEST(jinja_features, {group}) {{\n    check_cases({{")
        for tpl in cases:
            try:
                text = env.from_string(tpl).render(**C)
                out.append(f"        {{{cpp_string(tpl)},\n         {cpp_string(text)}}},")
            except Exception as e:
                msg = f"{type(e).__name__}: {e}".replace("*/", "* /")
                out.append(f"        {{{cpp_string(tpl)}, nullptr}}, // jinja2: {msg[:90]}")
        out.append("    });\n}\n")
    print("\n".join(out))


def main():
    env = environment()
    conversations = json.loads((ROOT / "conversations.json").read_text())
    out = ROOT / "expected"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    for path in sorted(ROOT.glob("*.jinja")):
        source = path.read_text()
        for name, conv in conversations.items():
            if "only_if" in conv and conv["only_if"] not in source:
                continue
            kwargs = dict(bos_token=BOS, eos_token=EOS, **conv.get("kwargs", {}))
            try:
                text = env.from_string(source).render(messages=conv["messages"], tools=conv.get("tools"),
                                                      documents=None,
                                                      add_generation_prompt=conv["add_generation_prompt"], **kwargs)
                (out / f"{path.stem}.{name}.txt").write_bytes(text.encode())
            except Exception as e:  # recorded: the C++ engine must fail too
                (out / f"{path.stem}.{name}.error").write_text(f"{type(e).__name__}: {e}\n")


if __name__ == "__main__":
    features() if "--features" in sys.argv else main()
