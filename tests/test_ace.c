/* The adaptive controller (src/base/ace.c, docs/ace.md): its decisions on
 * synthetic signs (it converges, it does not oscillate, it stays in its
 * bounds, it relaxes), then the knobs of a running allocator moving on real
 * signs, and standing still with HAKMEM_ACE=0. Linked against the static
 * library with the override on. */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

#define PERIOD 10   /* ms between decisions, as ace.c judges */

/* Keep the compiler from dropping an allocation it can see is unused. */
static void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static bool power_of_two_multiple(long v, long min) {
  if (v < min || v % min) return false;
  long q = v / min;
  return (q & (q - 1)) == 0;
}

/* A sign every period: the knob doubles at most once per its timescale
 * until it reaches its bound, and stays there. */
static void test_converges(void) {
  hak_ace_knob_t k = {0};
  hak_ace_knob_init(&k, 20, 20 << 6, 0);
  long seen_max_at = -1, ups_at_max = 0;
  for (long t = 1; t <= 400; t++) {
    long before = atomic_load(&k.value);
    hak_ace_knob_step(&k, (uint64_t)t * PERIOD, true, (uint64_t)before, (uint64_t)before);
    long v = atomic_load(&k.value);
    CHECK(v == before || v == 2 * before, "step from %ld to %ld at period %ld", before, v, t);
    if (v == k.max && seen_max_at < 0) {
      seen_max_at = t;
      ups_at_max = (long)k.ups;
    }
  }
  CHECK(seen_max_at > 0, "never reached the bound %ld (at %ld)", k.max, atomic_load(&k.value));
  CHECK(ups_at_max == 6 && k.ups == 6 && k.downs == 0, "%llu ups, %llu downs for 6 doublings",
        (unsigned long long)k.ups, (unsigned long long)k.downs);
  /* once per timescale: 20+40+...+640 ms of waiting at the least */
  CHECK(seen_max_at * PERIOD >= 20 + 40 + 80 + 160 + 320, "reached the bound after %ld ms", seen_max_at * PERIOD);
}

/* Signs stop: the knob comes back to its start, one halving per hold
 * (16 timescales without a sign), never below it. */
static void test_relaxes(void) {
  hak_ace_knob_t k = {0};
  hak_ace_knob_init(&k, 100, 100 << 6, 0);
  uint64_t t = PERIOD;
  for (int i = 0; i < 6; i++, t += 6400) hak_ace_knob_step(&k, t, true, 6400, 6400);
  CHECK(atomic_load(&k.value) == k.max, "did not climb: %ld", atomic_load(&k.value));
  uint64_t last_sign = t - 6400, first_down = 0;
  for (; t < last_sign + 3600 * 1000; t += PERIOD) {
    long v = atomic_load(&k.value);
    if (hak_ace_knob_step(&k, t, false, (uint64_t)v, (uint64_t)v) < 0 && !first_down) first_down = t;
  }
  CHECK(atomic_load(&k.value) == k.min, "did not come back to its start: %ld", atomic_load(&k.value));
  CHECK(k.downs == 6, "%llu steps down for 6 halvings", (unsigned long long)k.downs);
  CHECK(first_down - last_sign >= 16 * (uint64_t)k.max, "first step down %llu ms after the last sign",
        (unsigned long long)(first_down - last_sign));
}

/* Any sequence of signs keeps the knob within its bounds, on its ladder of
 * doublings of the start (or at the bound). */
