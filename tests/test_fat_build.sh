#!/usr/bin/env bash
# One make builds one fat library (issue 45): every CUDA object holds the GPU code its kind needs, read from its fat
# binaries by tools/fatbin_archs.py (no GPU or cuobjdump). The Hopper-only files (the Makefile's CU_HOPPER: a name
# holding "wgmma" or ending in _sm90a.cu) hold sm_90a SASS alone; every other CUDA object (the portable path, and
# what both paths share) SASS for sm_80, 86, 89, 90a, 100 and 120 and compute_80 PTX for GPUs after them; the
# library holds the union. The backend never launches a Hopper-only kernel on another GPU (route.h; cuda_ops checks
# what ran). A build without CUDA has no objects to check: skip. CUDA_ARCHS other than the default: skip (a build
# for fewer GPUs is a choice, not a fault).
set -u
B=${BUILD:-build}
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
objs=$(ls "$B"/src/*/*.o 2>/dev/null | while read -r o; do
    [ -f "${o%.o}.d" ] && grep -q '\.cu' "${o%.o}.d" && echo "$o"
done)
if [ -z "$objs" ] || ! nm "$B/libwan22vae.a" 2>/dev/null | grep -q w22_cuda_conv; then
    echo "fat_build: no CUDA backend in this build: nothing to check"
    echo "fat_build: 0 passed, 0 failed"; exit 0
fi
if ! grep -q 'code=sm_80 .*code=sm_120 .*code=compute_80' "$B/.flags" 2>/dev/null; then
    echo "fat_build: this build's archs are not the default set ($B/.flags): nothing to check"
    echo "fat_build: 0 passed, 0 failed"; exit 0
fi
all="sass 80 86 89 90 100 120; ptx 80"
hopper="sass 90; ptx "
n_h=0; n_p=0
for o in $objs; do
    got=$(python3 tools/fatbin_archs.py "$o")
    case "$(basename "$o" .o)" in
        *wgmma*|*_sm90a) want=$hopper; n_h=$((n_h + 1)) ;;
        *) want=$all; n_p=$((n_p + 1)) ;;
    esac
    [ "$got" = "$want" ] && ok || bad "$o holds \"$got\", expected \"$want\""
done
[ "$n_h" -ge 2 ] && [ "$n_p" -ge 10 ] && ok ||
    bad "found $n_h Hopper-only and $n_p portable CUDA objects, expected 2+ and 10+"
got=$(python3 tools/fatbin_archs.py "$B/libwan22vae.so")
[ "$got" = "$all" ] && ok || bad "$B/libwan22vae.so holds \"$got\", expected \"$all\""
echo "fat_build: $n_p portable objects ($all), $n_h Hopper-only ($hopper)"
echo "fat_build: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
