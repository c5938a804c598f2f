#!/usr/bin/env python3
"""Runs every benchmark workload under glibc, hakmem and the installed peer
allocators (LD_PRELOAD) and writes bench/results/latest.{md,json,svg} (the
chart drawn by bench/plot.py: none without matplotlib).

Environment:
  BENCH_SCALE=1       multiplies every workload's iteration count
  BENCH_RUNS=5        rounds; each round runs every allocator once
  BENCH_ONLY=a,b      only these workloads (names as in the table)
  BENCH_ALLOCATORS=.. only these allocators (glibc,hakmem,mimalloc,...);
                      hakmem:fast (balanced, lean, auto) is hakmem under that profile
                      hakmem@PROF_SAMPLE=512K hakmem with HAKMEM_PROF_SAMPLE=512K
                      (options joined by +), hakmem-secure the secure build (make secure)
  BENCH_TIMEOUT=...   seconds before a run counts as FAIL (default 120*scale)
  BUILD=build         where libhakmem.so and bench/ programs are
  MIMALLOC_LIB=/path  (also JEMALLOC_LIB, TCMALLOC_LIB) use this library

Usage: python3 bench/run.py [--list]
"""

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import plot  # noqa: E402


def workloads(scale):
    def s(n):
        return str(max(1, int(round(n * scale))))

    # (table name, program, args, what it measures)
    return [
        ("random_mixed", "random_mixed", [s(20000000), "400", "1"],
         "random malloc/free, 400 slots, 16..1040 B"),
        ("random_mixed_tiny", "random_mixed", [s(20000000), "400", "1", "16", "128"],
         "random malloc/free, 16..128 B"),
        ("random_mixed_mid", "random_mixed", [s(10000000), "400", "1", "1024", "32768"],
         "random malloc/free, 1..32 KiB"),
        ("random_mixed_large", "random_mixed", [s(200000), "400", "1", "65536", "4194304"],
         "random malloc/free, 64 KiB..4 MiB"),
        ("tiny_hot", "tiny_hot", [s(40000000), "32", "16"],
         "32 B alloc/free batches of 1..16"),
        ("larson", "larson", ["2", "1000", s(400000), "20", "16", "1024"],
         "server sim, 2 threads, blocks handed to new threads"),
        ("xthread", "xthread", ["1", "1", s(10000000), "16", "512"],
         "producer -> consumer, every free remote"),
        ("cache_thrash", "cache_thrash", ["2", s(4000), "10000", "8"],
         "active false sharing, 2 threads"),
        ("cache_scratch", "cache_scratch", ["2", s(4000), "10000", "8"],
         "passive false sharing, 2 threads"),
        ("realloc_grow", "realloc_grow", [s(20000), "4096", "256", s(256)],
         "strings by realloc, a vector to 256 MiB"),
        ("fragment", "fragment", [s(300000), "16", "4096", "90"],
         "300k objects, free 90%, refill other sizes"),
        ("thread_churn", "thread_churn", [s(1500), "2", "1000", "16", "2048"],
         "waves of short-lived threads freeing the last wave's blocks"),
        ("cxx_churn", "cxx_churn", [s(1500000), "5000", "2"],
         "std::map/string/vector churn, 2 threads"),
        ("mem_footprint", "memory", ["footprint", s(1000)],
         "1M objects: peak and fragmented RSS / live, RSS after free, after trim"),
        ("mem_idle", "memory", ["idle", s(1000)],
         "2 threads free 1 GiB of their own and sleep: RSS 5 s later, after trim, after exit"),
        ("mem_cross", "memory", ["cross", s(1000)],
         "2 threads free 1 GiB of each other's and sleep: RSS 5 s later, after trim, after exit"),
        ("mem_threads", "memory", ["threads", s(1000)],
         "20,000 short threads, 4 alive, ~1 MiB each: peak RSS"),
        ("mem_mid", "memory", ["mid", s(1000)],
         "8 threads churn batches of 8-128 KiB blocks, then idle: RSS after, 1.5 s later, after trim"),
        ("phased", "phased", [s(1000)],
         "a server in phases: small burst, quiet, buffers, thread waves; RSS after each"),
        ("malloc_large", "malloc_large", [s(500), "20", "5", "25"],
         "20 buffers of 5..25 MiB replaced at random, each filled whole"),
        ("glibc_simple", "glibc_simple", [s(500000), "16"],
         "batches of 25..1600 blocks of 16..64 B, freed half oldest, half newest first"),
    ]


