/* server/config.c: flag parsing with etcd's names and defaults. */
#include "server/config.h"

#include "tls/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUORUM_VERSION "0.1.0"
#define ETCD_API_VERSION "3.4"

int config_parse_urls(const char *s, struct url *out, size_t max, size_t *n, char *err,
                      size_t errlen)
{
    *n = 0;
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", s);
    char *save = NULL;
    for (char *u = strtok_r(tmp, ",", &save); u != NULL; u = strtok_r(NULL, ",", &save)) {
        if (*n == max) {
            snprintf(err, errlen, "too many URLs in %s", s);
            return -EINVAL;
        }
        bool unix_sock = strncmp(u, "unix://", 7) == 0 || strncmp(u, "unixs://", 8) == 0;
        if (unix_sock) {
            /* etcd's unix listeners: the socket's path is the URL's host
             * and path ("unix://localhost:2379" -> "localhost:2379") */
            bool tls = u[4] == 's';
            const char *path = u + (tls ? 8 : 7);
            struct url *o = &out[*n];
            memset(o, 0, sizeof(*o));
            if (*path == '\0' || strlen(path) >= 108) { /* sun_path */
                snprintf(err, errlen, "bad unix socket path in URL %s", u);
                return -EINVAL;
            }
            o->unix_sock = true;
            o->tls = tls;
            snprintf(o->host, sizeof(o->host), "%s", path);
            snprintf(o->text, sizeof(o->text), "%s", u);
            (*n)++;
            continue;
        }
        bool tls = strncmp(u, "https://", 8) == 0;
        if (!tls && strncmp(u, "http://", 7) != 0) {
            snprintf(err, errlen, "URL scheme must be http or https: %s", u);
            return -EINVAL;
        }
        const char *hp = u + (tls ? 8 : 7);
        struct url *o = &out[*n];
        o->tls = tls;
        o->unix_sock = false;
        const char *colon;
        char host[256];
        if (*hp == '[') {
            const char *rb = strchr(hp, ']');
            if (rb == NULL || rb[1] != ':') {
                snprintf(err, errlen, "bad URL %s", u);
                return -EINVAL;
            }
            snprintf(host, sizeof(host), "%.*s", (int)(rb - hp - 1), hp + 1);
            colon = rb + 1;
        } else {
            colon = strrchr(hp, ':');
            if (colon == NULL) {
                snprintf(err, errlen, "URL address does not have the form \"host:port\": %s", u);
                return -EINVAL;
            }
            snprintf(host, sizeof(host), "%.*s", (int)(colon - hp), hp);
        }
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if ((*end != '\0' && *end != '/') || port < 0 || port > 65535) {
            snprintf(err, errlen, "bad port in URL %s", u);
            return -EINVAL;
        }
        if (strcmp(host, "localhost") == 0)
            snprintf(host, sizeof(host), "127.0.0.1");
        snprintf(o->host, sizeof(o->host), "%s", host[0] ? host : "0.0.0.0");
        o->port = (int)port;
        snprintf(o->text, sizeof(o->text), "%s%.*s", tls ? "https://" : "http://",
                 (int)(sizeof(o->text) - 9), hp);
        char *slash = strchr(o->text + (tls ? 8 : 7), '/');
        if (slash != NULL)
            *slash = '\0';
        (*n)++;
    }
    if (*n == 0) {
        snprintf(err, errlen, "empty URL list");
        return -EINVAL;
    }
    return 0;
}

/* check_tls refuses what etcd 3.4 refuses at start: an https:// URL with
 * no certificate to serve it, an unknown cipher suite name. */
