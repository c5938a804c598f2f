/* The global counters of the slow paths, beside the per-heap ones: the
 * bytes of slabs per tier, the large blocks, the BigCache's hits and the
 * bytes it holds, kept by the tiers and read by the statistics' merge
 * (stats.c) and ACE. */
#include "internal.h"

static _Atomic int64_t tier_committed[2], tier_committed_peak[2];   /* tiny, mid slab bytes */
static _Atomic uint64_t large_allocs, large_frees, large_requested;
static _Atomic int64_t large_committed, large_committed_peak;
static _Atomic uint64_t bigcache_hits, bigcache_misses;
_Atomic size_t hak_bigcache_cached_bytes;

static void raise_peak(_Atomic int64_t *peak, int64_t now) {
  int64_t p = atomic_load_explicit(peak, memory_order_relaxed);
  while (now > p && !atomic_compare_exchange_weak(peak, &p, now)) {
  }
}

void hak_stats_slab_bytes(unsigned cls, int64_t bytes) {
  unsigned tier = cls >= HAK_TINY_CLASSES;
  int64_t now = atomic_fetch_add_explicit(&tier_committed[tier], bytes, memory_order_relaxed) + bytes;
  raise_peak(&tier_committed_peak[tier], now);
}

void hak_stats_large(int blocks, size_t requested, int64_t mapped) {
  if (blocks > 0) atomic_fetch_add_explicit(&large_allocs, 1, memory_order_relaxed);
  if (blocks < 0) atomic_fetch_add_explicit(&large_frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&large_requested, requested, memory_order_relaxed);
  int64_t now = atomic_fetch_add_explicit(&large_committed, mapped, memory_order_relaxed) + mapped;
  raise_peak(&large_committed_peak, now);
}

void hak_stats_bigcache(bool hit) {
  atomic_fetch_add_explicit(hit ? &bigcache_hits : &bigcache_misses, 1, memory_order_relaxed);
}

/* Into st: the tiers' committed bytes and peaks, the large blocks' counts
 * and the BigCache's hits and misses. */
void hak_stats_counters(struct hak_stats *st) {
  st->tiny.committed = (uint64_t)atomic_load(&tier_committed[0]);
  st->tiny.committed_peak = (uint64_t)atomic_load(&tier_committed_peak[0]);
  st->mid.committed = (uint64_t)atomic_load(&tier_committed[1]);
  st->mid.committed_peak = (uint64_t)atomic_load(&tier_committed_peak[1]);
  st->large.allocs = atomic_load(&large_allocs);
  st->large.frees = atomic_load(&large_frees);
  st->large.requested = atomic_load(&large_requested);
  st->large.committed = (uint64_t)atomic_load(&large_committed);
  st->large.committed_peak = (uint64_t)atomic_load(&large_committed_peak);
  st->bigcache_hits = atomic_load(&bigcache_hits);
  st->bigcache_misses = atomic_load(&bigcache_misses);
}

size_t hak_bigcache_bytes(void) { return atomic_load_explicit(&hak_bigcache_cached_bytes, memory_order_relaxed); }
