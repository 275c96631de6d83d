"""ctypes over libwan22vae: finding the library, the C structs, every function's signature, and status checks.

The library is found (in this order) at $W22_LIB, in this package's directory (the copy `pip install` placed
there), or in the repo's build/ directory (a source checkout after `make`). Every C call goes through check(),
which turns a failed status into wan22vae.Error carrying the C library's own message.
"""
import ctypes
import os
import threading

W22_OK = 0
DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2
DEVICE_CPU, DEVICE_CUDA = 0, 1
KERNELS_AUTO, KERNELS_PORTABLE = 0, 1  # w22_kernels
NCCL_ID_BYTES = 128

_HERE = os.path.dirname(os.path.abspath(__file__))
LIB_NAME = "libwan22vae.so"


class Error(RuntimeError, ValueError):
    """A failed call of libwan22vae: status is the C status name ("W22_ERR_BAD_SHAPE"), message the C library's
    message (what failed, what was expected). Checks this package makes itself, for what the C API cannot see
    (a tensor's rank, z_dim, dtype, device, latent sizes, weight files and shard indexes), use the same status
    names. Every error that comes from the caller's input is this class; it is a RuntimeError and also a
    ValueError (so code that caught the ValueError numpy or json used to raise for bad input still catches it)."""

    def __init__(self, status, message):
        self.status = status
        self.message = message
        super().__init__(f"{status}: {message}")


class Config(ctypes.Structure):
    """w22_config: the decoder's structure (diffusers' AutoencoderKLWan config)."""
    _fields_ = [
        ("z_dim", ctypes.c_int),
        ("base_dim", ctypes.c_int),
        ("dim_mult", ctypes.c_int * 4),
        ("num_res_blocks", ctypes.c_int),
        ("temporal_up", ctypes.c_int * 3),
        ("out_channels", ctypes.c_int),
        ("patch_size", ctypes.c_int),
        ("is_residual", ctypes.c_int),
    ]


PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)


# w22_frames_fn (host float32 frames) and w22_device_frames_fn (device bf16 frames): (user, frames, frame0, nframes,
# height, width) -> nonzero to stop the decode
FRAMES_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int,
                             ctypes.c_int, ctypes.c_int, ctypes.c_int)
DEVICE_FRAMES_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int)


