/* base/log.c: see log.h. */
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

int log_min_level = LOG_INFO;

#define MAX_OUTPUTS 8

enum out_kind { OUT_FD, OUT_JOURNAL };

struct output {
    enum out_kind kind;
    int fd;
    bool owned; /* a file or socket log_setup opened */
};

/* The outputs change only in log_setup/log_defaults, at start (and in tests),
 * before or after other threads log; the mutex keeps lines whole when
 * several threads write at once. */
static struct {
    enum log_format fmt;
    struct output out[MAX_OUTPUTS];
    size_t n_out;
    char ident[64]; /* SYSLOG_IDENTIFIER */
} lg = {LOG_FORMAT_CAPNSLOG, {{OUT_FD, 2, false}}, 1, "quorum"};

static pthread_mutex_t write_mu = PTHREAD_MUTEX_INITIALIZER;
static char journal_path[108] = "/run/systemd/journal/socket";

void log_set_level(enum log_level level)
{
    log_min_level = (int)level;
}

int log_parse_level(const char *name)
{
    static const struct {
        const char *name;
        enum log_level level;
    } names[] = {{"debug", LOG_DEBUG}, {"info", LOG_INFO},    {"warn", LOG_WARN},
                 {"error", LOG_ERROR}, {"dpanic", LOG_FATAL}, {"panic", LOG_FATAL},
                 {"fatal", LOG_FATAL}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i].name) == 0)
            return (int)names[i].level;
    return -1;
}

void log_journal_socket(const char *path)
{
    snprintf(journal_path, sizeof(journal_path), "%s", path);
}

/* ---- a growable line buffer (on the stack unless a line is long) ---- */

struct lbuf {
    char *p;
    size_t len, cap;
    bool heap, oom;
    char stack[2048];
};

static void lb_init(struct lbuf *b)
{
    b->p = b->stack;
    b->len = 0;
    b->cap = sizeof(b->stack);
    b->heap = false;
    b->oom = false;
}

