/* What cache_thrash and cache_scratch share: their arguments
 * [THREADS] [ITERS] [REPS] [SIZE], the threads' object loop, the timed run
 * of the threads and the result line. The two differ only in what a thread
 * does before its loop. Include after bench.h, with NAME defined. */
#ifndef HAK_BENCH_CACHE_COMMON_H
#define HAK_BENCH_CACHE_COMMON_H

static long nthreads, iters, reps, size;

/* Parses the arguments into the variables above (defaults 2 4000 5000 8). */
static void cache_args(int argc, char **argv) {
  bench_usage_if(argc > 5 || bench_help(argc, argv), NAME " [THREADS] [ITERS] [REPS] [SIZE]");
  nthreads = bench_arg(argc, argv, 1, 2);
  iters = bench_arg(argc, argv, 2, 4000);
  reps = bench_arg(argc, argv, 3, 5000);
  size = bench_arg(argc, argv, 4, 8);
  if (nthreads <= 0 || nthreads > 1024 || iters <= 0 || reps < 0 || size <= 0)
    bench_die(2, NAME ": bad arguments");
}

/* Thread t's loop: ITERS times malloc a SIZE-byte object, write every byte
 * REPS times, check it and free it. Returns a checksum. */
static uint64_t cache_objects(long t) {
  uint64_t sum = 0;
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
  return sum;
}

/* THREADS threads to run worker((void *)t), t = 0.. (allocated before the
 * program's own objects, as the pthread_t array was). */
static struct bench_thread *cache_threads(void *(*worker)(void *)) {
  struct bench_thread *th = calloc((size_t)nthreads, sizeof *th);
  if (!th) BENCH_OOM(NAME, nthreads);
  for (long t = 0; t < nthreads; t++)
    th[t] = (struct bench_thread){.fn = worker, .arg = (void *)(intptr_t)t};
  return th;
}

/* Runs the threads, started together, times them from their start to the
 * last join, frees th and prints the result line. */
static void cache_run(struct bench_thread *th) {
  double secs = bench_run_threads(NAME, th, nthreads, BENCH_CLOCK_RUN);
  free(th);
  long total = nthreads * iters * reps;
  printf(NAME ": %ld threads, %ld objects of %ld B, %ld writes in %.3f s = %.0f ops/s\n",
         nthreads, nthreads * iters, size, total, secs, (double)total / secs);
}

#endif
