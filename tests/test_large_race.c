/* Large blocks under concurrent remapping.
 *
 * usage: test_large_race [milliseconds]
 *
 * One thread grows large blocks with realloc by half again each step, so
 * that they move to new mappings (the old range is given back to the
 * kernel), while the other threads map fresh large blocks of many sizes,
 * fill them, ask malloc_usable_size, check their contents and free them.
 * The kernel hands a range a moving realloc just left to the next mapping
 * of another thread, so a registry update made in the wrong order calls a
 * live block foreign and the program aborts with "invalid pointer" (before
 * the registry's order was fixed, 3 runs of 20 did). A third kind of thread
 * grows blocks cut from cached chunks into the chunks' kept tails, marking
 * every page, while a fourth trims, which decommits the tails: one dropped
 * under a block that grows into it would zero pages the block just wrote.
 * Every live block must stay ours and keep its contents. Runs for a fixed time (default 1500 ms,
 * scaled by STRESS_SCALE, at least 1000 ms): the race needs many rounds, not
 * a count. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include "check.h"

#define MIB ((size_t)1 << 20)
#define MAPPERS 2
#define GROWERS 2
#define TAILERS 2
#define HELD 4
#define STRIDE ((size_t)64 << 10)

static atomic_int stop;
static atomic_long corruptions, short_blocks, failures, rounds;

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Word-sized marks every STRIDE bytes (clear of the last word) and at the
 * end: enough to see a block that moved without its pages, with few page
 * faults, so that the threads map and move often. */
static void mark_every(unsigned char *p, size_t size, uint64_t seed, size_t stride) {
  for (size_t off = 0; off + 16 <= size; off += stride) memcpy(p + off, &(uint64_t){seed ^ off}, 8);
  memcpy(p + size - 8, &(uint64_t){seed ^ size}, 8);
}

static void mark(unsigned char *p, size_t size, uint64_t seed) { mark_every(p, size, seed, STRIDE); }

static int marked_every(const unsigned char *p, size_t size, size_t upto, uint64_t seed, size_t stride) {
  for (size_t off = 0; off + 16 <= upto; off += stride) {
    uint64_t w;
    memcpy(&w, p + off, 8);
    if (w != (seed ^ off)) return 0;
  }
  uint64_t w;
  memcpy(&w, p + size - 8, 8);
  return w == (seed ^ size);
}

static int marked(const unsigned char *p, size_t size, size_t upto, uint64_t seed) {
  return marked_every(p, size, upto, seed, STRIDE);
}

static void *grower(void *arg) {
  uint64_t rng = splitmix64(1 + (uintptr_t)arg);
  while (!atomic_load(&stop)) {
    size_t size = 160 * 1024 + xorshift64(&rng) % (256 * 1024);
    uint64_t seed = xorshift64(&rng);
    unsigned char *p = T_malloc(size);
    if (!p) {
      atomic_fetch_add(&failures, 1);
      continue;
    }
    mark(p, size, seed);
    while (size < 24 * MIB && !atomic_load(&stop)) {
      size_t bigger = size + size / 2;
      unsigned char *q = T_realloc(p, bigger);
      if (!q) {
        atomic_fetch_add(&failures, 1);
        break;
      }
      /* the old end mark is still at size - 8; the new one goes at the end */
      if (!marked(q, size, size, seed)) atomic_fetch_add(&corruptions, 1);
      p = q;
      size = bigger;
      mark(p, size, seed);
      if (T_usable_size(p) < size) atomic_fetch_add(&short_blocks, 1);
    }
    T_free(p);
    atomic_fetch_add(&rounds, 1);
  }
  return NULL;
}

/* A block of 1.5 MiB freed (the BigCache keeps its chunk, pages
 * resident), then one of 100 KiB that realloc grows by half again each step
 * past 128 KiB, which takes such a chunk and keeps its tail: every page of
 * it marked, and checked after each step. */
