/* server/zk_write.h: the log entry of a ZooKeeper write (proto/zk.proto's
 * quorumzk.Write), packed and unpacked by hand on the write path.
 *
 * protobuf-c's codec walks the message's descriptor field by field and
 * copies every string and byte field out of the input; for this message,
 * made and read once for every ZooKeeper write, that was about a tenth of
 * the instructions the member spent on a setData. The bytes are
 * protobuf's all the same: zk_write_pack writes exactly what
 * protobuf_c_message_pack writes (fields in number order, proto3's zero
 * values left out), and zk_write_unpack reads that layout only, leaving
 * anything else (fields out of order or repeated, unknown fields, a tag
 * written in more bytes than needed) to protobuf-c, so a log written by
 * any encoder reads the same. tests/zk/test_zk_write.c and the fuzz target
 * fuzz_zk_write hold both to protobuf-c's answers.
 */
#ifndef QUORUM_SERVER_ZK_WRITE_H
#define QUORUM_SERVER_ZK_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "zk.pb-c.h"

/* zk_write_size is the packed size of |w|; zk_write_pack writes it at
 * |out| (room for zk_write_size bytes) and returns the length. Unknown
 * fields of |w| are not written: the caller's message has none. */
size_t zk_write_size(const Quorumzk__Write *w);
size_t zk_write_pack(const Quorumzk__Write *w, uint8_t *out);

/* zk_write_unpack reads |p| (|n| bytes) into one block from malloc (free
 * it with free(), not protobuf_c_message_free_unpacked): the ids copied
 * and NUL-terminated as protobuf-c does, request.data pointing into |p|,
 * which must outlive it. NULL when the bytes are not in zk_write_pack's
 * layout or are not a valid message (the caller then asks protobuf-c,
 * which tells the two apart) or memory ran out. */
Quorumzk__Write *zk_write_unpack(const uint8_t *p, size_t n);

#endif
