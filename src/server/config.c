/* server/config.c: flag parsing with etcd's names and defaults. */
#include "server/config.h"

#include "base/version.h"
#include "tls/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- URLs, as etcd's types.NewURLs reads them ---- */

/* valid_optional_port: Go's url.validOptionalPort, "" or ":" digits. */
static bool valid_optional_port(const char *p, size_t n)
{
    if (n == 0)
        return true;
    if (p[0] != ':')
        return false;
    for (size_t i = 1; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    return true;
}

/* parse_one reads one URL of a list as etcd 3.4 does: Go's url.Parse (its
 * errors: `parse "U": ...`), then types.NewURLs' checks (scheme, "host:port",
 * no path). unix:// and unixs:// URLs are quorum's: everything after the
 * scheme is the socket's path. */
static int parse_one(const char *in, struct url *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof(*o));
    size_t len = strlen(in);
    /* the scheme: a letter, then letters, digits, + - . up to ':' */
    size_t i = 0;
    bool has_scheme = false;
    for (; i < len; i++) {
        char ch = in[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool other = (ch >= '0' && ch <= '9') || ch == '+' || ch == '-' || ch == '.';
        if (alpha || (other && i > 0))
            continue;
        if (ch == ':') {
            if (i == 0) {
                snprintf(err, errlen, "parse \"%s\": missing protocol scheme", in);
                return -EINVAL;
            }
            has_scheme = true;
        }
        break;
    }
    char scheme[16] = "";
    const char *rest = in;
    if (has_scheme && i < sizeof(scheme)) {
        for (size_t k = 0; k < i; k++)
            scheme[k] = (char)(in[k] >= 'A' && in[k] <= 'Z' ? in[k] - 'A' + 'a' : in[k]);
        scheme[i] = '\0';
        rest = in + i + 1;
    } else if (!has_scheme) {
        const char *colon = strchr(in, ':'), *slash = strchr(in, '/');
        if (colon != NULL && (slash == NULL || colon < slash)) {
            snprintf(err, errlen, "parse \"%s\": first path segment in URL cannot contain colon",
                     in);
            return -EINVAL;
        }
    }
    bool unix_sock = strcmp(scheme, "unix") == 0 || strcmp(scheme, "unixs") == 0;
    if (unix_sock && strncmp(rest, "//", 2) == 0) {
        /* etcd's unix listeners: the socket's path is the URL's host and
         * path ("unix://localhost:2379" -> "localhost:2379") */
        const char *path = rest + 2;
        if (*path == '\0' || strlen(path) >= 108) { /* sun_path */
            snprintf(err, errlen, "bad unix socket path in URL %s", in);
            return -EINVAL;
        }
        o->unix_sock = true;
        o->tls = scheme[4] == 's';
        snprintf(o->host, sizeof(o->host), "%s", path);
        snprintf(o->text, sizeof(o->text), "%s", in);
        return 0;
    }
    /* the authority: after "//", up to a path, query or fragment */
    const char *auth = "", *path = rest;
    size_t alen = 0;
    if (strncmp(rest, "//", 2) == 0) {
        auth = rest + 2;
        alen = strcspn(auth, "/?#");
        path = auth + alen;
    }
    const char *at = memrchr(auth, '@', alen);
    if (at != NULL) {
        alen -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    /* Go's parseHost: the port after the host must be digits */
    if (alen > 0 && auth[0] == '[') {
        const char *rb = memrchr(auth, ']', alen);
        if (rb == NULL) {
            snprintf(err, errlen, "parse \"%s\": missing ']' in host", in);
            return -EINVAL;
        }
        size_t pl = alen - (size_t)(rb + 1 - auth);
        if (!valid_optional_port(rb + 1, pl)) {
            snprintf(err, errlen, "parse \"%s\": invalid port \"%.*s\" after host", in, (int)pl,
                     rb + 1);
            return -EINVAL;
        }
    } else {
        const char *c = memrchr(auth, ':', alen);
        if (c != NULL && !valid_optional_port(c, alen - (size_t)(c - auth))) {
            snprintf(err, errlen, "parse \"%s\": invalid port \"%.*s\" after host", in,
                     (int)(alen - (size_t)(c - auth)), c);
            return -EINVAL;
        }
    }
    bool tls = strcmp(scheme, "https") == 0;
    if (!tls && strcmp(scheme, "http") != 0 && !unix_sock) {
        snprintf(err, errlen, "URL scheme must be http, https, unix, or unixs: %s", in);
        return -EINVAL;
    }
    /* Go's net.SplitHostPort: "host:port", "[v6]:port" */
    char host[256];
    const char *port;
    bool ok;
    if (alen > 0 && auth[0] == '[') {
        const char *rb = memchr(auth, ']', alen);
        ok = rb != NULL && rb + 1 < auth + alen && rb[1] == ':' &&
             memchr(rb + 2, ':', alen - (size_t)(rb + 2 - auth)) == NULL &&
             (size_t)(rb - auth - 1) < sizeof(host);
        if (ok)
            snprintf(host, sizeof(host), "%.*s", (int)(rb - auth - 1), auth + 1);
        port = ok ? rb + 2 : NULL;
    } else {
        const char *c = memchr(auth, ':', alen);
        ok = c != NULL && memchr(c + 1, ':', alen - (size_t)(c + 1 - auth)) == NULL &&
             (size_t)(c - auth) < sizeof(host) && memchr(auth, '[', alen) == NULL &&
             memchr(auth, ']', alen) == NULL;
        if (ok)
            snprintf(host, sizeof(host), "%.*s", (int)(c - auth), auth);
        port = ok ? c + 1 : NULL;
    }
    if (!ok || unix_sock) {
        snprintf(err, errlen, "URL address does not have the form \"host:port\": %s", in);
        return -EINVAL;
    }
    if (*path != '\0' && *path != '?' && *path != '#') {
        snprintf(err, errlen, "URL must not contain a path: %s", in);
        return -EINVAL;
    }
    size_t plen = alen - (size_t)(port - auth);
    long p = 0;
    for (size_t k = 0; k < plen; k++)
        p = p > 65535 ? p : p * 10 + (port[k] - '0');
    if (p > 65535) {
        snprintf(err, errlen, "invalid port \"%.*s\" in URL %s", (int)plen, port, in);
        return -EINVAL;
    }
    o->tls = tls;
    o->port = (int)p;
    snprintf(o->name, sizeof(o->name), "%s", host);
    /* "localhost" is dialed and bound at 127.0.0.1 (as Go's listener binds
     * the first address of the name); other names are resolved where they
     * are dialed (transport/) */
    snprintf(o->host, sizeof(o->host), "%s",
             strcmp(host, "localhost") == 0 ? "127.0.0.1" : host[0] ? host : "0.0.0.0");
    snprintf(o->text, sizeof(o->text), "%s://%.*s", scheme, (int)alen, auth);
    return 0;
}

int config_parse_urls(const char *s, struct url *out, size_t max, size_t *n, char *err,
                      size_t errlen)
{
    *n = 0;
    char tmp[4096];
    if (strlen(s) >= sizeof(tmp)) {
        snprintf(err, errlen, "URL list too long");
        return -EINVAL;
    }
    snprintf(tmp, sizeof(tmp), "%s", s);
    /* Go's strings.Split: every comma separates, empty elements included */
    char *u = tmp;
    for (;;) {
        char *comma = strchr(u, ',');
        if (comma != NULL)
            *comma = '\0';
        if (*n == max) {
            snprintf(err, errlen, "too many URLs in %s", s);
            return -EINVAL;
        }
        while (*u == ' ' || *u == '\t' || *u == '\n' || *u == '\r')
            u++;
        size_t l = strlen(u);
        while (l > 0 && (u[l - 1] == ' ' || u[l - 1] == '\t' || u[l - 1] == '\n' ||
                         u[l - 1] == '\r'))
            u[--l] = '\0';
        if (parse_one(u, &out[*n], err, errlen) != 0)
            return -EINVAL;
        (*n)++;
        if (comma == NULL)
            break;
        u = comma + 1;
    }
    return 0;
}

bool config_host_is_ip(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;
    return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
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

/* parse_cluster reads --initial-cluster as etcd's types.NewURLsMap: comma
 * separated name=URL pairs, a name given twice has several URLs (an element
 * without '=' is a name with an empty URL). */
static int parse_cluster(struct config *c, const char *s, char *err, size_t errlen)
{
    char tmp[8192];
    if (strlen(s) >= sizeof(tmp)) {
        snprintf(err, errlen, "--initial-cluster too long");
        return -EINVAL;
    }
    snprintf(tmp, sizeof(tmp), "%s", s);
    c->n_initial_cluster = 0;
    char *save = NULL;
    for (char *kv = strtok_r(tmp, ",", &save); kv != NULL; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        const char *value = "";
        if (eq != NULL) {
            *eq = '\0';
            value = eq + 1;
        }
        struct member_cfg *m = NULL;
        for (size_t i = 0; i < c->n_initial_cluster; i++)
            if (strcmp(c->initial_cluster[i].name, kv) == 0)
                m = &c->initial_cluster[i];
        if (m == NULL) {
            if (c->n_initial_cluster == CONFIG_MAX_MEMBERS) {
                snprintf(err, errlen, "too many members (at most %d)", CONFIG_MAX_MEMBERS);
                return -EINVAL;
            }
            m = &c->initial_cluster[c->n_initial_cluster++];
            memset(m, 0, sizeof(*m));
            snprintf(m->name, sizeof(m->name), "%s", kv);
        }
        if (m->n_peer_urls == CONFIG_MAX_URLS) {
            snprintf(err, errlen, "too many URLs for %s", m->name);
            return -EINVAL;
        }
        if (parse_one(value, &m->peer_urls[m->n_peer_urls], err, errlen) != 0)
            return -EINVAL;
        m->n_peer_urls++;
    }
    return 0;
}

void config_print_version(FILE *f)
{
    /* etcd's shape ("etcd Version: 3.4.23" ...): quorum's own release, the
     * etcd API it speaks, and the etcd version it reports to etcd clients
     * (Status, /version: base/version.h) */
    fprintf(f, "quorum Version: %s\nAPI Version: %s\netcd Version reported to clients: %s\n",
            QUORUM_VERSION, QUORUM_ETCD_API_VERSION, QUORUM_ETCD_VERSION);
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: quorum [flags]\n"
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
           "  --listen-metrics-urls           more URLs serving /metrics and /health only\n"
           "  --metrics                       basic | extensive (adds gRPC latency histograms)\n"
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
    const char *listen_metrics = NULL;
    const char *listen_zk = NULL; /* the ZooKeeper face (docs/zookeeper.md) */
    char metrics_mode[16] = "basic";

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
            usage(stdout);
            return 1;
        }
        if (strcmp(name, "version") == 0) {
            config_print_version(stdout);
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
            {"listen-metrics-urls", F_URLS, &listen_metrics, 0},
            {"listen-zk-urls", F_URLS, &listen_zk, 0},
            {"metrics", F_STR, metrics_mode, sizeof(metrics_mode)},
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
            /* strconv.ParseBool's spellings */
            static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
            static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False"};
            bool is_yes = val == NULL, is_no = false;
            for (size_t y = 0; val != NULL && y < 6; y++) {
                is_yes = is_yes || strcmp(val, yes[y]) == 0;
                is_no = is_no || strcmp(val, no[y]) == 0;
            }
            if (is_yes) {
                *(bool *)flags[k].dst = true;
            } else if (is_no) {
                *(bool *)flags[k].dst = false;
            } else {
                snprintf(err, errlen, "invalid boolean value \"%s\" for -%s: parse error", val,
                         name);
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
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s: parse error", val, name);
                return -EINVAL;
            }
            *(uint64_t *)flags[k].dst = v;
            break;
        }
        case F_DURATION_MS:
            if (parse_duration(val, flags[k].dst) != 0) {
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s: parse error", val,
                         name);
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
        case F_URLS: {
            /* Go's flag.Value: every value given is checked as it is set */
            static struct url scratch[CONFIG_MAX_URLS];
            size_t nu;
            char why[400];
            if (config_parse_urls(val, scratch, CONFIG_MAX_URLS, &nu, why, sizeof(why)) != 0) {
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s: %s", val, name, why);
                return -EINVAL;
            }
            *(const char **)flags[k].dst = val;
            if (flags[k].dst == (void *)&listen_client)
                c->listen_client_set = true;
            break;
        }
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
        snprintf(err, errlen, "invalid value \"%s\" for flag -initial-cluster-state: invalid value",
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
    c->advertise_client_set = advertise_client != NULL;
    if (listen_metrics != NULL && listen_metrics[0] != '\0' &&
        config_parse_urls(listen_metrics, c->listen_metrics, CONFIG_MAX_URLS,
                          &c->n_listen_metrics, err, errlen))
        return -EINVAL;
    if (listen_zk != NULL && listen_zk[0] != '\0' &&
        config_parse_urls(listen_zk, c->listen_zk, CONFIG_MAX_URLS, &c->n_listen_zk, err,
                          errlen))
        return -EINVAL;
    /* as etcd 3.4: anything but "extensive" is basic */
    c->metrics_extensive = strcmp(metrics_mode, "extensive") == 0;
    if (cluster == NULL) {
        /* etcd's default: this member alone, at its advertised peer URLs */
        c->n_initial_cluster = 1;
        struct member_cfg *m = &c->initial_cluster[0];
        snprintf(m->name, sizeof(m->name), "%s", c->name);
        memcpy(m->peer_urls, c->advertise_peer, sizeof(m->peer_urls));
        m->n_peer_urls = c->n_advertise_peer;
    } else if (parse_cluster(c, cluster, c->cluster_err, sizeof(c->cluster_err)) != 0) {
        /* etcd reads --initial-cluster only for a member not started
         * before: config_validate reports it */
        c->n_initial_cluster = 0;
        if (c->cluster_err[0] == '\0')
            snprintf(c->cluster_err, sizeof(c->cluster_err), "invalid --initial-cluster");
    }
    return 0;
}

void config_usage(FILE *f)
{
    usage(f);
}

/* check_bind_urls: etcd's checkBindURLs, a listener's host must be an IP
 * address or "localhost" */
static int check_bind_urls(const struct url *u, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (u[i].unix_sock || strcmp(u[i].name, "localhost") == 0 || config_host_is_ip(u[i].name))
            continue;
        snprintf(err, errlen, "expected IP in URL for binding (%s)", u[i].text);
        return -EINVAL;
    }
    return 0;
}

/* check_host_urls: etcd's checkHostURLs, an advertised URL names a host */
static int check_host_urls(const char *flag, const struct url *u, size_t n, char *err,
                           size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (u[i].unix_sock || u[i].name[0] != '\0')
            continue;
        char all[CONFIG_MAX_URLS * 300 + 16] = "";
        for (size_t k = 0; k < n; k++)
            snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s%s", k ? "," : "",
                     u[k].text);
        snprintf(err, errlen, "%s \"%s\" must be \"host:port\" (unexpected empty host (%s))", flag,
                 all, u[i].text);
        return -EINVAL;
    }
    return 0;
}

