#!/usr/bin/env python3
"""Whether this tree's CUDA kernels compile to the same SASS as another commit's: a refactor's first evidence, on a
machine without a GPU (issue 29: the same bits; the device's A/B, bench/ab.sh, then the time). Each src/cuda/*.cu of
both trees is compiled to a cubin (nvcc, sm_90a, the Makefile's flags less -lineinfo, whose line numbers differ) and
disassembled (cuobjdump, from PyPI's nvidia-cuda-cuobjdump when the toolkit has none); per kernel: identical,
different (how many instructions), deleted or new. Exit 0 when no kernel of the old tree that still exists differs.

    tools/sass_same.py 7c0ed73 [file.cu ...]
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC", "-Iinclude",
        "-Isrc", "-Xcompiler", "-fvisibility=hidden", "-cubin"]


def cuobjdump():
    """cuobjdump, and the nvdisasm it runs for -sass on the PATH"""
    exe = shutil.which("cuobjdump")
    if exe and shutil.which("nvdisasm"):
        return exe
    d = os.path.join(tempfile.gettempdir(), "w22-cuobjdump")
    bindir = os.path.join(d, "nvidia", "cu13", "bin")
    if not os.path.exists(os.path.join(bindir, "nvdisasm")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", d,
                        "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"], check=True)
    for t in ("cuobjdump", "nvdisasm"):
        os.chmod(os.path.join(bindir, t), 0o755)
    os.environ["PATH"] = bindir + os.pathsep + os.environ["PATH"]
    return os.path.join(bindir, "cuobjdump")


def kernels(tool, cubin):
    out = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    fs, name = {}, None
    for line in out.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            fs[name] = []
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s*(.*?);", line)
        if name and m:
            fs[name].append(m.group(1))
    return fs


def main():
    old, files = sys.argv[1], sys.argv[2:]
    tool = cuobjdump()
    tmp = tempfile.mkdtemp(prefix="w22-sass-")
    wt = os.path.join(tmp, "old")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-f", "--detach", wt, old], check=True,
                   capture_output=True)
    bad = 0
    try:
        names = [os.path.basename(f) for f in files] or sorted(os.path.basename(p) for p in glob.glob(os.path.join(wt, "src/cuda/*.cu")))
        for f in names:
            res = {}
            for side, tree in (("old", wt), ("new", ROOT)):
                src = os.path.join(tree, "src/cuda", f)
                cub = os.path.join(tmp, f"{side}-{f}.cubin")
                if not os.path.exists(src):
                    res[side] = None
                    continue
                subprocess.run(NVCC + ["-o", cub, src], cwd=tree, check=True)
                res[side] = kernels(tool, cub)
            if res["old"] is None and res["new"] is None:
                print(f"{f}: in neither tree's src/cuda/")
                bad += 1
                continue
            a, b = res["old"] or {}, res["new"] or {}
            same = [k for k in a if k in b and a[k] == b[k]]
            diff = [k for k in a if k in b and a[k] != b[k]]
            gone = [k for k in a if k not in b]
            new = [k for k in b if k not in a]
            bad += len(diff)
            print(f"{f}: {len(a)} -> {len(b)} kernels: {len(same)} identical, {len(diff)} different, {len(gone)} deleted, "
                  f"{len(new)} new" + ("" if res["new"] is not None else " (file deleted)"))
            for k in diff:
                print(f"    different: {k} ({len(a[k])} -> {len(b[k])} instructions)")
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", wt], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"sass_same: {'every kept kernel identical' if not bad else f'{bad} kernels differ or files are missing'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
