/* server/zk_tree.c: znodes in the MVCC store (zk_tree.h, docs/zookeeper.md).
 *
 * A write entry is checked operation by operation against the store plus
 * an overlay of what the operations before it changed (by path), and only
 * when every one passes is the overlay written, in one MVCC transaction:
 * so multi is atomic, one revision, and one zxid; a refused write writes
 * nothing. The checks follow ZooKeeper 3.8's PrepRequestProcessor, in its
 * order (path, ACL, parent, permission, existence, version).
 */
#include "server/server_int.h"
#include "server/zk_service.h"
#include "server/zk_tree.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "zk.pb-c.h"

#define ZNODE_VERSION 1
/* the longest TTL (EphemeralType.TTL's 40 bits); containers and TTL
 * nodes show ephemeralOwner 0 to clients, as Apache ZooKeeper 3.8 does */
#define TTL_MAX 0xffffffffffull

static const struct jute_field acl_vec_field = {"acl", JUTE_VECTOR, JUTE_RECORD, 0, &zk_rec_acl};
static const struct jute_record acl_vec_rec = {"ACLs", sizeof(struct jute_vec), 1, &acl_vec_field};

/* ---- paths and keys ---- */

bool zk_path_valid(const uint8_t *p, size_t n)
{
    if (n == 0 || p[0] != '/')
        return false;
    if (n == 1)
        return true;
    if (p[n - 1] == '/')
        return false;
    for (size_t i = 1; i < n; i++) {
        uint8_t c = p[i];
        if (c >= '0' && c < 0x7f)
            continue; /* most of a path: none of the bytes looked at below */
        if (c < 0x20 || c == 0x7f)
            return false; /* NUL and the C0 controls, DEL */
        if (c == '/' && p[i - 1] == '/')
            return false;
        if (c == '.' && p[i - 1] == '/') {
            /* "." or ".." as a whole component */
            size_t j = i;
            while (j < n && p[j] == '.')
                j++;
            if ((j - i == 1 || j - i == 2) && (j == n || p[j] == '/'))
                return false;
        }
        if (c < 0x80)
            continue;
        /* The rule refuses U+0080..U+009F (C1 controls), U+D800..U+F8FF
         * (surrogates: every character past U+FFFF, which Java holds as a
         * pair; the private use area) and U+FFF0..U+FFFF (U+FFFD: what
         * Java makes of malformed UTF-8). What passes: a 2-byte sequence
         * of U+00A0..U+07FF or a 3-byte one of U+0800..U+D7FF or
         * U+F900..U+FFEF; the sequence is stepped over. */
        if (c >= 0xc2 && c <= 0xdf) {
            if (i + 1 >= n || (p[i + 1] & 0xc0) != 0x80 || (c == 0xc2 && p[i + 1] < 0xa0))
                return false;
            i += 1;
            continue;
        }
        if ((c & 0xf0) != 0xe0 || i + 2 >= n || (p[i + 1] & 0xc0) != 0x80 ||
            (p[i + 2] & 0xc0) != 0x80)
            return false;
        uint32_t cp =
            (uint32_t)(c & 0x0f) << 12 | (uint32_t)(p[i + 1] & 0x3f) << 6 | (p[i + 2] & 0x3f);
        if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xf8ff) || cp >= 0xfff0)
            return false;
        i += 2;
    }
    return true;
}

static unsigned depth_of(const uint8_t *p, size_t n)
{
    if (n <= 1)
        return 0;
    unsigned d = 0;
    for (size_t i = 0; i < n; i++)
        d += p[i] == '/';
    return d;
}

/* key: "\0zk" + kind + depth (u16 BE) + path */
static uint8_t *node_key(struct arena *a, char kind, const uint8_t *p, size_t n, size_t *len)
{
    uint8_t *k = arena_alloc(a, 6 + n);
    if (k == NULL)
        return NULL;
    unsigned d = depth_of(p, n);
    k[0] = 0;
    k[1] = 'z';
    k[2] = 'k';
    k[3] = (uint8_t)kind;
    k[4] = (uint8_t)(d >> 8);
    k[5] = (uint8_t)d;
    memcpy(k + 6, p, n);
    *len = 6 + n;
    return k;
}

/* the range of |p|'s direct children's D keys: [*start, *end) */
static int children_range(struct arena *a, const uint8_t *p, size_t n, uint8_t **start,
                          size_t *slen, uint8_t **end, size_t *elen)
{
    unsigned d = depth_of(p, n) + 1;
    size_t pl = n == 1 ? 0 : n; /* "/" has the prefix "/" itself */
    size_t len = 6 + pl + 1;
    uint8_t *s = arena_alloc(a, len), *e = arena_alloc(a, len);
    if (s == NULL || e == NULL)
        return -ENOMEM;
    s[0] = 0;
    s[1] = 'z';
    s[2] = 'k';
    s[3] = 'D';
    s[4] = (uint8_t)(d >> 8);
    s[5] = (uint8_t)d;
    memcpy(s + 6, p, pl);
    s[6 + pl] = '/';
    memcpy(e, s, len);
    e[len - 1] = '0'; /* the byte after '/' */
    *start = s;
    *end = e;
    *slen = *elen = len;
    return 0;
}

size_t zk_path_parent_len(const uint8_t *p, size_t n)
{
    size_t i = n;
    while (i > 0 && p[i - 1] != '/')
        i--;
    return i <= 1 ? 1 : i - 1;
}

/* ---- the stored records ---- */

struct znode {
    bool exists;
    uint8_t mode;
    int64_t czxid, mzxid, ctime, mtime, owner, ttl;
    int32_t version, aversion;
    struct jute_vec acl; /* struct zk_acl */
    struct jute_bytes data;
    int32_t cversion, num_children;
    int64_t pzxid;
    /* children ever created: the next sequential name. Apache ZooKeeper
     * 3.8 numbers sequential children by this count, not by cversion
     * (which deletes advance too): seen against it, see test_zk.py */
    int32_t seq;
    int64_t lease; /* the D key's lease (ephemerals: the session) */
    bool c_stored; /* the C key exists in the store */
};

static bool is_ephemeral(uint8_t mode)
{
    return mode == ZK_MODE_EPHEMERAL || mode == ZK_MODE_EPHEMERAL_SEQUENTIAL;
}
static bool is_ttl(uint8_t mode)
{
    return mode == ZK_MODE_PERSISTENT_WITH_TTL || mode == ZK_MODE_PERSISTENT_SEQUENTIAL_WITH_TTL;
}

static int encode_d(struct buf *b, const struct znode *z)
{
    struct jute_out o = {b, 0};
    uint8_t hdr[2] = {ZNODE_VERSION, z->mode};
    jute_put_raw(&o, hdr, 2);
    jute_put_long(&o, z->mzxid);
    jute_put_long(&o, z->ctime);
    jute_put_long(&o, z->mtime);
    jute_put_int(&o, z->version);
    jute_put_int(&o, z->aversion);
    jute_put_long(&o, z->owner);
    jute_put_long(&o, z->ttl);
    jute_encode(&acl_vec_rec, &o, &z->acl);
    jute_put_bytes(&o, z->data);
    return o.err;
}

static int decode_d(const uint8_t *v, size_t n, struct arena *a, struct znode *z)
{
    struct jute_in in;
    if (n < 2 || v[0] != ZNODE_VERSION)
        return QERR_CORRUPT;
    z->mode = v[1];
    jute_in_init(&in, v + 2, n - 2);
    z->mzxid = jute_get_long(&in);
    z->ctime = jute_get_long(&in);
    z->mtime = jute_get_long(&in);
    z->version = jute_get_int(&in);
    z->aversion = jute_get_int(&in);
    z->owner = jute_get_long(&in);
    z->ttl = jute_get_long(&in);
    jute_decode(&acl_vec_rec, &in, &z->acl, a);
    z->data = jute_get_bytes(&in);
    return in.err != 0 ? QERR_CORRUPT : 0;
}

static int encode_c(struct buf *b, const struct znode *z)
{
    struct jute_out o = {b, 0};
    uint8_t ver = ZNODE_VERSION;
    jute_put_raw(&o, &ver, 1);
    jute_put_int(&o, z->cversion);
    jute_put_long(&o, z->pzxid);
    jute_put_int(&o, z->num_children);
    jute_put_int(&o, z->seq);
    return o.err;
}

static int decode_c(const uint8_t *v, size_t n, struct znode *z)
{
    struct jute_in in;
    if (n < 1 || v[0] != ZNODE_VERSION)
        return QERR_CORRUPT;
    jute_in_init(&in, v + 1, n - 1);
    z->cversion = jute_get_int(&in);
    z->pzxid = jute_get_long(&in);
    z->num_children = jute_get_int(&in);
    z->seq = jute_get_int(&in);
    return in.err != 0 ? QERR_CORRUPT : 0;
}

static void stat_of(const struct znode *z, struct zk_stat *st)
{
    memset(st, 0, sizeof(*st));
    st->czxid = z->czxid;
    st->mzxid = z->mzxid;
    st->ctime = z->ctime;
    st->mtime = z->mtime;
    st->version = z->version;
    st->cversion = z->cversion;
    st->aversion = z->aversion;
    if (is_ephemeral(z->mode))
        st->ephemeral_owner = z->owner;
    st->data_length = z->data.len > 0 ? z->data.len : 0;
    st->num_children = z->num_children;
    st->pzxid = z->pzxid;
}

/* ---- reading the store (inside a write txn or a read) ---- */

struct zstore {
    mvcc_txn *t;
    mvcc_read *r;
};

static int zrange(struct zstore *st, const uint8_t *k, size_t kl, const uint8_t *e, size_t el,
                  mvcc_kv_fn fn, void *arg)
{
    if (st->t != NULL)
        return mvcc_txn_range(st->t, k, kl, e, el, NULL, fn, arg, NULL);
    return mvcc_read_range(st->r, k, kl, e, el, NULL, fn, arg, NULL);
}

struct kvcopy {
    struct arena *a;
    bool found;
    const uint8_t *v;
    size_t n;
    int64_t create_rev, lease;
};

static int copy_kv(const struct mvcc_kv *kv, void *arg)
{
    struct kvcopy *c = arg;
    c->found = true;
    c->v = arena_dup(c->a, kv->value, kv->value_len);
    c->n = kv->value_len;
    c->create_rev = kv->create_revision;
    c->lease = kv->lease;
    return c->v == NULL ? -ENOMEM : 0;
}

