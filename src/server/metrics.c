/* server/metrics.c: etcd 3.4's metrics for what the member itself does
 * (Raft, proposals, apply, compaction, maintenance, watches, leases'
 * expiry), and the gauges read at scrape time from state the core
 * publishes once per loop pass.
 *
 * Names, help texts, types and buckets are etcd 3.4.23's own (its
 * /metrics), so etcd's dashboards and alert rules (contrib/mixin) read
 * quorum unchanged; docs/observability.md lists them. The other modules
 * register theirs: wal/ (fsync), backend/ (commit), apply/ (mvcc
 * put/range/delete/txn), lease/ (granted, revoked, renewed, TTLs),
 * transport/ (peers), grpc/ (calls), http/ (scrapes, /health).
 *
 * Counters are updated where things happen, on the core's shard (or a
 * front loop's: reads). A gauge of state (leader, indexes, sizes,
 * watchers) is not updated on every change: the core stores the figures
 * in |pub| each pass (a handful of relaxed stores), and a scrape on any
 * thread reads them. */
#include "server/server_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/metrics.h"
#include "http/http.h"
#include "lease/lessor.h"
#include "raft/raft.h"
#include "wal/wal.h"

struct server_metrics server_metrics;

/* what the core publishes for the scrape (__atomic, relaxed) */
static struct {
    uint64_t has_leader, is_leader, is_learner;
    uint64_t committed, applied;
    uint64_t db_size, db_in_use;
    int64_t rev, compact_rev;
    uint64_t watchers, slow_watchers, streams;
    uint64_t auth_rev;
} pub;
static uint64_t sizes_ms; /* core: when the sizes were last read; 0: now */

static double read_u64(void *p)
{
    return (double)__atomic_load_n((uint64_t *)p, __ATOMIC_RELAXED);
}

static double read_i64(void *p)
{
    return (double)__atomic_load_n((int64_t *)p, __ATOMIC_RELAXED);
}

static struct metrics_series *pub_gauge(const char *name, const char *help, void *field,
                                        bool is_signed)
{
    return metrics_gauge_fn(name, help, is_signed ? read_i64 : read_u64, field);
}

static struct metrics_series *labeled_one(const char *name, const char *help, const char *label,
                                          const char *value)
{
    const char *const l[] = {label, NULL};
    struct metrics_series *s = metrics_series(metrics_family(name, help, METRICS_GAUGE, l, NULL, 0),
                                              (const char *[]){value});
    metrics_set(s, 1);
    return s;
}

