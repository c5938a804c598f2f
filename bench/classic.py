"""The classic allocation-heavy programs of mimalloc-bench, built from its
public sources at bench time (never kept in this tree).

Source: $MIMALLOC_BENCH_SRC, a clone of https://github.com/daanx/mimalloc-bench
(a work tree or a bare repository), else a shallow clone of it made into
build/bench/classic/ on first use. Its bench/ directory is exported there
and the six programs are compiled with the system's cc and c++ as its
CMakeLists.txt compiles them:

- cfrac: factors a 44-digit number by continued fractions (many small bignums);
- espresso: the Berkeley two-level logic minimizer on its largest example;
- barnes: the Barnes-Hut n-body simulation of the SPLASH suite;
- alloc-test1, alloc-testN: alloc-test's random-size alloc/free mix, 1 and N threads;
- larsonN, larsonN-sized: Larson's server simulation (blocks handed between
  threads), with plain and sized delete;
- mstressN: threads that allocate, share and free blocks of many sizes;
- rptestN: rpmalloc's test of random sizes in cross-thread batches;
- xmalloc-testN: producer threads whose blocks consumer threads free;
- cache-scratch1/N, cache-thrash1/N: passive and active false sharing;
- glibc-simple, glibc-thread: glibc's bench-malloc-simple and -thread;
- malloc-large: 5..25 MiB buffers replaced at random, zero-filled;
- mleak10, mleak100: threads that leave blocks for the next to free;
- rbstress1, rbstressN: its Ruby script that makes, keeps and drops
  strings on 1 and N threads, under Debian's ruby where it is installed.

N is the number of CPUs, as mimalloc-bench's bench.sh takes it, and so are
the arguments. The programs that run for a fixed time (larson, rptest,
xmalloc-test, glibc-thread) are scored by bench.sh's "relative time", from
what they print, instead of their wall time. Not here: sh6bench and
sh8bench (sources not in the repository), and the real
programs bench.sh builds (lean, redis, gs ...), which bench/real.py covers
with Debian's.

build() returns them as bench/real.py's programs() does its own."""

import hashlib
import os
import re
import shutil
import subprocess
import sys

import benchlib

URL = "https://github.com/daanx/mimalloc-bench"
DIR = os.path.join(benchlib.BUILD, "bench", "classic")
PKG = "mimalloc-bench (built from source)"

CFRAC = ("cfrac.c pops.c pconst.c pio.c pabs.c pneg.c pcmp.c podd.c phalf.c padd.c psub.c "
         "pmul.c pdivmod.c psqrt.c ppowmod.c atop.c ptoa.c itop.c utop.c ptou.c errorp.c "
         "pfloat.c pidiv.c pimod.c picmp.c primes.c pcfrac.c pgcd.c").split()
ESPRESSO = ("cofactor.c cols.c compl.c contain.c cubestr.c cvrin.c cvrm.c cvrmisc.c cvrout.c "
            "dominate.c equiv.c espresso.c essen.c exact.c expand.c gasp.c getopt.c gimpel.c "
            "globals.c hack.c indep.c irred.c main.c map.c matrix.c mincov.c opo.c pair.c part.c "
            "primes.c reduce.c rows.c set.c setc.c sharp.c sminterf.c solution.c sparse.c unate.c "
            "utility.c verify.c").split()
BARNES = "code.c code_io.c load.c grav.c getparam.c util.c".split()
OLD_C = ["-O2", "-w", "-std=gnu89"]

