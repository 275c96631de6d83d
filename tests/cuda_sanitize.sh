#!/usr/bin/env bash
# compute-sanitizer on a small CUDA decode: memcheck (out-of-bounds and misaligned accesses, leaks of device
# memory), racecheck (shared-memory hazards), initcheck (reads of device memory never written). The config is
# narrow (base_dim 64: 256/128/64 channels) so that every kernel kind runs (wgmma where cin % 64 == 0 and
# N % 128 == 0, mma.sync, scalar, attention, norm, DupUp, unpatchify) in seconds even under the tools;
# T = 3 covers the first frame, time_conv and the causal caches, 1 frame per pass their ring of two slots.
set -u
B=${BUILD:-build}
cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ ! -x "$cs" ]; then echo "cuda_sanitize: compute-sanitizer not found (CUDA toolkit): FAIL"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$B/wan22vae" synth weights --out "$tmp/w.safetensors" --base-dim 64 --seed 3 >/dev/null || exit 1
"$B/wan22vae" synth latents --out "$tmp/z.safetensors" --frames 3 --height 4 --width 6 --seed 4 >/dev/null || exit 1
pass=0; fail=0
# memcheck at 1 and 3 frames per pass (the cache ring's two paths); racecheck and initcheck once (racecheck is
# the slow one: minutes even at this size).
for run in "memcheck 1" "memcheck 3" "initcheck 3" "racecheck 3"; do
    set -- $run; tool=$1; fpp=$2
    {
        log="$tmp/$tool-$fpp.log"
        if "$cs" --tool "$tool" --error-exitcode 97 $([ "$tool" = memcheck ] && echo --leak-check full) \
            "$B/wan22vae" decode --device cuda --weights "$tmp/w.safetensors" --latents "$tmp/z.safetensors" \
            --frames-per-pass "$fpp" --out "$tmp/v-$tool-$fpp.npy" --force > "$log" 2>&1; then
            pass=$((pass + 1)); echo "$tool, $fpp frame(s) per pass: ok ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log"))"
        else
            fail=$((fail + 1)); echo "$tool, $fpp frame(s) per pass: FAIL"; tail -n 30 "$log"
        fi
    }
done
echo "cuda_sanitize: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
