/* tests/auth/test_jwt.c: criterion tests for src/auth/jwt.c (etcd 3.4
 * compatible JWT tokens). Keys are made by the openssl CLI at test time in
 * a temp dir (created once by the PRE_ALL hook, path passed on to the test
 * processes in $QUORUM_JWT_TEST_KEYS; removed by POST_ALL). Interop with a
 * real etcd is tests/auth/jwt_vs_etcd.py. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/jwt.h"

#define NOW 1700000000LL

static char keydir[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char full[2400];
    snprintf(full, sizeof(full), "cd '%s' && (%s) >/dev/null 2>&1", keydir, cmd);
    if (system(full) != 0) {
        fprintf(stderr, "test_jwt: failed: %s\n", cmd);
        abort();
    }
}

static void make_keys(void)
{
    strcpy(keydir, "/tmp/quorum_jwt_test.XXXXXX");
    if (mkdtemp(keydir) == NULL)
        abort();
    sh("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.pem");
    sh("openssl pkey -in rsa.pem -pubout -out rsa.pub");
    sh("openssl rsa -in rsa.pem -traditional -out rsa_pkcs1.pem");
    sh("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa2.pem");
    sh("openssl pkey -in rsa2.pem -pubout -out rsa2.pub");
    sh("openssl req -x509 -new -key rsa.pem -subj /CN=jwt -days 2 -out rsa_cert.pem");
    sh("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 "
       "-pkeyopt rsa_keygen_pubexp:3 -out rsa_e3.pem");
    sh("openssl pkey -in rsa_e3.pem -pubout -out rsa_e3.pub");
    /* text before the PEM block (Go's pem.Decode skips it), > 4 KiB */
    sh("for i in $(seq 1 100); do echo 'comment line comment line comment line comment line'; "
       "done > junk_rsa.pem && cat rsa.pem >> junk_rsa.pem");
    sh("openssl ecparam -name prime256v1 -genkey -noout -out ec.pem"); /* SEC1 */
    sh("openssl pkey -in ec.pem -out ec_pkcs8.pem");
    sh("openssl pkey -in ec.pem -pubout -out ec.pub");
    /* a SEC1 key carrying another key's public point (Go uses d*G) */
    sh("openssl ecparam -name prime256v1 -genkey -noout -out ec_other.pem");
    sh("openssl pkey -in ec_other.pem -pubout -out ec_other.pub");
    sh("{ echo '-----BEGIN EC PRIVATE KEY-----'; "
       "{ openssl ec -in ec.pem -outform DER | head -c 56; "
       "openssl ec -in ec_other.pem -outform DER | tail -c 65; } | base64; "
       "echo '-----END EC PRIVATE KEY-----'; } > ec_stale.pem");
    sh("openssl ecparam -name secp384r1 -genkey -noout -out ec384.pem");
    sh("openssl pkey -in ec384.pem -pubout -out ec384.pub");
    sh("openssl ecparam -name secp521r1 -genkey -noout -out ec521.pem");
    sh("openssl ecparam -name secp256k1 -genkey -noout -out k1.pem");
    sh("openssl genpkey -algorithm ed25519 -out ed.pem");
    sh("printf 'my hmac secret\\n' > hmac.key");
    sh(": > empty.key");
    sh("printf 'not a key\\n' > garbage.pem");
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    make_keys();
    setenv("QUORUM_JWT_TEST_KEYS", keydir, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    const char *d = getenv("QUORUM_JWT_TEST_KEYS");
    if (d != NULL && strncmp(d, "/tmp/quorum_jwt_test.", 21) == 0)
        nftw(d, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
    const char *d = getenv("QUORUM_JWT_TEST_KEYS");
    cr_assert(d != NULL, "PRE_ALL hook did not run");
    snprintf(keydir, sizeof(keydir), "%s", d);
}

TestSuite(jwt, .init = setup);

/* opts("priv-key=%s/rsa.pem,...") with every %K replaced by the key dir */
static const char *opts(const char *fmt)
{
    static char buf[4][1024];
    static int n;
    char *o = buf[n++ % 4];
    size_t w = 0;
    for (const char *p = fmt; *p && w < 1000; p++) {
        if (p[0] == '%' && p[1] == 'K') {
            w += (size_t)snprintf(o + w, 1024 - w, "%s", keydir);
            p++;
        } else {
            o[w++] = *p;
        }
    }
    o[w] = '\0';
    return o;
}

static jwt_keys *load_ok(const char *fmt)
{
    jwt_keys *k = NULL;
    char err[256];
    int rc = jwt_keys_load(opts(fmt), &k, err, sizeof(err));
    cr_assert_eq(rc, 0, "load %s: %d %s", fmt, rc, err);
    cr_assert_not_null(k);
    return k;
}

static int load_err(const char *fmt, char *err, size_t errlen)
{
    jwt_keys *k = (jwt_keys *)1;
    int rc = jwt_keys_load(opts(fmt), &k, err, errlen);
    cr_assert_null(k);
    return rc;
}

static char *sign(jwt_keys *k, const char *user, uint64_t rev, int64_t now)
{
    char *t = NULL;
    int rc = jwt_sign(k, user, rev, now, &t);
    cr_assert_eq(rc, 0, "sign: %d", rc);
    return t;
}

static int verify(jwt_keys *k, const char *tok, int64_t now, char *user, size_t cap,
                  uint64_t *rev)
{
    return jwt_verify(k, tok, strlen(tok), now, user, cap, rev);
}

static void b64url(const void *in, size_t n, char *out)
{
    int l = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    while (l > 0 && out[l - 1] == '=')
        l--;
    out[l] = '\0';
    for (char *p = out; *p; p++)
        *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
}

static size_t b64url_dec(const char *in, unsigned char *out)
{
    char tmp[4096];
    size_t n = strlen(in);
    memcpy(tmp, in, n);
    while (n % 4)
        tmp[n++] = '=';
    tmp[n] = '\0';
    for (char *p = tmp; *p; p++)
        *p = *p == '-' ? '+' : *p == '_' ? '/' : *p;
    int l = EVP_DecodeBlock(out, (unsigned char *)tmp, (int)n);
    cr_assert(l >= 0);
    while (n > 0 && tmp[n - 1] == '=') {
        l--;
        n--;
    }
    return (size_t)l;
}

/* hs_token builds header.claims.HMAC-SHA(256|384|512) from raw JSON, keyed
 * with the contents of |keyfile| (etcd's HS secret is the priv-key file) */
static char *hs_token(const char *keyfile, int bits, const char *hdr, const char *claims)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", keydir, keyfile);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char key[8192];
    size_t kl = fread(key, 1, sizeof(key), f);
    fclose(f);
    char *t = malloc(3 * (strlen(hdr) + strlen(claims)) + 512);
    b64url(hdr, strlen(hdr), t);
    strcat(t, ".");
    b64url(claims, strlen(claims), t + strlen(t));
    unsigned char mac[64];
    unsigned int ml = 0;
    const EVP_MD *md = bits == 256 ? EVP_sha256() : bits == 384 ? EVP_sha384() : EVP_sha512();
    HMAC(md, key, (int)kl, (unsigned char *)t, strlen(t), mac, &ml);
    strcat(t, ".");
    b64url(mac, ml, t + strlen(t));
    return t;
}

