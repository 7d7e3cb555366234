#!/usr/bin/env python3
"""Generates ../resources/dev/cmf4j/chat/jinja/jinja2_cases.jsonl: expected outputs of real jinja2.

Run once by hand (jinja2 3.1.x); the Java tests only read the generated file, no Python runs in CI.
The environment is the one transformers renders chat templates with.
"""
import json, sys, os
from datetime import datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols, Extension
from jinja2 import nodes

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

FIXED = datetime(2024, 3, 5, 14, 7, 9, 123456)
def strftime_now(fmt):
    return FIXED.strftime(fmt)

class AssistantTracker(Extension):
    # as in transformers: {% generation %} renders its body (and records assistant token spans)
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", [], [], None), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

V = {
    "d": {"a": 1, "b": [1, 2], "c": {"x": "y"}},
    "l": [3, 1, 2],
    "s": " Hi There ",
    "n": None,
    "t": True,
    "f": False,
    "e": "",
    "u": "caf\u00e9 \u4f60\u597d \U0001F44B\U0001F3FD",
    "msgs": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "user", "content": [{"type": "text", "text": "typed"}, {"type": "image"}]},
    ],
    "num": 3.5,
    "big": 12345678901234,
}

CASES = []
def case(name, template, vars=None):
    CASES.append((name, template, V if vars is None else vars))

# ---- whitespace control, trim_blocks, lstrip_blocks
case("ws_trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter")
case("ws_lstrip_blocks", "a\n    {% if t %}\n    x\n    {% endif %}\nb")
case("ws_lstrip_not_variables", "a\n    {{ 'v' }}\nb")
case("ws_lstrip_plus", "a\n    {%+ if t %}x{% endif %}\nb")
case("ws_trim_plus", "{% if t +%}\nx{% endif %}")
case("ws_minus_both", "a   \n\n  {%- if t -%}  \n\n  x  \n  {%- endif -%}\n\n  b")
case("ws_var_minus", "a  \n {{- 'x' -}} \n  b")
case("ws_comment", "a\n  {# comment #}\nb{#- c -#}   c")
case("ws_comment_trim", "{# c #}\nx")
case("ws_start_lstrip", "   {% if t %}x{% endif %}")
case("ws_mid_line_no_lstrip", "ab  {% if t %}x{% endif %}")
case("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc\r\n")
case("ws_trailing_newline", "x\n")
case("ws_two_trailing_newlines", "x\n\n")
case("ws_tab_lstrip", "a\n\t \t{% if t %}x{% endif %}")
case("ws_raw", "{% raw %}{{ x }} {% if %}{% endraw %}")
case("ws_raw_minus", "a  {%- raw -%}  {{ y }}  {%- endraw -%}  b")
case("ws_block_after_var", "{{ 'a' }}\n  {% if t %}b{% endif %}")
case("ws_lstrip_after_trim", "{% if t %}\n  {% if t %}\n    x\n  {% endif %}\n{% endif %}")
case("ws_unicode_space_strip", "a\u3000\u00a0{%- if t %}x{% endif %}")
case("ws_string_with_delims", "{{ '{{ %} }}' }}{{ {'a': {'b': 1}} }}")

# ---- output of Python values
case("out_values", "{{ d }}|{{ l }}|{{ n }}|{{ t }}|{{ f }}|{{ 1.0 }}|{{ 1e20 }}|{{ 1/3 }}|{{ (1, 2) }}|{{ ('a',) }}|{{ () }}")
case("out_repr_quotes", "{{ [\"it's\", 'say \"x\"', 'both \\' \"', \"a\\nb\\x01\\u200b\\\\\"] }}")
case("out_floats", "{{ 3.0 }} {{ 3.10 }} {{ 100000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1e16 }} {{ 1e15 }} {{ -0.0 }} {{ 1.5e-7 }} {{ 123456789.125 }} {{ 0.1 + 0.2 }}")
case("out_unicode", "{{ u }}|{{ u | length }}|{{ u[0] }}|{{ u[-1] }}|{{ u[-2] }}|{{ [u] }}")
case("out_nested", "{{ {'k': [1, {'z': none}], 'q': (true, 'x')} }}")
case("out_big_int", "{{ big }} {{ big * 1000 }} {{ -big }}")

