/* SuperSlabs and the slabs carved from them. A SuperSlab belongs to one
 * heap, its host, which keeps it on its list, carves from its free units
 * and alone pools it when it is wholly free. A slab belongs to the heap
 * that carved it, which alone fills and releases it (blocks freed by other
 * threads reach that heap's inbox, heap.c): the host's, or a guest's,
 * carved from free units whose pages are resident when the guest's own
 * SuperSlabs had none (docs/design/thread-memory.md, "Free units lent
 * between heaps"). The free units word is the host's alone; a guest claims
 * its run in the dirty word, as a sweep does (types.h). */
#include "internal.h"

/* Lendable SuperSlabs of the arena: a bit per slot, set when a slab of it
 * is released (its units are dirty), cleared by a sweep that finds no
 * dirty unit there (release.c), not by the guests that pass it over, so
 * that heaps releasing slabs mostly find their bit set already and only
 * read the word. A hint: a claim confirms it. */
static _Atomic uint64_t lendable[(HAK_ARENA_SIZE >> HAK_SS_SHIFT) / 64];
#define LENT_LOOKS 8    /* SuperSlabs with dirty free units a guest looks at for a run, at most */
#define LENT_SEEN 64    /* and SuperSlabs whose bit is set */
#define ORPHAN_LOOKS 32 /* the same of orphaned heaps (orphan_span) */

/* Set or clear the bit of ss, if it is in the arena, in the bitmap map
 * (one bit per slot); only the word's read when it is so already. */
static void bit_set(_Atomic uint64_t *map, hak_superslab_t *ss, bool on) {
  if (!hak_in_arena((uintptr_t)ss)) return;
  size_t i = ((uintptr_t)ss - hak_arena_base) >> HAK_SS_SHIFT;
  uint64_t bit = 1ull << (i % 64);
  if (!(atomic_load_explicit(&map[i / 64], memory_order_relaxed) & bit) == !on) return;
  if (on) atomic_fetch_or_explicit(&map[i / 64], bit, memory_order_relaxed);
  else atomic_fetch_and_explicit(&map[i / 64], ~bit, memory_order_relaxed);
}

static void lendable_set(hak_superslab_t *ss, bool on) { bit_set(lendable, ss, on); }

void hak_superslab_unlend(hak_superslab_t *ss) { lendable_set(ss, false); }

/* SuperSlabs of heaps whose thread exited and that no thread has adopted
 * since (orphan_span): a bit per arena slot, set for each SuperSlab on such
 * a heap's list as its thread leaves it, cleared as a thread adopts the
 * heap and as a SuperSlab leaves it or joins another. A hint: orphan_span
 * asks the host. */
static _Atomic uint64_t orphaned[(HAK_ARENA_SIZE >> HAK_SS_SHIFT) / 64];

static void orphaned_set(hak_superslab_t *ss, bool on) { bit_set(orphaned, ss, on); }

void hak_superslabs_orphaned(hak_heap_t *h, bool on) {
  for (hak_superslab_t *ss = h->superslabs; ss; ss = ss->next) orphaned_set(ss, on);
}

/* The wholly free ss leaves every heap's reach (its host pools it or gives
 * it to another heap): its epoch turns odd, and a guest whose claim of a
 * run came first is seen holding it (the guest, its claim made, reads the
 * epoch again, and undoes a claim made across a close). False if a unit
 * of it is held: the epoch is even again. */
static bool ss_close(hak_superslab_t *ss) {
  atomic_fetch_add(&ss->epoch, 1);
  if (!HAK_HELD(atomic_load(&ss->dirty))) return true;
  atomic_fetch_add(&ss->epoch, 1);
  return false;
}

static void unit_bytes_set(uint8_t *bytes, uint8_t v) {
  for (unsigned u = 0; u < HAK_UNITS; u++) HAK_STORE_SHARED(bytes[u], v);
}

static void ss_list_push(hak_superslab_t **list, hak_superslab_t *ss) {
  ss->prev = NULL;
  ss->next = *list;
  if (*list) (*list)->prev = ss;
  *list = ss;
}

static void ss_list_remove(hak_superslab_t **list, hak_superslab_t *ss) {
  if (ss->prev) ss->prev->next = ss->next;
  else *list = ss->next;
  if (ss->next) ss->next->prev = ss->prev;
  ss->next = ss->prev = NULL;
}

/* Unlink from heap a, whose thread exited (the caller holds it, heap.c),
 * an empty SuperSlab whose units may have pages resident (dirty) and that
 * no sweep is decommitting, for another heap to take with those pages; one
 * whose pages are all dropped is no better than the shared pool's. NULL if
 * a has none. */
