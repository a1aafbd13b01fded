/* tests/zk/test_zk_tree.c: the pure helpers of server/zk_tree.c: ZooKeeper's
 * path rules (PathUtils.validatePath) and ACL checks (checkACL with the
 * world, digest, auth and ip schemes), zk_tree_stats on a real store, and
 * the figures kept as the tree changes (zk_figures) against it.
 * The rest of the store-facing parts are tested end to end by
 * tests/integration/test_zk.py against Apache ZooKeeper. */
#include <criterion/criterion.h>
#include <string.h>

#include "server/zk_tree.h"

static bool valid(const char *p)
{
    return zk_path_valid((const uint8_t *)p, strlen(p));
}

Test(zk_tree, paths)
{
    cr_assert(valid("/"));
    cr_assert(valid("/a"));
    cr_assert(valid("/a/b.c/..d/.e"));
    cr_assert_not(valid(""));
    cr_assert_not(valid("a"));
    cr_assert_not(valid("/a/"));
    cr_assert_not(valid("/a//b"));
    cr_assert_not(valid("/a/./b"));
    cr_assert_not(valid("/a/.."));
    cr_assert_not(valid("/a/."));
    cr_assert_not(valid("/a\x01"));
    cr_assert_not(valid("/a\x7f"));
    cr_assert_not(valid("/a\xc2\x85"), "C1 control U+0085");
    cr_assert_not(valid("/a\xef\xbf\xbf"), "U+FFFF");
    cr_assert_not(valid("/a\xee\x80\x80"), "private use U+E000");
    cr_assert(valid("/caf\xc3\xa9"), "U+00E9 is fine");
    const uint8_t nul[] = {'/', 'a', 0, 'b'};
    cr_assert_not(zk_path_valid(nul, sizeof(nul)));
    /* Apache ZooKeeper 3.8's answers to a create of each (tests/zk's
     * probe of the session: BADARGUMENTS or not) */
    static const struct {
        const char *path;
        bool ok;
    } zk38[] = {
        {"/\x80", false},
        {"/a\xc0\x80", false},
        {"/a\xc1\xbf", false},
        {"/a\xe0\x80\x80", false},
        {"/a\xe0\xa0\x80", true},
        {"/a\xed\x9f\xbf", true},
        {"/a\xed\xa0\x80", false},
        {"/a\xf0\x9f\x98\x80", false},
        {"/a\xf4\x8f\xbf\xbf", false},
        {"/a\xf5\x80\x80\x80", false},
        {"/a\xc2", false},
        {"/a\xe2\x82", false},
        {"/a\xc2\xa0", true},
        {"/a\xdf\xbf", true},
        {"/a\xef\xbf\xaf", true},
        {"/a\xef\xbf\xb0", false},
        {"/a\xff", false},
        {"/.\xc3\xa9", true},
        {"/\xc3\xa9.", true},
        {"/a\xe1\x80\x80", true},
    };
    for (size_t i = 0; i < sizeof(zk38) / sizeof(zk38[0]); i++)
        cr_assert_eq(valid(zk38[i].path), zk38[i].ok, "case %zu", i);
}

/* java_chars: what Java's new String(bytes, UTF_8) makes of |p|, as the
 * ZooKeeper server reads a path: UTF-16 code units, U+FFFD for each
 * malformed sequence (one or more; the rule refuses any) */
static size_t java_chars(const uint8_t *p, size_t n, uint16_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : (c & 0xf0) == 0xe0     ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1fu : len == 3 ? c & 0x0fu : c & 0x07u;
        bool ok = len > 0 && i + len <= n;
        for (size_t j = 1; ok && j < len; j++) {
            ok = (p[i + j] & 0xc0) == 0x80;
            cp = cp << 6 | (p[i + j] & 0x3fu);
        }
        if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
                   (len == 4 && (cp < 0x10000 || cp > 0x10ffff))))
            ok = false;
        if (!ok) {
            out[k++] = 0xfffd;
            i++;
        } else if (cp >= 0x10000) {
            out[k++] = (uint16_t)(0xd800 + ((cp - 0x10000) >> 10));
            out[k++] = (uint16_t)(0xdc00 + ((cp - 0x10000) & 0x3ff));
            i += len;
        } else {
            out[k++] = (uint16_t)cp;
            i += len;
        }
    }
    return k;
}

