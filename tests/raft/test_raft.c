/* tests/raft/test_raft.c: the state machine (src/raft/raft.c), section by
 * section of the Raft paper: elections (5.2), log matching (5.3), the
 * commit rule and figure 8 (5.4.2), leader completeness (5.4), then
 * PreVote, CheckQuorum, ReadIndex, snapshots, membership and leadership
 * transfer. A tiny in-test network moves messages between real cores; it
 * can cut links and drop message types so a test controls the interleaving. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "raft/raft.h"

#define MAXN 6

struct qmsg {
    struct raft_msg m;
    struct raft_entry *ents;
    struct raft_snapshot snap;
};

struct disk {
    struct raft_hard_state hs;
    struct raft_entry ents[512];
    size_t n;
    bool has_snap;
    struct raft_snapshot snap;
};

static struct raft *nodes[MAXN + 1];
static struct disk disks[MAXN + 1];
static struct qmsg queue[4096];
static size_t nq;
static bool cut[MAXN + 1][MAXN + 1];
static unsigned drop_type[MAXN + 1]; /* bitmask of message types dropped from node */
static uint64_t applied_upto[MAXN + 1];
static uint64_t hold_applied[MAXN + 1]; /* non-zero: report applied only up to it */
static struct raft_read_state reads_got[MAXN + 1][64];
static size_t n_reads_got[MAXN + 1];
static unsigned sent_count[RAFT_MSG__COUNT];
static bool snap_restored[MAXN + 1];
static void (*after_delivery)(void);

static struct raft_config cfg_for(uint64_t id)
{
    struct raft_config c;
    raft_config_default(&c, id);
    c.pre_vote = false;
    c.check_quorum = false;
    return c;
}

static void boot_cfg(int n, const struct raft_config *tmpl)
{
    memset(nodes, 0, sizeof(nodes));
    memset(disks, 0, sizeof(disks));
    memset(cut, 0, sizeof(cut));
    memset(drop_type, 0, sizeof(drop_type));
    memset(applied_upto, 0, sizeof(applied_upto));
    memset(hold_applied, 0, sizeof(hold_applied));
    memset(n_reads_got, 0, sizeof(n_reads_got));
    memset(sent_count, 0, sizeof(sent_count));
    memset(snap_restored, 0, sizeof(snap_restored));
    nq = 0;
    after_delivery = NULL;
    struct raft_membership m = {0};
    for (int k = 1; k <= n; k++)
        m.voters[m.n_voters++] = (uint64_t)k;
    for (int k = 1; k <= n; k++) {
        struct raft_config c = tmpl ? *tmpl : cfg_for((uint64_t)k);
        c.id = (uint64_t)k;
        c.seed = (uint64_t)k;
        cr_assert_eq(raft_new(&c, NULL, &m, &nodes[k]), 0);
        applied_upto[k] = raft_get_applied(nodes[k]); /* the bootstrap entry */
    }
}

static void boot(int n) { boot_cfg(n, NULL); }

static void free_q(struct qmsg *q);

static void teardown(void)
{
    for (int k = 0; k <= MAXN; k++) {
        raft_free(nodes[k]);
        nodes[k] = NULL;
        for (size_t j = 0; j < disks[k].n; j++)
            free((void *)disks[k].ents[j].data);
        if (disks[k].has_snap)
            free((void *)disks[k].snap.data);
    }
    while (nq)
        free_q(&queue[--nq]);
}

static void enqueue(const struct raft_msg *m)
{
    sent_count[m->type]++;
    if (m->to > MAXN || !nodes[m->to] || cut[m->from][m->to] || cut[m->to][m->from] ||
        (drop_type[m->from] & (1u << m->type)))
        return;
    cr_assert_lt(nq, 4096);
    struct qmsg *q = &queue[nq++];
    q->m = *m;
    q->ents = NULL;
    if (m->n_entries) {
        q->ents = malloc(m->n_entries * sizeof(*q->ents));
        for (size_t k = 0; k < m->n_entries; k++) {
            q->ents[k] = m->entries[k];
            if (m->entries[k].len) {
                void *d = malloc(m->entries[k].len);
                memcpy(d, m->entries[k].data, m->entries[k].len);
                q->ents[k].data = d;
            }
        }
    }
    q->m.entries = q->ents;
    if (m->snapshot) {
        q->snap = *m->snapshot;
        void *d = malloc(m->snapshot->len + 1);
        if (m->snapshot->len) /* data-less snapshots: data may be NULL */
            memcpy(d, m->snapshot->data, m->snapshot->len);
        q->snap.data = d;
        q->m.snapshot = &q->snap;
    }
}

static void free_q(struct qmsg *q)
{
    for (size_t k = 0; k < q->m.n_entries; k++)
        free((void *)q->ents[k].data);
    free(q->ents);
    if (q->m.snapshot)
        free((void *)q->snap.data);
}

