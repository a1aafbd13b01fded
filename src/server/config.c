/* server/config.c: etcd 3.4's configuration surface: its flags (Go's flag
 * syntax), ETCD_* variables and YAML config file, from one table that
 * also makes --help and docs/configuration.md; then the checks etcd makes
 * of the result. */
#include "server/config.h"

#include "base/version.h"
#include "tls/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

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

/* ---- the flags: one table for argv, ETCD_* variables, the config file,
 * --help and docs/configuration.md ---- */

enum ftype {
    T_STR,     /* Go string */
    T_BOOL,    /* Go bool: strconv.ParseBool */
    T_UINT,    /* Go uint / uint64: strconv.ParseUint(s, 0, 64) */
    T_UINT32,  /* etcd's Uint32Value (--max-concurrent-streams) */
    T_INT,     /* Go int / int64 */
    T_DUR_MS,  /* Go time.Duration, kept in ms */
    T_DUR_NS,  /* Go time.Duration, kept in ns */
    T_URLS,    /* etcd's URLs value: checked as set, read at the end */
    T_SELECT,  /* etcd's SelectiveStringValue */
    T_STRS,    /* a comma-separated list, kept as given */
    T_CORS,    /* URLs or "*" (etcd's UniqueURLsWithExceptions "*") */
    T_IGNORED, /* etcd's IgnoredFlag: a boolean-like flag, warned about */
};

/* what quorum does with a flag (docs/configuration.md) */
enum policy {
    P_IMPL,    /* as etcd */
    P_CLUSTER, /* as etcd: bootstrap, membership, WAL/snapshot retention */
    P_NONE,    /* accepted: no effect, and none is needed (see note) */
    P_WARN,    /* accepted; a value other than the default is logged as without effect */
    P_REFUSE,  /* accepted by the parser; a value other than the default is refused at start */
};

/* where a flag's value goes: the config, or the raw values read at the end */
enum base { B_CFG, B_RAW, B_NONE };

static struct raw {
    char listen_client[4096], advertise_client[4096], listen_peer[4096], advertise_peer[4096];
    char listen_metrics[4096];
    char listen_zk[4096];
    char initial_cluster[8192];
    char ac_mode[32], ac_retention[64], fronts[16], metrics[32];
    char log_output[4096]; /* --log-output, etcd 3.4's deprecated name */
    int64_t quota, batch_limit;
    bool version;
} raw;

struct flagdef {
    const char *name;
    enum ftype type;
    enum base base;
    size_t off, size;
    const char *def;   /* set before anything else (NULL: nothing) */
    const char *shown; /* the default as --help shows it */
    const char *group; /* --help section; NULL: not listed (as in etcd) */
    const char *help;
    enum policy policy;
    const char *note; /* what quorum does, when not simply etcd's */
    const char
        *ytype;       /* the Go type etcd's config file holds it in; NULL: not read from the file */
    const char *ykey; /* its key in the file, when not the flag's name */
};

#define CF(f) B_CFG, offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define RF(f) B_RAW, offsetof(struct raw, f), sizeof(((struct raw *)0)->f)
#define NF B_NONE, 0, 0

static const char G_MEMBER[] = "Member", G_CLUSTER[] = "Clustering", G_SECURITY[] = "Security",
                  G_AUTH[] = "Auth", G_PROF[] = "Profiling and Monitoring", G_LOG[] = "Logging",
                  G_PROXY[] = "v2 Proxy (to be deprecated in v4)", G_EXP[] = "Experimental feature",
                  G_UNSAFE[] = "Unsafe feature", G_DEPR[] = "TO BE DEPRECATED",
                  G_QUORUM[] = "quorum's own";

static const char *const choices_state[] = {"new", "existing", NULL};
static const char *const choices_fallback[] = {"proxy", "exit", NULL};
static const char *const choices_proxy[] = {"off", "readonly", "on", NULL};

