/* http/gateway.c: etcd's JSON gateway (grpc-gateway v1, as etcd 3.4 serves
 * it under /v3/ and /v3beta/).
 *
 * A POST to a path of the table below becomes a local call of the gRPC
 * method it names (grpc_call_open_local): the JSON body is turned into the
 * request message by the descriptors (jsonpb.c), the token comes from the
 * Authorization header, and the responses are turned back into JSON. A
 * unary call answers with the response object; a streaming one (watch,
 * lease keep-alive, election observe, snapshot) with a chunked stream of
 * {"result":{...}} objects, one per line, ending in an error object if the
 * call fails. A client-streaming body is a sequence of JSON objects, each
 * one request message, as grpc-gateway reads it.
 *
 * Errors (grpc-gateway's DefaultHTTPError): the gRPC status mapped to an
 * HTTP status (http_status_from_grpc), body
 * {"error":MSG,"message":MSG,"code":CODE}; in a stream
 * {"error":{"grpc_code":C,"http_code":H,"message":M,"http_status":TEXT}}.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "http/http_int.h"
#include "http/jsonpb.h"
#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

struct route {
    const char *rest;   /* the path after /v3/ */
    const char *method; /* the gRPC method */
    const ProtobufCMessageDescriptor *in, *out;
};

#define R(rest, svc, m, in, out)                                                                   \
    {rest, "/etcdserverpb." svc "/" m, &etcdserverpb__##in##__descriptor,                          \
     &etcdserverpb__##out##__descriptor}

static const struct route routes[] = {
    R("kv/range", "KV", "Range", range_request, range_response),
    R("kv/put", "KV", "Put", put_request, put_response),
    R("kv/deleterange", "KV", "DeleteRange", delete_range_request, delete_range_response),
    R("kv/txn", "KV", "Txn", txn_request, txn_response),
    R("kv/compaction", "KV", "Compact", compaction_request, compaction_response),
    R("watch", "Watch", "Watch", watch_request, watch_response),
    R("lease/grant", "Lease", "LeaseGrant", lease_grant_request, lease_grant_response),
    R("lease/revoke", "Lease", "LeaseRevoke", lease_revoke_request, lease_revoke_response),
    R("kv/lease/revoke", "Lease", "LeaseRevoke", lease_revoke_request, lease_revoke_response),
    R("lease/keepalive", "Lease", "LeaseKeepAlive", lease_keep_alive_request,
      lease_keep_alive_response),
    R("lease/timetolive", "Lease", "LeaseTimeToLive", lease_time_to_live_request,
      lease_time_to_live_response),
    R("kv/lease/timetolive", "Lease", "LeaseTimeToLive", lease_time_to_live_request,
      lease_time_to_live_response),
    R("lease/leases", "Lease", "LeaseLeases", lease_leases_request, lease_leases_response),
    R("kv/lease/leases", "Lease", "LeaseLeases", lease_leases_request, lease_leases_response),
    R("cluster/member/add", "Cluster", "MemberAdd", member_add_request, member_add_response),
    R("cluster/member/remove", "Cluster", "MemberRemove", member_remove_request,
      member_remove_response),
    R("cluster/member/update", "Cluster", "MemberUpdate", member_update_request,
      member_update_response),
    R("cluster/member/list", "Cluster", "MemberList", member_list_request, member_list_response),
    R("cluster/member/promote", "Cluster", "MemberPromote", member_promote_request,
      member_promote_response),
    R("maintenance/alarm", "Maintenance", "Alarm", alarm_request, alarm_response),
    R("maintenance/status", "Maintenance", "Status", status_request, status_response),
    R("maintenance/defragment", "Maintenance", "Defragment", defragment_request,
      defragment_response),
    R("maintenance/hash", "Maintenance", "Hash", hash_request, hash_response),
    R("maintenance/snapshot", "Maintenance", "Snapshot", snapshot_request, snapshot_response),
    R("maintenance/transfer-leadership", "Maintenance", "MoveLeader", move_leader_request,
      move_leader_response),
    R("auth/enable", "Auth", "AuthEnable", auth_enable_request, auth_enable_response),
    R("auth/disable", "Auth", "AuthDisable", auth_disable_request, auth_disable_response),
    R("auth/authenticate", "Auth", "Authenticate", authenticate_request, authenticate_response),
    R("auth/user/add", "Auth", "UserAdd", auth_user_add_request, auth_user_add_response),
    R("auth/user/get", "Auth", "UserGet", auth_user_get_request, auth_user_get_response),
    R("auth/user/list", "Auth", "UserList", auth_user_list_request, auth_user_list_response),
    R("auth/user/delete", "Auth", "UserDelete", auth_user_delete_request,
      auth_user_delete_response),
    R("auth/user/changepw", "Auth", "UserChangePassword", auth_user_change_password_request,
      auth_user_change_password_response),
    R("auth/user/grant", "Auth", "UserGrantRole", auth_user_grant_role_request,
      auth_user_grant_role_response),
    R("auth/user/revoke", "Auth", "UserRevokeRole", auth_user_revoke_role_request,
      auth_user_revoke_role_response),
    R("auth/role/add", "Auth", "RoleAdd", auth_role_add_request, auth_role_add_response),
    R("auth/role/get", "Auth", "RoleGet", auth_role_get_request, auth_role_get_response),
    R("auth/role/list", "Auth", "RoleList", auth_role_list_request, auth_role_list_response),
    R("auth/role/delete", "Auth", "RoleDelete", auth_role_delete_request,
      auth_role_delete_response),
    R("auth/role/grant", "Auth", "RoleGrantPermission", auth_role_grant_permission_request,
      auth_role_grant_permission_response),
    R("auth/role/revoke", "Auth", "RoleRevokePermission", auth_role_revoke_permission_request,
      auth_role_revoke_permission_response),
    {"lock/lock", "/v3lockpb.Lock/Lock", &v3lockpb__lock_request__descriptor,
     &v3lockpb__lock_response__descriptor},
    {"lock/unlock", "/v3lockpb.Lock/Unlock", &v3lockpb__unlock_request__descriptor,
     &v3lockpb__unlock_response__descriptor},
    {"election/campaign", "/v3electionpb.Election/Campaign",
     &v3electionpb__campaign_request__descriptor, &v3electionpb__campaign_response__descriptor},
    {"election/proclaim", "/v3electionpb.Election/Proclaim",
     &v3electionpb__proclaim_request__descriptor, &v3electionpb__proclaim_response__descriptor},
    {"election/leader", "/v3electionpb.Election/Leader", &v3electionpb__leader_request__descriptor,
     &v3electionpb__leader_response__descriptor},
    {"election/observe", "/v3electionpb.Election/Observe",
     &v3electionpb__leader_request__descriptor, &v3electionpb__leader_response__descriptor},
    {"election/resign", "/v3electionpb.Election/Resign", &v3electionpb__resign_request__descriptor,
     &v3electionpb__resign_response__descriptor},
};

/* grpc-gateway v1's HTTPStatusFromCode */
static int http_status_from_grpc(int code)
{
    static const int map[] = {
        [GRPC_STATUS_OK] = 200,
        [GRPC_STATUS_CANCELLED] = 408,
        [GRPC_STATUS_UNKNOWN] = 500,
        [GRPC_STATUS_INVALID_ARGUMENT] = 400,
        [GRPC_STATUS_DEADLINE_EXCEEDED] = 504,
        [GRPC_STATUS_NOT_FOUND] = 404,
        [GRPC_STATUS_ALREADY_EXISTS] = 409,
        [GRPC_STATUS_PERMISSION_DENIED] = 403,
        [GRPC_STATUS_RESOURCE_EXHAUSTED] = 429,
        [GRPC_STATUS_FAILED_PRECONDITION] = 412,
        [GRPC_STATUS_ABORTED] = 409,
        [GRPC_STATUS_OUT_OF_RANGE] = 400,
        [GRPC_STATUS_UNIMPLEMENTED] = 501,
        [GRPC_STATUS_INTERNAL] = 500,
        [GRPC_STATUS_UNAVAILABLE] = 503,
        [GRPC_STATUS_DATA_LOSS] = 500,
        [GRPC_STATUS_UNAUTHENTICATED] = 401,
    };
    if (code < 0 || (size_t)code >= sizeof(map) / sizeof(map[0]) || map[code] == 0)
        return 500;
    return map[code];
}

static const char JSON_CT[] = "application/json";

/* respond_error answers a request with grpc-gateway's error body. */
static void respond_error(struct hreq *r, int code, const char *msg)
{
    json_t *j = json_pack("{s:s, s:s, s:i}", "error", msg ? msg : "", "message", msg ? msg : "",
                          "code", code);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    const char *body = s ? s : "{}";
    hreq_respond(r, http_status_from_grpc(code), JSON_CT, NULL, body, strlen(body));
    free(s);
    json_decref(j);
}

/* what etcd's gateway says of the call's metadata */
#define GRPC_META "Grpc-Metadata-Content-Type: application/grpc\r\n"

/* stream_error is the error object a stream ends with (no newline, as
 * grpc-gateway v1 writes it); before any message it also sets the status. */
static void stream_error(struct hreq *r, int code, const char *msg)
{
    int hs = http_status_from_grpc(code);
    if (!r->streaming)
        hreq_stream_start(r, hs, JSON_CT, NULL);
    json_t *j = json_pack("{s:{s:i, s:i, s:s, s:s}}", "error", "grpc_code", code, "http_code", hs,
                          "message", msg ? msg : "", "http_status", http_status_text(hs));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s != NULL)
        hreq_stream_write(r, s, strlen(s));
    free(s);
    json_decref(j);
}

