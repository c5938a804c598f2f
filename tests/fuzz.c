/* A seeded, multi-threaded fuzzer of the malloc family with shadow checks.
 *
 * usage: fuzz            (FUZZ_OPS, FUZZ_SEED, FUZZ_THREADS in the environment)
 *
 * It calls the standard names, so it checks whatever allocator it is linked
 * with or preloaded under: hakmem (build/test/fuzz), or glibc through the
 * planted-bug shim (build/test/fuzz_glibc with fuzz_shim.so; fuzz_plant.sh
 * shows that each planted bug makes it fail).
 *
 * FUZZ_OPS operations (default 1000000) are split over rounds of 1, 2 and 4
 * threads (FUZZ_THREADS=n: one round of n). Each thread runs its own
 * sequence from splitmix64(seed, round, thread), so a seed replays the same
 * operations (their interleaving across threads aside). A thread keeps a
 * table of live blocks with a shadow record each (size, fill seed, bytes
 * filled, alignment asked) and does, weighted: malloc, calloc (zeroed,
 * overflow), realloc (grow, shrink, same, NULL, to 0), reallocarray
 * (overflow), posix_memalign / aligned_alloc / memalign / valloc / pvalloc
 * with valid and invalid alignments, malloc_usable_size (then filled to
 * its last byte), free / free_sized / free_aligned_sized, malloc(0),
 * free(NULL), malloc_trim, and hand-offs of blocks through a shared mailbox
 * to other threads (also to threads of later rounds). Sizes run from 1 B to
 * 8 MiB, skewed small. Every block's whole contents are checked against its
 * shadow at free, realloc and hand-off; every pointer's alignment is
 * checked; a set of live block addresses catches a block handed out twice.
 *
 * A failure prints one line
 *   fuzz: FAIL seed S round R thread T op K: <what> (ptr, size, offset)
 * and aborts; FUZZ_SEED=S replays it. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include "check.h"

/* glibc before 2.39 has neither: then they are plain free */
void free_sized(void *p, size_t size) __attribute__((weak));
void free_aligned_sized(void *p, size_t alignment, size_t size) __attribute__((weak));

#define SLOTS 1024
#define MAILBOX 256
#define LIVE_STRIPES 64
#define LIVE_BUCKETS 4096   /* per stripe, open addressing */

struct shadow {
  unsigned char *p;
  size_t size;     /* requested */
  size_t filled;   /* bytes holding the pattern: size, or the usable size */
  size_t align;    /* asked for; 0: the default */
  uint64_t seed;   /* of the pattern */
  int kind;        /* how it may be freed: KIND_* */
};

enum { KIND_PLAIN, KIND_ALIGNED_ALLOC, KIND_OTHER_ALIGNED };

struct thread_ctx {
  uint64_t rng;
  int round, index;
  long op, ops;
  struct shadow slot[SLOTS];
};

static uint64_t seed;
static atomic_long verified;
static volatile size_t huge = SIZE_MAX;   /* sizes that overflow, hidden from the compiler */

/* ---- failure */

static __thread struct thread_ctx *current;

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fuzz: FAIL seed %llu round %d thread %d op %ld: %s\n", (unsigned long long)seed,
          current ? current->round : -1, current ? current->index : -1, current ? current->op : -1L, msg);
  fflush(NULL);
  abort();
}

/* ---- the set of live block addresses: a block handed out twice */

struct stripe {
  pthread_mutex_t lock;
  uintptr_t key[LIVE_BUCKETS];
};
static struct stripe live[LIVE_STRIPES];

static size_t home_of(uintptr_t a) { return (size_t)(splitmix64(a) >> 8) % LIVE_BUCKETS; }
static struct stripe *stripe_of(uintptr_t a) { return &live[splitmix64(a) % LIVE_STRIPES]; }

static void live_add(void *p) {
  uintptr_t a = (uintptr_t)p;
  struct stripe *s = stripe_of(a);
  pthread_mutex_lock(&s->lock);
  size_t i = home_of(a);
  for (size_t n = 0; s->key[i]; n++, i = (i + 1) % LIVE_BUCKETS) {
    if (s->key[i] == a) fail("block %p handed out twice (it is live)", p);
    if (n == LIVE_BUCKETS - 1) fail("live-block set full");
  }
  s->key[i] = a;
  pthread_mutex_unlock(&s->lock);
}

