/* src/auth/jwt.c: etcd 3.4 compatible JWT auth tokens (see jwt.h).
 *
 * Reference behaviour: etcd 3.4 auth/jwt.go, auth/options.go, auth/store.go
 * (decomposeOpts) and the jwt-go v3.2 library it uses (parser.go,
 * map_claims.go, token.go, rsa_utils.go, ecdsa_utils.go, ecdsa.go,
 * rsa_pss.go, hmac.go; etcd 3.4.23 is built with github.com/golang-jwt/jwt
 * v3.2, whose error texts are the lowercase ones used here). Checked against the etcd 3.4.23 binary by
 * tests/auth/jwt_vs_etcd.py. */
#include "auth/jwt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/decoder.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

enum jwt_family { FAM_HS, FAM_RS, FAM_PS, FAM_ES, FAM_NONE };

struct jwt_alg {
    const char *name;
    enum jwt_family fam;
    int hash_bits;  /* 256/384/512 */
    int es_keysize; /* ES: bytes of R and of S in the signature */
    int es_curvebits;
};

/* jwt-go's registry (GetSigningMethod). "none" is registered there too,
 * but etcd's options.Key() refuses it. */
static const struct jwt_alg algs[] = {
    {"HS256", FAM_HS, 256, 0, 0},  {"HS384", FAM_HS, 384, 0, 0},  {"HS512", FAM_HS, 512, 0, 0},
    {"RS256", FAM_RS, 256, 0, 0},  {"RS384", FAM_RS, 384, 0, 0},  {"RS512", FAM_RS, 512, 0, 0},
    {"PS256", FAM_PS, 256, 0, 0},  {"PS384", FAM_PS, 384, 0, 0},  {"PS512", FAM_PS, 512, 0, 0},
    {"ES256", FAM_ES, 256, 32, 256}, {"ES384", FAM_ES, 384, 48, 384}, {"ES512", FAM_ES, 512, 66, 521},
    {"none", FAM_NONE, 0, 0, 0},
};

struct jwt_keys {
    const struct jwt_alg *alg;
    EVP_PKEY *pkey; /* RS/PS/ES: private key if given, else the public key */
    bool can_sign;
    unsigned char *secret; /* HS: contents of the priv-key file */
    size_t secret_len;
    int64_t ttl_ns;
};

static const EVP_MD *alg_md(const struct jwt_alg *a)
{
    switch (a->hash_bits) {
    case 256:
        return EVP_sha256();
    case 384:
        return EVP_sha384();
    default:
        return EVP_sha512();
    }
}

/* ---------------------------------------------------------------- utils */