#define MAX_ELECTION_MS 50000 /* etcd's maxElectionMs */

/* validate_rest: the rest of etcd's embed.Config.Validate */
static void validate_rest(const struct config *c, char *why, size_t cap)
{
    if (c->heartbeat_ms == 0)
        snprintf(why, cap, "--heartbeat-interval must be >0 (set to %llums)",
                 (unsigned long long)c->heartbeat_ms);
    else if (c->election_ms == 0)
        snprintf(why, cap, "--election-timeout must be >0 (set to %llums)",
                 (unsigned long long)c->election_ms);
    else if (5 * c->heartbeat_ms > c->election_ms)
        snprintf(why, cap,
                 "--election-timeout[%llums] should be at least as 5 times as "
                 "--heartbeat-interval[%llums]",
                 (unsigned long long)c->election_ms, (unsigned long long)c->heartbeat_ms);
    else if (c->election_ms > MAX_ELECTION_MS)
        snprintf(why, cap,
                 "--election-timeout[%llums] is too long, and should be set less than %dms",
                 (unsigned long long)c->election_ms, MAX_ELECTION_MS);
    else if (c->listen_client_set && !c->advertise_client_set)
        snprintf(why, cap,
                 "--advertise-client-urls is required when --listen-client-urls is set "
                 "explicitly");
}

