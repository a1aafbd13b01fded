/* base/log.h: leveled logging, one line per call, in one of etcd's two
 * formats (--logger, docs/observability.md "Logs"):
 *
 *   capnslog (the default, etcd 3.4's): "2026-11-22 01:02:03.123456 I | module: text"
 *   zap: {"level":"info","ts":"2026-11-22T01:02:03.123Z","caller":"server/node.c:1094",
 *         "msg":"text","field":value,...}  (JSON lines, etcd's field names)
 *
 * to one or more outputs (--log-outputs: stderr, stdout, files, the systemd
 * journal). Any thread may log: each line is one write(2) per output, and
 * lines do not interleave. A line below the level costs one comparison:
 * the macros check the level before any argument is evaluated. */
#ifndef QUORUM_BASE_LOG_H
#define QUORUM_BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* LOG_FATAL is above every line quorum writes: --log-level=panic|fatal
 * keeps nothing but a fatal line. */
enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_FATAL };

enum log_format { LOG_FORMAT_CAPNSLOG, LOG_FORMAT_ZAP };

extern int log_min_level; /* set at start, before other threads exist */

static inline bool log_enabled(enum log_level level)
{
    return (int)level >= log_min_level;
}

/* log_set_level drops lines below |level| (default LOG_INFO). */
void log_set_level(enum log_level level);

/* log_parse_level reads etcd's --log-level names: debug, info, warn,
 * error, dpanic, panic, fatal. -1 if unknown. */
int log_parse_level(const char *name);

/* log_setup applies --logger ("capnslog" or "zap"; "" = capnslog),
 * --log-outputs (comma-separated: "default" = stderr, "stderr", "stdout",
 * "systemd/journal", or a file path, opened for appending and created
 * 0644 as etcd's zap does) and --log-level, as etcd 3.4 checks them; on a
 * bad value it writes etcd's reason to |err| and changes nothing. |argv0|
 * names the program in the journal (SYSLOG_IDENTIFIER). */
int log_setup(const char *logger, const char *outputs, const char *level, const char *argv0,
              char *err, size_t errlen);

/* log_defaults goes back to capnslog on stderr at info, closing any outputs
 * log_setup opened (tests). */
void log_defaults(void);

/* log_journal_socket sets the journal socket log_setup connects to
 * (default /run/systemd/journal/socket); for tests. */
void log_journal_socket(const char *path);

/* ---- printf-style lines: "msg" is the formatted text, no fields ---- */

void log_msg_at(const char *file, int line, enum log_level level, const char *module,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define log_msg(level, module, ...)                                                                \
    do {                                                                                           \
        if (log_enabled(level))                                                                    \
            log_msg_at(__FILE__, __LINE__, (level), (module), __VA_ARGS__);                        \
    } while (0)
#define log_debug(mod, ...) log_msg(LOG_DEBUG, mod, __VA_ARGS__)
#define log_info(mod, ...) log_msg(LOG_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...) log_msg(LOG_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...) log_msg(LOG_ERROR, mod, __VA_ARGS__)

/* ---- structured lines: a fixed message and typed fields ----
 *
 *   log_kv(LOG_INFO, "mvcc", "finished scheduled compaction",
 *          LF_INT("compact-revision", rev), LF_DUR("took", ns));
 *
 * zap renders the fields as JSON members after "msg", in the order given;
 * capnslog appends them to the text as {"key": value, ...} (zap's console
 * style). Values are rendered as etcd's zap fields are: */
enum log_ftype {
    LOG_F_STR,  /* JSON string; a NULL value leaves the field out (zap.Error(nil)) */
    LOG_F_INT,  /* JSON number */
    LOG_F_UINT, /* JSON number */
    LOG_F_DUR,  /* nanoseconds, as Go's Duration.String(): "1.234s", "100ms", "1m0s" */
    LOG_F_ID,   /* a member or cluster id as etcd's types.ID: "8e9e05c52164694d" */
    LOG_F_BOOL, /* true | false */
    LOG_F_STRS, /* JSON array of strings */
};

struct log_field {
    const char *key;
    enum log_ftype type;
    union {
        const char *s;
        int64_t i;
        uint64_t u;
        struct {
            const char *const *v;
            size_t n;
        } a;
    } v;
};

#define LF_STR(k, x) ((struct log_field){(k), LOG_F_STR, {.s = (x)}})
#define LF_INT(k, x) ((struct log_field){(k), LOG_F_INT, {.i = (int64_t)(x)}})
#define LF_UINT(k, x) ((struct log_field){(k), LOG_F_UINT, {.u = (uint64_t)(x)}})
#define LF_DUR(k, ns) ((struct log_field){(k), LOG_F_DUR, {.i = (int64_t)(ns)}})
#define LF_ID(k, x) ((struct log_field){(k), LOG_F_ID, {.u = (uint64_t)(x)}})
#define LF_BOOL(k, x) ((struct log_field){(k), LOG_F_BOOL, {.u = (x) ? 1u : 0u}})
#define LF_STRS(k, arr, cnt)                                                                       \
    ((struct log_field){(k), LOG_F_STRS, {.a = {(const char *const *)(arr), (cnt)}}})

void log_kv_at(const char *file, int line, enum log_level level, const char *module,
               const char *msg, const struct log_field *f, size_t n);

#define log_kv(level, module, msg, ...)                                                            \
    do {                                                                                           \
        if (log_enabled(level)) {                                                                  \
            const struct log_field log_f_[] = {__VA_ARGS__};                                       \
            log_kv_at(__FILE__, __LINE__, (level), (module), (msg), log_f_,                        \
                      sizeof(log_f_) / sizeof(log_f_[0]));                                         \
        }                                                                                          \
    } while (0)

/* ---- the renderer (log.c uses it for every line; tests call it) ---- */

struct log_record {
    enum log_level level;
    struct timespec ts; /* CLOCK_REALTIME */
    const char *file;   /* __FILE__ (log_caller) */
    int line;
    const char *module;
    const char *msg;
    const struct log_field *fields;
    size_t n_fields;
};

/* log_render returns the line (with its '\n', NUL-terminated), malloc'ed;
 * NULL without memory. |len| gets its length. */
char *log_render(enum log_format fmt, const struct log_record *r, size_t *len);

/* log_go_duration writes |ns| as Go's time.Duration.String() does
 * ("0s", "999ns", "1.5µs", "100ms", "1.234s", "1m0s", "2h3m4.5s"). */
void log_go_duration(char *out, size_t cap, int64_t ns);

/* log_human_bytes writes |n| as go-humanize's Bytes (SI): "20 kB", "2.1 GB". */
void log_human_bytes(char *out, size_t cap, uint64_t n);

/* log_caller writes "dir/file.c:line" for |file| (__FILE__: the file and
 * its directory, "server/node.c" for "../src/server/node.c") and |line|. */
void log_caller(char *out, size_t cap, const char *file, int line);

#endif
