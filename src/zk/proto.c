/* zk/proto.c: the record tables of zookeeper.jute (ZooKeeper 3.8) that the
 * client protocol uses, and the packets that are not plain records. */
#include "zk/proto.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#define F(st, fld, t) {#fld, t, 0, offsetof(st, fld), NULL}
#define FR(st, fld, r) {#fld, JUTE_RECORD, 0, offsetof(st, fld), &(r)}
#define FVS(st, fld) {#fld, JUTE_VECTOR, JUTE_USTRING, offsetof(st, fld), NULL}
#define FVR(st, fld, r) {#fld, JUTE_VECTOR, JUTE_RECORD, offsetof(st, fld), &(r)}
#define REC(var, jname, st, ...)                                                                   \
    static const struct jute_field var##_fields[] = {__VA_ARGS__};                                 \
    const struct jute_record var = {jname, sizeof(st),                                             \
                                    sizeof(var##_fields) / sizeof(var##_fields[0]), var##_fields}

REC(zk_rec_id, "Id", struct zk_id, F(struct zk_id, scheme, JUTE_USTRING),
    F(struct zk_id, id, JUTE_USTRING));
REC(zk_rec_acl, "ACL", struct zk_acl, F(struct zk_acl, perms, JUTE_INT),
    FR(struct zk_acl, id, zk_rec_id));
REC(zk_rec_stat, "Stat", struct zk_stat, F(struct zk_stat, czxid, JUTE_LONG),
    F(struct zk_stat, mzxid, JUTE_LONG), F(struct zk_stat, ctime, JUTE_LONG),
    F(struct zk_stat, mtime, JUTE_LONG), F(struct zk_stat, version, JUTE_INT),
    F(struct zk_stat, cversion, JUTE_INT), F(struct zk_stat, aversion, JUTE_INT),
    F(struct zk_stat, ephemeral_owner, JUTE_LONG), F(struct zk_stat, data_length, JUTE_INT),
    F(struct zk_stat, num_children, JUTE_INT), F(struct zk_stat, pzxid, JUTE_LONG));

REC(zk_rec_connect_req, "ConnectRequest", struct zk_connect_req,
    F(struct zk_connect_req, protocol_version, JUTE_INT),
    F(struct zk_connect_req, last_zxid_seen, JUTE_LONG),
    F(struct zk_connect_req, timeout, JUTE_INT), F(struct zk_connect_req, session_id, JUTE_LONG),
    F(struct zk_connect_req, passwd, JUTE_BUFFER));
REC(zk_rec_connect_resp, "ConnectResponse", struct zk_connect_resp,
    F(struct zk_connect_resp, protocol_version, JUTE_INT),
    F(struct zk_connect_resp, timeout, JUTE_INT), F(struct zk_connect_resp, session_id, JUTE_LONG),
    F(struct zk_connect_resp, passwd, JUTE_BUFFER));
REC(zk_rec_request_header, "RequestHeader", struct zk_request_header,
    F(struct zk_request_header, xid, JUTE_INT), F(struct zk_request_header, type, JUTE_INT));
REC(zk_rec_reply_header, "ReplyHeader", struct zk_reply_header,
    F(struct zk_reply_header, xid, JUTE_INT), F(struct zk_reply_header, zxid, JUTE_LONG),
    F(struct zk_reply_header, err, JUTE_INT));
REC(zk_rec_multi_header, "MultiHeader", struct zk_multi_header,
    F(struct zk_multi_header, type, JUTE_INT), F(struct zk_multi_header, done, JUTE_BOOL),
    F(struct zk_multi_header, err, JUTE_INT));
REC(zk_rec_auth_packet, "AuthPacket", struct zk_auth_packet,
    F(struct zk_auth_packet, type, JUTE_INT), F(struct zk_auth_packet, scheme, JUTE_USTRING),
    F(struct zk_auth_packet, auth, JUTE_BUFFER));

REC(zk_rec_sasl_req, "GetSASLRequest", struct zk_sasl_req,
    F(struct zk_sasl_req, token, JUTE_BUFFER));
REC(zk_rec_reconfig_req, "ReconfigRequest", struct zk_reconfig_req,
    F(struct zk_reconfig_req, joining, JUTE_USTRING),
    F(struct zk_reconfig_req, leaving, JUTE_USTRING),
    F(struct zk_reconfig_req, new_members, JUTE_USTRING),
    F(struct zk_reconfig_req, cur_config_id, JUTE_LONG));

#define PATH_WATCH(var, jname)                                                                     \
    REC(var, jname, struct zk_path_watch, F(struct zk_path_watch, path, JUTE_USTRING),             \
        F(struct zk_path_watch, watch, JUTE_BOOL))
PATH_WATCH(zk_rec_get_data_req, "GetDataRequest");
PATH_WATCH(zk_rec_exists_req, "ExistsRequest");
PATH_WATCH(zk_rec_get_children_req, "GetChildrenRequest");
PATH_WATCH(zk_rec_get_children2_req, "GetChildren2Request");

#define PATH_ONLY(var, jname) REC(var, jname, struct zk_path, F(struct zk_path, path, JUTE_USTRING))
PATH_ONLY(zk_rec_sync_req, "SyncRequest");
PATH_ONLY(zk_rec_sync_resp, "SyncResponse");
PATH_ONLY(zk_rec_get_acl_req, "GetACLRequest");
PATH_ONLY(zk_rec_get_all_children_number_req, "GetAllChildrenNumberRequest");
PATH_ONLY(zk_rec_get_ephemerals_req, "GetEphemeralsRequest");
PATH_ONLY(zk_rec_create_resp, "CreateResponse");

REC(zk_rec_set_data_req, "SetDataRequest", struct zk_set_data_req,
    F(struct zk_set_data_req, path, JUTE_USTRING), F(struct zk_set_data_req, data, JUTE_BUFFER),
    F(struct zk_set_data_req, version, JUTE_INT));
REC(zk_rec_create_req, "CreateRequest", struct zk_create_req,
    F(struct zk_create_req, path, JUTE_USTRING), F(struct zk_create_req, data, JUTE_BUFFER),
    FVR(struct zk_create_req, acl, zk_rec_acl), F(struct zk_create_req, flags, JUTE_INT));
REC(zk_rec_create_ttl_req, "CreateTTLRequest", struct zk_create_req,
    F(struct zk_create_req, path, JUTE_USTRING), F(struct zk_create_req, data, JUTE_BUFFER),
    FVR(struct zk_create_req, acl, zk_rec_acl), F(struct zk_create_req, flags, JUTE_INT),
    F(struct zk_create_req, ttl, JUTE_LONG));

#define PATH_VERSION(var, jname)                                                                   \
    REC(var, jname, struct zk_path_version, F(struct zk_path_version, path, JUTE_USTRING),         \
        F(struct zk_path_version, version, JUTE_INT))
PATH_VERSION(zk_rec_delete_req, "DeleteRequest");
PATH_VERSION(zk_rec_check_version_req, "CheckVersionRequest");

REC(zk_rec_set_acl_req, "SetACLRequest", struct zk_set_acl_req,
    F(struct zk_set_acl_req, path, JUTE_USTRING), FVR(struct zk_set_acl_req, acl, zk_rec_acl),
    F(struct zk_set_acl_req, version, JUTE_INT));

#define PATH_INT(var, jname)                                                                       \
    REC(var, jname, struct zk_path_int, F(struct zk_path_int, path, JUTE_USTRING),                 \
        F(struct zk_path_int, n, JUTE_INT))
PATH_INT(zk_rec_add_watch_req, "AddWatchRequest");
PATH_INT(zk_rec_remove_watches_req, "RemoveWatchesRequest");
PATH_INT(zk_rec_check_watches_req, "CheckWatchesRequest");

REC(zk_rec_set_watches, "SetWatches", struct zk_set_watches,
    F(struct zk_set_watches, relative_zxid, JUTE_LONG), FVS(struct zk_set_watches, data),
    FVS(struct zk_set_watches, exist), FVS(struct zk_set_watches, child));
REC(zk_rec_set_watches2, "SetWatches2", struct zk_set_watches,
    F(struct zk_set_watches, relative_zxid, JUTE_LONG), FVS(struct zk_set_watches, data),
    FVS(struct zk_set_watches, exist), FVS(struct zk_set_watches, child),
    FVS(struct zk_set_watches, persistent), FVS(struct zk_set_watches, persistent_recursive));
REC(zk_rec_watcher_event, "WatcherEvent", struct zk_watcher_event,
    F(struct zk_watcher_event, type, JUTE_INT), F(struct zk_watcher_event, state, JUTE_INT),
    F(struct zk_watcher_event, path, JUTE_USTRING));

REC(zk_rec_error_resp, "ErrorResponse", struct zk_int, F(struct zk_int, n, JUTE_INT));
REC(zk_rec_get_all_children_number_resp, "GetAllChildrenNumberResponse", struct zk_int,
    F(struct zk_int, n, JUTE_INT));
REC(zk_rec_create2_resp, "Create2Response", struct zk_create2_resp,
    F(struct zk_create2_resp, path, JUTE_USTRING), FR(struct zk_create2_resp, stat, zk_rec_stat));
REC(zk_rec_stat_resp, "ExistsResponse", struct zk_stat_resp,
    FR(struct zk_stat_resp, stat, zk_rec_stat));
REC(zk_rec_get_data_resp, "GetDataResponse", struct zk_get_data_resp,
    F(struct zk_get_data_resp, data, JUTE_BUFFER), FR(struct zk_get_data_resp, stat, zk_rec_stat));
REC(zk_rec_get_children_resp, "GetChildrenResponse", struct zk_children_resp,
    FVS(struct zk_children_resp, children));
REC(zk_rec_get_children2_resp, "GetChildren2Response", struct zk_children_resp,
    FVS(struct zk_children_resp, children), FR(struct zk_children_resp, stat, zk_rec_stat));
REC(zk_rec_get_ephemerals_resp, "GetEphemeralsResponse", struct zk_children_resp,
    FVS(struct zk_children_resp, children));
REC(zk_rec_get_acl_resp, "GetACLResponse", struct zk_get_acl_resp,
    FVR(struct zk_get_acl_resp, acl, zk_rec_acl), FR(struct zk_get_acl_resp, stat, zk_rec_stat));
REC(zk_rec_client_info, "ClientInfo", struct zk_client_info,
    F(struct zk_client_info, scheme, JUTE_USTRING), F(struct zk_client_info, user, JUTE_USTRING));
REC(zk_rec_who_am_i_resp, "WhoAmIResponse", struct zk_who_am_i_resp,
    FVR(struct zk_who_am_i_resp, info, zk_rec_client_info));

const struct jute_record *zk_request_record(int32_t type)
{
    switch (type) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
        return &zk_rec_create_req;
    case ZK_OP_CREATE_TTL:
        return &zk_rec_create_ttl_req;
    case ZK_OP_DELETE:
    case ZK_OP_DELETE_CONTAINER:
        return &zk_rec_delete_req;
    case ZK_OP_CHECK:
        return &zk_rec_check_version_req;
    case ZK_OP_EXISTS:
        return &zk_rec_exists_req;
    case ZK_OP_GET_DATA:
        return &zk_rec_get_data_req;
    case ZK_OP_SET_DATA:
        return &zk_rec_set_data_req;
    case ZK_OP_GET_ACL:
        return &zk_rec_get_acl_req;
    case ZK_OP_SET_ACL:
        return &zk_rec_set_acl_req;
    case ZK_OP_GET_CHILDREN:
        return &zk_rec_get_children_req;
    case ZK_OP_GET_CHILDREN2:
        return &zk_rec_get_children2_req;
    case ZK_OP_SYNC:
        return &zk_rec_sync_req;
    case ZK_OP_CHECK_WATCHES:
        return &zk_rec_check_watches_req;
    case ZK_OP_REMOVE_WATCHES:
        return &zk_rec_remove_watches_req;
    case ZK_OP_AUTH:
        return &zk_rec_auth_packet;
    case ZK_OP_SET_WATCHES:
        return &zk_rec_set_watches;
    case ZK_OP_SET_WATCHES2:
        return &zk_rec_set_watches2;
    case ZK_OP_GET_EPHEMERALS:
        return &zk_rec_get_ephemerals_req;
    case ZK_OP_GET_ALL_CHILDREN_NUMBER:
        return &zk_rec_get_all_children_number_req;
    case ZK_OP_ADD_WATCH:
        return &zk_rec_add_watch_req;
    case ZK_OP_RECONFIG:
        return &zk_rec_reconfig_req;
    case ZK_OP_SASL:
        return &zk_rec_sasl_req;
    default:
        return NULL;
    }
}

/* the types that carry no body: the header is the whole request */
static bool bodyless(int32_t type)
{
    return type == ZK_OP_PING || type == ZK_OP_CLOSE_SESSION || type == ZK_OP_WHO_AM_I;
}

const char *zk_op_name(int32_t type)
{
    switch (type) {
    case ZK_OP_NOTIFICATION: return "notification";
    case ZK_OP_CREATE: return "create";
    case ZK_OP_DELETE: return "delete";
    case ZK_OP_EXISTS: return "exists";
    case ZK_OP_GET_DATA: return "getData";
    case ZK_OP_SET_DATA: return "setData";
    case ZK_OP_GET_ACL: return "getACL";
    case ZK_OP_SET_ACL: return "setACL";
    case ZK_OP_GET_CHILDREN: return "getChildren";
    case ZK_OP_SYNC: return "sync";
    case ZK_OP_PING: return "ping";
    case ZK_OP_GET_CHILDREN2: return "getChildren2";
    case ZK_OP_CHECK: return "check";
    case ZK_OP_MULTI: return "multi";
    case ZK_OP_CREATE2: return "create2";
    case ZK_OP_RECONFIG: return "reconfig";
    case ZK_OP_CHECK_WATCHES: return "checkWatches";
    case ZK_OP_REMOVE_WATCHES: return "removeWatches";
    case ZK_OP_CREATE_CONTAINER: return "createContainer";
    case ZK_OP_DELETE_CONTAINER: return "deleteContainer";
    case ZK_OP_CREATE_TTL: return "createTtl";
    case ZK_OP_MULTI_READ: return "multiRead";
    case ZK_OP_AUTH: return "auth";
    case ZK_OP_SET_WATCHES: return "setWatches";
    case ZK_OP_SASL: return "sasl";
    case ZK_OP_GET_EPHEMERALS: return "getEphemerals";
    case ZK_OP_GET_ALL_CHILDREN_NUMBER: return "getAllChildrenNumber";
    case ZK_OP_SET_WATCHES2: return "setWatches2";
    case ZK_OP_ADD_WATCH: return "addWatch";
    case ZK_OP_WHO_AM_I: return "whoAmI";
    case ZK_OP_CREATE_SESSION: return "createSession";
    case ZK_OP_CLOSE_SESSION: return "closeSession";
    case ZK_OP_ERROR: return "error";
    default: return "unknown";
    }
}

const char *zk_err_name(int32_t err)
{
    switch (err) {
    case ZK_OK: return "OK";
    case ZK_SYSTEMERROR: return "SYSTEMERROR";
    case ZK_RUNTIMEINCONSISTENCY: return "RUNTIMEINCONSISTENCY";
    case ZK_DATAINCONSISTENCY: return "DATAINCONSISTENCY";
    case ZK_CONNECTIONLOSS: return "CONNECTIONLOSS";
    case ZK_MARSHALLINGERROR: return "MARSHALLINGERROR";
    case ZK_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case ZK_OPERATIONTIMEOUT: return "OPERATIONTIMEOUT";
    case ZK_BADARGUMENTS: return "BADARGUMENTS";
    case ZK_UNKNOWNSESSION: return "UNKNOWNSESSION";
    case ZK_NEWCONFIGNOQUORUM: return "NEWCONFIGNOQUORUM";
    case ZK_RECONFIGINPROGRESS: return "RECONFIGINPROGRESS";
    case ZK_APIERROR: return "APIERROR";
    case ZK_NONODE: return "NONODE";
    case ZK_NOAUTH: return "NOAUTH";
    case ZK_BADVERSION: return "BADVERSION";
    case ZK_NOCHILDRENFOREPHEMERALS: return "NOCHILDRENFOREPHEMERALS";
    case ZK_NODEEXISTS: return "NODEEXISTS";
    case ZK_NOTEMPTY: return "NOTEMPTY";
    case ZK_SESSIONEXPIRED: return "SESSIONEXPIRED";
    case ZK_INVALIDCALLBACK: return "INVALIDCALLBACK";
    case ZK_INVALIDACL: return "INVALIDACL";
    case ZK_AUTHFAILED: return "AUTHFAILED";
    case ZK_SESSIONMOVED: return "SESSIONMOVED";
    case ZK_NOTREADONLY: return "NOTREADONLY";
    case ZK_EPHEMERALONLOCALSESSION: return "EPHEMERALONLOCALSESSION";
    case ZK_NOWATCHER: return "NOWATCHER";
    case ZK_REQUESTTIMEOUT: return "REQUESTTIMEOUT";
    case ZK_RECONFIGDISABLED: return "RECONFIGDISABLED";
    case ZK_SESSIONCLOSEDREQUIRESASLAUTH: return "SESSIONCLOSEDREQUIRESASLAUTH";
    case ZK_QUOTAEXCEEDED: return "QUOTAEXCEEDED";
    case ZK_THROTTLEDOP: return "THROTTLEDOP";
    default: return NULL;
    }
}

int zk_connect_req_decode(struct jute_in *in, struct zk_connect_req *out)
{
    if (jute_decode(&zk_rec_connect_req, in, out, NULL) != 0)
        return in->err;
    if (jute_in_left(in) >= 1) {
        out->read_only = jute_get_bool(in);
        out->has_read_only = true;
    }
    return in->err;
}

int zk_connect_req_encode(struct jute_out *o, const struct zk_connect_req *r)
{
    jute_encode(&zk_rec_connect_req, o, r);
    if (r->has_read_only)
        jute_put_bool(o, r->read_only);
    return o->err;
}

int zk_connect_resp_decode(struct jute_in *in, struct zk_connect_resp *out)
{
    if (jute_decode(&zk_rec_connect_resp, in, out, NULL) != 0)
        return in->err;
    if (jute_in_left(in) >= 1)
        out->read_only = jute_get_bool(in);
    return in->err;
}

int zk_connect_resp_encode(struct jute_out *o, const struct zk_connect_resp *r)
{
    jute_encode(&zk_rec_connect_resp, o, r);
    jute_put_bool(o, r->read_only);
    return o->err;
}

/* the request record of op |type| inside a multi (NULL: not allowed) */
static const struct jute_record *multi_op_record(int32_t type)
{
    switch (type) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
        return &zk_rec_create_req;
    case ZK_OP_CREATE_TTL:
        return &zk_rec_create_ttl_req;
    case ZK_OP_DELETE:
        return &zk_rec_delete_req;
    case ZK_OP_SET_DATA:
        return &zk_rec_set_data_req;
    case ZK_OP_CHECK:
        return &zk_rec_check_version_req;
    case ZK_OP_GET_CHILDREN:
        return &zk_rec_get_children_req;
    case ZK_OP_GET_DATA:
        return &zk_rec_get_data_req;
    default:
        return NULL;
    }
}

