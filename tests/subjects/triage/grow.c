/* A reader whose buffer list grows without bound on input `G` (it never frees and
   never stops asking for more until an allocation fails, then says so and exits
   with an error), and which on `S` asks once for far too much, as a program sizing
   its buffer might, and goes on with a small buffer: a failed allocation it
   handles is no bug. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chunk {
  struct chunk *next;
  char data[];
};

static __attribute__((noinline)) struct chunk *grow(struct chunk *list) {
  /* 64 MiB at a time, never touched: the address space runs out, not the RAM. */
  struct chunk *c = malloc(sizeof *c + (64u << 20));
  if (!c) {
    fputs("grow: cannot extend the buffer list\n", stderr);
    exit(1);
  }
  c->next = list;
  return c;
}

static char *volatile kept;

static __attribute__((noinline)) size_t sized_buffer(void) {
  kept = malloc((size_t)1 << 44);
  if (kept) return (size_t)1 << 44;
  kept = malloc(4096);
  return kept ? 4096 : 0;
}

int main(int argc, char **argv) {
  char buf[64];
  FILE *f = argc > 1 ? fopen(argv[1], "rb") : stdin;
  if (!f) return 2;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  buf[len] = 0;
  if (len >= 1 && buf[0] == 'G') {
    struct chunk *list = NULL;
    for (;;) list = grow(list);
  }
  if (len >= 1 && buf[0] == 'S') printf("buffer %zu\n", sized_buffer());
  puts("ok");
  return 0;
}
