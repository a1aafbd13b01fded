/* tests/fuzz/fuzz_srv.c: libFuzzer target for src/server/srv.c's reading
 * of DNS answers (srv_parse: what a DNS server sends quorum at
 * --discovery-srv). The input is the whole DNS message. A parse must
 * stay inside the input, keep to |max| records, and give targets that are
 * NUL-terminated, non-empty and sorted (priority up, weight down); the
 * same message read with room for one record gives the first of them or
 * fails the same way. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly |size| bytes, so a read past it is caught */
    uint8_t *msg = malloc(size ? size : 1);
    if (msg == NULL)
        return 0;
    memcpy(msg, data, size);
    static struct srv_record r[SRV_MAX_RECORDS], one[1];
    int n = srv_parse(msg, size, r, SRV_MAX_RECORDS);
    if (n > SRV_MAX_RECORDS)
        abort();
    for (int i = 0; i < n; i++) {
        size_t l = strnlen(r[i].target, sizeof(r[i].target));
        if (l == 0 || l == sizeof(r[i].target))
            abort();
        if (i > 0 && (r[i - 1].priority > r[i].priority ||
                      (r[i - 1].priority == r[i].priority && r[i - 1].weight < r[i].weight)))
            abort();
    }
    int m = srv_parse(msg, size, one, 1);
    if ((n < 0) != (m < 0) || (n > 0 && m != 1) || (n == 0 && m != 0))
        abort();
    free(msg);
    return 0;
}