def summarize(runs):
    """Aggregate of one workload x allocator."""
    ok = [r for r in runs if r.get("ok")]
    bad = [r for r in runs if not r.get("ok")]
    figs = [r["figure"] for r in ok]
    rss = [r["maxrss_kib"] for r in ok]
    s = {
        "runs": len(runs),
        "failed": len(bad),
        "errors": [bl.short_error(r) for r in bad],
        "figures": figs,
        "unit": ok[0]["unit"] if ok else None,
        "median": bl.median(figs) if figs else None,
        "min": min(figs) if figs else None,
        "max": max(figs) if figs else None,
        "by_round": [r["figure"] if r.get("ok") else None for r in runs],
        "wall_s_median": bl.median([r["wall_s"] for r in ok]) if ok else None,
        "maxrss_kib": rss,
        "rss_kib_median": bl.median(rss) if rss else None,
        "fields": {},
    }
    keys = sorted({k for r in ok for k in r["fields"]})
    for k in keys:
        s["fields"][k] = bl.median([r["fields"][k] for r in ok if k in r["fields"]])
    return s


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def fmt_ratio(x):
    return "-" if x is None else "%.2f×" % x


def paired_table(results, names, wl_meta, ours="hakmem"):
    """Lines comparing `ours` with the fastest other allocator of each workload
    round by round: rounds run every allocator in turn within a few seconds,
    so the ratio of one round's figures shares the host's state of that
    moment, which medians taken apart do not (this host's speed swings by
    10-25% for seconds at a time)."""
    if ours not in names or len(names) < 2:
        return []
    rows, geo = [], []
    for w, *_ in wl_meta:
        if w not in results or results[w][ours]["failed"]:
            continue
        peers = [a for a in names if a != ours and not results[w][a]["failed"] and results[w][a]["median"]]
        if not peers:
            continue
        best = max(peers, key=lambda a: results[w][a]["median"])
        pairs = bl.round_ratios(results[w][ours]["by_round"], results[w][best]["by_round"])
        if not pairs:
            continue
        med = bl.median(pairs)
        geo.append(med)
        rows.append([w, best, "%.3f" % med, "%.2f – %.2f" % (min(pairs), max(pairs)),
                     "%d of %d" % (sum(x >= 1 for x in pairs), len(pairs))])
    if not rows:
        return []
    return ["", "### %s against the fastest other allocator, round by round" % ours, "",
            "Median of the rounds' ratios of throughput (each round's two runs a few seconds "
            "apart); the fastest is the one of highest median.", ""] + bl.md_table(
        ["workload", "fastest other", "median ratio", "range", "rounds ahead"],
        rows + [["**geomean**", "", "%.3f" % bl.geomean(geo), "", ""]], "llrrr")


def make_tables(results, allocs, base, wl_meta):
    """Markdown tables (list of lines): summary matrix, details, extras."""
    lines = []
    names = [a for a, _ in allocs]
    lines.append("### Throughput relative to %s (higher is better) / peak RSS relative "
                 "to %s (lower is better)" % (base, base))
    lines.append("")
    matrix = []
    geo = {a: [] for a in names}
    geo_rss = {a: [] for a in names}
    for w, *_ in wl_meta:
        if w not in results:
            continue
        row = [w]
        b = results[w].get(base)
        for a in names:
            s = results[w][a]
            if s["failed"]:
                row.append("**FAIL**")
                continue
            tr = ratio(s["median"], b["median"]) if b and not b["failed"] else None
            rr = ratio(s["rss_kib_median"], b["rss_kib_median"]) if b and not b["failed"] else None
            if tr:
                geo[a].append(tr)
            if rr:
                geo_rss[a].append(rr)
            row.append("%s / %s" % (fmt_ratio(tr), fmt_ratio(rr)))
        matrix.append(row)
    nw = sum(1 for w, *_ in wl_meta if w in results)

    def geo_cell(a):
        cell = "%s / %s" % (fmt_ratio(bl.geomean(geo[a]) if geo[a] else None),
                            fmt_ratio(bl.geomean(geo_rss[a]) if geo_rss[a] else None))
        if len(geo[a]) < nw:  # FAIL cells (or a failed baseline) are left out
            cell += " (%d of %d)" % (len(geo[a]), nw)
        return cell

    lines += bl.md_table(["workload"] + names, matrix + [["**geomean**"] + [geo_cell(a) for a in names]])
    lines += paired_table(results, names, wl_meta)
    lines.append("")
    lines.append("### Details")
    lines.append("")
    details = []
    for w, *_ in wl_meta:
        if w not in results:
            continue
        b = results[w].get(base)
        for a in names:
            s = results[w][a]
            if s["failed"]:
                details.append([w, a, "**FAIL** (%d/%d runs)" % (s["failed"], s["runs"]),
                                s["errors"][0].replace("|", "/")] + [""] * 5)
                continue
            spread = (s["max"] - s["min"]) / s["median"] * 100 if s["median"] else 0
            bok = b and not b["failed"]
            details.append([w, a, "%s %s" % (bl.fmt_num(s["median"]), s["unit"]),
                            "%s – %s" % (bl.fmt_num(s["min"]), bl.fmt_num(s["max"])), "±%.1f%%" % (spread / 2),
                            fmt_ratio(ratio(s["median"], b["median"]) if bok else None),
                            "%.1f" % (s["rss_kib_median"] / 1024.0),
                            fmt_ratio(ratio(s["rss_kib_median"], b["rss_kib_median"]) if bok else None),
                            "%.2f" % s["wall_s_median"]])
    lines += bl.md_table(["workload", "allocator", "median", "min – max", "spread", "vs %s" % base,
                          "peak RSS MiB", "RSS vs %s" % base, "wall s"], details, "llrrrrrrr")
    # program-reported extra figures (fragment's rss_over_live, ...)
    extras = []
    for w, *_ in wl_meta:
        if w not in results:
            continue
        keys = sorted({k for a in names for k in results[w][a]["fields"]})
        for k in keys:
            vals = []
            for a in names:
                v = results[w][a]["fields"].get(k)
                vals.append(bl.fmt_num(v) if v is not None and not results[w][a]["failed"]
                            else "-")
            extras.append([w, k] + vals)
    if extras:
        lines.append("")
        lines.append("### Figures the programs report themselves (medians)")
        lines.append("")
        lines += bl.md_table(["workload", "field"] + names, extras, "ll" + "r" * len(names))
    return lines