static const char *HDR = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
static const char *HSOPTS = "priv-key=%K/hmac.key,sign-method=HS256";

/* ------------------------------------------------------------ options */

Test(jwt, load_defaults)
{
    jwt_keys *k = load_ok("pub-key=%K/rsa.pub,priv-key=%K/rsa.pem,sign-method=RS256");
    cr_assert_eq(jwt_keys_ttl_ms(k), 300000); /* etcd DefaultTTL 5m */
    cr_assert(jwt_keys_can_sign(k));
    cr_assert_str_eq(jwt_keys_alg(k), "RS256");
    jwt_keys_free(k);
    k = load_ok("sign-method=ES256,ttl=,priv-key=%K/ec.pem"); /* empty ttl: default */
    cr_assert_eq(jwt_keys_ttl_ms(k), 300000);
    jwt_keys_free(k);
}

Test(jwt, load_ttl)
{
    static const struct {
        const char *ttl;
        int64_t ns;
        uint64_t ms;
    } cases[] = {
        {"1h30m", 5400000000000LL, 5400000}, {"1500ms", 1500000000LL, 1500},
        {"0", 0, 0},                         {"-1s", -1000000000LL, 0},
        {"1.5h", 5400000000000LL, 5400000}, {"10s", 10000000000LL, 10000},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char o[512];
        snprintf(o, sizeof(o), "priv-key=%%K/rsa.pem,sign-method=RS256,ttl=%s", cases[i].ttl);
        jwt_keys *k = load_ok(o);
        cr_assert_eq(jwt_keys_ttl_ns(k), cases[i].ns, "%s", cases[i].ttl);
        cr_assert_eq(jwt_keys_ttl_ms(k), cases[i].ms, "%s", cases[i].ttl);
        jwt_keys_free(k);
    }
}

