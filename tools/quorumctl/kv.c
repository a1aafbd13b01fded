/* tools/quorumctl/kv.c: put, get, del, txn, watch, compaction, with
 * etcdctl 3.4's flags, output and errors. */
#include "quorumctl.h"

#include <ctype.h>
#include <errno.h>
#include <time.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* ---- flag helpers ---- */

/* ctl_flag: --name=v or --name v; returns the value or NULL */
const char *ctl_flag(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0)
        return NULL;
    if (a[2 + n] == '=')
        return a + 3 + n;
    if (a[2 + n] == '\0') {
        if (*i + 1 >= argc)
            ctl_die(CTL_EXIT_ERROR, "flag needs an argument: --%s", name);
        return argv[++*i];
    }
    return NULL;
}

/* ctl_bool: --name, --name=v; ctl_bool_short: also -c, -c=v. v as Go's
 * strconv.ParseBool (pflag's bool flags); else etcdctl's (cobra's) error,
 * which it writes twice, and exit 1 (cobra's usage text on stdout is not
 * printed) */
bool ctl_bool_short(const char *a, char shrt, const char *name, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    size_t n = strlen(name);
    const char *v;
    if (strncmp(a, "--", 2) == 0 && strncmp(a + 2, name, n) == 0 &&
        (a[2 + n] == '\0' || a[2 + n] == '='))
        v = a[2 + n] == '=' ? a + 3 + n : NULL;
    else if (shrt != '\0' && a[0] == '-' && a[1] == shrt && (a[2] == '\0' || a[2] == '='))
        v = a[2] == '=' ? a + 3 : NULL;
    else
        return false;
    if (v == NULL) {
        *out = true;
        return true;
    }
    for (size_t k = 0; k < sizeof(yes) / sizeof(yes[0]); k++) {
        if (strcmp(v, yes[k]) == 0) {
            *out = true;
            return true;
        }
        if (strcmp(v, no[k]) == 0) {
            *out = false;
            return true;
        }
    }
    char flag[96];
    if (shrt != '\0')
        snprintf(flag, sizeof(flag), "-%c, --%s", shrt, name);
    else
        snprintf(flag, sizeof(flag), "--%s", name);
    fprintf(stderr,
            "Error: invalid argument \"%s\" for \"%s\" flag: strconv.ParseBool: parsing \"%s\": "
            "invalid syntax\n\n",
            v, flag, v);
    ctl_die(CTL_EXIT_ERROR,
            "invalid argument \"%s\" for \"%s\" flag: strconv.ParseBool: parsing \"%s\": "
            "invalid syntax",
            v, flag, v);
}

bool ctl_bool(const char *a, const char *name, bool *out)
{
    return ctl_bool_short(a, '\0', name, out);
}

static int64_t parse_i64(const char *s, const char *flag)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s)
        ctl_die(CTL_EXIT_ERROR,
                "invalid argument \"%s\" for \"--%s\" flag: strconv.ParseInt: "
                "parsing \"%s\": invalid syntax",
                s, flag, s);
    return v;
}

int64_t ctl_lease_id(const char *s, const char *what)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 16);
    if (errno || *end || end == s)
        ctl_die(CTL_EXIT_BAD_ARGS,
                "bad %s (strconv.ParseInt: parsing \"%s\": invalid "
                "syntax), expecting ID in Hex",
                what, s);
    return v;
}

void ctl_unknown_flag(const char *a)
{
    if (a[0] == '-' && a[1] != '\0')
        ctl_die(CTL_EXIT_ERROR, "unknown flag: %s", a);
}

void ctl_positional(char **pos, int cap, int *np, char *a)
{
    ctl_unknown_flag(a);
    if (*np < cap)
        pos[*np] = a;
    (*np)++;
}

static ProtobufCBinaryData bin(const char *s)
{
    ProtobufCBinaryData b = {strlen(s), (uint8_t *)s};
    return b;
}

/* ---- request builders (also used by txn) ---- */

