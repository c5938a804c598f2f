#!/usr/bin/env bash
# bench/ab.sh REV_A REV_B [WORKLOAD...]
#
# Builds hakmem at two git revisions and compares them on the same benchmark
# programs (those of the current tree, build/bench/). Each revision is
# checked out with `git worktree` into build/ab/<short sha> and built there
# with `make build/libhakmem.so`. A revision may also be "." for the working
# tree as it is now, uncommitted changes included (build/libhakmem.so).
#
# WORKLOAD is one quoted command line, e.g. "random_mixed 20000000 400 1";
# default: "random_mixed 20000000 400 1" "tiny_hot 40000000 32 16".
# AB_RUNS (default 10) runs of each, interleaved; AB_THRESHOLD (percent,
# default 2) for the verdict; see bench/ab.py. REV_A = REV_B is valid: it
# measures the noise.
#
#   bench/ab.sh HEAD~1 HEAD
#   bench/ab.sh main . "larson 2 1000 250000 20"
#   make ab                       # HEAD~1 vs HEAD
#   make ab REV_A=v0.1 REV_B=HEAD
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n '2,20s/^# \{0,1\}//p' "$0"
  exit 2
fi
rev_a=$1
rev_b=$2
shift 2
if [ $# -eq 0 ]; then
  set -- "random_mixed 20000000 400 1" "tiny_hot 40000000 32 16"
fi
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# build REV: prints "<library path>\t<description>"
build() {
  local rev=$1 sha short dir
  if [ "$rev" = "." ]; then
    make -s -j"$JOBS" build/libhakmem.so >&2
    printf '%s\t%s\n' "$PWD/build/libhakmem.so" "working tree ($(git describe --always --dirty))"
    return
  fi
  if ! sha=$(git rev-parse --verify --quiet "$rev^{commit}"); then
    echo "ab: '$rev' is not a commit in this repository" >&2
    if [ "$rev" = "HEAD~1" ]; then
      echo "ab: (HEAD has no parent: try 'bench/ab.sh HEAD HEAD' for an A/A noise check," \
        "or 'bench/ab.sh HEAD .' for your uncommitted changes)" >&2
    fi
    exit 2
  fi
  short=$(git rev-parse --short=12 "$sha")
  dir=build/ab/$short
  git worktree prune
  if [ ! -e "$dir/.git" ]; then
    rm -rf "$dir"
    mkdir -p build/ab
    git worktree add --detach "$dir" "$sha" >&2
  fi
  git -C "$dir" checkout --quiet --detach "$sha"
  echo "ab: building $rev ($short) in $dir" >&2
  if ! make -s -C "$dir" -j"$JOBS" build/libhakmem.so >&2; then
    echo "ab: build of $rev failed" >&2
    exit 1
  fi
  printf '%s\t%s\n' "$PWD/$dir/build/libhakmem.so" "$rev = $(git -C "$dir" describe --always)"
}

make -s -j"$JOBS" bench-programs >&2
IFS=$'\t' read -r lib_a desc_a < <(build "$rev_a")
IFS=$'\t' read -r lib_b desc_b < <(build "$rev_b")
[ -f "$lib_a" ] && [ -f "$lib_b" ] || { echo "ab: build failed" >&2; exit 1; }
AB_DESC_A=$desc_a AB_DESC_B=$desc_b exec python3 bench/ab.py "$rev_a" "$lib_a" "$rev_b" "$lib_b" "$@"
