/* tests/raft/sim.c: a deterministic cluster simulator driving the real
 * src/raft core.
 *
 * Each seed runs a 3- or 5-node cluster (plus spare nodes that membership
 * changes may add) on simulated time with a simulated network (drops,
 * duplicates, delays, reordering, partitions) and simulated disks (a crash
 * keeps exactly what the Ready loop persisted). Proposals, ReadIndex reads,
 * snapshots/compaction, membership changes and leadership transfers happen
 * throughout. After every Ready it checks Raft's safety properties; after
 * the faults heal it checks that the cluster elects a leader and commits
 * within a bounded number of ticks. Everything derives from the seed, so a
 * failing seed replays exactly: raft-sim --first S --seeds 1.
 *
 * Snapshots come in two modes. By default they carry data: the state
 * machine (an 8-byte chain hash of the applied history) is rebuilt from the
 * latest snapshot plus the log after a crash. With --dataless (--mixed:
 * odd seeds) they model src/server/node.c: the state machine (chain,
 * applied) is durable by itself (synced after random applies and before
 * each compaction; what was applied after the last sync is lost in a
 * crash), compaction is raft_compact(r, NULL, 0), raft_trim_log(r, applied
 * - K) runs after raft_advance at random, a snapshot message carries the
 * sender's current state machine out of band, the receiver installs it
 * when the core hands the snapshot back (it must be at or past the
 * snapshot's index and equal to what others applied there), and committed
 * entries the state machine already holds are skipped (and checked).
 *
 * Usage: raft-sim --seeds N [--first S] [--nodes 3|5] [--verbose]
 *        [--ticks T]            (fault phase length, default 2000 ticks)
 *        [--dataless | --mixed] (data-less snapshots: all / odd seeds)
 *        [--expect-violation]   (exit 0 only if a safety check fails) */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "raft/raft.h"

#define MAX_NODES 8
#define TRACE_LINES 200
#define LIVE_TICKS 300

/* ---- PRNG --------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rnd_n(uint64_t n) { return n ? rnd() % n : 0; }
static bool chance(double p) { return (double)(rnd() >> 11) / 9007199254740992.0 < p; }

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

static uint64_t entry_hash(const struct raft_entry *e)
{
    uint64_t h = mix(e->type, e->len);
    const uint8_t *p = e->data;
    for (size_t k = 0; k < e->len; k++)
        h = mix(h, p[k]);
    return h;
}

/* ---- trace -------------------------------------------------------------- */

/* The ring keeps either a formatted line or, for the frequent message
 * events, the raw fields, formatted only when the trace is printed. */
struct trace_ev {
    uint64_t t;
    bool is_msg;
    const char *verb;
    struct raft_msg m;
    char text[200];
};
static struct trace_ev trace_buf[TRACE_LINES];
static unsigned trace_pos, trace_count;
static bool verbose;
static uint64_t now;
static uint64_t cur_seed;
static uint64_t fault_ticks = 2000; /* --ticks: length of the fault phase */
static int n_initial, n_slots;

/* --dataless: snapshots carry no data (raft_compact(r, NULL, 0)), the
 * state machine is durable on its own, raft_trim_log runs after
 * raft_advance and a snapshot message carries the sender's current state
 * out of band, as src/server/node.c does. --mixed: every other seed. */
enum { MODE_DATA, MODE_DATALESS, MODE_MIXED };
static int snap_mode = MODE_DATA;
static bool dataless;                /* this seed */
static double p_trim, p_sm_sync;     /* per seed, data-less mode */
static unsigned trim_keep_max;

static void print_ev(const struct trace_ev *e)
{
    if (!e->is_msg) {
        fprintf(stderr, "t=%-5" PRIu64 " %s\n", e->t, e->text);
        return;
    }
    const struct raft_msg *m = &e->m;
    fprintf(stderr,
            "t=%-5" PRIu64 " %s %s %" PRIu64 "->%" PRIu64 " term %" PRIu64 " idx %" PRIu64
            " logterm %" PRIu64 " entries %zu commit %" PRIu64 " ctx %" PRIu64 "%s%s\n",
            e->t, e->verb, raft_msg_type_name(m->type), m->from, m->to, m->term, m->index,
            m->log_term, m->n_entries, m->commit, m->ctx, m->reject ? " reject" : "",
            m->type == RAFT_MSG_SNAP && m->snapshot ? " (snapshot)" : "");
}

static struct trace_ev *trace_next(void)
{
    struct trace_ev *e = &trace_buf[trace_pos];
    trace_pos = (trace_pos + 1) % TRACE_LINES;
    if (trace_count < TRACE_LINES)
        trace_count++;
    e->t = now;
    return e;
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    struct trace_ev *e = trace_next();
    e->is_msg = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof(e->text), fmt, ap);
    va_end(ap);
    if (verbose)
        print_ev(e);
}

static void trace_msg(const char *verb, const struct raft_msg *m)
{
    struct trace_ev *e = trace_next();
    e->is_msg = true;
    e->verb = verb;
    e->m = *m;
    if (verbose)
        print_ev(e);
}

static void dump_trace(void)
{
    fprintf(stderr, "---- last %u events ----\n", trace_count);
    unsigned start = (trace_pos + TRACE_LINES - trace_count) % TRACE_LINES;
    for (unsigned k = 0; k < trace_count; k++)
        print_ev(&trace_buf[(start + k) % TRACE_LINES]);
}

static bool expect_violation; /* --expect-violation: a safety violation is success */
static bool checking_liveness;

/* violation reports a failed check with the trace and exits: 1 normally;
 * with --expect-violation, 0 for a safety violation and 1 for anything
 * else, so a planted bug counts as caught only by a safety check. */
static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void violation(const char *fmt, ...)
{
    dump_trace();
    fprintf(stderr, "%s VIOLATION (seed %" PRIu64 ", t=%" PRIu64 "): ",
            checking_liveness ? "LIVENESS" : "SAFETY", cur_seed, now);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nreplay: raft-sim --first %" PRIu64 " --seeds 1 --nodes %d --ticks %" PRIu64
            "%s --verbose\n", cur_seed, n_initial, fault_ticks, dataless ? " --dataless" : "");
    if (expect_violation && !checking_liveness) {
        printf("raft-sim: safety violation caught at seed %" PRIu64 ", as expected\n", cur_seed);
        exit(0);
    }
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static void *xdup(const void *p, size_t n)
{
    if (n == 0)
        return NULL;
    void *q = xmalloc(n);
    memcpy(q, p, n);
    return q;
}

/* ---- nodes and their disks ---------------------------------------------- */

