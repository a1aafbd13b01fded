/* Unit tests for watch/watch.c on a real store in a temp dir: delivery
 * after commit, per-revision grouping, filters, catch-up from history,
 * backpressure, compaction, and callbacks that cancel their own watcher. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "mvcc/mvcc.h"
#include "watch/watch.h"

static char dir[64];
static backend *be;
static mvcc_store *kv;
static watch_hub *hub;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/watch-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    struct backend_options o = {.dir = dir, .no_sync = true};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(mvcc_open(be, &kv), 0);
    cr_assert_eq(watch_hub_new(kv, &hub), 0);
    mvcc_set_observer(kv, watch_hub_observe, hub);
}

static void teardown(void)
{
    watch_hub_free(hub);
    mvcc_close(kv);
    backend_close(be);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(watch, .init = setup, .fini = teardown);

static int64_t put(const char *k, const char *v)
{
    mvcc_txn *t;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)k, strlen(k), (const uint8_t *)v, strlen(v), 0,
                              NULL, NULL),
                 0);
    int64_t rev = mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    watch_hub_commit(hub);
    return rev;
}

static int64_t del(const char *k)
{
    mvcc_txn *t;
    int64_t n;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, (const uint8_t *)k, strlen(k), NULL, 0, NULL, NULL, &n),
                 0);
    int64_t rev = mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    watch_hub_commit(hub);
    return rev;
}

struct rec {
    int calls, events;
    int64_t revs[64];
    int types[64];
    bool cancel_self, full;
    int64_t compacted;
    watcher *w;
};

static int on_deliver(watcher *w, const struct watch_event *evs, size_t n, int64_t rev, void *arg)
{
    struct rec *r = arg;
    if (r->full)
        return -EAGAIN;
    r->calls++;
    for (size_t i = 0; i < n; i++) {
        cr_assert_leq(evs[i].kv.mod_revision, rev);
        r->revs[r->events] = evs[i].kv.mod_revision;
        r->types[r->events++] = evs[i].type;
    }
    if (r->cancel_self) {
        watcher_cancel(w);
        r->w = NULL;
    }
    return 0;
}

static void on_compacted(watcher *w, int64_t rev, void *arg)
{
    struct rec *r = arg;
    (void)w;
    r->compacted = rev;
    r->w = NULL;
}

static const struct watcher_ops ops = {on_deliver, on_compacted, NULL};

static void watch_key(struct rec *r, const char *k, int64_t start, unsigned filters)
{
    cr_assert_eq(watcher_new(hub, (const uint8_t *)k, strlen(k), NULL, 0, start, filters, &ops, r,
                             &r->w),
                 0);
}

Test(watch, self_cancel_in_callback_does_not_starve_others)
{
    struct rec a = {0}, b = {0}, c = {.cancel_self = true};
    int64_t next = mvcc_rev(kv) + 1;
    watch_key(&a, "k", next, 0);
    watch_key(&b, "k", next, 0);
    watch_key(&c, "k", next, 0); /* first in the list: delivered first */
    int64_t r1 = put("k", "1");
    cr_assert_eq(c.events, 1);
    cr_assert_null(c.w);
    cr_assert_eq(a.events, 1, "a watcher after a self-cancelling one must get the event");
    cr_assert_eq(b.events, 1, "a watcher after a self-cancelling one must get the event");
    int64_t r2 = put("k", "2");
    cr_assert_eq(a.revs[1], r2);
    cr_assert_eq(b.revs[1], r2);
    cr_assert_eq(c.events, 1, "a cancelled watcher gets nothing more");
    cr_assert_eq(a.revs[0], r1);
    watcher_cancel(a.w);
    watcher_cancel(b.w);
}

Test(watch, history_catch_up_then_live_in_order)
{
    int64_t first = put("h", "1");
    put("h", "2");
    del("h");
    struct rec r = {0};
    watch_key(&r, "h", first, 0);
    cr_assert(!watcher_is_synced(r.w));
    while (watch_hub_sync(hub))
        ;
    cr_assert(watcher_is_synced(r.w));
    cr_assert_eq(r.events, 3);
    cr_assert_eq(r.types[2], MVCC_EVENT_DELETE);
    int64_t live = put("h", "3");
    cr_assert_eq(r.events, 4);
    cr_assert_eq(r.revs[3], live);
    for (int i = 1; i < r.events; i++)
        cr_assert_gt(r.revs[i], r.revs[i - 1]);
    watcher_cancel(r.w);
}

Test(watch, full_consumer_falls_back_to_history_without_loss)
{
    struct rec r = {0};
    watch_key(&r, "b", mvcc_rev(kv) + 1, 0);
    r.full = true;
    int64_t a = put("b", "1");
    int64_t b = put("b", "2");
    cr_assert(!watcher_is_synced(r.w), "a full consumer goes to history");
    cr_assert_eq(r.events, 0);
    r.full = false;
    while (watch_hub_sync(hub))
        ;
    cr_assert_eq(r.events, 2);
    cr_assert_eq(r.revs[0], a);
    cr_assert_eq(r.revs[1], b);
    watcher_cancel(r.w);
}

