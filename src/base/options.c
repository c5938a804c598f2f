/* The options table: every tunable of hakmem, in one place.
 *
 * Each option is read once, at initialisation, without allocating, from
 * three places, each overriding the one before: the string a program linked
 * with hakmem may define (const char *hakmem_options = "profile=lean,...",
 * as jemalloc's malloc_conf), the HAKMEM_OPTIONS variable (the same form),
 * and the HAKMEM_<NAME> variables; nothing else in the library reads the
 * environment. The profile chooses the column of defaults; any option given
 * explicitly overrides it. docs/options.md documents the table (a test
 * checks they agree). */
#include <errno.h>
#include <limits.h>

#include "internal.h"

#define K 1024L
#define M (1024L * 1024L)
#define G (1024L * 1024L * 1024L)
#define MINUTE_MS 60000L

/*            name, kind, {fast, balanced, lean, auto}, min, max, choices, doc */
static const hak_option_desc_t table[hak_option_count] = {
  [hak_option_profile] = {"PROFILE", HAK_OPT_CHOICE, {3, 3, 3, 3}, 0, 3, "fast|balanced|lean|auto",
                          "coherent defaults: fast favours speed, lean memory, balanced both; auto (the default) is balanced with a BigCache that adapts to the program"},
  [hak_option_stats] = {"STATS", HAK_OPT_CHOICE, {0, 0, 0, 0}, 0, 2, "0|1|json",
                        "print statistics at exit: 1 as text, json as one JSON object"},
  [hak_option_stats_file] = {"STATS_FILE", HAK_OPT_STRING, {0, 0, 0, 0}, 0, 0, NULL,
                             "file each process appends its statistics to instead of stderr, taken in the directory it started in; %p in it becomes the process id"},
  [hak_option_route_banner] = {"ROUTE_BANNER", HAK_OPT_BOOL, {0, 0, 0, 0}, 0, 2, "0|1|once",
                               "describe the configuration on stderr at start-up; once: in this process, not in the programs it starts"},
  [hak_option_cache_bytes] = {"CACHE_BYTES", HAK_OPT_SIZE, {128 * K, 64 * K, 16 * K, 64 * K}, 1 * K, 64 * M, NULL,
                              "unified cache budget per size class and thread, in bytes: a cache that the program's batches overflow grows to it (4096 blocks at most, and at least to 32 blocks within 512 KiB)"},
  [hak_option_cache_max] = {"CACHE_MAX", HAK_OPT_INT, {256, 128, 32, 128}, 2, 4096, NULL,
                            "most blocks one size class's unified cache starts with"},
  [hak_option_cache_min] = {"CACHE_MIN", HAK_OPT_INT, {16, 4, 2, 4}, 1, 64, NULL,
                            "blocks every size class's unified cache may hold, however large they are, as far as 4 times CACHE_BYTES holds them (2 at least)"},
  [hak_option_purge_delay_ms] = {"PURGE_DELAY_MS", HAK_OPT_INT, {1000, 100, 20, 100}, 0, 60 * MINUTE_MS, NULL,
                                 "milliseconds before the pages of empty slabs go back to the OS"},
  [hak_option_keep_empty_superslabs] = {"KEEP_EMPTY_SUPERSLABS", HAK_OPT_INT, {4, 2, 0, 2}, 0, 1024, NULL,
                                        "wholly empty SuperSlabs a thread keeps (their pages go after the purge delay); the rest go to the shared pool, there for the same delay with their pages while the background purger runs"},
  [hak_option_shared_pool_slots] = {"SHARED_POOL_SLOTS", HAK_OPT_INT, {64, 64, 8, 64}, 0, HAK_SHARED_POOL_SLOTS, NULL,
                                    "empty SuperSlabs kept for any thread to take, their pages dropped after a delay (more are unmapped)"},
  [hak_option_bigcache_budget] = {"BIGCACHE_BUDGET", HAK_OPT_SIZE, {1 * G, 128 * M, 16 * M, 16 * M}, 0, 64 * G, NULL,
                                  "bytes of freed large blocks the BigCache keeps mapped, and of span blocks (128-512 KiB) a thread frees in a row before the rest go back to the OS at once"},
  [hak_option_bigcache_max_block] = {"BIGCACHE_MAX_BLOCK", HAK_OPT_SIZE, {256 * M, 64 * M, 4 * M, 64 * M}, 0, 4 * G, NULL,
                                     "largest freed block the BigCache keeps"},
  [hak_option_bigcache_delay_ms] = {"BIGCACHE_DELAY_MS", HAK_OPT_INT, {5000, 1000, 100, 100}, 0, 60 * MINUTE_MS, NULL,
                                    "milliseconds a freed large block stays in the BigCache (longer while blocks are mapped anew soon after entries expired)"},
  [hak_option_background_purge] = {"BACKGROUND_PURGE", HAK_OPT_BOOL, {1, 1, 1, 1}, 0, 1, NULL,
                                   "a background thread returns free memory to the OS when its delay passes, "
                                   "also of threads that sleep (started on first need)"},
  [hak_option_ace] = {"ACE", HAK_OPT_BOOL, {1, 1, 1, 1}, 0, 1, NULL,
                      "the adaptive controller lengthens delays and budgets while freed memory is soon needed again "
                      "(docs/ace.md)"},
  [hak_option_prof_sample] = {"PROF_SAMPLE", HAK_OPT_SIZE, {0, 0, 0, 0}, 0, 1 * G, NULL,
                              "heap profiling: mean bytes allocated between sampled allocations, 0: off; "
                              "read at start-up (docs/profiling.md)"},
  [hak_option_prof_file] = {"PROF_FILE", HAK_OPT_STRING, {0, 0, 0, 0}, 0, 0, NULL,
                            "where heap profiles go (at exit, on PROF_SIGNAL, by hak_prof_dump(NULL)); "
                            "%p becomes the process id, %n the profile's number; default hakmem.%p.%n.heap"},
  [hak_option_prof_signal] = {"PROF_SIGNAL", HAK_OPT_INT, {0, 0, 0, 0}, 0, 64, NULL,
                              "a signal (e.g. 12, SIGUSR2) that writes a heap profile while profiling is on, 0: none"},
};

