"""Configs, weights and the Decoder: the Python face of w22_weights_* and w22_decoder_*.

    dec = wan22vae.Decoder.from_pretrained("Wan2.2-TI2V-5B-Diffusers", subfolder="vae")   # device="auto"
    video = dec(z)                      # z: torch CUDA [B, 48, T, h, w] -> bf16 [B, 3, 4T-3, 16h, 16w]

On the CPU (device="cpu", or "auto" where no GPU can be used) the decoder takes numpy arrays or CPU torch tensors
and returns float32 video. torch is imported only where a torch tensor is involved, so the package works with numpy
alone.
"""
import contextlib
import ctypes
import glob
import json
import logging
import os
import re
import sys
import tempfile
import threading

import numpy as np

from . import _lib
from . import _progress
from . import _safetensors
from . import _stream
from ._lib import Error, check, fail, lib
from .frames import to_uint8_frames, torch_convert

logger = logging.getLogger("wan22vae")

CONFIG_KEYS = ("z_dim", "base_dim", "dim_mult", "num_res_blocks", "temporal_up", "out_channels", "patch_size",
               "is_residual")

# The latent sizes the library decodes (src/decoder.c, check_shape): checked here before any allocation or C call.
MAX_T = 100000
MAX_HW = 4096


def check_latent_dims(T, h, w, z_dim=None):
    """(T, h, w) as ints when each is a whole number in [1, MAX_T] / [1, MAX_HW]; else wan22vae.Error
    (W22_ERR_BAD_SHAPE) naming the sizes and the limits. No C call, no allocation."""
    dims = []
    for v in (T, h, w):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise fail("W22_ERR_BAD_SHAPE", f"latent sizes T={T!r} h={h!r} w={w!r}: expected whole numbers (T in "
                       f"[1, {MAX_T}], h and w in [1, {MAX_HW}])")
        dims.append(int(v))
    T, h, w = dims
    if not (1 <= T <= MAX_T and 1 <= h <= MAX_HW and 1 <= w <= MAX_HW):
        zd = "z_dim" if z_dim is None else z_dim
        raise fail("W22_ERR_BAD_SHAPE", f"latents [1, {zd}, {T}, {h}, {w}]: T, h and w must be positive (T <= "
                   f"{MAX_T}, h, w <= {MAX_HW})")
    return T, h, w


def _torch():
    """torch if it is importable, else None (never imports it when nothing asked for a tensor)."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    try:
        import torch
        return torch
    except ImportError:
        return None


def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


# ---- configs ----
def default_config():
    """Wan2.2 TI2V-5B's decoder config as a dict (z_dim 48, base_dim 256, ...)."""
    c = _lib.Config()
    lib().w22_config_default(ctypes.byref(c))
    return config_to_dict(c)


def wan21_config():
    """The Wan2.1 VAE's decoder config as a dict (z_dim 16, base_dim 96, out_channels 3, patch_size 1, is_residual 0):
    the VAE of Wan2.1, Wan2.2 A14B, Qwen-Image and their kin."""
    c = _lib.Config()
    lib().w22_config_wan21(ctypes.byref(c))
    return config_to_dict(c)


def model_name(config):
    """"Wan2.2 TI2V-5B" or "Wan2.1": which VAE's structure a config (dict or Config) has."""
    r = config.is_residual if isinstance(config, _lib.Config) else dict(config).get("is_residual", 1)
    return "Wan2.2 TI2V-5B" if r else "Wan2.1"


def config_to_dict(c):
    return {"z_dim": c.z_dim, "base_dim": c.base_dim, "dim_mult": list(c.dim_mult),
            "num_res_blocks": c.num_res_blocks, "temporal_up": list(c.temporal_up),
            "out_channels": c.out_channels, "patch_size": c.patch_size, "is_residual": c.is_residual}


def make_config(config=None, **overrides):
    """A checked w22_config from a dict of CONFIG_KEYS (missing keys: the default's, TI2V-5B's; with is_residual 0
    the Wan2.1 VAE's), a diffusers AutoencoderKLWan config (it has 'temperal_downsample'), or None (the default);
    overrides win."""
    c = _lib.Config()
    lib().w22_config_default(ctypes.byref(c))
    try:
        d = dict(config or {})
    except (TypeError, ValueError):
        raise fail("W22_ERR_INVALID_ARG", f"config is a {type(config).__name__}; expected a dict of "
                   f"{list(CONFIG_KEYS)} or a diffusers AutoencoderKLWan config") from None
    if "temperal_downsample" in d or "decoder_base_dim" in d:
        d = config_from_diffusers(d)
    d.update(overrides)
    if not d.get("is_residual", 1):  # missing keys from the Wan2.1 VAE's defaults
        lib().w22_config_wan21(ctypes.byref(c))
    unknown = sorted(set(d) - set(CONFIG_KEYS))
    if unknown:
        raise fail("W22_ERR_INVALID_ARG", f"config: unknown keys {unknown}; expected some of {list(CONFIG_KEYS)}")
    for k, v in d.items():
        if k in ("dim_mult", "temporal_up"):
            n = 4 if k == "dim_mult" else 3
            if not isinstance(v, (list, tuple)) or len(v) != n or not all(_small_int(x) for x in v):
                raise fail("W22_ERR_INVALID_ARG", f"config: {k} is {v!r}, expected a list of {n} integers")
            setattr(c, k, (ctypes.c_int * n)(*[int(x) for x in v]))
        else:
            if not _small_int(v):
                raise fail("W22_ERR_INVALID_ARG", f"config: {k} is {v!r}, expected an integer")
            setattr(c, k, int(v))
    check(lib().w22_config_check(ctypes.byref(c)))
    return c


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(size, what="memory_budget"):
    """Bytes from an int (bytes) or a string with an optional unit K, M, G or T (powers of 1024; "2.5G", "2560M",
    "2.5GiB"), as the CLI's --memory-budget reads it; None and 0 are 0 (no budget). A bad value raises
    wan22vae.Error (W22_ERR_INVALID_ARG)."""
    if size is None:
        return 0
    if isinstance(size, bool):
        raise fail("W22_ERR_INVALID_ARG", f"{what}={size!r}; expected bytes or a size such as '2.5G'")
    if isinstance(size, int) and 0 <= size < 1 << 64:
        return size
    if isinstance(size, str):
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(?:([kKmMgGtT])[iI]?)?[bB]?", size.strip())
        if m:
            v = float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]
            if v < 1 << 50:
                return int(v)
    raise fail("W22_ERR_INVALID_ARG", f"{what}={size!r}; expected bytes (an int) or a size with an optional unit K, "
               "M, G or T (powers of 1024: '2.5G', '2560M'), at most 1P")


def _small_int(x):
    """Whether x is a whole number that fits a C int (bools count: diffusers' flags are booleans)."""
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return isinstance(x, (int, np.integer)) and -2**31 <= int(x) < 2**31


def config_from_diffusers(cfg):
    """Our config dict from a diffusers AutoencoderKLWan config (dict or FrozenDict): is_residual True is Wan2.2
    TI2V-5B's structure, False (diffusers' default) the Wan2.1 VAE's; patch_size None is 1. Raises wan22vae.Error for
    structure this library does not implement (attention scales, a field that is not a number)."""
    try:
        cfg = dict(cfg)
    except (TypeError, ValueError):
        raise fail("W22_ERR_INVALID_ARG", f"diffusers config is a {type(cfg).__name__}, expected a dict") from None
    problems = []
    if cfg.get("attn_scales"):
        problems.append(f"attn_scales {cfg.get('attn_scales')}, expected []")
    if problems:
        raise fail("W22_ERR_INVALID_ARG", "diffusers config: " + "; ".join(problems))
    down = cfg.get("temperal_downsample", [False, True, True])
    if not isinstance(down, (list, tuple)) or len(down) != 3:
        raise fail("W22_ERR_INVALID_ARG", f"diffusers config: temperal_downsample {down!r}, expected 3 booleans")
    try:
        return _diffusers_fields(cfg, down)
    except (TypeError, ValueError, KeyError) as e:
        raise fail("W22_ERR_INVALID_ARG", f"diffusers config: a field is not a number ({e}); expected integers for "
                   "z_dim, base_dim, decoder_base_dim, num_res_blocks, out_channels, patch_size") from None


