/* tests/fuzz/fuzz_jsonpb.c: libFuzzer target for src/http/jsonpb.c, the
 * JSON mapping of etcd's gateway. Byte 0 picks a request message (the
 * table below), the rest is the JSON body. A body that decodes must round
 * trip: its packed bytes, written as JSON and decoded again, give the same
 * bytes, and that JSON written again gives the same text; the jansson path
 * (jsonpb_to_json, jsonpb_from_json) must give the same bytes too. A body
 * that does not decode must come with an error text. Anything else aborts.
 * Every message made is freed with protobuf_c_message_free_unpacked, so
 * ASan checks that the decoder lays messages out as protobuf-c's unpacker
 * does. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/jsonpb.h"
#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
    &etcdserverpb__range_request__descriptor,
    &etcdserverpb__put_request__descriptor,
    &etcdserverpb__delete_range_request__descriptor,
    &etcdserverpb__txn_request__descriptor,
    &etcdserverpb__compaction_request__descriptor,
    &etcdserverpb__watch_request__descriptor,
    &etcdserverpb__lease_grant_request__descriptor,
    &etcdserverpb__lease_revoke_request__descriptor,
    &etcdserverpb__lease_keep_alive_request__descriptor,
    &etcdserverpb__lease_time_to_live_request__descriptor,
    &etcdserverpb__member_add_request__descriptor,
    &etcdserverpb__member_update_request__descriptor,
    &etcdserverpb__alarm_request__descriptor,
    &etcdserverpb__authenticate_request__descriptor,
    &etcdserverpb__auth_user_add_request__descriptor,
    &etcdserverpb__auth_role_grant_permission_request__descriptor,
    &etcdserverpb__auth_role_revoke_permission_request__descriptor,
    &etcdserverpb__hash_kvrequest__descriptor,
    &v3lockpb__lock_request__descriptor,
    &v3electionpb__campaign_request__descriptor,
    &v3electionpb__proclaim_request__descriptor,
    &v3electionpb__resign_request__descriptor,
};

static void check(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const ProtobufCMessageDescriptor *d = types[data[0] % (sizeof(types) / sizeof(types[0]))];
    const char *body = (const char *)data + 1;
    char err[256] = "";
    ProtobufCMessage *m = NULL;
    int rc = jsonpb_parse(d, body, size - 1, &m, err, sizeof(err));
    if (rc != 0) {
        check(rc == -EINVAL && m == NULL && err[0] != 0);
        return 0;
    }
    struct buf pb1 = {0}, js1 = {0}, pb2 = {0}, js2 = {0}, pb3 = {0};
    size_t n = protobuf_c_message_get_packed_size(m);
    check(buf_reserve(&pb1, n + 1) == 0);
    pb1.len = protobuf_c_message_pack(m, pb1.data);
    check(pb1.len == n);
    /* the packed form decodes through jsonpb_decode the same way */
    check(jsonpb_decode(d, body, size - 1, &pb3, err, sizeof(err)) == 0);
    check(pb3.len == pb1.len && (n == 0 || memcmp(pb3.data, pb1.data, n) == 0));

    check(jsonpb_write(m, &js1) == 0);
    check(jsonpb_decode(d, (const char *)js1.data, js1.len, &pb2, err, sizeof(err)) == 0);
    check(pb2.len == pb1.len && (n == 0 || memcmp(pb2.data, pb1.data, n) == 0));
    check(jsonpb_encode(d, pb2.data, pb2.len, &js2) == 0);
    check(js2.len == js1.len && memcmp(js2.data, js1.data, js1.len) == 0);

    json_t *j = jsonpb_to_json(m);
    check(j != NULL);
    ProtobufCMessage *m3 = NULL;
    check(jsonpb_from_json(d, j, &m3, err, sizeof(err)) == 0);
    buf_reset(&pb3);
    check(buf_reserve(&pb3, n + 1) == 0);
    pb3.len = protobuf_c_message_pack(m3, pb3.data);
    check(pb3.len == n && (n == 0 || memcmp(pb3.data, pb1.data, n) == 0));
    protobuf_c_message_free_unpacked(m3, NULL);
    json_decref(j);

    protobuf_c_message_free_unpacked(m, NULL);
    buf_free(&pb1);
    buf_free(&js1);
    buf_free(&pb2);
    buf_free(&js2);
    buf_free(&pb3);
    return 0;
}
