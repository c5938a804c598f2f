/* Heap profiling by sampling (HAKMEM_PROF_SAMPLE, docs/profiling.md).
 *
 * Allocated bytes are sampled as a Poisson process with a mean of
 * PROF_SAMPLE bytes between samples: an allocation of s bytes is sampled
 * with probability 1 - exp(-s / mean), which is what pprof's "heap_v2"
 * profiles say and what it scales by. Each size class runs its own
 * countdown (the union of independent Poisson processes of one rate is one
 * of that rate), counted in whole allocations of the class's size, so that
 * malloc's fast path needs no counter: while profiling is on, a heap's size
 * tables point malloc at its counted caches, which hold only as many blocks
 * as the class may hand out before its next sample; when one runs dry,
 * malloc's slow path counts, samples or refills it from the class's cache.
 * Large allocations count their bytes on their own (slow) path.
 *
 * A sampled block comes from the profiler's own heap, which no thread owns:
 * its free takes the remote-free path, which hands it back here, and the
 * profile forgets it. Sampled large blocks carry their record in their header. The
 * stack of each sampled allocation (stack.c; allocations made while it is
 * taken are served unsampled) is kept once per distinct stack and size with its
 * live and total counts and bytes; hak_prof_dump, the signal PROF_SIGNAL and
 * the exit write them in the heap-profile format that pprof (Debian's
 * google-pprof) and jeprof read. Off (PROF_SAMPLE=0 at start-up), all of
 * this costs one test of hak_prof_on on malloc's slow path and the large
 * paths. */
#include <errno.h>
#include <signal.h>

#include "internal.h"

#define STACK_HEADS  16384            /* hash chains of distinct stacks */
#define CHUNK_BYTES  ((size_t)256 << 10)

bool hak_prof_on;
hak_heap_t *hak_prof_heap;

/* The samples of one size from one stack: pprof scales each line of the
 * profile by its mean size, which is then exact (size_key). */
typedef struct prof_stack_s {
  struct prof_stack_s *chain, *next;   /* hash chain; list of all, oldest last */
  uint64_t hash, size;
  uint64_t live_count, live_bytes, total_count, total_bytes;
  uint32_t depth;
  void    *frames[];
} prof_stack_t;

/* A sampled block: its address, its stack and the bytes it counted. */
typedef struct prof_block_s {
  uintptr_t addr;
  prof_stack_t *stack;
  uint64_t bytes;
} prof_block_t;

/* Everything below is under `lock`. */
static _Atomic uint32_t lock;                    /* 0 free, 1 taken, 2 taken with waiters */
static prof_stack_t **heads;
static prof_stack_t *stacks;
static char *chunk, *chunk_end;                  /* where new stacks are carved */
static prof_block_t *blocks;
static size_t blocks_cap, blocks_used;           /* a power of two; open addressing */
static uint64_t dumps;                           /* sequence number of the next file */
static _Atomic int dump_pending;                 /* the signal came while the lock was taken */

static __thread bool in_prof;                    /* allocations now are the profiler's own */
static bool ready;                               /* the constructor has run: stacks may be taken */

/* ---- the lock (a futex mutex: samples are rare, but two threads may
 * meet). prof_enter takes it, and makes the thread's allocations the
 * profiler's own (unsampled) until prof_leave lets it go. */

static void prof_enter(void) {
  in_prof = true;
  uint32_t c = 0;
  if (atomic_compare_exchange_strong(&lock, &c, 1)) return;
  if (c != 2) c = atomic_exchange(&lock, 2);
  while (c != 0) {
    hak_os_wait(&lock, 2, 0);
    c = atomic_exchange(&lock, 2);
  }
}

static void prof_leave(void) {
  if (atomic_exchange(&lock, 0) == 2) hak_os_wake(&lock);
  in_prof = false;
  if (HAK_UNLIKELY(atomic_load_explicit(&dump_pending, memory_order_relaxed))) {
    atomic_store(&dump_pending, 0);
    hak_prof_dump(NULL);
  }
}

/* ---- sampling */

