/* The heaps of threads that exit: their SuperSlabs serve the other threads
 * once the blocks left are freed, their free memory is purged, and a new
 * thread adopts the abandoned heap. */
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internals.h"

/* The SuperSlabs of a thread that exited serve the others once the blocks
 * it left are freed: a thread allocates 15 MiB of 48 KiB blocks and
 * exits, main frees them and allocates 14 MiB of 40 KiB ones, which land
 * on the pages the exited thread touched instead of new ones (with a purge
 * delay long enough that none is dropped meanwhile, and room in main's heap
 * for them all: outside the arena, the empty SuperSlabs beyond
 * KEEP_EMPTY_SUPERSLABS go to the shared pool at once, release.c, and are
 * decommitted there). */
enum { EXITED_N = 320, EXITED_SIZE = 49152, AGAIN_N = 350, AGAIN_SIZE = 40960 };
static void *exited_blocks[EXITED_N];

static void *exited_thread(void *arg) {
  for (int i = 0; i < EXITED_N; i++) memset(exited_blocks[i] = malloc(EXITED_SIZE), i, EXITED_SIZE);
  return arg;
}

static int cmp_ss(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)hak_ss_of(*(void *const *)a), y = (uintptr_t)hak_ss_of(*(void *const *)b);
  return x < y ? -1 : x > y;
}

static void test_exited_superslabs(void) {
  long delay = hak_option_get(hak_option_purge_delay_ms);
  hak_option_set(hak_option_purge_delay_ms, 2000);   /* long for this test, short for the purger's sleep after it */
  long keep = hak_option_get(hak_option_keep_empty_superslabs);
  hak_option_set(hak_option_keep_empty_superslabs, EXITED_N * EXITED_SIZE / HAK_SS_SIZE + 1);
  pthread_t t;
  pthread_create(&t, NULL, exited_thread, NULL);
  pthread_join(t, NULL);
  usleep(20 * 1000);   /* past RECLAIM_AFTER_MS (heap.c): no new thread came to adopt its heap */
  for (int i = 0; i < EXITED_N; i++) {
    CHECK(((unsigned char *)exited_blocks[i])[EXITED_SIZE - 1] == (unsigned char)i, "block %d lost its contents", i);
    free(exited_blocks[i]);
  }
  hak_remote_flush_all(hak_heap_get());
  qsort(exited_blocks, EXITED_N, sizeof(void *), cmp_ss);
  long before = rss_kib();
  static void *again[AGAIN_N];
  int reused = 0;
  for (int i = 0; i < AGAIN_N; i++) {
    memset(again[i] = malloc(AGAIN_SIZE), 1, AGAIN_SIZE);
    reused += bsearch(&again[i], exited_blocks, EXITED_N, sizeof(void *), cmp_ss) != NULL;
  }
  long grown = rss_kib() - before;
  CHECK(reused > AGAIN_N / 2, "only %d of %d new blocks are in the SuperSlabs of the thread that exited", reused,
        AGAIN_N);
  CHECK(grown < 4096, "%d KiB of new blocks grew RSS by %ld KiB after an exited thread's %d KiB were freed",
        AGAIN_N * AGAIN_SIZE / 1024, grown, EXITED_N * EXITED_SIZE / 1024);
  for (int i = 0; i < AGAIN_N; i++) free(again[i]);
  hak_option_set(hak_option_purge_delay_ms, delay);
  hak_option_set(hak_option_keep_empty_superslabs, keep);
  hak_trim();   /* no deadline of the long delay left for the tests after */
}

static hak_heap_t *exited_heap;
static void *heap_thread(void *arg) {
  void *p = malloc(64);
  escape(p);
  free(p);
  exited_heap = hak_tls_heap;
  return arg;
}

static void test_heap_adoption(void) {
  pthread_t t;
  pthread_create(&t, NULL, heap_thread, NULL);
  pthread_join(t, NULL);
  CHECK(atomic_load(&exited_heap->state) == HAK_HEAP_ABANDONED, "exited thread's heap not abandoned");
  /* its free memory follows the purge delay (twice at most), run by the
   * purger or another thread's tick (a slow path's: the batch below takes
   * more blocks than a cache holds): up to 10 s */
  int dirty = 1;
  static void *batch[1000];
  for (int k = 0; k < 100 && (dirty || exited_heap->purge_at); k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    for (int i = 0; i < 1000; i++) escape(batch[i] = malloc(9000));
    for (int i = 0; i < 1000; i++) free(batch[i]);
    dirty = 0;
    for (hak_superslab_t *ss = exited_heap->superslabs; ss; ss = ss->next)
      dirty += HAK_DIRTY(atomic_load(&ss->dirty)) != 0;
  }
  CHECK(exited_heap->purge_at == 0, "exited thread's heap still has a purge pending");
  CHECK(dirty == 0, "%d SuperSlabs of the exited thread still dirty", dirty);
  hak_trim();
  /* A SuperSlab with a block in use stays: the thread may have started the
   * background purger, whose creation allocated (glibc's thread state) */
  int empty = 0;
  for (hak_superslab_t *ss = exited_heap->superslabs; ss; ss = ss->next) empty += ss->free_units == HAK_UNITS_ALL;
  CHECK(empty == 0, "malloc_trim left %d empty SuperSlabs of the exited thread", empty);
  hak_heap_t *first = exited_heap;
  pthread_create(&t, NULL, heap_thread, NULL);
  pthread_join(t, NULL);
  CHECK(exited_heap == first, "new thread did not adopt the abandoned heap");
}

