# Sourced by the shell tests: NAME=<test> before sourcing; pass NAME, fail
# NAME LINES... (printed indented), and result, which prints
# "RESULT <test> <passed> <failed>" and returns non-zero on a failure.
passed=0
failed=0
pass() {
  echo "PASS $NAME:$1"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $NAME:$1"
  shift
  printf '%s\n' "$@" | head -n 40 | sed 's/^/    /'
  failed=$((failed + 1))
}
result() {
  echo "RESULT $NAME $passed $failed"
  [ "$failed" -eq 0 ]
}
