#!/usr/bin/env bash
# tools/setup.sh's choice of torch (issue 47, 3), in its --dry-run mode (nothing installed, no network needed): with
# an NVIDIA driver, PyPI's CUDA build; without one, the CPU wheels from the CPU index when it answers (a local HTTP
# server standing in for it), else the CUDA build with its size said before it starts; --no-torch leaves torch out.
# Prints "setup: N passed, N failed".
set -u
cd "${W22_ROOT:-.}" || exit 1
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/     /'; return 0; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/w22setup-XXXXXX")
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$TMP"' EXIT
expect() { # NAME 'substring' output
    if grep -qF -- "$2" <<<"$3"; then ok "$1"; else bad "$1" "expected '$2' in: $3"; fi
}
out=$(SETUP_NVIDIA=1 bash tools/setup.sh --dry-run 2>&1)
expect "a driver: PyPI's CUDA build, its size said" "an NVIDIA driver is here: PyPI's torch, the CUDA build (about 3 GB" "$out"
expect "a driver: pip install torch" "would run: python3 -m pip install torch" "$out"
out=$(SETUP_NVIDIA=0 bash tools/setup.sh --dry-run --torch-index http://127.0.0.1:9/none 2>&1)
expect "no driver, no CPU index: says why the CUDA build, and its size" "PyPI has no CPU-only torch for Linux x86-64" "$out"
expect "no driver, no CPU index: 5 GB installed said" "5 GB installed" "$out"
mkdir -p "$TMP/idx/torch" && echo '<html></html>' >"$TMP/idx/torch/index.html"
port=$((20000 + RANDOM % 20000))
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$TMP/idx" >/dev/null 2>&1 &
srv=$!
for _ in $(seq 50); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/torch/', timeout=1)" 2>/dev/null && break; sleep 0.1; done
out=$(SETUP_NVIDIA=0 bash tools/setup.sh --dry-run --torch-index "http://127.0.0.1:$port" 2>&1)
expect "no driver, the CPU index answers: the CPU wheels" "the CPU wheels from http://127.0.0.1:$port (about 0.2 GB" "$out"
expect "no driver, the CPU index answers: pip from that index" "pip install torch --index-url http://127.0.0.1:$port" "$out"
out=$(SETUP_NVIDIA=0 bash tools/setup.sh --dry-run --no-torch 2>&1)
expect "--no-torch" "left out (--no-torch)" "$out"
grep -q "install torch" <<<"$out" && bad "--no-torch: no torch" "$out" || ok "--no-torch: no torch"
out=$(bash tools/setup.sh --bogus 2>&1); rc=$?
[ $rc = 2 ] && ok "an unknown option: exit 2" || bad "an unknown option: exit 2" "exit $rc: $out"
grep -q -- "--progress-bar on" tools/setup.sh && ! grep -qE 'pip install -q|pip_install -q' tools/setup.sh &&
    ok "pip runs with its progress (no -q)" || bad "pip runs with its progress (no -q)"
echo "setup: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
