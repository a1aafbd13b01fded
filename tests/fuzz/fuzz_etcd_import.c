/* tests/fuzz/fuzz_etcd_import.c: libFuzzer target for the translation of
 * etcd 3.4's log entries into quorum's (server/etcd_import.c, through
 * server_etcd_translate): the data of an entry from an etcd WAL handed to
 * quorum, decoded as etcd decodes it (an InternalRaftRequest, else a v2
 * Request; a ConfChange with its member JSON). Byte 0 picks the entry
 * type (low bits) and the starting membership (bit 2: a second voter);
 * the rest is the data. What translates must hold together: a normal
 * entry is empty or carries a known kind with a known flag set, a conf
 * entry a membership that decodes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "raft/raft.h"
#include "server/etcd_import.h"
#include "server/server_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static int quiet;
    if (!quiet) {
        log_set_level(LOG_FATAL); /* the v2 writes it drops are logged */
        quiet = 1;
    }
    int type = data[0] & 1; /* normal or conf change */
    struct raft_membership conf = {.voters = {1}, .n_voters = 1};
    if (data[0] & 4)
        conf.voters[conf.n_voters++] = 2;
    struct buf out = {0};
    uint8_t rt = 0;
    char err[512];
    int rv = server_etcd_translate(type, data + 1, size - 1, &conf, &out, &rt, err, sizeof(err));
    if (rv == 0) {
        if (rt == RAFT_ENTRY_CONF) {
            struct raft_membership m;
            if (raft_membership_decode(out.data, out.len, &m) != 0)
                abort();
            if (m.n_voters != conf.n_voters || m.n_learners != conf.n_learners)
                abort();
        } else if (out.len > 0) {
            if (out.len < 18 || out.data[0] >= ENTRY__COUNT || out.data[1] > 2)
                abort();
        }
    }
    buf_free(&out);
    return 0;
}
