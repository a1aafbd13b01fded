/* tests/mvcc/bench_mvcc.c: micro-benchmark of the MVCC store (not a test).
 *
 * Usage: bench-mvcc [nkeys] [rounds]   (default 100000 keys, 1 round)
 *        bench-mvcc --open DIR          (time opening an existing store)
 *        bench-mvcc --delete-all N      (N keys, then one DeleteRange of them all)
 * Puts nkeys 16-byte keys with 64-byte values (1000 txns per batch, no
 * fsync, as the server groups them), overwrites them all |rounds| times
 * (then times a reopen, the index rebuilt from every revision), then times
 * point reads and 100-key ranges, each in its own read txn as a request
 * would be, and prints ops/s plus the key index's bytes per key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "mvcc/mvcc.h"
#include "tmpdir.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int sink(const struct mvcc_kv *kv, void *arg)
{
    *(size_t *)arg += kv->value_len;
    return 0;
}

_Noreturn static void die(const char *what, int rv)
{
    fprintf(stderr, "bench-mvcc: %s failed: %d\n", what, rv);
    exit(1);
}

static double do_puts(mvcc_store *s, long n, const char *tag)
{
    char key[32], val[64];
    memset(val, 'v', sizeof(val));
    double t0 = now();
    for (long i = 0; i < n;) {
        int rv = mvcc_batch_begin(s);
        if (rv)
            die("batch_begin", rv);
        for (int j = 0; j < 1000 && i < n; j++, i++) {
            mvcc_txn *t;
            long k = (i * 7919) % n; /* scattered insert order */
            int kl = snprintf(key, sizeof(key), "key%013ld", k);
            if ((rv = mvcc_txn_begin(s, &t)) != 0)
                die("txn_begin", rv);
            val[0] = tag[0];
            if ((rv = mvcc_txn_put(t, (uint8_t *)key, kl, (uint8_t *)val, sizeof(val), 0, NULL,
                                   NULL)) != 0)
                die("put", rv);
            mvcc_txn_end(t);
        }
        if ((rv = mvcc_batch_commit(s)) != 0)
            die("commit", rv);
    }
    return n / (now() - t0);
}

/* --open DIR: time opening an existing store (e.g. a member's
 * DATA_DIR/member/db, stopped) and exit. */
static int open_only(const char *dir)
{
    backend *be;
    mvcc_store *s;
    struct backend_options o = {.dir = dir, .map_size = (size_t)64 << 30, .no_sync = true};
    int rv = backend_open(&o, &be);
    if (rv)
        die("backend_open", rv);
    double t0 = now();
    if ((rv = mvcc_open(be, &s)) != 0)
        die("mvcc_open", rv);
    printf("bench-mvcc: opened %s at revision %lld in %.3f s (index %zu bytes)\n", dir,
           (long long)mvcc_rev(s), now() - t0, mvcc_index_bytes(s));
    mvcc_close(s);
    backend_close(be);
    return 0;
}

/* --delete-all N: N keys, then one DeleteRange of all of them in one
 * batch, as one applied entry does: how long it takes, and whether one LMDB
 * transaction holds it. */
