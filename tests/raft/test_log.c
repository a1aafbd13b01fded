/* tests/raft/test_log.c: the in-memory log (src/raft/log.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "raft/raft_int.h"

static void append_terms(struct raft_log *l, const uint64_t *terms, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        char d[8];
        snprintf(d, sizeof(d), "e%zu", (size_t)log_last_index(l) + 1);
        cr_assert_eq(log_append_one(l, terms[k], RAFT_ENTRY_NORMAL, d, strlen(d)), 0);
    }
}

Test(log, empty)
{
    struct raft_log l;
    log_init(&l);
    cr_assert_eq(log_last_index(&l), 0);
    cr_assert_eq(log_last_term(&l), 0);
    uint64_t t = 99;
    cr_assert_eq(log_term(&l, 0, &t), 0);
    cr_assert_eq(t, 0);
    cr_assert_eq(log_term(&l, 1, &t), -ENOENT);
    cr_assert_null(log_entry(&l, 1));
    log_free(&l);
}

Test(log, append_and_lookup)
{
    struct raft_log l;
    log_init(&l);
    uint64_t terms[] = {1, 1, 2, 3, 3};
    append_terms(&l, terms, 5);
    cr_assert_eq(log_last_index(&l), 5);
    cr_assert_eq(log_last_term(&l), 3);
    for (uint64_t i = 1; i <= 5; i++) {
        const struct raft_entry *e = log_entry(&l, i);
        cr_assert_not_null(e);
        cr_assert_eq(e->index, i);
        cr_assert_eq(e->term, terms[i - 1]);
        char d[8];
        snprintf(d, sizeof(d), "e%zu", (size_t)i);
        cr_assert_eq(e->len, strlen(d));
        cr_assert_eq(memcmp(e->data, d, e->len), 0);
    }
    /* appending out of place is refused */
    struct raft_entry bad = {.term = 3, .index = 9};
    cr_assert_eq(log_append(&l, &bad, 1), -EINVAL);
    log_free(&l);
}

Test(log, append_copies_data)
{
    struct raft_log l;
    log_init(&l);
    char buf[4] = "abc";
    struct raft_entry e[2] = {{.term = 1, .index = 1, .data = buf, .len = 3},
                              {.term = 1, .index = 2, .data = NULL, .len = 0}};
    cr_assert_eq(log_append(&l, e, 2), 0);
    buf[0] = 'X';
    cr_assert_eq(memcmp(log_entry(&l, 1)->data, "abc", 3), 0);
    cr_assert_null(log_entry(&l, 2)->data);
    log_free(&l);
}

Test(log, truncate_conflict)
{
    struct raft_log l;
    log_init(&l);
    uint64_t terms[] = {1, 1, 2, 2, 2};
    append_terms(&l, terms, 5);
    l.stabled = 5;
    struct raft_entry incoming[] = {{.term = 2, .index = 3}, {.term = 3, .index = 4}};
    cr_assert_eq(log_find_conflict(&l, incoming, 2), 4);
    log_truncate(&l, 4);
    cr_assert_eq(log_last_index(&l), 3);
    cr_assert_eq(l.stabled, 3, "truncation unpersists the tail");
    cr_assert_eq(log_append(&l, &incoming[1], 1), 0);
    cr_assert_eq(log_last_term(&l), 3);
    struct raft_entry same[] = {{.term = 1, .index = 2}, {.term = 2, .index = 3}};
    cr_assert_eq(log_find_conflict(&l, same, 2), 0);
    log_free(&l);
}

