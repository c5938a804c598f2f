/* Memory goes back to the OS from the heaps of threads that sleep.
 *
 *  - trim: a thread allocates ~96 MiB of mixed blocks, frees them (one kept)
 *    and sleeps; with the purge delay set to a minute and no background
 *    purger, its free memory stays resident until malloc_trim(0) from the
 *    main thread returns it; the sleeping thread's kept block is intact and
 *    it allocates again afterwards.
 *  - decay: the same with a 50 ms delay and the background purger, and no
 *    call at all from the main thread while it waits (it reads RSS with
 *    raw system calls): the resident set falls by itself.
 *    Either way the sleeping thread keeps next to nothing: its caches are
 *    drained (src/heap/drain.c).
 *  - cross: the same two with two sleeping threads that each free the
 *    other's blocks, which wait in the owners' inboxes: malloc_trim(0) from
 *    the main thread takes them back; and in a fresh process (this program
 *    run again, so that no slow path has started the purger yet), where
 *    nothing but those remote frees asks for the background purger, the
 *    resident set falls by itself while the threads sleep, and stays down
 *    after they exit (drains send their partial batches for each other).
 *  - alone: a fresh process with one thread frees memory and gets no
 *    background purger (it keeps one thread); a second thread lets it start.
 *  - race: threads that empty and refill slabs as fast as they can, while
 *    another trims in a loop and the purger sweeps with no delay, and a
 *    fork now and then: every block keeps its contents (the sweeps never
 *    drop a unit in use), and children allocate, trim and exit cleanly.
 *    This one also runs under ThreadSanitizer, through the hak_* API.
 *  - exit: the purger does not keep a process alive once its last thread
 *    calls pthread_exit. */
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"

#define MIB ((long)1 << 20)
#define SLEEPER_BYTES (96 * MIB)
/* What a sleeping thread may keep: its caches and its partial batches of
 * other threads' blocks are drained (16 MiB, its caches' slabs, where the
 * kernel offers no fence for drains; two that free each other's blocks
 * then also keep their batches for each other). */
#define RETURNED_BOUND (drains_possible() ? 4 * MIB : 16 * MIB)
#define BATCHES_BOUND (drains_possible() ? 2 * RETURNED_BOUND : 32 * MIB)

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static size_t churn_once(uint64_t *rng, long bytes, unsigned char **blocks, size_t *sizes, size_t cap) {
  size_t n = 0;
  for (long total = 0; total < bytes && n < cap; n++) {
    size_t size = 16 + xorshift64(rng) % (xorshift64(rng) % 8 == 0 ? 16384 : 1024);
    blocks[n] = T_malloc(size);
    if (!blocks[n]) return 0;
    sizes[n] = size;
    pattern_fill(blocks[n], size, (uintptr_t)blocks[n], 0);
    total += (long)size;
  }
  return n;
}

static int check_and_free(unsigned char **blocks, size_t *sizes, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    bad += !pattern_ok(blocks[i], sizes[i], (uintptr_t)blocks[i], 0);
    T_free(blocks[i]);
  }
  return bad;
}

/* Not under ThreadSanitizer the cases that read the resident set (its
 * shadow memory swamps it) or start threads in a forked child (it cannot). */
#ifndef __SANITIZE_THREAD__
/* Resident bytes read with system calls only (no allocation: the decay test
 * makes no allocator call while it waits). */
static long rss_raw(void) {
  char buf[128];
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/statm", O_RDONLY);
  if (fd < 0) return -1;
  long n = (long)syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = buf;
  while (*p && *p != ' ') p++;
  return strtol(p, NULL, 10) * sysconf(_SC_PAGESIZE);
}

/* ---- threads that allocate, free and sleep */

/* A sleeper allocates SLEEPER_BYTES of blocks, keeps one, and frees the
 * others, or (cross) waits until its partner has allocated too and frees
 * the partner's; then it sleeps until woken, checks its kept block and
 * allocates again. */
struct sleeper {
  sem_t freed, wake;
  pthread_barrier_t *allocated;   /* cross: both have allocated; NULL: own blocks */
  struct sleeper *partner;        /* whose blocks it frees */
  unsigned char **blocks;
  size_t *sizes, n;
  unsigned char *kept;
  size_t kept_size;
  int bad;
};

