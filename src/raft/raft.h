/* raft/raft.h: the Raft consensus core as a pure state machine.
 *
 * The core performs no I/O, reads no clock and sends nothing itself. As in
 * etcd-io/raft, inputs go in (raft_tick, raft_step, raft_propose,
 * raft_propose_conf, raft_read_index, raft_transfer_leader, raft_compact) and
 * the work the caller must do comes out as a Ready (raft_ready): a hard state
 * and entries to persist, a received snapshot to persist and restore, messages
 * to send, committed entries to apply and ReadIndex results. The caller does
 * that work and then calls raft_advance. Randomness (election timeouts) comes
 * from a PRNG seeded by the caller, so a run is a pure function of its inputs
 * and a simulator can replay it exactly.
 *
 * THE READY LOOP (the contract; everything below relies on it)
 *
 *   while (running) {
 *       feed inputs: raft_tick / raft_step / raft_propose / raft_read_index...
 *       if (raft_has_ready(r)) {
 *           struct raft_ready rd;
 *           raft_ready(r, &rd);
 *           1. persist rd.snapshot (if set), then rd.entries, then rd.hs (if
 *              rd.hs_changed), and make them durable (fdatasync);
 *           2. only then send rd.msgs (a leader may send first: see the
 *              persistence rule);
 *           3. if rd.snapshot is set, restore the state machine from it; apply
 *              rd.committed in order; serve rd.reads once applied >= index;
 *           4. raft_advance(r);
 *       }
 *   }
 *
 * Persistence rule: everything a Ready asks to persist is durable before any
 * message of that same Ready is sent — no vote or acknowledgement ever
 * leaves a node before the state that justifies it is on its disk. One
 * exception, etcd's (Raft thesis 10.2.1): a LEADER whose Ready does not
 * change the term or vote (or whose term and vote are already durable) may
 * send that Ready's messages first and write its disk meanwhile, provided
 * it steps nothing until the write is done. The leader counts its own log
 * in the commit index, but an acknowledgement of an entry can only be
 * stepped after the Ready holding that entry was persisted, so no entry
 * commits on the strength of the leader's unsynced copy; if the leader
 * dies before its write, the entries it sent are uncommitted entries of a
 * crashed leader, which Raft handles. tests/raft/sim.c sends leader Readies
 * this way and crashes leaders between the send and the write.
 *
 * Between raft_ready and raft_advance the caller must not call any function
 * that changes the core (everything except raft_has_ready and the
 * read-only raft_get_* functions). Incoming messages that arrive meanwhile are queued by
 * the caller and stepped after raft_advance. In return, the Ready borrows the
 * core's memory without copying.
 *
 * Persisting entries: rd.entries[0].index may be at or below the last index
 * the caller already holds (a new leader overwrote an uncommitted tail). The
 * caller drops every persisted entry at or above rd.entries[0].index and then
 * appends rd.entries. Persisting a snapshot: the caller stores it and drops
 * every persisted entry (the core's log restarts right after it).
 *
 * What survives a crash: the hard state (term, vote, commit), the persisted
 * entries and the latest snapshot (received via rd.snapshot, or taken by the
 * application and handed to raft_compact). The core restarts from exactly
 * those with raft_new and a filled struct raft_storage.
 *
 * Log storage: the core owns an in-memory copy of its whole log from the
 * snapshot on (like etcd's MemoryStorage, but inside the core). The caller's
 * disk is write-only from the core's point of view except at raft_new. Memory
 * is bounded by calling raft_compact after taking application snapshots
 * (and, for a caller whose snapshots carry no data, raft_trim_log in
 * between).
 *
 * Membership: single-server changes, one at a time. A configuration entry
 * carries the whole new membership (voters and learners) and differs from the
 * current one by exactly one change (add voter, add learner, promote learner,
 * remove member). It takes effect on every node when that node applies it
 * (in raft_advance after the entry was handed out in rd.committed), like
 * etcd's ConfChange v1. A leader refuses a second change while one is
 * proposed and not yet applied, and refuses changes until it has applied
 * everything in its log at the time it was elected. Adjacent configurations
 * differing by one voter always have intersecting majorities, which is what
 * makes apply-time changes safe. A leader that applies its own removal steps
 * down. Joint consensus is not implemented.
 *
 * Caveats: never call a changing function between raft_ready and
 * raft_advance; never send a Ready's messages before its state is durable;
 * never restart a node id with a wiped disk (it would forget its vote and
 * acknowledged entries: remove it and add a new id instead). Duplicated,
 * delayed, reordered and lost messages are all fine.
 *
 * Errors: 0 or a negative code. -EINVAL (bad argument), -ENOMEM,
 * QERR_NO_LEADER (this node is not the leader, or knows no leader, for an
 * operation that needs one), -EBUSY (a configuration change is pending or a
 * leadership transfer is in progress), -ENOENT (an index already compacted
 * or beyond the log).
 */
