/* memory MODE [SCALE] [SEED]
 *
 * Footprint: how much memory the allocator holds beside what the program
 * has live, and how much it gives back, with and without being asked.
 * SCALE (default 1.0, as a number of thousandths: 1000) shrinks or grows the
 * counts. Five modes, each in its own process so that they do not mix:
 *
 *  footprint  1. 1M objects, 97% of 16..316 B and 3% of 1..16 KiB, filled
 *                (about 400 MiB live, with the 16 MiB table that holds
 *                them): peak_over_live = peak RSS / live;
 *             2. free a random 90% and refill a third of the freed slots
 *                with other sizes (40 B..3.3 KiB, log-uniform):
 *                frag_over_live = RSS / live;
 *             3. free everything (the table too) and make no further call: RSS right after
 *                and after 0.5, 1 and 2 s (freed_rss_*_kib);
 *             4. malloc_trim(0): trimmed_rss_kib.
 *  idle       2 threads each allocate 512 MiB of blocks, a third of the
 *             bytes each of 16 B..1 KiB, 1..128 KiB and 128 KiB..1 MiB
 *             (uniform in each), free them all and stay alive, asleep:
 *             RSS right after (freed_rss_kib), 5 s later with no call from
 *             any thread (idle_rss_kib), after malloc_trim(0) from the main
 *             thread (trimmed_rss_kib), and 2 s after the threads exited
 *             (exited_rss_kib).
 *  cross      the same, but each thread frees the other's blocks: what
 *             waits for an owner that sleeps.
 *  threads    20,000 short threads, 4 alive at a time, each allocating about
 *             1 MiB in blocks of 16 B..8 KiB and freeing it: peak RSS.
 *  mid        8 threads each allocate and free, 50 times over, a batch of 32
 *             blocks of every size from 8 KiB to 128 KiB in steps of an
 *             eighth, then stay alive, idle: RSS right after
 *             (freed_rss_kib), 1.5 s later (idle_rss_kib), after
 *             malloc_trim(0) from the main thread (trimmed_rss_kib): what
 *             the threads' caches of mid-size blocks keep.
 *
 * Every block is marked and checked before free. The figure is mallocs +
 * frees per second (the waits left out); the memory figures are key=value fields, RSS in KiB
 * (VmRSS, VmHWM: they include ~2 MiB of program and libraries). */
#include <malloc.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "bench.h"

#define NAME "memory"
#define KIB 1024.0

static __thread long ops;       /* this thread's mallocs and frees */
static _Atomic long ops_total;  /* of the threads that ended */
static double napped;           /* seconds the main thread slept */

static void make(struct bench_obj *o, size_t size, uint32_t tag) {
  bench_obj_new(NAME, o, size, tag);
  ops++;
}

static void drop(struct bench_obj *o) {
  bench_obj_free(NAME, o, "before free");
  ops++;
}

/* With system calls only: the waits make no allocator call. */
static long rss_kib(void) { return bench_rss_kib(); }

static void nap_ms(long ms) {
  bench_nap_ms(ms);
  napped += (double)ms / 1000.0;
}

static void thread_ops_done(void) { atomic_fetch_add(&ops_total, ops); }

