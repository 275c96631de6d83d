#!/usr/bin/env python3
"""Tests of the bench's bookkeeping that need no GPU and no torch: the FLOP count and bound, the allowance and the
check's verdict, the kernel audit's grouping, the merge of runs, the report's tables and cells. Every run they read
is made here (sample_run, sample_worlds, minimal dicts): nothing under bench/results/ is a fixture, so the report's
format may change with its tests. Where a built libwan22vae.so is found (W22_LIB, else build*/), its FLOP count,
config and synthetic latents are checked against ours through the package wan22vae, the bench's binding of it.

    python3 bench/test_bench.py            (or python3 -m pytest -q bench/test_bench.py)
"""
import glob
import json
import math
import os
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import conv_bench  # noqa: E402
import path as path_bench  # noqa: E402
import report  # noqa: E402


class Flops(unittest.TestCase):
    def test_per_latent_frame_matches_the_doc(self):
        # docs/wan22-decoder.md: 64.7 TFLOP per latent frame after the first.
        per = bench.decode_flops(3) - bench.decode_flops(2)
        self.assertAlmostEqual(per / 1e12, 64.7, delta=0.05)

    def test_clips(self):
        # f121 2.0 PFLOP, f241 3.9, f481 7.8; at 990 TFLOP/s 2.0 s, 3.9 s, 7.9 s.
        for T, pflop in ((31, 1.96), (61, 3.90), (121, 7.78)):
            self.assertAlmostEqual(bench.decode_flops(T) / 1e15, pflop, delta=0.01)
        self.assertAlmostEqual(bench.bound_ms(bench.decode_flops(121), bench.min_bytes(121)), 7861.7, delta=1)

    def test_bound_at_world(self):
        # FLOPs / (W x 990 TFLOP/s); the bytes term (one GPU's bandwidth) never binds at these sizes.
        f = bench.decode_flops(121)
        one = bench.bound_ms(f, bench.min_bytes(121))
        for w in (2, 4):
            self.assertAlmostEqual(bench.bound_ms(f, bench.min_bytes(121), world=w), one / w)
            self.assertAlmostEqual(bench.bound_ms(f, 0, world=w), 1e3 * f / (w * 990e12))
        self.assertAlmostEqual(bench.bound_ms(f, bench.min_bytes(121), world=4), 1965.4, delta=0.5)
        self.assertEqual(bench.bound_ms(4 * 990e12, 1, world=4), 1000.0)
        self.assertEqual(bench.bound_ms(1, 4.8e12, world=4), 1000.0)
        self.assertAlmostEqual(bench.bound_ms(f, 0, tflops=800, world=2), 1e3 * f / (2 * 800e12))

    def test_bound_is_the_slower_term(self):
        self.assertEqual(bench.bound_ms(990e12, 1), 1000.0)
        self.assertEqual(bench.bound_ms(1, 4.8e12), 1000.0)

    def test_video_shape(self):
        self.assertEqual(bench.video_shape(121), (1, 3, 481, 704, 1248))
        self.assertEqual(bench.video_shape(1), (1, 3, 1, 704, 1248))


class Check(unittest.TestCase):
    calib = {"bf16_max_abs": 0.0288, "bf16_rms": 0.00491}

    def test_allowance(self):
        a = bench.allowance(self.calib)
        self.assertAlmostEqual(a["max_abs"], 0.0864)
        self.assertAlmostEqual(a["rms"], 0.01473)
        self.assertEqual(bench.allowance({"bf16_max_abs": 1.0, "bf16_rms": 0.1})["max_abs"], 2.0)

    def counts(self, out, ref):
        """What judge() accumulates, in numpy."""
        import numpy as np
        finite = np.isfinite(out)
        both = finite & np.isfinite(ref)
        d = np.where(both, out.astype(np.float64) - ref, 0.0)
        return dict(nonfinite=int((~finite).sum()), outside=int((np.abs(np.nan_to_num(out)) > 1).sum()),
                    compared=int(both.sum()), numel=out.size, unmatched=int((~finite & np.isfinite(ref)).sum()),
                    max_abs=float(np.abs(d).max()), squares=float((d * d).sum()))

    def test_pass_fail(self):
        import numpy as np
        rng = np.random.default_rng(0)
        ref = rng.uniform(-0.9, 0.9, size=(1, 3, 5, 8, 8)).astype(np.float32)
        allowed = bench.allowance(self.calib)
        good = ref + rng.normal(0, 0.004, ref.shape).astype(np.float32)
        c = bench.verdict_of(**self.counts(good, ref), allowed=allowed)
        self.assertTrue(c["passed"], c)
        self.assertLess(c["rms_share"], 0.5)
        self.assertAlmostEqual(c["psnr_db"], 10 * math.log10(4 / c["rms"] ** 2))
        self.assertTrue(bench.verdict_text(c).startswith("ok"))

        noisy = ref + rng.normal(0, 0.02, ref.shape).astype(np.float32)
        self.assertFalse(bench.verdict_of(**self.counts(noisy, ref), allowed=allowed)["passed"])

        spike = ref.copy()
        spike[0, 0, 0, 0, 0] += 0.5
        self.assertFalse(bench.verdict_of(**self.counts(np.clip(spike, -1, 1), ref), allowed=allowed)["passed"])

        hole = ref.copy()
        hole[0, 1, 2, 3, 4] = np.nan
        c = bench.verdict_of(**self.counts(hole, ref), allowed=allowed)
        self.assertFalse(c["passed"])
        self.assertEqual((c["nonfinite"], c["unmatched"]), (1, 1))
        self.assertIn("not finite", bench.verdict_text(c))

        outside = ref.copy()
        outside[0, 0, 0, 0, 1] = 1.01
        ref2 = outside.copy()
        c = bench.verdict_of(**self.counts(outside, ref2), allowed=allowed)
        self.assertFalse(c["passed"])
        self.assertEqual(c["outside"], 1)

    def test_identical(self):
        c = bench.verdict_of(0, 0, 10, 10, 0, 0.0, 0.0, {"max_abs": 0.1, "rms": 0.1})
        self.assertTrue(c["passed"])
        self.assertIsNone(c["psnr_db"])

    def test_trials(self):
        self.assertEqual(bench.trials_for(1.0), 3)
        self.assertEqual(bench.trials_for(1.5), 2)


