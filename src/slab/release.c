/* The release policy: when memory goes back to the OS.
 *
 * - A slab that becomes empty returns its units to its SuperSlab; the units'
 *   pages are decommitted once they stayed free for half to all of
 *   PURGE_DELAY_MS (types.h: deadlines every half delay, aged units).
 * - A wholly empty SuperSlab is no exception: its units go after the same
 *   delay (a thread whose footprint swings by SuperSlabs takes them back
 *   meanwhile). The heap keeps KEEP_EMPTY_SUPERSLABS of them; the others go
 *   to the shared pool as they empty, their pages resident for the same
 *   delay, so that any heap takes them back. Without the background purger
 *   (which decommits pooled SuperSlabs at their deadlines) the heap keeps
 *   them for the delay, then gives them up, their pages dropped (decommitted
 *   at once, the units of a thread that freed a cache's worth of large mid
 *   blocks, say, were faulted in again batch after batch).
 * - hak_release_purge(h, HAK_PURGE_ALL) (malloc_trim) does all of it now.
 * - Heaps of exited threads keep the same delays; whichever thread passes
 *   its release tick after the earliest deadline purges them.
 * - Any thread may decommit any SuperSlab's dirty units (a sweep, types.h):
 *   the background purger (purger.c) sweeps every SuperSlab of the arena
 *   when deadlines pass, so that the free memory of threads that sleep or no
 *   longer call the allocator goes back too; malloc_trim sweeps them all now.
 * Deadlines are checked on the slow paths, never on the fast paths. */
#include "internal.h"

#define REMOTE_COLLECT_EVERY 64   /* slow-path visits between sweeps of inboxes and batches
                                     (and visits to the adaptive controller) */
#define GROWN_BYTES_PER_TICK 8192 /* bytes of new slabs that count as a slow-path visit */

static _Atomic uint64_t abandoned_due;   /* earliest purge deadline of an abandoned heap */

void hak_release_abandoned_due(uint64_t when) {
  uint64_t cur = atomic_load_explicit(&abandoned_due, memory_order_relaxed);
  while ((!cur || when < cur) && !atomic_compare_exchange_weak(&abandoned_due, &cur, when)) {
  }
  hak_purger_notify();
}

/* The purge delay now: PURGE_DELAY_MS, lengthened by the adaptive
 * controller (ace.c) while units are taken back within RETAKEN_WINDOW
 * delays of their decommit (their pages fault in again). */
#define RETAKEN_WINDOW 4

uint64_t hak_release_delay(void) { return (uint64_t)hak_ace_value(hak_knob_purge_delay_ms); }

/* An abandoned heap holds memory from now on: it is purged a purge delay
 * later, the adaptive one as every other deadline (it was the option's
 * value). */
void hak_release_abandoned_since(uint64_t now) { hak_release_abandoned_due(now + hak_release_delay()); }

uint64_t hak_release_window(void) { return RETAKEN_WINDOW * hak_release_delay(); }

void hak_release_retaken(uint64_t purged_at) {
  if (hak_os_now_ms() - purged_at <= hak_release_window()) hak_ace_sign(HAK_ACE_RETAKEN, 1);
}

/* Deadlines come every half delay; a unit goes at the second one it sees
 * dirty (types.h). */
static uint64_t purge_deadline(uint64_t now) { return now + hak_release_delay() / 2; }

/* The deadline of ss's dirty units: the one it has, else one from now. */
static uint64_t ss_deadline(hak_superslab_t *ss, uint64_t now) {
  uint64_t none = 0, when = purge_deadline(now);
  return atomic_compare_exchange_strong(&ss->purge_at, &none, when) ? when : none;
}

/* Is ss wholly empty, and one more than the keep its heap h may hold? */
static bool extra_empty(const hak_heap_t *h, const hak_superslab_t *ss, uint32_t keep) {
  return ss->free_units == HAK_UNITS_ALL && h->empty_superslabs > keep;
}

