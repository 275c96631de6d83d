#!/usr/bin/env python3
"""One forward of Wan2.2 TI2V-5B's transformer (diffusers' WanTransformer3DModel, random bf16 weights made as
from_pretrained(torch_dtype=bf16) keeps them: the _keep_in_fp32_modules in float32), side by side in one run:

    eager     diffusers 0.42.1's own forward
    fused     the same with wan22vae.diffusers.enable_transformer (src/dit/: norms, modulation, RoPE, residuals)
    compile   torch.compile of diffusers' transformer (the second anchor; its compile time reported), where it runs:
              regional (diffusers' compile_repeated_blocks, the default) or --compile-mode full

per size (704x1280x121: 31 x 22 x 40 = 27,280 tokens; 480x832x81: 21 x 15 x 26 = 8,190), each: the median of
--iters timed forwards (CUDA events, after a warm-up), the peak memory (torch.cuda.max_memory_allocated over a
forward, less what the weights and inputs hold before it), and a torch.profiler breakdown of one forward's kernel
time into GEMMs, attention, ours (w22_dit_*) and the rest (elementwise, norms, copies: what the fusions replace).
The rest's time per block, at the bandwidth of a device-to-device copy measured in the same run, gives the bytes
it moves at least (issue 43 counted ~28 GB a block at 27,280 tokens for eager, ~4 GB fused). --check-fp32 also runs
a float32 copy of the transformer (TF32 off) at the first size and reports each mode's error against it (the
project's rule: fused within 3x the error of eager bf16).

    python3 bench/dit.py --quick --json $OUT/dit-quick.json                 # smoke test: 2 blocks, tiny sizes, ~1 min
    python3 bench/dit.py --commit $(git rev-parse HEAD) --json $OUT/dit.json          # the full run (both sizes,
                                                                  # eager, fused, compile; ~3-4 min on an H100)
    python3 bench/dit.py --sizes 704x1280x121 --no-compile --no-profile --iters 1 --check-fp32 --json ...
                                                                  # the accuracy at full size (~1.5 min)

Per size it reports, besides each mode's time, peak and profile, the ratios issue 43's targets name: fused vs eager
(speedup_vs_eager), fused vs compile without its compile step (speedup_vs_compile: compile's median / fused's),
the time outside GEMMs and attention cut (outside_cut_vs_eager), peak over the weights vs eager's (peak_vs_eager),
and which targets they meet ("targets").

Writes a JSON: the GPU's name, its SM clock during the timed forwards (nvidia-smi samples) and the maximum, torch,
diffusers and CUDA versions, the commit, and per size and mode the timings, memory and profile.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

TI2V_5B = dict(patch_size=(1, 2, 2), num_attention_heads=24, attention_head_dim=128, in_channels=48, out_channels=48,
               text_dim=4096, freq_dim=256, ffn_dim=14336, num_layers=30, cross_attn_norm=True, eps=1e-6,
               rope_max_seq_len=1024)
GEMM_WORDS = ("gemm", "cutlass", "nvjet", "xmma", "cublas", "sm90_", "sm80_", "s16816", "wgmma", "splitk")
ATTN_WORDS = ("flash", "fmha", "attention", "attn", "mha", "sdpa", "cudnn_generated_fort_native_sdpa")


class ClockSampler:
    """The GPU's SM clock (MHz) every 0.5 s from nvidia-smi while on; None where nvidia-smi cannot say."""

    def __init__(self, index):
        self.index, self.samples, self.on, self.thread = index, [], False, None

    def _read(self):
        try:
            out = subprocess.run(["nvidia-smi", "-i", str(self.index), "--query-gpu=clocks.sm,clocks.max.sm",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
            a, b = (float(x) for x in out.stdout.strip().split(","))
            return a, b
        except Exception:
            return None

    def start(self):
        self.on, self.samples = True, []

        def loop():
            while self.on:
                r = self._read()
                if r:
                    self.samples.append(r)
                time.sleep(0.5)
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self):
        self.on = False
        if self.thread:
            self.thread.join()
        return self.summary()

    def summary(self):
        if not self.samples:
            return {"sm_clock_mhz": None, "max_sm_clock_mhz": None}
        return {"sm_clock_mhz": statistics.mean(s[0] for s in self.samples),
                "max_sm_clock_mhz": self.samples[0][1]}


def git_commit(given):
    if given:
        return given
    try:
        got = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if got.returncode == 0:
            return got.stdout.strip()
    except Exception:
        pass
    return os.environ.get("GIT_COMMIT") or "unknown (pass --commit)"


def make_transformer(torch, cfg, dtype, seed):
    """Random weights on the GPU; bf16 with the _keep_in_fp32_modules in float32, as from_pretrained leaves them."""
    from diffusers import WanTransformer3DModel
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            m = WanTransformer3DModel(**cfg).eval()
    finally:
        torch.set_default_dtype(old)
    if dtype != torch.float32:
        keep = set(m._keep_in_fp32_modules)
        for name, mod in m.named_modules():
            if keep & set(name.split(".")):
                mod.float()
        for name, p in m.named_parameters():
            if keep & set(name.split(".")):
                p.data = p.data.float()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def parse_size(s):
    h, w, f = (int(x) for x in s.lower().split("x"))
    return h, w, f


def make_inputs(torch, cfg, size, dtype, seed):
    """latents [1, C, T, h, w] for a video of H x W x F (the VAE's 16x spatial, 4x temporal), the per-token timestep
    of TI2V-5B's pipeline (expand_timesteps: the first latent frame at 0, the rest at t), text embeddings [1, 512,
    text_dim]."""
    H, W, F = size
    T, h, w = (F - 1) // 4 + 1, H // 16, W // 16
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(1, cfg["in_channels"], T, h, w, device="cuda", generator=g).to(dtype)
    pt, ph, pw = cfg["patch_size"]
    L = (T // pt) * (h // ph) * (w // pw)
    ts = torch.full((1, T // pt, h // ph, w // pw), 700.0, device="cuda")
    ts[:, 0] = 0.0
    ts = ts.reshape(1, L)
    enc = torch.randn(1, 512, cfg["text_dim"], device="cuda", generator=g).to(dtype)
    return x, ts, enc, L


def forward(model, inputs):
    x, ts, enc, _ = inputs
    return model(x, ts, enc, return_dict=False)[0]


def timed(torch, fn, iters, sampler):
    torch.cuda.synchronize()
    times = []
    sampler.start()
    try:
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
    finally:
        clocks = sampler.stop()
    return {"ms": statistics.median(times), "ms_all": times, **clocks}


def peak_memory(torch, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del out
    return {"peak_gib": peak / 2**30, "peak_over_base_gib": (peak - base) / 2**30, "base_gib": base / 2**30}


def classify(name):
    n = name.lower()
    if n.startswith("void w22_dit") or "w22_dit_" in n:
        return "ours"
    if any(w in n for w in ATTN_WORDS):
        return "attention"
    if any(w in n for w in GEMM_WORDS):
        return "gemm"
    return "other"


def profile(torch, fn, blocks):
    """One forward under torch.profiler: kernel time by class, and the top kernels of "other" and "ours"."""
    from torch.profiler import ProfilerActivity, profile as tprofile
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by_class, kernels = {"gemm": 0.0, "attention": 0.0, "ours": 0.0, "other": 0.0}, {}
    for e in prof.events():
        dev_type = getattr(e, "device_type", None)
        if dev_type is None or "CUDA" not in str(dev_type):
            continue
        us = getattr(e, "device_time", None)
        if us is None:
            us = getattr(e, "cuda_time", 0.0)
        c = classify(e.name)
        by_class[c] += us / 1e3
        k = kernels.setdefault(e.name, [c, 0, 0.0])
        k[1] += 1
        k[2] += us / 1e3
    total = sum(by_class.values())
    top = sorted(kernels.items(), key=lambda kv: -kv[1][2])
    return {"kernel_ms": total, "by_class_ms": by_class,
            "outside_gemm_attention_ms": by_class["ours"] + by_class["other"],
            "outside_gemm_attention_ms_per_block": (by_class["ours"] + by_class["other"]) / blocks,
            "top_other": [{"name": n[:160], "calls": v[1], "ms": v[2]} for n, v in top if v[0] == "other"][:15],
            "top_ours": [{"name": n[:160], "calls": v[1], "ms": v[2]} for n, v in top if v[0] == "ours"][:6]}


def copy_bandwidth(torch):
    """GB/s of a 1 GiB device-to-device copy (read + write counted), the bytes-per-second the rest's time is
    converted at."""
    a = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        b.copy_(a)
    e1.record()
    torch.cuda.synchronize()
    gbps = 2 * 10 * 2**30 / (e0.elapsed_time(e1) * 1e-3) / 1e9
    del a, b
    return gbps


def errors(out, ref):
    d = (out.float() - ref.float()).flatten()
    return {"max_abs": float(d.abs().max()), "rms": float(d.pow(2).mean().sqrt()),
            "ref_rms": float(ref.float().pow(2).mean().sqrt())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke test: 2 blocks, sizes 128x128x9 and 96x160x5, "
                   "1 timed forward, no torch.compile unless --compile")
    p.add_argument("--sizes", default=None, help="HxWxF,... (default 704x1280x121,480x832x81)")
    p.add_argument("--blocks", type=int, default=None, help="transformer blocks (default 30; --quick 2)")
    p.add_argument("--iters", type=int, default=None, help="timed forwards per mode (default 3; --quick 1)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--compile", action="store_true", help="run torch.compile in --quick too")
    p.add_argument("--compile-mode", choices=("regional", "full"), default="regional",
                   help="regional: diffusers' compile_repeated_blocks (each block compiled once; the default); "
                   "full: torch.compile of the whole transformer")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--check-fp32", action="store_true", help="errors against a float32 transformer (first size)")
    p.add_argument("--commit", help="the git commit measured (the device copy has no .git)")
    p.add_argument("--json", help="where to write the results")
    a = p.parse_args(argv)

    import torch
    import diffusers
    import wan22vae
    import wan22vae.diffusers as wd
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg = dict(TI2V_5B)
    cfg["num_layers"] = a.blocks or (2 if a.quick else 30)
    sizes = [parse_size(s) for s in (a.sizes or ("128x128x9,96x160x5" if a.quick else
                                                    "704x1280x121,480x832x81")).split(",")]
    iters = a.iters or (1 if a.quick else 3)
    do_compile = (not a.no_compile) and (a.compile or not a.quick)
    dev = torch.cuda.current_device()
    sampler = ClockSampler(dev)
    setup = {"gpu": torch.cuda.get_device_name(dev), "capability": list(torch.cuda.get_device_capability(dev)),
             "torch": torch.__version__, "cuda": torch.version.cuda, "diffusers": diffusers.__version__,
             "commit": git_commit(a.commit), "argv": sys.argv[1:] if argv is None else argv,
             "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()},
             "library": wan22vae.library_path(), "copy_gbps": copy_bandwidth(torch)}
    print(f"dit bench: {setup['gpu']}, torch {setup['torch']}, diffusers {setup['diffusers']}, "
          f"{cfg['num_layers']} blocks, copy {setup['copy_gbps']:.0f} GB/s, commit {setup['commit']}", flush=True)
    model = make_transformer(torch, cfg, torch.bfloat16, 0)
    results = []
    doc = {"setup": setup, "results": results}

    def save(doc):  # after every mode: a run cut short by a time limit keeps what it measured
        if a.json:
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json + ".tmp", "w") as fh:
                json.dump(doc, fh, indent=1)
            os.replace(a.json + ".tmp", a.json)
    for si, size in enumerate(sizes):
        inputs = make_inputs(torch, cfg, size, torch.bfloat16, 1 + si)
        L = inputs[3]
        rec = {"size": "x".join(map(str, size)), "tokens": L, "modes": {}}
        results.append(rec)
        outs = {}
        with torch.no_grad():
            for mode in ("eager", "fused", "compile"):
                if mode == "compile" and not do_compile:
                    continue
                r = {}
                try:
                    if mode == "fused":
                        ok = wd.enable_transformer(model)
                        r["enabled"] = ok
                        if not ok:
                            r["error"] = wd.transformer_status(model)["reason"]
                            rec["modes"][mode] = r
                            continue
                    fn = (lambda: forward(model, inputs)) if mode != "compile" else None
                    if mode == "compile":
                        wd.disable_transformer(model)
                        torch._dynamo.reset()  # each size's compile from scratch: its time is the size's own
                        if a.compile_mode == "full":
                            cm = torch.compile(model)
                        else:  # diffusers' regional compilation: each WanTransformerBlock compiled once
                            model.compile_repeated_blocks(fullgraph=True)
                            cm = model
                        fn = lambda: forward(cm, inputs)  # noqa: E731
                        t0 = time.perf_counter()
                        fn()
                        torch.cuda.synchronize()
                        r["first_call_s"] = time.perf_counter() - t0
                    outs[mode] = fn().clone()  # warm-up, and the output compared below
                    if mode == "fused":
                        st = wd.transformer_status(model)
                        r["path"] = st["path"]
                        if st["path"] != "fused":
                            r["error"] = st["reason"]
                    r.update(timed(torch, fn, iters, sampler))
                    if mode == "compile":
                        r["compile_s"] = r["first_call_s"] - r["ms"] / 1e3
                    r.update(peak_memory(torch, fn))
                    if not a.no_profile:
                        r["profile"] = profile(torch, fn, cfg["num_layers"])
                        o = r["profile"]["outside_gemm_attention_ms_per_block"]
                        r["profile"]["outside_gb_per_block_at_copy_bw"] = o * 1e-3 * setup["copy_gbps"]
                except Exception as e:  # a mode that fails (compile where it does not run) is reported, not fatal
                    r["error"] = f"{type(e).__name__}: {e}"[:2000]
                finally:
                    if mode == "fused":
                        wd.disable_transformer(model)
                    if mode == "compile":  # back to eager for the next size
                        for mod in model.modules():
                            if getattr(mod, "_compiled_call_impl", None) is not None:
                                mod._compiled_call_impl = None
                        r["compile_mode"] = a.compile_mode
                rec["modes"][mode] = r
                save(doc)
                msg = f"  {rec['size']} ({L} tokens) {mode:8s}: " + (
                    f"{r['ms']:9.1f} ms, peak +{r['peak_over_base_gib']:.2f} GiB" if "ms" in r else r.get("error", ""))
                if "profile" in r:
                    pr = r["profile"]
                    msg += (f", outside GEMM/attention {pr['outside_gemm_attention_ms']:.1f} ms "
                            f"({pr['outside_gemm_attention_ms_per_block']:.2f} ms/block, "
                            f">= {pr['outside_gb_per_block_at_copy_bw']:.1f} GB/block)")
                if "compile_s" in r:
                    msg += f", compile {r['compile_s']:.1f} s"
                print(msg, flush=True)
        e = rec["modes"].get("eager", {})
        for mode in ("fused", "compile"):
            m = rec["modes"].get(mode, {})
            if "ms" in m and "ms" in e:
                m["speedup_vs_eager"] = e["ms"] / m["ms"]
                if "peak_over_base_gib" in m and "peak_over_base_gib" in e:
                    m["peak_vs_eager"] = m["peak_over_base_gib"] / max(e["peak_over_base_gib"], 1e-9)
                if "profile" in m and "profile" in e:
                    m["outside_cut_vs_eager"] = (e["profile"]["outside_gemm_attention_ms"] /
                                                 max(m["profile"]["outside_gemm_attention_ms"], 1e-9))
            if mode in outs and "eager" in outs:
                m["vs_eager"] = errors(outs[mode], outs["eager"])
        f, c = rec["modes"].get("fused", {}), rec["modes"].get("compile", {})
        if "ms" in f and "ms" in c:  # compile's timed forwards exclude its compile step (the first call)
            f["speedup_vs_compile"] = c["ms"] / f["ms"]
        # issue 43's targets: >= 1.15x eager (named at 704x1280x121), the time outside GEMMs and attention cut >= 3x,
        # at least as fast as torch.compile without its compile step, peak memory (over the weights) <= eager's
        rec["targets"] = {k: v for k, v in (
            ("fused_1.15x_eager", f["speedup_vs_eager"] >= 1.15 if "speedup_vs_eager" in f else None),
            ("outside_cut_3x", f["outside_cut_vs_eager"] >= 3 if "outside_cut_vs_eager" in f else None),
            ("fused_at_least_compile", f["speedup_vs_compile"] >= 1 if "speedup_vs_compile" in f else None),
            ("peak_at_most_eager", f["peak_vs_eager"] <= 1 if "peak_vs_eager" in f else None))}
        if a.check_fp32 and si == 0:
            del outs
            torch.cuda.empty_cache()
            m32 = make_transformer(torch, cfg, torch.float32, 0)
            m32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})  # the bf16 model's weights
            x, ts, enc, _ = inputs
            with torch.no_grad():
                ref = forward(m32, (x.float(), ts, enc.float(), L))
                del m32
                torch.cuda.empty_cache()
                eager = forward(model, inputs)
                wd.enable_transformer(model)
                fused = forward(model, inputs)
                wd.disable_transformer(model)
            ee, ef = errors(eager, ref), errors(fused, ref)
            rec["check_fp32"] = {"eager": ee, "fused": ef, "ratio_max": ef["max_abs"] / max(ee["max_abs"], 1e-30),
                                 "ratio_rms": ef["rms"] / max(ee["rms"], 1e-30)}
            rec["check_fp32"]["within_3x"] = rec["check_fp32"]["ratio_max"] <= 3 and rec["check_fp32"]["ratio_rms"] <= 3
            print(f"  {rec['size']} against float32: eager max {ee['max_abs']:.3g} rms {ee['rms']:.3g}; fused max "
                  f"{ef['max_abs']:.3g} rms {ef['rms']:.3g} (ratios {rec['check_fp32']['ratio_max']:.2f}, "
                  f"{rec['check_fp32']['ratio_rms']:.2f})", flush=True)
            del ref, eager, fused
        save(doc)
        if "speedup_vs_eager" in f:
            print(f"  {rec['size']}: fused {f['speedup_vs_eager']:.3f}x eager, peak {f.get('peak_vs_eager', -1):.2f}x "
                  f"eager's" +
                  (f", outside GEMM/attention cut {f['outside_cut_vs_eager']:.2f}x" if "outside_cut_vs_eager" in f
                   else "") +
                  (f"; compile {c['speedup_vs_eager']:.3f}x eager (compile step {c.get('compile_s', 0):.0f} s), "
                   f"fused {f['speedup_vs_compile']:.3f}x compile" if "speedup_vs_compile" in f else
                   (f"; compile: {c.get('error', 'no timing')[:200]}" if c else "")) +
                  f"; targets {rec['targets']}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    save(doc)
    if a.json:
        print(f"wrote {a.json}")
    return doc


if __name__ == "__main__":
    main()
