/* grpc/grpc_int.h: internals of the grpc module, shared by its .c files,
 * its unit tests and its fuzz target. Nothing outside src/grpc, tests/grpc
 * and tests/fuzz includes this header.
 *
 * Two parts: the pure helpers (message framing decoder, grpc-message
 * percent-encoding) that never touch a socket, and an entry point that
 * creates a server connection without a socket (its output goes to a
 * buffer) so a fuzzer can drive the whole HTTP/2 + gRPC stack in memory.
 */
#ifndef QUORUM_GRPC_GRPC_INT_H
#define QUORUM_GRPC_GRPC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "grpc/grpc.h"

/* Default max_recv_msg_size when the option is 0 (grpc-go's default). */
#define GRPC_DEFAULT_MAX_RECV (4u * 1024 * 1024)
/* Default and ceiling of max_send_msg_size: 2 GiB, as documented. */
#define GRPC_DEFAULT_MAX_SEND ((size_t)2 * 1024 * 1024 * 1024)

/* ---- message framing decoder ----
 *
 * A gRPC message on the wire is a 5-byte prefix (1-byte compressed flag,
 * 4-byte big-endian length) and the message. The decoder takes the DATA
 * payload of a stream in arbitrary chunks and hands out whole messages. A
 * message that lies whole inside one chunk is handed out in place (no
 * copy); only a message split across chunks is gathered in |msg|, whose
 * memory is kept for the next message (no malloc per message). Memory held
 * is bounded by |max| plus the prefix. */
struct grpc_decoder {
    size_t max;       /* largest message accepted */
    uint8_t hdr[5];   /* prefix being gathered */
    uint8_t hdr_len;  /* bytes of hdr[] filled */
    uint32_t want;    /* length of the message being gathered */
    int in_body;      /* prefix complete, gathering |want| bytes in msg */
    struct buf msg;   /* gathered body of a split message */
    uint32_t bad_len; /* on GRPC_DEC_TOO_LARGE: the announced length */
    uint8_t bad_flag; /* on GRPC_DEC_BAD_FLAG / GRPC_DEC_COMPRESSED */
};

/* Decoder results (negative; the decoder stops at the first). */
enum {
    GRPC_DEC_TOO_LARGE = -1,  /* announced length > max (bad_len) */
    GRPC_DEC_COMPRESSED = -2, /* compressed flag 1: we support no encoding */
    GRPC_DEC_BAD_FLAG = -3,   /* compressed flag neither 0 nor 1 (bad_flag) */
    GRPC_DEC_NOMEM = -4,      /* could not grow the gather buffer */
    GRPC_DEC_STOPPED = -5,    /* the message callback returned nonzero */
};

/* grpc_decoder_init sets up an empty decoder accepting messages of at most
 * |max| bytes. */
void grpc_decoder_init(struct grpc_decoder *d, size_t max);

/* grpc_decoder_feed consumes |n| bytes at |p| and calls |cb| once per
 * complete message, in order; the message pointer is valid only during the
 * callback. If |cb| returns nonzero, decoding stops and GRPC_DEC_STOPPED is
 * returned (the rest of the chunk is dropped). Returns 0 or one of the
 * GRPC_DEC_* codes; after an error the decoder must not be fed again. */
int grpc_decoder_feed(struct grpc_decoder *d, const uint8_t *p, size_t n,
                      int (*cb)(void *arg, const uint8_t *msg, size_t len), void *arg);

/* grpc_decoder_partial tells whether the decoder holds part of a message
 * (a stream that ends now ends in the middle of a message). */
int grpc_decoder_partial(const struct grpc_decoder *d);

/* grpc_decoder_free releases the gather buffer. */
void grpc_decoder_free(struct grpc_decoder *d);

/* ---- grpc-message percent-encoding (gRPC PROTOCOL-HTTP2.md) ----
 * Bytes outside 0x20..0x7E and '%' itself become "%XX" (upper-case hex);
 * the rest are copied. */

/* grpc_percent_encoded_len is the length grpc_percent_encode produces for
 * the |n| bytes at |s|. */
size_t grpc_percent_encoded_len(const char *s, size_t n);

/* grpc_percent_encode writes the encoding of the |n| bytes at |s| to |out|,
 * which has room for grpc_percent_encoded_len(s, n) bytes (no NUL is
 * written), and returns the number of bytes written. */
size_t grpc_percent_encode(const char *s, size_t n, char *out);

/* grpc_percent_decode decodes the |n| bytes at |s| into |out| (room for |n|
 * bytes; no NUL written) and returns the decoded length. Malformed escapes
 * are copied through unchanged, as gRPC clients do. */
size_t grpc_percent_decode(const char *s, size_t n, char *out);

/* ---- connections without a socket (fuzzing, tests) ---- */

typedef struct grpc_conn grpc_conn;

/* grpc_conn_new_mem creates a server connection on |srv| that has no
 * socket: input comes from grpc_conn_mem_feed, output is appended to an
 * internal buffer. Errors: -ENOMEM. */
int grpc_conn_new_mem(grpc_server *srv, grpc_conn **out);

/* grpc_conn_mem_feed hands |n| bytes of client input to |c| and then
 * serializes every frame that is ready into the output buffer. Returns 0,
 * or -EPROTO once the connection is closed (a protocol error, GOAWAY sent,
 * or closed earlier); after -EPROTO further feeds return -EPROTO. */
int grpc_conn_mem_feed(grpc_conn *c, const uint8_t *p, size_t n);

/* grpc_conn_mem_output returns the output buffer of |c| (the caller may
 * read and buf_reset it); valid until grpc_conn_mem_free. */
struct buf *grpc_conn_mem_output(grpc_conn *c);

/* grpc_conn_mem_free closes |c| (every open call gets on_close) and frees
 * it. grpc_server_close also closes memory connections (their calls get
 * on_close) but does not free them: free each with this function, before
 * or after the server is gone. */
void grpc_conn_mem_free(grpc_conn *c);

#endif
