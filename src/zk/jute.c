/* zk/jute.c: jute primitives, the table-driven record codec, framing. */
#include "zk/jute.h"

#include <errno.h>
#include <string.h>

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fail(struct jute_in *in)
{
    if (in->err == 0)
        in->err = -EBADMSG;
    in->p = in->end;
}

int32_t jute_get_int(struct jute_in *in)
{
    if (in->err != 0 || jute_in_left(in) < 4) {
        fail(in);
        return 0;
    }
    uint32_t v = be32(in->p);
    in->p += 4;
    return (int32_t)v;
}

int64_t jute_get_long(struct jute_in *in)
{
    if (in->err != 0 || jute_in_left(in) < 8) {
        fail(in);
        return 0;
    }
    uint64_t v = (uint64_t)be32(in->p) << 32 | be32(in->p + 4);
    in->p += 8;
    return (int64_t)v;
}

bool jute_get_bool(struct jute_in *in)
{
    if (in->err != 0 || jute_in_left(in) < 1) {
        fail(in);
        return false;
    }
    return *in->p++ != 0;
}

struct jute_bytes jute_get_bytes(struct jute_in *in)
{
    struct jute_bytes b = {NULL, -1};
    int32_t n = jute_get_int(in);
    if (in->err != 0)
        return b;
    if (n == -1)
        return b;
    if (n < -1 || (size_t)n > jute_in_left(in)) {
        fail(in);
        return b;
    }
    b.p = in->p;
    b.len = n;
    in->p += n;
    return b;
}

static void put(struct jute_out *o, const void *p, size_t n)
{
    if (o->err == 0 && buf_append(o->b, p, n) != 0)
        o->err = -ENOMEM;
}

void jute_put_int(struct jute_out *o, int32_t v)
{
    uint32_t u = (uint32_t)v;
    uint8_t p[4] = {(uint8_t)(u >> 24), (uint8_t)(u >> 16), (uint8_t)(u >> 8), (uint8_t)u};
    put(o, p, 4);
}

void jute_put_long(struct jute_out *o, int64_t v)
{
    uint64_t u = (uint64_t)v;
    uint8_t p[8];
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(u >> (56 - 8 * i));
    put(o, p, 8);
}

void jute_put_bool(struct jute_out *o, bool v)
{
    uint8_t c = v ? 1 : 0;
    put(o, &c, 1);
}

void jute_put_bytes(struct jute_out *o, struct jute_bytes b)
{
    if (b.len < 0 || (b.p == NULL && b.len > 0)) {
        jute_put_int(o, -1);
        return;
    }
    jute_put_int(o, b.len);
    if (b.len > 0)
        put(o, b.p, (size_t)b.len);
}

void jute_put_raw(struct jute_out *o, const void *p, size_t n)
{
    put(o, p, n);
}

static size_t type_min(enum jute_type t, const struct jute_record *rec)
{
    switch (t) {
    case JUTE_INT:
        return 4;
    case JUTE_LONG:
        return 8;
    case JUTE_BOOL:
        return 1;
    case JUTE_BUFFER:
    case JUTE_USTRING:
    case JUTE_VECTOR:
        return 4;
    case JUTE_RECORD:
        return jute_record_min(rec);
    }
    return 1;
}

size_t jute_record_min(const struct jute_record *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_fields; i++)
        n += type_min(r->fields[i].type, r->fields[i].rec);
    return n;
}

static int decode_vector(const struct jute_field *f, struct jute_in *in, struct jute_vec *v,
                         struct arena *a)
{
    v->v = NULL;
    v->n = jute_get_int(in);
    if (in->err != 0 || v->n == -1)
        return in->err;
    size_t esize = f->elem == JUTE_RECORD ? f->rec->size : sizeof(struct jute_bytes);
    size_t emin = type_min(f->elem, f->rec);
    if (emin == 0)
        emin = 1;
    /* every element takes |emin| bytes at least: a count the rest of the
     * input cannot hold is malformed, before anything is allocated */
    if (v->n < -1 || (size_t)v->n > jute_in_left(in) / emin) {
        fail(in);
        v->n = -1;
        return in->err;
    }
    if (v->n == 0)
        return 0;
    uint8_t *items = arena_alloc(a, esize * (size_t)v->n);
    if (items == NULL) {
        in->err = -ENOMEM;
        v->n = -1;
        return in->err;
    }
    v->v = items;
    for (int32_t i = 0; i < v->n && in->err == 0; i++) {
        void *e = items + esize * (size_t)i;
        if (f->elem == JUTE_RECORD)
            jute_decode(f->rec, in, e, a);
        else
            *(struct jute_bytes *)e = jute_get_bytes(in);
    }
    return in->err;
}

