/* Statistics: per-thread counters (in each heap, plain, written by the owner
 * only) merged on demand, a few global atomics for the slow large path and
 * the OS layer, and the report — as text or JSON — printed at exit when
 * HAKMEM_STATS asks for it. The merge reads other threads' counters while
 * they run: the figures are a snapshot, exact once the threads are quiet. */
#include "internal.h"

_Static_assert(HAK_STATS_CLASSES == HAK_CLASSES, "hakmem.h's statistics have a row per size class");

static _Atomic int64_t tier_committed[2], tier_committed_peak[2];   /* tiny, mid slab bytes */
static _Atomic uint64_t large_allocs, large_frees, large_requested;
static _Atomic int64_t large_committed, large_committed_peak;
static _Atomic uint64_t bigcache_hits, bigcache_misses;
static struct hak_stats baseline;   /* event counts at the last reset */

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
  st->tiny.committed = (uint64_t)atomic_load(&tier_committed[0]);
  st->tiny.committed_peak = (uint64_t)atomic_load(&tier_committed_peak[0]);
  st->mid.committed = (uint64_t)atomic_load(&tier_committed[1]);
  st->mid.committed_peak = (uint64_t)atomic_load(&tier_committed_peak[1]);
  st->large.allocs = atomic_load(&large_allocs);
  st->large.frees = atomic_load(&large_frees);
  st->large.requested = atomic_load(&large_requested);
  st->large.committed = (uint64_t)atomic_load(&large_committed);
  st->large.reserved = st->large.committed;   /* a live large block's bytes are its mapping's */
  st->large.committed_peak = (uint64_t)atomic_load(&large_committed_peak);
  st->bigcache_hits = atomic_load(&bigcache_hits);
  st->bigcache_misses = atomic_load(&bigcache_misses);
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
  EVENT_(os_unmap_bytes) EVENT_(os_decommits) EVENT_(os_decommit_bytes) EVENT_(os_remaps) EVENT_(purger_passes)
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
    hak_heap_collect_all(h);
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

/* ---- reports */

static const char *const tier_names[3] = {"tiny", "mid", "large"};


static void put_mib(hak_out_t *o, uint64_t bytes) {
  hak_out_u64(o, bytes >> 20);
  hak_out_str(o, ".");
  hak_out_u64(o, ((bytes & ((1u << 20) - 1)) * 10) >> 20);
  hak_out_str(o, " MiB");
}

#define NOT_COUNTED UINT64_MAX   /* shown as "-": needs STAT=2 */
#define OP_COUNT(v) (HAK_STAT >= 2 ? (uint64_t)(v) : NOT_COUNTED)

static void put_row(hak_out_t *o, const uint64_t *values, const uint8_t *widths, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    if (values[i] != NOT_COUNTED) {
      hak_out_u64w(o, values[i], widths[i]);
      continue;
    }
    for (unsigned w = 1; w < widths[i]; w++) hak_out_str(o, " ");
    hak_out_str(o, "-");
  }
  hak_out_str(o, "\n");
}

/* The controller's line of the text report and a line per knob. */
static void print_knobs(hak_out_t *o, const struct hak_stats *st) {
  hak_out_u64(o, st->ace_periods);
  hak_out_str(o, " periods judged; knob now (start, range, steps up / down):\n");
  for (unsigned i = 0; i < hak_knob_count; i++) {
    const struct hak_knob_stats *k = &st->knobs[i];
    hak_out_str(o, "   ");
    hak_out_str(o, hak_ace_name((enum hak_knob_e)i));
    hak_out_str(o, " ");
    hak_ace_format(o, (enum hak_knob_e)i, k->value);
    hak_out_str(o, " (");
    hak_ace_format(o, (enum hak_knob_e)i, k->start);
    hak_out_str(o, ", ");
    hak_ace_format(o, (enum hak_knob_e)i, k->min);
    hak_out_str(o, "..");
    hak_ace_format(o, (enum hak_knob_e)i, k->max);
    hak_out_str(o, ", ");
    hak_out_u64(o, k->ups);
    hak_out_str(o, " / ");
    hak_out_u64(o, k->downs);
    hak_out_str(o, ")\n");
  }
}

