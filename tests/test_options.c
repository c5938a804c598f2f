/* Options: every option read from the environment (valid, invalid, out of
 * range) with the exact warning, profiles setting the defaults they claim,
 * the programmatic get/set, and docs/options.md agreeing with the table.
 * Environment cases run in a re-executed child, since options are read once
 * per process. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "internal.h"

/* Child mode: print every option's value, one "NAME=value" per line. */
static int child_main(void) {
  for (int i = 0; i < hak_option_count; i++) {
    const char *s = hak_option_get_string((hak_option_t)i);
    if (hak_option_desc((hak_option_t)i)->kind == HAK_OPT_STRING)
      printf("%s=%s\n", hak_option_name((hak_option_t)i), s ? s : "");
    else
      printf("%s=%ld\n", hak_option_name((hak_option_t)i), hak_option_get((hak_option_t)i));
  }
  return 0;
}

static char out[8192], err[8192];

static void run_child(const char *const *env) {
  int status = run_self(env, out, sizeof out, err, sizeof err);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exited with status %d", status);
}

static long child_value(const char *name) {
  size_t n = strlen(name);
  for (char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (strncmp(p, name, n) == 0 && p[n] == '=') return strtol(p + n + 1, NULL, 10);
  return -1;
}

static void test_defaults_and_profiles(void) {
  const char *none[] = {NULL};
  run_child(none);
  CHECK(err[0] == 0, "stderr not empty without options: %s", err);
  static const char *const names[] = {"fast", "balanced", "lean", "auto"};
  for (int prof = 0; prof < 4; prof++) {
    char env[64];
    snprintf(env, sizeof env, "HAKMEM_PROFILE=%s", names[prof]);
    const char *e[] = {env, NULL};
    run_child(e);
    CHECK(err[0] == 0, "profile %s warned: %s", names[prof], err);
    CHECK(child_value("PROFILE") == prof, "profile %s read as %ld", names[prof], child_value("PROFILE"));
    for (int i = 0; i < hak_option_count; i++) {
      const hak_option_desc_t *d = hak_option_desc((hak_option_t)i);
      if (i == hak_option_profile || d->kind == HAK_OPT_STRING) continue;
      CHECK(child_value(d->name) == d->defaults[prof], "%s under profile %s is %ld, table says %ld", d->name,
            names[prof], child_value(d->name), d->defaults[prof]);
    }
  }
  /* an explicit option beats the profile, whatever the order */
  const char *e[] = {"HAKMEM_CACHE_MAX=77", "HAKMEM_PROFILE=lean", NULL};
  run_child(e);
  CHECK(child_value("CACHE_MAX") == 77, "explicit CACHE_MAX lost to the profile: %ld", child_value("CACHE_MAX"));
  CHECK(child_value("PURGE_DELAY_MS") == hak_option_desc(hak_option_purge_delay_ms)->defaults[HAK_PROFILE_LEAN],
        "lean default not applied next to an explicit option");
}

static void test_valid_values(void) {
  const char *e[] = {"HAKMEM_PURGE_DELAY_MS=250", "HAKMEM_CACHE_BYTES=32K", "HAKMEM_BIGCACHE_BUDGET=1g",
                     "HAKMEM_ROUTE_BANNER=0", "HAKMEM_STATS=json", "HAKMEM_STATS_FILE=/dev/null",
                     "HAKMEM_KEEP_EMPTY_SUPERSLABS=0", "HAKMEM_BIGCACHE_MAX_BLOCK=2MB", NULL};
  run_child(e);
  CHECK(err[0] == 0, "valid options warned: %s", err);
  CHECK(child_value("PURGE_DELAY_MS") == 250, "PURGE_DELAY_MS %ld", child_value("PURGE_DELAY_MS"));
  CHECK(child_value("CACHE_BYTES") == 32 * 1024, "CACHE_BYTES=32K read as %ld", child_value("CACHE_BYTES"));
  CHECK(child_value("BIGCACHE_BUDGET") == 1L << 30, "BIGCACHE_BUDGET=1g read as %ld", child_value("BIGCACHE_BUDGET"));
  CHECK(child_value("BIGCACHE_MAX_BLOCK") == 2L << 20, "2MB read as %ld", child_value("BIGCACHE_MAX_BLOCK"));
  CHECK(child_value("STATS") == 2, "STATS=json read as %ld", child_value("STATS"));
  CHECK(child_value("KEEP_EMPTY_SUPERSLABS") == 0, "KEEP_EMPTY_SUPERSLABS=0");
  CHECK(strstr(out, "STATS_FILE=/dev/null\n") != NULL, "STATS_FILE not read: %s", out);
  for (const char *const *b = (const char *const[]){"1", "true", "on", "YES", NULL}; *b; b++) {
    char env[64];
    snprintf(env, sizeof env, "HAKMEM_ROUTE_BANNER=%s", *b);
    const char *e2[] = {env, NULL};
    run_child(e2);
    CHECK(child_value("ROUTE_BANNER") == 1, "ROUTE_BANNER=%s read as %ld", *b, child_value("ROUTE_BANNER"));
  }
}

struct bad_case {
  const char *env, *warning, *option;
  long expect;
};

static void test_invalid_values(void) {
  static const struct bad_case cases[] = {
    {"HAKMEM_PROFILE=turbo", "hakmem: warning: HAKMEM_PROFILE=turbo is not one of fast|balanced|lean|auto; using auto\n",
     "PROFILE", HAK_PROFILE_DEFAULT},
    {"HAKMEM_CACHE_MAX=abc", "hakmem: warning: HAKMEM_CACHE_MAX=abc is not a number; using 128\n", "CACHE_MAX", 128},
    {"HAKMEM_CACHE_MAX=100000", "hakmem: warning: HAKMEM_CACHE_MAX=100000 is out of range 2..4096; using 128\n",
     "CACHE_MAX", 128},
    {"HAKMEM_CACHE_BYTES=12Q", "hakmem: warning: HAKMEM_CACHE_BYTES=12Q is not a number; using 64K\n", "CACHE_BYTES",
     64 * 1024},
    {"HAKMEM_CACHE_BYTES=10", "hakmem: warning: HAKMEM_CACHE_BYTES=10 is out of range 1K..64M; using 64K\n",
     "CACHE_BYTES", 64 * 1024},
    {"HAKMEM_PURGE_DELAY_MS=-5", "hakmem: warning: HAKMEM_PURGE_DELAY_MS=-5 is not a number; using 100\n",
     "PURGE_DELAY_MS", 100},
    {"HAKMEM_PURGE_DELAY_MS=", "hakmem: warning: HAKMEM_PURGE_DELAY_MS= is not a number; using 100\n",
     "PURGE_DELAY_MS", 100},
    {"HAKMEM_PURGE_DELAY_MS=99999999999999999999", "hakmem: warning: HAKMEM_PURGE_DELAY_MS=99999999999999999999 is not a number; using 100\n",
     "PURGE_DELAY_MS", 100},
    {"HAKMEM_STATS=2", "hakmem: warning: HAKMEM_STATS=2 is not one of 0|1|json; using 0\n", "STATS", 0},
    {"HAKMEM_ROUTE_BANNER=maybe", "hakmem: warning: HAKMEM_ROUTE_BANNER=maybe is not one of 0|1|once; using 0\n",
     "ROUTE_BANNER", 0},
    {"HAKMEM_SHARED_POOL_SLOTS=65", "hakmem: warning: HAKMEM_SHARED_POOL_SLOTS=65 is out of range 0..64; using 64\n",
     "SHARED_POOL_SLOTS", 64},
    {"HAKMEM_PURGE_DELAYMS=5", "hakmem: warning: unknown option HAKMEM_PURGE_DELAYMS ignored\n", "PURGE_DELAY_MS", 100},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *e[] = {cases[i].env, NULL};
    run_child(e);
    CHECK(strcmp(err, cases[i].warning) == 0, "%s: warning was \"%s\"", cases[i].env, err);
    CHECK(child_value(cases[i].option) == cases[i].expect, "%s: value %ld", cases[i].env, child_value(cases[i].option));
  }
}

static void test_api(void) {
  long old = hak_option_get(hak_option_purge_delay_ms);
  CHECK(hak_option_set(hak_option_purge_delay_ms, 7) == 0 && hak_option_get(hak_option_purge_delay_ms) == 7, "set 7");
  CHECK(hak_option_set(hak_option_purge_delay_ms, -1) == EINVAL, "negative delay accepted");
  CHECK(hak_option_set(hak_option_cache_max, 1) == EINVAL, "cache_max 1 accepted");
  CHECK(hak_option_set(hak_option_count, 1) == EINVAL, "option out of the enum accepted");
  CHECK(hak_option_set(hak_option_stats_file, 1) == EINVAL, "numeric set of a string option accepted");
  CHECK(hak_option_set_string(hak_option_cache_max, "x") == EINVAL, "string set of a numeric option accepted");
  CHECK(hak_option_set(hak_option_profile, HAK_PROFILE_LEAN) == 0, "set profile");
  CHECK(hak_option_get(hak_option_purge_delay_ms) == 7, "explicit option reset by the profile");
  CHECK(hak_option_get(hak_option_cache_max) == hak_option_desc(hak_option_cache_max)->defaults[HAK_PROFILE_LEAN],
        "profile did not set cache_max");
  hak_option_set(hak_option_profile, HAK_PROFILE_DEFAULT);
  hak_option_set(hak_option_purge_delay_ms, old);
  CHECK(strcmp(hak_option_name(hak_option_bigcache_delay_ms), "BIGCACHE_DELAY_MS") == 0, "option name");
  CHECK(hak_option_name(hak_option_count) == NULL, "name of a non-option");
}

/* hak_option_set_text takes what the environment would, refuses the rest
 * without a warning line. */
static void test_set_text(void) {
  long old = hak_option_get(hak_option_bigcache_budget);
  CHECK(hak_option_set_text(hak_option_bigcache_budget, "96M") == 0 && hak_option_get(hak_option_bigcache_budget) == 96L << 20,
        "96M set as %ld", hak_option_get(hak_option_bigcache_budget));
  CHECK(hak_option_set_text(hak_option_bigcache_budget, "96Q") == EINVAL, "96Q accepted");
  CHECK(hak_option_set_text(hak_option_bigcache_budget, "100G") == EINVAL, "100G (over the maximum) accepted");
  CHECK(hak_option_get(hak_option_bigcache_budget) == 96L << 20, "a refused text changed the value");
  CHECK(hak_option_set_text(hak_option_ace, "off") == 0 && hak_option_get(hak_option_ace) == 0, "ACE=off");
  CHECK(hak_option_set_text(hak_option_ace, "maybe") == EINVAL, "ACE=maybe accepted");
  CHECK(hak_option_set_text(hak_option_ace, "yes") == 0 && hak_option_get(hak_option_ace) == 1, "ACE=yes");
  CHECK(hak_option_set_text(hak_option_stats, "JSON") == 0 && hak_option_get(hak_option_stats) == 2, "STATS=JSON");
  CHECK(hak_option_set_text(hak_option_stats, "0") == 0, "STATS=0");
  CHECK(hak_option_set_text(hak_option_count, "1") == EINVAL, "an option out of the enum accepted");
  CHECK(hak_option_set_text(hak_option_cache_max, NULL) == EINVAL, "NULL text accepted");
  CHECK(hak_option_set_text(hak_option_stats_file, "/tmp/x") == 0 &&
        strcmp(hak_option_get_string(hak_option_stats_file), "/tmp/x") == 0, "STATS_FILE by text");
  hak_option_set_string(hak_option_stats_file, NULL);
  hak_option_set(hak_option_bigcache_budget, old);
}

static void append(const char *text, void *arg) {
  size_t n = strlen(arg);
  snprintf((char *)arg + n, 8192 - n, "%s", text);
}

/* hak_options_print: every option, its range and its defaults. */
static void test_print(void) {
  static char list[8192];
  list[0] = 0;
  hak_options_print(append, list);
  for (unsigned i = 0; i < hak_option_count; i++) {
    char head[64];
    snprintf(head, sizeof head, "%sHAKMEM_%s=", i ? "\n" : "", hak_option_name((hak_option_t)i));
    CHECK(i ? strstr(list, head) != NULL : strncmp(list, head, strlen(head)) == 0, "options list lacks %s", head);
  }
  CHECK(strstr(list, "HAKMEM_CACHE_MAX=N, 2..4096\n    default: fast 256, balanced 128, lean 32, auto 128\n") != NULL,
        "CACHE_MAX entry: %s", list);
  CHECK(strstr(list, "HAKMEM_PROFILE=fast|balanced|lean|auto\n    default: auto\n") != NULL, "PROFILE entry");
  CHECK(strlen(list) < sizeof list - 1, "options list truncated");
}

/* docs/options.md has one table row per option:
 * | `NAME` | kind | fast | balanced | lean | auto | range | description | */
static void test_docs_agree(void) {
  FILE *f = fopen("docs/options.md", "r");
  CHECK(f != NULL, "docs/options.md missing");
  if (!f) return;
  static const char *const kinds[] = {"integer", "size", "boolean", "choice", "string"};
  bool seen[hak_option_count] = {0};
  int rows = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "| `", 3) != 0) continue;
    char cell[9][256];
    int n = 0;
    for (char *p = line + 1; n < 9 && *p && *p != '\n'; n++) {   /* split on unescaped | */
      char *w = cell[n], *end = cell[n] + sizeof cell[n] - 1;
      while (*p == ' ') p++;
      for (; *p && *p != '\n' && *p != '|' && w < end; p++) {
        if (*p == '\\' && p[1] == '|') p++;
        *w++ = *p;
      }
      while (w > cell[n] && w[-1] == ' ') w--;
      *w = 0;
      if (*p != '|') break;
      p++;
    }
    rows++;
    int opt = -1;
    for (int i = 0; i < hak_option_count; i++) {
      char want[300];
      snprintf(want, sizeof want, "`HAKMEM_%s`", hak_option_name((hak_option_t)i));
      if (strcmp(cell[0], want) == 0) opt = i;
    }
    CHECK(opt >= 0 && n == 8, "docs row names no option or has %d cells: %s", n, cell[0]);
    if (opt < 0 || n != 8) continue;
    seen[opt] = true;
    const hak_option_desc_t *d = hak_option_desc((hak_option_t)opt);
    CHECK(strcmp(cell[1], kinds[d->kind]) == 0, "%s: docs kind %s", d->name, cell[1]);
    for (int prof = 0; prof < 4; prof++) {
      char want[300] = "";
      if (d->kind != HAK_OPT_STRING) {
        hak_out_t o;
        hak_out_init(&o, NULL, NULL);
        hak_option_format(&o, (hak_option_t)opt, d->defaults[prof]);
        o.buf[o.n] = 0;
        snprintf(want, sizeof want, "%s", o.buf);
      }
      if (opt == hak_option_profile) snprintf(want, sizeof want, "%s", "auto");
      if (d->kind == HAK_OPT_STRING)
        snprintf(want, sizeof want, "%s", opt == hak_option_prof_file ? "(hakmem.%p.%n.heap)" : "(stderr)");
      CHECK(strcmp(cell[2 + prof], want) == 0, "%s: docs default %s for profile %d, table %s", d->name, cell[2 + prof],
            prof, want);
    }
    char range[300];
    if (d->choices) {
      snprintf(range, sizeof range, "%s", d->choices);
    } else if (d->kind == HAK_OPT_STRING) {
      snprintf(range, sizeof range, "path");
    } else {
      hak_out_t o;
      hak_out_init(&o, NULL, NULL);
      hak_option_format(&o, (hak_option_t)opt, d->min);
      hak_out_str(&o, "..");
      hak_option_format(&o, (hak_option_t)opt, d->max);
      o.buf[o.n] = 0;
      snprintf(range, sizeof range, "%s", o.buf);
    }
    CHECK(strcmp(cell[6], range) == 0, "%s: docs range %s, table %s", d->name, cell[6], range);
    CHECK(strcmp(cell[7], d->doc) == 0, "%s: docs description \"%s\", table \"%s\"", d->name, cell[7], d->doc);
  }
  fclose(f);
  CHECK(rows == hak_option_count, "docs has %d option rows, the table %d", rows, (int)hak_option_count);
  for (int i = 0; i < hak_option_count; i++) CHECK(seen[i], "option %s missing from docs", hak_option_name((hak_option_t)i));
}

static const test_case_t cases[] = {
    {"defaults_and_profiles", test_defaults_and_profiles},
    {"valid_values", test_valid_values},
    {"invalid_values", test_invalid_values},
    {"api", test_api},
    {"set_text", test_set_text},
    {"print", test_print},
    {"docs_agree", test_docs_agree},
};

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
  return RUN_CASES("options", cases, argc, argv);
}
