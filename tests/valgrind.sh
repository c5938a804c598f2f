#!/usr/bin/env bash
# memcheck sees hakmem's blocks as it sees glibc's (src/track.h).
#
# tests/checker_target.c is built three times: with the Valgrind-aware
# hakmem (build/valgrind), with glibc's malloc, and with the default hakmem.
# Under valgrind --leak-check=full each planted bug (a leak, a use after
# free, a one-byte overflow, a branch on uninitialised bytes) must be
# reported with hakmem exactly as with glibc (the same error, the same
# block size, the same count) and from hakmem's own frames; the clean run
# (threads, every size, realloc across tiers) must show no error and no
# leak. The default build must miss the use after free and the leak (so the
# annotations are what finds them). tests/test_drain.c runs under memcheck
# with the Valgrind-aware build. Two real programs are run preloaded
# with build/valgrind/libhakmem.so and compared with glibc the same way.
# Prints PASS/FAIL/SKIP lines and "RESULT valgrind <passed> <failed>".
set -u
cd "$(dirname "$0")/.."
T=build/test
LIB=$PWD/build/valgrind/libhakmem.so
NAME=valgrind
. tests/checks.sh

if ! command -v valgrind >/dev/null || [ ! -x $T/checker_valgrind ]; then
  echo "SKIP valgrind (valgrind or its headers not installed)"
  echo "RESULT valgrind 0 0"
  exit 0
fi

OUT=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-valgrind.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
# nouserintercepts: memcheck leaves a malloc that is not libc's in place
# (by default it would put its own in place of hakmem's).
VG=(valgrind --leak-check=full --soname-synonyms=somalloc=nouserintercepts)

# The lines that say what memcheck found, without addresses and pids.
findings() {
  grep -E 'Invalid (read|write) of size|bytes (inside|after|before) a block|are definitely lost|depends on uninitialised|ERROR SUMMARY|All heap blocks were freed|definitely lost:' "$1" |
    sed -E 's/^==[0-9]+== +//; s/Address 0x[0-9a-f]+ //; s/ in loss record [0-9]+ of [0-9]+//'
}

for mode in leak uaf overflow uninit clean; do
  "${VG[@]}" $T/checker_valgrind "$mode" >"$OUT/hak.$mode" 2>&1
  "${VG[@]}" $T/checker_glibc "$mode" >"$OUT/glibc.$mode" 2>&1
  h=$(findings "$OUT/hak.$mode")
  g=$(findings "$OUT/glibc.$mode")
  if [ -n "$g" ] && [ "$h" = "$g" ]; then
    pass "$mode reported as under glibc"
  else
    fail "$mode reported as under glibc" "hakmem:" "$h" "glibc:" "$g"
  fi
done

for mode in leak uaf overflow; do
  if grep -q 'hak_malloc_entry' "$OUT/hak.$mode"; then
    pass "$mode: the block is hakmem's"
  else
    fail "$mode: the block is hakmem's (memcheck put its own malloc in place?)" "$(cat "$OUT/hak.$mode")"
  fi
done
if grep -q 'ERROR SUMMARY: 0 errors' "$OUT/hak.clean" && grep -q 'All heap blocks were freed' "$OUT/hak.clean"; then
  pass "clean run: no error, every block freed"
else
  fail "clean run: no error, every block freed" "$(cat "$OUT/hak.clean")"
fi

for mode in leak uaf; do
  "${VG[@]}" $T/checker_plain "$mode" >"$OUT/plain.$mode" 2>&1
  if grep -qE 'definitely lost|Invalid read' "$OUT/plain.$mode"; then
    fail "the default build misses the $mode (the annotations find it)" "$(cat "$OUT/plain.$mode")"
  else
    pass "the default build misses the $mode (the annotations find it)"
  fi
done

# The default build says once, under memcheck, which build memcheck sees
# (this one links hakmem statically: the Valgrind-aware libhakmem.a).
said=$(grep -c '^hakmem: warning: memcheck sees no block of this build of hakmem; link the program with the Valgrind-aware libhakmem.a' "$OUT/plain.leak")
if [ "$said" = 1 ] && [ "$(grep -c '^hakmem:' "$OUT/plain.leak")" = 1 ]; then
  pass "the default build names the build memcheck sees, once"
else
  fail "the default build names the build memcheck sees, once" "$(cat "$OUT/plain.leak")"
fi

# Drains (src/heap/drain.c) under memcheck: a trimmer takes the caches of
# threads that are in their fast paths; no error, no block lost, and drains
# happen (Valgrind's kernel call passes membarrier on).
STRESS_SCALE=2 "${VG[@]}" $T/valgrind_test_drain >"$OUT/drain" 2>&1
if grep -q 'ERROR SUMMARY: 0 errors' "$OUT/drain" && grep -qE '^RESULT drain [0-9]+ 0$' "$OUT/drain"; then
  pass "drains under memcheck: no error"
else
  fail "drains under memcheck: no error" "$(tail -20 "$OUT/drain")"
fi

# Real programs, preloaded: the same findings as under glibc (sort leaks 16
# bytes of its own). PROOF is what shows that hakmem ran: its frames in the
# leak's stack, or its report at exit.
run_real() {
  local name=$1 proof=$2
  shift 2
  LD_PRELOAD=$LIB HAKMEM_STATS=1 "${VG[@]}" "$@" >"$OUT/hak.$name" 2>&1 </dev/null
  "${VG[@]}" "$@" >"$OUT/glibc.$name" 2>&1 </dev/null
  local h g
  h=$(findings "$OUT/hak.$name")
  g=$(findings "$OUT/glibc.$name")
  if [ -n "$g" ] && [ "$h" = "$g" ] && grep -qE "$proof" "$OUT/hak.$name"; then
    pass "preloaded $name reported as under glibc"
  else
    fail "preloaded $name reported as under glibc" "hakmem:" "$h" "glibc:" "$g"
  fi
}
run_real sort '(at|by) 0x[0-9A-F]+: hak_' sort /etc/services
run_real git 'hakmem statistics' git --version

# The Valgrind-aware build's arena is 128 MiB: memcheck warns of no range
# over 256 MiB ("set address range perms: large range").
if grep -q 'set address range perms' "$OUT"/hak.*; then
  fail "no large-range warning with the Valgrind-aware build" "$(grep -h 'set address range perms' "$OUT"/hak.*)"
else
  pass "no large-range warning with the Valgrind-aware build"
fi

result
