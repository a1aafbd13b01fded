/* server/corrupt.c: the periodic corruption check, as etcd 3.4's
 * (--experimental-corrupt-check-time). Every period the leader hashes its
 * store at its current revision (HashKV) and asks every other member for
 * its hash at that revision over the peer links (TRANSPORT_MSG_HASH). A
 * member whose hash differs at the same compaction revision gets the
 * CORRUPT alarm, raised through the log so every member refuses writes
 * from then on; both hashes are logged. A member that cannot hash there
 * (behind, or compacted past it) is skipped this round.
 *
 * --experimental-initial-corrupt-check is etcd's checkInitialHashKV: before
 * the member serves clients it hashes its store at its revision and asks
 * every peer for its hash there (the same messages, round
 * INITIAL_ROUND). A peer with another hash at the same compaction revision
 * is a mismatch; one that cannot answer (behind, compacted, down until the
 * request timeout) is skipped with a warning, as etcd's. On a mismatch the
 * member logs etcd's "<id> found data inconsistency with peers" and exits
 * 1; otherwise it serves. Differences from etcd: etcd asks before its Raft
 * node starts, over the peers' HTTP /members/hashkv; quorum asks over the
 * peer links once its node runs (it applies what its log holds meanwhile,
 * but its hash is the one taken at start). */
#include "server/server_int.h"

#include <errno.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "transport/transport.h"

/* ask_peers asks every peer for its HashKV at |rev|, for round |round| */
static void ask_peers(struct server *s, int64_t rev, uint64_t round)
{
    for (size_t i = 0; i < s->n_peers; i++) {
        struct raft_msg m = {.type = TRANSPORT_MSG_HASH,
                             .from = s->member_id,
                             .to = s->peers[i].id,
                             .term = server_term(s),
                             .index = (uint64_t)rev,
                             .ctx = round};
        transport_send(s->tp, &m);
    }
}

static void on_check(uv_timer_t *t)
{
    struct server *s = t->data;
    if (!server_is_leader(s) || s->n_peers == 0)
        return;
    int64_t rev = mvcc_rev(s->kv), compact = 0;
    uint32_t hash = 0;
    if (mvcc_hash_kv(s->kv, rev, &hash, &compact) != 0)
        return;
    s->corrupt.round++;
    s->corrupt.rev = rev;
    s->corrupt.compact = compact;
    s->corrupt.hash = hash;
    ask_peers(s, rev, s->corrupt.round);
}

void server_corrupt_on_request(struct server *s, const struct raft_msg *m)
{
    int64_t rev = (int64_t)m->index, compact = 0;
    uint32_t hash = 0;
    int rv = rev <= mvcc_rev(s->kv) ? mvcc_hash_kv(s->kv, rev, &hash, &compact) : -EAGAIN;
    struct raft_msg r = {.type = TRANSPORT_MSG_HASH_RESP,
                         .from = s->member_id,
                         .to = m->from,
                         .term = server_term(s),
                         .ctx = m->ctx,
                         .index = (uint64_t)rev,
                         .commit = hash,
                         .log_term = (uint64_t)(compact + 1),
                         .reject = rv != 0};
    transport_send(s->tp, &r);
}

#define INITIAL_ROUND (1ull << 63) /* never a periodic round */

static void on_check(uv_timer_t *t);

static void exit_failed(void *arg)
{
    (void)arg;
    exit(1); /* etcd's fatal exit, once everything is closed */
}

static void initial_done(struct server *s)
{
    s->corrupt.initial = false;
    uv_timer_stop(&s->corrupt.timer);
    if (s->corrupt.mismatches > 0) {
        log_error("etcdmain", "%llx found data inconsistency with peers",
                  (unsigned long long)s->member_id);
        server_stop(s, exit_failed, NULL);
        return;
    }
    log_info("server", "%llx succeeded on initial corruption checking: no corruption",
             (unsigned long long)s->member_id);
    if (s->cfg.corrupt_check_ms > 0)
        uv_timer_start(&s->corrupt.timer, on_check, s->cfg.corrupt_check_ms,
                       s->cfg.corrupt_check_ms);
}

static void on_initial_timeout(uv_timer_t *t)
{
    struct server *s = t->data;
    if (!s->corrupt.initial)
        return;
    log_warn("server", "%llx: %zu peer(s) did not answer the initial corruption check in time",
             (unsigned long long)s->member_id, s->corrupt.initial_left);
    initial_done(s);
}