static const struct flagdef flags[] = {
    {"config-file", T_STR, CF(config_file), "", "''", NULL,
     "Path to the server configuration file.", P_IMPL, NULL, NULL, NULL},
    /* Member */
    {"name", T_STR, CF(name), "default", "'default'", G_MEMBER,
     "Human-readable name for this member.", P_IMPL, NULL, "string", NULL},
    {"data-dir", T_STR, CF(data_dir), "", "'${name}.etcd'", G_MEMBER,
     "Path to the data directory.", P_IMPL,
     "as etcd; without it, a ${name}.quorum an earlier quorum release made is used when "
     "there is no ${name}.etcd (both: refused)",
     "string", NULL},
    {"wal-dir", T_STR, CF(wal_dir), "", "''", G_MEMBER, "Path to the dedicated wal directory.",
     P_IMPL,
     "as etcd: quorum's log segments live there (built aside as <wal-dir>.tmp and renamed "
     "in on a first start); .snap files stay in <data-dir>/member/snap",
     "string", NULL},
    {"snapshot-count", T_UINT, CF(snapshot_count), "100000", "'100000'", G_MEMBER,
     "Number of committed transactions to trigger a snapshot to disk.", P_IMPL, NULL, "uint64",
     NULL},
    {"heartbeat-interval", T_UINT, CF(heartbeat_ms), "100", "'100'", G_MEMBER,
     "Time (in milliseconds) of a heartbeat interval.", P_IMPL, NULL, "uint", NULL},
    {"election-timeout", T_UINT, CF(election_ms), "1000", "'1000'", G_MEMBER,
     "Time (in milliseconds) for an election to timeout. See tuning documentation for details.",
     P_IMPL, NULL, "uint", NULL},
    {"initial-election-tick-advance", T_BOOL, CF(initial_election_tick_advance), "true", "'true'",
     G_MEMBER, "Whether to fast-forward initial election ticks on boot for faster election.",
     P_NONE, "quorum's Raft starts every member with a randomized election timeout", "bool", NULL},
    {"listen-peer-urls", T_URLS, RF(listen_peer), "http://localhost:2380",
     "'http://localhost:2380'", G_MEMBER, "List of URLs to listen on for peer traffic.", P_IMPL,
     NULL, "string", NULL},
    {"listen-client-urls", T_URLS, RF(listen_client), "http://localhost:2379",
     "'http://localhost:2379'", G_MEMBER, "List of URLs to listen on for client traffic.", P_IMPL,
     "as etcd; unix:// and unixs:// sockets too", "string", NULL},
    {"max-snapshots", T_UINT, CF(max_snapshots), "5", "'5'", G_MEMBER,
     "Maximum number of snapshot files to retain (0 is unlimited).", P_CLUSTER, NULL, "uint", NULL},
    {"max-wals", T_UINT, CF(max_wals), "5", "'5'", G_MEMBER,
     "Maximum number of wal files to retain (0 is unlimited).", P_CLUSTER, NULL, "uint", NULL},
    {"quota-backend-bytes", T_INT, RF(quota), "0", "'0'", G_MEMBER,
     "Raise alarms when backend size exceeds the given quota (0 defaults to low space quota).",
     P_IMPL, "as etcd: 0 is 2 GiB, a negative value disables the quota", "int64", NULL},
    {"backend-batch-interval", T_DUR_MS, CF(backend_batch_interval_ms), NULL, "''", G_MEMBER,
     "BackendBatchInterval is the maximum time before commit the backend transaction.", P_WARN,
     "quorum's LMDB batch commits every 100 ms or 10000 entries (etcd's defaults)", "time.Duration",
     NULL},
    {"backend-batch-limit", T_INT, CF(backend_batch_limit), "0", "'0'", G_MEMBER,
     "BackendBatchLimit is the maximum operations before commit the backend transaction.", P_WARN,
     "quorum's LMDB batch commits every 100 ms or 10000 entries (etcd's defaults)", "int", NULL},
    {"max-txn-ops", T_UINT, CF(max_txn_ops), "128", "'128'", G_MEMBER,
     "Maximum number of operations permitted in a transaction.", P_IMPL, NULL, "uint", NULL},
    {"max-request-bytes", T_UINT, CF(max_request_bytes), "1572864", "'1572864'", G_MEMBER,
     "Maximum client request size in bytes the server will accept.", P_IMPL, NULL, "uint", NULL},
    {"max-concurrent-streams", T_UINT32, CF(max_concurrent_streams), "4294967295",
     "'math.MaxUint32'", G_MEMBER,
     "Maximum concurrent streams that each client can open at a time.", P_IMPL,
     "advertised in HTTP/2 SETTINGS (4294967295 by default, as etcd) and enforced per "
     "connection", "uint32", NULL},
    {"grpc-keepalive-min-time", T_DUR_MS, CF(grpc_keepalive_min_time_ms), "5s", "'5s'", G_MEMBER,
     "Minimum duration interval that a client should wait before pinging server.", P_IMPL,
     "a client pinging more often gets GOAWAY ENHANCE_YOUR_CALM \"too_many_pings\"",
     "time.Duration", NULL},
    {"grpc-keepalive-interval", T_DUR_MS, CF(grpc_keepalive_interval_ms), "2h", "'2h'", G_MEMBER,
     "Frequency duration of server-to-client ping to check if a connection is alive (0 to "
     "disable).",
     P_IMPL,
     "as etcd 3.4: a PING after this long without input; 0 (here or in the timeout) is "
     "grpc-go's default, 2h, not off",
     "time.Duration", NULL},
    {"grpc-keepalive-timeout", T_DUR_MS, CF(grpc_keepalive_timeout_ms), "20s", "'20s'", G_MEMBER,
     "Additional duration of wait before closing a non-responsive connection (0 to disable).",
     P_IMPL, "as etcd 3.4: 0 is grpc-go's default, 20s, not off", "time.Duration", NULL},
    /* Clustering */
    {"initial-advertise-peer-urls", T_URLS, RF(advertise_peer), "http://localhost:2380",
     "'http://localhost:2380'", G_CLUSTER,
     "List of this member's peer URLs to advertise to the rest of the cluster.", P_IMPL, NULL,
     "string", NULL},
    {"initial-cluster", T_STR, RF(initial_cluster), NULL, "'default=http://localhost:2380'",
     G_CLUSTER, "Initial cluster configuration for bootstrapping.", P_IMPL, NULL, "string", NULL},
    {"initial-cluster-state", T_SELECT, CF(initial_cluster_state), "new", "'new'", G_CLUSTER,
     "Initial cluster state ('new' or 'existing').", P_IMPL, NULL, "string", NULL},
    {"initial-cluster-token", T_STR, CF(initial_cluster_token), "etcd-cluster", "'etcd-cluster'",
     G_CLUSTER,
     "Initial cluster token for the etcd cluster during bootstrap.\nSpecifying this can protect "
     "you from unintended cross-cluster interaction when running multiple clusters.",
     P_IMPL, NULL, "string", NULL},
    {"advertise-client-urls", T_URLS, RF(advertise_client), NULL, "'http://localhost:2379'",
     G_CLUSTER,
     "List of this member's client URLs to advertise to the public.\nThe client URLs advertised "
     "should be accessible to machines that talk to etcd cluster. etcd client libraries parse "
     "these URLs to connect to the cluster.",
     P_IMPL, NULL, "string", NULL},
    {"discovery", T_STR, CF(discovery), "", "''", G_CLUSTER,
     "Discovery URL used to bootstrap the cluster.", P_REFUSE,
     "quorum bootstraps from a static --initial-cluster or --discovery-srv only", "string", NULL},
    {"discovery-fallback", T_SELECT, CF(discovery_fallback), "proxy", "'proxy'", G_CLUSTER,
     "Expected behavior ('exit' or 'proxy') when discovery services fails.\n\"proxy\" supports "
     "v2 API only.",
     P_NONE, "checked as etcd; it applies to --discovery only", "string", NULL},
    {"discovery-proxy", T_STR, CF(discovery_proxy), "", "''", G_CLUSTER,
     "HTTP proxy to use for traffic to discovery service.", P_NONE,
     "it applies to --discovery only", "string", NULL},
    {"discovery-srv", T_STR, CF(discovery_srv), "", "''", G_CLUSTER,
     "DNS srv domain used to bootstrap the cluster.", P_CLUSTER, NULL, "string", NULL},
    {"discovery-srv-name", T_STR, CF(discovery_srv_name), "", "''", G_CLUSTER,
     "Suffix to the dns srv name queried when bootstrapping.", P_CLUSTER, NULL, "string", NULL},
    {"strict-reconfig-check", T_BOOL, CF(strict_reconfig_check), "true", "'true'", G_CLUSTER,
     "Reject reconfiguration requests that would cause quorum loss.", P_CLUSTER, NULL, "bool",
     NULL},
    {"pre-vote", T_BOOL, CF(pre_vote), "false", "'false'", G_CLUSTER,
     "Enable to run an additional Raft election phase.", P_NONE,
     "quorum's Raft always runs the pre-vote phase (with check-quorum)", "bool", NULL},
    {"auto-compaction-retention", T_STR, RF(ac_retention), "0", "'0'", G_CLUSTER,
     "Auto compaction retention length. 0 means disable auto compaction.", P_IMPL, NULL, "string",
     NULL},
    {"auto-compaction-mode", T_STR, RF(ac_mode), "periodic", "'periodic'", G_CLUSTER,
     "Interpret 'auto-compaction-retention' one of: periodic|revision. 'periodic' for duration "
     "based retention, defaulting to hours if no time unit is provided (e.g. '5m'). 'revision' "
     "for revision number based retention.",
     P_IMPL, NULL, "string", NULL},
    {"enable-v2", T_BOOL, CF(enable_v2), "false", "'false'", G_CLUSTER,
     "Accept etcd V2 client requests.", P_IMPL,
     "as etcd: the v2 keys API, emulated on the v3 store (docs/http.md)", "bool", NULL},
    /* Security */
    {"cert-file", T_STR, CF(client_tls.cert_file), "", "''", G_SECURITY,
     "Path to the client server TLS cert file.", P_IMPL, NULL, "string",
     "client-transport-security.cert-file"},
    {"key-file", T_STR, CF(client_tls.key_file), "", "''", G_SECURITY,
     "Path to the client server TLS key file.", P_IMPL, NULL, "string",
     "client-transport-security.key-file"},
    {"client-cert-auth", T_BOOL, CF(client_tls.client_cert_auth), "false", "'false'", G_SECURITY,
     "Enable client cert authentication.", P_IMPL, NULL, "bool",
     "client-transport-security.client-cert-auth"},
    {"client-crl-file", T_STR, CF(client_tls.crl_file), "", "''", G_SECURITY,
     "Path to the client certificate revocation list file.", P_IMPL, NULL, NULL, NULL},
    {"client-cert-allowed-hostname", T_STR, CF(client_cert_allowed_hostname), "", "''", G_SECURITY,
     "Allowed TLS hostname for client cert authentication.", P_REFUSE,
     "quorum does not check client certificates' host names, and would admit clients this flag "
     "keeps out",
     NULL, NULL},
    {"trusted-ca-file", T_STR, CF(client_tls.trusted_ca_file), "", "''", G_SECURITY,
     "Path to the client server TLS trusted CA cert file.", P_IMPL, NULL, "string",
     "client-transport-security.trusted-ca-file"},
    {"auto-tls", T_BOOL, CF(client_tls.auto_tls), "false", "'false'", G_SECURITY,
     "Client TLS using generated certificates.", P_IMPL, NULL, "bool",
     "client-transport-security.auto-tls"},
    {"peer-cert-file", T_STR, CF(peer_tls.cert_file), "", "''", G_SECURITY,
     "Path to the peer server TLS cert file.", P_IMPL, NULL, "string",
     "peer-transport-security.cert-file"},
    {"peer-key-file", T_STR, CF(peer_tls.key_file), "", "''", G_SECURITY,
     "Path to the peer server TLS key file.", P_IMPL, NULL, "string",
     "peer-transport-security.key-file"},
    {"peer-client-cert-auth", T_BOOL, CF(peer_tls.client_cert_auth), "false", "'false'", G_SECURITY,
     "Enable peer client cert authentication.", P_IMPL, NULL, "bool",
     "peer-transport-security.client-cert-auth"},
    {"peer-trusted-ca-file", T_STR, CF(peer_tls.trusted_ca_file), "", "''", G_SECURITY,
     "Path to the peer server TLS trusted CA file.", P_IMPL, NULL, "string",
     "peer-transport-security.trusted-ca-file"},
    {"peer-cert-allowed-cn", T_STR, CF(peer_cert_allowed_cn), "", "''", G_SECURITY,
     "Required CN for client certs connecting to the peer endpoint.", P_IMPL, NULL, NULL, NULL},
    {"peer-cert-allowed-hostname", T_STR, CF(peer_cert_allowed_hostname), "", "''", G_SECURITY,
     "Allowed TLS hostname for inter peer authentication.", P_REFUSE,
     "quorum checks a peer's certificate by --peer-cert-allowed-cn only, and would admit peers "
     "this flag keeps out",
     NULL, NULL},
    {"peer-auto-tls", T_BOOL, CF(peer_tls.auto_tls), "false", "'false'", G_SECURITY,
     "Peer TLS using self-generated certificates if --peer-key-file and --peer-cert-file are not "
     "provided.",
     P_IMPL, NULL, "bool", "peer-transport-security.auto-tls"},
    {"peer-crl-file", T_STR, CF(peer_tls.crl_file), "", "''", G_SECURITY,
     "Path to the peer certificate revocation list file.", P_IMPL, NULL, NULL, NULL},
    {"cipher-suites", T_STRS, CF(cipher_suites), "", "''", G_SECURITY,
     "Comma-separated list of supported TLS cipher suites between client/server and peers "
     "(empty will be auto-populated by Go).",
     P_IMPL, "as etcd, Go's names, mapped to OpenSSL's", "[]string", NULL},
    {"cors", T_CORS, CF(cors), "*", "'*'", G_SECURITY,
     "Comma-separated whitelist of origins for CORS, or cross-origin resource sharing, (empty "
     "or * means allow all).",
     P_REFUSE, "checked as etcd; quorum allows every origin", "string", NULL},
    {"host-whitelist", T_STRS, CF(host_whitelist), "*", "'*'", G_SECURITY,
     "Acceptable hostnames from HTTP client requests, if server is not secure (empty or * means "
     "allow all).",
     P_REFUSE, "quorum accepts every Host header", "string", NULL},
    /* Auth */
    {"auth-token", T_STR, CF(auth_token), "simple", "'simple'", G_AUTH,
     "Specify a v3 authentication token type and its options ('simple' or 'jwt').", P_IMPL, NULL,
     "string", NULL},
    {"bcrypt-cost", T_UINT, CF(bcrypt_cost), "10", "10", G_AUTH,
     "Specify the cost / strength of the bcrypt algorithm for hashing auth passwords. Valid "
     "values are between 4 and 31.",
     P_IMPL, NULL, "uint", NULL},
    {"auth-token-ttl", T_UINT, CF(auth_token_ttl_s), "300", "300", G_AUTH,
     "Time (in seconds) of the auth-token-ttl.", P_IMPL, NULL, "uint", NULL},
    /* Profiling and Monitoring */
    {"enable-pprof", T_BOOL, CF(enable_pprof), "false", "'false'", G_PROF,
     "Enable runtime profiling data via HTTP server. Address is at client URL + "
     "\"/debug/pprof/\"",
     P_WARN, "Go's profiler has no counterpart in quorum", "bool", NULL},
    {"metrics", T_STR, RF(metrics), "basic", "'basic'", G_PROF,
     "Set level of detail for exported metrics, specify 'extensive' to include histogram "
     "metrics.",
     P_IMPL, NULL, "string", NULL},
    {"listen-metrics-urls", T_URLS, RF(listen_metrics), NULL, "''", G_PROF,
     "List of URLs to listen on for the metrics and health endpoints.", P_IMPL, NULL, "string",
     NULL},
    /* Logging */
    {"logger", T_STR, CF(logger), "capnslog", "'capnslog'", G_LOG,
     "Specify 'zap' for structured logging or 'capnslog'. [WARN] 'capnslog' will be deprecated "
     "in v3.5.",
     P_IMPL, NULL, "string", NULL},
    {"log-outputs", T_STRS, CF(log_outputs), "default", "'default'", G_LOG,
     "Specify 'stdout' or 'stderr' to skip journald logging even when running under systemd, or "
     "list of comma separated output targets.",
     P_IMPL, NULL, "[]string", NULL},
    {"log-level", T_STR, CF(log_level), "info", "'info'", G_LOG,
     "Configures log level. Only supports debug, info, warn, error, panic, or fatal.", P_IMPL, NULL,
     "string", NULL},
    {"log-output", T_STRS, RF(log_output), "", "'default'", NULL,
     "[TO BE DEPRECATED IN v3.5] use '--log-outputs'.", P_IMPL,
     "etcd 3.4's older name of --log-outputs (used when --log-outputs is not given)", "[]string",
     NULL},
    /* v2 proxy */
    {"proxy", T_SELECT, CF(proxy), "off", "'off'", G_PROXY,
     "Proxy mode setting ('off', 'readonly' or 'on').", P_REFUSE, "quorum has no v2 proxy mode",
     "string", NULL},
    {"proxy-failure-wait", T_UINT, NF, "5000", "5000", G_PROXY,
     "Time (in milliseconds) an endpoint will be held in a failed state.", P_NONE,
     "checked as etcd; proxy mode only", "uint", NULL},
    {"proxy-refresh-interval", T_UINT, NF, "30000", "30000", G_PROXY,
     "Time (in milliseconds) of the endpoints refresh interval.", P_NONE,
     "checked as etcd; proxy mode only", "uint", NULL},
    {"proxy-dial-timeout", T_UINT, NF, "1000", "1000", G_PROXY,
     "Time (in milliseconds) for a dial to timeout.", P_NONE, "checked as etcd; proxy mode only",
     "uint", NULL},
    {"proxy-write-timeout", T_UINT, NF, "5000", "5000", G_PROXY,
     "Time (in milliseconds) for a write to timeout.", P_NONE, "checked as etcd; proxy mode only",
     "uint", NULL},
    {"proxy-read-timeout", T_UINT, NF, "0", "0", G_PROXY,
     "Time (in milliseconds) for a read to timeout.", P_NONE, "checked as etcd; proxy mode only",
     "uint", NULL},
    /* Experimental */
    {"experimental-initial-corrupt-check", T_BOOL, CF(initial_corrupt_check), "false", "'false'",
     G_EXP, "Enable to check data corruption before serving any client/peer traffic.", P_CLUSTER,
     NULL, "bool", NULL},
    {"experimental-corrupt-check-time", T_DUR_MS, CF(corrupt_check_ms), "0s", "'0s'", G_EXP,
     "Duration of time between cluster corruption check passes.", P_IMPL, NULL, "time.Duration",
     NULL},
    {"experimental-enable-v2v3", T_STR, CF(v2v3_prefix), "", "''", G_EXP,
     "Serve v2 requests through the v3 backend under a given prefix.", P_IMPL, NULL, "string",
     NULL},
    {"experimental-backend-bbolt-freelist-type", T_STR, CF(bbolt_freelist_type), "array", "'array'",
     G_EXP,
     "ExperimentalBackendFreelistType specifies the type of freelist that boltdb backend "
     "uses(array and map are supported types).",
     P_NONE, "the backend is LMDB, which has no such choice", "string", NULL},
    {"experimental-enable-lease-checkpoint", T_BOOL, CF(lease_checkpoint), "false", "'false'",
     G_EXP,
     "ExperimentalEnableLeaseCheckpoint enables primary lessor to persist lease remainingTTL to "
     "prevent indefinite auto-renewal of long lived leases.",
     P_NONE, "quorum's leader always checkpoints remaining TTLs through the log", "bool", NULL},
    {"experimental-compaction-batch-limit", T_INT, RF(batch_limit), "1000", "1000", G_EXP,
     "ExperimentalCompactionBatchLimit sets the maximum revisions deleted in each compaction "
     "batch.",
     P_IMPL, NULL, "int", NULL},
    {"experimental-peer-skip-client-san-verification", T_BOOL, CF(peer_skip_client_san), "false",
     "'false'", G_EXP, "Skip verification of SAN field in client certificate for peer connections.",
     P_NONE,
     "quorum does not check the SAN of a peer's client certificate (as with this flag "
     "on)",
     NULL, NULL},
    {"experimental-watch-progress-notify-interval", T_DUR_MS, CF(watch_progress_ms), "10m", "'10m'",
     G_EXP, "Duration of periodical watch progress notification.", P_IMPL, NULL, "time.Duration",
     NULL},
    {"experimental-warning-apply-duration", T_DUR_NS, CF(warning_apply_ns), "100ms", "'100ms'",
     G_EXP, "Warning is generated if requests take more than this duration.", P_IMPL, NULL,
     "time.Duration", NULL},
    {"experimental-enable-lease-checkpoint-persist", T_BOOL, CF(lease_checkpoint_persist), "false",
     "'false'", NULL,
     "Enable persisting remainingTTL to prevent indefinite auto-renewal of long lived leases.",
     P_NONE, "checkpointed TTLs are always persisted", "bool", NULL},
    /* Unsafe */
    {"force-new-cluster", T_BOOL, CF(force_new_cluster), "false", "'false'", G_UNSAFE,
     "Force to create a new one-member cluster.", P_CLUSTER, NULL, "bool", NULL},
    {"unsafe-no-fsync", T_BOOL, CF(unsafe_no_fsync), "false", "'false'", NULL,
     "Disables fsync, unsafe, will cause data loss.", P_CLUSTER, NULL, "bool", NULL},
    /* To be deprecated */
    {"debug", T_BOOL, CF(debug), "false", "'false'", G_DEPR,
     "Enable debug-level logging for etcd. [WARN] Will be deprecated in v3.5. Use "
     "'--log-level=debug' instead.",
     P_IMPL, "as etcd 3.4: the same as --log-level=debug", "bool", NULL},
    {"log-package-levels", T_STR, CF(log_package_levels), "", "''", G_DEPR,
     "Specify a particular log level for each etcd package (eg: "
     "'etcdmain=CRITICAL,etcdserver=DEBUG').",
     P_WARN, "quorum has one level for all modules (--log-level)", "string", NULL},
    /* hidden in etcd's --help */
    {"enable-grpc-gateway", T_BOOL, CF(enable_grpc_gateway), "true", "'true'", NULL,
     "Enable GRPC gateway.", P_IMPL, NULL, "bool", NULL},
    {"version", T_BOOL, RF(version), "false", "'false'", NULL, "Print the version and exit.",
     P_IMPL, NULL, NULL, NULL},
    /* quorum's own */
    {"front-loops", T_STR, RF(fronts), "auto", "'auto'", G_QUORUM,
     "Threads owning client connections: auto (the CPUs allowed, less one for the core; 0 on "
     "one CPU) or a number, 0 = the core serves clients.",
     P_IMPL, NULL, "string", NULL},
    {"pin-threads", T_BOOL, CF(pin_threads), "false", "'false'", G_QUORUM,
     "Pin the core and each front loop to a CPU.", P_IMPL, NULL, "bool", NULL},
    {"auto-compaction-check-interval", T_DUR_MS, CF(auto_compaction_check_ms), "0", "'5m'",
     G_QUORUM, "How often revision-mode auto compaction checks (for tests).", P_IMPL, NULL,
     "time.Duration", NULL},
    {"experimental-compaction-sleep-interval", T_DUR_MS, CF(compaction_sleep_ms), "0", "'0'",
     G_QUORUM, "Pause between compaction steps (etcd 3.5's flag; 0: none).", P_IMPL, NULL,
     "time.Duration", NULL},
    {"listen-zk-urls", T_URLS, RF(listen_zk), NULL, "''", G_QUORUM,
     "List of URLs to listen on for ZooKeeper clients.", P_IMPL, NULL, "string", NULL},
    {"zk-4lw-commands-whitelist", T_STRS, CF(zk_4lw_whitelist), "srvr", "'srvr'", G_QUORUM,
     "Four-letter words ZooKeeper clients may send (ZooKeeper's 4lw.commands.whitelist: "
     "comma-separated, '*' for all; srvr always answers).",
     P_IMPL, NULL, "string", NULL},
    {"zk-container-check-interval", T_DUR_MS, CF(zk_container_check_ms), "1m", "'1m'", G_QUORUM,
     "How often the leader deletes empty ZooKeeper containers and expired TTL nodes "
     "(ZooKeeper's znode.container.checkIntervalMs).",
     P_IMPL, NULL, "time.Duration", NULL},
    {"experimental-set-member-localaddr", T_BOOL, CF(set_member_localaddr), "false", "'false'",
     G_QUORUM,
     "Outgoing peer links leave from the first advertised peer URL's IP (etcd 3.6's flag).",
     P_IMPL, NULL, "bool", NULL},
    {"experimental-apply-step-limit", T_UINT, CF(apply_step_limit), "100000", "'100000'",
     G_QUORUM, "Changes one revision writes per store transaction before it commits a step.",
     P_IMPL, NULL, "uint64", NULL},
    /* bounds under abuse (docs/faults.md) */
    {"max-raft-log-bytes", T_UINT, CF(max_raft_log_bytes), "67108864", "67108864", G_QUORUM,
     "Data of applied Raft entries kept in memory for followers that lag, besides the last "
     "5000 entries; past it the oldest go (a follower that needs them gets a snapshot; 0: "
     "entries only).",
     P_IMPL, "etcd keeps 5000 entries whatever their size", "uint", NULL},
    {"max-range-response-bytes", T_UINT, CF(max_range_response_bytes), "2147483647",
     "2147483647", G_QUORUM,
     "Largest Range reply in bytes; a larger one fails RESOURCE_EXHAUSTED \"grpc: trying to send "
     "message larger than max\" before it is built whole (0: unlimited).",
     P_IMPL, "etcd's bound is its max send message size, math.MaxInt32, hit after the reply "
     "is built", "uint", NULL},
    {"max-client-connections", T_UINT, CF(max_client_conns), "0", "0", G_QUORUM,
     "Client connections open at once, every listener together; past it a new one is closed "
     "unread (0: unlimited, as etcd).",
     P_IMPL, NULL, "uint", NULL},
    {"client-handshake-timeout", T_DUR_MS, CF(client_handshake_ms), "2m", "'2m'", G_QUORUM,
     "Close a client connection whose first bytes (HTTP/2's preface, an HTTP/1.1 request) are "
     "not in by then (grpc-go's 120 s; 0: never).",
     P_IMPL, NULL, "time.Duration", NULL},
    {"client-idle-timeout", T_DUR_MS, CF(client_idle_ms), "0", "'0'", G_QUORUM,
     "Send GOAWAY to and close an HTTP/2 client connection with no stream that read nothing "
     "for this long (0: never, as etcd).",
     P_IMPL, NULL, "time.Duration", NULL},
    {"max-watch-buffer-bytes", T_UINT, CF(max_watch_buffer_bytes), "67108864", "67108864",
     G_QUORUM,
     "Bytes queued for watch streams that do not read, all together (each stream's share at "
     "most 4 MiB); a watcher past its share catches up from history.",
     P_IMPL, NULL, "uint64", NULL},
    {"warning-apply-duration", T_DUR_NS, CF(warning_apply_ns), NULL, "'100ms'", G_QUORUM,
     "etcd 3.5's name of --experimental-warning-apply-duration.", P_IMPL, NULL, "time.Duration",
     NULL},
    /* etcd's IgnoredFlag list: flags of etcd 0.4, warned about */
    {"cluster-active-size", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"cluster-remove-delay", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"cluster-sync-interval", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"config", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"force", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"max-result-buffer", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"max-retry-attempts", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"peer-heartbeat-interval", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"peer-election-timeout", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"retry-interval", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"snapshot", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"v", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"vv", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"test.coverprofile", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
    {"test.outputdir", T_IGNORED, NF, NULL, NULL, NULL, NULL, P_NONE, NULL, NULL, NULL},
};
#define N_FLAGS (sizeof(flags) / sizeof(flags[0]))

/* ---- values, as Go's flag package and etcd's flag types read them ---- */

/* go_parse_uint: strconv.ParseUint(s, 0, 64): a 0x, 0o, 0b or 0 (octal)
 * prefix, '_' between digits. 0, or -EINVAL (syntax) / -ERANGE. */
static int go_parse_uint(const char *s, uint64_t *out)
{
    const char *p = s;
    unsigned base = 10;
    bool prefixed = false;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        base = 16, p += 2, prefixed = true;
    else if (p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
        base = 2, p += 2, prefixed = true;
    else if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
        base = 8, p += 2, prefixed = true;
    else if (p[0] == '0' && p[1] != '\0')
        base = 8, p += 1, prefixed = true;
    if (*p == '\0' && !(base == 8 && prefixed && p == s + 1))
        return -EINVAL;
    uint64_t v = 0;
    bool range = false, last_digit = prefixed; /* '_' may follow a prefix */
    for (; *p; p++) {
        if (*p == '_') {
            if (!last_digit)
                return -EINVAL;
            last_digit = false;
            continue;
        }
        unsigned d;
        if (*p >= '0' && *p <= '9')
            d = (unsigned)(*p - '0');
        else if (*p >= 'a' && *p <= 'z')
            d = (unsigned)(*p - 'a' + 10);
        else if (*p >= 'A' && *p <= 'Z')
            d = (unsigned)(*p - 'A' + 10);
        else
            return -EINVAL;
        if (d >= base)
            return -EINVAL;
        if (v > (UINT64_MAX - d) / base)
            range = true;
        else
            v = v * base + d;
        last_digit = true;
    }
    if (!last_digit)
        return -EINVAL;
    *out = v;
    return range ? -ERANGE : 0;
}

/* go_parse_int: strconv.ParseInt(s, 0, 64) */
static int go_parse_int(const char *s, int64_t *out)
{
    bool neg = s[0] == '-';
    uint64_t u;
    int rv = go_parse_uint(s + (s[0] == '-' || s[0] == '+'), &u);
    if (rv == -EINVAL)
        return rv;
    if (rv == -ERANGE || u > (uint64_t)INT64_MAX + neg)
        return -ERANGE;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

/* go_parse_bool: strconv.ParseBool */
static int go_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False"};
    for (size_t i = 0; i < 6; i++) {
        if (strcmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return -EINVAL;
}

/* go_parse_duration: time.ParseDuration, in ns: [-+]?([0-9]*(\.[0-9]*)?unit)+
 * or "0"; units ns us µs μs ms s m h. */
static int go_parse_duration(const char *s, int64_t *ns)
{
    const char *p = s;
    bool neg = false;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (strcmp(p, "0") == 0)
        return *ns = 0, 0;
    if (*p == '\0')
        return -EINVAL;
    long double total = 0;
    while (*p) {
        if (!(*p == '.' || (*p >= '0' && *p <= '9')))
            return -EINVAL;
        long double x = 0, scale = 1;
        bool digits = false, frac = false;
        for (; (*p >= '0' && *p <= '9') || (*p == '.' && !frac); p++) {
            if (*p == '.') {
                frac = true;
                continue;
            }
            digits = true;
            if (frac) {
                scale /= 10;
                x += (*p - '0') * scale;
            } else {
                x = x * 10 + (*p - '0');
            }
        }
        if (!digits)
            return -EINVAL;
        static const struct {
            const char *unit;
            long double ns;
        } units[] = {{"ns", 1},   {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
                     {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},        {"h", 3600e9}};
        size_t k, best = SIZE_MAX;
        for (k = 0; k < sizeof(units) / sizeof(units[0]); k++)
            if (strncmp(p, units[k].unit, strlen(units[k].unit)) == 0 &&
                (best == SIZE_MAX || strlen(units[k].unit) > strlen(units[best].unit)))
                best = k;
        if (best == SIZE_MAX)
            return -EINVAL; /* a missing or unknown unit */
        p += strlen(units[best].unit);
        total += x * units[best].ns;
        if (total > (long double)INT64_MAX)
            return -ERANGE;
    }
    *ns = neg ? -(int64_t)total : (int64_t)total;
    return 0;
}

static bool in_choices(const char *const *ch, const char *v)
{
    for (; *ch; ch++)
        if (strcmp(*ch, v) == 0)
            return true;
    return false;
}

static const char *const *choices_of(const struct flagdef *f)
{
    if (strcmp(f->name, "initial-cluster-state") == 0)
        return choices_state;
    if (strcmp(f->name, "discovery-fallback") == 0)
        return choices_fallback;
    return choices_proxy;
}

static void add_note(struct config *c, char level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_note(struct config *c, char level, const char *module, const char *fmt, ...)
{
    if (c->n_notes == sizeof(c->notes) / sizeof(c->notes[0]))
        return;
    struct config_note *n = &c->notes[c->n_notes++];
    n->level = level;
    snprintf(n->module, sizeof(n->module), "%s", module);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->text, sizeof(n->text), fmt, ap);
    va_end(ap);
}

static bool set_by[N_FLAGS]; /* given on the command line, by ETCD_*, or in the file */

static void *dest(struct config *c, const struct flagdef *f)
{
    if (f->base == B_CFG)
        return (char *)c + f->off;
    if (f->base == B_RAW)
        return (char *)&raw + f->off;
    return NULL;
}

/* set_value: flag.Value.Set; on error |why| gets the text Go's flag
 * package puts after "invalid value ... for flag -F: ". */
static int set_value(struct config *c, const struct flagdef *f, const char *v, char *why,
                     size_t cap)
{
    void *d = dest(c, f);
    switch (f->type) {
    case T_STR:
    case T_STRS:
    case T_SELECT:
    case T_CORS:
        if (f->type == T_SELECT && !in_choices(choices_of(f), v)) {
            snprintf(why, cap, "invalid value");
            return -EINVAL;
        }
        if (f->type == T_CORS && strcmp(v, "*") != 0 && v[0] != '\0') {
            static struct url scratch[CONFIG_MAX_URLS];
            size_t nu;
            if (config_parse_urls(v, scratch, CONFIG_MAX_URLS, &nu, why, cap) != 0)
                return -EINVAL;
        }
        if (d != NULL) {
            if (strlen(v) >= f->size) {
                snprintf(why, cap, "value too long (at most %zu bytes)", f->size - 1);
                return -EINVAL;
            }
            memcpy(d, v, strlen(v) + 1);
        }
        return 0;
    case T_BOOL: {
        bool b;
        if (go_parse_bool(v, &b) != 0) {
            snprintf(why, cap, "parse error");
            return -EINVAL;
        }
        if (d != NULL)
            *(bool *)d = b;
        return 0;
    }
    case T_UINT:
    case T_UINT32: {
        uint64_t u;
        int rv = go_parse_uint(v, &u);
        if (rv == 0 && f->type == T_UINT32 && u > UINT32_MAX)
            rv = -ERANGE;
        if (rv != 0) {
            if (f->type == T_UINT32)
                snprintf(why, cap, "strconv.ParseUint: parsing \"%s\": %s", v,
                         rv == -ERANGE ? "value out of range" : "invalid syntax");
            else
                snprintf(why, cap, "%s", rv == -ERANGE ? "value out of range" : "parse error");
            return -EINVAL;
        }
        if (d != NULL)
            *(uint64_t *)d = u;
        return 0;
    }
    case T_INT: {
        int64_t i;
        int rv = go_parse_int(v, &i);
        if (rv != 0) {
            snprintf(why, cap, "%s", rv == -ERANGE ? "value out of range" : "parse error");
            return -EINVAL;
        }
        if (d != NULL)
            *(int64_t *)d = i;
        return 0;
    }
    case T_DUR_MS:
    case T_DUR_NS: {
        int64_t ns;
        if (go_parse_duration(v, &ns) != 0) {
            snprintf(why, cap, "parse error");
            return -EINVAL;
        }
        if (ns < 0) /* Go takes it; every duration here means "none" then */
            ns = 0;
        if (d != NULL)
            *(uint64_t *)d = f->type == T_DUR_MS ? (uint64_t)ns / 1000000 : (uint64_t)ns;
        return 0;
    }
    case T_URLS: {
        static struct url scratch[CONFIG_MAX_URLS];
        size_t nu;
        if (config_parse_urls(v, scratch, CONFIG_MAX_URLS, &nu, why, cap) != 0)
            return -EINVAL;
        if (strlen(v) >= f->size) {
            snprintf(why, cap, "value too long");
            return -EINVAL;
        }
        memcpy(d, v, strlen(v) + 1);
        return 0;
    }
    case T_IGNORED:
        add_note(c, 'W', "pkg/flags", "flag \"-%s\" is no longer supported - ignoring.", f->name);
        return 0;
    }
    return 0;
}

static const struct flagdef *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

static void set_defaults(struct config *c)
{
    memset(c, 0, sizeof(*c));
    memset(&raw, 0, sizeof(raw));
    char why[64];
    for (size_t i = 0; i < N_FLAGS; i++)
        if (flags[i].def != NULL)
            set_value(c, &flags[i], flags[i].def, why, sizeof(why));
    snprintf(raw.advertise_client, sizeof(raw.advertise_client), "http://localhost:2379");
}

/* ---- usage and --help ---- */

static void usage(FILE *f)
{
    /* etcd's usageline, with quorum's name (and without etcd's gateway
     * and grpc-proxy commands, which quorum does not have) */
    fprintf(f, "Usage:\n\n"
               "  quorum [flags]\n"
               "    Start a quorum server.\n\n"
               "  quorum --version\n"
               "    Show the version of quorum.\n\n"
               "  quorum -h | --help\n"
               "    Show the help information about quorum.\n\n"
               "  quorum --config-file\n"
               "    Path to the server configuration file. Note that if a configuration file is "
               "provided, other command line flags and environment variables will be ignored.\n\n");
}

void config_usage(FILE *f)
{
    usage(f);
}

static const char *const help_groups[] = {G_MEMBER, G_CLUSTER, G_SECURITY, G_AUTH, G_PROF,  G_LOG,
                                          G_PROXY,  G_EXP,     G_UNSAFE,   G_DEPR, G_QUORUM};

static void print_indented(FILE *f, const char *text, const char *prefix)
{
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "    %s%.*s\n", prefix, (int)n, p);
        p += n;
        if (*p == '\n')
            p++;
        prefix = "";
    }
}

void config_help(FILE *f)
{
    /* etcd's flagsline: sections in its order, "--flag 'default'" then the
     * text; quorum's word on a flag it treats differently follows */
    for (size_t g = 0; g < sizeof(help_groups) / sizeof(help_groups[0]); g++) {
        fprintf(f, "\n%s:\n%s", help_groups[g], help_groups[g] == G_DEPR ? "\n" : "");
        if (help_groups[g] == G_UNSAFE) {
            /* etcd lists unsafe-no-fsync nowhere; quorum with the other unsafe one */
        }
        for (size_t i = 0; i < N_FLAGS; i++) {
            const struct flagdef *d = &flags[i];
            bool listed = d->group == help_groups[g] ||
                          (help_groups[g] == G_UNSAFE && strcmp(d->name, "unsafe-no-fsync") == 0);
            if (!listed)
                continue;
            fprintf(f, "  --%s %s\n", d->name, d->shown);
            print_indented(f, d->help, "");
            if (d->policy != P_IMPL && d->policy != P_CLUSTER && d->note != NULL)
                print_indented(f, d->note,
                               d->policy == P_NONE   ? "quorum: no effect: "
                               : d->policy == P_WARN ? "quorum: no effect (logged when set): "
                                                     : "quorum: refused unless the default: ");
        }
        if (help_groups[g] == G_UNSAFE)
            fprintf(f, "\nCAUTIOUS with unsafe flag! It may break the guarantees given by the "
                       "consensus protocol!\n");
    }
    fprintf(f, "\n");
}

void config_doc_table(FILE *f)
{
    static const char *const what[] = {[P_IMPL] = "implemented",
                                       [P_CLUSTER] = "implemented",
                                       [P_NONE] = "no effect",
                                       [P_WARN] = "no effect, logged when set",
                                       [P_REFUSE] = "refused unless default"};
    fprintf(f, "| flag | default | config file key | quorum |\n|---|---|---|---|\n");
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flagdef *d = &flags[i];
        if (d->type == T_IGNORED)
            continue;
        fprintf(f, "| `--%s` | %s | %s | %s%s%s |\n", d->name, d->shown ? d->shown : "",
                d->ytype ? (d->ykey ? d->ykey : d->name) : "—", what[d->policy],
                d->note ? ": " : "", d->note ? d->note : "");
    }
}

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
        snprintf(err, errlen, "unknown auto-compaction-mode \"%s\"", mode);
        return CONFIG_ERR_VERIFY;
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
        add_note(c, 'C', "main", "error parsing CompactionRetention: time: invalid duration \"%s\"",
                 retention);
        return CONFIG_ERR_FATAL;
    }
    /* etcd takes a duration even in revision mode, as that many revisions
     * (nanoseconds): keep the value in ms for periodic, as a count (ns) for
     * revision, as etcd does */
    c->auto_compaction_retention = c->auto_compaction_periodic ? ms : ms * 1000000;
    return 0;
}

