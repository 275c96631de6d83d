#!/usr/bin/env bash
# Session 36's device calls: what this session's kernels need measured, then the GPU suite in one command, the most needed first, each program
# with a limit and the whole within LEASE_SECONDS; every result is written as it comes (suite.txt one line a program,
# logs.tgz re-packed after each), so a call cut short still returns what ran. The build travels in build-run/
# (made here by dev/lease_build.sh, packed in .carry/), diffusers and pytest as wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=540 PLAN=1 bash dev/lease_session36.sh
# PLAN picks the list: 1 where the Wan2.1 and portable decodes spend their time (per-shape conv rates on both paths,
# W22_PROFILE tables, the portable path's Winograd threshold), 2 the GPU suite and the benches at the final commit.
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
    # the new tiles' conformance, the Wan2.1 decode whole and timed, the tiles' rates on both paths, the DiT's new
    # FFN epilogue, the call sequences on the new routes; then the portable path's Winograd threshold and profiles
    run cuda_ops 90 $B/tests/cuda_ops
    run cuda_decode_wan21 60 $B/tests/cuda_decode wan21
    run bench_wan21 120 python3 bench/wan21.py --workload w720 --no-check --no-audit --commit "$(cat $B/commit.txt)" --json "$O/wan21.json"
    run perf_wan21 60 $B/tests/cuda_ops --perf -o wan21
    run cuda_ops_portable 90 env W22_KERNELS=portable $B/tests/cuda_ops
    run perf_wan21_portable 60 env W22_KERNELS=portable $B/tests/cuda_ops --perf -o wan21
    run cuda_dit 30 $B/tests/cuda_dit
    run test_gpu_dit 120 python3 -m pytest -q -x python/tests/test_gpu_dit.py -m "not full_size"
    run cuda_seq12_wan21 90 $B/tests/cuda_sequence 30 64 12 wan21
    run cuda_budget 150 $B/tests/cuda_budget
    run prof_wan21 90 env W22_PROFILE=1 python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --json "$O/wan21-prof.json"
    run bench_portable_wino 200 python3 bench/bench.py --workload f121 --portable --portable-winograd 256 --no-check --no-audit --no-gemm --commit "$(cat $B/commit.txt)" --json "$O/f121-portable-wino.json"
    run perf_portable 60 env W22_KERNELS=portable $B/tests/cuda_ops --perf -o up_blocks
    run bench_dit_704 200 python3 bench/dit.py --sizes 704x1280x121 --iters 2 --commit "$(cat $B/commit.txt)" --json "$O/dit-704.json"
    run test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    run bench_dit_480 150 python3 bench/dit.py --sizes 480x832x81 --iters 2 --commit "$(cat $B/commit.txt)" --json "$O/dit-480.json"
    ;;
2)
    run cuda_ops 90 $B/tests/cuda_ops
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
