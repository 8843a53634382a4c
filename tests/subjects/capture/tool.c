/* A small filter for `trestle capture`'s test: copies its input files (or stdin) to
 * stdout, upper-cased when TOOL_MODE=upper; --again re-runs itself on the rest of its
 * arguments, --spawn does so in a forked child; --fork reads its files in a child;
 * --flag makes it exit 3 when a file named "flag" exists (looked up without opening
 * it: no capture can know); --out=PATH writes to PATH instead of stdout (exit 4 when
 * it cannot); --now prints the time in seconds (output no two runs share). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static long total;
static int upper;

static void copy(FILE *f) {
    int c;
    while ((c = fgetc(f)) != EOF) {
        total++;
        putchar(upper && c >= 'a' && c <= 'z' ? c - 32 : c);
    }
}

int main(int argc, char **argv) {
    const char *mode = getenv("TOOL_MODE");
    upper = mode && strcmp(mode, "upper") == 0;
    if (argc > 1 && strcmp(argv[1], "--again") == 0) {
        fflush(stdout);
        argv[1] = argv[0];
        execv("/proc/self/exe", argv + 1);
        return 127;
    }
    if (argc > 1 && strcmp(argv[1], "--now") == 0) {
        printf("%lld\n", (long long)time(NULL));
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--flag") == 0) {
        return access("flag", F_OK) == 0 ? 3 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "--spawn") == 0) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            argv[1] = argv[0];
            execv("/proc/self/exe", argv + 1);
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    int forked = argc > 1 && strcmp(argv[1], "--fork") == 0;
    if (forked) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid > 0) {
            int st;
            waitpid(pid, &st, 0);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        }
    }
    int files = 0;
    for (int i = 1 + forked; i < argc; i++) {
        if (strncmp(argv[i], "--out=", 6) == 0) {
            if (!freopen(argv[i] + 6, "w", stdout))
                return 4;
            continue;
        }
        const char *p = strncmp(argv[i], "--file=", 7) == 0 ? argv[i] + 7 : argv[i];
        FILE *f = fopen(p, "r");
        if (!f) {
            fprintf(stderr, "tool: cannot open %s\n", p);
            return 2;
        }
        copy(f);
        fclose(f);
        files++;
    }
    if (!files)
        copy(stdin);
    if (total > 1000)
        abort();
    fprintf(stderr, "%ld bytes\n", total);
    fflush(stdout);
    if (forked)
        _exit(0);
    return total == 0;
}