/* ---- the config file (etcd's embed.ConfigFromFile: YAML, keys as the
 * flags' names, read with libyaml) ---- */

/* yaml_kind: how go-yaml (through sigs.k8s.io/yaml's JSON) sees a scalar:
 * 'n' null, 'b' bool, 'i' int, 'f' float, 's' string */
static char yaml_kind(const yaml_node_t *n)
{
    const char *v = (const char *)n->data.scalar.value;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 's';
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    static const char *const bools[] = {
        "y", "Y", "yes", "Yes", "YES", "on",  "On",  "ON",  "true",  "True",  "TRUE",
        "n", "N", "no",  "No",  "NO",  "off", "Off", "OFF", "false", "False", "FALSE"};
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
        if (strcmp(v, nulls[i]) == 0)
            return 'n';
    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++)
        if (strcmp(v, bools[i]) == 0)
            return 'b';
    int64_t iv;
    const char *digits = v + (v[0] == '-' || v[0] == '+');
    if (*digits >= '0' && *digits <= '9' && go_parse_int(v, &iv) != -EINVAL)
        return 'i';
    char *end;
    errno = 0;
    (void)strtod(v, &end);
    if (*end == '\0' && end != v && strpbrk(v, "0123456789") != NULL && !strpbrk(v, "xXpP"))
        return 'f';
    if (strcmp(v, ".inf") == 0 || strcmp(v, "-.inf") == 0 || strcmp(v, ".nan") == 0)
        return 'f';
    return 's';
}

