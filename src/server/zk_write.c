/* server/zk_write.c: quorumzk.Write by hand (zk_write.h). */
#include "server/zk_write.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

/* the tags of the five fields: (number << 3) | wire type */
#define TAG_SESSION 0x08 /* 1, varint */
#define TAG_NOW 0x10     /* 2, varint */
#define TAG_ID 0x1a      /* 3, length-delimited */
#define TAG_REQUEST 0x22 /* 4, length-delimited */
#define TAG_MEMBER 0x28  /* 5, varint */

size_t zk_write_size(const Quorumzk__Write *w)
{
    size_t n = 0;
    if (w->session != 0)
        n += 1 + varint_size((uint64_t)w->session);
    if (w->now_ms != 0)
        n += 1 + varint_size((uint64_t)w->now_ms);
    for (size_t i = 0; i < w->n_ids; i++) {
        size_t l = strlen(w->ids[i]);
        n += 1 + varint_size(l) + l;
    }
    if (w->request.len != 0)
        n += 1 + varint_size(w->request.len) + w->request.len;
    if (w->member != 0)
        n += 1 + varint_size(w->member);
    return n;
}

size_t zk_write_pack(const Quorumzk__Write *w, uint8_t *out)
{
    uint8_t *p = out;
    if (w->session != 0) {
        *p++ = TAG_SESSION;
        p += varint_put(p, (uint64_t)w->session);
    }
    if (w->now_ms != 0) {
        *p++ = TAG_NOW;
        p += varint_put(p, (uint64_t)w->now_ms);
    }
    for (size_t i = 0; i < w->n_ids; i++) {
        size_t l = strlen(w->ids[i]);
        *p++ = TAG_ID;
        p += varint_put(p, l);
        memcpy(p, w->ids[i], l);
        p += l;
    }
    if (w->request.len != 0) {
        *p++ = TAG_REQUEST;
        p += varint_put(p, w->request.len);
        memcpy(p, w->request.data, w->request.len);
        p += w->request.len;
    }
    if (w->member != 0) {
        *p++ = TAG_MEMBER;
        p += varint_put(p, w->member);
    }
    return (size_t)(p - out);
}

/* the layout's order: each tag's place, ids may repeat */
static int rank(uint8_t tag)
{
    switch (tag) {
    case TAG_SESSION:
        return 1;
    case TAG_NOW:
        return 2;
    case TAG_ID:
        return 3;
    case TAG_REQUEST:
        return 4;
    case TAG_MEMBER:
        return 5;
    default:
        return 0;
    }
}

/* walk reads one field at *|at|: its tag, and its value (a varint in *v)
 * or its bytes ([*b, *b + *bl)). false if it is not in the layout. */
static bool walk(const uint8_t **at, const uint8_t *end, uint8_t *tag, uint64_t *v,
                 const uint8_t **b, size_t *bl)
{
    const uint8_t *p = *at;
    *tag = *p++;
    size_t k = varint_get(p, end, v);
    if (k == 0)
        return false;
    p += k;
    if (*tag == TAG_ID || *tag == TAG_REQUEST) {
        /* protobuf-c's bounds on a length: five bytes of it, under 2 GiB */
        if (k > 5 || *v > INT_MAX || *v > (uint64_t)(end - p))
            return false;
        *b = p;
        *bl = (size_t)*v;
        p += *bl;
    }
    *at = p;
    return true;
}

Quorumzk__Write *zk_write_unpack(const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    /* first pass: the layout, the ids' count and bytes */
    size_t ids = 0, id_bytes = 0;
    int last = 0;
    for (const uint8_t *at = p; at < end;) {
        uint8_t tag;
        uint64_t v;
        const uint8_t *b = NULL;
        size_t bl = 0;
        int r = rank(*at);
        if (r == 0 || r < last || (r == last && r != 3) || !walk(&at, end, &tag, &v, &b, &bl))
            return NULL;
        last = r;
        if (tag == TAG_ID) {
            ids++;
            id_bytes += bl + 1;
        }
    }
    size_t head = (sizeof(Quorumzk__Write) + sizeof(char *) - 1) / sizeof(char *) * sizeof(char *);
    Quorumzk__Write *w = malloc(head + ids * sizeof(char *) + id_bytes);
    if (w == NULL)
        return NULL;
    *w = (Quorumzk__Write)QUORUMZK__WRITE__INIT;
    w->ids = ids > 0 ? (char **)((char *)w + head) : NULL;
    char *s = (char *)w + head + ids * sizeof(char *);
    /* second pass: the values */
    for (const uint8_t *at = p; at < end;) {
        uint8_t tag;
        uint64_t v;
        const uint8_t *b = NULL;
        size_t bl = 0;
        walk(&at, end, &tag, &v, &b, &bl);
        switch (tag) {
        case TAG_SESSION:
            w->session = (int64_t)v;
            break;
        case TAG_NOW:
            w->now_ms = (int64_t)v;
            break;
        case TAG_ID:
            if (bl > 0)
                memcpy(s, b, bl);
            s[bl] = '\0';
            w->ids[w->n_ids++] = s;
            s += bl + 1;
            break;
        case TAG_REQUEST:
            w->request.data = (uint8_t *)b;
            w->request.len = bl;
            break;
        default:
            w->member = v;
            break;
        }
    }
    return w;
}