/* ready runs the Ready loop of node |i| once, persisting to its disk. */
static bool ready(int i)
{
    struct raft *r = nodes[i];
    if (!r || !raft_has_ready(r))
        return false;
    struct raft_ready rd;
    cr_assert_eq(raft_ready(r, &rd), 0);
    struct disk *d = &disks[i];
    if (rd.snapshot) {
        for (size_t k = 0; k < d->n; k++)
            free((void *)d->ents[k].data);
        d->n = 0;
        if (d->has_snap)
            free((void *)d->snap.data);
        d->snap = *rd.snapshot;
        d->snap.data = malloc(rd.snapshot->len + 1);
        if (rd.snapshot->len) /* data-less snapshots: data may be NULL */
            memcpy((void *)d->snap.data, rd.snapshot->data, rd.snapshot->len);
        d->has_snap = true;
        snap_restored[i] = true;
        applied_upto[i] = rd.snapshot->index;
    }
    if (rd.n_entries) {
        uint64_t first = d->has_snap ? d->snap.index + 1 : 1;
        size_t keep = (size_t)(rd.entries[0].index - first);
        for (size_t k = keep; k < d->n; k++)
            free((void *)d->ents[k].data);
        d->n = keep;
        for (size_t k = 0; k < rd.n_entries; k++) {
            cr_assert_lt(d->n, 512);
            d->ents[d->n] = rd.entries[k];
            void *p = NULL;
            if (rd.entries[k].len) {
                p = malloc(rd.entries[k].len);
                memcpy(p, rd.entries[k].data, rd.entries[k].len);
            }
            d->ents[d->n++].data = p;
        }
    }
    if (rd.hs_changed)
        d->hs = rd.hs;
    for (size_t k = 0; k < rd.n_msgs; k++)
        enqueue(&rd.msgs[k]);
    for (size_t k = 0; k < rd.n_committed; k++) {
        cr_assert_eq(rd.committed[k].index, applied_upto[i] + 1);
        applied_upto[i] = rd.committed[k].index;
    }
    for (size_t k = 0; k < rd.n_reads && n_reads_got[i] < 64; k++)
        reads_got[i][n_reads_got[i]++] = rd.reads[k];
    if (hold_applied[i] != 0)
        raft_advance_applied(r, hold_applied[i]);
    else
        raft_advance(r);
    return true;
}

/* settle runs Ready loops and delivers every message until quiet. */
static void settle(void)
{
    for (int guard = 0; guard < 10000; guard++) {
        bool any = false;
        for (int i = 1; i <= MAXN; i++)
            while (ready(i))
                any = true;
        if (nq) {
            struct qmsg q = queue[0];
            memmove(queue, queue + 1, (nq - 1) * sizeof(queue[0]));
            nq--;
            if (nodes[q.m.to] && !cut[q.m.from][q.m.to] && !cut[q.m.to][q.m.from])
                raft_step(nodes[q.m.to], &q.m);
            free_q(&q);
            if (after_delivery)
                after_delivery();
            any = true;
        }
        if (!any)
            return;
    }
    cr_assert_fail("network never settles");
}

static void tick_all(int n)
{
    for (int t = 0; t < n; t++) {
        for (int i = 1; i <= MAXN; i++)
            if (nodes[i])
                raft_tick(nodes[i]);
        settle();
    }
}

static void isolate(int i, bool on)
{
    for (int k = 0; k <= MAXN; k++)
        cut[i][k] = cut[k][i] = on;
}

static int leader_count(uint64_t *who)
{
    int c = 0;
    for (int i = 1; i <= MAXN; i++)
        if (nodes[i] && raft_get_role(nodes[i]) == RAFT_LEADER) {
            c++;
            if (who)
                *who = (uint64_t)i;
        }
    return c;
}

static void propose(int i, const char *s)
{
    cr_assert_eq(raft_propose(nodes[i], s, strlen(s), NULL), 0);
}

/* restart replaces node |i| by a new core built from its disk only. */
static void restart(int i, const struct raft_config *c)
{
    raft_free(nodes[i]);
    struct disk *d = &disks[i];
    struct raft_storage st = {.hs = d->hs, .entries = d->ents, .n_entries = d->n,
                              .snapshot = d->has_snap ? &d->snap : NULL};
    cr_assert_eq(raft_new(c, &st, NULL, &nodes[i]), 0);
    applied_upto[i] = d->has_snap ? d->snap.index : 0;
}

TestSuite(raft, .fini = teardown);

/* ---- 5.2 leader election ------------------------------------------------ */

Test(raft, election_5_2_single_leader)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    uint64_t who = 0;
    cr_assert_eq(leader_count(&who), 1);
    cr_assert_eq(who, 1);
    cr_assert_eq(raft_get_term(nodes[1]), 2);
    for (int i = 2; i <= 3; i++) {
        cr_assert_eq(raft_get_role(nodes[i]), RAFT_FOLLOWER);
        cr_assert_eq(raft_get_leader(nodes[i]), 1);
        cr_assert_eq(raft_get_term(nodes[i]), 2);
    }
    /* the no-op of the new term commits everywhere */
    cr_assert_eq(raft_get_commit(nodes[3]), 2);
    cr_assert_eq(raft_get_entry(nodes[3], 2)->term, 2);
}

Test(raft, election_5_2_timeout_starts_election)
{
    boot(3);
    /* No follower campaigns before election_tick ticks... */
    for (int t = 0; t < 9; t++)
        for (int i = 1; i <= 3; i++)
            raft_tick(nodes[i]);
    settle();
    cr_assert_eq(leader_count(NULL), 0);
    /* ...and some does within 2 * election_tick (randomized timeout). */
    tick_all(11);
    cr_assert_eq(leader_count(NULL), 1);
}

Test(raft, election_5_2_one_vote_per_term)
{
    boot(3);
    struct raft_msg v = {.type = RAFT_MSG_VOTE, .from = 2, .to = 1, .term = 5, .index = 1,
                         .log_term = 1};
    cr_assert_eq(raft_step(nodes[1], &v), 0);
    ready(1);
    cr_assert_eq(nq, 1);
    cr_assert_eq(queue[0].m.type, RAFT_MSG_VOTE_RESP);
    cr_assert_not(queue[0].m.reject);
    cr_assert_eq(disks[1].hs.vote, 2, "the vote is persisted with the response");
    nq = 0;
    v.from = 3;
    cr_assert_eq(raft_step(nodes[1], &v), 0);
    ready(1);
    cr_assert_eq(nq, 1);
    cr_assert(queue[0].m.reject, "second candidate in the same term is refused");
    nq = 0;
}