class DecoderParams(ctypes.Structure):
    """w22_decoder_params."""
    _fields_ = [
        ("device", ctypes.c_int),
        ("cuda_device", ctypes.c_int),
        ("frames_per_pass", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("comm", ctypes.c_void_p),
        ("video_on_all_ranks", ctypes.c_int),
        ("progress", PROGRESS_FN),
        ("progress_user", ctypes.c_void_p),
        ("check", ctypes.c_int),
        ("exact", ctypes.c_int),
        ("kernels", ctypes.c_int),  # w22_kernels: KERNELS_AUTO or KERNELS_PORTABLE
        ("work_budget_bytes", ctypes.c_size_t),  # the work-memory budget in bytes (0: the default plan)
        ("bands", ctypes.c_int),  # a band decode in this many bands of latent rows (0 or 1: the whole frame)
        # w22_decoder_params_init writes the whole C struct: room for fields a newer library adds at its end, so
        # that a library newer than this file never writes past the Python struct (init gives them defaults).
        ("_reserved", ctypes.c_char * 256),
    ]


_c_int, _c_void_p, _c_char_p, _c_size_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
_cfg_p = ctypes.POINTER(Config)
_pp = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes)
_SIGNATURES = {
    "w22_status_string": (_c_char_p, [_c_int]),
    "w22_last_error": (_c_char_p, []),
    "w22_dtype_size": (_c_size_t, [_c_int]),
    "w22_config_default": (None, [_cfg_p]),
    "w22_config_wan21": (None, [_cfg_p]),
    "w22_config_check": (_c_int, [_cfg_p]),
    "w22_video_shape": (None, [_cfg_p, _c_int, _c_int, _c_int, ctypes.POINTER(_c_int), ctypes.POINTER(_c_int),
                               ctypes.POINTER(_c_int)]),
    "w22_decode_flops": (ctypes.c_double, [_cfg_p, _c_int, _c_int, _c_int]),
    "w22_weights_load": (_c_int, [_c_char_p, _cfg_p, _pp]),
    "w22_weights_synthetic": (_c_int, [_cfg_p, ctypes.c_uint64, _pp]),
    "w22_weights_from_memory": (_c_int, [_cfg_p, _pp, _c_int, _pp]),
    "w22_weights_from_device": (_c_int, [_cfg_p, _pp, _c_int, _c_int, _pp]),
    "w22_weights_save": (_c_int, [_c_void_p, _c_char_p, _c_int]),
    "w22_weights_free": (None, [_c_void_p]),
    "w22_weights_config": (_cfg_p, [_c_void_p]),
    "w22_weight_count": (_c_int, [_cfg_p]),
    "w22_weight_name": (_c_char_p, [_cfg_p, _c_int]),
    "w22_weight_shape": (_c_int, [_cfg_p, _c_int, ctypes.POINTER(ctypes.c_int64)]),
    "w22_latents_synthetic": (_c_int, [_cfg_p, ctypes.c_uint64, _c_int, _c_int, _c_int, _c_void_p]),
    "w22_nccl_unique_id": (_c_int, [ctypes.c_char_p]),
    "w22_comm_nccl": (_c_int, [ctypes.c_char_p, _c_int, _c_int, _c_int, _pp]),
    "w22_comm_free": (None, [_c_void_p]),
    "w22_decoder_params_init": (None, [ctypes.POINTER(DecoderParams)]),
    "w22_decoder_open": (_c_int, [_c_void_p, ctypes.POINTER(DecoderParams), _pp]),
    "w22_version": (_c_char_p, []),
    "w22_decoder_free": (None, [_c_void_p]),
    "w22_decoder_path": (_c_char_p, [_c_void_p]),
    "w22_decoder_set_interrupt": (None, [_c_void_p, ctypes.POINTER(_c_int)]),
    "w22_decoder_release_workspace": (_c_int, [_c_void_p]),
    "w22_decode": (_c_int, [_c_void_p, _c_void_p, _c_int, _c_int, _c_int, _c_int, _c_void_p, _c_int]),
    "w22_decode_device": (_c_int, [_c_void_p, _c_void_p, _c_int, _c_int, _c_int, _c_void_p, _c_void_p]),
    "w22_decode_frames": (_c_int, [_c_void_p, _c_void_p, _c_int, _c_int, _c_int, _c_int, FRAMES_FN, _c_void_p]),
    "w22_decode_device_frames": (_c_int, [_c_void_p, _c_void_p, _c_int, _c_int, _c_int, DEVICE_FRAMES_FN, _c_void_p,
                                          _c_void_p]),
    "w22_decoder_device_bytes": (_c_size_t, [_c_void_p]),
    "w22_cuda_available": (_c_int, []),
}

_lock = threading.Lock()
_lib = None
_path = None


def candidates():
    """Where the library is looked for, in order."""
    out = []
    if os.environ.get("W22_LIB"):
        out.append(os.environ["W22_LIB"])
    out.append(os.path.join(_HERE, LIB_NAME))
    out.append(os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", LIB_NAME))
    return out


def lib():
    """The loaded library (loaded on first use), or wan22vae.Error saying where it was looked for."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            explicit = os.environ.get("W22_LIB") == path
            if not os.path.exists(path):
                tried.append(f"{path} (absent)")
                if explicit:
                    break  # W22_LIB names the library to load: a missing one is not replaced by another in silence
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                if explicit:
                    break  # an explicit choice that fails is not silently replaced by another library
                continue
            for name, (res, args) in _SIGNATURES.items():
                fn = getattr(handle, name)
                fn.restype, fn.argtypes = res, args
            _lib, _path = handle, path
            return _lib
        raise Error("W22_ERR_UNSUPPORTED", "libwan22vae.so could not be loaded; tried " + "; ".join(tried) +
                    ". Build it with `make` in the repo root, install the package with `pip install ./python`, "
                    "or set W22_LIB to its path")


def path():
    """The path of the loaded library (loads it)."""
    lib()
    return _path


def status_name(status):
    return lib().w22_status_string(status).decode()


def check(status, context=None):
    """Raises wan22vae.Error for a failed status, with the C library's message (and this call's context)."""
    if status == W22_OK:
        return
    message = (lib().w22_last_error() or b"").decode(errors="replace")
    if context:
        message = f"{context}: {message}" if message else context
    raise Error(status_name(status), message)


def fail(status_name_, message):
    """An error found in Python, for what the C API cannot see, in the same form as the C library's."""
    return Error(status_name_, message)


DTYPE_NAMES = {DTYPE_F32: "float32", DTYPE_BF16: "bfloat16", DTYPE_F16: "float16"}
