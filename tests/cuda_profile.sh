#!/usr/bin/env bash
# W22_PROFILE=1 (src/cuda/profile.cu): a small decode with the timed op table gives the same bytes as without it,
# and its report on stderr has rows for the convs and the norms with their calls counted; W22_PROFILE=2 adds the
# Winograd path's parts.
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
# the table names the kernel path the backend took (issue 45): the portable one under W22_KERNELS=portable
want='kernels: the (Hopper|portable) path'
[ "${W22_KERNELS:-}" = portable ] && want='kernels: the portable path'
if grep -E "^w22 profile .*$want" "$tmp/prof.log" >/dev/null; then ok "report names the kernel path"; else
    bad "report names the kernel path"; fi
if grep -q '^w22 profile' "$tmp/plain.log"; then bad "no report without W22_PROFILE"; else ok "no report without W22_PROFILE"; fi
# rows: ms, share, calls, us/call, [TFLOP/s], [GB/s], op; a conv row has a rate and the kernel path in brackets
if grep -E '^ +[0-9.]+ +[0-9.]+% +[1-9][0-9]* +[0-9.]+ +[0-9]+ +conv .*\[.+\]$' "$tmp/prof.log" >/dev/null; then
    ok "conv rows with calls, rate and path"; else bad "conv rows with calls, rate and path"; fi
if grep -E '^ +[0-9.]+ +[0-9.]+% +[1-9][0-9]* .* rmsnorm\+silu ' "$tmp/prof.log" >/dev/null; then
    ok "rmsnorm rows"; else bad "rmsnorm rows"; fi
# W22_PROFILE=2 with every conv of 64 channels or more on the Winograd path: the same bytes again, the path's parts as
# rows of their own, and the ops' total without them (parts counted twice would exceed the span of the events)
W22_WINOGRAD=64 dec "$tmp/wino.npy" > "$tmp/wino.log" 2>&1 || { cat "$tmp/wino.log"; exit 1; }
W22_WINOGRAD=64 W22_PROFILE=2 dec "$tmp/prof2.npy" > "$tmp/prof2.log" 2>&1 || { cat "$tmp/prof2.log"; exit 1; }
if cmp -s "$tmp/wino.npy" "$tmp/prof2.npy"; then ok "same output with W22_PROFILE=2"; else bad "same output with W22_PROFILE=2"; fi
if grep -q ' part: winograd input transform ' "$tmp/prof2.log" && grep -q ' part: winograd 16 GEMMs .*\[.\+\]$' "$tmp/prof2.log" \
    && grep -q ' part: winograd output transform ' "$tmp/prof2.log"; then
    ok "W22_PROFILE=2: the Winograd parts"; else bad "W22_PROFILE=2: the Winograd parts"; fi
if grep -q ' part: ' "$tmp/prof.log"; then bad "no parts with W22_PROFILE=1"; else ok "no parts with W22_PROFILE=1"; fi
if awk '/^w22 profile/ { for (i = 1; i < NF; i++) { if ($i == "ops") o = $(i + 1); if ($i == "of") s = $(i + 1) } }
        END { exit !(o > 0 && o <= s * 1.001) }' "$tmp/prof2.log"; then
    ok "W22_PROFILE=2: ops' total within the events' span"; else bad "W22_PROFILE=2: ops' total within the events' span"; fi
[ "$fail" -eq 0 ] || tail -n 40 "$tmp/prof.log" "$tmp/prof2.log"
echo "cuda_profile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
