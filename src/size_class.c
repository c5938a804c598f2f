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
 * while one block of it is cached or in use, and the units of a released
 * one go to whatever class needs that many next: with 8 blocks a slab,
 * 8 threads that churn batches of every mid size (bench memory mid) kept
 * 200 MiB at 2.0M ops/s, with 4 158 MiB at 4.4M (random_mixed_mid 2%
 * slower: more slabs carved), with 2 112 MiB at 5.8M (random_mixed_mid 5%
 * slower; 13% on a later host). With 4 blocks within 256 KiB (2 to 3 of
 * the classes above 64 KiB, whose slabs were 5 to 8 units) memory mid
 * peaks at 64 MiB instead of 83 and keeps 21 MiB idle instead of 28, at
 * the same speed; random_mixed_mid has no such class. A span class's slab
 * is its one block. */
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
 * CACHE_BYTES holds them. Unbounded, CACHE_MIN kept 4 blocks of each class
 * above 64 KiB (16 above 8 KiB in profile fast), up to 512 KiB (2 MiB) a
 * class and thread, and the slabs they sit in until the class went idle:
 * 8 threads churning batches of every mid size (bench memory mid) peaked
 * at 62 MiB (225 MiB in profile fast, at a third of its speed now), 52
 * (113) with the bound, and kept 21 MiB idle, 12 now.
 */
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
 * and carves them again, on fresh pages (random_mixed 2000000 400 1 1024
 * 32768: some 2,000 refills and flushes a class of 18-32 KiB). A cache
 * grows only when the program's own batches swing it. 512 KiB rather than
 * 256 (classes above 8 KiB grow to 32 blocks up to 16 KiB, to 512 KiB
 * above): random_mixed_mid 1.18x faster with 0.79 of its peak RSS (fewer
 * swings flush slabs empty that the next refill carves again), memory mid
 * 1.12x at the same RSS (5-round A/B over make bench, geomean 1.008 / RSS
 * 0.989); but a thread that goes idle keeps its grown caches: phased's RSS
 * after its last phase 20.4 -> 26.6 MiB (mimalloc 155, tcmalloc 169,
 * jemalloc 69, glibc 15). 1 MiB gave 1.03x tcmalloc's speed on
 * random_mixed_mid against 0.99x here, and 31.8 MiB after phased. */
uint32_t hak_class_cache_room(unsigned cls) {
  uint32_t cap = hak_class_cache_cap(cls);
  long size = (long)hak_class_size[cls];
  long room = hak_opt(hak_option_cache_bytes) / size;
  long floor = room_floor(cls, HAK_CACHE_ROOM_MIN_BYTES);
  if (room > HAK_CACHE_ROOM_MAX) room = HAK_CACHE_ROOM_MAX;
  if (room < floor) room = floor;
  return room > (long)cap ? (uint32_t)room : cap;
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
