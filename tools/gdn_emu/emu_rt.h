// The emulation runtime of emu.h (threads, barriers, warp exchange, cp.async queues, block launch, scratch):
// included once, after emu.h, by the emulator that includes a kernel file (emu.cpp, tools/dw_emu.cpp).
thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, blockDim, gridDim;
alignas(1024) float4 sm4[65536]; // 1 MiB: more than any block asks for (1024-aligned: wgmma swizzle atoms)
int emu_cp_immediate = 0;
static size_t emu_smem_bytes;

static pthread_barrier_t block_bar;
static pthread_barrier_t warp_bar[32];
static uint32_t warp_slots[32][32][16];
static pthread_barrier_t wg_bar[8]; // warpgroups: 4 consecutive warps (wgmma)
static uint32_t wg_slots[8][128][16];

void __syncthreads() {
    pthread_barrier_wait(&block_bar);
}
void emu_warp_exchange(const uint32_t *mine, int n, uint32_t (*all)[16]) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    memcpy(warp_slots[w][lane], mine, 4 * n);
    pthread_barrier_wait(&warp_bar[w]);
    memcpy(all, warp_slots[w], sizeof warp_slots[w]);
    pthread_barrier_wait(&warp_bar[w]);
}

void emu_wg_exchange(const uint32_t *mine, int n, uint32_t (*all)[16]) {
    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    memcpy(wg_slots[wg][t], mine, 4 * n);
    pthread_barrier_wait(&wg_bar[wg]);
    memcpy(all, wg_slots[wg], sizeof wg_slots[wg]);
    pthread_barrier_wait(&wg_bar[wg]);
}

struct cp_req {
    void *dst;
    uint8_t data[16];
    int bytes; // 16, or 4 (emu_cp_async4)
};
static thread_local std::vector<std::vector<cp_req>> cp_groups; // committed
static thread_local std::vector<cp_req> cp_open;
static void emu_cp_async(void *dst, const void *src, bool valid, int bytes) {
    const uintptr_t d = (uintptr_t)dst;
    if (d & (bytes - 1) || d < (uintptr_t)sm4 || d + bytes > (uintptr_t)sm4 + emu_smem_bytes) {
        fprintf(stderr, "cp.async dst %p outside the block's shared memory or unaligned\n", dst);
        abort();
    }
    cp_req r;
    r.dst = dst, r.bytes = bytes;
    if (valid)
        memcpy(r.data, src, bytes);
    else
        memset(r.data, 0, bytes);
    if (emu_cp_immediate)
        memcpy(dst, r.data, bytes);
    else
        cp_open.push_back(r);
}
void cu_cp_async16(void *dst, const void *src, bool valid) {
    emu_cp_async(dst, src, valid, 16);
}
void emu_cp_async4(void *dst, const void *src, bool valid) {
    emu_cp_async(dst, src, valid, 4);
}
void cu_cp_async_commit(void) {
    cp_groups.push_back(cp_open);
    cp_open.clear();
}
void emu_cp_wait(int n) {
    while ((int)cp_groups.size() > n) {
        for (auto &r : cp_groups.front()) memcpy(r.dst, r.data, r.bytes);
        cp_groups.erase(cp_groups.begin());
    }
}

void emu_run_blocks(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *ctx) {
    if (smem > sizeof sm4) {
        fprintf(stderr, "smem %zu too large\n", smem);
        abort();
    }
    gridDim = {grid.x, grid.y, grid.z}, blockDim = {block.x, block.y, block.z};
    emu_smem_bytes = smem;
    pthread_barrier_init(&block_bar, NULL, block.x);
    for (unsigned w = 0; w < block.x / 32; w++) pthread_barrier_init(&warp_bar[w], NULL, 32);
    for (unsigned w = 0; w < block.x / 128; w++) pthread_barrier_init(&wg_bar[w], NULL, 128);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = {x, y, z};
                memset(sm4, 0xff, smem); // NaN in fp32 and bf16
                std::vector<std::thread> th;
                for (unsigned t = 0; t < block.x; t++)
                    th.emplace_back([=] {
                        threadIdx = {t, 0, 0};
                        cp_groups.clear(), cp_open.clear();
                        body(ctx);
                    });
                for (auto &t : th) t.join();
            }
    pthread_barrier_destroy(&block_bar);
    for (unsigned w = 0; w < block.x / 32; w++) pthread_barrier_destroy(&warp_bar[w]);
    for (unsigned w = 0; w < block.x / 128; w++) pthread_barrier_destroy(&wg_bar[w]);
}

static void *scr[CU_SCR_COUNT];
void *cu_scratch(fd_backend *, int slot, size_t bytes) {
    free(scr[slot]);
    scr[slot] = malloc(bytes + 64);
    memset(scr[slot], 0xff, bytes + 64);
    return scr[slot];
}
