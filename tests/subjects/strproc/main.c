#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strproc.h"

char g_delim = ',';
const char *g_joinsep = "|";
int g_field = 0;
long g_records_seen = 0;

enum op { OP_UPPER, OP_REVERSE, OP_COUNT, OP_JOIN, OP_TRIM, OP_NONE };

struct option_entry {
    char flag;
    enum op op;
    const char *desc;
};

static const struct option_entry g_options[] = {
    {'u', OP_UPPER, "upper-case"},
    {'r', OP_REVERSE, "reverse"},
    {'c', OP_COUNT, "count"},
    {'j', OP_JOIN, "join"},
    {'t', OP_TRIM, "trim"},
};

static enum op lookup_op(char flag)
{
    for (size_t i = 0; i < sizeof g_options / sizeof g_options[0]; i++)
        if (g_options[i].flag == flag)
            return g_options[i].op;
    return OP_NONE;
}

static const char *op_name(enum op op)
{
    for (size_t i = 0; i < sizeof g_options / sizeof g_options[0]; i++)
        if (g_options[i].op == op)
            return g_options[i].desc;
    return "none";
}

/* Split a NUL-terminated line into a freshly allocated record. */
static struct record *split_line(const char *line, char delim)
{
    struct record *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    const char *start = line;
    for (;;) {
        const char *end = strchr(start, delim);
        size_t len = end ? (size_t)(end - start) : strlen(start);
        if (r->nfields < MAX_FIELDS) {
            char *f = dup_range(start, len);
            if (f)
                r->fields[r->nfields++] = f;
        }
        if (!end)
            break;
        start = end + 1;
    }
    return r;
}

static void free_record(struct record *r)
{
    for (size_t i = 0; i < r->nfields; i++)
        free(r->fields[i]);
    free(r);
}

static void apply_field(char *f, enum op op)
{
    size_t len = strlen(f);
    switch (op) {
    case OP_UPPER:
        str_upper(f, len);
        break;
    case OP_REVERSE:
        str_reverse(f, len);
        break;
    case OP_TRIM:
        str_trim(f);
        break;
    default:
        break;
    }
}

static void process_record(struct record *r, enum op op)
{
    g_records_seen++;
    if (op == OP_JOIN) {
        char *j = join_fields(r, g_joinsep);
        if (j) {
            printf("%s\n", j);
            free(j);
        }
        return;
    }
    if (op == OP_COUNT) {
        size_t total = 0, alpha = 0, spaces = 0;
        for (size_t i = 0; i < r->nfields; i++) {
            size_t fl = strlen(r->fields[i]);
            total += fl;
            alpha += count_alpha(r->fields[i]);
            spaces += count_char(r->fields[i], fl, ' ');
        }
        printf("fields=%zu chars=%zu alpha=%zu spaces=%zu\n", r->nfields, total,
               alpha, spaces);
        return;
    }
    for (size_t i = 0; i < r->nfields; i++) {
        if (g_field == 0 || (size_t)g_field == i + 1)
            apply_field(r->fields[i], op);
        printf("%s%s", i ? "\t" : "", r->fields[i]);
    }
    printf("\n");
}

static void process_stream(FILE *in, enum op op)
{
    char buf[1024];
    while (fgets(buf, sizeof buf, in)) {
        size_t len = strlen(buf);
        if (len > 0 && buf[len - 1] == '\n')
            buf[--len] = '\0';
        struct record *r = split_line(buf, g_delim);
        if (!r)
            continue;
        process_record(r, op);
        free_record(r);
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: strproc [-h] [-d c] [-s sep] [-f n] -u|-r|-c|-j|-t [file]\n");
}

int main(int argc, char **argv)
{
    enum op op = OP_NONE;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] != '\0' && a[2] == '\0') {
            if (a[1] == 'h') {
                usage(stdout);
                for (size_t k = 0; k < sizeof g_options / sizeof g_options[0]; k++)
                    printf("  -%c  %s\n", g_options[k].flag, g_options[k].desc);
                return 0;
            } else if (a[1] == 'd' && i + 1 < argc) {
                g_delim = argv[++i][0];
            } else if (a[1] == 's' && i + 1 < argc) {
                g_joinsep = argv[++i];
            } else if (a[1] == 'f' && i + 1 < argc) {
                g_field = (int)strtol(argv[++i], NULL, 10);
            } else {
                enum op o = lookup_op(a[1]);
                if (o == OP_NONE) {
                    usage(stderr);
                    return 2;
                }
                op = o;
            }
        } else {
            path = a;
        }
    }
    if (op == OP_NONE) {
        usage(stderr);
        return 2;
    }
    FILE *in = stdin;
    if (path) {
        in = fopen(path, "r");
        if (!in) {
            perror(path);
            return 1;
        }
    }
    process_stream(in, op);
    if (in != stdin)
        fclose(in);
    printf("# op=%s records=%ld\n", op_name(op), g_records_seen);
    return 0;
}
