/* server/call.c: the face-neutral call (call.h), the table of every
 * service method, and the gRPC face on the core loop (no front loops). */
#include "server/server_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Freed calls kept for the next ones (a call per request: no malloc on
 * the way). Calls live on the core loop's thread only. */
#define SPARE_CALLS 256
static qcall *spare[SPARE_CALLS];
static int nspare;

qcall *qcall_new(struct server *s, const struct qcall_method *m, const struct qcall_face *face,
                 void *face_ctx)
{
    qcall *c = nspare > 0 ? spare[--nspare] : malloc(sizeof(*c));
    if (c == NULL)
        return NULL;
    memset(c, 0, sizeof(*c));
    c->m = m;
    c->s = s;
    c->face = face;
    c->face_ctx = face_ctx;
    return c;
}

int qcall_set_credentials(qcall *call, const char *token, size_t token_len, const char *cn)
{
    if (token != NULL) {
        call->token = strndup(token, token_len);
        if (call->token == NULL)
            return -ENOMEM;
        call->token_len = token_len;
    }
    if (cn != NULL && (call->cn = strdup(cn)) == NULL)
        return -ENOMEM;
    return 0;
}

void qcall_free(qcall *call)
{
    free(call->token);
    free(call->cn);
    if (nspare < SPARE_CALLS)
        spare[nspare++] = call;
    else
        free(call);
}

int qcall_send(qcall *call, const uint8_t *msg, size_t len)
{
    if (call->finished)
        return -EPIPE;
    return call->face->send(call, msg, len);
}

int qcall_send_take(qcall *call, struct buf *msg)
{
    if (call->finished)
        return -EPIPE;
    if (call->face->send_take != NULL)
        return call->face->send_take(call, msg);
    return call->face->send(call, msg->data + GRPC_MSG_PREFIX, msg->len - GRPC_MSG_PREFIX);
}

int qcall_finish(qcall *call, int status, const char *message)
{
    if (call->finished)
        return -EPIPE;
    call->finished = true;
    return call->face->finish(call, status, message);
}

size_t qcall_pending_bytes(const qcall *call)
{
    return call->face->pending(call);
}

struct server *server_of(qcall *call)
{
    return call->s;
}

/* ---- every method ---- */

const struct qcall_method *const *server_methods;
size_t server_methods_n;

/* an entry of a closed call must be forgotten: the default on_close */
void server_entry_call_closed(qcall *call)
{
    struct entry *e = qcall_get_data(call);
    if (e != NULL)
        e->call = NULL;
}

int server_methods_init(void)
{
    if (server_methods != NULL)
        return 0;
    const struct qcall_method *tables[] = {server_kv_methods,      server_maintenance_methods,
                                           server_cluster_methods, server_lease_methods,
                                           server_watch_methods,   server_lock_methods,
                                           server_election_methods,
                                           server_auth_methods,
                                           server_health_methods};
    size_t counts[] = {server_kv_methods_n,      server_maintenance_methods_n,
                       server_cluster_methods_n, server_lease_methods_n,
                       server_watch_methods_n,   server_lock_methods_n,
                       server_election_methods_n,
                       server_auth_methods_n,
                       server_health_methods_n};
    const size_t ntables = sizeof(tables) / sizeof(tables[0]);
    size_t total = 0;
    for (size_t i = 0; i < ntables; i++)
        total += counts[i];
    struct qcall_method *m = calloc(total, sizeof(*m));
    const struct qcall_method **ptrs = calloc(total, sizeof(*ptrs));
    if (m == NULL || ptrs == NULL) {
        free(m);
        free(ptrs);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < ntables; i++)
        for (size_t j = 0; j < counts[i]; j++) {
            m[k] = tables[i][j];
            if (m[k].on_close == NULL)
                m[k].on_close = server_entry_call_closed;
            ptrs[k] = &m[k];
            k++;
        }
    server_methods_n = total;
    server_methods = ptrs;
    return 0;
}

