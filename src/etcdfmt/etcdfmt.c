/* etcdfmt/etcdfmt.c: etcd 3.4's bbolt buckets <-> quorum's LMDB store
 * (see etcdfmt.h for the record formats on both sides). */
#include "etcdfmt/etcdfmt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.pb-c.h"
#include "backend/backend.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "base/fs.h"
#include "bolt/bolt.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

#define REV_LEN 17 /* 8-byte main, '_', 8-byte sub */
#define ALARM_PREFIX "alarm/"
#define COMMIT_EVERY 20000

static int errf(char *err, size_t errlen, int rv, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rv;
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* ---- import ---- */

struct imp {
    bolt_db *db;
    backend *be;
    struct etcdfmt_db_info *info;
    size_t pending; /* puts in the open batch */
    char *err;
    size_t errlen;
};

static int imp_put(struct imp *m, enum backend_db d, const void *k, size_t kl, const void *v,
                   size_t vl)
{
    if (m->pending >= COMMIT_EVERY) {
        int rv = backend_batch_commit(m->be);
        if (rv == 0)
            rv = backend_batch_begin(m->be);
        if (rv != 0)
            return errf(m->err, m->errlen, rv, "writing the store: %s", q_strerror(rv));
        m->pending = 0;
    }
    MDB_val key = {kl, (void *)k}, val = {vl, (void *)v};
    int rc = backend_put(m->be, backend_batch_txn(m->be), d, &key, &val, 0);
    if (rc != 0) {
        int rv = backend_err(rc);
        return errf(m->err, m->errlen, rv, "writing the store: %s", mdb_strerror(rc));
    }
    m->pending++;
    return 0;
}

static int imp_meta(struct imp *m, const char *name, uint64_t v)
{
    uint8_t b[8];
    put_be64(b, v);
    return imp_put(m, BACKEND_DB_META, name, strlen(name), b, 8);
}

typedef int (*imp_fn)(struct imp *m, const struct bolt_item *it);

static int imp_bucket(struct imp *m, const struct bolt_bucket *b, const char *name, imp_fn fn)
{
    bolt_cursor c;
    char berr[256];
    int rv = bolt_cursor_open(&c, m->db, b, berr, sizeof(berr));
    if (rv != 0)
        return errf(m->err, m->errlen, rv, "bucket %s: %s", name, berr);
    struct bolt_item it;
    while ((rv = bolt_cursor_next(&c, &it)) == 1) {
        if (it.bucket) /* etcd nests no buckets: not ours */
            continue;
        if ((rv = fn(m, &it)) != 0)
            break;
    }
    if (rv < 0 && rv == QERR_CORRUPT && m->err && m->err[0] == '\0')
        errf(m->err, m->errlen, rv, "bucket %s: %s", name, berr);
    else if (rv < 0 && m->err && m->err[0] == '\0')
        errf(m->err, m->errlen, rv, "bucket %s: %s", name, berr);
    bolt_cursor_close(&c);
    return rv < 0 ? rv : 0;
}

static bool rev_key_ok(const uint8_t *k, size_t n)
{
    return (n == REV_LEN || (n == REV_LEN + 1 && k[REV_LEN] == 't')) && k[8] == '_';
}

static int imp_key(struct imp *m, const struct bolt_item *it)
{
    if (!rev_key_ok(it->key, it->klen))
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket key: a key of %zu bytes is not a revision",
                    it->klen);
    Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(NULL, it->vlen, it->val);
    if (kv == NULL)
        return errf(m->err, m->errlen, QERR_CORRUPT,
                    "bucket key: revision %" PRIu64 ": not a mvccpb.KeyValue", be64(it->key));
    /* a tombstone (the 't' key) holds the user key alone */
    bool ok = kv->key.len > 0 &&
              (it->klen == REV_LEN + 1 || kv->mod_revision == (int64_t)be64(it->key));
    mvccpb__key_value__free_unpacked(kv, NULL);
    if (!ok)
        return errf(m->err, m->errlen, QERR_CORRUPT,
                    "bucket key: revision %" PRIu64 ": the record does not match its key",
                    be64(it->key));
    if (m->info) {
        m->info->revision = (int64_t)be64(it->key);
        m->info->total_keys++;
    }
    return imp_put(m, BACKEND_DB_KEY, it->key, it->klen, it->val, it->vlen);
}

