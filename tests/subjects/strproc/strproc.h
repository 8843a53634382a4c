#ifndef STRPROC_H
#define STRPROC_H

#include <stddef.h>

#define MAX_FIELDS 16

struct record {
    char *fields[MAX_FIELDS];
    size_t nfields;
};

/* global configuration */
extern char g_delim;
extern const char *g_joinsep;
extern int g_field; /* 1-based field index, 0 = all fields */
extern long g_records_seen;

/* strops.c helpers */
void str_upper(char *s, size_t len);
void str_reverse(char *s, size_t len);
size_t str_trim(char *s);
size_t count_char(const char *s, size_t len, char c);
size_t count_alpha(const char *s);
char *join_fields(const struct record *r, const char *sep);
char *dup_range(const char *s, size_t len);

#endif
