#!/usr/bin/env python3
"""Runs real programs (python3, perl, sort, xz, git, sqlite3, g++) under
glibc, hakmem and the installed peer allocators (LD_PRELOAD), checks each
run's output against glibc's and writes bench/results/real.{md,json}.

The inputs are generated once by bench/real/gen.py (seeded, under glibc,
not timed) into build/bench/real/inputs-<hash of gen.py>/. Before the timed
rounds every program runs once under glibc, untimed: that run's output is
the reference and it warms the page cache. Every round then runs each
program under every allocator, in an order that rotates by one allocator
from round to round. Exit status 1 if any run failed or its output differed
from the reference.

Environment:
  BENCH_RUNS=3        rounds
  BENCH_ONLY=a,b      only these programs (names as in --list)
  BENCH_ALLOCATORS=.. only these allocators, as for bench/run.py
  BENCH_TIMEOUT=120   seconds before a run counts as FAIL
  BUILD=build         where libhakmem.so and bench/tools/runone are
  MIMALLOC_LIB=/path  (also JEMALLOC_LIB, TCMALLOC_LIB) use this library

With --classic, the programs are instead mimalloc-bench's classic ones,
built from its sources at bench time (bench/classic.py), and the results go
to bench/results/classic.{md,json,svg}. With --threads, they are larson,
xmalloc-test, mstress and the project's xthread with each number of
threads in BENCH_THREADS (default 2,16,64), on whatever CPUs the machine
has (bench/results/threads.{md,json,svg}). The chart (the .svg, drawn by
bench/plot.py where matplotlib is installed) shows each program's median
time and peak RSS under every allocator ÷ the fastest peer's.

Usage: python3 bench/real.py [--classic | --threads] [--list]
"""

import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import classic  # noqa: E402
import plot  # noqa: E402

REAL = os.path.join(bl.BENCH_DIR, "real")
GEN = os.path.join(REAL, "gen.py")
CACHE = os.path.join(bl.BUILD, "bench", "real")
WORK = os.path.join(CACHE, "work")
# the programs are Debian's (not, say, a python3 of pyenv's earlier in PATH)
SYSTEM_PATH = "/usr/bin:/bin"
GIT_ENV = ["GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"]
# gen.py makes the parts that need xz or git only where they are installed
GEN_TOOLS = ("xz", "git")
# what each suite runs, for the report's title and the chart's
SUITES = {"real": "real programs", "classic": "mimalloc-bench's classic programs",
          "threads": "threaded programs with more threads than CPUs"}


