/* etcdwal/etcdwal.c: etcd 3.4's WAL and .snap files, read only (etcdwal.h). */
#include "etcdwal/etcdwal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/err.h"
#include "etcdserver.pb-c.h"
#include "raftpb.pb-c.h"
#include "snappb.pb-c.h"
#include "walpb.pb-c.h"

#define SECTOR 512 /* etcd's minSectorSize, for telling a torn write */

static int fail(char *err, size_t cap, int rv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t cap, int rv, const char *fmt, ...)
{
    if (err != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rv;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- segments ---- */

/* torn_entry: whether |data| (the record and padding at file offset |off|)
 * has a 512-byte sector, cut at the file's sector boundaries, all zeros:
 * a write that never reached the disk. */
static bool torn_entry(const uint8_t *data, size_t len, uint64_t off)
{
    size_t cur = 0;
    while (cur < len) {
        size_t chunk = SECTOR - (size_t)(off % SECTOR);
        if (chunk > len - cur)
            chunk = len - cur;
        bool zero = true;
        for (size_t i = 0; i < chunk && zero; i++)
            zero = data[cur + i] == 0;
        if (zero)
            return true;
        cur += chunk;
        off += chunk;
    }
    return false;
}

static int push_entry(struct etcdwal_reader *r, const Raftpb__Entry *e, const char *name,
                      uint64_t off, char *err, size_t errlen)
{
    struct etcdwal_state *st = r->st;
    if (e->index <= r->start_index)
        return 0; /* covered by the snapshot */
    uint64_t up = e->index - r->start_index - 1;
    if (up > st->n_entries)
        return fail(err, errlen, QERR_CORRUPT,
                    "%s: entry at offset %" PRIu64 " has index %" PRIu64
                    ", past the %zu entries after %" PRIu64 " (a gap in the log)",
                    name, off, e->index, st->n_entries, r->start_index);
    for (size_t i = (size_t)up; i < st->n_entries; i++)
        free(st->entries[i].data);
    st->n_entries = (size_t)up;
    if (st->n_entries == r->cap_entries) {
        size_t nc = r->cap_entries ? 2 * r->cap_entries : 256;
        struct etcdwal_entry *ne = realloc(st->entries, nc * sizeof(*ne));
        if (ne == NULL)
            return -ENOMEM;
        st->entries = ne;
        r->cap_entries = nc;
    }
    struct etcdwal_entry *o = &st->entries[st->n_entries];
    memset(o, 0, sizeof(*o));
    o->term = e->term;
    o->index = e->index;
    o->type = (int)e->type;
    if (e->has_data && e->data.len > 0) {
        o->data = malloc(e->data.len);
        if (o->data == NULL)
            return -ENOMEM;
        memcpy(o->data, e->data.data, e->data.len);
        o->len = e->data.len;
    }
    st->n_entries++;
    return 0;
}

/* apply_record takes one checked record into the reader's state. */
static int apply_record(struct etcdwal_reader *r, const Walpb__Record *rec, const char *name,
                        uint64_t off, char *err, size_t errlen)
{
    const uint8_t *d = rec->has_data ? rec->data.data : NULL;
    size_t n = rec->has_data ? rec->data.len : 0;
    switch (rec->type) {
    case ETCDWAL_REC_ENTRY: {
        Raftpb__Entry *e = raftpb__entry__unpack(NULL, n, d);
        if (e == NULL)
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: the entry at offset %" PRIu64 " does not decode", name, off);
        int rv = push_entry(r, e, name, off, err, errlen);
        raftpb__entry__free_unpacked(e, NULL);
        return rv;
    }
    case ETCDWAL_REC_STATE: {
        Raftpb__HardState *hs = raftpb__hard_state__unpack(NULL, n, d);
        if (hs == NULL)
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: the state at offset %" PRIu64 " does not decode", name, off);
        r->st->term = hs->term;
        r->st->vote = hs->vote;
        r->st->commit = hs->commit;
        raftpb__hard_state__free_unpacked(hs, NULL);
        return 0;
    }
    case ETCDWAL_REC_METADATA: {
        if (r->have_meta) {
            if (n != r->meta_len || (n > 0 && memcmp(d, r->meta, n) != 0))
                return fail(err, errlen, QERR_CORRUPT,
                            "%s: metadata at offset %" PRIu64
                            " differs from the log's (etcd's ErrMetadataConflict)",
                            name, off);
            return 0;
        }
        Etcdserverpb__Metadata *m = etcdserverpb__metadata__unpack(NULL, n, d);
        if (m == NULL || n > sizeof(r->meta)) {
            if (m != NULL)
                etcdserverpb__metadata__free_unpacked(m, NULL);
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: the metadata at offset %" PRIu64 " does not decode", name, off);
        }
        r->st->node_id = m->nodeid;
        r->st->cluster_id = m->clusterid;
        etcdserverpb__metadata__free_unpacked(m, NULL);
        if (n > 0)
            memcpy(r->meta, d, n);
        r->meta_len = n;
        r->have_meta = true;
        return 0;
    }
    case ETCDWAL_REC_CRC:
        /* a segment's first record: the running CRC so far */
        if (r->crc != 0 && rec->crc != r->crc)
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: crc record at offset %" PRIu64 " says %08x, the log before it %08x",
                        name, off, rec->crc, r->crc);
        r->crc = rec->crc;
        r->seeded = true;
        return 0;
    case ETCDWAL_REC_SNAPSHOT: {
        Walpb__Snapshot *s = walpb__snapshot__unpack(NULL, n, d);
        if (s == NULL)
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: the snapshot record at offset %" PRIu64 " does not decode", name, off);
        int rv = 0;
        if (s->index == r->start_index) {
            if (s->term != r->start_term)
                rv = fail(err, errlen, QERR_CORRUPT,
                          "%s: snapshot record at offset %" PRIu64 " has term %" PRIu64
                          " for index %" PRIu64 ", the snapshot file %" PRIu64,
                          name, off, s->term, s->index, r->start_term);
            r->match = true;
        }
        walpb__snapshot__free_unpacked(s, NULL);
        return rv;
    }
    default:
        return fail(err, errlen, QERR_CORRUPT,
                    "%s: record at offset %" PRIu64 " has unexpected type %" PRId64, name, off,
                    rec->type);
    }
}

int etcdwal_decode_segment(struct etcdwal_reader *r, const uint8_t *p, size_t n, bool last,
                           const char *name, char *err, size_t errlen)
{
    uint64_t off = 0;
    for (;;) {
        if (n - off < 8) {
            if (n - off == 0)
                return 0;
            if (!last)
                return fail(err, errlen, QERR_CORRUPT,
                            "%s: a partial length word at offset %" PRIu64
                            " (not the last segment)",
                            name, off);
            goto torn;
        }
        uint64_t word = le64(p + off);
        if (word == 0)
            return 0; /* the preallocated rest */
        uint64_t len = word & ~(0xffull << 56);
        uint64_t pad = (word >> 63) ? (word >> 56) & 7 : 0;
        if (len >= (uint64_t)ETCDWAL_MAX_RECORD - pad)
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: record at offset %" PRIu64 " is %" PRIu64
                        " bytes, over etcd's limit of 10 MiB",
                        name, off, len);
        if (len + pad > n - off - 8) {
            if (!last)
                return fail(err, errlen, QERR_CORRUPT,
                            "%s: record at offset %" PRIu64 " ends past the file (not the last "
                            "segment)",
                            name, off);
            goto torn;
        }
        const uint8_t *data = p + off + 8;
        Walpb__Record *rec = walpb__record__unpack(NULL, (size_t)len, data);
        bool bad = rec == NULL;
        if (!bad && rec->type != ETCDWAL_REC_CRC) {
            uint32_t c = crc32c_update(r->crc, rec->has_data ? rec->data.data : NULL,
                                       rec->has_data ? rec->data.len : 0);
            if (c != rec->crc) {
                bad = true;
            } else {
                r->crc = c;
            }
        }
        if (bad) {
            if (rec != NULL)
                walpb__record__free_unpacked(rec, NULL);
            if (last && torn_entry(data, (size_t)(len + pad), off + 8))
                goto torn;
            return fail(err, errlen, QERR_CORRUPT,
                        "%s: record at offset %" PRIu64 " %s (etcd's %s)", name, off,
                        rec == NULL ? "does not decode" : "fails its CRC check",
                        rec == NULL ? "unmarshal error" : "ErrCRCMismatch");
        }
        int rv = apply_record(r, rec, name, off, err, errlen);
        walpb__record__free_unpacked(rec, NULL);
        if (rv != 0)
            return rv;
        off += 8 + len + pad;
    }
torn:
    r->st->torn = true;
    snprintf(r->st->torn_at, sizeof(r->st->torn_at), "%s at offset %" PRIu64, name, off);
    return 0;
}