/* range_args: get's and del's checks of <key> [range_end] and the flags */
static void range_args(const char *cmd, int np, bool prefix, bool from_key)
{
    if (np == 0 || np > 2)
        ctl_die(CTL_EXIT_BAD_ARGS,
                "%s command needs one argument as key and an optional argument as range_end", cmd);
    if (prefix && from_key)
        ctl_die(CTL_EXIT_BAD_ARGS,
                "`--prefix` and `--from-key` cannot be set at the same time, choose one");
}

/* key_range sets key and range_end from <key> [range_end] as clientv3's
 * WithRange, WithPrefix and WithFromKey do ("" with either: every key) */
static void key_range(char **pos, int np, bool prefix, bool from_key, ProtobufCBinaryData *key,
                      ProtobufCBinaryData *end)
{
    static uint8_t zero[1] = {0};
    *key = bin(pos[0]);
    if (np == 2) {
        if (prefix || from_key)
            ctl_die(CTL_EXIT_BAD_ARGS, "too many arguments, only accept one argument when "
                                       "`--prefix` or `--from-key` is set");
        *end = bin(pos[1]);
    }
    if ((prefix || from_key) && key->len == 0) {
        key->data = zero;
        key->len = 1;
    }
    if (prefix && key->data != zero) {
        end->data = ctl_prefix_end(key->data, key->len, &end->len);
    } else if (prefix || from_key) {
        end->data = zero;
        end->len = 1;
    }
}

struct put_req {
    Etcdserverpb__PutRequest req;
};

static void build_put(int argc, char **argv, Etcdserverpb__PutRequest *r, bool from_txn)
{
    etcdserverpb__put_request__init(r);
    char *pos[3];
    int np = 0;
    bool dashdash = false;
    for (int i = 0; i < argc; i++) {
        const char *v;
        bool b;
        if (!dashdash && strcmp(argv[i], "--") == 0)
            dashdash = true;
        else if (!dashdash && (v = ctl_flag(argc, argv, &i, "lease")) != NULL)
            r->lease = ctl_lease_id(v, "lease ID");
        else if (!dashdash && ctl_bool(argv[i], "prev-kv", &b))
            r->prev_kv = b;
        else if (!dashdash && ctl_bool(argv[i], "ignore-value", &b))
            r->ignore_value = b;
        else if (!dashdash && ctl_bool(argv[i], "ignore-lease", &b))
            r->ignore_lease = b;
        else if (np < 3) {
            if (!dashdash)
                ctl_unknown_flag(argv[i]);
            pos[np++] = argv[i];
        } else
            np++;
    }
    /* etcdctl takes the first two arguments and ignores the rest */
    if (np > 2)
        np = 2;
    if (np == 0 || (np == 1 && !r->ignore_value && from_txn))
        ctl_die(CTL_EXIT_BAD_ARGS, "put command needs 1 argument and input from stdin or 2 "
                                   "arguments");
    r->key = bin(pos[0]);
    if (np == 2) {
        r->value = bin(pos[1]);
    } else if (!r->ignore_value) {
        /* the value from stdin */
        size_t cap = 4096, n = 0;
        char *buf = malloc(cap);
        size_t k;
        while ((k = fread(buf + n, 1, cap - n, stdin)) > 0) {
            n += k;
            if (n == cap)
                buf = realloc(buf, cap *= 2);
        }
        r->value.data = ctl_keep(buf);
        r->value.len = n;
        if (n == 0) /* argOrStdin: "no available argument and stdin" */
            ctl_die(CTL_EXIT_BAD_ARGS, "put command needs 1 argument and input from stdin or 2 "
                                       "arguments");
    }
}

