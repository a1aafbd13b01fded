/* watch/watch.h: watchers over key ranges, fed by the store's changes and,
 * when behind, by its history.
 *
 * As etcd's watchable store: a watcher is *synced* when it has seen every
 * committed revision; it then gets each new revision's events as soon as
 * the batch holding them is durable (watch_hub_commit). A watcher that
 * starts in the past, or whose consumer could not take events (backpressure:
 * the deliver callback said -EAGAIN), is *unsynced*: it catches up from
 * MVCC history in bounded rounds (watch_hub_sync), one history walk shared
 * by all unsynced watchers, and joins the synced ones when it reaches the
 * current revision. So a slow consumer costs a history read later, never a
 * growing queue in memory and never a stall of the write path.
 *
 * Guarantees to consumers: events in revision order, each revision once,
 * all events of a revision in one delivery (atomic), none missing from the
 * start revision on (reliable) unless history was compacted, which is
 * reported instead (compacted callback) and ends the watcher.
 *
 * Threading: the loop thread only. */
#ifndef QUORUM_WATCH_WATCH_H
#define QUORUM_WATCH_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mvcc/mvcc.h"

typedef struct watch_hub watch_hub;
typedef struct watcher watcher;

struct watch_event {
    enum mvcc_event_type type;
    struct mvcc_kv kv;   /* for a delete: key and mod_revision only */
    struct mvcc_kv prev; /* valid when has_prev */
    bool has_prev;
};

#define WATCH_FILTER_NOPUT 1u
#define WATCH_FILTER_NODELETE 2u

struct watcher_ops {
    /* deliver: |n| events (n >= 1), all with mod_revision <= |rev|, for the
     * watcher; |rev| is the revision the response's header carries. The
     * events and their pointers are valid during the call. Return 0 when
     * taken, -EAGAIN when the consumer is full (the same events come again
     * later from history). */
    int (*deliver)(watcher *w, const struct watch_event *evs, size_t n, int64_t rev, void *arg);
    /* compacted: history the watcher needs is gone; the watcher is
     * removed after this returns (do not cancel it). */
    void (*compacted)(watcher *w, int64_t compact_rev, void *arg);
    /* room (optional): about how many bytes of events the consumer can
     * take now (0: it is full). Catch-up skips full consumers, reads no
     * history when none has room, and hands events in pieces of about this
     * size, cut at revision boundaries. NULL: always room, one piece. */
    size_t (*room)(watcher *w, void *arg);
};

/* watch_hub_new creates the hub for |kv|. Errors: -ENOMEM. */
int watch_hub_new(mvcc_store *kv, watch_hub **out);
void watch_hub_free(watch_hub *h); /* watchers must be cancelled first */

/* watch_hub_observe is the store's change observer: it copies each change
 * of the open batch. watch_hub_commit delivers them once the batch is
 * durable, the revisions up to the store's current one (mvcc_rev): a
 * revision under way between its steps stays pending until a commit after
 * its last step. watch_hub_abort drops them. */
void watch_hub_observe(enum mvcc_event_type type, const struct mvcc_kv *kv,
                       const struct mvcc_kv *prev, void *hub);
void watch_hub_commit(watch_hub *h);
void watch_hub_abort(watch_hub *h);

/* watch_hub_restored tells the hub that the store jumped ahead (it was
 * replaced by a snapshot from another member, then reloaded): every synced
 * watcher becomes unsynced and catches up from history from where it was
 * (or is told its history was compacted). */
void watch_hub_restored(watch_hub *h);

/* watch_hub_sync runs one bounded round of catch-up for unsynced watchers.
 * Returns true while some remain unsynced (call again soon). */
bool watch_hub_sync(watch_hub *h);

/* watcher_new watches [key, end) (etcd forms: end empty = the key alone,
 * end "\0" = every key >= key) from revision |start| (inclusive; pass the
 * current revision + 1 for "from now"). |filters| is WATCH_FILTER_*.
 * Errors: -ENOMEM. */
int watcher_new(watch_hub *h, const uint8_t *key, size_t key_len, const uint8_t *end,
                size_t end_len, int64_t start, unsigned filters, const struct watcher_ops *ops,
                void *arg, watcher **out);

/* watcher_cancel removes and frees |w|; no callback follows. It may be
 * called from |w|'s own deliver or compacted callback (then it is freed
 * when the callback returns); from a compacted callback it is not needed.
 * A callback may cancel only its own watcher, and may create watchers
 * (they start with the next delivery round). */
void watcher_cancel(watcher *w);

/* watcher_is_synced: it has seen every committed revision (progress
 * notifications are only sent to these, as etcd does). */
bool watcher_is_synced(const watcher *w);

/* counts, for tests and status */
size_t watch_hub_synced_count(const watch_hub *h);
size_t watch_hub_unsynced_count(const watch_hub *h);

#endif
