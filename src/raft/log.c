/* raft/log.c: the core's in-memory Raft log.
 *
 * The log keeps every entry after the latest snapshot in one growable array
 * (a window ents[head .. head+n)), so term lookups and slices for append
 * messages and Ready are O(1) and need no copies. Compaction advances |head|
 * and slides the window down only when it wastes half the array. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "raft/raft_int.h"

/* The shared allocation behind the data of entries appended together. */
struct log_block {
    size_t refs;
    uint8_t data[];
};

void log_init(struct raft_log *l) { memset(l, 0, sizeof(*l)); }

static void free_range(struct raft_log *l, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++) {
        struct log_block *b = l->blk[l->head + k];
        l->bytes -= l->ents[l->head + k].len;
        if (b && --b->refs == 0)
            free(b);
    }
}

void log_free(struct raft_log *l)
{
    free_range(l, 0, l->n);
    free(l->ents);
    free(l->blk);
    memset(l, 0, sizeof(*l));
}

uint64_t log_last_index(const struct raft_log *l) { return l->snap_index + l->n; }

uint64_t log_last_term(const struct raft_log *l)
{
    return l->n ? l->ents[l->head + l->n - 1].term : l->snap_term;
}

int log_term(const struct raft_log *l, uint64_t i, uint64_t *t)
{
    if (i == l->snap_index) {
        *t = l->snap_term;
        return 0;
    }
    if (i < l->snap_index || i > log_last_index(l))
        return -ENOENT;
    *t = l->ents[l->head + (i - l->snap_index - 1)].term;
    return 0;
}

uint64_t log_term_or0(const struct raft_log *l, uint64_t i)
{
    uint64_t t = 0;
    if (log_term(l, i, &t) != 0)
        return 0;
    return t;
}

bool log_match_term(const struct raft_log *l, uint64_t i, uint64_t t)
{
    uint64_t have;
    return log_term(l, i, &have) == 0 && have == t;
}

const struct raft_entry *log_entry(const struct raft_log *l, uint64_t i)
{
    if (i <= l->snap_index || i > log_last_index(l))
        return NULL;
    return &l->ents[l->head + (i - l->snap_index - 1)];
}

static int reserve(struct raft_log *l, size_t more)
{
    if (l->head + l->n + more <= l->cap)
        return 0;
    if (l->head > 0 && l->n + more <= l->cap / 2 + 1) {
        /* Plenty of room once the compacted front is reclaimed. */
        memmove(l->ents, l->ents + l->head, l->n * sizeof(*l->ents));
        memmove(l->blk, l->blk + l->head, l->n * sizeof(*l->blk));
        l->head = 0;
        if (l->n + more <= l->cap)
            return 0;
    }
    size_t ncap = l->cap ? l->cap : 64;
    while (ncap < l->head + l->n + more)
        ncap *= 2;
    struct raft_entry *e = realloc(l->ents, ncap * sizeof(*e));
    if (!e)
        return -ENOMEM;
    l->ents = e;
    struct log_block **b = realloc(l->blk, ncap * sizeof(*b));
    if (!b)
        return -ENOMEM; /* ents grew, cap did not: still consistent */
    l->blk = b;
    l->cap = ncap;
    return 0;
}

int log_append(struct raft_log *l, const struct raft_entry *ents, size_t n)
{
    if (n == 0)
        return 0;
    if (ents[0].index != log_last_index(l) + 1)
        return -EINVAL;
    int rc = reserve(l, n);
    if (rc)
        return rc;
    size_t total = 0, with_data = 0;
    for (size_t k = 0; k < n; k++) {
        total += ents[k].len;
        with_data += ents[k].len > 0;
    }
    struct log_block *b = NULL;
    if (total) {
        b = malloc(sizeof(*b) + total);
        if (!b)
            return -ENOMEM;
        b->refs = with_data;
    }
    l->bytes += total;
    size_t off = 0;
    for (size_t k = 0; k < n; k++) {
        struct raft_entry *dst = &l->ents[l->head + l->n];
        *dst = ents[k];
        dst->index = log_last_index(l) + 1;
        if (ents[k].len) {
            memcpy(b->data + off, ents[k].data, ents[k].len);
            dst->data = b->data + off;
            off += ents[k].len;
            l->blk[l->head + l->n] = b;
        } else {
            dst->data = NULL;
            l->blk[l->head + l->n] = NULL;
        }
        l->n++;
    }
    return 0;
}

int log_append_one(struct raft_log *l, uint64_t term, uint8_t type, const void *data, size_t len)
{
    struct raft_entry e = {
        .term = term, .index = log_last_index(l) + 1, .type = type, .data = data, .len = len};
    return log_append(l, &e, 1);
}

void log_truncate(struct raft_log *l, uint64_t i)
{
    if (i <= l->snap_index || i > log_last_index(l))
        return;
    size_t keep = (size_t)(i - l->snap_index - 1);
    free_range(l, keep, l->n);
    l->n = keep;
    if (l->stabled >= i)
        l->stabled = i - 1;
}

void log_compact(struct raft_log *l, uint64_t i)
{
    if (i <= l->snap_index || i > log_last_index(l))
        return;
    size_t drop = (size_t)(i - l->snap_index);
    l->snap_term = l->ents[l->head + drop - 1].term;
    free_range(l, 0, drop);
    l->head += drop;
    l->n -= drop;
    l->snap_index = i;
    if (l->n == 0)
        l->head = 0;
    if (l->stabled < i)
        l->stabled = i;
}

void log_reset(struct raft_log *l, uint64_t index, uint64_t term)
{
    free_range(l, 0, l->n);
    l->head = l->n = 0;
    l->snap_index = index;
    l->snap_term = term;
    l->stabled = index;
}

uint64_t log_find_conflict(const struct raft_log *l, const struct raft_entry *ents, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (!log_match_term(l, ents[k].index, ents[k].term)) {
            /* An index inside the snapshot is committed, hence matching. */
            if (ents[k].index <= l->snap_index)
                continue;
            return ents[k].index;
        }
    }
    return 0;
}

uint64_t log_find_conflict_by_term(const struct raft_log *l, uint64_t i, uint64_t t)
{
    if (i > log_last_index(l))
        i = log_last_index(l);
    for (; i > l->snap_index; i--) {
        uint64_t have = log_term_or0(l, i);
        if (have <= t)
            return i;
    }
    return l->snap_index;
}

bool log_is_up_to_date(const struct raft_log *l, uint64_t idx, uint64_t term)
{
    uint64_t lt = log_last_term(l);
    return term > lt || (term == lt && idx >= log_last_index(l));
}
