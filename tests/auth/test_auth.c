/* tests/auth/test_auth.c: the auth store (auth/auth.h) on a real LMDB
 * backend in a temp dir: users, roles, etcd's permission intervals, the
 * admin rules, revisions, persistence, passwords and simple tokens. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/auth.h"
#include "backend/backend.h"
#include "base/err.h"

static char dir[64];
static backend *be;
static auth_store *as;

static void open_store(uint64_t ttl_ms)
{
    struct backend_options o = {.dir = dir};
    cr_assert_eq(backend_open(&o, &be), 0);
    struct auth_options ao = {.token_opts = "simple", .token_ttl_ms = ttl_ms, .bcrypt_cost = 4};
    char err[256] = "";
    cr_assert_eq(auth_open(be, &ao, &as, err, sizeof(err)), 0, "%s", err);
}

static void close_store(void)
{
    auth_close(as);
    backend_close(be);
    as = NULL;
    be = NULL;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/quorum-auth-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    open_store(300000);
}

static void teardown(void)
{
    close_store();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* run |rv = expr| inside a batch that is committed after */
#define IN_BATCH(expr)                                                                             \
    ({                                                                                             \
        cr_assert_eq(backend_batch_begin(be), 0);                                                  \
        int rv_ = (expr);                                                                          \
        cr_assert_eq(backend_batch_commit(be), 0);                                                 \
        rv_;                                                                                       \
    })

static void grant(const char *role, enum auth_perm_type t, const char *key, const char *end,
                  size_t elen)
{
    Authpb__Permission p = AUTHPB__PERMISSION__INIT;
    p.permtype = (Authpb__Permission__Type)t;
    p.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    p.range_end = (ProtobufCBinaryData){elen, (uint8_t *)end};
    cr_assert_eq(IN_BATCH(auth_apply_role_grant_permission(as, role, &p)), 0);
}

static void root_and_alice(void)
{
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "root", "$2b$04$x", false)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "root", "root")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "alice", "$2b$04$y", false)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_role_add(as, "r")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "alice", "r")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_enable(as)), 0);
}

static int can(const char *user, const char *key, const char *end, size_t elen,
               enum auth_perm_type t)
{
    struct auth_info ai = {user, auth_revision(as)};
    return auth_check(as, &ai, (const uint8_t *)key, strlen(key), (const uint8_t *)end, elen, t);
}

TestSuite(auth, .init = setup, .fini = teardown);

Test(auth, enable_needs_root_with_root_role)
{
    cr_assert_eq(IN_BATCH(auth_apply_enable(as)), QERR_ROOT_USER_NOT_EXIST);
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "root", "h", false)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_enable(as)), QERR_ROOT_ROLE_NOT_EXIST);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "root", "root")), 0);
    cr_assert(!auth_enabled(as));
    cr_assert_eq(IN_BATCH(auth_apply_enable(as)), 0);
    cr_assert(auth_enabled(as));
    cr_assert_eq(IN_BATCH(auth_apply_enable(as)), 0, "enabling twice is not an error");
}

Test(auth, user_and_role_errors)
{
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "", "h", false)), QERR_USER_EMPTY);
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "u", "h", false)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "u", "h", false)), QERR_USER_EXISTS);
    cr_assert_eq(IN_BATCH(auth_apply_user_delete(as, "nobody")), QERR_USER_NOT_FOUND);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "u", "nope")), QERR_ROLE_NOT_FOUND);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "nobody", "root")), QERR_USER_NOT_FOUND);
    cr_assert_eq(IN_BATCH(auth_apply_user_revoke_role(as, "u", "root")), QERR_ROLE_NOT_GRANTED);
    cr_assert_eq(IN_BATCH(auth_apply_role_add(as, "")), QERR_ROLE_EMPTY);
    cr_assert_eq(IN_BATCH(auth_apply_role_add(as, "r")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_role_add(as, "r")), QERR_ROLE_EXISTS);
    cr_assert_eq(IN_BATCH(auth_apply_role_delete(as, "x")), QERR_ROLE_NOT_FOUND);
    cr_assert_eq(IN_BATCH(auth_apply_role_revoke_permission(as, "r", (const uint8_t *)"k", 1,
                                                            NULL, 0)),
                 QERR_PERMISSION_NOT_GRANTED);
    cr_assert_eq(IN_BATCH(auth_apply_role_revoke_permission(as, "x", (const uint8_t *)"k", 1,
                                                            NULL, 0)),
                 QERR_ROLE_NOT_FOUND);
}

