/* tests/tls/test_tls.c: the tls module (src/tls). Certificates are made at
 * test time with the openssl CLI in a temporary directory: a CA, a server
 * certificate (IP:127.0.0.1), a client certificate (CN "alice"), and a
 * second CA with a client certificate of its own. Connections are driven
 * in memory (bytes moved between two tls_conn) and, for the libuv
 * adapter, over real TCP on 127.0.0.1. Waits are bounded by a generous
 * deadline; nothing is asserted about time. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tls/tls.h"

static char dir[256];

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char full[4400];
    snprintf(full, sizeof(full), "cd %s && (%s) >/dev/null 2>&1", dir, cmd);
    cr_assert_eq(system(full), 0, "command failed: %s", cmd);
}

#define EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static void make_ca(const char *name)
{
    sh("openssl req -x509 " EC " -keyout %s.key -out %s.crt -days 30 -subj /CN=%s", name, name,
       name);
}

static void make_cert(const char *ca, const char *name, const char *cn, const char *san)
{
    sh("openssl req " EC " -keyout %s.key -out %s.csr -subj /CN=%s && "
       "printf 'subjectAltName=%s\\nextendedKeyUsage=serverAuth,clientAuth\\n' > %s.ext && "
       "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -CAcreateserial -out %s.crt "
       "-days 30 -extfile %s.ext",
       name, name, cn, san, name, name, ca, ca, name, name);
}

static char *path(const char *name)
{
    static char bufs[8][512];
    static int i;
    char *b = bufs[i++ % 8];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/quorum-tls-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    make_ca("ca");
    make_cert("ca", "server", "server", "IP:127.0.0.1,DNS:localhost");
    make_cert("ca", "client", "alice", "IP:127.0.0.1");
    make_ca("ca2");
    make_cert("ca2", "other", "mallory", "IP:127.0.0.1");
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

TestSuite(tls, .init = setup, .fini = teardown, .timeout = 120);

static tls_ctx *server_ctx(bool cert_auth, const char *allowed_cn, const char *ciphers)
{
    struct tls_config c = {
        .role = TLS_SERVER,
        .cert_file = path("server.crt"),
        .key_file = path("server.key"),
        .ca_file = cert_auth ? path("ca.crt") : NULL,
        .client_cert_auth = cert_auth,
        .alpn = "h2",
        .allowed_cn = allowed_cn,
        .cipher_suites = ciphers,
        .label = "test",
    };
    tls_ctx *ctx = NULL;
    char err[512] = "";
    int rv = tls_ctx_new(&c, &ctx, err, sizeof(err));
    cr_assert_eq(rv, 0, "server ctx: %s", err);
    return ctx;
}

static tls_ctx *client_ctx(const char *cert, const char *key, const char *ca, bool skip)
{
    struct tls_config c = {
        .role = TLS_CLIENT,
        .cert_file = cert,
        .key_file = key,
        .ca_file = ca,
        .insecure_skip_verify = skip,
        .alpn = "h2",
    };
    tls_ctx *ctx = NULL;
    char err[512] = "";
    int rv = tls_ctx_new(&c, &ctx, err, sizeof(err));
    cr_assert_eq(rv, 0, "client ctx: %s", err);
    return ctx;
}

/* move carries every ciphertext byte from |a| to |b|; returns bytes moved */
static size_t move(tls_conn *a, tls_conn *b)
{
    struct buf o = {0};
    cr_assert_geq(tls_conn_take_output(a, &o), 0);
    size_t n = o.len;
    if (n)
        cr_assert_eq(tls_conn_feed(b, o.data, o.len), 0);
    buf_free(&o);
    return n;
}

/* handshake drives both ends until neither has anything to say; returns
 * the server's and the client's final handshake results */
static void handshake(tls_conn *srv, tls_conn *cli, int *rs, int *rc)
{
    *rs = *rc = 0;
    *rc = tls_conn_handshake(cli);
    for (int i = 0; i < 20; i++) {
        size_t m = move(cli, srv);
        if (*rs == 0)
            *rs = tls_conn_handshake(srv);
        m += move(srv, cli);
        if (*rc == 0)
            *rc = tls_conn_handshake(cli);
        /* TLS 1.3: a client learns of a refused certificate on its next read */
        char tmp[16];
        ssize_t r = tls_conn_read(cli, tmp, sizeof(tmp));
        if (r == TLS_FAILED)
            *rc = TLS_FAILED;
        if (m == 0)
            break;
    }
}

