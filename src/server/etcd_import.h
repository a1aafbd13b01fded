/* server/etcd_import.h: the one-time conversion of an etcd 3.4 member
 * directory into quorum's (etcd_import.c; docs/migrate.md). */
#ifndef QUORUM_SERVER_ETCD_IMPORT_H
#define QUORUM_SERVER_ETCD_IMPORT_H

#include <stddef.h>

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

#endif
