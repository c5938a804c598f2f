#!/usr/bin/env bash
# Correctness run of the benchmark programs: each one once, with tiny
# parameters, under LD_PRELOAD=libhakmem.so; it must exit 0 and print its
# result line. (The programs check their own data and exit 3 on corruption.)
# Prints PASS/FAIL bench:<name> per program, then "RESULT bench <passed>
# <failed>". BUILD (default build/) is where libhakmem.so and bench/ are.
# Whole script: a few seconds. Does not build: run `make` first.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LIB="$(cd "$BUILD" 2>/dev/null && pwd)/libhakmem.so"
BIN="$BUILD/bench"
passed=0
failed=0

# tiny parameters for every program (keep in step with bench/*.c, *.cc)
args_for() {
  case $1 in
    random_mixed) echo "200000 400 1" ;;
    tiny_hot) echo "200000 32 16" ;;
    larson) echo "2 200 5000 4 16 1024" ;;
    xthread) echo "2 2 50000 16 512 64" ;;
    cache_thrash) echo "2 100 100 8" ;;
    cache_scratch) echo "2 100 100 8" ;;
    realloc_grow) echo "500 4096 64 8" ;;
    fragment) echo "20000 16 4096 90" ;;
    thread_churn) echo "20 3 200 16 2048" ;;
    cxx_churn) echo "20000 500 2" ;;
    memory) echo "footprint 20" ;;
    soak) echo "2 2 100" ;;
    phased) echo "20" ;;
    malloc_large) echo "40 6 1 3" ;;
    glibc_simple) echo "20000 16" ;;
    *) return 1 ;;
  esac
}
# extra cases beyond the defaults: random_mixed's size-range variants
extra_cases=(
  "random_mixed_tiny random_mixed 100000 400 1 16 128"
  "random_mixed_mid random_mixed 50000 400 1 1024 32768"
  "random_mixed_large random_mixed 2000 400 1 65536 4194304"
  "memory_idle memory idle 20"
  "memory_cross memory cross 20"
  "memory_threads memory threads 20"
  "memory_mid memory mid 20"
)

if [ ! -f "$LIB" ]; then
  echo "FAIL bench: $BUILD/libhakmem.so not found (run make)"
  echo "RESULT bench 0 1"
  exit 1
fi

out=$(mktemp "${TMPDIR:-/tmp}/hakmem-bench-smoke.XXXXXX")
trap 'rm -f "$out"' EXIT

run_case() { # name program args...
  local name=$1 prog=$2 rc
  shift 2
  if [ ! -x "$BIN/$prog" ]; then
    echo "FAIL bench:$name: $BIN/$prog not built"
    failed=$((failed + 1))
    return
  fi
  LD_PRELOAD="$LIB" timeout 20 "$BIN/$prog" "$@" >"$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^$prog: .* = [0-9.]* [^ ]*\$" "$out"; then
    echo "PASS bench:$name"
    passed=$((passed + 1))
  else
    echo "FAIL bench:$name (exit $rc): LD_PRELOAD=$LIB $BIN/$prog $*"
    sed 's/^/    /' "$out" | tail -5
    failed=$((failed + 1))
  fi
}

# every program in bench/ (so a new one without smoke parameters fails here)
for src in bench/*.c bench/*.cc; do
  [ -e "$src" ] || continue
  name=$(basename "${src%.*}")
  if a=$(args_for "$name"); then
    # shellcheck disable=SC2086
    run_case "$name" "$name" $a
  else
    echo "FAIL bench:$name: no smoke parameters in bench/smoke.sh"
    failed=$((failed + 1))
  fi
done
for c in "${extra_cases[@]}"; do
  # shellcheck disable=SC2086
  run_case $c
done

# the soak's samples name where hakmem's memory is: ten fields a line, the
# slabs in use never empty while its workers hold blocks
csv="$out.csv"
if LD_PRELOAD="$LIB" timeout 20 "$BIN/soak" 2 2 100 "$csv" >"$out" 2>&1 &&
  awk -F, 'NR == 1 { ok = $5 == "slab_kib" && NF == 10; next }
           NF != 10 || $5 <= 0 || $4 < 0 { ok = 0 } END { exit !(ok && NR > 10) }' "$csv"; then
  echo "PASS bench:soak_samples"
  passed=$((passed + 1))
else
  echo "FAIL bench:soak_samples: LD_PRELOAD=$LIB $BIN/soak 2 2 100 $csv"
  head -3 "$csv" 2>/dev/null | sed 's/^/    /'
  failed=$((failed + 1))
fi
rm -f "$csv"

echo "RESULT bench $passed $failed"
[ $failed -eq 0 ]
