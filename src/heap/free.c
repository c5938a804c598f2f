/* free's slow paths: large blocks, frees from other threads, and the
 * reporting of bad pointers. */
#include "fast_path.h"

/* True when a, a SuperSlab address the block check refused, is a block of
 * a slab that has emptied since it handed the block out (types.h): the unit
 * still holds that slab's geometry, its head agrees, and a is a block start
 * below the slab's carved count. */
static bool block_of_emptied_slab(uintptr_t a) {
  hak_slab_t *u = hak_unit_of(hak_ss_of((void *)a), a), *head = hak_unit_head(u);
  return head && hak_block_index(u, a) < head->carved;
}

/* p is in a SuperSlab and fn cannot take it: a block that is free says so
 * (freed: "double free of" for free, "use after free of" for the others),
 * anything else is an invalid pointer. */
_Noreturn HAK_COLD void hak_fatal_block(const char *fn, const char *freed, const void *p) {
  uintptr_t a = (uintptr_t)p;
  hak_slab_t *u = hak_unit_of(hak_ss_of(p), a);
  int state = hak_slab_block_state(u, a);
  bool is_free = state == HAK_BLOCK_PRESENT ? ((const uintptr_t *)p)[1] == hak_free_mark(u)
                                            : state == HAK_BLOCK_ABSENT || block_of_emptied_slab(a);
  hak_fatal_pointer(fn, is_free ? freed : "invalid pointer", p);
}

/* free of p, a SuperSlab address that its unit's limit refused: a block
 * in use of a slab with absent blocks (slab_list.c, "Pages of slabs in
 * use"), or of one whose absent blocks were all taken back since free read
 * the limit, is freed; anything else stops the program. */
HAK_NOINLINE void hak_free_refused(const void *p) {
  uintptr_t a = (uintptr_t)p;
  hak_slab_t *u = hak_unit_of(hak_ss_of(p), a);
  if (hak_is_slab_block(u, a)) hak_free_checked((void *)p, u);
  else hak_fatal_block("free", "double free of", p);
}

_Noreturn HAK_COLD void hak_fatal_corrupt(const char *fn, const void *p) {
  hak_fatal_pointer(fn, "corrupted free block (written after free, or overflowed into)", p);
}

HAK_COLD void hak_free_double(const void *p) { hak_fatal_pointer("free", "double free of", p); }

HAK_NOINLINE void hak_free_slow(void *p) {
  if (!p) return;
  uint8_t kind = hak_registry_kind((uintptr_t)p);
  if (kind == HAK_REG_SUPERSLAB) {
    hak_free_block(p, hak_unit_of(hak_ss_of(p), (uintptr_t)p), hak_free_refused);
    return;
  }
  if (kind == HAK_REG_LARGE || kind == HAK_REG_LARGE_ALIGNED) {
    hak_large_free(p, kind, "free");
    hak_purger_poll();   /* the BigCache's deadline may have asked for it */
    return;
  }
  hak_fatal_pointer("free", "invalid pointer", p);
}

/* What free's fast path refused: a bad pointer into the arena's
 * SuperSlabs, else anything hak_free_slow sorts out (large blocks, the
 * arena's too). */
HAK_NOINLINE void hak_free_other(const void *p) {
  if (hak_in_arena((uintptr_t)p) && hak_registry_kind((uintptr_t)p) != HAK_REG_LARGE) hak_free_refused(p);
  else hak_free_slow((void *)p);
}

/* Push the chain of containers head..tail of n blocks of class cls on
 * owner's inbox. An abandoned owner gets a purge deadline so that some
 * thread's release tick takes the blocks back in. */
