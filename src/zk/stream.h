/* zk/stream.h: what a relaying side reads of a ZooKeeper connection's two
 * streams as they pass (zk.h, "Relaying"): where each of the client's
 * requests starts, and how many of the handler's answers went back. The
 * front loops use them to answer some reads themselves, in the
 * connection's order (server/front.c, "ZooKeeper reads on the front
 * loop"). Pure functions of the bytes: no loop, no allocation.
 *
 * The client's stream is framed packets (a big-endian i32 length, then
 * that many bytes): the ConnectRequest, then requests. A stream whose
 * first four bytes are a four-letter word, or with a length past
 * jute.maxbuffer or negative, is not framed here: from that point on it
 * goes to the handler's side as it comes, which answers or refuses it as
 * for a connection of its own.
 *
 * The handler's stream is framed the same way: the ConnectResponse, then
 * replies (ReplyHeader: xid, zxid, err, then the record). A reply whose
 * xid is -1 is a watch event and answers no request; every other one
 * answers one (pings, auth and setWatches answer with their special
 * xids). */
#ifndef QUORUM_ZK_STREAM_H
#define QUORUM_ZK_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* zk_is_4lw: |p| (4 bytes) is one of the four-letter words ZooKeeper 3.8
 * knows (whitelisted or not). */
bool zk_is_4lw(const uint8_t *p);

/* ---- the client's requests ---- */

enum zk_cut {
    ZK_CUT_MORE,    /* the next packet is not whole yet */
    ZK_CUT_RAW,     /* not framed from here on: hand everything on as it comes */
    ZK_CUT_CONNECT, /* the ConnectRequest */
    ZK_CUT_PACKET   /* a request */
};

struct zk_cutter {
    bool raw;          /* not framed any more */
    bool connect_seen; /* the ConnectRequest was cut */
};

/* zk_cut_next looks at the client's bytes |p|[0..n) that start where the
 * last cut packet ended (what came before it is gone) and returns what
 * comes next; for ZK_CUT_CONNECT and ZK_CUT_PACKET *len is the packet's
 * length after its 4-byte prefix (the packet is p[4..4 + *len)).
 * |max_packet| is jute.maxbuffer. Once it returned ZK_CUT_RAW it always
 * does. */
enum zk_cut zk_cut_next(struct zk_cutter *c, const uint8_t *p, size_t n, size_t max_packet,
                        size_t *len);

/* ---- the handler's answers ---- */

struct zk_answers {
    uint8_t hdr[12]; /* the first bytes of the packet going by */
    size_t have;     /* of hdr */
    uint64_t skip;   /* the rest of that packet, to pass */
    bool answering;  /* that packet answers a request */
    bool connecting; /* that packet is the ConnectResponse (connect_ok: with a timeout) */
    bool connect_ok;
    bool connect_seen;
    bool established; /* the ConnectResponse, whole, gave a timeout > 0 (not an
                       * expired session's answer) */
    bool broken;      /* a length shorter than a header: nothing is counted any more */
};

/* zk_answers_count reads the handler's bytes |p|[0..n), in order and in
 * pieces of any size, and returns how many answers to requests ended in
 * them: an answer counts once its last byte went by, so nothing written
 * after the count can land inside it. */
uint64_t zk_answers_count(struct zk_answers *a, const uint8_t *p, size_t n);

#endif
