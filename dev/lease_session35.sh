#!/usr/bin/env bash
# Session 35's device calls: the GPU suite of this round's work in one command, the most needed first, each program
# with a limit and the whole within LEASE_SECONDS; every result is written as it comes (suite.txt one line a program,
# logs.tgz re-packed after each), so a call cut short still returns what ran. The build travels in build-run/
# (made here by dev/lease_build.sh, packed in .carry/), diffusers and pytest as wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=540 PLAN=1 bash dev/lease_session35.sh
# PLAN picks the list: 1 the new kernels' correctness (DiT, Wan2.1, the portable path forced on Hopper, the Hopper
# suite), 2 the benches.
set -u
O=${OUT:-/tmp/w22-lease}
L=/tmp/w22-lease-logs
mkdir -p "$O" "$L"
[ -f .carry/build-run.tgz ] && tar -xzf .carry/build-run.tgz
end=$(($(date +%s) + ${LEASE_SECONDS:-540}))
S=$O/suite.txt
echo "build-run: $(cat build-run/commit.txt 2>/dev/null)  plan ${PLAN:-1}  $(date -u +%FT%TZ)" > "$S"
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
case ${PLAN:-1} in
1)
    # correctness of the three new parts first, then one timed run of each bench, then the longer sequences
    run cuda_dit 45 $B/tests/cuda_dit
    run cuda_ops 90 $B/tests/cuda_ops
    run cuda_ops_portable 120 env W22_KERNELS=portable $B/tests/cuda_ops
    run cuda_decode_wan21 90 $B/tests/cuda_decode wan21
    run test_gpu_dit 100 python3 -m pytest -q -x python/tests/test_gpu_dit.py
    run cuda_interrupt 30 $B/tests/cuda_interrupt
    run bench_f121 150 python3 bench/bench.py --workload f121 --portable --no-check --no-audit --commit "$(cat $B/commit.txt)" --json "$O/bench-f121.json"
    run bench_dit 150 python3 bench/dit.py --sizes 704x1280x121 --no-compile --iters 2 --commit "$(cat $B/commit.txt)" --json "$O/dit.json"
    run bench_wan21 150 python3 bench/wan21.py --workload w720 --no-check --no-audit --commit "$(cat $B/commit.txt)" --json "$O/wan21.json"
    run attention_perf 30 $B/tests/cuda_ops --perf -o attention
    run cuda_seq12_portable 100 env W22_KERNELS=portable $B/tests/cuda_sequence 30 64 12
    run cuda_seq12_wan21 100 $B/tests/cuda_sequence 30 64 12 wan21
    run test_gpu 150 python3 -m pytest -q -x python/tests/test_gpu.py
    ;;
2)
    run bench_dit 300 python3 bench/dit.py --json "$O/dit.json"
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
