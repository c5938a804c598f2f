/* The registry: one byte per 2 MiB chunk of the 47-bit address space telling
 * SuperSlabs and large blocks (ours) from everything else (foreign). It lives
 * in zero-initialised memory, so only the pages for chunks we use ever become
 * resident (one 4 KiB page covers 8 GiB of address space). */
#include "internal.h"

_Atomic uint8_t hak_registry_map[HAK_REG_CHUNKS];

void hak_registry_set(uintptr_t chunk_addr, uint8_t kind) {
  atomic_store_explicit(&hak_registry_map[chunk_addr >> HAK_SS_SHIFT], kind, memory_order_release);
}