# ---- tojson
case("tojson_basic", "{{ d | tojson }}")
case("tojson_indent", "{{ d | tojson(indent=4) }}")
case("tojson_indent2_empty", "{{ {'a': [], 'b': {}, 'c': [1]} | tojson(indent=2) }}")
case("tojson_unicode", "{{ {'k': [1, 2.5, none, true, \"\u00e9\\n\\t\\\"\\\\\u2028\\x01\"]} | tojson }}")
case("tojson_ensure_ascii", "{{ u | tojson(ensure_ascii=true) }}")
case("tojson_sort_separators", "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}")
case("tojson_tuple_float", "{{ (1, 2.0, 1e100) | tojson }}")
case("tojson_int_keys", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'} | tojson }}")
case("tojson_msgs", "{{ msgs | tojson }}")
case("tojson_undefined", "{{ nope | tojson }}")

# ---- undefined
case("undef_print", "[{{ nope }}]")
case("undef_tests", "{{ nope is defined }}{{ nope is undefined }}{{ d.zz is defined }}{{ d['zz'] is defined }}{{ n.x is defined }}")
case("undef_attr_of_undef", "{{ d.zz.x }}")
case("undef_name_attr", "{{ nope.x }}")
case("undef_item", "{{ nope['x'] }}")
case("undef_call", "{{ nope() }}")
case("undef_arith", "{{ nope + 1 }}")
case("undef_concat", "{{ nope ~ 'x' }}|{{ 'x' ~ nope }}")
case("undef_truthy", "{% if nope %}a{% else %}b{% endif %}{% if not d.zz %}c{% endif %}")
case("undef_iter", "{% for x in nope %}a{% else %}empty{% endfor %}")
case("undef_filters", "[{{ nope | default('x') }}|{{ n | default('x') }}|{{ n | default('x', true) }}|{{ e | d('y', true) }}|{{ nope | length }}|{{ nope | upper }}|{{ nope | trim }}|{{ nope | list }}|{{ nope | join(',') }}|{{ nope | first }}|{{ nope | last }}|{{ nope | sort }}|{{ nope | items | list }}|{{ nope | string }}|{{ nope | count }}|{{ nope | select | list }}|{{ nope | sum }}|{{ nope | center(3) }}|{{ nope | escape }}]")
case("undef_int_filter", "{{ nope | int }}")
case("undef_indent_filter", "{{ nope | indent }}")
case("undef_eq", "{{ nope == nope2 }}{{ nope == none }}{{ nope != 1 }}{{ 'x' in nope }}")
case("undef_list_oob", "[{{ l[10] }}]")
case("undef_list_oob_attr", "{{ l[10].x }}")
case("undef_none_attr", "[{{ n.x }}]")
case("undef_missing_key_item", "{{ d['zz']['q'] }}")
case("undef_compare", "{{ nope < 1 }}")

# ---- errors
case("err_raise", "{{ raise_exception('boom ' ~ 1) }}")
case("err_type_concat", "{{ 'a' + 1 }}")
case("err_type_add", "{{ 1 + 'a' }}")
case("err_none_add", "{{ n + 1 }}")
case("err_compare", "{{ 1 < 'a' }}")
case("err_in_str", "{{ 1 in 'abc' }}")
case("err_in_none", "{{ 1 in n }}")
case("err_not_callable", "{{ 'abc'() }}")
case("err_div_zero", "{{ 1 / 0 }}")
case("err_append_unsafe", "{% set _ = l.append(4) %}")
case("err_dict_update_unsafe", "{% set _ = d.update({'z': 1}) %}")
case("err_len_int", "{{ 5 | length }}")
case("err_ns_assign", "{% set x = 1 %}{% set x.y = 2 %}")
case("err_range_big", "{{ range(1000000) | length }}")
case("err_unknown_filter", "{{ 1 | nosuchfilter }}")
case("err_unknown_test", "{{ 1 is nosuchtest }}")
case("err_unknown_tag", "{% do x %}")
case("err_unclosed_if", "{% if t %}x")
case("err_syntax_expr", "{{ 1 + }}")
case("err_unpack", "{% set a, b = [1] %}")
case("err_macro_kw", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=5) }}")
case("err_macro_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}")
case("err_iter_int", "{% for x in 5 %}{% endfor %}")

