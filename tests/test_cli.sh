#!/usr/bin/env bash
# The `wan22vae` command end to end, on narrow synthetic weights (z_dim 4, base_dim 8) and small latents: decoding
# into every output format (checked with ffprobe where installed), and every bad input failing with its message
# and an exit code, leaving no output (and no temporary) behind: also .mp4 names with a colon, FIFO inputs, checks
# made before the weights load, and a signal mid-decode. Issue 31: the short options, -v/-q, `help CMD`, the exit
# codes in every help, --device cuda[:N] without a GPU said plainly; --out - (y4m on stdout, progress on stderr),
# FIFOs and devices written as streams; every container ffmpeg writes with its default codec, --codec/--crf/
# --pix-fmt/--ffmpeg-args and the BT.709 tags (ffprobed); weights from a pipeline folder, a VAE folder and a sharded
# index (and the refusals); --latents-normalized with a config's synthetic statistics and the built-in TI2V-5B
# ones; progress within seconds (a first line, a heartbeat during a pass). Prints "N passed, N failed"; exit 1 on a
# failure.
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

# ---- the Wan2.1 VAE (issue 44): synth --model wan2.1, info says which VAE, decode takes it (8x, 3 channels)
run "synth weights --model wan2.1" 0 "the Wan2.1 VAE" \
    "$BIN" synth weights --model wan2.1 --out w21.safetensors --z-dim 4 --base-dim 8 --seed 1
run "synth latents --model wan2.1" 0 "[1, 4, 2, 3, 4]" \
    "$BIN" synth latents --model wan2.1 --out z21.npy --z-dim 4 --frames 2 --height 3 --width 4
run "synth --model: unknown" 2 "expected ti2v-5b" "$BIN" synth weights --model wan3 --out x.safetensors
run "info: the Wan2.1 VAE" 0 "model:       the Wan2.1 VAE" "$BIN" info w21.safetensors
grep -q "tensors:     108" out.txt && grep -q "is_residual 0" out.txt && grep -q "160x90 into 81 frames of 1280x720 (width x height)" \
    out.txt && ok "info: Wan2.1's tensors, config, standard clip" || bad "info: Wan2.1" "$(cat out.txt)"
run "info: TI2V-5B" 0 "model:       Wan2.2 TI2V-5B, a narrow variant" "$BIN" info w.safetensors
if run "decode the Wan2.1 VAE" 0 "" "$BIN" decode -w w21.safetensors -l z21.npy -o v21.npy; then
    grep -qa "'shape': (1, 3, 5, 24, 32)" v21.npy && ok "Wan2.1 video: [1, 3, 5, 24, 32] (8x)" ||
        bad "Wan2.1 video shape" "$(head -c 100 v21.npy | tail -c 90)"
fi
run "Wan2.1 weights with TI2V latents" 1 "expected 4 channels" "$BIN" decode -w w21.safetensors -l z8.npy -o v21b.npy

