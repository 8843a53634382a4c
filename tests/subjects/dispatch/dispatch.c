/* dispatch: a tiny command interpreter. Each line of input is a command name
 * followed by arguments; commands are looked up in a global table of
 * {name, handler} entries and run through function pointers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 16

typedef int (*binop_fn)(int, int);
typedef int (*cmd_fn)(int argc, char **argv);

struct command {
    const char *name;
    cmd_fn fn;
    int min_args;
};

static long g_commands_run;
static int g_last_result;

/* ---- arithmetic primitives (wrap-around, no signed overflow) ---- */
static int op_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
static int op_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
static int op_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
static int op_max(int a, int b) { return a > b ? a : b; }

static int apply(binop_fn f, int a, int b) { return f(a, b); }

/* Left fold of f over values[0..n). */
static int fold(binop_fn f, const int *values, size_t n)
{
    int acc = values[0];
    for (size_t i = 1; i < n; i++)
        acc = apply(f, acc, values[i]);
    return acc;
}

static int gcd(int a, int b)
{
    if (b == 0)
        return a;
    return gcd(b, a % b);
}

static unsigned long long factorial(unsigned n)
{
    return n <= 1 ? 1ULL : n * factorial(n - 1);
}

static int cmp_int(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

static int cmp_int_desc(const void *pa, const void *pb) { return cmp_int(pb, pa); }

/* Parse integer arguments; values are clamped to a small range. */
static size_t parse_ints(int argc, char **argv, int *out)
{
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        long v = strtol(argv[i], NULL, 10);
        if (v > 1000000)
            v = 1000000;
        if (v < -1000000)
            v = -1000000;
        out[n++] = (int)v;
    }
    return n;
}

static int run_binop(binop_fn f, int argc, char **argv)
{
    int vals[MAX_ARGS];
    size_t n = parse_ints(argc, argv, vals);
    int r = fold(f, vals, n);
    printf("%d\n", r);
    return r;
}

static int cmd_add(int argc, char **argv) { return run_binop(op_add, argc, argv); }
static int cmd_sub(int argc, char **argv) { return run_binop(op_sub, argc, argv); }
static int cmd_mul(int argc, char **argv) { return run_binop(op_mul, argc, argv); }
static int cmd_max(int argc, char **argv) { return run_binop(op_max, argc, argv); }

static int cmd_neg(int argc, char **argv)
{
    int v;
    (void)argc; /* min_args guarantees at least one argument */
    parse_ints(1, argv, &v);
    printf("%d\n", -v);
    return -v;
}

static int cmd_echo(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        printf(i ? " %s" : "%s", argv[i]);
    printf("\n");
    return argc;
}

static int cmd_gcd(int argc, char **argv)
{
    int v[MAX_ARGS];
    size_t n = parse_ints(argc, argv, v);
    int g = 0;
    for (size_t i = 0; i < n; i++)
        g = gcd(g, abs(v[i]));
    printf("%d\n", g);
    return g;
}

static int cmd_fact(int argc, char **argv)
{
    int v;
    (void)argc; /* min_args guarantees at least one argument */
    parse_ints(1, argv, &v);
    if (v < 0 || v > 20) {
        printf("fact: out of range\n");
        return 0;
    }
    printf("%llu\n", factorial((unsigned)v));
    return v;
}

static int cmd_sort(int argc, char **argv)
{
    int v[MAX_ARGS];
    int desc = argc > 0 && strcmp(argv[0], "-r") == 0;
    size_t n = desc ? parse_ints(argc - 1, argv + 1, v) : parse_ints(argc, argv, v);
    qsort(v, n, sizeof v[0], desc ? cmp_int_desc : cmp_int);
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", v[i]);
    printf("\n");
    return (int)n;
}

static int cmd_last(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("%d\n", g_last_result);
    return g_last_result;
}

static const struct command g_table[] = {
    {"add", cmd_add, 1},   {"sub", cmd_sub, 1},   {"mul", cmd_mul, 1},
    {"max", cmd_max, 1},   {"neg", cmd_neg, 1},   {"echo", cmd_echo, 0},
    {"gcd", cmd_gcd, 1},   {"fact", cmd_fact, 1}, {"sort", cmd_sort, 0},
    {"last", cmd_last, 0},
};

static const struct command *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof g_table / sizeof g_table[0]; i++)
        if (strcmp(g_table[i].name, name) == 0)
            return &g_table[i];
    return NULL;
}

/* Split line into whitespace-separated words (in place) and run it. */
static void execute_line(char *line)
{
    char *words[MAX_ARGS + 1];
    int nw = 0;
    for (char *tok = strtok(line, " \t\r\n"); tok && nw < MAX_ARGS + 1;
         tok = strtok(NULL, " \t\r\n"))
        words[nw++] = tok;
    if (nw == 0 || words[0][0] == '#')
        return;
    const struct command *c = lookup(words[0]);
    if (!c) {
        printf("unknown command: %s\n", words[0]);
        return;
    }
    if (nw - 1 < c->min_args) {
        printf("%s: needs %d argument(s)\n", c->name, c->min_args);
        return;
    }
    g_last_result = c->fn(nw - 1, words + 1);
    g_commands_run++;
}

int main(int argc, char **argv)
{
    FILE *in = stdin;
    if (argc > 1) {
        in = fopen(argv[1], "r");
        if (!in) {
            perror(argv[1]);
            return 1;
        }
    }
    char line[512];
    while (fgets(line, sizeof line, in))
        execute_line(line);
    if (in != stdin)
        fclose(in);
    printf("# %ld commands run, last result %d\n", g_commands_run, g_last_result);
    return 0;
}
