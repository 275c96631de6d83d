#!/usr/bin/env bash
# Builds what a device call runs, here (no device time spent compiling): the library, the CLI and the GPU test
# programs in build-run/, stripped of debug info, packed as .carry/build-run.tgz (the fat build's programs each
# hold every architecture's kernels: carried loose they pass the tool's 64 MiB). The device command unpacks it first:
#   tar -xzf .carry/build-run.tgz     (carry: [".carry", ".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
x="$(git rev-parse --git-common-dir)/info/exclude"; grep -qx '/.carry/' "$x" 2>/dev/null || echo /.carry/ >> "$x"
make -j2 BUILD=build-run all > /tmp/lease_build.log 2>&1 || { tail -30 /tmp/lease_build.log; exit 1; }
git rev-parse --short HEAD > build-run/commit.txt
git diff --quiet HEAD -- src include tests cli || echo "+uncommitted" >> build-run/commit.txt
mkdir -p .carry
files=(build-run/commit.txt build-run/libwan22vae.so build-run/wan22vae $(ls build-run/tests/cuda_* | grep -v '\.[od]$'))
strip --strip-debug "${files[@]:1}"
tar -czf .carry/build-run.tgz "${files[@]}"
ls -la .carry/build-run.tgz
