/* base/buf.c: growable byte buffers and protobuf varints. */
#include "base/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int buf_grow(struct buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return 0;
    size_t need = b->len + n;
    if (need < b->len)
        return -ENOMEM;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append_byte(struct buf *b, uint8_t c)
{
    return buf_append(b, &c, 1);
}

int buf_append_varint(struct buf *b, uint64_t v)
{
    int rv = buf_reserve(b, 10);
    if (rv != 0)
        return rv;
    b->len += varint_put(b->data + b->len, v);
    return 0;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

size_t varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

size_t varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        r |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if ((p[i] & 0x80) == 0) {
            if (i == 9 && p[i] > 1)
                return 0;
            *v = r;
            return i + 1;
        }
    }
    return 0;
}
