#!/usr/bin/env bash
# W22_WINOGRAD (src/cuda/winograd.cu; the 3x3x3 convs of 512 channels and up by default): cuda_ops' conv cases with
# every qualifying 3x3x3 conv on the Winograd path (W22_WINOGRAD=1: the small cases too) against the CPU backend,
# within the same tolerances as the direct conv: the 16 GEMMs as one launch, their tiles stored by the TMA where cout
# is a multiple of 256. cuda_ops' "frames" case has 9 input frames: two launches of the input transform. Each such
# case then also fails cuda_ops' check of the kernel path (it expects the wgmma conv): that line is not counted here;
# the numeric lines are. (The A/B variants of this script's earlier runs went at issue 29.)
set -u
B=${BUILD:-build}
pass=0; fail=0
for v in ""; do
    out=$(env W22_WINOGRAD=1 $v "$B/tests/cuda_ops" -o conv 2>&1)
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
