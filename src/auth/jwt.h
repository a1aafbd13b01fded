/* src/auth/jwt.h: etcd 3.4 compatible JWT auth tokens
 * (--auth-token jwt,pub-key=...,priv-key=...,sign-method=...,ttl=...).
 *
 * Mirrors etcd 3.4's auth/jwt.go + auth/options.go (jwt-go v3.2):
 *   - options: sign-method (required), pub-key, priv-key, ttl (Go duration,
 *     default 5m). Unknown keys are only a warning. A value containing '=',
 *     an empty item or a duplicate key is "auth: invalid auth options".
 *   - sign-methods: RS256/384/512, PS256/384/512, ES256/384/512 (PEM keys)
 *     and HS256/384/512 (the raw bytes of the priv-key file are the secret).
 *     "none" and anything else are rejected.
 *   - RS/PS/ES: priv-key alone, pub-key alone (verify-only: signing fails)
 *     or both (the private key is used for both signing and verifying).
 *   - token: base64url(no padding) of {"alg":"<method>","typ":"JWT"} "."
 *     {"exp":<unix s>,"revision":<uint>,"username":"<name>"} "." signature
 *     (ES: raw R||S, each padded to the curve size).
 *   - verify: segments are unpadded base64url (no '='); the header's alg
 *     must equal the configured method; exp (if present and not 0) must be
 *     a number >= now; iat / nbf (if present, not 0) numbers <= now;
 *     username must be a string and revision a number.
 *
 * Thread safety: a loaded jwt_keys is read-only; jwt_sign and jwt_verify
 * may run concurrently on one jwt_keys. */
#ifndef QUORUM_AUTH_JWT_H
#define QUORUM_AUTH_JWT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct jwt_keys jwt_keys;

/* etcd's error texts (auth/store.go), as written into jwt_keys_load's err */
#define JWT_ERR_INVALID_AUTH_OPTS "auth: invalid auth options"
#define JWT_ERR_MISSING_KEY "auth: missing key data"
#define JWT_ERR_KEY_MISMATCH "auth: public and private keys don't match"
#define JWT_ERR_VERIFY_ONLY "auth: token signing attempted with verify-only key"

/* tokens longer than this are rejected by jwt_verify without parsing */
#define JWT_MAX_TOKEN_LEN 65536

/* jwt_keys_load parses the part of etcd's --auth-token after "jwt," (e.g.
 * "pub-key=/p/pub.pem,priv-key=/p/priv.pem,sign-method=RS256,ttl=5m"), loads
 * the PEM keys with OpenSSL. On error: -EINVAL (or -errno when a key file
 * cannot be read) with etcd's error text in err (the error etcd 3.4 fails
 * its start with). */
int jwt_keys_load(const char *opts, jwt_keys **out, char *err, size_t errlen);
/* jwt_keys_load_ex is jwt_keys_load that also writes into |detail| (may be
 * NULL) what etcd logs besides: on error the reason (e.g. "failed to read
 * public key ..."), on success a warning about unknown options or a
 * mismatching key pair, else "". */
int jwt_keys_load_ex(const char *opts, jwt_keys **out, char *err, size_t errlen, char *detail,
                     size_t detaillen);
void jwt_keys_free(jwt_keys *k);
/* jwt_keys_ttl_ms: the token lifetime (etcd's default 5m when no ttl= is
 * given); a negative ttl (accepted by etcd) reads as 0 here. */
uint64_t jwt_keys_ttl_ms(const jwt_keys *k);
/* the ttl exactly as parsed (Go time.Duration: nanoseconds, may be <= 0) */
int64_t jwt_keys_ttl_ns(const jwt_keys *k);
/* jwt_keys_can_sign: a private key (or HMAC secret) was given */
bool jwt_keys_can_sign(const jwt_keys *k);
/* the configured sign-method, e.g. "RS256" */
const char *jwt_keys_alg(const jwt_keys *k);

/* jwt_sign makes a token for |user| at auth |revision|, expiring ttl after
 * |now_s| (unix seconds; exp = now_s + floor(ttl/1s), as etcd's
 * time.Now().Add(ttl).Unix() for a whole-second now), into a malloc'd
 * NUL-terminated string. Errors: -EPERM verify-only keys (etcd:
 * JWT_ERR_VERIFY_ONLY), -EINVAL user not valid UTF-8 or key unusable for
 * the method (e.g. a P-384 key with ES256, as jwt-go), -ERANGE revision >
 * INT64_MAX, -ENOMEM. */
int jwt_sign(const jwt_keys *k, const char *user, uint64_t revision, int64_t now_s, char **out);
/* jwt_sign_exp is jwt_sign with the "exp" claim given directly. */
int jwt_sign_exp(const jwt_keys *k, const char *user, uint64_t revision, int64_t exp_s,
                 char **out);

/* jwt_verify checks signature, algorithm (must equal the configured one:
 * alg "none" and algorithm confusion are rejected), and expiry against
 * |now_s|; on success copies the username (NUL-terminated, must fit usercap)
 * and revision (either output may be NULL). Errors: -EINVAL malformed / bad
 * signature / wrong alg / missing or mistyped claims / iat or nbf in the
 * future, -ETIMEDOUT expired (correctly signed, exp < now), -ERANGE the
 * username does not fit usercap, -ENOMEM. Never crashes on any input. */
int jwt_verify(const jwt_keys *k, const char *token, size_t len, int64_t now_s, char *user,
               size_t usercap, uint64_t *revision);

/* jwt_parse_duration parses a Go time.ParseDuration string into
 * nanoseconds; 0 or -EINVAL. Exposed for tests. */
int jwt_parse_duration(const char *s, int64_t *ns);

#endif