static void test_bounds(void) {
  uint64_t rng = 0x9E3779B97F4A7C15u;
  int outside = 0, off_ladder = 0;
  for (int run = 0; run < 20; run++) {
    hak_ace_knob_t k = {0};
    long start = 1 + (long)(xorshift64(&rng) % 5000);
    hak_ace_knob_init(&k, start, start << (xorshift64(&rng) % 8), 0);
    unsigned density = (unsigned)(xorshift64(&rng) % 100);
    for (uint64_t t = PERIOD; t < 200000 * PERIOD; t += PERIOD) {
      bool sign = xorshift64(&rng) % 100 < density;
      uint64_t scale = (uint64_t)atomic_load(&k.value) % 3000;
      hak_ace_knob_step(&k, t, sign, scale % 2 ? PERIOD : scale, scale);
      long v = atomic_load(&k.value);
      outside += v < k.min || v > k.max;
      off_ladder += v != k.max && !power_of_two_multiple(v, k.min);
    }
  }
  CHECK(outside == 0, "%d periods with the knob out of its bounds", outside);
  CHECK(off_ladder == 0, "%d periods off the ladder of doublings", off_ladder);
}

/* Regret at regular intervals: the knob may step down and back up a few
 * times, then the hold has grown past the interval and it stays up. */
static void test_no_oscillation(void) {
  static const long intervals[] = {40, 100, 200, 400};   /* periods between signs */
  for (unsigned i = 0; i < sizeof intervals / sizeof *intervals; i++) {
    hak_ace_knob_t k = {0};
    hak_ace_knob_init(&k, 50, 50 << 4, 0);
    int reversals = 0, last_dir = 0, moves_late = 0;
    long periods = 50000;
    for (long p = 1; p <= periods; p++) {
      uint64_t v = (uint64_t)atomic_load(&k.value);
      int d = hak_ace_knob_step(&k, (uint64_t)p * PERIOD, p % intervals[i] == 0, v, v);
      if (d && last_dir && d != last_dir) reversals++;
      if (d) last_dir = d;
      if (d && p > periods / 2) moves_late++;
    }
    CHECK(reversals <= 2 * 4 + 2, "%d reversals with a sign every %ld periods", reversals, intervals[i]);
    CHECK(moves_late == 0, "still moving (%d steps) in the second half, sign every %ld periods", moves_late,
          intervals[i]);
  }
}

/* ---- the knobs of the running allocator */

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Slow-path visits, so that the controller gets its chances to judge. */
static void churn_small(void) {
  static void *p[4096];
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < 4096; i++) escape(p[i] = malloc(16 + (size_t)(i % 64) * 16));
    for (int i = 0; i < 4096; i++) free(p[i]);
  }
}

static struct hak_knob_stats knob(enum hak_knob_e which) {
  struct hak_stats st;
  hak_stats_get(&st);
  return st.knobs[which];
}

/* Mid blocks whose slab empties, a trim that decommits its units, the same
 * blocks again at once: the units were given back too early, so the purge
 * delay grows (and stays put with ACE=0). Returns the delay after it. */
static long retake_cycles(int cycles) {
  for (int c = 0; c < cycles; c++) {
    void *p[64];
    for (int i = 0; i < 64; i++) escape(p[i] = malloc(24 * 1024));
    for (int i = 0; i < 64; i++) free(p[i]);
    malloc_trim(0);
    for (int i = 0; i < 64; i++) escape(p[i] = malloc(24 * 1024));
    for (int i = 0; i < 64; i++) free(p[i]);
    churn_small();
    nap_ms(PERIOD + 10);
    churn_small();
  }
  return (long)knob(hak_knob_purge_delay_ms).value;
}

/* Blocks of a thread that exited, freed by this one and sent to its
 * abandoned heap's inbox: that heap is due for a purge one purge delay
 * later, the adaptive delay as every other deadline (it was the option's:
 * 10 ms while the knob stood at 40 or more). Returns the deadline
 * hak_release_abandoned reports right after, relative to the send; 0 if
 * it was served already. */
static void *allocate_blocks(void *arg) {
  void **p = arg;
  for (int i = 0; i < 64; i++) p[i] = malloc(64);
  return NULL;
}

static long abandoned_deadline(void) {
  static void *p[64];
  pthread_t t;
  if (pthread_create(&t, NULL, allocate_blocks, p) != 0) return -1;
  pthread_join(t, NULL);
  for (int i = 0; i < 64; i++) free(p[i]);
  uint64_t sent = hak_os_now_ms();
  hak_remote_flush_all(hak_tls_heap);
  uint64_t due = hak_release_abandoned(hak_os_now_ms());
  return due ? (long)(due - sent) : 0;
}

