// A Jinja2 interpreter for Hugging Face chat templates: what those templates use (if/for/set/macro/filter blocks,
// break/continue, loop.*, namespace(), the filters and tests of Jinja2 and transformers' tojson, Python string,
// dict methods, raise_exception, strftime_now), with the settings transformers renders them with (trim_blocks,
// lstrip_blocks, no autoescape, Undefined that prints as "", the trailing newline of the source dropped).
//
// Values follow Python: str() of True is "True", 7/2 is 3.5, "a" + 1 is an error, and floats print as repr() does.
// Rendering is bounded (output size, work steps, macro recursion, memory) so no template, however hostile, can
// hang or exhaust the server; a template that exceeds a bound fails with an error like any other.
#ifndef FD_JINJA_H
#define FD_JINJA_H
#include <jansson.h>
#include <stddef.h>

typedef struct jj_template jj_template;

// Parses src[0..n). NULL + fd_error ("chat template line L: ...") on a syntax error.
jj_template *jj_parse(const char *src, size_t n);
// Renders with the variables of the JSON object ctx (NULL: none). Returns the text (malloc'ed), or NULL + fd_error
// (a raise_exception message comes back as "raise_exception: <message>").
char *jj_render(const jj_template *t, const json_t *ctx, size_t *len);
// jj_render with tighter bounds (work steps, output bytes; 0 = the default), for the fuzzer.
char *jj_render_bounded(const jj_template *t, const json_t *ctx, size_t *len, long long max_steps, size_t max_output);
void jj_free(jj_template *t);
#endif