static int delete_all(long n)
{
    const char *dir = tmpdir_make();
    char d[64];
    snprintf(d, sizeof(d), "%s", dir);
    backend *be;
    mvcc_store *s;
    struct backend_options o = {.dir = d, .map_size = (size_t)64 << 30, .no_sync = true};
    int rv = backend_open(&o, &be);
    if (rv || (rv = mvcc_open(be, &s)) != 0)
        die("open", rv);
    do_puts(s, n, "a");
    double t0 = now();
    mvcc_txn *t;
    int64_t deleted = 0;
    if ((rv = mvcc_batch_begin(s)) != 0 || (rv = mvcc_txn_begin(s, &t)) != 0)
        die("begin", rv);
    rv = mvcc_txn_delete_range(t, (const uint8_t *)"", 0, (const uint8_t *)"", 1, NULL, NULL,
                               &deleted);
    mvcc_txn_end(t);
    double t1 = now();
    int crv = rv == 0 ? mvcc_batch_commit(s) : mvcc_batch_abort(s);
    printf("bench-mvcc: DeleteRange of %ld keys: %d (%s), %lld deleted in %.3f s, commit %d in "
           "%.3f s\n",
           n, rv, rv ? mdb_strerror(backend_last_rc()) : "ok", (long long)deleted, t1 - t0, crv,
           now() - t1);
    mvcc_close(s);
    backend_close(be);
    tmpdir_remove(d);
    return rv != 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--open") == 0)
        return open_only(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--delete-all") == 0)
        return delete_all(atol(argv[2]));
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long rounds = argc > 2 ? atol(argv[2]) : 1;
    if (n < 200)
        n = 200;
    const char *dir = tmpdir_make();
    if (dir == NULL)
        die("mkdtemp", -1);
    char d[64];
    snprintf(d, sizeof(d), "%s", dir);
    backend *be;
    mvcc_store *s;
    struct backend_options o = {.dir = d, .no_sync = true};
    int rv = backend_open(&o, &be);
    if (rv)
        die("backend_open", rv);
    if ((rv = mvcc_open(be, &s)) != 0)
        die("mvcc_open", rv);

    double put_ins = do_puts(s, n, "a");
    size_t ix1 = mvcc_index_bytes(s);
    double put_upd = do_puts(s, n, "b");
    size_t ix2 = mvcc_index_bytes(s);
    for (long i = 1; i < rounds; i++)
        do_puts(s, n, "c");
    mvcc_close(s);
    double t_full = now();
    if ((rv = mvcc_open(be, &s)) != 0)
        die("reopen", rv);
    t_full = now() - t_full;
    size_t ix_full = mvcc_index_bytes(s);

    srand(1);
    char key[32], end[32];
    size_t bytes = 0;
    /* Warm up: fault the database's pages into this process's mapping
     * (the writes went through the file, not the map). */
    {
        mvcc_read *r;
        if ((rv = mvcc_read_begin(s, &r)) != 0)
            die("read_begin", rv);
        struct mvcc_range_opts all = {.rev = n + 1};
        mvcc_read_range(r, (const uint8_t *)"", 0, (const uint8_t *)"", 1, NULL, sink, &bytes,
                        NULL);
        mvcc_read_range(r, (const uint8_t *)"", 0, (const uint8_t *)"", 1, &all, sink, &bytes,
                        NULL);
        mvcc_read_end(r);
    }
    long reads = n > 200000 ? 200000 : n;
    double t0 = now();
    for (long i = 0; i < reads; i++) {
        mvcc_read *r;
        int kl = snprintf(key, sizeof(key), "key%013ld", (long)rand() % n);
        if ((rv = mvcc_read_begin(s, &r)) != 0)
            die("read_begin", rv);
        struct mvcc_range_result res;
        if ((rv = mvcc_read_range(r, (uint8_t *)key, kl, NULL, 0, NULL, sink, &bytes, &res)) != 0 ||
            res.count != 1)
            die("point range", rv);
        mvcc_read_end(r);
    }
    double point = reads / (now() - t0);

    long ranges = reads / 10;
    t0 = now();
    for (long i = 0; i < ranges; i++) {
        mvcc_read *r;
        long k = rand() % (n - 100);
        int kl = snprintf(key, sizeof(key), "key%013ld", k);
        int el = snprintf(end, sizeof(end), "key%013ld", k + 100);
        if ((rv = mvcc_read_begin(s, &r)) != 0)
            die("read_begin", rv);
        struct mvcc_range_result res;
        if ((rv = mvcc_read_range(r, (uint8_t *)key, kl, (uint8_t *)end, el, NULL, sink, &bytes,
                                  &res)) != 0 ||
            res.count != 100)
            die("100-key range", rv);
        mvcc_read_end(r);
    }
    double range100 = ranges / (now() - t0);

    /* The same ranges, count only: the index's share of the cost. */
    t0 = now();
    struct mvcc_range_opts co = {.count_only = true};
    for (long i = 0; i < ranges; i++) {
        mvcc_read *r;
        long k = rand() % (n - 100);
        int kl = snprintf(key, sizeof(key), "key%013ld", k);
        int el = snprintf(end, sizeof(end), "key%013ld", k + 100);
        if ((rv = mvcc_read_begin(s, &r)) != 0)
            die("read_begin", rv);
        struct mvcc_range_result res;
        if ((rv = mvcc_read_range(r, (uint8_t *)key, kl, (uint8_t *)end, el, &co, NULL, NULL,
                                  &res)) != 0 ||
            res.count != 100)
            die("100-key count", rv);
        mvcc_read_end(r);
    }
    double count100 = ranges / (now() - t0);

    /* Historical point reads at the revision of the first pass. */
    t0 = now();
    struct mvcc_range_opts ho = {.rev = n + 1};
    for (long i = 0; i < reads; i++) {
        mvcc_read *r;
        int kl = snprintf(key, sizeof(key), "key%013ld", (long)rand() % n);
        mvcc_read_begin(s, &r);
        struct mvcc_range_result res;
        if ((rv = mvcc_read_range(r, (uint8_t *)key, kl, NULL, 0, &ho, sink, &bytes, &res)) != 0 ||
            res.count != 1)
            die("historical range", rv);
        mvcc_read_end(r);
    }
    double hist = reads / (now() - t0);

    t0 = now();
    if ((rv = mvcc_batch_begin(s)) != 0 || (rv = mvcc_compact(s, mvcc_rev(s))) != 0)
        die("compact", rv);
    /* as the server runs it: steps of etcd's 1000, a commit every 10 */
    for (bool done = false; !done;) {
        for (int i = 0; i < 10 && !done && rv == 0; i++)
            rv = mvcc_compact_step(s, 1000, &done);
        if (rv != 0 || (rv = mvcc_batch_commit(s)) != 0 || (!done && (rv = mvcc_batch_begin(s)) != 0))
            die("compact", rv);
    }
    double compact_s = now() - t0;
    size_t ix3 = mvcc_index_bytes(s);

    mvcc_close(s);
    t0 = now();
    if ((rv = mvcc_open(be, &s)) != 0)
        die("reopen", rv);
    double reopen_s = now() - t0;

    printf("bench-mvcc: %ld keys (16-byte keys, 64-byte values), LMDB no-sync\n", n);
    printf("  put (new keys, 1000 txns/batch)     %10.0f ops/s\n", put_ins);
    printf("  put (overwrite, 1000 txns/batch)    %10.0f ops/s\n", put_upd);
    printf("  point range (own read txn)          %10.0f ops/s\n", point);
    printf("  point range at old revision         %10.0f ops/s\n", hist);
    printf("  100-key range (own read txn)        %10.0f ops/s  (%.0f keys/s)\n", range100,
           range100 * 100);
    printf("  100-key range, count only           %10.0f ops/s\n", count100);
    printf("  reopen with %ld revisions            %10.3f s (index %.1f B/key)\n",
           n * (rounds + 1), t_full, (double)ix_full / n);
    printf("  compact all history                 %10.3f s\n", compact_s);
    printf("  reopen (index rebuild)              %10.3f s\n", reopen_s);
    printf("  key index: %.1f B/key with 1 rev, %.1f B/key with 2 revs, %.1f B/key after "
           "compaction (+ malloc overhead, ~8-16 B/key)\n",
           (double)ix1 / n, (double)ix2 / n, (double)ix3 / n);
    printf("  db file %.1f MiB, in use %.1f MiB\n", backend_size(be) / 1048576.0,
           backend_size_in_use(be) / 1048576.0);
    mvcc_close(s);
    backend_close(be);
    tmpdir_remove(d);
    return bytes == 0;
}