Test(jwt, parse_duration)
{
    static const struct {
        const char *s;
        int rc;
        int64_t ns;
    } cases[] = {
        {"0", 0, 0},
        {"5m", 0, 300000000000LL},
        {"+5m", 0, 300000000000LL},
        {"-5m", 0, -300000000000LL},
        {"1h2m3s4ms5us6ns", 0, 3723004005006LL},
        {"1\xc2\xb5s", 0, 1000},
        {"1\xce\xbcs", 0, 1000},
        {".5s", 0, 500000000},
        {"5.s", 0, 5000000000LL},
        {"2562047h47m16.854775807s", 0, INT64_MAX},
        {"2562047h47m16.854775808s", -EINVAL, 0},
        {"", -EINVAL, 0},
        {"5", -EINVAL, 0},
        {"5x", -EINVAL, 0},
        {".s", -EINVAL, 0},
        {"-", -EINVAL, 0},
        {"1d", -EINVAL, 0},
        {" 5m", -EINVAL, 0},
        {"99999999999999999999h", -EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ns = 12345;
        int rc = jwt_parse_duration(cases[i].s, &ns);
        cr_assert_eq(rc, cases[i].rc, "%s: rc %d", cases[i].s, rc);
        if (rc == 0)
            cr_assert_eq(ns, cases[i].ns, "%s: %lld", cases[i].s, (long long)ns);
    }
}

Test(jwt, load_errors)
{
    char err[256];
    static const struct {
        const char *opts;
        int rc;
        const char *err;
    } cases[] = {
        {"", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=XX256", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=rs256", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=none", -EINVAL,
         "unsupported signing method: *jwt.signingMethodNone"},
        {"sign-method=RS256", -EINVAL, JWT_ERR_MISSING_KEY},
        {"sign-method=ES256,pub-key=,priv-key=", -EINVAL, JWT_ERR_MISSING_KEY},
        {"sign-method=HS256,pub-key=%K/hmac.key", -EINVAL, JWT_ERR_MISSING_KEY},
        {"sign-method=HS256,priv-key=%K/empty.key", -EINVAL, JWT_ERR_MISSING_KEY},
        {"priv-key=%K/nonexistent,sign-method=RS256", -ENOENT, JWT_ERR_INVALID_AUTH_OPTS},
        {"pub-key=%K/nonexistent,sign-method=RS256", -ENOENT, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K,sign-method=RS256", -EISDIR, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=RS256,ttl=5", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=RS256,ttl=5m,ttl=6m", -EINVAL,
         JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=RS256,", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,,sign-method=RS256", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method=RS256=x", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/rsa.pem,sign-method", -EINVAL, JWT_ERR_INVALID_AUTH_OPTS},
        {"priv-key=%K/garbage.pem,sign-method=RS256", -EINVAL,
         "invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key"},
        {"priv-key=%K/ec_pkcs8.pem,sign-method=RS256", -EINVAL,
         "key is not a valid RSA private key"},
        {"priv-key=%K/ed.pem,sign-method=ES256", -EINVAL, "key is not a valid ECDSA private key"},
        {"priv-key=%K/k1.pem,sign-method=ES256", -EINVAL, "key is not a valid ECDSA private key"},
        {"pub-key=%K/ec.pub,sign-method=RS256", -EINVAL, "key is not a valid RSA public key"},
        {"pub-key=%K/rsa.pub,sign-method=ES256", -EINVAL, "key is not a valid ECDSA public key"},
        {"priv-key=%K/rsa.pem,pub-key=%K/garbage.pem,sign-method=RS256", -EINVAL,
         "invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key"},
        /* etcd's checks: RSA N and E both differ; EC curve, X and Y all
         * differ */
        {"priv-key=%K/rsa.pem,pub-key=%K/rsa_e3.pub,sign-method=RS256", -EINVAL,
         JWT_ERR_KEY_MISMATCH},
        {"priv-key=%K/ec.pem,pub-key=%K/ec384.pub,sign-method=ES256", -EINVAL,
         JWT_ERR_KEY_MISMATCH},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = load_err(cases[i].opts, err, sizeof(err));
        cr_assert_eq(rc, cases[i].rc, "%s: rc %d (%s)", cases[i].opts, rc, err);
        cr_assert_str_eq(err, cases[i].err, "%s", cases[i].opts);
    }
    /* a private key that is no key at all: some x509 error as in Go */
    int rc = load_err("priv-key=%K/ec.pub,sign-method=ES256", err, sizeof(err));
    cr_assert_eq(rc, -EINVAL);
    cr_assert(strncmp(err, "x509: ", 6) == 0, "%s", err);
}

Test(jwt, load_warnings_and_key_forms)
{
    char err[256], detail[512];
    jwt_keys *k = NULL;
    /* unknown options are only a warning in etcd 3.4 */
    int rc = jwt_keys_load_ex(opts("priv-key=%K/rsa.pem,sign-method=RS256,foo=bar"), &k, err,
                              sizeof(err), detail, sizeof(detail));
    cr_assert_eq(rc, 0);
    cr_assert_str_eq(detail, "unknown JWT options: [foo]");
    jwt_keys_free(k);
    /* etcd's RSA mismatch check only fires when both N and E differ: a
     * different key with e=65537 loads, and the private key verifies */
    rc = jwt_keys_load_ex(opts("priv-key=%K/rsa.pem,pub-key=%K/rsa2.pub,sign-method=RS256"), &k,
                          err, sizeof(err), detail, sizeof(detail));
    cr_assert_eq(rc, 0);
    cr_assert(strstr(detail, "does not match") != NULL, "%s", detail);
    char *t = sign(k, "root", 3, NOW);
    cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), 0);
    free(t);
    jwt_keys_free(k);
    /* PKCS#1 RSA, PKCS#8 / SEC1 EC, certificate as pub-key, PS with RSA */
    const char *forms[] = {
        "priv-key=%K/rsa_pkcs1.pem,sign-method=RS384",
        "priv-key=%K/ec_pkcs8.pem,sign-method=ES256",
        "pub-key=%K/rsa_cert.pem,sign-method=RS256",
        "pub-key=%K/rsa.pub,priv-key=%K/rsa.pem,sign-method=PS512",
        "priv-key=%K/ec521.pem,sign-method=ES512",
        "priv-key=%K/junk_rsa.pem,pub-key=%K/rsa.pub,sign-method=RS256",
        "priv-key=%K/rsa_e3.pem,sign-method=RS256",
    };
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++)
        jwt_keys_free(load_ok(forms[i]));
}

/* ----------------------------------------------------------- round trip */

static void roundtrip(const char *signopts, const char *verifyopts)
{
    jwt_keys *s = load_ok(signopts);
    jwt_keys *v = load_ok(verifyopts);
    char *t = sign(s, "root", 42, NOW);
    char user[64];
    uint64_t rev = 0;
    int rc = verify(v, t, NOW + 1, user, sizeof(user), &rev);
    cr_assert_eq(rc, 0, "%s -> %s: %d", signopts, verifyopts, rc);
    cr_assert_str_eq(user, "root");
    cr_assert_eq(rev, 42);
    /* header and claims as etcd writes them */
    char *d1 = strchr(t, '.'), *d2 = strchr(d1 + 1, '.');
    char seg[1024];
    unsigned char js[1024];
    memcpy(seg, t, (size_t)(d1 - t));
    seg[d1 - t] = '\0';
    js[b64url_dec(seg, js)] = '\0';
    char want[128];
    snprintf(want, sizeof(want), "{\"alg\":\"%s\",\"typ\":\"JWT\"}", jwt_keys_alg(s));
    cr_assert_str_eq((char *)js, want);
    memcpy(seg, d1 + 1, (size_t)(d2 - d1 - 1));
    seg[d2 - d1 - 1] = '\0';
    js[b64url_dec(seg, js)] = '\0';
    cr_assert_str_eq((char *)js, "{\"exp\":1700000300,\"revision\":42,\"username\":\"root\"}");
    cr_assert(strchr(t, '=') == NULL);
    free(t);
    jwt_keys_free(s);
    jwt_keys_free(v);
}

