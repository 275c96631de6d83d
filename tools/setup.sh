#!/usr/bin/env bash
# Installs what building and testing wan22vae needs on a Debian/Ubuntu machine (run as root or with sudo):
# a C compiler and make, OpenBLAS (the CPU backend's GEMM), libpng + zlib (PNG frames), ffmpeg (mp4 output and
# the CLI tests' ffprobe checks), clang with libFuzzer (the parser fuzz run), and numpy + pytest for the Python
# package's tests, with torch, safetensors, diffusers and transformers (WanPipeline imports it; no text encoder is
# loaded) for the tests that decode through diffusers' pipeline code and AutoencoderKLWan on the CPU. The CUDA toolkit
# (nvcc) is optional: with it, `make` also builds the CUDA backend.
#
# torch (issue 47): where an NVIDIA driver is present, PyPI's torch (the CUDA build). Where none is, the CPU wheels
# (about 0.2 GB to download) from PyTorch's CPU index (--torch-index URL, default below) when it answers; PyPI serves
# no CPU-only torch for Linux x86-64, so where that index cannot be reached the CUDA build is what can be had (about
# 3 GB to download, 5 GB installed: 1.2 GB of torch, 3 GB of NVIDIA libraries, 1 GB of triton) and the script says so
# before it starts. A torch already importable is kept. pip shows what it downloads and its progress.
#   --no-torch          leave torch, diffusers and transformers out (their tests are then skipped)
#   --torch-index URL   the index of CPU wheels to try on a machine without an NVIDIA driver
#   --dry-run           say what would be installed, install nothing (the tests' way in)
# SETUP_NVIDIA=0/1 overrides the driver's detection (for the tests).
set -euo pipefail
NO_TORCH=0 DRY=0
CPU_INDEX=https://download.pytorch.org/whl/cpu
while [ $# -gt 0 ]; do
    case $1 in
    --no-torch) NO_TORCH=1 ;;
    --dry-run) DRY=1 ;;
    --torch-index) CPU_INDEX=${2:?--torch-index needs a URL}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$1' (--no-torch, --torch-index URL, --dry-run, --help)" >&2; exit 2 ;;
    esac
    shift
done
say() { echo "setup: $*"; }
run() { if [ "$DRY" = 1 ]; then say "would run: $*"; else "$@"; fi; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive

say "system packages: build-essential pkg-config libopenblas-dev libpng-dev zlib1g-dev ffmpeg clang libclang-rt-14-dev python3-pip (about 0.6 GB)"
run $SUDO apt-get update -q
run $SUDO apt-get install -y -q --no-install-recommends build-essential pkg-config libopenblas-dev libpng-dev \
    zlib1g-dev ffmpeg clang libclang-rt-14-dev python3-pip
# pip with its progress (no -q): the large downloads below take minutes
pip_install() {
    if [ "$DRY" = 1 ]; then say "would run: python3 -m pip install $*"; return; fi
    python3 -m pip install --progress-bar on "$@" || python3 -m pip install --progress-bar on --break-system-packages "$@"
}
say "Python packages: numpy pytest"
pip_install numpy pytest

nvidia_driver() {
    case ${SETUP_NVIDIA:-} in 1) return 0 ;; 0) return 1 ;; esac
    [ -e /proc/driver/nvidia/version ] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' ||
        command -v nvidia-smi >/dev/null 2>&1
}
# whether an index answers within 10 s (its torch page)
index_answers() {
    python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
url = sys.argv[1].rstrip("/") + "/torch/"
try:
    with urllib.request.urlopen(url, timeout=10) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

if [ "$NO_TORCH" = 1 ]; then
    say "torch, diffusers, transformers: left out (--no-torch); the tests that decode through diffusers are skipped"
elif python3 -c 'import torch' 2>/dev/null && [ "$DRY" = 0 ]; then
    say "torch $(python3 -c 'import torch; print(torch.__version__)') is installed already: kept"
    pip_install safetensors diffusers==0.42.1 transformers==5.25.0
else
    torch_args=(torch)
    if nvidia_driver; then
        say "torch: an NVIDIA driver is here: PyPI's torch, the CUDA build (about 3 GB to download, 5 GB installed)"
    elif index_answers "$CPU_INDEX"; then
        say "torch: no NVIDIA driver here: the CPU wheels from $CPU_INDEX (about 0.2 GB to download, 0.8 GB installed)"
        torch_args=(torch --index-url "$CPU_INDEX")
    else
        say "torch: no NVIDIA driver here, and the index of CPU wheels ($CPU_INDEX) does not answer; PyPI has no" \
            "CPU-only torch for Linux x86-64, so its CUDA build it is: about 3 GB to download, 5 GB installed (1.2 GB" \
            "torch, 3 GB NVIDIA libraries, 1 GB triton); it runs on the CPU all the same. --no-torch skips it (and" \
            "those tests), --torch-index URL names another index of CPU wheels"
    fi
    pip_install "${torch_args[@]}"
    say "safetensors, diffusers 0.42.1, transformers 5.25.0 (about 0.1 GB)"
    pip_install safetensors diffusers==0.42.1 transformers==5.25.0
fi
say "done"
