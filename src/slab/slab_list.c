/* Slab lists: a heap's warm pool and full list of each class, doubly
 * linked through the links in their SuperSlab's header, so that a slab
 * leaves its list in constant time; and each slab's free list, which
 * blocks go back to in runs. Only the owning heap's thread (or the holder
 * of its token) changes them: no atomics. */
#include "internal.h"

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

hak_slab_t *hak_slab_list_next(hak_slab_t *s) { return link_of(s)->next; }

void hak_slab_list_remove(hak_slab_t **list, hak_slab_t *s) {
  hak_slab_link_t *l = link_of(s);
  if (l->prev) link_of(l->prev)->next = l->next;
  else *list = l->next;
  if (l->next) link_of(l->next)->prev = l->prev;
  l->next = l->prev = NULL;
}

/* A slab's free list is a chain of containers, as a remote-free batch is
 * (types.h): free blocks that hold the link to the next container (word 0),
 * their mark (word 1), a count k (word 2) and the addresses of k more free
 * blocks of the slab (words 3 ...). A flush writes a container's lines for
 * a run of blocks, not a link into each block, and a refill reads them:
 * the blocks listed stay untouched until malloc hands them out. A
 * container of a remote-free batch whose blocks lie in its unit joins the
 * list as it is. A class
 * whose blocks are under HAK_BATCH_COUNTED bytes has no count: its
 * containers list nothing, a plain chain.
 *
 * A refill hands out a container's blocks from the last it lists to the
 * first, then the container (cache.c, slab_take), and the containers
 * of the list from the last it takes to the first: blocks that went
 * back in address order come out in address order, as other allocators'
 * free lists give them, for the processor's prefetchers. A remote-free
 * batch's container is the oldest of its blocks and lists the others as
 * they were freed: newest first. A flush's container is the newest of its
 * chunk and lists the others from the newest, and the chunks go on the
 * list from the oldest: oldest first. */

/* Container c lists the k blocks at blocks[], from the last with
 * backward (their addresses in words 3 ..., the count in word 2 where the
 * class's containers have room) and links to head: the list's new head. */
static void **container_write(void **c, void *const *blocks, uint32_t k, bool backward, bool counted, void **head) {
  void **at = c + 3;
  for (uint32_t i = 0; i < k; i++, at++) *at = (void *)hak_link_encode(blocks[backward ? k - 1 - i : i], at);
  if (counted) c[2] = (void *)(uintptr_t)k;
  c[0] = (void *)hak_link_encode(head, c);
  return c;
}

/* Slab s of class cls takes back n blocks, its free list now starting at
 * head: its count, and its list if it empties or was full. */
static void slab_put_list(hak_heap_t *h, unsigned cls, hak_slab_t *s, void **head, uint32_t n) {
  s->free = head;
  if (hak_class_gives_pages(cls)) h->blocks_back[cls / 64] |= 1ull << (cls % 64);
  HAK_COUNT(h->counters[cls].used_blocks, -(int64_t)n);
  s->used = (uint16_t)(s->used - n);
  if (HAK_UNLIKELY(s->used == 0 || s->in_full)) hak_slab_put_moved(h, s);
}

/* Give the n free blocks blocks[] of class cls back to their slabs (owner
 * only), a run of blocks of one unit at a time (a program frees the blocks
 * it got together together, and a cache hands them out in runs): one
 * look-up of the slab, one test whether it empties. A run is cut into
 * chunks of as many blocks as a container lists and one more; the last
 * block of each chunk becomes the container listing the others, from the
 * last (above: a refill hands them out in the order the cache held them,
 * from its bottom). The last
 * is the one a cache took most recently, freed by the program where the
 * first may be a block a refill carved and never handed out, whose page
 * is still untouched (a thread's exit would fault in the far end of each
 * slab it carved). A slab that empties is released, one that was full
 * goes to the warm pool. */