void server_metrics_register(struct server *s)
{
    struct server_metrics *m = &server_metrics;
    double b[32];
    metrics_process_register();
    wal_metrics_register();
    backend_metrics_register();
    apply_metrics_register();
    lessor_metrics_register();

    /* ---- etcd_server_* ---- */
    pub_gauge("etcd_server_has_leader", "Whether or not a leader exists. 1 is existence, 0 is not.",
              &pub.has_leader, false);
    pub_gauge("etcd_server_is_leader",
              "Whether or not this member is a leader. 1 if is, 0 otherwise.", &pub.is_leader,
              false);
    pub_gauge("etcd_server_is_learner",
              "Whether or not this member is a learner. 1 if is, 0 otherwise.", &pub.is_learner,
              false);
    /* gauges in etcd 3.4, for all their names */
    pub_gauge("etcd_server_proposals_committed_total",
              "The total number of consensus proposals committed.", &pub.committed, false);
    pub_gauge("etcd_server_proposals_applied_total",
              "The total number of consensus proposals applied.", &pub.applied, false);
    m->leader_changes = metrics_counter("etcd_server_leader_changes_seen_total",
                                        "The number of leader changes seen.");
    m->proposals_pending = metrics_gauge("etcd_server_proposals_pending",
                                         "The current number of pending proposals to commit.");
    m->proposals_failed = metrics_counter("etcd_server_proposals_failed_total",
                                          "The total number of failed proposals seen.");
    m->slow_apply = metrics_counter(
        "etcd_server_slow_apply_total",
        "The total number of slow apply requests (likely overloaded from slow disk).");
    m->heartbeat_failures = metrics_counter("etcd_server_heartbeat_send_failures_total",
                                            "The total number of leader heartbeat send failures "
                                            "(likely overloaded from slow disk).");
    m->snapshot_applying =
        metrics_gauge("etcd_server_snapshot_apply_in_progress_total",
                      "1 if the server is applying the incoming snapshot. 0 if none.");
    metrics_set(metrics_series(metrics_family("etcd_server_quota_backend_bytes",
                                              "Current backend storage quota size in bytes.",
                                              METRICS_GAUGE, NULL, NULL, 0),
                               NULL),
                (double)s->cfg.quota_backend_bytes);
    labeled_one("etcd_server_version",
                "Which version is running. 1 for 'server_version' label with current version.",
                "server_version", SERVER_ETCD_VERSION);
    labeled_one("etcd_cluster_version",
                "Which version is running. 1 for 'cluster_version' label with current cluster "
                "version",
                "cluster_version", SERVER_ETCD_CLUSTER_VERSION);

    /* ---- etcd_disk_* beyond wal/ and backend/ ---- */
    m->snapshot_seconds = metrics_histogram("etcd_disk_backend_snapshot_duration_seconds",
                                            "The latency distribution of backend snapshots.",
                                            metrics_exp_buckets(0.01, 2, 17, b), 17);
    m->defrag_seconds = metrics_histogram("etcd_disk_backend_defrag_duration_seconds",
                                          "The latency distribution of backend defragmentation.",
                                          metrics_exp_buckets(0.1, 2, 13, b), 13);
    m->defrag_inflight = metrics_gauge(
        "etcd_disk_defrag_inflight",
        "Whether or not defrag is active on the member. 1 means active, 0 means not.");

    /* ---- etcd_mvcc_* and etcd_debugging_mvcc_* beyond apply/ ---- */
    pub_gauge("etcd_mvcc_db_total_size_in_bytes",
              "Total size of the underlying database physically allocated in bytes.", &pub.db_size,
              false);
    pub_gauge("etcd_debugging_mvcc_db_total_size_in_bytes",
              "Total size of the underlying database physically allocated in bytes.", &pub.db_size,
              false);
    pub_gauge("etcd_mvcc_db_total_size_in_use_in_bytes",
              "Total size of the underlying database logically in use in bytes.", &pub.db_in_use,
              false);
    pub_gauge("etcd_debugging_mvcc_current_revision", "The current revision of store.", &pub.rev,
              true);
    pub_gauge("etcd_debugging_mvcc_compact_revision",
              "The revision of the last compaction in store.", &pub.compact_rev, true);
    pub_gauge("etcd_debugging_mvcc_watcher_total", "Total number of watchers.", &pub.watchers,
              false);
    pub_gauge("etcd_debugging_mvcc_slow_watcher_total", "Total number of unsynced slow watchers.",
              &pub.slow_watchers, false);
    pub_gauge("etcd_debugging_mvcc_watch_stream_total", "Total number of watch streams.",
              &pub.streams, false);
    m->events = metrics_counter("etcd_debugging_mvcc_events_total",
                                "Total number of events sent by this member.");
    m->compaction_keys = metrics_counter("etcd_debugging_mvcc_db_compaction_keys_total",
                                         "Total number of db keys compacted.");
    m->compaction_pause =
        metrics_histogram("etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
                          "Bucketed histogram of db compaction pause duration.",
                          metrics_exp_buckets(1, 2, 13, b), 13);
    m->compaction_total =
        metrics_histogram("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
                          "Bucketed histogram of db compaction total duration.",
                          metrics_exp_buckets(100, 2, 14, b), 14);
    m->hash_seconds = metrics_histogram("etcd_mvcc_hash_duration_seconds",
                                        "The latency distribution of storage hash operation.",
                                        metrics_exp_buckets(0.01, 2, 15, b), 15);
    m->hash_rev_seconds =
        metrics_histogram("etcd_mvcc_hash_rev_duration_seconds",
                          "The latency distribution of storage hash by revision operation.",
                          metrics_exp_buckets(0.01, 2, 15, b), 15);

    /* ---- leases and auth ---- */
    m->lease_expired = metrics_counter("etcd_debugging_server_lease_expired_total",
                                       "The total number of expired leases.");
    pub_gauge("etcd_debugging_auth_revision", "The current revision of auth store.", &pub.auth_rev,
              false);

    /* ---- the ZooKeeper face (quorum's own) ---- */
    m->zk_front_reads = metrics_counter(
        "quorum_zk_front_loop_reads_total",
        "Total number of ZooKeeper reads answered on a front loop, without the core.");
}

