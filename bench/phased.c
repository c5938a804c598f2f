/* phased [SCALE/1000] [SEED] [TRACE_FILE]
 *
 * A server whose load changes phase, for tuning that must follow it (the
 * adaptive controller) and for the fixed profiles it is measured against.
 * SCALE (default 1000, thousandths) scales every count.
 *
 *  burst    2 threads replace small blocks (16..256 B) in 50,000 slots
 *           each, 1,000,000 times each; then each keeps 5% of its blocks
 *           (a session cache) and the threads exit.
 *  quiet    1 s without any allocator call: what is given back unasked.
 *  buffers  the main thread replaces buffers (4 KiB..1 MiB, log-uniform) in
 *           500 slots, 50,000 times, then frees them.
 *  threads  two waves of 8 threads (more than the cores) replace blocks of
 *           16 B..4 KiB in 4,000 slots each, 200,000 times each.
 *  end      the session cache is freed; RSS 1 s later.
 *
 * Every block is filled, checked and freed (exit 3 on corruption). The
 * figure is mallocs + frees per second of the busy phases (the quiet
 * second and the end's wait left out); key=value fields give each busy
 * phase's seconds and the RSS (KiB) at the end of every phase.
 *
 * TRACE_FILE: a thread samples every TRACE_MS and writes one line per sample
 * to the file at the end: "ms phase rss_kib", and when hakmem is the
 * allocator (found with dlsym) its knobs (docs/ace.md), BigCache bytes and
 * free slab bytes not given back yet. The sampler itself never allocates. */
#include <dlfcn.h>
#include <stdatomic.h>

#include "../include/hakmem.h"
#include "bench.h"

#define NAME "phased"

static double scale = 1.0;
static uint64_t seed;
static _Atomic long ops_total;

static long scaled(long n) {
  long v = (long)((double)n * scale);
  return v > 1 ? v : 1;
}

/* Replace random slots of o[0..slots-1] steps times with blocks of
 * min..max bytes (log-uniform); returns the mallocs and frees done. */
static long churn(struct bench_obj *o, long slots, long steps, size_t min, size_t max, uint64_t *rng, uint32_t *tag) {
  long ops = 0;
  for (long i = 0; i < steps; i++) {
    struct bench_obj *x = &o[bench_rng(rng) % (uint64_t)slots];
    if (x->p) {
      bench_obj_free(NAME, x, "replaced");
      ops++;
    }
    bench_obj_new(NAME, x, bench_log_size(rng, min, max), (*tag)++);
    ops++;
  }
  return ops;
}

/* ---- the trace */

#define TRACE_MS 20
#define TRACE_MAX 4096
struct sample {
  long ms, rss_kib;
  int phase;
  unsigned long long knobs[hak_knob_count], bigcache_bytes, dirty_bytes;
};
static struct sample trace[TRACE_MAX];
static long traced;
static _Atomic int phase, tracing;
static const char *const phase_names[] = {"burst", "quiet", "buffers", "threads", "end"};
static void (*stats_get)(struct hak_stats *);

static void *sampler(void *arg) {
  (void)arg;
  static struct hak_stats st;
  double t0 = bench_now();
  while (atomic_load(&tracing) && traced < TRACE_MAX) {
    struct sample *s = &trace[traced++];
    s->ms = (long)((bench_now() - t0) * 1000);
    s->phase = atomic_load(&phase);
    s->rss_kib = bench_rss_kib();
    if (stats_get) {
      stats_get(&st);
      for (int k = 0; k < hak_knob_count; k++) s->knobs[k] = st.knobs[k].value;
      s->bigcache_bytes = st.bigcache_bytes;
      s->dirty_bytes = st.dirty_bytes;
    }
    bench_nap_ms(TRACE_MS);
  }
  return NULL;
}

static void trace_write(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) bench_die(2, NAME ": cannot write %s", path);
  fprintf(f, "ms phase rss_kib");
#define KNOB_(name, doc) fprintf(f, " " #name);
  HAK_STATS_KNOBS(KNOB_)
#undef KNOB_
  fprintf(f, " bigcache_bytes dirty_bytes\n");
  for (long i = 0; i < traced; i++) {
    const struct sample *s = &trace[i];
    fprintf(f, "%ld %s %ld", s->ms, phase_names[s->phase], s->rss_kib);
    for (int k = 0; k < hak_knob_count; k++) fprintf(f, " %llu", s->knobs[k]);
    fprintf(f, " %llu %llu\n", s->bigcache_bytes, s->dirty_bytes);
  }
  fclose(f);
}

static long drop_all(struct bench_obj *o, long n) {
  long ops = 0;
  for (long i = 0; i < n; i++)
    if (o[i].p) {
      bench_obj_free(NAME, &o[i], "freed at the end");
      ops++;
    }
  return ops;
}

struct burst_arg {
  uint64_t id;
  struct bench_obj *kept;   /* the session cache this thread leaves */
  long kept_n;
};

