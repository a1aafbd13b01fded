/* wal/wal.h: the write-ahead log of Raft entries and hard state, and Raft
 * snapshots on disk.
 *
 * Modelled on etcd's server/storage/wal and snap packages.
 *
 * LAYOUT
 *
 *   <data-dir>/member/wal/%016llx-%016llx.wal   segments: sequence, first index
 *   <data-dir>/member/snap/%016llx-%016llx.snap snapshots: term, index
 *
 * With a dedicated directory for the segments (etcd's --wal-dir,
 * wal_options.wal_dir) they live there, directly, and the snapshot files
 * stay in <data-dir>/member/snap, as etcd keeps its .snap files.
 *
 * A segment is preallocated (posix_fallocate, 64 MiB by default) so appends
 * do not grow the file; the unwritten rest reads as zeros. When a save does
 * not fit in what is left, the WAL cuts: it fdatasyncs the current segment,
 * writes the next one's header to "<name>.tmp", fsyncs it, renames it into
 * place and fsyncs the directory. So every segment but the last is complete
 * and synced, and a segment file either exists with its header or not at
 * all. A save larger than a whole segment is still written (the file grows).
 *
 * RECORDS (all integers little-endian)
 *
 *   u32 len     bytes of type + payload (not counting padding), >= 1
 *   u32 crc     CRC-32C (base/crc32c.h) of the 4 len bytes, then type +
 *               payload + padding (everything but the crc itself)
 *   u8  type    enum wal_record_type
 *   payload     len - 1 bytes
 *   padding     zeros up to the next multiple of 8 bytes
 *
 * Every record starts 8-byte aligned. The CRC is per record, seeded with 0
 * (not chained as etcd's is): a record can be checked on its own, which is
 * what lets recovery ask "does any valid record follow this bad one?". Order
 * is protected by the indexes inside the records and the segment header.
 *
 *   SEGMENT  (1): u32 magic 0x4c415751 ("QWAL"), u32 version 1,
 *                 u64 seq, u64 first_index. First record of every segment.
 *   METADATA (2): u64 node_id, u64 cluster_id. Second record of every segment.
 *   HARD_STATE (3): u64 term, u64 vote, u64 commit.
 *   ENTRY    (4): u64 term, u64 index, u8 entry type, data (the rest).
 *   SNAPSHOT (5): u64 index, u64 term, u8 flags (WAL_SNAP_DROP_ENTRIES).
 *
 * After SEGMENT and METADATA each new segment re-states the current hard
 * state and the latest snapshot marker (without the drop flag), so removing
 * older segments (wal_release_to) loses nothing.
 *
 * Replay: the last HARD_STATE wins. An ENTRY with index <= the last one held
 * drops every held entry at or after its index (a new leader overwrote an
 * uncommitted tail). A SNAPSHOT marker with WAL_SNAP_DROP_ENTRIES drops every
 * held entry (a received snapshot: the core's log restarts after it). At the
 * end the newest snapshot file whose (index, term) matches a marker in the
 * WAL is loaded, held entries at or below its index are dropped, and the rest
 * must continue at index + 1 without gaps (else QERR_CORRUPT).
 *
 * Segment chain: sequence numbers must be consecutive, and a segment's first
 * index must be one past the last index the previous segments end at (the
 * index of their last ENTRY, or of a dropping SNAPSHOT marker). That catches
 * a segment that lost whole records at its end, which its own records alone
 * could not show. Leftover "*.tmp" segments (a cut that crashed) are deleted.
 *
 * RECOVERY RULE (wal_open)
 *
 * A record is valid if its header fits, len >= 1, the padded record fits in
 * the file, the type is known and the CRC matches. Reading a segment stops
 * at the first spot that is not a valid record (a bad record, a partial one,
 * or an all-zero header = the preallocated tail). Then:
 *   - if a valid record starts at any 8-byte aligned offset after that spot
 *     in the same file, or the file is not the last segment, it is corruption
 *     in the middle of the log: wal_open fails with QERR_CORRUPT and an error
 *     text naming the file and the byte offset. Nothing is changed on disk.
 *   - otherwise (last segment, nothing valid after it) it is a torn tail: the
 *     write that was in flight when the process died. The file is truncated
 *     at the end of the last valid record, preallocated again and synced.
 * So a flipped bit in the very last record makes it torn (it is dropped); it
 * was never acknowledged unless its wal_sync returned, and a storage device
 * that flips bits in synced data and nothing after it is indistinguishable
 * from a torn write. A flipped bit anywhere before a valid record is refused.
 * Caveat: a crash in the middle of a large unsynced write can in principle
 * leave later pages written and earlier ones not; that unsynced data then
 * looks like corruption and wal_open refuses (fail-safe, never data loss):
 * inspect it with `quorum-dump wal` and truncate by hand if it is the tail.
 *
 * USAGE (the server's Ready loop; see THE READY LOOP in raft/raft.h)
 *
 *   start:   if (!wal_exist(dir)) wal_create(...), empty storage;
 *            else wal_open(..., &st, err): log |err| if st.repaired;
 *            wal_state_storage(&st, &rs); rs.applied = consistent index;
 *            raft_new(cfg, &rs, ...); wal_state_free(&st).
 *   per pass (worker thread): if rd.snapshot: wal_snap_save(dir, rd.snapshot)
 *            and wal_save_snapshot(w, index, term, WAL_SNAP_DROP_ENTRIES);
 *            wal_save(w, rd.hs_changed ? &rd.hs : NULL, rd.entries,
 *            rd.n_entries); wal_sync(w); then (loop thread) send, apply,
 *            raft_advance.
 *   compaction: after raft_compact, wal_snap_save the snapshot (index =
 *            applied, its term, the membership), wal_save_snapshot(w, index,
 *            term, 0), wal_sync, then wal_purge(w, index, max_wals) (or
 *            wal_release_to(w, index) to drop every covered segment) and
 *            wal_snap_purge(dir, max_snapshots).
 *
 * THREADING: a struct wal is used by one thread at a time. wal_save,
 * wal_save_snapshot, wal_sync and wal_release_to may run on a worker thread
 * (uv_queue_work) as long as no other thread touches the same wal meanwhile.
 * Functions keep no global state of their own (base/crc32c builds its table
 * lazily on first use: call crc32c_update once at start-up before running
 * saves on a worker thread, or make that table static in base/).
 *
 * ERRORS: 0 or negative: -errno from the system (-ENOENT, -EEXIST, -EIO,
 * -ENOSPC, -ENOMEM, -EINVAL), QERR_CORRUPT for bad data on disk. Functions
 * that take |err| (may be NULL) write a one-line explanation there on
 * failure (file and offset for corruption) for the caller to log.
 */
