/* server/health_service.c: /grpc.health.v1.Health/ — Check and Watch,
 * gRPC's standard health service (proto/health.proto), as etcd 3.4 serves
 * it: grpc-go's health.Server, with service "" (every etcd service) set to
 * SERVING once when the gRPC server is made and never changed. etcd 3.4
 * does not answer NOT_SERVING while there is no leader, while a
 * defragmentation runs (etcd 3.6 can, optionally) or when it shuts down
 * (the connection just closes); neither does quorum.
 *
 * Check: "" is SERVING; any other name, etcd's own service names too, is
 * NOT_FOUND "unknown service" (grpc-go's text).
 * Watch: the current status at once (SERVING for "", SERVICE_UNKNOWN for
 * any other name, not an error), then the stream stays open until the
 * client ends it. The status never changes, so nothing more is sent and
 * nothing is kept per call (the default on_close finds no entry).
 *
 * No auth check, as etcd: a token, valid or not, is not looked at. */
#include "server/server_int.h"

#include <errno.h>

#include "base/err.h"
#include "health.pb-c.h"

#define SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define SERVICE_UNKNOWN GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

typedef Grpc__Health__V1__HealthCheckRequest HealthReq;
typedef Grpc__Health__V1__HealthCheckResponse HealthResp;

/* known_service unpacks the request and tells whether the server knows
 * its service (then SERVING: only "" is known). Undecodable: answered
 * INVALID_ARGUMENT (as every quorum service; grpc-go says INTERNAL), -1. */
static int known_service(qcall *call, const uint8_t *msg, size_t len)
{
    HealthReq *req = (HealthReq *)server_unpack(
        call, &grpc__health__v1__health_check_request__descriptor, msg, len);
    if (req == NULL)
        return -1;
    int known = req->service == NULL || req->service[0] == '\0';
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    return known;
}

static void on_check(qcall *call, const uint8_t *msg, size_t len)
{
    int known = known_service(call, msg, len);
    if (known < 0)
        return;
    if (!known) {
        qcall_finish(call, GRPC_STATUS_NOT_FOUND, "unknown service");
        return;
    }
    HealthResp r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = SERVING;
    server_reply(server_of(call), call, &r.base);
}

static void on_watch(qcall *call, const uint8_t *msg, size_t len)
{
    int known = known_service(call, msg, len);
    if (known < 0)
        return;
    HealthResp r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = known ? SERVING : SERVICE_UNKNOWN;
    int rv = server_send(server_of(call), call, &r.base);
    if (rv != 0 && rv != -EPIPE)
        server_reply_error(call, rv);
    /* not finished: open until the client goes */
}

const struct qcall_method server_health_methods[] = {
    {"/grpc.health.v1.Health/Check", QCALL_UNARY, on_check, NULL, NULL},
    {"/grpc.health.v1.Health/Watch", QCALL_SERVER_STREAMING, on_watch, NULL, NULL},
};
const size_t server_health_methods_n =
    sizeof(server_health_methods) / sizeof(server_health_methods[0]);
