/* tests/bolt/test_bolt.c: bolt/ — the writer's files read back by the
 * reader and by bbolt itself (etcdctl snapshot status), files etcd 3.4
 * wrote read by the reader, and hostile files refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "bolt/bolt.h"

static char dir[256];

static void setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/qbolt-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(bolt, .init = setup, .fini = teardown, .timeout = 120);

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static int new_file(const char *name)
{
    char p[300];
    path_of(p, sizeof(p), name);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    return fd;
}

/* read_all reads a whole file into memory. */
static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static bolt_db *open_named(const char *name)
{
    char p[300], err[256] = "";
    path_of(p, sizeof(p), name);
    bolt_db *db;
    int rv = bolt_open_file(p, 0, &db, err, sizeof(err));
    cr_assert_eq(rv, 0, "open %s: %d %s", p, rv, err);
    return db;
}

static struct bolt_bucket sub(bolt_db *db, const struct bolt_bucket *parent, const char *name)
{
    struct bolt_bucket b;
    char err[256] = "";
    int rv = bolt_bucket_get(db, parent, name, strlen(name), &b, err, sizeof(err));
    cr_assert_eq(rv, 0, "bucket %s: %d %s", name, rv, err);
    return b;
}

/* walk counts a bucket's elements (recursively with |nested|). */
static long walk(bolt_db *db, const struct bolt_bucket *b, int nest, int *err_out)
{
    bolt_cursor c;
    char err[256];
    int rv = bolt_cursor_open(&c, db, b, err, sizeof(err));
    if (rv != 0) {
        *err_out = rv;
        return 0;
    }
    struct bolt_item it;
    long n = 0;
    while ((rv = bolt_cursor_next(&c, &it)) == 1) {
        n++;
        if (it.bucket && nest < 8) {
            struct bolt_bucket s;
            if (bolt_item_bucket(db, &it, &s, err, sizeof(err)) == 0)
                n += walk(db, &s, nest + 1, err_out);
            else
                *err_out = QERR_CORRUPT;
        }
    }
    bolt_cursor_close(&c);
    if (rv < 0)
        *err_out = rv;
    return n;
}

static void kv_key(char *k, int i) { sprintf(k, "key-%08d", i); }

Test(bolt, round_trip_small)
{
    int fd = new_file("small.db");
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    cr_assert_eq(bolt_writer_begin(w, "alpha", 5), 0);
    cr_assert_eq(bolt_writer_put(w, "a", 1, "1", 1), 0);
    cr_assert_eq(bolt_writer_put(w, "b", 1, "", 0), 0);
    cr_assert_eq(bolt_writer_put(w, "b", 1, "x", 1), -EINVAL, "keys must ascend");
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "alpha", 5), -EINVAL, "bucket names must ascend");
    cr_assert_eq(bolt_writer_begin(w, "empty", 5), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    uint64_t size;
    cr_assert_eq(bolt_writer_finish(w, 7, &size), 0);
    bolt_writer_free(w);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, size);
    close(fd);

    bolt_db *db = open_named("small.db");
    cr_assert_eq(bolt_txid(db), 7);
    cr_assert_eq(bolt_size(db), size);
    struct bolt_bucket root = bolt_root(db);
    struct bolt_bucket a = sub(db, &root, "alpha");
    bolt_cursor c;
    char err[256];
    cr_assert_eq(bolt_cursor_open(&c, db, &a, err, sizeof(err)), 0);
    struct bolt_item it;
    cr_assert_eq(bolt_cursor_next(&c, &it), 1);
    cr_assert(it.klen == 1 && it.key[0] == 'a' && it.vlen == 1 && it.val[0] == '1');
    cr_assert_eq(bolt_cursor_next(&c, &it), 1);
    cr_assert(it.klen == 1 && it.key[0] == 'b' && it.vlen == 0 && !it.bucket);
    cr_assert_eq(bolt_cursor_next(&c, &it), 0);
    bolt_cursor_close(&c);
    struct bolt_bucket e = sub(db, &root, "empty");
    int werr = 0;
    cr_assert_eq(walk(db, &e, 0, &werr), 0);
    cr_assert_eq(werr, 0);
    struct bolt_bucket none;
    cr_assert_eq(bolt_bucket_get(db, &root, "nope", 4, &none, err, sizeof(err)), -ENOENT);
    cr_assert_eq(bolt_check(db, 8, err, sizeof(err)), 0, "%s", err);
    bolt_close(db);
}