/* ---- snapshots ---- */

void etcdwal_snap_free(struct etcdwal_snap *s)
{
    free(s->data);
    memset(s, 0, sizeof(*s));
}

int etcdwal_snap_decode(const uint8_t *p, size_t n, struct etcdwal_snap *out, char *err,
                        size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return fail(err, errlen, QERR_CORRUPT, "empty snapshot file");
    Snappb__Snapshot *env = snappb__snapshot__unpack(NULL, n, p);
    if (env == NULL)
        return fail(err, errlen, QERR_CORRUPT, "the snapshot file does not decode");
    const uint8_t *d = env->has_data ? env->data.data : NULL;
    size_t dn = env->has_data ? env->data.len : 0;
    uint32_t c = crc32c_update(0, d, dn);
    if (!env->has_crc || c != env->crc) {
        snappb__snapshot__free_unpacked(env, NULL);
        return fail(err, errlen, QERR_CORRUPT, "the snapshot file fails its CRC check");
    }
    Raftpb__Snapshot *rs = raftpb__snapshot__unpack(NULL, dn, d);
    snappb__snapshot__free_unpacked(env, NULL);
    if (rs == NULL)
        return fail(err, errlen, QERR_CORRUPT, "the snapshot's raftpb.Snapshot does not decode");
    int rv = 0;
    if (rs->metadata == NULL) {
        rv = fail(err, errlen, QERR_CORRUPT, "the snapshot has no metadata");
        goto out;
    }
    out->index = rs->metadata->index;
    out->term = rs->metadata->term;
    const Raftpb__ConfState *cs = rs->metadata->conf_state;
    if (cs != NULL) {
        if (cs->n_voters > ETCDWAL_MAX_MEMBERS || cs->n_learners > ETCDWAL_MAX_MEMBERS) {
            rv = fail(err, errlen, QERR_CORRUPT, "the snapshot has %zu voters and %zu learners",
                      cs->n_voters, cs->n_learners);
            goto out;
        }
        if (cs->n_voters_outgoing > 0) {
            rv = fail(err, errlen, QERR_CORRUPT,
                      "the snapshot is in a joint configuration (etcd 3.4 makes none)");
            goto out;
        }
        for (size_t i = 0; i < cs->n_voters; i++)
            out->conf.voters[out->conf.n_voters++] = cs->voters[i];
        for (size_t i = 0; i < cs->n_learners; i++)
            out->conf.learners[out->conf.n_learners++] = cs->learners[i];
    }
    if (rs->has_data && rs->data.len > 0) {
        out->data = malloc(rs->data.len);
        if (out->data == NULL) {
            rv = -ENOMEM;
            goto out;
        }
        memcpy(out->data, rs->data.data, rs->data.len);
        out->len = rs->data.len;
    }
out:
    raftpb__snapshot__free_unpacked(rs, NULL);
    return rv;
}