int zk_multi_decode(struct jute_in *in, struct arena *a, struct zk_multi_op **ops, size_t *n)
{
    *ops = NULL;
    *n = 0;
    /* two passes: count the ops (checking every record), then decode them
     * into one array, so nothing grows */
    struct jute_in scan = *in;
    size_t count = 0;
    struct zk_multi_header h;
    struct arena tmp = {0};
    for (;;) {
        jute_decode(&zk_rec_multi_header, &scan, &h, NULL);
        if (scan.err != 0 || h.done)
            break;
        const struct jute_record *r = multi_op_record(h.type);
        if (r == NULL || count >= ZK_MULTI_MAX_OPS) {
            scan.err = -EBADMSG;
            break;
        }
        union {
            struct zk_create_req c;
            struct zk_path_version pv;
            struct zk_set_data_req sd;
            struct zk_path_watch pw;
        } body;
        jute_decode(r, &scan, &body, &tmp);
        arena_reset(&tmp);
        count++;
    }
    arena_free(&tmp);
    if (scan.err != 0) {
        in->err = scan.err;
        in->p = in->end;
        return in->err;
    }
    struct zk_multi_op *v = NULL;
    if (count > 0) {
        v = arena_alloc(a, sizeof(*v) * count);
        if (v == NULL) {
            in->err = -ENOMEM;
            return in->err;
        }
    }
    for (size_t i = 0; i < count; i++) {
        jute_decode(&zk_rec_multi_header, in, &h, NULL);
        v[i].type = h.type;
        jute_decode(multi_op_record(h.type), in, &v[i].u, a);
    }
    jute_decode(&zk_rec_multi_header, in, &h, NULL); /* the done header */
    if (in->err != 0)
        return in->err;
    *ops = v;
    *n = count;
    return 0;
}