static int load(struct zstore *st, struct arena *a, const uint8_t *p, size_t n, struct znode *z)
{
    memset(z, 0, sizeof(*z));
    z->acl.n = -1;
    z->data.len = -1;
    size_t kl;
    int rv;
    {
        uint8_t *k = node_key(a, 'D', p, n, &kl);
        if (k == NULL)
            return -ENOMEM;
        struct kvcopy c = {a, false, NULL, 0, 0, 0};
        if ((rv = zrange(st, k, kl, NULL, 0, copy_kv, &c)) != 0)
            return rv;
        if (c.found && (rv = decode_d(c.v, c.n, a, z)) != 0)
            return rv;
        if (n == 1) {
            /* "/" always exists; its D key only once setData or setACL
             * wrote it, and its czxid stays 0 as ZooKeeper's; its data
             * is empty until set (ZooKeeper's is an empty array, not
             * null) */
            z->exists = true;
            if (!c.found)
                z->data = (struct jute_bytes){(const uint8_t *)"", 0};
        } else {
            if (!c.found)
                return 0;
            z->exists = true;
            z->czxid = c.create_rev;
            z->lease = c.lease;
        }
    }
    z->pzxid = z->czxid;
    uint8_t *k = node_key(a, 'C', p, n, &kl);
    if (k == NULL)
        return -ENOMEM;
    struct kvcopy c = {a, false, NULL, 0, 0, 0};
    if ((rv = zrange(st, k, kl, NULL, 0, copy_kv, &c)) != 0)
        return rv;
    if (c.found && (rv = decode_c(c.v, c.n, z)) != 0)
        return rv;
    z->c_stored = c.found;
    return 0;
}

/* ---- ACLs ---- */

/* world:anyone with every permission (the root's, the system nodes'), and
 * with READ only (/zookeeper/config's) */
static const struct zk_acl world_all = {
    ZK_PERM_ALL, {{(const uint8_t *)"world", 5}, {(const uint8_t *)"anyone", 6}}};
static const struct zk_acl world_read = {
    ZK_PERM_READ, {{(const uint8_t *)"world", 5}, {(const uint8_t *)"anyone", 6}}};

static bool bytes_eq(struct jute_bytes b, const char *s, size_t n)
{
    return b.len >= 0 && (size_t)b.len == n && (n == 0 || memcmp(b.p, s, n) == 0);
}

/* ip_id parses an ip ACL id as ZooKeeper 3.8's IPAuthenticationProvider
 * takes it: an IPv4 address, then optionally '/' and a decimal mask
 * length of 0 to 32 (Java's Integer.parseInt: an optional sign, digits).
 * false for anything else (ZooKeeper's isValid: INVALIDACL) */
static bool ip_id(struct jute_bytes acl_id, struct in_addr *addr, int *bits)
{
    char id[64];
    if (acl_id.len <= 0 || (size_t)acl_id.len >= sizeof(id))
        return false;
    memcpy(id, acl_id.p, (size_t)acl_id.len);
    id[acl_id.len] = '\0';
    *bits = 32;
    char *slash = strchr(id, '/');
    if (slash != NULL) {
        *slash = '\0';
        const char *d = slash + 1;
        bool neg = *d == '-';
        if (*d == '-' || *d == '+')
            d++;
        if (*d == '\0')
            return false;
        long v = 0;
        for (; *d != '\0'; d++) {
            if (*d < '0' || *d > '9' || v > 1000)
                return false;
            v = v * 10 + (*d - '0');
        }
        if (neg)
            v = -v;
        if (v < 0 || v > 32)
            return false;
        *bits = (int)v;
    }
    return inet_pton(AF_INET, id, addr) == 1;
}

/* ip ACL id "a.b.c.d[/bits]" against a client address; an id that does
 * not parse (none is taken since ip_id, one stored before matches no one)
 * matches no one */
static bool ip_match(struct jute_bytes acl_id, const char *client)
{
    struct in_addr a, c;
    int bits;
    if (!ip_id(acl_id, &a, &bits) || inet_pton(AF_INET, client, &c) != 1)
        return false;
    if (bits == 0)
        return true;
    uint32_t mask = bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits);
    return (ntohl(a.s_addr) & mask) == (ntohl(c.s_addr) & mask);
}

bool zk_acl_permits(const struct zk_acl *acl, int32_t n, int32_t perm, const struct zk_ids *who)
{
    if (acl == NULL || n <= 0)
        return true;
    for (int32_t i = 0; i < n; i++) {
        const struct zk_acl *e = &acl[i];
        if ((e->perms & perm) == 0)
            continue;
        if (bytes_eq(e->id.scheme, "world", 5) && bytes_eq(e->id.id, "anyone", 6))
            return true;
        for (size_t k = 0; who != NULL && k < who->n; k++) {
            const char *w = who->ids[k];
            const char *colon = strchr(w, ':');
            if (colon == NULL || !bytes_eq(e->id.scheme, w, (size_t)(colon - w)))
                continue;
            if (bytes_eq(e->id.scheme, "ip", 2)) {
                if (ip_match(e->id.id, colon + 1))
                    return true;
            } else if (bytes_eq(e->id.id, colon + 1, strlen(colon + 1))) {
                return true;
            }
        }
    }
    return false;
}

static bool acl_eq(const struct zk_acl *a, const struct zk_acl *b)
{
    return a->perms == b->perms && a->id.scheme.len == b->id.scheme.len &&
           a->id.id.len == b->id.id.len &&
           (a->id.scheme.len <= 0 ||
            memcmp(a->id.scheme.p, b->id.scheme.p, (size_t)a->id.scheme.len) == 0) &&
           (a->id.id.len <= 0 || memcmp(a->id.id.p, b->id.id.p, (size_t)a->id.id.len) == 0);
}

static uint64_t acl_hash(const struct zk_acl *e)
{
    uint64_t h = zk_hash(ZK_HASH_START, &e->perms, sizeof(e->perms));
    const struct jute_bytes *parts[2] = {&e->id.scheme, &e->id.id};
    for (int k = 0; k < 2; k++) {
        h = zk_hash(h, &parts[k]->len, sizeof(parts[k]->len));
        h = zk_hash(h, parts[k]->p, parts[k]->len > 0 ? (size_t)parts[k]->len : 0);
    }
    return h;
}

/* digest_id_valid: ZooKeeper's DigestAuthenticationProvider.isValid, two
 * fields once the id is split at ':' as Java's String.split does it
 * (trailing empty fields dropped): "user:hash", also "a:b:" and ":h",
 * not "user:" or "a::b" */
static bool digest_id_valid(struct jute_bytes id)
{
    if (id.len <= 0)
        return false;
    size_t n = (size_t)id.len;
    while (n > 0 && id.p[n - 1] == ':')
        n--; /* the trailing empty fields */
    size_t fields = 1;
    for (size_t j = 0; j < n; j++)
        fields += id.p[j] == ':';
    return n > 0 && fields == 2;
}

/* fixup_acl checks an ACL given by a client and replaces "auth" entries
 * with the connection's ids, as ZooKeeper's fixupACL: entries repeated in
 * the list count once; INVALIDACL for an empty list, an unknown scheme, a
 * malformed id, or "auth" with no ids. */
static int fixup_acl(struct jute_vec in, const struct zk_ids *who, struct arena *a,
                     struct jute_vec *out)
{
    if (in.n <= 0)
        return ZK_INVALIDACL;
    const struct zk_acl *src = in.v;
    size_t cap = (size_t)in.n * (1 + (who != NULL ? who->n : 0));
    struct zk_acl *dst = arena_alloc(a, sizeof(*dst) * cap);
    if (dst == NULL)
        return ZK_SYSTEMERROR;
    /* ZooKeeper's removeDuplicates, before the rest: an entry equal to an
     * earlier one is skipped. A hash of the entries seen (a list can hold
     * tens of thousands in a packet: no pairwise comparison at apply) */
    size_t hcap = 16;
    while (hcap < 2 * (size_t)in.n)
        hcap *= 2;
    const struct zk_acl **seen = arena_alloc(a, sizeof(*seen) * hcap);
    if (seen == NULL)
        return ZK_SYSTEMERROR;
    size_t k = 0;
    for (int32_t i = 0; i < in.n; i++) {
        const struct zk_acl *e = &src[i];
        size_t h = acl_hash(e) & (hcap - 1);
        bool dup = false;
        for (; seen[h] != NULL; h = (h + 1) & (hcap - 1))
            if (acl_eq(seen[h], e)) {
                dup = true;
                break;
            }
        if (dup)
            continue;
        seen[h] = e;
        if (bytes_eq(e->id.scheme, "world", 5)) {
            if (!bytes_eq(e->id.id, "anyone", 6))
                return ZK_INVALIDACL;
            dst[k++] = *e;
        } else if (bytes_eq(e->id.scheme, "auth", 4)) {
            size_t added = 0;
            for (size_t j = 0; who != NULL && j < who->n; j++) {
                const char *w = who->ids[j];
                const char *colon = strchr(w, ':');
                if (colon == NULL || strncmp(w, "ip:", 3) == 0)
                    continue; /* ip is not an authenticated provider */
                dst[k].perms = e->perms;
                dst[k].id.scheme = (struct jute_bytes){(const uint8_t *)w, (int32_t)(colon - w)};
                dst[k].id.id = (struct jute_bytes){(const uint8_t *)colon + 1,
                                                   (int32_t)strlen(colon + 1)};
                k++;
                added++;
            }
            if (added == 0)
                return ZK_INVALIDACL;
        } else if (bytes_eq(e->id.scheme, "digest", 6)) {
            if (!digest_id_valid(e->id.id))
                return ZK_INVALIDACL;
            dst[k++] = *e;
        } else if (bytes_eq(e->id.scheme, "x509", 4)) {
            /* a client certificate's subject (ZooKeeper's x509 provider) */
            if (e->id.id.len <= 0)
                return ZK_INVALIDACL;
            dst[k++] = *e;
        } else if (bytes_eq(e->id.scheme, "ip", 2)) {
            struct in_addr ia;
            int bits;
            if (!ip_id(e->id.id, &ia, &bits))
                return ZK_INVALIDACL; /* IPv4 only, as ZooKeeper 3.8's provider */
            dst[k++] = *e;
        } else {
            return ZK_INVALIDACL;
        }
    }
    out->v = dst;
    out->n = (int32_t)k;
    return 0;
}

/* ---- the overlay of a write entry ---- */

struct zover {
    struct zover *next;
    struct zover *hnext; /* the overlay's hash chain */
    const uint8_t *path;
    size_t n;
    struct znode z;
    bool d_dirty, c_dirty, deleted;
    bool c_stale;  /* a C key of an earlier node at this path may be stored */
    bool in_store; /* the node existed before this entry */
};

struct ztx {
    struct server *s;
    struct zstore st;
    struct arena *a;
    int64_t zxid, now, session;
    const struct zk_ids *who;
    struct zover *head, *tail;
    int storage_err; /* a read of the store failed: fatal */
    /* the overlay by path: a multi of many ops finds each node in O(1) */
    struct zover **hb;
    size_t hcap; /* a power of two */
    bool sweep;  /* the container sweep's own entry (session 0): deleteContainer */
    bool in_multi; /* the operations are a multi's */
    /* what each operation did, in order, for the watches (zk_tree.h) */
    struct zk_change_rec *ch;
    size_t n_ch, ch_cap;
};

/* find: |p|'s node in the overlay, NULL when no operation loaded it;
 * *bucket (when not NULL) gets its hash bucket */
static struct zover *find(struct ztx *x, const uint8_t *p, size_t n, size_t *bucket)
{
    size_t b = zk_hash(ZK_HASH_START, p, n) & (x->hcap - 1);
    if (bucket != NULL)
        *bucket = b;
    for (struct zover *o = x->hb[b]; o != NULL; o = o->hnext)
        if (o->n == n && memcmp(o->path, p, n) == 0)
            return o;
    return NULL;
}

