/* `asprintf`, renamed by the pass: C can take its variable arguments and hand them
 * on as a va_list to the runtime's `vasprintf` wrapper (Rust), which registers the
 * string the C library allocated for itself as a heap extent. */
#include <stdarg.h>

int __trestle_vasprintf(char **out, const char *format, va_list args);
int __trestle_vasprintf_chk(char **out, int flag, const char *format, va_list args);

int __trestle_asprintf(char **out, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int n = __trestle_vasprintf(out, format, args);
    va_end(args);
    return n;
}

/* The same under _FORTIFY_SOURCE, which calls the checking variants. */
int __trestle_asprintf_chk(char **out, int flag, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int n = __trestle_vasprintf_chk(out, flag, format, args);
    va_end(args);
    return n;
}
