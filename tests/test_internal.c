/* Unit tests of hakmem's internals: size classes, the block check,
 * the registry, remote frees, slab and SuperSlab release, the large path and
 * heap adoption. Linked against the static library with the override on. */
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

/* Keep the compiler from dropping stores to, or the whole of, an allocation. */
static void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static long rss_kib(void) { return rss_bytes() / 1024; }

static void test_size_classes(void) {
  unsigned prev = 0;
  int bad_round = 0, bad_waste = 0, bad_mono = 0;
  for (size_t size = 0; size <= HAK_MID_MAX; size++) {
    unsigned c = hak_class_of(size);
    size_t cs = hak_class_size[c];
    if (cs < size || (c > 0 && hak_class_size[c - 1] >= size && size > 0)) bad_round++;
    if (size > 128 && (cs - size) * 8 > size) bad_waste++;
    if (c < prev) bad_mono++;
    prev = c;
  }
  CHECK(bad_round == 0, "%d sizes map to a class that is not the smallest fit", bad_round);
  CHECK(bad_waste == 0, "%d sizes above 128 B waste more than 12.5%%", bad_waste);
  CHECK(bad_mono == 0, "class index not monotonic in %d places", bad_mono);
  CHECK(hak_class_size[HAK_TINY_CLASSES - 1] == HAK_TINY_MAX, "last tiny class is %u", hak_class_size[HAK_TINY_CLASSES - 1]);
  CHECK(hak_class_size[HAK_CLASSES - 1] == HAK_MID_MAX, "last mid class is %u", hak_class_size[HAK_CLASSES - 1]);
  int misaligned = 0;
  for (unsigned c = 0; c < HAK_CLASSES; c++) misaligned += hak_class_size[c] % 16 != 0;
  CHECK(misaligned == 0, "%d classes are not multiples of 16", misaligned);
}

/* hak_is_block against division, for every class, every offset in a
 * SuperSlab and offsets just below the slab start. */
static void test_block_check(void) {
  long wrong = 0;
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    uint32_t d = hak_class_size[c];
    hak_slab_t s = {.inverse = hak_odd_inverse(d), .shift = (uint8_t)__builtin_ctz(d), .start = HAK_SS_SIZE,
                    .limit = (HAK_SS_SIZE - HAK_SS_HEADER) / d};
    for (uint64_t off = 0; off < HAK_SS_SIZE; off++) {
      bool want = off % d == 0 && off / d < s.limit;
      if (hak_is_block(&s, s.start + off) != want) wrong++;
    }
    for (uint64_t below = 1; below <= 4 * d; below++) wrong += hak_is_block(&s, s.start - below);
    hak_slab_t unused = s;
    unused.limit = 0;
    wrong += hak_is_block(&unused, s.start);
  }
  CHECK(wrong == 0, "block check wrong for %ld addresses", wrong);
}

static void test_aligned_classes(void) {
  int bad = 0;
  for (size_t align = 32; align <= HAK_UNIT_SIZE; align *= 2)
    for (size_t size = 1; size <= HAK_MID_MAX; size += 97) {
      int c = hak_class_for_aligned(size, align);
      if (c < 0) {
        if (size <= HAK_MID_MAX && align <= HAK_MID_MAX && size <= align) bad++;
        continue;
      }
      if (hak_class_size[c] % align || hak_class_size[c] < size) bad++;
    }
  CHECK(bad == 0, "%d aligned class choices wrong", bad);
}

static void test_registry(void) {
  void *p = malloc(100);
  void *big = malloc(4u << 20);
  int local = 0;
  CHECK(hak_registry_kind((uintptr_t)p) == HAK_REG_SUPERSLAB, "small block not in a SuperSlab");
  CHECK(hak_registry_kind((uintptr_t)big) == HAK_REG_LARGE, "large block not registered");
  CHECK(hak_registry_kind((uintptr_t)&local) == HAK_REG_FOREIGN, "stack registered");
  CHECK(hak_registry_kind((uintptr_t)&test_registry) == HAK_REG_FOREIGN, "code registered");
  CHECK(hak_registry_kind(UINTPTR_MAX - 4096) == HAK_REG_FOREIGN, "top address registered");
  hak_superslab_t *ss = hak_ss_of(p);
  CHECK(ss->owner == hak_tls_heap, "SuperSlab not owned by this thread's heap");
  hak_slab_t *s = hak_slab_of(ss, (uintptr_t)p);
  CHECK(hak_is_block(s, (uintptr_t)p), "block check rejects a block");
  CHECK(!hak_is_block(s, (uintptr_t)p + 16), "block check accepts an interior pointer");
  free(p);
  free(big);
}

#define REMOTE_N 5000
static void *remote_blocks[REMOTE_N];

static int remote_n;