# (name, compiler, flags, sources under bench/, libraries)
TARGETS = [
    ("cfrac", "cc", OLD_C + ["-DNOMEMOPT=1"], ["cfrac/" + f for f in CFRAC], ["-lm"]),
    ("espresso", "cc", OLD_C, ["espresso/" + f for f in ESPRESSO], ["-lm"]),
    ("barnes", "cc", OLD_C, ["barnes/" + f for f in BARNES], ["-lm"]),
    ("alloc-test", "c++", ["-O2", "-w", "-DBENCH=4"],
     ["alloc-test/test_common.cpp", "alloc-test/allocator_tester.cpp"], ["-lpthread"]),
    ("glibc-simple", "cc", ["-O2", "-w"], ["glibc-bench/bench-malloc-simple.c"], ["-lpthread"]),
    ("malloc-large", "c++", ["-O2", "-w", "-std=c++17"], ["malloc-large/malloc-large.cpp"], []),
    ("larson", "c++", ["-O2", "-w", "-std=c++17", "-DCPP=1"], ["larson/larson.cpp"], ["-lpthread"]),
    ("larson-sized", "c++", ["-O2", "-w", "-std=c++17", "-DCPP=1", "-DSIZED=1", "-fsized-deallocation"],
     ["larson/larson.cpp"], ["-lpthread"]),
    ("mstress", "cc", ["-O2", "-w"], ["mstress/mstress.c"], ["-lpthread"]),
    ("rptest", "cc", ["-O2", "-w", "-Irptest"], ["rptest/rptest.c", "rptest/thread.c", "rptest/timer.c"],
     ["-lpthread", "-lm"]),
    ("xmalloc-test", "cc", ["-O2", "-w"], ["xmalloc-test/xmalloc-test.c"], ["-lpthread"]),
    ("cache-scratch", "c++", ["-O2", "-w", "-std=c++17"], ["cache-scratch/cache-scratch.cpp"], ["-lpthread"]),
    ("cache-thrash", "c++", ["-O2", "-w", "-std=c++17"], ["cache-thrash/cache-thrash.cpp"], ["-lpthread"]),
    ("glibc-thread", "cc", ["-O2", "-w"], ["glibc-bench/bench-malloc-thread.c"], ["-lpthread"]),
    ("mleak", "cc", ["-O2", "-w"], ["mleak/mleak.c"], ["-lpthread"]),
]


def _git(args, cwd=None):
    return subprocess.run(["git"] + args, cwd=cwd, capture_output=True)


def _source():
    """A git repository of mimalloc-bench: MIMALLOC_BENCH_SRC or a clone."""
    src = os.environ.get("MIMALLOC_BENCH_SRC")
    if src:
        return src
    clone = os.path.join(DIR, "mimalloc-bench.git")
    if not os.path.isdir(clone):
        os.makedirs(DIR, exist_ok=True)
        print("cloning %s (once) ..." % URL, file=sys.stderr)
        r = _git(["clone", "--bare", "--depth", "1", URL, clone])
        if r.returncode:
            shutil.rmtree(clone, ignore_errors=True)
            sys.exit("bench/classic.py: cannot clone %s: %s\nset MIMALLOC_BENCH_SRC to a clone of it"
                     % (URL, r.stderr.decode().strip()))
    return clone


def _export():
    """Exports bench/ of the source's HEAD into build/bench/classic/src-<rev>/
    (again when HEAD moved); returns that directory."""
    src = _source()
    head = _git(["rev-parse", "HEAD"], cwd=src)
    if head.returncode:
        sys.exit("bench/classic.py: %s is not a git repository of mimalloc-bench" % src)
    rev = head.stdout.decode().strip()
    tree = os.path.join(DIR, "src-" + rev[:12])
    if not os.path.isdir(os.path.join(tree, "bench")):
        os.makedirs(tree, exist_ok=True)
        archive = _git(["archive", rev, "bench"], cwd=src)
        if archive.returncode:
            sys.exit("bench/classic.py: git archive failed: " + archive.stderr.decode().strip())
        subprocess.run(["tar", "x"], input=archive.stdout, cwd=tree, check=True)
    return tree


def _compile(bench, out, names=None):
    """Compiles the TARGETS (those named, or all) missing from out."""
    os.makedirs(out, exist_ok=True)
    for name, cc, flags, sources, libs in TARGETS:
        exe = os.path.join(out, name)
        if os.path.exists(exe) or (names is not None and name not in names):
            continue
        print("building %s ..." % name, file=sys.stderr)
        r = subprocess.run([cc] + flags + ["-o", exe] + [os.path.join(bench, s) for s in sources] + libs,
                           capture_output=True, cwd=bench)
        if r.returncode:
            sys.exit("bench/classic.py: %s did not build:\n%s" % (name, r.stderr.decode()[-2000:]))


