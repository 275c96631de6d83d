#!/usr/bin/env bash
# Session 37's device call: the four branches merged on main (ditk, overlap, norm96, rows96: CPU-tested, never run on
# a GPU) proven and timed against the commit before them, then what session 36 left due (the checking mode, TI2V-5B on
# both paths after the mma.sync K cursor, test_gpu, test_gpu_dit), the most needed first. Every result is written as
# it comes (suite.txt one line a program, logs.tgz re-packed after each), so a call cut short still returns what ran.
# Two builds travel, both for sm_90a alone (what an H100 runs of the fat build; half the carry): build-run/ at this
# checkout (.carry/build-run.tgz) and build-base/ at the commit before the merges (.carry/build-base.tgz), each made
# here by dev/lease_build.sh (BUILD_DIR, CUDA_ARCHS=90a). diffusers and pytest's deps as wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=540 PLAN=1 bash dev/lease_session37.sh
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
A=build-base
C="$(cat $B/commit.txt 2>/dev/null)"
P="env W22_KERNELS=portable"
case ${PLAN:-1} in
1)
    # the merged branches' kernels against the CPU backend, then each one's A/B against the base build on this machine
    run cuda_ops 60 $B/tests/cuda_ops
    run cuda_ops_portable 60 $P $B/tests/cuda_ops
    run cuda_dit 30 $B/tests/cuda_dit
    run dit_perf_base 40 $A/tests/cuda_dit --perf
    run dit_perf 40 $B/tests/cuda_dit --perf
    run rms_perf_base 30 $A/tests/cuda_ops --perf -o rmsnorm
    run rms_perf 30 $B/tests/cuda_ops --perf -o rmsnorm
    run cuda_decode_wan21 60 $B/tests/cuda_decode wan21
    run bench_wan21 120 python3 bench/wan21.py --workload w720 --no-check --no-audit --commit "$C" --json "$O/wan21.json"
    run bench_wan21_base 60 env W22_LIB=$PWD/$A/libwan22vae.so python3 bench/wan21.py --workload w720 --no-check --no-diffusers --no-audit --commit "$(cat $A/commit.txt)" --json "$O/wan21-base.json"
    run cuda_budget 120 $B/tests/cuda_budget
    run bench_wan21_budget 90 python3 bench/wan21.py --workload w720 --memory-budget target --no-check --no-diffusers --no-audit --commit "$C" --json "$O/wan21-budget.json"
    run test_gpu_dit 90 python3 -m pytest -q -x python/tests/test_gpu_dit.py -m "not full_size"
    # session 36's due list: the checking mode (parts 3-4) on both paths and both models, TI2V-5B's call sequence on
    # both paths (the K cursor), the Python suite, the large sizes
    run cuda_seq34 120 $B/tests/cuda_sequence 24 48 34
    run cuda_seq34_portable 120 $P $B/tests/cuda_sequence 24 48 34
    run cuda_seq34_wan21 120 $B/tests/cuda_sequence 24 48 34 wan21
    run cuda_seq12 60 $B/tests/cuda_sequence 30 64 12
    run cuda_seq12_portable 60 $P $B/tests/cuda_sequence 30 64 12
    run cuda_decode 60 $B/tests/cuda_decode
    run cuda_decode_portable 60 $P $B/tests/cuda_decode
    run test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    run cuda_large 60 $B/tests/cuda_large
    run bench_f121 200 python3 bench/bench.py --workload f121 --portable --memory-budget 2.5G --no-audit --no-gemm --commit "$C" --json "$O/f121.json"
    run bench_dit_704 200 python3 bench/dit.py --sizes 704x1280x121 --iters 2 --commit "$C" --json "$O/dit-704.json"
    ;;