void hak_slab_put_runs(hak_heap_t *h, unsigned cls, void **blocks, uint32_t n) {
  uint32_t room = hak_container_room(cls);
  void **end = blocks + n;
  for (void **b = blocks; b < end;) {
    uintptr_t unit = (uintptr_t)*b >> HAK_UNIT_SHIFT;
    hak_slab_t *s = hak_slab_of(hak_ss_of(*b), (uintptr_t)*b);
    void **head = s->free, **first = b;
    do {
      void **e = b + 1, **to = (uint32_t)(end - b) <= room ? end : b + room + 1;
      while (e < to && (uintptr_t)*e >> HAK_UNIT_SHIFT == unit) e++;
      hak_block_check_free(e[-1], "free");
      for (void **q = b; q < e - 1; q++) hak_block_check_free(*q, "free");
      head = container_write(e[-1], b, (uint32_t)(e - 1 - b), true, room != 0, head);
      b = e;
    } while (b < end && (uintptr_t)*b >> HAK_UNIT_SHIFT == unit);
    slab_put_list(h, cls, s, head, (uint32_t)(b - first));
  }
}

/* Give back container c of a remote-free batch (inbox.c) that lists k
 * blocks (words 3 ..., the addresses as put_runs takes them: the secure
 * build's remote check decoded them in place). When they all lie in c's
 * unit, c goes on its slab's free list as it stands, one link written: the
 * blocks it lists stay untouched, where put_runs would write a container
 * into the first of them, a line the freeing thread last held. Else they
 * go back as put_runs puts them. */
void hak_slab_put_container(hak_heap_t *h, unsigned cls, void **c, uint32_t k) {
  uintptr_t unit = (uintptr_t)c >> HAK_UNIT_SHIFT;
  for (uint32_t j = 0; j < k; j++) {
    if ((uintptr_t)c[3 + j] >> HAK_UNIT_SHIFT == unit) continue;
    void *p = c;
    hak_slab_put_runs(h, cls, c + 3, k);
    hak_slab_put_runs(h, cls, &p, 1);
    return;
  }
  hak_slab_t *s = hak_slab_of(hak_ss_of(c), (uintptr_t)c);
  for (uint32_t j = 0; HAK_SECURE && j < k; j++) {
    hak_block_check_free(c[3 + j], "free");
    c[3 + j] = (void *)hak_link_encode(c[3 + j], &c[3 + j]);
  }
  if (hak_batch_counted(cls)) c[2] = (void *)(uintptr_t)k;
  c[0] = (void *)hak_link_encode(s->free, c);
  slab_put_list(h, cls, s, c, k + 1);
}

/* ---- Pages of slabs in use (mid classes)
 *
 * A slab of a mid class whose free blocks cover whole pages gives those
 * pages back to the OS while its other blocks stay in use: a program that
 * deleted half of what it held and next wants other sizes (Redis,
 * docs/design/thread-memory.md, "Memory freed in one size and wanted in
 * another") does not keep them. Its heap looks at the slabs of each class
 * that got blocks back one purge delay later (release.c, hak_release_look):
 * the blocks that stayed on a slab's free list since the last look (its
 * oldest free_low: a refill takes the newest first) and whose pages hold
 * no block in use go; they leave the free list, which is written again
 * from the others, for the slab's absent map, and their pages are
 * decommitted. While a slab has absent blocks every unit's limit is 0, so
 * that every free of its blocks takes the slow path (hak_slab_holed_block
 * there tells a second free of an absent block, whose free mark went with
 * its page, from a free of a block in use). A refill takes absent blocks
 * after the free list (hak_slab_take_absent); the last one taken gives the
 * units their limits back. Only fully carved slabs give pages back. */

_Static_assert(HAK_UNIT_SIZE / HAK_TINY_MAX <= 64, "a mid slab's blocks fit the absent map's 64 bits");

static _Atomic uint64_t page_bytes;   /* given back so far */

uint64_t hak_slab_page_bytes(void) { return atomic_load_explicit(&page_bytes, memory_order_relaxed); }

static hak_superslab_t *absent_map_of(const hak_slab_t *s, unsigned *u) {
  hak_superslab_t *ss = hak_slab_ss(s);
  *u = (unsigned)(s - hak_ss_slabs(ss));
  return ss;
}

/* Read after the unit's limit refused a: while the slab has absent blocks
 * their map says; a count of 0 means none, or that the last were taken back
 * since the limit was read (the limits came back before the count,
 * hak_slab_take_absent), so the limit is read again. If it refuses a once
 * more, the slab may have given pages back since the count was read (the
 * count went up before the limits went to 0, and holings counts those
 * turns, hak_slab_give_back): the whole reads again until holings stays
 * the same (test_purge's holed_race). */