/* -ln(u) for u uniform in (0, 1] from the top 53 bits of r: the exponent
 * gives log2's integer part, an atanh series the mantissa's logarithm (to
 * 1e-6; no libm). */
static double neg_log(uint64_t r) {
  union {
    double d;
    uint64_t b;
  } x = {.d = (double)(int64_t)((r >> 11) + 1) * 0x1p-53};
  int e = (int)((x.b >> 52) & 0x7ff) - 1023;
  x.b = (x.b & 0xfffffffffffffull) | 0x3ff0000000000000ull;
  double t = (x.d - 1) / (x.d + 1), t2 = t * t;
  double ln_m = 2 * t * (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 / 9))));
  return -((double)e * 0.6931471805599453 + ln_m);
}

/* Bytes until the next sample: exponential with the mean PROF_SAMPLE (none
 * while it is 0). */
static double draw_bytes(hak_heap_t *h) {
  long mean = hak_opt(hak_option_prof_sample);
  return mean > 0 ? (double)mean * neg_log(hak_random(&h->prof->random)) : 1e300;
}

/* Allocations of class cls until its next sample, that one included. */
static uint32_t draw_left(hak_heap_t *h, unsigned cls) {
  double k = draw_bytes(h) / hak_class_size[cls];
  return k >= (double)UINT32_MAX - 1 ? UINT32_MAX : (uint32_t)k + 1;
}

static uint64_t mix(uint64_t x, uint64_t y) {
  x = (x ^ y) * 0x9e3779b97f4a7c15ull;
  return x ^ x >> 29;
}

/* The calling thread's stack, into the heap's memo: *frames, at least one
 * (an unknown one while stacks cannot be taken yet); their number. A stack
 * other than the heap's last one gets its hash and a new generation (the
 * records found for the last one are not its). */
static uint32_t capture(hak_prof_state_t *st, void *const **frames) {
  static void *const unknown[1] = {NULL};
  bool same = false;
  if (ready) same = hak_stack_capture(&st->memo);
  else st->memo.n = 0;   /* the next stack taken is not the memo's last */
  uint32_t n = st->memo.depth;
  *frames = st->memo.ip + st->memo.first;
  if (!ready || !n) {
    *frames = unknown;
    n = 1;
    same = false;
  }
  if (!same) {
    uint64_t x = n;
    for (uint32_t i = 0; i < n; i++) x = mix(x, (uintptr_t)(*frames)[i]);
    st->frames_hash = x;
    st->stack_gen++;
  }
  return n;
}

/* The record of a stack and size, new if it is the first of its kind;
 * NULL without memory. */
static prof_stack_t *stack_find(void *const *frames, uint32_t depth, uint64_t frames_hash, uint64_t size) {
  if (!heads && !(heads = hak_os_map(STACK_HEADS * sizeof *heads))) return NULL;
  uint64_t hash = mix(frames_hash, size);
  prof_stack_t **head = &heads[hash % STACK_HEADS];
  for (prof_stack_t *s = *head; s; s = s->chain)
    if (s->hash == hash && s->size == size && s->depth == depth && !memcmp(s->frames, frames, depth * sizeof(void *)))
      return s;
  size_t need = (sizeof(prof_stack_t) + depth * sizeof(void *) + 15) & ~(size_t)15;
  if ((size_t)(chunk_end - chunk) < need) {
    if (!(chunk = hak_os_map(CHUNK_BYTES))) return NULL;
    chunk_end = chunk + CHUNK_BYTES;
  }
  prof_stack_t *s = (prof_stack_t *)chunk;
  chunk += need;
  s->hash = hash;
  s->size = size;
  s->depth = depth;
  memcpy(s->frames, frames, depth * sizeof(void *));
  s->chain = *head;
  *head = s;
  s->next = stacks;
  stacks = s;
  return s;
}

