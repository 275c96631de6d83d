#!/usr/bin/env bash
# The Python side of the CPU suite: the package's CPU tests (pytest), the synthetic generator pinned against the
# C constants (tools/test_synth.py) and the .pth name conversion (tools/test_convert_pth.py) and the bench's bookkeeping (bench/test_bench.py). Needs numpy and
# pytest (tools/setup.sh installs them); without them it fails and says so.
set -u
cd "${W22_ROOT:-.}"
export W22_LIB="${W22_LIB:-$(pwd)/${BUILD:-build}/libwan22vae.so}"
pass=0; fail=0
run() {
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $*"; fi
}
python3 -c 'import numpy, pytest' || { echo "numpy and pytest are needed (tools/setup.sh)"; echo "0 passed, 1 failed"; exit 1; }
[ -d python/tests ] && run python3 -m pytest -q python/tests
[ -f tools/test_synth.py ] && run python3 tools/test_synth.py
[ -f tools/test_convert_pth.py ] && run python3 tools/test_convert_pth.py
[ -f bench/test_bench.py ] && run python3 bench/test_bench.py
echo "python: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
