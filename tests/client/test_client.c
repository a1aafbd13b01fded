/* tests/client/test_client.c: libquorum-client against real quorum
 * processes ($QUORUM_BIN, set by meson), each on free loopback ports in its
 * own temp dir and killed by its PID: unary calls and etcd's error texts,
 * streams (watch, lease keep-alive, snapshot), many threads on one client,
 * failover between endpoints, deadlines. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/client_int.h" /* qc__stream_peak_buffered */
#include "grpc/grpc.h"         /* fake members */
#include "quorum/client.h"

#include "../free_port.h"

/* ---- a tiny harness, as tests/integration/harness.py ---- */

struct srv {
    pid_t pid;
    char dir[128];
    char ep[64];
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static qc_client *connect_to(const char *const *eps, size_t n)
{
    struct qc_options o = {.endpoints = eps, .n_endpoints = n, .dial_timeout_ms = 2000};
    qc_client *c = NULL;
    struct qc_status st;
    int r = qc_connect(&o, &c, &st);
    cr_assert_eq(r, 0, "qc_connect: %d %s (%d %s)", r, qc_strerror(r), st.code, st.message);
    return c;
}

/* a flag every server started next gets (NULL: none) */
static const char *extra_arg;

/* srv_spawn starts member |name| of the cluster |ic| (etcd's
 * --initial-cluster) on client port |cport| and peer port |pport| */
/* extra flags for the next srv_spawn (TLS tests); NULL-terminated */
static const char *spawn_extra[16];

static void srv_spawn(struct srv *s, const char *name, int cport, int pport, const char *ic)
{
    const char *bin = getenv("QUORUM_BIN");
    cr_assert(bin && *bin, "QUORUM_BIN not set");
    snprintf(s->dir, sizeof(s->dir), "/tmp/qc-test-XXXXXX");
    cr_assert(mkdtemp(s->dir));
    char data[192], curl[64], purl[64], log[192];
    snprintf(data, sizeof(data), "%s/%s.data", s->dir, name);
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
    snprintf(log, sizeof(log), "%s/server.log", s->dir);
    snprintf(s->ep, sizeof(s->ep), "127.0.0.1:%d", cport);
    s->pid = fork();
    cr_assert(s->pid >= 0);
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        const char *args[40] = {bin,  "--name", name, "--data-dir", data, "--listen-client-urls",
                                curl, "--advertise-client-urls", curl, "--listen-peer-urls", purl,
                                "--initial-advertise-peer-urls", purl, "--initial-cluster", ic};
        size_t na = 15;
        for (size_t i = 0; spawn_extra[i] != NULL && na < 38; i++)
            args[na++] = spawn_extra[i];
        if (extra_arg != NULL)
            args[na++] = extra_arg;
        args[na] = NULL;
        execv(bin, (char *const *)args);
        _exit(127);
    }
}

/* srv_wait_ready: a linearizable read of "health" succeeds (etcdctl
 * endpoint health) */
static void srv_wait_ready(struct srv *s)
{
    for (int i = 0; i < 400; i++) {
        int status;
        cr_assert_eq(waitpid(s->pid, &status, WNOHANG), 0, "server exited; see %s/server.log",
                     s->dir);
        const char *eps[] = {s->ep};
        struct qc_options o = {
            .endpoints = eps, .n_endpoints = 1, .dial_timeout_ms = 1000, .call_timeout_ms = 2000};
        qc_client *c = NULL;
        if (qc_connect(&o, &c, NULL) == 0) {
            int r = qc_get(c, "health", 6, NULL, NULL, NULL);
            qc_close(c);
            if (r == 0)
                return;
        }
        sleep_ms(50);
    }
    cr_assert_fail("server at %s not ready; see %s/server.log", s->ep, s->dir);
}

static void srv_start(struct srv *s)
{
    int cport = free_port(), pport = free_port();
    char ic[96];
    snprintf(ic, sizeof(ic), "default=http://127.0.0.1:%d", pport);
    srv_spawn(s, "default", cport, pport, ic);
    srv_wait_ready(s);
}

static void srv_kill(struct srv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    return remove(p);
}

static void srv_cleanup(struct srv *s)
{
    srv_kill(s);
    if (s->dir[0])
        nftw(s->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    s->dir[0] = 0;
}

static struct srv S1, S2;

static void setup_one(void)
{
    srv_start(&S1);
}

static void setup_ttl_one(void)
{
    extra_arg = "--auth-token-ttl=1";
    srv_start(&S1);
    extra_arg = NULL;
}

static void teardown_all(void)
{
    srv_cleanup(&S1);
    srv_cleanup(&S2);
}

static int64_t revision_of(qc_client *c)
{
    Etcdserverpb__RangeResponse *r = NULL;
    struct qc_status st;
    cr_assert_eq(qc_get(c, "x", 1, NULL, &r, &st), 0, "%s", st.message);
    int64_t rev = r->header->revision;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return rev;
}

#define FREE(m) protobuf_c_message_free_unpacked(&(m)->base, NULL)

/* ---- unary ---- */

Test(client, put_get_round_trip, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    cr_assert_str_eq(qc_endpoint(c), S1.ep);
    struct qc_status st;
    Etcdserverpb__PutResponse *pr = NULL;
    cr_assert_eq(qc_put(c, "foo", 3, "bar", 3, 0, &pr, &st), 0, "%s", st.message);
    cr_assert_eq(st.code, 0);
    cr_assert(pr->header && pr->header->revision >= 2);
    int64_t rev = pr->header->revision;
    FREE(pr);

    Etcdserverpb__RangeResponse *rr = NULL;
    cr_assert_eq(qc_get(c, "foo", 3, NULL, &rr, &st), 0, "%s", st.message);
    cr_assert_eq(rr->n_kvs, 1);
    cr_assert_eq(rr->kvs[0]->key.len, 3);
    cr_assert_eq(memcmp(rr->kvs[0]->key.data, "foo", 3), 0);
    cr_assert_eq(rr->kvs[0]->value.len, 3);
    cr_assert_eq(memcmp(rr->kvs[0]->value.data, "bar", 3), 0);
    cr_assert_eq(rr->kvs[0]->mod_revision, rev);
    cr_assert_eq(rr->header->revision, rev);
    FREE(rr);

    /* a missing key: OK with no kvs */
    cr_assert_eq(qc_get(c, "nope", 4, NULL, &rr, &st), 0);
    cr_assert_eq(rr->n_kvs, 0);
    FREE(rr);

    /* delete with prev_kv */
    Etcdserverpb__DeleteRangeResponse *dr = NULL;
    cr_assert_eq(qc_delete(c, "foo", 3, NULL, 0, 1, &dr, &st), 0);
    cr_assert_eq(dr->deleted, 1);
    cr_assert_eq(dr->n_prev_kvs, 1);
    FREE(dr);

    /* the generic call, and Status / MemberList through the helpers */
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key = (ProtobufCBinaryData){3, (uint8_t *)"foo"};
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_unary(c, "/etcdserverpb.KV/Range", &req.base,
                          &etcdserverpb__range_response__descriptor, &m, &st),
                 0);
    cr_assert_eq(((Etcdserverpb__RangeResponse *)m)->n_kvs, 0);
    protobuf_c_message_free_unpacked(m, NULL);

    Etcdserverpb__StatusResponse *sr = NULL;
    cr_assert_eq(qc_maint_status(c, &sr, &st), 0, "%s", st.message);
    cr_assert(sr->leader != 0);
    FREE(sr);
    Etcdserverpb__MemberListResponse *ml = NULL;
    cr_assert_eq(qc_member_list(c, &ml, &st), 0, "%s", st.message);
    cr_assert_eq(ml->n_members, 1);
    FREE(ml);
    qc_close(c);
}

