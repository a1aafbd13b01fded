/* http/v2_node.c: v2 nodes and events, and their JSON as etcd writes it
 * (v2store.NodeExtern and Event through Go's json.Encoder; v2error.Error
 * through json.Marshal plus a newline). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "http/v2_int.h"
#include "kv.pb-c.h"

struct v2_node *v2_node_new(struct arena *a, const char *key, size_t key_len)
{
    struct v2_node *n = arena_alloc(a, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->key = arena_dup(a, key, key_len + 1);
    if (n->key == NULL)
        return NULL;
    ((char *)n->key)[key_len] = 0;
    n->key_len = key_len;
    return n;
}

struct v2_node *v2_node_from_kv(struct arena *a, const char *pfx, const Mvccpb__KeyValue *kv)
{
    if (kv == NULL)
        return NULL;
    struct buf p = {0};
    bool dir = false;
    struct v2_node *n = NULL;
    if (v2_key_path(pfx, kv->key.data, kv->key.len, &p, &dir))
        n = v2_node_new(a, (const char *)p.data, p.len);
    buf_free(&p);
    if (n == NULL)
        return NULL;
    n->dir = dir;
    n->created = v2_rev(kv->create_revision);
    n->modified = v2_rev(kv->mod_revision);
    n->lease = kv->lease;
    if (!dir) {
        n->value =
            arena_dup(a, kv->value.data ? kv->value.data : (const uint8_t *)"", kv->value.len);
        n->value_len = kv->value.len;
        if (n->value == NULL)
            return NULL;
    }
    return n;
}

int v2_node_add_child(struct arena *a, struct v2_node *parent, struct v2_node *child)
{
    if (parent->n_nodes == parent->cap_nodes) {
        size_t cap = parent->cap_nodes ? parent->cap_nodes * 2 : 4;
        struct v2_node **nn = arena_alloc(a, cap * sizeof(*nn));
        if (nn == NULL)
            return -ENOMEM;
        if (parent->n_nodes > 0)
            memcpy(nn, parent->nodes, parent->n_nodes * sizeof(*nn));
        parent->nodes = nn;
        parent->cap_nodes = cap;
    }
    parent->nodes[parent->n_nodes++] = child;
    return 0;
}

static int put(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

static int put_u64(struct buf *b, const char *name, uint64_t v)
{
    char t[64];
    int n = snprintf(t, sizeof(t), "\"%s\":%llu", name, (unsigned long long)v);
    return buf_append(b, t, (size_t)n);
}

/* node_json writes |n| and its children, recursively (a listing is at
 * most MAX_LEVELS deep, v2.c). */
static int node_json(struct buf *b, const struct v2_node *n)
{
    int rv = buf_append_byte(b, '{');
    bool first = true;
#define SEP() (first ? (first = false, 0) : buf_append_byte(b, ','))
    /* the store path without its "/1" */
    const char *k = n->key;
    size_t kn = n->key_len;
    if (kn >= 2 && k[0] == '/' && k[1] == '1') {
        k += 2;
        kn -= 2;
    }
    if (rv == 0 && kn > 0) {
        rv = SEP() || put(b, "\"key\":") || v2_json_string(b, k, kn);
    }
    if (rv == 0 && n->value != NULL)
        rv = SEP() || put(b, "\"value\":") || v2_json_string(b, n->value, n->value_len);
    if (rv == 0 && n->dir)
        rv = SEP() || put(b, "\"dir\":true");
    if (rv == 0 && n->has_exp) {
        char t[64];
        int tn = v2_rfc3339(t, sizeof(t), n->exp_ns);
        rv = SEP() || put(b, "\"expiration\":\"") || buf_append(b, t, (size_t)tn) ||
             buf_append_byte(b, '"');
        if (rv == 0 && n->ttl > 0) {
            char s[48];
            int sn = snprintf(s, sizeof(s), ",\"ttl\":%lld", (long long)n->ttl);
            rv = buf_append(b, s, (size_t)sn);
        }
    }
    if (rv == 0 && n->n_nodes > 0) {
        rv = SEP() || put(b, "\"nodes\":[");
        for (size_t i = 0; rv == 0 && i < n->n_nodes; i++) {
            if (i > 0)
                rv = buf_append_byte(b, ',');
            if (rv == 0)
                rv = node_json(b, n->nodes[i]);
        }
        if (rv == 0)
            rv = buf_append_byte(b, ']');
    }
    if (rv == 0 && n->modified)
        rv = SEP() || put_u64(b, "modifiedIndex", n->modified);
    if (rv == 0 && n->created)
        rv = SEP() || put_u64(b, "createdIndex", n->created);
#undef SEP
    if (rv == 0)
        rv = buf_append_byte(b, '}');
    return rv ? -ENOMEM : 0;
}

int v2_event_json(struct buf *b, const struct v2_event *ev)
{
    int rv = put(b, "{\"action\":") || v2_json_string(b, ev->action, strlen(ev->action));
    if (rv == 0 && ev->node != NULL)
        rv = put(b, ",\"node\":") || node_json(b, ev->node);
    if (rv == 0 && ev->prev != NULL)
        rv = put(b, ",\"prevNode\":") || node_json(b, ev->prev);
    if (rv == 0)
        rv = put(b, "}\n");
    return rv ? -ENOMEM : 0;
}

/* clang-format off */
const char *v2_error_message(int code)
{
    switch (code) {
    case 100: return "Key not found";
    case 101: return "Compare failed";
    case 102: return "Not a file";
    case 104: return "Not a directory";
    case 105: return "Key already exists";
    case 107: return "Root is read only";
    case 108: return "Directory not empty";
    case 110: return "The request requires user authentication";
    case 201: return "PrevValue is Required in POST form";
    case 202: return "The given TTL in POST form is not a number";
    case 203: return "The given index in POST form is not a number";
    case 209: return "Invalid field";
    case 210: return "Invalid POST form";
    case 211: return "Value provided on refresh";
    case 212: return "A TTL must be provided on refresh";
    case 300: return "Raft Internal Error";
    case 301: return "During Leader Election";
    case 401: return "The event in requested index is outdated and cleared";
    default: return "";
    }
}

int v2_error_status(int code)
{
    switch (code) {
    case 100: return 404;
    case 102:
    case 108: return 403;
    case 110: return 401;
    case 101:
    case 105: return 412;
    case 300:
    case 301: return 500;
    default: return 400;
    }
}
/* clang-format on */

int v2_error_json(struct buf *b, int code, const char *cause, size_t cause_len, uint64_t index)
{
    char t[64];
    int n = snprintf(t, sizeof(t), "{\"errorCode\":%d,\"message\":", code);
    const char *m = v2_error_message(code);
    int rv = buf_append(b, t, (size_t)n) || v2_json_string(b, m, strlen(m));
    if (rv == 0 && cause_len > 0)
        rv = put(b, ",\"cause\":") || v2_json_string(b, cause, cause_len);
    n = snprintf(t, sizeof(t), ",\"index\":%llu}\n", (unsigned long long)index);
    if (rv == 0)
        rv = buf_append(b, t, (size_t)n);
    return rv ? -ENOMEM : 0;
}