#ifndef QUORUM_RAFT_RAFT_H
#define QUORUM_RAFT_RAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest number of members (voters + learners) a cluster may have. */
#define RAFT_MAX_MEMBERS 16

/* Node ids are non-zero; 0 means "none". */
#define RAFT_NONE 0

enum raft_role { RAFT_FOLLOWER, RAFT_PRE_CANDIDATE, RAFT_CANDIDATE, RAFT_LEADER };

enum raft_entry_type {
    RAFT_ENTRY_NORMAL = 0, /* application data (empty: the leader's no-op) */
    RAFT_ENTRY_CONF = 1,   /* an encoded struct raft_membership */
};

struct raft_entry {
    uint64_t term;
    uint64_t index;
    uint8_t type; /* enum raft_entry_type */
    const void *data;
    size_t len;
};

struct raft_membership {
    uint64_t voters[RAFT_MAX_MEMBERS];
    uint64_t learners[RAFT_MAX_MEMBERS];
    uint32_t n_voters;
    uint32_t n_learners;
};

struct raft_hard_state {
    uint64_t term;
    uint64_t vote;
    uint64_t commit;
};

/* A snapshot: the application's state at |index| (opaque bytes), the term of
 * that entry and the membership in force once it was applied. */
struct raft_snapshot {
    uint64_t index;
    uint64_t term;
    struct raft_membership conf;
    const void *data;
    size_t len;
};

enum raft_msg_type {
    RAFT_MSG_APP,            /* append entries (index/log_term: the previous) */
    RAFT_MSG_APP_RESP,       /* index: last matching, or the rejected index */
    RAFT_MSG_VOTE,           /* index/log_term: candidate's last entry */
    RAFT_MSG_VOTE_RESP,
    RAFT_MSG_PRE_VOTE,       /* term: the term the candidate would use */
    RAFT_MSG_PRE_VOTE_RESP,
    RAFT_MSG_HEARTBEAT,      /* commit, ctx: the leader's read round */
    RAFT_MSG_HEARTBEAT_RESP, /* ctx echoed */
    RAFT_MSG_SNAP,           /* snapshot */
    RAFT_MSG_TIMEOUT_NOW,    /* leadership transfer: campaign now */
    RAFT_MSG_READ_INDEX,     /* follower -> leader, ctx: the caller's id */
    RAFT_MSG_READ_INDEX_RESP, /* ctx, index: the read index */
    RAFT_MSG__COUNT
};

/* A message between two cores. Plain data; transport/ encodes it. */
struct raft_msg {
    uint8_t type; /* enum raft_msg_type */
    bool reject;
    bool force;         /* VOTE from a leadership transfer: ignore leases */
    uint64_t from, to, term;
    uint64_t log_term;  /* APP: term of |index|; VOTE: of the last entry;
                           rejected APP_RESP: term at reject_hint */
    uint64_t index;
    uint64_t commit;
    uint64_t reject_hint; /* rejected APP_RESP: where the leader should probe */
    uint64_t ctx;       /* heartbeat read round / ReadIndex request id */
    const struct raft_entry *entries;
    size_t n_entries;
    const struct raft_snapshot *snapshot; /* SNAP only */
};

