"""The build hook of `pip install ./python`: runs `make` in the repo root (the directory above this one) for
build/libwan22vae.so and the CLI build/wan22vae, and puts copies of them into the wheel's wan22vae/ and
wan22vae/bin/ (never into the source tree); the console script `wan22vae` (pyproject.toml) runs that CLI.

Environment: W22_BUILD (the make build directory, default "build"), W22_MAKE (the make command, default "make"),
W22_SKIP_MAKE=1 (copy an existing build/libwan22vae.so without running make), MAKEFLAGS as make reads it."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = "libwan22vae.so"
CLI = "wan22vae"


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "wan22vae", LIB)
        dest_cli = os.path.join(self.build_lib, "wan22vae", "bin", CLI)
        build = os.environ.get("W22_BUILD", "build")
        built = os.path.join(ROOT, build, LIB)
        built_cli = os.path.join(ROOT, build, CLI)
        if not os.environ.get("W22_SKIP_MAKE"):
            if not os.path.isfile(os.path.join(ROOT, "Makefile")):
                raise SystemExit(f"wan22vae: no Makefile at {ROOT}; install from the repo (pip install ./python), "
                                 "or set W22_SKIP_MAKE=1 and W22_LIB at run time")
            cmd = [os.environ.get("W22_MAKE", "make"), "-C", ROOT, f"BUILD={build}", f"{build}/{LIB}", f"{build}/{CLI}"]
            if "-j" not in os.environ.get("MAKEFLAGS", ""):
                cmd.insert(1, f"-j{os.cpu_count() or 1}")
            print("wan22vae: " + " ".join(cmd), flush=True)
            subprocess.check_call(cmd)
        if not os.path.isfile(built):
            raise SystemExit(f"wan22vae: {built} is missing after make")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(built, dest)
        if os.path.isfile(built_cli):  # W22_SKIP_MAKE with a library alone: the package without its command
            os.makedirs(os.path.dirname(dest_cli), exist_ok=True)
            shutil.copy2(built_cli, dest_cli)
            os.chmod(dest_cli, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


def license_metadata():
    """Apache-2.0 (LICENSE in the repo root): an SPDX License-Expression where setuptools supports one (77+), else
    the License field (pyproject.toml declares the licence dynamic for this)."""
    import setuptools
    try:
        major = int(setuptools.__version__.split(".")[0])
    except ValueError:
        major = 0
    return {"license_expression": "Apache-2.0"} if major >= 77 else {"license": "Apache-2.0"}


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution, **license_metadata())
