/* Drains: the unified caches of a heap whose thread sleeps, taken back to
 * their slabs by another thread (the background purger, malloc_trim) while
 * that thread may be running its fast paths, and the batches of other
 * heaps' blocks it freed, sent to their owners. docs/design/thread-memory.md has
 * the protocol and why it is exact; in short:
 *
 *   drainer (holds the heap's token)      owner (fast paths, no token)
 *   items = end, end = items              pop:  top = t; [compiler fence]
 *   batch owner = NULL                          t < items ? restore, slow
 *   membarrier (the owner's fence)        push: t >= end ? slow
 *   S = top; blocks below S to slabs            *t = p; top = t + 1 (release)
 *   sending ? undo the batches :          remote: sending = 1; [compiler fence]
 *             send them                         owner differs ? slow
 *                                               store; sending = 0 (release)
 *
 * The owner keeps the blocks [S, top) (at most the one operation that was
 * under way); its next slow path, which waits for the token, gives the
 * cache its items back (hak_cache_undrain, from hak_heap_enter). A batch
 * left without an owner opens again on free's slow path, under the token. */
#include "internal.h"

_Static_assert((HAK_CLASSES + 63) / 64 == 2, "hak_heap_enter tests both words of h->drained");

static _Atomic uint64_t caches_drained, blocks_drained, batches_drained;

void hak_drain_stats(struct hak_stats *st) {
  st->cache_drains = atomic_load_explicit(&caches_drained, memory_order_relaxed);
  st->drained_blocks = atomic_load_explicit(&blocks_drained, memory_order_relaxed);
  st->drained_batches = atomic_load_explicit(&batches_drained, memory_order_relaxed);
}

typedef struct {
  void **base[HAK_CACHED_CLASSES];       /* each cache's items before the drain */
  hak_ucache_t *owner[HAK_CLASSES];      /* each batch's owner before the drain, NULL: none */
  uint64_t take[2];                      /* caches to drain */
} drain_t;

/* Before the fence: make both fast paths fail on every cache that holds
 * blocks and was not drained already, and free's on every batch that has
 * an owner. False if there is nothing to take. */
static bool drain_begin(hak_heap_t *h, drain_t *d) {
  bool any = false;
  for (unsigned cls = 0; cls < HAK_CACHED_CLASSES; cls++) {
    hak_ucache_t *c = &h->cache[cls];
    if (h->drained[cls / 64] >> (cls % 64) & 1) continue;   /* drained already, not given back */
    void **items = c->items, **end = c->end;
    if (__atomic_load_n(&c->top, __ATOMIC_RELAXED) == items) continue;
    d->base[cls] = items;
    __atomic_store_n(&c->items, end, __ATOMIC_RELAXED);   /* every pop fails, */
    __atomic_store_n(&c->end, items, __ATOMIC_RELAXED);   /* every push too */
    d->take[cls / 64] |= 1ull << (cls % 64);
    any = true;
  }
  for (unsigned cls = 0; cls < HAK_CLASSES; cls++) {
    hak_remote_batch_t *b = &h->outgoing[cls];
    if ((d->owner[cls] = b->owner)) {   /* the owner's slow paths write it, under the token */
      HAK_STORE_SHARED(b->owner, NULL);   /* every remote free fails */
      any = true;
    }
  }
  return any;
}

/* After a fence that failed, or with no fence: the owner may be in the
 * middle of any fast path; put back what drain_begin changed. */
static void drain_undo(hak_heap_t *h, drain_t *d, bool caches) {
  for (unsigned cls = 0; caches && cls < HAK_CACHED_CLASSES; cls++)
    if (d->take[cls / 64] >> (cls % 64) & 1) {
      hak_ucache_t *c = &h->cache[cls];
      __atomic_store_n(&c->end, c->items, __ATOMIC_RELAXED);
      __atomic_store_n(&c->items, d->base[cls], __ATOMIC_RELAXED);
    }
  for (unsigned cls = 0; cls < HAK_CLASSES; cls++)
    if (d->owner[cls]) HAK_STORE_SHARED(h->outgoing[cls].owner, d->owner[cls]);
}

uint32_t hak_heap_drain(hak_heap_t *h) {
  drain_t d;
  uint32_t sent = 0;
  d.take[0] = d.take[1] = 0;
  if (!drain_begin(h, &d)) return 0;
  if (!hak_os_fence_others()) {
    drain_undo(h, &d, true);
    return 0;
  }
  for (unsigned cls = 0; cls < HAK_CACHED_CLASSES; cls++) {
    if (!(d.take[cls / 64] >> (cls % 64) & 1)) continue;
    hak_ucache_t *c = &h->cache[cls];
    void **at = __atomic_load_n(&c->top, __ATOMIC_ACQUIRE), **base = d.base[cls];
    if (at < base) at = base;   /* a pop's claim on the empty cache, which it puts back */
    if (at > base) {
      hak_slab_put_runs(h, cls, base, (uint32_t)(at - base));
      atomic_fetch_add_explicit(&blocks_drained, (uint64_t)(at - base), memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&caches_drained, 1, memory_order_relaxed);
    h->drained_at[cls] = at;
    h->drained[cls / 64] |= 1ull << (cls % 64);
  }
  /* A remote free that read a batch's owner before the fence set sending
   * before that read, so the fence made it visible: while it is set, that
   * free may still be storing in its batch, which stays. A free that reads
   * the owner after the fence sees NULL and waits for the token. */
  if (__atomic_load_n(&h->sending, __ATOMIC_ACQUIRE)) {
    drain_undo(h, &d, false);
    return 0;
  }
  for (unsigned cls = 0; cls < HAK_CLASSES; cls++)
    if (d.owner[cls]) sent += hak_remote_batch_drain(h, cls, d.owner[cls]);
  atomic_fetch_add_explicit(&batches_drained, sent, memory_order_relaxed);
  return sent;
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
