/* kvshell: a key-value shell. Commands come from stdin, one per line; each
 * line goes serve -> parse_line -> dispatch -> cmd_* -> helper. Three bugs are
 * planted on purpose, see SUBJECT.md. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_CAP 256              /* fgets buffer: longer lines are rejected */
#define MAX_ARGS 8                /* tokens kept per line (command included) */
#define MAX_ENTRIES 8             /* size of the store */
#define KEY_MAX 15                /* longest key */
#define PIN_VALUE 90210L          /* entries set to this value are pinned */
#define PIN_SHORT_KEY 4           /* pinned keys up to this length are copied */
#define PIN_SLOTS 8

enum cmd_id { C_SET, C_GET, C_ADD, C_DEL, C_SWAP, C_LIST, C_COUNT, C_HELP };
struct command { const char *name; enum cmd_id id; int min_args, max_args; const char *usage; };
struct cmdline { int argc; char *argv[MAX_ARGS]; };   /* argv[0] is the command */
struct entry {                    /* key "" marks a free slot */
    char key[KEY_MAX + 1]; unsigned hash; long value; int writes, pinned;
    struct entry *pin_next;       /* next long pinned key */
};

static const struct command commands[] = {
    {"set", C_SET, 2, 2, "set KEY N"},     {"get", C_GET, 1, 1, "get KEY"},
    {"add", C_ADD, 2, 2, "add KEY N"},     {"del", C_DEL, 1, 1, "del KEY"},
    {"swap", C_SWAP, 2, 2, "swap KEY KEY"}, {"list", C_LIST, 0, 0, "list"},
    {"count", C_COUNT, 0, 0, "count"},     {"help", C_HELP, 0, 0, "help"},
};

static struct entry store[MAX_ENTRIES];
static int nentries;
static unsigned salt_table[KEY_MAX + 1][2];
static const unsigned *salt_rows[KEY_MAX + 2];      /* by key length: only 1..KEY_MAX bound */
static char pin_short[PIN_SLOTS][PIN_SHORT_KEY + 1]; /* copies of short pinned keys */
static int npin_short, npinned;
static struct entry *pin_head, *pin_tail;           /* long pinned keys, in order */
static int handled, errors;

static void init_tables(void)
{
    for (unsigned len = 1; len <= KEY_MAX; len++) {
        salt_table[len][0] = 2166136261u ^ (len * 0x9e3779b9u);
        salt_table[len][1] = 16777619u;
        salt_rows[len] = salt_table[len];
    }
}

/* BUG 3 (unit only): a key is hashed with the salt row of its length; rows
 * exist for lengths 1..KEY_MAX only, so len 0 or len > KEY_MAX reads through a
 * NULL row. find_entry and add_entry check 1 <= len <= KEY_MAX first. */
static unsigned key_hash(const char *key, size_t len)
{
    const unsigned *salt = salt_rows[len <= KEY_MAX ? len : KEY_MAX + 1];
    unsigned h = salt[0];
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * salt[1];
    return h;
}

static int parse_number(const char *s, long *out)   /* whole decimal token */
{
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    return end != s && *end == '\0' && errno != ERANGE;
}

static const char *key_problem(const char *key)    /* NULL if the key is fine */
{
    size_t len = strlen(key);
    if (len > KEY_MAX)
        return "key too long";
    if (!isalpha((unsigned char)key[0]))
        return "key must start with a letter";
    for (size_t i = 1; i < len; i++)
        if (!isalnum((unsigned char)key[i]) && key[i] != '_' && key[i] != '-')
            return "bad character in key";
    return NULL;
}

static struct entry *find_entry(const char *key)
{
    size_t len = strlen(key);
    if (len < 1 || len > KEY_MAX)
        return NULL;                          /* never stored */
    unsigned h = key_hash(key, len);
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (store[i].key[0] && store[i].hash == h && strcmp(store[i].key, key) == 0)
            return &store[i];
    return NULL;
}

static struct entry *add_entry(const char *key)
{
    size_t len = strlen(key);
    if (len < 1 || len > KEY_MAX)
        return NULL;
    for (int i = 0; i < MAX_ENTRIES; i++) {
        struct entry *e = &store[i];
        if (e->key[0])
            continue;
        memset(e, 0, sizeof *e);
        memcpy(e->key, key, len + 1);
        e->hash = key_hash(key, len);
        nentries++;
        return e;
    }
    return NULL;                              /* store full */
}

/* BUG 1: the first long key pinned appends to the empty pin list through
 * pin_tail, which is still NULL (the empty-list case only sets pin_head). */
static void store_value(struct entry *e, const char *key, long n)
{
    e->value = n;
    e->writes++;
    if (n == PIN_VALUE && !e->pinned) {       /* pinned: never deleted, listed */
        e->pinned = 1;
        npinned++;
        if (strlen(key) > PIN_SHORT_KEY) {    /* long keys go onto the pin list */
            if (!pin_head)
                pin_head = e;
            pin_tail->pin_next = e;
            pin_tail = e;
        } else if (npin_short < PIN_SLOTS) {
            memcpy(pin_short[npin_short++], key, strlen(key) + 1);
        }
    }
}

/* BUG 2: cmd_swap checks only the first key; a missing second key is NULL here. */
static void swap_values(struct entry *a, struct entry *b)
{
    long t = a->value;
    a->value = b->value;
    b->value = t;
    a->writes++;
    b->writes++;
}