hak_superslab_t *hak_superslab_take_empty(hak_heap_t *a) {
  for (hak_superslab_t *ss = a->superslabs; ss && ss->free_units; ss = ss->next) {
    uint64_t w = atomic_load_explicit(&ss->dirty, memory_order_relaxed);
    if (ss->free_units == HAK_UNITS_ALL && HAK_DIRTY(w) && !HAK_HELD(w) && ss_close(ss)) {
      ss_list_remove(&a->superslabs, ss);
      a->empty_superslabs--;
      return ss;
    }
  }
  return NULL;
}

/* The descriptors of an empty SuperSlab's units for a new owner: table
 * entries outlive their SuperSlab. Their geometry stays: free may have read
 * the limit of one (0, as the unit is free) and read its geometry any time
 * later, so a geometry once set is never zero again (types.h, "A unit's
 * descriptor"). */
static void slabs_reset(hak_slab_t *s) {
  for (unsigned i = 0; i < HAK_UNITS; i++) {
    __atomic_store_n(&s[i].limit, 0, __ATOMIC_RELAXED);
    s[i].cache = NULL;
    __atomic_store_n(&s[i].owner_thread, 0, __ATOMIC_RELAXED);
    s[i].cls = s[i].head_delta = s[i].units = 0;
    s[i].capacity = s[i].carved = s[i].used = 0;
    s[i].free = NULL;
    s[i].in_full = s[i].zero = 0;
    __atomic_store_n(&s[i].absent, 0, __ATOMIC_RELAXED);
    s[i].free_low = 0;
  }
}

/* Make the empty SuperSlab ss, closed (ss_close, or never opened), heap
 * h's, first in its list (ones with free units first); guests may claim
 * its units once all else is set (its epoch even). */
static hak_superslab_t *ss_adopt(hak_heap_t *h, hak_superslab_t *ss) {
  orphaned_set(ss, false);
  HAK_STORE_SHARED(ss->owner, h);
  unit_bytes_set(ss->taken_gen, (uint8_t)(h->gen - 1));   /* its slabs were an earlier thread's */
  slabs_reset(hak_ss_slabs(ss));
  HAK_STORE_SHARED(ss->free_units, HAK_UNITS_ALL);
  ss_list_push(&h->superslabs, ss);
  h->empty_superslabs++;
  atomic_store_explicit(&ss->epoch, (atomic_load_explicit(&ss->epoch, memory_order_relaxed) | 1) + 1,
                        memory_order_release);
  return ss;
}

/* An empty SuperSlab of a heap whose thread exited, with pages resident,
 * for heap h (hak_heap_reclaim_superslab), or one from the shared pool:
 * its dirty units, what they last held and their deadline stay. */
static hak_superslab_t *ss_take_warm(hak_heap_t *h, hak_superslab_t *ss) {
  h->purge_at = hak_deadline_min(h->purge_at, atomic_load_explicit(&ss->purge_at, memory_order_relaxed));
  return ss_adopt(h, ss);
}

/* A SuperSlab for heap h: an empty one from the shared pool, else one from
 * the arena, else a new mapping. */
static hak_superslab_t *ss_acquire(hak_heap_t *h) {
  hak_superslab_t *ss = hak_shared_pool_pop();
  if (ss) {
    if (HAK_DIRTY(atomic_load_explicit(&ss->dirty, memory_order_acquire))) return ss_take_warm(h, ss);
    /* decommitted: what its units held and their deadlines are past */
    unit_bytes_set(ss->span_class, 0);
    atomic_store_explicit(&ss->purge_at, 0, memory_order_relaxed);
    atomic_store_explicit(&ss->aged, 0, memory_order_relaxed);
    atomic_store_explicit(&ss->purged, 0, memory_order_relaxed);
  } else {
    hak_bigcache_grace_drop();   /* new memory: the grace entry's pages go first */
    ss = hak_arena_take();
    if (!ss && !(ss = hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE))) return NULL;
    if (HAK_SECURE) {   /* guard pages after the header and at the end (types.h) */
      hak_os_guard((char *)ss + HAK_SS_HEADER - HAK_GUARD, HAK_GUARD);
      hak_os_guard((char *)ss + HAK_SS_END, HAK_GUARD);
    }
    hak_registry_set((uintptr_t)ss, HAK_REG_SUPERSLAB);
  }
  return ss_adopt(h, ss);
}

