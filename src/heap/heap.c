/* Thread heaps: creation, the slow paths' token, adoption of heaps left by
 * exited threads, and the SuperSlabs their emptied memory passes on
 * (slab_list.c has their slabs' lists, inbox.c their remote frees, idle.c
 * the sweeps of their idle inboxes and caches).
 *
 * A heap is never unmapped: a thread that exits returns its caches and empty
 * memory and marks its heap abandoned; the next new thread adopts it with the
 * slabs still in it. Other threads may keep pushing freed blocks on the inbox
 * of an abandoned heap, which is why it must stay mapped. */
#include <errno.h>

#include "internal.h"

/* Every cache empty with capacity 0: all paths go slow. malloc's fast path
 * lowers the top of its cache 0 before it finds it empty (fast_path.h), so
 * that cache's items point past a slot of their own. */
static void *empty_slot[2];
hak_heap_t hak_heap_empty = {.cache = {[0] = {&empty_slot[1], &empty_slot[1], &empty_slot[1]}},
                             .cache_small = {[0 ... HAK_TINY_MAX / 16] = &hak_heap_empty.cache[0]}};
__thread hak_heap_t *hak_tls_heap __attribute__((tls_model("initial-exec"))) = &hak_heap_empty;
static _Atomic(hak_heap_t *) heaps;

hak_heap_t *hak_heap_list(void) { return atomic_load(&heaps); }

/* ---- the slow paths' token: the thread using a heap runs its slow paths
 * (refills, flushes, sweeps, trims, its exit) holding h->slow, and so does
 * the purger or malloc_trim when it takes the inboxes and caches of a heap
 * whose thread sleeps (hak_heap_reclaim_others): the two never change a
 * heap's slabs and lists at once. The fast paths know nothing of it: a
 * drain of the caches (drain.c) makes them fail, and the owner, once it
 * has the token again, gives its drained caches their items back. The
 * thread waits (yields) only while another holds the token, for one
 * heap's inboxes and caches. A slow path entered again from within one (a
 * signal handler's malloc) goes on without taking it, as it did before
 * there was a token. */
bool hak_heap_enter(hak_heap_t *h) {
  uintptr_t me = hak_thread_id(), held = 0;
  while (!atomic_compare_exchange_weak_explicit(&h->slow, &held, me, memory_order_acquire, memory_order_relaxed)) {
    if (held == me) return false;
    if (held) hak_os_yield();
    held = 0;
  }
  atomic_store_explicit(&h->visits, atomic_load_explicit(&h->visits, memory_order_relaxed) + 1, memory_order_relaxed);
  if (HAK_UNLIKELY(h->drained[0] | h->drained[1]) && h->thread == me) hak_cache_undrain(h);
  return true;
}

void hak_heap_leave(hak_heap_t *h, bool entered) {
  if (entered) atomic_store_explicit(&h->slow, 0, memory_order_release);
}

/* ---- lifecycle */

/* Blocks of room a class's cache has to grow into beyond its first items. */
static uint32_t growth_room(uint32_t first, uint32_t room) { return room > first ? room : 0; }

/* A heap's mapping: the heap; while heap profiling is on, its profiling
 * state; the first items of every class's cache, packed; then the room
 * each class's cache grows into (cache.c), pages touched only by a cache
 * that grows. */
void **hak_cache_items_at(hak_heap_t *h, unsigned cls, bool grown) {
  void **it = hak_prof_on ? (void **)(h->prof + 1) : (void **)(h + 1);
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    uint32_t first = h->cache_first[c], more = growth_room(first, h->cache_room[c]);
    if (grown) it += first;   /* every class's first items come before the grown ones */
    if (c < cls) it += grown ? more : first;
  }
  return it;
}

/* A new heap, in the global list (see hak_cache_items_at); with
 * few_cached, caches of HAK_FEW_CACHED blocks a class that never grow (the
 * profiler's heap, whose blocks are rare samples). */
