/* server/server_int.h: what the files of server/ share; nothing outside
 * server/ includes it. */
#ifndef QUORUM_SERVER_SERVER_INT_H
#define QUORUM_SERVER_SERVER_INT_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>

#include "apply/apply.h"
#include "auth/auth.h"
#include "backend/backend.h"
#include "base/arena.h"
#include "base/buf.h"
#include "base/coro.h"
#include "grpc/grpc.h"
#include "mvcc/mvcc.h"
#include "rpc.pb-c.h"
#include "raft/raft.h"
#include "server/alarm.h"
#include "server/call.h"
#include "server/server.h"
#include "watch/watch.h"

enum entry_kind {
    ENTRY_PUT,
    ENTRY_DELETE_RANGE,
    ENTRY_TXN,
    ENTRY_COMPACT,
    ENTRY_LEASE_GRANT,
    ENTRY_LEASE_REVOKE,
    ENTRY_LEASE_CHECKPOINT,
    ENTRY_ALARM,  /* Etcdserverpb__AlarmRequest (alarm.c) */
    ENTRY_MEMBER, /* Etcdserverpb__Member: a member's attributes (members.c) */
    /* the Auth service (auth_service.c), each its request message, except
     * ENTRY_AUTHENTICATE: Etcdserverpb__InternalAuthenticateRequest */
    ENTRY_AUTH_ENABLE,
    ENTRY_AUTH_DISABLE,
    ENTRY_AUTHENTICATE,
    ENTRY_AUTH_USER_ADD,
    ENTRY_AUTH_USER_GET,
    ENTRY_AUTH_USER_LIST,
    ENTRY_AUTH_USER_DELETE,
    ENTRY_AUTH_USER_CHANGE_PASSWORD,
    ENTRY_AUTH_USER_GRANT_ROLE,
    ENTRY_AUTH_USER_REVOKE_ROLE,
    ENTRY_AUTH_ROLE_ADD,
    ENTRY_AUTH_ROLE_GET,
    ENTRY_AUTH_ROLE_LIST,
    ENTRY_AUTH_ROLE_DELETE,
    ENTRY_AUTH_ROLE_GRANT_PERMISSION,
    ENTRY_AUTH_ROLE_REVOKE_PERMISSION,
    /* the ZooKeeper face (zk_tree.c): quorumzk.Write. Its number is
     * explicit so that kinds other work appends keep theirs. */
    ENTRY_ZK_WRITE = 48,
    ENTRY__COUNT,
    /* not log entries: linearizable reads waiting for their read index */
    ENTRY_READ_RANGE = 64,
    ENTRY_READ_TXN,
};

/* --auto-compaction-mode/-retention state, as etcd 3.4's compactor
 * package: periodic samples the revision every period/10 (at most 6 min)
 * and compacts to the one sampled a period ago; revision compacts to
 * rev - retention every 5 minutes (--auto-compaction-check-interval, a
 * quorum-only flag, shortens that for tests). */
struct autocompact {
    uv_timer_t timer; /* always initialized; started when enabled */
    bool enabled, periodic, in_flight;
    uint64_t period_ms, interval_ms, base_ms, last_success_ms;
    int64_t retention; /* revision mode: revisions kept */
    int64_t prev;      /* revision mode: last compacted-to revision */
    int64_t *revs;     /* periodic: samples, oldest first */
    size_t n_revs, cap_revs;
};

/* The leader's periodic corruption check (corrupt.c). */
struct corrupt_check {
    uv_timer_t timer; /* always initialized; started when the period is set
                         (first, with --experimental-initial-corrupt-check,
                         as the initial check's deadline) */
    uint64_t round;
    int64_t rev, compact;
    uint32_t hash;
    /* --experimental-initial-corrupt-check: clients wait until it is over */
    bool initial;
    size_t initial_left;  /* peers that have not answered */
    unsigned mismatches;  /* peers with another hash at the same compaction */
};

struct server;
struct raft_msg;
/* server_corrupt_start initializes (and, with a period, starts) the check;
 * server_corrupt_close closes its timer with |cb|. The other two handle the
 * peer messages TRANSPORT_MSG_HASH and _HASH_RESP. */
void server_corrupt_start(struct server *s);
void server_corrupt_close(struct server *s, uv_close_cb cb);
void server_corrupt_on_request(struct server *s, const struct raft_msg *m);
void server_corrupt_on_response(struct server *s, const struct raft_msg *m);

/* server_autocompact_start initializes the timer (always, so stop can
 * close it) and starts it when --auto-compaction-retention is not 0. */
void server_autocompact_start(struct server *s);
/* server_autocompact_close closes the timer handle with |cb| and frees the
 * samples. */
void server_autocompact_close(struct server *s, uv_close_cb cb);

