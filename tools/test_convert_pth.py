#!/usr/bin/env python3
"""Tests tools/convert_pth.py: the original Wan2.2 VAE key list (derived from Wan2.2's wan/modules/vae2_2.py
module tree, as diffusers' convert_vae_22 expects it) must map to exactly the decoder's 110 diffusers names, and
the encoder's keys to encoder names. Runs with plain python3; the file conversion test needs torch and
safetensors and is skipped with a message without them.

    python3 tools/test_convert_pth.py
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert_pth  # noqa: E402

RESIDUAL = ["residual.0.gamma", "residual.2.weight", "residual.2.bias", "residual.3.gamma", "residual.6.weight",
            "residual.6.bias"]
ATTN = ["norm.gamma", "to_qkv.weight", "to_qkv.bias", "proj.weight", "proj.bias"]


def original_decoder_keys():
    """Wan2.2 Decoder3d (dim_mult [1,2,4,4], num_res_blocks 2, temperal_upsample [True, True, False]): middle =
    [ResidualBlock, AttentionBlock, ResidualBlock]; upsamples = 4 Up_ResidualBlocks, each with .upsamples =
    3 ResidualBlocks (+ a Resample in blocks 0-2; time_conv in 0, 1); a shortcut where in_dim != out_dim
    (the first resnet of blocks 2 and 3); head = [RMS_norm, SiLU, CausalConv3d]; the model's conv2 is
    post_quant_conv."""
    keys = ["conv2.weight", "conv2.bias", "decoder.conv1.weight", "decoder.conv1.bias"]
    keys += [f"decoder.middle.0.{r}" for r in RESIDUAL]
    keys += [f"decoder.middle.1.{a}" for a in ATTN]
    keys += [f"decoder.middle.2.{r}" for r in RESIDUAL]
    for b in range(4):
        for r in range(3):
            keys += [f"decoder.upsamples.{b}.upsamples.{r}.{x}" for x in RESIDUAL]
            if r == 0 and b in (2, 3):
                keys += [f"decoder.upsamples.{b}.upsamples.0.shortcut.{x}" for x in ("weight", "bias")]
        if b < 3:
            keys += [f"decoder.upsamples.{b}.upsamples.3.resample.1.{x}" for x in ("weight", "bias")]
        if b < 2:
            keys += [f"decoder.upsamples.{b}.upsamples.3.time_conv.{x}" for x in ("weight", "bias")]
    keys += ["decoder.head.0.gamma", "decoder.head.2.weight", "decoder.head.2.bias"]
    return keys


def original_encoder_keys():
    keys = ["conv1.weight", "conv1.bias", "encoder.conv1.weight", "encoder.conv1.bias"]
    keys += [f"encoder.middle.0.{r}" for r in RESIDUAL] + [f"encoder.middle.1.{a}" for a in ATTN]
    keys += [f"encoder.downsamples.0.downsamples.{r}.{x}" for r in range(2) for x in RESIDUAL]
    keys += ["encoder.downsamples.1.downsamples.0.shortcut.weight",
             "encoder.downsamples.0.downsamples.2.resample.1.weight",
             "encoder.downsamples.1.downsamples.2.time_conv.bias"]
    keys += ["encoder.head.0.gamma", "encoder.head.2.weight", "encoder.head.2.bias"]
    return keys


def expected_decoder_names():
    """The decoder's 110 diffusers names (docs: /shared wan22-decoder.md; src/model/model.c)."""
    res = ["norm1.gamma", "conv1.weight", "conv1.bias", "norm2.gamma", "conv2.weight", "conv2.bias"]
    n = ["post_quant_conv.weight", "post_quant_conv.bias", "decoder.conv_in.weight", "decoder.conv_in.bias"]
    n += [f"decoder.mid_block.attentions.0.{a}" for a in ATTN]
    n += [f"decoder.mid_block.resnets.{i}.{r}" for i in range(2) for r in res]
    for b in range(4):
        for r in range(3):
            n += [f"decoder.up_blocks.{b}.resnets.{r}.{x}" for x in res]
            if r == 0 and b in (2, 3):
                n += [f"decoder.up_blocks.{b}.resnets.0.conv_shortcut.{x}" for x in ("weight", "bias")]
        if b < 3:
            n += [f"decoder.up_blocks.{b}.upsampler.resample.1.{x}" for x in ("weight", "bias")]
        if b < 2:
            n += [f"decoder.up_blocks.{b}.upsampler.time_conv.{x}" for x in ("weight", "bias")]
    n += ["decoder.norm_out.gamma", "decoder.conv_out.weight", "decoder.conv_out.bias"]
    return n