Test(raft, election_5_4_1_voter_denies_stale_candidate)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    isolate(3, true);
    propose(1, "x");
    settle(); /* n1, n2 have index 3; n3 does not */
    isolate(3, false);
    isolate(1, true);
    raft_campaign(nodes[3]);
    settle();
    cr_assert_neq(raft_get_role(nodes[3]), RAFT_LEADER, "n2 must refuse the shorter log");
    raft_campaign(nodes[2]);
    settle();
    cr_assert_eq(raft_get_role(nodes[2]), RAFT_LEADER);
}

/* ---- 5.3 log replication / log matching -------------------------------- */

Test(raft, log_matching_5_3_replication_and_commit)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    for (int k = 0; k < 10; k++)
        propose(1, "entry");
    settle();
    for (int i = 1; i <= 3; i++) {
        cr_assert_eq(raft_get_last_index(nodes[i]), 12);
        cr_assert_eq(raft_get_commit(nodes[i]), 12);
        cr_assert_eq(applied_upto[i], 12);
        cr_assert_eq(disks[i].n, 12, "followers persisted what they acknowledged");
    }
}

Test(raft, log_matching_5_3_proposals_batched)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    unsigned before = sent_count[RAFT_MSG_APP];
    for (int k = 0; k < 20; k++)
        propose(1, "b");
    ready(1);
    cr_assert_eq(sent_count[RAFT_MSG_APP] - before, 2, "20 proposals, one append per follower");
    settle();
    cr_assert_eq(raft_get_commit(nodes[2]), 22);
}

Test(raft, log_matching_5_3_conflicts_overwritten_fast_backtrack)
{
    struct raft_config c = cfg_for(1);
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    /* n1 leads term 2 cut off and appends 30 entries nobody else gets. */
    isolate(1, true);
    for (int k = 0; k < 30; k++)
        propose(1, "stale");
    settle();
    raft_campaign(nodes[2]);
    settle();
    cr_assert_eq(raft_get_role(nodes[2]), RAFT_LEADER);
    propose(2, "new");
    settle();
    isolate(1, false);
    unsigned rejects_before = sent_count[RAFT_MSG_APP_RESP];
    tick_all(2); /* heartbeats bring n1 back as a follower */
    settle();
    propose(2, "after");
    settle();
    (void)c;
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_FOLLOWER);
    uint64_t last = raft_get_last_index(nodes[2]);
    cr_assert_eq(raft_get_last_index(nodes[1]), last, "the stale tail was replaced");
    for (uint64_t i = 1; i <= last; i++)
        cr_assert_eq(raft_get_entry(nodes[1], i)->term, raft_get_entry(nodes[2], i)->term);
    /* the reject hint skips a whole term: a handful of round trips, not 30 */
    cr_assert_lt(sent_count[RAFT_MSG_APP_RESP] - rejects_before, 20);
}

/* ---- 5.4.2 committing entries from previous terms (figure 8) ----------- */

static uint64_t fig8_bad_commit;

static void fig8_check(void)
{
    /* index 3 holds an entry of term 2; n1 leads term 4. It may commit 3
     * only together with its own entry at 4. */
    if (nodes[1] && raft_get_role(nodes[1]) == RAFT_LEADER && raft_get_term(nodes[1]) == 4 &&
        raft_get_commit(nodes[1]) == 3)
        fig8_bad_commit = 3;
}

Test(raft, commit_5_4_2_figure8_no_counting_old_terms)
{
    struct raft_config c = cfg_for(1);
    c.max_msg_entries = 1; /* one entry per append: acks come one at a time */
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle(); /* n1 leads term 2; everyone has 1:1 2:2 */
    isolate(1, true);
    propose(1, "old"); /* (3,2) on n1 only */
    settle();
    drop_type[2] = 1u << RAFT_MSG_APP; /* n2 wins term 3 but its (3,3) stays local */
    raft_campaign(nodes[2]);
    settle();
    cr_assert_eq(raft_get_role(nodes[2]), RAFT_LEADER);
    cr_assert_eq(raft_get_entry(nodes[2], 3)->term, 3);
    cr_assert_eq(raft_get_last_index(nodes[3]), 2);
    drop_type[2] = 0;
    isolate(1, false);
    isolate(2, true); /* last: isolate() rewrites both directions */
    /* n1 learns of term 3 (a heartbeat of n2 that reaches only n1). */
    struct raft_msg hb = {.type = RAFT_MSG_HEARTBEAT, .from = 2, .to = 1, .term = 3, .commit = 2};
    raft_step(nodes[1], &hb);
    settle();
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_FOLLOWER);
    fig8_bad_commit = 0;
    after_delivery = fig8_check;
    raft_campaign(nodes[1]); /* term 4: n3 grants, n1's log is newer */
    settle();
    after_delivery = NULL;
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER);
    cr_assert_eq(raft_get_term(nodes[1]), 4);
    cr_assert_eq(fig8_bad_commit, 0, "the leader committed (3,2) by counting replicas");
    cr_assert_eq(raft_get_commit(nodes[1]), 4, "committed with the term-4 entry");
}

