/* base/log.h: leveled logging to stderr, one line per call, in the form
 * etcd operators grep for: "2026-11-22 01:02:03.123456 I | module: text". */
#ifndef QUORUM_BASE_LOG_H
#define QUORUM_BASE_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* log_set_level drops messages below |level| (default LOG_INFO). */
void log_set_level(enum log_level level);
void log_msg(enum log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(mod, ...) log_msg(LOG_DEBUG, mod, __VA_ARGS__)
#define log_info(mod, ...) log_msg(LOG_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...) log_msg(LOG_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...) log_msg(LOG_ERROR, mod, __VA_ARGS__)

#endif
