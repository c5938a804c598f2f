/* soak SECONDS [THREADS] [SAMPLE_MS] [CSV]
 *
 * A long, steady, mixed multi-threaded run that watches the allocator for
 * drift: THREADS (default 4) workers each keep 8192 slots of blocks (sizes:
 * 85% 16..256 B, 13% to 4 KiB, 1.95% to 64 KiB, 0.05% to 1 MiB) and
 * replace a random one per step; one step in eight goes to a shared table
 * of 4096 slots (an atomic exchange), so blocks are freed by other threads
 * too. The live set is stationary: after warm-up the resident set should
 * not move and the throughput should not wander.
 *
 * Every SAMPLE_MS (default 1000) the main thread records the throughput of
 * the interval, the resident set and, under hakmem, the allocator's system
 * calls so far (mmap, munmap, madvise, mremap and the background purger's
 * sleeps, from hak_stats_get); with CSV it writes the samples there
 * (t_s,ops_per_s,rss_kib,syscalls, and under hakmem where its memory is:
 * slab_kib, the tiny and mid slabs in use; large_kib, large blocks in use;
 * free_units_kib, free slab units not given back yet; bigcache_kib; and
 * the adaptive controller's purge_delay_ms and bigcache_budget_kib, so a
 * drift can be traced to its part). One malloc and one free in 256 is timed
 * (clock_gettime, its own ~20 ns included) into a histogram.
 *
 * The result line, with the first 10% of the samples taken as warm-up:
 *   rss_drift_pct    mean RSS of the last 10% of the samples against the
 *                    first 10% after warm-up
 *   tput_cv_pct      coefficient of variation of the interval throughput
 *   syscalls_per_op  after warm-up (-1: not hakmem, not counted)
 *   malloc_p50_ns .. free_p999_ns  latency percentiles
 * Blocks are filled and checked before free (exit 3 on corruption). */
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <unistd.h>

#include "../include/hakmem.h"
#include "bench.h"

#define NAME "soak"
#define SLOTS 8192
#define SHARED 4096
#define TIME_EVERY 256
#define MAX_SAMPLES 100000
/* latency histogram: 16 sub-buckets per power of two of nanoseconds */
#define SUB 16
#define BUCKETS (64 * SUB)

struct worker {
  uint64_t seed;
  uint64_t hist[2][BUCKETS];   /* 0: malloc, 1: free */
  pthread_t tid;
};

static _Atomic int stop;
static _Atomic uint64_t ops_total;
static struct bench_obj *_Atomic shared[SHARED];

static unsigned bucket_of(uint64_t ns) {
  if (ns < SUB) return (unsigned)ns;
  unsigned b = 63u - (unsigned)__builtin_clzll(ns);
  unsigned sub = (unsigned)(ns >> (b - 4)) & (SUB - 1);
  return (b - 3) * SUB + sub;
}

