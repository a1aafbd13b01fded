/* wal/wal_int.h: helpers shared by wal.c and snap.c only. */
#ifndef QUORUM_WAL_WAL_INT_H
#define QUORUM_WAL_WAL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* wal__fmt formats a path into |out| (|n| bytes; truncated if too long,
 * which later fails to open rather than touching another file). */
void wal__fmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* wal__fsync_dir fsyncs the directory |path| so renames and unlinks in it
 * are durable. Returns 0 or -errno. */
int wal__fsync_dir(const char *path);

/* wal__write_all writes |n| bytes at |off| (pwrite, retrying short writes
 * and EINTR). Returns 0 or -errno. */
int wal__write_all(int fd, const void *p, size_t n, uint64_t off);

/* wal__unwritten tells whether [from, to) of |fd| has an extent the file
 * system holds preallocated and not yet written (FIEMAP): 1, 0, or -errno
 * (no extent maps here, e.g. tmpfs). */
int wal__unwritten(int fd, uint64_t from, uint64_t to);

#endif