int zk_multi_encode(struct jute_out *o, const struct zk_multi_op *ops, size_t n)
{
    for (size_t i = 0; i < n && o->err == 0; i++) {
        const struct jute_record *r = multi_op_record(ops[i].type);
        if (r == NULL) {
            o->err = -EINVAL;
            break;
        }
        struct zk_multi_header h = {ops[i].type, false, -1};
        jute_encode(&zk_rec_multi_header, o, &h);
        jute_encode(r, o, &ops[i].u);
    }
    struct zk_multi_header end = {-1, true, -1};
    jute_encode(&zk_rec_multi_header, o, &end);
    return o->err;
}

int zk_multi_resp_encode(struct jute_out *o, const struct zk_multi_result *res, size_t n)
{
    for (size_t i = 0; i < n && o->err == 0; i++) {
        const struct zk_multi_result *r = &res[i];
        struct zk_multi_header h = {r->type, false, r->type == ZK_OP_ERROR ? r->err : 0};
        jute_encode(&zk_rec_multi_header, o, &h);
        switch (r->type) {
        case ZK_OP_CREATE:
            jute_put_bytes(o, r->path);
            break;
        case ZK_OP_CREATE2:
            jute_put_bytes(o, r->path);
            jute_encode(&zk_rec_stat, o, &r->stat);
            break;
        case ZK_OP_DELETE:
        case ZK_OP_CHECK:
            break;
        case ZK_OP_SET_DATA:
            jute_encode(&zk_rec_stat, o, &r->stat);
            break;
        case ZK_OP_GET_CHILDREN: {
            struct zk_children_resp c = {.children = r->children};
            jute_encode(&zk_rec_get_children_resp, o, &c);
            break;
        }
        case ZK_OP_GET_DATA:
            jute_put_bytes(o, r->data);
            jute_encode(&zk_rec_stat, o, &r->stat);
            break;
        case ZK_OP_ERROR:
            jute_put_int(o, r->err);
            break;
        default:
            o->err = -EINVAL;
            break;
        }
    }
    struct zk_multi_header end = {-1, true, -1};
    jute_encode(&zk_rec_multi_header, o, &end);
    return o->err;
}