int config_validate(const struct config *c, char *err, size_t errlen)
{
    char why[1024] = "";
    /* etcd's embed.Config.Validate, in its order */
    if (check_bind_urls(c->listen_peer, c->n_listen_peer, why, sizeof(why)) == 0 &&
        check_bind_urls(c->listen_client, c->n_listen_client, why, sizeof(why)) == 0 &&
        check_host_urls("--initial-advertise-peer-urls", c->advertise_peer, c->n_advertise_peer,
                        why, sizeof(why)) == 0 &&
        check_host_urls("--advertise-client-urls", c->advertise_client, c->n_advertise_client,
                        why, sizeof(why)) == 0)
        validate_rest(c, why, sizeof(why));
    if (why[0] != '\0') {
        snprintf(err, errlen, "error verifying flags, %s. See 'quorum --help'.", why);
        return -EINVAL;
    }
    /* what etcd's listeners refuse (TLS without a certificate, unknown
     * cipher suites, unix peer URLs) */
    return check_tls(c, err, errlen);
}

/* cluster_string: etcd's URLsMap.String(), "name=url" pairs sorted */
static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void config_cluster_string(const struct member_cfg *m, size_t n, char *out, size_t cap)
{
    static char pairs[CONFIG_MAX_MEMBERS * CONFIG_MAX_URLS][440];
    const char *sorted[CONFIG_MAX_MEMBERS * CONFIG_MAX_URLS];
    size_t np = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < m[i].n_peer_urls; k++) {
            snprintf(pairs[np], sizeof(pairs[np]), "%s=%s", m[i].name, m[i].peer_urls[k].text);
            sorted[np] = pairs[np];
            np++;
        }
    qsort(sorted, np, sizeof(*sorted), cmp_cstr);
    out[0] = '\0';
    for (size_t i = 0; i < np; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", sorted[i]);
}

