"""The `wan22vae` command from the package: `python -m wan22vae decode ...` and the console script `wan22vae` that
`pip install ./python` puts on the PATH both run the CLI built with the library (the same commands, options, exit
statuses and signals: the process becomes the binary, so Ctrl-C, SIGTERM and the exit status are the binary's own).

The binary is looked for at $W22_BIN, in this package's bin/ (the copy `pip install` placed there), or in the repo's
build/ (a source checkout after `make`)."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "wan22vae"


def candidates():
    """Where the binary is looked for, in order."""
    out = []
    if os.environ.get("W22_BIN"):
        out.append(os.environ["W22_BIN"])
    out.append(os.path.join(_HERE, "bin", NAME))
    out.append(os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", NAME))
    return out


def find():
    """The binary's path, or (None, why) when none can be run."""
    tried = []
    for i, path in enumerate(candidates()):
        explicit = i == 0 and bool(os.environ.get("W22_BIN"))
        if not os.path.isfile(path):
            tried.append(f"{path} (absent)")
        elif not os.access(path, os.X_OK):
            try:  # a wheel unpacked without its mode bits
                os.chmod(path, os.stat(path).st_mode | 0o111)
            except OSError:
                pass
            if os.access(path, os.X_OK):
                return path, None
            tried.append(f"{path} (not executable)")
        else:
            return path, None
        if explicit:
            break  # W22_BIN names the one to run: another binary is not run in its place
    return None, "; ".join(tried)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    path, why = find()
    if path is None:
        sys.stderr.write(f"wan22vae: the wan22vae binary was not found; tried {why}. Install the package from the "
                         "repo (pip install ./python builds it with make), run `make` in a source checkout, or set "
                         "W22_BIN to its path\n")
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [NAME] + argv)  # never returns


if __name__ == "__main__":
    sys.exit(main())