2)
    # the records: issue 44's checked and audited Wan2.1 bench (its three workloads, the 4 GiB budget beside the
    # default), the f121 bench on both paths and under 2.5 GiB (issues 45, 46), the budget's cost curve warmed
    run bench_wan21 300 python3 bench/wan21.py --memory-budget target --commit "$C" --json "$O/wan21-checked.json"
    run cuda_budget 90 $B/tests/cuda_budget
    run bench_f121 170 python3 bench/bench.py --workload f121 --portable --memory-budget 2.5G --no-check --no-audit --no-gemm --commit "$C" --json "$O/f121.json"
    run bench_portable_wino 150 python3 bench/bench.py --workload f121 --portable --portable-winograd 256 --no-diffusers --no-check --no-audit --no-gemm --commit "$C" --json "$O/f121-portable-wino.json"
    ;;
3)
    # issue 43's records: the DiT forward against eager and torch.compile at both sizes (ditk's kernels now), the
    # full-size denoising step, the errors against float32; then why the budget's copies did not hide (issue 46)
    run bench_dit 330 python3 bench/dit.py --iters 2 --commit "$C" --json "$O/dit.json"
    run test_gpu_dit_full 170 python3 -m pytest -q -s python/tests/test_gpu_dit.py -m full_size
    run pcie_probe 40 python3 dev/pcie_probe.py
    run prof_wan21_budget 60 env W22_PROFILE=1 python3 bench/wan21.py --workload w720 --memory-budget target --no-check --no-diffusers --no-audit --json "$O/wan21-budget-prof.json"
    run bench_dit_fp32 120 python3 bench/dit.py --sizes 704x1280x121 --no-compile --no-profile --iters 1 --check-fp32 --commit "$C" --json "$O/dit-fp32.json"
    ;;
4)
    # issue 46's "no slow shape": the odd x odd latents checked against float32 and timed, then every size of the set
    # below 4K timed against diffusers' bf16 (the 2.3x target)
    run sizes_odd 150 python3 bench/sizes.py --commit "$C" --json "$O/sizes-odd.json" --cases 45x45T1 45x81T1 33x57T1 45x45T2 45x81T2 33x57T2 45x45T5 45x81T5 33x57T5
    run sizes_all 280 python3 bench/sizes.py --no-fp32 --commit "$C" --json "$O/sizes-timed.json" --cases $(python3 -c "import sys; sys.path.insert(0, 'bench'); import sizes; print(' '.join(c[0] for c in sizes.CASES if c[3] < 100 and c[2] in (1, 5) and c[3] % 2 + c[4] % 2 < 2))")
    ;;
5)
    # where the time goes next: a one-frame decode (T = 1: 2.0-2.37x where T = 5 is 2.35-2.49x) and the portable
    # path's f121 (1.22x; issue 45), op by op
    run prof_t1 40 env W22_PROFILE=1 $B/tests/cuda_decode --time 1 1
    run prof_portable 90 env W22_PROFILE=1 W22_KERNELS=portable $B/tests/cuda_decode --time 31 2
    ;;
6)
    # the portable path's Winograd at 256 channels, op by op (bench.py's W22_WINOGRAD=256 pass came out 5049 ms
    # against 5050: was it applied?)
    run prof_portable_w256 90 env W22_PROFILE=1 W22_KERNELS=portable W22_WINOGRAD=256 $B/tests/cuda_decode --time 31 2
    ;;
7)
    # branch wino256 (build-wino/: the plan keeps each stage's Winograd band free, backend.h's conv_work), beside
    # build-run/ (main) on the same machine: W22_WINOGRAD=256 on both paths, f121's ops and time; its correctness on
    # the portable path; then main's Wan2.1 with W22_WINOGRAD=384 (its 384-channel convs, stages 0-1, direct today)
    W=build-wino
    run wino_prof_portable 40 env W22_PROFILE=1 W22_KERNELS=portable W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run base_time_portable 30 env W22_KERNELS=portable $B/tests/cuda_decode --time 31 2
    run wino_time_portable 30 env W22_KERNELS=portable W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run wino_prof_hopper 30 env W22_PROFILE=1 W22_WINOGRAD=256 $W/tests/cuda_decode --time 31 2
    run wino_decode_portable 40 env W22_KERNELS=portable W22_WINOGRAD=256 $W/tests/cuda_decode
    run wan21_w384 90 env W22_WINOGRAD=384 python3 bench/wan21.py --workload w720 --no-diffusers --no-audit --json "$O/wan21-w384.json"
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
