/* hakmem — a general-purpose memory allocator.
 *
 * The library overrides the whole malloc family (malloc, free, calloc,
 * realloc, reallocarray, posix_memalign, aligned_alloc, memalign, valloc,
 * pvalloc, malloc_usable_size, free_sized, free_aligned_sized, malloc_trim)
 * and the C++ operator new/delete family, either through LD_PRELOAD of
 * libhakmem.so or by linking libhakmem.a / -lhakmem.
 *
 * The hak_* functions below are the same allocator under its own names;
 * they behave exactly as their libc counterparts (errno included).
 */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAKMEM_VERSION_MAJOR 0
#define HAKMEM_VERSION_MINOR 1
#define HAKMEM_VERSION_PATCH 0

void  *hak_malloc(size_t size);
void   hak_free(void *p);
void  *hak_calloc(size_t count, size_t size);
void  *hak_realloc(void *p, size_t size);
void  *hak_reallocarray(void *p, size_t count, size_t size);
void  *hak_aligned_alloc(size_t alignment, size_t size);
int    hak_posix_memalign(void **out, size_t alignment, size_t size);
void  *hak_memalign(size_t alignment, size_t size);
void  *hak_valloc(size_t size);
void  *hak_pvalloc(size_t size);
size_t hak_usable_size(const void *p);
void   hak_free_sized(void *p, size_t size);
void   hak_free_aligned_sized(void *p, size_t alignment, size_t size);

/* Return as much free memory to the OS as possible right now: flushes the
 * calling thread's caches, collects abandoned thread heaps, decommits empty
 * slabs and drops the large-block cache. Returns 1 if memory was released. */
int    hak_trim(void);

#ifdef __cplusplus
}
#endif

#endif