/* changed notes what an operation did to |o|'s node, for the watches,
 * with the node's ACL and its parent's as they are now */
static void changed(struct ztx *x, enum zk_change c, const struct zover *o)
{
    if (x->n_ch == x->ch_cap) {
        size_t cap = x->ch_cap ? 2 * x->ch_cap : 8;
        struct zk_change_rec *ch = arena_alloc(x->a, sizeof(*ch) * cap);
        if (ch == NULL) {
            x->storage_err = -ENOMEM;
            return;
        }
        if (x->n_ch > 0)
            memcpy(ch, x->ch, sizeof(*ch) * x->n_ch);
        x->ch = ch;
        x->ch_cap = cap;
    }
    struct zk_change_rec *r = &x->ch[x->n_ch++];
    *r = (struct zk_change_rec){.c = c,
                                .path = o->path,
                                .n = o->n,
                                .acl = o->z.acl.v,
                                .n_acl = o->z.acl.n,
                                .parent_acl = NULL,
                                .n_parent_acl = ZK_ACL_UNKNOWN};
    if (c != ZK_CHANGE_DATA) {
        /* a create or delete loaded the parent first */
        const struct zover *parent = find(x, o->path, zk_path_parent_len(o->path, o->n), NULL);
        if (parent != NULL) {
            r->parent_acl = parent->z.acl.v;
            r->n_parent_acl = parent->z.acl.n;
        }
    }
}

/* ztx_index sizes the overlay's hash for about |ops| operations (each
 * touches at most three nodes) */
static int ztx_index(struct ztx *x, size_t ops)
{
    size_t cap = 16;
    while (cap < 4 * (ops + 2))
        cap *= 2;
    x->hb = arena_alloc(x->a, sizeof(*x->hb) * cap);
    if (x->hb == NULL)
        return -ENOMEM;
    x->hcap = cap;
    return 0;
}

static struct zover *get(struct ztx *x, const uint8_t *p, size_t n)
{
    size_t b;
    struct zover *found = find(x, p, n, &b);
    if (found != NULL)
        return found;
    struct zover *o = arena_alloc(x->a, sizeof(*o));
    if (o == NULL) {
        x->storage_err = -ENOMEM;
        return NULL;
    }
    o->path = arena_dup(x->a, p, n);
    o->n = n;
    int rv = load(&x->st, x->a, p, n, &o->z);
    if (rv == QERR_CORRUPT)
        return NULL; /* a record quorum did not write (an etcd client's raw
                        put under the prefix): this write fails (SYSTEMERROR)
                        on every member alike, nothing stops */
    if (rv != 0 || o->path == NULL) {
        x->storage_err = rv != 0 ? rv : -ENOMEM;
        return NULL;
    }
    o->in_store = o->z.exists;
    o->hnext = x->hb[b];
    x->hb[b] = o;
    if (x->tail != NULL)
        x->tail->next = o;
    else
        x->head = o;
    x->tail = o;
    return o;
}

static int op_create(struct ztx *x, int32_t type, const struct zk_create_req *r,
                     struct zk_multi_result *res)
{
    int32_t flags = r->flags;
    if (flags < 0 || flags > ZK_MODE_PERSISTENT_SEQUENTIAL_WITH_TTL)
        return ZK_BADARGUMENTS;
    bool seq = flags == ZK_MODE_PERSISTENT_SEQUENTIAL || flags == ZK_MODE_EPHEMERAL_SEQUENTIAL ||
               flags == ZK_MODE_PERSISTENT_SEQUENTIAL_WITH_TTL;
    bool ttl_mode = is_ttl((uint8_t)flags);
    /* ZooKeeper 3.8: a multi's create is made again from its flags
     * (Op.create), which alone say container or TTL, whatever the op's
     * type (TTL flags on another type than createTTL were refused with
     * the whole request: MARSHALLINGERROR); outside a multi
     * createContainer makes a container whatever its flags (which still
     * say sequential), and create or create2 with the container flag a
     * plain node */
    if (x->in_multi)
        type = ttl_mode                     ? ZK_OP_CREATE_TTL
               : flags == ZK_MODE_CONTAINER ? ZK_OP_CREATE_CONTAINER
                                            : ZK_OP_CREATE;
    uint8_t mode = type == ZK_OP_CREATE_CONTAINER ? ZK_MODE_CONTAINER
                   : flags == ZK_MODE_CONTAINER   ? ZK_MODE_PERSISTENT
                                                  : (uint8_t)flags;
    if (type == ZK_OP_CREATE_TTL && !ttl_mode)
        return ZK_BADARGUMENTS;
    if (ttl_mode && (type != ZK_OP_CREATE_TTL || r->ttl <= 0 || (uint64_t)r->ttl > TTL_MAX))
        return ZK_BADARGUMENTS;
    /* ZooKeeper's order: a path without '/' or with NUL, the ACL, the
     * parent (so "/a//b" is NONODE), the permission, then the whole path */
    if (r->path.len <= 0 || r->path.p[0] != '/' ||
        memchr(r->path.p, 0, (size_t)r->path.len) != NULL)
        return ZK_BADARGUMENTS;
    struct jute_vec acl;
    int err = fixup_acl(r->acl, x->who, x->a, &acl);
    if (err != 0)
        return err;
    size_t n = (size_t)r->path.len;
    size_t pl = zk_path_parent_len(r->path.p, n);
    struct zover *parent = get(x, r->path.p, pl);
    if (parent == NULL)
        return ZK_SYSTEMERROR;
    if (!parent->z.exists)
        return ZK_NONODE;
    const struct zk_acl *pacl = parent->z.acl.v;
    if (!zk_acl_permits(pacl, parent->z.acl.n, ZK_PERM_CREATE, x->who))
        return ZK_NOAUTH;
    const uint8_t *path = r->path.p;
    if (seq) {
        uint8_t *np = arena_alloc(x->a, n + 12);
        if (np == NULL)
            return ZK_SYSTEMERROR;
        memcpy(np, r->path.p, n);
        n += (size_t)snprintf((char *)np + n, 12, "%010d", parent->z.seq);
        path = np;
    }
    if (!zk_path_valid(path, n))
        return ZK_BADARGUMENTS;
    if (n == 1)
        return ZK_NODEEXISTS; /* "/" */
    struct zover *o = get(x, path, n);
    if (o == NULL)
        return ZK_SYSTEMERROR;
    if (o->z.exists)
        return ZK_NODEEXISTS;
    if (is_ephemeral(parent->z.mode))
        return ZK_NOCHILDRENFOREPHEMERALS;
    if (is_ephemeral(mode)) {
        if (x->session == 0 || !lessor_exists(x->s->leases, x->session))
            return ZK_SESSIONEXPIRED;
    }
    struct znode *z = &o->z;
    o->c_stale = o->c_stale || z->c_stored;
    memset(z, 0, sizeof(*z));
    z->exists = true;
    z->mode = mode;
    z->czxid = z->mzxid = z->pzxid = x->zxid;
    z->ctime = z->mtime = x->now;
    z->owner = is_ephemeral(mode) ? x->session : 0;
    z->lease = z->owner;
    z->ttl = ttl_mode ? r->ttl : 0;
    z->acl = acl;
    z->data = r->data; /* null stays null, as ZooKeeper keeps it */
    o->d_dirty = o->c_dirty = true;
    o->deleted = false;
    parent->z.cversion++;
    parent->z.seq++;
    parent->z.num_children++;
    parent->z.pzxid = x->zxid;
    parent->c_dirty = true;
    changed(x, ZK_CHANGE_CREATED, o);
    res->type = type == ZK_OP_CREATE ? ZK_OP_CREATE : ZK_OP_CREATE2;
    res->path = (struct jute_bytes){path, (int32_t)n};
    stat_of(z, &res->stat);
    return 0;
}

bool zk_sweep_due(uint8_t mode, int32_t cversion, int32_t num_children, int64_t mtime, int64_t ttl,
                  int64_t now_ms)
{
    if (num_children > 0)
        return false;
    if (mode == ZK_MODE_CONTAINER)
        return cversion > 0; /* a new container waits for its first child */
    if (is_ttl(mode))
        return ttl > 0 && now_ms - mtime > ttl;
    return false;
}

/* zk_path_special: ZooKeeper's DataTree.isSpecialPath, the paths no
 * delete may take: "/", /zookeeper, /zookeeper/quota, /zookeeper/config */
static bool zk_path_special(const uint8_t *p, size_t n)
{
    static const char *const special[] = {"/", "/zookeeper", "/zookeeper/quota",
                                          "/zookeeper/config"};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        if (n == strlen(special[i]) && memcmp(p, special[i], n) == 0)
            return true;
    return false;
}

/* op_delete: delete, or (|sweep|) the container sweep's deleteContainer,
 * which deletes only a node that is still due (a concurrent child create
 * or setData wins: BADVERSION, NOTEMPTY) and checks no ACL, as
 * ZooKeeper's PrepRequestProcessor does for the ContainerManager */
static int op_delete(struct ztx *x, const struct zk_path_version *r, bool sweep)
{
    /* ZooKeeper 3.8's order: no validatePath (a malformed path is simply
     * not there: NONODE), the special paths, the parent, the parent's
     * DELETE permission, then the node, its version, its children */
    if (r->path.len <= 0 || r->path.p[0] != '/' ||
        memchr(r->path.p, 0, (size_t)r->path.len) != NULL)
        return ZK_BADARGUMENTS;
    size_t n = (size_t)r->path.len;
    if (zk_path_special(r->path.p, n))
        return ZK_BADARGUMENTS; /* "/" and /zookeeper's nodes cannot go */
    struct zover *parent = get(x, r->path.p, zk_path_parent_len(r->path.p, n));
    if (parent == NULL)
        return ZK_SYSTEMERROR;
    if (!parent->z.exists)
        return ZK_NONODE;
    if (!sweep && !zk_acl_permits(parent->z.acl.v, parent->z.acl.n, ZK_PERM_DELETE, x->who))
        return ZK_NOAUTH;
    struct zover *o = get(x, r->path.p, n);
    if (o == NULL)
        return ZK_SYSTEMERROR;
    if (!o->z.exists)
        return ZK_NONODE;
    if (r->version != -1 && r->version != o->z.version)
        return ZK_BADVERSION;
    if (o->z.num_children > 0)
        return ZK_NOTEMPTY;
    if (sweep &&
        !zk_sweep_due(o->z.mode, o->z.cversion, o->z.num_children, o->z.mtime, o->z.ttl, x->now))
        return ZK_BADVERSION;
    o->c_stale = o->c_stale || o->z.c_stored;
    o->z.exists = false;
    o->deleted = true;
    o->d_dirty = o->c_dirty = false;
    parent->z.cversion++;
    parent->z.num_children--;
    parent->z.pzxid = x->zxid;
    parent->c_dirty = true;
    changed(x, ZK_CHANGE_DELETED, o);
    return 0;
}

/* existing_at finds the node at |path|, a path already checked (NONODE
 * when there is none) */
