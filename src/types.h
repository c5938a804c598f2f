/* hakmem: every constant and every structure of the allocator.
 *
 * Memory layout
 *   SuperSlab   2 MiB region, 2 MiB aligned, owned by one thread heap (its
 *               host). Its first 4 KiB hold the header (hak_superslab_t); the
 *               rest is carved into 32 units of 64 KiB (unit 0 loses the header
 *               page).
 *   slab        a span of 1..8 units holding blocks of one size class, the
 *               heap's that carved it: the host's, or another heap's that took
 *               free units with pages resident there (a guest). Tiny
 *               classes use one unit (any unit); mid classes use 1..8 units
 *               starting at unit 1 or later, so their blocks are 64 KiB aligned
 *               at the slab start (a span class's slab is its one block).
 *   large block a 2 MiB chunk of the arena when it fits one, else a private
 *               mapping; its header (hak_large_t) sits at the start of its
 *               first 2 MiB chunk, or just below the block for alignments of
 *               2 MiB and more.
 *   arena       16 GiB of address space reserved at start-up that SuperSlabs
 *               are carved from (from its bottom) and large blocks' chunks
 *               (from its top; when the reservation or the arena runs out,
 *               they are mapped one by one), and beside it the table of its
 *               units' descriptors, which free indexes by address alone.
 *   registry    one byte per 2 MiB chunk of the address space saying whether the
 *               chunk is a SuperSlab, the head of a large block, or foreign.
 *
 * Freed blocks carry a mark in their second word (the address of their
 * unit's descriptor, hak_free_mark); malloc clears it. A free of a block
 * whose mark is already set is a double free. Blocks a slab carves for a
 * cache carry none until malloc has handed them out and free has marked
 * them: a refill stores nothing into its new blocks, whose lines and pages
 * stay untouched until malloc hands them out (a free of one before that is
 * of a pointer malloc never returned). The secure build marks them as
 * well, since its malloc checks every block it hands out.
 *
 * The secure build (make SECURE=1, HAK_SECURE, docs/secure.md) adds guard
 * pages (HAK_GUARD): the second page of a SuperSlab, between its header and
 * its blocks, its last page, and a page after each large block.
 */
#ifndef HAK_TYPES_H
#define HAK_TYPES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HAK_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HAK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HAK_NOINLINE    __attribute__((noinline))
#define HAK_COLD        __attribute__((cold, noinline))
#define HAK_INLINE      static inline __attribute__((always_inline))
#define HAK_EXPORT      __attribute__((visibility("default")))

/* Reads a word that another thread may be storing at the same time, where
 * the old and the new value serve alike (a unit's limit while its owner
 * carves, types.h); the stores are relaxed atomic stores. ThreadSanitizer
 * builds make the load a relaxed atomic load too, so that the race is
 * declared; the others keep a plain load, which gcc folds into the compare
 * that uses it, one instruction fewer on free's fast path (an aligned word is
 * loaded in one access on every 64-bit target). */
#if defined(__SANITIZE_THREAD__)
#define HAK_LOAD_SHARED(lvalue) __atomic_load_n(&(lvalue), __ATOMIC_RELAXED)
#define HAK_STORE_SHARED(lvalue, v) __atomic_store_n(&(lvalue), (v), __ATOMIC_RELAXED)
#else
#define HAK_LOAD_SHARED(lvalue) (lvalue)
#define HAK_STORE_SHARED(lvalue, v) ((lvalue) = (v))
#endif

/* ---- geometry */
#define HAK_SS_SHIFT      21
#define HAK_SS_SIZE       ((size_t)1 << HAK_SS_SHIFT)
#define HAK_SS_MASK       (HAK_SS_SIZE - 1)
#define HAK_UNIT_SHIFT    16
#define HAK_UNIT_SIZE     ((size_t)1 << HAK_UNIT_SHIFT)
#define HAK_UNITS         32
#define HAK_UNITS_ALL     0xffffffffu
#ifndef HAK_SECURE
#define HAK_SECURE 0
#endif
#define HAK_GUARD         (HAK_SECURE ? 4096 : 0)   /* bytes of a guard page, secure build only */
#define HAK_SS_HEADER     (4096 + HAK_GUARD)        /* bytes of unit 0 taken by the header (and guard) */
#define HAK_SS_END        (HAK_SS_SIZE - HAK_GUARD) /* where the blocks of the last unit end */
#define HAK_PAGE_BYTES    4096       /* the smallest page: what a refill's slow start touches */