static int fail(int lineno, const char *what, const char *arg)
{
    printf("line %d: error: %s: %.20s\n", lineno, what, arg);
    return -1;
}

/* set and add: check KEY and N, then find KEY or make a new entry for it. */
static struct entry *writable_entry(const struct cmdline *cl, int lineno, long *n)
{
    const char *key = cl->argv[1], *why = key_problem(key);
    struct entry *e = NULL;
    if (why)
        fail(lineno, why, key);
    else if (!parse_number(cl->argv[2], n))
        fail(lineno, "not a number", cl->argv[2]);
    else if (!(e = find_entry(key)) && !(e = add_entry(key)))
        fail(lineno, "store full", key);
    return e;
}

static int cmd_set(const struct cmdline *cl, int lineno)
{
    long n;
    struct entry *e = writable_entry(cl, lineno, &n);
    if (!e)
        return -1;
    store_value(e, cl->argv[1], n);
    printf("%s = %ld\n", e->key, e->value);
    return 0;
}

static int cmd_get(const struct cmdline *cl, int lineno)
{
    const struct entry *e = find_entry(cl->argv[1]);
    if (!e)
        return fail(lineno, "no such key", cl->argv[1]);
    printf("%s = %ld%s\n", e->key, e->value, e->pinned ? " (pinned)" : "");
    return 0;
}

static int cmd_add(const struct cmdline *cl, int lineno)
{
    long n;
    struct entry *e = writable_entry(cl, lineno, &n);
    if (!e)
        return -1;
    if ((n > 0 && e->value > LONG_MAX - n) || (n < 0 && e->value < LONG_MIN - n))
        return fail(lineno, "overflow", e->key);
    e->value += n;
    e->writes++;
    printf("%s = %ld\n", e->key, e->value);
    return 0;
}

static int cmd_del(const struct cmdline *cl, int lineno)
{
    struct entry *e = find_entry(cl->argv[1]);
    if (!e)
        return fail(lineno, "no such key", cl->argv[1]);
    if (e->pinned)
        return fail(lineno, "pinned", e->key);
    printf("deleted %s (%d write(s))\n", e->key, e->writes);
    memset(e, 0, sizeof *e);
    nentries--;
    return 0;
}

static int cmd_swap(const struct cmdline *cl, int lineno)
{
    struct entry *a = find_entry(cl->argv[1]), *b = find_entry(cl->argv[2]);
    if (!a)
        return fail(lineno, "no such key", cl->argv[1]);
    swap_values(a, b);
    printf("swapped %s and %s\n", cl->argv[1], cl->argv[2]);
    return 0;
}

static int cmd_list(void)
{
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (store[i].key[0])
            printf("%-*s %ld\n", KEY_MAX, store[i].key, store[i].value);
    if (npin_short > 0 || pin_head) {
        printf("pinned:");
        for (int i = 0; i < npin_short; i++)
            printf(" %s", pin_short[i]);
        for (const struct entry *e = pin_head; e; e = e->pin_next)
            printf(" %s", e->key);
        printf("\n");
    }
    return 0;
}

static int parse_line(char *line, struct cmdline *cl)
{
    char *save = NULL;
    cl->argc = 0;
    for (char *tok = strtok_r(line, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        if (tok[0] == '#')                    /* a comment runs to the end of the line */
            break;
        if (cl->argc < MAX_ARGS)
            cl->argv[cl->argc] = tok;
        cl->argc++;                           /* counts the tokens that were dropped too */
    }
    return cl->argc;
}

static void dispatch(const struct cmdline *cl, int lineno)
{
    const struct command *c = NULL;
    int nargs = cl->argc - 1, rc = 0;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0] && !c; i++)
        if (strcmp(cl->argv[0], commands[i].name) == 0)
            c = &commands[i];
    if (!c) {
        rc = fail(lineno, "unknown command", cl->argv[0]);
    } else if (nargs < c->min_args || nargs > c->max_args) {
        printf("line %d: usage: %s\n", lineno, c->usage);
        rc = -1;
    } else {
        switch (c->id) {
        case C_SET: rc = cmd_set(cl, lineno); break;
        case C_GET: rc = cmd_get(cl, lineno); break;
        case C_ADD: rc = cmd_add(cl, lineno); break;
        case C_DEL: rc = cmd_del(cl, lineno); break;
        case C_SWAP: rc = cmd_swap(cl, lineno); break;
        case C_LIST: rc = cmd_list(); break;
        case C_COUNT: printf("%d key(s), %d pinned\n", nentries, npinned); break;
        case C_HELP:
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                printf("  %s\n", commands[i].usage);
            break;
        }
    }
    if (rc == 0)
        handled++;
    else
        errors++;
}

static int serve(FILE *in)
{
    char line[LINE_CAP];
    struct cmdline cl;
    int lineno = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(in)) {   /* too long: skip the rest */
            int c;
            while ((c = fgetc(in)) != EOF && c != '\n')
                ;
            printf("line %d: error: line too long\n", lineno);
            errors++;
            continue;
        }
        if (parse_line(line, &cl) > 0)        /* blank lines and comments: 0 */
            dispatch(&cl, lineno);
    }
    return ferror(in) ? 1 : 0;
}

int main(void)
{
    int rc;
    init_tables();
    rc = serve(stdin);
    printf("# %d command(s) handled, %d error(s)\n", handled, errors);
    return rc;
}
