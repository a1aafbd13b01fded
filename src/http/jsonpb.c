/* src/http/jsonpb.c: etcd 3.4's gateway JSON <-> protobuf-c messages (see
 * jsonpb.h for the mapping and what differs from etcd).
 *
 * Reference behaviour: golang/protobuf 1.3 jsonpb/jsonpb.go
 * (Marshaler.marshalObject/marshalValue, Unmarshaler.unmarshalValue) and
 * the Go 1.19 library under it: encoding/json scanner.go (syntax errors),
 * stream.go (Decoder.readValue: one value, "unexpected EOF"), decode.go
 * (literalStore: type errors, unquote), encode.go (encodeState.string),
 * encoding/base64 (decodeQuantum: error offsets), strconv (Quote,
 * FormatFloat). Checked against etcd 3.4.23 with curl.
 *
 * Input goes text -> tree -> message: Go's scanner is run first over the
 * whole value (so a syntax error anywhere wins over a type error, as in Go)
 * and records each value's span; then the message is filled field by field
 * in Go's order (a message's plain fields, then its oneof members), each
 * field taking its value from the members of the JSON object. The scanner
 * keeps its own stack and the tree is walked only as deep as the message
 * nests (JSONPB_MAX_DEPTH), so no input recurses without bound. */
#include "http/jsonpb.h"
#include "base/text.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GO_MAX_NESTING 10000 /* encoding/json maxNestingDepth */

static const char hexd[] = "0123456789abcdef";

/* ---------------------------------------------------------------- UTF-8 */

/* utf8_rune decodes the rune at s[0..n) (n >= 1) as Go's utf8.DecodeRune:
 * returns its length and sets *r, or returns 1 with *r = -1 where Go reads
 * RuneError (a byte that starts no valid sequence). */
static size_t utf8_rune(const uint8_t *s, size_t n, int32_t *r)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xbf;
    size_t len;
    int32_t v;
    if (c < 0x80) {
        *r = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0f;
        lo = c == 0xe0 ? 0xa0 : 0x80; /* no overlong forms */
        hi = c == 0xed ? 0x9f : 0xbf; /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf; /* <= U+10FFFF */
    } else {
        *r = -1;
        return 1;
    }
    if (n < len) {
        *r = -1;
        return 1;
    }
    for (size_t i = 1; i < len; i++, lo = 0x80, hi = 0xbf) {
        if (s[i] < lo || s[i] > hi) {
            *r = -1;
            return 1;
        }
        v = v << 6 | (s[i] & 0x3f);
    }
    *r = v;
    return len;
}

static size_t utf8_put(uint8_t *w, int32_t r)
{
    if (r < 0x80) {
        w[0] = (uint8_t)r;
        return 1;
    }
    if (r < 0x800) {
        w[0] = (uint8_t)(0xc0 | r >> 6);
        w[1] = (uint8_t)(0x80 | (r & 0x3f));
        return 2;
    }
    if (r < 0x10000) {
        w[0] = (uint8_t)(0xe0 | r >> 12);
        w[1] = (uint8_t)(0x80 | ((r >> 6) & 0x3f));
        w[2] = (uint8_t)(0x80 | (r & 0x3f));
        return 3;
    }
    w[0] = (uint8_t)(0xf0 | r >> 18);
    w[1] = (uint8_t)(0x80 | ((r >> 12) & 0x3f));
    w[2] = (uint8_t)(0x80 | ((r >> 6) & 0x3f));
    w[3] = (uint8_t)(0x80 | (r & 0x3f));
    return 4;
}

/* go_isprint approximates Go's strconv.IsPrint beyond ASCII: it knows the
 * Latin-1 and general-punctuation controls, spaces and format characters,
 * BOM, private use and noncharacters, not the unassigned code points. */
static bool go_isprint(int32_t r)
{
    if (r < 0x80)
        return r >= 0x20 && r < 0x7f;
    return !(r <= 0xa0 || r == 0xad || (r >= 0x2000 && r <= 0x200f) ||
             (r >= 0x2028 && r <= 0x202f) || (r >= 0x205f && r <= 0x206f) || r == 0x3000 ||
             r == 0xfeff || (r >= 0xfff9 && r <= 0xfffb) || (r >= 0xe000 && r <= 0xf8ff) ||
             (r >= 0xfdd0 && r <= 0xfdef) || (r & 0xfffe) == 0xfffe || r >= 0xf0000);
}

/* go_quote appends strconv.Quote of s[0..n) (what fmt's %q prints) to q. */
static int go_quote(struct buf *q, const uint8_t *s, size_t n)
{
    int rc = buf_append_byte(q, '"');
    for (size_t i = 0; i < n && rc == 0;) {
        int32_t r;
        size_t l = utf8_rune(s + i, n - i, &r);
        char e[12];
        size_t el = 0;
        if (r < 0) {
            el = (size_t)snprintf(e, sizeof(e), "\\x%c%c", hexd[s[i] >> 4], hexd[s[i] & 15]);
        } else if (r == '"' || r == '\\') {
            e[0] = '\\', e[1] = (char)r, el = 2;
        } else if (go_isprint(r)) {
            rc = buf_append(q, s + i, l);
        } else {
            static const char ctl[] = "\a\b\f\n\r\t\v";
            const char *sh = r != 0 ? strchr(ctl, r) : NULL;
            if (sh != NULL)
                el = (size_t)snprintf(e, sizeof(e), "\\%c", "abfnrtv"[sh - ctl]);
            else if (r < 0x20 || r == 0x7f)
                el = (size_t)snprintf(e, sizeof(e), "\\x%02x", (unsigned)r);
            else if (r < 0x10000)
                el = (size_t)snprintf(e, sizeof(e), "\\u%04x", (unsigned)r);
            else
                el = (size_t)snprintf(e, sizeof(e), "\\U%08x", (unsigned)r);
        }
        if (rc == 0 && el)
            rc = buf_append(q, e, el);
        i += l;
    }
    if (rc == 0)
        rc = buf_append_byte(q, '"');
    return rc;
}

/* ---------------------------------------------------------------- output */

struct out {
    struct buf *b;
    int err; /* first error; later writes are skipped */
};

