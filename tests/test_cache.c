/* The thread caches (cache.c): an idle class's cache goes back to its
 * slabs, a flush gives each unit's run of blocks back at once, and a cache
 * that batches overflow grows, then shrinks back when its heap is left. */
#include <pthread.h>

#include "internals.h"

/* A class's cache that two sweeps in a row find untouched goes back to its
 * slabs, and the slabs it held go back to their SuperSlab; a cache the
 * program used between two sweeps stays, and so does one too small to
 * matter (under 32 KiB). */
static void test_idle_caches(void) {
  hak_heap_t *h = hak_heap_get();
  unsigned idle = hak_class_of(48 << 10), used = hak_class_of(20000), small = hak_class_of(64);
  void *b[32];
  for (int i = 0; i < 32; i++) escape(b[i] = malloc(48 << 10));
  for (int i = 0; i < 32; i++) free(b[i]);
  for (int i = 0; i < 8; i++) escape(b[i] = malloc(20000));
  for (int i = 0; i < 8; i++) free(b[i]);
  hak_cache_return(h, small);
  for (int i = 0; i < 8; i++) escape(b[i] = malloc(64));
  for (int i = 0; i < 8; i++) free(b[i]);
  CHECK(hak_cache_count(&h->cache[idle]) > 0 && hak_cache_count(&h->cache[used]) >= 2 &&
            hak_cache_count(&h->cache[small]) > 0, "caches of %u, %u and %u blocks", hak_cache_count(&h->cache[idle]),
        hak_cache_count(&h->cache[used]), hak_cache_count(&h->cache[small]));
  for (int sweep = 0; sweep < 3; sweep++) {
    void *p = malloc(20000), *q = malloc(20000);   /* the two on top change places */
    escape(p);
    escape(q);
    free(p);
    free(q);
    hak_heap_collect_idle(h);
  }
  CHECK(hak_cache_count(&h->cache[idle]) == 0, "an idle cache kept %u blocks", hak_cache_count(&h->cache[idle]));
  CHECK(!h->warm[idle] && !h->full[idle], "the slabs of an idle cache's blocks stayed");
  CHECK(hak_cache_count(&h->cache[used]) >= 2, "a cache in use went back");
  CHECK(hak_cache_count(&h->cache[small]) > 0, "a cache of less than 32 KiB went back");
}

/* A thread that carves new slabs sweeps without waiting for 64 slow-path
 * visits: a new slab counts as a visit per 8 KiB (release.c), so that 24
 * blocks of 96 KiB, a dozen visits but 2.3 MiB of new slabs, find the
 * cache of a size the thread stopped using idle and give it back. */
static void test_idle_caches_paced_by_slabs(void) {
  hak_heap_t *h = hak_heap_get();
  unsigned idle = hak_class_of(48 << 10), big = hak_class_of(96 << 10);
  void *b[32];
  for (int i = 0; i < 32; i++) escape(b[i] = malloc(48 << 10));
  for (int i = 0; i < 32; i++) free(b[i]);
  CHECK(hak_cache_count(&h->cache[idle]) > 0, "no cache of 48 KiB blocks to go idle");
  hak_cache_return(h, big);
  for (int i = 0; i < 24; i++) escape(b[i] = malloc(96 << 10));
  CHECK(hak_cache_count(&h->cache[idle]) == 0, "a cache idle while 2.3 MiB of new slabs were carved kept %u blocks",
        hak_cache_count(&h->cache[idle]));
  for (int i = 0; i < 24; i++) free(b[i]);
}

/* A flush gives each run of blocks of one unit back to its slab at once
 * (cache.c): after batches of 48-byte blocks freed in the order they came
 * and in reverse, the slabs count in use exactly the blocks the cache
 * holds, and once the cache goes back, no block and no slab. */
