/* server/zk_tree.h: znodes in the MVCC store (docs/zookeeper.md, "Znodes in
 * the MVCC store"): the key layout, the stored records, the writes applied
 * from ENTRY_ZK_WRITE entries and the reads the ZooKeeper face serves.
 *
 * Keys: "\0zkD" + depth (u16 BE) + path holds a znode's data side (mode,
 * mzxid, ctime, mtime, version, aversion, ephemeral owner, ttl, ACL,
 * data); "\0zkC" + depth + path its child side (cversion, pzxid,
 * numChildren), written only once a child came or went (absent: 0, czxid,
 * 0). czxid is the D key's create revision; zxids are revisions. "/"
 * always exists (its D key is written only by setData or setACL; its
 * czxid is 0).
 */
#ifndef QUORUM_SERVER_ZK_TREE_H
#define QUORUM_SERVER_ZK_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/buf.h"
#include "lease/lessor.h"
#include "mvcc/mvcc.h"
#include "zk/proto.h"

struct server;
struct entry;

/* The identities a connection has (ACL checks): "world:anyone" is
 * implied; |ids| are "scheme:id" strings (digest user:hash, ip address,
 * ...). */
struct zk_ids {
    const char *const *ids;
    size_t n;
};

/* zk_acl_permits: |acl| (n entries) lets |who| do |perm| (ZooKeeper's
 * checkACL: an empty ACL lets anyone do anything). */
bool zk_acl_permits(const struct zk_acl *acl, int32_t n, int32_t perm, const struct zk_ids *who);

/* zk_path_valid: ZooKeeper's PathUtils.validatePath of the path as the
 * server reads it (Java's UTF-8 decoding: a malformed sequence is
 * U+FFFD, which the rule refuses, and a character past U+FFFF is a
 * surrogate pair, refused too). A sequential create checks the name with
 * its counter. */
bool zk_path_valid(const uint8_t *p, size_t n);

/* zk_path_parent_len: the length of |p|'s parent (n bytes, n > 0):
 * everything before the last '/', "/" for "/a" and for "/". */
size_t zk_path_parent_len(const uint8_t *p, size_t n);

/* zk_hash: FNV-1a of |n| bytes at |p| going on from |h| (ZK_HASH_START
 * to begin): the hash of the face's tables in memory (a write's overlay,
 * the watches, an ACL's entries seen). */
