/* The unified cache slow paths: batch refill from the warm pool (or a fresh
 * slab) when a class's cache is empty, batch flush back to the slabs when it
 * is full. The fast paths themselves are inline in fast_path.h. */
#include <errno.h>

#include "internal.h"

#define FLUSH_ALL_AFTER 4   /* consecutive flushes of a class before one returns the whole cache */

/* Blocks first..end-1 of slab s have been carved: free accepts them now. The
 * limit of each unit they start in becomes the carved count (types.h), and
 * the units they lie on count the pages up to their end as touched. */
static void slab_accept(hak_slab_t *s, uint32_t first, uint32_t end) {
  hak_superslab_t *ss = hak_slab_ss(s);
  uint32_t bs = hak_class_size[s->cls];
  uintptr_t at = s->start - (uintptr_t)ss;   /* of block 0, in the SuperSlab */
  uintptr_t to = at + (uintptr_t)end * bs;   /* of the last block's end */
  hak_slab_t *slabs = hak_ss_slabs(ss);
  unsigned u = (unsigned)((at + (uintptr_t)first * bs) >> HAK_UNIT_SHIFT);
  unsigned last = (unsigned)((at + (uintptr_t)(end - 1) * bs) >> HAK_UNIT_SHIFT);
  for (unsigned i = u; i <= last; i++) __atomic_store_n(&slabs[i].limit, end, __ATOMIC_RELEASE);   /* after the geometry */
  for (unsigned i = u; i <= (unsigned)((to - 1) >> HAK_UNIT_SHIFT); i++) {
    uintptr_t in = to - ((uintptr_t)i << HAK_UNIT_SHIFT);
    uint32_t pages = in >= HAK_UNIT_SIZE ? HAK_UNIT_SIZE / HAK_PAGE_BYTES : (uint32_t)((in + HAK_PAGE_BYTES - 1) / HAK_PAGE_BYTES);
    if (HAK_LOAD_SHARED(ss->touched[i]) < pages) HAK_STORE_SHARED(ss->touched[i], (uint8_t)pages);
  }
}

/* Secure build: stop unless p, a link or an address that container c of
 * slab s holds, is a block of s, and (listed) a free one. */
static void container_check(hak_slab_t *s, void **c, void *p, bool listed) {
  hak_superslab_t *ss = hak_slab_ss(s);
  uintptr_t a = (uintptr_t)p;
  if (hak_ss_of(p) != ss || hak_slab_of(ss, a) != s || !hak_is_slab_block(hak_unit_of(ss, a), a) ||
      (listed && ((uintptr_t *)p)[1] != hak_free_mark_at(p)))
    hak_fatal_corrupt("malloc", c);
}

/* Move up to want free blocks of slab s into out[]: freed blocks first, then
 * never-used ones from the uncarved tail (lowest address on top), so that a
 * slab's untouched pages stay untouched while it has blocks to reuse. A
 * container gives the addresses it lists from its last, and itself, below
 * them, when it gives them all (the secure build leaves it as a block of a
 * cache): the order of slab_list.c, popped from the top. */
