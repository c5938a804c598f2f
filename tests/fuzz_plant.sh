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

# plant  what its failure line must say (no plant: it must pass)
cases=(
  "|"
  "flip|contents changed by realloc"
  "nozero|not zeroed"
  "misalign|misaligned for"
  "twice|handed out twice"
)

for c in "${cases[@]}"; do
  plant=${c%%|*}
  expect=${c#*|}
  out=$(FUZZ_PLANT=$plant FUZZ_OPS=300000 LD_PRELOAD=$SHIM "$FUZZ" 2>&1)
  rc=$?
  line=$(grep -m1 "^fuzz: FAIL seed [0-9]" <<<"$out")
  if [ -z "$plant" ] && [ $rc -eq 0 ] && [ -z "$line" ]; then
    echo "PASS no plant: $(grep '^fuzz: .* ops ok' <<<"$out")"
  elif [ -n "$plant" ] && [ $rc -ne 0 ] && [ -n "$line" ] && grep -q "$expect" <<<"$line"; then
    echo "PASS $plant: $line"
  else
    echo "FAIL ${plant:-no plant}: expected ${plant:+a failure saying \"$expect\"}${plant:-a pass} (exit $rc)"
    tail -3 <<<"$out" | sed 's/^/    /'
    failed=$((failed + 1))
    continue
  fi
  passed=$((passed + 1))
done
echo "RESULT fuzz_plant $passed $failed"
[ $failed -eq 0 ]