/* ---- files ---- */

static int map_file(const char *path, uint8_t **p, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    *n = (size_t)sb.st_size;
    *p = NULL;
    if (*n > 0) {
        void *m = mmap(NULL, *n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = -errno;
            close(fd);
            return e;
        }
        *p = m;
    }
    close(fd);
    return 0;
}

static void unmap_file(uint8_t *p, size_t n)
{
    if (p != NULL)
        munmap(p, n);
}

struct name2 {
    uint64_t a, b;
    char name[64];
};

static int cmp_name(const void *x, const void *y)
{
    return strcmp(((const struct name2 *)x)->name, ((const struct name2 *)y)->name);
}

/* list_names lists <dir>'s files named %016x-%016x<suffix> (exactly),
 * sorted by name. *out is malloc'd. */
static int list_names(const char *dir, const char *suffix, struct name2 **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    size_t cap = 0, sl = strlen(suffix);
    struct dirent *de;
    int rv = 0;
    while ((de = readdir(d)) != NULL) {
        const char *s = de->d_name;
        if (strlen(s) != 33 + sl || 33 + sl >= sizeof((*out)->name) || s[16] != '-' ||
            strcmp(s + 33, suffix) != 0)
            continue;
        bool hex = true;
        for (int i = 0; i < 33 && hex; i++)
            hex = i == 16 || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (!hex)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            struct name2 *nn = realloc(*out, cap * sizeof(**out));
            if (nn == NULL) {
                rv = -ENOMEM;
                break;
            }
            *out = nn;
        }
        struct name2 *e = &(*out)[(*n)++];
        e->a = strtoull(s, NULL, 16);
        e->b = strtoull(s + 17, NULL, 16);
        memcpy(e->name, s, 33 + sl + 1); /* its length was checked above */
    }
    closedir(d);
    if (rv != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
        return rv;
    }
    if (*n > 1) /* qsort wants a non-NULL base even for none */
        qsort(*out, *n, sizeof(**out), cmp_name);
    return 0;
}