Test(client, range_many_keys, .init = setup_one, .fini = teardown_all, .timeout = 240)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    /* 2000 keys of 4 KiB: an 8 MiB response, twice the stream window */
    enum { N = 2000, V = 4096 };
    static char val[V];
    for (int i = 0; i < N; i++) {
        char k[32];
        int kl = snprintf(k, sizeof(k), "many/%05d", i);
        memset(val, 'a' + i % 26, V);
        cr_assert_eq(qc_put(c, k, (size_t)kl, val, V, 0, NULL, &st), 0, "%d: %s", i, st.message);
    }
    Etcdserverpb__RangeResponse *rr = NULL;
    struct qc_get_opts o = {.range_end = "many0", .range_end_len = 5};
    cr_assert_eq(qc_get(c, "many/", 5, &o, &rr, &st), 0, "%s", st.message);
    cr_assert_eq(rr->n_kvs, N);
    cr_assert_eq(rr->count, N);
    for (int i = 0; i < N; i++) {
        char k[32];
        int kl = snprintf(k, sizeof(k), "many/%05d", i);
        cr_assert_eq(rr->kvs[i]->key.len, (size_t)kl);
        cr_assert_eq(memcmp(rr->kvs[i]->key.data, k, (size_t)kl), 0);
        cr_assert_eq(rr->kvs[i]->value.len, V);
        cr_assert_eq(rr->kvs[i]->value.data[V - 1], 'a' + i % 26);
    }
    FREE(rr);
    o.limit = 10;
    cr_assert_eq(qc_get(c, "many/", 5, &o, &rr, &st), 0);
    cr_assert_eq(rr->n_kvs, 10);
    cr_assert(rr->more);
    cr_assert_eq(rr->count, N);
    FREE(rr);
    o.limit = 0;
    o.count_only = 1;
    cr_assert_eq(qc_get(c, "many/", 5, &o, &rr, &st), 0);
    cr_assert_eq(rr->n_kvs, 0);
    cr_assert_eq(rr->count, N);
    FREE(rr);
    qc_close(c);
}

Test(client, etcd_errors, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    for (int i = 0; i < 5; i++)
        cr_assert_eq(qc_put(c, "e", 1, "v", 1, 0, NULL, &st), 0);
    int64_t rev = revision_of(c);
    Etcdserverpb__CompactionResponse *cp = NULL;
    cr_assert_eq(qc_compact(c, rev - 1, 1, &cp, &st), 0, "%s", st.message);
    FREE(cp);

    Etcdserverpb__RangeResponse *rr = (void *)1;
    struct qc_get_opts o = {.revision = rev - 2};
    int r = qc_get(c, "e", 1, &o, &rr, &st);
    cr_assert_eq(r, QC_ESTATUS);
    cr_assert_null(rr);
    cr_assert_eq(st.code, QC_OUT_OF_RANGE);
    cr_assert_str_eq(st.message, "etcdserver: mvcc: required revision has been compacted");

    o.revision = rev + 100;
    cr_assert_eq(qc_get(c, "e", 1, &o, &rr, &st), QC_ESTATUS);
    cr_assert_eq(st.code, QC_OUT_OF_RANGE);
    cr_assert_str_eq(st.message, "etcdserver: mvcc: required revision is a future revision");

    r = qc_put(c, "k", 1, "v", 1, 0x1234567, NULL, &st);
    cr_assert_eq(r, QC_ESTATUS);
    cr_assert_eq(st.code, QC_NOT_FOUND);
    cr_assert_str_eq(st.message, "etcdserver: requested lease not found");

    cr_assert_eq(qc_put(c, "", 0, "v", 1, 0, NULL, &st), QC_ESTATUS);
    cr_assert_eq(st.code, QC_INVALID_ARGUMENT);
    cr_assert_str_eq(st.message, "etcdserver: key is not provided");

    /* answered by the grpc layer: a trailers-only response */
    ProtobufCMessage *m = NULL;
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    cr_assert_eq(qc_unary(c, "/etcdserverpb.KV/Nope", &req.base,
                          &etcdserverpb__range_response__descriptor, &m, &st),
                 QC_ESTATUS);
    cr_assert_null(m);
    cr_assert_eq(st.code, QC_UNIMPLEMENTED);
    cr_assert_str_eq(st.message, "unknown method Nope for service etcdserverpb.KV");

    /* the connection is still good after errors */
    cr_assert_eq(qc_put(c, "after", 5, "v", 1, 0, NULL, &st), 0);
    cr_assert_eq(st.code, 0);
    cr_assert_str_eq(st.message, "");
    qc_close(c);
}

Test(client, txn, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    /* if version("t") == 0 then put t=1 else get t */
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
    cmp.key = (ProtobufCBinaryData){1, (uint8_t *)"t"};
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
    cmp.version = 0;
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = (ProtobufCBinaryData){1, (uint8_t *)"t"};
    put.value = (ProtobufCBinaryData){1, (uint8_t *)"1"};
    Etcdserverpb__RequestOp op_put = ETCDSERVERPB__REQUEST_OP__INIT;
    op_put.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op_put.request_put = &put;
    Etcdserverpb__RangeRequest get = ETCDSERVERPB__RANGE_REQUEST__INIT;
    get.key = (ProtobufCBinaryData){1, (uint8_t *)"t"};
    Etcdserverpb__RequestOp op_get = ETCDSERVERPB__REQUEST_OP__INIT;
    op_get.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op_get.request_range = &get;
    Etcdserverpb__Compare *cmps[] = {&cmp};
    Etcdserverpb__RequestOp *succ[] = {&op_put}, *fail[] = {&op_get};
    Etcdserverpb__TxnRequest txn = ETCDSERVERPB__TXN_REQUEST__INIT;
    txn.n_compare = 1;
    txn.compare = cmps;
    txn.n_success = 1;
    txn.success = succ;
    txn.n_failure = 1;
    txn.failure = fail;

    Etcdserverpb__TxnResponse *tr = NULL;
    cr_assert_eq(qc_txn(c, &txn, &tr, &st), 0, "%s", st.message);
    cr_assert(tr->succeeded);
    cr_assert_eq(tr->n_responses, 1);
    cr_assert_eq(tr->responses[0]->response_case, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT);
    FREE(tr);
    cr_assert_eq(qc_txn(c, &txn, &tr, &st), 0, "%s", st.message);
    cr_assert(!tr->succeeded);
    cr_assert_eq(tr->responses[0]->response_case,
                 ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE);
    Etcdserverpb__RangeResponse *rr = tr->responses[0]->response_range;
    cr_assert_eq(rr->n_kvs, 1);
    cr_assert_eq(rr->kvs[0]->value.data[0], '1');
    FREE(tr);

    /* a txn error: the same key put twice */
    Etcdserverpb__RequestOp *two[] = {&op_put, &op_put};
    txn.success = two;
    txn.n_success = 2;
    txn.n_compare = 0;
    cr_assert_eq(qc_txn(c, &txn, &tr, &st), QC_ESTATUS);
    cr_assert_eq(st.code, QC_INVALID_ARGUMENT);
    cr_assert_str_eq(st.message, "etcdserver: duplicate key given in txn request");
    qc_close(c);
}

