/* The large path: blocks above HAK_MID_MAX (512 KiB; 128 KiB in the secure
 * build), and those realloc grew past HAK_LARGE_MIN, get a mapping of their
 * own: a 2 MiB chunk of the arena when the block fits one (outside the
 * secure build; never unmapped nor moved, arena.c), else a mapping.
 *
 * The mapping starts on a 2 MiB boundary with the header (hak_large_t) there
 * and the block after it (64 bytes in and a number of cache lines more, up to
 * a page in all: large_color; or `align` bytes in), so free finds
 * the header by masking the pointer and the registry byte of that chunk says
 * "large". For alignments of 2 MiB and more the block itself starts a chunk;
 * the header then sits in the 64 bytes just below it and the chunk is marked
 * "large, aligned". Sizes are rounded to 8 steps per doubling so that freed
 * mappings can be reused by the BigCache and realloc can grow in place, and
 * realloc moves pages with mremap instead of copying. */
#include <errno.h>

#include "internal.h"

#define LARGE_HEADER 64

static size_t page_round(size_t n) {
  size_t page = hak_os_page_size();
  return (n + page - 1) & ~(page - 1);
}

/* Mapping size for n bytes: at most 12.5% above n, in whole pages. */
static size_t large_round(size_t n) { return page_round(hak_round_eighths(n)); }

/* Is hdr's mapping a chunk of the arena (hak_arena_take_large)? */
static bool in_chunk(const hak_large_t *hdr) { return hak_in_arena(hdr->map_base); }

/* A mapping of size bytes aligned to align for a large block: a chunk of
 * the arena when it fits one, else a mapping of its own, and in the
 * secure build a guard page after it (unmapped with it: hak_large_unmap). */
static void *large_map(size_t size, size_t align) {
  hak_bigcache_grace_drop();
  if (align == HAK_SS_SIZE && size <= HAK_SS_SIZE) {
    void *c = hak_arena_take_large();
    if (c) return c;
  }
  char *p = hak_os_map_aligned(size + HAK_GUARD, align);
  if (HAK_SECURE && p) hak_os_guard(p + size, HAK_GUARD);
  return p;
}

/* Which sizes of block the program writes whole. A large block's mapping
 * that leaves hakmem (its free refused by the BigCache, or its entry expired
 * or drained) tells by the share of its pages resident whether the program
 * wrote all of it. Once WRITTEN_RUN in a row of one size class
 * (hak_large_bin) had nearly all their pages, a new mapping of that class
 * has its block's pages faulted in at once (hak_os_populate): one system
 * call where the program would take a page fault per page, each a trap
 * into the kernel (mstress: blocks of 2.5 and 5 MiB that its threads write
 * whole, 640 and 1,280 faults each). One of the class that left with fewer
 * starts the count again, so the blocks of a program that touches a few
 * pages of each (random_mixed_large) keep theirs untouched. The count
 * costs a mincore call on a path that unmaps anyway. */
#define WRITTEN_RUN 2
static _Atomic uint8_t written[HAK_LARGE_BINS];

/* The count of mappings of map_size's class, NULL outside the classes. */
static _Atomic uint8_t *written_run(size_t map_size) {
  if (map_size <= HAK_LARGE_MIN) return NULL;
  unsigned bin = hak_large_bin(map_size);
  return bin < HAK_LARGE_BINS ? &written[bin] : NULL;
}

static void note_written(const hak_large_t *hdr) {
  size_t size = hdr->map_size;
  _Atomic uint8_t *run = written_run(size);
  if (!run || hdr->map_base != (uintptr_t)hdr) return;
  bool whole = hak_os_resident_pages(hdr, size) * 8 >= size / hak_os_page_size() * 7;
  uint8_t n = atomic_load_explicit(run, memory_order_relaxed);
  atomic_store_explicit(run, whole ? (uint8_t)(n < WRITTEN_RUN ? n + 1 : n) : 0, memory_order_relaxed);
}

static bool written_whole(size_t map_size) {
  _Atomic uint8_t *run = written_run(map_size);
  return run && atomic_load_explicit(run, memory_order_relaxed) >= WRITTEN_RUN;
}