static bool multi_result_type(int32_t t)
{
    switch (t) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_DELETE:
    case ZK_OP_CHECK:
    case ZK_OP_SET_DATA:
    case ZK_OP_GET_CHILDREN:
    case ZK_OP_GET_DATA:
    case ZK_OP_ERROR:
        return true;
    default:
        return false;
    }
}

static void multi_result_body(struct jute_in *in, struct arena *a, struct zk_multi_result *r)
{
    switch (r->type) {
    case ZK_OP_CREATE:
        r->path = jute_get_bytes(in);
        break;
    case ZK_OP_CREATE2:
        r->path = jute_get_bytes(in);
        jute_decode(&zk_rec_stat, in, &r->stat, a);
        break;
    case ZK_OP_SET_DATA:
        jute_decode(&zk_rec_stat, in, &r->stat, a);
        break;
    case ZK_OP_GET_CHILDREN: {
        struct zk_children_resp c;
        jute_decode(&zk_rec_get_children_resp, in, &c, a);
        r->children = c.children;
        break;
    }
    case ZK_OP_GET_DATA:
        r->data = jute_get_bytes(in);
        jute_decode(&zk_rec_stat, in, &r->stat, a);
        break;
    case ZK_OP_ERROR:
        r->err = jute_get_int(in);
        break;
    default:
        break;
    }
}