/* Called by the owner after it made units of ss dirty (or emptied it). An
 * empty SuperSlab beyond those the heap keeps goes to the shared pool at
 * once: one outside the arena, which no background sweep reaches, as its
 * owner may not pass a slow path again; one of the arena if its heap's
 * thread runs (an exiting thread's go with its heap's release:
 * hak_release_purge) and the pool keeps its pages (the purger
 * runs, and a slot is free: a full pool would unmap it). Its pages stay
 * resident for the purge delay as they would in the heap, and any heap
 * that needs a SuperSlab takes it meanwhile: kept by their heaps, each
 * heap held the most it ever held (docs/design/tuning.md, "Empty
 * SuperSlabs go to the shared pool at once"). */
void hak_release_schedule(hak_heap_t *h, hak_superslab_t *ss) {
  if (extra_empty(h, ss, (uint32_t)hak_opt(hak_option_keep_empty_superslabs)) &&
      (!hak_in_arena((uintptr_t)ss) || (h->thread && hak_shared_pool_keeps_pages())) && hak_superslab_give_up(h, ss))
    return;
  uint64_t due = atomic_load(&ss->purge_at);
  if (!due) due = ss_deadline(ss, hak_os_now_ms());
  h->purge_at = hak_deadline_min(h->purge_at, due);
  hak_purger_notify();
}

/* ss gets a deadline for its dirty units, if it has any and none yet; the
 * purger sweeps it then: a pooled SuperSlab (shared_pool.c), or the units
 * a guest releases in another heap's (superslab.c), which no purge of the
 * guest's own reaches. */
void hak_release_schedule_swept(hak_superslab_t *ss) {
  if (!HAK_DIRTY(atomic_load(&ss->dirty))) return;
  ss_deadline(ss, hak_os_now_ms());
  hak_purger_notify();
}

/* Decommit the pages of the units in mask (unit 0 keeps its header page). */
static void decommit_units(hak_superslab_t *ss, uint32_t mask) {
  unsigned first = 0;
  while (first < HAK_UNITS) {
    if (!(mask >> first & 1u)) {
      first++;
      continue;
    }
    unsigned end = first;
    while (end < HAK_UNITS && (mask >> end & 1u)) end++;
    uintptr_t from = (uintptr_t)ss + (first == 0 ? HAK_SS_HEADER : (uintptr_t)first << HAK_UNIT_SHIFT);
    uintptr_t to = (uintptr_t)ss + ((uintptr_t)end << HAK_UNIT_SHIFT);
    hak_os_decommit((void *)from, to - from);
    first = end;
  }
}

/* Claim the dirty units of ss that are in mask, decommit them, release the
 * claim (types.h). True if there were any. */
bool hak_release_purge_units(hak_superslab_t *ss, uint32_t mask) {
  uint64_t w = atomic_load(&ss->dirty);
  uint32_t d;
  do {
    d = HAK_DIRTY(w) & mask;
    if (!d) return false;
  } while (!atomic_compare_exchange_weak(&ss->dirty, &w, (w & ~(uint64_t)d) | (uint64_t)d << 32));
  decommit_units(ss, d);
  atomic_store_explicit(&ss->purged_at, hak_os_now_ms(), memory_order_relaxed);
  atomic_fetch_or_explicit(&ss->purged, d, memory_order_relaxed);
  atomic_fetch_and_explicit(&ss->dirty, ~((uint64_t)d << 32), memory_order_release);
  return true;
}

/* Sweep one SuperSlab, whoever owns it: when its deadline has passed,
 * decommit its aged dirty units and age the others (all of them with
 * force); dirty units without a deadline get one. Returns the deadline
 * still pending, 0 if none. */
