/* Unit tests for lease/lessor.c on a real LMDB environment in a temp dir,
 * with time given by the test. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"
#include "lease/lessor.h"

static char dir[64];
static backend *be;
static lessor *ls;

static void open_all(void)
{
    struct backend_options o = {.dir = dir};
    cr_assert_eq(backend_open(&o, &be), 0);
    cr_assert_eq(lessor_open(be, 2, &ls), 0);
}

static void close_all(void)
{
    lessor_close(ls);
    backend_close(be);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/lessor-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    open_all();
}

static void teardown(void)
{
    close_all();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static int64_t grant(int64_t id, int64_t ttl, int64_t now)
{
    int64_t g = 0;
    cr_assert_eq(backend_batch_begin(be), 0);
    int rv = lessor_grant(ls, id, ttl, now, &g);
    cr_assert_eq(backend_batch_commit(be), 0);
    return rv == 0 ? g : rv;
}

TestSuite(lessor, .init = setup, .fini = teardown);

Test(lessor, grant_raises_min_ttl_and_refuses_bad)
{
    cr_assert_eq(grant(1, 1, 0), 2, "TTL below the minimum is raised to it");
    cr_assert_eq(grant(2, 60, 0), 60);
    cr_assert_eq(grant(1, 60, 0), QERR_LEASE_EXISTS);
    cr_assert_eq(grant(3, LEASE_MAX_TTL + 1, 0), QERR_LEASE_TTL_TOO_LARGE);
    cr_assert_eq(grant(0, 10, 0), -EINVAL);
    cr_assert(lessor_exists(ls, 1));
    cr_assert(!lessor_exists(ls, 3));
    cr_assert_eq(lessor_count(ls), 2);
}

Test(lessor, only_the_primary_expires)
{
    grant(7, 10, 0);
    int64_t ids[4];
    cr_assert_eq(lessor_expired(ls, 1000000, ids, 4), 0, "not primary: nothing expires");
    lessor_promote(ls, 1000);
    cr_assert_eq(lessor_expired(ls, 1000 + 9999, ids, 4), 0);
    cr_assert_eq(lessor_expired(ls, 1000 + 10000, ids, 4), 1);
    cr_assert_eq(ids[0], 7);
    cr_assert_eq(lessor_expired(ls, 1000 + 20000, ids, 4), 0, "returned once while revoking");
    int64_t ttl;
    bool ck;
    cr_assert_eq(lessor_renew(ls, 7, 12000, &ttl, &ck), QERR_LEASE_NOT_FOUND,
                 "an expired lease being revoked cannot be renewed");
    lessor_revoke_failed(ls, 7);
    cr_assert_eq(lessor_expired(ls, 30000, ids, 4), 1, "back in the queue after a failed revoke");
}

Test(lessor, renew_and_remaining)
{
    lessor_promote(ls, 0);
    grant(5, 30, 0);
    int64_t rem, g, ttl;
    bool ck;
    cr_assert_eq(lessor_remaining(ls, 5, 10500, &rem, &g), 0);
    cr_assert_eq(rem, 19, "rounded down");
    cr_assert_eq(g, 30);
    cr_assert_eq(lessor_renew(ls, 5, 20000, &ttl, &ck), 0);
    cr_assert_eq(ttl, 30);
    cr_assert(!ck);
    cr_assert_eq(lessor_remaining(ls, 5, 20000, &rem, &g), 0);
    cr_assert_eq(rem, 30);
    cr_assert_eq(lessor_renew(ls, 99, 0, &ttl, &ck), QERR_LEASE_NOT_FOUND);
    cr_assert_eq(lessor_remaining(ls, 99, 0, &rem, &g), QERR_LEASE_NOT_FOUND);
    lessor_demote(ls);
    cr_assert_eq(lessor_renew(ls, 5, 0, &ttl, &ck), QERR_NO_LEADER);
}

Test(lessor, expiry_order_with_many)
{
    lessor_promote(ls, 0);
    for (int i = 1; i <= 200; i++)
        grant(i, 10 + (i * 7919) % 100, 0);
    int64_t last = 0, ids[1];
    size_t seen = 0;
    for (int64_t t = 0; t <= 200000; t += 1000) {
        while (lessor_expired(ls, t, ids, 1) == 1) {
            int64_t ttl = 10 + (ids[0] * 7919) % 100;
            cr_assert_leq(ttl * 1000, t);
            cr_assert_geq(ttl, last, "expiries come in TTL order");
            last = ttl;
            seen++;
        }
    }
    cr_assert_eq(seen, 200);
}

static void count_key(const uint8_t *k, size_t n, void *arg)
{
    (void)k;
    (void)n;
    ++*(int *)arg;
}

Test(lessor, attach_detach_remove)
{
    grant(3, 10, 0);
    cr_assert_eq(lessor_attach(ls, 3, (const uint8_t *)"a", 1), 0);
    cr_assert_eq(lessor_attach(ls, 3, (const uint8_t *)"b", 1), 0);
    cr_assert_eq(lessor_attach(ls, 3, (const uint8_t *)"a", 1), 0, "attaching twice is once");
    cr_assert_eq(lessor_attach(ls, 4, (const uint8_t *)"a", 1), QERR_LEASE_NOT_FOUND);
    int n = 0;
    cr_assert_eq(lessor_keys(ls, 3, count_key, &n), 2);
    cr_assert_eq(n, 2);
    lessor_detach(ls, 3, (const uint8_t *)"a", 1);
    cr_assert_eq(lessor_keys(ls, 3, NULL, NULL), 1);
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(lessor_remove(ls, 3), 0);
    cr_assert_eq(lessor_remove(ls, 3), QERR_LEASE_NOT_FOUND);
    cr_assert_eq(backend_batch_commit(be), 0);
    cr_assert_eq(lessor_keys(ls, 3, NULL, NULL), -1);
}

Test(lessor, persisted_with_checkpointed_remaining)
{
    lessor_promote(ls, 0);
    grant(10, 100, 0);
    grant(11, 100, 0);
    grant(12, 100, 0);
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(lessor_remove(ls, 12), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    int64_t ids[8], rem[8];
    cr_assert_eq(lessor_due_checkpoints(ls, 4000, 5000, ids, rem, 8), 0, "not due yet");
    size_t n = lessor_due_checkpoints(ls, 60000, 5000, ids, rem, 8);
    cr_assert_eq(n, 2);
    cr_assert_eq(backend_batch_begin(be), 0);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(rem[i], 40);
        cr_assert_eq(lessor_checkpoint(ls, ids[i], rem[i]), 0);
    }
    cr_assert_eq(backend_batch_commit(be), 0);
    /* renewing lease 11 asks to clear its checkpoint */
    int64_t ttl;
    bool ck = false;
    cr_assert_eq(lessor_renew(ls, 11, 61000, &ttl, &ck), 0);
    cr_assert(ck);
    cr_assert_eq(backend_batch_begin(be), 0);
    cr_assert_eq(lessor_checkpoint(ls, 11, 0), 0);
    cr_assert_eq(backend_batch_commit(be), 0);

    close_all();
    open_all();
    cr_assert_eq(lessor_count(ls), 2);
    cr_assert(!lessor_exists(ls, 12));
    lessor_promote(ls, 1000000);
    int64_t r, g;
    cr_assert_eq(lessor_remaining(ls, 10, 1000000, &r, &g), 0);
    cr_assert_eq(r, 40, "a new primary keeps the checkpointed remaining TTL");
    cr_assert_eq(lessor_remaining(ls, 11, 1000000, &r, &g), 0);
    cr_assert_eq(r, 100, "renewed since its checkpoint: full TTL");
}