static void *burst_thread(void *p) {
  struct burst_arg *a = p;
  uint64_t rng = bench_seed(seed, a->id);
  long slots = scaled(50000);
  struct bench_obj *o = calloc((size_t)slots, sizeof *o);
  if (!o) BENCH_OOM(NAME, (size_t)slots * sizeof *o);
  uint32_t tag = 0;
  long ops = churn(o, slots, scaled(1000000), 16, 256, &rng, &tag);
  long keep = slots / 20;
  a->kept = o;   /* slots 0..keep-1 stay live; the rest go */
  a->kept_n = keep;
  ops += drop_all(o + keep, slots - keep);
  atomic_fetch_add(&ops_total, ops);
  return NULL;
}

static void *wave_thread(void *p) {
  uint64_t rng = bench_seed(seed, (uint64_t)(uintptr_t)p);
  long slots = scaled(4000);
  struct bench_obj *o = calloc((size_t)slots, sizeof *o);
  if (!o) BENCH_OOM(NAME, (size_t)slots * sizeof *o);
  uint32_t tag = 0;
  long ops = churn(o, slots, scaled(200000), 16, 4096, &rng, &tag);
  ops += drop_all(o, slots);
  free(o);
  atomic_fetch_add(&ops_total, ops);
  return NULL;
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 4 || bench_help(argc, argv), NAME " [SCALE/1000] [SEED] [TRACE_FILE]");
  scale = (double)bench_arg(argc, argv, 1, 1000) / 1000.0;
  seed = (uint64_t)bench_arg(argc, argv, 2, 42);
  bench_usage_if(scale <= 0, NAME ": SCALE must be > 0");
  pthread_t sampler_id;
  if (argc > 3) {
    *(void **)&stats_get = dlsym(RTLD_DEFAULT, "hak_stats_get");
    atomic_store(&tracing, 1);
    if (pthread_create(&sampler_id, NULL, sampler, NULL)) bench_die(2, NAME ": cannot start the sampler");
  }

  enum { BURST_THREADS = 2, WAVES = 2, WAVE_THREADS = 8 };
  struct burst_arg burst[BURST_THREADS];
  struct bench_thread th[WAVE_THREADS];
  for (int i = 0; i < BURST_THREADS; i++) {
    burst[i] = (struct burst_arg){(uint64_t)i, NULL, 0};
    th[i] = (struct bench_thread){burst_thread, &burst[i], 0, NULL};
  }
  double burst_s = bench_run_threads(NAME, th, BURST_THREADS, BENCH_CLOCK_CREATE);
  long burst_rss = bench_status_kib("VmRSS");

  atomic_store(&phase, 1);
  bench_nap_ms(1000);
  long quiet_rss = bench_status_kib("VmRSS");

  atomic_store(&phase, 2);
  uint64_t rng = bench_seed(seed, 100);
  long slots = scaled(500);
  struct bench_obj *buf = calloc((size_t)slots, sizeof *buf);
  if (!buf) BENCH_OOM(NAME, (size_t)slots * sizeof *buf);
  uint32_t tag = 0;
  double t0 = bench_now();
  long ops = churn(buf, slots, scaled(50000), 4096, 1 << 20, &rng, &tag);
  ops += drop_all(buf, slots);
  double buffers_s = bench_now() - t0;
  free(buf);
  atomic_fetch_add(&ops_total, ops);
  long buffers_rss = bench_status_kib("VmRSS");

  atomic_store(&phase, 3);
  double threads_s = 0;
  for (int w = 0; w < WAVES; w++) {
    for (int i = 0; i < WAVE_THREADS; i++)
      th[i] = (struct bench_thread){wave_thread, (void *)(uintptr_t)(1000 + w * WAVE_THREADS + i), 0, NULL};
    threads_s += bench_run_threads(NAME, th, WAVE_THREADS, BENCH_CLOCK_CREATE);
  }
  long threads_rss = bench_status_kib("VmRSS");

  atomic_store(&phase, 4);
  long end_ops = 0;
  for (int i = 0; i < BURST_THREADS; i++) {
    end_ops += drop_all(burst[i].kept, burst[i].kept_n);
    free(burst[i].kept);
  }
  atomic_fetch_add(&ops_total, end_ops);
  bench_nap_ms(1000);
  long end_rss = bench_status_kib("VmRSS");

  if (argc > 3) {
    atomic_store(&tracing, 0);
    pthread_join(sampler_id, NULL);
    trace_write(argv[3]);
  }
  double busy = burst_s + buffers_s + threads_s;
  printf(NAME ": burst_s=%.3f burst_rss_kib=%ld quiet_rss_kib=%ld buffers_s=%.3f buffers_rss_kib=%ld "
              "threads_s=%.3f threads_rss_kib=%ld end_rss_kib=%ld peak_rss_kib=%ld = %.0f ops/s\n",
         burst_s, burst_rss, quiet_rss, buffers_s, buffers_rss, threads_s, threads_rss, end_rss,
         bench_peak_rss_kib(), (double)atomic_load(&ops_total) / busy);
  return 0;
}
