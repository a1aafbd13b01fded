/* tests/wal/helpers.h: throw-away data dirs and file surgery for the WAL
 * tests. */
#ifndef QUORUM_TESTS_WAL_HELPERS_H
#define QUORUM_TESTS_WAL_HELPERS_H

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wal/wal.h"

/* tmp_make creates a fresh directory; the path is malloc'd. */
static inline char *tmp_make(void)
{
    const char *base = getenv("TMPDIR");
    char *path = malloc(256);
    snprintf(path, 256, "%s/qwal-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(path) == NULL) {
        free(path);
        return NULL;
    }
    return path;
}

static inline int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* tmp_remove deletes |path| recursively and frees it. */
static inline void tmp_remove(char *path)
{
    if (path != NULL)
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(path);
}

/* file_get reads a whole file (malloc'd) or returns NULL. */
static inline uint8_t *file_get(const char *path, size_t *size)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

/* file_put replaces a file's content with |n| bytes of |p|. */
static inline int file_put(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    ssize_t k = write(fd, p, n);
    close(fd);
    return k == (ssize_t)n ? 0 : -1;
}

/* Where the records are, as wal_dump sees them. */
struct rec_pos {
    char path[512];
    uint64_t offset;
    uint32_t len;
    uint8_t type;
    uint64_t index;
};
struct rec_list {
    struct rec_pos v[4096];
    size_t n;
};

static inline int rec_collect(const struct wal_record *r, void *arg)
{
    struct rec_list *l = arg;
    if (l->n == sizeof(l->v) / sizeof(l->v[0]))
        return -1;
    struct rec_pos *p = &l->v[l->n++];
    snprintf(p->path, sizeof(p->path), "%s", r->path);
    p->offset = r->offset;
    p->len = r->len;
    p->type = r->type;
    p->index = r->type == WAL_REC_ENTRY ? r->u.entry.index : 0;
    return 0;
}

/* rec_total is the on-disk size of a record of |len| (header, padding). */
static inline size_t rec_total(uint32_t len)
{
    return (8 + (size_t)len + 7) & ~(size_t)7;
}

#endif
