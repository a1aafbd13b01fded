/* server/applylog.c: the lines etcd writes about one applied request
 * (etcdserver/util.go): "apply request took too long" when an apply takes
 * longer than --experimental-warning-apply-duration, and "failed to apply
 * request" when it fails, each with the request as etcd's
 * InternalRaftStringer prints it (the compact protobuf text, values
 * replaced by their sizes, no passwords). */
#include "server/server_int.h"

#include "base/err.h"
#include "base/log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- a small text builder; a failed allocation leaves the text short ---- */

static void put(struct buf *o, const char *s, size_t n)
{
    (void)buf_append(o, s, n);
}

static void puts_(struct buf *o, const char *s)
{
    put(o, s, strlen(s));
}

static void putf(struct buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *o, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        put(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* quoted: Go's protobuf text writeString: \n \r \t \" \\ escaped, other
 * bytes outside 0x20..0x7e as three octal digits. */
static void quoted(struct buf *o, const uint8_t *s, size_t n)
{
    puts_(o, "\"");
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        switch (c) {
        case '\n':
            puts_(o, "\\n");
            break;
        case '\r':
            puts_(o, "\\r");
            break;
        case '\t':
            puts_(o, "\\t");
            break;
        case '"':
            puts_(o, "\\\"");
            break;
        case '\\':
            puts_(o, "\\\\");
            break;
        default:
            if (c >= 0x20 && c < 0x7f)
                put(o, (const char *)&c, 1);
            else
                putf(o, "\\%03o", c);
        }
    }
    puts_(o, "\"");
}

/* ---- proto.CompactTextString over protobuf-c descriptors ---- */

static void text_message(struct buf *o, const ProtobufCMessage *m);

static bool is_zero(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        return *(const uint32_t *)p == 0;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return *(const uint64_t *)p == 0;
    case PROTOBUF_C_TYPE_BOOL:
        return !*(const protobuf_c_boolean *)p;
    case PROTOBUF_C_TYPE_FLOAT:
        return *(const float *)p == 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        return *(const double *)p == 0;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return s == NULL || s[0] == '\0';
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(void *const *)p == NULL;
    }
    return true;
}