/* ---- size classes: 16-byte steps up to 128 B, then 8 classes per doubling */
#define HAK_ALIGN         16
#define HAK_TINY_MAX      1024
#define HAK_TINY_CLASSES  32
#define HAK_CLASSES       (HAK_TINY_CLASSES + 9 * 8)   /* 1 KiB .. 512 KiB: 9 doublings */
/* The classes up to 128 KiB have a unified cache each, which malloc's fast
 * path finds in a table; the 16 above, the span classes, have a slab of one
 * block each and no cache: a freed block goes straight back to its slab,
 * whose units, with the pages on them, a block of any size may take next
 * (cache.c); as large blocks, the freed pages of one size served only its
 * own and the next sizes up, and span classes up to 1 MiB left runs too
 * short for them (docs/design/tuning.md, "Span classes"). Blocks above
 * HAK_MID_MAX are large (large.c). The secure build
 * keeps blocks above 128 KiB large, each with a guard page after it, and
 * leaves the span classes unused. */
#define HAK_MID_TABLE_MAX  ((size_t)128 * 1024)
#define HAK_CACHED_CLASSES (HAK_TINY_CLASSES + 7 * 8)
#define HAK_MID_MAX        (HAK_SECURE ? HAK_MID_TABLE_MAX : (size_t)512 * 1024)
/* realloc makes a block that grows past HAK_LARGE_MIN large, so that it
 * grows on by moving its pages (mremap) rather than copying them, and a
 * large block stays large while above it; the BigCache keeps large blocks
 * from there. Copying, CPython's run (PYTHONMALLOC=malloc) spent 95M more
 * instructions in memcpy (7,975M -> 8,073M in all). */
#define HAK_LARGE_MIN      HAK_MID_TABLE_MAX


#define HAK_FEW_CACHED 2          /* blocks a cache of the profiler's heap holds (hak_heap_new) */
#define HAK_CACHE_ROOM_MAX 4096   /* blocks a unified cache may grow to (hak_class_cache_room) */
#define HAK_CACHE_ROOM_MIN 32     /* blocks it may grow to whatever CACHE_BYTES, */
#define HAK_CACHE_ROOM_MIN_BYTES ((long)512 << 10)   /* up to these bytes (hak_class_cache_room) */

/* ---- upper bounds of the release-policy options (options.c) */
#define HAK_SHARED_POOL_SLOTS  64

/* ---- statistics level
 * 0  no counters at all
 * 1  (default) counters on the slow paths only: refills, flushes, remote
 *    frees, slabs, live blocks, committed bytes, large blocks, OS calls
 * 2  also a count of every allocation and free on the fast paths, the bytes
 *    requested, and the allocations = frees + live check; measured to cost
 *    1-4% of fast-path throughput, so it is a build level (make STAT=2) */
#ifndef HAK_STAT
#define HAK_STAT 1
#endif
#define HAK_COUNT_LEVEL(level, lvalue, n) \
  do {                                    \
    if (HAK_STAT >= (level)) (lvalue) += (n); \
  } while (0)
#define HAK_COUNT(lvalue, n) HAK_COUNT_LEVEL(1, lvalue, n)
#define HAK_COUNT_OP(lvalue, n) HAK_COUNT_LEVEL(2, lvalue, n)

/* ---- arena: the address space SuperSlabs are carved from (arena.c).
 * 128 MiB in the Valgrind-aware build (HAK_VALGRIND, from track.h, which
 * internal.h includes first): memcheck warns of every range over 256 MiB
 * it is told about, a mapping included, and keeps state for each of its
 * bytes; past it, SuperSlabs and large blocks are mapped one by one. */
#define HAK_ARENA_SIZE    ((uintptr_t)(HAK_VALGRIND ? 128 : 16 << 10) << 20)
#define HAK_ARENA_UNITS   (HAK_ARENA_SIZE >> HAK_UNIT_SHIFT)   /* a power of two: the table's period */