static bool lb_grow(struct lbuf *b, size_t more)
{
    if (b->oom)
        return false;
    if (b->len + more <= b->cap)
        return true;
    size_t cap = b->cap * 2;
    while (cap < b->len + more)
        cap *= 2;
    char *p = b->heap ? realloc(b->p, cap) : malloc(cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    if (!b->heap)
        memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    b->heap = true;
    return true;
}

static void lb_add(struct lbuf *b, const char *s, size_t n)
{
    if (!lb_grow(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void lb_str(struct lbuf *b, const char *s)
{
    lb_add(b, s, strlen(s));
}

static void lb_ch(struct lbuf *b, char c)
{
    lb_add(b, &c, 1);
}

static void lb_vprintf(struct lbuf *b, const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, aq);
    va_end(aq);
    if (n < 0)
        return;
    if ((size_t)n >= b->cap - b->len) {
        if (!lb_grow(b, (size_t)n + 1))
            return;
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    }
    b->len += (size_t)n;
}

static void lb_printf(struct lbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lb_printf(struct lbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lb_vprintf(b, fmt, ap);
    va_end(ap);
}

static void lb_free(struct lbuf *b)
{
    if (b->heap)
        free(b->p);
}

/* ---- values as etcd prints them ---- */

/* fmt_frac/fmt_int: Go's time package helpers, writing backwards from
 * buf[w]. fmt_frac writes v's last |prec| digits as a fraction without
 * trailing zeros (and without the point when it is zero). */
static size_t fmt_frac(char *buf, size_t w, uint64_t *v, int prec)
{
    bool print = false;
    for (int i = 0; i < prec; i++) {
        int digit = (int)(*v % 10);
        print = print || digit != 0;
        if (print)
            buf[--w] = (char)('0' + digit);
        *v /= 10;
    }
    if (print)
        buf[--w] = '.';
    return w;
}

static size_t fmt_int(char *buf, size_t w, uint64_t v)
{
    if (v == 0) {
        buf[--w] = '0';
        return w;
    }
    while (v > 0) {
        buf[--w] = (char)('0' + v % 10);
        v /= 10;
    }
    return w;
}

void log_go_duration(char *out, size_t cap, int64_t ns)
{
    char buf[40];
    size_t w = sizeof(buf);
    bool neg = ns < 0;
    uint64_t u = neg ? -(uint64_t)ns : (uint64_t)ns;
    if (u < 1000000000ull) {
        int prec;
        buf[--w] = 's';
        if (u == 0) {
            snprintf(out, cap, "0s");
            return;
        } else if (u < 1000ull) {
            prec = 0;
            buf[--w] = 'n';
        } else if (u < 1000000ull) {
            prec = 3;
            buf[--w] = (char)0xb5; /* U+00B5 micro sign, as Go writes it */
            buf[--w] = (char)0xc2;
        } else {
            prec = 6;
            buf[--w] = 'm';
        }
        w = fmt_frac(buf, w, &u, prec);
        w = fmt_int(buf, w, u);
    } else {
        buf[--w] = 's';
        w = fmt_frac(buf, w, &u, 9);
        w = fmt_int(buf, w, u % 60);
        u /= 60;
        if (u > 0) {
            buf[--w] = 'm';
            w = fmt_int(buf, w, u % 60);
            u /= 60;
            if (u > 0) {
                buf[--w] = 'h';
                w = fmt_int(buf, w, u);
            }
        }
    }
    if (neg)
        buf[--w] = '-';
    snprintf(out, cap, "%.*s", (int)(sizeof(buf) - w), buf + w);
}

void log_human_bytes(char *out, size_t cap, uint64_t n)
{
    static const char *const sizes[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    if (n < 10) {
        snprintf(out, cap, "%" PRIu64 " B", n);
        return;
    }
    int e = 0;
    double v = (double)n;
    while (v >= 1000 && e < 6) {
        v /= 1000;
        e++;
    }
    /* humanize: floor(v*10+0.5)/10, then %.0f from 10 up, else %.1f */
    double val = (double)(int64_t)(v * 10 + 0.5) / 10;
    snprintf(out, cap, val < 10 ? "%.1f %s" : "%.0f %s", val, sizes[e]);
}

void log_caller(char *out, size_t cap, const char *file, int line)
{
    /* the file and its directory, as zap's short caller ("etcdserver/
     * server.go:2065"): meson passes "../src/server/node.c" */
    const char *last = strrchr(file, '/');
    if (last != NULL) {
        const char *p = last;
        while (p > file && p[-1] != '/')
            p--;
        file = p;
    }
    snprintf(out, cap, "%s:%d", file, line);
}

/* utf8_len is the length of the valid UTF-8 sequence at s (n bytes left),
 * or 0 when it is not one (as Go's utf8.DecodeRuneInString). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t min, cp;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, min = 0x80, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, min = 0x800, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* json_str appends |s| quoted as zap's JSON encoder does: \" \\ \n \r \t,
 * other control bytes as \u00XX, invalid UTF-8 as \ufffd, the rest as is
 * (no HTML escaping). */
static void json_str(struct lbuf *b, const char *str)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    lb_ch(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && s[run] >= 0x20 && s[run] < 0x80 && s[run] != '"' && s[run] != '\\')
            run++;
        if (run > i) {
            lb_add(b, (const char *)s + i, run - i);
            i = run;
            continue;
        }
        unsigned c = s[i];
        if (c >= 0x80) {
            size_t l = utf8_len(s + i, n - i);
            if (l == 0) {
                lb_str(b, "\\ufffd");
                i++;
            } else {
                lb_add(b, (const char *)s + i, l);
                i += l;
            }
            continue;
        }
        switch (c) {
        case '"':
            lb_str(b, "\\\"");
            break;
        case '\\':
            lb_str(b, "\\\\");
            break;
        case '\n':
            lb_str(b, "\\n");
            break;
        case '\r':
            lb_str(b, "\\r");
            break;
        case '\t':
            lb_str(b, "\\t");
            break;
        default: {
            char u[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
            lb_str(b, u);
        }
        }
        i++;
    }
    lb_ch(b, '"');
}

static void field_value(struct lbuf *b, const struct log_field *f)
{
    char tmp[48];
    switch (f->type) {
    case LOG_F_STR:
        json_str(b, f->v.s);
        break;
    case LOG_F_INT:
        lb_printf(b, "%" PRId64, f->v.i);
        break;
    case LOG_F_UINT:
        lb_printf(b, "%" PRIu64, f->v.u);
        break;
    case LOG_F_DUR:
        log_go_duration(tmp, sizeof(tmp), f->v.i);
        json_str(b, tmp);
        break;
    case LOG_F_ID:
        lb_printf(b, "\"%" PRIx64 "\"", f->v.u);
        break;
    case LOG_F_BOOL:
        lb_str(b, f->v.u ? "true" : "false");
        break;
    case LOG_F_STRS:
        lb_ch(b, '[');
        for (size_t i = 0; i < f->v.a.n; i++) {
            if (i > 0)
                lb_ch(b, ',');
            json_str(b, f->v.a.v[i] != NULL ? f->v.a.v[i] : "");
        }
        lb_ch(b, ']');
        break;
    }
}

static bool field_present(const struct log_field *f)
{
    return f->type != LOG_F_STR || f->v.s != NULL;
}

static const char *const level_names[] = {"debug", "info", "warn", "error", "fatal"};

char *log_render(enum log_format fmt, const struct log_record *r, size_t *len)
{
    struct lbuf b;
    lb_init(&b);
    struct tm tm;
    int lvl = r->level < LOG_DEBUG || r->level > LOG_FATAL ? LOG_ERROR : (int)r->level;
    if (fmt == LOG_FORMAT_ZAP) {
        /* zap's ISO8601TimeEncoder: local time, milliseconds, zone as Z0700 */
        localtime_r(&r->ts.tv_sec, &tm);
        char zone[40] = "Z";
        long off = tm.tm_gmtoff;
        if (off != 0) {
            char sign = off < 0 ? '-' : '+';
            if (off < 0)
                off = -off;
            snprintf(zone, sizeof(zone), "%c%02d%02d", sign, (int)(off / 3600 % 100),
                     (int)(off / 60 % 60));
        }
        char caller[256];
        log_caller(caller, sizeof(caller), r->file, r->line);
        lb_printf(&b,
                  "{\"level\":\"%s\",\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ld%s\","
                  "\"caller\":",
                  level_names[lvl], tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                  tm.tm_min, tm.tm_sec, r->ts.tv_nsec / 1000000, zone);
        json_str(&b, caller);
        lb_str(&b, ",\"msg\":");
        json_str(&b, r->msg);
        for (size_t i = 0; i < r->n_fields; i++) {
            const struct log_field *f = &r->fields[i];
            if (!field_present(f))
                continue;
            lb_ch(&b, ',');
            json_str(&b, f->key);
            lb_ch(&b, ':');
            field_value(&b, f);
        }
        lb_str(&b, "}\n");
    } else {
        gmtime_r(&r->ts.tv_sec, &tm);
        lb_printf(&b, "%04d-%02d-%02d %02d:%02d:%02d.%06ld %c | %s: %s", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, r->ts.tv_nsec / 1000,
                  "DIWEC"[lvl], r -> module, r -> msg);
        bool first = true;
        for (size_t i = 0; i < r->n_fields; i++) {
            const struct log_field *f = &r->fields[i];
            if (!field_present(f))
                continue;
            lb_str(&b, first ? " {" : ", ");
            first = false;
            json_str(&b, f->key);
            lb_str(&b, ": ");
            field_value(&b, f);
        }
        if (!first)
            lb_ch(&b, '}');
        lb_ch(&b, '\n');
    }
    lb_ch(&b, '\0');
    char *out = NULL;
    if (!b.oom) {
        if (b.heap) {
            out = b.p;
            b.heap = false;
        } else if ((out = malloc(b.len)) != NULL) {
            memcpy(out, b.p, b.len);
        }
        if (out != NULL && len != NULL)
            *len = b.len - 1;
    }
    lb_free(&b);
    return out;
}

/* ---- outputs ---- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, 1000) <= 0)
                return; /* a stuck reader: drop the rest rather than hang */
        } else {
            return;
        }
    }
}

/* journal_field adds one field to a native-protocol datagram: KEY=value\n,
 * or KEY\n<le64 length>value\n when the value holds a newline. */
static void journal_field(struct lbuf *b, const char *key, const char *v, size_t n)
{
    lb_str(b, key);
    if (memchr(v, '\n', n) == NULL) {
        lb_ch(b, '=');
    } else {
        uint8_t le[8];
        for (int i = 0; i < 8; i++)
            le[i] = (uint8_t)((uint64_t)n >> (8 * i));
        lb_ch(b, '\n');
        lb_add(b, (const char *)le, 8);
    }
    lb_add(b, v, n);
    lb_ch(b, '\n');
}

/* journal_send sends one line as etcd's journal writer does: MESSAGE the
 * line itself, PRIORITY from the level, PACKAGE the caller's directory,
 * SYSLOG_IDENTIFIER the program's name. false if the journal refused it. */
static bool journal_send(int fd, const struct log_record *r, const char *line, size_t len)
{
    static const char prio[] = {'7', '6', '4', '3', '2'};
    struct lbuf b;
    lb_init(&b);
    if (len > 0 && line[len - 1] == '\n')
        len--;
    journal_field(&b, "MESSAGE", line, len);
    int lvl = r->level < LOG_DEBUG || r->level > LOG_FATAL ? LOG_ERROR : (int)r->level;
    journal_field(&b, "PRIORITY", &prio[lvl], 1);
    char caller[256];
    log_caller(caller, sizeof(caller), r->file, 0);
    char *slash = strrchr(caller, '/');
    if (slash != NULL)
        journal_field(&b, "PACKAGE", caller, (size_t)(slash - caller));
    else
        journal_field(&b, "PACKAGE", ".", 1); /* Go's filepath.Dir */
    journal_field(&b, "SYSLOG_IDENTIFIER", lg.ident, strlen(lg.ident));
    bool ok = !b.oom;
    if (ok) {
        ssize_t w;
        do
            w = send(fd, b.p, b.len, MSG_NOSIGNAL);
        while (w < 0 && errno == EINTR);
        ok = w == (ssize_t)b.len;
    }
    lb_free(&b);
    return ok;
}

static void emit(const struct log_record *r)
{
    size_t len;
    char *line = log_render(lg.fmt, r, &len);
    if (line == NULL)
        return;
    pthread_mutex_lock(&write_mu);
    for (size_t i = 0; i < lg.n_out; i++) {
        const struct output *o = &lg.out[i];
        if (o->kind == OUT_JOURNAL) {
            if (!journal_send(o->fd, r, line, len))
                write_all(2, line, len); /* as etcd: stderr when the journal fails */
        } else {
            write_all(o->fd, line, len);
        }
    }
    pthread_mutex_unlock(&write_mu);
    free(line);
}

void log_msg_at(const char *file, int line, enum log_level level, const char *module,
                const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    struct lbuf b;
    lb_init(&b);
    va_list ap;
    va_start(ap, fmt);
    lb_vprintf(&b, fmt, ap);
    va_end(ap);
    lb_ch(&b, '\0');
    struct log_record r = {
        .level = level, .file = file, .line = line, .module = module, .msg = b.oom ? fmt : b.p};
    clock_gettime(CLOCK_REALTIME, &r.ts);
    emit(&r);
    lb_free(&b);
}

void log_kv_at(const char *file, int line, enum log_level level, const char *module,
               const char *msg, const struct log_field *f, size_t n)
{
    if (!log_enabled(level))
        return;
    struct log_record r = {.level = level,
                           .file = file,
                           .line = line,
                           .module = module,
                           .msg = msg,
                           .fields = f,
                           .n_fields = n};
    clock_gettime(CLOCK_REALTIME, &r.ts);
    emit(&r);
}

/* ---- setup ---- */

static void close_outputs(struct output *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (out[i].owned)
            close(out[i].fd);
}

void log_defaults(void)
{
    pthread_mutex_lock(&write_mu);
    close_outputs(lg.out, lg.n_out);
    lg.fmt = LOG_FORMAT_CAPNSLOG;
    lg.out[0] = (struct output){OUT_FD, 2, false};
    lg.n_out = 1;
    pthread_mutex_unlock(&write_mu);
    log_min_level = LOG_INFO;
}

static int journal_open(char *err, size_t errlen)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "can't find journal (socket: %s)", strerror(errno));
        return -1;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", journal_path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        /* etcd's words: "dial unixgram /run/systemd/journal/socket: ..." */
        snprintf(err, errlen, "can't find journal (dial unixgram %s: connect: %s)", journal_path,
                 strerror(errno));
        char *e = err + strlen(err) - 1; /* Go's error texts are lower case */
        while (e > err && *e != ':')
            e--;
        if (e[0] == ':' && e[1] == ' ' && e[2] >= 'A' && e[2] <= 'Z')
            e[2] = (char)(e[2] - 'A' + 'a');
        close(fd);
        return -1;
    }
    return fd;
}

