/* tls/tls.c: contexts (files, reload, auto TLS, etcd's rules) and
 * memory-BIO connections on OpenSSL. See tls.h. */
#include "tls/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "base/log.h"

#define MOD "tls"
#define MAX_FILES 4

struct file_stamp {
    char *path;
    struct timespec mtime;
    off_t size;
    bool exists;
};

struct tls_ctx {
    struct tls_config cfg; /* strings point into the copies below */
    char *cert_file, *key_file, *ca_file, *crl_file, *auto_dir, *auto_hosts, *ciphers, *alpn,
        *allowed_cn, *label;
    unsigned char alpn_wire[32];
    size_t alpn_wire_len;
    pthread_mutex_t mu;
    SSL_CTX *cur; /* guarded by mu */
    struct file_stamp files[MAX_FILES];
    size_t nfiles;
    atomic_llong last_check_ms;
    atomic_uint seen_request;
    atomic_uint generation;
};

struct tls_conn {
    SSL *ssl;
    BIO *rbio, *wbio; /* rbio: ciphertext in; wbio: ciphertext out */
    struct buf early; /* plaintext written before the handshake completed */
    bool done, failed, eof;
    char allowed_cn[128];
    bool check_cn;
    char cn[256];
    bool have_cn;
    char alpn[16];
    char err[512];
};

static atomic_uint reload_requests;
static int conn_ex_index = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void)
{
    OPENSSL_init_ssl(0, NULL);
    conn_ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ossl_reason writes OpenSSL's error queue (the last entry, which is the
 * most specific) after |what| into |err|, and clears the queue. */
static void ossl_reason(char *err, size_t errlen, const char *what)
{
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0)
        last = e;
    if (err == NULL || errlen == 0)
        return;
    if (last == 0) {
        snprintf(err, errlen, "%s", what);
        return;
    }
    const char *r = ERR_reason_error_string(last);
    snprintf(err, errlen, "%s: %s", what, r ? r : "unknown OpenSSL error");
}

static char *dup_or_null(const char *s)
{
    return s != NULL && *s ? strdup(s) : NULL;
}

/* ---- cipher suites: Go's names (etcd 3.4 pkg/tlsutil) to OpenSSL's ---- */

static const struct {
    const char *go, *ossl;
} ciphers[] = {
    {"TLS_RSA_WITH_RC4_128_SHA", "RC4-SHA"},
    {"TLS_RSA_WITH_3DES_EDE_CBC_SHA", "DES-CBC3-SHA"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA256", "AES128-SHA256"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "ECDHE-ECDSA-RC4-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
    {"TLS_ECDHE_RSA_WITH_RC4_128_SHA", "ECDHE-RSA-RC4-SHA"},
    {"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "ECDHE-RSA-DES-CBC3-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "ECDHE-ECDSA-AES128-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "ECDHE-ECDSA-CHACHA20-POLY1305"},
};

const char *tls_cipher_openssl_name(const char *go_name)
{
    for (size_t i = 0; i < sizeof(ciphers) / sizeof(ciphers[0]); i++)
        if (strcmp(ciphers[i].go, go_name) == 0)
            return ciphers[i].ossl;
    return NULL;
}

/* cipher_list turns "A,B" (Go names) into an OpenSSL list "a:b" in |out|.
 * Unknown name: etcd's start-up error. */
static int cipher_list(const char *go, char *out, size_t cap, char *err, size_t errlen)
{
    char tmp[2048];
    snprintf(tmp, sizeof(tmp), "%s", go);
    size_t o = 0;
    out[0] = '\0';
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        size_t tl = strlen(t);
        while (tl > 0 && t[tl - 1] == ' ')
            t[--tl] = '\0';
        const char *n = tls_cipher_openssl_name(t);
        if (n == NULL) {
            snprintf(err, errlen, "unexpected TLS cipher suite \"%s\"", t);
            return -EINVAL;
        }
        int k = snprintf(out + o, cap - o, "%s%s", o ? ":" : "", n);
        if (k < 0 || (size_t)k >= cap - o) {
            snprintf(err, errlen, "too many cipher suites");
            return -EINVAL;
        }
        o += (size_t)k;
    }
    return 0;
}

/* ---- names ---- */

static int name_cn(X509_NAME *name, char *out, size_t cap)
{
    if (name == NULL)
        return -EINVAL;
    int idx = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
    if (idx < 0)
        return -EINVAL;
    X509_NAME_ENTRY *e = X509_NAME_get_entry(name, idx);
    ASN1_STRING *s = e ? X509_NAME_ENTRY_get_data(e) : NULL;
    if (s == NULL)
        return -EINVAL;
    unsigned char *u = NULL;
    int n = ASN1_STRING_to_UTF8(&u, s);
    if (n < 0)
        return -EINVAL;
    int rv = 0;
    if (memchr(u, 0, (size_t)n) != NULL)
        rv = -EINVAL;
    else if ((size_t)n >= cap)
        rv = -ENOSPC;
    else {
        memcpy(out, u, (size_t)n);
        out[n] = '\0';
    }
    OPENSSL_free(u);
    return rv;
}

int tls_cn_from_der(const uint8_t *der, size_t len, char *out, size_t cap)
{
    pthread_once(&once, init_once);
    if (der == NULL || len == 0 || len > (64u << 10) || cap == 0)
        return -EINVAL;
    const unsigned char *p = der;
    X509 *x = d2i_X509(NULL, &p, (long)len);
    ERR_clear_error();
    if (x == NULL)
        return -EINVAL;
    int rv = name_cn(X509_get_subject_name(x), out, cap);
    X509_free(x);
    return rv;
}

/* ---- self-signed certificates (--auto-tls) ---- */

static int add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    if (e == NULL)
        return -1;
    int ok = X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    return ok ? 0 : -1;
}