Test(raft, commit_5_4_2_overwritten_if_not_committed)
{
    /* The other half of figure 8: an old-term entry on a majority, never
     * committed, may be replaced by a later leader. */
    struct raft_config c = cfg_for(1);
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    isolate(1, true);
    propose(1, "old");
    settle();
    drop_type[2] = 1u << RAFT_MSG_APP;
    raft_campaign(nodes[2]);
    settle();
    drop_type[2] = 0;
    /* n2 (last term 3) campaigns again and wins n3 (last term 2). */
    raft_campaign(nodes[2]);
    settle();
    cr_assert_eq(raft_get_role(nodes[2]), RAFT_LEADER);
    isolate(1, false);
    tick_all(3);
    cr_assert_eq(raft_get_entry(nodes[1], 3)->term, 3, "(3,2) was replaced on n1");
    cr_assert_eq(raft_get_commit(nodes[1]), raft_get_commit(nodes[2]));
}

/* ---- 5.4 leader completeness / restart from what was persisted ---------- */

Test(raft, completeness_5_4_leader_has_all_committed)
{
    boot(5);
    raft_campaign(nodes[1]);
    settle();
    isolate(4, true);
    isolate(5, true);
    for (int k = 0; k < 5; k++)
        propose(1, "c");
    settle();
    uint64_t committed = raft_get_commit(nodes[1]);
    cr_assert_eq(committed, 7);
    raft_free(nodes[1]); /* the leader crashes */
    nodes[1] = NULL;
    isolate(4, false);
    isolate(5, false);
    raft_campaign(nodes[4]);
    settle();
    cr_assert_neq(raft_get_role(nodes[4]), RAFT_LEADER, "n4 lacks committed entries");
    tick_all(40);
    uint64_t who = 0;
    cr_assert_eq(leader_count(&who), 1);
    cr_assert(who == 2 || who == 3, "only a node holding every committed entry can win");
    cr_assert_geq(raft_get_last_index(nodes[who]), committed);
}

Test(raft, restart_keeps_only_persisted_state)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    propose(1, "p1");
    propose(1, "p2");
    settle();
    struct raft_config c = cfg_for(2);
    restart(2, &c);
    cr_assert_eq(raft_get_term(nodes[2]), 2);
    cr_assert_eq(raft_get_last_index(nodes[2]), 4);
    cr_assert_eq(raft_get_commit(nodes[2]), 4);
    settle(); /* committed entries are applied again after the restart */
    cr_assert_eq(applied_upto[2], 4);
    /* the persisted vote survives: n2 voted for n1 in term 2 */
    struct raft_msg v = {.type = RAFT_MSG_VOTE, .from = 3, .to = 2, .term = 2, .index = 9,
                         .log_term = 2};
    raft_step(nodes[2], &v);
    ready(2);
    cr_assert(queue[nq - 1].m.reject);
    nq = 0;
    propose(1, "p3");
    settle();
    cr_assert_eq(raft_get_commit(nodes[2]), 5);
}

/* ---- PreVote and CheckQuorum (paper 9.6, etcd) -------------------------- */

Test(raft, prevote_partitioned_node_does_not_raise_term)
{
    struct raft_config c = cfg_for(1);
    c.pre_vote = true;
    c.check_quorum = true;
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    uint64_t term = raft_get_term(nodes[1]);
    isolate(3, true);
    tick_all(100);
    cr_assert_eq(raft_get_term(nodes[3]), term, "pre-votes failed: term unchanged");
    isolate(3, false);
    tick_all(5);
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER, "the rejoining node did not disrupt");
    cr_assert_eq(raft_get_term(nodes[1]), term);
    cr_assert_eq(raft_get_leader(nodes[3]), 1);
}

Test(raft, checkquorum_lease_ignores_disruptive_candidate)
{
    struct raft_config c = cfg_for(1);
    c.pre_vote = false;
    c.check_quorum = true;
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    isolate(3, true);
    tick_all(60); /* without pre-vote n3 raises its term again and again */
    cr_assert_gt(raft_get_term(nodes[3]), raft_get_term(nodes[1]));
    isolate(3, false);
    raft_campaign(nodes[3]);
    settle();
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER, "followers in lease ignore the vote");
    tick_all(30);
    uint64_t who = 0;
    cr_assert_eq(leader_count(&who), 1);
}

Test(raft, checkquorum_leader_steps_down_without_majority)
{
    struct raft_config c = cfg_for(1);
    c.check_quorum = true;
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    isolate(1, true);
    for (int t = 0; t < 25; t++) {
        raft_tick(nodes[1]);
        settle();
    }
    cr_assert_neq(raft_get_role(nodes[1]), RAFT_LEADER);
}

Test(raft, checkquorum_leader_stays_with_majority)
{
    struct raft_config c = cfg_for(1);
    c.check_quorum = true;
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    isolate(3, true);
    for (int t = 0; t < 50; t++) {
        raft_tick(nodes[1]);
        raft_tick(nodes[2]);
        settle();
    }
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER);
}

/* ---- ReadIndex (paper 6.4) ---------------------------------------------- */

Test(raft, readindex_after_heartbeat_round_batched)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    propose(1, "w");
    settle();
    unsigned hb = sent_count[RAFT_MSG_HEARTBEAT];
    for (uint64_t ctx = 1; ctx <= 10; ctx++)
        cr_assert_eq(raft_read_index(nodes[1], ctx), 0);
    settle();
    cr_assert_eq(n_reads_got[1], 10);
    for (int k = 0; k < 10; k++) {
        cr_assert_eq(reads_got[1][k].ctx, (uint64_t)k + 1);
        cr_assert_eq(reads_got[1][k].index, 3);
    }
    cr_assert_eq(sent_count[RAFT_MSG_HEARTBEAT] - hb, 2, "ten reads, one heartbeat round");
}

