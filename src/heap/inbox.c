/* The inbox of remote frees: other threads push batches of a heap's blocks
 * on the inbox of their class (free.c); the owner takes them in here, into
 * its cache or back to their slabs. */
#include "internal.h"

/* Secure build: stop unless p, found in container c of a remote-free batch
 * of class cls for heap h, is a free block of one of h's slabs of that
 * class. The report names c, the block whose words were overwritten. */
static void remote_check(hak_heap_t *h, unsigned cls, const void *c, const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (hak_registry_kind(a) == HAK_REG_SUPERSLAB) {
    hak_superslab_t *ss = hak_ss_of(p);
    hak_slab_t *u = hak_unit_of(ss, a);
    if (hak_slab_heap(u) == h && u->cls == cls && hak_is_slab_block(u, a) && ((const uintptr_t *)p)[1] == hak_free_mark(u)) return;
  }
  hak_fatal_corrupt("malloc", c);
}

/* Secure build: check container c, its link to the next one, its count k
 * and the k addresses it lists, which it decodes in place (its link stays
 * encoded: take_remote follows it once more). */
static void remote_check_container(hak_heap_t *h, unsigned cls, void **c, void **next, uint32_t k) {
  remote_check(h, cls, c, c);
  if (next) remote_check(h, cls, c, next);
  if (k > h->outgoing[cls].room) hak_fatal_corrupt("malloc", c);
  for (uint32_t i = 0; i < k; i++) {
    c[3 + i] = hak_link_decode((uintptr_t)c[3 + i], &c[3 + i]);
    remote_check(h, cls, c, c[3 + i]);
  }
}

static void pending_set(hak_heap_t *h, unsigned cls, void **c) {
  h->pending[cls] = c;
  uint64_t bit = 1ull << (cls % 64), w = h->pending_in[cls / 64];
  if (!c != !(w & bit)) HAK_STORE_SHARED(h->pending_in[cls / 64], w ^ bit);
}

/* Container c of class cls's chain: its count into *k, checked in the
 * secure build (which leaves it a free block of a cache); its link. */
static void **container_open(hak_heap_t *h, unsigned cls, void **c, bool counted, uint32_t *k) {
  void **next = hak_link_decode((uintptr_t)c[0], c);
  *k = counted ? hak_batch_count(c) : 0;
  if (counted) hak_batch_prefetch(c);   /* the walk's next misses start (types.h) */
  if (HAK_SECURE) {
    remote_check_container(h, cls, c, next, *k);
    c[0] = (void *)hak_link_end(c);
  }
  return next;
}

/* Walk the chain from container c: the blocks of a plain chain (k is 0)
 * into out[] from at down while at lasts, every other container back to
 * its slab with the blocks it lists. Returns the blocks walked. */
static uint32_t chain_take(hak_heap_t *h, unsigned cls, void **c, bool counted, void **out, uint32_t at) {
  uint32_t n = 0, k;
  for (void **next; c; c = next) {
    next = container_open(h, cls, c, counted, &k);
    n += k + 1;
    if (at) out[--at] = c;
    else hak_slab_put_container(h, cls, c, k);
  }
  return n;
}

/* The refill of class cls's empty cache, whose containers have a count:
 * from its pending chain, which takes the inbox's whole chain when it has
 * none, up to HAK_PENDING_TAKE containers' worth as far as the cache holds
 * them, each with the blocks it lists, the newest freed on top. An inbox
 * of more than HAK_PENDING_MOST caches' worth goes back to its slabs
 * instead (the refill then takes from them): a producer whose consumers
 * freed that much while it did not allocate keeps its slabs from emptying
 * no longer than it did before the chain. */
