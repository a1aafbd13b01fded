/* tests/raft/test_conf.c: membership values (src/raft/conf.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>

#include "raft/raft_int.h"

static struct raft_membership m3(void)
{
    struct raft_membership m = {.voters = {1, 2, 3}, .n_voters = 3};
    return m;
}

Test(conf, encode_decode)
{
    struct raft_membership m = m3(), out;
    m.learners[0] = 9;
    m.n_learners = 1;
    uint8_t buf[512];
    size_t n = raft_membership_encode(&m, buf);
    cr_assert_eq(n, raft_membership_size(&m));
    cr_assert_eq(raft_membership_decode(buf, n, &out), 0);
    cr_assert_eq(out.n_voters, 3);
    cr_assert_eq(out.n_learners, 1);
    cr_assert_eq(out.learners[0], 9);
    cr_assert(raft_membership_is_voter(&out, 2));
    cr_assert(raft_membership_is_learner(&out, 9));
    cr_assert_not(raft_membership_is_voter(&out, 9));
    cr_assert_eq(raft_membership_decode(buf, n - 1, &out), -EINVAL);
    /* a voter listed twice is rejected */
    m.voters[2] = 1;
    n = raft_membership_encode(&m, buf);
    cr_assert_eq(raft_membership_decode(buf, n, &out), -EINVAL);
}

Test(conf, one_change_at_a_time)
{
    struct raft_membership cur = m3(), next;
    next = cur;
    next.voters[next.n_voters++] = 4;
    cr_assert_eq(raft_membership_check(&cur, &next), 0, "add voter");
    next = cur;
    next.voters[next.n_voters++] = 4;
    next.voters[next.n_voters++] = 5;
    cr_assert_eq(raft_membership_check(&cur, &next), -EINVAL, "two voters at once");
    next = cur;
    next.n_voters = 2;
    cr_assert_eq(raft_membership_check(&cur, &next), 0, "remove voter");
    next = cur;
    next.learners[next.n_learners++] = 4;
    cr_assert_eq(raft_membership_check(&cur, &next), 0, "add learner");
    struct raft_membership withl = next;
    next = withl;
    next.n_learners = 0;
    next.voters[next.n_voters++] = 4;
    cr_assert_eq(raft_membership_check(&withl, &next), 0, "promote learner");
    next = cur;
    next.n_voters = 2;
    next.learners[next.n_learners++] = 3;
    cr_assert_eq(raft_membership_check(&cur, &next), -EINVAL, "demotion not allowed");
    next = cur;
    cr_assert_eq(raft_membership_check(&cur, &next), -EINVAL, "no change");
    struct raft_membership one = {.voters = {1}, .n_voters = 1}, none = {0};
    cr_assert_eq(raft_membership_check(&one, &none), -EINVAL, "no voters left");
}

Test(conf, msg_names)
{
    cr_assert_str_eq(raft_msg_type_name(RAFT_MSG_APP), "MsgApp");
    cr_assert_str_eq(raft_msg_type_name(RAFT_MSG_READ_INDEX_RESP), "MsgReadIndexResp");
    cr_assert_str_eq(raft_msg_type_name(99), "MsgUnknown");
}
