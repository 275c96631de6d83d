#!/usr/bin/env bash
# W22_EPI_TMA_DIRECT=1 (src/cuda/conv_sm90_wgmma_tma.cu, a trial switch): cuda_ops' conv cases with the direct convs
# that allow it (cout a multiple of 256, W a multiple of 8, no shortcut where there is a residual) storing their tiles
# by the TMA, a plain residual taken as the GEMM's extra K (times an identity), against the CPU backend within the
# usual tolerances: 5 or more cases on that path, 2 or more of them with a residual (boxes of 8, 16 and 128 pixels, a
# partial last tile, 2 frames, a shortcut's bias, res = out, the split tail), none out of tolerance anywhere; under
# both stagings of the TMA store (two boxes in turns on a ring of 4 stages, the default; W22_EPI_STG=full: the tile
# on a ring of 3). Each such case also fails cuda_ops' check of the kernel path (it expects the overlapped
# epilogue): that line is not counted here; the numeric lines are.
set -u
B=${BUILD:-build}
pass=0; fail=0
for v in "" "W22_EPI_STG=full"; do
    out=$(env W22_EPI_TMA_DIRECT=1 $v "$B/tests/cuda_ops" -o conv 2>&1)
    onp=$(printf '%s\n' "$out" | grep -E '^conv .*\[wgmma[^]]*tma-store[^]]*\] ok$')
    ok=$(printf '%s\n' "$onp" | grep -c .)
    res=$(printf '%s\n' "$onp" | grep -c -E ' res(=out)? ')
    bad=$(printf '%s\n' "$out" | grep -E '^conv .*\] FAIL$' | wc -l)
    printf '%s\n' "$onp"
    printf '%s\n' "$out" | grep -E '^conv .*\] FAIL$'
    l=${v:-two boxes in turns}
    if [ "$ok" -ge 5 ] && [ "$res" -ge 2 ]; then
        echo "[$l] direct conv cases on the TMA store within tolerance: $ok, $res with a residual: ok"; pass=$((pass + 1))
    else
        echo "[$l] direct conv cases on the TMA store within tolerance: $ok, $res with a residual (expected 5 and 2 or more): FAIL"
        fail=$((fail + 1))
    fi
    if [ "$bad" -eq 0 ]; then echo "[$l] conv cases out of tolerance: 0: ok"; pass=$((pass + 1));
    else echo "[$l] conv cases out of tolerance: $bad: FAIL"; fail=$((fail + 1)); fi
done
echo "cuda_epi_tma: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
