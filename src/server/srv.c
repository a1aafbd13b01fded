/* server/srv.c: DNS SRV bootstrap (--discovery-srv), see srv.h.
 *
 * The query goes through libc's resolver (res_nquery: /etc/resolv.conf,
 * as Go's resolver reads it); the answer is read here. QUORUM_DNS_SERVER
 * (IP:PORT) points the SRV queries, and only them, at another server: a
 * test runs one on a loopback port, which resolv.conf cannot name. */
#include "server/srv.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* ---- reading an answer ---- */

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* read_name expands the name at |*off| into |out| (dotted, no trailing
 * dot; "" for the root) and moves |*off| past it in the message. Pointers
 * are followed at most 64 times. */
static int read_name(const uint8_t *msg, size_t len, size_t *off, char *out, size_t cap)
{
    size_t pos = *off, n = 0;
    bool jumped = false;
    int hops = 0;
    for (;;) {
        if (pos >= len)
            return -EINVAL;
        uint8_t l = msg[pos];
        if (l == 0) {
            if (!jumped)
                *off = pos + 1;
            break;
        }
        if ((l & 0xc0) == 0xc0) {
            if (pos + 1 >= len || ++hops > 64)
                return -EINVAL;
            size_t to = (size_t)(l & 0x3f) << 8 | msg[pos + 1];
            if (!jumped)
                *off = pos + 2;
            jumped = true;
            pos = to;
            continue;
        }
        if ((l & 0xc0) != 0 || pos + 1 + l > len)
            return -EINVAL;
        if (n + l + 2 > cap)
            return -EINVAL;
        if (n > 0)
            out[n++] = '.';
        memcpy(out + n, msg + pos + 1, l);
        n += l;
        pos += 1 + (size_t)l;
    }
    if (cap == 0)
        return -EINVAL;
    out[n] = '\0';
    return 0;
}

static int cmp_record(const void *a, const void *b)
{
    const struct srv_record *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority < y->priority ? -1 : 1;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return 0;
}

int srv_parse(const uint8_t *msg, size_t len, struct srv_record *out, size_t max)
{
    if (len < 12)
        return -EINVAL;
    unsigned rcode = msg[3] & 0x0f;
    if ((msg[2] & 0x80) == 0) /* not a response */
        return -EINVAL;
    if (rcode != 0)
        return -ENOENT;
    unsigned qd = get16(msg + 4), an = get16(msg + 6);
    size_t off = 12;
    char name[256];
    for (unsigned i = 0; i < qd; i++) {
        if (read_name(msg, len, &off, name, sizeof(name)) != 0 || off + 4 > len)
            return -EINVAL;
        off += 4;
    }
    size_t n = 0;
    for (unsigned i = 0; i < an; i++) {
        if (read_name(msg, len, &off, name, sizeof(name)) != 0 || off + 10 > len)
            return -EINVAL;
        uint16_t type = get16(msg + off), klass = get16(msg + off + 2);
        size_t rdlen = get16(msg + off + 8);
        off += 10;
        if (off + rdlen > len)
            return -EINVAL;
        size_t end = off + rdlen;
        if (type == 33 /* SRV */ && klass == 1) {
            /* every record is read, also past |max|: the verdict on a
             * message does not depend on the room given */
            if (rdlen < 7)
                return -EINVAL;
            struct srv_record r;
            r.priority = get16(msg + off);
            r.weight = get16(msg + off + 2);
            r.port = get16(msg + off + 4);
            size_t t = off + 6;
            if (read_name(msg, end, &t, r.target, sizeof(r.target)) != 0) {
                /* a compressed target may point anywhere before it */
                t = off + 6;
                if (read_name(msg, len, &t, r.target, sizeof(r.target)) != 0)
                    return -EINVAL;
            }
            if (r.target[0] != '\0' && n < max) /* "." means no service */
                out[n++] = r;
        }
        off = end;
    }
    qsort(out, n, sizeof(*out), cmp_record);
    return (int)n;
}

/* ---- asking ---- */

