/* quorum/client.h: libquorum-client, the C client of quorum (and of any
 * etcd v3 server): gRPC over HTTP/2, cleartext (h2c, prior knowledge) or
 * over TLS (OpenSSL, ALPN h2) for https:// endpoints, as etcdctl speaks to
 * etcd's client port.
 *
 * Model
 *   A qc_client holds one HTTP/2 connection at a time to one of its
 *   endpoints, driven by a background I/O thread that owns the socket and
 *   the nghttp2 session. Every call is one HTTP/2 stream: calls from any
 *   number of threads are handed to the I/O thread and the calling thread
 *   waits (mutex + condition variable), so many calls run concurrently on
 *   the one connection. A CLI uses the blocking calls as they are; a load
 *   generator shares one client between threads (or opens several clients
 *   for several connections).
 *
 * Threading
 *   Every function may be called from any thread at the same time, on the
 *   same qc_client. One qc_stream is used by one thread at a time for
 *   sending and one for receiving (a sender thread and a receiver thread on
 *   the same stream are fine); qc_stream_free is the last call on a stream.
 *   qc_close may be called while other threads are blocked in calls on the
 *   client (they return QC_ECLOSED), but no call on the client may start
 *   once qc_close has been called.
 *
 * Errors
 *   Every function that can fail returns 0 (or a documented positive value)
 *   on success and a negative code on failure: -errno for local failures
 *   (-ENOMEM, -EINVAL, -EMSGSIZE) or one of the QC_E* codes below. Every
 *   call that takes a struct qc_status * (may be NULL) fills it on success
 *   (code 0, empty message) and on every failure: the gRPC status code and
 *   message the server sent (equal to etcd's texts, e.g. code 11
 *   OUT_OF_RANGE "etcdserver: mvcc: required revision has been compacted"),
 *   or for a local failure the status grpc-go would report (UNAVAILABLE,
 *   DEADLINE_EXCEEDED "context deadline exceeded", CANCELLED, INTERNAL).
 *
 * Failover
 *   Endpoints are tried round robin, each connect bounded by the dial
 *   timeout. qc_connect fails only when no endpoint accepts a connection.
 *   When the connection breaks or the server closes it (GOAWAY), the next
 *   call dials the next endpoint. A call whose request had not been written
 *   to the broken connection (or that the server refused unprocessed, as
 *   GOAWAY tells) is retried on the next endpoint, once. Calls in flight
 *   when the connection breaks fail with QC_EUNAVAILABLE (status
 *   UNAVAILABLE): whether to retry a possibly applied write is the caller's
 *   decision. When a member answers UNAVAILABLE "etcdserver: no leader" or
 *   "etcdserver: leader changed", the client switches to the next endpoint
 *   for the calls that follow (calls already running on the old connection,
 *   e.g. watches, finish there). When every endpoint failed to connect in a
 *   row, the waiting calls fail with QC_EUNAVAILABLE.
 *
 * Memory
 *   Responses are protobuf-c messages allocated by protobuf-c's default
 *   allocator (malloc); the caller owns them and frees each with
 *   protobuf_c_message_free_unpacked(&resp->base, NULL). Request messages
 *   and all input buffers are only borrowed for the duration of the call.
 *   Every output pointer is left NULL when the call fails.
 *
 * Flow control
 *   Once a stream holds options.stream_buffer bytes of received messages
 *   that its reader has not taken, no more HTTP/2 WINDOW_UPDATE is sent for
 *   it, so a slow reader stops the server instead of growing memory: a
 *   stream holds at most about twice stream_buffer plus one message. A
 *   single message may be larger than the buffer (up to
 *   max_recv_msg_size); the connection window is always given back, so one
 *   stalled stream does not stop the others. qc_stream_send blocks while more than
 *   stream_buffer bytes wait to be sent on that stream.
 *
 * Caveats
 *   No authentication token yet. A stream is bound to the connection it was opened on: when
 *   that breaks, the stream ends with QC_EUNAVAILABLE and the caller opens
 *   a new one (a watcher resumes from its last revision + 1).
 */
