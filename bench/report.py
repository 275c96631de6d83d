#!/usr/bin/env python3
"""Markdown from a results JSON of bench/bench.py, for docs/PERF.md.

    python3 bench/report.py bench/results/2026-12-04-h200-v24.json        prints the run's table (one per world
                                                                           when it ran more than world 1)
    python3 bench/report.py R.json --history                              prints a row for PERF.md's version
                                                                           table: the bench's cells filled in, the
                                                                           version, change and effect left to write
    python3 bench/report.py R.json --write docs/PERF.md                   replaces the table between
                                                                           <!-- bench:latest:begin/end --> and
                                                                           prints that row

Plain Python (no torch, no numpy).
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (its pure functions only: importing it needs no torch)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATEST = ("<!-- bench:latest:begin -->", "<!-- bench:latest:end -->")
HISTORY_HEADER = ("| version | change | effect | bench: f121 / f241 / f481 ms, x diffusers bf16, gap, peak, SM clock | "
                  "results |\n"
                  "| --- | --- | --- | --- | --- |")


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


def setup_line(report, source=None):
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
    if source:
        parts.append(f"results `{source}`")
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


def table(report, source=None):
    """The run's table: one row per workload, then the geomean over the timed ones; a table per world (and the
    summary over the worlds) where the run had more than world 1. source: the results file, named in the header."""
    report = bench.finalize(report)
    if worlds_of(report) not in ([], [1]):
        return world_tables(report, source)
    rows = [f"{setup_line(report, source)}", "",
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


def world_tables(report, source=None):
    """A table per world (world 1's as table() makes it, the others with the scaling over world 1 in place of
    diffusers), then the summary: the geomean over the nine timed workloads and its gap, the scaling ratios."""
    sm, ws = report.get("summary", {}), report.get("workloads", {})
    rows = [f"{setup_line(report, source)}"]
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


def times_cell(ws):
    """The clips' times: world 1's, then '; xW: ...' for each world that timed any of them."""
    parts = []
    for world in (1, 2, 4):
        ms = [(ws.get(bench.workload_name(c, world)) or {}).get("ms") for c in bench.TIMED_CLIPS]
        if world == 1 or any(ms):
            cell = " / ".join(fmt(m, ".0f") for m in ms)
            parts.append(cell if world == 1 else f"x{world}: {cell}")
    return "; ".join(parts)


def bench_cell(report):
    """The bench's cell of a version row: times, speedup and gap (world 1's geomeans; the nine's too where all
    were timed), the peak memory, the SM clock, and what was not checked or failed."""
    report = bench.finalize(report)
    sm, ws = report["summary"], report.get("workloads", {})
    w1 = (sm.get("worlds") or {}).get("1") or {}
    gap = w1.get("geomean_gap", sm.get("geomean_gap"))
    peaks = [p for p in ((r.get("memory") or {}).get("peak_gib") for r in ws.values()) if p]
    x = sm.get("geomean_speedup")
    cell = (f"{times_cell(ws)} ms, {f'{x:.2f}x' if x else 'diffusers not timed'}, gap {fmt(gap, '.2f')}, "
            f"{fmt(max(peaks) if peaks else None, '.1f')} GiB, {fmt(sm.get('mean_clock_mhz'), '.0f')} MHz")
    if sm.get("nine_geomean_ms"):
        cell += f"; nine {sm['nine_geomean_ms']:.0f} ms, gap {sm['nine_geomean_gap']:.2f}"
    if not sm.get("checked"):
        cell += "; not checked"
    elif sm["check_passed"] < sm["checked"]:
        cell += f"; checks {sm['check_passed']} of {sm['checked']} ok"
    if sm.get("audit_library_kernels"):
        cell += f"; {sm['audit_library_kernels']} library kernels"
    return cell


def history_row(report, source=None):
    """A row of docs/PERF.md's version table: the commit and the bench's cells filled in; the version, the change
    and its effect (the same-lease A/B) are the author's to write."""
    commit = short((report.get("setup") or {}).get("commit"))
    name = os.path.basename(source) if source else "results JSON"  # PERF.md names files of bench/results/ bare
    return f"| vN ({commit}) | ... | ... | {bench_cell(report)} | `{name}` |"


def write(path, report, source=None):
    """Replaces the latest-run block of a markdown file (its markers each on a line of their own)."""
    with open(path) as f:
        text = f.read()
    block = re.compile(f"^{re.escape(LATEST[0])}$.*?^{re.escape(LATEST[1])}$", re.M | re.S)
    if not block.search(text):
        raise SystemExit(f"{path}: no {LATEST[0]} ... {LATEST[1]} block (markers on lines of their own)")
    text = block.sub(lambda _: f"{LATEST[0]}\n{table(report, source)}\n{LATEST[1]}", text, count=1)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def source_name(path):
    """The results file as the docs cite it: relative to the repository where it lies inside it."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a results JSON of bench/bench.py")
    p.add_argument("--history", action="store_true", help="print a row for PERF.md's version table (with its header)")
    p.add_argument("--write", metavar="MD", help="update this markdown file's blocks (see the module doc)")
    a = p.parse_args(argv)
    with open(a.results) as f:
        report = json.load(f)
    source = source_name(a.results)
    if a.write:
        write(a.write, report, source)
        print(f"updated {a.write}; the version table's row to complete by hand:")
        print(history_row(report, source))
    elif a.history:
        print(HISTORY_HEADER)
        print(history_row(report, source))
    else:
        print(table(report, source))


if __name__ == "__main__":
    main()
