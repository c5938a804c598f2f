/* xthread [PRODUCERS] [CONSUMERS] [ITEMS] [MIN] [MAX] [QCAP] [SEED]
 *
 * Cross-thread free: PRODUCERS threads (default 1) malloc blocks of a random
 * size in MIN..MAX (default 16..512), mark them and push them through bounded
 * lock-free single-producer/single-consumer rings of QCAP (default 1024)
 * slots, one ring per producer/consumer pair, to CONSUMERS threads (default
 * 1) that check and free them; ITEMS (default 10000000) blocks in all.
 * Every free is remote. Producer k's i-th block goes to consumer
 * i % CONSUMERS. Producers publish in batches of 16; a full ring makes its
 * producer wait until a quarter is free. A waiting thread spins briefly, then
 * yields. Default: 1 + 1 = 2 threads.
 * Prints blocks passed (one malloc + one remote free) per second and this
 * process's peak RSS. */
#include <sched.h>
#include <stdatomic.h>

#include "bench.h"

#define NAME "xthread"
#define BATCH 16 /* the producer publishes its tail every BATCH blocks */

struct ring { /* each side re-reads the other's index only when it must */
  _Alignas(64) _Atomic size_t head; /* next slot to read, written by the consumer */
  size_t tail_seen;                 /* consumer's copy of tail */
  _Alignas(64) _Atomic size_t tail; /* next slot to write, written by the producer */
  size_t head_seen;                 /* producer's copy of head */
  size_t next;                      /* producer's next slot (published as tail in batches) */
  _Alignas(64) unsigned char **slot;
};

struct hdr { /* at the start of every block; the last byte follows it */
  uint32_t size;
  uint32_t seq; /* low 32 bits of the producer's sequence number */
};

static long nprod, ncons, items, qcap;
static size_t min_size, max_size;
static uint64_t seed;
static struct ring *rings; /* rings[p * ncons + c] */

static void wait_turn(unsigned *spins) {
  if (++*spins > 64) {
    *spins = 0;
    sched_yield();
  }
}

static long items_of(long p) { return items / nprod + (p < items % nprod); }

static void *producer(void *arg) {
  long p = (long)(intptr_t)arg;
  uint64_t rng = bench_seed(seed, (uint64_t)p + 1);
  long n = items_of(p);
  for (long i = 0; i < n; i++) {
    size_t size = bench_size(&rng, min_size, max_size);
    unsigned char *b = malloc(size);
    if (!b) BENCH_OOM(NAME, size);
    struct hdr h = {(uint32_t)size, (uint32_t)i};
    memcpy(b, &h, sizeof h);
    b[size - 1] = bench_pat((uint32_t)i, size);
    struct ring *r = &rings[p * ncons + i % ncons];
    size_t t = r->next;
    if (t - r->head_seen >= (size_t)qcap) {
      /* full: publish what is written, then wait until a quarter is free,
       * so the two sides do not work on the same cache lines in lockstep */
      atomic_store_explicit(&r->tail, t, memory_order_release);
      unsigned spins = 0;
      for (;;) {
        r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
        if (t - r->head_seen <= (size_t)(qcap - (qcap + 3) / 4)) break;
        wait_turn(&spins);
      }
    }
    r->slot[t % (size_t)qcap] = b;
    r->next = t + 1;
    if ((r->next & (BATCH - 1)) == 0) atomic_store_explicit(&r->tail, r->next, memory_order_release);
  }
  for (long c = 0; c < ncons; c++) { /* publish the rest */
    struct ring *r = &rings[p * ncons + c];
    atomic_store_explicit(&r->tail, r->next, memory_order_release);
  }
  return NULL;
}

struct cons {
  long c;
  uint64_t sum;
};