Test(jwt, roundtrip_rs256)
{
    roundtrip("priv-key=%K/rsa.pem,sign-method=RS256", "pub-key=%K/rsa.pub,sign-method=RS256");
    roundtrip("priv-key=%K/rsa.pem,sign-method=RS256", "priv-key=%K/rsa.pem,sign-method=RS256");
    roundtrip("priv-key=%K/rsa.pem,sign-method=RS512", "pub-key=%K/rsa_cert.pem,sign-method=RS512");
}

Test(jwt, roundtrip_ps)
{
    roundtrip("priv-key=%K/rsa.pem,sign-method=PS256", "pub-key=%K/rsa.pub,sign-method=PS256");
    roundtrip("priv-key=%K/rsa.pem,sign-method=PS384", "pub-key=%K/rsa.pub,sign-method=PS384");
}

Test(jwt, roundtrip_es256)
{
    roundtrip("priv-key=%K/ec.pem,sign-method=ES256", "pub-key=%K/ec.pub,sign-method=ES256");
    roundtrip("priv-key=%K/ec_pkcs8.pem,sign-method=ES256", "priv-key=%K/ec.pem,sign-method=ES256");
    roundtrip("priv-key=%K/ec384.pem,sign-method=ES384", "pub-key=%K/ec384.pub,sign-method=ES384");
    roundtrip("priv-key=%K/ec521.pem,sign-method=ES512", "priv-key=%K/ec521.pem,sign-method=ES512");
}

Test(jwt, roundtrip_hs)
{
    roundtrip(HSOPTS, HSOPTS);
    roundtrip("priv-key=%K/hmac.key,sign-method=HS512", "priv-key=%K/hmac.key,sign-method=HS512");
}

Test(jwt, es_signature_is_raw_r_s)
{
    jwt_keys *k = load_ok("priv-key=%K/ec.pem,sign-method=ES256");
    for (int i = 0; i < 20; i++) {
        char *t = sign(k, "root", 1, NOW);
        unsigned char sig[256];
        cr_assert_eq(b64url_dec(strrchr(t, '.') + 1, sig), 64);
        free(t);
    }
    jwt_keys_free(k);
    k = load_ok("priv-key=%K/ec521.pem,sign-method=ES512");
    char *t = sign(k, "root", 1, NOW);
    unsigned char sig[256];
    cr_assert_eq(b64url_dec(strrchr(t, '.') + 1, sig), 132);
    free(t);
    jwt_keys_free(k);
}

