/* watch/watch.c: synced and unsynced watcher groups; see watch.h. */
#include "watch/watch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/buf.h"
#include "base/err.h"

/* one catch-up round reads at most this many revisions of history */
#define SYNC_MAX_REVS 1000

struct watcher {
    watch_hub *hub;
    uint8_t *key, *end;
    size_t key_len, end_len;
    int64_t next_rev; /* the first revision it has not been given */
    unsigned filters;
    bool synced;
    bool dead; /* cancelled while its callback ran: freed when it returns */
    const struct watcher_ops *ops;
    void *arg;
    watcher *prev, *next;
};

struct evlist {
    struct watch_event *v;
    size_t n, cap;
};

struct watch_hub {
    mvcc_store *kv;
    watcher *synced, *unsynced;
    size_t nsynced, nunsynced;
    struct evlist pending; /* changes of the open batch */
    /* the last revision with changes not in |pending| (nobody watched
     * then): a watcher made before its end, while it was paused between
     * steps, reads it from history */
    int64_t skipped_rev;
    struct arena pending_arena;
    struct evlist scratch; /* events for one watcher */
    watcher *delivering;   /* the watcher whose callback is running */
};

static void free_w(watcher *w)
{
    free(w->key);
    free(w->end);
    free(w);
}

/* ---- lists ---- */

static watcher **group(watch_hub *h, bool synced)
{
    return synced ? &h->synced : &h->unsynced;
}

static void unlink_w(watcher *w)
{
    watch_hub *h = w->hub;
    if (w->prev)
        w->prev->next = w->next;
    else
        *group(h, w->synced) = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    if (w->synced)
        h->nsynced--;
    else
        h->nunsynced--;
}

static void link_w(watcher *w, bool synced)
{
    watch_hub *h = w->hub;
    watcher **head = group(h, synced);
    w->synced = synced;
    w->prev = NULL;
    w->next = *head;
    if (*head)
        (*head)->prev = w;
    *head = w;
    if (synced)
        h->nsynced++;
    else
        h->nunsynced++;
}

static void move_w(watcher *w, bool synced)
{
    if (w->synced == synced)
        return;
    unlink_w(w);
    link_w(w, synced);
}

/* ---- matching ---- */

static bool matches(const watcher *w, const struct watch_event *ev)
{
    if ((w->filters & WATCH_FILTER_NOPUT) && ev->type == MVCC_EVENT_PUT)
        return false;
    if ((w->filters & WATCH_FILTER_NODELETE) && ev->type == MVCC_EVENT_DELETE)
        return false;
    int c = bytes_compare(ev->kv.key, ev->kv.key_len, w->key, w->key_len);
    if (w->end_len == 0)
        return c == 0;
    if (c < 0)
        return false;
    if (w->end_len == 1 && w->end[0] == 0)
        return true;
    return bytes_compare(ev->kv.key, ev->kv.key_len, w->end, w->end_len) < 0;
}

static int evlist_push(struct evlist *l, const struct watch_event *ev)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct watch_event *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *ev;
    return 0;
}

/* ---- hub ---- */

int watch_hub_new(mvcc_store *kv, watch_hub **out)
{
    watch_hub *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    h->kv = kv;
    *out = h;
    return 0;
}

void watch_hub_free(watch_hub *h)
{
    if (h == NULL)
        return;
    while (h->synced)
        watcher_cancel(h->synced);
    while (h->unsynced)
        watcher_cancel(h->unsynced);
    free(h->pending.v);
    free(h->scratch.v);
    arena_free(&h->pending_arena);
    free(h);
}

static int copy_kv(struct arena *a, struct mvcc_kv *dst, const struct mvcc_kv *src)
{
    *dst = *src;
    dst->key = arena_dup(a, src->key, src->key_len);
    dst->value = arena_dup(a, src->value, src->value_len);
    dst->raw = NULL; /* the stored bytes are not kept */
    dst->raw_len = 0;
    return dst->key && dst->value ? 0 : -ENOMEM;
}

