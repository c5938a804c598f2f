/* Large blocks and the BigCache: mappings reused, moved by mremap rather
 * than copied, cut from a chunk of the arena; the BigCache's expiry, its
 * grace entry, requests served from entries of another size, the tails of
 * blocks cut from chunks, and span blocks beyond its budget going back at
 * once. */
#include <sys/mman.h>
#include <unistd.h>

#include "internals.h"

/* Span blocks that a thread frees in a row go back to the OS at once
 * beyond BIGCACHE_BUDGET's bytes, as large blocks the BigCache has no room
 * for: 32 blocks of 300,000 bytes (9.4 MB) with a budget of 1 MiB. */
static void test_span_burst(void) {
  enum { N = 32, SIZE = 300000 };
  long budget = hak_option_get(hak_option_bigcache_budget);
  hak_option_set(hak_option_bigcache_budget, 1 << 20);
  static char *b[N];
  for (int i = 0; i < N; i++) memset(b[i] = malloc(SIZE), 1, SIZE);
  long before = rss_kib();
  for (int i = 0; i < N; i++) free(b[i]);
  long dropped = before - rss_kib();
  CHECK(dropped > (N * SIZE - (3 << 20)) / 1024, "freeing %d span blocks of %d bytes in a row dropped %ld KiB", N, SIZE,
        dropped);
  hak_option_set(hak_option_bigcache_budget, budget);
}

static void test_large(void) {
  char *a = malloc(3u << 20);
  volatile uintptr_t a_map = (uintptr_t)a & ~(uintptr_t)HAK_SS_MASK;   /* not a use after free for gcc */
  memset(a, 7, 3u << 20);
  escape(a);
  free(a);
  char *b = malloc(3u << 20);
  CHECK(a_map == ((uintptr_t)b & ~(uintptr_t)HAK_SS_MASK),
        "BigCache did not reuse a freed large mapping");
  CHECK(b[12345] == 7, "reused large mapping lost its pages (syscall made)");
  b[0] = 'x';
  b[(3u << 20) - 1] = 'y';
  uintptr_t old_place = (uintptr_t)b;
  char *c = realloc(b, 300u << 20);
  CHECK(c && c[0] == 'x' && c[(3u << 20) - 1] == 'y', "mremap growth lost content");
  CHECK(hak_registry_kind((uintptr_t)c) == HAK_REG_LARGE, "moved block not registered");
  if ((uintptr_t)c != old_place) CHECK(hak_registry_kind(old_place) == HAK_REG_FOREIGN, "old place still registered");
  char *d = realloc(c, 700000);
  CHECK(d == c && hak_usable_size(d) < (1u << 20), "shrinking a large block did not trim it");
  free(d);
  void *e = aligned_alloc(4u << 20, 5000);
  CHECK(((uintptr_t)e & ((4u << 20) - 1)) == 0, "4 MiB alignment not honoured");
  CHECK(hak_registry_kind((uintptr_t)e) == HAK_REG_LARGE_ALIGNED, "huge-aligned block not registered");
  free(e);
  CHECK(hak_registry_kind((uintptr_t)e) == HAK_REG_FOREIGN, "freed huge-aligned block still registered");

  /* large blocks start at different cache lines of their first page */
  char *live[8];
  unsigned lines = 0;
  uint64_t seen = 0;
  for (int i = 0; i < 8; i++) {
    live[i] = malloc(1u << 20);
    CHECK(((uintptr_t)live[i] & 63) == 0, "large block %p not on a cache line", (void *)live[i]);
    unsigned line = (unsigned)((uintptr_t)live[i] & 4095) / 64;
    lines += !(seen >> line & 1);
    seen |= (uint64_t)1 << line;
  }
  CHECK(lines >= 6, "8 large blocks start at only %u cache lines of their page", lines);
  for (int i = 0; i < 8; i++) free(live[i]);
}

/* A large block moves its pages, never copies them, however it grew before:
 * grown in place after a move, then moved again (mremap moves one mapping
 * only, so in-place growth must keep the block one mapping). Mappings placed
 * just past its end force the moves. */