static void put(struct out *o, const void *p, size_t n)
{
    if (o->err == 0)
        o->err = buf_append(o->b, p, n);
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* put_string: s as Go's json.Marshal writes a string (HTML-safe). */
static void put_string(struct out *o, const char *s, size_t n)
{
    size_t start = 0, i = 0;
    put(o, "\"", 1);
    while (i < n) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80) {
            if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
                i++;
                continue;
            }
            char e[6] = {'\\', (char)c, 'u', '0', '0', 0};
            size_t el = 2;
            if (c == '\n' || c == '\r' || c == '\t') {
                e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            } else if (c != '"' && c != '\\') {
                memcpy(e + 1, "u00", 3);
                e[4] = hexd[c >> 4], e[5] = hexd[c & 15], el = 6;
            }
            put(o, s + start, i - start);
            put(o, e, el);
            start = ++i;
            continue;
        }
        int32_t r;
        size_t l = utf8_rune((const uint8_t *)s + i, n - i, &r);
        if (r < 0 || r == 0x2028 || r == 0x2029) {
            put(o, s + start, i - start);
            put(o, r < 0 ? "\\ufffd" : r == 0x2028 ? "\\u2028" : "\\u2029", 6);
            start = i + l;
        }
        i += l;
    }
    put(o, s + start, n - start);
    put(o, "\"", 1);
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void put_base64(struct out *o, const uint8_t *p, size_t n)
{
    size_t need = (n + 2) / 3 * 4 + 2;
    if (o->err || (o->err = buf_reserve(o->b, need)) != 0)
        return;
    char *d = (char *)o->b->data + o->b->len;
    *d++ = '"';
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *d++ = b64chars[v >> 18];
        *d++ = b64chars[(v >> 12) & 63];
        *d++ = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        *d++ = i + 2 < n ? b64chars[v & 63] : '=';
    }
    *d = '"';
    o->b->len += need;
}

/* put_float: f as Go's json.Marshal writes a float64/float32 (|bits|): the
 * shortest decimal that reads back as f, in %f form unless |f| < 1e-6 or
 * >= 1e21, then %e form with e-07 shortened to e-7. jsonpb quotes the
 * non-finite values. */
static void put_float(struct out *o, double f, int bits)
{
    if (isnan(f) || isinf(f)) {
        puts_(o, isnan(f) ? "\"NaN\"" : f > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        return;
    }
    char e[48], digs[24], s[64];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof(e), "%.*e", p, f);
        if (bits == 32 ? strtof(e, NULL) == (float)f : strtod(e, NULL) == f)
            break;
    }
    const char *q = e + (e[0] == '-');
    int nd = 0;
    for (; *q != 'e'; q++)
        if (*q != '.')
            digs[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digs[nd - 1] == '0')
        nd--;
    double a = fabs(f);
    bool sci =
        a != 0 && (bits == 32 ? ((float)a < 1e-6f || (float)a >= 1e21f) : (a < 1e-6 || a >= 1e21));
    size_t k = 0;
    if (e[0] == '-')
        s[k++] = '-';
    if (sci) {
        s[k++] = digs[0];
        if (nd > 1) {
            s[k++] = '.';
            memcpy(s + k, digs + 1, (size_t)nd - 1);
            k += (size_t)nd - 1;
        }
        k += (size_t)snprintf(s + k, sizeof(s) - k, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
        if (s[k - 3] == '-' && s[k - 2] == '0' && s[k - 4] == 'e')
            s[k - 2] = s[k - 1], k--;
    } else if (exp < 0) {
        s[k++] = '0', s[k++] = '.';
        for (int i = -1; i > exp; i--)
            s[k++] = '0';
        memcpy(s + k, digs, (size_t)nd);
        k += (size_t)nd;
    } else {
        for (int i = 0; i <= exp; i++)
            s[k++] = i < nd ? digs[i] : '0';
        if (nd > exp + 1) {
            s[k++] = '.';
            memcpy(s + k, digs + exp + 1, (size_t)(nd - exp - 1));
            k += (size_t)(nd - exp - 1);
        }
    }
    put(o, s, k);
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return sizeof(uint64_t);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    default: /* 32-bit ints, enums, float */
        return sizeof(uint32_t);
    }
}

/* is_default: a proto3 field holding its default, which Go leaves out */
static bool is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_BOOL:
        return *(const protobuf_c_boolean *)p == 0;
    case PROTOBUF_C_TYPE_FLOAT:
        return *(const float *)p == 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        return *(const double *)p == 0;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return s == NULL || s[0] == 0;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(void *const *)p == NULL;
    default:
        return elem_size(f->type) == 8 ? *(const uint64_t *)p == 0 : *(const uint32_t *)p == 0;
    }
}

static bool is_present(const ProtobufCFieldDescriptor *f, const char *base)
{
    const void *p = base + f->offset;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) /* written even at its default */
        return *(const uint32_t *)(base + f->quantifier_offset) == f->id;
    if (f->label == PROTOBUF_C_LABEL_REQUIRED)
        return true;
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL) { /* proto2, proto3 "optional" */
        if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE) {
            const void *ptr = *(void *const *)p;
            return ptr != NULL && ptr != f->default_value;
        }
        return *(const protobuf_c_boolean *)(base + f->quantifier_offset);
    }
    return !is_default(f, p);
}

static void write_msg(struct out *o, const ProtobufCMessage *m, int depth);

