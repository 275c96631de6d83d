#!/usr/bin/env python3
"""Recomputes, with the numpy generator (tools/synth.py), every value and checksum that tests/test_synth.c pins,
so that both implementations are held to the same constants (docs/synthetic.md). Also checks that the weight
table has the sizes the decoder docs give. Runs with plain numpy (no torch):

    python3 tools/test_synth.py      # prints "N passed, N failed"; exit 1 on a failure
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def c_pins():
    """The tables between BEGIN PINS and END PINS of tests/test_synth.c."""
    text = open(os.path.join(ROOT, "tests", "test_synth.c")).read()
    block = text[text.index("BEGIN PINS"):text.index("END PINS")]
    vals = [(c, int(s), what, int(i), int(b, 16)) for c, s, what, i, b in
            re.findall(r'\{"(\w+)", (\d+), "([^"]+)", (\d+), (0x[0-9a-f]{8})u\}', block)]
    sums = [(c, int(s), what, int(v, 16)) for c, s, what, v in
            re.findall(r'\{"(\w+)", (\d+), "([^"]+)", (0x[0-9a-f]{16})ull\}', block)]
    return vals, sums


def main():
    passed = failed = 0

    def check(ok, msg):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL", msg)

    cv, cs = c_pins()
    pv, ps = synth.pins()
    check(len(cv) > 50 and len(cs) == 4, f"tests/test_synth.c holds {len(cv)} values and {len(cs)} checksums")
    check(len(cv) == len(pv), f"{len(pv)} values computed, {len(cv)} pinned in C")
    for a, b in zip(pv, cv):
        check(a == b, f"computed {a[:4]} = 0x{a[4]:08x}, pinned {b[:4]} = 0x{b[4]:08x}")
    check(len(cs) == len(ps), f"{len(ps)} checksums computed, {len(cs)} pinned in C")
    for a, b in zip(ps, cs):
        check(a == b, f"computed {a[:3]} = 0x{a[3]:016x}, pinned {b[:3]} = 0x{b[3]:016x}")

    table = synth.weight_table(synth.TI2V_5B)
    n = sum(int(synth.np.prod(s)) for _, s, _, _ in table)
    check(len(table) == 110, f"TI2V-5B: {len(table)} tensors, expected 110")
    check(n == 555051580, f"TI2V-5B: {n} parameters, expected 555051580")
    check(len(synth.weight_table(synth.NARROW)) == 110, "narrow: 110 tensors")

    # The latents' per-channel statistics are what the spec says (a loose check of the formula, not of bits).
    z = synth.synth_latents(synth.TI2V_5B, 3, 8, 16, 16)[0].reshape(48, -1).astype("float64")
    std = z.std(axis=1)
    check(((std > 0.45) & (std < 2.1)).all(), f"latent channel stds {std.min():.3f}..{std.max():.3f}")
    check(abs(z.mean(axis=1)).max() < 1.1, "latent channel means within [-1, 1]")

    print(f"test_synth.py: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
