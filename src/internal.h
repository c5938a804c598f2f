/* hakmem internals: cross-file prototypes, grouped by the file that defines
 * them, and small inline helpers. The fast paths of malloc and free are in
 * fast_path.h. */
#ifndef HAK_INTERNAL_H
#define HAK_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include "hakmem.h"
#include "os/os.h"
#include "track.h"
#include "types.h"

/* Everything declared here stays inside the library: the compiler may then
 * address globals directly instead of through the GOT. */
#pragma GCC visibility push(hidden)

/* ---- init.c */
extern uint64_t hak_secret;             /* odd, per process */
extern uint64_t hak_keys[3];            /* secure build: free-list keys (hak_link_encode) */
void hak_init(void);

/* ---- format.c: text output without stdio or allocation */
typedef struct hak_out_s {
  char buf[256];
  size_t n;
  hak_write_fn *write;   /* NULL at init: stderr */
  void *arg;
} hak_out_t;
void hak_out_init(hak_out_t *o, hak_write_fn *write, void *arg);
void hak_out_flush(hak_out_t *o);
void hak_out_str(hak_out_t *o, const char *s);
void hak_out_chars(hak_out_t *o, const char *s, size_t n);
void hak_out_u64(hak_out_t *o, uint64_t v);
void hak_out_u64w(hak_out_t *o, uint64_t v, unsigned width);
void hak_out_i64(hak_out_t *o, int64_t v);
void hak_out_hex(hak_out_t *o, uint64_t v);
void hak_out_size(hak_out_t *o, uint64_t v);
void hak_out_version(hak_out_t *o);
void hak_write_fd(const char *text, void *arg);   /* a hak_write_fn: to the int fd at arg */
/* pattern into buf with %p replaced by the process id, %n by seq; false if
 * it does not fit in n bytes. */
bool hak_path_expand(const char *pattern, uint64_t seq, char *buf, size_t n);
_Noreturn void hak_fatal_pointer(const char *fn, const char *what, const void *p);   /* "hakmem: fn(): what p", abort */

/* ---- options.c: the options table, read once at init */
#define HAK_PROFILES 4
typedef enum { HAK_OPT_INT, HAK_OPT_SIZE, HAK_OPT_BOOL, HAK_OPT_CHOICE, HAK_OPT_STRING } hak_option_kind_t;
typedef struct hak_option_desc_s {
  const char *name;            /* HAKMEM_<name> */
  hak_option_kind_t kind;
  long defaults[HAK_PROFILES]; /* per profile: fast, balanced, lean, auto */
  long min, max;
  const char *choices;         /* HAK_OPT_CHOICE: "a|b|c", value = index; HAK_OPT_BOOL: its
                                  values if there are more than 0 and 1 */
  const char *doc;
} hak_option_desc_t;
extern long hak_option_values[hak_option_count];
const hak_option_desc_t *hak_option_desc(hak_option_t option);
bool hak_option_is_default(hak_option_t option);
void hak_option_format(hak_out_t *o, hak_option_t option, long value);
void hak_options_init(void);   /* its callers then start ACE's knobs from the options (hak_ace_restart) */
void hak_option_env_spent(hak_option_t option);   /* its entry reads 0 for the programs this one starts */
/* For the hak_option_* API (options_api.c) and the options read after init:
 * an option set, its string, a text parsed as its value (false: invalid). */
int  hak_option_store(hak_option_t option, long value);   /* 0, or EINVAL */
int  hak_option_store_string(hak_option_t option, const char *value);
const char *hak_option_string(hak_option_t option);
bool hak_option_parse(hak_option_t option, const char *text, long *value);
HAK_INLINE long hak_opt(hak_option_t option) { return hak_option_values[option]; }

/* ---- banner.c */
void hak_banner_print(void);

