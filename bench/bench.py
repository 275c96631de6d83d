#!/usr/bin/env python3
"""The benchmark of wan22vae: correctness, timing, memory and a kernel audit of our decode against diffusers'
AutoencoderKLWan, following the seed's protocol (shared/seeds/harness-protocol-reference.txt); every performance
figure of the project comes from this file.

The protocol
------------
Interface: the package `wan22vae` (python/wan22vae) exports prepare(weights, rank, world, pg) -> list[Tensor] and
run(z, weights, rank, world, pg, out): z bf16 [1, 48, T, 44, 78] on the GPU, weights the decoder's 110 bf16 CUDA
tensors in diffusers' named_parameters() order (or what prepare returned), out a NaN-filled bf16 video
[1, 3, 4T-3, 704, 1248]. Every call of the C API the bench makes (the decode, the FLOP count, the synthetic weights
and latents) goes through this checkout's package and the library it loads (--lib or $W22_LIB, else the package's
folder, else build/); where either cannot be used, the bench stops at once and says why.

Workloads: <clip>x<world>, the seed's fifteen. A clip is the first T latent frames of one synthetic T=121 clip
(weights and latents from the library's generator, docs/synthetic.md): f1, f5, f17 (T = 1, 2, 5) at worlds 1 and 4
are checked only; f121, f241, f481 (T = 31, 61, 121) at worlds 1, 2 and 4 are checked and timed (the nine timed
workloads), and audited at world 1. A bare clip name means world 1. A world larger than the GPU count is skipped
(setup.skipped_workloads says why).

Worlds: world 1 runs in this process (NCCL group of one over 127.0.0.1). For a world W > 1, torch.multiprocessing
(spawn) starts one process per rank, rank r on GPU r; each initializes NCCL over 127.0.0.1 with its device (the pg
passed to prepare/run) and a gloo group for the bench's own barriers, loads the same synthetic weights onto its GPU,
calls prepare(weights, rank, W, pg) and runs that world's workloads in order: z (the full latents) on every rank at
a fresh address, out NaN-filled at a fresh 256-byte-aligned address on rank 0 and an empty tensor elsewhere. The
warm-up is checked on rank 0 against the same fp32 reference and calibration as world 1 (made in this process
before the ranks start). A rank that raises, dies or hangs (--start-timeout, --workload-timeout) fails the workload
it was at, with its traceback; every rank process is then stopped and the workloads after it run in new ones. The
ranks run with NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as the device machines require.

Correctness: the first call of a workload (its warm-up) is checked against diffusers' fp32 decode (TF32 off) of
the same bf16 latents and weights: every element finite and in [-1, 1], max|d| <= min(2, 3 x bf16_max_abs),
rms(d) <= 3 x bf16_rms, where bf16_* is diffusers' own bf16 decode of that clip against the fp32 one (the
calibration, made in the same run). Every later call (the audited one, the trials) must agree with the checked
output within the same allowance. z must not be written, nor the weights; run must not start threads.

Timing: after the warm-up, 3 trials (2 when the warm-up took 1.5 s or more); a trial is one call timed by the wall
clock between device syncs (at W > 1: synchronize, barrier, start, run, synchronize, barrier, stop; rank 0's time).
Latency of record: the mean of the trials. While the calls run, a thread of this process reads the SM clock and the
used device memory of every rank's GPU through NVML every 20 ms (clock_mhz is rank 0's GPU; world_clock_mhz the range
of the GPUs' means, shown when they differ by 2% or more). nvidia-smi is asked before every trial which processes
hold the world's GPUs: a workload timed while another did is marked shared.

Audit: one more call per timed clip under torch.profiler (CUPTI), its kernels grouped by library: ours, cuBLAS,
cuDNN, ATen, NCCL, other. Library kernels (cuBLAS, cuDNN, ATen) inside our decode must be none.

Bound: the decode's FLOPs (w22_decode_flops, equal to the count of docs/wan22-decoder.md) spread over the world's W GPUs
at 990 TFLOP/s each (the H200's dense bf16 datasheet rate), or the weights and video at 4.8 TB/s, whichever is
slower; gap = latency / bound. Also the bound at the bf16 GEMM rate measured in the run (torch, 8192^3). The summary
gives the geomean over the nine timed workloads (and over whichever timed ones ran) with its gap, and the scaling
ratios x1 / xW of each clip timed at both (the issue's targets: f481x2 >= 1.85, f481x4 >= 3.5).

diffusers: its bf16 decode of the same clip is timed in the same run (1 warm-up, which is also the calibration's
decode, then the trials), with its peak memory above the loaded model; speedup = diffusers ms / our ms.

Running it (bench/README.md has the device command lines)
----------
    python3 bench/bench.py --workload f1 f5 f17 f121 --commit abc1234 --json $OUT/r.json
    python3 bench/bench.py --workload f241 --merge bench/results/r.json --json $OUT/r.json
    python3 bench/bench.py --workload f121 f241 f481 --no-check          timing only (skips the fp32 decodes)
    python3 bench/bench.py --workload f481x1 f481x2 f481x4               worlds 1, 2, 4 (needs 4 GPUs)
    python3 bench/bench.py --workload f121 f481 --portable               + the portable kernels on the same GPU
    python3 bench/bench.py --workload f121 --portable --portable-winograd 256   + a pass with W22_WINOGRAD=256

--memory-budget SIZE (issue 46): after the default plan (and --portable), world 1's workloads run again on a decoder
opened under that work-memory budget (e.g. 2.5G), checked and timed the same way; each workload's record holds them
under "budget" (memory_budget_bytes, library_work_gib: the library's device bytes beyond the weights after the trials,
within_budget, memory.peak_gib, speedup over diffusers' bf16, vs_default_path).

--portable (issue 45): after the GPU's own path, world 1's workloads run again on the portable kernels (a decoder
opened with W22_KERNELS=portable: mma.sync within 99 KB of shared memory, as on Ampere, Ada and Blackwell), checked
and timed the same way against the same references and diffusers' times; each workload's record holds them under
"portable" (its "path" says which kernels the decoder ran, its "speedup" diffusers ms / its ms).

diffusers' fp32 decode takes about 2.3 s per latent frame on an H200 (280 s at T=121), so a full run is split
into commands of under 10 minutes that merge into one JSON (--merge). References and calibration are cached under
--cache for as long as the machine lives. The results JSON goes to --json (default
bench/results/<date>-<gpu>.json); bench/report.py turns it into the tables of docs/PERF.md.
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The clips: name -> latent frames T. The long ones are timed.
CLIPS = {"f1": 1, "f5": 2, "f17": 5, "f121": 31, "f241": 61, "f481": 121}
TIMED_CLIPS = ("f121", "f241", "f481")
FULL_T = 121                    # the one synthetic clip every clip is cut from
LATENT_H, LATENT_W, Z_DIM = 44, 78, 48
# The seed's workloads in its order: name -> (clip, world). Short clips at worlds 1 and 4 (checked only), the long
# ones at 1, 2 and 4 (the nine timed workloads).
WORKLOADS = {f"{c}x{w}": (c, w) for w, cs in ((1, tuple(CLIPS)), (4, ("f1", "f5", "f17")), (2, TIMED_CLIPS),
                                               (4, TIMED_CLIPS)) for c in cs}
TIMED_WORKLOADS = tuple(n for n, (c, _) in WORKLOADS.items() if c in TIMED_CLIPS)
# The multi-GPU issue's targets: x1 latency / xW latency of f481.
SCALING_TARGETS = {"f481x2": 1.85, "f481x4": 3.5}
# NVLink multicast stays off in every process the bench starts (the device machines require it).
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Limits on the rank processes of a world > 1 (defaults of --start-timeout / --workload-timeout): their start (NCCL,
# weights, prepare) and one workload; then every rank is stopped, SIGTERM and after STOP_GRACE_SEC SIGKILL.
SESSION_START_SEC, WORKLOAD_SEC, STOP_GRACE_SEC = 300, 360, 15

# Trials per timed workload, fewer when one call takes long (the seed's numbers).
TRIALS, LONG_TRIALS, LONG_CALL_S = 3, 2, 1.5
CLOCK_PERIOD_S = 0.02
NVML_CLOCK_SM = 1
# Elements of a video compared at once, in fp32 (1 GiB per operand).
CHUNK_ELEMENTS = 1 << 28
# The H200's datasheet rates: dense bf16 tensor cores, HBM3e.
PEAK_TFLOPS = 990.0
PEAK_BYTES_PER_S = 4.8e12
GIB = float(1 << 30)

# diffusers' AutoencoderKLWan config of Wan2.2 TI2V-5B (docs/wan22-decoder.md).
DIFFUSERS_CONFIG = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                        attn_scales=[], temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                        out_channels=12, patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16)


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Pure functions: no torch, no GPU (tested by bench/test_bench.py).
# ---------------------------------------------------------------------------------------------------------------
def workload_name(clip, world):
    return f"{clip}x{world}"


def parse_workload(s):
    """'f121' or 'f121x1' -> ('f121', 1); 'f481x4' -> ('f481', 4); only the seed's workloads (WORKLOADS)."""
    m = re.fullmatch(r"(f\d+)(?:x(\d+))?", s.strip())
    if not m or m.group(1) not in CLIPS:
        raise ValueError(f"unknown workload '{s}': expected one of {', '.join(CLIPS)} (optionally with x<world>)")
    name = workload_name(m.group(1), int(m.group(2) or 1))
    if name not in WORKLOADS:
        worlds = [w for c, w in WORKLOADS.values() if c == m.group(1)]
        raise ValueError(f"workload '{s}' is not one of the seed's: {m.group(1)} runs at worlds "
                         f"{', '.join(map(str, worlds))} ({', '.join(WORKLOADS)})")
    return WORKLOADS[name]


def workload_order(names):
    """Workload names (or bare clips) -> [(clip, world)] without repeats, in the seed's order (world 1 first, then
    each larger world, clips by length); raises ValueError on an unknown name."""
    got = {parse_workload(n) for n in names}
    rank = {cw: i for i, cw in enumerate(WORKLOADS.values())}
    return sorted(got, key=lambda cw: (cw[1], rank[cw]))


def plan_worlds(order, gpus):
    """Splits [(clip, world)] into those this machine runs and {name: reason} for those it skips: worlds larger than
    its GPU count."""
    run, skipped = [], {}
    for c, w in order:
        if w > gpus:
            skipped[workload_name(c, w)] = f"needs {w} GPUs; this machine has {gpus}"
        else:
            run.append((c, w))
    return run, skipped


def video_shape(T, h=LATENT_H, w=LATENT_W):
    return (1, 3, 4 * T - 3, 16 * h, 16 * w)


