/* Minimal test harness shared by the test programs.
 *
 * CHECK(cond, fmt, ...) counts a pass or prints a failure with its location.
 * test_done() prints "RESULT <passed> <failed>" (parsed by tests/run.sh) and
 * returns the process exit status. RUN_CASES() is the main() of a program
 * made of named cases, any of which runs on its own ("test_api realloc").
 *
 * The T_* names call the standard malloc family, or the hak_* API when built
 * with -DTEST_VIA_HAK (the ASan/TSan builds, where the override is off).
 *
 * Also here: stress_scaled() for the default sizes of the stress tests,
 * rss_bytes() for the resident set and vm_bytes() for the address space
 * mapped, thread_faults() for the calling thread's page faults, the random
 * number generators (splitmix64, xorshift64) and the word pattern
 * (pattern_fill, pattern_ok) the tests fill and check blocks with. */
#ifndef HAK_TEST_CHECK_H
#define HAK_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include "hakmem.h"

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (cond) {                                                             \
      check_passed++;                                                       \
    } else {                                                                \
      check_failed++;                                                       \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
    }                                                                       \
  } while (0)

static inline int test_done(const char *name) {
  printf("RESULT %s %d %d\n", name, check_passed, check_failed);
  fflush(stdout);
  return check_failed ? 1 : 0;
}

/* A test program's cases, so that one can run on its own: with no
 * arguments every case runs; with arguments, the cases whose name contains
 * one of them; "--list" prints the names. An argument that no name contains
 * prints the names and fails, so that a mistyped case is not a pass. */
typedef struct {
  const char *name;
  void (*run)(void);
} test_case_t;

static int case_argc;
static char **case_argv;

/* 1 if the case of this name is to run. */
static inline int case_chosen(const char *name) {
  if (case_argc < 2) return 1;
  for (int i = 1; i < case_argc; i++)
    if (strstr(name, case_argv[i])) return 1;
  return 0;
}

static inline const char *case_name(const void *table, size_t size, size_t k) {
  return *(const char *const *)((const char *)table + k * size);
}

/* Takes the program's arguments as case names, for a table of n cases of
 * size bytes each whose first member is the name (a test_case_t, or a
 * program's own case type). Returns -1 if the chosen cases are to run,
 * else the exit status: 0 after --list, 2 after an argument that names no
 * case. */
static inline int cases_from_args(int argc, char **argv, const void *table, size_t n, size_t size) {
  case_argc = argc;
  case_argv = argv;
  int list = argc == 2 && strcmp(argv[1], "--list") == 0, unknown = 0;
  for (int i = 1; i < argc && !list; i++) {
    size_t k = 0;
    while (k < n && !strstr(case_name(table, size, k), argv[i])) k++;
    if (k == n) {
      fprintf(stderr, "%s: no case name contains \"%s\"\n", argv[0], argv[i]);
      unknown = 1;
    }
  }
  if (!list && !unknown) return -1;
  if (unknown) fprintf(stderr, "the cases are:\n");
  for (size_t k = 0; k < n; k++) fprintf(list ? stdout : stderr, "%s\n", case_name(table, size, k));
  return unknown ? 2 : 0;
}

/* main() of a program made of cases: runs the chosen ones and prints the
 * RESULT line. */
static inline int run_cases(const char *name, const test_case_t *cases, size_t n, int argc, char **argv) {
  int status = cases_from_args(argc, argv, cases, n, sizeof *cases);
  if (status >= 0) return status;
  for (size_t k = 0; k < n; k++)
    if (case_chosen(cases[k].name)) cases[k].run();
  return test_done(name);
}
#define RUN_CASES(name, cases, argc, argv) run_cases(name, cases, sizeof(cases) / sizeof((cases)[0]), argc, argv)

/* n scaled by the STRESS_SCALE environment variable, in percent (default
 * 100; 0 or less counts as 1); tests/run.sh sets 10 for the ASan/TSan runs. */
static inline long stress_scaled(long n) {
  const char *scale = getenv("STRESS_SCALE");
  long pct = scale ? atol(scale) : 100;
  return n * (pct > 0 ? pct : 1) / 100;
}

/* A seed from a small number (a thread or wave index). */
static inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15u;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
  return x ^ (x >> 31);
}

/* The next number of a xorshift64 sequence; *s must not be 0. */
static inline uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Word k of a block's pattern (bytes 8k..8k+7, cut at the block's end),
 * derived from the block's header word head. */
static inline uint64_t pattern_word(uint64_t head, size_t k) {
  return head ^ (k * 0x9E3779B97F4A7C15u);
}

/* Writes words k0.. of the pattern (k0 = 1 leaves the header word alone).
 * Whole words are copied with a constant size, so that no call is made per
 * word. */
static inline void pattern_fill(unsigned char *p, size_t size, uint64_t head,
                                size_t k0) {
  size_t k = k0;
  for (; 8 * k + 8 <= size; k++) {
    uint64_t w = pattern_word(head, k);
    memcpy(p + 8 * k, &w, 8);
  }
  if (8 * k < size) {
    uint64_t w = pattern_word(head, k);
    memcpy(p + 8 * k, &w, size - 8 * k);
  }
}