static int existing_at(struct ztx *x, const struct jute_bytes *path, struct zover **out)
{
    struct zover *o = get(x, path->p, (size_t)path->len);
    if (o == NULL)
        return ZK_SYSTEMERROR;
    if (!o->z.exists)
        return ZK_NONODE;
    *out = o;
    return 0;
}

/* existing finds the node an operation on |path| acts on, as ZooKeeper
 * checks it: a valid path (BADARGUMENTS), then the node (NONODE) */
static int existing(struct ztx *x, const struct jute_bytes *path, struct zover **out)
{
    if (path->len <= 0 || !zk_path_valid(path->p, (size_t)path->len))
        return ZK_BADARGUMENTS;
    return existing_at(x, path, out);
}

static int op_set_data(struct ztx *x, const struct zk_set_data_req *r, struct zk_stat *st)
{
    struct zover *o;
    int err = existing(x, &r->path, &o);
    if (err != 0)
        return err;
    if (!zk_acl_permits(o->z.acl.v, o->z.acl.n, ZK_PERM_WRITE, x->who))
        return ZK_NOAUTH;
    if (r->version != -1 && r->version != o->z.version)
        return ZK_BADVERSION;
    o->z.version++;
    o->z.mzxid = x->zxid;
    o->z.mtime = x->now;
    o->z.data = r->data;
    o->d_dirty = true;
    changed(x, ZK_CHANGE_DATA, o);
    stat_of(&o->z, st);
    return 0;
}

static int op_check(struct ztx *x, const struct zk_path_version *r)
{
    struct zover *o;
    int err = existing(x, &r->path, &o);
    if (err != 0)
        return err;
    if (!zk_acl_permits(o->z.acl.v, o->z.acl.n, ZK_PERM_READ, x->who))
        return ZK_NOAUTH; /* ZooKeeper's check asks READ */
    if (r->version != -1 && r->version != o->z.version)
        return ZK_BADVERSION;
    return 0;
}

static int op_set_acl(struct ztx *x, const struct zk_set_acl_req *r, struct zk_stat *st)
{
    /* ZooKeeper's order: the path, the new ACL, the node, ADMIN, version */
    if (r->path.len <= 0 || !zk_path_valid(r->path.p, (size_t)r->path.len))
        return ZK_BADARGUMENTS;
    struct jute_vec acl;
    int err = fixup_acl(r->acl, x->who, x->a, &acl);
    if (err != 0)
        return err;
    struct zover *o;
    if ((err = existing_at(x, &r->path, &o)) != 0)
        return err;
    if (!zk_acl_permits(o->z.acl.v, o->z.acl.n, ZK_PERM_ADMIN, x->who))
        return ZK_NOAUTH;
    if (r->version != -1 && r->version != o->z.aversion)
        return ZK_BADVERSION;
    o->z.aversion++;
    o->z.acl = acl;
    o->d_dirty = true;
    stat_of(&o->z, st);
    return 0;
}

/* ensure_system_nodes: /zookeeper, /zookeeper/config and /zookeeper/quota
 * exist as in ZooKeeper; made before the first session's record
 * (server_zk_session_begin), or by the first ZooKeeper write of a store
 * that has sessions from before that */
static void ensure_system_nodes(struct ztx *x)
{
    static const char *const paths[] = {"/zookeeper", "/zookeeper/config", "/zookeeper/quota"};
    /* once the store had them, a write does not look again (the face
     * refuses to delete /zookeeper, etcd writes to the prefix are refused);
     * before, only the D key of /zookeeper is looked up (a count, nothing
     * copied or decoded) */
    if (x->s->zk_sys_nodes)
        return;
    size_t kl;
    uint8_t *k = node_key(x->a, 'D', (const uint8_t *)paths[0], strlen(paths[0]), &kl);
    struct mvcc_range_opts count = {.count_only = true};
    struct mvcc_range_result found = {0};
    if (k == NULL) {
        x->storage_err = -ENOMEM;
        return;
    }
    int rv = mvcc_txn_range(x->st.t, k, kl, NULL, 0, &count, NULL, NULL, &found);
    if (rv != 0) {
        x->storage_err = rv;
        return;
    }
    if (found.count > 0) {
        x->s->zk_sys_nodes = true;
        return;
    }
    struct zover *sys = get(x, (const uint8_t *)paths[0], strlen(paths[0]));
    if (sys == NULL || sys->z.exists)
        return;
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(paths[i]);
        struct zover *o = get(x, (const uint8_t *)paths[i], n);
        struct zover *parent =
            get(x, (const uint8_t *)paths[i], zk_path_parent_len((const uint8_t *)paths[i], n));
        if (o == NULL || parent == NULL)
            return;
        struct znode *z = &o->z;
        memset(z, 0, sizeof(*z));
        z->exists = true;
        z->czxid = z->mzxid = z->pzxid = x->zxid;
        bool config = i == 1;
        /* /zookeeper/config: anyone may read it, no one change it
         * (ZooKeeper 3.8's, which also shows its aversion as -1) */
        z->acl = (struct jute_vec){(void *)(config ? &world_read : &world_all), 1};
        z->aversion = config ? -1 : 0;
        z->data = (struct jute_bytes){NULL, 0};
        o->d_dirty = o->c_dirty = true;
        parent->z.num_children++; /* as ZooKeeper's: no cversion change */
        parent->c_dirty = true;
        changed(x, ZK_CHANGE_CREATED, o);
    }
}

/* one write operation: 0 or its ZooKeeper error; |res| gets its result */
static int run_op(struct ztx *x, int32_t type, const void *body, struct zk_multi_result *res)
{
    memset(res, 0, sizeof(*res));
    res->type = type;
    switch (type) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
    case ZK_OP_CREATE_TTL:
        return op_create(x, type, body, res);
    case ZK_OP_DELETE:
        return op_delete(x, body, false);
    case ZK_OP_DELETE_CONTAINER:
        return x->sweep ? op_delete(x, body, true) : ZK_BADARGUMENTS; /* a client's */
    case ZK_OP_SET_DATA:
        return op_set_data(x, body, &res->stat);
    case ZK_OP_CHECK:
        return op_check(x, body);
    case ZK_OP_SET_ACL:
        return op_set_acl(x, body, &res->stat);
    default:
        return ZK_UNIMPLEMENTED;
    }
}

/* the apply's scratch buffers (struct server zk_body, zk_rec) keep at most
 * this much between writes */
#define ZK_SCRATCH_KEEP 65536

static int write_overlay(struct ztx *x)
{
    struct buf *b = &x->s->zk_rec; /* kept from write to write */
    int rv = 0;
    for (struct zover *o = x->head; o != NULL && rv == 0; o = o->next) {
        size_t kl;
        if (o->deleted) {
            int64_t del;
            uint8_t *k = node_key(x->a, 'D', o->path, o->n, &kl);
            if (k == NULL)
                rv = -ENOMEM;
            if (rv == 0)
                rv = mvcc_txn_delete_range(x->st.t, k, kl, NULL, 0, NULL, NULL, &del);
            k = rv == 0 ? node_key(x->a, 'C', o->path, o->n, &kl) : NULL;
            if (rv == 0 && k == NULL)
                rv = -ENOMEM;
            if (rv == 0)
                rv = mvcc_txn_delete_range(x->st.t, k, kl, NULL, 0, NULL, NULL, &del);
            continue;
        }
        if (o->d_dirty) {
            buf_reset(b);
            uint8_t *k = node_key(x->a, 'D', o->path, o->n, &kl);
            rv = k == NULL ? -ENOMEM : encode_d(b, &o->z);
            if (rv == 0 && o->in_store && o->z.czxid == x->zxid) {
                /* deleted and created again in one multi: a new key, so
                 * its create revision (czxid) is this one */
                int64_t del;
                rv = mvcc_txn_delete_range(x->st.t, k, kl, NULL, 0, NULL, NULL, &del);
            }
            if (rv == 0)
                rv = mvcc_txn_put(x->st.t, k, kl, b->data, b->len, o->z.lease, NULL, NULL);
        }
        /* a new node's child side is implied (0, czxid, 0) until a child
         * comes: written only for nodes that had a child change */
        if (rv == 0 && o->c_dirty &&
            (o->c_stale || !(o->d_dirty && o->z.num_children == 0 && o->z.cversion == 0 &&
                             o->z.seq == 0 && o->z.pzxid == o->z.czxid))) {
            buf_reset(b);
            uint8_t *k = node_key(x->a, 'C', o->path, o->n, &kl);
            rv = k == NULL ? -ENOMEM : encode_c(b, &o->z);
            if (rv == 0)
                rv = mvcc_txn_put(x->st.t, k, kl, b->data, b->len, 0, NULL, NULL);
        }
    }
    if (b->cap > ZK_SCRATCH_KEEP)
        buf_free(b); /* a big node's record is not kept */
    return rv;
}

/* write_overlay_own writes the overlay with the store's change observer
 * leaving the watches to the write's own list (zk_tree.h) */
static int write_overlay_own(struct ztx *x)
{
    x->s->zk_own_changes = true;
    int rv = write_overlay(x);
    x->s->zk_own_changes = false;
    return rv;
}

/* write_changes writes the overlay, then fires the watches of what each
 * operation did, in order (zk_tree.h, struct zk_change_rec) */
static int write_changes(struct ztx *x)
{
    int rv = write_overlay_own(x);
    if (rv == 0 && x->storage_err == 0)
        server_zk_fire(x->s, x->ch, x->n_ch);
    return rv;
}

void zk_session_key(int64_t id, uint8_t k[ZK_SESSION_KEY_LEN])
{
    k[0] = 0;
    k[1] = 'z';
    k[2] = 'k';
    k[3] = 'S';
    for (int i = 0; i < 8; i++)
        k[4 + i] = (uint8_t)((uint64_t)id >> (56 - 8 * i));
}

uint64_t zk_session_owner(const uint8_t *v, size_t n)
{
    if (n != ZK_SESSION_V2_LEN || v[0] != 2)
        return 0;
    uint64_t m = 0;
    for (int i = 0; i < 8; i++)
        m = m << 8 | v[ZK_SESSION_V1_LEN + i];
    return m;
}

/* session_moved: the write's session is connected to another member than
 * the one that proposed it (ZooKeeper's checkSession against the owner) */
static int session_moved(struct ztx *x, uint64_t member, bool *moved)
{
    *moved = false;
    if (member == 0 || x->session == 0)
        return 0;
    uint8_t k[ZK_SESSION_KEY_LEN];
    zk_session_key(x->session, k);
    uint32_t sub;
    int64_t main = mvcc_txn_key_rev(x->st.t, k, sizeof(k), &sub);
    if (main == 0)
        return 0; /* no record: no owner */
    /* every write of a session reads its record: once per revision */
    struct zk_owner_memo *m = &x->s->zk_owners[(uint64_t)x->session % 16];
    if (m->session != x->session || m->main != main || m->sub != sub) {
        struct kvcopy c = {x->a, false, NULL, 0, 0, 0};
        int rv = zrange(&x->st, k, sizeof(k), NULL, 0, copy_kv, &c);
        if (rv != 0)
            return rv;
        *m = (struct zk_owner_memo){x->session, main, sub,
                                    c.found ? zk_session_owner(c.v, c.n) : 0};
    }
    *moved = m->owner != 0 && m->owner != member;
    return 0;
}