/* Completion of a write the server made itself: |err| 0 with the packed
 * response (|resp|, |len|, valid during the call), or the request's error.
 * Runs once the batch holding the write is durable. */
typedef void (*server_done_fn)(struct server *s, int err, const uint8_t *resp, size_t len,
                               void *arg);

/* One request in flight (node.c). A write: queued for the next loop pass
 * (|data| holds its log entry), then proposed and waiting for that entry to
 * be applied, which answers it (matched by |seq|: every entry carries its
 * proposer and sequence number). A linearizable read: waiting for a read
 * index (|ctx|, |index|), then answered from the store. Either fails with
 * "request timed out" at |deadline|. */
struct entry {
    struct entry *next, *prev;
    server_done_fn done; /* for the server's own writes, or NULL */
    void *done_arg;
    qcall *call; /* NULL once the client went away, or for the server's own */
    enum entry_kind kind;
    bool internal;         /* the server's own write (no client) */
    ProtobufCMessage *req; /* the unpacked request (reads; writes while applied) */
    /* while applied: who proposed it (auth_service.c), from the entry's
     * header; NULL and 0 when nobody (or auth was off then) */
    const char *auth_user;
    uint64_t auth_rev;
    struct buf data;       /* writes: the encoded log entry */
    uint64_t seq;          /* writes: this member's proposal number */
    uint64_t ctx, index;   /* reads: read round (0: not asked yet), read index;
                              writes while applied: the entry's log index */
    bool ready;            /* reads: |index| is known */
    uint64_t deadline;     /* loop time (ms) when it times out */
    int err;               /* after apply: 0 or the error to answer */
    bool physical;         /* a Compact answered once its removal finished */
    struct buf out;        /* after apply: the packed response */
};

/* A list of entries, oldest first. */
struct entry_list {
    struct entry *head, *tail;
};

/* A member's attributes as the members database holds them (members.c). */
struct member_info {
    uint64_t id;
    char name[128];
    char peer[CONFIG_MAX_URLS][300];
    size_t n_peer;
    char client[CONFIG_MAX_URLS][300];
    size_t n_client;
};

/* A transport peer the server has added (node.c keeps them in step with
 * the membership). */
struct peer_addr {
    uint64_t id;
    char url[300];
    uint64_t last_heartbeat_ms; /* when the leader last sent it one */
    /* since when (loop ms) our message link to it has been up without a
     * break, 0 while it is down (etcd's transport.ActiveSince; node.c
     * samples it every sweep) */
    uint64_t active_since_ms;
};

/* The member's TLS contexts (tls_setup.c): NULL where a link has no TLS.
 * client: the client port's https:// listeners; zk: the https:// URLs of
 * --listen-zk-urls (the client certificate flags, without ALPN);
 * peer_server: the peer listener; peer_client: dialing https:// peers. */
struct server_tls {
    struct tls_ctx *client;
    struct tls_ctx *zk;
    struct tls_ctx *peer_server;
    struct tls_ctx *peer_client;
};

/* server_tls_open builds the contexts |c| asks for (making auto-TLS
 * certificates under <data-dir>/fixtures/{client,peer}) and makes SIGHUP
 * reload them; errors are logged. server_tls_close frees them. */
int server_tls_open(const struct config *c, struct server_tls *st);
void server_tls_close(struct server_tls *st);