static uint32_t slab_take(hak_heap_t *h, hak_slab_t *s, void **out, uint32_t want) {
  uint32_t n = 0;
  bool counted = hak_batch_counted(s->cls);
  while (n < want && s->free) {
    void **c = s->free;
    uint32_t k = counted ? (uint32_t)(uintptr_t)c[2] : 0;
    void **next = hak_link_decode((uintptr_t)c[0], c);
    if (HAK_SECURE && (((uintptr_t *)c)[1] != hak_free_mark_at(c) || k > hak_container_room(s->cls)))
      hak_fatal_corrupt("malloc", c);
    if (HAK_SECURE && next) container_check(s, c, next, false);
    uint32_t t = k < want - n ? k : want - n;
    bool whole = n + k < want;   /* c goes too: below what it lists */
    if (whole) out[n++] = c;
    for (uint32_t i = k - t; i < k; i++) {
      void *p = hak_link_decode((uintptr_t)c[3 + i], &c[3 + i]);
      if (HAK_SECURE) container_check(s, c, p, true);
      out[n++] = p;
    }
    if (!whole) {   /* c stays, listing the rest */
      if (counted) c[2] = (void *)(uintptr_t)(k - t);
      break;
    }
    s->free = next;
    if (HAK_SECURE) c[0] = (void *)hak_link_end(c);
  }
  if (n < want && s->absent) n += hak_slab_take_absent(s, out + n, want - n);
  if (n < want && s->carved < s->capacity) {
    uint32_t k = (uint32_t)s->capacity - s->carved;
    if (k > want - n) k = want - n;
    uint32_t bs = hak_class_size[s->cls];
    char *p = (char *)s->start + (size_t)s->carved * bs;
    memmove(out + k, out, n * sizeof(void *));
    for (uint32_t i = 0; i < k; i++, p += bs) {   /* no store into them (types.h, the free mark) */
      if (HAK_SECURE) hak_block_set_free((uintptr_t *)p, hak_free_mark_at(p));
      out[k - 1 - i] = p;
    }
#if HAK_SECURE
    for (uint32_t i = k - 1; i > 0; i--) {   /* fresh blocks in random order */
      uint32_t j = (uint32_t)(hak_random(&h->random) % (i + 1));
      void *t = out[i];
      out[i] = out[j];
      out[j] = t;
    }
#endif
    slab_accept(s, s->carved, s->carved + k);
    s->carved = (uint16_t)(s->carved + k);
    n += k;
  }
  s->used += n;
  uint32_t left = (uint32_t)s->carved - s->used - s->absent;   /* on the free list */
  if (left < s->free_low) s->free_low = (uint16_t)left;
  HAK_COUNT(h->counters[s->cls].used_blocks, n);
  HAK_COUNT(h->counters[s->cls].refill_blocks, n);
  return n;
}

/* Slow start: a heap's first refill of a class takes hak_refill_first
 * blocks, each next one twice as many, up to half the cache (half), where
 * it stays. refill_ramp returns this refill's batch. */
static uint32_t refill_ramp(hak_heap_t *h, unsigned cls, uint32_t batch, uint32_t half) {
  if (!batch) batch = hak_refill_first(cls);
  if (batch > half) batch = half;
  h->refill_batch[cls] = (uint16_t)(2 * batch < half ? 2 * batch : half);
  return batch;
}

/* Up to want blocks of class cls into out[], from the warm pool's slabs,
 * then new ones; the count (less only when no slab could be had). */
static uint32_t slabs_take(hak_heap_t *h, unsigned cls, void **out, uint32_t want) {
  uint32_t n = 0;
  while (n < want) {
    hak_slab_t *s = h->warm[cls];
    if (!s && !(s = hak_slab_new(h, cls))) break;
    n += slab_take(h, s, out + n, want - n);
    if (!s->free && !s->absent && s->carved == s->capacity) {
      hak_slab_list_remove(&h->warm[cls], s);
      s->in_full = 1;
      hak_slab_list_push(&h->full[cls], s);
    }
  }
  return n;
}

static uint32_t refill(hak_heap_t *h, unsigned cls) {
  hak_ucache_t *c = &h->cache[cls];
  if (!h->pending[cls]) {   /* a refill from the pending chain, a few containers, is no slow-path visit */
    hak_release_tick(h);
    if (c->top != c->items) return hak_cache_count(c);   /* the tick's allocations refilled it */
  }
  uint32_t cap = hak_cache_cap(c);
  uint32_t batch = h->refill_batch[cls];
  if (HAK_UNLIKELY(batch < cap / 2)) batch = refill_ramp(h, cls, batch, cap / 2);
  HAK_COUNT(h->counters[cls].refills, 1);
  if (h->flushing[cls] && h->swings[cls] < UINT8_MAX) h->swings[cls]++;
  h->flushing[cls] = 0;
  h->refilled[cls / 64] |= 1ull << (cls % 64);
  uint32_t n = hak_heap_take_remote(h, cls, true);   /* into the empty cache, which it may move */
  c->top = c->items + n;
  if (n < batch && !(n && hak_batch_counted(cls))) c->top += slabs_take(h, cls, c->top, batch - n);   /* what others freed first */
  return hak_cache_count(c);
}

/* A block of class cls from h's cache, refilled first if it is empty
 * (ENOMEM and NULL if no block can be had). Under the heap's token: a
 * drained cache has its items back (hak_heap_enter), and no drain runs
 * between the refill and the pop (drain.c). */