/* ---- counters.c: the global counters the slow paths keep */
void hak_stats_large(int blocks, size_t requested, int64_t mapped);
void hak_stats_bigcache(bool hit);
void hak_stats_slab_bytes(unsigned cls, int64_t bytes);
void hak_stats_counters(struct hak_stats *st);   /* into the statistics' merge */
extern _Atomic size_t hak_bigcache_cached_bytes;   /* what the BigCache holds, which it counts */
size_t hak_bigcache_bytes(void);                   /* read by ACE and the statistics */

/* ---- stats_report.c */
void hak_stats_init(void);      /* at start-up: the working directory a relative HAKMEM_STATS_FILE is taken in */
void hak_stats_at_exit(void);

/* ---- size_class.c */
extern uint8_t  hak_class_of_small[HAK_TINY_MAX / 16 + 1];
/* Offset of the class's cache in a heap by (size + 127) / 128, above
 * HAK_TINY_MAX (mid class sizes are multiples of 128). */
extern uint16_t hak_cache_of_mid[HAK_MID_TABLE_MAX / 128 + 1];
extern uint32_t hak_class_size[HAK_CLASSES];
extern uint8_t  hak_class_units[HAK_CLASSES];
uint32_t hak_class_cache_cap(unsigned cls);
uint32_t hak_class_cache_room(unsigned cls);
uint32_t hak_refill_first(unsigned cls);   /* blocks of a class's first refill (slow start) */
void     hak_size_class_init(void);
uint64_t hak_odd_inverse(uint32_t divisor);
int      hak_class_for_aligned(size_t size, size_t align);   /* -1: not a slab size */

/* ---- arena.c */
extern uintptr_t hak_arena_base;
extern uintptr_t hak_arena_size;   /* 0: no arena */
extern hak_slab_t *hak_arena_units;    /* the table of the arena units' descriptors */
extern uintptr_t hak_arena_unit_mask;  /* (HAK_ARENA_UNITS - 1) * 64; 0 (one zeroed descriptor): no arena */
void hak_arena_init(void);
hak_superslab_t *hak_arena_take(void);
void *hak_arena_take_large(void);            /* a 2 MiB chunk for a large block */
void hak_arena_give(void *chunk);
size_t hak_arena_used(void);                 /* slots handed out so far */
hak_superslab_t *hak_arena_superslab(size_t i);   /* the SuperSlab in slot i, NULL if it holds none now */
HAK_INLINE bool hak_in_arena(uintptr_t a) { return a - hak_arena_base < hak_arena_size; }

/* ---- registry.c */
extern _Atomic uint8_t hak_registry_map[HAK_REG_CHUNKS];
void hak_registry_set(uintptr_t chunk_addr, uint8_t kind);

/* ---- heap.c: thread heaps, their lifecycle and the slow paths' token */
extern hak_heap_t hak_heap_empty;
extern __thread hak_heap_t *hak_tls_heap __attribute__((tls_model("initial-exec")));   /* the thread's, or &hak_heap_empty */
hak_heap_t *hak_heap_new(bool few_cached);
hak_heap_t *hak_heap_thread_init(void);
hak_heap_t *hak_heap_list(void);
void hak_thread_done(void *heap);
int  hak_heap_release_all(hak_heap_t *h, bool now);
hak_heap_t *hak_heap_get(void);
bool hak_thread_exiting(void);
hak_heap_t *hak_heap_borrow(void);
void hak_heap_give_back(hak_heap_t *h);
int  hak_heap_trim_abandoned(bool now);
hak_superslab_t *hak_heap_reclaim_superslab(void);
void hak_heap_reclaim_hint(void);   /* an abandoned heap may have an empty SuperSlab to reclaim */
bool hak_heap_orphaned(const hak_heap_t *h, uint64_t now);   /* its thread left it a while ago, none took it since */
bool hak_heap_enter(hak_heap_t *h);   /* the slow paths' token */
void hak_heap_leave(hak_heap_t *h, bool entered);

