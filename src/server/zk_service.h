/* server/zk_service.h: the ZooKeeper face's service (docs/zookeeper.md).
 *
 * zk/ owns the connections and the jute codec; this file turns what they
 * carry into calls of the services every face uses (the face-neutral
 * qcall of call.h: a session is a lease, kept alive by a LeaseKeepAlive
 * stream), so auth, quota and size checks live once, in server/. */
#ifndef QUORUM_SERVER_ZK_SERVICE_H
#define QUORUM_SERVER_ZK_SERVICE_H

struct server;

/* server_zk_listen binds --listen-zk-urls (nothing when there are none):
 * with front loops they accept the connections and relay them to the
 * core (front.h), without, the core loop does; connections are accepted
 * from server_zk_serve on (the member serves clients). Go's words in the
 * log on failure. */
int server_zk_listen(struct server *s);
void server_zk_serve(struct server *s);
/* server_zk_relay_listener is the core's listener that front loops'
 * connections are relayed into (zk_conn_relayed), or NULL when the
 * service is not running (closed, or no --listen-zk-urls). */
struct zk_listener;
struct zk_listener *server_zk_relay_listener(struct server *s);
/* server_zk_close closes every ZooKeeper connection (their sessions live
 * on until they expire, as when a ZooKeeper server goes away) and the
 * listeners; synchronous for the calls they had open. */
void server_zk_close(struct server *s);

/* server_zk_observe: a change of the store (the change observer, during
 * apply): ZooKeeper watches of the connections on this member fire. */
struct mvcc_kv;
void server_zk_observe(struct server *s, int type, const struct mvcc_kv *kv,
                       const struct mvcc_kv *prev);

/* server_zk_fire: the changes of one ZooKeeper write (zk_tree.h, struct
 * zk_change_rec), in their order: the watches fire, each event told to
 * the sessions that may READ its node by the ACLs the change carries. */
struct zk_change_rec;
void server_zk_fire(struct server *s, const struct zk_change_rec *ch, size_t n);

/* server_zk_store_replaced: a snapshot replaced the store; the tree's
 * figures for the four-letter words are counted again. */
void server_zk_store_replaced(struct server *s);

/* ZooKeeper 3.8's session timeout bounds for a tickTime of |tick_ms|: the
 * asked timeout clamped to [2, 20] ticks. */
int server_zk_negotiate_timeout(int asked_ms, int tick_ms);

#endif