Test(jwt, ec_public_point_from_scalar)
{
    /* as Go's x509.ParseECPrivateKey: the stored point is ignored */
    jwt_keys *k = load_ok("priv-key=%K/ec_stale.pem,sign-method=ES256");
    jwt_keys *good = load_ok("pub-key=%K/ec.pub,sign-method=ES256");
    jwt_keys *other = load_ok("pub-key=%K/ec_other.pub,sign-method=ES256");
    char *t = sign(k, "root", 2, NOW);
    cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), 0);
    cr_assert_eq(verify(good, t, NOW, NULL, 0, NULL), 0);
    cr_assert_eq(verify(other, t, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    jwt_keys_free(other);
    jwt_keys_free(good);
    jwt_keys_free(k);
}

Test(jwt, es_curve_must_match_method_to_sign)
{
    /* jwt-go: ES256 with a P-384 key loads, but signing is ErrInvalidKey */
    jwt_keys *k = load_ok("priv-key=%K/ec384.pem,sign-method=ES256");
    char *t = NULL;
    cr_assert_eq(jwt_sign(k, "root", 1, NOW, &t), -EINVAL);
    cr_assert_null(t);
    jwt_keys_free(k);
}

Test(jwt, verify_only)
{
    jwt_keys *v = load_ok("pub-key=%K/rsa.pub,sign-method=RS256");
    cr_assert(!jwt_keys_can_sign(v));
    char *t = NULL;
    cr_assert_eq(jwt_sign(v, "root", 1, NOW, &t), -EPERM);
    cr_assert_null(t);
    jwt_keys_free(v);
}

Test(jwt, go_json_escaping)
{
    jwt_keys *k = load_ok(HSOPTS);
    const char *u = "a<b>&c\xe2\x80\xa8\"\\\x01\x08/\xc3\xa9";
    char *t = sign(k, u, 9, NOW);
    char *d1 = strchr(t, '.'), *d2 = strchr(d1 + 1, '.');
    char seg[1024];
    unsigned char js[1024];
    memcpy(seg, d1 + 1, (size_t)(d2 - d1 - 1));
    seg[d2 - d1 - 1] = '\0';
    js[b64url_dec(seg, js)] = '\0';
    /* what Go's encoding/json (1.19) writes */
    cr_assert_str_eq((char *)js, "{\"exp\":1700000300,\"revision\":9,\"username\":"
                                 "\"a\\u003cb\\u003e\\u0026c\\u2028\\\"\\\\\\u0001\\u0008/"
                                 "\xc3\xa9\"}");
    char user[64];
    cr_assert_eq(verify(k, t, NOW, user, sizeof(user), NULL), 0);
    cr_assert_str_eq(user, u);
    free(t);
    cr_assert_eq(jwt_sign(k, "bad\xff", 1, NOW, &t), -EINVAL);
    cr_assert_eq(jwt_sign(k, "root", (uint64_t)INT64_MAX + 1, NOW, &t), -ERANGE);
    jwt_keys_free(k);
}

/* ------------------------------------------------------------- expiry */

Test(jwt, expired)
{
    jwt_keys *k = load_ok("priv-key=%K/rsa.pem,sign-method=RS256,ttl=10s");
    char *t = sign(k, "root", 1, NOW);
    uint64_t rev;
    cr_assert_eq(verify(k, t, NOW + 10, NULL, 0, &rev), 0); /* now == exp: valid */
    cr_assert_eq(verify(k, t, NOW + 11, NULL, 0, &rev), -ETIMEDOUT);
    cr_assert_eq(verify(k, t, NOW + 1000000, NULL, 0, &rev), -ETIMEDOUT);
    /* expired and forged: a bad signature wins */
    t[strlen(t) - 5] = t[strlen(t) - 5] == 'A' ? 'B' : 'A';
    cr_assert_eq(verify(k, t, NOW + 11, NULL, 0, &rev), -EINVAL);
    free(t);
    jwt_keys_free(k);
    /* ttl=0: valid only in the second it was made; negative: born expired */
    k = load_ok("priv-key=%K/hmac.key,sign-method=HS256,ttl=0");
    t = sign(k, "root", 1, NOW);
    cr_assert_eq(verify(k, t, NOW, NULL, 0, &rev), 0);
    cr_assert_eq(verify(k, t, NOW + 1, NULL, 0, &rev), -ETIMEDOUT);
    free(t);
    jwt_keys_free(k);
    k = load_ok("priv-key=%K/hmac.key,sign-method=HS256,ttl=-1m");
    t = sign(k, "root", 1, NOW);
    cr_assert_eq(verify(k, t, NOW, NULL, 0, &rev), -ETIMEDOUT);
    free(t);
    jwt_keys_free(k);
}

Test(jwt, time_claims_like_jwt_go)
{
    jwt_keys *k = load_ok(HSOPTS);
    static const struct {
        const char *claims;
        int rc;
    } cases[] = {
        {"{\"username\":\"u\",\"revision\":1}", 0},                /* no exp: never expires */
        {"{\"exp\":0,\"username\":\"u\",\"revision\":1}", 0},      /* 0: unset */
        /* present but not a number: invalid (golang-jwt v3.2.2) */
        {"{\"exp\":\"1\",\"username\":\"u\",\"revision\":1}", -EINVAL},
        {"{\"exp\":null,\"username\":\"u\",\"revision\":1}", -EINVAL},
        {"{\"iat\":[],\"username\":\"u\",\"revision\":1}", -EINVAL},
        {"{\"nbf\":true,\"username\":\"u\",\"revision\":1}", -EINVAL},
        {"{\"exp\":1699999999,\"username\":\"u\",\"revision\":1}", -ETIMEDOUT},
        {"{\"exp\":1700000000.9,\"username\":\"u\",\"revision\":1}", 0},
        {"{\"exp\":1699999999.9,\"username\":\"u\",\"revision\":1}", -ETIMEDOUT},
        {"{\"exp\":1e300,\"username\":\"u\",\"revision\":1}", -ETIMEDOUT}, /* Go: INT64_MIN */
        {"{\"exp\":-5,\"username\":\"u\",\"revision\":1}", -ETIMEDOUT},
        {"{\"iat\":1700000001,\"username\":\"u\",\"revision\":1}", -EINVAL},
        {"{\"iat\":1700000000,\"username\":\"u\",\"revision\":1}", 0},
        {"{\"nbf\":1700000001,\"username\":\"u\",\"revision\":1}", -EINVAL},
        {"{\"nbf\":1e300,\"username\":\"u\",\"revision\":1}", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *t = hs_token("hmac.key", 256, HDR, cases[i].claims);
        int rc = verify(k, t, NOW, NULL, 0, NULL);
        cr_assert_eq(rc, cases[i].rc, "%s: %d", cases[i].claims, rc);
        free(t);
    }
    jwt_keys_free(k);
}

/* -------------------------------------------------------------- claims */

Test(jwt, claims_types)
{
    jwt_keys *k = load_ok(HSOPTS);
    static const struct {
        const char *hdr, *claims;
        int rc;
        const char *user;
        uint64_t rev;
    } cases[] = {
        {NULL, "{\"revision\":1}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":\"u\"}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":7,\"revision\":1}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":null,\"revision\":1}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":\"u\",\"revision\":\"1\"}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":\"u\",\"revision\":-1}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":\"u\",\"revision\":1e30}", -EINVAL, NULL, 0},
        {NULL, "{\"username\":\"u\\u0000x\",\"revision\":1}", -EINVAL, NULL, 0},
        {NULL, "[1]", -EINVAL, NULL, 0},
        {NULL, "null", -EINVAL, NULL, 0},
        {NULL, "{\"username\":\"u\",\"revision\":7.9}", 0, "u", 7}, /* uint64(float64) */
        {NULL, "{\"username\":\"u\",\"revision\":9007199254740993}", 0, "u",
         9007199254740992ULL}, /* float64 precision, as etcd */
        {NULL, "{\"username\":\"\",\"revision\":1,\"extra\":[1,{}]}", 0, "", 1},
        {NULL, "{\"username\":\"a\",\"username\":\"b\",\"revision\":2}", 0, "b", 2},
        /* json.Decoder reads the first value only */
        {NULL, "{\"username\":\"u\",\"revision\":3} trailing", 0, "u", 3},
        {NULL, "{\"username\":\"u\",\"revision\":3", -EINVAL, NULL, 0},
        /* header: json.Unmarshal is strict; typ is not checked */
        {"{\"alg\":\"HS256\"}", "{\"username\":\"u\",\"revision\":4}", 0, "u", 4},
        {"{\"alg\":\"HS256\",\"kid\":\"x\",\"typ\":\"foo\"}", "{\"username\":\"u\",\"revision\":4}",
         0, "u", 4},
        {"{\"alg\":\"HS256\"} x", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
        {"{\"alg\":\"hs256\"}", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
        {"{\"alg\":\"HS256\\u0000\"}", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
        {"{\"alg\":null}", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
        {"{}", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
        {"[\"HS256\"]", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
        {"", "{\"username\":\"u\",\"revision\":4}", -EINVAL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *t = hs_token("hmac.key", 256, cases[i].hdr ? cases[i].hdr : HDR, cases[i].claims);
        char user[32] = "unchanged";
        uint64_t rev = 0;
        int rc = verify(k, t, NOW, user, sizeof(user), &rev);
        cr_assert_eq(rc, cases[i].rc, "%zu %s: %d", i, cases[i].claims, rc);
        if (rc == 0) {
            cr_assert_str_eq(user, cases[i].user, "%s", cases[i].claims);
            cr_assert_eq(rev, cases[i].rev, "%s", cases[i].claims);
        }
        free(t);
    }
    jwt_keys_free(k);
}

Test(jwt, username_too_long_for_usercap)
{
    jwt_keys *k = load_ok("priv-key=%K/ec.pem,sign-method=ES256");
    char *t = sign(k, "root", 5, NOW);
    char user[8];
    uint64_t rev = 0;
    cr_assert_eq(verify(k, t, NOW, user, 4, &rev), -ERANGE);
    cr_assert_eq(verify(k, t, NOW, user, 0, &rev), -ERANGE);
    cr_assert_eq(verify(k, t, NOW, user, 5, &rev), 0);
    cr_assert_str_eq(user, "root");
    cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), 0); /* outputs optional */
    free(t);
    jwt_keys_free(k);
}

/* ------------------------------------------------------------- forgery */

Test(jwt, tampered_payload)
{
    jwt_keys *k = load_ok("priv-key=%K/rsa.pem,sign-method=RS256");
    char *t = sign(k, "root", 1, NOW);
    char *d1 = strchr(t, '.'), *d2 = strchr(d1 + 1, '.');
    /* replace the claims with root -> admin, same signature */
    char claims[256], forged[2048];
    const char *c = "{\"exp\":1700000300,\"revision\":1,\"username\":\"admin\"}";
    b64url(c, strlen(c), claims);
    snprintf(forged, sizeof(forged), "%.*s.%s%s", (int)(d1 - t), t, claims, d2);
    cr_assert_eq(verify(k, forged, NOW, NULL, 0, NULL), -EINVAL);
    /* flip each character of the claims segment */
    for (char *p = d1 + 1; p < d2; p++) {
        char o = *p;
        *p = o == 'A' ? 'B' : 'A';
        cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), -EINVAL, "at %td", p - t);
        *p = o;
    }
    /* and of the header */
    for (char *p = t; p < d1; p++) {
        char o = *p;
        *p = o == 'A' ? 'B' : 'A';
        cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), -EINVAL, "at %td", p - t);
        *p = o;
    }
    cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), 0);
    free(t);
    jwt_keys_free(k);
}

Test(jwt, tampered_signature)
{
    const char *o[] = {"priv-key=%K/rsa.pem,sign-method=RS256",
                       "priv-key=%K/rsa.pem,sign-method=PS256",
                       "priv-key=%K/ec.pem,sign-method=ES256", HSOPTS};
    for (size_t i = 0; i < 4; i++) {
        jwt_keys *k = load_ok(o[i]);
        char *t = sign(k, "root", 1, NOW);
        char *s = strrchr(t, '.') + 1;
        size_t sl = strlen(s);
        /* every character but the last (which may carry unused bits) */
        for (size_t j = 0; j + 1 < sl; j++) {
            char c = s[j];
            s[j] = c == 'A' ? 'B' : 'A';
            cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), -EINVAL, "%s at %zu", o[i], j);
            s[j] = c;
        }
        /* no / short / long signature */
        char *cut = strdup(t);
        cut[s - t] = '\0';
        cr_assert_eq(verify(k, cut, NOW, NULL, 0, NULL), -EINVAL);
        free(cut);
        char *longer = malloc(strlen(t) + 8);
        sprintf(longer, "%sAAAA", t);
        cr_assert_eq(verify(k, longer, NOW, NULL, 0, NULL), -EINVAL);
        free(longer);
        cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), 0);
        free(t);
        jwt_keys_free(k);
    }
}