long hak_option_values[hak_option_count];
static bool explicitly_set[hak_option_count];
static const char *strings[hak_option_count];

const hak_option_desc_t *hak_option_desc(hak_option_t option) { return &table[option]; }

static long profile_default(hak_option_t option) {
  return table[option].defaults[hak_option_values[hak_option_profile]];
}

/* True when the option has the value its profile gives it (the profile
 * itself: when it is the default one). */
bool hak_option_is_default(hak_option_t option) {
  if (table[option].kind == HAK_OPT_STRING) return strings[option] == NULL;
  if (option == hak_option_profile) return hak_option_values[option] == HAK_PROFILE_DEFAULT;
  return hak_option_values[option] == profile_default(option);
}

static void apply_profile(void) {
  for (unsigned i = 0; i < hak_option_count; i++)
    if (i != hak_option_profile && !explicitly_set[i] && table[i].kind != HAK_OPT_STRING)
      hak_option_values[i] = profile_default((hak_option_t)i);
}

/* The n-th choice of "a|b|c" into o. */
static void put_choice(hak_out_t *o, const char *choices, long n) {
  for (; n > 0 && *choices; choices++)
    if (*choices == '|') n--;
  hak_out_chars(o, choices, strcspn(choices, "|"));
}

void hak_option_format(hak_out_t *o, hak_option_t option, long value) {
  const hak_option_desc_t *d = &table[option];
  switch (d->kind) {
    case HAK_OPT_SIZE: hak_out_size(o, (uint64_t)value); break;
    case HAK_OPT_CHOICE: put_choice(o, d->choices, value); break;
    case HAK_OPT_BOOL: if (d->choices) put_choice(o, d->choices, value); else hak_out_i64(o, value); break;
    case HAK_OPT_STRING: hak_out_str(o, strings[option] ? strings[option] : ""); break;
    default: hak_out_i64(o, value); break;
  }
}

/* ---- parsing */

static bool same_word(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

static bool parse_choice(const char *choices, const char *v, long *out) {
  long n = 0;
  size_t len = strlen(v);
  for (const char *start = choices;; n++) {
    const char *end = start;
    while (*end && *end != '|') end++;
    if ((size_t)(end - start) == len && same_word(start, v, len)) {
      *out = n;
      return true;
    }
    if (!*end) return false;
    start = end + 1;
  }
}

static bool parse_number(const char *v, bool size_suffix, long *out) {
  if (!*v) return false;
  unsigned long long n = 0;
  const char *c = v;
  for (; *c >= '0' && *c <= '9'; c++) {
    if (n > (unsigned long long)LONG_MAX / 10) return false;
    n = n * 10 + (unsigned long long)(*c - '0');
  }
  if (c == v) return false;
  if (size_suffix && *c) {
    unsigned shift = 0;
    switch (*c) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      default: return false;
    }
    c++;
    if (*c == 'b' || *c == 'B') c++;
    if (n > (unsigned long long)LONG_MAX >> shift) return false;
    n <<= shift;
  }
  if (*c || n > (unsigned long long)LONG_MAX) return false;
  *out = (long)n;
  return true;
}

static const char OUT_OF_RANGE[] = "is out of range ";

