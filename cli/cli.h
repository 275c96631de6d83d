/* The `wan22vae` command's parts: one function per subcommand (cli/<name>.c) and the helpers they share for
 * options and messages. Exit codes (CLI_EXIT_CODES, printed by every help): 0 done, 1 a failure (the reason on
 * stderr; also a decode stopped by a signal, and gpu-check finding no usable GPU), 2 a usage error. */
#ifndef W22_CLI_H
#define W22_CLI_H

#include <stddef.h>
#include <stdint.h>

#define CLI_EXIT_CODES                                                                                          \
    "exit status: 0 done; 1 a failure (the reason on stderr; also a decode stopped by a signal); 2 a usage\n"     \
    "error (an unknown option, a bad value, a missing argument).\n"

int cli_decode(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_synth(int argc, char **argv);
int cli_gpu_check(int argc, char **argv);

/* msg on stderr, with any word over 4 KB (a pasted 100 KB argument) shown by its start and end. */
void cli_print_bounded(const char *msg);
/* "wan22vae: <what>: <the library's last message>" on stderr (bounded as above); returns 1. */
int cli_fail(const char *what_fmt, ...) __attribute__((format(printf, 1, 2)));
/* "wan22vae <cmd>: <message>" and a hint to --help on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An integer option's value in [lo, hi]; 0 on success, else prints a usage error and returns 2. */
int cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *v);
/* A size in bytes with an optional unit (K, M, G, T: powers of 1024, "2.5G"), at least lo; 2 after the message. */
int cli_size(const char *cmd, const char *opt, const char *s, size_t lo, size_t *v);
/* getopt_long's complaint (an unknown option or a missing value) as a usage error; returns 2. */
int cli_bad_option(const char *cmd, char **argv, int optopt_value);
/* Whether CUDA GPU `device` can run this build's kernels (sm_80 or later); why says what was found either way, in plain
 * words ("no NVIDIA driver or GPU is usable here (CUDA says: ...)", "this build ... has no CUDA backend"). */
int cli_cuda_usable(int device, char *why, size_t cap);

#endif