/* ref_path_valid: PathUtils.validatePath of ZooKeeper 3.8, as written
 * there (char by char over the Java string), on java_chars of the bytes:
 * what the random paths below hold the server's byte rule to */
static bool ref_path_valid(const uint8_t *p, size_t n)
{
    uint16_t ch[64];
    size_t len = java_chars(p, n, ch);
    if (len == 0 || ch[0] != '/')
        return false;
    if (len == 1)
        return true;
    if (ch[len - 1] == '/')
        return false;
    uint16_t lastc = '/';
    for (size_t i = 1; i < len; lastc = ch[i], i++) {
        uint16_t c = ch[i];
        if (c == 0)
            return false;
        else if (c == '/' && lastc == '/')
            return false;
        else if (c == '.' && lastc == '.') {
            if (ch[i - 2] == '/' && (i + 1 == len || ch[i + 1] == '/'))
                return false;
        } else if (c == '.') {
            if (ch[i - 1] == '/' && (i + 1 == len || ch[i + 1] == '/'))
                return false;
        } else if ((c > 0 && c <= 0x1f) || (c >= 0x7f && c <= 0x9f) ||
                   (c >= 0xd800 && c <= 0xf8ff) || c >= 0xfff0) {
            return false;
        }
    }
    return true;
}

Test(zk_tree, paths_random_against_the_rule)
{
    /* bytes each rule looks at, and bytes next to them */
    static const uint8_t alphabet[] = {'/',  '.',  'a',  '0',  '~',  ' ',  '-',  0,    0x1f, 0x7f,
                                       0x80, 0x90, 0x9f, 0xa0, 0xa3, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3,
                                       0xdf, 0xe0, 0xe1, 0xed, 0xee, 0xef, 0xf0, 0xf4, 0xf5, 0xff};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    size_t valid_seen = 0, invalid_seen = 0, multibyte_valid = 0;
    for (int k = 0; k < 400000; k++) {
        uint8_t p[12];
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = (size_t)(x % (sizeof(p) + 1));
        uint64_t r = x;
        for (size_t i = 0; i < n; i++) {
            if (i % 8 == 0) {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
            }
            p[i] = alphabet[(r >> (8 * (i % 8))) % sizeof(alphabet)];
        }
        if (n > 0 && (x >> 60) != 0)
            p[0] = '/'; /* most start as a path does */
        bool want = ref_path_valid(p, n);
        cr_assert_eq(zk_path_valid(p, n), want, "case %d (length %zu)", k, n);
        if (want) {
            valid_seen++;
            for (size_t i = 0; i < n; i++)
                if (p[i] >= 0x80) {
                    multibyte_valid++;
                    break;
                }
        } else {
            invalid_seen++;
        }
    }
    cr_assert_gt(valid_seen, 1000, "the random paths were nearly all refused: %zu valid",
                 valid_seen);
    cr_assert_gt(multibyte_valid, 100, "valid paths with a multi-byte character: %zu",
                 multibyte_valid);
    cr_assert_gt(invalid_seen, 1000);
}

#define B(s) {(const uint8_t *)(s), (int32_t)(sizeof(s) - 1)}

