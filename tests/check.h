/* Minimal test harness shared by the test programs.
 *
 * CHECK(cond, fmt, ...) counts a pass or prints a failure with its location.
 * test_done() prints "RESULT <passed> <failed>" (parsed by tests/run.sh) and
 * returns the process exit status.
 *
 * The T_* names call the standard malloc family, or the hak_* API when built
 * with -DTEST_VIA_HAK (the ASan/TSan builds, where the override is off). */
#ifndef HAK_TEST_CHECK_H
#define HAK_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
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

#endif