struct server {
    uv_loop_t *loop;
    struct config cfg;
    backend *be;
    mvcc_store *kv;
    grpc_server *grpc;      /* the core loop's own, without front loops */
    grpc_server *metrics_grpc; /* --listen-metrics-urls (metrics.c) */
    struct fronts *fronts; /* the front loops (front.h), or NULL */
    struct zsvc *zk;       /* the ZooKeeper face (zk_service.c), or NULL */
    /* /zookeeper is in the store (zk_tree.c ensure_system_nodes): seen
     * once, it stays (nothing deletes it); forgotten when the store is
     * replaced (server_zk_store_replaced) */
    bool zk_sys_nodes;
    /* a ZooKeeper write is writing its changes: the observer leaves the
     * watches to the write's own list (zk_tree.h, struct zk_change_rec) */
    bool zk_own_changes;
    /* sessions' owners as their records were at a revision (zk_tree.c
     * session_moved): a write checks the record's revision in the key
     * index and reads the record itself only when it moved */
    struct zk_owner_memo {
        int64_t session, main;
        uint32_t sub;
        uint64_t owner;
    } zk_owners[16];
    /* the ZooKeeper apply's answer body and record encoding, kept from one
     * write to the next (no allocation per write) */
    struct buf zk_body, zk_rec;
    struct server_tls tls;
    /* for the front loops, stored by the core each pass (__atomic) */
    uint64_t pub_term, pub_cluster_id;
    struct apply_env env;
    lessor *leases;
    auth_store *auth;             /* users, roles, tokens (auth/) */
    struct auth_job *auth_jobs;   /* password work on workers (auth_service.c) */
    watch_hub *watches;
    struct wstream *wstreams; /* open Watch streams */
    size_t n_wstreams;
    uv_timer_t watch_sync; /* catch-up rounds while watchers are behind */
    uv_timer_t watch_progress;
    uv_timer_t lease_tick; /* expiry and checkpoints (primary only) */
    int64_t last_checkpoint_ms;
    uint64_t id_prefix, id_suffix; /* etcd's request id generator */
    uv_check_t apply_hook;
    uv_signal_t sigs[2];
    uint64_t db_size;       /* the database file's size, read again after a commit */
    uint64_t db_size_changes; /* backend_changes when db_size was read */
    uint64_t applied_index; /* consistent index: entries applied */
    uint64_t member_id;
    uint64_t cluster_id;
    /* bound at start, before anything is created (bootstrap.c); -1 once
     * taken over (the transport, the front loops) or closed */
    int peer_fd;
    int client_fds[CONFIG_MAX_URLS];
    size_t n_client_fds;
    /* the core loop's client listeners (no front loops), polled once the
     * member serves */
    uv_poll_t client_polls[CONFIG_MAX_URLS];
    size_t n_client_polls;
    /* clients are served once the member has joined its cluster: a leader
     * is known and its name and client URLs are in the log (etcd serves
     * after its ReadyNotify); then "ready to serve client requests" */
    bool serving;
    enum { SERVER_BOOT_RESTART, SERVER_BOOT_NEW, SERVER_BOOT_JOIN } boot;
    bool have_initial_ids; /* initial_ids from server_bootstrap */

    /* ---- Raft (node.c) ---- */
    struct raft *raft;
    struct wal *wal;
    struct transport *tp;
    uv_timer_t tick;           /* raft_tick every --heartbeat-interval */
    uv_timer_t sweep;          /* timeouts of waiting requests */
    uv_timer_t purge;          /* old .snap and .wal files (node.c) */
    struct entry_list queued;  /* writes of this pass, not proposed yet */
    struct entry_list waiting; /* proposed writes, waiting to be applied */
    struct entry_list reads;   /* linearizable reads */
    uint64_t next_seq;         /* proposal numbers */
    uint64_t next_read_ctx;
    uint64_t request_timeout_ms;
    uint64_t last_leader; /* to notice leader changes */
    bool was_leader;
    uint64_t snap_index; /* index of the newest Raft snapshot on disk */
    bool published;      /* our name and client URLs are in the log */
    bool publishing;
    bool removed; /* applied our own removal: stopping */
    struct peer_addr peers[CONFIG_MAX_MEMBERS];
    size_t n_peers;
    bool peers_dirty;                         /* a member's URLs changed in this batch */
    uint64_t initial_ids[CONFIG_MAX_MEMBERS]; /* --initial-cluster's ids */
    /* a received snapshot's database file, until the core hands it back */
    char recv_path[1100];
    uint64_t recv_index, recv_term;
    /* the received database's key index, built on a worker before the
     * core is told of the snapshot (node.c: on_snapshot) */
    mvcc_prepared *recv_prepared;
    bool recv_preparing;
    /* snapshot database copies being sent, by peer */
    struct {
        uint64_t to;
        char path[1100];
    } snap_out[CONFIG_MAX_MEMBERS];
    /* a Ready whose state a worker thread is making durable (node.c);
     * meanwhile the core is not touched: inputs wait in deferred* */
    bool persisting;
    struct raft_ready rd;
    bool rd_sent; /* its messages went out already (leader) */
    uv_work_t work;
    struct persister *persister; /* the thread that writes it (node.c) */
    int work_rv;
    unsigned client_conns; /* __atomic: open client connections, every loop's */
    bool work_sync_failed; /* work_rv came from the fdatasync, not the write */
    bool work_space;       /* work_rv: the write was refused for space; the WAL
                              is intact and the same save can be tried again */
    uint64_t synced_term, synced_vote;
    struct buf deferred; /* encoded messages: u32 length, bytes */
    unsigned deferred_ticks;
    uint64_t deferred_transfer;
    /* the disk refused the log's write for space (node.c, docs/faults.md):
     * the Ready is held and written again every DISK_RETRY_MS from the
     * tick; meanwhile writes are refused (QERR_NO_SPACE) */
    bool disk_full;
    bool persist_waiting; /* persisting, but no write queued: held */
    uint64_t disk_retry_ms, disk_full_since_ms;
    uint64_t snap_retry_ms; /* a snapshot refused for space: not before */
    /* the database's space reserve could not be kept (node.c db_reserve):
     * writes are refused until it can, tried again from the tick */
    bool db_full;
    uint64_t db_retry_ms, db_full_since_ms;
    struct node_close *node_closing;
    unsigned snap_jobs;             /* database copies for peers in flight */
    struct entry_list applied_done; /* applied writes, answered after advance */
    uint64_t batch_opened_ms;     /* the open LMDB batch (node.c) */
    uint64_t batch_entries;
    /* a compaction removing revisions in steps, one per loop iteration
     * while it lasts (node.c); physical Compacts wait in compact_waits */
    uv_idle_t compact_idle;
    uv_timer_t compact_timer;
    uint64_t compact_t0_ns; /* when the removal under way began (metrics) */
    /* the entry being applied, for its steps (mvcc_set_step) and its
     * errors: index, request type, steps committed (node.c) */
    uint64_t applying_index;
    const char *applying_kind;
    uint64_t applying_steps;
    uint64_t applying_pauses; /* loop passes it went back to the loop */
    /* applying across loop passes (node.c): the entries Raft handed out
     * (raft_advance_applied) are applied on |apply_coro|; a step of a big
     * revision pauses it and |apply_idle| continues it in the next pass */
    struct coro *apply_coro;
    uv_idle_t apply_idle;                               /* .data NULL until first used */
    bool apply_paused;                                  /* suspended between two steps */
    bool apply_no_pause;                                /* closing: what is left runs at once */
    uint64_t handed_index;                              /* last committed entry Raft handed out */
    struct arena apply_arena;                           /* while paused: the apply's s->arena */
    struct apply_wait *apply_waits, **apply_waits_tail; /* run once it is applied */
    struct entry_list compact_waits;
    struct lease_fwd *lease_fwds;   /* lease requests forwarded to the leader */
    uint64_t next_lease_ctx;
    struct conf_wait *conf_waits;   /* membership changes waiting to apply */
    struct alarm_store alarms;      /* raised alarms (alarm.c) */
    struct autocompact autocompact; /* --auto-compaction-* (autocompact.c) */
    struct corrupt_check corrupt;   /* --experimental-corrupt-check-time */
    struct defrag *defrag;          /* a Defragment in progress (maintenance_service.c) */
    struct rangereads *rangereads;  /* reader threads for big reads (rangeread.c) */
    struct arena arena;             /* per request (reads) or per entry (writes) */
    struct buf scratch;             /* packing buffer for replies */
    void (*stop_cb)(void *);
    void *stop_arg;
    int closing;
};

