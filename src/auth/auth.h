/* auth/auth.h: etcd's authentication store: users, roles, key-range
 * permissions, the auth switch, passwords and tokens.
 *
 * State lives in the backend, in etcd's buckets: "auth" (authEnabled: one
 * byte 1/0; authRevision: 8-byte big-endian counter, bumped by every
 * change), "authUsers" (name -> authpb.User, password = bcrypt hash) and
 * "authRoles" (name -> authpb.Role, permissions sorted by key). Changes are
 * applied from the Raft log inside the open batch (auth_apply_*), so every
 * member holds the same state and it survives restarts and snapshots.
 *
 * Permissions (etcd's unifiedRangePermissions): each permission is an
 * interval [key, range_end); no range_end means the key alone, a range_end
 * of "\0" means every key from |key| on. A request on one key is allowed
 * when some interval of the right type (read: READ or READWRITE; write:
 * WRITE or READWRITE) holds it; a request on a range when the union of
 * those intervals covers it without a gap. A user with the role "root" may
 * do anything. The store keeps each user's intervals merged and sorted,
 * rebuilt after every change.
 *
 * Threading: the apply and reload functions run on the core loop's thread
 * (the one that owns the batch). The checks, token lookups and reads may
 * run on any thread at the same time: they take the store's read lock
 * (a changed state is swapped in under its write lock). With auth
 * disabled a check costs one atomic load.
 *
 * Tokens: "simple" (etcd's default): a random 16-letter prefix chosen by
 * the member that took the Authenticate request, then "." and the log
 * index of its entry; every member learns it when it applies the entry
 * (auth_token_assign), so any member accepts it. A simple token expires
 * after --auth-token-ttl seconds without use, and goes when its user is
 * deleted, changes password, or auth is disabled. "jwt": a signed token
 * (auth/jwt.h) carrying the user and the auth revision; any member with
 * the public key verifies it; it expires at its "exp".
 */
#ifndef QUORUM_AUTH_AUTH_H
#define QUORUM_AUTH_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.pb-c.h"
#include "backend/backend.h"
#include "base/arena.h"

typedef struct auth_store auth_store;

/* the longest user name a token or certificate is resolved to */
#define AUTH_NAME_MAX 512

enum auth_perm_type {
    AUTH_READ = AUTHPB__PERMISSION__TYPE__READ,
    AUTH_WRITE = AUTHPB__PERMISSION__TYPE__WRITE,
    AUTH_READWRITE = AUTHPB__PERMISSION__TYPE__READWRITE,
};

/* Who a request runs as (etcd's AuthInfo). |user| NULL or |revision| 0:
 * nobody (no token and no verified client certificate). */
struct auth_info {
    const char *user;
    uint64_t revision;
};

struct auth_options {
    /* --auth-token as given: "simple" or "jwt,pub-key=...,..." */
    const char *token_opts;
    uint64_t token_ttl_ms; /* simple tokens: time unused before they expire */
    unsigned bcrypt_cost;  /* 4..31; anything else means etcd's default, 10 */
};

/* auth_open reads the state from |be| (a read txn, or the batch when one is
 * open). Errors: -EINVAL with a reason in |err| (bad --auth-token),
 * -ENOMEM, storage errors. */
int auth_open(backend *be, const struct auth_options *o, auth_store **out, char *err,
              size_t errlen);
void auth_close(auth_store *as);
/* auth_reload reads the state again: after the database file was replaced
 * (a snapshot installed). Simple tokens stay only if auth is still on. */
int auth_reload(auth_store *as);

bool auth_enabled(const auth_store *as);
uint64_t auth_revision(const auth_store *as);
unsigned auth_bcrypt_cost(const auth_store *as);
bool auth_is_jwt(const auth_store *as);

/* ---- changes, applied from the log inside the open batch ----
 * Each answers 0 or the error etcd's applier answers: QERR_ROOT_USER_NOT_EXIST,
 * QERR_ROOT_ROLE_NOT_EXIST, QERR_USER_EMPTY, QERR_USER_EXISTS,
 * QERR_USER_NOT_FOUND, QERR_ROLE_EMPTY, QERR_ROLE_EXISTS, QERR_ROLE_NOT_FOUND,
 * QERR_ROLE_NOT_GRANTED, QERR_PERMISSION_NOT_GRANTED, QERR_INVALID_AUTH_MGMT,
 * or a storage error (fatal). */
