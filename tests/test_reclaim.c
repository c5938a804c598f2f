/* Threads that exit while others free their blocks and take their memory.
 *
 * usage: test_reclaim [rounds]
 *
 * Two threads run all along: each keeps a ring of blocks of mixed sizes
 * (tiny, mid and span sizes up to 460 KB), replacing the oldest one at a
 * time, and frees blocks that exited threads left behind. In each round
 * two short-lived threads allocate blocks of the same mix, hand most of
 * them over and exit; the main thread then waits 0-25 ms, so that some of
 * their heaps are older than RECLAIM_AFTER_MS when the next threads come
 * (heap.c): the running threads then take those heaps' emptied
 * SuperSlabs (hak_heap_reclaim_superslab) while blocks are still freed to
 * them, and while new threads adopt them. Every block must keep its
 * contents until it is freed. The default round count (100) is scaled by
 * STRESS_SCALE (percent). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

#define HANDED_MAX 4096
#define RING 256
#define RUNNING 2
#define LEAVING 2
#define LEAVING_BLOCKS 600

struct block {
  unsigned char *p;
  size_t size;
  uint64_t seed;
};

static struct block handed[HANDED_MAX];   /* blocks of exited threads, not yet freed */
static int n_handed;
static pthread_mutex_t handed_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int stop;
static atomic_long corruptions, failures, replaced;

static size_t pick_size(uint64_t *rng) {
  uint64_t x = xorshift64(rng);
  unsigned k = (unsigned)(x % 16);
  return k < 10 ? 16 + x % 1024 : k < 14 ? 1024 + x % 60000 : 60000 + x % 400000;
}

static int fill(struct block *b, uint64_t *rng) {
  b->size = pick_size(rng);
  b->seed = xorshift64(rng);
  b->p = T_malloc(b->size);
  if (!b->p) {
    atomic_fetch_add(&failures, 1);
    return 0;
  }
  pattern_fill(b->p, b->size, b->seed, 0);
  return 1;
}

static void check_free(struct block *b) {
  if (!b->p) return;
  if (!pattern_ok(b->p, b->size, b->seed, 0)) atomic_fetch_add(&corruptions, 1);
  T_free(b->p);
  b->p = NULL;
}

static void *leaving_thread(void *arg) {
  uint64_t rng = splitmix64((uint64_t)(uintptr_t)arg) | 1;
  for (int i = 0; i < LEAVING_BLOCKS; i++) {
    struct block b;
    if (!fill(&b, &rng)) continue;
    pthread_mutex_lock(&handed_lock);
    if (n_handed < HANDED_MAX && i % 8) {
      handed[n_handed++] = b;
      b.p = NULL;
    }
    pthread_mutex_unlock(&handed_lock);
    check_free(&b);
  }
  return NULL;
}

static void *running_thread(void *arg) {
  uint64_t rng = splitmix64((uint64_t)(uintptr_t)arg + 1000) | 1;
  struct block *ring = calloc(RING, sizeof *ring);
  if (!ring) {
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  for (unsigned at = 0; !atomic_load(&stop); at++) {
    struct block *b = &ring[at % RING];
    check_free(b);
    fill(b, &rng);
    struct block h = {0};
    pthread_mutex_lock(&handed_lock);
    if (n_handed && xorshift64(&rng) % 2) h = handed[--n_handed];
    pthread_mutex_unlock(&handed_lock);
    check_free(&h);
    atomic_fetch_add(&replaced, 1);
  }
  for (int i = 0; i < RING; i++) check_free(&ring[i]);
  free(ring);
  return NULL;
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : stress_scaled(100);
  if (rounds < 5) rounds = 5;
  pthread_t running[RUNNING];
  for (long i = 0; i < RUNNING; i++) pthread_create(&running[i], NULL, running_thread, (void *)i);
  uint64_t rng = 99;
  for (long k = 0; k < rounds; k++) {
    pthread_t leaving[LEAVING];
    for (long i = 0; i < LEAVING; i++)
      pthread_create(&leaving[i], NULL, leaving_thread, (void *)(uintptr_t)(k * LEAVING + i + 1));
    for (int i = 0; i < LEAVING; i++) pthread_join(leaving[i], NULL);
    usleep((useconds_t)(xorshift64(&rng) % 25000));
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < RUNNING; i++) pthread_join(running[i], NULL);
  for (int i = 0; i < n_handed; i++) check_free(&handed[i]);
  printf("reclaim: %ld rounds of %d exiting threads, %ld blocks replaced by %d running ones\n", rounds, LEAVING,
         (long)replaced, RUNNING);
  CHECK(corruptions == 0, "%ld blocks lost their contents", (long)corruptions);
  CHECK(failures == 0, "%ld allocations failed", (long)failures);
  CHECK(replaced > 0, "the running threads replaced no block");
  return test_done("reclaim");
}
