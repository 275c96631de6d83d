#!/usr/bin/env bash
# W22_WINOGRAD (src/cuda/winograd.cu, a trial switch): cuda_ops' conv cases with every qualifying 3x3x3 conv on the
# Winograd path (W22_WINOGRAD_TILES=0: the small cases too) against the CPU backend, within the same tolerances as
# the direct conv. Each such case then also fails cuda_ops' check of the kernel path (it expects the wgmma conv):
# that line is not counted here; the numeric lines are.
set -u
B=${BUILD:-build}
out=$(W22_WINOGRAD=1 W22_WINOGRAD_TILES=0 "$B/tests/cuda_ops" -o conv 2>&1)
ok=$(printf '%s\n' "$out" | grep -E '^conv .*\[winograd[^]]*\] ok$' | wc -l)
bad=$(printf '%s\n' "$out" | grep -E '^conv .*\[winograd[^]]*\] FAIL$' | wc -l)
printf '%s\n' "$out" | grep -E '^conv .*\[winograd' | grep -E 'FAIL$'
pass=0; fail=0
if [ "$ok" -ge 10 ]; then echo "winograd conv cases within tolerance: $ok: ok"; pass=$((pass + 1));
else echo "winograd conv cases within tolerance: $ok (expected 10 or more): FAIL"; fail=$((fail + 1)); fi
if [ "$bad" -eq 0 ]; then echo "winograd conv cases out of tolerance: 0: ok"; pass=$((pass + 1));
else echo "winograd conv cases out of tolerance: $bad: FAIL"; fail=$((fail + 1)); fi
echo "cuda_winograd: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
