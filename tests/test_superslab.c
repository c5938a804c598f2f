/* SuperSlabs and their units: the registry and the arena that tell which
 * addresses are hakmem's, span blocks (a slab of their own on a SuperSlab's
 * units), and which free unit a new slab takes (the one its class last
 * held, else the one with the most pages touched). */
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "internals.h"

static void test_registry(void) {
  void *p = malloc(100);
  void *big = malloc(4u << 20);
  int local = 0;
  CHECK(hak_registry_kind((uintptr_t)p) == HAK_REG_SUPERSLAB, "small block not in a SuperSlab");
  CHECK(hak_registry_kind((uintptr_t)big) == HAK_REG_LARGE, "large block not registered");
  CHECK(hak_registry_kind((uintptr_t)&local) == HAK_REG_FOREIGN, "stack registered");
  CHECK(hak_registry_kind((uintptr_t)&test_registry) == HAK_REG_FOREIGN, "code registered");
  CHECK(hak_registry_kind(UINTPTR_MAX - 4096) == HAK_REG_FOREIGN, "top address registered");
  hak_superslab_t *ss = hak_ss_of(p);
  CHECK(ss->owner == hak_tls_heap, "SuperSlab not owned by this thread's heap");
  hak_slab_t *s = hak_slab_of(ss, (uintptr_t)p);
  CHECK(hak_is_block(s, (uintptr_t)p), "block check rejects a block");
  CHECK(!hak_is_block(s, (uintptr_t)p + 16), "block check accepts an interior pointer");
  free(p);
  free(big);
}

/* SuperSlabs come from the arena, and one given back (no pool slot left)
 * stays in it, unregistered and decommitted, for the next taker. Under
 * TEST_NO_ARENA (run.sh refuses the address space) they are mapped one by
 * one and free finds them through the registry. */
static void test_arena(void) {
  void *p = malloc(100);
  escape(p);
  if (getenv("TEST_NO_ARENA")) {
    CHECK(hak_arena_size == 0, "the arena was reserved under an address-space limit");
    CHECK(!hak_in_arena((uintptr_t)p) && hak_registry_kind((uintptr_t)p) == HAK_REG_SUPERSLAB,
          "block outside a registered SuperSlab");
    free(p);
    return;
  }
  CHECK(hak_arena_size == HAK_ARENA_SIZE && !(hak_arena_base & HAK_SS_MASK), "arena %#lx + %#lx",
        (unsigned long)hak_arena_base, (unsigned long)hak_arena_size);
  CHECK(hak_in_arena((uintptr_t)p), "block %p outside the arena", p);
  free(p);

  long keep = hak_option_get(hak_option_keep_empty_superslabs);
  long slots = hak_option_get(hak_option_shared_pool_slots);
  hak_option_set(hak_option_keep_empty_superslabs, 0);
  hak_option_set(hak_option_shared_pool_slots, 0);
  hak_trim();
  enum { N = 64 };   /* 64 x 100 KB: more than two SuperSlabs */
  static char *blocks[N];
  for (int i = 0; i < N; i++) blocks[i] = malloc(100000);
  uintptr_t last = (uintptr_t)hak_ss_of(blocks[N - 1]);
  CHECK(hak_in_arena(last), "SuperSlab %#lx outside the arena", (unsigned long)last);
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_trim();
  CHECK(hak_registry_kind(last) == HAK_REG_FOREIGN, "given-back SuperSlab still registered");
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t maps = st.os_maps;
  for (int i = 0; i < N; i++) blocks[i] = malloc(100000);
  int again = 0;
  for (int i = 0; i < N; i++) again += (uintptr_t)hak_ss_of(blocks[i]) == last;
  CHECK(again > 0, "the given-back SuperSlab was not taken again");
  hak_stats_get(&st);
  CHECK(st.os_maps == maps, "%llu new mappings instead of given-back SuperSlabs", (unsigned long long)(st.os_maps - maps));
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_option_set(hak_option_keep_empty_superslabs, keep);
  hak_option_set(hak_option_shared_pool_slots, slots);
}

/* The descriptors of a SuperSlab taken again keep their units' geometry
 * (types.h, "A unit's descriptor"): free may read one's limit, be
 * preempted, and read its geometry after the next slab set it up, so a
 * geometry reset to zero, which accepts address 0 (and with inverse 0 every
 * address), must never be seen; every geometry refuses addresses outside
 * its SuperSlab whatever the limit. */
