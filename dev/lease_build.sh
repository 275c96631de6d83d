#!/usr/bin/env bash
# Builds what a device call runs, here (no device time spent compiling): the library, the CLI and the GPU test
# programs in build-run/, stripped of debug info, packed as .carry/build-run.tgz (the fat build's programs each
# hold every architecture's kernels: carried loose they pass the tool's 64 MiB). The device command unpacks it first:
#   tar -xzf .carry/build-run.tgz     (carry: [".carry", ".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
x="$(git rev-parse --git-common-dir)/info/exclude"; grep -qx '/.carry/' "$x" 2>/dev/null || echo /.carry/ >> "$x"
D=${BUILD_DIR:-build-run}
# A tree copied from another build (cp -a build-t build-n, to save the compile) keeps that build's .d files, whose
# targets name the other tree: a changed header would rebuild nothing here (sessions 31 and 41: a stale library
# carried as the new one). Their targets are rewritten to this tree first; the phony header lines (src/...) stay.
[ -d "$D" ] && find "$D" -name '*.d' -exec sed -i -E "s#^build[^/ :]*/#$D/#" {} +
make -j2 BUILD=$D all > /tmp/lease_build.log 2>&1 || { tail -30 /tmp/lease_build.log; exit 1; }
git rev-parse --short HEAD > $D/commit.txt
git diff --quiet HEAD -- src include tests cli || echo "+uncommitted" >> $D/commit.txt
mkdir -p .carry
# the GPU programs a single-GPU call runs (CARRY_TESTS to choose; cuda_nccl needs several GPUs): each fat program is
# ~5-6 MB packed, and the call carries at most 64 MiB with .whl and the working tree (session 36: all of them 67 MiB)
tests=${CARRY_TESTS:-cuda_ops cuda_decode cuda_dit cuda_sequence cuda_budget cuda_large cuda_interrupt}
files=($D/commit.txt $D/libwan22vae.so $D/wan22vae $D/bench/bits $(for t in $tests; do echo $D/tests/$t; done))
strip --strip-debug "${files[@]:1}"
tar -czf .carry/$D.tgz "${files[@]}"
ls -la .carry/
total=$(( $(cat .carry/*.tgz | wc -c) + $(du -sb .whl 2>/dev/null | cut -f1 || echo 0) + $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) ))
echo "carry with .whl and the tracked tree: $((total / 1048576)) MiB of the 64 MiB a call takes"
[ "$total" -lt $((62 * 1048576)) ] || echo "WARNING: too close to 64 MiB: set CARRY_TESTS to fewer programs" >&2