int zk_multi_resp_decode(struct jute_in *in, struct arena *a, struct zk_multi_result **res,
                         size_t *n)
{
    *res = NULL;
    *n = 0;
    struct jute_in scan = *in;
    size_t count = 0;
    struct zk_multi_header h;
    struct arena tmp = {0};
    for (;;) {
        jute_decode(&zk_rec_multi_header, &scan, &h, NULL);
        if (scan.err != 0 || h.done)
            break;
        if (!multi_result_type(h.type) || count >= ZK_MULTI_MAX_OPS) {
            scan.err = -EBADMSG;
            break;
        }
        struct zk_multi_result r = {.type = h.type};
        multi_result_body(&scan, &tmp, &r);
        arena_reset(&tmp);
        count++;
    }
    arena_free(&tmp);
    if (scan.err != 0) {
        in->err = scan.err;
        in->p = in->end;
        return in->err;
    }
    struct zk_multi_result *v = NULL;
    if (count > 0 && (v = arena_alloc(a, sizeof(*v) * count)) == NULL) {
        in->err = -ENOMEM;
        return in->err;
    }
    for (size_t i = 0; i < count; i++) {
        jute_decode(&zk_rec_multi_header, in, &h, NULL);
        v[i].type = h.type;
        v[i].err = h.err;
        multi_result_body(in, a, &v[i]);
    }
    jute_decode(&zk_rec_multi_header, in, &h, NULL);
    if (in->err != 0)
        return in->err;
    *res = v;
    *n = count;
    return 0;
}