static bool yaml_true(const char *v)
{
    return strchr("yYoOtT", v[0]) != NULL && strcmp(v, "off") != 0 && strcmp(v, "Off") != 0 &&
           strcmp(v, "OFF") != 0;
}

/* yaml_value turns node |n| into the string flag |f| is set with, as
 * etcd's YAML -> JSON -> Go struct path would read it; 1 when the value is
 * null (nothing set); -EINVAL with json's complaint in |why|. */
static int yaml_value(yaml_document_t *doc, yaml_node_t *n, const struct flagdef *f,
                      const char *field, bool hinted, char *out, size_t cap, char *why,
                      size_t whycap)
{
    const char *gotype = f->ytype;
    const char *kind_name = "string";
    if (n->type == YAML_MAPPING_NODE)
        kind_name = "object";
    else if (n->type == YAML_SEQUENCE_NODE)
        kind_name = "array";
    if (strcmp(gotype, "[]string") == 0) {
        if (n->type == YAML_SCALAR_NODE && yaml_kind(n) == 'n')
            return 1;
        if (n->type != YAML_SEQUENCE_NODE) {
            if (n->type == YAML_SCALAR_NODE) {
                char k = yaml_kind(n);
                kind_name = k == 'b' ? "bool" : k == 'i' || k == 'f' ? "number" : "string";
            }
            snprintf(why, whycap, "json: cannot unmarshal %s into Go struct field %s of type %s",
                     kind_name, field, gotype);
            return -EINVAL;
        }
        out[0] = '\0';
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            yaml_node_t *e = yaml_document_get_node(doc, *it);
            char ek = e != NULL && e->type == YAML_SCALAR_NODE ? yaml_kind(e) : 'o';
            if (ek != 's') {
                snprintf(why, whycap,
                         "json: cannot unmarshal %s into Go struct field %s of type string",
                         e != NULL && e->type == YAML_SEQUENCE_NODE ? "array"
                         : ek == 'o'                                ? "object"
                         : ek == 'b'                                ? "bool"
                         : ek == 'n'                                ? "null"
                                                                    : "number",
                         field);
                return -EINVAL;
            }
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "",
                     (const char *)e->data.scalar.value);
        }
        return 0;
    }
    if (n->type != YAML_SCALAR_NODE) {
        snprintf(why, whycap, "json: cannot unmarshal %s into Go struct field %s of type %s",
                 kind_name, field, gotype);
        return -EINVAL;
    }
    const char *v = (const char *)n->data.scalar.value;
    char k = yaml_kind(n);
    if (k == 'n')
        return 1;
    if (strcmp(gotype, "string") == 0) {
        /* sigs.k8s.io/yaml turns a number or bool into the string a string
         * field wants only where it finds the field: not in etcd's
         * embedded embed.Config, so there they are refused */
        if (k == 'b' && hinted) {
            snprintf(out, cap, "%s", yaml_true(v) ? "true" : "false");
            return 0;
        }
        if ((k == 'b' || k == 'i' || k == 'f') && !hinted) {
            snprintf(why, whycap, "json: cannot unmarshal %s into Go struct field %s of type %s",
                     k == 'b' ? "bool" : "number", field, gotype);
            return -EINVAL;
        }
        snprintf(out, cap, "%s", v);
        return 0;
    }
    if (strcmp(gotype, "bool") == 0) {
        if (k != 'b') {
            snprintf(why, whycap, "json: cannot unmarshal %s into Go struct field %s of type %s",
                     k == 'i' || k == 'f' ? "number" : "string", field, gotype);
            return -EINVAL;
        }
        snprintf(out, cap, "%s", yaml_true(v) ? "true" : "false");
        return 0;
    }
    if (k != 'i' && k != 'f') {
        snprintf(why, whycap, "json: cannot unmarshal %s into Go struct field %s of type %s",
                 k == 'b' ? "bool" : "string", field, gotype);
        return -EINVAL;
    }
    /* a JSON number into a Go integer: whole and in range */
    int64_t iv = 0;
    bool ok = k == 'i' && go_parse_int(v, &iv) == 0;
    bool unsig = gotype[0] == 'u';
    if (ok && unsig && iv < 0)
        ok = false;
    if (ok && strcmp(gotype, "uint32") == 0 && iv > (int64_t)UINT32_MAX)
        ok = false;
    if (!ok) {
        snprintf(why, whycap, "json: cannot unmarshal number %s into Go struct field %s of type %s",
                 v, field, gotype);
        return -EINVAL;
    }
    if (strcmp(gotype, "time.Duration") == 0)
        snprintf(out, cap, "%lldns", (long long)iv);
    else
        snprintf(out, cap, "%lld", (long long)iv);
    return 0;
}