Test(watch, filters_and_compaction)
{
    struct rec nop = {0};
    int64_t start = put("f", "0");
    watch_key(&nop, "f", mvcc_rev(kv) + 1, WATCH_FILTER_NOPUT);
    put("f", "1");
    int64_t d = del("f");
    cr_assert_eq(nop.events, 1);
    cr_assert_eq(nop.revs[0], d);
    watcher_cancel(nop.w);

    put("f", "2");
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(mvcc_compact(kv, mvcc_rev(kv)), 0);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    struct rec old = {0};
    watch_key(&old, "f", start, 0);
    while (watch_hub_sync(hub))
        ;
    cr_assert_eq(old.compacted, mvcc_compact_rev(kv));
    cr_assert_null(old.w);
    cr_assert_eq(watch_hub_unsynced_count(hub) + watch_hub_synced_count(hub), 0);
}

/* Two watchers behind by different amounts: a catch-up round reads at most
 * SYNC_MAX_REVS revisions from the slowest one's position; the one already
 * further on must not be moved back (it would get revisions twice). */
struct seen {
    int64_t last;
    int dup_or_gap;
    int n;
};

static int on_seq(watcher *w, const struct watch_event *evs, size_t n, int64_t rev, void *arg)
{
    struct seen *s = arg;
    (void)w;
    (void)rev;
    for (size_t i = 0; i < n; i++) {
        if (s->last != 0 && evs[i].kv.mod_revision != s->last + 1)
            s->dup_or_gap++;
        s->last = evs[i].kv.mod_revision;
        s->n++;
    }
    return 0;
}

static const struct watcher_ops seq_ops = {on_seq, on_compacted, NULL};

Test(watch, catch_up_never_moves_a_watcher_back)
{
    int64_t first = put("s", "0");
    for (int i = 0; i < 2500; i++)
        put("s", "x");
    int64_t cur = mvcc_rev(kv);
    struct seen slow = {0}, fast = {0};
    watcher *ws, *wf;
    cr_assert_eq(watcher_new(hub, (const uint8_t *)"s", 1, NULL, 0, first, 0, &seq_ops, &slow, &ws),
                 0);
    cr_assert_eq(watcher_new(hub, (const uint8_t *)"s", 1, NULL, 0, cur - 100, 0, &seq_ops, &fast,
                             &wf),
                 0);
    while (watch_hub_sync(hub))
        ;
    cr_assert_eq(slow.dup_or_gap, 0);
    cr_assert_eq(slow.n, cur - first + 1);
    cr_assert_eq(fast.dup_or_gap, 0, "the watcher ahead got revisions twice");
    cr_assert_eq(fast.n, 101);
    watcher_cancel(ws);
    watcher_cancel(wf);
}

Test(watch, future_start_gets_nothing_before_it)
{
    int64_t start = mvcc_rev(kv) + 5;
    struct rec r = {0};
    watch_key(&r, "f", start, 0);
    for (int i = 0; i < 8; i++)
        put("f", "v");
    cr_assert_eq(r.events, 8 - 4, "revisions before the start are not sent");
    cr_assert_eq(r.revs[0], start);
    watcher_cancel(r.w);
}

static struct rec *prev_rec;
static int64_t prev_versions[8];

static int on_prev(watcher *w, const struct watch_event *evs, size_t n, int64_t rev, void *arg)
{
    (void)w;
    (void)rev;
    for (size_t i = 0; i < n; i++) {
        prev_rec->types[prev_rec->events] = evs[i].type;
        prev_versions[prev_rec->events++] = evs[i].has_prev ? evs[i].prev.version : -1;
    }
    (void)arg;
    return 0;
}

static const struct watcher_ops prev_ops = {on_prev, on_compacted, NULL};

Test(watch, prev_kv_within_one_txn_is_the_value_before_it)
{
    put("t", "old"); /* version 1 */
    struct rec r = {0};
    prev_rec = &r;
    watcher *w;
    cr_assert_eq(watcher_new(hub, (const uint8_t *)"t", 1, NULL, 0, mvcc_rev(kv) + 1, 0, &prev_ops,
                             &r, &w),
                 0);
    /* one txn: put t, then delete t (etcd allows it through a from-key
     * delete); both events' prev is the key before the txn */
    mvcc_txn *t;
    int64_t n;
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)"t", 1, (const uint8_t *)"new", 3, 0, NULL, NULL),
                 0);
    cr_assert_eq(mvcc_txn_delete_range(t, (const uint8_t *)"t", 1, NULL, 0, NULL, NULL, &n), 0);
    mvcc_txn_end(t);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    watch_hub_commit(hub);
    cr_assert_eq(r.events, 2);
    cr_assert_eq(prev_versions[0], 1);
    cr_assert_eq(r.types[1], MVCC_EVENT_DELETE);
    cr_assert_eq(prev_versions[1], 1, "the delete's prev is the key before the txn, as etcd");
    watcher_cancel(w);
}

