/* auth/token.h: the token providers behind auth.h: etcd's "simple" tokens
 * (a table every member fills as it applies Authenticate entries) and
 * "jwt" tokens (auth/jwt.h). Internal to auth/.
 *
 * Threading: every function may be called from any thread; the simple
 * table has its own mutex. */
#ifndef QUORUM_AUTH_TOKEN_H
#define QUORUM_AUTH_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct auth_tokens;

/* auth_tokens_new parses --auth-token (|opts|: "simple", or "jwt,..."):
 * -EINVAL with etcd's reason in |err| when it is not one of those. */
int auth_tokens_new(const char *opts, uint64_t ttl_ms, struct auth_tokens **out, char *err,
                    size_t errlen);
void auth_tokens_free(struct auth_tokens *t);
bool auth_tokens_is_jwt(const struct auth_tokens *t);

/* auth_tokens_assign: simple: records "<prefix>.<index>" for |user| (on
 * every member) and copies it to |out|; jwt: signs a token for |user| at
 * auth revision |rev| into |out| when |want|. Errors: -ENOMEM, -ENOSPC
 * (|cap|), -EINVAL (a jwt provider that only verifies). */
int auth_tokens_assign(struct auth_tokens *t, const char *user, const char *prefix,
                       uint64_t index, uint64_t rev, bool want, char *out, size_t cap);
/* auth_tokens_info: 0 with the user and revision (simple: |*rev| is left
 * as the caller set it, the store's current revision, as etcd), or
 * QERR_INVALID_TOKEN. */
int auth_tokens_info(struct auth_tokens *t, const char *token, size_t len, char *user,
                     size_t usercap, uint64_t *rev);
void auth_tokens_invalidate_user(struct auth_tokens *t, const char *user);
void auth_tokens_clear(struct auth_tokens *t);
void auth_tokens_sweep(struct auth_tokens *t);

#endif
