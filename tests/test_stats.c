/* Statistics: a scripted workload (known allocations and frees per class,
 * some freed by another thread) comes out exactly; the report's consistency
 * line balances; the JSON report parses; the route banner appears only when
 * asked. Report cases run in a re-executed child (options are read once).
 * Built twice: against the default library (STAT=1: slow-path counters) and
 * against a STAT=2 one (every allocation and free counted). */
#include <pthread.h>
#include <semaphore.h>
#include <string.h>

#include "check.h"
#include "internal.h"

static void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

enum { SMALL = 48, MEDIUM = 208, MID = 5000, LARGE = 700000 };
enum { N_SMALL = 1000, N_MEDIUM = 300, N_MID = 50, N_LARGE = 3 };
static void *small[N_SMALL], *medium[N_MEDIUM], *mid[N_MID], *large[N_LARGE];

/* Another thread frees half the small blocks when told to. It is created
 * before the counting starts so its own start-up allocations stay out. Its
 * frees reach the owner in batches, the last one when it exits. */
static sem_t go;
static void *free_remotely(void *arg) {
  sem_wait(&go);
  for (int i = 0; i < N_SMALL / 2; i++) free(small[i]);
  return arg;
}

static void test_scripted_workload(void) {
  struct hak_stats before, after;
  pthread_t t;
  sem_init(&go, 0, 0);
  pthread_create(&t, NULL, free_remotely, NULL);
  hak_stats_reset();
  hak_stats_get(&before);
  for (int i = 0; i < N_SMALL; i++) escape(small[i] = malloc(SMALL));
  for (int i = 0; i < N_MEDIUM; i++) escape(medium[i] = malloc(MEDIUM));
  for (int i = 0; i < N_MID; i++) escape(mid[i] = malloc(MID));
  for (int i = 0; i < N_LARGE; i++) escape(large[i] = malloc(LARGE));
  for (int i = 0; i < N_MEDIUM / 3; i++) free(medium[i]);
  for (int i = 0; i < N_MID; i++) free(mid[i]);
  free(large[0]);
  sem_post(&go);
  pthread_join(t, NULL);   /* its last, partial batch of remote frees goes out at exit */
  hak_stats_get(&after);

  unsigned cs = hak_class_of(SMALL), cm = hak_class_of(MEDIUM), cd = hak_class_of(MID);
  const struct hak_class_stats *s = &after.classes[cs], *m = &after.classes[cm], *d = &after.classes[cd];
#if HAK_STAT >= 2
  CHECK(s->allocs == N_SMALL, "class %u allocs %llu, want %d", cs, s->allocs, N_SMALL);
  CHECK(s->frees == N_SMALL / 2, "class %u frees %llu, want %d", cs, s->frees, N_SMALL / 2);
  CHECK(m->allocs == N_MEDIUM && m->frees == N_MEDIUM / 3, "class %u: %llu allocs %llu frees", cm, m->allocs, m->frees);
  CHECK(m->cache_hits + m->cache_misses == m->allocs, "class %u hits %llu misses %llu", cm, m->cache_hits,
        m->cache_misses);
  CHECK(d->allocs == N_MID && d->frees == N_MID, "mid class %u", cd);
  CHECK(after.tiny.allocs == N_SMALL + N_MEDIUM, "tiny allocs %llu", after.tiny.allocs);
  CHECK(after.tiny.requested == N_SMALL * SMALL + N_MEDIUM * MEDIUM, "tiny requested %llu", after.tiny.requested);
  CHECK(after.mid.allocs == N_MID, "mid allocs %llu", after.mid.allocs);
  CHECK(after.allocs == N_SMALL + N_MEDIUM + N_MID + N_LARGE, "total allocs %llu", after.allocs);
  CHECK(after.counted == 1 && after.balanced == 1, "allocations %llu != frees + live", after.allocs);
#else
  CHECK(after.counted == 0 && after.balanced == 0 && s->allocs == 0 && after.tiny.allocs == 0,
        "per-operation counts without STAT=2");
  CHECK(after.allocs == N_LARGE && after.frees == 1, "only large blocks counted: %llu allocs", after.allocs);
#endif
  CHECK(s->remote_frees == N_SMALL / 2, "class %u remote frees %llu", cs, s->remote_frees);
  CHECK(s->live - before.classes[cs].live == N_SMALL / 2, "class %u live grew by %llu", cs,
        s->live - before.classes[cs].live);
  CHECK(s->block_size == SMALL && s->bytes_live == s->live * SMALL, "class %u bytes live", cs);
  CHECK(m->remote_frees == 0, "class %u: %llu remote frees", cm, m->remote_frees);
  CHECK(m->live - before.classes[cm].live == N_MEDIUM - N_MEDIUM / 3, "class %u live", cm);
  CHECK(m->cache_misses == m->refills && m->refills > 0, "class %u misses %llu refills %llu", cm, m->cache_misses,
        m->refills);
  CHECK(d->live == before.classes[cd].live && d->refills > 0, "mid class %u", cd);
  CHECK(after.large.allocs == N_LARGE && after.large.frees == 1, "large %llu allocs %llu frees", after.large.allocs,
        after.large.frees);
  CHECK(after.large.requested == (unsigned long long)N_LARGE * LARGE, "large requested %llu", after.large.requested);
  CHECK(after.large.reserved >= (N_LARGE - 1) * (unsigned long long)LARGE, "large reserved %llu", after.large.reserved);
  CHECK(after.tiny.committed > 0 && after.tiny.committed_peak >= after.tiny.committed, "tiny committed");
  CHECK(after.os_maps > 0 && after.rss > 0 && after.rss_peak >= after.rss, "os and rss figures");

  for (int i = N_SMALL / 2; i < N_SMALL; i++) free(small[i]);
  for (int i = N_MEDIUM / 3; i < N_MEDIUM; i++) free(medium[i]);
  for (int i = 1; i < N_LARGE; i++) free(large[i]);
  hak_stats_get(&after);
  CHECK(after.classes[cs].live == before.classes[cs].live && after.classes[cm].live == before.classes[cm].live,
        "live blocks not back to where they were");
  CHECK(after.balanced == (HAK_STAT >= 2), "does not balance after freeing everything");
  hak_stats_reset();
  hak_stats_get(&after);
  CHECK(after.classes[cs].allocs == 0 && after.classes[cs].refills == 0 && after.large.allocs == 0 && after.allocs == 0,
        "reset left event counts");
  CHECK(after.balanced == (HAK_STAT >= 2) && after.classes[cs].live == before.classes[cs].live, "reset changed gauges");
}