Test(tls, handshake_and_data_with_client_cert)
{
    tls_ctx *s = server_ctx(true, NULL, NULL);
    tls_ctx *c = client_ctx(path("client.crt"), path("client.key"), path("ca.crt"), false);
    tls_conn *sc, *cc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    /* written before the handshake: kept and sent after it */
    cr_assert_eq(tls_conn_write(cc, "hello", 5), 0);
    int rs, rc;
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, 1, "server: %s", tls_conn_error(sc));
    cr_assert_eq(rc, 1, "client: %s", tls_conn_error(cc));
    cr_assert_str_eq(tls_conn_alpn(sc), "h2");
    cr_assert_str_eq(tls_conn_alpn(cc), "h2");
    cr_assert_not_null(tls_conn_peer_cn(sc));
    cr_assert_str_eq(tls_conn_peer_cn(sc), "alice");
    cr_assert_str_eq(tls_conn_peer_cn(cc), "server");
    move(cc, sc);
    char buf[64];
    ssize_t n = tls_conn_read(sc, buf, sizeof(buf));
    cr_assert_eq(n, 5);
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    cr_assert_eq(tls_conn_write(sc, "world!", 6), 0);
    move(sc, cc);
    n = tls_conn_read(cc, buf, sizeof(buf));
    cr_assert_eq(n, 6);
    cr_assert_eq(tls_conn_read(cc, buf, sizeof(buf)), TLS_WANT);
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, no_client_cert_refused)
{
    tls_ctx *s = server_ctx(true, NULL, NULL);
    tls_ctx *c = client_ctx(NULL, NULL, path("ca.crt"), false);
    tls_conn *sc, *cc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    int rs, rc;
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, TLS_FAILED);
    cr_assert_eq(rc, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(sc), "certificate") != NULL, "%s", tls_conn_error(sc));
    cr_assert_null(tls_conn_peer_cn(sc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, client_cert_from_other_ca_refused)
{
    tls_ctx *s = server_ctx(true, NULL, NULL);
    tls_ctx *c = client_ctx(path("other.crt"), path("other.key"), path("ca.crt"), false);
    tls_conn *sc, *cc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    int rs, rc;
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(sc), "certificate verify failed") != NULL, "%s",
              tls_conn_error(sc));
    cr_assert_eq(rc, TLS_FAILED);
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, server_from_other_ca_refused_by_client)
{
    tls_ctx *s = server_ctx(false, NULL, NULL);
    tls_ctx *c = client_ctx(NULL, NULL, path("ca2.crt"), false);
    tls_conn *sc, *cc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    int rs, rc;
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rc, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(cc), "certificate verify failed") != NULL, "%s",
              tls_conn_error(cc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    /* the same with verification skipped works */
    tls_ctx *c2 = client_ctx(NULL, NULL, path("ca2.crt"), true);
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c2, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rc, 1);
    cr_assert_eq(rs, 1);
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
    tls_ctx_free(c2);
}

