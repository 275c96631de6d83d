"""Decoder.frames: a video's frames handed over while the decode runs (issue 30, point 3).

The decode (w22_decode_device_frames, or w22_decode_frames for host latents) runs in a thread of its own, holding
the decoder's lock; ctypes lets go of the GIL for it. Its callback converts each finished batch (the library's buffer
is valid only during the callback) and puts it in a bounded queue, waiting while the queue is full, so that at most
`depth` converted batches wait for the reader. The reader (the thread iterating) takes them from the queue. When the
reader stops early (break, an exception, close() of the iterator), the stop flag makes the next callback return
nonzero, the library ends the decode at that point and the thread ends; the iterator's close() waits for it. An
error of the decode, or an exception of the conversion, is raised in the reader.
"""
import queue
import sys
import threading

import numpy as np

from . import _lib
from ._lib import check, fail


class CudaArray:
    """Device memory as __cuda_array_interface__ (int16 elements: bf16 has no typestr; view the tensor as bf16)."""

    def __init__(self, ptr, shape):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<i2", "data": (int(ptr), False),
                                         "strides": None, "version": 2}


class Stream:
    """One frames() iterator: call(handle, on_frames) -> status runs the decode with on_frames as the C callback;
    convert(ptr, n, H, W) copies a batch out of the library's buffer (the frames' axis is `axis`)."""

    def __init__(self, decoder, call, convert, axis, batch, depth):
        self.decoder, self.call, self.convert, self.axis, self.batch = decoder, call, convert, axis, batch
        self.queue = queue.Queue(depth)
        self.stop = threading.Event()
        self.thread = None
        self.reader = None
        self.error = None

    # ---- the decode's thread ----
    def _hand_over(self, item):
        """Puts item in the queue, waiting while it is full; False when the reader has stopped."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def _on_frames(self, user, ptr, frame0, n, height, width):
        try:
            if self.stop.is_set():
                return 1
            return 0 if self._hand_over((frame0, self.convert(ptr, n, height, width))) else 1
        except BaseException as e:  # noqa: B036 (ctypes would only print it): stop, and raise it in the reader
            self.error = e
            return 1

    def _work(self):
        err = None
        try:
            with self.decoder.lock():
                if not self.stop.is_set():
                    status = self.call(self.decoder.handle, self._on_frames)
                    if self.error is not None:
                        err = self.error
                    elif status != _lib.W22_OK and not self.stop.is_set():
                        check(status)  # here: the library's message is this thread's
        except BaseException as e:  # noqa: B036
            err = e
        self._hand_over((None, err))

    # ---- the reader ----
    def run(self):
        """The generator of (frame0, frames)."""
        me = threading.get_ident()
        streams = self.decoder._streams
        if any(s.reader == me for s in list(streams)):
            raise fail("W22_ERR_INVALID_ARG", "a second frames() iterator of this decoder read in the thread that "
                       "reads another one: each waits for the other's decode (the decoder takes one at a time); "
                       "finish or close() the first, or use another Decoder")
        self.reader = me
        streams.add(self)
        self.thread = threading.Thread(target=self._work, name="wan22vae-frames", daemon=True)
        try:
            self.thread.start()
            yield from self._batches()
        finally:
            self.stop.set()
            if self.thread.is_alive():
                self.thread.join()
            streams.discard(self)

    def _items(self):
        while True:
            if self.stop.is_set():  # set by the decoder's close() (the reader's own stop ends this generator)
                raise fail("W22_ERR_INVALID_ARG", "the decoder was closed while its frames() iterator ran")
            try:
                frame0, x = self.queue.get(timeout=0.1)
            except queue.Empty:
                if self.thread.is_alive() or not self.queue.empty():
                    continue
                raise fail("W22_ERR_INTERNAL", "the frames() decode's thread ended without a result") from None
            if frame0 is None:
                if x is not None:
                    raise x
                return
            yield frame0, x

    def _batches(self):
        if self.batch is None:
            yield from self._items()
            return
        pending, count, first = [], 0, 0
        for frame0, x in self._items():
            if not pending:
                first = frame0
            pending.append(x)
            count += x.shape[self.axis]
            while count >= self.batch:
                head, rest = _split(_cat(pending, self.axis), self.axis, self.batch)
                yield first, head
                first, count = first + self.batch, count - self.batch
                pending = [rest] if count else []
        if pending:
            yield first, _cat(pending, self.axis)


def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _cat(xs, axis):
    if len(xs) == 1:
        return xs[0]
    return sys.modules["torch"].cat(xs, dim=axis) if _is_tensor(xs[0]) else np.concatenate(xs, axis=axis)


def _split(x, axis, k):
    """(the first k frames of x, the rest), each contiguous."""
    at = (slice(None),) * axis
    a, b = x[at + (slice(0, k),)], x[at + (slice(k, None),)]
    if _is_tensor(x):
        return a.contiguous(), b.contiguous()
    return np.ascontiguousarray(a), np.ascontiguousarray(b)
