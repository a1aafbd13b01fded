/* base/err.h: every error quorum can return, as one table.
 *
 * Functions return int: 0 on success, a negative code on failure. Codes in
 * the range of -errno are system errors (-ENOMEM, -EIO, ...); codes at or
 * below QERR_BASE are quorum's own. Each of quorum's codes carries the exact
 * text etcd uses for the same condition and the gRPC status it becomes on the
 * wire, so a client sees what it would see from etcd. */
#ifndef QUORUM_BASE_ERR_H
#define QUORUM_BASE_ERR_H

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum grpc_status {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_ALREADY_EXISTS = 6,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_ABORTED = 10,
    GRPC_STATUS_OUT_OF_RANGE = 11,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_DATA_LOSS = 15,
    GRPC_STATUS_UNAUTHENTICATED = 16,
};

#define QERR_BASE (-10000)

/* X(name, grpc status, text). The order is the numbering: append only. */
#define QERR_TABLE(X)                                                                              \
    X(QERR_COMPACTED, OUT_OF_RANGE, "etcdserver: mvcc: required revision has been compacted")      \
    X(QERR_FUTURE_REV, OUT_OF_RANGE, "etcdserver: mvcc: required revision is a future revision")   \
    X(QERR_EMPTY_KEY, INVALID_ARGUMENT, "etcdserver: key is not provided")                         \
    X(QERR_KEY_NOT_FOUND, INVALID_ARGUMENT, "etcdserver: key not found")                           \
    X(QERR_VALUE_PROVIDED, INVALID_ARGUMENT, "etcdserver: value is provided")                      \
    X(QERR_LEASE_PROVIDED, INVALID_ARGUMENT, "etcdserver: lease is provided")                      \
    X(QERR_TOO_MANY_OPS, INVALID_ARGUMENT, "etcdserver: too many operations in txn request")       \
    X(QERR_DUPLICATE_KEY, INVALID_ARGUMENT, "etcdserver: duplicate key given in txn request")      \
    X(QERR_REQUEST_TOO_LARGE, INVALID_ARGUMENT, "etcdserver: request is too large")                \
    X(QERR_LEASE_NOT_FOUND, NOT_FOUND, "etcdserver: requested lease not found")                    \
    X(QERR_LEASE_EXISTS, FAILED_PRECONDITION, "etcdserver: lease already exists")                  \
    X(QERR_LEASE_TTL_TOO_LARGE, OUT_OF_RANGE, "etcdserver: too large lease TTL")                   \
    X(QERR_NO_SPACE, RESOURCE_EXHAUSTED, "etcdserver: mvcc: database space exceeded")              \
    X(QERR_NO_LEADER, UNAVAILABLE, "etcdserver: no leader")                                        \
    X(QERR_LEADER_CHANGED, UNAVAILABLE, "etcdserver: leader changed")                              \
    X(QERR_TIMEOUT, UNAVAILABLE, "etcdserver: request timed out")                                  \
    X(QERR_CORRUPT, DATA_LOSS, "etcdserver: corrupt cluster")                                      \
    X(QERR_INVALID_TOKEN, UNAUTHENTICATED, "etcdserver: invalid auth token")                       \
    X(QERR_PERMISSION_DENIED, PERMISSION_DENIED, "etcdserver: permission denied")                  \
    X(QERR_ROOT_USER_NOT_EXIST, FAILED_PRECONDITION, "etcdserver: root user does not exist")       \
    X(QERR_ROOT_ROLE_NOT_EXIST, FAILED_PRECONDITION,                                               \
      "etcdserver: root user does not have root role")                                             \
    X(QERR_USER_EXISTS, FAILED_PRECONDITION, "etcdserver: user name already exists")               \
    X(QERR_USER_EMPTY, INVALID_ARGUMENT, "etcdserver: user name is empty")                         \
    X(QERR_USER_NOT_FOUND, FAILED_PRECONDITION, "etcdserver: user name not found")                 \
    X(QERR_ROLE_EXISTS, FAILED_PRECONDITION, "etcdserver: role name already exists")               \
    X(QERR_ROLE_NOT_FOUND, FAILED_PRECONDITION, "etcdserver: role name not found")                 \
    X(QERR_ROLE_EMPTY, INVALID_ARGUMENT, "etcdserver: role name is empty")                         \
    X(QERR_AUTH_FAILED, INVALID_ARGUMENT,                                                          \
      "etcdserver: authentication failed, invalid user ID or password")                            \
    X(QERR_ROLE_NOT_GRANTED, FAILED_PRECONDITION, "etcdserver: role is not granted to the user")   \
    X(QERR_PERMISSION_NOT_GRANTED, FAILED_PRECONDITION,                                            \
      "etcdserver: permission is not granted to the role")                                         \
    X(QERR_AUTH_NOT_ENABLED, FAILED_PRECONDITION, "etcdserver: authentication is not enabled")     \
    X(QERR_INVALID_AUTH_MGMT, INVALID_ARGUMENT, "etcdserver: invalid auth management")             \
    X(QERR_AUTH_OLD_REVISION, INVALID_ARGUMENT, "etcdserver: revision of auth store is old")       \
    X(QERR_JWT_VERIFY_ONLY, UNKNOWN, "auth: token signing attempted with verify-only key")         \
    X(QERR_JWT_KEY_INVALID, UNKNOWN, "key is invalid")                                             \
    X(QERR_NO_PASSWORD_USER, UNKNOWN,                                                              \
      "auth: authentication failed, password was given for no password user")                      \
    X(QERR_BAD_REQUEST, INVALID_ARGUMENT, "etcdserver: invalid request")                           \
    X(QERR_UNDECODABLE, INVALID_ARGUMENT, "grpc: error unmarshalling request")                     \
    X(QERR_UNIMPLEMENTED, UNIMPLEMENTED, "unknown method")                                         \
    X(QERR_STOPPED, UNAVAILABLE, "etcdserver: server stopped")                                     \
    X(QERR_STORAGE, INTERNAL, "etcdserver: storage error")                                         \
    X(QERR_MEMBER_NOT_FOUND, NOT_FOUND, "etcdserver: member not found")                            \
    X(QERR_INVALID_SORT, INVALID_ARGUMENT, "etcdserver: invalid sort option")                      \
    X(QERR_MEMBER_EXISTS, FAILED_PRECONDITION, "etcdserver: member ID already exist")              \
    X(QERR_PEER_URL_EXISTS, FAILED_PRECONDITION, "etcdserver: Peer URLs already exists")           \
    X(QERR_MEMBER_BAD_URLS, INVALID_ARGUMENT, "etcdserver: given member URLs are invalid")         \
    X(QERR_MEMBER_NOT_LEARNER, FAILED_PRECONDITION,                                                \
      "etcdserver: can only promote a learner member")                                             \
    X(QERR_LEARNER_NOT_READY, FAILED_PRECONDITION,                                                 \
      "etcdserver: can only promote a learner member which is in sync with leader")                \
    X(QERR_TOO_MANY_LEARNERS, FAILED_PRECONDITION,                                                 \
      "etcdserver: too many learner members in cluster")                                           \
    X(QERR_NOT_LEADER, FAILED_PRECONDITION, "etcdserver: not leader")                              \
    X(QERR_BAD_TRANSFEREE, FAILED_PRECONDITION, "etcdserver: bad leader transferee")               \
    X(QERR_ID_REMOVED, FAILED_PRECONDITION,                                                        \
      "etcdserver: the member ID was removed; add the member with other peer URLs")                \
    X(QERR_NOT_ENOUGH_STARTED, FAILED_PRECONDITION,                                                \
      "etcdserver: re-configuration failed due to not enough started members")                     \
    X(QERR_UNHEALTHY, UNAVAILABLE, "etcdserver: unhealthy cluster")                                \
    /* a Range reply past --max-range-response-bytes: grpc-go's text when a                        \
     * reply passes the server's max send size (etcd: 2 GiB), without the                          \
     * "(N vs. M)" figures: the reply is refused before it is built whole */                       \
    X(QERR_RANGE_TOO_LARGE, RESOURCE_EXHAUSTED, "grpc: trying to send message larger than max")    \
    /* an etcd client's write to the ZooKeeper face's keys (docs/zookeeper.md) */                  \
    X(QERR_RESERVED_KEY, PERMISSION_DENIED,                                                        \
      "etcdserver: permission denied: keys under the prefix \\x00zk belong to the ZooKeeper "      \
      "face")

/* Codes count downwards from QERR_BASE - 1 so that all stay negative. */
enum {
#define QERR_IDX_(name, status, text) name##__IDX,
    QERR_TABLE(QERR_IDX_)
#undef QERR_IDX_
        QERR__COUNT
};
#define QERR_CODE_(name, status, text) static const int name = QERR_BASE - 1 - name##__IDX;
QERR_TABLE(QERR_CODE_)
#undef QERR_CODE_

/* q_strerror returns the text for |code| (quorum's own or -errno). The
 * pointer is static: never free it. Unknown codes give "unknown error". */
const char *q_strerror(int code);

/* q_err_grpc_status returns the gRPC status a failure with |code| becomes on
 * the wire: the table's for quorum's codes, INVALID_ARGUMENT for -EINVAL,
 * RESOURCE_EXHAUSTED for -ENOMEM and -ENOSPC, INTERNAL for other -errno. */
int q_err_grpc_status(int code);

/* q_is_qerr tells whether |code| is one of quorum's own codes. */
int q_is_qerr(int code);

#endif
