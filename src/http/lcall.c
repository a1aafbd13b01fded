/* http/lcall.c: one unary local call with a callback (http_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_int.h"

struct lcall {
    grpc_call *call;
    lcall_cb cb;
    void *arg;
    struct buf resp;
    int busy;
    bool done;
};

static int l_send(void *ctx, const uint8_t *msg, size_t len)
{
    struct lcall *lc = ctx;
    buf_reset(&lc->resp);
    return buf_append(&lc->resp, msg, len) == 0 ? 0 : -ENOMEM;
}

static void l_finish(void *ctx, int status, const char *message)
{
    struct lcall *lc = ctx;
    lc->done = true;
    lc->call = NULL;
    if (lc->cb != NULL)
        lc->cb(lc->arg, status, message, lc->resp.data, lc->resp.len);
    if (lc->busy == 0) {
        buf_free(&lc->resp);
        free(lc);
    }
}

/* /health's probes and the v2 keys API: in etcd neither is a gRPC call
 * (its /health and its v2 handlers call the server directly), so they are
 * not counted in grpc_server_*; the JSON gateway's are (etcd's gateway is
 * a gRPC client of its own server) */
static const struct grpc_local_ops l_ops = {
    .send = l_send, .finish = l_finish, .unmetered = true};

int lcall_unary(grpc_server *srv, const char *method, const ProtobufCMessage *req,
                const char *token, lcall_cb cb, void *arg, struct lcall **out)
{
    struct lcall *lc = calloc(1, sizeof(*lc));
    if (lc == NULL)
        return -ENOMEM;
    lc->cb = cb;
    lc->arg = arg;
    int rv = grpc_call_open_local(srv, method, &l_ops, lc, token, token ? strlen(token) : 0,
                                  &lc->call);
    size_t n = rv == 0 ? protobuf_c_message_get_packed_size(req) : 0;
    uint8_t small[256];
    uint8_t *p = n <= sizeof(small) ? small : malloc(n);
    if (rv == 0 && p == NULL) {
        grpc_call_local_cancel(lc->call);
        rv = -ENOMEM;
    }
    if (rv != 0) {
        free(lc);
        return rv;
    }
    protobuf_c_message_pack(req, p);
    *out = lc;
    lc->busy++;
    grpc_call_local_message(lc->call, p, n);
    if (!lc->done)
        grpc_call_local_half_close(lc->call);
    lc->busy--;
    if (p != small)
        free(p);
    if (lc->done) {
        buf_free(&lc->resp);
        free(lc);
    }
    return 0;
}

void lcall_cancel(struct lcall *lc)
{
    if (lc == NULL || lc->done)
        return;
    lc->cb = NULL;
    grpc_call_local_cancel(lc->call);
    lc->call = NULL;
    lc->done = true;
    if (lc->busy == 0) {
        buf_free(&lc->resp);
        free(lc);
    }
}