static void test_purge_delay_follows_retaking(void) {
  hak_option_set(hak_option_purge_delay_ms, 10);
  struct hak_knob_stats k0 = knob(hak_knob_purge_delay_ms);
  CHECK(k0.value == 10 && k0.start == 10 && k0.min == 10 && k0.max == 10 << 8,
        "set to 10 ms: value %llu, start %llu, range %llu..%llu", k0.value, k0.start, k0.min, k0.max);
  long v = 0;
  for (int tries = 0; tries < 40 && v < 40; tries++) v = retake_cycles(1);
  CHECK(v >= 40, "purge delay %ld ms after taking back trimmed units 40 times (start 10)", v);
  struct hak_knob_stats k1 = knob(hak_knob_purge_delay_ms);
  CHECK(k1.ups >= 2 && k1.ups > k0.ups && k1.value <= k1.max, "%llu steps up, value %llu", k1.ups, k1.value);
  long due = abandoned_deadline();
  CHECK(due == 0 || due >= (long)knob(hak_knob_purge_delay_ms).value,
        "an abandoned heap's purge is due %ld ms after a send, the purge delay is %llu ms", due,
        knob(hak_knob_purge_delay_ms).value);
  /* A restart puts the value back to its start and keeps the counts of
   * steps; a step the controller took meanwhile (a late sign, or a hold
   * that ran out while this thread waited for a CPU) changes the counts. */
  hak_option_set(hak_option_keep_empty_superslabs, hak_option_get(hak_option_keep_empty_superslabs));
  struct hak_knob_stats k1b = knob(hak_knob_purge_delay_ms);
  CHECK(k1b.value == k1.value || k1b.ups + k1b.downs != k1.ups + k1.downs,
        "an option that is no knob's restarted the knobs: value %llu, was %llu", k1b.value, k1.value);

  hak_option_set(hak_option_ace, 0);
  struct hak_knob_stats k2a = knob(hak_knob_purge_delay_ms);
  v = retake_cycles(10);
  struct hak_knob_stats k2 = knob(hak_knob_purge_delay_ms);
  CHECK(v == 10 && k2.min == 10 && k2.max == 10 && k2.ups == k2a.ups && k2.downs == k2a.downs,
        "ACE=0: delay %ld, range %llu..%llu, steps %llu up %llu down (%llu, %llu before)", v, k2.min, k2.max, k2.ups,
        k2.downs, k2a.ups, k2a.downs);
  hak_option_set(hak_option_ace, 1);
  hak_option_set(hak_option_purge_delay_ms, hak_option_desc(hak_option_purge_delay_ms)->defaults[HAK_PROFILE_DEFAULT]);
}

/* A 2 MiB block freed, then wanted again 30 ms later, with a BigCache
 * delay of 10 ms: its entry expires just before it is wanted, so it is
 * mapped anew; the delay doubles until it outlasts the pause (40 ms), and
 * from then on the block comes from the cache. */
static void test_bigcache_delay_follows_reuse(void) {
  hak_option_set(hak_option_bigcache_delay_ms, 10);
  struct hak_knob_stats k0 = knob(hak_knob_bigcache_delay_ms);
  CHECK(k0.value == 10 && k0.max == 10 << 6, "BigCache delay %llu, bound %llu", k0.value, k0.max);
  unsigned long long misses = 1;
  int rounds = 0, hits_in_a_row = 0;
  for (; rounds < 100 && hits_in_a_row < 3; rounds++) {
    struct hak_stats before, after;
    hak_stats_get(&before);
    char *p = malloc(2 << 20);
    memset(p, rounds, 2 << 20);
    escape(p);
    free(p);
    hak_stats_get(&after);
    misses = after.bigcache_misses - before.bigcache_misses;
    hits_in_a_row = misses ? 0 : hits_in_a_row + 1;
    nap_ms(30);
  }
  struct hak_knob_stats k1 = knob(hak_knob_bigcache_delay_ms);
  CHECK(hits_in_a_row == 3, "after %d rounds the block still missed (delay %llu ms)", rounds, k1.value);
  CHECK(k1.value >= 40 && k1.value <= k1.max && k1.ups >= 2, "delay %llu ms after %llu steps up", k1.value, k1.ups);
  hak_option_set(hak_option_bigcache_delay_ms, 5000);
  struct hak_knob_stats k2 = knob(hak_knob_bigcache_delay_ms);
  CHECK(k2.value == 5000 && k2.start == 5000, "setting an option restarts the knobs: delay %llu", k2.value);
  hak_option_set(hak_option_bigcache_delay_ms, hak_option_desc(hak_option_bigcache_delay_ms)->defaults[HAK_PROFILE_DEFAULT]);
}

