/* The background purger: one thread that returns free memory to the OS when
 * the release policy's delays pass (release.c), so that a program whose
 * threads sleep, or that stopped calling the allocator, still gives back
 * what it freed. It sweeps every SuperSlab of the arena (any thread may
 * decommit dirty units, types.h), collects the heaps of exited threads and
 * expires the BigCache. It never allocates and never touches a heap's
 * caches or lists, so the fast paths know nothing of it.
 *
 * It starts on first need: the first deadline scheduled asks for it, and the
 * next slow path that can safely create a thread (hak_purger_poll) starts it.
 * With nothing pending it sleeps on a futex; whoever schedules the next
 * deadline wakes it. BACKGROUND_PURGE=0 keeps it from starting (a running one
 * stops at its next pass). In a forked child it is started again on need. */
#include <pthread.h>

#include "internal.h"

#define MIN_PERIOD_MS 10   /* it sleeps at least this long, and at least half the purge delay:
                              deadlines closer than that are served together */

enum { PURGER_NONE, PURGER_WANTED, PURGER_STARTING, PURGER_RUNNING };
static _Atomic int state;
static _Atomic uint32_t sleeping;   /* futex word: 1 while it waits for work */
static _Atomic uint64_t passes;     /* sweeps done, for the statistics */

uint64_t hak_purger_passes(void) { return atomic_load_explicit(&passes, memory_order_relaxed); }

/* One sweep of everything; the earliest deadline still pending, 0 if none. */
static uint64_t purge_pass(void) {
  int released = 0;
  uint64_t next = hak_release_sweep_all(false, &released);
  uint64_t abandoned = hak_release_abandoned(hak_os_now_ms());
  uint64_t big = hak_bigcache_tick();
  atomic_fetch_add_explicit(&passes, 1, memory_order_relaxed);
  if (abandoned && (!next || abandoned < next)) next = abandoned;
  if (big && (!next || big < next)) next = big;
  return next;
}

static void *purger_main(void *arg) {
  (void)arg;
  while (hak_opt(hak_option_background_purge)) {
    uint64_t next = purge_pass();
    if (!next) {
      /* Announce the sleep, then look once more: a deadline scheduled
       * before the announcement is seen by this pass, one scheduled after
       * it sees the announcement and wakes us (hak_purger_notify). */
      atomic_store(&sleeping, 1);
      next = purge_pass();
      if (!next) {
        hak_os_wait(&sleeping, 1);
        continue;
      }
      atomic_store(&sleeping, 0);
    }
    uint64_t now = hak_os_now_ms(), period = hak_release_delay() / 2;
    if (period < MIN_PERIOD_MS) period = MIN_PERIOD_MS;
    hak_os_sleep_ms(next > now + period ? next - now : period);
  }
  atomic_store(&state, PURGER_NONE);
  return NULL;
}

/* A deadline was scheduled: wake the purger if it sleeps, ask for it if it
 * has not started. Cheap when it runs: two loads. */
void hak_purger_notify(void) {
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s == PURGER_RUNNING) {
    if (atomic_load(&sleeping) && atomic_exchange(&sleeping, 0)) hak_os_wake(&sleeping);
  } else if (s == PURGER_NONE && hak_opt(hak_option_background_purge)) {
    atomic_compare_exchange_strong(&state, &s, PURGER_WANTED);
  }
}

/* Start the purger if it was asked for. Called where a thread may be
 * created: at the start of a slow path, before it changes anything (thread
 * creation allocates, and that allocation may run the slow paths again). An
 * exiting thread leaves it to the next caller. */
void hak_purger_poll(void) {
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (HAK_LIKELY(s != PURGER_WANTED) || hak_thread_exiting() || !hak_opt(hak_option_background_purge)) return;
  if (!atomic_compare_exchange_strong(&state, &s, PURGER_STARTING)) return;
  atomic_store(&sleeping, 0);
  /* If no thread can be had, asking again would only fail again: the
   * program's own calls purge as they always do. */
  atomic_store(&state, hak_os_thread_start(purger_main) ? PURGER_RUNNING : PURGER_STARTING);
}

/* In a forked child the purger (like every thread but the caller) is gone,
 * and so is any sweep that was under way in another thread: its claimed
 * units become dirty again (they are free; some pages may be dropped
 * already, which a dirty unit allows). Only the arena's SuperSlabs can be
 * found; one outside it keeps such units until the process ends. */
static void fork_child(void) {
  size_t n = hak_arena_used();
  for (size_t i = 0; i < n; i++) {
    hak_superslab_t *ss = hak_arena_slot(i);
    if (hak_registry_kind((uintptr_t)ss) != HAK_REG_SUPERSLAB) continue;
    uint64_t w = atomic_load_explicit(&ss->dirty, memory_order_relaxed);
    if (HAK_PURGING(w)) atomic_store_explicit(&ss->dirty, HAK_DIRTY(w) | HAK_PURGING(w), memory_order_relaxed);
  }
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  atomic_store(&sleeping, 0);
  atomic_store(&state, s == PURGER_NONE ? PURGER_NONE : PURGER_WANTED);
}

/* Register the fork handler; once, from the first thread's first heap (a
 * point where registering, which allocates, may run malloc again). */
void hak_purger_install(void) {
  static _Atomic int installed;
  if (!atomic_load_explicit(&installed, memory_order_relaxed) && !atomic_exchange(&installed, 1))
    pthread_atfork(NULL, NULL, fork_child);
}
