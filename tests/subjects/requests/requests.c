/* requests: requests come from the arguments (a lone ";" separates them), then
 * from stdin, one per line; each goes parse -> validate -> dispatch -> handler
 * -> helper. Four bugs are planted on purpose, see SUBJECT.md. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 16              /* verb + up to 15 arguments per request */
#define MAX_WORD 64               /* longest word first_char_class accepts */
#define NROWS 5
#define NSLOTS 4096
#define FAST_VALUE 42342531L      /* the "fast path" value of store_value */
#define MASTER_HASH 0x1234567890abcdefUL
enum verb_id { V_HELP, V_ECHO, V_SUM, V_SET, V_LOGIN, V_TOKEN };
struct request { const char *verb; int argc; char *argv[MAX_WORDS]; };
struct verb { const char *name; enum verb_id id; int min_args, max_args; };
struct session { char key[16]; void (*on_login)(const struct session *); };
struct grant { unsigned long hash; long uses; };

static const struct verb verbs[] = {
    {"help", V_HELP, 0, 0},  {"echo", V_ECHO, 1, MAX_WORDS - 1},
    {"sum", V_SUM, 1, MAX_WORDS - 1}, {"set", V_SET, 2, 2},
    {"login", V_LOGIN, 2, 2}, {"token", V_TOKEN, 1, 1},
};
static const struct { const char *user, *password; } accounts[] = {{"guest", "guest123"}, {"alice", "wonderland"}};

static long table[NROWS][4];
static long *rows[NSLOTS];                    /* only slots 0..NROWS-1 are bound */
static signed char char_classes[256];         /* 0 other, 1 letter, 2 digit, 3 punct */
static const signed char *class_by_bucket[3]; /* [0] empty, [1] 1..MAX_WORD, [2] longer */
static struct grant grants[2];
static int handled, rejected;

static unsigned long hash_secret(const char *s)    /* FNV-1a, 64 bit */
{
    unsigned long h = 0xcbf29ce484222325UL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3UL;
    return h;
}

