#!/usr/bin/env bash
# AddressSanitizer sees hakmem's freed blocks and block ends (src/track.h,
# src/base/track.c): tests/checker_target.c, instrumented and linked with the
# AddressSanitizer-aware hakmem (build/asan-aware), must
#   - report a read of a block that sits freed in hakmem's cache, and a
#     write one byte past a 24-byte block, at the program's line, where
#     the same program on ASan's own allocator reports them too;
#   - run the whole malloc family on three threads without a report;
#   - free, realloc and measure the blocks that the sanitizer's interceptors
#     (strdup, strndup) allocate from its own heap, next to hakmem's;
#   - run on hakmem (its report at exit).
# Prints PASS/FAIL lines and "RESULT asan <passed> <failed>".
set -u
cd "$(dirname "$0")/.."
T=build/test
NAME=asan
. tests/checks.sh
export ASAN_OPTIONS=detect_leaks=0

# expect NAME BIN MODE PATTERN...: the run of MODE fails and its report
# has every PATTERN.
expect() {
  local name=$1 bin=$2 mode=$3 out ok=1
  shift 3
  out=$($T/$bin "$mode" 2>&1) && ok=0
  for pat in "$@"; do
    grep -qE "$pat" <<<"$out" || ok=0
  done
  if [ "$ok" = 1 ]; then
    pass "$name"
  else
    fail "$name" "$out"
  fi
}

# hakmem's blocks are poisoned by hakmem: the sanitizer calls that
# use-after-poison; its own heap says what the error is.
at_line='in main tests/checker_target.c:[0-9]+'
expect "use after free reported" checker_asan uaf 'AddressSanitizer: use-after-poison' 'READ of size 1' "$at_line"
expect "use after free, ASan's allocator" checker_asan_glibc uaf 'AddressSanitizer: heap-use-after-free' 'READ of size 1' "$at_line"
expect "overflow reported" checker_asan overflow 'AddressSanitizer: use-after-poison' 'WRITE of size 1' "$at_line"
expect "overflow, ASan's allocator" checker_asan_glibc overflow 'AddressSanitizer: heap-buffer-overflow' 'WRITE of size 1' "$at_line"

for mode in clean foreign; do
  out=$(HAKMEM_STATS=1 $T/checker_asan "$mode" 2>&1)
  if [ $? -eq 0 ] && grep -q '^done$' <<<"$out" && ! grep -q AddressSanitizer <<<"$out" &&
    grep -q 'hakmem statistics' <<<"$out"; then
    pass "$mode run on hakmem without a report"
  else
    fail "$mode run on hakmem without a report" "$out"
  fi
done

result