hak_heap_t *hak_heap_new(bool few_cached) {
  uint16_t first[HAK_CLASSES], room[HAK_CLASSES];
  size_t items = 0, grown = 0;
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    bool cached = c < HAK_CACHED_CLASSES;
    items += first[c] = (uint16_t)(!cached ? 0 : few_cached ? HAK_FEW_CACHED : hak_class_cache_cap(c));
    room[c] = (uint16_t)(!cached ? 0 : few_cached ? HAK_FEW_CACHED : hak_class_cache_room(c));
    grown += growth_room(first[c], room[c]);
  }
  size_t page = hak_os_page_size();
  size_t bytes = sizeof(hak_heap_t) + (hak_prof_on ? sizeof(hak_prof_state_t) : 0) + (items + grown) * sizeof(void *);
  hak_heap_t *h = hak_os_map((bytes + page - 1) & ~(page - 1));
  if (!h) return NULL;
  memcpy(h->cache_first, first, sizeof first);
  memcpy(h->cache_room, room, sizeof room);
#if HAK_SECURE
  h->random = hak_os_random();
#endif
  for (unsigned i = 0; i <= HAK_TINY_MAX / 16; i++) h->cache_small[i] = &h->cache[hak_class_of_small[i]];
  memcpy(h->cache_of_mid, hak_cache_of_mid, sizeof h->cache_of_mid);
  if (hak_prof_on) h->prof = (hak_prof_state_t *)(h + 1);
  void **it = hak_cache_items_at(h, 0, false);
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    uint32_t cap = h->cache_first[c];
#if HAK_STAT >= 2
    h->cache[c].cls = c;
#endif
    h->cache[c].top = h->cache[c].items = it;
    h->cache[c].end = it + cap;
    /* A batch holds three quarters of the cache; the owner's refills take
     * its containers a few at a time (inbox.c; docs/design/tuning.md,
     * "Remote-free batches"). What a sleeping thread's partial batches
     * hold, drains send (drain.c). */
    hak_remote_batch_t *b = &h->outgoing[c];
    b->limit = cap >= 8 ? cap - cap / 4 : 1;
    uint32_t holds = hak_container_room(c);   /* a container of the batch lists fewer than its limit */
    b->room = holds < b->limit - 1 ? holds : b->limit - 1;
    it += cap;
  }
  h->prof_left = INT64_MAX;   /* no sample: heap profiling off */
  if (hak_prof_on) hak_prof_heap_init(h);
  hak_heap_t *old = atomic_load(&heaps);
  do {
    h->next_heap = old;
  } while (!atomic_compare_exchange_weak(&heaps, &old, h));
  return h;
}

/* Take h if it is abandoned: it is the caller's from now on, its
 * SuperSlabs no longer orphaned (superslab.c). */
static bool heap_claim(hak_heap_t *h) {
  int expected = HAK_HEAP_ABANDONED;
  if (!atomic_compare_exchange_strong(&h->state, &expected, HAK_HEAP_ACTIVE)) return false;
  hak_superslabs_orphaned(h, false);
  return true;
}

static hak_heap_t *heap_adopt(void) {
  for (hak_heap_t *h = atomic_load(&heaps); h; h = h->next_heap)
    if (heap_claim(h)) return h;
  return NULL;
}

/* An abandoned heap, else a new one (NULL: no memory). */
static hak_heap_t *heap_take(void) {
  hak_heap_t *h = heap_adopt();
  return h ? h : hak_heap_new(false);
}

/* Thread t (0: none) uses heap h from now on: its slabs say so to free's
 * fast path, which compares their owner_thread with the caller's
 * hak_thread_id instead of looking the caller's heap up. A thread that
 * leaves its heap clears them, so a later thread that gets the same thread
 * pointer does not take the heap's blocks for its own. Its slabs are those
 * of its lists, in its own SuperSlabs and in others' (guests' slabs, which
 * its SuperSlabs may hold too, are not its: superslab.c); a slab it
 * carves later gets h->thread then. */
static void heap_set_thread(hak_heap_t *h, uintptr_t t) {
  h->thread = t;
  if (t) h->gen++;
  for (unsigned w = 0; w < (HAK_CLASSES + 63) / 64; w++)
    for (uint64_t bits = h->listed[w]; bits; bits &= bits - 1) {
      unsigned c = w * 64 + (unsigned)__builtin_ctzll(bits);
      hak_slab_t *lists[2] = {h->warm[c], h->full[c]};
      for (unsigned k = 0; k < 2; k++)
        for (hak_slab_t *s = lists[k]; s; s = hak_slab_list_next(s))
          for (unsigned i = 0; i < s->units; i++) __atomic_store_n(&s[i].owner_thread, t, __ATOMIC_RELAXED);
    }
}

