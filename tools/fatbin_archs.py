#!/usr/bin/env python3
"""The GPU code a CUDA object, library or program holds, read from its fat binaries (no cuobjdump or GPU needed):
one line, "sass 80 86 89 90 100 120; ptx 80", the SM versions of its cubins (SASS) and of its PTX, each once.
tests/test_fat_build.sh checks the build's objects with it (issue 45: one make, every GPU since Ampere).

The fat binary's layout (as nvcc 12-13 write it): a header (magic 0xBA55ED50, u16 version, u16 header size 16,
u64 size of the entries), then entries: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u32 padded payload
size, 4 more u32, u32 SM version (80 for sm_80 and compute_80), ..."""
import struct
import sys

MAGIC = struct.pack("<I", 0xBA55ED50)


def archs(data):
    sass, ptx = set(), set()
    i = 0
    while True:
        i = data.find(MAGIC, i)
        if i < 0:
            return sass, ptx
        _, hsz, size = struct.unpack_from("<HHQ", data, i + 4)
        if hsz != 16 or i + hsz + size > len(data):
            i += 4
            continue
        p, end = i + hsz, i + hsz + size
        while p + 36 <= end:
            kind, _, ehs, padded, _, _, _, _, sm = struct.unpack_from("<HHIIIIIII", data, p)
            if ehs < 36:
                break
            (sass if kind == 2 else ptx if kind == 1 else set()).add(sm)
            p += ehs + padded
        i = end


def main(argv):
    if len(argv) != 2:
        print("usage: fatbin_archs.py FILE", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        sass, ptx = archs(f.read())
    print("sass " + " ".join(str(s) for s in sorted(sass)) + "; ptx " + " ".join(str(s) for s in sorted(ptx)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