/* values larger than a page go to overflow pages, between small ones */
Test(bolt, large_values)
{
    int fd = new_file("large.db");
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    cr_assert_eq(bolt_writer_begin(w, "b", 1), 0);
    size_t sizes[] = {10, 5000, 3, 1 << 20, 4080, 4096, 20};
    uint8_t *big = malloc(1 << 20);
    for (size_t i = 0; i < (1 << 20); i++)
        big[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 7; i++) {
        char k[32];
        kv_key(k, i);
        cr_assert_eq(bolt_writer_put(w, k, strlen(k), big, sizes[i]), 0);
    }
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_finish(w, 1, NULL), 0);
    bolt_writer_free(w);
    close(fd);
    bolt_db *db = open_named("large.db");
    struct bolt_bucket root = bolt_root(db), b = sub(db, &root, "b");
    bolt_cursor c;
    char err[256];
    cr_assert_eq(bolt_cursor_open(&c, db, &b, err, sizeof(err)), 0);
    struct bolt_item it;
    for (int i = 0; i < 7; i++) {
        cr_assert_eq(bolt_cursor_next(&c, &it), 1, "%s", err);
        cr_assert_eq(it.vlen, sizes[i]);
        cr_assert_eq(memcmp(it.val, big, sizes[i]), 0);
    }
    cr_assert_eq(bolt_cursor_next(&c, &it), 0);
    bolt_cursor_close(&c);
    cr_assert_eq(bolt_check(db, 8, err, sizeof(err)), 0, "%s", err);
    bolt_close(db);
    free(big);
}

/* enough keys for three levels of branches */
Test(bolt, many_keys)
{
    int fd = new_file("many.db");
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    cr_assert_eq(bolt_writer_begin(w, "key", 3), 0);
    const int n = 300000;
    for (int i = 0; i < n; i++) {
        char k[32], v[32];
        kv_key(k, i);
        sprintf(v, "v%d", i);
        cr_assert_eq(bolt_writer_put(w, k, strlen(k), v, strlen(v)), 0);
    }
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_finish(w, 1, NULL), 0);
    bolt_writer_free(w);
    close(fd);
    bolt_db *db = open_named("many.db");
    struct bolt_bucket root = bolt_root(db), b = sub(db, &root, "key");
    bolt_cursor c;
    char err[256];
    cr_assert_eq(bolt_cursor_open(&c, db, &b, err, sizeof(err)), 0);
    struct bolt_item it;
    int i = 0, maxdepth = 0;
    while (bolt_cursor_next(&c, &it) == 1) {
        char k[32], v[32];
        kv_key(k, i);
        sprintf(v, "v%d", i);
        cr_assert(it.klen == strlen(k) && memcmp(it.key, k, it.klen) == 0);
        cr_assert(it.vlen == strlen(v) && memcmp(it.val, v, it.vlen) == 0);
        if (c.depth > maxdepth)
            maxdepth = c.depth;
        i++;
    }
    cr_assert_eq(i, n);
    cr_assert_geq(maxdepth, 3, "a tree of several branch levels (%d)", maxdepth);
    bolt_cursor_close(&c);
    cr_assert_eq(bolt_check(db, 8, err, sizeof(err)), 0, "%s", err);
    bolt_close(db);
}

Test(bolt, nested_buckets)
{
    int fd = new_file("nested.db");
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    cr_assert_eq(bolt_writer_begin(w, "outer", 5), 0);
    cr_assert_eq(bolt_writer_put(w, "a", 1, "1", 1), 0);
    cr_assert_eq(bolt_writer_begin(w, "m-inner", 7), 0);
    for (int i = 0; i < 2000; i++) {
        char k[32];
        kv_key(k, i);
        cr_assert_eq(bolt_writer_put(w, k, strlen(k), "x", 1), 0);
    }
    cr_assert_eq(bolt_writer_begin(w, "a-deeper", 8), -EINVAL, "names ascend with the keys");
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_put(w, "z", 1, "2", 1), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_finish(w, 1, NULL), 0);
    bolt_writer_free(w);
    close(fd);
    bolt_db *db = open_named("nested.db");
    struct bolt_bucket root = bolt_root(db), o = sub(db, &root, "outer"), in = sub(db, &o, "m-inner");
    int werr = 0;
    cr_assert_eq(walk(db, &in, 0, &werr), 2000);
    cr_assert_eq(walk(db, &o, 0, &werr), 2003);
    cr_assert_eq(werr, 0);
    char err[256];
    cr_assert_eq(bolt_check(db, 8, err, sizeof(err)), 0, "%s", err);
    bolt_close(db);
}

