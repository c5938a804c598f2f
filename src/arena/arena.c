/* The arena: one range of address space reserved at start-up that
 * SuperSlabs are carved from, from its bottom up, and the 2 MiB chunks of
 * large blocks that fit one, from its top down; and the table of its
 * units' descriptors, in which free finds the descriptor of any address by
 * a shift and a mask (hak_arena_unit), with no range check: an address
 * outside the arena finds the descriptor of some arena unit, whose block
 * check refuses it (a large block's chunk never held a slab: its
 * descriptors are zero and refuse every address).
 *
 * The block check of a descriptor read while its owner rewrites it may mix
 * two slabs' geometries, which accepts no address below the unit's SuperSlab
 * nor 1 MiB past its end (the largest slab); the reservation goes on 2 MiB
 * past the arena, unused, so that no foreign mapping lies there.
 *
 * Arena chunks are never unmapped: a hole could be taken by a foreign
 * mapping that free would then take for ours. One given back is decommitted
 * and marked in its end's bitmap for the next taker of its kind: a chunk
 * that held a SuperSlab never holds a large block, so that a sweep of the
 * SuperSlabs carved so far (hak_arena_used), which may read a header just
 * given back, never reads nor claims a large block's bytes. A large block
 * of up to 2 MiB costs no system call to map and one madvise to give back,
 * where its own mapping took one to five (mmap at a hint, else a larger
 * one trimmed to the alignment) and a munmap (the soak: 60% of its system
 * calls). The reservation is charged nothing (MAP_NORESERVE) and costs
 * memory only where chunks are in use (the Valgrind-aware build's is
 * smaller, types.h). If it cannot be had, or once the arena is full,
 * SuperSlabs and large blocks are mapped one by one and free finds them
 * through the registry on its slow path. */
#include "internal.h"

#define ARENA_SLOTS (HAK_ARENA_SIZE >> HAK_SS_SHIFT)

uintptr_t hak_arena_base;
uintptr_t hak_arena_size;
static hak_slab_t no_units[1];   /* the table while there is no arena: refuses everything */
hak_slab_t *hak_arena_units = no_units;
uintptr_t hak_arena_unit_mask;
/* The two ends: SuperSlabs from the bottom, large blocks from the top.
 * The chunks taken from the untouched middle so far, bottom's in the low
 * half of the word and top's in the high half (one word: the last chunk
 * goes to one end only): bottom's are slots 0 .. b - 1, top's the last t. */
enum { BOTTOM, TOP };
static _Atomic uint64_t carved;
static size_t carved_at(uint64_t w, int e) { return (size_t)(uint32_t)(w >> (32 * e)); }
static _Atomic uint64_t given[2][ARENA_SLOTS / 64];  /* a bit per chunk given back */
static _Atomic size_t given_count[2];
static _Atomic uint64_t placement;               /* secure build: random numbers' state */

void hak_arena_init(void) {
  const size_t table = HAK_ARENA_UNITS * sizeof(hak_slab_t);
  void *p = hak_os_reserve_aligned(HAK_ARENA_SIZE + HAK_SS_SIZE + table, HAK_SS_SIZE);
  if (!p) return;
  hak_arena_base = (uintptr_t)p;
  hak_arena_size = HAK_ARENA_SIZE;
  /* The table before the mask that indexes it: no other thread runs yet
   * (hak_init precedes the first thread: pthread_create allocates), but a
   * free that saw the mask must see the table in any case. */
  hak_arena_units = (hak_slab_t *)(hak_arena_base + HAK_ARENA_SIZE + HAK_SS_SIZE);
  __atomic_store_n(&hak_arena_unit_mask, (HAK_ARENA_UNITS - 1) * sizeof(hak_slab_t), __ATOMIC_RELEASE);
  if (HAK_SECURE) {   /* every slot is free to take, in random order (hak_arena_take) */
    for (size_t w = 0; w < ARENA_SLOTS / 64; w++) atomic_store_explicit(&given[BOTTOM][w], ~0ull, memory_order_relaxed);
    atomic_store_explicit(&given_count[BOTTOM], ARENA_SLOTS, memory_order_relaxed);
    atomic_store_explicit(&placement, hak_os_random(), memory_order_relaxed);
  }
}

