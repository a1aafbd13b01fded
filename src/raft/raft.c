/* raft/raft.c: the Raft state machine (elections, replication, commit,
 * ReadIndex, snapshots, membership, leadership transfer).
 *
 * Structure follows etcd-io/raft: raft_step checks the term of a message
 * once, then hands it to the step function of the current role. Nothing
 * here does I/O: messages collect in an outbox and leave through raft_ready,
 * together with what must be persisted first. Append messages carry only an
 * index range until raft_ready turns them into pointers into the log, so the
 * log may grow between a send and the Ready without dangling pointers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "raft/raft_int.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(struct raft *r)
{
    /* splitmix64: deterministic from the caller's seed. */
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void reset_randomized_timeout(struct raft *r)
{
    r->randomized_timeout = r->cfg.election_tick + (unsigned)(rng_next(r) % r->cfg.election_tick);
}

static struct progress *pr_find(struct raft *r, uint64_t id)
{
    for (uint32_t k = 0; k < r->n_prs; k++)
        if (r->prs[k].id == id)
            return &r->prs[k];
    return NULL;
}

static bool is_voter(const struct raft *r, uint64_t id)
{
    return raft_membership_is_voter(&r->conf, id);
}

static bool promotable(const struct raft *r) { return is_voter(r, r->id); }

static uint32_t quorum_size(const struct raft *r) { return r->conf.n_voters / 2 + 1; }

static struct raft_msg *msg_new(struct raft *r, uint8_t type, uint64_t to)
{
    if (r->n_msgs == r->cap_msgs) {
        size_t ncap = r->cap_msgs ? r->cap_msgs * 2 : 16;
        struct raft_msg *m = realloc(r->msgs, ncap * sizeof(*m));
        if (!m)
            return NULL; /* dropped like a lost packet: Raft tolerates that */
        r->msgs = m;
        r->cap_msgs = ncap;
    }
    struct raft_msg *m = &r->msgs[r->n_msgs++];
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->from = r->id;
    m->to = to;
    m->term = r->term;
    return m;
}

static void commit_to(struct raft *r, uint64_t c)
{
    uint64_t last = log_last_index(&r->log);
    if (c > last)
        c = last;
    if (c > r->commit)
        r->commit = c;
}

static bool committed_in_term(const struct raft *r)
{
    return log_term_or0(&r->log, r->commit) == r->term;
}

/* ---- membership --------------------------------------------------------- */

static void pr_init(struct raft *r, struct progress *p, uint64_t id, bool learner)
{
    struct inflights keep = p->inflights;
    memset(p, 0, sizeof(*p));
    p->inflights = keep;
    inflights_reset(&p->inflights);
    p->id = id;
    p->learner = learner;
    p->next = log_last_index(&r->log) + 1;
    p->recent_active = true; /* a new member gets a grace period */
    if (id == r->id)
        p->match = log_last_index(&r->log);
}

static void abort_transfer(struct raft *r) { r->lead_transferee = RAFT_NONE; }

static bool maybe_commit(struct raft *r);

/* conf_apply makes |m| the membership in force and reshapes the progress
 * table: existing members keep their progress, new ones start probing. */
static int conf_apply(struct raft *r, const struct raft_membership *m)
{
    struct progress old[RAFT_MAX_MEMBERS];
    uint32_t n_old = r->n_prs;
    memcpy(old, r->prs, sizeof(old[0]) * n_old);
    bool used[RAFT_MAX_MEMBERS] = {false};
    struct progress next[RAFT_MAX_MEMBERS];
    uint32_t n = 0;
    for (uint32_t k = 0; k < m->n_voters + m->n_learners; k++) {
        bool learner = k >= m->n_voters;
        uint64_t id = learner ? m->learners[k - m->n_voters] : m->voters[k];
        struct progress *p = &next[n++];
        int found = -1;
        for (uint32_t j = 0; j < n_old; j++)
            if (old[j].id == id)
                found = (int)j;
        if (found >= 0) {
            *p = old[found];
            used[found] = true;
            p->learner = learner;
        } else {
            memset(p, 0, sizeof(*p));
            int rc = inflights_init(&p->inflights, r->cfg.max_inflight);
            if (rc) {
                for (uint32_t j = 0; j + 1 < n; j++)
                    if (!raft_membership_is_voter(&r->conf, next[j].id) &&
                        !raft_membership_is_learner(&r->conf, next[j].id))
                        inflights_free(&next[j].inflights);
                return rc;
            }
            pr_init(r, p, id, learner);
        }
    }
    for (uint32_t j = 0; j < n_old; j++)
        if (!used[j])
            inflights_free(&old[j].inflights);
    memcpy(r->prs, next, sizeof(next[0]) * n);
    r->n_prs = n;
    r->conf = *m;

    if (r->role == RAFT_LEADER) {
        if (!promotable(r)) {
            /* Removed (or never a voter): stop leading, let the others elect. */
            r->role = RAFT_FOLLOWER;
            r->lead = RAFT_NONE;
            abort_transfer(r);
            r->n_reads = 0;
            r->election_elapsed = 0;
            reset_randomized_timeout(r);
            return 0;
        }
        if (r->lead_transferee && !is_voter(r, r->lead_transferee))
            abort_transfer(r);
        maybe_commit(r);
        r->bcast_needed = true;
    }
    return 0;
}

/* ---- role changes ------------------------------------------------------- */

