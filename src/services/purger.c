/* The background purger: one thread that returns free memory to the OS when
 * the release policy's delays pass (release.c), so that a program whose
 * threads sleep, or that stopped calling the allocator, still gives back
 * what it freed. It sweeps every SuperSlab of the arena (any thread may
 * decommit dirty units, types.h), collects the heaps of exited threads,
 * takes the inboxes of heaps whose thread sleeps back to their slabs
 * (holding the heap's slow-path token, heap.c) and expires the BigCache.
 * It never allocates and never touches a heap's caches, so the fast paths
 * know nothing of it.
 *
 * It starts on first need once the program has a second thread: the first
 * deadline scheduled asks for it (ASKED while the program's threads that
 * use the allocator are one, WANTED from the second), and the next slow
 * path that can safely create a thread (hak_purger_poll: malloc's, and
 * free's of another thread's block or of a large block, which may be all a
 * thread does) starts it. A program with one thread stays with one: its
 * own slow paths return its memory, as they did before the purger, and
 * what a second thread would be visible to stays as under glibc (Python
 * 3.12 warns that a fork() in a process with threads may deadlock, which
 * failed CPython's test_threading; unshare(CLONE_NEWUSER) refuses a
 * process with threads).
 * With nothing pending it sleeps on a futex; whoever schedules the next
 * deadline wakes it. BACKGROUND_PURGE=0 keeps it from starting (a running one
 * stays idle). It stops when the last thread with a heap exits, and starts
 * again on need, in a forked child too. */

#include "internal.h"

#define MIN_PERIOD_MS 10   /* it sleeps at least this long, and at least half the purge delay:
                              deadlines closer than that are served together */

_Atomic int hak_purger_state;   /* PURGER_*; read inline by hak_purger_poll (internal.h) */
static _Atomic uint32_t wake;       /* futex word: bumped to wake the purger */
static _Atomic uint32_t sleeping;   /* 1 while it waits with nothing pending */
static _Atomic int stopping;        /* 1: leave at once */
static uintptr_t purger_id;
static _Atomic int live_threads;    /* threads with a heap that have not exited */
static _Atomic uint64_t passes;     /* sweeps done, for the statistics */

uint64_t hak_purger_passes(void) { return atomic_load_explicit(&passes, memory_order_relaxed); }

/* One sweep of everything; the earliest deadline still pending, 0 if none.
 * Sleeping threads' inboxes and caches go back to their slabs first, so
 * that the sweep sees the units that empties (and their deadlines). */
static uint64_t purge_pass(void) {
  int released = 0;
  uint64_t inboxes = hak_heap_reclaim_others(false);
  uint64_t now = hak_os_now_ms();
  uint64_t abandoned = hak_release_abandoned(now);
  uint64_t next = hak_release_sweep_all(false, &released);
  uint64_t big = hak_bigcache_tick();
  hak_ace_poll(now);
  atomic_fetch_add_explicit(&passes, 1, memory_order_relaxed);
  return hak_deadline_min(hak_deadline_min(hak_deadline_min(next, abandoned), big), inboxes);
}

static void *purger_main(void *arg) {
  HAK_TRACK_ENTER();   /* all of this thread's work is hakmem's own */
  while (!atomic_load(&stopping)) {
    uint32_t seq = atomic_load(&wake);
    if (!hak_opt(hak_option_background_purge)) {   /* turned off: idle until turned on and notified */
      atomic_store(&sleeping, 1);
      hak_os_wait(&wake, seq, 0);
      continue;
    }
    uint64_t next = purge_pass();
    if (!next) {
      /* Announce the sleep, then look once more: a deadline scheduled
       * before the announcement is seen by this pass, one scheduled after
       * it sees the announcement and wakes us (hak_purger_notify). */
      atomic_store(&sleeping, 1);
      next = purge_pass();
    }
    uint64_t timeout = 0;   /* none: until woken */
    if (next) {
      uint64_t now = hak_os_now_ms(), period = hak_release_delay() / 2;
      if (period < MIN_PERIOD_MS) period = MIN_PERIOD_MS;
      timeout = next > now + period ? next - now : period;
      atomic_store(&sleeping, 0);
    }
    hak_os_wait(&wake, seq, timeout);
    atomic_store(&sleeping, 0);
  }
  HAK_TRACK_LEAVE();
  return NULL;
}

