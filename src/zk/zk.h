/* zk/zk.h: ZooKeeper client connections on a libuv loop.
 *
 * A zk_listener accepts on listening sockets bound elsewhere (server/
 * binds them, as it binds the client port) and owns the connections: it
 * reads, cuts the stream into packets (jute framing, the jute.maxbuffer
 * limit: a longer packet closes the connection, ZooKeeper's "Len error"),
 * decodes the ConnectRequest and hands everything to its handler (server/
 * zk_service.c), which answers with zk_conn_send. A connection whose first
 * four bytes are a four-letter word (ruok, srvr, ...) gets the handler's
 * text and is closed, as ZooKeeper does.
 *
 * Everything runs on the listener's loop; nothing here knows the store.
 *
 * Relaying (server/front.c): a connection's socket may live on one loop
 * and its handler on another. The socket's loop runs a relaying listener
 * (a handler with on_bytes: no framing, every read handed on as it came,
 * zk_conn_write for what goes back); the handler's loop holds a relayed
 * connection (zk_conn_relayed) that the bytes are fed to
 * (zk_conn_relay_input) and that sends, pauses and closes through a
 * struct zk_relay. Framing, the jute.maxbuffer limit, the ConnectRequest
 * and four-letter words all happen on the handler's side, as for a
 * connection of its own. The socket's side may answer some requests
 * itself (server/front.c answers reads there); it reports them with
 * zk_conn_relay_served, so the relayed connection's figures and its
 * handler (the session's liveness) count them.
 */
#ifndef QUORUM_ZK_ZK_H
#define QUORUM_ZK_ZK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "tls/tls.h"
#include "zk/proto.h"
#include "zk/stream.h"

typedef struct zk_listener zk_listener;
typedef struct zk_conn zk_conn;

/* Requests a relaying side answered itself since its last report: how
 * many (one reply each), their bytes each way, and the last one's type,
 * xid and zxid. */
struct zk_served {
    uint64_t packets, bytes_in, bytes_out;
    int32_t last_op, last_xid;
    int64_t last_zxid;
};

struct zk_conn_handler {
    /* the first packet, decoded (|req|'s bytes live during the call) */
    void (*on_connect)(zk_conn *c, const struct zk_connect_req *req);
    /* every later packet, whole (without its length), valid during the call */
    void (*on_packet)(zk_conn *c, const uint8_t *pkt, size_t len);
    /* a four-letter word (|cmd|, 4 bytes): append the answer to |out|; the
     * connection closes once it is written. |arg| (|n_arg| bytes) is what
     * came with the word in the same read (stmk's 8-byte mask). */
    void (*on_4lw)(zk_conn *c, const char *cmd, const uint8_t *arg, size_t n_arg,
                   struct buf *out);
    /* the connection is gone (closed by either side): the last call, always
     * from the loop (never inside zk_conn_close or zk_conn_send) */
    void (*on_close)(zk_conn *c);
    /* a relaying listener's handler has this instead of on_connect,
     * on_packet and on_4lw: what was read, unframed (valid during the
     * call) */
    void (*on_bytes)(zk_conn *c, const uint8_t *p, size_t len);
    /* a relayed connection's: requests its socket's side answered itself
     * (zk_conn_relay_served); optional */
    void (*on_served)(zk_conn *c, const struct zk_served *sv);
};

/* How a relayed connection reaches its socket on the other loop. Each is
 * called on the handler's loop and only posts: |send| the bytes for the
 * client (whole packets with their lengths, or a four-letter word's
 * answer), |pause| stops or resumes reading, |close| closes the socket
 * once what was sent is written. The other loop reports the socket's end
 * with zk_conn_relay_gone, in every case, after the last input. */
struct zk_relay {
    int (*send)(void *ctx, const uint8_t *p, size_t len);
    void (*pause)(void *ctx, bool paused);
    void (*close)(void *ctx);
};

/* zk_4lw_allowed: |cmd| (a NUL-terminated word) may run under |whitelist|,
 * ZooKeeper's 4lw.commands.whitelist: comma-separated words, blanks
 * around each ignored, "*" for every word; srvr always runs (ZooKeeper
 * adds it whatever the list says). */
bool zk_4lw_allowed(const char *whitelist, const char *cmd);

/* zk_listener_new makes a listener on |loop| with |h| (|arg| for the
 * handler: zk_listener_arg) and packets of at most |max_packet| bytes. */
int zk_listener_new(uv_loop_t *loop, const struct zk_conn_handler *h, void *arg,
                    size_t max_packet, zk_listener **out);
