// flashdelta base: the one error-handling family, logging, allocation helpers, timers.
//
// Two kinds of failure, two mechanisms:
//  - Bad *input* (files, configs, requests): functions return -1 after fd_error_set(); the caller adds
//    context with fd_error_prefix() or reports fd_error_msg(). Never a crash.
//  - Broken *invariants* (our bugs, out-of-memory, CUDA API failures): FD_CHECK / FD_CUDA_CHECK print
//    file:line and abort.
#ifndef FD_BASE_H
#define FD_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define FD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define FD_NORETURN __attribute__((noreturn))
#else
#define FD_PRINTF(a, b)
#define FD_NORETURN
#endif

// ---- recoverable errors (thread-local message) ----
int fd_error_set(const char *fmt, ...) FD_PRINTF(1, 2);    // always returns -1
int fd_error_prefix(const char *fmt, ...) FD_PRINTF(1, 2); // prepends "<text>: "; returns -1
const char *fd_error_msg(void);
void fd_error_clear(void);
// Conditions a caller branches on get a code besides the message (fd_error_set clears it; fd_error_prefix keeps it),
// so no caller has to search the message text.
// FD_ERR_REFUSED: the setup refused to start as configured (tensor-parallel ranks that disagree): exit status 2.
enum { FD_ERR_GENERIC = 0, FD_ERR_KV_FULL = 1, FD_ERR_REFUSED = 2 };
int fd_error_set_code(int code, const char *fmt, ...) FD_PRINTF(2, 3); // always returns -1
int fd_error_code(void);

// Propagate a failure (-1 / NULL) from a callee that already set the message.
#define FD_TRY(expr)                                                                                                   \
    do {                                                                                                               \
        if ((expr) != 0) return -1;                                                                                    \
    } while (0)

// ---- invariants ----
FD_NORETURN void fd_panic(const char *file, int line, const char *fmt, ...) FD_PRINTF(3, 4);
FD_NORETURN void fd_panic_check(const char *file, int line, const char *cond, const char *fmt, ...) FD_PRINTF(4, 5);
// The condition text goes in as an argument, never into the format (a '%' in it would be a conversion).
#define FD_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) fd_panic_check(__FILE__, __LINE__, #cond, " " __VA_ARGS__);                                       \
    } while (0)
#define FD_PANIC(...) fd_panic(__FILE__, __LINE__, __VA_ARGS__)

// ---- allocation (aborts with a message on out-of-memory) ----
void *fd_malloc(size_t n);
void *fd_calloc(size_t count, size_t size);
void *fd_realloc(void *p, size_t n);
char *fd_strdup(const char *s);
char *fd_sprintf(const char *fmt, ...) FD_PRINTF(1, 2); // malloc'ed

// ---- logging (stderr; level from FD_LOG=debug|info|warn|quiet) ----
enum { FD_LOG_DEBUG = 0, FD_LOG_INFO = 1, FD_LOG_WARN = 2, FD_LOG_QUIET = 3 };
void fd_log(int level, const char *fmt, ...) FD_PRINTF(2, 3);
#define FD_INFO(...) fd_log(FD_LOG_INFO, __VA_ARGS__)
#define FD_WARN(...) fd_log(FD_LOG_WARN, __VA_ARGS__)
#define FD_DEBUG(...) fd_log(FD_LOG_DEBUG, __VA_ARGS__)
void fd_log_set_level(int level);
int fd_log_level_enabled(int level);

// ---- time ----
double fd_time_s(void); // monotonic seconds

// ---- numeric formats ----
typedef enum { FD_F32 = 0, FD_F16, FD_BF16, FD_I32, FD_I64, FD_U8, FD_I8, FD_F64, FD_BOOL, FD_F8E4M3, FD_DTYPE_COUNT } fd_dtype;
const char *fd_dtype_name(fd_dtype t);
size_t fd_dtype_size(fd_dtype t);
float fd_bf16_to_f32(uint16_t h);
uint16_t fd_f32_to_bf16(float f); // round to nearest even
float fd_f16_to_f32(uint16_t h);
uint16_t fd_f32_to_f16(float f);
// FP8 E4M3 (OCP "e4m3fn": no infinities, max 448): round to nearest even, saturating to +-448, NaN kept.
uint8_t fd_f32_to_e4m3(float f);
float fd_e4m3_to_f32(uint8_t b);

// ---- files ----
// Reads a whole file (NUL-terminated; *len excludes the NUL). NULL + fd_error on failure.
char *fd_read_file(const char *path, size_t *len);
int fd_file_exists(const char *path);
char *fd_path_join(const char *dir, const char *name); // malloc'ed

#endif
