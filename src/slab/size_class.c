/* Size classes: 16-byte steps up to 128 bytes, then 8 classes per doubling,
 * so rounding wastes at most 12.5% above 128 bytes (16-byte alignment forces
 * 16-byte steps below). Classes 0..31 are the tiny tier (<= 1 KiB), 32..103
 * the mid tier (<= 512 KiB), of which 88..103, above 128 KiB, are the span
 * classes (types.h). */
#include "internal.h"

uint8_t  hak_class_of_small[HAK_TINY_MAX / 16 + 1];
uint16_t hak_cache_of_mid[HAK_MID_TABLE_MAX / 128 + 1];
uint32_t hak_class_size[HAK_CLASSES];
uint8_t  hak_class_units[HAK_CLASSES];

static uint32_t class_size_formula(unsigned c) {
  if (c < 8) return 16u * (c + 1u);
  unsigned b = 7u + (c - 8u) / 8u;
  unsigned k = (c - 8u) % 8u + 1u;
  return (1u << b) + k * (1u << (b - 3u));
}

/* The inverse mod 2^64 of divisor's odd part (Newton's iteration doubles
 * the correct low bits each step: 3 -> 6 -> ... -> 96). */
uint64_t hak_odd_inverse(uint32_t divisor) {
  uint64_t d = divisor >> __builtin_ctz(divisor);
  uint64_t x = d;
  for (int i = 0; i < 5; i++) x *= 2 - d * x;
  return x;
}

/* A mid class's slab spans the units that hold MID_SLAB_BLOCKS of its
 * blocks (more where a unit holds more), but no more than
 * MID_SLAB_MAX_BYTES: fewer blocks for the largest classes. A slab stays
 * while one block of it is cached or in use, so smaller slabs hold less
 * memory, and cost more carving (docs/design/tuning.md, "Mid slabs"). A
 * span class's slab is its one block. */
#define MID_SLAB_BLOCKS    4u
#define MID_SLAB_MAX_BYTES (256u << 10)

void hak_size_class_init(void) {
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    uint32_t size = class_size_formula(c);
    hak_class_size[c] = size;
    uint32_t units = 1;
    if (c >= HAK_TINY_CLASSES) {
      uint32_t blocks = MID_SLAB_MAX_BYTES / size < MID_SLAB_BLOCKS ? MID_SLAB_MAX_BYTES / size : MID_SLAB_BLOCKS;
      if (!blocks) blocks = 1;
      units = (blocks * size + HAK_UNIT_SIZE - 1) / HAK_UNIT_SIZE;
    }
    hak_class_units[c] = (uint8_t)units;
  }
  unsigned c = 0;
  for (unsigned i = 0; i <= HAK_TINY_MAX / 16; i++) {
    while (hak_class_size[c] < i * 16u) c++;
    hak_class_of_small[i] = (uint8_t)c;
  }
  for (unsigned i = HAK_TINY_MAX / 128 + 1; i <= HAK_MID_TABLE_MAX / 128; i++)
    hak_cache_of_mid[i] = (uint16_t)offsetof(hak_heap_t, cache[hak_class_of((size_t)i * 128)]);
}

/* HAK_CACHE_ROOM_MIN blocks of class cls, but no more than fit in bytes:
 * with HAK_CACHE_ROOM_MIN_BYTES, the room any cache may grow to. */
static long room_floor(unsigned cls, long bytes) {
  long fit = bytes / (long)hak_class_size[cls];
  return fit < HAK_CACHE_ROOM_MIN ? fit : HAK_CACHE_ROOM_MIN;
}

/* Unified cache capacity of a class for a heap created now:
 * CACHE_BYTES / size, within CACHE_MIN..CACHE_MAX, and at least 2 (a flush
 * keeps half); CACHE_MIN blocks only as far as CACHE_MIN_BUDGETS times
 * CACHE_BYTES holds them: unbounded, CACHE_MIN blocks of the largest
 * classes held up to 512 KiB a class and thread, and their slabs
 * (docs/design/tuning.md, "The cache's floor"). */
#define CACHE_MIN_BUDGETS 4

uint32_t hak_class_cache_cap(unsigned cls) {
  long size = (long)hak_class_size[cls], bytes = hak_opt(hak_option_cache_bytes), cap = bytes / size;
  long min = hak_opt(hak_option_cache_min), fit = CACHE_MIN_BUDGETS * bytes / size;
  if (min > fit) min = fit;
  if (cap < min) cap = min;
  if (cap > hak_opt(hak_option_cache_max)) cap = hak_opt(hak_option_cache_max);
  return cap < 2 ? 2 : (uint32_t)cap;
}

/* The most blocks a class's cache grows to, for a heap created now, when
 * batches of the program overflow it (cache.c): CACHE_BYTES / size, at
 * most HAK_CACHE_ROOM_MAX; no less than it starts with, nor than
 * HAK_CACHE_ROOM_MIN blocks within HAK_CACHE_ROOM_MIN_BYTES. The floor is
 * for mid classes, whose slabs hold a few blocks each: a cache of 8 that
 * swings between full and empty flushes its slabs empty, releases them
 * and carves them again, on fresh pages. A cache grows only when the
 * program's own batches swing it; a thread that goes idle keeps its grown
 * caches until the idle sweep or a drain takes them
 * (docs/design/tuning.md, "How far a cache grows"). */
uint32_t hak_class_cache_room(unsigned cls) {
  uint32_t cap = hak_class_cache_cap(cls);
  long size = (long)hak_class_size[cls];
  long room = hak_opt(hak_option_cache_bytes) / size;
  long floor = room_floor(cls, HAK_CACHE_ROOM_MIN_BYTES);
  if (room > HAK_CACHE_ROOM_MAX) room = HAK_CACHE_ROOM_MAX;
  if (room < floor) room = floor;
  return room > (long)cap ? (uint32_t)room : cap;
}

/* Blocks of a heap's first refill of a class (cache.c's slow start): a
 * page's worth, at least 2 (a thread that needs a few blocks of a size
 * touches one page, not half a cache of them). */
uint32_t hak_refill_first(unsigned cls) {
  return HAK_PAGE_BYTES / hak_class_size[cls] > 2 ? HAK_PAGE_BYTES / hak_class_size[cls] : 2;
}

/* The smallest class that fits size and whose blocks are all aligned to align:
 * slabs start 4 KiB aligned (tiny, in unit 0) or 64 KiB aligned (otherwise),
 * so a block size that is a multiple of align gives aligned blocks. */
int hak_class_for_aligned(size_t size, size_t align) {
  if (size < align) size = align;
  if (size > HAK_MID_MAX || align > HAK_UNIT_SIZE) return -1;
  for (unsigned c = hak_class_of(size); c < HAK_CLASSES; c++) {
    if (hak_class_size[c] % align == 0) return (int)c;
  }
  return -1;
}