static void build_get(struct ctl *ctl, int argc, char **argv, Etcdserverpb__RangeRequest *r)
{
    etcdserverpb__range_request__init(r);
    char *pos[3];
    int np = 0;
    bool prefix = false, from_key = false, b;
    const char *consistency = "l", *order = "", *target = "";
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = ctl_flag(argc, argv, &i, "rev")) != NULL)
            r->revision = parse_i64(v, "rev");
        else if ((v = ctl_flag(argc, argv, &i, "limit")) != NULL)
            r->limit = parse_i64(v, "limit");
        else if ((v = ctl_flag(argc, argv, &i, "consistency")) != NULL)
            consistency = v;
        else if ((v = ctl_flag(argc, argv, &i, "order")) != NULL)
            order = v;
        else if ((v = ctl_flag(argc, argv, &i, "sort-by")) != NULL)
            target = v;
        else if (ctl_bool(argv[i], "prefix", &b))
            prefix = b;
        else if (ctl_bool(argv[i], "from-key", &b))
            from_key = b;
        else if (ctl_bool(argv[i], "keys-only", &b))
            r->keys_only = b;
        else if (ctl_bool(argv[i], "print-value-only", &b))
            ctl->print_value_only = b;
        else
            ctl_positional(pos, 3, &np, argv[i]);
    }
    range_args("get", np, prefix, from_key);
    if (strcmp(consistency, "s") == 0)
        r->serializable = 1;
    else if (strcmp(consistency, "l") != 0)
        ctl_die(CTL_EXIT_BAD_FEATURE, "unknown consistency flag \"%s\"", consistency);
    key_range(pos, np, prefix, from_key, &r->key, &r->range_end);
    char o[16] = "", t[16] = "";
    for (size_t k = 0; order[k] && k < 15; k++)
        o[k] = (char)toupper((unsigned char)order[k]);
    for (size_t k = 0; target[k] && k < 15; k++)
        t[k] = (char)toupper((unsigned char)target[k]);
    if (strcmp(o, "ASCEND") == 0)
        r->sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    else if (strcmp(o, "DESCEND") == 0)
        r->sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    else if (*o)
        ctl_die(CTL_EXIT_BAD_FEATURE, "bad sort order %s", order);
    if (strcmp(t, "CREATE") == 0)
        r->sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    else if (strcmp(t, "MODIFY") == 0)
        r->sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD;
    else if (strcmp(t, "VALUE") == 0)
        r->sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    else if (strcmp(t, "VERSION") == 0)
        r->sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VERSION;
    else if (strcmp(t, "KEY") != 0 && *t)
        ctl_die(CTL_EXIT_BAD_FEATURE, "bad sort target %s", target);
    /* clientv3.WithSort: ascending by key is the default order */
    if (r->sort_target == ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY &&
        r->sort_order == ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND)
        r->sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE;
}

static void build_del(int argc, char **argv, Etcdserverpb__DeleteRangeRequest *r)
{
    etcdserverpb__delete_range_request__init(r);
    char *pos[3];
    int np = 0;
    bool prefix = false, from_key = false, b;
    for (int i = 0; i < argc; i++) {
        if (ctl_bool(argv[i], "prefix", &b))
            prefix = b;
        else if (ctl_bool(argv[i], "from-key", &b))
            from_key = b;
        else if (ctl_bool(argv[i], "prev-kv", &b))
            r->prev_kv = b;
        else
            ctl_positional(pos, 3, &np, argv[i]);
    }
    range_args("del", np, prefix, from_key);
    key_range(pos, np, prefix, from_key, &r->key, &r->range_end);
}

/* ---- printers ---- */

/* the simple and fields printers (-w json goes through ctl_print_json) */
static void print_put(struct ctl *ctl, const Etcdserverpb__PutResponse *r)
{
    bool fields = ctl->format == CTL_FIELDS;
    if (fields)
        ctl_fields_hdr(r->header);
    else
        puts("OK");
    if (r->prev_kv && fields)
        ctl_fields_kv("Prev", r->prev_kv);
    else if (r->prev_kv)
        ctl_print_kv(ctl, r->prev_kv);
}