static double bucket_low(unsigned i) {
  if (i < SUB) return i;
  unsigned b = i / SUB + 3, sub = i % SUB;
  return ldexp(1.0 + sub / (double)SUB, (int)b);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static size_t pick_size(uint64_t *rng) {
  uint64_t r = bench_rng(rng) % 10000;
  if (r < 8500) return bench_size(rng, 16, 256);
  if (r < 9800) return bench_size(rng, 257, 4096);
  if (r < 9995) return bench_size(rng, 4097, 65536);
  return bench_size(rng, 65537, 1 << 20);
}

static void obj_free_timed(struct worker *w, struct bench_obj *o, bool timed) {
  if (!timed) {
    bench_obj_free(NAME, o, "before free");
    return;
  }
  if (!bench_check(o->p, o->size, o->tag)) bench_die(3, NAME ": CORRUPTION: object of %u B overwritten", o->size);
  uint64_t t0 = now_ns();
  free(o->p);
  w->hist[1][bucket_of(now_ns() - t0)]++;
  o->p = NULL;
}

static void obj_new_timed(struct worker *w, struct bench_obj *o, size_t size, uint32_t tag, bool timed) {
  if (!timed) {
    bench_obj_new(NAME, o, size, tag);
    return;
  }
  uint64_t t0 = now_ns();
  o->p = malloc(size);
  w->hist[0][bucket_of(now_ns() - t0)]++;
  if (!o->p) BENCH_OOM(NAME, size);
  o->size = (uint32_t)size;
  o->tag = tag;
  memset(o->p, bench_pat(tag, 0), size);   /* filled as bench_obj_new fills */
  bench_mark(o->p, size, tag);
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  uint64_t rng = w->seed;
  struct bench_obj *slot = calloc(SLOTS, sizeof *slot);
  if (!slot) BENCH_OOM(NAME, SLOTS * sizeof *slot);
  uint32_t tag = 0;
  uint64_t ops = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    for (int k = 0; k < 256; k++) {
      bool timed = ++tag % TIME_EVERY == 0;
      uint64_t r = bench_rng(&rng);
      if (r % 8 == 0) {   /* through the shared table: the old block may be another thread's */
        struct bench_obj *o = malloc(sizeof *o);
        if (!o) BENCH_OOM(NAME, sizeof *o);
        obj_new_timed(w, o, pick_size(&rng), tag, timed);
        struct bench_obj *old = atomic_exchange(&shared[(r >> 8) % SHARED], o);
        if (old) {
          obj_free_timed(w, old, timed);
          free(old);
        }
        ops += 2;
      } else {
        struct bench_obj *o = &slot[(r >> 8) % SLOTS];
        if (o->p) obj_free_timed(w, o, timed);
        obj_new_timed(w, o, pick_size(&rng), tag, timed);
        ops += 2;
      }
    }
    atomic_fetch_add_explicit(&ops_total, ops, memory_order_relaxed);
    ops = 0;
  }
  for (int i = 0; i < SLOTS; i++)
    if (slot[i].p) bench_obj_free(NAME, &slot[i], "at the end");
  free(slot);
  return NULL;
}

static void (*stats_get)(struct hak_stats *);

struct sample {
  double t, ops_per_s;
  long rss;
  long long sys;
  uint64_t ops;
};

/* The allocator's system calls so far (-1 outside hakmem); with out, the
 * rest of the CSV line: those calls and where hakmem's memory is now. */
static long long sample_stats(FILE *out) {
  if (!stats_get) {
    if (out) fprintf(out, ",-1\n");
    return -1;
  }
  static struct hak_stats st;
  stats_get(&st);
  long long sys = (long long)(st.os_maps + st.os_unmaps + st.os_decommits + st.os_remaps + st.purger_passes);
  if (out)
    fprintf(out, ",%lld,%llu,%llu,%llu,%llu,%llu,%llu\n", sys, (st.tiny.committed + st.mid.committed) >> 10,
            st.large.committed >> 10, st.dirty_bytes >> 10, st.bigcache_bytes >> 10,
            st.knobs[hak_knob_purge_delay_ms].value, st.knobs[hak_knob_bigcache_budget].value >> 10);
  return sys;
}

static double percentile(const uint64_t *h, double q) {
  uint64_t total = 0;
  for (unsigned i = 0; i < BUCKETS; i++) total += h[i];
  uint64_t want = (uint64_t)ceil(q * (double)total), seen = 0;
  for (unsigned i = 0; i < BUCKETS; i++) {
    seen += h[i];
    if (seen >= want && h[i]) return bucket_low(i);
  }
  return 0;
}

static double mean_rss(const struct sample *s, int from, int to) {
  double sum = 0;
  for (int i = from; i < to; i++) sum += (double)s[i].rss;
  return sum / (to - from);
}