class HostCacheReference(unittest.TestCase):
    """sizes.py's float32 reference at 4K keeps diffusers' causal cache on the host (bench.Diffusers.decode
    host_cache): the decode must stay diffusers' own, bit for bit, at a tiny config on the CPU (here the move is a
    no-op: sizes.py repeats the check on the GPU before it relies on it)."""

    def test_same_bits_and_restored(self):
        try:
            import torch
            from diffusers import AutoencoderKLWan
        except ImportError as e:
            self.skipTest(f"no torch or diffusers: {e}")
        torch.manual_seed(0)
        cfg = dict(bench.DIFFUSERS_CONFIG, base_dim=16, decoder_base_dim=16)
        d = bench.Diffusers.__new__(bench.Diffusers)
        d.vae, d.dtype = AutoencoderKLWan(**cfg).eval(), torch.float32
        z = torch.randn(1, 48, 3, 4, 6)
        seen = []
        orig = bench.HostCache.__setitem__
        bench.HostCache.__setitem__ = lambda self, i, v: (seen.append(v), orig(self, i, v))[1]
        try:
            b = d.decode(z, host_cache=True)
        finally:
            bench.HostCache.__setitem__ = orig
        self.assertTrue(any(isinstance(v, torch.Tensor) for v in seen))  # the cache went through it
        self.assertTrue(torch.equal(d.decode(z), b))
        self.assertNotIn("clear_cache", d.vae.__dict__)  # the model's own method again


class Names(unittest.TestCase):
    def test_workloads(self):
        self.assertEqual(bench.parse_workload("f121"), ("f121", 1))
        self.assertEqual(bench.parse_workload("f5x1"), ("f5", 1))
        self.assertEqual(bench.parse_workload("f481x4"), ("f481", 4))
        self.assertEqual(bench.parse_workload("f121x2"), ("f121", 2))
        self.assertEqual(bench.parse_workload("f17x4"), ("f17", 4))
        # Only the seed's fifteen: short clips at 1 and 4, long ones at 1, 2, 4.
        for bad in ("f122", "f121x3", "f1x2", "f17x2", "f481x8", "121", "f121x", "f121x0"):
            with self.assertRaises(ValueError):
                bench.parse_workload(bad)

    def test_the_seeds_workloads(self):
        self.assertEqual(list(bench.WORKLOADS), [
            "f1x1", "f5x1", "f17x1", "f121x1", "f241x1", "f481x1", "f1x4", "f5x4", "f17x4",
            "f121x2", "f241x2", "f481x2", "f121x4", "f241x4", "f481x4"])
        self.assertEqual(bench.TIMED_WORKLOADS, ("f121x1", "f241x1", "f481x1", "f121x2", "f241x2", "f481x2",
                                                 "f121x4", "f241x4", "f481x4"))

    def test_order(self):
        self.assertEqual(bench.workload_order(["f481x4", "f121", "f121x1", "f5x4", "f241x2", "f1"]),
                         [("f1", 1), ("f121", 1), ("f241", 2), ("f5", 4), ("f481", 4)])
        with self.assertRaises(ValueError):
            bench.workload_order(["f121", "f5x2"])

    def test_plan(self):
        order = bench.workload_order(list(bench.WORKLOADS))
        run, skipped = bench.plan_worlds(order, 1)
        self.assertEqual([bench.workload_name(*cw) for cw in run], ["f1x1", "f5x1", "f17x1", "f121x1", "f241x1",
                                                                    "f481x1"])
        self.assertEqual(len(skipped), 9)
        self.assertEqual(skipped["f481x4"], "needs 4 GPUs; this machine has 1")
        run, skipped = bench.plan_worlds(order, 2)
        self.assertEqual(sorted(skipped), ["f121x4", "f17x4", "f1x4", "f241x4", "f481x4", "f5x4"])
        self.assertIn(("f481", 2), run)
        run, skipped = bench.plan_worlds(order, 8)
        self.assertEqual((len(run), skipped), (15, {}))

    def test_slug(self):
        self.assertEqual(bench.gpu_slug("NVIDIA H200"), "h200")
        self.assertEqual(bench.gpu_slug("NVIDIA H100 80GB HBM3"), "h100-80gb-hbm3")

    def test_geomean(self):
        self.assertAlmostEqual(bench.geomean([2, 8]), 4.0)
        self.assertIsNone(bench.geomean([2, None]))
        self.assertIsNone(bench.geomean([]))


