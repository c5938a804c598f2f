/* thread_churn [WAVES] [THREADS] [BLOCKS] [MIN] [MAX] [SEED]
 *
 * Short-lived threads. WAVES (default 1500) waves of THREADS (default 2)
 * threads run one after another. Each thread checks and frees the BLOCKS
 * (default 1000) blocks left by a thread of the previous wave (so by a thread
 * that has exited), mallocs 2*BLOCKS blocks of random sizes in MIN..MAX
 * (default 16..2048), frees half of them itself and leaves the other half for
 * the next wave. Stresses thread-heap creation, teardown/adoption and frees
 * of blocks whose owner thread is gone.
 * Prints mallocs + frees per second (thread create/join time included). */
#include "bench.h"

#define NAME "thread_churn"

struct set {
  unsigned char **blk;
  uint32_t *size;
  uint64_t *tag;
};

static long waves, nthreads, blocks;
static size_t min_size, max_size;
static uint64_t seed;

struct job {
  struct set *in, *out; /* in: to free (may have blk NULL), out: to fill */
  long wave, t;
  uint64_t sum;
};

static void *worker(void *arg) {
  struct job *j = arg;
  uint64_t rng = bench_seed(seed, (uint64_t)(j->wave * nthreads + j->t));
  uint64_t sum = 0;
  for (long i = 0; i < blocks; i++) {
    unsigned char *p = j->in->blk[i];
    if (!p) continue;
    if (!bench_check(p, j->in->size[i], j->in->tag[i]))
      BENCH_CORRUPT(NAME, "wave %ld thread %ld: inherited block %ld", j->wave, j->t, i);
    sum += p[0];
    free(p);
    j->in->blk[i] = NULL;
  }
  for (long i = 0; i < 2 * blocks; i++) {
    size_t size = bench_size(&rng, min_size, max_size);
    unsigned char *p = malloc(size);
    if (!p) BENCH_OOM(NAME, size);
    uint64_t tag = bench_rng(&rng);
    bench_mark(p, size, tag);
    long k = i >> 1;
    if (i & 1) { /* keep every second block, free the other one */
      unsigned char *q = j->out->blk[k];
      if (!bench_check(q, j->out->size[k], j->out->tag[k]))
        BENCH_CORRUPT(NAME, "wave %ld thread %ld: own block %ld", j->wave, j->t, k);
      sum += q[0];
      free(q);
    }
    j->out->blk[k] = p;
    j->out->size[k] = (uint32_t)size;
    j->out->tag[k] = tag;
  }
  j->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 7 || bench_help(argc, argv), NAME " [WAVES] [THREADS] [BLOCKS] [MIN] [MAX] [SEED]");
  waves = bench_arg(argc, argv, 1, 1500);
  nthreads = bench_arg(argc, argv, 2, 2);
  blocks = bench_arg(argc, argv, 3, 1000);
  min_size = (size_t)bench_arg(argc, argv, 4, 16);
  max_size = (size_t)bench_arg(argc, argv, 5, 2048);
  seed = (uint64_t)bench_arg(argc, argv, 6, 1);
  if (waves <= 0 || nthreads <= 0 || nthreads > 1024 || blocks <= 0 || min_size == 0 ||
      max_size < min_size || max_size > UINT32_MAX)
    bench_die(2, NAME ": bad arguments");

  /* two generations of sets: wave w fills gen[w & 1] and empties gen[~w & 1] */
  struct set *gen[2];
  for (int g = 0; g < 2; g++) {
    gen[g] = calloc((size_t)nthreads, sizeof *gen[g]);
    if (!gen[g]) BENCH_OOM(NAME, nthreads);
    for (long t = 0; t < nthreads; t++) {
      gen[g][t].blk = calloc((size_t)blocks, sizeof(unsigned char *));
      gen[g][t].size = calloc((size_t)blocks, sizeof(uint32_t));
      gen[g][t].tag = calloc((size_t)blocks, sizeof(uint64_t));
      if (!gen[g][t].blk || !gen[g][t].size || !gen[g][t].tag) BENCH_OOM(NAME, blocks);
    }
  }
  struct job *jobs = calloc((size_t)nthreads, sizeof *jobs);
  struct bench_thread *th = calloc((size_t)nthreads, sizeof *th);
  if (!jobs || !th) BENCH_OOM(NAME, nthreads);
  for (long t = 0; t < nthreads; t++) th[t] = (struct bench_thread){.fn = worker, .arg = &jobs[t]};
  uint64_t sum = 0;
  long ops = 0;

  double t0 = bench_now();
  for (long w = 0; w < waves; w++) {
    struct set *in = gen[(w + 1) & 1], *out = gen[w & 1];
    for (long t = 0; t < nthreads; t++)
      jobs[t] = (struct job){&in[(t + 1) % nthreads], &out[t], w, t, 0};
    bench_run_threads(NAME, th, nthreads, BENCH_CLOCK_CREATE);
    for (long t = 0; t < nthreads; t++) sum += jobs[t].sum;
    ops += nthreads * blocks * (w == 0 ? 3 : 4);
  }
  struct set *last = gen[(waves - 1) & 1];
  for (long t = 0; t < nthreads; t++)
    for (long i = 0; i < blocks; i++) {
      if (!bench_check(last[t].blk[i], last[t].size[i], last[t].tag[i]))
        BENCH_CORRUPT(NAME, "final block %ld of thread %ld", i, t);
      free(last[t].blk[i]);
      ops++;
    }
  double secs = bench_now() - t0;
  for (int g = 0; g < 2; g++) {
    for (long t = 0; t < nthreads; t++) {
      free(gen[g][t].blk);
      free(gen[g][t].size);
      free(gen[g][t].tag);
    }
    free(gen[g]);
  }
  free(jobs);
  free(th);
  bench_sink = sum;
  printf(NAME ": %ld waves of %ld threads, %ld ops in %.3f s = %.0f ops/s\n", waves, nthreads,
         ops, secs, (double)ops / secs);
  return 0;
}