class NameMapping(unittest.TestCase):
    def test_decoder_names(self):
        keys = original_decoder_keys()
        self.assertEqual(len(keys), 110)
        names = convert_pth.convert_names(keys)
        got = sorted(names.values())
        want = sorted(expected_decoder_names())
        self.assertEqual(len(want), 110)
        self.assertEqual(len(set(got)), 110)
        self.assertEqual(got, want, f"extra: {set(got) - set(want)}, missing: {set(want) - set(got)}")

    def test_examples(self):
        ck = convert_pth.convert_key
        self.assertEqual(ck("decoder.upsamples.2.upsamples.0.shortcut.weight"),
                         "decoder.up_blocks.2.resnets.0.conv_shortcut.weight")
        self.assertEqual(ck("decoder.upsamples.1.upsamples.3.time_conv.bias"),
                         "decoder.up_blocks.1.upsampler.time_conv.bias")
        self.assertEqual(ck("decoder.upsamples.0.upsamples.2.residual.6.weight"),
                         "decoder.up_blocks.0.resnets.2.conv2.weight")
        self.assertEqual(ck("decoder.middle.2.residual.3.gamma"), "decoder.mid_block.resnets.1.norm2.gamma")
        self.assertEqual(ck("decoder.head.0.gamma"), "decoder.norm_out.gamma")
        self.assertEqual(ck("conv2.bias"), "post_quant_conv.bias")
        self.assertEqual(ck("something.else"), "something.else")  # unmatched keys stay, as in diffusers

    def test_whole_vae(self):
        keys = original_decoder_keys() + original_encoder_keys()
        names = convert_pth.convert_names(keys)
        dec = sorted(n for n in names.values() if convert_pth.is_decoder_name(n))
        self.assertEqual(dec, sorted(expected_decoder_names()))
        enc = {names[k] for k in original_encoder_keys()}
        self.assertIn("quant_conv.weight", enc)
        self.assertIn("encoder.down_blocks.1.resnets.0.conv_shortcut.weight", enc)
        self.assertIn("encoder.down_blocks.0.downsampler.resample.1.weight", enc)
        self.assertIn("encoder.down_blocks.1.downsampler.time_conv.bias", enc)
        self.assertIn("encoder.mid_block.attentions.0.to_qkv.weight", enc)
        self.assertTrue(all(n.startswith(("encoder.", "quant_conv.")) for n in enc), enc)

    def test_collision(self):
        with self.assertRaises(ValueError):
            convert_pth.convert_names(["conv2.weight", "post_quant_conv.weight"])


def original_decoder_keys_21():
    """Wan2.1's Decoder3d (wan/modules/vae.py: dim 96, dim_mult [1,2,4,4], num_res_blocks 2, temperal_upsample
    [True, True, False]): upsamples is one flat Sequential: per block 3 ResidualBlocks then a Resample (blocks 0-2;
    time_conv in 0 and 1), a shortcut where in_dim != out_dim (index 4: 192 -> 384)."""
    keys = ["conv2.weight", "conv2.bias", "decoder.conv1.weight", "decoder.conv1.bias"]
    keys += [f"decoder.middle.0.{r}" for r in RESIDUAL]
    keys += [f"decoder.middle.1.{a}" for a in ATTN]
    keys += [f"decoder.middle.2.{r}" for r in RESIDUAL]
    i = 0
    for b in range(4):
        for r in range(3):
            keys += [f"decoder.upsamples.{i}.{x}" for x in RESIDUAL]
            if b == 1 and r == 0:
                keys += [f"decoder.upsamples.{i}.shortcut.{x}" for x in ("weight", "bias")]
            i += 1
        if b < 3:
            keys += [f"decoder.upsamples.{i}.resample.1.{x}" for x in ("weight", "bias")]
            if b < 2:
                keys += [f"decoder.upsamples.{i}.time_conv.{x}" for x in ("weight", "bias")]
            i += 1
    keys += ["decoder.head.0.gamma", "decoder.head.2.weight", "decoder.head.2.bias"]
    return keys