int hak_slab_holed_block(hak_slab_t *unit, uintptr_t a) {
  hak_slab_t *s = hak_unit_head(unit);
  if (!s) return HAK_NOT_HOLED;
  uint64_t i = hak_block_index(s, a);
  unsigned u;
  hak_superslab_t *ss = absent_map_of(s, &u);
  for (;;) {
    uint8_t holings = __atomic_load_n(&s->holings, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&s->absent, __ATOMIC_ACQUIRE) && i < s->capacity)
      return atomic_load_explicit(&ss->absent[u], memory_order_relaxed) >> i & 1 ? HAK_BLOCK_ABSENT : HAK_BLOCK_PRESENT;
    if (hak_is_block(unit, a)) return HAK_BLOCK_PRESENT;
    if (__atomic_load_n(&s->holings, __ATOMIC_ACQUIRE) == holings) return HAK_NOT_HOLED;
  }
}

/* Every unit of slab s gets limit (0: its frees go slow). */
static void slab_limits(hak_slab_t *s, uint64_t limit) {
  for (unsigned i = 0; i < s->units; i++) __atomic_store_n(&s[i].limit, limit, __ATOMIC_RELEASE);
}

uint32_t hak_slab_take_absent(hak_slab_t *s, void **out, uint32_t want) {
  unsigned u;
  hak_superslab_t *ss = absent_map_of(s, &u);
  uint64_t map = atomic_load_explicit(&ss->absent[u], memory_order_relaxed);
  uint32_t bs = hak_class_size[s->cls], n = 0;
  for (; map && n < want; map &= map - 1) {
    char *p = (char *)s->start + (size_t)__builtin_ctzll(map) * bs;
    if (HAK_SECURE) hak_block_set_free((uintptr_t *)p, hak_free_mark_at(p));
    out[n++] = p;
  }
  atomic_store_explicit(&ss->absent[u], map, memory_order_relaxed);
  uint8_t left = (uint8_t)(s->absent - n);
  if (!left) slab_limits(s, s->carved);   /* before the count: a free that read the limits 0 and
                                             then reads the count 0 finds them (hak_is_slab_block) */
  __atomic_store_n(&s->absent, left, __ATOMIC_RELEASE);
  /* Taken back soon after they went: the slab holds its pages for as long
   * (not a sign for the adaptive controller, whose purge delay is the units'
   * too: Redis, which takes absent blocks back as it refills, then kept
   * the pages of everything FLUSHALL freed for 10 s, its delay 64 times
   * longer). */
  uint64_t now = hak_os_now_ms(), window = hak_release_window();
  if ((uint32_t)((uint32_t)now - ss->absent_at[u]) <= window) ss->absent_at[u] = (uint32_t)(now + window);
  return n;
}

/* The indexes of slab s's free blocks in the order a refill takes them,
 * newest first, into order[] (room for 64); their count, or 0 if the list
 * holds more than the slab's blocks (a list a program's stray writes
 * changed, which the slab keeps as it is). */
static uint32_t free_list_order(const hak_slab_t *s, uint8_t *order) {
  uint32_t n = 0;
  for (void **c = s->free; c; c = hak_link_decode((uintptr_t)c[0], c)) {
    uint32_t k = (uint32_t)(uintptr_t)c[2];
    if (k >= s->capacity - n) return 0;
    for (uint32_t i = 0; i <= k; i++) {   /* the listed ones from the last, then c */
      void *p = i < k ? hak_link_decode((uintptr_t)c[3 + k - 1 - i], &c[3 + k - 1 - i]) : (void *)c;
      uint64_t index = hak_block_index(s, (uintptr_t)p);
      if (index >= s->capacity) return 0;
      order[n++] = (uint8_t)index;
    }
  }
  return n;
}

/* Slab s's free list written again from the n blocks order[] (newest
 * first): chunks of as many blocks as a container lists and one more, from
 * the oldest, each listed by its oldest block, the newest chunk at the
 * head. */
