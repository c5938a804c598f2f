/* The release policy: when memory goes back to the OS.
 *
 * - A slab that becomes empty returns its units to its SuperSlab; the units'
 *   pages are decommitted PURGE_DELAY_MS later, unless reused before.
 * - A heap keeps KEEP_EMPTY_SUPERSLABS wholly empty SuperSlabs for quick
 *   reuse; any other empty SuperSlab goes to the shared pool at once,
 *   decommitted.
 * - hak_release_purge(h, true) (malloc_trim) does all of it now.
 * - Heaps of exited threads keep the same delays; whichever thread passes
 *   its release tick after the earliest deadline purges them.
 * Deadlines are checked on the slow paths, never on the fast paths. */
#include "internal.h"

#define REMOTE_COLLECT_EVERY 64   /* slow-path visits between sweeps of inboxes and batches */

static _Atomic uint64_t abandoned_due;   /* earliest purge deadline of an abandoned heap */

void hak_release_abandoned_due(uint64_t when) {
  uint64_t cur = atomic_load_explicit(&abandoned_due, memory_order_relaxed);
  while ((!cur || when < cur) && !atomic_compare_exchange_weak(&abandoned_due, &cur, when)) {
  }
}

void hak_release_schedule(hak_heap_t *h, hak_superslab_t *ss) {
  if (ss->free_units == HAK_UNITS_ALL && h->empty_superslabs > (uint32_t)hak_opt(hak_option_keep_empty_superslabs)) {
    hak_superslab_give_up(h, ss);
    return;
  }
  if (ss->purge_at) return;
  ss->purge_at = hak_os_now_ms() + (uint64_t)hak_opt(hak_option_purge_delay_ms);
  if (!h->purge_at || ss->purge_at < h->purge_at) h->purge_at = ss->purge_at;
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

int hak_release_purge(hak_heap_t *h, bool force) {
  uint64_t now = hak_os_now_ms();
  uint64_t next = 0;
  int released = 0;
  hak_superslab_t *ss = h->superslabs;
  while (ss) {
    hak_superslab_t *following = ss->next;
    if (force && ss->free_units == HAK_UNITS_ALL) {
      hak_superslab_give_up(h, ss);
      released = 1;
    } else if (ss->purge_at && (force || ss->purge_at <= now)) {
      uint32_t mask = ss->dirty_units & ss->free_units;
      if (mask) {
        decommit_units(ss, mask);
        released = 1;
      }
      ss->dirty_units = 0;
      ss->purge_at = 0;
    } else if (ss->purge_at && (!next || ss->purge_at < next)) {
      next = ss->purge_at;
    }
    ss = following;
  }
  h->purge_at = next;
  return released;
}

void hak_release_tick(hak_heap_t *h) {
  if (++h->ticks % REMOTE_COLLECT_EVERY == 0) {
    hak_heap_collect_all(h);
    hak_remote_flush_all(h);
  }
  uint64_t abandoned = atomic_load_explicit(&abandoned_due, memory_order_relaxed);
  if (h->purge_at || abandoned) {
    uint64_t now = hak_os_now_ms();
    if (h->purge_at && now >= h->purge_at) hak_release_purge(h, false);
    if (abandoned && now >= abandoned && atomic_compare_exchange_strong(&abandoned_due, &abandoned, 0))
      hak_heap_trim_abandoned(false);
  }
  hak_bigcache_tick();
}
