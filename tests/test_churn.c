/* Thread churn: many short-lived threads, a few at a time.
 *
 * usage: test_churn [threads]
 *
 * Threads run in waves of WAVE. Each thread allocates blocks of mixed
 * sizes, frees about half of them, verifies and frees the blocks handed
 * over by a thread of the previous wave (which has exited by then), and
 * hands its remaining blocks to the next wave. Memory of exited threads
 * must be reused: the resident set after all waves (and a trim) must stay
 * within 64 MiB of what it was after the first wave. The default thread
 * count is scaled by the STRESS_SCALE environment variable (percent). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define RSS_UNRELIABLE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define RSS_UNRELIABLE 1
#endif
#endif

#define WAVE 4
#define BLOCKS 300
#define DEFAULT_THREADS 2000
#define EDGE 256
#define RSS_SLACK ((long)64 << 20)

struct block {
  unsigned char *p;
  size_t size;
  uint64_t seed;
};

/* handoff[n % 2][t] is written by thread t of wave n and consumed by
 * thread (t + WAVE - 1) % WAVE of wave n + 1. */
static struct block handoff[2][WAVE][BLOCKS];
static atomic_long corruptions, alloc_failures;

struct thread_arg {
  int wave, index;
};

static unsigned char pat(size_t i, uint64_t seed) {
  return (unsigned char)(seed >> (i % 8 * 8)) ^ (unsigned char)(i * 13);
}

/* Blocks up to 2 * EDGE bytes are covered completely, bigger ones in their
 * first and last EDGE bytes. */
static void fill(struct block *b) {
  for (size_t i = 0; i < b->size; i++) {
    if (i == EDGE && b->size > 2 * EDGE) i = b->size - EDGE;
    b->p[i] = pat(i, b->seed);
  }
}

static void verify_free(struct block *b) {
  for (size_t i = 0; i < b->size; i++) {
    if (i == EDGE && b->size > 2 * EDGE) i = b->size - EDGE;
    if (b->p[i] != pat(i, b->seed)) {
      if (atomic_fetch_add(&corruptions, 1) < 10)
        fprintf(stderr, "corrupt block %p size %zu at offset %zu\n",
                (void *)b->p, b->size, i);
      break;
    }
  }
  T_free(b->p);
  b->p = NULL;
}

static size_t pick_size(uint64_t *rng) {
  uint64_t r = xorshift64(rng);
  unsigned pct = (unsigned)(r % 100);
  if (pct < 80) return 1 + (r >> 8) % 512;
  if (pct < 99) return 513 + (r >> 8) % (16 * 1024);
  return 16 * 1024 + (r >> 8) % (128 * 1024);
}

static void *churn_thread(void *argp) {
  struct thread_arg *arg = argp;
  uint64_t rng = splitmix64((uint64_t)arg->wave * WAVE + (uint64_t)arg->index);
  struct block own[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    own[i].size = pick_size(&rng);
    own[i].seed = xorshift64(&rng);
    own[i].p = T_malloc(own[i].size);
    if (!own[i].p)
      atomic_fetch_add(&alloc_failures, 1);
    else
      fill(&own[i]);
  }
  for (int i = 0; i < BLOCKS; i++)
    if (own[i].p && xorshift64(&rng) % 2) verify_free(&own[i]);

  struct block *in = handoff[(arg->wave + 1) % 2][(arg->index + 1) % WAVE];
  for (int i = 0; i < BLOCKS; i++)
    if (in[i].p) verify_free(&in[i]);

  memcpy(handoff[arg->wave % 2][arg->index], own, sizeof own);
  return NULL;
}

int main(int argc, char **argv) {
  long total = argc > 1 ? atol(argv[1]) : stress_scaled(DEFAULT_THREADS);
  int waves = (int)(total / WAVE);
  if (waves < 2) waves = 2;
  printf("churn: %d waves of %d threads\n", waves, WAVE);

  long rss_first = 0, create_failures = 0;
  for (int w = 0; w < waves; w++) {
    pthread_t tids[WAVE];
    struct thread_arg args[WAVE];
    int started[WAVE];
    for (int t = 0; t < WAVE; t++) {
      args[t] = (struct thread_arg){w, t};
      started[t] = pthread_create(&tids[t], NULL, churn_thread, &args[t]) == 0;
      if (!started[t]) create_failures++;
    }
    for (int t = 0; t < WAVE; t++)
      if (started[t]) pthread_join(tids[t], NULL);
    if (w == 0) rss_first = rss_bytes();
  }

  for (int t = 0; t < WAVE; t++)
    for (int i = 0; i < BLOCKS; i++)
      if (handoff[(waves - 1) % 2][t][i].p)
        verify_free(&handoff[(waves - 1) % 2][t][i]);
  T_trim();
  long rss_final = rss_bytes();
  printf("churn: rss after first wave %ld KiB, at the end %ld KiB\n",
         rss_first >> 10, rss_final >> 10);

  CHECK(create_failures == 0, "%ld threads failed to start", create_failures);
  CHECK(atomic_load(&corruptions) == 0, "%ld corrupted blocks",
        atomic_load(&corruptions));
  CHECK(atomic_load(&alloc_failures) == 0, "%ld failed allocations",
        atomic_load(&alloc_failures));
#ifndef RSS_UNRELIABLE
  CHECK(rss_first > 0 && rss_final > 0, "could not read /proc/self/statm");
  CHECK(rss_final < rss_first + RSS_SLACK,
        "resident set grew from %ld KiB to %ld KiB", rss_first >> 10,
        rss_final >> 10);
#endif
  return test_done("churn");
}
