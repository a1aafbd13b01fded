/* transport/transport.h: peer links between quorum members over TCP on libuv,
 * and the byte codec of struct raft_msg.
 *
 * Two layers in one header:
 *
 * 1. THE CODEC (codec.c) turns a struct raft_msg (every field, the entries
 *    with their data, a snapshot's metadata, membership and data) into bytes
 *    and back. It does no I/O. Decoding is bounds-checked and never trusts a
 *    length: any input either decodes or is rejected with -EINVAL.
 *
 * 2. THE LINKS (transport.c) carry encoded messages to the other members.
 *    Per peer there is one outgoing TCP connection for messages, opened
 *    on the first send or the first round-trip probe (every peer is
 *    linked within ping_interval_ms) and reopened with exponential backoff (100 ms
 *    doubling to 5 s, reset once a handshake succeeds). Messages sent in one
 *    loop pass go out in one write. A snapshot travels on a connection of its
 *    own, streamed in chunks, so a big snapshot never holds up heartbeats.
 *
 * WIRE FORMAT (protocol version 1; all fixed-width integers big-endian,
 * "varint" is protobuf's base-128 varint)
 *
 *   Handshake, first bytes on every connection (32 bytes):
 *     "QRMT" | u16 version | u8 kind (0 messages, 1 snapshot, 2 member
 *     list) | u8 0 | u64 cluster id | u64 sender id | u64 receiver id
 *   Handshake reply from the listener (26 + n bytes):
 *     "QRMT" | u16 version | u8 status (0 accepted, 1 rejected) | u8 flags |
 *     u64 cluster id | u64 listener's member id | u16 n | n bytes reason
 *     (n = 0 when accepted, at most 256)
 *   Reasons: "cluster ID mismatch (local <hex>, remote <hex>)", "member ID
 *   mismatch (local <hex>, remote expects <hex>)", "unsupported protocol
 *   version ...", "snapshots are not accepted", ... Both sides log them;
 *   the listener as "rejected connection from member <hex>: <reason>", the
 *   sender as "member <hex> rejected our connection: <reason>". A
 *   connection that does not start with the magic is closed unanswered.
 *   A rejected connection is closed by the listener after the reply. The
 *   sender sends nothing but the handshake until it has the reply.
 *
 *   Reply flags: 1 = the listener answers PING (members before the flag
 *   sent 0 and ignore it, so a sender pings only those that set it).
 *
 *   Message connection, after the reply: frames "u32 length | message",
 *   sender to listener only (the listener never writes again). A PING
 *   (every ping_interval_ms on each link that is up and whose reply had
 *   flag 1) is answered by a PONG on the listener's own link back; the
 *   round trip is etcd_network_peer_round_trip_time_seconds.
 *
 *   Message encoding (codec):
 *     u8 type | u8 flags (1 reject, 2 force, 4 has snapshot) |
 *     varint from, to, term, log_term, index, commit, reject_hint, ctx |
 *     varint n_entries | per entry: varint term, varint index, u8 type,
 *                                   varint len, len bytes |
 *     if has snapshot: varint index, varint term, varint n_voters,
 *                      n_voters varints, varint n_learners, n_learners
 *                      varints, varint len, len bytes
 *   Nothing may follow; unknown types and flags are rejected.
 *
 *   Member list connection (kind 2, ids 0: sent by a member that is not
 *   part of the cluster yet, as etcd's GET /members on the peer port): the
 *   listener answers the accepted reply (its cluster id in it), then
 *   u32 length | the list (members_query's bytes), and closes.
 *
 *   Snapshot connection, after the reply:
 *     u32 length | the SNAP message encoded with an empty snapshot data
 *     u64 data size
 *     data size raw bytes (the snapshot data, streamed in chunks)
 *     u32 CRC-32C of the data
 *   then the listener answers one byte (0 stored, 1 failed) and both close.
 *
 * METRICS (base/metrics.h): etcd's etcd_network_peer_* by peer (bytes sent
 * and received; send failures: messages dropped or queued for a peer that
 * is unreachable; receive failures; round trip time) and
 * etcd_network_active_peers / _disconnected_peers_total, registered by
 * transport_new and transport_add_peer.
 *
 * THREADING: everything runs on the thread of the uv loop given to
 * transport_new; no function may be called from another thread.
 *
 * LIFE CYCLE (libuv's rules): transport_new -> transport_listen / add_peer /
 * send ... -> transport_close(t, cb). After transport_close no callback runs
 * except |cb|, which runs once every handle and request the transport used
 * has been closed or has completed; the memory is freed just before |cb|.
 * Pending messages and transfers are dropped at close (no on_snapshot_sent).
 * The loop must keep running until |cb| has run.
 *
 * CAVEATS: a write to a connection the peer has closed raises SIGPIPE on
 * Linux; the process must ignore it (signal(SIGPIPE, SIG_IGN)) before the
 * first send. A peer's host may be a name: it is resolved before every
 * dial (see transport_add_peer). Without TLS peers are not authenticated
 * beyond the cluster id. Snapshot data is written and fdatasync'ed with async uv_fs
 * requests; creating, closing and unlinking the temp file are synchronous
 * (short) calls on the loop thread. Only one snapshot transfer per peer
 * runs at a time (-EBUSY).
 *
 * Errors: 0 or a negative code: -EINVAL (bad argument, malformed bytes),
 * -ENOMEM, -ENOENT (unknown peer), -EEXIST (peer already added), -EBUSY (a
 * snapshot transfer to that peer is already running), -ESHUTDOWN (the
 * transport is closing), or a libuv error (UV_E*, negative errno).
 */