# ---- operators
case("ops_arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 * 'ab' }} {{ 'ab' * 2 }} {{ [1] * 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }}")
case("ops_bool_arith", "{{ true + 1 }} {{ true * 2.5 }} {{ -true }} {{ 1 + 1.5 }}")
case("ops_concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] }}")
case("ops_list_add", "{{ [1] + [2] }}{{ (1,) + (2,) }}")
case("ops_logic", "{{ true and 'x' }}|{{ false or 'y' }}|{{ 0 or [] }}|{{ not 1 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'a' not in 'b' }}|{{ nope is not defined }}|{{ not nope }}")
case("ops_eq", "{{ 1 == 1.0 }}{{ true == 1 }}{{ (1, 2) == [1, 2] }}{{ [1,[2]] == [1,[2]] }}{{ {'a':1,'b':2} == {'b':2,'a':1} }}{{ 'a' == 'a' }}{{ none == none }}{{ 0 == false }}{{ '1' == 1 }}")
case("ops_in", "{{ 'a' in 'cat' }}{{ 1 in l }}{{ 'a' in d }}{{ 'zz' in d }}{{ 1.0 in l }}{{ [1] in [[1]] }}{{ 'x' not in l }}")
case("ops_compare_mixed", "{{ 1 < 2.5 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 'B' < 'a' }}{{ '\u00e9' > 'z' }}")
case("ops_ternary", "{{ 1 if false }}|{{ 1 if false else 2 }}|{{ (1 if false) is defined }}|{{ 'a' if t else 'b' if f else 'c' }}")
case("ops_precedence", "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ 2 * 3 | string }} {{ 'a' ~ (1 + 2) }} {{ not 1 == 2 }}")
case("ops_concat_binds_tighter", "{{ 'a' ~ 1 + 2 }} {{ -l | length }}")
case("ops_string_percent", "{{ '%s and %d, %05.2f %r %%' % ('a', 3, 3.14159, 'q') }}|{{ '%x %o %e %g %i %X' % (255, 8, 12345.678, 0.0001, 3, 255) }}|{{ '%.3f' % 2 }}|{{ '%5s|%-5s|' % ('a', 'b') }}|{{ '%s' % 'one' }}|{{ '%.2f' % 2.675 }}|{{ '%+d' % 5 }}")
case("ops_implicit_concat", "{{ 'x' 'y' \"z\" }}")
case("ops_literals", "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1.5e3 }} {{ 1e3 }} {{ 1E-2 }} {{ True }} {{ None }}")
case("ops_string_escapes", "{{ 'a\\tb\\n\\x41\\u00e9\\U0001F600\\101\\d\\'' }}")
case("ops_dict_literal_keys", "{{ {1: 'a', true: 'b'} }}{{ {'a': 1}['a'] }}{{ {1:2}[1.0] }}")

# ---- subscripts and slices
case("slice_all", "{{ l[::-1] }}{{ l[-1] }}{{ l[1:] }}{{ l[:-1] }}{{ l[-2:] }}{{ 'abc'[::-1] }}{{ 'abcdef'[1:5:2] }}{{ [1,2,3,4][::2] }}{{ l[5:] }}{{ l[-10:] }}{{ 'hello'[1:-1] }}{{ l[::-2] }}{{ l[2:0:-1] }}")
case("slice_msgs", "{% for m in msgs[1:] %}{{ m.role }},{% endfor %}|{% for m in msgs[::-1] %}{{ loop.index0 }}{{ m['role'][0] }}{% endfor %}")
case("subscript_forms", "{{ d.a }}{{ d['a'] }}{{ d.b.0 }}{{ d.b[1] }}{{ d['c']['x'] }}{{ msgs[-1].content[0].text }}{{ d.items is callable }}")
case("getattr_vs_getitem_dict", "{% set m = {'items': 'key', 'x': 1} %}{{ m['items'] }}|{{ m.items() | list }}")

