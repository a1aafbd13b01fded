/* http/v2_int.h: internals of the v2 keys emulation (v2.c, v2_ops.c,
 * v2_watch.c, v2_util.c) and of its unit test (tests/http/test_v2.c).
 *
 * v2_util.c holds the pure helpers (no I/O): Go's path cleaning, the v3 key
 * layout of etcd's v2v3 store, form parsing as Go's net/http does it, the
 * JSON Go's encoding/json writes, RFC 3339 times. The rest is described in
 * v2.c's header comment. */
#ifndef QUORUM_HTTP_V2_INT_H
#define QUORUM_HTTP_V2_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/buf.h"

/* ---- paths (byte strings: a v2 key may hold any byte, NUL included) ---- */

/* v2_path_clean writes Go's path.Clean of |p| (|n| bytes) to |out| (room
 * for n + 2 bytes) and returns its length. */
size_t v2_path_clean(const char *p, size_t n, char *out);
/* v2_mux_clean is Go's ServeMux cleanPath: a leading "/" added, cleaned,
 * a trailing "/" kept (out: room for n + 3 bytes). */
size_t v2_mux_clean(const char *p, size_t n, char *out);
/* v2_path_escape appends |p| escaped as Go's url.URL.EscapedPath does. */
int v2_path_escape(struct buf *b, const char *p, size_t n);

/* ---- the v3 key layout (etcd's v2v3 store) ----
 * A v2 node's store path is "/1" + its cleaned path ("/1" alone: the
 * root). Its v3 key is PFX "/" DDD "/k/" path, DDD the number of "/" in
 * the path plus |add| (%03d), and a trailing "/" for a directory. */
int v2_key(struct buf *out, const char *pfx, const char *path, size_t n, int add, bool dir);
/* v2_key_path: the store path ("/1...") of v3 key |key|, or false when the
 * key is not a node of the layout under |pfx| (the act key, foreign keys).
 * *|dir|: the key names a directory. */
bool v2_key_path(const char *pfx, const uint8_t *key, size_t n, struct buf *out, bool *dir);
/* v2_prefix_end: the range end of every key starting with |p| (etcd's
 * clientv3.GetPrefixRangeEnd). */
int v2_prefix_end(struct buf *out, const uint8_t *p, size_t n);

/* ---- forms (Go's url.ParseQuery and http.Request.ParseForm) ---- */

struct v2_field {
    char *k, *v; /* decoded, NUL-terminated (may hold NULs: use the lengths) */
    size_t kn, vn;
};
struct v2_form {
    struct v2_field *f;
    size_t n, cap;
};
/* v2_form_parse appends the fields of |s| (|n| bytes, "a=b&c=d"). Returns
 * 0, 1 when Go would report an error (its text in |err|: the first
 * error, a ";" overriding as Go 1.17+ does; the other fields are kept), or
 * -ENOMEM. */
int v2_form_parse(struct v2_form *f, const char *s, size_t n, char *err, size_t errlen);
/* v2_form_get: the first field named |name|, or NULL. */
const struct v2_field *v2_form_get(const struct v2_form *f, const char *name);
void v2_form_free(struct v2_form *f);
/* v2_ctype_is_form: |ctype| (may be NULL) names
 * application/x-www-form-urlencoded (case aside, parameters aside). */
bool v2_ctype_is_form(const char *ctype);

/* Go's strconv.ParseBool and ParseUint(s, 10, 64). */
bool v2_parse_bool(const char *s, size_t n, bool *out);
bool v2_parse_uint(const char *s, size_t n, uint64_t *out);

/* ---- output as Go writes it ---- */

/* v2_json_string appends |s| as a JSON string the way Go's encoding/json
 * does (HTML-safe: <>& as \u003c..., invalid UTF-8 as \ufffd, U+2028/9
 * escaped, control bytes as \u00XX but \n \r \t). */
int v2_json_string(struct buf *b, const void *s, size_t n);
/* v2_go_quote appends Go's strconv.Quote of |s|. */
int v2_go_quote(struct buf *b, const void *s, size_t n);
/* v2_rfc3339 writes |unix_ns| as Go's time.RFC3339Nano in UTC
 * ("2026-11-25T12:35:44.786799431Z", trailing zeros of the fraction
 * dropped). Returns the length. */
int v2_rfc3339(char *out, size_t cap, int64_t unix_ns);

/* ---- nodes and events (v2_node.c) ----
 * A node as etcd's v2store.NodeExtern (every field omitempty; the value
 * is a pointer, so "" is printed). |key| is the store path ("/1..."),
 * printed without "/1". Nodes live in the request's arena. */
struct v2_node {
    const char *key;
    size_t key_len;
    const uint8_t *value; /* NULL: no value (a directory) */
    size_t value_len;
    bool dir;
    int64_t lease;  /* the v3 lease, for ttl and expiration */
    bool has_exp;   /* print expiration (and ttl when > 0) */
    int64_t exp_ns; /* unix ns */
    int64_t ttl;    /* seconds; 0: not printed */
    uint64_t modified, created;
    struct v2_node **nodes;
    size_t n_nodes, cap_nodes;
};

struct v2_event {
    const char *action;
    struct v2_node *node, *prev; /* either may be NULL */
};

struct Mvccpb__KeyValue;
/* v2_node_from_kv: etcd's mkV2Node of a v3 kv (NULL when the key is not a
 * node of the layout): key, dir from the trailing "/", value for a file,
 * indexes = revisions - 1 (0 stays 0), the kv's lease. */
struct v2_node *v2_node_from_kv(struct arena *a, const char *pfx,
                                const struct Mvccpb__KeyValue *kv);
struct v2_node *v2_node_new(struct arena *a, const char *key, size_t key_len);
int v2_node_add_child(struct arena *a, struct v2_node *parent, struct v2_node *child);
/* v2_event_json appends the event as Go's json.Encoder writes it (with the
 * trailing newline). */
int v2_event_json(struct buf *b, const struct v2_event *ev);
/* v2_error_json: {"errorCode":N,"message":M[,"cause":C],"index":I}\n */
int v2_error_json(struct buf *b, int code, const char *cause, size_t cause_len, uint64_t index);
/* v2_error_message and v2_error_status: etcd's v2error table. */
const char *v2_error_message(int code);
int v2_error_status(int code);

/* v2_rev: etcd's mkV2Rev, a v3 revision as a v2 index (0 stays 0). */
static inline uint64_t v2_rev(int64_t rev)
{
    return rev <= 0 ? 0 : (uint64_t)(rev - 1);
}

#endif
