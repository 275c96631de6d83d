/* The `wan22vae` command's parts: one function per subcommand (cli/<name>.c) and the helpers they share for
 * options and messages. Exit codes: 0 done, 1 a failure (the library's message on stderr), 2 a usage error. */
#ifndef W22_CLI_H
#define W22_CLI_H

#include <stdint.h>

int cli_decode(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_synth(int argc, char **argv);
int cli_gpu_check(int argc, char **argv);

/* "wan22vae: <what>: <the library's last message>" on stderr; returns 1. */
int cli_fail(const char *what_fmt, ...) __attribute__((format(printf, 1, 2)));
/* "wan22vae <cmd>: <message>" and a hint to --help on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An integer option's value in [lo, hi]; 0 on success, else prints a usage error and returns 2. */
int cli_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *v);
/* getopt_long's complaint (an unknown option or a missing value) as a usage error; returns 2. */
int cli_bad_option(const char *cmd, char **argv, int optopt_value);

#endif
