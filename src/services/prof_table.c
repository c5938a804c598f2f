/* The heap profile's records (prof.c samples, under its lock): a record
 * per distinct stack and size with its counts, and the table of sampled
 * blocks that finds a freed one's record; and the profile written from
 * them. Their memory comes from the OS layer, not from hakmem's heaps. */
#include "internal.h"

#define STACK_HEADS  16384            /* hash chains of distinct stacks */
#define CHUNK_BYTES  ((size_t)256 << 10)

/* The samples of one size from one stack: pprof scales each line of the
 * profile by its mean size, which is then exact (size_key). */
typedef struct prof_stack_s {
  struct prof_stack_s *chain, *next;   /* hash chain; list of all, oldest last */
  uint64_t hash, size;
  uint64_t live_count, live_bytes, total_count, total_bytes;
  uint32_t depth;
  void    *frames[];
} prof_stack_t;

/* A sampled block: its address, its stack and the bytes it counted. */
typedef struct prof_block_s {
  uintptr_t addr;
  prof_stack_t *stack;
  uint64_t bytes;
} prof_block_t;

/* All under prof.c's lock. */
static prof_stack_t **heads;
static prof_stack_t *stacks;
static char *chunk, *chunk_end;                  /* where new stacks are carved */
static prof_block_t *blocks;
static size_t blocks_cap, blocks_used;           /* a power of two; open addressing */

/* The record of a stack and size, new if it is the first of its kind;
 * NULL without memory. */
static prof_stack_t *stack_find(void *const *frames, uint32_t depth, uint64_t frames_hash, uint64_t size) {
  if (!heads && !(heads = hak_os_map(STACK_HEADS * sizeof *heads))) return NULL;
  uint64_t hash = hak_prof_mix(frames_hash, size);
  prof_stack_t **head = &heads[hash % STACK_HEADS];
  for (prof_stack_t *s = *head; s; s = s->chain)
    if (s->hash == hash && s->size == size && s->depth == depth && !memcmp(s->frames, frames, depth * sizeof(void *)))
      return s;
  size_t need = (sizeof(prof_stack_t) + depth * sizeof(void *) + 15) & ~(size_t)15;
  if ((size_t)(chunk_end - chunk) < need) {
    if (!(chunk = hak_os_map(CHUNK_BYTES))) return NULL;
    chunk_end = chunk + CHUNK_BYTES;
  }
  prof_stack_t *s = (prof_stack_t *)chunk;
  chunk += need;
  s->hash = hash;
  s->size = size;
  s->depth = depth;
  memcpy(s->frames, frames, depth * sizeof(void *));
  s->chain = *head;
  *head = s;
  s->next = stacks;
  stacks = s;
  return s;
}