Test(zk_tree, acl_checks)
{
    struct zk_acl world[] = {{ZK_PERM_READ, {B("world"), B("anyone")}}};
    struct zk_acl digest[] = {{ZK_PERM_ALL, {B("digest"), B("user:2Om+GBbT2q/tS6pdvACZbbm7/1A=")}},
                              {ZK_PERM_READ, {B("ip"), B("10.1.0.0/16")}}};
    const char *none_ids[] = {"ip:127.0.0.1"};
    const char *user_ids[] = {"ip:127.0.0.1", "digest:user:2Om+GBbT2q/tS6pdvACZbbm7/1A="};
    const char *net_ids[] = {"ip:10.1.200.3"};
    struct zk_ids none = {none_ids, 1}, user = {user_ids, 2}, net = {net_ids, 1};
    cr_assert(zk_acl_permits(world, 1, ZK_PERM_READ, &none));
    cr_assert_not(zk_acl_permits(world, 1, ZK_PERM_WRITE, &none));
    cr_assert(zk_acl_permits(NULL, 0, ZK_PERM_ADMIN, &none), "no ACL: anyone");
    cr_assert_not(zk_acl_permits(digest, 2, ZK_PERM_READ, &none));
    cr_assert(zk_acl_permits(digest, 2, ZK_PERM_WRITE, &user));
    cr_assert(zk_acl_permits(digest, 2, ZK_PERM_READ, &net), "in 10.1.0.0/16");
    cr_assert_not(zk_acl_permits(digest, 2, ZK_PERM_WRITE, &net));
    const char *far_ids[] = {"ip:10.2.0.1"};
    struct zk_ids far = {far_ids, 1};
    cr_assert_not(zk_acl_permits(digest, 2, ZK_PERM_READ, &far));
    /* a client certificate's subject: the whole name, exactly */
    struct zk_acl x509[] = {{ZK_PERM_ALL, {B("x509"), B("CN=root,O=quorum")}}};
    const char *root_ids[] = {"ip:127.0.0.1", "x509:CN=root,O=quorum"};
    const char *cn_only_ids[] = {"ip:127.0.0.1", "x509:CN=root"};
    struct zk_ids root = {root_ids, 2}, cn_only = {cn_only_ids, 2};
    cr_assert(zk_acl_permits(x509, 1, ZK_PERM_WRITE, &root));
    cr_assert_not(zk_acl_permits(x509, 1, ZK_PERM_READ, &cn_only));
    cr_assert_not(zk_acl_permits(x509, 1, ZK_PERM_READ, &user));
}

/* ZooKeeper's ContainerManager.getCandidates, one node at a time */
Test(zk_tree, sweep_due)
{
    /* a container goes once it had a child and has none */
    cr_assert(zk_sweep_due(ZK_MODE_CONTAINER, 2, 0, 0, 0, 1000));
    cr_assert(!zk_sweep_due(ZK_MODE_CONTAINER, 0, 0, 0, 0, 1000), "never used: stays");
    cr_assert(!zk_sweep_due(ZK_MODE_CONTAINER, 1, 1, 0, 0, 1000), "a child: stays");
    /* a TTL node goes once unchanged for longer than its TTL, childless */
    cr_assert(zk_sweep_due(ZK_MODE_PERSISTENT_WITH_TTL, 0, 0, 1000, 500, 1501));
    cr_assert(!zk_sweep_due(ZK_MODE_PERSISTENT_WITH_TTL, 0, 0, 1000, 500, 1500), "not yet");
    cr_assert(zk_sweep_due(ZK_MODE_PERSISTENT_SEQUENTIAL_WITH_TTL, 3, 0, 1000, 500, 9999));
    cr_assert(!zk_sweep_due(ZK_MODE_PERSISTENT_WITH_TTL, 0, 2, 1000, 500, 9999), "children");
    cr_assert(!zk_sweep_due(ZK_MODE_PERSISTENT_WITH_TTL, 0, 0, 1000, 0, 9999), "TTL 0");
    /* other modes never */
    for (uint8_t m = ZK_MODE_PERSISTENT; m <= ZK_MODE_EPHEMERAL_SEQUENTIAL; m++)
        cr_assert(!zk_sweep_due(m, 5, 0, 0, 1, 9999));
}

