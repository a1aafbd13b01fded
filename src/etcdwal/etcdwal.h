/* etcdwal/etcdwal.h: a reader of etcd 3.4's Raft log and snapshot files, for
 * the one-time conversion of an etcd data directory (server/etcd_import.c).
 * Read only: nothing here writes to etcd's files.
 *
 * THE WAL: <member>/wal/%016x-%016x.wal (sequence, index of the first entry
 * the segment may hold). A segment is a run of frames:
 *
 *   u64 little-endian length word: the low 56 bits are the record's length;
 *       if the top bit is set, bits 56..58 are the padding bytes that follow
 *       the record (up to an 8-byte boundary)
 *   record   a walpb.Record {type, crc, data} (proto/walpb.proto)
 *   padding
 *
 * A zero length word is the end of the segment (etcd preallocates 64 MB
 * of zeros). Record types: 1 metadata (etcdserverpb.Metadata: NodeID,
 * ClusterID), 2 entry (raftpb.Entry), 3 state (raftpb.HardState), 4 crc,
 * 5 snapshot (walpb.Snapshot: index, term). Every record's crc is the
 * CRC-32C (Castagnoli) of the data of every record before it and its own,
 * chained across segments; a crc record (each segment's first) restates
 * the running value, and the reader re-seeds there (after checking it, but
 * for the very first, which is 0).
 *
 * A record that ends past the end of the last segment, or one that does
 * not decode or check whose bytes hold a 512-byte sector of zeros, is the
 * torn write of a process that died (etcd's decoder isTornEntry and its
 * Repair): reading stops there and |torn| is set. Anything else that does
 * not check (a CRC mismatch, a tear in a segment that is not the last, an
 * unknown record type, an entry index out of order) is corruption: an
 * error naming the file and byte offset.
 *
 * Which segments: etcd 3.4 opens its log at the newest snapshot (the .snap
 * file), so the reader takes the last segment whose first index is at or
 * below the snapshot's index and every one after it (sequence numbers must
 * follow each other), and requires a snapshot record with the snapshot's
 * index and term (etcd's ErrSnapshotNotFound otherwise). Entries as etcd's
 * ReadAll: one at an index at or below the snapshot's is skipped, a later
 * one replaces every held entry from its index on (a new leader overwrote
 * an uncommitted tail); the last state record wins; every metadata record
 * must be the same.
 *
 * SNAPSHOTS: <member>/snap/%016x-%016x.snap (term, index), a
 * snappb.snapshot {crc, data} whose crc is the CRC-32C of data, and data a
 * raftpb.Snapshot: metadata (index, term, conf state) and, in 3.4, the v2
 * store as JSON (the cluster's members under /0/members). The newest file
 * that reads back is used, as etcd's snap.Load (a broken one is skipped;
 * etcd renames it *.broken, this reader leaves it). No .snap file: the log
 * is read from its start (index 0, term 0).
 *
 * Errors are negative: -ENOENT (no WAL), QERR_CORRUPT (|err| says what and
 * where), -ENOMEM, -errno. */
#ifndef QUORUM_ETCDWAL_ETCDWAL_H
#define QUORUM_ETCDWAL_ETCDWAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCDWAL_ERR_LEN 512
#define ETCDWAL_MAX_MEMBERS 16
#define ETCDWAL_MAX_URLS 8
/* etcd 3.4.23's limit on one record (ErrMaxWALEntrySizeLimitExceeded) */
#define ETCDWAL_MAX_RECORD (10u * 1024 * 1024)

enum etcdwal_record_type {
    ETCDWAL_REC_METADATA = 1,
    ETCDWAL_REC_ENTRY = 2,
    ETCDWAL_REC_STATE = 3,
    ETCDWAL_REC_CRC = 4,
    ETCDWAL_REC_SNAPSHOT = 5,
};

/* raftpb.EntryType */
enum etcdwal_entry_type {
    ETCDWAL_ENTRY_NORMAL = 0,
    ETCDWAL_ENTRY_CONF_CHANGE = 1,
    ETCDWAL_ENTRY_CONF_CHANGE_V2 = 2,
};

struct etcdwal_entry {
    uint64_t term, index;
    int type;      /* enum etcdwal_entry_type */
    uint8_t *data; /* owned by the state */
    size_t len;
};