/* A thread's first call frees blocks of the heap it then adopts (the heap
 * of the thread that allocated them and exited): those frees are counted
 * like any other. A thread is created and joined first: the first thread
 * of a process allocates its TLS block (in the creating thread), which
 * glibc keeps with the stack it caches for the next thread (run alone, the
 * case counted it live). */
enum { ADOPTED = 64 };
static void *alloc_and_exit(void *arg) {
  void **b = arg;
  for (int i = 0; i < ADOPTED; i++) escape(b[i] = malloc(48));
  return NULL;
}
static void *free_first(void *arg) {
  void **b = arg;
  for (int i = 0; i < ADOPTED; i++) free(b[i]);
  return NULL;
}

static void test_adopted_frees(void) {
  static void *blocks[ADOPTED];
  struct hak_stats before, after;
  pthread_t t;
  pthread_create(&t, NULL, free_first, blocks);   /* blocks are all NULL yet */
  pthread_join(t, NULL);
  hak_stats_get(&before);
  pthread_create(&t, NULL, alloc_and_exit, blocks);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, free_first, blocks);
  pthread_join(t, NULL);
  hak_stats_get(&after);
  CHECK(after.live == before.live, "live blocks %llu, %llu before", after.live, before.live);
#if HAK_STAT >= 2
  CHECK(after.frees - before.frees == ADOPTED, "%llu frees counted of %d", after.frees - before.frees, ADOPTED);
  CHECK(after.balanced == 1, "allocations %llu != frees %llu + live %llu", after.allocs, after.frees, after.live);
#endif
}

/* A large block grown and shrunk by realloc, then freed: the large tier's
 * gauges follow every resize and come back to where they were (reserved
 * ignored resizes and went below zero). */