static void setmsg(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void setmsg(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* read_file reads a whole file (Go's ioutil.ReadFile); 0 or -errno. */
static int read_file(const char *path, unsigned char **out, size_t *outlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t cap = 4096, len = 0;
    unsigned char *b = malloc(cap);
    if (b == NULL) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        if (len == cap) {
            if (cap > (64u << 20)) { /* no key file is that big */
                free(b);
                close(fd);
                return -EFBIG;
            }
            unsigned char *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                close(fd);
                return -ENOMEM;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, b + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            free(b);
            close(fd);
            return e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    *out = b;
    *outlen = len;
    return 0;
}

/* ------------------------------------------------------------- base64url */

static const char b64url_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* b64url_encode appends the unpadded base64url of |in| to |out| (which has
 * room for 4*ceil(n/3) bytes) and returns the number of bytes written. */
static size_t b64url_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64url_chars[v >> 18];
        out[o++] = b64url_chars[(v >> 12) & 63];
        out[o++] = b64url_chars[(v >> 6) & 63];
        out[o++] = b64url_chars[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = b64url_chars[v >> 18];
        out[o++] = b64url_chars[(v >> 12) & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = b64url_chars[v >> 18];
        out[o++] = b64url_chars[(v >> 12) & 63];
        out[o++] = b64url_chars[(v >> 6) & 63];
    }
    return o;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/* b64url_decode decodes a JWT segment as etcd 3.4.23's jwt-go
 * (golang-jwt v3.2) DecodeSegment does: base64.RawURLEncoding, i.e. no '='
 * padding at all (checked against etcd: a padded signature is refused),
 * non-zero trailing bits accepted (Go's non-strict decoding). |out| needs
 * room for 3*ceil(n/4) bytes. -1 if malformed. */
static long b64url_decode(const char *in, size_t n, unsigned char *out)
{
    if (n % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)o;
}

/* ---------------------------------------------------- Go time.Duration */

static const struct {
    const char *name;
    uint64_t ns;
} go_units[] = {
    {"ns", 1ull},
    {"us", 1000ull},
    {"\xc2\xb5s", 1000ull}, /* U+00B5 micro sign */
    {"\xce\xbcs", 1000ull}, /* U+03BC Greek mu */
    {"ms", 1000000ull},
    {"s", 1000000000ull},
    {"m", 60ull * 1000000000ull},
    {"h", 3600ull * 1000000000ull},
};

/* a port of Go 1.19's time.ParseDuration */
int jwt_parse_duration(const char *s, int64_t *ns)
{
    const uint64_t lim = 1ull << 63;
    uint64_t d = 0;
    bool neg = false;
    if (s == NULL)
        return -EINVAL;
    if (*s == '-' || *s == '+') {
        neg = *s == '-';
        s++;
    }
    if (strcmp(s, "0") == 0) {
        *ns = 0;
        return 0;
    }
    if (*s == '\0')
        return -EINVAL;
    while (*s != '\0') {
        uint64_t v = 0, f = 0;
        double scale = 1;
        if (!(*s == '.' || (*s >= '0' && *s <= '9')))
            return -EINVAL;
        const char *p0 = s;
        while (*s >= '0' && *s <= '9') {
            if (v > lim / 10)
                return -EINVAL;
            v = v * 10 + (uint64_t)(*s - '0');
            if (v > lim)
                return -EINVAL;
            s++;
        }
        bool pre = s != p0, post = false;
        if (*s == '.') {
            s++;
            const char *f0 = s;
            bool overflow = false;
            while (*s >= '0' && *s <= '9') {
                if (!overflow) {
                    if (f > (lim - 1) / 10) {
                        overflow = true;
                    } else {
                        uint64_t y = f * 10 + (uint64_t)(*s - '0');
                        if (y > lim)
                            overflow = true;
                        else {
                            f = y;
                            scale *= 10;
                        }
                    }
                }
                s++;
            }
            post = s != f0;
        }
        if (!pre && !post)
            return -EINVAL;
        size_t ul = 0;
        while (s[ul] != '\0' && s[ul] != '.' && !(s[ul] >= '0' && s[ul] <= '9'))
            ul++;
        if (ul == 0)
            return -EINVAL; /* missing unit */
        uint64_t unit = 0;
        for (size_t i = 0; i < sizeof(go_units) / sizeof(go_units[0]); i++)
            if (strlen(go_units[i].name) == ul && memcmp(go_units[i].name, s, ul) == 0)
                unit = go_units[i].ns;
        if (unit == 0)
            return -EINVAL; /* unknown unit */
        s += ul;
        if (v > lim / unit)
            return -EINVAL;
        v *= unit;
        if (f > 0) {
            v += (uint64_t)((double)f * ((double)unit / scale));
            if (v > lim)
                return -EINVAL;
        }
        d += v;
        if (d > lim)
            return -EINVAL;
    }
    if (neg) {
        *ns = d == lim ? INT64_MIN : -(int64_t)d;
        return 0;
    }
    if (d > lim - 1)
        return -EINVAL;
    *ns = (int64_t)d;
    return 0;
}

/* --------------------------------------------------------- key loading */

/* pem_first_block returns the DER bytes of the first PEM block in |buf|
 * whatever its type (Go's pem.Decode; jwt-go ignores the type). */
static int pem_first_block(const unsigned char *buf, size_t len, unsigned char **der,
                           long *derlen)
{
    if (len > INT_MAX)
        return -1;
    BIO *bio = BIO_new_mem_buf(buf, (int)len);
    if (bio == NULL)
        return -1;
    char *name = NULL, *header = NULL;
    int ok = PEM_read_bio(bio, &name, &header, der, derlen);
    BIO_free(bio);
    OPENSSL_free(name);
    OPENSSL_free(header);
    return ok == 1 ? 0 : -1;
}

/* decode_der decodes one DER structure of |structure| ("type-specific",
 * "PrivateKeyInfo", "SubjectPublicKeyInfo") and key type |keytype| (NULL:
 * any); NULL unless the whole input was consumed. */
static EVP_PKEY *decode_der(const unsigned char *der, long derlen, const char *structure,
                            const char *keytype, int selection)
{
    EVP_PKEY *pkey = NULL;
    OSSL_DECODER_CTX *dctx = OSSL_DECODER_CTX_new_for_pkey(&pkey, "DER", structure, keytype,
                                                           selection, NULL, NULL);
    if (dctx == NULL)
        return NULL;
    const unsigned char *p = der;
    size_t left = (size_t)derlen;
    if (OSSL_DECODER_from_data(dctx, &p, &left) != 1 || left != 0) {
        EVP_PKEY_free(pkey);
        pkey = NULL;
    }
    OSSL_DECODER_CTX_free(dctx);
    return pkey;
}

/* Go's crypto/x509 knows only these named curves */
static bool ec_curve_ok(const EVP_PKEY *pkey)
{
    char name[64];
    size_t nl = 0;
    if (EVP_PKEY_get_group_name(pkey, name, sizeof(name), &nl) != 1)
        return false;
    static const char *const ok[] = {"secp224r1", "P-224", "prime256v1", "P-256",
                                     "secp384r1", "P-384", "secp521r1",  "P-521"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (strcmp(name, ok[i]) == 0)
            return true;
    return false;
}

static int ec_curve_bits(const EVP_PKEY *pkey)
{
    return EVP_PKEY_get_bits(pkey);
}

/* load_private mirrors jwt.ParseRSAPrivateKeyFromPEM (PKCS#1, else PKCS#8)
 * and jwt.ParseECPrivateKeyFromPEM (SEC1, else PKCS#8). */
static EVP_PKEY *load_private(const unsigned char *buf, size_t len, bool rsa, char *err,
                              size_t errlen)
{
    unsigned char *der = NULL;
    long derlen = 0;
    if (pem_first_block(buf, len, &der, &derlen) != 0) {
        setmsg(err, errlen, "invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key");
        return NULL;
    }
    EVP_PKEY *pkey = decode_der(der, derlen, "type-specific", rsa ? "RSA" : "EC",
                                EVP_PKEY_KEYPAIR);
    if (pkey == NULL)
        pkey = decode_der(der, derlen, "PrivateKeyInfo", NULL, EVP_PKEY_KEYPAIR);
    OPENSSL_free(der);
    if (pkey == NULL) {
        setmsg(err, errlen, "x509: failed to parse private key");
        return NULL;
    }
    if (rsa ? EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA
            : (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_EC || !ec_curve_ok(pkey))) {
        setmsg(err, errlen, rsa ? "key is not a valid RSA private key"
                                : "key is not a valid ECDSA private key");
        EVP_PKEY_free(pkey);
        return NULL;
    }
    return pkey;
}

/* load_public mirrors jwt.ParseRSAPublicKeyFromPEM / ParseECPublicKeyFromPEM:
 * a PKIX SubjectPublicKeyInfo, else the key of an X.509 certificate. */
static EVP_PKEY *load_public(const unsigned char *buf, size_t len, bool rsa, char *err,
                             size_t errlen)
{
    unsigned char *der = NULL;
    long derlen = 0;
    if (pem_first_block(buf, len, &der, &derlen) != 0) {
        setmsg(err, errlen, "invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key");
        return NULL;
    }
    const unsigned char *p = der;
    EVP_PKEY *pkey = d2i_PUBKEY(NULL, &p, derlen);
    if (pkey != NULL && p != der + derlen) {
        EVP_PKEY_free(pkey);
        pkey = NULL;
    }
    if (pkey == NULL) {
        p = der;
        X509 *cert = d2i_X509(NULL, &p, derlen);
        if (cert != NULL && p == der + derlen)
            pkey = X509_get_pubkey(cert);
        else if (cert == NULL) {
            setmsg(err, errlen, "x509: malformed public key or certificate");
            OPENSSL_free(der);
            return NULL;
        }
        X509_free(cert);
    }
    OPENSSL_free(der);
    if (pkey == NULL || (rsa ? EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA
                             : (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_EC || !ec_curve_ok(pkey)))) {
        setmsg(err, errlen, rsa ? "key is not a valid RSA public key"
                                : "key is not a valid ECDSA public key");
        EVP_PKEY_free(pkey);
        return NULL;
    }
    return pkey;
}

/* bn_param_cmp: 0 when both keys have the same big-number param */
static int bn_param_cmp(const EVP_PKEY *a, const EVP_PKEY *b, const char *param)
{
    BIGNUM *x = NULL, *y = NULL;
    int r = 1;
    if (EVP_PKEY_get_bn_param(a, param, &x) == 1 && EVP_PKEY_get_bn_param(b, param, &y) == 1)
        r = BN_cmp(x, y) != 0;
    BN_free(x);
    BN_free(y);
    return r;
}

/* keys_mismatch reproduces etcd 3.4's check literally: RSA "pub.E != priv.E
 * && pub.N != priv.N", ECDSA "curve differs && X differs && Y differs" (so
 * a pair differing in only some of those passes, as in etcd; the private
 * key is then used for verifying too). */
static bool keys_mismatch(const EVP_PKEY *pub, const EVP_PKEY *priv, bool rsa)
{
    if (rsa)
        return bn_param_cmp(pub, priv, OSSL_PKEY_PARAM_RSA_E) != 0 &&
               bn_param_cmp(pub, priv, OSSL_PKEY_PARAM_RSA_N) != 0;
    char g1[64] = "", g2[64] = "";
    size_t l = 0;
    EVP_PKEY_get_group_name(pub, g1, sizeof(g1), &l);
    EVP_PKEY_get_group_name(priv, g2, sizeof(g2), &l);
    return strcmp(g1, g2) != 0 && bn_param_cmp(pub, priv, OSSL_PKEY_PARAM_EC_PUB_X) != 0 &&
           bn_param_cmp(pub, priv, OSSL_PKEY_PARAM_EC_PUB_Y) != 0;
}

/* pairs of --auth-token options (etcd's decomposeOpts) */
struct opt {
    char *key, *val;
};

int jwt_keys_load(const char *opts, jwt_keys **out, char *err, size_t errlen)
{
    return jwt_keys_load_ex(opts, out, err, errlen, NULL, 0);
}

int jwt_keys_load_ex(const char *opts, jwt_keys **out, char *err, size_t errlen, char *detail,
                     size_t detaillen)
{
    *out = NULL;
    setmsg(err, errlen, "%s", "");
    setmsg(detail, detaillen, "%s", "");
    if (opts == NULL)
        opts = "";
    char *copy = strdup(opts);
    if (copy == NULL)
        return -ENOMEM;
    size_t n = 0, nmax = 1;
    for (const char *p = copy; *p; p++)
        nmax += *p == ',';
    struct opt *o = calloc(nmax, sizeof(*o));
    if (o == NULL) {
        free(copy);
        return -ENOMEM;
    }
    int rc = -EINVAL;
    unsigned char *pubbuf = NULL, *privbuf = NULL;
    size_t publen = 0, privlen = 0;
    EVP_PKEY *pub = NULL, *priv = NULL;
    jwt_keys *k = NULL;

    /* decomposeOpts: "k=v" items separated by ','; exactly one '=' each,
     * no duplicate keys */
    if (*copy != '\0') {
        char *item = copy;
        for (;;) {
            char *comma = strchr(item, ',');
            if (comma != NULL)
                *comma = '\0';
            char *eq = strchr(item, '=');
            if (eq == NULL || strchr(eq + 1, '=') != NULL) {
                setmsg(detail, detaillen, "invalid token specific option: jwt,%s", opts);
                setmsg(err, errlen, JWT_ERR_INVALID_AUTH_OPTS);
                goto out;
            }
            *eq = '\0';
            for (size_t i = 0; i < n; i++) {
                if (strcmp(o[i].key, item) == 0) {
                    setmsg(detail, detaillen,
                           "invalid token specific option, duplicated parameters (%s): jwt,%s",
                           item, opts);
                    setmsg(err, errlen, JWT_ERR_INVALID_AUTH_OPTS);
                    goto out;
                }
            }
            o[n].key = item;
            o[n].val = eq + 1;
            n++;
            if (comma == NULL)
                break;
            item = comma + 1;
        }
    }
    const char *method = "", *pubpath = "", *privpath = "", *ttl = "";
    char unknown[256] = "";
    size_t ulen = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(o[i].key, "sign-method") == 0)
            method = o[i].val;
        else if (strcmp(o[i].key, "pub-key") == 0)
            pubpath = o[i].val;
        else if (strcmp(o[i].key, "priv-key") == 0)
            privpath = o[i].val;
        else if (strcmp(o[i].key, "ttl") == 0)
            ttl = o[i].val;
        else if (ulen < sizeof(unknown))
            ulen += (size_t)snprintf(unknown + ulen, sizeof(unknown) - ulen, "%s%s",
                                     ulen ? " " : "", o[i].key);
    }

    /* jwtOptions.ParseWithDefaults: ttl, pub-key, priv-key, sign-method;
     * any error there is ErrInvalidAuthOpts */
    int64_t ttl_ns = 5 * 60 * 1000000000ll;
    if (*ttl != '\0' && jwt_parse_duration(ttl, &ttl_ns) != 0) {
        setmsg(detail, detaillen, "problem loading JWT options: time: invalid duration \"%s\"",
               ttl);
        setmsg(err, errlen, JWT_ERR_INVALID_AUTH_OPTS);
        goto out;
    }
    if (*pubpath != '\0' && (rc = read_file(pubpath, &pubbuf, &publen)) != 0) {
        setmsg(detail, detaillen, "problem loading JWT options: open %s: %s", pubpath,
               strerror(-rc));
        setmsg(err, errlen, JWT_ERR_INVALID_AUTH_OPTS);
        goto out;
    }
    if (*privpath != '\0' && (rc = read_file(privpath, &privbuf, &privlen)) != 0) {
        setmsg(detail, detaillen, "problem loading JWT options: open %s: %s", privpath,
               strerror(-rc));
        setmsg(err, errlen, JWT_ERR_INVALID_AUTH_OPTS);
        goto out;
    }
    rc = -EINVAL;
    const struct jwt_alg *alg = NULL;
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++)
        if (strcmp(algs[i].name, method) == 0)
            alg = &algs[i];
    if (alg == NULL) {
        setmsg(detail, detaillen,
               "problem loading JWT options: auth: invalid auth signature method");
        setmsg(err, errlen, JWT_ERR_INVALID_AUTH_OPTS);
        goto out;
    }

    /* jwtOptions.Key(): these errors are returned as they are */
    k = calloc(1, sizeof(*k));
    if (k == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    k->alg = alg;
    k->ttl_ns = ttl_ns;
    switch (alg->fam) {
    case FAM_NONE:
        setmsg(err, errlen, "unsupported signing method: *jwt.signingMethodNone");
        goto out;
    case FAM_HS:
        if (privlen == 0) {
            setmsg(err, errlen, JWT_ERR_MISSING_KEY);
            goto out;
        }
        k->secret = privbuf;
        k->secret_len = privlen;
        privbuf = NULL;
        k->can_sign = true;
        break;
    case FAM_RS:
    case FAM_PS:
    case FAM_ES: {
        bool rsa = alg->fam != FAM_ES;
        if (privlen > 0 && (priv = load_private(privbuf, privlen, rsa, err, errlen)) == NULL)
            goto out;
        if (publen > 0 && (pub = load_public(pubbuf, publen, rsa, err, errlen)) == NULL)
            goto out;
        if (priv == NULL && pub == NULL) {
            setmsg(err, errlen, JWT_ERR_MISSING_KEY);
            goto out;
        }
        if (priv != NULL && pub != NULL) {
            if (keys_mismatch(pub, priv, rsa)) {
                setmsg(err, errlen, JWT_ERR_KEY_MISMATCH);
                goto out;
            }
            if (EVP_PKEY_eq(pub, priv) != 1)
                setmsg(detail, detaillen,
                       "pub-key %s does not match priv-key %s: the private key's public "
                       "part is used for verifying (as etcd 3.4 does)",
                       pubpath, privpath);
        }
        if (priv != NULL) {
            k->pkey = priv;
            priv = NULL;
            k->can_sign = true;
        } else {
            k->pkey = pub;
            pub = NULL;
        }
        break;
    }
    }
    if (ulen > 0 && (detail == NULL || *detail == '\0'))
        setmsg(detail, detaillen, "unknown JWT options: [%s]", unknown);
    *out = k;
    k = NULL;
    rc = 0;
out:
    jwt_keys_free(k);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(priv);
    if (pubbuf != NULL)
        OPENSSL_cleanse(pubbuf, publen);
    if (privbuf != NULL)
        OPENSSL_cleanse(privbuf, privlen);
    free(pubbuf);
    free(privbuf);
    free(o);
    free(copy);
    return rc;
}

void jwt_keys_free(jwt_keys *k)
{
    if (k == NULL)
        return;
    EVP_PKEY_free(k->pkey);
    if (k->secret != NULL)
        OPENSSL_cleanse(k->secret, k->secret_len);
    free(k->secret);
    free(k);
}

uint64_t jwt_keys_ttl_ms(const jwt_keys *k)
{
    return k->ttl_ns <= 0 ? 0 : (uint64_t)k->ttl_ns / 1000000u;
}

int64_t jwt_keys_ttl_ns(const jwt_keys *k)
{
    return k->ttl_ns;
}

bool jwt_keys_can_sign(const jwt_keys *k)
{
    return k->can_sign;
}

const char *jwt_keys_alg(const jwt_keys *k)
{
    return k->alg->name;
}

/* ------------------------------------------------------- sign / verify */

/* raw_sign computes the JWS signature of |in| into a malloc'd buffer */
static int raw_sign(const jwt_keys *k, const char *in, size_t n, unsigned char **sig,
                    size_t *siglen)
{
    const EVP_MD *md = alg_md(k->alg);
    if (k->alg->fam == FAM_HS) {
        unsigned char *mac = malloc(EVP_MAX_MD_SIZE);
        unsigned int maclen = 0;
        if (mac == NULL)
            return -ENOMEM;
        if (HMAC(md, k->secret, (int)k->secret_len, (const unsigned char *)in, n, mac, &maclen) ==
            NULL) {
            free(mac);
            return -EINVAL;
        }
        *sig = mac;
        *siglen = maclen;
        return 0;
    }
    if (k->alg->fam == FAM_ES && ec_curve_bits(k->pkey) != k->alg->es_curvebits)
        return -EINVAL; /* jwt-go: ErrInvalidKey */
    int rc = -EINVAL;
    EVP_MD_CTX *mctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    unsigned char *der = NULL;
    ECDSA_SIG *es = NULL;
    size_t derlen = 0;
    if (mctx == NULL)
        return -ENOMEM;
    if (EVP_DigestSignInit(mctx, &pctx, md, NULL, k->pkey) != 1)
        goto out;
    if (k->alg->fam == FAM_PS &&
        (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1 ||
         EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md) != 1))
        goto out;
    if (EVP_DigestSign(mctx, NULL, &derlen, (const unsigned char *)in, n) != 1)
        goto out;
    der = malloc(derlen);
    if (der == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (EVP_DigestSign(mctx, der, &derlen, (const unsigned char *)in, n) != 1)
        goto out;
    if (k->alg->fam != FAM_ES) {
        *sig = der;
        *siglen = derlen;
        der = NULL;
        rc = 0;
        goto out;
    }
    /* ECDSA: DER SEQUENCE{r,s} -> JWS R||S, each left-padded to keysize */
    const unsigned char *p = der;
    es = d2i_ECDSA_SIG(NULL, &p, (long)derlen);
    if (es == NULL)
        goto out;
    size_t ks = (size_t)k->alg->es_keysize;
    unsigned char *raw = malloc(2 * ks);
    if (raw == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, (int)ks) < 0 ||
        BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + ks, (int)ks) < 0) {
        free(raw);
        goto out;
    }
    *sig = raw;
    *siglen = 2 * ks;
    rc = 0;
out:
    ECDSA_SIG_free(es);
    free(der);
    EVP_MD_CTX_free(mctx);
    return rc;
}

/* raw_verify: 0 when |sig| is a valid signature of |in|, else -EINVAL */
static int raw_verify(const jwt_keys *k, const char *in, size_t n, const unsigned char *sig,
                      size_t siglen)
{
    const EVP_MD *md = alg_md(k->alg);
    if (k->alg->fam == FAM_HS) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int maclen = 0;
        if (HMAC(md, k->secret, (int)k->secret_len, (const unsigned char *)in, n, mac, &maclen) ==
            NULL)
            return -EINVAL;
        if (siglen != maclen || CRYPTO_memcmp(mac, sig, maclen) != 0)
            return -EINVAL;
        return 0;
    }
    int rc = -EINVAL;
    unsigned char *der = NULL;
    int derlen = 0;
    ECDSA_SIG *es = NULL;
    BIGNUM *r = NULL, *s = NULL;
    if (k->alg->fam == FAM_ES) {
        size_t ks = (size_t)k->alg->es_keysize;
        if (siglen != 2 * ks)
            return -EINVAL;
        es = ECDSA_SIG_new();
        r = BN_bin2bn(sig, (int)ks, NULL);
        s = BN_bin2bn(sig + ks, (int)ks, NULL);
        if (es == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(es, r, s) != 1) {
            BN_free(r);
            BN_free(s);
            ECDSA_SIG_free(es);
            return -ENOMEM;
        }
        derlen = i2d_ECDSA_SIG(es, &der);
        ECDSA_SIG_free(es);
        if (derlen <= 0)
            return -ENOMEM;
        sig = der;
        siglen = (size_t)derlen;
    }
    EVP_MD_CTX *mctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    if (mctx == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (EVP_DigestVerifyInit(mctx, &pctx, md, NULL, k->pkey) != 1)
        goto out;
    if (k->alg->fam == FAM_PS &&
        (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_AUTO) != 1 ||
         EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, md) != 1))
        goto out;
    if (EVP_DigestVerify(mctx, sig, siglen, (const unsigned char *)in, n) == 1)
        rc = 0;
out:
    EVP_MD_CTX_free(mctx);
    OPENSSL_free(der);
    return rc;
}

