/* The statistics report (stats.c's figures), as text or JSON: on demand,
 * and at exit when HAKMEM_STATS asks for it. */
#include "internal.h"

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
  hak_out_str(o, " returned, ");
  put_mib(o, st->slab_page_bytes);
  hak_out_str(o, " of it from slabs in use), mremap ");
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
  const char *path = hak_option_string(hak_option_stats_file);
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
  const char *path = hak_option_string(hak_option_stats_file);
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