struct etcdwal_conf {
    uint64_t voters[ETCDWAL_MAX_MEMBERS];
    uint64_t learners[ETCDWAL_MAX_MEMBERS];
    size_t n_voters, n_learners;
};

/* A snapshot file's contents. */
struct etcdwal_snap {
    uint64_t index, term;
    struct etcdwal_conf conf;
    uint8_t *data; /* the v2 store JSON (malloc'd; NULL if empty) */
    size_t len;
};

/* What a member directory's log says. Free with etcdwal_state_free. */
struct etcdwal_state {
    uint64_t node_id, cluster_id;  /* the metadata record */
    uint64_t term, vote, commit;   /* the last state record (0s if none) */
    bool has_snap;                 /* a .snap file was used */
    struct etcdwal_snap snap;      /* index, term 0 without one */
    struct etcdwal_entry *entries; /* after snap.index, contiguous */
    size_t n_entries;
    bool torn;         /* the last segment ended in a torn write */
    char torn_at[300]; /* where (file and offset), for a log line */
};

/* etcdwal_is_etcd tells whether <member>/wal holds etcd-format segments
 * (a name %016x-%016x.wal whose first frame is a crc record). */
bool etcdwal_is_etcd(const char *member_dir);
/* etcdwal_is_etcd_dir: the same for the segments in |wal_dir| (etcd's
 * --wal-dir). */
bool etcdwal_is_etcd_dir(const char *wal_dir);

/* etcdwal_read reads <member_dir>/snap and <member_dir>/wal as described
 * above into |st| (the caller's; emptied first). On error |st| is empty. */
int etcdwal_read(const char *member_dir, struct etcdwal_state *st, char *err, size_t errlen);
/* etcdwal_read_dirs: the same with the segments in |wal_dir| (etcd's
 * --wal-dir; NULL or "": <member_dir>/wal). */
int etcdwal_read_dirs(const char *member_dir, const char *wal_dir, struct etcdwal_state *st,
                      char *err, size_t errlen);

void etcdwal_state_free(struct etcdwal_state *st);

/* ---- the pieces, for tests and the fuzz target ---- */

/* A reader over one or more segments in order. */
struct etcdwal_reader {
    uint32_t crc;         /* the running CRC */
    bool seeded;          /* a crc record was seen */
    uint64_t start_index; /* the snapshot the log is read from */
    uint64_t start_term;
    bool match; /* its snapshot record was seen */
    bool have_meta;
    uint8_t meta[64]; /* the metadata record's data, to compare */
    size_t meta_len;
    struct etcdwal_state *st; /* where entries, state, metadata go */
    size_t cap_entries;
};

/* etcdwal_decode_segment reads the frames of one segment (|p|, |n| bytes;
 * |name| for errors) into r->st. |last|: a torn tail is allowed (it ends
 * the log and sets st->torn). Returns 0 or an error as above. */
int etcdwal_decode_segment(struct etcdwal_reader *r, const uint8_t *p, size_t n, bool last,
                           const char *name, char *err, size_t errlen);

/* etcdwal_snap_decode decodes a .snap file's bytes. out->data is malloc'd.
 * Errors: QERR_CORRUPT (empty, undecodable, CRC mismatch), -ENOMEM. */
int etcdwal_snap_decode(const uint8_t *p, size_t n, struct etcdwal_snap *out, char *err,
                        size_t errlen);
void etcdwal_snap_free(struct etcdwal_snap *s);

/* A member as etcd records it (the v2 store, a conf change's context). */
struct etcdwal_member {
    uint64_t id;
    char name[256];
    char peer[ETCDWAL_MAX_URLS][300];
    size_t n_peer;
    char client[ETCDWAL_MAX_URLS][300];
    size_t n_client;
};

/* etcdwal_v2_members lists the members of a 3.4 snapshot's v2 store JSON
 * (/0/members/<hex id>/raftAttributes and /attributes), at most |max|.
 * Returns the count or QERR_CORRUPT (not the v2 store's JSON). */
int etcdwal_v2_members(const uint8_t *json, size_t len, struct etcdwal_member *out, size_t max);

/* etcdwal_member_json decodes etcd's membership.Member JSON (a conf
 * change's context: {"id":..,"peerURLs":[..],"name":"..","clientURLs":[..]}).
 * Errors: QERR_CORRUPT. */
int etcdwal_member_json(const uint8_t *json, size_t len, struct etcdwal_member *out);

#endif