static void print_del(struct ctl *ctl, const Etcdserverpb__DeleteRangeResponse *r)
{
    bool fields = ctl->format == CTL_FIELDS;
    if (fields) {
        ctl_fields_hdr(r->header);
        printf("\"Deleted\" : %lld\n", (long long)r->deleted);
    } else {
        printf("%lld\n", (long long)r->deleted);
    }
    for (size_t i = 0; i < r->n_prev_kvs; i++) {
        if (fields)
            ctl_fields_kv("Prev", r->prev_kvs[i]);
        else
            ctl_print_kv(ctl, r->prev_kvs[i]);
    }
}

/* kv_call sends |req| to |method| and prints the answer as etcdctl does:
 * JSON with -w json, else |print| (no table printer, as etcdctl's KV
 * commands, which find that out after the request). */
typedef void (*kv_printer)(struct ctl *ctl, const ProtobufCMessage *resp);

static int kv_call(struct ctl *ctl, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, kv_printer print)
{
    qc_client *c = ctl_connect(ctl);
    ProtobufCMessage *resp = NULL;
    struct qc_status st;
    int rc = qc_unary(c, method, req, resp_desc, &resp, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        return CTL_EXIT_ERROR;
    }
    ctl_unsupported(ctl, CTL_TABLE);
    if (ctl->format == CTL_JSON)
        ctl_print_json(resp);
    else
        print(ctl, resp);
    protobuf_c_message_free_unpacked(resp, NULL);
    qc_close(c);
    return 0;
}

static void put_printer(struct ctl *ctl, const ProtobufCMessage *r)
{
    print_put(ctl, (const Etcdserverpb__PutResponse *)r);
}

static void get_printer(struct ctl *ctl, const ProtobufCMessage *r)
{
    ctl_print_get(ctl, (const Etcdserverpb__RangeResponse *)r);
}

static void del_printer(struct ctl *ctl, const ProtobufCMessage *r)
{
    print_del(ctl, (const Etcdserverpb__DeleteRangeResponse *)r);
}

int cmd_put(struct ctl *ctl, int argc, char **argv)
{
    Etcdserverpb__PutRequest req;
    build_put(argc, argv, &req, false);
    /* qc_put has no prev_kv/ignore_* options: send the request as built */
    return kv_call(ctl, "/etcdserverpb.KV/Put", &req.base, &etcdserverpb__put_response__descriptor,
                   put_printer);
}

int cmd_get(struct ctl *ctl, int argc, char **argv)
{
    Etcdserverpb__RangeRequest req;
    build_get(ctl, argc, argv, &req);
    return kv_call(ctl, "/etcdserverpb.KV/Range", &req.base,
                   &etcdserverpb__range_response__descriptor, get_printer);
}

int cmd_del(struct ctl *ctl, int argc, char **argv)
{
    Etcdserverpb__DeleteRangeRequest req;
    build_del(argc, argv, &req);
    return kv_call(ctl, "/etcdserverpb.KV/DeleteRange", &req.base,
                   &etcdserverpb__delete_range_response__descriptor, del_printer);
}

/* ---- txn ---- */

/* argify splits a line as etcdctl's argify: whitespace separated, "quoted"
 * strings with Go escapes kept as one argument */
static int argify(char *line, char **out, int cap)
{
    int n = 0;
    char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *w = p, *o = p;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1]) {
                    p++;
                    *o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
                    p++;
                } else
                    *o++ = *p++;
            }
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                *o++ = *p++;
        }
        char save = *p;
        *o = '\0';
        if (n < cap)
            out[n++] = w;
        if (!save)
            break;
        p++;
    }
    return n;
}

static char *read_line(FILE *in)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, in);
    if (line != NULL)
        ctl_keep(line);
    if (n < 0 || line[n - 1] != '\n') {
        /* bufio.Reader.ReadString: a last line without '\n' is an EOF error */
        ctl_die(CTL_EXIT_INVALID_INPUT, "EOF");
    }
    return line;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* parse_quoted reads a Go %q string at *p; returns false if none */