def decode_flops(T, h=LATENT_H, w=LATENT_W, z=Z_DIM, base=256):
    """FLOPs (2 per multiply-add) of the convolutions, the attention's matrix products and 1x1 convs of one decode of
    TI2V-5B's decoder, as docs/wan22-decoder.md counts them: latent frame 0 makes one frame at every stage, each
    later one 1, 2 and 4 frames after up_blocks 0, 1 (time_conv runs on those only). Norms and elementwise work are
    not counted. 64.7 TFLOP per later latent frame at 44x78."""
    c3, c2, c1 = 4 * base, 2 * base, base          # 1024, 512, 256 channels
    p0, p1, p2, p3 = h * w, 4 * h * w, 16 * h * w, 64 * h * w
    conv = lambda ci, co, k, px: 2.0 * ci * co * k * px  # noqa: E731

    def resblocks(ci, co, n, px):
        f = conv(ci, co, 27, px) + conv(co, co, 27, px) + (conv(ci, co, 1, px) if ci != co else 0.0)
        return f + (n - 1) * 2 * conv(co, co, 27, px)

    attention = conv(c3, 3 * c3, 1, p0) + conv(c3, c3, 1, p0) + 2 * 2.0 * p0 * p0 * c3

    def latent_frame(first):
        n1, n2 = (1, 1) if first else (2, 4)     # frames after up_blocks.0 / up_blocks.1
        f = conv(z, z, 1, p0) + conv(z, c3, 27, p0) + 2 * resblocks(c3, c3, 1, p0) + attention
        f += resblocks(c3, c3, 3, p0) + n1 * conv(c3, c3, 9, p1)                       # up_blocks.0
        f += n1 * resblocks(c3, c3, 3, p1) + n2 * conv(c3, c3, 9, p2)                  # up_blocks.1
        if not first:
            f += conv(c3, 2 * c3, 3, p0) + n1 * conv(c3, 2 * c3, 3, p1)                 # the time_convs
        f += n2 * (resblocks(c3, c2, 3, p2) + conv(c2, c2, 9, p3))                     # up_blocks.2
        f += n2 * (resblocks(c2, c1, 3, p3) + conv(c1, 12, 27, p3))                    # up_blocks.3, conv_out
        return f

    return latent_frame(True) + (T - 1) * latent_frame(False)


def min_bytes(T, h=LATENT_H, w=LATENT_W, weight_bytes=555_051_580 * 2):
    """The fewest bytes one decode moves: the weights, the latents and the video once, in bf16."""
    return weight_bytes + 2 * Z_DIM * T * h * w + 2 * math.prod(video_shape(T, h, w))


def bound_ms(flops, nbytes, tflops=PEAK_TFLOPS, bytes_per_s=PEAK_BYTES_PER_S, world=1):
    """The slower of the arithmetic spread over the world's GPUs at the tensor-core rate each and the bytes at one
    GPU's memory bandwidth (every rank reads all the weights), in ms."""
    return 1e3 * max(flops / (world * tflops * 1e12), nbytes / bytes_per_s)


def scaling_ratios(workloads):
    """{'<clip>x<W>': ms of <clip>x1 / ms of <clip>x<W>} for each clip timed at world 1 and at a world W > 1."""
    out = {}
    for name, (clip, world) in WORKLOADS.items():
        one = (workloads.get(workload_name(clip, 1)) or {}).get("ms")
        ms = (workloads.get(name) or {}).get("ms")
        if world > 1 and one and ms:
            out[name] = one / ms
    return out


def world_clocks(means):
    """Per-GPU mean SM clocks of a world's trials (rank order, None where unread) -> clock_mhz (rank 0's GPU),
    clock_mhz_ranks and world_clock_mhz [lowest, highest] (where every GPU was read)."""
    out = {"clock_mhz": means[0] if means else None, "clock_mhz_ranks": list(means)}
    if means and all(means):
        out["world_clock_mhz"] = [min(means), max(means)]
    return out


def clock_text(r):
    """', SM clock 1980 MHz' (and ', the world's GPUs 1900-1980 MHz' where they differ by 2% or more) or ''."""
    if not r.get("clock_mhz"):
        return ""
    text = f", SM clock {r['clock_mhz']:.0f} MHz"
    lo, hi = r.get("world_clock_mhz") or (None, None)
    if lo and hi and hi - lo >= 0.02 * r["clock_mhz"]:
        text += f", the world's GPUs {lo:.0f}-{hi:.0f} MHz"
    return text


def peak_above(samples, calls, mem0):
    """Our peak device memory on one GPU, in bytes: the highest NVML used-memory sample [(time, used)] inside each
    call window (start, stop, harness reserved bytes), less the device's use before prepare and the harness's growth
    since prepare; None without samples."""
    peaks = []
    for start, stop, harness in calls:
        got = [u for t, u in samples if start <= t <= stop and u is not None]
        if got and mem0.get("nvml") is not None:
            peaks.append(max(got) - mem0["nvml"] - (harness - mem0["reserved_after_prepare"]))
    return max(peaks) if peaks else None


def allowance(calib):
    """The check's allowance from the clip's calibration (diffusers bf16 vs fp32)."""
    return {"max_abs": min(2.0, 3.0 * calib["bf16_max_abs"]), "rms": 3.0 * calib["bf16_rms"]}


def verdict_of(nonfinite, outside, compared, numel, unmatched, max_abs, squares, allowed):
    """A check's result from its accumulated counts (see judge): d = out - ref where both are finite."""
    mse = squares / compared if compared else None
    rms = math.sqrt(mse) if compared else None
    passed = (nonfinite == 0 and outside == 0 and compared == numel and max_abs <= allowed["max_abs"]
              and rms is not None and rms <= allowed["rms"])
    c = {"passed": bool(passed), "nonfinite": nonfinite, "unmatched": unmatched, "outside": outside,
         "max_abs": max_abs if compared else None, "rms": rms,
         "psnr_db": (10 * math.log10(4 / mse) if mse else None),
         "max_allowed": allowed["max_abs"], "rms_allowed": allowed["rms"]}
    if compared and math.isfinite(allowed["max_abs"]) and allowed["max_abs"] > 0:
        c["max_share"] = max_abs / allowed["max_abs"]
    if compared and math.isfinite(allowed["rms"]) and allowed["rms"] > 0:
        c["rms_share"] = rms / allowed["rms"]
    return c


def verdict_text(c):
    """A check in a few words."""
    parts = []
    if c["nonfinite"]:
        parts.append(f"{c['nonfinite']} elements not finite (NaN: never written, or overflowed)")
    if c["outside"]:
        parts.append(f"{c['outside']} elements outside [-1, 1]")
    if c["max_abs"] is None:
        parts.append("no element to compare")
    else:
        parts.append(f"max |d| {c['max_abs']:.4g} of {c['max_allowed']:.4g} (x{c.get('max_share', 0):.2f})")
        parts.append(f"rms {c['rms']:.4g} of {c['rms_allowed']:.4g} (x{c.get('rms_share', 0):.2f})")
        parts.append(f"PSNR {c['psnr_db']:.1f} dB" if c["psnr_db"] is not None else "identical")
    return f"{'ok' if c['passed'] else 'FAIL'} ({', '.join(parts)})"


def trials_for(warm_s):
    return TRIALS if warm_s < LONG_CALL_S else LONG_TRIALS