def programs(inp):
    """Each program: name, Debian package, argv, extra environment, what it
    does, and optionally probe (a command that must succeed for the program
    to count as installed), prepare (before every run) and check (a function
    of the run's stdout file giving the text compared with glibc's; by
    default the SHA-256 and length of stdout)."""
    repack_dir = os.path.join(WORK, "repack.git")
    cxx_obj = os.path.join(WORK, "cxx_churn.o")

    def fresh_repack_copy():
        shutil.rmtree(repack_dir, ignore_errors=True)
        shutil.copytree(os.path.join(inp, "repo.git"), repack_dir)

    def repack_check(_):
        fsck = subprocess.run(["git", "-C", repack_dir, "fsck", "--full", "--strict",
                               "--no-progress"], capture_output=True, text=True,
                              env=system_env(GIT_ENV))
        counts = subprocess.run(["git", "-C", repack_dir, "count-objects", "-v"],
                                capture_output=True, text=True, env=system_env(GIT_ENV)).stdout
        keep = [l for l in counts.splitlines()
                if l.split(":")[0] in ("count", "in-pack", "packs", "prune-packable", "garbage")]
        return "fsck exit %d %s| %s" % (fsck.returncode, fsck.stdout.strip(), ", ".join(keep))

    def remove_obj():
        if os.path.exists(cxx_obj):
            os.unlink(cxx_obj)

    return [
        {"name": "python", "pkg": "python3",
         "argv": ["python3", os.path.join(REAL, "py_work.py")],
         "env": ["PYTHONMALLOC=malloc", "PYTHONHASHSEED=0"],
         "what": "bench/real/py_work.py with PYTHONMALLOC=malloc: a dict of 100k strings "
                 "churned, list/tuple churn, JSON dumps/loads of a 3 MB nested structure, "
                 "60k objects sorted",
         "checks": "stdout (per-part figures and a SHA-256 digest)"},
        {"name": "perl", "pkg": "perl",
         "argv": ["perl", os.path.join(REAL, "work.pl")],
         "probe": ["perl", "-MDigest::MD5", "-e", "1"],
         "env": [],
         "what": "bench/real/work.pl: a hash of 600k strings, .= growth, regexes, "
                 "8 forked children building and sorting hashes while the parent waits",
         "checks": "stdout (per-part figures and an MD5 digest)"},
        {"name": "sort", "pkg": "coreutils",
         "argv": ["sort", "--parallel=2", "-S", "100M", "-T", WORK,
                  os.path.join(inp, "words.txt")],
         "env": [],
         "what": "GNU sort --parallel=2 -S 100M of 100 MB of lines of random words "
                 "and numbers",
         "checks": "stdout (the sorted file)"},
        {"name": "xz", "pkg": "xz-utils",
         "argv": ["xz", "-T2", "-0", "-c", os.path.join(inp, "log.txt")],
         "env": [],
         "what": "xz -T2 -0 compressing a 64 MB log",
         "checks": "stdout (the .xz file)"},
        {"name": "unxz", "pkg": "xz-utils",
         "argv": ["xz", "-T2", "-d", "-c", os.path.join(inp, "words.txt.xz")],
         "env": [],
         "what": "xz -T2 -d of sort's 100 MB input, compressed with -T2 -0",
         "checks": "stdout (the text)"},
        {"name": "git_log", "pkg": "git",
         "argv": ["git", "-C", os.path.join(inp, "repo.git"), "log", "-p"],
         "env": GIT_ENV,
         "what": "git log -p of a repository of 1200 commits to 40 files",
         "checks": "stdout"},
        {"name": "git_blame", "pkg": "git",
         "argv": ["git", "-C", os.path.join(inp, "repo.git"), "blame", "HEAD", "--",
                  "src/f00.c"],
         "env": GIT_ENV,
         "what": "git blame of its file changed by every commit",
         "checks": "stdout"},
        {"name": "git_repack", "pkg": "git",
         "argv": ["git", "-C", repack_dir, "repack", "-adfq"],
         "env": GIT_ENV, "prepare": fresh_repack_copy, "check": repack_check,
         "what": "git repack -adf (delta search from scratch, 2 threads) of a fresh copy "
                 "of that repository",
         "checks": "git fsck --full --strict and the object counts of git count-objects "
                   "-v, run under glibc afterwards"},
        {"name": "sqlite", "pkg": "sqlite3",
         "argv": ["sqlite3", "-batch", ":memory:",
                  '.read "%s"' % os.path.join(inp, "script.sql")],
         "env": [],
         "what": "sqlite3 in memory: 220k rows inserted into indexed tables, joins, "
                 "GROUP BY, UPDATE, DELETE, ORDER BY",
         "checks": "stdout (the queries' results)"},
        {"name": "gxx", "pkg": "g++",
         "argv": ["g++", "-std=c++17", "-O2", "-c", os.path.join(bl.BENCH_DIR, "cxx_churn.cc"),
                  "-o", cxx_obj],
         "env": [], "prepare": remove_obj,
         "check": lambda _: file_digest(cxx_obj),
         "what": "g++ -O2 -c bench/cxx_churn.cc (driver, cc1plus, as)",
         "checks": "the object file's bytes"},
    ]