/* Unlink an empty SuperSlab from its heap and hand it to the shared pool
 * (hak_shared_pool_push); false (it stays) while a sweep or a guest holds
 * some of its units (ss_close). */
bool hak_superslab_give_up(hak_heap_t *h, hak_superslab_t *ss) {
  if (!ss_close(ss)) return false;
  ss_list_remove(&h->superslabs, ss);
  h->empty_superslabs--;
  orphaned_set(ss, false);
  hak_shared_pool_push(ss);
  return true;
}

static uint32_t span_mask(unsigned first, unsigned units) {
  uint32_t m = units >= 32 ? HAK_UNITS_ALL : ((1u << units) - 1u);
  return m << first;
}

/* The units of avail that start a run of `units` free units for a slab:
 * tiny slabs may use unit 0 (whose first page is the header); mid slabs
 * start at unit 1 or later so that their blocks are 64 KiB aligned at the
 * slab start. */
static uint32_t run_starts(uint32_t avail, unsigned units, bool tiny) {
  uint32_t m = tiny ? avail : (avail & ~1u);
  for (unsigned i = 1; i < units && m; i++) m &= avail >> i;
  return m;
}

/* Of the run starts m (run_starts) of ss for a slab of class cls, the
 * first unit of the run heap h takes, or -1 (h NULL: a guest's, which
 * ranks units by their pages touched only). With same_class, only a run that last held a
 * slab of cls and whose pages may still be resident (dirty): the blocks it
 * hands out then fall on the pages that class touched before, where another
 * class would touch others (a heap that threads adopt one after another
 * would otherwise end with every page of its free units resident).
 * Otherwise, for a slab of one unit, the dirty unit whose last slab began
 * the most threads of this heap ago (gen: the class least likely to want
 * it back), then the one with the most pages touched, the lowest of those:
 * a class new to the heap reuses the pages another class touched most,
 * and leaves to classes that touched a page or two their units. A unit so
 * taken from an earlier thread's class is trimmed (unit_trim). Without
 * that, in a heap that threads adopt one after another, each class that
 * lost its unit took another's in turn, and every unit ended fully
 * resident (docs/design/tuning.md, "Which unit a class new to a heap
 * takes"). Else, and for longer slabs, the lowest run: a unit taken from
 * the middle of free units because it was touched splits the runs that
 * longer slabs need (memory mid peaked 3% higher when runs of any length
 * went by their touched pages). *rank, where asked, orders the runs so
 * found (higher is preferred). */
static int find_span(const hak_heap_t *h, const hak_superslab_t *ss, uint32_t m, uint32_t dirty, unsigned cls,
                     unsigned units, bool same_class, unsigned *rank) {
  if (same_class) {
    for (uint32_t c = m & dirty; c; c &= c - 1) {
      unsigned u = (unsigned)__builtin_ctz(c);
      if (HAK_LOAD_SHARED(ss->span_class[u]) == cls + 1) return (int)u;
    }
    return -1;
  }
  if (!m) return -1;
  int best = __builtin_ctz(m);
  unsigned most = 0;
  if (units == 1) {
    for (uint32_t c = m & dirty; c; c &= c - 1) {
      unsigned u = (unsigned)__builtin_ctz(c);
      unsigned age = h ? (uint8_t)(h->gen - HAK_LOAD_SHARED(ss->taken_gen[u])) : 0;
      unsigned score = age << 8 | HAK_LOAD_SHARED(ss->touched[u]);
      if (score > most) {
        most = score;
        best = (int)u;
      }
    }
  } else if (dirty >> best & 1) {
    most = HAK_LOAD_SHARED(ss->touched[best]);
  }
  if (rank) *rank = most;
  return best;
}

/* May at least half the pages of the run at u be resident: touched, on
 * units not decommitted since (dirty)? */
static bool run_warm(const hak_superslab_t *ss, unsigned u, unsigned units, uint32_t dirty) {
  unsigned pages = 0;
  for (uint32_t d = dirty & span_mask(u, units); d; d &= d - 1)
    pages += HAK_LOAD_SHARED(ss->touched[__builtin_ctz(d)]);
  return pages * 2 >= units * (HAK_UNIT_SIZE / HAK_PAGE_BYTES);
}