static void *sleeper_main(void *arg) {
  struct sleeper *s = arg;
  uint64_t rng = 0x5eed + (uintptr_t)s;
  size_t cap = SLEEPER_BYTES / 16;
  s->blocks = T_malloc(cap * sizeof *s->blocks);
  s->sizes = T_malloc(cap * sizeof *s->sizes);
  size_t n = churn_once(&rng, SLEEPER_BYTES, s->blocks, s->sizes, cap);
  size_t k = n / 2;
  s->kept = s->blocks[k];
  s->kept_size = s->sizes[k];
  s->n = --n;
  s->blocks[k] = s->blocks[n];   /* the kept one leaves the list */
  s->sizes[k] = s->sizes[n];
  pattern_fill(s->kept, s->kept_size, 77, 0);
  if (s->allocated) pthread_barrier_wait(s->allocated);
  s->bad += check_and_free(s->partner->blocks, s->partner->sizes, s->partner->n);
  sem_post(&s->freed);
  sem_wait(&s->wake);   /* asleep in the kernel: no allocator call */
  s->bad += !pattern_ok(s->kept, s->kept_size, 77, 0);
  T_free(s->kept);
  n = churn_once(&rng, SLEEPER_BYTES / 4, s->blocks, s->sizes, cap);   /* the returned memory is usable again */
  s->bad += n == 0;
  s->bad += check_and_free(s->blocks, s->sizes, n);
  T_free(s->blocks);
  T_free(s->sizes);
  return NULL;
}

/* n sleepers (1, or 2 with cross) started; returns once they all freed. */
static void sleepers_start(struct sleeper *s, pthread_t *t, int n, bool cross, pthread_barrier_t *allocated) {
  if (cross) pthread_barrier_init(allocated, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    memset(&s[i], 0, sizeof s[i]);
    sem_init(&s[i].freed, 0, 0);
    sem_init(&s[i].wake, 0, 0);
    s[i].allocated = cross ? allocated : NULL;
    s[i].partner = cross ? &s[(i + 1) % n] : &s[i];
  }
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, sleeper_main, &s[i]);
  for (int i = 0; i < n; i++) sem_wait(&s[i].freed);
}

static void sleepers_finish(struct sleeper *s, pthread_t *t, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    sem_post(&s[i].wake);
    pthread_join(t[i], NULL);
    CHECK(s[i].bad == 0, "%s: %d blocks of sleeping thread %d lost their contents", what, s[i].bad, i);
  }
}

/* With no background purger and the delays a minute long, the memory that
 * n sleeping threads freed (their own blocks, or with cross each other's)
 * stays resident until malloc_trim(0) from the main thread returns it. */
static void test_trim_reaches_sleeping_heaps(int n, bool cross, const char *what) {
  hak_option_set(hak_option_background_purge, 0);
  hak_option_set(hak_option_purge_delay_ms, 60000);
  T_trim();
  long base = rss_raw();
  struct sleeper s[2];
  pthread_t t[2];
  pthread_barrier_t allocated;
  sleepers_start(s, t, n, cross, &allocated);
  long freed = rss_raw() - base;
  CHECK(freed > n * SLEEPER_BYTES / 2, "%s: only %ld MiB resident after the sleepers freed (nothing to return)", what,
        freed / MIB);
  T_trim();
  long trimmed = rss_raw() - base, bound = cross ? BATCHES_BOUND : n * RETURNED_BOUND;
  CHECK(trimmed < bound, "%s: %ld MiB still resident (%ld MiB before the trim)", what, trimmed / MIB, freed / MIB);
  sleepers_finish(s, t, n, what);
}

/* RSS above base falls below bound within 10 s with no allocator call;
 * returns what is left. */
static long rss_falls(long base, long bound) {
  long held = rss_raw() - base;
  for (int i = 0; i < 200 && held >= bound; i++) {   /* up to 10 s; the purge delay is expected */
    nap_ms(50);
    held = rss_raw() - base;
  }
  return held;
}

static void test_decay_without_calls(void) {
  hak_option_set(hak_option_background_purge, 1);
  hak_option_set(hak_option_purge_delay_ms, 50);
  T_trim();
  long base = rss_raw();
  struct hak_stats before;
  hak_stats_get(&before);
  struct sleeper s;
  pthread_t t;
  sleepers_start(&s, &t, 1, false, NULL);
  long held = rss_falls(base, RETURNED_BOUND);
  struct hak_stats after;
  hak_stats_get(&after);
  CHECK(held < RETURNED_BOUND, "decay: %ld MiB still resident 10 s after the sleeping thread freed (%llu caches drained)",
        held / MIB, after.cache_drains - before.cache_drains);
  CHECK(after.purger_passes > before.purger_passes, "decay: the background purger never ran");
  sleepers_finish(&s, &t, 1, "decay");
}