static void test_large_resize_gauges(void) {
  struct hak_stats before, grown, after;
  hak_stats_get(&before);
  char *p = malloc(200000);
  escape(p = realloc(p, 3000000));
  hak_stats_get(&grown);
  CHECK(grown.large.reserved - before.large.reserved >= 3000000, "grown by %lld reserved bytes",
        (long long)(grown.large.reserved - before.large.reserved));
  CHECK(grown.large.reserved - before.large.reserved == grown.large.committed - before.large.committed,
        "reserved and committed grew apart");
  escape(p = realloc(p, 300000));
  free(p);
  hak_stats_get(&after);
  CHECK(after.large.reserved == before.large.reserved, "large reserved %llu after free, %llu before",
        after.large.reserved, before.large.reserved);
  CHECK(after.large.committed == before.large.committed, "large committed %llu after free, %llu before",
        after.large.committed, before.large.committed);
}

/* ---- reports from a child process */

static int child_main(void) {
  for (int i = 0; i < 20000; i++) {
    void *p = malloc((size_t)(i % 3000) + 1);
    escape(p);
    if (i % 4) free(p);
  }
  void *big = malloc(1 << 20), *span = malloc(400000);
  escape(big);
  escape(span);
  const char *dir = getenv("TEST_CHDIR");   /* a program that changes directory before it exits */
  if (dir && chdir(dir) != 0) return 1;
  if (getenv("TEST_CLOSE_STDERR")) fclose(stderr);   /* as coreutils' close_stdout does at exit */
  return 0;
}

static char out[1 << 16], err[1 << 16];

static void run_child(const char *const *env) {
  int status = run_self(env, out, sizeof out, err, sizeof err);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exited with status %d", status);
}