class Audit(unittest.TestCase):
    blob = (b"\0_Z18conv_scalar_kernel8w22_gemm\0_ZN3w2214conv_sm90_tileILi128EEEvv\0"
            b"_Z14rmsnorm_kernelPK13__nv_bfloat16lll\0junk_Z3\0")

    def test_mangled(self):
        self.assertEqual(bench.mangled_kernel_names(self.blob),
                         {"conv_scalar_kernel", "conv_sm90_tile", "rmsnorm_kernel"})

    def test_base_name(self):
        self.assertEqual(bench.kernel_base_name("void w22::conv_sm90_tile<128>(Params)"), "conv_sm90_tile")
        self.assertEqual(bench.kernel_base_name("rmsnorm_kernel(__nv_bfloat16 const*, long)"), "rmsnorm_kernel")

    def test_classify(self):
        ours = bench.mangled_kernel_names(self.blob)
        cases = {
            "conv_scalar_kernel(w22_mm)": "ours",
            "void conv_sm90_tile<128>(Params)": "ours",
            "w22_anything(int)": "ours",
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x256x64": "cuDNN",
            "void cudnn::engines_precompiled::nchwToNhwcKernel<float>(...)": "cuDNN",
            "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT": "cuBLAS",
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn>(...)": "cuBLAS",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, ...)": "ATen",
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>(...)": "ATen",
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "NCCL",
            "some_other_kernel(int)": "other",
        }
        for name, group in cases.items():
            self.assertEqual(bench.classify_kernel(name, ours), group, name)

    def test_summary(self):
        ours = {"rmsnorm_kernel"}
        s = bench.summarize_kernels([("rmsnorm_kernel(int)", 3000.0), ("rmsnorm_kernel(int)", 1000.0),
                                     ("void at::native::elementwise_kernel<>()", 1000.0)], ours)
        self.assertEqual(s["launches"], 3)
        self.assertEqual(s["library_kernels"], 1)
        self.assertAlmostEqual(s["library_share"], 0.2)
        self.assertFalse(s["passed"])
        self.assertEqual(s["groups"]["ours"], {"launches": 2, "ms": 4.0})
        self.assertEqual(s["kernels"][0][:3], ["ours", "rmsnorm_kernel(int)", 2])

    def test_others_holding_world(self):
        q = {"a": {10, 99}, "b": {11}}
        self.assertEqual(bench.others_holding_world([q, q], ["a", "b"], {10, 11, 99}), 0)
        self.assertEqual(bench.others_holding_world([q, {"a": {10, 99}, "b": {11, 12}}], ["a", "b"], {10, 11, 99}), 1)
        self.assertEqual(bench.others_holding_world([{"a": {500}, "b": {501, 502}}], ["a", "b"], {10, 11}), 1)
        self.assertEqual(bench.others_holding_world([{}], ["a", "b"], {10, 11}), 0)
        self.assertIsNone(bench.others_holding_world([q, None], ["a"], {10}))

    def test_others_holding(self):
        self.assertEqual(bench.others_holding([{5}, {5}], 5), 0)
        self.assertEqual(bench.others_holding([{5}, {5, 9}], 5), 1)
        self.assertEqual(bench.others_holding([{77}], 5), 0)      # another PID namespace: that one is us
        self.assertIsNone(bench.others_holding([{5}, None], 5))


def sample_run(commit="abc", ms=None, diffusers=None):
    ms = ms or {"f121": 2500.0, "f241": 5000.0, "f481": 10000.0}
    w = {}
    for clip, T in bench.CLIPS.items():
        r = {"clip": clip, "T": T, "world": 1, "timed": clip in bench.TIMED_CLIPS,
             "check": bench.verdict_of(0, 0, 10, 10, 0, 0.01, 1e-4 * 10, {"max_abs": 0.08, "rms": 0.015})}
        if clip in ms:
            r |= {"trials": [ms[clip]] * 3, "ms": ms[clip], "min_ms": ms[clip], "clock_mhz": 1980.0,
                  "bound_ms": bench.bound_ms(bench.decode_flops(T), bench.min_bytes(T)),
                  "memory": {"peak_gib": 9.5}, "audit": {"launches": 100, "library_kernels": 0,
                                                         "library_share": 0.0}}
        if diffusers and clip in diffusers:
            r["diffusers"] = {"ms": diffusers[clip]}
        w[bench.workload_name(clip, 1)] = r
    return {"setup": {"date": "2026-12-02", "gpu": "NVIDIA H200", "commit": commit, "driver": "580"}, "workloads": w}


class Worlds(unittest.TestCase):
    def test_scaling(self):
        ws = {"f481x1": {"ms": 24000.0}, "f481x2": {"ms": 12500.0}, "f481x4": {"ms": 6400.0},
              "f121x2": {"ms": 3000.0}, "f241x4": {"ms": None}}
        r = bench.scaling_ratios(ws)
        self.assertEqual(set(r), {"f481x2", "f481x4"})   # f121x1 absent, f241x4 not timed
        self.assertAlmostEqual(r["f481x2"], 1.92)
        self.assertAlmostEqual(r["f481x4"], 3.75)
        self.assertEqual(bench.scaling_ratios({"f481x1": {"ms": 1.0}}), {})

    def test_clocks(self):
        c = bench.world_clocks([1980.0, 1900.0, 1980.0, 1975.0])
        self.assertEqual((c["clock_mhz"], c["world_clock_mhz"]), (1980.0, [1900.0, 1980.0]))
        self.assertIn("the world's GPUs 1900-1980 MHz", bench.clock_text(c))       # 80 >= 2% of 1980
        c = bench.world_clocks([1980.0, 1950.0])
        self.assertEqual(bench.clock_text(c), ", SM clock 1980 MHz")               # 30 < 39.6
        c = bench.world_clocks([1980.0, None])
        self.assertNotIn("world_clock_mhz", c)
        self.assertEqual(bench.clock_text({"clock_mhz": None}), "")

    def test_energy(self):
        s = bench.Sampler.__new__(bench.Sampler)  # no NVML, no thread: the samples as the thread would leave them
        # a counter rising 700 J a second (700 W) from t = 0, sampled every 0.5 s, power read as 700000 mW
        s.samples = [(0.5 * k, 1500, 0, 350000 * k, 700000) for k in range(9)]
        joules, watts = s.energy([(0.25, 2.25), (1.0, 2.0)])       # ends between samples: interpolated
        self.assertAlmostEqual(joules, (1400 + 700) / 2)
        self.assertAlmostEqual(watts, 700)
        self.assertEqual(s.energy([(3.9, 5.0)]), (None, None))     # past the last sample: no figure, not a guess
        s.samples = [(0.5 * k, 1500, 0, None, None) for k in range(9)]
        self.assertEqual(s.energy([(0.25, 2.25)]), (None, None))   # no counter (NVML without it)
        # a window that ends after the newest sample waits for the sampler's next reading (session 35's None)
        t0 = time.monotonic()
        s = bench.Sampler.__new__(bench.Sampler)
        s.samples, s.done = [(t0 - 1.0, 1500, 0, 0, 700000)], threading.Event()

        def later():
            time.sleep(0.05)
            s.samples.append((time.monotonic(), 1500, 0, 700000, 700000))
        s.thread = threading.Thread(target=later)
        s.thread.start()
        joules, _ = s.energy([(t0 - 1.0, t0)])
        s.thread.join()
        self.assertIsNotNone(joules)
        self.assertEqual(bench.energy_text(1702.4, 693.2), ", 1702 J a call at 693 W")
        self.assertEqual(bench.energy_text(None, 693.2), "")

    def test_peak(self):
        mem0 = {"nvml": 1000, "reserved_after_prepare": 100}
        samples = [(0.5, 5000), (1.5, 9000), (2.5, 7000), (3.5, 99999)]
        self.assertEqual(bench.peak_above(samples, [(1.0, 3.0, 100)], mem0), 8000)
        self.assertEqual(bench.peak_above(samples, [(1.0, 3.0, 300), (2.0, 3.0, 100)], mem0), 7800)
        self.assertIsNone(bench.peak_above(samples, [(4.0, 5.0, 100)], mem0))
        self.assertIsNone(bench.peak_above(samples, [(1.0, 3.0, 100)], {"nvml": None}))


