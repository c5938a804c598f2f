/* cache_scratch [THREADS] [ITERS] [REPS] [SIZE]
 *
 * Passive false sharing (after Hoard's cache-scratch): the main thread
 * mallocs THREADS (default 2) objects of SIZE bytes (default 8) back to back
 * -- typically on one cache line -- and hands one to each thread. Each thread
 * frees the object it was given, then ITERS times (default 4000) mallocs its
 * own SIZE-byte object, writes every byte REPS times (default 5000), checks
 * and frees it. An allocator that gives a thread back the block another
 * thread's object shares a line with makes the writes ping-pong.
 * Prints object writes (one pass over one object) per second. */
#include <pthread.h>

#include "bench.h"

#define NAME "cache_scratch"

static long nthreads, iters, reps, size;
static pthread_barrier_t start;
static unsigned char **given;

static void *worker(void *arg) {
  long t = (long)(intptr_t)arg;
  uint64_t sum = 0;
  pthread_barrier_wait(&start);
  unsigned char *g = given[t];
  for (long j = 0; j < size; j++)
    if (g[j] != (unsigned char)(t * 3 + 1)) BENCH_CORRUPT(NAME, "given object %ld", t);
  free(g);
  for (long i = 0; i < iters; i++) {
    volatile unsigned char *p = malloc((size_t)size);
    if (!p) BENCH_OOM(NAME, size);
    for (long j = 0; j < size; j++) p[j] = (unsigned char)t;
    for (long r = 0; r < reps; r++)
      for (long j = 0; j < size; j++) p[j] = (unsigned char)(p[j] + 1);
    unsigned char want = (unsigned char)(t + reps);
    for (long j = 0; j < size; j++)
      if (p[j] != want) BENCH_CORRUPT(NAME, "thread %ld object byte %ld", t, j);
    sum += p[0];
    free((void *)p);
  }
  bench_sink += sum;
  return NULL;
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 5 || bench_help(argc, argv), NAME " [THREADS] [ITERS] [REPS] [SIZE]");
  nthreads = bench_arg(argc, argv, 1, 2);
  iters = bench_arg(argc, argv, 2, 4000);
  reps = bench_arg(argc, argv, 3, 5000);
  size = bench_arg(argc, argv, 4, 8);
  if (nthreads <= 0 || nthreads > 1024 || iters <= 0 || reps < 0 || size <= 0)
    bench_die(2, NAME ": bad arguments");
  pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
  given = calloc((size_t)nthreads, sizeof *given);
  if (!tid || !given) BENCH_OOM(NAME, nthreads);
  for (long t = 0; t < nthreads; t++) {
    given[t] = malloc((size_t)size);
    if (!given[t]) BENCH_OOM(NAME, size);
    memset(given[t], (int)(t * 3 + 1), (size_t)size);
  }
  pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
  for (long t = 0; t < nthreads; t++)
    if (pthread_create(&tid[t], NULL, worker, (void *)(intptr_t)t) != 0)
      bench_die(1, NAME ": pthread_create failed");
  double t0 = bench_now();
  pthread_barrier_wait(&start);
  for (long t = 0; t < nthreads; t++) pthread_join(tid[t], NULL);
  double secs = bench_now() - t0;
  pthread_barrier_destroy(&start);
  free(given);
  free(tid);
  long total = nthreads * iters * reps;
  printf(NAME ": %ld threads, %ld objects of %ld B, %ld writes in %.3f s = %.0f ops/s\n",
         nthreads, nthreads * iters, size, total, secs, (double)total / secs);
  return 0;
}
