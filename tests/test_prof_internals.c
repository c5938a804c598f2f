/* The parts heap profiling stands on (tests/test_prof.c tests it whole):
 * the switch of the entry points to their counted builds (counted.c) and
 * the cached call-stack walk (stack.c). */
#include <execinfo.h>
#include <signal.h>
#include <sys/wait.h>

#include "internals.h"

/* The counted builds (counted.c): switching makes every entry point's
 * uncounted build lead, by its jumps, to exactly its counted build, and
 * leaves them working; a second switch changes nothing. In a child: the
 * rest of the test runs the uncounted builds. */
extern hak_twin_t __start_hak_twins[], __stop_hak_twins[];

#if defined(__x86_64__)
/* Where the jumps at p lead (jmp rel32, jmp rel8), at most 2 of them,
 * stopping at `to`. */
static const uint8_t *jumps_end(const uint8_t *p, const void *to) {
  for (int i = 0; i < 2 && p != to; i++) {
    if (p[0] == 0xe9) {
      int32_t rel;
      memcpy(&rel, p + 1, sizeof rel);
      p += 5 + rel;
    } else if (p[0] == 0xeb) {
      p += 2 + (int8_t)p[1];
    } else {
      break;
    }
  }
  return p;
}

static void test_counted_switch(void) {
  int twins = 0, before = 0;
  for (hak_twin_t *t = __start_hak_twins; t < __stop_hak_twins; t++) {
    if (!t->uncounted) continue;
    twins++;
    before += jumps_end((const uint8_t *)t->uncounted, (const void *)t->counted) == (const uint8_t *)t->counted;
  }
  CHECK(twins >= 5, "%d entry points with two builds", twins);
  CHECK(before == 0, "%d entry points lead to their counted build before the switch", before);
  pid_t pid = fork();
  if (pid == 0) {
    int bad = !hak_counted_switch();
    for (int round = 0; round < 2; round++) {
      for (hak_twin_t *t = __start_hak_twins; t < __stop_hak_twins; t++)
        if (t->uncounted && jumps_end((const uint8_t *)t->uncounted, (const void *)t->counted) != (const uint8_t *)t->counted) bad |= 2;
      bad |= !hak_counted_switch() << 2;
    }
    char *p = malloc(100), *q = calloc(10, 10);
    if (!p || !q || q[99] != 0) bad |= 8;
    memset(p, 1, 100);
    p = realloc(p, 5000);
    if (!p || p[99] != 1) bad |= 16;
    free(p);
    free(q);
    _exit(bad);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "switched builds: status %d (1 refused, 2 a jump leads elsewhere, 4 a second switch refused, 8/16 malloc/realloc)",
        status);
}
#endif

/* ---- call stacks (stack.c): the cached walk gives what glibc's backtrace
 * (the DWARF unwinder) gives, after the first frame (the two are called
 * from different lines of compare_stacks; hakmem's own frames are cut),
 * in plain calls, in functions whose frame size
 * changes (alloca), and in a signal handler on the thread's stack and on
 * a signal stack; each stack is taken three times, so the later ones come
 * from the cache. Off a signal frame (which the fast walk leaves to the
 * DWARF unwinder), the third is told to be the second again, from the
 * memo of the last walk. */
static int stack_mismatches, stack_checks, stack_repeats, stack_repeats_told;
static volatile bool in_signal;

static __attribute__((noinline)) void compare_stacks(void) {
  static hak_stack_memo_t memo;
  void *theirs[HAK_STACK_MAX];
  for (int round = 0; round < 3; round++) {
    bool repeat = hak_stack_capture(&memo);    /* from compare_stacks on */
    int m = backtrace(theirs, HAK_STACK_MAX);  /* from compare_stacks on */
    void **ours = memo.ip + memo.first;
    uint32_t n = memo.depth;
    stack_checks++;
    bool same = m >= 2 && (int)n == m;
    for (int i = 1; same && i < m; i++) same = ours[i] == theirs[i];
    stack_mismatches += !same;
    if (round == 2 && !in_signal) {
      stack_repeats++;
      stack_repeats_told += repeat;
    }
  }
}

static __attribute__((noinline)) void with_alloca(size_t n) {
  volatile char *buf = __builtin_alloca(n);
  buf[0] = 1;
  compare_stacks();
  buf[n - 1] = 2;
}

static __attribute__((noinline)) void nested(int depth) {
  if (depth) nested(depth - 1);
  else compare_stacks();
  escape(&depth);
}

static void on_signal(int sig) {
  in_signal = true;
  nested(3);
  in_signal = false;
}

static void test_stacks(void) {
  hak_stack_init();
  nested(5);
  nested(12);
  for (size_t n = 16; n <= 65536; n *= 4) with_alloca(n);
  signal(SIGUSR1, on_signal);
  raise(SIGUSR1);
  static char alt[65536];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
  sigaltstack(&ss, NULL);
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_ONSTACK};
  sigaction(SIGUSR1, &sa, NULL);
  raise(SIGUSR1);
  signal(SIGUSR1, SIG_DFL);
  CHECK(stack_mismatches == 0, "%d of %d stacks differ from backtrace's", stack_mismatches, stack_checks);
  CHECK(stack_repeats == 9 && stack_repeats_told == stack_repeats, "%d of %d repeated stacks told as repeats",
        stack_repeats_told, stack_repeats);
}

static const test_case_t cases[] = {
#if defined(__x86_64__)
    {"counted_switch", test_counted_switch},
#endif
    {"stacks", test_stacks},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("prof_internals", cases, argc, argv); }