/* ---- metrics.c: etcd's metrics of the member (base/metrics.h) ---- */

#include "base/metrics.h"
#define SERVER_ETCD_VERSION "3.4.0"       /* as Maintenance/Status reports it */
#define SERVER_ETCD_CLUSTER_VERSION "3.4" /* etcd_cluster_version's label */

struct server_metrics {
    metric_t leader_changes, proposals_failed, slow_apply, heartbeat_failures;
    metric_t proposals_pending, snapshot_applying, defrag_inflight; /* gauges (added to) */
    metric_t events, compaction_keys, lease_expired;
    metric_t zk_front_reads; /* ZooKeeper reads a front loop answered (front.c) */
    struct metrics_series *snapshot_seconds, *defrag_seconds, *hash_seconds, *hash_rev_seconds;
    struct metrics_series *compaction_pause, *compaction_total; /* milliseconds */
};
extern struct server_metrics server_metrics;
/* server_metrics_register registers every metric of the member (and of the
 * modules below it) at start, on the core thread; _publish stores the
 * state the gauges read (once per loop pass); _db_changed makes the next
 * pass read the database's sizes again (after a defragmentation, a
 * snapshot install, a compaction). */
void server_metrics_register(struct server *s);
void server_metrics_publish(struct server *s);
void server_metrics_db_changed(void);
/* server_metrics_listen serves --listen-metrics-urls (|client|: the client
 * port's options); errors are logged. server_metrics_close closes that
 * server, then calls |cb| (at once when there is none). */
int server_metrics_listen(struct server *s, const struct grpc_server_options *client);
void server_metrics_close(struct server *s, void (*cb)(void *), void *arg);

/* The service method tables (kv_service.c, maintenance_service.c,
 * cluster_service.c). */
extern const struct qcall_method server_kv_methods[];
extern const size_t server_kv_methods_n;
extern const struct qcall_method server_maintenance_methods[];
extern const size_t server_maintenance_methods_n;
extern const struct qcall_method server_cluster_methods[];
extern const size_t server_cluster_methods_n;
extern const struct qcall_method server_lease_methods[];
extern const size_t server_lease_methods_n;
extern const struct qcall_method server_watch_methods[];
extern const size_t server_watch_methods_n;
extern const struct qcall_method server_lock_methods[];
extern const size_t server_lock_methods_n;
extern const struct qcall_method server_election_methods[];
extern const size_t server_election_methods_n;
extern const struct qcall_method server_auth_methods[];
extern const size_t server_auth_methods_n;
extern const struct qcall_method server_health_methods[]; /* health_service.c */
extern const size_t server_health_methods_n;

