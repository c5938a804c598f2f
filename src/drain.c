/* Drains: the unified caches of a heap whose thread sleeps, taken back to
 * their slabs by another thread (the background purger, malloc_trim) while
 * that thread may be running its fast paths. docs/thread-memory.md has the
 * protocol and why it is exact; in short:
 *
 *   drainer (holds the heap's token)      owner (fast paths, no token)
 *   items = end, end = items              pop:  top = t; [compiler fence]
 *   membarrier (the owner's fence)              t < items ? restore, slow
 *   S = top; blocks below S to slabs      push: t >= end ? slow
 *                                               *t = p; top = t + 1 (release)
 *
 * The owner keeps the blocks [S, top) (at most the one operation that was
 * under way); its next slow path, which waits for the token, gives the
 * cache its items back (hak_cache_undrain, from hak_heap_enter). */
#include "internal.h"

_Static_assert((HAK_CLASSES + 63) / 64 == 2, "hak_heap_enter tests both words of h->drained");

static _Atomic uint64_t caches_drained, blocks_drained;

void hak_drain_stats(struct hak_stats *st) {
  st->cache_drains = atomic_load_explicit(&caches_drained, memory_order_relaxed);
  st->drained_blocks = atomic_load_explicit(&blocks_drained, memory_order_relaxed);
}

bool hak_cache_drain(hak_heap_t *h) {
  void **base[HAK_CACHED_CLASSES];
  uint64_t take[2] = {0, 0};
  for (unsigned cls = 0; cls < HAK_CACHED_CLASSES; cls++) {
    hak_ucache_t *c = &h->cache[cls];
    if (h->drained[cls / 64] >> (cls % 64) & 1) continue;   /* drained already, not given back */
    void **items = c->items, **end = c->end;
    if (__atomic_load_n(&c->top, __ATOMIC_RELAXED) == items) continue;
    base[cls] = items;
    __atomic_store_n(&c->items, end, __ATOMIC_RELAXED);   /* every pop fails, */
    __atomic_store_n(&c->end, items, __ATOMIC_RELAXED);   /* every push too */
    take[cls / 64] |= 1ull << (cls % 64);
  }
  if (!(take[0] | take[1])) return false;
  bool fenced = hak_os_fence_others();
  for (unsigned cls = 0; cls < HAK_CACHED_CLASSES; cls++) {
    if (!(take[cls / 64] >> (cls % 64) & 1)) continue;
    hak_ucache_t *c = &h->cache[cls];
    if (!fenced) {   /* no fence: the owner may be mid-operation; undo, take nothing */
      __atomic_store_n(&c->end, c->items, __ATOMIC_RELAXED);
      __atomic_store_n(&c->items, base[cls], __ATOMIC_RELAXED);
      continue;
    }
    void **at = __atomic_load_n(&c->top, __ATOMIC_ACQUIRE);
    if (at < base[cls]) at = base[cls];   /* a pop's claim on the empty cache, which it puts back */
    if (at > base[cls]) {
      hak_slab_put_runs(h, cls, base[cls], (uint32_t)(at - base[cls]));
      atomic_fetch_add_explicit(&blocks_drained, (uint64_t)(at - base[cls]), memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&caches_drained, 1, memory_order_relaxed);
    h->drained_at[cls] = at;
    h->drained[cls / 64] |= 1ull << (cls % 64);
  }
  return fenced;
}

/* Each drained cache starts again in its first items (hak_cache_restart)
 * with the blocks [S, top) the drain left it. */
void hak_cache_undrain(hak_heap_t *h) {
  for (unsigned cls = 0; cls < HAK_CACHED_CLASSES; cls++) {
    if (!(h->drained[cls / 64] >> (cls % 64) & 1)) continue;
    void **at = h->drained_at[cls], **top = h->cache[cls].top;
    uint32_t kept = top > at ? (uint32_t)(top - at) : 0, room = h->cache_first[cls];
    if (kept > room) {
      hak_slab_put_runs(h, cls, at + room, kept - room);
      kept = room;
    }
    hak_cache_restart(h, cls, at, kept);
  }
  h->drained[0] = h->drained[1] = 0;
}
