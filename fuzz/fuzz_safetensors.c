// libFuzzer target for the safetensors header parser: arbitrary bytes as a whole file. st_parse must
// either fail cleanly or return tensors whose data ranges lie inside the buffer.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // A private copy of exactly `size` bytes so ASan flags any read past the end.
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    st_tensor *ts = NULL;
    int n = 0;
    if (st_parse(buf, size, "fuzz.safetensors", &ts, &n) == 0) {
        for (int i = 0; i < n; i++) {
            const uint8_t *p = ts[i].data;
            FD_CHECK(p >= buf && p + ts[i].nbytes <= buf + size, "tensor %s out of bounds", ts[i].name);
            FD_CHECK(ts[i].name[0] != 0 && ts[i].ndim >= 0 && ts[i].ndim <= ST_MAX_DIMS);
            size_t off = (size_t)(p - buf), esz = fd_dtype_size(ts[i].dtype);
            FD_CHECK(ts[i].nbytes == 0 || off / esz * esz == off, "tensor %s misaligned", ts[i].name);
            FD_CHECK(i == 0 || strcmp(ts[i - 1].name, ts[i].name) < 0, "not sorted/unique");
            uint64_t count = 1;
            for (int d = 0; d < ts[i].ndim; d++) count *= (uint64_t)ts[i].shape[d];
            FD_CHECK(count * fd_dtype_size(ts[i].dtype) == ts[i].nbytes, "size mismatch");
            // Touch the bytes: they must be readable.
            volatile uint8_t sink = 0;
            for (size_t k = 0; k < ts[i].nbytes; k++) sink ^= p[k];
            (void)sink;
        }
        for (int i = 0; i < n; i++) free(ts[i].name);
        free(ts);
    } else {
        FD_CHECK(ts == NULL && n == 0);
        FD_CHECK(strstr(fd_error_msg(), "fuzz.safetensors") != NULL, "error lacks the file name: %s", fd_error_msg());
        FD_CHECK(strchr(fd_error_msg(), '\n') == NULL, "multi-line error: %s", fd_error_msg());
    }
    free(buf);
    return 0;
}