/* One gateway request in flight. */
struct gw {
    struct hreq *r; /* NULL once the client went away */
    grpc_call *call;
    const struct route *rt;
    bool stream;   /* the response is a stream */
    bool finished; /* the call finished (the face heard the last of it) */
    int busy;      /* inside a call into grpc: free later */
    struct buf out; /* a unary response, as JSON */
};

static void gw_free(struct gw *g)
{
    buf_free(&g->out);
    free(g);
}

static int gw_send(void *ctx, const uint8_t *msg, size_t len)
{
    struct gw *g = ctx;
    if (g->r == NULL)
        return -EPIPE;
    if (!g->stream) {
        buf_reset(&g->out);
        return jsonpb_encode(g->rt->out, msg, len, &g->out) == 0 ? 0 : -ENOMEM;
    }
    if (!g->r->streaming)
        hreq_stream_start(g->r, 200, JSON_CT, GRPC_META);
    buf_reset(&g->out);
    static const char pre[] = "{\"result\":";
    if (buf_append(&g->out, pre, sizeof(pre) - 1) != 0 ||
        jsonpb_encode(g->rt->out, msg, len, &g->out) != 0 || buf_append(&g->out, "}\n", 2) != 0)
        return -ENOMEM;
    return hreq_stream_write(g->r, g->out.data, g->out.len);
}

