#!/usr/bin/env bash
# One GPU-machine call, in stages chosen by STAGES (default: tests bench sanit e2e tiny):
#   tests  every fd_cuda_tests test, one process each (FD_CUDA_SYNC=1 so a fault names its op)
#   nosync the same without FD_CUDA_SYNC, so launches overlap (route pdl): catches ordering races
#   bench  the op benches (FD_CUDA_BENCH=1): gemv, decode attention, prefill attention, 27B ops, fused norms, and
#          the op harness in perf mode (bench_cuda_op_table_dense / _seq: one BENCH line per table row), the tree
#          verify ops vs the chain's (bench_cuda_tree_ops)
#   prof   the 27B op table again with per-stage CUDA events (FD_CUDA_PROFILE=1; not headline timings)
#   sanit  compute-sanitizer memcheck/racecheck/synccheck over the newest kernels' small tests
#   e2e    flashdelta bench on the Qwen3.5-27B geometry (random bf16 weights), contexts $E2E_CTX
#   hfnoise HF's own bf16-vs-fp32 logits noise on the fixtures (tools/hf_bf16_noise.py)
#   tiny   the trained tiny target +- its DFlash drafter on the GPU (tokens/s, emitted tokens/round)
#   check  flashdelta check --backend cuda at the 27B's shapes (float64 screens; exit 0 only if all pass)
# Binaries come prebuilt (make CUDA=1 STATIC_HOSTLIBS=1 BUILD=.dev/build .dev/build/fd_cuda_tests
# .dev/build/flashdelta): the GPU machine has no -dev packages. Logs go to $OUT; a summary is printed last.
set -u
BIN=${BIN:-.dev/build}
OUT=${OUT:-/tmp/fd_out}
STAGES=${STAGES:-tests bench sanit check e2e tiny}
E2E_CTX=${E2E_CTX:-1024,65536}
E2E_ARGS=${E2E_ARGS:-}
SANIT_EXTRA=${SANIT_EXTRA:-}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
[ -e /work/main/tests/data ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; } # FD_SOURCE_DIR of the build
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }

