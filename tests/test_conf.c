/* Options a program sets for itself (hakmem_options, as jemalloc's
 * malloc_conf: this program defines it), and HAKMEM_OPTIONS and the
 * HAKMEM_<NAME> variables over it, in that order; each list entry checked
 * as the variables are, with one warning line each. The cases run this
 * program again with a chosen environment and read the values it prints. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"
#include "hakmem.h"

const char *hakmem_options = "profile=lean,Purge_Delay_MS=33,cache_max=20";

static char out[1 << 14], err[1 << 14];

static long value(const char *name) {
  size_t n = strlen(name);
  for (char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (strncmp(p, name, n) == 0 && p[n] == '=') return strtol(p + n + 1, NULL, 10);
  return -1;
}

static void run(const char *const *env) {
  int status = run_self(env, out, sizeof out, err, sizeof err);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

static int child(void) {
  static const hak_option_t shown[] = {hak_option_profile, hak_option_purge_delay_ms, hak_option_cache_max,
                                       hak_option_stats};
  for (unsigned i = 0; i < sizeof shown / sizeof *shown; i++)
    printf("%s=%ld\n", hak_option_name(shown[i]), hak_option_get(shown[i]));
  const char *file = hak_option_get_string(hak_option_stats_file);
  printf("STATS_FILE=%s\n", file ? file : "");
  return 0;
}

static void test_program_list(void) {
  const char *none[] = {NULL};
  run(none);
  CHECK(err[0] == 0, "the program's own options warned: %s", err);
  CHECK(value("PROFILE") == HAK_PROFILE_LEAN && value("PURGE_DELAY_MS") == 33 && value("CACHE_MAX") == 20,
        "the program's hakmem_options not applied: %s", out);
}

static void test_env_list(void) {
  const char *list[] = {"HAKMEM_OPTIONS=purge_delay_ms=44,profile=fast,stats_file=/tmp/a,b.txt", NULL};
  run(list);
  CHECK(value("PROFILE") == HAK_PROFILE_FAST && value("PURGE_DELAY_MS") == 44 && value("CACHE_MAX") == 20,
        "HAKMEM_OPTIONS does not override the program's list entry by entry: %s", out);
  CHECK(strstr(out, "STATS_FILE=/tmp/a\n") != NULL, "a string option of the list: %s", out);
  CHECK(strstr(err, "hakmem: warning: unknown option b.txt in HAKMEM_OPTIONS ignored\n") != NULL,
        "a comma ends an entry: %s", err);
}

static void test_variable_over_list(void) {
  const char *both[] = {"HAKMEM_OPTIONS=purge_delay_ms=44,stats=1", "HAKMEM_PURGE_DELAY_MS=55", NULL};
  run(both);
  CHECK(value("PURGE_DELAY_MS") == 55 && value("STATS") == 1 && value("PROFILE") == HAK_PROFILE_LEAN,
        "a variable of its own does not override HAKMEM_OPTIONS: %s", out);
  CHECK(strstr(err, "hakmem statistics") != NULL, "stats=1 in the list printed no report: %s", err);
}

static void test_bad_entries(void) {
  const char *bad[] = {"HAKMEM_OPTIONS=purge_delay_ms=soon,nope=1,,profile=turbo", NULL};
  run(bad);
  CHECK(strcmp(err, "hakmem: warning: HAKMEM_OPTIONS: PROFILE=turbo is not one of fast|balanced|lean|auto; using lean\n"
                    "hakmem: warning: HAKMEM_OPTIONS: PURGE_DELAY_MS=soon is not a number; using 33\n"
                    "hakmem: warning: unknown option nope in HAKMEM_OPTIONS ignored\n") == 0,
        "warnings for the list's bad entries: %s", err);
  CHECK(value("PURGE_DELAY_MS") == 33 && value("PROFILE") == HAK_PROFILE_LEAN, "bad entries changed values: %s", out);
}

static const test_case_t cases[] = {
    {"program_list", test_program_list},
    {"env_list", test_env_list},
    {"variable_over_list", test_variable_over_list},
    {"bad_entries", test_bad_entries},
};

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
  return RUN_CASES("conf", cases, argc, argv);
}