static void gw_finish(void *ctx, int status, const char *message)
{
    struct gw *g = ctx;
    g->finished = true;
    g->call = NULL;
    struct hreq *r = g->r;
    g->r = NULL;
    if (r != NULL) {
        r->on_abort = NULL;
        if (!g->stream) {
            if (status == GRPC_STATUS_OK)
                hreq_respond(r, 200, JSON_CT, GRPC_META, g->out.data, g->out.len);
            else
                respond_error(r, status, message);
        } else {
            if (status != GRPC_STATUS_OK)
                stream_error(r, status, message);
            else if (!r->streaming)
                hreq_stream_start(r, 200, JSON_CT, GRPC_META);
            hreq_stream_end(r);
        }
    }
    if (g->busy == 0)
        gw_free(g);
}

static size_t gw_pending(void *ctx)
{
    struct gw *g = ctx;
    return g->r != NULL ? hreq_pending(g->r) : 0;
}

static const struct grpc_local_ops gw_ops = {
    .send = gw_send, .finish = gw_finish, .pending = gw_pending};

static void gw_abort(struct hreq *r)
{
    struct gw *g = r->ctx;
    g->r = NULL;
    if (g->call != NULL)
        grpc_call_local_cancel(g->call);
    g->call = NULL;
    if (g->busy == 0)
        gw_free(g);
}

