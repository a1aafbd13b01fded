/* tests/fuzz/fuzz_jwt.c: libFuzzer target for src/auth/jwt.c (etcd 3.4
 * compatible JWT tokens). Byte 0 picks the mode, the rest is the input:
 *   0-3  the input is a token for jwt_verify with RS256 / ES256 / HS256 /
 *        PS256 (verify-only) keys; an accepted token must have given a
 *        NUL-terminated username that fits
 *   4    "HEADER\nCLAIMS": raw JSON texts made into an HS256 token with a
 *        correct signature, so the header and claims checks past the
 *        signature get fuzzed; the verdict must not depend on usercap
 *        except for -ERANGE
 *   5    the input is a username: jwt_sign then jwt_verify must give it
 *        back unchanged (Go-style JSON escaping round trip), HS256 and
 *        ES256
 *   6    the input is a Go duration for jwt_parse_duration
 *   7    byte 1 picks a sign-method and whether the rest is the priv-key
 *        or the pub-key file: jwt_keys_load must fail cleanly or give keys
 *        that sign (when they can) and verify their own tokens
 * The keys are fixed test keys, written to a temp dir on the first call
 * (removed at exit). Nothing here is secret. */
#include <errno.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/jwt.h"

#define NOW 1700000000LL

/* throwaway test keys (RSA 1024 for speed; Go and etcd accept it) */
static const char key_rsa_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIICeAIBADANBgkqhkiG9w0BAQEFAASCAmIwggJeAgEAAoGBAMONx8ltNu0VglWs\n"
    "fJFpQ4vvbUUQ5F/ocdx2qTm1Elu4mbUDOLbCO5oI1GweDcShuWLVxG4iiv6Z0B4n\n"
    "QV30yUhpxR5zbssEjiUR1lJJTa5zqdR1wXbubCQ4IUv8Uy7p3uSN0pR0SCryNI/w\n"
    "/z/817tngV+t/IMeP18+Z57Ec7s5AgMBAAECgYEAsNL3II/85oxYehep2+KPDW3G\n"
    "JHmNx5truaoigufUXdOiSSdMlRU0x6fMTKcwU+jYtSIOqHfbrzRuF5XvaYH6rkTW\n"
    "XLScfbR/EVhgt4jdEEnP4MY6/HwEHGnPnWDU7GfgiyJaFKQuegIz3RFvprU51ANp\n"
    "PuAY54df529Ur7xEOjECQQD5QnH2xw9Vztw1m0m9pdfD8a/yq9jk9CXxVwvDvXNw\n"
    "3xVkQ0a5IiOq1I4j/ZfWM96UJ3a4HRYhCE8X0z8U238PAkEAyNeLoA5quPk3PL8e\n"
    "1GI2oO1V/gOMWMfFrUspW6K4q3yXP+6N3SRGEhN6X59RJLg/VRCrHDwdub1vkq5v\n"
    "i22hNwJAQf3kfEhxd+9ff9XQLSSmPltTkPUMZHl7Pi0kkTssQBrf5/6jz8oJFWZX\n"
    "B5JRS8XJzQGxvcb9n9s6TX2BOv1t4wJBAL9oxXYOJ2IQibdIQl6RF5U5fBnxUcGO\n"
    "6vNkTY86vpsYy6Evfl6C4pD5pUgasx+2xQ0SLLFlDcNmKj52JnKQUfMCQQCQFaQP\n"
    "7g1+bueSCHUjB8qbCjPrGOqx17uCxnKXa+37WWUt7EhXdsBTphxfvXCp8l5ZSZoU\n"
    "SMl+6G/HdKFSkuC4\n"
    "-----END PRIVATE KEY-----\n";