static void *block_end_blocker(char *p) {
  char *end = p + hak_usable_size(p);
  void *b = mmap(end, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  return b == end ? b : NULL;
}

static void test_large_moves(void) {
  struct hak_stats st;
  hak_stats_get(&st);
  unsigned long long allocs = st.large.allocs;
  size_t size = 3u << 20;   /* past a 2 MiB chunk of the arena: a mapping of its own */
  char *p = malloc(size);
  memset(p, 0x5a, size);
  void *blockers[3];
  int forced = 0;
  for (int step = 0; step < 6; step++) {
    if (step % 2 == 0 && (blockers[forced] = block_end_blocker(p))) forced++;
    size_t bigger = size * 3 / 2;
    char *q = realloc(p, bigger);
    CHECK(q && q[0] == 0x5a && q[size - 1] == 0x5a, "large realloc lost content at step %d", step);
    memset(q + size, 0x5a, bigger - size);
    p = q;
    size = bigger;
  }
  hak_stats_get(&st);
  CHECK(forced >= 2, "could not place mappings past the block (%d)", forced);
  CHECK(st.large.allocs - allocs == 1, "a growing large block was copied: %llu large allocations",
        st.large.allocs - allocs);
  free(p);
  for (int i = 0; i < forced; i++) munmap(blockers[i], 4096);
}

/* A large block of up to 2 MiB takes a chunk of the arena when there is
 * one: no system call to map it, none to grow it within the chunk (the
 * same address, its contents kept), a copy to grow past it; freed, the
 * BigCache keeps the chunk for the next one; a trim gives it back to the
 * arena, which hands it out again without mapping. */
static void test_large_chunk(void) {
  if (!hak_arena_size) return;
  hak_trim();
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t maps = st.os_maps;
  unsigned long long allocs = st.large.allocs;
  size_t size = 600u << 10;
  char *p = malloc(size);
  CHECK(hak_in_arena((uintptr_t)p), "a 600 KiB block is not in the arena");
  uintptr_t chunk = (uintptr_t)p & ~(uintptr_t)HAK_SS_MASK;
  CHECK(hak_registry_kind(chunk) == HAK_REG_LARGE, "its chunk is not registered as a large block");
  memset(p, 0x3c, size);
  char *q = realloc(p, (2u << 20) - 8192);
  CHECK(q == p && q[0] == 0x3c && q[size - 1] == 0x3c, "growing within the chunk moved or lost the block");
  memset(q, 0x3c, (2u << 20) - 8192);
  hak_stats_get(&st);
  CHECK(st.os_maps == maps && st.large.allocs - allocs == 1, "growing within the chunk mapped (%llu) or copied (%llu)",
        (unsigned long long)(st.os_maps - maps), st.large.allocs - allocs);
  char *r = realloc(q, 3u << 20);
  CHECK(r && r != q && r[0] == 0x3c && r[(2u << 20) - 8193] == 0x3c, "growing past the chunk lost the contents");
  CHECK(hak_registry_kind(chunk) == HAK_REG_LARGE, "the chunk left behind was not cached");
  free(r);
  char *again = malloc(700u << 10);
  CHECK(((uintptr_t)again & ~(uintptr_t)HAK_SS_MASK) == chunk, "a 700 KiB request did not take the cached chunk");
  free(again);
  hak_trim();
  CHECK(hak_registry_kind(chunk) == HAK_REG_FOREIGN, "a trim left the chunk cached");
  hak_stats_get(&st);
  maps = st.os_maps;
  char *fresh = malloc(1u << 20);
  CHECK(hak_in_arena((uintptr_t)fresh), "a 1 MiB block after a trim is not in the arena");
  fresh[(1u << 20) - 1] = 1;
  hak_stats_get(&st);
  CHECK(st.os_maps == maps, "a chunk of the arena took %llu mappings", (unsigned long long)(st.os_maps - maps));
  free(fresh);
}

/* A freed large block stays mapped in the BigCache for BIGCACHE_DELAY_MS
 * (lengthened as the purge delay is, after the tests before this one), then
 * the next slow path unmaps it. A block above BIGCACHE_MAX_BLOCK is the
 * grace entry (test_bigcache_grace). */
static void test_bigcache_expiry(void) {
  long old_delay = hak_option_get(hak_option_bigcache_delay_ms), old_budget = hak_option_get(hak_option_bigcache_budget);
  CHECK(hak_option_set(hak_option_bigcache_delay_ms, 30) == 0, "set BigCache delay");
  hak_option_set(hak_option_bigcache_budget, 128L << 20);   /* room for the block whatever the cache holds */
  char *a = malloc(5u << 20);
  uintptr_t a_at = (uintptr_t)a;
  escape(a);
  free(a);
  CHECK(hak_registry_kind(a_at) == HAK_REG_LARGE, "freed large block not kept in the BigCache");
  for (int waited = 0; waited < 100 && hak_registry_kind(a_at) != HAK_REG_FOREIGN; waited++) {
    usleep((useconds_t)hak_ace_value(hak_knob_bigcache_delay_ms) * 1000 / 4 + 20000);
    hak_bigcache_tick();   /* as the large path and the purger do */
  }
  CHECK(hak_registry_kind(a_at) == HAK_REG_FOREIGN, "expired BigCache entry still mapped");
  hak_option_set(hak_option_bigcache_delay_ms, old_delay);
  hak_option_set(hak_option_bigcache_budget, old_budget);
}

/* The last block the BigCache refuses stays as its grace entry: a smaller
 * request is cut from it (the rest is the grace entry then), and it goes
 * to the OS when memory is mapped anew, when the option's delay passes, or
 * at a trim, whichever comes first. A block freed twice while it waits
 * there is reported. */
static void test_bigcache_grace(void) {
  long old_max = hak_option_get(hak_option_bigcache_max_block), old_delay = hak_option_get(hak_option_bigcache_delay_ms);
  hak_option_set(hak_option_bigcache_max_block, 1 << 20);   /* every block below is refused */
  hak_option_set(hak_option_bigcache_delay_ms, 60000);
  hak_trim();   /* no cached entry serves the requests below */
  char *big = malloc(24u << 20);
  uintptr_t big_at = (uintptr_t)big & ~(uintptr_t)HAK_SS_MASK;
  escape(big);
  free(big);
  CHECK(hak_registry_kind(big_at) == HAK_REG_LARGE, "a refused block was not kept as the grace entry");
  struct hak_stats st;
  hak_stats_get(&st);
  unsigned long long hits = st.bigcache_hits, misses = st.bigcache_misses;
  char *a = malloc(5u << 20);
  CHECK((uintptr_t)a >= big_at && (uintptr_t)a < big_at + (24u << 20), "5 MiB not cut from the 24 MiB grace entry: %p",
        (void *)a);
  hak_stats_get(&st);
  CHECK(st.bigcache_hits == hits + 1 && st.bigcache_misses == misses,
        "the grace entry's block counted as %llu hits, %llu misses (a hit expected)", st.bigcache_hits - hits,
        st.bigcache_misses - misses);
  memset(a, 1, 5u << 20);
  uintptr_t rest_at = big_at + (((uintptr_t)a + hak_usable_size(a) - big_at + HAK_GUARD + HAK_SS_MASK) &
                                 ~(uintptr_t)HAK_SS_MASK);   /* past the cut mapping's 2 MiB boundary */
  CHECK(hak_registry_kind(rest_at) == HAK_REG_LARGE, "the rest of the grace entry was not kept");
  char *b = malloc(64u << 20);   /* too big for it: a new mapping, the rest goes first */
  CHECK(b && hak_registry_kind(rest_at) == HAK_REG_FOREIGN, "the grace entry outlived a new mapping");
  free(a);   /* the grace entry now */
  uintptr_t a_at = big_at;
  CHECK(hak_registry_kind(a_at) == HAK_REG_LARGE, "the next refused block did not replace the grace entry");
  free(b);   /* replaces it */
  CHECK(hak_registry_kind(a_at) == HAK_REG_FOREIGN, "a replaced grace entry stayed mapped");
  uintptr_t b_at = (uintptr_t)b & ~(uintptr_t)HAK_SS_MASK;
  hak_trim();
  CHECK(hak_registry_kind(b_at) == HAK_REG_FOREIGN, "a trim left the grace entry mapped");

  hak_option_set(hak_option_bigcache_delay_ms, 30);
  char *c = malloc(3u << 20);
  uintptr_t c_at = (uintptr_t)c & ~(uintptr_t)HAK_SS_MASK;
  escape(c);
  free(c);
  CHECK(hak_registry_kind(c_at) == HAK_REG_LARGE, "a refused block was not kept as the grace entry");
  for (int waited = 0; waited < 100 && hak_registry_kind(c_at) != HAK_REG_FOREIGN; waited++) {
    usleep(40000);
    hak_bigcache_tick();   /* as the large path and the purger do */
  }
  CHECK(hak_registry_kind(c_at) == HAK_REG_FOREIGN, "the grace entry outlived BIGCACHE_DELAY_MS");
  hak_option_set(hak_option_bigcache_max_block, old_max);
  hak_option_set(hak_option_bigcache_delay_ms, old_delay);
}

/* The BigCache serves a request from a cached mapping of another size
 * without a new mapping: a bigger one is cut at the 2 MiB boundary after the
 * request, the rest cached on its own (the pages between, unmapped); a smaller one of 4 MiB or more is
 * grown by mremap. The pages and their contents come along. A small one
 * is not grown (its pages may be few). */
static void test_bigcache_fit(void) {
  hak_trim();
  struct hak_stats st;
  const size_t three = (3u << 20) - 64, five = (5u << 20) - 64, eight = (8u << 20) - 64;   /* with the header */
  char *big = malloc(three);
  uintptr_t big_at = (uintptr_t)big & ~(uintptr_t)HAK_SS_MASK;
  memset(big, 0x5a, three);
  escape(big);
  free(big);
  hak_stats_get(&st);
  uint64_t maps = st.os_maps, unmaps = st.os_unmaps;
  char *small = malloc(1u << 20);   /* under half of the cached one */
  escape(small);
  CHECK(((uintptr_t)small & ~(uintptr_t)HAK_SS_MASK) == big_at, "1 MiB request did not take the cached 3 MiB mapping");
  const char *m = (const char *)big_at;   /* blocks start at different lines of their first page */
  CHECK(m[8192] == 0x5a && m[(1u << 20) - 1] == 0x5a, "the cut mapping's pages were not kept");
  CHECK(hak_registry_kind(big_at + HAK_SS_SIZE) == HAK_REG_LARGE, "the rest past 2 MiB was not cached");
  hak_stats_get(&st);
  CHECK(st.os_maps == maps && st.os_unmaps <= unmaps + 1, "cutting a cached mapping took %llu mappings, %llu unmaps",
        (unsigned long long)(st.os_maps - maps), (unsigned long long)(st.os_unmaps - unmaps));
  free(small);   /* cached now: 1.1 MiB at big_at, 1 MiB at 2 MiB past it */

  char *mid = malloc(five);
  memset(mid, 0x6b, five);
  escape(mid);
  free(mid);
  hak_stats_get(&st);
  maps = st.os_maps;
  char *grown = malloc(eight);
  escape(grown);
  int kept = 1;
  m = (const char *)((uintptr_t)grown & ~(uintptr_t)HAK_SS_MASK);
  for (size_t off = 8192; off < five - 4096; off += 4096) kept &= m[off] == 0x6b;
  CHECK(kept, "the 8 MiB request did not grow the cached 5 MiB mapping");
  grown[eight - 1] = 1;
  hak_stats_get(&st);
  CHECK(st.os_maps == maps, "growing a cached mapping mapped memory");

  char *fresh = malloc(three);
  escape(fresh);
  CHECK(((uintptr_t)fresh & ~(uintptr_t)HAK_SS_MASK) != big_at, "a 3 MiB request grew a cached 2 MiB mapping");
  hak_stats_get(&st);
  /* one mapping, or two where the kernel did not place the first at its
   * hint and a larger one is trimmed to the alignment (hak_os_map_aligned):
   * which, depends on the address space's layout so far */
  CHECK(st.os_maps - maps >= 1 && st.os_maps - maps <= 2,
        "a 3 MiB request with only 1 and 2 MiB cached took %llu mappings", (unsigned long long)(st.os_maps - maps));
  free(fresh);
  free(grown);
  char *huge = malloc((size_t)5 << 30);   /* past the bins' 4 GiB: grows the 8 MiB entry */
  CHECK(huge != NULL, "a 5 GiB request with entries cached failed");
  if (huge) huge[((size_t)5 << 30) - 1] = 1;
  free(huge);
}

/* Pages of [p, p + size) resident, by mincore, whole pages around it. */
static size_t resident_pages(const void *p, size_t size) {
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + size + 4095) & ~(uintptr_t)4095;
  static unsigned char vec[(64u << 20) / 4096];
  CHECK(hi - lo <= sizeof vec * 4096 && mincore((void *)lo, hi - lo, vec) == 0, "mincore of %p", p);
  size_t n = 0;
  for (size_t i = 0; i < (hi - lo) / 4096; i++) n += vec[i] & 1;
  return n;
}

