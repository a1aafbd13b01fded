/* zk/proto.h: the records of ZooKeeper 3.8's client protocol
 * (zookeeper.jute), its op codes, error codes and event constants, and the
 * parts of the protocol that are not plain records: the connect handshake
 * with its optional readOnly flag, multi requests and responses, and one
 * request packet (header + the record its type names).
 *
 * Strings and buffers point into the decoded input (zk/jute.h). */
#ifndef QUORUM_ZK_PROTO_H
#define QUORUM_ZK_PROTO_H

#include "zk/jute.h"

/* ZooDefs.OpCode */
enum zk_op {
    ZK_OP_NOTIFICATION = 0,
    ZK_OP_CREATE = 1,
    ZK_OP_DELETE = 2,
    ZK_OP_EXISTS = 3,
    ZK_OP_GET_DATA = 4,
    ZK_OP_SET_DATA = 5,
    ZK_OP_GET_ACL = 6,
    ZK_OP_SET_ACL = 7,
    ZK_OP_GET_CHILDREN = 8,
    ZK_OP_SYNC = 9,
    ZK_OP_PING = 11,
    ZK_OP_GET_CHILDREN2 = 12,
    ZK_OP_CHECK = 13,
    ZK_OP_MULTI = 14,
    ZK_OP_CREATE2 = 15,
    ZK_OP_RECONFIG = 16,
    ZK_OP_CHECK_WATCHES = 17,
    ZK_OP_REMOVE_WATCHES = 18,
    ZK_OP_CREATE_CONTAINER = 19,
    ZK_OP_DELETE_CONTAINER = 20,
    ZK_OP_CREATE_TTL = 21,
    ZK_OP_MULTI_READ = 22,
    ZK_OP_AUTH = 100,
    ZK_OP_SET_WATCHES = 101,
    ZK_OP_SASL = 102,
    ZK_OP_GET_EPHEMERALS = 103,
    ZK_OP_GET_ALL_CHILDREN_NUMBER = 104,
    ZK_OP_SET_WATCHES2 = 105,
    ZK_OP_ADD_WATCH = 106,
    ZK_OP_WHO_AM_I = 107,
    ZK_OP_CREATE_SESSION = -10,
    ZK_OP_CLOSE_SESSION = -11,
    ZK_OP_ERROR = -1,
};

/* The xids with a meaning of their own (ClientCnxn). */
enum {
    ZK_XID_NOTIFICATION = -1,
    ZK_XID_PING = -2,
    ZK_XID_AUTH = -4,
    ZK_XID_SET_WATCHES = -8,
};

/* KeeperException.Code */
enum zk_err {
    ZK_OK = 0,
    ZK_SYSTEMERROR = -1,
    ZK_RUNTIMEINCONSISTENCY = -2,
    ZK_DATAINCONSISTENCY = -3,
    ZK_CONNECTIONLOSS = -4,
    ZK_MARSHALLINGERROR = -5,
    ZK_UNIMPLEMENTED = -6,
    ZK_OPERATIONTIMEOUT = -7,
    ZK_BADARGUMENTS = -8,
    ZK_UNKNOWNSESSION = -12,
    ZK_NEWCONFIGNOQUORUM = -13,
    ZK_RECONFIGINPROGRESS = -14,
    ZK_APIERROR = -100,
    ZK_NONODE = -101,
    ZK_NOAUTH = -102,
    ZK_BADVERSION = -103,
    ZK_NOCHILDRENFOREPHEMERALS = -108,
    ZK_NODEEXISTS = -110,
    ZK_NOTEMPTY = -111,
    ZK_SESSIONEXPIRED = -112,
    ZK_INVALIDCALLBACK = -113,
    ZK_INVALIDACL = -114,
    ZK_AUTHFAILED = -115,
    ZK_SESSIONMOVED = -118,
    ZK_NOTREADONLY = -119,
    ZK_EPHEMERALONLOCALSESSION = -120,
    ZK_NOWATCHER = -121,
    ZK_REQUESTTIMEOUT = -122,
    ZK_RECONFIGDISABLED = -123,
    ZK_SESSIONCLOSEDREQUIRESASLAUTH = -124,
    ZK_QUOTAEXCEEDED = -125,
    ZK_THROTTLEDOP = -127,
};

