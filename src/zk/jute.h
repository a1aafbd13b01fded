/* zk/jute.h: ZooKeeper's jute serialization and its packet framing.
 *
 * Jute (the binary archive of zookeeper.jute): int is 4 bytes big-endian,
 * long 8, boolean one byte (0 or 1), buffer and ustring an int length then
 * the bytes (-1: null), vector an int count then the elements (-1: null),
 * a record its fields in order. On the wire each packet is a 4-byte
 * big-endian length and that many bytes.
 *
 * Decoding never trusts a length: every read checks what is left of the
 * input, a vector's count is checked against the bytes its elements need
 * at least before anything is allocated, and decoded buffers and strings
 * point into the input (no copy): they live as long as the input does.
 * Vectors are allocated from the caller's arena.
 *
 * Records are described by tables (struct jute_record: the fields, their
 * types and offsets in a C struct), so one decoder and one encoder serve
 * every record; zk/proto.h has the tables of the records the face speaks.
 */
#ifndef QUORUM_ZK_JUTE_H
#define QUORUM_ZK_JUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/buf.h"

/* jute.maxbuffer: ZooKeeper's default packet limit (0xfffff). */
#define JUTE_MAX_BUFFER 1048575

/* A buffer or ustring: |len| -1 is null (then |p| is NULL). */
struct jute_bytes {
    const uint8_t *p;
    int32_t len;
};

/* A vector: |n| -1 is null; |v| points at |n| elements of the field's
 * element type (struct jute_bytes for ustring, the record's struct). */
struct jute_vec {
    void *v;
    int32_t n;
};

/* A decoder over [p, end). |err| is sticky: once a read fails (-EBADMSG:
 * truncated or malformed), later reads return zero values and keep it. */
struct jute_in {
    const uint8_t *p, *end;
    int err;
};

static inline void jute_in_init(struct jute_in *in, const uint8_t *p, size_t len)
{
    in->p = p;
    in->end = p + len;
    in->err = 0;
}
static inline size_t jute_in_left(const struct jute_in *in)
{
    return (size_t)(in->end - in->p);
}

int32_t jute_get_int(struct jute_in *in);
int64_t jute_get_long(struct jute_in *in);
/* jute_get_bool: 0 is false, anything else true (Java's readBoolean). */
bool jute_get_bool(struct jute_in *in);
/* jute_get_bytes reads a buffer or ustring (a length below -1, or more
 * than is left, is -EBADMSG). */
struct jute_bytes jute_get_bytes(struct jute_in *in);

/* An encoder appending to a struct buf; |err| is sticky (-ENOMEM). */
struct jute_out {
    struct buf *b;
    int err;
};

void jute_put_int(struct jute_out *o, int32_t v);
void jute_put_long(struct jute_out *o, int64_t v);
void jute_put_bool(struct jute_out *o, bool v);
/* jute_put_bytes writes |b| (len -1: null). */
void jute_put_bytes(struct jute_out *o, struct jute_bytes b);
void jute_put_raw(struct jute_out *o, const void *p, size_t n);

/* Record tables. */
enum jute_type {
    JUTE_INT,
    JUTE_LONG,
    JUTE_BOOL,
    JUTE_BUFFER,
    JUTE_USTRING,
    JUTE_RECORD, /* a nested record (|rec|), embedded in the struct */
    JUTE_VECTOR, /* struct jute_vec of |elem| (JUTE_USTRING or JUTE_RECORD of |rec|) */
};

struct jute_record;
struct jute_field {
    const char *name;
    enum jute_type type;
    enum jute_type elem;           /* vectors: element type */
    size_t offset;                 /* in the record's struct */
    const struct jute_record *rec; /* JUTE_RECORD, or a vector of records */
};

struct jute_record {
    const char *name; /* zookeeper.jute's class name */
    size_t size;      /* sizeof the C struct */
    size_t n_fields;
    const struct jute_field *fields;
};

/* jute_record_min is the fewest bytes an encoding of |r| takes (vectors
 * and buffers null or empty). */
size_t jute_record_min(const struct jute_record *r);

/* jute_decode reads record |r| into |out| (sizeof r->size, zeroed first);
 * vectors come from |a|. Returns in->err: 0, -EBADMSG or -ENOMEM. */
int jute_decode(const struct jute_record *r, struct jute_in *in, void *out, struct arena *a);
/* jute_encode appends |val|'s encoding. Returns o->err. */
int jute_encode(const struct jute_record *r, struct jute_out *o, const void *val);

/* Framing. jute_frame looks at the start of a byte stream [p, p+len): 1
 * with the packet at *pkt, *pkt_len and the bytes it takes (4 + length)
 * in *used; 0 when more bytes are needed; -EMSGSIZE when the length is
 * negative or above |max| (ZooKeeper's "Len error": close the
 * connection). */
int jute_frame(const uint8_t *p, size_t len, size_t max, const uint8_t **pkt, size_t *pkt_len,
               size_t *used);
/* jute_frame_begin reserves the length prefix at the end of |b| and
 * returns its position; jute_frame_end fills it in once the packet is
 * written after it. */
size_t jute_frame_begin(struct jute_out *o);
void jute_frame_end(struct jute_out *o, size_t at);

#endif