void hak_large_unmap(hak_large_t *hdr) {
  note_written(hdr);
  if (in_chunk(hdr)) hak_arena_give(hdr);
  else hak_os_unmap((void *)hdr->map_base, hdr->map_size + HAK_GUARD);
}

/* Secure build: the guard page after a block of kind HAK_REG_LARGE is put
 * back after its mapping, or lifted so that the two are one mapping again,
 * which mremap can grow or move whole. */
static void guard_set(hak_large_t *hdr) {
  if (HAK_SECURE) hak_os_guard((char *)hdr + hdr->map_size, HAK_GUARD);
}

static void guard_lift(hak_large_t *hdr) {
  if (HAK_SECURE) hak_os_unguard((char *)hdr + hdr->map_size, HAK_GUARD);
}

static void large_set_user(hak_large_t *hdr, void *user) {
  hdr->user = user;
  hdr->freed_at = 0;
  hdr->sample = NULL;
  hdr->check = (uintptr_t)user ^ hak_secret;
}

static void large_unmap(hak_large_t *hdr, uint8_t kind) {
  uintptr_t chunk = kind == HAK_REG_LARGE ? (uintptr_t)hdr : (uintptr_t)hdr->user;
  hak_registry_set(chunk, HAK_REG_FOREIGN);
  hak_large_unmap(hdr);
}

/* Give the mapping of hdr (kind HAK_REG_LARGE) map_size bytes, a multiple
 * of the page: shrink it by unmapping the tail, grow it with mremap in place
 * or into a new 2 MiB-aligned place (the pages move, none is copied or
 * faulted in again). A block in a chunk of the arena grows and shrinks
 * within it. The header, moved or not; NULL if the pages could not be
 * moved, or a chunk's block would outgrow it (hdr unchanged). */
static hak_large_t *large_resize(hak_large_t *hdr, size_t map_size) {
  if (in_chunk(hdr)) {   /* never unmapped nor moved (arena.c): within its chunk, or copied */
    if (map_size > HAK_SS_SIZE) return NULL;
    size_t end = hak_bigcache_take_tail(hdr);   /* its pages resident past its end */
    if (end < hdr->map_size) end = hdr->map_size;
    hdr->map_size = map_size;
    if (end > map_size && !hak_bigcache_keep_tail(hdr, end)) hak_os_decommit((char *)hdr + map_size, end - map_size);
    return hdr;
  }
  if (map_size <= hdr->map_size) {
    if (map_size < hdr->map_size) {
      hak_os_unmap((char *)hdr + map_size + HAK_GUARD, hdr->map_size - map_size);   /* and the old guard */
      hdr->map_size = map_size;
      guard_set(hdr);
    }
    return hdr;
  }
  guard_lift(hdr);
  if (hak_os_remap_inplace(hdr, hdr->map_size + HAK_GUARD, map_size + HAK_GUARD) == 0) {
    hdr->map_size = map_size;
    guard_set(hdr);
    return hdr;
  }
  /* The old chunk is ours until mremap gives its range back: clear it
   * before (registry.c), and claim it again if the move failed. */
  hak_registry_set((uintptr_t)hdr, HAK_REG_FOREIGN);
  hak_large_t *moved = hak_os_remap_aligned(hdr, hdr->map_size + HAK_GUARD, map_size + HAK_GUARD, HAK_SS_SIZE);
  if (!moved) {
    hak_registry_set((uintptr_t)hdr, HAK_REG_LARGE);
    guard_set(hdr);
    return NULL;
  }
  hak_registry_set((uintptr_t)moved, HAK_REG_LARGE);
  moved->map_base = (uintptr_t)moved;
  moved->map_size = map_size;
  guard_set(moved);
  return moved;
}

/* A BigCache entry of another size made a mapping of map_size bytes: cut
 * (the rest split off as an entry of its own), or grown with mremap. In the
 * secure build the cut mapping gets a guard page after it, and the rest
 * keeps the entry's. NULL if the pages could not be moved (the entry is
 * unmapped). */