static void *consumer(void *arg) {
  struct cons *me = arg;
  long c = me->c;
  long expect = 0;
  for (long p = 0; p < nprod; p++) {
    long n = items_of(p);
    expect += n / ncons + (c < n % ncons);
  }
  uint64_t *next_seq = calloc((size_t)nprod, sizeof *next_seq);
  if (!next_seq) BENCH_OOM(NAME, nprod);
  for (long p = 0; p < nprod; p++) next_seq[p] = (uint64_t)c;
  uint64_t sum = 0;
  unsigned spins = 0;
  while (expect > 0) {
    int got = 0;
    for (long p = 0; p < nprod; p++) {
      struct ring *r = &rings[p * ncons + c];
      size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
      if (h == r->tail_seen) r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
      size_t t = r->tail_seen;
      for (; h != t; h++) {
        unsigned char *b = r->slot[h % (size_t)qcap];
        struct hdr hd;
        memcpy(&hd, b, sizeof hd);
        if (hd.seq != (uint32_t)next_seq[p] || hd.size < min_size ||
            hd.size > max_size || b[hd.size - 1] != bench_pat(hd.seq, hd.size))
          BENCH_CORRUPT(NAME, "block from producer %ld is not what was sent", p);
        next_seq[p] += (uint64_t)ncons;
        sum += hd.size;
        free(b);
        expect--;
        got = 1;
      }
      atomic_store_explicit(&r->head, h, memory_order_release);
    }
    if (!got) wait_turn(&spins);
  }
  free(next_seq);
  me->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  bench_usage_if(argc > 8 || bench_help(argc, argv), NAME " [PRODUCERS] [CONSUMERS] [ITEMS] [MIN] [MAX] [QCAP] [SEED]");
  nprod = bench_arg(argc, argv, 1, 1);
  ncons = bench_arg(argc, argv, 2, 1);
  items = bench_arg(argc, argv, 3, 10000000);
  min_size = (size_t)bench_arg(argc, argv, 4, 16);
  max_size = (size_t)bench_arg(argc, argv, 5, 512);
  qcap = bench_arg(argc, argv, 6, 1024);
  seed = (uint64_t)bench_arg(argc, argv, 7, 1);
  if (nprod <= 0 || ncons <= 0 || nprod > 256 || ncons > 256 || items <= 0 || qcap <= 0 ||
      min_size <= sizeof(struct hdr) || max_size < min_size || max_size > UINT32_MAX)
    bench_die(2, NAME ": bad arguments (MIN > %zu)", sizeof(struct hdr));

  rings = aligned_alloc(64, sizeof *rings * (size_t)(nprod * ncons));
  if (!rings) BENCH_OOM(NAME, sizeof *rings);
  for (long i = 0; i < nprod * ncons; i++) {
    atomic_init(&rings[i].head, 0);
    atomic_init(&rings[i].tail, 0);
    rings[i].tail_seen = rings[i].head_seen = rings[i].next = 0;
    rings[i].slot = calloc((size_t)qcap, sizeof(unsigned char *));
    if (!rings[i].slot) BENCH_OOM(NAME, qcap);
  }
  struct bench_thread *th = calloc((size_t)(nprod + ncons), sizeof *th);
  struct cons *cs = calloc((size_t)ncons, sizeof *cs);
  if (!th || !cs) BENCH_OOM(NAME, nprod + ncons);
  for (long c = 0; c < ncons; c++) { /* the consumers first */
    cs[c].c = c;
    th[c] = (struct bench_thread){.fn = consumer, .arg = &cs[c]};
  }
  for (long p = 0; p < nprod; p++)
    th[ncons + p] = (struct bench_thread){.fn = producer, .arg = (void *)(intptr_t)p};
  double secs = bench_run_threads(NAME, th, nprod + ncons, BENCH_CLOCK_RUN);
  uint64_t sum = 0;
  for (long c = 0; c < ncons; c++) sum += cs[c].sum;
  bench_sink = sum;
  for (long i = 0; i < nprod * ncons; i++) free(rings[i].slot);
  free(rings);
  free(th);
  free(cs);
  printf(NAME ": %ld producers, %ld consumers, %ld blocks in %.3f s, peak_rss_kib=%ld = %.0f ops/s\n",
         nprod, ncons, items, secs, bench_peak_rss_kib(), (double)items / secs);
  return 0;
}