static void test_reused_geometry(void) {
  if (getenv("TEST_NO_ARENA")) return;   /* outside the arena a SuperSlab is mapped anew */
  long keep = hak_option_get(hak_option_keep_empty_superslabs);
  long slots = hak_option_get(hak_option_shared_pool_slots);
  hak_option_set(hak_option_keep_empty_superslabs, 0);
  hak_option_set(hak_option_shared_pool_slots, 0);
  hak_trim();
  enum { N = 64, MOST = 8 };
  static char *blocks[N];
  static uint64_t inverse[MOST][HAK_UNITS];
  hak_superslab_t *given[MOST];
  int n = 0;
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(100000);
    hak_superslab_t *ss = hak_ss_of(blocks[i]);
    if ((!n || given[n - 1] != ss) && n < MOST) given[n++] = ss;
  }
  for (int k = 0; k < n; k++)
    for (int u = 0; u < HAK_UNITS; u++) inverse[k][u] = hak_ss_slabs(given[k])[u].inverse;
  for (int i = 0; i < N; i++) free(blocks[i]);
  hak_trim();
  void *big = malloc(8u << 20);
  int local = 0, again = 0;
  uintptr_t foreign[] = {0, 8, (uintptr_t)&local, (uintptr_t)big, (uintptr_t)&test_reused_geometry};
  for (int i = 0; i < N; i++) blocks[i] = malloc(i % 2 ? 200 : 30000);
  for (int k = 0; k < n; k++) {
    hak_slab_t *d = hak_ss_slabs(given[k]);
    if (given[k]->owner != hak_tls_heap) continue;
    again++;
    for (int u = 0; u < HAK_UNITS; u++) {
      CHECK(!inverse[k][u] || d[u].inverse, "unit %d's geometry was reset to zero when its SuperSlab was taken again",
            u);
      for (size_t f = 0; d[u].inverse && f < sizeof foreign / sizeof foreign[0]; f++)
        CHECK(hak_block_index(&d[u], foreign[f]) > UINT32_MAX, "unit %d's geometry takes %#lx for a block", u,
              (unsigned long)foreign[f]);
    }
  }
  CHECK(again > 0, "none of the %d given-back SuperSlabs was taken again", n);
  for (int i = 0; i < N; i++) free(blocks[i]);
  free(big);
  hak_option_set(hak_option_keep_empty_superslabs, keep);
  hak_option_set(hak_option_shared_pool_slots, slots);
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* A block of a span class (above 128 KiB, up to HAK_MID_MAX) is a slab of
 * its own in a SuperSlab: 64 KiB aligned, usable to its class's size. With
 * no cache, its units go back to the SuperSlab at free, and a block of
 * another span size takes them with the pages on them (no page fault);
 * calloc zeroes such a block, but not one on units that were given back
 * to the OS since (their pages are zero): it faults in one page, not 49.
 * A block that realloc grows past 128 KiB is large instead, so that it
 * grows on with its pages moved, not copied, and stays large above it. */
