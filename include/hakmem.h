/* hakmem — a general-purpose memory allocator.
 *
 * The library overrides the whole malloc family (malloc, free, calloc,
 * realloc, reallocarray, posix_memalign, aligned_alloc, memalign, valloc,
 * pvalloc, malloc_usable_size, free_sized, free_aligned_sized, malloc_trim)
 * and the C++ operator new/delete family, either through LD_PRELOAD of
 * libhakmem.so or by linking libhakmem.a / -lhakmem.
 *
 * The hak_* functions below are the same allocator under its own names;
 * they behave exactly as their libc counterparts (errno included).
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAKMEM_VERSION_MAJOR 0
#define HAKMEM_VERSION_MINOR 1
#define HAKMEM_VERSION_PATCH 0

void  *hak_malloc(size_t size);
void   hak_free(void *p);
void  *hak_calloc(size_t count, size_t size);
void  *hak_realloc(void *p, size_t size);
void  *hak_reallocarray(void *p, size_t count, size_t size);
void  *hak_aligned_alloc(size_t alignment, size_t size);
int    hak_posix_memalign(void **out, size_t alignment, size_t size);
void  *hak_memalign(size_t alignment, size_t size);
void  *hak_valloc(size_t size);
void  *hak_pvalloc(size_t size);
size_t hak_usable_size(const void *p);
void   hak_free_sized(void *p, size_t size);
void   hak_free_aligned_sized(void *p, size_t alignment, size_t size);

/* Return as much free memory to the OS as possible right now: flushes the
 * calling thread's caches, collects abandoned thread heaps, decommits empty
 * slabs and drops the large-block cache. Returns 1 if memory was released. */
int    hak_trim(void);

/* Heap profiling (HAKMEM_PROF_SAMPLE=bytes at start-up, docs/profiling.md):
 * write the live sampled allocations by call stack, in the heap-profile
 * format pprof and jeprof read, to path (NULL: the next HAKMEM_PROF_FILE
 * name). 0, ENOENT if profiling is off, or EIO / ENAMETOOLONG. */
int    hak_prof_dump(const char *path);

/* Output of the report functions below: write is called with pieces of the
 * text in order (NULL: they go to stderr). */
typedef void hak_write_fn(const char *text, void *arg);

/* ---- options
 * Every option is read once at start-up from the environment variable
 * HAKMEM_<NAME> (e.g. HAKMEM_PURGE_DELAY_MS=50); docs/options.md lists them.
 * HAKMEM_PROFILE picks a coherent set of defaults that individual options
 * override. A bad value prints one warning line and the default is used. */
typedef enum hak_option_e {
  hak_option_profile,               /* HAK_PROFILE_FAST / _BALANCED / _LEAN / _AUTO (default) */
  hak_option_stats,                 /* 0 off, 1 text report at exit, 2 JSON */
  hak_option_stats_file,            /* string: where the report goes (stderr) */
  hak_option_route_banner,          /* 1: describe the configuration at start-up */
  hak_option_cache_bytes,           /* unified cache budget per class, bytes */
  hak_option_cache_max,             /* most blocks one class's cache holds */
  hak_option_cache_min,             /* blocks every class's cache may hold */
  hak_option_purge_delay_ms,        /* free slab pages are decommitted after this */
  hak_option_keep_empty_superslabs, /* empty SuperSlabs a thread keeps committed */
  hak_option_shared_pool_slots,     /* empty SuperSlabs kept (decommitted) for reuse */
  hak_option_bigcache_budget,       /* bytes of freed large blocks kept mapped */
  hak_option_bigcache_max_block,    /* largest block the BigCache keeps */
  hak_option_bigcache_delay_ms,     /* how long a freed large block stays cached */
  hak_option_background_purge,      /* 1: a background thread returns memory when delays pass */
  hak_option_ace,                   /* 1: the adaptive controller retunes the knobs below */
  hak_option_prof_sample,           /* heap profiling: mean bytes between samples, 0 off */
  hak_option_prof_file,             /* string: where heap profiles go (%p pid, %n sequence) */
  hak_option_prof_signal,           /* a signal that writes a heap profile, 0 none */
  hak_option_count
} hak_option_t;

