// The Jinja interpreter: real chat templates (tests/data/chat_templates: Qwen3, Qwen3.5, Qwen3-Coder, Llama-3,
// Llama-3.1 with tools, DeepSeek-V3) x message lists, byte-identical to two independent references:
//  - @huggingface/jinja (transformers.js's Jinja), rendered live by tests/jinja/render.mjs;
//  - HF transformers' apply_chat_template, expected_hf.json, written by tools/chat_template_golden.py where
//    transformers is installed (the test uses it when present).
// Then Python/Jinja2 semantics one construct at a time, and errors and bounds.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja.h"
#include "test.h"
#include "test_tokenizer.h"

#define TPL_DIR FD_TEST_SOURCE_DIR "/tests/data/chat_templates"

// Renders every template x case; returns {"<template>/<case>": {"text"} | {"error"}} as render.mjs does.
static json_t *render_all(void) {
    json_error_t e;
    json_t *tpls = json_load_file(TPL_DIR "/templates.json", 0, &e), *cases = json_load_file(TPL_DIR "/cases.json", 0, &e);
    if (!tpls || !cases) {
        json_decref(tpls);
        json_decref(cases);
        return NULL;
    }
    json_t *out = json_object();
    const char *name;
    json_t *t;
    json_object_foreach(tpls, name, t) {
        char *path = fd_sprintf("%s/%s", TPL_DIR, json_string_value(json_object_get(t, "file")));
        size_t n;
        char *src = fd_read_file(path, &n);
        jj_template *tpl = src ? jj_parse(src, n) : NULL;
        EXPECT(tpl, "%s: %s", path, fd_error_msg());
        for (size_t i = 0; tpl && i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i), *only = json_object_get(c, "only");
            int skip = only != NULL;
            for (size_t k = 0; only && k < json_array_size(only); k++)
                skip &= strcmp(json_string_value(json_array_get(only, k)), name) != 0;
            if (skip) continue;
            json_t *ctx = json_object();
            json_object_set(ctx, "messages", json_object_get(c, "messages"));
            json_t *tools = json_object_get(c, "tools"), *docs = json_object_get(c, "documents");
            json_object_set_new(ctx, "tools", tools ? json_incref(tools) : json_null());
            json_object_set_new(ctx, "documents", docs ? json_incref(docs) : json_null());
            json_t *agp = json_object_get(c, "add_generation_prompt");
            json_object_set_new(ctx, "add_generation_prompt", agp ? json_incref(agp) : json_true());
            json_object_update(ctx, json_object_get(t, "kwargs"));
            if (json_object_get(c, "kwargs")) json_object_update(ctx, json_object_get(c, "kwargs"));
            size_t len;
            char *text = jj_render(tpl, ctx, &len);
            char *key = fd_sprintf("%s/%s", name, json_string_value(json_object_get(c, "name")));
            json_t *r = text ? json_pack("{s:s%}", "text", text, len) : json_pack("{s:s}", "error", fd_error_msg());
            json_t *why = json_object_get(json_object_get(c, "js_differs"), name);
            if (why) json_object_set(r, "js_differs", why);
            json_object_set_new(out, key, r);
            free(key);
            free(text);
            json_decref(ctx);
        }
        jj_free(tpl);
        free(src);
        free(path);
    }
    json_decref(tpls);
    json_decref(cases);
    return out;
}

// Same results: equal texts, or both an error (the messages differ between implementations).
// js: skip the renderings where @huggingface/jinja is known to part from Python (cases.json says why).
static int compare(json_t *ours, json_t *ref, const char *refname, int js) {
    int bad = 0, skipped = 0;
    const char *key;
    json_t *want;
    EXPECT(json_object_size(ours) == json_object_size(ref), "%zu renderings, %s has %zu", json_object_size(ours),
           refname, json_object_size(ref));
    json_object_foreach(ref, key, want) {
        json_t *got = json_object_get(ours, key);
        if (js && got && json_object_get(got, "js_differs")) {
            skipped++;
            continue;
        }
        const char *wt = json_string_value(json_object_get(want, "text"));
        const char *gt = got ? json_string_value(json_object_get(got, "text")) : NULL;
        int same = got && ((wt && gt && !strcmp(wt, gt)) || (!wt && !gt));
        if (!same && bad++ < 5)
            test_fail(__FILE__, __LINE__, "rendering differs", " %s vs %s:\n--- ours\n%s\n--- %s\n%s\n", key, refname,
                      gt ? gt : got ? json_string_value(json_object_get(got, "error")) : "(missing)", refname,
                      wt ? wt : json_string_value(json_object_get(want, "error")));
    }
    if (skipped) printf("  %d renderings not compared with %s (known differences from Python)\n", skipped, refname);
    return bad;
}