static size_t block_slot(uintptr_t addr) { return (size_t)((addr >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (blocks_cap - 1); }

/* Room for one more sampled block: the table doubles past half full. */
static bool blocks_room(void) {
  if (blocks_used + 1 <= blocks_cap / 2) return true;
  size_t cap = blocks_cap ? 2 * blocks_cap : 1024;
  prof_block_t *old = blocks, *table = hak_os_map(cap * sizeof *table);
  if (!table) return false;
  size_t old_cap = blocks_cap;
  blocks = table;
  blocks_cap = cap;
  for (size_t i = 0; i < old_cap; i++) {
    if (!old[i].addr) continue;
    size_t j = block_slot(old[i].addr);
    while (blocks[j].addr) j = (j + 1) & (cap - 1);
    blocks[j] = old[i];
  }
  if (old) hak_os_unmap(old, old_cap * sizeof *old);
  return true;
}

/* The size a line of the profile stands for: a class's size, or for large
 * blocks their size rounded up to 8 steps per doubling (a line per
 * distinct large size would grow without bound; pprof scales a line by its
 * mean size, within 12.5% of each block's, where the chance to be sampled
 * is near 1 anyway). */
static uint64_t size_key(uint64_t bytes) { return bytes <= HAK_MID_MAX ? bytes : hak_round_eighths(bytes); }

/* The record of a sampled allocation of `bytes` bytes from the stack
 * frames, which the heap's state st took last; NULL without memory. */
static prof_stack_t *record_of(hak_prof_state_t *st, uint64_t bytes, void *const *frames, uint32_t depth) {
  uint64_t key = size_key(bytes);
  hak_prof_found_t *f = &st->found[(key * 0x9e3779b97f4a7c15ull) >> (64 - HAK_PROF_FOUND_BITS)];
  prof_stack_t *s = f->stack;
  if (f->gen != st->stack_gen || f->size != key || !s) {
    s = stack_find(frames, depth, st->frames_hash, key);
    *f = (hak_prof_found_t){st->stack_gen, key, s};
  }
  return s;
}

static void count_in(prof_stack_t *s, uint64_t bytes) {
  s->live_count++;
  s->live_bytes += bytes;
  s->total_count++;
  s->total_bytes += bytes;
}

static void count_out(prof_stack_t *s, uint64_t bytes) {
  s->live_count--;
  s->live_bytes -= bytes;
}

/* Record block p of a size class, of `bytes` bytes, in the blocks table
 * (a large block keeps its record in its header: hak_prof_large). */
static void record(hak_prof_state_t *st, const void *p, uint64_t bytes, void *const *frames, uint32_t depth) {
  prof_stack_t *s = record_of(st, bytes, frames, depth);
  if (!s || !blocks_room()) return;
  size_t j = block_slot((uintptr_t)p);
  while (blocks[j].addr) j = (j + 1) & (blocks_cap - 1);
  blocks[j] = (prof_block_t){(uintptr_t)p, s, bytes};
  blocks_used++;
  count_in(s, bytes);
}

/* Forget block p (freed); backward-shift deletion keeps every probe
 * sequence unbroken. */
static void forget(const void *p) {
  if (!blocks_cap) return;
  size_t j = block_slot((uintptr_t)p);
  while (blocks[j].addr != (uintptr_t)p) {
    if (!blocks[j].addr) return;
    j = (j + 1) & (blocks_cap - 1);
  }
  count_out(blocks[j].stack, blocks[j].bytes);
  blocks_used--;
  for (size_t k = (j + 1) & (blocks_cap - 1); blocks[k].addr; k = (k + 1) & (blocks_cap - 1)) {
    size_t home = block_slot(blocks[k].addr);
    if (((k - home) & (blocks_cap - 1)) >= ((k - j) & (blocks_cap - 1))) {
      blocks[j] = blocks[k];
      j = k;
    }
  }
  blocks[j].addr = 0;
}

/* A sampled block of class cls, from the profiler's heap; NULL if none. */
static void *sample_small(hak_heap_t *h, unsigned cls, size_t size) {
  void *const *frames;
  in_prof = true;
  uint32_t depth = capture(h->prof, &frames);
  prof_enter();
  void *p = NULL;
  if (hak_prof_heap || (hak_prof_heap = hak_heap_new(true))) p = hak_heap_pop(hak_prof_heap, cls, size);
  if (p) record(h->prof, p, hak_class_size[cls], frames, depth);
  prof_leave();
  return p;
}

/* The counted cache of a class, empty, takes the array of the cache's room
 * that the cache does not hold, so that the next visit can swap the two
 * stacks: the cache grew (cache.c) or went back to its first items. */
static void counted_fit(hak_heap_t *h, unsigned cls) {
  hak_ucache_t *c = &h->cache[cls], *k = &h->prof->counted[cls];
  uint32_t cap = hak_cache_cap(c);
  void **a = hak_cache_items_free(h, cls, cap != h->cache_first[cls], c->items);
  k->top = k->items = a;
  k->end = a + cap;
}

/* The general case of a counted cache run dry: the countdown drawn or run
 * out, the class's cache empty, of another room than the counted cache
 * (which takes an array of the cache's room, for the next visit to swap)
 * or holding more than the class may hand out before its next sample; or
 * an aligned allocation while the counted cache holds blocks, which are
 * counted already: it takes one. After a sample too, the counted cache
 * gets what the class may allocate before the next one. */
static HAK_NOINLINE void *malloc_counted(hak_heap_t *h, unsigned cls, size_t size) {
  hak_prof_state_t *st = h->prof;
  hak_ucache_t *from = &h->cache[cls], *to = &st->counted[cls];
  if (to->top != to->items) return hak_cache_pop(h, to, cls, size);
  if (hak_cache_cap(to) != hak_cache_cap(from)) counted_fit(h, cls);
  if (!st->left[cls]) st->left[cls] = draw_left(h, cls);
  void *p = NULL;
  if (--st->left[cls] == 0) {
    st->left[cls] = draw_left(h, cls);
    p = sample_small(h, cls, size);
  }
  if (!p && !(p = hak_heap_pop(h, cls, size))) return NULL;
  /* hand the counted cache what the class may allocate before its next
   * sample, up to what the class's cache holds */
  uint32_t n = st->left[cls] - 1, have = hak_cache_count(from);
  uint32_t room = (uint32_t)(to->end - to->top);
  n = n < have ? n : have;
  n = n < room ? n : room;
  from->top -= n;
  memcpy(to->top, from->top, n * sizeof(void *));
  to->top += n;
  st->left[cls] -= n;
  return p;
}

/* The rest of a counted cache run dry: a thread with no heap yet, or an
 * allocation made while a sample is taken (served unsampled). */
static HAK_NOINLINE void *malloc_counted_other(unsigned cls, size_t size) {
  hak_heap_t *h = hak_tls_heap;
  if (h == &hak_heap_empty) return (h = hak_heap_get()) ? malloc_counted(h, cls, size) : hak_malloc_class(cls, size);
  return hak_heap_pop(h, cls, size);
}

/* No call but the tail calls: the common case below needs no stack frame. */
void *hak_prof_malloc_class(unsigned cls, size_t size) {
  hak_heap_t *h = hak_tls_heap;
  if (HAK_UNLIKELY(h == &hak_heap_empty || in_prof)) return malloc_counted_other(cls, size);
  hak_prof_state_t *st = (hak_prof_state_t *)(h + 1);   /* h->prof, without the load */
  /* the common case: the class may allocate more before its next sample
   * than its cache holds; this allocation and the counted cache take all
   * of it, by swapping the two stacks (when they have the same room; the
   * counted cache takes the cache's after it grew: counted_fit), which
   * copies nothing */
  hak_ucache_t *from = &h->cache[cls], *to = &st->counted[cls];
  void **top = from->top, **items = from->items;
  uint32_t left = st->left[cls], have = (uint32_t)(top - items);
  if (HAK_UNLIKELY(left <= have || !have)) return malloc_counted(h, cls, size);
  void **counted = to->items;
  HAK_PIN(counted);   /* else GCC loads top and items as one vector: 3 instructions more a swap */
  void **end = to->end;
  if (HAK_UNLIKELY(to->top != counted || end - counted != from->end - items)) return malloc_counted(h, cls, size);
  from->top = from->items = counted;
  to->items = items;
  to->end = from->end;
  from->end = end;
  st->left[cls] = left - have;
  to->top = top;
  return hak_cache_pop(h, to, cls, size);
}

void hak_prof_large(hak_large_t *hdr, size_t size) {
  hak_heap_t *h = hak_tls_heap;
  if (h == &hak_heap_empty || in_prof) return;
  if (!h->prof->large_left) h->prof->large_left = (int64_t)draw_bytes(h) + 1;
  if ((h->prof->large_left -= (int64_t)size) > 0) return;
  double next = draw_bytes(h);
  h->prof->large_left = next > (double)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)next + 1;
  void *const *frames;
  in_prof = true;
  uint32_t depth = capture(h->prof, &frames);
  prof_enter();
  if ((hdr->sample = record_of(h->prof, size, frames, depth))) count_in(hdr->sample, size);
  hdr->sample_bytes = size;
  prof_leave();
}

/* A freed sampled block goes to the profiler heap's cache while it has
 * room, else back to its slab. That heap's caches hold HAK_FEW_CACHED
 * blocks a class: no thread runs its slow paths, so a full-sized cache
 * would keep its blocks, and their slabs, for good, and one refill of it
 * would carve a batch for one sample (hak_prof_trim returns the rest). */
void hak_prof_free(void *p) {
  prof_enter();
  forget(p);
  hak_heap_t *h = hak_prof_heap;
  hak_ucache_t *c = &h->cache[hak_unit_of(hak_ss_of(p), (uintptr_t)p)->cls];
#if HAK_STAT >= 2
  c->frees++;   /* as free's fast path counts */
#endif
  if (c->top < c->end) *c->top++ = p;
  else hak_slab_put_local(h, p);
  prof_leave();
}

int hak_prof_trim(void) {
  if (!hak_prof_on) return 0;
  prof_enter();
  int released = hak_prof_heap ? hak_heap_release_all(hak_prof_heap, true) : 0;
  prof_leave();
  return released;
}

void hak_prof_forget(hak_large_t *hdr) {
  prof_enter();
  count_out(hdr->sample, hdr->sample_bytes);
  prof_leave();
}

/* ---- heaps */

void hak_prof_heap_init(hak_heap_t *h) {
  hak_prof_state_t *st = h->prof;
  void **items = hak_cache_items_at(h, 0, HAK_ITEMS_COUNTED);
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
#if HAK_STAT >= 2
    st->counted[c].cls = c;
#endif
    st->counted[c].top = st->counted[c].items = items;
    st->counted[c].end = items += h->cache_first[c];
  }
  const size_t from = offsetof(hak_heap_t, cache), to = (size_t)((char *)st->counted - (char *)h);
  for (unsigned i = 0; i <= HAK_TINY_MAX / 16; i++) h->cache_small[i] = &st->counted[hak_class_of_small[i]];
  for (size_t i = 0; i < sizeof h->cache_of_mid / sizeof *h->cache_of_mid; i++)
    h->cache_of_mid[i] = (uint16_t)(h->cache_of_mid[i] - from + to);
  st->random = hak_os_random();
  /* the rest starts as the heap's new mapping's zeros: countdowns not yet
   * drawn, no stack taken (memo), no record found */
}