def build():
    """Exports and compiles what is missing; returns the programs to run."""
    tree = _export()
    bench = os.path.join(tree, "bench")
    out = os.path.join(tree, "bin")
    _compile(bench, out)
    exe = lambda n: os.path.join(out, n)
    cpus = os.cpu_count() or 1
    return [
        {"name": "cfrac", "pkg": PKG, "argv": [exe("cfrac"), "17545186520507317056371138836327483792789528"],
         "env": [], "what": "cfrac: factors a 44-digit number by continued fractions", "check": _lines(),
         "checks": "stdout (the factors)"},
        {"name": "espresso", "pkg": PKG, "argv": [exe("espresso"), "-s", os.path.join(bench, "espresso", "largest.espresso")],
         "env": [], "what": "espresso: two-level logic minimization of largest.espresso, 20 times",
         "check": _lines(lambda l: "cost is" in l, lambda l: l.split("cost is")[1]),
         "checks": "the costs it prints (-s; mimalloc-bench's copy prints no solution)"},
        {"name": "barnes", "pkg": PKG, "env": [], "check": _lines(lambda l: "TIME" not in l and "COMPUTE" not in l),
         "argv": ["sh", "-c", 'exec "$0" < "$1"', exe("barnes"), os.path.join(bench, "barnes", "input")],
         "what": "barnes: Barnes-Hut n-body, 163840 bodies", "checks": "stdout but its timing lines"},
        {"name": "alloc-test1", "pkg": PKG, "argv": [exe("alloc-test"), "1"], "env": [],
         "what": "alloc-test 1: one thread's random-size alloc/free mix",
         "check": _lines(lambda l: "ctr =" in l, lambda l: l.split("ctr =")[1]),
         "checks": "its final counter"},
        {"name": "glibc-simple", "pkg": PKG, "argv": [exe("glibc-simple")], "env": [],
         "what": "glibc's bench-malloc-simple: batches of 25..1600 blocks of 16..64 B",
         "check": _lines(lambda l: False), "checks": "exit status"},
        {"name": "malloc-large", "pkg": PKG, "argv": [exe("malloc-large")], "env": [],
         "what": "malloc-large: 5..25 MiB buffers replaced at random, zero-filled",
         "check": _lines(lambda l: False), "checks": "exit status"},
    ] + [_timed(name, exe(prog), args, what, time)
         for name, prog, args, what, time in _more(cpus)] + _rbstress(bench, cpus)


def _rbstress(bench, n):
    """rbstress1 and rbstressN: mimalloc-bench's Ruby script under Debian's
    ruby (the programs are skipped where it is not installed)."""
    script = os.path.join(bench, "rbstress", "stress_mem.rb")
    return [{"name": "rbstress%s" % name, "pkg": "ruby", "argv": ["ruby", script, str(t)], "env": [],
             "what": "rbstress: Ruby's strings made, kept and dropped by %s" % what,
             "check": _lines(lambda l: l.startswith("run with")), "checks": "its first line"}
            for name, t, what in (("1", 1, "1 thread"), ("N", n, "N threads"))]


# Smaller runs of the fixed-work programs, to count their instructions under
# callgrind (bench/classic_perf.py): the same code on less work. Where the
# work is fixed in the source, a copy of it is edited (file, text, new text)
# and those programs are compiled again from it.
SMALL_EDITS = [
    ("espresso/main.c", "i < 20; i++", "i < 1; i++"),
    ("alloc-test/allocator_tester.cpp", "iterCount = 100000000", "iterCount = 5000000"),
    ("glibc-bench/bench-malloc-simple.c", "NUM_ITERS 2000000", "NUM_ITERS 100000"),
    ("malloc-large/malloc-large.cpp", "kNumIterations = 2000", "kNumIterations = 100"),
    ("barnes/input", "163840", "16384"),
]
SMALL_BUILDS = ("espresso", "alloc-test", "glibc-simple", "malloc-large")


