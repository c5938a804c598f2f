/* The BigCache: recently freed large mappings, kept mapped (and registered)
 * for reuse without system calls.
 *
 * Large mappings come in the sizes of large.c's rounding, 8 per doubling, so
 * the cache has a bin per size (above HAK_LARGE_MIN, up to 4 GiB) with a few
 * slots each. A slot holds the header address, which is 2 MiB aligned, with
 * the mapping size in pages in its low bits, so a thread can judge an entry
 * without touching memory it does not own yet; a single compare-and-swap
 * takes it. A request is served from its own bin or the next ones up to
 * twice its size; failing that, by a smaller one in a 2 MiB chunk of the
 * arena, which large.c grows within its chunk; else by the nearest entry
 * of another size, which large.c cuts to size (the rest is cached on its own; one munmap at most,
 * of the pages between the block's end and the rest's 2 MiB boundary), or
 * for a big one (GROW_MIN) grows with mremap: where a new mapping's pages
 * would each cost a page fault when the program touches them (a 16 MiB
 * one, 4096). Entries expire after BIGCACHE_DELAY_MS;
 * at most BIGCACHE_BUDGET bytes are kept, in blocks of at most
 * BIGCACHE_MAX_BLOCK. The adaptive controller (ace.c) lengthens the delay
 * while blocks are mapped anew soon after entries that could have served
 * them expired, and (profile auto) raises the budget while freed blocks are
 * refused for lack of it and others mapped anew.
 *
 * The last block refused (for the budget or BIGCACHE_MAX_BLOCK) is kept
 * too, as the one grace entry, until the profile's BIGCACHE_DELAY_MS passes
 * (not lengthened) or hakmem maps memory anew, whichever comes first: so it
 * never adds to a peak, and a program that frees a big buffer and then
 * allocates smaller big ones cuts them from its pages rather than faulting
 * in new ones (docs/design/tuning.md, "The BigCache's grace entry"). A
 * request takes it only when no cached entry serves it, and cuts it to
 * size. */
#include "internal.h"

#define SIZE_BITS_MASK ((uintptr_t)HAK_SS_MASK)
#define PAGE_SHIFT 12
#define MIN_SHIFT 17                  /* bins start above 2^17 = HAK_LARGE_MIN */
#define BINS HAK_LARGE_BINS
#define BIN_SLOTS 8
#define SLOTS (BINS * BIN_SLOTS)

_Static_assert(HAK_LARGE_MIN == (size_t)1 << MIN_SHIFT && BINS == 8 * (32 - MIN_SHIFT), "bins start where large blocks may");
_Static_assert(((4ull << 30) >> PAGE_SHIFT) <= HAK_SS_MASK, "sizes up to BIGCACHE_MAX_BLOCK's 4 GiB fit in a slot's low bits");

static _Atomic uintptr_t slots[SLOTS];
static _Atomic uint64_t slot_time[SLOTS];
static _Atomic int cached;
static _Atomic uint64_t next_expiry;   /* ms, earliest expiry of an entry (may be early), 0: none */
static _Atomic uint64_t expired_at[BINS];   /* ms, when an entry of the bin last expired */
static _Atomic uint64_t refused_at[BINS];   /* ms, when a block of the bin was last refused for the budget */

#define REGRET_WINDOW 4   /* delays after an expiry or a refusal in which a new mapping it could
                             have served is a sign the delay or the budget is short */

static uint64_t delay(void) { return (uint64_t)hak_ace_value(hak_knob_bigcache_delay_ms); }

/* A slot's value (and the grace entry's): the header, 2 MiB aligned, with
 * the mapping size in pages in its low bits; and its parts. */
static uintptr_t slot_value(const hak_large_t *hdr) { return (uintptr_t)hdr | (hdr->map_size >> PAGE_SHIFT); }
static size_t slot_size(uintptr_t v) { return (v & SIZE_BITS_MASK) << PAGE_SHIFT; }
static hak_large_t *slot_header(uintptr_t v) { return (hak_large_t *)(v & ~SIZE_BITS_MASK); }