/* ---- slab_list.c: a heap's warm pool and full lists, and a slab's free list; owner only */
void hak_slab_list_push(hak_slab_t **list, hak_slab_t *s);
void hak_slab_list_remove(hak_slab_t **list, hak_slab_t *s);
hak_slab_t *hak_slab_list_next(hak_slab_t *s);
void hak_slab_put_runs(hak_heap_t *h, unsigned cls, void **blocks, uint32_t n);   /* free blocks of h's slabs */
void hak_slab_put_container(hak_heap_t *h, unsigned cls, void **c, uint32_t k);
/* Pages of slabs in use (slab_list.c): the mid classes' slabs give back
 * pages their free blocks cover; the blocks on them are absent. */
HAK_INLINE bool hak_class_gives_pages(unsigned cls) { return cls >= HAK_TINY_CLASSES && cls < HAK_CACHED_CLASSES; }
uint64_t hak_slab_give_back(hak_slab_t *s, uint64_t now, bool all);   /* bytes decommitted */
uint32_t hak_slab_take_absent(hak_slab_t *s, void **out, uint32_t want);
uint64_t hak_slab_page_bytes(void);   /* bytes slabs in use gave back so far (statistics) */
enum { HAK_NOT_HOLED, HAK_BLOCK_ABSENT, HAK_BLOCK_PRESENT };
/* What a, which unit's limit refused, is in a slab with absent blocks. */
int hak_slab_holed_block(hak_slab_t *unit, uintptr_t a);

/* ---- inbox.c: the remote frees other threads send a heap */
uint32_t hak_heap_take_remote(hak_heap_t *h, unsigned cls, bool into_cache);
/* The blocks in h's inboxes back to their slabs, but for the classes whose
 * bits are set in skip (NULL: none). */
void hak_heap_collect_inboxes(hak_heap_t *h, const uint64_t *skip);

/* ---- idle.c: the inboxes and caches of idle heaps and classes back to their slabs */
uint64_t hak_heap_reclaim_others(bool all);   /* other threads' inboxes and caches: of sleeping threads, or all */
void hak_heap_fork_prepare(void);
void hak_heap_fork_done(void);
void hak_heap_collect_idle(hak_heap_t *h);

/* ---- drain.c: a heap's caches taken back by another thread (docs/design/thread-memory.md) */
uint32_t hak_heap_drain(hak_heap_t *h);  /* caller holds h's token, h is another thread's; batches it sent */
void hak_cache_undrain(hak_heap_t *h);   /* h's own thread, token held: its drained caches get their items back */
void hak_drain_stats(struct hak_stats *st);   /* cache_drains, drained_blocks, drained_batches */

/* ---- cache.c: unified cache refill and flush (the tiny/mid slow paths) */
void *hak_malloc_slow(size_t size);
void *hak_malloc_class(unsigned cls, size_t size);   /* ENOMEM and NULL if none */
void *hak_heap_pop(hak_heap_t *h, unsigned cls, size_t size);   /* the same, from heap h */
void  hak_free_flush(hak_heap_t *h, unsigned cls, void *p);
void  hak_free_full(void *p, hak_slab_t *s);
void  hak_cache_flush(hak_heap_t *h, unsigned cls, uint32_t n);
uint32_t hak_cache_room_for(hak_heap_t *h, unsigned cls, uint32_t n);   /* a refill's take of an inbox of n */
void  hak_cache_restart(hak_heap_t *h, unsigned cls, void **from, uint32_t n);   /* to first items, holding n blocks at from */
void  hak_cache_return(hak_heap_t *h, unsigned cls);   /* all its blocks (counted ones too) to the slabs, first items */
/* Where a heap keeps a class's cache items (heap.c): its first room, or
 * (grown) the room it grows into. */
void **hak_cache_items_at(hak_heap_t *h, unsigned cls, bool grown);

