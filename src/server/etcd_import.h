/* server/etcd_import.h: the one-time conversion of an etcd 3.4 member
 * directory into quorum's (etcd_import.c; docs/migrate.md). */
#ifndef QUORUM_SERVER_ETCD_IMPORT_H
#define QUORUM_SERVER_ETCD_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "raft/raft.h"

/* server_etcd_import looks at <data_dir>/member. If it is an etcd 3.4
 * member directory (member/snap/db and etcd-format segments in
 * member/wal), it converts it: quorum's member directory is built aside in
 * <data_dir>/member.etcd-import, etcd's is renamed to
 * <data_dir>/member.etcd (untouched) and the new one renamed to
 * <data_dir>/member. A conversion that an earlier start left half done is
 * finished or undone first. Anything else: nothing happens.
 * Returns 0, or a negative error with a line for the log in |err| (then
 * <data_dir>/member is etcd's, as it was). */
int server_etcd_import(const char *data_dir, char *err, size_t cap);

/* server_etcd_import_wal: the same for a member whose log is in |wal_dir|
 * (etcd's and quorum's --wal-dir; NULL or "": <data_dir>/member/wal).
 * etcd's log is read there and kept as <wal_dir>.etcd; quorum's is built
 * in <wal_dir>.etcd-import and renamed to |wal_dir|. */
int server_etcd_import_wal(const char *data_dir, const char *wal_dir, char *err, size_t cap);

/* server_etcd_translate translates one etcd log entry (raftpb.EntryType
 * |type|, its data) as the conversion does, into |out| (quorum's entry
 * data; empty for a no-op) and |*raft_type| (enum raft_entry_type); a conf
 * change updates |conf|. For tests and the fuzz target. Errors: as the
 * conversion's refusals, with the reason in |err|. */
int server_etcd_translate(int type, const uint8_t *data, size_t len, struct raft_membership *conf,
                          struct buf *out, uint8_t *raft_type, char *err, size_t cap);

#endif