/* go_json_fixup rewrites jansson's compact output into what Go's
 * encoding/json writes for the same value: '<' '>' '&' U+2028 U+2029 as
 * \u escapes, control characters as \u00xx (lowercase hex; Go 1.19 has no
 * \b \f). The input comes from json_dumps, so it is valid JSON. */
static char *go_json_fixup(const char *j)
{
    size_t n = strlen(j);
    char *o = malloc(n * 6 + 1);
    if (o == NULL)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)j[i];
        if (c == '\\') {
            char e = j[i + 1];
            if (e == 'b' || e == 'f') {
                w += (size_t)sprintf(o + w, "\\u00%s", e == 'b' ? "08" : "0c");
                i++;
            } else if (e == 'u') {
                o[w++] = '\\';
                o[w++] = 'u';
                for (int d = 0; d < 4; d++) {
                    char h = j[i + 2 + (size_t)d];
                    o[w++] = (h >= 'A' && h <= 'F') ? (char)(h - 'A' + 'a') : h;
                }
                i += 5;
            } else {
                o[w++] = '\\';
                o[w++] = e;
                i++;
            }
        } else if (c == '<' || c == '>' || c == '&') {
            w += (size_t)sprintf(o + w, "\\u00%02x", c);
        } else if (c == 0xe2 && (unsigned char)j[i + 1] == 0x80 &&
                   ((unsigned char)j[i + 2] == 0xa8 || (unsigned char)j[i + 2] == 0xa9)) {
            w += (size_t)sprintf(o + w, "\\u202%c", (unsigned char)j[i + 2] == 0xa8 ? '8' : '9');
            i += 2;
        } else {
            o[w++] = (char)c;
        }
    }
    o[w] = '\0';
    return o;
}

