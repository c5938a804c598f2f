/* Sweeping the idle (docs/design/tuning.md): the blocks that wait in the
 * inboxes and caches of a heap whose thread no longer uses them go back
 * to their slabs, taken by the purger or malloc_trim from heaps whose
 * thread sleeps (hak_heap_reclaim_others), and by a thread's own slow
 * paths from its idle classes (hak_heap_collect_idle). */
#include "internal.h"

/* The look at the heaps in use (hak_heap_reclaim_others): 0 open, 1
 * taking a heap's inboxes and caches, 2 closed while a fork is under way
 * (the child would find a heap half changed by a thread it lacks). */
static _Atomic int collector;

void hak_heap_fork_prepare(void) {
  int open = 0;
  while (!atomic_compare_exchange_weak(&collector, &open, 2)) {
    open = 0;
    hak_os_yield();
  }
}

void hak_heap_fork_done(void) { atomic_store(&collector, 0); }

/* Take the inboxes of heap h, in use by another thread, back to their
 * slabs, and with drain its caches and batches of remote frees too
 * (drain.c; *sent counts the batches it sent), holding the heap's token
 * (above) and the collector (so that a fork waits for it); false if h's
 * thread is in its slow paths (it takes them itself) or, with wait false,
 * another collector is at work. */
static bool reclaim_other(hak_heap_t *h, bool wait, bool drain, uint32_t *sent) {
  int open = 0;
  while (!atomic_compare_exchange_strong(&collector, &open, 1)) {
    if (!wait || open == 2) return false;
    open = 0;
    hak_os_yield();
  }
  uintptr_t none = 0;
  bool taken = atomic_compare_exchange_strong_explicit(&h->slow, &none, hak_thread_id(), memory_order_acquire,
                                                       memory_order_relaxed);
  if (taken) {
    if (atomic_load(&h->state) == HAK_HEAP_ACTIVE) {
      hak_heap_collect_inboxes(h, NULL);
      if (drain && h->thread) *sent += hak_heap_drain(h);
      if (drain) hak_slab_trim_due(h, false);
    }
    atomic_store_explicit(&h->slow, 0, memory_order_release);
  }
  atomic_store(&collector, 0);
  return taken;
}

/* The sum of the tops of h's caches that hold blocks and of the next
 * slots of its batches of remote frees that hold some (0: none), read
 * while its thread may move them (a guess, which ThreadSanitizer is told
 * not to check: its slow paths move them with plain stores): it changes
 * with every malloc and free but the pairs that undo each other. */
__attribute__((no_sanitize("thread"))) static uint64_t held_sum(hak_heap_t *h) {
  uint64_t sum = 0;
  for (unsigned c = 0; c < HAK_CACHED_CLASSES; c++) {
    const volatile hak_ucache_t *k = &h->cache[c];
    void **top = k->top;
    if (top > k->items) sum += (uintptr_t)top;
  }
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    const volatile hak_remote_batch_t *b = &h->outgoing[c];
    if (b->head) sum += (uintptr_t)b->slot + b->count;
  }
  return sum;
}

/* The purger drains the caches of a heap in use once they and its
 * slow-path visits stayed as they were for this long, or for the purge
 * delay if longer, and looks again then while they hold blocks: a thread
 * that sleeps gives its caches back within two of these. */
#define IDLE_LOOK_MS 1000

/* Blocks that other threads free wait in their owner's inboxes until its
 * thread reaches a slow path, and blocks it freed itself wait in its
 * caches; a thread that waits (a main thread in pthread_join, a listener
 * in accept, a pool's idle worker) would keep them, and the slabs they
 * hold, for as long as it waits (docs/design/tuning.md, "Sweeping the
 * idle"). So the purger, at each pass, takes
 * back to their slabs the inboxes of the heaps whose thread entered no
 * slow path since its last pass, and the caches of those whose caches and
 * visits stayed the same for IDLE_LOOK_MS (reclaim_other); the slabs that
 * empty go back to the OS after the usual delays. With all (malloc_trim),
 * the inboxes and caches of every heap in use by another thread that is
 * not in its slow paths. Returns when the purger should look again (0: no
 * need): at once for inboxes left to a busy heap, else while a heap holds
 * cached blocks. */