def _diffusers_fields(cfg, down):
    return {"z_dim": int(cfg.get("z_dim", 16)),
            "base_dim": int(cfg.get("decoder_base_dim") or cfg.get("base_dim", 96)),
            "dim_mult": list(cfg.get("dim_mult", [1, 2, 4, 4])),
            "num_res_blocks": int(cfg.get("num_res_blocks", 2)),
            "temporal_up": [int(bool(x)) for x in down[::-1]],
            "out_channels": int(cfg.get("out_channels", 3)),
            "patch_size": int(cfg.get("patch_size") or 1),
            "is_residual": int(bool(cfg.get("is_residual", False)))}


def weight_table(config=None):
    """[(name, shape)] of the model's weights (110 for TI2V-5B, 108 for the Wan2.1 VAE), in diffusers'
    named_parameters() order."""
    c = config if isinstance(config, _lib.Config) else make_config(config)
    L = lib()
    out = []
    shape = (ctypes.c_int64 * 5)()
    for i in range(L.w22_weight_count(ctypes.byref(c))):
        nd = L.w22_weight_shape(ctypes.byref(c), i, shape)
        out.append((L.w22_weight_name(ctypes.byref(c), i).decode(), tuple(shape[:nd])))
    return out


def video_shape(config, T, h, w):
    """(frames, height, width) of the video for latents [*, z_dim, T, h, w]; wan22vae.Error (W22_ERR_BAD_SHAPE)
    for sizes the library does not decode (T in [1, MAX_T], h and w in [1, MAX_HW])."""
    c = config if isinstance(config, _lib.Config) else make_config(config)
    T, h, w = check_latent_dims(T, h, w, c.z_dim)
    f, H, W = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib().w22_video_shape(ctypes.byref(c), T, h, w, ctypes.byref(f), ctypes.byref(H), ctypes.byref(W))
    return f.value, H.value, W.value


def decode_flops(config, T, h, w):
    """Floating-point operations (2 per multiply-add) of one decode of latents [1, z_dim, T, h, w], as the library
    counts them (w22_decode_flops: the convolutions and attention's matrix products; docs/wan22-decoder.md).
    wan22vae.Error (W22_ERR_BAD_SHAPE) for sizes the library does not decode, as video_shape."""
    c = config if isinstance(config, _lib.Config) else make_config(config)
    T, h, w = check_latent_dims(T, h, w, c.z_dim)
    return float(lib().w22_decode_flops(ctypes.byref(c), T, h, w))


# ---- weights ----
class Weights:
    """A w22_weights handle and whatever memory it borrows. Thread-safe: free() (and the garbage collector) waits
    for the calls that read the weights (a decoder's open, save) to end; after it they raise wan22vae.Error."""

    def __init__(self, handle, keepalive=None):
        self._h = ctypes.c_void_p(handle)
        self._keep = keepalive
        self._cv = threading.Condition()
        self._users = 0  # calls into the library reading the weights now; free() waits for 0

    @contextlib.contextmanager
    def _use(self):
        """The handle, held for the length of a library call that reads the weights (the call releases the GIL:
        without this, free() from another thread unmapped them under the reader, a crash)."""
        with self._cv:
            if not self._h:
                raise fail("W22_ERR_INVALID_ARG", "these weights were freed")
            self._users += 1
        try:
            yield self._h
        finally:
            with self._cv:
                self._users -= 1
                self._cv.notify_all()

    @property
    def handle(self):
        if not self._h:
            raise fail("W22_ERR_INVALID_ARG", "these weights were freed")
        return self._h

    @property
    def config(self):
        with self._use() as h:
            return config_to_dict(lib().w22_weights_config(h).contents)

    def save(self, path, dtype="bf16"):
        """Writes a safetensors file with diffusers' names (post_quant_conv.*, decoder.*)."""
        code = _dtype_code(dtype)
        with self._use() as h:
            check(lib().w22_weights_save(h, os.fsencode(path), code))

    def state_dict(self, dtype="bf16"):
        """{diffusers name: torch CPU tensor} in diffusers' order (through a temporary safetensors file)."""
        torch = _torch()
        if torch is None:
            raise fail("W22_ERR_UNSUPPORTED", "Weights.state_dict needs torch; use numpy_dict() without it")
        raw = self._raw(dtype)
        out = {}
        for name, (arr, shape, st_dtype) in raw.items():
            if st_dtype == "BF16":
                out[name] = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16).reshape(shape)
            else:
                out[name] = torch.from_numpy(arr).reshape(shape)
        return out

    def numpy_dict(self):
        """{diffusers name: float32 numpy array} in diffusers' order."""
        return {n: np.array(a) for n, (a, _, _) in self._raw("f32").items()}

    def _raw(self, dtype):
        with tempfile.TemporaryDirectory(prefix="wan22vae-") as tmp:
            path = os.path.join(tmp, "weights.safetensors")
            self.save(path, dtype)
            arrays = _safetensors.open_arrays(path)
            order = [n for n, _ in weight_table(self.config)]
            return {n: (np.array(arrays[n][0]), arrays[n][1], arrays[n][2]) for n in order}

    def free(self):
        cv = getattr(self, "_cv", None)
        if cv is None:  # __init__ did not finish
            return
        with cv:
            while self._users:
                cv.wait()
            if self._h:
                lib().w22_weights_free(self._h)
                self._h = ctypes.c_void_p()
            self._keep = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


_DTYPE_CODES = {"f32": _lib.DTYPE_F32, "float32": _lib.DTYPE_F32, "bf16": _lib.DTYPE_BF16,
                "bfloat16": _lib.DTYPE_BF16, "f16": _lib.DTYPE_F16, "float16": _lib.DTYPE_F16}


def _dtype_code(dtype):
    key = str(dtype).replace("torch.", "").lower()
    if key not in _DTYPE_CODES:
        raise fail("W22_ERR_BAD_DTYPE", f"dtype {dtype}; expected float32, bfloat16 or float16")
    return _DTYPE_CODES[key]


def synthetic_weights(config=None, seed=0):
    """The library's deterministic synthetic weights (docs/synthetic.md) for a config (dict; None: TI2V-5B)."""
    c = make_config(config)
    h = ctypes.c_void_p()
    check(lib().w22_weights_synthetic(ctypes.byref(c), seed, ctypes.byref(h)))
    return Weights(h.value)


def synthetic_latents(config=None, seed=0, T=1, h=1, w=1):
    """The library's synthetic latents [1, z_dim, T, h, w] as a float32 numpy array."""
    c = make_config(config)
    T, h, w = check_latent_dims(T, h, w, c.z_dim)
    out = _host_empty((1, c.z_dim, T, h, w), np.float32, "the synthetic latents")
    check(lib().w22_latents_synthetic(ctypes.byref(c), seed, T, h, w, out.ctypes.data_as(ctypes.c_void_p)))
    return out