#ifndef QUORUM_TRANSPORT_TRANSPORT_H
#define QUORUM_TRANSPORT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "base/buf.h"
#include "raft/raft.h"

#define TRANSPORT_PROTOCOL_VERSION 1

/* Application messages: besides the Raft types (below RAFT_MSG__COUNT) the
 * codec and the links carry these server-to-server types in the same struct
 * raft_msg, which raft_step never sees (the server handles them):
 *   PROP        proposals a follower forwards to the leader (entries; a
 *               RAFT_ENTRY_CONF entry carries a proposed membership)
 *   LEASE       a lease renewal (force set) or time-to-live query (force
 *               clear) forwarded to the leader: index = lease id, ctx =
 *               the sender's request id
 *   LEASE_RESP  its answer: ctx echoed, index = remaining TTL, commit =
 *               granted TTL, reject = no such lease
 *   HASH        the leader's corruption check: index = revision, ctx =
 *               the check round
 *   HASH_RESP   its answer: ctx echoed, index = revision, commit = the
 *               HashKV there, log_term = the compaction revision + 1,
 *               reject = cannot hash at that revision (behind, compacted) */
#define TRANSPORT_MSG_PROP 100
#define TRANSPORT_MSG_LEASE 101
#define TRANSPORT_MSG_LEASE_RESP 102
#define TRANSPORT_MSG_HASH 103
#define TRANSPORT_MSG_HASH_RESP 104
/* The links' own round-trip probes (never delivered to on_message):
 *   PING        ctx = the sender's monotonic clock (ns)
 *   PONG        its answer, ctx echoed, on the answerer's link back */
#define TRANSPORT_MSG_PING 105
#define TRANSPORT_MSG_PONG 106

/* transport_msg_type_ok tells whether the codec accepts message type |t|. */
static inline int transport_msg_type_ok(unsigned t)
{
    return t < RAFT_MSG__COUNT || (t >= TRANSPORT_MSG_PROP && t <= TRANSPORT_MSG_PONG);
}

/* Largest frame (one encoded message) accepted on a message connection. A
 * bigger frame is a protocol error: the connection is closed. */
#define TRANSPORT_MAX_FRAME (128u << 20)

/* ------------------------------------------------------------------------
 * Codec
 * ------------------------------------------------------------------------ */

/* transport_msg_size returns the number of bytes transport_msg_encode
 * appends for |m|. */
size_t transport_msg_size(const struct raft_msg *m);

/* transport_msg_encode appends the encoding of |m| (see WIRE FORMAT) to
 * |out|. |m| is only read. Errors: -EINVAL (type out of range, more than
 * RAFT_MAX_MEMBERS voters or learners in the snapshot, a data pointer NULL
 * with a non-zero length), -ENOMEM (|out| is then unchanged). */