/* Unit u, dirty, whose last slab was of another class and began under an
 * earlier thread of the heap (or in another heap), is taken for a slab of
 * class cls (one unit): the pages beyond those the class's first refill
 * carves go back to the OS, since they follow the depth the other class
 * reached, not this one's (find_span). Units that pass between classes
 * within one thread keep their pages: a thread that cycles through sizes
 * would fault them in again at every turn (memory mid ran at 0.42x).
 *
 * Not at once: the pages the slab has not carved into (those past its
 * carved blocks or its first refill's, whichever end higher) go back when
 * it empties, or at the heap's first sweep a quarter of the purge delay
 * later (hak_slab_trim_due), or when HAK_TRIMS newer ones wait, whichever
 * comes first. Trimmed at once, they were often faulted in again soon
 * after by the slab's next refills, and each trim is a system call whose
 * TLB shootdown interrupts the process's other CPUs (mstress, 16 threads:
 * 11,900 calls, half of them needless by the time the slab emptied;
 * docs/design/tuning.md, "Units trimmed later"). */
static void unit_trim(hak_superslab_t *ss, unsigned u, unsigned cls, uint32_t carved) {
  size_t at = u == 0 ? HAK_SS_HEADER : 0, first = hak_refill_first(cls);
  size_t need = at + (carved > first ? carved : first) * hak_class_size[cls];
  unsigned keep = (unsigned)((need + HAK_PAGE_BYTES - 1) / HAK_PAGE_BYTES), touched = HAK_LOAD_SHARED(ss->touched[u]);
  if (touched <= keep) return;
  hak_os_decommit((char *)ss + ((uintptr_t)u << HAK_UNIT_SHIFT) + (uintptr_t)keep * HAK_PAGE_BYTES,
                  (size_t)(touched - keep) * HAK_PAGE_BYTES);
  HAK_STORE_SHARED(ss->touched[u], (uint8_t)keep);
}

/* Slab i of h's trims is trimmed now, and leaves the list. */
static void trim_now(hak_heap_t *h, unsigned i) {
  hak_slab_t *s = h->trims[i].slab;
  hak_superslab_t *ss = hak_slab_ss(s);
  unit_trim(ss, (unsigned)(s - hak_ss_slabs(ss)), s->cls, s->carved);
  h->trims_due--;
  memmove(&h->trims[i], &h->trims[i + 1], (h->trims_due - i) * sizeof h->trims[0]);
}

static void trim_later(hak_heap_t *h, hak_superslab_t *ss, unsigned u) {
  if (h->trims_due == HAK_TRIMS) trim_now(h, 0);   /* the oldest, now */
  h->trims[h->trims_due++] = (hak_trim_t){&hak_ss_slabs(ss)[u], hak_os_now_ms()};
}

void hak_slab_trim_due(hak_heap_t *h, bool all) {
  if (!h->trims_due) return;   /* no clock read on a sweep that owes none */
  uint64_t now = all ? 0 : hak_os_now_ms(), delay = hak_release_delay() / 4;   /* above */
  while (h->trims_due && (all || now - h->trims[0].at >= delay)) trim_now(h, 0);   /* oldest first */
}

/* Which runs claim_span takes: one that last held the class and may still
 * be resident, the run find_span prefers if half its pages may be
 * (run_warm), that run whatever its pages, or (a guest, in another heap's
 * SuperSlab) a run of units all dirty of which half the pages may be, or
 * (a guest of a heap whose thread exited: orphan_span) of units all dirty
 * whatever their pages, also in a SuperSlab with every unit free. */
typedef enum { RUN_SAME_CLASS, RUN_WARM, RUN_ANY, RUN_LENT, RUN_ORPHANED } run_want_t;

/* Take a run of units of ss for class cls, for heap h (find_span, as want
 * asks); its first unit, or -1. *was is the host's free units word before
 * the claim (0 for a guest's). The host takes the run out of its free
 * units word, and its dirty units, if any, out of the dirty word with one
 * compare-and-swap, which fails if a guest or a sweep took one meanwhile;
 * its clean free units no other thread takes. A guest (RUN_LENT) takes a
 * run of dirty units, marked held in the dirty word with one
 * compare-and-swap (types.h), which stands only if the SuperSlab stayed
 * open meanwhile (ss_close). Decommitted units among those taken are
 * reported as taken back (release.c), whatever the other units of the run
 * were. */