Test(auth, root_is_protected_while_enabled)
{
    root_and_alice();
    cr_assert_eq(IN_BATCH(auth_apply_user_delete(as, "root")), QERR_INVALID_AUTH_MGMT);
    cr_assert_eq(IN_BATCH(auth_apply_user_revoke_role(as, "root", "root")),
                 QERR_INVALID_AUTH_MGMT);
    cr_assert_eq(IN_BATCH(auth_apply_disable(as)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_revoke_role(as, "root", "root")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_delete(as, "root")), 0);
}

Test(auth, single_key_prefix_range_and_from_key)
{
    root_and_alice();
    grant("r", AUTH_READ, "k1", NULL, 0);          /* one key */
    grant("r", AUTH_READWRITE, "p/", "p0", 2);     /* prefix p/ */
    grant("r", AUTH_WRITE, "z", "\0", 1);          /* every key from z */
    cr_assert_eq(can("alice", "k1", NULL, 0, AUTH_READ), 0);
    cr_assert_eq(can("alice", "k1", NULL, 0, AUTH_WRITE), QERR_PERMISSION_DENIED);
    cr_assert_eq(can("alice", "k10", NULL, 0, AUTH_READ), QERR_PERMISSION_DENIED);
    cr_assert_eq(can("alice", "k1", "k2", 2, AUTH_READ), QERR_PERMISSION_DENIED,
                 "a range wider than the key");
    cr_assert_eq(can("alice", "k1", "k1\0", 3, AUTH_READ), 0, "the range of the key alone");
    cr_assert_eq(can("alice", "p/a", NULL, 0, AUTH_WRITE), 0);
    cr_assert_eq(can("alice", "p/", "p0", 2, AUTH_READ), 0);
    cr_assert_eq(can("alice", "p/a", "p/b", 3, AUTH_READ), 0);
    cr_assert_eq(can("alice", "p", "p0", 2, AUTH_READ), QERR_PERMISSION_DENIED);
    cr_assert_eq(can("alice", "p/", "p1", 2, AUTH_READ), QERR_PERMISSION_DENIED);
    cr_assert_eq(can("alice", "zz", NULL, 0, AUTH_WRITE), 0);
    cr_assert_eq(can("alice", "z", "\0", 1, AUTH_WRITE), 0, "from-key inside from-key");
    cr_assert_eq(can("alice", "y", "\0", 1, AUTH_WRITE), QERR_PERMISSION_DENIED);
    cr_assert_eq(can("alice", "zz", NULL, 0, AUTH_READ), QERR_PERMISSION_DENIED);
    cr_assert_eq(can("root", "anything", "\0", 1, AUTH_WRITE), 0, "root may do anything");
}

Test(auth, ranges_join_across_permissions_and_roles)
{
    root_and_alice();
    cr_assert_eq(IN_BATCH(auth_apply_role_add(as, "r2")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "alice", "r2")), 0);
    grant("r", AUTH_READ, "a", "c", 1);
    grant("r2", AUTH_READ, "c", "e", 1);
    cr_assert_eq(can("alice", "a", "e", 1, AUTH_READ), 0, "[a,c) + [c,e) covers [a,e)");
    cr_assert_eq(can("alice", "b", "d", 1, AUTH_READ), 0);
    cr_assert_eq(can("alice", "a", "f", 1, AUTH_READ), QERR_PERMISSION_DENIED);
    grant("r2", AUTH_READ, "g", "h", 1);
    cr_assert_eq(can("alice", "d", "h", 1, AUTH_READ), QERR_PERMISSION_DENIED, "gap [e,g)");
    cr_assert_eq(can("alice", "b", "b", 1, AUTH_READ), QERR_PERMISSION_DENIED,
                 "an empty range is covered by nothing");
}

Test(auth, nobody_old_revision_deleted_user)
{
    root_and_alice();
    grant("r", AUTH_READ, "k", NULL, 0);
    struct auth_info nobody = {NULL, 0};
    cr_assert_eq(auth_check(as, &nobody, (const uint8_t *)"k", 1, NULL, 0, AUTH_READ),
                 QERR_USER_EMPTY);
    cr_assert_eq(auth_check_admin(as, &nobody), QERR_USER_EMPTY);
    struct auth_info old = {"alice", auth_revision(as) - 1};
    cr_assert_eq(auth_check(as, &old, (const uint8_t *)"k", 1, NULL, 0, AUTH_READ),
                 QERR_AUTH_OLD_REVISION);
    struct auth_info alice = {"alice", auth_revision(as)};
    cr_assert_eq(auth_check_admin(as, &alice), QERR_PERMISSION_DENIED);
    struct auth_info ghost = {"ghost", auth_revision(as)};
    cr_assert_eq(auth_check_admin(as, &ghost), QERR_USER_NOT_FOUND);
    cr_assert_eq(auth_check(as, &ghost, (const uint8_t *)"k", 1, NULL, 0, AUTH_READ),
                 QERR_PERMISSION_DENIED);
    struct auth_info root = {"root", 1};
    cr_assert_eq(auth_check_admin(as, &root), 0);
}

