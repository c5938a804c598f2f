/* The AddressSanitizer-aware build's poisoning (track.h). */
#include "internal.h"

#if HAK_ASAN
#include <sanitizer/asan_interface.h>

/* The sanitizer's allocator (libasan; GCC ships no header for these). */
extern int __sanitizer_get_ownership(const volatile void *p);
extern size_t __sanitizer_get_allocated_size(const volatile void *p);
extern void __interceptor_free(void *p);

/* The sanitizer allocates through hakmem while it sets itself up, before
 * its shadow memory exists and before the C library has the environment;
 * by the program's constructors both are there. So blocks handed out before
 * are not poisoned (they are, once freed), and the options are read again
 * here. */
static bool ready;
__attribute__((constructor)) static void sanitizer_ready(void) {
  hak_options_init();
  if (hak_opt(hak_option_route_banner)) hak_banner_print();
  ready = true;
}

void hak_track_asan_alloc(void *p, size_t n) {
  if (!p || !ready) return;
  size_t usable = hak_block_live_usable(p, "malloc");
  __asan_unpoison_memory_region(p, n);
  if (usable > n) __asan_poison_memory_region((char *)p + n, usable - n);
}

/* Plain loops, which the compiler must not turn back into calls. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void hak_block_zero(void *p, size_t n) {
  for (unsigned char *c = p; n--;) *c++ = 0;
}

__attribute__((optimize("no-tree-loop-distribute-patterns"))) void hak_block_copy(void *to, const void *from, size_t n) {
  unsigned char *d = to;
  for (const unsigned char *s = from; n--;) *d++ = *s++;
}

void hak_track_asan_free(void *p) {
  size_t usable = p && ready ? hak_block_live_usable(p, "free") : 0;  /* 0: free says what is wrong */
  if (usable) __asan_poison_memory_region(p, usable);
}
/* A block of the sanitizer's heap, not hakmem's. */
static bool sanitizer_owns(const void *p) {
  return p && hak_registry_kind((uintptr_t)p) == HAK_REG_FOREIGN && __sanitizer_get_ownership(p);
}

bool hak_track_foreign_free(void *p) {
  if (!sanitizer_owns(p)) return false;
  __interceptor_free(p);
  return true;
}

/* The block moves into hakmem. */
bool hak_track_foreign_realloc(void *p, size_t n, void **out) {
  if (!sanitizer_owns(p)) return false;
  size_t old = __sanitizer_get_allocated_size(p);
  void *q = hak_malloc_entry_of(hak_prof_on, n);
  if (q) {
    hak_block_copy(q, p, old < n ? old : n);
    __interceptor_free(p);
  }
  *out = q;
  return true;
}

bool hak_track_foreign_usable(const void *p, size_t *out) {
  if (!sanitizer_owns(p)) return false;
  *out = __sanitizer_get_allocated_size(p);
  return true;
}
#endif
