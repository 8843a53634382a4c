/* A file parser with five bugs for `trestle triage`: two NULL writes on two lines
   of one function, the first reached from two callers, a runaway recursion, a loop
   that never ends, and a NULL write that one build hides behind a smashed stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __attribute__((noinline)) void store(const char *buf, size_t len) {
  volatile int *p = NULL;
  if (len >= 2 && buf[1] == '1')
    *p = 1; /* bug one */
#ifndef FIX_TWO /* a build without bug two: it is build-dependent */
  if (len >= 2 && buf[1] == '2')
    p[100] = 2; /* bug two */
#endif
}

static __attribute__((noinline)) void via_b(const char *buf, size_t len) {
  char copy[8] = "x1";
  (void)buf;
  (void)len;
  store(copy, 2);
}

/* Bug five: a NULL write, but a build with SMASH_FRAMES overwrites its own stack
   first, so its crash (a return to address 0) leaves no frames to name it by. */
static __attribute__((noinline)) void smash(const char *buf, size_t len) {
#ifdef SMASH_FRAMES
  volatile char area[16];
  for (size_t i = 0; i < 1024; i++)
    area[i] = 0;
  (void)buf;
#else
  volatile int *p = NULL;
  if (buf[0] == 'S')
    *p = (int)len;
#endif
}

static __attribute__((noinline)) int nest(const char *buf, size_t n) {
  volatile char pad[512];
  pad[n % 512] = buf[0];
  if (buf[0] == 'R')
    return nest(buf, n + 1) + pad[(n + 1) % 512];
  return pad[0];
}

static __attribute__((noinline)) unsigned spin(const char *buf) {
  volatile unsigned n = 0;
  while (buf[0] == 'L') /* bug four: never false once true */
    n++;
  return n;
}

int main(int argc, char **argv) {
  char buf[256];
  FILE *f = argc > 1 ? fopen(argv[1], "rb") : stdin;
  if (!f) return 2;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  buf[len] = 0;
  if (len >= 1 && buf[0] == 'A') store(buf, len);
  /* A2B: a build without bug two goes on to bug one, another crash of its class */
  if (len >= 3 && buf[0] == 'A' && buf[2] == 'B') via_b(buf, len);
  if (len >= 1 && buf[0] == 'B') via_b(buf, len);
  if (len >= 1 && buf[0] == 'S') smash(buf, len);
  if (len >= 1 && buf[0] == 'R') return nest(buf, len);
  if (len >= 1 && buf[0] == 'L') return (int)spin(buf);
  puts("ok");
  return 0;
}