struct node {
    uint64_t id;
    bool exists, up;
    struct raft *r;
    /* disk */
    struct raft_hard_state hs;
    bool has_snap;
    struct raft_snapshot snap;
    struct raft_entry *ents;
    size_t n_ents, cap_ents;
    /* state machine */
    uint64_t applied, chain;
    /* Data-less mode: the state machine is durable by itself (the server's
     * LMDB with its consistent index): what survives a crash. */
    uint64_t d_applied, d_chain;
    /* Data-less mode: the state attached to the snapshot message being
     * stepped (the server's received database copy), until its Ready. */
    bool recv_set;
    uint64_t recv_index, recv_term, recv_applied, recv_chain;
    int group; /* partition group */
    int last_role;
    uint64_t last_term;
};

static struct node nodes[MAX_NODES + 1];
static struct raft_config base_cfg;

/* Totals over all seeds, to show the simulator exercises what it should. */
static struct {
    uint64_t applied, leaders, reads_ok, restores, compactions, conf_proposed, transfers,
        crashes, partitions, msgs, early_crashes;
    /* data-less mode */
    uint64_t dl_seeds, trim_calls, trims_dropped, entries_trimmed, dl_snaps_sent, dl_snaps_trimmed,
        dl_snaps_installed, dl_installs_ahead, dl_installs_kept, dl_skipped, dl_sm_syncs,
        dl_lost_on_crash;
} stats;

/* ---- global knowledge for the checks ------------------------------------ */

struct applied_rec {
    bool set;
    uint64_t term, hash, chain;
    /* The lowest current term of a node that applied it: the entry was
     * committed in that term or earlier. */
    uint64_t known_term;
};
static struct applied_rec *applied_recs;
static size_t cap_applied;
static uint64_t max_applied; /* highest index any node applied: acknowledged */

static uint64_t *term_leader;
static size_t cap_terms;

/* (index, term) -> (hash, term of index-1): log matching registry. */
struct reg {
    uint64_t index, term, hash, prev_term;
    bool used, filled;
};
static struct reg *regs;
static size_t cap_regs, n_regs;

struct read_req {
    uint64_t ctx, node, min_index;
    bool open;
};
static struct read_req *reads;
static size_t n_reads_req, cap_reads_req;

static struct applied_rec *applied_at(uint64_t idx)
{
    if (idx >= cap_applied) {
        size_t ncap = cap_applied ? cap_applied : 1024;
        while (ncap <= idx)
            ncap *= 2;
        applied_recs = realloc(applied_recs, ncap * sizeof(*applied_recs));
        if (!applied_recs)
            exit(2);
        memset(applied_recs + cap_applied, 0, (ncap - cap_applied) * sizeof(*applied_recs));
        cap_applied = ncap;
    }
    return &applied_recs[idx];
}

static uint64_t *leader_of(uint64_t term)
{
    if (term >= cap_terms) {
        size_t ncap = cap_terms ? cap_terms : 256;
        while (ncap <= term)
            ncap *= 2;
        term_leader = realloc(term_leader, ncap * sizeof(*term_leader));
        if (!term_leader)
            exit(2);
        memset(term_leader + cap_terms, 0, (ncap - cap_terms) * sizeof(*term_leader));
        cap_terms = ncap;
    }
    return &term_leader[term];
}

static void reg_grow(void);
static struct reg *reg_find(uint64_t index, uint64_t term, bool insert)
{
    if (insert && (n_regs + 1) * 2 > cap_regs)
        reg_grow();
    size_t h = (size_t)mix(index, term) & (cap_regs - 1);
    while (regs[h].used) {
        if (regs[h].index == index && regs[h].term == term)
            return &regs[h];
        h = (h + 1) & (cap_regs - 1);
    }
    if (!insert)
        return NULL;
    regs[h].used = true;
    regs[h].index = index;
    regs[h].term = term;
    n_regs++;
    return &regs[h];
}

static void reg_grow(void)
{
    struct reg *old = regs;
    size_t ocap = cap_regs;
    cap_regs = cap_regs ? cap_regs * 2 : 4096;
    regs = calloc(cap_regs, sizeof(*regs));
    if (!regs)
        exit(2);
    n_regs = 0;
    for (size_t k = 0; k < ocap; k++)
        if (old[k].used) {
            struct reg *r = reg_find(old[k].index, old[k].term, true);
            *r = old[k];
        }
    free(old);
}

/* ---- network ------------------------------------------------------------ */

struct netmsg {
    struct raft_msg m;
    struct raft_entry *ents;
    struct raft_snapshot snap;
    uint64_t at;
    /* data-less mode, RAFT_MSG_SNAP: the sender's state machine at send
     * time (the database copy the server sends out of band) */
    uint64_t sm_applied, sm_chain;
};
static struct netmsg **net;
static size_t n_net, cap_net;
static double p_drop, p_dup;
static double p_crash_unpersisted; /* a leader dies between sending and persisting */
static unsigned max_delay;

static struct netmsg *netmsg_copy(const struct raft_msg *m)
{
    struct netmsg *c = xmalloc(sizeof(*c));
    memset(c, 0, sizeof(*c));
    c->m = *m;
    if (m->n_entries) {
        c->ents = xmalloc(m->n_entries * sizeof(*c->ents));
        for (size_t k = 0; k < m->n_entries; k++) {
            c->ents[k] = m->entries[k];
            c->ents[k].data = xdup(m->entries[k].data, m->entries[k].len);
        }
    }
    c->m.entries = c->ents;
    if (m->snapshot) {
        c->snap = *m->snapshot;
        c->snap.data = xdup(m->snapshot->data, m->snapshot->len);
        c->m.snapshot = &c->snap;
    }
    return c;
}

static void netmsg_free(struct netmsg *c)
{
    for (size_t k = 0; k < c->m.n_entries; k++)
        free((void *)c->ents[k].data);
    free(c->ents);
    free((void *)c->snap.data);
    free(c);
}

static bool reachable(uint64_t a, uint64_t b)
{
    return nodes[a].group == nodes[b].group;
}

static void net_push(struct netmsg *c)
{
    if (n_net == cap_net) {
        cap_net = cap_net ? cap_net * 2 : 256;
        net = realloc(net, cap_net * sizeof(*net));
        if (!net)
            exit(2);
    }
    net[n_net++] = c;
}

