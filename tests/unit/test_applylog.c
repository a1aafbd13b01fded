/* tests/unit/test_applylog.c: server/applylog.c prints a request as etcd
 * 3.4's InternalRaftStringer does. Every expected string below is what
 * etcd 3.4.23 logged ("request" of "apply request took too long") for the
 * same etcdctl command, with its ID. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/err.h"
#include "server/server_int.h"

static char *text(enum entry_kind kind, ProtobufCMessage *req, const char *user, uint64_t rev)
{
    struct entry e = {.kind = kind, .req = req, .auth_user = user, .auth_rev = rev};
    struct buf o = {0};
    server_request_text(&o, &e, 17012807269458415109ull);
    buf_append_byte(&o, 0);
    return (char *)o.data;
}

static void expect(char *got, const char *want)
{
    cr_expect_str_eq(got, want);
    free(got);
}

static ProtobufCBinaryData bytes(const char *s)
{
    return (ProtobufCBinaryData){strlen(s), (uint8_t *)s};
}

Test(applylog, put_and_delete)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = bytes("foo");
    p.value = bytes("bar");
    /* etcdctl put foo bar */
    expect(text(ENTRY_PUT, &p.base, NULL, 0),
           "header:<ID:17012807269458415109 > put:<key:\"foo\" value_size:3 >");
    /* etcdctl put --prev-kv foo "baz qux" */
    p.value = bytes("baz qux");
    p.prev_kv = 1;
    expect(text(ENTRY_PUT, &p.base, NULL, 0),
           "header:<ID:17012807269458415109 > put:<key:\"foo\" value_size:7 prev_kv:true >");
    /* with a lease, as a user */
    p.prev_kv = 0;
    p.value = bytes("v");
    p.key = bytes("k");
    p.lease = 7789435232603639306;
    expect(text(ENTRY_PUT, &p.base, "u1", 7),
           "header:<ID:17012807269458415109 username:\"u1\" auth_revision:7 > "
           "put:<key:\"k\" value_size:1 lease:7789435232603639306 >");
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = bytes("foo");
    expect(text(ENTRY_DELETE_RANGE, &d.base, NULL, 0),
           "header:<ID:17012807269458415109 > delete_range:<key:\"foo\" > ");
}

Test(applylog, escaping_of_keys)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = (ProtobufCBinaryData){6, (uint8_t *)"a\"\\\n\x01\xff"};
    expect(text(ENTRY_PUT, &p.base, NULL, 0),
           "header:<ID:17012807269458415109 > put:<key:\"a\\\"\\\\\\n\\001\\377\" >");
}

Test(applylog, txn)
{
    /* etcdctl txn: mod("foo") = "0", value("foo") = "abc"; put foo a, get
     * foo; del foo */
    Etcdserverpb__Compare c1 = ETCDSERVERPB__COMPARE__INIT, c2 = ETCDSERVERPB__COMPARE__INIT;
    c1.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
    c1.key = bytes("foo");
    c1.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
    c1.mod_revision = 0;
    c2.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
    c2.key = bytes("foo");
    c2.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    c2.value = bytes("abc");
    Etcdserverpb__Compare *cmp[] = {&c1, &c2};
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = bytes("foo");
    put.value = bytes("a");
    Etcdserverpb__RangeRequest get = ETCDSERVERPB__RANGE_REQUEST__INIT;
    get.key = bytes("foo");
    Etcdserverpb__DeleteRangeRequest del = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    del.key = bytes("foo");
    Etcdserverpb__RequestOp o1 = ETCDSERVERPB__REQUEST_OP__INIT,
                            o2 = ETCDSERVERPB__REQUEST_OP__INIT,
                            o3 = ETCDSERVERPB__REQUEST_OP__INIT;
    o1.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o1.request_put = &put;
    o2.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    o2.request_range = &get;
    o3.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    o3.request_delete_range = &del;
    Etcdserverpb__RequestOp *succ[] = {&o1, &o2}, *fail[] = {&o3};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 2;
    t.compare = cmp;
    t.n_success = 2;
    t.success = succ;
    t.n_failure = 1;
    t.failure = fail;
    expect(text(ENTRY_TXN, &t.base, NULL, 0),
           "header:<ID:17012807269458415109 > txn:<compare:<target:MOD key:\"foo\" "
           "mod_revision:0  target:VALUE key:\"foo\" value_size:3 > success:<request_put:<key:"
           "\"foo\" value_size:1 > request_range:<key:\"foo\" > > failure:<request_delete_range:"
           "<key:\"foo\" > >>");
}

Test(applylog, leases_compaction_auth)
{
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.ttl = 10;
    g.id = 0x6c19a212e8408e0a;
    expect(text(ENTRY_LEASE_GRANT, &g.base, NULL, 0),
           "header:<ID:17012807269458415109 > lease_grant:<ttl:10-second id:6c19a212e8408e0a>");
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = 0x1234;
    expect(text(ENTRY_LEASE_REVOKE, &r.base, NULL, 0),
           "header:<ID:17012807269458415109 > lease_revoke:<id:0000000000001234>");
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = 3;
    expect(text(ENTRY_COMPACT, &c.base, NULL, 0),
           "header:<ID:17012807269458415109 > compaction:<revision:3 > ");
    Etcdserverpb__AuthUserAddRequest u = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
    u.name = "u1";
    u.password = "secret";
    char *s = text(ENTRY_AUTH_USER_ADD, &u.base, NULL, 0);
    cr_expect(strstr(s, "secret") == NULL);
    expect(s, "header:<ID:17012807269458415109 > auth_user_add:<name:u1>");
    Etcdserverpb__AuthRoleAddRequest ra = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
    ra.name = "r1";
    expect(text(ENTRY_AUTH_ROLE_ADD, &ra.base, NULL, 0),
           "header:<ID:17012807269458415109 > auth_role_add:<name:\"r1\" > ");
    Etcdserverpb__AuthUserGrantRoleRequest gr = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
    gr.user = "u1";
    gr.role = "r1";
    expect(text(ENTRY_AUTH_USER_GRANT_ROLE, &gr.base, NULL, 0),
           "header:<ID:17012807269458415109 > auth_user_grant_role:<user:\"u1\" role:\"r1\" > ");
    Etcdserverpb__AuthEnableRequest en = ETCDSERVERPB__AUTH_ENABLE_REQUEST__INIT;
    expect(text(ENTRY_AUTH_ENABLE, &en.base, NULL, 0),
           "header:<ID:17012807269458415109 > auth_enable:<> ");
}

Test(applylog, etcd_error_texts)
{
    cr_expect_str_eq(server_etcd_err_text(QERR_PERMISSION_DENIED), "auth: permission denied");
    cr_expect_str_eq(server_etcd_err_text(QERR_LEASE_NOT_FOUND), "lease not found");
    cr_expect_str_eq(server_etcd_err_text(QERR_COMPACTED),
                     "mvcc: required revision has been compacted");
    cr_expect_str_eq(server_etcd_err_text(QERR_AUTH_FAILED),
                     "auth: authentication failed, invalid user ID or password");
    cr_expect_str_eq(server_etcd_err_text(QERR_NO_SPACE),
                     "etcdserver: mvcc: database space exceeded");
}
