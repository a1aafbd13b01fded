/* tests/fuzz/fuzz_zk_write.c: libFuzzer target for server/zk_write.c, the
 * ZooKeeper write's log entry read by hand, against protobuf-c's reading
 * of the same bytes (log entries come from the leader and from the disk).
 * Whatever the hand reader takes, protobuf-c must read to the same fields;
 * whatever protobuf-c reads, zk_write_pack must write as protobuf-c does,
 * and the hand reader must take that. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/zk_write.h"

static int same(const Quorumzk__Write *a, const Quorumzk__Write *b)
{
    if (a->session != b->session || a->now_ms != b->now_ms || a->member != b->member ||
        a->n_ids != b->n_ids || a->request.len != b->request.len)
        return 0;
    for (size_t i = 0; i < a->n_ids; i++)
        if (strcmp(a->ids[i], b->ids[i]) != 0)
            return 0;
    return a->request.len == 0 || memcmp(a->request.data, b->request.data, a->request.len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Quorumzk__Write *mine = zk_write_unpack(data, size);
    Quorumzk__Write *theirs = (Quorumzk__Write *)protobuf_c_message_unpack(
        &quorumzk__write__descriptor, NULL, size, data);
    if (mine != NULL && (theirs == NULL || !same(theirs, mine)))
        abort();
    if (theirs != NULL && theirs->base.n_unknown_fields == 0) {
        /* ids with a NUL inside are cut there by both: compare what
         * protobuf-c makes of the message it read */
        size_t n = protobuf_c_message_get_packed_size(&theirs->base);
        uint8_t *want = malloc(n + 1), *got = malloc(n + 1);
        if (want == NULL || got == NULL)
            abort();
        if (zk_write_size(theirs) != n || protobuf_c_message_pack(&theirs->base, want) != n ||
            zk_write_pack(theirs, got) != n || memcmp(want, got, n) != 0)
            abort();
        Quorumzk__Write *again = zk_write_unpack(got, n);
        if (again == NULL || !same(theirs, again))
            abort();
        free(again);
        free(want);
        free(got);
    }
    free(mine);
    if (theirs != NULL)
        protobuf_c_message_free_unpacked(&theirs->base, NULL);
    return 0;
}