Test(raft, readindex_needs_quorum)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    isolate(1, true);
    cr_assert_eq(raft_read_index(nodes[1], 7), 0);
    settle();
    cr_assert_eq(n_reads_got[1], 0, "a leader cut off cannot confirm it still leads");
}

Test(raft, readindex_waits_for_commit_in_term)
{
    boot(3);
    drop_type[1] = 1u << RAFT_MSG_APP; /* the new leader's no-op cannot commit */
    raft_campaign(nodes[1]);
    settle();
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER);
    cr_assert_eq(raft_read_index(nodes[1], 1), 0);
    tick_all(3);
    cr_assert_eq(n_reads_got[1], 0);
    drop_type[1] = 0;
    propose(1, "x");
    tick_all(3);
    cr_assert_eq(n_reads_got[1], 1);
    cr_assert_geq(reads_got[1][0].index, 2);
}

Test(raft, readindex_on_follower_forwards)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    propose(1, "w");
    settle();
    cr_assert_eq(raft_read_index(nodes[3], 42), 0);
    settle();
    cr_assert_eq(n_reads_got[3], 1);
    cr_assert_eq(reads_got[3][0].ctx, 42);
    cr_assert_eq(reads_got[3][0].index, 3);
    struct raft_config c = cfg_for(9);
    struct raft *lonely;
    struct raft_membership m = {.voters = {9, 10}, .n_voters = 2};
    cr_assert_eq(raft_new(&c, NULL, &m, &lonely), 0);
    cr_assert_eq(raft_read_index(lonely, 1), QERR_NO_LEADER);
    raft_free(lonely);
}

/* ---- snapshots (paper 7) ------------------------------------------------ */

/* lead_with_n3_cut_off: three members, n1 leading, 20 entries applied on
 * n1 and n2 while n3 hears nothing after the leader's no-op */
static void lead_with_n3_cut_off(void)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    isolate(3, true);
    for (int k = 0; k < 20; k++)
        propose(1, "s");
    settle();
}

Test(raft, snapshot_compacts_and_catches_up_follower)
{
    lead_with_n3_cut_off();
    cr_assert_eq(raft_get_applied(nodes[1]), 22);
    cr_assert_eq(raft_compact(nodes[1], "STATE", 5), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 23);
    cr_assert_null(raft_get_entry(nodes[1], 10));
    isolate(3, false);
    propose(1, "after");
    tick_all(3);
    cr_assert(snap_restored[3], "n3 received and restored the snapshot");
    cr_assert_eq(disks[3].snap.index, 22);
    cr_assert_eq(disks[3].snap.len, 5);
    cr_assert_eq(memcmp(disks[3].snap.data, "STATE", 5), 0);
    cr_assert_eq(raft_get_commit(nodes[3]), 23);
    cr_assert_eq(applied_upto[3], 23);
    cr_assert_eq(raft_get_membership(nodes[3])->n_voters, 3);
    /* restart from snapshot + entries */
    struct raft_config c = cfg_for(3);
    restart(3, &c);
    cr_assert_eq(raft_get_first_index(nodes[3]), 23);
    cr_assert_eq(raft_get_last_index(nodes[3]), 23);
    settle();
}

Test(raft, snapshot_compact_requires_applied)
{
    boot(1);
    cr_assert_eq(raft_compact(nodes[1], "x", 1), 0, "bootstrap entry is applied");
    raft_campaign(nodes[1]);
    settle();
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER, "single voter elects itself");
    propose(1, "y");
    settle();
    cr_assert_eq(raft_get_commit(nodes[1]), 3);
}

/* ---- raft_trim_log: bounding the in-memory log between snapshots ------- */

Test(raft, trim_log_drops_applied_entries_only)
{
    boot(1);
    raft_campaign(nodes[1]);
    settle();
    for (int k = 0; k < 20; k++)
        propose(1, "t");
    settle();
    cr_assert_eq(raft_get_applied(nodes[1]), 22);
    cr_assert_eq(raft_trim_log(nodes[1], 10), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 11);
    cr_assert_null(raft_get_entry(nodes[1], 10));
    cr_assert_not_null(raft_get_entry(nodes[1], 11));
    cr_assert_eq(raft_trim_log(nodes[1], 5), 0, "an older index is a no-op");
    cr_assert_eq(raft_get_first_index(nodes[1]), 11);
    /* never past the applied index */
    propose(1, "unapplied");
    cr_assert_eq(raft_trim_log(nodes[1], 1000), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 23);
    cr_assert_not_null(raft_get_entry(nodes[1], 23), "the new entry is not applied yet");
    settle();
    cr_assert_eq(raft_get_applied(nodes[1]), 23);
    /* a restart starts from the disk, which is not concerned */
    struct raft_config c = cfg_for(1);
    restart(1, &c);
    cr_assert_eq(raft_get_first_index(nodes[1]), 1);
    cr_assert_eq(raft_get_last_index(nodes[1]), 23);
    /* not between raft_ready and raft_advance */
    raft_campaign(nodes[1]);
    struct raft_ready rd;
    cr_assert_eq(raft_ready(nodes[1], &rd), 0);
    cr_assert_eq(raft_trim_log(nodes[1], 20), -EBUSY);
    cr_assert_eq(raft_get_first_index(nodes[1]), 1);
    raft_advance(nodes[1]);
}

