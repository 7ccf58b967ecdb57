// flashdelta base implementation: errors, logging, allocation, dtype conversion, files.
#include "base.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_err[1024];
static _Thread_local int g_err_code;

// The thread's error: the message and its code.
static FD_PRINTF(2, 0) void error_vset(int code, const char *fmt, va_list ap) {
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    g_err_code = code;
}

int fd_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(FD_ERR_GENERIC, fmt, ap);
    va_end(ap);
    return -1;
}

int fd_error_set_code(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(code, fmt, ap);
    va_end(ap);
    return -1;
}

int fd_error_code(void) { return g_err_code; }

int fd_error_prefix(const char *fmt, ...) {
    char old[sizeof g_err];
    memcpy(old, g_err, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof g_err) {
        size_t used = (size_t)n;
        size_t room = sizeof g_err - used;
        if (room > 2) {
            memcpy(g_err + used, ": ", 2);
            used += 2;
            room -= 2;
            size_t ol = strnlen(old, sizeof old - 1);
            if (ol >= room) ol = room - 1;
            memcpy(g_err + used, old, ol);
            g_err[used + ol] = 0;
        }
    }
    return -1;
}

const char *fd_error_msg(void) { return g_err[0] ? g_err : "unknown error"; }
void fd_error_clear(void) { g_err[0] = 0, g_err_code = FD_ERR_GENERIC; }

// The rest of a fatal message after its prefix: the formatted text and a newline, flushed, then abort.
static FD_NORETURN FD_PRINTF(1, 0) void panic_vfinish(const char *fmt, va_list ap) {
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void fd_panic(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "flashdelta: fatal: %s:%d: ", file, line);
    va_start(ap, fmt);
    panic_vfinish(fmt, ap); // aborts: no va_end needed after it
}

void fd_panic_check(const char *file, int line, const char *cond, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "flashdelta: fatal: %s:%d: check failed: %s", file, line, cond);
    va_start(ap, fmt);
    panic_vfinish(fmt, ap);
}

void *fd_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) FD_PANIC("out of memory allocating %zu bytes", n);
    return p;
}
void *fd_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) FD_PANIC("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}
void *fd_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) FD_PANIC("out of memory reallocating %zu bytes", n);
    return q;
}
char *fd_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = fd_malloc(n);
    memcpy(d, s, n);
    return d;
}
char *fd_sprintf(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = fd_malloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

// Read by every thread that logs: atomic, and the FD_LOG default is computed once (a plain lazily written int was
// a data race under TSan when two threads logged first at the same time).
static atomic_int g_log_level = -1;
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static void log_level_from_env(void) {
    const char *e = getenv("FD_LOG");
    int lv = FD_LOG_INFO;
    if (e && !strcmp(e, "debug")) lv = FD_LOG_DEBUG;
    if (e && !strcmp(e, "warn")) lv = FD_LOG_WARN;
    if (e && !strcmp(e, "quiet")) lv = FD_LOG_QUIET;
    int unset = -1; // fd_log_set_level before the first log line wins
    atomic_compare_exchange_strong(&g_log_level, &unset, lv);
}
void fd_log_set_level(int level) { atomic_store(&g_log_level, level); }
static int log_level(void) {
    pthread_once(&g_log_once, log_level_from_env);
    return atomic_load(&g_log_level);
}
int fd_log_level_enabled(int level) { return level >= log_level(); }

// One line is formatted whole and written with one write(2), so lines from different threads never interleave
// (stdio writes a line in several calls when it is built from several pieces).
void fd_log(int level, const char *fmt, ...) {
    if (level < log_level()) return;
    char buf[4096];
    const char *pre = level >= FD_LOG_WARN ? "flashdelta: warning: " : "flashdelta: ";
    size_t n = strlen(pre);
    memcpy(buf, pre, n);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
    va_end(ap);
    if (k < 0) k = 0;
    n += (size_t)k < sizeof buf - n - 1 ? (size_t)k : sizeof buf - n - 2; // a longer line is cut, not split
    buf[n++] = '\n';
    fflush(stderr); // whatever stdio still holds goes first
    for (size_t off = 0; off < n;) {
        ssize_t w = write(STDERR_FILENO, buf + off, n - off);
        if (w <= 0 && errno != EINTR) break;
        if (w > 0) off += (size_t)w;
    }
}

double fd_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const k_dtype_names[FD_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32", "I64",
                                                          "U8",  "I8",  "F64",  "BOOL", "F8_E4M3"};
static const size_t k_dtype_sizes[FD_DTYPE_COUNT] = {4, 2, 2, 4, 8, 1, 1, 8, 1, 1};
const char *fd_dtype_name(fd_dtype t) { return (unsigned)t < FD_DTYPE_COUNT ? k_dtype_names[t] : "?"; }
size_t fd_dtype_size(fd_dtype t) { return (unsigned)t < FD_DTYPE_COUNT ? k_dtype_sizes[t] : 0; }

// A float's bits and back (memcpy: the one well-defined type pun in C).
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float fd_bf16_to_f32(uint16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}
uint16_t fd_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float fd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { // subnormal: normalise
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return f32_from_bits(u);
}
uint16_t fd_f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}

float fd_e4m3_to_f32(uint8_t b) {
    const int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 0xf && man == 7) return NAN;
    if (exp == 0) v = ldexpf((float)man, -9); // subnormal: man/8 * 2^-6
    else v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -v : v;
}

// Same result as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3): exact rounding of the float to the
// nearest representable e4m3 value (ties to even mantissa), saturated at 448.
uint8_t fd_f32_to_e4m3(float f) {
    if (isnan(f)) return 0x7f;
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return sign | 0x7e; // saturate (464 would round to 480, which does not exist)
    if (a < ldexpf(1.0f, -10)) return sign; // below half the smallest subnormal (2^-9): zero
    int e;
    frexpf(a, &e);                     // a = m * 2^e, m in [0.5, 1)
    int exp = e - 1 + 7;               // biased exponent of a = 1.x * 2^(e-1)
    if (exp < 1) exp = 1;              // subnormal range shares the exponent of the smallest normal
    const float step = ldexpf(1.0f, exp - 7 - 3); // spacing of representable values at this exponent
    float q = a / step;                // in [8, 16) for normals, [0, 8) for subnormals: exact in float
    float r = nearbyintf(q);           // ties to even under the default rounding mode
    int mant = (int)r;
    if (mant >= 16) { // rounded up into the next binade
        mant = 8;
        exp++;
    }
    if (mant < 8) return sign | (uint8_t)mant; // subnormal (exp field 0)
    if (exp > 15 || (exp == 15 && mant - 8 == 7)) return sign | 0x7e;
    return sign | (uint8_t)(exp << 3) | (uint8_t)(mant - 8);
}

char *fd_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fd_error_set("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = fd_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = fd_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        fd_error_set("%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int fd_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *fd_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir);
    return fd_sprintf("%s%s%s", dir, (n && dir[n - 1] == '/') ? "" : "/", name);
}