/* ---- registry */
#define HAK_ADDR_BITS     47
#define HAK_REG_CHUNKS    ((size_t)1 << (HAK_ADDR_BITS - HAK_SS_SHIFT))
enum { HAK_REG_FOREIGN = 0, HAK_REG_SUPERSLAB = 1, HAK_REG_LARGE = 2, HAK_REG_LARGE_ALIGNED = 3 };

struct hak_heap_s;
typedef struct hak_ucache_s hak_ucache_t;   /* below */

/* A slab descriptor, one per unit. A multi-unit slab keeps its state in its
 * first unit's descriptor (the head); the other units' descriptors repeat the
 * fields the free fast path reads (geometry, class, cache) and point back to
 * the head with head_delta, so free never needs the head.
 *
 * free accepts a block start below the unit's limit: the slab's carved count
 * as it was when carving last reached this unit, so a block never handed out
 * is refused. A slab that empties sets its units' limits to 0 and keeps the
 * rest (geometry, head_delta, carved) until the units are used again, so that
 * a late free of one of its blocks can be told as a double free.
 *
 * A unit's descriptor is read by free for any address that falls on it in
 * the arena's table (NULL, blocks outside the arena, foreign pointers) while
 * its owner may rewrite it, and a thread may be preempted between two of its
 * reads. free reads the limit first: a nonzero limit was stored (release)
 * after the geometry it goes with, and the geometry read after it is that
 * one or a later slab's, each of which refuses every address outside the
 * unit's SuperSlab (arena.c). So a geometry, once set, is never zeroed
 * (ss_adopt keeps it): a zero one accepts address 0 and, with inverse 0,
 * every address (mstress 64: free(NULL) read start 0 from the reset, was
 * preempted, read the limit of the unit's next slab, and loaded NULL's
 * second word). */
typedef struct hak_slab_s {
  _Alignas(64) uint64_t inverse;   /* of the block size's odd part, mod 2^64 (hak_is_block) */
  uintptr_t start;         /* address of block 0 */
  uint64_t limit;          /* blocks free accepts (see above), 0 when the unit is not
                              in use; read before the geometry */
  hak_ucache_t *cache;     /* the owning heap's cache of the class */
  uintptr_t owner_thread;  /* hak_thread_id of the thread using the owning heap, 0: none (heap.c) */
  uint8_t  cls;
  uint8_t  head_delta;     /* units back to the head descriptor */
  uint8_t  units;          /* span length, head only */
  uint8_t  shift;          /* trailing zero bits of the block size */
  uint16_t capacity;       /* blocks the slab holds, head only */
  uint16_t carved;         /* blocks taken from the never-used tail so far */
  void    *free;           /* first container of the free list (slab_list.c, cache.c), owner only */
  uint16_t used;           /* blocks handed out (to the unified cache or the program) */
  uint8_t  in_full;        /* 1: on the heap's full list, 0: on the warm list */
  uint8_t  zero;           /* 1: its units were untouched when taken (head only): a span
                              class's block, handed out once, is zero but for malloc's two words */
  uint8_t  absent;         /* free blocks whose pages went back to the OS (head only, mid
                              classes; the SuperSlab's absent map names them): while there are
                              any, every unit's limit is 0 (slab_list.c, "Pages of slabs in use") */
  uint8_t  holings;        /* times its limits went to 0 for absent blocks, mod 256 (head only;
                              hak_slab_holed_block) */
  uint16_t free_low;       /* fewest blocks its free list held since its class's last look for
                              pages to give back (head only): the oldest that many stayed free */
} hak_slab_t;

/* A slab's links in the warm-pool or full list of its heap (head only). */
typedef struct hak_slab_link_s {
  hak_slab_t *next, *prev;
} hak_slab_link_t;

