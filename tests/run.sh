#!/usr/bin/env bash
# Test runner behind `make test`.
#
# Runs every test binary in build/test/ (release, then dyn_, ubsan_, asan_,
# tsan_, stat2_ and secure_ variants), the tests of internals (Makefile,
# INTERNAL_TESTS), test_api and test_stress again without the SuperSlab arena
# (noarena_), test_heaps without the background purger (nopurger_), the
# fuzzer (tests/fuzz.sh) under each profile with and without the arena, on
# the secure build and with heap profiling on, and its planted-bug check (tests/fuzz_plant.sh), the smoke test,
# a correctness run of the benchmarks (bench/smoke.sh), memcheck on the
# Valgrind-aware build against glibc (tests/valgrind.sh), AddressSanitizer on
# the ASan-aware build (tests/asan.sh), and the install test
# (tests/install.py: make install, the hakmem command, README's examples,
# the Rust crates' cargo test). Sums the "RESULT <name> <passed> <failed>" lines; a program
# that crashes, times out or prints no RESULT line counts as one failure.
# Logs go to build/test/logs/<name>.log. The last line is
# "N passed, M failed"; the exit status is 1 if anything failed.
set -u
cd "$(dirname "$0")/.."
BUILD=build
TESTS=$BUILD/test
: "${INTERNAL_TESTS:?is set by make test (the Makefile lists the tests of internals)}"
LOGS=$TESTS/logs
mkdir -p "$LOGS"
export TSAN_OPTIONS=halt_on_error=1
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

VARIANTS=("" dyn_ ubsan_ asan_ tsan_ stat2_ secure_)
ORDER=(test_api test_invalid test_stress test_churn test_fork)
total_passed=0
total_failed=0
programs=0

# Prints the FAIL lines of a log, with the indented lines that follow them.
show_failures() {
  awk '/^FAIL/ { on = 1; print; next } on && /^    / { print; next } { on = 0 }' "$1" |
    head -n 60 | sed 's/^/    /'
}

show_crash() {
  local name=$1 rc=$2 log=$3 why=""
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    why=" (timed out)"
  elif [ "$rc" -gt 128 ]; then
    why=" (signal $((rc - 128)))"
  fi
  echo "FAIL $name: exit $rc$why"
  tail -n 20 "$log" | sed 's/^/    /'
}

summary() {
  printf '%-4s %-24s %7d passed %4d failed  %4ds\n' "$@"
}

# record NAME RC LOG SECONDS: adds up the RESULT lines of a finished program.
record() {
  local name=$1 rc=$2 log=$3 secs=$4 n p f
  read -r n p f < <(awk '$1 == "RESULT" && NF == 4 { n++; p += $3; f += $4 }
                         END { print n + 0, p + 0, f + 0 }' "$log")
  local crashed=0
  if [ "$n" -eq 0 ] || { [ "$rc" -ne 0 ] && ! { [ "$rc" -eq 1 ] && [ "$f" -gt 0 ]; }; }; then
    crashed=1
    f=$((f + 1))
  fi
  summary "$([ "$f" -eq 0 ] && echo ok || echo FAIL)" "$name" "$p" "$f" "$secs"
  if [ "$crashed" -eq 1 ]; then
    show_crash "$name" "$rc" "$log"
  elif [ "$f" -gt 0 ]; then
    show_failures "$log"
  fi
  total_passed=$((total_passed + p))
  total_failed=$((total_failed + f))
  programs=$((programs + 1))
}

run_test() {
  local bin=$1 name scale=100 start rc
  name=$(basename "$bin")
  case $name in asan_* | tsan_*) scale=10 ;; esac
  start=$SECONDS
  { STRESS_SCALE=$scale timeout -k 10 300 "$bin" >"$LOGS/$name.log" 2>&1; rc=$?; } 2>/dev/null
  record "$name" "$rc" "$LOGS/$name.log" $((SECONDS - start))
}

for prefix in "${VARIANTS[@]}"; do
  listed=()
  for t in "${ORDER[@]}"; do
    bin=$TESTS/$prefix$t
    [ -f "$bin" ] && [ -x "$bin" ] && run_test "$bin"
    listed+=("$bin")
  done
  for bin in "$TESTS/${prefix}"test_*; do
    [ -f "$bin" ] && [ -x "$bin" ] || continue
    [[ " ${listed[*]} " == *" $bin "* ]] && continue
    run_test "$bin"
  done
done
# Without the arena: an address-space limit refuses its reservation, so
# SuperSlabs are mapped one by one and free finds them through the registry.
for t in $INTERNAL_TESTS test_api test_stress; do
  bin=$TESTS/$t
  [ -x "$bin" ] || continue
  start=$SECONDS
  { (ulimit -v 8388608 && TEST_NO_ARENA=1 STRESS_SCALE=100 exec timeout -k 10 300 "$bin") >"$LOGS/noarena_$t.log" 2>&1; rc=$?; } 2>/dev/null
  record "noarena_$t" "$rc" "$LOGS/noarena_$t.log" $((SECONDS - start))
done

# Without the background purger: what exited threads' heaps hold goes back
# on other threads' slow paths instead (the other tests of release count on
# the purger for sleeping threads' memory).
start=$SECONDS
{ HAKMEM_BACKGROUND_PURGE=0 timeout -k 10 300 "$TESTS/test_heaps" >"$LOGS/nopurger_test_heaps.log" 2>&1; rc=$?; } 2>/dev/null
record nopurger_test_heaps "$rc" "$LOGS/nopurger_test_heaps.log" $((SECONDS - start))

if [ "$programs" -eq 0 ]; then
  echo "FAIL no test binaries in $TESTS (run make first)"
  total_failed=$((total_failed + 1))
fi

# The fuzzer: 2M operations under each profile, with and without the arena
# (16M in all), each with a new seed that its log names; then proof that it
# fails on planted bugs.
# run_script NAME SECONDS COMMAND...: a test script, its log and its RESULT lines.
run_script() {
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  { timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1; rc=$?; } 2>/dev/null
  record "$name" "$rc" "$LOGS/$name.log" $((SECONDS - start))
}

for p in fast balanced lean auto; do
  for a in arena noarena; do
    FUZZ_OPS=2e6 run_script "fuzz_${p}_$a" 300 tests/fuzz.sh "$p" "$a"
  done
done
FUZZ=$TESTS/secure_fuzz FUZZ_OPS=2e6 run_script fuzz_secure 300 tests/fuzz.sh auto all
HAKMEM_PROF_SAMPLE=4096 HAKMEM_PROF_FILE=/dev/null FUZZ_OPS=2e6 run_script fuzz_prof 300 tests/fuzz.sh auto all
run_script fuzz_plant 300 tests/fuzz_plant.sh

run_script smoke 300 tests/smoke.sh
run_script bench 300 bench/smoke.sh
run_script valgrind 600 tests/valgrind.sh
run_script asan 300 tests/asan.sh
run_script install 1200 tests/install.py

echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