static void send_msg(const struct raft_msg *m)
{
    if (m->to == 0 || m->to > (uint64_t)n_slots)
        return;
    uint64_t sm_applied = 0, sm_chain = 0;
    if (dataless && m->type == RAFT_MSG_SNAP && m->snapshot) {
        /* The server copies its database (consistent at its applied
         * index) for the snapshot: it must hold the snapshot's index. */
        const struct node *from = &nodes[m->from];
        if (m->snapshot->len != 0)
            violation("n%" PRIu64 " sends a snapshot with %zu bytes in data-less mode", m->from,
                      m->snapshot->len);
        if (from->applied < m->snapshot->index)
            violation("n%" PRIu64 " sends a snapshot @%" PRIu64 " but its state machine is at %"
                      PRIu64,
                      m->from, m->snapshot->index, from->applied);
        sm_applied = from->applied;
        sm_chain = from->chain;
    }
    if (!reachable(m->from, m->to) || chance(p_drop)) {
        trace_msg("drop", m);
        return;
    }
    int copies = chance(p_dup) ? 2 : 1;
    for (int k = 0; k < copies; k++) {
        struct netmsg *c = netmsg_copy(m);
        c->sm_applied = sm_applied;
        c->sm_chain = sm_chain;
        if (dataless && m->type == RAFT_MSG_SNAP && m->snapshot) {
            stats.dl_snaps_sent++;
            /* not the sender's persisted snapshot: the index of a trim */
            const struct node *from = &nodes[m->from];
            if (!from->has_snap || from->snap.index != m->snapshot->index)
                stats.dl_snaps_trimmed++;
            trace("n%" PRIu64 " sends n%" PRIu64 " its state machine @%" PRIu64
                  " for the snapshot @%" PRIu64,
                  m->from, m->to, sm_applied, m->snapshot->index);
        }
        stats.msgs++;
        c->at = now + rnd_n(max_delay + 1);
        net_push(c);
    }
}

/* ---- the Ready loop of one node ------------------------------------------ */

static void check_leaders(struct node *n);
static void node_crash(struct node *n);

static void disk_truncate(struct node *n, uint64_t from_index)
{
    uint64_t first = n->has_snap ? n->snap.index + 1 : 1;
    if (from_index < first)
        from_index = first;
    size_t keep = (size_t)(from_index - first);
    if (keep > n->n_ents)
        keep = n->n_ents;
    for (size_t k = keep; k < n->n_ents; k++)
        free((void *)n->ents[k].data);
    n->n_ents = keep;
}

static void disk_append(struct node *n, const struct raft_entry *e)
{
    if (n->n_ents == n->cap_ents) {
        n->cap_ents = n->cap_ents ? n->cap_ents * 2 : 64;
        n->ents = realloc(n->ents, n->cap_ents * sizeof(*n->ents));
        if (!n->ents)
            exit(2);
    }
    uint64_t first = n->has_snap ? n->snap.index + 1 : 1;
    if (e->index != first + n->n_ents)
        violation("node %" PRIu64 ": persisted entry %" PRIu64 " leaves a gap (disk next %" PRIu64
                  ")",
                  n->id, e->index, first + n->n_ents);
    n->ents[n->n_ents] = *e;
    n->ents[n->n_ents].data = xdup(e->data, e->len);
    n->n_ents++;
}

static void disk_set_snapshot(struct node *n, const struct raft_snapshot *s)
{
    disk_truncate(n, 0);
    free((void *)n->snap.data);
    n->snap = *s;
    n->snap.data = xdup(s->data, s->len);
    n->has_snap = true;
}

/* disk_compact: the application's own snapshot; entries up to it go. */
static void disk_compact(struct node *n, const struct raft_snapshot *s)
{
    uint64_t first = n->has_snap ? n->snap.index + 1 : 1;
    size_t drop = (size_t)(s->index + 1 - first);
    if (drop > n->n_ents)
        drop = n->n_ents;
    for (size_t k = 0; k < drop; k++)
        free((void *)n->ents[k].data);
    memmove(n->ents, n->ents + drop, (n->n_ents - drop) * sizeof(*n->ents));
    n->n_ents -= drop;
    free((void *)n->snap.data);
    n->snap = *s;
    n->snap.data = xdup(s->data, s->len);
    n->has_snap = true;
}

static void apply_entry(struct node *n, const struct raft_entry *e)
{
    if (e->index != n->applied + 1)
        violation("node %" PRIu64 " applies %" PRIu64 " after %" PRIu64, n->id, e->index,
                  n->applied);
    uint64_t h = entry_hash(e);
    n->chain = mix(n->chain, h);
    n->applied = e->index;
    struct applied_rec *a = applied_at(e->index);
    uint64_t cur_term = raft_get_term(n->r);
    if (a->set && cur_term < a->known_term)
        a->known_term = cur_term;
    if (!a->set) {
        a->set = true;
        a->known_term = cur_term;
        a->term = e->term;
        a->hash = h;
        a->chain = n->chain;
    } else if (a->term != e->term || a->hash != h || a->chain != n->chain) {
        violation("node %" PRIu64 " applied index %" PRIu64 " term %" PRIu64
                  " but index %" PRIu64 " was applied elsewhere with term %" PRIu64
                  " (state machine %s)",
                  n->id, e->index, e->term, e->index, a->term,
                  a->chain != n->chain ? "diverged" : "same");
    }
    if (e->index > max_applied)
        max_applied = e->index;
    stats.applied++;
}

static void check_entries(struct node *n, const struct raft_entry *ents, size_t cnt)
{
    for (size_t k = 0; k < cnt; k++) {
        const struct raft_entry *e = &ents[k];
        uint64_t prev_term = 0;
        if (e->index > 1) {
            const struct raft_entry *p = raft_get_entry(n->r, e->index - 1);
            if (p)
                prev_term = p->term;
            else if (n->has_snap && n->snap.index == e->index - 1)
                prev_term = n->snap.term;
            else
                prev_term = UINT64_MAX; /* unknown here */
        }
        uint64_t h = entry_hash(e);
        struct reg *g = reg_find(e->index, e->term, true);
        if (!g->filled) {
            g->filled = true;
            g->hash = h;
            g->prev_term = prev_term;
            continue;
        }
        if (g->hash != h)
            violation("log matching: node %" PRIu64 " has (%" PRIu64 ",%" PRIu64
                      ") with different data than another node",
                      n->id, e->index, e->term);
        if (prev_term != UINT64_MAX && g->prev_term != UINT64_MAX && g->prev_term != prev_term)
            violation("log matching: node %" PRIu64 " has (%" PRIu64 ",%" PRIu64
                      ") after term %" PRIu64 " but another node after term %" PRIu64,
                      n->id, e->index, e->term, prev_term, g->prev_term);
        if (g->prev_term == UINT64_MAX)
            g->prev_term = prev_term;
    }
}

/* ---- data-less snapshots (the server's model) --------------------------- */

/* sm_sync makes the state machine durable as it is (an LMDB commit with its
 * consistent index). */