def build_small():
    """The fixed-work programs on less work, as (name, argv, stdin file or
    None, how much less). Not here: the fixed-time programs (larson, rptest,
    xmalloc-test, glibc-thread), which do different work under each
    allocator, and cache-scratch and cache-thrash, which measure the false
    sharing of cache lines between cores that callgrind does not model."""
    tree = _export()
    bench, small = os.path.join(tree, "bench"), os.path.join(tree, "bench-small")
    if not os.path.isdir(small):
        shutil.rmtree(small + ".tmp", ignore_errors=True)
        shutil.copytree(bench, small + ".tmp")
        for path, old, new in SMALL_EDITS:
            with open(os.path.join(small + ".tmp", path)) as f:
                text = f.read()
            if old not in text:
                sys.exit("bench/classic.py: %r is not in mimalloc-bench's %s any more" % (old, path))
            with open(os.path.join(small + ".tmp", path), "w") as f:
                f.write(text.replace(old, new, 1))
        os.rename(small + ".tmp", small)
    _compile(bench, os.path.join(tree, "bin"), ("cfrac", "barnes", "mstress", "mleak"))
    _compile(small, os.path.join(tree, "bin-small"), SMALL_BUILDS)
    b = lambda n: os.path.join(tree, "bin", n)
    s = lambda n: os.path.join(tree, "bin-small", n)
    n = str(min(os.cpu_count() or 1, 16))
    return [
        ("cfrac", [b("cfrac"), "123456789012345678901234567"], None, "a 27-digit number (44 in the suite)"),
        ("espresso", [s("espresso"), "-s", os.path.join(bench, "espresso", "largest.espresso")], None,
         "1 pass (20)"),
        ("barnes", [b("barnes")], os.path.join(small, "barnes", "input"), "16,384 bodies (163,840)"),
        ("alloc-test1", [s("alloc-test"), "1"], None, "5e6 iterations (1e8)"),
        ("alloc-testN", [s("alloc-test"), n], None, "5e6 iterations (1e8)"),
        ("glibc-simple", [s("glibc-simple")], None, "1e5 iterations (2e6)"),
        ("malloc-large", [s("malloc-large")], None, "100 buffers (2,000)"),
        ("mstressN", [b("mstress"), n, "50", "25"], None, "as in the suite"),
        ("mleak10", [b("mleak"), "5"], None, "as in the suite"),
    ]

# The edits that make glibc-simple's placements (glibc_simple_placements):
# only its first size, and padding ahead of its loops.
PLACEMENT_EDITS = [
    ("  timing_t start, stop;\n", "  timing_t start, stop;\n  __asm__ volatile(\".skip \" PAD \", 0x90\");\n"),
    ("  bench (2*size);\n  bench (4*size);\n", ""),
]
PLACEMENT_PADS = range(0, 64, 8)


def glibc_simple_placements():
    """glibc-simple's source with only its first size's test (bench(16)),
    compiled with 0, 8, ... 56 bytes of padding at the top of
    do_benchmark (functions aligned to 64 bytes), which moves its inner
    loops through the halves of a 64-byte line; as [(pad, exe)]. For
    bench/placement.py."""
    tree = _export()
    bench, out = os.path.join(tree, "bench"), os.path.join(tree, "bin-placement")
    os.makedirs(out, exist_ok=True)
    src = os.path.join(bench, "glibc-bench", "bench-malloc-simple.c")
    with open(src) as f:
        text = f.read()
    for old, new in PLACEMENT_EDITS:
        if old not in text:
            sys.exit("bench/classic.py: %r is not in mimalloc-bench's bench-malloc-simple.c any more" % old)
        text = text.replace(old, new, 1)
    edited = os.path.join(out, "bench-malloc-simple.c")
    with open(edited, "w") as f:
        f.write(text)
    built = []
    for pad in PLACEMENT_PADS:
        exe = os.path.join(out, "glibc-simple-pad%d" % pad)
        if not os.path.exists(exe):
            r = subprocess.run(["cc", "-O2", "-w", "-falign-functions=64", '-DPAD="%d"' % pad, "-o", exe, edited,
                                "-lpthread"], capture_output=True)
            if r.returncode:
                sys.exit("bench/classic.py: glibc-simple-pad%d did not build:\n%s" % (pad, r.stderr.decode()[-2000:]))
        built.append((pad, exe))
    return built


