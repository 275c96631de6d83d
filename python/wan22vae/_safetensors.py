"""A minimal safetensors reader over numpy memory maps (no torch, no safetensors package) for the files
w22_weights_save writes: Weights.state_dict and numpy_dict read the library's weights back through one (weight
files and sharded indexes are the library's to read: load_weights). BF16 tensors come back as raw uint16 arrays.

Every problem with a file (absent, unreadable, a malformed header, offsets beyond the data) is a wan22vae.Error
(W22_ERR_IO or W22_ERR_FORMAT) whose message names the file, what was found and what was expected."""
import json
import os
import struct

import numpy as np

from ._lib import fail

# safetensors dtype -> (numpy dtype of the raw elements, the library's dtype name)
DTYPES = {"F32": (np.float32, "f32"), "F16": (np.float16, "f16"), "BF16": (np.uint16, "bf16")}

MAX_HEADER_BYTES = 100 << 20


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _open_error(path, e, what="a safetensors file"):
    """wan22vae.Error for an OSError met opening or reading path."""
    reason = e.strerror or str(e)
    if isinstance(e, FileNotFoundError):
        return fail("W22_ERR_IO", f"{path}: no such file; expected {what} there")
    return fail("W22_ERR_IO", f"{path}: cannot be read ({reason}); expected {what}")


def read_header(path):
    """(header dict without __metadata__, metadata dict, data start offset); raises wan22vae.Error (W22_ERR_IO,
    W22_ERR_FORMAT) naming the file for a missing, unreadable or malformed file."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a folder")
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise fail("W22_ERR_FORMAT", f"{path}: {size} bytes, too short for a safetensors file (expected an "
                           "8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > MAX_HEADER_BYTES:
                raise fail("W22_ERR_FORMAT", f"{path}: header length {n} does not fit the file's {size} bytes "
                           f"(expected at most {min(size - 8, MAX_HEADER_BYTES)})")
            text = f.read(n)
    except OSError as e:
        raise _open_error(path, e) from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise fail("W22_ERR_FORMAT", f"{path}: the header is not JSON ({e}); expected a safetensors header") from None
    if not isinstance(header, dict):
        raise fail("W22_ERR_FORMAT", f"{path}: the header is a JSON {type(header).__name__}, expected an object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise fail("W22_ERR_FORMAT", f"{path}: __metadata__ is a JSON {type(meta).__name__}, expected an object")
    data_bytes = size - 8 - n
    for name, t in header.items():
        where = f"{path}: tensor '{name}'"
        if not isinstance(t, dict):
            raise fail("W22_ERR_FORMAT", f"{where} is a JSON {type(t).__name__}, expected an object with dtype, shape "
                       "and data_offsets")
        missing = [k for k in ("dtype", "shape", "data_offsets") if k not in t]
        if missing:
            raise fail("W22_ERR_FORMAT", f"{where} has no {', '.join(missing)}; expected dtype, shape and "
                       "data_offsets")
        if not isinstance(t["dtype"], str):
            raise fail("W22_ERR_FORMAT", f"{where} has dtype {t['dtype']!r}, expected a string such as \"BF16\"")
        shape = t["shape"]
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise fail("W22_ERR_FORMAT", f"{where} has shape {shape!r}, expected a list of non-negative integers")
        offs = t["data_offsets"]
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs):
            raise fail("W22_ERR_FORMAT", f"{where} has data_offsets {offs!r}, expected [begin, end] (integers)")
        begin, end = offs
        if not 0 <= begin <= end <= data_bytes:
            raise fail("W22_ERR_FORMAT", f"{where} has data offsets [{begin}, {end}) beyond the data's {data_bytes} "
                       "bytes")
    return header, meta, 8 + n


def open_arrays(path, names=None):
    """{name: (raw numpy array, shape, safetensors dtype)} for the named tensors (all when None), memory-mapped
    read-only. Raises wan22vae.Error naming the file and the tensor."""
    path = os.fspath(path)
    header, _, start = read_header(path)
    mm = None
    out = {}
    for name, t in header.items():
        if names is not None and name not in names:
            continue
        if t["dtype"] not in DTYPES:
            raise fail("W22_ERR_BAD_DTYPE", f"{path}: tensor '{name}' has dtype {t['dtype']}; expected F32, BF16 or "
                       "F16")
        npdt = np.dtype(DTYPES[t["dtype"]][0])
        begin, end = t["data_offsets"]
        shape = tuple(int(s) for s in t["shape"])
        count = 1
        for s in shape:
            count *= s
        if end - begin != count * npdt.itemsize:
            raise fail("W22_ERR_FORMAT", f"{path}: tensor '{name}' {t['dtype']}{list(shape)} needs "
                       f"{count * npdt.itemsize} bytes, its offsets give {end - begin}")
        if count == 0:
            out[name] = (np.zeros(shape, npdt), shape, t["dtype"])
            continue
        if mm is None:
            try:
                mm = np.memmap(path, dtype=np.uint8, mode="r")
            except OSError as e:
                raise _open_error(path, e) from None
        raw = mm[start + begin:start + end]
        if (raw.ctypes.data % npdt.itemsize) != 0:
            raw = raw.copy()
        out[name] = (raw.view(npdt).reshape(shape), shape, t["dtype"])
    return out


def bf16_to_f32(raw_u16):
    """Raw bfloat16 bits (uint16) to float32, exactly."""
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)