static void sm_sync(struct node *n)
{
    n->d_applied = n->applied;
    n->d_chain = n->chain;
    stats.dl_sm_syncs++;
}

/* install_received: the core hands back a snapshot it accepted; the server
 * swaps in the database that came with the message, at its own consistent
 * index A >= the snapshot's index, durably, and skips entries up to A. */
static void install_received(struct node *n, const struct raft_snapshot *s)
{
    if (s->len != 0)
        violation("node %" PRIu64 ": data-less mode, but the snapshot @%" PRIu64
                  " has %zu bytes",
                  n->id, s->index, s->len);
    if (!n->recv_set || n->recv_index != s->index || n->recv_term != s->term)
        violation("node %" PRIu64 ": the core restores a snapshot @%" PRIu64 " t%" PRIu64
                  " that was not just received (have %s @%" PRIu64 " t%" PRIu64 ")",
                  n->id, s->index, s->term, n->recv_set ? "one" : "none", n->recv_index,
                  n->recv_term);
    uint64_t a_idx = n->recv_applied;
    if (a_idx < s->index)
        violation("node %" PRIu64 ": snapshot @%" PRIu64 " came with a state machine at %" PRIu64
                  ", behind it",
                  n->id, s->index, a_idx);
    struct applied_rec *a = applied_at(a_idx);
    if (!a->set || a->chain != n->recv_chain)
        violation("node %" PRIu64 " installs a state machine @%" PRIu64 " (snapshot @%" PRIu64
                  ") that %s",
                  n->id, a_idx, s->index,
                  a->set ? "differs from what others applied there" : "nobody applied");
    if (a_idx > s->index)
        stats.dl_installs_ahead++;
    if (a_idx < n->applied && n->applied >= s->index) {
        /* node.c keeps its own database when it is further than the copy
         * (a state machine never goes back), made durable first */
        stats.dl_installs_kept++;
        trace("n%" PRIu64 " keeps its state machine @%" PRIu64 " (the snapshot @%" PRIu64
              " came with @%" PRIu64 ")",
              n->id, n->applied, s->index, a_idx);
        n->recv_set = false;
        sm_sync(n);
        return;
    }
    if (a_idx < n->applied)
        violation("node %" PRIu64 " would move its state machine back from @%" PRIu64
                  " to @%" PRIu64,
                  n->id, n->applied, a_idx);
    trace("n%" PRIu64 " installs the state machine @%" PRIu64 " for the snapshot @%" PRIu64
          " (was @%" PRIu64 ")",
          n->id, a_idx, s->index, n->applied);
    n->applied = a_idx;
    n->chain = n->recv_chain;
    n->recv_set = false;
    sm_sync(n);
    stats.dl_snaps_installed++;
}

/* skip_entry: a committed entry the state machine already holds (after an
 * install or a restart): it must be the one that was applied there. */
static void skip_entry(struct node *n, const struct raft_entry *e)
{
    struct applied_rec *a = applied_at(e->index);
    if (!a->set || a->term != e->term || a->hash != entry_hash(e))
        violation("node %" PRIu64 " skips committed entry %" PRIu64 " term %" PRIu64
                  " held by its state machine, but %s",
                  n->id, e->index, e->term,
                  a->set ? "a different entry was applied there" : "nobody applied it");
    stats.dl_skipped++;
}

/* do_trim bounds the core's in-memory log like node.c's trim_log, keeping
 * a small random number of applied entries. */
static void do_trim(struct node *n)
{
    uint64_t applied = raft_get_applied(n->r);
    uint64_t keep = rnd_n(trim_keep_max + 1);
    if (applied <= keep)
        return;
    uint64_t to = applied - keep, before = raft_get_first_index(n->r);
    int rc = raft_trim_log(n->r, to);
    if (rc != 0)
        violation("node %" PRIu64 ": raft_trim_log(%" PRIu64 ") failed: %d", n->id, to, rc);
    stats.trim_calls++;
    uint64_t after = raft_get_first_index(n->r);
    if (after < before)
        violation("node %" PRIu64 ": raft_trim_log moved the first index back", n->id);
    if (after > before) {
        if (after - 1 > to || after - 1 > applied)
            violation("node %" PRIu64 ": raft_trim_log(%" PRIu64 ") dropped up to %" PRIu64
                      " (applied %" PRIu64 ")",
                      n->id, to, after - 1, applied);
        stats.trims_dropped++;
        stats.entries_trimmed += after - before;
        trace("n%" PRIu64 " trims its log to %" PRIu64 " (asked %" PRIu64 ", applied %" PRIu64
              ")",
              n->id, after - 1, to, applied);
    }
}

