/* glibc_simple [ITERS] [SIZE]
 *
 * The pattern of glibc's malloc benchmark bench-malloc-simple, as
 * mimalloc-bench runs it: for block sizes SIZE, 2*SIZE and 4*SIZE (default
 * 16), for batches of N = 25, 100, 400 and 1600 blocks, ITERS/N times
 * (default 2000000): allocate N blocks, write every byte of each, free the
 * first half oldest first and the second half newest first. Each size runs
 * it four times: a warm-up, on the main thread, on a second thread, and on
 * the main thread again once a thread has existed. Every block's bytes are
 * checked before its free. Prints malloc/free pairs per second. */
#include "bench.h"

#define NAME "glibc_simple"
#define MAXN 1600

static const int batches[] = {25, 100, 400, MAXN};

struct job {
  long iters;
  size_t size;
  unsigned char **arr;
  long pairs;
};

static void check_free(unsigned char *p, size_t size) {
  for (size_t g = 0; g < size; g++)
    if (p[g] != (unsigned char)g) bench_die(3, NAME ": CORRUPTION: block of %zu B overwritten", size);
  free(p);
}

static void batch_rounds(struct job *j, int n) {
  for (long r = 0; r < j->iters / n; r++) {
    for (int i = 0; i < n; i++) {
      unsigned char *p = malloc(j->size);
      if (!p) BENCH_OOM(NAME, j->size);
      for (size_t g = 0; g < j->size; g++) p[g] = (unsigned char)g;
      j->arr[i] = p;
    }
    for (int i = 0; i < n / 2; i++) check_free(j->arr[i], j->size);
    for (int i = n - 1; i >= n / 2; i--) check_free(j->arr[i], j->size);
    j->pairs += n;
  }
}

static void *all_batches(void *arg) {
  for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) batch_rounds(arg, batches[b]);
  return arg;
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 3 || bench_help(argc, argv), NAME " [ITERS] [SIZE]");
  long iters = bench_arg(argc, argv, 1, 2000000);
  long size = bench_arg(argc, argv, 2, 16);
  if (iters < 0 || size <= 0 || size > 1 << 20) bench_die(2, NAME ": bad arguments");

  unsigned char **arr = malloc(MAXN * sizeof *arr);
  if (!arr) BENCH_OOM(NAME, MAXN * sizeof *arr);
  struct job j = {iters, 0, arr, 0};
  double t0 = bench_now();
  for (int m = 1; m <= 4; m *= 2) {
    j.size = (size_t)size * (size_t)m;
    all_batches(&j);
    all_batches(&j);
    struct bench_thread th = {.fn = all_batches, .arg = &j};
    bench_run_threads(NAME, &th, 1, BENCH_CLOCK_CREATE);
    all_batches(&j);
  }
  double secs = bench_now() - t0;
  free(arr);
  printf(NAME ": %ld pairs of %ld..%ld B in batches of 25..%d in %.3f s = %.0f pairs/s\n", j.pairs, size,
         4 * size, MAXN, secs, (double)j.pairs / secs);
  return 0;
}
