#!/usr/bin/env bash
# Shows that the fuzzer can fail: runs it (linked with glibc) under the
# planted-bug shim, once with no bug, where it must pass, and once per
# planted bug, where it must fail with a line naming its seed and that kind
# of fault. Prints "RESULT fuzz_plant <passed> <failed>". BUILD (default
# build/) is where test/fuzz_glibc and test/fuzz_shim.so are.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
FUZZ=$BUILD/test/fuzz_glibc
SHIM=$(cd "$BUILD/test" && pwd)/fuzz_shim.so
passed=0
failed=0

# plant  what the failure line must say
cases=(
  "flip|contents changed by realloc"
  "nozero|not zeroed"
  "misalign|misaligned for"
  "twice|handed out twice"
)

out=$(FUZZ_OPS=300000 LD_PRELOAD=$SHIM "$FUZZ" 2>&1)
if [ $? -eq 0 ] && grep -q "ops ok" <<<"$out"; then
  echo "PASS no plant"
  passed=$((passed + 1))
else
  echo "FAIL no plant: the fuzzer failed over plain glibc"
  tail -3 <<<"$out" | sed 's/^/    /'
  failed=$((failed + 1))
fi

for c in "${cases[@]}"; do
  plant=${c%%|*}
  expect=${c#*|}
  out=$(FUZZ_PLANT=$plant FUZZ_OPS=300000 LD_PRELOAD=$SHIM "$FUZZ" 2>&1)
  rc=$?
  line=$(grep -m1 "^fuzz: FAIL seed [0-9]" <<<"$out")
  if [ $rc -ne 0 ] && [ -n "$line" ] && grep -q "$expect" <<<"$line"; then
    echo "PASS $plant: $line"
    passed=$((passed + 1))
  else
    echo "FAIL $plant: expected a failure saying \"$expect\" (exit $rc)"
    tail -3 <<<"$out" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
echo "RESULT fuzz_plant $passed $failed"
[ $failed -eq 0 ]