/* ---- streams ---- */

Test(client, lease_keepalive_timetolive, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    Etcdserverpb__LeaseGrantResponse *g = NULL;
    cr_assert_eq(qc_lease_grant(c, 30, 0, &g, &st), 0, "%s", st.message);
    int64_t id = g->id;
    cr_assert(id != 0);
    cr_assert_eq(g->ttl, 30);
    FREE(g);
    cr_assert_eq(qc_put(c, "lk", 2, "v", 1, id, NULL, &st), 0, "%s", st.message);

    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_LEASE_KEEPALIVE, &s), 0);
    for (int i = 0; i < 3; i++) {
        Etcdserverpb__LeaseKeepAliveRequest ka = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
        ka.id = id;
        cr_assert_eq(qc_stream_send(s, &ka.base), 0);
        ProtobufCMessage *m = NULL;
        int r =
            qc_stream_recv(s, &etcdserverpb__lease_keep_alive_response__descriptor, &m, 10000, &st);
        cr_assert_eq(r, 0, "recv %d %s", r, st.message);
        Etcdserverpb__LeaseKeepAliveResponse *kr = (void *)m;
        cr_assert_eq(kr->id, id);
        cr_assert_eq(kr->ttl, 30);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    /* nothing more comes: recv times out and the stream stays usable */
    ProtobufCMessage *m = NULL;
    cr_assert_eq(
        qc_stream_recv(s, &etcdserverpb__lease_keep_alive_response__descriptor, &m, 0, &st),
        QC_ETIMEDOUT);
    cr_assert_null(m);

    Etcdserverpb__LeaseTimeToLiveResponse *t = NULL;
    cr_assert_eq(qc_lease_timetolive(c, id, 1, &t, &st), 0, "%s", st.message);
    cr_assert_eq(t->id, id);
    cr_assert_eq(t->grantedttl, 30);
    cr_assert(t->ttl > 0 && t->ttl <= 30);
    cr_assert_eq(t->n_keys, 1);
    cr_assert_eq(memcmp(t->keys[0].data, "lk", 2), 0);
    FREE(t);

    Etcdserverpb__LeaseLeasesResponse *ls = NULL;
    cr_assert_eq(qc_lease_leases(c, &ls, &st), 0);
    cr_assert_eq(ls->n_leases, 1);
    FREE(ls);
    qc_stream_free(s);

    cr_assert_eq(qc_lease_revoke(c, id, NULL, &st), 0, "%s", st.message);
    Etcdserverpb__RangeResponse *rr = NULL;
    cr_assert_eq(qc_get(c, "lk", 2, NULL, &rr, &st), 0);
    cr_assert_eq(rr->n_kvs, 0);
    FREE(rr);
    cr_assert_eq(qc_lease_timetolive(c, id, 0, &t, &st), 0);
    cr_assert_eq(t->ttl, -1);
    FREE(t);
    qc_close(c);
}

Test(client, watch_receives_puts, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_WATCH, &s), 0);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key = (ProtobufCBinaryData){2, (uint8_t *)"w/"};
    cr.range_end = (ProtobufCBinaryData){2, (uint8_t *)"w0"};
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    cr_assert_eq(qc_stream_send(s, &wr.base), 0);
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st), 0,
                 "%s", st.message);
    Etcdserverpb__WatchResponse *w = (void *)m;
    cr_assert(w->created);
    FREE(w);

    enum { N = 50 };
    for (int i = 0; i < N; i++) {
        char k[16], v[16];
        int kl = snprintf(k, sizeof(k), "w/%d", i), vl = snprintf(v, sizeof(v), "v%d", i);
        cr_assert_eq(qc_put(c, k, (size_t)kl, v, (size_t)vl, 0, NULL, &st), 0);
    }
    cr_assert_eq(qc_put(c, "other", 5, "x", 1, 0, NULL, &st), 0);
    int got = 0;
    while (got < N) {
        int r = qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st);
        cr_assert_eq(r, 0, "recv %d (%d %s) after %d events", r, st.code, st.message, got);
        w = (void *)m;
        for (size_t i = 0; i < w->n_events; i++, got++) {
            char k[16];
            int kl = snprintf(k, sizeof(k), "w/%d", got);
            Mvccpb__KeyValue *kv = w->events[i]->kv;
            cr_assert_eq(w->events[i]->type, MVCCPB__EVENT__EVENT_TYPE__PUT);
            cr_assert_eq(kv->key.len, (size_t)kl);
            cr_assert_eq(memcmp(kv->key.data, k, (size_t)kl), 0);
        }
        FREE(w);
    }
    cr_assert_eq(got, N);
    qc_stream_free(s);
    qc_close(c);
}

Test(client, snapshot_stream, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    static char val[8192];
    memset(val, 'z', sizeof(val));
    for (int i = 0; i < 200; i++) {
        char k[16];
        int kl = snprintf(k, sizeof(k), "s/%d", i);
        cr_assert_eq(qc_put(c, k, (size_t)kl, val, sizeof(val), 0, NULL, &st), 0);
    }
    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_SNAPSHOT, &s), 0);
    Etcdserverpb__SnapshotRequest req = ETCDSERVERPB__SNAPSHOT_REQUEST__INIT;
    cr_assert_eq(qc_stream_send(s, &req.base), 0);
    cr_assert_eq(qc_stream_close_send(s), 0);
    size_t total = 0, msgs = 0;
    uint64_t last_remaining = 1;
    for (;;) {
        ProtobufCMessage *m = NULL;
        int r = qc_stream_recv(s, &etcdserverpb__snapshot_response__descriptor, &m, 30000, &st);
        if (r == 1)
            break;
        cr_assert_eq(r, 0, "recv %d (%d %s)", r, st.code, st.message);
        Etcdserverpb__SnapshotResponse *sr = (void *)m;
        total += sr->blob.len;
        last_remaining = sr->remaining_bytes;
        msgs++;
        FREE(sr);
        /* a slow reader: the buffer is bounded, the server waits */
        if (msgs % 8 == 0)
            sleep_ms(5);
    }
    cr_assert_eq(st.code, 0, "%s", st.message);
    cr_assert(total > 200 * 8192, "snapshot of %zu bytes", total);
    cr_assert_eq(last_remaining, 0);
    /* after the end, recv keeps answering 1 */
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__snapshot_response__descriptor, &m, 0, &st), 1);
    qc_stream_free(s);
    qc_close(c);
}