static void test_span(void) {
  const size_t a_size = 300000, b_size = 200000;
  /* a block that keeps the SuperSlab through the trim below, which gives
   * the span's units back to the OS: outside the arena a SuperSlab with no
   * block left would go whole */
  char *keep = malloc(64);
  escape(keep);
  char *a = malloc(a_size);
  CHECK(hak_registry_kind((uintptr_t)a) == HAK_REG_SUPERSLAB && ((uintptr_t)a & (HAK_UNIT_SIZE - 1)) == 0,
        "span block %p is not a 64 KiB aligned block of a SuperSlab", (void *)a);
  CHECK(hak_usable_size(a) == hak_class_size[hak_class_of(a_size)], "span block usable %zu", hak_usable_size(a));
  hak_superslab_t *ss = hak_ss_of(a);
  volatile uintptr_t at = (uintptr_t)a;   /* not a use after free for gcc */
  unsigned u = (unsigned)((at - (uintptr_t)ss) >> HAK_UNIT_SHIFT);
  memset(a, 0x5a, a_size);
  escape(a);
  free(a);
  CHECK(ss->free_units >> u & 1, "the units of a freed span block did not go back to its SuperSlab");
  long faults = minor_faults();
  char *b = calloc(1, b_size);
  faults = minor_faults() - faults;
  CHECK((uintptr_t)b == at, "a block of another span class (%p) did not take the freed units (%p)", (void *)b,
        (void *)at);
  size_t nonzero = 0;
  for (size_t i = 0; i < b_size; i++) nonzero += b[i] != 0;
  CHECK(nonzero == 0 && faults == 0, "calloc of a reused span block: %zu bytes not zero, %ld page faults", nonzero,
        faults);
  free(b);
  hak_trim();
  faults = minor_faults();
  char *c = calloc(1, b_size);
  faults = minor_faults() - faults;
  CHECK(hak_ss_of(c) == ss && faults <= 2, "calloc of a span block on units given back: %ld page faults", faults);
  nonzero = 0;
  for (size_t i = 0; i < b_size; i++) nonzero += c[i] != 0;
  CHECK(nonzero == 0, "calloc of a span block on units given back: %zu bytes not zero", nonzero);
  free(c);
  free(keep);
  char *g = malloc(100000);
  memset(g, 0x33, 100000);
  g = realloc(g, 300000);
  CHECK(g && hak_registry_kind((uintptr_t)g) == HAK_REG_LARGE, "a block realloc grew to 300000 bytes is not large");
  memset(g + 100000, 0x44, 200000);
  g = realloc(g, 450000);
  CHECK(g && hak_registry_kind((uintptr_t)g) == HAK_REG_LARGE, "a large block grown to 450000 bytes is not large");
  g = realloc(g, 140000);
  CHECK(g && hak_registry_kind((uintptr_t)g) == HAK_REG_LARGE, "a large block shrunk to 140000 bytes is not large");
  size_t bad = 0;
  for (size_t i = 0; i < 140000; i++) bad += (unsigned char)g[i] != (i < 100000 ? 0x33 : 0x44);
  CHECK(bad == 0, "%zu bytes changed by realloc between span, large and back", bad);
  free(g);
}

/* A new slab goes, where it can, to free units that last held a slab of its
 * class and are still resident: two classes whose slabs were released come
 * back to their own units whatever the order (without it, the first class
 * asked would take the lowest unit, the other's). */
static unsigned unit_of(const void *p) { return (unsigned)(((uintptr_t)p & HAK_SS_MASK) >> HAK_UNIT_SHIFT); }

static void *affinity_thread(void *arg) {
  char *a = malloc(48), *b = malloc(100);
  escape(a);
  escape(b);
  hak_superslab_t *ss_a = hak_ss_of(a), *ss_b = hak_ss_of(b);
  unsigned ua = unit_of(a), ub = unit_of(b);
  free(a);
  free(b);
  hak_heap_release_all(hak_tls_heap, false);   /* both slabs empty: their units free, still resident */
  char *b2 = malloc(100), *a2 = malloc(48);
  escape(a2);
  escape(b2);
  CHECK(hak_ss_of(b2) == ss_b && unit_of(b2) == ub, "class of 100 B went to unit %u, its slab was at %u", unit_of(b2), ub);
  CHECK(hak_ss_of(a2) == ss_a && unit_of(a2) == ua, "class of 48 B went to unit %u, its slab was at %u", unit_of(a2), ua);
  free(a2);
  free(b2);
  return arg;
}

/* A slab of a class with no resident units of its own takes the free unit
 * whose pages its blocks were carved on most (types.h, touched), not the
 * lowest one: a class that touched a page or two of its unit finds it
 * again. When that unit's last slab began under an earlier thread of the
 * heap (here: as if a new thread adopted it, gen), it keeps resident only
 * the pages the new class's slab carves on by its trim, a while later
 * (superslab.c, unit_trim): before, it kept every page, and in a heap
 * that threads with other sizes adopt one after another every free unit
 * ended with all its pages resident (memory threads). */
typedef struct {
  hak_superslab_t *ss;
  unsigned unit, touched;
} free_unit_t;

/* A size from `from` down to 513 B whose tiny class h has no slab, cached
 * block or free unit of (dirty[], the n free units that may be resident),
 * nor is skip's class (skip 0: none); 0 if there is none. */
