#!/usr/bin/env bash
# Session 38's device calls: what tests/GPU_RUNS.md holds due, the most needed first. Plan 1 proves main after 0db9212
# (lower.h, route.h's phase and batch answers, the row kernel deleted: never run on a GPU) against the CPU backend and
# bit for bit against 0db9212 on both paths; plan 2 was branch wino256's experiment (lost, deleted; its build no longer
# carried); plan 3 the scripts and 4K sizes;
# plans 4-6 the six-clip checked bench. Every result is written as
# it comes (suite.txt one line a program, logs.tgz re-packed after each), so a call cut short still returns what ran.
# Two builds travel, both for sm_90a alone (what an H100 runs of the fat build; half the carry): build-run/ at this
# checkout (.carry/build-run.tgz) and build-base/ at the baseline commit (.carry/build-base.tgz), each made
# here by dev/lease_build.sh (BUILD_DIR, CUDA_ARCHS=90a). diffusers and pytest's deps as wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=540 PLAN=1 bash dev/lease_session38.sh
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
    # GPU_RUNS item 0: main's kernels against the CPU backend on both paths and both VAEs, the call sequence, then
    # the same bits as 0db9212 (build-base) on both paths with f121's time beside it, then portable cuda_large whole
    run cuda_ops 60 $B/tests/cuda_ops
    run cuda_ops_portable 60 $P $B/tests/cuda_ops
    run cuda_decode 60 $B/tests/cuda_decode
    run cuda_decode_portable 60 $P $B/tests/cuda_decode
    run cuda_decode_wan21 60 $B/tests/cuda_decode wan21
    run cuda_seq12 60 $B/tests/cuda_sequence 30 64 12
    run cuda_seq12_portable 60 $P $B/tests/cuda_sequence 30 64 12
    mkdir -p "$O/ab" "$O/ab_portable"
    run bits_ab 150 bash bench/ab.sh $A $B 2 "$O/ab"
    run bits_ab_portable 120 $P bash bench/ab.sh $A $B 1 "$O/ab_portable"
    run cuda_large_portable 150 $P $B/tests/cuda_large
    ;;
2)
    # GPU_RUNS item 1: branch wino256 (build-wino/: the plan keeps each stage's Winograd band free, backend.h's
    # conv_work) beside build-run/ (main) on the same machine: W22_WINOGRAD=256 on both paths, f121's ops and time;
    # its correctness on the portable path; main's Wan2.1 with W22_WINOGRAD=384; then the checking mode
    W=build-wino
    run base_time_portable 30 $P $B/tests/cuda_decode --time 31 2
    run wino_time_portable 30 $P W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run base_time_portable2 30 $P $B/tests/cuda_decode --time 31 2
    run wino_time_portable2 30 $P W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run base_time_hopper 30 $B/tests/cuda_decode --time 31 2
    run wino_time_hopper 30 env W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run wino_prof_portable 40 $P W22_PROFILE=1 W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run wino_decode_portable 40 $P W22_WINOGRAD=256 $W/tests/cuda_decode
    run wan21_w384 90 env W22_WINOGRAD=384 python3 bench/wan21.py --workload w720 --no-diffusers --no-audit --json "$O/wan21-w384.json"
    run cuda_seq34 120 $B/tests/cuda_sequence 24 48 34
    run cuda_seq34_portable 120 $P $B/tests/cuda_sequence 24 48 34
    ;;
