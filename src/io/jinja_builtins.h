// Helpers shared by jinja_builtins.c (functions, methods, lookup) and jinja_filters.c (filters, tests).
#ifndef FD_JINJA_BUILTINS_H
#define FD_JINJA_BUILTINS_H
#include "io/jinja_internal.h"

size_t jb_cp_at(const char *s, size_t n, size_t i, int32_t *cp); // decodes one code point at s[i]; its length
int jb_py_space(int32_t c);                                      // Python's str.isspace() for one character
jv *jb_strip(jj_arena *a, const jv *s, const jv *chars, int which); // which: 1 left, 2 right, 3 both
jv *jb_case(jj_arena *a, const jv *s, int mode);                    // 0 lower, 1 upper, 2 title, 3 capitalize
jv *jb_replace(jj_arena *a, const jv *s, const jv *old, const jv *new_, long long count);
// Argument i (positional) or `name` (keyword); NULL when not given.
jv *jb_arg(jv **args, int nargs, const char **kw, jv **kwv, int nkw, int i, const char *name);
long long jb_int_arg(jj_arena *a, const jv *v, long long dflt, const char *what);
#endif