static uint64_t sweep(hak_superslab_t *ss, uint64_t now, bool force, int *released) {
  if (!HAK_DIRTY(atomic_load(&ss->dirty))) {
    hak_superslab_unlend(ss);   /* nothing a guest could take */
    return 0;
  }
  uint64_t due = atomic_load(&ss->purge_at);
  if (!force && due > now) return due;
  if (force || due) {
    *released |= hak_release_purge_units(ss, force ? HAK_UNITS_ALL : atomic_load_explicit(&ss->aged, memory_order_relaxed));
    atomic_store_explicit(&ss->aged, HAK_DIRTY(atomic_load(&ss->dirty)), memory_order_relaxed);
    /* Cleared before the dirty word is read again, while the owner sets
     * dirty bits before it reads purge_at: one of the two sees the other's
     * write, so new dirty units never stay without a deadline. */
    if (due && !atomic_compare_exchange_strong(&ss->purge_at, &due, 0)) return due;
    if (!HAK_DIRTY(atomic_load(&ss->dirty))) return 0;
  }
  return ss_deadline(ss, now);
}

/* Purge what h's deadlines allow (HAK_PURGE_DUE), or that and its empty
 * SuperSlabs beyond those it keeps at once (HAK_PURGE_LEAVE: its thread
 * leaves it, and the next threads take SuperSlabs from the shared pool),
 * or everything now (HAK_PURGE_ALL). */
int hak_release_purge(hak_heap_t *h, hak_purge_t how) {
  uint32_t keep = how == HAK_PURGE_ALL ? 0 : (uint32_t)hak_opt(hak_option_keep_empty_superslabs);
  bool force = how == HAK_PURGE_ALL;
  uint64_t now = hak_os_now_ms();
  uint64_t next = 0;
  int released = 0;
  hak_superslab_t *ss = h->superslabs;
  while (ss) {
    hak_superslab_t *following = ss->next;
    bool empty = extra_empty(h, ss, keep);
    if (empty && how != HAK_PURGE_DUE && hak_superslab_give_up(h, ss)) {
      released = 1;
    } else {
      uint64_t due = sweep(ss, now, force, &released);
      if (!(empty && !due && hak_superslab_give_up(h, ss))) next = hak_deadline_min(next, due);
    }
    ss = following;
  }
  h->purge_at = next;
  if (force && hak_release_look(h, now, true)) released = 1;
  return released;
}

/* Pages of slabs in use (slab_list.c): a purge delay after a mid class's
 * slabs got blocks back, and once more after that (the blocks free since the
 * first look are the old ones at the second), the heap looks at the class's
 * slabs with free blocks: those free since the last look give back the pages
 * they cover; with all, every mid class's slabs give back the pages of all
 * their free blocks now (malloc_trim). Owner only, or the holder of the
 * heap's token. Returns the bytes given back. */
uint64_t hak_release_look(hak_heap_t *h, uint64_t now, bool all) {
  enum { WORDS = (HAK_CLASSES + 63) / 64 };
  uint64_t any = 0;
  for (unsigned w = 0; w < WORDS; w++) any |= h->blocks_back[w] | h->look_again[w];
  if (!any && !all) {
    h->looks_at = 0;
    return 0;
  }
  if (!all && (!h->looks_at || now < h->looks_at)) {
    if (!h->looks_at) h->looks_at = now + hak_release_delay();
    return 0;
  }
  uint64_t bytes = 0;
  for (unsigned w = 0; w < WORDS; w++) {
    uint64_t look = h->blocks_back[w] | h->look_again[w];
    h->look_again[w] = h->blocks_back[w];
    h->blocks_back[w] = 0;
    for (unsigned c = w * 64; c < (w + 1) * 64 && c < HAK_CLASSES; c++) {
      if (!hak_class_gives_pages(c) || !(all || (look >> (c % 64) & 1))) continue;
      for (hak_slab_t *s = h->warm[c]; s; s = hak_slab_list_next(s)) bytes += hak_slab_give_back(s, now, all);
    }
  }
  any = 0;
  for (unsigned w = 0; w < WORDS; w++) any |= h->look_again[w];
  h->looks_at = any ? now + hak_release_delay() : 0;
  return bytes;
}

