#!/usr/bin/env bash
# Runs the fuzzer (build/test/fuzz, tests/fuzz.c, or $FUZZ) against hakmem.
#
# usage: tests/fuzz.sh [PROFILE|all] [arena|noarena|all]
#
# Each configuration is one run of FUZZ_OPS operations (default 1e7) with
# HAKMEM_PROFILE=PROFILE, with the SuperSlab arena or without it (an
# address-space limit refuses its reservation, as in tests/run.sh). The seed
# is FUZZ_SEED, or a new one per run; every run prints it. A failing run
# prints its line and how to replay it. Exits 1 if any run failed.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
FUZZ=${FUZZ:-$BUILD/test/fuzz}   # build/test/secure_fuzz: the secure build
profiles=${1:-all}
arenas=${2:-all}
[ "$profiles" = all ] && profiles="fast balanced lean auto"
[ "$arenas" = all ] && arenas="arena noarena"
export FUZZ_OPS=${FUZZ_OPS:-1e7}
status=0
for p in $profiles; do
  for a in $arenas; do
    out=$( (
      [ "$a" = noarena ] && ulimit -v 8388608
      HAKMEM_PROFILE=$p exec "$FUZZ"
    ) 2>&1)
    rc=$?
    seed=$(sed -n 's/^fuzz: seed \([0-9]*\).*/\1/p' <<<"$out")
    if [ $rc -eq 0 ]; then
      echo "ok   fuzz $p $a: seed $seed, $(grep '^fuzz: .* ops ok' <<<"$out" | sed 's/^fuzz: //')"
      grep '^RESULT' <<<"$out"
    else
      echo "FAIL fuzz $p $a (exit $rc): replay with FUZZ_SEED=$seed tests/fuzz.sh $p $a"
      grep -v '^fuzz: seed' <<<"$out" | tail -5 | sed 's/^/    /'
      echo "RESULT fuzz 0 1"
      status=1
    fi
  done
done
exit $status
