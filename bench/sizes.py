#!/usr/bin/env python3
"""The sizes users decode (issue 27.4) and the large pair of issue 28, on ONE decoder in one process, each checked
against diffusers' float32 decode (TF32 off) within the seed's allowance (3x diffusers' own bf16 error) and timed
against diffusers' bf16 decode of the same latents:

    1280x704 and 704x1280 (latents 44x80, 80x44), 1280x720 (45x80), 832x480 and 480x832 (30x52, 52x30), 1024x1024
    (64x64), 1920x1088 (68x120), 3840x2160 (135x240), the seed's 1248x704 (44x78), issue 46's odd x odd 720x720
    (45x45), 1296x720 (45x81) and 912x528 (33x57), at T = 1, 2 and 5, and 1280x704
    at T = 31; then 4096x2160 (135x256, T = 2) twice with different latents (issue 28: the second decode on the
    same decoder, after the first, checked too).

Every case runs through the package (wan22vae.Decoder on the current stream) and through wan22vae.diffusers.enable
(the pipeline's path: vae.decode with the switch on), which must give the same bits. The cases run in the order
above on the same decoder, so that every decode follows one of another size (the state between calls is what
issue 27 was about). Results go to --json, one record per case, rewritten after each case so that a run cut short
by its time limit keeps what it did; --cases picks a subset (names as in CASES), so that a long list can be split
over several device calls.

    python3 bench/sizes.py --json $OUT/sizes.json [--cases 44x80T1 44x80T2 ...] [--no-fp32] [--trials 2]
    W22_KERNELS=portable python3 bench/sizes.py --json $OUT/p.json --cases 44x80T1 44x80T31   (the portable kernels)
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/sizes.py --ref-first --cases 135x240T2 ...
        (the 4K cases at T >= 2: diffusers' float32 decode needs more than an H200 holds, unless its causal cache waits
        in host memory between chunks (bench.Diffusers.decode(host_cache=True); checked bitwise first, at a small size)
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the weights, diffusers' model, the allowance rule)

SIZES = [("1280x704", 44, 80), ("704x1280", 80, 44), ("1280x720", 45, 80), ("832x480", 30, 52),
         ("480x832", 52, 30), ("1024x1024", 64, 64), ("1920x1088", 68, 120), ("3840x2160", 135, 240),
         ("1248x704", 44, 78),
         # issue 46's odd x odd latents (Q K^T's N = h x w odd: the attention off the tensor cores before the padding)
         ("720x720", 45, 45), ("1296x720", 45, 81), ("912x528", 33, 57)]
CASES = [(f"{h}x{w}T{T}", label, T, h, w, 0) for T in (1, 2, 5) for label, h, w in SIZES]
CASES += [("44x80T31", "1280x704", 31, 44, 80, 0), ("135x256T2a", "4096x2160", 2, 135, 256, 0),
          ("135x256T2b", "4096x2160", 2, 135, 256, 1)]


def stats(a, ref):
    """max|d| and rms(d) of two float32 tensors."""
    d = (a.float() - ref.float())
    return float(d.abs().max()), float(d.pow(2).mean().sqrt())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--cases", nargs="*", help="case names (default: all): " + " ".join(c[0] for c in CASES))
    ap.add_argument("--cache", default=os.environ.get("W22_BENCH_CACHE", "/tmp/w22_bench_cache"))
    ap.add_argument("--no-fp32", action="store_true", help="skip the float32 reference (timing only)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--commit", default=os.environ.get("C"), help="the commit measured (the device copy has no .git)")
    ap.add_argument("--ref-first", action="store_true",
                    help="each case's float32 reference first, kept in host memory, before anything of ours holds "
                         "device memory (at 4K with T >= 2 diffusers' float32 decode needs most of an H200; run "
                         "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)")
    a = ap.parse_args()
    import torch
    bench.package()  # this checkout's package (python/), its library found as bench.py finds it
    import wan22vae
    import wan22vae.diffusers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.cache, exist_ok=True)
    dev = torch.device("cuda")
    names, weights, _ = bench.make_weights(wan22vae, 1, a.cache, dev)
    dif = bench.Diffusers(names, weights, dev)  # diffusers' own decodes: bf16 timed, float32 the reference
    ours = wan22vae.Decoder(wan22vae.weights_from_tensors(weights), device="cuda")
    # the pipeline's path: a second bf16 VAE with the switch on for the whole run, so that its one decoder also
    # sees every size after another
    pipe = bench.Diffusers(names, weights, dev)
    pipe.to(torch.bfloat16)
    if not wan22vae.diffusers.enable(pipe.vae):
        raise SystemExit("enable() declined: " + str(wan22vae.diffusers.status(pipe.vae)))
    by_name = {c[0]: c for c in CASES}
    unknown = [n for n in (a.cases or []) if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; known: {' '.join(by_name)}")
    cases = [by_name[n] for n in a.cases] if a.cases else CASES  # in the order given
    out = {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "commit": a.commit, "cases": {}}

    def timed(fn):
        torch.cuda.synchronize()
        t = time.perf_counter()
        v = fn()
        torch.cuda.synchronize()
        return v, (time.perf_counter() - t) * 1e3

    def host_cache(T, h, w):
        # diffusers' float32 decode of 3840x2160 with T >= 2 needs more than an H200's 140 GB, most of it the causal
        # convs' cache (2026-12-04: 127 GiB allocated, then out of memory); kept on the host it fits
        return a.ref_first and T >= 2 and h * w >= 135 * 240

    if a.ref_first and not a.no_fp32 and any(host_cache(c[2], c[3], c[4]) for c in cases):
        # the cache on the host must not change diffusers' decode: the same bits as the plain one, at a small size
        g = torch.Generator(device="cpu").manual_seed(7)
        z = torch.randn(1, 48, 3, 12, 20, generator=g).to(dev, torch.bfloat16)
        dif.to(torch.float32)
        same = bool(torch.equal(dif.decode(z), dif.decode(z, host_cache=True)))
        out["host_cache_same_bits"] = same
        print("the float32 reference with its cache on the host, 3x12x20: same bits as without:", same, flush=True)
        if not same:
            raise SystemExit("diffusers' decode with its cache on the host differs from the plain one")

    for name, label, T, h, w, variant in cases:
        g = torch.Generator(device="cpu").manual_seed(1000 + T * 131 + h * 7 + w + 977 * variant)
        z = torch.randn(1, 48, T, h, w, generator=g).to(dev, torch.bfloat16)
        rec = {"video": label, "T": T, "latents": [h, w]}
        ref_host = None
        try:
            if a.ref_first and not a.no_fp32:
                ours.release_workspace()
                getattr(pipe.vae, wan22vae.diffusers._ATTR).decoder.release_workspace()
                torch.cuda.empty_cache()
                dif.to(torch.float32)
                ref_host = dif.decode(z, host_cache=host_cache(T, h, w)).float().cpu()
                rec["reference_cache_on_host"] = host_cache(T, h, w)
                torch.cuda.empty_cache()
            v, _ = timed(lambda: ours(z))                      # warm-up and the checked call
            ms = [timed(lambda: ours(z))[1] for _ in range(a.trials)]
            rec["ours_ms"] = min(ms)
            again = ours(z)
            rec["repeat_same_bits"] = bool(torch.equal(again, v))
            # the library's device memory for this size, weights and workspace (constant in T: issue 45's 24 GB
            # cards), and the kernels it ran (W22_KERNELS=portable: the portable path on this GPU)
            rec["library_device_gib"] = ours.device_bytes() / 2**30
            rec["kernels_path"] = ours.path
            del again
            big = h * w >= 135 * 240  # 4K: one workspace of ~40 GiB at a time on an 80 GB card (session 38's H100)
            if big:
                ours.release_workspace()
                torch.cuda.empty_cache()
            ve = pipe.decode(z)
            rec["enable_path"] = wan22vae.diffusers.status(pipe.vae)["path"]
            rec["enable_same_bits"] = bool(torch.equal(ve.to(v.dtype), v))
            del ve
            if big:  # diffusers needs the memory that our 4K workspaces hold (~40 GiB each)
                ours.release_workspace()
                getattr(pipe.vae, wan22vae.diffusers._ATTR).decoder.release_workspace()
                torch.cuda.empty_cache()
            dif.to(torch.bfloat16)
            vb, _ = timed(lambda: dif.decode(z))
            rec["diffusers_bf16_ms"] = min(timed(lambda: dif.decode(z))[1] for _ in range(a.trials))
            rec["speedup"] = rec["diffusers_bf16_ms"] / rec["ours_ms"]
            rec["speedup_2.3x_met"] = rec["speedup"] >= 2.3  # issue 46: no size below 2.3x diffusers' bf16
            if not a.no_fp32:
                if ref_host is not None:
                    ref = ref_host.to(dev)
                else:
                    dif.to(torch.float32)
                    ref = dif.decode(z)
                bmax, brms = stats(vb, ref)
                omax, orms = stats(v, ref)
                rec.update(bf16_max=bmax, bf16_rms=brms, ours_max=omax, ours_rms=orms,
                           allowance_used=max(orms / (3 * brms), omax / min(2.0, 3 * bmax)))
                rec["within"] = bool(orms <= 3 * brms and omax <= min(2.0, 3 * bmax))
                del ref
            del vb
            ref_host = None
        except Exception as e:  # a case that fails is recorded, the others still run
            rec["error"] = f"{type(e).__name__}: {e}"
        out["cases"][name] = rec
        print(name, json.dumps(rec), flush=True)
        torch.cuda.empty_cache()
        with open(a.json + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