def geomean(xs):
    xs = list(xs)
    if not xs or any(x is None or x <= 0 for x in xs):
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def gpu_slug(name):
    """'NVIDIA H200' -> 'h200'."""
    s = re.sub(r"^nvidia\s+", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def mangled_kernel_names(blob):
    """The last name component of every Itanium-mangled symbol in a binary's bytes (_Z18rmsnorm_kernelPK..,
    _ZN3w2211conv_kernelILi1EEEvv -> rmsnorm_kernel, conv_kernel): the kernels a library registers with the CUDA
    runtime are among them, which is how the audit knows our kernels by name."""
    names = set()
    for m in re.finditer(rb"_Z(N?)((?:\d+[A-Za-z_][A-Za-z0-9_]*)+)", blob):
        nested, s, i, parts = m.group(1), m.group(2), 0, []
        while i < len(s) and s[i:i + 1].isdigit():
            j = i
            while j < len(s) and s[j:j + 1].isdigit():
                j += 1
            n = int(s[i:j])
            ident = s[j:j + n]
            if n == 0 or len(ident) < n:
                break
            parts.append(ident)
            i = j + n
            if not nested:
                break
        if parts:
            names.add(parts[-1].decode("ascii", "replace"))
    return names


def kernel_base_name(name):
    """The function's own name from a demangled kernel name ('void ns::foo<1>(int)' -> 'foo')."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    cut = [i for i in (s.find("("), s.find("<")) if i >= 0]
    if cut:
        s = s[:min(cut)]
    return s.strip().split("::")[-1].strip()


# Groups of the audit: substrings of kernel names, strongest markers first. Ours is decided between the two tiers,
# so that our own kernel with "gemm" in a parameter type is still ours.
STRONG_MARKERS = [("NCCL", ("nccl",)), ("cuDNN", ("cudnn",)), ("cuBLAS", ("cublas", "nvjet")),
                  ("ATen", ("at::", "at_cuda_detail", "c10::"))]
WEAK_MARKERS = [("cuDNN", ("fprop", "dgrad", "wgrad", "implicit_convolve", "convolve_", "winograd", "nchwToNhwc",
                           "nhwcToNchw", "conv2d_c1_k1", "xmma_fprop")),
                ("cuBLAS", ("gemm", "gemv", "splitKreduce", "Kernel2", "cutlass")),
                ("ATen", ("elementwise_kernel", "reduce_kernel", "triton_", "CatArrayBatchedCopy", "cunn_",
                          "upsample", "im2col", "vol2col"))]
LIBRARY_GROUPS = ("cuBLAS", "cuDNN", "ATen")  # placeholders: none may run inside our decode


def classify_kernel(name, ours):
    """'ours', 'cuBLAS', 'cuDNN', 'ATen', 'NCCL' or 'other' for a kernel's (demangled) name; ours is the set of our
    library's kernel names (mangled_kernel_names of its binaries)."""
    low = name.lower()
    for group, keys in STRONG_MARKERS:
        if any(k.lower() in low for k in keys):
            return group
    base = kernel_base_name(name)
    if base.startswith("w22_") or base in ours:
        return "ours"
    for group, keys in WEAK_MARKERS:
        if any(k.lower() in low for k in keys):
            return group
    return "other"


def summarize_kernels(kernels, ours):
    """kernels: [(name, duration in us)] of one call -> the audit: per group launches and ms, the library launches
    and their share of the GPU time, and the kernels by GPU time."""
    groups, by_name = {}, {}
    for name, dur in kernels:
        g = classify_kernel(name, ours)
        e = groups.setdefault(g, {"launches": 0, "ms": 0.0})
        e["launches"] += 1
        e["ms"] += dur / 1e3
        k = by_name.setdefault((g, name), [0, 0.0])
        k[0] += 1
        k[1] += dur / 1e3
    total = sum(e["ms"] for e in groups.values())
    lib = sum(groups.get(g, {}).get("launches", 0) for g in LIBRARY_GROUPS)
    lib_ms = sum(groups.get(g, {}).get("ms", 0.0) for g in LIBRARY_GROUPS)
    top = sorted(([g, n, c, ms] for (g, n), (c, ms) in by_name.items()), key=lambda r: -r[3])
    return {"launches": len(kernels), "groups": groups, "library_kernels": lib,
            "library_share": (lib_ms / total if total else 0.0), "gpu_ms": total, "passed": lib == 0,
            "kernels": top[:40]}


def others_holding(questions, ours_pid):
    """How many processes besides this one held the GPU at any of the questions ([pids] per question, None when
    nvidia-smi could not say), or None when one could not be asked. Where nvidia-smi does not show our own pid
    (another PID namespace), one holder is taken to be us."""
    if not questions or any(q is None for q in questions):
        return None
    seen = set().union(*questions)
    return len(seen - {ours_pid}) if ours_pid in seen else max(0, len(seen) - 1)


def others_holding_world(questions, uuids, ours):
    """others_holding for a world's GPUs: questions are {uuid: pids} (gpu_holders_all) or None; ours the pids of
    the bench's processes (the ranks and this one). Where nvidia-smi shows none of ours on a GPU (another PID
    namespace), one holder of it is taken to be its rank."""
    if not questions or any(q is None for q in questions):
        return None
    total = 0
    for uuid in uuids:
        seen = set().union(*(q.get(uuid, set()) for q in questions))
        total += len(seen - set(ours)) if seen & set(ours) else max(0, len(seen) - 1)
    return total


def merge_reports(old, new):
    """One report from two runs: new's setup (the older ones kept in 'runs'), and per workload new's fields over
    old's, so that a run that made the diffusers side and another that timed ours make one record."""
    out = dict(old)
    runs = list(old.get("runs", []))
    if old.get("setup"):
        runs.append(old["setup"])
    out.update({k: v for k, v in new.items() if k not in ("workloads", "runs")})
    out["runs"] = runs
    w = {k: dict(v) for k, v in old.get("workloads", {}).items()}
    for k, v in new.get("workloads", {}).items():
        if k in w and "error" in w[k] and "error" not in v:
            del w[k]["error"]
        w.setdefault(k, {}).update(v)
    out["workloads"] = w
    return finalize(out)


def finalize(report):
    """Derived fields from the measured ones: gap, speedup per workload; the geomeans over the timed workloads."""
    timed = []
    for name, r in report.get("workloads", {}).items():
        if r.get("ms") and r.get("bound_ms"):
            r["gap"] = r["ms"] / r["bound_ms"]
        if r.get("ms") and r.get("bound_ms_measured"):
            r["gap_measured"] = r["ms"] / r["bound_ms_measured"]
        d = r.get("diffusers") or {}
        if r.get("ms") and d.get("ms"):
            r["speedup"] = d["ms"] / r["ms"]
        if r.get("timed"):
            timed.append(name)
    ws = report.get("workloads", {})
    world_of = lambda n: ws[n].get("world", 1)  # noqa: E731
    s = {"timed": sorted(timed, key=lambda n: (world_of(n), CLIPS.get(parse_clip(n), 0), n))}
    # diffusers runs on one GPU: the speedup over it is world 1's (at world 1 alone, every timed workload).
    one = [n for n in s["timed"] if world_of(n) == 1]
    if timed and all(ws[n].get("ms") for n in timed):
        s["geomean_ms"] = geomean(ws[n]["ms"] for n in timed)
        s["geomean_gap"] = geomean(ws[n].get("gap") for n in timed)
        s["geomean_speedup"] = geomean(ws[n].get("speedup") for n in one)
        clocks = [ws[n].get("clock_mhz") for n in timed]
        s["mean_clock_mhz"] = statistics.mean(clocks) if all(clocks) else None
    if one and all((ws[n].get("diffusers") or {}).get("ms") for n in one):
        s["geomean_diffusers_ms"] = geomean(ws[n]["diffusers"]["ms"] for n in one)
    worlds = sorted({world_of(n) for n in timed})
    if worlds != [1] and timed:
        # Per world, and over the nine of the issue when every one of them was timed.
        s["worlds"] = {}
        for w in worlds:
            names = [n for n in s["timed"] if world_of(n) == w]
            if all(ws[n].get("ms") for n in names):
                s["worlds"][str(w)] = {"timed": names, "geomean_ms": geomean(ws[n]["ms"] for n in names),
                                       "geomean_gap": geomean(ws[n].get("gap") for n in names)}
    if all((ws.get(n) or {}).get("ms") for n in TIMED_WORKLOADS):
        s["nine_geomean_ms"] = geomean(ws[n]["ms"] for n in TIMED_WORKLOADS)
        s["nine_geomean_gap"] = geomean(ws[n].get("gap") for n in TIMED_WORKLOADS)
    ratios = scaling_ratios(ws)
    if ratios:
        s["scaling"] = ratios
        s["scaling_targets"] = {n: {"target": t, "met": ratios[n] >= t} for n, t in SCALING_TARGETS.items()
                                if n in ratios}
    checked = [n for n, r in ws.items() if "check" in r]
    s["checked"] = len(checked)
    s["check_passed"] = sum(1 for n in checked if ws[n]["check"]["passed"] and not ws[n].get("agree_error"))
    s["audit_library_kernels"] = sum((r.get("audit") or {}).get("library_kernels", 0) for r in ws.values())
    s["errors"] = sorted(n for n, r in ws.items() if r.get("error"))
    report["summary"] = s
    return report


def parse_clip(name):
    return name.split("x")[0]


# ---------------------------------------------------------------------------------------------------------------
# The library through the package wan22vae, which binds its C API: FLOPs, synthetic data, the decode.
# ---------------------------------------------------------------------------------------------------------------
PACKAGE_DIR = os.path.join(ROOT, "python")


def package():
    """This checkout's package wan22vae (python/wan22vae, ahead of any installed copy), its library loaded where the
    package finds it ($W22_LIB, the package's folder, build/). Every call of the C API the bench makes goes through
    it, so that what is measured is the binding users call. Exits naming the reason where the package does not
    import or the library does not load: without them there is nothing to measure. Imported here, not at the top,
    so that report.py and the tests of the pure functions import bench without it."""
    if PACKAGE_DIR not in sys.path:
        sys.path.insert(0, PACKAGE_DIR)
    try:
        import wan22vae
        wan22vae.library_path()
    except Exception as e:  # noqa: BLE001 - whatever stops the import or the load is the message
        raise SystemExit(f"bench: the package wan22vae ({os.path.join(PACKAGE_DIR, 'wan22vae')}) cannot be used: "
                         f"{type(e).__name__}: {e}") from e
    return wan22vae


def flops_of(T):
    """The FLOPs of one decode of T latent frames at 44x78, and whose count it is: the library's (decode_flops above,
    the doc's count, is tested equal to it)."""
    return package().decode_flops(None, T, LATENT_H, LATENT_W), "w22_decode_flops"


class Ours:
    """Our decode behind the seed's interface: the package's prepare/run (wan22vae.protocol), with the bench's
    check of what prepare returns."""

    def __init__(self, w22):
        self.module = w22

    def describe(self):
        return f"package wan22vae ({self.module.__file__})"

    def prepare(self, weights, rank, world, pg):
        got = self.module.prepare(weights, rank, world, pg)
        if not isinstance(got, (list, tuple)):
            raise TypeError(f"prepare returned {type(got).__name__}, not a list of tensors")
        return list(got)

    def run(self, z, weights, rank, world, pg, out):
        return self.module.run(z, weights, rank, world, pg, out)

    def device_bytes(self):
        """What the library holds on the device for prepare's decoder (wan22vae.protocol.device_bytes)."""
        try:
            from wan22vae import protocol
            return int(protocol.device_bytes())
        except Exception:  # noqa: BLE001 - an optional figure: the record's library_device_gib stays empty
            return None

    def release(self):
        """Frees the decoders prepare opened in this process."""
        self.module.protocol.release()


def our_kernel_names(w22):
    """Our kernels' names, from our binaries: the library the package loaded, and any shared object in the
    package's folder."""
    folder = os.path.dirname(os.path.abspath(w22.__file__))
    paths = [os.path.abspath(w22.library_path())] + [os.path.join(folder, f) for f in os.listdir(folder) if ".so" in f]
    names, paths = set(), sorted(set(paths))
    for p in paths:
        try:
            with open(p, "rb") as f:
                names |= mangled_kernel_names(f.read())
        except OSError:
            pass
    return names, paths


# ---------------------------------------------------------------------------------------------------------------
# NVML: the SM clock and the used memory, read on a thread.
# ---------------------------------------------------------------------------------------------------------------
class NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    def __init__(self, uuid):
        self.ok = False
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            if self.lib.nvmlInit_v2() != 0:
                return
            self.handle = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode(), ctypes.byref(self.handle)) != 0:
                return
            self.ok = True
        except (OSError, AttributeError):
            pass

    def clock(self):
        mhz = ctypes.c_uint()
        ok = self.ok and self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(mhz)) == 0
        return mhz.value if ok and mhz.value else None

    def max_clock(self):
        mhz = ctypes.c_uint()
        ok = self.ok and self.lib.nvmlDeviceGetMaxClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(mhz)) == 0
        return mhz.value if ok else None

    def used(self):
        m = NvmlMemory()
        ok = self.ok and self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(m)) == 0
        return m.used if ok else None

    def energy_mj(self):
        """The GPU's total energy counter since the driver loaded, in mJ (Volta and later), or None."""
        e = ctypes.c_ulonglong()
        ok = self.ok and self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(e)) == 0
        return e.value if ok else None

    def power_mw(self):
        mw = ctypes.c_uint()
        ok = self.ok and self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw)) == 0
        return mw.value if ok else None

    def driver(self):
        buf = ctypes.create_string_buffer(96)
        ok = self.ok and self.lib.nvmlSystemGetDriverVersion(buf, 96) == 0
        return buf.value.decode() if ok else None


