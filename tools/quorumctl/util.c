/* tools/quorumctl/util.c: what the online commands share: connecting with
 * the global flags, printing errors as etcdctl does, etcdctl's JSON printer
 * (Go's encoding/json of the gogo-protobuf structs: proto field names,
 * omitempty, bytes in base64, oneofs as {"Response":{"ResponsePut":..}}),
 * its table printer (olekukonko/tablewriter) and go-humanize's Bytes. */
#include "quorumctl.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ctl_dial(const struct ctl *ctl, const char *const *eps, size_t n, qc_client **c,
             struct qc_status *st)
{
    struct qc_options o = {.endpoints = eps,
                           .n_endpoints = n,
                           .dial_timeout_ms = (int)ctl->dial_timeout_ms,
                           .call_timeout_ms = (int)ctl->command_timeout_ms,
                           .ca_file = ctl->cacert,
                           .cert_file = ctl->cert,
                           .key_file = ctl->key,
                           .insecure_skip_verify = ctl->insecure_skip_tls_verify};
    *c = NULL;
    return qc_connect(&o, c, st);
}

void ctl_setup_fatal(const struct ctl *ctl, int rc, const struct qc_status *st)
{
    if (rc != -EINVAL)
        return;
    if (st->code == QC_INVALID_ARGUMENT && (ctl->cacert || ctl->cert || ctl->key))
        /* a TLS file that cannot be read: etcdctl's words and exit code */
        ctl_die(CTL_EXIT_BAD_ARGS, "%s", st->message);
    ctl_fail(rc, st);
    exit(CTL_EXIT_ERROR);
}

/* connect_or_exit: ctl_dial, and on failure etcdctl's "Error: ..." and exit */
static qc_client *connect_or_exit(struct ctl *ctl, const char *const *eps, size_t n)
{
    qc_client *c;
    struct qc_status st;
    int rc = ctl_dial(ctl, eps, n, &c, &st);
    ctl_setup_fatal(ctl, rc, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        exit(CTL_EXIT_ERROR);
    }
    ctl_login(ctl, c);
    return c;
}

int ctl_open(const struct ctl *ctl, const char *ep, bool login, qc_client **c, struct qc_status *st)
{
    int rc = ctl_dial(ctl, &ep, 1, c, st);
    if (rc == 0 && login && (rc = ctl_try_login(ctl, *c, st)) < 0) {
        qc_close(*c);
        *c = NULL;
    }
    return rc;
}

qc_client *ctl_connect_one(struct ctl *ctl, const char *ep)
{
    return connect_or_exit(ctl, &ep, 1);
}

/* quorumctl runs one command and exits; what a command builds (request
 * messages, table rows, endpoint lists) lives until then. Such memory is
 * taken by ctl_keep and freed at exit, so that leak checkers (the suite runs
 * quorumctl under LeakSanitizer) see a clean exit. */
static void **kept;
static size_t n_kept, cap_kept;

static void free_kept(void)
{
    while (n_kept > 0)
        free(kept[--n_kept]);
    free(kept);
    kept = NULL;
    cap_kept = 0;
}

void *ctl_keep(void *p)
{
    if (p == NULL)
        ctl_die(CTL_EXIT_ERROR, "out of memory");
    if (n_kept == cap_kept) {
        if (cap_kept == 0)
            atexit(free_kept);
        size_t cap = cap_kept ? cap_kept * 2 : 64;
        void **v = realloc(kept, cap * sizeof(void *));
        if (v == NULL)
            ctl_die(CTL_EXIT_ERROR, "out of memory");
        kept = v;
        cap_kept = cap;
    }
    kept[n_kept++] = p;
    return p;
}

void *ctl_calloc(size_t n, size_t size)
{
    return ctl_keep(calloc(n ? n : 1, size ? size : 1));
}

char *ctl_strdup(const char *s)
{
    return ctl_keep(strdup(s));
}

