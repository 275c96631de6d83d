#!/usr/bin/env bash
# A/B of two builds on the GPU for a refactor (issue 29): the same bits and f121 within 1%. Each build is a folder
# with its bench/bits (bench/ab_build.sh COMMIT makes both here: build-ab-a and build-ab; carry them). The two
# run alternately, ROUNDS times each (default 2), in one lease: the H200 is power-bound and its clock moves between
# runs, so only times from one lease compare. Prints each run's hashes and times, then the verdict:
#   bits: same | DIFFER (the cases that do),  f121: B/A ratio of the medians (the refactor must keep it within 1%).
# Usage: bench/ab.sh A_DIR B_DIR [ROUNDS] [OUT_DIR]
set -u
A=$1 B=$2 ROUNDS=${3:-2} OUT=${4:-${OUT:-/tmp}}
for r in $(seq 1 "$ROUNDS"); do
    for x in A B; do
        dir=${!x}
        "$dir/bench/bits" 3 > "$OUT/bits_${x}_$r.txt" 2>&1 || { echo "bits $x round $r failed:"; tail -3 "$OUT/bits_${x}_$r.txt"; }
        nvidia-smi --query-gpu=clocks.sm --format=csv,noheader >> "$OUT/bits_${x}_$r.txt" 2>/dev/null
    done
done
grep '^case' "$OUT/bits_A_1.txt" > "$OUT/cases_A.txt"
grep '^case' "$OUT/bits_B_1.txt" > "$OUT/cases_B.txt"
if [ -s "$OUT/cases_A.txt" ] && cmp -s "$OUT/cases_A.txt" "$OUT/cases_B.txt"; then
    echo "bits: same ($(wc -l < "$OUT/cases_A.txt") cases)"
else
    echo "bits: DIFFER"; diff "$OUT/cases_A.txt" "$OUT/cases_B.txt" | head -20
fi
med() { grep -h '^f121' "$OUT"/bits_"$1"_*.txt | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ma=$(med A) mb=$(med B)
echo "f121: A median $ma ms, B median $mb ms, B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.4f", b / a}')"
