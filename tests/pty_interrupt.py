# tests/pty_interrupt.py (for test_cli_faults.sh) BIN OUT [args...]: runs BIN decode ... OUT under a pseudo-terminal, presses Ctrl-C once the temporary
# output exists and the decode has run 1 s, and prints "ack=S stop=S exit=RC left=N": seconds from the Ctrl-C to the
# acknowledgement on the terminal and to the process's end, its exit code, and the files left at OUT*.
import glob, os, pty, select, sys, time
binary, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(binary, [binary, "decode", *args, "-o", out])
buf, t_tmp, t_int, t_ack = b"", None, None, None
deadline = time.monotonic() + 120
status = None
while time.monotonic() < deadline:
    r, _, _ = select.select([fd], [], [], 0.01)
    if r:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        buf += data
        if t_int is not None and t_ack is None and b"stopping the decode" in buf:
            t_ack = time.monotonic()
    now = time.monotonic()
    if t_tmp is None and glob.glob(out + ".tmp-*"):
        t_tmp = now
    if t_tmp is not None and t_int is None and now - t_tmp >= 1.0:
        os.write(fd, b"\x03")  # the terminal's interrupt character: SIGINT to the foreground group
        t_int = now
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        status = st
        break
t_end = time.monotonic()
if status is None:
    os.kill(pid, 9); os.waitpid(pid, 0)
try:
    while True:
        r, _, _ = select.select([fd], [], [], 0.05)
        if not r: break
        d = os.read(fd, 4096)
        if not d: break
        buf += d
except OSError:
    pass
rc = os.waitstatus_to_exitcode(status) if status is not None else -9
left = len(glob.glob(out + "*"))
ack = (t_ack - t_int) if (t_ack and t_int) else -1
stop = (t_end - t_int) if t_int else -1
print(f"ack={ack:.2f} stop={stop:.2f} exit={rc} left={left}")
sys.stderr.write(buf.decode(errors="replace"))