def _more(n):
    """(name, program, arguments, what it does, relative time or None) of
    the programs run with bench.sh's arguments for n CPUs."""
    x = "%d 1000 1 2000000 %d"
    return [
        ("alloc-testN", "alloc-test", str(min(n, 16)), "alloc-test: the random-size mix on N threads", None),
        ("larsonN", "larson", "5 8 1000 5000 100 4141 %d" % n,
         "larson: server simulation, blocks handed to new threads, 5 s", _relative(r" time: ([0-9.]+)s")),
        ("larsonN-sized", "larson-sized", "5 8 1000 5000 100 4141 %d" % n,
         "larson with sized delete, 5 s", _relative(r" time: ([0-9.]+)s")),
        ("mstressN", "mstress", "%d 50 25" % n, "mstress: threads allocate, share and free blocks", None),
        ("rptestN", "rptest", "%d 0 1 2 500 1000 100 8 16000" % n,
         "rptest: random sizes in cross-thread batches, fixed time", _relative(r"(\d+) memory ops", 2e6)),
        ("xmalloc-testN", "xmalloc-test", "-w %d -t 5 -s 64" % n,
         "xmalloc-test: producers' blocks freed by consumers, 5 s", _relative(r"^rtime: ([0-9.]+)")),
        ("cache-scratch1", "cache-scratch", x % (1, n), "cache-scratch: passive false sharing, 1 thread", None),
        ("cache-scratchN", "cache-scratch", x % (n, n), "cache-scratch: passive false sharing, N threads", None),
        ("cache-thrash1", "cache-thrash", x % (1, n), "cache-thrash: active false sharing, 1 thread", None),
        ("cache-thrashN", "cache-thrash", x % (n, n), "cache-thrash: active false sharing, N threads", None),
        ("glibc-thread", "glibc-thread", str(n), "glibc's bench-malloc-thread, fixed time",
         _relative(r"^(\d+) iterations", 1e9)),
        ("mleak10", "mleak", "5", "mleak: threads leave blocks for the next to free", None),
        ("mleak100", "mleak", "50", "mleak, ten times as many threads", None),
    ]


def threads(counts):
    """The oversubscribed runs (make bench-threads): larson, xmalloc-test,
    mstress and the project's xthread (every free remote) with each count
    of threads in counts, whatever the number of CPUs, as bench/real.py's
    programs(). xmalloc-test and xthread run half the threads as producers
    and half as consumers."""
    tree = _export()
    out = os.path.join(tree, "bin")
    _compile(os.path.join(tree, "bench"), out, ("larson", "xmalloc-test", "mstress"))
    xthread = os.path.join(benchlib.BIN, "xthread")
    if not os.path.exists(xthread):
        sys.exit("bench/classic.py: %s not built (make bench-programs)" % xthread)
    progs = []
    for n in counts:
        half = str(max(n // 2, 1))
        for name, prog, args, what, time in _more(n):
            if name == "xmalloc-testN":
                args = "-w %s -t 5 -s 64" % half
            if name in ("larsonN", "xmalloc-testN", "mstressN"):
                progs.append(_timed("%s-%d" % (name[:-1], n), os.path.join(out, prog), args,
                                    "%s, %d threads" % (what, n), time))
        progs.append({"name": "xthread-%d" % n, "pkg": "hakmem's bench (make bench-programs)",
                      "argv": [xthread, half, half, "10000000", "16", "512"], "env": [],
                      "what": "xthread: producers' blocks freed by consumers through rings, %d threads" % n,
                      "check": _lines(lambda l: False), "checks": "exit status"})
    return progs


def _timed(name, exe, args, what, time):
    """A program of _more(), exe with the arguments args (one string), run
    in build/bench/classic/work/ (rptest writes its results where it runs):
    its exit status is what is checked; time, if given, scores its run
    instead of its wall time (bench/real.py)."""
    work = os.path.join(DIR, "work")
    os.makedirs(work, exist_ok=True)
    p = {"name": name, "pkg": PKG, "argv": ["env", "--chdir=" + work, exe] + args.split(), "env": [], "what": what,
         "check": _lines(lambda l: False), "checks": "exit status"}
    if time:
        p["time"] = time
    return p


def _relative(pattern, per=None):
    """Relative time as bench.sh takes it from a program's output: the
    number pattern captures, or per / that number (a count)."""
    def time(path):
        with open(path, errors="replace") as f:
            m = re.search(pattern, f.read(), re.M)
        if not m:
            raise ValueError("no %r in its output" % pattern)
        x = float(m.group(1))
        return per / x if per else x
    return time


def _lines(keep=lambda l: True, part=lambda l: l):
    """A check: the SHA-256 of the stdout lines kept (those compared with
    glibc's; none kept: only the exit status counts)."""
    def check(path):
        with open(path, errors="replace") as f:
            kept = [part(l) for l in f.read().splitlines() if keep(l)]
        return hashlib.sha256("\n".join(kept).encode()).hexdigest()
    return check