static hak_large_t *large_fit(hak_large_t *hdr, size_t map_size) {
  size_t at = hdr->map_size, cut = (map_size + HAK_GUARD + HAK_SS_MASK) & ~(size_t)HAK_SS_MASK;
  if (at > cut + HAK_LARGE_MIN) {
    /* the pages past the 2 MiB boundary after map_size (and its guard) go
     * back to the BigCache as an entry of their own, those before it to
     * the OS */
    hak_large_t *rest = (hak_large_t *)((char *)hdr + cut);
    rest->map_base = (uintptr_t)rest;
    rest->map_size = at - cut;
    rest->user = NULL;
    rest->check = 0;
    atomic_store_explicit(&rest->tail_end, 0, memory_order_relaxed);
    hak_registry_set((uintptr_t)rest, HAK_REG_LARGE);
    if (cut > map_size + HAK_GUARD)   /* pages the block would not use */
      hak_os_unmap((char *)hdr + map_size + HAK_GUARD, cut - map_size - HAK_GUARD);
    hdr->map_size = map_size;
    guard_set(hdr);
    if (!hak_bigcache_put(rest)) large_unmap(rest, HAK_REG_LARGE);
    return hdr;
  }
  hak_large_t *fit = large_resize(hdr, map_size);
  if (!fit) large_unmap(hdr, HAK_REG_LARGE);
  return fit;
}

static void *large_alloc_huge_aligned(size_t size, size_t align) {
  size_t body = (size + HAK_SS_SIZE - 1) & ~HAK_SS_MASK;
  char *base = large_map(align + body, align);
  if (!base) return NULL;
  size_t page = hak_os_page_size();
  char *user = base + align;
  hak_os_unmap(base, align - page);
  hak_large_t *hdr = (hak_large_t *)(user - LARGE_HEADER);
  hdr->map_base = (uintptr_t)(user - page);
  hdr->map_size = page + body;
  large_set_user(hdr, user);
  hak_registry_set((uintptr_t)user, HAK_REG_LARGE_ALIGNED);
  if (HAK_STAT) hak_stats_large(1, size, (int64_t)hdr->map_size);
  return user;
}

/* Where in its first page a large block starts, past the header: one of 64
 * cache lines, in turn (a golden-ratio sequence). Blocks that all started
 * at the same offset from a 2 MiB boundary would put the same elements of
 * arrays a program walks together in the same cache sets
 * (docs/design/tuning.md, "Large blocks' colour"); as jemalloc does for
 * its large extents. */
static size_t large_color(void) {
  static _Atomic uint32_t n;
  uint32_t i = atomic_fetch_add_explicit(&n, 1, memory_order_relaxed);
  return (size_t)((i * 0x9e3779b9u) >> 26) * 64;
}

static void *large_alloc(size_t size, size_t align, bool zero) {
  hak_init();
  hak_purger_poll();
  hak_bigcache_tick();
  /* An aligned request for 0 bytes still gets a byte: the block must start
   * inside its own mapping (a 2 MiB-aligned one would otherwise start on the
   * next chunk, someone else's, and claim that chunk in the registry). */
  if (!size) size = 1;
  if (size > PTRDIFF_MAX - 2 * (align + HAK_SS_SIZE)) {
    errno = ENOMEM;
    return NULL;
  }
  if (align >= HAK_SS_SIZE) {
    void *p = large_alloc_huge_aligned(size, align);
    if (!p) errno = ENOMEM;
    return p;
  }
  size_t off = align > LARGE_HEADER ? align : LARGE_HEADER + large_color();
  size_t need = off + size;
  size_t map_size = large_round(need);
  hak_large_t *hdr = hak_bigcache_take(need);
  if (hdr && (hdr->map_size < need || hdr->map_size / 2 > map_size)) hdr = large_fit(hdr, map_size);
  if (!hdr && (hdr = hak_bigcache_take_grace(need)) && hdr->map_size > map_size) hdr = large_fit(hdr, map_size);
  if (HAK_STAT) hak_stats_bigcache(hdr != NULL);   /* the grace entry serves as the cache does */
  if (hdr) {
    large_set_user(hdr, (char *)hdr + off);
    if (zero) hak_block_zero(hdr->user, size);
    if (HAK_STAT) hak_stats_large(1, size, (int64_t)hdr->map_size);
    return hdr->user;
  }
  hdr = large_map(map_size, HAK_SS_SIZE);
  if (!hdr) {
    errno = ENOMEM;
    return NULL;
  }
  hdr->map_base = (uintptr_t)hdr;
  hdr->map_size = map_size;
  atomic_store_explicit(&hdr->tail_end, 0, memory_order_relaxed);   /* whatever a chunk's page held */
  large_set_user(hdr, (char *)hdr + off);
  if (written_whole(map_size)) hak_os_populate(hdr, page_round(need));
  hak_registry_set((uintptr_t)hdr, HAK_REG_LARGE);
  if (HAK_STAT) hak_stats_large(1, size, (int64_t)map_size);
  return hdr->user;
}