/* write_pem writes |key| or |x| to |path| (mode 0600). -1 with errno set
 * on failure (EIO when OpenSSL could not write). */
static int write_pem(const char *path, EVP_PKEY *key, X509 *x)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    int ok = key != NULL ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL)
                         : PEM_write_X509(f, x);
    int closed = fclose(f);
    if (!ok) {
        errno = EIO;
        return -1;
    }
    return closed == 0 ? 0 : -1;
}

int tls_make_self_signed(const char *cert_path, const char *key_path, const char *hosts, char *err,
                         size_t errlen)
{
    pthread_once(&once, init_once);
    int rv = -EINVAL;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    if (key == NULL || x == NULL) {
        ossl_reason(err, errlen, "cannot generate a key");
        goto out;
    }
    X509_set_version(x, 2);
    unsigned char serial[16];
    FILE *ur = fopen("/dev/urandom", "rb");
    if (ur == NULL || fread(serial, 1, sizeof(serial), ur) != sizeof(serial)) {
        if (ur)
            fclose(ur);
        snprintf(err, errlen, "cannot read /dev/urandom");
        goto out;
    }
    fclose(ur);
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), NULL);
    if (bn == NULL || BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) == NULL) {
        BN_free(bn);
        ossl_reason(err, errlen, "cannot set the serial number");
        goto out;
    }
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 365L * 24 * 3600);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    /* etcd's SelfCert: Organization "etcd" */
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"quorum", -1, -1, 0);
    X509_set_issuer_name(x, name);
    char san[2048] = "";
    size_t o = 0;
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", hosts ? hosts : "");
    char *save = NULL;
    for (char *h = strtok_r(tmp, ",", &save); h != NULL; h = strtok_r(NULL, ",", &save)) {
        unsigned char ab[16];
        bool ip = inet_pton(AF_INET, h, ab) == 1 || inet_pton(AF_INET6, h, ab) == 1;
        int k = snprintf(san + o, sizeof(san) - o, "%s%s:%s", o ? "," : "", ip ? "IP" : "DNS", h);
        if (k > 0 && (size_t)k < sizeof(san) - o)
            o += (size_t)k;
    }
    if (add_ext(x, NID_key_usage, "critical,digitalSignature,keyEncipherment") != 0 ||
        add_ext(x, NID_ext_key_usage, "serverAuth,clientAuth") != 0 ||
        add_ext(x, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
        (o > 0 && add_ext(x, NID_subject_alt_name, san) != 0)) {
        ossl_reason(err, errlen, "cannot add certificate extensions");
        goto out;
    }
    if (X509_sign(x, key, EVP_sha256()) == 0) {
        ossl_reason(err, errlen, "cannot sign the certificate");
        goto out;
    }
    if (write_pem(key_path, key, NULL) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", key_path, strerror(errno));
        goto out;
    }
    if (write_pem(cert_path, NULL, x) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", cert_path, strerror(errno));
        goto out;
    }
    rv = 0;
out:
    ERR_clear_error();
    X509_free(x);
    EVP_PKEY_free(key);
    return rv;
}