/* ---- the gRPC face ---- */

static const enum grpc_method_kind grpc_kinds[] = {
    [QCALL_UNARY] = GRPC_UNARY,
    [QCALL_SERVER_STREAMING] = GRPC_SERVER_STREAMING,
    [QCALL_CLIENT_STREAMING] = GRPC_CLIENT_STREAMING,
    [QCALL_BIDI_STREAMING] = GRPC_BIDI_STREAMING,
};

struct grpc_method *server_grpc_methods(void (*on_message)(grpc_call *, const uint8_t *, size_t),
                                        void (*on_half_close)(grpc_call *),
                                        void (*on_close)(grpc_call *))
{
    if (server_methods_init() != 0)
        return NULL;
    struct grpc_method *g = calloc(server_methods_n, sizeof(*g));
    if (g == NULL)
        return NULL;
    for (size_t i = 0; i < server_methods_n; i++) {
        g[i].path = server_methods[i]->path;
        g[i].kind = grpc_kinds[server_methods[i]->kind];
        g[i].on_message = on_message;
        g[i].on_half_close = on_half_close;
        g[i].on_close = on_close;
    }
    return g;
}

/* On the core loop a call's face context is its grpc_call. */
static int g_send(qcall *c, const uint8_t *msg, size_t len)
{
    return grpc_call_send(c->face_ctx, msg, len);
}

static int g_finish(qcall *c, int status, const char *message)
{
    return grpc_call_finish(c->face_ctx, status, message);
}

static size_t g_pending(const qcall *c)
{
    return grpc_call_pending_bytes(c->face_ctx);
}

static int g_send_take(qcall *c, struct buf *msg)
{
    return grpc_call_send_take(c->face_ctx, msg);
}

static const struct qcall_face grpc_face = {g_send, g_finish, g_pending, g_send_take};

static struct grpc_method *core_methods;

static qcall *core_call(grpc_call *gc)
{
    qcall *c = grpc_call_get_data(gc);
    if (c == NULL) {
        size_t i = (size_t)(grpc_call_method(gc) - core_methods);
        c = qcall_new(grpc_call_server_data(gc), server_methods[i], &grpc_face, gc);
        size_t tl = 0;
        const char *tok = grpc_call_metadata(gc, "token", &tl);
        if (tok == NULL) /* etcd 3.4 reads "authorization" when there is no "token" */
            tok = grpc_call_metadata(gc, "authorization", &tl);
        if (c != NULL && qcall_set_credentials(c, tok, tl, grpc_call_tls_common_name(gc)) != 0) {
            qcall_free(c);
            c = NULL;
        }
        if (c == NULL) {
            grpc_call_finish(gc, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return NULL;
        }
        grpc_call_set_data(gc, c);
    }
    return c;
}

static void core_on_message(grpc_call *gc, const uint8_t *msg, size_t len)
{
    qcall *c = core_call(gc);
    if (c != NULL)
        c->m->on_message(c, msg, len);
}

static void core_on_half_close(grpc_call *gc)
{
    qcall *c = core_call(gc);
    if (c != NULL && c->m->on_half_close != NULL)
        c->m->on_half_close(c);
}

static void core_on_close(grpc_call *gc)
{
    qcall *c = grpc_call_get_data(gc);
    if (c == NULL)
        return; /* reset before its first message: nothing to tell */
    c->finished = true; /* sends fail from now on */
    c->m->on_close(c);
    qcall_free(c);
}

int server_grpc_core_new(struct server *s, const struct grpc_server_options *go, grpc_server **out)
{
    if (core_methods == NULL)
        core_methods = server_grpc_methods(core_on_message, core_on_half_close, core_on_close);
    if (core_methods == NULL)
        return -ENOMEM;
    return grpc_server_new(s->loop, core_methods, server_methods_n, go, s, out);
}