/* Rounds of n blocks of size_of(0..n-1) bytes, of which touch bytes are
 * written (0: all), allocated then freed, a controller period apart, until
 * a round after the first is served from the BigCache (at most 40). The
 * last round's misses. */
static unsigned long long bigcache_rounds(int n, size_t (*size_of)(int), size_t touch) {
  void *p[32];
  unsigned long long misses = 0;
  for (int round = 0; round < 40; round++) {
    struct hak_stats before, after;
    hak_stats_get(&before);
    for (int i = 0; i < n; i++) {
      size_t size = size_of(i);
      escape(p[i] = malloc(size));
      memset(p[i], i, touch ? touch : size);
    }
    for (int i = 0; i < n; i++) free(p[i]);
    hak_stats_get(&after);
    misses = after.bigcache_misses - before.bigcache_misses;
    if (round > 0 && misses == 0) break;
    churn_small();
    nap_ms(PERIOD + 10);
    churn_small();
  }
  return misses;
}

static size_t mib_blocks(int i) { return (1 << 20) + (size_t)(i % 8) * (128 << 10); }
static size_t huge_blocks(int i) { return (size_t)(20 << 20) + (size_t)i * (3 << 19); }

/* Profile auto: 32 large blocks of 1..2 MiB (4 of each of 8 sizes, so that
 * no size bin of the BigCache overflows) freed and taken again overflow its
 * 16 MiB BigCache: blocks are refused, others mapped anew, so the budget
 * grows, by as many doublings as the refused bytes ask for, until a whole
 * round is served from the cache; never above balanced's 128 MiB. */
static void test_bigcache_budget(void) {
  hak_option_set(hak_option_profile, HAK_PROFILE_AUTO);
  hak_option_set(hak_option_bigcache_delay_ms, 5000);   /* no expiry in between */
  struct hak_knob_stats k0 = knob(hak_knob_bigcache_budget);
  CHECK(k0.value == 16 << 20 && k0.max == 128 << 20, "auto budget %llu, bound %llu", k0.value, k0.max);
  unsigned long long misses = bigcache_rounds(32, mib_blocks, 0);
  struct hak_knob_stats k1 = knob(hak_knob_bigcache_budget);
  CHECK(misses == 0, "a round of 32 blocks still missed %llu times (budget %llu)", misses, k1.value);
  CHECK(k1.value >= 64ull << 20 && k1.value <= k1.max && k1.ups > k0.ups, "budget %llu after %llu steps up", k1.value,
        k1.ups);
  CHECK(k1.max == 128 << 20, "blocks of 1..2 MiB raised the bound to %llu", k1.max);
  hak_option_set(hak_option_profile, HAK_PROFILE_BALANCED);
  struct hak_knob_stats k2 = knob(hak_knob_bigcache_budget);
  CHECK(k2.value == 128 << 20 && k2.min == k2.max, "balanced: budget %llu, fixed at its option", k2.value);
  hak_option_set(hak_option_profile, HAK_PROFILE_DEFAULT);
  hak_option_set(hak_option_bigcache_delay_ms, hak_option_desc(hak_option_bigcache_delay_ms)->defaults[HAK_PROFILE_DEFAULT]);
}