Test(tls, server_name_checked)
{
    tls_ctx *s = server_ctx(false, NULL, NULL);
    tls_ctx *c = client_ctx(NULL, NULL, path("ca.crt"), false);
    tls_conn *sc, *cc;
    int rs, rc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.2", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rc, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(cc), "IP address mismatch") != NULL, "%s",
              tls_conn_error(cc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "localhost", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rc, 1, "%s", tls_conn_error(cc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, allowed_cn)
{
    tls_ctx *s = server_ctx(true, "bob", NULL);
    tls_ctx *c = client_ctx(path("client.crt"), path("client.key"), path("ca.crt"), false);
    tls_conn *sc, *cc;
    int rs, rc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(sc), "client certificate authentication failed") != NULL, "%s",
              tls_conn_error(sc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    s = server_ctx(true, "alice", NULL);
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, 1, "%s", tls_conn_error(sc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    /* the dialing side checks the server's name too (as etcd) */
    struct tls_config cc_cfg = {.role = TLS_CLIENT,
                                .cert_file = path("client.crt"),
                                .key_file = path("client.key"),
                                .ca_file = path("ca.crt"),
                                .allowed_cn = "nobody"};
    tls_ctx *c2 = NULL;
    char err[512];
    cr_assert_eq(tls_ctx_new(&cc_cfg, &c2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c2, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rc, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(cc), "allowed \"nobody\"") != NULL, "%s",
              tls_conn_error(cc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(c2);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, cipher_suites)
{
    cr_assert_str_eq(tls_cipher_openssl_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
                     "ECDHE-RSA-AES128-GCM-SHA256");
    cr_assert_null(tls_cipher_openssl_name("FOO"));
    struct tls_config cfg = {
        .role = TLS_SERVER,
        .cert_file = path("server.crt"),
        .key_file = path("server.key"),
        .cipher_suites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,FOO",
    };
    tls_ctx *ctx = NULL;
    char err[512] = "";
    cr_assert_eq(tls_ctx_new(&cfg, &ctx, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "unexpected TLS cipher suite \"FOO\"");
    /* a TLS 1.2 client limited to one suite meets a server limited to it */
    tls_ctx *s = server_ctx(false, NULL, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384");
    tls_ctx *c = client_ctx(NULL, NULL, path("ca.crt"), false);
    tls_conn *sc, *cc;
    int rs, rc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, 1, "%s", tls_conn_error(sc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, missing_files)
{
    struct tls_config cfg = {.role = TLS_SERVER};
    tls_ctx *ctx = NULL;
    char err[512] = "";
    cr_assert_eq(tls_ctx_new(&cfg, &ctx, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "KeyFile and CertFile are not presented");
    cfg.cert_file = path("nope.crt");
    cfg.key_file = path("nope.key");
    cr_assert_eq(tls_ctx_new(&cfg, &ctx, err, sizeof(err)), -EINVAL);
    /* etcd's (Go's) words */
    cr_assert(strstr(err, "open ") == err && strstr(err, "nope.crt: no such file or directory"),
              "%s", err);
    cfg.cert_file = path("server.crt");
    cfg.key_file = path("client.key");
    cr_assert_eq(tls_ctx_new(&cfg, &ctx, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "key") != NULL, "%s", err);
}

Test(tls, auto_tls)
{
    struct tls_config cfg = {
        .role = TLS_SERVER,
        .auto_tls = true,
        .auto_dir = path("data/fixtures/client"),
        .auto_hosts = "127.0.0.1,localhost",
    };
    tls_ctx *s = NULL;
    char err[512] = "";
    cr_assert_eq(tls_ctx_new(&cfg, &s, err, sizeof(err)), 0, "%s", err);
    struct stat st;
    cr_assert_eq(stat(path("data/fixtures/client/cert.pem"), &st), 0);
    cr_assert_eq(stat(path("data/fixtures/client/key.pem"), &st), 0);
    cr_assert_eq(st.st_mode & 077, 0);
    sh("openssl x509 -in data/fixtures/client/cert.pem -noout -text | grep -q 'IP Address:127.0.0.1'");
    /* a second start reuses them */
    struct timespec m0 = st.st_mtim;
    tls_ctx *s2 = NULL;
    cr_assert_eq(tls_ctx_new(&cfg, &s2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(stat(path("data/fixtures/client/key.pem"), &st), 0);
    cr_assert_eq(st.st_mtim.tv_nsec, m0.tv_nsec);
    tls_ctx *c = client_ctx(NULL, NULL, NULL, true);
    tls_conn *sc, *cc;
    int rs, rc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, 1, "%s", tls_conn_error(sc));
    cr_assert_eq(rc, 1, "%s", tls_conn_error(cc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(s2);
    tls_ctx_free(c);
}

/* reload: new connections get the new certificate; one made before keeps
 * working with the old */
Test(tls, reload)
{
    tls_ctx *s = server_ctx(false, NULL, NULL);
    tls_ctx *c = client_ctx(NULL, NULL, path("ca.crt"), false);
    tls_conn *sc, *cc;
    int rs, rc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rc, 1);
    cr_assert_str_eq(tls_conn_peer_cn(cc), "server");
    /* the server's files now hold another certificate (CN "server2") */
    make_cert("ca", "server", "server2", "IP:127.0.0.1");
    unsigned g0 = tls_ctx_generation(s);
    tls_request_reload(); /* what SIGHUP does */
    tls_conn *sc2, *cc2;
    cr_assert_eq(tls_conn_new(s, NULL, &sc2), 0);
    cr_assert_eq(tls_ctx_generation(s), g0 + 1);
    cr_assert_eq(tls_conn_new(c, "127.0.0.1", &cc2), 0);
    handshake(sc2, cc2, &rs, &rc);
    cr_assert_eq(rc, 1, "%s", tls_conn_error(cc2));
    cr_assert_str_eq(tls_conn_peer_cn(cc2), "server2");
    /* the old connection still works */
    cr_assert_eq(tls_conn_write(cc, "x", 1), 0);
    move(cc, sc);
    char b[4];
    cr_assert_eq(tls_conn_read(sc, b, sizeof(b)), 1);
    tls_conn_free(sc2);
    tls_conn_free(cc2);
    /* a changed file is noticed by itself (looked at once a second at
     * most): wait for it with a generous bound */
    make_cert("ca", "server", "server3", "IP:127.0.0.1");
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        cr_assert_eq(tls_conn_new(s, NULL, &sc2), 0);
        tls_conn_free(sc2);
        seen = tls_ctx_generation(s) == g0 + 2;
        if (!seen)
            usleep(100 * 1000);
    }
    cr_assert(seen);
    /* a broken file keeps the old context */
    sh("echo garbage > server.crt");
    cr_assert_neq(tls_ctx_reload(s, (char[256]){0}, 256), 0);
    cr_assert_eq(tls_ctx_generation(s), g0 + 2);
    tls_conn_free(sc);
    tls_conn_free(cc);
    tls_ctx_free(s);
    tls_ctx_free(c);
}

Test(tls, cn_from_der)
{
    char cn[64];
    cr_assert_eq(tls_cn_from_der((const uint8_t *)"garbage", 7, cn, sizeof(cn)), -EINVAL);
    sh("openssl x509 -in client.crt -outform DER -out client.der");
    FILE *f = fopen(path("client.der"), "rb");
    cr_assert_not_null(f);
    uint8_t der[4096];
    size_t n = fread(der, 1, sizeof(der), f);
    fclose(f);
    cr_assert_eq(tls_cn_from_der(der, n, cn, sizeof(cn)), 0);
    cr_assert_str_eq(cn, "alice");
    cr_assert_eq(tls_cn_from_der(der, n, cn, 3), -ENOSPC);
    cr_assert_eq(tls_cn_from_der(der, n / 2, cn, sizeof(cn)), -EINVAL);
}

/* plain text (an HTTP/2 preface) to a TLS server fails with a reason */
Test(tls, plaintext_to_tls)
{
    tls_ctx *s = server_ctx(false, NULL, NULL);
    tls_conn *sc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    const char pre[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    cr_assert_eq(tls_conn_feed(sc, pre, sizeof(pre) - 1), 0);
    cr_assert_eq(tls_conn_handshake(sc), TLS_FAILED);
    cr_assert(strlen(tls_conn_error(sc)) > 0);
    tls_conn_free(sc);
    tls_ctx_free(s);
}

/* ---- the libuv adapter over TCP ---- */

struct echo {
    uv_loop_t loop;
    uv_tcp_t listener;
    struct tls_stream srv, cli;
    bool srv_used;
    tls_ctx *sctx, *cctx;
    uv_connect_t creq;
    uv_write_t w1, w2, w3;
    char got[256];
    size_t ngot;
    int srv_err, cli_err;
    int writes_done;
    int closed;
    const char *cn;
};

static void on_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    static char mem[2][7]; /* small: the adapter must split deliveries */
    *b = uv_buf_init(mem[h->data != NULL], 7);
}

static void on_closed(uv_handle_t *h)
{
    struct echo *e = h->loop->data;
    e->closed++;
}

static void close_cli(struct echo *e)
{
    tls_stream_close(&e->cli, on_closed);
    uv_close((uv_handle_t *)&e->listener, on_closed);
}

static void on_written(uv_write_t *w, int status)
{
    struct echo *e = w->handle->loop->data;
    e->writes_done++;
}

static void srv_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct echo *e = s->loop->data;
    if (n < 0) {
        e->srv_err = (int)n;
        tls_stream_close(&e->srv, on_closed);
        return;
    }
    e->cn = tls_stream_peer_cn(&e->srv);
    /* echo back */
    uv_buf_t o = uv_buf_init(b->base, (unsigned)n);
    if (n > 0)
        cr_assert_eq(tls_stream_write(&e->srv, &e->w3, &o, 1, on_written), 0);
}

static void cli_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct echo *e = s->loop->data;
    if (n < 0) {
        e->cli_err = (int)n;
        close_cli(e);
        return;
    }
    if (e->ngot + (size_t)n > sizeof(e->got))
        n = (ssize_t)(sizeof(e->got) - e->ngot);
    memcpy(e->got + e->ngot, b->base, (size_t)n);
    e->ngot += (size_t)n;
    if (e->ngot == 22) /* all echoed: done */
        close_cli(e);
}

static void on_conn(uv_stream_t *l, int status)
{
    struct echo *e = l->loop->data;
    tls_conn *c;
    cr_assert_eq(tls_conn_new(e->sctx, NULL, &c), 0);
    cr_assert_eq(tls_stream_init(&e->srv, &e->loop, c, "test"), 0);
    e->srv.tcp.data = e; /* non-NULL: picks the other buffer */
    e->srv_used = true;
    cr_assert_eq(uv_accept(l, (uv_stream_t *)&e->srv.tcp), 0);
    cr_assert_eq(tls_stream_read_start(&e->srv, on_alloc, srv_read), 0);
}

static void on_connect(uv_connect_t *r, int status)
{
    struct echo *e = r->handle->loop->data;
    cr_assert_eq(status, 0);
    uv_buf_t b[2] = {uv_buf_init("hello, ", 7), uv_buf_init("TLS over libuv!", 15)};
    cr_assert_eq(tls_stream_write(&e->cli, &e->w1, b, 2, on_written), 0);
    cr_assert_eq(tls_stream_read_start(&e->cli, on_alloc, cli_read), 0);
}

static void run_echo(struct echo *e, tls_ctx *cctx)
{
    uv_loop_init(&e->loop);
    e->loop.data = e;
    e->sctx = server_ctx(true, NULL, NULL);
    uv_tcp_init(&e->loop, &e->listener);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    cr_assert_eq(uv_tcp_bind(&e->listener, (struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&e->listener, 8, on_conn), 0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&e->listener, (struct sockaddr *)&ss, &len);
    tls_conn *c = NULL;
    if (cctx != NULL)
        cr_assert_eq(tls_conn_new(cctx, "127.0.0.1", &c), 0);
    cr_assert_eq(tls_stream_init(&e->cli, &e->loop, c, "test-client"), 0);
    cr_assert_eq(uv_tcp_connect(&e->creq, &e->cli.tcp, (struct sockaddr *)&ss, on_connect), 0);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&e->loop), 0);
    tls_ctx_free(e->sctx);
}

Test(tls, stream_echo)
{
    struct echo e = {0};
    tls_ctx *c = client_ctx(path("client.crt"), path("client.key"), path("ca.crt"), false);
    run_echo(&e, c);
    cr_assert_eq(e.ngot, 22);
    cr_assert_eq(memcmp(e.got, "hello, TLS over libuv!", 22), 0);
    cr_assert_eq(e.writes_done, 1 + 4); /* ours, and the echo of 4 deliveries (7+7+7+1) */
    cr_assert_eq(e.closed, 3);
    tls_ctx_free(c);
}

Test(tls, stream_plaintext_client_refused)
{
    struct echo e = {0};
    run_echo(&e, NULL);
    cr_assert_eq(e.srv_err, UV_EPROTO);
    cr_assert_neq(e.ngot, 22); /* at most the alert, read as plain bytes */
    cr_assert_eq(e.closed, 3);
}

Test(tls, stream_wrong_ca_refused)
{
    struct echo e = {0};
    tls_ctx *c = client_ctx(path("other.crt"), path("other.key"), path("ca.crt"), false);
    run_echo(&e, c);
    cr_assert_eq(e.srv_err, UV_EPROTO);
    cr_assert_eq(e.cli_err, UV_EPROTO);
    cr_assert_eq(e.ngot, 0);
    cr_assert_eq(e.closed, 3);
    tls_ctx_free(c);
}

/* a client that connects and says nothing is dropped after the handshake
 * timeout, with UV_ETIMEDOUT to the reader */
static int silent_err;
static struct tls_stream silent_srv;
static uv_tcp_t silent_cli;

static void silent_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    if (n < 0) {
        silent_err = (int)n;
        tls_stream_close(&silent_srv, NULL);
        uv_close((uv_handle_t *)&silent_cli, NULL);
        uv_close((uv_handle_t *)s->loop->data, NULL);
    }
}

static void silent_conn(uv_stream_t *l, int status)
{
    tls_ctx *ctx = ((struct echo *)l->data)->sctx;
    tls_conn *c;
    cr_assert_eq(tls_conn_new(ctx, NULL, &c), 0);
    cr_assert_eq(tls_stream_init(&silent_srv, l->loop, c, "test"), 0);
    cr_assert_eq(uv_accept(l, (uv_stream_t *)&silent_srv.tcp), 0);
    tls_stream_set_handshake_timeout(&silent_srv, 100);
    cr_assert_eq(tls_stream_read_start(&silent_srv, on_alloc, silent_read), 0);
}

static void silent_connected(uv_connect_t *r, int status)
{
    cr_assert_eq(status, 0);
}

Test(tls, stream_handshake_timeout)
{
    struct echo e = {0};
    uv_loop_init(&e.loop);
    e.sctx = server_ctx(false, NULL, NULL);
    uv_tcp_init(&e.loop, &e.listener);
    e.listener.data = &e;
    e.loop.data = &e.listener;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    cr_assert_eq(uv_tcp_bind(&e.listener, (struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&e.listener, 8, silent_conn), 0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&e.listener, (struct sockaddr *)&ss, &len);
    uv_tcp_init(&e.loop, &silent_cli);
    cr_assert_eq(uv_tcp_connect(&e.creq, &silent_cli, (struct sockaddr *)&ss, silent_connected),
                 0);
    uv_run(&e.loop, UV_RUN_DEFAULT);
    cr_assert_eq(silent_err, UV_ETIMEDOUT);
    cr_assert_eq(uv_loop_close(&e.loop), 0);
    tls_ctx_free(e.sctx);
}

/* --client-crl-file: a revoked client certificate is refused, another one
 * from the same CA is not */
Test(tls, crl)
{
    make_cert("ca", "client2", "bob", "IP:127.0.0.1");
    sh("printf '[ca]\\ndefault_ca=d\\n[d]\\ndatabase=index.txt\\ncrlnumber=crlnumber\\n"
       "default_md=sha256\\ndefault_crl_days=30\\n' > ca.cnf && touch index.txt && "
       "echo 01 > crlnumber && "
       "openssl ca -config ca.cnf -keyfile ca.key -cert ca.crt -revoke client.crt && "
       "openssl ca -config ca.cnf -keyfile ca.key -cert ca.crt -gencrl -out crl.pem");
    struct tls_config cfg = {
        .role = TLS_SERVER,
        .cert_file = path("server.crt"),
        .key_file = path("server.key"),
        .ca_file = path("ca.crt"),
        .crl_file = path("crl.pem"),
        .client_cert_auth = true,
    };
    tls_ctx *s = NULL;
    char err[512] = "";
    cr_assert_eq(tls_ctx_new(&cfg, &s, err, sizeof(err)), 0, "%s", err);
    tls_ctx *revoked = client_ctx(path("client.crt"), path("client.key"), path("ca.crt"), false);
    tls_ctx *fine = client_ctx(path("client2.crt"), path("client2.key"), path("ca.crt"), false);
    tls_conn *sc, *cc;
    int rs, rc;
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(revoked, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, TLS_FAILED);
    cr_assert(strstr(tls_conn_error(sc), "certificate revoked") != NULL, "%s",
              tls_conn_error(sc));
    tls_conn_free(sc);
    tls_conn_free(cc);
    cr_assert_eq(tls_conn_new(s, NULL, &sc), 0);
    cr_assert_eq(tls_conn_new(fine, "127.0.0.1", &cc), 0);
    handshake(sc, cc, &rs, &rc);
    cr_assert_eq(rs, 1, "%s", tls_conn_error(sc));
    cr_assert_str_eq(tls_conn_peer_cn(sc), "bob");
    tls_conn_free(sc);
    tls_conn_free(cc);
    /* a file without a CRL is a start-up error */
    cfg.cert_file = path("server.crt"); /* path()'s buffers were reused */
    cfg.key_file = path("server.key");
    cfg.ca_file = path("ca.crt");
    cfg.crl_file = path("ca.crt");
    tls_ctx *bad = NULL;
    cr_assert_eq(tls_ctx_new(&cfg, &bad, err, sizeof(err)), -EINVAL);
    cr_assert_null(bad);
    cr_assert(strstr(err, "no CRL in") != NULL, "%s", err);
    tls_ctx_free(s);
    tls_ctx_free(revoked);
    tls_ctx_free(fine);
}