static void inbox_push(hak_heap_t *owner, unsigned cls, void **head, void **tail, uint32_t n) {
  _Atomic(uintptr_t) *inbox = &owner->inbox[cls];
  uintptr_t old = atomic_load_explicit(inbox, memory_order_relaxed), w;
  do {
    tail[0] = (void *)hak_link_encode(hak_inbox_first(old), tail);
    uint32_t blocks = hak_inbox_blocks(old) + n;
    w = (uintptr_t)head | (uintptr_t)(blocks < HAK_INBOX_MAX ? blocks : HAK_INBOX_MAX) << HAK_INBOX_SHIFT;
  } while (!atomic_compare_exchange_weak_explicit(inbox, &old, w, memory_order_release, memory_order_relaxed));
  if (atomic_load_explicit(&owner->state, memory_order_relaxed) != HAK_HEAP_ACTIVE) {
    hak_release_abandoned_since(hak_os_now_ms());
    hak_heap_reclaim_hint();
  }
  else if (!old)
    hak_purger_notify();   /* its thread may sleep: the purger takes the inbox (hak_heap_reclaim_others) */
}

/* Addresses stored in the newest container of batch b, and blocks in b. */
HAK_INLINE uint32_t batch_in_head(const hak_remote_batch_t *b) { return b->head ? (uint32_t)(b->slot - (b->head + 3)) : 0; }
HAK_INLINE uint32_t batch_blocks(const hak_remote_batch_t *b) { return b->count + batch_in_head(b); }

/* Store block p's address at the newest container's next slot. */
HAK_INLINE void batch_store(hak_remote_batch_t *b, void *p) {
  void **at = b->slot;
  *at = (void *)hak_link_encode(p, at);
  b->slot = at + 1;
}

/* The newest container of b closes: the count of the addresses stored in
 * it joins its hint (types.h, HAK_BATCH_HINT). */
HAK_INLINE void batch_close_head(hak_remote_batch_t *b) {
  b->head[2] = (void *)((uintptr_t)b->head[2] | batch_in_head(b));
}

/* Start a new container p in front of the batch's chain; free's fast path
 * may store addresses in it up to its room, and as far as the batch stays
 * below its limit. counted: the class's containers have a count. */
HAK_INLINE void batch_open(hak_remote_batch_t *b, bool counted, void **p) {
  uint32_t in_head = batch_in_head(b);
  if (b->head && counted) batch_close_head(b);
  if (counted) {   /* its hint (types.h, HAK_BATCH_HINT), lines this thread just wrote; the count when it closes */
    void **a = HAK_SECURE ? NULL : b->head;
    for (unsigned i = 1; a && i < HAK_BATCH_HINT; i++) a = hak_link_decode((uintptr_t)a[0], a);
    p[2] = (void *)((uintptr_t)a << HAK_COUNT_BITS);
  }
  b->count += in_head + 1;
  p[0] = (void *)hak_link_encode(b->head, p);
  if (!b->head) b->tail = p;
  b->head = p;
  uint32_t more = b->count + 1 < b->limit ? b->limit - 1 - b->count : 0;
  b->slot = p + 3;
  b->slot_end = b->slot + (more < b->room ? more : b->room);
}

/* The heap whose cache of class cls is k. */
HAK_INLINE hak_heap_t *heap_of_cache(hak_ucache_t *k, unsigned cls) {
  return (hak_heap_t *)((char *)(k - cls) - offsetof(hak_heap_t, cache));
}

/* Push batch b of class cls, if it holds blocks, on the inbox of the heap
 * whose cache is owner, and empty it; false if it held none. */
static bool batch_send(hak_remote_batch_t *b, unsigned cls, hak_ucache_t *owner) {
  if (!b->head) return false;
  if (hak_batch_counted(cls)) batch_close_head(b);
  inbox_push(heap_of_cache(owner, cls), cls, b->head, b->tail, batch_blocks(b));
  b->slot = b->slot_end = b->head = b->tail = NULL;
  b->count = 0;
  return true;
}

static void batch_flush(hak_remote_batch_t *b, unsigned cls) { batch_send(b, cls, b->owner); }

