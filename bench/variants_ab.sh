#!/usr/bin/env bash
# One device command that checks and times kernel variants selected by environment switches against the default
# build, side by side in one run (docs/PERF.md says what each predicted and gave). The switches of v5 (their
# defaults are the faster paths; these select the older ones):
#   W22_WGMMA_HANDOFF=late   the wgmma producer hands a stage to the consumers after it has a free stage
#   W22_WGMMA_ROWS=smem      the wgmma producer reads its rows' offsets from shared memory every stage
#   W22_NORM=v1              RMS norm + SiLU in two passes over the pixel
# the later ones (defaults since v9's run: TMA loads on a persistent grid, conv_out on the row conv):
#   W22_WGMMA_CLUSTER=2      CTA pairs sharing B by TMA multicast, on the cp.async kernel (v6: slower)
#   W22_CONV_ROWS=0          conv_out on the mma kernel instead of the row convs (v7)
#   W22_CONV_ROWS=row        conv_out on v7's row tiles instead of the 2D tiles (conv_rows2d.cu)
#   W22_WGMMA_LOAD=cpasync   the wgmma conv's pixels by v5's cp.async gathers instead of TMA im2col (v9)
#   W22_WGMMA_PERSIST=0      the TMA-loaded conv one tile per CTA; =1 with cpasync: v8's persistent kernel (slower)
#   W22_DUPUP=separate       the up blocks' DupUp as its own dupup_add pass instead of the upsample conv's residual
#   W22_PHASES=separate      an upsample conv's four phase GEMMs as four launches instead of one (path "... phases4")
#   W22_CACHE_ROTATE=0       the causal caches' pushes as frame copies instead of the spare frames' rotation
#   W22_HEAD_PSUM=0          conv_out with two input frames as history (the row conv) instead of partial sums
# Steps per variant set: conformance (cuda_ops conv and rmsnorm cases against the CPU backend, cuda_decode's whole
# decodes against the CPU's), the op
# micro-benchmark (cuda_ops --perf --kernel wgmma), the whole f121 decode at 1 latent frame per pass
# (cuda_decode --time 31 1: the library alone, device to device). Then the conv micro-benchmark against cuDNN
# (bench/conv_bench.py) under the fastest set that passed. Logs go to $OUT; the fastest set is printed last.
# Usage (device, repo root): bench/variants_ab.sh ["SET1" "SET2" ...]   (a SET: "VAR=v VAR=v", "" = default)
set -u
if [ $# -eq 0 ]; then
    set -- "" "W22_WGMMA_PERSIST=0" "W22_WGMMA_LOAD=cpasync W22_CONV_ROWS=0"
fi
out=${OUT:-/tmp/out}
mkdir -p "$out"
make -j16 build/libwan22vae.so build/tests/cuda_ops build/tests/cuda_decode > "$out/make.log" 2>&1 ||
    { tail -20 "$out/make.log"; exit 1; }
i=0; best=""; best_ms=""
for vars in "$@"; do
    i=$((i + 1)); name="set$i"; label=${vars:-default}
    ok=1
    if [ -n "$vars" ]; then
        env $vars timeout 150 build/tests/cuda_ops -o conv > "$out/${name}_conv.txt" 2>&1 || ok=0
        env $vars timeout 60 build/tests/cuda_ops -o rmsnorm > "$out/${name}_norm.txt" 2>&1 || ok=0
        env $vars timeout 120 build/tests/cuda_decode > "$out/${name}_dec.txt" 2>&1 || ok=0
        echo "[$label] conformance: $([ $ok = 1 ] && echo ok || echo FAIL) (conv: $(tail -n 1 "$out/${name}_conv.txt"); rmsnorm: $(tail -n 1 "$out/${name}_norm.txt"); whole decode: $(tail -n 1 "$out/${name}_dec.txt"))"
    fi
    env $vars timeout 90 build/tests/cuda_ops --perf --kernel wgmma > "$out/${name}_perf.txt" 2>&1
    grep '^perf' "$out/${name}_perf.txt" | sed "s/^/[$label] /"
    env $vars timeout 120 build/tests/cuda_decode --time 31 1 > "$out/${name}_decode.txt" 2>&1
    grep '^f' "$out/${name}_decode.txt" | sed "s/^/[$label] /"
    ms=$(grep -m1 -o 'frames/pass 1: [0-9.]* ms, [0-9.]*' "$out/${name}_decode.txt" | awk '{print $5}')
    if [ "$ok" = 1 ] && [ -n "$ms" ] && { [ -z "$best_ms" ] || awk "BEGIN{exit !($ms < $best_ms)}"; }; then
        best=$vars; best_ms=$ms
    fi
done
echo "fastest f121 that passed: [${best:-default}] $best_ms ms"
env $best timeout 120 python3 bench/conv_bench.py --ours build/tests/cuda_ops --json "$out/conv_bench.json" \
    > "$out/conv_bench.txt" 2>&1
echo "conv_bench under [${best:-default}]:"; cat "$out/conv_bench.txt"
