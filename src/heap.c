/* Thread heaps: creation, adoption of heaps left by exited threads, the
 * warm pool and full list of each class, and the inbox of remote frees.
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

/* ---- slab lists (warm pool and full list), owner only */

static hak_slab_link_t *link_of(hak_slab_t *s) {
  hak_superslab_t *ss = hak_slab_ss(s);
  return &ss->links[s - hak_ss_slabs(ss)];
}

void hak_slab_list_push(hak_slab_t **list, hak_slab_t *s) {
  hak_slab_link_t *l = link_of(s);
  l->prev = NULL;
  l->next = *list;
  if (*list) link_of(*list)->prev = s;
  *list = s;
}

void hak_slab_list_remove(hak_slab_t **list, hak_slab_t *s) {
  hak_slab_link_t *l = link_of(s);
  if (l->prev) link_of(l->prev)->next = l->next;
  else *list = l->next;
  if (l->next) link_of(l->next)->prev = l->prev;
  l->next = l->prev = NULL;
}

/* ---- remote frees: other threads push batches of this heap's blocks on
 * the inbox of their class (free.c); the owner takes them in here */

/* Secure build: stop unless p, found in container c of a remote-free batch
 * of class cls for heap h, is a free block of one of h's slabs of that
 * class. The report names c, the block whose words were overwritten. */
static void remote_check(hak_heap_t *h, unsigned cls, const void *c, const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (hak_registry_kind(a) == HAK_REG_SUPERSLAB) {
    hak_superslab_t *ss = hak_ss_of(p);
    hak_slab_t *u = hak_unit_of(ss, a);
    if (ss->owner == h && u->cls == cls && hak_is_block(u, a) && ((const uintptr_t *)p)[1] == hak_free_mark(u)) return;
  }
  hak_fatal_corrupt("malloc", c);
}

/* Secure build: check container c, its link to the next one, its count k
 * and the k addresses it lists, which it decodes in place (its link stays
 * encoded: take_remote follows it once more). */
static void remote_check_container(hak_heap_t *h, unsigned cls, void **c, void **next, uint32_t k) {
  remote_check(h, cls, c, c);
  if (next) remote_check(h, cls, c, next);
  if (k > h->outgoing[cls].room) hak_fatal_corrupt("malloc", c);
  for (uint32_t i = 0; i < k; i++) {
    c[3 + i] = hak_link_decode((uintptr_t)c[3 + i], &c[3 + i]);
    remote_check(h, cls, c, c[3 + i]);
  }
}

/* Take the inbox of class cls: up to room blocks into out[] (they stay in
 * use as far as their slabs know, like any cached block), the rest back to
 * their slabs. The inbox holds the newest container first, and a container
 * lists the blocks freed after it. The blocks are laid so that the cache,
 * popped from its top, hands out the most recently freed first, as it does
 * with its own thread's frees: a count of the chain first, then out[] is
 * filled from its end, the newest batch's last block on top; what does not
 * fit (the oldest) goes back to its slabs (with room 0, all of them, in one
 * walk): a consumer thread that reads the blocks it gets finds the newest
 * in its cache (docs/design/tuning.md, "Remote-free batches"). A
 * container goes after the blocks it lists:
 * returning it may empty its slab, whose pages may then be decommitted.
 * Returns the number put in out[]. */
uint32_t hak_heap_take_remote(hak_heap_t *h, unsigned cls, void **out, uint32_t room) {
  if (!atomic_load_explicit(&h->inbox[cls], memory_order_relaxed)) return 0;
  void **first = atomic_exchange_explicit(&h->inbox[cls], NULL, memory_order_acquire);
  bool counted = hak_batch_counted(cls);
  uint32_t n = 0;
  if (room)   /* out[] is filled from its end: the count first */
    for (void **c = first, **next; c; c = next) {
      next = hak_link_decode((uintptr_t)c[0], c);
      uint32_t k = counted ? (uint32_t)(uintptr_t)c[2] : 0;
      if (HAK_SECURE) remote_check_container(h, cls, c, next, k);
      n += k + 1;
    }
  uint32_t taken = n < room ? n : room, at = taken;
  for (void **c = first, **next; c; c = next) {
    next = hak_link_decode((uintptr_t)c[0], c);
    uint32_t k = counted ? (uint32_t)(uintptr_t)c[2] : 0;
    if (!room) {   /* all back to the slabs: one walk */
      if (HAK_SECURE) remote_check_container(h, cls, c, next, k);
      n += k + 1;
    }
    if (HAK_SECURE) c[0] = (void *)hak_link_end(c);   /* a free block of a cache */
    uint32_t t = k < at ? k : at, i = k - t;   /* its newest t on top of out[], in order */
    if (t) {   /* out is NULL with room 0 */
      memcpy(out + at - t, c + 3 + i, t * sizeof *out);
      at -= t;
    }
    if (i) hak_slab_put_runs(h, cls, c + 3, i);   /* the oldest i it lists */
    if (at) out[--at] = c;
    else hak_slab_put_local(h, c);
  }
  HAK_COUNT(h->counters[cls].remote_received, n);
  return taken;
}

