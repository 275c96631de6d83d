#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (make fuzz): tests/fuzz_corpus/ for the safetensors reader
(tests/fuzz_safetensors.c) and tests/fuzz_corpus_weights/ for the whole weights loader (tests/fuzz_weights.c).

safetensors: small valid files in every dtype, with and without __metadata__, escapes and a prefixed name; each
also in that fuzzer's second form ([byte d][JSON][d data bytes], the header length left to the harness).
weights: complete decoders of tiny configs (the model's table from tools/synth.py, which needs numpy): the config
in __metadata__ or inferred, plain or "vae."-prefixed names, BF16/F16/F32 and mixed (misaligned copies),
num_res_blocks 0 and 3, and one NaN; each also as [2-byte d][JSON][d data bytes]. Run from the repository root:
python3 tools/fuzz_corpus.py
"""
import json
import os
import struct

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def safetensors_parts(tensors, metadata=None):
    """(header bytes padded to 8, data bytes) for tensors = [(name, dtype, shape)]; data is 0, 1, 2, ..."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return text, bytes(i % 251 for i in range(off))


SEEDS = {
    "empty": ([], None),
    "one_f32": ([("w", "F32", [2, 3])], None),
    "dtypes": ([("a", "F32", [2]), ("b", "BF16", [3]), ("c", "F16", [1, 1, 2]), ("s", "F32", []),
                ("z", "F32", [0, 5])], None),
    "metadata": ([("post_quant_conv.weight", "BF16", [4, 4, 1, 1, 1])],
                 {"format": "pt", "wan22vae_config": "4,8,1,2,4,4,2,1,1,0,12,2"}),
    "escapes": ([("vae.d\u00e9coder.\U0001F600\"\\\n", "F16", [2])], {"k\tq": "v\u0001"}),
}


# Weights seeds: (config overrides, dtype or "mixed", name prefix, config in __metadata__, NaN at element 0 of
# tensor 5). Tiny dims keep each seed within the fuzzer's 64 KiB.
TINY = dict(z_dim=1, base_dim=1, dim_mult=(1, 1, 1, 1), num_res_blocks=0, temporal_up=(0, 0, 0), out_channels=3,
            patch_size=1)
WEIGHT_SEEDS = {
    "tiny_bf16": (TINY, "BF16", "", True, False),
    "tiny_f16_vae": (TINY, "F16", "vae.", True, False),
    "tiny_f32_temporal": (dict(TINY, temporal_up=(1, 1, 1), dim_mult=(1, 2, 2, 2)), "F32", "", True, False),
    "tiny_mixed": (TINY, "mixed", "first_stage_model.", True, False),
    "tiny_res3": (dict(TINY, num_res_blocks=3), "BF16", "", True, False),
    "default_inferred": (dict(z_dim=1, base_dim=1), "BF16", "", False, False),
    "tiny_nan": (TINY, "BF16", "", True, True),
}


def config_text(cfg):
    return ",".join(str(v) for v in [cfg["z_dim"], cfg["base_dim"], *cfg["dim_mult"], cfg["num_res_blocks"],
                                     *cfg["temporal_up"], cfg["out_channels"], cfg["patch_size"]])


def element_bytes(dtype, i):
    """Element i of a tensor: small finite values (-0.75 .. 0.75) in dtype's little-endian bytes."""
    v = (i % 7 - 3) * 0.25 if i % 5 else 0.5
    f32 = struct.pack("<f", v)
    if dtype == "F32":
        return f32
    if dtype == "F16":
        return struct.pack("<e", v)
    return f32[2:]  # BF16: the upper half of the float32 (exact for these values)


def weights_seed(overrides, dtype, prefix, with_meta, nan):
    import synth  # tools/synth.py: the model's weight table (numpy)
    cfg = dict(synth.TI2V_5B, **overrides)
    header, data = {}, bytearray()
    if with_meta:
        header["__metadata__"] = {"format": "pt", "wan22vae_config": config_text(cfg)}
    for t, (name, shape, _, _) in enumerate(synth.weight_table(cfg)):
        dt = dtype if dtype != "mixed" else ("BF16" if t % 3 == 0 else "F32")
        n = 1
        for d in shape:
            n *= d
        begin = len(data)
        for i in range(n):
            data += element_bytes(dt, i)
        if nan and t == 5:
            data[begin:begin + SIZES[dt]] = {"F32": b"\x00\x00\xc0\x7f", "BF16": b"\xc0\x7f", "F16": b"\x00\x7e"}[dt]
        header[prefix + name] = {"dtype": dt, "shape": list(shape), "data_offsets": [begin, len(data)]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return text, bytes(data)


def write_weights_seeds():
    out = os.path.join("tests", "fuzz_corpus_weights")
    os.makedirs(out, exist_ok=True)
    for name, spec in WEIGHT_SEEDS.items():
        header, data = weights_seed(*spec)
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + data)
        with open(os.path.join(out, name + ".body"), "wb") as f:
            f.write(struct.pack("<H", len(data)) + header + data)


def main():
    write_weights_seeds()
    out = os.path.join("tests", "fuzz_corpus")
    os.makedirs(out, exist_ok=True)
    for name, (tensors, meta) in SEEDS.items():
        header, data = safetensors_parts(tensors, meta)
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + data)
        if len(data) < 64:
            with open(os.path.join(out, name + ".body"), "wb") as f:
                f.write(bytes([len(data)]) + header + data)


if __name__ == "__main__":
    main()