Test(log, compact_and_reset)
{
    struct raft_log l;
    log_init(&l);
    uint64_t terms[200];
    for (int k = 0; k < 200; k++)
        terms[k] = 1 + (uint64_t)k / 50;
    append_terms(&l, terms, 200);
    log_compact(&l, 120);
    cr_assert_eq(log_first_index(&l), 121);
    cr_assert_eq(l.snap_term, 3);
    cr_assert_null(log_entry(&l, 120));
    uint64_t t;
    cr_assert_eq(log_term(&l, 120, &t), 0);
    cr_assert_eq(t, 3);
    cr_assert_eq(log_term(&l, 119, &t), -ENOENT);
    cr_assert_eq(log_entry(&l, 121)->term, 3);
    /* the window keeps working after many appends (reclaims the front) */
    uint64_t more[500];
    for (int k = 0; k < 500; k++)
        more[k] = 5;
    append_terms(&l, more, 500);
    cr_assert_eq(log_last_index(&l), 700);
    cr_assert_eq(log_entry(&l, 700)->index, 700);
    cr_assert_eq(log_entry(&l, 121)->index, 121);
    log_reset(&l, 1000, 7);
    cr_assert_eq(log_last_index(&l), 1000);
    cr_assert_eq(log_last_term(&l), 7);
    cr_assert_eq(l.stabled, 1000);
    log_free(&l);
}

Test(log, find_conflict_by_term)
{
    struct raft_log l;
    log_init(&l);
    uint64_t terms[] = {1, 1, 2, 2, 4, 4};
    append_terms(&l, terms, 6);
    cr_assert_eq(log_find_conflict_by_term(&l, 6, 3), 4); /* skips the whole term 4 */
    cr_assert_eq(log_find_conflict_by_term(&l, 6, 4), 6);
    cr_assert_eq(log_find_conflict_by_term(&l, 10, 1), 2);
    cr_assert_eq(log_find_conflict_by_term(&l, 6, 0), 0);
    log_free(&l);
}

Test(log, up_to_date_5_4_1)
{
    struct raft_log l;
    log_init(&l);
    uint64_t terms[] = {1, 2, 2};
    append_terms(&l, terms, 3);
    cr_assert(log_is_up_to_date(&l, 1, 3), "higher last term wins");
    cr_assert(log_is_up_to_date(&l, 3, 2), "same term, same length");
    cr_assert(log_is_up_to_date(&l, 4, 2), "same term, longer");
    cr_assert_not(log_is_up_to_date(&l, 2, 2), "same term, shorter");
    cr_assert_not(log_is_up_to_date(&l, 9, 1), "lower last term loses");
    log_free(&l);
}

/* The log counts its entries' data (raft_get_log_bytes, the byte bound of
 * server/node.c's trim_log): appends add, truncate, compact and reset
 * take away, empty entries count nothing. */
Test(log, bytes_follow_appends_and_drops)
{
    struct raft_log l;
    log_init(&l);
    static char big[1000];
    for (int k = 0; k < 10; k++)
        cr_assert_eq(log_append_one(&l, 1, RAFT_ENTRY_NORMAL, big, 100 * (size_t)(k + 1)), 0);
    cr_assert_eq(log_append_one(&l, 1, RAFT_ENTRY_NORMAL, NULL, 0), 0);
    struct raft_entry two[2] = {
        {.term = 1, .index = 12, .type = RAFT_ENTRY_NORMAL, .data = big, .len = 7},
        {.term = 1, .index = 13, .type = RAFT_ENTRY_NORMAL, .data = big, .len = 3}};
    cr_assert_eq(log_append(&l, two, 2), 0);
    cr_assert_eq(l.bytes, 5500 + 10);
    log_truncate(&l, 13); /* drops the 3 */
    cr_assert_eq(l.bytes, 5507);
    log_compact(&l, 3); /* drops 100, 200, 300 */
    cr_assert_eq(l.bytes, 4907);
    log_compact(&l, 12);
    cr_assert_eq(l.bytes, 0);
    cr_assert_eq(log_append_one(&l, 1, RAFT_ENTRY_NORMAL, big, 50), 0);
    cr_assert_eq(l.bytes, 50);
    log_reset(&l, 100, 2);
    cr_assert_eq(l.bytes, 0);
    log_free(&l);
}
