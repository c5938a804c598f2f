/* The shared pool: empty SuperSlabs waiting for any thread that needs one.
 * A fixed array of slots taken and filled with single atomic exchanges: no
 * lock, no ABA. A SuperSlab of the arena keeps the pages its units have
 * resident (dirty, types.h) for the purge delay, so that a thread that
 * takes it meanwhile uses them without faulting them in again, whether a
 * running heap's SuperSlab emptied (release.c) or a thread's exit gave it
 * (docs/design/tuning.md, "Warm SuperSlabs in the shared pool"). Any push
 * or pop decommits those pooled longer, and the background purger's
 * sweeps, which reach every SuperSlab of the arena, those left at their
 * purge deadline: a pool nobody uses any more holds no more than a heap's
 * free units would. Without the purger, and outside the arena, where no
 * sweep reaches, a SuperSlab is decommitted as it comes in. One that finds
 * no free slot among the first SHARED_POOL_SLOTS is unmapped, or given back
 * to the arena. */
#include "internal.h"

static _Atomic(hak_superslab_t *) slots[HAK_SHARED_POOL_SLOTS];
static _Atomic int pooled;

/* Clear the dirty units of ss, an empty SuperSlab no heap owns, waiting
 * for a sweep that is decommitting some of them, or a guest undoing a
 * claim it made as ss closed (types.h): once it is clear, no sweep
 * touches it. */
static void close_dirty(hak_superslab_t *ss) {
  uint64_t w = atomic_load(&ss->dirty);
  for (;;) {
    if (HAK_HELD(w)) {
      hak_os_yield();
      w = atomic_load(&ss->dirty);
    } else if (!w || atomic_compare_exchange_weak(&ss->dirty, &w, 0)) {
      return;
    }
  }
}

static void unmap_superslab(hak_superslab_t *ss) {
  close_dirty(ss);
  hak_registry_set((uintptr_t)ss, HAK_REG_FOREIGN);
  if (hak_in_arena((uintptr_t)ss)) hak_arena_give(ss);
  else hak_os_unmap(ss, HAK_SS_SIZE);
}

/* Units of the pooled ss with pages resident. A SuperSlab outside the
 * arena has none (and may be unmapped meanwhile: it is not read); the
 * arena stays mapped. */
static unsigned warm_units(hak_superslab_t *ss) {
  return hak_in_arena((uintptr_t)ss) ? (unsigned)__builtin_popcount(HAK_DIRTY(atomic_load_explicit(&ss->dirty, memory_order_relaxed))) : 0;
}

/* The slot of the pooled SuperSlab with the most units resident, -1 if
 * none; the pages of those whose warm time passed go back on the way
 * (a sweep's claim: one that another thread takes meanwhile keeps the
 * units it finds being decommitted out of its runs, superslab.c). */
static int pool_scan(void) {
  uint32_t now = (uint32_t)hak_os_now_ms();
  int best = -1;
  unsigned most = 0;
  for (unsigned i = 0; i < HAK_SHARED_POOL_SLOTS; i++) {
    hak_superslab_t *ss = atomic_load_explicit(&slots[i], memory_order_acquire);
    if (!ss) continue;
    unsigned warm = warm_units(ss);
    if (warm && (int32_t)(now - atomic_load_explicit(&ss->warm_until, memory_order_relaxed)) > 0 &&
        hak_release_purge_units(ss, HAK_UNITS_ALL))
      warm = 0;
    if (best < 0 || warm > most) {
      best = (int)i;
      most = warm;
    }
  }
  return best;
}

/* The pooled SuperSlab with the most units resident; NULL if none. */
hak_superslab_t *hak_shared_pool_pop(void) {
  while (atomic_load_explicit(&pooled, memory_order_relaxed)) {
    int best = pool_scan();
    if (best < 0) return NULL;
    hak_superslab_t *ss = atomic_exchange(&slots[best], NULL);
    if (ss) {
      atomic_fetch_sub(&pooled, 1);
      return ss;
    }
  }
  return NULL;
}

/* Pooled SuperSlabs of the arena keep their pages while the purger runs:
 * its sweeps decommit them at their deadline. */
static bool purger_sweeps(void) {
  return atomic_load_explicit(&hak_purger_state, memory_order_relaxed) == PURGER_RUNNING;
}

/* Does the pool keep the pages of a SuperSlab of the arena pushed now, and
 * has it a slot free for it (else it would unmap it)? */
bool hak_shared_pool_keeps_pages(void) {
  return purger_sweeps() && atomic_load_explicit(&pooled, memory_order_relaxed) < (int)hak_opt(hak_option_shared_pool_slots);
}

/* Pool the empty SuperSlab ss, which no sweep is decommitting: its pages
 * stay resident for the purge delay, as they would have in the heap. */
void hak_shared_pool_push(hak_superslab_t *ss) {
  HAK_STORE_SHARED(ss->owner, NULL);   /* guests look at it (superslab.c) */
  if (hak_in_arena((uintptr_t)ss) && purger_sweeps()) {
    if (atomic_load_explicit(&pooled, memory_order_relaxed)) pool_scan();
    atomic_store_explicit(&ss->warm_until, (uint32_t)(hak_os_now_ms() + hak_release_delay()), memory_order_relaxed);
    hak_release_schedule_swept(ss);
  } else {
    close_dirty(ss);
    hak_os_decommit((char *)ss + HAK_SS_HEADER, HAK_SS_SIZE - HAK_SS_HEADER);
  }
  unsigned n = (unsigned)hak_opt(hak_option_shared_pool_slots);
  for (unsigned i = 0; i < n; i++) {
    hak_superslab_t *expected = NULL;
    if (atomic_compare_exchange_strong(&slots[i], &expected, ss)) {
      atomic_fetch_add(&pooled, 1);
      return;
    }
  }
  unmap_superslab(ss);
}

/* Unmap every pooled SuperSlab. */
int hak_shared_pool_trim(void) {
  int released = 0;
  for (unsigned i = 0; i < HAK_SHARED_POOL_SLOTS; i++) {
    hak_superslab_t *ss = atomic_exchange(&slots[i], NULL);
    if (!ss) continue;
    atomic_fetch_sub(&pooled, 1);
    unmap_superslab(ss);
    released = 1;
  }
  return released;
}
