/* mvcc/codec.c: revision keys and the mvccpb.KeyValue wire format, by hand
 * so mvcc/ needs no protobuf-c. The encoding is protobuf's canonical one
 * (fields in number order, proto3 zero values omitted), so the stored bytes
 * are what etcd stores and a response can copy them as they are. */
#include "mvcc/mvcc_int.h"

#include <errno.h>
#include <string.h>

#include "base/err.h"

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

size_t mvcc_revkey_put(uint8_t *out, int64_t main, int64_t sub, bool tomb)
{
    put_be64(out, (uint64_t)main);
    out[8] = '_';
    put_be64(out + 9, (uint64_t)sub);
    if (!tomb)
        return MVCC_REVKEY_LEN;
    out[17] = 't';
    return MVCC_REVKEY_MAX;
}

int mvcc_revkey_parse(const uint8_t *p, size_t n, int64_t *main, int64_t *sub, bool *tomb)
{
    if (n != MVCC_REVKEY_LEN && !(n == MVCC_REVKEY_MAX && p[17] == 't'))
        return QERR_CORRUPT;
    if (p[8] != '_')
        return QERR_CORRUPT;
    *main = (int64_t)get_be64(p);
    *sub = (int64_t)get_be64(p + 9);
    *tomb = n == MVCC_REVKEY_MAX;
    return 0;
}

/* Tags: (field << 3) | wire type. */
enum {
    TAG_KEY = 1 << 3 | 2,
    TAG_CREATE = 2 << 3 | 0,
    TAG_MOD = 3 << 3 | 0,
    TAG_VERSION = 4 << 3 | 0,
    TAG_VALUE = 5 << 3 | 2,
    TAG_LEASE = 6 << 3 | 0,
};

size_t mvcc_kv_encoded_size(const struct mvcc_kv *kv)
{
    size_t n = 0;
    if (kv->key_len)
        n += 1 + varint_size(kv->key_len) + kv->key_len;
    if (kv->create_revision)
        n += 1 + varint_size((uint64_t)kv->create_revision);
    if (kv->mod_revision)
        n += 1 + varint_size((uint64_t)kv->mod_revision);
    if (kv->version)
        n += 1 + varint_size((uint64_t)kv->version);
    if (kv->value_len)
        n += 1 + varint_size(kv->value_len) + kv->value_len;
    if (kv->lease)
        n += 1 + varint_size((uint64_t)kv->lease);
    return n;
}

int mvcc_kv_encode(struct buf *b, const struct mvcc_kv *kv)
{
    size_t n = mvcc_kv_encoded_size(kv);
    int rv = buf_reserve(b, n);
    if (rv != 0)
        return rv;
    uint8_t *p = b->data + b->len;
    /* int64 fields are varints of the two's complement (10 bytes if < 0),
     * as protobuf does. */
    if (kv->key_len) {
        *p++ = TAG_KEY;
        p += varint_put(p, kv->key_len);
        memcpy(p, kv->key, kv->key_len);
        p += kv->key_len;
    }
    if (kv->create_revision) {
        *p++ = TAG_CREATE;
        p += varint_put(p, (uint64_t)kv->create_revision);
    }
    if (kv->mod_revision) {
        *p++ = TAG_MOD;
        p += varint_put(p, (uint64_t)kv->mod_revision);
    }
    if (kv->version) {
        *p++ = TAG_VERSION;
        p += varint_put(p, (uint64_t)kv->version);
    }
    if (kv->value_len) {
        *p++ = TAG_VALUE;
        p += varint_put(p, kv->value_len);
        memcpy(p, kv->value, kv->value_len);
        p += kv->value_len;
    }
    if (kv->lease) {
        *p++ = TAG_LEASE;
        p += varint_put(p, (uint64_t)kv->lease);
    }
    b->len += n;
    return 0;
}

int mvcc_kv_decode(const uint8_t *p, size_t n, struct mvcc_kv *kv)
{
    static const uint8_t empty[1];
    const uint8_t *end = p + n;
    memset(kv, 0, sizeof(*kv));
    kv->key = kv->value = empty;
    kv->raw = n ? p : empty;
    kv->raw_len = n;
    while (p < end) {
        uint64_t tag, v;
        size_t k = varint_get(p, end, &tag);
        if (k == 0 || tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
            return QERR_CORRUPT;
        p += k;
        unsigned wt = tag & 7;
        switch (wt) {
        case 0:
            k = varint_get(p, end, &v);
            if (k == 0)
                return QERR_CORRUPT;
            p += k;
            break;
        case 1:
        case 5: {
            size_t w = wt == 1 ? 8 : 4;
            if ((size_t)(end - p) < w || (tag >> 3) <= 6)
                return QERR_CORRUPT;
            p += w;
            continue; /* no KeyValue field is fixed-width: skip */
        }
        case 2:
            k = varint_get(p, end, &v);
            if (k == 0 || v > (uint64_t)(end - p - k))
                return QERR_CORRUPT;
            p += k;
            if ((tag >> 3) <= 6 && tag != TAG_KEY && tag != TAG_VALUE)
                return QERR_CORRUPT;
            if (tag == TAG_KEY) {
                kv->key = p;
                kv->key_len = v;
            } else if (tag == TAG_VALUE) {
                kv->value = p;
                kv->value_len = v;
            }
            p += v;
            continue;
        default:
            return QERR_CORRUPT; /* groups (3, 4) are not proto3 */
        }
        switch (tag) {
        case TAG_CREATE:
            kv->create_revision = (int64_t)v;
            break;
        case TAG_MOD:
            kv->mod_revision = (int64_t)v;
            break;
        case TAG_VERSION:
            kv->version = (int64_t)v;
            break;
        case TAG_LEASE:
            kv->lease = (int64_t)v;
            break;
        default:
            /* Field 1 or 5 sent as a varint is a type mismatch. */
            if ((tag >> 3) == 1 || (tag >> 3) == 5)
                return QERR_CORRUPT;
            break;
        }
    }
    return 0;
}