static void init_tables(void)
{
    for (int i = 0; i < NROWS; i++)
        rows[i] = table[i];
    for (int c = 0; c < 256; c++)
        char_classes[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? 1
                          : (c >= '0' && c <= '9') ? 2 : (c > ' ' && c < 127) ? 3 : 0;
    class_by_bucket[1] = char_classes;   /* the only bucket callers may reach */
    grants[0] = (struct grant){hash_secret("letmein"), 0};
    grants[1] = (struct grant){hash_secret("opsdeploy"), 0};
}

static int parse_long(const char *s, long *out)    /* whole decimal token */
{
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    return end != s && *end == '\0' && errno != ERANGE;
}

/* BUG 3 (unit only): len 0 or len > MAX_WORD picks an unbound bucket (NULL).
 * Every caller checks 1 <= len <= MAX_WORD first. */
static int first_char_class(const char *s, size_t len)
{
    size_t bucket = len == 0 ? 0 : (len <= MAX_WORD ? 1 : 2);
    return class_by_bucket[bucket][(unsigned char)s[0]];
}

static void describe_word(const char *w)
{
    static const char *const names[] = {"other", "letter", "digit", "punct"};
    size_t len = strlen(w);
    if (len < 1 || len > MAX_WORD)
        printf("  %.*s... (not classified, %zu chars)\n", 8, w, len);
    else
        printf("  %s (%s, %zu chars)\n", w, names[first_char_class(w, len)], len);
}

/* BUG 1: the magic value skips the clamp; slots >= NROWS are NULL. */
static long store_value(int idx, long value)
{
    unsigned slot = (unsigned)idx % NSLOTS;
    if (value != FAST_VALUE)
        slot %= NROWS;
    rows[slot][0] = value;
    return ++rows[slot][1];
}

static void announce_user(const struct session *s) { printf("login attempt: %s\n", s->key); }
static void announce_admin(const struct session *s) { (void)s; printf("login attempt: administrator\n"); }
/* BUG 2: for "admin" the password is strcpy'd into the 16-byte key. */
static int check_login(const char *user, const char *password)
{
    struct session *s = calloc(1, sizeof *s);
    int ok = 0;
    if (!s)
        return 0;
    if (strcmp(user, "admin") == 0) {
        s->on_login = announce_admin;
        strcpy(s->key, password);
        ok = strcmp(s->key, "opensesame") == 0;
    } else {
        s->on_login = announce_user;
        snprintf(s->key, sizeof s->key, "%s", user);
        for (size_t i = 0; i < sizeof accounts / sizeof accounts[0]; i++)
            if (strcmp(user, accounts[i].user) == 0 && strcmp(password, accounts[i].password) == 0)
                ok = 1;
    }
    s->on_login(s);
    free(s);
    return ok;
}

/* BUG 4 (not reachable): the master hash has no grant, so g is NULL. */
static int check_token(unsigned long h)
{
    struct grant *g = NULL;
    for (size_t i = 0; i < sizeof grants / sizeof grants[0]; i++)
        if (grants[i].hash == h)
            g = &grants[i];
    if (h == MASTER_HASH) {   /* master token: counted on its (missing) grant */
        g->uses++;
        return 2;
    }
    if (g)
        g->uses++;
    return g != NULL;
}

static void handle_echo(const struct request *rq)
{
    printf("echo %d word(s)\n", rq->argc);
    for (int i = 0; i < rq->argc; i++)
        describe_word(rq->argv[i]);
}

static void handle_sum(const struct request *rq)
{
    unsigned long total = 0;
    long v, used = 0;
    for (int i = 0; i < rq->argc; i++)
        if (parse_long(rq->argv[i], &v))
            total += (unsigned long)v, used++;
    printf("sum of %ld number(s) = %ld\n", used, (long)total);
}

static void handle_set(const struct request *rq)
{
    long idx = 0, value = 0;   /* validate_request checked both */
    parse_long(rq->argv[0], &idx);
    parse_long(rq->argv[1], &value);
    printf("set %ld = %ld (%ld write(s) to that row)\n", idx, value, store_value((int)idx, value));
}

static void handle_login(const struct request *rq)
{
    printf("login %s: %s\n", rq->argv[0], check_login(rq->argv[0], rq->argv[1]) ? "ok" : "denied");
}

static void handle_token(const struct request *rq)
{
    static const char *const verdict[] = {"rejected", "accepted", "master"};
    unsigned long h = hash_secret(rq->argv[0]);
    printf("token: %s\n", verdict[check_token(h)]);
}

static void parse_request(char **words, int n, struct request *rq)
{
    rq->verb = words[0];
    rq->argc = 0;
    for (int i = 1; i < n && rq->argc < MAX_WORDS - 1; i++)
        rq->argv[rq->argc++] = words[i];
}

static const struct verb *validate_request(const struct request *rq)
{
    size_t len = strlen(rq->verb);
    long idx, value;
    if (len < 1 || len > MAX_WORD || first_char_class(rq->verb, len) != 1)
        return NULL;  /* a verb starts with a letter */
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        const struct verb *v = &verbs[i];
        if (strcmp(rq->verb, v->name) != 0)
            continue;
        if (rq->argc < v->min_args || rq->argc > v->max_args)
            return NULL;
        if (v->id == V_SET && (!parse_long(rq->argv[0], &idx) || idx < INT_MIN ||
                               idx > INT_MAX || !parse_long(rq->argv[1], &value)))
            return NULL;
        return v;
    }
    return NULL;
}

static void dispatch_request(const struct verb *v, const struct request *rq)
{
    switch (v->id) {
    case V_HELP: printf("verbs: help, echo W..., sum N..., set IDX VALUE, login USER PASS, token SECRET\n"); break;
    case V_ECHO: handle_echo(rq); break;
    case V_SUM: handle_sum(rq); break;
    case V_SET: handle_set(rq); break;
    case V_LOGIN: handle_login(rq); break;
    case V_TOKEN: handle_token(rq); break;
    }
}

static void process(char **words, int n)
{
    struct request rq;
    if (n == 0)
        return;
    parse_request(words, n, &rq);
    const struct verb *v = validate_request(&rq);
    if (!v) {
        printf("bad request: %.20s (%d argument(s))\n", rq.verb, rq.argc);
        rejected++;
        return;
    }
    dispatch_request(v, &rq);
    handled++;
}

int main(int argc, char **argv)
{
    char *words[MAX_WORDS];
    int n = 0;
    init_tables();
    for (int i = 1; i <= argc; i++) {   /* the arguments first */
        if (i == argc || strcmp(argv[i], ";") == 0)
            process(words, n), n = 0;
        else if (n < MAX_WORDS)
            words[n++] = argv[i];
    }
    char *line = NULL;  /* then stdin, one request per line; '#' lines are comments */
    size_t cap = 0;
    while (getline(&line, &cap, stdin) != -1) {
        n = 0;
        for (char *w = strtok(line, " \t\r\n"); w && n < MAX_WORDS; w = strtok(NULL, " \t\r\n"))
            words[n++] = w;
        if (n > 0 && words[0][0] != '#')
            process(words, n);
    }
    free(line);
    printf("# %d request(s) handled, %d rejected\n", handled, rejected);
    return 0;
}