static void reset(struct raft *r, uint64_t term)
{
    if (term != r->term) {
        r->term = term;
        r->vote = RAFT_NONE;
    }
    r->lead = RAFT_NONE;
    r->election_elapsed = 0;
    r->heartbeat_elapsed = 0;
    reset_randomized_timeout(r);
    abort_transfer(r);
    r->n_voted = 0;
    for (uint32_t k = 0; k < r->n_prs; k++)
        pr_init(r, &r->prs[k], r->prs[k].id, r->prs[k].learner);
    r->n_reads = 0;
    r->read_round_needed = false;
    r->bcast_needed = false;
}

static void become_follower(struct raft *r, uint64_t term, uint64_t lead)
{
    reset(r, term);
    r->role = RAFT_FOLLOWER;
    r->lead = lead;
}

static void become_pre_candidate(struct raft *r)
{
    /* No term change and no vote: a pre-vote disturbs nobody. */
    r->role = RAFT_PRE_CANDIDATE;
    r->lead = RAFT_NONE;
    r->n_voted = 0;
}

static void become_candidate(struct raft *r)
{
    reset(r, r->term + 1);
    r->vote = r->id;
    r->role = RAFT_CANDIDATE;
}

static void become_leader(struct raft *r)
{
    reset(r, r->term);
    r->lead = r->id;
    r->role = RAFT_LEADER;
    struct progress *self = pr_find(r, r->id);
    if (self)
        progress_become_replicate(self);
    /* Entries of earlier terms may hide a configuration change: allow none
     * until everything now in the log is applied. */
    r->pending_conf_index = log_last_index(&r->log);
    /* The no-op of paper 5.4.2 / 8: commits earlier entries and lets reads
     * be served. If it cannot be allocated the next proposal does its job. */
    (void)log_append_one(&r->log, r->term, RAFT_ENTRY_NORMAL, NULL, 0);
    if (self)
        self->match = log_last_index(&r->log), self->next = self->match + 1;
    r->bcast_needed = true;
}

/* ---- votes -------------------------------------------------------------- */

enum { VOTE_PENDING, VOTE_WON, VOTE_LOST };

static int poll(struct raft *r, uint64_t id, bool grant)
{
    bool seen = false;
    for (uint32_t k = 0; k < r->n_voted; k++)
        if (r->voted_from[k] == id)
            seen = true;
    if (!seen && r->n_voted < RAFT_MAX_MEMBERS) {
        r->voted_from[r->n_voted] = id;
        r->voted_grant[r->n_voted] = grant;
        r->n_voted++;
    }
    uint32_t yes = 0, no = 0;
    for (uint32_t k = 0; k < r->n_voted; k++) {
        if (!is_voter(r, r->voted_from[k]))
            continue;
        if (r->voted_grant[k])
            yes++;
        else
            no++;
    }
    uint32_t q = quorum_size(r);
    if (yes >= q)
        return VOTE_WON;
    if (no > r->conf.n_voters - q)
        return VOTE_LOST;
    return VOTE_PENDING;
}

static void campaign(struct raft *r, bool pre, bool force)
{
    if (!promotable(r))
        return;
    uint64_t vterm;
    uint8_t type;
    if (pre) {
        become_pre_candidate(r);
        vterm = r->term + 1;
        type = RAFT_MSG_PRE_VOTE;
    } else {
        become_candidate(r);
        vterm = r->term;
        type = RAFT_MSG_VOTE;
    }
    if (poll(r, r->id, true) == VOTE_WON) {
        if (pre)
            campaign(r, false, force);
        else
            become_leader(r);
        return;
    }
    for (uint32_t k = 0; k < r->conf.n_voters; k++) {
        uint64_t id = r->conf.voters[k];
        if (id == r->id)
            continue;
        struct raft_msg *m = msg_new(r, type, id);
        if (!m)
            continue;
        m->term = vterm;
        m->index = log_last_index(&r->log);
        m->log_term = log_last_term(&r->log);
        m->force = force;
    }
}

/* ---- leader: sending ---------------------------------------------------- */

static bool send_append(struct raft *r, struct progress *pr, bool send_if_empty)
{
    if (pr->id == r->id || progress_is_paused(pr))
        return false;
    uint64_t prev = pr->next - 1, prev_term;
    if (log_term(&r->log, prev, &prev_term) != 0) {
        /* The entries it needs are compacted: send the snapshot. */
        if (!pr->recent_active || r->snap.index == 0)
            return false;
        struct raft_msg *m = msg_new(r, RAFT_MSG_SNAP, pr->id);
        if (!m)
            return false;
        progress_become_snapshot(pr, r->snap.index);
        pr->sent_this_pass = true;
        return true;
    }
    uint64_t last = log_last_index(&r->log);
    uint64_t n = last - prev;
    if (n > r->cfg.max_msg_entries)
        n = r->cfg.max_msg_entries;
    if (n == 0 && !send_if_empty)
        return false;
    struct raft_msg *m = msg_new(r, RAFT_MSG_APP, pr->id);
    if (!m)
        return false;
    m->index = prev;
    m->log_term = prev_term;
    m->commit = r->commit;
    m->n_entries = (size_t)n;
    if (pr->state == PROGRESS_REPLICATE) {
        if (n > 0) {
            pr->next = prev + n + 1;
            inflights_add(&pr->inflights, prev + n);
        }
    } else {
        pr->probe_sent = true;
    }
    pr->sent_this_pass = true;
    return true;
}

static void bcast_append(struct raft *r)
{
    for (uint32_t k = 0; k < r->n_prs; k++) {
        struct progress *pr = &r->prs[k];
        if (pr->id != r->id)
            send_append(r, pr, !pr->sent_this_pass);
    }
}