def system_env(extra=()):
    """Environment for untimed commands: this one, without LD_PRELOAD, with
    the system's programs first in PATH."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["PATH"] = SYSTEM_PATH + ":" + env.get("PATH", "")
    env.update(e.split("=", 1) for e in extra)
    return env


def file_digest(path):
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            n += len(block)
    return "sha256 %s, %d bytes" % (h.hexdigest()[:16], n)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def inputs_dir():
    """Where the inputs made by this version of gen.py (with the same tools
    installed) are."""
    key = hashlib.sha256(open(GEN, "rb").read())
    key.update(",".join(t for t in GEN_TOOLS if shutil.which(t, path=SYSTEM_PATH)).encode())
    return os.path.join(CACHE, "inputs-" + key.hexdigest()[:16])


def make_inputs(d):
    """Runs gen.py into d unless d is there, and removes older inputs."""
    if os.path.isdir(d):
        return
    for old in glob.glob(os.path.join(CACHE, "inputs-*")):
        shutil.rmtree(old)
    log("generating the inputs into %s (once; a minute or two)" % os.path.relpath(d))
    t0 = time.monotonic()
    subprocess.run([sys.executable, GEN, d + ".tmp"], check=True,
                   env=system_env(["LC_ALL=C"] + GIT_ENV))
    os.rename(d + ".tmp", d)
    log("  done in %.0f s" % (time.monotonic() - t0))


def installed(p):
    """None if the program can run, else why not."""
    path = shutil.which(p["argv"][0], path=SYSTEM_PATH)
    if not path:
        return "%s not found (Debian package %s)" % (p["argv"][0], p["pkg"])
    probe = p.get("probe")
    if probe and subprocess.run(probe, capture_output=True, env=system_env()).returncode:
        return "`%s` fails (Debian package %s)" % (" ".join(probe), p["pkg"])
    p["argv"][0] = path
    return None


def run_env(p, alloc):
    """The NAME=VALUE settings of program p's runs under allocator alloc."""
    env = ["LC_ALL=C"] + p["env"] + bl.alloc_env(alloc)
    return env + ["HAKMEM_ROUTE_BANNER=0"] if alloc.startswith("hakmem") else env


def run(p, alloc, lib, timeout):
    """One run of program p under allocator alloc; adds the output check
    (text) to run_once's result."""
    if "prepare" in p:
        p["prepare"]()
    out = os.path.join(WORK, p["name"] + ".out")
    r = bl.run_once(p["argv"], lib, timeout=timeout, env=run_env(p, alloc), stdout_file=out,
                    result=False)
    if r["ok"]:
        r["check"] = p.get("check", file_digest)(out)
        if "time" in p:   # a program that runs for a fixed time: its relative time (bench/classic.py)
            try:
                r["wall_s"] = p["time"](out)
            except ValueError as e:
                r.update(ok=False, error=str(e))
    return r


def reproduce(p, alloc, lib):
    env = run_env(p, alloc) + (["LD_PRELOAD=" + lib] if lib else [])
    return shlex.join(env + p["argv"])


def summarize(runs):
    ok = [r for r in runs if r["ok"]]
    wall = [r["wall_s"] for r in ok]
    rss = [r["maxrss_kib"] / 1024.0 for r in ok]
    faults = [r["minflt"] for r in ok]
    return {"runs": len(runs), "failed": len(runs) - len(ok),
            "errors": [r["error"] for r in runs if not r["ok"]],
            "wall_s": wall, "rss_mib": rss, "minflt": faults,
            "minflt_median": bl.median(faults) if ok else None,
            "wall_s_by_round": [r["wall_s"] if r["ok"] else None for r in runs],
            "wall_s_median": bl.median(wall) if ok else None,
            "rss_mib_median": bl.median(rss) if ok else None,
            "wall_s_min": min(wall) if ok else None, "wall_s_max": max(wall) if ok else None}


def fastest_peer(cells, key):
    """(peer, value): the peer allocator (bench/benchlib.py is_peer) with
    the lowest median of key among those that did not fail."""
    vals = [(s[key], a) for a, s in cells.items() if bl.is_peer(a) and not s["failed"]]
    return (min(vals)[1], min(vals)[0]) if vals else (None, None)