static int claim_span(hak_heap_t *h, hak_superslab_t *ss, unsigned cls, unsigned units, bool tiny, run_want_t want,
                      uint32_t *was) {
  bool guest = want == RUN_LENT || want == RUN_ORPHANED;
  uint32_t f = HAK_LOAD_SHARED(ss->free_units), epoch = 0;
  if (guest && (epoch = atomic_load_explicit(&ss->epoch, memory_order_acquire)) & 1) return -1;   /* closed */
  uint64_t w = atomic_load_explicit(&ss->dirty, memory_order_acquire);
  for (;;) {
    if (want == RUN_LENT && f == HAK_UNITS_ALL && !HAK_HELD(w)) return -1;   /* wholly free: its host's to keep or to pool */
    uint32_t m = run_starts(guest ? HAK_DIRTY(w) : f & ~HAK_HELD(w), units, tiny);
    int u = want == RUN_ORPHANED ? find_span(NULL, ss, m, HAK_DIRTY(w), cls, units, true, NULL) : -1;   /* its class first */
    if (u < 0) u = find_span(guest ? NULL : h, ss, m, HAK_DIRTY(w), cls, units, want == RUN_SAME_CLASS, NULL);
    if (u < 0) return -1;
    uint32_t span = span_mask((unsigned)u, units);
    if ((want == RUN_WARM || want == RUN_LENT) && !run_warm(ss, (unsigned)u, units, HAK_DIRTY(w))) return -1;
    uint32_t d = HAK_DIRTY(w) & span;
    if (d && !atomic_compare_exchange_weak(&ss->dirty, &w, guest ? w | (uint64_t)span << 32 : w & ~(uint64_t)d))
      continue;
    if (guest && atomic_load(&ss->epoch) != epoch) {   /* closed meanwhile: the run is the next host's */
      atomic_fetch_and_explicit(&ss->dirty, ~((uint64_t)span << 32), memory_order_release);
      return -1;
    }
    *was = guest ? 0 : f;
    if (!guest) HAK_STORE_SHARED(ss->free_units, f & ~span);
    for (unsigned i = (unsigned)u; i < (unsigned)u + units; i++)   /* a clean unit has no page resident */
      if (!(d >> i & 1)) HAK_STORE_SHARED(ss->touched[i], 0);
    if (atomic_load_explicit(&ss->aged, memory_order_relaxed) & d)
      atomic_fetch_and_explicit(&ss->aged, ~d, memory_order_relaxed);
    if (atomic_load_explicit(&ss->purged, memory_order_relaxed) & span) {
      atomic_fetch_and_explicit(&ss->purged, ~span, memory_order_relaxed);
      hak_release_retaken(atomic_load_explicit(&ss->purged_at, memory_order_relaxed));
    }
    if (units == 1 && d && HAK_LOAD_SHARED(ss->span_class[u]) != cls + 1 &&
        (guest || HAK_LOAD_SHARED(ss->taken_gen[u]) != h->gen))
      trim_later(h, ss, (unsigned)u);
    return u;
  }
}

/* Offset in its SuperSlab of the end of a slab of units u .. u + units - 1. */
static uint32_t slab_end(unsigned u, unsigned units) {
  return u + units == HAK_UNITS ? HAK_SS_END : (uint32_t)(u + units) << HAK_UNIT_SHIFT;
}

/* The run starts (run_starts) of x, one of h's SuperSlabs, for a slab of
 * units units, its units being decommitted left out, and its dirty units
 * in *dirty. */
static uint32_t ss_runs(const hak_superslab_t *x, unsigned units, bool tiny, uint32_t *dirty) {
  uint64_t w = atomic_load_explicit(&x->dirty, memory_order_relaxed);
  *dirty = HAK_DIRTY(w);
  return run_starts(x->free_units & ~HAK_HELD(w), units, tiny);
}

/* The first of h's SuperSlabs with a run for a slab of class cls that
 * last held cls and may still be resident (find_span's same_class), or
 * NULL. The list keeps those with free units first. */
static hak_superslab_t *ss_same_class(hak_heap_t *h, unsigned cls, unsigned units, bool tiny) {
  uint32_t m, dirty;
  for (hak_superslab_t *x = h->superslabs; x && x->free_units; x = x->next)
    if ((m = ss_runs(x, units, tiny, &dirty)) && find_span(h, x, m, dirty, cls, units, true, NULL) >= 0) return x;
  return NULL;
}

/* The one of h's SuperSlabs whose run for a slab of class cls find_span
 * ranks first, the lowest-addressed of those, or NULL. Looked for only
 * when no run of the class is to be had (ss_same_class): a walk that
 * ranked every SuperSlab on its way to that run spent most of a new
 * slab's time. */