/* ---- superslab.c: SuperSlabs and the slabs carved from them */
hak_slab_t *hak_slab_new(hak_heap_t *h, unsigned cls);
void hak_slab_put_local(hak_heap_t *h, void *p);
void hak_slab_put_moved(hak_heap_t *h, hak_slab_t *s);
void hak_slab_release(hak_heap_t *h, hak_slab_t *s);
void hak_slab_trim_due(hak_heap_t *h, bool all);   /* units of new slabs taken from other classes: the pages past their carve */
bool hak_superslab_give_up(hak_heap_t *h, hak_superslab_t *ss);
void hak_superslab_unlend(hak_superslab_t *ss);   /* no dirty unit: no guest looks at it */
void hak_superslabs_orphaned(hak_heap_t *h, bool on);   /* h's thread left it (on), or a thread took it */
hak_superslab_t *hak_superslab_take_empty(hak_heap_t *a);

/* ---- shared_pool.c: empty SuperSlabs passed between threads */
hak_superslab_t *hak_shared_pool_pop(void);
void hak_shared_pool_push(hak_superslab_t *ss);
bool hak_shared_pool_keeps_pages(void);   /* a SuperSlab of the arena pooled now stays warm */
int  hak_shared_pool_trim(void);
void hak_release_schedule_swept(hak_superslab_t *ss);   /* a deadline for dirty units only the purger serves */

/* ---- release.c: giving memory back to the OS */
void hak_release_schedule(hak_heap_t *h, hak_superslab_t *ss);
void hak_release_tick(hak_heap_t *h);
uint64_t hak_release_look(hak_heap_t *h, uint64_t now, bool all);   /* slabs' pages wholly free go back */
void hak_release_grown(hak_heap_t *h, size_t bytes);   /* a new slab of bytes: its heap sweeps sooner */
typedef enum { HAK_PURGE_DUE, HAK_PURGE_LEAVE, HAK_PURGE_ALL } hak_purge_t;
int  hak_release_purge(hak_heap_t *h, hak_purge_t how);
void hak_release_abandoned_due(uint64_t when);
void hak_release_abandoned_since(uint64_t now);   /* due a purge delay after now */
uint64_t hak_release_abandoned(uint64_t now);
void     hak_release_retaken(uint64_t purged_at);
uint64_t hak_release_window(void);   /* ms after a decommit within which taking the memory back is too soon */
uint64_t hak_release_delay(void);   /* the purge delay now, ms */
uint64_t hak_release_sweep_all(bool force, int *released);
void     hak_release_forget_sweeps(void);   /* in a forked child */
uint64_t hak_release_dirty_bytes(void);     /* free units of the arena not decommitted */
bool     hak_release_purge_units(hak_superslab_t *ss, uint32_t mask);   /* its dirty units in mask, now */
/* The earlier of two deadlines, 0 standing for none. */
HAK_INLINE uint64_t hak_deadline_min(uint64_t a, uint64_t b) { return !a ? b : !b ? a : a < b ? a : b; }

/* ---- ace.c: the adaptive controller */
typedef enum {
  HAK_ACE_RETAKEN,            /* slab units taken back soon after a sweep decommitted them */
  HAK_ACE_EXPIRED_MISSED,     /* bytes of large allocations mapped anew soon after BigCache entries expired */
  HAK_ACE_BIGCACHE_REFUSED,   /* bytes of freed large blocks the BigCache had no budget left for */
  HAK_ACE_BIGCACHE_REFUSALS,  /* and how many blocks */
  HAK_ACE_BIGCACHE_MISSED,    /* a large allocation the BigCache could not serve */
  HAK_ACE_REFUSED_MISSED,     /* such an allocation soon after a block that could have served it was refused */
  HAK_ACE_SIGNS
} hak_ace_sign_t;
typedef struct hak_ace_knob_s {
  _Atomic long value;       /* read where the knob applies */
  long start, min, max;
  uint64_t quiet_since;     /* ms: the last sign of regret, or the last step down */
  uint64_t last_up, last_down;   /* ms of the last steps, 0: none */
  uint64_t undone_before;   /* ms: a step up before this undoes the last step down */
  uint32_t backoff;         /* doublings of the hold after reversals */
  uint64_t ups, downs;      /* steps taken */
} hak_ace_knob_t;
void hak_ace_knob_init(hak_ace_knob_t *k, long start, long max, uint64_t now);
/* One period's decision: +1 up, -1 down, 0 none. regret: the period saw
 * signs that the knob is too small, by this many doublings (0: none);
 * up_gap_ms: the least time between steps up; scale_ms: the knob's
 * timescale, which sets its hold. */