def table(results, progs, names):
    hak = [a for a in names if a.startswith("hakmem")]
    head = ["program"] + names
    for a in hak:
        head += ["%s ÷ fastest peer" % a, "%s RSS ÷ smallest peer's" % a, "%s ÷ that peer, round by round" % a]
    rows = []
    ratios = {a: ([], [], []) for a in hak}
    for p in progs:
        cells = results.get(p["name"])
        if cells is None:
            continue
        row = [p["name"]]
        for a in names:
            s = cells[a]
            row.append("**FAIL**" if s["failed"] else
                       "%.2f s / %.0f MiB" % (s["wall_s_median"], s["rss_mib_median"]))
        for a in hak:
            for i, key in enumerate(("wall_s_median", "rss_mib_median")):
                peer, v = fastest_peer(cells, key)
                if peer and not cells[a]["failed"] and v:
                    x = cells[a][key] / v
                    ratios[a][i].append(x)
                    row.append("%.2f× (%s)" % (x, peer))
                else:
                    row.append("-")
            peer, _ = fastest_peer(cells, "wall_s_median")
            pairs = bl.round_ratios(cells[a]["wall_s_by_round"], cells[peer]["wall_s_by_round"]) if peer else []
            if pairs:
                ratios[a][2].append(bl.median(pairs))
                row.append("%.2f× (%.2f–%.2f)" % (bl.median(pairs), min(pairs), max(pairs)))
            else:
                row.append("-")
        rows.append(row)
    if hak:
        row = ["**geomean**"] + [""] * len(names)
        for a in hak:
            row += ["%.2f×" % bl.geomean(r) if r else "-" for r in ratios[a]]
        rows.append(row)
    return bl.md_table(head, rows, "l" + "r" * (len(head) - 1))


def standing_table(results, progs, names):
    """The table's score given to every allocator in turn: the geomean over
    the programs of its median ÷ the lowest median among the others (hakmem
    and the peers, not glibc), and the programs where it has the lowest. The
    lowest of five or six noisy medians sits below their common value, so an
    allocator that ties the rest everywhere scores above 1.00: this row shows
    how far above for each."""
    rivals = [a for a in names if a.startswith("hakmem") or bl.is_peer(a)]
    rows = []
    for a in rivals:
        out = [a]
        for key in ("wall_s_median", "rss_mib_median"):
            ratios, firsts = [], 0
            for p in progs:
                cells = results.get(p["name"])
                if cells is None or cells[a]["failed"]:
                    continue
                others = [cells[b][key] for b in rivals if b != a and not cells[b]["failed"]]
                if others and min(others) > 0:
                    ratios.append(cells[a][key] / min(others))
                    firsts += cells[a][key] < min(others)
            out += ["%.3f×" % bl.geomean(ratios) if ratios else "-", "%d of %d" % (firsts, len(ratios))]
        rows.append(out)
    return ["", "### Every allocator by the same score", "",
            "Each allocator's geomean of median time (and peak RSS) ÷ the lowest median of the "
            "others among %s, and the programs where its median is the lowest." % ", ".join(rivals),
            ""] + bl.md_table(["allocator", "time ÷ fastest other", "fastest on", "peak RSS ÷ smallest other",
                               "smallest on"], rows, "lrrrr")


def to_fastest_peer(results, progs, key):
    """{program: {allocator: its median of key ÷ the fastest peer's, or
    "FAIL"}}: one panel of the chart (none where every peer failed)."""
    panel = {}
    for p in progs:
        cells = results.get(p["name"])
        peer, v = fastest_peer(cells, key) if cells else (None, None)
        if peer and v:
            panel[p["name"]] = {a: "FAIL" if s["failed"] else float(s[key] / v) for a, s in cells.items()}
    return panel


def chart(path, suite, results, progs, names, info_lines):
    """The chart (<suite>.svg): time and peak RSS ÷ the fastest peer's, a
    bar per allocator and program."""
    panels = [("Time ÷ the fastest peer's", "lower is better", to_fastest_peer(results, progs, "wall_s_median")),
              ("Peak RSS ÷ the smallest peer's", "lower is better", to_fastest_peer(results, progs, "rss_mib_median"))]
    plot.ratio_bars(path, "hakmem: %s" % SUITES[suite], info_lines, panels,
                    [p["name"] for p in progs if p["name"] in panels[0][2]], names, "the fastest peer")


def fault_table(results, progs, names):
    """Median minor page faults per program and allocator (thousands): a
    program that maps and touches fresh pages again where another allocator
    reuses them pays for it here, a cost its time alone does not explain."""
    rows = []
    for p in progs:
        cells = results.get(p["name"])
        if cells is not None:
            rows.append([p["name"]] + ["**FAIL**" if cells[a]["failed"] else
                                       "%.1fk" % (cells[a]["minflt_median"] / 1000.0) for a in names])
    return ["", "### Page faults", "",
            "Median minor page faults (`ru_minflt`, thousands) of the same runs: each one "
            "a page the kernel mapped and zeroed on first touch.", ""] + bl.md_table(
        ["program"] + names, rows, "l" + "r" * len(names))


