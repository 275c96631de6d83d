#!/usr/bin/env bash
# One device command that measures the conv tile choice and then times f121 with the faster one: the conv
# micro-benchmark (tests/cuda_ops --perf) with the default tile table and with W22_CONV_TILE=mid (128x128 tiles,
# two blocks per SM, also for N >= 256), the conformance cases under the mid tile, then bench.py's f121 timing
# (no fp32 reference: a timing run) with whichever tile summed less conv time. Logs go to $OUT.
# Usage (device, repo root, .whl carried): bench/tile_ab.sh COMMIT
set -u
commit=${1:-unknown}
out=${OUT:-/tmp/out}
mkdir -p "$out"
make -j16 build/libwan22vae.so build/tests/cuda_ops > "$out/make.log" 2>&1 || { tail -20 "$out/make.log"; exit 1; }
conv_ms() { awk '/^perf/ && /TFLOP/ && !/attention/ && !/norm/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ms,") s += $i } END { print s + 0 }' "$1"; }
timeout 90 build/tests/cuda_ops --perf > "$out/perf_default.txt" 2>&1
W22_CONV_TILE=mid timeout 90 build/tests/cuda_ops --perf > "$out/perf_mid.txt" 2>&1
W22_CONV_TILE=mid timeout 60 build/tests/cuda_ops -o conv > "$out/ops_mid.txt" 2>&1
mid_ok=$?
a=$(conv_ms "$out/perf_default.txt"); b=$(conv_ms "$out/perf_mid.txt")
echo "conv perf cases, summed ms: default tiles $a, mid tiles $b; conformance under mid: rc $mid_ok ($(tail -n 1 "$out/ops_mid.txt"))"
grep '^perf' "$out/perf_default.txt" | head -12
grep '^perf' "$out/perf_mid.txt" | head -12
tile=default
if [ "$mid_ok" = 0 ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && b < a) }'; then tile=mid; export W22_CONV_TILE=mid; fi
echo "f121 timing with the $tile tiles"
timeout 150 python3 bench/bench.py --workload f121 --no-check --commit "$commit+tile-$tile" --json "$out/r121.json" > "$out/bench.log" 2>&1
tail -n 4 "$out/bench.log"