static void footprint(long n, uint64_t *rng) {
  struct bench_obj *o = calloc((size_t)n, sizeof *o);
  if (!o) BENCH_OOM(NAME, (size_t)n * sizeof *o);
  size_t live = (size_t)n * sizeof *o;   /* the table of objects is live data too */
  for (long i = 0; i < n; i++) {
    size_t size = bench_rng(rng) % 100 < 97 ? bench_size(rng, 16, 316) : bench_size(rng, 1024, 16384);
    make(&o[i], size, (uint32_t)i);
    live += size;
  }
  double peak_over_live = (double)bench_peak_rss_kib() * KIB / (double)live;

  long freed = 0;
  for (long i = 0; i < n; i++)
    if (bench_rng(rng) % 100 < 90) {
      live -= o[i].size;
      drop(&o[i]);
      freed++;
    }
  uint32_t tag = (uint32_t)n;
  for (long i = 0, refill = freed / 3; i < n && refill > 0; i++)
    if (!o[i].p) {
      size_t size = bench_log_size(rng, 40, 3300);
      make(&o[i], size, tag++);
      live += size;
      refill--;
    }
  double frag_over_live = (double)rss_kib() * KIB / (double)live;

  for (long i = 0; i < n; i++)
    if (o[i].p) drop(&o[i]);
  free(o);
  long rss[4], at[4] = {0, 500, 1000, 2000};
  for (int k = 0; k < 4; k++) {
    nap_ms(at[k] - (k ? at[k - 1] : 0));
    rss[k] = rss_kib();
  }
  malloc_trim(0);
  long trimmed = rss_kib();
  printf(NAME ": footprint, %ld objects, peak_over_live=%.3f, frag_over_live=%.3f, freed_rss_0ms_kib=%ld, "
              "freed_rss_500ms_kib=%ld, freed_rss_1000ms_kib=%ld, freed_rss_2000ms_kib=%ld, trimmed_rss_kib=%ld, "
              "peak_rss_kib=%ld",
         n, peak_over_live, frag_over_live, rss[0], rss[1], rss[2], rss[3], trimmed, bench_peak_rss_kib());
}

struct idle_arg {
  size_t amount;   /* idle, cross: bytes; mid: rounds */
  uint64_t seed;
  pthread_barrier_t *freed, *done;
  pthread_barrier_t *allocated;   /* cross: every thread has allocated, then has freed */
  struct idle_arg *partner;       /* cross: whose blocks it frees */
  struct bench_obj *objs;
  size_t n;
};

/* A third of the bytes each of 16 B..1 KiB, 1..128 KiB, 128 KiB..1 MiB: the
 * size class that has had the fewest bytes so far. */
static size_t idle_size(uint64_t *rng, size_t bytes[3]) {
  static const size_t lo[3] = {16, 1024, 128 << 10}, hi[3] = {1024, 128 << 10, 1 << 20};
  int k = bytes[0] <= bytes[1] && bytes[0] <= bytes[2] ? 0 : bytes[1] <= bytes[2] ? 1 : 2;
  size_t size = bench_size(rng, lo[k], hi[k]);
  bytes[k] += size;
  return size;
}

/* Allocates bytes of blocks, frees them all (cross: frees its partner's,
 * once both have allocated), then waits without calling the allocator until
 * the main thread has measured. */
static void *idle_thread(void *p) {
  struct idle_arg *a = p;
  uint64_t rng = a->seed;
  size_t cap = a->amount / 256 + 16, total = 0, bytes[3] = {0, 0, 0};
  a->objs = calloc(cap, sizeof *a->objs);
  if (!a->objs) BENCH_OOM(NAME, cap * sizeof *a->objs);
  while (total < a->amount && a->n < cap) {
    size_t size = idle_size(&rng, bytes);
    make(&a->objs[a->n], size, (uint32_t)a->n);
    a->n++;
    total += size;
  }
  if (a->allocated) pthread_barrier_wait(a->allocated);
  for (size_t i = 0; i < a->partner->n; i++) drop(&a->partner->objs[i]);
  if (a->allocated) pthread_barrier_wait(a->allocated);
  free(a->objs);
  thread_ops_done();
  pthread_barrier_wait(a->freed);
  pthread_barrier_wait(a->done);
  return NULL;
}

/* Allocates and frees a batch of blocks of every mid size, rounds times
 * over, then waits as idle_thread does. */
static void *mid_thread(void *p) {
  struct idle_arg *a = p;
  struct bench_obj o[32];
  for (size_t r = 0; r < a->amount; r++)
    for (size_t size = 8192; size <= 131072; size += size / 8) {
      for (int i = 0; i < 32; i++) make(&o[i], size, (uint32_t)i);
      for (int i = 0; i < 32; i++) drop(&o[i]);
    }
  thread_ops_done();
  pthread_barrier_wait(a->freed);
  pthread_barrier_wait(a->done);
  return NULL;
}

/* threads threads of fn(amount), which free what they allocated (cross:
 * each its partner's) and wait: RSS right after, nap ms later, after
 * malloc_trim(0), and exit_nap ms after they exit. */
