#!/usr/bin/env bash
# The library's threads under ThreadSanitizer (`make test-tsan`: a build with SAN=thread, CUDA=0 and the built-in
# GEMM, since OpenBLAS's own threads are not instrumented and would report what is not ours). Any report fails the
# program that made it (halt_on_error, exit code 66). What runs, each chosen for its threads, on small sizes (TSan
# runs 10-20x slower and a race needs no size):
#  - test_sequence threads: two threads on one decoder (its lock), and decoders of 1 and 3 threads at once
#    (gemm.c's thread count, once a global every decoder's open wrote);
#  - test_png and test_io: the PNG encoder pool, the video writers;
#  - the CLI: decodes into .y4m (a file, then a pipe), PNG frames on 3 threads, .npy and .safetensors with -v, each
#    with its writer thread and its progress heartbeat, then a decode stopped by SIGTERM after its first pass, then a
#    band decode (--bands 2: into a whole video, then the writer).
# Prints "tsan: N passed, N failed". Usage: BUILD=build-tsan tests/tsan.sh
set -u
B=${BUILD:-build-tsan}
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}"
export W22_ROOT=${W22_ROOT:-$(pwd)}
logs=$B/logs
mkdir -p "$logs"
pass=0; fail=0
step() { # NAME COMMAND...: passes when the command exits 0 (a TSan report exits 66)
    local name=$1 start rc
    shift
    start=$(date +%s)
    "$@" > "$logs/tsan-$name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); printf '%-24s ok     %4d s\n' "$name" $(($(date +%s) - start))
    else
        fail=$((fail + 1)); printf '%-24s FAILED %4d s (exit %d%s)\n' "$name" $(($(date +%s) - start)) $rc \
            "$([ $rc -eq 66 ] && echo ': ThreadSanitizer')"
        grep -A30 -m1 "WARNING: ThreadSanitizer" "$logs/tsan-$name.log" | sed 's/^/    /'
        tail -n 5 "$logs/tsan-$name.log" | sed 's/^/    /'
    fi
}
step test_sequence_threads "$B/tests/test_sequence" threads
step test_png "$B/tests/test_png"
step test_io "$B/tests/test_io"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/w22tsan-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
W=$TMP/w.safetensors
Z=$TMP/z.npy
if ! "$B/wan22vae" synth weights --out "$W" --z-dim 4 --base-dim 8 --seed 1 > "$logs/tsan-synth.log" 2>&1 ||
    ! "$B/wan22vae" synth latents --out "$Z" --z-dim 4 --frames 3 --height 3 --width 5 >> "$logs/tsan-synth.log" 2>&1
then
    echo "the CLI could not make its synthetic inputs:"; sed 's/^/    /' "$logs/tsan-synth.log"; fail=$((fail + 1))
fi
dec() { "$B/wan22vae" decode --weights "$W" --latents "$Z" --frames-per-pass 1 "$@"; }
pipe() { # y4m on standard output into a pipe: the writer as a stream
    set -o pipefail
    dec --out - | cat > "$TMP/p.y4m"
}
step cli_y4m dec --out "$TMP/v.y4m" -v
step cli_y4m_pipe pipe
step cli_png_3_threads dec --out "$TMP/frames/" --threads 3 --progress
step cli_npy dec --out "$TMP/v.npy" -v
step cli_safetensors dec --out "$TMP/v.safetensors" -v
# SIGTERM once the first pass is done: the writer and the heartbeat stop with the decode, exit 1, nothing left
sigterm() {
    "$B/wan22vae" decode --weights "$W" --latents "$Z" --frames-per-pass 1 --out "$TMP/term.y4m" --progress \
        2> "$TMP/term.err" & # the binary itself, not dec: $! must be its pid, not a subshell's
    local pid=$! i rc
    for i in $(seq 600); do grep -q "pass 1/" "$TMP/term.err" 2> /dev/null && break; sleep 0.1; done
    kill -TERM $pid
    wait $pid
    rc=$?
    cat "$TMP/term.err"
    [ $rc -eq 66 ] && return 66
    if [ $rc -ne 1 ] || ! grep -q "interrupted by signal" "$TMP/term.err" || ls "$TMP" | grep -q term.y4m; then
        echo "exit $rc (expected 1, saying 'interrupted by signal', leaving no file): $(ls "$TMP")"
        return 1
    fi
}
step cli_sigterm sigterm
# a band decode (the Wan2.1 VAE's structure, 16 latent rows: 2 bands of 14 computed rows, the later one replaying
# stage 0 from the first's store): the CLI decodes into a whole video, then its writer thread takes the frames
bands() {
    "$B/wan22vae" synth weights --model wan2.1 --out "$TMP/w21.safetensors" --z-dim 4 --base-dim 8 --seed 1 &&
        "$B/wan22vae" synth latents --model wan2.1 --out "$TMP/z21.npy" --z-dim 4 --frames 2 --height 16 \
            --width 3 &&
        "$B/wan22vae" decode --weights "$TMP/w21.safetensors" --latents "$TMP/z21.npy" --bands 2 --threads 2 \
            --out "$TMP/b.y4m" --progress
}
step cli_bands bands
echo "tsan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
