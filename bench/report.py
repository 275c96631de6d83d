#!/usr/bin/env python3
"""Markdown tables from a results JSON of bench/bench.py, for docs/PERF.md and bench/README.md.

    python3 bench/report.py bench/results/2026-12-02-h200.json            prints the run's table
    python3 bench/report.py R.json --history                              prints its one-line history row
    python3 bench/report.py R.json --write docs/PERF.md                   replaces the table between
                                                                           <!-- bench:latest:begin/end --> and adds
                                                                           the history row before
                                                                           <!-- bench:history:end --> (if present)

Plain Python (no torch, no numpy).
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (its pure functions only: importing it needs no torch)

LATEST = ("<!-- bench:latest:begin -->", "<!-- bench:latest:end -->")
HISTORY_END = "<!-- bench:history:end -->"
HISTORY_HEADER = ("| date | GPU | SM clock | commit | f121 ms | f241 ms | f481 ms | geomean ms | gap | "
                  "diffusers bf16 geomean ms | speedup | peak GiB | check |\n"
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


def short(commit):
    return (commit or "?")[:10]


def check_cell(r):
    c = r.get("check")
    if c:
        word = "ok" if c["passed"] and not r.get("agree_error") else "FAIL"
        if c.get("max_abs") is None:
            return word
        return (f"{word}: max x{c.get('max_share', 0):.2f}, rms x{c.get('rms_share', 0):.2f}, "
                f"{fmt(c.get('psnr_db'))} dB")
    if r.get("error"):
        return "error"
    return "not checked"


def order(report):
    return sorted(report.get("workloads", {}).items(),
                  key=lambda kv: (kv[1].get("world", 1), bench.CLIPS.get(bench.parse_clip(kv[0]), 0)))


def setup_line(report):
    s, sm = report.get("setup", {}), report.get("summary", {})
    parts = [s.get("date", "?"), s.get("gpu", "?"), f"commit {short(s.get('commit'))}",
             f"driver {s.get('driver', '?')}", f"torch {s.get('torch', '?')} (CUDA {s.get('cuda', '?')})"]
    if s.get("diffusers"):
        parts.append(f"diffusers {s['diffusers']}")
    if sm.get("mean_clock_mhz"):
        parts.append(f"SM clock {sm['mean_clock_mhz']:.0f} MHz during the trials")
    if s.get("gemm_tflops"):
        parts.append(f"bf16 GEMM {s['gemm_tflops']:.0f} TFLOP/s measured")
    if s.get("ours"):
        parts.append(f"ours: {s['ours']}")
    if report.get("runs"):
        parts.append(f"merged from {len(report['runs']) + 1} commands")
    return ", ".join(parts)


def table(report):
    """The run's table: one row per workload, then the geomean over the timed ones."""
    report = bench.finalize(report)
    rows = [f"{setup_line(report)}", "",
            "| workload | T | ours ms (fastest) | SM MHz | bound ms | gap | diffusers bf16 ms | speedup | "
            "peak GiB | library kernels | check |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in order(report):
        d = r.get("diffusers") or {}
        au = r.get("audit")
        mem = r.get("memory") or {}
        ms = f"{r['ms']:.1f} ({r['min_ms']:.1f})" if r.get("ms") else "-"
        if r.get("shared"):
            ms += " SHARED"
        rows.append(f"| {name} | {r.get('T', '-')} | {ms} | {fmt(r.get('clock_mhz'), '.0f')} | "
                    f"{fmt(r.get('bound_ms'), '.0f')} | {fmt(r.get('gap'), '.2f')} | {fmt(d.get('ms'), '.0f')} | "
                    f"{fmt(r.get('speedup'), '.2f')} | {fmt(mem.get('peak_gib'), '.1f')} | "
                    f"{'-' if not au else au['library_kernels']} | {check_cell(r)} |")
    sm = report.get("summary", {})
    if sm.get("geomean_ms"):
        rows.append(f"| **geomean** ({len(sm['timed'])} timed) | | **{sm['geomean_ms']:.1f}** | "
                    f"{fmt(sm.get('mean_clock_mhz'), '.0f')} | | **{fmt(sm.get('geomean_gap'), '.2f')}** | "
                    f"{fmt(sm.get('geomean_diffusers_ms'), '.0f')} | **{fmt(sm.get('geomean_speedup'), '.2f')}** | "
                    f"| | {sm['check_passed']} of {sm['checked']} ok |")
    errors = [(n, r["error"]) for n, r in order(report) if r.get("error")]
    if errors:
        rows.append("")
        rows += [f"- {n}: {e.splitlines()[0]}" for n, e in errors]
    return "\n".join(rows)


def history_row(report):
    """One line for the history table of docs/PERF.md."""
    report = bench.finalize(report)
    s, sm, ws = report.get("setup", {}), report["summary"], report.get("workloads", {})
    ms = [fmt((ws.get(bench.workload_name(c, 1)) or {}).get("ms"), ".0f") for c in bench.TIMED_CLIPS]
    peaks = [(r.get("memory") or {}).get("peak_gib") for r in ws.values()]
    peaks = [p for p in peaks if p]
    check = f"{sm['check_passed']} of {sm['checked']} ok" if sm.get("checked") else "not checked"
    if sm.get("audit_library_kernels"):
        check += f", {sm['audit_library_kernels']} library kernels"
    return (f"| {s.get('date', '?')} | {s.get('gpu', '?')} | {fmt(sm.get('mean_clock_mhz'), '.0f')} | "
            f"{short(s.get('commit'))} | {' | '.join(ms)} | {fmt(sm.get('geomean_ms'), '.0f')} | "
            f"{fmt(sm.get('geomean_gap'), '.2f')} | {fmt(sm.get('geomean_diffusers_ms'), '.0f')} | "
            f"{fmt(sm.get('geomean_speedup'), '.2f')} | {fmt(max(peaks) if peaks else None, '.1f')} | {check} |")


def write(path, report):
    """Replaces the latest-run block of a markdown file (its markers each on a line of their own) and adds the
    history row (once per date and commit)."""
    with open(path) as f:
        text = f.read()
    block = re.compile(f"^{re.escape(LATEST[0])}$.*?^{re.escape(LATEST[1])}$", re.M | re.S)
    if not block.search(text):
        raise SystemExit(f"{path}: no {LATEST[0]} ... {LATEST[1]} block (markers on lines of their own)")
    text = block.sub(lambda _: f"{LATEST[0]}\n{table(report)}\n{LATEST[1]}", text, count=1)
    row = history_row(report)
    end = re.compile(f"^{re.escape(HISTORY_END)}$", re.M)
    if end.search(text) and row not in text:
        text = end.sub(lambda _: f"{row}\n{HISTORY_END}", text, count=1)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a results JSON of bench/bench.py")
    p.add_argument("--history", action="store_true", help="print the history table's row (with its header)")
    p.add_argument("--write", metavar="MD", help="update this markdown file's blocks (see the module doc)")
    a = p.parse_args(argv)
    with open(a.results) as f:
        report = json.load(f)
    if a.write:
        write(a.write, report)
        print(f"updated {a.write}")
    elif a.history:
        print(HISTORY_HEADER)
        print(history_row(report))
    else:
        print(table(report))


if __name__ == "__main__":
    main()
