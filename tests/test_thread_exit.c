/* Threads that allocate after hakmem's own thread-exit handling.
 *
 * usage: test_thread_exit [threads]
 *
 * glibc runs the destructors of pthread keys in up to
 * PTHREAD_DESTRUCTOR_ITERATIONS (4) rounds, keys in creation order, so a
 * program's key created after hakmem's has its destructor run after
 * hakmem's in each round. Here every thread's destructor frees its blocks,
 * allocates new ones, checks them and sets its key again, in each of the
 * rounds glibc runs; in the last it frees everything. The memory those late
 * allocations took must come back when the threads are gone: the resident
 * set after all threads (and a trim) stays within a bound of what it was
 * after the first ones, and the number of heaps stays near the number of
 * threads alive at once. Blocks the destructors free were allocated both
 * before and after hakmem's handling, by the thread itself; a block is
 * also handed to the next thread, which frees it in its destructor. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include "check.h"
#include "internal.h"

#define WAVE 4
#define BLOCKS 48
#define DEFAULT_THREADS 1000
#define RSS_SLACK ((long)32 << 20)

struct thread_state {
  unsigned char *blocks[BLOCKS];
  size_t sizes[BLOCKS];
  uint64_t seed;
  int rounds;
};

static pthread_key_t key;
static atomic_long corruptions, failures, last_rounds;
static _Atomic(unsigned char *) handed;   /* one block passed between threads */

static void allocate_all(struct thread_state *st) {
  uint64_t rng = st->seed | 1;
  for (int i = 0; i < BLOCKS; i++) {
    st->sizes[i] = 16 + xorshift64(&rng) % (i % 8 == 0 ? 40000 : 1000);
    st->blocks[i] = T_malloc(st->sizes[i]);
    if (!st->blocks[i]) {
      atomic_fetch_add(&failures, 1);
      continue;
    }
    pattern_fill(st->blocks[i], st->sizes[i], st->seed + (uint64_t)i, 0);
  }
}

static void free_all(struct thread_state *st) {
  for (int i = 0; i < BLOCKS; i++) {
    if (!st->blocks[i]) continue;
    if (!pattern_ok(st->blocks[i], st->sizes[i], st->seed + (uint64_t)i, 0)) atomic_fetch_add(&corruptions, 1);
    T_free(st->blocks[i]);
    st->blocks[i] = NULL;
  }
}

static void destructor(void *arg) {
  struct thread_state *st = arg;
  st->rounds++;
  free_all(st);
  T_free(atomic_exchange(&handed, T_malloc(100 + (size_t)st->rounds)));
  st->seed = splitmix64(st->seed);
  allocate_all(st);
  if (st->rounds < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(key, st);
    return;
  }
  atomic_store(&last_rounds, st->rounds);
  free_all(st);
  T_free(st);
}

static void *thread_main(void *arg) {
  struct thread_state *st = T_calloc(1, sizeof *st);
  if (!st) {
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  st->seed = splitmix64((uint64_t)(uintptr_t)arg);
  allocate_all(st);
  pthread_setspecific(key, st);
  return NULL;
}

static void run_threads(long from, long to) {
  for (long t = from; t < to; t += WAVE) {
    pthread_t th[WAVE];
    int n = 0;
    for (; n < WAVE && t + n < to; n++)
      if (pthread_create(&th[n], NULL, thread_main, (void *)(uintptr_t)(t + n)) != 0) break;
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  }
}

static long heap_count(void) {
  long n = 0;
  for (hak_heap_t *h = hak_heap_list(); h; h = h->next_heap) n++;
  return n;
}

int main(int argc, char **argv) {
  long threads = argc > 1 ? atol(argv[1]) : stress_scaled(DEFAULT_THREADS);
  if (threads < 8 * WAVE) threads = 8 * WAVE;
  if (pthread_key_create(&key, destructor) != 0) return 2;
  run_threads(0, 4 * WAVE);
  T_trim();
  long rss_first = rss_bytes();
  run_threads(4 * WAVE, threads);
  T_free(atomic_exchange(&handed, NULL));
  T_trim();
  long rss_last = rss_bytes();
  long heaps = heap_count();
  CHECK(atomic_load(&last_rounds) == PTHREAD_DESTRUCTOR_ITERATIONS, "destructors ran %ld rounds, expected %d",
        atomic_load(&last_rounds), PTHREAD_DESTRUCTOR_ITERATIONS);
  CHECK(atomic_load(&corruptions) == 0, "%ld blocks lost their contents", atomic_load(&corruptions));
  CHECK(atomic_load(&failures) == 0, "%ld allocations failed", atomic_load(&failures));
  CHECK(heaps <= 4 * WAVE, "%ld heaps for %d threads alive at once", heaps, WAVE);
  CHECK(rss_last - rss_first < RSS_SLACK, "resident set grew by %ld KiB over %ld threads", (rss_last - rss_first) >> 10,
        threads);
  printf("thread exit: %ld threads, %ld heaps, rss %ld -> %ld KiB\n", threads, heaps, rss_first >> 10, rss_last >> 10);
  return test_done("thread_exit");
}
