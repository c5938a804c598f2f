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
   * purger or, without it, another thread's tick (a slow path's: the batch
   * below takes more blocks than a cache holds; while the purger runs, the
   * batch's new slabs would take the exited heap's free units, as its
   * guest, and keep them dirty: superslab.c, orphan_span): up to 10 s */
  int dirty = 1;
  static void *batch[1000];
  for (int k = 0; k < 100 && (dirty || exited_heap->purge_at); k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    for (int i = 0; i < 1000 && !purger_running(); i++) escape(batch[i] = malloc(9000));
    for (int i = 0; i < 1000 && !purger_running(); i++) free(batch[i]);
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
  long before = thread_faults();
  for (int i = 0; i < POOL_N; i++) memset(mine[i] = malloc(POOL_SIZE), i, POOL_SIZE);
  long faults = thread_faults() - before;
  if (arg) {   /* the second thread */
    pool_faults = faults;
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

/* Free units lent between heaps (superslab.c, lent_span): a thread whose
 * heap has no SuperSlab with a run of free units whose pages are resident
 * carves its slabs from such units of another heap's SuperSlab, as its
 * guest, rather than faulting in a SuperSlab of its own. The host keeps a
 * block in each of its SuperSlabs (they stay its, not pooled) and sleeps;
 * a new thread's blocks land on the host's pages, with few page faults;
 * their slabs are the new thread's (its blocks go to its own cache, a free
 * from the host's thread is a remote free), their contents survive the
 * host's frees, and once every block is freed the units go back to the
 * host's SuperSlabs, which a trim returns whole. Not in the secure build
 * nor outside the arena, and only while the background purger runs (the
 * only sweeper of a guest's units): there the new thread takes SuperSlabs
 * of its own. */
enum { HOST_N = 64, HOST_SIZE = 49152, GUEST_N = 48, GUEST_SIZE = 40960 };
static void *host_blocks[HOST_N], *guest_blocks[GUEST_N];
static pthread_barrier_t lent_step;
static hak_heap_t *host_heap, *guest_heap;
static long guest_faults;

static bool in_host_superslabs(void *p) {
  for (int i = 0; i < HOST_N; i++)
    if (hak_ss_of(host_blocks[i]) == hak_ss_of(p)) return true;
  return false;
}

/* The calling thread's cached blocks back to their slabs. */
static void flush_caches(void) {
  hak_heap_t *h = hak_tls_heap;
  bool entered = hak_heap_enter(h);
  for (unsigned c = 0; c < HAK_CLASSES; c++) hak_cache_return(h, c);
  hak_heap_leave(h, entered);
}

static void *host_thread(void *arg) {
  for (int i = 0; i < HOST_N; i++) memset(host_blocks[i] = malloc(HOST_SIZE), 0x11, HOST_SIZE);
  host_heap = hak_tls_heap;
  for (int i = 0; i < HOST_N; i++)   /* all but the first block of each SuperSlab */
    if (i && hak_ss_of(host_blocks[i]) == hak_ss_of(host_blocks[i - 1])) free(host_blocks[i]);
  flush_caches();   /* their units free, resident */
  pthread_barrier_wait(&lent_step);   /* the guest allocates */
  pthread_barrier_wait(&lent_step);
  for (int i = 0; i < GUEST_N; i++) free(guest_blocks[i]);   /* remote frees, to the guest's heap */
  for (int i = 0; i < HOST_N; i++)
    if (!i || hak_ss_of(host_blocks[i]) != hak_ss_of(host_blocks[i - 1])) free(host_blocks[i]);
  return arg;
}

/* Allocate n blocks of size bytes into blocks, block i filled with i;
 * the calling thread's page faults meanwhile. */
static long fill_blocks_faults(void **blocks, int n, size_t size) {
  long before = thread_faults();
  for (int i = 0; i < n; i++) memset(blocks[i] = malloc(size), i, size);
  return thread_faults() - before;
}

static void *guest_thread(void *arg) {
  guest_faults = fill_blocks_faults(guest_blocks, GUEST_N, GUEST_SIZE);
  guest_heap = hak_tls_heap;
  return arg;
}

static void test_lent_units(void) {
  long delay = hak_option_get(hak_option_purge_delay_ms);
  hak_option_set(hak_option_purge_delay_ms, 5000);   /* the host's free units keep their pages meanwhile */
  pthread_barrier_init(&lent_step, NULL, 2);
  pthread_t host, guest;
  pthread_create(&host, NULL, host_thread, NULL);
  pthread_barrier_wait(&lent_step);
  for (int k = 0; k < 100 && !purger_running(); k++) usleep(10 * 1000);
  bool lends = !HAK_SECURE && !getenv("TEST_NO_ARENA") && purger_running();
  pthread_create(&guest, NULL, guest_thread, NULL);
  pthread_join(guest, NULL);
  int lent = 0, theirs = 0;
  for (int i = 0; i < GUEST_N; i++) {
    lent += in_host_superslabs(guest_blocks[i]);
    hak_slab_t *u = hak_unit_of(hak_ss_of(guest_blocks[i]), (uintptr_t)guest_blocks[i]);
    theirs += hak_slab_heap(u) == guest_heap;
  }
  CHECK(theirs == GUEST_N, "%d of %d blocks of the new thread lie in slabs of another heap", GUEST_N - theirs, GUEST_N);
  if (lends) {
    CHECK(lent > GUEST_N / 2, "only %d of %d blocks of the new thread lie on the sleeping host's free units", lent,
          GUEST_N);
    CHECK(guest_faults < GUEST_N * GUEST_SIZE / 4096 / 4, "%ld page faults filling %d KiB on lent units",
          guest_faults, GUEST_N * GUEST_SIZE / 1024);
    CHECK(hak_ss_of(guest_blocks[0])->owner != guest_heap || !in_host_superslabs(guest_blocks[0]),
          "a lent SuperSlab changed hosts");
  } else {
    CHECK(lent == 0, "%d blocks of the new thread lie in another heap's SuperSlabs (lending is off here)", lent);
  }
  for (int i = 0; i < GUEST_N; i++) {
    const unsigned char *b = guest_blocks[i];
    CHECK(b[0] == (unsigned char)i && b[GUEST_SIZE - 1] == (unsigned char)i, "block %d lost its contents", i);
  }
  pthread_barrier_wait(&lent_step);   /* the host frees the guest's blocks, then its own */
  pthread_join(host, NULL);
  pthread_barrier_destroy(&lent_step);
  hak_option_set(hak_option_purge_delay_ms, delay);
  hak_trim();   /* both heaps' inboxes back to their slabs, every free unit decommitted */
  if (!hak_arena_size) return;   /* the SuperSlabs a trim left empty are unmapped: no header to read */
  int dirty = 0, held = 0;
  for (int i = 0; i < HOST_N; i++) dirty += HAK_DIRTY(atomic_load(&hak_ss_of(host_blocks[i])->dirty)) != 0;
  for (int i = 0; i < GUEST_N; i++) {   /* its unit no longer held: lent units went back to their host */
    hak_superslab_t *ss = hak_ss_of(guest_blocks[i]);
    unsigned u = (unsigned)(((uintptr_t)guest_blocks[i] >> HAK_UNIT_SHIFT) & (HAK_UNITS - 1));
    held += ss->owner != guest_heap && HAK_HELD(atomic_load(&ss->dirty)) >> u & 1;
  }
  CHECK(dirty == 0, "%d of the host's blocks lie in SuperSlabs with free units resident after a trim", dirty);
  CHECK(held == 0, "%d of the new thread's blocks lie on units still in use after every block was freed", held);
}

/* A host's walks for a new slab see past the units its guests took
 * (superslab.c: the free units word stays the host's). The host fills a
 * SuperSlab with 1 KiB blocks (a unit per slab), and a second one with a
 * few more, and frees the first one's blocks but those of its first unit:
 * that SuperSlab, with room again, goes to the front of its list. A guest
 * takes every free unit of it. The host's next new slab, of another class,
 * comes from the second SuperSlab's free units, not from a SuperSlab new
 * to it (when host and guests shared the word, the host's walks stopped at
 * the SuperSlab the guest had filled: xmalloc-test -w 2 peaked at up to
 * 57 MiB, against 35). */
enum { FILL_MAX = 8192, FILL_SIZE = 1024, BACK_SIZE = 40960 };
static void *fill_blocks[FILL_MAX], *back_new;
static int fill_n, guest_n;
static hak_superslab_t *fill_ss[2];
static pthread_barrier_t back_step;   /* main, host, guest: the steps below */

static bool kept(void *p) {   /* the host's blocks of its first SuperSlab that stay: those of unit 0 */
  return hak_ss_of(p) != fill_ss[0] || (uintptr_t)p - (uintptr_t)fill_ss[0] < HAK_UNIT_SIZE;
}

static void *back_host(void *arg) {
  fill_ss[0] = hak_ss_of(fill_blocks[0] = malloc(FILL_SIZE));
  for (fill_n = 1; fill_n < FILL_MAX; fill_n++) {   /* to the second SuperSlab, and 8 blocks into it */
    fill_blocks[fill_n] = malloc(FILL_SIZE);
    if (!fill_ss[1] && hak_ss_of(fill_blocks[fill_n]) != fill_ss[0]) fill_ss[1] = hak_ss_of(fill_blocks[fill_n]);
    if (fill_ss[1] && hak_ss_of(fill_blocks[fill_n - 8]) == fill_ss[1]) break;
  }
  for (int i = 0; i <= fill_n; i++)
    if (!kept(fill_blocks[i])) free(fill_blocks[i]);
  flush_caches();   /* its units free, resident */
  pthread_barrier_wait(&back_step);   /* 1 */
  pthread_barrier_wait(&back_step);   /* 2: the guest takes them */
  back_new = malloc(BACK_SIZE);
  pthread_barrier_wait(&back_step);   /* 3: main looks where it lies */
  pthread_barrier_wait(&back_step);   /* 4 */
  free(back_new);
  for (int i = 0; i <= fill_n; i++)
    if (kept(fill_blocks[i])) free(fill_blocks[i]);
  return arg;
}

static void *back_guest(void *arg) {
  static void *mine[FILL_MAX];
  pthread_barrier_wait(&back_step);
  for (guest_n = 0; guest_n < FILL_MAX && HAK_DIRTY(atomic_load(&fill_ss[0]->dirty)); guest_n++)
    memset(mine[guest_n] = malloc(FILL_SIZE), 7, FILL_SIZE);
  pthread_barrier_wait(&back_step);
  pthread_barrier_wait(&back_step);   /* its blocks in use while the host allocates */
  pthread_barrier_wait(&back_step);
  for (int i = 0; i < guest_n; i++) free(mine[i]);
  return arg;
}

static void test_lent_back(void) {
  long delay = hak_option_get(hak_option_purge_delay_ms);
  hak_option_set(hak_option_purge_delay_ms, 5000);   /* the free units keep their pages meanwhile */
  pthread_barrier_init(&back_step, NULL, 3);
  pthread_t host, guest;
  pthread_create(&host, NULL, back_host, NULL);
  pthread_create(&guest, NULL, back_guest, NULL);
  for (int k = 0; k < 100 && !purger_running(); k++) usleep(10 * 1000);
  bool lends = !HAK_SECURE && !getenv("TEST_NO_ARENA") && purger_running();
  pthread_barrier_wait(&back_step);
  pthread_barrier_wait(&back_step);
  pthread_barrier_wait(&back_step);
  if (lends) {
    uint32_t left = HAK_DIRTY(atomic_load(&fill_ss[0]->dirty));
    CHECK(left == 0, "a guest took %d blocks and left units %#x of the host's SuperSlab free, dirty", guest_n, left);
    CHECK(hak_ss_of(back_new) == fill_ss[1], "the host's new slab %p lies in SuperSlab %p, not in %p, its own "
          "with free units", back_new, (void *)hak_ss_of(back_new), (void *)fill_ss[1]);
  }
  pthread_barrier_wait(&back_step);
  pthread_join(guest, NULL);
  pthread_join(host, NULL);
  pthread_barrier_destroy(&back_step);
  hak_option_set(hak_option_purge_delay_ms, delay);
  hak_trim();
}

/* Units of an orphaned heap (superslab.c, orphan_span): a thread exits and
 * leaves a block in each of its SuperSlabs (so that they stay its heap's,
 * not pooled nor reclaimed whole), their other units free with their pages
 * resident. Once its heap has been left RECLAIM_AFTER_MS and more with no
 * thread taking it, a running thread's new slabs of the same class come
 * from those units, with few page faults, rather than from the clean units
 * of its own SuperSlab (which a small block gave it first): before, it
 * faulted its own in while the orphan's pages waited for the purge delay.
 * Once a thread has taken the heap again, its units are that thread's: the
 * running thread's next slabs of the class come from its own clean units.
 * Not in the secure build, nor outside the arena, nor without the
 * background purger (lending is off there). */
static void *orphan_blocks[HOST_N], *orphan_kept[HOST_N], *orphan_new[GUEST_N];
static int orphan_kept_n, orphan_again;
static hak_heap_t *orphan_heap;
static long orphan_faults;
static pthread_barrier_t orphan_step;

static void *orphan_thread(void *arg) {
  for (int i = 0; i < HOST_N; i++) memset(orphan_blocks[i] = malloc(HOST_SIZE), 0x22, HOST_SIZE);
  orphan_heap = hak_tls_heap;
  for (int i = 0; i < HOST_N; i++)   /* all but the first block of each SuperSlab, then the thread exits */
    if (i && hak_ss_of(orphan_blocks[i]) == hak_ss_of(orphan_blocks[i - 1])) free(orphan_blocks[i]);
    else orphan_kept[orphan_kept_n++] = orphan_blocks[i];
  return arg;
}

static bool in_orphan_superslabs(void *p) {
  for (int i = 0; i < orphan_kept_n; i++)
    if (hak_ss_of(orphan_kept[i]) == hak_ss_of(p)) return true;
  return false;
}

static void *orphan_guest(void *arg) {
  void *volatile small = malloc(64);   /* a heap and a SuperSlab of its own, its other units clean */
  pthread_barrier_wait(&orphan_step);   /* 1: the orphan's thread runs and exits */
  pthread_barrier_wait(&orphan_step);   /* 2: its heap waits past RECLAIM_AFTER_MS */
  pthread_barrier_wait(&orphan_step);   /* 3 */
  orphan_faults = fill_blocks_faults(orphan_new, GUEST_N, HOST_SIZE);
  guest_heap = hak_tls_heap;
  for (int i = 0; i < GUEST_N; i++) {
    const unsigned char *b = orphan_new[i];
    CHECK(b[0] == (unsigned char)i && b[HOST_SIZE - 1] == (unsigned char)i, "block %d lost its contents", i);
    free(orphan_new[i]);
  }
  flush_caches();   /* its slabs on the orphan's units empty: released */
  pthread_barrier_wait(&orphan_step);   /* 4: a thread takes the orphan's heap */
  pthread_barrier_wait(&orphan_step);   /* 5 */
  void *again[GUEST_N / 2];   /* within the clean units of its own SuperSlab */
  for (int i = 0; i < GUEST_N / 2; i++) orphan_again += in_orphan_superslabs(again[i] = malloc(HOST_SIZE));
  for (int i = 0; i < GUEST_N / 2; i++) free(again[i]);
  free(small);
  return arg;
}

/* Threads that take abandoned heaps and keep them until told: each one
 * takes the first abandoned heap it finds, so that one of them takes the
 * orphan's. */
enum { ADOPTERS = 1024 };
static _Atomic int adopters_done;
static _Atomic(hak_heap_t *) adopted[ADOPTERS];
static pthread_t adopters[ADOPTERS];

static void *adopter_thread(void *arg) {
  void *volatile p = malloc(64);   /* volatile: the pair is not optimized away */
  free(p);
  atomic_store(&adopted[(intptr_t)arg], hak_tls_heap);
  while (!atomic_load(&adopters_done)) usleep(1000);
  return arg;
}

static void test_orphaned_units(void) {
  long delay = hak_option_get(hak_option_purge_delay_ms);
  hak_option_set(hak_option_purge_delay_ms, 5000);   /* the orphan's free units keep their pages meanwhile */
  pthread_barrier_init(&orphan_step, NULL, 2);
  pthread_t orphan, guest;
  pthread_create(&guest, NULL, orphan_guest, NULL);
  pthread_barrier_wait(&orphan_step);   /* 1 */
  pthread_create(&orphan, NULL, orphan_thread, NULL);
  pthread_join(orphan, NULL);
  for (int k = 0; k < 100 && !purger_running(); k++) usleep(10 * 1000);
  bool lends = !HAK_SECURE && !getenv("TEST_NO_ARENA") && purger_running();
  pthread_barrier_wait(&orphan_step);   /* 2 */
  usleep(50 * 1000);                    /* past RECLAIM_AFTER_MS */
  pthread_barrier_wait(&orphan_step);   /* 3 */
  pthread_barrier_wait(&orphan_step);   /* 4 */
  CHECK(orphan_kept_n >= 2, "the orphan's blocks lie in %d SuperSlab(s), not 2 or more", orphan_kept_n);
  int lent = 0, n = 0, mine = -1;
  for (int i = 0; i < GUEST_N; i++) lent += in_orphan_superslabs(orphan_new[i]);
  if (lends) {
    CHECK(lent > GUEST_N / 2, "only %d of %d blocks of a running thread lie on the orphaned heap's free units", lent,
          GUEST_N);
    CHECK(orphan_faults < GUEST_N * HOST_SIZE / 4096 / 4, "%ld page faults filling %d KiB on an orphan's units",
          orphan_faults, GUEST_N * HOST_SIZE / 1024);
    for (; n < ADOPTERS && mine < 0; n++) {   /* until one has taken the orphan's heap */
      pthread_create(&adopters[n], NULL, adopter_thread, (void *)(intptr_t)n);
      while (!atomic_load(&adopted[n])) usleep(1000);
      if (atomic_load(&adopted[n]) == orphan_heap) mine = n;
    }
    CHECK(mine >= 0, "none of %d new threads took the orphan's heap", n);
  } else {
    CHECK(lent == 0, "%d blocks of a running thread lie in an orphan's SuperSlabs (lending is off here)", lent);
  }
  pthread_barrier_wait(&orphan_step);   /* 5 */
  pthread_join(guest, NULL);
  CHECK(orphan_again == 0, "%d of %d blocks lie on the units of a heap a thread took again", orphan_again,
        GUEST_N / 2);
  atomic_store(&adopters_done, 1);
  for (int i = 0; i < n; i++) pthread_join(adopters[i], NULL);
  for (int i = 0; i < orphan_kept_n; i++) {
    const unsigned char *b = orphan_kept[i];
    CHECK(b[0] == 0x22 && b[HOST_SIZE - 1] == 0x22, "the orphan's block %d lost its contents", i);
    free(orphan_kept[i]);
  }
  pthread_barrier_destroy(&orphan_step);
  hak_option_set(hak_option_purge_delay_ms, delay);
  hak_trim();
  if (!hak_arena_size) return;
  int held = 0;
  for (int i = 0; i < GUEST_N; i++) {   /* the units the guest's slabs held went back to their host */
    hak_superslab_t *ss = hak_ss_of(orphan_new[i]);
    unsigned u = (unsigned)(((uintptr_t)orphan_new[i] >> HAK_UNIT_SHIFT) & (HAK_UNITS - 1));
    held += ss->owner != guest_heap && HAK_HELD(atomic_load(&ss->dirty)) >> u & 1;
  }
  CHECK(held == 0, "%d of a guest's blocks lie on an orphan's units still held after every block was freed", held);
}

static const test_case_t cases[] = {
    {"exited_superslabs", test_exited_superslabs},
    {"heap_adoption", test_heap_adoption},
    {"pooled_superslabs", test_pooled_superslabs},
    {"lent_units", test_lent_units},
    {"lent_back", test_lent_back},
    {"orphaned_units", test_orphaned_units},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("heaps", cases, argc, argv); }
