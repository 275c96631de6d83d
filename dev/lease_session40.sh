#!/usr/bin/env bash
# Session 40's device calls: tests/GPU_RUNS.md's items 1-2, the most needed first. Plan 1: branch wino4 (build-w4/,
# bd8550a: Winograd F(4x4, 3x3) in fp16, spill96 merged in) against the CPU backend on both paths; if that passes, its
# f121 time alternating with its base build-spill/ (7c19233, branch spill96), its profile, the rest of the suite on it,
# the last stage's 256-channel convs as Winograd, the six-clip bench's f1 f5 f17 f121 (checked against diffusers'
# float32, f121 timed beside diffusers' bf16); if it fails, the whole suite on build-spill/ instead. Plan 2: the checking mode on both paths
# and both VAEs, test_gpu.py, spill96's bits against main's (build-run/: 7beca3d's library), Wan2.1 at 384. Plan 3:
# main after the merge (build-p/: the portable path's Winograd threshold 256) on the portable path, bits, its bench.
# Plans 4-7 (not run in session 40): f241 and f481 of the six-clip bench, the portable path's f481, ncu on the
# Winograd input transform.
# Every result is written as it comes (suite.txt one line a program, logs.tgz re-packed after each), so a call cut short still returns what ran.
# Three builds travel, each for sm_90a alone (what an H100 runs of the fat build), made here by dev/lease_build.sh
# (BUILD_DIR, CUDA_ARCHS=90a) in a worktree of each branch: .carry/build-w4.tgz, build-spill.tgz, and build-run.tgz
# (main's library and bench/bits alone). diffusers and pytest's deps as wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=560 PLAN=1 bash dev/lease_session40.sh
set -u
O=${OUT:-/tmp/w22-lease}
L=/tmp/w22-lease-logs
mkdir -p "$O" "$L"
for t in .carry/*.tgz; do tar -xzf "$t"; done
end=$(($(date +%s) + ${LEASE_SECONDS:-540}))
S=$O/suite.txt
echo "build-w4: $(cat build-w4/commit.txt 2>/dev/null)  build-spill: $(cat build-spill/commit.txt 2>/dev/null)  build-run: $(cat build-run/commit.txt 2>/dev/null)  plan ${PLAN:-1}  $(date -u +%FT%TZ)" > "$S"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,memory.used --format=csv,noheader >> "$S" 2>&1
(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader -lms 1000 > "$O/clock.txt" 2>&1 &)
if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$L/pip.log" 2>&1; then export PYTHONPATH=/tmp/site; else echo "wheels: FAILED $(tail -n 2 $L/pip.log)" >> "$S"; fi
export PYTHONUNBUFFERED=1
fail=0
run() { # NAME SECONDS COMMAND...
    local name=$1 limit=$2 start left rc
    shift 2
    left=$((end - $(date +%s)))
    if [ "$left" -lt 15 ]; then echo "$name: skipped (the budget is spent)" >> "$S"; fail=$((fail + 1)); return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    start=$(date +%s)
    timeout "$limit" "$@" > "$L/$name.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && fail=$((fail + 1))
    echo "$name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (rc $rc)"), $(($(date +%s) - start)) s: $(tail -n 1 "$L/$name.log")" >> "$S"
    tar -C "$L" -czf "$O/logs.tgz" . 2>/dev/null
}
P="env W22_KERNELS=portable"
W=build-w4 S0=build-spill M=build-run
X=${X:-$W}
export W22_LIB=$PWD/$X/libwan22vae.so
suite() { # the single-GPU suite but the checking mode and test_gpu.py (plan 2), on build $1 (prefix $2)
    local b=$1 n=$2
    run ${n}_decode_wan21 60 $b/tests/cuda_decode wan21
    run ${n}_dit 30 $b/tests/cuda_dit
    run ${n}_interrupt 60 $b/tests/cuda_interrupt
    run ${n}_large 60 $b/tests/cuda_large
    run ${n}_large_portable 60 $P $b/tests/cuda_large
    run ${n}_budget 90 $b/tests/cuda_budget
    run ${n}_seq12 60 $b/tests/cuda_sequence 30 64 12
    run ${n}_seq12_portable 60 $P $b/tests/cuda_sequence 30 64 12
}
case ${PLAN:-1} in
1)
    f0=$fail
    run w4_ops_wino 60 $W/tests/cuda_ops -o winograd
    run w4_ops_wino_portable 60 $P $W/tests/cuda_ops -o winograd
    run w4_ops_f16 40 $W/tests/cuda_ops -o f16
    run w4_ops_f16_portable 40 $P $W/tests/cuda_ops -o f16
    run w4_ops 60 $W/tests/cuda_ops
    run w4_ops_portable 60 $P $W/tests/cuda_ops
    run w4_decode 60 $W/tests/cuda_decode
    run w4_decode_portable 60 $P $W/tests/cuda_decode
    if [ "$fail" -eq "$f0" ]; then
        echo "wino4 passed against the CPU backend: its times, then the suite on it" >> "$S"
        for r in 1 2; do
            run spill_time_$r 30 $S0/tests/cuda_decode --time 31 2
            run w4_time_$r 30 $W/tests/cuda_decode --time 31 2
            run spill_time_portable_$r 30 $P $S0/tests/cuda_decode --time 31 2
            run w4_time_portable_$r 30 $P $W/tests/cuda_decode --time 31 2
        done
        run w4_prof 40 env W22_PROFILE=2 $W/tests/cuda_decode --time 31 1
        suite $W w4
        for r in 1 2; do
            run w4_256_time_$r 30 env W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
            run w4_256_time_portable_$r 30 $P W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
        done
        run w4_256_prof 40 env W22_PROFILE=2 W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 1
        run w4_256_decode 60 env W22_WINOGRAD=256 $W/tests/cuda_decode
        # the six-clip bench's first part (f1 f5 f17 checked, f121 checked and timed beside diffusers' bf16, audited):
        # the record's call 1 at bd8550a's library, which main's merge of wino4 keeps byte for byte
        run w4_six1 230 python3 bench/bench.py --workload f1 f5 f17 f121 --lib $PWD/$W/libwan22vae.so --commit "$(cat $W/commit.txt)" --json "$O/six1.json"
    else
        echo "wino4 FAILED against the CPU backend: the suite on build-spill (spill96) instead" >> "$S"
        run spill_ops 60 $S0/tests/cuda_ops
        run spill_ops_portable 60 $P $S0/tests/cuda_ops
        run spill_decode 60 $S0/tests/cuda_decode
        run spill_decode_portable 60 $P $S0/tests/cuda_decode
        suite $S0 spill
        mkdir -p "$O/ab"
        run spill_ab 50 bash bench/ab.sh $M $S0 1 "$O/ab"
        grep -h "bits:" "$L"/spill_ab*.log >> "$S"
    fi
    ;;
2)
    # X: the build the suite ran on in plan 1 (build-w4, or build-spill where wino4 failed)
    run seq34 130 $X/tests/cuda_sequence 24 48 34
    run seq34_portable 130 $P $X/tests/cuda_sequence 24 48 34
    run seq34_wan21 60 $X/tests/cuda_sequence 24 48 34 wan21
    run test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    mkdir -p "$O/ab"
    run spill_ab 50 bash bench/ab.sh $M $S0 1 "$O/ab"
    grep -h "bits:" "$L"/spill_ab*.log >> "$S"
    # Wan2.1's 384-channel convs as F(4x4) (its error x1.3 the direct conv's: a default of 384 would touch Wan2.1 alone)
    for r in 1 2; do
        run w4_wan21_$r 45 python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --json "$O/w4-wan21-$r.json"
        run w4_wan21_384_$r 45 env W22_WINOGRAD=384 python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --json "$O/w4-wan21-384-$r.json"
    done
    ;;
3)
    # main after the merge of wino4 (build-p/): the portable path's Winograd threshold 256 (the Hopper path's 512 as
    # before): the portable path's suite, then the same bits as build-w4 on the Hopper path (its default unchanged), the
    # portable f121 A/B against build-w4 (W22_KERNELS=portable: bits differ there, the time is the A/B), the bench's
    # portable pass checked against diffusers' float32 and timed beside the Hopper path and diffusers' bf16
    X=build-p
    run p_ops_portable 60 $P $X/tests/cuda_ops
    run p_decode_portable 60 $P $X/tests/cuda_decode
    run p_decode_wan21_portable 60 $P $X/tests/cuda_decode wan21
    run p_seq12_portable 60 $P $X/tests/cuda_sequence 30 64 12
    run p_large_portable 60 $P $X/tests/cuda_large
    mkdir -p "$O/ab" "$O/ab_portable"
    run p_ab 50 bash bench/ab.sh $W $X 1 "$O/ab"
    run p_ab_portable 80 $P bash bench/ab.sh $W $X 1 "$O/ab_portable"
    grep -h "bits:" "$L"/p_ab*.log >> "$S"
    run p_seq34_portable 130 $P $X/tests/cuda_sequence 24 48 34
    run p_test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    run p_bench_portable 200 python3 bench/bench.py --workload f121 --portable --lib $PWD/$X/libwan22vae.so --no-audit --commit "$(cat $X/commit.txt)" --json "$O/p-f121-portable.json"
    run p_ops 60 $X/tests/cuda_ops
    ;;
4)
    # the six-clip bench's f241 at X's library, merged into call 1's (MERGE: its six1.json, carried), then f481 (plan 5)
    run bench_six2 560 python3 bench/bench.py --workload f241 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --merge "${MERGE:-bench/results/2026-12-06-h100-s40-wino4-f121.json}" --json "$O/six2.json"
    ;;
5)
    run bench_six3 590 python3 bench/bench.py --workload f481 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --merge "${MERGE:?MERGE: the JSON plan 4 wrote, put in the tree}" --json "$O/six3.json"
    ;;
6)
    # issue 45's f481 on the portable path beside the Hopper path and diffusers (unchecked: f481's float32 reference
    # takes ~5 min; its arithmetic is f121's, checked in plan 3)
    run bench_portable_f481 590 python3 bench/bench.py --workload f481 --portable --no-check --lib $PWD/$X/libwan22vae.so --no-audit --commit "$(cat $X/commit.txt)" --json "$O/p-f481-portable.json"
    ;;
7)
    # why the Winograd input transform runs at 1.26-1.34 TB/s (PERF.md, session 40): ncu on three of its launches in an
    # f121 decode (stage 1's c512 and stage 0's c1024), the memory sections, beside the output transform for scale
    secs="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats --section WarpStateStats"
    run ncu_wino_in 200 ncu --clock-control none $secs -k regex:w22_wino_in_kernel --launch-skip 40 --launch-count 3 $X/tests/cuda_decode --time 31 1
    run ncu_wino_out 120 ncu --clock-control none $secs -k regex:w22_wino_out_kernel --launch-skip 40 --launch-count 1 $X/tests/cuda_decode --time 31 1
    cp "$L"/ncu_wino_*.log "$O/" 2>/dev/null
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