/* Watcher.Event.EventType and KeeperState */
enum zk_event_type {
    ZK_EVENT_NONE = -1,
    ZK_EVENT_NODE_CREATED = 1,
    ZK_EVENT_NODE_DELETED = 2,
    ZK_EVENT_NODE_DATA_CHANGED = 3,
    ZK_EVENT_NODE_CHILDREN_CHANGED = 4,
    ZK_EVENT_DATA_WATCH_REMOVED = 5,
    ZK_EVENT_CHILD_WATCH_REMOVED = 6,
    ZK_EVENT_PERSISTENT_WATCH_REMOVED = 7,
};
enum zk_state {
    ZK_STATE_DISCONNECTED = 0,
    ZK_STATE_SYNC_CONNECTED = 3,
    ZK_STATE_AUTH_FAILED = 4,
    ZK_STATE_CONNECTED_READ_ONLY = 5,
    ZK_STATE_CLOSED = 7,
    ZK_STATE_EXPIRED = -112,
};

/* CreateMode flags (CreateMode.toFlag) */
enum zk_create_mode {
    ZK_MODE_PERSISTENT = 0,
    ZK_MODE_EPHEMERAL = 1,
    ZK_MODE_PERSISTENT_SEQUENTIAL = 2,
    ZK_MODE_EPHEMERAL_SEQUENTIAL = 3,
    ZK_MODE_CONTAINER = 4,
    ZK_MODE_PERSISTENT_WITH_TTL = 5,
    ZK_MODE_PERSISTENT_SEQUENTIAL_WITH_TTL = 6,
};

/* ZooDefs.Perms */
enum { ZK_PERM_READ = 1, ZK_PERM_WRITE = 2, ZK_PERM_CREATE = 4, ZK_PERM_DELETE = 8,
       ZK_PERM_ADMIN = 16, ZK_PERM_ALL = 31 };

/* AddWatchMode, and WatcherType of removeWatches/checkWatches */
enum { ZK_ADD_WATCH_PERSISTENT = 0, ZK_ADD_WATCH_PERSISTENT_RECURSIVE = 1 };
enum { ZK_WATCHER_CHILDREN = 1, ZK_WATCHER_DATA = 2, ZK_WATCHER_ANY = 3 };

/* ---- records ---- */

struct zk_id {
    struct jute_bytes scheme, id;
};
struct zk_acl {
    int32_t perms;
    struct zk_id id;
};
struct zk_stat {
    int64_t czxid, mzxid, ctime, mtime;
    int32_t version, cversion, aversion;
    int64_t ephemeral_owner;
    int32_t data_length, num_children;
    int64_t pzxid;
};
/* ConnectRequest; |read_only| is the optional trailing boolean */
struct zk_connect_req {
    int32_t protocol_version;
    int64_t last_zxid_seen;
    int32_t timeout;
    int64_t session_id;
    struct jute_bytes passwd;
    bool read_only;
    bool has_read_only; /* the client sent it */
};
struct zk_connect_resp {
    int32_t protocol_version;
    int32_t timeout;
    int64_t session_id;
    struct jute_bytes passwd;
    bool read_only;
};
struct zk_request_header {
    int32_t xid, type;
};
struct zk_reply_header {
    int32_t xid;
    int64_t zxid;
    int32_t err;
};
struct zk_multi_header {
    int32_t type;
    bool done;
    int32_t err;
};
struct zk_auth_packet {
    int32_t type;
    struct jute_bytes scheme, auth;
};
/* GetSASLRequest: a client's SASL token (quorum runs no SASL server) */
struct zk_sasl_req {
    struct jute_bytes token;
};
/* ReconfigRequest: decoded only to be refused (RECONFIGDISABLED) */
struct zk_reconfig_req {
    struct jute_bytes joining, leaving, new_members;
    int64_t cur_config_id;
};
/* GetDataRequest, ExistsRequest, GetChildrenRequest, GetChildren2Request */
struct zk_path_watch {
    struct jute_bytes path;
    bool watch;
};
/* SyncRequest/Response, GetACLRequest, GetAllChildrenNumberRequest,
 * GetEphemeralsRequest (prefixPath), CreateResponse */