/* The process's id and name (/proc/self/comm), for the report's first
 * line: several processes may append to one file. */
static void process_name(char *buf, size_t n) {
  long len = hak_os_read_file("/proc/self/comm", buf, n);
  if (len <= 0) buf[0] = 0;
  else if (buf[len - 1] == '\n') buf[len - 1] = 0;
}

static void print_text(hak_out_t *o, const struct hak_stats *st) {
  char name[64];
  process_name(name, sizeof name);
  hak_out_str(o, "hakmem statistics (profile ");
  hak_option_format(o, hak_option_profile, hak_opt(hak_option_profile));
  hak_out_str(o, "), process ");
  hak_out_u64(o, (uint64_t)hak_os_pid());
  hak_out_str(o, " (");
  hak_out_str(o, name);
  hak_out_str(o, "), explained in docs/statistics.md\n"
                 " class     size     allocs      frees     live  hit%  refills  flushes   remote slabs   bytes live\n");
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    const struct hak_class_stats *cs = &st->classes[c];
    if (!cs->allocs && !cs->frees && !cs->live && !cs->slabs && !cs->refills) continue;
    static const uint8_t widths[] = {6, 9, 11, 11, 9, 6, 9, 9, 9, 6, 13};
    const uint64_t row[] = {c, cs->block_size, OP_COUNT(cs->allocs), OP_COUNT(cs->frees), cs->live,
                            OP_COUNT(cs->allocs ? cs->cache_hits * 100 / cs->allocs : 0), cs->refills, cs->flushes,
                            cs->remote_frees, cs->slabs, cs->bytes_live};
    put_row(o, row, widths, sizeof widths);
  }
  hak_out_str(o, " tier       allocs      frees    requested     reserved    committed   peak committed\n");
  const struct hak_tier_stats *tiers[3] = {&st->tiny, &st->mid, &st->large};
  for (unsigned i = 0; i < 3; i++) {
    const struct hak_tier_stats *t = tiers[i];
    hak_out_str(o, " ");
    hak_out_str(o, tier_names[i]);
    hak_out_str(o, i == 1 ? "  " : " ");
    static const uint8_t widths[] = {11, 11, 13, 13, 13, 17};
    bool counted = HAK_STAT >= 2 || t == &st->large;
    const uint64_t row[] = {counted ? t->allocs : NOT_COUNTED, counted ? t->frees : NOT_COUNTED,
                            counted ? t->requested : NOT_COUNTED, t->reserved, t->committed, t->committed_peak};
    put_row(o, row, widths, sizeof widths);
  }
  hak_out_str(o, " bigcache: ");
  hak_out_u64(o, st->bigcache_hits);
  hak_out_str(o, " hits, ");
  hak_out_u64(o, st->bigcache_misses);
  hak_out_str(o, " misses, ");
  put_mib(o, st->bigcache_bytes);
  hak_out_str(o, " held; free units not returned ");
  put_mib(o, st->dirty_bytes);
  hak_out_str(o, ", purge delay ");
  hak_out_u64(o, st->purge_delay_ms);
  hak_out_str(o, " ms\n os: mmap ");
  hak_out_u64(o, st->os_maps);
  hak_out_str(o, " (");
  put_mib(o, st->os_map_bytes);
  if (st->os_reserved_bytes) {
    hak_out_str(o, "; and ");
    hak_out_size(o, st->os_reserved_bytes);
    hak_out_str(o, " of address space reserved, not memory");
  }
  hak_out_str(o, "), munmap ");
  hak_out_u64(o, st->os_unmaps);
  hak_out_str(o, " (");
  put_mib(o, st->os_unmap_bytes);
  hak_out_str(o, "), madvise ");
  hak_out_u64(o, st->os_decommits);
  hak_out_str(o, " (");
  put_mib(o, st->os_decommit_bytes);
  hak_out_str(o, " returned), mremap ");
  hak_out_u64(o, st->os_remaps);
  hak_out_str(o, ", purger ");
  hak_out_u64(o, st->purger_passes);
  hak_out_str(o, " passes, ");
  hak_out_u64(o, st->cache_drains);
  hak_out_str(o, " caches drained (");
  hak_out_u64(o, st->drained_blocks);
  hak_out_str(o, " blocks), ");
  hak_out_u64(o, st->drained_batches);
  hak_out_str(o, " remote-free batches sent\n ace: ");
  if (!hak_opt(hak_option_ace)) hak_out_str(o, "off (ACE=0), knobs fixed at their options\n");
  else print_knobs(o, st);
  hak_out_str(o, " rss: ");
  put_mib(o, st->rss);
  hak_out_str(o, " now, ");
  put_mib(o, st->rss_peak);
  hak_out_str(o, " peak\n consistency: ");
  if (!st->counted) {
    hak_out_str(o, "live blocks ");
    hak_out_u64(o, st->live);
    hak_out_str(o, "; allocations and frees are counted in builds with make STAT=2\n");
    return;
  }
  hak_out_str(o, "allocations ");
  hak_out_u64(o, st->allocs);
  hak_out_str(o, " = frees ");
  hak_out_u64(o, st->frees);
  hak_out_str(o, " + live ");
  hak_out_u64(o, st->live);
  hak_out_str(o, st->balanced ? ": balanced\n" : ": DOES NOT BALANCE\n");
  if (!st->balanced) {
    hak_out_str(o, "hakmem: warning: allocations do not equal frees + live blocks\n");
  }
}