int main(int argc, char **argv) {
  double seconds = (double)bench_arg(argc, argv, 1, 60);
  int threads = (int)bench_arg(argc, argv, 2, 4);
  long sample_ms = bench_arg(argc, argv, 3, 1000);
  const char *csv = argc > 4 ? argv[4] : NULL;
  if (seconds < 1 || threads < 1 || threads > 256 || sample_ms < 10) bench_die(2, "usage: soak SECONDS [THREADS] [SAMPLE_MS] [CSV]");
  stats_get = (void (*)(struct hak_stats *))dlsym(RTLD_DEFAULT, "hak_stats_get");
  FILE *out = csv ? fopen(csv, "w") : NULL;
  if (csv && !out) bench_die(2, NAME ": cannot write %s", csv);
  if (out)
    fprintf(out, "t_s,ops_per_s,rss_kib,syscalls%s\n",
            stats_get ? ",slab_kib,large_kib,free_units_kib,bigcache_kib,purge_delay_ms,bigcache_budget_kib" : "");

  int n = (int)(seconds * 1000 / sample_ms);
  if (n > MAX_SAMPLES) n = MAX_SAMPLES;
  if (n < 10) n = 10;
  struct sample *s = calloc((size_t)n + 1, sizeof *s);
  struct worker *w = calloc((size_t)threads, sizeof *w);
  if (!s || !w) BENCH_OOM(NAME, sizeof *s * (size_t)n);
  for (int i = 0; i < threads; i++) {
    w[i].seed = bench_seed(2026, (uint64_t)i);
    if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) bench_die(1, NAME ": pthread_create failed");
  }
  double start = bench_now(), last = start;
  uint64_t last_ops = 0;
  for (int i = 0; i < n; i++) {
    double due = start + (double)(i + 1) * (double)sample_ms / 1000.0;
    double wait = due - bench_now();
    if (wait > 0) {
      struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
      while (nanosleep(&ts, &ts) != 0) {
      }
    }
    double t = bench_now();
    uint64_t ops = atomic_load(&ops_total);
    s[i] = (struct sample){t - start, (double)(ops - last_ops) / (t - last), bench_rss_kib(), 0, ops};
    if (out) fprintf(out, "%.3f,%.0f,%ld", s[i].t, s[i].ops_per_s, s[i].rss);
    s[i].sys = sample_stats(out);
    last = t;
    last_ops = ops;
  }
  atomic_store(&stop, 1);
  uint64_t hist[2][BUCKETS] = {{0}};
  for (int i = 0; i < threads; i++) {
    pthread_join(w[i].tid, NULL);
    for (int k = 0; k < 2; k++)
      for (unsigned b = 0; b < BUCKETS; b++) hist[k][b] += w[i].hist[k][b];
  }
  for (int i = 0; i < SHARED; i++) {
    struct bench_obj *o = atomic_exchange(&shared[i], NULL);
    if (o) {
      bench_obj_free(NAME, o, "at the end");
      free(o);
    }
  }
  if (out) fclose(out);

  int warm = n / 10 > 0 ? n / 10 : 1, steady = n - warm, tenth = steady / 10 > 0 ? steady / 10 : 1;
  double drift = 100.0 * (mean_rss(s, n - tenth, n) / mean_rss(s, warm, warm + tenth) - 1.0);
  double sum = 0, sq = 0;
  for (int i = warm; i < n; i++) sum += s[i].ops_per_s;
  double mean = sum / steady;
  for (int i = warm; i < n; i++) sq += (s[i].ops_per_s - mean) * (s[i].ops_per_s - mean);
  double cv = 100.0 * sqrt(sq / steady) / mean;
  uint64_t ops = s[n - 1].ops - s[warm - 1].ops;
  double per_op = stats_get && ops ? (double)(s[n - 1].sys - s[warm - 1].sys) / (double)ops : -1;
  long peak = 0;
  for (int i = 0; i < n; i++) peak = s[i].rss > peak ? s[i].rss : peak;
  printf(NAME ": %.0f s, %d threads, samples=%d, rss_start_kib=%.0f, rss_end_kib=%.0f, rss_drift_pct=%.2f, "
              "tput_cv_pct=%.2f, syscalls_per_op=%.3g, malloc_p50_ns=%.0f, malloc_p99_ns=%.0f, malloc_p999_ns=%.0f, "
              "free_p50_ns=%.0f, free_p99_ns=%.0f, free_p999_ns=%.0f, peak_rss_kib=%ld = %.0f ops/s\n",
         seconds, threads, n, mean_rss(s, warm, warm + tenth), mean_rss(s, n - tenth, n), drift, cv, per_op,
         percentile(hist[0], 0.5), percentile(hist[0], 0.99), percentile(hist[0], 0.999), percentile(hist[1], 0.5),
         percentile(hist[1], 0.99), percentile(hist[1], 0.999), peak, mean);
  free(s);
  free(w);
  return 0;
}
