/* The malloc family under its standard names (and glibc's __libc_* aliases),
 * so that LD_PRELOAD or static linking routes every allocation to hakmem.
 * Built only with HAK_OVERRIDE=1 (the sanitizer builds keep libc's malloc). */
#if HAK_OVERRIDE
#include <errno.h>

#include "fast_path.h"

/* void *malloc(size_t size): defined by HAK_TWO_BUILDS (fast_path.h), as
 * malloc_uncounted with its counted twin; its fast path is
 * hak_malloc_fast_of. free's is hak_free_fast. */
HAK_TWO_BUILDS(HAK_EXPORT, void *, malloc, (size_t size), hak_malloc_entry_of, (size));
/* On a cache line of its own: its 125 bytes then take two lines, not
 * three, wherever code before it ends (tiny_hot ran 5-7 % slower, at the
 * same instructions, when an unrelated change moved it 48 bytes on). */
HAK_EXPORT __attribute__((aligned(64))) void free(void *p) { hak_free_entry(p); }
HAK_EXPORT void *calloc(size_t count, size_t size) { return hak_calloc(count, size); }
HAK_EXPORT void *realloc(void *p, size_t size) { return hak_realloc(p, size); }
HAK_EXPORT void *reallocarray(void *p, size_t count, size_t size) { return hak_reallocarray(p, count, size); }
HAK_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
  return hak_posix_memalign(out, alignment, size);
}
HAK_EXPORT void *aligned_alloc(size_t alignment, size_t size) { return hak_aligned_alloc(alignment, size); }
HAK_EXPORT void *memalign(size_t alignment, size_t size) { return hak_memalign(alignment, size); }
HAK_EXPORT void *valloc(size_t size) { return hak_valloc(size); }
HAK_EXPORT void *pvalloc(size_t size) { return hak_pvalloc(size); }
HAK_EXPORT size_t malloc_usable_size(void *p) { return hak_usable_size(p); }
HAK_EXPORT void free_sized(void *p, size_t size) { hak_free_entry(p); }
HAK_EXPORT void free_aligned_sized(void *p, size_t alignment, size_t size) { hak_free_entry(p); }
HAK_EXPORT int malloc_trim(size_t pad) { return hak_trim(); }

HAK_TWO_BUILDS(HAK_EXPORT, void *, __libc_malloc, (size_t size), hak_malloc_entry_of, (size));
HAK_EXPORT void __libc_free(void *p) { hak_free_entry(p); }
HAK_EXPORT void *__libc_calloc(size_t count, size_t size) { return hak_calloc(count, size); }
HAK_EXPORT void *__libc_realloc(void *p, size_t size) { return hak_realloc(p, size); }
HAK_EXPORT void *__libc_memalign(size_t alignment, size_t size) { return hak_memalign(alignment, size); }
#endif