static hak_superslab_t *ss_best(hak_heap_t *h, unsigned cls, unsigned units, bool tiny) {
  hak_superslab_t *best = NULL;
  unsigned most = 0, rank;
  uint32_t m, dirty;
  for (hak_superslab_t *x = h->superslabs; x && x->free_units; x = x->next)
    if ((m = ss_runs(x, units, tiny, &dirty)) && find_span(h, x, m, dirty, cls, units, false, &rank) >= 0 &&
        (!best || rank > most || (rank == most && x < best))) {
      best = x;
      most = rank;
    }
  return best;
}

/* A run for a slab of class cls, for heap h, as its guest in another
 * heap's SuperSlab of the arena with dirty free units: any such heap
 * (want RUN_LENT, lendable SuperSlabs), or one that is orphaned
 * (RUN_ORPHANED, lendable and orphaned ones). Only while the background
 * purger runs, never in the secure build (lent_span). The SuperSlab, its
 * first unit in *u; NULL if none. */
static hak_superslab_t *guest_span(hak_heap_t *h, unsigned cls, unsigned units, bool tiny, int *u, uint32_t *was,
                                   run_want_t want) {
  if (HAK_SECURE || atomic_load_explicit(&hak_purger_state, memory_order_relaxed) != PURGER_RUNNING) return NULL;
  bool orphans = want == RUN_ORPHANED;
  size_t n = hak_arena_used();
  unsigned looks = 0, seen = 0;
  uint64_t now = 0;
  for (size_t w = 0; w * 64 < n; w++) {
    uint64_t bits = atomic_load_explicit(&lendable[w], memory_order_relaxed);
    if (orphans) bits &= atomic_load_explicit(&orphaned[w], memory_order_relaxed);
    for (; bits; bits &= bits - 1) {
      size_t i = w * 64 + (size_t)__builtin_ctzll(bits);
      hak_superslab_t *ss = hak_arena_superslab(i);
      hak_heap_t *host = ss ? HAK_LOAD_SHARED(ss->owner) : NULL;
      if (!ss || host == h) continue;
      if (++seen == LENT_SEEN) return NULL;
      if (orphans && (!host || !hak_heap_orphaned(host, now ? now : (now = hak_os_now_ms())))) continue;
      if (!HAK_DIRTY(atomic_load_explicit(&ss->dirty, memory_order_relaxed))) continue;
      if ((*u = claim_span(h, ss, cls, units, tiny, want, was)) >= 0) return ss;
      if (++looks == (orphans ? ORPHAN_LOOKS : LENT_LOOKS)) return NULL;
    }
  }
  return NULL;
}

/* A run for a slab of class cls, for heap h, of units all dirty in a
 * SuperSlab of another heap of the arena, in use by some of its slabs
 * (lendable): h is its guest (docs/design/thread-memory.md, "Free units
 * lent between heaps"). Only while the background purger runs, which
 * sweeps every SuperSlab of the arena: the units h releases there reach
 * no deadline of its own. Never in the secure build, whose threads' blocks
 * lie in SuperSlabs of their own at random places (docs/secure.md). The
 * SuperSlab, its first unit in *u; NULL if none. */
static hak_superslab_t *lent_span(hak_heap_t *h, unsigned cls, unsigned units, bool tiny, int *u, uint32_t *was) {
  return guest_span(h, cls, units, tiny, u, was, RUN_LENT);
}

/* A run as lent_span's, of units all dirty whatever their pages, in a
 * SuperSlab of a heap whose thread exited RECLAIM_AFTER_MS ago or more and
 * that no thread has adopted since (hak_heap_orphaned): taken before the
 * heap's own clean units, whose pages it would fault in while the orphan's
 * stay resident for the purge delay, waiting for a thread to adopt it
 * (mstress, 64 threads: at the peak, 150-200 MiB of free units resident
 * in such heaps; docs/design/thread-memory.md, "Units of exited threads'
 * heaps"). NULL if none. */
static hak_superslab_t *orphan_span(hak_heap_t *h, unsigned cls, unsigned units, bool tiny, int *u, uint32_t *was) {
  return guest_span(h, cls, units, tiny, u, was, RUN_ORPHANED);
}

