/* Small inline helpers, included at the end of internal.h (whose
 * prototypes and tables they use): from an address to its chunk's kind,
 * its SuperSlab, its unit's descriptor and its block; the free mark and the
 * secure build's encoded links; a cache's counts; a size's class. */
#ifndef HAK_BLOCK_H
#define HAK_BLOCK_H

HAK_INLINE uint8_t hak_registry_kind(uintptr_t a) {
  size_t chunk = a >> HAK_SS_SHIFT;
  if (chunk >= HAK_REG_CHUNKS) return HAK_REG_FOREIGN;
  return atomic_load_explicit(&hak_registry_map[chunk], memory_order_relaxed);
}

HAK_INLINE hak_superslab_t *hak_ss_of(const void *p) {
  return (hak_superslab_t *)((uintptr_t)p & ~(uintptr_t)HAK_SS_MASK);
}

/* The descriptor of the unit of the arena that would hold address a, for
 * any a, from the arena's table alone: the arena's
 * HAK_ARENA_UNITS units fill the table once over in address order modulo
 * its size, so a unit of the arena finds its own descriptor and any other
 * address some unit's, whose block check refuses it (a slab's blocks lie in
 * its units). With no arena the table is one zeroed descriptor, which
 * refuses everything. */
HAK_INLINE hak_slab_t *hak_arena_unit(uintptr_t a) {
  _Static_assert(sizeof(hak_slab_t) == 1 << 6, "index scaled by a shift");
  return (hak_slab_t *)((char *)hak_arena_units + ((a >> (HAK_UNIT_SHIFT - 6)) & hak_arena_unit_mask));
}

/* A SuperSlab's unit descriptors: in the arena's table, or in its header
 * when it is outside the arena. */
HAK_INLINE hak_slab_t *hak_ss_slabs(hak_superslab_t *ss) {
  return hak_in_arena((uintptr_t)ss) ? hak_arena_unit((uintptr_t)ss) : ss->own_slabs;
}

/* The descriptor of the unit of SuperSlab ss holding address a: enough for
 * the free fast path (block geometry and class), not the head of a
 * multi-unit slab. */
HAK_INLINE hak_slab_t *hak_unit_of(hak_superslab_t *ss, uintptr_t a) {
  return hak_ss_slabs(ss) + ((a >> HAK_UNIT_SHIFT) & (HAK_UNITS - 1));
}

/* The SuperSlab of a slab in use, from its (head or unit) descriptor. */
HAK_INLINE hak_superslab_t *hak_slab_ss(const hak_slab_t *s) { return hak_ss_of((const void *)s->start); }

/* The heap of a slab in use (its SuperSlab's host, or a guest that carved
 * it there, superslab.c), from its (head or unit) descriptor: the cache it
 * names is that heap's cache of its class, and the caches open the heap. */
HAK_INLINE hak_heap_t *hak_slab_heap(const hak_slab_t *s) {
  _Static_assert(offsetof(hak_heap_t, cache) == 0, "a heap begins with its caches");
  return (hak_heap_t *)((uintptr_t)s->cache - s->cls * sizeof(hak_ucache_t));   /* no cache: not a heap */
}

/* The slab (head descriptor) of an address inside a SuperSlab. */
HAK_INLINE hak_slab_t *hak_slab_of(hak_superslab_t *ss, uintptr_t a) {
  hak_slab_t *s = hak_unit_of(ss, a);
  return s - s->head_delta;
}

/* The head descriptor of the slab whose unit descriptor is u, or NULL
 * when u holds no geometry or its head's differs: a unit of no slab, or
 * one whose head has begun another slab since (free reads descriptors
 * their owner may be rewriting). */
HAK_INLINE hak_slab_t *hak_unit_head(hak_slab_t *u) {
  hak_slab_t *head = u - u->head_delta;
  return u->inverse && head->start == u->start && head->inverse == u->inverse && head->shift == u->shift ? head : NULL;
}

/* The index of the block starting at a in the slab whose unit (or head)
 * descriptor is s, or a number above any block count when no block of s's
 * geometry starts there. With block_size = odd << shift and inverse the odd
 * part's inverse mod 2^64, rotating off * inverse right by shift gives
 * off / block_size when block_size divides off, and a number above
 * 2^64 / block_size when it does not; offsets below the start wrap to huge
 * ones. One multiply, one rotate. */
HAK_INLINE uint64_t hak_block_index(const hak_slab_t *s, uintptr_t a) {
  uint64_t x = (a - s->start) * s->inverse;
  unsigned k = s->shift;
  return (x >> k) | (x << ((64 - k) & 63));
}

/* True when a is the start of a block free accepts: one the slab has
 * carved (types.h), in use or not. The limit is read before the geometry
 * (an acquire load, a plain one on x86-64): a thread preempted between the
 * two reads must not pair a limit set since with a geometry from before it
 * (types.h, "A unit's descriptor"). */
HAK_INLINE bool hak_is_block(hak_slab_t *s, uintptr_t a) {
  uint64_t limit = __atomic_load_n(&s->limit, __ATOMIC_ACQUIRE);
  return hak_block_index(s, a) < limit;
}

/* What a is in the slab whose unit descriptor is s, as the slow paths see
 * it: HAK_BLOCK_PRESENT, a block free accepts or one not absent of a slab
 * with absent blocks, whose limits are 0 while it has them (slab_list.c,
 * "Pages of slabs in use"); HAK_BLOCK_ABSENT, an absent one; else
 * HAK_NOT_HOLED, no block of s (hak_slab_holed_block). */