static void *tailer(void *arg) {
  const size_t chunk_block = 3 * MIB / 2 - 8192;
  uint64_t rng = splitmix64(200 + (uintptr_t)arg);
  while (!atomic_load(&stop)) {
    unsigned char *a = T_malloc(chunk_block);
    if (!a) {
      atomic_fetch_add(&failures, 1);
      continue;
    }
    mark_every(a, chunk_block, 1, 4096);
    T_free(a);
    size_t size = 100 * 1024;
    uint64_t seed = xorshift64(&rng);
    unsigned char *p = T_malloc(size);
    if (!p) {
      atomic_fetch_add(&failures, 1);
      continue;
    }
    mark_every(p, size, seed, 4096);
    while (size < chunk_block && !atomic_load(&stop)) {
      size_t bigger = size + size / 2 < chunk_block ? size + size / 2 : chunk_block;
      unsigned char *q = T_realloc(p, bigger);
      if (!q) {
        atomic_fetch_add(&failures, 1);
        break;
      }
      if (!marked_every(q, size, size, seed, 4096)) atomic_fetch_add(&corruptions, 1);
      p = q;
      size = bigger;
      mark_every(p, size, seed, 4096);
    }
    if (!marked_every(p, size, size, seed, 4096)) atomic_fetch_add(&corruptions, 1);
    T_free(p);
    atomic_fetch_add(&rounds, 1);
  }
  return NULL;
}

static void *trimmer(void *arg) {
  while (!atomic_load(&stop)) {
    T_trim();
    struct timespec nap = {0, 1000000L};
    nanosleep(&nap, NULL);
  }
  return NULL;
}

struct held {
  unsigned char *p;
  size_t size;
  uint64_t seed;
};

static void *mapper(void *arg) {
  uint64_t rng = splitmix64(100 + (uintptr_t)arg);
  struct held held[HELD] = {{0}};
  while (!atomic_load(&stop)) {
    struct held *h = &held[xorshift64(&rng) % HELD];
    if (h->p) {
      if (T_usable_size(h->p) < h->size) atomic_fetch_add(&short_blocks, 1);
      if (!marked(h->p, h->size, h->size, h->seed)) atomic_fetch_add(&corruptions, 1);
      T_free(h->p);
      h->p = NULL;
      continue;
    }
    h->size = 2 * MIB + xorshift64(&rng) % (10 * MIB);
    h->seed = xorshift64(&rng);
    h->p = T_malloc(h->size);
    if (!h->p) {
      atomic_fetch_add(&failures, 1);
      continue;
    }
    mark(h->p, h->size, h->seed);
  }
  for (int i = 0; i < HELD; i++) T_free(held[i].p);
  return NULL;
}

int main(int argc, char **argv) {
  long ms = argc > 1 ? atol(argv[1]) : stress_scaled(1500);
  if (ms < 1000) ms = 1000;
  pthread_t g[GROWERS], m[MAPPERS], t[TAILERS], trim;
  for (uintptr_t i = 0; i < GROWERS; i++) pthread_create(&g[i], NULL, grower, (void *)i);
  for (uintptr_t i = 0; i < MAPPERS; i++) pthread_create(&m[i], NULL, mapper, (void *)i);
  for (uintptr_t i = 0; i < TAILERS; i++) pthread_create(&t[i], NULL, tailer, (void *)i);
  pthread_create(&trim, NULL, trimmer, NULL);
  long end = now_ms() + ms;
  while (now_ms() < end) {
    struct timespec nap = {0, 20 * 1000000L};
    nanosleep(&nap, NULL);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < GROWERS; i++) pthread_join(g[i], NULL);
  for (int i = 0; i < MAPPERS; i++) pthread_join(m[i], NULL);
  for (int i = 0; i < TAILERS; i++) pthread_join(t[i], NULL);
  pthread_join(trim, NULL);
  CHECK(atomic_load(&rounds) > 0, "the growers finished no round");
  CHECK(atomic_load(&corruptions) == 0, "%ld large blocks lost their contents", atomic_load(&corruptions));
  CHECK(atomic_load(&short_blocks) == 0, "%ld usable sizes below the request", atomic_load(&short_blocks));
  CHECK(atomic_load(&failures) == 0, "%ld allocations failed", atomic_load(&failures));
  printf("large race: %ld grow rounds in %ld ms\n", atomic_load(&rounds), ms);
  return test_done("large_race");
}
