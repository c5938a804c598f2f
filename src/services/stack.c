/* Call stacks for the heap profile (prof.c), cheap enough to take on every
 * sampled allocation.
 *
 * The DWARF unwinder (libgcc's _Unwind_Backtrace, what glibc's backtrace
 * calls) reads the call-frame information of every frame: microseconds a
 * stack, most of a sample's cost. On x86-64 hakmem learns from it, per
 * return address, how far the canonical frame address (CFA) of the
 * function it returns into lies above that function's stack pointer, which
 * at a given call site is a constant of the function's code; it then walks
 * the frames it knows with one table look-up and one load each: the
 * caller's return address is the word below the CFA, and the CFA is the
 * caller's stack pointer. Every load is checked to lie inside the thread's
 * stack, and the walk is made only on it (not on a signal stack or a
 * coroutine's). The first return address the table does not know (a new call
 * site, a signal frame, a frame whose size changes with alloca) sends the
 * whole stack to the DWARF unwinder again, which teaches the table its
 * frames; a frame where the DWARF walk ended is marked as the stack's end.
 * Each heap keeps a memo of its thread's last walk (prof.c): a return
 * address met again at the same depth takes its distance from there, not
 * from the shared table, and a stack met again whole is told to the
 * caller, which then counts the sample in the record it found last. */
#include <unwind.h>

#include "internal.h"

#define CFA_SLOTS  8192      /* remembered return addresses (64 KiB) */
#define CFA_PROBES 16
#define CFA_END    0         /* the code of a stack's outermost frame */

/* ip << 16 | (CFA - stack pointer) / 8, or ip << 16 | CFA_END; 0: empty. */
static _Atomic uint64_t cfa_table[CFA_SLOTS];
/* hakmem's code, in a shared library or linked into the program: one
 * piece (src/text.ld). */
extern const char __hakmem_text_start[] __attribute__((visibility("hidden")));
extern const char __hakmem_text_end[] __attribute__((visibility("hidden")));
static __thread uintptr_t stack_lo, stack_top;   /* the calling thread's stack, 0: not known yet */

static size_t cfa_slot(uintptr_t ip) { return (size_t)(ip * 0x9e3779b97f4a7c15ull >> 40) & (CFA_SLOTS - 1); }

/* The code remembered for ip; false if none. */
static bool cfa_find(uintptr_t ip, unsigned *code) {
  for (size_t i = 0, j = cfa_slot(ip); i < CFA_PROBES; i++, j = (j + 1) & (CFA_SLOTS - 1)) {
    uint64_t e = atomic_load_explicit(&cfa_table[j], memory_order_relaxed);
    if (!e) return false;
    if (e >> 16 == ip) {
      *code = (unsigned)(e & 0xffff);
      return true;
    }
  }
  return false;
}

static void cfa_learn(uintptr_t ip, unsigned code) {
  if (ip >> 47 || !ip) return;
  uint64_t want = (uint64_t)ip << 16 | code;
  for (size_t i = 0, j = cfa_slot(ip); i < CFA_PROBES; i++, j = (j + 1) & (CFA_SLOTS - 1)) {
    uint64_t e = atomic_load_explicit(&cfa_table[j], memory_order_relaxed);
    if (e >> 16 == ip) {
      if (e != want) atomic_store_explicit(&cfa_table[j], want, memory_order_relaxed);
      return;
    }
    if (!e && atomic_compare_exchange_strong(&cfa_table[j], &e, want)) return;
  }
}

/* ---- the DWARF walk */

/* libgcc's unwinder, loaded by hak_stack_init when profiling starts: a
 * process that does not profile does not map libgcc_s (linking it would
 * cost every process 64 KiB resident and its constructor's CPUID probes,
 * slow in a VM, at start-up). NULL: none could be loaded. */
static struct {
  _Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
  _Unwind_Ptr (*get_ip_info)(struct _Unwind_Context *, int *);
  _Unwind_Word (*get_cfa)(struct _Unwind_Context *);
} unwind;

/* libgcc calls walk_frame for each frame with its return address (into
 * the frame's function F) and the stack pointer of F (the CFA of the frame
 * F called); F's distance is the next frame's stack pointer less this one. */