class Sampler:
    """(time.monotonic(), SM MHz, used bytes, energy counter mJ, power mW) every CLOCK_PERIOD_S on a thread of this
    process (ctypes and torch release the GIL while they wait on the device, so the thread runs during a call)."""

    def __init__(self, nvml):
        self.nvml, self.samples, self.done = nvml, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-nvml") if nvml.ok else None
        if self.thread:
            self.thread.start()

    def _run(self):
        while not self.done.wait(CLOCK_PERIOD_S):
            self.samples.append((time.monotonic(), self.nvml.clock(), self.nvml.used(), self.nvml.energy_mj(),
                                 self.nvml.power_mw()))

    def stop(self):
        self.done.set()
        if self.thread:
            self.thread.join()

    def within(self, windows):
        return [s for s in list(self.samples) if any(a <= s[0] <= b for a, b in windows)]

    def clock(self, windows):
        got = [s[1] for s in self.within(windows) if s[1]]
        return (statistics.mean(got) if got else None), (min(got) if got else None), (max(got) if got else None), \
            len(got)

    def energy(self, windows):
        """Issue 46's energy per call: the mean over the windows of the GPU's energy counter across each window (J),
        the counter read at the window's ends by linear interpolation between the samples around them (every
        CLOCK_PERIOD_S: under 1% of a decode of a second or more); and the mean power sampled inside them (W).
        (None, None) where NVML gives no counter. A window that ended after the newest sample waits for the next one
        (the sampler's period, a few at most): asked right after a call, as the diffusers trials' energy was, the
        counter's reading after the window's end did not exist yet and the figure came out None (session 35)."""
        end = max((b for _, b in windows), default=None)
        deadline = time.monotonic() + 5 * CLOCK_PERIOD_S
        thread = getattr(self, "thread", None)
        while (end is not None and thread and thread.is_alive() and time.monotonic() < deadline
               and not any(s[0] >= end and s[3] is not None for s in self.samples[-3:])):
            time.sleep(CLOCK_PERIOD_S / 4)
        pts = [(s[0], s[3]) for s in list(self.samples) if s[3] is not None]

        def at(t):
            for (t0, e0), (t1, e1) in zip(pts, pts[1:]):
                if t0 <= t <= t1:
                    return e0 + (e1 - e0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
            return None

        joules = []
        for a, b in windows:
            ea, eb = at(a), at(b)
            if ea is None or eb is None:
                return None, None
            joules.append((eb - ea) / 1e3)
        watts = [s[4] / 1e3 for s in self.within(windows) if s[4] is not None]
        return (statistics.mean(joules) if joules else None), (statistics.mean(watts) if watts else None)

    def peak_used(self, window):
        got = [s[2] for s in self.within([window]) if s[2] is not None]
        return max(got) if got else None


def gpu_holders(uuid):
    """The pids that hold this GPU now (nvidia-smi), or None when it cannot say."""
    try:
        got = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if got.returncode != 0:
        return None
    pids = set()
    for line in got.stdout.splitlines():
        gpu, _, pid = line.partition(",")
        if gpu.strip().lower().removeprefix("gpu-") == uuid and pid.strip().isdigit():
            pids.add(int(pid))
    return pids


# ---------------------------------------------------------------------------------------------------------------
# torch helpers: buffers at fresh addresses, the check, the audit.
# ---------------------------------------------------------------------------------------------------------------
class Pool:
    """A workload's buffers for one tensor: each call's at a fresh address, shifted by multiples of 256 bytes (the
    seed's)."""
    ALIGN, MAX_SHIFT = 256, 2048

    def __init__(self, shape, dtype, device, calls, seed):
        import random
        import torch
        rng = random.Random(seed)
        self.offsets = [0]
        for _ in range(calls - 1):
            self.offsets.append(self.offsets[-1] + rng.randint(1, self.MAX_SHIFT // self.ALIGN))
        self.shape, self.numel = tuple(shape), math.prod(shape)
        self.block = max(1, self.ALIGN // torch.empty(0, dtype=dtype).element_size())
        self.buffer = torch.empty(self.numel + self.offsets[-1] * self.block, dtype=dtype, device=device)
        self.calls = 0

    def next(self):
        start = self.offsets[self.calls] * self.block
        self.calls += 1
        return self.buffer[start:start + self.numel].view(self.shape)


def judge(out, ref_frames, allowed, device):
    """out (bf16 on the GPU) against a reference given as ref_frames(f0, f1) -> fp32 or bf16 [1, 3, f1-f0, H, W]
    (on the host or the GPU), in fp32 on the GPU, in chunks of frames, squares summed in fp64 (the seed's judge)."""
    import torch
    step = max(1, CHUNK_ELEMENTS // max(1, out[:, :, :1].numel()))
    nonfinite = outside = compared = unmatched = 0
    max_abs = squares = 0.0
    for f in range(0, out.shape[2], step):
        x = out[:, :, f:f + step].to(device, torch.float32)
        y = ref_frames(f, min(out.shape[2], f + step)).to(device, torch.float32)
        finite = torch.isfinite(x)
        nonfinite += int((~finite).sum())
        outside += int((x.abs() > 1).sum())
        both = finite & torch.isfinite(y)
        compared += int(both.sum())
        unmatched += int((~finite & torch.isfinite(y)).sum())
        d = torch.where(both, x - y, 0.0)
        max_abs = max(max_abs, float(d.abs().max()))
        squares += float(d.square().sum(dtype=torch.float64))
        del x, y, finite, both, d
    return verdict_of(nonfinite, outside, compared, out.numel(), unmatched, max_abs, squares, allowed)


def fingerprint(tensors):
    """Each tensor's bytes summed as integers: whether run() wrote the weights."""
    out = []
    for t in tensors:
        raw = t.detach().contiguous().view(-1).view(__import__("torch").uint8)
        try:
            raw = raw.view(__import__("torch").int32)
        except RuntimeError:
            pass
        out.append(int(raw.sum(dtype=__import__("torch").int64)))
    return out


def profile_call(fn, tmpdir):
    """Runs fn() once under torch.profiler with CUDA activities; its kernels as [(name, duration us)], read from the
    Chrome trace (stable across torch versions)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = os.path.join(tmpdir, f"trace-{os.getpid()}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.remove(path)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [(e.get("name", "?"), float(e.get("dur", 0.0))) for e in events
            if e.get("ph") == "X" and e.get("cat") == "kernel"]


def measure_gemm_tflops(device):
    """torch's bf16 matrix product 8192^3 on random data: 3 warm-ups, the median of 10 timed with events."""
    import torch
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    del a, b
    return 2.0 * n ** 3 / (statistics.median(times) * 1e-3) / 1e12


# ---------------------------------------------------------------------------------------------------------------
# Data: synthetic weights and latents (the library's generator, through the package), named and shaped by
# tools/synth.py's weight table.
# ---------------------------------------------------------------------------------------------------------------
def weight_table():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import synth
    return [(n, tuple(s)) for n, s, _, _ in synth.weight_table(synth.TI2V_5B)]


def make_weights(w22, seed, cache, device):
    """The 110 bf16 decoder tensors in diffusers' order and shapes, on the device; made once per seed into the
    cache as a bf16 safetensors file (w22_weights_synthetic, w22_weights_save)."""
    import torch
    from safetensors.torch import load_file
    path = os.path.join(cache, f"weights_s{seed}_bf16.safetensors")
    source = "cache"
    if not os.path.exists(path):
        w = w22.synthetic_weights(None, seed)
        try:
            w.save(path, "bf16")
        finally:
            w.free()
        source = "w22_weights_synthetic"
    sd = load_file(path)
    table = weight_table()
    out = []
    for name, shape in table:
        t = sd.get(name)
        if t is None:
            t = sd.get("vae." + name)
        if t is None:
            raise RuntimeError(f"{path}: no tensor {name}")
        if tuple(t.shape) != shape:
            if t.numel() != math.prod(shape):
                raise RuntimeError(f"{path}: {name} has shape {tuple(t.shape)}, expected {shape}")
            t = t.reshape(shape)
        out.append(t.to(device, torch.bfloat16).contiguous())
    return [n for n, _ in table], out, source


def make_latents(w22, seed, cache, device):
    """The synthetic T=121 clip [1, 48, 121, 44, 78] as bf16 on the device; every clip is its first T frames."""
    import numpy as np
    import torch
    path = os.path.join(cache, f"latents_s{seed}_T{FULL_T}.npy")
    source = "cache"
    if os.path.exists(path):
        z = np.load(path)
    else:
        z, source = w22.synthetic_latents(None, seed, FULL_T, LATENT_H, LATENT_W), "w22_latents_synthetic"
        np.save(path + ".tmp.npy", z)
        os.replace(path + ".tmp.npy", path)
    return torch.from_numpy(z).to(device, torch.bfloat16), source


# ---------------------------------------------------------------------------------------------------------------
# The diffusers side: references (fp32), calibration and the timed bf16 decode.
# ---------------------------------------------------------------------------------------------------------------
class Diffusers:
    def __init__(self, names, weights, device):
        import diffusers
        import torch
        from diffusers import AutoencoderKLWan
        diffusers.utils.logging.set_verbosity_error()  # its note on casting with to() at every dtype switch
        self.version, self.device = diffusers.__version__, device
        torch.manual_seed(0)
        with torch.device(device):
            vae = AutoencoderKLWan(**DIFFUSERS_CONFIG)
        vae.eval().requires_grad_(False)
        params = [(n, tuple(p.shape)) for n, p in vae.named_parameters()
                  if n.startswith(("post_quant_conv.", "decoder."))]
        ours = [(n, tuple(t.shape)) for n, t in zip(names, weights)]
        if params != ours:
            diff = [(a, b) for a, b in zip(params, ours) if a != b][:3]
            raise RuntimeError(f"diffusers' decoder parameters differ from the weight table: {diff} "
                               f"({len(params)} vs {len(ours)})")
        missing, unexpected = vae.load_state_dict({n: t.float() for n, t in zip(names, weights)}, strict=False)
        missing = [k for k in missing if k.startswith(("post_quant_conv.", "decoder."))]
        if missing or unexpected:
            raise RuntimeError(f"load_state_dict: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.vae, self.dtype = vae, torch.float32

    def to(self, dtype):
        # Lossless both ways on the decoder: its weights are bf16 values.
        if dtype != self.dtype:
            self.vae.to(dtype)
            self.dtype = dtype

    def decode(self, z, host_cache=False):
        """diffusers' decode of z in the current dtype. host_cache: its causal convs' cache (vae._feat_map: two frames
        of every causal conv's input, most of the memory at 4K with T >= 2) lives in host memory between the
        chunks; every decoder read of it moves it back itself (`.to(x.device)`), so the ops and their values are
        the same and only where the cache waits changes (sizes.py checks the bits against the plain decode)."""
        import torch
        if not host_cache:
            with torch.no_grad():
                return self.vae.decode(z.to(self.dtype)).sample
        vae, clear = self.vae, self.vae.clear_cache

        def clear_to_host():
            clear()
            vae._feat_map = HostCache(vae._feat_map)
        vae.clear_cache = clear_to_host
        try:
            with torch.no_grad():
                return vae.decode(z.to(self.dtype)).sample
        finally:
            del vae.clear_cache  # the class's method again


class HostCache(list):
    """A list whose tensors are copied to host memory when stored (diffusers' "Rep" marker and None stay)."""

    def __setitem__(self, i, v):
        if v is not None and not isinstance(v, str):
            v = v.to("cpu")
        super().__setitem__(i, v)


class RefStore:
    """fp32 reference videos on the host's disk under the cache (raw float32, C order), read back by frames."""

    def __init__(self, cache, key):
        self.cache, self.key = cache, key

    def path(self, clip):
        return os.path.join(self.cache, f"ref_{clip}_{self.key}.f32")

    def has(self, clip):
        return os.path.exists(self.path(clip))

    def save(self, clip, video):
        tmp = self.path(clip) + ".tmp"
        video.cpu().numpy().astype("float32", copy=False).tofile(tmp)
        os.replace(tmp, self.path(clip))

    def frames(self, clip):
        import numpy as np
        import torch
        shape = video_shape(CLIPS[clip])
        mm = np.memmap(self.path(clip), dtype=np.float32, mode="r", shape=shape)
        return lambda f0, f1: torch.from_numpy(np.array(mm[:, :, f0:f1]))  # a copy: writable, contiguous


def load_calibration(cache, key):
    try:
        with open(os.path.join(cache, f"calibration_{key}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save_calibration(cache, key, calib):
    path = os.path.join(cache, f"calibration_{key}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(calib, f, indent=1)
    os.replace(path + ".tmp", path)


def energy_text(joules, watts):
    """', 1702 J a call at 693 W' or ''."""
    return (f", {joules:.0f} J a call" + (f" at {watts:.0f} W" if watts else "")) if joules else ""


def timed_call(fn):
    import torch
    torch.cuda.synchronize()
    start = time.monotonic()
    r = fn()
    torch.cuda.synchronize()
    return r, start, time.monotonic()


def diffusers_phase(a, clips, names, weights, z_full, refs, calib, cache_key, sampler, report, save):
    """Per clip: the fp32 reference (unless cached), diffusers' bf16 decode (its warm-up is the calibration's decode)
    and, for timed clips, its trials and peak memory."""
    import torch
    dev = z_full.device
    t0 = time.monotonic()
    diff = Diffusers(names, weights, dev)
    report["setup"]["diffusers"] = diff.version
    log(f"diffusers {diff.version}: model built and loaded in {time.monotonic() - t0:.1f} s")
    for clip in clips:
        T = CLIPS[clip]
        # Its world-1 workload's record; a clip run only at worlds > 1 keeps its reference time under "clips".
        r = report["workloads"].get(workload_name(clip, 1))
        at_one = r is not None
        if r is None:
            r = report.setdefault("clips", {}).setdefault(clip, {})
        z = z_full[:, :, :T].contiguous()
        try:
            if a.check and not refs.has(clip):
                diff.to(torch.float32)
                video, s, e = timed_call(lambda: diff.decode(z))
                refs.save(clip, video)
                del video
                torch.cuda.empty_cache()
                r["reference_s"] = e - s
                log(f"{clip}: fp32 reference decoded in {e - s:.1f} s")
            want_calib = a.check and clip not in calib
            want_time = a.diffusers and clip in TIMED_CLIPS and a.time and at_one
            if not (want_calib or want_time):
                continue
            diff.to(torch.bfloat16)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            video, s, e = timed_call(lambda: diff.decode(z))
            warm = e - s
            d = {"warmup_ms": 1e3 * warm, "peak_gib": (torch.cuda.max_memory_allocated() - base) / GIB}
            if want_calib:
                c = judge(video, refs.frames(clip), {"max_abs": math.inf, "rms": math.inf}, dev)
                if c["nonfinite"] or c["outside"]:
                    raise RuntimeError(f"diffusers' bf16 decode of {clip} is not a valid video: {c}")
                calib[clip] = {"bf16_max_abs": c["max_abs"], "bf16_rms": c["rms"], "psnr_db": c["psnr_db"]}
                save_calibration(a.cache, cache_key, calib)
                log(f"{clip}: calibration (diffusers bf16 vs fp32): max |d| {c['max_abs']:.4g}, rms {c['rms']:.4g}, "
                    f"PSNR {c['psnr_db']:.1f} dB")
            del video
            torch.cuda.empty_cache()
            if want_time:
                trials, windows = [], []
                for _ in range(trials_for(warm)):
                    video, s, e = timed_call(lambda: diff.decode(z))
                    del video
                    trials.append(1e3 * (e - s))
                    windows.append((s, e))
                mhz = sampler.clock(windows)[0] if sampler else None
                joules, watts = sampler.energy(windows) if sampler else (None, None)
                d |= {"trials": trials, "ms": statistics.mean(trials), "min_ms": min(trials), "clock_mhz": mhz,
                      "energy_j": joules, "power_w": watts}
                r["diffusers"] = d
                log(f"{clip}: diffusers bf16 {d['ms']:.1f} ms (fastest {d['min_ms']:.1f}, warm-up "
                    f"{d['warmup_ms']:.0f}), peak {d['peak_gib']:.1f} GiB above the model"
                    + (f", SM clock {mhz:.0f} MHz" if mhz else "") + energy_text(joules, watts))
                torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - one clip's failure is reported and the run goes on
            r["diffusers_error"] = f"{type(e).__name__}: {e}"
            log(f"{clip}: diffusers side FAILED: {traceback.format_exc(limit=4)}")
            torch.cuda.empty_cache()
        save()
    del diff
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------------------
# Our decode: one workload.
# ---------------------------------------------------------------------------------------------------------------
def run_workload(a, clip, world, ours, weights, marks, pg, z_full, refs, calib, sampler, mem0, our_names, uuid,
                 rank=0, harness=None, world_gpus=None):
    """One workload on one rank. World 1 (harness None): the whole record, sampled by this process's sampler. A rank
    of a world > 1 (harness: the gloo group of the bench's barriers; world_gpus: [(pid, uuid)] of the ranks, this
    process's parent last): in step with the other ranks; rank 0's record, with the trial windows, every rank's call
    windows and memory baseline for the parent to read its NVML samples by ('windows', 'rank_calls', 'rank_mem0')."""
    import torch
    T = CLIPS[clip]
    dev = z_full.device
    multi = harness is not None
    if multi:
        import torch.distributed as dist
    timed = clip in TIMED_CLIPS and a.time
    audited = clip in TIMED_CLIPS and a.audit and world == 1
    calls = 1 + audited + (TRIALS if timed else 0)
    seed = list(CLIPS).index(clip)
    z0 = z_full[:, :, :T].contiguous()
    zs = Pool(z0.shape, z0.dtype, dev, calls, seed)
    outs = Pool(video_shape(T), torch.bfloat16, dev, calls, seed + 1) if rank == 0 else None
    res = {"clip": clip, "T": T, "world": world, "timed": clip in TIMED_CLIPS}
    problems, call_windows = [], []
    threads = threading.active_count()

    def arguments():
        z = zs.next()
        z.copy_(z0)
        out = outs.next().fill_(math.nan) if outs else torch.empty(0, dtype=torch.bfloat16, device=dev)
        return z, out

    def unchanged(z):
        if not torch.equal(z, z0) and "run() wrote its input z" not in problems:
            problems.append("run() wrote its input z")

    def call():
        z, out = arguments()
        torch.cuda.synchronize()
        if multi:
            dist.barrier(group=harness)
        held = torch.cuda.memory_reserved()
        start = time.monotonic()
        ours.run(z, weights, rank, world, pg, out)
        torch.cuda.synchronize()
        if multi:
            dist.barrier(group=harness)
        stop = time.monotonic()
        call_windows.append((start, stop, held))
        unchanged(z)
        return out, start, stop

    # The warm-up: the call checked (on rank 0, which holds the video).
    out, start, stop = call()
    warm = stop - start
    res["warmup_ms"] = 1e3 * warm
    allowed = None
    if rank != 0:
        pass
    elif a.check:
        if clip in calib and refs.has(clip):
            allowed = allowance(calib[clip])
            res["calibration"] = calib[clip]
            res["check"] = judge(out, refs.frames(clip), allowed, dev)
        else:
            res["check_skipped"] = "no reference or calibration (diffusers side failed or was not run)"
    else:
        res["check_skipped"] = "--no-check"
    first, worst = (out.clone() if calls > 1 and rank == 0 else None), 0.0
    if allowed is None:
        # Without a reference the later calls are still held to the bf16 tolerance of the doc's T=31 figure.
        allowed = allowance({"bf16_max_abs": 0.0288, "bf16_rms": 0.00491})
    torch.cuda.empty_cache()

    def agree(out, what):
        nonlocal worst
        if first is None:  # a rank other than 0: no video
            return
        c = judge(out, lambda f0, f1: first[:, :, f0:f1], allowed, dev)
        worst = max(worst, c["max_abs"] or 0.0)
        close = c["max_abs"] is None or (c["max_abs"] <= allowed["max_abs"] and c["rms"] <= allowed["rms"])
        if c["unmatched"] or not close:
            problems.append(f"{what}'s output does not agree with the checked call's: {verdict_text(c)}")

    if audited:
        z, out = arguments()
        holder = {}

        def once():
            holder["start"] = time.monotonic()
            ours.run(z, weights, 0, world, pg, out)

        kernels = profile_call(once, a.cache)
        unchanged(z)
        agree(out, "the audited call")
        res["audit"] = summarize_kernels(kernels, our_names)

    if timed and not multi:
        questions, trials, windows = [], [], []
        for k in range(trials_for(warm)):
            questions.append(gpu_holders(uuid))
            out, start, stop = call()
            trials.append(1e3 * (stop - start))
            windows.append((start, stop))
            agree(out, f"trial {k + 1}")
        questions.append(gpu_holders(uuid))
        mhz, lo, hi, n = sampler.clock(windows) if sampler else (None, None, None, 0)
        joules, watts = sampler.energy(windows) if sampler else (None, None)
        res |= {"trials": trials, "ms": statistics.mean(trials), "min_ms": min(trials), "clock_mhz": mhz,
                "clock_range_mhz": [lo, hi], "clock_samples": n, "energy_j": joules, "power_w": watts}
        held = others_holding(questions, os.getpid())
        if held:
            res["shared"] = held
    elif timed:
        # Every rank makes as many trials as rank 0 says (the seed's): the warm-ups differ a little.
        n = [trials_for(warm)]
        dist.broadcast_object_list(n, src=0, group=harness)
        questions, trials, windows = [], [], []
        for k in range(n[0]):
            if rank == 0:
                questions.append(gpu_holders_all())
            out, start, stop = call()
            trials.append(1e3 * (stop - start))
            windows.append((start, stop))
            agree(out, f"trial {k + 1}")
        if rank == 0:
            questions.append(gpu_holders_all())
            res |= {"trials": trials, "ms": statistics.mean(trials), "min_ms": min(trials), "windows": windows}
            held = others_holding_world(questions, [u for _, u in world_gpus[:world]], {p for p, _ in world_gpus})
            if held:
                res["shared"] = held
    if first is not None:
        res["agree_max_abs"] = worst

    # Memory: what NVML saw used during each call, less the harness's (torch's reserved memory at the call, above
    # what it held after prepare), less what the device held before prepare: our weights and workspace at peak.
    peaks = []
    for start, stop, held in ([] if multi else call_windows):
        used = sampler.peak_used((start, stop)) if sampler else None
        if used is not None and mem0["nvml"] is not None:
            peaks.append(used - mem0["nvml"] - (held - mem0["reserved_after_prepare"]))
    res["memory"] = {"peak_gib": (max(peaks) / GIB if peaks else None), "prepare_gib": mem0.get("prepare_gib"),
                     "library_device_gib": (ours.device_bytes() / GIB if ours.device_bytes() else None)}

    flops, source = flops_of(T)
    res |= {"flops": flops, "flops_source": source}
    if clip in TIMED_CLIPS:
        res["bound_ms"] = bound_ms(flops, min_bytes(T), world=world)
        if a.gemm_tflops:
            res["bound_ms_measured"] = bound_ms(flops, min_bytes(T), tflops=a.gemm_tflops, world=world)
    if fingerprint(weights) != marks:
        problems.append("run() wrote its weights")
    if threading.active_count() > threads:
        problems.append(f"run() started threads ({threading.active_count() - threads} more)")
    if multi:
        # What every rank found (z, weights, threads), its call windows and memory baseline: rank 0 reports them.
        mine = {"problems": problems, "calls": call_windows, "mem0": mem0, "threads": threading.active_count(),
                "prepare_gib": mem0.get("prepare_gib")}
        found = [None] * world
        dist.all_gather_object(found, mine, group=harness)
        problems = [f"rank {r}: {p}" for r, f in enumerate(found) for p in f["problems"]]
        res |= {"rank_calls": [f["calls"] for f in found], "rank_mem0": [f["mem0"] for f in found],
                "rank_threads": [f["threads"] for f in found]}
        res["memory"]["prepare_gib_ranks"] = [f["prepare_gib"] for f in found]
    if problems:
        res["agree_error"] = res["error"] = "; ".join(problems)
    del zs, outs, first
    return res


def show(name, r):
    line = f"{name:<7}"
    if r.get("ms"):
        line += f" {r['ms']:9.1f} ms (fastest {r['min_ms']:.1f}{clock_text(r)}{energy_text(r.get('energy_j'), r.get('power_w'))})"
        if r.get("bound_ms"):
            line += f" bound {r['bound_ms']:.0f} ms, gap x{r['ms'] / r['bound_ms']:.2f}"
        d = r.get("diffusers") or {}
        if d.get("ms"):
            line += f", diffusers bf16 {d['ms']:.0f} ms (x{d['ms'] / r['ms']:.2f})"
    elif r.get("warmup_ms"):
        line += f" warm-up {r['warmup_ms']:.1f} ms"
    if r.get("check"):
        line += " " + verdict_text(r["check"])
    elif r.get("check_skipped"):
        line += f" check skipped: {r['check_skipped']}"
    if not r.get("timed"):
        line += " (correctness only)"
    if r.get("audit"):
        au = r["audit"]
        line += (f" library kernels {au['library_kernels']} of {au['launches']}"
                 f" ({100 * au['library_share']:.0f}% of GPU time)")
    mem = r.get("memory") or {}
    if mem.get("peak_gib"):
        line += f", peak {mem['peak_gib']:.1f} GiB"
    if r.get("shared"):
        line += f" SHARED: {r['shared']} other process(es) held the GPU while it was timed"
    if r.get("error"):
        line += " ERROR: " + r["error"]
    log(line)


def gpu_holders_all():
    """{GPU UUID (lower case, without "GPU-"): pids that hold it} now (nvidia-smi), or None when it cannot say."""
    try:
        got = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if got.returncode != 0:
        return None
    out = {}
    for line in got.stdout.splitlines():
        gpu, _, pid = line.partition(",")
        if pid.strip().isdigit():
            out.setdefault(gpu.strip().lower().removeprefix("gpu-"), set()).add(int(pid))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Worlds > 1: one process per rank (torch.multiprocessing, spawn), this process watching them.
# ---------------------------------------------------------------------------------------------------------------
class WorldSampler:
    """(time.monotonic(), [SM MHz per GPU], [used bytes per GPU]) of a world's GPUs (rank order) every
    CLOCK_PERIOD_S, on a thread of this process: a rank inside run may hold its GIL for the whole call."""

    def __init__(self, uuids):
        self.nvmls = [Nvml(u) for u in uuids]
        self.samples, self.done = [], threading.Event()
        ok = any(n.ok for n in self.nvmls)
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-nvml-world") if ok else None
        if self.thread:
            self.thread.start()

    def _run(self):
        while not self.done.wait(CLOCK_PERIOD_S):
            self.samples.append((time.monotonic(), [n.clock() for n in self.nvmls], [n.used() for n in self.nvmls]))

    def stop(self):
        self.done.set()
        if self.thread:
            self.thread.join()

    def means(self, windows):
        inside = [mhz for t, mhz, _ in list(self.samples) if any(a <= t <= b for a, b in windows)]
        out = []
        for i in range(len(self.nvmls)):
            got = [m[i] for m in inside if m[i]]
            out.append(statistics.mean(got) if got else None)
        return out

    def rank0_range(self, windows):
        got = [m[0] for t, m, _ in list(self.samples) if m[0] and any(a <= t <= b for a, b in windows)]
        return ([min(got), max(got)] if got else [None, None]), len(got)

    def used(self, i):
        return [(t, u[i]) for t, _, u in list(self.samples)]


def rank_main(rank, world, port, cfg, conn):
    """The process of one rank of a world > 1 (see Worlds in the module docstring). It reports through conn:
    ("ready", rank, uuid, pid, prepare seconds, threads), ("start", workload) and ("result", workload, record) on
    rank 0, ("done", rank), or ("error", rank, workload or None, phase, traceback), after which it exits at once."""
    os.environ.update(NO_MULTICAST_ENV)
    phase, current = "start", None
    try:
        import types
        from datetime import timedelta
        import torch
        import torch.distributed as dist
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_grad_enabled(False)
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        timeout = timedelta(seconds=cfg["workload_timeout"])
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=dev, timeout=timeout)
        harness = dist.new_group(backend="gloo", timeout=timeout)
        pg = dist.group.WORLD
        phase = "load"
        os.environ["W22_LIB"] = cfg["lib"]  # the library the parent's package loaded
        w22 = package()
        ours = Ours(w22)
        phase = "weights"
        _, weights, _ = make_weights(w22, cfg["weights_seed"], cfg["cache"], dev)
        z_full, _ = make_latents(w22, cfg["latents_seed"], cfg["cache"], dev)
        uuid = str(torch.cuda.get_device_properties(dev).uuid).lower().removeprefix("gpu-")
        nvml = Nvml(uuid)
        phase = "prepare"
        torch.cuda.synchronize()
        mem0 = {"nvml": nvml.used(), "reserved": torch.cuda.memory_reserved()}
        start = time.monotonic()
        weights = ours.prepare(weights, rank, world, pg)
        torch.cuda.synchronize()
        prepare_s = time.monotonic() - start
        mem0["reserved_after_prepare"] = torch.cuda.memory_reserved()
        used = nvml.used()
        mem0["prepare_gib"] = (used - mem0["nvml"]) / GIB if used is not None and mem0["nvml"] else None
        ranks = [None] * world
        dist.all_gather_object(ranks, (os.getpid(), uuid), group=harness)
        world_gpus = ranks + [(os.getppid(), None)]
        conn.send(("ready", rank, uuid, os.getpid(), prepare_s, threading.active_count()))
        phase = "workload"
        marks = fingerprint(weights)
        a = types.SimpleNamespace(check=cfg["check"], time=cfg["time"], audit=False, cache=cfg["cache"],
                                  gemm_tflops=cfg["gemm_tflops"])
        refs, calib = RefStore(cfg["cache"], cfg["cache_key"]), cfg["calib"]
        for name in cfg["workloads"]:
            current = name
            clip, w = WORKLOADS[name]
            if rank == 0:
                conn.send(("start", name))
            res = run_workload(a, clip, w, ours, weights, marks, pg, z_full, refs, calib, None, mem0, set(), uuid,
                               rank=rank, harness=harness, world_gpus=world_gpus)
            if rank == 0:
                conn.send(("result", name, res))
            current = None
            torch.cuda.empty_cache()
        phase = "end"
        dist.barrier(group=harness)
        conn.send(("done", rank))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported, then this rank ends at once
        try:
            conn.send(("error", rank, current, phase, traceback.format_exc(limit=8)))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            # At once: NCCL's teardown would wait for the other ranks, which may wait for this one.
            os._exit(1)


def stop_ranks(procs, grace=0.0):
    """Ends the rank processes this bench started: those not out within `grace` seconds get SIGTERM, then SIGKILL
    after STOP_GRACE_SEC."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_SEC
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(10)


def exit_text(code):
    if code is None:
        return "did not exit"
    if code < 0:
        import signal
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def rank_record(res, world, sampler):
    """A rank 0 record of a world > 1 completed from this process's NVML samples: the SM clocks during the trials
    (rank 0's GPU, the range over the world's), and each rank's peak memory during its calls."""
    windows = res.pop("windows", None)
    rank_calls, rank_mem0 = res.pop("rank_calls", None), res.pop("rank_mem0", None)
    if sampler is None:
        return res
    if windows:
        res |= world_clocks(sampler.means(windows))
        (lo, hi), n = sampler.rank0_range(windows)
        res |= {"clock_range_mhz": [lo, hi], "clock_samples": n}
    if rank_calls and rank_mem0:
        peaks = [peak_above(sampler.used(r), [tuple(c) for c in calls], m0)
                 for r, (calls, m0) in enumerate(zip(rank_calls, rank_mem0))]
        mem = res.setdefault("memory", {})
        mem["peak_gib_ranks"] = [p / GIB if p is not None else None for p in peaks]
        known = [p for p in peaks if p is not None]
        mem["peak_gib"] = max(known) / GIB if known else None
    return res


def world_session(world, names, cfg, uuids, report, save, show_fn, start_timeout, workload_timeout,
                  target=rank_main):
    """One set of rank processes running these workloads of one world, in order; each record goes into report as it
    arrives. Returns the workloads it did not reach: after a failure at one (which gets the error with the failing
    rank's traceback), those after it; [] when every one ran, or when the failure came before any (every one gets
    it). target: the rank's function (rank_main; the tests pass stand-ins)."""
    import multiprocessing.connection as connection
    try:
        import torch.multiprocessing as tmp
    except ImportError:  # the tests, without torch: the same spawn context
        import multiprocessing as tmp
    os.environ.update(NO_MULTICAST_ENV)  # inherited by the spawned ranks (which set it again themselves)
    ctx = tmp.get_context("spawn")
    port = free_port()
    pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
    procs = [ctx.Process(target=target, args=(r, world, port, dict(cfg, workloads=names), pipes[r][1]),
                         daemon=True, name=f"bench-rank{r}") for r in range(world)]
    for p in procs:
        p.start()
    for _, send in pipes:
        send.close()
    receivers = {pipes[r][0]: r for r in range(world)}
    done, errors, finished, ready = set(), [], [], {}
    current, failure = None, None
    sampler = WorldSampler(uuids[:world])
    deadline = time.monotonic() + start_timeout
    started = time.monotonic()

    def handle(msg):
        nonlocal current, deadline
        kind = msg[0]
        if kind == "ready":
            _, rank, uuid, pid, prepare_s, threads = msg
            ready[rank] = {"uuid": uuid, "pid": pid, "prepare_s": prepare_s, "threads": threads}
            if len(ready) == world:
                report["setup"].setdefault("worlds", {})[str(world)] = {"ranks": [ready[r] for r in range(world)],
                                                                        "start_s": time.monotonic() - started}
                log(f"world {world}: {world} ranks up in {time.monotonic() - started:.0f} s, prepare "
                    + ", ".join(f"{ready[r]['prepare_s']:.1f}" for r in range(world)) + " s")
        elif kind == "start":
            current = msg[1]
            deadline = time.monotonic() + workload_timeout
        elif kind == "result":
            _, name, res = msg
            report["workloads"].setdefault(name, {}).update(rank_record(res, world, sampler))
            save()
            finished.append(name)
            current = None
            deadline = time.monotonic() + workload_timeout
            show_fn(name)
        elif kind == "error":
            errors.append(msg[1:])
        elif kind == "done":
            done.add(msg[1])

    try:
        while len(done) < world:
            # A rank that exited cleanly may still have its last messages in its pipe: it fails once that is read.
            bad = [(r, p.exitcode) for r, p in enumerate(procs) if r not in done and p.exitcode is not None
                   and (p.exitcode != 0 or pipes[r][0] not in receivers)]
            if bad:
                failure = "; ".join(f"rank {r} {exit_text(code)}" for r, code in bad)
                break
            left = deadline - time.monotonic()
            if left <= 0:
                failure = (f"timed out after {workload_timeout} s" if current else
                           f"the ranks did not start within {start_timeout} s")
                break
            waits = list(receivers) + [p.sentinel for p in procs if p.exitcode is None]
            for obj in connection.wait(waits, timeout=min(left, 5.0)):
                if obj in receivers:
                    try:
                        handle(obj.recv())
                    except (EOFError, OSError):
                        del receivers[obj]
        # What the other ranks still say, such as the error that made one exit.
        drain = time.monotonic() + 2.0
        while failure and receivers and time.monotonic() < drain:
            for obj in connection.wait(list(receivers), timeout=max(0.0, drain - time.monotonic())):
                try:
                    handle(obj.recv())
                except (EOFError, OSError):
                    del receivers[obj]
    finally:
        stop_ranks(procs, 0.0 if failure else STOP_GRACE_SEC)
        sampler.stop()
    if not failure:
        return []
    # The first error a rank reported says what failed (its traceback); else how a rank ended.
    if errors:
        rank, at, phase, text = errors[0]
        text = f"rank {rank} ({phase}): {text.strip()}"
    else:
        text = failure
    rest = [n for n in names if n not in finished]
    at = current or (errors and errors[0][1])
    if at not in rest:
        at = rest[0] if rest and finished else None
    if not rest:
        # After the last workload's record (at the closing barrier): the records stand, the failure is kept.
        report["setup"].setdefault("world_errors", {})[str(world)] = text
        log(f"world {world}: after its last workload: {text}")
        return []
    if not at:
        # Before the first workload: every one fails with it.
        for n in rest:
            report["workloads"].setdefault(n, {})["error"] = text
            save()
            show_fn(n)
        return []
    report["workloads"].setdefault(at, {})["error"] = text
    save()
    show_fn(at)
    return rest[rest.index(at) + 1:]


# ---------------------------------------------------------------------------------------------------------------
def git_commit(given):
    if given:
        return given
    try:
        got = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return got.stdout.strip() or None if got.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def decoder_paths():
    """The kernel paths of the decoders the package's protocol holds open ("hopper", "portable")."""
    from wan22vae import protocol
    return sorted({e.decoder.path for e in list(protocol._DECODERS.values())})


def rerun_world1(a, order1, ours, weights_run, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report, save,
                 key, annotate, say):
    """World 1's workloads again on the decoder `ours` holds now (a pass beside the default one: --portable,
    --memory-budget): each workload's check, trials, audit and memory as run_workload makes them, annotate(r) adding
    the pass's own fields, the speedup over diffusers' bf16 and vs_default_path (its ms / the default's), stored under
    the workload's `key`, saved and shown; say(name, r, rec) logs the pass's line."""
    import torch
    marks = fingerprint(weights_run)
    for c, w in order1:
        name = workload_name(c, w)
        try:
            r = run_workload(a, c, w, ours, weights_run, marks, pg, z_full, refs, calib, sampler, mem0, our_names, uuid)
        except Exception as e:  # noqa: BLE001 - the workload fails, the next one runs
            r = {"error": f"{type(e).__name__}: {e}"}
            log(f"{name} {key}: FAILED: {traceback.format_exc(limit=6)}")
        annotate(r)
        rec = report["workloads"][name]
        d = rec.get("diffusers") or {}
        if r.get("ms") and d.get("ms"):
            r["speedup"] = d["ms"] / r["ms"]
        if r.get("ms") and rec.get("ms"):
            r["vs_default_path"] = r["ms"] / rec["ms"]
        rec[key] = r
        torch.cuda.empty_cache()
        final = save()
        show(f"{name}:{key}", {**final["workloads"][name][key], "timed": rec.get("timed"), "diffusers": d})
        say(name, r, rec)


def portable_pass(a, order1, ours, weights, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report, save,
                  wino=None):
    """--portable: world 1's workloads again on a decoder of the portable kernels (W22_KERNELS=portable at its open,
    issue 45), beside the GPU's own path's in the same run: the same check, trials, audit and memory; each record
    under the workload's "portable" (wino N: W22_WINOGRAD=N too, under "portable_wN"), with the path the decoder
    took and the speedup over diffusers' bf16."""
    import torch
    ours.release()  # the default path's decoder goes first: one decoder's memory at a time
    torch.cuda.empty_cache()
    key = "portable" if wino is None else f"portable_w{wino}"
    saved = {k: os.environ.get(k) for k in ("W22_KERNELS", "W22_WINOGRAD")}
    os.environ["W22_KERNELS"] = "portable"
    if wino is not None:
        os.environ["W22_WINOGRAD"] = str(wino)
    try:
        weights_run = ours.prepare(weights, 0, 1, pg)
        torch.cuda.synchronize()
        paths = decoder_paths()
        log(f"{key}: the decoder runs {', '.join(paths)}" + (f", W22_WINOGRAD={wino}" if wino is not None else ""))

        def annotate(r):
            r["path"] = ",".join(paths)
            if wino is not None:
                r["w22_winograd"] = wino

        def say(name, r, rec):
            if r.get("vs_default_path"):
                log(f"{name}: {key} {r['ms']:.1f} ms, x{r['vs_default_path']:.2f} the default path's "
                    f"{rec['ms']:.1f} ms" + (f", x{r['speedup']:.2f} over diffusers bf16" if r.get("speedup") else ""))

        rerun_world1(a, order1, ours, weights_run, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report,
                     save, key, annotate, say)
    finally:
        ours.release()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def budget_pass(a, order1, ours, weights, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report, save):
    """--memory-budget SIZE (issue 46): world 1's workloads again on a decoder opened under that work-memory budget
    (wan22vae.protocol.set_memory_budget), beside the default plan's in the same run: the same check, trials, audit
    and memory; each record under the workload's "budget", with the budget in bytes, the library's work memory after
    the trials (its device bytes less what it held after prepare: the weights), the speedup over diffusers' bf16 and
    vs_default_path (its ms / the default plan's). Its check's error figures should equal the default plan's (the
    budget's promise: the same bits; tests/cuda_budget.c compares the videos themselves)."""
    import torch
    from wan22vae import protocol
    from wan22vae.decoder import parse_size
    budget = parse_size(a.memory_budget, "--memory-budget")
    ours.release()  # the default plan's decoder goes first: one decoder's memory at a time
    torch.cuda.empty_cache()
    protocol.set_memory_budget(budget)
    try:
        weights_run = ours.prepare(weights, 0, 1, pg)
        torch.cuda.synchronize()
        held = ours.device_bytes()  # the weights: the workspace is made at the first decode
        log(f"budget: a decoder under a work-memory budget of {budget / GIB:.3f} GiB")

        def annotate(r):
            r["memory_budget_bytes"] = budget
            now = ours.device_bytes()
            if held is not None and now is not None:
                r["library_work_gib"] = (now - held) / GIB
                r["within_budget"] = now - held <= budget

        def say(name, r, rec):
            if r.get("ms"):
                log(f"{name}: under {budget / GIB:.2f} GiB {r['ms']:.1f} ms"
                    + (f", x{r['vs_default_path']:.2f} the default plan's {rec['ms']:.1f} ms"
                       if r.get("vs_default_path") else "")
                    + (f", work {r['library_work_gib']:.3f} GiB" if r.get("library_work_gib") is not None else ""))

        rerun_world1(a, order1, ours, weights_run, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report,
                     save, "budget", annotate, say)
    finally:
        ours.release()
        protocol.set_memory_budget(None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", nargs="*", default=list(WORKLOADS),
                   help="workloads <clip>x<world> (a bare clip is x1); default: every one this machine has the GPUs "
                        f"for ({', '.join(WORKLOADS)})")
    p.add_argument("--no-check", dest="check", action="store_false", help="no fp32 references, no check")
    p.add_argument("--no-time", dest="time", action="store_false", help="correctness only: no trials")
    p.add_argument("--no-audit", dest="audit", action="store_false", help="no call under torch.profiler")
    p.add_argument("--no-diffusers", dest="diffusers", action="store_false", help="do not time diffusers' bf16")
    p.add_argument("--no-ours", dest="ours", action="store_false",
                   help="only the diffusers side (references, calibration, diffusers' times)")
    p.add_argument("--no-gemm", dest="gemm", action="store_false", help="do not measure the bf16 GEMM rate")
    p.add_argument("--pg", choices=("nccl", "none"), default="nccl",
                   help="the process group passed to prepare/run (world 1: NCCL over 127.0.0.1, else None)")
    p.add_argument("--lib", help="the libwan22vae.so the package loads (sets W22_LIB); default: the package's "
                   "search, $W22_LIB, the package's folder, build/")
    p.add_argument("--weights-seed", type=int, default=1)
    p.add_argument("--latents-seed", type=int, default=1)
    p.add_argument("--cache", default="/tmp/w22bench", help="weights, latents, references, calibration")
    p.add_argument("--commit", help="the git commit measured (the device copy has no .git)")
    p.add_argument("--json", help="results file (default bench/results/<date>-<gpu>.json)")
    p.add_argument("--merge", help="a results JSON of an earlier command of the same run to merge into this one")
    p.add_argument("--kernels", action="store_true", help="list the audited calls' kernels")
    p.add_argument("--portable", action="store_true",
                   help="world 1 also on the portable kernels (W22_KERNELS=portable), recorded under 'portable'")
    p.add_argument("--portable-winograd", type=int, nargs="*", default=[], metavar="N",
                   help="with --portable: a pass more per N on the portable kernels with W22_WINOGRAD=N (the 3x3x3 "
                        "convs of N channels and up as Winograd), recorded under 'portable_wN'")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="world 1 also under a work-memory budget (bytes or 2.5G, 2560M: powers of 1024; issue 46), "
                        "recorded under 'budget': its time, check, peak and the library's work memory")
    p.add_argument("--start-timeout", type=float, default=SESSION_START_SEC,
                   help="worlds > 1: seconds for the ranks to start (NCCL, weights, prepare) before they are stopped")
    p.add_argument("--workload-timeout", type=float, default=WORKLOAD_SEC,
                   help="worlds > 1: seconds for one workload before its ranks are stopped")
    a = p.parse_args(argv)

    try:
        order = workload_order(a.workload)
    except ValueError as e:
        p.error(str(e))
    if a.lib:
        # The package passes over a W22_LIB that does not exist: a --lib that does not is refused here instead.
        if not os.path.isfile(a.lib):
            p.error(f"--lib {a.lib}: no such file")
        os.environ["W22_LIB"] = os.path.abspath(a.lib)
    w22 = package()
    if a.memory_budget:  # refused now, not after the default plan's workloads
        try:
            w22.decoder.parse_size(a.memory_budget, "--memory-budget")
        except w22.Error as e:
            p.error(str(e))

    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    if not torch.cuda.is_available():
        sys.exit("bench: no CUDA device")
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    gpus = torch.cuda.device_count()
    order, skipped = plan_worlds(order, gpus)
    os.makedirs(a.cache, exist_ok=True)
    props = torch.cuda.get_device_properties(dev)
    uuid = str(props.uuid).lower().removeprefix("gpu-")
    nvml = Nvml(uuid)
    now = datetime.datetime.now(datetime.timezone.utc)
    setup = {"date": now.strftime("%Y-%m-%d"), "time_utc": now.isoformat(timespec="seconds"), "gpu": props.name,
             "gpu_uuid": uuid, "sms": props.multi_processor_count, "memory_gib": props.total_memory / GIB,
             "driver": nvml.driver(), "max_sm_clock_mhz": nvml.max_clock(), "torch": torch.__version__,
             "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
             "commit": git_commit(a.commit), "argv": sys.argv[1:] if argv is None else argv,
             # the library's switches set for this run (W22_*: docs/PERF.md), which its defaults may not match
             "w22_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("W22_") and k != "W22_LIB"},
             "weights_seed": a.weights_seed, "latents_seed": a.latents_seed, "data": "synthetic (docs/synthetic.md)",
             "peak_tflops": PEAK_TFLOPS, "peak_bytes_per_s": PEAK_BYTES_PER_S,
             "skipped": [k for k, v in (("check", a.check), ("time", a.time), ("audit", a.audit),
                                        ("diffusers", a.diffusers), ("ours", a.ours)) if not v]}
    if gpus > 1 or skipped:
        setup["gpus"] = gpus
    if skipped:
        setup["skipped_workloads"] = skipped
    report = {"setup": setup, "workloads": {}}
    json_path = a.json or os.path.join(HERE, "results", f"{setup['date']}-{gpu_slug(props.name)}.json")
    old = None
    if a.merge:
        with open(a.merge) as f:
            old = json.load(f)

    def save():
        out = merge_reports(old, report) if old else finalize(json.loads(json.dumps(report)))
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(json_path + ".tmp", json_path)
        return out

    log(f"{props.name} ({uuid}), driver {setup['driver']}, max SM clock {setup['max_sm_clock_mhz']} MHz, torch "
        f"{torch.__version__} (CUDA {torch.version.cuda}), commit {setup['commit']}"
        + (f", {gpus} GPUs" if gpus > 1 else ""))
    for name, why in skipped.items():
        log(f"{name}: skipped: {why}")
    if not order:
        save()
        log(f"nothing to run; results: {json_path}")
        return 0
    sampler = Sampler(nvml)
    setup["lib"] = os.path.abspath(w22.library_path())

    if a.gemm and a.time:
        a.gemm_tflops = measure_gemm_tflops(dev)
        setup["gemm_tflops"] = a.gemm_tflops
        log(f"bf16 GEMM 8192^3: {a.gemm_tflops:.0f} TFLOP/s (the bound uses {PEAK_TFLOPS:.0f})")
    else:
        a.gemm_tflops = None

    t0 = time.monotonic()
    names, weights, wsource = make_weights(w22, a.weights_seed, a.cache, dev)
    z_full, zsource = make_latents(w22, a.latents_seed, a.cache, dev)
    setup |= {"weights_source": wsource, "latents_source": zsource}
    log(f"weights ({wsource}) and latents ({zsource}) ready in {time.monotonic() - t0:.1f} s")
    clips = sorted({c for c, _ in order}, key=CLIPS.get)
    order1 = [(c, w) for c, w in order if w == 1]
    worlds = sorted({w for _, w in order if w > 1})
    cache_key = f"w{a.weights_seed}-z{a.latents_seed}"
    refs, calib = RefStore(a.cache, cache_key), load_calibration(a.cache, cache_key)
    for c, w in order:
        report["workloads"][workload_name(c, w)] = {"clip": c, "T": CLIPS[c], "world": w, "timed": c in TIMED_CLIPS}
    save()

    need_diffusers = any((a.check and (not refs.has(c) or c not in calib)) or
                         (a.diffusers and a.time and c in TIMED_CLIPS and (c, 1) in order1) for c in clips)
    if need_diffusers:
        try:
            import diffusers  # noqa: F401
            diffusers_phase(a, clips, names, weights, z_full, refs, calib, cache_key, sampler, report, save)
        except Exception as e:  # noqa: BLE001
            setup["diffusers_error"] = f"{type(e).__name__}: {e}"
            log(f"diffusers side FAILED: {traceback.format_exc(limit=4)}")
            torch.cuda.empty_cache()
    if a.check:
        for c, w in order:
            if c in calib:
                report["workloads"][workload_name(c, w)]["calibration"] = calib[c]

    def show_saved(name):
        show(name, save()["workloads"][name])

    if a.ours and not order1:
        setup["ours"] = Ours(w22).describe()
    if a.ours and order1:
        pg = None
        try:
            ours = Ours(w22)
            setup["ours"] = ours.describe()
            log(f"ours: {ours.describe()}")
            if a.pg == "nccl":
                try:
                    import torch.distributed as dist
                    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                            world_size=1, device_id=dev)
                    pg = dist.group.WORLD
                except Exception as e:  # noqa: BLE001
                    setup["pg"] = f"None (NCCL init failed: {e})"
            setup.setdefault("pg", "NCCL world 1" if pg is not None else "None")
            our_names, paths = our_kernel_names(w22)
            setup["audit_names"] = f"{len(our_names)} names from {', '.join(paths) or 'nothing'}"
            torch.cuda.synchronize()
            mem0 = {"nvml": nvml.used(), "reserved": torch.cuda.memory_reserved()}
            start = time.monotonic()
            weights_run = ours.prepare(weights, 0, 1, pg)
            torch.cuda.synchronize()
            setup["prepare_s"] = time.monotonic() - start
            setup["kernels_path"] = ",".join(decoder_paths())  # "hopper" or "portable" (W22_KERNELS, the GPU)
            mem0["reserved_after_prepare"] = torch.cuda.memory_reserved()
            used = nvml.used()
            mem0["prepare_gib"] = (used - mem0["nvml"]) / GIB if used is not None and mem0["nvml"] else None
            marks = fingerprint(weights_run)
            log(f"prepare: {setup['prepare_s']:.1f} s")
        except Exception as e:  # noqa: BLE001 - recorded for every workload; the diffusers side stays
            text = f"{type(e).__name__}: {e}"
            setup["load_error"] = text
            log(f"ours: FAILED to load: {traceback.format_exc(limit=6)}")
            for c, w in order1:
                report["workloads"][workload_name(c, w)]["error"] = text
            ours = None
        for c, w in (order1 if ours else []):
            name = workload_name(c, w)
            try:
                r = run_workload(a, c, w, ours, weights_run, marks, pg, z_full, refs, calib, sampler, mem0,
                                 our_names, uuid)
            except Exception as e:  # noqa: BLE001 - the workload fails, the next one runs
                r = {"error": f"{type(e).__name__}: {e}"}
                log(f"{name}: FAILED: {traceback.format_exc(limit=6)}")
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001 - a broken context fails the next workloads too, each on its own
                    pass
            report["workloads"][name].update(r)
            torch.cuda.empty_cache()
            final = save()
            show(name, final["workloads"][name])
            if a.kernels and r.get("audit"):
                for g, n, k, ms in r["audit"]["kernels"][:25]:
                    log(f"   [{g:<6}] {ms:9.2f} ms x{k:<6} {n[:110]}")
        for wino in ([None] + list(a.portable_winograd) if ours and a.portable else []):
            portable_pass(a, order1, ours, weights, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report,
                          save, wino)
        if ours and a.memory_budget:
            budget_pass(a, order1, ours, weights, pg, z_full, refs, calib, sampler, mem0, our_names, uuid, report,
                        save)
        if ours and worlds:
            ours.release()  # world 1's decoder leaves GPU 0 before rank 0 comes
        if pg is not None:
            import torch.distributed as dist
            dist.destroy_process_group()
    if a.ours and worlds:
        uuids = [str(torch.cuda.get_device_properties(i).uuid).lower().removeprefix("gpu-")
                 for i in range(max(worlds))]
        cfg = {"lib": setup["lib"], "weights_seed": a.weights_seed, "latents_seed": a.latents_seed,
               "cache": a.cache, "cache_key": cache_key, "calib": calib, "check": a.check, "time": a.time,
               "gemm_tflops": a.gemm_tflops, "workload_timeout": a.workload_timeout}
        torch.cuda.empty_cache()
        for w in worlds:
            todo = [workload_name(c, ww) for c, ww in order if ww == w]
            log(f"world {w}: starting {w} ranks for {', '.join(todo)}")
            while todo:
                todo = world_session(w, todo, cfg, uuids, report, save, show_saved, a.start_timeout,
                                     a.workload_timeout)
    if not a.ours:
        for c, w in order:
            name = workload_name(c, w)
            flops, source = flops_of(CLIPS[c])
            r = report["workloads"][name]
            r |= {"flops": flops, "flops_source": source}
            if c in TIMED_CLIPS:
                r["bound_ms"] = bound_ms(flops, min_bytes(CLIPS[c]), world=w)

    sampler.stop()
    final = save()
    s = final["summary"]
    if s.get("geomean_ms"):
        log(f"geomean {s['geomean_ms']:.1f} ms over {len(s['timed'])} timed workloads, gap x{s['geomean_gap']:.2f}"
            + (f", speedup over diffusers bf16 x{s['geomean_speedup']:.2f}" if s.get("geomean_speedup") else "")
            + (f", mean SM clock {s['mean_clock_mhz']:.0f} MHz" if s.get("mean_clock_mhz") else ""))
    for w, g in (s.get("worlds") or {}).items():
        log(f"world {w}: geomean {g['geomean_ms']:.1f} ms over {len(g['timed'])}, gap x{g['geomean_gap']:.2f}")
    if s.get("nine_geomean_ms"):
        log(f"geomean over the nine timed workloads {s['nine_geomean_ms']:.1f} ms, gap to the bound "
            f"x{s['nine_geomean_gap']:.2f}")
    for name, ratio in (s.get("scaling") or {}).items():
        t = SCALING_TARGETS.get(name)
        log(f"scaling {parse_clip(name)}x1 / {name}: x{ratio:.2f}"
            + (f" (target x{t:.2f}: {'met' if ratio >= t else 'NOT met'})" if t else ""))
    log(f"correctness: ok at {s['check_passed']} of {s['checked']} workloads checked; library kernels in audited "
        f"calls: {s['audit_library_kernels']}" + (f"; errors at {', '.join(s['errors'])}" if s["errors"] else ""))
    log(f"results: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
