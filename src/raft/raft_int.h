/* raft/raft_int.h: the core's private structures, shared by the raft .c files and
 * their unit tests only. Nothing outside src/raft and tests/raft includes
 * this file. */
#ifndef QUORUM_RAFT_RAFT_INT_H
#define QUORUM_RAFT_RAFT_INT_H

#include "raft/raft.h"

/* ---- log.c: the in-memory log ------------------------------------------ */

/* The log holds the entries after the snapshot (snap_index, snap_term) in a
 * growable array; ents[head .. head+n) are indexes snap_index+1 .. last.
 * The data of the entries appended by one call shares one allocation (a
 * block with a reference count, blk[k] for ents[k]), so appending a message
 * of 64 entries costs one malloc, not 64. */
struct raft_log {
    struct raft_entry *ents;
    struct log_block **blk;
    size_t cap, head, n;
    uint64_t snap_index, snap_term;
    uint64_t stabled; /* entries up to here are on the caller's disk */
    size_t bytes;     /* the entries' data in memory (sum of len) */
};

void log_init(struct raft_log *l);
void log_free(struct raft_log *l);
uint64_t log_last_index(const struct raft_log *l);
uint64_t log_last_term(const struct raft_log *l);
static inline uint64_t log_first_index(const struct raft_log *l) { return l->snap_index + 1; }
/* log_term sets |*t| to the term at |i|: 0 or -ENOENT (compacted/beyond). */
int log_term(const struct raft_log *l, uint64_t i, uint64_t *t);
/* log_term_or0 is log_term returning 0 for unknown indexes. */
uint64_t log_term_or0(const struct raft_log *l, uint64_t i);
bool log_match_term(const struct raft_log *l, uint64_t i, uint64_t t);
/* log_entry returns the entry at |i| (first_index <= i <= last) or NULL. */
const struct raft_entry *log_entry(const struct raft_log *l, uint64_t i);
/* log_append appends copies of |n| entries; ents[0].index must be last+1. */
int log_append(struct raft_log *l, const struct raft_entry *ents, size_t n);
/* log_append_one appends one entry (data copied) at last+1 with |term|. */
int log_append_one(struct raft_log *l, uint64_t term, uint8_t type, const void *data,
                   size_t len);
/* log_truncate drops entries at and after |i| (i > snap_index). */
void log_truncate(struct raft_log *l, uint64_t i);
/* log_compact drops entries up to |i| (snap_index < i <= last). */
void log_compact(struct raft_log *l, uint64_t i);
/* log_reset drops everything and restarts the log after (index, term). */
void log_reset(struct raft_log *l, uint64_t index, uint64_t term);
/* log_find_conflict returns the index of the first of |ents| whose term
 * differs from the log's (or that is beyond the log), 0 if none. */
uint64_t log_find_conflict(const struct raft_log *l, const struct raft_entry *ents, size_t n);
/* log_find_conflict_by_term returns the largest index <= |i| whose term is
 * <= |t| (or the snapshot index when the log does not go back so far). */
uint64_t log_find_conflict_by_term(const struct raft_log *l, uint64_t i, uint64_t t);
/* log_is_up_to_date: is (idx, term) at least as up to date as our log
 * (paper 5.4.1)? */
bool log_is_up_to_date(const struct raft_log *l, uint64_t idx, uint64_t term);

/* ---- progress.c: the leader's view of each follower --------------------- */

enum progress_state { PROGRESS_PROBE, PROGRESS_REPLICATE, PROGRESS_SNAPSHOT };

/* A ring of the last index of each append in flight. */
struct inflights {
    uint64_t *buf;
    uint32_t start, count, cap;
};

int inflights_init(struct inflights *in, uint32_t cap);
void inflights_free(struct inflights *in);
void inflights_reset(struct inflights *in);
bool inflights_full(const struct inflights *in);
void inflights_add(struct inflights *in, uint64_t last);
/* inflights_free_le drops every in-flight append ending at or before |to|. */
void inflights_free_le(struct inflights *in, uint64_t to);
void inflights_free_first(struct inflights *in);

struct progress {
    uint64_t id;
    uint64_t match, next;
    uint64_t pending_snapshot;
    uint64_t read_ack; /* highest read round this peer acknowledged */
    struct inflights inflights;
    uint8_t state;     /* enum progress_state */
    bool probe_sent;   /* probe: one append out, wait for an answer */
    bool recent_active;
    bool learner;
    bool acked;        /* any append acknowledged since the last heartbeat reply */
    bool sent_this_pass; /* an append went out since the last Ready */
    unsigned stall_ticks; /* ticks in SNAPSHOT state without an answer */
};

void progress_become_probe(struct progress *p);
void progress_become_replicate(struct progress *p);
void progress_become_snapshot(struct progress *p, uint64_t snap_index);
/* progress_maybe_update records an acknowledgement of |n|; true if new. */
bool progress_maybe_update(struct progress *p, uint64_t n);
/* progress_maybe_decr handles a rejection of |rejected| with probe hint
 * |hint|; true if next moved (the rejection was not stale). */
bool progress_maybe_decr(struct progress *p, uint64_t rejected, uint64_t hint);
bool progress_is_paused(const struct progress *p);
/* quorum_index returns the largest value v such that a majority of |vals|
 * (n values) is >= v. n must be > 0. Sorts |vals| in place. */
uint64_t quorum_index(uint64_t *vals, size_t n);

/* ---- raft.c ------------------------------------------------------------- */

struct pending_read {
    uint64_t ctx;
    uint64_t from;  /* who asked: this node or a follower */
    uint64_t index; /* commit index when it arrived */
    uint64_t round; /* heartbeat round that confirms it */
};

struct raft {
    struct raft_config cfg;
    uint64_t id;
    uint64_t term, vote, lead;
    uint8_t role;
    struct raft_log log;
    uint64_t commit, applied;
    uint64_t applying;                 /* last committed entry handed out in a
                                          Ready (>= applied): the caller may
                                          apply past a Ready (raft.h) */
    struct raft_membership conf;       /* applied membership */
    uint64_t conf_index;               /* where |conf| took effect: the newest
                                          applied configuration entry or
                                          restored snapshot (0: none) */
    struct raft_snapshot snap;         /* latest snapshot (data owned) */
    bool snap_unstable;                /* snap must go out in the next Ready */
    struct progress prs[RAFT_MAX_MEMBERS];
    uint32_t n_prs;
    uint32_t votes_granted, votes_rejected;
    uint64_t voted_from[RAFT_MAX_MEMBERS];
    bool voted_grant[RAFT_MAX_MEMBERS];
    uint32_t n_voted;
    unsigned election_elapsed, heartbeat_elapsed, randomized_timeout;
    uint64_t rng;
    uint64_t pending_conf_index;
    uint64_t lead_transferee;
    unsigned transfer_elapsed;
    /* reads */
    uint64_t read_round;      /* latest heartbeat round number */
    bool read_round_needed;   /* new reads wait for the next round */
    struct pending_read *reads;
    size_t n_reads, cap_reads;
    struct raft_read_state *read_states;
    size_t n_read_states, cap_read_states;
    /* outbox */
    struct raft_msg *msgs;
    size_t n_msgs, cap_msgs;
    bool bcast_needed;        /* new entries or commit to send at Ready */
    struct raft_hard_state prev_hs;
    /* the Ready handed out and not yet advanced */
    bool in_ready;
    uint64_t ready_stable_to;   /* last index of rd.entries */
    uint64_t ready_applied_to;  /* last index of rd.committed */
    bool ready_had_snap;
    size_t ready_n_msgs, ready_n_reads;
};

#endif
