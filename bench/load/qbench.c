/* bench/load/qbench.c: a load generator like etcd's `benchmark` tool, built
 * on libquorum-client (api/quorum/client.h). It talks to quorum and to etcd
 * alike; bench/load/load-bench.py runs it against both and prints ratios.
 *
 *   qbench [--endpoints h:p,...] [--conns N] [--clients N] [--total N]
 *          [--key-size N] [--val-size N] [--key-space N] [--sequential-keys]
 *          [--watchers N] [--streams N] [--duration S] [--pause-ms N]
 *          [--no-preload] [--timeout-ms N] [--key-prefix P] [--ttl S]
 *          [--cacert F --cert F --key F]
 *          put | range [--consistency l|s] | txn-put | lease-keepalive | lease-put | watch
 *
 * --clients threads share --conns clients (each one HTTP/2 connection) round
 * robin and together issue --total requests, each waiting for its answer
 * before the next (like etcd's benchmark). Keys are --key-size bytes, drawn
 * at random from --key-space (or in sequence); range reads one key of that
 * space (preloaded first). lease-keepalive grants one lease per client and
 * sends keep-alives on one stream per client, each waiting for its answer.
 * lease-put grants a lease of --ttl seconds (default 15) and puts a key
 * with it: one "request" is the pair, its latency both calls'.
 * --key-prefix puts P before each key's number (the key stays --key-size
 * bytes), so that a run's keys lie in a range of their own.
 * watch (etcd's watch-latency): --watchers watchers of one key, spread over
 * --streams Watch streams (round robin over the clients), then --total Puts
 * of that key by --clients threads; every watcher must see every Put. Its
 * "ok" counts events received, "req/s" is events per second, and latency is
 * from a Put's send to its event's arrival at a watcher.
 * --duration stops the clients after S seconds instead of after --total
 * requests, and --pause-ms makes each client sleep between requests: with
 * one client that is a probe of how long a single request can wait while
 * something else runs. --no-preload makes range read keys already there.
 * --timeout-ms is each request's deadline (a request past it fails).
 * SIGINT or SIGTERM ends the run early, with its line printed as usual.
 * Prints one line: requests, seconds, req/s and latency percentiles; exits
 * non-zero if any request failed. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quorum/client.h"

enum op { OP_PUT, OP_RANGE, OP_TXN_PUT, OP_KEEPALIVE, OP_LEASE_PUT, OP_WATCH };

static struct {
    const char *endpoints;
    int conns, clients;
    long total;
    int key_size, val_size;
    long key_space;
    int sequential;
    int serializable;
    enum op op;
    long watchers, streams;
    long duration_s, pause_ms, timeout_ms;
    int no_preload;
    const char *key_prefix;
    long ttl;
} cfg = {"127.0.0.1:2379", 1, 1, 10000, 8, 8, 1, 0, 0, OP_PUT, 100, 10, 0, 0, 0, 0, "", 15};
static double deadline_s; /* --duration: when the clients stop */
static volatile sig_atomic_t stop_now; /* SIGINT/SIGTERM: stop, and report */

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_now = 1;
}

static qc_client **conns;
static int64_t *sent_ns; /* watch: each Put's send time, by number */
static long next_req;
static long failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char first_error[300];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long take(void)
{
    return __atomic_fetch_add(&next_req, 1, __ATOMIC_RELAXED);
}

static void fail(int rc, const struct qc_status *st)
{
    pthread_mutex_lock(&mu);
    if (failures++ == 0)
        snprintf(first_error, sizeof(first_error), "%s (%s)", st->message, qc_strerror(rc));
    pthread_mutex_unlock(&mu);
}

static void make_key(char *k, long n)
{
    /* etcd's benchmark: the key number in the first bytes, zero padded */
    memset(k, 0, (size_t)cfg.key_size);
    char tmp[64];
    int len = snprintf(tmp, sizeof(tmp), "%.20s%ld", cfg.key_prefix, n);
    memcpy(k, tmp, (size_t)(len < cfg.key_size ? len : cfg.key_size));
}

struct worker {
    int idx;
    unsigned seed;
    double *lat;
    size_t n_lat, cap_lat;
};