bool etcdwal_is_etcd(const char *member_dir)
{
    char dir[1200], path[1300];
    snprintf(dir, sizeof(dir), "%s/wal", member_dir);
    struct name2 *names;
    size_t n;
    if (list_names(dir, ".wal", &names, &n) != 0 || n == 0) {
        free(names);
        return false;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, names[0].name);
    free(names);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint8_t b[64];
    ssize_t got = pread(fd, b, sizeof(b), 0);
    close(fd);
    if (got < 10)
        return false;
    /* etcd's first frame: a length word, then a walpb.Record whose field 1
     * (type, varint) is 4 (crc). quorum's segments start with a u32 length
     * and a CRC-32C, then type 1. */
    uint64_t w = le64(b);
    uint64_t len = w & ~(0xffull << 56);
    if (len == 0 || len > (uint64_t)got - 8)
        return false;
    Walpb__Record *rec = walpb__record__unpack(NULL, (size_t)len, b + 8);
    bool ok = rec != NULL && rec->type == ETCDWAL_REC_CRC;
    if (rec != NULL)
        walpb__record__free_unpacked(rec, NULL);
    return ok;
}

void etcdwal_state_free(struct etcdwal_state *st)
{
    for (size_t i = 0; i < st->n_entries; i++)
        free(st->entries[i].data);
    free(st->entries);
    etcdwal_snap_free(&st->snap);
    memset(st, 0, sizeof(*st));
}

/* load_snap finds the newest .snap that reads back (etcd's snap.Load). */
static int load_snap(const char *member_dir, struct etcdwal_state *st, char *err, size_t errlen)
{
    char dir[1200], path[1300];
    snprintf(dir, sizeof(dir), "%s/snap", member_dir);
    struct name2 *names;
    size_t n;
    int rv = list_names(dir, ".snap", &names, &n);
    if (rv == -ENOENT)
        return 0;
    if (rv != 0)
        return fail(err, errlen, rv, "cannot list %s: %s", dir, strerror(-rv));
    for (size_t i = n; i-- > 0;) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i].name);
        uint8_t *p;
        size_t len;
        if (map_file(path, &p, &len) != 0)
            continue;
        char why[256];
        struct etcdwal_snap s;
        rv = etcdwal_snap_decode(p, len, &s, why, sizeof(why));
        unmap_file(p, len);
        if (rv == -ENOMEM) {
            free(names);
            return rv;
        }
        if (rv != 0)
            continue; /* etcd renames it .broken and tries the next */
        st->snap = s;
        st->has_snap = true;
        break;
    }
    free(names);
    return 0;
}

int etcdwal_read(const char *member_dir, struct etcdwal_state *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof(*st));
    int rv = load_snap(member_dir, st, err, errlen);
    if (rv != 0)
        return rv;
    char dir[1200], path[1300];
    snprintf(dir, sizeof(dir), "%s/wal", member_dir);
    struct name2 *names;
    size_t n;
    if ((rv = list_names(dir, ".wal", &names, &n)) != 0 || n == 0) {
        etcdwal_state_free(st);
        free(names);
        return fail(err, errlen, rv ? rv : -ENOENT, "no etcd WAL in %s", dir);
    }
    /* the last segment that may hold the snapshot's index (searchIndex) */
    size_t first = n;
    for (size_t i = n; i-- > 0;)
        if (names[i].b <= st->snap.index) {
            first = i;
            break;
        }
    if (first == n) {
        rv = fail(err, errlen, QERR_CORRUPT, "%s: no segment holds the snapshot at index %" PRIu64,
                  dir, st->snap.index);
        goto out;
    }
    for (size_t i = first + 1; i < n; i++)
        if (names[i].a != names[i - 1].a + 1) {
            rv = fail(err, errlen, QERR_CORRUPT,
                      "%s: segment %s does not follow %s (sequence numbers must be consecutive)",
                      dir, names[i].name, names[i - 1].name);
            goto out;
        }
    struct etcdwal_reader r = {
        .start_index = st->snap.index, .start_term = st->snap.term, .st = st};
    for (size_t i = first; i < n && rv == 0 && !st->torn; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i].name);
        uint8_t *p;
        size_t len;
        if ((rv = map_file(path, &p, &len)) != 0) {
            fail(err, errlen, rv, "cannot read %s: %s", path, strerror(-rv));
            break;
        }
        rv = etcdwal_decode_segment(&r, p, len, i + 1 == n, path, err, errlen);
        unmap_file(p, len);
    }
    if (rv == 0 && !r.match)
        rv = fail(err, errlen, QERR_CORRUPT,
                  "%s: no snapshot record for the snapshot at index %" PRIu64 ", term %" PRIu64
                  " (etcd's ErrSnapshotNotFound)",
                  dir, st->snap.index, st->snap.term);
    if (rv == 0 && !r.have_meta)
        rv = fail(err, errlen, QERR_CORRUPT, "%s: the log has no metadata record", dir);
