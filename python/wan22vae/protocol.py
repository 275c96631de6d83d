"""The seed benchmark's protocol (shared/seeds/harness-protocol-reference.txt):

    prepare(weights, rank, world, pg) -> list[Tensor]     once per process, not timed
    run(z, weights, rank, world, pg, out)                 the timed call

weights are the decoder's 110 bf16 tensors on the rank's GPU in diffusers' order (the Wan2.1 VAE's: 108); z
[1, z_dim, T, h, w] bf16 on every rank; out the video [1, 3, 4T-3, 16h, 16w] (Wan2.1: 8h, 8w) bf16 on rank 0 (an
empty tensor elsewhere). prepare copies the
weights to the host once and opens a CUDA decoder (with an NCCL group when world > 1), kept in a module-level
table keyed by the weights' addresses, rank and world; it returns the weights list itself, unchanged.

run only checks shapes, dtypes and placement in Python (no tensor op: it launches no ATen kernel) and makes one
call, w22_decode_device, on the current torch stream; it writes neither z nor the weights, starts no thread, and
the decoder holds no state from call to call that changes a result. Its decoder has no progress callback (no Python
code runs during the call). When prepare was not called, the first run
opens the decoder itself (a few seconds: the weights go through the host once), later runs are the fast path.
"""
import ctypes
import sys

from . import _dist
from ._lib import Error, check, fail, lib
from .decoder import Decoder, check_latent_dims, make_config, parse_size, video_shape, weights_from_tensors

# (the weights' data_ptrs, rank, world) -> _Entry
_DECODERS = {}
# the work-memory budget of the decoders opened from now on, in bytes (0: none): set_memory_budget
_MEMORY_BUDGET = 0
# the band count of the decoders opened from now on (0: the whole frame): set_bands
_BANDS = 0


def set_memory_budget(size):
    """The work-memory budget (Decoder's memory_budget: bytes or a size such as "2.5G"; None or 0: none) of the
    decoders prepare and run open from now on; decoders already open keep theirs (release() first). The bench's
    --memory-budget."""
    global _MEMORY_BUDGET
    _MEMORY_BUDGET = parse_size(size)


def set_bands(n):
    """The band count (Decoder's bands: 0 or 1 the whole frame, 2..64 a band decode; the library checks the range)
    of the decoders prepare and run open from now on; decoders already open keep theirs (release() first). The
    bench's --bands."""
    global _BANDS
    _BANDS = n


class _Entry:
    def __init__(self, decoder, comm, device, config):
        self.decoder, self.comm, self.device = decoder, comm, device
        self.handle = decoder.handle
        self.cfg = make_config(config)
        self.z_dim = self.cfg.z_dim
        self.shapes = {}  # (T, h, w) -> video shape

    def video(self, T, h, w):
        s = self.shapes.get((T, h, w))
        if s is None:
            f, H, W = video_shape(self.cfg, T, h, w)
            s = self.shapes[(T, h, w)] = (1, 3, f, H, W)
        return s

    def close(self):
        self.decoder.close()
        _dist.free_comm(self.comm)
        self.comm = None


def _key(weights, rank, world):
    return tuple(t.data_ptr() for t in weights), int(rank), int(world)


def _config_of(weights):
    """The config the tensors are shaped for: the structure from their count (110: TI2V-5B's, 108: the Wan2.1
    VAE's), z_dim from post_quant_conv.weight, base_dim from norm_out.gamma (the rest the structure's defaults; the
    library checks every shape against it)."""
    if len(weights) not in (110, 108):
        raise fail("W22_ERR_INVALID_ARG", f"{len(weights)} weight tensors, expected 110 (Wan2.2 TI2V-5B) or 108 (the "
                   "Wan2.1 VAE) in diffusers' order")
    return {"z_dim": int(weights[0].shape[0]), "base_dim": int(weights[-3].shape[0]),
            "is_residual": int(len(weights) == 110)}


def _local_weights(weights):
    """The weights on the host in the library's hands, and the GPU they live on; raises wan22vae.Error."""
    torch = sys.modules["torch"]
    config = _config_of(weights)
    devices = {t.device for t in weights}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        raise fail("W22_ERR_INVALID_ARG", f"the weights are on {sorted(str(d) for d in devices)}; expected one GPU")
    dtypes = {t.dtype for t in weights}
    if dtypes != {torch.bfloat16}:
        raise fail("W22_ERR_BAD_DTYPE", f"weight dtypes {sorted(str(d) for d in dtypes)}; expected torch.bfloat16")
    return weights_from_tensors(list(weights), config), next(iter(devices)), config


