#!/usr/bin/env python3
"""Converts an original Wan VAE checkpoint (Wan2.2_VAE.pth of TI2V-5B, or Wan2.1_VAE.pth of Wan2.1, Wan2.2 A14B
and their kin; the Wan repos' naming) to a safetensors file with diffusers' AutoencoderKLWan names, which
`w22_weights_load` and `wan22vae` read. Which of the two a file is comes from its keys: Wan2.2's decoder nests its
blocks (decoder.upsamples.B.upsamples.R), Wan2.1's is one flat list (decoder.upsamples.I).

    python3 tools/convert_pth.py Wan2.2_VAE.pth wan22_vae.safetensors [--dtype bf16] [--decoder-only]
    python3 tools/convert_pth.py Wan2.1_VAE.pth wan21_vae.safetensors

The name mapping is `convert_names`, a pure function (no torch needed) that follows diffusers'
scripts/convert_wan_to_diffusers.py, function convert_vae_22(), rule for rule:
  conv1 / conv2                        -> quant_conv / post_quant_conv
  decoder.conv1                        -> decoder.conv_in
  decoder.middle.0 / .2 (residual.N)   -> decoder.mid_block.resnets.0 / .1 (norm1, conv1, norm2, conv2)
  decoder.middle.1                     -> decoder.mid_block.attentions.0
  decoder.head.0 / head.2              -> decoder.norm_out / decoder.conv_out
  decoder.upsamples.B.upsamples.R      -> decoder.up_blocks.B.resnets.R (residual.0/2/3/6 -> norm1/conv1/norm2/conv2,
                                          shortcut -> conv_shortcut)
  decoder.upsamples.B.upsamples.R.resample / .time_conv -> decoder.up_blocks.B.upsampler.resample / .time_conv
and the same for the encoder (encoder.downsamples.B.downsamples.R -> encoder.down_blocks.B.resnets.R /
.downsampler). Keys no rule matches are kept as they are, as in diffusers.

Wan2.1_VAE.pth: `convert_names_21`, after diffusers' loaders/single_file_utils.py convert_wan_vae_to_diffusers():
the same fixed names (middle, head, conv1/conv2), and the decoder's flat list of 15 (3 resnets and an upsampler
per block, the last block without one) regrouped:
  decoder.upsamples.I.residual.* / .shortcut.*  -> decoder.up_blocks.(I // 4).resnets.(I % 4).*
  decoder.upsamples.I.resample.* / .time_conv.* -> decoder.up_blocks.(I // 4).upsamplers.0.*   (I = 3, 7, 11)
  encoder.downsamples.I.*                        -> encoder.down_blocks.I.* (residual names as above)

Needs torch and safetensors only to convert a file (not for the name mapping or its test).
"""
import argparse
import os
import sys

# diffusers convert_vae_22: middle_key_mapping, attention_mapping, head_mapping, quant_mapping
_RESIDUAL = {
    ".residual.0.gamma": ".norm1.gamma",
    ".residual.2.weight": ".conv1.weight",
    ".residual.2.bias": ".conv1.bias",
    ".residual.3.gamma": ".norm2.gamma",
    ".residual.6.weight": ".conv2.weight",
    ".residual.6.bias": ".conv2.bias",
    ".shortcut.weight": ".conv_shortcut.weight",
    ".shortcut.bias": ".conv_shortcut.bias",
}


def _fixed_mapping():
    m = {}
    for part in ("encoder", "decoder"):
        for orig, res in (("0", "0"), ("2", "1")):
            for suffix in (".residual.0.gamma", ".residual.2.bias", ".residual.2.weight", ".residual.3.gamma",
                           ".residual.6.bias", ".residual.6.weight"):
                m[f"{part}.middle.{orig}{suffix}"] = f"{part}.mid_block.resnets.{res}{_RESIDUAL[suffix]}"
        for leaf in ("norm.gamma", "to_qkv.weight", "to_qkv.bias", "proj.weight", "proj.bias"):
            m[f"{part}.middle.1.{leaf}"] = f"{part}.mid_block.attentions.0.{leaf}"
        m[f"{part}.head.0.gamma"] = f"{part}.norm_out.gamma"
        m[f"{part}.head.2.bias"] = f"{part}.conv_out.bias"
        m[f"{part}.head.2.weight"] = f"{part}.conv_out.weight"
        m[f"{part}.conv1.weight"] = f"{part}.conv_in.weight"
        m[f"{part}.conv1.bias"] = f"{part}.conv_in.bias"
    m["conv1.weight"] = "quant_conv.weight"
    m["conv1.bias"] = "quant_conv.bias"
    m["conv2.weight"] = "post_quant_conv.weight"
    m["conv2.bias"] = "post_quant_conv.bias"
    return m


_FIXED = _fixed_mapping()


def _convert_blocks(key, part, old, new, sampler):
    """encoder.downsamples / decoder.upsamples, as convert_vae_22 does it."""
    new_key = key.replace(f"{part}.{old}.", f"{part}.{new}.")
    if "residual" in new_key or "shortcut" in new_key:
        new_key = new_key.replace(f".{old}.", ".resnets.")
        for src, dst in _RESIDUAL.items():  # the script tests these in an if/elif chain: first match only
            if src in new_key:
                new_key = new_key.replace(src, dst)
                break
    elif "resample" in new_key or "time_conv" in new_key:
        parts = new_key.split(".")
        if len(parts) >= 4 and parts[3] == old:
            new_key = ".".join(parts[:3] + [sampler] + parts[5:])
    return new_key


