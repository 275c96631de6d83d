#!/usr/bin/env bash
# The README's first Usage block runs as written (issue 31.8), in a temporary folder, with the built CLI standing
# in for build/wan22vae; then the two outputs it makes must be the same video (a file and standard output).
set -u
B=$(cd "${BUILD:-build}" && pwd)
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
block=$(awk '/^## Usage/{u=1} u&&/^```sh$/{b=1; next} b&&/^```$/{exit} b{print}' README.md)
n=$(printf '%s\n' "$block" | grep -c 'build/wan22vae')
[ "$n" -ge 4 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: the README's Usage block has $n wan22vae lines"; }
cd "$tmp"
mkdir build && ln -s "$B/wan22vae" build/wan22vae
if (set -e; eval "$block") > out.log 2>&1; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: the block failed:"; tail -20 out.log; fi
if [ -s clip.y4m ] && cmp -s clip.y4m piped.y4m; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: clip.y4m and piped.y4m differ or are empty"; fi
head -c 9 clip.y4m 2>/dev/null | grep -q YUV4MPEG2 && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: clip.y4m is not a y4m"; }
cd "$root"
echo "readme: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
