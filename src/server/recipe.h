/* server/recipe.h: the building blocks etcd's concurrency recipes (Mutex,
 * Election in clientv3/concurrency) are made of, for the Lock and Election
 * services: an op that outlives its call while its own writes are in
 * flight, a transaction proposal with a typed completion, local reads of a
 * prefix's first/last created key, and waiting for a key's deletion. */
#ifndef QUORUM_SERVER_RECIPE_H
#define QUORUM_SERVER_RECIPE_H

#include "server/server_int.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

struct recipe;
typedef void (*recipe_txn_fn)(struct recipe *r, int err, Etcdserverpb__TxnResponse *resp);
typedef void (*recipe_fn)(struct recipe *r, int err);
typedef void (*recipe_hdr_fn)(struct recipe *r, int err, const Etcdserverpb__ResponseHeader *h);

/* Embedded first in each service's op. refs counts the call (until
 * on_close) and each pending proposal or watcher; the op is freed by
 * |free_op| when it drops to zero. */
struct recipe {
    struct server *s;
    qcall *call; /* NULL once the client left */
    int refs;
    watcher *w;
    recipe_fn on_deleted; /* wait_delete's continuation */
    void (*free_op)(struct recipe *r);
    /* recipe_wait_deletes' state */
    const uint8_t *wd_pfx;
    size_t wd_len;
    int64_t wd_max;
    recipe_hdr_fn wd_done;
    struct arena a; /* reads; reset by each read */
};

void recipe_ref(struct recipe *r);
void recipe_unref(struct recipe *r);

/* recipe_txn proposes |t| and calls |fn| with the unpacked response (freed
 * after |fn| returns) once durable. The op is kept alive meanwhile. */
void recipe_txn(struct recipe *r, const Etcdserverpb__TxnRequest *t, recipe_txn_fn fn);

/* recipe_grant proposes a lease of |ttl| seconds; |fn| gets its id. */
typedef void (*recipe_grant_fn)(struct recipe *r, int err, int64_t id);
void recipe_grant(struct recipe *r, int64_t ttl, recipe_grant_fn fn);

/* recipe_read_edge reads the prefix |pfx|'s key with the lowest create
 * revision (|last| false, etcd's WithFirstCreate) or the highest one at or
 * below |max_create| (|last| true: WithLastCreate + WithMaxCreateRev).
 * *|kv| is NULL when there is none; it and *|hdr| (revision = current)
 * live in |a|. */
int recipe_read_edge(struct server *s, const uint8_t *pfx, size_t len, bool last,
                     int64_t max_create, struct arena *a, Mvccpb__KeyValue **kv,
                     Etcdserverpb__ResponseHeader **hdr);

/* recipe_wait_delete calls |fn| once |key| is deleted at a revision >=
 * |from| (err QERR_COMPACTED if that history is gone). */
void recipe_wait_delete(struct recipe *r, const uint8_t *key, size_t len, int64_t from,
                        recipe_fn fn);
/* recipe_wait_deletes is etcd's waitDeletes: until no key under |pfx| has
 * a create revision <= |max_create|, wait for the newest such key to be
 * deleted; then |fn| gets the header of the read that found none. |pfx|
 * must live as long as the wait. Nothing is called once the call is gone. */
void recipe_wait_deletes(struct recipe *r, const uint8_t *pfx, size_t len, int64_t max_create,
                         recipe_hdr_fn fn);

/* recipe_stop_wait cancels a pending wait (no callback). */
void recipe_stop_wait(struct recipe *r);

/* prefix_end writes the etcd range end of prefix |p| (last byte + 1,
 * trailing 0xff dropped) into |out| (room for |n| bytes) and returns its
 * length; 1 with out = "\0" when there is none (every key >= p). */
size_t recipe_prefix_end(const uint8_t *p, size_t n, uint8_t *out);

/* recipe_auth checks that the call may read (and with |write|, write)
 * every key under prefix |pfx| (|len| bytes), or with |exact| the key
 * itself, as the KV requests the recipe makes on the caller's behalf would
 * be checked (etcd runs them as the caller). On a refusal it finishes the
 * call as etcd's lock and election services do (UNKNOWN, the error's
 * text) and returns false. A write inside the ZooKeeper face's reserved
 * prefix is refused as a Put there is (PERMISSION_DENIED), auth or not. */
bool recipe_auth(qcall *call, const uint8_t *pfx, size_t len, bool write, bool exact);

/* Txn building: ops and compares on the caller's stack or arena. */
void recipe_cmp_create(Etcdserverpb__Compare *c, const uint8_t *key, size_t len, int64_t rev);
void recipe_op_put(Etcdserverpb__RequestOp *op, Etcdserverpb__PutRequest *p, const uint8_t *key,
                   size_t len, const uint8_t *val, size_t vlen, int64_t lease);
void recipe_op_get(Etcdserverpb__RequestOp *op, Etcdserverpb__RangeRequest *g, const uint8_t *key,
                   size_t len);
void recipe_op_delete(Etcdserverpb__RequestOp *op, Etcdserverpb__DeleteRangeRequest *d,
                      const uint8_t *key, size_t len);

/* recipe_fill_header gives a header copied from |h| the member's ids. */
void recipe_fill_header(struct server *s, Etcdserverpb__ResponseHeader *out,
                        const Etcdserverpb__ResponseHeader *h);

/* recipe_finish ends the call as etcd's recipe servers do with a plain Go
 * error: UNKNOWN, with |text|, or |err|'s text when |text| is NULL. */
void recipe_finish(struct recipe *r, int err, const char *text);

#endif