HAK_NOINLINE hak_heap_t *hak_heap_thread_init(void) {
  hak_init();
  hak_heap_t *h = heap_take();
  if (!h) return NULL;
  bool entered = hak_heap_enter(h);
  heap_set_thread(h, hak_thread_id());
  hak_tls_heap = h;
  hak_os_thread_exit_arg(h);   /* hak_thread_done(h) when the thread exits (init.c set the hook) */
  hak_purger_install();
  hak_purger_thread_started();
  hak_heap_collect_inboxes(h, NULL);
  hak_heap_leave(h, entered);
  return h;
}

/* Set once hak_thread_done has run: the thread is exiting, its heap was
 * released and left. A heap it took now would never be released: glibc
 * runs key destructors for a few rounds only, so the last round's
 * allocations would find no destructor after them. */
static __thread bool thread_exited;
static __thread hak_heap_t *last_borrowed;

bool hak_thread_exiting(void) { return thread_exited; }

/* The calling thread's heap, made or adopted on its first use; NULL if none
 * can be had, or if the thread is exiting (an allocation then borrows a
 * heap, a free of another heap's block goes to the owner's inbox). */
hak_heap_t *hak_heap_get(void) {
  hak_heap_t *h = hak_tls_heap;
  if (HAK_LIKELY(h != &hak_heap_empty)) return h;
  return thread_exited ? NULL : hak_heap_thread_init();
}

/* A heap for one allocation of an exiting thread: the one it borrowed last
 * if nobody took it since, else any abandoned one, else a new one. */
hak_heap_t *hak_heap_borrow(void) {
  hak_heap_t *h = last_borrowed;
  if (!h || !heap_claim(h)) h = heap_take();
  return last_borrowed = h;
}

/* Leave a borrowed heap abandoned again; other threads' release ticks trim
 * it after the purge delay if no new thread adopts it first. */
void hak_heap_give_back(hak_heap_t *h) {
  uint64_t now = hak_os_now_ms();
  atomic_store_explicit(&h->left_at, now, memory_order_relaxed);
  hak_superslabs_orphaned(h, true);
  atomic_store(&h->state, HAK_HEAP_ABANDONED);
  hak_heap_reclaim_hint();
  hak_release_abandoned_since(now);
}

/* Return what the heap holds and does not use: cached blocks and the inbox
 * go back to their slabs, batches of other heaps' blocks to their owners,
 * pages of new slabs beyond their carve to the OS (hak_slab_trim_due),
 * empty slabs are scheduled for decommit, empty SuperSlabs beyond those a
 * heap keeps go to the shared pool (release.c). With now set, everything is
 * decommitted or passed to the shared pool at once. Returns nonzero if
 * memory went back to the OS. */
int hak_heap_release_all(hak_heap_t *h, bool now) {
  bool entered = hak_heap_enter(h);
  for (unsigned c = 0; c < HAK_CLASSES; c++) hak_cache_return(h, c);
  hak_heap_collect_inboxes(h, NULL);
  hak_remote_flush_all(h);
  hak_slab_trim_due(h, now);
  int released = hak_release_purge(h, now ? HAK_PURGE_ALL : HAK_PURGE_LEAVE);
  hak_heap_leave(h, entered);
  return released;
}

/* Release what h does not use and leave it abandoned; a purge it still
 * has pending is left to other threads' release ticks. The caller keeps the
 * purger out: an exiting thread holds the heap's token, a collector of
 * abandoned heaps holds it in state COLLECTING, which the purger leaves
 * alone. */
static int heap_release_and_leave(hak_heap_t *h, bool now) {
  int released = hak_heap_release_all(h, now);
  uint64_t due = h->purge_at;
  hak_superslabs_orphaned(h, true);
  atomic_store(&h->state, HAK_HEAP_ABANDONED);
  if (due) hak_release_abandoned_due(due);
  hak_heap_reclaim_hint();
  return released;
}

/* pthread key destructor: the thread is exiting. Its memory follows the
 * usual delays (the next new thread is likely to adopt the heap and want it
 * back); other threads' release ticks purge it when the delays run out. */