void *hak_large_alloc(size_t size, size_t align, bool zero) {
  void *p = large_alloc(size, align, zero);
  if (HAK_UNLIKELY(hak_prof_on) && p)
    hak_prof_large(align >= HAK_SS_SIZE ? (hak_large_t *)((char *)p - LARGE_HEADER)
                                        : (hak_large_t *)((uintptr_t)p & ~(uintptr_t)HAK_SS_MASK),
                   size);
  return p;
}

/* The header of a large block, after checking p really is one in use (one
 * in the BigCache is reported as `freed`). */
static hak_large_t *large_header(const void *p, uint8_t kind, const char *fn, const char *freed) {
  uintptr_t a = (uintptr_t)p;
  hak_large_t *hdr;
  if (kind == HAK_REG_LARGE) {
    hdr = (hak_large_t *)(a & ~(uintptr_t)HAK_SS_MASK);
  } else {
    if (a & HAK_SS_MASK) hak_fatal_pointer(fn, "invalid pointer", p);
    hdr = (hak_large_t *)(a - LARGE_HEADER);
  }
  if (hdr->user != p || hdr->check != (a ^ hak_secret)) hak_fatal_pointer(fn, "invalid pointer", p);
  if (hdr->freed_at) hak_fatal_pointer(fn, freed, p);
  return hdr;
}

void hak_large_free(void *p, uint8_t kind, const char *fn) {
  hak_large_t *hdr = large_header(p, kind, fn, "double free of");
  if (HAK_UNLIKELY(hdr->sample != NULL)) hak_prof_forget(hdr);
  size_t end = kind == HAK_REG_LARGE && in_chunk(hdr) ? hak_bigcache_take_tail(hdr) : 0;
  if (HAK_STAT) hak_stats_large(-1, 0, -(int64_t)hdr->map_size);
  if (end > hdr->map_size) hdr->map_size = end;   /* the entry has its tail's pages */
  if (kind == HAK_REG_LARGE && hak_bigcache_put(hdr)) return;
  large_unmap(hdr, kind);
}

size_t hak_large_usable(const void *p, uint8_t kind, const char *fn) {
  hak_large_t *hdr = large_header(p, kind, fn, "use after free of");
  return hdr->map_base + hdr->map_size - (uintptr_t)p;
}

/* Resize a large block (kind HAK_REG_LARGE) to size > HAK_LARGE_MIN without
 * copying (large_resize). NULL if the pages could not be moved. While heap
 * profiling, a block that changes its mapping counts as a free of the old
 * block and an allocation of the new size, as a copy would: its sample, if
 * any, is forgotten, and the new size is counted and may be sampled. */
void *hak_large_realloc(void *p, size_t size) {
  hak_large_t *hdr = large_header(p, HAK_REG_LARGE, "realloc", "use after free of");
  size_t off = (uintptr_t)p - (uintptr_t)hdr;
  if (size > PTRDIFF_MAX - 2 * HAK_SS_SIZE) return NULL;
  size_t need = off + size;
  size_t map_size = large_round(need), old_size = hdr->map_size;
  if (need <= old_size && (need > old_size / 2 || map_size >= old_size)) return p;
  hak_large_t *moved = large_resize(hdr, map_size);
  if (!moved) return NULL;
  if (HAK_STAT) hak_stats_large(0, 0, (int64_t)map_size - (int64_t)old_size);
  if (HAK_UNLIKELY(moved->sample != NULL)) {
    hak_prof_forget(moved);
    moved->sample = NULL;
  }
  if (moved != hdr) large_set_user(moved, (char *)moved + off);
  if (HAK_UNLIKELY(hak_prof_on)) hak_prof_large(moved, size);
  return moved->user;
}
