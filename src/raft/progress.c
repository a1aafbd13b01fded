/* raft/progress.c: the leader's per-follower replication state.
 *
 * As in etcd's tracker package: a follower is probed (one append at a time
 * until we find where our logs match), then replicated to with up to
 * max_inflight appends pipelined, or sent a snapshot when the entries it
 * needs are compacted. The in-flight window is the flow control. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "raft/raft_int.h"

int inflights_init(struct inflights *in, uint32_t cap)
{
    memset(in, 0, sizeof(*in));
    in->buf = malloc((size_t)(cap ? cap : 1) * sizeof(uint64_t));
    if (!in->buf)
        return -ENOMEM;
    in->cap = cap ? cap : 1;
    return 0;
}

void inflights_free(struct inflights *in)
{
    free(in->buf);
    memset(in, 0, sizeof(*in));
}

void inflights_reset(struct inflights *in) { in->start = in->count = 0; }

bool inflights_full(const struct inflights *in) { return in->count >= in->cap; }

void inflights_add(struct inflights *in, uint64_t last)
{
    if (inflights_full(in))
        return; /* callers check first; never overwrite */
    in->buf[(in->start + in->count) % in->cap] = last;
    in->count++;
}

void inflights_free_le(struct inflights *in, uint64_t to)
{
    while (in->count > 0 && in->buf[in->start] <= to) {
        in->start = (in->start + 1) % in->cap;
        in->count--;
    }
    if (in->count == 0)
        in->start = 0;
}

void inflights_free_first(struct inflights *in)
{
    if (in->count == 0)
        return;
    in->start = (in->start + 1) % in->cap;
    in->count--;
}

void progress_become_probe(struct progress *p)
{
    /* Coming back from a snapshot, probe right after it. */
    if (p->state == PROGRESS_SNAPSHOT) {
        uint64_t ps = p->pending_snapshot;
        p->next = (p->match > ps ? p->match : ps) + 1;
    } else {
        p->next = p->match + 1;
    }
    p->state = PROGRESS_PROBE;
    p->probe_sent = false;
    p->pending_snapshot = 0;
    p->stall_ticks = 0;
    inflights_reset(&p->inflights);
}

void progress_become_replicate(struct progress *p)
{
    p->state = PROGRESS_REPLICATE;
    p->next = p->match + 1;
    p->probe_sent = false;
    p->pending_snapshot = 0;
    p->stall_ticks = 0;
    inflights_reset(&p->inflights);
}

void progress_become_snapshot(struct progress *p, uint64_t snap_index)
{
    p->state = PROGRESS_SNAPSHOT;
    p->pending_snapshot = snap_index;
    p->probe_sent = false;
    p->stall_ticks = 0;
    inflights_reset(&p->inflights);
}

bool progress_maybe_update(struct progress *p, uint64_t n)
{
    bool updated = false;
    if (p->match < n) {
        p->match = n;
        updated = true;
        p->probe_sent = false;
    }
    if (p->next < n + 1)
        p->next = n + 1;
    return updated;
}

bool progress_maybe_decr(struct progress *p, uint64_t rejected, uint64_t hint)
{
    if (p->state == PROGRESS_REPLICATE) {
        /* A rejection at or below match is stale (reordered). */
        if (rejected <= p->match)
            return false;
        p->next = p->match + 1;
        return true;
    }
    /* Probing: only the answer to the probe we sent counts. */
    if (p->next == 0 || p->next - 1 != rejected)
        return false;
    uint64_t n = rejected < hint + 1 ? rejected : hint + 1;
    if (n < p->match + 1)
        n = p->match + 1;
    p->next = n;
    p->probe_sent = false;
    return true;
}

bool progress_is_paused(const struct progress *p)
{
    switch (p->state) {
    case PROGRESS_PROBE:
        return p->probe_sent;
    case PROGRESS_REPLICATE:
        return inflights_full(&p->inflights);
    default:
        return true;
    }
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

uint64_t quorum_index(uint64_t *vals, size_t n)
{
    qsort(vals, n, sizeof(*vals), cmp_desc);
    return vals[n / 2]; /* the (n/2+1)-th largest */
}