/* Parse v as a value of option into *out; NULL, or why it is not valid. */
static const char *parse_value(hak_option_t option, const char *v, long *out) {
  const hak_option_desc_t *d = &table[option];
  bool ok;
  switch (d->kind) {
    case HAK_OPT_CHOICE: ok = parse_choice(d->choices, v, out); break;
    case HAK_OPT_BOOL: ok = parse_choice("0|1", v, out) || parse_choice("false|true", v, out) ||
                            parse_choice("off|on", v, out) || parse_choice("no|yes", v, out) ||
                            (d->choices && parse_choice(d->choices, v, out)); break;
    default: ok = parse_number(v, d->kind == HAK_OPT_SIZE, out); break;
  }
  if (!ok) return d->choices ? "is not one of " : d->kind == HAK_OPT_BOOL ? "is not 0 or 1" : "is not a number";
  return *out < d->min || *out > d->max ? OUT_OF_RANGE : NULL;
}

/* Where a value comes from, for its warning: "HAKMEM_" for a variable of
 * its own, else the name of the list it is in. */
static const char *const VARIABLE = "HAKMEM_";

/* One warning line: the value v of option (given in from) is not valid,
 * and why. */
static void warn_value(const char *from, hak_option_t option, const char *v, const char *why) {
  const hak_option_desc_t *d = &table[option];
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem: warning: ");
  hak_out_str(&o, from);
  if (from != VARIABLE) hak_out_str(&o, ": ");
  hak_out_str(&o, d->name);
  hak_out_str(&o, "=");
  hak_out_str(&o, v);
  hak_out_str(&o, " ");
  hak_out_str(&o, why);
  if (why == OUT_OF_RANGE) {
    hak_option_format(&o, option, d->min);
    hak_out_str(&o, "..");
    hak_option_format(&o, option, d->max);
  } else if (d->choices) {
    hak_out_str(&o, d->choices);
  }
  hak_out_str(&o, "; using ");
  hak_option_format(&o, option, hak_option_values[option]);
  hak_out_str(&o, "\n");
}

static void warn_unknown(const char *from, const char *entry) {
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem: warning: unknown option ");
  if (from == VARIABLE) hak_out_str(&o, VARIABLE);
  hak_out_chars(&o, entry, strcspn(entry, "="));
  if (from != VARIABLE) {
    hak_out_str(&o, " in ");
    hak_out_str(&o, from);
  }
  hak_out_str(&o, " ignored\n");
}

static const char PREFIX[] = "HAKMEM_";
static const char LIST[] = "HAKMEM_OPTIONS";

/* The option "NAME=value" names (in any case, with any_case), or -1;
 * *value its value. */
static int option_of_entry(const char *entry, bool any_case, const char **value) {
  for (int i = 0; i < hak_option_count; i++) {
    size_t n = strlen(table[i].name);
    if ((any_case ? same_word(entry, table[i].name, n) : strncmp(entry, table[i].name, n) == 0) && entry[n] == '=') {
      *value = entry + n + 1;
      return i;
    }
  }
  return -1;
}

/* The value of environment entry e if it is HAKMEM_OPTIONS, else NULL. */
static const char *list_value(const char *e) {
  return strncmp(e, LIST, sizeof LIST - 1) == 0 && e[sizeof LIST - 1] == '=' ? e + sizeof LIST : NULL;
}

static void set_from(const char *from, hak_option_t option, const char *v) {
  long value;
  if (table[option].kind == HAK_OPT_STRING) {
    strings[option] = *v ? v : NULL;
    explicitly_set[option] = true;
    return;
  }
  const char *why = parse_value(option, v, &value);
  if (why) {
    warn_value(from, option, v, why);
    return;
  }
  hak_option_values[option] = value;
  explicitly_set[option] = true;
}

/* The lists "name=value,name=value" of the program (hakmem_options) and of
 * HAKMEM_OPTIONS, copied with their commas made NULs: string options point
 * into them. */
HAK_EXPORT const char *hakmem_options __attribute__((weak)) = NULL;
static char program_list[1024], variable_list[1024];
static size_t program_len, variable_len;

static size_t split(char *dst, size_t n, const char *src) {
  size_t len = src ? strlen(src) : 0;
  if (len >= n) len = n - 1;
  for (size_t i = 0; i < len; i++) dst[i] = src[i] == ',' ? 0 : src[i];
  dst[len] = 0;
  return len;
}

/* One entry "name=value" of from: the profile only (profile), or every
 * other option, and then an unknown name is reported. */
static void set_entry(const char *from, const char *entry, bool any_case, bool profile) {
  const char *value;
  int option = option_of_entry(entry, any_case, &value);
  if (option < 0) {
    if (!profile) warn_unknown(from, entry);
  } else if ((option == hak_option_profile) == profile) {
    set_from(from, (hak_option_t)option, value);
  }
}

/* Set from every entry of the three places, in order: the profile only
 * (profile), or every other option. */