Test(client, lock_election_and_deadline, .init = setup_one, .fini = teardown_all)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    Etcdserverpb__LeaseGrantResponse *g = NULL;
    cr_assert_eq(qc_lease_grant(c, 60, 0, &g, &st), 0);
    int64_t lease = g->id;
    FREE(g);
    Etcdserverpb__LeaseGrantResponse *g2 = NULL;
    cr_assert_eq(qc_lease_grant(c, 60, 0, &g2, &st), 0);
    int64_t lease2 = g2->id;
    FREE(g2);

    V3lockpb__LockResponse *lr = NULL;
    cr_assert_eq(qc_lock(c, "mylock", 6, lease, 10000, &lr, &st), 0, "%s", st.message);
    cr_assert(lr->key.len > 6);
    /* held: a second locker waits until its deadline */
    V3lockpb__LockResponse *lr2 = NULL;
    cr_assert_eq(qc_lock(c, "mylock", 6, lease2, 300, &lr2, &st), QC_ETIMEDOUT);
    cr_assert_null(lr2);
    cr_assert_eq(st.code, QC_DEADLINE_EXCEEDED);
    cr_assert_str_eq(st.message, "context deadline exceeded");
    cr_assert_eq(qc_unlock(c, lr->key.data, lr->key.len, NULL, &st), 0, "%s", st.message);
    FREE(lr);

    V3electionpb__CampaignResponse *cr = NULL;
    cr_assert_eq(qc_election_campaign(c, "el", 2, lease, "a", 1, 10000, &cr, &st), 0, "%s",
                 st.message);
    cr_assert(cr->leader);
    cr_assert_eq(qc_election_proclaim(c, cr->leader, "b", 1, NULL, &st), 0, "%s", st.message);
    V3electionpb__LeaderResponse *ld = NULL;
    cr_assert_eq(qc_election_leader(c, "el", 2, &ld, &st), 0, "%s", st.message);
    cr_assert(ld->kv);
    cr_assert_eq(ld->kv->value.len, 1);
    cr_assert_eq(ld->kv->value.data[0], 'b');
    FREE(ld);

    /* Observe (server streaming) sees the current leader */
    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_OBSERVE, &s), 0);
    V3electionpb__LeaderRequest lq = V3ELECTIONPB__LEADER_REQUEST__INIT;
    lq.name = (ProtobufCBinaryData){2, (uint8_t *)"el"};
    cr_assert_eq(qc_stream_send(s, &lq.base), 0);
    cr_assert_eq(qc_stream_close_send(s), 0);
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_stream_recv(s, &v3electionpb__leader_response__descriptor, &m, 10000, &st), 0,
                 "%s", st.message);
    ld = (void *)m;
    cr_assert(ld->kv && ld->kv->value.data[0] == 'b');
    FREE(ld);
    qc_stream_free(s);

    cr_assert_eq(qc_election_resign(c, cr->leader, NULL, &st), 0, "%s", st.message);
    FREE(cr);
    cr_assert_eq(qc_election_leader(c, "el", 2, &ld, &st), QC_ESTATUS);
    cr_assert_eq(st.code, QC_UNKNOWN, "%d %s", st.code, st.message); /* etcd's: a plain error */
    cr_assert_str_eq(st.message, "election: no leader");
    qc_close(c);
}

/* ---- many threads on one client ---- */

struct worker {
    qc_client *c;
    int id, ok, failed;
    struct qc_status last;
};

static void *put_worker(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 1000; i++) {
        char k[32], v[32];
        int kl = snprintf(k, sizeof(k), "conc/%d/%d", w->id, i);
        int vl = snprintf(v, sizeof(v), "%d", i);
        struct qc_status st;
        if (qc_put(w->c, k, (size_t)kl, v, (size_t)vl, 0, NULL, &st) == 0)
            w->ok++;
        else {
            w->failed++;
            w->last = st;
        }
    }
    return NULL;
}

Test(client, eight_threads_thousand_puts, .init = setup_one, .fini = teardown_all, .timeout = 300)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    int64_t before = revision_of(c);
    struct worker w[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct worker){.c = c, .id = i};
        cr_assert_eq(pthread_create(&th[i], NULL, put_worker, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(w[i].ok, 1000, "thread %d: %d failed, last %d %s", i, w[i].failed,
                     w[i].last.code, w[i].last.message);
    cr_assert_eq(revision_of(c) - before, 8000);
    Etcdserverpb__RangeResponse *rr = NULL;
    struct qc_get_opts o = {.range_end = "conc0", .range_end_len = 5, .count_only = 1};
    cr_assert_eq(qc_get(c, "conc/", 5, &o, &rr, NULL), 0);
    cr_assert_eq(rr->count, 8000);
    FREE(rr);
    qc_close(c);
}

/* ---- failover ---- */

static void setup_two(void)
{
    srv_start(&S1);
    srv_start(&S2);
}

Test(client, failover_when_first_dies, .init = setup_two, .fini = teardown_all)
{
    const char *eps[] = {S1.ep, S2.ep};
    qc_client *c = connect_to(eps, 2);
    struct qc_status st;
    cr_assert_str_eq(qc_endpoint(c), S1.ep);
    cr_assert_eq(qc_put(c, "a", 1, "1", 1, 0, NULL, &st), 0);
    /* a watch on the first member: it ends UNAVAILABLE when that dies */
    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_WATCH, &s), 0);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key = (ProtobufCBinaryData){1, (uint8_t *)"a"};
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    cr_assert_eq(qc_stream_send(s, &wr.base), 0);
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st), 0);
    protobuf_c_message_free_unpacked(m, NULL);

    srv_kill(&S1);
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st),
                 QC_EUNAVAILABLE, "%s", st.message);
    cr_assert_eq(st.code, QC_UNAVAILABLE);
    qc_stream_free(s);

    /* the connection is known broken: the next call goes to the second */
    int r = qc_put(c, "b", 1, "2", 1, 0, NULL, &st);
    cr_assert_eq(r, 0, "put after failover: %d %d %s", r, st.code, st.message);
    cr_assert_str_eq(qc_endpoint(c), S2.ep);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(qc_put(c, "c", 1, "3", 1, 0, NULL, &st), 0, "%s", st.message);
    Etcdserverpb__RangeResponse *rr = NULL;
    cr_assert_eq(qc_get(c, "b", 1, NULL, &rr, &st), 0);
    cr_assert_eq(rr->n_kvs, 1);
    FREE(rr);
    /* both dead: calls fail UNAVAILABLE, and qc_close still works */
    srv_kill(&S2);
    for (int i = 0; i < 3; i++) {
        r = qc_put(c, "d", 1, "4", 1, 0, NULL, &st);
        if (r != 0)
            break;
    }
    cr_assert_eq(r, QC_EUNAVAILABLE, "%d %s", r, st.message);
    cr_assert_eq(st.code, QC_UNAVAILABLE);
    qc_close(c);
}