static bool page_resident(uintptr_t a) { return resident_pages((void *)a, 1) == 1; }

/* A block realloc grows past HAK_LARGE_MIN, cut from a much larger cached
 * chunk, keeps the chunk's resident pages past its end for the BigCache's
 * delay: it grows into them again without page faults (a new chunk's pages
 * would each fault, 348 of them here, as every growth cycle of Ruby's
 * buffers did), its contents kept, and freed, its chunk is the entry again
 * with all of them. The tail of a block that stays small goes to the OS
 * when the delay passes, and at a trim. */
static void test_chunk_tail(void) {
  if (!hak_arena_size) return;
  long old_delay = hak_option_get(hak_option_bigcache_delay_ms), old_budget = hak_option_get(hak_option_bigcache_budget);
  hak_option_set(hak_option_bigcache_delay_ms, 60000);
  hak_option_set(hak_option_bigcache_budget, 128L << 20);
  hak_trim();
  const size_t big = (3u << 19) - 8192, small = 100u << 10, cut = 140u << 10;
  for (int round = 0; round < 2; round++) {
    if (round == 1) hak_option_set(hak_option_bigcache_delay_ms, 300);   /* this tail is to expire */
    char *a = malloc(big);
    uintptr_t chunk = (uintptr_t)a & ~(uintptr_t)HAK_SS_MASK;
    memset(a, 0x11, big);
    escape(a);
    free(a);
    char *p = malloc(small);
    memset(p, 0x22, small);
    char *q = realloc(p, cut);
    CHECK(((uintptr_t)q & ~(uintptr_t)HAK_SS_MASK) == chunk, "the grown block did not take the cached chunk");
    CHECK(q[0] == 0x22 && q[small - 1] == 0x22, "the grown block lost its contents");
    memset(q + small, 0x33, cut - small);
    uintptr_t tail = chunk + (1u << 20);
    CHECK(page_resident(tail), "the tail of a block cut from a chunk was decommitted at once");
    if (round == 0) {
      long before = thread_faults();
      char *r = realloc(q, big);
      memset(r + cut, 0x44, big - cut);
      long faults = thread_faults() - before;
      CHECK(r == q, "growing within the chunk moved the block");
      CHECK(faults < 32, "growing into the kept tail took %ld page faults", faults);
      CHECK(r[0] == 0x22 && r[small] == 0x33 && r[cut - 1] == 0x33 && r[big - 1] == 0x44, "the block lost its contents");
      escape(r);
      free(r);
      continue;
    }
    for (int waited = 0; waited < 100 && page_resident(tail); waited++) {
      usleep((useconds_t)hak_ace_value(hak_knob_bigcache_delay_ms) * 1000 / 4 + 20000);
      hak_bigcache_tick();   /* as the large path and the purger do */
    }
    CHECK(!page_resident(tail), "the tail outlived BIGCACHE_DELAY_MS");
    CHECK(q[0] == 0x22 && q[cut - 1] == 0x33, "dropping the tail lost the block's contents");
    char *r = realloc(q, big);
    CHECK(r == q, "growing within the chunk moved the block");
    memset(r + cut, 0x55, big - cut);
    CHECK(r[small - 1] == 0x22 && r[cut - 1] == 0x33 && r[big - 1] == 0x55, "the block lost its contents");
    char *s = realloc(r, cut);   /* shrunk: its tail kept again, until a trim */
    CHECK(s == r && page_resident(tail), "a block shrunk within its chunk moved or dropped its tail");
    hak_trim();
    CHECK(!page_resident(tail) && s[cut - 1] == 0x33, "a trim left the tail resident or took the block's pages");
    free(s);
  }
  hak_option_set(hak_option_bigcache_delay_ms, old_delay);
  hak_option_set(hak_option_bigcache_budget, old_budget);
}