# ---- string methods
case("str_strip", "[{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab\\n\\n'.rstrip('\\n') }}|{{ ' \\u3000x\\u00a0'.strip() }}|{{ '\\u200bx'.strip() }}]")
case("str_split", "{{ 'a,b,,c'.split(',') }}{{ 'a b  c'.split(' ') }}{{ '  a b  c '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ ' a b c '.rsplit(None, 1) }}{{ ' a b c '.split(None, 1) }}{{ 'a  b'.split(None, 0) }}{{ ''.split() }}{{ ''.split(',') }}{{ 'a<think>b</think>c'.split('</think>')[-1] }}")
case("str_predicates", "{{ 'abc'.startswith('ab') }}{{ 'abc'.startswith(('x','a')) }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith('b', 1) }}{{ '12'.isdigit() }}{{ '  '.isspace() }}{{ 'ab'.isalpha() }}{{ 'Ab'.islower() }}{{ 'AB'.isupper() }}{{ 'Ab Cd'.istitle() }}")
case("str_case", "{{ 'hello world'.title() }}|{{ \"they're bill's\".title() }}|{{ 'hELLO wORLD'.capitalize() }}|{{ '\u00df'.upper() }}|{{ 'ABC'.lower() }}|{{ 'aBc'.swapcase() }}|{{ 'abc'.upper() }}")
case("str_replace_find", "{{ 'hello'.replace('l', 'L') }}{{ 'hello'.replace('l', 'L', 1) }}{{ 'abc'.replace('', '-') }}{{ 'abcabc'.find('c') }}{{ 'abcabc'.rfind('c') }}{{ 'abc'.find('z') }}{{ 'abcabc'.count('b') }}{{ 'abc'.index('b') }}")
case("str_join_format", "{{ '-'.join(['a','b']) }}{{ ', '.join(d) }}{{ '{} {:>5}|{name}'.format(1, 'ab', name='n') }}{{ '{0}{1}{0}'.format('a', 'b') }}{{ '{:.2f}'.format(3.14159) }}{{ '{!r}'.format('x') }}{{ '{:05d}'.format(42) }}{{ '{:,}'.format(1234567) }}{{ '{{}}'.format() }}{{ '{:^7}|'.format('ab') }}")
case("str_misc", "{{ 'abc'.center(7, '*') }}|{{ 'ab'.center(7) }}|{{ 'abc'.ljust(5) }}|{{ 'abc'.rjust(5, '.') }}|{{ '42'.zfill(5) }}|{{ '-42'.zfill(5) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'ab'.partition('x') }}|{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'prefix_x'.removeprefix('prefix_') }}")
case("str_methods_on_content", "{% set c = '<think>\\nreason\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[-1].lstrip('\\n') }}")

# ---- dict / list methods
case("dict_methods", "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 9) }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}{{ d.keys() }}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}")
case("list_methods", "{{ l.index(1) }}{{ l.count(3) }}{{ (1, 2, 1).count(1) }}")

# ---- tests
case("tests_types", "{{ 'a' is string }}{{ 1 is string }}{{ d is mapping }}{{ l is mapping }}{{ l is sequence }}{{ 'a' is sequence }}{{ d is sequence }}{{ 1 is sequence }}{{ nope is sequence }}{{ d is iterable }}{{ 1 is iterable }}{{ nope is iterable }}{{ none is sequence }}")
case("tests_numbers", "{{ 1 is number }}{{ 1.5 is number }}{{ t is number }}{{ 'a' is number }}{{ 1 is integer }}{{ t is integer }}{{ 1.5 is float }}{{ 1 is float }}{{ t is boolean }}{{ 1 is boolean }}{{ n is none }}{{ 0 is none }}")
case("tests_misc", "{{ 'Hello' is lower }}{{ 'hello' is lower }}{{ 'HI' is upper }}{{ 4 is divisibleby 2 }}{{ 4 is divisibleby(3) }}{{ 1 is in [1] }}{{ 2 is even }}{{ 3 is odd }}{{ false is false }}{{ t is true }}{{ 1 is true }}{{ 1 is sameas 1 }}{{ n is sameas none }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 2 is lt 1 }}{{ 1 is ne 2 }}{{ 2 is ge 2 }}{{ 2 is le 1 }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ raise_exception is callable }}{{ d is callable }}")
case("tests_in_expr", "{{ 1 if nope is defined else 2 }}{{ t is true and f is false }}")

