/* server/config.h: quorum's flags, named and defaulted as etcd's, so an etcd
 * deployment script runs quorum by changing the binary name. */
#ifndef QUORUM_SERVER_CONFIG_H
#define QUORUM_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

    /* ---- the ZooKeeper face (docs/zookeeper.md) ---- */
    /* --listen-zk-urls: ZooKeeper client listeners (http://host:port) */
    struct url listen_zk[CONFIG_MAX_URLS];
    size_t n_listen_zk;
};

#define CONFIG_FRONT_AUTO (~0u)
#define CONFIG_MAX_FRONTS 64

/* config_parse fills |c| from argv (Go flag syntax: -flag v, --flag v,
 * --flag=v). On a flag it cannot read it writes the Go flag package's line
 * to |err| ('invalid value "X" for flag -F: ...', "flag provided but not
 * defined: -F", ...) and returns -EINVAL: etcd then prints its usage and
 * exits 2. Returns 1 when --help or --version was answered (printed). */
int config_parse(struct config *c, int argc, char **argv, char *err, size_t errlen);

/* config_usage prints what --help prints. */
void config_usage(FILE *f);

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

#endif
