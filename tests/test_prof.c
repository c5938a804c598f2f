/* Heap profiling by sampling (docs/profiling.md).
 *
 * The test runs itself again with HAKMEM_PROF_SAMPLE=4096 (run_self); the
 * child allocates from two call sites in a 3:1 ratio of bytes (tiny, mid
 * and large blocks alike) and from a third one whose blocks it frees, writes
 * a profile with hak_prof_dump and reads it back as pprof does: each stack's
 * counts scaled by 1 / (1 - exp(-mean size / sample)); hakmem writes a line
 * per stack and size, so that the mean is exact. The two sites'
 * estimated live bytes must match what they hold within 10%, the freed
 * site must hold none, the profile must name the sample period and end with
 * the process's mappings; PROF_SIGNAL and the exit write profiles too.
 * Linked with -rdynamic so that dladdr names the sites. */
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <unistd.h>
#include "check.h"

#define SAMPLE 4096
#define SITE_SIZES 6
static const size_t sizes[SITE_SIZES] = {24, 100, 700, 3000, 20000, 200000};

/* Allocate about `bytes` of blocks of every size (each size the same share),
 * into out; returns the bytes asked for (what the profile counts) and sets
 * *n. */
__attribute__((noinline)) size_t site_a(void **out, size_t bytes, size_t *n);
__attribute__((noinline)) size_t site_b(void **out, size_t bytes, size_t *n);
__attribute__((noinline)) size_t site_c(void **out, size_t bytes, size_t *n);
__attribute__((noinline)) void *site_d(void);
__attribute__((noinline)) void *site_e(void);
__attribute__((noinline)) void *site_f(void *p, size_t size);
__attribute__((noinline)) void *site_g(void);
__attribute__((noinline)) void *site_h(void);

__attribute__((noinline)) size_t fill(void **out, size_t bytes, size_t *n);
size_t fill(void **out, size_t bytes, size_t *n) {
  size_t asked = 0;
  *n = 0;
  for (int k = 0; k < SITE_SIZES; k++)
    for (size_t got = 0; got < bytes / SITE_SIZES; got += sizes[k]) {
      void *p = out[(*n)++] = T_malloc(sizes[k]);
      memset(p, 1, sizes[k]);
      asked += sizes[k];
    }
  return asked;
}

static volatile int calls;   /* keeps the sites' calls from becoming jumps */
size_t site_a(void **out, size_t bytes, size_t *n) {
  size_t u = fill(out, bytes, n);
  calls++;
  return u;
}
size_t site_b(void **out, size_t bytes, size_t *n) {
  size_t u = fill(out, bytes, n);
  calls++;
  return u;
}
size_t site_c(void **out, size_t bytes, size_t *n) {
  size_t u = fill(out, bytes, n);
  calls++;
  return u;
}

/* One block of 64 B each, by each entry point: hak_malloc, aligned_alloc
 * (at 32: the same size class, alloc_aligned.c), hak_calloc, and malloc
 * under its standard name (the program's own in the dynamically linked
 * test): each has its counted build (HAK_TWO_BUILDS), or counts on its
 * slow path. */
void *site_d(void) {
  void *p = T_malloc(64);
  calls++;
  return p;
}
void *site_e(void) {
  void *p = T_aligned_alloc(32, 64);
  calls++;
  return p;
}

void *site_g(void) {
  void *p = T_calloc(1, 64);
  calls++;
  return p;
}
void *site_h(void) {
  void *p = malloc(64);
  calls++;
  return p;
}

/* A realloc (test_realloc_sites). */
void *site_f(void *p, size_t size) {
  void *q = T_realloc(p, size);
  calls++;
  return q;
}

#define SITES 8
/* Which site a stack names: 'a'..'h', or 0. */
static int site_of(const char *stack) {
  const char *s = stack;
  while (*s) {
    char *end;
    void *pc = (void *)strtoull(s, &end, 16);
    if (end == s) break;
    s = end;
    Dl_info info;
    if (dladdr(pc, &info) && info.dli_sname) {
      if (!strcmp(info.dli_sname, "site_a")) return 'a';
      if (!strcmp(info.dli_sname, "site_b")) return 'b';
      if (!strcmp(info.dli_sname, "site_c")) return 'c';
      if (!strcmp(info.dli_sname, "site_d")) return 'd';
      if (!strcmp(info.dli_sname, "site_e")) return 'e';
      if (!strcmp(info.dli_sname, "site_f")) return 'f';
      if (!strcmp(info.dli_sname, "site_g")) return 'g';
      if (!strcmp(info.dli_sname, "site_h")) return 'h';
    }
  }
  return 0;
}