/* hdr freed at now, in ms: nonzero, which large.c reads as freed. */
static void mark_freed(hak_large_t *hdr, uint64_t now) { hdr->freed_at = now ? now : 1; }

static hak_large_t *slot_take(unsigned i, uintptr_t v) {
  if (!atomic_compare_exchange_strong(&slots[i], &v, 0)) return NULL;
  atomic_fetch_sub(&cached, 1);
  atomic_fetch_sub(&hak_bigcache_cached_bytes, slot_size(v));
  return slot_header(v);
}

static void unmap_entry(hak_large_t *hdr) {
  hak_registry_set((uintptr_t)hdr, HAK_REG_FOREIGN);
  hak_large_unmap(hdr);
}

static void expiry_at_most(uint64_t when) {
  uint64_t cur = atomic_load_explicit(&next_expiry, memory_order_relaxed);
  while ((!cur || when < cur) && !atomic_compare_exchange_weak(&next_expiry, &cur, when)) {
  }
}

/* The grace entry (above): header address and size in pages as a slot's,
 * 0 if none, and when it was put. */
static _Atomic uintptr_t grace;
static _Atomic uint64_t grace_at;

static uint64_t grace_ms(void) { return (uint64_t)hak_opt(hak_option_bigcache_delay_ms); }

/* Keep hdr, refused, as the grace entry; the one before goes to the OS. */
static bool grace_put(hak_large_t *hdr, size_t size) {
  if (size <= HAK_LARGE_MIN || size >> PAGE_SHIFT > SIZE_BITS_MASK) return false;
  uint64_t now = hak_os_now_ms();
  mark_freed(hdr, now);
  atomic_store(&grace_at, now);
  uintptr_t old = atomic_exchange(&grace, slot_value(hdr));
  if (old) unmap_entry(slot_header(old));
  expiry_at_most(now + grace_ms());
  hak_purger_notify();
  return true;
}

bool hak_bigcache_grace_drop(void) {
  if (!atomic_load_explicit(&grace, memory_order_relaxed)) return false;
  uintptr_t old = atomic_exchange(&grace, 0);
  if (old) unmap_entry(slot_header(old));
  return old != 0;
}

hak_large_t *hak_bigcache_take_grace(size_t min_size) {
  uintptr_t v = atomic_load_explicit(&grace, memory_order_relaxed);
  if (!v || slot_size(v) < min_size || !atomic_compare_exchange_strong(&grace, &v, 0)) return NULL;
  return slot_header(v);
}

/* Count size bytes more in what the BigCache holds, if its budget allows. */
static bool within_budget(size_t size) {
  if (atomic_fetch_add(&hak_bigcache_cached_bytes, size) + size <= (size_t)hak_ace_value(hak_knob_bigcache_budget))
    return true;
  atomic_fetch_sub(&hak_bigcache_cached_bytes, size);
  return false;
}

/* Put v in the first free one of the n slots at, stamped now (in time[]),
 * to expire after the delay; false if all n are taken. */
static bool slot_fill(_Atomic uintptr_t *at, _Atomic uint64_t *time, unsigned n, uintptr_t v, uint64_t now) {
  for (unsigned i = 0; i < n; i++) {
    uintptr_t expected = 0;
    if (atomic_load_explicit(&at[i], memory_order_relaxed)) continue;
    atomic_store_explicit(&time[i], now, memory_order_relaxed);
    if (atomic_compare_exchange_strong(&at[i], &expected, v)) {
      expiry_at_most(now + delay());
      hak_purger_notify();
      return true;
    }
  }
  return false;
}

