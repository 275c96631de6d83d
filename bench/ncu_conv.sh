#!/usr/bin/env bash
# Hardware counters of the heaviest conv shape (3x3x3, 256 -> 256 channels, 352 x 624, 4 output frames): ours (the
# wgmma conv, one launch of cuda_ops --perf after its two warm-ups) and cuDNN's channels-last bf16 conv3d (torch,
# one launch after three), under Nsight Compute with the clocks left as they are (--clock-control none: the
# device's own boost and power limit, as in every other measurement). Sections: speed of light, compute and memory
# workload, warp states (stall reasons), scheduler, launch and occupancy.
# Usage (device, repo root, after make): bench/ncu_conv.sh [OUTDIR]   -> OUTDIR/ncu_ours.txt, OUTDIR/ncu_cudnn.txt
set -u
out=${1:-${OUT:-/tmp/out}}
mkdir -p "$out"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy)
# ours: the first shape of --perf is this one; skip its two warm-up launches
timeout 120 ncu --clock-control none "${sections[@]}" -k regex:w22_conv_wgmma --launch-skip 2 --launch-count 1 \
    build/tests/cuda_ops --perf > "$out/ncu_ours.txt" 2>&1
echo "ncu ours: exit $? ($(grep -c 'Section:' "$out/ncu_ours.txt") sections)"
cat > "$out/ncu_cudnn.py" <<'EOF'
import torch
import torch.nn.functional as F
c, h, w = 256, 352, 624
x = torch.randn(1, c, 6, h, w, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last_3d)
wt = (torch.randn(c, c, 3, 3, 3, device="cuda", dtype=torch.bfloat16) / (27 * c) ** 0.5).contiguous(
    memory_format=torch.channels_last_3d)
torch.cuda.synchronize()
for _ in range(5):
    y = F.conv3d(x, wt, padding=(0, 1, 1))  # 6 input frames, no time padding: 4 output frames, as ours
torch.cuda.synchronize()
print("cudnn conv3d out", tuple(y.shape))
EOF
# cuDNN's conv kernel (names vary by version: match the implicit-GEMM kernels, skip torch's fills)
timeout 120 ncu --clock-control none "${sections[@]}" -k 'regex:xmma|cutlass|implicit|fprop|conv|sm90' \
    --launch-skip 3 --launch-count 1 python3 "$out/ncu_cudnn.py" > "$out/ncu_cudnn.txt" 2>&1
echo "ncu cuDNN: exit $? ($(grep -c 'Section:' "$out/ncu_cudnn.txt") sections)"