/* A new slab of class cls: units that last held the class and may still
 * be resident, in the first SuperSlab of the heap's list that has some;
 * else the run find_span prefers (a dirty unit of another class, the
 * lowest run) of the SuperSlab where find_span ranks it first, the
 * lowest-addressed of those, if half its pages may be resident; else
 * an empty SuperSlab with pages resident of a heap whose thread exited;
 * else a run with pages resident in another SuperSlab of such a heap
 * (orphan_span); else that run of its own; else a run with pages resident in another
 * heap's SuperSlab (lent_span), where a SuperSlab from the pool or the
 * arena would come next (before the run of its own, the hosts whose
 * units the guests took faulted in others: memory threads' page faults
 * went from 6k to 26k, its time 1.2x).
 * The walk ends at the first SuperSlab with units of the class; when
 * there is none, every SuperSlab with room is looked at for the
 * preferred run, so that a batch of one size does not go to a fresh
 * SuperSlab's pages while older ones hold free units
 * (docs/design/tuning.md, "Which SuperSlab a new slab comes from"). */
hak_slab_t *hak_slab_new(hak_heap_t *h, unsigned cls) {
  unsigned units = hak_class_units[cls];
  bool tiny = cls < HAK_TINY_CLASSES;
  uint32_t was = 0;
  hak_superslab_t *ss = ss_same_class(h, cls, units, tiny);
  int u = ss ? claim_span(h, ss, cls, units, tiny, RUN_SAME_CLASS, &was) : -1;
  if (u < 0) {   /* none, or a sweep or a guest took the run */
    hak_superslab_t *best = ss_best(h, cls, units, tiny);
    ss = NULL;
    if (best && (u = claim_span(h, best, cls, units, tiny, RUN_WARM, &was)) >= 0) ss = best;
    else if ((ss = hak_heap_reclaim_superslab())) u = claim_span(h, ss_take_warm(h, ss), cls, units, tiny, RUN_ANY, &was);
    else if (!(ss = orphan_span(h, cls, units, tiny, &u, &was))) {
      if (best && (u = claim_span(h, best, cls, units, tiny, RUN_ANY, &was)) >= 0) ss = best;
      else ss = lent_span(h, cls, units, tiny, &u, &was);
    }
    if (u < 0) {
      if (!(ss = ss_acquire(h))) return NULL;
      while ((u = claim_span(h, ss, cls, units, tiny, RUN_ANY, &was)) < 0)
        hak_os_yield();   /* a sweep is decommitting some units of an empty pooled one (shared_pool.c) */
    }
  }
  if (cls >= HAK_CACHED_CLASSES) h->span_freed = 0;
  for (unsigned i = 0; i < units; i++) {
    HAK_STORE_SHARED(ss->span_class[u + (int)i], (uint8_t)(i ? 0 : cls + 1));
    HAK_STORE_SHARED(ss->taken_gen[u + (int)i], h->gen);
  }
  uint32_t span = span_mask((unsigned)u, units);
  if (HAK_LOAD_SHARED(ss->owner) == h) {
    if (was == HAK_UNITS_ALL) h->empty_superslabs--;
    if (!(was & ~span) && ss->next) {   /* full: move behind the ones with room */
      hak_superslab_t *last = ss->next;
      while (last->next) last = last->next;
      ss_list_remove(&h->superslabs, ss);
      last->next = ss;
      ss->prev = last;
    }
  }

  bool zero = true;
  for (unsigned i = 0; i < units; i++) zero &= HAK_LOAD_SHARED(ss->touched[u + (int)i]) == 0;
  uint32_t bs = hak_class_size[cls];
  uint32_t start = u == 0 ? HAK_SS_HEADER : (uint32_t)u << HAK_UNIT_SHIFT;
  uint32_t bytes = slab_end((unsigned)u, units) - start;
  hak_slab_t *s = &hak_ss_slabs(ss)[u];
  uint64_t inverse = hak_odd_inverse(bs);
  for (unsigned i = 0; i < units; i++) {   /* what free reads, in every unit */
    s[i].inverse = inverse;
    s[i].shift = (uint8_t)__builtin_ctz(bs);
    s[i].start = (uintptr_t)ss + start;
    s[i].limit = 0;
    s[i].cls = (uint8_t)cls;
    s[i].cache = &h->cache[cls];
    __atomic_store_n(&s[i].owner_thread, h->thread, __ATOMIC_RELAXED);
    s[i].head_delta = (uint8_t)i;
  }
  s->units = (uint8_t)units;
  s->capacity = (uint16_t)(bytes / bs);
  s->in_full = 0;
  s->zero = zero;
  s->used = 0;
  s->free = NULL;
  s->carved = 0;
  __atomic_store_n(&s->absent, 0, __ATOMIC_RELAXED);
  s->free_low = 0;
  atomic_store_explicit(&ss->absent[u], 0, memory_order_relaxed);
  ss->absent_at[u] = 0;
  hak_slab_list_push(&h->warm[cls], s);
  h->listed[cls / 64] |= 1ull << (cls % 64);
  HAK_COUNT(h->counters[cls].slabs, 1);
  if (HAK_STAT) hak_stats_slab_bytes(cls, (int64_t)bytes);
  /* A span class's slab, new for each of its blocks, counts a quarter of
   * its bytes: a sweep per 2 MiB of them (docs/design/tuning.md, "New
   * slabs count as slow-path visits"). */
  hak_release_grown(h, cls < HAK_CACHED_CLASSES ? bytes : bytes / 4);
  return s;
}

