/* glibc's introspection API with hakmem's own figures: mallinfo2,
 * mallinfo, malloc_stats, malloc_info and mallopt, which monitoring agents,
 * databases and runtimes call (under hakmem they used to reach glibc's
 * malloc, which holds nothing, and reported zeros). docs/introspection.md
 * says what each field means here. Built with the malloc family's names
 * only (HAK_OVERRIDE=1). */
#if HAK_OVERRIDE
#include <errno.h>
#include <malloc.h>
#include <stdio.h>

#include "internal.h"

/* The figures every call reports, from the statistics (hak_stats_get). */
typedef struct {
  uint64_t arena;       /* bytes of slab units in use or free and not given back yet */
  uint64_t in_use;      /* bytes of blocks in use in them */
  uint64_t slabs;       /* slabs in use */
  uint64_t large;       /* large blocks in use, */
  uint64_t large_bytes; /* and the bytes of their mappings */
  uint64_t large_peak;  /* the most bytes of large mappings in use at once */
  uint64_t arena_peak;  /* the most bytes of slabs in use at once, by tier */
  uint64_t bigcache;    /* bytes of freed large mappings kept for reuse */
  uint64_t dirty;       /* bytes of free units not given back yet */
  uint64_t large_in_use;   /* bytes of large blocks in use */
} figures_t;

static void figures(figures_t *f) {
  static struct hak_stats st;   /* 10 KiB: not on a caller's stack (a thread may have little) */
  static _Atomic int busy;
  while (atomic_exchange_explicit(&busy, 1, memory_order_acquire)) hak_os_yield();
  hak_stats_get(&st);
  uint64_t slabs = 0;
  for (unsigned c = 0; c < HAK_STATS_CLASSES; c++) slabs += st.classes[c].slabs;
  *f = (figures_t){
      .arena = st.tiny.committed + st.mid.committed + st.dirty_bytes,
      .in_use = st.tiny.reserved + st.mid.reserved,
      .slabs = slabs,
      .large = st.large.allocs - st.large.frees,
      .large_bytes = st.large.committed,
      .large_peak = st.large.committed_peak,
      .arena_peak = st.tiny.committed_peak + st.mid.committed_peak,
      .bigcache = st.bigcache_bytes,
      .dirty = st.dirty_bytes,
      .large_in_use = st.large.reserved,
  };
  atomic_store_explicit(&busy, 0, memory_order_release);
}

HAK_EXPORT struct mallinfo2 mallinfo2(void) {
  figures_t f;
  figures(&f);
  return (struct mallinfo2){
      .arena = f.arena,
      .ordblks = f.slabs,
      .smblks = 0,
      .hblks = f.large,
      .hblkhd = f.large_bytes,
      .usmblks = 0,
      .fsmblks = f.bigcache,
      .uordblks = f.in_use,
      .fordblks = f.arena - f.in_use,
      .keepcost = f.dirty + f.bigcache,
  };
}

/* As glibc: mallinfo2's fields cut to int. */
HAK_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m = mallinfo2();
  return (struct mallinfo){(int)m.arena, (int)m.ordblks, (int)m.smblks, (int)m.hblks, (int)m.hblkhd,
                           (int)m.usmblks, (int)m.fsmblks, (int)m.uordblks, (int)m.fordblks, (int)m.keepcost};
}

static void stats_line(hak_out_t *o, const char *what, uint64_t v) {
  hak_out_str(o, what);
  hak_out_u64w(o, v, 10);
  hak_out_str(o, "\n");
}

/* glibc's lines, on stderr: the slabs as its arena 0, then the totals with
 * the large blocks' mappings. No allocation. */
HAK_EXPORT void malloc_stats(void) {
  figures_t f;
  figures(&f);
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "Arena 0:\n");
  stats_line(&o, "system bytes     = ", f.arena);
  stats_line(&o, "in use bytes     = ", f.in_use);
  hak_out_str(&o, "Total (incl. mmap):\n");
  stats_line(&o, "system bytes     = ", f.arena + f.large_bytes + f.bigcache);
  stats_line(&o, "in use bytes     = ", f.in_use + f.large_in_use);
  stats_line(&o, "max mmap regions = ", f.large);
  stats_line(&o, "max mmap bytes   = ", f.large_peak);
  hak_out_flush(&o);
}

/* malloc_info's lines of free space (fast: none) and of a space's size,
 * now and at most, as glibc writes them for a heap and for the total. */
static void info_free(FILE *fp, unsigned long long count, unsigned long long size) {
  fprintf(fp, "<total type=\"fast\" count=\"0\" size=\"0\"/>\n<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n",
          count, size);
}

static void info_space(FILE *fp, unsigned long long now, unsigned long long most) {
  fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n<system type=\"max\" size=\"%llu\"/>\n", now, most);
  fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n<aspace type=\"mprotect\" size=\"%llu\"/>\n", now, now);
}

/* glibc's XML shape: one heap (the slabs), its free space as "rest", the
 * large blocks as "mmap"; no size list (hakmem's free blocks are not
 * chunks). options must be 0. */
HAK_EXPORT int malloc_info(int options, FILE *fp) {
  if (options) {
    errno = EINVAL;
    return -1;
  }
  figures_t f;
  figures(&f);
  fprintf(fp, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n</sizes>\n");
  info_free(fp, f.slabs, f.arena - f.in_use);
  info_space(fp, f.arena, f.arena_peak);
  fprintf(fp, "</heap>\n");
  info_free(fp, f.slabs, f.arena - f.in_use);
  fprintf(fp, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)f.large,
          (unsigned long long)f.large_bytes);
  info_space(fp, f.arena + f.large_bytes + f.bigcache, f.arena_peak + f.large_peak);
  fprintf(fp, "</malloc>\n");
  return 0;
}

/* glibc's tuning calls. What has a meaning here is mapped to the option
 * that does it; the rest is accepted and changes nothing (hakmem has no
 * arenas to cap, no fast bins, no top pad). 1: accepted, 0: an unknown
 * parameter or a value out of range, as glibc. */
HAK_EXPORT int mallopt(int param, int value) {
  switch (param) {
    case M_TRIM_THRESHOLD:   /* free memory kept before it goes back: 0 gives it back at once */
      if (value < 0) return 0;
      if (value == 0) hak_option_set(hak_option_purge_delay_ms, 0);
      return 1;
    case M_MXFAST:
    case M_MMAP_MAX:
    case M_TOP_PAD:
    case M_MMAP_THRESHOLD:
    case M_CHECK_ACTION:
    case M_PERTURB:
    case M_ARENA_TEST:
    case M_ARENA_MAX:
      return 1;
    default:
      return 0;
  }
}
#endif