static uint32_t take_pending(hak_heap_t *h, unsigned cls) {
  void **c = h->pending[cls];
  uint32_t cap = hak_cache_cap(&h->cache[cls]);
  if (!c) {
    uintptr_t w = atomic_load_explicit(&h->inbox[cls], memory_order_relaxed);
    if (!w) return 0;
    if (hak_inbox_blocks(w) > HAK_PENDING_MOST * cap) {
      hak_heap_take_remote(h, cls, false);
      return 0;
    }
    c = hak_inbox_first(atomic_exchange_explicit(&h->inbox[cls], 0, memory_order_acquire));
  }
  void **out = h->cache[cls].items;
  uint32_t most = h->outgoing[cls].room + 1u, n = 0, k;   /* most: a container's blocks */
  uint32_t at = HAK_PENDING_TAKE * most < cap ? HAK_PENDING_TAKE * most : cap;   /* filled from there down */
  while (c && at >= most && hak_batch_count(c) + 1 <= at) {
    void **next = container_open(h, cls, c, true, &k);
    at -= k;
    memcpy(out + at, c + 3, k * sizeof *out);   /* freed after c, the newest last */
    out[--at] = c;
    n += k + 1;
    c = next;
  }
  pending_set(h, cls, c);
  if (c && !n) {   /* the cache cannot hold a container (it shrank): all of them back to their slabs */
    hak_heap_take_remote(h, cls, false);
    return 0;
  }
  if (at) memmove(out, out + at, n * sizeof *out);
  if (c) __builtin_prefetch(c, 1);   /* the next refill's first */
  HAK_COUNT(h->counters[cls].remote_received, n);
  return n;
}

/* Take the inbox of class cls: with into_cache (the class's cache is
 * empty), some of it into the cache, else all of it back to their slabs,
 * with the class's pending chain. A class whose containers have a count
 * refills from its pending chain (take_pending). One whose blocks come in
 * a plain chain, each alone, takes as much as three quarters of the cache
 * hold into the cache, the cache first doubling once for an inbox four
 * times that or more (hak_cache_room_for); the inbox word gives the count
 * (hak_inbox_blocks), and the cache is filled from its end, so that, popped
 * from its top, it hands out the most recently freed first, as it does
 * with its own thread's frees (docs/design/tuning.md, "Remote-free
 * batches"); what does not fit (the oldest) goes back to its slabs. Blocks
 * in the cache or pending stay in use as far as their slabs know, like any
 * cached block. A container goes back with the blocks it lists, as it
 * stands where they lie in its unit (hak_slab_put_container), or after
 * them: returning it may empty its slab, whose pages may then be
 * decommitted. Returns the number put in the cache. */
uint32_t hak_heap_take_remote(hak_heap_t *h, unsigned cls, bool into_cache) {
  bool counted = hak_batch_counted(cls);
  if (into_cache && counted) return take_pending(h, cls);
  uint32_t n = chain_take(h, cls, h->pending[cls], counted, NULL, 0), taken = 0;
  if (h->pending[cls]) pending_set(h, cls, NULL);
  uintptr_t w = atomic_load_explicit(&h->inbox[cls], memory_order_relaxed) ? atomic_exchange_explicit(&h->inbox[cls], 0, memory_order_acquire) : 0;
  void **out = NULL;
  if (w && into_cache) {   /* the cache is filled from its end */
    uint32_t blocks = hak_inbox_blocks(w), room = hak_cache_room_for(h, cls, blocks);
    taken = blocks < room ? blocks : room;   /* blocks: the chain's, or HAK_INBOX_MAX of a longer one */
    out = h->cache[cls].items;               /* where the growth moved them */
  }
  n += chain_take(h, cls, hak_inbox_first(w), counted, out, taken);
  HAK_COUNT(h->counters[cls].remote_received, n);
  return taken;
}

void hak_heap_collect_inboxes(hak_heap_t *h, const uint64_t *skip) {
  enum { GROUP = 8 };
  _Static_assert(HAK_CLASSES % GROUP == 0, "the classes come in whole groups");
  for (unsigned g = 0; g < HAK_CLASSES; g += GROUP)
    if (hak_inboxes_any(h, g, GROUP))
      for (unsigned c = g; c < g + GROUP; c++)
        if (!skip || !(skip[c / 64] >> (c % 64) & 1)) hak_heap_take_remote(h, c, false);
  for (unsigned w = 0; w < (HAK_CLASSES + 63) / 64; w++)   /* pending chains of classes whose inbox is empty */
    for (uint64_t m = h->pending_in[w] & ~(skip ? skip[w] : 0); m; m &= m - 1)
      hak_heap_take_remote(h, w * 64 + (unsigned)__builtin_ctzll(m), false);
}
