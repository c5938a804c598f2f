/* Drains (src/heap/drain.c, docs/design/thread-memory.md): another thread takes a
 * heap's unified caches back while the heap's thread runs its fast paths.
 *
 *  - race: worker threads replace blocks of a small ring (tiny and mid
 *    sizes, so that nearly every malloc and free is a fast path), an eighth
 *    of them through a shared exchange (frees of other threads' blocks);
 *    workers exit and new ones start now and then; a signal handler that
 *    sleeps in the kernel interrupts them, in the middle of a fast path as
 *    often as not; and a trimmer thread calls malloc_trim(0) in a loop,
 *    which drains every other thread's caches. Every block keeps its
 *    contents until it is freed (a block handed out twice, or taken back
 *    while in use, is overwritten), drains happen, and the workers' caches
 *    work again after each.
 *  - idle: a thread fills its caches, frees blocks of the main thread too
 *    (its partial batches of remote frees) and sleeps: malloc_trim(0) from
 *    the main thread returns its caches and sends its batches (the drain
 *    counts grow), and when it wakes, its kept block is intact and it
 *    allocates and frees again, the main thread's blocks too.
 * Both also run under ThreadSanitizer, through the hak_* API. Where the
 * kernel offers no fence (drains_possible), no cache may be drained, and
 * every block must still keep its contents. */
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>
#include "check.h"

#define RING 128
#define EXCHANGE 64
#define WORKERS 3

static _Atomic(unsigned char *) exchange[EXCHANGE];
static atomic_int stop, corrupt, failed;
static atomic_long replaced;

/* A block's size is in its first word, its pattern after it. */
static unsigned char *block_new(uint64_t *rng) {
  uint64_t x = xorshift64(rng);
  size_t size = x % 16 < 13 ? 16 + x % 1024 : 1024 + x % 65536;
  unsigned char *p = T_malloc(size);
  if (!p) {
    atomic_fetch_add(&failed, 1);
    return NULL;
  }
  memcpy(p, &size, sizeof size);
  pattern_fill(p, size, (uintptr_t)p ^ size, 1);
  return p;
}

static void block_free(unsigned char *p) {
  if (!p) return;
  size_t size;
  memcpy(&size, p, sizeof size);
  if (size < 16 || size > 1024 + 65536 || !pattern_ok(p, size, (uintptr_t)p ^ size, 1)) atomic_fetch_add(&corrupt, 1);
  T_free(p);
}

static void *worker(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15u + 1;
  unsigned char *ring[RING];
  for (int i = 0; i < RING; i++) ring[i] = block_new(&rng);
  long rounds = 20000 + (long)(xorshift64(&rng) % 40000);   /* then the thread exits */
  for (long r = 0; r < rounds && !atomic_load_explicit(&stop, memory_order_relaxed); r++) {
    uint64_t x = xorshift64(&rng);
    unsigned i = (unsigned)(x % RING);
    if (x % 8 == 0) ring[i] = atomic_exchange(&exchange[(x >> 8) % EXCHANGE], ring[i]);
    block_free(ring[i]);
    ring[i] = block_new(&rng);
  }
  for (int i = 0; i < RING; i++) block_free(ring[i]);
  atomic_fetch_add(&replaced, rounds);
  return NULL;
}

static void *trimmer(void *arg) {
  while (!atomic_load(&stop)) T_trim();
  return NULL;
}

/* Sleeps in the kernel in the middle of whatever the worker was doing. */
static void on_signal(int sig) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

static bool drained_since(const struct hak_stats *before) {
  struct hak_stats now;
  hak_stats_get(&now);
  return now.cache_drains > before->cache_drains;
}

