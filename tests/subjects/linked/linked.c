/* linked: builds a binary search tree and a singly linked list from
 * integers given on the command line, in files (-f) or on stdin, then
 * reports on them; -q N looks N up in the tree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tnode {
    long key;
    unsigned count; /* duplicates are counted, not re-inserted */
    struct tnode *left, *right;
};

struct lnode {
    long value;
    struct lnode *next;
};

static struct tnode *tree_new(long key)
{
    struct tnode *n = malloc(sizeof *n);
    if (!n)
        exit(1);
    n->key = key;
    n->count = 1;
    n->left = n->right = NULL;
    return n;
}

static struct tnode *tree_insert(struct tnode *root, long key)
{
    if (!root)
        return tree_new(key);
    if (key < root->key)
        root->left = tree_insert(root->left, key);
    else if (key > root->key)
        root->right = tree_insert(root->right, key);
    else
        root->count++;
    return root;
}

static int tree_height(const struct tnode *root)
{
    if (!root)
        return 0;
    int hl = tree_height(root->left);
    int hr = tree_height(root->right);
    return 1 + (hl > hr ? hl : hr);
}

/* Sum of all keys (with multiplicity); unsigned so that overflow wraps
 * instead of being undefined. */
static unsigned long long tree_sum(const struct tnode *root)
{
    if (!root)
        return 0;
    return (unsigned long long)root->key * root->count + tree_sum(root->left) +
           tree_sum(root->right);
}

static size_t tree_size(const struct tnode *root)
{
    if (!root)
        return 0;
    return 1 + tree_size(root->left) + tree_size(root->right);
}

static void tree_print(const struct tnode *root, int *first)
{
    if (!root)
        return;
    tree_print(root->left, first);
    for (unsigned i = 0; i < root->count; i++) {
        printf(*first ? "%ld" : " %ld", root->key);
        *first = 0;
    }
    tree_print(root->right, first);
}

static const struct tnode *tree_find(const struct tnode *root, long key, int *depth)
{
    if (!root)
        return NULL;
    if (key == root->key)
        return root;
    (*depth)++;
    return tree_find(key < root->key ? root->left : root->right, key, depth);
}

static void tree_free(struct tnode *root)
{
    if (!root)
        return;
    tree_free(root->left);
    tree_free(root->right);
    free(root);
}

static struct lnode *list_push(struct lnode *head, long value)
{
    struct lnode *n = malloc(sizeof *n);
    if (!n)
        exit(1);
    n->value = value;
    n->next = head;
    return n;
}

static struct lnode *list_reverse(struct lnode *head)
{
    struct lnode *prev = NULL;
    while (head) {
        struct lnode *next = head->next;
        head->next = prev;
        prev = head;
        head = next;
    }
    return prev;
}

static size_t list_length(const struct lnode *head)
{
    size_t n = 0;
    for (; head; head = head->next)
        n++;
    return n;
}

static void list_print(const struct lnode *head)
{
    for (const struct lnode *p = head; p; p = p->next)
        printf(p == head ? "%ld" : " -> %ld", p->value);
    printf("\n");
}

static void list_free(struct lnode *head)
{
    while (head) {
        struct lnode *next = head->next;
        free(head);
        head = next;
    }
}

/* Parse a whole token as a decimal long; returns 1 on success. */
static int parse_long(const char *s, long *out)
{
    char *end;
    if (*s == '\0')
        return 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0')
        return 0;
    *out = v;
    return 1;
}

/* Read whitespace-separated integers from in into the tree and the list;
 * returns how many were accepted. */
static size_t read_numbers(FILE *in, struct tnode **root, struct lnode **list)
{
    char tok[64];
    size_t n = 0;
    while (fscanf(in, "%63s", tok) == 1) {
        long v;
        if (parse_long(tok, &v)) {
            *root = tree_insert(*root, v);
            *list = list_push(*list, v);
            n++;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    struct tnode *root = NULL;
    struct lnode *list = NULL;
    long queries[16];
    size_t nqueries = 0;
    int from_stdin = 1;

    for (int i = 1; i < argc; i++) {
        long v;
        if (strcmp(argv[i], "-f") == 0 && i + 1 < argc) {
            FILE *f = fopen(argv[++i], "r");
            if (!f) {
                perror(argv[i]);
                return 1;
            }
            printf("read %zu numbers from %s\n", read_numbers(f, &root, &list), argv[i]);
            fclose(f);
            from_stdin = 0;
        } else if (strcmp(argv[i], "-q") == 0 && i + 1 < argc) {
            if (parse_long(argv[++i], &v) && nqueries < 16)
                queries[nqueries++] = v;
        } else if (parse_long(argv[i], &v)) {
            root = tree_insert(root, v);
            list = list_push(list, v);
            from_stdin = 0;
        } else {
            fprintf(stderr, "ignoring '%s'\n", argv[i]);
        }
    }
    if (from_stdin)
        read_numbers(stdin, &root, &list);

    int first = 1;
    printf("sorted: ");
    tree_print(root, &first);
    printf("\n");
    printf("distinct=%zu height=%d sum=%lld\n", tree_size(root), tree_height(root),
           (long long)tree_sum(root));

    printf("pushed (newest first): ");
    list_print(list);
    list = list_reverse(list);
    printf("input order: ");
    list_print(list);
    printf("length=%zu\n", list_length(list));

    for (size_t q = 0; q < nqueries; q++) {
        int depth = 0;
        const struct tnode *n = tree_find(root, queries[q], &depth);
        if (n)
            printf("find %ld: found at depth %d (x%u)\n", queries[q], depth, n->count);
        else
            printf("find %ld: missing\n", queries[q]);
    }

    list_free(list);
    tree_free(root);
    return 0;
}