static int check_tls(const struct config *c, char *err, size_t errlen)
{
    char tmp[sizeof(c->cipher_suites)];
    snprintf(tmp, sizeof(tmp), "%s", c->cipher_suites);
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (tls_cipher_openssl_name(t) == NULL) {
            snprintf(err, errlen, "unexpected TLS cipher suite \"%s\"", t);
            return -EINVAL;
        }
    }
    for (size_t i = 0; i < c->n_listen_peer; i++)
        if (c->listen_peer[i].unix_sock) {
            snprintf(err, errlen, "%s: unix sockets are for client URLs only",
                     c->listen_peer[i].text);
            return -EINVAL;
        }
    for (size_t i = 0; i < c->n_advertise_peer; i++)
        if (c->advertise_peer[i].unix_sock) {
            snprintf(err, errlen, "%s: unix sockets are for client URLs only",
                     c->advertise_peer[i].text);
            return -EINVAL;
        }
    const struct tls_cfg *ct = &c->client_tls, *pt = &c->peer_tls;
    bool client_certs = (ct->cert_file[0] && ct->key_file[0]) || ct->auto_tls;
    for (size_t i = 0; i < c->n_listen_client; i++)
        if (c->listen_client[i].tls && !client_certs) {
            snprintf(err, errlen,
                     "TLS key/cert (--cert-file, --key-file) must be provided for client url %s "
                     "with HTTPS scheme",
                     c->listen_client[i].text);
            return -EINVAL;
        }
    bool peer_certs = (pt->cert_file[0] && pt->key_file[0]) || pt->auto_tls;
    for (size_t i = 0; i < c->n_listen_peer; i++)
        if (c->listen_peer[i].tls && !peer_certs) {
            snprintf(err, errlen, "cannot listen on TLS for %s:%d: KeyFile and CertFile are not "
                                  "presented",
                     c->listen_peer[i].host, c->listen_peer[i].port);
            return -EINVAL;
        }
    return 0;
}

static int parse_cluster(struct config *c, const char *s, char *err, size_t errlen)
{
    char tmp[8192];
    snprintf(tmp, sizeof(tmp), "%s", s);
    c->n_initial_cluster = 0;
    char *save = NULL;
    for (char *kv = strtok_r(tmp, ",", &save); kv != NULL; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "--initial-cluster: %s is not name=url", kv);
            return -EINVAL;
        }
        *eq = '\0';
        struct member_cfg *m = NULL;
        for (size_t i = 0; i < c->n_initial_cluster; i++)
            if (strcmp(c->initial_cluster[i].name, kv) == 0)
                m = &c->initial_cluster[i];
        if (m == NULL) {
            if (c->n_initial_cluster == CONFIG_MAX_MEMBERS) {
                snprintf(err, errlen, "--initial-cluster: too many members");
                return -EINVAL;
            }
            m = &c->initial_cluster[c->n_initial_cluster++];
            memset(m, 0, sizeof(*m));
            snprintf(m->name, sizeof(m->name), "%s", kv);
        }
        size_t n;
        if (m->n_peer_urls == CONFIG_MAX_URLS ||
            config_parse_urls(eq + 1, &m->peer_urls[m->n_peer_urls], 1, &n, err, errlen) != 0)
            return -EINVAL;
        m->n_peer_urls++;
    }
    return 0;
}