/* A new mapping of a size whose blocks the program wrote whole the last two
 * times they went back to the OS comes with its pages resident; one of a
 * size whose blocks it barely touched does not, nor does one whose last
 * block was written whole and the one before it not. */
static void test_written_whole(void) {
  enum { WHOLE = 6u << 20, SPARSE = 10u << 20, ONCE = 20u << 20 };
  long old_max = hak_option_get(hak_option_bigcache_max_block);
  hak_option_set(hak_option_bigcache_max_block, 1 << 20);   /* each goes to the OS at the next mapping or trim */
  hak_trim();
  for (int round = 0; round < 2; round++) {
    char *w = malloc(WHOLE), *s = malloc(SPARSE), *o = malloc(ONCE);
    memset(w, 1, WHOLE);
    s[0] = s[SPARSE - 1] = 1;
    if (round == 1) memset(o, 1, ONCE);
    else o[0] = 1;
    escape(w);
    escape(s);
    escape(o);
    free(w);
    free(s);
    free(o);
    hak_trim();
  }
  char *w = malloc(WHOLE), *s = malloc(SPARSE), *o = malloc(ONCE);
  void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bool can = probe != MAP_FAILED && madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;   /* Linux 5.14 and up */
  if (probe != MAP_FAILED) munmap(probe, 4096);
  size_t pages = WHOLE / 4096;
  if (can) CHECK(resident_pages(w, WHOLE) >= pages, "a block of a size written whole twice has %zu of its %zu pages resident",
                 resident_pages(w, WHOLE), pages);
  CHECK(resident_pages(s, SPARSE) <= 2, "a block of a size whose blocks were barely touched has %zu pages resident",
        resident_pages(s, SPARSE));
  CHECK(resident_pages(o, ONCE) <= 2, "a block of a size written whole once, after a block barely touched, has %zu pages resident",
        resident_pages(o, ONCE));
  memset(w, 2, WHOLE);
  CHECK(w[0] == 2 && w[WHOLE - 1] == 2 && s[1] == 0 && o[ONCE - 1] == 0, "the blocks' contents");
  free(w);
  free(s);
  free(o);
  hak_trim();
  hak_option_set(hak_option_bigcache_max_block, old_max);
}

static const test_case_t cases[] = {
    {"span_burst", test_span_burst},
    {"large", test_large},
    {"large_moves", test_large_moves},
    {"large_chunk", test_large_chunk},
    {"bigcache_expiry", test_bigcache_expiry},
    {"bigcache_grace", test_bigcache_grace},
    {"bigcache_fit", test_bigcache_fit},
    {"chunk_tail", test_chunk_tail},
    {"written_whole", test_written_whole},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("large", cases, argc, argv); }