/* Profile auto, blocks so large that 128 MiB holds fewer than 16 of them
 * (10 of 20..33.5 MiB, each bin of the cache holding one size): the bound
 * grows to 16 of the refused blocks, and the budget with it until a round
 * is served from the cache. Only a page of each block is touched. */
static void test_bigcache_budget_large_blocks(void) {
  hak_option_set(hak_option_profile, HAK_PROFILE_AUTO);
  hak_option_set(hak_option_bigcache_delay_ms, 5000);
  struct hak_knob_stats k0 = knob(hak_knob_bigcache_budget);
  unsigned long long misses = bigcache_rounds(10, huge_blocks, 4096);
  struct hak_knob_stats k1 = knob(hak_knob_bigcache_budget);
  CHECK(misses == 0, "a round of 10 large blocks still missed %llu times (budget %llu)", misses, k1.value);
  CHECK(k1.value > 128 << 20 && k1.value <= k1.max && k1.max <= 16ull * (34 << 20) && k1.ups > k0.ups,
        "budget %llu (bound %llu) after %llu steps up", k1.value, k1.max, k1.ups);
  hak_option_set(hak_option_profile, HAK_PROFILE_DEFAULT);
  hak_option_set(hak_option_bigcache_delay_ms, hak_option_desc(hak_option_bigcache_delay_ms)->defaults[HAK_PROFILE_DEFAULT]);
  hak_trim();
}

/* Profile auto: one block of 20 MiB refused by the 16 MiB budget while
 * another is mapped anew is enough for the budget to hold 16 blocks of that
 * size at once, not just the block refused: a program that replaces such
 * blocks one at a time refuses one per period, and a budget that grew by
 * that much each time climbed for a second (mimalloc-bench's malloc-large),
 * each refused block's pages faulting in again meanwhile. */
static void test_bigcache_budget_one_refusal(void) {
  hak_option_set(hak_option_profile, HAK_PROFILE_AUTO);
  hak_option_set(hak_option_bigcache_delay_ms, 5000);
  struct hak_knob_stats k0 = knob(hak_knob_bigcache_budget), k1 = k0;
  size_t size = (size_t)20 << 20;
  char *p = malloc(size);
  escape(p);
  p[0] = 1;
  /* the background purger may judge a period between the refusal and the
   * new mapping, which then fall in two periods: try again */
  for (int attempt = 0; attempt < 5 && k1.ups == k0.ups; attempt++) {
    free(p);   /* refused: 20 MiB > 16 MiB */
    escape(p = malloc(size));   /* mapped anew */
    p[0] = 2;
    nap_ms(PERIOD + 10);
    churn_small();   /* a slow path judges the period */
    k1 = knob(hak_knob_bigcache_budget);
  }
  CHECK(k0.value == 16 << 20 && k1.value >= 16 * size && k1.ups == k0.ups + 1,
        "one refusal of 20 MiB: budget %llu -> %llu in %llu steps up", k0.value, k1.value, k1.ups - k0.ups);
  free(p);
  hak_option_set(hak_option_profile, HAK_PROFILE_DEFAULT);
  hak_option_set(hak_option_bigcache_delay_ms, hak_option_desc(hak_option_bigcache_delay_ms)->defaults[HAK_PROFILE_DEFAULT]);
  hak_trim();
}

/* Profile auto: a block refused by the full 16 MiB budget, then, periods
 * later, a request it could have served (its size up to half of it): the
 * budget doubles once, though the refusal and the miss fell in different
 * periods (a program that frees and allocates its big blocks a few a
 * second has them apart: the soak's budget never moved, and each miss and
 * refusal cost an madvise). A miss the refused block could not have served
 * (8 MiB against 6 MiB) moves nothing. The sizes are ones no test before
 * had refused. */