static void *remote_free_thread(void *arg) {
  for (int i = 0; i < remote_n; i++) free(remote_blocks[i]);
  return arg;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* Blocks freed by another thread come back to the owner (inbox, then cache
 * or slabs) and are reused: in a plain chain (16 bytes), in containers
 * (48, 640 bytes) and for a mid class. */
static void test_remote_free(size_t size, int n) {
  remote_n = n;
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(size);
  for (int i = 0; i < n; i++) remote_blocks[i] = malloc(size);
  hak_slab_t *s = hak_slab_of(hak_ss_of(remote_blocks[0]), (uintptr_t)remote_blocks[0]);
  uint32_t used_before = s->used;
  pthread_t t;
  pthread_create(&t, NULL, remote_free_thread, NULL);
  pthread_join(t, NULL);
  CHECK(atomic_load(&h->inbox[cls]) != NULL, "remote frees did not reach the owner's inbox");
  CHECK(s->used == used_before, "remote free changed the owner's count");
  hak_heap_collect_all(h);
  CHECK(atomic_load(&h->inbox[cls]) == NULL, "collect left the inbox");
  CHECK(s->used < used_before, "collected blocks did not go back to their slab");
  /* the memory is reused by the owner: the new blocks land in the slab units
   * of the old ones, or for a class whose slabs span several units (which
   * a slab emptied by the collection and carved anew may not cover as the
   * old one did), in their SuperSlabs */
  static void *again[REMOTE_N];
  for (int i = 0; i < n; i++) again[i] = malloc(size);
  qsort(remote_blocks, n, sizeof(void *), cmp_ptr);
  uintptr_t mask = hak_class_units[cls] == 1 ? HAK_UNIT_SIZE - 1 : HAK_SS_MASK;
  int reused = 0;
  for (int j = 0; j < n; j++) {
    uintptr_t key = (uintptr_t)again[j] & ~mask;
    int lo = 0, hi = n;   /* first freed block at or above the unit's (SuperSlab's) start */
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if ((uintptr_t)remote_blocks[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    reused += lo < n && ((uintptr_t)remote_blocks[lo] & ~mask) == key;
  }
  CHECK(reused > n * 9 / 10, "size %zu: only %d of %d blocks reuse the memory of remotely freed ones", size, reused, n);
  for (int i = 0; i < n; i++) remote_blocks[i] = again[i];
  for (int i = 0; i < n; i++) free(remote_blocks[i]);
}

/* Blocks freed by another thread come back most recently freed first, as
 * the thread's own frees do: the cache pops what take_remote lays in out[]
 * from its top (a plain chain, containers, a mid class). With room for
 * fewer, the cache gets the newest and the oldest go back to their slabs. */
static void test_remote_order(size_t size, int n, int room) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(size);
  remote_n = n;
  for (int i = 0; i < n; i++) remote_blocks[i] = malloc(size);
  pthread_t t;
  pthread_create(&t, NULL, remote_free_thread, NULL);
  pthread_join(t, NULL);
  static void *out[REMOTE_N];
  uint64_t used = h->counters[cls].used_blocks;
  uint32_t got = hak_heap_take_remote(h, cls, out, (uint32_t)room);
  CHECK(got == (uint32_t)room, "size %zu: %u of %d remotely freed blocks taken, room for %d", size, got, n, room);
  CHECK(h->counters[cls].used_blocks + (uint64_t)(n - room) == used, "size %zu: %llu blocks in use, %llu before %d went back",
        size, (unsigned long long)h->counters[cls].used_blocks, (unsigned long long)used, n - room);
  int newest_first = 0;
  for (uint32_t j = 0; j < got; j++) newest_first += out[j] == remote_blocks[n - room + (int)j];
  CHECK(newest_first == room, "size %zu: %d of %d blocks come back most recently freed first", size, newest_first, room);
  for (uint32_t j = 0; j < got; j++) hak_slab_put_local(h, out[j]);
}

/* The release tick's sweep takes the inbox of a class that has not
 * refilled since the sweep before, and leaves a class in use its inbox
 * for its next refill, until a sweep finds it idle. */
static void test_sweep_idle(void) {
  enum { K = 100 };
  hak_heap_t *h = hak_heap_get();
  unsigned busy = hak_class_of(48), idle = hak_class_of(640);
  remote_n = 2 * K;
  for (int i = 0; i < K; i++) {
    remote_blocks[i] = malloc(48);
    remote_blocks[K + i] = malloc(640);
  }
  hak_heap_collect_idle(h);
  static void *drained[8192];
  int nd = 0;
  hak_ucache_t *c = &h->cache[busy];
  while (c->top != c->items && nd < 8191) drained[nd++] = malloc(48);
  drained[nd++] = malloc(48);   /* the refill */
  pthread_t t;
  pthread_create(&t, NULL, remote_free_thread, NULL);
  pthread_join(t, NULL);
  CHECK(atomic_load(&h->inbox[busy]) && atomic_load(&h->inbox[idle]), "remote frees did not reach the inboxes");
  hak_heap_collect_idle(h);
  CHECK(atomic_load(&h->inbox[idle]) == NULL, "the sweep left the inbox of a class that has not refilled");
  CHECK(atomic_load(&h->inbox[busy]) != NULL, "the sweep took the inbox of a class that refilled since the last");
  hak_heap_collect_idle(h);
  CHECK(atomic_load(&h->inbox[busy]) == NULL, "a second sweep left the inbox of a class that did not refill since");
  for (int i = 0; i < nd; i++) free(drained[i]);
}

/* A class's cache that two sweeps in a row find untouched goes back to its
 * slabs, and the slabs it held go back to their SuperSlab; a cache the
 * program used between two sweeps stays, and so does one too small to
 * matter (under 32 KiB). */
static void test_idle_caches(void) {
  hak_heap_t *h = hak_heap_get();
  unsigned idle = hak_class_of(48 << 10), used = hak_class_of(20000), small = hak_class_of(64);
  void *b[32];
  for (int i = 0; i < 32; i++) escape(b[i] = malloc(48 << 10));
  for (int i = 0; i < 32; i++) free(b[i]);
  for (int i = 0; i < 8; i++) escape(b[i] = malloc(20000));
  for (int i = 0; i < 8; i++) free(b[i]);
  hak_cache_return(h, small);
  for (int i = 0; i < 8; i++) escape(b[i] = malloc(64));
  for (int i = 0; i < 8; i++) free(b[i]);
  CHECK(hak_cache_count(&h->cache[idle]) > 0 && hak_cache_count(&h->cache[used]) >= 2 &&
            hak_cache_count(&h->cache[small]) > 0, "caches of %u, %u and %u blocks", hak_cache_count(&h->cache[idle]),
        hak_cache_count(&h->cache[used]), hak_cache_count(&h->cache[small]));
  for (int sweep = 0; sweep < 3; sweep++) {
    void *p = malloc(20000), *q = malloc(20000);   /* the two on top change places */
    escape(p);
    escape(q);
    free(p);
    free(q);
    hak_heap_collect_idle(h);
  }
  CHECK(hak_cache_count(&h->cache[idle]) == 0, "an idle cache kept %u blocks", hak_cache_count(&h->cache[idle]));
  CHECK(!h->warm[idle] && !h->full[idle], "the slabs of an idle cache's blocks stayed");
  CHECK(hak_cache_count(&h->cache[used]) >= 2, "a cache in use went back");
  CHECK(hak_cache_count(&h->cache[small]) > 0, "a cache of less than 32 KiB went back");
}

/* A thread that carves new slabs sweeps without waiting for 64 slow-path
 * visits: a new slab counts as a visit per 8 KiB (release.c), so that 24
 * blocks of 96 KiB, a dozen visits but 2.3 MiB of new slabs, find the
 * cache of a size the thread stopped using idle and give it back. */
static void test_idle_caches_paced_by_slabs(void) {
  hak_heap_t *h = hak_heap_get();
  unsigned idle = hak_class_of(48 << 10), big = hak_class_of(96 << 10);
  void *b[32];
  for (int i = 0; i < 32; i++) escape(b[i] = malloc(48 << 10));
  for (int i = 0; i < 32; i++) free(b[i]);
  CHECK(hak_cache_count(&h->cache[idle]) > 0, "no cache of 48 KiB blocks to go idle");
  hak_cache_return(h, big);
  for (int i = 0; i < 24; i++) escape(b[i] = malloc(96 << 10));
  CHECK(hak_cache_count(&h->cache[idle]) == 0, "a cache idle while 2.3 MiB of new slabs were carved kept %u blocks",
        hak_cache_count(&h->cache[idle]));
  for (int i = 0; i < 24; i++) free(b[i]);
}

/* A SuperSlab that empties stays with its heap, pages and all, for the
 * purge delay: a thread whose footprint swings by SuperSlabs takes it back
 * without a page fault. Then it goes to the shared pool (with
 * KEEP_EMPTY_SUPERSLABS 0). Outside the arena, where no background sweep
 * reaches it, it goes at once. */
static void test_empty_superslab(void) {
  long keep = hak_option_get(hak_option_keep_empty_superslabs);
  hak_option_set(hak_option_keep_empty_superslabs, 0);
  hak_trim();
  hak_heap_t *h = hak_heap_get();
  enum { N = 64 };   /* 64 x 100 KB: more than two SuperSlabs */
  static char *blocks[N];
  for (int i = 0; i < N; i++) memset(blocks[i] = malloc(100000), 1, 100000);
  hak_superslab_t *ss = hak_ss_of(blocks[N / 2]);   /* between two others: only these blocks' */
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_cache_return(h, hak_class_of(100000));
  if (getenv("TEST_NO_ARENA")) {
    CHECK(ss->owner != h, "an empty SuperSlab outside the arena stayed with its heap");
    hak_option_set(hak_option_keep_empty_superslabs, keep);
    return;
  }
  CHECK(ss->owner == h && ss->free_units == HAK_UNITS_ALL, "an empty SuperSlab left its heap at once");
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t decommits = st.os_decommits;
  long rss = rss_kib();
  for (int i = 0; i < N; i++) memset(blocks[i] = malloc(100000), 2, 100000);
  int again = 0;
  for (int i = 0; i < N; i++) again += hak_ss_of(blocks[i]) == ss;
  hak_stats_get(&st);
  CHECK(again > 0, "the empty SuperSlab was not taken again");
  CHECK(st.os_decommits == decommits, "%llu decommits while the SuperSlabs were empty",
        (unsigned long long)(st.os_decommits - decommits));
  CHECK(rss_kib() - rss < 1024, "taking the SuperSlabs back grew RSS by %ld KiB", rss_kib() - rss);
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_cache_return(h, hak_class_of(100000));
  for (int k = 0; k < 100 && ss->owner == h; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    void *some[64];   /* slow paths run the release tick */
    int n = 0;
    while (n < 64 && ss->owner == h) escape(some[n++] = malloc(5000));
    while (n) free(some[--n]);
  }
  CHECK(ss->owner != h, "an empty SuperSlab stayed with its heap after the purge delay");
  hak_option_set(hak_option_keep_empty_superslabs, keep);
}

/* A thread's remote frees travel in batches: a partial batch waits in the
 * freeing thread until it fills up or the thread trims (or exits); a trim
 * from any thread takes the inboxes of the others back to their slabs. */
enum { BATCH_BLOCKS = 1024 };

static struct {
  void *blocks[BATCH_BLOCKS];
  hak_heap_t *owner;
  unsigned cls;
  uint32_t limit;
} batch;

/* Blocks in an inbox of a class of HAK_BATCH_COUNTED bytes or more: each
 * container counts itself and the blocks it lists. */
static uint32_t inbox_blocks(_Atomic(void *) *inbox) {
  uint32_t n = 0;
  for (void **c = atomic_load(inbox); c; c = c[0]) n += 1 + (uint32_t)(uintptr_t)c[2];
  return n;
}

static void *batch_thread(void *arg) {
  _Atomic(void *) *inbox = &batch.owner->inbox[batch.cls];
  for (int i = 0; i < 3; i++) free(batch.blocks[i]);
  CHECK(atomic_load(inbox) == NULL, "a partial batch reached the owner before it filled up");
  hak_remote_flush_all(hak_heap_get());   /* as a trim or an exit does */
  uint32_t n = inbox_blocks(inbox);
  CHECK(n == 3, "after the flush the inbox holds %u blocks, not 3", n);
  void **c = atomic_load(inbox);
  CHECK(c && !c[0], "3 blocks of 100 bytes did not travel in one container");
  hak_heap_take_remote(batch.owner, batch.cls, NULL, 0);   /* the owner is parked in join */
  for (uint32_t i = 3; i < 3 + batch.limit; i++) free(batch.blocks[i]);
  n = inbox_blocks(inbox);
  CHECK(n == batch.limit, "a full batch of %u blocks reached the owner as %u", batch.limit, n);
  /* the flushed batch keeps its owner: the next block for it opens the
   * next batch (on free's fast path), and stays here */
  hak_remote_batch_t *b = &hak_heap_get()->outgoing[batch.cls];
  CHECK(b->owner == &batch.owner->cache[batch.cls] && !b->head, "after its flush the batch names %p, not its owner's cache %p",
        (void *)b->owner, (void *)&batch.owner->cache[batch.cls]);
  void *next = batch.blocks[3 + batch.limit];
  free(next);
  CHECK(b->head == next && inbox_blocks(inbox) == batch.limit, "the block freed after the flush is not the new batch's");
  hak_remote_flush_all(hak_heap_get());
  n = inbox_blocks(inbox);
  CHECK(n == batch.limit + 1, "after the flush the inbox holds %u blocks, not %u", n, batch.limit + 1);
  hak_trim();   /* the owner's inbox goes back to its slabs: its thread is parked in join */
  CHECK(atomic_load(inbox) == NULL, "after trim the owner's inbox still holds %u blocks", inbox_blocks(inbox));
  return arg;
}

static void test_remote_batch(void) {
  batch.owner = hak_heap_get();
  batch.cls = hak_class_of(100);
  batch.limit = batch.owner->outgoing[batch.cls].limit;
  CHECK(batch.limit > 3 && 4 + batch.limit <= BATCH_BLOCKS, "batch limit %u", batch.limit);
  for (int i = 0; i < BATCH_BLOCKS; i++) batch.blocks[i] = malloc(100);
  pthread_t t;
  pthread_create(&t, NULL, batch_thread, NULL);
  pthread_join(t, NULL);
  hak_heap_collect_all(batch.owner);
  for (uint32_t i = 4 + batch.limit; i < BATCH_BLOCKS; i++) free(batch.blocks[i]);
}

static void test_release(void) {
  hak_trim();
  long before = rss_kib();
  enum { N = 200000 };
  static void *blocks[N];
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(256);
    memset(blocks[i], 1, 256);
  }
  long peak = rss_kib();
  for (int i = 0; i < N; i++) free(blocks[i]);
  /* The purge delay (which the release policy may have lengthened) passes,
   * twice at most: up to 10 s. */
  long after_delay = rss_kib();
  for (int k = 0; k < 100 && after_delay - before >= 8192; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    void *some[64];   /* slow paths (refills, flushes) run the release tick */
    for (int i = 0; i < 64; i++) escape(some[i] = malloc(5000));
    for (int i = 0; i < 64; i++) free(some[i]);
    after_delay = rss_kib();
  }
  CHECK(peak - before > 40000, "allocating 51 MB grew RSS by only %ld KiB", peak - before);
  CHECK(after_delay - before < 8192, "RSS after free + delay is %ld KiB above the start", after_delay - before);
  hak_trim();
  long after_trim = rss_kib();
  CHECK(after_trim - before < 2048, "RSS after malloc_trim is %ld KiB above the start", after_trim - before);
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* A block of a span class (above 128 KiB, up to HAK_MID_MAX) is a slab of
 * its own in a SuperSlab: 64 KiB aligned, usable to its class's size. With
 * no cache, its units go back to the SuperSlab at free, and a block of
 * another span size takes them with the pages on them (no page fault);
 * calloc zeroes such a block, but not one on units that were given back
 * to the OS since (their pages are zero): it faults in one page, not 49.
 * A block that realloc grows past 128 KiB is large instead, so that it
 * grows on with its pages moved, not copied, and stays large above it. */
static void test_span(void) {
  const size_t a_size = 300000, b_size = 200000;
  char *a = malloc(a_size);
  CHECK(hak_registry_kind((uintptr_t)a) == HAK_REG_SUPERSLAB && ((uintptr_t)a & (HAK_UNIT_SIZE - 1)) == 0,
        "span block %p is not a 64 KiB aligned block of a SuperSlab", (void *)a);
  CHECK(hak_usable_size(a) == hak_class_size[hak_class_of(a_size)], "span block usable %zu", hak_usable_size(a));
  hak_superslab_t *ss = hak_ss_of(a);
  volatile uintptr_t at = (uintptr_t)a;   /* not a use after free for gcc */
  unsigned u = (unsigned)((at - (uintptr_t)ss) >> HAK_UNIT_SHIFT);
  memset(a, 0x5a, a_size);
  escape(a);
  free(a);
  CHECK(ss->free_units >> u & 1, "the units of a freed span block did not go back to its SuperSlab");
  long faults = minor_faults();
  char *b = calloc(1, b_size);
  faults = minor_faults() - faults;
  CHECK((uintptr_t)b == at, "a block of another span class (%p) did not take the freed units (%p)", (void *)b,
        (void *)at);
  size_t nonzero = 0;
  for (size_t i = 0; i < b_size; i++) nonzero += b[i] != 0;
  CHECK(nonzero == 0 && faults == 0, "calloc of a reused span block: %zu bytes not zero, %ld page faults", nonzero,
        faults);
  free(b);
  hak_trim();
  faults = minor_faults();
  char *c = calloc(1, b_size);
  faults = minor_faults() - faults;
  CHECK(hak_ss_of(c) == ss && faults <= 2, "calloc of a span block on units given back: %ld page faults", faults);
  nonzero = 0;
  for (size_t i = 0; i < b_size; i++) nonzero += c[i] != 0;
  CHECK(nonzero == 0, "calloc of a span block on units given back: %zu bytes not zero", nonzero);
  free(c);
  char *g = malloc(100000);
  memset(g, 0x33, 100000);
  g = realloc(g, 300000);
  CHECK(g && hak_registry_kind((uintptr_t)g) == HAK_REG_LARGE, "a block realloc grew to 300000 bytes is not large");
  memset(g + 100000, 0x44, 200000);
  g = realloc(g, 450000);
  CHECK(g && hak_registry_kind((uintptr_t)g) == HAK_REG_LARGE, "a large block grown to 450000 bytes is not large");
  g = realloc(g, 140000);
  CHECK(g && hak_registry_kind((uintptr_t)g) == HAK_REG_LARGE, "a large block shrunk to 140000 bytes is not large");
  size_t bad = 0;
  for (size_t i = 0; i < 140000; i++) bad += (unsigned char)g[i] != (i < 100000 ? 0x33 : 0x44);
  CHECK(bad == 0, "%zu bytes changed by realloc between span, large and back", bad);
  free(g);
}

/* Span blocks that a thread frees in a row go back to the OS at once
 * beyond BIGCACHE_BUDGET's bytes, as large blocks the BigCache has no room
 * for: 32 blocks of 300,000 bytes (9.4 MB) with a budget of 1 MiB. */
static void test_span_burst(void) {
  enum { N = 32, SIZE = 300000 };
  long budget = hak_option_get(hak_option_bigcache_budget);
  hak_option_set(hak_option_bigcache_budget, 1 << 20);
  static char *b[N];
  for (int i = 0; i < N; i++) memset(b[i] = malloc(SIZE), 1, SIZE);
  long before = rss_kib();
  for (int i = 0; i < N; i++) free(b[i]);
  long dropped = before - rss_kib();
  CHECK(dropped > (N * SIZE - (3 << 20)) / 1024, "freeing %d span blocks of %d bytes in a row dropped %ld KiB", N, SIZE,
        dropped);
  hak_option_set(hak_option_bigcache_budget, budget);
}

/* The SuperSlabs of a thread that exited serve the others once the blocks
 * it left are freed: a thread allocates 15 MiB of 48 KiB blocks and
 * exits, main frees them and allocates 14 MiB of 40 KiB ones, which land
 * on the pages the exited thread touched instead of new ones (with a purge
 * delay long enough that none is dropped meanwhile). */
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
  hak_trim();   /* no deadline of the long delay left for the tests after */
}

static void test_large(void) {
  char *a = malloc(3u << 20);
  volatile uintptr_t a_map = (uintptr_t)a & ~(uintptr_t)HAK_SS_MASK;   /* not a use after free for gcc */
  memset(a, 7, 3u << 20);
  escape(a);
  free(a);
  char *b = malloc(3u << 20);
  CHECK(a_map == ((uintptr_t)b & ~(uintptr_t)HAK_SS_MASK),
        "BigCache did not reuse a freed large mapping");
  CHECK(b[12345] == 7, "reused large mapping lost its pages (syscall made)");
  b[0] = 'x';
  b[(3u << 20) - 1] = 'y';
  uintptr_t old_place = (uintptr_t)b;
  char *c = realloc(b, 300u << 20);
  CHECK(c && c[0] == 'x' && c[(3u << 20) - 1] == 'y', "mremap growth lost content");
  CHECK(hak_registry_kind((uintptr_t)c) == HAK_REG_LARGE, "moved block not registered");
  if ((uintptr_t)c != old_place) CHECK(hak_registry_kind(old_place) == HAK_REG_FOREIGN, "old place still registered");
  char *d = realloc(c, 700000);
  CHECK(d == c && hak_usable_size(d) < (1u << 20), "shrinking a large block did not trim it");
  free(d);
  void *e = aligned_alloc(4u << 20, 5000);
  CHECK(((uintptr_t)e & ((4u << 20) - 1)) == 0, "4 MiB alignment not honoured");
  CHECK(hak_registry_kind((uintptr_t)e) == HAK_REG_LARGE_ALIGNED, "huge-aligned block not registered");
  free(e);
  CHECK(hak_registry_kind((uintptr_t)e) == HAK_REG_FOREIGN, "freed huge-aligned block still registered");

  /* large blocks start at different cache lines of their first page */
  char *live[8];
  unsigned lines = 0;
  uint64_t seen = 0;
  for (int i = 0; i < 8; i++) {
    live[i] = malloc(1u << 20);
    CHECK(((uintptr_t)live[i] & 63) == 0, "large block %p not on a cache line", (void *)live[i]);
    unsigned line = (unsigned)((uintptr_t)live[i] & 4095) / 64;
    lines += !(seen >> line & 1);
    seen |= (uint64_t)1 << line;
  }
  CHECK(lines >= 6, "8 large blocks start at only %u cache lines of their page", lines);
  for (int i = 0; i < 8; i++) free(live[i]);
}

/* A large block moves its pages, never copies them, however it grew before:
 * grown in place after a move, then moved again (mremap moves one mapping
 * only, so in-place growth must keep the block one mapping). Mappings placed
 * just past its end force the moves. */
static void *block_end_blocker(char *p) {
  char *end = p + hak_usable_size(p);
  void *b = mmap(end, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  return b == end ? b : NULL;
}

static void test_large_moves(void) {
  struct hak_stats st;
  hak_stats_get(&st);
  unsigned long long allocs = st.large.allocs;
  size_t size = 3u << 20;   /* past a 2 MiB chunk of the arena: a mapping of its own */
  char *p = malloc(size);
  memset(p, 0x5a, size);
  void *blockers[3];
  int forced = 0;
  for (int step = 0; step < 6; step++) {
    if (step % 2 == 0 && (blockers[forced] = block_end_blocker(p))) forced++;
    size_t bigger = size * 3 / 2;
    char *q = realloc(p, bigger);
    CHECK(q && q[0] == 0x5a && q[size - 1] == 0x5a, "large realloc lost content at step %d", step);
    memset(q + size, 0x5a, bigger - size);
    p = q;
    size = bigger;
  }
  hak_stats_get(&st);
  CHECK(forced >= 2, "could not place mappings past the block (%d)", forced);
  CHECK(st.large.allocs - allocs == 1, "a growing large block was copied: %llu large allocations",
        st.large.allocs - allocs);
  free(p);
  for (int i = 0; i < forced; i++) munmap(blockers[i], 4096);
}

/* A large block of up to 2 MiB takes a chunk of the arena when there is
 * one: no system call to map it, none to grow it within the chunk (the
 * same address, its contents kept), a copy to grow past it; freed, the
 * BigCache keeps the chunk for the next one; a trim gives it back to the
 * arena, which hands it out again without mapping. */
static void test_large_chunk(void) {
  if (!hak_arena_size) return;
  hak_trim();
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t maps = st.os_maps;
  unsigned long long allocs = st.large.allocs;
  size_t size = 600u << 10;
  char *p = malloc(size);
  CHECK(hak_in_arena((uintptr_t)p), "a 600 KiB block is not in the arena");
  uintptr_t chunk = (uintptr_t)p & ~(uintptr_t)HAK_SS_MASK;
  CHECK(hak_registry_kind(chunk) == HAK_REG_LARGE, "its chunk is not registered as a large block");
  memset(p, 0x3c, size);
  char *q = realloc(p, (2u << 20) - 8192);
  CHECK(q == p && q[0] == 0x3c && q[size - 1] == 0x3c, "growing within the chunk moved or lost the block");
  memset(q, 0x3c, (2u << 20) - 8192);
  hak_stats_get(&st);
  CHECK(st.os_maps == maps && st.large.allocs - allocs == 1, "growing within the chunk mapped (%llu) or copied (%llu)",
        (unsigned long long)(st.os_maps - maps), st.large.allocs - allocs);
  char *r = realloc(q, 3u << 20);
  CHECK(r && r != q && r[0] == 0x3c && r[(2u << 20) - 8193] == 0x3c, "growing past the chunk lost the contents");
  CHECK(hak_registry_kind(chunk) == HAK_REG_LARGE, "the chunk left behind was not cached");
  free(r);
  char *again = malloc(700u << 10);
  CHECK(((uintptr_t)again & ~(uintptr_t)HAK_SS_MASK) == chunk, "a 700 KiB request did not take the cached chunk");
  free(again);
  hak_trim();
  CHECK(hak_registry_kind(chunk) == HAK_REG_FOREIGN, "a trim left the chunk cached");
  hak_stats_get(&st);
  maps = st.os_maps;
  char *fresh = malloc(1u << 20);
  CHECK(hak_in_arena((uintptr_t)fresh), "a 1 MiB block after a trim is not in the arena");
  fresh[(1u << 20) - 1] = 1;
  hak_stats_get(&st);
  CHECK(st.os_maps == maps, "a chunk of the arena took %llu mappings", (unsigned long long)(st.os_maps - maps));
  free(fresh);
}

/* A freed large block stays mapped in the BigCache for BIGCACHE_DELAY_MS
 * (lengthened as the purge delay is, after the tests before this one), then
 * the next slow path unmaps it. A block above BIGCACHE_MAX_BLOCK is the
 * grace entry (test_bigcache_grace). */
static void test_bigcache_expiry(void) {
  long old_delay = hak_option_get(hak_option_bigcache_delay_ms), old_budget = hak_option_get(hak_option_bigcache_budget);
  CHECK(hak_option_set(hak_option_bigcache_delay_ms, 30) == 0, "set BigCache delay");
  hak_option_set(hak_option_bigcache_budget, 128L << 20);   /* room for the block whatever the cache holds */
  char *a = malloc(5u << 20);
  uintptr_t a_at = (uintptr_t)a;
  escape(a);
  free(a);
  CHECK(hak_registry_kind(a_at) == HAK_REG_LARGE, "freed large block not kept in the BigCache");
  for (int waited = 0; waited < 100 && hak_registry_kind(a_at) != HAK_REG_FOREIGN; waited++) {
    usleep((useconds_t)hak_ace_value(hak_knob_bigcache_delay_ms) * 1000 / 4 + 20000);
    hak_bigcache_tick();   /* as the large path and the purger do */
  }
  CHECK(hak_registry_kind(a_at) == HAK_REG_FOREIGN, "expired BigCache entry still mapped");
  hak_option_set(hak_option_bigcache_delay_ms, old_delay);
  hak_option_set(hak_option_bigcache_budget, old_budget);
}

/* The last block the BigCache refuses stays as its grace entry: a smaller
 * request is cut from it (the rest is the grace entry then), and it goes
 * to the OS when memory is mapped anew, when the option's delay passes, or
 * at a trim, whichever comes first. A block freed twice while it waits
 * there is reported. */
static void test_bigcache_grace(void) {
  long old_max = hak_option_get(hak_option_bigcache_max_block), old_delay = hak_option_get(hak_option_bigcache_delay_ms);
  hak_option_set(hak_option_bigcache_max_block, 1 << 20);   /* every block below is refused */
  hak_option_set(hak_option_bigcache_delay_ms, 60000);
  hak_trim();   /* no cached entry serves the requests below */
  char *big = malloc(24u << 20);
  uintptr_t big_at = (uintptr_t)big & ~(uintptr_t)HAK_SS_MASK;
  escape(big);
  free(big);
  CHECK(hak_registry_kind(big_at) == HAK_REG_LARGE, "a refused block was not kept as the grace entry");
  struct hak_stats st;
  hak_stats_get(&st);
  unsigned long long hits = st.bigcache_hits, misses = st.bigcache_misses;
  char *a = malloc(5u << 20);
  CHECK((uintptr_t)a >= big_at && (uintptr_t)a < big_at + (24u << 20), "5 MiB not cut from the 24 MiB grace entry: %p",
        (void *)a);
  hak_stats_get(&st);
  CHECK(st.bigcache_hits == hits + 1 && st.bigcache_misses == misses,
        "the grace entry's block counted as %llu hits, %llu misses (a hit expected)", st.bigcache_hits - hits,
        st.bigcache_misses - misses);
  memset(a, 1, 5u << 20);
  uintptr_t rest_at = big_at + (((uintptr_t)a + hak_usable_size(a) - big_at + HAK_GUARD + HAK_SS_MASK) &
                                 ~(uintptr_t)HAK_SS_MASK);   /* past the cut mapping's 2 MiB boundary */
  CHECK(hak_registry_kind(rest_at) == HAK_REG_LARGE, "the rest of the grace entry was not kept");
  char *b = malloc(64u << 20);   /* too big for it: a new mapping, the rest goes first */
  CHECK(b && hak_registry_kind(rest_at) == HAK_REG_FOREIGN, "the grace entry outlived a new mapping");
  free(a);   /* the grace entry now */
  uintptr_t a_at = big_at;
  CHECK(hak_registry_kind(a_at) == HAK_REG_LARGE, "the next refused block did not replace the grace entry");
  free(b);   /* replaces it */
  CHECK(hak_registry_kind(a_at) == HAK_REG_FOREIGN, "a replaced grace entry stayed mapped");
  uintptr_t b_at = (uintptr_t)b & ~(uintptr_t)HAK_SS_MASK;
  hak_trim();
  CHECK(hak_registry_kind(b_at) == HAK_REG_FOREIGN, "a trim left the grace entry mapped");

  hak_option_set(hak_option_bigcache_delay_ms, 30);
  char *c = malloc(3u << 20);
  uintptr_t c_at = (uintptr_t)c & ~(uintptr_t)HAK_SS_MASK;
  escape(c);
  free(c);
  CHECK(hak_registry_kind(c_at) == HAK_REG_LARGE, "a refused block was not kept as the grace entry");
  for (int waited = 0; waited < 100 && hak_registry_kind(c_at) != HAK_REG_FOREIGN; waited++) {
    usleep(40000);
    hak_bigcache_tick();   /* as the large path and the purger do */
  }
  CHECK(hak_registry_kind(c_at) == HAK_REG_FOREIGN, "the grace entry outlived BIGCACHE_DELAY_MS");
  hak_option_set(hak_option_bigcache_max_block, old_max);
  hak_option_set(hak_option_bigcache_delay_ms, old_delay);
}

/* The BigCache serves a request from a cached mapping of another size
 * without a new mapping: a bigger one is cut at the 2 MiB boundary after the
 * request, the rest cached on its own (the pages between, unmapped); a smaller one of 4 MiB or more is
 * grown by mremap. The pages and their contents come along. A small one
 * is not grown (its pages may be few). */
static void test_bigcache_fit(void) {
  hak_trim();
  struct hak_stats st;
  const size_t three = (3u << 20) - 64, five = (5u << 20) - 64, eight = (8u << 20) - 64;   /* with the header */
  char *big = malloc(three);
  uintptr_t big_at = (uintptr_t)big & ~(uintptr_t)HAK_SS_MASK;
  memset(big, 0x5a, three);
  escape(big);
  free(big);
  hak_stats_get(&st);
  uint64_t maps = st.os_maps, unmaps = st.os_unmaps;
  char *small = malloc(1u << 20);   /* under half of the cached one */
  escape(small);
  CHECK(((uintptr_t)small & ~(uintptr_t)HAK_SS_MASK) == big_at, "1 MiB request did not take the cached 3 MiB mapping");
  const char *m = (const char *)big_at;   /* blocks start at different lines of their first page */
  CHECK(m[8192] == 0x5a && m[(1u << 20) - 1] == 0x5a, "the cut mapping's pages were not kept");
  CHECK(hak_registry_kind(big_at + HAK_SS_SIZE) == HAK_REG_LARGE, "the rest past 2 MiB was not cached");
  hak_stats_get(&st);
  CHECK(st.os_maps == maps && st.os_unmaps <= unmaps + 1, "cutting a cached mapping took %llu mappings, %llu unmaps",
        (unsigned long long)(st.os_maps - maps), (unsigned long long)(st.os_unmaps - unmaps));
  free(small);   /* cached now: 1.1 MiB at big_at, 1 MiB at 2 MiB past it */

  char *mid = malloc(five);
  memset(mid, 0x6b, five);
  escape(mid);
  free(mid);
  hak_stats_get(&st);
  maps = st.os_maps;
  char *grown = malloc(eight);
  escape(grown);
  int kept = 1;
  m = (const char *)((uintptr_t)grown & ~(uintptr_t)HAK_SS_MASK);
  for (size_t off = 8192; off < five - 4096; off += 4096) kept &= m[off] == 0x6b;
  CHECK(kept, "the 8 MiB request did not grow the cached 5 MiB mapping");
  grown[eight - 1] = 1;
  hak_stats_get(&st);
  CHECK(st.os_maps == maps, "growing a cached mapping mapped memory");

  char *fresh = malloc(three);
  escape(fresh);
  CHECK(((uintptr_t)fresh & ~(uintptr_t)HAK_SS_MASK) != big_at, "a 3 MiB request grew a cached 2 MiB mapping");
  hak_stats_get(&st);
  CHECK(st.os_maps == maps + 1, "a 3 MiB request with only 1 and 2 MiB cached took %llu mappings",
        (unsigned long long)(st.os_maps - maps));
  free(fresh);
  free(grown);
  char *huge = malloc((size_t)5 << 30);   /* past the bins' 4 GiB: grows the 8 MiB entry */
  CHECK(huge != NULL, "a 5 GiB request with entries cached failed");
  if (huge) huge[((size_t)5 << 30) - 1] = 1;
  free(huge);
}

/* SuperSlabs come from the arena, and one given back (no pool slot left)
 * stays in it, unregistered and decommitted, for the next taker. Under
 * TEST_NO_ARENA (run.sh refuses the address space) they are mapped one by
 * one and free finds them through the registry. */
static void test_arena(void) {
  void *p = malloc(100);
  escape(p);
  if (getenv("TEST_NO_ARENA")) {
    CHECK(hak_arena_size == 0, "the arena was reserved under an address-space limit");
    CHECK(!hak_in_arena((uintptr_t)p) && hak_registry_kind((uintptr_t)p) == HAK_REG_SUPERSLAB,
          "block outside a registered SuperSlab");
    free(p);
    return;
  }
  CHECK(hak_arena_size == HAK_ARENA_SIZE && !(hak_arena_base & HAK_SS_MASK), "arena %#lx + %#lx",
        (unsigned long)hak_arena_base, (unsigned long)hak_arena_size);
  CHECK(hak_in_arena((uintptr_t)p), "block %p outside the arena", p);
  free(p);

  long keep = hak_option_get(hak_option_keep_empty_superslabs);
  long slots = hak_option_get(hak_option_shared_pool_slots);
  hak_option_set(hak_option_keep_empty_superslabs, 0);
  hak_option_set(hak_option_shared_pool_slots, 0);
  hak_trim();
  enum { N = 64 };   /* 64 x 100 KB: more than two SuperSlabs */
  static char *blocks[N];
  for (int i = 0; i < N; i++) blocks[i] = malloc(100000);
  uintptr_t last = (uintptr_t)hak_ss_of(blocks[N - 1]);
  CHECK(hak_in_arena(last), "SuperSlab %#lx outside the arena", (unsigned long)last);
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_trim();
  CHECK(hak_registry_kind(last) == HAK_REG_FOREIGN, "given-back SuperSlab still registered");
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t maps = st.os_maps;
  for (int i = 0; i < N; i++) blocks[i] = malloc(100000);
  int again = 0;
  for (int i = 0; i < N; i++) again += (uintptr_t)hak_ss_of(blocks[i]) == last;
  CHECK(again > 0, "the given-back SuperSlab was not taken again");
  hak_stats_get(&st);
  CHECK(st.os_maps == maps, "%llu new mappings instead of given-back SuperSlabs", (unsigned long long)(st.os_maps - maps));
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_option_set(hak_option_keep_empty_superslabs, keep);
  hak_option_set(hak_option_shared_pool_slots, slots);
}

static hak_heap_t *exited_heap;
static void *heap_thread(void *arg) {
  void *p = malloc(64);
  escape(p);
  free(p);
  exited_heap = hak_tls_heap;
  return arg;
}

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

static void test_heap_adoption(void) {
  pthread_t t;
  pthread_create(&t, NULL, heap_thread, NULL);
  pthread_join(t, NULL);
  CHECK(atomic_load(&exited_heap->state) == HAK_HEAP_ABANDONED, "exited thread's heap not abandoned");
  /* its free memory follows the purge delay (twice at most), run by the
   * purger or another thread's tick: up to 10 s */
  int dirty = 1;
  for (int k = 0; k < 100 && (dirty || exited_heap->purge_at); k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    for (int i = 0; i < 1000; i++) {
      void *p = malloc(9000);
      escape(p);
      free(p);
    }
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

/* Blocks another thread frees wait in their owner's inbox; while the owner
 * sleeps (here: waits, calling nothing), the purger takes them back to
 * their slabs (hak_heap_collect_sleeping), which then hold none of them:
 * before, they stayed until the owner's next slow path, with the slabs
 * they hold. */
#define SLEEPER_N 500
static void *free_all_thread(void *arg) {
  void **blocks = arg;
  for (int i = 0; i < SLEEPER_N; i++) free(blocks[i]);
  return NULL;
}

static void test_sleeping_inbox(void) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(1008);
  static void *blocks[SLEEPER_N];
  for (int i = 0; i < SLEEPER_N; i++) escape(blocks[i] = malloc(1008));
  uint64_t used = h->counters[cls].used_blocks;
  pthread_t t;
  pthread_create(&t, NULL, free_all_thread, blocks);
  pthread_join(t, NULL);
  CHECK(atomic_load(&h->inbox[cls]) != NULL, "the blocks freed by another thread are not in the inbox");
  bool waiting = true;
  for (int k = 0; k < 100 && waiting; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    waiting = atomic_load(&h->inbox[cls]) != NULL;
  }
  CHECK(!waiting, "a sleeping thread's inbox still holds the blocks another thread freed");
  CHECK(h->counters[cls].used_blocks + SLEEPER_N <= used, "%llu blocks in use, %llu before %d were freed",
        (unsigned long long)h->counters[cls].used_blocks, (unsigned long long)used, SLEEPER_N);
}

/* A new slab goes, where it can, to free units that last held a slab of its
 * class and are still resident: two classes whose slabs were released come
 * back to their own units whatever the order (without it, the first class
 * asked would take the lowest unit, the other's). */
static unsigned unit_of(const void *p) { return (unsigned)(((uintptr_t)p & HAK_SS_MASK) >> HAK_UNIT_SHIFT); }

static void *affinity_thread(void *arg) {
  char *a = malloc(48), *b = malloc(100);
  escape(a);
  escape(b);
  hak_superslab_t *ss_a = hak_ss_of(a), *ss_b = hak_ss_of(b);
  unsigned ua = unit_of(a), ub = unit_of(b);
  free(a);
  free(b);
  hak_heap_release_all(hak_tls_heap, false);   /* both slabs empty: their units free, still resident */
  char *b2 = malloc(100), *a2 = malloc(48);
  escape(a2);
  escape(b2);
  CHECK(hak_ss_of(b2) == ss_b && unit_of(b2) == ub, "class of 100 B went to unit %u, its slab was at %u", unit_of(b2), ub);
  CHECK(hak_ss_of(a2) == ss_a && unit_of(a2) == ua, "class of 48 B went to unit %u, its slab was at %u", unit_of(a2), ua);
  free(a2);
  free(b2);
  return arg;
}

/* fn in a thread of its own, with no purge in between. */
static void run_unpurged(void *(*fn)(void *)) {
  long delay = hak_option_get(hak_option_purge_delay_ms);
  hak_option_set(hak_option_purge_delay_ms, 60000);
  pthread_t t;
  pthread_create(&t, NULL, fn, NULL);
  pthread_join(t, NULL);
  hak_option_set(hak_option_purge_delay_ms, delay);
}

/* A slab of a class with no resident units of its own takes the free unit
 * whose pages its blocks were carved on most (types.h, touched), not the
 * lowest one: a class that touched a page or two of its unit finds it
 * again. When that unit's last slab began under an earlier thread of the
 * heap (here: as if a new thread adopted it, gen), it keeps resident only
 * the pages the new class's first refill carves on (superslab.c,
 * unit_trim): before, it kept every page, and in a heap that threads with
 * other sizes adopt one after another every free unit ended with all its
 * pages resident (memory threads). */
typedef struct {
  hak_superslab_t *ss;
  unsigned unit, touched;
} free_unit_t;

/* A size from `from` down to 513 B whose tiny class h has no slab, cached
 * block or free unit of (dirty[], the n free units that may be resident),
 * nor is skip's class (skip 0: none); 0 if there is none. */
static size_t new_tiny_size(hak_heap_t *h, const free_unit_t *dirty, unsigned n, size_t from, size_t skip) {
  for (size_t s = from; s > 512; s -= 16) {
    unsigned c = hak_class_of(s);
    bool known = (skip && c == hak_class_of(skip)) || h->warm[c] || h->full[c] || hak_cache_count(&h->cache[c]);
    for (unsigned i = 0; i < n; i++) known |= dirty[i].ss->span_class[dirty[i].unit] == c + 1;
    if (!known) return s;
  }
  return 0;
}

static void *resident_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  hak_heap_release_all(h, true);   /* no free unit of an earlier thread holds pages */
  char *few = malloc(80), *many[80];
  escape(few);
  for (int i = 0; i < 80; i++) escape(many[i] = malloc(1008));
  free(few);
  for (int i = 0; i < 80; i++) free(many[i]);
  hak_heap_release_all(h, false);   /* every slab empty: free units, still resident */
  static free_unit_t dirty[256];
  unsigned n = 0, most = 0;
  hak_superslab_t *low = NULL;
  for (hak_superslab_t *ss = h->superslabs; ss && ss->free_units; ss = ss->next) {
    uint64_t w = atomic_load(&ss->dirty);
    uint32_t avail = ss->free_units & ~HAK_PURGING(w);
    if (avail && (!low || ss < low)) low = ss;
    for (uint32_t c = avail & HAK_DIRTY(w); c && n < 256; c &= c - 1) {
      unsigned u = (unsigned)__builtin_ctz(c);
      dirty[n++] = (free_unit_t){ss, u, ss->touched[u]};
      if (ss->touched[u] > most) most = ss->touched[u];
    }
  }
  unsigned lowest = low ? (unsigned)__builtin_ctz(low->free_units & ~HAK_PURGING(atomic_load(&low->dirty))) : 0;
  unsigned lowest_touched = 0;
  for (unsigned i = 0; i < n; i++)
    if (dirty[i].ss == low && dirty[i].unit == lowest) lowest_touched = dirty[i].touched;
  CHECK(most == HAK_UNIT_SIZE / HAK_PAGE_BYTES && lowest_touched < most,
        "no free unit with every page touched above a less touched one (most %u, lowest unit %u)", most, lowest_touched);
  size_t size = new_tiny_size(h, dirty, n, 1024, 0);
  CHECK(size != 0, "every tiny class above 512 B has a slab or a resident unit");
  char *p = malloc(size ? size : 1);
  escape(p);
  unsigned got = 0;
  for (unsigned i = 0; i < n; i++)
    if (dirty[i].ss == hak_ss_of(p) && dirty[i].unit == unit_of(p)) got = dirty[i].touched;
  CHECK(got == most, "a new class's slab went to a unit with %u pages touched, one had %u", got, most);
  free(p);
  hak_heap_release_all(h, false);
  h->gen++;   /* the next thread */
  size_t other = new_tiny_size(h, dirty, n, size - 16, size);   /* another class new to the heap */
  CHECK(other != 0, "no second tiny class above 512 B new to the heap");
  size = other ? other : size;
  p = malloc(size);
  escape(p);
  hak_superslab_t *ss = hak_ss_of(p);
  unsigned u = unit_of(p), cls = hak_class_of(size);
  for (unsigned i = 0; i < n; i++)
    if (dirty[i].ss == ss && dirty[i].unit == u) got = dirty[i].touched;
  CHECK(got == most, "the next thread's new class went to a unit with %u pages touched, one had %u", got, most);
  size_t need = (u == 0 ? HAK_SS_HEADER : 0) + (size_t)hak_refill_first(cls) * hak_class_size[cls];
  unsigned keep = (unsigned)((need + HAK_PAGE_BYTES - 1) / HAK_PAGE_BYTES), resident = 0;
  unsigned char in[HAK_UNIT_SIZE / HAK_PAGE_BYTES];
  char *unit = (char *)ss + ((uintptr_t)u << HAK_UNIT_SHIFT);
  CHECK(mincore(unit, HAK_UNIT_SIZE, in) == 0, "mincore: %s", strerror(errno));
  for (unsigned i = keep; i < HAK_UNIT_SIZE / HAK_PAGE_BYTES; i++) resident += in[i] & 1;
  CHECK(resident == 0, "a new class's slab (first refill: %u pages) left %u more pages of its unit resident", keep,
        resident);
  CHECK(ss->touched[u] <= keep, "its unit counts %u pages touched, the refill %u", ss->touched[u], keep);
  free(p);
  return arg;
}

/* A flush gives each run of blocks of one unit back to its slab at once
 * (cache.c): after batches of 48-byte blocks freed in the order they came
 * and in reverse, the slabs count in use exactly the blocks the cache
 * holds, and once the cache goes back, no block and no slab. */
static void *flush_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(48);
  static unsigned char *b[6000];
  int bad = 0;
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < 6000; i++) memset(b[i] = malloc(48), round + i, 48);
    for (int i = 0; i < 6000; i++) {
      int k = round & 1 ? 5999 - i : i;
      bad += b[k][0] != (unsigned char)(round + k) || b[k][47] != (unsigned char)(round + k);
      free(b[k]);
    }
    CHECK(h->counters[cls].used_blocks == hak_cache_count(&h->cache[cls]),
          "round %d: slabs count %llu blocks in use, the cache holds %u", round,
          (unsigned long long)h->counters[cls].used_blocks, hak_cache_count(&h->cache[cls]));
  }
  CHECK(bad == 0, "%d blocks changed before their free", bad);
  hak_cache_return(h, cls);
  CHECK(h->counters[cls].used_blocks == 0 && h->counters[cls].slabs == 0,
        "after the cache went back: %llu blocks in use, %llu slabs", (unsigned long long)h->counters[cls].used_blocks,
        (unsigned long long)h->counters[cls].slabs);
  return arg;
}