/* In a fresh process (run_fresh below), two threads free each other's
 * blocks and sleep: only their remote frees ask for the background purger,
 * and the main thread makes no allocator call while it waits. The blocks
 * in the sleeping owners' inboxes go back, and the memory stays returned
 * once the threads exit. */
static int cross_decay_fresh(void) {
  long base = rss_raw();
  struct sleeper s[2];
  pthread_t t[2];
  pthread_barrier_t allocated;
  sleepers_start(s, t, 2, true, &allocated);
  long held = rss_falls(base, BATCHES_BOUND);
  CHECK(held < BATCHES_BOUND, "cross decay: %ld MiB still resident 10 s after two sleeping threads freed "
        "each other's blocks", held / MIB);
  sleepers_finish(s, t, 2, "cross decay");
  held = rss_falls(base, RETURNED_BOUND);
  CHECK(held < RETURNED_BOUND, "cross decay: %ld MiB still resident 10 s after the threads exited", held / MIB);
  return test_done("release-fresh");
}

/* The threads of this process (/proc/self/stat's num_threads), 0 if unknown. */
static atomic_int alone_bad;

static int threads_now(void) {
  char buf[1024];
  int fd = open("/proc/self/stat", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')');   /* the fields after the command's name; num_threads is the 20th */
  for (int field = 2; p && field < 20; field++) p = strchr(p + 1, ' ');
  return p ? atoi(p + 1) : 0;
}

static sem_t partner_go;

static void *partner(void *arg) {
  uint64_t rng = 31;
  unsigned char *blocks[1024];
  size_t sizes[1024];
  size_t n = churn_once(&rng, 16 * MIB, blocks, sizes, 1024);
  atomic_fetch_add(&alone_bad, n == 0 || check_and_free(blocks, sizes, n));
  sem_wait(&partner_go);
  return arg;
}

/* In a fresh process (run_fresh below) with one thread, what it frees asks
 * for the background purger, which does not start: the process keeps its
 * one thread, as under glibc (Python 3.12 warns at a fork() in a process
 * with threads, unshare(CLONE_NEWUSER) refuses one). A second thread that
 * uses the allocator lets it start. */
static int alone_fresh(void) {
  uint64_t rng = 17;
  static unsigned char *blocks[4096];
  static size_t sizes[4096];
  for (int round = 0; round < 3; round++) {   /* the delays pass between rounds */
    size_t n = churn_once(&rng, 16 * MIB, blocks, sizes, 4096);
    atomic_fetch_add(&alone_bad, n == 0 || check_and_free(blocks, sizes, n));
    nap_ms(120);
  }
  struct hak_stats st;
  hak_stats_get(&st);
  CHECK(threads_now() == 1, "alone: %d threads in a program that started none", threads_now());
  CHECK(st.purger_passes == 0, "alone: the background purger ran (%llu passes) in a program with one thread",
        st.purger_passes);
  sem_init(&partner_go, 0, 0);
  pthread_t t;
  pthread_create(&t, NULL, partner, NULL);
  for (int i = 0; i < 100 && st.purger_passes == 0; i++) {   /* up to 10 s */
    size_t n = churn_once(&rng, 2 * MIB, blocks, sizes, 4096);
    atomic_fetch_add(&alone_bad, n == 0 || check_and_free(blocks, sizes, n));
    nap_ms(100);
    hak_stats_get(&st);
  }
  CHECK(st.purger_passes > 0, "alone: no purger pass with a second thread");
  sem_post(&partner_go);
  pthread_join(t, NULL);
  CHECK(atomic_load(&alone_bad) == 0, "alone: %d blocks lost their contents", atomic_load(&alone_bad));
  return test_done("release-alone");
}

/* This program again, as "test_release --fresh arg", and the purge delay of
 * 50 ms: it must exit with status 0 (its checks print their own RESULT
 * line). */
static void run_fresh(const char *arg) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("HAKMEM_PURGE_DELAY_MS", "50", 1);
    execl("/proc/self/exe", "test_release", "--fresh", arg, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "%s: the fresh process ended with status %#x", arg, status);
}

static void test_cross_decay(void) { run_fresh("cross-decay"); }
static void test_alone(void) { run_fresh("alone"); }

/* ---- the purger does not keep a process alive: when the last thread
 * calls pthread_exit, the process ends */