/* One ReadIndex result: the read with id |ctx| may be served once the
 * caller's applied index is at least |index|. */
struct raft_read_state {
    uint64_t ctx;
    uint64_t index;
};

/* The work to do (see THE READY LOOP). Every pointer borrows the core's
 * memory and stays valid until raft_advance. */
struct raft_ready {
    bool hs_changed;
    struct raft_hard_state hs;
    const struct raft_snapshot *snapshot; /* a received snapshot, or NULL */
    const struct raft_entry *entries;     /* to persist, in index order */
    size_t n_entries;
    const struct raft_msg *msgs; /* to send, after persisting */
    size_t n_msgs;
    const struct raft_entry *committed; /* to apply, in index order */
    size_t n_committed;
    const struct raft_read_state *reads;
    size_t n_reads;
};

struct raft_config {
    uint64_t id;             /* this node, non-zero */
    unsigned election_tick;  /* ticks without a leader before campaigning
                                (randomized in [election_tick, 2*election_tick)) */
    unsigned heartbeat_tick; /* ticks between heartbeats; < election_tick */
    uint32_t max_inflight;   /* append messages in flight per follower */
    uint32_t max_msg_entries; /* entries per append message */
    bool pre_vote;           /* run a pre-vote before raising the term */
    bool check_quorum;       /* a leader steps down without a live majority;
                                followers with a live leader ignore votes */
    uint64_t seed;           /* PRNG seed for election timeouts */
};

/* What the caller persisted, handed back at restart. Zeroed: a new node. */
struct raft_storage {
    struct raft_hard_state hs;
    const struct raft_snapshot *snapshot; /* NULL: none */
    const struct raft_entry *entries;     /* the entries after the snapshot */
    size_t n_entries;
    uint64_t applied; /* highest index the state machine holds (0: replay all
                         committed entries after the snapshot) */
};

struct raft;

/* raft_config_default fills |c| with etcd-like defaults for node |id|:
 * election 10 ticks, heartbeat 1, 256 in flight, 64 entries a message,
 * pre_vote and check_quorum on, seed = id. */
void raft_config_default(struct raft_config *c, uint64_t id);

/* raft_new creates a core from |cfg| and what was persisted (|st|, may be
 * NULL for a new node). |st| and everything it points to is copied: the
 * caller may free it on return. If the storage is empty and |bootstrap| is
 * not NULL (a member of a brand-new cluster), the core writes the initial
 * membership as a committed configuration entry at index 1, term 1, which
 * the first Ready asks to persist. A node joining an existing cluster passes
 * empty storage and bootstrap NULL: it learns its membership from the leader.
 * Errors: -EINVAL (id 0, bad ticks or inconsistent storage), -ENOMEM. */
int raft_new(const struct raft_config *cfg, const struct raft_storage *st,
             const struct raft_membership *bootstrap, struct raft **out);

/* raft_free releases the core and everything it owns. NULL is allowed. */
void raft_free(struct raft *r);

/* raft_tick advances the logical clock by one tick: followers count towards
 * an election, leaders send heartbeats and check their quorum. */
void raft_tick(struct raft *r);

/* raft_step feeds one message from a peer. The core copies what it keeps:
 * |m| and its entries and snapshot are the caller's again on return.
 * Messages not addressed to this node, from a stale term, or not valid in
 * the current role are ignored. Returns 0: when memory runs out the message
 * (or the reply) is dropped as if the network lost it, which Raft
 * tolerates. */
int raft_step(struct raft *r, const struct raft_msg *m);

/* raft_propose appends |len| bytes (copied) as a normal entry. Only the
 * leader accepts: the caller forwards to raft_get_leader otherwise.
 * Proposals made in one loop pass go out to followers in one append.
 * |index_out| (may be NULL) receives the entry's index. Success means the
 * entry was appended, not committed: it is committed when it shows up in
 * rd.committed. Errors: QERR_NO_LEADER, -EBUSY (transferring leadership),
 * -ENOMEM. */