# ---- --bands N (issue 44: w22_decoder_params.bands): the Wan2.1 VAE's latents of 16 rows, so that two bands of 8
# kept rows each compute 14 (W22_BAND_HALO 6), not the whole frame; the video decoded whole into host memory, then
# written: the whole frame's within a level of 8 bits (float32 rounding on the CPU), the same shape and frames
max_level_diff() { # the largest difference between two files' bytes of equal length (cmp -l: offset, octal, octal)
    cmp -l "$1" "$2" 2>/dev/null | awk 'function oct(s,  v, i) { v = 0; for (i = 1; i <= length(s); i++)
        v = v * 8 + substr(s, i, 1); return v }
        { d = oct($2) - oct($3); if (d < 0) d = -d; if (d > m) m = d } END { print m + 0 }'
}
"$BIN" synth latents --model wan2.1 -o z21r.npy --z-dim 4 --frames 2 --height 16 --width 4 --seed 5 >/dev/null 2>&1
b21() { "$BIN" decode -w w21.safetensors -l z21r.npy --threads 2 "$@"; }
if run "decode Wan2.1 (16 latent rows)" 0 "" b21 -o r0.y4m &&
   run "decode Wan2.1 --bands 2" 0 "in 2 bands of latent rows" b21 -o r2.y4m --bands 2 --progress; then
    want=$(( $(head -n 1 r0.y4m | wc -c) + 5 * (6 + 3 * 32 * 128) )) # the header, 5 x (FRAME\n, 4:4:4 32x128)
    [ "$(head -n 1 r0.y4m)" = "$(head -n 1 r2.y4m)" ] && [ "$(stat -c %s r0.y4m)" -eq "$want" ] &&
        [ "$(stat -c %s r2.y4m)" -eq "$want" ] && ok "--bands 2: the whole frame's header, 5 frames of 32x128" ||
        bad "--bands 2: header, size or frames" "$(head -n 1 r0.y4m) $(stat -c %s r0.y4m); $(head -n 1 r2.y4m) $(stat -c %s r2.y4m)"
    d=$(max_level_diff r0.y4m r2.y4m)
    [ "$d" -le 1 ] && ok "--bands 2: within 1 level of the whole frame ($d)" || bad "--bands 2: $d levels off the whole frame"
    # the progress ends with every pass done (the library's count of bands x passes) and every frame written
    last=$(tr '\r' '\n' <err.txt | grep 'pass [0-9]*/[0-9]* done' | tail -n 1)
    printf '%s\n' "$last" | grep -Eq '^band [0-9]+/[0-9]+, pass ([0-9]+)/\1 done.*video frames 5/5.*took|^pass ([0-9]+)/\2 done.*video frames 5/5.*took' &&
        ok "--bands 2: the last progress line" || bad "--bands 2: the last progress line" "$(cat err.txt)"
    run "decode Wan2.1 --bands 2 -o - (a stream)" 0 "" sh -c "'$BIN' decode -w w21.safetensors -l z21r.npy --threads 2 --bands 2 -o - > r2s.y4m"
    cmp -s r2.y4m r2s.y4m && ok "--bands 2: the same video to a stream" || bad "--bands 2: a stream differs"
    run "decode Wan2.1 --bands 1" 0 "" b21 -o r1.y4m --bands 1
    cmp -s r0.y4m r1.y4m && ok "--bands 1: the whole frame, streamed" || bad "--bands 1 differs from the whole frame"
    # a budget a byte below the whole frame's smallest plan: the failure names the fewest bands within it (plan.c's
    # bands_within); that band count under that budget decodes, and gives that band decode's bits (a budget keeps
    # the plan's arithmetic)
    run "decode Wan2.1 --memory-budget 64M" 1 "below what the smallest plan needs" b21 -o rb.y4m --memory-budget 64M
    need=$(sed -n 's/.*needs for latents [0-9x]*: [0-9.]* GiB (\([0-9]*\) bytes;.*/\1/p' err.txt | head -1)
    if [ -n "$need" ] && run "decode Wan2.1 a byte below the floor" 1 "band decode within this budget" b21 -o rb.y4m \
           --memory-budget $((need - 1)); then
        nb=$(sed -n 's/.*band decode within this budget: \([0-9]*\) bands.*/\1/p' err.txt | head -1)
        if [ -n "$nb" ] && run "decode Wan2.1 --bands $nb under the budget it was named for" 0 "" b21 -o rb.y4m \
               --bands "$nb" --memory-budget $((need - 1)) && run "decode Wan2.1 --bands $nb" 0 "" b21 -o rn.y4m --bands "$nb"; then
            cmp -s rb.y4m rn.y4m && ok "--bands $nb under the budget: that band decode's bits" ||
                bad "--bands $nb under the budget differs from --bands $nb"
        else
            bad "the band count from the budget's failure" "$(cat err.txt)"
        fi
    else
        bad "the need from the Wan2.1 budget's failure" "$(cat err.txt)"
    fi
fi
for b in -1 65 abc ""; do
    run "bad --bands '$b'" 2 "--bands: expected an integer in 0..64" b21 -o rbad.y4m --bands "$b"
done
[ ! -e rbad.y4m ] && ok "a bad --bands leaves no output" || bad "a bad --bands left rbad.y4m"
"$BIN" help decode 2>&1 | grep -q -- "--bands N" && ok "help decode lists --bands" || bad "help decode lacks --bands"

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
# a budget the default plan fits: the same video; 64M (the reserve alone): fails at the decode, naming the need; that
# need as the budget (every causal cache in host memory): the same video again, bit for bit
run "decode under --memory-budget 2.5G" 0 "" dec --out vb.npy --memory-budget 2.5G --threads 2
cmp -s v.npy vb.npy && ok "--memory-budget 2.5G: the same video" || bad "--memory-budget 2.5G changes the output"
run "decode under --memory-budget 64M" 1 "below what the smallest plan needs" dec --out vb64.npy --memory-budget 64M
need=$(sed -n 's/.*needs for latents [0-9x]*: [0-9.]* GiB (\([0-9]*\) bytes;.*/\1/p' err.txt | head -1)
if [ -n "$need" ] && run "decode under --memory-budget $need (the floor)" 0 "" dec --out vbf.npy --memory-budget "$need" \
       --threads 2 -v; then
    cmp -s v.npy vbf.npy && ok "--memory-budget at the floor: the same video" || bad "--memory-budget at the floor changes the output"
    grep -Eq "([0-9]+) of \1 causal caches \(of stages 0 1 2 3\) in host memory" err.txt && ok "-v says every cache is hosted" ||
        bad "-v under the floor's budget" "$(grep budget err.txt)"
else
    bad "the need from the failure's message" "$(cat err.txt)"
fi
[ ! -e vb64.npy ] && ok "a failed budget leaves no output" || bad "a failed budget left vb64.npy"
"$BIN" help decode 2>&1 | grep -q -- "--memory-budget SIZE" && ok "help decode lists --memory-budget" ||
    bad "help decode lacks --memory-budget"
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
# The same stop twice at once, as GNU timeout sends it (the process, then its process group, which holds the
# ffmpeg child of an .mp4 too) and as a terminal's Ctrl-C reaches a pipeline: one stop, the temporary removed
# (before, the second copy killed the process at once and left the temporary behind, 2 runs in 10 of `timeout 3`).
# setsid: the decode leads a group of its own, so that the group's signal reaches it and its children only.
# signal_twice NAME SIG OUT
signal_twice() {
    local name=$1 sig=$2 out=$3 pid i rc
    setsid env --default-signal=INT,QUIT "$BIN" decode --weights w.safetensors --latents zlong.npy --out "$out" \
        --frames-per-pass 1 --threads 1 >/dev/null 2>err.txt &
    pid=$!
    for ((i = 0; i < 400; i++)); do ls "$out".tmp-* >/dev/null 2>&1 && break; sleep 0.05; done
    kill -"$sig" "$pid" 2>/dev/null; kill -"$sig" -- -"$pid" 2>/dev/null
    wait "$pid"; rc=$?
    [ "$rc" -eq 1 ] && grep -q "interrupted by signal" err.txt && ok "$name: one stop, exit 1, says so" ||
        bad "$name: one stop, exit 1, says so" "exit $rc; $(cat err.txt)"
    nothing_left "$name" "$out"
}
if have setsid && env --default-signal=INT true 2>/dev/null; then
    signal_twice "SIGTERM twice at once (timeout's way)" TERM twice.y4m
    signal_twice "SIGINT twice at once" INT twiceint.y4m
    have ffmpeg && signal_twice "SIGINT twice at once, to the decode and its ffmpeg" INT twice.mp4