size_t ctl_endpoints(struct ctl *ctl, char ***out)
{
    char *dup = ctl_strdup(ctl->endpoints);
    size_t n = 0, cap = 4;
    char **v = malloc(cap * sizeof(char *));
    for (char *save = NULL, *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*t == '\0')
            continue;
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof(char *));
        v[n++] = t;
    }
    ctl_keep(v);
    *out = v;
    return n;
}

qc_client *ctl_connect(struct ctl *ctl)
{
    char **eps;
    size_t n = ctl_endpoints(ctl, &eps);
    /* eps stays allocated for the life of the process (copied by qc_connect anyway) */
    return connect_or_exit(ctl, (const char *const *)eps, n);
}

static const char *code_name(int code)
{
    static const char *n[] = {
        "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
        "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
        "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
        "DataLoss", "Unauthenticated"};
    return code >= 0 && code <= 16 ? n[code] : "Unknown";
}

void ctl_errtext(int rc, const struct qc_status *st, char *out, size_t cap)
{
    if (rc == QC_ETIMEDOUT || (rc == QC_EUNAVAILABLE && st->code != QC_UNAVAILABLE) ||
        (rc == QC_EUNAVAILABLE && strncmp(st->message, "etcdserver:", 11) != 0)) {
        /* grpc-go with a blocking dial reports a dead endpoint as the context's end */
        snprintf(out, cap, "context deadline exceeded");
    } else if (rc == QC_ESTATUS && strncmp(st->message, "etcdserver:", 11) == 0) {
        snprintf(out, cap, "%s", st->message);
    } else if (rc == QC_ESTATUS || rc == QC_ECLOSED || rc == QC_EPROTO) {
        snprintf(out, cap, "rpc error: code = %s desc = %s", code_name(st->code), st->message);
    } else {
        snprintf(out, cap, "%s", qc_strerror(rc));
    }
}

void ctl_fail(int rc, const struct qc_status *st)
{
    char b[512];
    ctl_errtext(rc, st, b, sizeof(b));
    fprintf(stderr, "Error: %s\n", b);
}