#define ZK_HASH_START 1469598103934665603ull
static inline uint64_t zk_hash(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The session record, key "\0zkS" + the session id (big-endian), attached
 * to the session's lease (zk_service.c writes it): version 1 is [1]
 * [timeout ms, i32 BE] [password, 16 bytes]; version 2 is [2], the same,
 * then the member the session is connected to (u64 BE): a write proposed
 * by another member for it is answered SESSIONMOVED (ZooKeeper's session
 * owner). zk_session_owner: that member, 0 when the record names none. */
#define ZK_SESSION_KEY_LEN 12
#define ZK_SESSION_PASSWD_LEN 16
#define ZK_SESSION_V1_LEN (1 + 4 + ZK_SESSION_PASSWD_LEN)
#define ZK_SESSION_V2_LEN (ZK_SESSION_V1_LEN + 8)
void zk_session_key(int64_t id, uint8_t k[ZK_SESSION_KEY_LEN]);
static inline bool zk_is_session_key(const uint8_t *k, size_t n)
{
    return n == ZK_SESSION_KEY_LEN && k[0] == 0 && k[1] == 'z' && k[2] == 'k' && k[3] == 'S';
}
uint64_t zk_session_owner(const uint8_t *v, size_t n);

/* server_zk_apply applies an ENTRY_ZK_WRITE inside the open batch: e->out
 * gets the answer, i64 zxid (the revision after it), i32 err, then the
 * reply's record. Returns 0, or a storage error (fatal, as for every
 * entry). */
int server_zk_apply(struct server *s, struct entry *e);

/* server_zk_session_end runs before a LeaseRevoke entry is applied (an
 * expiry, a closeSession, an etcd client's revoke): when the lease holds
 * ephemeral znodes, they are deleted and their parents' child stat
 * updated (cversion, numChildren, pzxid) in one MVCC transaction, the
 * session key with them; the revoke then finds no keys left. Returns 0 or
 * a storage error. */
int server_zk_session_end(struct server *s, int64_t lease);

/* server_zk_session_begin runs before a Put entry is applied: when the
 * key is a session's record (written when a session is made, again when
 * it reconnects through another member), on a lease that exists, and the
 * store has no /zookeeper yet, /zookeeper, /zookeeper/config and
 * /zookeeper/quota are made in a revision of their own, so a client sees
 * them from its first read as on a fresh ZooKeeper. Returns 0 or a
 * storage error. */
int server_zk_session_begin(struct server *s, const uint8_t *key, size_t len, int64_t lease);

/* zk_read serves a read request (exists, getData, getChildren(2), getACL,
 * getAllChildrenNumber, getEphemerals, multiRead) from the store on the
 * core loop: i32 err, then the reply's record, are appended to |out|
 * (what it held stays in front: a caller can put a ReplyHeader's xid
 * and zxid there, and err completes it). |session| for
 * getEphemerals. Returns 0 or a storage error. */
int zk_read(mvcc_store *kv, lessor *leases, const struct zk_request *req, int64_t session,
            const struct zk_ids *who, struct arena *a, struct buf *out);

/* zk_read_shared answers, on a thread other than the store's owner (a
 * front loop), a read that may be answered there: exists, getData,
 * getChildren or getChildren2 without a watch (zk_read_shareable), from a
 * shared read at the store's current revision (mvcc_read_begin_shared:
 * everything the member has answered). The ReplyHeader (the request's xid,
 * the read's revision as zxid, err) and the reply's record are appended to
 * |out|, and *err set. Returns 1 when answered; 0 when it cannot be
 * answered here now (another type, a watch, or a store the owner is
 * changing: the owner serves it); or a storage error (|out| as it was).
 * The caller keeps the connection's FIFO order and ZooKeeper's promise
 * that a watch's event comes before the data that fired it
 * (server/front.c, "ZooKeeper reads on the front loop"). */
bool zk_read_shareable(int32_t type);
int zk_read_shared(mvcc_store *kv, const struct zk_request *req, const struct zk_ids *who,
                   struct arena *a, struct buf *out, int32_t *err);

/* The tree's figures for the four-letter words (srvr's Node count, mntr's
 * zk_znode_count, zk_ephemerals_count, zk_global_sessions,
 * zk_approximate_data_size), read on the core loop. |znodes| counts "/"
 * twice, as ZooKeeper's DataTree does (it is there under "" and "/"), so
 * a tree holds the figure ZooKeeper would show for it; it and |sessions|
 * are counts of the key index (no record is read), |ephemerals| a count
 * of the keys attached to leases (memory). |data_size| is ZooKeeper's
 * approximateDataSize, the sum of each node's path and data lengths: it
 * reads every D record, so it is -1 once that would cost more than
 * |budget| (mvcc_range_opts.budget; <= 0: no limit). */
struct zk_tree_stats {
    int64_t znodes, ephemerals, sessions, data_size;
};
int zk_tree_stats(mvcc_store *kv, lessor *leases, int64_t budget, struct zk_tree_stats *out);

/* The tree's figures kept as it changes, so srvr and mntr read them in
 * O(1) whatever the tree's size (zk_tree_stats walks the key index and,
 * for the data size, every record). They are counted once after start,
 * and again after the store was replaced by a snapshot, in steps of a
 * bounded number of keys (zk_figures_step, from the loop); every change
 * of the store moves them (zk_figures_change, from the store's change
 * observer) when its key is below the count's cursor, that is, already
 * counted: so they are always the figures of the store as it is.
 * zk_figures_stats gives them in zk_tree_stats' form once counted. */
struct zk_figures {
    bool counted;      /* the count ended: every key is below the cursor */
    struct buf cursor; /* the count's next key; empty and !counted: not begun */
    int64_t nodes;     /* D keys of depth >= 1 */
    int64_t sessions;  /* S keys */
    int64_t data_size; /* the D keys' paths and data lengths */
    bool root_d;       /* "/" has a D key (without one its path counts 1) */
};
/* zk_figures_restart forgets the figures: the next step counts again. */
void zk_figures_restart(struct zk_figures *f);
void zk_figures_free(struct zk_figures *f);
/* zk_figures_step counts up to |max_keys| more keys of |kv| (read on its
 * owner's loop); *done once the count ended. Returns 0 or a storage
 * error (the figures are then restarted). */
int zk_figures_step(struct zk_figures *f, mvcc_store *kv, size_t max_keys, bool *done);
/* zk_figures_change: a change of the store (mvcc's observer arguments). */
void zk_figures_change(struct zk_figures *f, int type, const struct mvcc_kv *kv,
                       const struct mvcc_kv *prev);
/* zk_figures_stats fills |out| (ephemerals from |leases|, as
 * zk_tree_stats) and returns true once the figures are counted; false
 * before (|out| untouched). */
bool zk_figures_stats(const struct zk_figures *f, lessor *leases, struct zk_tree_stats *out);

/* zk_is_read: the request type is answered by zk_read. */
bool zk_is_read(int32_t type);

/* zk_node_info reads |path|'s existence, mzxid and pzxid (setWatches). */
int zk_node_info(mvcc_store *kv, const uint8_t *path, size_t n, struct arena *a, bool *exists,
                 int64_t *mzxid, int64_t *pzxid);

/* zk_write_cost: what a ZooKeeper write entry (|req|, the jute request
 * of quorumzk.Write) counts against --quota-backend-bytes, as etcd's
 * quota counts a Put: ZK_WRITE_OVERHEAD (etcd's kvOverhead) plus the
 * request's bytes when it may add data (create in any mode, setData,
 * setACL, a multi with one of them); 0 for delete, check, sync, a multi of
 * those, and a multi that does not decode (it writes nothing). Only a
 * multi is decoded: the others are told by their header's type. */
#define ZK_WRITE_OVERHEAD 256
uint64_t zk_write_cost(const uint8_t *req, size_t len, struct arena *a);

/* zk_sweep_due: ZooKeeper's ContainerManager's rule for one node with
 * |num_children| children: a container that has had a child (|cversion|
 * > 0), or a TTL node whose |mtime| is more than |ttl| ms before |now_ms|
 * (a TTL of 0 never expires). Other modes never. */
bool zk_sweep_due(uint8_t mode, int32_t cversion, int32_t num_children, int64_t mtime, int64_t ttl,
                  int64_t now_ms);

/* zk_sweep_step reads at most |max_keys| znodes from |cursor| on (empty:
 * the first; the sweep's position, kept by the caller) and calls |due|
 * for each that zk_sweep_due says should go (its path, valid during the
 * call, and data version, for a deleteContainer with a version check).
 * *done once the last znode was read (|cursor| is empty again). |a|
 * holds the step's scratch. Returns 0 or a storage error. */
typedef void (*zk_sweep_fn)(const uint8_t *path, size_t n, int32_t version, void *arg);
int zk_sweep_step(mvcc_store *kv, struct arena *a, struct buf *cursor, size_t max_keys,
                  int64_t now_ms, zk_sweep_fn due, void *arg, bool *done);

/* What a change of the store means to ZooKeeper watches (the store's
 * change observer): a znode created, deleted, or its data changed (a
 * setACL rewrites the D key but changes no data: no event). */
enum zk_change { ZK_CHANGE_NONE, ZK_CHANGE_CREATED, ZK_CHANGE_DELETED, ZK_CHANGE_DATA };
/* zk_tree_change classifies a change of |kv| (|prev| its value before, or
 * NULL); the znode's path is at *path (*n bytes, inside kv's key). */
enum zk_change zk_tree_change(int type, const struct mvcc_kv *kv, const struct mvcc_kv *prev,
                              const uint8_t **path, size_t *n);

/* A ZooKeeper write's changes, one per operation in its order, as
 * ZooKeeper's DataTree fires a multi's watches sub-transaction by
 * sub-transaction: the store keeps only each node's last state of a
 * revision, so a node created and deleted, or set twice, in one multi
 * would otherwise fire nothing, or once. The write hands them to
 * server_zk_fire (zk_service.h) and its own store changes fire nothing
 * (struct server's zk_own_changes). */
struct zk_change_rec {
    enum zk_change c;
    const uint8_t *path;
    size_t n;
    /* the node's ACL and its parent's when the operation ran (a count
     * of -1: none stored, anyone may read; ZK_ACL_UNKNOWN: not known, no
     * one is told): ZooKeeper 3.8 tells a watcher of an event only when
     * its session may READ the node the event is of (its parent's for
     * NodeChildrenChanged; CVE-2024-23944's fix) */
    const struct zk_acl *acl, *parent_acl;
    int32_t n_acl, n_parent_acl;
};
#define ZK_ACL_UNKNOWN (-2)

#endif