/* Tails. A block cut from a larger entry in a chunk of the arena, or shrunk
 * by realloc within its chunk, leaves resident pages past its end: they are
 * kept for BIGCACHE_DELAY_MS as an entry is, within the same budget, so that
 * the block grows into them again without page faults. Ruby grows a buffer by
 * realloc from 128 KiB to 1.5 MiB and frees it, again and again; each new one
 * took the last one's chunk, cut it to 144 KiB and faulted its pages in
 * again as it grew (docs/design/tuning.md, "Tails of blocks in chunks"). A
 * slot holds the block's header, whose tail_end says where the tail ends.
 * The thread that resizes or frees the block takes its tail back first; a
 * sweep that decommits an expired tail marks its slot busy meanwhile, and
 * that thread waits for it: the pages must be gone before the block grows
 * into them. */
#define TAILS 8
#define TAIL_BUSY ((uintptr_t)1)
static _Atomic uintptr_t tails[TAILS];
static _Atomic uint64_t tail_time[TAILS];

bool hak_bigcache_keep_tail(hak_large_t *hdr, size_t end) {
  size_t bytes = end - hdr->map_size;
  if (!within_budget(bytes)) return false;
  atomic_store_explicit(&hdr->tail_end, end, memory_order_relaxed);
  if (slot_fill(tails, tail_time, TAILS, (uintptr_t)hdr, hak_os_now_ms())) return true;
  atomic_store_explicit(&hdr->tail_end, 0, memory_order_relaxed);
  atomic_fetch_sub(&hak_bigcache_cached_bytes, bytes);
  return false;
}

size_t hak_bigcache_take_tail(hak_large_t *hdr) {
  for (;;) {
    size_t end = atomic_load_explicit(&hdr->tail_end, memory_order_acquire);
    if (!end) return 0;
    for (unsigned i = 0; i < TAILS; i++) {
      uintptr_t v = (uintptr_t)hdr;
      if (atomic_load_explicit(&tails[i], memory_order_relaxed) == v && atomic_compare_exchange_strong(&tails[i], &v, 0)) {
        atomic_store_explicit(&hdr->tail_end, 0, memory_order_relaxed);
        atomic_fetch_sub(&hak_bigcache_cached_bytes, end - hdr->map_size);
        return end;
      }
    }
    hak_os_yield();   /* a sweep is decommitting it: done when tail_end reads 0 */
  }
}

/* Decommit the tail in slot i, which held v, unless another thread took it. */
static bool tail_drop(unsigned i, uintptr_t v) {
  if (!v || (v & TAIL_BUSY) || !atomic_compare_exchange_strong(&tails[i], &v, v | TAIL_BUSY)) return false;
  hak_large_t *hdr = (hak_large_t *)v;
  size_t bytes = atomic_load_explicit(&hdr->tail_end, memory_order_relaxed) - hdr->map_size;
  hak_os_decommit((char *)hdr + hdr->map_size, bytes);
  atomic_fetch_sub(&hak_bigcache_cached_bytes, bytes);
  atomic_store_explicit(&hdr->tail_end, 0, memory_order_release);
  atomic_store_explicit(&tails[i], 0, memory_order_release);
  return true;
}

/* In a forked child a sweep under way in another thread stopped for good:
 * its tail is the block's again (decommitted or not, its pages are past the
 * block's end). */
void hak_bigcache_forked(void) {
  for (unsigned i = 0; i < TAILS; i++) {
    uintptr_t v = atomic_load_explicit(&tails[i], memory_order_relaxed);
    if (!(v & TAIL_BUSY)) continue;
    atomic_store_explicit(&((hak_large_t *)(v & ~TAIL_BUSY))->tail_end, 0, memory_order_relaxed);
    atomic_store_explicit(&tails[i], 0, memory_order_relaxed);
  }
}

