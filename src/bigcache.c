/* The BigCache: recently freed large mappings, kept mapped (and registered)
 * for reuse without system calls. A slot holds the header address, which is
 * 2 MiB aligned, with the mapping size in pages in its low bits, so a thread
 * can judge an entry without touching memory it does not own yet; a single
 * compare-and-swap takes it. Entries expire after BIGCACHE_DELAY_MS; at most
 * BIGCACHE_BUDGET bytes are kept, in blocks of at most BIGCACHE_MAX_BLOCK. */
#include "internal.h"

#define SIZE_BITS_MASK ((uintptr_t)HAK_SS_MASK)
#define PAGE_SHIFT 12

_Static_assert(((4ull << 30) >> PAGE_SHIFT) <= HAK_SS_MASK, "sizes up to BIGCACHE_MAX_BLOCK's 4 GiB fit in a slot's low bits");

static _Atomic uintptr_t slots[HAK_BIGCACHE_SLOTS];
static _Atomic uint64_t slot_time[HAK_BIGCACHE_SLOTS];
static _Atomic size_t cached_bytes;
static _Atomic int cached;

static size_t slot_size(uintptr_t v) { return (v & SIZE_BITS_MASK) << PAGE_SHIFT; }

static hak_large_t *slot_take(unsigned i, uintptr_t v) {
  if (!atomic_compare_exchange_strong(&slots[i], &v, 0)) return NULL;
  atomic_fetch_sub(&cached, 1);
  atomic_fetch_sub(&cached_bytes, slot_size(v));
  return (hak_large_t *)(v & ~SIZE_BITS_MASK);
}

static void unmap_entry(hak_large_t *hdr) {
  hak_registry_set((uintptr_t)hdr, HAK_REG_FOREIGN);
  hak_os_unmap(hdr, hdr->map_size);
}

bool hak_bigcache_put(hak_large_t *hdr) {
  size_t size = hdr->map_size;
  if (size > (size_t)hak_opt(hak_option_bigcache_max_block)) return false;
  if (atomic_fetch_add(&cached_bytes, size) + size > (size_t)hak_opt(hak_option_bigcache_budget)) {
    atomic_fetch_sub(&cached_bytes, size);
    return false;
  }
  uint64_t now = hak_os_now_ms();
  hdr->freed_at = now ? now : 1;
  uintptr_t v = (uintptr_t)hdr | (size >> PAGE_SHIFT);
  for (unsigned i = 0; i < HAK_BIGCACHE_SLOTS; i++) {
    uintptr_t expected = 0;
    if (atomic_load_explicit(&slots[i], memory_order_relaxed)) continue;
    atomic_store_explicit(&slot_time[i], now, memory_order_relaxed);
    if (atomic_compare_exchange_strong(&slots[i], &expected, v)) {
      atomic_fetch_add(&cached, 1);
      return true;
    }
  }
  atomic_fetch_sub(&cached_bytes, size);
  return false;
}

/* The smallest cached mapping of at least min_size bytes (the caller trims
 * what it does not need). */
hak_large_t *hak_bigcache_take(size_t min_size) {
  while (atomic_load_explicit(&cached, memory_order_relaxed)) {
    unsigned best = HAK_BIGCACHE_SLOTS;
    uintptr_t best_v = 0;
    for (unsigned i = 0; i < HAK_BIGCACHE_SLOTS; i++) {
      uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
      size_t s = slot_size(v);
      if (!v || s < min_size) continue;
      if (best == HAK_BIGCACHE_SLOTS || s < slot_size(best_v)) {
        best = i;
        best_v = v;
      }
    }
    if (best == HAK_BIGCACHE_SLOTS) return NULL;
    hak_large_t *hdr = slot_take(best, best_v);
    if (hdr) return hdr;
  }
  return NULL;
}

void hak_bigcache_tick(void) {
  if (!atomic_load_explicit(&cached, memory_order_relaxed)) return;
  uint64_t now = hak_os_now_ms();
  long delay = hak_opt(hak_option_bigcache_delay_ms);
  for (unsigned i = 0; i < HAK_BIGCACHE_SLOTS; i++) {
    uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (!v || now - atomic_load_explicit(&slot_time[i], memory_order_relaxed) < (uint64_t)delay) continue;
    hak_large_t *hdr = slot_take(i, v);
    if (hdr) unmap_entry(hdr);
  }
}

int hak_bigcache_drain(void) {
  int released = 0;
  for (unsigned i = 0; i < HAK_BIGCACHE_SLOTS; i++) {
    uintptr_t v = atomic_load(&slots[i]);
    hak_large_t *hdr = v ? slot_take(i, v) : NULL;
    if (hdr) {
      unmap_entry(hdr);
      released = 1;
    }
  }
  return released;
}