/* 1 if words k0.. of the pattern are intact. */
static inline int pattern_ok(const unsigned char *p, size_t size,
                             uint64_t head, size_t k0) {
  uint64_t diff = 0;
  size_t k = k0;
  for (; 8 * k + 8 <= size; k++) {
    uint64_t v;
    memcpy(&v, p + 8 * k, 8);
    diff |= v ^ pattern_word(head, k);
  }
  if (8 * k < size) {
    uint64_t w = pattern_word(head, k);
    if (memcmp(p + 8 * k, &w, size - 8 * k) != 0) return 0;
  }
  return diff == 0;
}

/* Re-execute this test program as "<prog> --child" with exactly the given
 * environment (NULL-ended), capturing its stdout and stderr (NUL-ended).
 * Returns the wait status. For options, which a process reads only once. */
#include <sys/wait.h>
#include <unistd.h>

static void check_slurp(int fd, char *buf, size_t n) {
  size_t len = 0;
  ssize_t r;
  while (len + 1 < n && (r = read(fd, buf + len, n - 1 - len)) > 0) len += (size_t)r;
  buf[len] = 0;
  close(fd);
}

static inline int run_self(const char *const *env, char *out, size_t out_size, char *err, size_t err_size) {
  int po[2], pe[2];
  if (pipe(po) || pipe(pe)) abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    char arg0[] = "child", arg1[] = "--child";   /* not literals: C++ (test_cxx) has them const */
    char *argv[] = {arg0, arg1, NULL};
    execve("/proc/self/exe", argv, (char *const *)env);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  check_slurp(pe[0], err, err_size);   /* children here write little to stdout */
  check_slurp(po[0], out, out_size);
  int status;
  waitpid(pid, &status, 0);
  return status;
}

/* 1 if the kernel offers the fence that drains need (membarrier's private
 * expedited command, src/heap/drain.c); without it caches are not drained, and
 * the tests check what happens then. */
#include <linux/membarrier.h>
#include <sys/syscall.h>
static inline int drains_possible(void) {
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

/* The resident set of this process in bytes, -1 if /proc cannot tell. */
/* Field 0 (the address space mapped) or 1 (the resident set) of
 * /proc/self/statm, in bytes; -1 if it cannot be read. */
static inline long statm_bytes(int field) {
  long v[2] = {-1, -1};
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &v[0], &v[1]) != 2) v[field] = -1;
  fclose(f);
  return v[field] < 0 ? -1 : v[field] * sysconf(_SC_PAGESIZE);
}

static inline long rss_bytes(void) { return statm_bytes(1); }
static inline long vm_bytes(void) { return statm_bytes(0); }

/* The calling thread's minor page faults so far. */
#include <sys/resource.h>
static inline long thread_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

#ifdef TEST_VIA_HAK
#define T_malloc hak_malloc
#define T_free hak_free
#define T_calloc hak_calloc
#define T_realloc hak_realloc
#define T_reallocarray hak_reallocarray
#define T_aligned_alloc hak_aligned_alloc
#define T_posix_memalign hak_posix_memalign
#define T_memalign hak_memalign
#define T_valloc hak_valloc
#define T_pvalloc hak_pvalloc
#define T_usable_size hak_usable_size
#define T_free_sized hak_free_sized
#define T_free_aligned_sized hak_free_aligned_sized
#define T_trim() hak_trim()
#else
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
#define T_malloc malloc
#define T_free free
#define T_calloc calloc
#define T_realloc realloc
#define T_reallocarray reallocarray
#define T_aligned_alloc aligned_alloc
#define T_posix_memalign posix_memalign
#define T_memalign memalign
#define T_valloc valloc
#define T_pvalloc pvalloc
#define T_usable_size malloc_usable_size
#define T_free_sized free_sized
#define T_free_aligned_sized free_aligned_sized
#define T_trim() malloc_trim(0)
#endif

#ifdef HAK_INTERNAL_H
/* Blocks on their slabs' free lists (tests of internals, which include
 * internal.h first): n blocks of size bytes allocated after *keep (kept
 * live, so that its slab stays), freed, and the caches trimmed back to the
 * slabs; the ones in keep's SuperSlab are moved to the front of p, and
 * their number returned. */
static inline int freed_to_slab_lists(void **keep, void **p, int n, size_t size) {
  *keep = T_malloc(size);
  for (int i = 0; i < n; i++) p[i] = T_malloc(size);
  for (int i = 0; i < n; i++) T_free(p[i]);
  T_trim();
  uintptr_t ss = (uintptr_t)*keep & ~(uintptr_t)HAK_SS_MASK;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (((uintptr_t)p[i] & ~(uintptr_t)HAK_SS_MASK) == ss) p[k++] = p[i];
  return k;
}
#endif

#endif