static bool is_proxy_key(const char *k)
{
    return strncmp(k, "proxy", 5) == 0 || strcmp(k, "discovery-fallback") == 0;
}

/* yaml_error: go-yaml's "yaml: line N: problem" */
static void yaml_error(const yaml_parser_t *p, char *err, size_t errlen)
{
    size_t line = 0;
    if (p->problem_mark.line != 0) {
        line = p->problem_mark.line;
        if (p->error == YAML_SCANNER_ERROR)
            line++;
    } else if (p->context_mark.line != 0) {
        line = p->context_mark.line;
    }
    char where[32] = "";
    if (line != 0)
        snprintf(where, sizeof(where), "line %zu: ", line);
    snprintf(err, errlen, "error converting YAML to JSON: yaml: %s%s", where,
             p->problem ? p->problem : "unknown error");
}

/* etcd's YAML goes through a JSON object: keys are decoded in sorted order */
static yaml_document_t *sort_doc;

static int cmp_pairs(const void *a, const void *b)
{
    yaml_node_t *ka = yaml_document_get_node(sort_doc, ((const yaml_node_pair_t *)a)->key);
    yaml_node_t *kb = yaml_document_get_node(sort_doc, ((const yaml_node_pair_t *)b)->key);
    int ra = ka != NULL && ka->type == YAML_SCALAR_NODE,
        rb = kb != NULL && kb->type == YAML_SCALAR_NODE;
    if (!ra || !rb) /* keys that are not text first (they are skipped) */
        return ra - rb;
    return strcmp((const char *)ka->data.scalar.value, (const char *)kb->data.scalar.value);
}

