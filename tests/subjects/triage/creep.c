/* A reader whose memory creeps up without bound on input `C`: it touches 16 MiB,
   waits a tenth of a second, and does it again, so a short time limit stops it
   before the memory limit does; on anything else it echoes the input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static __attribute__((noinline)) char *creep(void) {
  char *c = malloc(16u << 20);
  if (!c) {
    fputs("creep: out of memory\n", stderr);
    exit(1);
  }
  memset(c, 1, 16u << 20);
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  return c;
}

static char *volatile last;

int main(void) {
  char buf[64];
  size_t len = fread(buf, 1, sizeof buf - 1, stdin);
  buf[len] = 0;
  if (len >= 1 && buf[0] == 'C')
    for (;;) last = creep();
  fputs(buf, stdout);
  return 0;
}