static void handle_ready(struct node *n)
{
    int guard = 0;
    while (n->up && raft_has_ready(n->r)) {
        if (++guard > 1000)
            violation("node %" PRIu64 ": Ready never settles", n->id);
        struct raft_ready rd;
        if (raft_ready(n->r, &rd) != 0)
            violation("raft_ready failed");
        /* A leader may send before its disk write (raft.h, THE READY LOOP:
         * its appends, once term and vote are durable); model the server
         * doing that, and now and then crashing in between, before the
         * entries reach its disk. */
        bool early = raft_get_role(n->r) == RAFT_LEADER && rd.snapshot == NULL &&
                     (!rd.hs_changed || (rd.hs.term == n->hs.term && rd.hs.vote == n->hs.vote));
        if (early) {
            for (size_t k = 0; k < rd.n_msgs; k++)
                send_msg(&rd.msgs[k]);
            if (rd.n_entries > 0 && chance(p_crash_unpersisted)) {
                trace("n%" PRIu64 " crashes after sending, before persisting %zu entries", n->id,
                      rd.n_entries);
                stats.early_crashes++;
                node_crash(n);
                return;
            }
        }
        /* 1. persist */
        if (rd.snapshot) {
            if (dataless)
                install_received(n, rd.snapshot);
            disk_set_snapshot(n, rd.snapshot);
            trace("n%" PRIu64 " persists snapshot @%" PRIu64 " t%" PRIu64, n->id,
                  rd.snapshot->index, rd.snapshot->term);
        }
        if (rd.n_entries) {
            check_entries(n, rd.entries, rd.n_entries);
            disk_truncate(n, rd.entries[0].index);
            for (size_t k = 0; k < rd.n_entries; k++)
                disk_append(n, &rd.entries[k]);
        }
        if (rd.hs_changed)
            n->hs = rd.hs;
        /* 2. send */
        for (size_t k = 0; k < rd.n_msgs && !early; k++)
            send_msg(&rd.msgs[k]);
        /* 3. apply */
        if (rd.snapshot && !dataless) {
            if (rd.snapshot->len != 8)
                violation("snapshot with %zu bytes", rd.snapshot->len);
            memcpy(&n->chain, rd.snapshot->data, 8);
            stats.restores++;
            n->applied = rd.snapshot->index;
            struct applied_rec *a = applied_at(n->applied);
            if (a->set && a->chain != n->chain)
                violation("node %" PRIu64 " restored a snapshot @%" PRIu64
                          " whose state differs from what others applied",
                          n->id, n->applied);
        }
        for (size_t k = 0; k < rd.n_committed; k++) {
            if (dataless && rd.committed[k].index <= n->applied)
                skip_entry(n, &rd.committed[k]);
            else
                apply_entry(n, &rd.committed[k]);
        }
        if (dataless && rd.n_committed && chance(p_sm_sync))
            sm_sync(n);
        if (rd.n_committed)
            trace("n%" PRIu64 " applied to %" PRIu64 " (term %" PRIu64 ")", n->id, n->applied,
                  rd.committed[rd.n_committed - 1].term);
        for (size_t k = 0; k < rd.n_reads; k++) {
            const struct raft_read_state *rs = &rd.reads[k];
            if (rs->ctx == 0 || rs->ctx > n_reads_req)
                violation("read state with unknown ctx %" PRIu64, rs->ctx);
            struct read_req *q = &reads[rs->ctx - 1];
            if (q->node != n->id)
                violation("read %" PRIu64 " issued on n%" PRIu64 " answered on n%" PRIu64,
                          rs->ctx, q->node, n->id);
            if (rs->index < q->min_index)
                violation("stale read: read %" PRIu64 " got index %" PRIu64
                          " but index %" PRIu64 " was acknowledged before it was issued",
                          rs->ctx, rs->index, q->min_index);
            q->open = false;
            stats.reads_ok++;
            trace("n%" PRIu64 " read %" PRIu64 " ok at %" PRIu64 " (>= %" PRIu64 ")", n->id,
                  rs->ctx, rs->index, q->min_index);
        }
        raft_advance(n->r);
        if (dataless && chance(p_trim))
            do_trim(n);
    }
    check_leaders(n);
}

/* ---- invariants --------------------------------------------------------- */

/* "Leaders die young": a new leader may be crashed or cut off a few ticks
 * into its term, while its followers still catch up. This is where the
 * commit rule of 5.4.2 matters (figure 8). */
static double p_doom;
static uint64_t doom_node, doom_at;

static void check_leaders(struct node *n)
{
    if (!n->up)
        return;
    int role = raft_get_role(n->r);
    uint64_t term = raft_get_term(n->r);
    if (role == RAFT_LEADER) {
        uint64_t *l = leader_of(term);
        if (*l && *l != n->id)
            violation("two leaders in term %" PRIu64 ": n%" PRIu64 " and n%" PRIu64, term, *l,
                      n->id);
        if (!*l) {
            *l = n->id;
            stats.leaders++;
            if (!doom_node && chance(p_doom)) {
                doom_node = n->id;
                doom_at = now + 1 + rnd_n(6);
            }
            trace("n%" PRIu64 " becomes leader of term %" PRIu64 " (last %" PRIu64 ")", n->id,
                  term, raft_get_last_index(n->r));
            /* Leader completeness: an entry committed in a term before
             * this one is in its log (a leader of an older term, elected
             * late, need not have it). */
            uint64_t first = raft_get_first_index(n->r);
            for (uint64_t i = first; i <= max_applied; i++) {
                struct applied_rec *a = applied_at(i);
                const struct raft_entry *e = raft_get_entry(n->r, i);
                if (!a->set || a->known_term >= term)
                    continue;
                if (!e || e->term != a->term || entry_hash(e) != a->hash)
                    violation("leader completeness: new leader n%" PRIu64 " of term %" PRIu64
                              " lacks applied entry %" PRIu64 " (term %" PRIu64 ")",
                              n->id, term, i, a->term);
            }
        }
    }
    if (role != n->last_role || term != n->last_term) {
        static const char *names[] = {"follower", "pre-candidate", "candidate", "leader"};
        if (role != RAFT_LEADER)
            trace("n%" PRIu64 " is %s in term %" PRIu64, n->id, names[role], term);
        n->last_role = role;
        n->last_term = term;
    }
}

/* ---- node life cycle ---------------------------------------------------- */

static void node_start(struct node *n, bool bootstrap)
{
    struct raft_config cfg = base_cfg;
    cfg.id = n->id;
    cfg.seed = rnd();
    struct raft_storage st = {0};
    st.hs = n->hs;
    st.snapshot = n->has_snap ? &n->snap : NULL;
    st.entries = n->ents;
    st.n_entries = n->n_ents;
    st.applied = n->has_snap ? n->snap.index : 0;
    if (dataless) {
        /* node.c: the store's consistent index, at most the commit index;
         * a store behind the snapshot marker is corrupt. */
        if (n->has_snap && n->d_applied < n->snap.index)
            violation("n%" PRIu64 " restarts with its state machine @%" PRIu64
                      " behind its snapshot @%" PRIu64,
                      n->id, n->d_applied, n->snap.index);
        st.applied = n->d_applied < n->hs.commit ? n->d_applied : n->hs.commit;
    }
    struct raft_membership boot = {0};
    for (int k = 1; k <= n_initial; k++)
        boot.voters[boot.n_voters++] = (uint64_t)k;
    int rc = raft_new(&cfg, &st, bootstrap ? &boot : NULL, &n->r);
    if (rc)
        violation("raft_new(n%" PRIu64 ") failed: %d", n->id, rc);
    n->up = true;
    n->exists = true;
    n->applied = st.applied;
    n->chain = 0;
    n->recv_set = false;
    if (dataless) {
        n->applied = n->d_applied;
        n->chain = n->d_chain;
    } else if (n->has_snap) {
        memcpy(&n->chain, n->snap.data, 8);
    }
    /* The bootstrap entry is applied by the core itself. */
    if (bootstrap && !n->has_snap && n->n_ents == 0 && raft_get_applied(n->r) == 1)
        apply_entry(n, raft_get_entry(n->r, 1));
    n->last_role = -1;
    trace("n%" PRIu64 " starts (term %" PRIu64 ", %zu entries on disk, snapshot @%" PRIu64 ")",
          n->id, n->hs.term, n->n_ents, n->has_snap ? n->snap.index : 0);
    handle_ready(n);
}

static void node_crash(struct node *n)
{
    raft_free(n->r);
    n->r = NULL;
    n->up = false;
    stats.crashes++;
    if (dataless && n->applied != n->d_applied)
        stats.dl_lost_on_crash++;
    trace("n%" PRIu64 " crashes (state machine @%" PRIu64 ", durable @%" PRIu64 ")", n->id,
          n->applied, dataless ? n->d_applied : 0);
}