static int imp_meta_rec(struct imp *m, const struct bolt_item *it)
{
    static const struct {
        const char *name;
        size_t len; /* the value's: 8, or REV_LEN for a revision */
    } known[] = {
        {"consistent_index", 8}, {"term", 8},
        {"scheduledCompactRev", REV_LEN}, {"finishedCompactRev", REV_LEN},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        if (it->klen != strlen(known[i].name) || memcmp(it->key, known[i].name, it->klen) != 0)
            continue;
        if (it->vlen != known[i].len || (known[i].len == REV_LEN && it->val[8] != '_'))
            return errf(m->err, m->errlen, QERR_CORRUPT, "bucket meta: %s of %zu bytes",
                        known[i].name, it->vlen);
        uint64_t v = be64(it->val);
        if (m->info && i == 0)
            m->info->consistent_index = v;
        if (m->info && i == 2)
            m->info->scheduled_compact = (int64_t)v;
        if (m->info && i == 3)
            m->info->compact_revision = (int64_t)v;
        return imp_meta(m, known[i].name, v);
    }
    return 0; /* etcd 3.5's confState and the like: not quorum's */
}

/* lease_ok checks a leasepb.Lease: fields 1-3, varints. */
static bool lease_ok(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t tag = p[i++];
        if (tag != 0x08 && tag != 0x10 && tag != 0x18)
            return false;
        int len = 0;
        while (i < n && (p[i] & 0x80) && len < 9)
            i++, len++;
        if (i >= n || len >= 9 + 1)
            return false;
        i++;
    }
    return true;
}

static int imp_lease(struct imp *m, const struct bolt_item *it)
{
    if (it->klen != 8 || !lease_ok(it->val, it->vlen))
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket lease: a record that is no lease");
    if (m->info)
        m->info->leases++;
    return imp_put(m, BACKEND_DB_LEASE, it->key, it->klen, it->val, it->vlen);
}

static int imp_auth(struct imp *m, const struct bolt_item *it)
{
    return imp_put(m, BACKEND_DB_AUTH, it->key, it->klen, it->val, it->vlen);
}

static int imp_user(struct imp *m, const struct bolt_item *it)
{
    Authpb__User *u = authpb__user__unpack(NULL, it->vlen, it->val);
    if (u == NULL)
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket authUsers: not an authpb.User");
    authpb__user__free_unpacked(u, NULL);
    return imp_put(m, BACKEND_DB_AUTH_USERS, it->key, it->klen, it->val, it->vlen);
}

static int imp_role(struct imp *m, const struct bolt_item *it)
{
    Authpb__Role *r = authpb__role__unpack(NULL, it->vlen, it->val);
    if (r == NULL)
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket authRoles: not an authpb.Role");
    authpb__role__free_unpacked(r, NULL);
    return imp_put(m, BACKEND_DB_AUTH_ROLES, it->key, it->klen, it->val, it->vlen);
}

/* hex_id parses a members bucket key: an id in hex, as Go's types.ID. */
static int hex_id(const uint8_t *k, size_t n, uint64_t *id)
{
    if (n == 0 || n > 16)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = k[i] >= '0' && k[i] <= '9'   ? k[i] - '0'
                : k[i] >= 'a' && k[i] <= 'f' ? k[i] - 'a' + 10
                : k[i] >= 'A' && k[i] <= 'F' ? k[i] - 'A' + 10
                                             : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return 0;
}

static size_t json_strings(json_t *a, char out[][300], size_t max)
{
    size_t n = 0, i;
    json_t *v;
    if (!json_is_array(a))
        return 0;
    json_array_foreach(a, i, v)
    {
        if (json_is_string(v) && n < max)
            snprintf(out[n++], 300, "%s", json_string_value(v));
    }
    return n;
}

static void member_key(uint8_t k[9], char tag, uint64_t id)
{
    k[0] = (uint8_t)tag;
    put_be64(k + 1, id);
}