/* what a ZooKeeper write counts against --quota-backend-bytes */
Test(zk_tree, write_cost)
{
    struct arena a = {0};
    struct buf b = {0};
    struct jute_out o = {&b, 0};
    /* create "/q" with 10 bytes, no ACL entries */
    struct zk_request_header h = {1, ZK_OP_CREATE};
    struct zk_create_req c = {
        {(const uint8_t *)"/q", 2}, {(const uint8_t *)"0123456789", 10}, {NULL, 0}, 0, 0};
    jute_encode(&zk_rec_request_header, &o, &h);
    jute_encode(&zk_rec_create_req, &o, &c);
    cr_assert_eq(zk_write_cost(b.data, b.len, &a), ZK_WRITE_OVERHEAD + b.len);
    /* delete and check cost nothing */
    buf_reset(&b);
    struct zk_path_version d = {{(const uint8_t *)"/q", 2}, -1};
    h.type = ZK_OP_DELETE;
    jute_encode(&zk_rec_request_header, &o, &h);
    jute_encode(&zk_rec_delete_req, &o, &d);
    cr_assert_eq(zk_write_cost(b.data, b.len, &a), 0);
    buf_reset(&b);
    h.type = ZK_OP_CHECK;
    jute_encode(&zk_rec_request_header, &o, &h);
    jute_encode(&zk_rec_check_version_req, &o, &d);
    cr_assert_eq(zk_write_cost(b.data, b.len, &a), 0);
    /* a multi: free with deletes only, counted with a setData in it */
    struct zk_multi_op ops[2] = {{.type = ZK_OP_DELETE}, {.type = ZK_OP_CHECK}};
    ops[0].u.pv = d;
    ops[1].u.pv = d;
    buf_reset(&b);
    h.type = ZK_OP_MULTI;
    jute_encode(&zk_rec_request_header, &o, &h);
    zk_multi_encode(&o, ops, 2);
    cr_assert_eq(o.err, 0);
    cr_assert_eq(zk_write_cost(b.data, b.len, &a), 0);
    ops[1].type = ZK_OP_SET_DATA;
    ops[1].u.set_data =
        (struct zk_set_data_req){{(const uint8_t *)"/q", 2}, {(const uint8_t *)"x", 1}, -1};
    buf_reset(&b);
    jute_encode(&zk_rec_request_header, &o, &h);
    zk_multi_encode(&o, ops, 2);
    cr_assert_eq(zk_write_cost(b.data, b.len, &a), ZK_WRITE_OVERHEAD + b.len);
    /* bytes that do not decode write nothing */
    cr_assert_eq(zk_write_cost((const uint8_t *)"\0\0", 2, &a), 0);
    buf_free(&b);
    arena_free(&a);
}

/* ---- zk_tree_stats: the four-letter words' figures, on a real store ---- */

#include "backend/backend.h"
#include "tmpdir.h"

/* a D record as zk_tree.c writes it (version 1): mode, mzxid, ctime,
 * mtime, version, aversion, owner, ttl, one ACL (world:anyone), data */
static size_t d_record(uint8_t *b, const char *data)
{
    size_t n = 0;
    b[n++] = 1;
    b[n++] = 0;
    memset(b + n, 0, 8 * 3 + 4 * 2 + 8 * 2);
    n += 8 * 3 + 4 * 2 + 8 * 2;
    const uint32_t ints[] = {1, 31}; /* one ACL; its perms: all */
    const char *strs[] = {"world", "anyone"};
    for (int i = 0; i < 2; i++) {
        uint32_t v = ints[i];
        for (int j = 3; j >= 0; j--)
            b[n++] = (uint8_t)(v >> (8 * j));
    }
    for (int s = 0; s < 2; s++) {
        uint32_t l = (uint32_t)strlen(strs[s]);
        for (int j = 3; j >= 0; j--)
            b[n++] = (uint8_t)(l >> (8 * j));
        memcpy(b + n, strs[s], l);
        n += l;
    }
    uint32_t l = (uint32_t)strlen(data);
    for (int j = 3; j >= 0; j--)
        b[n++] = (uint8_t)(l >> (8 * j));
    memcpy(b + n, data, l);
    return n + l;
}

static size_t node_key_of(uint8_t *k, unsigned depth, const char *path)
{
    k[0] = 0;
    k[1] = 'z';
    k[2] = 'k';
    k[3] = 'D';
    k[4] = 0;
    k[5] = (uint8_t)depth;
    memcpy(k + 6, path, strlen(path));
    return 6 + strlen(path);
}

