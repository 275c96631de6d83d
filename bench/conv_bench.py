#!/usr/bin/env python3
"""The conv micro-benchmark: cuDNN's bf16 conv3d 3x3x3 (torch.nn.functional.conv3d, channels_last_3d, padding 1,
4 frames) at the decoder's three heavy shapes, side by side with our conv (build/tests/cuda_ops --perf, when its
path is given). FLOPs = 2 x Cin x Cout x 27 x frames x H x W (the padded taps counted, as the doc counts them).

    python3 bench/conv_bench.py [--ours build/tests/cuda_ops] [--json $OUT/conv.conv.json]   (kept as bench/results/*.conv.json)

Each shape: 3 warm-ups, then the median of 10 calls timed with CUDA events; inputs random (never zeros).
"""
import argparse
import json
import re
import statistics
import subprocess
import sys

# (channels, H, W): up_blocks.3 at 352x624, up_blocks.2 at 176x312, up_blocks.1 at 88x156.
SHAPES = [(256, 352, 624), (512, 176, 312), (1024, 88, 156)]
FRAMES = 4
# A line of cuda_ops --perf: "perf NAME FxHxWxCin->Cout k3x3...: 1.234 ms, 567.8 TFLOP/s ..."
OURS_LINE = re.compile(r"perf\s+(.+?)\s+(\d+)x(\d+)x(\d+)x(\d+)->(\d+)\s+k(\d+)x(\d+)\S*:\s+([\d.]+) ms,?\s+([\d.]+) "
                       r"TFLOP/s")


def flops(c, h, w, frames=FRAMES):
    return 2.0 * c * c * 27 * frames * h * w


def cudnn_conv(c, h, w, layout):
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda")
    x = torch.randn(1, c, FRAMES, h, w, device=dev, dtype=torch.bfloat16)
    wt = torch.randn(c, c, 3, 3, 3, device=dev, dtype=torch.bfloat16) * (1.0 / (27 * c) ** 0.5)
    if layout == "channels_last_3d":
        x, wt = x.contiguous(memory_format=torch.channels_last_3d), wt.contiguous(memory_format=torch.channels_last_3d)
    for _ in range(3):
        F.conv3d(x, wt, padding=1)
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        F.conv3d(x, wt, padding=1)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    ms = statistics.median(times)
    return {"ms": ms, "tflops": flops(c, h, w) / (ms * 1e-3) / 1e12}


def parse_ours(text):
    """{(cin, cout, h, w): {"name", "ms", "tflops"}} of the 3x3x3 convs in cuda_ops --perf's output over FRAMES output
    frames (FRAMES + 2 input frames: cuDNN's shape; the one-frame lines of the same layers are not compared)."""
    out = {}
    for m in OURS_LINE.finditer(text):
        name, f, h, w, cin, cout, kt, ks, ms, tf = m.groups()
        if (kt, ks) == ("3", "3") and int(f) == FRAMES + 2:
            out[(int(cin), int(cout), int(h), int(w))] = {"name": name, "ms": float(ms), "tflops": float(tf)}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ours", help="path of build/tests/cuda_ops (run with --perf)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--no-cudnn", action="store_true", help="only run ours")
    a = p.parse_args(argv)
    rows, ours_text, ours = [], "", {}
    if a.ours:
        got = subprocess.run([a.ours, "--perf"], capture_output=True, text=True, timeout=540)
        ours_text = got.stdout + got.stderr
        ours = parse_ours(ours_text)
        if got.returncode != 0:
            print(f"{a.ours} --perf exited with {got.returncode}", file=sys.stderr)
    if not a.no_cudnn:
        import torch
        torch.backends.cudnn.benchmark = True  # cuDNN's best algorithm for each shape
        torch.backends.cudnn.allow_tf32 = False
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print("| shape (4 frames, 3x3x3) | cuDNN channels-last TFLOP/s | cuDNN NCDHW TFLOP/s | ours TFLOP/s | ours / cuDNN "
          "|\n| --- | --- | --- | --- | --- |")
    for c, h, w in SHAPES:
        row = {"channels": c, "h": h, "w": w, "frames": FRAMES, "gflop": flops(c, h, w) / 1e9}
        if not a.no_cudnn:
            row["cudnn_channels_last"] = cudnn_conv(c, h, w, "channels_last_3d")
            row["cudnn_ncdhw"] = cudnn_conv(c, h, w, "ncdhw")
        mine = ours.get((c, c, h, w))
        if mine:
            row["ours"] = mine
        rows.append(row)
        cl = row.get("cudnn_channels_last", {}).get("tflops")
        nc = row.get("cudnn_ncdhw", {}).get("tflops")
        tf = (mine or {}).get("tflops")
        ratio = f"{tf / cl:.2f}" if tf and cl else "-"
        print(f"| {c}ch at {h}x{w} | {cl or 0:.0f} | {nc or 0:.0f} | {f'{tf:.0f}' if tf else '-'} | {ratio} |")
    if ours_text:
        print("\ncuda_ops --perf:\n" + "\n".join(l for l in ours_text.splitlines() if l.startswith("perf")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "ours_output": ours_text}, f, indent=1)


if __name__ == "__main__":
    main()