static int imp_member(struct imp *m, const struct bolt_item *it)
{
    uint64_t id;
    if (hex_id(it->key, it->klen, &id) != 0)
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket members: %.*s is not a member id",
                    (int)(it->klen > 40 ? 40 : it->klen), it->key);
    json_error_t je;
    /* ids are above 2^53: numbers as doubles, the id is the key's */
    json_t *j = json_loadb((const char *)it->val, it->vlen, JSON_DECODE_INT_AS_REAL, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket members: member %" PRIx64 ": %s", id,
                    je.text);
    }
    struct etcdfmt_member mb = {.id = id};
    json_t *name = json_object_get(j, "name");
    if (json_is_string(name))
        snprintf(mb.name, sizeof(mb.name), "%s", json_string_value(name));
    mb.n_peer = json_strings(json_object_get(j, "peerURLs"), mb.peer, ETCDFMT_MAX_URLS);
    mb.n_client = json_strings(json_object_get(j, "clientURLs"), mb.client, ETCDFMT_MAX_URLS);
    mb.learner = json_is_true(json_object_get(j, "isLearner"));
    json_decref(j);
    if (m->info && m->info->n_members < ETCDFMT_MAX_MEMBERS)
        m->info->members[m->info->n_members++] = mb;
    char *peer[ETCDFMT_MAX_URLS], *client[ETCDFMT_MAX_URLS];
    for (size_t i = 0; i < mb.n_peer; i++)
        peer[i] = mb.peer[i];
    for (size_t i = 0; i < mb.n_client; i++)
        client[i] = mb.client[i];
    Etcdserverpb__Member pm = ETCDSERVERPB__MEMBER__INIT;
    pm.id = id;
    pm.name = mb.name;
    pm.peerurls = peer;
    pm.n_peerurls = mb.n_peer;
    pm.clienturls = client;
    pm.n_clienturls = mb.n_client;
    pm.islearner = mb.learner;
    uint8_t buf[8192];
    size_t n = etcdserverpb__member__get_packed_size(&pm);
    if (n > sizeof(buf))
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket members: member %" PRIx64 " too large",
                    id);
    n = etcdserverpb__member__pack(&pm, buf);
    uint8_t k[9];
    member_key(k, 'm', id);
    return imp_put(m, BACKEND_DB_MEMBERS, k, 9, buf, n);
}

static int imp_removed(struct imp *m, const struct bolt_item *it)
{
    uint64_t id;
    if (hex_id(it->key, it->klen, &id) != 0)
        return errf(m->err, m->errlen, QERR_CORRUPT,
                    "bucket members_removed: a key that is not a member id");
    if (m->info && m->info->n_removed < ETCDFMT_MAX_MEMBERS)
        m->info->removed[m->info->n_removed++] = id;
    uint8_t k[9];
    member_key(k, 'r', id);
    return imp_put(m, BACKEND_DB_MEMBERS, k, 9, "", 0);
}

static int imp_alarm(struct imp *m, const struct bolt_item *it)
{
    Etcdserverpb__AlarmMember *a = etcdserverpb__alarm_member__unpack(NULL, it->klen, it->key);
    if (a == NULL)
        return errf(m->err, m->errlen, QERR_CORRUPT, "bucket alarm: not an AlarmMember");
    char name[64];
    snprintf(name, sizeof(name), ALARM_PREFIX "%016" PRIx64 "/%d", a->memberid, (int)a->alarm);
    etcdserverpb__alarm_member__free_unpacked(a, NULL);
    return imp_meta(m, name, 1);
}

static const struct {
    const char *name;
    imp_fn fn;
} imp_buckets[] = {
    {"alarm", imp_alarm},     {"auth", imp_auth},       {"authRoles", imp_role},
    {"authUsers", imp_user},  {"key", imp_key},         {"lease", imp_lease},
    {"members", imp_member},  {"members_removed", imp_removed}, {"meta", imp_meta_rec},
};

static int import_all(struct imp *m)
{
    struct bolt_bucket root = bolt_root(m->db);
    bolt_cursor c;
    char berr[256];
    int rv = bolt_cursor_open(&c, m->db, &root, berr, sizeof(berr));
    if (rv != 0)
        return errf(m->err, m->errlen, rv, "%s", berr);
    struct bolt_item it;
    while ((rv = bolt_cursor_next(&c, &it)) == 1) {
        if (!it.bucket)
            continue;
        for (size_t i = 0; i < sizeof(imp_buckets) / sizeof(imp_buckets[0]); i++) {
            if (it.klen != strlen(imp_buckets[i].name) ||
                memcmp(it.key, imp_buckets[i].name, it.klen) != 0)
                continue;
            struct bolt_bucket b;
            rv = bolt_item_bucket(m->db, &it, &b, berr, sizeof(berr));
            if (rv != 0) {
                errf(m->err, m->errlen, rv, "bucket %s: %s", imp_buckets[i].name, berr);
                break;
            }
            rv = imp_bucket(m, &b, imp_buckets[i].name, imp_buckets[i].fn);
            break;
        }
        if (rv < 0)
            break;
    }
    if (rv < 0 && m->err[0] == '\0')
        errf(m->err, m->errlen, rv, "%s", berr);
    bolt_cursor_close(&c);
    return rv < 0 ? rv : 0;
}

