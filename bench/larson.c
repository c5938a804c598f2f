/* larson [THREADS] [SLOTS] [OPS] [ROUNDS] [MIN] [MAX] [SEED]
 *
 * Server simulation in the shape of the Larson benchmark. There are THREADS
 * (default 2) arrays of SLOTS (default 1000) blocks, filled by the main
 * thread. In each of ROUNDS (default 20) rounds, THREADS new threads start;
 * thread i takes array (i + round) % THREADS and OPS (default 400000) times
 * replaces the block in a random slot: checks and frees it, mallocs a new one
 * of a random size in MIN..MAX (default 16..1024) and marks it. The threads
 * then exit and the next round's threads take the arrays over, so most blocks
 * are freed by a thread other than the one that allocated them.
 * Prints replacements (one free + one malloc) per second. */
#include "bench.h"

#define NAME "larson"

struct array {
  unsigned char **blk;
  uint32_t *size;
  uint64_t *tag;
};

static long nthreads, slots, ops, rounds;
static size_t min_size, max_size;
static uint64_t seed;
static struct array *arrays;

struct job {
  struct array *a;
  uint64_t rng;
  uint64_t sum;
};

static void replace(struct array *a, long k, uint64_t *rng, uint64_t *sum) {
  unsigned char *p = a->blk[k];
  if (p) {
    if (!bench_check(p, a->size[k], a->tag[k]))
      BENCH_CORRUPT(NAME, "slot %ld (%u B) overwritten", k, a->size[k]);
    *sum += p[0];
    free(p);
  }
  size_t size = bench_size(rng, min_size, max_size);
  p = malloc(size);
  if (!p) BENCH_OOM(NAME, size);
  uint64_t tag = bench_rng(rng);
  bench_mark(p, size, tag);
  a->blk[k] = p;
  a->size[k] = (uint32_t)size;
  a->tag[k] = tag;
}

static void *worker(void *arg) {
  struct job *j = arg;
  for (long i = 0; i < ops; i++) {
    long k = (long)(bench_rng(&j->rng) % (uint64_t)slots);
    replace(j->a, k, &j->rng, &j->sum);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 8 || bench_help(argc, argv), NAME " [THREADS] [SLOTS] [OPS] [ROUNDS] [MIN] [MAX] [SEED]");
  nthreads = bench_arg(argc, argv, 1, 2);
  slots = bench_arg(argc, argv, 2, 1000);
  ops = bench_arg(argc, argv, 3, 400000);
  rounds = bench_arg(argc, argv, 4, 20);
  min_size = (size_t)bench_arg(argc, argv, 5, 16);
  max_size = (size_t)bench_arg(argc, argv, 6, 1024);
  seed = (uint64_t)bench_arg(argc, argv, 7, 1);
  if (nthreads <= 0 || nthreads > 1024 || slots <= 0 || ops < 0 || rounds <= 0 ||
      min_size == 0 || max_size < min_size || max_size > UINT32_MAX)
    bench_die(2, NAME ": bad arguments");

  arrays = calloc((size_t)nthreads, sizeof *arrays);
  struct job *jobs = calloc((size_t)nthreads, sizeof *jobs);
  struct bench_thread *th = calloc((size_t)nthreads, sizeof *th);
  if (!arrays || !jobs || !th) BENCH_OOM(NAME, nthreads);
  for (long t = 0; t < nthreads; t++) th[t] = (struct bench_thread){.fn = worker, .arg = &jobs[t]};
  uint64_t rng = bench_seed(seed, 0), sum = 0;
  for (long t = 0; t < nthreads; t++) {
    struct array *a = &arrays[t];
    a->blk = calloc((size_t)slots, sizeof *a->blk);
    a->size = calloc((size_t)slots, sizeof *a->size);
    a->tag = calloc((size_t)slots, sizeof *a->tag);
    if (!a->blk || !a->size || !a->tag) BENCH_OOM(NAME, slots);
    for (long k = 0; k < slots; k++) replace(a, k, &rng, &sum);
  }

  double t0 = bench_now();
  for (long r = 0; r < rounds; r++) {
    for (long t = 0; t < nthreads; t++) {
      jobs[t].a = &arrays[(t + r) % nthreads];
      jobs[t].rng = bench_seed(seed, (uint64_t)(r * nthreads + t + 1));
    }
    bench_run_threads(NAME, th, nthreads, BENCH_CLOCK_CREATE);
    for (long t = 0; t < nthreads; t++) sum += jobs[t].sum;
  }
  double secs = bench_now() - t0;

  for (long t = 0; t < nthreads; t++) {
    struct array *a = &arrays[t];
    for (long k = 0; k < slots; k++) {
      if (!bench_check(a->blk[k], a->size[k], a->tag[k]))
        BENCH_CORRUPT(NAME, "array %ld slot %ld overwritten", t, k);
      free(a->blk[k]);
    }
    free(a->blk);
    free(a->size);
    free(a->tag);
  }
  free(arrays);
  free(jobs);
  free(th);
  bench_sink = sum;
  long total = nthreads * ops * rounds;
  printf(NAME ": %ld threads, %ld replacements in %.3f s = %.0f ops/s\n", nthreads, total,
         secs, (double)total / secs);
  return 0;
}