/* Linear probing with backward-shift deletion: no tombstones pile up. */
static void live_remove(uintptr_t a) {
  struct stripe *s = stripe_of(a);
  pthread_mutex_lock(&s->lock);
  size_t i = home_of(a);
  while (s->key[i] != a) {
    if (!s->key[i]) fail("freeing %p, which the live-block set does not hold", (void *)a);
    i = (i + 1) % LIVE_BUCKETS;
  }
  for (size_t j = (i + 1) % LIVE_BUCKETS; s->key[j]; j = (j + 1) % LIVE_BUCKETS) {
    size_t home = home_of(s->key[j]);
    bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      s->key[i] = s->key[j];
      i = j;
    }
  }
  s->key[i] = 0;
  pthread_mutex_unlock(&s->lock);
}

/* ---- blocks */

static uint64_t rnd(struct thread_ctx *t) { return xorshift64(&t->rng); }

/* Sizes from 1 B to 8 MiB, skewed small: 90% up to 1 KiB (half of them up to
 * 128 B), 9.5% up to 128 KiB, 0.45% up to 1 MiB and 0.05% up to 8 MiB
 * (log-uniform in each tier). */
static size_t log_uniform(struct thread_ctx *t, size_t lo, size_t hi) {
  unsigned span = 63u - (unsigned)__builtin_clzll(hi / lo);
  size_t s = lo << (rnd(t) % (span + 1));
  s += rnd(t) % s;
  return s < lo ? lo : s > hi ? hi : s;
}

static size_t random_size(struct thread_ctx *t) {
  uint64_t r = rnd(t) % 10000;
  if (r < 4500) return 1 + rnd(t) % 128;
  if (r < 9000) return 129 + rnd(t) % (1024 - 128);
  if (r < 9950) return log_uniform(t, 1025, 128 * 1024);
  if (r < 9995) return log_uniform(t, 128 * 1024 + 1, 1 << 20);
  return log_uniform(t, (1 << 20) + 1, 8 << 20);
}

static size_t natural_align(size_t size) {
  if (size >= 16) return 16;
  size_t a = 1;
  while (a * 2 <= size) a *= 2;
  return a;
}

static void check_align(const void *p, size_t size, size_t align, const char *fn) {
  size_t need = natural_align(size);
  if (align > need) need = align;
  if ((uintptr_t)p % need) fail("%s(%zu) returned %p, misaligned for %zu", fn, size, p, need);
}

static void verify(const struct shadow *b, size_t upto, const char *when) {
  size_t n = b->filled < upto ? b->filled : upto;
  if (pattern_ok(b->p, n, b->seed, 0)) {
    atomic_fetch_add_explicit(&verified, 1, memory_order_relaxed);
    return;
  }
  size_t k = 0;   /* the first word that differs */
  while (8 * k < n && pattern_ok(b->p, 8 * k + 8 < n ? 8 * k + 8 : n, b->seed, k)) k++;
  fail("contents changed %s (%p, size %zu, first bad word at offset %zu)", when, (void *)b->p, b->size, 8 * k);
}

static void fill(struct thread_ctx *t, struct shadow *b) {
  b->seed = rnd(t);
  b->filled = b->size;
  pattern_fill(b->p, b->size, b->seed, 0);
}

/* Record a new block p of size bytes from fn in slot b. */
static void adopt(struct thread_ctx *t, struct shadow *b, void *p, size_t size, size_t align, int kind,
                  const char *fn) {
  if (!p) fail("%s(%zu) returned NULL (errno %d)", fn, size, errno);
  check_align(p, size, align, fn);
  live_add(p);
  *b = (struct shadow){p, size, size, align, 0, kind};
  fill(t, b);
}

static void release(struct thread_ctx *t, struct shadow *b) {
  verify(b, SIZE_MAX, "before free");
  live_remove((uintptr_t)b->p);
  uint64_t r = rnd(t) % 4;
  if (r == 0 && b->kind == KIND_PLAIN && free_sized) free_sized(b->p, b->size);
  else if (r == 0 && b->kind == KIND_ALIGNED_ALLOC && free_aligned_sized) free_aligned_sized(b->p, b->align, b->size);
  else free(b->p);
  b->p = NULL;
}