void hak_heap_collect_all(hak_heap_t *h) {
  for (unsigned c = 0; c < HAK_CLASSES; c++)
    if (atomic_load_explicit(&h->inbox[c], memory_order_relaxed)) hak_heap_take_remote(h, c, NULL, 0);
}

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
      hak_heap_collect_all(h);
      if (drain && h->thread) *sent += hak_heap_drain(h);
    }
    atomic_store_explicit(&h->slow, 0, memory_order_release);
  }
  atomic_store(&collector, 0);
  return taken;
}

static bool inbox_any(hak_heap_t *h) {
  for (unsigned c = 0; c < HAK_CLASSES; c++)
    if (atomic_load_explicit(&h->inbox[c], memory_order_relaxed)) return true;
  return false;
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
  for (hak_heap_t *h = atomic_load(&heaps); h; h = h->next_heap) {
    if (h == hak_prof_heap || h == hak_tls_heap || atomic_load_explicit(&h->state, memory_order_relaxed) != HAK_HEAP_ACTIVE)
      continue;
    bool any = inbox_any(h), busy = false, drain = all;
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
 *   of each size it used, nor the slabs those blocks sit in. */
void hak_heap_collect_idle(hak_heap_t *h) {
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    if (!(h->refilled[c / 64] >> (c % 64) & 1) && atomic_load_explicit(&h->inbox[c], memory_order_relaxed))
      hak_heap_take_remote(h, c, NULL, 0);
    if (cache_big(&h->cache[c], c) && cache_idle(&h->cache[c], &h->looks[c])) hak_cache_return(h, c);
  }
  memset(h->refilled, 0, sizeof h->refilled);
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
    /* A batch fills the owner's refill, which takes up to three quarters
     * of the cache from its inbox (docs/design/tuning.md, "Remote-free
     * batches"). What a sleeping thread's partial batches hold, drains
     * send (drain.c). */
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

static hak_heap_t *heap_adopt(void) {
  for (hak_heap_t *h = atomic_load(&heaps); h; h = h->next_heap) {
    int expected = HAK_HEAP_ABANDONED;
    if (atomic_compare_exchange_strong(&h->state, &expected, HAK_HEAP_ACTIVE)) return h;
  }
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
 * pointer does not take the heap's blocks for its own. */
static void heap_set_thread(hak_heap_t *h, uintptr_t t) {
  h->thread = t;
  if (t) h->gen++;
  for (hak_superslab_t *ss = h->superslabs; ss; ss = ss->next) {
    hak_slab_t *slabs = hak_ss_slabs(ss);
    for (unsigned u = 0; u < HAK_UNITS; u++) __atomic_store_n(&slabs[u].owner_thread, t, __ATOMIC_RELAXED);
  }
}

HAK_NOINLINE hak_heap_t *hak_heap_thread_init(void) {
  hak_init();
  hak_heap_t *h = heap_take();
  if (!h) return NULL;
  bool entered = hak_heap_enter(h);
  heap_set_thread(h, hak_thread_id());
  hak_tls_heap = h;
  hak_thread_register(h);
  hak_purger_install();
  hak_purger_thread_started();
  hak_heap_collect_all(h);
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
  int expected = HAK_HEAP_ABANDONED;
  if (!h || !atomic_compare_exchange_strong(&h->state, &expected, HAK_HEAP_ACTIVE)) h = heap_take();
  return last_borrowed = h;
}

/* Leave a borrowed heap abandoned again; other threads' release ticks trim
 * it after the purge delay if no new thread adopts it first. */
void hak_heap_give_back(hak_heap_t *h) {
  uint64_t now = hak_os_now_ms();
  atomic_store_explicit(&h->left_at, now, memory_order_relaxed);
  atomic_store(&h->state, HAK_HEAP_ABANDONED);
  hak_heap_reclaim_hint();
  hak_release_abandoned_since(now);
}

/* Return what the heap holds and does not use: cached blocks and the inbox
 * go back to their slabs, batches of other heaps' blocks to their owners,
 * empty slabs are scheduled for decommit, empty SuperSlabs beyond those a
 * heap keeps go to the shared pool (release.c). With now set, everything is
 * decommitted or passed to the shared pool at once. Returns nonzero if
 * memory went back to the OS. */
int hak_heap_release_all(hak_heap_t *h, bool now) {
  bool entered = hak_heap_enter(h);
  for (unsigned c = 0; c < HAK_CLASSES; c++) hak_cache_return(h, c);
  hak_heap_collect_all(h);
  hak_remote_flush_all(h);
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
    hak_heap_collect_all(a);
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
