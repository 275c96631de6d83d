#!/usr/bin/env python3
"""Tests of the bench's bookkeeping that need no GPU and no torch: the FLOP count and bound, the allowance and the
check's verdict, the kernel audit's grouping, the merge of runs, the report's tables. Where a built
libwan22vae.so is found (build*/), its FLOP count, config and synthetic latents are checked against ours through
the ctypes binding.

    python3 bench/test_bench.py
"""
import glob
import json
import math
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
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


class Names(unittest.TestCase):
    def test_workloads(self):
        self.assertEqual(bench.parse_workload("f121"), ("f121", 1))
        self.assertEqual(bench.parse_workload("f5x1"), ("f5", 1))
        for bad in ("f122", "f121x2", "121", "f121x"):
            with self.assertRaises(ValueError):
                bench.parse_workload(bad)

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
            "conv_scalar_kernel(w22_gemm)": "ours",
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
        self.assertTrue(h.startswith("| 2026-12-02 | NVIDIA H200 | 1980 | abc | 2500 | 5000 | 10000 | 5000 |"), h)

    def test_partial(self):
        r = sample_run(ms={"f121": 2500.0})
        r["workloads"]["f241x1"]["error"] = "RuntimeError: boom\nmore"
        t = report.table(r)
        self.assertNotIn("geomean", t)
        self.assertIn("- f241x1: RuntimeError: boom", t)

    def test_write(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "PERF.md")
            with open(path, "w") as f:
                f.write(f"# Perf\nprose naming `{report.LATEST[0]}` inline\n{report.LATEST[0]}\nold\n"
                        f"{report.LATEST[1]}\n\n{report.HISTORY_HEADER}\n"
                        f"{report.HISTORY_END}\n")
            r = sample_run()
            report.write(path, r)
            report.write(path, r)
            with open(path) as f:
                text = f.read()
            self.assertNotIn("old", text)
            self.assertIn("prose naming", text)
            self.assertEqual(text.count(report.history_row(r)), 1)
            self.assertIn("| f121x1 |", text)


def built_libs():
    root = os.path.dirname(HERE)
    return [p for p in sorted(glob.glob(os.path.join(root, "build*", "libwan22vae.so")))]


@unittest.skipUnless(built_libs(), "no built libwan22vae.so")
class Library(unittest.TestCase):
    def setUp(self):
        self.lib = bench.Lib(built_libs()[0])

    def test_config(self):
        c = self.lib.cfg
        self.assertEqual((c.z_dim, c.base_dim, list(c.dim_mult), c.num_res_blocks, list(c.temporal_up),
                          c.out_channels, c.patch_size), (48, 256, [1, 2, 4, 4], 2, [1, 1, 0], 12, 2))

    def test_flops(self):
        for T in (1, 2, 31, 121):
            self.assertAlmostEqual(self.lib.flops(T) / bench.decode_flops(T), 1.0, delta=1e-9)

    def test_latents(self):
        if not self.lib.has("w22_latents_synthetic"):
            self.skipTest("no w22_latents_synthetic")
        import numpy as np
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
        import synth
        z = self.lib.synthetic_latents(7, 3, 2, 5)
        self.assertTrue(np.array_equal(z, synth.synth_latents(synth.TI2V_5B, 7, 3, 2, 5)))

    def test_weight_table(self):
        names = bench.weight_table()
        self.assertEqual(len(names), 110)
        self.assertEqual(names[0], ("post_quant_conv.weight", (48, 48, 1, 1, 1)))


if __name__ == "__main__":
    unittest.main()