/* ---- the mailbox: blocks passed between threads */

static pthread_mutex_t mailbox_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shadow mailbox[MAILBOX];

/* Swap slot b with a random mailbox entry (either may be empty). */
static void hand_off(struct thread_ctx *t, struct shadow *b) {
  if (b->p) verify(b, SIZE_MAX, "before a hand-off");
  pthread_mutex_lock(&mailbox_lock);
  struct shadow *m = &mailbox[rnd(t) % MAILBOX];
  struct shadow tmp = *m;
  *m = *b;
  *b = tmp;
  pthread_mutex_unlock(&mailbox_lock);
  if (b->p) verify(b, SIZE_MAX, "after a hand-off");
}

/* ---- operations */

static void op_malloc(struct thread_ctx *t, struct shadow *b) {
  size_t size = random_size(t);
  adopt(t, b, malloc(size), size, 0, KIND_PLAIN, "malloc");
}

static void op_calloc(struct thread_ctx *t, struct shadow *b) {
  size_t size = random_size(t), count = 1 + rnd(t) % 8;
  if (rnd(t) % 64 == 0) {   /* count * size overflows */
    errno = 0;
    void *q = calloc(huge / 2, 3 + rnd(t) % 5);
    if (q || errno != ENOMEM) fail("calloc overflow returned %p, errno %d", q, errno);
    return;
  }
  size_t each = (size + count - 1) / count, total = each * count;
  unsigned char *p = calloc(count, each);
  if (!p) fail("calloc(%zu, %zu) returned NULL", count, each);
  for (size_t i = 0; i < total; i++)
    if (p[i]) fail("calloc(%zu, %zu) = %p not zeroed at offset %zu", count, each, (void *)p, i);
  adopt(t, b, p, total, 0, KIND_PLAIN, "calloc");
}

/* Slot b's block is now p, of size bytes, from fn (realloc or
 * reallocarray; the caller took the old address out of the live set before
 * the call): the contents kept must be the old ones (else "contents changed
 * <by>"), the rest is filled. */
static void resized(struct shadow *b, unsigned char *p, size_t size, const char *fn, const char *by) {
  check_align(p, size, 0, fn);
  live_add(p);
  b->p = p;
  verify(b, size, by);
  size_t kept = b->filled < size ? b->filled : size;
  b->size = b->filled = size;
  b->align = 0;
  b->kind = KIND_PLAIN;
  pattern_fill(p, size, b->seed, kept / 8);
}

static void op_realloc(struct thread_ctx *t, struct shadow *b) {
  uint64_t r = rnd(t) % 8;
  size_t size = r < 3 ? b->size + 1 + rnd(t) % (b->size + 1)   /* grow, up to twice */
                : r < 6 ? 1 + rnd(t) % (b->size + 1)            /* shrink or keep */
                : r < 7 ? (b->size ? b->size : 1)               /* the same size */
                        : random_size(t);                       /* anything */
  verify(b, SIZE_MAX, "before realloc");
  uintptr_t old = (uintptr_t)b->p;
  live_remove(old);   /* before: once realloc moved it, another thread may get the old address */
  unsigned char *p = realloc(b->p, size);
  if (!p) fail("realloc(%p, %zu) returned NULL", (void *)old, size);
  resized(b, p, size, "realloc", "by realloc");
}