def _host_empty(shape, dtype, what):
    """np.empty, with wan22vae.Error (W22_ERR_OUT_OF_MEMORY) naming what and its bytes when the host has not the
    memory."""
    try:
        return np.empty(shape, dtype)
    except (MemoryError, ValueError) as e:
        nbytes = np.dtype(dtype).itemsize
        for s in shape:
            nbytes *= int(s)
        raise fail("W22_ERR_OUT_OF_MEMORY", f"{what} {list(shape)} ({nbytes} bytes) could not be allocated on the "
                   f"host ({type(e).__name__}: {e})") from None


INDEX_NAME = "diffusion_pytorch_model.safetensors.index.json"


def _find_weight_files(path, variant=None):
    """("file", path) or ("index", path of a sharded index): the weights of a diffusers VAE; path is a safetensors
    file, an index json, a VAE folder, or a pipeline folder with vae/."""
    if os.path.isfile(path):
        return ("index", path) if path.endswith(".index.json") else ("file", path)
    if not os.path.isdir(path):
        raise fail("W22_ERR_IO", f"{path}: no such file or folder; expected a safetensors file, a diffusers VAE folder "
                   "or a pipeline folder with vae/")
    folder = os.path.join(path, "vae") if os.path.isdir(os.path.join(path, "vae")) else path
    stem = "diffusion_pytorch_model" + (f".{variant}" if variant else "")
    indexes = [os.path.join(folder, stem + ".safetensors.index.json")]
    if variant:  # diffusers' own spelling of a variant's index
        indexes.append(os.path.join(folder, f"diffusion_pytorch_model.safetensors.index.{variant}.json"))
    for index in indexes:
        if os.path.isfile(index):
            return "index", index
    single = os.path.join(folder, stem + ".safetensors")
    if os.path.isfile(single):
        return "file", single
    found = sorted(glob.glob(os.path.join(folder, "diffusion_pytorch_model*.safetensors")))
    if variant is None and found:
        variants = sorted({os.path.basename(f).split(".")[1] for f in found
                           if len(os.path.basename(f).split(".")) == 3})
        if len(variants) == 1:
            return _find_weight_files(folder, variants[0])
        if variants:
            raise fail("W22_ERR_IO", f"{folder}: several variants of the weights ({', '.join(variants)}); pass "
                       "variant= to choose one")
        raise fail("W22_ERR_IO", f"{folder}: safetensors files ({', '.join(os.path.basename(f) for f in found)}) but "
                   f"no {INDEX_NAME} saying which tensor is where; expected the index next to them")
    raise fail("W22_ERR_IO", f"{folder}: no {stem}.safetensors (nor a sharded index) there")


def _read_config_json(path):
    try:
        with open(path, "rb") as f:
            config = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        raise _safetensors._open_error(path, e, "a diffusers config.json") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise fail("W22_ERR_FORMAT", f"{path}: not JSON ({e}); expected a diffusers AutoencoderKLWan config") from None
    if not isinstance(config, dict):
        raise fail("W22_ERR_FORMAT", f"{path}: a JSON {type(config).__name__}; expected a diffusers AutoencoderKLWan "
                   "config (an object)")
    return config


