/* Frees from other threads: blocks come back to their owner's inbox, in
 * batches, most recently freed first, and are reused; the release tick's
 * sweep takes the inbox of an idle class, and the purger the inbox of a
 * thread that sleeps. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internals.h"

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

/* Sorts the n blocks v[] and counts those malloc handed out more than once. */
static int handed_twice(void **v, int n) {
  qsort(v, (size_t)n, sizeof(void *), cmp_ptr);
  int twice = 0;
  for (int i = 1; i < n; i++) twice += v[i] == v[i - 1];
  return twice;
}

/* Blocks in the chain of the inbox word w of a class of HAK_BATCH_COUNTED
 * bytes or more, walked: each container counts itself and those it lists. */
static uint32_t chain_blocks(uintptr_t w) {
  uint32_t n = 0;
  for (void **c = hak_inbox_first(w); c; c = hak_link_decode((uintptr_t)c[0], c)) n += 1 + hak_batch_count(c);
  return n;
}

/* Blocks freed by another thread come back to the owner (inbox, then cache
 * or slabs) and are reused: in a plain chain (16 bytes), in containers
 * (48, 640 bytes) and for a mid class. */
static void check_remote_free(size_t size, int n) {
  remote_n = n;
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(size);
  for (int i = 0; i < n; i++) remote_blocks[i] = malloc(size);
  hak_slab_t *s = hak_slab_of(hak_ss_of(remote_blocks[0]), (uintptr_t)remote_blocks[0]);
  uint32_t used_before = s->used;
  pthread_t t;
  pthread_create(&t, NULL, remote_free_thread, NULL);
  pthread_join(t, NULL);
  CHECK(atomic_load(&h->inbox[cls]) != 0, "remote frees did not reach the owner's inbox");
  CHECK(s->used == used_before, "remote free changed the owner's count");
  hak_heap_collect_inboxes(h, NULL);
  CHECK(atomic_load(&h->inbox[cls]) == 0, "collect left the inbox");
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

/* Blocks the refill of an empty cache of class cls (of cap blocks) takes
 * from the inbox word w, whose containers have a count: the newest ones as
 * long as a whole container still fits HAK_PENDING_TAKE containers' worth,
 * within the cache; none from an inbox of more than HAK_PENDING_MOST
 * caches' worth, which goes back to its slabs (inbox.c). */
static uint32_t refill_takes(hak_heap_t *h, unsigned cls, uintptr_t w, uint32_t cap) {
  if (hak_inbox_blocks(w) > HAK_PENDING_MOST * cap) return 0;
  uint32_t most = h->outgoing[cls].room + 1, at = HAK_PENDING_TAKE * most < cap ? HAK_PENDING_TAKE * most : cap, n = 0;
  for (void **c = hak_inbox_first(w); c && at >= most && hak_batch_count(c) + 1 <= at; c = hak_link_decode((uintptr_t)c[0], c)) {
    at -= hak_batch_count(c) + 1;
    n += hak_batch_count(c) + 1;
  }
  return n;
}

/* Blocks freed by another thread come back most recently freed first, as
 * the thread's own frees do: a refill lays them in the class's empty
 * cache, whose top malloc pops (a plain chain, containers, a mid class).
 * A plain chain fills three quarters of the cache, the oldest of the rest
 * going back to their slabs, and an inbox of four times that or more (a
 * producer's blocks coming back from its consumers) first doubles the
 * cache, within its room. Containers come a few at a time (refill_takes):
 * the rest waits as the class's pending chain, in use as far as the slabs
 * know, until the next refills or a collection; an inbox of more than
 * HAK_PENDING_MOST caches' worth goes back to its slabs at once. */
static void check_remote_order(size_t size, int n) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(size);
  hak_ucache_t *c = &h->cache[cls];
  bool counted = hak_batch_counted(cls);
  remote_n = n;
  for (int i = 0; i < n; i++) remote_blocks[i] = malloc(size);
  pthread_t t;
  pthread_create(&t, NULL, remote_free_thread, NULL);
  pthread_join(t, NULL);
  hak_cache_return(h, cls);   /* empty, at its first capacity */
  uint32_t cap = hak_cache_cap(c), fits = cap - cap / 4, room = h->cache_room[cls];
  uint32_t twice = 2 * cap < room ? 2 * cap : room;
  bool counted_pends = counted && (uint32_t)n <= HAK_PENDING_MOST * cap;
  uint32_t expect = counted ? refill_takes(h, cls, atomic_load(&h->inbox[cls]), cap) : 0;
  uint64_t used = h->counters[cls].used_blocks;
  uint32_t got = hak_heap_take_remote(h, cls, true);
  uint32_t grown = hak_cache_cap(c), holds = grown - grown / 4;
  CHECK(grown == (!counted && (uint32_t)n / 4 >= fits ? twice : cap), "size %zu: an inbox of %d made a cache of %u (room %u) one of %u",
        size, n, cap, room, grown);
  if (counted)
    CHECK(got == expect && (got > 0) == counted_pends && got < (uint32_t)n, "size %zu: %u of %d remotely freed blocks taken, not %u",
          size, got, n, expect);
  else
    CHECK(got == ((uint32_t)n < holds ? (uint32_t)n : holds), "size %zu: %u of %d remotely freed blocks taken by a cache of %u",
          size, got, n, grown);
  uint32_t back = counted_pends ? 0 : (uint32_t)n - got;
  CHECK(h->counters[cls].used_blocks + back == used, "size %zu: %llu blocks in use, %llu before %u went back",
        size, (unsigned long long)h->counters[cls].used_blocks, (unsigned long long)used, back);
  CHECK(counted_pends == (h->pending[cls] != NULL) && counted_pends == (h->pending_in[cls / 64] >> (cls % 64) & 1),
        "size %zu: the pending chain is %p", size, (void *)h->pending[cls]);
  int newest_first = 0;
  for (uint32_t j = 0; j < got; j++) newest_first += c->items[j] == remote_blocks[n - (int)got + (int)j];
  CHECK(newest_first == (int)got, "size %zu: %d of %u blocks come back most recently freed first", size, newest_first, got);
  c->top = c->items + got;
  hak_cache_return(h, cls);
  CHECK(hak_cache_cap(c) == cap, "size %zu: the cache went back to %u blocks, not %u", size, hak_cache_cap(c), cap);
  used = h->counters[cls].used_blocks;
  hak_heap_collect_inboxes(h, NULL);
  CHECK(!h->pending[cls] && !(h->pending_in[cls / 64] >> (cls % 64) & 1), "size %zu: a collection left the pending chain", size);
  CHECK(h->counters[cls].used_blocks + (n - got - back) == used, "size %zu: the collection took %llu pending blocks back, not %u",
        size, (unsigned long long)(used - h->counters[cls].used_blocks), n - got - back);
}