#ifndef QUORUM_WAL_WAL_H
#define QUORUM_WAL_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "raft/raft.h"

#define WAL_SEGMENT_SIZE_DEFAULT (64u * 1024 * 1024)
#define WAL_ERR_LEN 512

enum wal_record_type {
    WAL_REC_SEGMENT = 1,
    WAL_REC_METADATA = 2,
    WAL_REC_HARD_STATE = 3,
    WAL_REC_ENTRY = 4,
    WAL_REC_SNAPSHOT = 5,
};

/* Snapshot marker flag: a received snapshot, every held entry is dropped. */
#define WAL_SNAP_DROP_ENTRIES 1u

struct wal;

struct wal_options {
    const char *data_dir; /* <data-dir>; the WAL lives in <data-dir>/member/wal */
    const char *wal_dir;  /* NULL or "": as above; else the segments' directory */
    size_t segment_size;  /* preallocation and cut size; 0 = 64 MiB */
    uint64_t node_id;     /* wal_create: written to METADATA; wal_open: ignored */
    uint64_t cluster_id;
    /* written_ahead: the space appends go to is written with zeros before
     * they come (the open segment's rest at wal_open, the next segment on
     * a thread of its own: see "SPACE WRITTEN AHEAD" in wal.c), so that a
     * sync flushes the appended data only. Off: preallocated only. */
    bool written_ahead;
};

/* What wal_open read back. Owns all its memory: free with wal_state_free.
 * Pointers inside (entries[i].data, snapshot.data) live until then. */
struct wal_state {
    uint64_t node_id;
    uint64_t cluster_id;
    struct raft_hard_state hs;
    bool has_snapshot;
    struct raft_snapshot snapshot; /* valid if has_snapshot; data owned */
    struct raft_entry *entries;    /* after the snapshot, contiguous */
    size_t n_entries;
    bool repaired; /* wal_open cut a torn tail; its |err| says where */
    /* private */
    void **blocks;
    size_t n_blocks;
};