/* A thread's exit gives its heap's empty SuperSlabs beyond
 * KEEP_EMPTY_SUPERSLABS to the shared pool with their pages, while the
 * background purger runs (shared_pool.c): the next thread that needs
 * SuperSlabs takes them without faulting those pages in again, and the
 * ones nobody takes go back to the OS when the purge delay has passed,
 * with no call. Outside the arena, or without the purger, no sweep would
 * reach them: they are decommitted as they come in. */
enum { POOL_N = 96, POOL_SIZE = 49152 };   /* 4.5 MiB: three SuperSlabs or so */
static void *pool_blocks[POOL_N];
static long pool_faults;   /* the second thread's page faults while it fills its blocks */
static int pool_reused;    /* and how many of them lie in the first thread's SuperSlabs */

static int in_pool_superslabs(void *p) {
  for (int i = 0; i < POOL_N; i++)
    if (hak_ss_of(pool_blocks[i]) == hak_ss_of(p)) return 1;
  return 0;
}

static void *pool_thread(void *arg) {
  static void *mine[POOL_N];
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  for (int i = 0; i < POOL_N; i++) memset(mine[i] = malloc(POOL_SIZE), i, POOL_SIZE);
  getrusage(RUSAGE_THREAD, &after);
  if (arg) {   /* the second thread */
    pool_faults = after.ru_minflt - before.ru_minflt;
    pool_reused = 0;
    for (int i = 0; i < POOL_N; i++) pool_reused += in_pool_superslabs(mine[i]);
  } else {
    memcpy(pool_blocks, mine, sizeof mine);
  }
  for (int i = 0; i < POOL_N; i++) free(mine[i]);
  return arg;
}

/* The first thread's blocks that lie in pooled SuperSlabs with pages
 * resident. */
static int pool_dirty(void) {
  int n = 0;
  for (int i = 0; i < POOL_N; i++) {
    hak_superslab_t *ss = hak_ss_of(pool_blocks[i]);
    n += ss->owner == NULL && HAK_DIRTY(atomic_load(&ss->dirty)) != 0;
  }
  return n;
}

static void test_pooled_superslabs(void) {
  long delay = hak_option_get(hak_option_purge_delay_ms), keep = hak_option_get(hak_option_keep_empty_superslabs);
  hak_option_set(hak_option_purge_delay_ms, 1000);
  hak_option_set(hak_option_keep_empty_superslabs, 0);
  pthread_t t;
  pthread_create(&t, NULL, pool_thread, NULL);
  pthread_join(t, NULL);
  int pooled = 0;
  for (int i = 0; i < POOL_N; i++) pooled += hak_ss_of(pool_blocks[i])->owner == NULL;
  CHECK(pooled > POOL_N / 2, "only %d of %d blocks of an exited thread lie in pooled SuperSlabs", pooled, POOL_N);
  bool warm = !getenv("TEST_NO_ARENA") && purger_running();
  if (!warm) {
    CHECK(pool_dirty() == 0, "%d of an exited thread's blocks lie in pooled SuperSlabs that kept pages no sweep reaches",
          pool_dirty());
  } else {
    CHECK(pool_dirty() > 0, "the pooled SuperSlabs of an exited thread's blocks lost their pages at once");
    pthread_create(&t, NULL, pool_thread, pool_blocks);
    pthread_join(t, NULL);
    CHECK(pool_reused > POOL_N / 2, "only %d of %d blocks of a new thread came from pooled SuperSlabs", pool_reused,
          POOL_N);
    CHECK(pool_faults < POOL_N * POOL_SIZE / 4096 / 4, "%ld page faults filling %d KiB on pooled SuperSlabs",
          pool_faults, POOL_N * POOL_SIZE / 1024);
    for (int k = 0; k < 100 && pool_dirty(); k++) usleep(100 * 1000);   /* the delay, twice at most: 2 s */
    CHECK(pool_dirty() == 0, "%d blocks lie in pooled SuperSlabs that still hold pages 10 s later (delay 1 s)",
          pool_dirty());
  }
  hak_option_set(hak_option_purge_delay_ms, delay);
  hak_option_set(hak_option_keep_empty_superslabs, keep);
  hak_trim();
}

static const test_case_t cases[] = {
    {"exited_superslabs", test_exited_superslabs},
    {"heap_adoption", test_heap_adoption},
    {"pooled_superslabs", test_pooled_superslabs},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("heaps", cases, argc, argv); }
