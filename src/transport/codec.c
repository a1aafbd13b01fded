/* transport/codec.c: struct raft_msg to bytes and back (see WIRE FORMAT in
 * transport.h). Decoding reads bytes from other machines, so every length
 * and count is checked against what is left of the input before it is used:
 * nothing here may crash or allocate more than the input can justify. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

#define FLAG_REJECT 1u
#define FLAG_FORCE 2u
#define FLAG_SNAP 4u
#define FLAGS_ALL (FLAG_REJECT | FLAG_FORCE | FLAG_SNAP)

size_t transport_msg_size(const struct raft_msg *m)
{
    size_t n = 2;
    n += varint_size(m->from) + varint_size(m->to) + varint_size(m->term);
    n += varint_size(m->log_term) + varint_size(m->index) + varint_size(m->commit);
    n += varint_size(m->reject_hint) + varint_size(m->ctx);
    n += varint_size(m->n_entries);
    for (size_t i = 0; i < m->n_entries; i++) {
        const struct raft_entry *e = &m->entries[i];
        n += varint_size(e->term) + varint_size(e->index) + 1 + varint_size(e->len) + e->len;
    }
    if (m->snapshot != NULL) {
        const struct raft_snapshot *s = m->snapshot;
        n += varint_size(s->index) + varint_size(s->term);
        n += varint_size(s->conf.n_voters) + varint_size(s->conf.n_learners);
        for (uint32_t i = 0; i < s->conf.n_voters && i < RAFT_MAX_MEMBERS; i++)
            n += varint_size(s->conf.voters[i]);
        for (uint32_t i = 0; i < s->conf.n_learners && i < RAFT_MAX_MEMBERS; i++)
            n += varint_size(s->conf.learners[i]);
        n += varint_size(s->len) + s->len;
    }
    return n;
}

int transport_msg_encode(const struct raft_msg *m, struct buf *out)
{
    if (!transport_msg_type_ok(m->type) || (m->n_entries > 0 && m->entries == NULL))
        return -EINVAL;
    for (size_t i = 0; i < m->n_entries; i++)
        if (m->entries[i].len > 0 && m->entries[i].data == NULL)
            return -EINVAL;
    const struct raft_snapshot *s = m->snapshot;
    if (s != NULL && (s->conf.n_voters > RAFT_MAX_MEMBERS ||
                      s->conf.n_learners > RAFT_MAX_MEMBERS || (s->len > 0 && s->data == NULL)))
        return -EINVAL;

    size_t need = transport_msg_size(m);
    if (buf_reserve(out, need) != 0)
        return -ENOMEM;
    /* room is reserved: from here on nothing can fail */
    uint8_t *p = out->data + out->len;
    *p++ = m->type;
    *p++ = (uint8_t)((m->reject ? FLAG_REJECT : 0) | (m->force ? FLAG_FORCE : 0) |
                     (s != NULL ? FLAG_SNAP : 0));
    uint64_t fixed[] = {m->from,   m->to,          m->term, m->log_term, m->index,
                        m->commit, m->reject_hint, m->ctx,  m->n_entries};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        p += varint_put(p, fixed[i]);
    for (size_t i = 0; i < m->n_entries; i++) {
        const struct raft_entry *e = &m->entries[i];
        p += varint_put(p, e->term);
        p += varint_put(p, e->index);
        *p++ = e->type;
        p += varint_put(p, e->len);
        if (e->len > 0)
            memcpy(p, e->data, e->len);
        p += e->len;
    }
    if (s != NULL) {
        p += varint_put(p, s->index);
        p += varint_put(p, s->term);
        p += varint_put(p, s->conf.n_voters);
        for (uint32_t i = 0; i < s->conf.n_voters; i++)
            p += varint_put(p, s->conf.voters[i]);
        p += varint_put(p, s->conf.n_learners);
        for (uint32_t i = 0; i < s->conf.n_learners; i++)
            p += varint_put(p, s->conf.learners[i]);
        p += varint_put(p, s->len);
        if (s->len > 0)
            memcpy(p, s->data, s->len);
        p += s->len;
    }
    out->len = (size_t)(p - out->data);
    return 0;
}