int zk_request_decode(const uint8_t *p, size_t len, struct arena *a, struct zk_request *out)
{
    memset(out, 0, sizeof(*out));
    struct jute_in in;
    jute_in_init(&in, p, len);
    if (jute_decode(&zk_rec_request_header, &in, &out->h, NULL) != 0)
        return in.err;
    int32_t t = out->h.type;
    if (t == ZK_OP_MULTI || t == ZK_OP_MULTI_READ)
        return zk_multi_decode(&in, a, &out->multi, &out->n_multi);
    if (bodyless(t))
        return 0;
    const struct jute_record *r = zk_request_record(t);
    if (r == NULL)
        return -ENOTSUP;
    out->rec = r;
    return jute_decode(r, &in, &out->u, a);
}

int zk_request_encode(struct jute_out *o, const struct zk_request *r)
{
    jute_encode(&zk_rec_request_header, o, &r->h);
    if (r->h.type == ZK_OP_MULTI || r->h.type == ZK_OP_MULTI_READ)
        return zk_multi_encode(o, r->multi, r->n_multi);
    if (r->rec != NULL)
        jute_encode(r->rec, o, &r->u);
    return o->err;
}

const struct jute_record *zk_response_record(int32_t type)
{
    switch (type) {
    case ZK_OP_CREATE:
        return &zk_rec_create_resp;
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
    case ZK_OP_CREATE_TTL:
        return &zk_rec_create2_resp;
    case ZK_OP_EXISTS:
    case ZK_OP_SET_DATA:
    case ZK_OP_SET_ACL:
        return &zk_rec_stat_resp;
    case ZK_OP_GET_DATA:
        return &zk_rec_get_data_resp;
    case ZK_OP_GET_ACL:
        return &zk_rec_get_acl_resp;
    case ZK_OP_GET_CHILDREN:
        return &zk_rec_get_children_resp;
    case ZK_OP_GET_CHILDREN2:
        return &zk_rec_get_children2_resp;
    case ZK_OP_SYNC:
        return &zk_rec_sync_resp;
    case ZK_OP_GET_EPHEMERALS:
        return &zk_rec_get_ephemerals_resp;
    case ZK_OP_GET_ALL_CHILDREN_NUMBER:
        return &zk_rec_get_all_children_number_resp;
    case ZK_OP_ADD_WATCH:
        return &zk_rec_error_resp;
    case ZK_OP_WHO_AM_I:
        return &zk_rec_who_am_i_resp;
    default:
        return NULL;
    }
}