static HAK_NOINLINE void *cache_take(hak_heap_t *h, unsigned cls, size_t size) {
  bool entered = hak_heap_enter(h);
  hak_ucache_t *c = &h->cache[cls];
  void *p = NULL;
  if (c->top != c->items || refill(h, cls)) {
    HAK_STORE_SHARED(c->top, c->top - 1);
    p = hak_block_hand_out(h, cls, *c->top, size);
  } else {
    errno = ENOMEM;
  }
  hak_heap_leave(h, entered);
  return p;
}

/* A block of a span class (no cache, types.h): its inbox back to its slabs
 * first, whose units a new slab may then take. */
static HAK_NOINLINE void *span_take(hak_heap_t *h, unsigned cls, size_t size) {
  bool entered = hak_heap_enter(h);
  hak_release_tick(h);
  if (atomic_load_explicit(&h->inbox[cls], memory_order_relaxed)) hak_heap_take_remote(h, cls, false);
  void *p = NULL;
  if (slabs_take(h, cls, (void **)&p, 1)) p = hak_block_hand_out(h, cls, p, size);
  else errno = ENOMEM;
  hak_heap_leave(h, entered);
  return p;
}

void *hak_heap_pop(hak_heap_t *h, unsigned cls, size_t size) {
  return cls >= HAK_CACHED_CLASSES ? span_take(h, cls, size) : cache_take(h, cls, size);
}

/* An allocation of a thread that has passed its exit handling: from a heap
 * borrowed for this one call (heap.c). */
static HAK_COLD void *malloc_exiting(unsigned cls, size_t size) {
  hak_heap_t *h = hak_heap_borrow();
  if (!h) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = hak_heap_pop(h, cls, size);
  hak_heap_give_back(h);
  return p;
}

void *hak_malloc_class(unsigned cls, size_t size) {
  hak_heap_t *h = hak_heap_get();
  if (HAK_LIKELY(h)) return hak_heap_pop(h, cls, size);
  if (hak_thread_exiting()) return malloc_exiting(cls, size);
  errno = ENOMEM;
  return NULL;
}

HAK_NOINLINE void *hak_malloc_slow(size_t size) {
  if (size > HAK_MID_MAX) return hak_large_alloc(size, HAK_ALIGN, false);
  if (HAK_UNLIKELY(hak_prof_on)) return hak_prof_malloc_class(hak_class_of(size), size);   /* counted there */
  return hak_malloc_class(hak_class_of(size), size);
}

/* Return the n oldest (bottom) blocks of a class's cache to their slabs. */
void hak_cache_flush(hak_heap_t *h, unsigned cls, uint32_t n) {
  hak_ucache_t *c = &h->cache[cls];
  hak_slab_put_runs(h, cls, c->items, n);
  memmove(c->items, c->items + n, (hak_cache_count(c) - n) * sizeof(void *));
  c->top -= n;
  HAK_COUNT(h->counters[cls].flushes, n != 0);
  HAK_COUNT(h->counters[cls].flush_blocks, n);
}

/* The class's cache starts again as in a new heap (slow start, no
 * swings), in its first items, holding the n blocks at from (n at most its
 * first capacity; they may lie there already): after its blocks went back
 * (hak_cache_return), or after a drain (drain.c). */
void hak_cache_restart(hak_heap_t *h, unsigned cls, void **from, uint32_t n) {
  hak_ucache_t *c = &h->cache[cls];
  if (n || hak_cache_cap(c) != h->cache_first[cls]) {   /* grown, or drained (end below items) */
    void **first = hak_cache_items_at(h, cls, false);
    if (n) memmove(first, from, n * sizeof(void *));
    c->items = first;
    c->end = first + h->cache_first[cls];
  }
  HAK_STORE_SHARED(c->top, c->items + n);
  h->refill_batch[cls] = 0;
  h->swings[cls] = 0;
  h->flushing[cls] = 0;
}

/* A class's cache goes back to its slabs, and starts again. A heap's
 * release returns every class's cache, most of them empty in a short
 * thread: those skip the flush (mleak: 19,000 instructions a thread exit,
 * 11,000 of them flushes of empty caches). */
void hak_cache_return(hak_heap_t *h, unsigned cls) {
  uint32_t n = hak_cache_count(&h->cache[cls]);
  if (n) hak_cache_flush(h, cls, n);
  hak_cache_restart(h, cls, NULL, 0);
}