static void idle_threads(const char *mode, void *(*fn)(void *), int threads, size_t amount, long nap, long exit_nap,
                         bool cross, uint64_t seed) {
  enum { MAX_THREADS = 8 };
  if (threads > MAX_THREADS) bench_die(2, NAME ": %s: at most %d threads", mode, (int)MAX_THREADS);
  pthread_barrier_t freed, done, allocated;
  pthread_barrier_init(&freed, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&allocated, NULL, (unsigned)threads);
  struct idle_arg args[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  for (int i = 0; i < threads; i++)
    args[i] = (struct idle_arg){amount, bench_seed(seed, (uint64_t)i), &freed, &done, cross ? &allocated : NULL,
                                &args[cross ? (i + 1) % threads : i], NULL, 0};
  for (int i = 0; i < threads; i++)
    if (pthread_create(&tid[i], NULL, fn, &args[i]) != 0) bench_die(1, NAME ": pthread_create failed");
  pthread_barrier_wait(&freed);
  long right_after = rss_kib();
  nap_ms(nap);
  long idle_rss = rss_kib();
  malloc_trim(0);
  long trimmed = rss_kib();
  pthread_barrier_wait(&done);
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  nap_ms(exit_nap);
  long exited = rss_kib();
  printf(NAME ": %s, %d threads, freed_rss_kib=%ld, idle_rss_kib=%ld, trimmed_rss_kib=%ld, exited_rss_kib=%ld, "
              "peak_rss_kib=%ld",
         mode, threads, right_after, idle_rss, trimmed, exited, bench_peak_rss_kib());
}

static uint64_t churn_seed;

static void *churn_thread(void *p) {
  uint64_t rng = bench_seed(churn_seed, (uint64_t)(uintptr_t)p);
  struct bench_obj o[256];
  size_t total = 0;
  int n = 0;
  while (total < (1 << 20) && n < 256) {
    size_t size = bench_log_size(&rng, 16, 8192);
    make(&o[n], size, (uint32_t)n);
    n++;
    total += size;
  }
  for (int i = 0; i < n; i++) drop(&o[i]);
  thread_ops_done();
  return NULL;
}

static void threads(long n, uint64_t seed) {
  enum { ALIVE = 4 };
  churn_seed = seed;
  for (long t = 0; t < n; t += ALIVE) {
    struct bench_thread th[ALIVE];
    for (int i = 0; i < ALIVE; i++) th[i] = (struct bench_thread){churn_thread, (void *)(uintptr_t)(t + i), 0, NULL};
    bench_run_threads(NAME, th, ALIVE, BENCH_CLOCK_CREATE);
  }
  printf(NAME ": threads, %ld threads, %d alive, peak_rss_kib=%ld", n, ALIVE, bench_peak_rss_kib());
}

int main(int argc, char **argv) {
  const char *usage = NAME " footprint|idle|cross|threads|mid [SCALE/1000] [SEED]";
  bench_usage_if(argc < 2 || argc > 4 || bench_help(argc, argv), usage);
  double scale = (double)bench_arg(argc, argv, 2, 1000) / 1000.0;
  uint64_t rng = bench_seed((uint64_t)bench_arg(argc, argv, 3, 1), 0);
  bench_usage_if(scale <= 0, usage);
  double t0 = bench_now();
  if (strcmp(argv[1], "footprint") == 0) footprint((long)(1000000 * scale) + 1, &rng);
  else if (strcmp(argv[1], "idle") == 0 || strcmp(argv[1], "cross") == 0)
    idle_threads(argv[1], idle_thread, 2, (size_t)(512.0 * 1024 * 1024 * scale), 5000, 2000, argv[1][0] == 'c', rng);
  else if (strcmp(argv[1], "threads") == 0) threads((long)(20000 * scale) + 4, rng);
  else if (strcmp(argv[1], "mid") == 0) idle_threads("mid", mid_thread, 8, (size_t)(50 * scale) + 1, 1500, 0, false, rng);
  else bench_usage_if(1, usage);
  thread_ops_done();
  printf(" = %.0f ops/s\n", (double)atomic_load(&ops_total) / (bench_now() - t0 - napped));
  return 0;
}