# ---- loops
case("loop_vars", "{% for i in l if i > 1 %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }};{% endfor %}")
case("loop_nested", "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ loop.depth }}{% endfor %}{{ loop.index }}{% endfor %}[{{ loop }}]")
case("loop_cycle_changed", "{% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{{ loop.changed(x > 1) }}{% endfor %}")
case("loop_break_continue", "{% for i in [1,2,3,4] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}{% endif %}{% endfor %}")
case("loop_else", "{% for x in [] %}a{% else %}empty{% endfor %}{% for x in [1] if x > 5 %}a{% else %}filtered{% endfor %}")
case("loop_dict", "{% for k in d %}{{ k }}{% endfor %}{% for k, v in d | dictsort %}{{ k }}{% endfor %}")
case("loop_string", "{% for ch in 'ab\u00e9' %}[{{ ch }}]{% endfor %}")
case("loop_unpack_tuple", "{% for a, b in [(1, 2), [3, 4]] %}{{ a }}{{ b }}{% endfor %}{% for (a, b) in [(5, 6)] %}{{ a + b }}{% endfor %}")
case("loop_recursive", "{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}{{ item.n }}{{ loop.depth }}({{ loop(item.c) }}){% endfor %}")
case("loop_range", "{{ range(3) }}{{ range(3)|list }}{{ range(1,10,3)|list }}{{ range(5, 0, -2)|list }}{% for i in range(2) %}{{ i }}{% endfor %}")