/* s as the inside of a JSON string. */
static void json_string(hak_out_t *o, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      hak_out_chars(o, "\\", 1);
      hak_out_chars(o, s, 1);
    } else if (c < 0x20) {
      hak_out_str(o, "\\u00");
      hak_out_chars(o, &"0123456789abcdef"[c >> 4], 1);
      hak_out_chars(o, &"0123456789abcdef"[c & 15], 1);
    } else {
      hak_out_chars(o, s, 1);
    }
  }
}

/* name: v, or null where known is false (a figure this build does not
 * count: make STAT=2). */
static void json_field(hak_out_t *o, const char *name, uint64_t v, bool known, bool *first) {
  hak_out_str(o, *first ? "\"" : ",\"");
  hak_out_str(o, name);
  hak_out_str(o, "\":");
  if (known) hak_out_u64(o, v);
  else hak_out_str(o, "null");
  *first = false;
}

/* Is the field named so counted only by make STAT=2 (on the fast paths)? */
static bool fast_path_count(const char *name) {
  static const char *const names[] = {"allocs", "frees", "cache_hits", "requested", "balanced"};
  for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
    if (strcmp(name, names[i]) == 0) return true;
  return false;
}

static void print_json(hak_out_t *o, const struct hak_stats *st) {
  bool first;
  char name[64];
  process_name(name, sizeof name);
  hak_out_str(o, "{\"version\":\"");
  hak_out_version(o);
  hak_out_str(o, "\",\"pid\":");
  hak_out_u64(o, (uint64_t)hak_os_pid());
  hak_out_str(o, ",\"process\":\"");
  json_string(o, name);
  hak_out_str(o, "\",\"profile\":\"");
  hak_option_format(o, hak_option_profile, hak_opt(hak_option_profile));
  hak_out_str(o, "\",\"classes\":[");
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    const struct hak_class_stats *cs = &st->classes[c];
    hak_out_str(o, c ? ",{" : "{");
    first = true;
    json_field(o, "class", c, true, &first);
#define FIELD_(name, doc) json_field(o, #name, cs->name, st->counted || !fast_path_count(#name), &first);
    HAK_STATS_CLASS_FIELDS(FIELD_)
#undef FIELD_
    hak_out_str(o, "}");
  }
  hak_out_str(o, "],\"tiers\":{");
  const struct hak_tier_stats *tiers[3] = {&st->tiny, &st->mid, &st->large};
  for (unsigned i = 0; i < 3; i++) {
    const struct hak_tier_stats *t = tiers[i];
    hak_out_str(o, i ? ",\"" : "\"");
    hak_out_str(o, tier_names[i]);
    hak_out_str(o, "\":{");
    first = true;
#define FIELD_(name, doc) json_field(o, #name, t->name, st->counted || i == 2 || !fast_path_count(#name), &first);
    HAK_STATS_TIER_FIELDS(FIELD_)
#undef FIELD_
    hak_out_str(o, "}");
  }
  hak_out_str(o, "},\"knobs\":{");
  for (unsigned i = 0; i < hak_knob_count; i++) {
    const struct hak_knob_stats *k = &st->knobs[i];
    hak_out_str(o, i ? ",\"" : "\"");
    hak_out_str(o, hak_ace_name((enum hak_knob_e)i));
    hak_out_str(o, "\":{");
    first = true;
#define FIELD_(name, doc) json_field(o, #name, k->name, true, &first);
    HAK_STATS_KNOB_FIELDS(FIELD_)
#undef FIELD_
    hak_out_str(o, "}");
  }
  hak_out_str(o, "}");
  first = false;