int ctl_die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("Error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

void ctl_humanize(uint64_t s, char *out, size_t cap)
{
    /* go-humanize Bytes */
    static const char *sizes[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    if (s < 10) {
        snprintf(out, cap, "%llu B", (unsigned long long)s);
        return;
    }
    double e = floor(log((double)s) / log(1000.0));
    const char *suffix = sizes[(int)e];
    double val = floor((double)s / pow(1000.0, e) * 10 + 0.5) / 10;
    snprintf(out, cap, val < 10 ? "%.1f %s" : "%.0f %s", val, suffix);
}

/* ---- JSON ---- */

void ctl_json_b64(FILE *f, const uint8_t *p, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        fputc(t[(v >> 18) & 63], f);
        fputc(t[(v >> 12) & 63], f);
        fputc(i + 1 < n ? t[(v >> 6) & 63] : '=', f);
        fputc(i + 2 < n ? t[v & 63] : '=', f);
    }
}

void ctl_json_string(FILE *f, const char *s)
{
    /* Go's encoding/json escapes <, >, & as \u003c etc. */
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\r')
            fputs("\\r", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&')
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void camel(FILE *f, const char *s)
{
    /* Go's generated name of a proto field: response_put -> ResponsePut */
    int up = 1;
    for (; *s; s++) {
        if (*s == '_') {
            up = 1;
            continue;
        }
        fputc(up ? toupper((unsigned char)*s) : *s, f);
        up = 0;
    }
}

static void json_value(FILE *f, const ProtobufCFieldDescriptor *fd, const void *p)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        fprintf(f, "%d", *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        fprintf(f, "%u", *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        fprintf(f, "%lld", (long long)*(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        fputs(*(const protobuf_c_boolean *)p ? "true" : "false", f);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        fprintf(f, "%g", *(const float *)p);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        fprintf(f, "%g", *(const double *)p);
        break;
    case PROTOBUF_C_TYPE_STRING:
        ctl_json_string(f, *(char *const *)p ? *(char *const *)p : "");
        break;
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        fputc('"', f);
        ctl_json_b64(f, b->data, b->len);
        fputc('"', f);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        ctl_json_message(f, *(const ProtobufCMessage *const *)p);
        break;
    }
}

static int is_zero(const ProtobufCFieldDescriptor *fd, const void *p)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return *(const uint64_t *)p == 0;
    case PROTOBUF_C_TYPE_BOOL:
        return !*(const protobuf_c_boolean *)p;
    case PROTOBUF_C_TYPE_STRING:
        return *(char *const *)p == NULL || **(char *const *)p == '\0';
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(void *const *)p == NULL;
    case PROTOBUF_C_TYPE_FLOAT:
        return *(const float *)p == 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        return *(const double *)p == 0;
    default:
        return *(const uint32_t *)p == 0;
    }
}

static size_t type_size(const ProtobufCFieldDescriptor *fd)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

void ctl_json_message(FILE *f, const ProtobufCMessage *m)
{
    if (m == NULL) {
        fputs("null", f);
        return;
    }
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    int first = 1;
    fputc('{', f);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[i];
        const void *p = base + fd->offset;
        if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)(base + fd->quantifier_offset);
            if (which != fd->id)
                continue;
            /* the oneof's Go field (named after the oneof: "Response",
             * "TargetUnion") holds a wrapper struct with the Go name of the
             * field; neither has a json tag */
            if (!first)
                fputc(',', f);
            first = 0;
            fputc('"', f);
            if (strcmp(d->short_name, "ResponseOp") == 0)
                fputs("Response", f);
            else if (strcmp(d->short_name, "RequestOp") == 0)
                fputs("Request", f);
            else if (strcmp(d->short_name, "Compare") == 0)
                fputs("TargetUnion", f);
            else
                fputs("RequestUnion", f);
            fputs("\":{\"", f);
            camel(f, fd->name);
            fputs("\":", f);
            json_value(f, fd, p);
            fputc('}', f);
            continue;
        }
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + fd->quantifier_offset);
            if (n == 0)
                continue;
            if (!first)
                fputc(',', f);
            first = 0;
            fprintf(f, "\"%s\":[", fd->name);
            const char *arr = *(const char *const *)p;
            for (size_t j = 0; j < n; j++) {
                if (j)
                    fputc(',', f);
                json_value(f, fd, arr + j * type_size(fd));
            }
            fputc(']', f);
            continue;
        }
        if (is_zero(fd, p))
            continue;
        if (!first)
            fputc(',', f);
        first = 0;
        fprintf(f, "\"%s\":", fd->name);
        json_value(f, fd, p);
    }
    fputc('}', f);
}

void ctl_json_header_fields(FILE *f, const Etcdserverpb__ResponseHeader *h)
{
    /* an embedded *pb.ResponseHeader: its fields promoted into the outer object */
    fprintf(f, "{");
    if (h == NULL)
        return;
    const char *sep = "";
    if (h->cluster_id) {
        fprintf(f, "%s\"cluster_id\":%llu", sep, (unsigned long long)h->cluster_id);
        sep = ",";
    }
    if (h->member_id) {
        fprintf(f, "%s\"member_id\":%llu", sep, (unsigned long long)h->member_id);
        sep = ",";
    }
    if (h->revision) {
        fprintf(f, "%s\"revision\":%lld", sep, (long long)h->revision);
        sep = ",";
    }
    if (h->raft_term)
        fprintf(f, "%s\"raft_term\":%llu", sep, (unsigned long long)h->raft_term);
}

static size_t display_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

void ctl_print_json(const ProtobufCMessage *m)
{
    ctl_json_message(stdout, m);
    fputc('\n', stdout);
}

/* ---- tables ---- */

