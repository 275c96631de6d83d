#!/usr/bin/env bash
# Installs what building and testing wan22vae needs on a Debian/Ubuntu machine (run as root or with sudo):
# a C compiler and make, OpenBLAS (the CPU backend's GEMM), libpng + zlib (PNG frames), ffmpeg (mp4 output and
# the CLI tests' ffprobe checks), clang with libFuzzer (the parser fuzz run), and numpy + pytest for the Python
# package's tests, with torch, safetensors, diffusers and transformers (WanPipeline imports it; no text encoder is
# loaded) for the tests that decode through diffusers' pipeline code and AutoencoderKLWan on the CPU (about 6 GB and
# a minute or two; `tools/setup.sh --no-torch` leaves them out, and those tests are then skipped). The CUDA toolkit (nvcc) is optional: with it, `make` also builds the CUDA backend.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends build-essential pkg-config libopenblas-dev libpng-dev zlib1g-dev \
    ffmpeg clang libclang-rt-14-dev python3-pip >/dev/null
pip_install() { python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"; }
pip_install numpy pytest
if [ "${1:-}" != "--no-torch" ]; then
    pip_install torch safetensors diffusers==0.42.1 transformers==5.25.0
fi
echo "setup: done"