static void record(struct worker *w, double d)
{
    if (w->n_lat == w->cap_lat) {
        w->cap_lat = w->cap_lat ? w->cap_lat * 2 : 4096;
        w->lat = realloc(w->lat, w->cap_lat * sizeof(double));
        if (w->lat == NULL)
            abort();
    }
    w->lat[w->n_lat++] = d;
}

static void *run(void *arg)
{
    struct worker *w = arg;
    qc_client *c = conns[w->idx % cfg.conns];
    char *key = malloc((size_t)cfg.key_size), *val = malloc((size_t)cfg.val_size + 1);
    memset(val, 'v', (size_t)cfg.val_size);
    struct qc_status st;
    qc_stream *ka = NULL;
    int64_t lease = 0;
    if (cfg.op == OP_KEEPALIVE) {
        Etcdserverpb__LeaseGrantResponse *g = NULL;
        int rc = qc_lease_grant(c, 600, 0, &g, &st);
        if (rc != 0 || qc_stream_open(c, "/etcdserverpb.Lease/LeaseKeepAlive", &ka) != 0) {
            fail(rc, &st);
            return NULL;
        }
        lease = g->id;
        protobuf_c_message_free_unpacked(&g->base, NULL);
    }
    for (long n; (n = take()) < cfg.total;) {
        if (stop_now || (cfg.duration_s > 0 && now_s() >= deadline_s))
            break;
        if (cfg.pause_ms > 0) {
            struct timespec ts = {cfg.pause_ms / 1000, (cfg.pause_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        long k = cfg.sequential ? n % cfg.key_space : (long)(rand_r(&w->seed) % cfg.key_space);
        make_key(key, cfg.op == OP_WATCH ? 0 : k);
        double t0 = now_s();
        int rc = 0;
        switch (cfg.op) {
        case OP_WATCH:
            /* the value names the Put: its events are matched to its send time */
            snprintf(val, (size_t)cfg.val_size, "%ld", n);
            __atomic_store_n(&sent_ns[n], (int64_t)(t0 * 1e9), __ATOMIC_RELEASE);
            /* fall through */
        case OP_PUT:
            rc = qc_put(c, key, (size_t)cfg.key_size, val, (size_t)cfg.val_size, 0, NULL, &st);
            break;
        case OP_RANGE: {
            Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
            r.key = (ProtobufCBinaryData){(size_t)cfg.key_size, (uint8_t *)key};
            r.serializable = cfg.serializable;
            Etcdserverpb__RangeResponse *resp = NULL;
            rc = qc_range(c, &r, &resp, &st);
            if (resp)
                protobuf_c_message_free_unpacked(&resp->base, NULL);
            break;
        }
        case OP_TXN_PUT: {
            Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
            p.key = (ProtobufCBinaryData){(size_t)cfg.key_size, (uint8_t *)key};
            p.value = (ProtobufCBinaryData){(size_t)cfg.val_size, (uint8_t *)val};
            Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
            op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            op.request_put = &p;
            Etcdserverpb__RequestOp *ops[1] = {&op};
            Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
            t.success = ops;
            t.n_success = 1;
            Etcdserverpb__TxnResponse *resp = NULL;
            rc = qc_txn(c, &t, &resp, &st);
            if (resp)
                protobuf_c_message_free_unpacked(&resp->base, NULL);
            break;
        }
        case OP_LEASE_PUT: {
            Etcdserverpb__LeaseGrantResponse *g = NULL;
            rc = qc_lease_grant(c, cfg.ttl, 0, &g, &st);
            if (rc == 0)
                rc = qc_put(c, key, (size_t)cfg.key_size, val, (size_t)cfg.val_size, g->id, NULL,
                            &st);
            if (g)
                protobuf_c_message_free_unpacked(&g->base, NULL);
            break;
        }
        case OP_KEEPALIVE: {
            Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
            r.id = lease;
            ProtobufCMessage *m = NULL;
            rc = qc_stream_send(ka, &r.base);
            if (rc == 0)
                rc = qc_stream_recv(ka, &etcdserverpb__lease_keep_alive_response__descriptor, &m,
                                    10000, &st);
            if (rc == 0 && ((Etcdserverpb__LeaseKeepAliveResponse *)m)->ttl <= 0)
                rc = -ENOENT;
            if (m)
                protobuf_c_message_free_unpacked(m, NULL);
            if (rc > 0)
                rc = QC_EUNAVAILABLE; /* the stream ended */
            break;
        }
        }
        if (rc != 0)
            fail(rc, &st);
        else
            record(w, now_s() - t0);
    }
    if (ka)
        qc_stream_free(ka);
    free(key);
    free(val);
    return NULL;
}

/* ---- watch ---- */

struct watcher_stream {
    struct worker w; /* latencies */
    qc_stream *s;
    long n_watchers;
    long events;
};

/* watch_open creates this stream's watchers and waits until all are
 * created. */
static int watch_open(struct watcher_stream *ws, qc_client *c)
{
    struct qc_status st;
    int rc = qc_stream_open(c, QC_METHOD_WATCH, &ws->s);
    char *key = malloc((size_t)cfg.key_size);
    make_key(key, 0);
    for (long i = 0; rc == 0 && i < ws->n_watchers; i++) {
        Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
        cr.key = (ProtobufCBinaryData){(size_t)cfg.key_size, (uint8_t *)key};
        Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
        r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
        r.create_request = &cr;
        rc = qc_stream_send(ws->s, &r.base);
    }
    free(key);
    for (long created = 0; rc == 0 && created < ws->n_watchers;) {
        ProtobufCMessage *m = NULL;
        rc = qc_stream_recv(ws->s, &etcdserverpb__watch_response__descriptor, &m, 10000, &st);
        if (rc == 0 && ((Etcdserverpb__WatchResponse *)m)->created)
            created++;
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
    }
    if (rc != 0)
        fail(rc > 0 ? QC_EUNAVAILABLE : rc, &st);
    return rc;
}

static void *watch_run(void *arg)
{
    struct watcher_stream *ws = arg;
    long want = ws->n_watchers * cfg.total;
    struct qc_status st;
    while (ws->events < want) {
        ProtobufCMessage *m = NULL;
        int rc = qc_stream_recv(ws->s, &etcdserverpb__watch_response__descriptor, &m, 30000, &st);
        if (rc != 0) {
            fail(rc > 0 ? QC_EUNAVAILABLE : rc, &st);
            break;
        }
        double now = now_s();
        Etcdserverpb__WatchResponse *r = (Etcdserverpb__WatchResponse *)m;
        for (size_t i = 0; i < r->n_events; i++) {
            const Mvccpb__KeyValue *kv = r->events[i]->kv;
            char num[32] = "";
            if (kv && kv->value.len > 0)
                snprintf(num, sizeof(num), "%.*s",
                         (int)(kv->value.len < 31 ? kv->value.len : 31), kv->value.data);
            long n = atol(num);
            if (n < 0 || n >= cfg.total)
                continue;
            int64_t sent = __atomic_load_n(&sent_ns[n], __ATOMIC_ACQUIRE);
            record(&ws->w, now - (double)sent / 1e9);
            ws->events++;
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int usage(void)
{
    fprintf(stderr, "usage: qbench [--endpoints h:p,...] [--conns N] [--clients N] [--total N] "
                    "[--key-size N] [--val-size N] [--key-space N] [--sequential-keys] "
                    "[--watchers N] [--streams N] [--duration S] [--pause-ms N] "
                    "[--no-preload] [--timeout-ms N] [--key-prefix P] [--ttl S] "
                    "[--cacert F --cert F --key F] "
                    "put | range [--consistency l|s] | txn-put | lease-keepalive | lease-put | "
                    "watch\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *cmd = NULL;
    const char *tls_ca = NULL, *tls_cert = NULL, *tls_key = NULL; /* TLS, as etcdctl's */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NUMFLAG(name, dst)                                                                         \
    if (strcmp(a, name) == 0 && v) {                                                               \
        dst = atol(v);                                                                             \
        i++;                                                                                       \
        continue;                                                                                  \
    }
        NUMFLAG("--conns", cfg.conns)
        NUMFLAG("--clients", cfg.clients)
        NUMFLAG("--total", cfg.total)
        NUMFLAG("--key-size", cfg.key_size)
        NUMFLAG("--val-size", cfg.val_size)
        NUMFLAG("--key-space", cfg.key_space)
        NUMFLAG("--watchers", cfg.watchers)
        NUMFLAG("--streams", cfg.streams)
        NUMFLAG("--duration", cfg.duration_s)
        NUMFLAG("--pause-ms", cfg.pause_ms)
        NUMFLAG("--timeout-ms", cfg.timeout_ms)
        NUMFLAG("--ttl", cfg.ttl)
        if (strcmp(a, "--endpoints") == 0 && v) {
            cfg.endpoints = argv[++i];
        } else if (strcmp(a, "--key-prefix") == 0 && v) {
            cfg.key_prefix = argv[++i];
        } else if (strcmp(a, "--cacert") == 0 && v) {
            tls_ca = argv[++i];
        } else if (strcmp(a, "--cert") == 0 && v) {
            tls_cert = argv[++i];
        } else if (strcmp(a, "--key") == 0 && v) {
            tls_key = argv[++i];
        } else if (strcmp(a, "--sequential-keys") == 0) {
            cfg.sequential = 1;
        } else if (strcmp(a, "--no-preload") == 0) {
            cfg.no_preload = 1;
        } else if (strcmp(a, "--consistency") == 0 && v) {
            cfg.serializable = strcmp(argv[++i], "s") == 0;
        } else if (a[0] != '-' && cmd == NULL) {
            cmd = a;
        } else {
            return usage();
        }
    }
    if (cmd == NULL || cfg.conns < 1 || cfg.clients < 1 || cfg.total < 1 || cfg.key_size < 1 ||
        cfg.key_space < 1 || cfg.watchers < 1 || cfg.streams < 1)
        return usage();
    if (strcmp(cmd, "put") == 0)
        cfg.op = OP_PUT;
    else if (strcmp(cmd, "range") == 0)
        cfg.op = OP_RANGE;
    else if (strcmp(cmd, "txn-put") == 0)
        cfg.op = OP_TXN_PUT;
    else if (strcmp(cmd, "lease-keepalive") == 0)
        cfg.op = OP_KEEPALIVE;
    else if (strcmp(cmd, "lease-put") == 0)
        cfg.op = OP_LEASE_PUT;
    else if (strcmp(cmd, "watch") == 0)
        cfg.op = OP_WATCH;
    else
        return usage();

    char *eps = strdup(cfg.endpoints);
    const char *list[16];
    size_t n_eps = 0;
    for (char *save = NULL, *t = strtok_r(eps, ",", &save); t && n_eps < 16;
         t = strtok_r(NULL, ",", &save))
        list[n_eps++] = t;
    conns = calloc((size_t)cfg.conns, sizeof(*conns));
    for (int i = 0; i < cfg.conns; i++) {
        struct qc_options o = {.endpoints = list,
                               .n_endpoints = n_eps,
                               .call_timeout_ms = (int)cfg.timeout_ms,
                               .ca_file = tls_ca,
                               .cert_file = tls_cert,
                               .key_file = tls_key};
        struct qc_status st;
        if (qc_connect(&o, &conns[i], &st) != 0) {
            fprintf(stderr, "qbench: cannot connect: %s\n", st.message);
            return 1;
        }
    }
    if (cfg.duration_s > 0)
        cfg.total = __LONG_MAX__; /* until the time is up */
    if (cfg.op == OP_RANGE && !cfg.no_preload) { /* the keys a range may read */
        char *key = calloc(1, (size_t)cfg.key_size), *val = calloc(1, (size_t)cfg.val_size + 1);
        memset(val, 'v', (size_t)cfg.val_size);
        for (long k = 0; k < cfg.key_space; k++) {
            make_key(key, k);
            struct qc_status st;
            if (qc_put(conns[0], key, (size_t)cfg.key_size, val, (size_t)cfg.val_size, 0, NULL,
                       &st) != 0) {
                fprintf(stderr, "qbench: preload failed: %s\n", st.message);
                return 1;
            }
        }
        free(key);
        free(val);
    }
    if (cfg.val_size < 21)
        cfg.val_size = 21; /* watch: room for the Put's number */
    struct watcher_stream *wst = NULL;
    pthread_t *wth = NULL;
    long n_streams = cfg.op == OP_WATCH ? cfg.streams : 0;
    if (cfg.op == OP_WATCH) {
        sent_ns = calloc((size_t)cfg.total, sizeof(*sent_ns));
        wst = calloc((size_t)n_streams, sizeof(*wst));
        wth = calloc((size_t)n_streams, sizeof(*wth));
        for (long i = 0; i < n_streams; i++) {
            wst[i].n_watchers = cfg.watchers / n_streams + (i < cfg.watchers % n_streams);
            if (watch_open(&wst[i], conns[i % cfg.conns]) != 0) {
                fprintf(stderr, "qbench: creating watchers failed: %s\n", first_error);
                return 1;
            }
        }
        for (long i = 0; i < n_streams; i++)
            pthread_create(&wth[i], NULL, watch_run, &wst[i]);
    }
    struct worker *ws = calloc((size_t)cfg.clients, sizeof(*ws));
    pthread_t *th = calloc((size_t)cfg.clients, sizeof(*th));
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    double t0 = now_s();
    deadline_s = t0 + (double)cfg.duration_s;
    for (int i = 0; i < cfg.clients; i++) {
        ws[i].idx = i;
        ws[i].seed = (unsigned)(i * 7919 + 1);
        pthread_create(&th[i], NULL, run, &ws[i]);
    }
    for (int i = 0; i < cfg.clients; i++)
        pthread_join(th[i], NULL);
    for (long i = 0; i < n_streams; i++)
        pthread_join(wth[i], NULL);
    double secs = now_s() - t0;
    /* watch: the latencies are the watchers' (the Puts' are not reported) */
    struct worker **from = calloc((size_t)(cfg.clients + n_streams), sizeof(*from));
    size_t n_from = 0;
    if (cfg.op == OP_WATCH)
        for (long i = 0; i < n_streams; i++)
            from[n_from++] = &wst[i].w;
    else
        for (int i = 0; i < cfg.clients; i++)
            from[n_from++] = &ws[i];
    size_t n = 0;
    for (size_t i = 0; i < n_from; i++)
        n += from[i]->n_lat;
    double *all = malloc((n ? n : 1) * sizeof(double));
    size_t k = 0;
    for (size_t i = 0; i < n_from; i++) {
        memcpy(all + k, from[i]->lat, from[i]->n_lat * sizeof(double));
        k += from[i]->n_lat;
    }
    for (int i = 0; i < cfg.clients; i++)
        free(ws[i].lat);
    for (long i = 0; i < n_streams; i++) {
        free(wst[i].w.lat);
        qc_stream_free(wst[i].s);
    }
    if (cfg.op == OP_WATCH && (long)n != cfg.total * cfg.watchers && failures == 0) {
        failures = 1;
        snprintf(first_error, sizeof(first_error), "%zu events of %ld", n,
                 cfg.total * cfg.watchers);
    }
    free(from);
    free(wst);
    free(wth);
    free(sent_ns);
    qsort(all, n, sizeof(double), cmp_d);
#define PCT(p) (n ? all[(size_t)((double)(n - 1) * (p))] * 1e3 : 0.0)
    printf("qbench %s: %zu ok, %ld failed, %.2fs, %.0f req/s, latency ms p50 %.3f p90 %.3f "
           "p99 %.3f p99.9 %.3f max %.3f\n",
           cmd, n, failures, secs, (double)n / secs, PCT(0.5), PCT(0.9), PCT(0.99), PCT(0.999),
           n ? all[n - 1] * 1e3 : 0.0);
    if (failures)
        fprintf(stderr, "qbench: first failure: %s\n", first_error);
    for (int i = 0; i < cfg.conns; i++)
        qc_close(conns[i]);
    free(all);
    free(ws);
    free(th);
    free(conns);
    free(eps);
    return failures ? 1 : 0;
}