int config_check_cluster(const struct config *c, char *err, size_t errlen)
{
    if (c->cluster_err[0] != '\0') {
        snprintf(err, errlen, "error setting up initial cluster: %s", c->cluster_err);
        return -EINVAL;
    }
    /* etcd's hasLocalMember */
    bool found = false;
    for (size_t i = 0; i < c->n_initial_cluster && !found; i++)
        found = strcmp(c->initial_cluster[i].name, c->name) == 0;
    if (!found) {
        snprintf(err, errlen, "couldn't find local name \"%s\" in the initial cluster configuration",
                 c->name);
        return -EINVAL;
    }
    /* etcd's checkDuplicateURL */
    for (size_t i = 0; i < c->n_initial_cluster; i++)
        for (size_t k = 0; k < c->initial_cluster[i].n_peer_urls; k++)
            for (size_t j = 0; j <= i; j++)
                for (size_t l = 0; l < (j == i ? k : c->initial_cluster[j].n_peer_urls); l++)
                    if (strcmp(c->initial_cluster[i].peer_urls[k].text,
                               c->initial_cluster[j].peer_urls[l].text) == 0) {
                        char all[4096];
                        config_cluster_string(c->initial_cluster, c->n_initial_cluster, all,
                                              sizeof(all));
                        snprintf(err, errlen, "initial cluster %s has duplicate url", all);
                        return -EINVAL;
                    }
    return 0;
}

