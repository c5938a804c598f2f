/* The unified cache slow paths: batch refill from the warm pool (or a fresh
 * slab) when a class's cache is empty, batch flush back to the slabs when it
 * is full. The fast paths themselves are inline in internal.h. */
#include <errno.h>

#include "internal.h"

/* Move up to want free blocks of slab s into out[]: freed blocks first, then
 * never-used ones from the uncarved tail (lowest address on top), so that a
 * slab's untouched pages stay untouched while it has blocks to reuse. */
static uint32_t slab_take(hak_heap_t *h, hak_slab_t *s, void **out, uint32_t want) {
  uint32_t n = 0;
  while (n < want && s->free) {
    void *p = s->free;
    s->free = *(void **)p;
    out[n++] = p;
  }
  if (n < want && s->carved < s->limit) {
    uint32_t k = (uint32_t)s->limit - s->carved;
    if (k > want - n) k = want - n;
    uint32_t bs = hak_class_size[s->cls];
    char *p = (char *)s->start + (size_t)s->carved * bs;
    memmove(out + k, out, n * sizeof(void *));
    for (uint32_t i = 0; i < k; i++, p += bs) {
      ((uintptr_t *)p)[1] = hak_free_mark();
      out[k - 1 - i] = p;
    }
    s->carved = (uint16_t)(s->carved + k);
    n += k;
  }
  s->used += n;
  HAK_COUNT(h->counters[s->cls].used_blocks, n);
  HAK_COUNT(h->counters[s->cls].refill_blocks, n);
  return n;
}

static HAK_NOINLINE uint32_t cache_refill(hak_heap_t *h, unsigned cls) {
  hak_release_tick(h);
  hak_ucache_t *c = &h->cache[cls];
  uint32_t cap = hak_cache_cap(c);
  void **want = c->items + cap / 2;
  HAK_COUNT(h->counters[cls].refills, 1);
  c->top += hak_heap_take_remote(h, cls, c->top, cap - cap / 4);   /* the cache is empty */
  while (c->top < want) {
    hak_slab_t *s = h->warm[cls];
    if (!s && !(s = hak_slab_new(h, cls))) break;
    c->top += slab_take(h, s, c->top, (uint32_t)(want - c->top));
    if (!s->free && s->carved == s->limit) {
      hak_slab_list_remove(&h->warm[cls], s);
      s->in_full = 1;
      hak_slab_list_push(&h->full[cls], s);
    }
  }
  return hak_cache_count(c);
}

void *hak_malloc_class(hak_heap_t *h, unsigned cls, size_t size) {
  hak_ucache_t *c = &h->cache[cls];
  if (c->top == c->items && cache_refill(h, cls) == 0) {
    errno = ENOMEM;
    return NULL;
  }
#if HAK_STAT >= 2
  c->allocs++;
  h->counters[cls].requested += size;
#endif
  void *p = *--c->top;
  ((uintptr_t *)p)[1] = 0;
  return p;
}

HAK_NOINLINE void *hak_malloc_slow(size_t size) {
  if (size > HAK_MID_MAX) return hak_large_alloc(size, HAK_ALIGN, false);
  hak_heap_t *h = hak_heap_get();
  if (HAK_UNLIKELY(!h)) {
    errno = ENOMEM;
    return NULL;
  }
  return hak_malloc_class(h, hak_class_of(size), size);
}

/* Return the n oldest (bottom) blocks of a class's cache to their slabs. */
void hak_cache_flush(hak_heap_t *h, unsigned cls, uint32_t n) {
  hak_ucache_t *c = &h->cache[cls];
  for (uint32_t i = 0; i < n; i++) hak_slab_put_local(h, c->items[i]);
  memmove(c->items, c->items + n, (hak_cache_count(c) - n) * sizeof(void *));
  c->top -= n;
  HAK_COUNT(h->counters[cls].flushes, n != 0);
  HAK_COUNT(h->counters[cls].flush_blocks, n);
}

HAK_NOINLINE void hak_free_flush(hak_heap_t *h, unsigned cls, void *p) {
  hak_release_tick(h);
  hak_ucache_t *c = &h->cache[cls];
  hak_cache_flush(h, cls, hak_cache_cap(c) / 2);
  *c->top++ = p;
#if HAK_STAT >= 2
  c->frees++;
#endif
}
