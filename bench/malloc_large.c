/* malloc_large [ITERS] [SLOTS] [MIN_MIB] [MAX_MIB] [SEED]
 *
 * The classic large-block loop (mimalloc-bench's malloc-large): SLOTS
 * (default 20) buffers; ITERS (default 2000) times, a random slot gets a new
 * buffer of a random size between MIN_MIB and MAX_MIB (default 5 and 25
 * MiB), filled whole (as C++'s make_unique<char[]> zero-fills), and only then
 * is the slot's old buffer checked and freed: up to SLOTS + 1 live. Prints
 * buffers per second. */
#include "bench.h"

#define NAME "malloc_large"
#define MAXSLOTS 1024

int main(int argc, char **argv) {
  bench_usage_if(argc > 6 || bench_help(argc, argv), NAME " [ITERS] [SLOTS] [MIN_MIB] [MAX_MIB] [SEED]");
  long iters = bench_arg(argc, argv, 1, 2000);
  long slots = bench_arg(argc, argv, 2, 20);
  long min_mib = bench_arg(argc, argv, 3, 5);
  long max_mib = bench_arg(argc, argv, 4, 25);
  uint64_t rng = bench_seed((uint64_t)bench_arg(argc, argv, 5, 1), 0);
  if (iters < 0 || slots <= 0 || slots > MAXSLOTS || min_mib <= 0 || max_mib < min_mib)
    bench_die(2, NAME ": bad arguments (SLOTS 1..%d)", MAXSLOTS);

  struct bench_obj buf[MAXSLOTS] = {{0}};
  double t0 = bench_now();
  for (long i = 0; i < iters; i++) {
    long k = (long)(bench_rng(&rng) % (uint64_t)slots);
    size_t size = bench_size(&rng, (size_t)min_mib << 20, (size_t)max_mib << 20);
    struct bench_obj o;
    bench_obj_new(NAME, &o, size, (uint32_t)i);
    if (buf[k].p) bench_obj_free(NAME, &buf[k], "replaced");
    buf[k] = o;
  }
  for (long k = 0; k < slots; k++)
    if (buf[k].p) bench_obj_free(NAME, &buf[k], "at the end");
  double secs = bench_now() - t0;
  printf(NAME ": %ld buffers of %ld..%ld MiB, %ld slots in %.3f s = %.0f buffers/s\n", iters, min_mib,
         max_mib, slots, secs, (double)iters / secs);
  return 0;
}
