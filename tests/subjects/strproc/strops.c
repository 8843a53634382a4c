#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "strproc.h"

/* Upper-case the first len bytes of s in place. */
void str_upper(char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        s[i] = (char)toupper((unsigned char)s[i]);
}

/* Reverse the first len bytes of s in place. */
void str_reverse(char *s, size_t len)
{
    if (len < 2)
        return;
    size_t i = 0, j = len - 1;
    while (i < j) {
        char t = s[i];
        s[i] = s[j];
        s[j] = t;
        i++;
        j--;
    }
}

/* Trim leading and trailing whitespace of a NUL-terminated string in place;
 * returns the new length. */
size_t str_trim(char *s)
{
    size_t len = strlen(s);
    size_t start = 0;
    while (start < len && isspace((unsigned char)s[start]))
        start++;
    size_t end = len;
    while (end > start && isspace((unsigned char)s[end - 1]))
        end--;
    size_t n = end - start;
    if (start > 0)
        memmove(s, s + start, n);
    s[n] = '\0';
    return n;
}

/* Count occurrences of c in the first len bytes of s. */
size_t count_char(const char *s, size_t len, char c)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] == c)
            n++;
    return n;
}

/* Count alphabetic characters of a NUL-terminated string. */
size_t count_alpha(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (isalpha((unsigned char)*s))
            n++;
    return n;
}

/* Copy len bytes of s into a fresh NUL-terminated heap string. */
char *dup_range(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (!p)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Join all fields of r with sep into a fresh heap string. */
char *join_fields(const struct record *r, const char *sep)
{
    size_t seplen = strlen(sep);
    size_t total = 1;
    for (size_t i = 0; i < r->nfields; i++)
        total += strlen(r->fields[i]) + (i > 0 ? seplen : 0);
    char *out = malloc(total);
    if (!out)
        return NULL;
    size_t pos = 0;
    for (size_t i = 0; i < r->nfields; i++) {
        if (i > 0) {
            memcpy(out + pos, sep, seplen);
            pos += seplen;
        }
        size_t fl = strlen(r->fields[i]);
        memcpy(out + pos, r->fields[i], fl);
        pos += fl;
    }
    out[pos] = '\0';
    return out;
}