def sample_worlds(ms=None):
    """A run of all fifteen workloads: world 1 from sample_run, worlds 2 and 4 at the given ms."""
    r = sample_run(diffusers={"f121": 5770.0, "f241": 11530.0, "f481": 23090.0})
    ms = ms or {2: {"f121": 1300.0, "f241": 2600.0, "f481": 5200.0}, 4: {"f121": 700.0, "f241": 1400.0,
                                                                        "f481": 2800.0}}
    ok = bench.verdict_of(0, 0, 10, 10, 0, 0.01, 1e-4 * 10, {"max_abs": 0.08, "rms": 0.015})
    for name, (clip, w) in bench.WORKLOADS.items():
        if w == 1:
            continue
        T = bench.CLIPS[clip]
        e = {"clip": clip, "T": T, "world": w, "timed": clip in bench.TIMED_CLIPS, "check": ok}
        if clip in ms.get(w, {}):
            e |= {"trials": [ms[w][clip]] * 3, "ms": ms[w][clip], "min_ms": ms[w][clip], "clock_mhz": 1980.0,
                  "world_clock_mhz": [1900.0, 1980.0] if w == 4 else [1975.0, 1980.0],
                  "bound_ms": bench.bound_ms(bench.decode_flops(T), bench.min_bytes(T), world=w),
                  "memory": {"peak_gib": 6.0, "peak_gib_ranks": [6.0] * w}}
        r["workloads"][name] = e
    return r


