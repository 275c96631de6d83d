#!/usr/bin/env bash
# The command that the Python package installs (issue 47, 4): `pip install ./python` (here into a --target folder,
# offline: no build isolation, the build tree's library and CLI copied with W22_SKIP_MAKE=1) puts a `wan22vae` console
# script on the PATH and the CLI into wan22vae/bin/; `python -m wan22vae` runs the same: the version, the help, a
# usage error's exit status 2, a decode giving the same bytes as build/wan22vae's, W22_BIN naming a missing binary
# refused (not another run in its place). Prints "python_cli: N passed, N failed"; exit 1 on a failure.
set -u
ROOT=${W22_ROOT:-$(pwd)}
cd "$ROOT" || exit 1
B=${BUILD:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/w22pycli-XXXXXX")
[ -n "${W22_KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/     /'; return 0; }
finish() { echo "python_cli: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
# an offline build needs setuptools with bdist_wheel (its own from 70.1, else the wheel package)
if ! python3 -m pip --version >/dev/null 2>&1 || ! python3 -c 'import setuptools
try:
    import setuptools.command.bdist_wheel
except ImportError:
    import wheel' 2>/dev/null; then echo "skip: no pip, or no setuptools with bdist_wheel (for an offline build)"; finish; fi
if [ ! -x "$B/wan22vae" ] || [ ! -f "$B/libwan22vae.so" ]; then bad "the build tree" "no $B/wan22vae or libwan22vae.so"; finish; fi

cp -r python "$TMP/src" # pip builds in the source folder: a copy keeps build/ and egg-info out of the repo
sed -i "s|^ROOT = .*|ROOT = \"$ROOT\"|" "$TMP/src/setup.py"
if W22_SKIP_MAKE=1 W22_BUILD="$(realpath --relative-to="$ROOT" "$B")" python3 -m pip install -q --no-build-isolation \
        --no-deps --no-compile --target "$TMP/site" "$TMP/src" >"$TMP/pip.txt" 2>&1; then
    ok "pip install (offline, --target)"
else
    bad "pip install (offline, --target)" "$(tail -20 "$TMP/pip.txt")"; finish
fi
export PYTHONPATH=$TMP/site
unset W22_BIN
[ -x "$TMP/site/bin/wan22vae" ] && ok "the console script wan22vae" || bad "the console script wan22vae" "$(ls "$TMP/site/bin" 2>&1)"
[ -x "$TMP/site/wan22vae/bin/wan22vae" ] && ok "the CLI in the package (wan22vae/bin/wan22vae)" ||
    bad "the CLI in the package" "$(ls -R "$TMP/site/wan22vae" 2>&1 | head)"
cd "$TMP" || exit 1
want=$("$B/wan22vae" --version)
for how in script module; do
    if [ $how = script ]; then cli=("$TMP/site/bin/wan22vae"); else cli=(python3 -m wan22vae); fi
    got=$("${cli[@]}" --version 2>&1); [ "$got" = "$want" ] && ok "$how: --version ($got)" || bad "$how: --version" "$got"
    "${cli[@]}" help decode >out.txt 2>&1 && grep -q "usage: wan22vae decode" out.txt && ok "$how: help decode" ||
        bad "$how: help decode" "$(head -5 out.txt)"
    "${cli[@]}" decode --frobnicate >/dev/null 2>&1; rc=$?
    [ $rc = 2 ] && ok "$how: a usage error exits 2" || bad "$how: a usage error exits 2" "exit $rc"
    "${cli[@]}" synth weights -o w.safetensors --z-dim 4 --base-dim 8 --seed 1 -f >/dev/null 2>&1 &&
        "${cli[@]}" synth latents -o z.npy --z-dim 4 --frames 2 --height 3 --width 4 -f >/dev/null 2>&1 &&
        "${cli[@]}" decode -w w.safetensors -l z.npy -o "v_$how.y4m" -q 2>err.txt &&
        "$B/wan22vae" decode -w w.safetensors -l z.npy -o v_ref.y4m -q -f 2>>err.txt &&
        cmp -s "v_$how.y4m" v_ref.y4m && ok "$how: a decode, the same bytes as build/wan22vae" ||
        bad "$how: a decode, the same bytes as build/wan22vae" "$(cat err.txt)"
done
W22_BIN=$TMP/nope python3 -m wan22vae --version >out.txt 2>&1; rc=$?
[ $rc = 1 ] && grep -q "nope (absent)" out.txt && ! grep -q "^wan22vae [0-9]" out.txt &&
    ok "W22_BIN missing: refused, no other binary run" || bad "W22_BIN missing: refused" "exit $rc: $(cat out.txt)"
finish
