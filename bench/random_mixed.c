/* random_mixed ITERS WS SEED [MIN MAX]
 *
 * The HAKMEM notes' benchmark: each iteration picks a random slot of a
 * working set of WS slots; an occupied slot is freed, an empty one gets a
 * malloc of a random size in MIN..MAX (default 16..1040) whose first and last
 * bytes are written. Prints operations per second. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t rng_state;

static inline uint64_t next_random(void) {   /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s ITERS WS SEED [MIN MAX]\n", argv[0]);
    return 2;
  }
  long iters = atol(argv[1]);
  long ws = atol(argv[2]);
  rng_state = (uint64_t)atol(argv[3]) * 0x9E3779B97F4A7C15ull + 1;
  size_t min = argc > 5 ? (size_t)atol(argv[4]) : 16;
  size_t max = argc > 5 ? (size_t)atol(argv[5]) : 1040;
  if (iters <= 0 || ws <= 0 || min == 0 || max < min) {
    fprintf(stderr, "random_mixed: bad arguments\n");
    return 2;
  }
  unsigned char **slots = calloc((size_t)ws, sizeof *slots);
  if (!slots) return 1;
  size_t span = max - min + 1;

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < iters; i++) {
    uint64_t r = next_random();
    size_t k = (size_t)(r % (uint64_t)ws);
    if (slots[k]) {
      free(slots[k]);
      slots[k] = NULL;
    } else {
      size_t size = min + (size_t)((r >> 32) % span);
      unsigned char *p = malloc(size);
      if (!p) {
        fprintf(stderr, "random_mixed: malloc(%zu) failed\n", size);
        return 1;
      }
      p[0] = (unsigned char)i;
      p[size - 1] = (unsigned char)i;
      slots[k] = p;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  for (long k = 0; k < ws; k++) free(slots[k]);
  free(slots);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("random_mixed: %ld ops in %.3f s = %.0f ops/s\n", iters, secs, (double)iters / secs);
  return 0;
}