class MultiReport(unittest.TestCase):
    def test_summary(self):
        r = bench.finalize(sample_worlds())
        s, ws = r["summary"], r["workloads"]
        self.assertEqual(s["timed"], list(bench.TIMED_WORKLOADS))
        self.assertAlmostEqual(s["nine_geomean_ms"], bench.geomean(ws[n]["ms"] for n in bench.TIMED_WORKLOADS))
        self.assertAlmostEqual(s["nine_geomean_gap"], bench.geomean(ws[n]["gap"] for n in bench.TIMED_WORKLOADS))
        self.assertAlmostEqual(s["geomean_ms"], s["nine_geomean_ms"])
        self.assertAlmostEqual(s["worlds"]["1"]["geomean_ms"], 5000.0)
        self.assertAlmostEqual(s["worlds"]["4"]["geomean_ms"], 1400.0)
        self.assertAlmostEqual(s["scaling"]["f481x2"], 10000 / 5200)
        self.assertAlmostEqual(s["scaling"]["f481x4"], 10000 / 2800)
        self.assertEqual(s["scaling_targets"]["f481x2"], {"target": 1.85, "met": True})
        self.assertEqual(s["scaling_targets"]["f481x4"], {"target": 3.5, "met": True})
        # The speedup over diffusers (one GPU) stays world 1's.
        self.assertAlmostEqual(s["geomean_speedup"], bench.geomean(ws[f"{c}x1"]["speedup"]
                                                                   for c in bench.TIMED_CLIPS))
        self.assertAlmostEqual(ws["f481x4"]["gap"], 2800 / (7861.72 / 4), delta=1e-3)
        self.assertEqual((s["checked"], s["check_passed"]), (15, 15))

    def test_subset(self):
        r = sample_worlds(ms={2: {"f481": 13500.0}})
        for n in [n for n, (c, w) in bench.WORKLOADS.items() if w == 4 or (w == 2 and c != "f481")]:
            del r["workloads"][n]
        s = bench.finalize(r)["summary"]
        self.assertNotIn("nine_geomean_ms", s)
        self.assertEqual(s["timed"], ["f121x1", "f241x1", "f481x1", "f481x2"])
        self.assertAlmostEqual(s["geomean_ms"], bench.geomean([2500, 5000, 10000, 13500]))
        self.assertEqual(s["scaling_targets"], {"f481x2": {"target": 1.85, "met": False}})

    def test_table(self):
        t = report.table(sample_worlds())
        self.assertIn("**world 1** (1 GPU)", t)
        self.assertIn("**world 4** (4 GPUs)", t)
        self.assertIn("| f481x1 | 121 | 10000.0 (10000.0) | 1980 | 7862 | 1.27 | 23090 | 2.31 | 9.5 | 0 | ok", t)
        self.assertIn("| f481x2 | 121 | 5200.0 (5200.0) | 1980 | 3931 | 1.32 | 1.92 | 6.0 | ok", t)
        self.assertIn("| f481x4 | 121 | 2800.0 (2800.0) | 1980 (1900-1980) | 1965 | 1.42 | 3.57 | 6.0 | ok", t)
        self.assertIn("| f17x4 | 5 | - | - | - | - | - | - | ok", t)
        self.assertIn("geomean over the nine timed workloads **", t)
        self.assertIn("f481x1 / f481x4 x3.57 (target x3.50: met)", t)
        self.assertIn("15 of 15 checks ok", t)
        self.assertEqual(t.count("**geomean** (3 timed)"), 3)
        # The world-1 block is still table()'s own row format.
        self.assertIn("| **geomean** (3 timed) | | **5000.0** |", t)

    def test_history(self):
        h = report.history_row(sample_worlds(), "bench/results/r.json")
        self.assertIn("| 2500 / 5000 / 10000; x2: 1300 / 2600 / 5200; x4: 700 / 1400 / 2800 ms, 2.31x, gap 1.27, "
                      "9.5 GiB, 1980 MHz; nine ", h)
        s = bench.finalize(sample_worlds())["summary"]
        self.assertIn(f"; nine {s['nine_geomean_ms']:.0f} ms, gap {s['nine_geomean_gap']:.2f} |", h)
        self.assertTrue(h.endswith("| `r.json` |"), h)
        self.assertEqual(h.count(" | "), report.HISTORY_HEADER.splitlines()[0].count(" | "))
        # World 1 alone: world 1's cells only.
        h1 = report.history_row(sample_run())
        self.assertEqual(h1, "| vN (abc) | ... | ... | 2500 / 5000 / 10000 ms, diffusers not timed, gap 1.27, 9.5 GiB, "
                             "1980 MHz | "
                             "`results JSON` |")

    def test_errors_listed(self):
        r = sample_worlds()
        r["workloads"]["f241x4"]["error"] = "rank 2 (workload): Traceback\nRuntimeError: boom"
        t = report.table(r)
        self.assertIn("- f241x4: rank 2 (workload): Traceback", t)

    def test_old_runs_render(self):
        # Runs of the first sessions: no "world" in the workloads, no summary, no merge, no switches, a short check
        # (no max_abs); they still render as one world-1 table and a version row.
        r = {"setup": {"date": "2026-12-02", "gpu": "NVIDIA H200", "commit": "ad3ead3+wt"},
             "workloads": {"f1x1": {"clip": "f1", "T": 1, "timed": False, "check": {"passed": True}},
                           "f121x1": {"clip": "f121", "T": 31, "timed": True, "ms": 6423.0, "min_ms": 6400.0,
                                      "clock_mhz": 1980.0, "bound_ms": 1981.0, "diffusers": {"ms": 5697.0}}}}
        t = report.table(r)
        self.assertNotIn("**world", t)
        self.assertTrue(t.startswith("2026-12-02, NVIDIA H200, commit ad3ead3+wt, driver ?, torch ? (CUDA ?)"), t)
        self.assertIn("| workload | T | ours ms (fastest) | SM MHz | bound ms | gap | diffusers bf16 ms |", t)
        self.assertIn("| f1x1 | 1 | - | - | - | - | - | - | - | - | ok |", t)
        self.assertIn("| f121x1 | 31 | 6423.0 (6400.0) | 1980 | 1981 | 3.24 | 5697 | 0.89 | - | - | not checked |", t)
        self.assertEqual(report.history_row(r), "| vN (ad3ead3+wt) | ... | ... | 6423 / - / - ms, 0.89x, gap 3.24, "
                                                "- GiB, 1980 MHz | `results JSON` |")


