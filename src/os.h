/* The OS layer: the only place that talks to the kernel. Every function keeps
 * errno as it found it; failures are reported by return value. */
#ifndef HAK_OS_H
#define HAK_OS_H

#include <stddef.h>
#include <stdint.h>

/* Reads the page size and the process secret; call once, first. */
void     hak_os_init(void);
size_t   hak_os_page_size(void);

/* Fresh zeroed read-write memory, or NULL. size is a multiple of the page size. */
void    *hak_os_map(size_t size);
/* As hak_os_map, aligned to align (a power of two, at least a page). */
void    *hak_os_map_aligned(size_t size, size_t align);
/* Address space only: no access, no commit charge. For the registry map, the
 * reservation is read-write but never charged (MAP_NORESERVE). */
void    *hak_os_map_noreserve(size_t size);
void     hak_os_unmap(void *p, size_t size);
/* Drop the pages' contents: the range reads as zero afterwards, RSS shrinks. */
void     hak_os_decommit(void *p, size_t size);
/* Resize a mapping in place; 0 on success. */
int      hak_os_remap_inplace(void *p, size_t old_size, size_t new_size);
/* Move a mapping to a fresh address aligned to align; NULL on failure, in
 * which case the old mapping is untouched. */
void    *hak_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align);

uint64_t hak_os_now_ms(void);
uint64_t hak_os_random(void);

/* Write to stderr without allocating. */
void     hak_os_write_err(const char *s, size_t n);
_Noreturn void hak_os_abort(void);

#endif