struct totals {
  double live[SITES], total[SITES];
  long live_raw[SITES];
  int header_ok, maps_ok, lines;
  int first_frame_in_hakmem;   /* stacks of a site that do not start at its call */
  char first_in_hakmem[128];   /* the first of them */
};

/* The name of the function whose body holds pc, or NULL: dladdr1 gives the
 * symbol's size, so an address in one of hakmem's hidden functions, which
 * lie past the end of the exported symbol before them, names none. */
static const char *function_at(void *pc) {
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!dladdr1(pc, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !info.dli_sname) return NULL;
  return (uintptr_t)pc - (uintptr_t)info.dli_saddr < sym->st_size ? info.dli_sname : NULL;
}

static double sample_mean = SAMPLE;   /* the profile's heap_v2/<mean> */

/* pprof's scaling of one stack's counts (heap_v2 sampling). */
static double scaled(long n, long bytes) {
  if (!n) return 0;
  double ratio = (double)bytes / n / sample_mean;
  return bytes / (1 - exp(-ratio));
}

static void read_profile(const char *path, struct totals *t) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[8192];
  if (fgets(line, sizeof line, f) && !strncmp(line, "heap profile: ", 14) && strstr(line, "@ heap_v2/4096"))
    t->header_ok = 1;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "MAPPED_LIBRARIES:", 17)) {
      t->maps_ok = fgets(line, sizeof line, f) != NULL && strchr(line, '-') != NULL;
      break;
    }
    long n1, s1, n2, s2;
    int used = 0;
    if (sscanf(line, " %ld: %ld [ %ld: %ld] @%n", &n1, &s1, &n2, &s2, &used) != 4 || !used) continue;
    t->lines++;
    void *first = (void *)strtoull(line + used, NULL, 16);
    int site = site_of(line + used);
    if (!site) continue;
    /* the stack starts at the program's call: fill for the first three sites */
    const char *fn = function_at(first);
    char want[8] = "fill";
    if (site > 'c') snprintf(want, sizeof want, "site_%c", site);
    if ((!fn || strcmp(fn, want)) && !t->first_frame_in_hakmem++)
      snprintf(t->first_in_hakmem, sizeof t->first_in_hakmem, "%p (%s), %s's stack", first, fn ? fn : "?", want);
    t->live[site - 'a'] += scaled(n1, s1);
    t->total[site - 'a'] += scaled(n2, s2);
    t->live_raw[site - 'a'] += n1;
  }
  fclose(f);
}

/* Caches while profiling (prof.c, cache.c): the counted build of malloc
 * pops the classes' caches, which grow under batches and shrink back when
 * their thread leaves the heap, and sampled blocks come from the profiler's
 * heap. A thread churns blocks of 16..64 B at random, then in batches of
 * 1000 (the caches grow); a second thread adopts the heap the first left
 * and does the same. Every live block holds its own number: a block handed
 * out twice shows as a number overwritten. */
#define CHURN_SLOTS 256
#define CHURN_BATCH 1000

static int churn_bad;

static void churn_put(uint32_t *p, uint32_t id, size_t size) {
  for (size_t i = 0; i < size / 4; i++) p[i] = id;
}

static void churn_check(const uint32_t *p, uint32_t id, size_t size) {
  for (size_t i = 0; i < size / 4; i++) churn_bad += p[i] != id;
}

static void *churn_thread(void *arg) {
  static uint32_t *slot[CHURN_SLOTS], *batch[CHURN_BATCH];
  static size_t slot_size[CHURN_SLOTS];
  static uint32_t slot_id[CHURN_SLOTS];
  uint32_t id = 0, rng = 12345;
  for (int op = 0; op < 200000; op++) {
    rng = rng * 1103515245u + 12345u;
    unsigned k = (rng >> 8) % CHURN_SLOTS;
    if (slot[k]) {
      churn_check(slot[k], slot_id[k], slot_size[k]);
      T_free(slot[k]);
    }
    slot_size[k] = 16 + 16 * ((rng >> 20) % 4);
    slot[k] = T_malloc(slot_size[k]);
    churn_put(slot[k], slot_id[k] = ++id, slot_size[k]);
  }
  for (int round = 0; round < 12; round++) {
    size_t size = 16 + 16 * (size_t)(round % 4);
    uint32_t first = id + 1;
    for (int i = 0; i < CHURN_BATCH; i++) churn_put(batch[i] = T_malloc(size), ++id, size);
    for (int i = 0; i < CHURN_BATCH; i++) {
      churn_check(batch[i], first + (uint32_t)i, size);
      T_free(batch[i]);
    }
  }
  for (int k = 0; k < CHURN_SLOTS; k++) {
    churn_check(slot[k], slot_id[k], slot_size[k]);
    T_free(slot[k]);
    slot[k] = NULL;
  }
  return arg;
}

