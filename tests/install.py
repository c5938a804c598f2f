#!/usr/bin/env python3
"""Install test: `make install` into a fresh prefix, the files it puts there,
the `hakmem` command, `make uninstall`, a DESTDIR staging, and every example
of README.md's "Install" section run as it stands in a fresh $HOME (C with
pkg-config, C++ with CMake, the Rust crate), then the Rust crates' own
`cargo test` and `cargo package`, offline with an empty CARGO_HOME, and
the Debian packages of `make deb` installed with apt-get and purged.

README examples: a fenced block right after a line ending in "`NAME`:" is
written to the file NAME; a ```sh block is run with bash -e; every bold
paragraph ("**C, with pkg-config.**") starts a new directory. The text
/path/to/hakmem stands for this clone.

Prints PASS/FAIL/SKIP lines, then "RESULT install <passed> <failed>".
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("PASS install:%s" % name)
    else:
        failed += 1
        print("FAIL install:%s" % name)
        for line in str(detail).strip().splitlines()[-25:]:
            print("    " + line)


def run(cmd, cwd=None, env=None, timeout=600):
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, shell=isinstance(cmd, str),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          executable="/bin/bash" if isinstance(cmd, str) else None)


def version():
    h = open(os.path.join(ROOT, "include", "hakmem.h")).read()
    return ".".join(re.search(r"#define HAKMEM_VERSION_%s\s+(\d+)" % k, h).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))


# make install puts the Valgrind-aware build in lib/hakmem/valgrind where
# valgrind's headers are.
VALGRIND = os.path.exists("/usr/include/valgrind/memcheck.h")


def make(*args, env=None):
    return run(["make", "-s", "-C", ROOT] + list(args), env=env)


def installed_files(prefix, ver, secure=False):
    major = ver.split(".")[0]
    libs = ["libhakmem"] + (["libhakmem-secure"] if secure else []) + (["hakmem/valgrind/libhakmem"] if VALGRIND else [])
    return [f % (lib, v) for lib in libs for f, v in (("lib/%s.so.%s", ver), ("lib/%s.so.%s", major), ("lib/%s.%s", "so"),
                                                      ("lib/%s.%s", "a"))] + \
        ["include/hakmem.h", "bin/hakmem", "lib/pkgconfig/hakmem.pc", "share/man/man1/hakmem.1",
         "share/man/man7/hakmem-options.7",
         "lib/cmake/hakmem/hakmemConfig.cmake", "lib/cmake/hakmem/hakmemConfigVersion.cmake",
         "share/doc/hakmem/README.md", "share/doc/hakmem/options.md", "share/doc/hakmem/secure.md",
         "share/doc/hakmem/profiling.md"]


def test_layout(tmp, ver):
    prefix = os.path.join(tmp, "prefix")
    r = make("install", "PREFIX=" + prefix, "SECURE=1")
    check("make install SECURE=1", r.returncode == 0, r.stdout)
    if r.returncode:
        return
    missing = [f for f in installed_files(prefix, ver, True) if not os.path.exists(os.path.join(prefix, f))]
    check("installed files", not missing, "missing: %s" % missing)
    major = ver.split(".")[0]
    lib = os.path.join(prefix, "lib")
    check("soname symlinks",
          os.readlink(os.path.join(lib, "libhakmem.so")) == "libhakmem.so.%s" % major and
          os.readlink(os.path.join(lib, "libhakmem.so.%s" % major)) == "libhakmem.so.%s" % ver)
    r = run(["readelf", "-d", os.path.join(lib, "libhakmem.so.%s" % ver)])
    check("soname", "Library soname: [libhakmem.so.%s]" % major in r.stdout, r.stdout)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"))
    if shutil.which("pkg-config"):
        r = run("pkg-config --modversion hakmem && pkg-config --cflags --libs hakmem", env=env)
        check("pkg-config", r.returncode == 0 and r.stdout.split() ==
              [ver, "-I" + os.path.join(prefix, "include"), "-L" + lib, "-lhakmem"], r.stdout)
    else:
        print("SKIP install:pkg-config (pkg-config not installed)")
    hakmem = os.path.join(prefix, "bin", "hakmem")
    r = run([hakmem, "--version"])
    check("installed command finds its library",
          r.stdout.splitlines() == ["hakmem " + ver, "library: " + os.path.join(lib, "libhakmem.so.%s" % ver)],
          r.stdout)
    test_command(hakmem, tmp)
    flags = set(re.findall(r"^  (-[-\w]+)", run([hakmem, "--help"]).stdout, re.M))
    page = open(os.path.join(prefix, "share", "man", "man1", "hakmem.1")).read().replace("\\-", "-")
    check("hakmem(1) describes every option of hakmem --help (%d)" % len(flags),
          len(flags) >= 10 and all(re.search(r"^\.BI? %s\b" % re.escape(f), page, re.M) for f in flags),
          sorted(f for f in flags if not re.search(r"^\.BI? %s\b" % re.escape(f), page, re.M)))
    r = run([hakmem, "--secure", "--version"])
    check("installed command --secure finds the secure library",
          r.stdout.splitlines()[1:] == ["library: " + os.path.join(lib, "libhakmem-secure.so.%s" % ver)], r.stdout)
    r = run([hakmem, "--secure", "--banner", "true"])
    check("command --secure runs the program on the secure build",
          r.returncode == 0 and "hakmem secure build:" in r.stdout, r.stdout)

    test_valgrind(hakmem, lib)

    r = make("uninstall", "PREFIX=" + prefix)
    left = [os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs]
    check("make uninstall removes every file", r.returncode == 0 and not left, r.stdout + "left: %s" % left)

    test_lib64(tmp, ver)

    stage = os.path.join(tmp, "stage")
    r = make("install", "PREFIX=/opt/hakmem", "DESTDIR=" + stage)
    pc = os.path.join(stage, "opt/hakmem/lib/pkgconfig/hakmem.pc")
    ok = r.returncode == 0 and os.path.exists(pc)
    check("DESTDIR stages under DESTDIR, paths without it",
          ok and "prefix=/opt/hakmem\n" in open(pc).read() and
          all(os.path.lexists(os.path.join(stage, "opt/hakmem", f)) for f in installed_files("", ver)) and
          stage not in open(os.path.join(stage, "opt/hakmem/lib/cmake/hakmem/hakmemConfig.cmake")).read(),
          r.stdout)


def test_valgrind(hakmem, lib):
    """The installed default build, preloaded under memcheck, says once which
    build memcheck sees; --valgrind preloads that one, which memcheck sees
    (sort leaks 16 bytes of its own, as under glibc) without warning of the
    arena's reservation."""
    if not VALGRIND or not shutil.which("valgrind"):
        print("SKIP install:the Valgrind-aware build (valgrind or its headers not installed)")
        return
    vg = os.path.join(lib, "hakmem", "valgrind", "libhakmem.so.0")
    r = run([hakmem, "--valgrind", "--version"])
    check("command --valgrind finds the Valgrind-aware library",
          r.stdout.splitlines()[1:] == ["library: " + os.path.realpath(vg)], r.stdout)
    r = run([hakmem, "valgrind", "-q", "sort", "/etc/services"])
    said = [l for l in r.stdout.splitlines() if l.startswith("hakmem:")]
    check("the default build under memcheck names the build to preload, once",
          said == ["hakmem: warning: memcheck sees no block of this build of hakmem; preload %s and run valgrind "
                   "with --soname-synonyms=somalloc=nouserintercepts (docs/checkers.md)" % vg], r.stdout[-2000:])
    r = run([hakmem, "--valgrind", "valgrind", "--soname-synonyms=somalloc=nouserintercepts", "--leak-check=full",
             "sort", "/etc/services"])
    check("memcheck sees the --valgrind build's blocks, and no warning",
          "definitely lost: 16 bytes in 1 blocks" in r.stdout and "hakmem:" not in r.stdout and
          "Warning:" not in r.stdout, "\n".join(l for l in r.stdout.splitlines() if not l.startswith("/") and
                                                 not re.match(r"^[a-z0-9-]+\s+\d+/", l))[-3000:])