int zk_reply_decode(const uint8_t *p, size_t len, int32_t type, struct arena *a,
                    struct zk_reply *out)
{
    memset(out, 0, sizeof(*out));
    struct jute_in in;
    jute_in_init(&in, p, len);
    if (jute_decode(&zk_rec_reply_header, &in, &out->h, NULL) != 0)
        return in.err;
    if (out->h.xid == ZK_XID_NOTIFICATION) {
        out->rec = &zk_rec_watcher_event;
        return jute_decode(out->rec, &in, &out->u, a);
    }
    if (out->h.err != 0)
        return 0;
    if (type == ZK_OP_MULTI || type == ZK_OP_MULTI_READ)
        return zk_multi_resp_decode(&in, a, &out->multi, &out->n_multi);
    out->rec = zk_response_record(type);
    if (out->rec == NULL)
        return 0;
    return jute_decode(out->rec, &in, &out->u, a);
}

int zk_reply_encode(struct jute_out *o, int32_t type, const struct zk_reply *r)
{
    jute_encode(&zk_rec_reply_header, o, &r->h);
    if (r->h.xid != ZK_XID_NOTIFICATION && r->h.err == 0 &&
        (type == ZK_OP_MULTI || type == ZK_OP_MULTI_READ))
        return zk_multi_resp_encode(o, r->multi, r->n_multi);
    if (r->rec != NULL)
        jute_encode(r->rec, o, &r->u);
    return o->err;
}