static void test_race(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, NULL);
  struct hak_stats before, after;
  hak_stats_get(&before);
  pthread_t w[WORKERS], tr;
  uintptr_t started = 0;
  for (int i = 0; i < WORKERS; i++) pthread_create(&w[i], NULL, worker, (void *)++started);
  pthread_create(&tr, NULL, trimmer, NULL);
  long target = stress_scaled(400000);
  /* on until target blocks were replaced, and a drain seen (Valgrind may
   * run the trimmer late), 20 times that at most */
  bool wait_drain = drains_possible();
  for (unsigned k = 0;
       atomic_load(&replaced) < target || (wait_drain && atomic_load(&replaced) < 20 * target && !drained_since(&before));
       k++) {
    for (int i = 0; i < WORKERS; i++) {
      if (pthread_tryjoin_np(w[i], NULL) == 0) pthread_create(&w[i], NULL, worker, (void *)++started);
      else if (k % 4 == 0) pthread_kill(w[i], SIGUSR1);
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < WORKERS; i++) pthread_join(w[i], NULL);
  pthread_join(tr, NULL);
  for (int i = 0; i < EXCHANGE; i++) block_free(atomic_exchange(&exchange[i], NULL));
  hak_stats_get(&after);
  printf("race: %ld blocks replaced, %llu caches drained, %llu blocks taken back, %llu remote-free batches sent\n",
         atomic_load(&replaced), after.cache_drains - before.cache_drains, after.drained_blocks - before.drained_blocks,
         after.drained_batches - before.drained_batches);
  CHECK(atomic_load(&corrupt) == 0, "race: %d blocks lost their contents while drains ran", atomic_load(&corrupt));
  CHECK(atomic_load(&failed) == 0, "race: %d allocations failed", atomic_load(&failed));
  if (drains_possible())
    CHECK(after.cache_drains > before.cache_drains, "race: no cache was drained (%llu before, %llu after)",
          before.cache_drains, after.cache_drains);
  else
    CHECK(after.cache_drains == before.cache_drains && after.drained_batches == before.drained_batches,
          "race: caches drained without the kernel's fence");
  signal(SIGUSR1, SIG_DFL);
}

enum { FOREIGN = 64 };   /* blocks of the main thread an idler frees before it sleeps, and after */

struct idler {
  sem_t freed, wake;
  unsigned char *kept;
  unsigned char *foreign[2][FOREIGN];
  int bad;
};

static void *idler_main(void *arg) {
  struct idler *d = arg;
  uint64_t rng = 77;
  enum { N = 4096 };
  static unsigned char *blocks[N];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) blocks[i] = block_new(&rng);
    if (round == 0) d->kept = blocks[N / 2], blocks[N / 2] = NULL;
    for (int i = 0; i < N; i++) block_free(blocks[i]);
    for (int i = 0; i < FOREIGN; i++) block_free(d->foreign[round][i]);
    if (round == 0) {
      sem_post(&d->freed);
      sem_wait(&d->wake);   /* asleep, its caches full, while main trims */
    }
  }
  block_free(d->kept);
  return NULL;
}

static void test_idle(void) {
  struct idler d;
  memset(&d, 0, sizeof d);
  sem_init(&d.freed, 0, 0);
  sem_init(&d.wake, 0, 0);
  uint64_t rng = 5;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < FOREIGN; i++) d.foreign[r][i] = block_new(&rng);
  pthread_t t;
  pthread_create(&t, NULL, idler_main, &d);
  sem_wait(&d.freed);
  struct hak_stats before, after;
  hak_stats_get(&before);
  T_trim();
  hak_stats_get(&after);
  if (drains_possible()) {
    CHECK(after.drained_blocks > before.drained_blocks, "idle: trim drained no block of the sleeping thread's caches");
    CHECK(after.drained_batches > before.drained_batches,
          "idle: trim sent none of the sleeping thread's batches of the main thread's blocks");
  } else {
    CHECK(after.drained_blocks == before.drained_blocks && after.drained_batches == before.drained_batches,
          "idle: caches drained without the kernel's fence");
  }
  sem_post(&d.wake);
  pthread_join(t, NULL);
  CHECK(atomic_load(&corrupt) == 0, "idle: %d blocks lost their contents", atomic_load(&corrupt));
}

static const test_case_t cases[] = {
    {"idle", test_idle},
    {"race", test_race},
};

int main(int argc, char **argv) {
  return RUN_CASES("drain", cases, argc, argv);
}