void watch_hub_observe(enum mvcc_event_type type, const struct mvcc_kv *kv,
                       const struct mvcc_kv *prev, void *arg)
{
    watch_hub *h = arg;
    if (h->nsynced == 0 && h->nunsynced == 0) {
        /* nobody is watching: the unsynced catch up from history */
        h->skipped_rev = kv->mod_revision;
        return;
    }
    struct watch_event ev = {.type = type};
    int rv = copy_kv(&h->pending_arena, &ev.kv, kv);
    if (rv == 0 && prev != NULL && prev->mod_revision == kv->mod_revision) {
        /* the key was already written in this txn: etcd's prev_kv is the
         * key before the txn, which that earlier change recorded */
        for (size_t i = h->pending.n; i-- > 0;) {
            const struct watch_event *e = &h->pending.v[i];
            if (e->kv.mod_revision != kv->mod_revision)
                break;
            if (e->kv.key_len == kv->key_len && memcmp(e->kv.key, kv->key, kv->key_len) == 0) {
                ev.prev = e->prev;
                ev.has_prev = e->has_prev;
                break;
            }
        }
    } else if (rv == 0 && prev != NULL) {
        rv = copy_kv(&h->pending_arena, &ev.prev, prev);
        ev.has_prev = true;
    }
    if (rv == 0)
        rv = evlist_push(&h->pending, &ev);
    if (rv != 0) {
        /* Out of memory: rather than lose the event, send every synced
         * watcher back to history, which has it once the batch commits. */
        int64_t first = ev.kv.mod_revision;
        if (h->pending.n > 0 && h->pending.v[0].kv.mod_revision < first)
            first = h->pending.v[0].kv.mod_revision;
        while (h->synced) {
            watcher *w = h->synced;
            if (w->next_rev > first)
                w->next_rev = first;
            move_w(w, false);
        }
    }
}

void watch_hub_restored(watch_hub *h)
{
    watch_hub_abort(h);
    while (h->synced)
        move_w(h->synced, false);
}

void watch_hub_abort(watch_hub *h)
{
    h->pending.n = 0;
    arena_reset(&h->pending_arena);
}

/* deliver_group gives watcher |w| the events of |evs| (one or more whole
 * revisions up to |upto|) that match it, with header revision |rev|, in
 * pieces of about |chunk| bytes cut at revision boundaries (0: one piece).
 * On -EAGAIN, *|resume| is the first revision not taken (0 if all was). */
static int deliver_group(watch_hub *h, watcher *w, const struct watch_event *evs, size_t n,
                         int64_t upto, int64_t rev, size_t chunk, int64_t *resume)
{
    h->scratch.n = 0;
    *resume = 0;
    for (size_t i = 0; i < n; i++) {
        if (evs[i].kv.mod_revision < w->next_rev || evs[i].kv.mod_revision > upto)
            continue;
        if (matches(w, &evs[i]) && evlist_push(&h->scratch, &evs[i]) != 0) {
            *resume = w->next_rev; /* try again from history */
            return -EAGAIN;
        }
    }
    struct watch_event *v = h->scratch.v;
    size_t total = h->scratch.n, start = 0;
    while (start < total) {
        size_t end = start, bytes = 0;
        while (end < total) {
            /* never split a revision */
            bool same_rev = end > start && v[end].kv.mod_revision == v[end - 1].kv.mod_revision;
            if (chunk && bytes >= chunk && !same_rev)
                break;
            bytes += v[end].kv.key_len + v[end].kv.value_len + v[end].prev.value_len + 64;
            end++;
        }
        int rv = w->ops->deliver(w, v + start, end - start, rev, w->arg);
        if (rv != 0) {
            *resume = v[start].kv.mod_revision;
            return rv;
        }
        if (w->dead)
            return 0;
        start = end;
    }
    return 0;
}

