/* The registry: one byte per 2 MiB chunk of the 47-bit address space telling
 * SuperSlabs and large blocks (ours) from everything else (foreign). It lives
 * in zero-initialised memory, so only the pages for chunks we use ever become
 * resident (one 4 KiB page covers 8 GiB of address space).
 *
 * Why a live block is never called foreign, with no lock: a chunk's byte is
 * only ever written by the thread that has the chunk's first address mapped
 * (a SuperSlab, a large block's header chunk, a 2 MiB-aligned large block),
 * and only while it has it:
 * - a kind is written after the call that gave the range (mmap or mremap);
 * - FOREIGN is written before the call that gives the range back (munmap,
 *   or mremap moving it away): large_unmap, the BigCache's expiry and
 *   drain, the shared pool's unmap, and a realloc that moves a block (which
 *   claims the chunk again if the move fails).
 * The kernel hands out a range only after it was given back, and its
 * mapping lock orders the two threads' calls, so the writes to a byte come
 * in the order of the mappings that covered the chunk: the last one is the
 * current mapping's. Chunks that are not a mapping's first (the rest of a
 * large block, the pages below a 2 MiB-aligned one) keep FOREIGN. Writing
 * FOREIGN after giving a range back would erase the kind another thread
 * had just written for its new mapping there. */
#include "internal.h"

_Atomic uint8_t hak_registry_map[HAK_REG_CHUNKS];

void hak_registry_set(uintptr_t chunk_addr, uint8_t kind) {
  atomic_store_explicit(&hak_registry_map[chunk_addr >> HAK_SS_SHIFT], kind, memory_order_release);
}