/* ---- auth_service.c: who a call runs as, and the permission checks ---- */

/* server_auth_identity resolves a call's credentials (|token| the "token"
 * metadata or NULL, |cn| a verified client certificate's common name or
 * NULL) into |ai| (the name copied to |buf|): nobody when auth is off or
 * no credential came. Any thread. Errors: QERR_INVALID_TOKEN. */
int server_auth_identity(struct server *s, const char *token, size_t tlen, const char *cn,
                         struct auth_info *ai, char *buf, size_t cap);
int server_call_identity(struct server *s, qcall *call, struct auth_info *ai, char *buf,
                         size_t cap);
/* server_auth_admin: 0 when auth is off or the call runs as a root user,
 * else the error to answer (etcd's IsAdminPermitted). Core loop. */
int server_auth_admin(qcall *call);
/* server_require_admin answers the call with server_auth_admin's refusal
 * and returns false, or returns true. */
bool server_require_admin(qcall *call);
/* server_require_admin_raw refuses as etcd's maintenance services do
 * (Defragment, Snapshot, Hash, HashKV): UNKNOWN with the "auth: ..." text. */
bool server_require_admin_raw(qcall *call);
/* server_auth_lease_keys: a LeaseTimeToLive asking for keys needs read
 * permission on each key of the lease (etcd 3.4.26/3.5.9), unless admin. */
int server_auth_lease_keys(qcall *call, int64_t id);
/* server_auth_check_read checks a Range (|range|) or a read-only Txn as
 * etcd checks reads (any thread); _call_read resolves the call first. */
int server_auth_check_read(struct server *s, const struct auth_info *ai, bool range,
                           const ProtobufCMessage *req);
int server_auth_check_call_read(struct server *s, qcall *call, bool range,
                                const ProtobufCMessage *req);
/* server_auth_check_entry checks an entry being applied against the auth
 * state at that point of the log (writes, Auth requests): 0 or the error
 * to answer. */
int server_auth_check_entry(struct server *s, const struct entry *e);
/* server_auth_apply applies an ENTRY_AUTH* entry: the response (from the
 * arena) and its header. */
int server_auth_apply(struct server *s, struct entry *e, ProtobufCMessage **resp,
                      Etcdserverpb__ResponseHeader **h);
/* server_auth_detach lets password work still on workers finish without
 * the server (it is stopping). */
void server_auth_detach(struct server *s);
/* server_entry_call_closed is the default on_close: the call's waiting
 * entry (if any) forgets it. */
void server_entry_call_closed(qcall *call);

/* server_snapshot_copies_wait blocks until no Snapshot copy runs on a
 * worker thread (maintenance_service.c): before the store closes. */
void server_snapshot_copies_wait(void);
/* server_copy_begin/_end bracket a copy of the store on a worker thread
 * (counted for server_snapshot_copies_wait). */
void server_copy_begin(void);
void server_copy_end(void);
/* server_defrag_detach lets a Defragment in progress end without the
 * server (it is closing): its worker's step finishes and cleans up. */
void server_defrag_detach(struct server *s);
/* server_close_retired closes the database file a swap replaced on a
 * worker thread (freeing a large file's blocks takes a while). */
void server_close_retired(struct server *s);

/* server_watch_kick schedules catch-up for watchers that are behind. */
void server_watch_kick(struct server *s);
/* server_watch_progress sends a progress notification to every synced
 * watcher that asked for them (watch_service.c). */
void server_watch_progress(struct server *s);

/* server_next_id is etcd's idutil generator: the member id's low 16 bits,
 * then 40 bits of the start time in ms and an 8-bit counter that carries
 * into it; ids from one member never repeat. */
uint64_t server_next_id(struct server *s);

/* server_propose_internal queues a write the server itself makes (a lease
 * revoke on expiry, a checkpoint): |msg| is copied. */
/* A log entry's data (node.c writes it, every member applies it; the
 * conversion of an etcd log, etcd_import.c, writes it too): u8 kind (enum
 * entry_kind), u8 flags, u64 proposing member id, u64 its proposal number
 * (little-endian; both 0 for an entry nobody waits for), then with
 * ENTRY_FLAG_AUTH who proposed it: u64 auth revision, u16 the user name's
 * length, the name and a NUL; then the request, packed. */
#define ENTRY_HDR 18
#define ENTRY_FLAG_INTERNAL 1u /* the server's own write */
#define ENTRY_FLAG_AUTH 2u     /* a user's: checked when applied */
#define ENTRY_AUTH_FIXED 10
/* server_entry_encode writes that into |out| (emptied first): the auth flag
 * and part when |user| is not NULL. |*hdr_len| (may be NULL): where the
 * request starts. 0, -ENOMEM, -EINVAL (a name longer than 65535). */