void hak_thread_done(void *arg) {
  HAK_TRACK_ENTER();
  hak_tls_heap = &hak_heap_empty;
  thread_exited = true;
  bool entered = hak_heap_enter(arg);
  heap_set_thread(arg, 0);
  atomic_store_explicit(&((hak_heap_t *)arg)->left_at, hak_os_now_ms(), memory_order_relaxed);
  heap_release_and_leave(arg, false);
  hak_heap_leave(arg, entered);
  hak_purger_thread_done();
  HAK_TRACK_LEAVE();
}

/* Collect the heaps of exited threads that no thread has adopted yet: all
 * of their free memory (now), or what their delays allow. */
int hak_heap_trim_abandoned(bool now) {
  int released = 0;
  for (hak_heap_t *h = atomic_load(&heaps); h; h = h->next_heap) {
    int expected = HAK_HEAP_ABANDONED;
    if (!atomic_compare_exchange_strong(&h->state, &expected, HAK_HEAP_COLLECTING)) continue;
    released |= heap_release_and_leave(h, now);
  }
  return released;
}

/* A heap whose thread left it this recently is left whole for a new
 * thread to adopt: threads that come and go adopt a heap within
 * microseconds, and taking its SuperSlabs meanwhile would leave the next
 * thread to fault in others (docs/design/tuning.md, "Adopting a heap"). */
#define RECLAIM_AFTER_MS 10

/* Set when a heap whose thread exited may have an empty SuperSlab with
 * pages resident: its thread left it, or another thread freed a block to
 * it; cleared by a look at the heaps that found none. */
static _Atomic bool reclaimable;

/* Is h orphaned: has its thread left it RECLAIM_AFTER_MS ago or more,
 * and no thread taken it since? Its SuperSlabs' dirty free units are then
 * lent before a heap's own clean ones (superslab.c, orphan_span). */
bool hak_heap_orphaned(const hak_heap_t *h, uint64_t now) {
  return atomic_load_explicit(&h->state, memory_order_relaxed) != HAK_HEAP_ACTIVE &&
         now - atomic_load_explicit(&h->left_at, memory_order_relaxed) >= RECLAIM_AFTER_MS;
}

void hak_heap_reclaim_hint(void) {
  if (!atomic_load_explicit(&reclaimable, memory_order_relaxed)) atomic_store(&reclaimable, true);
}

/* An empty SuperSlab with pages resident of a heap that no thread uses,
 * for a heap that wants one rather than a run of its own units with no
 * page resident (superslab.c): the blocks other threads freed to such a
 * heap go back to its slabs first (a program's main thread that frees what
 * its exited workers allocated empties their SuperSlabs). Without this,
 * their pages waited for the purge delay while the others' new slabs
 * faulted in fresh ones: git repack's writing thread, which frees the
 * deltas of the two threads that computed them and allocates as much
 * again, touched 290 MB of pages for a live peak of 119 MB. NULL if there
 * is none. */
hak_superslab_t *hak_heap_reclaim_superslab(void) {
  if (!atomic_load_explicit(&reclaimable, memory_order_relaxed)) return NULL;
  atomic_store(&reclaimable, false);
  uint64_t now = hak_os_now_ms();
  bool young = false;
  for (hak_heap_t *a = atomic_load(&heaps); a; a = a->next_heap) {
    int expected = HAK_HEAP_ABANDONED;
    if (atomic_load_explicit(&a->state, memory_order_acquire) != expected) continue;
    if (now - atomic_load_explicit(&a->left_at, memory_order_relaxed) < RECLAIM_AFTER_MS) {
      young = true;
      continue;
    }
    if (!atomic_compare_exchange_strong(&a->state, &expected, HAK_HEAP_COLLECTING)) continue;
    bool entered = hak_heap_enter(a);
    hak_heap_collect_inboxes(a, NULL);
    hak_superslab_t *ss = hak_superslab_take_empty(a);
    uint64_t due = a->purge_at;
    hak_heap_leave(a, entered);
    atomic_store(&a->state, HAK_HEAP_ABANDONED);
    if (due) hak_release_abandoned_due(due);
    if (ss) {
      atomic_store(&reclaimable, true);   /* there may be more */
      return ss;
    }
  }
  if (young) atomic_store(&reclaimable, true);
  return NULL;
}
