// Tests of src/base: dtype conversions, error messages, thread pool.
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "test.h"

TEST(base_bf16_roundtrip) {
    float vals[] = {0.f, 1.f, -2.5f, 3.14159f, 1e-30f, 65504.f, -1e20f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float r = fd_bf16_to_f32(fd_f32_to_bf16(vals[i]));
        EXPECT(fabsf(r - vals[i]) <= fabsf(vals[i]) * (1.f / 128.f), "bf16 %g -> %g", vals[i], r);
    }
    EXPECT(fd_f32_to_bf16(1.0f) == 0x3f80);
    EXPECT(isnan(fd_bf16_to_f32(fd_f32_to_bf16(NAN))));
}

TEST(base_f16_roundtrip) {
    float vals[] = {0.f, 1.f, -2.5f, 3.140625f, 6.1035156e-05f, 5.9604645e-08f, 65504.f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float r = fd_f16_to_f32(fd_f32_to_f16(vals[i]));
        EXPECT(r == vals[i], "f16 %g -> %g", vals[i], r);
    }
    EXPECT(fd_f32_to_f16(1.0f) == 0x3c00);
    EXPECT(isinf(fd_f16_to_f32(fd_f32_to_f16(1e6f))));
}

TEST(base_error_prefix) {
    fd_error_set("tensor %s missing", "x");
    fd_error_prefix("file %s", "a.safetensors");
    EXPECT(!strcmp(fd_error_msg(), "file a.safetensors: tensor x missing"), "%s", fd_error_msg());
}

static void sum_range(void *ctx, int64_t b, int64_t e) {
    int64_t *out = ctx;
    for (int64_t i = b; i < e; i++) out[i] = i * 2;
}

TEST(base_parallel_for_covers_range) {
    fd_threads_init(0);
    int64_t n = 100003;
    int64_t *v = calloc((size_t)n, sizeof *v);
    fd_parallel_for(n, 7, sum_range, v);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= v[i] == i * 2;
    EXPECT(ok);
    free(v);
}

// Every e4m3 code decodes to a value that encodes back to the same code; values between two codes round to the
// nearer one (ties to even); out-of-range saturates.
TEST(base_e4m3_roundtrip_and_rounding) {
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f) continue; // NaN
        float v = fd_e4m3_to_f32((uint8_t)b);
        uint8_t back = fd_f32_to_e4m3(v);
        EXPECT(back == b || (v == 0 && (back & 0x7f) == 0), "code 0x%02x -> %g -> 0x%02x", b, v, back);
    }
    EXPECT(fd_e4m3_to_f32(0x7e) == 448.0f && fd_e4m3_to_f32(0x01) == ldexpf(1, -9) && fd_e4m3_to_f32(0x08) == ldexpf(1, -6));
    EXPECT(fd_f32_to_e4m3(1000.0f) == 0x7e && fd_f32_to_e4m3(-1000.0f) == 0xfe);
    EXPECT(fd_f32_to_e4m3(1.0625f) == fd_f32_to_e4m3(1.0f), "1 + 1/16 is a tie: to the even mantissa 1.0");
    EXPECT(fd_f32_to_e4m3(1.1875f) == fd_f32_to_e4m3(1.25f), "1 + 3/16 is a tie: to the even mantissa 1.25");
    EXPECT(fd_e4m3_to_f32(fd_f32_to_e4m3(1.07f)) == 1.125f);
    EXPECT(isnan(fd_e4m3_to_f32(fd_f32_to_e4m3(NAN))));
    // relative error of any in-range value is at most half a mantissa step: 2^-4
    uint64_t seed = 3;
    float x[2000];
    test_fill_uniform(x, 2000, -400, 400, &seed);
    for (int i = 0; i < 2000; i++)
        if (fabsf(x[i]) > ldexpf(1, -6))
            EXPECT(fabsf(fd_e4m3_to_f32(fd_f32_to_e4m3(x[i])) - x[i]) <= fabsf(x[i]) / 16 + 1e-7f, "%g", x[i]);
}
