/* tests/fuzz/fuzz_kv_decode.c: libFuzzer target for the protobuf-c code
 * generated from proto/rpc.proto: the KV request types a client can send
 * (RangeRequest, PutRequest, DeleteRangeRequest, TxnRequest,
 * CompactionRequest). Byte 0 picks the type, the rest is the message.
 * Whatever unpacks must also pack again to bytes that unpack (the server
 * re-encodes requests into its Raft log).
 *
 * Known protobuf-c 1.4.1 quirk found by this fuzzer: a tag varint written
 * non-canonically ("80 00") decodes to field number 0, which unpack keeps
 * as an unknown field; pack writes it back as "00", which unpack then
 * rejects. So a request carrying it does not survive a re-encode. Such
 * inputs are exempt from the round-trip check here; the server must drop
 * unknown fields (or refuse field 0) before it re-encodes a request. */
#include <stdint.h>
#include <stdlib.h>

#include "rpc.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
    &etcdserverpb__range_request__descriptor,        &etcdserverpb__put_request__descriptor,
    &etcdserverpb__delete_range_request__descriptor, &etcdserverpb__txn_request__descriptor,
    &etcdserverpb__compaction_request__descriptor,
};

/* has_field0 tells whether |m| or any message inside it kept an unknown
 * field with field number 0 (see the quirk above). */
static int has_field0(const ProtobufCMessage *m)
{
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t j = 0; j < n; j++)
                if (has_field0(arr[j]))
                    return 1;
            continue;
        }
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
        if (sub != NULL && has_field0(sub))
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const ProtobufCMessageDescriptor *d = types[data[0] % (sizeof(types) / sizeof(types[0]))];
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
    if (m == NULL)
        return 0;
    if (has_field0(m)) {
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *out = malloc(len ? len : 1);
    if (out == NULL)
        abort();
    if (protobuf_c_message_pack(m, out) != len)
        __builtin_trap();
    ProtobufCMessage *again = protobuf_c_message_unpack(d, NULL, len, out);
    if (again == NULL)
        __builtin_trap(); /* what we pack we must read back */
    protobuf_c_message_free_unpacked(again, NULL);
    protobuf_c_message_free_unpacked(m, NULL);
    free(out);
    return 0;
}
