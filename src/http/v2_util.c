/* http/v2_util.c: pure helpers of the v2 keys emulation (v2_int.h): what
 * Go's path, net/url, net/http, strconv, encoding/json and time packages do
 * for etcd's v2 handlers, byte for byte where a client can see it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/text.h"
#include "http/v2_int.h"

/* ---- paths ---- */

size_t v2_path_clean(const char *p, size_t n, char *out)
{
    if (n == 0) {
        out[0] = '.';
        out[1] = 0;
        return 1;
    }
    bool rooted = p[0] == '/';
    size_t w = 0, r = 0, dotdot = 0;
    if (rooted) {
        out[w++] = '/';
        r = dotdot = 1;
    }
    while (r < n) {
        if (p[r] == '/') {
            r++;
        } else if (p[r] == '.' && (r + 1 == n || p[r + 1] == '/')) {
            r++;
        } else if (p[r] == '.' && r + 1 < n && p[r + 1] == '.' && (r + 2 == n || p[r + 2] == '/')) {
            r += 2;
            if (w > dotdot) {
                w--;
                while (w > dotdot && out[w] != '/')
                    w--;
            } else if (!rooted) {
                if (w > 0)
                    out[w++] = '/';
                out[w++] = '.';
                out[w++] = '.';
                dotdot = w;
            }
        } else {
            if ((rooted && w != 1) || (!rooted && w != 0))
                out[w++] = '/';
            for (; r < n && p[r] != '/'; r++)
                out[w++] = p[r];
        }
    }
    if (w == 0)
        out[w++] = '.';
    out[w] = 0;
    return w;
}

size_t v2_mux_clean(const char *p, size_t n, char *out)
{
    if (n == 0) {
        out[0] = '/';
        out[1] = 0;
        return 1;
    }
    char *tmp = NULL, small[256];
    const char *q = p;
    size_t qn = n;
    if (p[0] != '/') {
        tmp = n + 1 <= sizeof(small) ? small : malloc(n + 1);
        if (tmp == NULL) { /* cannot happen in practice; clean without the slash */
            return v2_path_clean(p, n, out);
        }
        tmp[0] = '/';
        memcpy(tmp + 1, p, n);
        q = tmp;
        qn = n + 1;
    }
    size_t w = v2_path_clean(q, qn, out);
    if (q[qn - 1] == '/' && !(w == 1 && out[0] == '/')) {
        out[w++] = '/';
        out[w] = 0;
    }
    if (tmp != NULL && tmp != small)
        free(tmp);
    return w;
}

int v2_path_escape(struct buf *b, const char *p, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    strchr("-_.~$&+,/:;=@", c) != NULL;
        if (c == 0)
            keep = false;
        int rv;
        if (keep) {
            rv = buf_append_byte(b, c);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            rv = buf_append(b, e, 3);
        }
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* ---- the key layout ---- */

int v2_key(struct buf *out, const char *pfx, const char *path, size_t n, int add, bool dir)
{
    int depth = add;
    for (size_t i = 0; i < n; i++)
        depth += path[i] == '/';
    char d[24];
    int dn = snprintf(d, sizeof(d), "/%03d/k/", depth);
    buf_reset(out);
    if (buf_append(out, pfx, strlen(pfx)) != 0 || buf_append(out, d, (size_t)dn) != 0 ||
        buf_append(out, path, n) != 0 || (dir && buf_append_byte(out, '/') != 0))
        return -ENOMEM;
    return 0;
}

bool v2_key_path(const char *pfx, const uint8_t *key, size_t n, struct buf *out, bool *dir)
{
    size_t pl = strlen(pfx), i = pl;
    if (n < pl + 7 || memcmp(key, pfx, pl) != 0 || key[i] != '/')
        return false;
    i++;
    size_t digits = 0;
    while (i < n && key[i] >= '0' && key[i] <= '9') {
        i++;
        digits++;
    }
    if (digits == 0 || n - i < 3 || memcmp(key + i, "/k/", 3) != 0)
        return false;
    i += 2; /* the rest starts with the "/" of "/1..." */
    const char *rest = (const char *)key + i;
    size_t rn = n - i;
    buf_reset(out);
    if (buf_reserve(out, rn + 3) != 0)
        return false;
    size_t w = v2_path_clean(rest, rn, (char *)out->data);
    if (w < 2 || out->data[0] != '/' || out->data[1] != '1' || (w > 2 && out->data[2] != '/'))
        return false;
    out->len = w;
    *dir = key[n - 1] == '/';
    return true;
}

int v2_prefix_end(struct buf *out, const uint8_t *p, size_t n)
{
    buf_reset(out);
    for (size_t i = n; i > 0; i--) {
        if (p[i - 1] < 0xff) {
            if (buf_append(out, p, i) != 0)
                return -ENOMEM;
            out->data[i - 1]++;
            return 0;
        }
    }
    return buf_append_byte(out, 0);
}

/* ---- forms ---- */

/* unescape is Go's QueryUnescape into |out| (room for n + 1); -1 with
 * |bad| (3 bytes at most) on a bad escape. */
static long unescape(const char *s, size_t n, char *out, const char **bad, size_t *badn)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int a = i + 2 < n ? hex_digit((unsigned char)s[i + 1]) : -1;
            int b = i + 2 < n ? hex_digit((unsigned char)s[i + 2]) : -1;
            if (a < 0 || b < 0) {
                *bad = s + i;
                *badn = n - i > 3 ? 3 : n - i;
                return -1;
            }
            c = (char)(a * 16 + b);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        out[w++] = c;
    }
    out[w] = 0;
    return (long)w;
}

