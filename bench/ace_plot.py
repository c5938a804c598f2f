#!/usr/bin/env python3
"""The adaptive controller over time: runs bench/phased once under each
allocator with its trace on (RSS every 20 ms; hakmem's knobs) and draws
bench/results/ace.svg: RSS over time for each allocator, the phases shaded,
and below it the knobs of hakmem's auto profile (docs/ace.md).

Environment: BENCH_ALLOCATORS as for run.py (default: hakmem:auto,
hakmem:fast, hakmem:balanced, hakmem:lean and the peers found), BUILD.

Usage: python3 bench/ace_plot.py [OUT.svg]
"""

import os
import sys
import tempfile
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import svgchart  # noqa: E402

KNOBS = [("purge_delay_ms", "purge delay, ms", 1), ("bigcache_delay_ms", "BigCache delay, ms", 1),
         ("bigcache_budget", "BigCache budget, MiB", 1 << 20), ("bigcache_bytes", "BigCache held, MiB", 1 << 20)]
PHASE_FILL = {"burst": "#f4f4f4", "quiet": "#ffffff", "buffers": "#f4f4f4", "threads": "#ffffff", "end": "#f4f4f4"}


def read_trace(path):
    rows = []
    with open(path) as f:
        head = f.readline().split()
        for line in f:
            cells = line.split()
            rows.append({k: (v if k == "phase" else float(v)) for k, v in zip(head, cells)})
    return rows


def polyline(points, colour, width=1.5, dash=None):
    d = " ".join("%.1f,%.1f" % p for p in points)
    return '<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"/>' % (
        colour, width, ' stroke-dasharray="%s"' % dash if dash else "", d)


def panel(out, x0, y0, w, h, title, series, tmax, ymax, unit, phases):
    """series: [(label, colour, [(t_ms, value)], dash)]."""
    out.append('<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>' % (x0, y0 - 8, escape(title)))
    for start, end, name in phases:
        xa, xb = x0 + w * start / tmax, x0 + w * end / tmax
        out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>' % (xa, y0, xb - xa, h, PHASE_FILL[name]))
        out.append('<text x="%.1f" y="%d" font-size="10" fill="#666">%s</text>' % (xa + 3, y0 + 12, name))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (x0, y0, w, h))
    for i in range(5):
        v = ymax * i / 4
        y = y0 + h - h * i / 4
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>' % (x0 - 4, y + 3, bl.fmt_num(v)))
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (x0, x0 + w, y, y))
    out.append('<text x="%d" y="%d" font-size="10">%s</text>' % (x0 - 40, y0 - 8 + h + 30, escape(unit)))
    for s in range(0, int(tmax / 1000) + 1):
        x = x0 + w * s * 1000 / tmax
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%d s</text>' % (x, y0 + h + 14, s))
    for i, (label, colour, pts, dash) in enumerate(series):
        out.append(polyline([(x0 + w * t / tmax, y0 + h - h * min(v, ymax) / ymax) for t, v in pts], colour, dash=dash))
        ly = y0 + 14 + 14 * i
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (
            x0 + w + 10, x0 + w + 30, ly - 4, ly - 4, colour, ' stroke-dasharray="%s"' % dash if dash else ""))
        out.append('<text x="%d" y="%d" font-size="11">%s</text>' % (x0 + w + 34, ly, escape(label)))


def phases_of(rows):
    spans, start, cur = [], 0.0, rows[0]["phase"]
    for r in rows:
        if r["phase"] != cur:
            spans.append((start, r["ms"], cur))
            start, cur = r["ms"], r["phase"]
    spans.append((start, rows[-1]["ms"], cur))
    return spans


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(bl.ROOT, "bench", "results", "ace.svg")
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
    tmax = max(r[-1]["ms"] for r in traces.values())
    rss_max = max(x["rss_kib"] for r in traces.values() for x in r) / 1024 * 1.05
    colours = {n: svgchart._colour(n, i) for i, n in enumerate(traces)}
    colours["hakmem:auto"] = svgchart.COLOURS["hakmem"]
    series = [(n, colours[n], [(x["ms"], x["rss_kib"] / 1024) for x in r], None if n == "hakmem:auto" else "4,3")
              for n, r in traces.items()]
    auto = traces.get("hakmem:auto")
    w, h, x0 = 900, 260, 60
    height = 2 * h + 140 if auto else h + 80
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (x0 + w + 200, height),
           '<rect width="100%" height="100%" fill="white"/>']
    phases = phases_of(auto or next(iter(traces.values())))
    panel(out, x0, 30, w, h, "bench/phased: RSS over time (sampled every 20 ms)", series, tmax, rss_max, "MiB", phases)
    if auto:
        kmax = max(max(x[k] / div for x in auto) for k, _, div in KNOBS) * 1.05
        kcol = ["#d62728", "#9467bd", "#1f77b4", "#2ca02c"]
        ks = [(label, kcol[i], [(x["ms"], x[k] / div) for x in auto], None if i < 3 else "4,3")
              for i, (k, label, div) in enumerate(KNOBS)]
        panel(out, x0, h + 110, w, h, "hakmem auto: the knobs ACE turns, and what the BigCache holds", ks, tmax, kmax,
              "ms / MiB", phases)
    out.append("</svg>")
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote " + out_path)


if __name__ == "__main__":
    main()
