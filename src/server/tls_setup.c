/* server/tls_setup.c: the member's TLS contexts from its flags (etcd's
 * --cert-file ... --peer-* flags; server_int.h, struct server_tls). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "server/server_int.h"
#include "tls/tls.h"

static const char *nz(const char *s)
{
    return s[0] ? s : NULL;
}

/* hosts_of lists the hosts of |urls| comma-separated (the SANs of an
 * auto-TLS certificate, as etcd's SelfCert takes them) */
static void hosts_of(const struct url *urls, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (urls[i].unix_sock)
            continue;
        int k = snprintf(out + o, cap - o, "%s%s", o ? "," : "", urls[i].host);
        if (k < 0 || (size_t)k >= cap - o)
            break;
        o += (size_t)k;
    }
}

static int make(const struct config *c, const struct tls_cfg *t, enum tls_role role,
                const char *kind, const struct url *urls, size_t nurls, const char *alpn,
                const char *allowed_cn, tls_ctx **out)
{
    char dir[1200], hosts[1024], err[600] = "";
    snprintf(dir, sizeof(dir), "%s/fixtures/%s", c->data_dir, kind);
    hosts_of(urls, nurls, hosts, sizeof(hosts));
    bool have_cert = t->cert_file[0] && t->key_file[0];
    struct tls_config tc = {
        .role = role,
        .cert_file = have_cert ? t->cert_file : NULL,
        .key_file = have_cert ? t->key_file : NULL,
        .ca_file = nz(t->trusted_ca_file),
        .crl_file = nz(t->crl_file),
        .client_cert_auth = t->client_cert_auth,
        .auto_tls = t->auto_tls && !have_cert,
        .auto_dir = dir,
        .auto_hosts = hosts,
        .cipher_suites = nz(c->cipher_suites),
        .alpn = alpn,
        .allowed_cn = allowed_cn,
        .label = kind,
    };
    if (t->auto_tls && have_cert)
        log_warn("server", "ignoring %s auto TLS since certs given", kind);
    int rv = tls_ctx_new(&tc, out, err, sizeof(err));
    if (rv != 0)
        log_error("server", "%s TLS: %s", kind, err[0] ? err : strerror(-rv));
    return rv;
}

int server_tls_open(const struct config *c, struct server_tls *st)
{
    memset(st, 0, sizeof(*st));
    bool client = false, zk = false, peer_listen = false, peer_dial = false;
    for (size_t i = 0; i < c->n_listen_client; i++)
        client |= c->listen_client[i].tls;
    for (size_t i = 0; i < c->n_listen_zk; i++)
        zk |= c->listen_zk[i].tls;
    for (size_t i = 0; i < c->n_listen_peer; i++)
        peer_listen |= c->listen_peer[i].tls;
    for (size_t i = 0; i < c->n_initial_cluster; i++)
        for (size_t k = 0; k < c->initial_cluster[i].n_peer_urls; k++)
            peer_dial |= c->initial_cluster[i].peer_urls[k].tls;
    /* a member may learn of https peers later (member add): be ready to
     * dial them whenever peer certificates are configured */
    peer_dial |= peer_listen || c->peer_tls.cert_file[0] || c->peer_tls.auto_tls ||
                 c->peer_tls.trusted_ca_file[0];
    int rv = 0;
    if (client)
        rv = make(c, &c->client_tls, TLS_SERVER, "client", c->listen_client, c->n_listen_client,
                  "h2", NULL, &st->client);
    if (rv == 0 && zk)
        rv = make(c, &c->client_tls, TLS_SERVER, "zk", c->listen_zk, c->n_listen_zk, NULL, NULL,
                  &st->zk);
    if (rv == 0 && peer_listen)
        rv = make(c, &c->peer_tls, TLS_SERVER, "peer", c->listen_peer, c->n_listen_peer, NULL,
                  nz(c->peer_cert_allowed_cn), &st->peer_server);
    if (rv == 0 && peer_dial)
        rv = make(c, &c->peer_tls, TLS_CLIENT, "peer", c->listen_peer, c->n_listen_peer, NULL,
                  nz(c->peer_cert_allowed_cn), &st->peer_client);
    if (rv == 0 && (st->client || st->zk || st->peer_server || st->peer_client))
        rv = tls_install_sighup();
    if (rv != 0)
        server_tls_close(st);
    return rv;
}

void server_tls_close(struct server_tls *st)
{
    tls_ctx_free(st->client);
    tls_ctx_free(st->zk);
    tls_ctx_free(st->peer_server);
    tls_ctx_free(st->peer_client);
    memset(st, 0, sizeof(*st));
}