static void escape_error(char *err, size_t errlen, const char *bad, size_t badn)
{
    struct buf b = {0};
    if (v2_go_quote(&b, bad, badn) == 0)
        set_errf(err, errlen, "invalid URL escape %.*s", (int)b.len, (const char *)b.data);
    buf_free(&b);
}

int v2_form_parse(struct v2_form *f, const char *s, size_t n, char *err, size_t errlen)
{
    bool failed = false;
    size_t i = 0;
    while (i < n) {
        const char *amp = memchr(s + i, '&', n - i);
        size_t end = amp ? (size_t)(amp - s) : n;
        const char *part = s + i;
        size_t pn = end - i;
        i = amp ? end + 1 : n;
        if (memchr(part, ';', pn) != NULL) {
            set_errf(err, errlen, "invalid semicolon separator in query");
            failed = true;
            continue;
        }
        if (pn == 0)
            continue;
        const char *eq = memchr(part, '=', pn);
        size_t kn = eq ? (size_t)(eq - part) : pn;
        const char *v = eq ? eq + 1 : part + pn;
        size_t vn = eq ? pn - kn - 1 : 0;
        char *k = malloc(kn + 1), *val = malloc(vn + 1);
        if (k == NULL || val == NULL) {
            free(k);
            free(val);
            return -ENOMEM;
        }
        const char *bad = NULL;
        size_t badn = 0;
        long kl = unescape(part, kn, k, &bad, &badn);
        long vl = kl < 0 ? -1 : unescape(v, vn, val, &bad, &badn);
        if (kl < 0 || vl < 0) {
            if (!failed)
                escape_error(err, errlen, bad, badn);
            failed = true;
            free(k);
            free(val);
            continue;
        }
        if (f->n == f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 8;
            struct v2_field *nf = realloc(f->f, cap * sizeof(*nf));
            if (nf == NULL) {
                free(k);
                free(val);
                return -ENOMEM;
            }
            f->f = nf;
            f->cap = cap;
        }
        f->f[f->n++] = (struct v2_field){k, val, (size_t)kl, (size_t)vl};
    }
    return failed ? 1 : 0;
}

const struct v2_field *v2_form_get(const struct v2_form *f, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < f->n; i++)
        if (f->f[i].kn == nl && memcmp(f->f[i].k, name, nl) == 0)
            return &f->f[i];
    return NULL;
}

void v2_form_free(struct v2_form *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->f[i].k);
        free(f->f[i].v);
    }
    free(f->f);
    memset(f, 0, sizeof(*f));
}

bool v2_ctype_is_form(const char *ctype)
{
    static const char want[] = "application/x-www-form-urlencoded";
    if (ctype == NULL)
        return false;
    while (*ctype == ' ' || *ctype == '\t')
        ctype++;
    size_t n = strcspn(ctype, ";");
    while (n > 0 && (ctype[n - 1] == ' ' || ctype[n - 1] == '\t'))
        n--;
    return n == sizeof(want) - 1 && strncasecmp(ctype, want, n) == 0;
}