static void *flush_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(48);
  static unsigned char *b[6000];
  int bad = 0;
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < 6000; i++) memset(b[i] = malloc(48), round + i, 48);
    for (int i = 0; i < 6000; i++) {
      int k = round & 1 ? 5999 - i : i;
      bad += b[k][0] != (unsigned char)(round + k) || b[k][47] != (unsigned char)(round + k);
      free(b[k]);
    }
    CHECK(h->counters[cls].used_blocks == hak_cache_count(&h->cache[cls]),
          "round %d: slabs count %llu blocks in use, the cache holds %u", round,
          (unsigned long long)h->counters[cls].used_blocks, hak_cache_count(&h->cache[cls]));
  }
  CHECK(bad == 0, "%d blocks changed before their free", bad);
  hak_cache_return(h, cls);
  CHECK(h->counters[cls].used_blocks == 0 && h->counters[cls].slabs == 0,
        "after the cache went back: %llu blocks in use, %llu slabs", (unsigned long long)h->counters[cls].used_blocks,
        (unsigned long long)h->counters[cls].slabs);
  return arg;
}

/* ---- cache growth (cache.c): batches that overflow a class's cache make
 * it grow until a batch round trip needs no flush and no refill; the
 * blocks keep their contents; leaving the heap shrinks it back. In a
 * thread of its own, whose heap starts fresh. The cache options change
 * after the heap is made (a program may set them at any time): the heap
 * keeps the layout it was made with. */
#define GROW_BATCH 1000

typedef struct {
  hak_heap_t *h;
  uint32_t first;
} grow_result_t;

static void *grow_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  unsigned cls = hak_class_of(16);
  hak_ucache_t *c = &h->cache[cls];
  uint32_t first = hak_cache_cap(c);
  long bytes = hak_option_get(hak_option_cache_bytes), min = hak_option_get(hak_option_cache_min),
       max = hak_option_get(hak_option_cache_max);
  hak_option_set(hak_option_cache_bytes, 64l << 20);
  hak_option_set(hak_option_cache_min, 64);
  hak_option_set(hak_option_cache_max, 4096);
  static unsigned char *blocks[GROW_BATCH];
  uint64_t flushes = 0, refills = 0;
  int bad = 0;
  for (int round = 0; round < 12; round++) {
    if (round == 8) {
      flushes = h->counters[cls].flushes;
      refills = h->counters[cls].refills;
    }
    for (int i = 0; i < GROW_BATCH; i++) {
      blocks[i] = malloc(16);
      memset(blocks[i], round + i, 16);
    }
    for (int i = 0; i < GROW_BATCH; i++) {
      for (int k = 0; k < 16; k++) bad += blocks[i][k] != (unsigned char)(round + i);
      free(blocks[i]);
    }
  }
  hak_option_set(hak_option_cache_bytes, bytes);
  hak_option_set(hak_option_cache_min, min);
  hak_option_set(hak_option_cache_max, max);
  CHECK(bad == 0, "%d bytes of the batches changed", bad);
  CHECK(hak_cache_cap(c) >= GROW_BATCH && hak_cache_cap(c) <= h->cache_room[cls],
        "cache of 16 B holds %u blocks after batches of %d (first %u, room %u)", hak_cache_cap(c), GROW_BATCH, first,
        h->cache_room[cls]);
  CHECK(h->counters[cls].flushes == flushes && h->counters[cls].refills == refills,
        "the last 4 rounds flushed %llu and refilled %llu times", (unsigned long long)(h->counters[cls].flushes - flushes),
        (unsigned long long)(h->counters[cls].refills - refills));
  *(grow_result_t *)arg = (grow_result_t){h, first};
  return NULL;
}

static void test_cache_growth(void) {
  grow_result_t r = {NULL, 0};
  pthread_t t;
  pthread_create(&t, NULL, grow_thread, &r);
  pthread_join(t, NULL);
  unsigned cls = hak_class_of(16);
  CHECK(r.h && hak_cache_cap(&r.h->cache[cls]) == r.first, "the heap left kept a cache of %u blocks (first %u)",
        r.h ? hak_cache_cap(&r.h->cache[cls]) : 0, r.first);
}

static void test_flush(void) { run_unpurged(flush_thread); }

static const test_case_t cases[] = {
    {"idle_caches", test_idle_caches},
    {"idle_caches_paced_by_slabs", test_idle_caches_paced_by_slabs},
    {"flush", test_flush},
    {"cache_growth", test_cache_growth},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("cache", cases, argc, argv); }