int transport_msg_encode(const struct raft_msg *m, struct buf *out);

/* A decoded message. |msg| points into this struct (msg.entries ->
 * entries, msg.snapshot -> &snap) and the data of the entries and of the
 * snapshot point into the decoded bytes: the view is valid while the bytes
 * are and until transport_msg_view_free. */
struct transport_msg_view {
    struct raft_msg msg;
    struct raft_snapshot snap;
    struct raft_entry *entries; /* owned, msg.n_entries of them */
};

/* transport_msg_decode parses exactly |len| bytes at |p| into |v|. On error
 * |v| holds nothing to free. Errors: -EINVAL (truncated, trailing bytes,
 * unknown type or flags, counts that do not fit the input or exceed
 * RAFT_MAX_MEMBERS), -ENOMEM. */
int transport_msg_decode(const void *p, size_t len, struct transport_msg_view *v);

/* transport_msg_view_free releases what transport_msg_decode allocated.
 * Safe on a zeroed view and twice in a row. */
void transport_msg_view_free(struct transport_msg_view *v);

/* ------------------------------------------------------------------------
 * Links
 * ------------------------------------------------------------------------ */

struct transport;
struct tls_ctx;

/* The callbacks; each gets the |arg| of struct transport_options. None runs
 * after transport_close was called. A callback may call any transport
 * function, including transport_close. */
struct transport_callbacks {
    /* on_message delivers one message received from a peer, in the order
     * the peer sent it on its link. |m| and everything it points to is
     * valid only during the call (raft_step copies what it keeps). A
     * message whose |to| is not this member or whose |from| is not the id
     * the sender gave in its handshake is dropped and logged; SNAP messages
     * never arrive here (see on_snapshot). Required. */
    void (*on_message)(const struct raft_msg *m, void *arg);

    /* on_snapshot delivers a received snapshot message whose data was
     * stored in the file |path| (in options.snap_dir, CRC verified, synced);
     * m->snapshot->data is NULL and m->snapshot->len is the file's size. The
     * file now belongs to the callee (rename it into place or unlink it).
     * |m| and |path| are valid only during the call. To step it into the
     * core, load the file into memory and pass a copy of |m| whose
     * snapshot's data/len point at it. The data connection is acknowledged
     * before the call. If NULL, incoming snapshots are refused at the
     * handshake. */
    void (*on_snapshot)(const struct raft_msg *m, const char *path, void *arg);

    /* on_snapshot_sent reports the end of a transport_send_snapshot
     * transfer to member |to|: ok is true once the peer confirmed it stored
     * the data with a matching CRC. Runs exactly once per transfer that
     * transport_send_snapshot accepted, unless the transport is closed or
     * the peer removed first. May be NULL. */
    void (*on_snapshot_sent)(uint64_t to, bool ok, void *arg);

    /* on_peer_rejected reports that member |id| refused our connection;
     * |reason| is the peer's text (valid during the call). The transport
     * logs it too, drops the peer's queued messages and retries after the
     * backoff. May be NULL. */
    void (*on_peer_rejected)(uint64_t id, const char *reason, void *arg);

    /* on_cluster_id reports the cluster id learned from the first accepted
     * handshake when the transport was created with cluster_id 0 (a member
     * joining an existing cluster knows its own id but not the cluster's).
     * May be NULL. */
    void (*on_cluster_id)(uint64_t cluster_id, void *arg);

    /* refuse_peer lets the owner refuse a sender that passed every other
     * handshake check (e.g. a member removed from the cluster): return
     * true and write the reason (at most 200 bytes) to |reason|, which the
     * sender gets in its on_peer_rejected. May be NULL. */
    bool (*refuse_peer)(uint64_t from, char *reason, size_t cap, void *arg);

    /* members_query fills |out| with this member's view of the cluster's
     * members, for a member about to join that asks for it
     * (transport_fetch_members); opaque bytes to the transport (the server
     * packs a MemberListResponse). Nonzero, or NULL: the query is refused.
     * May be NULL. */
    int (*members_query)(struct buf *out, void *arg);
};