bool hak_bigcache_put(hak_large_t *hdr) {
  size_t size = hdr->map_size;
  if (size > (size_t)hak_opt(hak_option_bigcache_max_block) || size <= HAK_LARGE_MIN) return grace_put(hdr, size);
  if (!within_budget(size)) {
    hak_ace_sign(HAK_ACE_BIGCACHE_REFUSED, size);
    hak_ace_sign(HAK_ACE_BIGCACHE_REFUSALS, 1);
    atomic_store_explicit(&refused_at[hak_large_bin(size)], hak_os_now_ms(), memory_order_relaxed);
    return grace_put(hdr, size);
  }
  uint64_t now = hak_os_now_ms();
  mark_freed(hdr, now);
  unsigned first = hak_large_bin(size) * BIN_SLOTS;
  if (slot_fill(slots + first, slot_time + first, BIN_SLOTS, slot_value(hdr), now)) {
    atomic_fetch_add(&cached, 1);
    return true;
  }
  atomic_fetch_sub(&hak_bigcache_cached_bytes, size);
  return false;
}

/* The bins whose entries may serve a request of min_size bytes: from its
 * own up to twice its size. */
static unsigned last_bin(unsigned first) { return first + 8 < BINS ? first + 8 : BINS; }

/* A cached mapping of at least min_size bytes and at most twice that: from
 * the bin of min_size's mapping size up, the first one found. */
static hak_large_t *lookup(size_t min_size) {
  if (!atomic_load_explicit(&cached, memory_order_relaxed)) return NULL;
  unsigned first = hak_large_bin(min_size);
  for (unsigned i = first * BIN_SLOTS; i < last_bin(first) * BIN_SLOTS; i++) {
    uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (!v || slot_size(v) < min_size) continue;
    hak_large_t *hdr = slot_take(i, v);
    if (hdr) return hdr;
  }
  return NULL;
}

/* The smallest cached mapping above twice min_size (roughly: from the bin
 * past lookup's last). */
static hak_large_t *above(size_t min_size) {
  unsigned first = hak_large_bin(min_size);
  for (unsigned i = last_bin(first) * BIN_SLOTS; i < SLOTS; i++) {
    uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    hak_large_t *hdr = v ? slot_take(i, v) : NULL;
    if (hdr) return hdr;
  }
  return NULL;
}

/* Growing an entry of the BigCache moves its pages (mremap; up to four
 * system calls when it cannot grow in place), which saves their page faults
 * only for those the program touched: worth it for entries of GROW_MIN and
 * up, a thousand pages; below, a new mapping is cheaper when few are. */
#define GROW_MIN ((size_t)4 << 20)

/* The largest cached mapping of GROW_MIN bytes up to max_size. */
static hak_large_t *below(size_t max_size) {
  if (max_size < GROW_MIN) return NULL;
  unsigned top = hak_large_bin(max_size) < BINS ? hak_large_bin(max_size) : BINS - 1;   /* bins end at 4 GiB */
  for (unsigned i = (top + 1) * BIN_SLOTS; i-- > hak_large_bin(GROW_MIN) * BIN_SLOTS;) {
    uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    hak_large_t *hdr = v && slot_size(v) <= max_size && slot_size(v) >= GROW_MIN ? slot_take(i, v) : NULL;
    if (hdr) return hdr;
  }
  return NULL;
}

/* A cached chunk of the arena (large.c) smaller than min_size, from the
 * largest bins down, for a request of up to 2 MiB: its block grows within
 * its chunk with no system call, and the pages it adds were never touched,
 * so none is held for nothing (an entry above twice the request would
 * hold its own). Without it, the entries of the sizes asked for ran out in
 * turn while the cache held others a little smaller. */
static hak_large_t *below_chunk(size_t min_size) {
  if (min_size > HAK_SS_SIZE) return NULL;
  for (unsigned i = (hak_large_bin(min_size) + 1) * BIN_SLOTS; i-- > 0;) {
    uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    hak_large_t *hdr = v && slot_size(v) < min_size && hak_in_arena((uintptr_t)slot_header(v)) ? slot_take(i, v) : NULL;
    if (hdr) return hdr;
  }
  return NULL;
}

/* Did a bin whose entries could serve min_size see its event (at[], ms)
 * within the last window ms? */
