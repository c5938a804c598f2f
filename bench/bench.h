/* Shared helpers for the benchmark programs (header-only, no allocator use).
 *
 * Every benchmark prints exactly one result line on stdout:
 *
 *     <name>: <details, may contain key=value fields> = <number> <unit>
 *
 * e.g. "tiny_hot: 20000000 pairs of 32 B in 0.512 s = 39062500 pairs/s".
 * bench/run.py takes the number after the last " = " as the workload's
 * figure (higher is better) and records every numeric key=value field
 * (peak_rss_kib=..., live_peak_bytes=...) in results/latest.json.
 * Exit status: 0 success, 2 bad arguments, 1 allocation failure,
 * 3 data corruption detected. */
#ifndef HAK_BENCH_H
#define HAK_BENCH_H

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Results are folded into this so the compiler cannot drop the work. */
static volatile uint64_t bench_sink;

static inline uint64_t bench_rng(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static inline uint64_t bench_seed(uint64_t a, uint64_t b) {
  uint64_t s = (a + 1) * 0x9E3779B97F4A7C15ull ^ (b + 7) * 0xBF58476D1CE4E5B9ull;
  return s ? s : 1;
}

/* Random size in [min, max], uniform. */
static inline size_t bench_size(uint64_t *s, size_t min, size_t max) {
  return min + (size_t)((bench_rng(s) >> 16) % (uint64_t)(max - min + 1));
}

/* A log-uniform size in [min, max]: as many sizes per doubling. */
static inline size_t bench_log_size(uint64_t *s, size_t min, size_t max) {
  double u = (double)(bench_rng(s) >> 11) / 9007199254740992.0;
  return (size_t)exp(log((double)min) + u * (log((double)max + 1) - log((double)min)));
}

/* Sleep ms milliseconds, whatever signals interrupt it. */
static inline void bench_nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static inline double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Positional argument i (1-based) as a number, or def when absent. */
static inline long bench_arg(int argc, char **argv, int i, long def) {
  if (i >= argc) return def;
  char *end;
  long v = strtol(argv[i], &end, 0);
  if (*argv[i] == '\0' || *end != '\0') {
    fprintf(stderr, "%s: argument %d (%s) is not a number\n", argv[0], i, argv[i]);
    exit(2);
  }
  return v;
}

static inline int bench_help(int argc, char **argv) {
  return argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
}

static inline void bench_usage_if(int cond, const char *usage) {
  if (cond) {
    fprintf(stderr, "usage: %s\n", usage);
    exit(2);
  }
}

__attribute__((noreturn, format(printf, 2, 3)))
static inline void bench_die(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(status);
}

#define BENCH_OOM(name, n) bench_die(1, "%s: allocation of %zu bytes failed", name, (size_t)(n))
#define BENCH_CORRUPT(name, ...) bench_die(3, name ": CORRUPTION: " __VA_ARGS__)

/* A field of /proc/self/status in KiB (VmHWM, VmRSS), -1 if unreadable. */
static inline long bench_status_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

/* Peak resident set size of this process in KiB. */
/* Resident set in KiB, read with system calls only (no stdio, which
 * allocates): for samplers running beside the workload. */
static inline long bench_rss_kib(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strchr(buf, ' ');
  return p ? strtol(p + 1, NULL, 10) * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static inline long bench_peak_rss_kib(void) {
  long v = bench_status_kib("VmHWM");
  if (v < 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    v = ru.ru_maxrss;
  }
  return v;
}

/* Byte pattern for block contents: depends on a tag and the offset. */
static inline unsigned char bench_pat(uint64_t tag, size_t off) {
  return (unsigned char)((tag * 131u) ^ (off * 7u) ^ (tag >> 8));
}

/* Cheap block signature: first, middle and last byte. */
static inline void bench_mark(unsigned char *p, size_t size, uint64_t tag) {
  p[0] = bench_pat(tag, 0);
  p[size / 2] = bench_pat(tag, size / 2);
  p[size - 1] = bench_pat(tag, size - 1);
}

static inline int bench_check(const unsigned char *p, size_t size, uint64_t tag) {
  return p[0] == bench_pat(tag, 0) && p[size / 2] == bench_pat(tag, size / 2) &&
         p[size - 1] == bench_pat(tag, size - 1);
}

/* A block a workload fills whole and checks before freeing it. */
struct bench_obj {
  unsigned char *p;
  uint32_t size;
  uint32_t tag;
};

static inline void bench_obj_new(const char *name, struct bench_obj *o, size_t size, uint32_t tag) {
  o->p = malloc(size);
  if (!o->p) BENCH_OOM(name, size);
  o->size = (uint32_t)size;
  o->tag = tag;
  memset(o->p, bench_pat(tag, 0), size);
  bench_mark(o->p, size, tag);
}

/* Checks the block (its signature and its second byte) and frees it; exits
 * with status 3 if it was overwritten. */
static inline void bench_obj_free(const char *name, struct bench_obj *o, const char *when) {
  if (!bench_check(o->p, o->size, o->tag) || (o->size > 3 && o->p[1] != bench_pat(o->tag, 0)))
    bench_die(3, "%s: CORRUPTION: object of %u B overwritten (%s)", name, o->size, when);
  free(o->p);
  o->p = NULL;
}

/* One thread of bench_run_threads(): the caller sets fn and arg, the
 * thread runs fn(arg). */
struct bench_thread {
  void *(*fn)(void *);
  void *arg;
  pthread_t tid;            /* set by bench_run_threads */
  pthread_barrier_t *start; /* set by bench_run_threads: NULL or the start gate */
};

/* What the time bench_run_threads() returns covers. */
enum bench_clock {
  BENCH_CLOCK_CREATE, /* from before the first pthread_create: includes thread creation */
  BENCH_CLOCK_RUN,    /* the threads are all created first and wait at a barrier; from
                         their release (all at once) to the last join */
};

static inline void *bench_thread_main(void *arg) {
  struct bench_thread *th = arg;
  if (th->start) pthread_barrier_wait(th->start);
  return th->fn(th->arg);
}

/* Runs th[0..n-1], each on a new thread (created in that order), waits for
 * all of them and returns the seconds that took, measured as timing says.
 * Exits with status 1 if a thread cannot be created. */
static inline double bench_run_threads(const char *name, struct bench_thread *th, long n,
                                       enum bench_clock timing) {
  pthread_barrier_t start;
  int gated = timing == BENCH_CLOCK_RUN;
  if (gated) pthread_barrier_init(&start, NULL, (unsigned)n + 1);
  double t0 = bench_now();
  for (long i = 0; i < n; i++) {
    th[i].start = gated ? &start : NULL;
    if (pthread_create(&th[i].tid, NULL, bench_thread_main, &th[i]) != 0)
      bench_die(1, "%s: pthread_create failed", name);
  }
  if (gated) {
    t0 = bench_now();
    pthread_barrier_wait(&start);
  }
  for (long i = 0; i < n; i++) pthread_join(th[i].tid, NULL);
  double secs = bench_now() - t0;
  if (gated) pthread_barrier_destroy(&start);
  return secs;
}

#endif