Test(jwt, es_der_signature_rejected)
{
    /* a DER ECDSA signature (what OpenSSL gives) is not JWS */
    jwt_keys *k = load_ok("priv-key=%K/ec.pem,sign-method=ES256");
    char *t = sign(k, "root", 1, NOW);
    char *s = strrchr(t, '.') + 1;
    unsigned char raw[128], der[160];
    cr_assert_eq(b64url_dec(s, raw), 64);
    size_t dl = 0;
    der[dl++] = 0x30;
    der[dl++] = 0; /* fixed below */
    for (int h = 0; h < 2; h++) {
        const unsigned char *x = raw + 32 * h;
        int pad = x[0] & 0x80 ? 1 : 0;
        der[dl++] = 0x02;
        der[dl++] = (unsigned char)(32 + pad);
        if (pad)
            der[dl++] = 0;
        memcpy(der + dl, x, 32);
        dl += 32;
    }
    der[1] = (unsigned char)(dl - 2);
    char forged[1024];
    int n = (int)(s - t);
    memcpy(forged, t, (size_t)n);
    b64url(der, dl, forged + n);
    cr_assert_eq(verify(k, forged, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    jwt_keys_free(k);
}

Test(jwt, alg_none)
{
    jwt_keys *k = load_ok("priv-key=%K/rsa.pem,sign-method=RS256");
    char *t = sign(k, "root", 1, NOW);
    char *d1 = strchr(t, '.'), *d2 = strchr(d1 + 1, '.');
    const char *hdrs[] = {"{\"alg\":\"none\",\"typ\":\"JWT\"}", "{\"alg\":\"none\"}",
                          "{\"alg\":\"None\"}", "{\"alg\":\"\"}", "{\"typ\":\"JWT\"}"};
    for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++) {
        char h[128], tok[2048];
        b64url(hdrs[i], strlen(hdrs[i]), h);
        /* empty signature */
        snprintf(tok, sizeof(tok), "%s.%.*s.", h, (int)(d2 - d1 - 1), d1 + 1);
        cr_assert_eq(verify(k, tok, NOW, NULL, 0, NULL), -EINVAL, "%s", hdrs[i]);
        /* the original signature */
        snprintf(tok, sizeof(tok), "%s%s", h, d1);
        cr_assert_eq(verify(k, tok, NOW, NULL, 0, NULL), -EINVAL, "%s", hdrs[i]);
    }
    free(t);
    jwt_keys_free(k);
}

Test(jwt, alg_swapped)
{
    /* HS256 keyed with the RSA public key file must not pass RS256 keys */
    jwt_keys *k = load_ok("pub-key=%K/rsa.pub,sign-method=RS256");
    char *t = hs_token("rsa.pub", 256, HDR, "{\"exp\":1700000300,\"revision\":1,\"username\":\"root\"}");
    cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    /* even though it is a valid HS256 token for that secret */
    jwt_keys *hs = load_ok("priv-key=%K/rsa.pub,sign-method=HS256");
    t = hs_token("rsa.pub", 256, HDR, "{\"exp\":1700000300,\"revision\":1,\"username\":\"root\"}");
    cr_assert_eq(verify(hs, t, NOW, NULL, 0, NULL), 0);
    free(t);
    jwt_keys_free(hs);
    /* RS384 / PS256 with the same RSA key: right key, wrong alg */
    const char *others[] = {"priv-key=%K/rsa.pem,sign-method=RS384",
                            "priv-key=%K/rsa.pem,sign-method=PS256"};
    for (int i = 0; i < 2; i++) {
        jwt_keys *o = load_ok(others[i]);
        t = sign(o, "root", 1, NOW);
        cr_assert_eq(verify(k, t, NOW, NULL, 0, NULL), -EINVAL, "%s", others[i]);
        cr_assert_eq(verify(o, t, NOW, NULL, 0, NULL), 0);
        free(t);
        jwt_keys_free(o);
    }
    /* an RS256 token with its header relabelled PS256 */
    jwt_keys *ps = load_ok("pub-key=%K/rsa.pub,sign-method=PS256");
    jwt_keys *rs = load_ok("priv-key=%K/rsa.pem,sign-method=RS256");
    t = sign(rs, "root", 1, NOW);
    char h[128], tok[2048];
    b64url("{\"alg\":\"PS256\",\"typ\":\"JWT\"}", 27, h);
    snprintf(tok, sizeof(tok), "%s%s", h, strchr(t, '.'));
    cr_assert_eq(verify(ps, tok, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    /* ES256 keys and an HS256 token keyed with the EC public key */
    jwt_keys *es = load_ok("pub-key=%K/ec.pub,sign-method=ES256");
    t = hs_token("ec.pub", 256, HDR, "{\"exp\":1700000300,\"revision\":1,\"username\":\"root\"}");
    cr_assert_eq(verify(es, t, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    /* and an RS256 token */
    t = sign(rs, "root", 1, NOW);
    cr_assert_eq(verify(es, t, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    jwt_keys_free(es);
    jwt_keys_free(rs);
    jwt_keys_free(ps);
    jwt_keys_free(k);
}

/* ------------------------------------------------------------ malformed */

Test(jwt, truncated)
{
    const char *o[] = {"priv-key=%K/rsa.pem,sign-method=RS256",
                       "priv-key=%K/ec.pem,sign-method=ES256", HSOPTS};
    for (int i = 0; i < 3; i++) {
        jwt_keys *k = load_ok(o[i]);
        char *t = sign(k, "root", 1, NOW);
        size_t n = strlen(t);
        for (size_t l = 0; l < n; l++)
            cr_assert_eq(jwt_verify(k, t, l, NOW, NULL, 0, NULL), -EINVAL, "%s len %zu", o[i], l);
        /* and with the start cut off */
        for (size_t l = 1; l < n; l++)
            cr_assert_eq(jwt_verify(k, t + l, n - l, NOW, NULL, 0, NULL), -EINVAL);
        cr_assert_eq(jwt_verify(k, t, n, NOW, NULL, 0, NULL), 0);
        free(t);
        jwt_keys_free(k);
    }
}

Test(jwt, wrong_number_of_dots)
{
    jwt_keys *k = load_ok(HSOPTS);
    char *t = sign(k, "root", 1, NOW);
    char buf[1024];
    const char *bad[] = {"", ".", "..", "...", "....", "abc", "a.b", "a.b.c.d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(verify(k, bad[i], NOW, NULL, 0, NULL), -EINVAL, "%s", bad[i]);
    snprintf(buf, sizeof(buf), "%s.", t);
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    snprintf(buf, sizeof(buf), ".%s", t);
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    snprintf(buf, sizeof(buf), "%s.%s", t, t);
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    /* two dots removed -> one segment */
    char *c = strdup(t);
    char *d1 = strchr(c, '.');
    memmove(d1, d1 + 1, strlen(d1));
    cr_assert_eq(verify(k, c, NOW, NULL, 0, NULL), -EINVAL);
    free(c);
    cr_assert_eq(jwt_verify(k, NULL, 0, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    jwt_keys_free(k);
}

Test(jwt, bad_base64)
{
    jwt_keys *k = load_ok(HSOPTS);
    char *t = sign(k, "root", 1, NOW);
    size_t n = strlen(t);
    const char bad[] = {'+', '/', '=', ' ', '\n', '\0', '\x80', '\xff', '*', '"'};
    for (size_t pos = 0; pos < n; pos += 3) {
        if (t[pos] == '.')
            continue;
        for (size_t b = 0; b < sizeof(bad); b++) {
            char *c = malloc(n);
            memcpy(c, t, n);
            c[pos] = bad[b];
            int rc = jwt_verify(k, c, n, NOW, NULL, 0, NULL);
            cr_assert_eq(rc, -EINVAL, "pos %zu byte %02x", pos, (unsigned char)bad[b]);
            free(c);
        }
    }
    /* a segment of length 4k+1 can't be base64 */
    char buf[1024];
    char *d2 = strrchr(t, '.');
    snprintf(buf, sizeof(buf), "%.*sA%s", (int)(d2 - t), t, d2);
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    /* '=' anywhere */
    snprintf(buf, sizeof(buf), "%s", t);
    buf[2] = '=';
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    /* etcd 3.4.23 (golang-jwt v3.2, RawURLEncoding) refuses '=' padding,
     * even on the signature segment */
    size_t sl = strlen(d2 + 1);
    if (sl % 4) {
        snprintf(buf, sizeof(buf), "%s%.*s", t, (int)(4 - sl % 4), "===");
        cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    }
    /* but, like Go's non-strict decoder, not non-zero trailing bits: HS256
     * is 32 bytes = 43 chars, the last one carrying 2 unused bits */
    cr_assert_eq(sl, 43);
    snprintf(buf, sizeof(buf), "%s", t);
    char *last = buf + strlen(buf) - 1;
    static const char alpha[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int v = (int)(strchr(alpha, *last) - alpha);
    *last = alpha[v ^ 1];
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), 0);
    *last = alpha[v ^ 4];
    cr_assert_eq(verify(k, buf, NOW, NULL, 0, NULL), -EINVAL);
    free(t);
    jwt_keys_free(k);
}

Test(jwt, huge_tokens)
{
    jwt_keys *k = load_ok(HSOPTS);
    size_t n = 4u << 20;
    char *h = malloc(n + 1);
    memset(h, 'A', n);
    h[1000] = '.';
    h[n - 1000] = '.';
    h[n] = '\0';
    cr_assert_eq(jwt_verify(k, h, n, NOW, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(jwt_verify(k, h, JWT_MAX_TOKEN_LEN + 1, NOW, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(jwt_verify(k, h, (size_t)-1, NOW, NULL, 0, NULL), -EINVAL);
    /* a valid token just under the limit works, a bigger one is refused */
    char *user = malloc(60000);
    memset(user, 'u', 40000);
    user[40000] = '\0';
    char *t = sign(k, user, 1, NOW);
    cr_assert_lt(strlen(t), JWT_MAX_TOKEN_LEN);
    char *got = malloc(60000);
    cr_assert_eq(verify(k, t, NOW, got, 60000, NULL), 0);
    cr_assert_str_eq(got, user);
    free(t);
    memset(user, 'u', 50000);
    user[50000] = '\0';
    t = sign(k, user, 1, NOW);
    cr_assert_gt(strlen(t), JWT_MAX_TOKEN_LEN);
    cr_assert_eq(verify(k, t, NOW, got, 60000, NULL), -EINVAL);
    free(t);
    /* deeply nested claims JSON */
    size_t depth = 20000;
    char *deep = malloc(2 * depth + 64);
    size_t w = (size_t)sprintf(deep, "{\"username\":\"u\",\"revision\":1,\"x\":");
    for (size_t i = 0; i < depth; i++)
        deep[w++] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[w++] = ']';
    deep[w++] = '}';
    deep[w] = '\0';
    t = hs_token("hmac.key", 256, HDR, deep);
    int rc = verify(k, t, NOW, NULL, 0, NULL);
    cr_assert(rc == 0 || rc == -EINVAL);
    free(t);
    free(deep);
    free(got);
    free(user);
    free(h);
    jwt_keys_free(k);
}

/* ------------------------------------------------------------- threads */

struct thr {
    jwt_keys *k;
    int fails;
};

static void *thr_main(void *arg)
{
    struct thr *a = arg;
    for (int i = 0; i < 100; i++) {
        char *t = NULL;
        char user[32];
        char name[16];
        uint64_t rev = 0;
        snprintf(name, sizeof(name), "u%d", i);
        if (jwt_sign(a->k, name, (uint64_t)i + 1, NOW, &t) != 0 ||
            jwt_verify(a->k, t, strlen(t), NOW, user, sizeof(user), &rev) != 0 ||
            strcmp(user, name) != 0 || rev != (uint64_t)i + 1)
            a->fails++;
        free(t);
    }
    return NULL;
}

Test(jwt, concurrent_sign_verify, .timeout = 120)
{
    const char *o[] = {"priv-key=%K/ec.pem,sign-method=ES256",
                       "priv-key=%K/rsa.pem,sign-method=PS256", HSOPTS};
    for (int j = 0; j < 3; j++) {
        jwt_keys *k = load_ok(o[j]);
        pthread_t th[8];
        struct thr a[8];
        for (int i = 0; i < 8; i++) {
            a[i] = (struct thr){k, 0};
            cr_assert_eq(pthread_create(&th[i], NULL, thr_main, &a[i]), 0);
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(th[i], NULL);
            cr_assert_eq(a[i].fails, 0, "%s thread %d", o[j], i);
        }
        jwt_keys_free(k);
    }
}