/* ---- matching URLs by address, as etcd's netutil.URLStringsEqual ---- */

static int cmp_text(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* resolved_text writes |u| with its host resolved as etcd resolves it:
 * an IP address or "localhost" as it is, a name through |resolve|. */
static int resolved_text(const struct url *u, config_resolve_fn resolve, void *arg, char *out,
                         size_t cap, char *why, size_t whycap)
{
    const char *scheme = u->tls ? "https" : "http";
    if (u->unix_sock || strcmp(u->name, "localhost") == 0 || config_host_is_ip(u->name) ||
        u->name[0] == '\0') {
        snprintf(out, cap, "%s", u->text);
        return 0;
    }
    char addr[256], rwhy[300] = "";
    int rv = resolve(u->name, addr, sizeof(addr), rwhy, sizeof(rwhy), arg);
    if (rv != 0) {
        snprintf(why, whycap, "failed to resolve \"%s\" (%s)", u->text, rwhy);
        return rv;
    }
    bool v6 = strchr(addr, ':') != NULL;
    snprintf(out, cap, "%s://%s%s%s:%d", scheme, v6 ? "[" : "", addr, v6 ? "]" : "", u->port);
    return 0;
}

/* quote_list: Go's %q of a []string, ["a" "b"] */
static void quote_list(char (*v)[300], size_t n, char *out, size_t cap)
{
    snprintf(out, cap, "[");
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s\"%s\"", i ? " " : "", v[i]);
    snprintf(out + strlen(out), cap - strlen(out), "]");
}