int server_entry_encode(struct buf *out, enum entry_kind kind, bool internal, uint64_t proposer,
                        uint64_t seq, const char *user, uint64_t auth_rev,
                        const ProtobufCMessage *msg, size_t *hdr_len);

void server_propose_internal(struct server *s, enum entry_kind kind, const ProtobufCMessage *msg);
/* server_propose_cb is server_propose_internal with a completion. */
void server_propose_cb(struct server *s, enum entry_kind kind, const ProtobufCMessage *msg,
                       server_done_fn done, void *arg);

/* server_kv_serve_local answers, on a front loop's thread, a request of
 * method |m| that needs nothing of the core: a serializable Range, or a
 * Txn of serializable Ranges only, when the store can be read from there
 * now (mvcc_read_begin_shared). Returns 1 with the packed response in
 * |out|, a negative error to answer (enum q_err), or 0: the core must
 * answer it (forward the request unchanged). |a| is the thread's arena. */
/* A client's credentials as a face holds them (see qcall). */
struct qcreds {
    const char *token;
    size_t token_len;
    const char *cn;
};
int server_kv_serve_local(struct server *s, const struct qcall_method *m, const uint8_t *msg,
                          size_t len, const struct qcreds *cr, struct arena *a, struct buf *out);

/* server_kv_serve_read_local answers, on a front loop's thread, a
 * linearizable read (|kind| ENTRY_READ_RANGE or _TXN, its request packed
 * in |msg|) whose read index the core has reached at revision |min_rev|:
 * from a shared read at |min_rev| or later. Returns as
 * server_kv_serve_local (0: the core must serve it). */
int server_kv_serve_read_local(struct server *s, enum entry_kind kind, const uint8_t *msg,
                               size_t len, int64_t min_rev, const struct qcreds *cr,
                               struct arena *a, struct buf *out);

/* server_of returns the server behind a call. */
struct server *server_of(qcall *call);

/* server_grpc_methods makes a gRPC method table mirroring server_methods
 * (same order), every entry with the given callbacks (call.c). */
struct grpc_method *server_grpc_methods(void (*on_message)(grpc_call *, const uint8_t *, size_t),
                                        void (*on_half_close)(grpc_call *),
                                        void (*on_close)(grpc_call *));
/* server_grpc_core_new serves the methods on the core loop itself. */
int server_grpc_core_new(struct server *s, const struct grpc_server_options *go,
                         grpc_server **out);

/* server_fill_header sets cluster_id, member_id and raft_term of a
 * top-level header, and the revision when it is 0 (as etcd's header.fill). */
void server_fill_header(struct server *s, Etcdserverpb__ResponseHeader *h);

/* server_pack packs |msg| into |b| (reset first). Errors: -ENOMEM. */
int server_pack(struct buf *b, const ProtobufCMessage *msg);

/* server_send packs |msg| and sends it as one response message (streams);
 * server_reply does that and finishes the call OK; server_reply_error
 * finishes it with |code|'s status and text. */
int server_send(struct server *s, qcall *call, const ProtobufCMessage *msg);
void server_reply(struct server *s, qcall *call, const ProtobufCMessage *msg);
void server_reply_error(qcall *call, int code);

/* server_kv_to_pb points |o| at |kv|'s fields (no copy: valid as long as
 * |kv|'s pointers are). */
void server_kv_to_pb(Mvccpb__KeyValue *o, const struct mvcc_kv *kv);

/* server_unpack decodes a request; on failure it answers INVALID_ARGUMENT
 * and returns NULL. Free with protobuf_c_message_free_unpacked. */
ProtobufCMessage *server_unpack(qcall *call, const ProtobufCMessageDescriptor *d,
                                const uint8_t *msg, size_t len);

/* ---- node.c: the Raft member ---- */

/* server_node_start creates or restarts the Raft core, the WAL and the
 * peer transport (after the store is open); server_node_stop closes them
 * (|cb| when the transport is closed). */
int server_node_start(struct server *s);
void server_node_close(struct server *s, void (*cb)(void *), void *arg);
/* server_node_fail_all answers every request still waiting with |err|. */
void server_node_fail_all(struct server *s, int err);
/* server_node_pass is the per-loop-pass work: propose queued writes, ask
 * for read indexes, and run Raft Ready rounds (apply, answer). */
void server_node_pass(struct server *s);
bool server_is_leader(const struct server *s);
uint64_t server_leader(const struct server *s);
uint64_t server_term(const struct server *s);
/* server_read queues a linearizable read (taking |req|), answered once the
 * member has applied up to a read index. */
void server_read(struct server *s, qcall *call, enum entry_kind kind, ProtobufCMessage *req);
/* server_serve_read answers a read (range or read-only txn) from the store. */
void server_serve_read(struct server *s, qcall *call, enum entry_kind kind,
                       const ProtobufCMessage *req);
