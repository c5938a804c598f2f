/* glibc's introspection API (src/api/introspect.c, docs/introspection.md):
 * mallinfo2's fields equal what the statistics say, field by field, and
 * follow the program (blocks in use raise uordblks, large blocks hblks and
 * hblkhd, frees lower them, a trim gives keepcost back); mallinfo is
 * mallinfo2 cut to int; malloc_stats prints glibc's lines with the same
 * figures; malloc_info writes glibc's XML shape and refuses options; mallopt
 * accepts glibc's parameters, refuses others, and M_TRIM_THRESHOLD 0 sets
 * the purge delay to 0. One thread, so no purger moves the figures. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "check.h"

#define MIB ((size_t)1 << 20)

static void same_as_stats(const char *when) {
  struct mallinfo2 m = mallinfo2();
  static struct hak_stats st;
  hak_stats_get(&st);
  unsigned long long slabs = 0;
  for (unsigned c = 0; c < HAK_STATS_CLASSES; c++) slabs += st.classes[c].slabs;
  unsigned long long arena = st.tiny.committed + st.mid.committed + st.dirty_bytes;
  unsigned long long used = st.tiny.reserved + st.mid.reserved;
  CHECK(m.arena == arena, "%s: arena %zu, statistics %llu", when, m.arena, arena);
  CHECK(m.ordblks == slabs, "%s: ordblks %zu, slabs in use %llu", when, m.ordblks, slabs);
  CHECK(m.smblks == 0 && m.usmblks == 0, "%s: smblks %zu usmblks %zu", when, m.smblks, m.usmblks);
  CHECK(m.hblks == st.large.allocs - st.large.frees, "%s: hblks %zu, large blocks in use %llu", when, m.hblks,
        st.large.allocs - st.large.frees);
  CHECK(m.hblkhd == st.large.committed, "%s: hblkhd %zu, large committed %llu", when, m.hblkhd, st.large.committed);
  CHECK(m.fsmblks == st.bigcache_bytes, "%s: fsmblks %zu, BigCache %llu", when, m.fsmblks, st.bigcache_bytes);
  CHECK(m.uordblks == used, "%s: uordblks %zu, bytes in use %llu", when, m.uordblks, used);
  CHECK(m.fordblks == arena - used, "%s: fordblks %zu, free %llu", when, m.fordblks, arena - used);
  CHECK(m.keepcost == st.dirty_bytes + st.bigcache_bytes, "%s: keepcost %zu, dirty + BigCache %llu", when, m.keepcost,
        st.dirty_bytes + st.bigcache_bytes);
}

static void test_mallinfo2_follows(void) {
  enum { N = 20000, LARGE = 4 };
  static void *p[N];
  void *big[LARGE];
  same_as_stats("at start");
  struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < N; i++) memset(p[i] = malloc(16 + (size_t)(i % 200) * 8), 1, 16);
  for (int i = 0; i < LARGE; i++) memset(big[i] = malloc(3 * MIB), 2, 3 * MIB);
  same_as_stats("blocks in use");
  struct mallinfo2 during = mallinfo2();
  CHECK(during.uordblks >= before.uordblks + (size_t)N * 16, "uordblks %zu -> %zu for %d blocks", before.uordblks,
        during.uordblks, N);
  CHECK(during.hblks == before.hblks + LARGE && during.hblkhd >= before.hblkhd + LARGE * 3 * MIB,
        "large blocks: hblks %zu -> %zu, hblkhd %zu -> %zu", before.hblks, during.hblks, before.hblkhd, during.hblkhd);
  CHECK(during.arena >= during.uordblks, "arena %zu below uordblks %zu", during.arena, during.uordblks);
  for (int i = 0; i < N; i++) free(p[i]);
  for (int i = 0; i < LARGE; i++) free(big[i]);
  same_as_stats("freed");
  struct mallinfo2 after = mallinfo2();
  CHECK(after.uordblks < during.uordblks && after.hblks == before.hblks, "freed: uordblks %zu -> %zu, hblks %zu",
        during.uordblks, after.uordblks, after.hblks);
  malloc_trim(0);
  same_as_stats("trimmed");
  struct mallinfo2 trimmed = mallinfo2();
  CHECK(trimmed.keepcost == 0, "keepcost %zu after malloc_trim(0)", trimmed.keepcost);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  struct mallinfo2 now = mallinfo2();
  CHECK(old.arena == (int)now.arena && old.uordblks == (int)now.uordblks && old.hblkhd == (int)now.hblkhd &&
            old.keepcost == (int)now.keepcost,
        "mallinfo: arena %d uordblks %d, mallinfo2 %zu %zu", old.arena, old.uordblks, now.arena, now.uordblks);
}

/* What fn writes on stderr, into buf. */
static void capture_stderr(void (*fn)(void), char *buf, size_t n) {
  char path[] = "/tmp/hakmem-introspect-XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  unlink(path);
  fflush(stderr);
  dup2(fd, 2);
  fn();
  dup2(saved, 2);
  close(saved);
  ssize_t got = pread(fd, buf, n - 1, 0);
  buf[got > 0 ? got : 0] = 0;
  close(fd);
}

