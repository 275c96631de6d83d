#!/usr/bin/env python3
"""The whole path to a video file (issue 30.4): the open, the decode, and the CLI end to end per output kind.

For each output kind (.y4m, .npy, .safetensors, a PNG folder, .mp4 where ffmpeg is installed) the CLI decodes the
same synthetic latents with the same synthetic TI2V-5B weights, timed as a whole process; the Python package
times the open (weights from the file, then the decoder; on a GPU also from bf16 tensors already there, a
pipeline's open) and the library's decode alone, so that

    ratio = CLI end to end / (open + library decode)

says what writing costs on top (issue 30's targets on the GPU: <= 1.15 for y4m/npy/safetensors, <= 1.5 for PNG).
Each CLI run is made with -v, and its own account of the time (the open, the decode, the decode's waits for the
writer, the writer's last frames, the output's finish) goes into the JSON beside the process' time, so that a ratio
over the target says where its time went. --trials N runs the kinds round robin N times and keeps the best.
Before each CLI run the previous output of its kind is removed and the page cache synced (untimed, its time kept as
sync_before_s): each run writes a new file to a quiet disk, as a user's first run does, instead of finishing behind
the previous runs' gigabytes of write-out (session 31: a second trial's 5 GB .npy waited 3.3 s in its fsync).
On the CPU (the CI machine: 2 cores) it runs at a small size so that a regression shows without a GPU; on the GPU
at f121 / f481 (--T 31 / 121 at 44 x 78).

    python3 bench/path.py --device cpu --T 2 --h 8 --w 8 --json bench/results/<date>-cpu-path.json
    python3 bench/path.py --device cuda --T 31 --trials 2 --json $OUT/path-f121.json
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-2000:]}")
    return time.perf_counter() - t, p.stderr


def cli_phases(stderr):
    """The CLI's -v line "wan22vae: time: checks 0.31 s, ..., the writer busy 2.90 s" as {what: seconds}."""
    for line in stderr.splitlines():
        if line.startswith("wan22vae: time: "):
            out = {}
            for part in re.split(r"[,;()]", line[len("wan22vae: time: "):]):
                m = re.match(r"\s*(?:of it: )?(.*?) ([0-9.]+) s\s*$", part)
                if m:
                    out[m.group(1)] = float(m.group(2))
            return out
    return {}


def fresh_output(out):
    """Removes a previous run's output (a file or a folder) and syncs the page cache to the disk, so that the next
    timed run neither replaces a file nor waits behind earlier write-out; returns the sync's seconds."""
    if os.path.isdir(out):
        shutil.rmtree(out)
    elif os.path.lexists(out):
        os.remove(out)
    t = time.perf_counter()
    os.sync()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--T", type=int, default=2)
    ap.add_argument("--h", type=int, default=44)
    ap.add_argument("--w", type=int, default=78)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", required=True)
    ap.add_argument("--trials", type=int, default=1, help="CLI runs per output kind, round robin (GPU: 2)")
    a = ap.parse_args()
    cli = os.path.join(a.build, "wan22vae")
    sys.path.insert(0, os.path.join(ROOT, "python"))
    os.environ.setdefault("W22_LIB", os.path.join(a.build, "libwan22vae.so"))
    import numpy as np
    import wan22vae
    tmp = tempfile.mkdtemp(prefix="w22path")
    try:
        w, z = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "z.npy")
        run([cli, "synth", "weights", "-o", w, "--seed", "1", "--dtype", "bf16"])
        run([cli, "synth", "latents", "-o", z, "--seed", "2", "--frames", str(a.T), "--height", str(a.h),
             "--width", str(a.w)])
        # the open: the weights read and validated, then the decoder (the backend's layouts, the upload)
        t0 = time.perf_counter()
        weights = wan22vae.load_weights(w)
        t1 = time.perf_counter()
        dec = wan22vae.Decoder(weights, device=a.device)
        t2 = time.perf_counter()
        zz = np.load(z)
        open_gpu = None
        if a.device.startswith("cuda"):
            import torch
            # the open of a pipeline (the protocol's prepare, enable()): bf16 weights already on the GPU
            on = [t.to("cuda", torch.bfloat16) for t in weights.state_dict("bf16").values()]
            torch.cuda.synchronize()
            open_gpu = []
            for _ in range(3):
                t = time.perf_counter()
                wg = wan22vae.weights_from_tensors(on)
                dg = wan22vae.Decoder(wg, device=a.device)
                open_gpu.append(time.perf_counter() - t)
                dg.close()
                wg.free()
            del on
            zt = torch.from_numpy(zz).to("cuda", torch.bfloat16)
            dec(zt)
            torch.cuda.synchronize()
            t = time.perf_counter()
            dec(zt)
            torch.cuda.synchronize()
            decode_s = time.perf_counter() - t
        else:
            t = time.perf_counter()
            dec(zz)
            decode_s = time.perf_counter() - t
        dec.close()
        rec = {"device": a.device, "T": a.T, "latents": [a.h, a.w], "cores": os.cpu_count(),
               "open_load_s": t1 - t0, "open_decoder_s": t2 - t1, "decode_s": decode_s, "outputs": {}}
        if open_gpu:
            rec["open_from_gpu_tensors_s"] = open_gpu
        kinds = ["y4m", "npy", "safetensors", "png/"] + (["mp4"] if shutil.which("ffmpeg") else [])
        base = rec["open_load_s"] + rec["open_decoder_s"] + rec["decode_s"]
        # the trials go round the kinds (y4m, npy, ..., then y4m again) so that a slow moment of the machine
        # (its disk's write-out, the clock) does not land on one kind's every trial; the best trial counts
        for trial in range(a.trials):
            for k in kinds:
                out = os.path.join(tmp, "v." + k if not k.endswith("/") else "frames/")
                synced = fresh_output(out)
                t, err = run([cli, "decode", "-w", w, "-l", z, "-o", out, "--device", a.device, "-v"])
                r = rec["outputs"].setdefault(k.rstrip("/"), {"trials_s": [], "phases": [], "sync_before_s": []})
                r["trials_s"].append(t)
                r["sync_before_s"].append(synced)
                r["phases"].append(cli_phases(err))  # the CLI's own account of each trial (-v)
                r["cli_s"] = min(r["trials_s"])
                r["ratio"] = r["cli_s"] / base
                print(k, trial, f"{t:.2f} s (sync before {synced:.2f} s)", json.dumps(r["phases"][-1]), flush=True)
        rec["date"] = time.strftime("%Y-%m-%d")
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)
        print(json.dumps({x: rec.get(x) for x in ("open_load_s", "open_decoder_s", "decode_s",
                                                  "open_from_gpu_tensors_s")}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