int server_zk_apply(struct server *s, struct entry *e)
{
    const Quorumzk__Write *w = (const Quorumzk__Write *)e->req;
    struct arena *a = &s->arena;
    struct zk_request req;
    struct buf *out = &e->out;
    buf_reset(out);
    struct jute_out o = {out, 0};
    const char **ids = NULL;
    if (w->n_ids > 0 && (ids = arena_alloc(a, sizeof(*ids) * w->n_ids)) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < w->n_ids; i++)
        ids[i] = w->ids[i];
    struct zk_ids who = {ids, w->n_ids};
    int dr = zk_request_decode(w->request.data, w->request.len, a, &req);
    if (dr != 0) {
        /* every member decodes the same bytes the same way: an answer */
        jute_put_long(&o, mvcc_rev(s->kv));
        jute_put_int(&o, ZK_MARSHALLINGERROR);
        return o.err;
    }
    mvcc_txn *t;
    int rv = mvcc_txn_begin(s->kv, &t);
    if (rv != 0)
        return rv;
    struct ztx x = {.s = s,
                    .st = {t, NULL},
                    .a = a,
                    .zxid = mvcc_rev(s->kv) + 1,
                    .now = w->now_ms,
                    .session = w->session,
                    .who = &who,
                    .sweep = w->session == 0 && req.h.type == ZK_OP_DELETE_CONTAINER};
    if ((rv = ztx_index(&x, req.n_multi + 8)) != 0) {
        mvcc_txn_end(t);
        return rv;
    }
    int32_t err = 0;
    struct buf *body = &s->zk_body; /* kept from write to write */
    buf_reset(body);
    struct jute_out bo = {body, 0};
    if (buf_reserve(body, 128) != 0 || buf_reserve(out, 160) != 0) {
        mvcc_txn_end(t);
        return -ENOMEM;
    }
    int32_t type = req.h.type;
    bool moved = false;
    if ((rv = session_moved(&x, w->member, &moved)) != 0) {
        mvcc_txn_end(t);
        return rv;
    }
    if (!moved)
        ensure_system_nodes(&x);
    /* ZooKeeper refuses a multi with reads, or with TTL flags on a create
     * that is not a createTTL, as a whole (its MultiOperationRecord makes
     * each create again from the flags, and those cannot carry a TTL) */
    bool unreadable_multi = false;
    for (size_t i = 0; type == ZK_OP_MULTI && i < req.n_multi; i++) {
        int32_t t = req.multi[i].type;
        unreadable_multi |= t == ZK_OP_GET_DATA || t == ZK_OP_GET_CHILDREN;
        if (t == ZK_OP_CREATE || t == ZK_OP_CREATE2 || t == ZK_OP_CREATE_CONTAINER) {
            int32_t f = req.multi[i].u.create.flags;
            unreadable_multi |=
                f == ZK_MODE_PERSISTENT_WITH_TTL || f == ZK_MODE_PERSISTENT_SEQUENTIAL_WITH_TTL;
        }
    }
    if (moved) {
        err = ZK_SESSIONMOVED; /* the member closes the connection (zk_service.c) */
    } else if (unreadable_multi) {
        err = ZK_MARSHALLINGERROR;
    } else if (type == ZK_OP_MULTI) {
        x.in_multi = true;
        size_t n = req.n_multi;
        struct zk_multi_result *res = n ? arena_alloc(a, sizeof(*res) * n) : NULL;
        if (n > 0 && res == NULL) {
            mvcc_txn_end(t);
            return -ENOMEM;
        }
        size_t failed = n;
        for (size_t i = 0; i < n; i++) {
            int32_t ferr = run_op(&x, req.multi[i].type, &req.multi[i].u, &res[i]);
            if (x.storage_err != 0)
                break;
            if (ferr != 0) {
                failed = i;
                err = ferr;
                break;
            }
        }
        if (x.storage_err == 0 && failed < n) {
            /* ZooKeeper's answer to a failed multi: the ops before the
             * failure OK, the failed one its error, the rest
             * RUNTIMEINCONSISTENCY; nothing is written */
            for (size_t i = 0; i < n; i++) {
                memset(&res[i], 0, sizeof(res[i]));
                res[i].type = ZK_OP_ERROR;
                res[i].err = i < failed ? 0 : i == failed ? err : ZK_RUNTIMEINCONSISTENCY;
            }
        } else if (x.storage_err == 0) {
            rv = write_changes(&x);
        }
        if (x.storage_err == 0)
            zk_multi_resp_encode(&bo, res, n);
        err = 0; /* the errors are in the MultiResponse (ZooKeeper 3.8) */
    } else if (type == ZK_OP_SYNC) {
        jute_encode(&zk_rec_sync_resp, &bo, &req.u.path);
    } else {
        struct zk_multi_result r1;
        err = run_op(&x, type, &req.u, &r1);
        if (x.storage_err == 0 && err == 0) {
            rv = write_changes(&x);
            switch (type) {
            case ZK_OP_CREATE:
                jute_put_bytes(&bo, r1.path);
                break;
            case ZK_OP_CREATE2:
            case ZK_OP_CREATE_CONTAINER:
            case ZK_OP_CREATE_TTL:
                jute_put_bytes(&bo, r1.path);
                jute_encode(&zk_rec_stat, &bo, &r1.stat);
                break;
            case ZK_OP_SET_DATA:
            case ZK_OP_SET_ACL:
                jute_encode(&zk_rec_stat, &bo, &r1.stat);
                break;
            default:
                break;
            }
        }
    }
    int64_t rev = mvcc_txn_end(t);
    if (x.storage_err != 0)
        return x.storage_err;
    if (rv != 0)
        return rv;
    jute_put_long(&o, rev);
    jute_put_int(&o, err);
    if (err == 0 && body->len > 0)
        jute_put_raw(&o, body->data, body->len);
    int berr = bo.err;
    if (body->cap > ZK_SCRATCH_KEEP)
        buf_free(body); /* a big answer's room is not kept */
    return o.err != 0 ? o.err : berr;
}

/* ---- reads ---- */

bool zk_is_read(int32_t type)
{
    switch (type) {
    case ZK_OP_EXISTS:
    case ZK_OP_GET_DATA:
    case ZK_OP_GET_CHILDREN:
    case ZK_OP_GET_CHILDREN2:
    case ZK_OP_GET_ACL:
    case ZK_OP_GET_ALL_CHILDREN_NUMBER:
    case ZK_OP_GET_EPHEMERALS:
    case ZK_OP_MULTI_READ:
        return true;
    default:
        return false;
    }
}

struct names {
    struct arena *a;
    size_t skip; /* the key prefix before the child's name */
    struct jute_bytes *v;
    int32_t n, cap;
};

static int add_name(const struct mvcc_kv *kv, void *arg)
{
    struct names *nm = arg;
    if (nm->n == nm->cap) {
        int32_t cap = nm->cap ? nm->cap * 2 : 16;
        struct jute_bytes *v = arena_alloc(nm->a, sizeof(*v) * (size_t)cap);
        if (v == NULL)
            return -ENOMEM;
        if (nm->n > 0)
            memcpy(v, nm->v, sizeof(*v) * (size_t)nm->n);
        nm->v = v;
        nm->cap = cap;
    }
    const uint8_t *p = arena_dup(nm->a, kv->key + nm->skip, kv->key_len - nm->skip);
    if (p == NULL)
        return -ENOMEM;
    nm->v[nm->n++] = (struct jute_bytes){p, (int32_t)(kv->key_len - nm->skip)};
    return 0;
}

static int children(struct zstore *st, struct arena *a, const uint8_t *p, size_t n,
                    struct jute_vec *out)
{
    uint8_t *s, *e;
    size_t sl, el;
    int rv = children_range(a, p, n, &s, &sl, &e, &el);
    if (rv != 0)
        return rv;
    struct names nm = {a, sl, NULL, 0, 0};
    rv = zrange(st, s, sl, e, el, add_name, &nm);
    out->v = nm.v;
    out->n = nm.n;
    return rv;
}

struct counter {
    int64_t n;
};

static int count_kv(const struct mvcc_kv *kv, void *arg)
{
    (void)kv;
    ((struct counter *)arg)->n++;
    return 0;
}

/* walk_subtree counts every D key below |p| (depth by depth, each level
 * one range of keys starting with p + "/", until a level is empty) */
static int walk_subtree(struct zstore *st, struct arena *a, const uint8_t *p, size_t n,
                        struct counter *c)
{
    size_t pl = n == 1 ? 0 : n;
    for (unsigned d = depth_of(p, n) + 1; d < 65536; d++) {
        uint8_t *s = arena_alloc(a, 7 + pl), *e = arena_alloc(a, 7 + pl);
        if (s == NULL || e == NULL)
            return -ENOMEM;
        s[0] = 0;
        s[1] = 'z';
        s[2] = 'k';
        s[3] = 'D';
        s[4] = (uint8_t)(d >> 8);
        s[5] = (uint8_t)d;
        memcpy(s + 6, p, pl);
        s[6 + pl] = '/';
        memcpy(e, s, 7 + pl);
        e[6 + pl] = '0';
        struct mvcc_range_result r = {0};
        int rv = st->t != NULL ? mvcc_txn_range(st->t, s, 7 + pl, e, 7 + pl, NULL, count_kv, c, &r)
                               : mvcc_read_range(st->r, s, 7 + pl, e, 7 + pl, NULL, count_kv, c,
                                                 &r);
        if (rv != 0)
            return rv;
        if (r.count == 0)
            return 0;
    }
    return 0;
}

struct keys;
static void collect_key(const uint8_t *key, size_t len, void *arg);
static int key_cmp(const void *a, const void *b);

/* getEphemerals: the session's D keys (the lessor knows its lease's keys:
 * no walk of the store), those under the prefix, in byte order */
static int ephemerals(lessor *leases, struct arena *a, int64_t session, const uint8_t *prefix,
                      size_t pl, struct jute_vec *out);