Test(zk_tree, stats_count_the_tree)
{
    const char *dir = tmpdir_make();
    cr_assert_not_null(dir);
    backend *be;
    mvcc_store *kv;
    lessor *ls;
    struct backend_options o = {.dir = dir, .map_size = 64 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &kv), 0);
    cr_assert_eq(lessor_open(be, 1, &ls), 0);

    struct zk_tree_stats st;
    cr_assert_eq(zk_tree_stats(kv, ls, 0, &st), 0);
    cr_assert_eq(st.znodes, 2, "an empty tree: \"/\", counted twice as ZooKeeper does");
    cr_assert_eq(st.sessions, 0);
    cr_assert_eq(st.ephemerals, 0);
    cr_assert_eq(st.data_size, 1, "\"/\"'s path");

    char big[101];
    memset(big, 'x', 100);
    big[100] = '\0';
    uint8_t k[64], v[256], sk[ZK_SESSION_KEY_LEN];
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    int64_t granted;
    cr_assert_eq(lessor_grant(ls, 7, 60, 0, &granted), 0);
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    size_t kl = node_key_of(k, 0, "/"), vl = d_record(v, "rr");
    cr_assert_eq(mvcc_txn_put(t, k, kl, v, vl, 0, NULL, NULL), 0);
    kl = node_key_of(k, 1, "/a"), vl = d_record(v, "hello");
    cr_assert_eq(mvcc_txn_put(t, k, kl, v, vl, 0, NULL, NULL), 0);
    kl = node_key_of(k, 2, "/a/b"), vl = d_record(v, big);
    cr_assert_eq(mvcc_txn_put(t, k, kl, v, vl, 7, NULL, NULL), 0);
    cr_assert_eq(lessor_attach(ls, 7, k, kl), 0);
    /* an etcd key on the same lease is no ephemeral; a record quorum did
     * not write counts its path only */
    cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)"foo", 3, (const uint8_t *)"bar", 3, 7, NULL,
                              NULL),
                 0);
    cr_assert_eq(lessor_attach(ls, 7, (const uint8_t *)"foo", 3), 0);
    kl = node_key_of(k, 1, "/junk");
    cr_assert_eq(mvcc_txn_put(t, k, kl, (const uint8_t *)"?", 1, 0, NULL, NULL), 0);
    zk_session_key(7, sk);
    cr_assert_eq(mvcc_txn_put(t, sk, sizeof(sk), (const uint8_t *)"s", 1, 7, NULL, NULL), 0);
    mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(kv), 0);

    cr_assert_eq(zk_tree_stats(kv, ls, 0, &st), 0);
    cr_assert_eq(st.znodes, 5, "/a, /a/b, /junk and \"/\" twice: %lld", (long long)st.znodes);
    cr_assert_eq(st.sessions, 1);
    cr_assert_eq(st.ephemerals, 1);
    cr_assert_eq(st.data_size, (1 + 2) + (2 + 5) + (4 + 100) + 5, "%lld",
                 (long long)st.data_size);

    /* past its budget the data size is not known; the counts still are */
    cr_assert_eq(zk_tree_stats(kv, ls, 1, &st), 0);
    cr_assert_eq(st.data_size, -1);
    cr_assert_eq(st.znodes, 5);
    cr_assert_eq(st.ephemerals, 1);

    lessor_close(ls);
    mvcc_close(kv);
    backend_close(be);
    tmpdir_remove(dir);
}

/* ---- zk_figures: the figures kept as the tree changes ---- */

static void fig_observer(enum mvcc_event_type type, const struct mvcc_kv *kv,
                         const struct mvcc_kv *prev, void *arg)
{
    zk_figures_change(arg, (int)type, kv, prev);
}

/* one random change: a znode of 40 paths at three depths created, its
 * data changed or deleted, "/"'s data set, a session key put or deleted,
 * a record quorum did not write, or an etcd key (never counted) */
