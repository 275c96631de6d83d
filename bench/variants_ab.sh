#!/usr/bin/env bash
# One device command that checks and times the kernel variants selected by environment switches against the
# default build, side by side in one run (docs/PERF.md says what each predicts):
#   W22_WGMMA_ROWS=regs  the wgmma producer keeps its rows' offsets in registers (56/224 register split)
#   W22_NORM=v2          RMS norm + SiLU with the pixel kept in registers, row blocks, float4 gamma
# Steps: conformance of the variants (cuda_ops conv and rmsnorm cases against the CPU backend), the op
# micro-benchmark (cuda_ops --perf) without and with them, the whole f121 decode (cuda_decode --time: the
# library alone, device to device) without and with them. Logs go to $OUT.
# Usage (device, repo root): bench/variants_ab.sh ["W22_WGMMA_ROWS=regs W22_NORM=v2"]
set -u
vars=${1:-"W22_WGMMA_ROWS=regs W22_NORM=v2"}
out=${OUT:-/tmp/out}
mkdir -p "$out"
make -j16 build/libwan22vae.so build/tests/cuda_ops build/tests/cuda_decode > "$out/make.log" 2>&1 ||
    { tail -20 "$out/make.log"; exit 1; }
env $vars timeout 120 build/tests/cuda_ops -o conv > "$out/ops_variant_conv.txt" 2>&1; rc1=$?
env $vars timeout 60 build/tests/cuda_ops -o rmsnorm > "$out/ops_variant_norm.txt" 2>&1; rc2=$?
echo "conformance with $vars: conv rc $rc1 ($(tail -n 1 "$out/ops_variant_conv.txt")), rmsnorm rc $rc2 ($(tail -n 1 "$out/ops_variant_norm.txt"))"
timeout 90 build/tests/cuda_ops --perf --kernel wgmma > "$out/perf_default.txt" 2>&1
env $vars timeout 90 build/tests/cuda_ops --perf --kernel wgmma > "$out/perf_variant.txt" 2>&1
paste -d '\n' <(grep '^perf' "$out/perf_default.txt" | sed 's/^/default: /') \
              <(grep '^perf' "$out/perf_variant.txt" | sed 's/^/variant: /')
timeout 120 build/tests/cuda_decode --time > "$out/decode_default.txt" 2>&1
env $vars timeout 120 build/tests/cuda_decode --time > "$out/decode_variant.txt" 2>&1
echo "f121 default:"; grep '^f' "$out/decode_default.txt"
echo "f121 with $vars:"; grep '^f' "$out/decode_variant.txt"