else
    echo "skip: the same signal twice at once (no setsid or env --default-signal)"
fi
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

# ---- the usual options: short forms, -v/-q, help CMD, exit codes in every help
if run "short options -w -l -o" 0 "" "$BIN" decode -w w.safetensors -l z.safetensors -o short.y4m; then
    cmp -s short.y4m v.y4m && ok "short options: the same video" || bad "short options: the same video"
fi
run "-f replaces" 0 "" "$BIN" decode -w w.safetensors -l z.safetensors -o short.y4m -f --progress
grep -q "pass 1/1 done" err.txt && ok "--progress on a file: progress on stderr" || bad "--progress" "$(cat err.txt)"
run "-q" 0 "" "$BIN" decode -w w.safetensors -l z.safetensors -o short.y4m -f -q --progress
[ ! -s err.txt ] && ok "-q: nothing on stderr" || bad "-q: nothing on stderr" "$(cat err.txt)"
run "-v: what was read" 0 "wan22vae: weights: w.safetensors (a safetensors file; 110 tensors), config from the file" \
    "$BIN" decode -w w.safetensors -l z.safetensors -o short.y4m -f -v
# -v's time line: every phase named with its seconds, and the phases of the process add up to no more than its time
t0=$(date +%s%N)
"$BIN" decode -w w.safetensors -l z.safetensors -o short.y4m -f -v 2>err.txt
wall=$(( ($(date +%s%N) - t0) / 1000000 ))
line=$(grep "^wan22vae: time: " err.txt)
sum=$(sed 's/(of it:[^)]*)//; s/; the writer busy.*//' <<<"$line" | grep -o '[0-9.]* s' | awk '{t += $1} END {printf "%d", t * 1000}')
missing=
for what in checks latents weights open "output and threads" decode "frames copied to the writer" \
    "waiting for its buffers" "the writer's last frames" "finishing the output" "the writer busy"; do
    grep -q "$what [0-9]*\.[0-9][0-9] s" <<<"$line" || missing="$missing '$what'"
done
[ -n "$line" ] && [ -z "$missing" ] && [ "$sum" -le "$wall" ] && ok "-v: the time line ($sum ms of the process' $wall ms)" ||
    bad "-v: the time line" "missing:$missing; the phases $sum ms, the process $wall ms: $line"
run "synth -o -f" 0 "" "$BIN" synth latents -o z.npy -f --z-dim 4 --frames 2 --height 3 --width 4
for c in decode info synth gpu-check; do
    run "help $c" 0 "usage: wan22vae $c" "$BIN" help "$c"
    grep -q "^exit status: 0 " out.txt && grep -q "1 a failure\|1 none" out.txt && grep -q "2 a usage" out.txt &&
        ok "help $c: the exit codes" || bad "help $c: the exit codes" "$(cat out.txt)"
done
"$BIN" --help >out.txt; grep -q "^exit status: 0 done" out.txt && ok "--help: the exit codes" || bad "--help: exit codes"
run "help frobnicate" 2 "found 'frobnicate'" "$BIN" help frobnicate
# --device cuda[:N] where no usable GPU is: said plainly, before anything loads (not CUDA's own words alone)
if ! "$BIN" gpu-check >/dev/null 2>&1; then
    for d in cuda cuda:0 cuda:3; do
        run "--device $d without a usable GPU" 1 "wan22vae: --device $d: no usable CUDA GPU: " \
            "$BIN" decode -w trunc.safetensors -l z.npy -o nogpu.y4m --device "$d"
        nothing_left "--device $d without a usable GPU" nogpu.y4m
    done
    "$BIN" gpu-check >out.txt 2>&1; grep -q "usable GPU (sm_80+): no (" out.txt && ok "gpu-check says why not" ||
        bad "gpu-check says why not" "$(cat out.txt)"
fi

# ---- standard output, FIFOs, devices: written directly as a stream, nothing else on stdout
if run "--out -" 0 "wrote standard output: 5 frames of 64x48 (y4m)" dec --out - --progress; then
    cmp -s out.txt v.y4m && ok "--out -: stdout holds exactly the y4m" || bad "--out -: stdout holds exactly the y4m" \
        "$(stat -c %s out.txt) bytes, expected $(stat -c %s v.y4m)"
    grep -q "pass 1/1 done" err.txt && ok "--out -: progress on stderr" || bad "--out -: progress on stderr"
