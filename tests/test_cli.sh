#!/usr/bin/env bash
# The `wan22vae` command end to end, on narrow synthetic weights (z_dim 4, base_dim 8) and small latents: decoding
# into every output format (checked with ffprobe where installed), and every bad input failing with its message
# and an exit code, leaving no output (and no temporary) behind: also .mp4 names with a colon, FIFO inputs, checks
# made before the weights load, and a signal mid-decode. Prints "N passed, N failed"; exit 1 on a failure.
# The binary: $W22_BIN, else $BUILD/wan22vae (BUILD defaults to build).
set -u
BIN=${W22_BIN:-${BUILD:-build}/wan22vae}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
if [ ! -x "$BIN" ]; then
    echo "test_cli: no binary at $BIN (set W22_BIN or BUILD)"; echo "test_cli: 0 passed, 1 failed"; exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/w22cli-XXXXXX")
[ -n "${W22_KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/     /'; return 0; }
have() { command -v "$1" >/dev/null 2>&1; }

# run NAME WANT_RC 'message substring' cmd...: the exit code and (when given) the message on stderr
run() {
    local name=$1 want=$2 msg=$3; shift 3
    "$@" >out.txt 2>err.txt
    local rc=$?
    if [ "$rc" -ne "$want" ]; then bad "$name" "exit $rc, expected $want; stderr: $(cat err.txt)"; return 1; fi
    if [ -n "$msg" ] && ! grep -qF -- "$msg" err.txt out.txt; then
        bad "$name" "expected the message to contain '$msg'; stderr: $(cat err.txt)"; return 1
    fi
    ok "$name"
}
# nothing at PATH and no temporary next to it
nothing_left() {
    local name=$1 path=${2%/}
    local left; left=$(ls -d "$path" "$path".tmp-* "$path".old-* 2>/dev/null)
    if [ -n "$left" ]; then bad "$name: nothing left" "found: $left"; else ok "$name: nothing left"; fi
}
# an .npy file of float32 zeros with the given shape text ("4, 2, 3"); NAN_AT: the index of one NaN (or -1)
npy_f32() {
    local out=$1 shape=$2 count=$3 nan_at=${4:--1}
    local dict="{'descr': '<f4', 'fortran_order': False, 'shape': ($shape), }"
    local total=$(( (10 + ${#dict} + 1 + 63) / 64 * 64 ))
    local hlen=$((total - 10)) pad=$((total - 10 - ${#dict} - 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\$(printf '%03o' $((hlen & 255)))\\$(printf '%03o' $((hlen >> 8)))"
        printf '%s%*s\n' "$dict" "$pad" ''
        for ((i = 0; i < count; i++)); do
            if [ "$i" -eq "$nan_at" ]; then printf '\x00\x00\xc0\x7f'; else printf '\x00\x00\x00\x00'; fi
        done
    } >"$out"
}
probe() { ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=width,height,nb_read_frames \
              -of csv=p=0 "$@" 2>&1 | head -n 1; }

# ---- the basics
run "--version" 0 "wan22vae 0.1" "$BIN" --version
run "--help" 0 "decode" "$BIN" --help
for c in decode info synth gpu-check; do run "$c --help" 0 "usage: wan22vae $c" "$BIN" "$c" --help; done
"$BIN" gpu-check >out.txt 2>&1; rc=$?
if { [ $rc -eq 0 ] || [ $rc -eq 1 ]; } && grep -q "usable GPU" out.txt; then ok "gpu-check (exit $rc)"; else
    bad "gpu-check" "exit $rc: $(cat out.txt)"; fi
run "no command" 2 "usage" "$BIN"
run "unknown command" 2 "found 'frobnicate'" "$BIN" frobnicate

# ---- synthetic data (T=2 latent frames of 3x4 -> 5 frames of 48x64)
run "synth weights" 0 "" "$BIN" synth weights --out w.safetensors --z-dim 4 --base-dim 8 --seed 1
run "synth weights f32" 0 "" "$BIN" synth weights --out w32.safetensors --z-dim 4 --base-dim 8 --seed 1 --dtype f32
run "synth latents .safetensors" 0 "" "$BIN" synth latents --out z.safetensors --z-dim 4 --frames 2 --height 3 --width 4
run "synth latents .npy" 0 "" "$BIN" synth latents --out z.npy --z-dim 4 --frames 2 --height 3 --width 4
run "synth latents z_dim 8" 0 "" "$BIN" synth latents --out z8.npy --z-dim 8 --frames 2 --height 3 --width 4
run "synth latents: existing refused" 1 "found an existing file" \
    "$BIN" synth latents --out z.npy --z-dim 4 --frames 1 --height 1 --width 1
run "synth: missing --frames" 2 "missing --frames" "$BIN" synth latents --out q.npy --height 3 --width 4
run "info" 0 "z_dim 4, base_dim 8" "$BIN" info w.safetensors
grep -q "tensors:     110" out.txt && grep -q "dtypes:      BF16 x 110" out.txt && grep -q "FLOPs:" out.txt &&
    ok "info: tensors, dtypes, FLOPs" || bad "info: tensors, dtypes, FLOPs" "$(cat out.txt)"

# ---- decoding into each format
dec() { "$BIN" decode --weights w.safetensors --latents z.safetensors "$@"; }
if run "decode .y4m" 0 "" dec --out v.y4m; then
    [ "$(head -c 9 v.y4m)" = YUV4MPEG2 ] && ok "y4m header" || bad "y4m header" "$(head -c 60 v.y4m)"
    if have ffprobe; then
        p=$(probe v.y4m); [ "$p" = "64,48,5" ] && ok "ffprobe y4m: 64x48, 5 frames" || bad "ffprobe y4m" "$p"
    fi
fi
run "decode .y4m from .npy latents" 0 "" "$BIN" decode --weights w.safetensors --latents z.npy --out v2.y4m
cmp -s v.y4m v2.y4m && ok "same video from .npy and .safetensors latents" || bad "same video from .npy latents"
if run "decode .npy" 0 "" dec --out v.npy; then
    size=$(stat -c %s v.npy); want=$((128 + 3 * 5 * 48 * 64 * 4))
    [ "$size" -eq "$want" ] && grep -qa "'shape': (1, 3, 5, 48, 64)" v.npy && ok ".npy shape and size" ||
        bad ".npy shape and size" "size $size, expected $want; $(head -c 100 v.npy | tail -c 90)"
fi
run "decode .npy, 1 latent frame per pass" 0 "" dec --out v1.npy --frames-per-pass 1 --threads 2
cmp -s v.npy v1.npy && ok "frames per pass does not change the output" || bad "frames per pass changes the output"
run "decode .safetensors" 0 "" dec --out v.safetensors
[ -f v.safetensors ] && [ "$(stat -c %s v.safetensors)" -gt $((3 * 5 * 48 * 64 * 4)) ] && ok ".safetensors size" ||
    bad ".safetensors size"
if run "decode PNG frames" 0 "" dec --out frames/; then
    n=$(ls frames | grep -c '^frame_[0-9]\{5\}\.png$')
    [ "$n" -eq 5 ] && [ "$(ls frames | wc -l)" -eq 5 ] && ok "5 PNG frames" || bad "5 PNG frames" "$(ls frames)"
    if have ffprobe; then
        p=$(ffprobe -v error -show_entries stream=width,height -of csv=p=0 frames/frame_00004.png 2>&1)
        [ "$p" = "64,48" ] && ok "ffprobe PNG: 64x48" || bad "ffprobe PNG" "$p"
    fi
fi
run "decode PNG frames, no extension" 0 "" dec --out frames2
[ "$(ls frames2 2>/dev/null | wc -l)" -eq 5 ] && ok "PNG directory without '/'" || bad "PNG directory without '/'"
if have ffmpeg; then
    if run "decode .mp4" 0 "" dec --out v.mp4 --fps 12; then
        p=$(probe v.mp4); [ "$p" = "64,48,5" ] && ok "ffprobe mp4: 64x48, 5 frames" || bad "ffprobe mp4" "$p"
    fi
    # ffmpeg reads the y4m's pixels as written (yuv444p out: no conversion): a playable file, not just a header
    if [ -f v.y4m ]; then
        L=$(head -n 1 v.y4m | wc -c); S=$((3 * 48 * 64))
        for f in 0 1 2 3 4; do tail -c +$((L + f * (6 + S) + 7)) v.y4m | head -c $S; done >y4m.raw
        ffmpeg -v error -i v.y4m -f rawvideo -pix_fmt yuv444p - 2>/dev/null >ff.raw
        [ "$(stat -c %s ff.raw)" -eq $((5 * S)) ] && cmp -s ff.raw y4m.raw && ok "ffmpeg decodes the y4m's frames" ||
            bad "ffmpeg decodes the y4m's frames" "$(stat -c %s ff.raw) bytes, expected $((5 * S))"
    fi
else
    echo "skip .mp4: ffmpeg not installed"
fi
W22_FFMPEG=/nonexistent/ffmpeg run "decode .mp4 without ffmpeg" 1 "needs ffmpeg" dec --out noff.mp4
nothing_left "decode .mp4 without ffmpeg" noff.mp4
# names with a colon, relative: ffmpeg must write each as a file, never read "file:", "pipe:" or "clip:" as a protocol
if have ffmpeg; then
    for o in file:c.mp4 pipe:1.mp4 clip:v2.mp4; do
        if run "decode .mp4 named $o" 0 "wrote $o" dec --out "$o"; then
            p=$(probe "./$o"); [ "$p" = "64,48,5" ] && ok "ffprobe $o: 64x48, 5 frames" || bad "ffprobe $o" "$p"
        fi
    done
    left=$(ls -d c.mp4* 1.mp4* v2.mp4* ./*.mp4.tmp-* 2>/dev/null)
    [ -z "$left" ] && ok "colon names: no stray file" || bad "colon names: no stray file" "found: $left"
fi

# ---- checked before the weights load (trunc.safetensors would fail the load: the other message must come first)
head -c 5000 w.safetensors >trunc.safetensors
t0=$(date +%s%N)
run "no ffmpeg on PATH: refused before the weights load" 1 "needs ffmpeg" \
    env PATH=/nonexistent "$BIN" decode --weights trunc.safetensors --latents z.npy --out early.mp4
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
! grep -q "loading weights" err.txt && [ "$dt" -lt 5000 ] && ok "no ffmpeg: at once ($dt ms), no weight load" ||
    bad "no ffmpeg: at once, no weight load" "$dt ms; $(cat err.txt)"
nothing_left "no ffmpeg on PATH" early.mp4
long=$(printf 'a%.0s' $(seq 250)).y4m
run "an output name too long for its temporary" 1 "'<name>.tmp-XXXXXX' fits" \
    "$BIN" decode --weights trunc.safetensors --latents z.npy --out "$long"
nothing_left "an output name too long" "$long"
run "--fps 0.0001 (a rate of 0 in the header)" 2 "--fps: expected a number in 0.01..1000, found '0.0001'" \
    dec --out slow.y4m --fps 0.0001
nothing_left "--fps 0.0001" slow.y4m
run "--fps 0.01" 0 "" dec --out slow2.y4m --fps 0.01
head -n 1 slow2.y4m | grep -q " F10:1000 " && ok "--fps 0.01: F10:1000" || bad "--fps 0.01" "$(head -n 1 slow2.y4m)"

# ---- FIFOs as inputs: refused at once (a plain open() of one waits for a writer forever)
mkfifo fifo.safetensors fifo.npy
run "a FIFO as --weights" 1 "found a FIFO" \
    timeout 20 "$BIN" decode --weights fifo.safetensors --latents z.npy --out f1.y4m
nothing_left "a FIFO as --weights" f1.y4m
run "a FIFO as --latents" 1 "found a FIFO" \
    timeout 20 "$BIN" decode --weights w.safetensors --latents fifo.npy --out f2.y4m
nothing_left "a FIFO as --latents" f2.y4m
run "info: a FIFO" 1 "found a FIFO" timeout 20 "$BIN" info fifo.safetensors

# ---- a signal mid-decode: the decode stops at its next step, says so, exits 1 and leaves nothing. SIGHUP and
# SIGTERM as sent; SIGINT and SIGQUIT with their default restored (a background job of a script starts with them
# ignored, and an ignored signal stays ignored).
"$BIN" synth latents --out zlong.npy --z-dim 4 --frames 200 --height 8 --width 8 >/dev/null 2>&1
sigs="HUP TERM"
env --default-signal=INT true 2>/dev/null && sigs="HUP TERM INT QUIT" ||
    echo "skip SIGINT/SIGQUIT: this env has no --default-signal"
# signal_mid NAME SIG WANT_RC OUT [prefix...]: starts a decode of zlong.npy, sends SIG once its temporary exists
signal_mid() {
    local name=$1 sig=$2 want=$3 out=$4; shift 4
    "$@" "$BIN" decode --weights w.safetensors --latents zlong.npy --out "$out" --frames-per-pass 1 --threads 1 \
        >/dev/null 2>err.txt &
    local pid=$! i
    for ((i = 0; i < 400; i++)); do ls "$out".tmp-* >/dev/null 2>&1 && break; sleep 0.05; done
    kill -"$sig" "$pid" 2>/dev/null
    wait "$pid"
    local rc=$?
    [ "$rc" -eq "$want" ] && ok "$name: exit $rc" || bad "$name: exit $rc, expected $want" "$(cat err.txt)"
}
for sig in $sigs; do
    pre=(); [ "$sig" = INT ] || [ "$sig" = QUIT ] && pre=(env --default-signal=INT,QUIT)
    signal_mid "SIG$sig mid-decode" "$sig" 1 "sig$sig.y4m" "${pre[@]}"
    grep -q "interrupted by signal" err.txt && ok "SIG$sig: says so" || bad "SIG$sig: says so" "$(cat err.txt)"
    nothing_left "SIG$sig mid-decode" "sig$sig.y4m"
done
# SIGHUP ignored by who started us (nohup) stays ignored: the decode completes
"$BIN" synth latents --out zmid.npy --z-dim 4 --frames 20 --height 8 --width 8 >/dev/null 2>&1
nohup_decode() { (trap '' HUP; exec "$BIN" decode --weights w.safetensors --latents zmid.npy --out nohup.y4m \
                      --frames-per-pass 1 --threads 1 >/dev/null 2>err.txt) & }
nohup_decode; pid=$!
for ((i = 0; i < 400; i++)); do ls nohup.y4m.tmp-* >/dev/null 2>&1 && break; sleep 0.05; done
kill -HUP "$pid" 2>/dev/null; wait "$pid"; rc=$?
[ "$rc" -eq 0 ] && [ -f nohup.y4m ] && ok "SIGHUP ignored (nohup): the decode completes" ||
    bad "SIGHUP ignored (nohup): the decode completes" "exit $rc; $(cat err.txt)"

# ---- bad inputs: the message, the exit code, and no output left behind
run "missing weights file" 1 "loading weights nope.safetensors" \
    "$BIN" decode --weights nope.safetensors --latents z.npy --out o1.y4m
nothing_left "missing weights file" o1.y4m
head -c 5000 w.safetensors >trunc.safetensors
run "truncated weights" 1 "loading weights trunc.safetensors" \
    "$BIN" decode --weights trunc.safetensors --latents z.npy --out o2.y4m
nothing_left "truncated weights" o2.y4m
if have python3; then
    python3 - w.safetensors missing.safetensors decoder.conv_in.bias <<'PY'
import json, struct, sys
src, dst, drop = sys.argv[1:4]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
out, parts, off = {}, [], 0
for k, v in h.items():
    if k == '__metadata__': out[k] = v; continue
    if k == drop: continue
    s, e = v['data_offsets']; parts.append(data[s:e])
    out[k] = dict(v, data_offsets=[off, off + e - s]); off += e - s
j = json.dumps(out).encode(); j += b' ' * (-len(j) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(j)) + j + b''.join(parts))
PY
    run "weights missing a tensor" 1 "decoder.conv_in.bias" \
        "$BIN" decode --weights missing.safetensors --latents z.npy --out o3.y4m
    nothing_left "weights missing a tensor" o3.y4m
    run "info: weights missing a tensor" 1 "decoder.conv_in.bias" "$BIN" info missing.safetensors
else
    echo "skip weights missing a tensor: python3 not installed"
fi
run "info: truncated weights" 1 "invalid weights" "$BIN" info trunc.safetensors
run "latents with the wrong channel count" 1 "expected 4 channels" dec --latents z8.npy --out o4.y4m
nothing_left "latents with the wrong channel count" o4.y4m
npy_f32 rank3.npy "4, 2, 3" 24
run "latents with the wrong rank" 1 "expected latents of shape [1, C, T, h, w] or [C, T, h, w], found [4, 2, 3]" \
    "$BIN" decode --weights w.safetensors --latents rank3.npy --out o5.y4m
nothing_left "latents with the wrong rank" o5.y4m
npy_f32 nan.npy "1, 4, 1, 2, 2" 16 5
run "a NaN in the latents" 1 "NaN at index 5 [0, 1, 0, 0, 1]" \
    "$BIN" decode --weights w.safetensors --latents nan.npy --out o6.y4m
nothing_left "a NaN in the latents" o6.y4m
npy_f32 zeros.npy "1, 4, 1, 2, 2" 16
run "hand-made .npy latents decode" 0 "" "$BIN" decode --weights w.safetensors --latents zeros.npy --out ok.npy
printf 'precious' >exists.y4m
run "an existing output" 1 "found an existing file; not replacing it" dec --out exists.y4m
[ "$(cat exists.y4m)" = precious ] && ok "existing output unchanged" || bad "existing output unchanged"
[ -z "$(ls -d exists.y4m.tmp-* 2>/dev/null)" ] && ok "existing output: no temporary" ||
    bad "existing output: no temporary"
run "an existing output with --force" 0 "" dec --out exists.y4m --force
[ "$(head -c 9 exists.y4m)" = YUV4MPEG2 ] && ok "--force replaced it" || bad "--force replaced it"
run "an output directory that does not exist" 1 "does not exist" dec --out nodir/o7.y4m
[ ! -e nodir ] && ok "no directory created" || bad "no directory created"
run "PNG frames under a missing directory" 1 "does not exist" dec --out nodir/frames/
[ ! -e nodir ] && ok "no directory created for PNG frames" || bad "no directory created for PNG frames"

# ---- usage errors: exit 2
run "missing --out" 2 "missing --out" "$BIN" decode --weights w.safetensors --latents z.npy
run "unknown option" 2 "--bogus" dec --out o8.y4m --bogus
run "bad --device" 2 "expected cpu or cuda" dec --out o9.y4m --device tpu
run "bad --frames-per-pass" 2 "--frames-per-pass" dec --out o10.y4m --frames-per-pass 0
run "bad output extension" 2 "found '.avi'" dec --out o11.avi
nothing_left "usage errors" o8.y4m; nothing_left "usage errors" o9.y4m; nothing_left "usage errors" o11.avi

echo "test_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