int  hak_ace_knob_step(hak_ace_knob_t *k, uint64_t now, unsigned regret, uint64_t up_gap_ms, uint64_t scale_ms);
long hak_ace_value(enum hak_knob_e knob);
void hak_ace_sign(hak_ace_sign_t sign, uint64_t n);   /* n: events, or bytes */
void hak_ace_restart(void);
void hak_ace_option_set(hak_option_t option);
void hak_ace_poll(uint64_t now);
void hak_ace_stats(struct hak_stats *st);
void hak_ace_forked(void);
void hak_ace_format(hak_out_t *o, enum hak_knob_e knob, uint64_t v);
const char *hak_ace_name(enum hak_knob_e knob);
void hak_ace_describe(hak_out_t *o);   /* the banner's line */

/* ---- purger.c: the background purge thread */
enum { PURGER_NONE, PURGER_ASKED, PURGER_WANTED, PURGER_STARTING, PURGER_RUNNING };   /* purger.c */
extern _Atomic int hak_purger_state;
void hak_purger_notify(void);
void hak_purger_stop(bool for_good);
void hak_purger_start(void);
/* Start the purger if it was asked for. Called where a thread may be
 * created: at the start of a slow path, before it changes anything (thread
 * creation allocates, and that allocation may run the slow paths again). */
HAK_INLINE void hak_purger_poll(void) {
  if (HAK_UNLIKELY(atomic_load_explicit(&hak_purger_state, memory_order_relaxed) == PURGER_WANTED)) hak_purger_start();
}
void hak_purger_install(void);
void hak_purger_thread_started(void);
void hak_purger_thread_done(void);
uint64_t hak_purger_passes(void);

/* ---- large.c and bigcache.c: blocks above HAK_MID_MAX */
/* The size classes of large mappings, 8 per doubling from HAK_LARGE_MIN
 * (2^17) up to 4 GiB: the BigCache's bins, and large.c's record of which
 * sizes programs write whole. The class of a mapping size in (2^17, 2^32]
 * is the one whose sizes are the smallest at least as large. */
#define HAK_LARGE_BINS (8 * (32 - 17))
HAK_INLINE unsigned hak_large_bin(size_t size) {
  unsigned b = 63u - (unsigned)__builtin_clzll(size - 1);
  return 8u * (b - 17u) + (unsigned)((size - 1) >> (b - 3u)) - 8u;
}
void  *hak_large_alloc(size_t size, size_t align, bool zero);
void   hak_large_free(void *p, uint8_t kind, const char *fn);
void  *hak_large_realloc(void *p, size_t size);
void   hak_large_unmap(hak_large_t *hdr);   /* its mapping, and its guard page (secure build) */
size_t hak_large_usable(const void *p, uint8_t kind, const char *fn);
hak_large_t *hak_bigcache_take(size_t min_size);   /* best up to twice that, else one to cut or grow */
bool   hak_bigcache_put(hak_large_t *hdr);
uint64_t hak_bigcache_tick(void);
int    hak_bigcache_drain(void);
hak_large_t *hak_bigcache_take_grace(size_t min_size);   /* the grace entry if it has min_size bytes */
bool   hak_bigcache_grace_drop(void);   /* before memory is mapped anew: the grace entry to the OS (true if one was) */
bool   hak_bigcache_keep_tail(hak_large_t *hdr, size_t end);   /* a chunk block's pages past its end, up to end */
size_t hak_bigcache_take_tail(hak_large_t *hdr);   /* back from the BigCache: their end, 0 if none */
void   hak_bigcache_forked(void);

/* ---- free.c */
/* Whether a remote-free container of class cls has room for its count
 * (types.h, hak_remote_batch_t). */
HAK_INLINE bool hak_batch_counted(unsigned cls) { return hak_class_size[cls] >= HAK_BATCH_COUNTED; }
/* The count of a remote-free batch's container (types.h, HAK_BATCH_HINT),
 * and its hint. */