/* feed_json hands each JSON value of the body to the call as one request
 * message (one for a unary or server-streaming method, any number for a
 * client stream). An empty body is one empty message. Returns 0, or -1
 * after failing the request with |err|. */
static int feed_json(struct gw *g, const struct hreq *r, char *err, size_t errlen, int *code)
{
    const char *p = (const char *)r->body.data;
    size_t n = r->body.len;
    struct buf pb = {0};
    bool client_stream = grpc_call_method(g->call)->kind == GRPC_CLIENT_STREAMING ||
                         grpc_call_method(g->call)->kind == GRPC_BIDI_STREAMING;
    int sent = 0, rv = 0;
    for (;;) {
        while (n > 0 && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
            p++;
            n--;
        }
        if (n == 0 && (sent > 0 || client_stream))
            break;
        size_t used = n;
        buf_reset(&pb);
        if (n > 0 && client_stream) {
            /* where this value ends: jansson finds it, jsonpb reads it */
            json_error_t je;
            json_t *j = json_loadb(p, n, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
            if (j != NULL && je.position > 0 && (size_t)je.position <= n)
                used = (size_t)je.position;
            json_decref(j);
        }
        rv = n == 0 ? 0 : jsonpb_decode(g->rt->in, p, used, &pb, err, errlen);
        if (rv != 0 && client_stream && sent > 0)
            break; /* grpc-gateway's sending goroutine just stops: the client's side ends */
        if (rv != 0) {
            /* a stream's first request fails in that goroutine: Unknown, 500 */
            *code = client_stream ? GRPC_STATUS_UNKNOWN : GRPC_STATUS_INVALID_ARGUMENT;
            buf_free(&pb);
            return -1;
        }
        if (used > n)
            used = n;
        if (used > 0) { /* an empty body has no bytes at all (p NULL) */
            p += used;
            n -= used;
        }
        grpc_call_local_message(g->call, pb.data, pb.len);
        sent++;
        if (g->finished || g->r == NULL || !client_stream)
            break;
    }
    buf_free(&pb);
    return 0;
}

void http_serve_gateway(struct hreq *r, const char *rest)
{
    const struct route *rt = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (strcmp(routes[i].rest, rest) == 0) {
            rt = &routes[i];
            break;
        }
    if (rt == NULL) {
        static const char nf[] = "Not Found\n";
        hreq_respond(r, 404, "text/plain; charset=utf-8", "X-Content-Type-Options: nosniff\r\n",
                     nf, sizeof(nf) - 1);
        return;
    }
    if (strcmp(r->method, "POST") != 0) {
        http_method_not_allowed(r, NULL);
        return;
    }
    struct gw *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        respond_error(r, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    g->r = r;
    g->rt = rt;
    const char *tok = r->authorization;
    int rv = grpc_call_open_local(hreq_server(r), rt->method, &gw_ops, g, tok,
                                  tok ? strlen(tok) : 0, &g->call);
    if (rv != 0) {
        free(g);
        respond_error(r, rv == -ENOENT ? GRPC_STATUS_UNIMPLEMENTED : GRPC_STATUS_UNAVAILABLE,
                      rv == -ENOENT ? "unknown method" : "server closing");
        return;
    }
    enum grpc_method_kind k = grpc_call_method(g->call)->kind;
    g->stream = k == GRPC_SERVER_STREAMING || k == GRPC_BIDI_STREAMING;
    r->ctx = g;
    r->on_abort = gw_abort;
    char err[512] = "";
    int code = 0;
    g->busy++;
    if (feed_json(g, r, err, sizeof(err), &code) != 0) {
        if (g->call != NULL) {
            grpc_call_local_cancel(g->call);
            g->call = NULL;
        }
        if (g->r != NULL) {
            g->r->on_abort = NULL;
            respond_error(g->r, code, err);
            g->r = NULL;
        }
        g->finished = true;
    } else if (!g->finished && g->call != NULL) {
        grpc_call_local_half_close(g->call);
    }
    g->busy--;
    if (g->finished || (g->r == NULL && g->call == NULL))
        gw_free(g);
}