/* A counted cache's blocks go back to their slabs, and the allocations they
 * were counted for are given back to the class's countdown. */
void hak_prof_return(hak_heap_t *h, unsigned cls) {
  hak_ucache_t *k = &h->prof->counted[cls];
  uint32_t n = hak_cache_count(k);
  for (uint32_t i = 0; i < n; i++) hak_slab_put_local(h, k->items[i]);
  k->top = k->items;
  h->prof->left[cls] += n;
}

/* ---- the profile */

/* "<count>: <bytes> [<count>: <bytes>] @" as pprof's heap profiles have it. */
static void put_counts(hak_out_t *o, uint64_t live_n, uint64_t live_b, uint64_t total_n, uint64_t total_b) {
  hak_out_u64w(o, live_n, 6);
  hak_out_str(o, ": ");
  hak_out_u64w(o, live_b, 8);
  hak_out_str(o, " [");
  hak_out_u64w(o, total_n, 6);
  hak_out_str(o, ": ");
  hak_out_u64w(o, total_b, 8);
  hak_out_str(o, "] @");
}

/* The profile of the live sampled blocks (and the totals sampled since the
 * start) into fd; under the lock. */
static void write_profile(int fd) {
  hak_out_t o;
  hak_out_init(&o, hak_write_fd, &fd);
  uint64_t t[4] = {0, 0, 0, 0};
  for (prof_stack_t *s = stacks; s; s = s->next) {
    t[0] += s->live_count;
    t[1] += s->live_bytes;
    t[2] += s->total_count;
    t[3] += s->total_bytes;
  }
  hak_out_str(&o, "heap profile: ");
  put_counts(&o, t[0], t[1], t[2], t[3]);
  hak_out_str(&o, " heap_v2/");
  hak_out_u64(&o, (uint64_t)hak_opt(hak_option_prof_sample));
  hak_out_str(&o, "\n");
  for (prof_stack_t *s = stacks; s; s = s->next) {
    if (!s->live_count && !s->total_count) continue;
    put_counts(&o, s->live_count, s->live_bytes, s->total_count, s->total_bytes);
    for (uint32_t i = 0; i < s->depth; i++) {
      hak_out_str(&o, " ");
      hak_out_hex(&o, (uintptr_t)s->frames[i]);
    }
    hak_out_str(&o, "\n");
  }
  hak_out_str(&o, "\nMAPPED_LIBRARIES:\n");
  hak_out_flush(&o);
}

