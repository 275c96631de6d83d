#!/usr/bin/env bash
# W22_PHASE_ORDER=major (src/cuda/conv_sm90_wgmma_tma.cu): cuda_ops' upsample cases (the four phase GEMMs as one
# launch, with and without the DupUp residual) in v18's phase-major tile order, against the CPU backend. The default
# order (the phases of an M tile adjacent) runs in cuda_ops itself; this keeps the other one correct for A/B runs.
set -u
B=${BUILD:-build}
out=$(W22_PHASE_ORDER=major "$B/tests/cuda_ops" -o up 2>&1)
printf '%s\n' "$out" | grep -E 'FAIL' | head -20
line=$(printf '%s\n' "$out" | tail -n 1)
pass=$(printf '%s\n' "$line" | sed -n 's/^cuda_ops: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
failn=$(printf '%s\n' "$line" | sed -n 's/^cuda_ops: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
if [ -n "$pass" ] && [ "$pass" -ge 10 ] && [ "$failn" -eq 0 ]; then
    echo "[W22_PHASE_ORDER=major] upsample cases: $pass passed: ok"; echo "cuda_phase_order: 1 passed, 0 failed"; exit 0
fi
echo "[W22_PHASE_ORDER=major] upsample cases: '$line' (expected 10 or more passed, 0 failed): FAIL"
echo "cuda_phase_order: 0 passed, 1 failed"
exit 1