enum {
  HAK_PROFILE_FAST = 0,
  HAK_PROFILE_BALANCED = 1,
  HAK_PROFILE_LEAN = 2,
  HAK_PROFILE_AUTO = 3,
  HAK_PROFILE_DEFAULT = HAK_PROFILE_AUTO
};

long        hak_option_get(hak_option_t option);
/* 0, or EINVAL for a value out of range. Setting the profile resets every
 * option not set explicitly to the profile's value. Cache sizes apply to
 * threads that start afterwards; everything else at once. */
int         hak_option_set(hak_option_t option, long value);
const char *hak_option_get_string(hak_option_t option);   /* string options */
int         hak_option_set_string(hak_option_t option, const char *value);
/* Set an option from text as HAKMEM_<NAME> would give it ("lean", "64M",
 * "on"): 0, or EINVAL if the text is not a valid value. */
int         hak_option_set_text(hak_option_t option, const char *text);
const char *hak_option_name(hak_option_t option);         /* e.g. "PURGE_DELAY_MS" */
/* Every option with its range or choices, its default under each profile
 * and what it does, a few lines each (what `hakmem --options` shows). */
/* Options a program linked with hakmem sets for itself, as a list
 * "name=value,name=value" (names in any case: "profile=lean,purge_delay_ms=50"),
 * by defining this variable; HAKMEM_OPTIONS in the environment (the same
 * form) and the HAKMEM_<NAME> variables override it, in that order. */
extern const char *hakmem_options;
void        hak_options_print(hak_write_fn *write, void *arg);

/* ---- statistics
 * Counted per thread without atomics and merged on demand. HAKMEM_STATS=1
 * prints a report at exit (HAKMEM_STATS=json: one JSON object). Frees from
 * other threads count when the owning thread collects them; hak_stats_get
 * collects the calling thread's own first. The default build counts on the
 * slow paths only; `make STAT=2` also counts every allocation and free (and
 * the bytes requested) on the fast paths, which fills in allocs, frees,
 * cache_hits, requested and the balance check (`counted` is then 1);
 * `make STAT=0` compiles all counting out. */
#define HAK_STATS_CLASSES 104

#define HAK_STATS_CLASS_FIELDS(X)                                          \
  X(block_size, "block size in bytes")                                     \
  X(allocs, "blocks allocated (STAT=2)")                                   \
  X(frees, "blocks freed (STAT=2)")                                        \
  X(live, "blocks in use now")                                             \
  X(cache_hits, "allocations served by the unified cache (STAT=2)")       \
  X(cache_misses, "allocations that found the cache empty")               \
  X(refills, "batch refills of the cache")                                 \
  X(flushes, "batch flushes of the cache")                                 \
  X(remote_frees, "frees received from other threads")                     \
  X(slabs, "slabs in use now")                                             \
  X(bytes_live, "bytes of blocks in use now")

#define HAK_STATS_TIER_FIELDS(X)                                           \
  X(allocs, "blocks allocated (STAT=2; large always)")                     \
  X(frees, "blocks freed (STAT=2; large always)")                          \
  X(requested, "bytes requested by allocations (STAT=2; large always)")    \
  X(reserved, "bytes of blocks in use now")                                \
  X(committed, "bytes of slabs or mappings in use now")                    \
  X(committed_peak, "peak of committed")