#ifndef QUORUM_CLIENT_H
#define QUORUM_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (negative), besides -ENOMEM, -EINVAL, -EMSGSIZE. */
#define QC_ESTATUS (-30001)      /* the server ended the call with a non-OK gRPC status */
#define QC_EUNAVAILABLE (-30002) /* no connection, or it broke (status UNAVAILABLE) */
#define QC_ETIMEDOUT (-30003)    /* the call's deadline passed (DEADLINE_EXCEEDED) */
#define QC_EPROTO (-30004)       /* malformed response (status INTERNAL) */
#define QC_ECLOSED                                                                                 \
    (-30005) /* the client is closing, or the stream was reset                                     \
                (status CANCELLED) */

/* gRPC status codes, as in grpc/doc/statuscodes.md. */
enum qc_code {
    QC_OK = 0,
    QC_CANCELLED = 1,
    QC_UNKNOWN = 2,
    QC_INVALID_ARGUMENT = 3,
    QC_DEADLINE_EXCEEDED = 4,
    QC_NOT_FOUND = 5,
    QC_ALREADY_EXISTS = 6,
    QC_PERMISSION_DENIED = 7,
    QC_RESOURCE_EXHAUSTED = 8,
    QC_FAILED_PRECONDITION = 9,
    QC_ABORTED = 10,
    QC_OUT_OF_RANGE = 11,
    QC_UNIMPLEMENTED = 12,
    QC_INTERNAL = 13,
    QC_UNAVAILABLE = 14,
    QC_DATA_LOSS = 15,
    QC_UNAUTHENTICATED = 16,
};

/* The outcome of a call: the gRPC status code and message (the server's
 * grpc-message, percent-decoded, truncated to 255 bytes, NUL-terminated). */
struct qc_status {
    int code;
    char message[256];
};

struct qc_options {
    /* endpoints: "127.0.0.1:2379", "http://127.0.0.1:2379", "[::1]:2379",
     * "localhost:2379", "https://127.0.0.1:2379", and unix sockets as etcd
     * names them: "unix://localhost:2379" (the file "localhost:2379"),
     * "unix:///run/quorum.sock", "unixs://..." (TLS). Copied by
     * qc_connect. At least one. */
    const char *const *endpoints;
    size_t n_endpoints;
    int dial_timeout_ms;      /* per connect attempt; 0 = 5000 */
    int call_timeout_ms;      /* default deadline of unary calls; 0 = 10000
                                 (etcdctl's --command-timeout 5s is shorter);
                                 -1 = none */
    size_t max_recv_msg_size; /* largest response message; 0 = 2 GiB - 1
                                 (must be at least 64 MiB if set) */
    size_t max_send_msg_size; /* largest request message; 0 = 2 GiB - 1 */
    size_t stream_buffer;     /* per-stream receive window and buffer of
                                 untaken messages; 0 = 4 MiB */
    /* TLS (OpenSSL), as etcdctl's --cacert, --cert, --key and
     * --insecure-skip-tls-verify: an "https://" endpoint, or one without a
     * scheme when any of these is set, is dialed with TLS ("http://" never
     * is). The server's certificate is verified against ca_file (NULL: the
     * system's CAs) and the endpoint's host (IP SAN or DNS name) unless
     * insecure_skip_verify; cert_file/key_file (PEM) are the client
     * certificate, if the server asks for one. A failed handshake fails
     * the dial with OpenSSL's reason ("TLS handshake: certificate verify
     * failed: ..."). Copied by qc_connect. */
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    int insecure_skip_verify;
};

typedef struct qc_client qc_client;
typedef struct qc_stream qc_stream;

/* qc_strerror returns a static text for |err| (a QC_E* code or -errno).
 * Never free it. */
const char *qc_strerror(int err);