static void write_value(struct out *o, const ProtobufCFieldDescriptor *f, const void *p, int depth)
{
    char t[32];
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        snprintf(t, sizeof(t), "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        snprintf(t, sizeof(t), "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        snprintf(t, sizeof(t), "\"%" PRId64 "\"", *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(t, sizeof(t), "\"%" PRIu64 "\"", *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        snprintf(t, sizeof(t), "%s", *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        put_float(o, *(const float *)p, 32);
        return;
    case PROTOBUF_C_TYPE_DOUBLE:
        put_float(o, *(const double *)p, 64);
        return;
    case PROTOBUF_C_TYPE_ENUM: {
        int32_t v = *(const int32_t *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        if (ev == NULL) { /* no name: Go prints the bare number */
            snprintf(t, sizeof(t), "%" PRId32, v);
            break;
        }
        put(o, "\"", 1);
        puts_(o, ev->name);
        put(o, "\"", 1);
        return;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        put_string(o, s ? s : "", s ? strlen(s) : 0);
        return;
    }
    case PROTOBUF_C_TYPE_BYTES:
        put_base64(o, ((const ProtobufCBinaryData *)p)->data,
                   ((const ProtobufCBinaryData *)p)->len);
        return;
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sm = *(ProtobufCMessage *const *)p;
        if (sm == NULL) /* a oneof set to a nil message: Go writes null */
            puts_(o, "null");
        else
            write_msg(o, sm, depth + 1);
        return;
    }
    default:
        return;
    }
    puts_(o, t);
}

static void write_msg(struct out *o, const ProtobufCMessage *m, int depth)
{
    if (depth > JSONPB_MAX_DEPTH) {
        if (o->err == 0)
            o->err = -EINVAL;
        return;
    }
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool first = true;
    put(o, "{", 1);
    for (unsigned i = 0; i < d->n_fields && o->err == 0; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        size_t n = 0;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if ((n = *(const size_t *)(base + f->quantifier_offset)) == 0)
                continue;
        } else if (!is_present(f, base)) {
            continue;
        }
        if (!first)
            put(o, ",", 1);
        put(o, "\"", 1);
        puts_(o, f->name);
        put(o, "\":", 2);
        first = false;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            write_value(o, f, base + f->offset, depth);
            continue;
        }
        const char *arr = *(char *const *)(base + f->offset);
        size_t sz = elem_size(f->type);
        put(o, "[", 1);
        for (size_t j = 0; j < n; j++) {
            if (j > 0)
                put(o, ",", 1);
            write_value(o, f, arr + j * sz, depth);
        }
        put(o, "]", 1);
    }
    put(o, "}", 1);
}

int jsonpb_write(const ProtobufCMessage *m, struct buf *out)
{
    struct out o = {out, 0};
    size_t len0 = out->len;
    write_msg(&o, m, 0);
    if (o.err != 0)
        out->len = len0;
    return o.err;
}

int jsonpb_encode(const ProtobufCMessageDescriptor *d, const uint8_t *msg, size_t len,
                  struct buf *out)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
    if (m == NULL)
        return -EINVAL;
    int rc = jsonpb_write(m, out);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

json_t *jsonpb_to_json(const ProtobufCMessage *m)
{
    struct buf b = {0};
    json_t *j = NULL;
    if (jsonpb_write(m, &b) == 0)
        j = json_loadb((const char *)b.data, b.len, JSON_ALLOW_NUL, NULL);
    buf_free(&b);
    return j;
}

/* ---------------------------------------------------------------- Go's JSON scanner */

enum jkind { JK_NULL, JK_BOOL, JK_NUM, JK_STR, JK_ARR, JK_OBJ };
static const char *const kind_go[] = {"null", "bool", "number", "string", "array", "object"};

#define NOKEY UINT32_MAX

/* one JSON value of the input */
struct jnode {
    uint32_t start, end; /* its text */
    uint32_t key;        /* in an object: offset of its key's opening quote */
    int32_t child, last; /* an array's elements, an object's members */
    int32_t next, up;    /* next sibling; enclosing array or object */
    uint8_t kind;
};

enum scan_mode {
    DECODER,   /* json.Decoder.Decode: one value, the rest unread */
    UNMARSHAL, /* json.Unmarshal: exactly one value */
};

struct scan {
    bool tree;          /* build nodes */
    struct jnode *node; /* the tree, node[0] the root */
    size_t nn, cap;
    uint8_t root_kind; /* the top-level value */
    uint32_t root_start, root_end;
};

/* the scanner's states, after Go's scanner.go step functions */
// clang-format off
enum {
    S_VALUE, S_VALUE_OR_CLOSE, S_KEY_OR_CLOSE, S_KEY,  /* stateBeginValue, ...OrEmpty, ... */
    S_STR, S_ESC, S_U1, S_U2, S_U3, S_U4,              /* stateInString... */
    S_NEG, S_INT, S_ZERO, S_DOT, S_FRAC, S_EXP, S_EXPSIGN, S_EXPDIG, /* numbers */
    S_LIT,                                             /* true, false, null */
    S_END, S_TOP,                                      /* stateEndValue, stateEndTop */
};
// clang-format on
enum { P_OBJ_KEY, P_OBJ_VAL, P_ARR }; /* what an open object/array waits for */

/* syntax_err: Go's SyntaxError text, with its quoteChar */
static int syntax_err(char *err, size_t errlen, uint8_t c, const char *ctx)
{
    char q[16];
    if (c == '\'' || c == '"') {
        snprintf(q, sizeof(q), "%s", c == '"' ? "'\"'" : "'\\''");
    } else {
        uint8_t u[2];
        struct buf b = {0};
        size_t ul = utf8_put(u, c);
        if (go_quote(&b, u, ul) != 0 || b.len < 2 || b.len > 12) {
            buf_free(&b);
            return -ENOMEM;
        }
        snprintf(q, sizeof(q), "'%.*s'", (int)b.len - 2, (const char *)b.data + 1);
        buf_free(&b);
    }
    set_errf(err, errlen, "invalid character %s %s", q, ctx);
    return -EINVAL;
}

static bool blank(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool isdig(int c)
{
    return c >= '0' && c <= '9';
}

static bool ishex(int c)
{
    return isdig(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* node_new: a value begins at |start| inside |up| (-1: top level) */
static int node_new(struct scan *sc, uint8_t kind, uint32_t start, uint32_t key, int32_t up)
{
    if (sc->nn == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 64;
        struct jnode *n = realloc(sc->node, cap * sizeof(*n));
        if (n == NULL)
            return -ENOMEM;
        sc->node = n, sc->cap = cap;
    }
    int32_t i = (int32_t)sc->nn++;
    sc->node[i] = (struct jnode){start, start, key, -1, -1, -1, up, kind};
    if (up >= 0) {
        if (sc->node[up].child < 0)
            sc->node[up].child = i;
        else
            sc->node[sc->node[up].last].next = i;
        sc->node[up].last = i;
    }
    return i;
}

/* go_scan runs Go's scanner over s[0..n) in |mode|. Returns 0, 1 (DECODER:
 * nothing but blanks, Go's io.EOF), -EINVAL with Go's text in err, or
 * -ENOMEM. A virtual blank after the last byte ends a trailing number as
 * Go's scanner.eof() does. */
static int go_scan(struct scan *sc, const uint8_t *s, size_t n, enum scan_mode mode, char *err,
                   size_t errlen)
{
    struct buf stack = {0}; /* P_* of each open array/object */
    int st = S_VALUE, rc = 0;
    int32_t cur = -1, leaf = -1; /* open container; scalar being read */
    uint32_t key = NOKEY, keystart = 0;
    bool in_key = false, seen = false;
    const char *lit = NULL, *litname = NULL;
    char litctx[64];
    uint8_t kind = 0;

    for (size_t i = 0;; i++) {
        if (i > n) { /* the virtual blank did not finish the value */
            rc = 1;
            if (mode == UNMARSHAL || seen) {
                set_errf(err, errlen,
                       mode == DECODER ? "unexpected EOF" : "unexpected end of JSON input");
                rc = -EINVAL;
            }
            break;
        }
        int c = i < n ? s[i] : ' ';
        const char *ctx = NULL; /* set: a syntax error at c */
    again:
        switch (st) {
        case S_VALUE_OR_CLOSE:
        case S_KEY_OR_CLOSE:
            if (blank(c))
                continue;
            if (c == (st == S_VALUE_OR_CLOSE ? ']' : '}'))
                goto close;
            st = st == S_VALUE_OR_CLOSE ? S_VALUE : S_KEY;
            goto again;
        case S_VALUE: {
            if (blank(c))
                continue;
            bool top = stack.len == 0;
            seen = true;
            switch (c) {
            case '{':
            case '[':
                kind = c == '{' ? JK_OBJ : JK_ARR;
                if (stack.len >= GO_MAX_NESTING) {
                    ctx = "exceeded max depth";
                    break;
                }
                if ((rc = buf_append_byte(&stack, c == '{' ? P_OBJ_KEY : P_ARR)) != 0)
                    goto out;
                st = c == '{' ? S_KEY_OR_CLOSE : S_VALUE_OR_CLOSE;
                break;
            case '"':
                kind = JK_STR, st = S_STR, in_key = false;
                break;
            case '-':
                kind = JK_NUM, st = S_NEG;
                break;
            case '0':
                kind = JK_NUM, st = S_ZERO;
                break;
            case 't':
            case 'f':
            case 'n':
                kind = c == 'n' ? JK_NULL : JK_BOOL, st = S_LIT;
                litname = c == 't' ? "true" : c == 'f' ? "false" : "null";
                lit = litname + 1;
                break;
            default:
                if (c >= '1' && c <= '9') {
                    kind = JK_NUM, st = S_INT;
                    break;
                }
                ctx = "looking for beginning of value";
            }
            if (ctx != NULL)
                break;
            if (top)
                sc->root_kind = kind, sc->root_start = (uint32_t)i;
            if (sc->tree) {
                int32_t k = node_new(sc, kind, (uint32_t)i, key, cur);
                if (k < 0) {
                    rc = k;
                    goto out;
                }
                key = NOKEY;
                if (kind >= JK_ARR)
                    cur = k;
                else
                    leaf = k;
            }
            continue;
        }
        case S_KEY:
            if (blank(c))
                continue;
            if (c != '"') {
                ctx = "looking for beginning of object key string";
                break;
            }
            st = S_STR, in_key = true, keystart = (uint32_t)i;
            continue;
        case S_STR:
            if (c == '"') {
                if (in_key) {
                    key = keystart;
                    st = S_END;
                    continue;
                }
                i++;
                goto scalar_end;
            }
            if (c == '\\')
                st = S_ESC;
            else if (c < 0x20)
                ctx = "in string literal";
            break;
        case S_ESC:
            if (c == 'u')
                st = S_U1;
            else if (c != 0 && strchr("bfnrt\\/\"", c) != NULL)
                st = S_STR;
            else
                ctx = "in string escape code";
            break;
        case S_U1:
        case S_U2:
        case S_U3:
        case S_U4:
            if (!ishex(c))
                ctx = "in \\u hexadecimal character escape";
            else
                st = st == S_U4 ? S_STR : st + 1;
            break;
        case S_NEG:
            if (c == '0')
                st = S_ZERO;
            else if (c >= '1' && c <= '9')
                st = S_INT;
            else
                ctx = "in numeric literal";
            break;
        case S_INT:
        case S_ZERO:
            if (st == S_INT && isdig(c))
                continue;
            if (c == '.')
                st = S_DOT;
            else if (c == 'e' || c == 'E')
                st = S_EXP;
            else
                goto scalar_end;
            break;
        case S_DOT:
            if (isdig(c))
                st = S_FRAC;
            else
                ctx = "after decimal point in numeric literal";
            break;
        case S_FRAC:
        case S_EXPDIG:
            if (isdig(c))
                continue;
            if (st == S_FRAC && (c == 'e' || c == 'E')) {
                st = S_EXP;
                continue;
            }
            goto scalar_end;
        case S_EXP:
        case S_EXPSIGN:
            if (st == S_EXP && (c == '+' || c == '-'))
                st = S_EXPSIGN;
            else if (isdig(c))
                st = S_EXPDIG;
            else
                ctx = "in exponent of numeric literal";
            break;
        case S_LIT:
            if (c != *lit) {
                snprintf(litctx, sizeof(litctx), "in literal %s (expecting '%c')", litname, *lit);
                ctx = litctx;
                break;
            }
            if (*++lit == 0) {
                i++;
                goto scalar_end;
            }
            continue;
        case S_END:
            if (stack.len == 0) { /* the top-level value is complete */
                if (mode == DECODER || i >= n)
                    goto out;
                st = S_TOP;
                goto again;
            }
            if (blank(c))
                continue;
            switch (stack.data[stack.len - 1]) {
            case P_OBJ_KEY:
                if (c == ':')
                    stack.data[stack.len - 1] = P_OBJ_VAL, st = S_VALUE;
                else
                    ctx = "after object key";
                break;
            case P_OBJ_VAL:
                if (c == ',')
                    stack.data[stack.len - 1] = P_OBJ_KEY, st = S_KEY;
                else if (c == '}')
                    goto close;
                else
                    ctx = "after object key:value pair";
                break;
            default:
                if (c == ',')
                    st = S_VALUE;
                else if (c == ']')
                    goto close;
                else
                    ctx = "after array element";
            }
            break;
        case S_TOP:
            if (i >= n)
                goto out;
            if (!blank(c))
                ctx = "after top-level value";
            break;
        }
        if (ctx != NULL) {
            if (mode == DECODER && i >= n) /* the virtual blank: Go reports EOF */
                set_errf(err, errlen, "unexpected EOF"), rc = -EINVAL;
            else
                rc = syntax_err(err, errlen, (uint8_t)c, ctx);
            goto out;
        }
        continue;
    scalar_end: /* a scalar ended before s[i] (which is read again) */
        if (stack.len == 0)
            sc->root_end = (uint32_t)i;
        if (sc->tree && leaf >= 0)
            sc->node[leaf].end = (uint32_t)i;
        st = S_END;
        if (i > n) /* a string or literal ended on the last byte */
            i = n;
        c = i < n ? s[i] : ' ';
        goto again;
    close:
        stack.len--;
        if (stack.len == 0)
            sc->root_end = (uint32_t)i + 1;
        if (sc->tree) {
            sc->node[cur].end = (uint32_t)i + 1;
            cur = sc->node[cur].up;
        }
        st = S_END;
        if (stack.len == 0 && mode == DECODER) /* Go invents a blank here */
            goto out;
    }
out:
    buf_free(&stack);
    return rc;
}

/* ---------------------------------------------------------------- input */

struct dec {
    const char *s;    /* the text */
    struct jnode *nd; /* its tree */
    struct buf tmp;   /* unquoted strings */
    struct buf name;  /* a field's JSON name */
    char *err;
    size_t errlen;
};

static int type_err(struct dec *x, uint8_t kind, const char *gotype)
{
    set_errf(x->err, x->errlen, "json: cannot unmarshal %s into Go value of type %s", kind_go[kind],
           gotype);
    return -EINVAL;
}

static int nomem(struct dec *x)
{
    set_errf(x->err, x->errlen, "jsonpb: out of memory");
    return -ENOMEM;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i];
        v = v << 4 | (isdig(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* unquote: the string literal whose opening quote is at s[at], as Go's
 * unquote reads it (invalid UTF-8 and lone surrogates become U+FFFD), into
 * x->tmp, NUL-terminated after tmp.len. */
static int unquote(struct dec *x, uint32_t at)
{
    const char *s = x->s + at + 1;
    size_t n = 0;
    while (s[n] != '"')
        n += s[n] == '\\' ? 2 : 1;
    buf_reset(&x->tmp);
    if (n > SIZE_MAX / 3 - 1 || buf_reserve(&x->tmp, 3 * n + 1) != 0)
        return nomem(x);
    uint8_t *w = x->tmp.data;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        if (c == '\\') {
            c = (uint8_t)s[i + 1];
            i += 2;
            if (c != 'u') {
                const char *e = strchr("b\bf\fn\nr\rt\t", c);
                *w++ = e != NULL ? (uint8_t)e[1] : c; /* \" \\ \/ stand for themselves */
                continue;
            }
            int32_t r = hex4(s + i);
            i += 4;
            if (r >= 0xd800 && r < 0xe000) { /* a surrogate: a valid pair or U+FFFD */
                int32_t r2 = i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u' ? hex4(s + i + 2) : 0;
                if (r < 0xdc00 && r2 >= 0xdc00 && r2 < 0xe000) {
                    r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
                    i += 6;
                } else {
                    r = 0xfffd;
                }
            }
            w += utf8_put(w, r);
            continue;
        }
        int32_t r;
        size_t l = utf8_rune((const uint8_t *)s + i, n - i, &r);
        if (r < 0)
            w += utf8_put(w, 0xfffd);
        else
            memcpy(w, s + i, l), w += l;
        i += l;
    }
    *w = 0;
    x->tmp.len = (size_t)(w - x->tmp.data);
    return 0;
}

/* key_is: does member |k|'s key read |name|? 1, 0, or -ENOMEM */
static int key_is(struct dec *x, int32_t k, const char *name)
{
    const char *p = x->s + x->nd[k].key + 1;
    size_t i = 0;
    for (; p[i] != '"'; i++) {
        if (p[i] == '\\' || (uint8_t)p[i] >= 0x80) { /* escapes: compare unquoted */
            int rc = unquote(x, x->nd[k].key);
            if (rc != 0)
                return rc;
            return x->tmp.len == strlen(name) && memcmp(x->tmp.data, name, x->tmp.len) == 0;
        }
        if (p[i] != name[i])
            return 0;
    }
    return name[i] == 0;
}

/* json_name: protoc's lowerCamel JSON name of |f| (ToJsonName) in x->name */
static int json_name(struct dec *x, const char *name)
{
    buf_reset(&x->name);
    if (buf_reserve(&x->name, strlen(name) + 1) != 0)
        return nomem(x);
    bool up = false;
    for (; *name; name++) {
        char c = *name;
        if (c == '_') {
            up = true;
            continue;
        }
        x->name.data[x->name.len++] = (uint8_t)(up && c >= 'a' && c <= 'z' ? c - 32 : c);
        up = false;
    }
    x->name.data[x->name.len] = 0;
    return 0;
}

/* member: the value |f| takes from object |obj| (jsonpb's consumeField:
 * the .proto name or the JSON name, the latter winning; of repeated keys,
 * the last); -1 if none */
static int member(struct dec *x, int32_t obj, const ProtobufCFieldDescriptor *f, int32_t *out)
{
    int32_t orig = -1, camel = -1;
    int rc = json_name(x, f->name);
    if (rc != 0)
        return rc;
    const char *cn = (const char *)x->name.data;
    bool same = strcmp(cn, f->name) == 0;
    for (int32_t k = x->nd[obj].child; k >= 0; k = x->nd[k].next) {
        if ((rc = key_is(x, k, cn)) < 0)
            return rc;
        if (rc) {
            camel = k;
            continue;
        }
        if (!same && (rc = key_is(x, k, f->name)) < 0)
            return rc;
        if (rc && !same)
            orig = k;
    }
    *out = camel >= 0 ? camel : orig;
    return 0;
}

/* go_int: the number literal p[0..n) as Go's strconv.ParseInt/ParseUint
 * (base 10) into a |bits|-bit target: 0 or -ERANGE (a fraction, an
 * exponent, a sign on an unsigned, out of range) */
static int go_int(const char *p, size_t n, bool sign, int bits, uint64_t *out)
{
    bool neg = n > 0 && p[0] == '-';
    if (neg && !sign)
        return -ERANGE;
    p += neg, n -= neg;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    uint64_t max = bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
    if (sign)
        max = (1ull << (bits - 1)) - !neg;
    if (n == 0 || v > max)
        return -ERANGE;
    *out = neg ? 0 - v : v;
    return 0;
}

static int num_err(struct dec *x, const char *p, size_t n, const char *gotype)
{
    set_errf(x->err, x->errlen, "json: cannot unmarshal number %.*s into Go value of type %s",
           (int)(n < 4096 ? n : 4096), p, gotype);
    return -EINVAL;
}

/* get_int reads an integer from value |v|: 1 (set *out), 0 (null: Go
 * leaves the field alone) or an error. |quoted|: jsonpb takes 64-bit ints
 * from strings too, by running json.Unmarshal on the text between the
 * quotes, escapes and all. */
static int get_int(struct dec *x, int32_t v, bool quoted, bool sign, int bits, const char *gotype,
                   uint64_t *out)
{
    uint8_t kind = x->nd[v].kind;
    uint32_t a = x->nd[v].start, b = x->nd[v].end;
    if (kind == JK_STR && quoted) {
        struct scan sc = {0};
        int rc =
            go_scan(&sc, (const uint8_t *)x->s + a + 1, b - a - 2, UNMARSHAL, x->err, x->errlen);
        if (rc != 0)
            return rc == -ENOMEM ? nomem(x) : rc;
        kind = sc.root_kind;
        b = a + 1 + sc.root_end;
        a = a + 1 + sc.root_start;
    }
    if (kind == JK_NULL)
        return 0;
    if (kind != JK_NUM)
        return type_err(x, kind, gotype);
    if (go_int(x->s + a, b - a, sign, bits, out) != 0)
        return num_err(x, x->s + a, b - a, gotype);
    return 1;
}

/* go_base64: Go's base64.StdEncoding.Decode (padding required, \r and \n
 * skipped anywhere) of s[0..n) into d (room for n/4*3+3); 0 or the offset
 * of the bad byte + 1 */
static size_t go_base64(const uint8_t *s, size_t n, uint8_t *d, size_t *dlen)
{
    size_t si = 0, o = 0;
    while (si < n) {
        uint8_t q[4] = {0};
        size_t j = 0, bad = 0;
        for (; j < 4; j++) {
            if (si == n) {
                if (j == 0)
                    goto done;
                return si - j + 1; /* padding required */
            }
            uint8_t c = s[si++];
            const char *p = c ? strchr(b64chars, c) : NULL;
            if (p != NULL) {
                q[j] = (uint8_t)(p - b64chars);
                continue;
            }
            if (c == '\n' || c == '\r') {
                j--;
                continue;
            }
            if (c != '=' || j < 2)
                return si; /* si - 1, + 1 */
            if (j == 2) {  /* "==" expected: find the second '=' */
                while (si < n && (s[si] == '\n' || s[si] == '\r'))
                    si++;
                if (si == n)
                    return n + 1;
                if (s[si] != '=')
                    return si;
                si++;
            }
            while (si < n && (s[si] == '\n' || s[si] == '\r'))
                si++;
            if (si < n)
                bad = si + 1; /* trailing garbage */
            break;
        }
        uint32_t v = (uint32_t)q[0] << 18 | (uint32_t)q[1] << 12 | (uint32_t)q[2] << 6 | q[3];
        for (size_t k = 0; k + 1 < j; k++)
            d[o++] = (uint8_t)(v >> (16 - 8 * k));
        if (bad)
            return bad;
        if (j < 4)
            break;
    }
done:
    *dlen = o;
    return 0;
}

/* enum_goname: the Go type name of an enum (package.Outer_Inner), as
 * jsonpb prints it */
static void enum_goname(const ProtobufCEnumDescriptor *ed, char *out, size_t cap)
{
    const char *pkg = ed->package_name ? ed->package_name : "";
    size_t pl = strlen(pkg);
    const char *rest = ed->name;
    if (pl > 0 && strncmp(rest, pkg, pl) == 0 && rest[pl] == '.')
        rest += pl + 1;
    snprintf(out, cap, "%s%s%s", pkg, pl ? "." : "", rest);
    for (char *p = out + pl + (pl > 0); *p; p++)
        if (*p == '.')
            *p = '_';
}

enum { OWN = 1 }; /* a string must be malloc'd even when empty (repeated, oneof) */

static int decode_msg(struct dec *x, const ProtobufCMessageDescriptor *d, int32_t v,
                      ProtobufCMessage *m, int depth);

/* decode_value: value |v| into the storage |p| of one |f|. 1: stored, 0:
 * null (nothing stored), < 0: error. */
static int decode_value(struct dec *x, const ProtobufCFieldDescriptor *f, int32_t v, void *p,
                        int depth, int flags)
{
    const struct jnode *nd = &x->nd[v];
    uint8_t kind = nd->kind;
    uint64_t u;
    int rc;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: {
        bool sign = f->type != PROTOBUF_C_TYPE_UINT32 && f->type != PROTOBUF_C_TYPE_FIXED32;
        if ((rc = get_int(x, v, false, sign, 32, sign ? "int32" : "uint32", &u)) > 0)
            *(uint32_t *)p = (uint32_t)u;
        return rc;
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        bool sign = f->type != PROTOBUF_C_TYPE_UINT64 && f->type != PROTOBUF_C_TYPE_FIXED64;
        if ((rc = get_int(x, v, true, sign, 64, sign ? "int64" : "uint64", &u)) > 0)
            *(uint64_t *)p = u;
        return rc;
    }
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        char gn[256];
        enum_goname(ed, gn, sizeof(gn));
        if (kind != JK_STR) {
            if ((rc = get_int(x, v, false, true, 32, gn, &u)) > 0)
                *(int32_t *)p = (int32_t)u;
            return rc;
        }
        /* by name: the raw text between the quotes, not unquoted */
        size_t n = nd->end - nd->start - 2;
        buf_reset(&x->tmp);
        if (buf_reserve(&x->tmp, n + 1) != 0)
            return nomem(x);
        memcpy(x->tmp.data, x->s + nd->start + 1, n);
        x->tmp.data[n] = 0;
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value_by_name(ed, (const char *)x->tmp.data);
        if (ev != NULL) {
            *(int32_t *)p = ev->value;
            return 1;
        }
        struct buf q = {0};
        if (go_quote(&q, x->tmp.data, n) != 0 || buf_append_byte(&q, 0) != 0) {
            buf_free(&q);
            return nomem(x);
        }
        set_errf(x->err, x->errlen, "unknown value %s for enum %s", (const char *)q.data, gn);
        buf_free(&q);
        return -EINVAL;
    }
    case PROTOBUF_C_TYPE_BOOL:
        if (kind == JK_NULL)
            return 0;
        if (kind != JK_BOOL)
            return type_err(x, kind, "bool");
        *(protobuf_c_boolean *)p = x->s[nd->start] == 't';
        return 1;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
        const char *gt = f->type == PROTOBUF_C_TYPE_FLOAT ? "float32" : "float64";
        double d;
        size_t n = nd->end - nd->start;
        const char *t = x->s + nd->start;
        if (kind == JK_NULL)
            return 0;
        if (kind == JK_STR) { /* only jsonpb's names of the non-finite values */
            if (n == 5 && memcmp(t, "\"NaN\"", 5) == 0)
                d = NAN;
            else if ((n == 10 && memcmp(t, "\"Infinity\"", 10) == 0) ||
                     (n == 11 && memcmp(t, "\"-Infinity\"", 11) == 0))
                d = t[1] == '-' ? -INFINITY : INFINITY;
            else
                return type_err(x, kind, gt);
        } else if (kind != JK_NUM) {
            return type_err(x, kind, gt);
        } else {
            buf_reset(&x->tmp);
            if (buf_append(&x->tmp, t, n) != 0 || buf_append_byte(&x->tmp, 0) != 0)
                return nomem(x);
            /* Go: overflow (to infinity) is an error, underflow is not */
            d = f->type == PROTOBUF_C_TYPE_FLOAT ? strtof((const char *)x->tmp.data, NULL)
                                                 : strtod((const char *)x->tmp.data, NULL);
            if (isinf(d))
                return num_err(x, t, n, gt);
        }
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)p = (float)d;
        else
            *(double *)p = d;
        return 1;
    }
    case PROTOBUF_C_TYPE_STRING: {
        if (kind == JK_NULL && !(flags & OWN))
            return 0;
        if (kind != JK_NULL && kind != JK_STR)
            return type_err(x, kind, "string");
        if (kind == JK_NULL)
            buf_reset(&x->tmp);
        else if ((rc = unquote(x, nd->start)) != 0)
            return rc;
        if (x->tmp.len > 0 && memchr(x->tmp.data, 0, x->tmp.len) != NULL) {
            set_errf(x->err, x->errlen, "jsonpb: string field \"%s\" holds a NUL character", f->name);
            return -EINVAL;
        }
        char *str = malloc(x->tmp.len + 1);
        if (str == NULL)
            return nomem(x);
        if (x->tmp.len)
            memcpy(str, x->tmp.data, x->tmp.len);
        str[x->tmp.len] = 0;
        *(char **)p = str;
        return kind != JK_NULL;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *bd = p;
        uint8_t *data;
        size_t len = 0;
        if (kind == JK_NULL)
            return 0;
        if (kind == JK_STR) { /* encoding/json: []byte is standard base64 */
            if ((rc = unquote(x, nd->start)) != 0)
                return rc;
            if ((data = malloc(x->tmp.len / 4 * 3 + 3)) == NULL)
                return nomem(x);
            size_t bad = go_base64(x->tmp.data, x->tmp.len, data, &len);
            if (bad) {
                free(data);
                set_errf(x->err, x->errlen, "illegal base64 data at input byte %zu", bad - 1);
                return -EINVAL;
            }
        } else if (kind == JK_ARR) { /* encoding/json: an array of uint8 */
            size_t cnt = 0;
            for (int32_t k = nd->child; k >= 0; k = x->nd[k].next)
                cnt++;
            if ((data = malloc(cnt ? cnt : 1)) == NULL)
                return nomem(x);
            for (int32_t k = nd->child; k >= 0; k = x->nd[k].next) {
                u = 0;
                if ((rc = get_int(x, k, false, false, 8, "uint8", &u)) < 0) {
                    free(data);
                    return rc;
                }
                data[len++] = (uint8_t)u;
            }
        } else {
            return type_err(x, kind, "[]uint8");
        }
        if (len == 0)
            free(data), data = NULL;
        bd->data = data, bd->len = len;
        return 1;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessageDescriptor *sd = f->descriptor;
        if (kind == JK_NULL && !(flags & OWN))
            return 0;
        ProtobufCMessage *sm = malloc(sd->sizeof_message);
        if (sm == NULL)
            return nomem(x);
        protobuf_c_message_init(sd, sm);
        *(ProtobufCMessage **)p = sm; /* attached first: freed with the parent on error */
        if ((rc = decode_msg(x, sd, v, sm, depth + 1)) != 0)
            return rc;
        return 1;
    }
    default:
        return 0;
    }
}

/* oneof_clear frees what the oneof of |f| holds and zeroes its storage */
static void oneof_clear(const ProtobufCMessageDescriptor *d, ProtobufCMessage *m,
                        const ProtobufCFieldDescriptor *f)
{
    char *base = (char *)m;
    uint32_t *cs = (uint32_t *)(base + f->quantifier_offset);
    const ProtobufCFieldDescriptor *g = protobuf_c_message_descriptor_get_field(d, *cs);
    void *p = base + f->offset;
    size_t sz = 0;
    if (g != NULL && g->type == PROTOBUF_C_TYPE_STRING) {
        if (*(char **)p != g->default_value)
            free(*(char **)p);
    } else if (g != NULL && g->type == PROTOBUF_C_TYPE_BYTES) {
        free(((ProtobufCBinaryData *)p)->data);
    } else if (g != NULL && g->type == PROTOBUF_C_TYPE_MESSAGE) {
        protobuf_c_message_free_unpacked(*(ProtobufCMessage **)p, NULL);
    }
    for (unsigned i = 0; i < d->n_fields; i++) /* the union's size: its largest member */
        if ((d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            d->fields[i].quantifier_offset == f->quantifier_offset &&
            elem_size(d->fields[i].type) > sz)
            sz = elem_size(d->fields[i].type);
    memset(p, 0, sz);
    *cs = 0;
}

static int decode_field(struct dec *x, const ProtobufCMessageDescriptor *d,
                        const ProtobufCFieldDescriptor *f, int32_t v, ProtobufCMessage *m,
                        int depth)
{
    char *base = (char *)m;
    void *p = base + f->offset;
    uint8_t kind = x->nd[v].kind;
    int rc;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        if (kind == JK_NULL)
            return 0;
        if (kind != JK_ARR)
            return type_err(x, kind, "[]json.RawMessage");
        size_t n = 0, sz = elem_size(f->type);
        for (int32_t k = x->nd[v].child; k >= 0; k = x->nd[k].next)
            n++;
        if (n == 0)
            return 0;
        char *arr = calloc(n, sz);
        if (arr == NULL)
            return nomem(x);
        /* counted in full now: free_unpacked skips the NULL slots not yet filled */
        *(char **)p = arr;
        *(size_t *)(base + f->quantifier_offset) = n;
        size_t i = 0;
        for (int32_t k = x->nd[v].child; k >= 0; k = x->nd[k].next, i++)
            if ((rc = decode_value(x, f, k, arr + i * sz, depth, OWN)) < 0)
                return rc;
        return 0;
    }
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        /* Go sets the oneof wrapper even for null; a nil message in it
         * marshals to nothing, so that one stays unset */
        if (kind == JK_NULL && f->type == PROTOBUF_C_TYPE_MESSAGE)
            return 0;
        oneof_clear(d, m, f);
        *(uint32_t *)(base + f->quantifier_offset) = f->id;
        rc = decode_value(x, f, v, p, depth, OWN);
        return rc < 0 ? rc : 0;
    }
    if ((rc = decode_value(x, f, v, p, depth, 0)) < 0)
        return rc;
    if (rc > 0 && f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
        f->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    return 0;
}

static int decode_msg(struct dec *x, const ProtobufCMessageDescriptor *d, int32_t v,
                      ProtobufCMessage *m, int depth)
{
    uint8_t kind = x->nd[v].kind;
    if (depth > JSONPB_MAX_DEPTH) {
        set_errf(x->err, x->errlen, "jsonpb: messages nested deeper than %d", JSONPB_MAX_DEPTH);
        return -EINVAL;
    }
    if (kind == JK_NULL)
        return 0;
    if (kind != JK_OBJ)
        return type_err(x, kind, "map[string]json.RawMessage");
    /* jsonpb's order: the struct's fields, then its oneofs */
    for (int oneofs = 0; oneofs < 2; oneofs++) {
        for (unsigned i = 0; i < d->n_fields; i++) {
            const ProtobufCFieldDescriptor *f = &d->fields[i];
            int32_t k;
            int rc;
            if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != !oneofs)
                continue;
            if ((rc = member(x, v, f, &k)) != 0)
                return rc;
            if (k >= 0 && (rc = decode_field(x, d, f, k, m, depth)) != 0)
                return rc;
        }
    }
    return 0;
}