/* A block's payload words (2 on) as the test wrote them. */
static uintptr_t payload(const uintptr_t *w, size_t j) { return (uintptr_t)w ^ (j * 0x9e3779b97f4a7c15u); }

/* A refill that takes part of an overflowing inbox writes no block but the
 * batches' containers, in the cache or back in the slabs: a container
 * whose blocks all lie in its own unit goes on its slab's free list as it
 * stands (hak_slab_put_container), where the blocks used to be copied into
 * a container made of the first of them. Every block comes back once. */
static void check_remote_containers(size_t size, int n) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(size);
  size_t words = size / sizeof(uintptr_t);
  remote_n = n;
  for (int i = 0; i < n; i++) {
    uintptr_t *w = remote_blocks[i] = malloc(size);
    for (size_t j = 2; j < words; j++) w[j] = payload(w, j);
  }
  pthread_t t;
  pthread_create(&t, NULL, remote_free_thread, NULL);
  pthread_join(t, NULL);
  /* exempt: the containers, and the blocks of those that span units */
  static void *exempt[REMOTE_N];
  static void **chain[REMOTE_N];
  int ne = 0, nc = 0, whole = 0;
  for (void **c = hak_inbox_first(atomic_load(&h->inbox[cls])); c; c = hak_link_decode((uintptr_t)c[0], c)) {
    uint32_t k = hak_batch_count(c);
    chain[nc] = c;
    bool one_unit = true;
    for (uint32_t j = 0; j < k; j++)
      one_unit &= ((uintptr_t)hak_link_decode((uintptr_t)c[3 + j], &c[3 + j]) ^ (uintptr_t)c) >> HAK_UNIT_SHIFT == 0;
    for (uint32_t j = 0; !one_unit && j < k; j++) exempt[ne++] = hak_link_decode((uintptr_t)c[3 + j], &c[3 + j]);
    exempt[ne++] = c;
    nc++;
    whole += one_unit;
  }
  CHECK(nc > 0 && whole * 2 >= nc, "size %zu: %d of %d containers list blocks of their own unit only", size, whole, nc);
  /* A container's hint, if any, is the container HAK_BATCH_HINT older
   * (types.h); a batch's first ones have none, nor the secure build's. */
  int hinted = 0, wrong = 0;
  for (int i = 0; i < nc; i++) {
    uintptr_t hint = (uintptr_t)chain[i][2] >> HAK_COUNT_BITS;
    hinted += hint != 0;
    wrong += hint && (i + HAK_BATCH_HINT >= nc || hint != (uintptr_t)chain[i + HAK_BATCH_HINT]);
  }
  CHECK(wrong == 0, "size %zu: %d of %d containers' hints are not the container %d older", size, wrong, hinted,
        HAK_BATCH_HINT);
  CHECK(HAK_SECURE ? hinted == 0 : size != 64 || hinted * 2 >= nc, "size %zu: %d of %d containers have a hint", size,
        hinted, nc);
  qsort(exempt, (size_t)ne, sizeof(void *), cmp_ptr);
  hak_cache_return(h, cls);
  uint64_t used = h->counters[cls].used_blocks;
  uint32_t got = hak_heap_take_remote(h, cls, true);
  CHECK(got < (uint32_t)n, "size %zu: a cache took all %d blocks of its inbox", size, n);
  if ((uint32_t)n <= HAK_PENDING_MOST * hak_cache_cap(&h->cache[cls]))
    CHECK(h->counters[cls].used_blocks == used && h->pending[cls], "size %zu: %d blocks left pending, %llu went back", size,
          n - (int)got, (unsigned long long)(used - h->counters[cls].used_blocks));
  else
    CHECK(got == 0 && !h->pending[cls], "size %zu: the refill of an inbox of %d took %u, left %p pending", size, n, got,
          (void *)h->pending[cls]);
  hak_heap_collect_inboxes(h, NULL);
  CHECK(h->counters[cls].used_blocks + (uint64_t)(n - (int)got) == used, "size %zu: %d blocks went back, %llu counted",
        size, n - (int)got, (unsigned long long)(used - h->counters[cls].used_blocks));
  int written = 0;
  for (int i = 0; i < n; i++) {
    uintptr_t *w = remote_blocks[i];
    if (bsearch(&remote_blocks[i], exempt, (size_t)ne, sizeof(void *), cmp_ptr)) continue;
    for (size_t j = 2; j < words; j++)
      if (w[j] != payload(w, j)) {
        written++;
        break;
      }
  }
  CHECK(written == 0, "size %zu: the refill wrote into %d blocks that no container holds", size, written);
  static void *again[REMOTE_N];
  for (int i = 0; i < n; i++) again[i] = malloc(size);
  int twice = handed_twice(again, n);
  CHECK(twice == 0, "size %zu: %d blocks handed out twice after the refill", size, twice);
  for (int i = 0; i < n; i++) free(again[i]);
}