# ---- scoping
case("scope_loop_set", "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = i*10 %}{{ x }}{% endfor %}{{ x }}")
case("scope_loop_no_carry", "{% for i in [1,2] %}[{{ x }}]{% set x = i %}{% endfor %}")
case("scope_if_leaks", "{% if t %}{% set y = 5 %}{% endif %}{{ y }}")
case("scope_namespace", "{% set ns = namespace(a=1, found=false) %}{% for i in [1,2,3] %}{% set ns.a = ns.a + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.a }}{{ ns.found }}{{ ns.zz }}|{{ ns }}")
case("scope_namespace_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
case("scope_with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]")
case("scope_set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t2 = 1, %}{{ t2 }}")
case("scope_set_block", "{% set x %}  inner {{ 1 + 1 }}  {% endset %}[{{ x }}]{% set y | trim | upper %}  abc  {% endset %}[{{ y }}]")
case("scope_macro_sees_outer", "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}")

# ---- macros / call / filter blocks
case("macro_args", "{% macro m(a, b=2) %}[{{ a }}{{ b }}{{ varargs }}{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ m(1, 3, 4, z=5) }}{{ m(b=7, a=6) }}{{ m() }}")
case("macro_missing_param", "{% macro m(a) %}[{{ a }}|{{ a is defined }}]{% endmacro %}{{ m() }}")
case("macro_default_expr", "{% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(4) }}")
case("macro_call_block", "{% macro m(a) %}[{{ a }}|{{ caller() }}]{% endmacro %}{% call m(1) %}inner{% endcall %}{% call(x) m(2) %}{{ x }}{% endcall %}")
case("macro_caller_args", "{% macro m() %}{{ caller('A', 'B') }}{% endmacro %}{% call(p, q) m() %}{{ p }}-{{ q }}{% endcall %}")
case("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}")
case("macro_ws", "{% macro render_tool(t) %}\n  {{ t.name }}\n{% endmacro %}\n{% for t in [{'name': 'a'}, {'name': 'b'}] %}\n{{ render_tool(t) }}\n{% endfor %}")
case("filter_block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}{% filter replace('a', 'b') | upper %}aaa{% endfilter %}")
case("generation_tag", "{% generation %}gen {{ 1 }}{% endgeneration %}")
case("block_tag", "{% block body %}in block {{ t }}{% endblock %}")

# ---- filters
case("f_trim_etc", "[{{ s | trim }}|{{ 'xxhixx' | trim('x') }}|{{ s | upper }}|{{ s | lower }}|{{ s | title }}|{{ \"they're bill's friends\" | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ 'a-b (c)' | title }}|{{ s | length }}|{{ s | wordcount }}]")
case("f_first_last", "{{ l | first }}{{ l | last }}{{ 'abc' | first }}{{ 'abc' | last }}{{ d | first }}|{{ [] | first }}|{{ d | last }}")
case("f_join", "{{ l | join }}|{{ l | join(', ') }}|{{ [{'a': 'x'}, {'a': 'y'}] | join(',', attribute='a') }}|{{ [1, none, true] | join('-') }}")
case("f_map_select", "{{ [{'a':1},{'a':2}] | map(attribute='a') | list }}{{ ['a','b'] | map('upper') | list }}{{ [{'r':'s'},{'r':'u'}] | selectattr('r', 'equalto', 's') | list }}{{ [{'r':'s'},{'r':'u'}] | rejectattr('r', '==', 's') | list }}{{ [1,2,3,4] | select('odd') | list }}{{ [0,1,none,''] | select | list }}{{ [1,2,3] | reject('gt', 1) | list }}{{ msgs | selectattr('role', 'eq', 'user') | map(attribute='role') | list }}{{ [{'a': {'b': 1}}] | map(attribute='a.b') | list }}{{ [{}] | map(attribute='z', default='D') | list }}{{ [1, 2] | map('string') | list }}")
case("f_selectattr_defined", "{{ msgs | selectattr('tool_calls', 'defined') | list | length }}{{ msgs | selectattr('tool_calls') | list | length }}{{ msgs | rejectattr('tool_calls', 'defined') | map(attribute='role') | join(',') }}")
case("f_sort", "{{ [3,1,2] | sort }}{{ ['b','A','a'] | sort }}{{ ['b','A','a'] | sort(case_sensitive=true) }}{{ [3,1,2] | sort(reverse=true) | join(',') }}{{ [{'n':2},{'n':1}] | sort(attribute='n') | map(attribute='n') | join }}{{ [('b', 1), ('a', 2)] | sort }}")
case("f_dictsort_unique", "{{ {'b':1,'A':2} | dictsort }}{{ {'b':1,'a':2} | dictsort(by='value') }}{{ {'b':1,'a':2} | dictsort(reverse=true) }}{{ [1,2,2,'a','A'] | unique | list }}{{ ['a','A'] | unique(case_sensitive=true) | list }}")
case("f_numbers", "{{ [1,2,3] | sum }}{{ [0.1, 0.2] | sum }}{{ [[1,2],[3]] | sum(start=[]) }}{{ [{'v': 2}, {'v': 3}] | sum(attribute='v') }}{{ -3 | abs }}{{ -2.5 | abs }}{{ 2.5 | round }}{{ 3.5 | round }}{{ 2.675 | round(2) }}{{ 3.7 | round(0, 'floor') }}{{ 3.2 | round(0, 'ceil') }}{{ 3 | round }}{{ 1234 | round(-2) }}{{ [3,1] | min }}{{ [3,1] | max }}{{ ['B','a'] | max }}{{ [] | max }}")
case("f_convert", "{{ 7 | float }}{{ '3.5' | float }}{{ 'x' | float }}{{ ' 2 ' | float }}{{ 'x' | int }}{{ '12' | int }}{{ '42.9' | int }}{{ 3.9 | int }}{{ -3.9 | int }}{{ 'ff' | int(base=16) }}{{ '0x1f' | int(0, 16) }}{{ none | int }}{{ '1_000' | int }}{{ true | int }}{{ 'inf' | float }}")
case("f_string_list", "{{ [1, 'a', none, true, 1.0, [2], {'k': (1,)}] | string }}{{ 'abc' | list }}{{ d | list }}{{ d | items | list }}{{ none | string }}{{ 1.0 | string }}{{ 12 | string | length }}")
case("f_reverse", "{{ 'abc' | reverse }}{{ l | reverse | list }}{{ (1, 2) | reverse | list }}")
case("f_replace_default", "{{ 'aaa' | replace('a', 'b', 2) }}{{ 'abc' | replace('b', 'X') }}{{ none | default('x') }}{{ false | default('x', true) }}{{ 0 | d(5, boolean=true) }}")
case("f_indent", "[{{ 'a\\nb\\n\\nc' | indent(2) }}]|[{{ 'a\\nb\\n\\nc' | indent(2, true, true) }}]|[{{ 'a\\nb' | indent }}]|[{{ 'a\\nb' | indent('> ') }}]|[{{ 'x' | indent(first=true) }}]")
case("f_batch_slice", "{{ [1,2,3,4,5] | batch(2) | list }}{{ [1,2,3,4,5] | batch(2, 'x') | list }}{{ [1,2,3,4,5] | slice(2) | list }}{{ [1,2,3,4] | slice(3, 0) | list }}")
case("f_center_truncate", "[{{ 'abc' | center(7) }}]{{ 'hello world foo' | truncate(9) }}|{{ 'hello world foo' | truncate(9, true) }}|{{ 'short' | truncate(3, leeway=0, end='') }}|{{ ('x' * 300) | truncate | length }}")
case("f_escape_misc", "{{ 'a<b>&\"\\'' | e }}{{ 'a<b>' | escape }}{{ 'a<b>' | safe }}{{ 5 | safe }}{{ '<p>x</p>  y' | striptags }}{{ {'a': 'x y', 'n': none} | xmlattr }}{{ 'a b&c/d' | urlencode }}{{ {'k': 'v w'} | urlencode }}")
case("f_format", "{{ '%s-%s' | format(1, 'a') }}{{ '%(x)s!' | format(x='y') }}")
case("f_attr_count", "{{ d | attr('a') }}|{{ l | count }}")
case("f_chain_on_msgs", "{{ msgs | map(attribute='content') | select('string') | map('trim') | join(' / ') }}")

# ---- generators (map/select/... return one-shot iterators in jinja2)
case("gen_truthy_nolen", "{% if [] | select %}truthy{% endif %}|{{ [1, 2] | map('string') | list }}|{% set g = [1, 2, 3] | select('odd') %}{{ g | list }}{{ g | list }}|{{ none | map('upper') | list }}{{ none | selectattr('x') | list }}|{{ l | reverse | first }}")
case("gen_len_error", "{{ l | select | length }}")
case("gen_tojson_error", "{{ msgs | map(attribute='role') | tojson }}")
case("gen_items_lazy_error", "{% set it = 5 | items %}ok{{ it | list }}")
case("gen_in_consumes", "{% set g = [1, 2, 3] | select %}{{ 2 in g }}{{ g | list }}")
case("gen_last_error", "{{ l | select | last }}")
case("gen_is_sequence", "{{ (l | select) is sequence }}{{ (l | select) is iterable }}")

# ---- Markup (safe / escape) under autoescape off
case("markup_ops", "{{ ('a<' | safe) + 'b<' }}|{{ 'a<' + ('b<' | safe) }}|{{ ('x' | safe) ~ '<' }}|{{ ('%s|' | safe) % '<' }}|{{ ('<' | safe).replace('<', '>') }}|{{ ('a b' | safe).split() }}|{{ ('<' | safe) | upper }}|{{ ('x<' | safe).center(5, '<') }}|{{ ('<x' | safe).strip('<') }}|{{ ('<p>' | safe) == '<p>' }}|{{ '<' | e | length }}|{{ ('<' | e) is string }}{{ ('<' | e) is escaped }}{{ '<' is escaped }}")
case("markup_more", "{{ ('-' | safe).join(['<', 'b']) }}|{{ ('<{}>' | safe).format('&') }}|{{ ('ab'|safe)[0] + '<' }}|{{ ('%s' | format('<')) }}|{{ (('%s'|safe) | format('<')) }}|{{ 5 | safe + '<' }}|{{ ('<'|safe) * 2 + '<' }}|{{ ('<'|safe) | trim + '<' }}|{{ ('<'|safe) | string + '<' }}|{{ ('a'|safe) | replace('a','<') + '<' }}|{{ {'k':'<'|safe} | tojson }}|{{ (' <'|safe).strip() + '<' }}|{{ ('a'|safe) | indent + '<' }}|{{ '<a>' | e | e }}")
case("markup_add_int", "{{ ('x'|safe) + 1 }}")
case("markup_functionary_style", "{% set t = {'name': 'f<x>', 'description': 'say \"hi\"'} %}{{ \"Use '\"|safe + t['name'] + \"' to '\"|safe + t['description'] + \"'\\n\"|safe + t | tojson() }}")

# ---- unknown filters/tests: compile error, unless inside if / inline-if (deferred to runtime)
case("soft_filter_not_run", "{% if false %}{{ x | from_json }}{% endif %}ok{{ 1 if true else (2 | nope) }}")
case("soft_filter_run", "{% if true %}{{ '{}' | from_json }}{% endif %}")
case("soft_test_run", "{% if true %}{{ 1 is nope }}{% endif %}")
case("hard_filter_in_loop_in_if", "{% if false %}{% for i in l %}{{ i | nope }}{% endfor %}{% endif %}")
case("hard_filter_in_macro", "{% macro m() %}{{ 1 | nope }}{% endmacro %}")
case("map_unknown_filter", "{{ l | map('nope') | list }}")

# ---- None handling
case("none_calls", "{{ none() }}")
case("none_length", "{{ none | length }}")
case("none_float", "{{ none | float }}{{ none | int }}")

# ---- assorted syntax
case("syntax_trailing_commas_etc", "{{ [1, 2,] }}{{ {'a': 1,} }}{{ (1,) }}{{ l | length() }}{{ (l | length) - 1 }}{{ not 1 in l }}{{ not n is none }}{{ n is not none and t }}{{ -1 | abs }}{{ 'ab' if t else 'cd' | upper }}")
case("syntax_set_inline_if", "{% set x = 1 if f %}[{{ x }}]")
case("syntax_chained_assign_error", "{% set a = b = 2 %}")
case("syntax_misc_ops", "{{ l[0:2][::-1] }}{{ d['b'][-1:] }}{{ 'x' ~ -1 }}{{ 2 * -1 }}{{ t and not f or n }}{{ 1 if 0 else 2 if 0 else 3 }}")
case("syntax_dunder_blocked", "{{ range(3) | map('string') | join }}{{ 'a' 'b' ~ 'c' }}[{{ l.__len__ }}{{ d.__class__ }}{{ ''.__class__ }}]")
case("syntax_chained_compare", "{{ 1 == 1 == 1 }}{{ 1 < 2 > 1 }}{{ 1 in [1] in [[1]] }}")
case("syntax_comma_loop", "{%- for i in range(3) -%}{{ i }}{%- if not loop.last %},{% endif -%}{%- endfor %}")
case("syntax_delims_in_strings", "{{ \"{{\" }}{{ \"}}\" }}{{ '%}' }}{{ '{#' }}")
case("syntax_ns_list_concat", "{%- set x = namespace(v=[]) -%}{%- set x.v = x.v + [1] -%}{{ x.v }}")
case("syntax_dictsort_value", "{{ {'b': 2, 'a': 1} | dictsort(false, 'value') }}{{ {'b': 2, 'a': 1} | dictsort | first }}")

# ---- globals
case("g_dict_joiner", "{{ dict(a=1, b=2) }}{{ dict([('x', 1)]) }}{% set j = joiner('|') %}{% for i in [1,2,3] %}{{ j() }}{{ i }}{% endfor %}")
case("g_strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %B %-d %I%p %j %a %y %%') }}|{{ strftime_now('%e|%U|%W|%w') }}")

# ---- chat-template idioms
case("chat_content_types", "{% for m in msgs %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% else %}<{{ p.type }}>{% endif %}{% endfor %}{% endif %};{% endfor %}")
case("chat_tool_calls", "{% for m in msgs if m.tool_calls is defined %}{% for tc in m.tool_calls %}{% set f = tc.function if tc.function is defined else tc %}{{ f.name }}({{ f.arguments | tojson }}){% endfor %}{% endfor %}")
case("chat_last_index", "{% set ns = namespace(last=-1) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ ns.last }}")
case("chat_items_kwargs", "{% for k, v in {'type': 'object', 'props': {'x': 1}} | items %}{{ k }}:{{ v | tojson }};{% endfor %}")

def main():
    out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "resources", "dev", "cmf4j", "chat", "jinja", "jinja2_cases.jsonl")
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        for name, template, vars in CASES:
            rec = {"name": name, "template": template, "vars": vars}
            try:
                rec["expected"] = env.from_string(template).render(**vars)
            except Exception as e:
                rec["error_type"] = type(e).__name__
                rec["error"] = str(e)
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("wrote %d cases (jinja2 %s) to %s" % (len(CASES), jinja2.__version__, out_path))

main()