class Wan21Names(unittest.TestCase):
    """Wan2.1_VAE.pth: its keys map to exactly the Wan2.1 decoder's 108 names (tools/synth.py's table, the one
    make_fixtures.py checks against diffusers' named_parameters()), and to what diffusers' own converter gives."""

    def test_decoder_names(self):
        import synth
        keys = original_decoder_keys_21()
        self.assertTrue(convert_pth.is_wan21(keys))
        self.assertFalse(convert_pth.is_wan21(original_decoder_keys()))
        names = convert_pth.convert_names(keys)
        want = sorted(n for n, _, _, _ in synth.weight_table(synth.WAN21))
        self.assertEqual(len(want), 108)
        self.assertEqual(sorted(names.values()), want)
        self.assertEqual(names["decoder.upsamples.4.shortcut.weight"],
                         "decoder.up_blocks.1.resnets.0.conv_shortcut.weight")
        self.assertEqual(names["decoder.upsamples.7.time_conv.bias"], "decoder.up_blocks.1.upsamplers.0.time_conv.bias")
        self.assertEqual(names["decoder.upsamples.11.resample.1.weight"],
                         "decoder.up_blocks.2.upsamplers.0.resample.1.weight")
        self.assertEqual(names["decoder.upsamples.14.residual.6.bias"], "decoder.up_blocks.3.resnets.2.conv2.bias")

    def test_same_as_diffusers(self):
        try:
            from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
        except ImportError as e:
            self.skipTest(f"diffusers not installed ({e})")
        keys = original_decoder_keys_21() + ["encoder.downsamples.2.residual.0.gamma",
                                             "encoder.downsamples.4.shortcut.weight", "encoder.conv1.weight"]
        theirs = convert_wan_vae_to_diffusers({k: i for i, k in enumerate(keys)})
        ours = convert_pth.convert_names(keys)
        self.assertEqual({ours[k]: i for i, k in enumerate(keys)}, theirs)


class CommandLine(unittest.TestCase):
    """One overwrite flag across the tools: -f/--force, as the wan22vae CLI; --overwrite is a hidden alias."""

    def test_force(self):
        self.assertTrue(convert_pth.parse_args(["a.pth", "b.safetensors", "--force"]).force)
        self.assertTrue(convert_pth.parse_args(["a.pth", "b.safetensors", "-f"]).force)
        self.assertTrue(convert_pth.parse_args(["a.pth", "b.safetensors", "--overwrite"]).force)
        self.assertFalse(convert_pth.parse_args(["a.pth", "b.safetensors"]).force)

    def test_help_says_force(self):
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
            convert_pth.parse_args(["--help"])
        self.assertIn("--force", out.getvalue())
        self.assertNotIn("--overwrite", out.getvalue())

    def test_existing_output(self):
        with tempfile.TemporaryDirectory() as d:
            dst = os.path.join(d, "exists.safetensors")
            open(dst, "w").close()
            with self.assertRaises(SystemExit) as e:  # refused before torch is even imported
                convert_pth.main([os.path.join(d, "absent.pth"), dst])
            self.assertIn("--force replaces it", str(e.exception.code))
            convert_pth.check_output(dst, True)  # --force: no objection
            convert_pth.check_output(os.path.join(d, "new.safetensors"), False)


class FileConversion(unittest.TestCase):
    def test_pth_to_safetensors(self):
        try:
            import torch
            from safetensors.torch import load_file
        except ImportError as e:
            self.skipTest(f"torch or safetensors not installed ({e}); the name mapping is tested without them")
        sd = {k: torch.randn(2, 3) for k in original_decoder_keys() + original_encoder_keys()}
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "vae.pth"), os.path.join(d, "vae.safetensors")
            torch.save(sd, src)
            convert_pth.main([src, dst, "--decoder-only", "--dtype", "bf16"])
            out = load_file(dst)
            self.assertEqual(sorted(out), sorted(expected_decoder_names()))
            self.assertTrue(torch.equal(out["post_quant_conv.weight"], sd["conv2.weight"].bfloat16()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
