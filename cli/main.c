/* The `wan22vae` command: dispatches to the subcommands (decode, info, synth, gpu-check) and prints the top-level
 * help (`help CMD`: a command's own) and the version. Each subcommand lives in its own file in cli/. */
#define _GNU_SOURCE /* vasprintf */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include "wan22vae.h"
#include "cli.h"

static const char usage[] =
    "usage: wan22vae <command> [options]\n"
    "\n"
    "Decodes Wan video VAE latents (Wan2.2 TI2V-5B's, or the Wan2.1 VAE's: Wan2.1, Wan2.2 A14B, Qwen-Image) into\n"
    "video, on the CPU or an NVIDIA GPU from sm_80 on (Ampere, Ada, Hopper, Blackwell).\n"
    "\n"
    "commands:\n"
    "  decode     latents (.safetensors, .npy) -> video (.y4m or '-' for standard output, .mp4/.mkv/.webm/.mov/.gif\n"
    "             and any container ffmpeg writes, .npy, .safetensors, PNG frames)\n"
    "  info       validate weights (a file, a sharded index, a diffusers folder) and print what they hold\n"
    "  synth      make synthetic weights or latents (for tests and benchmarks)\n"
    "  gpu-check  exit 0 if a usable GPU (sm_80 or later) and the CUDA backend are here; says which kernels run\n"
    "  help CMD   the help of one command (as wan22vae CMD --help)\n"
    "\n"
    "wan22vae <command> --help says more; wan22vae --version prints the version.\n"
    "\n" CLI_EXIT_CODES;

/* A message on stderr with every word (a run without spaces) longer than LONG_WORD cut to its start and end: an
 * argument of 100 KB is named, not echoed in full (paths, up to PATH_MAX, pass whole). */
#define LONG_WORD 4096
void cli_print_bounded(const char *msg) {
    for (const char *p = msg; *p;) {
        size_t n = strcspn(p, " \t\n");
        if (n > LONG_WORD) fprintf(stderr, "%.200s...(%zu bytes)...%.40s", p, n, p + n - 40);
        else fwrite(p, 1, n, stderr);
        p += n;
        size_t sp = strspn(p, " \t\n");
        fwrite(p, 1, sp, stderr);
        p += sp;
    }
}

int cli_fail(const char *what_fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    const char *msg = w22_last_error();
    fputs("wan22vae: ", stderr);
    cli_print_bounded(what);
    fputs(": ", stderr);
    cli_print_bounded(msg && *msg ? msg : "(no message)");
    fputc('\n', stderr);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    const int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "wan22vae %s: ", cmd);
    cli_print_bounded(n >= 0 && msg ? msg : "(no memory for the message)");
    free(msg);
    fprintf(stderr, "\n(wan22vae %s --help lists the options)\n", cmd);
    return 2;
}

int cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return cli_usage_error(cmd, "%s: expected an integer in %lld..%lld, found '%s'", opt, lo, hi, s);
    *v = x;
    return 0;
}

int cli_size(const char *cmd, const char *opt, const char *s, size_t lo, size_t *v) {
    /* a number, then an optional unit K, M, G or T (powers of 1024; "2.5G", "2560M", "2.5GiB"), else bytes */
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    double unit = 1;
    const char *u = end;
    if (*u) {
        static const char units[] = "kmgt";
        const char *k = strchr(units, tolower((unsigned char)*u));
        if (k) unit = ldexp(1.0, 10 * (int)(k - units + 1)), u++;
        if (k && (*u == 'i' || *u == 'I')) u++;
        if (*u == 'b' || *u == 'B') u++;
    }
    const double bytes = x * unit, hi = ldexp(1.0, 50); /* 1 PiB */
    if (errno || end == s || *u || !(bytes >= (double)lo) || !(bytes <= hi) || !isfinite(bytes))
        return cli_usage_error(cmd, "%s: expected a size of at least %zu bytes (%.0f MiB) and at most 1P, a number "
                               "with an optional unit K, M, G or T (powers of 1024: 2.5G, 2560M), found '%s'",
                               opt, lo, lo / 1048576.0, s);
    *v = (size_t)bytes;
    return 0;
}

int cli_bad_option(const char *cmd, char **argv, int optopt_value) {
    extern int optind;
    const char *arg = argv[optind - 1];
    if (optopt_value && strncmp(arg, "--", 2) != 0)
        return cli_usage_error(cmd, "option -%c: unknown, or its value is missing", optopt_value);
    return cli_usage_error(cmd, "option '%s': unknown, or its value is missing", arg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") && argc > 2) { /* `wan22vae help decode` is `wan22vae decode --help` */
        static const char *const cmds[] = {"decode", "info", "synth", "gpu-check"};
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
            if (!strcmp(argv[2], cmds[i])) {
                char *args[] = {argv[2], "--help", NULL};
                return !strcmp(argv[2], "decode") ? cli_decode(2, args) : !strcmp(argv[2], "info") ?
                       cli_info(2, args) : !strcmp(argv[2], "synth") ? cli_synth(2, args) : cli_gpu_check(2, args);
            }
        fputs("wan22vae help: expected a command (decode, info, synth, gpu-check), found '", stderr);
        cli_print_bounded(argv[2]);
        fputs("'\n", stderr);
        return 2;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) return fputs(usage, stdout), 0;
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) return printf("wan22vae %s\n", w22_version()), 0;
    /* the subcommand sees itself as argv[0], so getopt starts at its first option */
    if (!strcmp(cmd, "decode")) return cli_decode(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cli_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cli_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "gpu-check")) return cli_gpu_check(argc - 1, argv + 1);
    fputs("wan22vae: expected a command (decode, info, synth, gpu-check), found '", stderr);
    cli_print_bounded(cmd);
    fprintf(stderr, "'\n\n%s", usage);
    return 2;
}
