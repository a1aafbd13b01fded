/* tests/transport/fuzz_codec.c: libFuzzer target for transport_msg_decode.
 * Whatever decodes must re-encode and decode again to the same message
 * (not necessarily the same bytes: the input may pad its varints). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct transport_msg_view v;
    if (transport_msg_decode(data, size, &v) != 0)
        return 0;
    struct buf b = {0};
    if (transport_msg_encode(&v.msg, &b) != 0)
        abort();
    struct transport_msg_view w;
    if (transport_msg_decode(b.data, b.len, &w) != 0)
        abort();
    const struct raft_msg *x = &v.msg, *y = &w.msg;
    if (x->type != y->type || x->from != y->from || x->to != y->to || x->term != y->term ||
        x->index != y->index || x->n_entries != y->n_entries || x->ctx != y->ctx ||
        (x->snapshot == NULL) != (y->snapshot == NULL))
        abort();
    for (size_t i = 0; i < x->n_entries; i++)
        if (x->entries[i].len != y->entries[i].len ||
            (x->entries[i].len > 0 &&
             memcmp(x->entries[i].data, y->entries[i].data, x->entries[i].len) != 0))
            abort();
    transport_msg_view_free(&w);
    transport_msg_view_free(&v);
    buf_free(&b);
    return 0;
}