static bool parse_quoted(char **p, char **out)
{
    char *s = *p;
    while (*s == ' ')
        s++;
    if (*s != '"')
        return false;
    s++;
    char *o = s, *start = s;
    while (*s && *s != '"') {
        if (*s == '\\' && s[1]) {
            s++;
            *o++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
            s++;
        } else
            *o++ = *s++;
    }
    if (*s != '"')
        return false;
    s++;
    *o = '\0';
    *out = start;
    *p = s;
    return true;
}

static Etcdserverpb__Compare *parse_compare(char *line)
{
    char *orig = ctl_strdup(line);
    char *lp = strchr(line, '(');
    if (lp == NULL)
        ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s", orig);
    *lp = '\0';
    char *target = line, *p = lp + 1, *key, *val;
    char *op = "";
    val = "";
    key = "";
    bool ok = parse_quoted(&p, &key) && *p == ')';
    if (ok) {
        p++;
        while (*p == ' ')
            p++;
        op = p;
        while (*p && *p != ' ')
            p++;
        if (*p)
            *p++ = '\0';
        if (!parse_quoted(&p, &val)) {
            val = "";
            ok = false;
        }
    }
    if (!ok) /* fmt.Sscanf(..., "%q) %s %q") matched fewer than 3 */
        ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s; got %s(\"%s\") %s \"%s\"", orig,
                target, key, op, val);
    Etcdserverpb__Compare *c = ctl_keep(malloc(sizeof(*c)));
    etcdserverpb__compare__init(c);
    c->key = bin(key);
    if (strcmp(op, "=") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    else if (strcmp(op, "!=") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL;
    else if (strcmp(op, "<") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS;
    else if (strcmp(op, ">") == 0)
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER;
    else
        ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s (Unknown result op %s)", orig,
                op);
    char *end;
    long long v = strtoll(val, &end, 10);
    bool num_ok = *val && !*end;
    if (strcmp(target, "ver") == 0 || strcmp(target, "version") == 0) {
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c->version = v;
    } else if (strcmp(target, "c") == 0 || strcmp(target, "create") == 0) {
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c->create_revision = v;
    } else if (strcmp(target, "m") == 0 || strcmp(target, "mod") == 0) {
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c->mod_revision = v;
    } else if (strcmp(target, "val") == 0 || strcmp(target, "value") == 0) {
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
        c->value = bin(val);
        num_ok = true;
    } else if (strcmp(target, "lease") == 0) {
        c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
        c->lease = v;
    } else {
        ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s (unknown target %s)", orig,
                target);
    }
    if (!num_ok)
        ctl_die(CTL_EXIT_INVALID_INPUT, "invalid txn compare request: %s", orig);
    return c;
}

static Etcdserverpb__RequestOp *parse_op(struct ctl *ctl, char *line)
{
    char *args[64];
    char *orig = ctl_strdup(line);
    int n = argify(line, args, 64);
    line = orig;
    Etcdserverpb__RequestOp *op = ctl_keep(malloc(sizeof(*op)));
    etcdserverpb__request_op__init(op);
    if (n < 2)
        ctl_die(CTL_EXIT_INVALID_INPUT, "invalid txn compare request: %s", line);
    if (strcmp(args[0], "get") == 0) {
        op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
        op->request_range = ctl_keep(malloc(sizeof(*op->request_range)));
        build_get(ctl, n - 1, args + 1, op->request_range);
    } else if (strcmp(args[0], "put") == 0) {
        op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        op->request_put = ctl_keep(malloc(sizeof(*op->request_put)));
        build_put(n - 1, args + 1, op->request_put, true);
    } else if (strcmp(args[0], "del") == 0) {
        op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
        op->request_delete_range = ctl_keep(malloc(sizeof(*op->request_delete_range)));
        build_del(n - 1, args + 1, op->request_delete_range);
    } else {
        ctl_die(CTL_EXIT_INVALID_INPUT, "invalid txn request: %s", line);
    }
    return op;
}

static size_t read_section(FILE *in, bool compares, struct ctl *ctl, void ***out)
{
    size_t n = 0, cap = 8;
    void **v = malloc(cap * sizeof(void *));
    for (;;) {
        char *line = trim(read_line(in));
        if (*line == '\0')
            break;
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof(void *));
        v[n++] = compares ? (void *)parse_compare(line) : (void *)parse_op(ctl, line);
    }
    *out = ctl_keep(v);
    return n;
}