HAK_EXPORT int hak_prof_dump(const char *path) {
  hak_init();
  if (!hak_prof_on) return ENOENT;
  prof_enter();
  char name[4096];
  if (!path) {
    const char *pattern = hak_option_get_string(hak_option_prof_file);
    if (!hak_path_expand(pattern ? pattern : "hakmem.%p.%n.heap", dumps, name, sizeof name)) {
      prof_leave();
      return ENAMETOOLONG;
    }
    path = name;
    dumps++;
  }
  int fd = hak_os_open_write(path), err = fd < 0 ? EIO : 0;
  if (fd >= 0) {
    write_profile(fd);
    hak_os_copy_file("/proc/self/maps", fd);
    hak_os_close(fd);
  }
  prof_leave();
  return err;
}

/* PROF_SIGNAL: write a profile now, or when the lock is let go if the
 * signal came while this thread or another held it. */
static void on_signal(int sig) {
  if (in_prof || atomic_load(&lock)) {
    atomic_store(&dump_pending, 1);
    return;
  }
  hak_prof_dump(NULL);
}

/* ---- process */

void hak_prof_init(void) {
  hak_prof_on = hak_opt(hak_option_prof_sample) > 0;
  int sig = (int)hak_opt(hak_option_prof_signal);
  if (hak_prof_on && sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, NULL);
  }
}

/* From the constructor: loading the unwinder and its first call allocate;
 * done here, before any sample needs it. Without it (libgcc_s missing, a
 * static program) the samples are counted under one unknown stack. */
void hak_prof_ready(void) {
  if (!hak_prof_on) return;
  in_prof = true;
  ready = hak_stack_init();
  in_prof = false;
  if (!ready) {
    hak_out_t o;
    hak_out_init(&o, NULL, NULL);
    hak_out_str(&o, "hakmem: warning: heap profiling cannot load libgcc_s.so.1's unwinder; samples have no stacks\n");
  }
}

void hak_prof_at_exit(void) {
  if (hak_prof_on) hak_prof_dump(NULL);
}

/* fork: the child must not inherit the lock taken by a thread it lacks. */
void hak_prof_fork_prepare(void) {
  if (!hak_prof_on) return;
  prof_enter();
}

void hak_prof_fork_parent(void) {
  if (!hak_prof_on) return;
  prof_leave();
}

void hak_prof_fork_child(void) {
  if (!hak_prof_on) return;
  atomic_store(&lock, 0);
  in_prof = false;
}