if has tests; then
    stamp "tests"
    TESTS=${TESTS:-$(grep -ho 'TEST(cuda_[a-z0-9_]*' tests_cuda/*.c | sed 's/TEST(//')}
    : >"$OUT/tests.log"
    for t in $TESTS; do
        FD_CUDA_SYNC=1 timeout 90 "$BIN/fd_cuda_tests" "$t" >>"$OUT/tests.log" 2>&1 || echo "[$t exited $?]" >>"$OUT/tests.log"
    done
    grep -E '^(ok|FAIL) |FAIL |fatal|exited|EXPECT|ASSERT' "$OUT/tests.log" | head -80
fi
if has nosync; then
    stamp "tests without FD_CUDA_SYNC (overlapping launches)"
    TESTS=${TESTS:-$(grep -ho 'TEST(cuda_[a-z0-9_]*' tests_cuda/*.c | sed 's/TEST(//')}
    : >"$OUT/tests_nosync.log"
    for t in $TESTS; do
        timeout 90 "$BIN/fd_cuda_tests" "$t" >>"$OUT/tests_nosync.log" 2>&1 || echo "[$t exited $?]" >>"$OUT/tests_nosync.log"
    done
    echo "ok $(grep -c '^ok ' "$OUT/tests_nosync.log")"; grep -E '^FAIL |exited' "$OUT/tests_nosync.log" | head -20
fi
if has bench; then
    stamp "bench"
    for b in ${BENCHES:-bench_cuda_gemv bench_cuda_gemv_fused bench_cuda_gemv_fp8 bench_cuda_gemv_int4 bench_cuda_decode_attn bench_cuda_attn_prefill bench_cuda_27b_ops bench_cuda_gemv_sweep bench_cuda_gdn_serial bench_cuda_gdn_chunk bench_cuda_fused_norms bench_cuda_sampling bench_cuda_op_table_dense bench_cuda_op_table_seq bench_cuda_tree_ops}; do
        FD_CUDA_BENCH=1 timeout 120 "$BIN/fd_cuda_tests" $b >"$OUT/$b.log" 2>&1 || echo "[$b exited $?]"
        grep -E '^BENCH|FAIL|fatal' "$OUT/$b.log"
    done
fi
if has prof; then
    stamp "per-stage profile"
    FD_CUDA_PROFILE=1 FD_CUDA_BENCH=1 timeout 120 "$BIN/fd_cuda_tests" bench_cuda_27b >"$OUT/prof.log" 2>&1
    grep -E 'cuda prof' "$OUT/prof.log" | sed -E 's/^.*cuda prof //' | sort -u | head -40
fi
if has sanit; then
    stamp "sanitizers"
    # cuda_op_table_seq under SANIT_OP_TABLE: only the op table's rows of that op or route (the small mma ones)
    SANIT_TESTS=${SANIT_TESTS:-cuda_gemv_fallbacks cuda_decode_attn_smoke cuda_op_table_seq cuda_gdn_serial cuda_gdn_chunked cuda_gdn_state_slots cuda_gdn_bf16_vs cuda_gdn_bf16_route cuda_fused_smoke}
    for tool in ${SANIT_TOOLS:-memcheck racecheck synccheck}; do
        FD_OP_TABLE=${SANIT_OP_TABLE:-attn_kernel=mma} timeout 150 compute-sanitizer --tool $tool --print-limit 6 "$BIN/fd_cuda_tests" $SANIT_TESTS $SANIT_EXTRA \
            >"$OUT/sanit_$tool.log" 2>&1
        echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanit_$tool.log" | tr '\n' ' ')"
    done
fi
if has e2e; then
    stamp "e2e bench 27B at $E2E_CTX"
    timeout 420 "$BIN/flashdelta" bench --random-weights bench/configs/qwen3.5-27b.json \
        --draft-random bench/configs/qwen3.5-27b-dflash-b8.json --backend cuda --oracle-tau 4.74 --decode 32 \
        --contexts "$E2E_CTX" --json "$OUT/bench27b.json" $E2E_ARGS >"$OUT/e2e.log" 2>&1
    echo "exit $?"
    grep -vE '^\s*$' "$OUT/e2e.log" | tail -n 30
fi
if has check; then
    stamp "flashdelta check at the 27B's shapes"
    timeout 120 "$BIN/flashdelta" check --backend cuda --random-weights bench/configs/qwen3.5-27b.json >"$OUT/check.log" 2>&1
    echo "check exit $?"
    tail -n 16 "$OUT/check.log"
fi
if has tiny; then
    stamp "tiny trained model (8 held-out prompts, 64 new tokens, block 8)"
    timeout 60 "$BIN/flashdelta" run --backend cuda >"$OUT/tiny_run.log" 2>&1; echo "run exit $?"
    tail -n 5 "$OUT/tiny_run.log"
    python3 -c 'import json; [print(",".join(map(str, p["ids"]))) for p in json.load(open("tests/data/trained/val_prompts.json"))]' |
    while read -r ids; do
        a=$(timeout 60 "$BIN/flashdelta" generate models/tiny-qwen35 --backend cuda --ids "$ids" -n 64 2>&1 | tail -n 1)
        b=$(timeout 60 "$BIN/flashdelta" generate models/tiny-qwen35 --backend cuda --ids "$ids" -n 64 \
            --draft models/tiny-qwen35-dflash --stats 2>"$OUT/tiny_stats.tmp" | tail -n 1)
        [ "$a" = "$b" ] && same=identical || same=DIFFERENT
        echo "  prompt ${#ids} chars: $same; $(grep -iE 'emitted|tokens/round' "$OUT/tiny_stats.tmp" | head -n 2 | tr '\n' ' ')"
        cat "$OUT/tiny_stats.tmp" >>"$OUT/tiny_stats.log"
    done
fi
if has hfnoise; then
    stamp "HF transformers in bf16 vs its own fp32 on the fixtures"
    PYTHONUNBUFFERED=1 timeout 120 python3 tools/hf_bf16_noise.py 2>&1 | grep -vE "Warning|warn|^\s*$" | tail -n 8
fi
stamp "done"