static void print_txn(struct ctl *ctl, const Etcdserverpb__TxnResponse *r)
{
    bool fields = ctl->format == CTL_FIELDS;
    if (fields) {
        ctl_fields_hdr(r->header);
        printf("\"Succeeded\" : %s\n", r->succeeded ? "true" : "false");
    } else {
        puts(r->succeeded ? "SUCCESS" : "FAILURE");
    }
    for (size_t i = 0; i < r->n_responses; i++) {
        const Etcdserverpb__ResponseOp *o = r->responses[i];
        if (!fields)
            putchar('\n');
        switch (o->response_case) {
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
            ctl_print_get(ctl, o->response_range);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
            print_put(ctl, o->response_put);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
            print_del(ctl, o->response_delete_range);
            break;
        default:
            printf("unexpected response\n");
        }
    }
}

static void txn_printer(struct ctl *ctl, const ProtobufCMessage *r)
{
    print_txn(ctl, (const Etcdserverpb__TxnResponse *)r);
}

int cmd_txn(struct ctl *ctl, int argc, char **argv)
{
    bool interactive = false, b;
    for (int i = 0; i < argc; i++) {
        if (ctl_bool_short(argv[i], 'i', "interactive", &b))
            interactive = b;
        else if (argv[i][0] == '-')
            ctl_unknown_flag(argv[i]);
        else
            ctl_die(CTL_EXIT_BAD_ARGS, "txn command does not accept argument");
    }
    Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
    if (interactive)
        printf("compares:\n");
    req.n_compare = read_section(stdin, true, ctl, (void ***)&req.compare);
    if (interactive)
        printf("success requests (get, put, del):\n");
    req.n_success = read_section(stdin, false, ctl, (void ***)&req.success);
    if (interactive)
        printf("failure requests (get, put, del):\n");
    req.n_failure = read_section(stdin, false, ctl, (void ***)&req.failure);
    return kv_call(ctl, "/etcdserverpb.KV/Txn", &req.base, &etcdserverpb__txn_response__descriptor,
                   txn_printer);
}

/* ---- watch ---- */

static void print_watch_json(const Etcdserverpb__WatchResponse *r)
{
    /* clientv3.WatchResponse: Go field names, no omitempty; Header is a
     * value (pb.ResponseHeader, with its json tags); Events are mvccpb.Event */
    printf("{\"Header\":");
    if (r->header)
        ctl_json_message(stdout, &r->header->base);
    else
        printf("{}");
    printf(",\"Events\":");
    if (r->n_events == 0) {
        printf("null");
    } else {
        putchar('[');
        for (size_t i = 0; i < r->n_events; i++) {
            if (i)
                putchar(',');
            ctl_json_message(stdout, &r->events[i]->base);
        }
        putchar(']');
    }
    printf(",\"CompactRevision\":%lld,\"Canceled\":%s,\"Created\":%s}\n",
           (long long)r->compact_revision, r->canceled ? "true" : "false",
           r->created ? "true" : "false");
}

