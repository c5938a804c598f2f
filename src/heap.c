/* Thread heaps: creation, adoption of heaps left by exited threads, the
 * warm pool and full list of each class, and collection of remote frees.
 *
 * A heap is never unmapped: a thread that exits returns its caches and empty
 * memory and marks its heap abandoned; the next new thread adopts it with the
 * slabs still in it. Other threads may keep writing remote-free hints into an
 * abandoned heap, which is why it must stay mapped. */
#include <errno.h>

#include "internal.h"

hak_heap_t hak_heap_empty;   /* every cache empty with capacity 0: all paths go slow */
static _Atomic(hak_heap_t *) heaps;

hak_heap_t *hak_heap_list(void) { return atomic_load(&heaps); }

/* ---- slab lists (warm pool and full list), owner only */

void hak_slab_list_push(hak_slab_t **list, hak_slab_t *s) {
  s->prev = NULL;
  s->next = *list;
  if (*list) (*list)->prev = s;
  *list = s;
}

void hak_slab_list_remove(hak_slab_t **list, hak_slab_t *s) {
  if (s->prev) s->prev->next = s->next;
  else *list = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
}

/* ---- remote frees */

static void collect_list(hak_heap_t *h, hak_slab_t *s) {
  while (s) {
    hak_slab_t *next = s->next;
    if (atomic_load(hak_slab_remote(s))) {
      hak_slab_collect_remote(h, s);
      if (s->used == 0) {
        hak_slab_release(h, s);
      } else if (s->in_full) {
        hak_slab_list_remove(&h->full[s->cls], s);
        s->in_full = 0;
        hak_slab_list_push(&h->warm[s->cls], s);
      }
    }
    s = next;
  }
}

/* Take in the blocks other threads freed into this class's slabs, if the hint
 * says there are any. The hint is cleared before the lists are read, and a
 * remote free sets it after its push, so no free is missed for good. */
void hak_heap_collect_class(hak_heap_t *h, unsigned cls) {
  if (!atomic_load_explicit(&h->remote_hint[cls], memory_order_relaxed)) return;
  atomic_exchange(&h->remote_hint[cls], 0);
  collect_list(h, h->full[cls]);
  collect_list(h, h->warm[cls]);
}

void hak_heap_collect_all(hak_heap_t *h) {
  for (unsigned c = 0; c < HAK_CLASSES; c++) hak_heap_collect_class(h, c);
}

/* ---- lifecycle */

static hak_heap_t *heap_new(void) {
  uint32_t caps[HAK_CLASSES];
  size_t items = 0;
  for (unsigned c = 0; c < HAK_CLASSES; c++) items += caps[c] = hak_class_cache_cap(c);
  size_t page = hak_os_page_size();
  size_t size = (sizeof(hak_heap_t) + items * sizeof(void *) + page - 1) & ~(page - 1);
  hak_heap_t *h = hak_os_map(size);
  if (!h) return NULL;
  void **it = (void **)(h + 1);
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    h->cache[c].items = it;
    h->cache[c].cap = caps[c];
    it += caps[c];
  }
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

HAK_NOINLINE hak_heap_t *hak_heap_thread_init(void) {
  hak_init();
  hak_heap_t *h = heap_adopt();
  if (!h) h = heap_new();
  if (!h) return NULL;
  hak_tls_heap = h;
  hak_thread_register(h);
  hak_heap_collect_all(h);
  return h;
}

hak_heap_t *hak_heap_get(void) {
  hak_heap_t *h = hak_tls_heap;
  return HAK_LIKELY(h != &hak_heap_empty) ? h : hak_heap_thread_init();
}

/* Return what the heap holds and does not use: cached blocks go back to
 * their slabs, remote frees are collected, empty slabs are scheduled for
 * decommit. With now set, everything is decommitted or passed to the shared
 * pool at once. Returns nonzero if memory went back to the OS. */
int hak_heap_release_all(hak_heap_t *h, bool now) {
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    hak_cache_flush(h, c, h->cache[c].count);
    atomic_store(&h->remote_hint[c], 0);
    collect_list(h, h->full[c]);
    collect_list(h, h->warm[c]);
  }
  return hak_release_purge(h, now);
}

/* Release what h does not use and leave it abandoned; a purge it still
 * has pending is left to other threads' release ticks. */
static int heap_release_and_leave(hak_heap_t *h, bool now) {
  int released = hak_heap_release_all(h, now);
  uint64_t due = h->purge_at;
  atomic_store(&h->state, HAK_HEAP_ABANDONED);
  if (due) hak_release_abandoned_due(due);
  return released;
}

/* pthread key destructor: the thread is exiting. Its memory follows the
 * usual delays (the next new thread is likely to adopt the heap and want it
 * back); other threads' release ticks purge it when the delays run out. */
void hak_thread_done(void *arg) {
  hak_tls_heap = &hak_heap_empty;
  heap_release_and_leave(arg, false);
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
