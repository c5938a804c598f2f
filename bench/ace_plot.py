#!/usr/bin/env python3
"""The adaptive controller over time: runs bench/phased once under each
allocator with its trace on (RSS every 20 ms; hakmem's knobs) and draws
bench/results/ace.svg with bench/plot.py (matplotlib): RSS over time for
each allocator, the phases shaded, and below it the knobs of hakmem's auto
profile (docs/ace.md).

Environment: BENCH_ALLOCATORS as for run.py (default: hakmem:auto,
hakmem:fast, hakmem:balanced, hakmem:lean and the peers found), BUILD.

Usage: python3 bench/ace_plot.py [OUT.svg]
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402

# the trace's column, its label, what it is divided by for the label's unit, its colour
KNOBS = [("purge_delay_ms", "purge delay, ms", 1, "#d62728"),
         ("bigcache_delay_ms", "BigCache delay, ms", 1, "#9467bd"),
         ("bigcache_budget", "BigCache budget, MiB", 1 << 20, "#1f77b4"),
         ("bigcache_bytes", "BigCache held, MiB", 1 << 20, "#2ca02c")]


def read_trace(path):
    rows = []
    with open(path) as f:
        head = f.readline().split()
        for line in f:
            cells = line.split()
            rows.append({k: (v if k == "phase" else float(v)) for k, v in zip(head, cells)})
    return rows


def phases_of(rows):
    """[(start s, end s, phase)] of a trace."""
    spans, start, cur = [], 0.0, rows[0]["phase"]
    for r in rows:
        if r["phase"] != cur:
            spans.append((start, r["ms"] / 1000, cur))
            start, cur = r["ms"] / 1000, r["phase"]
    spans.append((start, rows[-1]["ms"] / 1000, cur))
    return spans


def chart(traces, path):
    """ace.svg from the traces of phased ({allocator: read_trace's rows}):
    RSS over time, hakmem:auto's line solid, and the knobs of hakmem:auto
    if it ran."""
    colours = {n: plot.colour(n, i) for i, n in enumerate(traces)}
    colours["hakmem:auto"] = plot.COLOURS["hakmem"]
    panels = [("bench/phased: RSS over time (sampled every 20 ms)", "MiB",
               [(n, colours[n], [(x["ms"] / 1000, x["rss_kib"] / 1024) for x in r], n != "hakmem:auto")
                for n, r in traces.items()])]
    auto = traces.get("hakmem:auto")
    if auto:
        panels.append(("hakmem auto: the knobs ACE turns, and what the BigCache holds", "ms / MiB",
                       [(label, c, [(x["ms"] / 1000, x[k] / div) for x in auto], k == "bigcache_bytes")
                        for k, label, div, c in KNOBS]))
    plot.time_lines(path, panels, phases=phases_of(auto or next(iter(traces.values()))))


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(bl.ROOT, "bench", "results", "ace.svg")
    if plot.MISSING:   # the chart is all this script makes: no runs for nothing
        sys.exit(plot.MISSING)
    if "BENCH_ALLOCATORS" not in os.environ:
        os.environ["BENCH_ALLOCATORS"] = "hakmem:auto,hakmem:fast,hakmem:balanced,hakmem:lean,mimalloc,jemalloc,tcmalloc"
    allocs, missing = bl.allocators()
    if missing:
        print("MISSING allocators (skipped): " + "; ".join(missing))
    prog = os.path.join(bl.BIN, "phased")
    traces = {}
    with tempfile.TemporaryDirectory(prefix="hakace.") as tmp:
        for name, lib in allocs:
            path = os.path.join(tmp, name.replace(":", "_") + ".trace")
            r = bl.run_once([prog, "1000", "42", path], lib, env=bl.alloc_env(name), result_name="phased")
            if not r["ok"]:
                print("FAIL phased under %s: %s" % (name, bl.short_error(r)))
                continue
            traces[name] = read_trace(path)
            f = r["fields"]
            print("%-16s %s ops/s, peak RSS %.1f MiB, RSS at the end of burst %.1f, quiet %.1f, buffers %.1f, "
                  "threads %.1f, end %.1f MiB" % (name, bl.fmt_num(r["figure"]), f["peak_rss_kib"] / 1024,
                                                  f["burst_rss_kib"] / 1024, f["quiet_rss_kib"] / 1024,
                                                  f["buffers_rss_kib"] / 1024, f["threads_rss_kib"] / 1024,
                                                  f["end_rss_kib"] / 1024))
    if not traces:
        sys.exit("ace_plot.py: no trace")
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    chart(traces, out_path)
    print("wrote " + out_path)


if __name__ == "__main__":
    main()
