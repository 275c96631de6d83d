#!/usr/bin/env python3
"""Markdown tables from a results JSON of bench/bench.py, for docs/PERF.md and bench/README.md.

    python3 bench/report.py bench/results/2026-12-02-h200.json            prints the run's table (one per world
                                                                           when it ran more than world 1)
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
    if s.get("w22_env"):  # the library's switches set for the run (bench.py records them)
        sw = {k: v for k, v in s["w22_env"].items() if k != "W22_LIB"}  # the library's path, not a switch
        if sw:
            parts.append("switches " + " ".join(f"{k}={v}" for k, v in sorted(sw.items())))
    return ", ".join(parts)


def worlds_of(report):
    return sorted({r.get("world", 1) for r in report.get("workloads", {}).values()})


def clock_cell(r):
    """The SM clock of rank 0's GPU, with the world's range where its GPUs differ by 2% or more."""
    cell = fmt(r.get("clock_mhz"), ".0f")
    lo, hi = r.get("world_clock_mhz") or (None, None)
    if r.get("clock_mhz") and lo and hi and hi - lo >= 0.02 * r["clock_mhz"]:
        cell += f" ({lo:.0f}-{hi:.0f})"
    return cell


def table(report):
    """The run's table: one row per workload, then the geomean over the timed ones; a table per world (and the
    summary over the worlds) where the run had more than world 1."""
    report = bench.finalize(report)
    if worlds_of(report) not in ([], [1]):
        return world_tables(report)
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


def checks(rows):
    checked = [r for r in rows if "check" in r]
    return sum(1 for r in checked if r["check"]["passed"] and not r.get("agree_error")), len(checked)


def world_tables(report):
    """A table per world (world 1's as table() makes it, the others with the scaling over world 1 in place of
    diffusers), then the summary: the geomean over the nine timed workloads and its gap, the scaling ratios."""
    sm, ws = report.get("summary", {}), report.get("workloads", {})
    rows = [f"{setup_line(report)}"]
    for world in worlds_of(report):
        group = [(n, r) for n, r in order(report) if r.get("world", 1) == world]
        rows += ["", f"**world {world}** ({world} GPU{'s' if world > 1 else ''})", ""]
        if world == 1:
            rows += ["| workload | T | ours ms (fastest) | SM MHz | bound ms | gap | diffusers bf16 ms | speedup | "
                     "peak GiB | library kernels | check |",
                     "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        else:
            rows += [f"| workload | T | ours ms (fastest) | SM MHz (range) | bound ms | gap | x1 / x{world} | "
                     "peak GiB (max rank) | check |",
                     "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, r in group:
            mem = r.get("memory") or {}
            ms = f"{r['ms']:.1f} ({r['min_ms']:.1f})" if r.get("ms") else "-"
            if r.get("shared"):
                ms += " SHARED"
            head = (f"| {name} | {r.get('T', '-')} | {ms} | {clock_cell(r)} | {fmt(r.get('bound_ms'), '.0f')} | "
                    f"{fmt(r.get('gap'), '.2f')} | ")
            if world == 1:
                d, au = r.get("diffusers") or {}, r.get("audit")
                rows.append(head + f"{fmt(d.get('ms'), '.0f')} | {fmt(r.get('speedup'), '.2f')} | "
                            f"{fmt(mem.get('peak_gib'), '.1f')} | {'-' if not au else au['library_kernels']} | "
                            f"{check_cell(r)} |")
            else:
                rows.append(head + f"{fmt((sm.get('scaling') or {}).get(name), '.2f')} | "
                            f"{fmt(mem.get('peak_gib'), '.1f')} | {check_cell(r)} |")
        g = (sm.get("worlds") or {}).get(str(world))
        ok, n = checks([r for _, r in group])
        if g:
            if world == 1:
                rows.append(f"| **geomean** ({len(g['timed'])} timed) | | **{g['geomean_ms']:.1f}** | | | "
                            f"**{fmt(g.get('geomean_gap'), '.2f')}** | {fmt(sm.get('geomean_diffusers_ms'), '.0f')} | "
                            f"**{fmt(sm.get('geomean_speedup'), '.2f')}** | | | {ok} of {n} ok |")
            else:
                rows.append(f"| **geomean** ({len(g['timed'])} timed) | | **{g['geomean_ms']:.1f}** | | | "
                            f"**{fmt(g.get('geomean_gap'), '.2f')}** | | | {ok} of {n} ok |")
    rows.append("")
    parts = []
    if sm.get("nine_geomean_ms"):
        parts.append(f"geomean over the nine timed workloads **{sm['nine_geomean_ms']:.1f} ms**, gap to the bound "
                     f"**x{sm['nine_geomean_gap']:.2f}**")
    elif sm.get("geomean_ms"):
        parts.append(f"geomean over the {len(sm['timed'])} timed workloads run (not all nine) "
                     f"{sm['geomean_ms']:.1f} ms, gap x{fmt(sm.get('geomean_gap'), '.2f')}")
    for name, ratio in (sm.get("scaling") or {}).items():
        t = (sm.get("scaling_targets") or {}).get(name)
        parts.append(f"{bench.parse_clip(name)}x1 / {name} x{ratio:.2f}"
                     + (f" (target x{t['target']:.2f}: {'met' if t['met'] else 'NOT met'})" if t else ""))
    if sm.get("checked"):
        parts.append(f"{sm['check_passed']} of {sm['checked']} checks ok")
    if parts:
        rows.append("Summary: " + "; ".join(parts) + ".")
    errors = [(n, r["error"]) for n, r in order(report) if r.get("error")]
    if errors:
        rows.append("")
        rows += [f"- {n}: {e.splitlines()[0]}" for n, e in errors]
    return "\n".join(rows)


def clip_cell(ws, clip):
    """A clip's times for the history: world 1's; with ' / x2 N / x4 N' where those worlds were timed too."""
    cell = fmt((ws.get(bench.workload_name(clip, 1)) or {}).get("ms"), ".0f")
    for world in (2, 4):
        ms = (ws.get(bench.workload_name(clip, world)) or {}).get("ms")
        if ms:
            cell += f" / x{world} {ms:.0f}"
    return cell


def history_row(report):
    """One line for the history table of docs/PERF.md."""
    report = bench.finalize(report)
    s, sm, ws = report.get("setup", {}), report["summary"], report.get("workloads", {})
    ms = [clip_cell(ws, c) for c in bench.TIMED_CLIPS]
    peaks = [(r.get("memory") or {}).get("peak_gib") for r in ws.values()]
    peaks = [p for p in peaks if p]
    check = f"{sm['check_passed']} of {sm['checked']} ok" if sm.get("checked") else "not checked"
    if sm.get("audit_library_kernels"):
        check += f", {sm['audit_library_kernels']} library kernels"
    # The geomean of record: the nine's where all were timed; world 1's three otherwise (the table's history).
    gm, gap = sm.get("geomean_ms"), sm.get("geomean_gap")
    gm_cell = fmt(gm, ".0f")
    if sm.get("nine_geomean_ms"):
        gm, gap = sm["nine_geomean_ms"], sm["nine_geomean_gap"]
        gm_cell = f"{gm:.0f} (nine)"
    elif sm.get("worlds"):
        gm_cell = f"{fmt(gm, '.0f')} ({len(sm['timed'])} timed)"
    return (f"| {s.get('date', '?')} | {s.get('gpu', '?')} | {fmt(sm.get('mean_clock_mhz'), '.0f')} | "
            f"{short(s.get('commit'))} | {' | '.join(ms)} | {gm_cell} | "
            f"{fmt(gap, '.2f')} | {fmt(sm.get('geomean_diffusers_ms'), '.0f')} | "
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