/* A SuperSlab's header. Its owner (the host) keeps it on its list, carves
 * slabs from its free units, and alone pools it or gives it to another
 * heap when it is wholly free; another heap that finds a run of its dirty
 * free units when its own SuperSlabs have none (a guest) carves a slab
 * there too; the heap of each slab releases it. Any thread may decommit its
 * free units (a sweep: the background purger, malloc_trim, a heap's own
 * purge). Two bits per unit in the dirty word, low half and high half:
 *   1 0   free, pages may be resident (dirty): the host, a guest or a
 *         sweep may take it, with one compare-and-swap;
 *   0 1   a sweep took it and is decommitting it;
 *   1 1   a guest's slab holds it (lent: the host's free units word
 *         still counts it free);
 *   0 0   clean (no page resident) if the host's word has it free, which
 *         only the host takes, else in a slab of the host's.
 * The host's release sets the low bit (one atomic or), a guest's clears
 * the high one (one atomic and), so no heap carves a unit whose pages are
 * being dropped, and no sweep ever drops a unit in use. A SuperSlab that
 * leaves its host (pooled, or given to another heap) is closed first: its
 * epoch turns odd, and stays so if no unit is held (superslab.c's
 * ss_close); a guest's claim stands if the epoch it read before it is the
 * same after. purge_at is the next deadline of the dirty units: set
 * by whoever finds dirty units without one, cleared or moved on by the sweep
 * that serves it. A deadline decommits the units that were dirty at the
 * previous one too (aged), and ages the others: a unit goes back to the OS
 * after it stayed free for one to two half-delays, not because another
 * unit of its SuperSlab had been free for long. A unit taken back soon
 * after a sweep decommitted it (purged, purged_at) was decommitted too
 * early: the release policy lengthens its delays (release.c). */
typedef struct hak_superslab_s {
  struct hak_heap_s *owner;              /* the host: the heap whose list it is on, NULL while pooled */
  struct hak_superslab_s *next, *prev;   /* owning heap's list */
  uint32_t free_units;     /* bit per unit free or lent (see above): the host's, written by it
                                only (docs/design/thread-memory.md, "Free units lent between
                                heaps"), read by guests as a hint (HAK_LOAD_SHARED) */
  _Atomic uint32_t aged;   /* dirty units that were dirty at the last deadline already */
  _Atomic uint64_t dirty;  /* see above */
  _Atomic uint64_t purge_at;   /* ms, the dirty units' next deadline (see above), 0: none */
  _Atomic uint64_t purged_at;  /* ms of the last sweep that decommitted units */
  _Atomic uint32_t purged;     /* units decommitted by a sweep and not taken since */
  _Atomic uint32_t warm_until; /* ms (low 32 bits) until which it keeps its pages resident in the shared pool */
  hak_slab_t own_slabs[HAK_UNITS];  /* its units' descriptors outside the arena (hak_ss_slabs) */
  /* Of each unit, written by the heap whose slab holds it (or held it last)
   * and read by any heap that looks for a run of free units, which a claim
   * of the run then confirms: relaxed (HAK_LOAD_SHARED, HAK_STORE_SHARED). */
  uint8_t span_class[HAK_UNITS];   /* 1 + class of the slab that last began at each unit, 0 if none */
  uint8_t touched[HAK_UNITS];      /* pages from each unit's start that blocks were carved on since the
                                      unit was last taken clean: what a dirty unit may hold resident */
  hak_slab_link_t links[HAK_UNITS];  /* of the slab beginning at each unit (that slab's heap only) */
  uint8_t taken_gen[HAK_UNITS];    /* the carving heap's thread generation (gen) when a slab last
                                      began at each unit */
  _Atomic uint64_t absent[HAK_UNITS];   /* of the slab beginning at each unit: bit per block whose pages
                                      went back to the OS while the slab is in use (written by the owner,
                                      read by any free of the slab's blocks) */
  uint32_t absent_at[HAK_UNITS];   /* ms (low 32 bits) when the slab last gave pages back, or until
                                      when it gives none (its absent blocks were taken back soon after:
                                      a hold), 0: neither (owner only) */
  _Atomic uint32_t epoch;          /* odd while closed: pooled, or passing between heaps (see above) */
} hak_superslab_t;
#define HAK_HELD(w)     ((uint32_t)((w) >> 32))                /* by a sweep or a guest */
#define HAK_DIRTY(w)    ((uint32_t)(w) & ~HAK_HELD(w))        /* free, pages may be resident */
#define HAK_PURGING(w)  (HAK_HELD(w) & ~(uint32_t)(w))         /* held by a sweep */

