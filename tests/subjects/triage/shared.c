/* Two bugs for `trestle triage` that fault through global pointers: one drops the
   separator (stores NULL in `sep`), which faults wherever the separator is used next,
   on one line when it is compared and inside the C library when it is written; the
   other counts into `tallies`, which nothing ever allocated. Three crashing lines,
   two bugs. */
#include <stdio.h>
#include <string.h>

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
  puts("ok");
  return 0;
}