Test(client, dead_first_endpoint_at_connect, .init = setup_one, .fini = teardown_all)
{
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", free_port());
    const char *eps[] = {dead, S1.ep};
    qc_client *c = connect_to(eps, 2);
    cr_assert_str_eq(qc_endpoint(c), S1.ep);
    struct qc_status st;
    cr_assert_eq(qc_put(c, "k", 1, "v", 1, 0, NULL, &st), 0, "%s", st.message);
    qc_close(c);

    /* nothing reachable: qc_connect fails with UNAVAILABLE */
    const char *none[] = {dead};
    struct qc_options o = {.endpoints = none, .n_endpoints = 1, .dial_timeout_ms = 1000};
    c = (qc_client *)1;
    cr_assert_eq(qc_connect(&o, &c, &st), QC_EUNAVAILABLE);
    cr_assert_null(c);
    cr_assert_eq(st.code, QC_UNAVAILABLE);
    cr_assert(strstr(st.message, "refused"), "%s", st.message);

    /* bad endpoints (https:// and unix:// work now: tls_* tests below) */
    const char *bad[] = {"ftp://127.0.0.1:1"};
    o.endpoints = bad;
    cr_assert_eq(qc_connect(&o, &c, &st), -EINVAL);
    const char *bad2[] = {"127.0.0.1"};
    o.endpoints = bad2;
    cr_assert_eq(qc_connect(&o, &c, &st), -EINVAL);
    cr_assert_eq(st.code, QC_INVALID_ARGUMENT);
}

/* ---- flow control and large messages ---- */

Test(client, slow_watch_reader_is_bounded, .init = setup_one, .fini = teardown_all, .timeout = 300)
{
    const char *eps[] = {S1.ep};
    enum { BUF = 256 * 1024, N = 100, V = 64 * 1024 };
    struct qc_options o = {.endpoints = eps, .n_endpoints = 1, .stream_buffer = BUF};
    qc_client *c = NULL;
    struct qc_status st;
    cr_assert_eq(qc_connect(&o, &c, &st), 0);
    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_WATCH, &s), 0);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key = (ProtobufCBinaryData){3, (uint8_t *)"fc/"};
    cr.range_end = (ProtobufCBinaryData){3, (uint8_t *)"fc0"};
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    cr_assert_eq(qc_stream_send(s, &wr.base), 0);
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st), 0);
    protobuf_c_message_free_unpacked(m, NULL);

    /* 6.4 MiB of events while nobody reads the watch; the puts on the same
     * connection still go through */
    static char val[V];
    for (int i = 0; i < N; i++) {
        char k[16];
        int kl = snprintf(k, sizeof(k), "fc/%03d", i);
        memset(val, 'a' + i % 26, V);
        cr_assert_eq(qc_put(c, k, (size_t)kl, val, V, 0, NULL, &st), 0, "%d %s", i, st.message);
    }
    sleep_ms(300); /* give the server time to push (the bound holds regardless) */
    size_t peak = qc__stream_peak_buffered(s);
    cr_log_info("held %zu bytes for a reader that does not read", peak);
    cr_assert(peak <= 2 * BUF + V + 1024, "buffered %zu bytes for a reader that does not read",
              peak);
    /* the bound after reading: two windows plus the largest message (the
     * server batches events of a catching-up watcher into one message) */
    int got = 0;
    size_t largest = 0;
    while (got < N) {
        int r = qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 20000, &st);
        cr_assert_eq(r, 0, "recv %d (%d %s) after %d events", r, st.code, st.message, got);
        size_t len = protobuf_c_message_get_packed_size(m) + 5;
        if (len > largest)
            largest = len;
        Etcdserverpb__WatchResponse *w = (void *)m;
        for (size_t i = 0; i < w->n_events; i++, got++) {
            cr_assert_eq(w->events[i]->kv->value.len, V);
            cr_assert_eq(w->events[i]->kv->value.data[0], 'a' + got % 26);
        }
        FREE(w);
    }
    peak = qc__stream_peak_buffered(s);
    cr_assert(peak <= 2 * BUF + largest, "buffered %zu (largest message %zu)", peak, largest);
    qc_stream_free(s);
    qc_close(c);
}

Test(client, response_over_64_mib, .init = setup_one, .fini = teardown_all, .timeout = 300)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    struct qc_status st;
    enum { N = 50, V = 1400 * 1024 }; /* under the server's 1.5 MiB request limit */
    char *val = malloc(V);
    cr_assert(val);
    for (int i = 0; i < N; i++) {
        char k[16];
        int kl = snprintf(k, sizeof(k), "big/%02d", i);
        memset(val, 'A' + i % 26, V);
        cr_assert_eq(qc_put(c, k, (size_t)kl, val, V, 0, NULL, &st), 0, "%d %s", i, st.message);
    }
    free(val);
    Etcdserverpb__RangeResponse *rr = NULL;
    struct qc_get_opts o = {.range_end = "big0", .range_end_len = 4};
    int r = qc_get(c, "big/", 4, &o, &rr, &st);
    cr_assert_eq(r, 0, "%d %d %s", r, st.code, st.message);
    cr_assert_eq(rr->n_kvs, N);
    size_t total = 0;
    for (size_t i = 0; i < rr->n_kvs; i++) {
        total += rr->kvs[i]->value.len;
        cr_assert_eq(rr->kvs[i]->value.data[V / 2], 'A' + (int)i % 26);
    }
    cr_assert(total > (size_t)64 << 20, "%zu", total);
    FREE(rr);
    qc_close(c);
}

/* ---- leader loss, with fake members built on src/grpc ---- */

/* A fake member: one libuv loop thread with a grpc_server whose Put
 * answers UNAVAILABLE "etcdserver: no leader" (no_leader) or an empty
 * PutResponse. */
struct fake {
    uv_loop_t loop;
    uv_async_t stop;
    grpc_server *srv;
    pthread_t th;
    int no_leader, calls, port;
    char ep[64];
};

static void fake_put(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct fake *f = grpc_call_server_data(call);
    f->calls++;
    if (f->no_leader) {
        grpc_call_finish(call, QC_UNAVAILABLE, "etcdserver: no leader");
    } else {
        grpc_call_send(call, (const uint8_t *)"", 0);
        grpc_call_finish(call, QC_OK, NULL);
    }
}