/* qc_connect copies |opts|, starts the I/O thread and connects to the first
 * endpoint that completes a TCP connect and the HTTP/2 handshake (its
 * SETTINGS arrive), trying them in the order given, each within the dial
 * timeout. On success *|out| is the client (free it with
 * qc_close). On failure *|out| is NULL and |st| (may be NULL) says why.
 * Errors: -EINVAL (no endpoint, a malformed or https endpoint),
 * QC_EUNAVAILABLE (no endpoint reachable), -ENOMEM, -EAGAIN (thread). */
int qc_connect(const struct qc_options *opts, qc_client **out, struct qc_status *st);

/* qc_close fails every call still waiting with QC_ECLOSED (status
 * CANCELLED), closes the connections, stops and joins the I/O thread and
 * frees the client. Streams not yet freed stay valid (every call on them
 * fails with QC_ECLOSED; messages received before stay readable) until
 * qc_stream_free; the client's memory goes with the last of them. |c| may
 * be NULL. */
void qc_close(qc_client *c);

/* qc_authenticate logs in as |user| (etcd's Authenticate) and keeps the
 * credentials: every call from then on carries the token ("token"
 * metadata, as etcd's clients send it), and a unary call refused because
 * the token expired or predates an auth change ("etcdserver: invalid auth
 * token", "etcdserver: revision of auth store is old") authenticates again
 * and is retried once. Streams started before a new token keep the old
 * one. Errors as qc_unary ("etcdserver: authentication failed, invalid
 * user ID or password", "etcdserver: authentication is not enabled"). */
int qc_authenticate(qc_client *c, const char *user, const char *password, struct qc_status *st);
/* qc_set_token sets (or with NULL clears) the token calls carry, without
 * credentials to renew it. Errors: -ENOMEM. */
int qc_set_token(qc_client *c, const char *token);

/* qc_endpoint returns the endpoint of the current connection (as given in
 * the options), or NULL when not connected. The pointer stays valid until
 * qc_close; the connection may change at any time. */
const char *qc_endpoint(qc_client *c);

/* ---- unary calls ---- */

/* qc_unary calls the unary method |method| ("/etcdserverpb.KV/Range") with
 * request |req| and unpacks the response with |resp_desc| into *|resp|
 * (caller frees with protobuf_c_message_free_unpacked; NULL on failure).
 * The deadline is the client's call_timeout_ms.
 * Errors: QC_ESTATUS (the server's status is in |st|), QC_EUNAVAILABLE,
 * QC_ETIMEDOUT, QC_EPROTO, QC_ECLOSED, -EMSGSIZE, -ENOMEM. */
int qc_unary(qc_client *c, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
             struct qc_status *st);

/* qc_unary_timeout is qc_unary with its own deadline: |timeout_ms| > 0,
 * 0 = the client's default, -1 = none (Lock and Campaign may wait long). */
int qc_unary_timeout(qc_client *c, const char *method, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                     int timeout_ms, struct qc_status *st);

/* Typed helpers. Each builds the request, calls qc_unary and stores the
 * response in *|resp|; |resp| may be NULL when the caller does not want the
 * response (it is then freed here). Errors as qc_unary. Keys and values are
 * byte strings with explicit lengths (not NUL-terminated). */

/* KV */
int qc_put(qc_client *c, const void *key, size_t klen, const void *val, size_t vlen, int64_t lease,
           Etcdserverpb__PutResponse **resp, struct qc_status *st);

/* Options of qc_get; NULL means: key only, linearizable, latest revision. */
struct qc_get_opts {
    const void *range_end; /* NULL: the single key; "\0" with length 1: all
                              keys >= key (etcd's --from-key) */
    size_t range_end_len;
    int64_t revision; /* 0 = latest */
    int64_t limit;    /* 0 = no limit */
    int serializable;
    int keys_only;
    int count_only;
    Etcdserverpb__RangeRequest__SortOrder sort_order;
    Etcdserverpb__RangeRequest__SortTarget sort_target;
};
int qc_get(qc_client *c, const void *key, size_t klen, const struct qc_get_opts *opts,
           Etcdserverpb__RangeResponse **resp, struct qc_status *st);