def _open(weights, rank, world, pg):
    """A decoder for these weights on this rank; with world > 1, every rank raises when any rank fails."""
    if world == 1:
        w, device, config = _local_weights(weights)
        try:
            dec = Decoder(w, device=device, progress_hook=False, memory_budget=_MEMORY_BUDGET, bands=_BANDS)
            return _Entry(dec, None, device, config)
        finally:
            w.free()
    w = device = config = None
    try:
        w, device, config = _local_weights(weights)
        ok, reason = True, None
    except Error as e:
        ok, reason = False, str(e)
    gpu = device if device is not None else weights[0].device
    failed = _dist.first_failure(_dist.agree(pg, ok, reason, gpu))
    if failed:
        if w is not None:
            w.free()
        raise Error("W22_ERR_COMM", f"prepare on rank {rank} of {world}: not every rank could start ({failed})")
    comm = dec = None
    try:
        comm = _dist.nccl_comm(pg, rank, world, device.index)
        dec = Decoder(w, device=device, comm=comm, progress_hook=False, memory_budget=_MEMORY_BUDGET,
                      bands=_BANDS)
        ok, reason = True, None
    except Error as e:
        ok, reason = False, str(e)
    finally:
        w.free()
    failed = _dist.first_failure(_dist.agree(pg, ok, reason, device))
    if failed:
        if dec is not None:
            dec.close()
        _dist.free_comm(comm)
        raise Error("W22_ERR_COMM", f"prepare on rank {rank} of {world}: not every rank could open its decoder "
                    f"({failed})")
    return _Entry(dec, comm, device, config)


def prepare(weights, rank, world, pg):
    """Opens this rank's decoder (not timed). Returns the weights list itself."""
    key = _key(weights, rank, world)
    if key not in _DECODERS:
        _DECODERS[key] = _open(weights, rank, world, pg)
    return weights


def run(z, weights, rank, world, pg, out):
    """Decodes z into out (rank 0) on the current torch stream; returns when the video is written."""
    key = _key(weights, rank, world)
    entry = _DECODERS.get(key)
    if entry is None:  # prepare was skipped: the first call opens the decoder (slow), later calls find it
        entry = _DECODERS[key] = _open(weights, rank, world, pg)
    torch = sys.modules["torch"]
    if not isinstance(z, torch.Tensor) or z.dim() != 5 or z.shape[0] != 1 or z.shape[1] != entry.z_dim:
        raise fail("W22_ERR_BAD_SHAPE", f"z {list(getattr(z, 'shape', []))}, expected [1, {entry.z_dim}, T, h, w]")
    if z.dtype != torch.bfloat16 or z.device != entry.device or not z.is_contiguous():
        raise fail("W22_ERR_BAD_DTYPE" if z.dtype != torch.bfloat16 else "W22_ERR_INVALID_ARG",
                   f"z is {z.dtype} on {z.device}{'' if z.is_contiguous() else ', not contiguous'}; expected "
                   f"contiguous torch.bfloat16 on {entry.device} (run makes no copies)")
    T, h, w = check_latent_dims(int(z.shape[2]), int(z.shape[3]), int(z.shape[4]), entry.z_dim)
    out_ptr = None
    if rank == 0:
        shape = entry.video(T, h, w)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != torch.bfloat16 \
                or out.device != entry.device or not out.is_contiguous():
            raise fail("W22_ERR_BAD_SHAPE", f"out is {getattr(out, 'dtype', type(out).__name__)} "
                       f"{list(getattr(out, 'shape', []))} on {getattr(out, 'device', '?')}; expected contiguous "
                       f"torch.bfloat16 {list(shape)} on {entry.device}")
        out_ptr = out.data_ptr()
    stream = torch.cuda.current_stream(entry.device).cuda_stream
    with entry.decoder.lock():  # release() in another thread waits for this decode (and a later run raises)
        check(lib().w22_decode_device(entry.decoder.handle, ctypes.c_void_p(z.data_ptr()), T, h, w,
                                      ctypes.c_void_p(out_ptr), ctypes.c_void_p(stream)))


def device_bytes():
    """Device memory the library holds for the decoders prepare opened (weights and workspace), in bytes; 0 when none
    is open. The bench records it beside torch's figures."""
    return sum(e.decoder.device_bytes() for e in list(_DECODERS.values()))


def release():
    """Frees every decoder (and NCCL group) prepare or run opened."""
    while _DECODERS:
        _, entry = _DECODERS.popitem()
        entry.close()