struct zk_path {
    struct jute_bytes path;
};
struct zk_set_data_req {
    struct jute_bytes path, data;
    int32_t version;
};
/* CreateRequest (no ttl) and CreateTTLRequest; acl: struct zk_acl */
struct zk_create_req {
    struct jute_bytes path, data;
    struct jute_vec acl;
    int32_t flags;
    int64_t ttl;
};
/* DeleteRequest, CheckVersionRequest */
struct zk_path_version {
    struct jute_bytes path;
    int32_t version;
};
struct zk_set_acl_req {
    struct jute_bytes path;
    struct jute_vec acl;
    int32_t version;
};
/* AddWatchRequest (mode), RemoveWatchesRequest / CheckWatchesRequest (type) */
struct zk_path_int {
    struct jute_bytes path;
    int32_t n;
};
/* SetWatches (the first three vectors) and SetWatches2; vectors of strings */
struct zk_set_watches {
    int64_t relative_zxid;
    struct jute_vec data, exist, child, persistent, persistent_recursive;
};
struct zk_watcher_event {
    int32_t type, state;
    struct jute_bytes path;
};
/* ErrorResponse, GetAllChildrenNumberResponse */
struct zk_int {
    int32_t n;
};
/* SetDataResponse, SetACLResponse, ExistsResponse */
struct zk_stat_resp {
    struct zk_stat stat;
};
struct zk_create2_resp {
    struct jute_bytes path;
    struct zk_stat stat;
};
struct zk_get_data_resp {
    struct jute_bytes data;
    struct zk_stat stat;
};
/* GetChildrenResponse (no stat), GetChildren2Response; GetEphemeralsResponse
 * (no stat) */
struct zk_children_resp {
    struct jute_vec children;
    struct zk_stat stat;
};
struct zk_get_acl_resp {
    struct jute_vec acl;
    struct zk_stat stat;
};
/* WhoAmIResponse (3.8): clientInfo, a vector of ClientInfo */
struct zk_client_info {
    struct jute_bytes scheme, user;
};
struct zk_who_am_i_resp {
    struct jute_vec info;
};

extern const struct jute_record zk_rec_id, zk_rec_acl, zk_rec_stat, zk_rec_connect_req,
    zk_rec_connect_resp, zk_rec_request_header, zk_rec_reply_header, zk_rec_multi_header,
    zk_rec_auth_packet, zk_rec_get_data_req, zk_rec_exists_req, zk_rec_get_children_req,
    zk_rec_get_children2_req, zk_rec_sync_req, zk_rec_get_acl_req, zk_rec_reconfig_req,
    zk_rec_sasl_req, zk_rec_get_all_children_number_req, zk_rec_get_ephemerals_req,
    zk_rec_set_data_req, zk_rec_create_req, zk_rec_create_ttl_req, zk_rec_delete_req,
    zk_rec_check_version_req, zk_rec_set_acl_req, zk_rec_add_watch_req, zk_rec_remove_watches_req,
    zk_rec_check_watches_req, zk_rec_set_watches, zk_rec_set_watches2, zk_rec_watcher_event,
    zk_rec_error_resp, zk_rec_create_resp, zk_rec_create2_resp, zk_rec_stat_resp,
    zk_rec_get_data_resp, zk_rec_get_children_resp, zk_rec_get_children2_resp, zk_rec_get_acl_resp,
    zk_rec_get_all_children_number_resp, zk_rec_get_ephemerals_resp, zk_rec_sync_resp,
    zk_rec_client_info, zk_rec_who_am_i_resp;

/* zk_request_record is the record that follows a RequestHeader of |type|
 * (NULL: none follows, as for ping and closeSession, or multi, which
 * zk_multi_decode reads, or a type quorum does not decode). */
const struct jute_record *zk_request_record(int32_t type);
/* zk_op_name is ZooKeeper's name of op code |type| (Request.op2String),
 * "unknown " types as "unknown". */
const char *zk_op_name(int32_t type);
/* zk_err_name is the KeeperException.Code constant's name ("NONODE"),
 * NULL for a code that has none. */
const char *zk_err_name(int32_t err);

/* The connect handshake: the readOnly boolean is read when present and
 * written always (3.x clients read it when there). */
int zk_connect_req_decode(struct jute_in *in, struct zk_connect_req *out);
int zk_connect_req_encode(struct jute_out *o, const struct zk_connect_req *r);
int zk_connect_resp_decode(struct jute_in *in, struct zk_connect_resp *out);
int zk_connect_resp_encode(struct jute_out *o, const struct zk_connect_resp *r);