int etcdfmt_db_import(const char *bolt_path, const char *store_dir, struct etcdfmt_db_info *info,
                      char *err, size_t errlen)
{
    char dummy[8];
    if (err == NULL || errlen == 0)
        err = dummy, errlen = sizeof(dummy);
    err[0] = '\0';
    if (info)
        memset(info, 0, sizeof(*info));
    char final[4096], tmp[4096], tmpdb[4200];
    if (snprintf(final, sizeof(final), "%s/data.mdb", store_dir) >= (int)sizeof(final))
        return errf(err, errlen, -ENAMETOOLONG, "%s: name too long", store_dir);
    if (access(final, F_OK) == 0)
        return errf(err, errlen, -EEXIST, "%s exists", final);
    bolt_db *db;
    int rv = bolt_open_file(bolt_path, 0, &db, err, errlen);
    if (rv != 0)
        return rv;
    struct stat st;
    bool made_dir = stat(store_dir, &st) != 0;
    if (made_dir && (rv = fs_mkdir_p(store_dir)) != 0) {
        bolt_close(db);
        return errf(err, errlen, rv, "mkdir %s: %s", store_dir, strerror(-rv));
    }
    snprintf(tmp, sizeof(tmp), "%s/.import-XXXXXX", store_dir);
    if (mkdtemp(tmp) == NULL) {
        rv = -errno;
        errf(err, errlen, rv, "mkdir in %s: %s", store_dir, strerror(errno));
        goto out_dir;
    }
    backend *be = NULL;
    /* LMDB's map: 8 GiB, or room for four times the db when that is more */
    uint64_t want_map = 4 * bolt_size(db);
    struct backend_options bo = {.dir = tmp, .no_sync = true,
                                 .map_size = want_map > (8ull << 30) ? (size_t)want_map : 0};
    if ((rv = backend_open(&bo, &be)) != 0) {
        errf(err, errlen, rv, "opening a store in %s: %s", tmp, q_strerror(rv));
        goto out_tmp;
    }
    struct imp m = {.db = db, .be = be, .info = info, .err = err, .errlen = errlen};
    if ((rv = backend_batch_begin(be)) != 0) {
        errf(err, errlen, rv, "writing the store: %s", q_strerror(rv));
        goto out_be;
    }
    rv = import_all(&m);
    if (rv == 0) {
        rv = backend_batch_commit(be);
        if (rv == 0)
            rv = backend_sync(be);
        if (rv != 0)
            errf(err, errlen, rv, "writing the store: %s", q_strerror(rv));
    } else {
        backend_batch_abort(be);
    }
out_be:
    backend_close(be);
    snprintf(tmpdb, sizeof(tmpdb), "%s/data.mdb", tmp);
    if (rv == 0) {
        int fd = open(tmpdb, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) != 0)
            rv = errf(err, errlen, -errno, "sync %s: %s", tmpdb, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    if (rv == 0 && rename(tmpdb, final) != 0)
        rv = errf(err, errlen, -errno, "rename %s: %s", final, strerror(errno));
    if (rv == 0)
        fs_fsync_dir(store_dir);
out_tmp:
    fs_remove_tree(tmp);
out_dir:
    if (rv != 0 && made_dir)
        rmdir(store_dir);
    bolt_close(db);
    return rv;
}

/* ---- export ---- */

/* Go's encoding/json string: quotes, backslash and control characters
 * escaped, and <, >, & and U+2028/2029 as \u00XX (HTML-safe). */
static int json_str(char *out, size_t cap, size_t *n, const char *s)
{
    static const char hex[] = "0123456789abcdef";
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (*n + 1 >= cap)                                                                         \
            return -ENOSPC;                                                                        \
        out[(*n)++] = (char)(c);                                                                   \
    } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            PUT('\\');
            PUT(c);
        } else if (c == '\n') {
            PUT('\\');
            PUT('n');
        } else if (c == '\r') {
            PUT('\\');
            PUT('r');
        } else if (c == '\t') {
            PUT('\\');
            PUT('t');
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
            PUT('\\');
            PUT('u');
            PUT('0');
            PUT('0');
            PUT(hex[c >> 4]);
            PUT(hex[c & 15]);
        } else if (c == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
            PUT('\\');
            PUT('u');
            PUT('2');
            PUT('0');
            PUT('2');
            PUT(p[2] == 0xa8 ? '8' : '9');
            p += 2;
        } else {
            PUT(c);
        }
    }
    PUT('"');
    out[*n] = '\0';
    return 0;