def test_lib64(tmp, ver):
    """make install LIBDIR=$P/lib64: the command finds its library there, in
    place and after the prefix moved; without it, it says which library it
    looked for and where, with its own status (125)."""
    prefix = os.path.join(tmp, "p64")
    lib64 = os.path.join(prefix, "lib64")
    r = make("install", "PREFIX=" + prefix, "LIBDIR=" + lib64)
    check("make install LIBDIR=lib64", r.returncode == 0 and os.path.exists(os.path.join(lib64, "libhakmem.so." + ver)),
          r.stdout)
    hakmem = os.path.join(prefix, "bin", "hakmem")
    r = run([hakmem, "--version"])
    check("lib64: the command finds its library", r.stdout.splitlines()[1:] ==
          ["library: " + os.path.join(lib64, "libhakmem.so." + ver)], r.stdout)
    r = run([hakmem, "sh", "-c", "echo $LD_PRELOAD"])
    check("lib64: the command runs a program on it", r.returncode == 0 and lib64 in r.stdout, r.stdout)
    moved = os.path.join(tmp, "moved")
    shutil.move(prefix, moved)
    r = run([os.path.join(moved, "bin", "hakmem"), "--version"])
    check("lib64: a moved prefix still finds its ../lib64", r.stdout.splitlines()[1:] ==
          ["library: " + os.path.join(moved, "lib64", "libhakmem.so." + ver)], r.stdout)
    for f in os.listdir(os.path.join(moved, "lib64")):
        if f.startswith("libhakmem.so"):
            os.remove(os.path.join(moved, "lib64", f))
    r = run([os.path.join(moved, "bin", "hakmem"), "true"])
    major = ver.split(".")[0]
    check("lib64: no library is status 125, naming it and where it was looked for",
          r.returncode == 125 and r.stdout.startswith("hakmem: cannot find libhakmem.so.%s (looked in " % major) and
          lib64 in r.stdout and os.path.join(moved, "bin", "../lib64") in r.stdout, r.stdout)
    r = run([os.path.join(moved, "bin", "hakmem"), "--version"])
    check("lib64: --version says the library is not found, and where it looked",
          r.returncode == 0 and r.stdout.splitlines()[1].startswith("library: not found: libhakmem.so.%s (looked in" % major),
          r.stdout)
    shutil.rmtree(moved, ignore_errors=True)


