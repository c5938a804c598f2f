/* Switching the allocating entry points to their counted builds (heap
 * profiling; fast_path.h, HAK_TWO_BUILDS).
 *
 * Each entry point's two builds are listed in the section hak_twins. While
 * heap profiling is on, start-up writes a jump to the counted build over
 * the uncounted one's entry, so that every caller (the program, other
 * libraries, function pointers taken before) counts, and a process that
 * does not profile runs code with no trace of it. A GNU indirect function
 * would choose at load time without writing code, but the C library and
 * others bind malloc at their own relocation, before this library's: the
 * dynamic linker then prints a warning for each ("Relink ... for IFUNC
 * symbol"), in every process.
 *
 * x86-64: a first instruction of 5 bytes or more (the malloc-like entry
 * points') becomes a jump to the counted build; else the 5 bytes the
 * compiler leaves before the entry take that jump, and the entry a 2-byte
 * jump back to them, over the first instruction, which must be 2 bytes
 * long at least (nothing may branch into what a jump covers: only the
 * entry is an instruction's start there). aarch64: the entry's
 * instruction becomes a branch. Elsewhere the builds cannot be switched,
 * and profiling stays off. All entries are checked before any is written. */
#include "internal.h"

/* The section's bounds, from the linker; weak: a static program that links
 * no entry point of the library has no such section. */
extern hak_twin_t __start_hak_twins[] __attribute__((weak, visibility("hidden")));
extern hak_twin_t __stop_hak_twins[] __attribute__((weak, visibility("hidden")));

#if defined(__x86_64__)
#define SITE_BEFORE 5
#define SITE_BYTES  10   /* the 5 bytes before the entry and 5 from it */

/* Whether an x86-64 instruction whose first byte is b is 2 bytes long at
 * least: a prefix, an escape, an opcode with a ModRM byte or an immediate
 * (the openings the entry points have; anything else is refused). */
static bool opens_long(uint8_t b) {
  return (b >= 0x40 && b <= 0x4f) || b == 0x0f || b == 0x64 || b == 0x65 || b == 0x66 || b == 0xf3 ||
         b == 0x89 || b == 0x8b || b == 0x8d || b == 0x85 || b == 0x31 || b == 0x39 || b == 0x3b ||
         b == 0x81 || b == 0x83 || b == 0xe8 || b == 0xe9 || (b >= 0xb8 && b <= 0xbf);
}

static bool site_ready(const hak_twin_t *t) {
  const uint8_t *at = (const uint8_t *)t->uncounted;
  for (int i = 1; i <= SITE_BEFORE; i++)
    if (at[-i] != 0x90) return false;
  return opens_long(at[0]);
}

/* Whether the first instruction is 5 bytes long at least: a 64-bit load
 * or address of a RIP-relative operand (REX.W 8B/8D, ModRM 00 reg 101,
 * disp32: 7 bytes), which is how the malloc-like entry points begin (the
 * thread-local heap's offset). */
static bool opens_5(const uint8_t *at) {
  return (at[0] & 0xf8) == 0x48 && (at[1] == 0x8b || at[1] == 0x8d) && (at[2] & 0xc7) == 0x05;
}

/* At the entry, over a first instruction of 5 bytes or more, jmp rel32 to
 * the counted build (and the NOPs before it left alone); else jmp rel32 at
 * entry - 5 and jmp rel8 -7 at the entry. */
static void site_code(const hak_twin_t *t, uint8_t code[SITE_BYTES]) {
  const uint8_t *at = (const uint8_t *)t->uncounted;
  bool direct = opens_5(at);
  const uint8_t *jmp = direct ? at : at - SITE_BEFORE;
  int32_t rel = (int32_t)((const uint8_t *)t->counted - (jmp + 5));
  memcpy(code, at - SITE_BEFORE, SITE_BYTES);   /* what is not written stays */
  uint8_t *j = direct ? code + SITE_BEFORE : code;
  j[0] = 0xe9;
  memcpy(j + 1, &rel, sizeof rel);
  if (!direct) {
    code[5] = 0xeb;
    code[6] = (uint8_t)-(SITE_BEFORE + 2);   /* back to the jmp rel32 */
  }
}
#elif defined(__aarch64__)
#define SITE_BEFORE 0
#define SITE_BYTES  4

static bool site_ready(const hak_twin_t *t) { return true; }

/* b counted (imm26: +-128 MiB, one library's code) */
static void site_code(const hak_twin_t *t, uint8_t code[SITE_BYTES]) {
  int64_t rel = ((intptr_t)t->counted - (intptr_t)t->uncounted) / 4;
  uint32_t insn = 0x14000000u | ((uint32_t)rel & 0x03ffffffu);
  memcpy(code, &insn, sizeof insn);
}
#endif

bool hak_counted_switch(void) {
#if defined(SITE_BYTES)
  static bool switched;
  if (switched) return true;
  for (hak_twin_t *t = __start_hak_twins; t < __stop_hak_twins; t++)
    if (t->uncounted && !site_ready(t)) return false;
  for (hak_twin_t *t = __start_hak_twins; t < __stop_hak_twins; t++) {
    if (!t->uncounted) continue;   /* padding */
    uint8_t code[SITE_BYTES];
    site_code(t, code);
    if (!hak_os_code_write((uint8_t *)t->uncounted - SITE_BEFORE, code, SITE_BYTES)) return false;
  }
  return switched = true;
#else
  return false;
#endif
}