#undef PUT
}

static int json_raw(char *out, size_t cap, size_t *n, const char *s)
{
    size_t l = strlen(s);
    if (*n + l + 1 >= cap)
        return -ENOSPC;
    memcpy(out + *n, s, l + 1);
    *n += l;
    return 0;
}

static int json_str_array(char *out, size_t cap, size_t *n, char **v, size_t nv)
{
    int rv = json_raw(out, cap, n, "[");
    for (size_t i = 0; rv == 0 && i < nv; i++) {
        if (i > 0)
            rv = json_raw(out, cap, n, ",");
        if (rv == 0)
            rv = json_str(out, cap, n, v[i] ? v[i] : "");
    }
    return rv == 0 ? json_raw(out, cap, n, "]") : rv;
}

int etcdfmt_member_json(const Etcdserverpb__Member *m, bool learner, char *out, size_t cap)
{
    size_t n = 0;
    char idb[40];
    snprintf(idb, sizeof(idb), "{\"id\":%" PRIu64 ",\"peerURLs\":", m->id);
    int rv = json_raw(out, cap, &n, idb);
    if (rv == 0) /* Go writes a nil slice as null */
        rv = m->n_peerurls ? json_str_array(out, cap, &n, m->peerurls, m->n_peerurls)
                           : json_raw(out, cap, &n, "null");
    if (rv == 0 && learner)
        rv = json_raw(out, cap, &n, ",\"isLearner\":true");
    if (rv == 0 && m->name && m->name[0]) {
        rv = json_raw(out, cap, &n, ",\"name\":");
        if (rv == 0)
            rv = json_str(out, cap, &n, m->name);
    }
    if (rv == 0 && m->n_clienturls) {
        rv = json_raw(out, cap, &n, ",\"clientURLs\":");
        if (rv == 0)
            rv = json_str_array(out, cap, &n, m->clienturls, m->n_clienturls);
    }
    if (rv == 0)
        rv = json_raw(out, cap, &n, "}");
    return rv == 0 ? (int)n : rv;
}

/* A record gathered to be sorted (members, alarms: their bbolt keys do
 * not sort as quorum's do). */
struct rec {
    uint8_t *k, *v;
    size_t kl, vl;
};

struct recs {
    struct rec *r;
    size_t n, cap;
};

static int recs_add(struct recs *rs, const void *k, size_t kl, const void *v, size_t vl)
{
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 16;
        struct rec *r = realloc(rs->r, cap * sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        rs->r = r;
        rs->cap = cap;
    }
    struct rec x = {malloc(kl ? kl : 1), malloc(vl ? vl : 1), kl, vl};
    if (x.k == NULL || x.v == NULL) {
        free(x.k);
        free(x.v);
        return -ENOMEM;
    }
    memcpy(x.k, k, kl);
    if (vl)
        memcpy(x.v, v, vl);
    rs->r[rs->n++] = x;
    return 0;
}

static int rec_cmp(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    size_t n = x->kl < y->kl ? x->kl : y->kl;
    int c = memcmp(x->k, y->k, n);
    return c ? c : (x->kl > y->kl) - (x->kl < y->kl);
}

static void recs_free(struct recs *rs)
{
    for (size_t i = 0; i < rs->n; i++) {
        free(rs->r[i].k);
        free(rs->r[i].v);
    }
    free(rs->r);
    memset(rs, 0, sizeof(*rs));
}

static int write_recs(bolt_writer *w, const char *bucket, struct recs *rs)
{
    if (rs->n > 1) /* qsort wants a non-NULL base even for none */
        qsort(rs->r, rs->n, sizeof(rs->r[0]), rec_cmp);
    int rv = bolt_writer_begin(w, bucket, strlen(bucket));
    for (size_t i = 0; rv == 0 && i < rs->n; i++)
        if (i == 0 || rec_cmp(&rs->r[i - 1], &rs->r[i]) != 0)
            rv = bolt_writer_put(w, rs->r[i].k, rs->r[i].kl, rs->r[i].v, rs->r[i].vl);
    return rv == 0 ? bolt_writer_end(w) : rv;
}

