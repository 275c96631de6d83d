"""Progress and Ctrl-C for a Decoder's calls, through the library's progress callback.

The C callback (w22_decoder_params.progress) is fixed when the decoder is opened, so every Decoder holds one ctypes
callback (a Hook) for its whole life; each call of the decoder points the hook at that call's reporter (a callable,
a tqdm bar, or nothing) and clears it afterwards. The library calls the hook after every pass (frames_per_pass
latent frames, 2 by default) from the thread that called the decode; the hook returns nonzero to stop the decode. (On
a GPU a pass is counted when its work is queued; a stopped decode leaves the queued work to finish on the stream.)

Ctrl-C: while a call runs on the main thread and SIGINT has Python's default handler, a handler that only sets a flag
replaces it (the previous one is restored when the call ends). Python runs that handler only between bytecodes of the
main thread, which sits in the C call for a whole pass (seconds to minutes on the CPU), so the call also points
Python's signal wakeup fd (signal.set_wakeup_fd, written by CPython's C-level handler the moment the signal comes) at
a socket that a watcher thread reads: on SIGINT it sets the decoder's stop flag (w22_decoder_set_interrupt), which
the library reads between ops and inside its long loops, and the decode returns within a second (issue 47: 6.9 s
seen before); the call then raises KeyboardInterrupt. The previous wakeup fd is restored when the call ends. An exception
the reporter raises (or another SIGINT handler the caller installed) stops the decode the same way and propagates.
With several ranks (a comm) nothing stops a decode (a rank that stopped alone would leave the others waiting in a
collective): the exception or KeyboardInterrupt is raised when the decode has ended.
"""
import contextlib
import ctypes
import signal
import socket
import sys
import threading
import time

from . import _lib


class Hook:
    """One decoder's progress callback: inactive (returns 0 at once) outside its decoder's calls."""

    def __init__(self):
        self.active = False
        self.reporter = None
        self.stoppable = True
        self.offset = 0          # latent frames of the batch's earlier elements
        self.total = 0           # latent frames of the whole call
        self.interrupted = False
        self.error = None
        self.cfunc = _lib.PROGRESS_FN(self._callback)
        self.stop_flag = ctypes.c_int(0)  # the decoder's stop flag (w22_decoder_set_interrupt), for its life

    def _callback(self, user, done, total):
        try:
            if not self.active:
                return 0
            if self.error is None and not self.interrupted and self.reporter is not None:
                self.reporter(self.offset + int(done), self.total)
            return 1 if self.stoppable and (self.interrupted or self.error is not None) else 0
        except BaseException as e:  # noqa: B036 (KeyboardInterrupt from another handler, SystemExit: stop, re-raise)
            self.error = e
            return 1 if self.stoppable else 0

    def _on_sigint(self, signum, frame):
        self.interrupted = True
        if self.stoppable:
            self.stop_flag.value = 1

    def _watch(self, sock):
        """The watcher thread: the signal numbers CPython's C handler writes to the wakeup fd, until it closes."""
        try:
            while True:
                data = sock.recv(64)
                if not data:
                    return
                if signal.SIGINT in data:
                    self.interrupted = True
                    if self.stoppable:
                        self.stop_flag.value = 1
        except OSError:
            return

    @contextlib.contextmanager
    def _wakeup(self):
        """Within it, SIGINT reaches the watcher at once (see the module's doc); nothing where it cannot be set up."""
        try:
            r, w = socket.socketpair()
            w.setblocking(False)
            old = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            yield
            return
        watcher = threading.Thread(target=self._watch, args=(r,), name="wan22vae-sigint", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            signal.set_wakeup_fd(old, warn_on_full_buffer=False)
            w.close()
            try:
                r.shutdown(socket.SHUT_RDWR)  # ends the watcher's recv
            except OSError:
                pass
            watcher.join()
            r.close()

    @contextlib.contextmanager
    def call(self, progress, total, stoppable=True):
        """The scope of one decoder call: progress (None, False, True or a callable (done, total)), total latent
        frames. Within it, raise_pending() before each C call and after one that failed."""
        reporter, closer = make_reporter(progress, total)
        self.reporter, self.total, self.offset = reporter, int(total), 0
        self.stoppable, self.interrupted, self.error = stoppable, False, None
        self.stop_flag.value = 0
        previous = None
        installed = False
        # also when the decode cannot stop (several ranks): Python's own handler would raise KeyboardInterrupt on the
        # callback's first line, where ctypes would only print it and drop it
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    previous = signal.signal(signal.SIGINT, self._on_sigint)
                    installed = True
            except (ValueError, OSError):  # not the main interpreter, or no signals here
                installed = False
        self.active = True
        try:
            with (self._wakeup() if installed else contextlib.nullcontext()):
                yield self
        finally:
            self.active = False
            if installed:
                signal.signal(signal.SIGINT, previous)
            self.reporter = None
            if closer is not None:
                try:
                    closer()
                except Exception:
                    pass

    def raise_pending(self):
        """Raises what stopped (or should stop) the call: the reporter's exception, or KeyboardInterrupt."""
        if self.error is not None:
            e, self.error = self.error, None
            raise e
        if self.interrupted:
            raise KeyboardInterrupt("wan22vae: the decode was stopped by Ctrl-C (SIGINT)")


class _StderrLines:
    """progress=True without tqdm: a line on stderr per pass, at most one every 0.5 s (and the last)."""

    def __init__(self, total):
        self.total, self.t0, self.last = total, time.monotonic(), -1.0

    def __call__(self, done, total):
        now = time.monotonic()
        if done < total and now - self.last < 0.5:
            return
        self.last = now
        sys.stderr.write(f"wan22vae: {done}/{total} latent frames decoded ({100 * done // max(total, 1)}%, "
                         f"{now - self.t0:.1f} s)\n")
        sys.stderr.flush()


class _Bar:
    def __init__(self, tqdm, total):
        self.bar = tqdm(total=total, unit="latent frame", desc="wan22vae decode", dynamic_ncols=True)

    def __call__(self, done, total):
        self.bar.update(done - self.bar.n)

    def close(self):
        self.bar.close()


def make_reporter(progress, total):
    """(reporter, closer) for a call's progress argument: None/False: none; True: a tqdm bar when tqdm is installed,
    else lines on stderr; a callable: called as progress(latent_frames_done, latent_frames_total)."""
    if progress is None or progress is False:
        return None, None
    if progress is True:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return _StderrLines(total), None
        bar = _Bar(tqdm, total)
        return bar, bar.close
    if callable(progress):
        return progress, None
    raise _lib.fail("W22_ERR_INVALID_ARG", f"progress is a {type(progress).__name__}; expected True (a tqdm bar), "
                    "False/None, or a callable progress(latent_frames_done, latent_frames_total)")
