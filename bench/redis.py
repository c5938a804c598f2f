#!/usr/bin/env python3
"""Redis under each allocator: the memory a long-lived server keeps after
it deletes and refills, and gives back after FLUSHALL, and its speed.

Redis is built from its public sources at bench time (never kept in this
tree) with MALLOC=libc, so that it calls malloc and free and every
allocator can be preloaded: $REDIS_SRC, a clone of
https://github.com/redis/redis (a work tree or a bare repository), else a
shallow clone of tag REDIS_TAG (default 7.4.1) made into build/bench/redis/
on first use.

For each allocator, in interleaved rounds (BENCH_RUNS, default 3), a fresh
server (no persistence) is driven by redis-cli:
  fill     1M keys of 16 B..4 KiB values (one Lua script): RSS;
  refill   delete a pseudo-random half, add 250k keys of 1..8 KiB: RSS;
  flush    FLUSHALL, then RSS 2 s and 10 s later with no further request;
  speed    redis-benchmark SET and GET (200k requests, 50 clients, pipeline
           16, 256 B values, 100k random keys): requests per second.
REDIS_SCALE (default 1.0) scales the key counts. Writes
bench/results/latest-redis.md (medians)."""

import os
import subprocess
import sys
import time

import benchlib as bl

URL = "https://github.com/redis/redis"
TAG = os.environ.get("REDIS_TAG", "7.4.1")
DIR = os.path.join(bl.BUILD, "bench", "redis")
PORT = 6391


def _git(args, cwd=None):
    return subprocess.run(["git"] + args, cwd=cwd, capture_output=True)


def build():
    """Exports TAG from the source and builds it once; the src/ directory.
    A tree exported and built before is used as it is (no clone)."""
    tree = os.path.join(DIR, "redis-" + TAG)
    srcdir = os.path.join(tree, "src")
    if os.path.exists(os.path.join(srcdir, "redis-benchmark")):
        return srcdir
    src = os.environ.get("REDIS_SRC")
    if not src:
        src = os.path.join(DIR, "redis.git")
        if not os.path.isdir(src):
            os.makedirs(DIR, exist_ok=True)
            print("cloning %s %s (once) ..." % (URL, TAG), file=sys.stderr)
            r = _git(["clone", "--bare", "--depth", "1", "--branch", TAG, URL, src])
            if r.returncode:
                sys.exit("bench/redis.py: cannot clone %s: %s\nset REDIS_SRC to a clone of it"
                         % (URL, r.stderr.decode().strip()))
    if not os.path.isdir(tree):
        archive = _git(["archive", TAG], cwd=src)
        if archive.returncode:
            sys.exit("bench/redis.py: git archive %s failed: %s" % (TAG, archive.stderr.decode().strip()))
        os.makedirs(tree)
        subprocess.run(["tar", "x"], input=archive.stdout, cwd=tree, check=True)
    if not os.path.exists(os.path.join(srcdir, "redis-benchmark")):
        print("building redis %s with MALLOC=libc ..." % TAG, file=sys.stderr)
        r = subprocess.run(["make", "-j%d" % (os.cpu_count() or 2), "MALLOC=libc", "BUILD_TLS=no"],
                           cwd=tree, capture_output=True)
        if r.returncode:
            sys.exit("bench/redis.py: redis did not build:\n" + r.stderr.decode()[-2000:])
    return srcdir


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


def cli(srcdir, *args):
    return subprocess.run([os.path.join(srcdir, "redis-cli"), "-p", str(PORT)] + list(args),
                          capture_output=True, text=True, timeout=900).stdout.strip()


def one_run(srcdir, preload, env_extra, scale):
    """The figures of one server's life, or an error string."""
    env = dict(os.environ)
    env.update(e.split("=", 1) for e in env_extra)
    if preload:
        env["LD_PRELOAD"] = preload
    server = subprocess.Popen([os.path.join(srcdir, "redis-server"), "--port", str(PORT), "--save", "",
                               "--appendonly", "no"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if cli(srcdir, "PING") == "PONG":
                break
            time.sleep(0.05)
        else:
            return "the server did not answer"
        n, m = int(1000000 * scale), int(250000 * scale)
        cli(srcdir, "EVAL", "for i=1,%d do redis.call('SET','k'..i,string.rep('x',16+(i*7919)%%4081)) end "
            "return 1" % n, "0")
        fill = rss_mib(server.pid)
        cli(srcdir, "EVAL", "for i=1,%d do if (i*2654435761)%%1000 < 500 then redis.call('DEL','k'..i) end "
            "end return 1" % n, "0")
        cli(srcdir, "EVAL", "for i=1,%d do redis.call('SET','r'..i,string.rep('y',1024+(i*104729)%%7169)) "
            "end return 1" % m, "0")
        refill = rss_mib(server.pid)
        cli(srcdir, "FLUSHALL")
        t0 = time.time()
        time.sleep(2)
        flush2 = rss_mib(server.pid)
        time.sleep(max(0.0, 10 - (time.time() - t0)))
        flush10 = rss_mib(server.pid)
        out = subprocess.run([os.path.join(srcdir, "redis-benchmark"), "-p", str(PORT), "-q", "-t", "set,get",
                              "-n", str(int(200000 * max(scale, 0.05))), "-c", "50", "-P", "16", "-d", "256",
                              "-r", "100000"], capture_output=True, text=True, env=dict(os.environ),
                             timeout=900).stdout
        rps = {}
        for line in out.replace("\r", "\n").splitlines():
            if ": " in line and "requests per second" in line:
                name, rest = line.split(": ", 1)
                rps[name.strip().lower()] = float(rest.split()[0])
        return {"fill": fill, "refill": refill, "flush2": flush2, "flush10": flush10,
                "set": rps.get("set"), "get": rps.get("get")}
    finally:
        server.terminate()
        server.wait()


FIGURES = [("fill", "RSS after fill, MiB"), ("refill", "after delete + refill"),
           ("flush2", "2 s after FLUSHALL"), ("flush10", "10 s after FLUSHALL"),
           ("set", "SET req/s"), ("get", "GET req/s")]


def main():
    allocs, _, info = bl.announce()
    srcdir = build()
    scale = bl.env_float("REDIS_SCALE", 1.0)
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    results = {a: [] for a, _ in allocs}
    for r in range(runs):
        order = allocs if r % 2 == 0 else list(reversed(allocs))
        for name, lib in order:
            got = one_run(srcdir, lib, bl.alloc_env(name), scale)
            if isinstance(got, str):
                sys.exit("bench/redis.py: %s: %s" % (name, got))
            results[name].append(got)
            print("round %d %-10s %s" % (r + 1, name, "  ".join(
                "%s %s" % (k, bl.fmt_num(got[k])) for k, _ in FIGURES)), file=sys.stderr, flush=True)
    lines = ["# Redis %s (MALLOC=libc) under each allocator" % TAG, ""]
    lines += ["- " + l for l in bl.machine_lines(info)]
    lines += ["- %d interleaved rounds, medians; key counts x%g" % (runs, scale), ""]
    rows = []
    for name, _ in allocs:
        meds = [bl.median([x[k] for x in results[name] if x[k] is not None] or [0]) for k, _ in FIGURES]
        rows.append([name] + [bl.fmt_num(v) for v in meds])
    lines += bl.md_table(["allocator"] + [doc for _, doc in FIGURES], rows, "l" + "r" * len(FIGURES))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(bl.RESULTS, "latest-redis.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
