/* server/config.h: quorum's flags, named and defaulted as etcd's, so an etcd
 * deployment script runs quorum by changing the binary name. */
#ifndef QUORUM_SERVER_CONFIG_H
#define QUORUM_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>

#define CONFIG_MAX_URLS 8
#define CONFIG_MAX_MEMBERS 16

struct url {
    char host[256]; /* the address to bind or dial: numeric ("127.0.0.1",
                       "::1"; "localhost" is 127.0.0.1, an empty host
                       0.0.0.0) or a DNS name, resolved where it is dialed */
    char name[256]; /* the host as written in the URL, without brackets */
    int port;
    char text[300]; /* as given (scheme in lower case): "http://127.0.0.1:2379" */
    bool tls;       /* https:// (or unixs://) */
    bool unix_sock; /* unix:// or unixs://: |host| is the socket's path (as
                       etcd: everything after the scheme), port 0; client
                       URLs only */
};

struct member_cfg {
    char name[128];
    struct url peer_urls[CONFIG_MAX_URLS];
    size_t n_peer_urls;
};

struct config {
    char name[128];
    char data_dir[1024];
    struct url listen_client[CONFIG_MAX_URLS];
    size_t n_listen_client;
    struct url advertise_client[CONFIG_MAX_URLS];
    size_t n_advertise_client;
    struct url listen_peer[CONFIG_MAX_URLS];
    size_t n_listen_peer;
    struct url advertise_peer[CONFIG_MAX_URLS];
    size_t n_advertise_peer;
    struct member_cfg initial_cluster[CONFIG_MAX_MEMBERS];
    size_t n_initial_cluster;
    /* why --initial-cluster could not be read (etcd reads it only for a
     * member not started before: config_check_cluster reports it) */
    char cluster_err[512];
    bool listen_client_set;    /* --listen-client-urls was given */
    bool advertise_client_set; /* --advertise-client-urls was given */
    char initial_cluster_state[16]; /* "new" | "existing" */
    char initial_cluster_token[256];
    uint64_t max_txn_ops;
    uint64_t max_request_bytes;
    uint64_t quota_backend_bytes;
    uint64_t heartbeat_ms;
    uint64_t election_ms;
    uint64_t snapshot_count;
    uint64_t watch_progress_ms; /* --experimental-watch-progress-notify-interval */
    /* --experimental-corrupt-check-time: how often the leader compares
     * every member's HashKV at its revision; 0 = never (etcd's default) */
    uint64_t corrupt_check_ms;
    /* --experimental-compaction-batch-limit: revisions one compaction step
     * removes between requests (0 = etcd's default, 1000) */
    uint64_t compaction_batch_limit;
    /* --experimental-compaction-sleep-interval (etcd 3.5's): a pause
     * between compaction steps, to spread its disk writes; 0 = none, a
     * step each loop iteration */
    uint64_t compaction_sleep_ms;
    /* bounds under abuse (docs/faults.md): --max-client-connections (0 =
     * unlimited, etcd's), --client-handshake-timeout (a connection whose
     * first bytes are not in by then is closed; grpc-go's 120 s),
     * --client-idle-timeout (an HTTP/2 connection with no stream; 0 =
     * never, etcd's), --max-watch-buffer-bytes (bytes queued for all watch
     * streams together; each gets a share, at most 4 MiB) */
    uint64_t max_client_conns;
    uint64_t client_handshake_ms;
    uint64_t client_idle_ms;
    uint64_t max_watch_buffer_bytes;
    /* --experimental-apply-step-limit (quorum only): changes one revision
     * writes per LMDB transaction before it commits a step (mvcc.h, "Big
     * revisions in steps"); 0 = the default, 100000 */
    uint64_t apply_step_limit;
    /* --max-range-response-bytes (quorum only): bound on one Range's reply
     * read outside the apply batch (apply.h max_range_bytes); 0 =
     * unlimited; default 2147483647, grpc-go's max send size in etcd */
    uint64_t max_range_response_bytes;
    /* --max-raft-log-bytes (quorum only): bound on the data of the applied
     * entries the Raft core keeps in memory for lagging followers, besides
     * the 5000 entries (node.c trim_log); 0 = entries only */
    uint64_t max_raft_log_bytes;
    /* --auto-compaction-mode (periodic | revision) and -retention, parsed as
     * etcd 3.4: a bare integer is hours (periodic) or revisions (revision),
     * else a Go duration (periodic only); 0 = off. */
    bool auto_compaction_periodic;
    uint64_t auto_compaction_retention; /* ms (periodic) or revisions */
    /* --auto-compaction-check-interval (quorum only, for tests): how often
     * revision mode checks; 0 = etcd's 5 minutes */
    uint64_t auto_compaction_check_ms;
    char log_level[16];
    char logger[16];        /* --logger: capnslog (default) | zap */
    char log_outputs[4096]; /* --log-outputs, as given ("default": stderr) */
    /* --experimental-warning-apply-duration (etcd 3.4) or
     * --warning-apply-duration (3.5's name): an apply slower than this is
     * logged ("apply request took too long"); ns, default 100ms */
    uint64_t warning_apply_ns;
    /* --front-loops: threads that own client connections (front.c); 0 =
     * none, the core loop serves clients itself; CONFIG_FRONT_AUTO = the
     * CPUs the process may run on less one (none on one CPU, two on two) */
    unsigned front_loops;
    /* --pin-threads: pin the core to the first allowed CPU and each front
     * loop to the next ones */
    bool pin_threads;
    /* --experimental-set-member-localaddr (etcd 3.6's SetMemberLocalAddr):
     * outgoing peer links leave from the first advertised peer URL's
     * address that is a numeric, specified IP (server_member_localaddr) */
    bool set_member_localaddr;