/* server_serve_read_whole is server_serve_read without the read budget:
 * the reply is built inline whatever its size. */
void server_serve_read_whole(struct server *s, qcall *call, enum entry_kind kind,
                             const ProtobufCMessage *req);

/* ---- rangeread.c: reads past the read budget, on reader threads ---- */

/* apply_env.read_budget of every read a loop serves: index entries
 * visited plus KiB fetched (about a millisecond per thousand) */
#define SERVER_READ_BUDGET 4096

/* server_read_elsewhere answers the read |req| (a RangeRequest or a
 * TxnRequest of Ranges, |kind| ENTRY_READ_*; copied, the caller keeps it),
 * whose auth was checked, on a reader thread; the reply comes back to
 * |call| on the core. Without readers it is read inline, whole. */
void server_read_elsewhere(struct server *s, qcall *call, enum entry_kind kind,
                           const ProtobufCMessage *req);
/* server_rangereads_start starts the reader threads (the store must be
 * shared: mvcc_share). Errors: -ENOMEM, libuv's. */
int server_rangereads_start(struct server *s);
/* server_rangereads_stop ends the reads under way and joins the readers;
 * reads not answered are dropped (the clients are gone). Core loop. */
void server_rangereads_stop(struct server *s);
/* server_apply_entry applies one decoded log entry inside the open batch
 * (server.c): |e| is the waiter (or a temporary). */
int server_apply_entry(struct server *s, struct entry *e);
/* server_storage_fatal stops the member on a failed disk write or sync of
 * the log or the store (node.c): logs "<what> failed: <error>; stopping"
 * with the reason and exits with status 1, as etcd's lg.Fatal does. It
 * never returns: the state in memory may be ahead of what the disk holds
 * (a failed fdatasync may have dropped dirty pages, and is never retried),
 * so nothing more is answered; the restart replays the WAL from what the
 * store committed (docs/faults.md). */
_Noreturn void server_storage_fatal(const char *module, const char *what, int rv);

/* server_flush commits the open batch of applied entries (node.c): before
 * anything reads the store from another thread, copies or replaces it. */
void server_flush(struct server *s);
/* server_apply_wait: while an entry is being applied across loop passes
 * (node.c, "applying across loop passes"), queues fn(arg) to run once it
 * is applied and returns true; otherwise returns false and the caller
 * goes on at once. For what must not interleave with the steps of a
 * revision: a Snapshot's copy, a defragmentation's start and swap. */
bool server_apply_wait(struct server *s, void (*fn)(void *), void *arg);
/* server_apply_finish finishes at once an apply under way across loop
 * passes and answers what it applied (the member stops). */
void server_apply_finish(struct server *s);
/* server_compact_kick runs the steps of a scheduled compaction (after
 * one is applied, the store is reopened or replaced); node.c. */
void server_compact_kick(struct server *s);
/* server_transfer_leader starts a leadership transfer (deferred while a
 * Ready is being persisted). Errors: as raft_transfer_leader. */
int server_transfer_leader(struct server *s, uint64_t to);
/* server_propose_conf proposes membership |next| (through the leader);
 * errors QERR_NO_LEADER, -EBUSY, -EINVAL. */
int server_propose_conf(struct server *s, const struct raft_membership *next);
/* server_lease_renew_local renews lease |id| on the leader (proposing a
 * checkpoint reset when needed): 0 with the TTL, or QERR_LEASE_NOT_FOUND. */
int server_lease_renew_local(struct server *s, int64_t id, int64_t *ttl);
/* The leader's side of a forwarded lease request, the follower's side of
 * its answer, and the timeouts of forwarded requests (lease_service.c). */
struct raft_msg;
void server_lease_on_request(struct server *s, const struct raft_msg *m);
void server_lease_on_response(struct server *s, const struct raft_msg *m);
void server_lease_expire_fwds(struct server *s, uint64_t now);
/* server_leases_reload reopens the lessor from the backend and attaches
 * the keys (server.c): after a snapshot replaced the store. */
int server_leases_reload(struct server *s);

/* ---- members.c: the members database and the Cluster service ---- */

/* server_members_bootstrap writes the attributes of the initial members
 * (in the open batch). */
int server_members_bootstrap(struct server *s, const uint64_t *ids);
/* server_member_put writes one member's attributes (in the open batch). */
int server_member_put(struct server *s, const struct member_info *mi);
/* server_members_clear empties the members database (in the open batch). */
int server_members_clear(struct server *s);
/* server_members_ids lists the ids the members database has attributes
 * for (at most |max|); the count. */
int server_members_ids(struct server *s, uint64_t *ids, size_t max);
/* server_members_pack packs the member list (a MemberListResponse, the
 * cluster id in its header) for a member about to join (transport/). */