/* A drain (drain.c) sends the batch of class cls of h, whose owner it set
 * to NULL before its fence and which was owner's; the batch stays without
 * one, so that h's thread opens its next batch on a slow path. False if
 * the batch held no block. */
bool hak_remote_batch_drain(hak_heap_t *h, unsigned cls, hak_ucache_t *owner) {
  return batch_send(&h->outgoing[cls], cls, owner);
}

void hak_remote_flush_all(hak_heap_t *h) {
  for (unsigned c = 0; c < HAK_CLASSES; c++) batch_flush(&h->outgoing[c], c);
}

/* The first remote free of a thread without a heap gets it one; if that
 * adopts the owner, the block is simply a local free. */
static HAK_COLD void free_remote_no_heap(void **p, hak_slab_t *s) {
  hak_heap_t *h = hak_heap_get();
  if (h == hak_slab_heap(s)) {
#if HAK_STAT >= 2
    h->cache[s->cls].frees++;   /* as the fast path counts a local free */
#endif
    bool entered = hak_heap_enter(h);
    hak_slab_put_local(h, p);
    hak_heap_leave(h, entered);
  } else if (h) {
    hak_free_remote(p, s);
  } else {   /* an exiting thread, or no memory for a heap: a batch of one */
    if (hak_batch_counted(s->cls)) p[2] = 0;
    inbox_push(hak_slab_heap(s), s->cls, p, p, 1);
  }
}

/* The blocks of a batch in another heap's inbox wait for their owner's
 * next refill, or, if its thread sleeps, for the background purger
 * (hak_heap_reclaim_others). A thread that only frees other threads'
 * blocks (and large ones) passes no other slow path: the purger its
 * batches asked for (inbox_push) starts here, once the batch is in place,
 * or the blocks of sleeping owners would stay until a trim. */
static void free_remote_batch(hak_heap_t *h, void *p, hak_slab_t *s) {
  unsigned cls = s->cls;
  hak_remote_batch_t *b = &h->outgoing[cls];
  if (b->owner != s->cache) {
    batch_flush(b, cls);
    HAK_STORE_SHARED(b->owner, s->cache);
  }
  if (b->head && b->slot < b->head + 3 + b->room) batch_store(b, p);
  else batch_open(b, hak_batch_counted(cls), p);
  if (batch_blocks(b) >= b->limit) batch_flush(b, cls);
}

/* What free's fast path below leaves: a sampled block (the profiler's heap
 * owns it; no batch has that owner), a thread without a heap (the empty
 * heap's batches have none), another owner, a batch that reaches its
 * limit or that a drain sent (drain.c). The batches change here under the
 * heap's token, which a drain holds. */
static HAK_NOINLINE void free_remote_slow(hak_heap_t *h, void *p, hak_slab_t *s) {
  if (HAK_UNLIKELY(hak_slab_heap(s) == hak_prof_heap)) {   /* NULL while profiling is off */
    hak_prof_free(p);
  } else if (HAK_UNLIKELY(h == &hak_heap_empty)) {
    free_remote_no_heap(p, s);
  } else {
    bool entered = hak_heap_enter(h);
    free_remote_batch(h, p, s);
    hak_heap_leave(h, entered);
  }
  hak_purger_poll();
}

/* The owner's half of a drain's handshake on the batches (drain.c): set
 * before free's fast path below reads a batch's owner, cleared (a release
 * store) after its last store to the batch. The compiler keeps the order;
 * the drainer's membarrier stands for the processor's fence. Atomic stores
 * because the empty heap's flag is every heapless thread's (a plain mov). */
HAK_INLINE void sending(hak_heap_t *h, uint8_t on) {
  atomic_signal_fence(memory_order_seq_cst);
  __atomic_store_n(&h->sending, on, on ? __ATOMIC_RELAXED : __ATOMIC_RELEASE);
  atomic_signal_fence(memory_order_seq_cst);
}