static void node_wipe(struct node *n)
{
    if (n->r)
        raft_free(n->r);
    disk_truncate(n, 0);
    free(n->ents);
    free((void *)n->snap.data);
    memset(n, 0, sizeof(*n));
}

/* ---- actions ------------------------------------------------------------ */

static struct node *find_leader(void)
{
    struct node *best = NULL;
    for (int k = 1; k <= n_slots; k++) {
        struct node *n = &nodes[k];
        if (n->up && raft_get_role(n->r) == RAFT_LEADER &&
            (!best || raft_get_term(n->r) > raft_get_term(best->r)))
            best = n;
    }
    return best;
}

/* random_leader picks any node that believes it leads, stale ones too:
 * proposals to a cut-off leader make the divergent tails of figure 8. */
static struct node *random_leader(void)
{
    int cands[MAX_NODES], c = 0;
    for (int k = 1; k <= n_slots; k++)
        if (nodes[k].up && raft_get_role(nodes[k].r) == RAFT_LEADER)
            cands[c++] = k;
    return c ? &nodes[cands[rnd_n((uint64_t)c)]] : NULL;
}

static struct node *random_up(void)
{
    int cands[MAX_NODES], c = 0;
    for (int k = 1; k <= n_slots; k++)
        if (nodes[k].up)
            cands[c++] = k;
    return c ? &nodes[cands[rnd_n((uint64_t)c)]] : NULL;
}

static uint64_t proposal_seq;


static void do_propose(struct node *n)
{
    uint64_t v = ++proposal_seq;
    uint64_t idx = 0;
    int rc = raft_propose(n->r, &v, sizeof(v), &idx);
    if (rc == 0)
        trace("n%" PRIu64 " proposes #%" PRIu64 " at %" PRIu64, n->id, v, idx);
}

static void do_read(struct node *n)
{
    if (n_reads_req == cap_reads_req) {
        cap_reads_req = cap_reads_req ? cap_reads_req * 2 : 256;
        reads = realloc(reads, cap_reads_req * sizeof(*reads));
        if (!reads)
            exit(2);
    }
    struct read_req *q = &reads[n_reads_req];
    q->ctx = n_reads_req + 1;
    q->node = n->id;
    q->min_index = max_applied;
    q->open = true;
    if (raft_read_index(n->r, q->ctx) == 0) {
        n_reads_req++;
        trace("n%" PRIu64 " read %" PRIu64 " issued (must see >= %" PRIu64 ")", n->id, q->ctx,
              q->min_index);
    }
}

static void do_compact(struct node *n)
{
    uint64_t applied = raft_get_applied(n->r);
    if (dataless) {
        /* node.c maybe_compact: the store is made durable, then the core
         * takes a snapshot with no data and the marker is persisted. */
        const struct raft_entry *e = raft_get_entry(n->r, applied);
        if (!e || applied > n->applied)
            return;
        struct raft_snapshot s = {.index = applied, .term = e->term,
                                  .conf = *raft_get_membership(n->r)};
        sm_sync(n);
        if (raft_compact(n->r, NULL, 0) != 0)
            return;
        disk_compact(n, &s);
        stats.compactions++;
        trace("n%" PRIu64 " compacts at %" PRIu64 " (no data; state machine @%" PRIu64 ")",
              n->id, applied, n->applied);
        return;
    }
    if (applied < raft_get_first_index(n->r) || applied != n->applied)
        return;
    const struct raft_entry *e = raft_get_entry(n->r, applied);
    if (!e)
        return;
    struct raft_snapshot s = {.index = applied, .term = e->term,
                              .conf = *raft_get_membership(n->r), .data = &n->chain, .len = 8};
    if (raft_compact(n->r, &n->chain, 8) != 0)
        return;
    disk_compact(n, &s);
    stats.compactions++;
    trace("n%" PRIu64 " snapshots and compacts at %" PRIu64, n->id, applied);
}

static void do_conf(struct node *l)
{
    struct raft_membership next = *raft_get_membership(l->r);
    int what = (int)rnd_n(4);
    if (what == 0) { /* add a learner: a spare node or a removed member */
        uint64_t cands[MAX_NODES];
        int c = 0;
        for (int k = 1; k <= n_slots; k++)
            if (!raft_membership_is_voter(&next, (uint64_t)k) &&
                !raft_membership_is_learner(&next, (uint64_t)k))
                cands[c++] = (uint64_t)k;
        if (!c)
            return;
        next.learners[next.n_learners++] = cands[rnd_n((uint64_t)c)];
    } else if (what == 1) { /* promote a learner */
        if (!next.n_learners)
            return;
        uint32_t i = (uint32_t)rnd_n(next.n_learners);
        next.voters[next.n_voters++] = next.learners[i];
        next.learners[i] = next.learners[--next.n_learners];
    } else if (what == 2) { /* remove a voter (maybe the leader) */
        if (next.n_voters <= 3)
            return;
        uint32_t i = (uint32_t)rnd_n(next.n_voters);
        next.voters[i] = next.voters[--next.n_voters];
    } else { /* remove a learner */
        if (!next.n_learners)
            return;
        uint32_t i = (uint32_t)rnd_n(next.n_learners);
        next.learners[i] = next.learners[--next.n_learners];
    }
    uint64_t idx;
    if (raft_propose_conf(l->r, &next, &idx) != 0)
        return;
    stats.conf_proposed++;
    char buf[120];
    int o = snprintf(buf, sizeof(buf), "voters");
    for (uint32_t k = 0; k < next.n_voters; k++)
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, " %" PRIu64, next.voters[k]);
    o += snprintf(buf + o, sizeof(buf) - (size_t)o, " learners");
    for (uint32_t k = 0; k < next.n_learners; k++)
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, " %" PRIu64, next.learners[k]);
    trace("n%" PRIu64 " proposes membership at %" PRIu64 ": %s", l->id, idx, buf);
    /* A new member starts empty and learns everything from the leader. */
    for (uint32_t k = 0; k < next.n_learners; k++) {
        struct node *n = &nodes[next.learners[k]];
        if (!n->exists) {
            n->id = next.learners[k];
            n->group = nodes[l->id].group;
            node_start(n, false);
        }
    }
}

static void do_partition(void)
{
    /* Two groups; each node lands in one at random. */
    for (int k = 1; k <= n_slots; k++)
        nodes[k].group = (int)rnd_n(2);
    char buf[64];
    int o = 0;
    for (int k = 1; k <= n_slots; k++)
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, "%d", nodes[k].group);
    trace("partition: groups %s", buf);
    stats.partitions++;
}

