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

#endif
