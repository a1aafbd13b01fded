/* tests/client/test_recipes.c: the recipes of api/quorum/recipes.h against
 * a real server ($QUORUM_BIN: quorum, or etcd 3.4 in client_recipes_vs_etcd)
 * started per test on free loopback ports and killed by its PID. Each
 * recipe under concurrency with threads, each with its own session on one
 * shared client: no overlap of exclusive holders, readers sharing, no lost
 * or repeated queue item, one 2pc outcome for all. What must block is
 * shown blocked by a wait that times out while the blocker is held (never
 * by how long something took). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "quorum/recipes.h"

#include "../free_port.h"

/* ---- one server, as tests/client/test_client.c starts it ---- */

static pid_t srv_pid;
static char srv_dir[128], srv_ep[64];
static qc_client *C;       /* shared by every thread of a test */
static char fail_msg[512]; /* the first failure in a thread (below) */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static qc_client *connect_srv(void)
{
    const char *eps[] = {srv_ep};
    struct qc_options o = {.endpoints = eps, .n_endpoints = 1, .dial_timeout_ms = 2000};
    qc_client *c = NULL;
    struct qc_status st;
    int r = qc_connect(&o, &c, &st);
    cr_assert_eq(r, 0, "qc_connect: %s", st.message);
    return c;
}

static void setup(void)
{
    fail_msg[0] = '\0';
    const char *bin = getenv("QUORUM_BIN");
    cr_assert(bin && *bin, "QUORUM_BIN not set");
    snprintf(srv_dir, sizeof(srv_dir), "/tmp/qc-recipes-XXXXXX");
    cr_assert(mkdtemp(srv_dir));
    int cport = free_port(), pport = free_port();
    char data[192], curl[64], purl[64], ic[96], log[192];
    snprintf(data, sizeof(data), "%s/data", srv_dir);
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
    snprintf(ic, sizeof(ic), "default=%s", purl);
    snprintf(log, sizeof(log), "%s/server.log", srv_dir);
    snprintf(srv_ep, sizeof(srv_ep), "127.0.0.1:%d", cport);
    srv_pid = fork();
    cr_assert(srv_pid >= 0);
    if (srv_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, bin, "--name", "default", "--data-dir", data, "--listen-client-urls", curl,
              "--advertise-client-urls", curl, "--listen-peer-urls", purl,
              "--initial-advertise-peer-urls", purl, "--initial-cluster", ic, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 400; i++) {
        int status;
        cr_assert_eq(waitpid(srv_pid, &status, WNOHANG), 0, "server exited; see %s", log);
        const char *eps[] = {srv_ep};
        struct qc_options o = {
            .endpoints = eps, .n_endpoints = 1, .dial_timeout_ms = 1000, .call_timeout_ms = 2000};
        qc_client *c = NULL;
        if (qc_connect(&o, &c, NULL) == 0) {
            int r = qc_get(c, "health", 6, NULL, NULL, NULL);
            qc_close(c);
            if (r == 0) {
                C = connect_srv();
                return;
            }
        }
        sleep_ms(50);
    }
    cr_assert_fail("server not ready; see %s", log);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    return remove(p);
}