int raft_propose(struct raft *r, const void *data, size_t len, uint64_t *index_out);

/* raft_propose_conf proposes the membership |next|, which must differ from
 * the current one by exactly one change. Errors: QERR_NO_LEADER, -EBUSY (a
 * change is pending or not all entries of earlier terms are applied),
 * -EINVAL (not exactly one change, or it would leave no voter), -ENOMEM. */
int raft_propose_conf(struct raft *r, const struct raft_membership *next, uint64_t *index_out);

/* raft_read_index asks for a linearizable read point. Some later Ready
 * carries {ctx, index} in rd.reads once this node knows |index| is at least
 * the commit index at the time of the call and that the leader was still
 * leader then (confirmed by a heartbeat round of a majority; all reads
 * issued in one loop pass share one round). A new leader answers only after
 * committing an entry of its term. On a follower the request is forwarded to
 * the leader. A read is silently dropped if leadership changes meanwhile:
 * the caller times it out and retries. Errors: QERR_NO_LEADER, -ENOMEM. */
int raft_read_index(struct raft *r, uint64_t ctx);

/* raft_transfer_leader hands leadership to voter |to|: the leader stops
 * taking proposals, brings |to| up to date and tells it to campaign at once
 * (MsgTimeoutNow). Abandoned after an election timeout. Errors:
 * QERR_NO_LEADER (not the leader), -EINVAL (|to| not a voter, or self). */
int raft_transfer_leader(struct raft *r, uint64_t to);

/* raft_campaign makes this node start an election now (tests, tools). A
 * no-op on learners and non-members. */
void raft_campaign(struct raft *r);

/* raft_compact records that the application took a snapshot of its state at
 * the last applied index (raft_get_applied) holding |data| (|len| bytes,
 * copied), and drops the log up to that index. The core keeps the copy to
 * send to followers that fall behind. The caller persists the snapshot
 * itself (it made it: index raft_get_applied, the term of that entry, read
 * before compacting, and raft_get_membership) before dropping its own
 * entries up to that index. Errors:
 * -ENOENT (nothing applied), -ENOMEM. */
int raft_compact(struct raft *r, const void *data, size_t len);

/* raft_compact_keep is raft_compact(r, NULL, 0) for a caller whose
 * snapshots carry no data, keeping the last |keep| applied entries in
 * memory (as etcd keeps snapshotCatchUpEntries after a snapshot): a
 * follower a little behind when the application takes its snapshot goes
 * on from the log instead of being sent the whole state. Unlike
 * raft_trim_log it drops entries a follower still needs past |keep|: it is
 * the bound on the log's memory. Never drops above the persisted index nor
 * below the last applied configuration entry (the snapshot carries the
 * applied membership). Callable when raft_compact is. Errors: -EINVAL if
 * the core's snapshot carries data, -ENOENT (nothing applied), -ENOMEM. */
int raft_compact_keep(struct raft *r, uint64_t keep);

/* raft_trim_log bounds the in-memory log of a caller whose snapshots carry
 * no data (it calls raft_compact(r, NULL, 0)): its state machine is its own
 * snapshot, and what it sends a follower for a snapshot at index i is its
 * current state, applied at or past i. It drops the entries up to |index|
 * without a new application snapshot; the core's snapshot becomes that
 * index, its term and the applied membership, with no data. It never drops
 * more than asked and keeps what is still needed: nothing above the applied
 * or the persisted index, and on a leader nothing above the match index of
 * any follower or learner (so a member that is behind, or whose progress
 * the leader does not know yet, is never pushed to a snapshot by it: the
 * log then grows until the caller's next raft_compact or raft_compact_keep). Nothing
 * goes while a configuration entry applied after |index| (the snapshot
 * could not carry the membership in force at |index|). The caller's disk is
 * not concerned: a restart still starts from the caller's last persisted
 * snapshot and entries. Returns 0 (also when it dropped nothing), -EINVAL
 * if the core's snapshot carries data (from raft_compact), -EBUSY between
 * raft_ready and raft_advance, -ENOMEM. */