void ctl_table(int ncol, const char *const *hdr, int nrow, char ***rows)
{
    int w[32];
    char up[32][64];
    for (int i = 0; i < ncol; i++) {
        size_t k = 0;
        for (const char *s = hdr[i]; *s && k < 63; s++)
            up[i][k++] = (*s == '_' || *s == '.') ? ' ' : (char)toupper((unsigned char)*s);
        up[i][k] = '\0';
        w[i] = (int)strlen(up[i]);
        for (int r = 0; r < nrow; r++)
            if ((int)display_width(rows[r][i]) > w[i])
                w[i] = (int)display_width(rows[r][i]);
    }
#define LINE()                                                                                     \
    do {                                                                                           \
        for (int i = 0; i < ncol; i++) {                                                           \
            putchar('+');                                                                          \
            for (int j = 0; j < w[i] + 2; j++)                                                     \
                putchar('-');                                                                      \
        }                                                                                          \
        printf("+\n");                                                                             \
    } while (0)
    LINE();
    for (int i = 0; i < ncol; i++) {
        int pad = w[i] - (int)strlen(up[i]);
        printf("| %*s%s%*s ", pad / 2, "", up[i], pad - pad / 2, "");
    }
    printf("|\n");
    LINE();
    for (int r = 0; r < nrow; r++) {
        for (int i = 0; i < ncol; i++)
            printf("| %*s%s ", w[i] - (int)display_width(rows[r][i]), "", rows[r][i]);
        printf("|\n");
    }
    LINE();
#undef LINE
}

/* ---- key/value printing ---- */

/* print_bytes prints |b| and a newline: as it is, or with --hex as etcdctl's
 * addHexPrefix(hex.EncodeToString(b)), "\x6b\x31" */
static void print_bytes(const struct ctl *ctl, const ProtobufCBinaryData *b)
{
    if (ctl->hex) {
        for (size_t i = 0; i < b->len; i++)
            printf("\\x%02x", b->data[i]);
    } else if (b->len > 0) { /* an empty field has no data pointer: fwrite wants one */
        fwrite(b->data, 1, b->len, stdout);
    }
    putchar('\n');
}

void ctl_print_kv(struct ctl *ctl, const Mvccpb__KeyValue *kv)
{
    if (!ctl->print_value_only)
        print_bytes(ctl, &kv->key);
    print_bytes(ctl, &kv->value);
}

void ctl_print_get(struct ctl *ctl, const Etcdserverpb__RangeResponse *r)
{
    if (ctl->format == CTL_FIELDS) {
        ctl_fields_hdr(r->header);
        for (size_t i = 0; i < r->n_kvs; i++)
            ctl_fields_kv("", r->kvs[i]);
        printf("\"More\" : %s\n\"Count\" : %lld\n", r->more ? "true" : "false",
               (long long)r->count);
        return;
    }
    for (size_t i = 0; i < r->n_kvs; i++)
        ctl_print_kv(ctl, r->kvs[i]);
}

/* ---- etcdctl's "fields" output (printer_fields.go) ---- */