void watch_hub_commit(watch_hub *h)
{
    struct watch_event *evs = h->pending.v;
    /* only whole revisions: a big one paused between its steps
     * (mvcc_set_step_pause) has some of its changes pending, and the
     * store's revision is still the one before it */
    int64_t top = mvcc_rev(h->kv);
    size_t n = 0;
    while (n < h->pending.n && evs[n].kv.mod_revision <= top)
        n++;
    if (h->skipped_rev != 0 && h->skipped_rev <= top) {
        /* a revision some of whose changes came while nobody watched, and
         * watchers made since (between its steps): what |pending| holds of
         * it is not all of it; they read it whole from history */
        for (watcher *w = h->synced, *next; w != NULL; w = next) {
            next = w->next;
            if (w->next_rev <= h->skipped_rev)
                move_w(w, false);
        }
        h->skipped_rev = 0;
    }
    for (size_t i = 0; i < n;) {
        int64_t rev = evs[i].kv.mod_revision;
        size_t j = i;
        while (j < n && evs[j].kv.mod_revision == rev)
            j++;
        for (watcher *w = h->synced, *next; w != NULL; w = next) {
            /* taken before the callback: cancelling |w| unlinks it */
            next = w->next;
            h->delivering = w;
            int64_t resume;
            int rv = deliver_group(h, w, evs + i, j - i, rev, rev, 0, &resume);
            h->delivering = NULL;
            if (w->dead) {
                free_w(w);
                continue;
            }
            if (rv == -EAGAIN) {
                w->next_rev = rev; /* from history, later */
                move_w(w, false);
            } else if (w->next_rev <= rev) {
                w->next_rev = rev + 1; /* only forward */
            }
        }
        i = j;
    }
    /* synced watchers are now at the current revision (a watcher that
     * starts in the future keeps its start) */
    int64_t next = top + 1;
    for (watcher *w = h->synced; w != NULL; w = w->next)
        if (w->next_rev < next)
            w->next_rev = next;
    if (n == h->pending.n) {
        watch_hub_abort(h);
    } else if (n > 0) {
        /* the rest stays for the commit after the revision's last step
         * (their copies stay in the arena until then) */
        memmove(evs, evs + n, (h->pending.n - n) * sizeof(*evs));
        h->pending.n -= n;
    }
}

/* ---- catch-up from history ---- */

static size_t room(watcher *w)
{
    return w->ops->room == NULL ? SIZE_MAX : w->ops->room(w, w->arg);
}

struct hist {
    struct evlist evs;
    mvcc_read *rd;
};

static int on_history(enum mvcc_event_type type, const struct mvcc_kv *kv, void *arg)
{
    struct hist *hi = arg;
    struct watch_event ev = {.type = type, .kv = *kv};
    return evlist_push(&hi->evs, &ev);
}

static int on_prev(const struct mvcc_kv *kv, void *arg)
{
    struct watch_event *ev = arg;
    ev->prev = *kv;
    ev->has_prev = true;
    return 1;
}

/* fill_prev finds each history event's previous kv (the key at the
 * revision before), when history still has it. */
static void fill_prev(struct hist *hi)
{
    for (size_t i = 0; i < hi->evs.n; i++) {
        struct watch_event *ev = &hi->evs.v[i];
        if (ev->type == MVCC_EVENT_PUT && ev->kv.create_revision == ev->kv.mod_revision)
            continue; /* a creation has no previous kv */
        struct mvcc_range_opts o = {.rev = ev->kv.mod_revision - 1, .limit = 1};
        struct mvcc_range_result res;
        if (o.rev > 0)
            mvcc_read_range(hi->rd, ev->kv.key, ev->kv.key_len, NULL, 0, &o, on_prev, ev, &res);
    }
}