static void bcast_heartbeat(struct raft *r)
{
    for (uint32_t k = 0; k < r->n_prs; k++) {
        struct progress *pr = &r->prs[k];
        if (pr->id == r->id)
            continue;
        struct raft_msg *m = msg_new(r, RAFT_MSG_HEARTBEAT, pr->id);
        if (!m)
            continue;
        m->commit = pr->match < r->commit ? pr->match : r->commit;
        m->ctx = r->read_round;
    }
}

/* maybe_commit advances the commit index to the highest index stored on a
 * majority of voters, but only by counting an entry of the current term
 * (paper 5.4.2, figure 8): earlier entries commit indirectly with it. */
static bool maybe_commit(struct raft *r)
{
    if (r->role != RAFT_LEADER || r->conf.n_voters == 0)
        return false;
    uint64_t vals[RAFT_MAX_MEMBERS];
    size_t n = 0;
    for (uint32_t k = 0; k < r->conf.n_voters; k++) {
        struct progress *pr = pr_find(r, r->conf.voters[k]);
        vals[n++] = pr ? pr->match : 0;
    }
    uint64_t mci = quorum_index(vals, n);
    if (mci <= r->commit)
        return false;
#ifndef RAFT_PLANTED_BUG
    /* Built without this check (-DRAFT_PLANTED_BUG, libqraft_planted) the
     * core has the figure-8 bug that tests/raft must catch. */
    if (log_term_or0(&r->log, mci) != r->term)
        return false;
#endif
    bool first_in_term = !committed_in_term(r);
    r->commit = mci;
    if (first_in_term && r->n_reads > 0)
        r->read_round_needed = true; /* reads held until now can go */
    return true;
}

/* ---- reads -------------------------------------------------------------- */

static void read_state_push(struct raft *r, uint64_t ctx, uint64_t index)
{
    if (r->n_read_states == r->cap_read_states) {
        size_t ncap = r->cap_read_states ? r->cap_read_states * 2 : 8;
        struct raft_read_state *p = realloc(r->read_states, ncap * sizeof(*p));
        if (!p)
            return; /* dropped: the caller times the read out */
        r->read_states = p;
        r->cap_read_states = ncap;
    }
    r->read_states[r->n_read_states++] = (struct raft_read_state){ctx, index};
}

static void read_release(struct raft *r, const struct pending_read *pr)
{
    if (pr->from == r->id) {
        read_state_push(r, pr->ctx, pr->index);
        return;
    }
    struct raft_msg *m = msg_new(r, RAFT_MSG_READ_INDEX_RESP, pr->from);
    if (m) {
        m->ctx = pr->ctx;
        m->index = pr->index;
    }
}

