/* auth/token.c: simple and jwt token providers (token.h). */
#include "auth/token.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth/jwt.h"
#include "base/err.h"
#include "base/log.h"

#define NBUCKETS 1024

struct tok {
    struct tok *next;
    char *token;
    char *user;
    _Atomic uint64_t expire_ms; /* monotonic; moved on by lookups under the read lock */
};

struct auth_tokens {
    jwt_keys *jwt; /* NULL: simple */
    uint64_t ttl_ms;
    /* lookups (every request carrying a token, on every front loop) take
     * it for reading; assigning and dropping tokens for writing */
    pthread_rwlock_t mu;
    struct tok *b[NBUCKETS];
    size_t n;
    uint64_t last_sweep_ms;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h % NBUCKETS;
}

int auth_tokens_new(const char *opts, uint64_t ttl_ms, struct auth_tokens **out, char *err,
                    size_t errlen)
{
    struct auth_tokens *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    pthread_rwlock_init(&t->mu, NULL);
    t->ttl_ms = ttl_ms ? ttl_ms : 300000;
    if (opts == NULL || opts[0] == '\0' || strcmp(opts, "simple") == 0) {
        /* etcd warns the same */
        log_warn("auth", "simple token is not cryptographically signed");
    } else if (strncmp(opts, "jwt", 3) == 0 && (opts[3] == ',' || opts[3] == '\0')) {
        int rv = jwt_keys_load(opts[3] ? opts + 4 : "", &t->jwt, err, errlen);
        if (rv != 0) {
            auth_tokens_free(t);
            return rv;
        }
    } else {
        snprintf(err, errlen, "failed to create a token provider: auth: invalid auth options");
        auth_tokens_free(t);
        return -EINVAL;
    }
    *out = t;
    return 0;
}

void auth_tokens_free(struct auth_tokens *t)
{
    if (t == NULL)
        return;
    auth_tokens_clear(t);
    if (t->jwt != NULL)
        jwt_keys_free(t->jwt);
    pthread_rwlock_destroy(&t->mu);
    free(t);
}

bool auth_tokens_is_jwt(const struct auth_tokens *t)
{
    return t->jwt != NULL;
}

static void tok_free(struct tok *k)
{
    free(k->token);
    free(k->user);
    free(k);
}

int auth_tokens_assign(struct auth_tokens *t, const char *user, const char *prefix,
                       uint64_t index, uint64_t rev, bool want, char *out, size_t cap)
{
    if (t->jwt != NULL) {
        if (!want)
            return 0;
        char *tok = NULL;
        int rv = jwt_sign(t->jwt, user, rev, (int64_t)time(NULL), &tok);
        if (rv != 0)
            return rv;
        rv = strlen(tok) < cap ? 0 : -ENOSPC;
        if (rv == 0)
            strcpy(out, tok);
        free(tok);
        return rv;
    }
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%.16s.%llu", prefix, (unsigned long long)index);
    if ((size_t)n >= cap)
        return -ENOSPC;
    struct tok *k = calloc(1, sizeof(*k));
    if (k == NULL || (k->token = strdup(buf)) == NULL || (k->user = strdup(user)) == NULL) {
        if (k != NULL)
            tok_free(k);
        return -ENOMEM;
    }
    atomic_store(&k->expire_ms, now_ms() + t->ttl_ms);
    uint32_t h = hash(buf, (size_t)n);
    pthread_rwlock_wrlock(&t->mu);
    /* a replayed entry (restart) assigns the same token again: replace */
    for (struct tok **pp = &t->b[h]; *pp != NULL; pp = &(*pp)->next)
        if (strcmp((*pp)->token, buf) == 0) {
            struct tok *old = *pp;
            *pp = old->next;
            tok_free(old);
            t->n--;
            break;
        }
    k->next = t->b[h];
    t->b[h] = k;
    t->n++;
    pthread_rwlock_unlock(&t->mu);
    memcpy(out, buf, (size_t)n + 1);
    return 0;
}

int auth_tokens_info(struct auth_tokens *t, const char *token, size_t len, char *user,
                     size_t usercap, uint64_t *rev)
{
    if (t->jwt != NULL) {
        int rv = jwt_verify(t->jwt, token, len, (int64_t)time(NULL), user, usercap, rev);
        return rv == 0 ? 0 : QERR_INVALID_TOKEN;
    }
    uint32_t h = hash(token, len);
    uint64_t now = now_ms();
    int rv = QERR_INVALID_TOKEN;
    pthread_rwlock_rdlock(&t->mu);
    for (struct tok *k = t->b[h]; k != NULL; k = k->next) {
        if (strlen(k->token) != len || memcmp(k->token, token, len) != 0)
            continue;
        /* an expired one is left for the sweep (auth_tokens_sweep) */
        if (now < atomic_load_explicit(&k->expire_ms, memory_order_relaxed) &&
            strlen(k->user) < usercap) {
            strcpy(user, k->user);
            /* used: its TTL starts again */
            atomic_store_explicit(&k->expire_ms, now + t->ttl_ms, memory_order_relaxed);
            rv = 0;
        }
        break;
    }
    pthread_rwlock_unlock(&t->mu);
    return rv;
}

/* drop removes every simple token for which |pred| holds. */
static void drop(struct auth_tokens *t, bool (*pred)(const struct tok *, const void *),
                 const void *arg)
{
    pthread_rwlock_wrlock(&t->mu);
    for (size_t i = 0; i < NBUCKETS; i++) {
        struct tok **pp = &t->b[i];
        while (*pp != NULL) {
            struct tok *k = *pp;
            if (pred(k, arg)) {
                *pp = k->next;
                tok_free(k);
                t->n--;
            } else {
                pp = &k->next;
            }
        }
    }
    pthread_rwlock_unlock(&t->mu);
}

static bool of_user(const struct tok *k, const void *user)
{
    return strcmp(k->user, user) == 0;
}

static bool any(const struct tok *k, const void *arg)
{
    return true;
}

static bool expired(const struct tok *k, const void *now)
{
    return *(const uint64_t *)now >= atomic_load(&((struct tok *)k)->expire_ms);
}

void auth_tokens_invalidate_user(struct auth_tokens *t, const char *user)
{
    drop(t, of_user, user);
}

void auth_tokens_clear(struct auth_tokens *t)
{
    drop(t, any, NULL);
}

void auth_tokens_sweep(struct auth_tokens *t)
{
    uint64_t now = now_ms();
    /* most sweeps find nothing: look under the read lock first */
    bool any_expired = false;
    pthread_rwlock_rdlock(&t->mu);
    for (size_t i = 0; i < NBUCKETS && !any_expired; i++)
        for (struct tok *k = t->b[i]; k != NULL && !any_expired; k = k->next)
            any_expired = expired(k, &now);
    pthread_rwlock_unlock(&t->mu);
    if (any_expired)
        drop(t, expired, &now);
}