out:
    free(names);
    if (rv != 0) {
        char keep[ETCDWAL_ERR_LEN];
        snprintf(keep, sizeof(keep), "%s", err ? err : "");
        etcdwal_state_free(st);
        if (err != NULL)
            snprintf(err, errlen, "%s", keep);
    }
    return rv;
}

/* ---- members (JSON) ---- */

static void take_urls(json_t *arr, char (*out)[300], size_t *n)
{
    *n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (json_is_string(v) && *n < ETCDWAL_MAX_URLS)
            snprintf(out[(*n)++], 300, "%s", json_string_value(v));
    }
}

int etcdwal_member_json(const uint8_t *json, size_t len, struct etcdwal_member *out)
{
    memset(out, 0, sizeof(*out));
    /* ids are uint64 and may not fit jansson's integers: read numbers as
     * reals and take the id from elsewhere (the conf change's NodeID) */
    json_t *j = json_loadb((const char *)json, len, JSON_DECODE_INT_AS_REAL, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return QERR_CORRUPT;
    }
    json_t *v = json_object_get(j, "name");
    if (json_is_string(v))
        snprintf(out->name, sizeof(out->name), "%s", json_string_value(v));
    take_urls(json_object_get(j, "peerURLs"), out->peer, &out->n_peer);
    take_urls(json_object_get(j, "clientURLs"), out->client, &out->n_client);
    json_decref(j);
    return 0;
}

/* child: node |n|'s child named |name| in the v2 store's JSON */
static json_t *child(json_t *n, const char *name)
{
    return json_object_get(json_object_get(n, "Children"), name);
}

int etcdwal_v2_members(const uint8_t *json, size_t len, struct etcdwal_member *out, size_t max)
{
    json_t *j = json_loadb((const char *)json, len, JSON_DECODE_INT_AS_REAL, NULL);
    json_t *root = json_object_get(j, "Root");
    if (!json_is_object(root)) {
        json_decref(j);
        return QERR_CORRUPT;
    }
    json_t *ms = json_object_get(child(child(root, "0"), "members"), "Children");
    int n = 0;
    const char *key;
    json_t *m;
    json_object_foreach(ms, key, m)
    {
        if ((size_t)n >= max)
            break;
        char *end;
        errno = 0;
        unsigned long long id = strtoull(key, &end, 16);
        if (*key == '\0' || *end != '\0' || errno != 0 || id == 0)
            continue;
        struct etcdwal_member *o = &out[n];
        memset(o, 0, sizeof(*o));
        o->id = id;
        json_t *ra = json_object_get(child(m, "raftAttributes"), "Value");
        json_t *at = json_object_get(child(m, "attributes"), "Value");
        struct etcdwal_member tmp;
        if (json_is_string(ra) && etcdwal_member_json((const uint8_t *)json_string_value(ra),
                                                      json_string_length(ra), &tmp) == 0) {
            memcpy(o->peer, tmp.peer, sizeof(o->peer));
            o->n_peer = tmp.n_peer;
        }
        if (json_is_string(at) && etcdwal_member_json((const uint8_t *)json_string_value(at),
                                                      json_string_length(at), &tmp) == 0) {
            memcpy(o->name, tmp.name, sizeof(o->name));
            memcpy(o->client, tmp.client, sizeof(o->client));
            o->n_client = tmp.n_client;
        }
        n++;
    }
    json_decref(j);
    return n;
}
