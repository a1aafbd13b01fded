/* tests/fuzz/fuzz_etcdwal.c: libFuzzer target for src/etcdwal, the reader
 * of etcd 3.4's data directories (bytes from outside: an etcd member dir
 * handed to quorum). The input is fed whole as:
 *   - a WAL segment, as the last segment (a torn tail allowed) and as a
 *     middle one (from a snapshot at index 0 and, with byte 0's low bit,
 *     from one at index 5 term 2, so the snapshot-record checks run);
 *   - a .snap file, and the v2 store JSON of a decoded one;
 *   - the v2 store JSON and a conf change's member JSON, directly.
 * Nothing may crash or leak; what is read must hold together: entries
 * after the start index, contiguous. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcdwal/etcdwal.h"

static void segment(const uint8_t *data, size_t size, bool last, uint64_t idx, uint64_t term)
{
    struct etcdwal_state st;
    memset(&st, 0, sizeof(st));
    struct etcdwal_reader r = {.start_index = idx, .start_term = term, .st = &st};
    char err[ETCDWAL_ERR_LEN];
    int rv = etcdwal_decode_segment(&r, data, size, last, "fuzz.wal", err, sizeof(err));
    if (rv == 0) {
        for (size_t i = 0; i < st.n_entries; i++)
            if (st.entries[i].index != idx + 1 + i)
                abort();
        if (st.torn && !last)
            abort();
    }
    etcdwal_state_free(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segment(data, size, true, 0, 0);
    segment(data, size, false, 0, 0);
    if (size > 0 && (data[0] & 1))
        segment(data, size, true, 5, 2);
    struct etcdwal_snap s;
    char err[ETCDWAL_ERR_LEN];
    struct etcdwal_member ms[ETCDWAL_MAX_MEMBERS];
    if (etcdwal_snap_decode(data, size, &s, err, sizeof(err)) == 0) {
        if (s.conf.n_voters > ETCDWAL_MAX_MEMBERS || s.conf.n_learners > ETCDWAL_MAX_MEMBERS)
            abort();
        if (s.data != NULL)
            etcdwal_v2_members(s.data, s.len, ms, ETCDWAL_MAX_MEMBERS);
        etcdwal_snap_free(&s);
    }
    int n = etcdwal_v2_members(data, size, ms, ETCDWAL_MAX_MEMBERS);
    if (n > ETCDWAL_MAX_MEMBERS)
        abort();
    struct etcdwal_member m;
    etcdwal_member_json(data, size, &m);
    return 0;
}
