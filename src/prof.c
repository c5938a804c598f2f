/* Heap profiling by sampling (HAKMEM_PROF_SAMPLE, docs/profiling.md).
 *
 * Allocated bytes are sampled as a Poisson process with a mean of
 * PROF_SAMPLE bytes between samples: an allocation of s bytes is sampled
 * with probability 1 - exp(-s / mean), which is what pprof's "heap_v2"
 * profiles say and what it scales by. Each heap counts down the bytes its
 * thread allocates to the next sample, drawn from the exponential
 * distribution; the allocation that takes the countdown below 0 is
 * sampled and the next countdown drawn (the process has no memory, so the
 * one drawn from there is as good). malloc's fast path counts in its
 * counted build only, which start-up switches malloc to while profiling
 * (HAK_TWO_BUILDS, counted.c): a process that does not profile runs the
 * uncounted build, whose code is what it was before profiling existed.
 * malloc's slow path and the large paths count while profiling is on.
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
  double ln_m = 2 * t * (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 * (1.0 / 9)))));   /* no division but the one above */
  return -((double)e * 0.6931471805599453 + ln_m);
}

/* Bytes until the next sample: exponential with the mean PROF_SAMPLE (none
 * while it is 0). */
static double draw_bytes(hak_heap_t *h) {
  long mean = hak_opt(hak_option_prof_sample);
  return mean > 0 ? (double)mean * neg_log(hak_random(&h->prof->random)) : 1e300;
}

/* Bytes the heap's thread may allocate before its next sample, drawn. */
static int64_t draw_left(hak_heap_t *h) {
  double b = draw_bytes(h);
  return b >= 0x1p62 ? INT64_MAX : (int64_t)b;
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

/* The record of a sampled allocation under the line key (its class's size,
 * or for large blocks their size rounded up to 8 steps per doubling: a
 * line per distinct large size would grow without bound; pprof scales a
 * line by the mean size of its blocks, within 12.5% of each one's) from
 * the stack frames, which the heap's state st took last; NULL without
 * memory. */
static prof_stack_t *record_of(hak_prof_state_t *st, uint64_t key, void *const *frames, uint32_t depth) {
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

/* Record block p of a size class, asked for with `bytes` bytes, in the
 * blocks table (a large block keeps its record in its header:
 * hak_prof_large). */
static void record(hak_prof_state_t *st, const void *p, uint64_t key, uint64_t bytes, void *const *frames, uint32_t depth) {
  prof_stack_t *s = record_of(st, key, frames, depth);
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
  if (p) record(h->prof, p, hak_class_size[cls], size, frames, depth);
  prof_leave();
  return p;
}

/* An allocation took the heap's countdown below 0: the next one is drawn;
 * true if this one is to be sampled, false if the profiler makes it (a
 * stack being taken) or sampling is stopped (PROF_SAMPLE set to 0 since). */
static bool next_sample(hak_heap_t *h) {
  h->prof_left = draw_left(h);
  return !in_prof && hak_opt(hak_option_prof_sample);
}

/* A small allocation that took the countdown below 0. */
static void *sampled(hak_heap_t *h, unsigned cls, size_t size) {
  void *p = next_sample(h) ? sample_small(h, cls, size) : NULL;
  return p ? p : hak_heap_pop(h, cls, size);
}

/* From malloc's counted build, whose cache had a block: the thread's heap
 * is its own. */
void *hak_prof_sampled(size_t size) { return sampled(hak_tls_heap, hak_class_of(size), size); }

/* A small allocation that missed the fast path, while profiling: counted
 * here (in either build of malloc). */
void *hak_prof_malloc_class(unsigned cls, size_t size) {
  hak_heap_t *h = hak_heap_get();
  if (HAK_UNLIKELY(!h)) return hak_malloc_class(cls, size);   /* an exiting thread's: borrowed heap */
  if (hak_prof_count(h, size)) return sampled(h, cls, size);
  return hak_heap_pop(h, cls, size);
}

void hak_prof_large(hak_large_t *hdr, size_t size) {
  hak_heap_t *h = hak_tls_heap;
  if (h == &hak_heap_empty || !hak_prof_count(h, size) || !next_sample(h)) return;
  void *const *frames;
  in_prof = true;
  uint32_t depth = capture(h->prof, &frames);
  prof_enter();
  if ((hdr->sample = record_of(h->prof, hak_round_eighths(size), frames, depth))) count_in(hdr->sample, size);
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
  h->prof->random = hak_os_random();
  h->prof_left = draw_left(h);
  /* the rest starts as the heap's new mapping's zeros: no stack taken
   * (memo), no record found */
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
  if (hak_prof_on && !hak_counted_switch()) {
    hak_out_t o;
    hak_out_init(&o, NULL, NULL);
    hak_out_str(&o, "hakmem: warning: heap profiling is off: malloc's counted build cannot be switched on here\n");
    hak_prof_on = false;
  }
  int sig = (int)hak_opt(hak_option_prof_signal);
  if (hak_prof_on && sig) hak_os_on_signal(sig, on_signal);
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