HAK_INLINE uint32_t hak_batch_count(void **c) { return (uint32_t)((uintptr_t)c[2] & ((1u << HAK_COUNT_BITS) - 1)); }
HAK_INLINE void hak_batch_prefetch(void **c) {
  uintptr_t hint = (uintptr_t)c[2] >> HAK_COUNT_BITS;
  if (hint) __builtin_prefetch((void *)hint, 1);   /* not of 0: a page walk that finds nothing */
}
/* Addresses a free block of class cls holds as a container (of a slab's
 * free list, slab_list.c, or of a remote-free batch, up to the batch's limit):
 * 0 when it has no count. */
HAK_INLINE uint32_t hak_container_room(unsigned cls) {
  return hak_batch_counted(cls) ? hak_class_size[cls] / sizeof(void *) - 3 : 0;
}
/* An inbox (types.h) is one word: the newest container of its chain in the
 * low 48 bits (a block's address: user space, below 2^47 on x86-64 and
 * 2^48 on arm64 unless mmap is asked for more, which hakmem never does),
 * and the blocks of the chain in the top 16, at most HAK_INBOX_MAX, so that
 * the owner knows how many it takes without a walk over the containers,
 * each a line another thread wrote. */
#define HAK_INBOX_SHIFT 48
#define HAK_INBOX_MAX   0xffffu
HAK_INLINE void **hak_inbox_first(uintptr_t w) { return (void **)(w & (((uintptr_t)1 << HAK_INBOX_SHIFT) - 1)); }
HAK_INLINE uint32_t hak_inbox_blocks(uintptr_t w) { return (uint32_t)(w >> HAK_INBOX_SHIFT); }
/* Does any of h's inboxes of classes from .. from + n - 1 hold blocks?
 * Reads them all, with no branch per class: the scans of a heap's 104
 * inboxes (a thread's start and exit, collectors of abandoned heaps) find
 * them empty nearly always. */
HAK_INLINE bool hak_inboxes_any(hak_heap_t *h, unsigned from, unsigned n) {
  uintptr_t any = 0;
#pragma GCC unroll 8
  for (unsigned i = 0; i < n; i++) any |= atomic_load_explicit(&h->inbox[from + i], memory_order_relaxed);
  return any != 0;
}
/* Containers' worth a refill takes from its class's pending chain (the
 * inbox it took, inbox.c), at most. A refill of the whole inbox read every
 * container of it in one walk, each a line another thread wrote, one miss
 * after the other (a quarter of the time of a thread that allocates what
 * another frees); a few at a time, the next one prefetched, the misses
 * overlap the program's work between two refills (docs/design/tuning.md,
 * "Remote-free batches"). */
#define HAK_PENDING_TAKE 4
/* Caches' worth of blocks an inbox may hold for its class's pending chain
 * to take it; a larger one goes back to its slabs (inbox.c). */
#define HAK_PENDING_MOST 16
/* Has any class of h a pending chain (inbox.c)? Read by the purger while
 * the owner may change them. */
HAK_INLINE bool hak_heap_pending_any(hak_heap_t *h) {
  uint64_t any = 0;
  for (unsigned w = 0; w < (HAK_CLASSES + 63) / 64; w++) any |= HAK_LOAD_SHARED(h->pending_in[w]);
  return any != 0;
}
void hak_free_slow(void *p);
void hak_free_other(const void *p);
void hak_free_remote(void *p, hak_slab_t *s);
void hak_remote_flush_all(hak_heap_t *h);
bool hak_remote_batch_drain(hak_heap_t *h, unsigned cls, hak_ucache_t *owner);   /* drain.c */
_Noreturn void hak_fatal_block(const char *fn, const char *freed, const void *p);
/* What free's block check refused in a SuperSlab: a block of a slab with
 * absent blocks is freed, anything else reported as hak_fatal_block does
 * (free.c). */
