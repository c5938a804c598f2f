#!/usr/bin/env python3
"""A/B comparison of two hakmem libraries (called by bench/ab.sh).

  ab.py NAME_A LIB_A NAME_B LIB_B "PROGRAM ARGS..." ["PROGRAM ARGS..." ...]

Runs each workload AB_RUNS times (default 10, at least 10 recommended) per
library, interleaved A B, B A, A B, ... so drift hits both equally; reports
mean, median, CV (stdev/mean) of each program's own figure, and a verdict:

  delta = median(B) / median(A) - 1   (throughput: higher is better)
  win   if delta > +threshold and |delta| > max(CV_A, CV_B)
  loss  if delta < -threshold and |delta| > max(CV_A, CV_B)
  neutral otherwise (the difference is below the threshold or the noise)

threshold = AB_THRESHOLD percent (default 2). A = B (the same revision
twice) is a valid use: it shows the noise level of this machine.
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def stats(xs):
    mean = statistics.fmean(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return {"n": len(xs), "mean": mean, "median": statistics.median(xs),
            "cv": sd / mean if mean else 0.0, "min": min(xs), "max": max(xs)}


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__)
    name_a, lib_a, name_b, lib_b = argv[:4]
    workloads = [w.split() for w in argv[4:]]
    runs = int(os.environ.get("AB_RUNS", 10))
    thr = float(os.environ.get("AB_THRESHOLD", 2.0)) / 100
    info = bl.machine_info()
    ver_a = os.environ.get("AB_DESC_A", name_a)
    ver_b = os.environ.get("AB_DESC_B", name_b)
    lines = ["# hakmem A/B", ""] + ["- " + l for l in bl.machine_lines(info)[:1]]
    lines += ["- A = %s: `%s`" % (ver_a, lib_a), "- B = %s: `%s`" % (ver_b, lib_b),
              "- %d runs of each, interleaved (A B, B A, ...); figure = the program's own "
              "throughput (higher is better); verdict threshold %.1f%% on the median, and the "
              "difference must exceed the larger CV" % (runs, thr * 100), ""]
    # the rows are printed as each workload ends
    lines += bl.md_table(["workload", "A mean", "A median", "A CV", "B mean", "B median", "B CV",
                          "B vs A (median)", "B vs A (mean)", "B>A pairs", "verdict"], [], "l" + "r" * 9 + "l")
    for l in lines:
        print(l)
    sys.stdout.flush()
    failed = False
    for w in workloads:
        prog = w[0]
        path = prog if os.sep in prog else os.path.join(bl.BIN, prog)
        if not os.path.exists(path):
            sys.exit("ab: %s not built (make bench-programs)" % path)
        res = {"A": [], "B": []}
        errors = []
        for i in range(runs):
            order = [("A", lib_a), ("B", lib_b)]
            if i % 2:
                order.reverse()
            for k, lib in order:
                r = bl.run_once([path] + w[1:], lib, result_name=os.path.basename(prog))
                if r["ok"]:
                    res[k].append(r["figure"])
                else:
                    errors.append("%s run %d: %s (reproduce: LD_PRELOAD=%s %s %s)" % (
                        k, i + 1, bl.short_error(r), lib, path, " ".join(w[1:])))
        label = " ".join(w)
        if errors:
            failed = True
            row = bl.md_row([label, "**FAIL**", errors[0].replace("|", "/")] + [""] * 7 + ["FAIL"])
            print(row)
            for e in errors[1:4]:
                print("    " + e)
            lines.append(row)
            continue
        a, b = stats(res["A"]), stats(res["B"])
        d_med = b["median"] / a["median"] - 1
        d_mean = b["mean"] / a["mean"] - 1
        noise = max(a["cv"], b["cv"])
        pairs = sum(x > y for x, y in zip(res["B"], res["A"]))
        if abs(d_med) > thr and abs(d_med) > noise:
            verdict = "**win**: B faster by %.1f%%" % (d_med * 100) if d_med > 0 else \
                "**loss**: B slower by %.1f%%" % (-d_med * 100)
        else:
            why = ("below the %.0f%% threshold" % (thr * 100) if abs(d_med) <= thr
                   else "within the noise (CV %.1f%%)" % (noise * 100))
            verdict = "neutral: %+.1f%% is %s" % (d_med * 100, why)
        row = bl.md_row([label, bl.fmt_num(a["mean"]), bl.fmt_num(a["median"]), "%.1f%%" % (a["cv"] * 100),
                         bl.fmt_num(b["mean"]), bl.fmt_num(b["median"]), "%.1f%%" % (b["cv"] * 100),
                         "%+.1f%%" % (d_med * 100), "%+.1f%%" % (d_mean * 100), "%d/%d" % (pairs, runs), verdict])
        print(row)
        sys.stdout.flush()
        lines.append(row)
    os.makedirs(bl.RESULTS, exist_ok=True)
    with open(os.path.join(bl.RESULTS, "latest-ab.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\nwrote %s" % os.path.relpath(os.path.join(bl.RESULTS, "latest-ab.md")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
