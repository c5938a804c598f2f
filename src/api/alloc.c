/* The hak_* allocation API: malloc, calloc, realloc, free, usable size, trim. */
#include <errno.h>

#include "fast_path.h"

HAK_TWO_BUILDS(HAK_EXPORT, void *, hak_malloc, (size_t size), hak_malloc_entry_of, (size));

HAK_EXPORT void hak_free(void *p) { hak_free_entry(p); }

/* calloc's zeroing of p, total bytes just allocated: a span class's block
 * on units untouched since they were taken clean (hak_slab_new) needs only
 * the two words malloc wrote. Returns p, as memset does, so that calloc
 * keeps nothing across the call (its entry stays patchable: counted.c). */
static HAK_NOINLINE void *calloc_zero(void *p, size_t total) {
  if (total > HAK_MID_TABLE_MAX && hak_slab_of(hak_ss_of(p), (uintptr_t)p)->zero) total = 2 * sizeof(void *);
  hak_block_zero(p, total);
  return p;
}

static inline void *calloc_of(bool counted, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  HAK_TRACK_ENTER();
  void *p;
  if (total > HAK_MID_MAX) p = hak_large_alloc(total, HAK_ALIGN, true);   /* zeroed there */
  else if ((p = hak_malloc_fast_of(counted, total))) p = calloc_zero(p, total);
  HAK_TRACK_LEAVE();
  HAK_TRACK_ALLOC(p, total, true);
  return p;
}

HAK_TWO_BUILDS(HAK_EXPORT, void *, hak_calloc, (size_t count, size_t size), calloc_of, (count, size));

/* glibc semantics: realloc(NULL, n) is malloc(n); realloc(p, 0) frees p and
 * returns NULL; on failure the old block is untouched. A slab block, or a
 * large block aligned to 2 MiB or more, keeps its place while the new size
 * still uses at least half of it (else it moves, so that its memory goes);
 * other large blocks are resized in place or moved with their pages (no
 * copy) while above HAK_LARGE_MIN, and a block that grows past it becomes
 * large. resize returns the block that holds p's contents now, or NULL;
 * *copied: a new block that p's were copied to, and p is still to free. */
static void *resize(bool counted, void *p, size_t size, size_t usable, bool *copied) {
  uint8_t kind = hak_registry_kind((uintptr_t)p);
  if (kind == HAK_REG_LARGE && size > HAK_LARGE_MIN) {
    void *q = hak_large_realloc(p, size);
    if (q) return q;
  } else if (size <= usable && (size >= usable / 2 || usable <= 64)) {
    return p;
  }
  void *q = size > HAK_LARGE_MIN && size > usable ? hak_large_alloc(size, HAK_ALIGN, false)
                                                  : hak_malloc_fast_of(counted, size);
  if (!q) return NULL;
  hak_block_copy(q, p, size < usable ? size : usable);
  *copied = true;
  return q;
}

static inline void *realloc_of(bool counted, void *p, size_t size) {
  if (!p) return hak_malloc_entry_of(counted, size);
  if (size == 0) {
    hak_free_entry(p);
    return NULL;
  }
  void *moved;
  if (HAK_TRACK_FOREIGN_REALLOC(p, size, &moved)) return moved;
  bool copied = false;
  HAK_TRACK_ENTER();
  size_t usable = hak_block_usable(p, "realloc");
  void *q = resize(counted, p, size, usable, &copied);
  HAK_TRACK_LEAVE();
  if (!q) return NULL;
  HAK_TRACK_FREE(p);
  if (copied) {
    HAK_TRACK_ENTER();
    hak_free_fast(p);
    HAK_TRACK_LEAVE();
  }
  HAK_TRACK_ALLOC(q, size, false);
  HAK_TRACK_DEFINED(q, size < usable ? size : usable);
  return q;
}

HAK_TWO_BUILDS(HAK_EXPORT, void *, hak_realloc, (void *p, size_t size), realloc_of, (p, size));

HAK_EXPORT void *hak_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return hak_realloc(p, total);
}

HAK_EXPORT size_t hak_usable_size(const void *p) {
  size_t foreign;
  if (HAK_TRACK_FOREIGN_USABLE(p, &foreign)) return foreign;
  HAK_TRACK_ENTER();
  size_t n = p ? hak_block_usable(p, "malloc_usable_size") : 0;
  HAK_TRACK_LEAVE();
  return n;
}

HAK_EXPORT void hak_free_sized(void *p, size_t size) { hak_free_entry(p); }

HAK_EXPORT void hak_free_aligned_sized(void *p, size_t alignment, size_t size) { hak_free_entry(p); }

HAK_EXPORT int hak_trim(void) {
  HAK_TRACK_ENTER();
  int released = 0;
  hak_heap_t *h = hak_tls_heap;
  hak_heap_reclaim_others(true);   /* other threads' inboxes and caches to their slabs, their batches on */
  if (h != &hak_heap_empty) {
    released |= hak_heap_release_all(h, true);
    hak_heap_reclaim_others(true);   /* what this heap's batches sent */
  }
  released |= hak_heap_trim_abandoned(true);
  released |= hak_prof_trim();
  hak_release_sweep_all(true, &released);   /* the free units of every other heap */
  released |= hak_shared_pool_trim();
  released |= hak_bigcache_drain();
  HAK_TRACK_LEAVE();
  return released;
}