int raft_trim_log(struct raft *r, uint64_t index);

/* raft_has_ready tells whether raft_ready would have anything to do. */
bool raft_has_ready(const struct raft *r);

/* raft_ready fills |rd| with the work to do; see THE READY LOOP. Call it
 * only when raft_has_ready says so (an empty Ready is harmless). Errors:
 * -EBUSY (the previous Ready was not advanced yet). */
int raft_ready(struct raft *r, struct raft_ready *rd);

/* raft_advance tells the core the last Ready was done: its entries and
 * snapshot are durable, its committed entries applied (configuration entries
 * take effect now). The Ready's pointers become invalid. */
void raft_advance(struct raft *r);

/* Applying past a Ready. raft_advance_applied is raft_advance for a caller
 * that applied the Ready's committed entries only up to |applied| (the
 * rest, and those of later Readies, it applies later, e.g. across loop
 * passes): every committed entry is handed out once, in rd.committed, and
 * the core holds the applied index at what the caller reports. Entries
 * above it stay in the log (raft_get_entry: never compacted or trimmed
 * while not applied; committed entries are never overwritten) and a
 * snapshot from the leader is not restored meanwhile (dropped as a lost
 * message: the leader sends it again). Configuration entries take effect
 * only once reported applied, so the core's applied index, what
 * raft_compact snapshots and what a leader's next configuration change
 * waits for, is never ahead of the state machine. raft_set_applied
 * reports progress between Readies (it changes the core: not between
 * raft_ready and raft_advance). Both clamp |applied| to what was handed
 * out; UINT64_MAX means all of it. raft_get_applying is the last index
 * handed out. */
void raft_advance_applied(struct raft *r, uint64_t applied);
void raft_set_applied(struct raft *r, uint64_t applied);
uint64_t raft_get_applying(const struct raft *r);

/* Read-only accessors. */
enum raft_role raft_get_role(const struct raft *r);
uint64_t raft_get_id(const struct raft *r);
uint64_t raft_get_term(const struct raft *r);
uint64_t raft_get_leader(const struct raft *r);
uint64_t raft_get_commit(const struct raft *r);
/* raft_get_match: on a leader, the last index member |id| is known to
 * hold (its own last index for the leader itself); 0 elsewhere. */
uint64_t raft_get_match(const struct raft *r, uint64_t id);
uint64_t raft_get_applied(const struct raft *r);
uint64_t raft_get_first_index(const struct raft *r);
uint64_t raft_get_last_index(const struct raft *r);
/* raft_get_log_bytes: the data of the entries the core holds in memory
 * (the sum of their len; the caller bounds it with raft_trim_log). */
size_t raft_get_log_bytes(const struct raft *r);
/* raft_get_entry returns the entry at |index| or NULL (compacted or beyond).
 * The pointer lives until the next call that changes the core. */
const struct raft_entry *raft_get_entry(const struct raft *r, uint64_t index);
/* raft_get_membership returns the applied membership; lives as above. */
const struct raft_membership *raft_get_membership(const struct raft *r);

/* raft_membership_encode writes |m| as a configuration entry payload into
 * |out| (room for raft_membership_size(m) bytes) and returns the length. */
size_t raft_membership_size(const struct raft_membership *m);
size_t raft_membership_encode(const struct raft_membership *m, uint8_t *out);
/* raft_membership_decode parses a payload. Errors: -EINVAL. */
int raft_membership_decode(const void *data, size_t len, struct raft_membership *m);
/* raft_membership_is_voter / _is_learner / _is_member test |id|. */
bool raft_membership_is_voter(const struct raft_membership *m, uint64_t id);
bool raft_membership_is_learner(const struct raft_membership *m, uint64_t id);
/* raft_membership_check tells whether |next| is exactly one allowed change
 * away from |cur|: 0 or -EINVAL. */
int raft_membership_check(const struct raft_membership *cur, const struct raft_membership *next);

/* raft_msg_type_name returns a static name like "MsgApp" for traces. */
const char *raft_msg_type_name(int type);

#endif
