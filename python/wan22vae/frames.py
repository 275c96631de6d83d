"""Decoded video -> uint8 frames [T, H, W, 3] on the host, for writers such as imageio, in one transfer.

The arithmetic is diffusers' own postprocess (VaeImageProcessor: denormalize, pt_to_numpy, numpy_to_pil), so the
frames equal the PIL images a diffusers pipeline returns, bit for bit:
    x = (video * 0.5 + 0.5).clamp(0, 1)     in the video's dtype (bf16: each op rounded to bf16)
    u8 = round(float32(x) * 255)            round half to even, as numpy's .round()
rounding="floor" gives what export_to_video makes of output_type="np" frames ((frame * 255).astype(uint8)).

On a GPU the conversion runs there, frames in chunks into one uint8 buffer, which then crosses to a pinned host
buffer in one copy (not frame by frame).
"""
import sys

import numpy as np

from ._lib import fail

_CHUNK_ELEMENTS = 1 << 26  # elements of the video converted at once on the GPU (bounds the float32 temporaries)


def _video_cf(video):
    """[3, F, H, W] view of a video [1, 3, F, H, W] or [3, F, H, W]."""
    shape = tuple(video.shape)
    if len(shape) == 5 and shape[0] == 1:
        video = video[0]
    elif len(shape) != 4:
        raise fail("W22_ERR_BAD_SHAPE", f"video {list(shape)}, expected [1, 3, F, H, W] or [3, F, H, W] (one video "
                   "at a time)")
    if video.shape[0] != 3:
        raise fail("W22_ERR_BAD_SHAPE", f"video {list(shape)} has {video.shape[0]} channels, expected 3")
    return video


def to_uint8_frames(video, rounding="round", pin=True):
    """uint8 numpy frames [F, H, W, 3] of a video [1, 3, F, H, W] in [-1, 1] (a torch tensor on any device, or a
    numpy array)."""
    if rounding not in ("round", "floor"):
        raise fail("W22_ERR_INVALID_ARG", f"rounding {rounding!r}, expected 'round' or 'floor'")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(video, torch.Tensor):
        return _torch_frames(torch, _video_cf(video.detach()), rounding, pin)
    try:
        v = np.asarray(video)
    except (TypeError, ValueError) as e:
        raise fail("W22_ERR_BAD_DTYPE", f"video is a {type(video).__name__} numpy cannot take as an array ({e}); "
                   "expected a video [1, 3, F, H, W] of real numbers") from None
    if v.dtype.kind not in "fiub":
        raise fail("W22_ERR_BAD_DTYPE", f"video has dtype {v.dtype}; expected float32, float16 or bfloat16 values in "
                   "[-1, 1]")
    v = _video_cf(v)
    if v.dtype not in (np.float32, np.float16, np.float64):
        v = v.astype(np.float32)
    x = np.clip(v * v.dtype.type(0.5) + v.dtype.type(0.5), 0, 1).astype(np.float32) * np.float32(255)
    x = np.round(x) if rounding == "round" else np.floor(x)
    return np.ascontiguousarray(x.astype(np.uint8).transpose(1, 2, 3, 0))


def _torch_frames(torch, v, rounding, pin):
    C, F, H, W = v.shape
    frames = torch_convert(torch, v, rounding, torch.empty((F, H, W, C), dtype=torch.uint8, device=v.device))
    if not frames.is_cuda:
        return frames.numpy()
    host = torch.empty(frames.shape, dtype=torch.uint8, pin_memory=pin)
    host.copy_(frames, non_blocking=pin)
    torch.cuda.current_stream(frames.device).synchronize()
    return host.numpy()


def torch_convert(torch, v, rounding, frames):
    """to_uint8_frames' conversion of a torch tensor v [C, F, H, W] into frames (uint8 [F, H, W, C], on v's device)
    in chunks of frames; returns frames. No copy between devices, no synchronization."""
    C, F, H, W = v.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, C * H * W))
    for f in range(0, F, step):
        x = (v[:, f:f + step] * 0.5 + 0.5).clamp(0, 1).float() * 255
        x = x.round() if rounding == "round" else x.floor()
        frames[f:f + step] = x.to(torch.uint8).permute(1, 2, 3, 0)
    return frames