static void initial_response(struct server *s, const struct raft_msg *m)
{
    if (s->corrupt.initial_left > 0)
        s->corrupt.initial_left--;
    int64_t rev = (int64_t)m->index, compact = (int64_t)m->log_term - 1;
    uint32_t hash = (uint32_t)m->commit;
    unsigned long long me = s->member_id, peer = m->from;
    if (m->reject)
        log_warn("server",
                 "%llx cannot check the hash of peer %llx at revision %lld: peer is "
                 "lagging behind or compacted",
                 me, peer, (long long)s->corrupt.rev);
    else if (hash != s->corrupt.hash && compact == s->corrupt.compact) {
        log_error("server",
                  "%llx's hash %u != %llx's hash %u (revision %lld, compact revision "
                  "%lld)",
                  me, s->corrupt.hash, peer, hash, (long long)rev, (long long)compact);
        s->corrupt.mismatches++;
    } else if (hash != s->corrupt.hash) {
        log_warn("server",
                 "%llx cannot check hash of peer(%llx): peer has a different compact "
                 "revision %lld (revision:%lld)",
                 me, peer, (long long)compact, (long long)rev);
    }
    if (s->corrupt.initial_left == 0)
        initial_done(s);
}

/* initial_start begins etcd's checkInitialHashKV; false when there is
 * nothing to wait for. */
static bool initial_start(struct server *s)
{
    uint64_t timeout = s->request_timeout_ms;
    log_info("server", "%llx starting initial corruption check with timeout %llums...",
             (unsigned long long)s->member_id, (unsigned long long)timeout);
    int64_t rev = mvcc_rev(s->kv), compact = 0;
    uint32_t hash = 0;
    int rv = mvcc_hash_kv(s->kv, rev, &hash, &compact);
    if (rv != 0) {
        log_error("etcdmain", "%llx failed to fetch hash (%s)", (unsigned long long)s->member_id,
                  q_strerror(rv));
        s->corrupt.initial = true; /* serve nothing */
        server_stop(s, exit_failed, NULL);
        return true;
    }
    s->corrupt.rev = rev;
    s->corrupt.compact = compact;
    s->corrupt.hash = hash;
    s->corrupt.mismatches = 0;
    s->corrupt.initial_left = s->n_peers;
    if (s->n_peers == 0) {
        log_info("server", "%llx succeeded on initial corruption checking: no corruption",
                 (unsigned long long)s->member_id);
        return false;
    }
    s->corrupt.initial = true;
    ask_peers(s, rev, INITIAL_ROUND);
    uv_timer_start(&s->corrupt.timer, on_initial_timeout, timeout, 0);
    return true;
}

void server_corrupt_on_response(struct server *s, const struct raft_msg *m)
{
    if (m->ctx == INITIAL_ROUND) {
        if (s->corrupt.initial)
            initial_response(s, m);
        return;
    }
    if (!server_is_leader(s) || m->ctx != s->corrupt.round || m->reject)
        return;
    int64_t rev = (int64_t)m->index, compact = (int64_t)m->log_term - 1;
    uint32_t hash = (uint32_t)m->commit;
    if (rev != s->corrupt.rev || compact != s->corrupt.compact) {
        log_debug("server", "corruption check: member %016llx compacted at %lld, leader at %lld",
                  (unsigned long long)m->from, (long long)compact, (long long)s->corrupt.compact);
        return;
    }
    if (hash == s->corrupt.hash)
        return;
    for (size_t i = 0; i < s->alarms.n; i++)
        if (s->alarms.a[i].member_id == m->from &&
            s->alarms.a[i].type == ETCDSERVERPB__ALARM_TYPE__CORRUPT)
            return; /* raised already */
    log_error("server",
              "corruption check: member %016llx has hash %u at revision %lld (compact "
              "revision %lld) but the leader %016llx has %u; raising the CORRUPT alarm",
              (unsigned long long)m->from, hash, (long long)rev, (long long)compact,
              (unsigned long long)s->member_id, s->corrupt.hash);
    Etcdserverpb__AlarmRequest a = ETCDSERVERPB__ALARM_REQUEST__INIT;
    a.action = ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE;
    a.memberid = m->from;
    a.alarm = ETCDSERVERPB__ALARM_TYPE__CORRUPT;
    server_propose_internal(s, ENTRY_ALARM, &a.base);
}

void server_corrupt_start(struct server *s)
{
    uv_timer_init(s->loop, &s->corrupt.timer);
    s->corrupt.timer.data = s;
    if (s->cfg.initial_corrupt_check && initial_start(s))
        return; /* the periodic check starts once it is over */
    if (s->cfg.corrupt_check_ms > 0)
        uv_timer_start(&s->corrupt.timer, on_check, s->cfg.corrupt_check_ms,
                       s->cfg.corrupt_check_ms);
}

void server_corrupt_close(struct server *s, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&s->corrupt.timer, cb);
}