typedef struct walk_s {
  void **out;
  uint32_t n, max;
  uintptr_t ip, sp;     /* of the frame before, ip 0: not one to learn */
  bool first;
  bool ended;           /* the walk reached the outermost frame */
} walk_t;

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg) {
  walk_t *w = arg;
  int signal = 0;
  uintptr_t ip = unwind.get_ip_info(ctx, &signal);
  uintptr_t sp = unwind.get_cfa(ctx);
  if (w->first) {   /* stack_walk itself */
    w->first = false;
    w->sp = sp;
    return _URC_NO_REASON;
  }
  if (!ip) {   /* past the outermost frame */
    w->ended = true;
    return _URC_NORMAL_STOP;
  }
  uintptr_t d = sp - w->sp;
  if (HAK_STACK_FAST && w->ip && !signal && sp > w->sp && d % 8 == 0 && d / 8 < 0x10000) cfa_learn(w->ip, (unsigned)(d / 8));
  if (w->n == w->max) return _URC_NORMAL_STOP;   /* not the end: the stack goes on */
  w->out[w->n++] = (void *)ip;
  w->ip = signal ? 0 : ip;   /* a signal frame's distance means nothing */
  w->sp = sp;
  return _URC_NO_REASON;
}

/* ---- the walk */

/* The return addresses of the calling thread's stack into memo->ip,
 * innermost first, starting with the one into stack_walk's caller; their
 * number. *same: every frame was the memo's last walk's. */
static HAK_NOINLINE uint32_t stack_walk(hak_stack_memo_t *memo, bool *same) {
  void **out = memo->ip;
#if HAK_STACK_FAST
  uintptr_t cfa = (uintptr_t)__builtin_frame_address(0) + 16;   /* rbp is pushed below the return address */
  uintptr_t ip = *(uintptr_t *)(cfa - 8);
  uint32_t n = 0, known = memo->n;
  bool hit = known != 0;
  unsigned code = CFA_END;
  /* only on the thread's own stack (not a signal stack or a coroutine's),
   * where every address from here to its top is mapped */
  bool own = cfa - stack_lo < stack_top - stack_lo;
  while (own && n < HAK_STACK_WALK) {
    if (n < known && (uintptr_t)out[n] == ip) {
      code = memo->code[n];
    } else if (cfa_find(ip, &code)) {
      hit = false;
      out[n] = (void *)ip;
      memo->code[n] = (uint16_t)code;
    } else {
      break;
    }
    n++;
    if (code == CFA_END) break;
    uintptr_t next = cfa + (uintptr_t)code * 8;
    if (next > stack_top) {
      n = 0;
      break;
    }
    ip = *(uintptr_t *)(next - 8);
    cfa = next;
  }
  if (n && (code == CFA_END || n == HAK_STACK_WALK)) {
    *same = hit && n == known;
    memo->n = n;
    return n;
  }
#endif
  *same = false;
  memo->n = 0;   /* the DWARF walk teaches the table, not the memo */
  walk_t w = {out, 0, HAK_STACK_WALK, 0, 0, true, false};
  if ((unwind.backtrace(walk_frame, &w) == _URC_END_OF_STACK || w.ended) && w.n && HAK_STACK_FAST)
    cfa_learn((uintptr_t)out[w.n - 1], CFA_END);
  return w.n;
}

bool hak_stack_capture(hak_stack_memo_t *memo) {
  if (HAK_STACK_FAST && !stack_top) {   /* once per thread (it may allocate: a profiler's allocation) */
    uintptr_t lo, hi;
    if (hak_os_thread_stack(&lo, &hi)) {
      stack_lo = lo;
      stack_top = hi;
    }
  }
  bool same;
  uint32_t n = stack_walk(memo, &same), first = 0;
  if (same) return true;
  uintptr_t lo = (uintptr_t)__hakmem_text_start, hi = (uintptr_t)__hakmem_text_end;
  while (first < n && (uintptr_t)memo->ip[first] - lo < hi - lo) first++;
  memo->first = first;
  memo->depth = n - first < HAK_STACK_MAX ? n - first : HAK_STACK_MAX;
  return false;
}

bool hak_stack_init(void) {
  void *lib = hak_os_library_open("libgcc_s.so.1");
  if (lib) {
    *(void **)&unwind.backtrace = hak_os_library_symbol(lib, "_Unwind_Backtrace");
    *(void **)&unwind.get_ip_info = hak_os_library_symbol(lib, "_Unwind_GetIPInfo");
    *(void **)&unwind.get_cfa = hak_os_library_symbol(lib, "_Unwind_GetCFA");
  }
  if (!unwind.backtrace || !unwind.get_ip_info || !unwind.get_cfa) return false;
  hak_stack_memo_t memo = {.n = 0};
  hak_stack_capture(&memo);   /* the unwinder's first call may allocate */
  return true;
}