3)
    # GPU_RUNS items 3-4: the scripts not run since session 29, then the 4K cases of bench/sizes.py
    run cuda_epi_tma 120 env BUILD=$B bash tests/cuda_epi_tma.sh
    run cuda_profile 90 env BUILD=$B bash tests/cuda_profile.sh
    run cuda_sanitize 200 env BUILD=$B bash tests/cuda_sanitize.sh
    run sizes_4k 200 python3 bench/sizes.py --commit "$C" --json "$O/sizes-4k.json" --cases $(python3 -c "import sys; sys.path.insert(0, 'bench'); import sizes; print(' '.join(c[0] for c in sizes.CASES if c[3] >= 100))")
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
    # branch pbig (build-pbig/: W22_EXP_PTILE=big|big3 puts the portable path's N >= 256 GEMMs on the 128 x 256 mma.sync
    # tile, 4 or 3 stages, with the Hopper's shared memory) beside main's portable path, alternating; its correctness
    # against the CPU backend; then Wan2.1 1280x720x81 with W22_WINOGRAD=384 beside the default (GPU_RUNS item 5)
    X=build-pbig
    for r in 1 2; do
        run base_portable_$r 30 $P $B/tests/cuda_decode --time 31 2
        run pbig_big_$r 30 $P W22_EXP_PTILE=big $X/tests/cuda_decode --time 31 2
        run pbig_big3_$r 30 $P W22_EXP_PTILE=big3 $X/tests/cuda_decode --time 31 2
    done
    run pbig_prof 30 $P W22_EXP_PTILE=big W22_PROFILE=1 $X/tests/cuda_decode --time 31 1
    run pbig_decode_big 40 $P W22_EXP_PTILE=big $X/tests/cuda_decode
    run pbig_decode_big3 40 $P W22_EXP_PTILE=big3 $X/tests/cuda_decode
    for r in 1 2; do
        run wan21_default_$r 45 python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --commit "$C" --json "$O/wan21-default-$r.json"
        run wan21_w384_$r 45 env W22_WINOGRAD=384 python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --commit "$C" --json "$O/wan21-w384-$r.json"
    done
    ;;
8)
    # issue 47.10-11's plain ops (route.h's section 4; the norm's one-channel form and group<8> deleted, the separate
    # DupUp kernel deleted, the open's refusal of what the kernels do not take: w22_backend_cuda_model_ok) and the
    # mma.sync 128 x 256 tile deleted (the Hopper path's conv_in and P V on 128 x 128): against the CPU backend on
    # both paths, the same bits as build-base (5eb0787) on both, then GPU_RUNS items 3-4
    run cuda_ops 60 $B/tests/cuda_ops
    run cuda_ops_portable 60 $P $B/tests/cuda_ops
    run cuda_decode 60 $B/tests/cuda_decode
    run cuda_decode_portable 60 $P $B/tests/cuda_decode
    run cuda_decode_wan21 60 $B/tests/cuda_decode wan21
    mkdir -p "$O/ab" "$O/ab_portable"
    run bits_ab 150 bash bench/ab.sh $A $B 2 "$O/ab"
    run bits_ab_portable 120 $P bash bench/ab.sh $A $B 1 "$O/ab_portable"
    run cuda_seq12 60 $B/tests/cuda_sequence 30 64 12
    run test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    run cuda_profile 60 env BUILD=$B bash tests/cuda_profile.sh
    run cuda_epi_tma 90 env BUILD=$B bash tests/cuda_epi_tma.sh
    run cuda_sanitize 200 env BUILD=$B bash tests/cuda_sanitize.sh
    run sizes_4k 200 python3 bench/sizes.py --no-fp32 --commit "$C" --json "$O/sizes-4k.json" --cases $(python3 -c "import sys; sys.path.insert(0, 'bench'); import sizes; print(' '.join(c[0] for c in sizes.CASES if c[3] >= 100))")
    ;;
9)
    # the 4K cases timed again: plan 8's ran both decoders' 40 GiB workspaces beside diffusers on an 80 GB H100 (the
    # enable() decoder fell back, diffusers' bf16 ran out of memory); bench/sizes.py now releases ours first
    run sizes_4k 280 python3 bench/sizes.py --no-fp32 --commit "$C" --json "$O/sizes-4k.json" --cases 135x240T1 135x240T2 135x256T2a 135x240T5
    ;;
10)
    # branch overlap1 (the TMA conv's overlapped epilogue as one mode bit, its never-run half-0-in-the-tail branch
    # gone): the Hopper path against the CPU backend, then the same bits as build-base (f7d4d10) and f121's time
    run cuda_ops 40 $B/tests/cuda_ops
    run cuda_decode 40 $B/tests/cuda_decode ti2v
    mkdir -p "$O/ab"
    run bits_ab 80 bash bench/ab.sh $A $B 1 "$O/ab"
    run cuda_epi_tma 40 env BUILD=$B bash tests/cuda_epi_tma.sh
    run cuda_seq12 40 $B/tests/cuda_sequence 30 64 12
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