int jwt_sign(const jwt_keys *k, const char *user, uint64_t revision, int64_t now_s, char **out)
{
    /* time.Now().Add(ttl).Unix() with a whole-second now: floor division */
    int64_t q = k->ttl_ns / 1000000000ll;
    if (k->ttl_ns % 1000000000ll < 0)
        q--;
    int64_t exp;
    if (__builtin_add_overflow(now_s, q, &exp))
        return -ERANGE;
    return jwt_sign_exp(k, user, revision, exp, out);
}

int jwt_sign_exp(const jwt_keys *k, const char *user, uint64_t revision, int64_t exp_s,
                 char **out)
{
    *out = NULL;
    if (!k->can_sign)
        return -EPERM;
    if (user == NULL)
        return -EINVAL;
    if (revision > (uint64_t)INT64_MAX)
        return -ERANGE; /* jansson integers are signed 64-bit */
    static const char hdr_fmt[] = "{\"alg\":\"%s\",\"typ\":\"JWT\"}";
    char hdr[64];
    int hl = snprintf(hdr, sizeof(hdr), hdr_fmt, k->alg->name);

    json_t *user_j = json_string(user); /* NULL if not UTF-8 */
    if (user_j == NULL)
        return -EINVAL;
    json_t *claims = json_object();
    if (claims == NULL) {
        json_decref(user_j);
        return -ENOMEM;
    }
    /* set_new takes the value even when it fails; keys are sorted on dump */
    if (json_object_set_new(claims, "username", user_j) != 0 ||
        json_object_set_new(claims, "exp", json_integer(exp_s)) != 0 ||
        json_object_set_new(claims, "revision", json_integer((json_int_t)revision)) != 0) {
        json_decref(claims);
        return -ENOMEM;
    }
    char *cj = json_dumps(claims, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(claims);
    if (cj == NULL)
        return -ENOMEM;
    char *gj = go_json_fixup(cj);
    free(cj);
    if (gj == NULL)
        return -ENOMEM;
    size_t cl = strlen(gj);

    /* header.claims.signature; signature <= 1024 bytes for 8192-bit RSA */
    size_t cap = 4 * ((size_t)hl + 2) / 3 + 4 * (cl + 2) / 3 + 4 * (1024 + 2) / 3 + 8;
    char *tok = malloc(cap);
    if (tok == NULL) {
        free(gj);
        return -ENOMEM;
    }
    size_t w = b64url_encode((const unsigned char *)hdr, (size_t)hl, tok);
    tok[w++] = '.';
    w += b64url_encode((const unsigned char *)gj, cl, tok + w);
    free(gj);
    unsigned char *sig = NULL;
    size_t siglen = 0;
    int rc = raw_sign(k, tok, w, &sig, &siglen);
    if (rc != 0) {
        free(tok);
        return rc;
    }
    if (4 * (siglen + 2) / 3 + w + 2 > cap) {
        char *nt = realloc(tok, 4 * (siglen + 2) / 3 + w + 2);
        if (nt == NULL) {
            free(sig);
            free(tok);
            return -ENOMEM;
        }
        tok = nt;
    }
    tok[w++] = '.';
    w += b64url_encode(sig, siglen, tok + w);
    tok[w] = '\0';
    free(sig);
    *out = tok;
    return 0;
}

/* Go's int64(float64) on amd64 (CVTTSD2SQ): out of range or NaN gives
 * INT64_MIN */
static int64_t go_f64_to_i64(double d)
{
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return INT64_MIN;
    return (int64_t)d;
}

/* claim_time gives jwt-go's (golang-jwt v3.2.2) view of a time claim:
 * missing -> 0 ("not set"), a number -> int64(float64), anything else
 * (string, null, ...) -> -1: the claim fails validation. */
static int claim_time(json_t *claims, const char *name, int64_t *t)
{
    json_t *v = json_object_get(claims, name);
    *t = 0;
    if (v == NULL)
        return 0;
    if (!json_is_number(v))
        return -1;
    *t = go_f64_to_i64(json_number_value(v));
    return 0;
}

/* decode_json decodes a base64url segment and parses it as JSON */
static json_t *decode_json(const char *seg, size_t n, size_t flags)
{
    unsigned char *buf = malloc((n + 3) / 4 * 3 + 1);
    if (buf == NULL)
        return NULL;
    long dl = b64url_decode(seg, n, buf);
    json_t *j = NULL;
    if (dl >= 0) {
        json_error_t jerr;
        j = json_loadb((const char *)buf, (size_t)dl, flags, &jerr);
    }
    free(buf);
    if (j != NULL && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

int jwt_verify(const jwt_keys *k, const char *token, size_t len, int64_t now_s, char *user,
               size_t usercap, uint64_t *revision)
{
    if (k == NULL || token == NULL || len == 0 || len > JWT_MAX_TOKEN_LEN)
        return -EINVAL;
    /* exactly three segments */
    const char *d1 = memchr(token, '.', len);
    if (d1 == NULL)
        return -EINVAL;
    const char *d2 = memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - token));
    if (d2 == NULL || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - token)) != NULL)
        return -EINVAL;
    size_t hl = (size_t)(d1 - token), cl = (size_t)(d2 - d1 - 1);
    size_t sl = len - (size_t)(d2 + 1 - token);

    int rc = -EINVAL;
    json_t *hdr = NULL, *claims = NULL;
    unsigned char *sig = NULL;

    /* header: json.Unmarshal (strict: nothing after the object) */
    hdr = decode_json(token, hl, 0);
    if (hdr == NULL)
        goto out;
    /* claims: json.Decoder.Decode (reads the first value only); numbers
     * become float64 as with jwt-go's MapClaims */
    claims = decode_json(d1 + 1, cl, JSON_DISABLE_EOF_CHECK | JSON_DECODE_INT_AS_REAL);
    if (claims == NULL)
        goto out;
    /* alg: must be a string naming exactly the configured method (this
     * rejects "none" and any other algorithm, e.g. HS256 keyed with the
     * RSA public key) */
    json_t *alg = json_object_get(hdr, "alg");
    if (!json_is_string(alg) || json_string_length(alg) != strlen(k->alg->name) ||
        memcmp(json_string_value(alg), k->alg->name, json_string_length(alg)) != 0)
        goto out;
    sig = malloc((sl + 3) / 4 * 3 + 1);
    if (sig == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    long sigl = b64url_decode(d2 + 1, sl, sig);
    if (sigl < 0)
        goto out;
    rc = raw_verify(k, token, (size_t)(d2 - token), sig, (size_t)sigl);
    if (rc != 0)
        goto out;
    rc = -EINVAL;
    /* MapClaims.Valid: exp, iat, nbf (missing or 0: unset; present but
     * not a number: invalid) */
    int64_t exp, iat, nbf;
    if (claim_time(claims, "exp", &exp) != 0 || claim_time(claims, "iat", &iat) != 0 ||
        claim_time(claims, "nbf", &nbf) != 0)
        goto out;
    if (exp != 0 && now_s > exp) {
        rc = -ETIMEDOUT;
        goto out;
    }
    if ((iat != 0 && now_s < iat) || (nbf != 0 && now_s < nbf))
        goto out;
    /* etcd: claims["username"].(string), uint64(claims["revision"].(float64)) */
    json_t *u = json_object_get(claims, "username");
    json_t *r = json_object_get(claims, "revision");
    if (!json_is_string(u) || !json_is_number(r))
        goto out;
    double rv = json_number_value(r);
    if (!(rv >= 0 && rv < 18446744073709551616.0))
        goto out; /* Go's conversion is undefined there */
    size_t ul = json_string_length(u);
    if (user != NULL) {
        if (ul >= usercap) {
            rc = -ERANGE;
            goto out;
        }
        memcpy(user, json_string_value(u), ul);
        user[ul] = '\0';
    }
    if (revision != NULL)
        *revision = (uint64_t)rv;
    rc = 0;
out:
    free(sig);
    json_decref(hdr);
    json_decref(claims);
    return rc;
}