fi
ls ./-* >/dev/null 2>&1 && bad "--out -: no file named '-'" "$(ls -d ./-*)" || ok "--out -: no file named '-'"
run "--out /dev/stdout" 0 "" dec --out /dev/stdout
cmp -s out.txt v.y4m && ok "/dev/stdout: the y4m" || bad "/dev/stdout: the y4m"
run "--out /dev/null" 0 "wrote /dev/null" dec --out /dev/null
mkfifo vidfifo vid.mkv vid2.npy
(timeout 30 cat vidfifo >fromfifo.y4m) & reader=$!
run "--out a FIFO (no extension: y4m)" 0 "" timeout 30 "$BIN" decode -w w.safetensors -l z.safetensors -o vidfifo
wait $reader
cmp -s fromfifo.y4m v.y4m && ok "the FIFO's reader got the y4m" || bad "the FIFO's reader got the y4m"
[ -p vidfifo ] && ok "the FIFO is still a FIFO" || bad "the FIFO is still a FIFO" "$(ls -l vidfifo)"
[ -z "$(ls -d vidfifo.tmp-* 2>/dev/null)" ] && ok "a FIFO: no temporary" || bad "a FIFO: no temporary"
run "a FIFO .npy: refused, no hang" 1 "expected a regular file, found a stream" \
    timeout 20 "$BIN" decode -w w.safetensors -l z.safetensors -o vid2.npy
# ---- latents as a stream: standard input, a FIFO (its writer may come later), a shell's <(...): the same video
run "--latents - (a pipe)" 0 "" sh -c 'cat z.safetensors | timeout 30 "$0" decode -w w.safetensors -l - -o st1.y4m' \
    "$BIN"
cmp -s st1.y4m v.y4m && ok "--latents -: the same video" || bad "--latents -: the same video"
(sleep 1; timeout 30 cat z.safetensors >fifo.npy) & writer=$! # .npy by name, safetensors by bytes: the name wins
run "--latents a FIFO .npy holding safetensors" 1 "fifo.npy: expected an .npy file" \
    timeout 30 "$BIN" decode -w w.safetensors -l fifo.npy -o st2.y4m
wait $writer
nothing_left "--latents a FIFO of the wrong kind" st2.y4m
mkfifo zfifo
(sleep 1; timeout 30 cat z.safetensors >zfifo) & writer=$!
run "--latents a FIFO, its writer a second late" 0 "" timeout 30 "$BIN" decode -w w.safetensors -l zfifo -o st3.y4m
wait $writer
cmp -s st3.y4m v.y4m && ok "--latents a FIFO: the same video" || bad "--latents a FIFO: the same video"
if [ -e /dev/fd/0 ]; then
    run "--latents <(...)" 0 "" bash -c '"$0" decode -w w.safetensors -l <(cat z.safetensors) -o st4.y4m' "$BIN"
    cmp -s st4.y4m v.y4m && ok "--latents <(...): the same video" || bad "--latents <(...): the same video"
fi
run "--latents - from /dev/null" 1 "standard input: expected the latents, found an empty stream" \
    sh -c 'timeout 30 "$0" decode -w w.safetensors -l - -o st5.y4m </dev/null' "$BIN"
run "--latents - of zeros" 1 "expected the latents as a .npy stream" \
    sh -c 'head -c 100000 /dev/zero | timeout 30 "$0" decode -w w.safetensors -l - -o st5.y4m' "$BIN"
nothing_left "--latents of the wrong kind" st5.y4m
if have ffmpeg && have ffprobe; then
    (timeout 60 cat vid.mkv >fromfifo.mkv) & reader=$!
    run "--out a FIFO named .mkv (through ffmpeg)" 0 "" timeout 60 "$BIN" decode -w w.safetensors -l z.safetensors \
        -o vid.mkv
    wait $reader
    p=$(ffprobe -v error -count_frames -show_entries stream=codec_name,nb_read_frames -of csv=p=0 fromfifo.mkv)
    [ "$p" = "h264,5" ] || [ "$p" = "mpeg4,5" ] && ok "the .mkv FIFO's reader: $p" || bad "the .mkv FIFO's reader" "$p"
    [ -p vid.mkv ] && ok "the .mkv FIFO is still a FIFO" || bad "the .mkv FIFO is still a FIFO"
    dec --out - -q 2>/dev/null | ffmpeg -v error -i - -f null - 2>ff.txt &&
        ok "--out - | ffmpeg -i -: it reads the stream" || bad "--out - | ffmpeg" "$(cat ff.txt)"
fi