static void test_cache_churn(void) {
  for (int t = 0; t < 2; t++) {
    pthread_t th;
    pthread_create(&th, NULL, churn_thread, NULL);
    pthread_join(th, NULL);
  }
  CHECK(churn_bad == 0, "%d words of live blocks changed: a block handed out twice", churn_bad);
}

/* Freed sampled blocks go back: the profiler's heap, which no thread
 * runs, keeps a few of a class, and malloc_trim returns even those. Every
 * block of these sizes is sampled at SAMPLE. */
static void test_sampled_release(void) {
  enum { PER = 40, SIZES = 10 };
  static void *blocks[PER * SIZES];
  hak_trim();
  long before = rss_bytes();
  size_t n = 0;
  for (size_t size = 40 << 10, k = 0; k < SIZES; k++, size += size / 8)
    for (int i = 0; i < PER; i++) {
      blocks[n] = T_malloc(size);
      memset(blocks[n++], 7, size);
    }
  long held = rss_bytes() - before;
  for (size_t i = 0; i < n; i++) T_free(blocks[i]);
  hak_trim();
  long left = rss_bytes() - before;
  CHECK(held > (20l << 20) && left < (4l << 20), "sampled blocks: %ld KiB resident, %ld KiB after their frees and a trim",
        held >> 10, left >> 10);
}

/* The profiler heap's cache of a class whose blocks are large holds fewer
 * than 8 of them: freeing 8 sampled blocks of each size from 64 to 128 KiB,
 * largest first, used to push the extra ones of a class into the next
 * class's cache, which then handed them out for its larger size. Every
 * block of these sizes is sampled at SAMPLE. */
static void test_sampled_classes(void) {
  enum { PER = 8, SIZES = 9 };
  static void *blocks[SIZES][PER];
  for (int k = 0; k < SIZES; k++)
    for (int i = 0; i < PER; i++) blocks[k][i] = T_malloc((64 << 10) + (size_t)k * (8 << 10));
  for (int k = SIZES - 1; k >= 0; k--)
    for (int i = 0; i < PER; i++) T_free(blocks[k][i]);
  int short_blocks = 0;
  for (int k = 0; k < SIZES; k++)
    for (int i = 0; i < PER; i++) {
      size_t size = (64 << 10) + (size_t)k * (8 << 10);
      blocks[k][i] = T_malloc(size);
      short_blocks += T_usable_size(blocks[k][i]) < size;
    }
  for (int k = 0; k < SIZES; k++)
    for (int i = 0; i < PER; i++) T_free(blocks[k][i]);
  CHECK(short_blocks == 0, "%d sampled blocks handed out smaller than asked", short_blocks);
}

/* Sampling counts each allocation once, whichever entry point made it:
 * 64 B blocks from hak_malloc, aligned_alloc, hak_calloc and malloc in
 * turn, the same bytes each, are estimated alike (about 3,100 samples
 * each). An entry point whose fast path did not count would get no
 * sample but those of its slow path; one counted twice (an aligned
 * allocation once did) would take most of them. */
static void test_entry_sites(const char *dir) {
  enum { ROUNDS = 200000 };
  static void *d[ROUNDS], *e[ROUNDS], *g[ROUNDS], *h[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    d[i] = site_d();
    e[i] = site_e();
    g[i] = site_g();
    h[i] = site_h();
  }
  double bytes = (double)ROUNDS * 64;
  char path[512];
  snprintf(path, sizeof path, "%s/entries.heap", dir);
  CHECK(hak_prof_dump(path) == 0, "hak_prof_dump(%s) failed", path);
  struct totals t;
  read_profile(path, &t);
  const char *what[] = {"hak_malloc(64)", "aligned_alloc(32, 64)", "hak_calloc(1, 64)", "malloc(64)"};
  const int site[] = {3, 4, 6, 7};
  for (int k = 0; k < 4; k++)
    CHECK(fabs(t.live[site[k]] / bytes - 1) < 0.1, "%s, %.0f bytes, estimated %.0f", what[k], bytes, t.live[site[k]]);
  for (int i = 0; i < ROUNDS; i++) {
    T_free(d[i]);
    T_free(e[i]);
    T_free(g[i]);
    free(h[i]);
  }
}

