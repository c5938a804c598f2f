/* Process initialisation and the thread-exit hook.
 *
 * Initialisation runs from a constructor, or earlier from the first malloc if
 * another library's constructor allocates first. It never allocates: no stdio,
 * no getenv, no dlsym. The statistics report runs from a destructor. */
#include "internal.h"

uint64_t hak_secret;
uint64_t hak_keys[3];

static _Atomic int init_state;   /* 0: not started, 1: running, 2: done */

static HAK_COLD void init_once(void) {
  HAK_TRACK_ENTER();
  hak_os_init();
  hak_options_init();
  hak_ace_restart();
  hak_prof_init();
  hak_secret = hak_os_random() | 1u;
  if (HAK_SECURE) {
    hak_keys[0] = hak_os_random();
    hak_keys[1] = hak_os_random();
    hak_keys[2] = hak_link_encode(NULL, NULL) - hak_keys[1];
  }
  hak_size_class_init();
  hak_arena_init();
  if (!hak_os_thread_exit_init(hak_thread_done)) {
    hak_out_t o;
    hak_out_init(&o, NULL, NULL);
    hak_out_str(&o, "hakmem: cannot create the thread-exit key\n");
    hak_os_abort();
  }
  HAK_TRACK_LEAVE();
}

void hak_init(void) {
  if (HAK_LIKELY(atomic_load_explicit(&init_state, memory_order_acquire) == 2)) return;
  int expected = 0;
  if (atomic_compare_exchange_strong(&init_state, &expected, 1)) {
    init_once();
    atomic_store_explicit(&init_state, 2, memory_order_release);
    hak_stats_init();
    hak_track_checker_hint();
    if (hak_opt(hak_option_route_banner)) hak_banner_print();
    return;
  }
  while (atomic_load_explicit(&init_state, memory_order_acquire) != 2) {
  }
}

__attribute__((constructor)) static void hak_init_constructor(void) {
  hak_init();
  hak_prof_ready();
}

__attribute__((destructor)) static void hak_exit_destructor(void) {
  if (atomic_load(&init_state) != 2) return;
  HAK_TRACK_ENTER();
  if (hak_opt(hak_option_stats)) hak_stats_at_exit();
  hak_prof_at_exit();
  if (HAK_VALGRIND) hak_purger_stop(true);   /* memcheck's leak check finds no thread of hakmem's */
  HAK_TRACK_LEAVE();
}