Test(auth, revoke_and_role_delete_take_effect)
{
    root_and_alice();
    grant("r", AUTH_READWRITE, "k", NULL, 0);
    cr_assert_eq(can("alice", "k", NULL, 0, AUTH_WRITE), 0);
    uint64_t rev = auth_revision(as);
    cr_assert_eq(IN_BATCH(auth_apply_role_revoke_permission(as, "r", (const uint8_t *)"k", 1,
                                                            NULL, 0)),
                 0);
    cr_assert_gt(auth_revision(as), rev, "every change bumps the revision");
    cr_assert_eq(can("alice", "k", NULL, 0, AUTH_WRITE), QERR_PERMISSION_DENIED);
    grant("r", AUTH_READWRITE, "k", NULL, 0);
    cr_assert_eq(IN_BATCH(auth_apply_role_delete(as, "r")), 0);
    cr_assert_eq(can("alice", "k", NULL, 0, AUTH_WRITE), QERR_PERMISSION_DENIED);
    struct arena a = {0};
    char **roles;
    size_t n;
    cr_assert_eq(auth_user_get(as, "alice", &a, &roles, &n), 0);
    cr_assert_eq(n, 0, "a deleted role is taken from its users");
    arena_free(&a);
}

Test(auth, grant_updates_an_existing_permission_and_keeps_keys_sorted)
{
    root_and_alice();
    grant("r", AUTH_READ, "m", NULL, 0);
    grant("r", AUTH_READ, "a", NULL, 0);
    grant("r", AUTH_WRITE, "m", NULL, 0); /* same key and end: the type changes */
    struct arena a = {0};
    Authpb__Permission **p;
    size_t n;
    cr_assert_eq(auth_role_get(as, "r", &a, &p, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(memcmp(p[0]->key.data, "a", 1), 0);
    cr_assert_eq(memcmp(p[1]->key.data, "m", 1), 0);
    cr_assert_eq(p[1]->permtype, AUTHPB__PERMISSION__TYPE__WRITE);
    cr_assert_eq(auth_role_get(as, "root", &a, &p, &n), QERR_ROLE_NOT_FOUND,
                 "root is not a stored role until added");
    arena_free(&a);
}

Test(auth, state_survives_reopen)
{
    root_and_alice();
    grant("r", AUTH_READ, "k", NULL, 0);
    uint64_t rev = auth_revision(as);
    close_store();
    open_store(300000);
    cr_assert(auth_enabled(as));
    cr_assert_eq(auth_revision(as), rev);
    cr_assert_eq(can("alice", "k", NULL, 0, AUTH_READ), 0);
    cr_assert_eq(can("alice", "k", NULL, 0, AUTH_WRITE), QERR_PERMISSION_DENIED);
    struct arena a = {0};
    char **names;
    size_t n;
    cr_assert_eq(auth_user_list(as, &a, &names, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(names[0], "alice");
    cr_assert_str_eq(names[1], "root");
    arena_free(&a);
}

Test(auth, passwords)
{
    char h[128];
    cr_assert_eq(auth_hash_password(4, "s3cret", h, sizeof(h)), 0);
    cr_assert_eq(strncmp(h, "$2b$04$", 7), 0, "%s", h);
    cr_assert(auth_hash_matches("s3cret", h));
    cr_assert(!auth_hash_matches("s3creT", h));
    cr_assert(!auth_hash_matches("s3cret", "$2b$04$garbage"));
    cr_assert(!auth_hash_matches("", ""));
    /* Go's bcrypt (etcd) writes $2a$: those verify too */
    h[2] = 'a';
    cr_assert(auth_hash_matches("s3cret", h));
    cr_assert(!auth_hash_matches("other", h));
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "root", NULL, false)), 0);
    cr_assert_eq(auth_hash_password(4, "pw", h, sizeof(h)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "bob", h, false)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_add(as, "np", NULL, true)), 0);
    uint64_t rev;
    cr_assert_eq(auth_password_check(as, "bob", "pw", &rev), QERR_AUTH_NOT_ENABLED);
    cr_assert_eq(IN_BATCH(auth_apply_user_grant_role(as, "root", "root")), 0);
    cr_assert_eq(IN_BATCH(auth_apply_enable(as)), 0);
    cr_assert_eq(auth_password_check(as, "bob", "pw", &rev), 0);
    cr_assert_eq(rev, auth_revision(as));
    cr_assert_eq(auth_password_check(as, "bob", "nope", &rev), QERR_AUTH_FAILED);
    cr_assert_eq(auth_password_check(as, "ghost", "pw", &rev), QERR_AUTH_FAILED);
    cr_assert_eq(auth_password_check(as, "np", "", &rev), QERR_AUTH_FAILED,
                 "a user added with --no-password cannot log in with one");
}

