/* etcdfmt/etcdfmt.h: etcd's on-disk formats, translated to and from
 * quorum's store.
 *
 * etcd 3.4 keeps its state in a bbolt file (member/snap/db; the same file,
 * followed by its SHA-256, is what Maintenance/Snapshot streams and
 * `etcdctl snapshot save` writes). Its buckets:
 *
 *   key              revision key (8B main, '_', 8B sub [, 't']) -> mvccpb.KeyValue
 *   meta             consistent_index (8B BE), scheduledCompactRev and
 *                    finishedCompactRev (revision keys, 17 bytes)
 *   lease            8B BE id -> leasepb.Lease
 *   members          hex id -> JSON {"id","peerURLs","name","clientURLs"[,"isLearner"]}
 *   members_removed  hex id -> "removed"
 *   cluster          "clusterVersion" -> "3.4.0"
 *   alarm            marshaled etcdserverpb.AlarmMember -> ""
 *   auth             "enabled" (1 byte), "authRevision" (8B BE)
 *   authUsers        name -> authpb.User
 *   authRoles        name -> authpb.Role
 *
 * quorum's LMDB store keeps the same records in databases of the same
 * names (backend/backend.h) except: members ('m'|u64 -> packed
 * etcdserverpb.Member, 'r'|u64 removed: server/members.c), alarms (meta
 * "alarm/<id hex>/<type>": server/alarm.c) and the compaction revisions
 * (8-byte integers in meta). These functions translate between the two.
 *
 * Neither trusts the file it reads: a hostile bbolt file gets an error
 * (err filled, a negative code), never a crash, and nothing half-written
 * is left behind. */
#ifndef QUORUM_ETCDFMT_ETCDFMT_H
#define QUORUM_ETCDFMT_ETCDFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCDFMT_MAX_MEMBERS 16
#define ETCDFMT_MAX_URLS 8

struct etcdfmt_member {
    uint64_t id;
    char name[256];
    char peer[ETCDFMT_MAX_URLS][300];
    size_t n_peer;
    char client[ETCDFMT_MAX_URLS][300];
    size_t n_client;
    bool learner;
};

/* What a db held (import) or what was written (export). */
struct etcdfmt_db_info {
    uint64_t consistent_index;  /* meta consistent_index (0 if absent) */
    int64_t revision;           /* the newest revision in the key bucket (0 if none) */
    int64_t compact_revision;   /* finishedCompactRev (0 if none) */
    int64_t scheduled_compact;  /* scheduledCompactRev (0 if none) */
    uint64_t cluster_id;        /* 0: the db records none (etcd 3.4's does not) */
    size_t n_members;           /* members found (at most ETCDFMT_MAX_MEMBERS kept) */
    struct etcdfmt_member members[ETCDFMT_MAX_MEMBERS];
    size_t n_removed;           /* members_removed entries */
    uint64_t removed[ETCDFMT_MAX_MEMBERS];
    uint64_t total_keys;        /* records in the key bucket */
    uint64_t leases;            /* records in the lease bucket */
};

/* etcdfmt_db_import reads the bbolt file |bolt_path| (etcd's member/snap/db,
 * or a snapshot with its 32-byte digest trailer: the trailer is ignored,
 * check it first) and writes a new quorum store into |store_dir| (the
 * directory that gets data.mdb: quorum's <data-dir>/member/db; created if
 * missing; a data.mdb already there is an error, -EEXIST). The store is
 * built in a temporary file in |store_dir| and renamed into place when
 * complete and synced; on any error nothing is left. Buckets it does not
 * know are ignored. Members and removed members are translated to
 * quorum's members database, alarms to its meta records, the compaction
 * revisions to its integers. |info| (may be NULL) gets what was found.
 * Errors (negative; |err| gets the text): -ENOENT, -EEXIST, QERR_CORRUPT
 * (not a bbolt file, or a record that does not decode), -ENOMEM, -errno,
 * QERR_STORAGE. */
int etcdfmt_db_import(const char *bolt_path, const char *store_dir, struct etcdfmt_db_info *info,
                      char *err, size_t errlen);

/* ---- export ---- */

typedef struct backend backend;
typedef struct Etcdserverpb__Member Etcdserverpb__Member;

struct etcdfmt_export_opts {
    const uint64_t *learners; /* member ids that are learners (Raft's view) */
    size_t n_learners;
    uint64_t consistent_index; /* 0: the store's meta consistent_index */
    uint64_t txid;             /* the bbolt transaction id (0: 1) */
};

/* etcdfmt_db_export writes the store |be| as etcd 3.4's bbolt db to |fd|
 * (a regular file, empty; not synced), read in one LMDB read txn: the
 * buckets of etcd 3.4 (etcdfmt.h's list; cluster gets clusterVersion
 * "3.4.0"; quorum's own meta records stay behind). |o| may be NULL. Opens
 * its read txn itself, so it may run on any thread (not one holding the
 * batch). |size| (may be NULL) gets the file's length. Errors: -errno,
 * -ENOMEM, QERR_STORAGE, QERR_CORRUPT (a member record that does not
 * decode). */
int etcdfmt_db_export(backend *be, int fd, const struct etcdfmt_export_opts *o,
                      struct etcdfmt_db_info *info, uint64_t *size, char *err, size_t errlen);

/* etcdfmt_member_json writes |m| as etcd 3.4's members bucket value (Go's
 * encoding/json of membership.Member). The length, or -ENOSPC. */
int etcdfmt_member_json(const Etcdserverpb__Member *m, bool learner, char *out, size_t cap);

/* ---- status ---- */

/* What `etcdctl snapshot status` reports of a db. */
struct etcdfmt_status {
    uint32_t hash;      /* crc32c over bucket names, keys and values in order */
    int64_t revision;   /* main revision of the key bucket's last key */
    uint64_t total_key; /* records in every top bucket */
    uint64_t total_size; /* pages in use * page size (bbolt's tx.Size()) */
};

/* etcdfmt_status computes it as etcd 3.4's snapshot.Status does: bbolt's
 * tx.Check first (its errors: "snapshot file integrity check failed. N
 * errors found.\n..."), then the hash. The file may carry a digest
 * trailer (it is past the db and not read). Errors: QERR_CORRUPT with
 * bbolt's or that text in |err|, -errno. */
int etcdfmt_status(const char *path, struct etcdfmt_status *st, char *err, size_t errlen);

#endif
