/* server/autocompact.c: --auto-compaction-mode/-retention, as etcd 3.4's
 * compactor package (periodic.go, revision.go). The compaction is proposed
 * like a client's Compact, so it is applied in order with other writes. */
#include "server/server_int.h"

#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"

#define REVISION_CHECK_MS (5 * 60 * 1000) /* etcd's revInterval */
#define HOUR_MS (3600 * 1000ull)

static void on_compacted(struct server *s, int err, const uint8_t *resp, size_t len, void *arg)
{
    struct autocompact *ac = &s->autocompact;
    int64_t rev = (int64_t)(intptr_t)arg;
    ac->in_flight = false;
    /* etcd counts ErrCompacted as done: someone compacted further */
    if (err == 0 || err == QERR_COMPACTED) {
        ac->last_success_ms = uv_now(s->loop);
        ac->prev = rev;
        if (err == 0)
            log_info("compactor", "completed auto %s compaction at revision %lld",
                     ac->periodic ? "periodic" : "revision", (long long)rev);
        return;
    }
    log_warn("compactor", "auto compaction at revision %lld failed: %s", (long long)rev,
             q_strerror(err));
}

static void propose(struct server *s, int64_t rev)
{
    Etcdserverpb__CompactionRequest r = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    r.revision = rev;
    s->autocompact.in_flight = true;
    log_info("compactor", "starting auto %s compaction at revision %lld",
             s->autocompact.periodic ? "periodic" : "revision", (long long)rev);
    server_propose_cb(s, ENTRY_COMPACT, &r.base, on_compacted, (void *)(intptr_t)rev);
}

static void sample(struct autocompact *ac, int64_t rev)
{
    if (ac->n_revs == ac->cap_revs) {
        /* revs[0] is always the revision one period ago */
        for (size_t i = 1; i < ac->n_revs; i++)
            ac->revs[i - 1] = ac->revs[i];
        ac->n_revs--;
    }
    ac->revs[ac->n_revs++] = rev;
}

static void on_tick(uv_timer_t *t)
{
    struct server *s = t->data;
    struct autocompact *ac = &s->autocompact;
    if (ac->in_flight)
        return;
    if (!server_is_leader(s)) {
        /* etcd's compactor runs on the leader only (paused elsewhere) */
        ac->n_revs = 0;
        return;
    }
    if (!ac->periodic) {
        int64_t rev = mvcc_rev(s->kv) - ac->retention;
        if (rev <= 0 || rev == ac->prev)
            return;
        propose(s, rev);
        return;
    }
    uint64_t now = uv_now(s->loop);
    if (now - ac->last_success_ms >= ac->base_ms) {
        /* wait a whole period only the first time, then one interval */
        ac->base_ms = ac->period_ms < HOUR_MS ? ac->period_ms : HOUR_MS;
        if (ac->revs[0] > 0 && ac->revs[0] > mvcc_compact_rev(s->kv))
            propose(s, ac->revs[0]);
        else
            ac->last_success_ms = now; /* nothing new to compact */
    }
    sample(ac, mvcc_rev(s->kv));
}

void server_autocompact_start(struct server *s)
{
    struct autocompact *ac = &s->autocompact;
    uv_timer_init(s->loop, &ac->timer);
    ac->timer.data = s;
    ac->periodic = s->cfg.auto_compaction_periodic;
    if (s->cfg.auto_compaction_retention == 0)
        return;
    if (ac->periodic) {
        ac->period_ms = s->cfg.auto_compaction_retention;
        uint64_t itv = ac->period_ms < HOUR_MS ? ac->period_ms : HOUR_MS;
        ac->interval_ms = itv / 10 ? itv / 10 : 1;
        ac->base_ms = ac->period_ms;
        ac->cap_revs = ac->period_ms / ac->interval_ms + 1;
        ac->revs = calloc(ac->cap_revs, sizeof(*ac->revs));
        if (ac->revs == NULL) {
            log_error("compactor", "out of memory: auto compaction is off");
            return;
        }
        sample(ac, mvcc_rev(s->kv));
        log_info("compactor", "auto periodic compaction every %llu ms (retention %llu ms)",
                 (unsigned long long)ac->interval_ms, (unsigned long long)ac->period_ms);
    } else {
        ac->retention = (int64_t)s->cfg.auto_compaction_retention;
        ac->interval_ms =
            s->cfg.auto_compaction_check_ms ? s->cfg.auto_compaction_check_ms : REVISION_CHECK_MS;
        log_info("compactor",
                 "auto revision compaction keeping %lld revisions, checked every "
                 "%llu ms",
                 (long long)ac->retention, (unsigned long long)ac->interval_ms);
    }
    ac->enabled = true;
    ac->last_success_ms = uv_now(s->loop);
    uv_timer_start(&ac->timer, on_tick, ac->interval_ms, ac->interval_ms);
}

void server_autocompact_close(struct server *s, uv_close_cb cb)
{
    free(s->autocompact.revs);
    s->autocompact.revs = NULL;
    uv_close((uv_handle_t *)&s->autocompact.timer, cb);
}