# ---- containers through ffmpeg: the defaults per container, codec/quality/pixel format/raw options, BT.709 tags
if have ffmpeg && have ffprobe; then
    encoders=$(ffmpeg -hide_banner -encoders 2>/dev/null)
    tags() { ffprobe -v error -select_streams v:0 -show_entries \
                 stream=codec_name,pix_fmt,color_space,color_transfer,color_primaries,color_range -of csv=p=0 "$1"; }
    for spec in "mp4 libx264 h264,yuv420p,bt709,bt709,bt709,tv" "mkv libx264 h264,yuv420p,bt709,bt709,bt709,tv" \
                "mov libx264 h264,yuv420p,bt709,bt709,bt709,tv" "webm libvpx-vp9 vp9,yuv420p,bt709,bt709,bt709,tv"; do
        set -- $spec
        if ! grep -q " $2 " <<<"$encoders"; then echo "skip .$1: this ffmpeg has no $2"; continue; fi
        if run "decode .$1" 0 "wrote c.$1: 5 frames of 64x48 ($1)" dec --out "c.$1"; then
            got=$(ffprobe -v error -select_streams v:0 -show_entries \
                      stream=codec_name,pix_fmt,color_range,color_space,color_transfer,color_primaries -of csv=p=0 "c.$1")
            # csv order is ffprobe's: codec_name,pix_fmt,color_range,color_space,color_transfer,color_primaries
            want=$(awk -F, '{print $1","$2","$6","$3","$4","$5}' <<<"$3")
            [ "$got" = "$want" ] && ok ".$1: $got" || bad ".$1: codec, pix_fmt, range, colour tags" "$got, expected $want"
            p=$(probe "c.$1"); [ "$p" = "64,48,5" ] && ok ".$1: 64x48, 5 frames" || bad ".$1: frames" "$p"
        fi
    done
    if grep -q " gif " <<<"$encoders" && run "decode .gif" 0 "" dec --out c.gif; then
        p=$(ffprobe -v error -count_frames -show_entries stream=codec_name,nb_read_frames -of csv=p=0 c.gif)
        [ "$p" = "gif,5" ] && ok ".gif: 5 frames" || bad ".gif" "$p"
    fi
    if run "--codec mpeg4 --ffmpeg-args" 0 "" dec --out opt.mkv --codec mpeg4 \
           --ffmpeg-args "-metadata 'title=w22 test'"; then
        p=$(ffprobe -v error -show_entries stream=codec_name:format_tags=title -of csv=p=0 opt.mkv | tr '\n' ' ')
        grep -q "mpeg4" <<<"$p" && grep -q "w22 test" <<<"$p" && ok "--codec and --ffmpeg-args reach ffmpeg: $p" ||
            bad "--codec and --ffmpeg-args reach ffmpeg" "$p"
    fi
    if grep -q " libx264 " <<<"$encoders" &&
       run "--pix-fmt yuv444p --crf 30 -v" 0 "wan22vae: ffmpeg: " dec --out q.mp4 --pix-fmt yuv444p --crf 30 -v; then
        grep "wan22vae: ffmpeg: " err.txt | grep -q -- "-crf 30 -pix_fmt yuv444p -colorspace bt709" &&
            ok "-v: the ffmpeg command line" || bad "-v: the ffmpeg command line" "$(cat err.txt)"
        p=$(tags q.mp4); [ "$p" = "h264,yuv444p,tv,bt709,bt709,bt709" ] && ok "--pix-fmt yuv444p: $p" ||
            bad "--pix-fmt yuv444p" "$p"
    fi
    run "--codec that ffmpeg does not have: before the weights load, a usage error" 2 "Unknown encoder 'nonesuch'" \
        "$BIN" decode -w trunc.safetensors -l z.npy -o nocodec.mp4 --codec nonesuch
    nothing_left "--codec nonesuch" nocodec.mp4
fi

# ---- weights as Python reads them: a pipeline folder (vae/), the VAE folder, a sharded index
mkdir -p pipe/vae
cp w.safetensors pipe/vae/diffusion_pytorch_model.safetensors
cat >pipe/vae/config.json <<'EOF'
{"_class_name": "AutoencoderKLWan", "attn_scales": [], "base_dim": 160, "decoder_base_dim": 8,
 "dim_mult": [1, 2, 4, 4], "dropout": 0.0, "in_channels": 12, "is_residual": true,
 "latents_mean": [0.5, -0.25, 1.0, 0.125], "latents_std": [2.0, 0.5, 4.0, 1.0], "num_res_blocks": 2,
 "out_channels": 12, "patch_size": 2, "temperal_downsample": [false, true, true], "z_dim": 4}
EOF
for wdir in pipe pipe/vae pipe/vae/; do
    if run "decode from the folder $wdir" 0 "" "$BIN" decode -w "$wdir" -l z.safetensors -o "fold.y4m" -f; then
        cmp -s fold.y4m v.y4m && ok "$wdir: the same video as the file" || bad "$wdir: the same video as the file"
    fi
done
run "info on a folder" 0 "config.json: pipe/vae/config.json (diffusers AutoencoderKLWan)" "$BIN" info pipe
grep -q "latents_mean/latents_std of 4 channels" out.txt && grep -q "tensors:     110" out.txt &&
    ok "info on a folder: statistics, tensors" || bad "info on a folder" "$(cat out.txt)"
run "config.json as --weights" 1 "a config, not weights" "$BIN" info pipe/vae/config.json
mkdir -p empty; run "a folder without weights" 1 "no diffusion_pytorch_model.safetensors" "$BIN" info empty
if have python3; then
    # shards: the first 50 tensors in one file, the rest in another, and index files that name them
    python3 - w.safetensors <<'PY'
import json, os, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
names = [k for k in h if k != '__metadata__']
def shard(path, keep):
    out, parts, off = {}, [], 0
    for k in keep:
        s, e = h[k]['data_offsets']; parts.append(data[s:e])
        out[k] = dict(h[k], data_offsets=[off, off + e - s]); off += e - s
    j = json.dumps(out).encode(); j += b' ' * (-len(j) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(j)) + j + b''.join(parts))
