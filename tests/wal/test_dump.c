/* tests/wal/test_dump.c: tools/quorum-dump run on a WAL and a database this
 * test creates (the binary's path comes in $QUORUM_DUMP from meson); the
 * output must carry the records and values put there. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "backend/backend.h"
#include "base/err.h"
#include "helpers.h"
#include "mvcc/mvcc.h"
#include "wal/wal.h"

static char *dir;

static void setup(void)
{
    dir = tmp_make();
    cr_assert_not_null(dir);
}

static void teardown(void)
{
    tmp_remove(dir);
}

TestSuite(dump, .init = setup, .fini = teardown);

/* run executes quorum-dump |cmd| <dir> without a shell; returns the exit
 * status and the output (malloc'd, NUL-terminated) in *out. */
static int run(const char *cmd, char **out)
{
    const char *exe = getenv("QUORUM_DUMP");
    cr_assert_not_null(exe, "QUORUM_DUMP not set");
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execl(exe, exe, cmd, dir, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t k;
    while ((k = read(fds[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)k;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    close(fds[0]);
    buf[len] = '\0';
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void make_wal(void)
{
    struct wal_options o = {.data_dir = dir, .node_id = 0xabc, .cluster_id = 0xdef};
    struct wal *w;
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_create(&o, &w, err, sizeof(err)), 0, "%s", err);
    struct raft_entry e[3] = {
        {.term = 1, .index = 1, .type = RAFT_ENTRY_CONF, .data = "\x01\x02", .len = 2},
        {.term = 2, .index = 2, .data = "hello-world", .len = 11},
        {.term = 2, .index = 3, .data = "", .len = 0},
    };
    struct raft_hard_state hs = {.term = 2, .vote = 0xabc, .commit = 3};
    cr_assert_eq(wal_save(w, &hs, e, 3), 0);
    cr_assert_eq(wal_save_snapshot(w, 3, 2, 0), 0);
    cr_assert_eq(wal_sync(w), 0);
    wal_close(w);
}

#define HAS(out, s) cr_assert(strstr(out, s) != NULL, "missing \"%s\" in:\n%s", s, out)

Test(dump, wal_records)
{
    make_wal();
    char *out;
    int rc = run("wal", &out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    HAS(out, "file 0000000000000000-0000000000000001.wal");
    HAS(out, "segment");
    HAS(out, "seq=0 first_index=1");
    HAS(out, "node_id=abc cluster_id=def");
    HAS(out, "entry");
    HAS(out, "index=1 term=1 type=conf size=2 hex=0102");
    HAS(out, "index=2 term=2 type=normal size=11 hex=68656c6c6f2d776f726c64 ascii=\"hello-world\"");
    HAS(out, "index=3 term=2 type=normal size=0");
    HAS(out, "hardstate");
    HAS(out, "term=2 vote=abc commit=3");
    HAS(out, "snapshot");
    HAS(out, "records 7 entries 3");
    HAS(out, "status ok");
    free(out);
}

Test(dump, wal_torn_tail)
{
    make_wal();
    struct rec_list *l = calloc(1, sizeof(*l));
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_dump(dir, rec_collect, l, err, sizeof(err)), 0);
    const struct rec_pos *last = &l->v[l->n - 1];
    size_t n;
    uint8_t *b = file_get(last->path, &n);
    b[last->offset + 9] ^= 1;
    cr_assert_eq(file_put(last->path, b, n), 0);
    free(b);
    char *out;
    int rc = run("wal", &out);
    cr_assert_eq(rc, 2, "exit %d:\n%s", rc, out);
    HAS(out, "records 6 entries 3");
    HAS(out, "status torn");
    char want[64];
    snprintf(want, sizeof(want), "offset %lu", (unsigned long)last->offset);
    HAS(out, want);
    free(out);
    free(l);
}

Test(dump, wal_missing)
{
    char *out;
    cr_assert_eq(run("wal", &out), 1);
    HAS(out, "status error");
    free(out);
}

Test(dump, db_state)
{
    char dbdir[600];
    snprintf(dbdir, sizeof(dbdir), "%s/member/db", dir);
    char member[600];
    snprintf(member, sizeof(member), "%s/member", dir);
    cr_assert_eq(mkdir(member, 0700), 0);
    cr_assert_eq(mkdir(dbdir, 0700), 0);
    struct backend_options bo = {.dir = dbdir, .map_size = 64 << 20};
    backend *be;
    cr_assert_eq(backend_open(&bo, &be), 0);
    mvcc_store *s;
    cr_assert_eq(mvcc_open(be, &s), 0);
    cr_assert_eq(mvcc_batch_begin(s), 0);
    const char *keys[] = {"alpha", "beta", "alpha"};
    for (int i = 0; i < 3; i++) {
        mvcc_txn *t;
        cr_assert_eq(mvcc_txn_begin(s, &t), 0);
        cr_assert_eq(mvcc_txn_put(t, (const uint8_t *)keys[i], strlen(keys[i]),
                                  (const uint8_t *)"v", 1, 0, NULL, NULL),
                     0);
        mvcc_txn_end(t);
    }
    cr_assert_eq(backend_meta_put(be, "consistent_index", 42), 0);
    cr_assert_eq(backend_meta_put(be, "term", 3), 0);
    cr_assert_eq(mvcc_batch_commit(s), 0);
    mvcc_close(s);
    backend_close(be);
    char *out;
    int rc = run("db", &out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    HAS(out, "data.mdb");
    HAS(out, "meta consistent_index 42");
    HAS(out, "meta term 3");
    HAS(out, "meta finishedCompactRev (unset)");
    HAS(out, "revision 4 ");
    HAS(out, "keys 2");
    HAS(out, "db key      entries=3");
    free(out);
}

Test(dump, usage)
{
    char *out;
    cr_assert_eq(run("nonsense", &out), 1);
    HAS(out, "usage");
    free(out);
}

Test(dump, wal_corrupt_middle)
{
    make_wal();
    struct rec_list *l = calloc(1, sizeof(*l));
    char err[WAL_ERR_LEN];
    cr_assert_eq(wal_dump(dir, rec_collect, l, err, sizeof(err)), 0);
    const struct rec_pos *mid = &l->v[3]; /* entry 2, records follow it */
    size_t n;
    uint8_t *b = file_get(mid->path, &n);
    b[mid->offset + 30] ^= 1;
    cr_assert_eq(file_put(mid->path, b, n), 0);
    free(b);
    char *out;
    int rc = run("wal", &out);
    cr_assert_eq(rc, 2, "exit %d:\n%s", rc, out);
    HAS(out, "records 3 entries 1");
    HAS(out, "status corrupt");
    char want[64];
    snprintf(want, sizeof(want), "corrupt record at offset %lu", (unsigned long)mid->offset);
    HAS(out, want);
    free(out);
    free(l);
}