static int leader_read(struct raft *r, uint64_t ctx, uint64_t from)
{
    if (r->conf.n_voters == 1 && committed_in_term(r)) {
        struct pending_read p = {ctx, from, r->commit, 0};
        read_release(r, &p);
        return 0;
    }
    if (r->n_reads == r->cap_reads) {
        size_t ncap = r->cap_reads ? r->cap_reads * 2 : 16;
        struct pending_read *p = realloc(r->reads, ncap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        r->reads = p;
        r->cap_reads = ncap;
    }
    r->reads[r->n_reads++] = (struct pending_read){ctx, from, 0, 0};
    if (committed_in_term(r))
        r->read_round_needed = true;
    return 0;
}

/* start_read_round gives every read without a round the commit index now
 * and the next heartbeat round, and sends that round. All reads of one loop
 * pass share it (batching). */
static void start_read_round(struct raft *r)
{
    r->read_round_needed = false;
    if (!committed_in_term(r))
        return;
    r->read_round++;
    size_t kept = 0;
    for (size_t k = 0; k < r->n_reads; k++) {
        struct pending_read *p = &r->reads[k];
        if (p->round == 0) {
            p->round = r->read_round;
            p->index = r->commit;
        }
        if (r->conf.n_voters == 1)
            read_release(r, p);
        else
            r->reads[kept++] = *p;
    }
    r->n_reads = kept;
    if (r->conf.n_voters > 1)
        bcast_heartbeat(r);
}

static void advance_reads(struct raft *r)
{
    if (r->n_reads == 0)
        return;
    uint64_t vals[RAFT_MAX_MEMBERS];
    size_t n = 0;
    for (uint32_t k = 0; k < r->conf.n_voters; k++) {
        uint64_t id = r->conf.voters[k];
        struct progress *pr = pr_find(r, id);
        vals[n++] = id == r->id ? r->read_round : (pr ? pr->read_ack : 0);
    }
    uint64_t q = quorum_index(vals, n);
    size_t kept = 0;
    for (size_t k = 0; k < r->n_reads; k++) {
        struct pending_read *p = &r->reads[k];
        if (p->round != 0 && p->round <= q)
            read_release(r, p);
        else
            r->reads[kept++] = *p;
    }
    r->n_reads = kept;
}

/* ---- leader: receiving -------------------------------------------------- */

static void send_timeout_now(struct raft *r, uint64_t to)
{
    msg_new(r, RAFT_MSG_TIMEOUT_NOW, to);
}

static void leader_step(struct raft *r, const struct raft_msg *m)
{
    if (m->type == RAFT_MSG_READ_INDEX) {
        leader_read(r, m->ctx, m->from);
        return;
    }
    struct progress *pr = pr_find(r, m->from);
    if (!pr)
        return;
    uint64_t last = log_last_index(&r->log);
    switch (m->type) {
    case RAFT_MSG_APP_RESP:
        pr->recent_active = true;
        if (m->reject) {
            uint64_t hint = m->reject_hint;
            if (m->log_term > 0)
                hint = log_find_conflict_by_term(&r->log, m->reject_hint, m->log_term);
            if (progress_maybe_decr(pr, m->index, hint)) {
                if (pr->state == PROGRESS_REPLICATE)
                    progress_become_probe(pr);
                send_append(r, pr, true);
            }
            return;
        }
        if (m->index > last)
            return; /* cannot be ours */
        {
            bool was_paused = progress_is_paused(pr);
            if (progress_maybe_update(pr, m->index)) {
                pr->acked = true;
                if (pr->state == PROGRESS_PROBE) {
                    progress_become_replicate(pr);
                } else if (pr->state == PROGRESS_SNAPSHOT && pr->match >= pr->pending_snapshot) {
                    progress_become_probe(pr);
                    progress_become_replicate(pr);
                } else if (pr->state == PROGRESS_REPLICATE) {
                    inflights_free_le(&pr->inflights, m->index);
                }
                if (maybe_commit(r))
                    r->bcast_needed = true;
                else if (was_paused)
                    send_append(r, pr, true); /* it may not know the commit index */
                while (send_append(r, pr, false))
                    ;
                if (m->from == r->lead_transferee && pr->match == log_last_index(&r->log))
                    send_timeout_now(r, m->from);
            }
        }
        return;
    case RAFT_MSG_HEARTBEAT_RESP:
        pr->recent_active = true;
        pr->probe_sent = false;
        if (pr->state == PROGRESS_REPLICATE) {
            if (pr->acked || pr->match >= last) {
                pr->stall_ticks = 0;
            } else if (++pr->stall_ticks >= 3) {
                /* Appends went unanswered for several heartbeat rounds:
                 * they were probably lost. Probe again from match. */
                progress_become_probe(pr);
            } else if (inflights_full(&pr->inflights)) {
                inflights_free_first(&pr->inflights);
            }
            pr->acked = false;
        }
        if (pr->match < last)
            send_append(r, pr, false);
        if (m->ctx > pr->read_ack) {
            pr->read_ack = m->ctx;
            advance_reads(r);
        }
        return;
    default:
        return;
    }
}

/* ---- followers and candidates: receiving -------------------------------- */

static void handle_append(struct raft *r, const struct raft_msg *m)
{
    struct raft_msg *resp;
    if (m->index < r->commit) {
        resp = msg_new(r, RAFT_MSG_APP_RESP, m->from);
        if (resp)
            resp->index = r->commit;
        return;
    }
    if (log_match_term(&r->log, m->index, m->log_term)) {
        uint64_t last_new = m->index + m->n_entries;
        uint64_t conflict = log_find_conflict(&r->log, m->entries, m->n_entries);
        if (conflict) {
            /* conflict <= commit would mean a committed entry is being
             * overwritten: Raft's safety forbids it, so treat it as a
             * corrupt message rather than lose committed data. */
            if (conflict <= r->commit)
                return;
            log_truncate(&r->log, conflict);
            size_t off = (size_t)(conflict - (m->index + 1));
            if (log_append(&r->log, m->entries + off, m->n_entries - off) != 0)
                return; /* out of memory: the leader will retry */
        }
        commit_to(r, m->commit < last_new ? m->commit : last_new);
        resp = msg_new(r, RAFT_MSG_APP_RESP, m->from);
        if (resp)
            resp->index = last_new;
        return;
    }
    uint64_t last = log_last_index(&r->log);
    uint64_t hint = m->index < last ? m->index : last;
    hint = log_find_conflict_by_term(&r->log, hint, m->log_term);
    resp = msg_new(r, RAFT_MSG_APP_RESP, m->from);
    if (resp) {
        resp->reject = true;
        resp->index = m->index;
        resp->reject_hint = hint;
        resp->log_term = log_term_or0(&r->log, hint);
    }
}

static void handle_heartbeat(struct raft *r, const struct raft_msg *m)
{
    commit_to(r, m->commit);
    struct raft_msg *resp = msg_new(r, RAFT_MSG_HEARTBEAT_RESP, m->from);
    if (resp)
        resp->ctx = m->ctx;
}

static int copy_snapshot(struct raft_snapshot *dst, const struct raft_snapshot *src)
{
    void *data = NULL;
    if (src->len) {
        data = malloc(src->len);
        if (!data)
            return -ENOMEM;
        memcpy(data, src->data, src->len);
    }
    free((void *)dst->data);
    *dst = *src;
    dst->data = data;
    return 0;
}

static void handle_snapshot(struct raft *r, const struct raft_msg *m)
{
    const struct raft_snapshot *s = m->snapshot;
    struct raft_msg *resp;
    if (!s)
        return;
    if (s->index <= r->commit) {
        resp = msg_new(r, RAFT_MSG_APP_RESP, m->from);
        if (resp)
            resp->index = r->commit;
        return;
    }
    if (log_match_term(&r->log, s->index, s->term)) {
        /* We have the entries: just learn they are committed. */
        commit_to(r, s->index);
    } else if (r->applying > r->applied) {
        /* The caller is still applying entries of the log a restore would
         * drop (raft_advance_applied): dropped, as a lost message; the
         * leader sends it again. */
        return;
    } else {
        if (copy_snapshot(&r->snap, s) != 0)
            return;
        log_reset(&r->log, s->index, s->term);
        r->log.stabled = s->index;
        r->snap_unstable = true;
        r->commit = s->index;
        conf_apply(r, &s->conf);
        r->conf_index = s->index;
    }
    resp = msg_new(r, RAFT_MSG_APP_RESP, m->from);
    if (resp)
        resp->index = log_last_index(&r->log);
}

static void candidate_step(struct raft *r, const struct raft_msg *m)
{
    switch (m->type) {
    case RAFT_MSG_APP:
        become_follower(r, m->term, m->from);
        handle_append(r, m);
        return;
    case RAFT_MSG_HEARTBEAT:
        become_follower(r, m->term, m->from);
        handle_heartbeat(r, m);
        return;
    case RAFT_MSG_SNAP:
        become_follower(r, m->term, m->from);
        handle_snapshot(r, m);
        return;
    case RAFT_MSG_VOTE_RESP:
    case RAFT_MSG_PRE_VOTE_RESP: {
        bool pre = r->role == RAFT_PRE_CANDIDATE;
        if (pre != (m->type == RAFT_MSG_PRE_VOTE_RESP))
            return;
        int res = poll(r, m->from, !m->reject);
        if (res == VOTE_WON) {
            if (pre) {
                campaign(r, false, false);
            } else {
                become_leader(r);
            }
        } else if (res == VOTE_LOST) {
            become_follower(r, r->term, RAFT_NONE);
        }
        return;
    }
    default:
        return;
    }
}

static void follower_step(struct raft *r, const struct raft_msg *m)
{
    switch (m->type) {
    case RAFT_MSG_APP:
        r->election_elapsed = 0;
        r->lead = m->from;
        handle_append(r, m);
        return;
    case RAFT_MSG_HEARTBEAT:
        r->election_elapsed = 0;
        r->lead = m->from;
        handle_heartbeat(r, m);
        return;
    case RAFT_MSG_SNAP:
        r->election_elapsed = 0;
        r->lead = m->from;
        handle_snapshot(r, m);
        return;
    case RAFT_MSG_TIMEOUT_NOW:
        campaign(r, false, true); /* the leader asked: skip pre-vote */
        return;
    case RAFT_MSG_READ_INDEX_RESP:
        read_state_push(r, m->ctx, m->index);
        return;
    default:
        return;
    }
}

static void handle_vote_request(struct raft *r, const struct raft_msg *m)
{
    bool pre = m->type == RAFT_MSG_PRE_VOTE;
    bool can_vote = r->vote == m->from || (r->vote == RAFT_NONE && r->lead == RAFT_NONE) ||
                    (pre && m->term > r->term);
    struct raft_msg *resp =
        msg_new(r, pre ? RAFT_MSG_PRE_VOTE_RESP : RAFT_MSG_VOTE_RESP, m->from);
    if (can_vote && log_is_up_to_date(&r->log, m->index, m->log_term)) {
        if (resp)
            resp->term = m->term;
        if (!pre) {
            r->election_elapsed = 0;
            r->vote = m->from;
        }
    } else if (resp) {
        resp->reject = true;
    }
}

/* ---- public: inputs ----------------------------------------------------- */

int raft_step(struct raft *r, const struct raft_msg *m)
{
    if (m->to != r->id || m->from == RAFT_NONE || m->from == r->id || m->type >= RAFT_MSG__COUNT)
        return 0;
    if (m->term > r->term) {
        if (m->type == RAFT_MSG_VOTE || m->type == RAFT_MSG_PRE_VOTE) {
            /* A follower that heard from a live leader within the election
             * timeout ignores campaigns: a partitioned or removed member
             * rejoining cannot depose a healthy leader (paper 6). */
            bool in_lease = r->cfg.check_quorum && r->lead != RAFT_NONE &&
                            r->election_elapsed < r->cfg.election_tick;
            if (!m->force && in_lease)
                return 0;
        }
        if (m->type == RAFT_MSG_PRE_VOTE) {
            /* never change term for a pre-vote */
        } else if (m->type == RAFT_MSG_PRE_VOTE_RESP && !m->reject) {
            /* a granted pre-vote echoes the term we would use */
        } else if (m->type == RAFT_MSG_APP || m->type == RAFT_MSG_HEARTBEAT ||
                   m->type == RAFT_MSG_SNAP) {
            become_follower(r, m->term, m->from);
        } else {
            become_follower(r, m->term, RAFT_NONE);
        }
    } else if (m->term < r->term) {
        if ((r->cfg.check_quorum || r->cfg.pre_vote) &&
            (m->type == RAFT_MSG_HEARTBEAT || m->type == RAFT_MSG_APP)) {
            /* Tell a stale leader (e.g. back from a partition) the current
             * term so that it steps down. */
            msg_new(r, RAFT_MSG_APP_RESP, m->from);
        } else if (m->type == RAFT_MSG_PRE_VOTE) {
            struct raft_msg *resp = msg_new(r, RAFT_MSG_PRE_VOTE_RESP, m->from);
            if (resp)
                resp->reject = true;
        }
        return 0;
    }

    if (m->type == RAFT_MSG_VOTE || m->type == RAFT_MSG_PRE_VOTE) {
        handle_vote_request(r, m);
        return 0;
    }
    switch (r->role) {
    case RAFT_LEADER:
        leader_step(r, m);
        break;
    case RAFT_FOLLOWER:
        follower_step(r, m);
        break;
    default:
        candidate_step(r, m);
        break;
    }
    return 0;
}

void raft_tick(struct raft *r)
{
    r->election_elapsed++;
    if (r->role != RAFT_LEADER) {
        if (promotable(r) && r->election_elapsed >= r->randomized_timeout) {
            r->election_elapsed = 0;
            campaign(r, r->cfg.pre_vote, false);
        }
        return;
    }
    r->heartbeat_elapsed++;
    for (uint32_t k = 0; k < r->n_prs; k++) {
        struct progress *pr = &r->prs[k];
        /* A snapshot nobody acknowledged for long was lost: probe again. */
        if (pr->state == PROGRESS_SNAPSHOT && ++pr->stall_ticks >= 2 * r->cfg.election_tick)
            progress_become_probe(pr);
    }
    if (r->election_elapsed >= r->cfg.election_tick) {
        r->election_elapsed = 0;
        if (r->cfg.check_quorum) {
            uint32_t active = 0;
            for (uint32_t k = 0; k < r->n_prs; k++) {
                struct progress *pr = &r->prs[k];
                if (is_voter(r, pr->id) && (pr->id == r->id || pr->recent_active))
                    active++;
                if (pr->id != r->id)
                    pr->recent_active = false;
            }
            if (active < quorum_size(r)) {
                become_follower(r, r->term, RAFT_NONE);
                return;
            }
        }
        abort_transfer(r);
    }
    if (r->heartbeat_elapsed >= r->cfg.heartbeat_tick) {
        r->heartbeat_elapsed = 0;
        bcast_heartbeat(r);
    }
}

int raft_propose(struct raft *r, const void *data, size_t len, uint64_t *index_out)
{
    if (r->role != RAFT_LEADER)
        return QERR_NO_LEADER;
    if (r->lead_transferee != RAFT_NONE)
        return -EBUSY;
    int rc = log_append_one(&r->log, r->term, RAFT_ENTRY_NORMAL, data, len);
    if (rc)
        return rc;
    struct progress *self = pr_find(r, r->id);
    if (self)
        self->match = log_last_index(&r->log), self->next = self->match + 1;
    r->bcast_needed = true;
    if (index_out)
        *index_out = log_last_index(&r->log);
    return 0;
}

int raft_propose_conf(struct raft *r, const struct raft_membership *next, uint64_t *index_out)
{
    if (r->role != RAFT_LEADER)
        return QERR_NO_LEADER;
    if (r->lead_transferee != RAFT_NONE || r->pending_conf_index > r->applied)
        return -EBUSY;
    if (raft_membership_check(&r->conf, next) != 0)
        return -EINVAL;
    uint8_t buf[8 * (2 + 2 * RAFT_MAX_MEMBERS)];
    size_t len = raft_membership_encode(next, buf);
    int rc = log_append_one(&r->log, r->term, RAFT_ENTRY_CONF, buf, len);
    if (rc)
        return rc;
    struct progress *self = pr_find(r, r->id);
    if (self)
        self->match = log_last_index(&r->log), self->next = self->match + 1;
    r->pending_conf_index = log_last_index(&r->log);
    r->bcast_needed = true;
    if (index_out)
        *index_out = r->pending_conf_index;
    return 0;
}

int raft_read_index(struct raft *r, uint64_t ctx)
{
    if (r->role == RAFT_LEADER)
        return leader_read(r, ctx, r->id);
    if (r->lead == RAFT_NONE)
        return QERR_NO_LEADER;
    struct raft_msg *m = msg_new(r, RAFT_MSG_READ_INDEX, r->lead);
    if (!m)
        return -ENOMEM;
    m->ctx = ctx;
    return 0;
}

int raft_transfer_leader(struct raft *r, uint64_t to)
{
    if (r->role != RAFT_LEADER)
        return QERR_NO_LEADER;
    if (to == r->id || !is_voter(r, to))
        return -EINVAL;
    if (r->lead_transferee == to)
        return 0;
    r->lead_transferee = to;
    r->election_elapsed = 0; /* the transfer must finish within a timeout */
    struct progress *pr = pr_find(r, to);
    if (pr && pr->match == log_last_index(&r->log))
        send_timeout_now(r, to);
    else if (pr)
        send_append(r, pr, true);
    return 0;
}

void raft_campaign(struct raft *r)
{
    if (r->role != RAFT_LEADER)
        campaign(r, r->cfg.pre_vote, false);
}

int raft_compact(struct raft *r, const void *data, size_t len)
{
    if (r->applied == 0 || r->applied < r->snap.index)
        return -ENOENT;
    struct raft_snapshot s = {.index = r->applied, .conf = r->conf, .data = data, .len = len};
    if (log_term(&r->log, r->applied, &s.term) != 0)
        return -ENOENT;
    int rc = copy_snapshot(&r->snap, &s);
    if (rc)
        return rc;
    log_compact(&r->log, r->applied);
    return 0;
}

/* dataless_snapshot_at makes the core's snapshot index |to| (its term, the
 * applied membership, no data) and drops the log up to it; the callers
 * checked that |to| may go. */
static int dataless_snapshot_at(struct raft *r, uint64_t to)
{
    struct raft_snapshot s = {.index = to, .conf = r->conf};
    if (log_term(&r->log, to, &s.term) != 0)
        return 0;
    int rc = copy_snapshot(&r->snap, &s);
    if (rc)
        return rc;
    log_compact(&r->log, to);
    return 0;
}

int raft_compact_keep(struct raft *r, uint64_t keep)
{
    /* as raft_compact, callable during a Ready: what goes is applied and
     * persisted, so neither in the Ready's entries to persist nor in its
     * committed ones */
    if (r->snap.len > 0)
        return -EINVAL;
    if (r->applied == 0 || r->applied < r->snap.index)
        return -ENOENT;
    uint64_t to = r->applied > keep ? r->applied - keep : 0;
    /* the snapshot carries the applied membership: not below the entry
     * that made it */
    if (r->conf_index > to)
        to = r->conf_index;
    if (to > r->log.stabled || to > r->applied || to <= r->snap.index)
        return 0;
    return dataless_snapshot_at(r, to);
}

int raft_trim_log(struct raft *r, uint64_t index)
{
    if (r->in_ready)
        return -EBUSY;
    if (r->snap.len > 0)
        return -EINVAL; /* a lagging follower would get that stale data */
    uint64_t to = index;
    if (to > r->applied)
        to = r->applied;
    if (to > r->log.stabled)
        to = r->log.stabled;
    if (r->role == RAFT_LEADER)
        for (uint32_t k = 0; k < r->n_prs; k++)
            if (r->prs[k].id != r->id && r->prs[k].match < to)
                to = r->prs[k].match;
    /* The snapshot at |to| carries the applied membership: only right if no
     * configuration entry took effect after |to|. */
    if (to <= r->snap.index || r->conf_index > to)
        return 0;
    return dataless_snapshot_at(r, to);
}

/* ---- public: Ready ------------------------------------------------------ */

static struct raft_hard_state hard_state(const struct raft *r)
{
    return (struct raft_hard_state){r->term, r->vote, r->commit};
}

bool raft_has_ready(const struct raft *r)
{
    struct raft_hard_state hs = hard_state(r);
    return r->snap_unstable || log_last_index(&r->log) > r->log.stabled || r->n_msgs > 0 ||
           r->commit > r->applying || r->n_read_states > 0 || r->bcast_needed ||
           r->read_round_needed || memcmp(&hs, &r->prev_hs, sizeof(hs)) != 0;
}

/* materialize turns the outbox's index ranges into pointers and drops
 * messages the log can no longer back (the leader lost its role or
 * compacted the range meanwhile: like a lost packet). */
static void materialize(struct raft *r)
{
    size_t kept = 0;
    for (size_t k = 0; k < r->n_msgs; k++) {
        struct raft_msg *m = &r->msgs[k];
        if (m->type == RAFT_MSG_APP) {
            if (r->role != RAFT_LEADER || m->term != r->term ||
                !log_match_term(&r->log, m->index, m->log_term) ||
                m->index + m->n_entries > log_last_index(&r->log))
                continue;
            m->entries = m->n_entries ? log_entry(&r->log, m->index + 1) : NULL;
            if (m->n_entries && !m->entries)
                continue;
            m->commit = r->commit;
        } else if (m->type == RAFT_MSG_SNAP) {
            if (r->snap.index == 0)
                continue;
            m->snapshot = &r->snap;
        }
        r->msgs[kept++] = *m;
    }
    r->n_msgs = kept;
}

int raft_ready(struct raft *r, struct raft_ready *rd)
{
    memset(rd, 0, sizeof(*rd));
    if (r->in_ready)
        return -EBUSY; /* the previous Ready was not advanced */
    if (r->role == RAFT_LEADER) {
        if (r->bcast_needed) {
            r->bcast_needed = false;
            maybe_commit(r);
            bcast_append(r);
        }
        if (r->read_round_needed)
            start_read_round(r);
    } else {
        r->bcast_needed = false;
        r->read_round_needed = false;
    }
    materialize(r);

    rd->hs = hard_state(r);
    rd->hs_changed = memcmp(&rd->hs, &r->prev_hs, sizeof(rd->hs)) != 0;
    r->prev_hs = rd->hs;
    r->ready_had_snap = r->snap_unstable;
    if (r->snap_unstable)
        rd->snapshot = &r->snap;
    uint64_t last = log_last_index(&r->log);
    if (last > r->log.stabled) {
        rd->entries = log_entry(&r->log, r->log.stabled + 1);
        rd->n_entries = (size_t)(last - r->log.stabled);
    }
    r->ready_stable_to = last;
    uint64_t lo = r->applying;
    if (r->snap_unstable && r->snap.index > lo)
        lo = r->snap.index;
    if (r->commit > lo) {
        rd->committed = log_entry(&r->log, lo + 1);
        rd->n_committed = (size_t)(r->commit - lo);
    }
    r->ready_applied_to = r->commit > lo ? r->commit : lo;
    rd->msgs = r->msgs;
    rd->n_msgs = r->n_msgs;
    rd->reads = r->read_states;
    rd->n_reads = r->n_read_states;
    r->in_ready = true;
    return 0;
}

/* apply_to makes the handed-out entries up to |to| applied: configuration
 * entries take effect now. */
static void apply_to(struct raft *r, uint64_t to)
{
    if (to > r->applying)
        to = r->applying;
    while (r->applied < to) {
        const struct raft_entry *e = log_entry(&r->log, r->applied + 1);
        r->applied++;
        if (e && e->type == RAFT_ENTRY_CONF) {
            struct raft_membership m;
            if (raft_membership_decode(e->data, e->len, &m) == 0) {
                conf_apply(r, &m);
                r->conf_index = r->applied;
            }
        }
    }
}

void raft_advance(struct raft *r)
{
    raft_advance_applied(r, UINT64_MAX);
}

void raft_advance_applied(struct raft *r, uint64_t applied)
{
    if (!r->in_ready)
        return;
    r->in_ready = false;
    r->n_msgs = 0;
    r->n_read_states = 0;
    for (uint32_t k = 0; k < r->n_prs; k++)
        r->prs[k].sent_this_pass = false;
    if (r->ready_stable_to > r->log.stabled)
        r->log.stabled = r->ready_stable_to;
    if (r->ready_had_snap) {
        r->snap_unstable = false;
        if (r->snap.index > r->applied)
            r->applied = r->snap.index;
        if (r->snap.index > r->applying)
            r->applying = r->snap.index;
    }
    if (r->ready_applied_to > r->applying)
        r->applying = r->ready_applied_to;
    apply_to(r, applied);
}

void raft_set_applied(struct raft *r, uint64_t applied)
{
    if (r->in_ready)
        return;
    apply_to(r, applied);
}

/* ---- public: life cycle ------------------------------------------------- */

void raft_config_default(struct raft_config *c, uint64_t id)
{
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->election_tick = 10;
    c->heartbeat_tick = 1;
    c->max_inflight = 256;
    c->max_msg_entries = 64;
    c->pre_vote = true;
    c->check_quorum = true;
    c->seed = id;
}

int raft_new(const struct raft_config *cfg, const struct raft_storage *st,
             const struct raft_membership *bootstrap, struct raft **out)
{
    static const struct raft_storage empty;
    if (!st)
        st = &empty;
    if (cfg->id == RAFT_NONE || cfg->election_tick < 2 || cfg->heartbeat_tick == 0 ||
        cfg->heartbeat_tick >= cfg->election_tick || cfg->max_inflight == 0 ||
        cfg->max_msg_entries == 0)
        return -EINVAL;
    uint64_t snap_index = st->snapshot ? st->snapshot->index : 0;
    for (size_t k = 0; k < st->n_entries; k++)
        if (st->entries[k].index != snap_index + 1 + k)
            return -EINVAL;
    struct raft *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->cfg = *cfg;
    r->id = cfg->id;
    r->rng = cfg->seed;
    log_init(&r->log);
    int rc = 0;
    if (st->snapshot) {
        if ((rc = copy_snapshot(&r->snap, st->snapshot)) != 0)
            goto fail;
        log_reset(&r->log, snap_index, st->snapshot->term);
    }
    if ((rc = log_append(&r->log, st->entries, st->n_entries)) != 0)
        goto fail;
    r->log.stabled = log_last_index(&r->log);
    r->term = st->hs.term;
    r->vote = st->hs.vote;
    r->commit = st->hs.commit < snap_index ? snap_index : st->hs.commit;
    if (r->commit > log_last_index(&r->log)) {
        rc = -EINVAL;
        goto fail;
    }
    r->prev_hs = hard_state(r);
    struct raft_membership conf = {0};
    if (st->snapshot)
        conf = st->snapshot->conf;
    if ((rc = conf_apply(r, &conf)) != 0)
        goto fail;
    r->conf_index = snap_index;
    bool fresh = !st->snapshot && st->n_entries == 0 && st->hs.term == 0;
    if (fresh && bootstrap) {
        uint8_t buf[8 * (2 + 2 * RAFT_MAX_MEMBERS)];
        struct raft_membership check;
        if (bootstrap->n_voters == 0 ||
            bootstrap->n_voters + bootstrap->n_learners > RAFT_MAX_MEMBERS) {
            rc = -EINVAL;
            goto fail;
        }
        size_t len = raft_membership_encode(bootstrap, buf);
        if (raft_membership_decode(buf, len, &check) != 0) {
            rc = -EINVAL;
            goto fail;
        }
        if ((rc = log_append_one(&r->log, 1, RAFT_ENTRY_CONF, buf, len)) != 0)
            goto fail;
        r->term = 1;
        r->commit = 1;
        r->applied = 1;
        r->applying = 1;
        if ((rc = conf_apply(r, bootstrap)) != 0)
            goto fail;
        r->conf_index = 1;
    } else {
        /* Replay configuration changes the state machine already holds. */
        uint64_t applied = st->applied < snap_index ? snap_index : st->applied;
        if (applied > r->commit)
            applied = r->commit;
        for (uint64_t i = snap_index + 1; i <= applied; i++) {
            const struct raft_entry *e = log_entry(&r->log, i);
            struct raft_membership m;
            if (e->type == RAFT_ENTRY_CONF && raft_membership_decode(e->data, e->len, &m) == 0) {
                if ((rc = conf_apply(r, &m)) != 0)
                    goto fail;
                r->conf_index = i;
            }
        }
        r->applied = applied;
        r->applying = applied;
    }
    r->role = RAFT_FOLLOWER;
    reset_randomized_timeout(r);
    *out = r;
    return 0;
fail:
    raft_free(r);
    return rc;
}

void raft_free(struct raft *r)
{
    if (!r)
        return;
    for (uint32_t k = 0; k < r->n_prs; k++)
        inflights_free(&r->prs[k].inflights);
    log_free(&r->log);
    free((void *)r->snap.data);
    free(r->msgs);
    free(r->reads);
    free(r->read_states);
    free(r);
}

/* ---- public: accessors -------------------------------------------------- */

enum raft_role raft_get_role(const struct raft *r) { return (enum raft_role)r->role; }
uint64_t raft_get_id(const struct raft *r) { return r->id; }
uint64_t raft_get_term(const struct raft *r) { return r->term; }
uint64_t raft_get_leader(const struct raft *r) { return r->lead; }
uint64_t raft_get_commit(const struct raft *r) { return r->commit; }
uint64_t raft_get_match(const struct raft *r, uint64_t id)
{
    if (r->role != RAFT_LEADER)
        return 0;
    if (id == r->id)
        return log_last_index(&r->log);
    struct progress *p = pr_find((struct raft *)r, id);
    return p != NULL ? p->match : 0;
}
uint64_t raft_get_applied(const struct raft *r) { return r->applied; }
uint64_t raft_get_applying(const struct raft *r)
{
    return r->applying;
}
uint64_t raft_get_first_index(const struct raft *r) { return log_first_index(&r->log); }
uint64_t raft_get_last_index(const struct raft *r) { return log_last_index(&r->log); }
size_t raft_get_log_bytes(const struct raft *r) { return r->log.bytes; }
const struct raft_entry *raft_get_entry(const struct raft *r, uint64_t index)
{
    return log_entry(&r->log, index);
}
const struct raft_membership *raft_get_membership(const struct raft *r) { return &r->conf; }
