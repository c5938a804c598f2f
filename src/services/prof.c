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

bool hak_prof_on;
hak_heap_t *hak_prof_heap;

/* Everything below is under `lock`. */
static _Atomic uint32_t lock;                    /* 0 free, 1 taken, 2 taken with waiters */
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
    for (uint32_t i = 0; i < n; i++) x = hak_prof_mix(x, (uintptr_t)(*frames)[i]);
    st->frames_hash = x;
    st->stack_gen++;
  }
  return n;
}

/* A sampled block of class cls, from the profiler's heap; NULL if none. */
static void *sample_small(hak_heap_t *h, unsigned cls, size_t size) {
  void *const *frames;
  in_prof = true;
  uint32_t depth = capture(h->prof, &frames);
  prof_enter();
  void *p = NULL;
  if (hak_prof_heap || (hak_prof_heap = hak_heap_new(true))) p = hak_heap_pop(hak_prof_heap, cls, size);
  if (p) hak_prof_record(h->prof, p, hak_class_size[cls], size, frames, depth);
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
  if ((hdr->sample = hak_prof_record_of(h->prof, hak_round_eighths(size), frames, depth))) hak_prof_count_in(hdr->sample, size);
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
  hak_prof_forget_block(p);
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
  hak_prof_count_out(hdr->sample, hdr->sample_bytes);
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

HAK_EXPORT int hak_prof_dump(const char *path) {
  hak_init();
  if (!hak_prof_on) return ENOENT;
  prof_enter();
  char name[4096];
  if (!path) {
    const char *pattern = hak_option_string(hak_option_prof_file);
    if (!hak_path_expand(pattern ? pattern : "hakmem.%p.%n.heap", dumps, name, sizeof name)) {
      prof_leave();
      return ENAMETOOLONG;
    }
    path = name;
    dumps++;
  }
  int fd = hak_os_open_write(path), err = fd < 0 ? EIO : 0;
  if (fd >= 0) {
    hak_prof_write(fd);
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
