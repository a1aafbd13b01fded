/* tests/raft/test_progress.c: follower progress and flow control
 * (src/raft/progress.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>

#include "raft/raft_int.h"

Test(progress, inflights_window)
{
    struct inflights in;
    cr_assert_eq(inflights_init(&in, 3), 0);
    inflights_add(&in, 10);
    inflights_add(&in, 20);
    cr_assert_not(inflights_full(&in));
    inflights_add(&in, 30);
    cr_assert(inflights_full(&in));
    inflights_add(&in, 40); /* refused when full */
    cr_assert_eq(in.count, 3);
    inflights_free_le(&in, 20);
    cr_assert_eq(in.count, 1);
    inflights_add(&in, 40);
    inflights_add(&in, 50); /* wraps around */
    cr_assert(inflights_full(&in));
    inflights_free_first(&in);
    cr_assert_eq(in.count, 2);
    inflights_free_le(&in, 100);
    cr_assert_eq(in.count, 0);
    inflights_free(&in);
}

static struct progress mk(void)
{
    struct progress p = {0};
    cr_assert_eq(inflights_init(&p.inflights, 2), 0);
    p.id = 2;
    p.next = 11;
    return p;
}

Test(progress, probe_sends_one_at_a_time)
{
    struct progress p = mk();
    progress_become_probe(&p);
    cr_assert_eq(p.next, 1, "probing restarts right after match");
    p.next = 11;
    cr_assert_not(progress_is_paused(&p));
    p.probe_sent = true;
    cr_assert(progress_is_paused(&p));
    /* a rejection of the probe moves next down to the hint */
    cr_assert(progress_maybe_decr(&p, 7, 0) == false, "stale: not the probe we sent");
    cr_assert(progress_maybe_decr(&p, 10, 4));
    cr_assert_eq(p.next, 5);
    cr_assert_not(progress_is_paused(&p));
    inflights_free(&p.inflights);
}

Test(progress, replicate_pipelines_up_to_window)
{
    struct progress p = mk();
    cr_assert(progress_maybe_update(&p, 10));
    progress_become_replicate(&p);
    cr_assert_eq(p.next, 11);
    inflights_add(&p.inflights, 12);
    cr_assert_not(progress_is_paused(&p));
    inflights_add(&p.inflights, 14);
    cr_assert(progress_is_paused(&p), "window of 2 is full");
    /* stale rejection (at or below match) is ignored */
    cr_assert_not(progress_maybe_decr(&p, 9, 0));
    cr_assert(progress_maybe_decr(&p, 12, 0));
    cr_assert_eq(p.next, 11);
    inflights_free(&p.inflights);
}

Test(progress, snapshot_state)
{
    struct progress p = mk();
    progress_become_snapshot(&p, 100);
    cr_assert(progress_is_paused(&p));
    cr_assert(progress_maybe_update(&p, 100));
    progress_become_probe(&p);
    cr_assert_eq(p.next, 101);
    cr_assert_not(progress_maybe_update(&p, 50), "older ack changes nothing");
    inflights_free(&p.inflights);
}

Test(progress, quorum_index)
{
    uint64_t a[] = {5, 9, 7};
    cr_assert_eq(quorum_index(a, 3), 7);
    uint64_t b[] = {1, 2, 3, 4, 5};
    cr_assert_eq(quorum_index(b, 5), 3);
    uint64_t c[] = {8, 2, 6, 4};
    cr_assert_eq(quorum_index(c, 4), 4, "4 voters need 3");
    uint64_t d[] = {3};
    cr_assert_eq(quorum_index(d, 1), 3);
}