/* A read cursor over untrusted input. */
struct cur {
    const uint8_t *p, *end;
};

static int get_varint(struct cur *c, uint64_t *v)
{
    size_t n = varint_get(c->p, c->end, v);
    if (n == 0)
        return -EINVAL;
    c->p += n;
    return 0;
}

static int get_u8(struct cur *c, uint8_t *v)
{
    if (c->p >= c->end)
        return -EINVAL;
    *v = *c->p++;
    return 0;
}

/* get_bytes takes a length-prefixed byte string without copying. */
static int get_bytes(struct cur *c, const void **data, size_t *len)
{
    uint64_t n;
    if (get_varint(c, &n) != 0 || n > (uint64_t)(c->end - c->p))
        return -EINVAL;
    *data = n > 0 ? c->p : NULL;
    *len = (size_t)n;
    c->p += n;
    return 0;
}

static int get_members(struct cur *c, uint64_t *ids, uint32_t *count)
{
    uint64_t n;
    if (get_varint(c, &n) != 0 || n > RAFT_MAX_MEMBERS)
        return -EINVAL;
    for (uint64_t i = 0; i < n; i++)
        if (get_varint(c, &ids[i]) != 0)
            return -EINVAL;
    *count = (uint32_t)n;
    return 0;
}

int transport_msg_decode(const void *bytes, size_t len, struct transport_msg_view *v)
{
    memset(v, 0, sizeof(*v));
    struct cur c = {bytes, (const uint8_t *)bytes + len};
    struct raft_msg *m = &v->msg;
    uint8_t type, flags;
    if (len == 0 || get_u8(&c, &type) != 0 || get_u8(&c, &flags) != 0)
        return -EINVAL;
    if (!transport_msg_type_ok(type) || (flags & ~FLAGS_ALL) != 0)
        return -EINVAL;
    m->type = type;
    m->reject = (flags & FLAG_REJECT) != 0;
    m->force = (flags & FLAG_FORCE) != 0;
    uint64_t *fields[] = {&m->from,  &m->to,     &m->term,        &m->log_term,
                          &m->index, &m->commit, &m->reject_hint, &m->ctx};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (get_varint(&c, fields[i]) != 0)
            return -EINVAL;
    uint64_t n;
    if (get_varint(&c, &n) != 0)
        return -EINVAL;
    /* an entry takes at least 4 bytes (term, index, type, len): a count the
     * remaining input cannot hold is garbage, not an allocation size */
    if (n > (uint64_t)(c.end - c.p) / 4)
        return -EINVAL;
    if (n > 0) {
        v->entries = calloc((size_t)n, sizeof(*v->entries));
        if (v->entries == NULL)
            return -ENOMEM;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct raft_entry *e = &v->entries[i];
        if (get_varint(&c, &e->term) != 0 || get_varint(&c, &e->index) != 0 ||
            get_u8(&c, &e->type) != 0 || get_bytes(&c, &e->data, &e->len) != 0)
            goto bad;
    }
    m->entries = v->entries;
    m->n_entries = (size_t)n;
    if (flags & FLAG_SNAP) {
        struct raft_snapshot *s = &v->snap;
        if (get_varint(&c, &s->index) != 0 || get_varint(&c, &s->term) != 0 ||
            get_members(&c, s->conf.voters, &s->conf.n_voters) != 0 ||
            get_members(&c, s->conf.learners, &s->conf.n_learners) != 0 ||
            get_bytes(&c, &s->data, &s->len) != 0)
            goto bad;
        m->snapshot = s;
    }
    if (c.p != c.end)
        goto bad;
    return 0;
bad:
    transport_msg_view_free(v);
    return -EINVAL;
}

void transport_msg_view_free(struct transport_msg_view *v)
{
    free(v->entries);
    memset(v, 0, sizeof(*v));
}