void server_metrics_publish(struct server *s)
{
    static uint64_t id_shown;
    if (s->member_id != id_shown) { /* known once the Raft member started */
        id_shown = s->member_id;
        char id[32];
        snprintf(id, sizeof(id), "%llx", (unsigned long long)s->member_id);
        labeled_one("etcd_server_id",
                    "Server or member ID in hexadecimal format. 1 for 'server_id' label with "
                    "current ID.",
                    "server_id", id);
    }
    bool raft = s->raft != NULL;
    uint64_t lead = raft ? raft_get_leader(s->raft) : RAFT_NONE;
    __atomic_store_n(&pub.has_leader, lead != RAFT_NONE, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.is_leader, lead != RAFT_NONE && lead == s->member_id, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.is_learner,
                     raft && raft_membership_is_learner(raft_get_membership(s->raft), s->member_id),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&pub.committed, raft ? raft_get_commit(s->raft) : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.applied, s->applied_index, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.rev, mvcc_rev(s->kv), __ATOMIC_RELAXED);
    __atomic_store_n(&pub.compact_rev, mvcc_compact_rev(s->kv), __ATOMIC_RELAXED);
    size_t synced = watch_hub_synced_count(s->watches);
    size_t unsynced = watch_hub_unsynced_count(s->watches);
    __atomic_store_n(&pub.watchers, synced + unsynced, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.slow_watchers, unsynced, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.streams, s->n_wstreams, __ATOMIC_RELAXED);
    __atomic_store_n(&pub.auth_rev, s->auth != NULL ? auth_revision(s->auth) : 0, __ATOMIC_RELAXED);
    /* the sizes take a stat and a walk of LMDB's freelist: once a second,
     * and at once after the file changed (server_metrics_db_changed) */
    uint64_t now = uv_now(s->loop);
    if (sizes_ms == 0 || now - sizes_ms >= 1000) {
        sizes_ms = now ? now : 1;
        __atomic_store_n(&pub.db_size, backend_size(s->be), __ATOMIC_RELAXED);
        __atomic_store_n(&pub.db_in_use, backend_size_in_use(s->be), __ATOMIC_RELAXED);
    }
}

void server_metrics_db_changed(void)
{
    sizes_ms = 0;
}

/* ---- --listen-metrics-urls ----
 *
 * A grpc server of the core loop whose connections are all HTTP/1.1
 * (http_only) and go to http/'s metrics face: /metrics, and /health whose
 * local calls reach the services on the core as any of its calls do. It
 * serves no gRPC, as etcd's metrics listener serves none. */

int server_metrics_listen(struct server *s, const struct grpc_server_options *client)
{
    if (s->cfg.n_listen_metrics == 0)
        return 0;
    struct grpc_server_options go = *client;
    go.http1 = http_metrics_face();
    go.http_only = true;
    go.max_conns = 0; /* the client bound is not the metrics listener's */
    go.conn_count = NULL;
    go.idle_ms = 0;
    int rv = server_grpc_core_new(s, &go, &s->metrics_grpc);
    if (rv != 0)
        return rv;
    for (size_t i = 0; i < s->cfg.n_listen_metrics; i++) {
        const struct url *u = &s->cfg.listen_metrics[i];
        if (u->unix_sock) {
            log_error("server", "cannot listen for metrics on %s: not an http(s):// URL", u->text);
            return -EINVAL;
        }
        if (u->tls && go.tls == NULL) {
            log_error("server",
                      "cannot listen for metrics on %s: TLS key/cert (--cert-file, "
                      "--key-file) must be provided",
                      u->text);
            return -EINVAL;
        }
        rv = (u->tls ? grpc_server_listen_tls : grpc_server_listen)(s->metrics_grpc, u->host,
                                                                    u->port, NULL);
        if (rv != 0) {
            log_error("server", "cannot listen for metrics on %s: %s", u->text, uv_strerror(rv));
            return rv;
        }
        log_info("server", "serving /metrics and /health on %s", u->text);
    }
    return 0;
}

struct mclose {
    void (*cb)(void *);
    void *arg;
};

static void metrics_closed(void *arg)
{
    struct mclose *mc = arg;
    void (*cb)(void *) = mc->cb;
    void *a = mc->arg;
    free(mc);
    cb(a);
}

void server_metrics_close(struct server *s, void (*cb)(void *), void *arg)
{
    grpc_server *g = s->metrics_grpc;
    struct mclose *mc = g != NULL ? malloc(sizeof(*mc)) : NULL;
    s->metrics_grpc = NULL;
    if (mc == NULL) {
        if (g != NULL)
            grpc_server_close(g, NULL, NULL);
        cb(arg);
        return;
    }
    mc->cb = cb;
    mc->arg = arg;
    grpc_server_close(g, metrics_closed, mc);
}
