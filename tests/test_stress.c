/* Multi-threaded stress in the shape of mimalloc's stress test.
 *
 * usage: test_stress [threads] [iterations per thread per round]
 *
 * Threads swap freshly allocated blocks into a shared array of slots and
 * verify and free whatever they take out, so most frees are cross-thread.
 * Every shared block (at least 8 bytes) starts with a header word holding
 * its size and a cookie, followed by a pattern derived from both, checked
 * before it is freed. Each thread also keeps private blocks (from 1 byte)
 * that it grows, shrinks and replaces. Several rounds run, each with fresh
 * threads; the shared slots outlive the threads that filled them. The
 * default iteration count is scaled by the STRESS_SCALE environment
 * variable (percent). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

#define SLOTS 1024
#define PRIVATE 64
#define ROUNDS 4
#define DEFAULT_ITERS 70000
#define MAX_SIZE (((size_t)1 << 20) - 1)
#define SIZE_BITS 20
#define ALIGNED_FLAG ((uint64_t)1 << SIZE_BITS)
#define COOKIE_SHIFT (SIZE_BITS + 1)

static _Atomic(unsigned char *) slots[SLOTS];
static atomic_long corruptions, alloc_failures;
static long iterations;

/* Mostly tiny, some mid-sized, rarely large. */
static size_t pick_size(uint64_t *rng, size_t min) {
  uint64_t r = xorshift64(rng);
  unsigned pct = (unsigned)(r % 100);
  size_t s;
  if (pct < 85)
    s = 1 + (r >> 8) % 1024;
  else if (pct < 99)
    s = 1025 + (r >> 8) % (64 * 1024 - 1024);
  else
    s = 64 * 1024 + (r >> 8) % (MAX_SIZE - 64 * 1024 + 1);
  return s < min ? min : s;
}

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static void report_corruption(const void *p, const char *what, size_t size) {
  if (atomic_fetch_add(&corruptions, 1) < 10)
    fprintf(stderr, "corrupt %s block %p (size %zu)\n", what, p, size);
}

/* A shared block starts with its header word: cookie, aligned flag, size. */
static unsigned char *shared_alloc(uint64_t *rng) {
  size_t size = pick_size(rng, 8);
  uint64_t r = xorshift64(rng);
  uint64_t head = (r << COOKIE_SHIFT) | size;
  unsigned char *p;
  if (r % 32 == 0) {
    size_t align = (size_t)16 << ((r >> 8) % 9);
    void *v;
    p = T_posix_memalign(&v, align, size) == 0 ? v : NULL;
    head |= ALIGNED_FLAG;
    if (p && (uintptr_t)p % align) report_corruption(p, "misaligned", size);
  } else if (r % 16 == 1) {
    p = T_calloc(1, size);
    if (p && !all_zero(p, size)) report_corruption(p, "calloc", size);
  } else {
    p = T_malloc(size);
  }
  if (!p) {
    atomic_fetch_add(&alloc_failures, 1);
    return NULL;
  }
  memcpy(p, &head, 8);
  pattern_fill(p, size, head, 1);
  return p;
}

static void shared_check_free(unsigned char *p, int sized) {
  uint64_t head;
  memcpy(&head, p, 8);
  size_t size = head & MAX_SIZE;
  if (size < 8 || !pattern_ok(p, size, head, 1) || T_usable_size(p) < size) {
    report_corruption(p, "shared", size);
    T_free(p);
  } else if (sized && !(head & ALIGNED_FLAG)) {
    T_free_sized(p, size);
  } else {
    T_free(p);
  }
}

struct private_block {
  unsigned char *p;
  size_t size;
  uint64_t head;
};

/* Replace a private block: verify it, then realloc it or free it and
 * allocate a new one. */
static void private_step(struct private_block *b, uint64_t *rng) {
  size_t size = pick_size(rng, 1);
  uint64_t head = xorshift64(rng);
  if (b->p && !pattern_ok(b->p, b->size, b->head, 0))
    report_corruption(b->p, "private", b->size);
  if (b->p && head % 2) {
    unsigned char *q = T_realloc(b->p, size);
    if (!q) {
      atomic_fetch_add(&alloc_failures, 1);
      return;
    }
    size_t kept = size < b->size ? size : b->size;
    if (!pattern_ok(q, kept, b->head, 0)) report_corruption(q, "realloc", kept);
    b->p = q;
  } else {
    T_free(b->p);
    b->p = T_malloc(size);
    if (!b->p) {
      atomic_fetch_add(&alloc_failures, 1);
      return;
    }
  }
  b->size = size;
  b->head = head;
  pattern_fill(b->p, size, head, 0);
}

static void *worker(void *arg) {
  uint64_t rng = splitmix64((uint64_t)(uintptr_t)arg);
  struct private_block priv[PRIVATE] = {{0}};
  for (long i = 0; i < iterations; i++) {
    uint64_t r = xorshift64(&rng);
    if (r % 8 == 0) {
      private_step(&priv[(r >> 8) % PRIVATE], &rng);
      continue;
    }
    unsigned char *p = shared_alloc(&rng);
    if (!p) continue;
    unsigned char *old = atomic_exchange(&slots[(r >> 8) % SLOTS], p);
    if (old) shared_check_free(old, (r >> 40) % 4 == 0);
  }
  for (int i = 0; i < PRIVATE; i++) {
    if (priv[i].p && !pattern_ok(priv[i].p, priv[i].size, priv[i].head, 0))
      report_corruption(priv[i].p, "private", priv[i].size);
    T_free(priv[i].p);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  iterations = argc > 2 ? atol(argv[2]) : stress_scaled(DEFAULT_ITERS);
  if (threads < 1) threads = 1;
  if (iterations < 1) iterations = 1;
  printf("stress: %d threads, %d rounds of %ld iterations\n", threads, ROUNDS,
         iterations);

  pthread_t *tids = T_malloc(sizeof(pthread_t) * (size_t)threads);
  CHECK(tids != NULL, "malloc of the thread array");
  if (!tids) return test_done("stress");
  for (int round = 0; round < ROUNDS; round++) {
    int started = 0;
    for (int t = 0; t < threads; t++) {
      uintptr_t seed = (uintptr_t)round * 1000 + (uintptr_t)t + 1;
      if (pthread_create(&tids[started], NULL, worker, (void *)seed) == 0)
        started++;
    }
    CHECK(started == threads, "round %d: started %d of %d threads", round,
          started, threads);
    for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
  }
  T_free(tids);

  for (int i = 0; i < SLOTS; i++) {
    unsigned char *p = atomic_exchange(&slots[i], NULL);
    if (p) shared_check_free(p, 0);
  }
  CHECK(atomic_load(&corruptions) == 0, "%ld corrupted blocks",
        atomic_load(&corruptions));
  CHECK(atomic_load(&alloc_failures) == 0, "%ld failed allocations",
        atomic_load(&alloc_failures));
  return test_done("stress");
}
