/* ACE, the adaptive controller: it watches signs, counted on slow paths
 * only, that memory hakmem gave back was needed again soon after, and moves
 * the knobs that decide how long free memory is kept (docs/ace.md).
 *
 * The objective: hold as little free memory as possible, except where
 * giving it back costs time. Each knob starts at its option's value, the
 * profile's, which is the least memory it will ever keep; a sign of regret
 * (memory given back and then taken again, at the price of system calls
 * and page faults) doubles it, at most once per its own timescale and up to
 * a bound; a hold time without any such sign halves it again. The hold
 * doubles after each reversal (a step down soon undone by a step up), up to
 * MAX_BACKOFF times, so a program that needs memory back at regular
 * intervals keeps it instead of making the knob swing; it shrinks again
 * after steps down that were not undone.
 *
 * The controller runs at most once per PERIOD_MS, from the slow paths
 * (hak_release_tick, a BigCache miss) and from the background purger,
 * never from a fast path. Knob values are read with relaxed loads wherever
 * they are used. */
#include "internal.h"

#define PERIOD_MS 10
#define QUIET_SCALES 16   /* the hold: this many of the knob's timescales without a sign */
#define MAX_BACKOFF 4
#define REVERSAL_HOLDS 16 /* a step up within this many holds of a step down undoes it */

/* ---- one knob's decision (pure: unit-tested on synthetic signs) */

/* Start (again) at start, bounded by max; the counts of steps stay. */
void hak_ace_knob_init(hak_ace_knob_t *k, long start, long max, uint64_t now) {
  atomic_store_explicit(&k->value, start, memory_order_relaxed);
  k->start = k->min = start;
  k->max = max > start ? max : start;
  k->quiet_since = now;
  k->last_up = k->last_down = 0;
  k->backoff = 0;
}

/* The hold before a step down: QUIET_SCALES timescales, doubled per backoff. */
static uint64_t hold_ms(const hak_ace_knob_t *k, uint64_t scale_ms) {
  if (scale_ms < PERIOD_MS) scale_ms = PERIOD_MS;
  return (QUIET_SCALES * scale_ms) << k->backoff;
}

int hak_ace_knob_step(hak_ace_knob_t *k, uint64_t now, unsigned regret, uint64_t up_gap_ms, uint64_t scale_ms) {
  long v = atomic_load_explicit(&k->value, memory_order_relaxed);
  if (regret) {
    k->quiet_since = now;
    if (v >= k->max || (k->last_up && now - k->last_up < up_gap_ms)) return 0;
    if (k->last_down > k->last_up && now < k->undone_before && k->backoff < MAX_BACKOFF)
      k->backoff++;   /* a reversal: the last step down was wrong */
    for (; regret && v < k->max; regret--) v = v > k->max / 2 ? k->max : 2 * v;
    atomic_store_explicit(&k->value, v, memory_order_relaxed);
    k->last_up = now;
    k->ups++;
    return 1;
  }
  uint64_t hold = hold_ms(k, scale_ms);
  if (v <= k->min || now - k->quiet_since < hold) return 0;
  if (k->last_down > k->last_up && k->backoff) k->backoff--;   /* two steps down in a row */
  atomic_store_explicit(&k->value, v / 2 < k->min ? k->min : v / 2, memory_order_relaxed);
  k->quiet_since = k->last_down = now;
  k->undone_before = now + ((hold >> k->backoff) << MAX_BACKOFF);
  k->downs++;
  return -1;
}

/* ---- the knobs of the allocator */

/* Doublings above its start each knob may take, per profile (fast,
 * balanced, lean, auto): the fixed profiles stretch only their delays;
 * auto's BigCache may grow from lean's 16 MiB to balanced's 128 MiB, or
 * to BIGCACHE_BLOCKS of the blocks it refuses where those are larger
 * (budget_room), and its purge delay from 100 ms to 25.6 s: a steady
 * program whose heaps' free units are taken back tens of seconds after
 * they went free paid 3 madvise calls a second at 6.4 s (the soak: 3.5e-7
 * system calls per operation; 6.5e-8 at 25.6 s, at the same peak RSS). */
static const struct {
  hak_option_t option;
  uint8_t max_shift[4];
} knob_desc[hak_knob_count] = {
  [hak_knob_purge_delay_ms] = {hak_option_purge_delay_ms, {6, 6, 6, 8}},
  [hak_knob_bigcache_delay_ms] = {hak_option_bigcache_delay_ms, {6, 6, 6, 6}},
  [hak_knob_bigcache_budget] = {hak_option_bigcache_budget, {0, 0, 0, 3}},
};

