#!/usr/bin/env python3
"""make soak: long steady runs of build/bench/soak, one after the other.

Runs the soak program (bench/soak.c) for SOAK_MINUTES (default 5; SOAK_SECONDS
overrides it) under each of SOAK_RUNS (default "hakmem:balanced,hakmem:lean";
an entry is hakmem:PROFILE or a peer name: glibc, mimalloc, jemalloc,
tcmalloc), with SOAK_THREADS workers (default 4), sampling every
SOAK_SAMPLE_MS (default 1000). Prints a table of RSS drift, throughput CV,
system calls per operation and latency percentiles against the targets,
and writes soak.md, soak.json, soak.svg (RSS and throughput over time, a
line per run) and the samples as soak-<run>.csv into SOAK_OUT (default
bench/results).

Exit status: 0 when every run finished and checked its data (the targets
are reported, not enforced: timings on a shared machine are noisy), 1 if a
run failed.
"""

import json
import os
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

RESULTS = os.environ.get("SOAK_OUT") or os.path.join(bl.ROOT, "bench", "results")
TARGETS = {"rss_drift_pct": 1.0, "tput_cv_pct": 2.0, "syscalls_per_op": 1e-7}
COLOURS = ["#d62728", "#9467bd", "#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e"]


def preload_for(run):
    """(LD_PRELOAD value, extra environment) of one SOAK_RUNS entry."""
    if run.startswith("hakmem"):
        profile = run.partition(":")[2]
        return os.path.join(bl.ROOT, "build", "libhakmem.so"), {"HAKMEM_PROFILE": profile} if profile else {}
    if run == "glibc":
        return "", {}
    lib = bl.find_peer(run)
    if not lib:
        sys.exit("soak.py: %s not found (make peers)" % run)
    return lib, {}


def read_csv(path):
    rows = []
    with open(path) as f:
        next(f)
        for line in f:
            t, ops, rss, sys_ = line.strip().split(",")
            rows.append((float(t), float(ops), int(rss), int(sys_)))
    return rows


def polyline(points, x0, y0, w, h, xmax, ymax, colour):
    pts = " ".join("%.1f,%.1f" % (x0 + x / xmax * w, y0 + h - y / ymax * h) for x, y in points)
    return '<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (colour, pts)


def panel(out, x0, y0, w, h, title, series, unit):
    xmax = max((p[0] for s in series for p in s[1]), default=1) or 1
    ymax = max((p[1] for s in series for p in s[1]), default=1) * 1.1 or 1
    out.append('<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>' % (x0, y0 - 8, escape(title)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (x0, y0, w, h))
    for k in range(5):
        y = y0 + h - k * h / 4
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>' % (x0, y, x0 + w, y))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>'
                   % (x0 - 4, y + 3, bl.fmt_num(ymax * k / 4)))
    out.append('<text x="%d" y="%d" font-size="10" text-anchor="end">%s</text>' % (x0 - 4, y0 - 8, unit))
    for k in range(5):
        x = x0 + k * w / 4
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%.0f s</text>'
                   % (x, y0 + h + 14, xmax * k / 4))
    for i, (name, pts) in enumerate(series):
        out.append(polyline(pts, x0, y0, w, h, xmax, ymax, COLOURS[i % len(COLOURS)]))


def chart(runs, path, info):
    width, ph = 900, 240
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">'
           % (width, 2 * ph + 160), '<rect width="100%" height="100%" fill="white"/>',
           '<text x="20" y="24" font-size="15" font-weight="bold">hakmem soak: %s</text>' % escape(info)]
    rss = [(r["name"], [(t, kib / 1024.0) for t, _, kib, _ in r["samples"]]) for r in runs]
    tput = [(r["name"], [(t, ops / 1e6) for t, ops, _, _ in r["samples"]]) for r in runs]
    panel(out, 80, 60, width - 120, ph - 40, "resident set over time", rss, "MiB")
    panel(out, 80, 60 + ph + 20, width - 120, ph - 40, "throughput over time", tput, "M ops/s")
    y = 2 * ph + 110
    for i, r in enumerate(runs):
        x = 80 + i * 170
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (x, y, COLOURS[i % len(COLOURS)]))
        out.append('<text x="%d" y="%d" font-size="12">%s</text>' % (x + 16, y + 11, escape(r["name"])))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def verdict(key, value):
    """ok or above the target; n/a when not measured (syscalls: -1 outside hakmem)."""
    if value is None or (key == "syscalls_per_op" and value < 0):
        return "n/a"
    return "ok" if abs(value) <= TARGETS[key] else "above %g" % TARGETS[key]


def main():
    seconds = bl.env_float("SOAK_SECONDS", bl.env_float("SOAK_MINUTES", 5) * 60)
    threads = int(bl.env_float("SOAK_THREADS", 4))
    sample_ms = int(bl.env_float("SOAK_SAMPLE_MS", 1000))
    names = [r.strip() for r in os.environ.get("SOAK_RUNS", "hakmem:balanced,hakmem:lean").split(",") if r.strip()]
    prog = os.path.join(bl.ROOT, "build", "bench", "soak")
    os.makedirs(RESULTS, exist_ok=True)
    runs, failed = [], 0
    for name in names:
        preload, extra = preload_for(name)
        csv = os.path.join(RESULTS, "soak-%s.csv" % name.replace(":", "-"))
        saved = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)
        print("soak: %s for %.0f s ..." % (name, seconds), flush=True)
        r = bl.run_once([prog, str(int(seconds)), str(threads), str(sample_ms), csv], preload,
                        timeout=seconds * 2 + 120, result_name="soak")
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if not r["ok"]:
            print("FAIL %s: %s" % (name, bl.short_error(r)))
            failed += 1
            continue
        f = r["fields"]
        runs.append({"name": name, "ops_per_s": r["figure"], "fields": f, "samples": read_csv(csv)})
    cols = ["rss_start_kib", "rss_end_kib", "rss_drift_pct", "tput_cv_pct", "syscalls_per_op", "malloc_p50_ns",
            "malloc_p99_ns", "malloc_p999_ns", "free_p50_ns", "free_p99_ns", "free_p999_ns"]
    info = "%.0f s, %d threads, samples every %d ms" % (seconds, threads, sample_ms)
    lines = ["# soak (%s)" % info, "", "targets: RSS drift <= 1 %, throughput CV <= 2 %, <= 1e-7 system calls per "
             "operation (the HAKMEM notes' bar: 0 %, 5 %, 1.25e-7)", "",
             "| run | ops/s | " + " | ".join(cols) + " | drift | CV | syscalls |",
             "|---|---:|" + "---:|" * len(cols) + "---|---|---|"]
    for r in runs:
        f = r["fields"]
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            r["name"], bl.fmt_num(r["ops_per_s"]), " | ".join("%g" % f.get(c, -1) for c in cols),
            verdict("rss_drift_pct", f.get("rss_drift_pct")), verdict("tput_cv_pct", f.get("tput_cv_pct")),
            verdict("syscalls_per_op", f.get("syscalls_per_op"))))
    lines += [""] + bl.machine_lines(bl.machine_info())
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(RESULTS, "soak.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(RESULTS, "soak.json"), "w") as fh:
        json.dump({"seconds": seconds, "threads": threads, "sample_ms": sample_ms, "runs": runs}, fh, indent=1)
    if runs:
        chart(runs, os.path.join(RESULTS, "soak.svg"), info)
        print("wrote %s/soak.md, soak.json, soak.svg" % RESULTS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
