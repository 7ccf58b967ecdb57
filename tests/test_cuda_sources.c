// Source rules of the CUDA backend that a CPU-only machine can check (no GPU needed):
//  - every kernel is launched through cu_launch (cuda_common.h), never with <<< >>>, so the pdl route and the
//    launch check apply to all of them;
//  - every __global__ function body calls CU_PDL_ENTER: under route pdl=gemv a kernel may be scheduled before the
//    one ahead of it has finished, and without the wait it would read that kernel's inputs or outputs too early;
//  - a file that launches kernels early (cu_launch_early) has no __ldg: a non-coherent load may be scheduled
//    above the wait and read the previous kernel's output before it is written (cuda_common.h).
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "test.h"

// Offset of the brace that closes the one opening at s[open].
static size_t closing_brace(const char *s, size_t open) {
    int depth = 0;
    for (size_t i = open; s[i]; i++) {
        if (s[i] == '{') depth++;
        if (s[i] == '}' && --depth == 0) return i;
    }
    return strlen(s);
}

TEST(cuda_sources_kernels_launch_through_cu_launch_and_wait) {
    const char *dir_path = FD_SOURCE_DIR "/src/cuda";
    DIR *dir = opendir(dir_path);
    ASSERT(dir, "cannot open %s", dir_path);
    int files = 0, kernels = 0, early_files = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".cu")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir_path, de->d_name);
        char *src = fd_read_file(path, NULL);
        ASSERT(src, "%s", fd_error_msg());
        files++;
        EXPECT(!strstr(src, "<<<"), "%s launches a kernel with <<< >>> instead of cu_launch", de->d_name);
        if (strstr(src, "cu_launch_early(")) {
            early_files++;
            EXPECT(!strstr(src, "__ldg("), "%s launches early (cu_launch_early) but reads with __ldg", de->d_name);
        }
        for (const char *g = strstr(src, "__global__"); g; g = strstr(g + 1, "__global__")) {
            const char *open = strchr(g, '{');
            ASSERT(open, "%s: __global__ without a body", de->d_name);
            size_t end = closing_brace(src, (size_t)(open - src));
            char *body = fd_malloc(end - (size_t)(open - src) + 1);
            memcpy(body, open, end - (size_t)(open - src));
            body[end - (size_t)(open - src)] = 0;
            const char *name_end = strchr(g, '(');
            EXPECT(strstr(body, "CU_PDL_ENTER()"), "%s: kernel at '%.60s' never calls CU_PDL_ENTER", de->d_name,
                   name_end ? g : "?");
            free(body);
            kernels++;
        }
        free(src);
    }
    closedir(dir);
    printf("    %d .cu files, %d kernels checked, %d file(s) launching early\n", files, kernels, early_files);
    EXPECT(files >= 10 && kernels >= 30, "found only %d files / %d kernels under %s", files, kernels, dir_path);
    EXPECT(early_files >= 1, "no file launches with cu_launch_early: the rule above checked nothing");
}

// Layering (docs/architecture.md): the backends sit below the engine, so no backend source includes an engine,
// model, server or cli header (the CPU backend's sampling uses base/sample_math.h, as the engine's sampler does).
TEST(backend_sources_include_nothing_above_them) {
    static const char *const dirs[] = {FD_SOURCE_DIR "/src/cpu", FD_SOURCE_DIR "/src/cuda"};
    static const char *const above[] = {"#include \"engine/", "#include \"model/", "#include \"server/",
                                        "#include \"cli/"};
    int files = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        DIR *dir = opendir(dirs[d]);
        ASSERT(dir, "cannot open %s", dirs[d]);
        struct dirent *de;
        while ((de = readdir(dir))) {
            if (de->d_name[0] == '.') continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dirs[d], de->d_name);
            char *src = fd_read_file(path, NULL);
            ASSERT(src, "%s", fd_error_msg());
            files++;
            for (size_t a = 0; a < sizeof above / sizeof above[0]; a++)
                EXPECT(!strstr(src, above[a]), "%s includes a header from above the backend (%s...)", de->d_name,
                       above[a]);
            free(src);
        }
        closedir(dir);
    }
    EXPECT(files > 20, "only %d backend files found", files);
}

// One environment name per route (docs/routes.md): route variables (FD_ROUTE_<NAME>) are read by engine/routes.c
// only, so the CUDA backend may read nothing from the environment but its two debug knobs and where NCCL is
// (FD_NCCL_LIB, cuda_group.cu), which select no route. A getenv of anything else in src/cuda (an FD_CUDA_<route>
// name put back) fails here.
TEST(cuda_sources_read_no_route_variables) {
    static const char *const knobs[] = {"FD_CUDA_SYNC", "FD_CUDA_PROFILE", "FD_NCCL_LIB"};
    const char *dir_path = FD_SOURCE_DIR "/src/cuda";
    DIR *dir = opendir(dir_path);
    ASSERT(dir, "cannot open %s", dir_path);
    int reads = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir_path, de->d_name);
        char *src = fd_read_file(path, NULL);
        ASSERT(src, "%s", fd_error_msg());
        for (const char *g = strstr(src, "getenv("); g; g = strstr(g + 1, "getenv(")) {
            const char *name = g + strlen("getenv(");
            int known = 0;
            for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++) {
                const size_t n = strlen(knobs[k]);
                known |= name[0] == '"' && !strncmp(name + 1, knobs[k], n) && name[1 + n] == '"';
            }
            EXPECT(known, "%s reads '%.40s' from the environment (routes are read by engine/routes.c only)",
                   de->d_name, name);
            reads++;
        }
        free(src);
    }
    closedir(dir);
    EXPECT(reads >= 2, "only %d getenv calls found under %s: the rule above checked nothing", reads, dir_path);
}
