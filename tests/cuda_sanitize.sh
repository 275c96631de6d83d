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
# racecheck and initcheck on 2 x 2 latents (32 x 32 pixels): they instrument every shared-memory access (racecheck)
# or every byte (initcheck) and took over 120 s each at 4 x 6; 2 x 2 still runs every kernel kind, and tiles that
# span several frames (the wgmma producer's frame-table path).
"$B/wan22vae" synth latents --out "$tmp/z2.safetensors" --frames 3 --height 2 --width 2 --seed 5 >/dev/null || exit 1
# The runs go in parallel (the GPU has room; each is one process on a small decode). The fourth field is
# W22_WINOGRAD: 64 puts every 3x3x3 conv of this narrow config on the Winograd path (src/cuda/winograd.cu: its
# transforms, the batched GEMM, its bands in the stage's free memory), which the default (512) leaves out here.
runs=("memcheck 1 z 512" "memcheck 3 z 512" "initcheck 3 z2 512" "racecheck 3 z2 512" "memcheck 1 z 64")
for i in "${!runs[@]}"; do
    set -- ${runs[$i]}; tool=$1; fpp=$2; z=$3; wino=$4
    W22_WINOGRAD=$wino "$cs" --tool "$tool" --error-exitcode 97 $([ "$tool" = memcheck ] && echo --leak-check full) \
        "$B/wan22vae" decode --device cuda --weights "$tmp/w.safetensors" --latents "$tmp/$z.safetensors" \
        --frames-per-pass "$fpp" --out "$tmp/v-$i.npy" --force > "$tmp/run-$i.log" 2>&1 &
    eval "pid_$i=$!"
done
pass=0; fail=0
for i in "${!runs[@]}"; do
    set -- ${runs[$i]}; tool=$1; fpp=$2; z=$3; wino=$4
    pid=$(eval echo "\$pid_$i"); log="$tmp/run-$i.log"
    if wait "$pid"; then
        pass=$((pass + 1))
        echo "$tool, $fpp frame(s) per pass, latents $z, W22_WINOGRAD=$wino: ok ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log"))"
    else
        fail=$((fail + 1)); echo "$tool, $fpp frame(s) per pass, latents $z, W22_WINOGRAD=$wino: FAIL"; tail -n 30 "$log"
    fi
done
echo "cuda_sanitize: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