/* The class's cache grows to cap blocks (above its capacity, within its
 * room). Its first growth moves its items to the room it has apart from
 * the other classes' (hak_cache_items_at). A thread that leaves its heap
 * shrinks it back (hak_cache_restart). */
static void cache_grow_to(hak_heap_t *h, hak_ucache_t *c, unsigned cls, uint32_t cap) {
  if (hak_cache_cap(c) == h->cache_first[cls]) {   /* into its grown array */
    void **to = hak_cache_items_at(h, cls, true);
    uint32_t n = hak_cache_count(c);
    memcpy(to, c->items, n * sizeof(void *));
    c->items = to;
    c->top = to + n;
  }
  c->end = c->items + cap;
}

/* A cache that fills up with no flush since its last refill, after it had
 * run dry since a flush before (a swing: full, empty, full), holds less
 * than the batches the program frees and allocates: it doubles, up to its
 * room (h->cache_room), rather than flush blocks the next batch
 * refills. */
static bool cache_grow(hak_heap_t *h, hak_ucache_t *c, unsigned cls) {
  if (h->flushing[cls] || !h->swings[cls]) return false;
  uint32_t cap = hak_cache_cap(c), room = h->cache_room[cls];
  if (cap >= room) return false;
  cache_grow_to(h, c, cls, 2 * cap < room ? 2 * cap : room);
  h->swings[cls] = 0;
  return true;
}

/* How many blocks a refill may take into the class's empty cache from an
 * inbox of n whose blocks have no count (inbox.c): three quarters of the
 * cache, which first doubles
 * from its first capacity (within its room) if n is GROW_INBOX times what
 * it holds or more. Such an inbox is another thread freeing the batches
 * this one allocates faster than it allocates them (a producer's blocks
 * coming back from its consumers): what does not fit goes back to the
 * slabs, to be refilled from there at once, each block written and read
 * again. Once only, and not for less: grown caches hold blocks of classes
 * used a little at a time (docs/design/tuning.md, "Remote-free batches"). */
#define GROW_INBOX 4

uint32_t hak_cache_room_for(hak_heap_t *h, unsigned cls, uint32_t n) {
  hak_ucache_t *c = &h->cache[cls];
  uint32_t cap = hak_cache_cap(c), to = 2 * (uint32_t)h->cache_first[cls];
  if (to > h->cache_room[cls]) to = h->cache_room[cls];
  if (n / GROW_INBOX >= cap - cap / 4 && to > cap) {
    cache_grow_to(h, c, cls, to);
    cap = to;
  }
  return cap - cap / 4;
}

HAK_NOINLINE void hak_free_flush(hak_heap_t *h, unsigned cls, void *p) {
  bool entered = hak_heap_enter(h);
  hak_release_tick(h);
  hak_ucache_t *c = &h->cache[cls];
  if (cls >= HAK_CACHED_CLASSES) {   /* a span class: no cache */
#if HAK_STAT >= 2
    c->frees++;
#endif
    hak_slab_put_local(h, p);
    hak_heap_leave(h, entered);
    return;
  }
  /* Half the cache goes back, or all of it on a long run of frees (from
   * the FLUSH_ALL_AFTER-th flush with no refill between; shorter runs come
   * and go in steady churn): what stays pins slabs. Not if the tick's
   * allocations took some. */
  if (c->top != c->end || !cache_grow(h, c, cls)) {
    if (c->top == c->end)
      hak_cache_flush(h, cls, h->flushing[cls] >= FLUSH_ALL_AFTER - 1 ? hak_cache_cap(c) : hak_cache_cap(c) / 2);
    if (h->flushing[cls] < FLUSH_ALL_AFTER) h->flushing[cls]++;
  }
  *c->top++ = p;
#if HAK_STAT >= 2
  c->frees++;
#endif
  hak_heap_leave(h, entered);
}

/* free's fast path found the cache full. The caller is the thread using
 * the slab's heap, unless it got the thread pointer of a thread of a
 * forked parent that the child lacks, whose heap nobody uses: then the
 * block goes to that heap's inbox, as a remote free. */
HAK_NOINLINE void hak_free_full(void *p, hak_slab_t *s) {
  hak_heap_t *h = hak_tls_heap;
  if (HAK_UNLIKELY(hak_slab_heap(s) != h)) {
    hak_free_remote(p, s);
    return;
  }
  hak_free_flush(h, s->cls, p);
}
