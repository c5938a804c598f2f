/* fork() from a multi-threaded process.
 *
 * Worker threads allocate and free continuously (holding whatever locks the
 * allocator takes) while the main thread forks FORKS times. Each child
 * verifies and frees blocks allocated before the fork by the main thread and
 * by the workers, trims, allocates on its own, and starts threads that
 * allocate. The child's threads free the workers' blocks first: glibc gives
 * them the stacks, and so the thread pointers, of the workers the child
 * lacks (hakmem must not take those blocks for theirs). A child must exit 0
 * within CHILD_TIMEOUT_MS or it counts as hung (after three hung children
 * the test stops forking). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"

#define WORKERS 4
#define FORKS 50
#define SHARED 64
#define LOCAL 128
#define MAIN_BLOCKS 32
#define CHILD_THREADS 3
#define CHILD_TIMEOUT_MS 10000
#define MAX_SIZE (((size_t)1 << 20) - 1)

/* Blocks the workers publish; they stay here across forks. */
static _Atomic(unsigned char *) shared[SHARED];
static unsigned char *main_blocks[MAIN_BLOCKS];
static atomic_int stop;
static atomic_long corruptions, alloc_failures;

/* A block starts with a header word (cookie << 20 | size) followed by a
 * pattern derived from it. */
static unsigned char *block_new(uint64_t *rng) {
  uint64_t r = xorshift64(rng);
  size_t size;
  if (r % 100 < 90)
    size = 8 + (r >> 8) % 1024;
  else if (r % 100 < 99)
    size = 1024 + (r >> 8) % (64 * 1024);
  else
    size = 64 * 1024 + (r >> 8) % (MAX_SIZE - 64 * 1024);
  unsigned char *p = T_malloc(size);
  if (!p) {
    atomic_fetch_add(&alloc_failures, 1);
    return NULL;
  }
  uint64_t head = xorshift64(rng) << 20 | size;
  memcpy(p, &head, 8);
  pattern_fill(p, size, head, 1);
  return p;
}

static int block_ok(unsigned char *p) {
  uint64_t head;
  memcpy(&head, p, 8);
  size_t size = head & MAX_SIZE;
  return size >= 8 && T_usable_size(p) >= size && pattern_ok(p, size, head, 1);
}

/* Verifies and frees; returns 1 if the block was corrupt. */
static int block_free(unsigned char *p) {
  int bad = !block_ok(p);
  if (bad) fprintf(stderr, "pid %d: corrupt block %p\n", (int)getpid(), p);
  T_free(p);
  return bad;
}

static void *worker(void *arg) {
  uint64_t rng = splitmix64((uint64_t)(uintptr_t)arg);
  unsigned char *local[LOCAL] = {0};
  long bad = 0;
  while (!atomic_load(&stop)) {
    uint64_t r = xorshift64(&rng);
    size_t i = r % LOCAL;
    if (local[i]) bad += block_free(local[i]);
    local[i] = block_new(&rng);
    if (r % 16 == 0) {
      unsigned char *p = block_new(&rng);
      unsigned char *old = p ? atomic_exchange(&shared[(r >> 8) % SHARED], p)
                             : NULL;
      if (old) bad += block_free(old);
    }
  }
  for (size_t i = 0; i < LOCAL; i++)
    if (local[i]) bad += block_free(local[i]);
  atomic_fetch_add(&corruptions, bad);
  return NULL;
}

static atomic_int inherited;

/* Verify and free the workers' blocks still in shared[]. */
static int free_inherited(void) {
  int bad = 0;
  for (int i = 0; i < SHARED; i++) {
    unsigned char *p = atomic_exchange(&shared[i], NULL);
    if (p) {
      bad += block_free(p);
      atomic_fetch_add(&inherited, 1);
    }
  }
  return bad;
}

static void *child_thread(void *arg) {
  uint64_t rng = splitmix64((uint64_t)(uintptr_t)arg);
  unsigned char *held[64] = {0};
  intptr_t bad = free_inherited();
  for (int i = 0; i < 1000; i++) {
    size_t j = xorshift64(&rng) % 64;
    if (held[j]) bad += block_free(held[j]);
    held[j] = block_new(&rng);
  }
  for (size_t j = 0; j < 64; j++)
    if (held[j]) bad += block_free(held[j]);
  return (void *)bad;
}

