/* Slab lists: a heap's warm pool and full list of each class, doubly
 * linked through the links in their SuperSlab's header, so that a slab
 * leaves its list in constant time. Only the owning heap's thread (or the
 * holder of its token) changes them: no atomics. */
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