static void test_remote_containers(void) {
  check_remote_containers(64, 1000);
  check_remote_containers(64, REMOTE_N);
  check_remote_containers(256, 2000);
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
  CHECK(atomic_load(&h->inbox[idle]) == 0, "the sweep left the inbox of a class that has not refilled");
  CHECK(atomic_load(&h->inbox[busy]) != 0, "the sweep took the inbox of a class that refilled since the last");
  hak_heap_collect_idle(h);
  CHECK(atomic_load(&h->inbox[busy]) == 0, "a second sweep left the inbox of a class that did not refill since");
  for (int i = 0; i < nd; i++) free(drained[i]);
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

/* Blocks in an inbox of a class of HAK_BATCH_COUNTED bytes or more
 * (chain_blocks); the inbox word's count must say the same. */
static uint32_t inbox_blocks(_Atomic(uintptr_t) *inbox) {
  uintptr_t w = atomic_load(inbox);
  uint32_t n = chain_blocks(w);
  CHECK(hak_inbox_blocks(w) == n, "the inbox counts %u blocks, its containers %u", hak_inbox_blocks(w), n);
  return n;
}

static void *batch_thread(void *arg) {
  _Atomic(uintptr_t) *inbox = &batch.owner->inbox[batch.cls];
  for (int i = 0; i < 3; i++) free(batch.blocks[i]);
  CHECK(atomic_load(inbox) == 0, "a partial batch reached the owner before it filled up");
  hak_remote_flush_all(hak_heap_get());   /* as a trim or an exit does */
  uint32_t n = inbox_blocks(inbox);
  CHECK(n == 3, "after the flush the inbox holds %u blocks, not 3", n);
  void **c = hak_inbox_first(atomic_load(inbox));
  CHECK(c && !c[0], "3 blocks of 100 bytes did not travel in one container");
  hak_heap_take_remote(batch.owner, batch.cls, false);   /* the owner is parked in join */
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
  CHECK(atomic_load(inbox) == 0, "after trim the owner's inbox still holds %u blocks", inbox_blocks(inbox));
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
  hak_heap_collect_inboxes(batch.owner, NULL);
  for (uint32_t i = 4 + batch.limit; i < BATCH_BLOCKS; i++) free(batch.blocks[i]);
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
  CHECK(atomic_load(&h->inbox[cls]) != 0, "the blocks freed by another thread are not in the inbox");
  bool waiting = true;
  for (int k = 0; k < 100 && waiting; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    waiting = atomic_load(&h->inbox[cls]) != 0;
  }
  CHECK(!waiting, "a sleeping thread's inbox still holds the blocks another thread freed");
  CHECK(h->counters[cls].used_blocks + SLEEPER_N <= used, "%llu blocks in use, %llu before %d were freed",
        (unsigned long long)h->counters[cls].used_blocks, (unsigned long long)used, SLEEPER_N);
}

/* A refill takes a few containers of the inbox and leaves the rest as its
 * class's pending chain; while the thread sleeps, the purger takes that
 * back to the slabs too. And the release tick's sweep takes the pending
 * chain of a class that has not refilled since the sweep before. */
static void test_sleeping_pending(void) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(1008);
  static void *blocks[SLEEPER_N];
  for (int i = 0; i < SLEEPER_N; i++) escape(blocks[i] = malloc(1008));
  pthread_t t;
  pthread_create(&t, NULL, free_all_thread, blocks);
  pthread_join(t, NULL);
  hak_cache_return(h, cls);
  void *p = malloc(1008);   /* the refill */
  escape(p);
  CHECK(h->pending[cls] && !atomic_load(&h->inbox[cls]), "a refill of an inbox of %d blocks left no pending chain", SLEEPER_N);
  uint64_t used = h->counters[cls].used_blocks;
  bool waiting = true;
  for (int k = 0; k < 100 && waiting; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    waiting = HAK_LOAD_SHARED(h->pending_in[cls / 64]) >> (cls % 64) & 1;
  }
  CHECK(!waiting, "a sleeping thread's pending chain still holds the blocks another thread freed");
  uint32_t cap = hak_cache_cap(&h->cache[cls]);
  CHECK(h->counters[cls].used_blocks + SLEEPER_N - cap <= used, "%llu blocks in use, %llu before the pending chain went back",
        (unsigned long long)h->counters[cls].used_blocks, (unsigned long long)used);
  free(p);

  for (int i = 0; i < SLEEPER_N; i++) escape(blocks[i] = malloc(1008));
  pthread_create(&t, NULL, free_all_thread, blocks);
  pthread_join(t, NULL);
  hak_cache_return(h, cls);
  hak_heap_collect_idle(h);
  escape(p = malloc(1008));   /* a refill since the sweep */
  CHECK(h->pending[cls] != NULL, "a refill of an inbox of %d blocks left no pending chain", SLEEPER_N);
  hak_heap_collect_idle(h);
  CHECK(h->pending[cls] != NULL, "the sweep took the pending chain of a class that refilled since the last");
  hak_heap_collect_idle(h);
  CHECK(h->pending[cls] == NULL, "a second sweep left the pending chain of a class that did not refill since");
  free(p);
}