HAK_INLINE int hak_slab_block_state(hak_slab_t *s, uintptr_t a) {
  return hak_is_block(s, a) ? HAK_BLOCK_PRESENT : hak_slab_holed_block(s, a);
}

/* The slow paths' block check: a block free accepts, absent blocks aside. */
HAK_INLINE bool hak_is_slab_block(hak_slab_t *s, uintptr_t a) { return hak_slab_block_state(s, a) == HAK_BLOCK_PRESENT; }

/* The calling thread's identity as the user of a heap (heap.c): its thread
 * pointer, nonzero and unique among live threads, read in one instruction
 * on x86-64 where the heap pointer takes two (TLS through the GOT). */
HAK_INLINE uintptr_t hak_thread_id(void) {
#if defined(__x86_64__)
  uintptr_t t;
  __asm__("mov %%fs:0, %0" : "=r"(t));
  return t;
#else
  return (uintptr_t)__builtin_thread_pointer();
#endif
}

/* The mark a free block carries in its second word: the address of the
 * descriptor of the unit it starts in, which free holds in a register
 * already; no program has a pointer to hakmem's descriptors (the arena's
 * table, or a SuperSlab's header), so none stores one. The secure build xors the process's secret into it, so that
 * the mark cannot be forged. */
HAK_INLINE uintptr_t hak_free_mark(const hak_slab_t *unit) { return (uintptr_t)unit ^ (HAK_SECURE ? hak_secret : 0); }
HAK_INLINE uintptr_t hak_free_mark_at(const void *p) {
  return hak_free_mark(hak_unit_of(hak_ss_of(p), (uintptr_t)p));
}

/* ---- secure build (make SECURE=1, docs/secure.md): free lists encoded
 *
 * A link a free block stores (a slab's free list, a remote-free batch) is
 * the next address scrambled with the process keys and with the address of
 * the word that holds it, so that a word a program writes after free, or
 * by overflowing the block before, decodes to an address the list's check
 * refuses, and a link copied elsewhere decodes to garbage. Identity in the
 * default build. A block in a unified cache holds the encoding of NULL,
 * which malloc checks with the mark before it hands the block out. */
HAK_INLINE uintptr_t hak_link_encode(const void *next, const void *at) {
  if (!HAK_SECURE) return (uintptr_t)next;
  uintptr_t x = (uintptr_t)next ^ hak_keys[0];
  return ((x << 23) | (x >> 41)) + ((uintptr_t)at ^ hak_keys[1]);
}

HAK_INLINE void *hak_link_decode(uintptr_t e, const void *at) {
  if (!HAK_SECURE) return (void *)e;
  uintptr_t x = e - ((uintptr_t)at ^ hak_keys[1]);
  return (void *)(((x >> 23) | (x << 41)) ^ hak_keys[0]);
}

/* Secure build: the next of a sequence of random numbers (splitmix64). */
HAK_INLINE uint64_t hak_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* hak_link_encode(NULL, p) with one key fewer: hak_keys[2] is the rotated
 * hak_keys[0]. */
HAK_INLINE uintptr_t hak_link_end(const void *p) { return hak_keys[2] + ((uintptr_t)p ^ hak_keys[1]); }

/* Mark p free as a free block of a cache: the mark, and in the secure build
 * the end of a list. */
HAK_INLINE void hak_block_set_free(uintptr_t *w, uintptr_t mark) {
  if (HAK_SECURE) w[0] = hak_link_end(w);
  w[1] = mark;
}

/* Secure build: stop unless the free block p of a cache is as free left it. */
HAK_INLINE void hak_block_check_free(const void *p, const char *fn) {
  const uintptr_t *w = (const uintptr_t *)p;
  if (HAK_SECURE && HAK_UNLIKELY((w[0] ^ hak_link_end(p)) | (w[1] ^ hak_free_mark_at(p))))
    hak_fatal_corrupt(fn, p);
}

HAK_INLINE uint32_t hak_cache_count(const hak_ucache_t *c) { return (uint32_t)(c->top - c->items); }

/* Free block p of class cls made ready to hand out for size bytes (the
 * slow paths' pop of a cache, and a span class's block; malloc's fast path
 * does the same in its own order). */
HAK_INLINE void *hak_block_hand_out(hak_heap_t *h, unsigned cls, void *p, size_t size) {
#if HAK_STAT >= 2
  h->cache[cls].allocs++;
  h->counters[cls].requested += size;
#endif
  hak_block_check_free(p, "malloc");
  ((uintptr_t *)p)[1] = 0;
  return p;
}
HAK_INLINE uint32_t hak_cache_cap(const hak_ucache_t *c) { return (uint32_t)(c->end - c->items); }

/* n (above 8) rounded up to the next of 8 steps per doubling: at most
 * 12.5% more (large mapping sizes, the heap profile's large lines). */
HAK_INLINE uint64_t hak_round_eighths(uint64_t n) {
  unsigned b = 63u - (unsigned)__builtin_clzll(n - 1);
  uint64_t step = (uint64_t)1 << (b - 3u);
  return (n + step - 1) & ~(step - 1);
}

HAK_INLINE unsigned hak_class_of(size_t size) {   /* size <= HAK_MID_MAX */
  if (size <= HAK_TINY_MAX) return hak_class_of_small[(size + 15) >> 4];
  unsigned b = 63u - (unsigned)__builtin_clzll(size - 1);
  return 8u * (b - 6u) + (unsigned)((size - 1) >> (b - 3u)) - 8u;
}

#endif