#define HAK_STATS_GLOBAL_FIELDS(X)                                         \
  X(bigcache_hits, "large allocations served by the BigCache")             \
  X(bigcache_misses, "large allocations that needed a new mapping")        \
  X(bigcache_bytes, "bytes of freed large blocks the BigCache holds now")  \
  X(dirty_bytes, "bytes of free slab units not given back yet (arena)")   \
  X(purge_delay_ms, "the release policy's purge delay now, ms")           \
  X(os_maps, "mmap calls")                                                 \
  X(os_map_bytes, "bytes mapped, the address space reserved apart")       \
  X(os_unmaps, "munmap calls")                                             \
  X(os_unmap_bytes, "bytes unmapped")                                      \
  X(os_decommits, "madvise calls giving pages back (MADV_DONTNEED)")       \
  X(os_decommit_bytes, "bytes returned with madvise")                      \
  X(slab_page_bytes, "of those, pages free blocks covered in slabs in use") \
  X(os_remaps, "mremap calls")                                             \
  X(purger_passes, "sweeps of the background purger")                     \
  X(cache_drains, "caches of other threads' heaps taken back (idle, trim)")  \
  X(drained_blocks, "blocks those drains returned to their slabs")         \
  X(drained_batches, "batches of remote frees those drains sent on")        \
  X(ace_periods, "periods the adaptive controller has judged")             \
  X(rss, "resident set size now, bytes")                                   \
  X(rss_peak, "peak resident set size, bytes")                             \
  X(allocs, "blocks allocated, all tiers")                                 \
  X(frees, "blocks freed, all tiers")                                      \
  X(live, "blocks in use now, all tiers")                                  \
  X(counted, "1 if every allocation and free is counted (STAT=2)")         \
  X(balanced, "1 if allocations = frees + live blocks (when counted)")     \
  X(os_reserved_bytes, "bytes of address space reserved (the arena), not memory")

/* The adaptive controller's knobs (docs/ace.md), in the order of knobs[]:
 * what each one is now, where it started (its option's value), the range
 * it may move in, and how often it moved up and down. */
#define HAK_STATS_KNOBS(X)                                                        \
  X(purge_delay_ms, "milliseconds before free slab pages go back to the OS")     \
  X(bigcache_delay_ms, "milliseconds a freed large block stays in the BigCache") \
  X(bigcache_budget, "bytes of freed large blocks the BigCache may keep")

#define HAK_STATS_KNOB_FIELDS(X)                                           \
  X(value, "the knob's value now")                                         \
  X(start, "its value at start-up: its option's")                          \
  X(min, "the least it may take")                                          \
  X(max, "the most it may take")                                           \
  X(ups, "steps up (memory given back was soon needed again)")             \
  X(downs, "steps down (no such sign for the hold time)")

#define HAK_KNOB_ENUM_(name, doc) hak_knob_##name,
enum hak_knob_e { HAK_STATS_KNOBS(HAK_KNOB_ENUM_) hak_knob_count };
#undef HAK_KNOB_ENUM_

#define HAK_STATS_FIELD_(name, doc) unsigned long long name;
struct hak_class_stats { HAK_STATS_CLASS_FIELDS(HAK_STATS_FIELD_) };
struct hak_tier_stats { HAK_STATS_TIER_FIELDS(HAK_STATS_FIELD_) };
struct hak_knob_stats { HAK_STATS_KNOB_FIELDS(HAK_STATS_FIELD_) };
struct hak_stats {
  struct hak_class_stats classes[HAK_STATS_CLASSES];
  struct hak_tier_stats tiny, mid, large;
  struct hak_knob_stats knobs[hak_knob_count];
  HAK_STATS_GLOBAL_FIELDS(HAK_STATS_FIELD_)
};
#undef HAK_STATS_FIELD_

void hak_stats_get(struct hak_stats *out);
/* Event counters start again from zero; gauges (live, in use, RSS) stay. */
void hak_stats_reset(void);
/* The text report. */
void hak_stats_print(hak_write_fn *write, void *arg);
void hak_stats_print_json(hak_write_fn *write, void *arg);

#ifdef __cplusplus
}
#endif

#endif
