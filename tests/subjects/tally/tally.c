/* tally: counts words of its input against a table of primes it builds first.
 *
 * A planted bug for the bridge: a word whose 16-bit digest is 0xbeef reaches
 * `remember`, which indexes a table by the digest's upper byte without checking
 * it was ever filled (a NULL bucket).  The digest is no comparison CmpLog can
 * invert, so only many tries find such a word; every run of the program first
 * builds its prime table (about a tenth of a second), which makes tries at system
 * level slow, while a unit carved at `tally_word` tries them at the speed of the
 * function alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT 12000000

static unsigned char *composite;
static long primes;

struct bucket { long count; char last[32]; };
struct bucket *buckets[256];

static void build_primes(void)
{
    composite = calloc(LIMIT + 1, 1);
    if (!composite) exit(2);
    for (long i = 2; i <= LIMIT; i++) {
        if (composite[i]) continue;
        primes++;
        for (long j = i * i; j <= LIMIT; j += i) composite[j] = 1;
    }
}

static unsigned digest(const char *w)
{
    unsigned h = 0x9e37;
    for (; *w; w++) h = ((h << 5) ^ (h >> 11) ^ (unsigned char)*w) & 0xffff;
    return h;
}

static void remember(const char *w, unsigned d)
{
    struct bucket *b = buckets[d >> 8];   /* BUG: only the low buckets exist */
#ifdef TALLY_FIXED /* a build without the bug: the crash is build-dependent */
    if (!b) return;
#endif
    b->count++;
    strncpy(b->last, w, sizeof b->last - 1);
}

static long tally_word(const char *w)
{
    unsigned d = digest(w);
    if (d == 0xbeef) {
        remember(w, d);
        return -1;
    }
    return (long)strlen(w);
}

int main(void)
{
    char line[512];
    long total = 0, words = 0;
    build_primes();
    for (int i = 0; i < 16; i++) buckets[i] = calloc(1, sizeof(struct bucket));
    while (fgets(line, sizeof line, stdin)) {
        for (char *w = strtok(line, " \t\n"); w; w = strtok(NULL, " \t\n")) {
            long n = tally_word(w);
            if (n > 1 && n < LIMIT && !composite[n]) total += n;
            words++;
        }
    }
    printf("%ld words, %ld in prime lengths, %ld primes below %d\n", words, total, primes, LIMIT);
    return 0;
}