def test_command(hakmem, tmp):
    """The wrapper: flags, exit status, statistics, LD_PRELOAD."""
    r = run([hakmem, "--", "sh", "-c", "exit 3"])
    check("command passes the exit status", r.returncode == 3, r.stdout)
    r = run([hakmem, "sh", "-c", "kill -TERM $$"])
    check("command passes a signal", r.returncode == -15, "status %d" % r.returncode)
    for bad in (["--bogus", "true"], ["--profile", "turbo", "true"], ["--profile"], [], ["-o"]):
        r = run([hakmem] + bad)
        lines = r.stdout.splitlines()
        check("command refuses %s" % (" ".join(bad) or "no program"),
              r.returncode == 2 and len(lines) == 2 and lines[0].startswith("hakmem: ") and
              lines[1].startswith("usage: hakmem"), r.stdout)
    r = run([hakmem, "no-such-program-here"])
    check("command: a missing program is status 127",
          r.returncode == 127 and r.stdout.startswith("hakmem: cannot run no-such-program-here"), r.stdout)
    r = run([hakmem, "--help"])
    check("command --help", r.returncode == 0 and "--profile P" in r.stdout and "--options" in r.stdout, r.stdout)

    names = re.findall(r"^\| `HAKMEM_([A-Z_]+)`", open(os.path.join(ROOT, "docs/options.md")).read(), re.M)
    r = run([hakmem, "--options"])
    shown = re.findall(r"^HAKMEM_([A-Z_]+)=", r.stdout, re.M)
    check("command --options lists every option of docs/options.md", names and shown == names,
          "docs: %s\nshown: %s" % (names, shown))
    check("command --options shows the defaults per profile",
          "default: fast 1000, balanced 100, lean 20, auto 100" in r.stdout, r.stdout)

    stats = os.path.join(tmp, "stats.json")
    env = dict(os.environ, LD_PRELOAD="libc.so.6")
    r = run([hakmem, "--profile", "lean", "--stats=json", "-o", stats, "--", "python3", "-c",
             'import os; print(os.environ["LD_PRELOAD"]); print(os.environ["HAKMEM_PROFILE"])'], env=env)
    out = r.stdout.splitlines()
    check("command preloads the library before LD_PRELOAD's",
          r.returncode == 0 and len(out) == 2 and re.match(r"/.*/libhakmem\.so\.[0-9.]+:libc\.so\.6$", out[0]) and
          out[1] == "lean", r.stdout)
    try:
        st = json.load(open(stats))
        ok = st["profile"] == "lean" and st["version"] == version()
    except (OSError, ValueError, KeyError) as e:
        ok, st = False, e
    check("command --stats=json -o FILE writes the program's statistics", ok, st)
    prof = os.path.join(tmp, "prof")
    os.makedirs(prof)
    r = run([hakmem, "--prof", "64K", "python3", "-c", "import os; x = [str(i) for i in range(10**5)]; print(os.getpid())"],
            cwd=prof)
    heap = os.path.join(prof, "hakmem.%s.0.heap" % r.stdout.strip())
    check("command --prof writes a heap profile at exit",
          r.returncode == 0 and os.path.exists(heap) and open(heap).readline().endswith("@ heap_v2/65536\n"),
          r.stdout + " ".join(os.listdir(prof)))
    r = run([hakmem, "--prof", "lots", "true"])
    check("command refuses --prof lots", r.returncode == 2 and r.stdout.startswith("hakmem: --prof"), r.stdout)
    runs = os.path.join(tmp, "runs")
    os.makedirs(runs)
    r = run([hakmem, "-o", "run.txt", "sh", "-c", "cd / && python3 -c 'print(7)' && /bin/true"], cwd=runs)
    heads = re.findall(r"^hakmem statistics \(profile auto\), process (\d+) \(([^)]*)\), explained in docs/statistics\.md$",
                       open(os.path.join(runs, "run.txt")).read() if os.path.exists(os.path.join(runs, "run.txt")) else "",
                       re.M)
    names = [n for _, n in heads]
    check("command -o rel.txt: every process's report, named, in the directory of the run",
          r.returncode == 0 and r.stdout == "7\n" and "python3" in names and "true" in names and
          os.listdir(runs) == ["run.txt"], r.stdout + str(heads))
    r = run([hakmem, "-o", "run.txt", "/bin/true"], cwd=runs)
    heads = re.findall(r"^hakmem statistics ", open(os.path.join(runs, "run.txt")).read(), re.M)
    check("command -o: a run starts the file anew", r.returncode == 0 and len(heads) == 1, r.stdout + str(heads))
    r = run([hakmem, "--banner", "sh", "-c", "sh -c /bin/true; /bin/true"])
    check("command --banner: one banner for a program that starts others",
          r.returncode == 0 and len(re.findall(r"^hakmem \d+\.\d+\.\d+: profile", r.stdout, re.M)) == 1, r.stdout)
    r = run([hakmem, "sh", "-c", "sh -c /bin/true; /bin/true"], env=dict(os.environ, HAKMEM_PROFILE="turbo"))
    check("command: a refused option warns once",
          r.returncode == 0 and r.stdout.count("hakmem: warning:") == 1 and "HAKMEM_PROFILE=turbo" in r.stdout, r.stdout)
    r = run([hakmem, "sh", "-c", "echo $HAKMEM_OPTIONS; sh -c /bin/true"],
            env=dict(os.environ, HAKMEM_OPTIONS="profile=lean,nope=1,purge_delay_ms=30"))
    check("command: a refused entry of HAKMEM_OPTIONS warns once, the others stay",
          r.returncode == 0 and r.stdout.count("hakmem: warning:") == 1 and "nope in HAKMEM_OPTIONS" in r.stdout and
          "profile=lean,purge_delay_ms=30\n" in r.stdout, r.stdout)
    r = run([hakmem, "--stats", "--banner", "python3", "-c", "print(sum(len(str(i)) for i in range(10**5)))"])
    check("command --stats --banner on python3",
          r.returncode == 0 and "488890" in r.stdout and "hakmem 0.1" in r.stdout and
          "hakmem statistics (profile auto)" in r.stdout, r.stdout)


