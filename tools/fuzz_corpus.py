#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzzer (tests/fuzz_safetensors.c) into tests/fuzz_corpus/.

Small valid files in every dtype, with and without __metadata__, escapes and a prefixed name; each one also in
the fuzzer's second form ([byte d][JSON][d data bytes], the header length left to the harness). Plain Python, no
packages. Run from the repository root: python3 tools/fuzz_corpus.py
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


def main():
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