struct exp {
    backend *be;
    MDB_txn *txn;
    bolt_writer *w;
    const struct etcdfmt_export_opts *o;
    struct etcdfmt_db_info *info;
    char *err;
    size_t errlen;
};

typedef int (*exp_fn)(struct exp *x, MDB_val *k, MDB_val *v);

/* each_rec calls |fn| on every record of |d| in order. */
static int each_rec(struct exp *x, enum backend_db d, exp_fn fn)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(x->txn, backend_dbi(x->be, d), &cur);
    if (rc != 0)
        return errf(x->err, x->errlen, backend_err(rc), "reading the store: %s", mdb_strerror(rc));
    MDB_val k, v;
    int rv = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && rv == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        rv = fn(x, &k, &v);
    mdb_cursor_close(cur);
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = errf(x->err, x->errlen, backend_err(rc), "reading the store: %s", mdb_strerror(rc));
    return rv;
}

static int exp_copy(struct exp *x, MDB_val *k, MDB_val *v)
{
    int rv = bolt_writer_put(x->w, k->mv_data, k->mv_size, v->mv_data, v->mv_size);
    return rv ? errf(x->err, x->errlen, rv, "writing the snapshot: %s", strerror(-rv)) : 0;
}

static int exp_key(struct exp *x, MDB_val *k, MDB_val *v)
{
    if (x->info && k->mv_size >= 8) {
        x->info->revision = (int64_t)be64(k->mv_data);
        x->info->total_keys++;
    }
    return exp_copy(x, k, v);
}

static int exp_lease(struct exp *x, MDB_val *k, MDB_val *v)
{
    if (x->info)
        x->info->leases++;
    return exp_copy(x, k, v);
}

static int copy_db(struct exp *x, const char *bucket, enum backend_db d, exp_fn fn)
{
    int rv = bolt_writer_begin(x->w, bucket, strlen(bucket));
    if (rv != 0)
        return errf(x->err, x->errlen, rv, "writing the snapshot: %s", strerror(-rv));
    if ((rv = each_rec(x, d, fn)) != 0)
        return rv;
    rv = bolt_writer_end(x->w);
    return rv ? errf(x->err, x->errlen, rv, "writing the snapshot: %s", strerror(-rv)) : 0;
}

static bool is_learner(const struct etcdfmt_export_opts *o, uint64_t id)
{
    for (size_t i = 0; o && i < o->n_learners; i++)
        if (o->learners[i] == id)
            return true;
    return false;
}

struct exp_members {
    struct exp *x;
    struct recs live, removed;
};

static int exp_members_all(struct exp *x, struct exp_members *em)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(x->txn, backend_dbi(x->be, BACKEND_DB_MEMBERS), &cur);
    if (rc != 0)
        return errf(x->err, x->errlen, backend_err(rc), "reading the store: %s", mdb_strerror(rc));
    MDB_val k, v;
    int rv = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && rv == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 9)
            continue;
        const uint8_t *kb = k.mv_data;
        uint64_t id = be64(kb + 1);
        char hex[20];
        snprintf(hex, sizeof(hex), "%" PRIx64, id);
        if (kb[0] == 'r') {
            rv = recs_add(&em->removed, hex, strlen(hex), "removed", 7);
            continue;
        }
        if (kb[0] != 'm')
            continue;
        Etcdserverpb__Member *m = etcdserverpb__member__unpack(NULL, v.mv_size, v.mv_data);
        if (m == NULL) {
            rv = errf(x->err, x->errlen, QERR_CORRUPT, "member %s: a record that does not decode",
                      hex);
            break;
        }
        char json[16384];
        bool learner = is_learner(x->o, id) || m->islearner;
        int n = etcdfmt_member_json(m, learner, json, sizeof(json));
        if (n > 0 && x->info && x->info->n_members < ETCDFMT_MAX_MEMBERS) {
            struct etcdfmt_member *o = &x->info->members[x->info->n_members++];
            memset(o, 0, sizeof(*o));
            o->id = id;
            o->learner = learner;
            snprintf(o->name, sizeof(o->name), "%s", m->name ? m->name : "");
            for (size_t i = 0; i < m->n_peerurls && o->n_peer < ETCDFMT_MAX_URLS; i++)
                snprintf(o->peer[o->n_peer++], 300, "%s", m->peerurls[i]);
            for (size_t i = 0; i < m->n_clienturls && o->n_client < ETCDFMT_MAX_URLS; i++)
                snprintf(o->client[o->n_client++], 300, "%s", m->clienturls[i]);
        }
        etcdserverpb__member__free_unpacked(m, NULL);
        rv = n > 0 ? recs_add(&em->live, hex, strlen(hex), json, (size_t)n)
                   : errf(x->err, x->errlen, -EINVAL, "member %s: too large", hex);
    }
    mdb_cursor_close(cur);
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = errf(x->err, x->errlen, backend_err(rc), "reading the store: %s", mdb_strerror(rc));
    return rv;
}