int cmd_watch(struct ctl *ctl, int argc, char **argv)
{
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    char *pos[3];
    int np = 0;
    bool prefix = false, b;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if ((v = ctl_flag(argc, argv, &i, "rev")) != NULL)
            cr.start_revision = parse_i64(v, "rev");
        else if (ctl_bool(argv[i], "prefix", &b))
            prefix = b;
        else if (ctl_bool(argv[i], "prev-kv", &b))
            cr.prev_kv = b;
        else
            ctl_positional(pos, 3, &np, argv[i]);
    }
    if (np == 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "bad number of arguments");
    if (np > 2)
        ctl_die(CTL_EXIT_BAD_ARGS, "bad number of arguments");
    if (prefix && np == 2)
        ctl_die(CTL_EXIT_BAD_ARGS, "`range_end` and `--prefix` are mutually exclusive");
    ctl_unsupported(ctl, CTL_TABLE);
    key_range(pos, np, prefix, false, &cr.key, &cr.range_end); /* (range_end with --prefix: above) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    qc_client *c = ctl_connect(ctl);
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    int64_t next_rev = cr.start_revision;
    for (;;) {
        qc_stream *s;
        struct qc_status st;
        int rc = qc_stream_open(c, QC_METHOD_WATCH, &s);
        if (rc == 0)
            rc = qc_stream_send(s, &wr.base);
        for (; rc >= 0;) {
            Etcdserverpb__WatchResponse *r;
            rc = qc_stream_recv(s, &etcdserverpb__watch_response__descriptor,
                                (ProtobufCMessage **)&r, -1, &st);
            if (rc == 1) {
                rc = QC_EUNAVAILABLE;
                break;
            }
            if (rc < 0)
                break;
            if (r->canceled) {
                fprintf(stderr, "watch was canceled (%s)\n",
                        r->cancel_reason && *r->cancel_reason ? r->cancel_reason
                        : r->compact_revision
                            ? "etcdserver: mvcc: required revision has been compacted"
                            : "");
            }
            if (ctl->format == CTL_JSON) {
                if (r->n_events || r->canceled)
                    print_watch_json(r);
            } else {
                if (ctl->format == CTL_FIELDS && (r->n_events || r->canceled))
                    ctl_fields_hdr(r->header);
                for (size_t i = 0; i < r->n_events; i++) {
                    const Mvccpb__Event *e = r->events[i];
                    const char *type =
                        e->type == MVCCPB__EVENT__EVENT_TYPE__DELETE ? "DELETE" : "PUT";
                    if (ctl->format == CTL_FIELDS) {
                        printf("\"Type\" : %s\n", type);
                        if (e->prev_kv)
                            ctl_fields_kv("Prev", e->prev_kv);
                        ctl_fields_kv("", e->kv);
                    } else {
                        puts(type);
                        if (e->prev_kv)
                            ctl_print_kv(ctl, e->prev_kv);
                        ctl_print_kv(ctl, e->kv);
                    }
                }
            }
            for (size_t i = 0; i < r->n_events; i++)
                next_rev = r->events[i]->kv->mod_revision + 1;
            fflush(stdout);
            bool canceled = r->canceled;
            protobuf_c_message_free_unpacked(&r->base, NULL);
            if (canceled) {
                qc_stream_free(s);
                ctl_die(CTL_EXIT_INTERRUPTED, "watch is canceled by the server");
            }
        }
        qc_stream_free(s);
        /* clientv3 resumes a broken watch on another endpoint from the next revision */
        if (rc != QC_EUNAVAILABLE) {
            ctl_fail(rc, &st);
            return CTL_EXIT_ERROR;
        }
        cr.start_revision = next_rev;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int cmd_compaction(struct ctl *ctl, int argc, char **argv)
{
    bool physical = false, b;
    char *pos[2];
    int np = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_bool(argv[i], "physical", &b))
            physical = b;
        else
            ctl_positional(pos, 2, &np, argv[i]);
    }
    if (np != 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "compaction command needs 1 argument");
    char *end;
    errno = 0;
    long long rev = strtoll(pos[0], &end, 10);
    if (errno || *end || end == pos[0])
        ctl_die(CTL_EXIT_ERROR, "strconv.ParseInt: parsing \"%s\": invalid syntax", pos[0]);
    qc_client *c = ctl_connect(ctl);
    struct qc_status st;
    int rc = qc_compact(c, rev, physical, NULL, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        return CTL_EXIT_ERROR;
    }
    printf("compacted revision %lld\n", rev);
    qc_close(c);
    return 0;
}