bool config_urls_equal(const struct url *a, size_t na, const struct url *b, size_t nb,
                       config_resolve_fn resolve, void *arg, char *why, size_t whycap)
{
    static char ra[CONFIG_MAX_URLS][300], rb[CONFIG_MAX_URLS][300];
    why[0] = '\0';
    if (na != nb || na > CONFIG_MAX_URLS) {
        char qa[CONFIG_MAX_URLS * 310], qb[CONFIG_MAX_URLS * 310];
        for (size_t i = 0; i < na && i < CONFIG_MAX_URLS; i++)
            snprintf(ra[i], sizeof(ra[i]), "%s", a[i].text);
        for (size_t i = 0; i < nb && i < CONFIG_MAX_URLS; i++)
            snprintf(rb[i], sizeof(rb[i]), "%s", b[i].text);
        /* etcd's lists come sorted */
        qsort(ra, na < CONFIG_MAX_URLS ? na : CONFIG_MAX_URLS, sizeof(ra[0]), cmp_text);
        qsort(rb, nb < CONFIG_MAX_URLS ? nb : CONFIG_MAX_URLS, sizeof(rb[0]), cmp_text);
        quote_list(ra, na < CONFIG_MAX_URLS ? na : CONFIG_MAX_URLS, qa, sizeof(qa));
        quote_list(rb, nb < CONFIG_MAX_URLS ? nb : CONFIG_MAX_URLS, qb, sizeof(qb));
        snprintf(why, whycap, "len(%s) != len(%s)", qa, qb);
        return false;
    }
    for (size_t i = 0; i < na; i++)
        if (resolved_text(&a[i], resolve, arg, ra[i], sizeof(ra[i]), why, whycap) != 0)
            return false;
    for (size_t i = 0; i < nb; i++)
        if (resolved_text(&b[i], resolve, arg, rb[i], sizeof(rb[i]), why, whycap) != 0)
            return false;
    qsort(ra, na, sizeof(ra[0]), cmp_text);
    qsort(rb, nb, sizeof(rb[0]), cmp_text);
    for (size_t i = 0; i < na; i++)
        if (strcmp(ra[i], rb[i]) != 0) {
            snprintf(why, whycap, "resolved urls: \"%s\" != \"%s\"", ra[i], rb[i]);
            return false;
        }
    return true;
}