/* meta: alarms (to the alarm bucket) and the records etcd knows */
struct exp_meta {
    struct recs alarms, meta;
};

static int exp_meta_all(struct exp *x, struct exp_meta *em)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(x->txn, backend_dbi(x->be, BACKEND_DB_META), &cur);
    if (rc != 0)
        return errf(x->err, x->errlen, backend_err(rc), "reading the store: %s", mdb_strerror(rc));
    MDB_val k, v;
    int rv = 0;
    size_t plen = strlen(ALARM_PREFIX);
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && rv == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        const char *name = k.mv_data;
        size_t nl = k.mv_size;
        if (nl > plen && memcmp(name, ALARM_PREFIX, plen) == 0) {
            char buf[64];
            if (nl - plen >= sizeof(buf))
                continue;
            memcpy(buf, name + plen, nl - plen);
            buf[nl - plen] = '\0';
            unsigned long long id;
            int type;
            if (sscanf(buf, "%llx/%d", &id, &type) != 2)
                continue;
            Etcdserverpb__AlarmMember a = ETCDSERVERPB__ALARM_MEMBER__INIT;
            a.memberid = id;
            a.alarm = (Etcdserverpb__AlarmType)type;
            uint8_t ab[32];
            size_t an = etcdserverpb__alarm_member__pack(&a, ab);
            rv = recs_add(&em->alarms, ab, an, "", 0);
            continue;
        }
        if (v.mv_size != 8)
            continue;
        uint64_t val = be64(v.mv_data);
        bool rev = (nl == 19 && memcmp(name, "scheduledCompactRev", 19) == 0) ||
                   (nl == 18 && memcmp(name, "finishedCompactRev", 18) == 0);
        bool ci = nl == 16 && memcmp(name, "consistent_index", 16) == 0;
        if (rev) {
            uint8_t r[REV_LEN] = {0};
            put_be64(r, val);
            r[8] = '_';
            rv = recs_add(&em->meta, name, nl, r, REV_LEN);
            if (x->info && name[0] == 'f')
                x->info->compact_revision = (int64_t)val;
            if (x->info && name[0] == 's')
                x->info->scheduled_compact = (int64_t)val;
        } else if (ci) {
            uint8_t b[8];
            uint64_t c = x->o && x->o->consistent_index ? x->o->consistent_index : val;
            put_be64(b, c);
            rv = recs_add(&em->meta, name, nl, b, 8);
            if (x->info)
                x->info->consistent_index = c;
        }
    }
    mdb_cursor_close(cur);
    if (rv == 0 && rc != MDB_NOTFOUND)
        rv = errf(x->err, x->errlen, backend_err(rc), "reading the store: %s", mdb_strerror(rc));
    return rv;
}

