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
#include "bench.h"

#define NAME "cache_scratch"

#include "cache_common.h"

static unsigned char **given;

static void *worker(void *arg) {
  long t = (long)(intptr_t)arg;
  unsigned char *g = given[t];
  for (long j = 0; j < size; j++)
    if (g[j] != (unsigned char)(t * 3 + 1)) BENCH_CORRUPT(NAME, "given object %ld", t);
  free(g);
  bench_sink += cache_objects(t);
  return NULL;
}

int main(int argc, char **argv) {
  cache_args(argc, argv);
  struct bench_thread *th = cache_threads(worker);
  given = calloc((size_t)nthreads, sizeof *given);
  if (!given) BENCH_OOM(NAME, nthreads);
  for (long t = 0; t < nthreads; t++) {
    given[t] = malloc((size_t)size);
    if (!given[t]) BENCH_OOM(NAME, size);
    memset(given[t], (int)(t * 3 + 1), (size_t)size);
  }
  cache_run(th);
  free(given);
  return 0;
}