static const char key_ec_pem[] =
    "-----BEGIN EC PRIVATE KEY-----\n"
    "MHcCAQEEIMN9rKn14geho3s9q9n9Ki4CBf9biVJuf9PtbgBlkSiWoAoGCCqGSM49\n"
    "AwEHoUQDQgAEl/AOpZKNxvHKtl+17OZu2skqhe8ABC9eMTJw30uqj5QzgR1bCOt8\n"
    "x5GejOuy3OTuKXRMRAKDuFFP1nijeHrAww==\n"
    "-----END EC PRIVATE KEY-----\n";

static const char hmac_secret[] = "fuzz hmac secret\n";

static char dir[64];
static jwt_keys *keys[5]; /* RS256, ES256, HS256, PS256 verify-only, ES256 signer */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void cleanup(void)
{
    for (int i = 0; i < 5; i++)
        jwt_keys_free(keys[i]);
    if (dir[0] != '\0')
        nftw(dir, rm_cb, 4, FTW_DEPTH | FTW_PHYS);
}

static void put(const char *name, const char *data)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f == NULL || fputs(data, f) < 0 || fclose(f) != 0)
        abort();
}

static void init(void)
{
    strcpy(dir, "/tmp/fuzz_jwt.XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(cleanup);
    put("rsa.pem", key_rsa_pem);
    put("ec.pem", key_ec_pem);
    put("hmac.key", hmac_secret);
    /* the RSA public key, from the private one */
    char p[128];
    snprintf(p, sizeof(p), "%s/rsa.pem", dir);
    FILE *f = fopen(p, "r");
    EVP_PKEY *pk = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    snprintf(p, sizeof(p), "%s/rsa.pub", dir);
    f = fopen(p, "w");
    if (pk == NULL || f == NULL || PEM_write_PUBKEY(f, pk) != 1)
        abort();
    fclose(f);
    EVP_PKEY_free(pk);
    static const char *const o[5] = {
        "priv-key=%s/rsa.pem,sign-method=RS256",
        "priv-key=%s/ec.pem,sign-method=ES256",
        "priv-key=%s/hmac.key,sign-method=HS256",
        "pub-key=%s/rsa.pub,sign-method=PS256",
        "priv-key=%s/ec.pem,sign-method=ES256,ttl=1h",
    };
    for (int i = 0; i < 5; i++) {
        char opts[256], err[256];
        snprintf(opts, sizeof(opts), o[i], dir);
        if (jwt_keys_load(opts, &keys[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_jwt: load %s: %s\n", opts, err);
            abort();
        }
    }
}

static void b64url(const unsigned char *in, size_t n, char *out)
{
    int l = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    while (l > 0 && out[l - 1] == '=')
        l--;
    out[l] = '\0';
    for (char *p = out; *p; p++)
        *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
}

static void check_verify(jwt_keys *k, const char *tok, size_t n)
{
    char user[64];
    uint64_t rev = 0;
    memset(user, 'X', sizeof(user));
    int rc = jwt_verify(k, tok, n, NOW, user, sizeof(user), &rev);
    if (rc == 0 && memchr(user, '\0', sizeof(user)) == NULL)
        abort();
    if (rc != 0 && rc != -EINVAL && rc != -ETIMEDOUT && rc != -ERANGE && rc != -ENOMEM)
        abort();
    /* a tiny buffer: same verdict, or -ERANGE instead of success */
    char small[2];
    int rc2 = jwt_verify(k, tok, n, NOW, small, sizeof(small), NULL);
    if (rc2 != rc && !(rc == 0 && rc2 == -ERANGE) && !(rc == -ERANGE && rc2 == -ERANGE))
        abort();
    if (rc2 == 0 && small[strnlen(small, sizeof(small) - 1)] != '\0')
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (keys[0] == NULL)
        init();
    if (size < 1 || size > 100000)
        return 0;
    uint8_t mode = data[0] % 8;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    switch (mode) {
    case 0:
    case 1:
    case 2:
    case 3: {
        /* copy so that ASan sees reads past the end */
        char *tok = malloc(n ? n : 1);
        if (tok == NULL)
            return 0;
        memcpy(tok, in, n);
        check_verify(keys[mode], tok, n);
        free(tok);
        break;
    }
    case 4: {
        const char *nl = memchr(in, '\n', n);
        if (nl == NULL || n > 20000)
            return 0;
        size_t hl = (size_t)(nl - in), cl = n - hl - 1;
        char *tok = malloc(2 * n + 128);
        if (tok == NULL)
            return 0;
        b64url((const unsigned char *)in, hl, tok);
        strcat(tok, ".");
        b64url((const unsigned char *)nl + 1, cl, tok + strlen(tok));
        unsigned char mac[32];
        unsigned int ml = 0;
        HMAC(EVP_sha256(), hmac_secret, (int)strlen(hmac_secret), (unsigned char *)tok,
             strlen(tok), mac, &ml);
        strcat(tok, ".");
        b64url(mac, ml, tok + strlen(tok));
        size_t tl = strlen(tok);
        char *t2 = malloc(tl);
        if (t2 != NULL) {
            memcpy(t2, tok, tl);
            check_verify(keys[2], t2, tl);
            free(t2);
        }
        free(tok);
        break;
    }
    case 5: {
        char *u = malloc(n + 1);
        if (u == NULL)
            return 0;
        memcpy(u, in, n);
        u[n] = '\0';
        for (int i = 2; i <= 4; i += 2) {
            char *tok = NULL;
            int rc = jwt_sign(keys[i], u, n, NOW, &tok);
            if (rc == 0) {
                char *got = malloc(n + 1);
                uint64_t rev = 0;
                if (got == NULL) {
                    free(tok);
                    break;
                }
                rc = jwt_verify(keys[i], tok, strlen(tok), NOW, got, n + 1, &rev);
                if (rc == 0 && (strcmp(got, u) != 0 || rev != n))
                    abort(); /* round trip changed the username */
                if (rc != 0 && !(rc == -EINVAL && strlen(tok) > JWT_MAX_TOKEN_LEN))
                    abort();
                free(got);
                free(tok);
            } else if (rc != -EINVAL) {
                abort(); /* only invalid UTF-8 may fail */
            }
        }
        free(u);
        break;
    }
    case 7: {
        static const char *const m[] = {"RS256", "PS384", "ES256", "ES512", "HS256"};
        if (n < 1)
            return 0;
        char path[128], o[256], err[256];
        snprintf(path, sizeof(path), "%s/fuzzkey", dir);
        FILE *f = fopen(path, "wb");
        if (f == NULL)
            abort();
        if (n > 1 && fwrite(in + 1, 1, n - 1, f) != n - 1)
            abort();
        fclose(f);
        snprintf(o, sizeof(o), "%s=%s,sign-method=%s", (in[0] & 0x80) ? "pub-key" : "priv-key",
                 path, m[(in[0] & 0x7f) % 5]);
        jwt_keys *k = NULL;
        if (jwt_keys_load(o, &k, err, sizeof(err)) != 0) {
            if (k != NULL || err[0] == '\0')
                abort();
            return 0;
        }
        char *tok = NULL;
        int rc = jwt_sign(k, "root", 3, NOW, &tok);
        if (rc == 0) {
            uint64_t rev = 0;
            if (jwt_verify(k, tok, strlen(tok), NOW, NULL, 0, &rev) != 0 || rev != 3)
                abort(); /* keys that sign must verify their own tokens */
            free(tok);
        } else if (jwt_keys_can_sign(k) && rc != -EINVAL) {
            abort();
        }
        jwt_keys_free(k);
        break;
    }
    case 6: {
        char *s = malloc(n + 1);
        if (s == NULL)
            return 0;
        memcpy(s, in, n);
        s[n] = '\0';
        int64_t ns;
        jwt_parse_duration(s, &ns);
        free(s);
        break;
    }
    }
    return 0;
}