os.makedirs('sharded', exist_ok=True)
shard('sharded/a.safetensors', names[:50]); shard('sharded/b.safetensors', names[50:])
shard('sharded/dup.safetensors', names[50:] + names[:1]); shard('outside.safetensors', names[50:])
def index(path, second):
    wm = {k: ('a.safetensors' if i < 50 else second) for i, k in enumerate(names)}
    json.dump({"metadata": {}, "weight_map": wm}, open(path, 'w'))
index('sharded/diffusion_pytorch_model.safetensors.index.json', 'b.safetensors')
index('sharded/dup.safetensors.index.json', 'dup.safetensors')
index('sharded/up.safetensors.index.json', '../outside.safetensors')
PY
    if run "decode from a sharded folder" 0 "" "$BIN" decode -w sharded -l z.safetensors -o shard.y4m; then
        cmp -s shard.y4m v.y4m && ok "sharded: the same video as the file" || bad "sharded: the same video"
    fi
    run "info on a sharded index" 0 "(2 shards)" "$BIN" info sharded/diffusion_pytorch_model.safetensors.index.json
    run "a tensor in two shards" 1 "is in two shards" "$BIN" info sharded/dup.safetensors.index.json
    run "a shard outside the index's folder" 1 "outside the index's folder" \
        "$BIN" decode -w sharded/up.safetensors.index.json -l z.safetensors -o up.y4m
    nothing_left "a shard outside the index's folder" up.y4m
else
    echo "skip sharded indexes: python3 not installed"
fi