/* isolate cuts |n| off from everyone: a leader keeps taking proposals it
 * cannot replicate, which later leaders must overwrite (figure 8). */
static void isolate(struct node *n)
{
    for (int k = 1; k <= n_slots; k++)
        nodes[k].group = 0;
    n->group = 1;
    trace("partition: n%" PRIu64 " isolated", n->id);
    stats.partitions++;
}

static void heal(void)
{
    for (int k = 1; k <= n_slots; k++)
        nodes[k].group = 0;
}

/* deliver_due delivers every message due now, in random order; messages the
 * deliveries produce with no delay go in the same tick, up to a bound. */
static void deliver_due(void)
{
    for (int round = 0; round < 50; round++) {
        size_t due = 0;
        for (size_t k = 0; k < n_net; k++)
            if (net[k]->at <= now)
                due++;
        if (!due)
            return;
        while (due > 0) {
            /* pick a random due message */
            size_t pick = (size_t)rnd_n(due), seen = 0, k;
            for (k = 0; k < n_net; k++)
                if (net[k]->at <= now && seen++ == pick)
                    break;
            struct netmsg *c = net[k];
            net[k] = net[--n_net];
            due--;
            struct node *to = &nodes[c->m.to];
            if (to->up && reachable(c->m.from, c->m.to)) {
                trace_msg("deliver", &c->m);
                if (dataless && c->m.type == RAFT_MSG_SNAP && c->m.snapshot) {
                    /* the received database copy, kept until the core
                     * hands the snapshot back (the server's recv_path) */
                    to->recv_set = true;
                    to->recv_index = c->m.snapshot->index;
                    to->recv_term = c->m.snapshot->term;
                    to->recv_applied = c->sm_applied;
                    to->recv_chain = c->sm_chain;
                }
                raft_step(to->r, &c->m);
                handle_ready(to);
                to->recv_set = false;
            }
            netmsg_free(c);
            /* new due messages wait for the next round */
            due = 0;
            for (size_t j = 0; j < n_net; j++)
                if (net[j]->at <= now)
                    due++;
            if (round > 40)
                break;
        }
    }
}

static void tick_all(void)
{
    now++;
    for (int k = 1; k <= n_slots; k++)
        if (nodes[k].up) {
            raft_tick(nodes[k].r);
            handle_ready(&nodes[k]);
        }
}

/* ---- one seed ----------------------------------------------------------- */

static void reset_world(void)
{
    for (int k = 0; k <= MAX_NODES; k++)
        node_wipe(&nodes[k]);
    for (size_t k = 0; k < n_net; k++)
        netmsg_free(net[k]);
    n_net = 0;
    if (cap_applied)
        memset(applied_recs, 0, cap_applied * sizeof(*applied_recs));
    if (cap_terms)
        memset(term_leader, 0, cap_terms * sizeof(*term_leader));
    if (cap_regs)
        memset(regs, 0, cap_regs * sizeof(*regs));
    n_regs = 0;
    n_reads_req = 0;
    max_applied = 0;
    now = 0;
    trace_pos = trace_count = 0;
    proposal_seq = 0;
}

static void run_seed(uint64_t seed, int n_nodes)
{
    cur_seed = seed;
    rng_state = seed * 0x2545F4914F6CDD1DULL + 1;
    reset_world();
    n_initial = n_nodes;
    n_slots = n_nodes + 2; /* two spares for membership changes */
    raft_config_default(&base_cfg, 1);
    base_cfg.election_tick = 10;
    base_cfg.heartbeat_tick = 2;
    base_cfg.max_inflight = (uint32_t)(1 + rnd_n(8));
    base_cfg.max_msg_entries = chance(0.5) ? 1 : (uint32_t)(1 + rnd_n(4));
    base_cfg.pre_vote = chance(0.6);
    base_cfg.check_quorum = chance(0.6);
    p_drop = (double)rnd_n(15) / 100.0;
    p_dup = (double)rnd_n(5) / 100.0;
    p_crash_unpersisted = (double)rnd_n(20) / 1000.0;
    max_delay = (unsigned)rnd_n(5);
    double p_crash = 0.005 + (double)rnd_n(40) / 1000.0;
    double p_part = (double)rnd_n(20) / 1000.0;
    double p_isolate = (double)rnd_n(30) / 1000.0;
    p_doom = (double)rnd_n(50) / 100.0;
    doom_node = 0;
    double p_restart = 0.02 + (double)rnd_n(10) / 100.0;
    /* Data-mode seeds draw nothing more, so they replay as before. */
    dataless = snap_mode == MODE_DATALESS || (snap_mode == MODE_MIXED && (seed & 1));
    if (dataless) {
        stats.dl_seeds++;
        p_trim = 0.05 + (double)rnd_n(60) / 100.0;
        trim_keep_max = (unsigned)rnd_n(3) == 0 ? 0 : (unsigned)(1 + rnd_n(20));
        p_sm_sync = chance(0.2) ? 1.0 : 0.05 + (double)rnd_n(60) / 100.0;
        trace("seed %" PRIu64 ": data-less snapshots, trim %.2f keeping <= %u, store sync %.2f",
              seed, p_trim, trim_keep_max, p_sm_sync);
    }
    trace("seed %" PRIu64 ": %d nodes, inflight %u, entries/msg %u, prevote %d, checkquorum %d, "
          "drop %.2f dup %.2f delay %u crash %.3f partition %.3f",
          seed, n_nodes, base_cfg.max_inflight, base_cfg.max_msg_entries, base_cfg.pre_vote,
          base_cfg.check_quorum, p_drop, p_dup, max_delay, p_crash, p_part);

    for (int k = 1; k <= n_slots; k++)
        nodes[k].id = (uint64_t)k;
    for (int k = 1; k <= n_nodes; k++)
        node_start(&nodes[k], true);

    /* Phase 1: faults. */
    while (now < fault_ticks) {
        struct node *l = find_leader();
        if (chance(0.3)) {
            struct node *t = chance(0.8) && l ? (chance(0.5) ? random_leader() : l) : random_up();
            int cnt = 1 + (int)rnd_n(4);
            for (int k = 0; t && k < cnt; k++)
                do_propose(t);
            if (t)
                handle_ready(t);
        }
        if (chance(0.25)) {
            struct node *t = random_up();
            if (t) {
                do_read(t);
                handle_ready(t);
            }
        }
        if (chance(0.03)) {
            struct node *t = random_up();
            if (t)
                do_compact(t);
        }
        if (l && !l->up)
            l = NULL; /* crashed in a Ready above (between sending and persisting) */
        if (l && chance(0.02)) {
            do_conf(l);
            handle_ready(l);
        }
        if (l && !l->up)
            l = NULL;
        if (l && chance(0.005)) {
            const struct raft_membership *m = raft_get_membership(l->r);
            uint64_t to = m->voters[rnd_n(m->n_voters)];
            if (raft_transfer_leader(l->r, to) == 0) {
                trace("n%" PRIu64 " transfers leadership to n%" PRIu64, l->id, to);
                stats.transfers++;
                handle_ready(l);
            }
        }
        if (chance(0.004)) {
            struct node *t = random_up();
            if (t) {
                trace("n%" PRIu64 " campaigns (forced timeout)", t->id);
                raft_campaign(t->r);
                handle_ready(t);
            }
        }
        if (l && !l->up)
            l = NULL;
        if (chance(p_crash)) {
            struct node *t = l && chance(0.5) ? l : random_up();
            int up = 0;
            for (int k = 1; k <= n_slots; k++)
                up += nodes[k].up;
            if (t && up > 1)
                node_crash(t);
        }
        for (int k = 1; k <= n_slots; k++)
            if (nodes[k].exists && !nodes[k].up && chance(p_restart))
                node_start(&nodes[k], false);
        if (doom_node && now >= doom_at) {
            struct node *d = &nodes[doom_node];
            if (d->up && chance(0.5))
                node_crash(d);
            else if (d->up)
                isolate(d);
            doom_node = 0;
        }
        if (chance(p_part))
            do_partition();
        if (l && chance(p_isolate))
            isolate(l);
        if (chance(0.03))
            heal();
        deliver_due();
        tick_all();
    }

    /* Phase 2: heal everything and demand progress. */
    p_crash_unpersisted = 0;
    heal();
    p_drop = 0;
    p_dup = 0;
    max_delay = 0;
    for (int k = 1; k <= n_slots; k++)
        if (nodes[k].exists && !nodes[k].up)
            node_start(&nodes[k], false);
    doom_node = 0;
    trace("faults healed");
    uint64_t healed_at = now, marker_index = 0;
    struct node *marker_node = NULL;
    uint64_t marker_term = 0;
    for (;;) {
        if (now - healed_at > LIVE_TICKS) {
            checking_liveness = true;
            violation("liveness: no leader committed a new entry within %d ticks of healing",
                      LIVE_TICKS);
        }
        struct node *l = find_leader();
        if (l && (!marker_node || marker_node != l || raft_get_term(l->r) != marker_term)) {
            uint64_t v = ++proposal_seq;
            if (raft_propose(l->r, &v, sizeof(v), &marker_index) == 0) {
                marker_node = l;
                marker_term = raft_get_term(l->r);
                trace("n%" PRIu64 " proposes liveness marker at %" PRIu64, l->id, marker_index);
                handle_ready(l);
            }
        }
        if (marker_node && marker_node->up && raft_get_term(marker_node->r) == marker_term &&
            raft_get_role(marker_node->r) == RAFT_LEADER &&
            marker_node->applied >= marker_index) {
            trace("liveness marker committed after %" PRIu64 " ticks", now - healed_at);
            break;
        }
        deliver_due();
        tick_all();
    }
    /* Reads still open were dropped by leader changes: allowed. */
}