static const struct grpc_method fake_methods[] = {
    {"/etcdserverpb.KV/Put", GRPC_UNARY, fake_put, NULL, NULL},
};

static void fake_stop_cb(uv_async_t *a)
{
    struct fake *f = a->data;
    grpc_server_close(f->srv, NULL, NULL);
    uv_close((uv_handle_t *)&f->stop, NULL);
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void fake_start(struct fake *f, int no_leader)
{
    memset(f, 0, sizeof(*f));
    f->no_leader = no_leader;
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    cr_assert_eq(uv_async_init(&f->loop, &f->stop, fake_stop_cb), 0);
    f->stop.data = f;
    cr_assert_eq(grpc_server_new(&f->loop, fake_methods, 1, NULL, f, &f->srv), 0);
    cr_assert_eq(grpc_server_listen(f->srv, "127.0.0.1", 0, &f->port), 0);
    snprintf(f->ep, sizeof(f->ep), "127.0.0.1:%d", f->port);
    cr_assert_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    uv_async_send(&f->stop);
    pthread_join(f->th, NULL);
    uv_loop_close(&f->loop);
}

Test(client, no_leader_switches_endpoint)
{
    struct fake a, b;
    fake_start(&a, 1);
    fake_start(&b, 0);
    const char *eps[] = {a.ep, b.ep};
    qc_client *c = connect_to(eps, 2);
    struct qc_status st;
    cr_assert_str_eq(qc_endpoint(c), a.ep);
    Etcdserverpb__PutResponse *pr = NULL;
    cr_assert_eq(qc_put(c, "k", 1, "v", 1, 0, &pr, &st), QC_ESTATUS);
    cr_assert_null(pr);
    cr_assert_eq(st.code, QC_UNAVAILABLE);
    cr_assert_str_eq(st.message, "etcdserver: no leader");
    /* the client gives up on the leaderless member for the next calls */
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(qc_put(c, "k", 1, "v", 1, 0, &pr, &st), 0, "%d %s", st.code, st.message);
        FREE(pr);
    }
    cr_assert_str_eq(qc_endpoint(c), b.ep);
    qc_close(c);
    fake_stop(&a);
    fake_stop(&b);
    cr_assert_eq(a.calls, 1);
    cr_assert_eq(b.calls, 5);
}

/* A first endpoint that accepts TCP but never speaks HTTP/2 (a listening
 * socket nobody serves, as a stopped process looks): the dial timeout
 * covers the handshake and the client moves on to the second. */
Test(client, silent_first_endpoint_times_out)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(l, 16), 0);
    socklen_t len = sizeof(a);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    char silent[64];
    snprintf(silent, sizeof(silent), "127.0.0.1:%d", ntohs(a.sin_port));
    struct fake b;
    fake_start(&b, 0);
    const char *eps[] = {silent, b.ep};
    struct qc_options o = {.endpoints = eps, .n_endpoints = 2, .dial_timeout_ms = 300};
    qc_client *c = NULL;
    struct qc_status st;
    cr_assert_eq(qc_connect(&o, &c, &st), 0, "%s", st.message);
    cr_assert_str_eq(qc_endpoint(c), b.ep);
    cr_assert_eq(qc_put(c, "k", 1, "v", 1, 0, NULL, &st), 0, "%s", st.message);
    qc_close(c);

    /* alone, it makes qc_connect fail with the reason */
    o.n_endpoints = 1;
    cr_assert_eq(qc_connect(&o, &c, &st), QC_EUNAVAILABLE);
    cr_assert_eq(st.code, QC_UNAVAILABLE);
    cr_assert(strstr(st.message, "handshake timeout"), "%s", st.message);
    fake_stop(&b);
    close(l);
}

/* ---- TLS: an https:// member with client-certificate auth; the
 * certificates are made with the openssl CLI in the test's dir ---- */

static char tls_dir[128];

static void tls_sh(const char *cmd)
{
    char full[2048];
    snprintf(full, sizeof(full), "cd %s && (%s) >/dev/null 2>&1", tls_dir, cmd);
    cr_assert_eq(system(full), 0, "%s", cmd);
}

#define EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static char tls_paths[6][192];

static void setup_tls(void)
{
    snprintf(tls_dir, sizeof(tls_dir), "/tmp/qc-tls-XXXXXX");
    cr_assert(mkdtemp(tls_dir));
    tls_sh("printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
           "> san.ext");
    tls_sh("openssl req -x509 " EC " -keyout ca.key -out ca.crt -days 30 -subj /CN=ca");
    tls_sh("openssl req " EC " -keyout server.key -out server.csr -subj /CN=server && "
           "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
           "-out server.crt -days 30 -extfile san.ext");
    tls_sh("openssl req " EC " -keyout client.key -out client.csr -subj /CN=root && "
           "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
           "-out client.crt -days 30 -extfile san.ext");
    tls_sh("openssl req -x509 " EC " -keyout ca2.key -out ca2.crt -days 30 -subj /CN=ca2");
    const char *names[] = {"ca.crt", "server.crt", "server.key", "client.crt", "client.key",
                           "ca2.crt"};
    for (int i = 0; i < 6; i++)
        snprintf(tls_paths[i], sizeof(tls_paths[i]), "%s/%s", tls_dir, names[i]);
    const char *extra[] = {"--cert-file",   tls_paths[1], "--key-file", tls_paths[2],
                           "--trusted-ca-file", tls_paths[0], "--client-cert-auth", NULL};
    memcpy(spawn_extra, extra, sizeof(extra));
    int cport = free_port(), pport = free_port();
    char ic[96];
    snprintf(ic, sizeof(ic), "default=http://127.0.0.1:%d", pport);
    /* srv_spawn writes http:// client URLs: an https one is passed again,
     * later flags win (Go's flag package, and ours) */
    char curl[64];
    snprintf(curl, sizeof(curl), "https://127.0.0.1:%d", cport);
    static char curl_s[64];
    snprintf(curl_s, sizeof(curl_s), "%s", curl);
    spawn_extra[7] = "--listen-client-urls";
    spawn_extra[8] = curl_s;
    spawn_extra[9] = "--advertise-client-urls";
    spawn_extra[10] = curl_s;
    spawn_extra[11] = NULL;
    srv_spawn(&S1, "default", cport, pport, ic);
    memset(spawn_extra, 0, sizeof(spawn_extra));
    snprintf(S1.ep, sizeof(S1.ep), "%s", curl_s);
}

static void teardown_tls(void)
{
    teardown_all();
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tls_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tls_dir);
}

static int tls_connect(const char *ep, const char *ca, const char *cert, const char *key,
                       int skip, qc_client **c, struct qc_status *st)
{
    const char *eps[] = {ep};
    struct qc_options o = {.endpoints = eps,
                           .n_endpoints = 1,
                           .dial_timeout_ms = 2000,
                           .ca_file = ca,
                           .cert_file = cert,
                           .key_file = key,
                           .insecure_skip_verify = skip};
    *c = NULL;
    return qc_connect(&o, c, st);
}

