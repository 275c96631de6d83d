"""Ranks over a torch.distributed process group: agreeing (every rank learns every rank's verdict, so that all
raise or fall back together instead of some hanging in a collective) and making the library's NCCL group (rank 0
makes the id, the group's broadcast hands it over)."""
import contextlib
import ctypes
import sys

from . import _lib
from ._lib import Error, check, lib


def _dist():
    import torch.distributed as dist
    return dist


def _device_ctx(device):
    torch = sys.modules["torch"]
    if device is not None and torch.device(device).type == "cuda":
        return torch.cuda.device(torch.device(device))
    return contextlib.nullcontext()


def group_src(pg, group_rank=0):
    """The global rank of group rank group_rank (the src the object collectives take)."""
    dist = _dist()
    if pg is None or pg is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(pg, group_rank)


def agree(pg, ok, reason, device=None):
    """[(ok, reason)] of every rank of pg (in group rank order), each rank passing its own. device: the GPU whose
    stream an NCCL group uses for the exchange (the object collectives stage through the current device)."""
    dist = _dist()
    world = dist.get_world_size(pg)
    got = [None] * world
    with _device_ctx(device):
        dist.all_gather_object(got, (bool(ok), reason), group=pg)
    return got


def first_failure(verdicts):
    """'rank r: reason' of the first rank that could not, or None when all could."""
    for r, (ok, reason) in enumerate(verdicts):
        if not ok:
            return f"rank {r}: {reason}"
    return None


def nccl_comm(pg, rank, world, cuda_device):
    """This rank's w22_comm over NCCL for the ranks of pg (a collective: every rank of pg calls it). Raises
    wan22vae.Error on every rank when any rank fails before the NCCL group is formed."""
    dist = _dist()
    uid = ctypes.create_string_buffer(_lib.NCCL_ID_BYTES)
    payload = [None]
    if rank == 0:
        try:
            check(lib().w22_nccl_unique_id(uid))
            payload = [("ok", uid.raw)]
        except Error as e:
            payload = [("error", e.status, e.message)]
    with _device_ctx(f"cuda:{cuda_device}"):
        dist.broadcast_object_list(payload, src=group_src(pg, 0), group=pg)
    if payload[0][0] == "error":
        raise Error(payload[0][1], f"rank 0 could not make the NCCL id: {payload[0][2]}")
    comm = ctypes.c_void_p()
    check(lib().w22_comm_nccl(payload[0][1], rank, world, cuda_device, ctypes.byref(comm)),
          f"rank {rank} of {world}: w22_comm_nccl")
    return comm


def free_comm(comm):
    if comm:
        lib().w22_comm_free(comm)
