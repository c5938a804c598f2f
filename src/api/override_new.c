/* C++ operator new and delete (plain, array, sized, aligned, nothrow), defined
 * in C under their mangled names so that C++ programs reach the same fast
 * paths. A failing throwing new calls the program's new_handler and retries,
 * then throws std::bad_alloc through the C++ runtime already loaded in any
 * C++ program (weak references: C programs need no libstdc++). This file is
 * compiled with -fexceptions so the exception can unwind through it. */
#if HAK_OVERRIDE
#include "fast_path.h"

typedef void (*hak_new_handler)(void);
extern hak_new_handler _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void *__cxa_allocate_exception(size_t) __attribute__((weak));
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak, noreturn));
extern char _ZTISt9bad_alloc[] __attribute__((weak));     /* typeinfo for std::bad_alloc */
extern void *_ZTVSt9bad_alloc[] __attribute__((weak));    /* its vtable */
extern void _ZNSt9bad_allocD1Ev(void *) __attribute__((weak));

static _Noreturn HAK_COLD void throw_bad_alloc(void) {
  if (__cxa_allocate_exception && __cxa_throw && _ZTISt9bad_alloc && _ZTVSt9bad_alloc) {
    void **e = __cxa_allocate_exception(sizeof(void *));
    *e = &_ZTVSt9bad_alloc[2];
    __cxa_throw(e, _ZTISt9bad_alloc, _ZNSt9bad_allocD1Ev);
  }
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem: out of memory in operator new\n");
  hak_os_abort();
}

/* An allocation for new found no memory: the program's new_handler is
 * called and the allocation tried again until one succeeds or no handler
 * is left (then NULL for nothrow, else std::bad_alloc). Called inside the
 * entry point (fast_path.h: what a memory checker is told), so the
 * handler, the program's code, and the throw run outside it. */
static HAK_COLD void *new_retry(size_t size, size_t align, bool nothrow) {
  for (;;) {
    hak_new_handler handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!handler && nothrow) return NULL;
    HAK_TRACK_LEAVE();
    if (!handler) throw_bad_alloc();
    handler();
    HAK_TRACK_ENTER();
    void *p = align ? hak_alloc_aligned(align, size) : hak_malloc_fast_of(hak_prof_on, size);
    if (p) return p;
  }
}

/* new's misses: malloc's slow path, then the retry. Out of line, so that
 * new's fast path keeps no stack frame and ends every miss in a tail jump
 * (fast_path.h). */
#define NEW_SLOW(name, nothrow)                                              \
  static HAK_NOINLINE void *name(size_t size) {                             \
    void *p = hak_malloc_slow(size);                                         \
    return HAK_LIKELY(p != NULL) ? p : new_retry(size, 0, nothrow);          \
  }                                                                          \
  static HAK_NOINLINE void *name##_aligned(size_t align, size_t size) {     \
    void *p = hak_alloc_aligned(align, size);                                \
    return HAK_LIKELY(p != NULL) ? p : new_retry(size, align, nothrow);      \
  }
NEW_SLOW(new_slow, false)
NEW_SLOW(new_slow_nothrow, true)

static inline void *new_plain(bool counted, size_t size) { return hak_malloc_entry_with(counted, size, new_slow); }
static inline void *new_nothrow(bool counted, size_t size) { return hak_malloc_entry_with(counted, size, new_slow_nothrow); }
static inline void *new_aligned(size_t size, size_t align, bool nothrow) {
  return hak_aligned_entry_with(align, size, nothrow ? new_slow_nothrow_aligned : new_slow_aligned);
}

/* operator new / new[] */
HAK_TWO_BUILDS(HAK_EXPORT, void *, _Znwm, (size_t n), new_plain, (n));
HAK_TWO_BUILDS(HAK_EXPORT, void *, _Znam, (size_t n), new_plain, (n));
HAK_TWO_BUILDS(HAK_EXPORT, void *, _ZnwmRKSt9nothrow_t, (size_t n, const void *t), new_nothrow, (n));
HAK_TWO_BUILDS(HAK_EXPORT, void *, _ZnamRKSt9nothrow_t, (size_t n, const void *t), new_nothrow, (n));
HAK_EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
HAK_EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
HAK_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t) { return new_aligned(n, a, true); }
HAK_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t) { return new_aligned(n, a, true); }

/* operator delete / delete[] */
HAK_EXPORT void _ZdlPv(void *p) { hak_free_entry(p); }
HAK_EXPORT void _ZdaPv(void *p) { hak_free_entry(p); }
HAK_EXPORT void _ZdlPvm(void *p, size_t n) { hak_free_entry(p); }
HAK_EXPORT void _ZdaPvm(void *p, size_t n) { hak_free_entry(p); }
HAK_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *t) { hak_free_entry(p); }
HAK_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *t) { hak_free_entry(p); }
HAK_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { hak_free_entry(p); }
HAK_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { hak_free_entry(p); }
HAK_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { hak_free_entry(p); }
HAK_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { hak_free_entry(p); }
HAK_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t) { hak_free_entry(p); }
HAK_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t) { hak_free_entry(p); }
#endif