int etcdfmt_db_export(backend *be, int fd, const struct etcdfmt_export_opts *o,
                      struct etcdfmt_db_info *info, uint64_t *size, char *err, size_t errlen)
{
    char dummy[8];
    if (err == NULL || errlen == 0)
        err = dummy, errlen = sizeof(dummy);
    err[0] = '\0';
    if (info)
        memset(info, 0, sizeof(*info));
    struct exp x = {.be = be, .o = o, .info = info, .err = err, .errlen = errlen};
    int rv = backend_read_begin(be, &x.txn);
    if (rv != 0)
        return errf(err, errlen, rv, "reading the store: %s", q_strerror(rv));
    if ((rv = bolt_writer_new(fd, &x.w)) != 0) {
        backend_read_end(x.txn);
        return errf(err, errlen, rv, "out of memory");
    }
    struct exp_members em = {.x = &x};
    struct exp_meta mm;
    memset(&mm, 0, sizeof(mm));
    rv = exp_members_all(&x, &em);
    if (rv == 0)
        rv = exp_meta_all(&x, &mm);
    /* the buckets in name order, as the root bucket holds them */
    if (rv == 0)
        rv = write_recs(x.w, "alarm", &mm.alarms);
    if (rv == 0)
        rv = copy_db(&x, "auth", BACKEND_DB_AUTH, exp_copy);
    if (rv == 0)
        rv = copy_db(&x, "authRoles", BACKEND_DB_AUTH_ROLES, exp_copy);
    if (rv == 0)
        rv = copy_db(&x, "authUsers", BACKEND_DB_AUTH_USERS, exp_copy);
    if (rv == 0) {
        struct recs cl = {0};
        rv = recs_add(&cl, "clusterVersion", 14, "3.4.0", 5);
        if (rv == 0)
            rv = write_recs(x.w, "cluster", &cl);
        recs_free(&cl);
    }
    if (rv == 0)
        rv = copy_db(&x, "key", BACKEND_DB_KEY, exp_key);
    if (rv == 0)
        rv = copy_db(&x, "lease", BACKEND_DB_LEASE, exp_lease);
    if (rv == 0)
        rv = write_recs(x.w, "members", &em.live);
    if (rv == 0)
        rv = write_recs(x.w, "members_removed", &em.removed);
    if (rv == 0)
        rv = write_recs(x.w, "meta", &mm.meta);
    backend_read_end(x.txn);
    if (rv == 0)
        rv = bolt_writer_finish(x.w, o && o->txid ? o->txid : 1, size);
    if (rv != 0 && err[0] == '\0')
        errf(err, errlen, rv, "writing the snapshot: %s", q_strerror(rv));
    bolt_writer_free(x.w);
    recs_free(&em.live);
    recs_free(&em.removed);
    recs_free(&mm.alarms);
    recs_free(&mm.meta);
    return rv;
}

/* ---- status ---- */

int etcdfmt_status(const char *path, struct etcdfmt_status *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof(*st));
    bolt_db *db;
    int rv = bolt_open_file(path, 0, &db, err, errlen);
    if (rv != 0)
        return rv;
    char *cerr = malloc(8192);
    if (cerr == NULL) {
        bolt_close(db);
        return -ENOMEM;
    }
    int n = bolt_check(db, 8, cerr, 8192);
    if (n != 0) {
        if (n > 0)
            errf(err, errlen, QERR_CORRUPT,
                 "snapshot file integrity check failed. %d errors found.\n%s", n, cerr);
        else
            errf(err, errlen, n, "%s", q_strerror(n));
        free(cerr);
        bolt_close(db);
        return n > 0 ? QERR_CORRUPT : n;
    }
    free(cerr);
    st->total_size = bolt_size(db);
    struct bolt_bucket root = bolt_root(db);
    bolt_cursor c;
    char berr[256];
    uint32_t h = 0;
    if ((rv = bolt_cursor_open(&c, db, &root, berr, sizeof(berr))) != 0) {
        bolt_close(db);
        return errf(err, errlen, rv, "%s", berr);
    }
    struct bolt_item it;
    while ((rv = bolt_cursor_next(&c, &it)) == 1) {
        struct bolt_bucket b;
        if (!it.bucket || bolt_item_bucket(db, &it, &b, berr, sizeof(berr)) != 0) {
            rv = errf(err, errlen, QERR_CORRUPT, "cannot get hash of bucket %.*s",
                      (int)(it.klen > 256 ? 256 : it.klen), it.key);
            break;
        }
        h = crc32c_update(h, it.key, it.klen);
        bool keyb = it.klen == 3 && memcmp(it.key, "key", 3) == 0;
        bolt_cursor sc;
        if ((rv = bolt_cursor_open(&sc, db, &b, berr, sizeof(berr))) != 0) {
            errf(err, errlen, rv, "%s", berr);
            break;
        }
        struct bolt_item si;
        while ((rv = bolt_cursor_next(&sc, &si)) == 1) {
            h = crc32c_update(h, si.key, si.klen);
            if (!si.bucket) /* ForEach gives a nested bucket's value as nil */
                h = crc32c_update(h, si.val, si.vlen);
            if (keyb && si.klen >= 8)
                st->revision = (int64_t)be64(si.key);
            st->total_key++;
        }
        if (rv < 0)
            errf(err, errlen, rv, "%s", berr);
        bolt_cursor_close(&sc);
        if (rv < 0)
            break;
    }
    if (rv < 0 && err && err[0] == '\0')
        errf(err, errlen, rv, "%s", berr);
    bolt_cursor_close(&c);
    bolt_close(db);
    st->hash = h;
    return rv < 0 ? rv : 0;
}
