/* The hak_option_* API: the options table (options.c) read and set by
 * the program, and ACE told of what it set. */
#include <errno.h>

#include "internal.h"

HAK_EXPORT long hak_option_get(hak_option_t option) {
  hak_init();
  return (unsigned)option < hak_option_count ? hak_option_values[option] : 0;
}

HAK_EXPORT int hak_option_set(hak_option_t option, long value) {
  hak_init();
  int err = hak_option_store(option, value);
  if (!err) hak_ace_option_set(option);
  return err;
}

HAK_EXPORT const char *hak_option_get_string(hak_option_t option) {
  hak_init();
  return hak_option_string(option);
}

/* The string must stay valid while hakmem may use it. */
HAK_EXPORT int hak_option_set_string(hak_option_t option, const char *value) {
  hak_init();
  return hak_option_store_string(option, value);
}

HAK_EXPORT int hak_option_set_text(hak_option_t option, const char *text) {
  hak_init();
  if ((unsigned)option >= hak_option_count || !text) return EINVAL;
  if (hak_option_desc(option)->kind == HAK_OPT_STRING) return hak_option_set_string(option, text);
  long value;
  return hak_option_parse(option, text, &value) ? hak_option_set(option, value) : EINVAL;
}

HAK_EXPORT const char *hak_option_name(hak_option_t option) {
  return (unsigned)option < hak_option_count ? hak_option_desc(option)->name : NULL;
}