static int read_one(struct zstore *st, struct arena *a, lessor *leases, int32_t type,
                    const void *body, int64_t session, const struct zk_ids *who,
                    struct jute_out *o, int32_t *err, struct zk_multi_result *mres)
{
    struct znode z;
    int rv;
    *err = 0;
    if (type == ZK_OP_GET_EPHEMERALS) {
        const struct zk_path *r = body;
        const uint8_t *prefix = r->path.len > 0 ? r->path.p : (const uint8_t *)"/";
        size_t pl = r->path.len > 0 ? (size_t)r->path.len : 1;
        /* ZooKeeper lists them all when the prefix, trimmed as Java's
         * String.trim does (bytes up to ' '), is empty or "/" */
        size_t b = 0, e = pl;
        while (b < e && prefix[b] <= ' ')
            b++;
        while (e > b && prefix[e - 1] <= ' ')
            e--;
        if (e == b || (e - b == 1 && prefix[b] == '/')) {
            prefix = (const uint8_t *)"/";
            pl = 1;
        }
        struct zk_children_resp resp = {0};
        if ((rv = ephemerals(leases, a, session, prefix, pl, &resp.children)) != 0)
            return rv;
        jute_encode(&zk_rec_get_ephemerals_resp, o, &resp);
        return 0;
    }
    /* every other read names one path first; ZooKeeper looks a read's
     * path up as it is (only a NUL is BADARGUMENTS): a malformed one names
     * no node, a null one fails the lookup (MARSHALLINGERROR), and "" is
     * the root (its DataTree holds the root under "" too) */
    const struct jute_bytes *path = body; /* the first field of each request */
    if (path->len < 0) {
        *err = ZK_MARSHALLINGERROR;
        return 0;
    }
    const uint8_t *p = path->len > 0 ? path->p : (const uint8_t *)"/";
    size_t n = path->len > 0 ? (size_t)path->len : 1;
    if (memchr(p, 0, n) != NULL) {
        *err = ZK_BADARGUMENTS;
        return 0;
    }
    if (!zk_path_valid(p, n)) {
        *err = ZK_NONODE;
        return 0;
    }
    if ((rv = load(st, a, p, n, &z)) != 0)
        return rv;
    if (!z.exists) {
        *err = ZK_NONODE;
        return 0;
    }
    struct zk_stat stat;
    stat_of(&z, &stat);
    switch (type) {
    case ZK_OP_EXISTS: {
        jute_encode(&zk_rec_stat, o, &stat);
        return 0;
    }
    case ZK_OP_GET_DATA: {
        if (!zk_acl_permits(z.acl.v, z.acl.n, ZK_PERM_READ, who)) {
            *err = ZK_NOAUTH;
            return 0;
        }
        struct zk_get_data_resp r = {z.data, stat};
        if (mres != NULL) {
            mres->data = r.data;
            mres->stat = stat;
        }
        jute_encode(&zk_rec_get_data_resp, o, &r);
        return 0;
    }
    case ZK_OP_GET_CHILDREN:
    case ZK_OP_GET_CHILDREN2: {
        if (!zk_acl_permits(z.acl.v, z.acl.n, ZK_PERM_READ, who)) {
            *err = ZK_NOAUTH;
            return 0;
        }
        struct zk_children_resp r = {.stat = stat};
        if ((rv = children(st, a, p, n, &r.children)) != 0)
            return rv;
        if (mres != NULL)
            mres->children = r.children;
        jute_encode(type == ZK_OP_GET_CHILDREN ? &zk_rec_get_children_resp
                                               : &zk_rec_get_children2_resp,
                    o, &r);
        return 0;
    }
    case ZK_OP_GET_ACL: {
        /* READ or ADMIN, as ZooKeeper 3.8 asks */
        if (!zk_acl_permits(z.acl.v, z.acl.n, ZK_PERM_READ | ZK_PERM_ADMIN, who)) {
            *err = ZK_NOAUTH;
            return 0;
        }
        struct zk_get_acl_resp r = {z.acl, stat};
        if (z.acl.n < 0) {
            /* "/": world:anyone, all permissions, as ZooKeeper's root */
            r.acl = (struct jute_vec){(void *)&world_all, 1};
        } else if (!zk_acl_permits(z.acl.v, z.acl.n, ZK_PERM_ADMIN, who)) {
            /* without ADMIN a digest id shows its user only, "user:x"
             * (ZooKeeper's FinalRequestProcessor), not the password's hash */
            struct zk_acl *m = arena_alloc(a, sizeof(*m) * (size_t)z.acl.n);
            if (m == NULL)
                return -ENOMEM;
            const struct zk_acl *in = z.acl.v;
            for (int32_t i = 0; i < z.acl.n; i++) {
                m[i] = in[i];
                const uint8_t *colon = in[i].id.id.len > 0
                                           ? memchr(in[i].id.id.p, ':', (size_t)in[i].id.id.len)
                                           : NULL;
                if (!bytes_eq(in[i].id.scheme, "digest", 6) || colon == NULL)
                    continue;
                size_t ul = (size_t)(colon - in[i].id.id.p);
                uint8_t *id = arena_alloc(a, ul + 2);
                if (id == NULL)
                    return -ENOMEM;
                memcpy(id, in[i].id.id.p, ul);
                memcpy(id + ul, ":x", 2);
                m[i].id.id = (struct jute_bytes){id, (int32_t)(ul + 2)};
            }
            r.acl = (struct jute_vec){m, z.acl.n};
        }
        jute_encode(&zk_rec_get_acl_resp, o, &r);
        return 0;
    }
    case ZK_OP_GET_ALL_CHILDREN_NUMBER: {
        if (!zk_acl_permits(z.acl.v, z.acl.n, ZK_PERM_READ, who)) {
            *err = ZK_NOAUTH; /* after NONODE, as ZooKeeper's */
            return 0;
        }
        struct counter c = {0};
        if ((rv = walk_subtree(st, a, p, n, &c)) != 0)
            return rv;
        /* ZooKeeper counts the keys below "" + "/": "/" itself, the
         * root's other key, is one of them */
        struct zk_int r = {(int32_t)c.n + (path->len == 0)};
        jute_encode(&zk_rec_get_all_children_number_resp, o, &r);
        return 0;
    }
    default:
        *err = ZK_UNIMPLEMENTED;
        return 0;
    }
}

/* read_with is zk_read on a read already begun (ended by the caller) */
static int read_with(mvcc_read *r, lessor *leases, const struct zk_request *req, int64_t session,
                     const struct zk_ids *who, struct arena *a, struct buf *out)
{
    int rv = 0;
    struct zstore st = {NULL, r};
    struct jute_out o = {out, 0};
    bool writes_in_read = false;
    for (size_t i = 0; req->h.type == ZK_OP_MULTI_READ && i < req->n_multi; i++)
        writes_in_read |= req->multi[i].type != ZK_OP_GET_DATA &&
                          req->multi[i].type != ZK_OP_GET_CHILDREN;
    if (writes_in_read) {
        /* as ZooKeeper answers it, with an empty MultiResponse */
        jute_put_int(&o, ZK_MARSHALLINGERROR);
        zk_multi_resp_encode(&o, NULL, 0);
    } else if (req->h.type == ZK_OP_MULTI_READ) {
        size_t n = req->n_multi;
        struct zk_multi_result *res = n ? arena_alloc(a, sizeof(*res) * n) : NULL;
        if (n > 0 && res == NULL)
            return -ENOMEM;
        struct buf scratch = {0};
        for (size_t i = 0; i < n && rv == 0; i++) {
            struct jute_out so = {&scratch, 0};
            buf_reset(&scratch);
            int32_t err = 0;
            memset(&res[i], 0, sizeof(res[i]));
            int32_t t = req->multi[i].type;
            if (t != ZK_OP_GET_DATA && t != ZK_OP_GET_CHILDREN) {
                err = ZK_BADARGUMENTS;
            } else {
                rv = read_one(&st, a, leases, t, &req->multi[i].u, session, who, &so, &err,
                              &res[i]);
            }
            res[i].type = err != 0 ? ZK_OP_ERROR : t;
            res[i].err = err;
        }
        buf_free(&scratch);
        jute_put_int(&o, 0);
        if (rv == 0)
            zk_multi_resp_encode(&o, res, n);
    } else {
        /* the record goes straight after err, which is patched in after:
         * no buffer of its own, no copy */
        int32_t err = 0;
        size_t at = out->len;
        jute_put_int(&o, 0);
        rv = read_one(&st, a, leases, req->h.type, &req->u, session, who, &o, &err, NULL);
        if (o.err == 0 && (rv != 0 || err != 0)) {
            out->len = at + 4;
            uint32_t u = (uint32_t)err;
            out->data[at] = (uint8_t)(u >> 24);
            out->data[at + 1] = (uint8_t)(u >> 16);
            out->data[at + 2] = (uint8_t)(u >> 8);
            out->data[at + 3] = (uint8_t)u;
        }
    }
    if (rv == 0 && o.err != 0)
        rv = o.err;
    return rv;
}

int zk_read(mvcc_store *kv, lessor *leases, const struct zk_request *req, int64_t session,
            const struct zk_ids *who, struct arena *a, struct buf *out)
{
    mvcc_read *r;
    int rv = mvcc_read_begin(kv, &r);
    if (rv != 0)
        return rv;
    rv = read_with(r, leases, req, session, who, a, out);
    mvcc_read_end(r);
    return rv;
}

bool zk_read_shareable(int32_t type)
{
    return type == ZK_OP_EXISTS || type == ZK_OP_GET_DATA || type == ZK_OP_GET_CHILDREN ||
           type == ZK_OP_GET_CHILDREN2;
}

int zk_read_shared(mvcc_store *kv, const struct zk_request *req, const struct zk_ids *who,
                   struct arena *a, struct buf *out, int32_t *err)
{
    if (!zk_read_shareable(req->h.type) || req->u.pw.watch)
        return 0;
    mvcc_read *r;
    if (mvcc_read_begin_shared(kv, 0, &r) != 0)
        return 0; /* not now (uncommitted changes, a write under way): the core reads */
    size_t at = out->len;
    struct jute_out o = {out, 0};
    jute_put_int(&o, req->h.xid);
    jute_put_long(&o, mvcc_read_rev(r));
    int rv = o.err;
    if (rv == 0)
        rv = read_with(r, NULL, req, 0, who, a, out);
    mvcc_read_end(r);
    if (rv != 0) {
        out->len = at;
        return rv;
    }
    if (out->len < at + 16) { /* xid, zxid and err at least */
        out->len = at;
        return -EINVAL;
    }
    const uint8_t *e = out->data + at + 12;
    *err = (int32_t)((uint32_t)e[0] << 24 | (uint32_t)e[1] << 16 | (uint32_t)e[2] << 8 | e[3]);
    return 1;
}

int zk_node_info(mvcc_store *kv, const uint8_t *path, size_t n, struct arena *a, bool *exists,
                 int64_t *mzxid, int64_t *pzxid)
{
    mvcc_read *r;
    int rv = mvcc_read_begin(kv, &r);
    if (rv != 0)
        return rv;
    struct zstore st = {NULL, r};
    struct znode z;
    rv = load(&st, a, path, n, &z);
    mvcc_read_end(r);
    if (rv != 0)
        return rv;
    *exists = z.exists;
    *mzxid = z.mzxid;
    *pzxid = z.pzxid;
    return 0;
}

/* ---- the tree's figures (four-letter words) ---- */

/* data_size_kv adds a node's path and data lengths (a record it cannot
 * read adds its path only); |a| holds one record's ACL at a time */
/* d_data_len: the data length in a D record (0 for no data or a record
 * quorum did not write, whose path alone counts, as zk_tree_stats'),
 * read past the head and the ACL without copying them */