Test(lessor, negative_ids_as_etcd)
{
    /* etcd accepts any non-zero id; a negative one once stopped quorum */
    cr_assert_eq(grant(-9, 3600, 0), 3600);
    cr_assert_eq(grant(-9, 3600, 0), QERR_LEASE_EXISTS);
    cr_assert_eq(grant(0, 10, 0), -EINVAL, "0 means 'server picks', never a lease id");
    close_all();
    open_all();
    cr_assert(lessor_exists(ls, -9), "a negative id survives a restart");
}

/* A lease storm: 10,000 leases granted alike expire together, and a new
 * primary (lessor_promote, the leader after an election) picks them all
 * up; lessor_expired hands them out at most |max| at a time (the server
 * proposes 100 revocations per 100 ms tick, etcd's leaseRevokeRate), each
 * once, none while a revocation is in flight, and a failed revocation puts
 * the lease back. */
Test(lessor, storm_expires_in_bounded_batches)
{
    enum { N = 10000 };
    cr_assert_eq(backend_batch_begin(be), 0);
    int64_t g;
    for (int i = 1; i <= N; i++)
        cr_assert_eq(lessor_grant(ls, i, 30, 0, &g), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    int64_t ids[100];
    cr_assert_eq(lessor_expired(ls, 60000, ids, 100), 0, "not primary yet: nothing expires");
    lessor_promote(ls, 1000);
    cr_assert_eq(lessor_next_expiry(ls), 31000);
    cr_assert_eq(lessor_expired(ls, 30999, ids, 100), 0);
    static bool seen[N + 1];
    size_t total = 0, passes = 0;
    size_t n;
    while ((n = lessor_expired(ls, 31000, ids, 100)) > 0) {
        cr_assert_leq(n, 100);
        passes++;
        for (size_t k = 0; k < n; k++) {
            cr_assert(ids[k] >= 1 && ids[k] <= N);
            cr_assert_not(seen[ids[k]], "lease %lld handed out twice", (long long)ids[k]);
            seen[ids[k]] = true;
        }
        total += n;
    }
    cr_assert_eq(total, N);
    cr_assert_eq(passes, N / 100);
    lessor_revoke_failed(ls, 77);
    cr_assert_eq(lessor_expired(ls, 31000, ids, 100), 1);
    cr_assert_eq(ids[0], 77);
}

/* A new primary with more leases than one promotion step takes: they are
 * taken into the heap over several lessor_expired calls, each on the
 * promotion's clock (a checkpointed remaining TTL, or the full TTL), every
 * one expiring exactly once; one the steps have not reached yet answers
 * lessor_remaining on that clock, and one renewed before the steps reach
 * it keeps its renewal. */
Test(lessor, promotion_in_steps)
{
    enum { N = 50000 };
    cr_assert_eq(backend_batch_begin(be), 0);
    int64_t g;
    for (int i = 1; i <= N; i++)
        cr_assert_eq(lessor_grant(ls, i, i % 2 ? 30 : 60, 0, &g), 0);
    cr_assert_eq(lessor_checkpoint(ls, 4, 10), 0); /* 10 s left of 60 */
    cr_assert_eq(backend_batch_commit(be), 0);
    lessor_promote(ls, 1000);
    for (int i = 1; i <= N; i++) {
        int64_t rem, gr;
        cr_assert_eq(lessor_remaining(ls, i, 1000, &rem, &gr), 0);
        cr_assert_eq(rem, i == 4 ? 10 : i % 2 ? 30 : 60, "lease %d: %lld left", i,
                     (long long)rem);
    }
    /* renewed at 20 s, before the steps may have reached it: 60 s from then */
    int64_t ttl;
    bool ck;
    cr_assert_eq(lessor_renew(ls, N, 20000, &ttl, &ck), 0);
    static bool seen[N + 1];
    int64_t ids[100];
    size_t total = 0, n;
    for (int64_t t = 1000; t <= 100000; t += 1000) {
        while ((n = lessor_expired(ls, t, ids, 100)) > 0) {
            for (size_t k = 0; k < n; k++) {
                int64_t id = ids[k];
                cr_assert(id >= 1 && id <= N);
                cr_assert_not(seen[id], "lease %lld handed out twice", (long long)id);
                seen[id] = true;
                int64_t due = id == 4 ? 11000 : id == N ? 80000 : id % 2 ? 31000 : 61000;
                cr_assert_geq(t, due, "lease %lld expired at %lld, due at %lld", (long long)id,
                              (long long)t, (long long)due);
                cr_assert_lt(t - due, 1000, "lease %lld expired late", (long long)id);
            }
            total += n;
        }
    }
    cr_assert_eq(total, N);
}

/* Checkpoints go round every lease: with far more leases than one call
 * checkpoints, each call goes on where the last stopped (from the first
 * slot every time, the same first leases were the only ones ever
 * checkpointed). */
Test(lessor, checkpoints_reach_every_lease)
{
    enum { N = 3000 };
    cr_assert_eq(backend_batch_begin(be), 0);
    int64_t g;
    for (int i = 1; i <= N; i++)
        cr_assert_eq(lessor_grant(ls, i, 3600, 0, &g), 0);
    cr_assert_eq(backend_batch_commit(be), 0);
    lessor_promote(ls, 0);
    static int times[N + 1];
    int64_t ids[100], rem[100];
    /* a call a second, 100 a call, due every 5 s: every lease is due by
     * the time the round comes back to it */
    for (int64_t t = 10000; t < 10000 + 2 * (N / 100) * 1000; t += 1000) {
        size_t n = lessor_due_checkpoints(ls, t, 5000, ids, rem, 100);
        cr_assert_eq(n, 100);
        for (size_t k = 0; k < n; k++)
            times[ids[k]]++;
    }
    for (int i = 1; i <= N; i++)
        cr_assert_eq(times[i], 2, "lease %d checkpointed %d times in two rounds", i, times[i]);
}