static const struct member_cfg *self_member(const struct config *c)
{
    for (size_t i = 0; i < c->n_initial_cluster; i++)
        if (strcmp(c->initial_cluster[i].name, c->name) == 0)
            return &c->initial_cluster[i];
    return NULL;
}

static bool has_text(const struct url *u, size_t n, const char *text)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(u[i].text, text) == 0)
            return true;
    return false;
}

/* sorted_texts: the URLs' texts, sorted, joined by ",", or each prefixed
 * with "name=" */
static void sorted_texts(const struct url *u, size_t n, const char *name, char *out, size_t cap)
{
    static char t[CONFIG_MAX_URLS][300];
    for (size_t i = 0; i < n && i < CONFIG_MAX_URLS; i++)
        snprintf(t[i], sizeof(t[i]), "%s", u[i].text);
    qsort(t, n, sizeof(t[0]), cmp_text);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s%s%s", i ? "," : "", name ? name : "",
                 name ? "=" : "", t[i]);
}

int config_advertise_matches(const struct config *c, config_resolve_fn resolve, void *arg,
                             char *err, size_t errlen)
{
    const struct member_cfg *m = self_member(c);
    if (m == NULL)
        return config_check_cluster(c, err, errlen);
    char why[2048];
    if (config_urls_equal(c->advertise_peer, c->n_advertise_peer, m->peer_urls, m->n_peer_urls,
                          resolve, arg, why, sizeof(why)))
        return 0;
    /* etcd's advertiseMatchesCluster: say which URLs differ, as written */
    char ap[CONFIG_MAX_URLS * 300], missing[CONFIG_MAX_URLS * 420] = "";
    sorted_texts(c->advertise_peer, c->n_advertise_peer, NULL, ap, sizeof(ap));
    struct url miss[CONFIG_MAX_URLS];
    size_t nm = 0;
    for (size_t i = 0; i < m->n_peer_urls; i++)
        if (!has_text(c->advertise_peer, c->n_advertise_peer, m->peer_urls[i].text))
            miss[nm++] = m->peer_urls[i];
    if (nm > 0) {
        sorted_texts(miss, nm, c->name, missing, sizeof(missing));
        snprintf(err, errlen,
                 "--initial-cluster has %s but missing from --initial-advertise-peer-urls=%s (%s)",
                 missing, ap, why);
        return -EINVAL;
    }
    for (size_t i = 0; i < c->n_advertise_peer; i++)
        if (!has_text(m->peer_urls, m->n_peer_urls, c->advertise_peer[i].text))
            miss[nm++] = c->advertise_peer[i];
    if (nm > 0) {
        char umap[CONFIG_MAX_URLS * 420];
        sorted_texts(miss, nm, NULL, missing, sizeof(missing));
        sorted_texts(c->advertise_peer, c->n_advertise_peer, c->name, umap, sizeof(umap));
        snprintf(err, errlen,
                 "--initial-advertise-peer-urls has %s but missing from --initial-cluster=%s",
                 missing, umap);
        return -EINVAL;
    }
    char umap[CONFIG_MAX_URLS * 420];
    sorted_texts(m->peer_urls, m->n_peer_urls, c->name, umap, sizeof(umap));
    snprintf(err, errlen, "failed to resolve %s to match --initial-cluster=%s (%s)", ap, umap, why);
    return -EINVAL;
}

/* ---- joining: the members the cluster has, matched to --initial-cluster ---- */

