/* Three bugs for `trestle triage` that fault through global pointers: one drops the
   separator (stores NULL in `sep`), which faults wherever the separator is used next,
   on one line when it is compared and inside the C library when it is written; one
   counts into `tallies`, which nothing ever allocated; one copies far past the end of
   the (good) separator. Four crashing lines, three bugs. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

char *sep = ";";
size_t sep_len = 1;
int *tallies;

static __attribute__((noinline)) void forget(const char *buf) {
  if (buf[1] == 'x')
    sep = NULL; /* bug one: the separator is dropped */
}

static __attribute__((noinline)) int same_sep(const char *buf) {
  return sep[0] == buf[3]; /* bug one faults here... */
}

static __attribute__((noinline)) void emit(const char *a, const char *b) {
  fputs(a, stdout);
  fwrite(sep, 1, sep_len, stdout); /* ...or in fwrite, called here */
  fputs(b, stdout);
}

static __attribute__((noinline)) void copy_sep(void) {
  static char copy[64];
  memcpy(copy, sep, sizeof copy); /* bug three: a good pointer read past its end */
  puts(copy);
}

static __attribute__((noinline)) void widen(void) {
  /* The separator in the last byte of a page, a guard page after it. */
  char *pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED || mprotect(pages + 4096, 4096, PROT_NONE) != 0) return;
  pages[4095] = ';';
  sep = pages + 4095;
  copy_sep();
}

static __attribute__((noinline)) void tally(const char *buf) {
  tallies[buf[1] & 7] += 1; /* bug two */
}

int main(int argc, char **argv) {
  char buf[256];
  FILE *f = argc > 1 ? fopen(argv[1], "rb") : stdin;
  if (!f) return 2;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  memset(buf + len, 0, sizeof buf - len);
  if (buf[0] == 'N') {
    forget(buf);
    if (buf[2] == '=') return same_sep(buf);
    emit("left", "right\n");
  }
  if (buf[0] == 'T') tally(buf);
  if (buf[0] == 'W') widen();
  puts("ok");
  return 0;
}
