"""Shared pieces of the benchmark runners (python3 standard library only).

- allocators(): glibc, hakmem and the peer allocators that are installed;
  announce(): those and the machine, printed as a runner's first lines;
- run_once(): one run of one program (a benchmark's, or any program's for
  bench/real.py) under one allocator, timed and measured with wait4() (see
  bench/tools/runone.c for why the wait4 is done by a small helper process
  rather than by Python itself);
- parse_result(): the program's own result line;
- machine_info(): CPU, cores, kernel, compiler and allocator versions;
- md_table(): the Markdown tables of the runners' reports.
"""

import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
BIN = os.path.join(BUILD, "bench")
RUNONE = os.path.join(BIN, "tools", "runone")
RESULTS = os.path.join(BENCH_DIR, "results")

# name -> (file names to look for, Debian package)
PEERS = {
    "mimalloc": (["libmimalloc.so.2", "libmimalloc.so"], "libmimalloc2.0"),
    "jemalloc": (["libjemalloc.so.2", "libjemalloc.so"], "libjemalloc2"),
    "tcmalloc": (["libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so",
                  "libtcmalloc.so.4"], "libtcmalloc-minimal4"),
}
ORDER = ["glibc", "hakmem", "mimalloc", "jemalloc", "tcmalloc"]
BASELINE = "mimalloc"

# Peers built from their sources at bench time (never kept in this tree),
# the versions mimalloc-bench's comparisons quote: name -> (repository, tag,
# cmake options, cmake target, library it builds). The source is
# $<NAME>_SRC (MIMALLOC3_SRC, SNMALLOC_SRC), a clone of the repository, bare
# or not, for machines without network access; else a shallow clone of the
# tag made into build/bench/peers/ on first use. The build is kept there.
# make bench-classic and make bench-perf run them by default, the others
# when BENCH_ALLOCATORS names them.
SOURCE_PEERS = {
    "mimalloc3": ("https://github.com/microsoft/mimalloc", "v3.4.3",
                  ["-DMI_BUILD_TESTS=OFF", "-DMI_BUILD_STATIC=OFF", "-DMI_BUILD_OBJECT=OFF"],
                  "mimalloc", "libmimalloc.so"),
    "snmalloc": ("https://github.com/microsoft/snmalloc", "0.7.5",
                 ["-DSNMALLOC_BUILD_TESTING=OFF"], "snmallocshim", "libsnmallocshim.so"),
}


def is_peer(name):
    """Is name a peer allocator, installed or built from source?"""
    return name in PEERS or name in SOURCE_PEERS


_source_built = {}


def source_peer(name):
    """(library, None) of the source peer name, built on first use, or
    (None, why it could not be)."""
    if name in _source_built:
        return _source_built[name]
    url, tag, options, target, lib = SOURCE_PEERS[name]
    top = os.path.join(BUILD, "bench", "peers")
    out = os.path.join(top, "%s-%s" % (name, tag))
    path = os.path.join(out, "build", lib)
    why = None if os.path.exists(path) else _build_source_peer(name, url, tag, options, target, top, out)
    if not why and not os.path.exists(path):
        why = "%s was not built" % path
    _source_built[name] = (None, why) if why else (os.path.realpath(path), None)
    return _source_built[name]