    /* ---- security (docs/security.md) ---- */
    /* --auth-token: "simple" (etcd's default) or "jwt,pub-key=F,priv-key=F,
     * sign-method=RS256|ES256|...,ttl=5m", as given */
    char auth_token[2048];
    uint64_t auth_token_ttl_s; /* --auth-token-ttl: simple tokens, idle seconds (300) */
    uint64_t bcrypt_cost;      /* --bcrypt-cost (10, bcrypt.DefaultCost) */
    /* TLS on the client (client_tls) and peer (peer_tls) links:
     * --cert-file, --key-file, --trusted-ca-file, --client-cert-auth,
     * --auto-tls, --client-crl-file and their --peer-* twins */
    struct tls_cfg {
        char cert_file[1024];
        char key_file[1024];
        char trusted_ca_file[1024];
        char crl_file[1024];
        bool client_cert_auth;
        bool auto_tls;
    } client_tls, peer_tls;
    char peer_cert_allowed_cn[256]; /* --peer-cert-allowed-cn */
    char cipher_suites[2048];       /* --cipher-suites, etcd's (Go) names, comma-separated */

    /* ---- the HTTP face (docs/http.md) ---- */
    bool enable_grpc_gateway; /* --enable-grpc-gateway: the /v3 JSON gateway (on) */
    bool enable_v2;           /* --enable-v2: the v2 keys API (off, as etcd 3.4) */
    char v2v3_prefix[256];    /* --experimental-enable-v2v3: where v2 keys live in v3 */

    /* ---- metrics (docs/observability.md) ---- */
    /* --listen-metrics-urls: plain-HTTP listeners serving /metrics and
     * /health only (https:// with the client port's certificate) */
    struct url listen_metrics[CONFIG_MAX_URLS];
    size_t n_listen_metrics;
    bool metrics_extensive; /* --metrics=extensive (else basic) */

    /* ---- etcd 3.4's other flags (docs/configuration.md says what quorum
     * does with each) ---- */
    /* cluster work (bootstrap, membership, WAL and snapshot retention) */
    bool strict_reconfig_check;   /* --strict-reconfig-check (true) */
    uint64_t max_snapshots;       /* --max-snapshots (5; 0 = unlimited) */
    uint64_t max_wals;            /* --max-wals (5; 0 = unlimited) */
    bool force_new_cluster;       /* --force-new-cluster */
    bool unsafe_no_fsync;         /* --unsafe-no-fsync */
    bool initial_corrupt_check;   /* --experimental-initial-corrupt-check */
    char discovery_srv[256];      /* --discovery-srv */
    char discovery_srv_name[256]; /* --discovery-srv-name */
    char discovery[1024];         /* --discovery: refused at start (config_validate) */
    bool initial_cluster_set;     /* --initial-cluster was given (etcd clears
                                     its default when discovery is used) */
    /* gRPC transport (grpc/) */
    uint64_t max_concurrent_streams;     /* --max-concurrent-streams (2^32-1) */
    uint64_t grpc_keepalive_min_time_ms; /* --grpc-keepalive-min-time (5s) */
    uint64_t grpc_keepalive_interval_ms; /* --grpc-keepalive-interval (2h; 0 = off) */
    uint64_t grpc_keepalive_timeout_ms;  /* --grpc-keepalive-timeout (20s; 0 = off) */
    /* accepted; see docs/configuration.md for why they have no effect */
    bool data_dir_default; /* --data-dir not given: ${name}.etcd, as etcd
                              (server_pick_data_dir) */
    char wal_dir[1024];                     /* --wal-dir ("": <data-dir>/member/wal) */
    bool pre_vote;                          /* --pre-vote (quorum always pre-votes) */
    bool initial_election_tick_advance;     /* --initial-election-tick-advance (true) */
    uint64_t backend_batch_interval_ms;     /* --backend-batch-interval */
    int64_t backend_batch_limit;            /* --backend-batch-limit */
    bool enable_pprof;                      /* --enable-pprof */
    bool lease_checkpoint;                  /* --experimental-enable-lease-checkpoint */
    bool lease_checkpoint_persist;          /* --experimental-enable-lease-checkpoint-persist */
    bool peer_skip_client_san;              /* --experimental-peer-skip-client-san-verification */
    char bbolt_freelist_type[32];           /* --experimental-backend-bbolt-freelist-type */
    char log_package_levels[1024];          /* --log-package-levels */
    bool debug;                             /* --debug: --log-level=debug, as etcd 3.4 */
    char proxy[16];                         /* --proxy: off; readonly | on refused */
    char discovery_fallback[16];            /* --discovery-fallback: proxy | exit */
    char discovery_proxy[1024];             /* --discovery-proxy */
    char cors[4096];                        /* --cors: "*" only */
    char host_whitelist[4096];              /* --host-whitelist: "*" only */
    char client_cert_allowed_hostname[256]; /* refused when set */
    char peer_cert_allowed_hostname[256];   /* refused when set */
    char config_file[1024];                 /* --config-file (or ETCD_CONFIG_FILE) */