static void *churn_a_while(void *arg) {
  uint64_t rng = 4242;
  unsigned char *blocks[1024];
  size_t sizes[1024];
  for (int r = 0; r < 20; r++) {
    size_t n = churn_once(&rng, 2 * MIB, blocks, sizes, 1024);
    if (check_and_free(blocks, sizes, n)) _exit(3);
  }
  return arg;
}

static void test_last_thread_exit_ends_process(void) {
  pid_t pid = fork();
  if (pid == 0) {
    pthread_t t;
    pthread_create(&t, NULL, churn_a_while, NULL);
    pthread_join(t, NULL);
    churn_a_while(NULL);
    nap_ms(100);   /* the delays pass: the purger has work and runs */
    pthread_exit(NULL);
  }
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 200 && got == 0; i++) {   /* up to 20 s */
    nap_ms(100);
    got = waitpid(pid, &status, WNOHANG);
  }
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECK(got == pid, "a process whose last thread called pthread_exit was still alive 20 s later");
  CHECK(got != pid || (WIFEXITED(status) && WEXITSTATUS(status) == 0), "it ended with status %#x", status);
}

static void test_trim(void) { test_trim_reaches_sleeping_heaps(1, false, "trim"); }
static void test_cross_trim(void) { test_trim_reaches_sleeping_heaps(2, true, "cross trim"); }
#endif

/* ---- sweeps racing with the owners' reuse of the same units */

static atomic_int stop, race_bad;

static void *refiller(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg;
  enum { N = 4096 };
  static __thread unsigned char *blocks[N];
  static __thread size_t sizes[N];
  while (!atomic_load(&stop)) {
    size_t n = churn_once(&rng, 4 * MIB, blocks, sizes, N);
    atomic_fetch_add(&race_bad, n == 0);
    atomic_fetch_add(&race_bad, check_and_free(blocks, sizes, n));
  }
  return NULL;
}

static void *trimmer(void *arg) {
  while (!atomic_load(&stop)) T_trim();
  return NULL;
}

static void test_sweeps_race_reuse(void) {
#ifdef __SANITIZE_THREAD__
  bool purger_in_child = false;   /* ThreadSanitizer cannot start a thread after a fork */
#else
  bool purger_in_child = true;
#endif
  hak_option_set(hak_option_background_purge, 1);
  hak_option_set(hak_option_purge_delay_ms, 0);
  pthread_t r[3], tr;
  for (uintptr_t i = 0; i < 3; i++) pthread_create(&r[i], NULL, refiller, (void *)(i * 7919 + 1));
  pthread_create(&tr, NULL, trimmer, NULL);
  long rounds = stress_scaled(20);
  int children_bad = 0;
  for (long i = 0; i < rounds; i++) {
    nap_ms(50);
    pid_t pid = fork();
    if (pid == 0) {
      if (!purger_in_child) hak_option_set(hak_option_background_purge, 0);
      uint64_t rng = 99;
      unsigned char *blocks[512];
      size_t sizes[512];
      size_t n = churn_once(&rng, MIB, blocks, sizes, 512);
      int bad = n == 0 || check_and_free(blocks, sizes, n);
      T_trim();
      n = churn_once(&rng, MIB, blocks, sizes, 512);
      bad |= n == 0 || check_and_free(blocks, sizes, n);
      _exit(bad);
    }
    int status = 0;
    children_bad += pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(r[i], NULL);
  pthread_join(tr, NULL);
  CHECK(atomic_load(&race_bad) == 0, "race: %d blocks lost their contents while sweeps ran", atomic_load(&race_bad));
  CHECK(children_bad == 0, "race: %d forked children failed", children_bad);
}

static const test_case_t cases[] = {
#ifndef __SANITIZE_THREAD__
    {"exit", test_last_thread_exit_ends_process},
    {"trim", test_trim},
    {"cross_trim", test_cross_trim},
    {"decay", test_decay_without_calls},
    {"cross_decay", test_cross_decay},
    {"alone", test_alone},   /* (ThreadSanitizer has a thread of its own) */
#endif
    {"race", test_sweeps_race_reuse},
};

int main(int argc, char **argv) {
#ifndef __SANITIZE_THREAD__
  if (argc == 3 && strcmp(argv[1], "--fresh") == 0 && strcmp(argv[2], "cross-decay") == 0) return cross_decay_fresh();
  if (argc == 3 && strcmp(argv[1], "--fresh") == 0 && strcmp(argv[2], "alone") == 0) return alone_fresh();
#endif
  return RUN_CASES("release", cases, argc, argv);
}