static size_t new_tiny_size(hak_heap_t *h, const free_unit_t *dirty, unsigned n, size_t from, size_t skip) {
  for (size_t s = from; s > 512; s -= 16) {
    unsigned c = hak_class_of(s);
    bool known = (skip && c == hak_class_of(skip)) || h->warm[c] || h->full[c] || hak_cache_count(&h->cache[c]);
    for (unsigned i = 0; i < n; i++) known |= dirty[i].ss->span_class[dirty[i].unit] == c + 1;
    if (!known) return s;
  }
  return 0;
}

/* Pages of the unit at `unit` from page `first` to its end that are resident. */
static unsigned resident_from(const char *unit, unsigned first) {
  unsigned char in[HAK_UNIT_SIZE / HAK_PAGE_BYTES];
  CHECK(mincore((void *)unit, HAK_UNIT_SIZE, in) == 0, "mincore: %s", strerror(errno));
  unsigned resident = 0;
  for (unsigned i = first; i < HAK_UNIT_SIZE / HAK_PAGE_BYTES; i++) resident += in[i] & 1;
  return resident;
}

static void *resident_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  hak_heap_release_all(h, true);   /* no free unit of an earlier thread holds pages */
  char *few = malloc(80), *many[80];
  escape(few);
  for (int i = 0; i < 80; i++) escape(many[i] = malloc(1008));
  free(few);
  for (int i = 0; i < 80; i++) free(many[i]);
  hak_heap_release_all(h, false);   /* every slab empty: free units, still resident */
  static free_unit_t dirty[256];
  unsigned n = 0, most = 0;
  hak_superslab_t *low = NULL;
  for (hak_superslab_t *ss = h->superslabs; ss && ss->free_units; ss = ss->next) {
    uint64_t w = atomic_load(&ss->dirty);
    uint32_t avail = ss->free_units & ~HAK_HELD(w);
    if (avail && (!low || ss < low)) low = ss;
    for (uint32_t c = avail & HAK_DIRTY(w); c && n < 256; c &= c - 1) {
      unsigned u = (unsigned)__builtin_ctz(c);
      dirty[n++] = (free_unit_t){ss, u, ss->touched[u]};
      if (ss->touched[u] > most) most = ss->touched[u];
    }
  }
  unsigned lowest = low ? (unsigned)__builtin_ctz(low->free_units & ~HAK_HELD(atomic_load(&low->dirty))) : 0;
  unsigned lowest_touched = 0;
  for (unsigned i = 0; i < n; i++)
    if (dirty[i].ss == low && dirty[i].unit == lowest) lowest_touched = dirty[i].touched;
  CHECK(most == HAK_UNIT_SIZE / HAK_PAGE_BYTES && lowest_touched < most,
        "no free unit with every page touched above a less touched one (most %u, lowest unit %u)", most, lowest_touched);
  size_t size = new_tiny_size(h, dirty, n, 1024, 0);
  CHECK(size != 0, "every tiny class above 512 B has a slab or a resident unit");
  char *p = malloc(size ? size : 1);
  escape(p);
  unsigned got = 0;
  for (unsigned i = 0; i < n; i++)
    if (dirty[i].ss == hak_ss_of(p) && dirty[i].unit == unit_of(p)) got = dirty[i].touched;
  CHECK(got == most, "a new class's slab went to a unit with %u pages touched, one had %u", got, most);
  free(p);
  hak_heap_release_all(h, false);
  h->gen++;   /* the next thread */
  size_t other = new_tiny_size(h, dirty, n, size - 16, size);   /* another class new to the heap */
  CHECK(other != 0, "no second tiny class above 512 B new to the heap");
  size = other ? other : size;
  p = malloc(size);
  escape(p);
  hak_superslab_t *ss = hak_ss_of(p);
  unsigned u = unit_of(p), cls = hak_class_of(size);
  for (unsigned i = 0; i < n; i++)
    if (dirty[i].ss == ss && dirty[i].unit == u) got = dirty[i].touched;
  CHECK(got == most, "the next thread's new class went to a unit with %u pages touched, one had %u", got, most);
  hak_slab_t *s = &hak_ss_slabs(ss)[u];
  CHECK(h->trims_due && h->trims[h->trims_due - 1].slab == s, "the new class's slab does not wait for its trim");
  /* Before the trim, the slab grows into its unit's resident pages
   * without faulting them in again. */
  enum { MORE = 48 };
  char *more[MORE];
  long before = thread_faults();
  int grown = 0;
  while (grown < MORE && s->carved < s->capacity && s->carved * hak_class_size[cls] < HAK_UNIT_SIZE / 2) {
    escape(more[grown] = malloc(size));
    memset(more[grown++], 1, size);
  }
  long faults = thread_faults() - before;
  size_t at = u == 0 ? HAK_SS_HEADER : 0;
  unsigned deep = (unsigned)((at + (size_t)s->carved * hak_class_size[cls] + HAK_PAGE_BYTES - 1) / HAK_PAGE_BYTES);
  CHECK(deep >= 6 && faults < 4, "the slab grew to %u pages of its unit before its trim with %ld page faults", deep,
        faults);
  hak_slab_trim_due(h, true);
  CHECK(h->trims_due == 0, "%u trims wait after a trim of all", h->trims_due);
  unsigned resident = resident_from((char *)ss + ((uintptr_t)u << HAK_UNIT_SHIFT), deep);
  CHECK(resident == 0, "a new class's slab (carved: %u pages) left %u more pages of its unit resident", deep, resident);
  CHECK(ss->touched[u] == deep, "its unit counts %u pages touched, the slab carved %u", ss->touched[u], deep);
  CHECK(resident_from((char *)ss + ((uintptr_t)u << HAK_UNIT_SHIFT), 0) >= deep - 1,
        "the trim took pages the slab carved on");
  for (int i = 0; i < grown; i++) free(more[i]);
  free(p);
  return arg;
}