static void text_value(struct buf *o, const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        putf(o, "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        putf(o, "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        putf(o, "%" PRId64, *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        putf(o, "%" PRIu64, *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        puts_(o, *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        putf(o, "%g", (double)*(const float *)p);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        putf(o, "%g", *(const double *)p);
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        if (ev != NULL)
            puts_(o, ev->name);
        else
            putf(o, "%d", v);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        quoted(o, (const uint8_t *)(s != NULL ? s : ""), s != NULL ? strlen(s) : 0);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        quoted(o, b->data, b->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        puts_(o, "<");
        text_message(o, *(const ProtobufCMessage *const *)p);
        puts_(o, ">");
        break;
    }
}

static size_t value_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* text_message: each set field as "name:value " in field-number order
 * (etcd's messages declare them in that order); proto3 zero values left
 * out, a oneof member printed when it is the one set. A bytes field named
 * "value" of a PutRequest or a Compare is printed as value_size:N (etcd's
 * loggable put and compare). */
static void text_message(struct buf *o, const ProtobufCMessage *m)
{
    if (m == NULL)
        return;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    bool sizes =
        d == &etcdserverpb__put_request__descriptor || d == &etcdserverpb__compare__descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)m;
        const void *p = base + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)p;
            size_t sz = value_size(f);
            for (size_t k = 0; k < n; k++) {
                putf(o, "%s:", f->name);
                text_value(o, f, arr + k * sz);
                puts_(o, " ");
            }
            continue;
        }
        bool set;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
            set = *(const uint32_t *)(base + f->quantifier_offset) == f->id;
        else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0 &&
                 f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            set = *(const protobuf_c_boolean *)(base + f->quantifier_offset);
        else
            set = !is_zero(f, p);
        if (!set)
            continue;
        if (sizes && f->type == PROTOBUF_C_TYPE_BYTES && strcmp(f->name, "value") == 0) {
            /* value_size is a plain proto3 field there: 0 is left out */
            putf(o, "value_size:%zu ", ((const ProtobufCBinaryData *)p)->len);
            continue;
        }
        putf(o, "%s:", f->name);
        text_value(o, f, p);
        puts_(o, " ");
    }
}

static void text_txn(struct buf *o, const Etcdserverpb__TxnRequest *t);

/* text_op: etcd's requestOpStringer */
static void text_op(struct buf *o, const Etcdserverpb__RequestOp *op)
{
    if (op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT) {
        puts_(o, "request_put:<");
        text_message(o, &op->request_put->base);
        puts_(o, ">");
    } else if (op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN) {
        puts_(o, "request_txn:<");
        text_txn(o, op->request_txn);
        puts_(o, ">");
    } else {
        text_message(o, &op->base);
    }
}

/* text_txn: etcd's txnRequestStringer: "compare:<...> success:<...>
 * failure:<...>", the elements of each joined with a space */
static void text_txn(struct buf *o, const Etcdserverpb__TxnRequest *t)
{
    puts_(o, "compare:<");
    for (size_t i = 0; i < t->n_compare; i++) {
        if (i > 0)
            puts_(o, " ");
        text_message(o, &t->compare[i]->base);
    }
    puts_(o, "> success:<");
    for (size_t i = 0; i < t->n_success; i++) {
        if (i > 0)
            puts_(o, " ");
        text_op(o, t->success[i]);
    }
    puts_(o, "> failure:<");
    for (size_t i = 0; i < t->n_failure; i++) {
        if (i > 0)
            puts_(o, " ");
        text_op(o, t->failure[i]);
    }
    puts_(o, ">");
}

/* the InternalRaftRequest field each entry kind is in etcd */
static const char *const kind_names[ENTRY__COUNT] = {
    [ENTRY_PUT] = "put",
    [ENTRY_DELETE_RANGE] = "delete_range",
    [ENTRY_TXN] = "txn",
    [ENTRY_COMPACT] = "compaction",
    [ENTRY_LEASE_GRANT] = "lease_grant",
    [ENTRY_LEASE_REVOKE] = "lease_revoke",
    [ENTRY_LEASE_CHECKPOINT] = "lease_checkpoint",
    [ENTRY_ALARM] = "alarm",
    [ENTRY_MEMBER] = "cluster_member_attr_set",
    [ENTRY_AUTH_ENABLE] = "auth_enable",
    [ENTRY_AUTH_DISABLE] = "auth_disable",
    [ENTRY_AUTHENTICATE] = "authenticate",
    [ENTRY_AUTH_USER_ADD] = "auth_user_add",
    [ENTRY_AUTH_USER_GET] = "auth_user_get",
    [ENTRY_AUTH_USER_LIST] = "auth_user_list",
    [ENTRY_AUTH_USER_DELETE] = "auth_user_delete",
    [ENTRY_AUTH_USER_CHANGE_PASSWORD] = "auth_user_change_password",
    [ENTRY_AUTH_USER_GRANT_ROLE] = "auth_user_grant_role",
    [ENTRY_AUTH_USER_REVOKE_ROLE] = "auth_user_revoke_role",
    [ENTRY_AUTH_ROLE_ADD] = "auth_role_add",
    [ENTRY_AUTH_ROLE_GET] = "auth_role_get",
    [ENTRY_AUTH_ROLE_LIST] = "auth_role_list",
    [ENTRY_AUTH_ROLE_DELETE] = "auth_role_delete",
    [ENTRY_AUTH_ROLE_GRANT_PERMISSION] = "auth_role_grant_permission",
    [ENTRY_AUTH_ROLE_REVOKE_PERMISSION] = "auth_role_revoke_permission",
    [ENTRY_ZK_WRITE] = "zookeeper_write",
};

void server_request_text(struct buf *o, const struct entry *e, uint64_t id)
{
    putf(o, "header:<ID:%" PRIu64 " ", id);
    if (e->auth_user != NULL && e->auth_user[0]) {
        puts_(o, "username:");
        quoted(o, (const uint8_t *)e->auth_user, strlen(e->auth_user));
        puts_(o, " ");
    }
    if (e->auth_rev != 0)
        putf(o, "auth_revision:%" PRIu64 " ", e->auth_rev);
    puts_(o, "> ");
    const char *name =
        (unsigned)e->kind < ENTRY__COUNT && kind_names[e->kind] ? kind_names[e->kind] : "request";
    switch (e->kind) {
    case ENTRY_LEASE_GRANT: {
        const Etcdserverpb__LeaseGrantRequest *r = (const void *)e->req;
        putf(o, "lease_grant:<ttl:%" PRId64 "-second id:%016" PRIx64 ">", r->ttl, (uint64_t)r->id);
        return;
    }
    case ENTRY_LEASE_REVOKE: {
        const Etcdserverpb__LeaseRevokeRequest *r = (const void *)e->req;
        putf(o, "lease_revoke:<id:%016" PRIx64 ">", (uint64_t)r->id);
        return;
    }
    case ENTRY_AUTHENTICATE: {
        const Etcdserverpb__InternalAuthenticateRequest *r = (const void *)e->req;
        putf(o, "authenticate:<name:%s simple_token:%s>", r->name ? r->name : "",
             r->simple_token ? r->simple_token : "");
        return;
    }
    case ENTRY_AUTH_USER_ADD: {
        /* the name alone: never a password or its hash */
        const Etcdserverpb__AuthUserAddRequest *r = (const void *)e->req;
        puts_(o, "auth_user_add:<name:");
        puts_(o, r->name ? r->name : "");
        puts_(o, ">");
        return;
    }
    case ENTRY_AUTH_USER_CHANGE_PASSWORD: {
        const Etcdserverpb__AuthUserChangePasswordRequest *r = (const void *)e->req;
        puts_(o, "auth_user_change_password:<name:");
        puts_(o, r->name ? r->name : "");
        puts_(o, ">");
        return;
    }
    case ENTRY_PUT:
        puts_(o, "put:<");
        text_message(o, e->req);
        puts_(o, ">");
        return;
    case ENTRY_TXN:
        puts_(o, "txn:<");
        text_txn(o, (const Etcdserverpb__TxnRequest *)e->req);
        puts_(o, ">");
        return;
    default:
        putf(o, "%s:<", name);
        text_message(o, e->req);
        puts_(o, "> ");
    }
}

const char *server_etcd_err_text(int code)
{
    /* the error etcd's applier returns is its package's, not the gRPC
     * status text the client sees: "auth: permission denied", not
     * "etcdserver: permission denied" */
    static const struct {
        int code;
        const char *text;
    } inner[] = {
        {QERR_COMPACTED, "mvcc: required revision has been compacted"},
        {QERR_FUTURE_REV, "mvcc: required revision is a future revision"},
        {QERR_LEASE_NOT_FOUND, "lease not found"},
        {QERR_LEASE_EXISTS, "lease already exists"},
        {QERR_LEASE_TTL_TOO_LARGE, "too large lease TTL"},
        {QERR_INVALID_TOKEN, "auth: invalid auth token"},
        {QERR_PERMISSION_DENIED, "auth: permission denied"},
        {QERR_ROOT_USER_NOT_EXIST, "auth: root user does not exist"},
        {QERR_ROOT_ROLE_NOT_EXIST, "auth: root user does not have root role"},
        {QERR_USER_EXISTS, "auth: user already exists"},
        {QERR_USER_EMPTY, "auth: user name is empty"},
        {QERR_USER_NOT_FOUND, "auth: user not found"},
        {QERR_ROLE_EXISTS, "auth: role already exists"},
        {QERR_ROLE_NOT_FOUND, "auth: role not found"},
        {QERR_ROLE_EMPTY, "auth: role name is empty"},
        {QERR_AUTH_FAILED, "auth: authentication failed, invalid user ID or password"},
        {QERR_ROLE_NOT_GRANTED, "auth: role is not granted to the user"},
        {QERR_PERMISSION_NOT_GRANTED, "auth: permission is not granted to the role"},
        {QERR_AUTH_NOT_ENABLED, "auth: authentication is not enabled"},
        {QERR_INVALID_AUTH_MGMT, "auth: invalid auth management"},
        {QERR_AUTH_OLD_REVISION, "auth: revision in header is old"},
    };
    for (size_t i = 0; i < sizeof(inner) / sizeof(inner[0]); i++)
        if (inner[i].code == code)
            return inner[i].text;
    return q_strerror(code);
}

void server_log_apply(struct server *s, const struct entry *e, uint64_t id, uint64_t took_ns)
{
    bool slow = took_ns > s->cfg.warning_apply_ns;
    bool failed = e->err != 0;
    if (!(slow && log_enabled(LOG_WARN)) && !(failed && log_enabled(LOG_WARN)))
        return;
    struct buf req = {0};
    server_request_text(&req, e, id);
    (void)buf_append_byte(&req, 0);
    char resp[32] = "";
    if (e->out.len > 0)
        snprintf(resp, sizeof(resp), "size:%zu", e->out.len);
    const char *rq = req.data != NULL ? (const char *)req.data : "";
    const char *err = failed ? server_etcd_err_text(e->err) : NULL;
    if (slow)
        log_kv(LOG_WARN, "server", "apply request took too long", LF_DUR("took", took_ns),
               LF_DUR("expected-duration", s->cfg.warning_apply_ns), LF_STR("prefix", ""),
               LF_STR("request", rq), LF_STR("response", resp), LF_STR("error", err));
    if (failed)
        log_kv(LOG_WARN, "server", "failed to apply request", LF_DUR("took", took_ns),
               LF_STR("request", rq), LF_STR("response", resp), LF_STR("error", err));
    buf_free(&req);
}