static void free_list_write(hak_slab_t *s, const uint8_t *order, uint32_t n) {
  uint32_t room = hak_container_room(s->cls), bs = hak_class_size[s->cls];
  void *blocks[64];   /* oldest first */
  for (uint32_t i = 0; i < n; i++) blocks[i] = (void *)(s->start + (uintptr_t)order[n - 1 - i] * bs);
  void **head = NULL;
  for (uint32_t lo = 0, hi; lo < n; lo = hi) {
    hi = n - lo > room + 1 ? lo + room + 1 : n;
    for (uint32_t i = lo + 1; HAK_SECURE && i < hi; i++)   /* a listed block may have been a container */
      hak_block_set_free((uintptr_t *)blocks[i], hak_free_mark_at(blocks[i]));
    head = container_write(blocks[lo], blocks + lo + 1, hi - lo - 1, false, true, head);
  }
  s->free = head;
}

/* Bit per block of slab s (block size bs) that the page at p overlaps. */
static uint64_t page_blocks(const hak_slab_t *s, uint32_t bs, uintptr_t p, size_t page) {
  uint64_t lo = (p - s->start) / bs, hi = (p + page - 1 - s->start) / bs;
  if (hi >= s->capacity) hi = s->capacity - 1u;
  return (hi - lo == 63 ? ~0ull : (1ull << (hi - lo + 1)) - 1) << lo;
}

uint64_t hak_slab_give_back(hak_slab_t *s, uint64_t now, bool all) {
  if (s->carved < s->capacity || !s->free) return 0;
  unsigned u;
  hak_superslab_t *ss = absent_map_of(s, &u);
  if (!all && ss->absent_at[u] && (int32_t)(ss->absent_at[u] - (uint32_t)now) > 0) return 0;   /* held */
  uint8_t order[64];
  uint32_t len = free_list_order(s, order);
  uint32_t old = all || s->free_low > len ? len : s->free_low;
  s->free_low = (uint16_t)len;
  size_t page = hak_os_page_size();
  uint32_t bs = hak_class_size[s->cls];
  if ((size_t)old * bs < page) return 0;
  uint64_t absent = atomic_load_explicit(&ss->absent[u], memory_order_relaxed), gone = absent, take = 0;
  for (uint32_t i = len - old; i < len; i++) gone |= 1ull << order[i];
  /* the pages the blocks lie on (within the slab's units): those whose
   * blocks are all gone, one at least not absent yet, go */
  uintptr_t span_end = (uintptr_t)ss + ((uintptr_t)(u + s->units) << HAK_UNIT_SHIFT);
  uintptr_t from = (s->start + page - 1) & ~(uintptr_t)(page - 1);
  uintptr_t to = (s->start + (uintptr_t)s->capacity * bs + page - 1) & ~(uintptr_t)(page - 1);
  if (to > span_end) to = span_end;
  uint64_t pages = 0;   /* bit per page from `from` */
  for (uintptr_t p = from; p < to; p += page) {
    uint64_t blocks = page_blocks(s, bs, p, page);
    if ((gone & blocks) == blocks && (blocks & ~absent)) {
      take |= blocks & ~absent;
      pages |= 1ull << ((p - from) / page);
    }
  }
  if (!take) return 0;
  uint32_t n = 0;
  for (uint32_t i = 0; i < len; i++)
    if (!(take >> order[i] & 1)) order[n++] = order[i];
  free_list_write(s, order, n);
  s->free_low = (uint16_t)n;
  atomic_store_explicit(&ss->absent[u], absent | take, memory_order_relaxed);
  __atomic_store_n(&s->absent, (uint8_t)(s->absent + __builtin_popcountll(take)), __ATOMIC_RELEASE);
  if (!absent) {   /* after the count (a free refused by it finds the count), before the pages go */
    __atomic_store_n(&s->holings, (uint8_t)(s->holings + 1), __ATOMIC_RELEASE);
    slab_limits(s, 0);
  }
  ss->absent_at[u] = (uint32_t)now;
  uint64_t bytes = 0;
  while (pages) {
    unsigned first = (unsigned)__builtin_ctzll(pages), end = first;
    while (end < 64 && (pages >> end & 1)) end++;
    hak_os_decommit((void *)(from + first * page), (end - first) * page);
    bytes += (end - first) * page;
    pages &= end < 64 ? ~((1ull << end) - 1) : 0;
  }
  atomic_fetch_add_explicit(&page_bytes, bytes, memory_order_relaxed);
  return bytes;
}
