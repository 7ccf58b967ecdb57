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
#   tree   tree verify vs chain: the tiny trained pair (host clock) and the 27B geometry at 1K (issue 22)
#   compare the previous main's binary (OLD_BIN) vs this one: fixture logits byte for byte, the 27B bench (issue 14)
#   servetp serve plain vs --tp 1, with and without the drafter: the same greedy completions (issue 17)
#   gdnprof the GDN chunk / attention prefill benches with per-stage events (issue 16)
#   kernels ncu per-kernel time of a 27B decode step and a DFlash round at 1K, graphs off (tools/ncu_step.py)
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
export FD_BIN=${FD_BIN:-$BIN/flashdelta} # the binary the CLI tests run (cuda_dflash_cli_generate_draft)
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
if has kernels; then
    stamp "per-kernel split of a decode step and a round (ncu, 27B at 1K, graphs off)"
    B="$BIN/flashdelta bench --random-weights bench/configs/qwen3.5-27b.json --backend cuda --contexts 1024 --route graphs=off --decode 2"
    NCU="/usr/local/cuda/bin/ncu --csv --print-units base --metrics gpu__time_duration.sum --cache-control none --clock-control none"
    timeout 200 $NCU $B >"$OUT/ncu_dec.csv" 2>"$OUT/ncu_dec.err"; echo "ncu decode exit $?"
    python3 tools/ncu_step.py "$OUT/ncu_dec.csv" | head -30
    timeout 220 $NCU $B --draft-random bench/configs/qwen3.5-27b-dflash-b8.json --oracle-tau 4.74 >"$OUT/ncu_round.csv" \
        2>"$OUT/ncu_round.err"; echo "ncu round exit $?"
    python3 tools/ncu_step.py "$OUT/ncu_round.csv" | head -60
    xz -f "$OUT/ncu_dec.csv" "$OUT/ncu_round.csv"
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
if has tree; then
    # issue 22: tree verify against the chain. The tiny trained pair (host clock: emitted tokens/round over round
    # ms from --stats, greedy output compared with plain greedy), then the 27B geometry at 1K: a chain of block 8,
    # a chain of block 16 and a tree of budget 15 (16 rows, as the block-16 chain), DFlash2's drafter geometry with
    # and without the tree.
    stamp "tree vs chain: tiny trained pair (8 held-out prompts, 64 new tokens, block 8)"
    python3 -c 'import json; [print(",".join(map(str, p["ids"]))) for p in json.load(open("tests/data/trained/val_prompts.json"))]' >"$OUT/val_ids.txt"
    for v in "chain|" "tree15|--route spec_verify=tree --tree-budget 15" "tree32|--route spec_verify=tree --tree-budget 32"; do
        name=${v%%|*} args=${v#*|} diff=0
        : >"$OUT/tree_$name.stats"
        while read -r ids; do
            a=$(timeout 60 "$BIN/flashdelta" generate models/tiny-qwen35 --backend cuda --ids "$ids" -n 64 2>/dev/null)
            b=$(timeout 60 "$BIN/flashdelta" generate models/tiny-qwen35 --backend cuda --ids "$ids" -n 64 \
                --draft models/tiny-qwen35-dflash --stats $args 2>>"$OUT/tree_$name.stats")
            [ "$a" = "$b" ] || diff=$((diff + 1))
        done <"$OUT/val_ids.txt"
        awk -v n="$name" -v d="$diff" '/emitted tokens\/round/ { for (i = 1; i <= NF; i++) { if ($i == "tokens/round") e += $(i + 1);
            if ($i == "round") r += $(i + 1) } k++ } END { printf "  %-7s %d prompts, %d differ from plain greedy: emitted/round %.3f, round %.3f ms, %.0f tok/s\n",
            n, k, d, e / k, r / k, 1e3 * e / r }' "$OUT/tree_$name.stats"
    done
    for v in "chain b8|" "chain b16|--block-size 16" "tree 15 (b8)|--route spec_verify=tree --tree-budget 15" \
        "dflash2 chain|--draft-random bench/configs/qwen3.5-27b-dflash2-b8.json" \
        "dflash2 tree 15|--draft-random bench/configs/qwen3.5-27b-dflash2-b8.json --route spec_verify=tree --tree-budget 15"; do
        name=${v%%|*} args=${v#*|}
        stamp "27B at 1K: $name"
        timeout 150 "$BIN/flashdelta" bench --random-weights bench/configs/qwen3.5-27b.json \
            --draft-random bench/configs/qwen3.5-27b-dflash-b8.json --backend cuda --oracle-tau 4.74 --decode 32 \
            --contexts 1024 $args >"$OUT/tree27b.log" 2>&1
        echo "  exit $?"; grep -E '^bench: ctx' "$OUT/tree27b.log" | sed 's/^bench: /  /'
    done
fi
if has compare; then
    # issue 14: the previous main's binary ($OLD_BIN) against this one on the same GPU in one call: every fixture's
    # logits (and every DFlash fixture's draft logits) compared byte for byte, then the 27B bench alternated.
    stamp "old $OLD_BIN vs new $BIN: fixture logits, cuda"
    for d in tests/data/fixtures/*/; do
        [ -f "$d/prompt.json" ] || continue
        ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["ids"])))' "$d/prompt.json")
        for b in old new; do
            bin=$BIN; [ $b = old ] && bin=$OLD_BIN
            rm -f "$OUT/l_$b.f32"
            timeout 60 "$bin/flashdelta" logits "$d" --backend cuda --ids "$ids" --out "$OUT/l_$b.f32" >"$OUT/l_$b.log" 2>&1
            eval "rc_$b=$?"
        done
        if [ "$rc_old" != 0 ]; then echo "  $(basename "$d"): old binary exit $rc_old ($(tail -n 1 "$OUT/l_old.log" | cut -c1-100))"
        elif cmp -s "$OUT/l_old.f32" "$OUT/l_new.f32"; then echo "  $(basename "$d"): identical ($(stat -c %s "$OUT/l_new.f32") bytes)"
        else echo "  $(basename "$d"): DIFFERENT (new exit $rc_new)"; fi
    done
    for d in tests/data/dflash/*/; do
        t=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["target"])' "$d/draft.json")
        ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["ids"])))' "tests/data/fixtures/$t/prompt.json")
        for b in old new; do
            bin=$BIN; [ $b = old ] && bin=$OLD_BIN
            rm -f "$OUT/l_$b.f32"
            timeout 60 "$bin/flashdelta" draft-logits "tests/data/fixtures/$t" --draft "$d" --backend cuda --ids "$ids" \
                --out "$OUT/l_$b.f32" >"$OUT/l_$b.log" 2>&1
            eval "rc_$b=$?"
        done
        if [ "$rc_old" != 0 ] || [ "$rc_new" != 0 ]; then echo "  draft $(basename "$d"): exit old $rc_old new $rc_new ($(tail -n 1 "$OUT/l_new.log" | cut -c1-100))"
        elif cmp -s "$OUT/l_old.f32" "$OUT/l_new.f32"; then echo "  draft $(basename "$d"): identical ($(stat -c %s "$OUT/l_new.f32") bytes)"
        else echo "  draft $(basename "$d"): DIFFERENT"; fi
    done
    # CMP_RUNS: the order of the bench runs; tp1 = this binary with --tp 1 (issue 17: the NCCL path, one rank)
    i=0
    for b in ${CMP_RUNS:-old new old new}; do
        i=$((i + 1))
        bin=$BIN extra=""
        [ $b = old ] && bin=$OLD_BIN
        [ $b = tp1 ] && extra="--tp 1"
        stamp "27B bench, $b, run $i"
        timeout 200 "$bin/flashdelta" bench --random-weights bench/configs/qwen3.5-27b.json \
            --draft-random bench/configs/qwen3.5-27b-dflash-b8.json --backend cuda --oracle-tau 4.74 --decode 32 \
            --contexts ${CMP_CTX:-1024,32768} $extra >"$OUT/cmp_bench_$b$i.log" 2>&1
        echo "  exit $?"; grep -E '^bench: ctx|agree|error' "$OUT/cmp_bench_$b$i.log" | sed 's/^bench: /  /' | cut -c1-200
    done
