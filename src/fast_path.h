/* The fast paths of malloc and free, and the macro that builds the
 * allocating entry points twice (counted and uncounted): inline here, so
 * that each exported name (override.c: malloc, free, calloc, realloc, ...;
 * override_new.c: operator new and delete; alloc.c: hak_malloc, hak_free,
 * ...) compiles to one body with no call on its fast path.
 *
 * Their shapes on x86-64 in libhakmem.so (gcc 12, -O2; objdump -d
 * --no-show-raw-insn build/libhakmem.so), counted to the ret:
 *   malloc, tiny sizes (<= 1 KiB), 15 instructions: the heap from TLS (2),
 *     size compare and branch (2), the class's cache from the heap's table
 *     (3), claim the top (3), compare with items and branch (2), the block
 *     and its mark cleared (2), ret.
 *   malloc, mid sizes (<= 128 KiB by the table), 19: the same with the
 *     second compare and the cache's offset from the mid table (7 in place
 *     of 3). Sizes above go to hak_malloc_slow by a tail jump.
 *   malloc_counted (heap profiling on): 2 more, the countdown's subtract
 *     and branch.
 *   free, a block of the calling thread's heap, 26 instructions: the unit
 *     descriptor from the arena's table (5), the block check, its limit
 *     loaded first, then one multiply and rotate (7; block.h, hak_is_block),
 *     the double-free check (2), the free mark (1), the
 *     owner compare with the thread pointer (3), the cache's top and its
 *     end (4), the push (3), ret. No call, no atomic, no stack frame; every
 *     other case is a tail jump to a noinline function (hak_free_other,
 *     hak_free_double, hak_free_remote, hak_free_full).
 *   calloc, realloc, the aligned entries: a jump to hak_calloc and the
 *     rest (alloc.c, alloc_aligned.c), which inline these same paths.
 * hak_malloc, hak_free, operator new and operator delete have malloc's and
 * free's shapes: new's misses go to a slow path of its own
 * (override_new.c), which keeps its retry off the fast path. */
#ifndef HAK_FAST_PATH_H
#define HAK_FAST_PATH_H

#include "internal.h"

#pragma GCC visibility push(hidden)

/* Keep a computed pointer in its register: without this GCC recomputes the
 * address for each field it touches. */
#define HAK_PIN(p) __asm__("" : "+r"(p))
/* The same for two pointers, kept out of the return value's register (on
 * x86-64: in rdx and rcx), so that the block malloc pops is loaded straight
 * into it. */
#if defined(__x86_64__)
#define HAK_PIN_OFF_RESULT(p, q) __asm__("" : "+d"(p), "+c"(q))
#else
#define HAK_PIN_OFF_RESULT(p, q) __asm__("" : "+r"(p), "+r"(q))
#endif

/* malloc: thread-local heap, the class's cache from the heap's own size
 * tables, pop its top. The pop
 * claims the top slot (stores the lowered top) before it reads items, so
 * that another thread may drain the cache meanwhile (drain.c: the two sides
 * of an asymmetric fence, docs/design/thread-memory.md); a pop that finds the
 * cache empty or drained puts the top back and goes slow. The cache and its
 * top are kept out of the register the block is returned in, which saves a
 * move. The empty heap's tables all lead to its cache 0, empty, so to the
 * slow path (every thread without a heap stores its top, each a value that
 * stays below its items). The counted build (heap profiling, below) also
 * counts the bytes down to the heap's next sample. A miss goes to slow
 * (malloc's: hak_malloc_slow), by a tail jump; so does a sampled allocation
 * that found no memory. */
HAK_INLINE void *hak_malloc_fast_with(bool counted, size_t size, void *(*slow)(size_t)) {
  hak_heap_t *h = hak_tls_heap;
  hak_ucache_t *c;
  if (HAK_LIKELY(size <= HAK_TINY_MAX)) c = h->cache_small[(size + 15) >> 4];
  else if (size <= HAK_MID_TABLE_MAX) c = (hak_ucache_t *)((char *)h + h->cache_of_mid[(size + 127) >> 7]);
  else return slow(size);
  void **top = HAK_LOAD_SHARED(c->top) - 1;
  HAK_PIN_OFF_RESULT(c, top);
  HAK_STORE_SHARED(c->top, top);
  atomic_signal_fence(memory_order_seq_cst);   /* the claim stays before the load of items */
  if (HAK_UNLIKELY(top < HAK_LOAD_SHARED(c->items))) {
    HAK_STORE_SHARED(c->top, top + 1);
    return slow(size);
  }
  if (counted && HAK_UNLIKELY(hak_prof_count(h, size))) {
    HAK_STORE_SHARED(c->top, top + 1);
    void *q = hak_prof_sampled(size);
    return HAK_LIKELY(q != NULL) ? q : slow(size);
  }
#if HAK_STAT >= 2
  c->allocs++;
  h->counters[c->cls].requested += size;
#endif
  void **p = *top;
  hak_block_check_free(p, "malloc");
  p[1] = NULL;
  return p;
}

HAK_INLINE void *hak_malloc_fast_of(bool counted, size_t size) { return hak_malloc_fast_with(counted, size, hak_malloc_slow); }
HAK_INLINE void *hak_malloc_fast(size_t size) { return hak_malloc_fast_of(false, size); }