/* qc_range sends a RangeRequest built by the caller (all fields). */
int qc_range(qc_client *c, const Etcdserverpb__RangeRequest *req,
             Etcdserverpb__RangeResponse **resp, struct qc_status *st);
/* range_end NULL: the single key */
int qc_delete(qc_client *c, const void *key, size_t klen, const void *range_end,
              size_t range_end_len, int prev_kv, Etcdserverpb__DeleteRangeResponse **resp,
              struct qc_status *st);
int qc_txn(qc_client *c, const Etcdserverpb__TxnRequest *req, Etcdserverpb__TxnResponse **resp,
           struct qc_status *st);
int qc_compact(qc_client *c, int64_t revision, int physical,
               Etcdserverpb__CompactionResponse **resp, struct qc_status *st);

/* Lease. |id| 0 in qc_lease_grant lets the server pick the id. */
int qc_lease_grant(qc_client *c, int64_t ttl, int64_t id, Etcdserverpb__LeaseGrantResponse **resp,
                   struct qc_status *st);
int qc_lease_revoke(qc_client *c, int64_t id, Etcdserverpb__LeaseRevokeResponse **resp,
                    struct qc_status *st);
int qc_lease_timetolive(qc_client *c, int64_t id, int keys,
                        Etcdserverpb__LeaseTimeToLiveResponse **resp, struct qc_status *st);
int qc_lease_leases(qc_client *c, Etcdserverpb__LeaseLeasesResponse **resp, struct qc_status *st);

/* Cluster. |peer_urls| are NUL-terminated strings, borrowed. */
int qc_member_list(qc_client *c, Etcdserverpb__MemberListResponse **resp, struct qc_status *st);
int qc_member_add(qc_client *c, const char *const *peer_urls, size_t n, int is_learner,
                  Etcdserverpb__MemberAddResponse **resp, struct qc_status *st);
int qc_member_remove(qc_client *c, uint64_t id, Etcdserverpb__MemberRemoveResponse **resp,
                     struct qc_status *st);
int qc_member_update(qc_client *c, uint64_t id, const char *const *peer_urls, size_t n,
                     Etcdserverpb__MemberUpdateResponse **resp, struct qc_status *st);
int qc_member_promote(qc_client *c, uint64_t id, Etcdserverpb__MemberPromoteResponse **resp,
                      struct qc_status *st);

/* Maintenance. These go to the member the client is connected to
 * (qc_endpoint); a CLI that reports per endpoint opens one client per
 * endpoint, as etcdctl does. */
int qc_maint_status(qc_client *c, Etcdserverpb__StatusResponse **resp, struct qc_status *st);
int qc_maint_hashkv(qc_client *c, int64_t revision, Etcdserverpb__HashKVResponse **resp,
                    struct qc_status *st);
int qc_maint_hash(qc_client *c, Etcdserverpb__HashResponse **resp, struct qc_status *st);
/* |action| GET lists alarms (member_id and alarm 0), ACTIVATE/DEACTIVATE */
int qc_maint_alarm(qc_client *c, Etcdserverpb__AlarmRequest__AlarmAction action, uint64_t member_id,
                   Etcdserverpb__AlarmType alarm, Etcdserverpb__AlarmResponse **resp,
                   struct qc_status *st);
/* Defragment may take long: |timeout_ms| as in qc_unary_timeout. */
int qc_maint_defragment(qc_client *c, int timeout_ms, Etcdserverpb__DefragmentResponse **resp,
                        struct qc_status *st);
int qc_maint_move_leader(qc_client *c, uint64_t target_id, Etcdserverpb__MoveLeaderResponse **resp,
                         struct qc_status *st);

/* Lock and Election. Lock and Campaign wait until acquired / elected:
 * |timeout_ms| as in qc_unary_timeout (-1 = wait forever). */
int qc_lock(qc_client *c, const void *name, size_t nlen, int64_t lease, int timeout_ms,
            V3lockpb__LockResponse **resp, struct qc_status *st);