def _build_source_peer(name, url, tag, options, target, top, out):
    """Builds a source peer into out; None, or why it failed."""
    var = name.upper() + "_SRC"
    src = os.environ.get(var)
    if not src:
        src = os.path.join(top, name + ".git")
        if not os.path.isdir(src):
            os.makedirs(top, exist_ok=True)
            print("cloning %s %s (once) ..." % (url, tag), file=sys.stderr)
            r = subprocess.run(["git", "clone", "--bare", "--depth", "1", "--branch", tag, url, src],
                               capture_output=True, text=True)
            if r.returncode:
                shutil.rmtree(src, ignore_errors=True)
                return "cannot clone %s (%s); set %s to a clone of it" % (
                    url, (r.stderr.strip().splitlines() or ["?"])[-1], var)
    print("building %s %s ..." % (name, tag), file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "src"))
    archive = subprocess.run(["git", "-C", src, "archive", tag], capture_output=True)
    if archive.returncode:
        return "git archive %s in %s failed: %s" % (tag, src, archive.stderr.decode().strip())
    subprocess.run(["tar", "x", "-C", os.path.join(out, "src")], input=archive.stdout, check=True)
    build = os.path.join(out, "build")
    for argv in (["cmake", "-S", os.path.join(out, "src"), "-B", build, "-DCMAKE_BUILD_TYPE=Release"] + options,
                 ["cmake", "--build", build, "-j", str(os.cpu_count() or 1), "--target", target]):
        try:
            r = subprocess.run(argv, capture_output=True, text=True)
        except OSError as e:
            return "%s: %s" % (argv[0], e)
        if r.returncode:
            return "%s failed: %s" % (" ".join(argv[:2]), (r.stdout + r.stderr).strip()[-300:])
    return None

# The peers' heap profilers, sampling at a mean of 512 KiB as
# hakmem@PROF_SAMPLE=512K does, for the cost of profiling side by side
# (docs/profiling.md): name -> (file names, Debian package, environment).
# jemalloc's prof keeps a stack trace per sampled allocation (no profile
# written at exit); gperftools' full tcmalloc does the same with
# TCMALLOC_SAMPLE_PARAMETER (its minimal build cannot sample).
PROFILED_PEERS = {
    "jemalloc:prof": (PEERS["jemalloc"][0], PEERS["jemalloc"][1],
                      ["MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:19,prof_final:false"]),
    "tcmalloc:prof": (["libtcmalloc.so.4"], "libgoogle-perftools4",
                      ["TCMALLOC_SAMPLE_PARAMETER=524288"]),
}


def _lib_dirs():
    dirs = []
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                             timeout=10).stdout
        for m in re.finditer(r"=> (\S+)", out):
            d = os.path.dirname(m.group(1))
            if d not in dirs:
                dirs.append(d)
    except (OSError, subprocess.SubprocessError):
        pass
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
              "/usr/lib64", "/usr/lib", "/usr/local/lib", "/lib/x86_64-linux-gnu"]:
        if d not in dirs:
            dirs.append(d)
    return dirs


def find_peer(name):
    env = None if name in PROFILED_PEERS else os.environ.get(name.upper() + "_LIB")  # e.g. MIMALLOC_LIB=/path/lib.so
    if env:
        return env if os.path.exists(env) else None
    if name in SOURCE_PEERS:
        return source_peer(name)[0]
    files = PROFILED_PEERS[name][0] if name in PROFILED_PEERS else PEERS[name][0]
    for f in files:
        for d in _lib_dirs():
            p = os.path.join(d, f)
            if os.path.exists(p):
                return os.path.realpath(p)
    return None


PROFILES = ["fast", "balanced", "lean", "auto"]


def alloc_env(name):
    """The environment an allocator name asks for: hakmem:PROFILE is hakmem
    with HAKMEM_PROFILE=PROFILE; hakmem@NAME=VALUE+NAME=VALUE is hakmem with
    HAKMEM_NAME=VALUE for each (hakmem@PROF_SAMPLE=512K); jemalloc:prof
    and tcmalloc:prof are those peers' heap profilers (PROFILED_PEERS)."""
    if name in PROFILED_PEERS:
        return list(PROFILED_PEERS[name][2])
    if name.startswith("hakmem:"):
        return ["HAKMEM_PROFILE=" + name.split(":", 1)[1]]
    if name.startswith("hakmem@"):
        return ["HAKMEM_" + o for o in name.split("@", 1)[1].split("+")]
    return []