struct ipair {
    yaml_node_pair_t p;
    size_t i;
};

static int cmp_ipairs(const void *a, const void *b)
{
    const struct ipair *x = a, *y = b;
    int r = cmp_pairs(&x->p, &y->p);
    return r != 0 ? r : (x->i > y->i) - (x->i < y->i);
}

static void sort_mapping(yaml_document_t *doc, yaml_node_t *m)
{
    /* stable: a key given twice keeps its order, and the last one wins as
     * in etcd */
    sort_doc = doc;
    yaml_node_pair_t *a = m->data.mapping.pairs.start;
    size_t n = (size_t)(m->data.mapping.pairs.top - a);
    struct ipair *v = malloc((n ? n : 1) * sizeof(*v));
    if (v == NULL)
        return; /* unsorted: only which of two bad keys is named changes */
    for (size_t k = 0; k < n; k++)
        v[k] = (struct ipair){a[k], k};
    qsort(v, n, sizeof(*v), cmp_ipairs);
    for (size_t k = 0; k < n; k++)
        a[k] = v[k].p;
    free(v);
}

/* load_file reads --config-file. CONFIG_ERR_VERIFY as etcd reports a file
 * it cannot read or decode; CONFIG_ERR_FATAL (a note at C) for a value its
 * setters refuse. */
static int load_file(struct config *c, const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
        if (errno == ENOENT)
            snprintf(err, errlen, "open %s: no such file or directory", path);
        return CONFIG_ERR_VERIFY;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, fp);
    int rv = 0;
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_error(&parser, err, errlen);
        yaml_parser_delete(&parser);
        fclose(fp);
        return CONFIG_ERR_VERIFY;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL && !(root->type == YAML_SCALAR_NODE && yaml_kind(root) == 'n') &&
        root->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen,
                 "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal %s into Go "
                 "value of type embed.configYAML",
                 root->type == YAML_SEQUENCE_NODE ? "array" : "string");
        rv = CONFIG_ERR_VERIFY;
        goto out;
    }
    if (root != NULL && root->type == YAML_MAPPING_NODE) {
        sort_mapping(&doc, root);
        for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
             pr < root->data.mapping.pairs.top; pr++) {
            yaml_node_t *vn = yaml_document_get_node(&doc, pr->value);
            if (vn != NULL && vn->type == YAML_MAPPING_NODE)
                sort_mapping(&doc, vn);
        }
    }
    /* two passes as etcd's two Unmarshals: embed.configYAML first (the
     * first mismatch is reported), then etcdmain's configProxy */
    for (int pass = 0; pass < 2 && rv == 0 && root != NULL && root->type == YAML_MAPPING_NODE;
         pass++) {
        char first[1024] = "";
        for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
             pr < root->data.mapping.pairs.top; pr++) {
            yaml_node_t *kn = yaml_document_get_node(&doc, pr->key);
            yaml_node_t *vn = yaml_document_get_node(&doc, pr->value);
            if (kn == NULL || vn == NULL || kn->type != YAML_SCALAR_NODE)
                continue;
            const char *key = (const char *)kn->data.scalar.value;
            if (is_proxy_key(key) != (pass == 1))
                continue;
            /* the two security sections hold a TLS configuration each */
            bool sec = strcmp(key, "client-transport-security") == 0 ||
                       strcmp(key, "peer-transport-security") == 0;
            struct {
                yaml_node_t *k, *v;
            } items[16];
            size_t ni = 0;
            if (sec) {
                if (vn->type != YAML_MAPPING_NODE) {
                    if (vn->type == YAML_SCALAR_NODE && yaml_kind(vn) == 'n')
                        continue;
                    if (first[0] == '\0')
                        snprintf(first, sizeof(first),
                                 "json: cannot unmarshal %s into Go struct field "
                                 "configYAML.%s of type embed.securityConfig",
                                 vn->type == YAML_SEQUENCE_NODE ? "array" : "string", key);
                    continue;
                }
                for (yaml_node_pair_t *sp = vn->data.mapping.pairs.start;
                     sp < vn->data.mapping.pairs.top && ni < 16; sp++) {
                    items[ni].k = yaml_document_get_node(&doc, sp->key);
                    items[ni].v = yaml_document_get_node(&doc, sp->value);
                    if (items[ni].k != NULL && items[ni].v != NULL &&
                        items[ni].k->type == YAML_SCALAR_NODE)
                        ni++;
                }
            } else {
                items[0].k = kn;
                items[0].v = vn;
                ni = 1;
            }
            for (size_t j = 0; j < ni; j++) {
                char full[300];
                snprintf(full, sizeof(full), "%s%s%s", sec ? key : "", sec ? "." : "",
                         (const char *)items[j].k->data.scalar.value);
                const struct flagdef *f = NULL;
                for (size_t i = 0; i < N_FLAGS && f == NULL; i++)
                    if (flags[i].ytype != NULL &&
                        strcmp(flags[i].ykey ? flags[i].ykey : flags[i].name, full) == 0)
                        f = &flags[i];
                if (f == NULL)
                    continue; /* as encoding/json: unknown keys are ignored */
                char field[340], val[8192], why[1024];
                snprintf(field, sizeof(field), "%s.%s",
                         sec    ? "securityConfig"
                         : pass ? "configProxy"
                                : "configYAML",
                         full);
                /* etcdmain's own keys (and quorum's) take numbers as text */
                int r = yaml_value(&doc, items[j].v, f, field, pass == 1 || f->group == G_QUORUM,
                                   val, sizeof(val), why, sizeof(why));
                if (r < 0) {
                    if (first[0] == '\0')
                        snprintf(first, sizeof(first), "%s", why);
                    continue;
                }
                if (r == 1 || first[0] != '\0')
                    continue;
                if (set_value(c, f, val, why, sizeof(why)) != 0) {
                    if (strcmp(f->name, "initial-cluster-state") == 0) {
                        /* etcd's Validate of the file's value */
                        snprintf(err, errlen, "unexpected clusterState \"%s\"", val);
                        rv = CONFIG_ERR_VERIFY;
                        goto out;
                    }
                    /* etcd: log.Fatalf("unexpected error setting up ...") */
                    add_note(c, 'C', "main", "unexpected error setting up %s: %s",
                             strcmp(f->name, "proxy") == 0 ? "proxyFlag"
                             : strcmp(f->name, "discovery-fallback") == 0
                                 ? "discovery-fallback flag"
                                 : f->name,
                             why);
                    rv = CONFIG_ERR_FATAL;
                    goto out;
                }
                set_by[f - flags] = true;
            }
        }
        if (first[0] != '\0') {
            snprintf(err, errlen, "error unmarshaling JSON: while decoding JSON: %s", first);
            rv = CONFIG_ERR_VERIFY;
        }
    }
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(fp);
    return rv;
}