Test(raft, trim_log_refused_when_snapshot_has_data)
{
    boot(1);
    raft_campaign(nodes[1]);
    settle();
    propose(1, "a");
    settle();
    cr_assert_eq(raft_compact(nodes[1], "STATE", 5), 0);
    propose(1, "b");
    propose(1, "c");
    settle();
    cr_assert_eq(raft_trim_log(nodes[1], raft_get_applied(nodes[1])), -EINVAL);
}

Test(raft, trim_log_leader_keeps_what_a_follower_lacks)
{
    lead_with_n3_cut_off();
    cr_assert_eq(raft_get_applied(nodes[1]), 22);
    /* n3 acknowledged up to 2 (the no-op): nothing after it goes */
    cr_assert_eq(raft_trim_log(nodes[1], 20), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 3);
    /* a follower's own log is trimmed as asked */
    cr_assert_eq(raft_trim_log(nodes[2], 20), 0);
    cr_assert_eq(raft_get_first_index(nodes[2]), 21);
    /* n3 catches up from the log, without a snapshot */
    isolate(3, false);
    propose(1, "after");
    tick_all(3);
    cr_assert_not(snap_restored[3]);
    cr_assert_eq(sent_count[RAFT_MSG_SNAP], 0);
    cr_assert_eq(applied_upto[3], 23);
    cr_assert_eq(raft_trim_log(nodes[1], 20), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 21);
}

Test(raft, trim_log_lagging_follower_gets_a_dataless_snapshot)
{
    lead_with_n3_cut_off();
    /* n2 leads now, with n3 unknown: it trims once n3 answers */
    raft_campaign(nodes[2]);
    settle();
    cr_assert_eq(raft_get_role(nodes[2]), RAFT_LEADER);
    uint64_t applied = raft_get_applied(nodes[2]);
    cr_assert_eq(applied, 23);
    cr_assert_eq(raft_trim_log(nodes[2], applied), 0);
    cr_assert_eq(raft_get_first_index(nodes[2]), 1, "n3's progress is unknown");
    /* a follower trims as asked; when it leads, n3 needs a snapshot */
    cr_assert_eq(raft_trim_log(nodes[1], 20), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 21);
    raft_campaign(nodes[1]);
    settle();
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER);
    isolate(3, false);
    propose(1, "after");
    tick_all(5);
    cr_assert(snap_restored[3], "n3 restored the snapshot");
    cr_assert_eq(disks[3].snap.index, 20);
    cr_assert_eq(disks[3].snap.len, 0);
    cr_assert_eq(disks[3].snap.term, raft_get_entry(nodes[2], 20)->term);
    cr_assert_eq(disks[3].snap.conf.n_voters, 3);
    cr_assert_eq(raft_get_commit(nodes[3]), raft_get_last_index(nodes[1]));
    cr_assert_eq(applied_upto[3], raft_get_last_index(nodes[1]));
}

Test(raft, trim_log_not_across_a_configuration_change)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    for (int k = 0; k < 5; k++)
        propose(1, "a");
    settle();
    struct raft_membership m = *raft_get_membership(nodes[1]);
    m.learners[m.n_learners++] = 4; /* never started: its match stays 0 */
    uint64_t ci = 0;
    cr_assert_eq(raft_propose_conf(nodes[1], &m, &ci), 0);
    for (int k = 0; k < 5; k++)
        propose(1, "b");
    settle();
    cr_assert_eq(raft_get_applied(nodes[2]), ci + 5);
    /* the follower's membership at ci - 1 was another one: nothing goes */
    cr_assert_eq(raft_trim_log(nodes[2], ci - 1), 0);
    cr_assert_eq(raft_get_first_index(nodes[2]), 1);
    /* at or after the change it may */
    cr_assert_eq(raft_trim_log(nodes[2], ci + 2), 0);
    cr_assert_eq(raft_get_first_index(nodes[2]), ci + 3);
    /* the leader keeps everything the learner it never heard from lacks */
    cr_assert_eq(raft_trim_log(nodes[1], ci + 2), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 1);
}

/* ---- raft_compact_keep: a snapshot that keeps catch-up entries --------- */

Test(raft, compact_keep_keeps_the_last_entries_for_followers)
{
    lead_with_n3_cut_off();
    cr_assert_eq(raft_get_applied(nodes[1]), 22);
    /* the bound on memory: past the entries kept, even what n3 lacks goes */
    cr_assert_eq(raft_compact_keep(nodes[1], 8), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), 15);
    cr_assert_null(raft_get_entry(nodes[1], 14));
    cr_assert_eq(raft_compact_keep(nodes[1], 10), 0, "keeping more is a no-op");
    cr_assert_eq(raft_get_first_index(nodes[1]), 15);
    /* n3, 20 entries behind, gets a data-less snapshot at the index kept */
    isolate(3, false);
    propose(1, "back");
    tick_all(5);
    cr_assert(snap_restored[3], "n3 restored the snapshot");
    cr_assert_eq(disks[3].snap.index, 14);
    cr_assert_eq(disks[3].snap.len, 0);
    cr_assert_eq(applied_upto[3], raft_get_last_index(nodes[1]));
    /* n2 is a few entries behind when the leader compacts, as followers are
     * under load: it goes on from the log */
    isolate(2, true);
    for (int k = 0; k < 3; k++)
        propose(1, "t");
    settle();
    uint64_t applied = raft_get_applied(nodes[1]);
    cr_assert_eq(raft_compact_keep(nodes[1], 5), 0);
    cr_assert_eq(raft_get_first_index(nodes[1]), applied - 4);
    isolate(2, false);
    propose(1, "after");
    tick_all(3);
    cr_assert_not(snap_restored[2], "n2 was sent a snapshot");
    cr_assert_eq(applied_upto[2], raft_get_last_index(nodes[1]));
}

