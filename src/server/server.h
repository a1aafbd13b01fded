/* server/server.h: one quorum member: the loop, the store, the Raft member
 * and the services.
 *
 * A write request becomes a log entry (node.c): proposed on the leader, or
 * forwarded to it; once committed, every member applies it to the store
 * (one LMDB transaction per batch, committed every 100 ms) and the member
 * that proposed it answers the client. Linearizable reads wait for a read
 * index (ReadIndex); serializable ones are answered from the local store at
 * once. Everything a member acknowledges is in the WAL of a majority. See
 * node.c for the Ready loop, members.c for membership, and
 * docs/architecture.md for the map.
 */
#ifndef QUORUM_SERVER_SERVER_H
#define QUORUM_SERVER_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "server/config.h"

struct server;

/* server_start opens the data dir, listens on the client URLs and returns
 * once serving. Errors: negative codes with a reason logged. */
int server_start(uv_loop_t *loop, const struct config *cfg, struct server **out);

/* server_stop closes listeners and calls, commits pending work, closes the
 * store and frees the server; |cb| runs when every handle is closed. */
void server_stop(struct server *s, void (*cb)(void *arg), void *arg);

/* etcd's id derivations (etcdserver/api/membership): a member id is the
 * first 8 bytes (big-endian) of SHA-1 over its sorted peer URLs joined with
 * no separator followed by the cluster token; the cluster id is the same
 * over the sorted member ids, 8 bytes big-endian each. */
uint64_t server_member_id(const char *const *peer_urls, size_t n, const char *token);
uint64_t server_cluster_id(const uint64_t *member_ids, size_t n);

#endif