int qc_unlock(qc_client *c, const void *key, size_t klen, V3lockpb__UnlockResponse **resp,
              struct qc_status *st);
int qc_election_campaign(qc_client *c, const void *name, size_t nlen, int64_t lease,
                         const void *val, size_t vlen, int timeout_ms,
                         V3electionpb__CampaignResponse **resp, struct qc_status *st);
/* |leader| is the LeaderKey from the CampaignResponse (borrowed) */
int qc_election_proclaim(qc_client *c, const V3electionpb__LeaderKey *leader, const void *val,
                         size_t vlen, V3electionpb__ProclaimResponse **resp, struct qc_status *st);
int qc_election_leader(qc_client *c, const void *name, size_t nlen,
                       V3electionpb__LeaderResponse **resp, struct qc_status *st);
int qc_election_resign(qc_client *c, const V3electionpb__LeaderKey *leader,
                       V3electionpb__ResignResponse **resp, struct qc_status *st);

/* ---- streams ---- */

/* Method paths of the streaming calls, for qc_stream_open. */
#define QC_METHOD_WATCH "/etcdserverpb.Watch/Watch"                    /* bidi */
#define QC_METHOD_LEASE_KEEPALIVE "/etcdserverpb.Lease/LeaseKeepAlive" /* bidi */
#define QC_METHOD_SNAPSHOT "/etcdserverpb.Maintenance/Snapshot"        /* server streaming */
#define QC_METHOD_OBSERVE "/v3electionpb.Election/Observe"             /* server streaming */

/* qc_stream_open starts a call of |method| (a path as above; any method
 * works, also a unary one) and returns it in *|out|. It does not wait for
 * the connection: a failure to connect surfaces in qc_stream_recv. For a
 * server-streaming method (Snapshot, Observe), send the one request and
 * then qc_stream_close_send. The stream has no deadline; each
 * qc_stream_recv has its own timeout. Free with qc_stream_free.
 * Errors: QC_ECLOSED (client closing), -ENOMEM, -EINVAL. */
int qc_stream_open(qc_client *c, const char *method, qc_stream **out);

/* qc_stream_send queues one request message (packed here; |msg| is
 * borrowed). It blocks while more than stream_buffer bytes are still
 * waiting to be sent on this stream. Errors: QC_ECLOSED (send side closed,
 * stream over or reset), QC_EUNAVAILABLE (the connection broke),
 * -EMSGSIZE, -ENOMEM. */
int qc_stream_send(qc_stream *s, const ProtobufCMessage *msg);

/* qc_stream_close_send ends the sending side (HTTP/2 END_STREAM after the
 * queued messages). A second call is a no-op. */
int qc_stream_close_send(qc_stream *s);

/* qc_stream_recv takes the next response message, waiting up to
 * |timeout_ms| (-1 = forever, 0 = do not wait). Returns:
 *   0  *|msg| is a message unpacked with |desc| (caller frees with
 *      protobuf_c_message_free_unpacked); |st| is set to OK;
 *   1  the server ended the stream: no more messages; *|msg| is NULL and
 *      |st| holds the final status (OK or the server's error, e.g.
 *      "etcdserver: mvcc: required revision has been compacted");
 *   QC_ETIMEDOUT  no message within |timeout_ms|; the stream is still
 *      usable (call again);
 *   QC_EUNAVAILABLE / QC_ECLOSED / QC_EPROTO / -ENOMEM: the stream failed
 *      (|st| says why); every later call returns the same.
 * Messages received before the end are always delivered first. */
int qc_stream_recv(qc_stream *s, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **msg,
                   int timeout_ms, struct qc_status *st);

/* qc_stream_free cancels the call if it is still running (RST_STREAM
 * CANCEL) and frees the stream and every message it still buffers. |s| may
 * be NULL. */
void qc_stream_free(qc_stream *s);

#ifdef __cplusplus
}
#endif

#endif
