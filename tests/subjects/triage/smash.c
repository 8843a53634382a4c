/* A record reader for `trestle triage` whose one bug smashes its own stack: the
   first byte of a record says how long its field is, and the field is copied into
   a 16-byte buffer for that many bytes. A long field overwrites parse_field's
   return address with the zeros that follow the record, so the return jumps to
   address 0 and the unwinder has nothing of the program to follow. Built -O2 -g
   -fno-stack-protector (no canary to stop it first); the stack scan still finds
   the return addresses above the damage, handle_record's into process_input and
   process_input's into main. */
#include <stdio.h>
#include <string.h>

static __attribute__((noinline)) int parse_field(const unsigned char *rec) {
  volatile unsigned char field[16];
  size_t len = rec[0];
  for (size_t i = 0; i < len; i++) /* the bug: len is the record's, not the field's */
    field[i] = rec[1 + i];
  return field[0];
}

static __attribute__((noinline)) int handle_record(const unsigned char *rec) {
  volatile unsigned char scratch[128];
  for (size_t i = 0; i < sizeof scratch; i++)
    scratch[i] = 0;
  int r = parse_field(rec);
  return r + scratch[rec[0] % sizeof scratch];
}

static __attribute__((noinline)) int process_input(const unsigned char *buf, size_t n) {
  int sum = 0;
  if (n > 0)
    sum = handle_record(buf); /* the caller left above the damage */
  printf("%d\n", sum);
  return sum;
}

int main(void) {
  static unsigned char buf[1024];
  size_t n = fread(buf, 1, 512, stdin);
  int r = process_input(buf, n);
  fflush(stdout);
  return r == 12345;
}
