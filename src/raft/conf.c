/* raft/conf.c: cluster membership values and their encoding.
 *
 * A configuration entry carries the whole membership, not a delta, so that
 * applying it is a plain replacement and replaying it twice is harmless.
 * Encoding (little-endian u64s): n_voters, n_learners, voters..., learners.
 * raft_membership_check enforces "one change at a time". */
#include <errno.h>
#include <string.h>

#include "raft/raft_int.h"

static bool has(const uint64_t *ids, uint32_t n, uint64_t id)
{
    for (uint32_t k = 0; k < n; k++)
        if (ids[k] == id)
            return true;
    return false;
}

bool raft_membership_is_voter(const struct raft_membership *m, uint64_t id)
{
    return has(m->voters, m->n_voters, id);
}

bool raft_membership_is_learner(const struct raft_membership *m, uint64_t id)
{
    return has(m->learners, m->n_learners, id);
}

size_t raft_membership_size(const struct raft_membership *m)
{
    return 8 * (2 + (size_t)m->n_voters + m->n_learners);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

size_t raft_membership_encode(const struct raft_membership *m, uint8_t *out)
{
    size_t o = 0;
    put64(out + o, m->n_voters), o += 8;
    put64(out + o, m->n_learners), o += 8;
    for (uint32_t k = 0; k < m->n_voters; k++)
        put64(out + o, m->voters[k]), o += 8;
    for (uint32_t k = 0; k < m->n_learners; k++)
        put64(out + o, m->learners[k]), o += 8;
    return o;
}

static int valid(const struct raft_membership *m)
{
    if (m->n_voters + m->n_learners > RAFT_MAX_MEMBERS)
        return -EINVAL;
    for (uint32_t k = 0; k < m->n_voters; k++) {
        if (m->voters[k] == RAFT_NONE || has(m->voters, k, m->voters[k]) ||
            has(m->learners, m->n_learners, m->voters[k]))
            return -EINVAL;
    }
    for (uint32_t k = 0; k < m->n_learners; k++)
        if (m->learners[k] == RAFT_NONE || has(m->learners, k, m->learners[k]))
            return -EINVAL;
    return 0;
}

int raft_membership_decode(const void *data, size_t len, struct raft_membership *m)
{
    const uint8_t *p = data;
    memset(m, 0, sizeof(*m));
    if (len < 16)
        return -EINVAL;
    uint64_t nv = get64(p), nl = get64(p + 8);
    if (nv > RAFT_MAX_MEMBERS || nl > RAFT_MAX_MEMBERS || nv + nl > RAFT_MAX_MEMBERS ||
        len != 8 * (2 + nv + nl))
        return -EINVAL;
    m->n_voters = (uint32_t)nv;
    m->n_learners = (uint32_t)nl;
    for (uint32_t k = 0; k < nv; k++)
        m->voters[k] = get64(p + 16 + 8 * k);
    for (uint32_t k = 0; k < nl; k++)
        m->learners[k] = get64(p + 16 + 8 * (nv + k));
    return valid(m);
}

/* Counts ids of |a| missing from |b|. */
static uint32_t missing(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb)
{
    uint32_t c = 0;
    for (uint32_t k = 0; k < na; k++)
        if (!has(b, nb, a[k]))
            c++;
    return c;
}

int raft_membership_check(const struct raft_membership *cur, const struct raft_membership *next)
{
    if (valid(next) != 0 || next->n_voters == 0)
        return -EINVAL;
    uint32_t v_added = missing(next->voters, next->n_voters, cur->voters, cur->n_voters);
    uint32_t v_removed = missing(cur->voters, cur->n_voters, next->voters, next->n_voters);
    uint32_t l_added = missing(next->learners, next->n_learners, cur->learners, cur->n_learners);
    uint32_t l_removed =
        missing(cur->learners, cur->n_learners, next->learners, next->n_learners);
    if (v_removed == 1 && v_added == 0 && l_added == 0 && l_removed == 0)
        return 0; /* remove a voter */
    if (v_added == 1 && v_removed == 0 && l_added == 0 && l_removed <= 1) {
        /* add a voter, or promote a learner (it leaves the learner set) */
        for (uint32_t k = 0; k < next->n_voters; k++)
            if (!raft_membership_is_voter(cur, next->voters[k]) && l_removed == 1 &&
                !raft_membership_is_learner(cur, next->voters[k]))
                return -EINVAL;
        return 0;
    }
    if (l_added == 1 && v_added == 0 && v_removed == 0 && l_removed == 0)
        return 0; /* add a learner */
    if (l_removed == 1 && v_added == 0 && v_removed == 0 && l_added == 0)
        return 0; /* remove a learner */
    return -EINVAL;
}

const char *raft_msg_type_name(int type)
{
    static const char *names[RAFT_MSG__COUNT] = {
        "MsgApp",     "MsgAppResp",   "MsgVote",      "MsgVoteResp",
        "MsgPreVote", "MsgPreVoteResp", "MsgHeartbeat", "MsgHeartbeatResp",
        "MsgSnap",    "MsgTimeoutNow", "MsgReadIndex", "MsgReadIndexResp",
    };
    if (type < 0 || type >= RAFT_MSG__COUNT)
        return "MsgUnknown";
    return names[type];
}