bool v2_parse_bool(const char *s, size_t n, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < 6; i++) {
        if (strlen(yes[i]) == n && memcmp(s, yes[i], n) == 0) {
            *out = true;
            return true;
        }
        if (strlen(no[i]) == n && memcmp(s, no[i], n) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

bool v2_parse_uint(const char *s, size_t n, uint64_t *out)
{
    if (n == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* ---- output ---- */

/* utf8_decode is Go's utf8.DecodeRune: the rune and its size, or
 * (-1, 1) for an invalid or truncated sequence. */
static long utf8_decode(const uint8_t *s, size_t n, size_t *size)
{
    *size = 1;
    uint8_t c = s[0];
    if (c < 0x80)
        return c;
    size_t need;
    long r, min;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        r = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        r = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        r = c & 0x07;
        min = 0x10000;
    } else {
        return -1;
    }
    if (n < need)
        return -1;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        r = (r << 6) | (s[i] & 0x3f);
    }
    if (r < min || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff))
        return -1;
    *size = need;
    return r;
}

int v2_json_string(struct buf *b, const void *sv, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = sv;
    if (buf_append_byte(b, '"') != 0)
        return -ENOMEM;
    size_t start = 0, i = 0;
    int rv = 0;
    while (i < n && rv == 0) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
                i++;
                continue;
            }
            rv = buf_append(b, s + start, i - start);
            char e[6] = {'\\', 0};
            size_t en = 2;
            /* clang-format off */
            switch (c) {
            case '\\':
            case '"': e[1] = (char)c; break;
            case '\n': e[1] = 'n'; break;
            case '\r': e[1] = 'r'; break;
            case '\t': e[1] = 't'; break;
            default:
                e[1] = 'u';
                e[2] = '0';
                e[3] = '0';
                e[4] = hex[c >> 4];
                e[5] = hex[c & 15];
                en = 6;
            }
            /* clang-format on */
            if (rv == 0)
                rv = buf_append(b, e, en);
            i++;
            start = i;
            continue;
        }
        size_t size;
        long r = utf8_decode(s + i, n - i, &size);
        if (r < 0 || r == 0x2028 || r == 0x2029) {
            rv = buf_append(b, s + start, i - start);
            if (rv == 0)
                rv = buf_append(b, r < 0 ? "\\ufffd" : r == 0x2028 ? "\\u2028" : "\\u2029", 6);
            i += size;
            start = i;
            continue;
        }
        i += size;
    }
    if (rv == 0)
        rv = buf_append(b, s + start, n - start);
    if (rv == 0)
        rv = buf_append_byte(b, '"');
    return rv ? -ENOMEM : 0;
}

int v2_go_quote(struct buf *b, const void *sv, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = sv;
    int rv = buf_append_byte(b, '"');
    for (size_t i = 0; i < n && rv == 0;) {
        size_t size;
        long r = utf8_decode(s + i, n - i, &size);
        char e[16];
        int en;
        if (r < 0) {
            en = snprintf(e, sizeof(e), "\\x%c%c", hex[s[i] >> 4], hex[s[i] & 15]);
        } else if (r == '"' || r == '\\') {
            en = snprintf(e, sizeof(e), "\\%c", (char)r);
        } else if (r >= 0x20 && r < 0x7f) {
            en = snprintf(e, sizeof(e), "%c", (char)r);
        } else if (r < 0x80) {
            const char *esc = NULL;
            /* clang-format off */
            switch (r) {
            case '\a': esc = "\\a"; break;
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            case '\v': esc = "\\v"; break;
            default: break;
            }
            /* clang-format on */
            if (esc != NULL)
                en = snprintf(e, sizeof(e), "%s", esc);
            else
                en = snprintf(e, sizeof(e), "\\x%c%c", hex[r >> 4], hex[r & 15]);
        } else if (r < 0xa0) {
            en = snprintf(e, sizeof(e), "\\u%04lx", (unsigned long)r);
        } else {
            memcpy(e, s + i, size);
            en = (int)size;
        }
        rv = buf_append(b, e, (size_t)en);
        i += size;
    }
    if (rv == 0)
        rv = buf_append_byte(b, '"');
    return rv ? -ENOMEM : 0;
}

int v2_rfc3339(char *out, size_t cap, int64_t unix_ns)
{
    int64_t sec = unix_ns / 1000000000, ns = unix_ns % 1000000000;
    if (ns < 0) {
        ns += 1000000000;
        sec--;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    gmtime_r(&t, &tm);
    char frac[16] = "";
    if (ns != 0) {
        snprintf(frac, sizeof(frac), ".%09lld", (long long)ns);
        size_t l = strlen(frac);
        while (l > 1 && frac[l - 1] == '0')
            frac[--l] = 0;
    }
    return snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", tm.tm_year + 1900, tm.tm_mon + 1,
                    tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}