/* free of p, a block of the slab whose unit descriptor is s: double-free
 * check, owner compare (the thread using the owning heap, heap.c), push on
 * the cache the descriptor names (a plain store on x86; a full or drained
 * cache goes slow). */
HAK_INLINE void hak_free_checked(void *p, hak_slab_t *s) {
  uintptr_t *w = (uintptr_t *)p;
  uintptr_t mark = hak_free_mark(s);
  if (HAK_UNLIKELY(w[1] == mark)) {
    hak_free_double(p);
    return;
  }
  hak_block_set_free(w, mark);
  if (HAK_UNLIKELY(HAK_LOAD_SHARED(s->owner_thread) != hak_thread_id())) {
    hak_free_remote(p, s);
    return;
  }
  hak_ucache_t *c = s->cache;
  void **top = c->top;
  if (HAK_UNLIKELY(top >= HAK_LOAD_SHARED(c->end))) {   /* full, or drained */
    hak_free_full(p, s);
    return;
  }
  *top = p;
  __atomic_store_n(&c->top, top + 1, __ATOMIC_RELEASE);   /* a drain that sees it sees *top (drain.c) */
#if HAK_STAT >= 2
  c->frees++;
#endif
}

/* free of a block of a SuperSlab whose unit descriptor is s: the block
 * check, then hak_free_checked. refused takes p if it is no block of s. */
HAK_INLINE void hak_free_block(void *p, hak_slab_t *s, void (*refused)(const void *)) {
  if (HAK_UNLIKELY(!hak_is_block(s, (uintptr_t)p))) {
    refused(p);
    return;
  }
  hak_free_checked(p, s);
}

/* free: the unit descriptor from the arena's table, then hak_free_block.
 * Everything the block check refuses (NULL, large blocks, SuperSlabs
 * outside the arena, bad pointers) goes to hak_free_other. ThreadSanitizer builds send addresses outside the arena
 * there first: their lookup reads a descriptor that its owner may be
 * rewriting, a race the block check makes harmless but TSan would report. */
HAK_INLINE void hak_free_fast(void *p) {
#if defined(__SANITIZE_THREAD__)
  if (!hak_in_arena((uintptr_t)p)) {
    hak_free_other(p);
    return;
  }
#endif
  hak_free_block(p, hak_arena_unit((uintptr_t)p), hak_free_other);
}

/* ---- the two builds of the allocating entry points. Heap
 * profiling (prof.c) counts the bytes malloc hands out; so that a process
 * that does not profile pays nothing for it, every exported entry point
 * whose fast path pops a cache is compiled twice, uncounted (under its
 * name) and counted, and while profiling start-up makes the uncounted
 * build's entry a jump to the counted one (counted.c). On x86-64 the jump
 * may need 5 bytes before the entry, which the compiler leaves as NOPs
 * that nothing runs (16, so that the entry keeps its alignment). vis:
 * HAK_EXPORT; impl(counted, args...) the body. */
#if defined(__x86_64__)
#define HAK_PATCHABLE __attribute__((patchable_function_entry(16, 16)))   /* the entry stays 16-byte aligned */
#else
#define HAK_PATCHABLE
#endif
#define HAK_ARGS_(...) __VA_ARGS__
#define HAK_TWO_BUILDS(vis, ret, name, params, impl, args)                                   \
  static ret name##_counted params { return impl(true, HAK_ARGS_ args); }                     \
  static HAK_PATCHABLE ret name##_uncounted params { return impl(false, HAK_ARGS_ args); }     \
  vis ret name params __attribute__((alias(#name "_uncounted")));                            \
  static hak_twin_t name##_twin __attribute__((used, section("hak_twins"), aligned(sizeof(void *)))) = { \
      (hak_fn_t)name##_uncounted, (hak_fn_t)name##_counted}

/* ---- the entry points' use of the fast paths: what a memory checker is
 * told (track.h; nothing in other builds) */
HAK_INLINE void *hak_malloc_entry_with(bool counted, size_t size, void *(*slow)(size_t)) {
  HAK_TRACK_ENTER();
  void *p = hak_malloc_fast_with(counted, size, slow);
  HAK_TRACK_LEAVE();
  HAK_TRACK_ALLOC(p, size, false);
  return p;
}

HAK_INLINE void *hak_malloc_entry_of(bool counted, size_t size) { return hak_malloc_entry_with(counted, size, hak_malloc_slow); }

/* alloc: hak_alloc_aligned, or (operator new) a function that ends in it */
HAK_INLINE void *hak_aligned_entry_with(size_t align, size_t size, void *(*alloc)(size_t, size_t)) {
  HAK_TRACK_ENTER();
  void *p = alloc(align, size);
  HAK_TRACK_LEAVE();
  HAK_TRACK_ALLOC(p, size, false);
  return p;
}

HAK_INLINE void *hak_aligned_entry(size_t align, size_t size) { return hak_aligned_entry_with(align, size, hak_alloc_aligned); }

/* Withdrawn from the checker first: once hakmem has it, another thread
 * may hand it out again. */
HAK_INLINE void hak_free_entry(void *p) {
  if (HAK_TRACK_FOREIGN_FREE(p)) return;
  HAK_TRACK_FREE(p);
  HAK_TRACK_ENTER();
  hak_free_fast(p);
  HAK_TRACK_LEAVE();
}

#pragma GCC visibility pop

#endif
