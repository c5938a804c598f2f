/* fragment [NOBJ] [MIN] [MAX] [FREE_PCT] [SEED]
 *
 * Fragmentation: how much memory the allocator holds compared with what the
 * program has live.
 *  1. malloc NOBJ (default 300000) objects of sizes log-uniform in MIN..MAX
 *     (default 16..4096) and fill each completely;
 *  2. free a random FREE_PCT % (default 90) of them;
 *  3. malloc objects of other sizes -- log-uniform in 1.5*MIN..1.5*MAX --
 *     until the live bytes are back at phase 1's peak, filling them;
 *  4. check and free everything.
 * Prints the live bytes at their peak, the process's peak RSS (VmHWM, which
 * includes ~2 MiB of program, libraries and this program's tables) and their
 * ratio, and mallocs + frees per second. */
#include <math.h>

#include "bench.h"

#define NAME "fragment"

static size_t log_size(uint64_t *rng, double lmin, double lmax) {
  double u = (double)(bench_rng(rng) >> 11) / 9007199254740992.0;
  return (size_t)exp(lmin + u * (lmax - lmin));
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 6 || bench_help(argc, argv), NAME " [NOBJ] [MIN] [MAX] [FREE_PCT] [SEED]");
  long nobj = bench_arg(argc, argv, 1, 300000);
  long min = bench_arg(argc, argv, 2, 16);
  long max = bench_arg(argc, argv, 3, 4096);
  long free_pct = bench_arg(argc, argv, 4, 90);
  uint64_t rng = bench_seed((uint64_t)bench_arg(argc, argv, 5, 1), 0);
  if (nobj <= 0 || min <= 0 || max < min || max > (1L << 30) || free_pct < 0 || free_pct > 100)
    bench_die(2, NAME ": bad arguments");

  /* phase 3 may need more objects than phase 1 freed: room for 2x */
  size_t cap = (size_t)nobj * 2 + 16;
  struct bench_obj *o = calloc(cap, sizeof *o);
  if (!o) BENCH_OOM(NAME, cap * sizeof *o);
  size_t n = 0, live = 0, peak_live = 0;
  long ops = 0;
  double t0 = bench_now();

  double lmin = log((double)min), lmax = log((double)max + 1);
  for (long i = 0; i < nobj; i++) {
    size_t size = log_size(&rng, lmin, lmax);
    bench_obj_new(NAME, &o[n++], size, (uint32_t)i);
    live += size;
    ops++;
  }
  peak_live = live;

  for (size_t i = 0; i < n; i++)
    if ((long)(bench_rng(&rng) % 100) < free_pct) {
      live -= o[i].size;
      bench_obj_free(NAME, &o[i], "phase 2");
      ops++;
    }
  size_t k = 0; /* compact the survivors */
  for (size_t i = 0; i < n; i++)
    if (o[i].p) o[k++] = o[i];
  n = k;

  double lmin3 = log(1.5 * (double)min), lmax3 = log(1.5 * (double)max + 1);
  uint32_t tag = (uint32_t)nobj;
  while (live < peak_live && n < cap) {
    size_t size = log_size(&rng, lmin3, lmax3);
    bench_obj_new(NAME, &o[n++], size, tag++);
    live += size;
    ops++;
  }
  if (live > peak_live) peak_live = live;
  long peak_rss = bench_peak_rss_kib();

  for (size_t i = 0; i < n; i++) {
    bench_obj_free(NAME, &o[i], "phase 4");
    ops++;
  }
  double secs = bench_now() - t0;
  free(o);
  double ratio = (double)peak_rss * 1024.0 / (double)peak_live;
  printf(NAME ": %ld ops in %.3f s, live_peak_bytes=%zu, peak_rss_kib=%ld, rss_over_live=%.3f = %.0f ops/s\n",
         ops, secs, peak_live, peak_rss, ratio, (double)ops / secs);
  return 0;
}
