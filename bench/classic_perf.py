#!/usr/bin/env python3
"""make bench-classic-perf: where mimalloc-bench's fixed-work programs
spend an allocator's instructions, per program, against each peer.

Each program of bench/classic.py's build_small() (the same code on less
work, so that callgrind takes seconds) runs under valgrind --tool=callgrind
with every allocator that runs under Valgrind and with the bump allocator
(build/bench/tools/libbump.so: malloc bumps a pointer, free does nothing).
An allocator's own instructions are its run's total less the bump run's:
the program's own work is the same in both. For hakmem and for the peer
with the fewest, the functions of the allocator's library with the most
instructions of their own (inlined code counted where it was inlined).
From native runs of the same programs: page faults, user and system time,
and for hakmem the batch refills and flushes of its caches, the
BigCache's misses and the madvise calls (HAKMEM_STATS=json).

Writes bench/results/classic-perf.md. Environment: BENCH_ALLOCATORS as for
run.py (default: hakmem, the installed peers, mimalloc3 and snmalloc
built at bench time), BENCH_ONLY=a,b (only these programs), BUILD,
MIMALLOC_BENCH_SRC (bench/classic.py).

Usage: python3 bench/classic_perf.py
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import classic  # noqa: E402
import perf  # noqa: E402

TOP = 4   # functions shown per allocator


def top_functions(costs):
    """The TOP functions by their own instructions, as 'name millions'."""
    best = sorted(costs.items(), key=lambda kv: -kv[1])[:TOP]
    return ", ".join("%s %.2f" % (name, ir / 1e6) for name, ir in best) or "-"


def fewest(row):
    """(own instructions, name) of the peer with the fewest, or None."""
    peers = [(c["own"], a) for a, c in row.items() if a != "hakmem" and "own" in c]
    return min(peers) if peers else None


def hakmem_counts(r):
    """Refills, flushes, BigCache misses and madvise calls of a native run
    with HAKMEM_STATS=json (its report, on stderr)."""
    line = next((l for l in reversed(r["stderr"].splitlines()) if l.startswith("{")), None)
    if not r["ok"] or not line:
        return None
    st = json.loads(line)
    cls = st["classes"]
    return {"refills": sum(c["refills"] or 0 for c in cls), "flushes": sum(c["flushes"] or 0 for c in cls),
            "bigcache_misses": st["bigcache_misses"], "madvise": st["os_decommits"]}


def main():
    allocs, _, info = bl.announce(source_peers=True)
    allocs = [(a, lib) for a, lib in allocs if a != "glibc" and lib]
    bump = os.path.join(bl.BIN, "tools", "libbump.so")
    if not os.path.exists(bump):
        sys.exit("bench-classic-perf: %s not built (make bench-programs)" % bump)
    if not bl.which("valgrind"):
        sys.exit("bench-classic-perf: valgrind is not installed (apt-get install valgrind)")
    only = [x for x in os.environ.get("BENCH_ONLY", "").split(",") if x]
    progs = [p for p in classic.build_small() if not only or p[0] in only]

    results = {}
    for name, argv, stdin, _ in progs:
        loop, err = perf.callgrind_ir(argv, bump, stdin, functions=True)
        if loop is None:
            print("  %-13s bump      %s" % (name, err))
            continue
        row = results[name] = {"bump": {"functions": loop["functions"]}}
        for a, lib in allocs:
            r, err = perf.callgrind_ir(argv, lib, stdin, functions=True)
            n = bl.run_once(argv, lib, env=["HAKMEM_STATS=json"] if a == "hakmem" else [], result=False,
                            stdin=stdin)
            cell = {"error": err or (None if n["ok"] else bl.short_error(n))}
            if r:
                cell["own"] = r["instructions"] - loop["instructions"]
                cell["functions"] = r["functions"]
            if n["ok"]:
                cell.update(faults=n["minflt"], user=n["user_s"], sys=n["sys_s"])
            if a == "hakmem":
                cell["counts"] = hakmem_counts(n)
            row[a] = cell
            print("  %-13s %-9s %s" % (name, a, cell["error"] or "%.2fM own instructions" % (cell["own"] / 1e6)))
            sys.stdout.flush()

    names = [a for a, _ in allocs]
    lines = ["# hakmem bench-classic-perf", ""] + ["- " + l for l in bl.machine_lines(info)]
    lines += ["- method: valgrind --tool=callgrind total Ir less the bump allocator's run of the same "
              "program: each allocator's own instructions, in millions; smaller runs than bench-classic's:",
              ""] + ["  - %s: %s" % (name, less) for name, _, _, less in progs] + [""]
    head = ["program"] + names + ["hakmem ÷ fewest peer"]
    table = []
    for name, row in results.items():
        best = fewest(row)
        hak = row.get("hakmem", {}).get("own")
        table.append([name] + [("%.2f" % (row[a]["own"] / 1e6)) if "own" in row.get(a, {}) else
                               ("FAIL: " + (row.get(a, {}).get("error") or "?"))[:60] for a in names] +
                     ["%.2f× (%s)" % (hak / best[0], best[1]) if hak and best and best[0] > 0 else "-"])
    lines += bl.md_table(head, table, "l" + "r" * (len(head) - 1)) + [""]

    lines += ["## Per program: the allocator's functions by their own instructions, and native runs", ""]
    detail = []
    for name, row in results.items():
        best = fewest(row)
        for a in ["bump", "hakmem"] + ([best[1]] if best else []):
            c = row.get(a)
            if not c or "functions" not in c:
                continue
            k = c.get("counts") or {}
            detail.append([name, a, top_functions(c["functions"]),
                           "%d" % c["faults"] if "faults" in c else "-",
                           "%.3f / %.3f" % (c["user"], c["sys"]) if "user" in c else "-",
                           ", ".join("%s %d" % kv for kv in k.items()) or "-"])
    lines += ["The functions of each allocator's library with the most instructions of their own, in "
              "millions (inlined code where it was inlined); the bump allocator's are the floor a "
              "malloc and a free that do nothing cost.", ""]
    lines += bl.md_table(["program", "allocator", "functions (millions of their own instructions)",
                          "page faults", "user / sys s", "hakmem's counts"], detail, "llllrl")
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    os.makedirs(bl.RESULTS, exist_ok=True)
    out = os.path.join(bl.RESULTS, "classic-perf.md")
    with open(out, "w") as f:
        f.write(text)
    print("wrote %s" % os.path.relpath(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