Test(client, tls_with_client_certificate, .init = setup_tls, .fini = teardown_tls)
{
    qc_client *c = NULL;
    struct qc_status st;
    int r = -1;
    /* wait until it serves */
    for (int i = 0; i < 400 && r != 0; i++) {
        r = tls_connect(S1.ep, tls_paths[0], tls_paths[3], tls_paths[4], 0, &c, &st);
        if (r == 0 && (r = qc_put(c, "tls", 3, "yes", 3, 0, NULL, &st)) != 0) {
            qc_close(c);
            c = NULL;
        }
        if (r != 0)
            sleep_ms(50);
    }
    cr_assert_eq(r, 0, "%d %s", r, st.message);
    Etcdserverpb__RangeResponse *g = NULL;
    cr_assert_eq(qc_get(c, "tls", 3, NULL, &g, &st), 0, "%s", st.message);
    cr_assert_eq(g->n_kvs, 1);
    cr_assert_eq(memcmp(g->kvs[0]->value.data, "yes", 3), 0);
    FREE(g);
    /* a stream too */
    qc_stream *s = NULL;
    cr_assert_eq(qc_stream_open(c, QC_METHOD_WATCH, &s), 0);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key = (ProtobufCBinaryData){3, (uint8_t *)"tls"};
    Etcdserverpb__WatchRequest wr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    wr.create_request = &cr;
    cr_assert_eq(qc_stream_send(s, &wr.base), 0);
    ProtobufCMessage *m = NULL;
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st), 0);
    FREE((Etcdserverpb__WatchResponse *)m);
    /* a big value: many TLS records each way */
    static char big[1 << 20];
    memset(big, 'b', sizeof(big));
    cr_assert_eq(qc_put(c, "tls", 3, big, sizeof(big), 0, NULL, &st), 0, "%s", st.message);
    cr_assert_eq(qc_stream_recv(s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st), 0);
    Etcdserverpb__WatchResponse *w = (void *)m;
    cr_assert_eq(w->n_events, 1);
    cr_assert_eq(w->events[0]->kv->value.len, sizeof(big));
    FREE(w);
    qc_stream_free(s);
    qc_close(c);

    /* no scheme: TLS because TLS options are given, as etcdctl */
    cr_assert_eq(tls_connect(S1.ep + 8, tls_paths[0], tls_paths[3], tls_paths[4], 0, &c, &st), 0,
                 "%s", st.message);
    qc_close(c);
    /* verification skipped: any server certificate goes */
    cr_assert_eq(tls_connect(S1.ep, NULL, tls_paths[3], tls_paths[4], 1, &c, &st), 0, "%s",
                 st.message);
    qc_close(c);
}

Test(client, tls_refusals, .init = setup_tls, .fini = teardown_tls)
{
    qc_client *c = NULL;
    struct qc_status st;
    int r = -1;
    for (int i = 0; i < 400 && r != 0; i++) {
        r = tls_connect(S1.ep, tls_paths[0], tls_paths[3], tls_paths[4], 0, &c, &st);
        if (r != 0)
            sleep_ms(50);
    }
    cr_assert_eq(r, 0, "%s", st.message);
    qc_close(c);
    /* the server's certificate is not from the CA we trust */
    r = tls_connect(S1.ep, tls_paths[5], tls_paths[3], tls_paths[4], 0, &c, &st);
    cr_assert_eq(r, QC_EUNAVAILABLE);
    cr_assert(strstr(st.message, "certificate verify failed") != NULL, "%s", st.message);
    /* no client certificate: the server refuses */
    r = tls_connect(S1.ep, tls_paths[0], NULL, NULL, 0, &c, &st);
    cr_assert_eq(r, QC_EUNAVAILABLE, "%s", st.message);
    /* plain HTTP/2 to the TLS port */
    char plain[80];
    snprintf(plain, sizeof(plain), "http://%s", S1.ep + 8);
    const char *eps[] = {plain};
    struct qc_options o = {.endpoints = eps, .n_endpoints = 1, .dial_timeout_ms = 2000};
    cr_assert_eq(qc_connect(&o, &c, &st), QC_EUNAVAILABLE);
    /* bad files are the caller's error */
    r = tls_connect(S1.ep, "/nonexistent/ca.crt", NULL, NULL, 0, &c, &st);
    cr_assert_eq(r, -EINVAL);
    cr_assert_eq(st.code, QC_INVALID_ARGUMENT);
    cr_assert(strstr(st.message, "/nonexistent/ca.crt") != NULL, "%s", st.message);
    /* the member still serves */
    cr_assert_eq(tls_connect(S1.ep, tls_paths[0], tls_paths[3], tls_paths[4], 0, &c, &st), 0);
    cr_assert_eq(qc_put(c, "still", 5, "up", 2, 0, NULL, &st), 0, "%s", st.message);
    qc_close(c);
}

/* grpc_server_listen_tls and grpc_call_tls_common_name (src/grpc) seen
 * through the client: a fake member on TLS whose Range answers one key,
 * the common name of the caller's verified certificate (or "-"). */
#include "tls/tls.h"

static void fake_whoami(grpc_call *call, const uint8_t *msg, size_t len)
{
    const char *cn = grpc_call_tls_common_name(call);
    Mvccpb__KeyValue kv = MVCCPB__KEY_VALUE__INIT;
    kv.key.data = (uint8_t *)(cn ? cn : "-");
    kv.key.len = strlen((const char *)kv.key.data);
    Mvccpb__KeyValue *kvs[] = {&kv};
    Etcdserverpb__RangeResponse rr = ETCDSERVERPB__RANGE_RESPONSE__INIT;
    rr.kvs = kvs;
    rr.n_kvs = 1;
    rr.count = 1;
    uint8_t out[512];
    size_t n = protobuf_c_message_pack(&rr.base, out);
    grpc_call_send(call, out, n);
    grpc_call_finish(call, QC_OK, NULL);
}

static const struct grpc_method whoami_methods[] = {
    {"/etcdserverpb.KV/Range", GRPC_UNARY, fake_whoami, NULL, NULL},
};