def load_weights(path, config=None, variant=None):
    """Weights from a safetensors file, a sharded index, or a diffusers VAE folder (sharded or not; fp32, bf16 or
    fp16). The config comes from config (a dict), else the folder's config.json, else it is inferred from the
    tensors. Every problem with the files is a wan22vae.Error naming the file."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise fail("W22_ERR_INVALID_ARG", f"path is a {type(path).__name__}; expected a file or folder path") from None
    kind, found = _find_weight_files(path, variant)
    if config is None:
        cj = os.path.join(os.path.dirname(found), "config.json")
        if os.path.isfile(cj):
            config = _read_config_json(cj)
    c = make_config(config) if config is not None else None
    # a file or a sharded index: the library maps and checks either (w22_weights_load)
    h = ctypes.c_void_p()
    check(lib().w22_weights_load(os.fsencode(found), ctypes.byref(c) if c is not None else None, ctypes.byref(h)))
    return Weights(h.value)


def _weights_from_named(config, named, source):
    """Weights from {name: (numpy array, safetensors dtype)}, checking every name and shape (the C side cannot
    check memory it is handed)."""
    table = weight_table(config)
    chosen = []
    for name, shape in table:
        if name not in named:
            raise fail("W22_ERR_MISSING_TENSOR", f"{source}: tensor '{name}' is missing; expected shape {list(shape)} "
                       f"(config z_dim {config['z_dim']}, base_dim {config['base_dim']})")
        arr, dt = named[name]
        if tuple(arr.shape) != tuple(shape):
            raise fail("W22_ERR_BAD_SHAPE", f"{source}: tensor '{name}' has shape {list(arr.shape)}, expected "
                       f"{list(shape)}")
        chosen.append((arr, dt))
    dtypes = {dt for _, dt in chosen}
    if len(dtypes) == 1:
        dt = dtypes.pop()
        arrays = [np.ascontiguousarray(a) for a, _ in chosen]
    else:  # mixed dtypes: everything in float32
        dt = "F32"
        arrays = [np.ascontiguousarray(_safetensors.bf16_to_f32(a) if d == "BF16" else a.astype(np.float32))
                  for a, d in chosen]
    return weights_from_host_arrays(config, arrays, {"F32": "f32", "BF16": "bf16", "F16": "f16"}[dt])


def weights_from_host_arrays(config, arrays, dtype):
    """Weights borrowing host memory: arrays are the model's tensors (110; the Wan2.1 VAE: 108) in its order (numpy
    arrays, or CPU torch tensors), contiguous, all of one dtype; they are kept alive by the returned object."""
    c = make_config(config)
    n = lib().w22_weight_count(ctypes.byref(c))
    if len(arrays) != n:
        raise fail("W22_ERR_INVALID_ARG", f"{len(arrays)} weight tensors, expected {n} (in diffusers' order)")
    ptrs = (ctypes.c_void_p * n)()
    for i, a in enumerate(arrays):
        ptrs[i] = a.data_ptr() if _is_tensor(a) else a.ctypes.data
    h = ctypes.c_void_p()
    check(lib().w22_weights_from_memory(ctypes.byref(c), ptrs, _dtype_code(dtype), ctypes.byref(h)))
    return Weights(h.value, keepalive=(list(arrays), c))


def weights_from_device_tensors(config, tensors, dtype, device):
    """Weights borrowing GPU memory: tensors are the model's contiguous CUDA tensors (110; Wan2.1: 108) of GPU
    `device` in its order, all of one dtype; they are kept alive by the returned object."""
    c = make_config(config)
    n = lib().w22_weight_count(ctypes.byref(c))
    if len(tensors) != n:
        raise fail("W22_ERR_INVALID_ARG", f"{len(tensors)} weight tensors, expected {n} (in diffusers' order)")
    ptrs = (ctypes.c_void_p * n)(*[t.data_ptr() for t in tensors])
    h = ctypes.c_void_p()
    check(lib().w22_weights_from_device(ctypes.byref(c), ptrs, _dtype_code(dtype), int(device), ctypes.byref(h)))
    return Weights(h.value, keepalive=(list(tensors), c))


def weights_from_tensors(tensors, config=None):
    """Weights from torch tensors or numpy arrays: a list in diffusers' order, or a dict by diffusers name
    (post_quant_conv.*, decoder.*; a 'vae.' prefix is allowed). Tensors all on one GPU stay there (borrowed: a CUDA
    decoder lays them out on that GPU; a CPU decoder copies them down); others are copied to the host."""
    c = make_config(config)
    table = weight_table(c)
    if isinstance(tensors, dict):
        named = {k[4:] if isinstance(k, str) and k.startswith("vae.") else k: v for k, v in tensors.items()}
        missing = [n for n, _ in table if n not in named]
        if missing:
            shape = dict(table)[missing[0]]
            raise fail("W22_ERR_MISSING_TENSOR", f"tensor '{missing[0]}' is missing ({len(missing)} in all); "
                       f"expected shape {list(shape)}")
        tensors = [named[n] for n, _ in table]
    try:
        tensors = list(tensors)
    except TypeError:
        raise fail("W22_ERR_INVALID_ARG", f"weights are a {type(tensors).__name__}; expected a list of tensors in "
                   "diffusers' order or a dict by diffusers name") from None
    if len(tensors) != len(table):
        raise fail("W22_ERR_INVALID_ARG", f"{len(tensors)} weight tensors, expected {len(table)} (in diffusers' "
                   "order)")
    tensors = [t if _is_tensor(t) else _numeric_array(t, f"tensor {name}") for (name, _), t in zip(table, tensors)]
    for (name, shape), t in zip(table, tensors):
        if tuple(t.shape) != tuple(shape):
            raise fail("W22_ERR_BAD_SHAPE", f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
    if all(_is_tensor(t) for t in tensors):
        torch = sys.modules["torch"]
        dts = {t.dtype for t in tensors}
        dt = dts.pop() if len(dts) == 1 else torch.float32
        if dt not in (torch.float32, torch.bfloat16, torch.float16):
            dt = torch.float32
        devs = {t.device for t in tensors}
        if len(devs) == 1 and next(iter(devs)).type == "cuda":
            # on one GPU: borrowed there (w22_weights_from_device), laid out there by a CUDA decoder, never through
            # the host (issue 30); the library reads them on its own stream, so what wrote them must be done
            dev = next(iter(devs))
            on = [t.detach().to(dtype=dt).contiguous() for t in tensors]
            torch.cuda.synchronize(dev)
            return weights_from_device_tensors(config_to_dict(c), on, str(dt), dev.index or 0)
        host = [t.detach().to("cpu", dt).contiguous() for t in tensors]
        return weights_from_host_arrays(config_to_dict(c), host, str(dt))
    arrays = [np.asarray(t) for t in tensors]
    dts = {a.dtype for a in arrays}
    dt = dts.pop() if len(dts) == 1 and dts <= {np.dtype(np.float32), np.dtype(np.float16)} else np.dtype(np.float32)
    host = [np.ascontiguousarray(a, dtype=dt) for a in arrays]
    return weights_from_host_arrays(config_to_dict(c), host, "f32" if dt == np.float32 else "f16")


# ---- availability ----
def cuda_available():
    """Whether this build of libwan22vae has the CUDA backend and a usable GPU (sm_80 or later) is present. False (not
    an exception) when the library itself cannot be loaded; cuda_unavailable_reason() says why."""
    try:
        return bool(lib().w22_cuda_available())
    except Error:
        return False


def cuda_unavailable_reason(plain=False):
    """Why the CUDA path cannot be used here (None when it can): the library's own message (no GPU, a GPU that is
    older than sm_80, a build without CUDA). plain: only the reason in words, without the status name and advice."""
    try:
        if lib().w22_cuda_available():
            return None
        # The backend says why when asked to open: a tiny decoder fails before any weight is uploaded.
        w = synthetic_weights({"z_dim": 4, "base_dim": 8}, 0)
        try:
            Decoder(w, device="cuda", progress_hook=False).close()
        finally:
            w.free()
        return "w22_cuda_available() found no usable GPU (sm_80 or later)"
    except Error as e:
        return (getattr(e, "why", None) or e.message) if plain else str(e)


def _numeric_array(x, what):
    """x as a numpy array of real numbers (no copy when it is one); wan22vae.Error (W22_ERR_BAD_DTYPE) naming what
    for anything else (strings, objects, complex numbers, ragged lists)."""
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise fail("W22_ERR_BAD_DTYPE", f"{what} is a {type(x).__name__} numpy cannot take as an array ({e}); "
                   "expected an array of real numbers") from None
    if a.dtype.kind not in "fiub":
        raise fail("W22_ERR_BAD_DTYPE", f"{what} has dtype {a.dtype}; expected float32 or float16 (or real numbers "
                   "to convert)")
    return a


def _parse_device(device, cuda_device):
    """(W22 device, ordinal) from "cpu", "cuda", "cuda:N" or a torch.device."""
    text = str(device)
    if text == "cpu":
        return _lib.DEVICE_CPU, 0
    if text == "cuda" or text.startswith("cuda:"):
        idx = text.split(":", 1)[1] if ":" in text else None
        if idx is not None and not idx.isdigit():
            raise fail("W22_ERR_INVALID_ARG", f"device {device!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N' (N a "
                       "GPU ordinal)")
        idx = int(idx) if idx is not None else None
        if idx is None:
            idx = cuda_device
        if idx is None:
            torch = sys.modules.get("torch")
            idx = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
        if not _small_int(idx) or int(idx) < 0:
            raise fail("W22_ERR_INVALID_ARG", f"cuda_device {idx!r}; expected a GPU ordinal >= 0")
        return _lib.DEVICE_CUDA, int(idx)
    raise fail("W22_ERR_INVALID_ARG", f"device {device!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N'")


def resolve_device(device="auto", cuda_device=None):
    """(W22 device, ordinal) for a device argument; "auto" (or None) is CUDA where the library can use a GPU
    (w22_cuda_available()), else the CPU, and says which on the "wan22vae" logger (INFO)."""
    if device is None or (isinstance(device, str) and device == "auto"):
        if cuda_available():
            kind, idx = _parse_device("cuda", cuda_device)
            logger.info("wan22vae: device='auto': decoding on cuda:%d (bf16 storage, fp32 accumulation)", idx)
            return kind, idx
        if logger.isEnabledFor(logging.INFO):
            logger.info("wan22vae: device='auto': decoding on the CPU (float32); no usable CUDA GPU: %s",
                        cuda_unavailable_reason(plain=True))
        return _lib.DEVICE_CPU, 0
    return _parse_device(device, cuda_device)


def _no_gpu_error(device, message):
    """The error for device='cuda' where no GPU can be used, in plain words (CUDA's own "driver version is
    insufficient" is what a machine without any NVIDIA driver gets)."""
    low = message.lower()
    if "insufficient" in low and "driver" in low:
        why = "no NVIDIA driver is loaded, or it is older than the CUDA runtime this library was built with"
    elif "no cuda-capable device" in low or "no cuda gpu" in low:
        why = "no CUDA GPU was found"
    else:
        why = message
    e = Error("W22_ERR_UNSUPPORTED", f"device {str(device)!r}: no usable CUDA GPU here ({why}); device='cpu' "
              "or device='auto' decodes on the CPU")
    e.why = why
    return e


def canonical_dtype(dtype, what="torch_dtype"):
    """None, or "float32" / "bfloat16" / "float16" for a torch dtype, a numpy dtype or a name ("bf16", ...)."""
    if dtype is None:
        return None
    key = str(dtype).replace("torch.", "").lower()
    if key not in _DTYPE_CODES:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            pass
    if key not in _DTYPE_CODES:
        raise fail("W22_ERR_BAD_DTYPE", f"{what} {dtype!r}; expected torch.float32, torch.bfloat16 or torch.float16")
    return _lib.DTYPE_NAMES[_DTYPE_CODES[key]]


def _hf_snapshot(repo_id, subfolder, revision=None, cache_dir=None, local_files_only=False, token=None):
    """A Hugging Face repo's files (subfolder/ only, when given) through huggingface_hub's cache: its local path."""
    try:
        import huggingface_hub
    except ImportError:
        raise fail("W22_ERR_IO", f"{repo_id}: no such file or folder here, and huggingface_hub is not installed to "
                   f"fetch it as a Hugging Face repo (pip install huggingface_hub, or download it first: "
                   f"hf download {repo_id} --include '{subfolder or ''}{'/' if subfolder else ''}*')") from None
    patterns = [f"{subfolder.strip('/')}/*"] if subfolder else ["*.json", "*.safetensors"]
    try:
        return huggingface_hub.snapshot_download(repo_id=repo_id, allow_patterns=patterns, revision=revision,
                                                 cache_dir=cache_dir, local_files_only=local_files_only, token=token)
    except Exception as e:
        raise fail("W22_ERR_IO", f"{repo_id}: no such file or folder here, and as a Hugging Face repo it could not "
                   f"be had: {type(e).__name__}: {e}") from None


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _frames_dtype(dtype):
    """None, "uint8" or the float name ("float32", ...) of Decoder.frames' dtype argument."""
    if dtype is None:
        return None
    key = str(dtype).replace("torch.", "").lower()
    try:
        if key == "uint8" or np.dtype(dtype) == np.uint8:
            return "uint8"
    except TypeError:
        pass
    try:
        return canonical_dtype(dtype, "dtype")
    except Error:
        raise fail("W22_ERR_BAD_DTYPE", f"dtype {dtype!r}; expected None (the video's), uint8 (frames [n, H, W, 3]), "
                   "or float32, bfloat16, float16 (frames [3, n, H, W])") from None


def _one_video(B, shape):
    if B != 1:
        raise fail("W22_ERR_BAD_SHAPE", f"latents {list(shape)}: frames() decodes one video ([1, z_dim, T, h, w] or "
                   "[z_dim, T, h, w]); iterate over the batch")


# ---- the decoder ----
class Decoder:
    """A decoder on the CPU (float32) or one GPU (bf16). Call it on latents [B, z_dim, T, h, w]:

    - a torch CUDA tensor (on the decoder's GPU): decoded on the current torch stream into a CUDA tensor
      [B, 3, 4T-3, 16h, 16w], bf16 (or torch_dtype; or into out=, contiguous, on the same GPU);
    - a numpy array or CPU torch tensor: decoded through host memory into float32 (numpy for numpy, a torch
      tensor for a torch tensor; torch_dtype for a tensor, float16 too for numpy), or into out= (float32, bfloat16 or
      float16; numpy: float32 or float16).

    weights: a Weights object (load_weights, synthetic_weights, weights_from_tensors), tensors in diffusers' order or
    by name, or a path (a safetensors file, a sharded index, a VAE or pipeline folder: load_weights(path); a Hugging
    Face repo id goes through Decoder.from_pretrained).

    B > 1 decodes the B latents one after another. Latents of 4 dims [z_dim, T, h, w] give a video of 4 dims.
    Validation errors are wan22vae.Error with the C library's message; the latent sizes are checked here (T in
    [1, MAX_T], h and w in [1, MAX_HW]) before anything is allocated or the library is called.

    device: "auto" (default: CUDA where the library can use a GPU, else the CPU; the "wan22vae" logger says which at
    INFO), "cpu", "cuda", "cuda:N" or a torch.device. torch_dtype: the video's dtype (None: bf16 on the GPU, float32
    on the CPU). exact=True (CUDA): every conv in the direct arithmetic (bf16 products, fp32 sums); the default runs the
    3x3x3 convs of 256 channels and up as Winograd F(4x4, 3x3) in fp16 (6.75 of 27 MACs, about 1.3x the direct conv's
    error, within the bench's allowance). The CPU backend is exact either way. kernels (CUDA): "auto" (the default: W22_KERNELS from
    the environment, else a Hopper's sm_90a kernels and the portable ones on any other GPU from sm_80 on) or
    "portable" (the portable kernels, a Hopper included); dec.path says which the decoder runs ("hopper", "portable"
    or "cpu").

    memory_budget: the decoder's work memory at most this much (on a GPU its memory beyond the weights): bytes, or a
    size such as "2.5G" or "2560M" (powers of 1024); None (the default) for the fastest plan. Under a budget the
    plan moves causal caches to host memory (pinned), the cheapest over the bus first, until it fits: the same video
    bit for bit, slower where the copies (overlapped with the convs) outrun them. At 704x1280 TI2V-5B's default plan
    takes 4.6 GiB; a 2.5G budget fits, and the smallest plan takes 2.26 GiB. A budget under 64 MiB fails the open; one
    below what a decode's size needs fails that decode (wan22vae.Error, the message naming both and the fewest bands
    whose smallest plan fits it). A default plan out of GPU memory names the smallest budget's need and the work of
    2, 4 and 8 bands.

    bands: 0 or 1 (the default) decodes the whole frame; N >= 2 (up to 64) is a band decode, stages 1-3 in N
    horizontal bands of latent rows one after another (fewer where the latents have fewer rows): the GPU memory of one
    band's causal caches (the Wan2.1 VAE at 1280x720: 3.24 GiB with the weights in 2 bands, 5.4 GiB whole) at about
    1.15-1.2x the time, within bf16 rounding of the whole frame, not the same bits. dec(z) only: a frame is whole only
    after the last band, so dec.frames(z) raises wan22vae.Error (W22_ERR_UNSUPPORTED), as does a comm of several
    ranks.

    Progress: dec(z, progress=True) shows a tqdm bar (lines on stderr without tqdm), dec(z, progress=fn) calls
    fn(latent_frames_done, latent_frames_total) after every pass (frames_per_pass latent frames, 2 by default); an
    exception fn raises stops the decode at the end of that pass and propagates. Ctrl-C (SIGINT) during a call on
    the main thread stops the decode within a second (the library's stop flag, read between ops and inside the CPU's
    long loops) and raises KeyboardInterrupt (with a comm, every rank's decode runs to its end first).
    progress_hook=False opens the decoder without the library's progress callback (no Python code runs during its
    decodes: no progress, Ctrl-C waits for the decode's end).

    Threads: one decoder may be used from several threads. Its calls take turns (a lock per decoder, held for the
    length of a call), and close() waits for a running decode before it frees the decoder; a decode after
    close() raises wan22vae.Error.

    Streaming: dec.frames(z) yields the video's frames in batches as they finish, while the decode runs (see
    frames)."""

    def __init__(self, weights, device="auto", cuda_device=None, frames_per_pass=0, threads=0, comm=None,
                 video_on_all_ranks=False, torch_dtype=None, progress_hook=True, exact=False, kernels="auto",
                 memory_budget=None, bands=0):
        self._lock = threading.Lock()
        self._streams = set()  # the frames() iterators running (_stream.Stream)
        self._h = ctypes.c_void_p()
        self._hook = _progress.Hook()
        if isinstance(weights, (str, bytes, os.PathLike)):  # a path (a str is a sequence: never tensors)
            weights = load_weights(os.fsdecode(weights))
        elif not isinstance(weights, Weights):
            weights = weights_from_tensors(weights)
        self.config = weights.config
        self._cfg = make_config(self.config)
        self.torch_dtype = canonical_dtype(torch_dtype)
        for name, v in (("frames_per_pass", frames_per_pass), ("threads", threads)):
            if not _small_int(v):
                raise fail("W22_ERR_INVALID_ARG", f"{name} {v!r}; expected an integer (0: the library's choice)")
        self.device_kind, self.cuda_device = resolve_device(device, cuda_device)
        p = _lib.DecoderParams()
        lib().w22_decoder_params_init(ctypes.byref(p))
        p.device, p.cuda_device = self.device_kind, self.cuda_device
        p.frames_per_pass, p.threads = int(frames_per_pass), int(threads)
        p.comm = comm
        p.video_on_all_ranks = int(bool(video_on_all_ranks))
        p.exact = int(bool(exact))  # CUDA: every conv direct (else the 3x3x3 convs of 256 channels up as Winograd)
        self.exact = bool(exact)
        kinds = {"auto": _lib.KERNELS_AUTO, "portable": _lib.KERNELS_PORTABLE}
        if not isinstance(kernels, str) or kernels not in kinds:
            raise fail("W22_ERR_INVALID_ARG", f"kernels={kernels!r}; expected 'auto' or 'portable'")
        p.kernels = kinds[kernels]
        self.kernels = kernels
        p.work_budget_bytes = self.memory_budget = parse_size(memory_budget)
        if isinstance(bands, bool) or not _small_int(bands):  # True is no count of bands; the range is the library's
            raise fail("W22_ERR_INVALID_ARG", f"bands {bands!r}; expected an integer: 0 or 1 (the whole frame) or "
                       "2..64")
        p.bands = self.bands = int(bands)
        if progress_hook:
            p.progress = self._hook.cfunc  # the decoder's one callback; each call points it at its reporter
        self.progress_hook = bool(progress_hook)
        self._comm = comm
        self.rank = 0
        h = ctypes.c_void_p()
        with weights._use() as wh:  # weights.free() from another thread waits for the open
            status = lib().w22_decoder_open(wh, ctypes.byref(p), ctypes.byref(h))
        if status != _lib.W22_OK:
            try:
                check(status)
            except Error as e:
                if self.device_kind == _lib.DEVICE_CUDA and comm is None and not lib().w22_cuda_available():
                    raise _no_gpu_error(device, e.message) from None
                raise
        self._h = h
        if progress_hook:  # Ctrl-C stops a decode within a second (_progress.py), not at its pass's end
            lib().w22_decoder_set_interrupt(h, ctypes.byref(self._hook.stop_flag))

    @classmethod
    def from_pretrained(cls, path, device="auto", subfolder=None, torch_dtype=None, variant=None, config=None,
                        revision=None, cache_dir=None, local_files_only=False, token=None, **kwargs):
        """A decoder from a safetensors file, a sharded index, a diffusers VAE folder, a pipeline folder with vae/,
        or (with huggingface_hub installed) a Hugging Face repo id such as "Wan-AI/Wan2.2-TI2V-5B-Diffusers"
        (revision, cache_dir, local_files_only and token go to huggingface_hub). subfolder: as in diffusers
        (from_pretrained(pipeline_dir, subfolder="vae")). device: "auto" (CUDA where usable, else the CPU), "cpu",
        "cuda" or "cuda:N". torch_dtype: the video's dtype (None: bf16 on the GPU, float32 on the CPU); the
        arithmetic is the device's own either way. Other keyword arguments go to Decoder (memory_budget="2.5G",
        bands=2, threads, ...)."""
        try:
            path = os.fspath(path)
        except TypeError:
            raise fail("W22_ERR_INVALID_ARG", f"path is a {type(path).__name__}; expected a file or folder path, or "
                       "a Hugging Face repo id") from None
        if subfolder is not None and not isinstance(subfolder, (str, os.PathLike)):
            raise fail("W22_ERR_INVALID_ARG", f"subfolder is a {type(subfolder).__name__}; expected a folder name")
        if not os.path.exists(path) and not os.path.isabs(path) and _REPO_ID.match(path):
            path = _hf_snapshot(path, os.fspath(subfolder) if subfolder else None, revision, cache_dir,
                                local_files_only, token)
        if subfolder:
            if os.path.isfile(path):
                raise fail("W22_ERR_INVALID_ARG", f"subfolder={os.fspath(subfolder)!r} with the file {path}; expected "
                           "a folder that holds it")
            path = os.path.join(path, os.fspath(subfolder))
        w = load_weights(path, config=config, variant=variant)
        try:
            return cls(w, device=device, torch_dtype=torch_dtype, **kwargs)
        finally:
            w.free()

    @classmethod
    def synthetic(cls, config=None, seed=0, device="auto", **kwargs):
        w = synthetic_weights(config, seed)
        try:
            return cls(w, device=device, **kwargs)
        finally:
            w.free()

    @property
    def handle(self):
        """The w22_decoder handle (for callers that make their own C calls: hold self.lock() around them, so that
        close() cannot free it meanwhile)."""
        if not self._h:
            raise fail("W22_ERR_INVALID_ARG", "this decoder was closed; expected a decoder that is open")
        return self._h

    def lock(self):
        """The decoder's lock: decodes hold it, close() takes it before freeing."""
        return self._lock

    @property
    def closed(self):
        return not self._h

    @property
    def path(self):
        """The kernels this decoder runs on: "hopper" (CUDA, the sm_90a kernels), "portable" (CUDA, the portable
        kernels: any sm_80+ GPU, or a Hopper asked for them) or "cpu"."""
        return lib().w22_decoder_path(self.handle).decode()

    @property
    def is_cuda(self):
        return self.device_kind == _lib.DEVICE_CUDA

    @property
    def device(self):
        """"cpu" or "cuda:N"."""
        return f"cuda:{self.cuda_device}" if self.is_cuda else "cpu"

    def video_shape(self, T, h, w):
        return video_shape(self._cfg, T, h, w)

    def device_bytes(self):
        self._check_not_reading("device_bytes()")
        with self._lock:
            return int(lib().w22_decoder_device_bytes(self.handle))

    def release_workspace(self):
        """Frees the workspace (device memory beyond the weights: tens of GiB after a 4K decode); the next decode
        makes it again for its size, with the same result as a fresh decoder's. Waits for a running decode."""
        self._check_not_reading("release_workspace()")
        with self._lock:
            check(lib().w22_decoder_release_workspace(self.handle))

    def _latent_dims(self, shape):
        """(B, T, h, w) of latents of this shape ([B, z_dim, T, h, w], or [z_dim, T, h, w] for B = 1), checked
        (z_dim, rank, sizes) before anything is allocated."""
        zd = self._cfg.z_dim
        try:
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise fail("W22_ERR_BAD_SHAPE", f"latents of shape {shape!r}, expected [B, {zd}, T, h, w]") from None
        if len(shape) == 4:
            shape = (1,) + shape
        if len(shape) != 5 or shape[0] < 1 or shape[1] != zd:
            raise fail("W22_ERR_BAD_SHAPE", f"latents {list(shape)}, expected [B, {zd}, T, h, w] with B >= 1 (or "
                       f"[{zd}, T, h, w])")
        return (shape[0],) + check_latent_dims(shape[2], shape[3], shape[4], zd)

    def __call__(self, z, out=None, progress=None):
        """Decodes latents z (see the class); progress: None, True (a tqdm bar) or fn(done, total) in latent
        frames. Returns the video (out when given)."""
        if not self._h:
            raise fail("W22_ERR_INVALID_ARG", "this decoder was closed; expected a decoder that is open")
        if progress is not None and progress is not False and not self.progress_hook:
            raise fail("W22_ERR_INVALID_ARG", "progress= on a decoder opened with progress_hook=False")
        self._check_not_reading("a decode")
        if _is_tensor(z) and z.is_cuda:
            B, T, out, step = self._plan_cuda(z, out)
        else:
            B, T, out, step = self._plan_host(z, out)
        with self._lock:
            handle = self.handle
            if not self.progress_hook:
                for b in range(B):
                    check(step(handle, b))
                return out
            with self._hook.call(progress, B * T, stoppable=self._comm is None) as hook:
                for b in range(B):
                    hook.raise_pending()  # Ctrl-C between two latents of a batch
                    hook.offset = b * T
                    status = step(handle, b)
                    if status != _lib.W22_OK:
                        hook.raise_pending()
                        check(status)
                hook.raise_pending()
        return out

    decode = __call__

    def _cuda_latents(self, z):
        """(the latents as the library takes them (bf16, contiguous, on this decoder's GPU), B, T, h, w) for CUDA
        latents."""
        torch = sys.modules["torch"]
        B, T, h, w = self._latent_dims(tuple(z.shape))
        if not self.is_cuda:
            raise fail("W22_ERR_UNSUPPORTED", "latents on a GPU, but this decoder runs on the CPU; pass host latents "
                       "(numpy or a CPU tensor) or open the decoder with device='cuda'")
        if z.device.index != self.cuda_device:
            raise fail("W22_ERR_INVALID_ARG", f"latents on {z.device}, the decoder on cuda:{self.cuda_device}")
        if z.dtype != torch.bfloat16 or not z.is_contiguous():
            if z.is_complex() or z.dtype == torch.bool:
                raise fail("W22_ERR_BAD_DTYPE", f"latents are {z.dtype}; expected torch.bfloat16 (or a real dtype to "
                           "convert)")
            z = z.to(torch.bfloat16).contiguous()
        return z, B, T, h, w

    def _plan_cuda(self, z, out):
        """(B, T, the video, step(handle, b) -> status) for CUDA latents."""
        torch = sys.modules["torch"]
        z, B, T, h, w = self._cuda_latents(z)
        F, H, W = self.video_shape(T, h, w)
        four = z.dim() == 4
        shape = (3, F, H, W) if four else (B, 3, F, H, W)
        if out is None:
            out = torch.empty(shape, dtype=getattr(torch, self.torch_dtype or "bfloat16"), device=z.device)
        else:
            check_device_out(out, shape, z.device, (torch.bfloat16, torch.float32, torch.float16))
        zb = z.view((1,) + tuple(z.shape)) if four else z
        ob = out.view((1,) + tuple(out.shape)) if four else out
        tmp = None if out.dtype == torch.bfloat16 else \
            torch.empty((1, 3, F, H, W), dtype=torch.bfloat16, device=z.device)

        def step(handle, b):
            dst = ob[b:b + 1] if tmp is None else tmp
            stream = torch.cuda.current_stream(z.device).cuda_stream
            status = lib().w22_decode_device(handle, ctypes.c_void_p(zb[b:b + 1].data_ptr()), T, h, w,
                                             ctypes.c_void_p(dst.data_ptr()), ctypes.c_void_p(stream))
            if status == _lib.W22_OK and tmp is not None:
                ob[b:b + 1].copy_(tmp)
            return status
        return B, T, out, step

    def _host_latents(self, z):
        """(the latents as the library takes them (contiguous float32, bfloat16 or float16), their dtype code, their
        address, B, T, h, w) for host latents (numpy or a CPU tensor), their shape checked before any copy."""
        if _is_tensor(z):
            torch = sys.modules["torch"]
            B, T, h, w = self._latent_dims(tuple(z.shape))  # before any copy
            if z.is_complex():
                raise fail("W22_ERR_BAD_DTYPE", f"latents are {z.dtype}; expected float32, bfloat16 or float16 (or "
                           "real numbers to convert)")
            if z.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                z = z.float()
            z = z.detach().contiguous()
            zt, zptr = _dtype_code(z.dtype), z.data_ptr()
        else:
            z = _numeric_array(z, "latents")
            B, T, h, w = self._latent_dims(z.shape)  # before any copy
            if z.dtype not in (np.float32, np.float16):
                z = z.astype(np.float32)
            z = np.ascontiguousarray(z)
            zt, zptr = (_lib.DTYPE_F32 if z.dtype == np.float32 else _lib.DTYPE_F16), z.ctypes.data
        return z, zt, zptr, B, T, h, w

    def _plan_host(self, z, out):
        """(B, T, the video, step(handle, b) -> status) for host latents (numpy or a CPU tensor)."""
        z, zt, zptr, B, T, h, w = self._host_latents(z)
        F, H, W = self.video_shape(T, h, w)
        shape = (B, 3, F, H, W) if len(z.shape) == 5 else (3, F, H, W)
        if out is None:
            if _is_tensor(z):
                torch = sys.modules["torch"]
                out = torch.empty(shape, dtype=getattr(torch, self.torch_dtype or "float32"))
            else:
                if self.torch_dtype == "bfloat16":
                    raise fail("W22_ERR_BAD_DTYPE", "torch_dtype bfloat16 with numpy latents: numpy has no bfloat16; "
                               "pass the latents as a torch tensor, or use float32 or float16")
                out = _host_empty(shape, np.float16 if self.torch_dtype == "float16" else np.float32, "the video")
        if _is_tensor(out):
            if out.is_cuda or not out.is_contiguous() or tuple(out.shape) != shape:
                raise fail("W22_ERR_BAD_SHAPE", f"out is a {'CUDA' if out.is_cuda else 'CPU'} tensor "
                           f"{list(out.shape)}{'' if out.is_contiguous() else ' (not contiguous)'}; expected a "
                           f"contiguous CPU tensor {list(shape)} for host latents")
            vt, vptr = _dtype_code(out.dtype), out.data_ptr()
        else:
            if not isinstance(out, np.ndarray) or tuple(out.shape) != shape or not out.flags.c_contiguous \
                    or not out.flags.writeable or out.dtype not in (np.float32, np.float16):
                # the message names each way out fails, so the caller sees which one
                found = [type(out).__name__, str(list(getattr(out, "shape", [])))]
                if isinstance(out, np.ndarray):
                    found.append(out.dtype.str if out.dtype.byteorder == ">" else str(out.dtype))
                    found += ["read-only"] * (not out.flags.writeable)
                    found += ["not C-contiguous"] * (not out.flags.c_contiguous)
                code = "W22_ERR_BAD_SHAPE" if not isinstance(out, np.ndarray) or tuple(out.shape) != shape \
                    else "W22_ERR_BAD_DTYPE" if out.dtype not in (np.float32, np.float16) else "W22_ERR_INVALID_ARG"
                raise fail(code, f"out is {' '.join(found)}; expected a writable C-contiguous float32/float16 "
                           f"(native byte order) ndarray {list(shape)}")
            vt, vptr = (_lib.DTYPE_F32 if out.dtype == np.float32 else _lib.DTYPE_F16), out.ctypes.data
        zstride = self._cfg.z_dim * T * h * w * int(lib().w22_dtype_size(zt))
        vstride = 3 * F * H * W * int(lib().w22_dtype_size(vt))
        def step(handle, b, _keep=(z, out)):  # _keep: the (converted) latents and the video alive while it runs
            return lib().w22_decode(handle, ctypes.c_void_p(zptr + b * zstride), zt, T, h, w,
                                    ctypes.c_void_p(vptr + b * vstride), vt)
        return B, T, out, step

    def frames(self, z, dtype=None, batch=None, rounding="round", depth=2):
        """Decodes the latents of one video (z [1, z_dim, T, h, w] or [z_dim, T, h, w]) and yields (frame0, frames)
        as the frames finish, in order, while the decode runs (in a thread of its own), so that a pipeline can encode
        or send the first frames before the clip is done:

            for frame0, x in dec.frames(z, dtype="uint8"):
                writer.write(x.cpu().numpy())            # x: frames [frame0, frame0 + len(x)), [n, H, W, 3]

        - CUDA latents (a torch tensor on this decoder's GPU; decoded on the current torch stream, as dec(z)): torch
          tensors on that GPU. dtype None: the video's dtype (torch_dtype; bf16 by default), [3, n, H, W], the frames'
          slice of dec(z)[0] bit for bit; "uint8": [n, H, W, 3], to_uint8_frames' conversion of those (rounding=),
          on the GPU, without a copy to the host (the batches put together are to_uint8_frames(dec(z))).
          w22_decode_device_frames.
        - Host latents (numpy or a CPU tensor), on any decoder: numpy arrays (torch CPU tensors for a tensor), through
          w22_decode_frames: float32 by default (torch_dtype for a tensor), [3, n, H, W]; "uint8" as above.
        dtype may also name float32, bfloat16 or float16 (numpy: not bfloat16).

        batch: None, the frames as the decoder finishes them (one at a time as the library plans today); N, batches
        of N frames (the last one may be shorter). depth: how many converted batches may
        wait for the reader (the decode waits while they do), so that memory stays bounded whatever T.

        Stopping early (break out of the loop, an exception in it, the iterator's close()) stops the decode at the
        next batch and waits for its thread to end; the decoder is usable afterwards. (break closes the iterator when
        the loop drops it; close() it yourself where you keep a reference.) An error of the decode (NaN latents, ...)
        is raised by the iterator as wan22vae.Error. The decode holds the decoder's lock until it ends: other calls
        of this decoder wait for it, and from the reading thread, where they would wait forever, they raise
        wan22vae.Error. close() stops a running iterator (which then raises wan22vae.Error)."""
        if not self._h:
            raise fail("W22_ERR_INVALID_ARG", "this decoder was closed; expected a decoder that is open")
        if self._comm is not None:
            raise fail("W22_ERR_UNSUPPORTED", "Decoder.frames with several ranks (a comm): decode with dec(z) on every "
                       "rank")
        want = _frames_dtype(dtype)
        if rounding not in ("round", "floor"):
            raise fail("W22_ERR_INVALID_ARG", f"rounding {rounding!r}, expected 'round' or 'floor'")
        for name, v in (("batch", batch), ("depth", depth)):
            if (v is not None or name == "depth") and (not _small_int(v) or int(v) < 1):
                raise fail("W22_ERR_INVALID_ARG", f"{name} {v!r}; expected a whole number >= 1"
                           f"{' or None (as the decoder finishes them)' if name == 'batch' else ''}")
        self._check_not_reading("frames()")
        if _is_tensor(z) and z.is_cuda:
            call, convert = self._frames_cuda(z, want, rounding)
        else:
            call, convert = self._frames_host(z, want, rounding)
        axis = 0 if want == "uint8" else 1
        return _stream.Stream(self, call, convert, axis, None if batch is None else int(batch), int(depth)).run()

    def _frames_cuda(self, z, want, rounding):
        torch = sys.modules["torch"]
        z, B, T, h, w = self._cuda_latents(z)
        _one_video(B, z.shape)
        video_dt = getattr(torch, self.torch_dtype or "bfloat16")
        out_dt = None if want == "uint8" else getattr(torch, want or self.torch_dtype or "bfloat16")
        dev = z.device
        stream = torch.cuda.current_stream(dev)

        def convert(ptr, n, H, W):  # on the decode's thread, on its stream: runs before the decode writes again
            src = torch.as_tensor(_stream.CudaArray(ptr, (3, n, H, W)), device=dev).view(torch.bfloat16)
            if out_dt is not None:
                return src.to(out_dt, copy=True)
            v = src if video_dt == torch.bfloat16 else src.to(video_dt)
            return torch_convert(torch, v, rounding, torch.empty((n, H, W, 3), dtype=torch.uint8, device=dev))

        def call(handle, on_frames):
            fn = _lib.DEVICE_FRAMES_FN(on_frames)
            with torch.cuda.device(dev), torch.cuda.stream(stream):
                return lib().w22_decode_device_frames(handle, ctypes.c_void_p(z.data_ptr()), T, h, w, fn, None,
                                                      ctypes.c_void_p(stream.cuda_stream))
        return call, convert

    def _frames_host(self, z, want, rounding):
        z, zt, zptr, B, T, h, w = self._host_latents(z)
        _one_video(B, z.shape)
        as_torch = _is_tensor(z)
        if as_torch:
            torch = sys.modules["torch"]
            video_dt = getattr(torch, self.torch_dtype or "float32")
            out_dt = None if want == "uint8" else getattr(torch, want or self.torch_dtype or "float32")
        else:
            if want == "bfloat16" or (want in (None, "uint8") and self.torch_dtype == "bfloat16"):
                raise fail("W22_ERR_BAD_DTYPE", "bfloat16 frames with numpy latents: numpy has no bfloat16; pass the "
                           "latents as a torch tensor, or ask for float32, float16 or uint8")
            video_dt = np.float16 if self.torch_dtype == "float16" else np.float32
            out_dt = None if want == "uint8" else (np.dtype(want) if want else video_dt)

        def convert(ptr, n, H, W):
            x = np.ctypeslib.as_array(ptr, shape=(3, n, H, W))  # the library's buffer: valid during the call only
            if as_torch:
                x = torch.from_numpy(x.copy())
            if want == "uint8":
                u8 = to_uint8_frames(x.to(video_dt) if as_torch else x.astype(video_dt, copy=False), rounding)
                return torch.from_numpy(u8) if as_torch else u8
            return x.to(out_dt) if as_torch else x.astype(out_dt)

        def call(handle, on_frames, _keep=z):  # _keep: the (converted) latents alive while it runs
            fn = _lib.FRAMES_FN(on_frames)
            return lib().w22_decode_frames(handle, ctypes.c_void_p(zptr), zt, T, h, w, fn, None)
        return call, convert

    def _check_not_reading(self, what):
        """Refuses a call that takes the decoder's lock from a thread that reads an unfinished frames() iterator of
        this decoder: that iterator's decode holds the lock and waits for the reader, which would wait forever."""
        me = threading.get_ident()
        if any(s.reader == me for s in list(self._streams)):
            raise fail("W22_ERR_INVALID_ARG", f"{what} inside a frames() loop of this decoder: the loop's decode holds "
                       "the decoder until the loop ends or its iterator is closed, and would wait for this call "
                       "forever; finish or close() the iterator first, or use another Decoder")

    def close(self):
        """Frees the decoder; waits for a decode running in another thread (and stops a frames() iterator's decode
        first). Later decodes raise wan22vae.Error."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        for s in list(getattr(self, "_streams", ())):
            s.stop.set()
            if s.thread is not None and s.thread is not threading.current_thread() and s.thread.is_alive():
                s.thread.join()
        with lock:
            if self._h:
                h, self._h = self._h, ctypes.c_void_p()
                lib().w22_decoder_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def check_device_out(out, shape, device, dtypes=None):
    """out must be a contiguous CUDA tensor of this shape on this device, of one of dtypes (default: bf16 only; no
    copy is made of it)."""
    torch = sys.modules["torch"]
    dtypes = tuple(dtypes or (torch.bfloat16,))
    problems = []
    if not _is_tensor(out) or not out.is_cuda or out.device != device:
        problems.append(f"on {getattr(out, 'device', type(out).__name__)}, expected {device}")
    elif out.dtype not in dtypes:
        problems.append(f"dtype {out.dtype}, expected {' or '.join(str(d) for d in dtypes)}")
    elif tuple(out.shape) != tuple(shape):
        problems.append(f"shape {list(out.shape)}, expected {list(shape)}")
    elif not out.is_contiguous():
        problems.append("not contiguous")
    if problems:
        raise fail("W22_ERR_BAD_SHAPE" if "shape" in problems[0] or "contig" in problems[0] else "W22_ERR_BAD_DTYPE"
                   if "dtype" in problems[0] else "W22_ERR_INVALID_ARG", "out: " + problems[0])
