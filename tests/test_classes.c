/* Size classes (classes of sizes and of aligned sizes, their rounding and
 * waste) and the block check (hak_is_block): the arithmetic every slab's
 * blocks rest on. */
#include "internals.h"

static void test_size_classes(void) {
  unsigned prev = 0;
  int bad_round = 0, bad_waste = 0, bad_mono = 0;
  for (size_t size = 0; size <= HAK_MID_MAX; size++) {
    unsigned c = hak_class_of(size);
    size_t cs = hak_class_size[c];
    if (cs < size || (c > 0 && hak_class_size[c - 1] >= size && size > 0)) bad_round++;
    if (size > 128 && (cs - size) * 8 > size) bad_waste++;
    if (c < prev) bad_mono++;
    prev = c;
  }
  CHECK(bad_round == 0, "%d sizes map to a class that is not the smallest fit", bad_round);
  CHECK(bad_waste == 0, "%d sizes above 128 B waste more than 12.5%%", bad_waste);
  CHECK(bad_mono == 0, "class index not monotonic in %d places", bad_mono);
  CHECK(hak_class_size[HAK_TINY_CLASSES - 1] == HAK_TINY_MAX, "last tiny class is %u", hak_class_size[HAK_TINY_CLASSES - 1]);
  CHECK(hak_class_size[HAK_CLASSES - 1] == HAK_MID_MAX, "last mid class is %u", hak_class_size[HAK_CLASSES - 1]);
  int misaligned = 0;
  for (unsigned c = 0; c < HAK_CLASSES; c++) misaligned += hak_class_size[c] % 16 != 0;
  CHECK(misaligned == 0, "%d classes are not multiples of 16", misaligned);
}

/* hak_is_block against division, for every class, every offset in a
 * SuperSlab and offsets just below the slab start. */
static void test_block_check(void) {
  long wrong = 0;
  for (unsigned c = 0; c < HAK_CLASSES; c++) {
    uint32_t d = hak_class_size[c];
    hak_slab_t s = {.inverse = hak_odd_inverse(d), .shift = (uint8_t)__builtin_ctz(d), .start = HAK_SS_SIZE,
                    .limit = (HAK_SS_SIZE - HAK_SS_HEADER) / d};
    for (uint64_t off = 0; off < HAK_SS_SIZE; off++) {
      bool want = off % d == 0 && off / d < s.limit;
      if (hak_is_block(&s, s.start + off) != want) wrong++;
    }
    for (uint64_t below = 1; below <= 4 * d; below++) wrong += hak_is_block(&s, s.start - below);
    hak_slab_t unused = s;
    unused.limit = 0;
    wrong += hak_is_block(&unused, s.start);
  }
  CHECK(wrong == 0, "block check wrong for %ld addresses", wrong);
}

static void test_aligned_classes(void) {
  int bad = 0;
  for (size_t align = 32; align <= HAK_UNIT_SIZE; align *= 2)
    for (size_t size = 1; size <= HAK_MID_MAX; size += 97) {
      int c = hak_class_for_aligned(size, align);
      if (c < 0) {
        if (size <= HAK_MID_MAX && align <= HAK_MID_MAX && size <= align) bad++;
        continue;
      }
      if (hak_class_size[c] % align || hak_class_size[c] < size) bad++;
    }
  CHECK(bad == 0, "%d aligned class choices wrong", bad);
}

static const test_case_t cases[] = {
    {"size_classes", test_size_classes},
    {"block_check", test_block_check},
    {"aligned_classes", test_aligned_classes},
};

int main(int argc, char **argv) { return RUN_INTERNAL_CASES("classes", cases, argc, argv); }
