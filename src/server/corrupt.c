/* server/corrupt.c: the periodic corruption check, as etcd 3.4's
 * (--experimental-corrupt-check-time). Every period the leader hashes its
 * store at its current revision (HashKV) and asks every other member for
 * its hash at that revision over the peer links (TRANSPORT_MSG_HASH). A
 * member whose hash differs at the same compaction revision gets the
 * CORRUPT alarm, raised through the log so every member refuses writes
 * from then on; both hashes are logged. A member that cannot hash there
 * (behind, or compacted past it) is skipped this round. */
#include "server/server_int.h"

#include <errno.h>

#include "base/log.h"
#include "transport/transport.h"

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
    for (size_t i = 0; i < s->n_peers; i++) {
        struct raft_msg m = {.type = TRANSPORT_MSG_HASH,
                             .from = s->member_id,
                             .to = s->peers[i].id,
                             .term = server_term(s),
                             .index = (uint64_t)rev,
                             .ctx = s->corrupt.round};
        transport_send(s->tp, &m);
    }
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

void server_corrupt_on_response(struct server *s, const struct raft_msg *m)
{
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
    if (s->cfg.corrupt_check_ms > 0)
        uv_timer_start(&s->corrupt.timer, on_check, s->cfg.corrupt_check_ms,
                       s->cfg.corrupt_check_ms);
}

void server_corrupt_close(struct server *s, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&s->corrupt.timer, cb);
}