void *zk_listener_arg(const zk_listener *l);
/* zk_listener_adopt takes a bound, listening socket (closed with the
 * listener); connections are accepted once zk_listener_start is called.
 * With |tls| (a server context, borrowed for the listener's life) its
 * connections speak TLS (ZooKeeper's secureClientPort), the handshake
 * first, within 10 s. */
int zk_listener_adopt(zk_listener *l, int fd, tls_ctx *tls);
int zk_listener_start(zk_listener *l);
/* zk_listener_adopt_conn takes a connected socket |fd| (accepted
 * elsewhere; closed on error) as one of |l|'s connections, TLS with |tls|
 * as zk_listener_adopt says. */
int zk_listener_adopt_conn(zk_listener *l, int fd, tls_ctx *tls);
/* zk_listener_close stops accepting, closes every connection (on_close
 * for each, from their close callbacks) and calls |cb| once every handle
 * is closed; |l| is freed then. */
void zk_listener_close(zk_listener *l, void (*cb)(void *arg), void *arg);
/* zk_listener_conns is the number of open connections. */
size_t zk_listener_conns(const zk_listener *l);

/* zk_conn_send queues one packet (|len| bytes, the length prefix added);
 * what a connection queued in one loop pass is written with one write at
 * the start of the next (an idle handle), or at once by zk_conn_close.
 * Errors: -EPIPE once the connection is closing, -ENOMEM. */
int zk_conn_send(zk_conn *c, const uint8_t *pkt, size_t len);
/* zk_conn_write queues bytes as they are (a relaying listener's output),
 * written as zk_conn_send's are. Errors: as zk_conn_send. */
int zk_conn_write(zk_conn *c, const uint8_t *p, size_t len);
/* zk_conn_close closes the connection once what was sent is written;
 * nothing more is read. on_close follows. */
void zk_conn_close(zk_conn *c);
/* zk_conn_pause stops (true) or resumes (false) reading a connection:
 * a handler holding too many of its requests lets it wait, as ZooKeeper
 * stops reading a connection with too many outstanding. Packets already
 * read are handed on after the resume, from the loop. */
void zk_conn_pause(zk_conn *c, bool paused);
void zk_conn_set_data(zk_conn *c, void *data);
void *zk_conn_get_data(const zk_conn *c);
zk_listener *zk_conn_listener(const zk_conn *c);
/* zk_conn_peer is the client's address ("127.0.0.1:51234"), its host part
 * in |host| when not NULL. */
const char *zk_conn_peer(const zk_conn *c);
const char *zk_conn_host(const zk_conn *c);
/* zk_conn_peer_subject: the subject of the client's verified certificate
 * (a TLS listener's), RFC 2253 (tls_conn_peer_subject); -ENOENT without. */
int zk_conn_peer_subject(const zk_conn *c, char *out, size_t cap);
/* bytes received and sent, packets received and sent (cons) */
struct zk_conn_stats {
    uint64_t bytes_in, bytes_out, packets_in, packets_out;
};
const struct zk_conn_stats *zk_conn_stats(const zk_conn *c);
/* zk_conn_stats_reset zeroes them (the crst four-letter word). */
void zk_conn_stats_reset(zk_conn *c);
/* zk_conn_relayed makes a connection of |l| whose socket is elsewhere
 * (see "Relaying"): |r| with |ctx| reaches it; |peer|, |host| and the
 * client certificate's |subject| (NULL: none) are the socket's. Nothing
 * is handed to the handler until input comes. */
int zk_conn_relayed(zk_listener *l, const struct zk_relay *r, void *ctx, const char *peer,
                    const char *host, const char *subject, zk_conn **out);
/* zk_conn_relay_input: bytes read from the relayed connection's socket, in
 * order; handled as a connection's own reads are. */
void zk_conn_relay_input(zk_conn *c, const uint8_t *p, size_t len);
/* zk_conn_relay_served: what the socket's side answered itself (see
 * "Relaying"), counted in the connection's figures and handed to the
 * handler's on_served. */
void zk_conn_relay_served(zk_conn *c, const struct zk_served *sv);
/* zk_conn_relay_gone: the socket is closed; on_close runs now and |c| is
 * freed (call it from the loop, not from inside a handler's call). */
void zk_conn_relay_gone(zk_conn *c);
/* zk_conn_foreach calls |fn| for every open connection. */
void zk_conn_foreach(zk_listener *l, void (*fn)(zk_conn *c, void *arg), void *arg);

#endif