static void teardown(void)
{
    qc_close(C);
    C = NULL;
    if (srv_pid > 0) {
        kill(srv_pid, SIGKILL);
        waitpid(srv_pid, NULL, 0);
        srv_pid = 0;
    }
    nftw(srv_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static qc_session *session(int ttl)
{
    qc_session *s;
    struct qc_status st;
    int rc = qc_session_open(C, ttl, &s, &st);
    cr_assert_eq(rc, 0, "session: %s", st.message);
    return s;
}

/* threads cannot use cr_assert (it ends the test from the test's own
 * thread): they record the first failure and return; the test asserts
 * none after joining them */
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static void thread_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void thread_fail(const char *fmt, ...)
{
    pthread_mutex_lock(&fail_mu);
    if (fail_msg[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(fail_msg, sizeof(fail_msg), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&fail_mu);
}

#define TCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            thread_fail(__VA_ARGS__);                                                              \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

#define JOIN_ALL(th, n)                                                                            \
    do {                                                                                           \
        for (int j_ = 0; j_ < (n); j_++)                                                           \
            pthread_join((th)[j_], NULL);                                                          \
        cr_assert_eq(fail_msg[0], '\0', "%s", fail_msg);                                           \
    } while (0)

static qc_session *tsession(int ttl)
{
    qc_session *s = NULL;
    struct qc_status st;
    if (qc_session_open(C, ttl, &s, &st) < 0)
        thread_fail("session: %s", st.message);
    return s;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        struct qc_status st_;                                                                      \
        (void)st_;                                                                                 \
        int rc_ = (call);                                                                          \
        cr_assert(rc_ >= 0, "%s: %d %s", #call, rc_, qc_recipe_strerror(rc_));                     \
    } while (0)

static size_t count_prefix(const char *pfx)
{
    char end[256];
    size_t n = strlen(pfx);
    memcpy(end, pfx, n);
    end[n - 1]++;
    Etcdserverpb__RangeResponse *r;
    struct qc_get_opts o = {.range_end = end, .range_end_len = n, .count_only = 1};
    cr_assert_eq(qc_get(C, pfx, n, &o, &r, NULL), 0);
    size_t c = (size_t)r->count;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return c;
}

/* ---- sessions ---- */

Test(recipes, session_keeps_lease_and_close_revokes, .init = setup, .fini = teardown)
{
    qc_session *s = session(2);
    int64_t id = qc_session_lease(s);
    /* kept alive well past its TTL */
    sleep_ms(3000);
    cr_assert_eq(qc_session_lost(s), 0);
    Etcdserverpb__LeaseTimeToLiveResponse *t;
    cr_assert_eq(qc_lease_timetolive(C, id, 0, &t, NULL), 0);
    cr_assert_gt(t->ttl, 0, "lease alive after 1.5 TTLs");
    protobuf_c_message_free_unpacked(&t->base, NULL);
    qc_session_close(s);
    cr_assert_eq(qc_lease_timetolive(C, id, 0, &t, NULL), 0);
    cr_assert_eq(t->ttl, -1, "revoked on close");
    protobuf_c_message_free_unpacked(&t->base, NULL);
}

Test(recipes, session_lost_when_lease_revoked, .init = setup, .fini = teardown)
{
    qc_session *s = session(1);
    qc_mutex *m;
    cr_assert_eq(qc_mutex_new(s, "lostlock", &m), 0);
    OK(qc_mutex_lock(m, 5000, &st_));
    cr_assert_eq(qc_lease_revoke(C, qc_session_lease(s), NULL, NULL), 0);
    cr_assert_eq(qc_session_wait_lost(s, 10000), 1, "the keep-alive learns the lease is gone");
    cr_assert_eq(count_prefix("lostlock/"), 0, "the hold went with the lease");
    struct qc_status st;
    qc_mutex_free(m);
    cr_assert_eq(qc_mutex_new(s, "lostlock", &m), 0);
    cr_assert_eq(qc_mutex_lock(m, 1000, &st), QC_ELOST);
    cr_assert_eq(st.code, QC_NOT_FOUND);
    cr_assert_str_eq(st.message, "etcdserver: requested lease not found");
    qc_mutex_free(m);
    qc_session_close(s);
}

/* ---- mutex ---- */

struct mx_shared {
    int inside;
    int64_t last_token;
    int rounds_done;
    int bad;
};

static struct mx_shared MX;
static pthread_mutex_t mx_mu = PTHREAD_MUTEX_INITIALIZER;

static void *mutex_worker(void *arg)
{
    (void)arg;
    qc_session *s = tsession(10);
    TCHECK(s != NULL, "no session");
    qc_mutex *m;
    TCHECK((qc_mutex_new(s, "mx", &m)) == (0), "%s", "qc_mutex_new(s, \"mx\", &m) == 0");
    for (int i = 0; i < 8; i++) {
        struct qc_status st;
        int rc = qc_mutex_lock(m, 30000, &st);
        TCHECK((rc) == (0), "lock: %s", st.message);
        if (__atomic_fetch_add(&MX.inside, 1, __ATOMIC_SEQ_CST) != 0)
            __atomic_store_n(&MX.bad, 1, __ATOMIC_SEQ_CST);
        /* a read-modify-write through the server that only exclusion
         * keeps from losing updates */
        int64_t v;
        TCHECK((qc_counter_get(C, "mx-count", &v, NULL)) == (0), "%s",
               "qc_counter_get(C, \"mx-count\", &v, NULL) == 0");
        char buf[32];
        snprintf(buf, sizeof(buf), "%lld", (long long)v + 1);
        TCHECK((qc_put(C, "mx-count", 8, buf, strlen(buf), 0, NULL, NULL)) == (0), "%s",
               "qc_put(C, \"mx-count\", 8, buf, strlen(buf), 0, NULL, NULL) == 0");
        pthread_mutex_lock(&mx_mu);
        if (qc_mutex_token(m) <= MX.last_token)
            MX.bad = 2; /* fencing tokens grow with each holder */
        MX.last_token = qc_mutex_token(m);
        pthread_mutex_unlock(&mx_mu);
        __atomic_fetch_sub(&MX.inside, 1, __ATOMIC_SEQ_CST);
        TCHECK((qc_mutex_unlock(m, &st)) == (0), "%s", "qc_mutex_unlock(m, &st) == 0");
    }
    qc_mutex_free(m);
    qc_session_close(s);
    return NULL;
}

Test(recipes, mutex_excludes_under_threads, .init = setup, .fini = teardown, .timeout = 120)
{
    memset(&MX, 0, sizeof(MX));
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, mutex_worker, NULL);
    JOIN_ALL(th, 4);
    cr_assert_eq(MX.bad, 0, "overlap (1) or a token that did not grow (2)");
    int64_t v;
    OK(qc_counter_get(C, "mx-count", &v, &st_));
    cr_assert_eq(v, 32, "no lost update: %lld", (long long)v);
    cr_assert_eq(count_prefix("mx/"), 0);
}

Test(recipes, mutex_trylock_and_timeout, .init = setup, .fini = teardown)
{
    qc_session *a = session(10), *b = session(10);
    qc_mutex *ma, *mb;
    cr_assert_eq(qc_mutex_new(a, "tl", &ma), 0);
    cr_assert_eq(qc_mutex_new(b, "tl", &mb), 0);
    OK(qc_mutex_trylock(ma, &st_));
    cr_assert_not_null(qc_mutex_key(ma));
    cr_assert_gt(qc_mutex_token(ma), 0);
    struct qc_status st;
    cr_assert_eq(qc_mutex_trylock(mb, &st), QC_EBUSY);
    cr_assert_str_eq(st.message, "mutex: Locked by another session");
    cr_assert_eq(qc_mutex_lock(mb, 300, &st), QC_ETIMEDOUT);
    cr_assert_str_eq(st.message, "context deadline exceeded");
    cr_assert_eq(count_prefix("tl/"), 1, "the waiter took its key back");
    OK(qc_mutex_unlock(ma, &st_));
    OK(qc_mutex_lock(mb, 5000, &st_));
    cr_assert_gt(qc_mutex_token(mb), 0);
    /* a holder that dies (no revoke) blocks others until its TTL passes */
    qc_session *d = session(1);
    qc_mutex *md;
    cr_assert_eq(qc_mutex_new(d, "dead", &md), 0);
    OK(qc_mutex_lock(md, 5000, &st_));
    qc_mutex_free(md);
    qc_session_abandon(d);
    qc_mutex *ma2;
    cr_assert_eq(qc_mutex_new(a, "dead", &ma2), 0);
    OK(qc_mutex_lock(ma2, 15000, &st_));
    qc_mutex_free(ma2);
    qc_mutex_free(ma);
    qc_mutex_free(mb);
    qc_session_close(a);
    qc_session_close(b);
}

/* ---- read/write lock ---- */

static int rw_readers, rw_writers, rw_bad, rw_max_readers;

static void *rw_worker(void *arg)
{
    int writer = (int)(intptr_t)arg;
    qc_session *s = tsession(10);
    TCHECK(s != NULL, "no session");
    qc_rwlock *l;
    TCHECK((qc_rwlock_new(s, "rw", &l)) == (0), "%s", "qc_rwlock_new(s, \"rw\", &l) == 0");
    for (int i = 0; i < 6; i++) {
        struct qc_status st;
        int rc = writer ? qc_rwlock_wlock(l, 30000, &st) : qc_rwlock_rlock(l, 30000, &st);
        TCHECK((rc) == (0), "%s", st.message);
        if (writer) {
            if (__atomic_fetch_add(&rw_writers, 1, __ATOMIC_SEQ_CST) != 0 ||
                __atomic_load_n(&rw_readers, __ATOMIC_SEQ_CST) != 0)
                rw_bad = 1;
            sleep_ms(5);
            __atomic_fetch_sub(&rw_writers, 1, __ATOMIC_SEQ_CST);
        } else {
            int n = __atomic_add_fetch(&rw_readers, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&rw_writers, __ATOMIC_SEQ_CST) != 0)
                rw_bad = 1;
            if (n > __atomic_load_n(&rw_max_readers, __ATOMIC_SEQ_CST))
                __atomic_store_n(&rw_max_readers, n, __ATOMIC_SEQ_CST);
            sleep_ms(5);
            __atomic_fetch_sub(&rw_readers, 1, __ATOMIC_SEQ_CST);
        }
        TCHECK((qc_rwlock_unlock(l, &st)) == (0), "%s", "qc_rwlock_unlock(l, &st) == 0");
    }
    qc_rwlock_free(l);
    qc_session_close(s);
    return NULL;
}

Test(recipes, rwlock_writers_alone_under_threads, .init = setup, .fini = teardown, .timeout = 120)
{
    rw_readers = rw_writers = rw_bad = rw_max_readers = 0;
    pthread_t th[5];
    for (int i = 0; i < 5; i++)
        pthread_create(&th[i], NULL, rw_worker, (void *)(intptr_t)(i < 2));
    JOIN_ALL(th, 5);
    cr_assert_eq(rw_bad, 0, "a writer was not alone");
    cr_assert_eq(count_prefix("rw/"), 0);
}

struct waiter {
    qc_rwlock *l;
    int rc;
};

static void *wlock_thread(void *arg)
{
    struct waiter *w = arg;
    w->rc = qc_rwlock_wlock(w->l, 30000, NULL);
    return NULL;
}

Test(recipes, rwlock_readers_share_and_queue_fairly, .init = setup, .fini = teardown)
{
    qc_session *r1 = session(10), *r2 = session(10), *w = session(10), *r3 = session(10);
    qc_rwlock *l1, *l2, *lw, *l3;
    cr_assert_eq(qc_rwlock_new(r1, "fair", &l1), 0);
    cr_assert_eq(qc_rwlock_new(r2, "fair", &l2), 0);
    cr_assert_eq(qc_rwlock_new(w, "fair", &lw), 0);
    cr_assert_eq(qc_rwlock_new(r3, "fair", &l3), 0);
    OK(qc_rwlock_rlock(l1, 5000, &st_));
    OK(qc_rwlock_rlock(l2, 5000, &st_)); /* readers share */
    struct qc_status st;
    cr_assert_eq(qc_rwlock_wlock(lw, 300, &st), QC_ETIMEDOUT, "a writer waits for readers");
    /* a writer queued behind the readers; a reader after it waits too */
    struct waiter wt = {.l = lw};
    pthread_t th;
    pthread_create(&th, NULL, wlock_thread, &wt);
    while (count_prefix("fair/write/") == 0)
        sleep_ms(10);
    cr_assert_eq(qc_rwlock_rlock(l3, 300, &st), QC_ETIMEDOUT, "no reader overtakes a writer");
    OK(qc_rwlock_unlock(l1, &st_));
    OK(qc_rwlock_unlock(l2, &st_));
    pthread_join(th, NULL);
    cr_assert_eq(wt.rc, 0);
    cr_assert_eq(qc_rwlock_rlock(l3, 300, &st), QC_ETIMEDOUT, "the writer holds it");
    OK(qc_rwlock_unlock(lw, &st_));
    OK(qc_rwlock_rlock(l3, 5000, &st_));
    OK(qc_rwlock_unlock(l3, &st_));
    qc_rwlock_free(l1);
    qc_rwlock_free(l2);
    qc_rwlock_free(lw);
    qc_rwlock_free(l3);
    qc_session_close(r1);
    qc_session_close(r2);
    qc_session_close(w);
    qc_session_close(r3);
}

/* ---- semaphore ---- */

static int sem_inside, sem_max;

static void *sem_worker(void *arg)
{
    (void)arg;
    qc_session *s = tsession(10);
    TCHECK(s != NULL, "no session");
    qc_semaphore *m;
    TCHECK((qc_semaphore_new(s, "sem", 2, &m)) == (0), "%s",
           "qc_semaphore_new(s, \"sem\", 2, &m) == 0");
    for (int i = 0; i < 5; i++) {
        struct qc_status st;
        TCHECK((qc_semaphore_acquire(m, 30000, &st)) == (0), "%s", st.message);
        int n = __atomic_add_fetch(&sem_inside, 1, __ATOMIC_SEQ_CST);
        if (n > __atomic_load_n(&sem_max, __ATOMIC_SEQ_CST))
            __atomic_store_n(&sem_max, n, __ATOMIC_SEQ_CST);
        sleep_ms(5);
        __atomic_fetch_sub(&sem_inside, 1, __ATOMIC_SEQ_CST);
        TCHECK((qc_semaphore_release(m, &st)) == (0), "%s", "qc_semaphore_release(m, &st) == 0");
    }
    qc_semaphore_free(m);
    qc_session_close(s);
    return NULL;
}

Test(recipes, semaphore_holds_at_most_n, .init = setup, .fini = teardown, .timeout = 120)
{
    qc_session *a = session(10), *b = session(10), *c = session(10);
    qc_semaphore *sa, *sb, *sc;
    cr_assert_eq(qc_semaphore_new(a, "s2", 2, &sa), 0);
    cr_assert_eq(qc_semaphore_new(b, "s2", 2, &sb), 0);
    cr_assert_eq(qc_semaphore_new(c, "s2", 2, &sc), 0);
    OK(qc_semaphore_acquire(sa, 5000, &st_));
    OK(qc_semaphore_acquire(sb, 5000, &st_));
    struct qc_status st;
    cr_assert_eq(qc_semaphore_acquire(sc, 300, &st), QC_ETIMEDOUT, "a third waits");
    OK(qc_semaphore_release(sa, &st_));
    OK(qc_semaphore_acquire(sc, 5000, &st_));
    qc_semaphore_free(sa);
    qc_semaphore_free(sb);
    qc_semaphore_free(sc);
    qc_session_close(a);
    qc_session_close(b);
    qc_session_close(c);

    sem_inside = sem_max = 0;
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, sem_worker, NULL);
    JOIN_ALL(th, 4);
    cr_assert_leq(sem_max, 2, "at most 2 holders, saw %d", sem_max);
}

/* ---- barriers ---- */

static int bar_passed;

static void *barrier_waiter(void *arg)
{
    (void)arg;
    struct qc_status st;
    TCHECK((qc_barrier_wait(C, "bar", 30000, &st)) == (0), "%s", st.message);
    __atomic_fetch_add(&bar_passed, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

Test(recipes, barrier_holds_everyone_then_releases_all, .init = setup, .fini = teardown)
{
    OK(qc_barrier_wait(C, "bar", 0, &st_)); /* not held: passes at once */
    OK(qc_barrier_hold(C, "bar", &st_));
    struct qc_status st;
    cr_assert_eq(qc_barrier_wait(C, "bar", 300, &st), QC_ETIMEDOUT);
    bar_passed = 0;
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, barrier_waiter, NULL);
    cr_assert_eq(qc_barrier_wait(C, "bar", 300, &st), QC_ETIMEDOUT, "still held");
    cr_assert_eq(__atomic_load_n(&bar_passed, __ATOMIC_SEQ_CST), 0);
    OK(qc_barrier_release(C, "bar", &st_));
    JOIN_ALL(th, 3);
    cr_assert_eq(bar_passed, 3);
}

static int db_arrived, db_entered_early, db_worked, db_left_early;

static void *dbarrier_worker(void *arg)
{
    (void)arg;
    qc_session *s = tsession(10);
    TCHECK(s != NULL, "no session");
    struct qc_status st;
    qc_dbarrier *b;
    TCHECK(qc_dbarrier_new(s, "db", 3, &b) == 0, "new");
    for (int round = 0; round < 3; round++) {
        __atomic_fetch_add(&db_arrived, 1, __ATOMIC_SEQ_CST);
        TCHECK((qc_dbarrier_enter(b, 30000, &st)) == (0), "enter: %s", st.message);
        if (__atomic_load_n(&db_arrived, __ATOMIC_SEQ_CST) < 3 * (round + 1))
            db_entered_early = 1;
        __atomic_fetch_add(&db_worked, 1, __ATOMIC_SEQ_CST);
        TCHECK((qc_dbarrier_leave(b, 30000, &st)) == (0), "leave: %s", st.message);
        if (__atomic_load_n(&db_worked, __ATOMIC_SEQ_CST) < 3 * (round + 1))
            db_left_early = 1;
    }
    qc_dbarrier_free(b);
    qc_session_close(s);
    return NULL;
}

Test(recipes, double_barrier_enter_and_leave_together, .init = setup, .fini = teardown,
     .timeout = 120)
{
    db_arrived = db_entered_early = db_worked = db_left_early = 0;
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, dbarrier_worker, NULL);
    JOIN_ALL(th, 3);
    cr_assert_eq(db_entered_early, 0, "someone entered before all arrived");
    cr_assert_eq(db_left_early, 0, "someone left before all finished");
    cr_assert_eq(count_prefix("db/"), 0, "nothing left behind");

    qc_session *a = session(10), *b = session(10);
    qc_dbarrier *da, *db;
    cr_assert_eq(qc_dbarrier_new(a, "one", 1, &da), 0);
    cr_assert_eq(qc_dbarrier_new(b, "one", 1, &db), 0);
    OK(qc_dbarrier_enter(da, 5000, &st_));
    struct qc_status st;
    cr_assert_eq(qc_dbarrier_enter(db, 5000, &st), QC_ETOOMANY);
    cr_assert_str_eq(st.message, "too many clients");
    OK(qc_dbarrier_leave(da, 5000, &st_));
    cr_assert_eq(count_prefix("one/"), 0);
    qc_dbarrier_free(da);
    qc_dbarrier_free(db);
    qc_session_close(a);
    qc_session_close(b);
}

/* ---- queues ---- */

#define PRODUCERS 3
#define ITEMS 20
static int q_seen[PRODUCERS][ITEMS];
static int q_order_bad;

static void *producer(void *arg)
{
    int p = (int)(intptr_t)arg;
    for (int i = 0; i < ITEMS; i++) {
        char v[32];
        snprintf(v, sizeof(v), "%d:%d", p, i);
        TCHECK((qc_queue_put(C, "q", v, strlen(v), NULL)) == (0), "%s",
               "qc_queue_put(C, \"q\", v, strlen(v), NULL) == 0");
    }
    return NULL;
}

static void *consumer(void *arg)
{
    int n = (int)(intptr_t)arg;
    int last[PRODUCERS] = {-1, -1, -1};
    for (int k = 0; k < n; k++) {
        char *v;
        size_t len;
        struct qc_status st;
        TCHECK((qc_queue_take(C, "q", 30000, &v, &len, &st)) == (0), "%s", st.message);
        int p, i;
        TCHECK((sscanf(v, "%d:%d", &p, &i)) == (2), "%s", "sscanf(v, \"%d:%d\", &p, &i) == 2");
        free(v);
        __atomic_fetch_add(&q_seen[p][i], 1, __ATOMIC_SEQ_CST);
        if (i <= last[p])
            q_order_bad = 1; /* one producer's items come out in its order */
        last[p] = i;
    }
    return NULL;
}

Test(recipes, queue_each_item_once_in_order, .init = setup, .fini = teardown, .timeout = 120)
{
    char *v;
    size_t len;
    struct qc_status st;
    cr_assert_eq(qc_queue_take(C, "q", 0, &v, &len, &st), QC_ETIMEDOUT, "empty");
    memset(q_seen, 0, sizeof(q_seen));
    q_order_bad = 0;
    pthread_t pr[PRODUCERS], co[3];
    for (int i = 0; i < 3; i++) /* consumers first: they wait */
        pthread_create(&co[i], NULL, consumer, (void *)(intptr_t)(PRODUCERS * ITEMS / 3));
    for (int i = 0; i < PRODUCERS; i++)
        pthread_create(&pr[i], NULL, producer, (void *)(intptr_t)i);
    JOIN_ALL(pr, PRODUCERS);
    JOIN_ALL(co, 3);
    for (int p = 0; p < PRODUCERS; p++)
        for (int i = 0; i < ITEMS; i++)
            cr_assert_eq(q_seen[p][i], 1, "item %d:%d taken %d times", p, i, q_seen[p][i]);
    cr_assert_eq(q_order_bad, 0, "a producer's items out of order");
    cr_assert_eq(count_prefix("q/"), 0);
    /* one taker: exactly put order */
    for (int i = 0; i < 5; i++) {
        char b[8];
        snprintf(b, sizeof(b), "%d", i);
        OK(qc_queue_put(C, "fifo", b, strlen(b), &st_));
    }
    for (int i = 0; i < 5; i++) {
        OK(qc_queue_take(C, "fifo", 1000, &v, &len, &st_));
        cr_assert_eq(atoi(v), i);
        free(v);
    }
}

Test(recipes, priority_queue_lowest_first_fifo_within, .init = setup, .fini = teardown)
{
    static const struct {
        uint32_t prio;
        const char *v;
    } in[] = {{5, "e1"}, {1, "a1"}, {3, "c1"}, {1, "a2"}, {5, "e2"}, {0, "z"}};
    for (size_t i = 0; i < 6; i++)
        OK(qc_pqueue_put(C, "pq", in[i].prio, in[i].v, strlen(in[i].v), &st_));
    static const char *want[] = {"z", "a1", "a2", "c1", "e1", "e2"};
    static const uint32_t wprio[] = {0, 1, 1, 3, 5, 5};
    for (size_t i = 0; i < 6; i++) {
        char *v;
        size_t len;
        uint32_t p;
        OK(qc_pqueue_take(C, "pq", 1000, &v, &len, &p, &st_));
        cr_assert_str_eq(v, want[i]);
        cr_assert_eq(p, wprio[i]);
        free(v);
    }
    char *v;
    size_t len;
    cr_assert_eq(qc_pqueue_take(C, "pq", 0, &v, &len, NULL, NULL), QC_ETIMEDOUT);
}

/* ---- membership ---- */

Test(recipes, membership_join_list_watch, .init = setup, .fini = teardown)
{
    qc_session *s[3];
    const char *ids[] = {"alpha", "beta", "gamma"};
    for (int i = 0; i < 3; i++) {
        s[i] = session(10);
        OK(qc_group_join(s[i], "grp", ids[i], ids[i], strlen(ids[i]), &st_));
    }
    struct qc_status st;
    cr_assert_eq(qc_group_join(s[0], "grp", "beta", "", 0, &st), QC_EEXIST);
    cr_assert_str_eq(st.message, "key already exists");
    struct qc_members *ms;
    OK(qc_group_list(C, "grp", &ms, &st_));
    cr_assert_eq(ms->n, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(ms->m[i].id, ids[i]);
        cr_assert_str_eq(ms->m[i].value, ids[i]);
    }
    qc_group_watcher *w;
    OK(qc_group_watch_open(C, "grp", ms->revision, &w, &st_));
    qc_members_free(ms);
    qc_session_close(s[1]); /* leaves with its lease */
    qc_session *d = session(10);
    OK(qc_group_join(d, "grp", "delta", "", 0, &st_));
    char *id;
    int joined;
    cr_assert_eq(qc_group_watch_next(w, 5000, &id, &joined, &st), 1, "%s", st.message);
    cr_assert_str_eq(id, "beta");
    cr_assert_eq(joined, 0);
    free(id);
    cr_assert_eq(qc_group_watch_next(w, 5000, &id, &joined, &st), 1, "%s", st.message);
    cr_assert_str_eq(id, "delta");
    cr_assert_eq(joined, 1);
    free(id);
    cr_assert_eq(qc_group_watch_next(w, 200, &id, &joined, &st), QC_ETIMEDOUT);
    qc_group_watch_close(w);
    OK(qc_group_leave(s[0], "grp", "alpha", &st_));
    OK(qc_group_list(C, "grp", &ms, &st_));
    cr_assert_eq(ms->n, 2);
    cr_assert_str_eq(ms->m[0].id, "delta");
    cr_assert_str_eq(ms->m[1].id, "gamma");
    qc_members_free(ms);
    qc_session_close(s[0]);
    qc_session_close(s[2]);
    qc_session_close(d);
}

/* ---- two-phase commit ---- */

struct voter {
    const char *name;
    int commit, rc, outcome;
};

static void *vote_thread(void *arg)
{
    struct voter *v = arg;
    qc_session *s = tsession(10);
    TCHECK(s != NULL, "no session");
    v->rc = qc_2pc_vote(s, v->name, v->commit, 30000, &v->outcome, NULL);
    qc_session_close(s);
    return NULL;
}

static void run_2pc(const char *name, const int *votes, int nvotes, int n, int timeout_ms, int want)
{
    struct voter v[8];
    pthread_t th[8];
    for (int i = 0; i < nvotes; i++) {
        v[i] = (struct voter){.name = name, .commit = votes[i], .outcome = -1};
        pthread_create(&th[i], NULL, vote_thread, &v[i]);
    }
    int outcome = -1;
    struct qc_status st;
    cr_assert_eq(qc_2pc_coordinate(C, name, n, timeout_ms, &outcome, &st), 0, "%s", st.message);
    cr_assert_eq(outcome, want, "%s: coordinator decided %d", name, outcome);
    for (int i = 0; i < nvotes; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(v[i].rc, 0);
        cr_assert_eq(v[i].outcome, want, "%s: participant %d learned %d", name, i, v[i].outcome);
    }
    int o;
    cr_assert_eq(qc_2pc_outcome(C, name, &o, NULL), 1);
    cr_assert_eq(o, want);
}

Test(recipes, two_phase_commit_outcome_same_for_all, .init = setup, .fini = teardown,
     .timeout = 120)
{
    run_2pc("tx1", (int[]){1, 1, 1}, 3, 3, 30000, QC_2PC_COMMIT);
    run_2pc("tx2", (int[]){1, 0, 1}, 3, 3, 30000, QC_2PC_ABORT);
    /* a participant missing: the coordinator's timeout aborts */
    run_2pc("tx3", (int[]){1}, 1, 2, 500, QC_2PC_ABORT);
    /* decided once: a late vote learns the outcome that stands */
    run_2pc("tx1", (int[]){0}, 1, 3, 30000, QC_2PC_COMMIT);
    OK(qc_2pc_reset(C, "tx1", &st_));
    int o;
    cr_assert_eq(qc_2pc_outcome(C, "tx1", &o, NULL), 0);
}

/* ---- counter ---- */

static void *adder(void *arg)
{
    (void)arg;
    for (int i = 0; i < 25; i++)
        TCHECK((qc_counter_add(C, "cnt", 2, NULL, NULL)) == (0), "%s",
               "qc_counter_add(C, \"cnt\", 2, NULL, NULL) == 0");
    return NULL;
}

Test(recipes, counter_adds_atomically, .init = setup, .fini = teardown, .timeout = 120)
{
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, adder, NULL);
    JOIN_ALL(th, 4);
    int64_t v;
    OK(qc_counter_get(C, "cnt", &v, &st_));
    cr_assert_eq(v, 200);
    OK(qc_counter_add(C, "cnt", -201, &v, &st_));
    cr_assert_eq(v, -1);
    cr_assert_eq(qc_put(C, "notnum", 6, "x1", 2, 0, NULL, NULL), 0);
    struct qc_status st;
    cr_assert_eq(qc_counter_add(C, "notnum", 1, &v, &st), QC_EBADVALUE);
    cr_assert_eq(st.code, QC_INVALID_ARGUMENT);
    Etcdserverpb__RangeResponse *r;
    cr_assert_eq(qc_get(C, "notnum", 6, NULL, &r, NULL), 0);
    cr_assert_eq(r->kvs[0]->value.len, 2, "a refused add leaves the value alone");
    protobuf_c_message_free_unpacked(&r->base, NULL);
}