_Static_assert(sizeof(hak_slab_t) == 64, "slab descriptor is one cache line");
_Static_assert(sizeof(hak_superslab_t) <= HAK_SS_HEADER, "header fits its page");
_Static_assert(offsetof(hak_superslab_t, own_slabs) == 64, "descriptors start on a cache line");
/* hak_slab_new reads the first line of every SuperSlab of its heap with
 * room (its list links, free and dirty units), and of those with a run
 * that fits, one line more (the units' classes and touched pages). */
_Static_assert(offsetof(hak_superslab_t, span_class) % 64 == 0 &&
               offsetof(hak_superslab_t, touched) == offsetof(hak_superslab_t, span_class) + HAK_UNITS,
               "span_class and touched share a cache line");

/* Unified cache of one class: a stack of free blocks items[0] .. top[-1]
 * with room up to end (pointers, so that each fast path tests and moves the
 * top with no index arithmetic), and (STAT=2) the two counters the fast
 * paths keep and the class, on the same cache line. The thread using the
 * heap alone writes top; items and end change under the heap's slow-path
 * token only, by the owner or by a drain, which sets items = end and end =
 * items so that both fast paths fail (docs/design/thread-memory.md). */
struct hak_ucache_s {
  void   **top;
  void   **items;
  void   **end;
#if HAK_STAT >= 2
  uint64_t allocs;
  uint64_t frees;
  uint64_t cls;            /* the class, for malloc's count of bytes requested */
#endif
};

/* Per-heap, per-class counters kept on the slow paths (owner only). One
 * list for the struct and for the merge in stats.c. used_blocks and slabs
 * are gauges; the rest count events. */
#define HAK_HEAP_CLASS_COUNTERS(X) \
  X(remote_received) X(refills) X(refill_blocks) X(flushes) X(flush_blocks) X(used_blocks) X(slabs) X(requested)
#define HAK_COUNTER_FIELD_(name) uint64_t name;
typedef struct hak_class_counters_s { HAK_HEAP_CLASS_COUNTERS(HAK_COUNTER_FIELD_) } hak_class_counters_t;

/* A thread's batch of freed blocks that belong to one other heap, all of one
 * class; it goes to the owner's inbox with one CAS when it is full, when a
 * block of another owner comes, or when the thread passes a slow path
 * sweep, trims or exits.
 *
 * The batch is a chain of containers: free blocks that hold, besides the
 * link to the next container (word 0) and their free mark (word 1), a count
 * (word 2) and the addresses of other blocks of the batch (words 3...), so
 * that the owner reads a few lines per batch instead of chasing a pointer
 * through every block. Blocks under HAK_BATCH_COUNTED bytes are containers
 * with no count and no room: a plain chain. */
#define HAK_BATCH_COUNTED 32
/* A counted container's word 2 holds the count in its low 16 bits and,
 * above them, the address of the container HAK_BATCH_HINT older in its
 * batch (0: none), which the owner's walk over an inbox prefetches: the
 * walk's loads would otherwise be one dependent miss after another, each
 * on a line the freeing thread wrote (inbox.c). A hint only: never
 * followed, so a stray write into it costs a useless prefetch. */
#define HAK_BATCH_HINT 4
#define HAK_COUNT_BITS 16
typedef struct hak_remote_batch_s {
  hak_ucache_t *owner;       /* the cache of the class in the heap it goes to, which names that heap
                                as the slab descriptors of its blocks do (free's fast path compares
                                the two); kept when it is flushed, so that the next free for that
                                heap opens the next batch on free's fast path; NULL: none yet, or
                                a drain sent the batch (drain.c). Written under the heap's token */
  void   **slot;           /* where the newest container's next address goes (word 3 + addresses in it) */
  void   **slot_end;       /* free's fast path stores below it: the container's room or the batch's limit ends there */
  void   **head, **tail;   /* newest and oldest container */
  uint32_t count;          /* blocks in the batch but the addresses in the newest container */
  uint32_t limit;          /* blocks: three quarters of the class's cache capacity, at least 1 */
  uint32_t room;           /* addresses a container holds */
} hak_remote_batch_t;