# ---- --latents-normalized: a pipeline's latents, de-normalized z / (1 / std) + mean with the config's statistics
# npy_chan OUT "SHAPE" PER_CHANNEL HEX...: float32 .npy, channel c holds PER_CHANNEL copies of the little-endian
# bytes HEX[c] (e.g. \x00\x00\x80\x3f for 1.0)
npy_chan() {
    local out=$1 shape=$2 per=$3; shift 3
    local dict="{'descr': '<f4', 'fortran_order': False, 'shape': ($shape), }"
    local total=$(( (10 + ${#dict} + 1 + 63) / 64 * 64 ))
    local hlen=$((total - 10)) pad=$((total - 10 - ${#dict} - 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\$(printf '%03o' $((hlen & 255)))\\$(printf '%03o' $((hlen >> 8)))"
        printf '%s%*s\n' "$dict" "$pad" ''
        for v in "$@"; do for ((i = 0; i < per; i++)); do printf "$v"; done; done
    } >"$out"
}
one='\x00\x00\x80\x3f'
npy_chan ones.npy "1, 4, 2, 3, 4" 24 "$one" "$one" "$one" "$one"
# std [2, 0.5, 4, 1] and mean [0.5, -0.25, 1, 0.125] of pipe/vae/config.json: 1 * std + mean = 2.5, 0.25, 5, 1.125
npy_chan denorm.npy "1, 4, 2, 3, 4" 24 '\x00\x00\x20\x40' '\x00\x00\x80\x3e' '\x00\x00\xa0\x40' '\x00\x00\x90\x3f'
run "--latents-normalized with the folder's statistics" 0 "" \
    "$BIN" decode -w pipe -l ones.npy -o norm.npy --latents-normalized -v
grep -q "de-normalized (z \* std + mean) with latents_mean/latents_std of pipe/vae/config.json" err.txt &&
    ok "-v: which statistics" || bad "-v: which statistics" "$(cat err.txt)"
run "the de-normalized latents as they are" 0 "" "$BIN" decode -w pipe -l denorm.npy -o denorm-ref.npy
cmp -s norm.npy denorm-ref.npy && ok "--latents-normalized: z * std + mean per channel" ||
    bad "--latents-normalized: z * std + mean per channel"
run "the normalized latents without the option" 0 "" "$BIN" decode -w pipe -l ones.npy -o raw.npy
cmp -s norm.npy raw.npy && bad "--latents-normalized changes the video" || ok "--latents-normalized changes the video"
run "--latents-normalized, z_dim 4, no config.json" 1 "expected a config.json next to the weights with latents_mean" \
    "$BIN" decode -w w.safetensors -l ones.npy -o nostats.npy --latents-normalized
nothing_left "--latents-normalized without statistics" nostats.npy
if have python3; then
    # z_dim 48 without a config.json: Wan2.2 TI2V-5B's statistics (Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json),
    # here typed again, and the float32 arithmetic of diffusers' pipeline: 1 / std, then z / that + mean
    "$BIN" synth weights -o w48.safetensors --z-dim 48 --base-dim 8 --seed 4 >/dev/null 2>&1
    python3 - <<'PY'
import struct
mean = [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
        0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
        -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
        -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667]
std = [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901, 0.6885,
       0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338,
       0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458,
       1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744]
f32 = lambda x: struct.unpack('<f', struct.pack('<f', x))[0]   # a double rounded to float32
def npy(path, vals):
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 48, 1, 1, 1), }"
    d += ' ' * (64 - 10 - len(d) - 1) + '\n'
    open(path, 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode() +
                           b''.join(struct.pack('<f', v) for v in vals))
z = [f32(0.37 * ((i % 7) - 3)) for i in range(48)]
out = []
for c in range(48):
    inv = f32(1.0 / f32(std[c]))              # latents_std = 1.0 / tensor(latents_std)
    out.append(f32(f32(z[c] / inv) + f32(mean[c])))  # latents / latents_std + latents_mean
npy('z48n.npy', z); npy('z48d.npy', out)
PY
    run "--latents-normalized, z_dim 48: the built-in statistics" 0 "" \
        "$BIN" decode -w w48.safetensors -l z48n.npy -o n48.npy --latents-normalized
    run "the same latents de-normalized by hand" 0 "" "$BIN" decode -w w48.safetensors -l z48d.npy -o d48.npy
    cmp -s n48.npy d48.npy && ok "built-in TI2V-5B statistics: the pipeline's arithmetic" ||
        bad "built-in TI2V-5B statistics: the pipeline's arithmetic"
fi

# ---- progress within seconds: a first line saying what runs, then a heartbeat while a (long) pass runs
"$BIN" synth latents -o zprog.npy --z-dim 4 --frames 40 --height 8 --width 8 >/dev/null 2>&1
run "progress on a long pass" 0 "" "$BIN" decode -w w.safetensors -l zprog.npy -o /dev/null --frames-per-pass 40 \
    --threads 1 --progress --progress-interval 0.1
head -n 1 err.txt | grep -q "^wan22vae: decoding 40 latent frames of 8x8 into 157 frames of 128x128 (width x height) on the CPU (1 thread): 1 pass of 40 latent frames$" &&
    ok "progress: the first line says what runs" || bad "progress: the first line" "$(head -n 1 err.txt)"
n=$(grep -c "^pass 1/1 running, .*elapsed" err.txt)
[ "$n" -ge 1 ] && ok "progress: $n heartbeat lines during the one pass" || bad "progress: a heartbeat" "$(cat err.txt)"
run "--progress-interval out of range" 2 "--progress-interval" dec --out pi.y4m --progress-interval 0

# ---- usage errors: exit 2
run "missing --out" 2 "missing --out" "$BIN" decode --weights w.safetensors --latents z.npy
run "unknown option" 2 "--bogus" dec --out o8.y4m --bogus
run "bad --device" 2 "expected cpu, cuda or cuda:N" dec --out o9.y4m --device tpu
run "bad --device cuda:x" 2 "found 'cuda:x'" dec --out o9.y4m --device cuda:x
run "--device cuda:1 and --cuda-device 2" 2 "disagree" dec --out o9.y4m --device cuda:1 --cuda-device 2
run "--cuda-device with --device cpu" 2 "expected --device cuda" dec --out o9.y4m --cuda-device 1
run "bad --frames-per-pass" 2 "--frames-per-pass" dec --out o10.y4m --frames-per-pass 0
# --memory-budget SIZE (w22_decoder_params.work_budget_bytes): sizes with units; bad ones exit 2
for b in 0 -1 abc 2.5X 1e300 nan "" 63M 2P 1G5; do
    run "bad --memory-budget '$b'" 2 "--memory-budget" dec --out o10.y4m --memory-budget "$b"
done
run "a still-image extension" 2 "still-image extension '.png'" dec --out o11.png
if have ffmpeg; then
    run "an extension ffmpeg does not write" 2 "ffmpeg writes no format for the extension '.notavideo'" \
        dec --out o11.notavideo
else
    run "an extension for ffmpeg, without ffmpeg" 1 "needs ffmpeg" dec --out o11.notavideo
fi
run "--crf for a .y4m" 2 "--crf is for outputs written through ffmpeg" dec --out o12.y4m --crf 20
run "--codec for standard output" 2 "--codec is for outputs written through ffmpeg" dec --out - --codec libx264
run "--ffmpeg-args with an unclosed quote" 2 "quote is not closed" dec --out o13.mkv --ffmpeg-args "-metadata 'x"
run "-v with -q" 2 "expected one of them" dec --out o14.y4m -v -q
run "bad --kernels" 2 "--kernels: expected auto or portable, found 'hopper'" dec --out o14.y4m --kernels hopper
run "help decode: --kernels" 0 "--kernels K" "$BIN" help decode
for o in o8.y4m o9.y4m o11.png o11.notavideo o12.y4m o13.mkv o14.y4m; do nothing_left "usage errors" "$o"; done

# The writer thread (issue 30): the decode hands each frame over and goes on while a thread writes; the files must
# be byte for byte what writing in the decode's callback gives (--write-sync, hidden, for this A/B).
for o in wt.y4m wt.npy wt.safetensors wt_png/ $(have ffmpeg && echo wt.mkv); do
    bx=(); case $o in *.mkv) bx=(--ffmpeg-args "-fflags +bitexact -flags:v +bitexact");; esac  # mkv: no random segment id
    if dec --out "$o" -q "${bx[@]}" && dec --out "sync_$o" -q --write-sync "${bx[@]}"; then
        if [ -d "$o" ]; then diff -rq "$o" "sync_$o" >/dev/null && same=1 || same=0; else cmp -s "$o" "sync_$o" && same=1 || same=0; fi
        [ "$same" = 1 ] && ok "writer thread: $o as written in the callback" || bad "writer thread: $o differs from --write-sync"
    else
        bad "writer thread: decoding to $o" "$(cat err.txt 2>/dev/null)"
    fi
done

# --exact (w22_decoder_params.exact): the CPU backend is exact already, so the same file; help lists it
if dec --out ex1.npy -q --exact && dec --out ex0.npy -q && cmp -s ex0.npy ex1.npy; then ok "--exact on the CPU: the same video"
else bad "--exact on the CPU" "$(cat err.txt 2>/dev/null)"; fi
"$BIN" help decode 2>&1 | grep -q -- "--exact" && ok "help decode lists --exact" || bad "help decode lacks --exact"

# A misspelt W22_* variable is named on stderr (once), a known one is not (issue 29: one table, src/env.c)
run "an unknown W22_ variable" 0 "W22_CHEK is not a variable of this library" env W22_CHEK=1 "$BIN" decode \
    --weights w.safetensors --latents z.safetensors --out envw.y4m -q -f
if env W22_CHECK=0 "$BIN" decode --weights w.safetensors --latents z.safetensors --out envw.y4m -q -f 2>&1 |
    grep -q "is not a variable"; then
    bad "a known W22_ variable warned about"
else
    ok "a known W22_ variable: no warning"
fi

# PNG frames (issue 30): encoded on every core at --png-level 0..9 (default 1). Every level and thread count gives
# the pixels of the .npy output of the same decode turned into 8 bits as diffusers does (what the writer did before
# the pool): the PNGs are read back here with Python's zlib and the rows unfiltered by hand.
png_same_as_npy() { # NPY DIR...: prints one line per differing folder, nothing when all agree
    python3 - "$@" <<'PY'
import struct, sys, zlib
import numpy as np
def read_png(path):
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(b):
        n, t = struct.unpack(">I4s", b[pos:pos + 8])
        d = b[pos + 8:pos + 8 + n]
        if t == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", d[:10]); assert (depth, ctype) == (8, 2)
        if t == b"IDAT": idat += d
        pos += 12 + n
    raw, stride, bpp = zlib.decompress(idat), w * 3, 3
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = row[x - bpp] if x >= bpp else 0
            b_, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: row[x] = (row[x] + a) & 255
            elif f == 2: row[x] = (row[x] + b_) & 255
            elif f == 3: row[x] = (row[x] + (a + b_) // 2) & 255
            elif f == 4:
                p = a + b_ - c; pa, pb, pc = abs(p - a), abs(p - b_), abs(p - c)
                row[x] = (row[x] + (a if pa <= pb and pa <= pc else b_ if pb <= pc else c)) & 255
            else: assert f == 0, f"filter {f}"
        out += row; prev = row
    return np.frombuffer(bytes(out), np.uint8).reshape(h, w, 3)
v = np.load(sys.argv[1])[0]  # [3, F, H, W]
a = np.clip(v * np.float32(0.5) + np.float32(0.5), 0, 1) * np.float32(255)  # float32 steps, as diffusers
want = np.rint(a).astype(np.uint8).transpose(1, 2, 3, 0)  # [F, H, W, 3]
for d in sys.argv[2:]:
    got = np.stack([read_png(f"{d}/frame_{f:05d}.png") for f in range(want.shape[0])])
    if not np.array_equal(got, want): print(f"{d}: {int((got != want).sum())} values differ")
PY
}
if dec --out png_ref.npy -q; then
    dirs=(); ok_dec=1; k=0
    for a in "--png-level 0 --threads 1" "--png-level 1 --threads 2" "--png-level 5 --threads 3" \
             "--png-level 9 --threads 1" "--png-level 9 --threads 2" "--threads 2" ""; do
        k=$((k + 1)); d=png_$k
        if dec --out "$d/" -q $a 2>err.txt; then dirs+=("$d"); else ok_dec=0; bad "PNG frames $a" "$(cat err.txt)"; fi
    done
    [ "$ok_dec" = 1 ] && ok "PNG frames at levels 0, 1, 5, 9 and the default, on 1, 2, 3 threads and every core"
    s0=$(du -sb png_1 | cut -f1); s9=$(du -sb png_4 | cut -f1)
    if ldd "$BIN" 2>/dev/null | grep -q libpng; then
        [ "$s9" -lt "$s0" ] && ok "--png-level 9 smaller than 0 ($s9 < $s0 bytes)" || bad "--png-level 9 vs 0" "$s9 vs $s0 bytes"
    else # a build without libpng stores the rows at every level
        [ "$s9" -eq "$s0" ] && ok "--png-level without libpng: stored ($s0 bytes)" || bad "--png-level without libpng" "$s9 vs $s0 bytes"
    fi
    if have python3 && python3 -c 'import numpy' 2>/dev/null; then
        diffs=$(png_same_as_npy png_ref.npy "${dirs[@]}" 2>&1)
        [ -z "$diffs" ] && ok "PNG frames at every level and thread count: the .npy's pixels" ||
            bad "PNG frames: the .npy's pixels" "$diffs"
    else
        echo "skip PNG pixels against .npy: no python3 with numpy"
    fi
else
    bad "decode .npy for the PNG comparison" "$(cat err.txt 2>/dev/null)"
fi
run "--png-level 10" 2 "--png-level: expected an integer in 0..9, found '10'" dec --out pl10/ --png-level 10
run "--png-level -1" 2 "found '-1'" dec --out pl11/ --png-level -1
run "--png-level x" 2 "found 'x'" dec --out pl12/ --png-level x
run "--png-level for a .y4m" 2 "--png-level is for PNG frames" dec --out pl13.y4m --png-level 3
for o in pl10 pl11 pl12 pl13.y4m; do nothing_left "--png-level usage errors" "$o"; done
run "help decode: --png-level" 0 "--png-level N" "$BIN" help decode

echo "test_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
