/* http/http.h: the HTTP face of the client port.
 *
 * etcd serves HTTP/1.1 beside gRPC on its client port: the JSON gateway
 * (grpc-gateway's mapping of the v3 API under /v3/), /version, /health,
 * /metrics, and with --enable-v2 the v2 keys API. quorum does the same. grpc/ owns
 * the sockets and picks the protocol from a connection's first bytes
 * (struct grpc_http1); this module parses HTTP/1.1 (libhttp-parser),
 * routes the request, and turns JSON into the services' protobuf
 * messages and back (jsonpb.c). A request reaches the services as a
 * local call of grpc/ (grpc_call_open_local), so it takes exactly the
 * path a gRPC request takes: the same method table, front loop or core,
 * auth, quota and size checks. Nothing here knows what a service does.
 *
 * Threading: each loop (the core, each front loop) has its own grpc
 * server and so its own HTTP connections; everything here runs on the
 * loop of the connection. The configuration is set once, before any
 * loop serves.
 *
 * Limits: a request line and headers up to 64 KiB (431 beyond), a body up
 * to max_body bytes (413), the whole request within 30 s of its first
 * byte (408 and the connection closed), a keep-alive connection idle for
 * 5 minutes is closed. One request per connection is answered at a
 * time; pipelined requests wait their turn, in order.
 */
#ifndef QUORUM_HTTP_HTTP_H
#define QUORUM_HTTP_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct grpc_http1;

struct http_config {
    const char *server_version;  /* /version "etcdserver" */
    const char *cluster_version; /* /version "etcdcluster" */
    bool gateway;                /* the /v3 JSON gateway (--enable-grpc-gateway) */
    bool v2;                     /* the v2 keys API (--enable-v2) */
    char v2v3_prefix[256];       /* its v3 prefix (--experimental-enable-v2v3) */
    size_t max_body;             /* largest request body; 0: 4 MiB */
};

/* http_face returns the handler to put in grpc_server_options.http1 for
 * every client-port server; |cfg| is copied. */
const struct grpc_http1 *http_face(const struct http_config *cfg);

/* http_metrics_face is the handler of a --listen-metrics-urls listener
 * (a grpc server made with http_only): GET /metrics and /health there
 * (with ?exclude and ?serializable), 404 for anything else, as etcd's
 * metrics listener. http_face must have been called first. */
const struct grpc_http1 *http_metrics_face(void);

#endif
