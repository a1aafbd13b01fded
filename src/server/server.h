/* server/server.h: one quorum member: the loop, the store and the services.
 *
 * Single-member path (until the replicated server lands): a write request
 * becomes an entry of an in-memory log that commits at once; the apply hook
 * (a uv_check handle, so it runs right after the loop pass read every
 * request that had arrived) applies all queued entries in one LMDB batch,
 * records the consistent index in the same transaction, commits with one
 * sync, and only then answers them. Writes that arrive together share one
 * sync (group commit); an answered write is on disk.
 *
 * Reads are answered when they arrive, from a read transaction: every
 * answered write is already committed, and no unanswered one is visible
 * (apply and commit happen within one callback), so reads are linearizable.
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
