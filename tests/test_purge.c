/* Memory going back to the OS after the purge delay: the resident set
 * after a free of 51 MB, after the delay and after a trim; an empty
 * SuperSlab stays with its heap, pages and all, for the delay, then goes. */
#include <unistd.h>

#include "internals.h"

/* A SuperSlab that empties stays with its heap, pages and all, for the
 * purge delay: a thread whose footprint swings by SuperSlabs takes it back
 * without a page fault. Then it goes to the shared pool (with
 * KEEP_EMPTY_SUPERSLABS 0). Outside the arena, where no background sweep
 * reaches it, it goes at once. */
static void test_empty_superslab(void) {
  long keep = hak_option_get(hak_option_keep_empty_superslabs);
  hak_option_set(hak_option_keep_empty_superslabs, 0);
  hak_trim();
  hak_heap_t *h = hak_heap_get();
  enum { N = 64 };   /* 64 x 100 KB: more than two SuperSlabs */
  static char *blocks[N];
  for (int i = 0; i < N; i++) memset(blocks[i] = malloc(100000), 1, 100000);
  hak_superslab_t *ss = hak_ss_of(blocks[N / 2]);   /* between two others: only these blocks' */
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_cache_return(h, hak_class_of(100000));
  if (getenv("TEST_NO_ARENA")) {
    CHECK(ss->owner != h, "an empty SuperSlab outside the arena stayed with its heap");
    hak_option_set(hak_option_keep_empty_superslabs, keep);
    return;
  }
  CHECK(ss->owner == h && ss->free_units == HAK_UNITS_ALL, "an empty SuperSlab left its heap at once");
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t decommits = st.os_decommits;
  long rss = rss_kib();
  for (int i = 0; i < N; i++) memset(blocks[i] = malloc(100000), 2, 100000);
  int again = 0;
  for (int i = 0; i < N; i++) again += hak_ss_of(blocks[i]) == ss;
  hak_stats_get(&st);
  CHECK(again > 0, "the empty SuperSlab was not taken again");
  CHECK(st.os_decommits == decommits, "%llu decommits while the SuperSlabs were empty",
        (unsigned long long)(st.os_decommits - decommits));
  CHECK(rss_kib() - rss < 1024, "taking the SuperSlabs back grew RSS by %ld KiB", rss_kib() - rss);
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_cache_return(h, hak_class_of(100000));
  for (int k = 0; k < 100 && ss->owner == h; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    void *some[64];   /* slow paths run the release tick */
    int n = 0;
    while (n < 64 && ss->owner == h) escape(some[n++] = malloc(5000));
    while (n) free(some[--n]);
  }
  CHECK(ss->owner != h, "an empty SuperSlab stayed with its heap after the purge delay");
  hak_option_set(hak_option_keep_empty_superslabs, keep);
}

static void test_release(void) {
  hak_trim();
  long before = rss_kib();
  enum { N = 200000 };
  static void *blocks[N];
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(256);
    memset(blocks[i], 1, 256);
  }
  long peak = rss_kib();
  for (int i = 0; i < N; i++) free(blocks[i]);
  /* The purge delay (which the release policy may have lengthened) passes,
   * twice at most: up to 10 s. */
  long after_delay = rss_kib();
  for (int k = 0; k < 100 && after_delay - before >= 8192; k++) {
    usleep((useconds_t)hak_release_delay() * 1000 / 2 + 50000);
    void *some[64];   /* slow paths (refills, flushes) run the release tick */
    for (int i = 0; i < 64; i++) escape(some[i] = malloc(5000));
    for (int i = 0; i < 64; i++) free(some[i]);
    after_delay = rss_kib();
  }
  CHECK(peak - before > 40000, "allocating 51 MB grew RSS by only %ld KiB", peak - before);
  CHECK(after_delay - before < 8192, "RSS after free + delay is %ld KiB above the start", after_delay - before);
  hak_trim();
  long after_trim = rss_kib();
  CHECK(after_trim - before < 2048, "RSS after malloc_trim is %ld KiB above the start", after_trim - before);
}

static const test_case_t cases[] = {
    {"empty_superslab", test_empty_superslab},
    {"release", test_release},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("purge", cases, argc, argv); }