static void test_bigcache_budget_refusal_then_miss(void) {
  hak_option_set(hak_option_profile, HAK_PROFILE_AUTO);
  hak_option_set(hak_option_bigcache_delay_ms, 5000);
  void *p[8];
  int n = 0;
  size_t big = (size_t)6 << 20;
  char *q = malloc(big);
  escape(q);
  for (; n < 8 && hak_bigcache_bytes() < ((size_t)12 << 20); n++) {   /* 2.5..3.9 MiB, a bin each */
    escape(p[n] = malloc((size_t)(2560 + 192 * n) << 10));
    free(p[n]);
  }
  CHECK(hak_bigcache_bytes() >= ((size_t)12 << 20), "the BigCache holds %zu bytes", hak_bigcache_bytes());
  nap_ms(PERIOD + 10);
  churn_small();   /* the misses of the mappings above are judged alone */
  struct hak_knob_stats k0 = knob(hak_knob_bigcache_budget);
  free(q);   /* refused: 12 + 6 MiB is over 16 */
  nap_ms(PERIOD + 10);
  churn_small();
  char *other = malloc((size_t)8 << 20);   /* a miss the 6 MiB block could not serve */
  escape(other);
  nap_ms(PERIOD + 10);
  churn_small();
  struct hak_knob_stats k1 = knob(hak_knob_bigcache_budget);
  escape(q = malloc(big));   /* a miss it could have served */
  nap_ms(PERIOD + 10);
  churn_small();
  struct hak_knob_stats k2 = knob(hak_knob_bigcache_budget);
  CHECK(k0.value == 16 << 20 && k1.value == k0.value && k1.ups == k0.ups,
        "a refusal, or a miss of another size, moved the budget: %llu -> %llu", k0.value, k1.value);
  CHECK(k2.value == 32 << 20 && k2.ups == k1.ups + 1, "a miss a refused block could have served: budget %llu -> %llu",
        k1.value, k2.value);
  free(q);
  free(other);
  hak_option_set(hak_option_profile, HAK_PROFILE_DEFAULT);
  hak_option_set(hak_option_bigcache_delay_ms, hak_option_desc(hak_option_bigcache_delay_ms)->defaults[HAK_PROFILE_DEFAULT]);
  hak_trim();
}

/* The report says what the controller did. */
static void collect(const char *text, void *arg) {
  char *buf = arg;
  strncat(buf, text, 32767 - strlen(buf));
}

static void test_report(void) {
  static char text[32768], json[32768];
  hak_stats_print(collect, text);
  hak_stats_print_json(collect, json);
  CHECK(strstr(text, " ace: ") && strstr(text, "purge_delay_ms ") && strstr(text, "bigcache_delay_ms "),
        "text report lacks the controller:\n%s", text);
  CHECK(strstr(json, "\"knobs\":{\"purge_delay_ms\":{\"value\":") && strstr(json, "\"ace_periods\":"),
        "JSON report lacks the knobs");
}

/* A second thread of the program, so that the background purger runs
 * (purger.c: not in a program with one thread): its sweeps decommit the
 * units that the tests then take back, and its passes judge the periods. */
static void *second_thread(void *arg) {
  free(malloc(16));
  for (;;) pause();
  return arg;
}

static const test_case_t cases[] = {
    {"converges", test_converges},
    {"relaxes", test_relaxes},
    {"bounds", test_bounds},
    {"no_oscillation", test_no_oscillation},
    {"purge_delay_follows_retaking", test_purge_delay_follows_retaking},
    {"bigcache_delay_follows_reuse", test_bigcache_delay_follows_reuse},
    {"bigcache_budget", test_bigcache_budget},
    {"bigcache_budget_large_blocks", test_bigcache_budget_large_blocks},
    {"bigcache_budget_one_refusal", test_bigcache_budget_one_refusal},
    {"bigcache_budget_refusal_then_miss", test_bigcache_budget_refusal_then_miss},
    {"report", test_report},
};

int main(int argc, char **argv) {
  pthread_t t;
  pthread_create(&t, NULL, second_thread, NULL);
  return RUN_CASES("test_ace", cases, argc, argv);
}
