#!/usr/bin/env python3
"""make soak: long steady runs of build/bench/soak, one after the other.

Runs the soak program (bench/soak.c) for SOAK_MINUTES (default 5; SOAK_SECONDS
overrides it) under each of SOAK_RUNS (default "hakmem:balanced,hakmem:lean";
an entry is hakmem:PROFILE or a peer name: glibc, mimalloc, jemalloc,
tcmalloc), with SOAK_THREADS workers (default 4), sampling every
SOAK_SAMPLE_MS (default 1000). Prints a table of RSS drift, throughput CV,
system calls per operation and latency percentiles against the targets,
and writes soak.md, soak.json, soak.svg (RSS and throughput over time, a
line per run, drawn by bench/plot.py: none without matplotlib) and the
samples as soak-<run>.csv into SOAK_OUT (default bench/results).

Exit status: 0 when every run finished and checked its data (the targets
are reported, not enforced: timings on a shared machine are noisy), 1 if a
run failed.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402

RESULTS = os.environ.get("SOAK_OUT") or os.path.join(bl.ROOT, "bench", "results")
TARGETS = {"rss_drift_pct": 1.0, "tput_cv_pct": 2.0, "syscalls_per_op": 1e-7}


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
            t, ops, rss, sys_ = line.strip().split(",")[:4]
            rows.append((float(t), float(ops), int(rss), int(sys_)))
    return rows


def chart(runs, path, info):
    """soak.svg: RSS and throughput over time, a line per run."""
    def panel(title, unit, column, per_unit):
        """A panel of column of the samples (read_csv's), in units of per_unit."""
        return (title, unit, [(r["name"], plot.colour(r["name"], i),
                               [(s[0], s[column] / per_unit) for s in r["samples"]], False)
                              for i, r in enumerate(runs)])
    plot.time_lines(path, [panel("resident set over time", "MiB", 2, 1024.0),
                           panel("throughput over time", "M ops/s", 1, 1e6)], title="hakmem soak: " + info)


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
             "operation (the HAKMEM notes' bar: 0 %, 5 %, 1.25e-7)", ""]
    lines += bl.md_table(["run", "ops/s"] + cols + ["drift", "CV", "syscalls"],
                         [[r["name"], bl.fmt_num(r["ops_per_s"])] + ["%g" % r["fields"].get(c, -1) for c in cols] +
                          [verdict(k, r["fields"].get(k)) for k in ("rss_drift_pct", "tput_cv_pct", "syscalls_per_op")]
                          for r in runs], "lr" + "r" * len(cols) + "lll")
    lines += [""] + bl.machine_lines(bl.machine_info())
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(RESULTS, "soak.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(RESULTS, "soak.json"), "w") as fh:
        json.dump({"seconds": seconds, "threads": threads, "sample_ms": sample_ms, "runs": runs}, fh, indent=1)
    if runs and plot.MISSING:
        print(plot.MISSING)
    elif runs:
        chart(runs, os.path.join(RESULTS, "soak.svg"), info)
    print("wrote %s/soak.md, soak.json%s" % (RESULTS, ", soak.svg" if runs and not plot.MISSING else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