def readme_examples():
    """[(title, [(kind, name_or_None, text)])] of README's Install section."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = re.search(r"^## Install\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    examples = [("install", [])]
    last_line = ""
    lines = section.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\*\*(.+?)\*\*", line)
        if m:
            examples.append((m.group(1).rstrip("."), []))
        fence = re.match(r"```(\w*)$", line)
        if fence:
            end = lines.index("```", i + 1)
            body = "\n".join(lines[i + 1:end]).replace("/path/to/hakmem", ROOT) + "\n"
            named = re.search(r"`([\w./-]+)`:$", last_line)
            examples[-1][1].append((fence.group(1), named.group(1) if named else None, body))
            i = end + 1
            last_line = ""
            continue
        if line.strip():
            last_line = line.strip()
        i += 1
    return [e for e in examples if e[1]]


# What each example must print, beyond exiting with 0.
EXPECT = {
    "install": r"",
    "Any program, unchanged": r"^100000$",
    "C, with pkg-config": r"^hello from hakmem \(\d+ usable bytes\)$",
    "C++, with CMake": r"^1000 words, \d+ usable bytes in a string$",
    "Rust": r"^100000 entries; hakmem statistics \(profile auto\), process \d+ \(app\), explained in docs/statistics\.md$",
}
NEEDS = {"C, with pkg-config": "pkg-config", "C++, with CMake": "cmake", "Rust": "cargo"}


def test_readme(tmp):
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = dict(os.environ, HOME=home, CARGO_TARGET_DIR=os.path.join(tmp, "cargo-target"))
    # rustup and cargo find their toolchains through HOME unless told.
    env.setdefault("RUSTUP_HOME", os.path.join(os.path.expanduser("~"), ".rustup"))
    env.setdefault("CARGO_HOME", os.path.join(os.path.expanduser("~"), ".cargo"))
    examples = readme_examples()
    check("README Install section has its examples", [t for t, _ in examples] == list(EXPECT),
          [t for t, _ in examples])
    for n, (title, blocks) in enumerate(examples):
        if title in NEEDS and not shutil.which(NEEDS[title]):
            print("SKIP install:README %s (%s not installed)" % (title, NEEDS[title]))
            continue
        work = os.path.join(tmp, "example%d" % n)
        os.makedirs(work)
        output, ok = "", True
        for kind, name, body in blocks:
            if name:
                path = os.path.join(work, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").write(body)
            elif kind == "sh":
                r = run(["bash", "-e", "-c", body], cwd=work, env=env)
                output += r.stdout
                if r.returncode:
                    ok = False
                    break
        want = EXPECT.get(title, "")
        check("README %s" % title, ok and re.search(want, output, re.M), output)


STATIC_CMAKE = """cmake_minimum_required(VERSION 3.13)
project(static_app C)
find_package(hakmem 0.1 REQUIRED)
add_executable(static_app app.c)
target_link_libraries(static_app PRIVATE hakmem::hakmem-static)
"""
STATIC_APP = r"""#include <hakmem.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  void *p = malloc(100);
  /* hakmem's malloc_usable_size answers for hakmem's blocks only */
  printf("%d\n", p && malloc_usable_size(p) == hak_usable_size(p));
  free(p);
  return 0;
}
"""


def test_cmake_static(tmp):
    """hakmem::hakmem-static: the program carries hakmem and its malloc is hakmem's."""
    prefix = os.path.join(tmp, "home", ".local")
    if not shutil.which("cmake") or not os.path.exists(os.path.join(prefix, "lib", "libhakmem.a")):
        print("SKIP install:CMake hakmem::hakmem-static (cmake or the README install missing)")
        return
    work = os.path.join(tmp, "static")
    os.makedirs(work)
    open(os.path.join(work, "CMakeLists.txt"), "w").write(STATIC_CMAKE)
    open(os.path.join(work, "app.c"), "w").write(STATIC_APP)
    r = run("cmake -S . -B build -DCMAKE_PREFIX_PATH=%s >/dev/null && cmake --build build >/dev/null && "
            "readelf -d build/static_app | grep -c libhakmem || true; HAKMEM_STATS=1 ./build/static_app" % prefix,
            cwd=work)
    check("CMake hakmem::hakmem-static links hakmem into the program",
          r.returncode == 0 and r.stdout.splitlines()[0] == "0" and "1" in r.stdout.splitlines() and
          "hakmem statistics" in r.stdout, r.stdout)