/* Runs in the child; returns its exit status: 0 if all went well, 1 if a
 * block was corrupt, 2 if an allocation failed, 3 if a thread could not be
 * started, 4 if the blocks published by the workers were not all there. */
static int child_main(int round) {
  int bad = 0;
  for (int i = 0; i < MAIN_BLOCKS; i++)
    if (main_blocks[i]) bad += block_free(main_blocks[i]);

  uint64_t rng = splitmix64(100000 + (uint64_t)round);
  for (int i = 0; i < 1000; i++) {
    unsigned char *p = block_new(&rng);
    if (p) bad += block_free(p);
  }

  pthread_t tids[CHILD_THREADS];
  int started = 0;
  for (int t = 0; t < CHILD_THREADS; t++) {
    uintptr_t seed = 200000 + (uintptr_t)round * CHILD_THREADS + (uintptr_t)t;
    if (pthread_create(&tids[started], NULL, child_thread, (void *)seed) == 0)
      started++;
  }
  for (int t = 0; t < started; t++) {
    void *ret;
    pthread_join(tids[t], &ret);
    bad += (int)(intptr_t)ret;
  }
  bad += free_inherited();
  T_trim();
  if (bad) return 1;
  if (atomic_load(&alloc_failures)) return 2;
  if (started != CHILD_THREADS) return 3;
  return atomic_load(&inherited) == SHARED ? 0 : 4;
}

/* Waits up to CHILD_TIMEOUT_MS for the child of fork #round, killing it if
 * it hangs, and checks that it exited 0. Returns 1 if it hung. */
static int check_child(pid_t pid, int round) {
  const struct timespec tick = {0, 10 * 1000 * 1000};
  int status = 0;
  for (int ms = 0; ms < CHILD_TIMEOUT_MS; ms += 10) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child #%d: %s %d",
            round, WIFEXITED(status) ? "exit" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      return 0;
    }
    if (r < 0 && errno != EINTR) {
      CHECK(0, "waitpid for child #%d failed: errno %d", round, errno);
      return 0;
    }
    nanosleep(&tick, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  CHECK(0, "child #%d did not finish within %d ms", round, CHILD_TIMEOUT_MS);
  return 1;
}

int main(void) {
  pthread_t tids[WORKERS];
  int started = 0;
  for (int t = 0; t < WORKERS; t++)
    if (pthread_create(&tids[started], NULL, worker,
                       (void *)(uintptr_t)(t + 1)) == 0)
      started++;
  CHECK(started == WORKERS, "started %d of %d workers", started, WORKERS);

  /* Fork only once the workers have filled every shared slot; from then on
   * the slots are never empty in the parent. */
  const struct timespec ms = {0, 1000 * 1000};
  for (int i = 0; i < SHARED; i++)
    while (started && !atomic_load(&shared[i])) nanosleep(&ms, NULL);

  uint64_t rng = splitmix64(12345);
  int hung = 0;
  for (int f = 0; f < FORKS; f++) {
    for (int i = 0; i < MAIN_BLOCKS; i++) main_blocks[i] = block_new(&rng);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_main(f));
    CHECK(pid > 0, "fork #%d failed", f);
    long bad = 0;
    for (int i = 0; i < MAIN_BLOCKS; i++)
      if (main_blocks[i]) bad += block_free(main_blocks[i]);
    atomic_fetch_add(&corruptions, bad);
    if (pid > 0) hung += check_child(pid, f);
    if (hung >= 3) break;
  }

  atomic_store(&stop, 1);
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
  long bad = 0;
  for (int i = 0; i < SHARED; i++) {
    unsigned char *p = atomic_exchange(&shared[i], NULL);
    if (p) bad += block_free(p);
  }
  atomic_fetch_add(&corruptions, bad);
  printf("fork: %d hung children\n", hung);
  CHECK(atomic_load(&corruptions) == 0, "%ld corrupted blocks in the parent",
        atomic_load(&corruptions));
  CHECK(atomic_load(&alloc_failures) == 0, "%ld failed allocations",
        atomic_load(&alloc_failures));
  return test_done("fork");
}
