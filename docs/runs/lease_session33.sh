#!/usr/bin/env bash
# Session 33's device call: after six refused starts, 674 s of device time were left for one call, so the GPU suite's
# programs (tests/gpu_suite.sh's, reordered) and issue 30's path bench (bench/path.py, f121 and f481) run in one
# command, the most needed first, each with a limit and the whole within LEASE_SECONDS; every result is written
# as it comes, so a call cut short still returns what ran. cuda_sequence's parts 3-4 (34: the checking mode on
# the sequence's first calls and issue 27's sequence, ~200 s) go last: they take the longest.
# Returns at most 5 files ($OUT: suite.txt, clock.txt, path.txt, path-f121.json, path-f481.json).
# Ran once (session 33, LEASE_SECONDS=170, 314 s of device time left, on an H100; docs/runs/2026-12-05-h100-session33.txt):
# the four correctness programs passed; path.py was cut after its first CLI run, parts 3-4 not reached.
# Ran whole in session 34 (LEASE_SECONDS=560, on an H100, 24ba698; docs/runs/2026-12-05-h100-session34.txt): every
# program passed and path.py wrote both JSONs, 507 s of the call's time with the machine's start excluded.
set -u
O=${OUT:-/tmp/w22-lease}
L=/tmp/w22-lease-logs
mkdir -p "$O" "$L"
end=$(($(date +%s) + ${LEASE_SECONDS:-520}))
S=$O/suite.txt
echo "build-run: $(cat build-run/commit.txt)" > "$S"
(nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader -lms 1000 > "$O/clock.txt" 2>&1 &)
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
    case $name in path_*) cat "$L/$name.log" >> "$O/path.txt" ;; *) tail -n 8 "$L/$name.log" | sed 's/^/    /' >> "$S" ;; esac
}
run cuda_ops 120 build-run/tests/cuda_ops
run cuda_large 40 build-run/tests/cuda_large
run cuda_sequence_12 150 build-run/tests/cuda_sequence 60 96 12
run test_gpu 120 python3 -m pytest -q python/tests/test_gpu.py
run path_f121 100 python3 bench/path.py --device cuda --T 31 --trials 2 --build build-run --json "$O/path-f121.json"
run path_f481 220 python3 bench/path.py --device cuda --T 121 --trials 2 --build build-run --json "$O/path-f481.json"
run cuda_sequence_34 260 build-run/tests/cuda_sequence 60 96 34
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