int jsonpb_parse(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                 ProtobufCMessage **out, char *err, size_t errlen)
{
    struct scan sc = {.tree = true};
    ProtobufCMessage *m = NULL;
    int rc;
    *out = NULL;
    if (len >= UINT32_MAX) {
        set_errf(err, errlen, "jsonpb: body too large");
        return -EINVAL;
    }
    rc = go_scan(&sc, (const uint8_t *)text, len, DECODER, err, errlen);
    if (rc >= 0 && (m = malloc(d->sizeof_message)) == NULL) {
        set_errf(err, errlen, "jsonpb: out of memory");
        rc = -ENOMEM;
    }
    if (m != NULL)
        protobuf_c_message_init(d, m);
    if (rc == 0) {
        struct dec x = {.s = text, .nd = sc.node, .err = err, .errlen = errlen};
        rc = decode_msg(&x, d, 0, m, 0);
        buf_free(&x.tmp);
        buf_free(&x.name);
    } else if (rc == 1) { /* an empty body: the empty message */
        rc = 0;
    } else if (rc == -ENOMEM) {
        set_errf(err, errlen, "jsonpb: out of memory");
    }
    free(sc.node);
    if (rc != 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return 0;
}

int jsonpb_from_json(const ProtobufCMessageDescriptor *d, const json_t *j, ProtobufCMessage **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    if (j == NULL) {
        set_errf(err, errlen, "jsonpb: no JSON value");
        return -EINVAL;
    }
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text == NULL) {
        set_errf(err, errlen, "jsonpb: out of memory");
        return -ENOMEM;
    }
    int rc = jsonpb_parse(d, text, strlen(text), out, err, errlen);
    free(text);
    return rc;
}

int jsonpb_decode(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                  struct buf *out, char *err, size_t errlen)
{
    ProtobufCMessage *m;
    int rc = jsonpb_parse(d, text, len, &m, err, errlen);
    if (rc != 0)
        return rc;
    size_t n = protobuf_c_message_get_packed_size(m);
    if ((rc = buf_reserve(out, n)) != 0) {
        set_errf(err, errlen, "jsonpb: out of memory");
    } else if (n > 0) { /* an empty message packs to nothing: out may have no data */
        out->len += protobuf_c_message_pack(m, out->data + out->len);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}