static size_t block_slot(uintptr_t addr) { return (size_t)((addr >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (blocks_cap - 1); }

/* Room for one more sampled block: the table doubles past half full. */
static bool blocks_room(void) {
  if (blocks_used + 1 <= blocks_cap / 2) return true;
  size_t cap = blocks_cap ? 2 * blocks_cap : 1024;
  prof_block_t *old = blocks, *table = hak_os_map(cap * sizeof *table);
  if (!table) return false;
  size_t old_cap = blocks_cap;
  blocks = table;
  blocks_cap = cap;
  for (size_t i = 0; i < old_cap; i++) {
    if (!old[i].addr) continue;
    size_t j = block_slot(old[i].addr);
    while (blocks[j].addr) j = (j + 1) & (cap - 1);
    blocks[j] = old[i];
  }
  if (old) hak_os_unmap(old, old_cap * sizeof *old);
  return true;
}

/* The record of a sampled allocation under the line key (its class's size,
 * or for large blocks their size rounded up to 8 steps per doubling: a
 * line per distinct large size would grow without bound; pprof scales a
 * line by the mean size of its blocks, within 12.5% of each one's) from
 * the stack frames, which the heap's state st took last; NULL without
 * memory. */
prof_stack_t *hak_prof_record_of(hak_prof_state_t *st, uint64_t key, void *const *frames, uint32_t depth) {
  hak_prof_found_t *f = &st->found[(key * 0x9e3779b97f4a7c15ull) >> (64 - HAK_PROF_FOUND_BITS)];
  prof_stack_t *s = f->stack;
  if (f->gen != st->stack_gen || f->size != key || !s) {
    s = stack_find(frames, depth, st->frames_hash, key);
    *f = (hak_prof_found_t){st->stack_gen, key, s};
  }
  return s;
}

void hak_prof_count_in(prof_stack_t *s, uint64_t bytes) {
  s->live_count++;
  s->live_bytes += bytes;
  s->total_count++;
  s->total_bytes += bytes;
}

void hak_prof_count_out(prof_stack_t *s, uint64_t bytes) {
  s->live_count--;
  s->live_bytes -= bytes;
}

/* Record block p of a size class, asked for with `bytes` bytes, in the
 * blocks table (a large block keeps its record in its header:
 * hak_prof_large). */
void hak_prof_record(hak_prof_state_t *st, const void *p, uint64_t key, uint64_t bytes, void *const *frames, uint32_t depth) {
  prof_stack_t *s = hak_prof_record_of(st, key, frames, depth);
  if (!s || !blocks_room()) return;
  size_t j = block_slot((uintptr_t)p);
  while (blocks[j].addr) j = (j + 1) & (blocks_cap - 1);
  blocks[j] = (prof_block_t){(uintptr_t)p, s, bytes};
  blocks_used++;
  hak_prof_count_in(s, bytes);
}

/* Forget block p (freed); backward-shift deletion keeps every probe
 * sequence unbroken. */
void hak_prof_forget_block(const void *p) {
  if (!blocks_cap) return;
  size_t j = block_slot((uintptr_t)p);
  while (blocks[j].addr != (uintptr_t)p) {
    if (!blocks[j].addr) return;
    j = (j + 1) & (blocks_cap - 1);
  }
  hak_prof_count_out(blocks[j].stack, blocks[j].bytes);
  blocks_used--;
  for (size_t k = (j + 1) & (blocks_cap - 1); blocks[k].addr; k = (k + 1) & (blocks_cap - 1)) {
    size_t home = block_slot(blocks[k].addr);
    if (((k - home) & (blocks_cap - 1)) >= ((k - j) & (blocks_cap - 1))) {
      blocks[j] = blocks[k];
      j = k;
    }
  }
  blocks[j].addr = 0;
}

/* "<count>: <bytes> [<count>: <bytes>] @" as pprof's heap profiles have it. */
static void put_counts(hak_out_t *o, uint64_t live_n, uint64_t live_b, uint64_t total_n, uint64_t total_b) {
  hak_out_u64w(o, live_n, 6);
  hak_out_str(o, ": ");
  hak_out_u64w(o, live_b, 8);
  hak_out_str(o, " [");
  hak_out_u64w(o, total_n, 6);
  hak_out_str(o, ": ");
  hak_out_u64w(o, total_b, 8);
  hak_out_str(o, "] @");
}

/* The profile of the live sampled blocks (and the totals sampled since the
 * start) into fd; under the lock. */
void hak_prof_write(int fd) {
  hak_out_t o;
  hak_out_init(&o, hak_write_fd, &fd);
  uint64_t t[4] = {0, 0, 0, 0};
  for (prof_stack_t *s = stacks; s; s = s->next) {
    t[0] += s->live_count;
    t[1] += s->live_bytes;
    t[2] += s->total_count;
    t[3] += s->total_bytes;
  }
  hak_out_str(&o, "heap profile: ");
  put_counts(&o, t[0], t[1], t[2], t[3]);
  hak_out_str(&o, " heap_v2/");
  hak_out_u64(&o, (uint64_t)hak_opt(hak_option_prof_sample));
  hak_out_str(&o, "\n");
  for (prof_stack_t *s = stacks; s; s = s->next) {
    if (!s->live_count && !s->total_count) continue;
    put_counts(&o, s->live_count, s->live_bytes, s->total_count, s->total_bytes);
    for (uint32_t i = 0; i < s->depth; i++) {
      hak_out_str(&o, " ");
      hak_out_hex(&o, (uintptr_t)s->frames[i]);
    }
    hak_out_str(&o, "\n");
  }
  hak_out_str(&o, "\nMAPPED_LIBRARIES:\n");
  hak_out_flush(&o);
}