bool watch_hub_sync(watch_hub *h)
{
    if (h->nunsynced == 0)
        return false;
    int64_t cur = mvcc_rev(h->kv);
    int64_t compact = mvcc_compact_rev(h->kv);
    int64_t min = INT64_MAX;
    for (watcher *w = h->unsynced, *next; w != NULL; w = next) {
        next = w->next;
        if (w->next_rev < compact) {
            unlink_w(w);
            w->dead = true; /* a watcher_cancel from the callback is a no-op */
            w->ops->compacted(w, compact, w->arg);
            next = h->unsynced; /* the callback may have changed the list */
            free_w(w);
            continue;
        }
        if (w->next_rev > cur) {
            move_w(w, true);
            continue;
        }
        if (w->next_rev < min && room(w) > 0)
            min = w->next_rev;
    }
    if (h->nunsynced == 0)
        return false;
    if (min == INT64_MAX)
        return true; /* every consumer is full: nothing to read for now */
    int64_t to = cur;
    if (to - min >= SYNC_MAX_REVS)
        to = min + SYNC_MAX_REVS - 1;

    struct hist hi = {0};
    if (mvcc_read_begin(h->kv, &hi.rd) != 0)
        return true;
    /* history is what the read transaction sees: never beyond it */
    if (cur > mvcc_read_rev(hi.rd))
        cur = mvcc_read_rev(hi.rd);
    if (to > cur)
        to = cur;
    int rv = mvcc_read_history(hi.rd, min, to, on_history, &hi);
    if (rv == 0) {
        fill_prev(&hi);
        for (watcher *w = h->unsynced, *next; w != NULL; w = next) {
            next = w->next; /* before the callback: cancelling |w| unlinks it */
            size_t chunk = room(w);
            if (chunk == 0)
                continue;
            h->delivering = w;
            int64_t resume;
            int drv = deliver_group(h, w, hi.evs.v, hi.evs.n, to, cur,
                                    chunk == SIZE_MAX ? 0 : chunk, &resume);
            h->delivering = NULL;
            if (w->dead) {
                free_w(w);
                continue;
            }
            if (drv == -EAGAIN) {
                /* the consumer filled up: keep what it took, the rest next
                 * round (only forward) */
                if (resume > w->next_rev)
                    w->next_rev = resume;
                continue;
            }
            /* only forward: a watcher already past |to| (the round reads
             * from the slowest one) got nothing and keeps its place */
            if (w->next_rev <= to)
                w->next_rev = to + 1;
            if (w->next_rev > cur)
                move_w(w, true);
        }
    }
    mvcc_read_end(hi.rd);
    free(hi.evs.v);
    return h->nunsynced > 0;
}

/* ---- watchers ---- */

int watcher_new(watch_hub *h, const uint8_t *key, size_t key_len, const uint8_t *end,
                size_t end_len, int64_t start, unsigned filters, const struct watcher_ops *ops,
                void *arg, watcher **out)
{
    watcher *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->key = malloc(key_len ? key_len : 1);
    w->end = malloc(end_len ? end_len : 1);
    if (w->key == NULL || w->end == NULL) {
        free(w->key);
        free(w->end);
        free(w);
        return -ENOMEM;
    }
    if (key_len)
        memcpy(w->key, key, key_len);
    if (end_len)
        memcpy(w->end, end, end_len);
    w->key_len = key_len;
    w->end_len = end_len;
    w->hub = h;
    w->next_rev = start;
    w->filters = filters;
    w->ops = ops;
    w->arg = arg;
    link_w(w, start > mvcc_rev(h->kv));
    *out = w;
    return 0;
}

void watcher_cancel(watcher *w)
{
    if (w == NULL || w->dead)
        return;
    unlink_w(w);
    if (w->hub->delivering == w) {
        w->dead = true; /* the loop that called it frees it */
        return;
    }
    free_w(w);
}

bool watcher_is_synced(const watcher *w)
{
    return w->synced;
}

size_t watch_hub_synced_count(const watch_hub *h)
{
    return h->nsynced;
}

size_t watch_hub_unsynced_count(const watch_hub *h)
{
    return h->nunsynced;
}