def allocators(hakmem_lib=None, source_peers=False):
    """([(name, preload path or '')], [missing messages]) in ORDER, and
    the SOURCE_PEERS after them with source_peers, filtered by
    BENCH_ALLOCATORS=name,name,... when set; there,
    hakmem:PROFILE (fast, balanced, lean, auto) adds hakmem under that
    profile, after hakmem, hakmem@NAME=VALUE hakmem with those options
    (alloc_env), hakmem-secure the secure build (make secure), and
    jemalloc:prof, tcmalloc:prof the peers sampling for a heap profile
    (PROFILED_PEERS), each after its peer."""
    want = os.environ.get("BENCH_ALLOCATORS")
    want = [w.strip() for w in want.split(",") if w.strip()] if want else \
        ORDER + (list(SOURCE_PEERS) if source_peers else [])
    bad = [w for w in want if w.startswith("hakmem:") and w.split(":", 1)[1] not in PROFILES]
    if bad:
        sys.exit("BENCH_ALLOCATORS: unknown profile in %s (profiles: %s)" % (", ".join(bad), ", ".join(PROFILES)))
    order = ORDER[:2] + ["hakmem:" + p for p in PROFILES] + ["hakmem-secure"] + \
        [w for w in want if w.startswith("hakmem@")] + \
        [p for name in ORDER[2:] for p in [name, name + ":prof"] if p in PEERS or p in PROFILED_PEERS] + \
        list(SOURCE_PEERS)
    found, missing = [], []
    for name in order:
        if name not in want:
            continue
        if name == "glibc":
            found.append((name, ""))
        elif name == "hakmem-secure":
            lib = os.path.join(BUILD, "secure", "libhakmem-secure.so")
            if os.path.exists(lib):
                found.append((name, lib))
            else:
                missing.append("%s (%s not built: run `make secure`)" % (name, lib))
        elif name.startswith("hakmem"):
            lib = hakmem_lib or os.path.join(BUILD, "libhakmem.so")
            if os.path.exists(lib):
                found.append((name, lib))
            else:
                missing.append("%s (%s not built: run `make`)" % (name, lib))
        else:
            lib = find_peer(name)
            if lib:
                found.append((name, lib))
            elif name in SOURCE_PEERS:
                var = name.upper() + "_LIB"
                missing.append("%s (%s)" % (name, "%s=%s not found" % (var, os.environ[var]) if os.environ.get(var)
                                            else source_peer(name)[1]))
            else:
                files, pkg = (PROFILED_PEERS[name][:2] if name in PROFILED_PEERS
                              else PEERS[name])
                missing.append("%s (%s not found; Debian package %s)" % (name, files[0], pkg))
    return found, missing


def baseline(allocs):
    """What ratios are relative to: BASELINE if it is among allocs, else glibc."""
    return BASELINE if any(a == BASELINE for a, _ in allocs) else "glibc"


def announce(missing_hint=None, source_peers=False):
    """The start of a runner's output: finds the allocators (with the
    SOURCE_PEERS when source_peers), prints the machine lines and the
    missing allocators (followed by missing_hint, if given). Returns
    (allocators, missing, machine info) as allocators() and machine_info()
    do."""
    allocs, missing = allocators(source_peers=source_peers)
    info = machine_info()
    for l in machine_lines(info):
        print(l)
    if missing:
        print("MISSING allocators (skipped): " + "; ".join(missing))
        if missing_hint:
            print(missing_hint)
    return allocs, missing, info


RESULT_RE = re.compile(r"^(\w+): (.*) = ([0-9.eE+-]+) (\S+)\s*$")
FIELD_RE = re.compile(r"\b([a-z_][a-z0-9_]*)=([0-9.eE+-]+)\b")


def parse_result(stdout, name=None):
    """(figure, unit, fields) from the last result line, or None."""
    for line in reversed(stdout.splitlines()):
        m = RESULT_RE.match(line)
        if m and (name is None or m.group(1) == name):
            fields = {}
            for k, v in FIELD_RE.findall(m.group(2)):
                try:
                    fields[k] = float(v)
                except ValueError:
                    pass
            try:
                return float(m.group(3)), m.group(4), fields
            except ValueError:
                return None
    return None