int jute_decode(const struct jute_record *r, struct jute_in *in, void *out, struct arena *a)
{
    memset(out, 0, r->size);
    uint8_t *base = out;
    for (size_t i = 0; i < r->n_fields && in->err == 0; i++) {
        const struct jute_field *f = &r->fields[i];
        void *at = base + f->offset;
        switch (f->type) {
        case JUTE_INT:
            *(int32_t *)at = jute_get_int(in);
            break;
        case JUTE_LONG:
            *(int64_t *)at = jute_get_long(in);
            break;
        case JUTE_BOOL:
            *(bool *)at = jute_get_bool(in);
            break;
        case JUTE_BUFFER:
        case JUTE_USTRING:
            *(struct jute_bytes *)at = jute_get_bytes(in);
            break;
        case JUTE_RECORD:
            jute_decode(f->rec, in, at, a);
            break;
        case JUTE_VECTOR:
            decode_vector(f, in, at, a);
            break;
        }
    }
    return in->err;
}

int jute_encode(const struct jute_record *r, struct jute_out *o, const void *val)
{
    const uint8_t *base = val;
    for (size_t i = 0; i < r->n_fields && o->err == 0; i++) {
        const struct jute_field *f = &r->fields[i];
        const void *at = base + f->offset;
        switch (f->type) {
        case JUTE_INT:
            jute_put_int(o, *(const int32_t *)at);
            break;
        case JUTE_LONG:
            jute_put_long(o, *(const int64_t *)at);
            break;
        case JUTE_BOOL:
            jute_put_bool(o, *(const bool *)at);
            break;
        case JUTE_BUFFER:
        case JUTE_USTRING:
            jute_put_bytes(o, *(const struct jute_bytes *)at);
            break;
        case JUTE_RECORD:
            jute_encode(f->rec, o, at);
            break;
        case JUTE_VECTOR: {
            const struct jute_vec *v = at;
            if (v->n < 0 || (v->v == NULL && v->n > 0)) {
                jute_put_int(o, -1);
                break;
            }
            jute_put_int(o, v->n);
            size_t esize = f->elem == JUTE_RECORD ? f->rec->size : sizeof(struct jute_bytes);
            for (int32_t k = 0; k < v->n && o->err == 0; k++) {
                const void *e = (const uint8_t *)v->v + esize * (size_t)k;
                if (f->elem == JUTE_RECORD)
                    jute_encode(f->rec, o, e);
                else
                    jute_put_bytes(o, *(const struct jute_bytes *)e);
            }
            break;
        }
        }
    }
    return o->err;
}

int jute_frame(const uint8_t *p, size_t len, size_t max, const uint8_t **pkt, size_t *pkt_len,
               size_t *used)
{
    if (len < 4)
        return 0;
    int32_t n = (int32_t)be32(p);
    if (n < 0 || (size_t)n > max)
        return -EMSGSIZE;
    if (len - 4 < (size_t)n)
        return 0;
    *pkt = p + 4;
    *pkt_len = (size_t)n;
    *used = 4 + (size_t)n;
    return 1;
}

size_t jute_frame_begin(struct jute_out *o)
{
    size_t at = o->b->len;
    jute_put_int(o, 0);
    return at;
}

void jute_frame_end(struct jute_out *o, size_t at)
{
    if (o->err != 0 || o->b->len < at + 4)
        return;
    uint32_t n = (uint32_t)(o->b->len - at - 4);
    uint8_t *p = o->b->data + at;
    p[0] = (uint8_t)(n >> 24);
    p[1] = (uint8_t)(n >> 16);
    p[2] = (uint8_t)(n >> 8);
    p[3] = (uint8_t)n;
}