Test(raft, compact_keep_not_below_a_configuration_change)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    for (int k = 0; k < 5; k++)
        propose(1, "a");
    settle();
    struct raft_membership m = *raft_get_membership(nodes[1]);
    m.learners[m.n_learners++] = 4; /* never started */
    uint64_t ci = 0;
    cr_assert_eq(raft_propose_conf(nodes[1], &m, &ci), 0);
    for (int k = 0; k < 5; k++)
        propose(1, "b");
    settle();
    cr_assert_eq(raft_get_applied(nodes[2]), ci + 5);
    /* keeping 8 would start the log before the change: it stops there */
    cr_assert_eq(raft_compact_keep(nodes[2], 8), 0);
    cr_assert_eq(raft_get_first_index(nodes[2]), ci + 1);
    cr_assert_eq(raft_compact_keep(nodes[2], 2), 0);
    cr_assert_eq(raft_get_first_index(nodes[2]), ci + 4);
}

Test(raft, compact_keep_refused_when_snapshot_has_data)
{
    boot(1);
    raft_campaign(nodes[1]);
    settle();
    propose(1, "a");
    settle();
    cr_assert_eq(raft_compact(nodes[1], "STATE", 5), 0);
    propose(1, "b");
    settle();
    cr_assert_eq(raft_compact_keep(nodes[1], 0), -EINVAL);
}

/* ---- membership changes (paper 6, one server at a time) ---------------- */

static struct raft_membership cur_conf(int i) { return *raft_get_membership(nodes[i]); }

Test(raft, membership_add_learner_promote_remove)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    struct raft_config c = cfg_for(4);
    cr_assert_eq(raft_new(&c, NULL, NULL, &nodes[4]), 0); /* joins empty */
    struct raft_membership m = cur_conf(1);
    m.learners[m.n_learners++] = 4;
    cr_assert_eq(raft_propose_conf(nodes[1], &m, NULL), 0);
    struct raft_membership m2 = m;
    m2.n_learners = 0;
    m2.voters[m2.n_voters++] = 4;
    cr_assert_eq(raft_propose_conf(nodes[1], &m2, NULL), -EBUSY, "one change at a time");
    settle();
    tick_all(2);
    cr_assert(raft_membership_is_learner(raft_get_membership(nodes[4]), 4));
    cr_assert_eq(raft_get_last_index(nodes[4]), raft_get_last_index(nodes[1]));
    /* a learner never campaigns */
    for (int t = 0; t < 50; t++)
        raft_tick(nodes[4]);
    settle();
    cr_assert_eq(raft_get_role(nodes[4]), RAFT_FOLLOWER);
    cr_assert_eq(raft_propose_conf(nodes[1], &m2, NULL), 0);
    settle();
    cr_assert(raft_membership_is_voter(raft_get_membership(nodes[1]), 4));
    /* with 4 voters, a commit needs 3 */
    isolate(3, true);
    isolate(4, true);
    uint64_t before = raft_get_commit(nodes[1]);
    propose(1, "needs-3");
    settle();
    cr_assert_eq(raft_get_commit(nodes[1]), before);
    isolate(4, false);
    tick_all(6); /* unanswered appends are retried after a few heartbeats */
    cr_assert_gt(raft_get_commit(nodes[1]), before);
    isolate(3, false);
    /* remove voter 2 */
    struct raft_membership m3 = cur_conf(1);
    for (uint32_t k = 0; k < m3.n_voters; k++)
        if (m3.voters[k] == 2)
            m3.voters[k] = m3.voters[--m3.n_voters];
    cr_assert_eq(raft_propose_conf(nodes[1], &m3, NULL), 0);
    tick_all(2);
    cr_assert_not(raft_membership_is_voter(raft_get_membership(nodes[1]), 2));
    isolate(2, true);
    propose(1, "without-2");
    tick_all(2);
    cr_assert_eq(raft_get_commit(nodes[1]), raft_get_last_index(nodes[1]));
}

Test(raft, membership_invalid_changes_refused)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    struct raft_membership m = cur_conf(1);
    m.voters[m.n_voters++] = 4;
    m.voters[m.n_voters++] = 5;
    cr_assert_eq(raft_propose_conf(nodes[1], &m, NULL), -EINVAL);
    cr_assert_eq(raft_propose_conf(nodes[2], &m, NULL), QERR_NO_LEADER);
}

Test(raft, membership_removed_leader_steps_down)
{
    struct raft_config c = cfg_for(1);
    c.pre_vote = true;
    c.check_quorum = true;
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    struct raft_membership m = cur_conf(1);
    m.voters[0] = m.voters[--m.n_voters]; /* drop voter 1 */
    cr_assert_eq(raft_propose_conf(nodes[1], &m, NULL), 0);
    settle();
    cr_assert_neq(raft_get_role(nodes[1]), RAFT_LEADER);
    tick_all(60);
    uint64_t who = 0;
    cr_assert_eq(leader_count(&who), 1);
    cr_assert(who == 2 || who == 3);
    /* the removed node keeps ticking but does not disrupt */
    uint64_t term = raft_get_term(nodes[who]);
    tick_all(60);
    cr_assert_eq(raft_get_term(nodes[who]), term);
}

/* ---- leadership transfer (paper 3.10) ----------------------------------- */