def cargo_passed(r):
    """Tests a cargo test run passed; -1 if it or any of its tests failed."""
    results = re.findall(r"test result: (\w+)\. (\d+) passed; (\d+) failed", r.stdout)
    if r.returncode or any(f != "0" for _, _, f in results):
        return -1
    return sum(int(p) for _, p, _ in results)


def test_cargo(tmp):
    """The library crates build, test and package offline with nothing but the
    toolchain: an empty CARGO_HOME, no crate cache, no network."""
    if not shutil.which("cargo"):
        print("SKIP install:cargo test (cargo not installed)")
        return
    crates = os.path.join(ROOT, "bindings", "rust")
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(BUILD, "rust"),
               CARGO_HOME=os.path.join(tmp, "cargo-home"), CARGO_NET_OFFLINE="true")
    env.setdefault("RUSTUP_HOME", os.path.join(os.path.expanduser("~"), ".rustup"))
    r = run(["cargo", "test", "--offline", "--quiet"], cwd=crates, env=env, timeout=900)
    count = cargo_passed(r)
    check("cargo test --offline in bindings/rust, empty CARGO_HOME (%d tests)" % count, count >= 6, r.stdout)

    # Package both crates, then build and test hakmem from the two .crate
    # files alone, hakmem-sys taken from its package as crates.io would
    # serve it (cargo's own verification cannot do this before 1.89: it
    # looks for hakmem-sys on crates.io).
    env["CARGO_TARGET_DIR"] = os.path.join(tmp, "cargo-package")
    r = run(["cargo", "package", "--offline", "--allow-dirty", "--no-verify", "-p", "hakmem-sys", "-p", "hakmem"],
            cwd=crates, env=env, timeout=900)
    packages = os.path.join(tmp, "cargo-packages")
    os.makedirs(packages)
    crate = {}
    for name in ("hakmem-sys", "hakmem"):
        found = glob.glob(os.path.join(env["CARGO_TARGET_DIR"], "package", name + "-[0-9]*.crate"))
        if found:
            run(["tar", "xzf", found[0], "-C", packages])
            crate[name] = os.path.join(packages, os.path.basename(found[0])[:-len(".crate")])
    check("cargo package --offline of hakmem-sys and hakmem", r.returncode == 0 and len(crate) == 2, r.stdout)
    if len(crate) < 2:
        return
    listing = [os.path.relpath(os.path.join(d, f), crate["hakmem-sys"])
               for d, _, files in os.walk(crate["hakmem-sys"]) for f in files]
    src = os.path.join(ROOT, "src")
    want = ["c/src/" + os.path.relpath(os.path.join(d, f), src) for d, _, files in os.walk(src)
            for f in files if f.endswith((".c", ".h"))]
    check("the hakmem-sys crate carries hakmem's C sources (%d files)" % len(listing),
          all(w in listing for w in want + ["c/include/hakmem.h"]), listing)
    patch = 'patch.crates-io.hakmem-sys.path="%s"' % crate["hakmem-sys"]
    r = run(["cargo", "test", "--offline", "--quiet", "--config", patch], cwd=crate["hakmem"], env=env, timeout=900)
    check("the packaged hakmem builds and passes its tests on the packaged hakmem-sys", cargo_passed(r) >= 2, r.stdout)