Test(auth, simple_tokens)
{
    root_and_alice();
    char tok[64], user[64];
    uint64_t rev;
    cr_assert_eq(auth_token_assign(as, "alice", "abcdefghijklmnop", 42, true, tok, sizeof(tok)),
                 0);
    cr_assert_str_eq(tok, "abcdefghijklmnop.42");
    cr_assert_eq(auth_token_info(as, tok, strlen(tok), user, sizeof(user), &rev), 0);
    cr_assert_str_eq(user, "alice");
    cr_assert_eq(rev, auth_revision(as), "a simple token runs at the current revision");
    cr_assert_eq(auth_token_info(as, "abcdefghijklmnop.43", 19, user, sizeof(user), &rev),
                 QERR_INVALID_TOKEN);
    cr_assert_eq(auth_token_info(as, tok, 5, user, sizeof(user), &rev), QERR_INVALID_TOKEN);
    cr_assert_eq(auth_token_assign(as, "ghost", "abcdefghijklmnop", 43, true, tok, sizeof(tok)),
                 QERR_AUTH_FAILED);
    /* a password change or a delete drops the user's tokens */
    cr_assert_eq(auth_token_assign(as, "alice", "qqqqqqqqqqqqqqqq", 44, true, tok, sizeof(tok)),
                 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_change_password(as, "alice", "$2b$04$z")), 0);
    cr_assert_eq(auth_token_info(as, tok, strlen(tok), user, sizeof(user), &rev),
                 QERR_INVALID_TOKEN);
    cr_assert_eq(auth_token_assign(as, "alice", "rrrrrrrrrrrrrrrr", 45, true, tok, sizeof(tok)),
                 0);
    cr_assert_eq(IN_BATCH(auth_apply_user_delete(as, "alice")), 0);
    cr_assert_eq(auth_token_info(as, tok, strlen(tok), user, sizeof(user), &rev),
                 QERR_INVALID_TOKEN);
    /* disabling drops them all */
    cr_assert_eq(auth_token_assign(as, "root", "ssssssssssssssss", 46, true, tok, sizeof(tok)), 0);
    cr_assert_eq(IN_BATCH(auth_apply_disable(as)), 0);
    cr_assert_eq(auth_token_info(as, tok, strlen(tok), user, sizeof(user), &rev),
                 QERR_INVALID_TOKEN);
}

Test(auth, simple_tokens_expire_unused)
{
    close_store();
    open_store(1000); /* 1 s TTL */
    root_and_alice();
    char tok[64], user[64];
    uint64_t rev;
    cr_assert_eq(auth_token_assign(as, "alice", "abcdefghijklmnop", 7, true, tok, sizeof(tok)), 0);
    for (int i = 0; i < 12; i++) { /* each use restarts the clock: 1.2 s in all */
        usleep(100 * 1000);
        cr_assert_eq(auth_token_info(as, tok, strlen(tok), user, sizeof(user), &rev), 0);
    }
    usleep(1100 * 1000);
    auth_tokens_expire(as);
    cr_assert_eq(auth_token_info(as, tok, strlen(tok), user, sizeof(user), &rev),
                 QERR_INVALID_TOKEN);
}

Test(auth, token_prefix_is_sixteen_letters)
{
    char p[17], q[17];
    cr_assert_eq(auth_token_prefix(p), 0);
    cr_assert_eq(auth_token_prefix(q), 0);
    cr_assert_eq(strlen(p), 16);
    for (int i = 0; i < 16; i++)
        cr_assert((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z'));
    cr_assert_str_neq(p, q);
}