int srv_lookup(const char *name, struct srv_record *out, size_t max, char *err, size_t cap)
{
    struct __res_state st;
    memset(&st, 0, sizeof(st));
    if (res_ninit(&st) != 0) {
        snprintf(err, cap, "lookup %s: cannot read the resolver configuration", name);
        return -EIO;
    }
    char server[64] = "";
    const char *env = getenv("QUORUM_DNS_SERVER");
    if (env != NULL && env[0] != '\0') {
        /* tests only: IPv4 "IP:PORT" */
        char ip[48];
        unsigned port = 0;
        const char *colon = strrchr(env, ':');
        struct in_addr a;
        if (colon == NULL || (size_t)(colon - env) >= sizeof(ip) ||
            sscanf(colon + 1, "%u", &port) != 1 || port == 0 || port > 65535) {
            res_nclose(&st);
            snprintf(err, cap, "QUORUM_DNS_SERVER=%s: want IP:PORT", env);
            return -EINVAL;
        }
        snprintf(ip, sizeof(ip), "%.*s", (int)(colon - env), env);
        if (inet_pton(AF_INET, ip, &a) != 1) {
            res_nclose(&st);
            snprintf(err, cap, "QUORUM_DNS_SERVER=%s: want IP:PORT", env);
            return -EINVAL;
        }
        st.nscount = 1;
        st.nsaddr_list[0].sin_family = AF_INET;
        st.nsaddr_list[0].sin_addr = a;
        st.nsaddr_list[0].sin_port = htons((uint16_t)port);
        snprintf(server, sizeof(server), "%s:%u", ip, port);
    } else if (st.nscount > 0 && st.nsaddr_list[0].sin_family == AF_INET) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &st.nsaddr_list[0].sin_addr, ip, sizeof(ip));
        snprintf(server, sizeof(server), "%s:%u", ip, ntohs(st.nsaddr_list[0].sin_port));
    }
    static uint8_t answer[65536];
    int n = res_nquery(&st, name, ns_c_in, ns_t_srv, answer, sizeof(answer));
    int herr = st.res_h_errno;
    res_nclose(&st);
    const char *on = server[0] ? " on " : "";
    if (n < 0) {
        /* Go's words for the usual failures */
        const char *why = herr == HOST_NOT_FOUND || herr == NO_DATA ? "no such host"
                          : herr == TRY_AGAIN                       ? "server misbehaving"
                                                                    : "no answer";
        snprintf(err, cap, "lookup %s%s%s: %s", name, on, server, why);
        return -ENOENT;
    }
    int k = srv_parse(answer, (size_t)n > sizeof(answer) ? sizeof(answer) : (size_t)n, out, max);
    if (k < 0) {
        snprintf(err, cap, "lookup %s%s%s: cannot unmarshal DNS message", name, on, server);
        return k;
    }
    if (k == 0) {
        snprintf(err, cap, "lookup %s%s%s: no such host", name, on, server);
        return -ENOENT;
    }
    return k;
}

/* ---- the cluster ---- */

/* addr_of resolves "host" (as srv_cluster's |resolve|) and writes
 * "ADDR:PORT". */
static int addr_of(const char *host, int port, config_resolve_fn resolve, void *arg, char *out,
                   size_t cap, char *why, size_t whycap)
{
    char a[256];
    if (strcmp(host, "localhost") == 0)
        snprintf(a, sizeof(a), "127.0.0.1");
    else if (config_host_is_ip(host))
        snprintf(a, sizeof(a), "%s", host);
    else if (resolve(host, a, sizeof(a), why, whycap, arg) != 0)
        return -ENOENT;
    snprintf(out, cap, "%s:%d", a, port);
    return 0;
}