static void test_remote_free(void) {
  check_remote_free(16, REMOTE_N);
  check_remote_free(48, REMOTE_N);
  check_remote_free(640, REMOTE_N);
  check_remote_free(20000, 500);
  check_remote_free(300000, 40);
}

static void test_remote_order(void) {
  check_remote_order(16, 100);
  check_remote_order(16, 500);
  check_remote_order(16, 1000);
  check_remote_order(16, REMOTE_N);
  check_remote_order(48, 1000);
  check_remote_order(640, 1000);
  check_remote_order(20000, 200);
}

/* An inbox of more blocks than its word counts (HAK_INBOX_MAX) loses none:
 * the count stops there, beyond HAK_PENDING_MOST caches' worth, so the
 * refill sends every block back to its slab, to be handed out once. */
enum { OVERFLOW_N = HAK_INBOX_MAX + 1000 };
static void **overflow_blocks;

static void *overflow_free_thread(void *arg) {
  for (int i = 0; i < OVERFLOW_N; i++) free(overflow_blocks[i]);
  return arg;   /* its exit sends the last batch */
}

static void test_inbox_overflow(void) {
  const size_t size = 64;
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(size);
  hak_ucache_t *c = &h->cache[cls];
  overflow_blocks = malloc(OVERFLOW_N * sizeof(void *));
  for (int i = 0; i < OVERFLOW_N; i++) overflow_blocks[i] = malloc(size);
  pthread_t t;
  pthread_create(&t, NULL, overflow_free_thread, NULL);
  pthread_join(t, NULL);
  uintptr_t w = atomic_load(&h->inbox[cls]);
  uint32_t walked = chain_blocks(w);
  CHECK(walked == OVERFLOW_N && hak_inbox_blocks(w) == HAK_INBOX_MAX, "an inbox of %u blocks of %d counts %u", walked,
        OVERFLOW_N, hak_inbox_blocks(w));
  hak_cache_return(h, cls);
  uint64_t used = h->counters[cls].used_blocks;
  uint32_t got = hak_heap_take_remote(h, cls, true);
  CHECK(got == 0 && !h->pending[cls], "a refill took %u blocks of an overflowing inbox into a cache of %u", got,
        hak_cache_cap(c));
  CHECK(h->counters[cls].used_blocks + (uint64_t)OVERFLOW_N == used, "%llu blocks went back, not %d",
        (unsigned long long)(used - h->counters[cls].used_blocks), OVERFLOW_N);
  c->top = c->items + got;
  for (int i = 0; i < OVERFLOW_N; i++) overflow_blocks[i] = malloc(size);
  int twice = handed_twice(overflow_blocks, OVERFLOW_N);
  CHECK(twice == 0, "%d blocks handed out twice after an overflowing inbox", twice);
  for (int i = 0; i < OVERFLOW_N; i++) free(overflow_blocks[i]);
  free(overflow_blocks);
}

