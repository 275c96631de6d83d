#!/usr/bin/env bash
# Session 39's device calls: what tests/GPU_RUNS.md holds due, the most needed first. Plan 1 is the whole GPU suite at
# the final commit of issue 47 (both kernel paths, both VAEs, the checking mode on each, the DiT, the budget and the
# large sizes) and the same bits as the base build on both paths; plan 2 branch spill96; plans 3 and 7 branch wino4
# (Winograd F(4x4, 3x3) in fp16: build-w4/, against build-spill/, its base); plans 4-6 the six-clip checked bench.
# Every result is written as it comes (suite.txt one line a program, logs.tgz re-packed after each), so a call cut short still returns what ran.
# Two builds travel, both for sm_90a alone (what an H100 runs of the fat build; half the carry): build-run/ at this
# checkout (.carry/build-run.tgz) and build-base/ at the baseline commit (.carry/build-base.tgz), each made
# here by dev/lease_build.sh (BUILD_DIR, CUDA_ARCHS=90a). diffusers and pytest's deps as wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=540 PLAN=1 bash dev/lease_session39.sh
set -u
O=${OUT:-/tmp/w22-lease}
L=/tmp/w22-lease-logs
mkdir -p "$O" "$L"
for t in .carry/*.tgz; do tar -xzf "$t"; done
end=$(($(date +%s) + ${LEASE_SECONDS:-540}))
S=$O/suite.txt
echo "build-run: $(cat build-run/commit.txt 2>/dev/null)  build-base: $(cat build-base/commit.txt 2>/dev/null)  plan ${PLAN:-1}  $(date -u +%FT%TZ)" > "$S"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,memory.used --format=csv,noheader >> "$S" 2>&1
(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader -lms 1000 > "$O/clock.txt" 2>&1 &)
if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$L/pip.log" 2>&1; then export PYTHONPATH=/tmp/site; else echo "wheels: FAILED $(tail -n 2 $L/pip.log)" >> "$S"; fi
export PYTHONUNBUFFERED=1 W22_LIB=$PWD/build-run/libwan22vae.so
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
B=build-run
MERGE=${MERGE:-bench/results/six.json}
A=build-base
C="$(cat $B/commit.txt 2>/dev/null)"
P="env W22_KERNELS=portable"
case ${PLAN:-1} in
1)
    # GPU_RUNS item 1: the suite at the final commit, the quick programs first, the checking mode last
    run cuda_ops 60 $B/tests/cuda_ops
    run cuda_ops_portable 60 $P $B/tests/cuda_ops
    run cuda_decode 60 $B/tests/cuda_decode
    run cuda_decode_portable 60 $P $B/tests/cuda_decode
    run cuda_decode_wan21 60 $B/tests/cuda_decode wan21
    run cuda_dit 30 $B/tests/cuda_dit
    run cuda_interrupt 60 $B/tests/cuda_interrupt
    run cuda_large 60 $B/tests/cuda_large
    run cuda_large_portable 60 $P $B/tests/cuda_large
    run cuda_budget 90 $B/tests/cuda_budget
    run cuda_seq12 60 $B/tests/cuda_sequence 30 64 12
    run cuda_seq12_portable 60 $P $B/tests/cuda_sequence 30 64 12
    mkdir -p "$O/ab" "$O/ab_portable"
    run bits_ab 80 bash bench/ab.sh $A $B 1 "$O/ab"
    run bits_ab_portable 80 $P bash bench/ab.sh $A $B 1 "$O/ab_portable"
    run cuda_seq34_wan21 60 $B/tests/cuda_sequence 24 48 34 wan21
    run cuda_seq34 130 $B/tests/cuda_sequence 24 48 34
    run cuda_seq34_portable 130 $P $B/tests/cuda_sequence 24 48 34
    run test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    ;;
2)
    # branch spill96 (build-spill/: the mma.sync conv's B fragments loaded per 16 columns, ldmatrix offsets by XOR, the
    # loader's step from its caller: no spills in the 128 x 96 tile on any arch; the same bits by construction)
    # against the CPU backend on both paths, bit for bit against build-run (main) on both, the portable checking mode
    X=build-spill
    run spill_ops 60 $X/tests/cuda_ops
    run spill_ops_portable 60 $P $X/tests/cuda_ops
    run spill_decode 60 $X/tests/cuda_decode
    run spill_decode_portable 60 $P $X/tests/cuda_decode
    mkdir -p "$O/ab" "$O/ab_portable"
    run spill_ab_portable 80 $P bash bench/ab.sh $B $X 1 "$O/ab_portable"
    run spill_ab 50 bash bench/ab.sh $B $X 1 "$O/ab"
    grep -h "bits:" "$L"/spill_ab*.log >> "$S"
    run spill_seq12_portable 60 $P $X/tests/cuda_sequence 30 64 12
    run spill_seq34_portable 130 $P $X/tests/cuda_sequence 24 48 34
    ;;
3)
    # branch wino4 (build-w4/: Winograd F(4x4, 3x3) in fp16 in place of F(2x2) in bf16, its components made at each
    # conv from the direct weights; the fp16 batch GEMMs on both paths) beside build-run (main): its Winograd cases
    # and the whole op suite on both paths, the decode against the CPU, f121's time alternating with main's on both
    # paths, its profile, then its error in the bench's check (f17, f121) against diffusers' float32. The time base is
    # build-spill (branch spill96, 7c19233: wino4's own base, merged into it, so the A/B is the Winograd change alone)
    X=build-w4 B=build-spill
    run w4_ops_wino 60 $X/tests/cuda_ops -o winograd
    run w4_ops_wino_portable 60 $P $X/tests/cuda_ops -o winograd
    run w4_ops_f16 40 $X/tests/cuda_ops -o f16
    run w4_ops_f16_portable 40 $P $X/tests/cuda_ops -o f16
    run w4_ops 60 $X/tests/cuda_ops
    run w4_ops_portable 60 $P $X/tests/cuda_ops
    run w4_decode 60 $X/tests/cuda_decode
    run w4_decode_portable 60 $P $X/tests/cuda_decode
    for r in 1 2; do
        run main_time_$r 30 $B/tests/cuda_decode --time 31 2
        run w4_time_$r 30 $X/tests/cuda_decode --time 31 2
        run main_time_portable_$r 30 $P $B/tests/cuda_decode --time 31 2
        run w4_time_portable_$r 30 $P $X/tests/cuda_decode --time 31 2
    done
    run w4_prof 40 env W22_PROFILE=2 $X/tests/cuda_decode --time 31 1
    # the 256-channel convs at the last stage too (the plan keeps their band free: +150 MiB at 1280x704)
    for r in 1 2; do
        run w4_256_time_$r 30 env W22_WINOGRAD=256 $X/tests/cuda_decode --time 31 2
        run w4_256_time_portable_$r 30 $P W22_WINOGRAD=256 $X/tests/cuda_decode --time 31 2
    done
    run w4_256_prof 40 env W22_PROFILE=2 W22_WINOGRAD=256 $X/tests/cuda_decode --time 31 1
    run w4_256_decode 60 env W22_WINOGRAD=256 $X/tests/cuda_decode
    ;;
4)
    # the six-clip checked bench (issue 46), call 1 of 3: f1 f5 f17 f121
    run bench_six1 560 python3 bench/bench.py --workload f1 f5 f17 f121 --commit "$C" --json "$O/six1.json"
    ;;
5)
    run bench_six2 560 python3 bench/bench.py --workload f241 --commit "$C" --merge "$MERGE" --json "$O/six2.json"
    ;;
6)
    run bench_six3 590 python3 bench/bench.py --workload f481 --commit "$C" --merge "$MERGE" --json "$O/six3.json"
    ;;
7)
    # branch wino4, call 2 of 2: its error in the bench's check against diffusers' float32 (f17 and f121, at the
    # default threshold and at 256), the Wan2.1 VAE at 384, the call sequence and the checking mode
    X=build-w4
    run w4_bench 200 python3 bench/bench.py --workload f17 f121 --lib $PWD/$X/libwan22vae.so --no-audit --commit "$(cat $X/commit.txt)" --json "$O/w4-f121.json"
    run w4_256_bench 150 env W22_WINOGRAD=256 python3 bench/bench.py --workload f17 f121 --no-diffusers --lib $PWD/$X/libwan22vae.so --no-audit --commit "$(cat $X/commit.txt)" --json "$O/w4-256-f121.json"
    # Wan2.1's 384-channel convs as F(4x4) (its error x1.3 the direct conv's: a default of 384 would touch Wan2.1 alone)
    for r in 1 2; do
        run w4_wan21_$r 45 env W22_LIB=$PWD/$X/libwan22vae.so python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --json "$O/w4-wan21-$r.json"
        run w4_wan21_384_$r 45 env W22_LIB=$PWD/$X/libwan22vae.so W22_WINOGRAD=384 python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --json "$O/w4-wan21-384-$r.json"
    done
    run w4_seq12 60 $X/tests/cuda_sequence 30 64 12
    run w4_seq34 130 $X/tests/cuda_sequence 24 48 34
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
