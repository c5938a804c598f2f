/* The route banner (HAKMEM_ROUTE_BANNER=1): one compact block on stderr at
 * start-up saying which allocator is in the process and how it is set up;
 * with ROUTE_BANNER=once, in this process and not in those it starts (the
 * launcher's --banner: a program run through a shell script or a shim was
 * described once per process it ran, 35 times for pyenv's python). */
#include "internal.h"

static void thp_mode(hak_out_t *o) {
  char buf[128];
  if (hak_os_read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0) {
    hak_out_str(o, "unknown");
    return;
  }
  const char *open = strchr(buf, '['), *close = open ? strchr(open, ']') : NULL;
  if (!close) {
    hak_out_str(o, "unknown");
    return;
  }
  hak_out_chars(o, open + 1, (size_t)(close - open - 1));
}

void hak_banner_print(void) {
  hak_out_t o;
  hak_out_init(&o, NULL, NULL);
  hak_out_str(&o, "hakmem ");
  hak_out_version(&o);
  hak_out_str(&o, ": profile ");
  hak_option_format(&o, hak_option_profile, hak_opt(hak_option_profile));
  hak_out_str(&o, ", options changed:");
  bool any = false;
  for (unsigned i = 0; i < hak_option_count; i++) {
    if (i == hak_option_profile || hak_option_is_default((hak_option_t)i)) continue;
    hak_out_str(&o, " ");
    hak_out_str(&o, hak_option_desc((hak_option_t)i)->name);
    hak_out_str(&o, "=");
    hak_option_format(&o, (hak_option_t)i, hak_opt((hak_option_t)i));
    any = true;
  }
  hak_out_str(&o, any ? "\n" : " none\n");
  hak_out_str(&o, "hakmem tiers: tiny <= ");
  hak_out_u64(&o, HAK_TINY_MAX);
  hak_out_str(&o, " B (");
  hak_out_u64(&o, HAK_TINY_CLASSES);
  hak_out_str(&o, " classes), mid <= ");
  hak_out_u64(&o, HAK_MID_MAX);
  hak_out_str(&o, " B (");
  hak_out_u64(&o, hak_class_of(HAK_MID_MAX) + 1 - HAK_TINY_CLASSES);   /* the secure build leaves the span classes unused */
  hak_out_str(&o, " classes), large above (BigCache ");
  hak_out_size(&o, (uint64_t)hak_opt(hak_option_bigcache_budget));
  hak_out_str(&o, "); SuperSlab ");
  hak_out_size(&o, HAK_SS_SIZE);
  hak_out_str(&o, " = ");
  hak_out_u64(&o, HAK_UNITS);
  hak_out_str(&o, " x ");
  hak_out_size(&o, HAK_UNIT_SIZE);
  hak_out_str(&o, " units, ");
  if (hak_arena_size) {
    hak_out_str(&o, "arena ");
    hak_out_size(&o, hak_arena_size);
    hak_out_str(&o, " of address space at ");
    hak_out_hex(&o, hak_arena_base);
  } else {
    hak_out_str(&o, "no arena (address space refused, or strict overcommit): SuperSlabs mapped one by one");
  }
  hak_out_str(&o, "\nhakmem ace: ");
  hak_ace_describe(&o);
  hak_out_str(&o, "\nhakmem os: page ");
  hak_out_u64(&o, hak_os_page_size());
  hak_out_str(&o, " B, transparent huge pages ");
  thp_mode(&o);
  hak_out_str(&o, " (hakmem does not request them), stats level ");
  hak_out_u64(&o, HAK_STAT);
  hak_out_str(&o, "\n");
  if (HAK_SECURE)
    hak_out_str(&o, "hakmem secure build: encoded free lists checked on use, guard pages, fresh blocks in random order, "
                    "SuperSlabs at random places\n");
  if (hak_opt(hak_option_route_banner) == 2) hak_option_env_spent(hak_option_route_banner);
}