/* Rounds of a random number of blocks freed by another thread and a
 * random number allocated again: whichever way the refills take the inbox
 * (the pending chain, or an inbox too large for it sent to the slabs; a
 * plain chain for 16 bytes), no block is handed out twice, and each keeps
 * what was written into it. */
static void test_remote_rounds(void) {
  static const size_t sizes[] = {16, 64, 256};
  static void *got[REMOTE_N];
  unsigned seed = 7;
  for (unsigned z = 0; z < sizeof sizes / sizeof *sizes; z++) {
    size_t size = sizes[z];
    int twice = 0, spoiled = 0;
    for (int round = 0; round < 60; round++) {
      remote_n = 1 + rand_r(&seed) % REMOTE_N;
      for (int i = 0; i < remote_n; i++) remote_blocks[i] = malloc(size);
      pthread_t t;
      pthread_create(&t, NULL, remote_free_thread, NULL);
      pthread_join(t, NULL);
      int m = 1 + rand_r(&seed) % REMOTE_N;
      for (int i = 0; i < m; i++) memset(got[i] = malloc(size), i & 0xff, size);
      for (int i = 0; i < m; i++) spoiled += ((unsigned char *)got[i])[size - 1] != (i & 0xff);
      twice += handed_twice(got, m);
      for (int i = 0; i < m; i++) free(got[i]);
    }
    CHECK(twice == 0 && spoiled == 0, "size %zu: %d blocks handed out twice, %d overwritten, in rounds of remote frees", size,
          twice, spoiled);
  }
}

static const test_case_t cases[] = {
    {"remote_free", test_remote_free},
    {"remote_batch", test_remote_batch},
    {"remote_order", test_remote_order},
    {"remote_containers", test_remote_containers},
    {"inbox_overflow", test_inbox_overflow},
    {"remote_rounds", test_remote_rounds},
    {"sweep_idle", test_sweep_idle},
    {"sleeping_inbox", test_sleeping_inbox},
    {"sleeping_pending", test_sleeping_pending},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("remote", cases, argc, argv); }