static uint64_t reclaim_round(bool all, uint32_t *sent) {
  uint64_t now = hak_os_now_ms(), next = 0;
  uint64_t idle = hak_release_delay() > IDLE_LOOK_MS ? hak_release_delay() : IDLE_LOOK_MS;
  for (hak_heap_t *h = hak_heap_list(); h; h = h->next_heap) {
    if (h == hak_prof_heap || h == hak_tls_heap || atomic_load_explicit(&h->state, memory_order_relaxed) != HAK_HEAP_ACTIVE)
      continue;
    bool any = hak_inboxes_any(h, 0, HAK_CLASSES) || hak_heap_pending_any(h), busy = false, drain = all;
    if (!all) {   /* visits_seen, held_seen and seen_since are the purger's */
      uint32_t visits = atomic_load_explicit(&h->visits, memory_order_relaxed);
      uint64_t held = held_sum(h);
      busy = visits != h->visits_seen;
      if (busy || held != h->held_seen) h->seen_since = now;
      h->visits_seen = visits;
      h->held_seen = held;
      drain = held && now - h->seen_since >= idle;
      if (held && !drain) next = hak_deadline_min(next, h->seen_since + idle);
    }
    if ((any && !busy) || drain) {
      if (!reclaim_other(h, all, drain, sent) && any) next = hak_deadline_min(next, now + 1);
    } else if (any) {
      next = hak_deadline_min(next, now + 1);
    }
  }
  return next;
}

uint64_t hak_heap_reclaim_others(bool all) {
  uint32_t sent = 0;
  uint64_t next = reclaim_round(all, &sent);
  /* The batches sent wait in their owners' inboxes: a trim takes them now
   * (those of its own heap are its caller's), the purger at its next pass. */
  if (sent && all) return reclaim_round(true, &sent);
  return sent ? hak_deadline_min(next, hak_os_now_ms() + 1) : next;
}

/* A cache goes back to its slabs when IDLE_SWEEPS sweeps in a row found it
 * the same and it holds at least IDLE_MIN_BYTES: smaller caches hold less
 * than a unit, and a class that gives its slab back and takes another one
 * later touches the pages of another unit: a program that uses some
 * classes a block at a time would spread over more pages
 * (docs/design/tuning.md, "Sweeping the idle"). */
#define IDLE_SWEEPS    2
#define IDLE_MIN_BYTES (32u << 10)

/* Was the class's cache idle since the last sweep? True when it is found
 * as then: the same top, the same block on it and the same item above it,
 * which every free at that height overwrites. Only a program that
 * allocates and frees the same block in turn, or the ones on top again in
 * the same order, leaves all three as they were; its cache costs a refill
 * when it goes back. Slow-path visits do not tell: a cache that the program
 * fills and drains at random visits them once in hundreds of its
 * operations. */
static bool cache_idle(hak_ucache_t *k, hak_cache_look_t *look) {
  void *above = k->top < k->end ? k->top[0] : NULL;
  if (k->top == look->top && k->top[-1] == look->block && above == look->above) return ++look->same >= IDLE_SWEEPS;
  *look = (hak_cache_look_t){k->top, k->top[-1], above, 0};
  return false;
}

static bool cache_big(const hak_ucache_t *k, unsigned cls) {
  return (size_t)(k->top - k->items) * hak_class_size[cls] >= IDLE_MIN_BYTES;
}

/* The release tick's sweep, every REMOTE_COLLECT_EVERY slow-path visits
 * (release.c):
 * - the inboxes of the classes whose cache has not refilled since the last
 *   sweep go back to their slabs, which may then empty. A class in use
 *   takes its inbox at its next refill, into its cache in the order the
 *   blocks were freed: swept onto slab free lists, they would come back
 *   shuffled (docs/design/tuning.md, "Remote-free batches");
 * - the caches of idle classes go back to their slabs (hak_cache_return):
 *   a thread that moved on to other sizes no longer keeps a cache's worth
 *   of each size it used, nor the slabs those blocks sit in;
 * - the pages of new slabs taken from other classes beyond what they carved
 *   since go back to the OS (hak_slab_trim_due). */
void hak_heap_collect_idle(hak_heap_t *h) {
  hak_heap_collect_inboxes(h, h->refilled);
  for (unsigned c = 0; c < HAK_CLASSES; c++)
    if (cache_big(&h->cache[c], c) && cache_idle(&h->cache[c], &h->looks[c])) hak_cache_return(h, c);
  memset(h->refilled, 0, sizeof h->refilled);
  hak_slab_trim_due(h, false);
}
