/* Statistics: per-thread counters (in each heap, plain, written by the owner
 * only) merged on demand with the slow paths' global ones (counters.c) and
 * the OS layer's; stats_report.c prints them. The merge reads other
 * threads' counters while they run: the figures are a snapshot, exact once
 * the threads are quiet. */
#include "internal.h"

_Static_assert(HAK_STATS_CLASSES == HAK_CLASSES, "hakmem.h's statistics have a row per size class");

static struct hak_stats baseline;   /* event counts at the last reset */

/* ---- merge */

static uint64_t proc_status_kib(const char *text, const char *key) {
  const char *p = strstr(text, key);
  if (!p) return 0;
  p += strlen(key);
  while (*p == ' ' || *p == '\t') p++;
  uint64_t v = 0;
  while (*p >= '0' && *p <= '9') v = v * 10 + (uint64_t)(*p++ - '0');
  return v;
}

/* Everything since start-up; event counters are reduced by the baseline
 * afterwards. Reads other heaps without synchronisation (see above). */
__attribute__((no_sanitize("thread"))) static void merge(struct hak_stats *st) {
  memset(st, 0, sizeof *st);
  for (unsigned c = 0; c < HAK_CLASSES; c++) st->classes[c].block_size = hak_class_size[c];
  for (hak_heap_t *h = hak_heap_list(); h; h = h->next_heap) {
    for (unsigned c = 0; c < HAK_CLASSES; c++) {
      struct hak_class_stats *cs = &st->classes[c];
      const hak_class_counters_t *k = &h->counters[c];
#if HAK_STAT >= 2
      cs->allocs += h->cache[c].allocs;
      cs->frees += h->cache[c].frees + k->remote_received;
#endif
      const hak_ucache_t *kc = &h->cache[c];
      cs->live += k->used_blocks - (kc->top > kc->items ? hak_cache_count(kc) : 0);   /* a drained cache holds none */
      cs->cache_misses += k->refills;
      cs->refills += k->refills;
      cs->flushes += k->flushes;
      cs->remote_frees += k->remote_received;
      cs->slabs += k->slabs;
      struct hak_tier_stats *t = c < HAK_TINY_CLASSES ? &st->tiny : &st->mid;
      t->requested += k->requested;
    }
  }
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    struct hak_class_stats *cs = &st->classes[c];
    struct hak_tier_stats *t = c < HAK_TINY_CLASSES ? &st->tiny : &st->mid;
    cs->cache_hits = HAK_STAT >= 2 ? cs->allocs - cs->cache_misses : 0;
    cs->bytes_live = cs->live * cs->block_size;
    t->allocs += cs->allocs;
    t->frees += cs->frees;
    t->reserved += cs->bytes_live;
  }
  hak_stats_counters(st);
  st->large.reserved = st->large.committed;   /* a live large block's bytes are its mapping's */
  st->bigcache_bytes = hak_bigcache_bytes();
  st->dirty_bytes = hak_release_dirty_bytes();
  st->purge_delay_ms = hak_release_delay();
  hak_os_counters_t os;
  hak_os_counters(&os);
  st->os_maps = os.maps;
  st->os_map_bytes = os.map_bytes;
  st->os_reserved_bytes = os.reserved_bytes;
  st->os_unmaps = os.unmaps;
  st->os_unmap_bytes = os.unmap_bytes;
  st->os_decommits = os.decommits;
  st->os_decommit_bytes = os.decommit_bytes;
  st->os_remaps = os.remaps;
  st->purger_passes = hak_purger_passes();
  hak_drain_stats(st);
  st->slab_page_bytes = hak_slab_page_bytes();
  hak_ace_stats(st);
  char status[4096];
  if (hak_os_read_file("/proc/self/status", status, sizeof status) > 0) {
    st->rss = proc_status_kib(status, "VmRSS:") * 1024;
    st->rss_peak = proc_status_kib(status, "VmHWM:") * 1024;
  }
  st->allocs = st->tiny.allocs + st->mid.allocs + st->large.allocs;
  st->frees = st->tiny.frees + st->mid.frees + st->large.frees;
  uint64_t live = st->large.allocs - st->large.frees;
  for (unsigned c = 0; c < HAK_CLASSES; c++) live += st->classes[c].live;
  st->live = live;
  st->counted = HAK_STAT >= 2;
  st->balanced = st->counted && st->allocs == st->frees + st->live;
}

/* Event counters minus the baseline; gauges as they are. */
static void subtract_baseline(struct hak_stats *st) {
  const struct hak_stats *b = &baseline;
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    struct hak_class_stats *cs = &st->classes[c];
    const struct hak_class_stats *bs = &b->classes[c];
    cs->allocs -= bs->allocs;
    cs->frees -= bs->frees;
    cs->cache_hits -= bs->cache_hits;
    cs->cache_misses -= bs->cache_misses;
    cs->refills -= bs->refills;
    cs->flushes -= bs->flushes;
    cs->remote_frees -= bs->remote_frees;
  }
  struct hak_tier_stats *t[3] = {&st->tiny, &st->mid, &st->large};
  const struct hak_tier_stats *bt[3] = {&b->tiny, &b->mid, &b->large};
  for (unsigned i = 0; i < 3; i++) {
    t[i]->allocs -= bt[i]->allocs;
    t[i]->frees -= bt[i]->frees;
    t[i]->requested -= bt[i]->requested;
  }
#define EVENT_(name) st->name -= b->name;
  EVENT_(bigcache_hits) EVENT_(bigcache_misses) EVENT_(os_maps) EVENT_(os_map_bytes) EVENT_(os_unmaps)
  EVENT_(os_unmap_bytes) EVENT_(os_decommits) EVENT_(os_decommit_bytes) EVENT_(slab_page_bytes) EVENT_(os_remaps)
  EVENT_(purger_passes)
  EVENT_(cache_drains) EVENT_(drained_blocks) EVENT_(drained_batches)
  EVENT_(allocs) EVENT_(frees) EVENT_(ace_periods)
  for (unsigned i = 0; i < hak_knob_count; i++) {
    EVENT_(knobs[i].ups) EVENT_(knobs[i].downs)
  }
#undef EVENT_
}

HAK_EXPORT void hak_stats_get(struct hak_stats *out) {
  hak_init();
  HAK_TRACK_ENTER();
  hak_heap_t *h = hak_tls_heap;
  if (h != &hak_heap_empty) {
    bool entered = hak_heap_enter(h);
    hak_heap_collect_inboxes(h, NULL);
    hak_heap_leave(h, entered);
  }
  merge(out);
  subtract_baseline(out);
  HAK_TRACK_LEAVE();
}

HAK_EXPORT void hak_stats_reset(void) {
  hak_init();
  HAK_TRACK_ENTER();
  merge(&baseline);
  HAK_TRACK_LEAVE();
}