static int jinja_npm_ready(void) {
    if (fd_file_exists("tests/jinja/node_modules/@huggingface/jinja/package.json")) return 1;
    int rc = test_run("cd tests/jinja && timeout 300 npm ci --no-audit --no-fund >&2", NULL);
    return rc == 0 && fd_file_exists("tests/jinja/node_modules/@huggingface/jinja/package.json");
}

TEST(jinja_templates_vs_huggingface_jinja) {
    json_t *ours = render_all();
    ASSERT(ours, "tests/data/chat_templates is unreadable");
    EXPECT(json_object_size(ours) >= 100, "%zu renderings", json_object_size(ours));
    ASSERT(jinja_npm_ready(), "npm ci in tests/jinja failed (@huggingface/jinja is the reference renderer)");
    char *out = NULL;
    int rc = test_run("cd tests/jinja && timeout 120 node render.mjs ../data/chat_templates", &out);
    ASSERT(rc == 0 && out, "node render.mjs failed (exit %d)", rc);
    json_error_t e;
    json_t *ref = json_loads(out, 0, &e);
    free(out);
    ASSERT(ref, "render.mjs output: %s", e.text);
    EXPECT(compare(ours, ref, "@huggingface/jinja", 1) == 0);
    json_decref(ref);
    json_decref(ours);
}

TEST(jinja_templates_vs_transformers) {
    json_error_t e;
    json_t *ref = json_load_file(TPL_DIR "/expected_hf.json", 0, &e);
    if (!ref) {
        printf("  (no expected_hf.json yet: run tools/chat_template_golden.py where transformers is installed)\n");
        return;
    }
    json_t *ours = render_all();
    ASSERT(ours);
    EXPECT(compare(ours, json_object_get(ref, "renderings"), "transformers", 0) == 0);
    json_decref(ours);
    json_decref(ref);
}

// ---- one construct at a time (expected values are what Python's Jinja2 gives) ----
static char *render(const char *src, const char *ctx_json) {
    jj_template *t = jj_parse(src, strlen(src));
    if (!t) return NULL;
    json_t *ctx = ctx_json ? json_loads(ctx_json, 0, NULL) : NULL;
    char *s = jj_render(t, ctx, NULL);
    json_decref(ctx);
    jj_free(t);
    return s;
}

