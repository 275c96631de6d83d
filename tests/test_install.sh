#!/usr/bin/env bash
# What a C user gets from `make install`, and the licence: the Apache-2.0 LICENSE and the Python package's licence
# metadata; `make install DESTDIR=<tmp> PREFIX=/usr` (the build tree $BUILD, default build) lays out the header,
# libwan22vae.so.<version> with its SONAME and links, libwan22vae.a, the CLI and wan22vae.pc; the shared library
# exports the public w22_* functions only (every one the header declares, every one the Python package and the bench
# call through ctypes, and nothing else: no CUDA runtime, no internals); a program linked through `pkg-config
# wan22vae` decodes on the CPU, once against the shared library and once against the static one (--static: the
# Libs.private list is complete), with the same result; `make uninstall` removes it all.
# Prints "install: N passed, N failed"; exit 1 on a failure. Needs pkg-config (tools/setup.sh installs it).
set -u
ROOT=${W22_ROOT:-$(pwd)}
cd "$ROOT" || exit 1
B=${BUILD:-build}   # as make takes it (relative to the repo root)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/w22install-XXXXXX")
[ -n "${W22_KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/     /'; return 0; }
finish() { echo "install: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
have() { command -v "$1" >/dev/null 2>&1; }
CC=${CC:-cc}
MAKE=${MAKE:-make}

# ---- the licence
# sha256 of the Apache License 2.0 text as the ASF publishes it (https://www.apache.org/licenses/LICENSE-2.0.txt)
APACHE_SHA256=cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30
sum=$(sha256sum LICENSE 2>/dev/null | cut -d' ' -f1)
if [ ! -f LICENSE ]; then bad "LICENSE at the repo root" "absent"
elif [ "$sum" = "$APACHE_SHA256" ]; then ok "LICENSE: the Apache License 2.0 text"
else bad "LICENSE: the Apache License 2.0 text" "its sha256 is $sum, expected $APACHE_SHA256"
fi
# the package's metadata, as the installed setuptools makes it (License-Expression on setuptools 77+, else License),
# from a copy of python/ so that nothing is written into the tree
if python3 -c 'import setuptools' 2>/dev/null; then
    mkdir -p "$TMP/py" "$TMP/egg"
    cp -r python/pyproject.toml python/setup.py python/README.md python/wan22vae "$TMP/py/"
    if (cd "$TMP/py" && python3 setup.py -q egg_info --egg-base "$TMP/egg") >"$TMP/egg.log" 2>&1 &&
        grep -qE '^License(-Expression)?: Apache-2\.0$' "$TMP"/egg/*.egg-info/PKG-INFO; then
        ok "python package metadata: $(grep -E '^License(-Expression)?:' "$TMP"/egg/*.egg-info/PKG-INFO)"
    else
        bad "python package metadata: Apache-2.0" \
            "$(cat "$TMP/egg.log"; grep -i licen "$TMP"/egg/*.egg-info/PKG-INFO 2>/dev/null)"
    fi
else
    echo "skip python package metadata (no setuptools for python3)"
fi

# ---- make install into a staging directory
VERSION=$(sed -n 's/^#define W22_VERSION "\(.*\)".*/\1/p' include/wan22vae.h)
MAJOR=${VERSION%%.*}
S=$TMP/stage
L=$S/usr/lib
# what the suite built (`make test` builds all first), not rebuilt here (-o): the tests after this one use that tree
for f in libwan22vae.a libwan22vae.so wan22vae; do
    [ -f "$B/$f" ] || { bad "$B/$f is built" "absent: run make BUILD=$B first"; finish; }
done
keep="-o $B/libwan22vae.a -o $B/libwan22vae.so -o $B/wan22vae"
if "$MAKE" -C "$ROOT" BUILD="$B" $keep DESTDIR="$S" PREFIX=/usr install >"$TMP/install.log" 2>&1; then
    ok "make install DESTDIR=... PREFIX=/usr (version $VERSION)"
else
    bad "make install DESTDIR=... PREFIX=/usr" "$(tail -n 20 "$TMP/install.log")"; finish
fi
for f in include/wan22vae.h lib/libwan22vae.a lib/pkgconfig/wan22vae.pc lib/pkgconfig/wan22vae-static.pc; do
    [ -f "$S/usr/$f" ] && [ ! -L "$S/usr/$f" ] && ok "installed $f" || bad "installed $f" "$(ls -l "$S/usr/$f" 2>&1)"
done
SO=$L/libwan22vae.so.$VERSION
[ -f "$SO" ] && [ ! -L "$SO" ] && ok "installed lib/libwan22vae.so.$VERSION" ||
    bad "installed lib/libwan22vae.so.$VERSION" "$(ls -l "$L" 2>&1)"
[ "$(readlink "$L/libwan22vae.so.$MAJOR")" = "libwan22vae.so.$VERSION" ] &&
    [ "$(readlink "$L/libwan22vae.so")" = "libwan22vae.so.$MAJOR" ] &&
    ok "links: libwan22vae.so -> .so.$MAJOR -> .so.$VERSION" ||
    bad "links: libwan22vae.so -> .so.$MAJOR -> .so.$VERSION" "$(ls -l "$L")"
[ -x "$S/usr/bin/wan22vae" ] && "$S/usr/bin/wan22vae" --version 2>&1 | grep -qF "$VERSION" &&
    ok "installed bin/wan22vae (--version says $VERSION)" ||
    bad "installed bin/wan22vae" "$("$S/usr/bin/wan22vae" --version 2>&1)"
cmp -s include/wan22vae.h "$S/usr/include/wan22vae.h" && ok "the installed header is include/wan22vae.h" ||
    bad "the installed header is include/wan22vae.h"

# ---- SONAME and exported symbols
soname=$(readelf -d "$SO" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libwan22vae.so.$MAJOR" ] && ok "SONAME $soname" ||
    bad "SONAME libwan22vae.so.$MAJOR" "readelf -d says '$soname'"
nm -D --defined-only "$SO" | awk '{print $NF}' | sort -u >"$TMP/exported.txt"
n=$(grep -c . "$TMP/exported.txt")
others=$(grep -v '^w22_' "$TMP/exported.txt")
if [ "$n" -gt 0 ] && [ -z "$others" ]; then ok "exported symbols: $n, all w22_*"
else bad "exported symbols: $n, all w22_*" "not w22_*: $(printf '%s\n' "$others" | wc -l)
$(printf '%s\n' "$others" | head -n 40)"; fi
# every function the header declares (W22_API) is exported, and nothing else
"$CC" -E -P -Iinclude -x c include/wan22vae.h 2>/dev/null | grep -oE '\bw22_[a-z0-9_]+ *\(' | tr -d ' (' |
    sort -u >"$TMP/declared.txt"
missing=$(comm -23 "$TMP/declared.txt" "$TMP/exported.txt"); extra=$(comm -13 "$TMP/declared.txt" "$TMP/exported.txt")
[ -s "$TMP/declared.txt" ] && [ -z "$missing" ] &&
    ok "the header's $(grep -c . "$TMP/declared.txt") functions are exported" ||
    bad "the header's functions are exported" "missing (W22_API on the declaration?): $missing"
[ -z "$extra" ] && ok "nothing exported beyond the header" || bad "nothing exported beyond the header" "extra: $extra"
# what the Python package, its tests and the bench call through ctypes
grep -ohE '"w22_[a-z0-9_]+": *[[(]|\.w22_[a-z0-9_]+' python/wan22vae/*.py python/tests/*.py bench/*.py 2>/dev/null |
    sed -E 's/^"//; s/".*//; s/^\.//' | sort -u >"$TMP/ctypes.txt"
missing=$(comm -23 "$TMP/ctypes.txt" "$TMP/exported.txt")
[ -s "$TMP/ctypes.txt" ] && [ -z "$missing" ] &&
    ok "the $(grep -c . "$TMP/ctypes.txt") functions Python calls are exported" ||
    bad "the functions Python calls are exported" "not exported: $missing"

# ---- a program built through pkg-config, shared and static
if ! have pkg-config; then
    bad "pkg-config" "not installed (tools/setup.sh installs it: apt-get install pkg-config)"; finish
fi
cat >"$TMP/prog.c" <<'EOF'
#include <wan22vae.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { w22_status s_ = (x); if (s_ != W22_OK) { \
    fprintf(stderr, "%s: %s: %s\n", #x, w22_status_string(s_), w22_last_error()); return 1; } } while (0)
int main(void) {
    w22_config cfg;
    w22_config_default(&cfg);
    cfg.z_dim = 8;
    cfg.base_dim = 8;
    w22_weights *w = NULL;
    CK(w22_weights_synthetic(&cfg, 1, &w));
    w22_decoder_params p;
    w22_decoder_params_init(&p);
    p.device = W22_DEVICE_CPU;
    p.threads = 2;
    w22_decoder *d = NULL;
    CK(w22_decoder_open(w, &p, &d));
    const int T = 2, h = 3, wd = 4;
    int F, H, W;
    w22_video_shape(&cfg, T, h, wd, &F, &H, &W);
    size_t nz = (size_t)cfg.z_dim * T * h * wd, nv = (size_t)3 * F * H * W;
    float *z = malloc(nz * sizeof *z), *v = malloc(nv * sizeof *v);
    if (!z || !v) return 1;
    CK(w22_latents_synthetic(&cfg, 2, T, h, wd, z));
    CK(w22_decode(d, z, W22_DTYPE_F32, T, h, wd, v, W22_DTYPE_F32));
    double sum = 0, asum = 0;
    for (size_t i = 0; i < nv; i++) {
        if (!(v[i] >= -1.0f && v[i] <= 1.0f)) { fprintf(stderr, "video[%zu] = %g\n", i, v[i]); return 1; }
        sum += v[i];
        asum += fabs(v[i]);
    }
    if (asum == 0) { fprintf(stderr, "the video is all zeros\n"); return 1; }
    printf("video %dx%dx%d sum %.9g abs %.9g\n", F, H, W, sum, asum);
    w22_decoder_free(d);
    w22_weights_free(w);
    free(z);
    free(v);
    return 0;
}
EOF
# the staged tree as the installed one: the .pc's prefix moved to the staging directory
export PKG_CONFIG_PATH="" PKG_CONFIG_LIBDIR="$L/pkgconfig"
pc() { pkg-config --define-variable=prefix="$S/usr" "$@" wan22vae; }
if pkg-config --exists wan22vae && [ "$(pkg-config --modversion wan22vae)" = "$VERSION" ]; then
    ok "pkg-config finds wan22vae $VERSION"
else bad "pkg-config finds wan22vae $VERSION" "$(pkg-config --modversion wan22vae 2>&1)"; fi
echo "     $(grep '^Libs.private:' "$L/pkgconfig/wan22vae.pc")"

# shared: NEEDED libwan22vae.so.<major>, found through LD_LIBRARY_PATH
if "$CC" -O1 -o "$TMP/prog_shared" "$TMP/prog.c" $(pc --cflags --libs) -lm >"$TMP/cc1.log" 2>&1; then
    ok "compile + link through pkg-config --cflags --libs: $(pc --cflags --libs | tr -s ' ')"
    readelf -d "$TMP/prog_shared" | grep -q "NEEDED.*\[libwan22vae.so.$MAJOR\]" &&
        ok "the program needs libwan22vae.so.$MAJOR" ||
        bad "the program needs libwan22vae.so.$MAJOR" "$(readelf -d "$TMP/prog_shared" | grep NEEDED)"
    if out_shared=$(LD_LIBRARY_PATH="$L" "$TMP/prog_shared" 2>&1); then
        ok "shared: decodes on the CPU ($out_shared)"
        lib_used=$(LD_LIBRARY_PATH="$L" ldd "$TMP/prog_shared" | grep libwan22vae)
        case $lib_used in *"$L"/*) ok "shared: the staged library is the one loaded" ;;
            *) bad "shared: the staged library is the one loaded" "$lib_used" ;; esac
    else bad "shared: decodes on the CPU" "$out_shared"; fi
else bad "compile + link through pkg-config --cflags --libs" "$(cat "$TMP/cc1.log")"; fi

# static: wan22vae-static.pc names libwan22vae.a itself with what it needs (issue 47: `--static --libs wan22vae`
# gives -lwan22vae, which links the .so installed beside the .a)
static_libs=$(pkg-config --define-variable=prefix="$S/usr" --libs wan22vae-static)
if "$CC" -O1 -o "$TMP/prog_static" "$TMP/prog.c" $(pc --cflags) $static_libs >"$TMP/cc2.log" 2>&1; then
    ok "compile + link through pkg-config --libs wan22vae-static against libwan22vae.a"
    readelf -d "$TMP/prog_static" | grep -q 'NEEDED.*libwan22vae' &&
        bad "the static program does not need libwan22vae.so" "$(readelf -d "$TMP/prog_static" | grep NEEDED)" ||
        ok "the static program does not need libwan22vae.so"
    if out_static=$(env -u LD_LIBRARY_PATH "$TMP/prog_static" 2>&1); then
        ok "static: decodes on the CPU ($out_static)"
        [ "$out_static" = "${out_shared:-}" ] && ok "static and shared decode the same" ||
            bad "static and shared decode the same" "shared: ${out_shared:-}; static: $out_static"
    else bad "static: decodes on the CPU" "$out_static"; fi
else bad "compile + link through pkg-config --static --libs" "$(tail -n 30 "$TMP/cc2.log")"; fi

# ---- make uninstall leaves nothing behind but the directories
if "$MAKE" -C "$ROOT" BUILD="$B" $keep DESTDIR="$S" PREFIX=/usr uninstall >"$TMP/uninstall.log" 2>&1; then
    left=$(find "$S" ! -type d)
    [ -z "$left" ] && ok "make uninstall removes every file" || bad "make uninstall removes every file" "left: $left"
else bad "make uninstall" "$(tail -n 20 "$TMP/uninstall.log")"; fi
finish