/* wal_exist tells whether <data-dir>/member/wal holds at least one segment;
 * wal_exist_dir whether the directory |wal_dir| does. */
bool wal_exist(const char *data_dir);
bool wal_exist_dir(const char *wal_dir);

/* wal_create makes <data-dir>/member/wal (or wal_dir; and parents) with a first segment
 * holding SEGMENT (seq 0, first index 1) and METADATA, synced, and returns
 * the open WAL in |out| (free with wal_close). Errors: -EEXIST (a segment is
 * already there), -errno. */
int wal_create(const struct wal_options *opts, struct wal **out, char *err, size_t errlen);

/* wal_open reads every segment, repairs a torn tail (see RECOVERY RULE),
 * loads the matching snapshot file and fills |st| (caller's struct, owned
 * contents: wal_state_free). On success the WAL is open for appending after
 * the last valid record; if a torn tail was cut, st->repaired is set and
 * |err| says where (log it). Errors: -ENOENT (no WAL), QERR_CORRUPT (with the
 * file and offset in |err|), -ENOMEM, -errno. On error |st| is empty. */
int wal_open(const struct wal_options *opts, struct wal **out, struct wal_state *st, char *err,
             size_t errlen);

/* wal_state_storage fills |out| for raft_new from |st|: pointers borrow
 * |st| (keep it until raft_new returns). out->applied is left 0: the caller
 * sets it (the backend's consistent index). */
void wal_state_storage(const struct wal_state *st, struct raft_storage *out);

/* wal_state_free releases what |st| owns and zeroes it. */
void wal_state_free(struct wal_state *st);

/* wal_close closes the files (no sync) and frees |w|. NULL is allowed. */
void wal_close(struct wal *w);

/* wal_save appends |n| entries (in index order) and then the hard state
 * |hs| (NULL: unchanged), in one write(), without syncing. If the records do
 * not fit in the current segment it first cuts a new one (which syncs the
 * old one). Nothing is retained: |hs| and |ents| are the caller's on return.
 * Errors: -ENOMEM, -ENOSPC, -EDQUOT, -EIO, -errno.
 *
 * -ENOSPC and -EDQUOT (the disk refused to allocate: a write, or a new
 * segment's preallocation) leave the WAL as it was before the call: the
 * same save may be tried again later, and succeeds once there is space
 * (whatever part of the refused write reached the file is zeroed first).
 * Any other error, and any failed sync (a cut's fdatasync, the directory's
 * fsync), breaks the WAL for good: see wal_failed. */
int wal_save(struct wal *w, const struct raft_hard_state *hs, const struct raft_entry *ents,
             size_t n);

/* wal_save_snapshot appends a snapshot marker (|index|, |term|, |flags|:
 * WAL_SNAP_DROP_ENTRIES for a snapshot received from the leader, 0 for one
 * this node took with raft_compact), without syncing. Write the snapshot
 * file first (wal_snap_save), then the marker, then wal_sync. Errors: as
 * wal_save. */
int wal_save_snapshot(struct wal *w, uint64_t index, uint64_t term, unsigned flags);

/* wal_sync makes everything saved so far durable: one fdatasync. Errors:
 * -EIO, -errno (then the WAL is broken: the data may not be on disk). A
 * sync slower than wal_warn_sync_ns (1 s, etcd's) is logged as etcd's
 * "slow fdatasync" line with "took" and "expected-duration". */
int wal_sync(struct wal *w);
extern uint64_t wal_warn_sync_ns;

/* wal_release_to unlinks segments all of whose entries are at or below
 * |index| (a snapshot index that is durable): every segment but the last
 * whose successor's first index is <= |index| + 1. Errors: -errno. */
int wal_release_to(struct wal *w, uint64_t index);

/* wal_failed is the error of the first failed write or sync of |w| (0 if
 * none). Once a write (wal_save, wal_save_snapshot, a cut) has failed other
 * than for space, or an fdatasync or fsync has failed, every later
 * wal_save, wal_save_snapshot and wal_sync answers that error without
 * touching the disk: a failed fdatasync is never tried again as if a second
 * one could make the data safe (the kernel may have dropped the dirty pages
 * it could not write: "fsyncgate"), and a failed write leaves the segment's
 * end unknown. The way back is wal_close and wal_open, whose recovery reads
 * what the file really holds. */
int wal_failed(const struct wal *w);