/* A thread's blocks go back to their slabs at its exit as containers,
 * each written into one of the blocks it gives back: the one its cache
 * took last, a block the program used, not the first, which may be one a
 * refill carved and never handed out, on a page nothing touched (the far
 * end of each slab the thread carved was resident after its exit: memory
 * threads, 20,000 short threads, peaked 10% higher). */
static void *untouched_thread(void *arg) {
  hak_heap_t *h = hak_heap_get();
  hak_heap_release_all(h, true);   /* no free unit holds pages */
  size_t size = 6000;
  unsigned cls = hak_class_of(size);
  CHECK(!h->warm[cls] && !h->full[cls] && !hak_cache_count(&h->cache[cls]), "the heap holds blocks of %zu B", size);
  char *p[3];
  for (int i = 0; i < 3; i++) {
    p[i] = malloc(size);
    memset(p[i], 0x5a, size);
  }
  hak_superslab_t *ss = hak_ss_of(p[0]);
  hak_slab_t *s = hak_slab_of(ss, (uintptr_t)p[0]);
  char *unit = (char *)ss + ((uintptr_t)unit_of(p[0]) << HAK_UNIT_SHIFT), *end = unit;
  for (int i = 0; i < 3; i++) {
    CHECK(hak_slab_of(ss, (uintptr_t)p[i]) == s, "three blocks of %zu B in two slabs", size);
    if (p[i] + hak_class_size[cls] > end) end = p[i] + hak_class_size[cls];
  }
  CHECK(s->carved > 3, "the refills carved %u blocks, none beyond the three handed out", (unsigned)s->carved);
  for (int i = 0; i < 3; i++) free(p[i]);
  hak_heap_release_all(h, false);   /* the slab empty, its unit free and still resident */
  unsigned first = (unsigned)((end - unit + HAK_PAGE_BYTES - 1) / HAK_PAGE_BYTES), resident = resident_from(unit, first);
  CHECK(resident == 0, "%u pages past the blocks handed out (%u pages) became resident when they went back",
        resident, first);
  return arg;
}

static void test_affinity(void) { run_unpurged(affinity_thread); }
static void test_resident(void) { run_unpurged(resident_thread); }
static void test_untouched(void) { run_unpurged(untouched_thread); }

static const test_case_t cases[] = {
    {"registry", test_registry},
    {"arena", test_arena},
    {"reused_geometry", test_reused_geometry},
    {"span", test_span},
    {"affinity", test_affinity},
    {"resident", test_resident},
    {"untouched", test_untouched},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("superslab", cases, argc, argv); }