/* make_etcd runs the script that has etcd 3.4 write snap.db and member.db */
static void make_etcd(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "%s '%s'", getenv("MAKE_ETCD_DB"), dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* run captures a command's stdout */
static void run(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    cr_assert_eq(pclose(p), 0, "%s: %s", cmd, out);
}

Test(bolt, reads_what_etcd_wrote)
{
    make_etcd();
    const char *files[] = {"snap.db", "member.db"};
    for (int f = 0; f < 2; f++) {
        bolt_db *db = open_named(files[f]);
        struct bolt_bucket root = bolt_root(db);
        const char *names[] = {"alarm", "auth", "authRoles", "authUsers", "cluster", "key",
                               "lease", "members", "members_removed", "meta"};
        bolt_cursor c;
        char err[256];
        cr_assert_eq(bolt_cursor_open(&c, db, &root, err, sizeof(err)), 0);
        struct bolt_item it;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            cr_assert_eq(bolt_cursor_next(&c, &it), 1, "%s", err);
            cr_assert(it.bucket);
            cr_assert(it.klen == strlen(names[i]) && memcmp(it.key, names[i], it.klen) == 0,
                      "%.*s", (int)it.klen, it.key);
        }
        cr_assert_eq(bolt_cursor_next(&c, &it), 0);
        bolt_cursor_close(&c);
        struct bolt_bucket key = sub(db, &root, "key");
        int werr = 0;
        /* 88 revisions (/probe, /a x3, the delete of /probe, /leased,
         * /big, 80 /many) less /a's first, which the compaction at 3
         * removed (/a's at 3 and /probe's at 1 are what a read at 3 sees) */
        long n = walk(db, &key, 0, &werr);
        cr_assert_eq(werr, 0);
        cr_assert_eq(n, 87, "key records: %ld", n);
        struct bolt_bucket meta = sub(db, &root, "meta");
        cr_assert_eq(bolt_cursor_open(&c, db, &meta, err, sizeof(err)), 0);
        bool ci = false;
        while (bolt_cursor_next(&c, &it) == 1)
            if (it.klen == 16 && memcmp(it.key, "consistent_index", 16) == 0)
                ci = it.vlen == 8;
        bolt_cursor_close(&c);
        cr_assert(ci);
        cr_assert_eq(bolt_check(db, 8, err, sizeof(err)), 0, "%s", err);
        bolt_close(db);
    }
}

/* bbolt opens the writer's files: etcdctl snapshot status walks every
 * bucket (tx.Check first) */
Test(bolt, bbolt_reads_written)
{
    int fd = new_file("w.db");
    bolt_writer *w;
    cr_assert_eq(bolt_writer_new(fd, &w), 0);
    cr_assert_eq(bolt_writer_begin(w, "a", 1), 0);
    uint8_t big[9000];
    memset(big, 'q', sizeof(big));
    for (int i = 0; i < 5000; i++) {
        char k[32];
        kv_key(k, i);
        cr_assert_eq(bolt_writer_put(w, k, strlen(k), big, i % 100 == 0 ? sizeof(big) : 30), 0);
    }
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_begin(w, "b", 1), 0);
    cr_assert_eq(bolt_writer_end(w), 0);
    cr_assert_eq(bolt_writer_finish(w, 3, NULL), 0);
    bolt_writer_free(w);
    close(fd);
    char cmd[400], out[4096];
    snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 /usr/bin/etcdctl snapshot status -w json %s/w.db",
             dir);
    run(cmd, out, sizeof(out));
    cr_assert_not_null(strstr(out, "\"totalKey\":5000"), "%s", out);
}

static bolt_db *open_bytes(const uint8_t *b, size_t n, int *rv)
{
    bolt_db *db = NULL;
    char err[256];
    *rv = bolt_open_mem(b, n, &db, err, sizeof(err));
    return db;
}

/* hostile files: errors, never a crash or a loop */
Test(bolt, hostile)
{
    make_etcd();
    char p[300];
    path_of(p, sizeof(p), "member.db");
    size_t len;
    uint8_t *orig = read_all(p, &len);
    uint8_t *b = malloc(len);
    int rv;
    /* not a db, truncated, bad checksum */
    memset(b, 0x5a, len);
    cr_assert_null(open_bytes(b, len, &rv));
    cr_assert_eq(rv, QERR_CORRUPT);
    cr_assert_null(open_bytes(orig, 100, &rv));
    cr_assert_null(open_bytes(orig, len / 2, &rv));
    memcpy(b, orig, len);
    b[16 + 20] ^= 1;
    b[4096 + 16 + 20] ^= 1;
    cr_assert_null(open_bytes(b, len, &rv));
    /* a branch page that points at itself */
    bolt_db *db = open_bytes(orig, len, &rv);
    cr_assert_eq(rv, 0);
    struct bolt_bucket root = bolt_root(db), key = sub(db, &root, "key");
    cr_assert_neq(key.root, 0);
    memcpy(b, orig, len);
    uint8_t *pg = b + key.root * 4096;
    cr_assert_eq(pg[8], 0x01, "the key bucket's root is a branch");
    memcpy(pg + 16 + 8, &key.root, 8);
    bolt_close(db);
    db = open_bytes(b, len, &rv);
    cr_assert_eq(rv, 0);
    int werr = 0;
    walk(db, &key, 0, &werr);
    cr_assert_eq(werr, QERR_CORRUPT);
    char err[4096];
    cr_assert_gt(bolt_check(db, 8, err, sizeof(err)), 0);
    bolt_close(db);
    /* every byte flipped in turn (sampled): open, walk, check survive */
    srand(1);
    for (int round = 0; round < 3000; round++) {
        memcpy(b, orig, len);
        for (int j = 0; j < 4; j++)
            b[(size_t)rand() % len] ^= (uint8_t)(1 + rand() % 255);
        db = open_bytes(b, len, &rv);
        if (db == NULL)
            continue;
        struct bolt_bucket r = bolt_root(db);
        werr = 0;
        walk(db, &r, 0, &werr);
        bolt_check(db, 8, err, sizeof(err));
        bolt_close(db);
    }
    free(b);
    free(orig);
}