static void test_malloc_stats(void) {
  void *keep = malloc(5 * MIB);
  memset(keep, 3, 5 * MIB);
  char out[2048];
  struct mallinfo2 m = mallinfo2();
  capture_stderr(malloc_stats, out, sizeof out);
  unsigned long long arena = 0, used = 0, total = 0, total_used = 0, regions = 0;
  int n = sscanf(out,
                 "Arena 0:\nsystem bytes = %llu\nin use bytes = %llu\nTotal (incl. mmap):\nsystem bytes = %llu\n"
                 "in use bytes = %llu\nmax mmap regions = %llu",
                 &arena, &used, &total, &total_used, &regions);
  CHECK(n == 5, "malloc_stats printed:\n%s", out);
  CHECK(arena == m.arena && used == m.uordblks && total == m.arena + m.hblkhd + m.fsmblks && regions == m.hblks,
        "malloc_stats: arena %llu in use %llu total %llu regions %llu; mallinfo2 %zu %zu %zu %zu", arena, used, total,
        regions, m.arena, m.uordblks, m.arena + m.hblkhd + m.fsmblks, m.hblks);
  free(keep);
}

static void test_malloc_info(void) {
  void *keep = malloc(5 * MIB);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  int rc = malloc_info(0, f);
  fclose(f);
  struct mallinfo2 m = mallinfo2();
  char want[128];
  snprintf(want, sizeof want, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>", m.hblks, m.hblkhd);
  CHECK(rc == 0 && strncmp(text, "<malloc version=\"1\">\n<heap nr=\"0\">", 33) == 0 && strstr(text, want) &&
            strstr(text, "</heap>") && strstr(text, "</malloc>\n"),
        "malloc_info returned %d and wrote:\n%s(wanted %s)", rc, text, want);
  free(text);
  f = fopen("/dev/null", "w");
  errno = 0;
  rc = malloc_info(1, f);
  CHECK(rc == -1 && errno == EINVAL, "malloc_info(1): %d, errno %d", rc, errno);
  fclose(f);
  free(keep);
}

static void test_mallopt(void) {
  CHECK(mallopt(M_ARENA_MAX, 2) == 1 && mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1 && mallopt(M_TOP_PAD, 0) == 1,
        "mallopt refused a parameter of glibc's");
  CHECK(mallopt(12345, 1) == 0, "mallopt accepted an unknown parameter");
  CHECK(mallopt(M_TRIM_THRESHOLD, -1) == 0, "mallopt accepted a negative trim threshold");
  CHECK(mallopt(M_TRIM_THRESHOLD, 0) == 1 && hak_option_get(hak_option_purge_delay_ms) == 0,
        "M_TRIM_THRESHOLD 0: purge delay %ld", hak_option_get(hak_option_purge_delay_ms));
}

static const test_case_t cases[] = {
    {"mallinfo2_follows", test_mallinfo2_follows},
    {"malloc_stats", test_malloc_stats},
    {"malloc_info", test_malloc_info},
    {"mallopt", test_mallopt},
};

int main(int argc, char **argv) {
  return RUN_CASES("introspect", cases, argc, argv);
}
