#!/usr/bin/env python3
"""make bench-perf: instructions (and, with hardware counters, cycles and
branches) and page faults per operation for random_mixed (16..1040 B, and
its tiny 16..128 B and mid 1..32 KiB variants) and tiny_hot under
each allocator.

With working counters (`perf stat -e instructions true` prints a count):
`perf stat -x,` of a full run minus a run of the same program with 1
iteration (startup, library loading, teardown), divided by the difference in
operations. Without (a VM without a PMU prints `<not supported>`): total
instructions (Ir) from `valgrind --tool=callgrind` of a smaller run, minus
the Ir of a 1-iteration run, divided the same way. Page faults per operation
come from ru_minflt (wait4) of native runs, computed the same way.

The per-operation figures include the benchmark loop's own instructions
(random numbers, the writes into the block), the same for every allocator.
The same counts are taken under a bump allocator (build/bench/tools/libbump.so:
malloc bumps a pointer, free does nothing) and subtracted: what remains is
each allocator's own instructions per operation, and the table gives the
ratio of hakmem's to each allocator's.

Environment: BENCH_SCALE (multiplies iteration counts), BENCH_ALLOCATORS,
BUILD, PERF_MODE=perf|callgrind (force a method).
"""

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


BUMP = "bump (loop only)"


def cases(scale, mode):
    def s(n):
        return max(2, int(round(n * scale)))

    small = mode == "callgrind"
    # name, program, function(iterations) -> args, iterations (counted, native)
    rm_n = s(2000000) if small else s(20000000)
    th_n = s(1000000) if small else s(40000000)
    return [
        ("random_mixed", "random_mixed", lambda n: [str(n), "400", "1"], rm_n, s(20000000)),
        ("random_mixed_tiny", "random_mixed", lambda n: [str(n), "400", "1", "16", "128"], rm_n, s(20000000)),
        ("random_mixed_mid", "random_mixed", lambda n: [str(n), "400", "1", "1024", "32768"], rm_n, s(20000000)),
        ("tiny_hot", "tiny_hot", lambda n: [str(n), "32", "16"], th_n, s(40000000)),
    ]


def perf_works():
    if not bl.which("perf"):
        return False, "perf is not installed"
    try:
        p = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return False, "perf stat failed (%s)" % e
    for line in p.stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2].startswith("instructions"):
            if f[0].strip().isdigit():
                return True, ""
            return False, "`perf stat -e instructions` reports %s here" % f[0].strip()
    return False, "`perf stat -e instructions` gave no count (%s)" % (
        p.stderr.strip().splitlines() or ["no output"])[-1]


EVENTS = ["instructions", "cycles", "branches", "page-faults"]


def perf_count(argv, preload):
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as f:
        cmd = ["perf", "stat", "-x,", "-o", f.name, "-e", ",".join(EVENTS), "--",
               "env", "LD_PRELOAD=" + preload] + argv
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-200:])
        counts = {}
        for line in open(f.name):
            fl = line.strip().split(",")
            if len(fl) > 2:
                ev = fl[2].split(":")[0]
                try:
                    counts[ev] = float(fl[0])
                except ValueError:
                    pass
        return counts, None


def callgrind_ir(argv, preload, stdin=None, functions=False):
    """Total instructions (Ir) of argv under callgrind with LD_PRELOAD=preload;
    with functions, also the instructions of each function in preload's
    library itself ("functions": {name: Ir})."""
    with tempfile.TemporaryDirectory(prefix="hakperf.") as d:
        env = dict(os.environ)
        env["LD_PRELOAD"] = preload
        out = os.path.join(d, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + argv
        with open(stdin or os.devnull) as inp:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=inp, timeout=1200)
        if p.returncode != 0:   # the program's own last words, not valgrind's stack: one table cell
            said = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("==")]
            return None, "exit %d under callgrind: %s" % (p.returncode, (said or ["?"])[-1][:200])
        m = re.search(r"Collected : (\d+)", p.stderr)
        if not m:
            return None, "no 'Collected' line from callgrind"
        r = {"instructions": float(m.group(1))}
        if functions:
            r["functions"] = self_costs(out, preload)
        return r, None


def self_costs(path, lib):
    """Each function's own Ir (its callees' not included) in a callgrind
    profile, for the functions of the object lib: names compressed as
    "fn=(id) name" and referred to as "fn=(id)"; the cost line after a
    "calls=" line is the callee's, not the function's."""
    lib = os.path.realpath(lib)
    names, costs = {"ob": {}, "fn": {}}, {}
    fn = None
    mine = callee = False   # mine: the current object is lib
    with open(path, errors="replace") as f:
        for line in f:
            key, eq, rest = line.partition("=")
            if eq and key in ("ob", "fn", "cob", "cfn"):
                m = re.match(r"\((\d+)\)\s*(.*)", rest.strip())
                name = names[key[-2:]].setdefault(m.group(1), m.group(2)) if m else rest.strip()
                if key == "ob":
                    mine = os.path.realpath(name) == lib
                elif key == "fn":
                    fn = name
            elif eq and key == "calls":
                callee = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if callee:
                    callee = False
                    continue
                fields = line.split()
                if len(fields) > 1 and mine:
                    costs[fn] = costs.get(fn, 0) + int(fields[1])
    return costs


