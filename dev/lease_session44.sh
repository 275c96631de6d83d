#!/usr/bin/env bash
# Session 44's device calls, the most needed first (tests/GPU_RUNS.md's due list). The build travels for sm_90a alone
# (what an H100 or H200 runs of the fat build), made here: CUDA_ARCHS=90a BUILD_DIR=build-c bash dev/lease_build.sh
# -> .carry/build-c.tgz (main's library; commit.txt says which). diffusers 0.42.1 (+ importlib-metadata) as wheels
# in .whl/ (the image has torch, pytest and the rest).
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=570 PLAN=1 bash dev/lease_session44.sh
# Plan 1 (an H200: needs_h200, since diffusers' bf16 decode of 4K at T >= 2 needs more than 80 GB): issue 46's 4K
# sizes at T >= 2 timed beside diffusers' bf16, then the GPU suite, cuda_decode first (its shared setup, ccb70a0, not
# yet run on a GPU), Wan2.1's whole bench (rest, below). Plan 2 (any GPU): the rest alone; plan 3 (an
# H200): the 4K sizes alone.
# Every result is written as it comes (suite.txt one line a program, logs.tgz re-packed after each), so a call cut short
# still returns what ran.
set -u
O=${OUT:-/tmp/w22-lease}
L=/tmp/w22-lease-logs
mkdir -p "$O" "$L"
for t in .carry/*.tgz; do tar -xzf "$t"; done
end=$(($(date +%s) + ${LEASE_SECONDS:-540}))
S=$O/suite.txt
C=build-c
echo "$C: $(cat $C/commit.txt 2>/dev/null)  plan ${PLAN:-1}  $(date -u +%FT%TZ)" > "$S"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,memory.used,memory.total --format=csv,noheader >> "$S" 2>&1
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
export W22_LIB=$PWD/$C/libwan22vae.so
K4="135x240T2 135x256T2a 135x256T2b 135x240T5"
# the GPU suite on main's library (cuda_decode first: its shared setup, ccb70a0, has not run on a GPU); FROM=NAME
# starts it at that program (a later call goes on where an earlier one was cut), UNTIL=NAME stops it after that one
suite() {
    local on=0 n
    for n in c_decode c_decode_portable c_decode_wan21 c_ops c_seq34 c_seq34_wan21 c_seq12 c_budget c_large c_dit \
             c_interrupt c_test_gpu c_ops_portable c_seq34_portable c_seq12_portable c_large_portable; do
        [ "$n" = "${FROM:-c_decode}" ] && on=1
        [ $on = 1 ] || continue
        case $n in
        c_decode) run $n 60 $C/tests/cuda_decode ;;
        c_decode_portable) run $n 60 $P $C/tests/cuda_decode ;;
        c_decode_wan21) run $n 60 $C/tests/cuda_decode wan21 ;;
        c_ops) run $n 60 $C/tests/cuda_ops ;;
        c_seq34) run $n 90 $C/tests/cuda_sequence 24 48 34 ;;
        c_seq34_wan21) run $n 40 $C/tests/cuda_sequence 24 48 34 wan21 ;;
        c_seq12) run $n 40 $C/tests/cuda_sequence 30 64 12 ;;
        c_budget) run $n 50 $C/tests/cuda_budget ;;
        c_large) run $n 30 $C/tests/cuda_large ;;
        c_dit) run $n 20 $C/tests/cuda_dit ;;
        c_interrupt) run $n 20 $C/tests/cuda_interrupt ;;
        c_test_gpu) run $n 70 python3 -m pytest -q -x python/tests/test_gpu.py ;;
        c_ops_portable) run $n 40 $P $C/tests/cuda_ops ;;
        c_seq34_portable) run $n 90 $P $C/tests/cuda_sequence 24 48 34 ;;
        c_seq12_portable) run $n 40 $P $C/tests/cuda_sequence 30 64 12 ;;
        c_large_portable) run $n 30 $P $C/tests/cuda_large ;;
        esac
        [ "$n" = "${UNTIL:-}" ] && break
    done
}
# cuda_decode on both paths and both VAEs (its shared setup, ccb70a0, not yet run on a GPU; main's library is
# 4986cf0's, whose suite passed), then the rest of the suite, then Wan2.1's whole bench
rest() {
    UNTIL=c_decode_wan21 suite
    # (call 1 ran branch exp-b16's A/B here: not kept, docs/PERF.md "Measured and not kept")
    FROM=c_ops suite
    run w21 420 python3 bench/wan21.py --commit "$(cat $C/commit.txt)" --json "$O/w21.json"
    run w21_bands 150 python3 bench/wan21.py --workload w720 --bands 2 --commit "$(cat $C/commit.txt)" --json "$O/w21-bands.json"
}
case ${PLAN:-1} in
1|3)  # an H200: the 4K sizes (timed; the float32 check there takes a call of its own: session 28), then (plan 1)
      # the rest
    run sizes_4k 200 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/sizes.py --no-fp32 \
        --commit "$(cat $C/commit.txt)" --json "$O/sizes-4k.json" --cases $K4
    [ "${PLAN:-1}" = 1 ] && rest
    ;;
4)  # the suite from its Python tests on (call 1 on the H200 ran up to cuda_interrupt), 1280x704 T 31 timed (the one
    # case of bench/sizes.py not timed at this library), then Wan2.1's whole bench
    FROM=c_test_gpu suite
    run sizes_t31 90 python3 bench/sizes.py --no-fp32 --commit "$(cat $C/commit.txt)" --json "$O/sizes-t31.json" --cases 44x80T31
    run w21 420 python3 bench/wan21.py --commit "$(cat $C/commit.txt)" --json "$O/w21.json"
    ;;
2)  # any GPU: the rest
    rest
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
