#!/usr/bin/env bash
# One call on the GPU machine: device facts, the CUDA op + fixture tests, the 27B-geometry op bench, the CLI demo
# on the cuda backend and a compute-sanitizer memcheck pass over the op tests; a short table last.
# Binaries come prebuilt (make CUDA=1 STATIC_HOSTLIBS=1 BUILD=.dev/build .dev/build/fd_cuda_tests
# .dev/build/flashdelta) because the GPU machine has no -dev packages. Full logs go to $OUT.
set -u
BIN=${BIN:-.dev/build}
OUT=${OUT:-/tmp/fd_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.dev/lib:${LD_LIBRARY_PATH:-}
if [ ! -e /usr/local/cuda/lib64/libcublasLt.so.13 ]; then # fall back to the wheel's copy
    d=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
    [ -n "$d" ] && export LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH
fi
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

echo "== op + fixture tests (FD_CUDA_SYNC=1: faults are reported at the op that caused them)"
# One process per test, so a fatal error (fd_panic aborts) in one op does not hide the others.
TESTS="cuda_matmul cuda_rmsnorm cuda_elementwise cuda_embed cuda_split_q_gate cuda_gated_rmsnorm cuda_conv1d
       cuda_gdn_split cuda_gdn_serial cuda_gdn_chunked cuda_gdn_state_slots cuda_attention_gqa cuda_attention_non
       cuda_attention_mma cuda_copy_rows cuda_moe cuda_models_logits_match cuda_models_logits_bf16
       cuda_models_greedy cuda_dflash"
: >"$OUT/tests.log"
for t in $TESTS; do
    FD_CUDA_SYNC=1 timeout 60 "$BIN/fd_cuda_tests" "$t" >>"$OUT/tests.log" 2>&1 || echo "[$t exited $?]" >>"$OUT/tests.log"
done
grep -E '^(ok|FAIL) |FAIL |fatal|exited' "$OUT/tests.log" | head -60

echo "== bench"
FD_CUDA_BENCH=1 timeout 90 "$BIN/fd_cuda_tests" bench_cuda >"$OUT/bench.log" 2>&1
echo "exit $?"
echo "== bench again with per-stage events (FD_CUDA_PROFILE=1; these timings are not the headline ones)"
FD_CUDA_PROFILE=1 FD_CUDA_BENCH=1 timeout 90 "$BIN/fd_cuda_tests" bench_cuda >"$OUT/prof.log" 2>&1
echo "exit $?"

echo "== CLI demo on cuda"
[ -e /work/main/tests/data ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; } # FD_SOURCE_DIR of the build
timeout 60 "$BIN/flashdelta" run --backend cuda >"$OUT/demo.log" 2>&1
echo "exit $?"
tail -n 4 "$OUT/demo.log"

echo "== compute-sanitizer memcheck (op tests only)"
timeout 80 compute-sanitizer --tool memcheck --print-limit 8 "$BIN/fd_cuda_tests" cuda_matmul cuda_rmsnorm \
    cuda_conv cuda_gdn cuda_attention cuda_moe cuda_embed cuda_split cuda_gated cuda_elementwise cuda_copy \
    >"$OUT/memcheck.log" 2>&1
echo "exit $?"
grep -E 'ERROR SUMMARY|Invalid|passed' "$OUT/memcheck.log" | head -12

echo "== table: worst rel-L2 per op family (full lines in tests.log)"
awk '/rel-L2 [0-9.e+-]+$/ { op = $1; v = $NF + 0; if (!(op in m) || v > m[op]) m[op] = v }
     END { for (op in m) printf "  %-16s %.3g\n", op, m[op] }' "$OUT/tests.log" | sort
grep -E '^    gdn ' "$OUT/tests.log" | sed -E 's/^    gdn //'
grep -E 'logits rel-L2|greedy' "$OUT/tests.log" | sed -E 's/^    //'
grep -E '^BENCH' "$OUT/bench.log"
grep -E 'cuda prof' "$OUT/prof.log" | sed -E 's/^.*cuda prof //' | awk -F: '{ last[$1] = $0 } END { for (k in last) print "  prof " last[k] }' | sort
echo "tests: $(grep -c '^ok ' "$OUT/tests.log") ok, $(grep -c '^FAIL ' "$OUT/tests.log") failed, $(grep -c exited "$OUT/tests.log") aborted/failed processes"