static bool lately(const _Atomic uint64_t *at, size_t min_size, uint64_t now, uint64_t window) {
  unsigned first = hak_large_bin(min_size);
  for (unsigned b = first; b < last_bin(first); b++) {
    uint64_t t = atomic_load_explicit(&at[b], memory_order_relaxed);
    if (t && now - t <= window) return true;
  }
  return false;
}

/* lookup's, else below_chunk's, else above's, else below's; on a miss of
 * lookup the signs the adaptive controller reads: a miss, and whether an
 * entry that could have served it expired lately, or a block that could
 * have was refused for the budget (a refusal and a miss seldom fall in
 * one period when the blocks come a few a second: the soak's budget stayed
 * at 16 MiB while its misses and refusals cost 2 madvise calls a second). */
hak_large_t *hak_bigcache_take(size_t min_size) {
  hak_large_t *hdr = lookup(min_size);
  if (hdr) return hdr;
  hak_ace_sign(HAK_ACE_BIGCACHE_MISSED, 1);
  uint64_t now = hak_os_now_ms(), window = REGRET_WINDOW * delay();
  hak_ace_poll(now);   /* a miss maps anew: the cost of a look at the clock is nothing beside it */
  if (lately(expired_at, min_size, now, window)) hak_ace_sign(HAK_ACE_EXPIRED_MISSED, min_size);
  if (lately(refused_at, min_size, now, window)) hak_ace_sign(HAK_ACE_REFUSED_MISSED, 1);
  if (!atomic_load_explicit(&cached, memory_order_relaxed)) return NULL;
  if ((hdr = below_chunk(min_size)) || (hdr = above(min_size))) return hdr;
  return below(min_size);
}

/* Unmap the entries older than BIGCACHE_DELAY_MS (the grace entry: than
 * the option's own value); cheap until the earliest one is due. Returns the
 * next expiry, 0 if none. */
uint64_t hak_bigcache_tick(void) {
  uint64_t due = atomic_load_explicit(&next_expiry, memory_order_relaxed);
  if (!due) return 0;
  uint64_t now = hak_os_now_ms();
  if (now < due || !atomic_compare_exchange_strong(&next_expiry, &due, 0)) return due;
  uintptr_t g = atomic_load(&grace);
  if (g) {
    uint64_t expires = atomic_load(&grace_at) + grace_ms();
    if (expires > now) expiry_at_most(expires);
    else if (atomic_compare_exchange_strong(&grace, &g, 0)) unmap_entry(slot_header(g));
  }
  uint64_t delay_ms = delay();
  for (unsigned i = 0; i < TAILS; i++) {
    uintptr_t v = atomic_load_explicit(&tails[i], memory_order_relaxed);
    if (!v) continue;
    uint64_t expires = atomic_load_explicit(&tail_time[i], memory_order_relaxed) + delay_ms;
    if (expires > now) expiry_at_most(expires);
    else tail_drop(i, v);
  }
  for (unsigned i = 0; i < SLOTS; i++) {
    uintptr_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (!v) continue;
    uint64_t expires = atomic_load_explicit(&slot_time[i], memory_order_relaxed) + delay_ms;
    if (expires > now) {
      expiry_at_most(expires);
      continue;
    }
    hak_large_t *hdr = slot_take(i, v);
    if (hdr) {
      unmap_entry(hdr);
      atomic_store_explicit(&expired_at[i / BIN_SLOTS], now, memory_order_relaxed);
    }
  }
  return atomic_load_explicit(&next_expiry, memory_order_relaxed);
}

int hak_bigcache_drain(void) {
  int released = hak_bigcache_grace_drop();
  for (unsigned i = 0; i < TAILS; i++) released |= tail_drop(i, atomic_load(&tails[i]));
  for (unsigned i = 0; i < SLOTS; i++) {
    uintptr_t v = atomic_load(&slots[i]);
    hak_large_t *hdr = v ? slot_take(i, v) : NULL;
    if (hdr) {
      unmap_entry(hdr);
      released = 1;
    }
  }
  return released;
}
