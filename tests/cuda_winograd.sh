#!/usr/bin/env bash
# W22_WINOGRAD (src/cuda/winograd.cu, a trial switch): cuda_ops' conv cases with every qualifying 3x3x3 conv on the
# Winograd path (W22_WINOGRAD_TILES=0: the small cases too) against the CPU backend, within the same tolerances as
# the direct conv: the 16 GEMMs as one launch (the default), as 16 launches (W22_WINOGRAD_BATCH=0), in row bands
# (W22_WINOGRAD_SCRATCH_MB=1: a band of a few tile rows in these cases), and with v18's transforms of 8 channels a
# thread (W22_WINOGRAD_VEC=8; the default is 4), and with v19's overlapped epilogue in the batch GEMM (W22_EPI_TMA=0;
# the default stores the tiles of every case whose cout is a multiple of 256 by the TMA, the whole tile staged on a
# ring of 3 stages), and with the staging of two boxes in turns on a ring of 4 (W22_EPI_STG=half), and with the batch
# GEMMs in clusters of 2 as v22 ran them (W22_TMA_CLUSTER_BATCH=on; the default since v23: single tiles). cuda_ops' "frames"
# case has 9 input frames: two launches of the input transform. Each such case then also fails cuda_ops'
# check of the kernel path (it expects the wgmma conv): that line is not counted here; the numeric lines are.
set -u
B=${BUILD:-build}
pass=0; fail=0
for v in "" "W22_WINOGRAD_BATCH=0" "W22_WINOGRAD_SCRATCH_MB=1" "W22_WINOGRAD_VEC=8" "W22_EPI_TMA=0" "W22_EPI_STG=half" \
         "W22_TMA_CLUSTER_BATCH=on"; do
    out=$(env W22_WINOGRAD=1 W22_WINOGRAD_TILES=0 $v "$B/tests/cuda_ops" -o conv 2>&1)
    ok=$(printf '%s\n' "$out" | grep -E '^conv .*\[winograd[^]]*\] ok$' | wc -l)
    bad=$(printf '%s\n' "$out" | grep -E '^conv .*\[winograd[^]]*\] FAIL$' | wc -l)
    printf '%s\n' "$out" | grep -E '^conv .*\[winograd' | grep -E 'FAIL$'
    l=${v:-one launch}
    if [ "$ok" -ge 10 ]; then echo "[$l] winograd conv cases within tolerance: $ok: ok"; pass=$((pass + 1));
    else echo "[$l] winograd conv cases within tolerance: $ok (expected 10 or more): FAIL"; fail=$((fail + 1)); fi
    if [ "$bad" -eq 0 ]; then echo "[$l] winograd conv cases out of tolerance: 0: ok"; pass=$((pass + 1));
    else echo "[$l] winograd conv cases out of tolerance: $bad: FAIL"; fail=$((fail + 1)); fi
done
echo "cuda_winograd: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