/* ---- cache growth (cache.c): batches that overflow a class's cache make
 * it grow until a batch round trip needs no flush and no refill; the
 * blocks keep their contents; leaving the heap shrinks it back. In a
 * thread of its own, whose heap starts fresh. The cache options change
 * after the heap is made (a program may set them at any time): the heap
 * keeps the layout it was made with. */
#define GROW_BATCH 1000

typedef struct {
  hak_heap_t *h;
  uint32_t first;
} grow_result_t;

static void *grow_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(16);
  hak_ucache_t *c = &h->cache[cls];
  uint32_t first = hak_cache_cap(c);
  long bytes = hak_option_get(hak_option_cache_bytes), min = hak_option_get(hak_option_cache_min),
       max = hak_option_get(hak_option_cache_max);
  hak_option_set(hak_option_cache_bytes, 64l << 20);
  hak_option_set(hak_option_cache_min, 64);
  hak_option_set(hak_option_cache_max, 4096);
  static unsigned char *blocks[GROW_BATCH];
  uint64_t flushes = 0, refills = 0;
  int bad = 0;
  for (int round = 0; round < 12; round++) {
    if (round == 8) {
      flushes = h->counters[cls].flushes;
      refills = h->counters[cls].refills;
    }
    for (int i = 0; i < GROW_BATCH; i++) {
      blocks[i] = malloc(16);
      memset(blocks[i], round + i, 16);
    }
    for (int i = 0; i < GROW_BATCH; i++) {
      for (int k = 0; k < 16; k++) bad += blocks[i][k] != (unsigned char)(round + i);
      free(blocks[i]);
    }
  }
  hak_option_set(hak_option_cache_bytes, bytes);
  hak_option_set(hak_option_cache_min, min);
  hak_option_set(hak_option_cache_max, max);
  CHECK(bad == 0, "%d bytes of the batches changed", bad);
  CHECK(hak_cache_cap(c) >= GROW_BATCH && hak_cache_cap(c) <= h->cache_room[cls],
        "cache of 16 B holds %u blocks after batches of %d (first %u, room %u)", hak_cache_cap(c), GROW_BATCH, first,
        h->cache_room[cls]);
  CHECK(h->counters[cls].flushes == flushes && h->counters[cls].refills == refills,
        "the last 4 rounds flushed %llu and refilled %llu times", (unsigned long long)(h->counters[cls].flushes - flushes),
        (unsigned long long)(h->counters[cls].refills - refills));
  *(grow_result_t *)arg = (grow_result_t){h, first};
  return NULL;
}