/* An empty slab goes back to its SuperSlab as free units (its descriptors
 * keep what tells its blocks, types.h). */
void hak_slab_release(hak_heap_t *h, hak_slab_t *s) {
  unsigned units = s->units, cls = s->cls;   /* s is another heap's to carve once a guest's units are free */
  hak_slab_list_remove(s->in_full ? &h->full[cls] : &h->warm[cls], s);
  if (!h->warm[cls] && !h->full[cls]) h->listed[cls / 64] &= ~(1ull << (cls % 64));
  hak_superslab_t *ss = hak_slab_ss(s);
  unsigned u = (unsigned)(s - hak_ss_slabs(ss));
  for (unsigned i = 0; i < h->trims_due; i++)   /* its pending trim, now: the unit goes back as carved */
    if (h->trims[i].slab == s) {
      trim_now(h, i);
      break;
    }
  HAK_COUNT(h->counters[cls].slabs, -1);
  if (HAK_STAT) hak_stats_slab_bytes(cls, -(int64_t)((uintptr_t)ss + slab_end(u, units) - s->start));
  for (unsigned i = 0; i < units; i++) {
    hak_slab_t *d = &s[i];
    d->limit = 0;
    d->free = NULL;
    d->used = 0;
  }
  if (s->absent) {   /* free's look at it stays a look at a slab emptied since */
    __atomic_store_n(&s->absent, 0, __ATOMIC_RELAXED);
    atomic_store_explicit(&ss->absent[u], 0, memory_order_relaxed);
  }
  s->free_low = 0;
  /* Span slabs released in a row beyond the BigCache's budget go back to
   * the OS at once, as the large blocks the BigCache had no room for: a
   * program that frees its big blocks at the end of a phase does not keep
   * them for the purge delay. */
  bool now = cls >= HAK_CACHED_CLASSES &&
             (h->span_freed += (uint64_t)units << HAK_UNIT_SHIFT) > (uint64_t)hak_opt(hak_option_bigcache_budget);
  uint32_t span = span_mask(u, units);
  if (HAK_LOAD_SHARED(ss->owner) != h) {
    /* A guest's: its units, held, become dirty free units with one atomic
     * and (types.h); the SuperSlab may be pooled from then on, which the
     * deadline, the mark and a purge after it allow (a sweep's claim finds
     * what units are still there to take). */
    atomic_fetch_and_explicit(&ss->dirty, ~((uint64_t)span << 32), memory_order_release);
    hak_release_schedule_swept(ss);
    lendable_set(ss, true);
    if (now) hak_release_purge_units(ss, span);
    return;
  }
  /* Dirty before free in the host's word (types.h): a claim of the units
   * finds them dirty (their pages may be resident: not zero) unless a
   * sweep decommitted them since. */
  uint32_t was = ss->free_units;
  if (!was && ss->prev) {   /* it has room again: move to the front */
    ss_list_remove(&h->superslabs, ss);
    ss_list_push(&h->superslabs, ss);
  }
  atomic_fetch_or(&ss->dirty, span);
  HAK_STORE_SHARED(ss->free_units, was | span);
  if ((was | span) == HAK_UNITS_ALL) h->empty_superslabs++;
  lendable_set(ss, true);
  if (now) hak_release_purge_units(ss, span);
  hak_release_schedule(h, ss);
}

/* Slab s got blocks back (hak_slab_put_runs) and is empty, or was full. */
void hak_slab_put_moved(hak_heap_t *h, hak_slab_t *s) {
  if (s->used == 0) {
    hak_slab_release(h, s);
  } else {
    hak_slab_list_remove(&h->full[s->cls], s);
    s->in_full = 0;
    hak_slab_list_push(&h->warm[s->cls], s);
  }
}

/* Give a block freed by its owner back to its slab. */
void hak_slab_put_local(hak_heap_t *h, void *p) { hak_slab_put_runs(h, hak_unit_of(hak_ss_of(p), (uintptr_t)p)->cls, &p, 1); }