TEST(jinja_semantics) {
    static const struct {
        const char *src, *ctx, *want;
    } k[] = {
        {"{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }}", NULL, "3.5 3 -4 2 1024 2.5"},
        {"{{ true }} {{ none }} {{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ (1,) }}", NULL,
         "True None [1, 'a', None] {'k': 'v'} (1,)"},
        {"{{ 1e20 }} {{ 0.1 }} {{ 100.0 }} {{ 1.5e-7 }} {{ 2.0 * 3 }}", NULL, "1e+20 0.1 100.0 1.5e-07 6.0"},
        {"{{ 'abc'[::-1] }} {{ [1,2,3,4][1:3] }} {{ 'héllo'[1] }} {{ [1,2,3][-1] }} {{ 'abcdef'[::2] }}", NULL,
         "cba [2, 3] é 3 ace"},
        {"{{ ' a b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a-b-c'.split('-', 1) }} {{ 'a-b-c'.rsplit('-', 1) }}",
         NULL, "['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b-c'] ['a-b', 'c']"},
        {"{{ '\\n\\nx\\n'.strip('\\n') }}|{{ '  x '.lstrip() }}|{{ 'xxay'.rstrip('y').lstrip('x') }}|{{ ' t '|trim }}",
         NULL, "x|x |a|t"},
        {"{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'ab' in 'cabd' }} {{ 'z' not in 'a' }}",
         NULL, "True True True True"},
        {"{% for x in [3, 4, 5] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}"
         "{{ loop.length }}{{ loop.previtem }}|{% endfor %}",
         NULL, "103TrueFalse3|212FalseFalse33|321FalseTrue34|"},
        {"{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", "{\"d\":{\"b\":1,\"a\":2}}",
         "b=1;a=2;ba"},
        {"{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}"
         "{% for x in [] %}x{% else %}empty{% endfor %}",
         NULL, "2242empty"},
        {"{% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
         "{{ x }}{% endfor %}",
         NULL, "13"},
        {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"
         "{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}",
         NULL, "12"},
        {"{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}", NULL,
         "[1BNone][12None][1B3]"},
        {"{% set s %}in {{ 1 + 1 }}{% endset %}{{ s|upper }}{% filter upper %}abc{% endfilter %}", NULL, "IN 2ABC"},
        {"{{ x is defined }} {{ y is defined }} {{ none is none }} {{ 1 is number }} {{ 's' is string }} {{ {} is mapping }}"
         " {{ [] is iterable }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ x is sameas false }} {{ 1 is not string }}",
         "{\"x\":false}", "True False True True True True True True True True True"},
        {"{{ [3,1,2]|sort }} {{ [1,2,3]|reverse|list }} {{ ['a','b']|join('-') }} {{ [1,1,2]|unique|list }}"
         " {{ [1,2]|first }} {{ [1,2]|last }} {{ 'abc'|length }} {{ [1,2,3]|sum }} {{ [4,2,8]|max }}",
         NULL, "[1, 2, 3] [3, 2, 1] a-b [1, 2] 1 2 3 6 8"},
        {"{{ u|default('d') }} {{ ''|default('d', true) }} {{ 'x'|replace('x', 'y') }} {{ '3'|int + 1 }} {{ 'ab'|title }}"
         " {{ 2.5|string }} {{ 5|float }}",
         NULL, "d d y 4 Ab 2.5 5.0"},
        {"{{ m|selectattr('r', 'equalto', 'u')|map(attribute='c')|join(',') }} {{ m|rejectattr('r', 'eq', 'u')|list|length }}"
         " {{ [' a ', 'b ']|map('trim')|list }} {{ [0, 1, 2]|select|list }} {{ [1, 2, 3]|reject('odd')|list }}",
         "{\"m\":[{\"r\":\"u\",\"c\":\"1\"},{\"r\":\"a\",\"c\":\"2\"},{\"r\":\"u\",\"c\":\"3\"}]}",
         "1,3 1 ['a', 'b'] [1, 2] [2]"},
        {"{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ d|dictsort }}", "{\"d\":{\"b\":[1,2.5,null],\"a\":true}}",
         "{\"b\": [1, 2.5, null], \"a\": true}|{\n  \"b\": [\n    1,\n    2.5,\n    null\n  ],\n  \"a\": true\n}|\"é\\\"\\n\"|"
         "[('a', True), ('b', [1, 2.5, None])]"},
        {"{{ 'é😀'|tojson(ensure_ascii=true) }} {{ d|tojson(sort_keys=true) }} {{ [1,2]|tojson(separators=(',',':')) }}",
         "{\"d\":{\"b\":1,\"a\":2}}", "\"\\u00e9\\ud83d\\ude00\" {\"a\": 2, \"b\": 1} [1,2]"},
        {"{{ 'a' ~ 1 ~ none }} {{ 1 if false }}{{ 2 if true else 3 }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }}", NULL,
         "a1None 2 x y True"},
        {"{{ d.items()|list }} {{ d.get('a') }} {{ d.get('z', 0) }} {{ d['a'] }} {{ d.keys()|list }}", "{\"d\":{\"a\":1}}",
         "[('a', 1)] 1 0 1 ['a']"},
        {"{{ 'x'*3 }} {{ [0]*2 }} {{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1) }} {{ [1] + [2] }}", NULL,
         "xxx [0, 0] [0, 1, 2] [1, 3, 5] {'a': 1} [1, 2]"},
        // whitespace control: trim_blocks + lstrip_blocks, '-' on either side, '+' to keep
        {"a\n  {% if true %}\n  b\n  {% endif %}\nc", NULL, "a\n  b\nc"},
        {"a  {{- 'b' -}}  c {%- if true %} d{% endif -%}  \n e", NULL, "abc de"},
        {"x\n    {%+ if true %}y{% endif +%}\nz", NULL, "x\n    y\nz"},
        {"{# comment #}\nA{#- c -#}  B\n", NULL, "AB"},
        {"{% raw %}{{ not }}{% endraw %}", NULL, "{{ not }}"},
        {"line\n", NULL, "line"},
        {"{{ 'a\\tb\\u00e9\\x41' }}", NULL, "a\tbéA"},
        {"{{ x.y }}|{{ none.y }}|{{ [1][5] }}|{{ d['nope'] }}", "{\"x\":{},\"d\":{}}", "|||"},
        {"{% generation %}kept{% endgeneration %}", NULL, "kept"},
        {"{{ 'Ab Cd'.lower() }} {{ 'ab'.upper() }} {{ 'a b'.title() }} {{ 'xax'.count('x') }} {{ 'abc'.find('c') }}", NULL,
         "ab cd AB A B 2 2"},
        {"{{ 'abc' < 'abd' }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }} {{ 2 > 1 }} {{ 'a' != 'a' }}", NULL,
         "True True True True False"},
        {"{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}", NULL, "a\n  b|  a\n  b"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *got = render(k[i].src, k[i].ctx);
        EXPECT(got && !strcmp(got, k[i].want), "case %zu: %s\n got: [%s]\nwant: [%s]", i, k[i].src,
               got ? got : fd_error_msg(), k[i].want);
        free(got);
    }
}

TEST(jinja_errors_and_bounds) {
    static const struct {
        const char *src, *msg; // the error must contain msg
    } k[] = {
        {"{% if x %}", "missing"},
        {"{{ 1 + }}", "expected an expression"},
        {"{% endfor %}", "unexpected 'endfor'"},
        {"{{ 'abc }}", "unterminated"},
        {"{% frobnicate %}", "unknown or unsupported tag"},
        {"{{ raise_exception('Bad role: ' ~ 3) }}", "raise_exception: Bad role: 3"},
        {"{{ 'a' + 1 }}", "unsupported operand"},
        {"{{ 1 / 0 }}", "division by zero"},
        {"{{ x.y }}", "undefined"},
        {"{{ x|nofilter }}", "unknown filter"},
        {"{% set d = {} %}{% set d.x = 1 %}", "non-namespace"},
        {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "nest too deeply"},
        {"{% set r = range(9999) %}{% for a in r %}{% for b in r %}{{ loop.index }}{% endfor %}{% endfor %}", "the template "},
        {"{{ 'x' * 100000000000 }}", "too large"},
        {"{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "exceeds"},
        {"{{ 9223372036854775807 + 1 }}", "overflow"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *got = render(k[i].src, "{}");
        EXPECT(!got && strstr(fd_error_msg(), k[i].msg), "case %zu: %s -> %s", i, k[i].src, got ? got : fd_error_msg());
        free(got);
    }
    // deep nesting is refused, not a stack overflow
    char deep[1024];
    size_t d = 0;
    d += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 400; i++) deep[d++] = '(';
    deep[d++] = '1';
    for (int i = 0; i < 400; i++) deep[d++] = ')';
    snprintf(deep + d, sizeof deep - d, " }}");
    char *got = render(deep, NULL);
    EXPECT(!got && strstr(fd_error_msg(), "nests too deeply"), "%s", fd_error_msg());
    free(got);
    // the line of the failure is reported
    got = render("a\nb\n{{ 1 +* 2 }}", NULL);
    EXPECT(!got && strstr(fd_error_msg(), "line 3"), "%s", fd_error_msg());
    free(got);
}