def main():
    scale = float(os.environ.get("BENCH_SCALE", 1))
    allocs, _, info = bl.announce(source_peers=True)
    ok, why = perf_works()
    mode = os.environ.get("PERF_MODE") or ("perf" if ok else "callgrind")
    if mode == "perf" and not ok:
        sys.exit("bench-perf: PERF_MODE=perf but " + why)
    if mode == "callgrind":
        if not ok:
            print("perf: hardware counters not available (%s); falling back to "
                  "valgrind --tool=callgrind: instructions per op only" % why)
        if not bl.which("valgrind"):
            sys.exit("bench-perf: valgrind is not installed either (apt-get install valgrind)")
    base = bl.baseline(allocs)
    count = perf_count if mode == "perf" else callgrind_ir
    events = EVENTS if mode == "perf" else ["instructions"]
    bump = os.path.join(bl.BIN, "tools", "libbump.so")
    if not os.path.exists(bump):
        sys.exit("bench-perf: %s not built (make bench-programs)" % bump)

    rows = []
    for name, prog, mkargs, n, native_n in cases(scale, mode):
        path = os.path.join(bl.BIN, prog)
        if not os.path.exists(path):
            sys.exit("bench-perf: %s not built (make bench-programs)" % path)
        for a, lib in [(BUMP, bump)] + allocs:
            row = {"workload": name, "allocator": a, "error": None, "n": n}
            full, err = count([path] + mkargs(n), lib)
            base_c, err2 = (count([path] + mkargs(1), lib) if full else (None, None))
            if full is None or base_c is None:
                row["error"] = err or err2
            else:
                for ev in events:
                    if ev in full and ev in base_c:
                        row[ev] = (full[ev] - base_c[ev]) / (n - 1)
            if a == BUMP:   # never reuses memory: its page faults say nothing
                rows.append(row)
                continue
            # page faults per op from native runs (ru_minflt via wait4)
            rf = bl.run_once([path] + mkargs(native_n), lib, result_name=prog)
            rb = bl.run_once([path] + mkargs(1), lib, result_name=prog)
            if rf["ok"] and rb["ok"]:
                row["faults"] = (rf["minflt"] - rb["minflt"]) / (native_n - 1)
            elif not row["error"]:
                row["error"] = bl.short_error(rf if not rf["ok"] else rb)
            rows.append(row)
            print("  %-13s %-9s %s" % (name, a, row["error"] or "%.1f instr/op" %
                                       row.get("instructions", float("nan"))))
            sys.stdout.flush()

    head = ["workload", "allocator", "instr/op", "vs %s" % base, "own instr/op", "hakmem's own ÷ this"]
    if mode == "perf":
        head += ["cycles/op", "branches/op"]
    head += ["page faults/op"]
    lines = ["# hakmem bench-perf", ""] + ["- " + l for l in bl.machine_lines(info)]
    lines.append("- method: %s; %s" % (
        "perf stat -x, (hardware counters)" if mode == "perf" else
        "valgrind --tool=callgrind total Ir (hardware counters not available: %s)" % why,
        "per op = (count of N iterations - count of 1 iteration) / (N - 1); page faults "
        "from ru_minflt of native runs"))
    lines.append("- iterations: " + ", ".join("%s N=%d (native page-fault runs N=%d)" % (
        c[0], c[3], c[4]) for c in cases(scale, mode)))
    lines.append("")

    def find(workload, allocator):
        return next((x for x in rows if x["workload"] == workload and x["allocator"] == allocator
                     and not x["error"]), None)

    def own(r):
        """Instructions per op less the bump allocator's run: the allocator's own."""
        loop = find(r["workload"], BUMP) if r else None
        if not r or not loop or "instructions" not in r or "instructions" not in loop:
            return None
        return r["instructions"] - loop["instructions"]

    table = []
    for r in rows:
        if r["error"]:
            table.append([r["workload"], r["allocator"], "**FAIL**: %s" % r["error"].replace("|", "/")])
            continue
        b = find(r["workload"], base)
        ins, bins = r.get("instructions"), b.get("instructions") if b else None
        mine, hak = own(r), own(find(r["workload"], "hakmem"))
        cells = [r["workload"], r["allocator"], "%.1f" % ins if ins is not None else "-",
                 "%.2f×" % (ins / bins) if ins is not None and bins else "-",
                 "%.1f" % mine if mine is not None and r["allocator"] != BUMP else "-",
                 "%.2f×" % (hak / mine) if hak is not None and mine and r["allocator"] != BUMP else "-"]
        if mode == "perf":
            cells += ["%.1f" % r.get("cycles", float("nan")),
                      "%.1f" % r.get("branches", float("nan"))]
        cells.append("%.3g" % r["faults"] if "faults" in r else "-")
        table.append(cells)
    text = "\n".join(lines + bl.md_table(head, table, "ll" + "r" * (len(head) - 2))) + "\n"
    print()
    print(text)
    os.makedirs(bl.RESULTS, exist_ok=True)
    with open(os.path.join(bl.RESULTS, "latest-perf.md"), "w") as f:
        f.write(text)
    print("wrote %s" % os.path.relpath(os.path.join(bl.RESULTS, "latest-perf.md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