/* A large block that realloc resizes without copying counts as freed and
 * allocated anew, as one copied would: at a mean of 4 MiB, 400 blocks of
 * 256 KiB grown to 4 MiB by realloc are estimated at their new size within
 * 15% (about 250 samples: 4 standard deviations). Before, a block grown in
 * place was not counted again, and a sampled one was copied, the copy
 * counted anew: the estimate was 0. And a sampled block keeps its pages:
 * realloc moves them with mremap (before, it copied them). */
static void test_realloc_sites(const char *dir) {
  enum { BLOCKS = 400 };
  static void *blocks[BLOCKS];
  const size_t first = 256 << 10, last = 4 << 20;
  CHECK(hak_option_set(hak_option_prof_sample, (long)last) == 0, "PROF_SAMPLE could not be set");
  for (int i = 0; i < BLOCKS; i++) {
    blocks[i] = T_malloc(first);
    for (size_t size = 2 * first; size <= last; size *= 2) blocks[i] = site_f(blocks[i], size);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/realloc.heap", dir);
  CHECK(hak_prof_dump(path) == 0, "hak_prof_dump(%s) failed", path);
  CHECK(hak_option_set(hak_option_prof_sample, SAMPLE) == 0, "PROF_SAMPLE could not be set back");
  sample_mean = (double)last;
  struct totals t;
  read_profile(path, &t);
  sample_mean = SAMPLE;
  double bytes = (double)BLOCKS * (double)last;
  CHECK(fabs(t.live[5] / bytes - 1) < 0.15, "%d blocks grown by realloc to %zu bytes, estimated %.0f of %.0f live bytes",
        BLOCKS, last, t.live[5], bytes);
  for (int i = 0; i < BLOCKS; i++) T_free(blocks[i]);

  const size_t big = 64 << 20;   /* sampled: the countdown drawn at a mean of 4 MiB ends within it */
  char *p = T_malloc(big);
  p[0] = p[big - 1] = 5;
  hak_trim();   /* no BigCache entry for a copy to grow with mremap */
  struct hak_stats st;
  hak_stats_get(&st);
  uint64_t remaps = st.os_remaps;
  p = site_f(p, 2 * big);
  CHECK(p && p[0] == 5 && p[big - 1] == 5, "a sampled block lost its contents in realloc");
  hak_stats_get(&st);
  CHECK(st.os_remaps > remaps, "realloc copied sampled large blocks: %llu mremap calls",
        (unsigned long long)(st.os_remaps - remaps));
  T_free(p);
}

static int child(void) {
  enum { MAX = 400000 };
  static void *a[MAX], *b[MAX], *c[MAX];
  size_t na, nb, nc;
  size_t ua = site_a(a, 24 << 20, &na);
  size_t ub = site_b(b, 8 << 20, &nb);
  site_c(c, 8 << 20, &nc);
  for (size_t i = 0; i < nc; i++) T_free(c[i]);
  test_cache_churn();

  const char *dir = getenv("TEST_PROF_DIR");
  test_entry_sites(dir);
  char path[512];
  snprintf(path, sizeof path, "%s/dump1.heap", dir);
  CHECK(hak_prof_dump(path) == 0, "hak_prof_dump(%s) failed", path);
  struct totals t;
  read_profile(path, &t);
  CHECK(t.header_ok, "the profile's first line is not a heap_v2/4096 heap profile header");
  CHECK(t.maps_ok, "the profile does not end with the process's mappings");
  CHECK(t.lines > 3, "the profile has %d stacks", t.lines);
  double ratio = t.live[0] / t.live[1];
  CHECK(ratio > 2.7 && ratio < 3.3, "site_a / site_b live bytes estimated %.3f (%.0f / %.0f), allocated 3:1", ratio,
        t.live[0], t.live[1]);
  CHECK(fabs(t.live[0] / ua - 1) < 0.1, "site_a live bytes estimated %.0f, holds %zu", t.live[0], ua);
  CHECK(fabs(t.live[1] / ub - 1) < 0.1, "site_b live bytes estimated %.0f, holds %zu", t.live[1], ub);
  CHECK(t.live_raw[2] == 0, "site_c freed everything, the profile still holds %ld of its samples", t.live_raw[2]);
  CHECK(t.total[2] > 0.5 * (8 << 20), "site_c's allocations were not counted in the totals (%.0f)", t.total[2]);
  CHECK(t.first_frame_in_hakmem == 0, "%d of %d stacks do not start at the program's call, the first at %s",
        t.first_frame_in_hakmem, t.lines, t.first_in_hakmem);

  /* a profile after freeing site_b: its bytes are gone */
  for (size_t i = 0; i < nb; i++) T_free(b[i]);
  snprintf(path, sizeof path, "%s/dump2.heap", dir);
  CHECK(hak_prof_dump(path) == 0, "second dump");
  read_profile(path, &t);
  CHECK(t.live_raw[1] == 0 && t.live[0] > 0.9 * ua, "after site_b's frees: site_b %ld samples, site_a %.0f bytes",
        t.live_raw[1], t.live[0]);

  /* PROF_SIGNAL (SIGUSR2) writes PROF_FILE's first name */
  raise(SIGUSR2);
  snprintf(path, sizeof path, "%s/p.%d.0.heap", dir, (int)getpid());
  read_profile(path, &t);
  CHECK(t.header_ok && t.maps_ok, "no profile %s after SIGUSR2", path);
  for (size_t i = 0; i < na; i++) T_free(a[i]);
  test_sampled_release();
  test_sampled_classes();
  test_realloc_sites(dir);
#if HAK_STAT >= 2
  /* the statistics count sampled blocks like any other */
  struct hak_stats st;
  hak_stats_get(&st);
  CHECK(st.counted && st.balanced, "allocations %llu != frees %llu + live %llu", (unsigned long long)st.allocs,
        (unsigned long long)st.frees, (unsigned long long)st.live);
#endif
  printf("%d\n", (int)getpid());
  return test_done("prof child");
}

/* Debian's google-pprof (package google-perftools) reads the first profile
 * and finds the same 3:1 split; skipped where it is not installed. */
static void pprof_check(const char *dir) {
  if (system("command -v google-pprof >/dev/null 2>&1") != 0) {
    printf("note: google-pprof not installed, its check skipped\n");
    return;
  }
  char exe[512], cmd[1400], line[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  snprintf(cmd, sizeof cmd, "google-pprof --text %s %s/dump1.heap 2>/dev/null", exe, dir);
  FILE *f = popen(cmd, "r");
  double a = 0, b = 0, flat, flat_pct, sum_pct, cum;
  char name[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, " %lf %lf%% %lf%% %lf %*f%% %255s", &flat, &flat_pct, &sum_pct, &cum, name) == 5) {
      if (!strcmp(name, "site_a")) a = cum;
      if (!strcmp(name, "site_b")) b = cum;
    }
  if (f) pclose(f);
  CHECK(b > 0 && a / b > 2.7 && a / b < 3.3, "google-pprof --text: site_a %.1f MB, site_b %.1f MB", a, b);
}

/* True if a file whose name contains name is mapped in this process. */
static bool mapped(const char *name) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  bool found = false;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, name)) found = true;
  if (f) fclose(f);
  return found;
}

