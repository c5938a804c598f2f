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
 * containers list nothing, a plain chain. */

/* Slab s of class cls takes back n blocks, its free list now starting at
 * head: its count, and its list if it empties or was full. */
static void slab_put_list(hak_heap_t *h, unsigned cls, hak_slab_t *s, void **head, uint32_t n) {
  s->free = head;
  HAK_COUNT(h->counters[cls].used_blocks, -(int64_t)n);
  s->used = (uint16_t)(s->used - n);
  if (HAK_UNLIKELY(s->used == 0 || s->in_full)) hak_slab_put_moved(h, s);
}

/* Give the n free blocks blocks[] of class cls back to their slabs (owner
 * only), a run of blocks of one unit at a time (a program frees the blocks
 * it got together together, and a cache hands them out in runs): one
 * look-up of the slab, one test whether it empties. A run is cut into
 * chunks of as many blocks as a container lists and one more; the last
 * block of each chunk becomes the container listing the others. The last
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
      void **c = e[-1], **at = c + 3;
      hak_block_check_free(c, "free");
      for (; b < e - 1; b++, at++) {
        hak_block_check_free(*b, "free");
        *at = (void *)hak_link_encode(*b, at);
      }
      b = e;
      if (room) c[2] = (void *)(uintptr_t)(at - (c + 3));
      c[0] = (void *)hak_link_encode(head, c);
      head = c;
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
