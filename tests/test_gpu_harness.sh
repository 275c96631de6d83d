#!/usr/bin/env bash
# The GPU conformance harness checked without a GPU: tests/cuda_ops --selftest-cpu runs every case with a second CPU
# backend in the GPU's place, so that a case whose reference, poisoning, margins or comparison is wrong fails here, in
# CI, rather than on a device lease (session 28 found 7 cases that failed so: host memory handed to cudaMemset, an op
# the CPU backend lacks). A build without CUDA has no cuda_ops: skip.
set -u
B=${BUILD:-build}
if [ ! -x "$B/tests/cuda_ops" ]; then
    echo "gpu_harness: no tests/cuda_ops in this build (no CUDA): nothing to check"
    echo "gpu_harness: 0 passed, 0 failed"; exit 0
fi
"$B/tests/cuda_ops" --selftest-cpu
