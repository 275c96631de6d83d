#!/usr/bin/env python3
"""The Wan2.1 VAE's benchmark (issue 44): the VAE of Wan2.1, Wan2.2 A14B and Qwen-Image (diffusers'
AutoencoderKLWan with its default config: 16 latent channels, 8x, no patchify), decoded by this checkout's package
and library against diffusers 0.42.1 in the same run, with bench.py's protocol and helpers:

- workloads (latents [1, 16, T, h, w] from the library's generator, weights too: docs/synthetic.md, seeds 1):
    w480      832x480x81   T = 21 at 60 x 104
    w720      1280x720x81  T = 21 at 90 x 160   (the issue's target: >= 2.5x diffusers bf16, <= 4 GiB with weights)
    w720f121  1280x720x121 T = 31 at 90 x 160
    quick     832x480x9    T = 3 at 60 x 104    (--quick: this one alone, one trial; a smoke run of everything)
- check: our first call (the warm-up, through the seed's prepare/run: wan22vae.protocol) against diffusers' fp32
  decode (TF32 off) of the same bf16 latents and weights: finite, in [-1, 1], max|d| <= min(2, 3 x bf16_max_abs),
  rms <= 3 x bf16_rms, the bf16 figures being diffusers' own bf16 decode against its fp32 one (made in this run);
  every later call bitwise equal to the first; z and the weights unwritten.
- timing: 3 trials after the warm-up (2 when it took 1.5 s or more), wall clock between device syncs; diffusers'
  bf16 decode timed the same way in the same run (its warm-up is the calibration decode); speedup = theirs / ours.
- memory: ours = NVML's peak used memory during prepare and our calls less the device's use before prepare (the
  weights' layouts, the workspace, the library's scratch; the harness's z, out and bf16 weights are allocated
  before); also the library's own count (wan22vae.protocol.device_bytes). diffusers': torch's peak allocation
  during its decode above the loaded bf16 model and the latents.
- audit: one more call under torch.profiler: library kernels (cuBLAS, cuDNN, ATen) inside our decode must be none.

On the device (one GPU; diffusers from the wheels in .whl as bench/README.md says, same prefix as bench.py's):

    python3 bench/wan21.py --quick --json $OUT/w21q.json                      ~1 min
    python3 bench/wan21.py --commit $C --json $OUT/w21.json                    ~5 min (all three workloads)

--no-check skips the fp32 decodes (the later calls still equal the first), --no-diffusers diffusers' timing.

--memory-budget SIZE (issue 46; bytes or 2.5G, 2560M: powers of 1024; or `target`: issue 44's 4 GiB less the
library's weights, as prepare leaves them): after the default plan, each workload runs again on a decoder opened
under that work-memory budget: its first call must give the default plan's bits (a budget keeps its chunks and
kernels and moves causal caches to pinned host memory), then the same trials; the record's "budget" holds the
budget, ms, the ratio to the default plan's time, NVML's peak with the weights and whether it is within 4 GiB.

    python3 bench/wan21.py --workload w720 --no-check --memory-budget target --json $OUT/w21b.json   ~2 min

--bands N (issue 44; default 0, the whole frame): every decoder of ours opened as a band decode in N bands of
latent rows (wan22vae.protocol.set_bands; a budget's too), checked against diffusers' fp32 as the default is (within
bf16 rounding of the whole frame, not its bits); the record's "bands" says which, next to the memory budget's.

    python3 bench/wan21.py --workload w720 --bands 2 --json $OUT/w21-bands.json
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (its helpers: the package, NVML sampling, the judge, the audit)

WORKLOADS = {  # name: (T, h, w)
    "w480": (21, 60, 104),
    "w720": (21, 90, 160),
    "w720f121": (31, 90, 160),
    "quick": (3, 60, 104),
}
DEFAULT = ["w480", "w720", "w720f121"]
SEED = 1
TARGET_SPEEDUP, TARGET_GIB = 2.5, 4.0  # issue 44, at w720


def wan21_names_and_weights(w22, device):
    """The library's synthetic Wan2.1 weights: names and bf16 tensors on the GPU, in diffusers' order (108)."""
    import torch
    w = w22.synthetic_weights(w22.wan21_config(), SEED)
    try:
        sd = w.state_dict("f32")
    finally:
        w.free()
    names = list(sd)
    return names, [sd[n].to(device, torch.bfloat16).contiguous() for n in names]


class Diffusers21:
    """diffusers' AutoencoderKLWan with its default config (the Wan2.1 VAE), holding our synthetic weights."""

    def __init__(self, names, weights, device):
        import diffusers
        import torch
        from diffusers import AutoencoderKLWan
        diffusers.utils.logging.set_verbosity_error()
        self.version = diffusers.__version__
        torch.manual_seed(0)
        with torch.device(device):
            vae = AutoencoderKLWan()
        vae.eval().requires_grad_(False)
        params = [(n, tuple(p.shape)) for n, p in vae.named_parameters()
                  if n.startswith(("post_quant_conv.", "decoder."))]
        ours = [(n, tuple(t.shape)) for n, t in zip(names, weights)]
        if params != ours:
            raise RuntimeError(f"diffusers' Wan2.1 decoder parameters differ from the library's table: "
                               f"{[(a, b) for a, b in zip(params, ours) if a != b][:3]} ({len(params)} vs {len(ours)})")
        missing, unexpected = vae.load_state_dict({n: t.float() for n, t in zip(names, weights)}, strict=False)
        missing = [k for k in missing if k.startswith(("post_quant_conv.", "decoder."))]
        if missing or unexpected:
            raise RuntimeError(f"load_state_dict: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.vae, self.dtype = vae, torch.float32

    def to(self, dtype):
        if dtype != self.dtype:  # lossless: the weights are bf16 values
            self.vae.to(dtype)
            self.dtype = dtype

    def decode(self, z):
        import torch
        with torch.no_grad():
            return self.vae.decode(z.to(self.dtype)).sample


def timed(fn):
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, time.perf_counter() - t0


def run_workload(a, w22, name, names, weights, device, nvml, sampler, our_names, report):
    import torch
    T, h, w = WORKLOADS[name]
    cfg = w22.wan21_config()
    F, H, W = w22.video_shape(cfg, T, h, w)
    flops = w22.decode_flops(cfg, T, h, w)
    r = {"T": T, "latent": [h, w], "video": [F, H, W], "flops": flops, "bands": a.bands}
    report["workloads"][name] = r
    B.log(f"== {name}: latents [1, 16, {T}, {h}, {w}] -> video {W}x{H}x{F} ({flops / 1e12:.1f} TFLOP)"
          + (f", ours in {a.bands} bands" if a.bands > 1 else ""))
    z = torch.from_numpy(w22.synthetic_latents(cfg, SEED, T, h, w)).to(device, torch.bfloat16)
    ref = calib = None
    theirs = None
    if not a.no_check or not a.no_diffusers:
        theirs = Diffusers21(names, weights, device)
    if not a.no_check:
        tf = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            ref, s = timed(lambda: theirs.decode(z.float()))
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf
        B.log(f"   diffusers fp32 (reference, TF32 off): {s:.1f} s")
        r["diffusers_fp32_s"] = s
    if theirs is not None:
        theirs.to(torch.bfloat16)
        model_bytes = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        b16, warm = timed(lambda: theirs.decode(z))
        peak = torch.cuda.max_memory_allocated() - model_bytes
        if ref is not None:
            d = b16.float() - ref
            calib = {"bf16_max_abs": float(d.abs().max()), "bf16_rms": float(d.square().mean().sqrt())}
            del d
            r["calibration"] = calib
        del b16
        if not a.no_diffusers:
            times = []
            for _ in range(1 if a.quick else B.trials_for(warm)):
                out, s = timed(lambda: theirs.decode(z))
                del out
                times.append(s)
            r["diffusers_bf16_ms"] = 1e3 * sum(times) / len(times)
            r["diffusers_bf16_trials_ms"] = [1e3 * t for t in times]
            r["diffusers_peak_gib"] = peak / B.GIB
            B.log(f"   diffusers bf16: {r['diffusers_bf16_ms']:.0f} ms (warm-up {warm:.1f} s), peak above the model "
                  f"{peak / B.GIB:.2f} GiB")
        theirs.vae.to("cpu")
        del theirs
        torch.cuda.empty_cache()

    # ours, through the seed's interface
    out = torch.full((1, 3, F, H, W), float("nan"), dtype=torch.bfloat16, device=device)
    marks, zmark = B.fingerprint(weights), B.fingerprint([z])
    torch.cuda.synchronize()
    used0 = nvml.used()
    t_prep = time.monotonic()
    got, s_prep = timed(lambda: w22.prepare(weights, 0, 1, None))
    assert got is weights
    windows = [(t_prep, time.monotonic())]
    t0 = time.monotonic()
    _, warm = timed(lambda: w22.run(z, weights, 0, 1, None, out))
    windows.append((t0, time.monotonic()))
    first = out.clone()
    r["ours_prepare_s"], r["ours_warmup_s"] = s_prep, warm
    if ref is not None:
        allowed = B.allowance(calib)
        c = B.judge(out, lambda f0, f1: ref[:, :, f0:f1], allowed, device)
        r["check"] = c
        B.log(f"   check against diffusers fp32: {B.verdict_text(c)}")
        del ref
        torch.cuda.empty_cache()
    times, same = [], True
    for _ in range(1 if a.quick else B.trials_for(warm)):
        out.fill_(float("nan"))
        t0 = time.monotonic()
        _, s = timed(lambda: w22.run(z, weights, 0, 1, None, out))
        windows.append((t0, time.monotonic()))
        times.append(s)
        same = same and torch.equal(out, first)
    r["ours_ms"] = 1e3 * sum(times) / len(times)
    r["ours_trials_ms"] = [1e3 * t for t in times]
    r["trials_equal_first"] = bool(same)
    r["weights_unwritten"] = B.fingerprint(weights) == marks
    r["z_unwritten"] = B.fingerprint([z]) == zmark
    peaks = [p for p in (sampler.peak_used(wdw) for wdw in windows) if p is not None]
    r["ours_peak_gib"] = (max(peaks) - used0) / B.GIB if peaks and used0 is not None else None
    lib_bytes = w22.protocol.device_bytes()
    r["library_device_gib"] = lib_bytes / B.GIB
    r["tflops"] = flops / (r["ours_ms"] / 1e3) / 1e12
    if "diffusers_bf16_ms" in r:
        r["speedup"] = r["diffusers_bf16_ms"] / r["ours_ms"]
    peak_txt = f"{r['ours_peak_gib']:.2f} GiB" if r["ours_peak_gib"] is not None else "? (no NVML)"
    B.log(f"   ours: {r['ours_ms']:.0f} ms ({r['tflops']:.0f} TFLOP/s; warm-up {warm:.2f} s, prepare {s_prep:.1f} s), "
          f"peak with the weights {peak_txt} (the library holds {r['library_device_gib']:.2f} GiB)"
          + (f"; speedup x{r['speedup']:.2f} over diffusers bf16" if "speedup" in r else ""))
    if not same or not r["weights_unwritten"] or not r["z_unwritten"]:
        B.log(f"   FAIL: trials equal to the first {same}, weights unwritten {r['weights_unwritten']}, z unwritten "
              f"{r['z_unwritten']}")
    if not a.no_audit:
        kernels = B.profile_call(lambda: w22.run(z, weights, 0, 1, None, out), tempfile.gettempdir())
        audit = B.summarize_kernels(kernels, our_names)
        audit.pop("kernels", None)
        r["audit"] = audit
        B.log(f"   audit: {audit['launches']} kernels, library kernels {audit['library_kernels']} "
              f"({'ok' if audit['passed'] else 'FAIL'})")
    w22.protocol.release()
    if a.memory_budget:
        r["budget"] = budget_run(a, w22, weights, z, out, first, r["ours_ms"], nvml, sampler)
    del out, first, z
    torch.cuda.empty_cache()
    ok = (r.get("check", {"passed": True})["passed"] and same and r["weights_unwritten"] and r["z_unwritten"]
          and r.get("audit", {"passed": True})["passed"] and r.get("budget", {"passed": True})["passed"])
    r["passed"] = bool(ok)
    if name == "w720" and "speedup" in r:
        r["targets"] = {"speedup": TARGET_SPEEDUP, "peak_gib": TARGET_GIB,
                        "speedup_met": r["speedup"] >= TARGET_SPEEDUP,
                        "memory_met": r["ours_peak_gib"] is not None and r["ours_peak_gib"] <= TARGET_GIB}
        t = r["targets"]
        B.log(f"   targets: speedup >= {TARGET_SPEEDUP}: {'met' if t['speedup_met'] else 'NOT met'}; peak <= "
              f"{TARGET_GIB} GiB: {'met' if t['memory_met'] else 'NOT met'}")


def budget_run(a, w22, weights, z, out, first, default_ms, nvml, sampler):
    """--memory-budget: the workload again on a decoder opened under the budget (wan22vae.protocol's
    set_memory_budget), beside the default plan's in this run: the first call's video must be the default plan's bits
    (first), later calls equal to it; time, the ratio to the default's, NVML's peak with the weights."""
    import torch
    torch.cuda.synchronize()
    used0 = nvml.used()
    t_prep = time.monotonic()
    w22.prepare(weights, 0, 1, None)  # the default plan's decoder was released: this one opens with the budget
    weights_bytes = w22.protocol.device_bytes()
    if a.memory_budget == "target":
        budget = int(TARGET_GIB * B.GIB) - weights_bytes
    else:
        budget = w22.decoder.parse_size(a.memory_budget, "--memory-budget")
    w22.protocol.release()
    w22.protocol.set_memory_budget(budget)
    r = {"memory_budget_bytes": budget, "bands": a.bands, "weights_gib": weights_bytes / B.GIB}
    try:
        w22.prepare(weights, 0, 1, None)
        windows = [(t_prep, time.monotonic())]
        out.fill_(float("nan"))
        t0 = time.monotonic()
        _, warm = timed(lambda: w22.run(z, weights, 0, 1, None, out))
        windows.append((t0, time.monotonic()))
        r["default_bits"] = bool(torch.equal(out, first))
        times, same = [], True
        for _ in range(1 if a.quick else B.trials_for(warm)):
            out.fill_(float("nan"))
            t0 = time.monotonic()
            _, s = timed(lambda: w22.run(z, weights, 0, 1, None, out))
            windows.append((t0, time.monotonic()))
            times.append(s)
            same = same and torch.equal(out, first)
        r["ms"] = 1e3 * sum(times) / len(times)
        r["trials_ms"] = [1e3 * t for t in times]
        r["vs_default"] = r["ms"] / default_ms
        peaks = [p for p in (sampler.peak_used(wdw) for wdw in windows) if p is not None]
        r["peak_gib"] = (max(peaks) - used0) / B.GIB if peaks and used0 is not None else None
        r["library_device_gib"] = w22.protocol.device_bytes() / B.GIB
        r["within_target_gib"] = r["peak_gib"] is not None and r["peak_gib"] <= TARGET_GIB
        r["passed"] = r["default_bits"] and same
        peak_txt = f"{r['peak_gib']:.2f} GiB" if r["peak_gib"] is not None else "? (no NVML)"
        B.log(f"   under a budget of {budget / B.GIB:.3f} GiB: {r['ms']:.0f} ms (x{r['vs_default']:.2f} the default "
              f"plan's), peak with the weights {peak_txt} (<= {TARGET_GIB} GiB: "
              f"{'met' if r['within_target_gib'] else 'NOT met'}); the default plan's bits {r['default_bits']}, "
              f"trials equal {same}")
    except Exception as e:  # a budget below the floor: the library's message, recorded
        r["error"], r["passed"] = str(e), False
        B.log(f"   under a budget of {budget / B.GIB:.3f} GiB: FAILED: {e}")
    finally:
        w22.protocol.release()
        w22.protocol.set_memory_budget(None)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", nargs="*", choices=sorted(WORKLOADS), help=f"default: {' '.join(DEFAULT)}")
    ap.add_argument("--quick", action="store_true", help="the quick workload alone, one trial each")
    ap.add_argument("--no-check", action="store_true", help="no fp32 reference (no check against diffusers)")
    ap.add_argument("--no-diffusers", action="store_true", help="no diffusers timing")
    ap.add_argument("--no-audit", action="store_true")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--json", default=None, help="the results JSON (default bench/results/<date>-<gpu>-wan21.json)")
    ap.add_argument("--memory-budget", metavar="SIZE",
                    help="each workload also under a work-memory budget (bytes or 2.5G, 2560M; 'target': 4 GiB less "
                         "the weights), recorded under 'budget': time, ratio to the default plan, peak, bits")
    ap.add_argument("--bands", type=int, default=0, metavar="N",
                    help="our decoders as a band decode in N bands of latent rows (2..64; 0 or 1: the whole frame, "
                         "the default), recorded as 'bands'")
    a = ap.parse_args(argv)
    names_wl = ["quick"] if a.quick else (a.workload or DEFAULT)
    if not 0 <= a.bands <= 64:  # the library's range, refused before any work
        raise SystemExit(f"wan21.py: --bands {a.bands}: expected 0 or 1 (the whole frame) or 2..64")
    w22 = B.package()
    w22.protocol.set_bands(a.bands)  # every decoder prepare opens from now on, a budget's included
    if a.memory_budget and a.memory_budget != "target":  # refused now, not after the default plan's workloads
        try:
            w22.decoder.parse_size(a.memory_budget, "--memory-budget")
        except Exception as e:
            raise SystemExit(f"wan21.py: {e}")
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("wan21.py: no CUDA GPU visible to torch")
    if not w22.cuda_available():
        raise SystemExit(f"wan21.py: the library cannot use the GPU: {w22.cuda_unavailable_reason()}")
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    uuid = str(props.uuid).lower().removeprefix("gpu-")
    nvml = B.Nvml(uuid)
    our_names, _ = B.our_kernel_names(w22)
    report = {"setup": {"bench": "wan21", "gpu": props.name, "commit": a.commit, "torch": torch.__version__,
                        "bands": a.bands,
                        "library": w22.library_path(), "host": platform.node(),
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
              "workloads": {}}
    try:
        import diffusers
        report["setup"]["diffusers"] = diffusers.__version__
    except ImportError:
        if not (a.no_check and a.no_diffusers):
            raise SystemExit("wan21.py: diffusers is not importable (install it, or --no-check --no-diffusers)")
    B.log(f"wan21 bench on {props.name}, torch {torch.__version__}, library {w22.library_path()}")
    names, weights = wan21_names_and_weights(w22, device)
    sampler = B.Sampler(nvml)
    try:
        for name in names_wl:
            run_workload(a, w22, name, names, weights, device, nvml, sampler, our_names, report)
    finally:
        sampler.stop()
    done = list(report["workloads"].values())
    report["passed"] = all(r.get("passed") for r in done)
    sp = [r["speedup"] for r in done if "speedup" in r]
    if sp:
        report["geomean_speedup"] = math.exp(sum(math.log(x) for x in sp) / len(sp))
        B.log(f"geomean speedup over diffusers bf16: x{report['geomean_speedup']:.2f}")
    B.log(f"wan21 bench: {'PASSED' if report['passed'] else 'FAILED'}")
    path = a.json or os.path.join(B.ROOT, "bench", "results",
                                  f"{datetime.date.today()}-{B.gpu_slug(props.name)}-wan21.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    B.log(f"wrote {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