def main():
    runs = int(bl.env_float("BENCH_RUNS", 3))
    timeout = bl.env_float("BENCH_TIMEOUT", 120)
    if runs < 1:
        sys.exit("real.py: BENCH_RUNS must be >= 1")
    suite = "classic" if "--classic" in sys.argv else "threads" if "--threads" in sys.argv else "real"
    inp = inputs_dir()
    if suite == "threads":
        try:
            counts = [int(x) for x in os.environ.get("BENCH_THREADS", "2,16,64").split(",")]
        except ValueError:
            sys.exit("real.py: BENCH_THREADS is a list of thread counts, such as 2,16,64")
        if min(counts) < 1:
            sys.exit("real.py: BENCH_THREADS: thread counts are >= 1")
        progs = classic.threads(counts)
    else:
        progs = classic.build() if suite == "classic" else programs(inp)
    if "--list" in sys.argv:
        for p in progs:
            print("%-11s %s" % (p["name"], p["what"]))
        return 0
    only = os.environ.get("BENCH_ONLY")
    if only:
        sel = [x.strip() for x in only.split(",") if x.strip()]
        unknown = [x for x in sel if x not in [p["name"] for p in progs]]
        if unknown:
            sys.exit("real.py: unknown program(s) %s; see --list" % ", ".join(unknown))
        progs = [p for p in progs if p["name"] in sel]
    if not os.path.exists(bl.RUNONE):
        sys.exit("real.py: %s not built (make bench-programs)" % bl.RUNONE)

    allocs, missing, info = bl.announce(
        "  `make peers` installs the peers (apt-get install libmimalloc2.0 "
        "libjemalloc2 libtcmalloc-minimal4)", source_peers=suite != "real")
    names = [a for a, _ in allocs]
    print("allocators: " + ", ".join("%s=%s" % (a, p or "(libc)") for a, p in allocs))
    skipped = [(p["name"], installed(p)) for p in progs]
    skipped = [(name, why) for name, why in skipped if why]
    for name, why in skipped:
        print("SKIPPED %s: %s" % (name, why))
    sys.stdout.flush()
    progs = [p for p in progs if p["name"] not in dict(skipped)]

    if suite == "real":
        make_inputs(inp)
    os.makedirs(WORK, exist_ok=True)
    t_start = time.monotonic()
    load_start = os.getloadavg()[0]
    failures = []
    reference = {}
    log("reference runs under glibc (untimed)")
    for p in progs:
        r = run(p, "glibc", "", timeout)
        if r["ok"]:
            reference[p["name"]] = r["check"]
            log("  %-10s %6.2f s  %s" % (p["name"], r["wall_s"], r["check"]))
        else:
            failures.append("%s fails under glibc: %s" % (p["name"], bl.short_error(r)))
            log("  FAIL " + failures[-1])
    progs = [p for p in progs if p["name"] in reference]

    raw = {p["name"]: {a: [] for a in names} for p in progs}
    for rnd in range(runs):
        order = allocs[rnd % len(allocs):] + allocs[:rnd % len(allocs)]
        for p in progs:
            cells = []
            for a, lib in order:
                r = run(p, a, lib, timeout)
                if r["ok"] and r["check"] != reference[p["name"]]:
                    r["ok"] = False
                    r["error"] = "output differs from glibc's: %s, glibc's %s" % (
                        r["check"], reference[p["name"]])
                    if "check" not in p:
                        keep = os.path.join(WORK, "%s.%s.round%d.out" % (p["name"], a, rnd + 1))
                        os.replace(os.path.join(WORK, p["name"] + ".out"), keep)
                        r["error"] += " (kept in %s)" % os.path.relpath(keep)
                elif not r["ok"]:
                    r["error"] = bl.short_error(r)
                if not r["ok"]:
                    failures.append("%s under %s (round %d): %s\n    reproduce: %s" % (
                        p["name"], a, rnd + 1, r["error"], reproduce(p, a, lib)))
                    log("  FAIL " + failures[-1])
                raw[p["name"]][a].append({k: v for k, v in r.items()
                                          if k not in ("stdout", "stderr")}
                                         | {"round": rnd + 1,
                                            "stderr": (r.get("stderr") or "")[-500:]})
                cells.append("%s %s" % (a, "%.2fs %.0fM %.1fk flt" % (
                    r["wall_s"], r["maxrss_kib"] / 1024, r["minflt"] / 1000.0) if r["ok"] else "FAIL"))
            log("[round %d/%d] %-10s %s" % (rnd + 1, runs, p["name"], "  ".join(cells)))
    elapsed = time.monotonic() - t_start
    load_end = os.getloadavg()[0]

    results = {p["name"]: {a: summarize(raw[p["name"]][a]) for a in names} for p in progs}
    tab = table(results, progs, names)
    head = ["# hakmem: %s under each allocator" % SUITES[suite], ""]
    head += ["- " + l for l in bl.machine_lines(info)]
    head += ["- date: %s; total time %.0f s; 1-min load average %.2f at the start, %.2f at "
             "the end" % (info["date"], elapsed, load_start, load_end),
             "- settings: BENCH_RUNS=%d (rounds; each runs every program under every "
             "allocator, in the order %s rotated by one more each round)" % (
                 runs, ", ".join(names)),
             "- allocators: " + ", ".join("%s = `%s`" % (a, p or "libc") for a, p in allocs)]
    head.append("- chart: " + (plot.MISSING or "`%s.svg`, time and peak RSS ÷ the fastest peer's" % suite))
    if missing:
        head.append("- MISSING allocators (not run): " + "; ".join(missing))
    for name, why in skipped:
        head.append("- SKIPPED %s: %s" % (name, why))
    head += ["",
             "Each cell: median wall seconds / median peak RSS (MiB). Peak RSS is `ru_maxrss` "
             "from `wait4` on the program's process: the largest peak of that process and of "
             "every descendant it waited for (perl's children, git's subprocesses, g++'s "
             "cc1plus and as), not their sum. A run is **FAIL** if it exits non-zero, "
             "crashes, times out or its output differs from the reference run's under glibc. "
             "*fastest peer* / *smallest peer's*: the lowest median among %s. *Round by "
             "round*: the median (and range) of each round's ratio of hakmem's time to the "
             "fastest peer's; a round runs every allocator within seconds, so its two runs "
             "share the host's state of that moment, which medians taken apart do not." % (
                 ", ".join([a for a in names if bl.is_peer(a)])), ""]
    prog_rows = []
    for p in progs:
        cmd = shlex.join(p["env"] + [os.path.basename(p["argv"][0])] + p["argv"][1:])
        prog_rows.append([p["name"], "`%s`" % cmd.replace(bl.ROOT + os.sep, ""), p["what"], p["checks"]])
    prog_lines = ["", "### Programs", ""] + bl.md_table(["program", "command", "does", "checked"], prog_rows)
    fail_lines = (["", "### Failures", ""] + ["- " + f.replace("\n", "<br>") for f in failures]
                  if failures else [])
    md = "\n".join(head + tab + standing_table(results, progs, names) + fault_table(results, progs, names)
                   + prog_lines + fail_lines) + "\n"

    os.makedirs(bl.RESULTS, exist_ok=True)
    with open(os.path.join(bl.RESULTS, suite + ".md"), "w") as f:
        f.write(md)
    doc = {"machine": info, "runs": runs, "elapsed_s": elapsed,
           "loadavg_start": load_start, "loadavg_end": load_end,
           "allocators": {a: p for a, p in allocs}, "missing": missing,
           "skipped": dict(skipped), "failures": failures,
           "programs": [{k: p[k] for k in ("name", "pkg", "argv", "env", "what", "checks")}
                        | {"reference": reference[p["name"]]} for p in progs],
           "summary": results, "runs_raw": raw}
    with open(os.path.join(bl.RESULTS, suite + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
    if not plot.MISSING:
        chart(os.path.join(bl.RESULTS, suite + ".svg"), suite, results, progs, names,
              bl.machine_lines(info) + ["BENCH_RUNS=%d, %s" % (runs, info["date"])])

    print()
    print("\n".join(tab))
    print()
    for f in failures:
        print("FAIL " + f)
    print("wrote %s/%s.md, %s.json%s (%.0f s)" % (os.path.relpath(bl.RESULTS), suite, suite,
                                                  "" if plot.MISSING else ", %s.svg" % suite, elapsed))
    if plot.MISSING:
        print(plot.MISSING)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
