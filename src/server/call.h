/* server/call.h: the face-neutral call the services answer.
 *
 * A call is one request stream of a client, whatever face it came in by:
 * a gRPC stream today (grpc/ on the core loop or on a front loop), the
 * JSON gateway and the ZooKeeper face later. The services (kv_service.c,
 * lease_service.c, ...) see only this: messages in (protobuf bytes, as
 * etcd's gRPC API defines them), messages and one final status out. Each
 * face supplies the three outputs (struct qcall_face) and drives the
 * callbacks of the method tables.
 *
 * Threading: a call lives on the core loop. Its callbacks run there and
 * its functions are called there only. A face on a front loop (front.c)
 * hands the call's input across in messages and carries the output back
 * the same way; per call, the output leaves in the order it was produced.
 *
 * Life cycle, as grpc/'s: on_message* (and on_half_close for client
 * streams), then the service sends and finishes; on_close exactly once,
 * last, also when the client went away first. After on_close the call is
 * freed: a service answering later must forget it there.
 */
#ifndef QUORUM_SERVER_CALL_H
#define QUORUM_SERVER_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;
typedef struct qcall qcall;

enum qcall_kind {
    QCALL_UNARY,
    QCALL_SERVER_STREAMING,
    QCALL_CLIENT_STREAMING,
    QCALL_BIDI_STREAMING,
};

struct qcall_method {
    const char *path; /* "/etcdserverpb.KV/Range": the gRPC path names the method */
    enum qcall_kind kind;
    void (*on_message)(qcall *call, const uint8_t *msg, size_t len); /* required */
    void (*on_half_close)(qcall *call);                               /* optional */
    void (*on_close)(qcall *call);                                    /* optional */
};

/* What a face does with a call's output. */
struct buf;
struct qcall_face {
    int (*send)(qcall *call, const uint8_t *msg, size_t len);
    int (*finish)(qcall *call, int status, const char *message);
    size_t (*pending)(const qcall *call);
    /* optional: qcall_send_take without a copy (NULL: send copies) */
    int (*send_take)(qcall *call, struct buf *msg);
};

struct qcall {
    const struct qcall_method *m;
    struct server *s;
    void *data; /* the service's slot */
    const struct qcall_face *face;
    void *face_ctx; /* the face's own record of the stream */
    bool finished;
    /* credentials the face saw (owned, freed with the call): the "token"
     * metadata and a verified client certificate's common name, or NULL */
    char *token;
    size_t token_len;
    char *cn;
    /* the ZooKeeper face's own call: may write its keys (the "\0zk"
     * prefix, refused to etcd clients: apply.h) */
    bool zk_face;
};

/* qcall_new makes a call of method |m| on face |face| (the face keeps it in
 * its stream record and frees it with qcall_free after on_close). */
qcall *qcall_new(struct server *s, const struct qcall_method *m, const struct qcall_face *face,
                 void *face_ctx);
void qcall_free(qcall *call);
/* qcall_set_credentials copies a face's credentials into the call (either
 * may be NULL). Errors: -ENOMEM. */
int qcall_set_credentials(qcall *call, const char *token, size_t token_len, const char *cn);

/* qcall_send queues one response message (copied). Errors: -EPIPE (the
 * call finished or is going away), -EMSGSIZE, -ENOMEM. */
int qcall_send(qcall *call, const uint8_t *msg, size_t len);
/* qcall_send_take is qcall_send of a message built in |msg| after
 * GRPC_MSG_PREFIX (5) bytes left for the face (grpc.h,
 * grpc_call_send_take): a face that can takes the buffer (*|msg| zeroed)
 * rather than copy it, so a big reply costs the loop no copy. The caller
 * frees *|msg| after, taken or not. Errors: as qcall_send. */
int qcall_send_take(qcall *call, struct buf *msg);
/* qcall_finish ends the call with |status| (enum grpc_status) and
 * |message| (may be NULL). Errors: -EPIPE if already finished. */
int qcall_finish(qcall *call, int status, const char *message);
/* qcall_pending_bytes is how much output is queued but not yet written to
 * the client: streaming producers (watch, snapshot) hold back above a
 * share. A front loop reports it after each of its passes. */
size_t qcall_pending_bytes(const qcall *call);

static inline void qcall_set_data(qcall *call, void *data)
{
    call->data = data;
}
static inline void *qcall_get_data(const qcall *call)
{
    return call->data;
}

/* Every method of every service, in one table (call.c): the faces route
 * by path to an index in it. */
extern const struct qcall_method *const *server_methods;
extern size_t server_methods_n;
/* server_methods_init builds the table once (idempotent). Errors: -ENOMEM. */
int server_methods_init(void);

#endif