static void wake_purger(void) {
  atomic_fetch_add(&wake, 1);
  hak_os_wake(&wake);
}

/* A deadline was scheduled: wake the purger if it sleeps, ask for it if it
 * has not started. Cheap when it runs: three loads. */
void hak_purger_notify(void) {
  int s = atomic_load_explicit(&hak_purger_state, memory_order_relaxed);
  if (!hak_opt(hak_option_background_purge)) return;
  if (s == PURGER_RUNNING) {
    if (atomic_load(&sleeping) && atomic_exchange(&sleeping, 0)) wake_purger();
  } else if (s == PURGER_NONE || s == PURGER_ASKED) {
    int want = atomic_load(&live_threads) >= 2 ? PURGER_WANTED : PURGER_ASKED;
    if (want != s) atomic_compare_exchange_strong(&hak_purger_state, &s, want);
  }
}

/* Start the purger, which was asked for (hak_purger_poll). An exiting
 * thread leaves it to the next caller. */
void hak_purger_start(void) {
  int s = PURGER_WANTED;
  if (hak_thread_exiting() || !hak_opt(hak_option_background_purge)) return;
  if (!atomic_compare_exchange_strong(&hak_purger_state, &s, PURGER_STARTING)) return;
  atomic_store(&sleeping, 0);
  atomic_store(&stopping, 0);
  /* If no thread can be had, asking again would only fail again: the
   * program's own calls purge as they always do. */
  atomic_store(&hak_purger_state, hak_os_thread_start(purger_main, &purger_id) ? PURGER_RUNNING : PURGER_STARTING);
}

/* The purger must not outlive the program's threads: when the last thread
 * that has a heap exits (pthread_exit of the last thread ends a process
 * only if no other thread is left), it stops the purger and waits for it;
 * a later need starts it again. */
void hak_purger_thread_started(void) {
  int asked = PURGER_ASKED;   /* after the count, which a notify reads after its look at the state */
  if (atomic_fetch_add(&live_threads, 1) >= 1)
    atomic_compare_exchange_strong(&hak_purger_state, &asked, PURGER_WANTED);
}

void hak_purger_thread_done(void) {
  if (atomic_fetch_sub(&live_threads, 1) == 1) hak_purger_stop(false);
}

/* Stop the purger, if it runs, and wait for it; for_good: it never starts
 * again (it stays "starting", which no one else moves on from). */
void hak_purger_stop(bool for_good) {
  int s = PURGER_RUNNING;
  if (!atomic_compare_exchange_strong(&hak_purger_state, &s, PURGER_STARTING)) return;
  atomic_store(&stopping, 1);
  wake_purger();
  hak_os_thread_join(purger_id);
  if (!for_good) atomic_store(&hak_purger_state, PURGER_ASKED);
}

/* In a forked child the purger (like every thread but the caller) is gone,
 * and so is any sweep that was under way in another thread; the heap
 * profile's lock, taken before the fork, is let go. */
static void fork_prepare(void) {
  hak_heap_fork_prepare();
  hak_prof_fork_prepare();
}

static void fork_parent(void) {
  hak_prof_fork_parent();
  hak_heap_fork_done();
}

static void fork_child(void) {
  HAK_TRACK_ENTER();
  hak_heap_fork_done();
  hak_prof_fork_child();
  hak_release_forget_sweeps();
  hak_bigcache_forked();
  hak_ace_forked();
  int s = atomic_load_explicit(&hak_purger_state, memory_order_relaxed);
  atomic_store(&sleeping, 0);
  atomic_store(&hak_purger_state, s == PURGER_NONE ? PURGER_NONE : PURGER_ASKED);   /* the child has one thread */
  atomic_store(&live_threads, hak_tls_heap != &hak_heap_empty);
  HAK_TRACK_LEAVE();
}

/* Register the fork handler; once, from the first thread's first heap (a
 * point where registering, which allocates, may run malloc again). */
void hak_purger_install(void) {
  static _Atomic int installed;
  if (!atomic_load_explicit(&installed, memory_order_relaxed) && !atomic_exchange(&installed, 1))
    hak_os_at_fork(fork_prepare, fork_parent, fork_child);
}