    /* what parsing has to say once the logger is set up (main logs them in
     * order): etcd's pkg/flags lines about ETCD_* variables and ignored
     * flags, the config file's "Loading server configuration", and
     * quorum's warnings for flags it accepts without effect */
    struct config_note {
        char level;      /* 'I', 'W' */
        char module[16]; /* "pkg/flags", "main" */
        char text[512];
    } notes[128];
    size_t n_notes;
    /* ---- the ZooKeeper face (docs/zookeeper.md) ---- */
    /* --listen-zk-urls: ZooKeeper client listeners (http://host:port) */
    struct url listen_zk[CONFIG_MAX_URLS];
    size_t n_listen_zk;
    /* --zk-4lw-commands-whitelist: ZooKeeper's 4lw.commands.whitelist */
    char zk_4lw_whitelist[1024];
    /* --zk-container-check-interval: ZooKeeper's znode.container.checkIntervalMs */
    uint64_t zk_container_check_ms;
};

#define CONFIG_FRONT_AUTO (~0u)
#define CONFIG_MAX_FRONTS 64

/* config_parse fills |c| as etcd 3.4 does: defaults, then argv in Go's
 * flag syntax (-flag v, --flag v, -flag=v; a boolean takes no next
 * argument; "--" or the first non-flag ends the flags), then the ETCD_*
 * environment variables for flags not given (pkg/flags SetFlagsFromEnv),
 * or, with --config-file (or ETCD_CONFIG_FILE), the YAML file alone.
 * Returns:
 *   0                 parsed; c->notes holds lines to log
 *   1                 --help or --version was answered (printed)
 *   CONFIG_ERR_USAGE  a flag could not be read: |err| has the Go flag
 *                     package's line ('invalid value "X" for flag -F: ...',
 *                     "flag provided but not defined: -F"); etcd prints it
 *                     and its usage line to stderr and exits 2
 *   CONFIG_ERR_VERIFY a non-flag argument, a bad ETCD_* value, an
 *                     unreadable config file: etcd logs "error verifying
 *                     flags, |err|. See 'etcd --help'." and exits 1
 *   CONFIG_ERR_FATAL  etcd's fatal lines (an ETCD_* variable shadowed by a
 *                     flag): |err| is logged at level C by pkg/flags, exit 1
 * In every case c->notes holds what was to be logged before the error.
 * Not reentrant (the values being read are kept in file statics): one
 * thread at a time, as main() and the tests call it. */
#define CONFIG_ERR_USAGE (-EINVAL)
#define CONFIG_ERR_VERIFY (-EBADMSG)
#define CONFIG_ERR_FATAL (-ECANCELED)
int config_parse(struct config *c, int argc, char **argv, char *err, size_t errlen);

/* config_parse_env is config_parse with the environment given as |envp|
 * (NULL-terminated "K=V" strings, as environ); tests use it. */
int config_parse_env(struct config *c, int argc, char **argv, char *const *envp, char *err,
                     size_t errlen);

/* config_usage prints etcd's usage line (what a flag error is followed by
 * on stderr); config_help prints the flags, as --help does on stdout. */
void config_usage(FILE *f);
void config_help(FILE *f);

/* config_doc_table prints docs/configuration.md's table of flags: name,
 * default, config file key, what quorum does with it (tests/unit's config
 * test keeps the page current). */
void config_doc_table(FILE *f);