int server_members_pack(struct server *s, struct buf *out);

/* ---- bootstrap.c: before anything is created (see its top) ---- */

/* server_check_data_dir: the data dir can be listed and written, or
 * would be creatable; etcd's words in |err|. Creates nothing but the
 * conversion of an etcd data dir (etcd_import.c; its log in |wal_dir|
 * when that is not empty: --wal-dir). */
int server_check_data_dir(const char *dir, const char *wal_dir, char *err, size_t cap);
/* The store's meta record saying it has been started with its log (1,
 * written by server.c at a start once the log exists): a later start that
 * finds the store but no log refuses instead of building a new log over it
 * (a store restored by quorumctl has no such record: the backup format
 * leaves quorum's own meta records behind). */
#define SERVER_META_HAS_LOG "quorumHasLog"
/* server_pick_data_dir: without --data-dir the data dir is etcd's
 * default, ${name}.etcd (an operator who swaps etcd's binary keeps its
 * data); a ${name}.quorum made by an earlier quorum release (whose default
 * it was) is used instead when it exists and ${name}.etcd does not. Both
 * there: refused, with both names in |err|. */
int server_pick_data_dir(struct config *c, char *err, size_t cap);
/* server_wal_dir: the member's log directory, --wal-dir or
 * <data-dir>/member/wal. */
void server_wal_dir(const struct config *c, char *out, size_t cap);
/* server_listen_fd binds and listens on |u| (TCP or unix socket); Go's
 * words in |err| ("listen tcp 127.0.0.1:2379: bind: address already in
 * use"). */
int server_listen_fd(const struct url *u, int *out, char *err, size_t cap);
/* server_listen takes the peer port (the first --listen-peer-urls), then
 * every client URL: s->peer_fd, s->client_fds. */
int server_listen(struct server *s, char *err, size_t cap);
/* server_listeners_close closes what server_listen opened and nobody took
 * over (unix socket files removed). */
void server_listeners_close(struct server *s);
/* server_bootstrap makes a member that has no log: checks
 * --initial-cluster, matches a new member's advertised peer URLs, asks
 * the cluster for a joining member's id, then builds <data-dir>/member
 * aside and renames it into place. etcd's words in |err|. */
int server_bootstrap(struct server *s, char *err, size_t cap);
/* server_member_get reads member |id|'s attributes: 0 or -ENOENT. */
int server_member_get(struct server *s, uint64_t id, struct member_info *out);
/* server_member_removed: |id| was a member and was removed. */
bool server_member_removed(struct server *s, uint64_t id);
/* server_member_apply applies an ENTRY_MEMBER (in the open batch). */
int server_member_apply(struct server *s, const Etcdserverpb__Member *m);
/* server_members_conf_applied records removals after a configuration
 * entry (in the open batch) and answers membership requests waiting on it
 * (conf_waits). */
int server_members_conf_applied(struct server *s, const struct raft_membership *prev,
                                const struct raft_membership *next);
void server_members_check_waits(struct server *s);
void server_members_fail_waits(struct server *s, int err, bool expired_only);
/* server_peer_active_since: since when (loop ms) the link to peer |id|
 * has been up, 0 when it is down or |id| is no peer (node.c). */
uint64_t server_peer_active_since(const struct server *s, uint64_t id);
/* server_members_publish proposes our name and client URLs when the log
 * does not have them yet. */
void server_members_publish(struct server *s);
/* Maintenance/MoveLeader (members.c). */
void server_on_move_leader(qcall *call, const uint8_t *msg, size_t len);

/* server_propose queues a write entry (taking |req|) for the apply hook;
 * the call is answered after the batch that applies it is durable. */
void server_propose(struct server *s, qcall *call, enum entry_kind kind, ProtobufCMessage *req);
/* server_propose_copy is server_propose leaving |req| to the caller. */
void server_propose_copy(struct server *s, qcall *call, enum entry_kind kind,
                         const ProtobufCMessage *req);

/* ---- logs about applied requests (applylog.c) ---- */
/* server_log_apply writes etcd's "apply request took too long" line when
 * |took_ns| is over --experimental-warning-apply-duration and its "failed
 * to apply request" line when |e| failed; |id| is the request's ID. */
void server_log_apply(struct server *s, const struct entry *e, uint64_t id, uint64_t took_ns);
/* server_request_text appends |e|'s request as etcd's InternalRaftStringer
 * prints it: "header:<ID:7 > put:<key:\"foo\" value_size:3 >". */
void server_request_text(struct buf *o, const struct entry *e, uint64_t id);
/* server_etcd_err_text is the error text etcd's applier logs for |code|
 * ("auth: permission denied"; the client sees "etcdserver: ..."). */
const char *server_etcd_err_text(int code);

#endif
