/* server/config.h: quorum's flags, named and defaulted as etcd's, so an etcd
 * deployment script runs quorum by changing the binary name. */
#ifndef QUORUM_SERVER_CONFIG_H
#define QUORUM_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_URLS 8
#define CONFIG_MAX_MEMBERS 16

struct url {
    char host[256]; /* numeric address to bind/dial ("127.0.0.1", "::1") */
    int port;
    char text[300]; /* as given, normalized: "http://127.0.0.1:2379" */
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
};

#define CONFIG_FRONT_AUTO (~0u)
#define CONFIG_MAX_FRONTS 64

/* config_parse fills |c| from argv (Go flag syntax: -flag v, --flag v,
 * --flag=v). On a bad flag it writes a one-line reason to |err| and returns
 * -EINVAL. Returns 1 when --help or --version was answered (printed). */
int config_parse(struct config *c, int argc, char **argv, char *err, size_t errlen);

/* config_parse_urls parses a comma-separated URL list ("http://h:p,...",
 * https:// sets url.tls);
 * -EINVAL with a reason in |err| on a bad one. */
int config_parse_urls(const char *s, struct url *out, size_t max, size_t *n, char *err,
                      size_t errlen);

#endif