/* config_validate checks what etcd 3.4 checks of a parsed configuration
 * before it binds anything (embed.Config.Validate: listen URLs with an IP
 * or localhost, advertised URLs with a host, the heartbeat and election
 * timeout, --advertise-client-urls with --listen-client-urls; then its
 * listeners' TLS requirements). -EINVAL with etcd's line in |err| ("error
 * verifying flags, ... See 'quorum --help'."); etcd exits 1. Pure. */
int config_validate(const struct config *c, char *err, size_t errlen);

/* config_check_cluster checks --initial-cluster as etcd does for a member
 * that has no log yet: readable ("error setting up initial cluster: ..."),
 * naming this member ("couldn't find local name ..."), no URL twice
 * ("initial cluster ... has duplicate url"). Pure. */
int config_check_cluster(const struct config *c, char *err, size_t errlen);

/* config_cluster_string writes members as etcd prints a URLsMap: the
 * name=URL pairs, sorted, comma-separated. */
void config_cluster_string(const struct member_cfg *m, size_t n, char *out, size_t cap);

/* A name resolver for the functions below: |name| (a DNS name, not an
 * IP address, not "localhost") to one numeric address in |addr|; or a
 * negative code with the reason in |why|. */
typedef int (*config_resolve_fn)(const char *name, char *addr, size_t cap, char *why,
                                 size_t whycap, void *arg);

/* config_urls_equal: etcd's netutil.URLStringsEqual. The two lists are
 * equal when, host names resolved (IP addresses and "localhost" are taken
 * as written), they hold the same URLs in any order. When not, |why|
 * says why as etcd's does ('len(["a"]) != len(["b" "c"])', 'resolved
 * urls: "a" != "b"', 'failed to resolve "U" (reason)'). */
bool config_urls_equal(const struct url *a, size_t na, const struct url *b, size_t nb,
                       config_resolve_fn resolve, void *arg, char *why, size_t whycap);

/* config_advertise_matches: etcd's advertiseMatchesCluster, for a member
 * bootstrapping a new cluster: its --initial-advertise-peer-urls and its
 * URLs in --initial-cluster must be the same addresses; -EINVAL with
 * etcd's line otherwise ("--initial-cluster has N=U but missing from
 * --initial-advertise-peer-urls=A (why)", ...). */
int config_advertise_matches(const struct config *c, config_resolve_fn resolve, void *arg,
                             char *err, size_t errlen);

/* A member as the cluster a member joins lists it. */
struct config_remote_member {
    uint64_t id;
    char name[128];
    char peer[CONFIG_MAX_URLS][300];
    size_t n_peer;
    char client[CONFIG_MAX_URLS][300];
    size_t n_client;
    bool learner;
};

/* config_assign_ids: etcd's ValidateClusterAndAssignIDs, for a member
 * joining with --initial-cluster-state existing. The cluster's members
 * |ms| (sorted here by id) must be as many as --initial-cluster's, and
 * each must have the peer URLs of one of them (by address); ids[i] gets
 * the id of initial_cluster[i]. The token plays no part: the ids are the
 * cluster's. -EINVAL with etcd's line otherwise ("error validating
 * peerURLs {ClusterID:...}: member count is unequal", "...: PeerURLs: no
 * match found for existing member (...)"). */
int config_assign_ids(const struct config *c, struct config_remote_member *ms, size_t n,
                      uint64_t cluster_id, config_resolve_fn resolve, void *arg, uint64_t *ids,
                      char *err, size_t errlen);

/* config_host_is_ip: |host| is a numeric IPv4 or IPv6 address. */
bool config_host_is_ip(const char *host);

/* config_print_version prints what `quorum --version` prints. */
void config_print_version(FILE *f);

/* config_parse_urls parses a comma-separated URL list ("http://h:p,...",
 * https:// sets url.tls) as etcd's types.NewURLs: -EINVAL with etcd's
 * reason in |err| on a bad one ('parse "U": invalid port ":x" after host',
 * "URL scheme must be http, https, unix, or unixs: U", 'URL address does
 * not have the form "host:port": U', "URL must not contain a path: U").
 * unix:// and unixs:// take the rest of the URL as the socket's path. */
int config_parse_urls(const char *s, struct url *out, size_t max, size_t *n, char *err,
                      size_t errlen);

/* config_member_localaddr: with --experimental-set-member-localaddr, the
 * address outgoing peer links are bound to: the first advertised peer URL
 * whose host is written as a numeric IP other than 0.0.0.0 and :: (etcd's
 * InferLocalAddr; unlike etcd a loopback address is taken too, docs/
 * campaign.md says why); NULL without the flag or such a URL. */
const char *config_member_localaddr(const struct config *c);

#endif