def relative(results, base, key):
    """{workload: {allocator: its median of key relative to base's, or
    "FAIL"}}: one panel of the chart (none where base failed)."""
    panel = {}
    for w, cells in results.items():
        b = cells.get(base)
        bok = b is not None and not b["failed"] and b[key]
        panel[w] = {a: "FAIL" if s["failed"] else float(s[key] / b[key])
                    for a, s in cells.items() if s["failed"] or bok}
    return panel


def chart(path, results, names, base, info_lines):
    """The chart (latest.svg): throughput and peak RSS relative to base, a
    bar per allocator and workload."""
    plot.ratio_bars(path, "hakmem benchmarks", info_lines,
                    [("Throughput relative to %s" % base, "higher is better", relative(results, base, "median")),
                     ("Peak RSS relative to %s" % base, "lower is better",
                      relative(results, base, "rss_kib_median"))],
                    list(results), names, base)


def main():
    if "--list" in sys.argv:
        for w, prog, args, what in workloads(bl.env_float("BENCH_SCALE", 1)):
            print("%-20s %s %s   # %s" % (w, prog, " ".join(args), what))
        return 0
    scale = bl.env_float("BENCH_SCALE", 1)
    runs = int(bl.env_float("BENCH_RUNS", 5))
    if scale <= 0 or runs < 1:
        sys.exit("run.py: BENCH_SCALE must be > 0 and BENCH_RUNS >= 1")
    timeout = bl.env_float("BENCH_TIMEOUT", max(120.0, 120.0 * scale))
    wl = workloads(scale)
    only = os.environ.get("BENCH_ONLY")
    if only:
        sel = [x.strip() for x in only.split(",") if x.strip()]
        unknown = [x for x in sel if x not in [w[0] for w in wl]]
        if unknown:
            sys.exit("run.py: unknown workload(s) %s; see --list" % ", ".join(unknown))
        wl = [w for w in wl if w[0] in sel]

    allocs, missing, info = bl.announce(
        "  `make peers` installs the peers (apt-get install libmimalloc2.0 "
        "libjemalloc2 libtcmalloc-minimal4)")
    print("allocators: " + ", ".join("%s=%s" % (a, p or "(libc)") for a, p in allocs))
    base = bl.baseline(allocs)
    if base != bl.BASELINE:
        print("NOTE: %s is missing, ratios are relative to %s instead" % (bl.BASELINE, base))
    if not os.path.exists(bl.RUNONE):
        print("NOTE: %s not built (make bench-programs): peak RSS includes the "
              "runner's own RSS" % bl.RUNONE)
    print("settings: BENCH_SCALE=%g BENCH_RUNS=%d, %d workloads x %d allocators, "
          "interleaved rounds" % (scale, runs, len(wl), len(allocs)))
    sys.stdout.flush()

    load_start = os.getloadavg()[0]
    if load_start > 1.0:
        print("NOTE: load average %.2f before starting: other processes are running, "
              "expect noisy figures" % load_start)
    missing_progs = [p for _, p, _, _ in wl if not os.path.exists(os.path.join(bl.BIN, p))]
    results, raw = {}, {}
    t_start = time.monotonic()
    for i, (w, prog, args, what) in enumerate(wl):
        path = os.path.join(bl.BIN, prog)
        per = {a: [] for a, _ in allocs}
        t0 = time.monotonic()
        for r in range(runs):
            for a, lib in allocs[r % len(allocs):] + allocs[:r % len(allocs)]:
                if prog in missing_progs:
                    res = {"ok": False, "error": "%s not built" % path, "stderr": ""}
                else:
                    res = bl.run_once([path] + args, lib, timeout=timeout,
                                      result_name=prog, env=bl.alloc_env(a))
                res["round"] = r
                per[a].append(res)
                if not res["ok"]:
                    print("  FAIL %s under %s (round %d): %s\n    reproduce: %s%s%s %s" % (
                        w, a, r + 1, bl.short_error(res), "".join(e + " " for e in bl.alloc_env(a)),
                        ("LD_PRELOAD=%s " % lib) if lib else "", path, " ".join(args)))
        results[w] = {a: summarize(per[a]) for a, _ in allocs}
        raw[w] = {a: [{k: v for k, v in x.items() if k not in ("stdout", "stderr")}
                      | {"stdout": (x.get("stdout") or "")[-500:],
                         "stderr": (x.get("stderr") or "")[-500:]}
                      for x in per[a]] for a, _ in allocs}
        cells = []
        for a, _ in allocs:
            s = results[w][a]
            cells.append("%s %s" % (a, "FAIL" if s["failed"] else bl.fmt_num(s["median"])))
        unit = next((results[w][a]["unit"] for a, _ in allocs if results[w][a]["unit"]), "")
        print("[%2d/%d] %-19s %5.1fs  %s  (%s)" % (i + 1, len(wl), w, time.monotonic() - t0,
                                                   "  ".join(cells), unit))
        sys.stdout.flush()
    elapsed = time.monotonic() - t_start
    load_end = os.getloadavg()[0]

    tables = make_tables(results, allocs, base, wl)
    head = ["# hakmem benchmark results", ""]
    head += ["- " + l for l in bl.machine_lines(info)]
    head += ["- date: %s; total time %.0f s; 1-min load average %.2f at the start, %.2f at "
             "the end (the benchmarks themselves add up to ~1-2)" % (
                 info["date"], elapsed, load_start, load_end),
             "- settings: BENCH_SCALE=%g, BENCH_RUNS=%d (interleaved rounds: every round "
             "runs each allocator once, in the order %s rotated by one more each round)" % (
                 scale, runs, ", ".join(a for a, _ in allocs)),
             "- allocators: " + ", ".join("%s = `%s`" % (a, p or "libc") for a, p in allocs)]
    if missing:
        head.append("- MISSING (not run): " + "; ".join(missing))
    head += ["",
             "Throughput is each program's own figure (operations per second, higher is "
             "better), median of the rounds; *spread* is half the min–max range relative "
             "to the median. Peak RSS is the benchmark process's `ru_maxrss` from `wait4` "
             "(median). A run that exits non-zero, crashes or times out makes the cell "
             "**FAIL**. " + ("Raw numbers: `latest.json`." if plot.MISSING else
                             "Chart: `latest.svg`; raw numbers: `latest.json`."), ""]
    wl_lines = ["", "### Workloads", ""] + bl.md_table(
        ["workload", "command", "measures"],
        [[w, "`%s %s`" % (prog, " ".join(args)), what] for w, prog, args, what in wl])
    md = "\n".join(head + tables + wl_lines) + "\n"

    os.makedirs(bl.RESULTS, exist_ok=True)
    with open(os.path.join(bl.RESULTS, "latest.md"), "w") as f:
        f.write(md)
    doc = {
        "machine": info, "scale": scale, "runs": runs, "baseline": base,
        "elapsed_s": elapsed, "loadavg_start": load_start, "loadavg_end": load_end,
        "allocators": {a: p for a, p in allocs}, "missing": missing,
        "workloads": [{"name": w, "program": p, "args": a, "measures": d}
                      for w, p, a, d in wl],
        "summary": results, "runs_raw": raw,
    }
    with open(os.path.join(bl.RESULTS, "latest.json"), "w") as f:
        json.dump(doc, f, indent=1, default=lambda x: None if isinstance(x, float)
                  and math.isnan(x) else x)
    if not plot.MISSING:
        chart(os.path.join(bl.RESULTS, "latest.svg"), results, [a for a, _ in allocs], base,
              bl.machine_lines(info) + ["BENCH_SCALE=%g BENCH_RUNS=%d, %s" % (scale, runs, info["date"])])

    print()
    print("\n".join(tables))
    print()
    print("wrote %s/latest.md, latest.json%s (%.0f s)" % (
        os.path.relpath(bl.RESULTS), "" if plot.MISSING else ", latest.svg", elapsed))
    if plot.MISSING:
        print(plot.MISSING)
    failed = sum(results[w][a]["failed"] > 0 for w in results for a in results[w])
    if failed:
        print("%d workload/allocator cells FAILED (see FAIL lines above)" % failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
