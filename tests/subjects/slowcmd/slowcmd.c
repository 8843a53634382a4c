/* Reads one command from stdin, closes stdin, and runs the command. "check"
   spins for a second before writing through a NULL pointer: a unit fuzzer's
   time limit (calibrated from the recorded call, milliseconds) stops it first,
   while the program itself crashes. */
#include <stdio.h>
#include <string.h>
#include <time.h>

static __attribute__((noinline)) int run_command(const char *cmd) {
  if (strncmp(cmd, "check", 5) == 0) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000000L);
    *(volatile int *)0 = 1;
  }
  if (strncmp(cmd, "hello", 5) == 0) {
    puts("hi");
    return 0;
  }
  puts("unknown command");
  return 0;
}

int main(void) {
  char line[64] = {0};
  if (!fgets(line, sizeof line, stdin))
    return 2;
  fclose(stdin);
  return run_command(line);
}
