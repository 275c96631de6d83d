#!/usr/bin/env bash
# Issue 30's measurements on one device call (session 31): the open's split (W22_PROFILE) with main's CLI
# (build-run) and the branch issue30-open-prefault's (build-pfc) alternating, three each, outputs compared; f481 into
# .y4m with main's CLI and the branch issue30-writeback-pages' (build-wbc) alternating, three each, outputs
# compared; then the path to a video file at f481 and f121 (bench/path.py, two trials each) with build-cand (both).
# Ran once, session 31 (tests/runs/2026-12-05-h200-session31.txt, call 2): the prefault won, the write-out variant
# lost (git: lost/issue30-writeback-pages). Kept as the record of that call; its builds are not in the tree.
set -u
O=${OUT:-/tmp/w22-lease}
mkdir -p "$O"
git log --oneline -1 > "$O/commit.txt"
(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader -lms 1000 > "$O/clock.txt" 2>&1 &)
t=/tmp/w22ab; mkdir -p $t
build-run/wan22vae synth weights -o $t/w.safetensors --seed 1 --dtype bf16
build-run/wan22vae synth latents -o $t/z.npy --seed 2 --frames 2 --height 44 --width 78
for i in 1 2 3; do
    for v in run pfc; do
        s=$EPOCHREALTIME
        W22_PROFILE=1 build-$v/wan22vae decode -w $t/w.safetensors -l $t/z.npy -o $t/$v.y4m --device cuda -f -v 2>&1 |
            sed "s/^/$v $i: /"
        echo "$v $i: process $(awk "BEGIN{print $EPOCHREALTIME - $s}") s"
    done
done > "$O/open_ab.txt" 2>&1
cmp $t/run.y4m $t/pfc.y4m >> "$O/open_ab.txt" 2>&1 && echo "cmp: the two .y4m are equal" >> "$O/open_ab.txt"
build-run/wan22vae synth latents -o $t/z481.npy --seed 2 --frames 121 --height 44 --width 78
for i in 1 2 3; do
    for v in run wbc; do
        s=$EPOCHREALTIME
        build-$v/wan22vae decode -w $t/w.safetensors -l $t/z481.npy -o $t/$v-481.y4m --device cuda -f -v 2>&1 |
            grep -E "time:|decode" | sed "s/^/$v $i: /"
        echo "$v $i: process $(awk "BEGIN{print $EPOCHREALTIME - $s}") s"
    done
done > "$O/y4m_ab.txt" 2>&1
cmp $t/run-481.y4m $t/wbc-481.y4m >> "$O/y4m_ab.txt" 2>&1 && echo "cmp: the two .y4m are equal" >> "$O/y4m_ab.txt"
python3 bench/path.py --device cuda --T 121 --trials 2 --build build-cand --json "$O/path-f481.json" > "$O/path.txt" 2>&1
python3 bench/path.py --device cuda --T 31 --trials 2 --build build-cand --json "$O/path-f121.json" >> "$O/path.txt" 2>&1
tail -n 4 "$O/path.txt"; grep -E "process|open" "$O/open_ab.txt" | head -40; grep -E "process|cmp" "$O/y4m_ab.txt"