static void usage(void)
{
    printf("Usage: quorum [flags]\n"
           "  A Raft-replicated key-value store that speaks etcd's v3 API.\n\n"
           "  --name                          human-readable member name (default \"default\")\n"
           "  --data-dir                      data directory (default \"${name}.quorum\")\n"
           "  --listen-client-urls            URLs to serve clients on "
           "(default http://localhost:2379;\n"
           "                                  https://, unix://path, unixs://path too)\n"
           "  --advertise-client-urls         client URLs told to the cluster\n"
           "  --listen-peer-urls              URLs to talk to peers on "
           "(default http://localhost:2380)\n"
           "  --initial-advertise-peer-urls   peer URLs told to the cluster\n"
           "  --initial-cluster               name=peerURL,... for bootstrapping\n"
           "  --initial-cluster-state         new | existing (default new)\n"
           "  --initial-cluster-token         cluster token (default \"etcd-cluster\")\n"
           "  --max-txn-ops                   most operations in one txn (default 128)\n"
           "  --max-request-bytes             largest client request (default 1572864)\n"
           "  --quota-backend-bytes           backend size alarm threshold (default 2 GiB)\n"
           "  --heartbeat-interval            ms between heartbeats (default 100)\n"
           "  --election-timeout              ms before an election (default 1000)\n"
           "  --snapshot-count                applied entries per snapshot (default 100000)\n"
           "  --experimental-watch-progress-notify-interval\n"
           "                                  interval of watch progress notifications "
           "(default 10m)\n"
           "  --experimental-corrupt-check-time\n"
           "                                  how often the leader compares the members' "
           "HashKV (default 0: never)\n"
           "  --auto-compaction-mode          periodic | revision (default periodic)\n"
           "  --auto-compaction-retention     hours or duration (periodic), revisions "
           "(revision); 0 = off\n"
           "  --auto-compaction-check-interval  revision-mode check period (quorum only, "
           "default 5m)\n"
           "  --experimental-compaction-batch-limit\n"
           "                                  revisions one compaction step removes "
           "(default 1000)\n"
           "  --experimental-compaction-sleep-interval\n"
           "                                  pause between compaction steps (default 0: "
           "none)\n"
           "  --front-loops                   threads owning client connections: auto (the\n"
           "                                  CPUs allowed, less one for the core; 0 on one\n"
           "                                  CPU) or a number, 0 = the core serves clients\n"
           "  --pin-threads                   pin the core and each front loop to a CPU\n"
           "  --auth-token                    simple | jwt,pub-key=F,priv-key=F,sign-method=M,"
           "ttl=D\n"
           "  --auth-token-ttl                seconds a simple token lives unused (default 300)\n"
           "  --bcrypt-cost                   cost of password hashes (default 10)\n"
           "  --cert-file, --key-file         the client port's certificate and key (TLS)\n"
           "  --trusted-ca-file               CA that signs client certificates\n"
           "  --client-cert-auth              require a client certificate signed by it\n"
           "  --client-crl-file               revoked client certificates\n"
           "  --auto-tls                      a self-signed certificate for the client port\n"
           "  --peer-cert-file, --peer-key-file, --peer-trusted-ca-file, --peer-crl-file,\n"
           "  --peer-client-cert-auth, --peer-auto-tls   the same for the peer port and links\n"
           "  --peer-cert-allowed-cn           common name a peer's certificate must have\n"
           "  --cipher-suites                 TLS 1.2 cipher suites (Go's names), comma-separated\n"
           "  --log-level                     debug | info | warn | error | panic | fatal "
           "(default info)\n"
           "  --logger                        capnslog (default: etcd 3.4's text lines) | zap "
           "(JSON lines)\n"
           "  --log-outputs                   default (stderr) | stderr | stdout | "
           "systemd/journal | a file,\n"
           "                                  comma-separated\n"
           "  --experimental-warning-apply-duration, --warning-apply-duration\n"
           "                                  log applies slower than this (default 100ms)\n"
           "  --version                       print the version and exit\n");
}

enum ftype { F_STR, F_U64, F_DURATION_MS, F_DURATION_NS, F_URLS, F_CLUSTER, F_BOOL, F_IGNORED_BOOL, F_IGNORED_STR };

/* parse_duration_ns reads a Go duration ("10m", "1.5s", "300ms", "1h30m",
 * "100us", "1ns") in nanoseconds; -EINVAL if malformed. */