int main(int argc, char **argv)
{
    uint64_t seeds = 100, first = 1;
    int n_nodes = 3;
    for (int k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--seeds") && k + 1 < argc)
            seeds = strtoull(argv[++k], NULL, 10);
        else if (!strcmp(argv[k], "--first") && k + 1 < argc)
            first = strtoull(argv[++k], NULL, 10);
        else if (!strcmp(argv[k], "--nodes") && k + 1 < argc)
            n_nodes = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--verbose"))
            verbose = true;
        else if (!strcmp(argv[k], "--ticks") && k + 1 < argc)
            fault_ticks = strtoull(argv[++k], NULL, 10);
        else if (!strcmp(argv[k], "--expect-violation"))
            expect_violation = true;
        else if (!strcmp(argv[k], "--dataless"))
            snap_mode = MODE_DATALESS;
        else if (!strcmp(argv[k], "--mixed"))
            snap_mode = MODE_MIXED;
        else {
            fprintf(stderr, "usage: raft-sim --seeds N [--first S] [--nodes 3|5] [--ticks T] "
                            "[--dataless | --mixed] [--verbose] [--expect-violation]\n");
            return 2;
        }
    }
    if (n_nodes != 3 && n_nodes != 5) {
        fprintf(stderr, "raft-sim: --nodes must be 3 or 5\n");
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t s = first; s < first + seeds; s++)
        run_seed(s, n_nodes);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("raft-sim: %" PRIu64 " seeds (%" PRIu64 "..%" PRIu64 "), %d nodes: all checks passed "
           "in %.1f s\n",
           seeds, first, first + seeds - 1, n_nodes, secs);
    if (expect_violation) {
        printf("raft-sim: no safety violation in %" PRIu64 " seeds, one was expected\n", seeds);
        return 1;
    }
    printf("raft-sim: totals: %" PRIu64 " entries applied, %" PRIu64 " leaders, %" PRIu64
           " reads served, %" PRIu64 " snapshots restored, %" PRIu64 " compactions, %" PRIu64
           " membership changes proposed, %" PRIu64 " transfers, %" PRIu64 " crashes (%" PRIu64
           " of a leader between sending and persisting), %" PRIu64 " partitions, %" PRIu64
           " messages\n",
           stats.applied, stats.leaders, stats.reads_ok, stats.restores, stats.compactions,
           stats.conf_proposed, stats.transfers, stats.crashes, stats.early_crashes,
           stats.partitions, stats.msgs);
    if (stats.dl_seeds)
        printf("raft-sim: data-less snapshots: %" PRIu64 " seeds, %" PRIu64
               " raft_trim_log calls (%" PRIu64 " dropped entries, %" PRIu64 " entries in all), %"
               PRIu64 " snapshots sent (%" PRIu64 " at a trimmed index), %" PRIu64
               " installed (%" PRIu64 " ahead of the snapshot index, %" PRIu64
               " kept the own, further state machine), %" PRIu64 " committed entries skipped, %" PRIu64
               " store syncs, %" PRIu64 " crashes lost applied entries\n",
               stats.dl_seeds, stats.trim_calls, stats.trims_dropped, stats.entries_trimmed,
               stats.dl_snaps_sent, stats.dl_snaps_trimmed, stats.dl_snaps_installed,
               stats.dl_installs_ahead, stats.dl_installs_kept, stats.dl_skipped, stats.dl_sm_syncs,
               stats.dl_lost_on_crash);
    return 0;
}