static hak_superslab_t *slot_address(size_t i) {
  return (hak_superslab_t *)(hak_arena_base + ((uintptr_t)i << HAK_SS_SHIFT));
}

hak_superslab_t *hak_arena_superslab(size_t i) {
  hak_superslab_t *ss = slot_address(i);
  return hak_registry_kind((uintptr_t)ss) == HAK_REG_SUPERSLAB ? ss : NULL;
}

size_t hak_arena_used(void) {
  return hak_arena_size ? carved_at(atomic_load_explicit(&carved, memory_order_acquire), BOTTOM) : 0;
}

/* Secure build: the slots in use so far lie below the highest one taken,
 * which sweeps read as the count carved (hak_arena_used). */
static void carved_at_least(size_t n) {
  uint64_t cur = atomic_load_explicit(&carved, memory_order_relaxed);
  while (carved_at(cur, BOTTOM) < n && !atomic_compare_exchange_weak(&carved, &cur, (cur & ~0xffffffffull) | n)) {
  }
}

/* A chunk given back at end e, or NULL; r places the search (secure
 * build): from a random bit of a random word. */
static void *take_given(int e, uint64_t r) {
  if (!atomic_load_explicit(&given_count[e], memory_order_relaxed)) return NULL;
  for (size_t n = 0; n < ARENA_SLOTS / 64; n++) {
    size_t w = (n + (size_t)(r >> 6)) % (ARENA_SLOTS / 64);
    uint64_t bits = atomic_load_explicit(&given[e][w], memory_order_relaxed);
    while (bits) {
      uint64_t above = bits & (~0ull << (r & 63));
      uint64_t bit = above ? above & -above : bits & -bits;
      uint64_t old = atomic_fetch_and(&given[e][w], ~bit);
      if (old & bit) {
        atomic_fetch_sub(&given_count[e], 1);
        size_t i = w * 64 + (size_t)__builtin_ctzll(bit);
        if (HAK_SECURE && e == BOTTOM) carved_at_least(i + 1);
        return slot_address(i);
      }
      bits = old & ~bit;
    }
  }
  return NULL;
}

/* A chunk from the untouched middle for end e, or NULL when the two ends
 * met. */
static void *take_new(int e) {
  uint64_t w = atomic_load_explicit(&carved, memory_order_relaxed);
  while (carved_at(w, BOTTOM) + carved_at(w, TOP) < ARENA_SLOTS) {
    size_t i = carved_at(w, e);
    if (atomic_compare_exchange_weak(&carved, &w, w + ((uint64_t)1 << (32 * e))))
      return slot_address(e == BOTTOM ? i : ARENA_SLOTS - 1 - i);
  }
  return NULL;
}

/* A SuperSlab of the arena, zeroed: one given back, else a fresh one; NULL
 * when the arena is full or absent. The secure build has every slot given
 * at the start and takes them from a random place (hak_arena_init): the
 * first one at or after a random bit of a random word. */
hak_superslab_t *hak_arena_take(void) {
  if (!hak_arena_size) return NULL;
  uint64_t r = 0;
  if (HAK_SECURE) {
    uint64_t state = atomic_fetch_add_explicit(&placement, 1, memory_order_relaxed);
    r = hak_random(&state);
  }
  void *c = take_given(BOTTOM, r);
  return c ? c : take_new(BOTTOM);
}

/* A 2 MiB chunk of the arena for a large block, zeroed; NULL when the
 * arena is full or absent (and in the secure build, whose large blocks
 * keep their own mappings with a guard page after each). */
void *hak_arena_take_large(void) {
  if (!hak_arena_size || HAK_SECURE) return NULL;
  void *c = take_given(TOP, 0);
  return c ? c : take_new(TOP);
}

/* Take back a chunk of the arena that nobody uses any more, to its end. */
void hak_arena_give(void *chunk) {
  hak_os_decommit(chunk, HAK_SS_SIZE);
  size_t i = ((uintptr_t)chunk - hak_arena_base) >> HAK_SS_SHIFT;
  int e = i < hak_arena_used() ? BOTTOM : TOP;
  atomic_fetch_or(&given[e][i / 64], 1ull << (i % 64));
  atomic_fetch_add(&given_count[e], 1);
}