static void random_change(mvcc_store *kv, unsigned *seed)
{
    static const char *const paths[] = {"/a", "/b", "/c", "/d", "/a/x", "/a/y", "/b/x", "/c/zz",
                                        "/a/x/1", "/a/x/2"};
    uint8_t k[64], v[512], sk[ZK_SESSION_KEY_LEN];
    char data[200];
    unsigned r = (unsigned)rand_r(seed);
    size_t dl = (size_t)rand_r(seed) % sizeof(data);
    memset(data, 'd', dl);
    data[dl] = '\0';
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    int64_t del;
    const char *p = paths[(r >> 4) % 10];
    unsigned depth = 0;
    for (const char *c = p; *c; c++)
        depth += *c == '/';
    size_t kl = node_key_of(k, depth, p);
    switch (r % 8) {
    case 0:
    case 1:
    case 2: /* create or set */
        cr_assert_eq(mvcc_txn_put(t, k, kl, v, d_record(v, data), 0, NULL, NULL), 0);
        break;
    case 3:
    case 4:
        cr_assert_eq(mvcc_txn_delete_range(t, k, kl, NULL, 0, NULL, NULL, &del), 0);
        break;
    case 5:
        kl = node_key_of(k, 0, "/");
        cr_assert_eq(mvcc_txn_put(t, k, kl, v, d_record(v, data), 0, NULL, NULL), 0);
        break;
    case 6:
        zk_session_key((int64_t)((r >> 4) % 5) + 1, sk);
        if ((r >> 8) & 1)
            cr_assert_eq(mvcc_txn_put(t, sk, sizeof(sk), (const uint8_t *)"s", 1, 0, NULL, NULL), 0);
        else
            cr_assert_eq(mvcc_txn_delete_range(t, sk, sizeof(sk), NULL, 0, NULL, NULL, &del), 0);
        break;
    default:
        if ((r >> 8) & 1)
            cr_assert_eq(mvcc_txn_put(t, k, kl, (const uint8_t *)"junk", 4, 0, NULL, NULL), 0);
        else
            cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)"etcd", 4, (const uint8_t *)data, dl, 0,
                                      NULL, NULL),
                         0);
        break;
    }
    mvcc_txn_end(t);
}

static void assert_figures_match(mvcc_store *kv, const struct zk_figures *f, int step)
{
    struct zk_tree_stats want, got;
    cr_assert_eq(zk_tree_stats(kv, NULL, 0, &want), 0);
    cr_assert(zk_figures_stats(f, NULL, &got));
    cr_assert_eq(got.znodes, want.znodes, "step %d: znodes %lld, walked %lld", step,
                 (long long)got.znodes, (long long)want.znodes);
    cr_assert_eq(got.sessions, want.sessions, "step %d: sessions %lld, walked %lld", step,
                 (long long)got.sessions, (long long)want.sessions);
    cr_assert_eq(got.data_size, want.data_size, "step %d: data size %lld, walked %lld", step,
                 (long long)got.data_size, (long long)want.data_size);
}

Test(zk_tree, figures_follow_changes_during_and_after_their_count)
{
    const char *dir = tmpdir_make();
    cr_assert_not_null(dir);
    backend *be;
    mvcc_store *kv;
    struct backend_options o = {.dir = dir, .map_size = 64 << 20, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &kv), 0);
    struct zk_figures f = {0};
    mvcc_set_observer(kv, fig_observer, &f);
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    unsigned seed = 7;
    for (int i = 0; i < 60; i++)
        random_change(kv, &seed);
    struct zk_tree_stats st;
    cr_assert_not(zk_figures_stats(&f, NULL, &st), "not counted before the first step");
    for (int round = 0; round < 20; round++) {
        /* counted in steps of 1-3 keys, with changes between the steps
         * above, below and at the cursor */
        zk_figures_restart(&f);
        bool done = false;
        int steps = 0;
        while (!done) {
            cr_assert_eq(zk_figures_step(&f, kv, 1 + (size_t)(round % 3), &done), 0);
            for (int c = rand_r(&seed) % 3; c > 0; c--)
                random_change(kv, &seed);
            cr_assert_lt(++steps, 1000);
        }
        cr_assert_gt(steps, 2, "the count took several steps");
        assert_figures_match(kv, &f, round);
        for (int i = 0; i < 30; i++) {
            random_change(kv, &seed);
            assert_figures_match(kv, &f, round * 100 + i);
        }
        if (round == 10) {
            cr_assert_eq(mvcc_batch_commit(kv), 0);
            cr_assert_eq(mvcc_batch_begin(kv), 0);
        }
    }
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    zk_figures_free(&f);
    mvcc_close(kv);
    backend_close(be);
    tmpdir_remove(dir);
}