static hak_ace_knob_t knobs[hak_knob_count];
static _Atomic uint64_t signs[HAK_ACE_SIGNS];
static _Atomic uint64_t next_period;   /* ms */
static _Atomic int busy;               /* 1 while a thread judges a period or restarts */
static _Atomic uint64_t periods;

long hak_ace_value(enum hak_knob_e knob) { return atomic_load_explicit(&knobs[knob].value, memory_order_relaxed); }

void hak_ace_sign(hak_ace_sign_t sign, uint64_t n) { atomic_fetch_add_explicit(&signs[sign], n, memory_order_relaxed); }

static void lock(void) {
  while (atomic_exchange_explicit(&busy, 1, memory_order_acquire)) {
  }
}

static void unlock(void) { atomic_store_explicit(&busy, 0, memory_order_release); }

/* Every knob back to its option's value, within the bounds of the profile
 * (none with ACE=0): at init, and when a program sets an option the
 * controller depends on (hak_ace_option_set). */
void hak_ace_restart(void) {
  lock();
  uint64_t now = hak_os_now_ms();
  long profile = hak_opt(hak_option_profile);
  for (unsigned i = 0; i < hak_knob_count; i++) {
    long start = hak_opt(knob_desc[i].option), limit = hak_option_desc(knob_desc[i].option)->max;
    unsigned shift = hak_opt(hak_option_ace) ? knob_desc[i].max_shift[profile] : 0;
    hak_ace_knob_init(&knobs[i], start, start > limit >> shift ? limit : start << shift, now);
  }
  for (unsigned i = 0; i < HAK_ACE_SIGNS; i++) atomic_store_explicit(&signs[i], 0, memory_order_relaxed);
  atomic_store_explicit(&next_period, now + PERIOD_MS, memory_order_relaxed);
  unlock();
}

/* A program set an option: the knobs start over if it is one of theirs,
 * the profile or ACE itself. */
void hak_ace_option_set(hak_option_t option) {
  bool mine = option == hak_option_profile || option == hak_option_ace;
  for (unsigned i = 0; i < hak_knob_count; i++) mine |= knob_desc[i].option == option;
  if (mine) hak_ace_restart();
}

static uint64_t taken(hak_ace_sign_t sign) { return atomic_exchange_explicit(&signs[sign], 0, memory_order_relaxed); }

/* A cache serves a request when one of its entries fits it, from its own
 * size up to twice that: with a few entries of random sizes it mostly
 * cannot. Where the blocks it refuses are so large that 128 MiB holds
 * fewer than BIGCACHE_BLOCKS of them, auto's budget may grow to hold that
 * many, which a program of such blocks otherwise pays in page faults
 * (docs/design/tuning.md, "ACE's budget for big blocks"). */
#define BIGCACHE_BLOCKS 16

/* BIGCACHE_BLOCKS blocks of the mean size of those refused in a period. */
static uint64_t refused_blocks(uint64_t refused, uint64_t refusals) {
  return refusals ? refused / refusals * BIGCACHE_BLOCKS : 0;
}

static void budget_room(uint64_t blocks) {
  hak_ace_knob_t *k = &knobs[hak_knob_bigcache_budget];
  if (!blocks || k->max == k->start) return;   /* a fixed profile's budget stays */
  uint64_t limit = (uint64_t)hak_option_desc(hak_option_bigcache_budget)->max;
  if (blocks > limit) blocks = limit;
  if ((long)blocks > k->max) k->max = (long)blocks;
}

/* How many doublings of the BigCache budget would have kept the bytes it
 * refused, besides what it holds, and BIGCACHE_BLOCKS blocks of their mean
 * size: a budget that held only what was refused in the period ramps up
 * one refusal at a time, and each refused block in the meantime is a
 * mapping whose pages fault in again (docs/design/tuning.md, "ACE's
 * budget for big blocks"). */
static unsigned doublings_to_hold(uint64_t refused, uint64_t blocks) {
  uint64_t budget = (uint64_t)hak_ace_value(hak_knob_bigcache_budget), want = hak_bigcache_bytes() + refused;
  if (blocks > want) want = blocks;
  unsigned n = 0;
  for (; refused && budget && n < 8 && budget < want; n++) budget *= 2;
  return n ? n : refused != 0;
}