static int64_t d_data_len(const uint8_t *v, size_t n)
{
    enum { HEAD = 2 + 8 * 3 + 4 * 2 + 8 * 2 };
    if (n < HEAD || v[0] != ZNODE_VERSION)
        return 0;
    struct jute_in in;
    jute_in_init(&in, v + HEAD, n - HEAD);
    int32_t acls = jute_get_int(&in);
    for (int32_t i = 0; i < acls && in.err == 0; i++) {
        (void)jute_get_int(&in);   /* perms */
        (void)jute_get_bytes(&in); /* scheme */
        (void)jute_get_bytes(&in); /* id */
    }
    struct jute_bytes data = jute_get_bytes(&in);
    return in.err != 0 || data.len < 0 ? 0 : data.len;
}

struct size_walk {
    int64_t sum;
};

static int data_size_kv(const struct mvcc_kv *kv, void *arg)
{
    struct size_walk *w = arg;
    if (kv->key_len < 6)
        return 0;
    w->sum += (int64_t)(kv->key_len - 6) + d_data_len(kv->value, kv->value_len);
    return 0;
}

static void count_zk_key(const uint8_t *key, size_t len, void *arg)
{
    if (len > 6 && key[0] == 0 && key[1] == 'z' && key[2] == 'k' && key[3] == 'D')
        ++*(int64_t *)arg;
}

/* ephemerals: the keys of ZooKeeper D keys attached to leases (memory) */
static int count_ephemerals(lessor *leases, int64_t *out)
{
    *out = 0;
    if (leases == NULL)
        return 0;
    size_t n = lessor_ids(leases, NULL, 0);
    int64_t *ids = n > 0 ? malloc(sizeof(*ids) * n) : NULL;
    if (n > 0 && ids == NULL)
        return -ENOMEM;
    n = lessor_ids(leases, ids, n);
    for (size_t i = 0; i < n; i++)
        lessor_keys(leases, ids[i], count_zk_key, out);
    free(ids);
    return 0;
}

int zk_tree_stats(mvcc_store *kv, lessor *leases, int64_t budget, struct zk_tree_stats *out)
{
    /* D keys of depth >= 1 (every node but "/"), and S keys */
    static const uint8_t d_from[] = {0, 'z', 'k', 'D', 0, 1}, d_to[] = {0, 'z', 'k', 'E'};
    static const uint8_t s_from[] = {0, 'z', 'k', 'S'}, s_to[] = {0, 'z', 'k', 'T'};
    static const uint8_t root[] = {0, 'z', 'k', 'D', 0, 0, '/'};
    memset(out, 0, sizeof(*out));
    mvcc_read *r;
    int rv = mvcc_read_begin(kv, &r);
    if (rv != 0)
        return rv;
    struct mvcc_range_opts count = {.count_only = true};
    struct mvcc_range_result res = {0};
    rv = mvcc_read_range(r, d_from, sizeof(d_from), d_to, sizeof(d_to), &count, NULL, NULL, &res);
    out->znodes = res.count + 2;
    if (rv == 0)
        rv = mvcc_read_range(r, s_from, sizeof(s_from), s_to, sizeof(s_to), &count, NULL, NULL,
                             &res);
    out->sessions = res.count;
    if (rv == 0) {
        /* "/": its path (1) and its data once its D key exists */
        struct size_walk w = {0};
        struct mvcc_range_opts walk = {.budget = budget};
        rv = mvcc_read_range(r, root, sizeof(root), NULL, 0, NULL, data_size_kv, &w, NULL);
        if (w.sum == 0)
            w.sum = 1;
        if (rv == 0)
            rv = mvcc_read_range(r, d_from, sizeof(d_from), d_to, sizeof(d_to), &walk,
                                 data_size_kv, &w, NULL);
        out->data_size = rv == 0 ? w.sum : -1;
        if (rv == -E2BIG)
            rv = 0;
    }
    mvcc_read_end(r);
    if (rv != 0)
        return rv;
    return count_ephemerals(leases, &out->ephemerals);
}

/* ---- the figures kept as the tree changes ---- */

enum fig_kind { FIG_NONE, FIG_NODE, FIG_ROOT, FIG_SESSION };

static enum fig_kind fig_kind(const uint8_t *k, size_t n)
{
    if (n < 5 || k[0] != 0 || k[1] != 'z' || k[2] != 'k')
        return FIG_NONE;
    if (k[3] == 'S')
        return zk_is_session_key(k, n) ? FIG_SESSION : FIG_NONE;
    if (k[3] != 'D' || n < 7)
        return FIG_NONE;
    return n == 7 && k[4] == 0 && k[5] == 0 ? FIG_ROOT : FIG_NODE;
}

/* fig_add counts (|sign| 1) or uncounts (-1) a key that exists */
static void fig_add(struct zk_figures *f, const uint8_t *k, size_t kl, const uint8_t *v,
                    size_t vl, int sign)
{
    switch (fig_kind(k, kl)) {
    case FIG_SESSION:
        f->sessions += sign;
        break;
    case FIG_ROOT:
        f->root_d = sign > 0; /* "/" is never deleted: only its data changes */
        f->data_size += sign * (1 + d_data_len(v, vl));
        break;
    case FIG_NODE:
        f->nodes += sign;
        f->data_size += sign * ((int64_t)kl - 6 + d_data_len(v, vl));
        break;
    default:
        break;
    }
}

void zk_figures_restart(struct zk_figures *f)
{
    buf_reset(&f->cursor);
    f->counted = false;
    f->nodes = f->sessions = f->data_size = 0;
    f->root_d = false;
}

void zk_figures_free(struct zk_figures *f)
{
    buf_free(&f->cursor);
}

void zk_figures_change(struct zk_figures *f, int type, const struct mvcc_kv *kv,
                       const struct mvcc_kv *prev)
{
    if (fig_kind(kv->key, kv->key_len) == FIG_NONE)
        return;
    /* a key the count has not reached yet is counted as it is then */
    if (!f->counted &&
        (f->cursor.len == 0 ||
         bytes_compare(kv->key, kv->key_len, f->cursor.data, f->cursor.len) >= 0))
        return;
    if (prev != NULL)
        fig_add(f, prev->key, prev->key_len, prev->value, prev->value_len, -1);
    if (type != MVCC_EVENT_DELETE)
        fig_add(f, kv->key, kv->key_len, kv->value, kv->value_len, 1);
}

struct fig_visit {
    struct zk_figures *f;
    size_t seen, max;
    struct buf next; /* where the next step starts: just after the last key */
};

#define FIG_FULL 1
static int fig_kv(const struct mvcc_kv *kv, void *arg)
{
    struct fig_visit *v = arg;
    fig_add(v->f, kv->key, kv->key_len, kv->value, kv->value_len, 1);
    if (++v->seen < v->max)
        return 0;
    if (buf_append(&v->next, kv->key, kv->key_len) != 0 || buf_append(&v->next, "", 1) != 0)
        return -ENOMEM;
    return FIG_FULL;
}

int zk_figures_step(struct zk_figures *f, mvcc_store *kv, size_t max_keys, bool *done)
{
    /* D keys, then S keys (nothing else lies between them) */
    static const uint8_t first[4] = {0, 'z', 'k', 'D'}, end[4] = {0, 'z', 'k', 'T'};
    *done = f->counted;
    if (f->counted)
        return 0;
    if (f->cursor.len == 0 && buf_append(&f->cursor, first, sizeof(first)) != 0)
        return -ENOMEM;
    struct fig_visit v = {f, 0, max_keys > 0 ? max_keys : 1, {0}};
    mvcc_read *r;
    int rv = mvcc_read_begin(kv, &r);
    if (rv == 0) {
        rv = mvcc_read_range(r, f->cursor.data, f->cursor.len, end, sizeof(end), NULL, fig_kv, &v,
                             NULL);
        if (rv == FIG_FULL)
            rv = 0;
        mvcc_read_end(r);
    }
    if (rv != 0) {
        buf_free(&v.next);
        zk_figures_restart(f);
        return rv;
    }
    buf_reset(&f->cursor);
    if (v.seen < v.max) {
        f->counted = true;
        *done = true;
    } else {
        struct buf old = f->cursor;
        f->cursor = v.next; /* keys below it are counted */
        v.next = old;
    }
    buf_free(&v.next);
    return 0;
}

bool zk_figures_stats(const struct zk_figures *f, lessor *leases, struct zk_tree_stats *out)
{
    if (!f->counted)
        return false;
    int64_t eph = 0;
    if (count_ephemerals(leases, &eph) != 0)
        eph = -1;
    out->znodes = f->nodes + 2; /* "/" twice, as ZooKeeper's DataTree */
    out->sessions = f->sessions;
    out->ephemerals = eph;
    out->data_size = f->data_size + (f->root_d ? 0 : 1);
    return true;
}

static int64_t mzxid_of(const uint8_t *v, size_t n)
{
    if (n < 10 || v[0] != ZNODE_VERSION)
        return -1;
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | v[2 + i];
    return (int64_t)x;
}

enum zk_change zk_tree_change(int type, const struct mvcc_kv *kv, const struct mvcc_kv *prev,
                              const uint8_t **path, size_t *n)
{
    if (kv->key_len < 7 || kv->key[0] != 0 || kv->key[1] != 'z' || kv->key[2] != 'k' ||
        kv->key[3] != 'D')
        return ZK_CHANGE_NONE;
    *path = kv->key + 6;
    *n = kv->key_len - 6;
    if (*n == 1) /* "/" is never created or deleted: its D key is data only */
        return type == MVCC_EVENT_DELETE ? ZK_CHANGE_NONE
               : prev == NULL || mzxid_of(kv->value, kv->value_len) !=
                                     mzxid_of(prev->value, prev->value_len)
                   ? ZK_CHANGE_DATA
                   : ZK_CHANGE_NONE;
    if (type == MVCC_EVENT_DELETE)
        return ZK_CHANGE_DELETED;
    if (prev == NULL || kv->create_revision == kv->mod_revision)
        return ZK_CHANGE_CREATED;
    return mzxid_of(kv->value, kv->value_len) != mzxid_of(prev->value, prev->value_len)
               ? ZK_CHANGE_DATA
               : ZK_CHANGE_NONE;
}

struct keys {
    struct arena *a;
    struct jute_bytes *v;
    size_t n, cap;
    int err;
};

static void collect_key(const uint8_t *key, size_t len, void *arg)
{
    struct keys *k = arg;
    if (k->err != 0 || len < 4 || key[0] != 0 || key[1] != 'z' || key[2] != 'k')
        return;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 8;
        struct jute_bytes *v = arena_alloc(k->a, sizeof(*v) * cap);
        if (v == NULL) {
            k->err = -ENOMEM;
            return;
        }
        if (k->n > 0)
            memcpy(v, k->v, sizeof(*v) * k->n);
        k->v = v;
        k->cap = cap;
    }
    const uint8_t *p = arena_dup(k->a, key, len);
    if (p == NULL) {
        k->err = -ENOMEM;
        return;
    }
    k->v[k->n++] = (struct jute_bytes){p, (int32_t)len};
}

static int key_cmp(const void *a, const void *b)
{
    const struct jute_bytes *x = a, *y = b;
    return bytes_compare(x->p, (size_t)x->len, y->p, (size_t)y->len);
}