def convert_key(key):
    """The diffusers name of one original Wan2.2 VAE key."""
    if key in _FIXED:
        return _FIXED[key]
    if key.startswith("encoder.downsamples."):
        return _convert_blocks(key, "encoder", "downsamples", "down_blocks", "downsampler")
    if key.startswith("decoder.upsamples."):
        return _convert_blocks(key, "decoder", "upsamples", "up_blocks", "upsampler")
    return key


_RES21 = [".residual.0.gamma", ".residual.2.bias", ".residual.2.weight", ".residual.3.gamma", ".residual.6.bias",
          ".residual.6.weight", ".shortcut.bias", ".shortcut.weight"]


def convert_key_21(key):
    """The diffusers name of one original Wan2.1 VAE key (convert_wan_vae_to_diffusers' rules)."""
    if key in _FIXED:
        return _FIXED[key]
    if key.startswith("encoder.downsamples."):
        new = key.replace("encoder.downsamples.", "encoder.down_blocks.")
        for src in _RES21:  # the first that matches, as diffusers' if/elif chain
            if src in new:
                return new.replace(src, _RESIDUAL[src])
        return new
    if key.startswith("decoder.upsamples."):
        parts = key.split(".")
        if len(parts) < 4 or not parts[2].isdigit():
            return key
        i = int(parts[2])
        block, r = i // 4, i % 4
        rest = "." + ".".join(parts[3:])
        if r < 3 and block < 4:
            for src in _RES21:
                if rest.startswith(src):
                    return f"decoder.up_blocks.{block}.resnets.{r}{_RESIDUAL[src]}"
        if r == 3 and block < 3 and (rest.startswith(".resample.") or rest.startswith(".time_conv.")):
            return f"decoder.up_blocks.{block}.upsamplers.0{rest}"
        return key.replace("decoder.upsamples.", "decoder.up_blocks.")
    return key


def is_wan21(state_dict_keys):
    """Whether the keys are Wan2.1_VAE.pth's (a flat decoder.upsamples.I.residual / .resample list) rather than
    Wan2.2_VAE.pth's (decoder.upsamples.B.upsamples.R)."""
    keys = list(state_dict_keys)
    nested = any(k.startswith("decoder.upsamples.") and ".upsamples." in k[len("decoder.upsamples."):] for k in keys)
    flat = any(k.startswith("decoder.upsamples.") and k.split(".")[3:4] in (["residual"], ["resample"]) for k in keys)
    return flat and not nested


def convert_names(state_dict_keys):
    """{original key: diffusers key} for every key (Wan2.2's or Wan2.1's naming, told apart by is_wan21); raises
    ValueError if two keys map to one name."""
    state_dict_keys = list(state_dict_keys)
    conv = convert_key_21 if is_wan21(state_dict_keys) else convert_key
    out, seen = {}, {}
    for k in state_dict_keys:
        n = conv(k)
        if n in seen:
            raise ValueError(f"keys {seen[n]!r} and {k!r} both map to {n!r}; expected a one-to-one mapping")
        seen[n] = k
        out[k] = n
    return out


def is_decoder_name(name):
    return name.startswith("decoder.") or name.startswith("post_quant_conv.")


def parse_args(argv=None):
    """The command line: -f/--force replaces an existing output, as in the wan22vae CLI (--overwrite, the old
    spelling, still works but is no longer listed)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="Wan2.2_VAE.pth or Wan2.1_VAE.pth (original naming)")
    ap.add_argument("output", help="the .safetensors file to write (diffusers naming)")
    ap.add_argument("--dtype", choices=["keep", "fp32", "bf16", "fp16"], default="keep")
    ap.add_argument("--decoder-only", action="store_true", help="write only post_quant_conv.* and decoder.*")
    ap.add_argument("-f", "--force", action="store_true", help="replace an existing output")
    ap.add_argument("--overwrite", dest="force", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def check_output(path, force):
    """Exits with a message when path exists and force is not given (before any loading)."""
    if os.path.exists(path) and not force:
        sys.exit(f"convert_pth.py: {path} exists; expected a new file (--force replaces it)")


def main(argv=None):
    args = parse_args(argv)
    check_output(args.output, args.force)
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError as e:
        sys.exit(f"convert_pth.py: {e}; expected torch and safetensors (pip install torch safetensors)")
    sd = torch.load(args.input, map_location="cpu", weights_only=True)
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        sys.exit(f"convert_pth.py: {args.input}: expected a state dict of tensors, found {type(sd).__name__}")
    names = convert_names(sd.keys())
    dtype = {"keep": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    out = {}
    for k, v in sd.items():
        n = names[k]
        if args.decoder_only and not is_decoder_name(n):
            continue
        out[n] = (v.to(dtype) if dtype is not None else v).contiguous()
    missing = [n for n in ("post_quant_conv.weight", "decoder.conv_in.weight", "decoder.norm_out.gamma") if n not in out]
    if missing:
        sys.exit(f"convert_pth.py: {args.input}: no {', '.join(missing)} after conversion; expected a Wan2.2 or "
                 f"Wan2.1 VAE checkpoint (found {len(sd)} keys, e.g. {next(iter(sd), None)!r})")
    tmp = args.output + ".tmp"
    save_file(out, tmp, metadata={"format": "pt"})
    os.replace(tmp, args.output)
    print(f"wrote {args.output}: {'the Wan2.1 VAE' if is_wan21(sd.keys()) else 'Wan2.2 TI2V-5B'}, {len(out)} tensors "
          f"({sum(1 for n in out if is_decoder_name(n))} of the decoder)")


if __name__ == "__main__":
    main()