struct transport_options {
    uint64_t id;         /* this member, non-zero */
    uint64_t cluster_id; /* 0: learn it from the first peer that connects
                            addressed to |id| (see on_cluster_id); nothing
                            can be sent until then */
    /* Where incoming snapshot data is written (temp files named
     * "snap-<from>-<index>-XXXXXX.tmp"); copied. NULL: the working
     * directory. */
    const char *snap_dir;
    /* Per-peer queue bound: a message that would make the queue exceed
     * either limit is dropped and counted (an empty queue always takes one
     * message). 0: 4096 messages, 64 MiB. */
    size_t max_queue_msgs;
    size_t max_queue_bytes;
    /* Reconnect backoff, 0: 100 ms and 5000 ms. */
    unsigned backoff_min_ms;
    unsigned backoff_max_ms;
    /* An accepted connection that has not sent its whole handshake after
     * this long is closed. 0: 10000 ms. */
    unsigned handshake_timeout_ms;
    /* Snapshot chunk size, 0: 1 MiB. */
    size_t snap_chunk;
    /* Round-trip probes of each peer, 0: every 4000 ms (etcd's prober). */
    unsigned ping_interval_ms;
    /* TLS (tls/; shared, not owned, must outlive the transport): the
     * listener's server context (NULL: the listener is plain TCP), and
     * the client context for peers marked with transport_peer_set_tls
     * (their certificate is checked against the peer's address). Every
     * connection, messages and snapshots, then runs the TLS handshake
     * before the transport's own; a failed one is logged ("peer TLS
     * handshake with ADDR failed: ...") and closed. */
    struct tls_ctx *tls_server;
    struct tls_ctx *tls_client;
    /* local_addr: a numeric IPv4 or IPv6 address every outgoing peer
     * connection (messages and snapshots) is bound to, port 0, before it
     * connects, so peers see it come from this member's own address (etcd
     * 3.6's SetMemberLocalAddr; --experimental-set-member-localaddr). A
     * peer of the other address family is dialled unbound. NULL or "":
     * the system picks the source address. Parsed (and copied) by
     * transport_new: a bad one is -EINVAL there. */
    const char *local_addr;
    struct transport_callbacks cb;
    void *arg;
};

/* transport_new creates a transport on |loop| with a copy of |opts|. It
 * opens no socket until transport_listen or the first send. Errors:
 * -EINVAL (id 0, on_message NULL), -ENOMEM, libuv errors. */
int transport_new(uv_loop_t *loop, const struct transport_options *opts, struct transport **out);

/* transport_close stops everything: the listener, all connections, timers
 * and transfers (partly received snapshot files are unlinked). |cb| (may be
 * NULL) runs from the loop once all handles are closed, after |t| was
 * freed; |t| must not be used after this call. */
void transport_close(struct transport *t, void (*cb)(void *arg), void *arg);

/* transport_listen accepts peers on |host|:|port| (port 0: the system picks;
 * |bound_port|, may be NULL, receives the port). Call at most once. Errors:
 * -EINVAL (bad address, already listening), libuv errors (UV_EADDRINUSE). */
int transport_listen(struct transport *t, const char *host, int port, int *bound_port);

/* transport_listen_fd is transport_listen on a socket the caller bound and
 * put in listening state (so a busy port is found before anything else is
 * done); the transport owns |fd| from then on, also on error. */
int transport_listen_fd(struct transport *t, int fd);

/* transport_fetch_members asks the member listening at |host|:|port| for
 * its member list (a connection of kind 2, see WIRE FORMAT), with TLS when
 * |tls| (a client context) is not NULL; |host| may be a name (resolved
 * with uv_getaddrinfo). |cb| runs once on |loop|: status 0 with the
 * cluster id and the list's bytes (valid during the call), or a negative
 * code and a reason in Go's words where there are some ("dial tcp
 * 127.0.0.1:2380: connect: connection refused"). No answer within
 * |timeout_ms| (0: 10 s, etcd's) fails with UV_ETIMEDOUT. Needs no
 * transport: a member that is not started yet asks. */
typedef void (*transport_members_cb)(int status, uint64_t cluster_id, const uint8_t *list,
                                     size_t len, const char *err, void *arg);
int transport_fetch_members(uv_loop_t *loop, const char *host, int port, struct tls_ctx *tls,
                            unsigned timeout_ms, transport_members_cb cb, void *arg);

