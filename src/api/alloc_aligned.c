/* Aligned allocation. Alignments up to 64 KiB for sizes up to 128 KiB come
 * from a size class whose blocks are all aligned (slab starts are 4 KiB or
 * 64 KiB aligned, so a block size that is a multiple of the alignment is
 * enough); everything else is a large block placed at the alignment. */
#include <errno.h>
#include <stdint.h>

#include "fast_path.h"

static bool is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* While heap profiling, counted (as malloc's counted build, fast_path.h): a
 * test here rather than a second build of every aligned entry point. */
void *hak_alloc_aligned(size_t align, size_t size) {
  if (align <= HAK_ALIGN) return HAK_UNLIKELY(hak_prof_on) ? hak_malloc_fast_of(true, size) : hak_malloc_fast(size);
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  int cls = hak_class_for_aligned(size, align);
  if (cls < 0) return hak_large_alloc(size, align, false);
  if (HAK_UNLIKELY(hak_prof_on)) return hak_prof_malloc_class((unsigned)cls, size);
  return hak_malloc_class((unsigned)cls, size);
}

HAK_EXPORT void *hak_aligned_alloc(size_t alignment, size_t size) {
  if (!is_pow2(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return hak_aligned_entry(alignment, size);
}

HAK_EXPORT int hak_posix_memalign(void **out, size_t alignment, size_t size) {
  if (!is_pow2(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  int saved = errno;
  void *p = hak_aligned_entry(alignment, size);
  errno = saved;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

/* glibc's memalign rounds an alignment that is not a power of two up. */
HAK_EXPORT void *hak_memalign(size_t alignment, size_t size) {
  if (alignment > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return NULL;
  }
  size_t a = HAK_ALIGN;
  while (a < alignment) a <<= 1;
  return hak_aligned_entry(a, size);
}

HAK_EXPORT void *hak_valloc(size_t size) {
  hak_init();
  return hak_aligned_entry(hak_os_page_size(), size);
}

HAK_EXPORT void *hak_pvalloc(size_t size) {
  hak_init();
  size_t page = hak_os_page_size();
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = size ? (size + page - 1) & ~(page - 1) : page;
  return hak_aligned_entry(page, rounded);
}
