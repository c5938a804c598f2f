#!/usr/bin/env python3
"""make bench-placement: glibc-simple's time at 16 bytes as its program's
inner loop moves, under every allocator.

mimalloc-bench's glibc-simple writes each 16-byte block byte by byte in
a loop of 16 iterations between malloc calls. Its time at that size is
bimodal under every allocator, and which allocators get the fast mode
follows the address of that loop in the program, not their own code
(docs/design/classic-programs.md, "glibc-simple: the gap follows where
the program's loop sits"). This builds the program's first test at eight
placements (bench/classic.py's glibc_simple_placements) and runs each
under every allocator, interleaved, BENCH_RUNS rounds (default 3); the
table gives the fastest run of each, in seconds, and the address of the
loop in each build and in the suite's own glibc-simple.

Environment: BENCH_ALLOCATORS and the peers as for bench-classic,
BENCH_RUNS, MIMALLOC_BENCH_SRC (bench/classic.py).
Writes bench/results/placement.md.

Usage: python3 bench/placement.py
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import classic  # noqa: E402

JNE = re.compile(r"^\s*([0-9a-f]+):\s+jne\s+([0-9a-f]+)\s")
CALL = re.compile(r"^\s*([0-9a-f]+):\s+call\s+[0-9a-f]+ <malloc@plt>")


def loop_address(exe):
    """The address of the loop that writes each block: the target of the
    first backward jne after do_benchmark's first call to malloc."""
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", exe], capture_output=True, text=True).stdout
    body = dump.split("<do_benchmark>:", 1)[-1].split("\n\n", 1)[0]
    call = None
    for line in body.splitlines():
        m = CALL.match(line)
        if m and call is None:
            call = int(m.group(1), 16)
        m = JNE.match(line)
        if m and call is not None and call < int(m.group(2), 16) < int(m.group(1), 16):
            return int(m.group(2), 16)
    return None


def main():
    allocs, _, info = bl.announce(source_peers=True)
    runs = int(bl.env_float("BENCH_RUNS", 3))
    if runs < 1:
        sys.exit("placement.py: BENCH_RUNS must be >= 1")
    builds = classic.glibc_simple_placements()
    best = {}
    for r in range(runs):
        for pad, exe in builds:
            for a, lib in allocs:
                res = bl.run_once([exe], lib, env=bl.alloc_env(a), result=False)
                if not res["ok"]:
                    sys.exit("placement.py: %s under %s: %s" % (os.path.basename(exe), a, bl.short_error(res)))
                key = (a, pad)
                best[key] = min(best.get(key, res["wall_s"]), res["wall_s"])
            print("round %d/%d: pad %d done" % (r + 1, runs, pad), file=sys.stderr)

    suite = os.path.join(os.path.dirname(builds[0][1]), "..", "bin", "glibc-simple")
    at = loop_address(suite) if os.path.exists(suite) else None
    head = ["allocator"] + ["0x%x" % (loop_address(exe) or 0) for _, exe in builds] + ["sum"]
    rows = [[a] + ["%.3f" % best[(a, pad)] for pad, _ in builds] + ["%.3f" % sum(best[(a, pad)] for pad, _ in builds)]
            for a, _ in allocs]
    lines = bl.machine_lines(info) + [
        "",
        "glibc-simple's first test (16-byte blocks), its loop at eight addresses (padding 0..56 bytes):",
        "fastest of %d interleaved runs, seconds. The suite's own glibc-simple has its loop at %s." %
        (runs, "0x%x" % at if at else "(not built: make bench-classic)"),
        "",
    ] + bl.md_table(head, rows, "l" + "r" * (len(head) - 1))
    print("\n".join(lines))
    os.makedirs(bl.RESULTS, exist_ok=True)
    with open(os.path.join(bl.RESULTS, "placement.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
