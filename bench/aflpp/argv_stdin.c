/* AFL++ at full strength on programs whose input is their arguments and stdin.
 *
 * AFL++ feeds a target one byte string. Linked into the AFL++ builds with
 * -Wl,--wrap=main, this file makes that string the program's arguments and its stdin
 * (as AFL++'s own argv-fuzz-inl.h does for the arguments alone): arguments come first,
 * each ended by a NUL byte, the list ended by an empty argument (a second NUL); the
 * bytes after it stay on stdin for the program. Read one byte at a time, so nothing of
 * stdin is taken. Only when TRESTLE_AFL_ARGV=1 is set (the benchmark sets it for
 * afl-fuzz): otherwise, as in configure's test programs, main runs untouched.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARGS 64
#define MAX_ARG_BYTES (64 * 1024)

int __real_main(int argc, char **argv, char **envp);

int __wrap_main(int argc, char **argv, char **envp)
{
    static char bytes[MAX_ARG_BYTES];
    static char *args[MAX_ARGS + 2];
    const char *on = getenv("TRESTLE_AFL_ARGV");
    if (on == NULL || strcmp(on, "1") != 0)
        return __real_main(argc, argv, envp);
    int n = 0;
    size_t used = 0, start = 0;
    args[n++] = argv[0];
    for (;;) {
        char c;
        if (used == sizeof bytes || read(0, &c, 1) != 1)
            break; /* an input cut short: the arguments read so far */
        bytes[used++] = c;
        if (c != '\0')
            continue;
        if (used - 1 == start)
            break; /* the empty argument: the end of the list */
        if (n < MAX_ARGS)
            args[n++] = bytes + start;
        start = used;
    }
    args[n] = NULL;
    return __real_main(n, args, envp);
}