/* transport_add_peer makes member |id| reachable at |host|:|port| (copied):
 * a numeric address, or a name resolved (uv_getaddrinfo, libuv's thread
 * pool) before every dial, as Go's dialer does, so a member whose address
 * behind its name changed is found again; a name that does not resolve is
 * logged and retried with the backoff. No connection is made until
 * something is sent. Errors: -EINVAL (id 0 or self, bad address),
 * -EEXIST, -ENOMEM. */
int transport_add_peer(struct transport *t, uint64_t id, const char *host, int port);

/* transport_update_peer changes the address of |id|. A connection that is
 * up stays up (the member may still listen at the old address until it
 * restarts, as with etcd's peer streams); a connection being made is
 * dropped and the next dial uses the new address. Queued messages are kept.
 * Errors: -EINVAL, -ENOENT. */
int transport_update_peer(struct transport *t, uint64_t id, const char *host, int port);

/* transport_peer_set_tls makes the links to |id| use TLS (its peer URL
 * is https://) or not. A link being made is dropped; one that is up stays
 * until it fails. Errors: -ENOENT. */
int transport_peer_set_tls(struct transport *t, uint64_t id, bool tls);

/* transport_remove_peer forgets |id|: its connection, queue and snapshot
 * transfer are dropped (no on_snapshot_sent), and the connections it
 * opened to us are closed. Errors: -ENOENT. */
int transport_remove_peer(struct transport *t, uint64_t id);

/* transport_send encodes |m| at once (so the caller may release the Ready
 * on return) and queues it for m->to. Never blocks. Returns 0 when the
 * message was queued or dropped because the queue is full (counted in
 * transport_peer_stats: Raft tolerates loss). A SNAP message is handed to
 * transport_send_snapshot with its in-memory data (copied); an -EBUSY from
 * there counts as a drop. Errors: -ENOENT (m->to unknown), -EINVAL (bad
 * message), -ENOMEM, -ESHUTDOWN. */
int transport_send(struct transport *t, const struct raft_msg *m);

/* A source of snapshot data for transport_send_snapshot. read_fn is called
 * on the loop thread with successive offsets and must fill |len| bytes (the
 * last call may ask for fewer than the chunk size, never past |size|);
 * returns 0 or a negative code (the transfer then fails). release_fn (may be
 * NULL) runs once when the transfer ends, successful or not, also at close. */
struct transport_snap_reader {
    uint64_t size;
    int (*read_fn)(void *rarg, uint64_t off, void *dst, size_t len);
    void (*release_fn)(void *rarg);
    void *rarg;
};

/* transport_send_snapshot sends the SNAP message |m| (metadata copied now)
 * to m->to on a connection of its own. The data comes from, in order of
 * preference: |reader| (if not NULL), the file |path| (if not NULL; read
 * asynchronously in chunks, must not change during the transfer), or
 * m->snapshot->data (copied). The next chunk is read only when the
 * previous write completed. The end is reported by on_snapshot_sent.
 * Errors: -ENOENT (unknown peer), -EBUSY (a transfer to that peer is
 * running), -EAGAIN (the peer's host name has not been resolved yet: its
 * message link resolves it), -EINVAL (not a SNAP message), -ENOMEM,
 * -ESHUTDOWN, and errors
 * opening |path| (then release_fn is not called). */
int transport_send_snapshot(struct transport *t, const struct raft_msg *m, const char *path,
                            const struct transport_snap_reader *reader);

struct transport_peer_stats {
    uint64_t sent;         /* messages handed to a completed write */
    uint64_t dropped;      /* messages dropped: queue full, write failed,
                              rejected, or a busy snapshot link */
    uint64_t queued;       /* messages waiting */
    uint64_t queued_bytes; /* their encoded size */
    uint64_t writes;       /* writes of messages (each carries every
                              message queued when it started) */
    uint64_t dials;        /* connection attempts (message link) */
    uint64_t connects;     /* handshakes that succeeded */
    uint64_t rejections;   /* handshakes the peer refused */
    bool connected;        /* a message connection is up */
};

/* transport_peer_stats copies the counters of peer |id|. Errors: -ENOENT. */
int transport_peer_stats(const struct transport *t, uint64_t id, struct transport_peer_stats *out);

#endif