/* One operation of a multi or multiRead: its type and its request. */
struct zk_multi_op {
    int32_t type;
    union {
        struct zk_create_req create;     /* create, create2, createContainer, createTTL */
        struct zk_path_version pv;       /* delete, check */
        struct zk_set_data_req set_data; /* setData */
        struct zk_path_watch pw;         /* getChildren, getData (multiRead) */
    } u;
};
/* The most operations quorum takes in one multi (every op takes 13 bytes
 * at least, so a 1 MB packet holds at most ~80000 anyway). */
#define ZK_MULTI_MAX_OPS 100000

/* zk_multi_decode reads a MultiOperationRecord: headers and requests until
 * the header that says done. An op type a multi cannot hold is -EBADMSG
 * (ZooKeeper 3.8 answers such a multi MARSHALLINGERROR). */
int zk_multi_decode(struct jute_in *in, struct arena *a, struct zk_multi_op **ops, size_t *n);
int zk_multi_encode(struct jute_out *o, const struct zk_multi_op *ops, size_t n);

/* One result of a multi: |type| the op's type (ZK_OP_ERROR with |err| for
 * a failure) and what its response carries. */
struct zk_multi_result {
    int32_t type;
    int32_t err;
    struct jute_bytes path;  /* create, create2 */
    struct zk_stat stat;     /* create2, setData, getData */
    struct jute_bytes data;  /* getData */
    struct jute_vec children; /* getChildren: jute_bytes */
};
int zk_multi_resp_encode(struct jute_out *o, const struct zk_multi_result *res, size_t n);
int zk_multi_resp_decode(struct jute_in *in, struct arena *a, struct zk_multi_result **res,
                         size_t *n);

/* A decoded request packet: its header and its body, one of the request
 * structs above as zk_request_record(type) says, or |multi| for multi and
 * multiRead. */
struct zk_request {
    struct zk_request_header h;
    const struct jute_record *rec; /* NULL: no body (or multi) */
    union {
        struct zk_path_watch pw;
        struct zk_path path;
        struct zk_set_data_req set_data;
        struct zk_create_req create;
        struct zk_path_version pv;
        struct zk_set_acl_req set_acl;
        struct zk_path_int pi;
        struct zk_set_watches sw;
        struct zk_auth_packet auth;
        struct zk_reconfig_req reconfig;
        struct zk_sasl_req sasl;
    } u;
    struct zk_multi_op *multi;
    size_t n_multi;
};
/* zk_request_decode decodes one packet (after the connect) into |out|:
 * 0; -EBADMSG when it is malformed; -ENOTSUP for a type quorum does not
 * decode (the header is still in out->h, so the answer can be
 * UNIMPLEMENTED). Trailing bytes after the record are ignored, as Java's
 * archive does. */
int zk_request_decode(const uint8_t *p, size_t len, struct arena *a, struct zk_request *out);
/* zk_request_encode writes |r| as one packet body (no frame length). */
int zk_request_encode(struct jute_out *o, const struct zk_request *r);

/* zk_response_record is the record of a successful answer to op |type|
 * (NULL: the ReplyHeader is the whole answer, as for delete, ping,
 * setWatches, auth, removeWatches, or multi, which zk_multi_resp_*
 * handle). addWatch answers an ErrorResponse of 0, as ZooKeeper does. */
const struct jute_record *zk_response_record(int32_t type);

/* A decoded answer packet (a client's view: tests, tools): its header
 * and, when err is 0, the body zk_response_record(type) names, or
 * |multi| for multi and multiRead; a notification (xid -1) has |event|. */
struct zk_reply {
    struct zk_reply_header h;
    const struct jute_record *rec;
    union {
        struct zk_path path;
        struct zk_create2_resp create2;
        struct zk_stat_resp stat;
        struct zk_get_data_resp get_data;
        struct zk_children_resp children;
        struct zk_get_acl_resp get_acl;
        struct zk_int n;
        struct zk_watcher_event event;
        struct zk_who_am_i_resp who;
    } u;
    struct zk_multi_result *multi;
    size_t n_multi;
};
/* zk_reply_decode decodes one answer to a request of op |type| (ignored
 * for notifications). 0 or -EBADMSG. */
int zk_reply_decode(const uint8_t *p, size_t len, int32_t type, struct arena *a,
                    struct zk_reply *out);
int zk_reply_encode(struct jute_out *o, int32_t type, const struct zk_reply *r);

#endif