int server_zk_session_begin(struct server *s, const uint8_t *key, size_t len, int64_t lease)
{
    /* the Put that follows fails without its lease: nothing before it */
    if (s->zk_sys_nodes || !zk_is_session_key(key, len) || s->leases == NULL ||
        !lessor_exists(s->leases, lease))
        return 0;
    mvcc_txn *t;
    int rv = mvcc_txn_begin(s->kv, &t);
    if (rv != 0)
        return rv;
    struct ztx x = {.s = s, .st = {t, NULL}, .a = &s->arena, .zxid = mvcc_rev(s->kv) + 1};
    if ((rv = ztx_index(&x, 8)) == 0) {
        ensure_system_nodes(&x);
        if (x.storage_err == 0 && x.n_ch > 0)
            rv = write_changes(&x);
    }
    mvcc_txn_end(t);
    return x.storage_err != 0 ? x.storage_err : rv;
}

int server_zk_session_end(struct server *s, int64_t lease)
{
    if (s->leases == NULL || !lessor_exists(s->leases, lease))
        return 0;
    struct arena *a = &s->arena;
    struct keys k = {a, NULL, 0, 0, 0};
    lessor_keys(s->leases, lease, collect_key, &k);
    if (k.err != 0)
        return k.err;
    bool any = false;
    for (size_t i = 0; i < k.n; i++)
        any |= k.v[i].len > 6 && k.v[i].p[3] == 'D';
    if (!any)
        return 0; /* no ephemerals: the revoke alone is the same thing */
    /* byte order: every member deletes in the same order (sub-revisions) */
    qsort(k.v, k.n, sizeof(*k.v), key_cmp);
    mvcc_txn *t;
    int rv = mvcc_txn_begin(s->kv, &t);
    if (rv != 0)
        return rv;
    struct ztx x = {.s = s, .st = {t, NULL}, .a = a, .zxid = mvcc_rev(s->kv) + 1, .session = lease};
    if ((rv = ztx_index(&x, k.n)) != 0) {
        mvcc_txn_end(t);
        return rv;
    }
    for (size_t i = 0; i < k.n && x.storage_err == 0; i++) {
        if (k.v[i].len <= 6 || k.v[i].p[3] != 'D')
            continue;
        const uint8_t *p = k.v[i].p + 6;
        size_t n = (size_t)k.v[i].len - 6;
        struct zover *parent = get(&x, p, zk_path_parent_len(p, n));
        struct zover *o = parent != NULL ? get(&x, p, n) : NULL;
        if (o == NULL || !o->z.exists)
            continue;
        o->c_stale = o->c_stale || o->z.c_stored;
        o->z.exists = false;
        o->deleted = true;
        o->d_dirty = o->c_dirty = false;
        if (parent->z.exists) {
            parent->z.cversion++;
            parent->z.num_children--;
            parent->z.pzxid = x.zxid;
            parent->c_dirty = true;
        }
        changed(&x, ZK_CHANGE_DELETED, o);
    }
    if (x.storage_err == 0)
        rv = write_overlay_own(&x);
    /* the session key (and any other key of the lease) in the same
     * revision: the revoke that follows finds nothing left to delete */
    for (size_t i = 0; rv == 0 && x.storage_err == 0 && i < k.n; i++) {
        if (k.v[i].len > 6 && k.v[i].p[3] == 'D')
            continue;
        int64_t del;
        rv = mvcc_txn_delete_range(t, k.v[i].p, (size_t)k.v[i].len, NULL, 0, NULL, NULL, &del);
    }
    /* the watches once all of it is written */
    if (rv == 0 && x.storage_err == 0)
        server_zk_fire(s, x.ch, x.n_ch);
    mvcc_txn_end(t);
    return x.storage_err != 0 ? x.storage_err : rv;
}

static int ephemerals(lessor *leases, struct arena *a, int64_t session, const uint8_t *prefix,
                      size_t pl, struct jute_vec *out)
{
    struct keys k = {a, NULL, 0, 0, 0};
    out->v = NULL;
    out->n = 0;
    if (leases == NULL || session == 0 || !lessor_exists(leases, session))
        return 0;
    lessor_keys(leases, session, collect_key, &k);
    if (k.err != 0)
        return k.err;
    if (k.n > 0)
        qsort(k.v, k.n, sizeof(*k.v), key_cmp);
    struct jute_bytes *v = arena_alloc(a, sizeof(*v) * (k.n ? k.n : 1));
    if (v == NULL)
        return -ENOMEM;
    int32_t n = 0;
    for (size_t i = 0; i < k.n; i++) {
        const uint8_t *key = k.v[i].p;
        size_t len = (size_t)k.v[i].len;
        if (len <= 6 || key[3] != 'D' || len - 6 < pl || memcmp(key + 6, prefix, pl) != 0)
            continue;
        v[n++] = (struct jute_bytes){key + 6, (int32_t)(len - 6)};
    }
    out->v = v;
    out->n = n;
    return 0;
}

/* ---- the backend quota ---- */

static bool adds_data(int32_t type)
{
    switch (type) {
    case ZK_OP_CREATE:
    case ZK_OP_CREATE2:
    case ZK_OP_CREATE_CONTAINER:
    case ZK_OP_CREATE_TTL:
    case ZK_OP_SET_DATA:
    case ZK_OP_SET_ACL:
        return true;
    default:
        return false;
    }
}

uint64_t zk_write_cost(const uint8_t *req, size_t len, struct arena *a)
{
    if (len < 8)
        return 0; /* no RequestHeader: answered MARSHALLINGERROR */
    int32_t type =
        (int32_t)((uint32_t)req[4] << 24 | (uint32_t)req[5] << 16 | (uint32_t)req[6] << 8 | req[7]);
    if (type != ZK_OP_MULTI) /* the header is enough: no decode on every write */
        return adds_data(type) ? ZK_WRITE_OVERHEAD + len : 0;
    struct zk_request r;
    if (zk_request_decode(req, len, a, &r) != 0)
        return 0; /* answered MARSHALLINGERROR or UNIMPLEMENTED: writes nothing */
    bool adds = false;
    for (size_t i = 0; r.h.type == ZK_OP_MULTI && i < r.n_multi && !adds; i++)
        adds = adds_data(r.multi[i].type);
    return adds ? ZK_WRITE_OVERHEAD + len : 0;
}

/* ---- the container sweep (docs/zookeeper.md) ---- */

struct sweep_hit {
    uint8_t *path;
    size_t n;
    int32_t version;
    int64_t mtime, ttl;
    uint8_t mode;
};

struct sweep_visit {
    struct arena *a;
    int64_t now;
    struct sweep_hit *hits;
    size_t n_hits, seen, max;
    uint8_t *last;
    size_t last_len;
};

static int sweep_kv(const struct mvcc_kv *kv, void *arg)
{
    struct sweep_visit *v = arg;
    v->seen++;
    v->last = arena_dup(v->a, kv->key, kv->key_len);
    v->last_len = kv->key_len;
    if (v->last == NULL)
        return -ENOMEM;
    /* the D value's head: version byte, mode, mzxid, ctime, mtime,
     * version, aversion, owner, ttl (nothing else is decoded) */
    const uint8_t *p = kv->value;
    if (kv->value_len < 2 + 8 * 3 + 4 * 2 + 8 * 2 || p[0] != ZNODE_VERSION || kv->key_len <= 6)
        return 0; /* not quorum's record: never swept */
    uint8_t mode = p[1];
    if (mode != ZK_MODE_CONTAINER && !is_ttl(mode))
        return 0;
    struct jute_in in;
    jute_in_init(&in, p + 2, kv->value_len - 2);
    struct sweep_hit h = {0};
    h.mode = mode;
    (void)jute_get_long(&in); /* mzxid */
    (void)jute_get_long(&in); /* ctime */
    h.mtime = jute_get_long(&in);
    h.version = jute_get_int(&in);
    (void)jute_get_int(&in);  /* aversion */
    (void)jute_get_long(&in); /* owner */
    h.ttl = jute_get_long(&in);
    if (in.err != 0)
        return 0;
    /* a TTL node not yet due needs no look at its children */
    if (is_ttl(mode) && !zk_sweep_due(mode, 0, 0, h.mtime, h.ttl, v->now))
        return 0;
    h.n = kv->key_len - 6;
    h.path = arena_dup(v->a, kv->key + 6, h.n);
    if (h.path == NULL)
        return -ENOMEM;
    v->hits[v->n_hits++] = h;
    return 0;
}

/* sweep_kv_bounded stops the range once a step's znodes are read (a limit
 * would go on counting the rest of the range) */
#define SWEEP_FULL 1
static int sweep_kv_bounded(const struct mvcc_kv *kv, void *arg)
{
    struct sweep_visit *v = arg;
    int rv = sweep_kv(kv, arg);
    return rv != 0 ? rv : v->seen >= v->max ? SWEEP_FULL : 0;
}

int zk_sweep_step(mvcc_store *kv, struct arena *a, struct buf *cursor, size_t max_keys,
                  int64_t now_ms, zk_sweep_fn due, void *arg, bool *done)
{
    static const uint8_t first[4] = {0, 'z', 'k', 'D'}, end[4] = {0, 'z', 'k', 'E'};
    *done = false;
    if (cursor->len == 0 && buf_append(cursor, first, sizeof(first)) != 0)
        return -ENOMEM;
    if (max_keys == 0)
        max_keys = 1;
    struct sweep_visit v = {
        a, now_ms, arena_alloc(a, sizeof(struct sweep_hit) * max_keys), 0, 0, max_keys, NULL, 0};
    if (v.hits == NULL)
        return -ENOMEM;
    mvcc_read *r;
    int rv = mvcc_read_begin(kv, &r);
    if (rv != 0)
        return rv;
    rv = mvcc_read_range(r, cursor->data, cursor->len, end, sizeof(end), NULL, sweep_kv_bounded, &v,
                         NULL);
    if (rv == SWEEP_FULL)
        rv = 0;
    struct zstore st = {NULL, r};
    for (size_t i = 0; rv == 0 && i < v.n_hits; i++) {
        struct sweep_hit *h = &v.hits[i];
        /* the child side: absent is no child, cversion 0 */
        size_t kl;
        uint8_t *k = node_key(a, 'C', h->path, h->n, &kl);
        if (k == NULL) {
            rv = -ENOMEM;
            break;
        }
        struct kvcopy c = {a, false, NULL, 0, 0, 0};
        struct znode z = {0};
        if ((rv = zrange(&st, k, kl, NULL, 0, copy_kv, &c)) != 0)
            break;
        if (c.found && decode_c(c.v, c.n, &z) != 0)
            continue;
        if (zk_sweep_due(h->mode, z.cversion, z.num_children, h->mtime, h->ttl, now_ms))
            due(h->path, h->n, h->version, arg);
    }
    mvcc_read_end(r);
    if (rv != 0)
        return rv;
    if (v.seen < max_keys || v.last == NULL) {
        *done = true;
        buf_reset(cursor);
        return 0;
    }
    /* the next step starts just after the last key seen */
    buf_reset(cursor);
    if (buf_append(cursor, v.last, v.last_len) != 0 || buf_append(cursor, "", 1) != 0)
        return -ENOMEM;
    return 0;
}