void hak_free_refused(const void *p);
/* Secure build: a free block whose words are not as hakmem left them. */
_Noreturn void hak_fatal_corrupt(const char *fn, const void *p);
void hak_free_double(const void *p);
size_t hak_block_live_usable(const void *p, const char *fn);
size_t hak_block_usable(const void *p, const char *fn);

/* ---- prof.c: heap profiling by sampling (docs/profiling.md) */
extern bool hak_prof_on;              /* PROF_SAMPLE was set at start-up */
extern hak_heap_t *hak_prof_heap;     /* the sampled blocks' heap, which no thread owns; NULL until needed */
void  hak_prof_init(void);            /* from init, after the options */
void  hak_prof_ready(void);           /* from the constructor */
void  hak_prof_at_exit(void);
void  hak_prof_heap_init(hak_heap_t *h);   /* h->prof, and the countdown drawn */
void *hak_prof_malloc_class(unsigned cls, size_t size);  /* hak_malloc_class while profiling: counted */
void *hak_prof_sampled(size_t size);  /* malloc's counted build: this allocation crossed the countdown */
/* Count an allocation of size bytes down to the heap's next sample; true:
 * this one crossed it (and is to be sampled, prof.c). */
HAK_INLINE bool hak_prof_count(hak_heap_t *h, size_t size) { return (h->prof_left -= (int64_t)size) < 0; }
void  hak_prof_large(hak_large_t *hdr, size_t size);     /* a large allocation, while profiling */
void  hak_prof_free(void *p);          /* free of a block of hak_prof_heap */
void  hak_prof_forget(hak_large_t *hdr);   /* free of a sampled large block */
int   hak_prof_trim(void);             /* malloc_trim: the profiler heap's cached blocks go back */
void  hak_prof_fork_prepare(void);
void  hak_prof_fork_parent(void);
void  hak_prof_fork_child(void);
HAK_INLINE uint64_t hak_prof_mix(uint64_t x, uint64_t y) {   /* hashes of stacks */
  x = (x ^ y) * 0x9e3779b97f4a7c15ull;
  return x ^ x >> 29;
}

/* ---- prof_table.c: the profile's records and sampled blocks, under prof.c's lock */
struct prof_stack_s *hak_prof_record_of(hak_prof_state_t *st, uint64_t key, void *const *frames, uint32_t depth);
void hak_prof_count_in(struct prof_stack_s *s, uint64_t bytes);
void hak_prof_count_out(struct prof_stack_s *s, uint64_t bytes);
/* Sampled block p of a size class, asked for with bytes bytes. */
void hak_prof_record(hak_prof_state_t *st, const void *p, uint64_t key, uint64_t bytes, void *const *frames, uint32_t depth);
void hak_prof_forget_block(const void *p);   /* freed */
void hak_prof_write(int fd);                 /* the profile */

/* ---- stack.c: call stacks for the heap profile */
#if defined(__x86_64__)
#define HAK_STACK_FAST 1   /* the cached walk (stack.c); elsewhere the DWARF unwinder alone */
#else
#define HAK_STACK_FAST 0
#endif
bool     hak_stack_init(void);                /* once, when profiling is on; may allocate; false: no unwinder */
/* The calling thread's return addresses outside hakmem, innermost first,
 * into memo (ip + first, depth of them, at most HAK_STACK_MAX); true if
 * they are the memo's last ones again. */
bool     hak_stack_capture(hak_stack_memo_t *memo);

/* ---- counted.c: switching the entry points to their counted builds
 * (heap profiling; fast_path.h, HAK_TWO_BUILDS) */
typedef void (*hak_fn_t)(void);
typedef struct hak_twin_s {
  hak_fn_t uncounted, counted;
} hak_twin_t;
bool hak_counted_switch(void);   /* every entry point to its counted build; false if that cannot be */

/* ---- alloc_aligned.c */
void *hak_alloc_aligned(size_t align, size_t size);

#include "block.h"   /* the inline helpers of addresses, blocks and size classes */

#pragma GCC visibility pop

#endif