/* mkdir_p makes |dir| and its parents (0700). */
static int mkdir_p(const char *dir)
{
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* ---- contexts ---- */

static int verify_cb(int ok, X509_STORE_CTX *sctx)
{
    if (!ok)
        return 0;
    if (X509_STORE_CTX_get_error_depth(sctx) != 0)
        return 1;
    SSL *ssl = X509_STORE_CTX_get_ex_data(sctx, SSL_get_ex_data_X509_STORE_CTX_idx());
    tls_conn *c = ssl ? SSL_get_ex_data(ssl, conn_ex_index) : NULL;
    if (c == NULL || !c->check_cn)
        return 1;
    char cn[128];
    X509 *leaf = X509_STORE_CTX_get_current_cert(sctx);
    if (leaf == NULL || name_cn(X509_get_subject_name(leaf), cn, sizeof(cn)) != 0 ||
        strcmp(cn, c->allowed_cn) != 0) {
        /* etcd 3.4's words, then the names */
        snprintf(c->err, sizeof(c->err),
                 "client certificate authentication failed: common name \"%s\", allowed \"%s\"",
                 leaf && name_cn(X509_get_subject_name(leaf), cn, sizeof(cn)) == 0 ? cn : "",
                 c->allowed_cn);
        X509_STORE_CTX_set_error(sctx, X509_V_ERR_APPLICATION_VERIFICATION);
        return 0;
    }
    return 1;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    tls_ctx *ctx = arg;
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, ctx->alpn_wire, (unsigned)ctx->alpn_wire_len, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK; /* Go goes on without a protocol too */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static void stamp(struct file_stamp *f)
{
    struct stat st;
    f->exists = stat(f->path, &st) == 0;
    if (f->exists) {
        f->mtime = st.st_mtim;
        f->size = st.st_size;
    }
}

static bool stamp_changed(const struct file_stamp *f)
{
    struct stat st;
    bool ex = stat(f->path, &st) == 0;
    if (ex != f->exists)
        return true;
    return ex && (st.st_mtim.tv_sec != f->mtime.tv_sec || st.st_mtim.tv_nsec != f->mtime.tv_nsec ||
                  st.st_size != f->size);
}

/* readable: |path| can be opened, else etcd's (Go's) words in |err|:
 * "open PATH: no such file or directory" */
static bool readable(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        fclose(f);
        return true;
    }
    char e[128];
    snprintf(e, sizeof(e), "%s", strerror(errno));
    if (e[0] >= 'A' && e[0] <= 'Z')
        e[0] = (char)(e[0] - 'A' + 'a'); /* Go's errno texts are lower case */
    snprintf(err, errlen, "open %s: %s", path, e);
    return false;
}

/* build makes a new SSL_CTX from the context's configuration. */
static SSL_CTX *build(tls_ctx *ctx, char *err, size_t errlen)
{
    const struct tls_config *cfg = &ctx->cfg;
    const char *files[] = {cfg->cert_file, cfg->key_file, cfg->ca_file, cfg->crl_file};
    for (size_t i = 0; i < 4; i++)
        if (files[i] != NULL && !readable(files[i], err, errlen))
            return NULL;
    bool server = cfg->role == TLS_SERVER;
    SSL_CTX *s = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (s == NULL) {
        ossl_reason(err, errlen, "cannot create an SSL context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION);
    SSL_CTX_set_mode(s, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_options(s, SSL_OP_NO_RENEGOTIATION);
    if (server) /* each connection is new: no session cache to share */
        SSL_CTX_set_session_cache_mode(s, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(s, 0);
    if (ctx->ciphers != NULL) {
        char list[4096];
        if (cipher_list(ctx->ciphers, list, sizeof(list), err, errlen) != 0)
            goto fail;
        if (SSL_CTX_set_cipher_list(s, list) != 1) {
            ossl_reason(err, errlen, "no usable cipher suite in --cipher-suites");
            goto fail;
        }
    }
    if (cfg->cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(s, cfg->cert_file) != 1) {
            char what[1200];
            snprintf(what, sizeof(what), "cannot load certificate %s", cfg->cert_file);
            ossl_reason(err, errlen, what);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(s, cfg->key_file ? cfg->key_file : cfg->cert_file,
                                        SSL_FILETYPE_PEM) != 1) {
            char what[1200];
            snprintf(what, sizeof(what), "cannot load key %s",
                     cfg->key_file ? cfg->key_file : cfg->cert_file);
            ossl_reason(err, errlen, what);
            goto fail;
        }
        if (SSL_CTX_check_private_key(s) != 1) {
            ossl_reason(err, errlen, "the key does not match the certificate");
            goto fail;
        }
    } else if (server) {
        snprintf(err, errlen, "KeyFile and CertFile are not presented");
        goto fail;
    }
    X509_STORE *store = SSL_CTX_get_cert_store(s);
    if (cfg->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(s, cfg->ca_file, NULL) != 1) {
            char what[1200];
            snprintf(what, sizeof(what), "cannot load trusted CA file %s", cfg->ca_file);
            ossl_reason(err, errlen, what);
            goto fail;
        }
        if (server) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca_file);
            if (names != NULL)
                SSL_CTX_set_client_CA_list(s, names);
        }
    } else if (!server) {
        SSL_CTX_set_default_verify_paths(s);
    }
    if (cfg->crl_file != NULL) {
        FILE *f = fopen(cfg->crl_file, "r");
        if (f == NULL) {
            snprintf(err, errlen, "cannot open CRL file %s: %s", cfg->crl_file, strerror(errno));
            goto fail;
        }
        int n = 0;
        X509_CRL *crl;
        while ((crl = PEM_read_X509_CRL(f, NULL, NULL, NULL)) != NULL) {
            X509_STORE_add_crl(store, crl);
            X509_CRL_free(crl);
            n++;
        }
        fclose(f);
        ERR_clear_error();
        if (n == 0) {
            snprintf(err, errlen, "no CRL in %s", cfg->crl_file);
            goto fail;
        }
        X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
    }
    if (server) {
        if (cfg->client_cert_auth || cfg->ca_file != NULL)
            SSL_CTX_set_verify(s, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
        else
            SSL_CTX_set_verify(s, SSL_VERIFY_NONE, NULL);
        if (ctx->alpn_wire_len > 0)
            SSL_CTX_set_alpn_select_cb(s, alpn_select, ctx);
    } else {
        if (cfg->insecure_skip_verify || cfg->auto_tls)
            SSL_CTX_set_verify(s, SSL_VERIFY_NONE, NULL);
        else
            SSL_CTX_set_verify(s, SSL_VERIFY_PEER, verify_cb);
        if (ctx->alpn_wire_len > 0 &&
            SSL_CTX_set_alpn_protos(s, ctx->alpn_wire, (unsigned)ctx->alpn_wire_len) != 0) {
            ossl_reason(err, errlen, "cannot set ALPN");
            goto fail;
        }
    }
    ERR_clear_error();
    return s;
fail:
    ERR_clear_error();
    SSL_CTX_free(s);
    return NULL;
}

static void ctx_destroy(tls_ctx *ctx)
{
    if (ctx->cur)
        SSL_CTX_free(ctx->cur);
    for (size_t i = 0; i < ctx->nfiles; i++)
        free(ctx->files[i].path);
    free(ctx->cert_file);
    free(ctx->key_file);
    free(ctx->ca_file);
    free(ctx->crl_file);
    free(ctx->auto_dir);
    free(ctx->auto_hosts);
    free(ctx->ciphers);
    free(ctx->alpn);
    free(ctx->allowed_cn);
    free(ctx->label);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

int tls_ctx_new(const struct tls_config *cfg, tls_ctx **out, char *err, size_t errlen)
{
    pthread_once(&once, init_once);
    tls_ctx *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return -ENOMEM;
    pthread_mutex_init(&ctx->mu, NULL);
    ctx->cfg = *cfg;
    ctx->cert_file = dup_or_null(cfg->cert_file);
    ctx->key_file = dup_or_null(cfg->key_file);
    ctx->ca_file = dup_or_null(cfg->ca_file);
    ctx->crl_file = dup_or_null(cfg->crl_file);
    ctx->auto_dir = dup_or_null(cfg->auto_dir);
    ctx->auto_hosts = dup_or_null(cfg->auto_hosts);
    ctx->ciphers = dup_or_null(cfg->cipher_suites);
    ctx->alpn = dup_or_null(cfg->alpn);
    ctx->allowed_cn = dup_or_null(cfg->allowed_cn);
    ctx->label = strdup(cfg->label && *cfg->label ? cfg->label : "TLS");
    if (ctx->label == NULL) {
        ctx_destroy(ctx);
        return -ENOMEM;
    }
    if (ctx->alpn != NULL) {
        size_t n = strlen(ctx->alpn);
        if (n == 0 || n + 1 > sizeof(ctx->alpn_wire)) {
            snprintf(err, errlen, "bad ALPN protocol");
            ctx_destroy(ctx);
            return -EINVAL;
        }
        ctx->alpn_wire[0] = (unsigned char)n;
        memcpy(ctx->alpn_wire + 1, ctx->alpn, n);
        ctx->alpn_wire_len = n + 1;
    }
    if (cfg->auto_tls && ctx->cert_file == NULL) {
        if (ctx->auto_dir == NULL) {
            snprintf(err, errlen, "--auto-tls needs a directory for its certificate");
            ctx_destroy(ctx);
            return -EINVAL;
        }
        char cp[1200], kp[1200];
        snprintf(cp, sizeof(cp), "%s/cert.pem", ctx->auto_dir);
        snprintf(kp, sizeof(kp), "%s/key.pem", ctx->auto_dir);
        int rv = 0;
        if (access(cp, R_OK) != 0 || access(kp, R_OK) != 0) {
            rv = mkdir_p(ctx->auto_dir);
            if (rv != 0)
                snprintf(err, errlen, "cannot create %s: %s", ctx->auto_dir, strerror(-rv));
            else
                rv = tls_make_self_signed(cp, kp, ctx->auto_hosts, err, errlen);
        }
        if (rv != 0) {
            ctx_destroy(ctx);
            return -EINVAL;
        }
        ctx->cert_file = strdup(cp);
        ctx->key_file = strdup(kp);
        if (ctx->cert_file == NULL || ctx->key_file == NULL) {
            ctx_destroy(ctx);
            return -ENOMEM;
        }
    }
    ctx->cfg.cert_file = ctx->cert_file;
    ctx->cfg.key_file = ctx->key_file;
    ctx->cfg.ca_file = ctx->ca_file;
    ctx->cfg.crl_file = ctx->crl_file;
    ctx->cfg.auto_dir = ctx->auto_dir;
    ctx->cfg.auto_hosts = ctx->auto_hosts;
    ctx->cfg.cipher_suites = ctx->ciphers;
    ctx->cfg.alpn = ctx->alpn;
    ctx->cfg.allowed_cn = ctx->allowed_cn;
    ctx->cfg.label = ctx->label;
    const char *files[MAX_FILES] = {ctx->cert_file, ctx->key_file, ctx->ca_file, ctx->crl_file};
    for (size_t i = 0; i < MAX_FILES; i++) {
        if (files[i] == NULL)
            continue;
        ctx->files[ctx->nfiles].path = strdup(files[i]);
        if (ctx->files[ctx->nfiles].path == NULL) {
            ctx_destroy(ctx);
            return -ENOMEM;
        }
        stamp(&ctx->files[ctx->nfiles]);
        ctx->nfiles++;
    }
    ctx->cur = build(ctx, err, errlen);
    if (ctx->cur == NULL) {
        ctx_destroy(ctx);
        return -EINVAL;
    }
    atomic_store(&ctx->seen_request, atomic_load(&reload_requests));
    atomic_store(&ctx->last_check_ms, mono_ms());
    *out = ctx;
    return 0;
}

void tls_ctx_free(tls_ctx *ctx)
{
    if (ctx != NULL)
        ctx_destroy(ctx);
}

int tls_ctx_reload(tls_ctx *ctx, char *err, size_t errlen)
{
    pthread_mutex_lock(&ctx->mu);
    /* stamp first: a file that changes again while we read it is read
     * again at the next check */
    for (size_t i = 0; i < ctx->nfiles; i++)
        stamp(&ctx->files[i]);
    SSL_CTX *n = build(ctx, err, errlen);
    if (n == NULL) {
        pthread_mutex_unlock(&ctx->mu);
        return -EINVAL;
    }
    SSL_CTX *old = ctx->cur;
    ctx->cur = n;
    atomic_fetch_add(&ctx->generation, 1);
    pthread_mutex_unlock(&ctx->mu);
    SSL_CTX_free(old); /* connections hold their own references */
    return 0;
}

unsigned tls_ctx_generation(tls_ctx *ctx)
{
    return atomic_load(&ctx->generation);
}

void tls_request_reload(void)
{
    atomic_fetch_add(&reload_requests, 1);
}

static void on_sighup(int sig)
{
    (void)sig;
    tls_request_reload();
}

int tls_install_sighup(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sighup;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return sigaction(SIGHUP, &sa, NULL) == 0 ? 0 : -errno;
}

/* maybe_reload: a reload was requested (SIGHUP), or a second passed since
 * the last look at the files and one of them changed. */
static void maybe_reload(tls_ctx *ctx)
{
    unsigned req = atomic_load(&reload_requests);
    unsigned seen = atomic_load(&ctx->seen_request);
    /* one thread takes each request (front loops share the context) */
    bool due = seen != req && atomic_compare_exchange_strong(&ctx->seen_request, &seen, req);
    long long now = mono_ms();
    long long last = atomic_load(&ctx->last_check_ms);
    if (!due && now - last < 1000)
        return;
    if (!due && !atomic_compare_exchange_strong(&ctx->last_check_ms, &last, now))
        return; /* another thread looks */
    if (!due) {
        pthread_mutex_lock(&ctx->mu);
        for (size_t i = 0; i < ctx->nfiles && !due; i++)
            due = stamp_changed(&ctx->files[i]);
        pthread_mutex_unlock(&ctx->mu);
        if (!due)
            return;
    }
    char err[512] = "";
    if (tls_ctx_reload(ctx, err, sizeof(err)) == 0)
        log_info(MOD, "%s: reloaded the certificates (%s)", ctx->label,
                 ctx->cert_file ? ctx->cert_file : "no certificate");
    else
        log_warn(MOD, "%s: cannot reload the certificates, keeping the old ones: %s", ctx->label,
                 err);
}

/* ---- connections ---- */

int tls_conn_new(tls_ctx *ctx, const char *server_name, tls_conn **out)
{
    bool server = ctx->cfg.role == TLS_SERVER;
    maybe_reload(ctx);
    tls_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&ctx->mu);
    c->ssl = SSL_new(ctx->cur);
    pthread_mutex_unlock(&ctx->mu);
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    if (c->ssl == NULL || c->rbio == NULL || c->wbio == NULL) {
        SSL_free(c->ssl);
        BIO_free(c->rbio);
        BIO_free(c->wbio);
        free(c);
        ERR_clear_error();
        return -ENOMEM;
    }
    BIO_set_mem_eof_return(c->rbio, -1);
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_ex_data(c->ssl, conn_ex_index, c);
    /* as etcd's VerifyPeerCertificate: both ways (a member dialing
     * another checks the certificate it is shown too) */
    if (ctx->allowed_cn != NULL) {
        snprintf(c->allowed_cn, sizeof(c->allowed_cn), "%s", ctx->allowed_cn);
        c->check_cn = true;
    }
    if (server) {
        SSL_set_accept_state(c->ssl);
    } else {
        SSL_set_connect_state(c->ssl);
        if (server_name != NULL && *server_name) {
            unsigned char ab[16];
            bool ip = inet_pton(AF_INET, server_name, ab) == 1 ||
                      inet_pton(AF_INET6, server_name, ab) == 1;
            X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
            if (ip) {
                X509_VERIFY_PARAM_set1_ip_asc(vp, server_name);
            } else {
                SSL_set_tlsext_host_name(c->ssl, server_name);
                X509_VERIFY_PARAM_set1_host(vp, server_name, 0);
            }
        }
    }
    *out = c;
    return 0;
}

void tls_conn_free(tls_conn *c)
{
    if (c == NULL)
        return;
    SSL_free(c->ssl); /* frees both BIOs */
    buf_free(&c->early);
    free(c);
    ERR_clear_error();
}

int tls_conn_feed(tls_conn *c, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int w = BIO_write(c->rbio, p, (int)n);
    return w == (int)n ? 0 : -ENOMEM;
}

/* fail records why the session failed from OpenSSL's state. */
static int fail(tls_conn *c, int ret, const char *when)
{
    c->failed = true;
    if (c->err[0] != '\0') { /* the verify callback said it already */
        ERR_clear_error();
        return TLS_FAILED;
    }
    int e = SSL_get_error(c->ssl, ret);
    long vr = SSL_get_verify_result(c->ssl);
    unsigned long last = 0, x;
    while ((x = ERR_get_error()) != 0)
        last = x;
    const char *reason = last ? ERR_reason_error_string(last) : NULL;
    if (vr != X509_V_OK && (last == 0 || ERR_GET_REASON(last) == SSL_R_CERTIFICATE_VERIFY_FAILED))
        snprintf(c->err, sizeof(c->err), "%s: certificate verify failed: %s", when,
                 X509_verify_cert_error_string(vr));
    else if (reason != NULL)
        snprintf(c->err, sizeof(c->err), "%s: %s", when, reason);
    else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL)
        snprintf(c->err, sizeof(c->err), "%s: %s", when,
                 "the peer closed the connection or sent something that is not TLS");
    else
        snprintf(c->err, sizeof(c->err), "%s: TLS error %d", when, e);
    return TLS_FAILED;
}

static void on_done(tls_conn *c)
{
    c->done = true;
    const unsigned char *a = NULL;
    unsigned al = 0;
    SSL_get0_alpn_selected(c->ssl, &a, &al);
    if (a != NULL && al < sizeof(c->alpn)) {
        memcpy(c->alpn, a, al);
        c->alpn[al] = '\0';
    }
    X509 *peer = SSL_get0_peer_certificate(c->ssl);
    if (peer != NULL && SSL_get_verify_result(c->ssl) == X509_V_OK &&
        SSL_get_verify_mode(c->ssl) != SSL_VERIFY_NONE &&
        name_cn(X509_get_subject_name(peer), c->cn, sizeof(c->cn)) == 0)
        c->have_cn = true;
}

static int flush_early(tls_conn *c)
{
    size_t off = 0;
    while (off < c->early.len) {
        int w = SSL_write(c->ssl, c->early.data + off, (int)(c->early.len - off));
        if (w <= 0)
            return fail(c, w, "write");
        off += (size_t)w;
    }
    buf_free(&c->early);
    return 0;
}

int tls_conn_handshake(tls_conn *c)
{
    if (c->failed)
        return TLS_FAILED;
    if (c->done)
        return 1;
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        on_done(c);
        if (flush_early(c) != 0)
            return TLS_FAILED;
        return 1;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    return fail(c, r, "handshake");
}

ssize_t tls_conn_read(tls_conn *c, void *dst, size_t cap)
{
    if (c->failed)
        return TLS_FAILED;
    if (c->eof)
        return TLS_EOF;
    if (!c->done) {
        int h = tls_conn_handshake(c);
        if (h == 0)
            return TLS_WANT;
        if (h < 0)
            return h;
    }
    if (cap == 0)
        return TLS_WANT;
    ERR_clear_error();
    int r = SSL_read(c->ssl, dst, cap > INT32_MAX ? INT32_MAX : (int)cap);
    if (r > 0)
        return r;
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return TLS_WANT;
    if (e == SSL_ERROR_ZERO_RETURN) {
        c->eof = true;
        return TLS_EOF;
    }
    return fail(c, r, "read");
}

int tls_conn_write(tls_conn *c, const void *p, size_t n)
{
    if (c->failed)
        return TLS_FAILED;
    if (!c->done || c->early.len > 0) {
        if (buf_append(&c->early, p, n) != 0)
            return -ENOMEM;
        if (!c->done) {
            /* a client's first write starts the handshake */
            if (!SSL_is_server(c->ssl) && tls_conn_handshake(c) < 0)
                return TLS_FAILED;
            return 0;
        }
        return flush_early(c);
    }
    size_t off = 0;
    ERR_clear_error();
    while (off < n) {
        int w = SSL_write(c->ssl, (const uint8_t *)p + off, (int)(n - off > INT32_MAX ? INT32_MAX
                                                                                       : n - off));
        if (w <= 0)
            return fail(c, w, "write");
        off += (size_t)w;
    }
    return 0;
}

ssize_t tls_conn_take_output(tls_conn *c, struct buf *out)
{
    size_t pend = BIO_ctrl_pending(c->wbio);
    if (pend == 0)
        return 0;
    if (buf_reserve(out, pend) != 0)
        return -ENOMEM;
    int r = BIO_read(c->wbio, out->data + out->len, (int)pend);
    if (r <= 0)
        return 0;
    out->len += (size_t)r;
    return r;
}

size_t tls_conn_output_size(const tls_conn *c)
{
    return BIO_ctrl_pending(c->wbio);
}

size_t tls_conn_read_output(tls_conn *c, void *dst, size_t n)
{
    if (n == 0)
        return 0;
    int r = BIO_read(c->wbio, dst, n > INT32_MAX ? INT32_MAX : (int)n);
    return r > 0 ? (size_t)r : 0;
}

bool tls_conn_done(const tls_conn *c)
{
    return c->done;
}

const char *tls_conn_error(const tls_conn *c)
{
    return c->err;
}

bool tls_conn_is_server(const tls_conn *c)
{
    return SSL_is_server(c->ssl) == 1;
}

const char *tls_conn_server_name(const tls_conn *c)
{
    const char *n = SSL_get_servername(c->ssl, TLSEXT_NAMETYPE_host_name);
    return n != NULL ? n : "";
}

const char *tls_conn_peer_cn(const tls_conn *c)
{
    return c->have_cn ? c->cn : NULL;
}

int tls_conn_peer_subject(const tls_conn *c, char *out, size_t cap)
{
    X509 *peer = c->done ? SSL_get0_peer_certificate(c->ssl) : NULL;
    if (peer == NULL || SSL_get_verify_result(c->ssl) != X509_V_OK ||
        SSL_get_verify_mode(c->ssl) == SSL_VERIFY_NONE)
        return -ENOENT;
    BIO *b = BIO_new(BIO_s_mem());
    if (b == NULL)
        return -ENOMEM;
    int rv = -ENOMEM;
    BUF_MEM *m = NULL;
    if (X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253) >= 0 &&
        BIO_get_mem_ptr(b, &m) == 1 && m != NULL) {
        rv = m->length < cap ? 0 : -ENAMETOOLONG;
        if (rv == 0) {
            memcpy(out, m->data, m->length);
            out[m->length] = '\0';
        }
    }
    BIO_free(b);
    return rv;
}

const char *tls_conn_alpn(const tls_conn *c)
{
    return c->alpn;
}