def signame(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return "signal %d" % n


def run_once(argv, preload, timeout=120.0, result_name=None, env=(), stdout_file=None,
             result=True, stdin=None):
    """Runs argv once with LD_PRELOAD=preload ('' = none) and the NAME=VALUE
    settings in env, its input from the file stdin (default: none). Returns
    a dict: ok, error, figure, unit, fields, wall_s, maxrss_kib, minflt,
    user_s, sys_s, stdout, stderr, status. With stdout_file,
    the program's output goes to that file (and stdout is ''); with
    result=False, no result line is expected (ok: exit 0, allocator
    preloaded) and there is no figure, unit or fields."""
    with tempfile.TemporaryDirectory(prefix="hakbench.") as tmp:
        fe, fr = (os.path.join(tmp, n) for n in ("err", "rusage"))
        fo = stdout_file or os.path.join(tmp, "out")
        if os.path.exists(RUNONE):
            cmd = [RUNONE, "-o", fr, "-t", str(timeout), "-e", "LD_PRELOAD=" + preload]
            for e in env:
                cmd += ["-e", e]
            cmd += ["--"] + argv
            penv = dict(os.environ)
            penv.pop("LD_PRELOAD", None)
            with open(fo, "w") as out, open(fe, "w") as err, open(stdin or os.devnull) as inp:
                p = subprocess.Popen(cmd, stdout=out, stderr=err, env=penv, stdin=inp)
                _, wst, _ = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(wst)
            info = {}
            if os.path.exists(fr):
                for k, v in re.findall(r"(\w+)=(\S+)", open(fr).read()):
                    info[k] = float(v)
            if not info:
                return {"ok": False, "error": "runone failed (exit %s)" % p.returncode,
                        "stdout": "" if stdout_file else open(fo).read(),
                        "stderr": open(fe).read()}
            status, sig, tmo = int(info["status"]), int(info["signal"]), int(info["timeout"])
            wall, maxrss, minflt = info["wall_s"], int(info["maxrss_kib"]), int(info["minflt"])
            user, sys_s = info["utime_s"], info["stime_s"]
        else:
            # Fallback without the helper: wait4 here. ru_maxrss then includes
            # this Python process's RSS (kept across execve), so small RSS
            # figures are inflated.
            penv = dict(os.environ)
            penv["LD_PRELOAD"] = preload
            penv.update(e.split("=", 1) for e in env)
            with open(fo, "w") as out, open(fe, "w") as err, open(stdin or os.devnull) as inp:
                t0 = time.monotonic()
                p = subprocess.Popen(argv, stdout=out, stderr=err, env=penv,
                                     stdin=inp, start_new_session=True)
                tmo = 0
                while True:
                    pid, wst, ru = os.wait4(p.pid, os.WNOHANG)
                    if pid:
                        break
                    if time.monotonic() - t0 > timeout:
                        os.killpg(p.pid, signal.SIGKILL)
                        tmo = 1
                        pid, wst, ru = os.wait4(p.pid, 0)
                        break
                    time.sleep(0.002)
                wall = time.monotonic() - t0
                p.returncode = os.waitstatus_to_exitcode(wst)
            status = os.WEXITSTATUS(wst) if os.WIFEXITED(wst) else -1
            sig = os.WTERMSIG(wst) if os.WIFSIGNALED(wst) else 0
            maxrss, minflt, user, sys_s = ru.ru_maxrss, ru.ru_minflt, ru.ru_utime, ru.ru_stime
        stdout = "" if stdout_file else open(fo).read()
        stderr = open(fe).read()
    r = {"ok": False, "error": None, "status": status, "wall_s": wall,
         "maxrss_kib": maxrss, "minflt": minflt, "user_s": user, "sys_s": sys_s,
         "stdout": stdout, "stderr": stderr}
    if tmo:
        r["error"] = "timeout after %g s" % timeout
    elif sig:
        r["error"] = "killed by " + signame(sig)
    elif status != 0:
        r["error"] = "exit %d" % status
    elif "cannot be preloaded" in stderr:
        r["error"] = "LD_PRELOAD failed: " + stderr.strip().splitlines()[0]
    elif not result:
        r["ok"] = True
    else:
        res = parse_result(stdout, result_name)
        if res is None:
            r["error"] = "no result line"
        else:
            r["ok"] = True
            r["figure"], r["unit"], r["fields"] = res
    return r


def short_error(r):
    """One line for a failed run: the error and the program's last stderr line."""
    msg = r.get("error") or "failed"
    lines = [l for l in (r.get("stderr") or "").splitlines() if l.strip()]
    if lines and "timeout" not in msg:
        msg += ": " + lines[-1][:120]
    return msg


def _cmd(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def hakmem_version(root=ROOT):
    try:
        txt = open(os.path.join(root, "include", "hakmem.h")).read()
        parts = [re.search(r"#define HAKMEM_VERSION_%s\s+(\d+)" % k, txt) for k in
                 ("MAJOR", "MINOR", "PATCH")]
        ver = ".".join(m.group(1) for m in parts) if all(parts) else "?"
    except OSError:
        ver = "?"
    desc = _cmd(["git", "-C", root, "describe", "--always", "--dirty"]) or "no git"
    return "%s (%s)" % (ver, desc)


def machine_info():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))
        mem = "%.1f GiB" % (int(mem) / 1048576)
    except (OSError, StopIteration):
        mem = "?"
    versions = {"glibc": (os.confstr("CS_GNU_LIBC_VERSION") or "?").replace("glibc ", ""),
                "hakmem": hakmem_version()}
    for name, (_, pkg) in PEERS.items():
        v = _cmd(["dpkg-query", "-W", "-f", "${Version}", pkg])
        if not v:
            lib = find_peer(name)
            v = ("installed, version unknown (%s)" % lib) if lib else "not installed"
        else:
            v = "%s (%s)" % (v, pkg)
        versions[name] = v
    for name, (_, tag, _, _, _) in SOURCE_PEERS.items():
        lib = _source_built.get(name, (None,))[0]
        versions[name] = "%s (built from source, %s)" % (tag, lib) if lib else "not built"
    cc = (_cmd(["cc", "--version"]).splitlines() or ["?"])[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "os": _os_name(),
        "compiler": cc,
        "versions": versions,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def _os_name():
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def machine_lines(info):
    v = info["versions"]
    return [
        "machine: %s, %s cores, %s RAM; %s, kernel %s; %s"
        % (info["cpu"], info["cores"], info["memory"], info["os"], info["kernel"],
           info["compiler"]),
        "versions: " + "; ".join("%s %s" % (k, v[k]) for k in ORDER if k in v),
    ]


def env_float(name, default):
    """A number from the environment, or default; exits on anything else."""
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        sys.exit("%s: %s must be a number" % (os.path.basename(sys.argv[0]), name))


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def round_ratios(ours, theirs):
    """Each round's ratio of two allocators' figures (lists by round, None for
    a failed run), the rounds where both ran."""
    return [x / y for x, y in zip(ours, theirs) if x is not None and y]


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and not math.isnan(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def fmt_num(x):
    """Human-friendly number: 12.3M, 456k, 7.89."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    a = abs(x)
    if a >= 1e9:
        return "%.2fG" % (x / 1e9)
    if a >= 1e6:
        return "%.2fM" % (x / 1e6)
    if a >= 1e4:
        return "%.1fk" % (x / 1e3)
    if a >= 100:
        return "%.0f" % x
    return "%.3g" % x


def md_row(cells):
    """One row of a Markdown table, from its cells (strings)."""
    return "| " + " | ".join(cells) + " |"


def md_table(head, rows, align=""):
    """The lines of a Markdown table: head and each of rows a list of cells;
    align a letter per column, r for right-aligned (the numbers) or l (the
    columns past its end too)."""
    rule = "|" + "".join("---:|" if c == "r" else "---|" for c in align.ljust(len(head), "l"))
    return [md_row(head), rule] + [md_row(r) for r in rows]


def which(prog):
    return shutil.which(prog)
