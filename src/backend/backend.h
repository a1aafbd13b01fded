/* backend/backend.h: the LMDB environment under quorum's state.
 *
 * One environment (a single data.mdb under <data-dir>/member/db, like
 * etcd's member/snap/db) with named databases. Writes are grouped: one
 * LMDB write transaction ("batch") spans every request applied in one loop
 * pass and is committed once, so concurrent writes share one sync.
 *
 * Threading: batches are begun and committed on one thread. Read
 * transactions (MDB_NOTLS) may be opened anywhere and any number of times,
 * but never while the same thread holds the batch open.
 *
 * Layout: the environment is opened with MDB_NOSUBDIR on the file
 * <dir>/data.mdb (lock file <dir>/data.mdb-lock), flags MDB_NOTLS (and
 * MDB_NOSYNC when no_sync). Database names follow etcd's buckets: "key",
 * "meta", "lease", "auth", "authUsers", "authRoles", "members".
 *
 * Caveats (as LMDB's own): a long-lived read transaction pins old pages and
 * makes the file grow; end them promptly.
 */
#ifndef QUORUM_BACKEND_BACKEND_H
#define QUORUM_BACKEND_BACKEND_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;

enum backend_db {
    BACKEND_DB_KEY,     /* revision key -> serialized mvccpb.KeyValue */
    BACKEND_DB_META,    /* name -> value: consistent_index, compaction revisions, term */
    BACKEND_DB_LEASE,   /* lease id -> lease record */
    BACKEND_DB_AUTH,    /* auth state */
    BACKEND_DB_MEMBERS, /* cluster membership */
    BACKEND_DB_AUTH_USERS, /* user name -> authpb.User (auth/) */
    BACKEND_DB_AUTH_ROLES, /* role name -> authpb.Role (auth/) */
    BACKEND_DB__COUNT,
};

struct backend_options {
    const char *dir;   /* directory holding data.mdb; created if missing */
    size_t map_size;   /* LMDB map size: the most the file may grow to; 0 = 8 GiB */
    bool no_sync;      /* commit without fsync (only when a WAL covers it) */
    bool no_meta_sync; /* MDB_NOMETASYNC: one sync per commit (data pages);
                          the meta page reaches the disk with the next
                          commit or backend_sync. Integrity is kept; an
                          OS crash may undo the last commit, which the WAL
                          replays. */
};

/* backend_open opens or creates the environment. Errors: -errno, QERR_STORAGE. */
int backend_open(const struct backend_options *opts, backend **out);
void backend_close(backend *be);

/* backend_replace_file swaps the database file for |path| (a copy of it,
 * e.g. a compacted one from mdb_env_copy2 with MDB_CP_COMPACT, in the same
 * directory): it closes the environment, renames |path| over data.mdb,
 * syncs the directory and reopens the environment in the same struct, so
 * every holder of |be| keeps working (the dbi handles stay the same). No
 * batch and no read transaction may be open: read txns of the old
 * environment (mvcc's spares: mvcc_release_reads) must be gone. On a failed
 * rename the old file is reopened and the error returned. Errors: -EBUSY,
 * -errno, QERR_STORAGE (then |be| has no environment: close it).
 * The replaced file stays open until backend_take_retired's caller closes
 * it (or the next replace, or backend_close): that close frees its blocks,
 * which takes time in proportion to its size, best spent off the loop. */
int backend_replace_file(backend *be, const char *path);

/* backend_take_retired hands over the descriptor of the file the last
 * backend_replace_file replaced (-1 if none); the caller closes it. */
int backend_take_retired(backend *be);

/* ---- Writes ----
 *
 * Every write to the store goes through these three, on the batch (|txn| is
 * backend_batch_txn), so that an online defragmentation (below) can record
 * what changes while it copies. They answer LMDB's codes (0, MDB_NOTFOUND,
 * MDB_KEYEXIST, MDB_MAP_FULL, ...) as mdb_put, mdb_del and mdb_cursor_del
 * do; map them with backend_err. backend_cursor_del deletes the record
 * under |mc|, a cursor on database |db|. */
int backend_put(backend *be, MDB_txn *txn, enum backend_db db, MDB_val *k, MDB_val *v,
                unsigned flags);
int backend_del(backend *be, MDB_txn *txn, enum backend_db db, MDB_val *k);
int backend_cursor_del(backend *be, MDB_cursor *mc, enum backend_db db);

/* ---- Online defragmentation ----
 *
 * A defragmentation that copies on another thread while the store keeps
 * taking writes, and then catches the copy up with those writes:
 *
 *   backend_defrag_begin   loop thread, no batch open: opens a read txn on
 *                          the committed state and starts recording every
 *                          write made through backend_put/del from then on.
 *   backend_defrag_copy    any thread, once: rewrites that state into |path|
 *                          record by record (as backend_rewrite_copy), synced.
 *   backend_defrag_take    loop thread, no batch open: moves the writes
 *                          recorded so far into the job (recording goes on).
 *   backend_defrag_replay  any thread: writes what take moved into the copy,
 *                          synced. take+replay may repeat, so that the last
 *                          step has little to do.
 *   backend_defrag_finish  loop thread, no batch and no read txn open (as
 *                          backend_replace_file): writes the rest into the
 *                          copy, syncs it and swaps it in. Frees the job.
 *   backend_defrag_cancel  any time the job is not in a worker's hands:
 *                          frees the job and removes the copy.
 *
 * Writes are blind puts and deletes, so replaying them in order over the
 * snapshot gives the store's state. A batch aborted while recording drops
 * its records too. If the file is replaced otherwise meanwhile (a snapshot
 * installed) or the backend closes, the job goes stale
 * (backend_defrag_stale): the copy is of a store that is gone; cancel it.
 * One job per backend at a time (-EBUSY). Errors: QERR_STORAGE,
 * QERR_NO_SPACE, -ENOMEM, -errno. */
