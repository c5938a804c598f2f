/* tiny_hot [PAIRS] [SIZE] [MAXBATCH] [SEED]
 *
 * The allocator's hottest path: one small fixed SIZE (default 32 B), a tiny
 * live set. PAIRS (default 40000000) times in all, allocates a batch of
 * 1..MAXBATCH (default 16) blocks, marks each, then checks and frees them
 * (LIFO or FIFO, chosen at random). Prints malloc/free pairs per second. */
#include "bench.h"

#define NAME "tiny_hot"
#define MAXB 1024

int main(int argc, char **argv) {
  bench_usage_if(argc > 5 || bench_help(argc, argv), NAME " [PAIRS] [SIZE] [MAXBATCH] [SEED]");
  long pairs = bench_arg(argc, argv, 1, 40000000);
  long size = bench_arg(argc, argv, 2, 32);
  long maxbatch = bench_arg(argc, argv, 3, 16);
  uint64_t rng = bench_seed((uint64_t)bench_arg(argc, argv, 4, 1), 0);
  if (pairs <= 0 || size <= 0 || maxbatch <= 0 || maxbatch > MAXB)
    bench_die(2, NAME ": bad arguments (MAXBATCH 1..%d)", MAXB);

  unsigned char *blk[MAXB];
  uint64_t sum = 0;
  long done = 0;
  double t0 = bench_now();
  while (done < pairs) {
    uint64_t r = bench_rng(&rng);
    long n = 1 + (long)(r % (uint64_t)maxbatch);
    if (n > pairs - done) n = pairs - done;
    for (long i = 0; i < n; i++) {
      unsigned char *p = malloc((size_t)size);
      if (!p) BENCH_OOM(NAME, size);
      bench_mark(p, (size_t)size, (uint64_t)(done + i));
      blk[i] = p;
    }
    if (r & (1ull << 40)) {
      for (long i = n - 1; i >= 0; i--) {
        if (!bench_check(blk[i], (size_t)size, (uint64_t)(done + i)))
          BENCH_CORRUPT(NAME, "block %ld of batch at pair %ld", i, done);
        sum += blk[i][0];
        free(blk[i]);
      }
    } else {
      for (long i = 0; i < n; i++) {
        if (!bench_check(blk[i], (size_t)size, (uint64_t)(done + i)))
          BENCH_CORRUPT(NAME, "block %ld of batch at pair %ld", i, done);
        sum += blk[i][0];
        free(blk[i]);
      }
    }
    done += n;
  }
  double secs = bench_now() - t0;
  bench_sink = sum;
  printf(NAME ": %ld pairs of %ld B in %.3f s = %.0f pairs/s\n", pairs, size, secs,
         (double)pairs / secs);
  return 0;
}
