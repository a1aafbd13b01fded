/* server/server_int.h: what the files of server/ share; nothing outside
 * server/ includes it. */
#ifndef QUORUM_SERVER_SERVER_INT_H
#define QUORUM_SERVER_SERVER_INT_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>

#include "apply/apply.h"
#include "backend/backend.h"
#include "base/arena.h"
#include "base/buf.h"
#include "grpc/grpc.h"
#include "mvcc/mvcc.h"
#include "rpc.pb-c.h"
#include "server/alarm.h"
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
    ENTRY_ALARM, /* Etcdserverpb__AlarmRequest (alarm.c) */
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

struct server;
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

/* One write waiting for the apply hook: the single-member "log entry". */
struct entry {
    struct entry *next;
    server_done_fn done; /* for the server's own writes, or NULL */
    void *done_arg;
    grpc_call *call; /* NULL once the client went away, or for the server's own */
    enum entry_kind kind;
    ProtobufCMessage *req; /* unpacked request, owned */
    int err;               /* after apply: 0 or the error to answer */
    struct buf out;        /* after apply: the packed response */
};

struct server {
    uv_loop_t *loop;
    struct config cfg;
    backend *be;
    mvcc_store *kv;
    grpc_server *grpc;
    struct apply_env env;
    lessor *leases;
    watch_hub *watches;
    struct wstream *wstreams; /* open Watch streams */
    size_t n_wstreams;
    uv_timer_t watch_sync;    /* catch-up rounds while watchers are behind */
    uv_timer_t watch_progress;
    uv_timer_t lease_tick;    /* expiry and checkpoints (primary only) */
    int64_t last_checkpoint_ms;
    uint64_t id_prefix, id_suffix; /* etcd's request id generator */
    uv_check_t apply_hook;
    uv_signal_t sigs[2];
    struct entry *head, *tail; /* queued writes, oldest first */
    uint64_t db_size; /* the database file's size, read once per batch */
    uint64_t applied_index;    /* consistent index: entries applied */
    uint64_t term;
    uint64_t member_id;
    uint64_t cluster_id;
    struct alarm_store alarms;     /* raised alarms (alarm.c) */
    struct autocompact autocompact; /* --auto-compaction-* (autocompact.c) */
    struct arena arena;  /* per request (reads) or per entry (writes) */
    struct buf scratch;  /* packing buffer for replies */
    void (*stop_cb)(void *);
    void *stop_arg;
    int closing;
};

/* The service method tables (kv_service.c, maintenance_service.c,
 * cluster_service.c). */
extern const struct grpc_method server_kv_methods[];
extern const size_t server_kv_methods_n;
extern const struct grpc_method server_maintenance_methods[];
extern const size_t server_maintenance_methods_n;
extern const struct grpc_method server_cluster_methods[];
extern const size_t server_cluster_methods_n;
extern const struct grpc_method server_lease_methods[];
extern const size_t server_lease_methods_n;
extern const struct grpc_method server_watch_methods[];
extern const size_t server_watch_methods_n;
extern const struct grpc_method server_lock_methods[];
extern const size_t server_lock_methods_n;
extern const struct grpc_method server_election_methods[];
extern const size_t server_election_methods_n;

/* server_snapshot_copies_wait blocks until no Snapshot copy runs on a
 * worker thread (maintenance_service.c): before the store closes. */
void server_snapshot_copies_wait(void);

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
void server_propose_internal(struct server *s, enum entry_kind kind, const ProtobufCMessage *msg);
/* server_propose_cb is server_propose_internal with a completion. */
void server_propose_cb(struct server *s, enum entry_kind kind, const ProtobufCMessage *msg,
                       server_done_fn done, void *arg);

/* server_of returns the server behind a call. */
struct server *server_of(grpc_call *call);

/* server_fill_header sets cluster_id, member_id and raft_term of a
 * top-level header, and the revision when it is 0 (as etcd's header.fill). */
void server_fill_header(struct server *s, Etcdserverpb__ResponseHeader *h);

/* server_send packs |msg| and sends it as one response message (streams);
 * server_reply does that and finishes the call OK; server_reply_error
 * finishes it with |code|'s status and text. */
int server_send(struct server *s, grpc_call *call, const ProtobufCMessage *msg);
void server_reply(struct server *s, grpc_call *call, const ProtobufCMessage *msg);
void server_reply_error(grpc_call *call, int code);

/* server_kv_to_pb points |o| at |kv|'s fields (no copy: valid as long as
 * |kv|'s pointers are). */
void server_kv_to_pb(Mvccpb__KeyValue *o, const struct mvcc_kv *kv);

/* server_unpack decodes a request; on failure it answers INVALID_ARGUMENT
 * and returns NULL. Free with protobuf_c_message_free_unpacked. */
ProtobufCMessage *server_unpack(grpc_call *call, const ProtobufCMessageDescriptor *d,
                                const uint8_t *msg, size_t len);

/* server_propose queues a write entry (taking |req|) for the apply hook;
 * the call is answered after the batch that applies it is durable. */
void server_propose(struct server *s, grpc_call *call, enum entry_kind kind,
                    ProtobufCMessage *req);

#endif
