/* What the tests of hakmem's internals share (test_classes, test_superslab,
 * test_remote, test_cache, test_large, test_purge, test_heaps,
 * test_prof_internals). They include src/internal.h and are linked against
 * the static library with the override on, so that malloc is hakmem's. */
#ifndef HAK_TEST_INTERNALS_H
#define HAK_TEST_INTERNALS_H

#include <pthread.h>

#include "check.h"
#include "internal.h"

/* Keep the compiler from dropping stores to, or the whole of, an allocation. */
static inline void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static inline long rss_kib(void) { return rss_bytes() / 1024; }

/* fn in a thread of its own, with no purge in between, nor the background
 * purger started meanwhile: its start allocates in fn's heap (the new
 * thread's TLS, 288 B), a class new to that heap that then takes the unit
 * fn watches (a case run alone, in a program whose purger had not started
 * yet, failed on it). */
static inline void run_unpurged(void *(*fn)(void *)) {
  long delay = hak_option_get(hak_option_purge_delay_ms);
  long purger = hak_option_get(hak_option_background_purge);
  hak_option_set(hak_option_purge_delay_ms, 60000);
  hak_option_set(hak_option_background_purge, 0);
  pthread_t t;
  pthread_create(&t, NULL, fn, NULL);
  pthread_join(t, NULL);
  hak_option_set(hak_option_background_purge, purger);
  hak_option_set(hak_option_purge_delay_ms, delay);
}

static inline bool purger_running(void) { return atomic_load(&hak_purger_state) == PURGER_RUNNING; }

/* RUN_CASES, once hakmem is set up: its first call computes the size
 * classes, which the cases read directly. */
static inline int run_internal_cases(const char *name, const test_case_t *cases, size_t n, int argc, char **argv) {
  void *first = malloc(1);
  escape(first);
  free(first);
  return run_cases(name, cases, n, argc, argv);
}
#define RUN_INTERNAL_CASES(name, cases, argc, argv) \
  run_internal_cases(name, cases, sizeof(cases) / sizeof((cases)[0]), argc, argv)

#endif