typedef struct backend_defrag backend_defrag;

int backend_defrag_begin(backend *be, const char *path, backend_defrag **out);
int backend_defrag_copy(backend_defrag *job);
size_t backend_defrag_pending(const backend_defrag *job); /* bytes recorded since last take */
void backend_defrag_take(backend_defrag *job);
int backend_defrag_replay(backend_defrag *job);
int backend_defrag_finish(backend_defrag *job);
void backend_defrag_cancel(backend_defrag *job);
bool backend_defrag_stale(const backend_defrag *job);

/* backend_rewrite_copy writes every database, record by record in key
 * order, into a new environment file |path| (synced), so each page is as
 * full as it can be: a defragmentation that also packs the half-empty pages
 * deletions leave (mdb_env_copy2's compaction only drops free pages), like
 * etcd's bbolt defrag. Reads one consistent snapshot; writers go on. May
 * run on any thread. Errors: QERR_STORAGE, QERR_NO_SPACE, -errno. */
int backend_rewrite_copy(backend *be, const char *path);

MDB_env *backend_env(backend *be);
MDB_dbi backend_dbi(backend *be, enum backend_db db);

/* backend_reserve keeps |bytes| of disk allocated past the end of
 * data.mdb (fallocate with FALLOC_FL_KEEP_SIZE: the file's size, and so
 * the quota, do not change), topping it up when less than half is left.
 * LMDB grows the file by writing pages past its end; with the reserve
 * those writes need no new blocks, so a full disk shows here, outside any
 * commit, instead of failing a commit whose entries were already applied
 * and answered. Call it after a commit. Errors: -ENOSPC, -EDQUOT (the
 * caller stops taking writes until a later call succeeds), -errno. A file
 * system without the flag, or a tmpfs (whose blocks are memory), answers 0
 * and has no reserve (logged once). */
int backend_reserve(backend *be, uint64_t bytes);

/* backend_sync flushes everything committed, the meta page included
 * (mdb_env_sync): before the WAL drops entries the store holds. Errors:
 * -errno (-EIO, -ENOSPC), QERR_STORAGE.
 *
 * A commit or sync the disk failed (a system error) is final for this open backend: every later
 * backend_batch_begin, backend_batch_commit and backend_sync answers the
 * same error (a failed fdatasync is never retried as if the data were
 * safe: the kernel may have dropped the pages it could not write). Close
 * it and reopen: LMDB's last good meta page is what the file holds. */
int backend_sync(backend *be);

/* backend_batch_begin opens the write transaction; one at a time.
 * Errors: -EBUSY if one is open, QERR_STORAGE, an earlier commit's or
 * sync's error (see backend_sync). */
int backend_batch_begin(backend *be);
/* backend_batch_txn is the open write transaction (NULL if none). Valid
 * until backend_batch_commit/abort. */
MDB_txn *backend_batch_txn(backend *be);
/* backend_batch_commit commits (and syncs, unless no_sync): durable on 0.
 * Errors: -errno from the disk (-ENOSPC, -EIO: final, see backend_sync),
 * QERR_STORAGE, QERR_NO_SPACE (map full). On error the batch is gone and
 * the caller must treat the in-memory state built on it as lost. */
int backend_batch_commit(backend *be);
void backend_batch_abort(backend *be);

/* backend_read_begin opens a read-only transaction; end it with
 * backend_read_end. Errors: QERR_STORAGE. */
int backend_read_begin(backend *be, MDB_txn **out);
void backend_read_end(MDB_txn *txn);

/* Meta values are 8-byte big-endian integers under a name. get answers
 * -ENOENT when absent. put needs the batch open. txn may be NULL in get to
 * read through a fresh read txn (or the batch when open). */
int backend_meta_get(backend *be, MDB_txn *txn, const char *name, uint64_t *v);
int backend_meta_put(backend *be, const char *name, uint64_t v);
/* backend_file_meta reads meta value |name| from the database file |path|
 * (not one open here, e.g. a received copy), read-only. Errors: -ENOENT (no
 * such value or no meta database), -errno, QERR_STORAGE, QERR_CORRUPT. */
int backend_file_meta(const char *path, const char *name, uint64_t *v);

/* backend_size is the size of the database file in bytes; backend_size_in_use
 * is the bytes of pages in use (what etcd reports as dbSizeInUse). */
uint64_t backend_size(backend *be);
uint64_t backend_size_in_use(backend *be);

/* backend_changes counts the batch commits and file swaps so far (from 1):
 * the file's size changes only with one, so a caller on the batch's
 * thread reads it again (a stat) only when this moved. */
uint64_t backend_changes(const backend *be);

/* backend_metrics_register registers etcd's
 * etcd_disk_backend_commit_duration_seconds: every batch commit, its sync
 * included (base/metrics.h). */
void backend_metrics_register(void);

/* backend_err maps an LMDB return code (from mdb_get/mdb_put/... on
 * backend_batch_txn or a read txn) to quorum's: 0 for 0, QERR_NO_SPACE for
 * MDB_MAP_FULL, -errno for a system error (-ENOMEM, -EBUSY, and from a
 * commit -ENOSPC, -EIO, -EDQUOT: the disk's own answer), QERR_STORAGE for
 * any other LMDB code. It does not
 * map MDB_NOTFOUND specially: check for it before calling. */
int backend_err(int rc);

/* backend_last_rc is the LMDB code behind the last error backend_err
 * mapped on this thread (0 if none yet), so that a storage error can be
 * reported with its cause: mdb_strerror(backend_last_rc()). */
int backend_last_rc(void);

#endif
