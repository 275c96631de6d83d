#!/usr/bin/env bash
# W22_EPI_TMA_DIRECT=1 (src/cuda/conv_sm90_wgmma_tma.cu, a trial switch): cuda_ops' conv cases with the direct convs
# that allow it (no residual, cout a multiple of 256, W a multiple of 8) storing their tiles by the TMA, against the
# CPU backend within the usual tolerances: 3 or more cases on that path (boxes of 8 and 16 pixels, a partial last
# tile, 2 frames, a shortcut's bias), none out of tolerance anywhere. Each such case also fails cuda_ops' check of the
# kernel path (it expects the overlapped epilogue): that line is not counted here; the numeric lines are.
set -u
B=${BUILD:-build}
pass=0; fail=0
out=$(W22_EPI_TMA_DIRECT=1 "$B/tests/cuda_ops" -o conv 2>&1)
ok=$(printf '%s\n' "$out" | grep -E '^conv .*\[wgmma[^]]*tma-store[^]]*\] ok$' | wc -l)
bad=$(printf '%s\n' "$out" | grep -E '^conv .*\] FAIL$' | wc -l)
printf '%s\n' "$out" | grep -E '^conv .*\[wgmma[^]]*tma-store[^]]*\] ok$'
printf '%s\n' "$out" | grep -E '^conv .*\] FAIL$'
if [ "$ok" -ge 3 ]; then echo "direct conv cases on the TMA store within tolerance: $ok: ok"; pass=$((pass + 1));
else echo "direct conv cases on the TMA store within tolerance: $ok (expected 3 or more): FAIL"; fail=$((fail + 1)); fi
if [ "$bad" -eq 0 ]; then echo "conv cases out of tolerance: 0: ok"; pass=$((pass + 1));
else echo "conv cases out of tolerance: $bad: FAIL"; fail=$((fail + 1)); fi
echo "cuda_epi_tma: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