/* ---- ETCD_* variables (etcd's pkg/flags SetFlagsFromEnv) ---- */

static void flag_to_env(const char *name, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "ETCD_");
    for (const char *p = name; *p && n + 1 < cap; p++)
        out[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    out[n] = '\0';
}

static const char *env_get(char *const *envp, const char *key)
{
    size_t kl = strlen(key);
    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, key, kl) == 0 && (*e)[kl] == '=')
            return *e + kl + 1;
    return NULL;
}

static int cmp_flag_names(const void *a, const void *b)
{
    return strcmp(flags[*(const size_t *)a].name, flags[*(const size_t *)b].name);
}

static int apply_env(struct config *c, char *const *envp, const bool *cmdline, char *err,
                     size_t errlen)
{
    size_t order[N_FLAGS];
    bool used[N_FLAGS] = {false};
    for (size_t i = 0; i < N_FLAGS; i++)
        order[i] = i;
    qsort(order, N_FLAGS, sizeof(order[0]), cmp_flag_names); /* Go's VisitAll order */
    int rv = 0;
    for (size_t k = 0; k < N_FLAGS; k++) {
        const struct flagdef *f = &flags[order[k]];
        char key[128];
        flag_to_env(f->name, key, sizeof(key));
        if (cmdline[order[k]])
            continue;
        const char *v = env_get(envp, key);
        if (v == NULL || v[0] == '\0')
            continue;
        used[order[k]] = true;
        char why[1024];
        if (set_value(c, f, v, why, sizeof(why)) != 0) {
            /* etcd goes on and reports the last one */
            snprintf(err, errlen, "invalid value \"%s\" for %s: %s", v, key, why);
            rv = CONFIG_ERR_VERIFY;
            continue;
        }
        set_by[order[k]] = true;
        add_note(c, 'I', "pkg/flags", "recognized and used environment variable %s=%s", key, v);
    }
    /* etcd's verifyEnv, in the environment's order */
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL) {
            add_note(c, 'W', "pkg/flags", "found invalid env %s", *e);
            continue;
        }
        bool is_used = false, shadowed = false;
        for (size_t i = 0; i < N_FLAGS; i++) {
            char key[128];
            flag_to_env(flags[i].name, key, sizeof(key));
            if (strlen(key) != (size_t)(eq - *e) || strncmp(key, *e, (size_t)(eq - *e)) != 0)
                continue;
            is_used = used[i];
            shadowed = cmdline[i];
        }
        if (is_used)
            continue;
        if (shadowed) {
            add_note(c, 'C', "pkg/flags",
                     "conflicting environment variable \"%.*s\" is shadowed by corresponding "
                     "command-line flag (either unset environment variable or disable flag)",
                     (int)(eq - *e), *e);
            return CONFIG_ERR_FATAL;
        }
        if (strncmp(*e, "ETCD_", 5) == 0)
            add_note(c, 'W', "pkg/flags", "unrecognized environment variable %s", *e);
    }
    return rv;
}

/* ---- the whole ---- */

static int finish(struct config *c, char *err, size_t errlen);

int config_parse_env(struct config *c, int argc, char **argv, char *const *envp, char *err,
                     size_t errlen)
{
    set_defaults(c);
    memset(set_by, 0, sizeof(set_by));
    static bool cmdline[N_FLAGS];
    memset(cmdline, 0, sizeof(cmdline));
    err[0] = '\0';
    /* Go's FlagSet.Parse */
    int i = 1;
    for (; i < argc; i++) {
        const char *s = argv[i];
        if (strlen(s) < 2 || s[0] != '-')
            break;
        int minuses = 1;
        if (s[1] == '-') {
            minuses = 2;
            if (s[2] == '\0') { /* "--" ends the flags */
                i++;
                break;
            }
        }
        const char *name = s + minuses;
        if (name[0] == '\0' || name[0] == '-' || name[0] == '=') {
            snprintf(err, errlen, "bad flag syntax: %s", s);
            return CONFIG_ERR_USAGE;
        }
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const char *val = eq ? eq + 1 : NULL;
        const struct flagdef *f = find_flag(name, nlen);
        if (f == NULL) {
            if ((nlen == 4 && strncmp(name, "help", 4) == 0) ||
                (nlen == 1 && strncmp(name, "h", 1) == 0)) {
                /* etcd: its usage line on stderr, the flags on stdout */
                usage(stderr);
                config_help(stdout);
                return 1;
            }
            snprintf(err, errlen, "flag provided but not defined: -%.*s", (int)nlen, name);
            return CONFIG_ERR_USAGE;
        }
        char why[1024];
        if (f->type == T_BOOL || f->type == T_IGNORED) {
            /* a boolean never takes the next argument */
            if (set_value(c, f, val ? val : "true", why, sizeof(why)) != 0) {
                snprintf(err, errlen, "invalid boolean value \"%s\" for -%s: %s", val, f->name,
                         why);
                return CONFIG_ERR_USAGE;
            }
        } else {
            if (val == NULL) {
                if (i + 1 >= argc) {
                    snprintf(err, errlen, "flag needs an argument: -%s", f->name);
                    return CONFIG_ERR_USAGE;
                }
                val = argv[++i];
            }
            if (set_value(c, f, val, why, sizeof(why)) != 0) {
                snprintf(err, errlen, "invalid value \"%s\" for flag -%s: %s", val, f->name, why);
                return CONFIG_ERR_USAGE;
            }
        }
        cmdline[f - flags] = true;
        set_by[f - flags] = true;
    }
    if (i < argc) {
        snprintf(err, errlen, "'%s' is not a valid flag", argv[i]);
        return CONFIG_ERR_VERIFY;
    }
    if (raw.version) {
        config_print_version(stdout);
        return 1;
    }
    if (c->config_file[0] == '\0') {
        const char *v = env_get(envp, "ETCD_CONFIG_FILE");
        if (v != NULL)
            snprintf(c->config_file, sizeof(c->config_file), "%s", v);
    }
    int rv;
    if (c->config_file[0] != '\0') {
        /* the file alone: flags and ETCD_* variables are not read */
        char path[sizeof(c->config_file)];
        snprintf(path, sizeof(path), "%s", c->config_file);
        size_t nn = c->n_notes;
        static struct config_note notes[sizeof(c->notes) / sizeof(c->notes[0])];
        memcpy(notes, c->notes, sizeof(notes));
        set_defaults(c);
        memset(set_by, 0, sizeof(set_by));
        memcpy(c->notes, notes, sizeof(notes));
        c->n_notes = nn;
        snprintf(c->config_file, sizeof(c->config_file), "%s", path);
        add_note(c, 'I', "main",
                 "Loading server configuration from \"%s\". Other configuration command line "
                 "flags and environment variables will be ignored if provided.",
                 path);
        rv = load_file(c, path, err, errlen);
        /* etcd takes the file's advertise-client-urls or keeps its default */
        set_by[find_flag("listen-client-urls", 18) - flags] = false;
    } else {
        rv = apply_env(c, envp, cmdline, err, errlen);
    }
    if (rv != 0)
        return rv;
    return finish(c, err, errlen);
}