DEB_PACKAGES = ["libhakmem0", "libhakmem-dev", "hakmem"]


def test_deb(tmp, ver):
    """make deb, then the packages installed with apt-get into this machine:
    the command finds the library where Debian puts it, a program links
    through pkg-config, the man pages are there, and purging them leaves
    none of their files."""
    tools = ["apt-get", "dpkg-buildpackage", "dh", "pkg-config"]
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools):
        print("SKIP install:Debian packages (needs root and %s)" % ", ".join(tools))
        return
    if any(run(["dpkg-query", "-W", "-f", "${Status}", p]).stdout.startswith("install ok") for p in DEB_PACKAGES):
        print("SKIP install:Debian packages (hakmem's packages are installed on this machine already)")
        return
    r = make("deb")
    debs = [glob.glob(os.path.join(BUILD, "deb", "%s_%s_*.deb" % (p, ver))) for p in DEB_PACKAGES]
    check("make deb builds %s" % ", ".join(DEB_PACKAGES), r.returncode == 0 and all(debs), r.stdout[-3000:])
    if r.returncode or not all(debs):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = run(["apt-get", "install", "-y", "--no-install-recommends"] + [d[0] for d in debs], env=env, timeout=900)
    check("apt-get install of the three packages", r.returncode == 0, r.stdout[-3000:])
    files = []
    try:
        if r.returncode:
            return
        for p in DEB_PACKAGES:
            files += [f for f in run(["dpkg", "-L", p]).stdout.splitlines() if os.path.isfile(f)]
        multiarch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).stdout.strip()
        lib = "/usr/lib/%s" % multiarch
        r = run(["/usr/bin/hakmem", "--version"])
        check("deb: hakmem --version names the packaged library",
              r.stdout.splitlines() == ["hakmem " + ver, "library: %s/libhakmem.so.%s" % (lib, ver)], r.stdout)
        r = run("/usr/bin/hakmem sh -c 'echo $LD_PRELOAD' && /usr/bin/hakmem --stats /bin/true")
        check("deb: hakmem runs a program on it",
              r.returncode == 0 and "%s/libhakmem.so.%s" % (lib, ver) in r.stdout and "hakmem statistics" in r.stdout,
              r.stdout)
        r = run(["/usr/bin/hakmem", "--valgrind", "--version"])
        check("deb: the Valgrind-aware build is packaged",
              r.stdout.splitlines()[1:] == ["library: %s/hakmem/valgrind/libhakmem.so.%s" % (lib, ver)], r.stdout)
        work = os.path.join(tmp, "deb-app")
        os.makedirs(work)
        open(os.path.join(work, "app.c"), "w").write(STATIC_APP)
        r = run("cc app.c $(pkg-config --cflags --libs hakmem) -o app && ./app && ldd ./app", cwd=work)
        check("deb: a program linked through pkg-config runs on the packaged library",
              r.returncode == 0 and r.stdout.startswith("1\n") and "/lib/%s/libhakmem.so.0 " % multiarch in r.stdout, r.stdout)
        mans = ["/usr/share/man/man1/hakmem.1.gz", "/usr/share/man/man7/hakmem-options.7.gz"]
        r = run("zcat %s | grep -c '^\\.TP'" % mans[1])
        check("deb: the man pages hakmem(1) and hakmem-options(7), every option in it",
              all(os.path.exists(m) for m in mans) and r.stdout.strip() == str(len(options_listed())), r.stdout)
    finally:
        r = run(["apt-get", "purge", "-y"] + DEB_PACKAGES, env=env, timeout=900)
        left = [f for f in files if os.path.exists(f)]
        installed = [p for p in DEB_PACKAGES
                     if run(["dpkg-query", "-W", "-f", "${Status}", p]).stdout.startswith("install ok")]
        check("deb: apt-get purge removes the packages and their %d files" % len(files),
              r.returncode == 0 and files and not left and not installed, r.stdout[-2000:] + " left: %s" % left)


def options_listed():
    """The options the command lists (hakmem --options)."""
    out = run([os.path.join(BUILD, "hakmem"), "--options"]).stdout
    return [l for l in out.splitlines() if l.startswith("HAKMEM_")]


def main():
    # Run as a user would: not as part of the make that runs the suite (its
    # jobserver flags make the make that cmake starts talk).
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        os.environ.pop(k, None)
    ver = version()
    tmp = tempfile.mkdtemp(prefix="hakmem-install.")
    try:
        test_layout(tmp, ver)
        test_readme(tmp)
        test_cmake_static(tmp)
        test_cargo(tmp)
        test_deb(tmp, ver)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT install %d %d" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