/* Sweep every SuperSlab of the arena (SuperSlabs mapped outside it, once it
 * is full or when it could not be reserved, are swept by their owners only).
 * Returns the earliest deadline still pending, 0 if none. */
uint64_t hak_release_sweep_all(bool force, int *released) {
  uint64_t now = hak_os_now_ms();
  uint64_t next = 0;
  size_t n = hak_arena_used();
  for (size_t i = 0; i < n; i++) {
    hak_superslab_t *ss = hak_arena_superslab(i);
    if (ss) next = hak_deadline_min(next, sweep(ss, now, force, released));
  }
  return next;
}

/* In a forked child: units that a sweep of another thread had claimed
 * become dirty again (they are free; some of their pages may be dropped
 * already, which a dirty unit allows). Only the arena's SuperSlabs can be
 * found; one outside it keeps such units until the process ends. */
void hak_release_forget_sweeps(void) {
  size_t n = hak_arena_used();
  for (size_t i = 0; i < n; i++) {
    hak_superslab_t *ss = hak_arena_superslab(i);
    if (!ss) continue;
    uint64_t w = atomic_load_explicit(&ss->dirty, memory_order_relaxed);
    uint64_t p = HAK_PURGING(w);   /* held by a sweep: free and dirty again; a guest's stay */
    if (p) atomic_store_explicit(&ss->dirty, (w | p) & ~(p << 32), memory_order_relaxed);
  }
}

/* Bytes of the arena's free units whose pages may still be resident (the
 * statistics' dirty_bytes). */
uint64_t hak_release_dirty_bytes(void) {
  uint64_t units = 0;
  size_t n = hak_arena_used();
  for (size_t i = 0; i < n; i++) {
    hak_superslab_t *ss = hak_arena_superslab(i);
    if (ss) units += (uint64_t)__builtin_popcount(HAK_DIRTY(atomic_load_explicit(&ss->dirty, memory_order_relaxed)));
  }
  return units << HAK_UNIT_SHIFT;
}

/* Collect the abandoned heaps if their deadline has passed; returns the
 * deadline still pending, 0 if none. */
uint64_t hak_release_abandoned(uint64_t now) {
  uint64_t due = atomic_load_explicit(&abandoned_due, memory_order_relaxed);
  if (!due || now < due) return due;
  if (atomic_compare_exchange_strong(&abandoned_due, &due, 0)) hak_heap_trim_abandoned(false);
  return atomic_load_explicit(&abandoned_due, memory_order_relaxed);
}

/* A heap that carves new slabs sweeps sooner: a new slab of `bytes`
 * counts as bytes / GROWN_BYTES_PER_TICK slow-path visits, so that a
 * thread sweeps at least once per 512 KiB of new slabs: visits alone are
 * a slow pace for big blocks, whose idle caches then hold their slabs
 * (docs/design/tuning.md, "New slabs count as slow-path visits"). */
void hak_release_grown(hak_heap_t *h, size_t bytes) { h->ticks += (uint32_t)(bytes / GROWN_BYTES_PER_TICK); }

void hak_release_tick(hak_heap_t *h) {
  hak_purger_poll();
  if (++h->ticks >= REMOTE_COLLECT_EVERY) {
    h->ticks = 0;
    hak_heap_collect_idle(h);
    hak_remote_flush_all(h);
    uint64_t now = hak_os_now_ms();
    hak_ace_poll(now);
    hak_release_look(h, now, false);
  }
  uint64_t abandoned = atomic_load_explicit(&abandoned_due, memory_order_relaxed);
  if (h->purge_at || abandoned) {
    uint64_t now = hak_os_now_ms();
    if (h->purge_at && now >= h->purge_at) hak_release_purge(h, HAK_PURGE_DUE);
    if (abandoned) hak_release_abandoned(now);
  }
  hak_bigcache_tick();
}