int auth_apply_enable(auth_store *as);
int auth_apply_disable(auth_store *as);
/* |hash|: the bcrypt hash (NULL with no_password) */
int auth_apply_user_add(auth_store *as, const char *name, const char *hash, bool no_password);
int auth_apply_user_delete(auth_store *as, const char *name);
int auth_apply_user_change_password(auth_store *as, const char *name, const char *hash);
int auth_apply_user_grant_role(auth_store *as, const char *user, const char *role);
int auth_apply_user_revoke_role(auth_store *as, const char *user, const char *role);
int auth_apply_role_add(auth_store *as, const char *name);
int auth_apply_role_delete(auth_store *as, const char *name);
int auth_apply_role_grant_permission(auth_store *as, const char *role, const Authpb__Permission *p);
int auth_apply_role_revoke_permission(auth_store *as, const char *role, const uint8_t *key,
                                      size_t klen, const uint8_t *end, size_t elen);

/* ---- reads (any thread): results allocated from |a| ---- */
int auth_user_get(auth_store *as, const char *name, struct arena *a, char ***roles, size_t *n);
int auth_user_list(auth_store *as, struct arena *a, char ***names, size_t *n);
/* the root role reads as stored (etcd 3.4; 3.5 shows one READWRITE on all) */
int auth_role_get(auth_store *as, const char *name, struct arena *a, Authpb__Permission ***perms,
                  size_t *n);
int auth_role_list(auth_store *as, struct arena *a, char ***names, size_t *n);
bool auth_user_has_role(auth_store *as, const char *user, const char *role);
/* auth_user_exists: 1, 0, or for a user added with --no-password, 2 */
int auth_user_state(auth_store *as, const char *name);

/* ---- checks (any thread) ----
 * auth_check_admin: etcd's IsAdminPermitted: 0 when auth is off or |ai| is
 * a user with the root role; QERR_USER_EMPTY, QERR_USER_NOT_FOUND,
 * QERR_PERMISSION_DENIED otherwise.
 * auth_check: etcd's isOpPermitted for [key, end) (|elen| 0: the key alone;
 * "\0": from the key on) and |type| AUTH_READ or AUTH_WRITE: 0, or
 * QERR_USER_EMPTY (nobody), QERR_AUTH_OLD_REVISION (the identity was made
 * before the last auth change), QERR_PERMISSION_DENIED. */
int auth_check_admin(auth_store *as, const struct auth_info *ai);
int auth_check(auth_store *as, const struct auth_info *ai, const uint8_t *key, size_t klen,
               const uint8_t *end, size_t elen, enum auth_perm_type type);

/* ---- passwords: slow on purpose (bcrypt), run them on a worker ----
 * auth_password_hash writes a bcrypt hash ($2b$, the store's cost) of
 * |password| to |out|. auth_password_check is etcd's CheckPassword: 0 with
 * the auth revision it checked against in |*rev|, QERR_AUTH_NOT_ENABLED or
 * QERR_AUTH_FAILED. Errors also -ENOMEM, -EINVAL. */
int auth_password_hash(auth_store *as, const char *password, char *out, size_t cap);
int auth_password_check(auth_store *as, const char *user, const char *password, uint64_t *rev);
/* The same in two halves, so the slow half needs no store: auth_user_hash
 * copies a user's hash (and the revision) under the lock, with
 * auth_password_check's errors; auth_hash_password and auth_hash_matches
 * are pure (any thread, no store). */
int auth_user_hash(auth_store *as, const char *user, char *out, size_t cap, uint64_t *rev);
int auth_hash_password(unsigned cost, const char *password, char *out, size_t cap);
bool auth_hash_matches(const char *password, const char *hash);

/* ---- tokens ---- */
/* auth_token_prefix writes 16 random letters and a NUL (simple tokens). */
int auth_token_prefix(char out[17]);
/* auth_token_assign applies an Authenticate (inside the batch, every
 * member): re-checks the user (QERR_AUTH_NOT_ENABLED, QERR_AUTH_FAILED),
 * then for simple tokens records "<prefix>.<index>" for |user| and writes
 * it to |out|; for jwt signs a token when |want| (the member that answers
 * the client), else writes nothing. */
int auth_token_assign(auth_store *as, const char *user, const char *prefix, uint64_t index,
                      bool want, char *out, size_t cap);
/* auth_token_info resolves a token (any thread): 0 with the user copied to
 * |user| (NUL-terminated) and the revision, or QERR_INVALID_TOKEN. A simple
 * token's idle time restarts. */
int auth_token_info(auth_store *as, const char *token, size_t len, char *user, size_t usercap,
                    uint64_t *revision);
/* auth_tokens_expire drops simple tokens unused for the TTL (the core
 * calls it now and then; lookups check expiry themselves). */
void auth_tokens_expire(auth_store *as);

#endif
