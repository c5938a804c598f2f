/* cache_thrash [THREADS] [ITERS] [REPS] [SIZE]
 *
 * Active false sharing (after Hoard's cache-thrash): THREADS threads
 * (default 2) each ITERS times (default 4000) malloc a SIZE-byte object
 * (default 8), write every byte of it REPS times (default 5000), check it and
 * free it. An allocator that hands objects on the same cache line to
 * different threads makes those writes ping-pong the line between cores.
 * Prints object writes (one pass over one object) per second. */
#include "bench.h"

#define NAME "cache_thrash"

#include "cache_common.h"

static void *worker(void *arg) {
  bench_sink += cache_objects((long)(intptr_t)arg);
  return NULL;
}

int main(int argc, char **argv) {
  cache_args(argc, argv);
  cache_run(cache_threads(worker));
  return 0;
}