/* Judge one period. A delay may double once per its own length (its
 * effect shows no sooner); the BigCache budget once per period, since
 * refusals and new mappings in one period show its effect at once (by as
 * many doublings as the bytes refused ask for; by one where a new mapping
 * only followed, within the BigCache's regret window, the refusal of a
 * block that could have served it), and it relaxes on the timescale of its
 * entries' lifetime. The BigCache delay holds every entry
 * longer, so it grows only when the bytes mapped anew after expiries are
 * worth it: at least 1/EXPIRED_SHARE of what the cache holds (a size that
 * comes back now and then, while the cache is busy with others, is not). */
#define EXPIRED_SHARE 8
static void judge(uint64_t now) {
  uint64_t retaken = taken(HAK_ACE_RETAKEN), expired_missed = taken(HAK_ACE_EXPIRED_MISSED);
  uint64_t refused = taken(HAK_ACE_BIGCACHE_REFUSED), missed = taken(HAK_ACE_BIGCACHE_MISSED);
  uint64_t blocks = refused_blocks(refused, taken(HAK_ACE_BIGCACHE_REFUSALS));
  uint64_t refused_missed = taken(HAK_ACE_REFUSED_MISSED);
  uint64_t purge = (uint64_t)hak_ace_value(hak_knob_purge_delay_ms);
  uint64_t big = (uint64_t)hak_ace_value(hak_knob_bigcache_delay_ms);
  bool expired_early = expired_missed && expired_missed * EXPIRED_SHARE >= hak_bigcache_bytes();
  hak_ace_knob_step(&knobs[hak_knob_purge_delay_ms], now, retaken != 0, purge, purge);
  hak_ace_knob_step(&knobs[hak_knob_bigcache_delay_ms], now, expired_early, big, big);
  if (missed) budget_room(blocks);
  unsigned budget_up = missed ? doublings_to_hold(refused, blocks) : 0;
  hak_ace_knob_step(&knobs[hak_knob_bigcache_budget], now, budget_up ? budget_up : refused_missed != 0, PERIOD_MS, big);
  atomic_fetch_add_explicit(&periods, 1, memory_order_relaxed);
}

/* Judge the period just ended at now (ms), if one has; called from slow
 * paths. */
void hak_ace_poll(uint64_t now) {
  uint64_t due = atomic_load_explicit(&next_period, memory_order_relaxed);
  if (now < due || !hak_opt(hak_option_ace)) return;
  if (atomic_exchange_explicit(&busy, 1, memory_order_acquire)) return;
  if (atomic_compare_exchange_strong(&next_period, &due, now + PERIOD_MS)) judge(now);
  unlock();
}

/* A knob's value in its unit: bytes as a size, otherwise milliseconds. */
void hak_ace_format(hak_out_t *o, enum hak_knob_e knob, uint64_t v) {
  if (knob == hak_knob_bigcache_budget) hak_out_size(o, v);
  else hak_out_u64(o, v);
}

/* In a forked child: the thread that was judging, if any, is gone. */
void hak_ace_forked(void) { atomic_store_explicit(&busy, 0, memory_order_relaxed); }

#define KNOB_NAME_(name, doc) #name,
static const char *const names[hak_knob_count] = {HAK_STATS_KNOBS(KNOB_NAME_)};
#undef KNOB_NAME_

const char *hak_ace_name(enum hak_knob_e knob) { return names[knob]; }

/* For the banner: "off", or each knob's range. */
void hak_ace_describe(hak_out_t *o) {
  if (!hak_opt(hak_option_ace)) {
    hak_out_str(o, "off (ACE=0): every knob stays at its option's value");
    return;
  }
  hak_out_str(o, "on, knobs");
  for (unsigned i = 0; i < hak_knob_count; i++) {
    hak_out_str(o, i ? ", " : " ");
    hak_out_str(o, names[i]);
    hak_out_str(o, " ");
    hak_ace_format(o, (enum hak_knob_e)i, (uint64_t)knobs[i].min);
    hak_out_str(o, "..");
    hak_ace_format(o, (enum hak_knob_e)i, (uint64_t)knobs[i].max);
  }
}

/* Reads the step counts while a thread may judge: a snapshot. */
__attribute__((no_sanitize("thread"))) void hak_ace_stats(struct hak_stats *st) {
  for (unsigned i = 0; i < hak_knob_count; i++) {
    const hak_ace_knob_t *k = &knobs[i];
    st->knobs[i] = (struct hak_knob_stats){(unsigned long long)hak_ace_value((enum hak_knob_e)i),
                                           (unsigned long long)k->start, (unsigned long long)k->min,
                                           (unsigned long long)k->max, k->ups, k->downs};
  }
  st->ace_periods = atomic_load_explicit(&periods, memory_order_relaxed);
}
