"""A minimal safetensors reader over numpy memory maps (no torch, no safetensors package): the sharded diffusers
folders the C loader does not take in one call, and the files w22_weights_save writes (for tests that move the
library's synthetic weights into torch). BF16 tensors come back as raw uint16 arrays."""
import json
import os
import struct

import numpy as np

# safetensors dtype -> (numpy dtype of the raw elements, the library's dtype name)
DTYPES = {"F32": (np.float32, "f32"), "F16": (np.float16, "f16"), "BF16": (np.uint16, "bf16")}


def read_header(path):
    """(header dict without __metadata__, metadata dict, data start offset); raises ValueError on a bad file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: {size} bytes, too short for a safetensors file (expected an 8-byte header "
                             "length)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100 << 20:
            raise ValueError(f"{path}: header length {n} does not fit the file's {size} bytes")
        header = json.loads(f.read(n))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        if not 0 <= begin <= end <= size - 8 - n:
            raise ValueError(f"{path}: tensor '{name}' has data offsets [{begin}, {end}) beyond the data's "
                             f"{size - 8 - n} bytes")
    return header, meta, 8 + n


def open_arrays(path, names=None):
    """{name: (raw numpy array, shape, safetensors dtype)} for the named tensors (all when None), memory-mapped
    read-only."""
    header, _, start = read_header(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, t in header.items():
        if names is not None and name not in names:
            continue
        if t["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has dtype {t['dtype']}; expected F32, BF16 or F16")
        npdt = np.dtype(DTYPES[t["dtype"]][0])
        begin, end = t["data_offsets"]
        shape = tuple(int(s) for s in t["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * npdt.itemsize:
            raise ValueError(f"{path}: tensor '{name}' {t['dtype']}{list(shape)} needs {count * npdt.itemsize} "
                             f"bytes, its offsets give {end - begin}")
        raw = mm[start + begin:start + end]
        if (raw.ctypes.data % npdt.itemsize) != 0:
            raw = raw.copy()
        out[name] = (raw.view(npdt).reshape(shape), shape, t["dtype"])
    return out


def bf16_to_f32(raw_u16):
    """Raw bfloat16 bits (uint16) to float32, exactly."""
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)