static int parse_duration_ns(const char *v, uint64_t *ns)
{
    double total = 0;
    const char *p = v;
    if (*p == '\0')
        return -EINVAL;
    if (strcmp(p, "0") == 0) {
        *ns = 0;
        return 0;
    }
    while (*p) {
        char *end;
        double x = strtod(p, &end);
        if (end == p || x < 0)
            return -EINVAL;
        p = end;
        static const struct {
            const char *unit;
            double ns;
        } units[] = {{"ns", 1},   {"us", 1e3},        {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
                     {"ms", 1e6}, {"s", 1e9},         {"m", 60e9},        {"h", 3600e9}};
        size_t k;
        for (k = 0; k < sizeof(units) / sizeof(units[0]); k++)
            if (strncmp(p, units[k].unit, strlen(units[k].unit)) == 0)
                break;
        if (k == sizeof(units) / sizeof(units[0]))
            return -EINVAL;
        p += strlen(units[k].unit);
        total += x * units[k].ns;
    }
    *ns = (uint64_t)total;
    return 0;
}

/* parse_duration: the same in milliseconds. */
static int parse_duration(const char *v, uint64_t *ms)
{
    uint64_t ns;
    int rv = parse_duration_ns(v, &ns);
    if (rv == 0)
        *ms = ns / 1000000;
    return rv;
}

/* parse_auto_compaction: etcd 3.4's parseCompactionRetention. */
static int parse_auto_compaction(struct config *c, const char *mode, const char *retention,
                                 char *err, size_t errlen)
{
    if (strcmp(mode, "periodic") == 0 || mode[0] == '\0') {
        c->auto_compaction_periodic = true;
    } else if (strcmp(mode, "revision") == 0) {
        c->auto_compaction_periodic = false;
    } else {
        snprintf(err, errlen, "unknown auto-compaction-mode %s", mode);
        return -EINVAL;
    }
    char *end;
    errno = 0;
    long long h = strtoll(retention[0] ? retention : "0", &end, 10);
    if (errno == 0 && *end == '\0' && h >= 0 && retention[0] != '-' && retention[0] != '+') {
        c->auto_compaction_retention =
            c->auto_compaction_periodic ? (uint64_t)h * 3600 * 1000 : (uint64_t)h;
        return 0;
    }
    uint64_t ms;
    if (parse_duration(retention, &ms) != 0) {
        snprintf(err, errlen, "error parsing CompactionRetention: time: invalid duration %s",
                 retention);
        return -EINVAL;
    }
    /* etcd takes a duration even in revision mode, as that many revisions
     * (nanoseconds): keep the value in ms for periodic, as a count (ns) for
     * revision, as etcd does */
    c->auto_compaction_retention = c->auto_compaction_periodic ? ms : ms * 1000000;
    return 0;
}

int config_parse(struct config *c, int argc, char **argv, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    const char *listen_client = "http://localhost:2379";
    const char *advertise_client = NULL;
    const char *listen_peer = "http://localhost:2380";
    const char *advertise_peer = "http://localhost:2380";
    const char *cluster = NULL;
    snprintf(c->name, sizeof(c->name), "default");
    snprintf(c->initial_cluster_state, sizeof(c->initial_cluster_state), "new");
    snprintf(c->initial_cluster_token, sizeof(c->initial_cluster_token), "etcd-cluster");
    snprintf(c->log_level, sizeof(c->log_level), "info");
    snprintf(c->logger, sizeof(c->logger), "capnslog");
    snprintf(c->log_outputs, sizeof(c->log_outputs), "default");
    c->warning_apply_ns = 100000000; /* etcd's 100ms */
    c->max_txn_ops = 128;
    c->enable_grpc_gateway = true;
    c->max_request_bytes = 1572864;
    c->quota_backend_bytes = 2ull << 30;
    c->heartbeat_ms = 100;
    c->election_ms = 1000;
    c->snapshot_count = 100000;
    c->watch_progress_ms = 10 * 60 * 1000;
    c->compaction_batch_limit = 1000;
    snprintf(c->auth_token, sizeof(c->auth_token), "simple");
    c->auth_token_ttl_s = 300;
    c->bcrypt_cost = 10;
    char ac_mode[16] = "periodic", ac_retention[64] = "0";
    char fronts[16] = "auto";

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            snprintf(err, errlen, "'%s' is not a valid flag", a);
            return -EINVAL;
        }
        a += (a[1] == '-') ? 2 : 1;
        char name[128];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        if (eq != NULL) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", a);
        }
        if (strcmp(name, "help") == 0 || strcmp(name, "h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(name, "version") == 0) {
            printf("quorum Version: %s\netcd API Version: %s\n", QUORUM_VERSION, ETCD_API_VERSION);
            return 1;
        }
        struct {
            const char *name;
            enum ftype t;
            void *dst;
            size_t len;
        } flags[] = {
            {"name", F_STR, c->name, sizeof(c->name)},
            {"data-dir", F_STR, c->data_dir, sizeof(c->data_dir)},
            {"listen-client-urls", F_URLS, &listen_client, 0},
            {"advertise-client-urls", F_URLS, &advertise_client, 0},
            {"listen-peer-urls", F_URLS, &listen_peer, 0},
            {"initial-advertise-peer-urls", F_URLS, &advertise_peer, 0},
            {"initial-cluster", F_CLUSTER, &cluster, 0},
            {"initial-cluster-state", F_STR, c->initial_cluster_state,
             sizeof(c->initial_cluster_state)},
            {"initial-cluster-token", F_STR, c->initial_cluster_token,
             sizeof(c->initial_cluster_token)},
            {"max-txn-ops", F_U64, &c->max_txn_ops, 0},
            {"max-request-bytes", F_U64, &c->max_request_bytes, 0},
            {"quota-backend-bytes", F_U64, &c->quota_backend_bytes, 0},
            {"heartbeat-interval", F_U64, &c->heartbeat_ms, 0},
            {"election-timeout", F_U64, &c->election_ms, 0},
            {"snapshot-count", F_U64, &c->snapshot_count, 0},
            {"log-level", F_STR, c->log_level, sizeof(c->log_level)},
            {"auto-compaction-mode", F_STR, ac_mode, sizeof(ac_mode)},
            {"auto-compaction-retention", F_STR, ac_retention, sizeof(ac_retention)},
            {"auto-compaction-check-interval", F_DURATION_MS, &c->auto_compaction_check_ms, 0},
            {"experimental-watch-progress-notify-interval", F_DURATION_MS, &c->watch_progress_ms,
             0},
            {"experimental-corrupt-check-time", F_DURATION_MS, &c->corrupt_check_ms, 0},
            {"experimental-compaction-batch-limit", F_U64, &c->compaction_batch_limit, 0},
            {"experimental-compaction-sleep-interval", F_DURATION_MS, &c->compaction_sleep_ms,
             0},
            {"front-loops", F_STR, fronts, sizeof(fronts)},
            {"pin-threads", F_BOOL, &c->pin_threads, 0},
            {"auth-token", F_STR, c->auth_token, sizeof(c->auth_token)},
            {"auth-token-ttl", F_U64, &c->auth_token_ttl_s, 0},
            {"bcrypt-cost", F_U64, &c->bcrypt_cost, 0},
            {"cert-file", F_STR, c->client_tls.cert_file, sizeof(c->client_tls.cert_file)},
            {"key-file", F_STR, c->client_tls.key_file, sizeof(c->client_tls.key_file)},
            {"trusted-ca-file", F_STR, c->client_tls.trusted_ca_file,
             sizeof(c->client_tls.trusted_ca_file)},
            {"client-crl-file", F_STR, c->client_tls.crl_file, sizeof(c->client_tls.crl_file)},
            {"client-cert-auth", F_BOOL, &c->client_tls.client_cert_auth, 0},
            {"auto-tls", F_BOOL, &c->client_tls.auto_tls, 0},
            {"peer-cert-file", F_STR, c->peer_tls.cert_file, sizeof(c->peer_tls.cert_file)},
            {"peer-key-file", F_STR, c->peer_tls.key_file, sizeof(c->peer_tls.key_file)},
            {"peer-trusted-ca-file", F_STR, c->peer_tls.trusted_ca_file,
             sizeof(c->peer_tls.trusted_ca_file)},
            {"peer-crl-file", F_STR, c->peer_tls.crl_file, sizeof(c->peer_tls.crl_file)},
            {"peer-client-cert-auth", F_BOOL, &c->peer_tls.client_cert_auth, 0},
            {"peer-auto-tls", F_BOOL, &c->peer_tls.auto_tls, 0},
            {"peer-cert-allowed-cn", F_STR, c->peer_cert_allowed_cn,
             sizeof(c->peer_cert_allowed_cn)},
            {"cipher-suites", F_STR, c->cipher_suites, sizeof(c->cipher_suites)},
            {"enable-grpc-gateway", F_BOOL, &c->enable_grpc_gateway, 0},
            {"enable-v2", F_BOOL, &c->enable_v2, 0},
            {"experimental-enable-v2v3", F_STR, c->v2v3_prefix, sizeof(c->v2v3_prefix)},
            /* accepted for etcd compatibility, no effect in quorum */
            {"enable-pprof", F_IGNORED_BOOL, NULL, 0},
            /* logs (docs/observability.md): base/log.c checks the values */
            {"logger", F_STR, c->logger, sizeof(c->logger)},
            {"log-outputs", F_STR, c->log_outputs, sizeof(c->log_outputs)},
            {"experimental-warning-apply-duration", F_DURATION_NS, &c->warning_apply_ns, 0},
            {"warning-apply-duration", F_DURATION_NS, &c->warning_apply_ns, 0},
        };
        size_t k;
        for (k = 0; k < sizeof(flags) / sizeof(flags[0]); k++)
            if (strcmp(flags[k].name, name) == 0)
                break;
        if (k == sizeof(flags) / sizeof(flags[0])) {
            snprintf(err, errlen, "flag provided but not defined: -%s", name);
            return -EINVAL;
        }
        if (flags[k].t == F_IGNORED_BOOL)
            continue;
        if (flags[k].t == F_BOOL) {
            /* Go's boolean flags: -f alone is true; a value only after = */
            if (val == NULL || strcmp(val, "true") == 0 || strcmp(val, "1") == 0) {
                *(bool *)flags[k].dst = true;
            } else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0) {
                *(bool *)flags[k].dst = false;
            } else {
                snprintf(err, errlen, "invalid boolean value \"%s\" for -%s", val, name);
                return -EINVAL;
            }
            continue;
        }
        if (val == NULL) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "flag needs an argument: -%s", name);
                return -EINVAL;
            }
            val = argv[++i];
        }
        switch (flags[k].t) {
        case F_STR:
            if (strlen(val) >= flags[k].len) {
                snprintf(err, errlen, "--%s: value too long", name);
                return -EINVAL;
            }
            snprintf(flags[k].dst, flags[k].len, "%s", val);
            break;
        case F_U64: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            if (errno || *end || val[0] == '-' || val[0] == '\0') {
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s", val, name);
                return -EINVAL;
            }
            *(uint64_t *)flags[k].dst = v;
            break;
        }
        case F_DURATION_MS:
            if (parse_duration(val, flags[k].dst) != 0) {
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s: time: invalid duration",
                         val, name);
                return -EINVAL;
            }
            break;
        case F_DURATION_NS:
            if (parse_duration_ns(val, flags[k].dst) != 0) {
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s: time: invalid duration",
                         val, name);
                return -EINVAL;
            }
            break;
        case F_URLS:
        case F_CLUSTER:
            *(const char **)flags[k].dst = val;
            break;
        default:
            break;
        }
    }
    if (parse_auto_compaction(c, ac_mode, ac_retention, err, errlen) != 0)
        return -EINVAL;
    if (strcmp(fronts, "auto") == 0) {
        c->front_loops = CONFIG_FRONT_AUTO;
    } else {
        char *end;
        errno = 0;
        unsigned long v = strtoul(fronts, &end, 10);
        if (errno || *end || fronts[0] == '-' || fronts[0] == '\0' || v > CONFIG_MAX_FRONTS) {
            snprintf(err, errlen, "invalid value \"%s\" for flag -front-loops (auto or 0-%d)",
                     fronts, CONFIG_MAX_FRONTS);
            return -EINVAL;
        }
        c->front_loops = (unsigned)v;
    }
    if (c->data_dir[0] == '\0')
        snprintf(c->data_dir, sizeof(c->data_dir), "%s.quorum", c->name);
    if (strcmp(c->initial_cluster_state, "new") != 0 &&
        strcmp(c->initial_cluster_state, "existing") != 0) {
        snprintf(err, errlen, "invalid value \"%s\" for flag -initial-cluster-state",
                 c->initial_cluster_state);
        return -EINVAL;
    }
    if (c->max_txn_ops == 0 || c->max_request_bytes == 0) {
        snprintf(err, errlen, "--max-txn-ops and --max-request-bytes must be positive");
        return -EINVAL;
    }
    if (config_parse_urls(listen_client, c->listen_client, CONFIG_MAX_URLS, &c->n_listen_client,
                          err, errlen) ||
        config_parse_urls(advertise_client ? advertise_client : listen_client, c->advertise_client,
                          CONFIG_MAX_URLS, &c->n_advertise_client, err, errlen) ||
        config_parse_urls(listen_peer, c->listen_peer, CONFIG_MAX_URLS, &c->n_listen_peer, err,
                          errlen) ||
        config_parse_urls(advertise_peer, c->advertise_peer, CONFIG_MAX_URLS, &c->n_advertise_peer,
                          err, errlen))
        return -EINVAL;
    if (check_tls(c, err, errlen) != 0)
        return -EINVAL;
    if (cluster == NULL) {
        /* etcd's default: this member alone, at its advertised peer URLs */
        c->n_initial_cluster = 1;
        struct member_cfg *m = &c->initial_cluster[0];
        snprintf(m->name, sizeof(m->name), "%s", c->name);
        memcpy(m->peer_urls, c->advertise_peer, sizeof(m->peer_urls));
        m->n_peer_urls = c->n_advertise_peer;
    } else if (parse_cluster(c, cluster, err, errlen) != 0) {
        return -EINVAL;
    }
    return 0;
}
