#!/usr/bin/env bash
# W22_PROFILE=1 (src/cuda/profile.cu): a small decode with the timed op table gives the same bytes as without it,
# and its report on stderr has rows for the convs and the norms with their calls counted.
set -u
B=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$B/wan22vae" synth weights --out "$tmp/w.safetensors" --base-dim 64 --seed 3 >/dev/null || exit 1
"$B/wan22vae" synth latents --out "$tmp/z.safetensors" --frames 3 --height 4 --width 6 --seed 4 >/dev/null || exit 1
dec() { "$B/wan22vae" decode --device cuda --weights "$tmp/w.safetensors" --latents "$tmp/z.safetensors" --out "$1" --force; }
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "$1: ok"; }
bad() { fail=$((fail + 1)); echo "$1: FAIL"; }
dec "$tmp/plain.npy" > "$tmp/plain.log" 2>&1 || { cat "$tmp/plain.log"; exit 1; }
W22_PROFILE=1 dec "$tmp/prof.npy" > "$tmp/prof.log" 2>&1 || { cat "$tmp/prof.log"; exit 1; }
if cmp -s "$tmp/plain.npy" "$tmp/prof.npy"; then ok "same output with W22_PROFILE=1"; else bad "same output with W22_PROFILE=1"; fi
if grep -q '^w22 profile (W22_PROFILE=1)' "$tmp/prof.log"; then ok "report printed"; else bad "report printed"; fi
if grep -q '^w22 profile' "$tmp/plain.log"; then bad "no report without W22_PROFILE"; else ok "no report without W22_PROFILE"; fi
# rows: ms, share, calls, us/call, [TFLOP/s], [GB/s], op; a conv row has a rate and the kernel path in brackets
if grep -E '^ +[0-9.]+ +[0-9.]+% +[1-9][0-9]* +[0-9.]+ +[0-9]+ +conv .*\[.+\]$' "$tmp/prof.log" >/dev/null; then
    ok "conv rows with calls, rate and path"; else bad "conv rows with calls, rate and path"; fi
if grep -E '^ +[0-9.]+ +[0-9.]+% +[1-9][0-9]* .* rmsnorm\+silu ' "$tmp/prof.log" >/dev/null; then
    ok "rmsnorm rows"; else bad "rmsnorm rows"; fi
[ "$fail" -eq 0 ] || tail -n 40 "$tmp/prof.log"
echo "cuda_profile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
