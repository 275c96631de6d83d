#!/usr/bin/env bash
# Builds the two bench/bits that bench/ab.sh compares: A, this tree's bench/bits.c linked against the library at
# COMMIT (built in a worktree under /tmp: the older commits have no bits.c), into build-ab-a/bench/bits; B, this
# tree's, into build-ab/bench/bits. Needs nvcc; runs here. Carry "build-ab-a" and "build-ab/bench" (11 MB each),
# then on the device: bench/ab.sh build-ab-a build-ab 2 $OUT. Usage: bench/ab_build.sh COMMIT
set -eu
commit=$1
root=$(cd "$(dirname "$0")/.." && pwd)
wt=/tmp/w22-ab-$commit
rm -rf "$wt" && git -C "$root" worktree prune
git -C "$root" worktree add -f --detach "$wt" "$commit" >/dev/null
make -C "$wt" -j2 BUILD=build BLAS=none PNG=0 build/libwan22vae.a >/dev/null
mkdir -p "$root/build-ab-a/bench"
cc -O2 -std=gnu11 -I"$root/include" -I/usr/local/cuda/include -o "$root/build-ab-a/bench/bits" "$root/bench/bits.c" \
    "$wt/build/libwan22vae.a" -lm -lpthread -ldl -L/usr/local/cuda/lib64 -lcudart_static -lrt -lstdc++
make -C "$root" -j2 BUILD=build-ab BLAS=none PNG=0 build-ab/bench/bits >/dev/null
strip --strip-debug "$root/build-ab-a/bench/bits" "$root/build-ab/bench/bits"
git -C "$root" worktree remove --force "$wt"
echo "A: build-ab-a/bench/bits ($commit)  B: build-ab/bench/bits ($(git -C "$root" rev-parse --short HEAD))"
