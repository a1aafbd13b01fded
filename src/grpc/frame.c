/* grpc/frame.c: the pure parts of gRPC framing, kept apart from the HTTP/2
 * and libuv code so unit tests and fuzzers reach them directly: the
 * length-prefixed message decoder and grpc-message percent-encoding. */
#include <errno.h>
#include <string.h>

#include "grpc/grpc_int.h"
#include "base/text.h"

void grpc_decoder_init(struct grpc_decoder *d, size_t max)
{
    memset(d, 0, sizeof(*d));
    d->max = max;
}

void grpc_decoder_free(struct grpc_decoder *d)
{
    buf_free(&d->msg);
}

int grpc_decoder_partial(const struct grpc_decoder *d)
{
    return d->hdr_len > 0 || d->in_body;
}

/* parse_prefix checks a complete 5-byte prefix and sets d->want. */
static int parse_prefix(struct grpc_decoder *d, const uint8_t *h)
{
    uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
    /* grpc-go's order: the size first (recvMsg), then the flag
     * (checkRecvPayload) */
    if (len > d->max) {
        d->bad_len = len;
        return GRPC_DEC_TOO_LARGE;
    }
    if (h[0] != 0) {
        d->bad_flag = h[0];
        return h[0] == 1 ? GRPC_DEC_COMPRESSED : GRPC_DEC_BAD_FLAG;
    }
    d->want = len;
    return 0;
}

int grpc_decoder_feed(struct grpc_decoder *d, const uint8_t *p, size_t n,
                      int (*cb)(void *arg, const uint8_t *msg, size_t len), void *arg)
{
    const uint8_t *end = p + n;
    while (p < end) {
        if (!d->in_body) {
            int rv;
            if (d->hdr_len == 0 && end - p >= 5) {
                /* fast path: the whole prefix is in this chunk */
                rv = parse_prefix(d, p);
                p += 5;
            } else {
                size_t take = 5 - d->hdr_len;
                if (take > (size_t)(end - p))
                    take = (size_t)(end - p);
                memcpy(d->hdr + d->hdr_len, p, take);
                d->hdr_len += (uint8_t)take;
                p += take;
                if (d->hdr_len < 5)
                    return 0;
                rv = parse_prefix(d, d->hdr);
            }
            d->hdr_len = 0;
            if (rv != 0)
                return rv;
            if ((size_t)(end - p) >= d->want) {
                /* whole message in this chunk: hand it out in place */
                const uint8_t *m = p;
                p += d->want;
                if (cb(arg, m, d->want) != 0)
                    return GRPC_DEC_STOPPED;
                continue;
            }
            d->in_body = 1;
            buf_reset(&d->msg);
            if (buf_reserve(&d->msg, d->want) != 0)
                return GRPC_DEC_NOMEM;
        }
        size_t take = d->want - d->msg.len;
        if (take > (size_t)(end - p))
            take = (size_t)(end - p);
        memcpy(d->msg.data + d->msg.len, p, take);
        d->msg.len += take;
        p += take;
        if (d->msg.len < d->want)
            return 0;
        d->in_body = 0;
        if (cb(arg, d->msg.data, d->msg.len) != 0)
            return GRPC_DEC_STOPPED;
        /* a large gather buffer is not kept around for a stream of small
         * messages: memory per idle stream stays small */
        if (d->msg.cap > 64 * 1024)
            buf_free(&d->msg);
    }
    return 0;
}

static int needs_escape(unsigned char c)
{
    return c < 0x20 || c > 0x7e || c == '%';
}

size_t grpc_percent_encoded_len(const char *s, size_t n)
{
    size_t out = n;
    for (size_t i = 0; i < n; i++)
        if (needs_escape((unsigned char)s[i]))
            out += 2;
    return out;
}

size_t grpc_percent_encode(const char *s, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (needs_escape(c)) {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    return o;
}

size_t grpc_percent_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
            out[o++] = (char)(hex_digit(s[i + 1]) << 4 | hex_digit(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}
