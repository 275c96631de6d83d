#!/usr/bin/env bash
# The direct convs' TMA store (src/cuda/conv_sm90_wgmma_tma.cu, since v21): cuda_ops' conv cases, whose direct convs
# that allow it (cout a multiple of 256, the output's width a multiple of 8, not both a residual and a shortcut)
# store their tiles by the TMA, a plain residual taken as the GEMM's extra K (times an identity), against the CPU
# backend within the usual tolerances and on the kernel path cuda_ops expects: 5 or more cases on the TMA store, 2 or
# more of them with a residual (boxes of 8, 16 and 128 pixels, a partial last tile, 2 frames, a shortcut's bias,
# res = out, the split tail, history frames).
set -u
B=${BUILD:-build}
pass=0; fail=0
if [ "${W22_KERNELS:-}" = portable ]; then # the TMA store is the Hopper path's; the portable path has no TMA
    echo "cuda_epi_tma: W22_KERNELS=portable: the TMA conv is the Hopper path's, nothing to check"
    echo "cuda_epi_tma: 0 passed, 0 failed"; exit 0
fi
out=$("$B/tests/cuda_ops" -o conv 2>&1)
onp=$(printf '%s\n' "$out" | grep -E '^conv .*\[wgmma[^]]*tma-store[^]]*\] ok$')
ok=$(printf '%s\n' "$onp" | grep -c .)
res=$(printf '%s\n' "$onp" | grep -c -E ' res(=out)? ')
printf '%s\n' "$onp"
printf '%s\n' "$out" | grep -E 'FAIL'
if [ "$ok" -ge 5 ] && [ "$res" -ge 2 ]; then
    echo "direct conv cases on the TMA store within tolerance: $ok, $res with a residual: ok"; pass=$((pass + 1))
else
    echo "direct conv cases on the TMA store within tolerance: $ok, $res with a residual (expected 5 and 2 or more): FAIL"
    fail=$((fail + 1))
fi
if printf '%s\n' "$out" | grep -qE '^cuda_ops: [0-9]+ passed, 0 failed'; then
    echo "cuda_ops -o conv (tolerances and kernel paths): $(printf '%s\n' "$out" | grep -E '^cuda_ops: ' | tail -1): ok"
    pass=$((pass + 1))
else
    echo "cuda_ops -o conv: $(printf '%s\n' "$out" | grep -E '^cuda_ops: ' | tail -1): FAIL"; fail=$((fail + 1))
fi
echo "cuda_epi_tma: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