static int cmp_remote(const void *a, const void *b)
{
    uint64_t x = ((const struct config_remote_member *)a)->id;
    uint64_t y = ((const struct config_remote_member *)b)->id;
    return x < y ? -1 : x > y;
}

/* describe: etcd's %s of a RaftCluster ({ClusterID:... Members:[...] ...}) */
static void describe(const struct config_remote_member *ms, size_t n, uint64_t cluster_id,
                     char *out, size_t cap)
{
    snprintf(out, cap, "{ClusterID:%llx Members:[", (unsigned long long)cluster_id);
    for (size_t i = 0; i < n; i++) {
        const struct config_remote_member *m = &ms[i];
        snprintf(out + strlen(out), cap - strlen(out), "%s&{ID:%llx RaftAttributes:{PeerURLs:[",
                 i ? " " : "", (unsigned long long)m->id);
        for (size_t k = 0; k < m->n_peer; k++)
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", k ? " " : "", m->peer[k]);
        snprintf(out + strlen(out), cap - strlen(out),
                 "] IsLearner:%s} Attributes:{Name:%s ClientURLs:[", m->learner ? "true" : "false",
                 m->name);
        for (size_t k = 0; k < m->n_client; k++)
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", k ? " " : "", m->client[k]);
        snprintf(out + strlen(out), cap - strlen(out), "]}}");
    }
    snprintf(out + strlen(out), cap - strlen(out), "] RemovedMemberIDs:[]}");
}

int config_assign_ids(const struct config *c, struct config_remote_member *ms, size_t n,
                      uint64_t cluster_id, config_resolve_fn resolve, void *arg, uint64_t *ids,
                      char *err, size_t errlen)
{
    qsort(ms, n, sizeof(*ms), cmp_remote); /* etcd walks them by id */
    static char why[8192];
    why[0] = '\0';
    if (n != c->n_initial_cluster) {
        snprintf(why, sizeof(why), "member count is unequal");
    } else {
        for (size_t i = 0; i < c->n_initial_cluster; i++)
            ids[i] = 0;
        for (size_t i = 0; i < n && why[0] == '\0'; i++) {
            struct url u[CONFIG_MAX_URLS];
            size_t nu = 0;
            char perr[400], rerr[2048] = "";
            for (size_t k = 0; k < ms[i].n_peer && nu < CONFIG_MAX_URLS; k++)
                if (config_parse_urls(ms[i].peer[k], &u[nu], 1, &(size_t){0}, perr,
                                      sizeof(perr)) == 0)
                    nu++;
            bool ok = false;
            for (size_t j = 0; j < c->n_initial_cluster && !ok; j++)
                if (config_urls_equal(u, nu, c->initial_cluster[j].peer_urls,
                                      c->initial_cluster[j].n_peer_urls, resolve, arg, rerr,
                                      sizeof(rerr)))
                    ids[j] = ms[i].id, ok = true;
            if (!ok) {
                char urls[CONFIG_MAX_URLS * 310] = "[";
                for (size_t k = 0; k < ms[i].n_peer; k++)
                    snprintf(urls + strlen(urls), sizeof(urls) - strlen(urls), "%s%s",
                             k ? " " : "", ms[i].peer[k]);
                snprintf(urls + strlen(urls), sizeof(urls) - strlen(urls), "]");
                snprintf(why, sizeof(why),
                         "PeerURLs: no match found for existing member (%llx, %s), last resolver "
                         "error (%s)",
                         (unsigned long long)ms[i].id, urls, rerr[0] ? rerr : "<nil>");
            }
        }
    }
    if (why[0] == '\0')
        return 0;
    static char desc[CONFIG_MAX_MEMBERS * 2400];
    describe(ms, n, cluster_id, desc, sizeof(desc));
    snprintf(err, errlen, "error validating peerURLs %s: %s", desc, why);
    return -EINVAL;
}