/* A class's cache as the release tick's sweep last saw it (idle.c): its
 * top, the block on it and the item just above it (what the next free
 * overwrites), and how many sweeps in a row saw the same. */
typedef struct hak_cache_look_s {
  void   **top;
  void    *block, *above;
  uint32_t same;
} hak_cache_look_t;

/* A slab a heap trims later (superslab.c, hak_slab_trim_due): its units'
 * pages past its carve go back a quarter of the purge delay after at (ms). */
#define HAK_TRIMS 32
typedef struct hak_trim_s {
  hak_slab_t *slab;
  uint64_t    at;
} hak_trim_t;

enum { HAK_HEAP_ACTIVE = 0, HAK_HEAP_ABANDONED = 1, HAK_HEAP_COLLECTING = 2 };

typedef struct hak_heap_s {
  hak_ucache_t cache[HAK_CLASSES];     /* the fast paths touch only this, */
  hak_ucache_t *cache_small[HAK_TINY_MAX / 16 + 1];   /* and these: the class's cache by
                                          (size + 15) / 16, and by hak_cache_of_mid, addressed from */
  uint16_t     cache_of_mid[HAK_MID_TABLE_MAX / 128 + 1];     /* the heap pointer malloc already holds */
  int64_t      prof_left;              /* bytes malloc's counted build may allocate before its next
                                          sample (prof.c) */
  struct hak_prof_state_s *prof;       /* heap profiling's state, just after the heap; NULL: off */
  hak_class_counters_t counters[HAK_CLASSES];
  uint8_t      sending;                /* 1 while free's fast path stores in outgoing (free.c, drain.c) */
  hak_remote_batch_t outgoing[HAK_CLASSES];  /* blocks of other heaps freed here */
  hak_slab_t  *warm[HAK_CLASSES];      /* warm pool: slabs with free blocks */
  hak_slab_t  *full[HAK_CLASSES];      /* slabs with nothing left to hand out */
  uint64_t     listed[(HAK_CLASSES + 63) / 64];   /* bit per class with slabs on those lists */
  hak_superslab_t *superslabs;         /* owned; ones with free units first */
  uint64_t     span_freed;             /* bytes of span slabs released since it last took one (superslab.c) */
  uintptr_t    thread;                 /* hak_thread_id of the thread using the heap, 0: none */
  uint32_t     empty_superslabs;       /* owned SuperSlabs with every unit free or lent */
  uint8_t      gen;                    /* threads that used the heap, mod 256 (superslab.c's find_span) */
  uint64_t     purge_at;               /* earliest SuperSlab purge deadline, 0: none */
  uint64_t     looks_at;               /* when its mid classes' slabs are next looked at for pages
                                          wholly free (release.c), 0: none pending */
  uint64_t     blocks_back[(HAK_CLASSES + 63) / 64];   /* bit per class whose slabs got blocks back
                                          since the last look, */
  uint64_t     look_again[(HAK_CLASSES + 63) / 64];    /* and per class those had at the last look */
  uint32_t     ticks;                  /* slow-path visits (and new slab bytes) since the last sweep (release.c) */
  _Atomic uintptr_t slow;              /* hak_thread_id of the thread in the heap's slow paths, 0: none (heap.c) */
  _Atomic uint32_t visits;             /* the heap's slow paths entered, written by that thread */
  uint32_t     visits_seen;            /* visits when the purger last looked at the heap (purger only) */
  uint64_t     refilled[(HAK_CLASSES + 63) / 64];   /* bit per class whose cache refilled since the last
                                          sweep of inboxes (release.c) */
  void       **pending[HAK_CLASSES];   /* the chain of an inbox its refills take a few containers at a
                                          time (inbox.c), */
  uint64_t     pending_in[(HAK_CLASSES + 63) / 64];   /* and a bit per class that has one (read by the purger) */
  hak_trim_t   trims[HAK_TRIMS];       /* slabs owed a trim, oldest first, */
  uint32_t     trims_due;              /* how many */
  uint8_t      flushing[HAK_CLASSES];  /* flushes of the class since its last refill (saturating) */
  uint8_t      swings[HAK_CLASSES];    /* refills after a flush since the cache last grew (cache.c) */
  uint16_t     refill_batch[HAK_CLASSES];   /* blocks the next refill takes, 0: a page's worth (cache.c) */
  uint16_t     cache_first[HAK_CLASSES];    /* a class's cache's first capacity, and the most it grows to, */
  uint16_t     cache_room[HAK_CLASSES];     /* as the heap was made (the options may change since) */
  hak_cache_look_t looks[HAK_CLASSES]; /* each class's cache at the last sweeps (idle.c) */
  /* A drain (drain.c), under the token: the classes whose caches it took,
   * and the top it saw in each, from which the owner keeps its blocks when
   * it gives those caches their items back (hak_heap_enter). */
  uint64_t     drained[(HAK_CLASSES + 63) / 64];
  void       **drained_at[HAK_CLASSES];
  uint64_t     held_seen;              /* purger only: what it last saw the caches and batches hold (idle.c), */
  uint64_t     seen_since;             /* ms since when it saw them so, with the same visits */
#if HAK_SECURE
  uint64_t     random;                 /* state of the heap's random numbers (hak_random) */
#endif
  /* What other threads read or write, apart from the owner's fields so
   * that they do not share lines: the list link and the state (read by
   * every remote-free batch), and the inbox of blocks of this heap freed by
   * other threads, pushed a batch at a time. */
  _Alignas(64) struct hak_heap_s *next_heap;   /* global list of heaps, never unlinked */
  _Atomic int  state;
  _Atomic uint64_t left_at;            /* ms when its last thread left it (heap.c) */
  _Alignas(64) _Atomic(uintptr_t) inbox[HAK_CLASSES];   /* hak_inbox_first, hak_inbox_blocks */
} hak_heap_t;