int srv_cluster(struct config *c, srv_lookup_fn lookup, config_resolve_fn resolve, void *arg,
                char *err, size_t cap)
{
    /* this member's advertised peer addresses */
    char mine[CONFIG_MAX_URLS][300];
    for (size_t i = 0; i < c->n_advertise_peer; i++) {
        char why[256] = "";
        if (addr_of(c->advertise_peer[i].name[0] ? c->advertise_peer[i].name
                                                 : c->advertise_peer[i].host,
                    c->advertise_peer[i].port, resolve, arg, mine[i], sizeof(mine[i]), why,
                    sizeof(why)) != 0) {
            snprintf(err, cap, "error setting up initial cluster: %s", why);
            return -EINVAL;
        }
    }
    const char *suffix = c->discovery_srv_name;
    struct {
        const char *service, *scheme;
    } kinds[2] = {{"etcd-server-ssl", "https"}, {"etcd-server", "http"}};
    static struct member_cfg found[CONFIG_MAX_MEMBERS];
    size_t n = 0;
    int temp = 0;
    char first_err[2048] = "";
    for (int k = 0; k < 2; k++) {
        char service[300], name[600], why[512] = "";
        snprintf(service, sizeof(service), "%s%s%s", kinds[k].service, suffix[0] ? "-" : "",
                 suffix);
        snprintf(name, sizeof(name), "_%s._tcp.%s", service, c->discovery_srv);
        static struct srv_record recs[SRV_MAX_RECORDS];
        int nr = lookup(name, recs, SRV_MAX_RECORDS, why, sizeof(why));
        if (nr < 0) {
            log_info("embed", "get cluster for %s SRV: %s", service, why);
            if (first_err[0] == '\0')
                snprintf(first_err, sizeof(first_err), "error querying DNS SRV records for _%s %s",
                         service, why);
            continue;
        }
        for (int r = 0; r < nr; r++) {
            char addr[300], rwhy[256] = "";
            if (addr_of(recs[r].target, recs[r].port, resolve, arg, addr, sizeof(addr), rwhy,
                        sizeof(rwhy)) != 0) {
                log_warn("embed", "SRV target %s: %s", recs[r].target, rwhy);
                continue;
            }
            int self = -1;
            for (size_t i = 0; i < c->n_advertise_peer && self < 0; i++)
                if (strcmp(mine[i], addr) == 0)
                    self = (int)i;
            char url[300];
            bool v6 = strchr(recs[r].target, ':') != NULL;
            snprintf(url, sizeof(url), "%s://%s%s%s:%u", kinds[k].scheme, v6 ? "[" : "",
                     recs[r].target, v6 ? "]" : "", recs[r].port);
            if (self >= 0 &&
                strcmp(c->advertise_peer[self].tls ? "https" : "http", kinds[k].scheme) != 0) {
                /* etcd skips the record; the error tells only when
                 * nothing was found */
                char m[2048];
                snprintf(m, sizeof(m),
                         "error querying DNS SRV records for _%s bootstrap at %s from DNS for "
                         "%s has scheme mismatch with expected peer %s",
                         service, url, service, c->advertise_peer[self].text);
                log_warn("embed", "%s", m);
                if (first_err[0] == '\0')
                    memcpy(first_err, m, sizeof(first_err));
                continue;
            }
            char mname[128];
            if (self >= 0)
                snprintf(mname, sizeof(mname), "%s", c->name);
            else
                snprintf(mname, sizeof(mname), "%d", temp++);
            struct member_cfg *m = NULL;
            for (size_t i = 0; i < n && m == NULL; i++)
                if (strcmp(found[i].name, mname) == 0)
                    m = &found[i];
            if (m == NULL) {
                if (n == CONFIG_MAX_MEMBERS) {
                    snprintf(err, cap,
                             "error setting up initial cluster: too many members "
                             "(at most %d)",
                             CONFIG_MAX_MEMBERS);
                    return -EINVAL;
                }
                m = &found[n++];
                memset(m, 0, sizeof(*m));
                snprintf(m->name, sizeof(m->name), "%s", mname);
            }
            size_t nu = 0;
            char uerr[400];
            if (m->n_peer_urls == CONFIG_MAX_URLS ||
                config_parse_urls(url, &m->peer_urls[m->n_peer_urls], 1, &nu, uerr, sizeof(uerr)) !=
                    0) {
                snprintf(err, cap, "error setting up initial cluster: %s", uerr);
                return -EINVAL;
            }
            m->n_peer_urls++;
            log_info("embed", "got bootstrap from DNS for etcd-server at %s=%s", mname, url);
        }
    }
    if (n == 0) {
        snprintf(err, cap, "error setting up initial cluster: %s", first_err);
        return -ENOENT;
    }
    bool have_self = false;
    for (size_t i = 0; i < n; i++)
        have_self = have_self || strcmp(found[i].name, c->name) == 0;
    if (!have_self) {
        snprintf(err, cap,
                 "error setting up initial cluster: cannot find local etcd member \"%s\" in SRV "
                 "records",
                 c->name);
        return -EINVAL;
    }
    memcpy(c->initial_cluster, found, n * sizeof(found[0]));
    c->n_initial_cluster = n;
    c->cluster_err[0] = '\0';
    return 0;
}
