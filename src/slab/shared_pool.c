/* The shared pool: empty SuperSlabs, decommitted, waiting for any thread
 * that needs one. A fixed array of slots taken and filled with single atomic
 * exchanges: no lock, no ABA. A SuperSlab that finds no free slot among the
 * first SHARED_POOL_SLOTS is unmapped, or given back to the arena. */
#include "internal.h"

static _Atomic(hak_superslab_t *) slots[HAK_SHARED_POOL_SLOTS];
static _Atomic int pooled;

static void unmap_superslab(hak_superslab_t *ss) {
  hak_registry_set((uintptr_t)ss, HAK_REG_FOREIGN);
  if (hak_in_arena((uintptr_t)ss)) hak_arena_give(ss);
  else hak_os_unmap(ss, HAK_SS_SIZE);
}

hak_superslab_t *hak_shared_pool_pop(void) {
  if (!atomic_load_explicit(&pooled, memory_order_relaxed)) return NULL;
  for (unsigned i = 0; i < HAK_SHARED_POOL_SLOTS; i++) {
    if (!atomic_load_explicit(&slots[i], memory_order_relaxed)) continue;
    hak_superslab_t *ss = atomic_exchange(&slots[i], NULL);
    if (ss) {
      atomic_fetch_sub(&pooled, 1);
      return ss;
    }
  }
  return NULL;
}

void hak_shared_pool_push(hak_superslab_t *ss) {
  ss->owner = NULL;
  hak_os_decommit((char *)ss + HAK_SS_HEADER, HAK_SS_SIZE - HAK_SS_HEADER);
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