static void set_all(bool profile) {
  const struct {
    const char *from;
    char *list;
    size_t len;
  } lists[] = {{"hakmem_options", program_list, program_len}, {LIST, variable_list, variable_len}};
  for (unsigned l = 0; l < 2; l++)
    for (char *t = lists[l].list; t < lists[l].list + lists[l].len; t += strlen(t) + 1)
      if (*t) set_entry(lists[l].from, t, true, profile);
  for (char **e = hak_os_environ(); e && *e; e++)
    if (strncmp(*e, PREFIX, sizeof PREFIX - 1) == 0 && !list_value(*e))
      set_entry(VARIABLE, *e + sizeof PREFIX - 1, false, profile);
}

void hak_options_init(void) {
  hak_option_values[hak_option_profile] = HAK_PROFILE_DEFAULT;
  program_len = split(program_list, sizeof program_list, hakmem_options);
  variable_len = 0;
  for (char **e = hak_os_environ(); e && *e; e++) {
    const char *list = list_value(*e);
    if (list) variable_len = split(variable_list, sizeof variable_list, list);
  }
  set_all(true);   /* the profile first: it sets the defaults */
  apply_profile();
  set_all(false);
}

/* An option read from the environment stops there for the programs this
 * process starts: its entry's value becomes "0" in place (shortened: no
 * allocation), which they inherit. ROUTE_BANNER=once, after the banner. */
void hak_option_env_spent(hak_option_t option) {
  const char *value;
  for (char **e = hak_os_environ(); e && *e; e++) {
    if (strncmp(*e, PREFIX, sizeof PREFIX - 1) != 0 || option_of_entry(*e + sizeof PREFIX - 1, false, &value) != (int)option ||
        !*value)
      continue;
    char *v = (char *)value;
    v[0] = '0';
    v[1] = 0;
  }
}

/* ---- for the public API (options_api.c) */

int hak_option_store(hak_option_t option, long value) {
  if ((unsigned)option >= hak_option_count || table[option].kind == HAK_OPT_STRING ||
      value < table[option].min || value > table[option].max)
    return EINVAL;
  hak_option_values[option] = value;
  explicitly_set[option] = true;
  if (option == hak_option_profile) apply_profile();
  return 0;
}

const char *hak_option_string(hak_option_t option) {
  return (unsigned)option < hak_option_count ? strings[option] : NULL;
}

int hak_option_store_string(hak_option_t option, const char *value) {
  if ((unsigned)option >= hak_option_count || table[option].kind != HAK_OPT_STRING) return EINVAL;
  strings[option] = value && *value ? value : NULL;
  explicitly_set[option] = value != NULL;
  return 0;
}

bool hak_option_parse(hak_option_t option, const char *text, long *value) { return !parse_value(option, text, value); }

/* The listing of every option (hakmem --options, hakmem-options(7)). */
HAK_EXPORT void hak_options_print(hak_write_fn *write, void *arg) {
  hak_out_t o;
  hak_out_init(&o, write, arg);
  for (unsigned i = 0; i < hak_option_count; i++) {
    const hak_option_desc_t *d = &table[i];
    hak_out_str(&o, PREFIX);
    hak_out_str(&o, d->name);
    switch (d->kind) {
      case HAK_OPT_CHOICE: hak_out_str(&o, "="); hak_out_str(&o, d->choices); break;
      case HAK_OPT_BOOL: hak_out_str(&o, "=0|1"); break;
      case HAK_OPT_STRING: hak_out_str(&o, "=TEXT"); break;
      default:
        hak_out_str(&o, d->kind == HAK_OPT_SIZE ? "=BYTES, " : "=N, ");
        hak_option_format(&o, (hak_option_t)i, d->min);
        hak_out_str(&o, "..");
        hak_option_format(&o, (hak_option_t)i, d->max);
        break;
    }
    hak_out_str(&o, "\n    default: ");
    bool same = true;
    for (unsigned p = 1; p < HAK_PROFILES; p++) same &= d->defaults[p] == d->defaults[0];
    if (d->kind == HAK_OPT_STRING) {
      hak_out_str(&o, "unset");
    } else if (i == hak_option_profile || same) {
      hak_option_format(&o, (hak_option_t)i, i == hak_option_profile ? HAK_PROFILE_DEFAULT : d->defaults[0]);
    } else {
      for (unsigned p = 0; p < HAK_PROFILES; p++) {
        hak_out_str(&o, p ? ", " : "");
        put_choice(&o, table[hak_option_profile].choices, p);
        hak_out_str(&o, " ");
        hak_option_format(&o, (hak_option_t)i, d->defaults[p]);
      }
    }
    hak_out_str(&o, "\n    ");
    hak_out_str(&o, d->doc);
    hak_out_str(&o, "\n");
  }
  hak_out_flush(&o);
}