#define FIELD_(name, doc) json_field(o, #name, st->name, st->counted || !fast_path_count(#name), &first);
  HAK_STATS_GLOBAL_FIELDS(FIELD_)
#undef FIELD_
  hak_out_str(o, "}\n");
}

static void report(hak_write_fn *write, void *arg, void (*print)(hak_out_t *, const struct hak_stats *)) {
  struct hak_stats st;
  hak_stats_get(&st);
  hak_out_t o;
  hak_out_init(&o, write, arg);
  print(&o, &st);
  hak_out_flush(&o);
}

HAK_EXPORT void hak_stats_print(hak_write_fn *write, void *arg) { report(write, arg, print_text); }

HAK_EXPORT void hak_stats_print_json(hak_write_fn *write, void *arg) { report(write, arg, print_json); }

/* The working directory at start-up, against which a relative
 * HAKMEM_STATS_FILE is taken: a program that changed directory before it
 * exits writes where it was asked to. Read only when the environment asked
 * for a report in a relative file ("" otherwise, or if it could not be
 * read: the file is then taken where the process is when it exits). */
static char start_dir[4096];
/* The report to stderr: a copy of fd 2 taken at start-up, for programs that
 * close their standard streams before they exit (coreutils' close_stdout:
 * ls, sort, ...; dash), which left the report nowhere. fd 2 itself is
 * written while it is open, wherever the program pointed it. */
static int stderr_copy = -1;
static uint64_t stderr_id[2];

void hak_stats_init(void) {
  if (!hak_opt(hak_option_stats)) return;
  const char *path = hak_option_get_string(hak_option_stats_file);
  if (!path) stderr_copy = hak_os_dup(2, stderr_id);
  else if (path[0] != '/' && !hak_os_cwd(start_dir, sizeof start_dir)) start_dir[0] = 0;
}

/* HAKMEM_STATS: the report at exit, to stderr or appended to
 * HAKMEM_STATS_FILE (%p in its name becomes the process id), under a lock,
 * so that every process of a run that shares the file leaves its report
 * whole, each named by its first line (the launcher empties the file
 * when it starts a run). */
void hak_stats_at_exit(void) {
  int fd = 2;
  char pattern[4096], buf[4096];
  const char *path = hak_option_get_string(hak_option_stats_file);
  if (path && path[0] != '/' && start_dir[0]) {
    size_t d = strlen(start_dir), n = strlen(path);
    bool fits = d + 1 + n < sizeof pattern;
    if (fits) {
      memcpy(pattern, start_dir, d);
      pattern[d] = '/';
      memcpy(pattern + d + 1, path, n + 1);
    }
    path = fits ? pattern : NULL;
  }
  if (path && (!hak_path_expand(path, 0, buf, sizeof buf) || (fd = hak_os_open_append(buf)) < 0)) fd = 2;
  if (fd == 2 && stderr_copy >= 0 && !hak_os_fd_open(2, NULL) && hak_os_fd_open(stderr_copy, stderr_id))
    fd = stderr_copy;
  if (hak_opt(hak_option_stats) == 2) hak_stats_print_json(hak_write_fd, &fd);
  else hak_stats_print(hak_write_fd, &fd);
  if (fd != 2 && fd != stderr_copy) hak_os_close(fd);
}