static void op_realloc_edges(struct thread_ctx *t, struct shadow *b) {
  uint64_t r = rnd(t) % 3;
  if (r == 0) {   /* realloc(NULL, n) is malloc(n) */
    if (b->p) release(t, b);
    size_t size = random_size(t);
    adopt(t, b, realloc(NULL, size), size, 0, KIND_PLAIN, "realloc(NULL)");
  } else if (r == 1 && b->p) {   /* realloc(p, 0) frees p and returns NULL */
    verify(b, SIZE_MAX, "before realloc to 0");
    live_remove((uintptr_t)b->p);
    void *q = realloc(b->p, 0);
    b->p = NULL;
    if (q) fail("realloc(p, 0) returned %p, not NULL", q);
  } else if (b->p) {   /* reallocarray: a valid one, or one that overflows */
    if (rnd(t) % 2) {
      errno = 0;
      void *q = reallocarray(b->p, huge / 4, 8);
      if (q || errno != ENOMEM) fail("reallocarray overflow returned %p, errno %d", q, errno);
      verify(b, SIZE_MAX, "after a failed reallocarray");
      return;
    }
    size_t count = 1 + rnd(t) % 16, each = 1 + b->size / count + rnd(t) % 32;
    verify(b, SIZE_MAX, "before reallocarray");
    uintptr_t old = (uintptr_t)b->p;
    live_remove(old);
    unsigned char *p = reallocarray(b->p, count, each);
    if (!p) fail("reallocarray(%p, %zu, %zu) returned NULL", (void *)old, count, each);
    resized(b, p, count * each, "reallocarray", "by reallocarray");
  }
}

static void op_aligned(struct thread_ctx *t, struct shadow *b) {
  size_t size = rnd(t) % 32 ? random_size(t) : 0;
  size_t align = (size_t)8 << (rnd(t) % (rnd(t) % 16 == 0 ? 20 : 10));   /* 8 B .. 4 MiB */
  switch (rnd(t) % 5) {
    case 0: {
      void *p = (void *)0x1;
      int rc = posix_memalign(&p, align, size);
      if (rc) fail("posix_memalign(%zu, %zu) failed: %d", align, size, rc);
      adopt(t, b, p, size, align, KIND_OTHER_ALIGNED, "posix_memalign");
      break;
    }
    case 1:
      size = (size + align - 1) / align * align;   /* C11 wants a multiple; glibc does not care */
      adopt(t, b, aligned_alloc(align, size), size, align, KIND_ALIGNED_ALLOC, "aligned_alloc");
      break;
    case 2:
      adopt(t, b, memalign(align, size), size, align, KIND_OTHER_ALIGNED, "memalign");
      break;
    case 3:
      adopt(t, b, valloc(size), size, 4096, KIND_OTHER_ALIGNED, "valloc");
      break;
    default: {
      void *p = pvalloc(size);
      size_t rounded = (size + 4095) & ~(size_t)4095;
      if (p && malloc_usable_size(p) < rounded)
        fail("pvalloc(%zu) = %p usable %zu, below the page-rounded %zu", size, p, malloc_usable_size(p), rounded);
      adopt(t, b, p, size, 4096, KIND_OTHER_ALIGNED, "pvalloc");
      break;
    }
  }
}

static void op_bad_alignment(struct thread_ctx *t) {
  void *p = (void *)0x1;
  size_t bad = 24 + 16 * (rnd(t) % 8);   /* not a power of two */
  int rc = posix_memalign(&p, bad, 64);
  if (rc != EINVAL || p != (void *)0x1) fail("posix_memalign(%zu) returned %d, out %p", bad, rc, p);
  rc = posix_memalign(&p, sizeof(void *) / 2, 64);
  if (rc != EINVAL || p != (void *)0x1) fail("posix_memalign(%zu) returned %d, out %p", sizeof(void *) / 2, rc, p);
  errno = 0;
  void *q = aligned_alloc(bad, 64);
  if (q || errno != EINVAL) fail("aligned_alloc(%zu) returned %p, errno %d", bad, q, errno);
  errno = 0;
  q = malloc(huge - 4096 * (rnd(t) % 4));
  if (q || errno != ENOMEM) fail("malloc(huge) returned %p, errno %d", q, errno);
}

static void op_usable(struct thread_ctx *t, struct shadow *b) {
  size_t usable = malloc_usable_size(b->p);
  if (usable < b->size) fail("malloc_usable_size(%p) = %zu, below the %zu asked", (void *)b->p, usable, b->size);
  verify(b, SIZE_MAX, "before filling to the usable size");
  pattern_fill(b->p, usable, b->seed, b->filled / 8);
  b->filled = usable;
}