/* |n| keys <prefix>00.., one revision each */
static void put_many(const char *prefix, int n)
{
    char k[32];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "%s%02d", prefix, i);
        put(k, "0");
    }
}

/* A big revision paused between its steps (mvcc_set_step_pause): a commit
 * then delivers the revisions before it, whole, and none of its changes;
 * the commit after its last step delivers it in one piece. */
struct paused {
    struct rec *r;
    int pauses;
    int events_at_first_pause;
    int64_t rev_at_first_pause;
};

static int on_big_pause(void *arg)
{
    struct paused *p = arg;
    if (p->pauses++ == 0) {
        watch_hub_commit(hub);
        p->events_at_first_pause = p->r->events;
        p->rev_at_first_pause = mvcc_rev(kv);
    }
    return 0;
}

Test(watch, paused_big_revision_stays_pending)
{
    put_many("s/", 40);
    struct rec r = {0};
    cr_assert_eq(watcher_new(hub, (const uint8_t *)"s/", 2, (const uint8_t *)"s0", 2,
                             mvcc_rev(kv) + 1, 0, &ops, &r, &r.w),
                 0);
    struct paused p = {.r = &r};
    mvcc_set_step(kv, 10, NULL, NULL);
    mvcc_set_step_pause(kv, 5, on_big_pause, &p);
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    /* two small revisions, then one of 40 deletes and a put, in one batch */
    mvcc_txn *t;
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)"s/x", 3, (const uint8_t *)"1", 1, 0, NULL, NULL),
                 0);
    int64_t small1 = mvcc_txn_end(t);
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)"s/y", 3, (const uint8_t *)"1", 1, 0, NULL, NULL),
                 0);
    int64_t small2 = mvcc_txn_end(t);
    cr_assert_eq(r.events, 0, "nothing before a commit");
    int64_t n;
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, (const uint8_t *)"s/", 2, (const uint8_t *)"s0", 2,
                                       NULL, NULL, &n),
                 0);
    cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)"s/z", 3, (const uint8_t *)"1", 1, 0, NULL, NULL),
                 0);
    int64_t big = mvcc_txn_end(t);
    cr_assert_eq(n, 42);
    cr_assert_gt(p.pauses, 3, "pauses: %d", p.pauses);
    cr_assert_eq(p.rev_at_first_pause, small2);
    cr_assert_eq(p.events_at_first_pause, 2,
                 "at the pause, the two whole revisions and nothing of the big one (got %d)",
                 p.events_at_first_pause);
    cr_assert_eq(r.revs[0], small1);
    cr_assert_eq(r.revs[1], small2);
    mvcc_set_step(kv, 0, NULL, NULL);
    mvcc_set_step_pause(kv, 0, NULL, NULL);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    watch_hub_commit(hub);
    cr_assert_eq(r.events, 2 + 43, "the big revision whole after its end (got %d)", r.events);
    cr_assert_eq(r.calls, 3, "one delivery per revision");
    for (int i = 2; i < r.events; i++)
        cr_assert_eq(r.revs[i], big);
    watcher_cancel(r.w);
}

/* Nobody watches when a big revision starts; a watcher made between its
 * steps (the loop serves requests there) must still get all of it, not
 * the changes made after it came: it reads the revision from history. */
struct late {
    struct rec *r;
    int pauses;
};

static int on_late_pause(void *arg)
{
    struct late *l = arg;
    if (l->pauses++ == 1)
        cr_assert_eq(watcher_new(hub, (const uint8_t *)"t/", 2, (const uint8_t *)"t0", 2,
                                 mvcc_rev(kv) + 1, 0, &ops, l->r, &l->r->w),
                     0);
    return 0;
}

Test(watch, watcher_made_during_a_paused_revision_gets_all_of_it)
{
    put_many("t/", 40);
    struct rec r = {0};
    struct late l = {.r = &r};
    mvcc_set_step(kv, 10, NULL, NULL);
    mvcc_set_step_pause(kv, 5, on_late_pause, &l);
    cr_assert_eq(mvcc_batch_begin(kv), 0);
    mvcc_txn *t;
    int64_t n;
    cr_assert_eq(mvcc_txn_begin(kv, &t), 0);
    cr_assert_eq(mvcc_txn_delete_range(t, (const uint8_t *)"t/", 2, (const uint8_t *)"t0", 2,
                                       NULL, NULL, &n),
                 0);
    int64_t big = mvcc_txn_end(t);
    mvcc_set_step(kv, 0, NULL, NULL);
    mvcc_set_step_pause(kv, 0, NULL, NULL);
    cr_assert_eq(n, 40);
    cr_assert_gt(l.pauses, 3);
    cr_assert_not_null(r.w);
    cr_assert_eq(mvcc_batch_commit(kv), 0);
    watch_hub_commit(hub);
    while (watch_hub_sync(hub))
        ;
    cr_assert_eq(r.events, 40, "all 40 deletes of the revision (got %d)", r.events);
    for (int i = 0; i < r.events; i++)
        cr_assert_eq(r.revs[i], big);
    cr_assert_eq(r.calls, 1, "in one delivery");
    watcher_cancel(r.w);
}
