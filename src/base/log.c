/* base/log.c: see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static enum log_level min_level = LOG_INFO;

void log_set_level(enum log_level level)
{
    min_level = level;
}

void log_msg(enum log_level level, const char *module, const char *fmt, ...)
{
    if (level < min_level)
        return;
    static const char tag[] = "DIWE";
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[1024];
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02d %02d:%02d:%02d.%06ld %c | %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (long)tv.tv_usec, tag[level], module);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