static const char *program;   /* argv[0]: the build, by its prefix */

static void test_off(void) {
  CHECK(hak_prof_dump("/dev/null") == ENOENT, "hak_prof_dump with profiling off");
  /* the unwinder is loaded when profiling starts, not by every process
   * (UBSan's runtime links it itself) */
  if (!strstr(program, "ubsan_")) CHECK(!mapped("libgcc_s"), "libgcc_s is mapped with profiling off");
}

static void test_sampled(void) {
  char dir[] = "/tmp/hakmem-prof-XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp: %s", strerror(errno));
    return;
  }
  char e_dir[600], e_file[600];
  snprintf(e_dir, sizeof e_dir, "TEST_PROF_DIR=%s", dir);
  snprintf(e_file, sizeof e_file, "HAKMEM_PROF_FILE=%s/p.%%p.%%n.heap", dir);
  const char *dyn = strstr(program, "dyn_") ? "TEST_PROF_DYNAMIC=1" : NULL;
  const char *env[] = {"HAKMEM_PROF_SAMPLE=4096", "HAKMEM_PROF_SIGNAL=12", e_dir, e_file, dyn, NULL};
  char out[4096], err[8192];
  int status = run_self(env, out, sizeof out, err, sizeof err);
  fputs(err, stderr);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the profiled child failed (status %d)", status);
  long passed = 0, failed = 0;
  const char *r = strstr(out, "RESULT prof child ");
  CHECK(r && sscanf(r, "RESULT prof child %ld %ld", &passed, &failed) == 2, "no result from the child: %s", out);
  check_passed += (int)passed;
  check_failed += (int)failed;
  /* the profile at exit: PROF_FILE's second name */
  char path[700];
  snprintf(path, sizeof path, "%s/p.%ld.1.heap", dir, atol(out));
  struct totals t;
  read_profile(path, &t);
  CHECK(t.header_ok && t.maps_ok, "no profile %s at exit", path);
  pprof_check(dir);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "%s", cmd);
}

static const test_case_t cases[] = {
    {"off", test_off},
    {"sampled", test_sampled},
};

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child")) return child();
  program = argv[0];
  return RUN_CASES("prof", cases, argc, argv);
}