int config_parse(struct config *c, int argc, char **argv, char *err, size_t errlen)
{
    extern char **environ;
    return config_parse_env(c, argc, argv, environ, err, errlen);
}

static bool flag_set(const char *name)
{
    const struct flagdef *f = find_flag(name, strlen(name));
    return f != NULL && set_by[f - flags];
}

static int finish(struct config *c, char *err, size_t errlen)
{
    /* a flag accepted without effect: say so when it asks for something */
    static struct config dflt;
    static struct raw raw_now;
    raw_now = raw;
    set_defaults(&dflt);
    raw = raw_now;
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flagdef *f = &flags[i];
        if (f->policy != P_WARN || f->base != B_CFG)
            continue;
        if (memcmp((char *)c + f->off, (char *)&dflt + f->off, f->size) != 0)
            add_note(c, 'W', "main", "--%s has no effect in quorum: %s", f->name, f->note);
    }
    int rv = parse_auto_compaction(c, raw.ac_mode, raw.ac_retention, err, errlen);
    if (rv != 0) /* etcd: "error verifying flags" or fatal */
        return rv;
    if (strcmp(raw.fronts, "auto") == 0) {
        c->front_loops = CONFIG_FRONT_AUTO;
    } else {
        char *end;
        errno = 0;
        unsigned long v = strtoul(raw.fronts, &end, 10);
        if (errno || *end || raw.fronts[0] == '-' || raw.fronts[0] == '\0' ||
            v > CONFIG_MAX_FRONTS) {
            snprintf(err, errlen, "invalid value \"%s\" for flag -front-loops (auto or 0-%d)",
                     raw.fronts, CONFIG_MAX_FRONTS);
            return CONFIG_ERR_USAGE;
        }
        c->front_loops = (unsigned)v;
    }
    /* etcd's default (server_pick_data_dir may take an earlier quorum
     * release's ${name}.quorum instead) */
    c->data_dir_default = c->data_dir[0] == '\0';
    if (c->data_dir_default)
        snprintf(c->data_dir, sizeof(c->data_dir), "%s.etcd", c->name);
    /* --wal-dir: without trailing slashes (its stage is "<wal-dir>.tmp");
     * naming <data-dir>/member/wal is the same as not giving it */
    for (size_t n = strlen(c->wal_dir); n > 1 && c->wal_dir[n - 1] == '/'; n--)
        c->wal_dir[n - 1] = '\0';
    if (c->wal_dir[0] != '\0') {
        char same[sizeof(c->data_dir) + 16];
        size_t n = strlen(c->data_dir);
        while (n > 1 && c->data_dir[n - 1] == '/')
            n--;
        snprintf(same, sizeof(same), "%.*s/member/wal", (int)n, c->data_dir);
        if (strcmp(same, c->wal_dir) == 0)
            c->wal_dir[0] = '\0';
    }
    if (c->max_txn_ops == 0 || c->max_request_bytes == 0) {
        snprintf(err, errlen, "--max-txn-ops and --max-request-bytes must be positive");
        return CONFIG_ERR_USAGE;
    }
    /* etcd: 0 is the default quota (2 GiB), a negative one none */
    c->quota_backend_bytes = raw.quota == 0  ? 2ull << 30
                             : raw.quota < 0 ? UINT64_MAX
                                             : (uint64_t)raw.quota;
    c->compaction_batch_limit = raw.batch_limit > 0 ? (uint64_t)raw.batch_limit : 0;
    if (c->debug) /* etcd 3.4: --debug is --log-level=debug */
        snprintf(c->log_level, sizeof(c->log_level), "debug");
    if (raw.log_output[0] != '\0' && !flag_set("log-outputs"))
        snprintf(c->log_outputs, sizeof(c->log_outputs), "%s", raw.log_output);
    c->listen_client_set = flag_set("listen-client-urls");
    c->advertise_client_set = flag_set("advertise-client-urls");
    if (config_parse_urls(raw.listen_client, c->listen_client, CONFIG_MAX_URLS, &c->n_listen_client,
                          err, errlen) ||
        config_parse_urls(raw.advertise_client, c->advertise_client, CONFIG_MAX_URLS,
                          &c->n_advertise_client, err, errlen) ||
        config_parse_urls(raw.listen_peer, c->listen_peer, CONFIG_MAX_URLS, &c->n_listen_peer, err,
                          errlen) ||
        config_parse_urls(raw.advertise_peer, c->advertise_peer, CONFIG_MAX_URLS,
                          &c->n_advertise_peer, err, errlen))
        return CONFIG_ERR_USAGE;
    /* etcd serves a client address once however often it is listed (its
     * listeners are keyed by host:port) */
    for (size_t i = 1; i < c->n_listen_client; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(c->listen_client[i].text, c->listen_client[k].text) == 0) {
                memmove(&c->listen_client[i], &c->listen_client[i + 1],
                        (c->n_listen_client - i - 1) * sizeof(c->listen_client[0]));
                c->n_listen_client--;
                i--;
                break;
            }
    if (raw.listen_metrics[0] != '\0' &&
        config_parse_urls(raw.listen_metrics, c->listen_metrics, CONFIG_MAX_URLS,
                          &c->n_listen_metrics, err, errlen))
        return CONFIG_ERR_USAGE;
    if (raw.listen_zk[0] != '\0' &&
        config_parse_urls(raw.listen_zk, c->listen_zk, CONFIG_MAX_URLS, &c->n_listen_zk, err,
                          errlen))
        return CONFIG_ERR_USAGE;
    /* as etcd 3.4: anything but "extensive" is basic */
    c->metrics_extensive = strcmp(raw.metrics, "extensive") == 0;
    c->initial_cluster_set = flag_set("initial-cluster");
    if (!c->initial_cluster_set) {
        /* etcd's default: this member alone at its advertised peer URLs;
         * none when a discovery flag is to find the cluster */
        c->n_initial_cluster = 0;
        if (c->discovery[0] == '\0' && c->discovery_srv[0] == '\0' &&
            c->discovery_srv_name[0] == '\0') {
            c->n_initial_cluster = 1;
            struct member_cfg *m = &c->initial_cluster[0];
            snprintf(m->name, sizeof(m->name), "%s", c->name);
            memcpy(m->peer_urls, c->advertise_peer, sizeof(m->peer_urls));
            m->n_peer_urls = c->n_advertise_peer;
        }
    } else if (raw.initial_cluster[0] != '\0' &&
               parse_cluster(c, raw.initial_cluster, c->cluster_err, sizeof(c->cluster_err)) != 0) {
        /* etcd reads --initial-cluster only for a member not started
         * before: config_check_cluster reports it */
        c->n_initial_cluster = 0;
        if (c->cluster_err[0] == '\0')
            snprintf(c->cluster_err, sizeof(c->cluster_err), "invalid --initial-cluster");
    }
    return 0;
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

/* check_supported refuses what quorum cannot do rather than not do it
 * (docs/configuration.md): flags etcd 3.4 takes whose values ask for
 * something quorum does not have. */
static int check_supported(const struct config *c, char *err, size_t errlen)
{
    const char *why = NULL;
    if (c->discovery[0] != '\0')
        why = "--discovery is not supported: quorum bootstraps from a static --initial-cluster "
              "or from DNS SRV records (--discovery-srv) only";
    else if (strcmp(c->proxy, "off") != 0)
        why = "--proxy is not supported: quorum has no v2 proxy mode (--proxy=off only)";
    else if (strcmp(c->cors, "*") != 0 && c->cors[0] != '\0')
        why = "--cors with a list of origins is not supported: quorum allows every origin "
              "(--cors='*' only)";
    else if (strcmp(c->host_whitelist, "*") != 0 && c->host_whitelist[0] != '\0')
        why = "--host-whitelist with a list of hosts is not supported: quorum accepts every Host "
              "header (--host-whitelist='*' only)";
    else if (c->client_cert_allowed_hostname[0] != '\0')
        why = "--client-cert-allowed-hostname is not supported: quorum does not check the host "
              "names of client certificates";
    else if (c->peer_cert_allowed_hostname[0] != '\0')
        why = "--peer-cert-allowed-hostname is not supported: quorum checks peer certificates by "
              "--peer-cert-allowed-cn only";
    if (why == NULL)
        return 0;
    snprintf(err, errlen, "quorum: %s", why);
    return -EINVAL;
}

#define MAX_ELECTION_MS 50000 /* etcd's maxElectionMs */

/* validate_rest: the rest of etcd's embed.Config.Validate */
static void validate_rest(const struct config *c, char *why, size_t cap)
{
    if ((c->discovery[0] != '\0') + (c->n_initial_cluster > 0 || c->cluster_err[0]) +
            (c->discovery_srv[0] != '\0') >
        1)
        snprintf(why, cap,
                 "multiple discovery or bootstrap flags are set. Choose one of "
                 "\"initial-cluster\", \"discovery\" or \"discovery-srv\"");
    else if (c->heartbeat_ms == 0)
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
    if (check_tls(c, err, errlen) != 0)
        return -EINVAL;
    return check_supported(c, err, errlen);
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

const char *config_member_localaddr(const struct config *c)
{
    if (!c->set_member_localaddr)
        return NULL;
    for (size_t i = 0; i < c->n_advertise_peer; i++) {
        const char *h = c->advertise_peer[i].name;
        unsigned char a[16];
        static const unsigned char zero[16];
        if (inet_pton(AF_INET, h, a) == 1 && memcmp(a, zero, 4) != 0)
            return h;
        if (inet_pton(AF_INET6, h, a) == 1 && memcmp(a, zero, 16) != 0)
            return h;
    }
    return NULL;
}