/* Call stacks (stack.c): the frames a profile keeps, and those a walk
 * takes (hakmem's own frames first, dropped). */
#define HAK_STACK_MAX  64
#define HAK_STACK_WALK (HAK_STACK_MAX + 8)

/* A thread's last stack taken (stack.c): the return addresses walked,
 * innermost first, hakmem's own first ones, which the stack kept skips,
 * and of the last fast walk, the sizes of their frames. A walk that meets
 * the same return address at the same depth takes the size from here
 * rather than from the shared table, and tells its caller when the whole
 * stack was the same as the last one. */
typedef struct hak_stack_memo_s {
  uint32_t  n;                      /* frames of the last fast walk, 0: none */
  uint32_t  first, depth;           /* the stack kept: ip[first .. first + depth) */
  uint16_t  code[HAK_STACK_WALK];
  void     *ip[HAK_STACK_WALK];
} hak_stack_memo_t;

/* A heap's state while heap profiling is on (prof.c), owner only, in the
 * heap's mapping just after it: the state of the random numbers that draw
 * the bytes to the next sample, the heap's last stack taken and the
 * profile's records of it found so far, by size, which the next samples
 * from the same stack count in without a look-up. */
#define HAK_PROF_FOUND_BITS 6
typedef struct hak_prof_found_s {
  uint64_t gen, size;                  /* found for the stack of generation gen, this size */
  struct prof_stack_s *stack;
} hak_prof_found_t;

typedef struct hak_prof_state_s {
  uint64_t     random;
  uint64_t     frames_hash;            /* of the last stack's frames */
  uint64_t     stack_gen;              /* counts the changes of stack */
  hak_prof_found_t found[1 << HAK_PROF_FOUND_BITS];   /* direct-mapped by size */
  hak_stack_memo_t memo;
} hak_prof_state_t;

/* Header of a large block. */
typedef struct hak_large_s {
  uintptr_t map_base;
  size_t    map_size;
  void     *user;
  uint64_t  freed_at;      /* ms, while in the BigCache */
  uint64_t  check;         /* user ^ secret: a sanity mark */
  struct prof_stack_s *sample;   /* the heap profile's record that counts this block, */
  uint64_t  sample_bytes;        /* with these bytes; NULL: not sampled (prof.c) */
  _Atomic size_t tail_end;       /* a block in a chunk: its pages up to here from the header
                                    are resident while the BigCache keeps its tail; else 0 */
} hak_large_t;

_Static_assert(sizeof(hak_large_t) == 64, "large header is 64 bytes");

#endif