static void test_cache_growth(void) {
  grow_result_t r = {NULL, 0};
  pthread_t t;
  pthread_create(&t, NULL, grow_thread, &r);
  pthread_join(t, NULL);
  unsigned cls = hak_class_of(16);
  CHECK(r.h && hak_cache_cap(&r.h->cache[cls]) == r.first, "the heap left kept a cache of %u blocks (first %u)",
        r.h ? hak_cache_cap(&r.h->cache[cls]) : 0, r.first);
}

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

int main(void) {
  void *first = malloc(1);
  escape(first);
  free(first);
  test_size_classes();
  test_block_check();
  test_aligned_classes();
  test_registry();
  test_arena();
  test_remote_free(16, REMOTE_N);
  test_remote_free(48, REMOTE_N);
  test_remote_free(640, REMOTE_N);
  test_remote_free(20000, 500);
  test_remote_free(300000, 40);
  test_remote_batch();
  test_remote_order(16, 1000, 1000);
  test_remote_order(48, 1000, 1000);
  test_remote_order(640, 1000, 1000);
  test_remote_order(20000, 200, 200);
  test_remote_order(16, 1000, 300);
  test_remote_order(48, 1000, 301);
  test_remote_order(640, 1000, 77);
  test_sweep_idle();
  test_idle_caches();
  test_idle_caches_paced_by_slabs();
  test_empty_superslab();
  test_release();
  test_span();
  test_span_burst();
  test_exited_superslabs();
  test_large();
  test_large_moves();
  test_large_chunk();
  test_bigcache_expiry();
  test_bigcache_grace();
  test_bigcache_fit();
  test_heap_adoption();
#if defined(__x86_64__)
  test_counted_switch();
#endif
  test_sleeping_inbox();
  run_unpurged(affinity_thread);
  run_unpurged(resident_thread);
  run_unpurged(flush_thread);
  test_cache_growth();
  test_stacks();
  return test_done("internal");
}