/* A block of a slab owned by another heap (or by an exited thread's heap):
 * add it to this thread's batch for that heap and class. The slab's
 * descriptor names its owner by the owner's cache of the class, which is
 * stable while the block is in use (a SuperSlab changes heaps only when
 * empty), and heaps are never unmapped. The common case, one more address
 * in the batch's newest container, is an owner compare (of that cache, on
 * the descriptor line free's fast path has loaded) and a slot compare; the
 * next, p as a new container of a batch that stays below its limit, makes
 * no call either, so neither has a stack frame. (There the limit is 2 or
 * more, so a class's containers have a count exactly when they have
 * room.) */
HAK_NOINLINE void hak_free_remote(void *p, hak_slab_t *s) {
  hak_heap_t *h = hak_tls_heap;
  hak_remote_batch_t *b = &h->outgoing[s->cls];
  HAK_PIN(b);
  sending(h, 1);
  if (HAK_LIKELY(HAK_LOAD_SHARED(b->owner) == s->cache)) {
    if (HAK_LIKELY(b->slot < b->slot_end)) {
      batch_store(b, p);
      sending(h, 0);
      return;
    }
    if (batch_blocks(b) + 1 < b->limit) {   /* the newest container is full */
      batch_open(b, b->room != 0, p);
      sending(h, 0);
      return;
    }
  }
  sending(h, 0);
  free_remote_slow(h, p, s);
}

/* Usable size of p, a block free accepts of the slab whose unit descriptor
 * is s, or 0 when it is free. */
HAK_INLINE size_t slab_block_live_usable(const void *p, const hak_slab_t *s) {
  return ((const uintptr_t *)p)[1] != hak_free_mark(s) ? hak_class_size[s->cls] : 0;
}

/* hak_block_live_usable of p, a SuperSlab address its unit's limit
 * refused: apart so that the common case keeps no frame for the call. */
static HAK_NOINLINE size_t refused_live_usable(const void *p, hak_slab_t *s) {
  return hak_is_slab_block(s, (uintptr_t)p) ? slab_block_live_usable(p, s) : 0;
}

/* Usable size of p if it is a block of a slab in use or a large block
 * (whose own checks stop the program, naming fn), else 0. */
size_t hak_block_live_usable(const void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  uint8_t kind = hak_registry_kind(a);
  if (kind == HAK_REG_SUPERSLAB) {
    hak_slab_t *s = hak_unit_of(hak_ss_of(p), a);
    return HAK_LIKELY(hak_is_block(s, a)) ? slab_block_live_usable(p, s) : refused_live_usable(p, s);
  }
  return kind == HAK_REG_LARGE || kind == HAK_REG_LARGE_ALIGNED ? hak_large_usable(p, kind, fn) : 0;
}

/* hak_block_usable of anything but a slab's block in use its unit's limit
 * accepts. */
static HAK_NOINLINE size_t block_usable_slow(const void *p, const char *fn) {
  size_t n = hak_block_live_usable(p, fn);
  if (n) return n;
  if (hak_registry_kind((uintptr_t)p) == HAK_REG_SUPERSLAB) hak_fatal_block(fn, "use after free of", p);
  hak_fatal_pointer(fn, "invalid pointer", p);
}

/* Usable size of a block, after checking it is one of ours and in use
 * (realloc, malloc_usable_size: no stack frame on the common path). The
 * unit descriptor comes from the arena's table and the block check refuses
 * what it does not describe, as on free's fast path (fast_path.h), with
 * the same exception for ThreadSanitizer builds. */
size_t hak_block_usable(const void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
#if defined(__SANITIZE_THREAD__)
  if (!hak_in_arena(a)) return block_usable_slow(p, fn);
#endif
  hak_slab_t *s = hak_arena_unit(a);
  size_t n = hak_is_block(s, a) ? slab_block_live_usable(p, s) : 0;
  if (HAK_LIKELY(n)) return n;
  return block_usable_slow(p, fn);
}
