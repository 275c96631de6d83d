#!/usr/bin/env bash
# The GPU suite in one device command, within a time budget (default 540 s: the device tool's commands may run 600 s,
# its session's GPU time is 30 minutes): every call right whatever came before it (cuda_sequence, in two runs with
# limits of their own: parts 3-4, the checking mode and issue 27's sequence, then parts 1-2, one decoder,
# interleaved decoders and two streams), the conformance of every op against the CPU backend (cuda_ops), the 4K
# decodes (cuda_large), the DiT passes against their CPU versions (cuda_dit), and the Python package on the GPU with
# diffusers (test_gpu.py; test_gpu_dit.py less its full-size step, which runs alone: -m full_size; where diffusers
# imports).
# Each program's output goes to $OUT/NAME.log (the device tool returns at most 8 files), one line per program to
# stdout: its status, seconds and closing line. A program the budget cannot fit is skipped and says so. `make test`
# on a GPU machine runs every cuda_* program and script instead, without a budget.
#
# GPU_SUITE_SECONDS sets the budget (not W22_: the library warns of W22_ variables it does not know).
# W22_KERNELS=portable in the environment runs every program on the portable kernels (issue 45: each backend the
# programs open reads it at create; cuda_ops then expects the portable path's routes, route.h's answers).
#   BUILD=build-run OUT=$OUT tests/gpu_suite.sh [N MAXS]     (cuda_sequence's calls and largest latent side: 60 96)
set -u
B=${BUILD:-build}
O=${OUT:-/tmp/w22-gpu-suite}
mkdir -p "$O"
deadline=$(($(date +%s) + ${GPU_SUITE_SECONDS:-540}))
seq_args=("$@")
[ ${#seq_args[@]} -eq 0 ] && seq_args=(60 96)
fail=0
run() { # NAME SECONDS COMMAND...
    local name=$1 limit=$2 start left rc
    shift 2
    left=$((deadline - $(date +%s)))
    if [ "$left" -lt 15 ]; then
        echo "$name: skipped (the budget is spent)"; fail=$((fail + 1)); return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    start=$(date +%s)
    timeout "$limit" "$@" > "$O/$name.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && fail=$((fail + 1))
    echo "$name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (rc $rc$([ $rc -eq 124 ] && echo ', its time limit'))"), $(($(date +%s) - start)) s: $(tail -n 1 "$O/$name.log")"
}
run cuda_sequence_34 260 "$B/tests/cuda_sequence" "${seq_args[@]:0:2}" 34
run cuda_ops 120 "$B/tests/cuda_ops"
run cuda_dit 30 "$B/tests/cuda_dit"
run cuda_large 40 "$B/tests/cuda_large"
run cuda_sequence_12 240 "$B/tests/cuda_sequence" "${seq_args[@]:0:2}" 12
if python3 -c "import diffusers, torch" > /dev/null 2>&1; then
    run test_gpu 120 python3 -m pytest -q python/tests/test_gpu.py
    run test_gpu_dit 150 python3 -m pytest -q python/tests/test_gpu_dit.py -m "not full_size"
else
    echo "test_gpu: skipped (no torch or diffusers: pip install --target the wheels of .whl/, PYTHONPATH)"
fi
echo "gpu_suite: $fail of the programs failed or were skipped"
[ "$fail" -eq 0 ]