static void op_zero_and_null(struct thread_ctx *t, struct shadow *b) {
  free(NULL);
  void *p = malloc(0);
  if (!p) fail("malloc(0) returned NULL");
  live_add(p);
  *b = (struct shadow){p, 0, 0, 0, 0, KIND_PLAIN};
}

static void step(struct thread_ctx *t) {
  struct shadow *b = &t->slot[rnd(t) % SLOTS];
  uint64_t r = rnd(t) % 1000;
  if (r < 20) {
    hand_off(t, b);
  } else if (r < 22) {
    op_bad_alignment(t);
  } else if (r == 22 && rnd(t) % 16 == 0) {
    malloc_trim(0);
  } else if (!b->p) {
    if (r < 560) op_malloc(t, b);
    else if (r < 700) op_calloc(t, b);
    else if (r < 780) op_aligned(t, b);
    else if (r < 800) op_zero_and_null(t, b);
    else op_realloc_edges(t, b);
  } else {
    if (r < 620) release(t, b);
    else if (r < 850) op_realloc(t, b);
    else if (r < 900) op_realloc_edges(t, b);
    else op_usable(t, b);
  }
}

static void *thread_main(void *arg) {
  struct thread_ctx *t = arg;
  current = t;
  for (t->op = 0; t->op < t->ops; t->op++) step(t);
  for (int i = 0; i < SLOTS; i++)
    if (t->slot[i].p) {
      if (rnd(t) % 4 == 0) hand_off(t, &t->slot[i]);   /* outlives this thread */
      if (t->slot[i].p) release(t, &t->slot[i]);
    }
  return NULL;
}

static void run_round(int round, int threads, long ops) {
  struct thread_ctx *ctx = calloc((size_t)threads, sizeof *ctx);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  if (!ctx || !tid) fail("no memory for %d threads", threads);
  for (int i = 0; i < threads; i++) {
    ctx[i].rng = splitmix64(seed ^ splitmix64((uint64_t)round << 32 | (uint64_t)i)) | 1;
    ctx[i].round = round;
    ctx[i].index = i;
    ctx[i].ops = ops / threads;
    if (pthread_create(&tid[i], NULL, thread_main, &ctx[i]) != 0) fail("pthread_create failed");
  }
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  free(ctx);
  free(tid);
}

static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  double d = strtod(v, &end);   /* 1e8 as well as 100000000 */
  if (*end || d < 1) {
    fprintf(stderr, "fuzz: %s=%s is not a positive number\n", name, v);
    exit(2);
  }
  return (long)d;
}

int main(void) {
  const char *s = getenv("FUZZ_SEED");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  seed = s && *s ? strtoull(s, NULL, 0) : splitmix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
  long ops = env_long("FUZZ_OPS", 1000000);
  const char *threads = getenv("FUZZ_THREADS");
  long only = threads && *threads ? env_long("FUZZ_THREADS", 1) : 0;
  for (int i = 0; i < LIVE_STRIPES; i++) pthread_mutex_init(&live[i].lock, NULL);
  printf("fuzz: seed %llu threads %s ops %ld\n", (unsigned long long)seed, only ? threads : "1,2,4", ops);
  fflush(stdout);
  if (only) {
    run_round(0, (int)only, ops);
  } else {
    run_round(0, 1, ops / 3);
    run_round(1, 2, ops / 3);
    run_round(2, 4, ops - 2 * (ops / 3));
  }
  static struct thread_ctx drain;   /* the main thread frees what the mailbox still holds */
  drain.rng = seed | 1;
  drain.round = 3;
  current = &drain;
  for (int i = 0; i < MAILBOX; i++)
    if (mailbox[i].p) release(&drain, &mailbox[i]);
  long left = 0;   /* the fuzzer's own bookkeeping: every block it took was freed */
  for (int i = 0; i < LIVE_STRIPES; i++)
    for (int j = 0; j < LIVE_BUCKETS; j++) left += live[i].key[j] != 0;
  if (left) fail("%ld blocks still in the live-block set at the end", left);
  printf("fuzz: %ld ops ok, %ld blocks verified\n", ops, atomic_load(&verified));
  printf("RESULT fuzz %ld 0\n", atomic_load(&verified));
  return 0;
}
