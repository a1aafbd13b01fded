/* bench/zk/zk-bench.c: a ZooKeeper load generator on ZooKeeper's own C
 * client library (libzookeeper-mt), so quorum's ZooKeeper face and Apache
 * ZooKeeper are measured with the same client. Not a test: run through
 * bench/zk/zk-bench.py (see bench/zk/README.md).
 *
 *   zk-bench HOST:PORT OP SECONDS INFLIGHT [VALUE_SIZE [KEYS]]
 *
 * OP is create, set, get or exists. For set, get and exists, KEYS nodes
 * (default 1000) are created first under a fresh parent; then for
 * SECONDS, INFLIGHT asynchronous requests are kept outstanding (each
 * completion issues the next). Prints one line:
 *   op=get ops=123456 seconds=10.00 rate=12345.6 errors=0
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define THREADED /* the synchronous calls of libzookeeper-mt */
#include <zookeeper/zookeeper.h>

static zhandle_t *zh;
static atomic_long done_ops, errors, issued;
static atomic_int first_error; /* the first error code seen, 0 if none */

static void count_error(int rc)
{
    int none = 0;
    atomic_compare_exchange_strong(&first_error, &none, rc);
    atomic_fetch_add(&errors, 1);
}
static atomic_bool stop;
static int op_kind; /* 0 create, 1 set, 2 get, 3 exists */
static char *value;
static int value_len, keys;
static char parent[64];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int connected;
static atomic_long outstanding;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void watcher(zhandle_t *z, int type, int state, const char *path, void *ctx)
{
    (void)z;
    (void)path;
    (void)ctx;
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
        pthread_mutex_lock(&mu);
        connected = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static void issue(void);

static void finish(int rc)
{
    if (rc != ZOK)
        count_error(rc);
    atomic_fetch_add(&done_ops, 1);
    if (!atomic_load(&stop))
        issue();
    else
        atomic_fetch_sub(&outstanding, 1);
}

static void string_cb(int rc, const char *v, const void *d)
{
    (void)v;
    (void)d;
    finish(rc);
}
static void stat_cb(int rc, const struct Stat *s, const void *d)
{
    (void)s;
    (void)d;
    finish(rc);
}
static void data_cb(int rc, const char *v, int len, const struct Stat *s, const void *d)
{
    (void)v;
    (void)len;
    (void)s;
    (void)d;
    finish(rc);
}

static void issue(void)
{
    long n = atomic_fetch_add(&issued, 1);
    char path[128];
    int rc;
    switch (op_kind) {
    case 0:
        snprintf(path, sizeof(path), "%s/c", parent);
        rc = zoo_acreate(zh, path, value, value_len, &ZOO_OPEN_ACL_UNSAFE, ZOO_SEQUENCE,
                         string_cb, NULL);
        break;
    case 1:
        snprintf(path, sizeof(path), "%s/k%ld", parent, n % keys);
        rc = zoo_aset(zh, path, value, value_len, -1, stat_cb, NULL);
        break;
    case 2:
        snprintf(path, sizeof(path), "%s/k%ld", parent, n % keys);
        rc = zoo_aget(zh, path, 0, data_cb, NULL);
        break;
    default:
        snprintf(path, sizeof(path), "%s/k%ld", parent, n % keys);
        rc = zoo_aexists(zh, path, 0, stat_cb, NULL);
        break;
    }
    if (rc != ZOK) {
        count_error(rc);
        atomic_fetch_sub(&outstanding, 1);
    }
}

static void setup_cb(int rc, const char *v, const void *d)
{
    (void)v;
    (void)d;
    if (rc != ZOK && rc != ZNODEEXISTS)
        count_error(rc);
    atomic_fetch_sub(&outstanding, 1);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s HOST:PORT create|set|get|exists SECONDS INFLIGHT "
                        "[VALUE_SIZE [KEYS]]\n", argv[0]);
        return 2;
    }
    const char *ops[] = {"create", "set", "get", "exists"};
    op_kind = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(argv[2], ops[i]) == 0)
            op_kind = i;
    if (op_kind < 0)
        return 2;
    double seconds = atof(argv[3]);
    int inflight = atoi(argv[4]);
    value_len = argc > 5 ? atoi(argv[5]) : 100;
    keys = argc > 6 ? atoi(argv[6]) : 1000;
    value = malloc((size_t)value_len + 1);
    memset(value, 'v', (size_t)value_len);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zh = zookeeper_init(argv[1], watcher, 30000, NULL, NULL, 0);
    if (zh == NULL)
        return 1;
    /* The C client resolves its host list again each time it polls the
     * socket (a getaddrinfo per loop: a netlink socket, /etc/hosts,
     * several syscalls), unless told otherwise. Under load that is most
     * of the client's CPU and it is the same whatever the server; -1
     * resolves only on connection loss, as a long-lived application
     * would configure it. */
    if (getenv("ZK_BENCH_RESOLVE_EVERY_POLL") == NULL)
        zoo_set_servers_resolution_delay(zh, -1);
    pthread_mutex_lock(&mu);
    while (!connected)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    snprintf(parent, sizeof(parent), "/zkbench-%d-%ld", (int)getpid(), (long)time(NULL));
    if (zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0) != ZOK)
        return 1;
    if (op_kind != 0) {
        for (int i = 0; i < keys; i++) {
            char path[128];
            snprintf(path, sizeof(path), "%s/k%d", parent, i);
            atomic_fetch_add(&outstanding, 1);
            if (zoo_acreate(zh, path, value, value_len, &ZOO_OPEN_ACL_UNSAFE, 0, setup_cb,
                            NULL) != ZOK)
                return 1;
            while (atomic_load(&outstanding) > 1000)
                usleep(1000);
        }
        while (atomic_load(&outstanding) > 0)
            usleep(1000);
    }
    double t0 = now();
    atomic_store(&outstanding, inflight);
    for (int i = 0; i < inflight; i++)
        issue();
    while (now() - t0 < seconds)
        usleep(10000);
    atomic_store(&stop, true);
    long ops_at_stop = atomic_load(&done_ops);
    double t1 = now();
    for (int i = 0; i < 500 && atomic_load(&outstanding) > 0; i++)
        usleep(10000);
    printf("op=%s ops=%ld seconds=%.2f rate=%.1f errors=%ld", argv[2], ops_at_stop, t1 - t0,
           (double)ops_at_stop / (t1 - t0), atomic_load(&errors));
    if (atomic_load(&first_error) != 0)
        printf(" first_error=%d", atomic_load(&first_error)); /* ZOO_ERRORS */
    printf("\n");
    zookeeper_close(zh);
    return 0;
}
