/* tests/fuzz/fuzz_http.c: the HTTP/1.1 face (src/http) behind the first-bytes
 * sniffing of grpc/, driven in memory: a client port with a small method
 * table whose methods answer at once (unary), or send and stay open
 * (streams). Input: the first byte chooses how the rest is split into reads;
 * the rest is what a client sends. Anything may come back; nothing may
 * crash, leak or read out of bounds (ASan/UBSan in the fuzz build). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "grpc/grpc_int.h"
#include "http/http.h"

static void unary(grpc_call *call, const uint8_t *msg, size_t len)
{
    if (len % 3 == 1) {
        grpc_call_finish(call, 5, "etcdserver: requested lease not found");
        return;
    }
    grpc_call_send(call, msg, len); /* echo: the response decodes or not */
    grpc_call_finish(call, 0, NULL);
}

static void stream(grpc_call *call, const uint8_t *msg, size_t len)
{
    grpc_call_send(call, msg, len);
    if (len % 2)
        grpc_call_finish(call, 1, "context canceled");
}

static const struct grpc_method methods[] = {
    {"/etcdserverpb.KV/Range", GRPC_UNARY, unary, NULL, NULL},
    {"/etcdserverpb.KV/Put", GRPC_UNARY, unary, NULL, NULL},
    {"/etcdserverpb.KV/Txn", GRPC_UNARY, unary, NULL, NULL},
    {"/etcdserverpb.Maintenance/Status", GRPC_UNARY, unary, NULL, NULL},
    {"/etcdserverpb.Watch/Watch", GRPC_BIDI_STREAMING, stream, NULL, NULL},
    {"/etcdserverpb.Lease/LeaseKeepAlive", GRPC_BIDI_STREAMING, stream, NULL, NULL},
    {"/v3electionpb.Election/Observe", GRPC_SERVER_STREAMING, stream, NULL, NULL},
};

static uv_loop_t *loop;
static grpc_server *srv;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (srv == NULL) {
        loop = uv_default_loop();
        struct http_config cfg = {.gateway = true, .v2 = true, .max_body = 64 * 1024};
        struct grpc_server_options o = {.http1 = http_face(&cfg)};
        if (grpc_server_new(loop, methods, sizeof(methods) / sizeof(methods[0]), &o, NULL,
                            &srv) != 0)
            abort();
    }
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] % 64 + 1;
    data++;
    size--;
    grpc_conn *c;
    if (grpc_conn_new_mem(srv, &c) != 0)
        return 0;
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        if (grpc_conn_mem_feed(c, data + off, n) != 0)
            break;
        uv_run(loop, UV_RUN_NOWAIT); /* local calls end on the next pass */
        buf_reset(grpc_conn_mem_output(c));
    }
    grpc_conn_mem_free(c);
    uv_run(loop, UV_RUN_NOWAIT);
    return 0;
}