int log_setup(const char *logger, const char *outputs, const char *level, const char *argv0,
              char *err, size_t errlen)
{
    enum log_format fmt;
    if (logger == NULL || logger[0] == '\0' || strcmp(logger, "capnslog") == 0) {
        fmt = LOG_FORMAT_CAPNSLOG;
    } else if (strcmp(logger, "zap") == 0) {
        fmt = LOG_FORMAT_ZAP;
    } else {
        snprintf(err, errlen, "unknown logger option \"%s\"", logger);
        return -EINVAL;
    }
    int lvl = log_parse_level(level != NULL && level[0] ? level : "info");
    if (lvl < 0) {
        snprintf(err, errlen, "unknown level \"%s\"", level);
        return -EINVAL;
    }
    /* split, and check as etcd 3.4's setupLogging does */
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", outputs != NULL && outputs[0] ? outputs : "default");
    const char *names[MAX_OUTPUTS];
    size_t n = 0;
    char *p = tmp;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        if (n == MAX_OUTPUTS) {
            snprintf(err, errlen, "too many --log-outputs (at most %d)", MAX_OUTPUTS);
            return -EINVAL;
        }
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup = dup || strcmp(names[i], p) == 0;
        if (!dup)
            names[n++] = p;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    bool journal = false;
    for (size_t i = 0; i < n; i++)
        journal = journal || strcmp(names[i], "systemd/journal") == 0;
    if (n > 1) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(names[i], "default") == 0) {
                snprintf(err, errlen, "multi logoutput for \"default\" is not supported yet");
                return -EINVAL;
            }
        if (journal) {
            snprintf(err, errlen,
                     "running with systemd/journal but other '--log-outputs' values (%s) are "
                     "configured with 'default'; override 'default' value with something else",
                     outputs);
            return -EINVAL;
        }
    }
    struct output out[MAX_OUTPUTS];
    size_t n_out = 0;
    for (size_t i = 0; i < n; i++) {
        const char *v = names[i];
        struct output *o = &out[n_out];
        if (strcmp(v, "default") == 0 || strcmp(v, "stderr") == 0) {
            *o = (struct output){OUT_FD, 2, false};
        } else if (strcmp(v, "stdout") == 0) {
            *o = (struct output){OUT_FD, 1, false};
        } else if (strcmp(v, "systemd/journal") == 0) {
            int fd = journal_open(err, errlen);
            if (fd < 0) {
                close_outputs(out, n_out);
                return -EINVAL;
            }
            *o = (struct output){OUT_JOURNAL, fd, true};
        } else {
            const char *path = strncmp(v, "file://", 7) == 0 ? v + 7 : v;
            int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0) {
                snprintf(err, errlen, "open sink \"%s\": open %s: %s", v, path, strerror(errno));
                char *e = strrchr(err, ':'); /* Go's error texts are lower case */
                if (e != NULL && e[1] == ' ' && e[2] >= 'A' && e[2] <= 'Z')
                    e[2] = (char)(e[2] - 'A' + 'a');
                close_outputs(out, n_out);
                return -EINVAL;
            }
            *o = (struct output){OUT_FD, fd, true};
        }
        n_out++;
    }
    pthread_mutex_lock(&write_mu);
    close_outputs(lg.out, lg.n_out);
    memcpy(lg.out, out, sizeof(out[0]) * n_out);
    lg.n_out = n_out;
    lg.fmt = fmt;
    if (argv0 != NULL && argv0[0]) {
        const char *base = strrchr(argv0, '/');
        snprintf(lg.ident, sizeof(lg.ident), "%s", base != NULL ? base + 1 : argv0);
    }
    pthread_mutex_unlock(&write_mu);
    log_min_level = lvl;
    return 0;
}