static void test_reports(void) {
  const char *quiet[] = {NULL};
  run_child(quiet);
  CHECK(err[0] == 0, "output without HAKMEM_STATS or the banner: %s", err);

  const char *text[] = {"HAKMEM_STATS=1", NULL};
  run_child(text);
  char head[128];
  CHECK(sscanf(err, "hakmem statistics (profile auto), process %*d (%127[^)])", head) == 1 &&
            strstr(err, "), explained in docs/statistics.md\n class "),
        "no text report naming the process and its legend: %.200s", err);
  bool wide = false;   /* a size of 6 digits stands apart from its class */
  for (const char *line = err; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    unsigned cls, size;
    if (sscanf(line, "%u %u", &cls, &size) == 2 && cls >= 100 && size >= 100000) wide = true;
  }
  CHECK(wide, "no class row of a 400000 B block with its class and size apart: %.2000s", err);
  CHECK(strstr(err, " of address space reserved, not memory)") != NULL, "the arena's reservation counted as memory: %.3000s",
        err);
  CHECK(strstr(err, " tier ") && strstr(err, " bigcache: ") && strstr(err, " os: mmap ") && strstr(err, " rss: "),
        "report sections missing: %s", err);
  if (HAK_STAT >= 2)
    CHECK(strstr(err, "consistency: allocations ") && strstr(err, ": balanced\n"), "report does not balance: %s", err);
  else
    CHECK(strstr(err, "consistency: live blocks ") && strstr(err, "make STAT=2"), "report consistency line: %s", err);
  CHECK(strstr(err, "hakmem 0.") == NULL, "banner printed without being asked");

  /* a program that closed stderr before exit still gets its report there
   * (ls, sort: before, the report was written to a closed descriptor) */
  const char *closed[] = {"HAKMEM_STATS=1", "TEST_CLOSE_STDERR=1", NULL};
  run_child(closed);
  CHECK(strstr(err, "hakmem statistics (profile auto), process ") && strstr(err, " rss: "),
        "no report from a program that closed stderr: %.200s", err);

  char path[] = "/tmp/hakmem-stats-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  char file_env[64];
  snprintf(file_env, sizeof file_env, "HAKMEM_STATS_FILE=%s", path);
  const char *json[] = {"HAKMEM_STATS=json", file_env, NULL};
  run_child(json);
  CHECK(err[0] == 0, "JSON report went to stderr: %.200s", err);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                            "c = d[\"counted\"]; assert c == %d and len(d[\"classes\"]) == %d and d[\"tiers\"][\"large\"][\"allocs\"] == 1 "
                            "and d[\"pid\"] > 0 and d[\"process\"] and d[\"os_reserved_bytes\"] >= 0 and "
                            "(d[\"balanced\"] == 1 if c else d[\"balanced\"] is None and d[\"allocs\"] is None and "
                            "d[\"classes\"][0][\"allocs\"] is None and d[\"tiers\"][\"tiny\"][\"requested\"] is None)' %s",
           HAK_STAT >= 2, HAK_CLASSES, path);
  CHECK(system(cmd) == 0, "JSON report does not parse or lacks fields (%s)", path);
  snprintf(cmd, sizeof cmd, "python3 -m json.tool %s > /dev/null", path);
  CHECK(system(cmd) == 0, "python3 -m json.tool rejects the report");
  unlink(path);

  /* Processes that share a file append their reports, each named; a
   * relative name is taken in the directory the process started in. */
  char shared[] = "/tmp/hakmem-stats-shared-XXXXXX";
  CHECK(mkdtemp(shared) != NULL, "mkdtemp");
  char back[4096];
  CHECK(getcwd(back, sizeof back) != NULL && chdir(shared) == 0, "chdir %s", shared);
  const char *appended[] = {"HAKMEM_STATS=1", "HAKMEM_STATS_FILE=shared.txt", "TEST_CHDIR=/", NULL};
  run_child(appended);
  run_child(appended);
  CHECK(chdir(back) == 0, "chdir back");
  snprintf(cmd, sizeof cmd,
           "[ \"$(grep -c '^hakmem statistics (profile auto), process [0-9]* (' %s/shared.txt)\" = 2 ] && "
           "[ \"$(grep -o 'process [0-9]*' %s/shared.txt | sort -u | wc -l)\" = 2 ] && [ ! -e /shared.txt ]",
           shared, shared);
  CHECK(system(cmd) == 0, "two processes did not leave two named reports in %s/shared.txt", shared);
  snprintf(cmd, sizeof cmd, "rm -rf %s", shared);
  CHECK(system(cmd) == 0, "rm %s", shared);

  /* %p in the file name is the process id: a program's children write
   * their own reports. */
  char dir[] = "/tmp/hakmem-stats-dir-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(file_env, sizeof file_env, "HAKMEM_STATS_FILE=%s/r.%%p.%%p", dir);
  const char *per_pid[] = {"HAKMEM_STATS=1", file_env, NULL};
  run_child(per_pid);
  snprintf(cmd, sizeof cmd,
           "f=$(ls %s) && echo \"$f\" | grep -qE '^r\\.[0-9]+\\.[0-9]+$' && p=${f#r.} && "
           "[ \"${p%%%%.*}\" = \"${p#*.}\" ] && [ \"$(ls %s | wc -l)\" = 1 ] && grep -q 'hakmem statistics' %s/$f",
           dir, dir, dir);
  CHECK(system(cmd) == 0, "no report at %s/r.<pid>.<pid>", dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "rm %s", dir);

  const char *banner[] = {"HAKMEM_ROUTE_BANNER=1", "HAKMEM_PURGE_DELAY_MS=5", NULL};
  run_child(banner);
  CHECK(strncmp(err, "hakmem 0.", 9) == 0, "no banner: %s", err);
  CHECK(strstr(err, "profile auto") && strstr(err, "PURGE_DELAY_MS=5") && strstr(err, "ROUTE_BANNER=1"),
        "banner lacks profile or changed options: %s", err);
  CHECK(strstr(err, "tiny <= 1024 B (32 classes)") && strstr(err, "mid <= 524288 B (72 classes)"),
        "banner lacks tiers: %s", err);
  CHECK(strstr(err, "page 4096 B") && strstr(err, "transparent huge pages"), "banner lacks page or huge pages: %s", err);
  CHECK(strstr(err, "hakmem ace: on, knobs purge_delay_ms 5..1280, bigcache_delay_ms 100..6400, bigcache_budget 16M..128M"),
        "banner lacks the controller's knobs and their ranges: %s", err);
  int lines = 0;
  for (const char *c = err; *c; c++) lines += *c == '\n';
  CHECK(lines == 4, "banner is %d lines", lines);
  const char *banner_off[] = {"HAKMEM_ROUTE_BANNER=1", "HAKMEM_ACE=0", NULL};
  run_child(banner_off);
  CHECK(strstr(err, "hakmem ace: off (ACE=0)"), "banner does not say the controller is off: %s", err);
}

static const test_case_t cases[] = {
    {"scripted_workload", test_scripted_workload},
    {"adopted_frees", test_adopted_frees},
    {"large_resize_gauges", test_large_resize_gauges},
    {"reports", test_reports},
};

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
  /* The counts below are exact: no background purger, whose start allocates. */
  hak_option_set(hak_option_background_purge, 0);
  return RUN_CASES("stats", cases, argc, argv);
}
