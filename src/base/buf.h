/* base/buf.h: a growable byte buffer.
 *
 * A zeroed struct buf is an empty buffer. buf_* functions that grow return 0
 * or -ENOMEM; on -ENOMEM the buffer is unchanged. |data| is owned by the
 * buffer and moves when it grows: do not keep pointers into it across a call
 * that appends. */
#ifndef QUORUM_BASE_BUF_H
#define QUORUM_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
    uint8_t *data;
    size_t len;
    size_t cap;
};

/* buf_grow is buf_reserve's way when the room is not there: it reallocates. */
int buf_grow(struct buf *b, size_t n);

/* buf_reserve makes room for |n| more bytes without changing len. Inline,
 * as buf_append: the encoders append a few bytes at a time, and the room
 * is almost always there already. */
static inline int buf_reserve(struct buf *b, size_t n)
{
    return b->cap - b->len >= n ? 0 : buf_grow(b, n);
}

static inline int buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (b->cap - b->len < n) {
        int rv = buf_grow(b, n);
        if (rv != 0)
            return rv;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int buf_append_byte(struct buf *b, uint8_t c);
/* buf_append_varint appends |v| as a protobuf base-128 varint. */
int buf_append_varint(struct buf *b, uint64_t v);
/* buf_consume drops the first |n| bytes (n <= len). */
void buf_consume(struct buf *b, size_t n);
static inline void buf_reset(struct buf *b) /* len = 0, keeps memory */
{
    b->len = 0;
}
void buf_free(struct buf *b); /* frees memory, back to empty */

/* bytes_compare orders byte strings as memcmp, a proper prefix first (the
 * order of etcd keys and of Go's bytes.Compare). Inline: the key index
 * calls it on its hottest path. */
static inline int bytes_compare(const void *a, size_t an, const void *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn;
}

/* varint_size is the number of bytes buf_append_varint writes for |v|. */
size_t varint_size(uint64_t v);
/* varint_put writes |v| at |p| (room for 10 bytes) and returns the length. */
size_t varint_put(uint8_t *p, uint64_t v);
/* varint_get reads a varint from [p, end); returns bytes read, 0 if
 * truncated or longer than 10 bytes. */
size_t varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v);

#endif
