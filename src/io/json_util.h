// Small helpers shared by the JSON-reading parsers (safetensors headers, index.json, config.json).
#ifndef FD_JSON_UTIL_H
#define FD_JSON_UTIL_H
#include <jansson.h>
#include <string.h>

// "an object", "an integer", ... for "field X must be A, got B" messages.
static inline const char *fd_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

// Untrusted strings (tensor names, JSON values, parser messages) go into one-line error messages: cap their
// length and replace control characters so a crafted name cannot forge or split lines.
#define FD_PRINTABLE_MAX 120
static inline const char *fd_printable(const char *s, char *buf) {
    size_t n = 0;
    for (; s[n] && n < FD_PRINTABLE_MAX; n++) buf[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? '?' : s[n];
    if (s[n]) memcpy(buf + n, "...", 3), n += 3;
    buf[n] = 0;
    return buf;
}
// The buffer is a compound literal: it lives until the end of the enclosing block, long enough for a call.
#define FD_SAFE(s) fd_printable((s), (char[FD_PRINTABLE_MAX + 4]){0})
#endif
