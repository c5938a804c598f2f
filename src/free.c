/* free's slow paths: large blocks, frees from other threads, and the
 * reporting of bad pointers. */
#include "internal.h"

/* "hakmem: <fn>(): <what> 0x<p>" on one line, then abort. No allocation. */
_Noreturn HAK_COLD void hak_fatal_pointer(const char *fn, const char *what, const void *p) {
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem: ");
  hak_out_str(&o, fn);
  hak_out_str(&o, "(): ");
  hak_out_str(&o, what);
  hak_out_str(&o, " ");
  hak_out_hex(&o, (uintptr_t)p);
  hak_out_str(&o, "\n");
  hak_os_abort();
}

HAK_COLD void hak_free_invalid(const void *p) { hak_fatal_pointer("free", "invalid pointer", p); }

HAK_COLD void hak_free_double(const void *p) { hak_fatal_pointer("free", "double free of", p); }

HAK_NOINLINE void hak_free_slow(void *p) {
  if (!p) return;
  uint8_t kind = hak_registry_kind((uintptr_t)p);
  if (kind == HAK_REG_LARGE || kind == HAK_REG_LARGE_ALIGNED) {
    hak_large_free(p, kind, "free");
    return;
  }
  hak_fatal_pointer("free", "invalid pointer", p);
}

/* A block of a slab owned by another heap (or by an exited thread's heap):
 * push it on the slab's remote list, then hint the owner. The owner and class
 * are read before the push; after it the slab may be released at any time,
 * but heaps are never unmapped. */
HAK_NOINLINE void hak_free_remote(void *p, hak_superslab_t *ss, hak_slab_t *s) {
  hak_heap_t *owner = ss->owner;
  unsigned cls = s->cls;
  _Atomic(void *) *remote = hak_slab_remote(s - s->head_delta);
  void *old = atomic_load_explicit(remote, memory_order_relaxed);
  do {
    *(void **)p = old;
  } while (!atomic_compare_exchange_weak(remote, &old, p));
  if (!atomic_load(&owner->remote_hint[cls])) atomic_store(&owner->remote_hint[cls], 1);
}

/* Usable size of a block, after checking it is one of ours and in use. */
size_t hak_block_usable(const void *p, const char *fn) {
  uintptr_t a = (uintptr_t)p;
  uint8_t kind = hak_registry_kind(a);
  if (kind == HAK_REG_SUPERSLAB) {
    hak_slab_t *s = hak_unit_of(hak_ss_of(p), a);
    if (!hak_is_block(s, a) || ((const uintptr_t *)p)[1] == hak_free_mark(p))
      hak_fatal_pointer(fn, "invalid pointer", p);
    return s->block_size;
  }
  if (kind == HAK_REG_LARGE || kind == HAK_REG_LARGE_ALIGNED) return hak_large_usable(p, kind, fn);
  hak_fatal_pointer(fn, "invalid pointer", p);
}
