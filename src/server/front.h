/* server/front.h: front loops, the threads that own client connections.
 *
 * Each front loop is a libuv loop on a thread of its own with its own gRPC
 * server (grpc/): it accepts its share of the client connections (every
 * front loop polls every client listener; whichever wakes first accepts
 * one connection per wake-up, so a busy loop takes fewer) and does their
 * HTTP/2, gRPC framing and buffering. Calls are handed to the core loop
 * (the one that owns Raft, apply and the services) in messages on
 * wait-free queues (liburcu's wfcqueue), and their output comes back the
 * same way; each side wakes the other with one eventfd write per loop pass
 * at most, not per message. On the core, a forwarded call is an ordinary
 * qcall (call.h) whose face posts to its front loop, so the services do
 * not know where the client is. Per call, output leaves in the order the
 * core produced it (one FIFO queue per front loop).
 *
 * A front loop answers some requests itself, never reaching the core:
 * see f_on_message in front.c (server_kv_serve_local).
 *
 * ZooKeeper connections (--listen-zk-urls) are accepted the same way; a
 * front loop owns their sockets (TLS included) and relays the bytes to
 * the core's ZooKeeper service and back (zk/zk.h, "Relaying").
 */
#ifndef QUORUM_SERVER_FRONT_H
#define QUORUM_SERVER_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;
struct grpc_server_options;
struct fronts;

/* fronts_count_auto is what --front-loops=auto means on this machine: the
 * CPUs the process may run on less one for the core, two on two CPUs (the
 * core's share of a read load is small), none on one. */
unsigned fronts_count_auto(void);

/* fronts_start starts |n| (>= 1) front loops for the listening sockets
 * |fds| (one per client URL of |s|'s configuration, bound at start; the
 * front loops own them from now: each fds[i] is set to -1); with |pin|, the
 * calling (core) thread is pinned to the first allowed CPU and front loop
 * i to the (i+1)-th, wrapping. Nothing is accepted until fronts_accept.
 * Errors: negative errno. */
int fronts_start(struct server *s, unsigned n, bool pin, const struct grpc_server_options *go,
                 int *fds, size_t nfds, struct fronts **out);

/* fronts_add_zk gives the front loops a listening socket of
 * --listen-zk-urls (theirs from now; TLS with the ZooKeeper context when
 * |tls|): they accept its connections, serve their sockets and relay
 * them to the core's ZooKeeper service (zk.h, "Relaying"). Before
 * fronts_accept. */
void fronts_add_zk(struct fronts *f, int fd, bool tls);

/* fronts_accept: the front loops start accepting client connections (the
 * member is ready to serve). */
void fronts_accept(struct fronts *f);

/* server_accept_client takes one connection from the listening socket
 * |lfd| (accept4, non-blocking, close-on-exec): the socket, or -1 with
 * errno (EAGAIN: none waiting). Out of descriptors (EMFILE, ENFILE) it
 * takes the connection with a descriptor kept spare for this and closes it
 * at once, so the client sees its connection refused and the listener
 * does not stay readable and spin the loop; that is logged at most every
 * 10 s ("out of file descriptors: refusing client connections"). Any
 * thread. */
int server_accept_client(int lfd);

/* fronts_read_elsewhere hands a linearizable read whose read index was
 * reached (the applied revision is |rev|) to the front loop of |call|, to
 * be read there (server_kv_serve_read_local) or handed back when that
 * loop cannot read |rev| yet. |request| is the decoded RangeRequest or
 * TxnRequest (|kind| ENTRY_READ_RANGE or _TXN), packed again here. False
 * when the call is not a front loop's (the caller serves it). */
struct qcall;
bool fronts_read_elsewhere(struct qcall *call, int kind, const void *request, int64_t rev);

/* fronts_round: the core began a write round (a Ready's entries were
 * handed to the disk worker): the front loops read again the ZooKeeper
 * connections they held for it (front.c, "Held"). NULL: no front loops. */
void fronts_round(struct fronts *f);

/* fronts_close stops accepting, resets every call (the services get
 * on_close for each), stops and joins the threads, and calls |cb| once
 * the core's own handles are closed; |f| is freed then. */
void fronts_close(struct fronts *f, void (*cb)(void *arg), void *arg);

#endif