fi
if has servetp; then
    # issue 17: serve on the tiny trained pair, plain and --tp 1 (the NCCL group of one rank), plain and DFlash:
    # the same greedy completions (8 held-out prompts, 48 tokens) and the rank-labelled metrics.
    stamp "serve: plain vs --tp 1 (tiny trained pair, greedy, with and without the drafter)"
    for v in "plain|" "tp1|--tp 1" "draft|--draft models/tiny-qwen35-dflash" "draft-tp1|--draft models/tiny-qwen35-dflash --tp 1"; do
        name=${v%%|*} args=${v#*|}
        rm -f "$OUT/port_$name"
        "$BIN/flashdelta" serve models/tiny-qwen35 --backend cuda --port 0 --port-file "$OUT/port_$name" $args \
            >"$OUT/serve_$name.log" 2>&1 &
        pid=$!
        for _ in $(seq 100); do [ -s "$OUT/port_$name" ] && break; sleep 0.2; done
        python3 - "$(cat "$OUT/port_$name" 2>/dev/null)" tests/data/trained/val_prompts.json >"$OUT/serve_$name.txt" <<'PY'
import json, sys, urllib.request
port, prompts = sys.argv[1], json.load(open(sys.argv[2]))
for p in prompts:
    body = json.dumps({"prompt": p["ids"], "max_tokens": 48, "temperature": 0}).encode()
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    print(json.dumps(json.load(urllib.request.urlopen(r, timeout=60))["choices"][0]["text"]))
m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
print("#metrics", sum(1 for l in m.splitlines() if 'rank="0"' in l), "rank-labelled lines", file=sys.stderr)
PY
        echo "  $name: exit $? $(wc -l <"$OUT/serve_$name.txt") answers, $(md5sum <"$OUT/serve_$name.txt" | cut -c1-12)"
        kill $pid; wait $pid 2>/dev/null
    done
    for n in tp1 draft draft-tp1; do
        cmp -s "$OUT/serve_plain.txt" "$OUT/serve_$n.txt" && echo "  $n == plain" || echo "  $n DIFFERS from plain"
    done
fi
if has gdnprof; then
    # issue 16: the GDN chunk routes and the attention prefill, with per-stage CUDA events (intra | state_out)
    stamp "GDN chunk + attention prefill benches, FD_CUDA_PROFILE=1"
    for b in bench_cuda_gdn_chunk bench_cuda_attn_prefill; do
        FD_CUDA_PROFILE=1 FD_CUDA_BENCH=1 timeout 150 "$BIN/fd_cuda_tests" $b >"$OUT/prof_$b.log" 2>&1 || echo "[$b exited $?]"
        grep -E '^BENCH|cuda prof' "$OUT/prof_$b.log" | sed -E 's/^.*cuda prof /prof /' | sort | uniq -c | sort -rn | head -24
    done
fi
if has hfnoise; then
    stamp "HF transformers in bf16 vs its own fp32 on the fixtures"
    PYTHONUNBUFFERED=1 timeout 120 python3 tools/hf_bf16_noise.py 2>&1 | grep -vE "Warning|warn|^\s*$" | tail -n 8
fi
stamp "done"