static void fake_tls_start(struct fake *f, tls_ctx *ctx)
{
    memset(f, 0, sizeof(*f));
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    cr_assert_eq(uv_async_init(&f->loop, &f->stop, fake_stop_cb), 0);
    f->stop.data = f;
    struct grpc_server_options go = {.tls = ctx};
    cr_assert_eq(grpc_server_new(&f->loop, whoami_methods, 1, &go, f, &f->srv), 0);
    cr_assert_eq(grpc_server_listen_tls(f->srv, "127.0.0.1", 0, &f->port), 0);
    snprintf(f->ep, sizeof(f->ep), "https://127.0.0.1:%d", f->port);
    cr_assert_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static char *whoami(const char *ep, const char *cert, const char *key)
{
    qc_client *c = NULL;
    struct qc_status st;
    cr_assert_eq(tls_connect(ep, tls_paths[0], cert, key, 0, &c, &st), 0, "%s", st.message);
    Etcdserverpb__RangeResponse *r = NULL;
    cr_assert_eq(qc_get(c, "x", 1, NULL, &r, &st), 0, "%s", st.message);
    cr_assert_eq(r->n_kvs, 1);
    char *out = strndup((const char *)r->kvs[0]->key.data, r->kvs[0]->key.len);
    FREE(r);
    qc_close(c);
    return out;
}

static void setup_tls_certs(void)
{
    setup_tls();
    srv_kill(&S1); /* only the certificates are wanted here */
}

Test(client, grpc_tls_common_name, .init = setup_tls_certs, .fini = teardown_tls)
{
    char err[512] = "";
    struct tls_config cfg = {.role = TLS_SERVER,
                             .cert_file = tls_paths[1],
                             .key_file = tls_paths[2],
                             .ca_file = tls_paths[0],
                             .client_cert_auth = true,
                             .alpn = "h2"};
    tls_ctx *auth = NULL, *open = NULL;
    cr_assert_eq(tls_ctx_new(&cfg, &auth, err, sizeof(err)), 0, "%s", err);
    cfg.ca_file = NULL;
    cfg.client_cert_auth = false;
    cr_assert_eq(tls_ctx_new(&cfg, &open, err, sizeof(err)), 0, "%s", err);
    struct fake a, b;
    fake_tls_start(&a, auth);
    fake_tls_start(&b, open);
    char *cn = whoami(a.ep, tls_paths[3], tls_paths[4]);
    cr_assert_str_eq(cn, "root");
    free(cn);
    /* a server that does not verify client certificates reports none */
    cn = whoami(b.ep, tls_paths[3], tls_paths[4]);
    cr_assert_str_eq(cn, "-");
    free(cn);
    cn = whoami(b.ep, NULL, NULL);
    cr_assert_str_eq(cn, "-");
    free(cn);
    /* plain listeners are refused a TLS context they do not have */
    grpc_server *plain = NULL;
    uv_loop_t l;
    uv_loop_init(&l);
    cr_assert_eq(grpc_server_new(&l, whoami_methods, 1, NULL, NULL, &plain), 0);
    cr_assert_eq(grpc_server_listen_tls(plain, "127.0.0.1", 0, NULL), -EINVAL);
    grpc_server_close(plain, NULL, NULL);
    uv_run(&l, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&l), 0);
    fake_stop(&a);
    fake_stop(&b);
    tls_ctx_free(auth);
    tls_ctx_free(open);
}

/* ---- auth ---- */

#define AUTH_CALL(c, M, REQ, RESP_T, DESC)                                                         \
    do {                                                                                           \
        RESP_T *resp_ = NULL;                                                                      \
        struct qc_status st_;                                                                      \
        int r_ = qc_unary(c, "/etcdserverpb.Auth/" M, &(REQ).base, &DESC,                          \
                          (ProtobufCMessage **)&resp_, &st_);                                      \
        cr_assert_eq(r_, 0, M ": %s", st_.message);                                                \
        FREE(resp_);                                                                               \
    } while (0)

/* qc_authenticate logs in, calls carry the token, and an expired token
 * (--auth-token-ttl=1) or a bogus one is renewed with the kept
 * credentials without the caller seeing it. */
Test(client, auth_login_and_token_renewal, .init = setup_ttl_one, .fini = teardown_all,
     .timeout = 120)
{
    const char *eps[] = {S1.ep};
    qc_client *c = connect_to(eps, 1);
    Etcdserverpb__AuthUserAddRequest ua = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
    ua.name = "root";
    ua.password = "rpw";
    AUTH_CALL(c, "UserAdd", ua, Etcdserverpb__AuthUserAddResponse,
              etcdserverpb__auth_user_add_response__descriptor);
    Etcdserverpb__AuthRoleAddRequest ra = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
    ra.name = "root";
    AUTH_CALL(c, "RoleAdd", ra, Etcdserverpb__AuthRoleAddResponse,
              etcdserverpb__auth_role_add_response__descriptor);
    Etcdserverpb__AuthUserGrantRoleRequest g = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
    g.user = "root";
    g.role = "root";
    AUTH_CALL(c, "UserGrantRole", g, Etcdserverpb__AuthUserGrantRoleResponse,
              etcdserverpb__auth_user_grant_role_response__descriptor);
    Etcdserverpb__AuthEnableRequest en = ETCDSERVERPB__AUTH_ENABLE_REQUEST__INIT;
    AUTH_CALL(c, "AuthEnable", en, Etcdserverpb__AuthEnableResponse,
              etcdserverpb__auth_enable_response__descriptor);

    struct qc_status st;
    cr_assert_lt(qc_put(c, "k", 1, "v", 1, 0, NULL, &st), 0);
    cr_assert_eq(st.code, QC_INVALID_ARGUMENT);
    cr_assert_str_eq(st.message, "etcdserver: user name is empty");
    cr_assert_lt(qc_authenticate(c, "root", "wrong", &st), 0);
    cr_assert_str_eq(st.message, "etcdserver: authentication failed, invalid user ID or password");
    cr_assert_eq(qc_authenticate(c, "root", "rpw", &st), 0, "%s", st.message);
    cr_assert_eq(qc_put(c, "k", 1, "v1", 2, 0, NULL, &st), 0, "%s", st.message);
    pthread_mutex_lock(&c->mu);
    char *first = strdup(c->token);
    pthread_mutex_unlock(&c->mu);

    /* unused for three times its TTL, the token is gone on the server */
    sleep_ms(3000);
    cr_assert_eq(qc_put(c, "k", 1, "v2", 2, 0, NULL, &st), 0, "after expiry: %s", st.message);
    pthread_mutex_lock(&c->mu);
    cr_assert_str_neq(c->token, first, "a new token was taken");
    pthread_mutex_unlock(&c->mu);
    free(first);

    /* a token nobody issued: refused, then renewed */
    cr_assert_eq(qc_set_token(c, "bogus"), 0);
    Etcdserverpb__RangeResponse *r = NULL;
    cr_assert_eq(qc_get(c, "k", 1, NULL, &r, &st), 0, "%s", st.message);
    cr_assert_eq(r->n_kvs, 1);
    cr_assert_eq(memcmp(r->kvs[0]->value.data, "v2", 2), 0);
    FREE(r);

    /* without credentials to renew it, the refusal reaches the caller */
    qc_client *c2 = connect_to(eps, 1);
    cr_assert_eq(qc_set_token(c2, "bogus"), 0);
    cr_assert_lt(qc_get(c2, "k", 1, NULL, NULL, &st), 0);
    cr_assert_eq(st.code, QC_UNAUTHENTICATED);
    cr_assert_str_eq(st.message, "etcdserver: invalid auth token");
    qc_close(c2);
    qc_close(c);
}