/* utf8_rune decodes one rune as Go's utf8.DecodeRune; 0 for an invalid byte */
static size_t utf8_rune(const uint8_t *p, size_t n, uint32_t *r)
{
    if (p[0] < 0x80) {
        *r = p[0];
        return 1;
    }
    size_t len = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
                 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                                : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t v = p[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *r = v;
    return len;
}

/* go_printable: unicode.IsPrint for a rune past ASCII, near enough: the
 * controls, spaces but U+0020, format characters and private use are not;
 * unassigned code points are taken as printable */
static bool go_printable(uint32_t r)
{
    return !((r >= 0x80 && r <= 0xa0) || r == 0xad || (r >= 0x600 && r <= 0x605) ||
             r == 0x61c || r == 0x6dd || r == 0x70f || r == 0x1680 || r == 0x180e ||
             (r >= 0x2000 && r <= 0x200f) || (r >= 0x2028 && r <= 0x202f) ||
             (r >= 0x205f && r <= 0x206f) || r == 0x3000 || (r >= 0xe000 && r <= 0xf8ff) ||
             r == 0xfeff || (r >= 0xfff9 && r <= 0xfffb) || r == 0xfffe || r == 0xffff ||
             r == 0xe0001 || (r >= 0xe0020 && r <= 0xe007f) || r >= 0xf0000);
}

void ctl_go_quote(const uint8_t *p, size_t n)
{
    /* Go's %q of a string (strconv.Quote) */
    putchar('"');
    for (size_t i = 0; i < n;) {
        uint32_t r;
        size_t len = utf8_rune(p + i, n - i, &r);
        if (len == 0) {
            printf("\\x%02x", p[i++]);
            continue;
        }
        if (r == '"' || r == '\\') {
            printf("\\%c", (char)r);
        } else if (r >= 0x20 && r < 0x7f) {
            putchar((int)r);
        } else if (r < 0x80) {
            static const char esc[] = "\a\b\f\n\r\t\v", name[] = "abfnrtv";
            const char *e = r ? strchr(esc, (int)r) : NULL;
            if (e != NULL)
                printf("\\%c", name[e - esc]);
            else
                printf("\\x%02x", r);
        } else if (go_printable(r)) {
            fwrite(p + i, 1, len, stdout);
        } else if (r < 0x10000) {
            printf("\\u%04x", r);
        } else {
            printf("\\U%08x", r);
        }
        i += len;
    }
    putchar('"');
}

void ctl_fields_quoted(const char *name, const char *s)
{
    printf("\"%s\" : ", name);
    ctl_go_quote((const uint8_t *)(s ? s : ""), s ? strlen(s) : 0);
    putchar('\n');
}

void ctl_fields_hdr(const Etcdserverpb__ResponseHeader *h)
{
    /* etcdctl dereferences the header; a response without one prints zeros here */
    static const Etcdserverpb__ResponseHeader none = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    if (h == NULL)
        h = &none;
    printf("\"ClusterID\" : %llu\n\"MemberID\" : %llu\n\"Revision\" : %lld\n\"RaftTerm\" : %llu\n",
           (unsigned long long)h->cluster_id, (unsigned long long)h->member_id,
           (long long)h->revision, (unsigned long long)h->raft_term);
}

void ctl_fields_kv(const char *pfx, const Mvccpb__KeyValue *kv)
{
    printf("\"%sKey\" : ", pfx);
    ctl_go_quote(kv->key.data, kv->key.len);
    printf("\n\"%sCreateRevision\" : %lld\n\"%sModRevision\" : %lld\n\"%sVersion\" : %lld\n"
           "\"%sValue\" : ",
           pfx, (long long)kv->create_revision, pfx, (long long)kv->mod_revision, pfx,
           (long long)kv->version, pfx);
    ctl_go_quote(kv->value.data, kv->value.len);
    printf("\n\"%sLease\" : %lld\n", pfx, (long long)kv->lease);
}

/* ---- what commands share besides ---- */

void ctl_unsupported(struct ctl *ctl, enum ctl_format f)
{
    /* etcdctl's printerUnsupported */
    if (ctl->format == f)
        ctl_die(CTL_EXIT_BAD_FEATURE, "%s not supported as output format",
                f == CTL_TABLE ? "table" : "fields");
}

char *ctl_join(char *const *v, size_t n, const char *sep)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += strlen(v[i]) + strlen(sep);
    char *s = ctl_calloc(1, cap);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(s, sep);
        strcat(s, v[i]);
    }
    return s;
}

void ctl_progress(const char *what, uint64_t done, uint64_t total)
{
    char a[32], b[32];
    ctl_humanize(done, a, sizeof(a));
    ctl_humanize(total, b, sizeof(b));
    int width = 30, fill = total ? (int)(done * (uint64_t)width / total) : width;
    if (fill > width)
        fill = width;
    fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s / %s", what, fill, "##############################",
            width - fill, "", total ? (int)(done * 100 / total) : 100, a, b);
    fflush(stderr);
}

uint8_t *ctl_prefix_end(const uint8_t *key, size_t len, size_t *out_len)
{
    /* clientv3.GetPrefixRangeEnd */
    uint8_t *end = ctl_keep(malloc(len + 1));
    if (len > 0)
        memcpy(end, key, len);
    for (size_t i = len; i-- > 0;) {
        if (end[i] < 0xff) {
            end[i]++;
            *out_len = i + 1;
            return end;
        }
    }
    end[0] = 0;
    *out_len = 1;
    return end;
}