Test(raft, transfer_leadership)
{
    struct raft_config c = cfg_for(1);
    c.pre_vote = true;
    c.check_quorum = true;
    boot_cfg(3, &c);
    raft_campaign(nodes[1]);
    settle();
    isolate(3, true);
    propose(1, "t");
    settle();
    isolate(3, false);
    cr_assert_eq(raft_transfer_leader(nodes[1], 3), 0);
    cr_assert_eq(raft_propose(nodes[1], "x", 1, NULL), -EBUSY, "no proposals while moving");
    settle(); /* n3 is caught up first, then told to campaign */
    cr_assert_eq(raft_get_role(nodes[3]), RAFT_LEADER);
    cr_assert_eq(raft_get_leader(nodes[1]), 3);
    cr_assert_eq(raft_get_term(nodes[3]), 3);
    cr_assert_eq(raft_transfer_leader(nodes[1], 2), QERR_NO_LEADER);
    cr_assert_eq(raft_transfer_leader(nodes[3], 3), -EINVAL);
}

Test(raft, transfer_aborts_after_timeout)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    isolate(3, true);
    cr_assert_eq(raft_transfer_leader(nodes[1], 3), 0);
    cr_assert_eq(raft_propose(nodes[1], "x", 1, NULL), -EBUSY);
    for (int t = 0; t < 12; t++) {
        raft_tick(nodes[1]);
        raft_tick(nodes[2]);
        settle();
    }
    cr_assert_eq(raft_get_role(nodes[1]), RAFT_LEADER);
    cr_assert_eq(raft_propose(nodes[1], "x", 1, NULL), 0, "transfer abandoned");
}

/* ---- API edges ---------------------------------------------------------- */

Test(raft, new_rejects_bad_config)
{
    struct raft_config c = cfg_for(1);
    struct raft *r;
    c.id = 0;
    cr_assert_eq(raft_new(&c, NULL, NULL, &r), -EINVAL);
    c = cfg_for(1);
    c.heartbeat_tick = c.election_tick;
    cr_assert_eq(raft_new(&c, NULL, NULL, &r), -EINVAL);
    c = cfg_for(1);
    struct raft_entry e = {.term = 1, .index = 5};
    struct raft_storage st = {.entries = &e, .n_entries = 1};
    cr_assert_eq(raft_new(&c, &st, NULL, &r), -EINVAL, "entries must follow the snapshot");
}

Test(raft, follower_refuses_proposals)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    cr_assert_eq(raft_propose(nodes[2], "x", 1, NULL), QERR_NO_LEADER);
    cr_assert_eq(raft_get_leader(nodes[2]), 1, "the caller forwards to the leader");
}

/* Applying past a Ready (raft_advance_applied): committed entries are
 * handed out once; the applied index stays where the caller says, the
 * entries above it stay readable, and raft_set_applied moves it on. */
Test(raft, apply_past_ready_hands_out_once)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    uint64_t held = raft_get_applied(nodes[2]);
    hold_applied[2] = held;
    propose(1, "a");
    propose(1, "b");
    propose(1, "c");
    settle(); /* would not settle if node 2 were handed them again */
    uint64_t commit = raft_get_commit(nodes[2]);
    cr_assert_eq(commit, held + 3);
    cr_assert_eq(raft_get_applied(nodes[2]), held);
    cr_assert_eq(raft_get_applying(nodes[2]), commit);
    cr_assert(!raft_has_ready(nodes[2]));
    cr_assert_eq(applied_upto[2], commit, "each entry handed out once, in order");
    const struct raft_entry *e = raft_get_entry(nodes[2], held + 2);
    cr_assert_not_null(e);
    cr_assert_eq(e->len, 1);
    cr_assert_eq(memcmp(e->data, "b", 1), 0);
    /* the held entries are not trimmed */
    cr_assert_eq(raft_trim_log(nodes[2], commit), 0);
    cr_assert_not_null(raft_get_entry(nodes[2], held + 1));
    raft_set_applied(nodes[2], held + 1);
    cr_assert_eq(raft_get_applied(nodes[2]), held + 1);
    raft_set_applied(nodes[2], UINT64_MAX); /* clamped to what was handed out */
    cr_assert_eq(raft_get_applied(nodes[2]), commit);
    hold_applied[2] = 0;
    propose(1, "d");
    settle();
    cr_assert_eq(raft_get_applied(nodes[2]), commit + 1);
}

Test(raft, apply_past_ready_conf_waits_for_apply)
{
    boot(3);
    raft_campaign(nodes[1]);
    settle();
    struct raft_config c = cfg_for(4);
    cr_assert_eq(raft_new(&c, NULL, NULL, &nodes[4]), 0);
    hold_applied[1] = raft_get_applied(nodes[1]);
    struct raft_membership m = cur_conf(1);
    m.learners[m.n_learners++] = 4;
    uint64_t ci = 0;
    cr_assert_eq(raft_propose_conf(nodes[1], &m, &ci), 0);
    settle();
    cr_assert_geq(raft_get_commit(nodes[1]), ci);
    cr_assert(!raft_membership_is_learner(raft_get_membership(nodes[1]), 4),
              "a configuration takes effect once applied, not once handed out");
    struct raft_membership m2 = cur_conf(1);
    m2.learners[m2.n_learners++] = 5;
    cr_assert_eq(raft_propose_conf(nodes[1], &m2, NULL), -EBUSY);
    raft_set_applied(nodes[1], ci);
    hold_applied[1] = 0;
    cr_assert(raft_membership_is_learner(raft_get_membership(nodes[1]), 4));
    settle();
}