class Cells(unittest.TestCase):
    """What report.py reads from a run, one field at a time, on runs made here."""

    def test_setup_line(self):
        r = sample_run(diffusers={"f121": 5770.0, "f241": 11530.0, "f481": 23090.0})
        r["setup"] |= {"torch": "2.11", "cuda": "13.0", "diffusers": "0.42.1", "gemm_tflops": 794.4,
                       "ours": "package wan22vae", "w22_env": {"W22_LIB": "/x/lib.so", "W22_B": "2", "W22_A": "1"}}
        r["runs"] = [{"commit": "a"}]
        line = report.table(r, "bench/results/r.json").splitlines()[0]
        self.assertEqual(line, "2026-12-02, NVIDIA H200, commit abc, driver 580, torch 2.11 (CUDA 13.0), diffusers "
                               "0.42.1, SM clock 1980 MHz during the trials, bf16 GEMM 794 TFLOP/s measured, ours: "
                               "package wan22vae, merged from 2 commands, switches W22_A=1 W22_B=2, results "
                               "`bench/results/r.json`")
        self.assertNotIn("results `", report.table(r).splitlines()[0])
        self.assertEqual(report.short("0123456789abcdef"), "0123456789")
        self.assertEqual(report.short(None), "?")

    def test_check_cell(self):
        ok = bench.verdict_of(0, 0, 10, 10, 0, 0.01, 1e-4 * 10, {"max_abs": 0.08, "rms": 0.015})
        self.assertEqual(report.check_cell({"check": ok}),
                         f"ok: max x{ok['max_share']:.2f}, rms x{ok['rms_share']:.2f}, {ok['psnr_db']:.1f} dB")
        self.assertEqual(report.check_cell({"check": ok, "agree_error": "calls differ"})[:4], "FAIL")
        self.assertEqual(report.check_cell({"check": {"passed": False}}), "FAIL")
        self.assertEqual(report.check_cell({"error": "boom"}), "error")
        self.assertEqual(report.check_cell({}), "not checked")

    def test_shared_and_failed(self):
        r = sample_run(diffusers={"f121": 5000.0, "f241": 10000.0, "f481": 20000.0})
        r["workloads"]["f241x1"]["shared"] = True
        r["workloads"]["f5x1"]["check"] = {"passed": False}
        self.assertIn("| f241x1 | 61 | 5000.0 (5000.0) SHARED |", report.table(r))
        cell = report.bench_cell(r)
        self.assertEqual(cell, "2500 / 5000 / 10000 ms, 2.00x, gap 1.27, 9.5 GiB, 1980 MHz; checks 5 of 6 ok")
        for w in r["workloads"].values():
            w.pop("check")
        self.assertTrue(report.bench_cell(r).endswith("; not checked"))
        r["workloads"]["f121x1"]["audit"]["library_kernels"] = 3
        self.assertIn("; 3 library kernels", report.bench_cell(r))

    def test_source_name(self):
        self.assertEqual(report.source_name(os.path.join(HERE, "results", "x.json")), "bench/results/x.json")
        self.assertEqual(report.source_name("/elsewhere/r.json"), "/elsewhere/r.json")

    def test_main(self):
        import contextlib
        import io
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            with open(path, "w") as f:
                json.dump(sample_run(diffusers={"f121": 5770.0, "f241": 11530.0, "f481": 23090.0}), f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                report.main([path])
                report.main([path, "--history"])
            text = out.getvalue()
            self.assertIn(f"results `{path}`", text)
            self.assertIn(report.HISTORY_HEADER, text)
            self.assertIn("| vN (abc) | ... | ... | 2500 / 5000 / 10000 ms, 2.31x, gap 1.27, 9.5 GiB, 1980 MHz | "
                          "`r.json` |", text)


# Stand-ins for bench.rank_main in the session tests (spawned: module-level, picklable by name).
def fake_rank(rank, world, port, cfg, conn):
    """Rank 0 blocks where a real one would wait for the failing rank in a collective."""
    import time
    mode = cfg["mode"]
    if mode in ("die", "raise_start"):
        if rank == 1:
            if mode == "raise_start":
                conn.send(("error", rank, None, "prepare", "Traceback\nRuntimeError: no NCCL"))
            os._exit(3 if mode == "die" else 1)
        time.sleep(60)
    conn.send(("ready", rank, f"uuid{rank}", os.getpid(), 0.5, 1))
    for name in cfg["workloads"]:
        if rank == 0:
            conn.send(("start", name))
        if mode == "raise" and name == cfg["at"]:
            if rank == 1:
                conn.send(("error", rank, name, "workload", f"Traceback\nRuntimeError: rank 1 failed at {name}"))
                os._exit(1)
            time.sleep(60)
        if mode == "hang" and name == cfg["at"]:
            time.sleep(60)
        if rank == 0:
            conn.send(("result", name, {"clip": name.split("x")[0], "world": world, "timed": True, "ms": 5.0,
                                        "min_ms": 5.0, "windows": [[0.0, 1.0]], "rank_calls": [[[0.0, 1.0, 0]]] * world,
                                        "rank_mem0": [{"nvml": 0, "reserved_after_prepare": 0}] * world}))
    conn.send(("done", rank))


class Session(unittest.TestCase):
    """bench.world_session with stand-in ranks (no torch, no GPU): results, a rank that raises, dies or hangs."""

    def session(self, mode, names, at=None, start_timeout=30, workload_timeout=30):
        rep = {"setup": {}, "workloads": {n: {"world": 2} for n in names}}
        shown = []
        rest = bench.world_session(2, names, {"mode": mode, "at": at}, ["u0", "u1"], rep, lambda: None,
                                   shown.append, start_timeout, workload_timeout, target=fake_rank)
        return rep, rest, shown

    def test_ok(self):
        rep, rest, shown = self.session("ok", ["f121x2", "f241x2"])
        self.assertEqual((rest, shown), ([], ["f121x2", "f241x2"]))
        self.assertEqual(rep["workloads"]["f241x2"]["ms"], 5.0)
        self.assertNotIn("windows", rep["workloads"]["f241x2"])
        self.assertEqual(len(rep["setup"]["worlds"]["2"]["ranks"]), 2)
        for k, v in bench.NO_MULTICAST_ENV.items():
            self.assertEqual(os.environ.get(k), v)

    def test_raise(self):
        rep, rest, _ = self.session("raise", ["f121x2", "f241x2", "f481x2"], at="f241x2")
        self.assertEqual(rest, ["f481x2"])
        self.assertEqual(rep["workloads"]["f121x2"]["ms"], 5.0)
        self.assertIn("rank 1 (workload): Traceback", rep["workloads"]["f241x2"]["error"])
        self.assertIn("RuntimeError: rank 1 failed at f241x2", rep["workloads"]["f241x2"]["error"])

    def test_fails_before_the_first(self):
        rep, rest, shown = self.session("raise_start", ["f121x2", "f241x2"])
        self.assertEqual((rest, shown), ([], ["f121x2", "f241x2"]))
        self.assertIn("no NCCL", rep["workloads"]["f241x2"]["error"])

    def test_dies(self):
        rep, rest, _ = self.session("die", ["f121x2", "f481x2"])
        self.assertEqual(rest, [])
        self.assertIn("rank 1 exited with code 3", rep["workloads"]["f121x2"]["error"])
        self.assertIn("rank 1 exited with code 3", rep["workloads"]["f481x2"]["error"])

    def test_hang(self):
        import time
        t0 = time.monotonic()
        rep, rest, _ = self.session("hang", ["f121x2", "f241x2"], at="f121x2", workload_timeout=2)
        self.assertLess(time.monotonic() - t0, 25)
        self.assertEqual(rest, ["f241x2"])
        self.assertIn("timed out after 2 s", rep["workloads"]["f121x2"]["error"])


class Merge(unittest.TestCase):
    def test_finalize(self):
        r = bench.finalize(sample_run(diffusers={"f121": 5770.0, "f241": 11530.0, "f481": 23090.0}))
        s = r["summary"]
        self.assertAlmostEqual(s["geomean_ms"], 5000.0)
        self.assertAlmostEqual(r["workloads"]["f121x1"]["speedup"], 5770 / 2500)
        self.assertAlmostEqual(s["geomean_gap"], bench.geomean(r["workloads"][f"{c}x1"]["gap"]
                                                               for c in bench.TIMED_CLIPS))
        self.assertEqual((s["checked"], s["check_passed"]), (6, 6))
        self.assertEqual(s["timed"], ["f121x1", "f241x1", "f481x1"])

    def test_merge_fields(self):
        # The first command made the diffusers side of f481, the second timed ours: one record.
        old = {"setup": {"date": "d1", "commit": "a"},
               "workloads": {"f481x1": {"clip": "f481", "T": 121, "world": 1, "timed": True,
                                        "diffusers": {"ms": 23000.0}, "error": "ours did not load"}}}
        new = {"setup": {"date": "d1", "commit": "b"},
               "workloads": {"f481x1": {"clip": "f481", "T": 121, "world": 1, "timed": True, "ms": 11500.0,
                                        "bound_ms": 7861.7}}}
        m = bench.merge_reports(old, new)
        r = m["workloads"]["f481x1"]
        self.assertNotIn("error", r)
        self.assertAlmostEqual(r["speedup"], 2.0)
        self.assertEqual(m["setup"]["commit"], "b")
        self.assertEqual(m["runs"], [{"date": "d1", "commit": "a"}])
        m2 = bench.merge_reports(m, {"setup": {"commit": "c"}, "workloads": {}})
        self.assertEqual(len(m2["runs"]), 2)


class Report(unittest.TestCase):
    def test_table(self):
        r = sample_run(diffusers={"f121": 5770.0, "f241": 11530.0, "f481": 23090.0})
        t = report.table(json.loads(json.dumps(r)))
        self.assertIn("| f481x1 | 121 | 10000.0 (10000.0) | 1980 | 7862 | 1.27 | 23090 | 2.31 | 9.5 | 0 | ok", t)
        self.assertIn("**geomean** (3 timed)", t)
        self.assertIn("6 of 6 ok", t)
        h = report.history_row(r)
        self.assertTrue(h.startswith("| vN (abc) | ... | ... | 2500 / 5000 / 10000 ms, 2.31x, gap 1.27, "), h)

    def test_partial(self):
        r = sample_run(ms={"f121": 2500.0})
        r["workloads"]["f241x1"]["error"] = "RuntimeError: boom\nmore"
        t = report.table(r)
        self.assertNotIn("geomean", t)
        self.assertIn("- f241x1: RuntimeError: boom", t)

    def test_write(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "PERF.md")
            rows = f"{report.HISTORY_HEADER}\n| v1 (x) | a | b | c | `d.json` |\n"
            with open(path, "w") as f:
                f.write(f"# Perf\nprose naming `{report.LATEST[0]}` inline\n{report.LATEST[0]}\nold\n"
                        f"{report.LATEST[1]}\n\n{rows}")
            r = sample_run()
            report.write(path, r, "bench/results/r.json")
            report.write(path, r, "bench/results/r.json")
            with open(path) as f:
                text = f.read()
            self.assertNotIn("old", text)
            self.assertIn("prose naming", text)
            self.assertEqual(text.count("| f121x1 |"), 1)
            self.assertEqual(text.count("results `bench/results/r.json`"), 1)
            self.assertTrue(text.endswith(f"{report.LATEST[1]}\n\n{rows}"), text)   # the version rows untouched
            with open(path, "w") as f:
                f.write("# no markers\n")
            with self.assertRaises(SystemExit):
                report.write(path, r)


class ConvBench(unittest.TestCase):
    # cuda_ops --perf's own lines (an H200 run of v5): a format change that the parser misses must fail here, not
    # print "-" for ours in the side-by-side table (which it once did).
    text = ("perf up_blocks.3 conv 256ch       6x352x624x256->256 k3x3: 4.652 ms 668.4 TFLOP/s [wgmma 128x256] "
            "(cuDNN measured 709: 94%)\n"
            "perf up_blocks.1 upsample 1024ch  4x88x156x1024->1024 k1x3 up: 3.266 ms 564.2 TFLOP/s [wgmma 128x256]\n"
            "perf conv_out 256->12             6x352x624x256->12 k3x3: 3.596 ms 40.5 TFLOP/s [mma 128x32]\n"
            "perf rmsnorm                      4x352x624x256 silu: 0.350 ms, 2.57 TB/s (read + write)\n")

    def test_parses_the_3x3x3_convs(self):
        got = conv_bench.parse_ours(self.text)
        self.assertEqual(set(got), {(256, 256, 352, 624), (256, 12, 352, 624)})
        self.assertEqual(got[(256, 256, 352, 624)], {"name": "up_blocks.3 conv 256ch", "ms": 4.652, "tflops": 668.4})

    def test_one_frame_lines_are_not_compared(self):
        # v13-v14's output has a one-frame line of each heavy conv after its 4-frame one (3 input frames: 1 output
        # frame); cuDNN runs 4 output frames, so the 4-frame line is ours, wherever the other comes.
        four = "perf up_blocks.3 conv 256ch       6x352x624x256->256 k3x3: 4.077 ms 762.7 TFLOP/s [wgmma]\n"
        one = "perf up_blocks.3 conv 256ch 1f    3x352x624x256->256 k3x3: 1.005 ms 773.7 TFLOP/s [wgmma]\n"
        for text in (four + one, one + four):
            got = conv_bench.parse_ours(text)
            self.assertEqual(got[(256, 256, 352, 624)]["name"], "up_blocks.3 conv 256ch")
            self.assertEqual(got[(256, 256, 352, 624)]["tflops"], 762.7)

    def test_every_heavy_shape_is_found(self):
        line = "perf x {c}ch 6x{h}x{w}x{c}->{c} k3x3: 1.0 ms 700.0 TFLOP/s\n"
        got = conv_bench.parse_ours("".join(line.format(c=c, h=h, w=w) for c, h, w in conv_bench.SHAPES))
        self.assertEqual(sorted(got), sorted((c, c, h, w) for c, h, w in conv_bench.SHAPES))


def built_libs():
    """The library to check: W22_LIB where set (tests/test_python.sh sets it to the suite's build), else build/'s,
    else another build*/ one; not a sanitizer build's (it loads only with the sanitizer's runtime preloaded)."""
    if os.environ.get("W22_LIB"):
        return [os.environ["W22_LIB"]] if os.path.exists(os.environ["W22_LIB"]) else []
    root = os.path.dirname(HERE)
    found = sorted(glob.glob(os.path.join(root, "build*", "libwan22vae.so")))
    found = [p for p in found if "asan" not in os.path.basename(os.path.dirname(p))]
    return sorted(found, key=lambda p: os.path.basename(os.path.dirname(p)) != "build")


def built_cli():
    """The CLI beside the library that built_libs() finds."""
    libs = built_libs()
    cli = os.path.join(os.path.dirname(libs[0]), "wan22vae") if libs else ""
    return cli if os.path.exists(cli) else ""


class PathPhases(unittest.TestCase):
    """bench/path.py records the CLI's own account of where each run's time went (its -v line): the line as the
    CLI prints it must parse into every phase, or the GPU run's JSON would silently lack them."""
    PHASES = {"checks", "latents", "weights", "open", "output and threads", "decode", "frames copied to the writer",
              "waiting for its buffers", "the writer's last frames", "finishing the output", "the writer busy"}

    def test_a_line(self):
        line = ("wan22vae: time: checks 0.31 s, latents 0.01 s, weights 0.07 s, open 1.21 s, output and threads 0.00 s, "
                "decode 9.60 s (of it: frames copied to the writer 0.80 s, waiting for its buffers 0.00 s), the "
                "writer's last frames 0.05 s, finishing the output 0.02 s; the writer busy 2.90 s")
        got = path_bench.cli_phases("wan22vae: weights: x\n" + line + "\nwan22vae: wrote v.y4m\n")
        self.assertEqual(set(got), self.PHASES)
        self.assertEqual((got["decode"], got["frames copied to the writer"], got["the writer busy"]), (9.6, 0.8, 2.9))
        self.assertEqual(path_bench.cli_phases("no such line"), {})

    def test_fresh_output(self):
        """Each timed run starts without the previous output: a file and a folder are removed, nothing else."""
        with tempfile.TemporaryDirectory() as d:
            f, g, keep = (os.path.join(d, x) for x in ("v.npy", "frames", "w.safetensors"))
            for x in (f, keep):
                with open(x, "w") as h:
                    h.write("x")
            os.mkdir(g)
            with open(os.path.join(g, "f0.png"), "w") as h:
                h.write("x")
            self.assertGreaterEqual(path_bench.fresh_output(f), 0.0)
            path_bench.fresh_output(g)
            path_bench.fresh_output(os.path.join(d, "never.y4m"))  # a first run: nothing to remove
            self.assertEqual(sorted(os.listdir(d)), ["w.safetensors"])

    @unittest.skipUnless(built_cli(), "no built wan22vae CLI")
    def test_the_cli(self):
        import subprocess
        cli = built_cli()
        with tempfile.TemporaryDirectory() as d:
            w, z, v = (os.path.join(d, x) for x in ("w.safetensors", "z.npy", "v.y4m"))
            subprocess.run([cli, "synth", "weights", "-o", w, "--z-dim", "4", "--base-dim", "8"], check=True,
                           capture_output=True)
            subprocess.run([cli, "synth", "latents", "-o", z, "--z-dim", "4", "--frames", "2", "--height", "3",
                            "--width", "4"], check=True, capture_output=True)
            p = subprocess.run([cli, "decode", "-w", w, "-l", z, "-o", v, "-v"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(set(path_bench.cli_phases(p.stderr)), self.PHASES, p.stderr)


@unittest.skipUnless(built_libs(), "no built libwan22vae.so")
class Library(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The package loads its library once per process: the one found above, as bench.package() would find it.
        saved = os.environ.get("W22_LIB")
        os.environ["W22_LIB"] = built_libs()[0]
        try:
            cls.w22 = bench.package()
        finally:
            if saved is None:
                del os.environ["W22_LIB"]
            else:
                os.environ["W22_LIB"] = saved

    def test_config(self):
        self.assertEqual(self.w22.default_config(),
                         {"z_dim": 48, "base_dim": 256, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
                          "temporal_up": [1, 1, 0], "out_channels": 12, "patch_size": 2, "is_residual": 1})
        self.assertEqual(self.w22.wan21_config()["z_dim"], 16)  # the Wan2.1 VAE (bench/wan21.py)

    def test_flops(self):
        for T in (1, 2, 31, 121):
            flops, source = bench.flops_of(T)
            self.assertEqual(source, "w22_decode_flops")
            self.assertAlmostEqual(flops / bench.decode_flops(T), 1.0, delta=1e-9)

    def test_latents(self):
        import numpy as np
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
        import synth
        z = self.w22.synthetic_latents(None, 7, 3, 2, 5)
        self.assertTrue(np.array_equal(z, synth.synth_latents(synth.TI2V_5B, 7, 3, 2, 5)))

    def test_weight_table(self):
        names = bench.weight_table()
        self.assertEqual(len(names), 110)
        self.assertEqual(names[0], ("post_quant_conv.weight", (48, 48, 1, 1, 1)))


if __name__ == "__main__":
    unittest.main()