/* wal_purge is etcd's WAL purge (--max-wals): while more than |max_files|
 * segment files exist, the oldest goes if every entry in it is at or below
 * |index| (the durable snapshot's index: etcd releases the lock of every
 * segment before the one holding it); it stops at the first segment still
 * needed. |max_files| 0 keeps every file. Returns the number of files
 * removed, or -errno. */
int wal_purge(struct wal *w, uint64_t index, size_t max_files);

/* wal_no_sync (--unsafe-no-fsync): wal_sync and the syncs of a cut do
 * nothing; data reaches the disk when the kernel writes it back. Set
 * before any WAL is opened. */
extern bool wal_no_sync;

/* wal_last_index is the index of the last entry saved (0 if none known). */
uint64_t wal_last_index(const struct wal *w);

/* wal_wait_ahead waits until the next segment written ahead (wal_options'
 * written_ahead) is made and tells how that went: 0, or -errno (the cuts
 * then preallocate). Tests only: a member never waits for it. */
int wal_wait_ahead(struct wal *w);

/* wal_segment_count is the number of segment files (tests, metrics). */
size_t wal_segment_count(const struct wal *w);

/* ---- snapshots: <data-dir>/member/snap/%016llx-%016llx.snap (term, index)
 *
 * File: u32 magic 0x504e5351 ("QSNP"), u32 version 1, u64 term, u64 index,
 * u32 n_voters, u32 n_learners, u64 ids (voters then learners), u64 data
 * length, data, u32 CRC-32C of everything before it. Written atomically:
 * "<name>.tmp", write, fsync, rename, fsync of the directory. */

/* wal_snap_save writes |snap| (copied to disk; the caller keeps it).
 * Errors: -EINVAL (more members than RAFT_MAX_MEMBERS), -errno. */
int wal_snap_save(const char *data_dir, const struct raft_snapshot *snap);

/* wal_snap_load reads the snapshot at (|term|, |index|) into |out|; out->data
 * is malloc'd and the caller frees it. Errors: -ENOENT, QERR_CORRUPT (bad
 * magic, size or CRC), -ENOMEM, -errno. */
int wal_snap_load(const char *data_dir, uint64_t term, uint64_t index, struct raft_snapshot *out);

/* wal_snap_purge unlinks all snapshot files but the |keep| newest (by
 * index), and stray .tmp files; |keep| 0 keeps every snapshot (etcd's
 * --max-snapshots 0) and removes only the .tmp files. Errors: -errno. */
int wal_snap_purge(const char *data_dir, size_t keep);

/* ---- offline inspection (quorum-dump) ---- */

/* One record as wal_dump sees it. Pointers live during the callback. */
struct wal_record {
    const char *path; /* segment file */
    uint64_t offset;  /* byte offset of the record in it */
    uint8_t type;     /* enum wal_record_type */
    uint32_t len;     /* type + payload bytes */
    union {
        struct {
            uint32_t version;
            uint64_t seq, first_index;
        } segment;
        struct {
            uint64_t node_id, cluster_id;
        } meta;
        struct raft_hard_state hs;
        struct raft_entry entry;
        struct {
            uint64_t index, term;
            unsigned flags;
        } snap;
    } u;
};
typedef int (*wal_record_fn)(const struct wal_record *rec, void *arg);

/* wal_dump calls |fn| for every valid record of every segment in order,
 * without changing anything on disk. A non-zero return from |fn| stops and
 * is returned. Where a segment stops early it reports, in |err|, either a
 * torn tail (returns 1: what wal_open would repair) or corruption (returns
 * QERR_CORRUPT: what wal_open would refuse). Errors: -ENOENT, -errno. */
int wal_dump(const char *data_dir, wal_record_fn fn, void *arg, char *err, size_t errlen);
/* wal_dump_dir: the same for the segments in the directory |wal_dir|. */
int wal_dump_dir(const char *wal_dir, wal_record_fn fn, void *arg, char *err, size_t errlen);

/* wal_record_type_name is a static name like "entry" ("unknown" if none). */
const char *wal_record_type_name(int type);

/* wal_metrics_register registers etcd's etcd_disk_wal_fsync_duration_seconds
 * (every wal_sync, on whichever thread syncs) and
 * etcd_disk_wal_write_bytes_total (base/metrics.h); without it they are
 * not kept. */
void wal_metrics_register(void);

#endif
