#!/usr/bin/env bash
# Session 41's device calls, the most needed first. Plan 1: branch xform (build-t/: the Winograd transforms' loads all
# in flight before their sums) against the CPU backend on both paths and both VAEs; if that passes, bench/ab.sh against
# main (build-p/: 39454cb's library) on both paths (the same bits expected: the arithmetic is unchanged; the time is the
# A/B), the profile on both paths, the six-clip bench's f1 f5 f17 f121 checked and audited with the portable pass beside
# the Hopper path and diffusers' bf16, then the rest of the suite. Plans 4-6: f241 and f481 of the six-clip bench, the
# portable path's f481 (X: the build; MERGE: the JSON of the call before, put in the tree).
# Every result is written as it comes (suite.txt one line a program, logs.tgz re-packed after each), so a call cut short
# still returns what ran. The builds travel for sm_90a alone (what an H100 runs of the fat build), made here by
# dev/lease_build.sh (BUILD_DIR, CUDA_ARCHS=90a): .carry/build-t.tgz, build-p.tgz. diffusers and pytest's deps as
# wheels in .whl/.
#   carry: [".whl", ".carry"]; command: LEASE_SECONDS=560 PLAN=1 bash dev/lease_session41.sh
set -u
O=${OUT:-/tmp/w22-lease}
L=/tmp/w22-lease-logs
mkdir -p "$O" "$L"
for t in .carry/*.tgz; do tar -xzf "$t"; done
end=$(($(date +%s) + ${LEASE_SECONDS:-540}))
S=$O/suite.txt
echo "build-t: $(cat build-t/commit.txt 2>/dev/null)  build-p: $(cat build-p/commit.txt 2>/dev/null)  build-n: $(cat build-n/commit.txt 2>/dev/null)  plan ${PLAN:-1}  $(date -u +%FT%TZ)" > "$S"
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
T=build-t B=build-p N=build-n MB=build-m C2=build-c2 B16=build-b16 Z=build-z
X=${X:-$T}
export W22_LIB=$PWD/$X/libwan22vae.so
case ${PLAN:-1} in
1)
    f0=$fail
    run t_ops 60 $T/tests/cuda_ops
    run t_ops_portable 60 $P $T/tests/cuda_ops
    run t_decode 60 $T/tests/cuda_decode
    run t_decode_portable 60 $P $T/tests/cuda_decode
    run t_decode_wan21 60 $T/tests/cuda_decode wan21
    if [ "$fail" -eq "$f0" ]; then
        echo "xform passed against the CPU backend: its A/B, profile, bench, then the suite on it" >> "$S"
        mkdir -p "$O/ab" "$O/ab_portable"
        run t_ab 50 bash bench/ab.sh $B $T 1 "$O/ab"
        run t_ab_portable 80 $P bash bench/ab.sh $B $T 1 "$O/ab_portable"
        grep -h "bits:" "$L"/t_ab*.log >> "$S"
        run t_prof 40 env W22_PROFILE=2 $T/tests/cuda_decode --time 31 1
        run t_prof_portable 40 $P W22_PROFILE=2 $T/tests/cuda_decode --time 31 1
        # the Hopper path's threshold again (256 lost by +14% in session 40, when the transforms were half their rate)
        for r in 1 2; do
            run t_time_$r 30 $T/tests/cuda_decode --time 31 2
            run t_256_time_$r 30 env W22_WINOGRAD=256 $T/tests/cuda_decode --time 31 2
        done
        # the six-clip bench's first part (f1 f5 f17 checked, f121 checked and timed beside diffusers' bf16, audited)
        # with the portable pass beside it (issue 45's f121)
        run t_six1 300 python3 bench/bench.py --workload f1 f5 f17 f121 --portable --lib $PWD/$T/libwan22vae.so --commit "$(cat $T/commit.txt)" --json "$O/t-six1.json"
        run t_dit 30 $T/tests/cuda_dit
        run t_interrupt 60 $T/tests/cuda_interrupt
        run t_large 60 $T/tests/cuda_large
        run t_large_portable 60 $P $T/tests/cuda_large
        run t_budget 90 $T/tests/cuda_budget
        run t_seq12 60 $T/tests/cuda_sequence 30 64 12
        run t_seq12_portable 60 $P $T/tests/cuda_sequence 30 64 12
        run t_seq34 130 $T/tests/cuda_sequence 24 48 34
        run t_seq34_portable 130 $P $T/tests/cuda_sequence 24 48 34
        run t_seq34_wan21 60 $T/tests/cuda_sequence 24 48 34 wan21
        run t_test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    else
        echo "xform FAILED against the CPU backend" >> "$S"
    fi
    ;;
2)
    # branch wino256h (build-n/): the Winograd threshold 256 on the Hopper path too (plan 1: 2197 -> 2157 ms), its
    # Hopper bits new (the portable path's unchanged): the Hopper path against the CPU backend, its A/B against build-t,
    # Wan2.1's time (its 384-channel convs now Winograd on the mma.sync batch), the six-clip bench's first call, the
    # portable path's f481 beside the Hopper path and diffusers (issue 45), the checking mode and the sequence
    run n_ops 60 $N/tests/cuda_ops
    run n_decode 60 $N/tests/cuda_decode
    run n_decode_wan21 60 $N/tests/cuda_decode wan21
    mkdir -p "$O/ab_n"
    run n_ab 50 bash bench/ab.sh $T $N 1 "$O/ab_n"
    grep -h "bits:" "$L"/n_ab.log >> "$S"
    for r in 1 2; do
        run t_wan21_$r 30 $T/tests/cuda_decode --time-wan21 21 90 160 2
        run n_wan21_$r 30 $N/tests/cuda_decode --time-wan21 21 90 160 2
    done
    run n_six1 200 python3 bench/bench.py --workload f1 f5 f17 f121 --lib $PWD/$N/libwan22vae.so --commit "$(cat $N/commit.txt)" --json "$O/n-six1.json"
    run n_f481_portable 300 python3 bench/bench.py --workload f481 --portable --no-check --no-audit --lib $PWD/$N/libwan22vae.so --commit "$(cat $N/commit.txt)" --json "$O/n-f481-portable.json"
    run n_seq34 130 $N/tests/cuda_sequence 24 48 34
    run n_budget 90 $N/tests/cuda_budget
    run n_seq12 60 $N/tests/cuda_sequence 30 64 12
    run n_large 60 $N/tests/cuda_large
    run n_seq34_wan21 60 $N/tests/cuda_sequence 24 48 34 wan21
    ;;
3)
    # the threshold 256 on the Hopper path (branch wino256h's only library change: route.h's default) as build-t's
    # library (1ba10fb) under W22_WINOGRAD=256, which makes the same choice on both paths (build-n/ in plan 2 was stale:
    # its copied build tree's dependency files named build-t's targets, so route.h's change rebuilt nothing, and
    # bench/bits gave build-t's bits). The decode tests against the CPU, the checking mode, the budget and the
    # sequence on both VAEs, Wan2.1's time (its 384-channel convs Winograd), the bench's first call, test_gpu.py.
    W="env W22_WINOGRAD=256"
    run w_decode 60 $W $T/tests/cuda_decode
    run w_decode_wan21 60 $W $T/tests/cuda_decode wan21
    run w_seq34 130 $W $T/tests/cuda_sequence 24 48 34
    run w_seq34_wan21 60 $W $T/tests/cuda_sequence 24 48 34 wan21
    for r in 1 2; do
        run t_wan21_$r 30 $T/tests/cuda_decode --time-wan21 21 90 160 2
        run w_wan21_$r 30 $W $T/tests/cuda_decode --time-wan21 21 90 160 2
    done
    run w_six1 200 $W python3 bench/bench.py --workload f1 f5 f17 f121 --lib $PWD/$T/libwan22vae.so --commit "$(cat $T/commit.txt) with W22_WINOGRAD=256 (= wino256h's default)" --json "$O/w-six1.json"
    run w_budget 90 $W $T/tests/cuda_budget
    run w_seq12 60 $W $T/tests/cuda_sequence 30 64 12
    run w_test_gpu 120 $W python3 -m pytest -q -x python/tests/test_gpu.py
    ;;
4)
    # the six-clip bench's f241 at X's library, merged into plan 1's (MERGE: its t-six1.json, put in the tree), then f481 (plan 5)
    run bench_six2 560 python3 bench/bench.py --workload f241 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --merge "${MERGE:?MERGE: the JSON of plan 1, put in the tree}" --json "$O/six2.json"
    ;;
5)
    run bench_six3 590 python3 bench/bench.py --workload f481 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --merge "${MERGE:?MERGE: the JSON plan 4 wrote, put in the tree}" --json "$O/six3.json"
    ;;
6)
    # issue 45's f481 on the portable path beside the Hopper path and diffusers (unchecked: f481's float32 reference
    # takes ~5 min; its arithmetic is f121's, checked in plan 1)
    run bench_portable_f481 590 python3 bench/bench.py --workload f481 --portable --no-check --lib $PWD/$X/libwan22vae.so --no-audit --commit "$(cat $X/commit.txt)" --json "$O/p-f481-portable.json"
    ;;
9)
    # issue 46's sizes at X's library (after zerohist's merge, if it holds: the one-frame decodes): every size below
    # 4K at T 1, 2, 5 timed beside diffusers' bf16, then the odd x odd sizes checked against its float32
    below=""
    for T in 1 2 5; do for hw in 44x80 80x44 45x80 30x52 52x30 64x64 68x120 44x78 45x45 45x81 33x57; do below="$below ${hw}T$T"; done; done
    run sizes_timed 560 python3 bench/sizes.py --no-fp32 --commit "$(cat $X/commit.txt)" --json "$O/sizes-timed.json" --cases $below
    run sizes_odd 300 python3 bench/sizes.py --commit "$(cat $X/commit.txt)" --json "$O/sizes-odd.json" --cases 45x45T1 45x45T2 45x45T5 45x81T2 33x57T2
    ;;
10)
    # Session 42's first call. build-mz: main merged with branch zerohist (81432b0; a stage's first chunk runs its
    # one-frame 3x3x3 convs on the weight's last temporal tap), the candidate for main: against the CPU backend on
    # both paths and both VAEs (cuda_ops' hist=0 cases put NaN in the GPU's history) and the checking mode (it verifies
    # the history zero); the Hopper A/Bs of exp-c2 and exp-b16 against main (build-m: 588f245, whose library is
    # 22f6e12's but for comments; issue 46's f121 and f481); mz's A/B against main and the one-frame times (issue 46's
    # T = 1 sizes); the profiles; then the rest of the suite on mz and the portable A/Bs as time allows
    ZM=build-mz
    run mz_ops 60 $ZM/tests/cuda_ops
    run mz_decode 60 $ZM/tests/cuda_decode
    run mz_decode_portable 60 $P $ZM/tests/cuda_decode
    run mz_decode_wan21 60 $ZM/tests/cuda_decode wan21
    run mz_seq34 130 $ZM/tests/cuda_sequence 24 48 34
    mkdir -p "$O/ab_c2" "$O/ab_b16" "$O/ab_z" "$O/ab_c2_p" "$O/ab_z_p" "$O/ab_m"
    run c2_ab 60 bash bench/ab.sh $MB $C2 2 "$O/ab_c2"
    run b16_ab 60 bash bench/ab.sh $MB $B16 2 "$O/ab_b16"
    run z_ab 60 bash bench/ab.sh $MB $ZM 2 "$O/ab_z"
    grep -h "bits:\\|f121:" "$L"/c2_ab.log "$L"/b16_ab.log "$L"/z_ab.log >> "$S"
    for r in 1 2; do
        run m_t1_$r 30 $MB/tests/cuda_decode --time 1 2
        run z_t1_$r 30 $ZM/tests/cuda_decode --time 1 2
        run m_t1_wan21_$r 30 $MB/tests/cuda_decode --time-wan21 1 90 160 1
        run z_t1_wan21_$r 30 $ZM/tests/cuda_decode --time-wan21 1 90 160 1
    done
    run mz_prof 40 env W22_PROFILE=2 $ZM/tests/cuda_decode --time 31 2
    run mz_prof_t1 20 env W22_PROFILE=2 $ZM/tests/cuda_decode --time 1 2
    run mz_seq34_wan21 60 $ZM/tests/cuda_sequence 24 48 34 wan21
    run mz_ops_portable 60 $P $ZM/tests/cuda_ops
    run mz_seq12 60 $ZM/tests/cuda_sequence 30 64 12
    run mz_budget 90 $ZM/tests/cuda_budget
    run mz_test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    run mz_seq34_portable 130 $P $ZM/tests/cuda_sequence 24 48 34
    run c2_ab_portable 90 $P bash bench/ab.sh $MB $C2 1 "$O/ab_c2_p"
    run z_ab_portable 90 $P bash bench/ab.sh $MB $ZM 1 "$O/ab_z_p"
    run m_ab 50 env W22_WINOGRAD=256 bash bench/ab.sh $T $MB 1 "$O/ab_m"
    grep -h "bits:\\|f121:" "$L"/*_ab_portable.log "$L"/m_ab.log >> "$S"
    ;;
11)
    # The record at X's library (the commit to submit): with FRESH=1 (a build no call has run yet) cuda_ops and its
    # decode against the CPU backend on both paths and both VAEs, the checking mode and test_gpu.py first; then the
    # six-clip bench's f1 f5 f17 f121 checked, timed and audited (energy; issue 46's f121), issue 46's sizes (below 4K
    # at T 1, 2, 5 timed beside diffusers' bf16; the odd x odd sizes checked against its float32), f241 merged in
    if [ "${FRESH:-0}" = 1 ]; then
        run x_ops 60 $X/tests/cuda_ops
        run x_decode 60 $X/tests/cuda_decode
        run x_decode_portable 60 $P $X/tests/cuda_decode
        run x_decode_wan21 60 $X/tests/cuda_decode wan21
        run x_seq34 130 $X/tests/cuda_sequence 24 48 34
        run x_test_gpu 100 python3 -m pytest -q -x python/tests/test_gpu.py
    fi
    run six1 240 python3 bench/bench.py --workload f1 f5 f17 f121 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --json "$O/six1.json"
    below=""
    for t in 1 2 5; do for hw in 44x80 80x44 45x80 30x52 52x30 64x64 68x120 44x78 45x45 45x81 33x57; do below="$below ${hw}T$t"; done; done
    run sizes_timed 150 python3 bench/sizes.py --no-fp32 --commit "$(cat $X/commit.txt)" --json "$O/sizes-timed.json" --cases $below
    run sizes_odd 150 python3 bench/sizes.py --commit "$(cat $X/commit.txt)" --json "$O/sizes-odd.json" --cases 45x45T1 45x45T2 45x45T5 45x81T1 45x81T2 33x57T1 33x57T2
    run six2 400 python3 bench/bench.py --workload f241 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --merge "$O/six1.json" --json "$O/six2.json"
    ;;
12)
    # For the next session (made ready in session 42; .carry: build-m.tgz = main f4c9ffc in full, build-b16.tgz = branch
    # exp-b16 dd979d8 on it: 16 free tile rows on the Hopper path alone, its library and bench/bits): the Wan2.1 VAE at main first (f4c9ffc gave its stage 3
    # back its one-frame chunks, not run on a GPU), the GPU suite's programs that session 42 did not run at main, then
    # exp-b16's A/B against main on the Hopper path (its portable path is main's). Then plans 4 and 5 with X=build-m and
    # MERGE=bench/results/2026-12-06-h100-s42-f121.json (f241, then f481: issue 46's record).
    B16=build-b16
    run m_decode_wan21 60 $MB/tests/cuda_decode wan21
    run m_time_wan21 30 $MB/tests/cuda_decode --time-wan21 21 90 160 2
    run m_ops_portable 60 $P $MB/tests/cuda_ops
    run m_seq34_portable 130 $P $MB/tests/cuda_sequence 24 48 34
    run m_seq34_wan21 60 $MB/tests/cuda_sequence 24 48 34 wan21
    run m_seq12 60 $MB/tests/cuda_sequence 30 64 12
    run m_seq12_portable 60 $P $MB/tests/cuda_sequence 30 64 12
    run m_budget 90 $MB/tests/cuda_budget
    run m_large 60 $MB/tests/cuda_large
    run m_large_portable 60 $P $MB/tests/cuda_large
    run m_dit 30 $MB/tests/cuda_dit
    run m_interrupt 60 $MB/tests/cuda_interrupt
    mkdir -p "$O/ab_b16"
    run b16_ab 60 bash bench/ab.sh $MB $B16 2 "$O/ab_b16"
    grep -h "bits:\\|f121:" "$L"/b16_ab*.log >> "$S"
    run m_prof 40 env W22_PROFILE=2 $MB/tests/cuda_decode --time 31 2
    ;;
13)
    # Branch bands (issue 44; .carry/build-bands.tgz = 284a849: its library, bench/bits, cuda_decode, cuda_sequence):
    # the band decode against the CPU backend on both paths and both VAEs (cuda_decode's band cases beside the rest),
    # then Wan2.1 1280x720x81 in 2 bands against the whole frame, alternating (time and peak: PERF.md predicts
    # ~3.2 GiB with the weights and ~1.9-1.95 s against ~1.62), and 3 bands once
    BD=build-bands
    run bd_decode 60 $BD/tests/cuda_decode
    run bd_decode_portable 60 $P $BD/tests/cuda_decode
    run bd_decode_wan21 60 $BD/tests/cuda_decode wan21
    for r in 1 2; do
        run bd_whole_$r 40 $BD/tests/cuda_decode --time-wan21 21 90 160 1
        run bd_bands2_$r 40 $BD/tests/cuda_decode --time-wan21 21 90 160 1 2
    done
    run bd_bands3 40 $BD/tests/cuda_decode --time-wan21 21 90 160 1 3
    run bd_seq34_wan21 60 $BD/tests/cuda_sequence 24 48 34 wan21
    ;;
14)
    # Session 43's first call: branch bands on the GPU (plan 13: its band cases on both paths and both VAEs, Wan2.1
    # 1280x720x81 in 2 and 3 bands against the whole frame), then issue 46's record at main (X=build-m, f4c9ffc: the
    # TI2V-5B library of 6020f46): 3840x2160 T 1 beside diffusers (the 4K size diffusers' bf16 fits on 80 GB), then
    # bench.py f241 checked and timed, merged into session 42's f121 record (MERGE)
    BD=build-bands
    run bd_decode 60 $BD/tests/cuda_decode
    run bd_decode_wan21 60 $BD/tests/cuda_decode wan21
    for r in 1 2; do
        run bd_whole_$r 40 $BD/tests/cuda_decode --time-wan21 21 90 160 1
        run bd_bands2_$r 40 $BD/tests/cuda_decode --time-wan21 21 90 160 1 2
    done
    run bd_bands3 40 $BD/tests/cuda_decode --time-wan21 21 90 160 1 3
    run bd_decode_portable 60 $P $BD/tests/cuda_decode
    run sizes_4k_t1 90 python3 bench/sizes.py --commit "$(cat $X/commit.txt)" --json "$O/sizes-4k-t1.json" --cases 135x240T1
    run six2 400 python3 bench/bench.py --workload f241 --lib $PWD/$X/libwan22vae.so --commit "$(cat $X/commit.txt)" --merge "${MERGE:?MERGE}" --json "$O/six2.json"
    ;;
15)
    # Session 43's candidate (build-c: branch bands with the replay of stage 0 and w22_decoder_params.bands; main's
    # library but for the band decode): against the CPU backend on both paths and both VAEs (cuda_decode's band cases
    # now replay stage 0 for the Wan2.1 VAE), Wan2.1 1280x720x81 whole frame against 2 bands alternating (PERF.md
    # predicts ~1.82 s), issue 44's bench (bench/wan21.py w720 in 2 bands, checked against diffusers' float32, timed
    # beside its bf16, peak with the weights), the same bits as main (build-m) in bench/bits' 18 cases (TI2V-5B's
    # record of f121 and f241 holds), then the rest of the suite on it
    C=build-c
    run c_decode 60 $C/tests/cuda_decode
    run c_decode_wan21 60 $C/tests/cuda_decode wan21
    for r in 1 2; do
        run c_whole_$r 30 $C/tests/cuda_decode --time-wan21 21 90 160 0
        run c_bands2_$r 30 $C/tests/cuda_decode --time-wan21 21 90 160 0 2
    done
    run c_w21_bands 240 python3 bench/wan21.py --workload w720 --bands 2 --commit "$(cat $C/commit.txt)" --json "$O/w21-bands.json"
    mkdir -p "$O/ab_c"
    run c_ab 50 bash bench/ab.sh $MB $C 1 "$O/ab_c"
    grep -h "bits:\\|f121:" "$L"/c_ab.log >> "$S"
    run c_decode_portable 60 $P $C/tests/cuda_decode
    run c_ops 60 $C/tests/cuda_ops
    run c_seq34 90 $C/tests/cuda_sequence 24 48 34
    run c_seq34_wan21 40 $C/tests/cuda_sequence 24 48 34 wan21
    run c_seq12 40 $C/tests/cuda_sequence 30 64 12
    run c_budget 50 $C/tests/cuda_budget
    run c_large 30 $C/tests/cuda_large
    run c_dit 20 $C/tests/cuda_dit
    run c_interrupt 20 $C/tests/cuda_interrupt
    run c_test_gpu 70 python3 -m pytest -q -x python/tests/test_gpu.py
    run c_ops_portable 40 $P $C/tests/cuda_ops
    run c_seq34_portable 90 $P $C/tests/cuda_sequence 24 48 34
    run c_seq12_portable 40 $P $C/tests/cuda_sequence 30 64 12
    run c_large_portable 30 $P $C/tests/cuda_large
    # on an H200 (diffusers' bf16 fits at 4K from T 2 on, not on 80 GB): issue 46's 4K sizes timed beside it
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        run c_sizes_4k 150 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/sizes.py --no-fp32 --commit "$(cat $C/commit.txt)" --json "$O/sizes-4k.json" --cases 135x240T2 135x256T2a 135x256T2b 135x240T5
    fi
    ;;
esac
echo "lease: $fail of the programs failed or were skipped" >> "$S"
cat "$S"
