/* tests/faults/interpose.h: fault injection inside a unit test binary.
 *
 * Included by exactly one file of a test executable, it defines fdatasync,
 * fsync, pwrite (pwrite64), writev, fallocate and posix_fallocate in the executable
 * itself: the static libraries linked into the test (wal/, backend/) and
 * shared ones the linker saw referencing them (liblmdb) reach these instead
 * of libc's. A test sets fault_errno[call] (0 = pass through) and
 * fault_skip[call] (calls that pass first); fault_hits[call] counts the
 * failures injected. fault_path limits faults to files whose path contains
 * it (NULL: any regular file). The real work is done with syscall(2). */
#ifndef QUORUM_TESTS_FAULTS_INTERPOSE_H
#define QUORUM_TESTS_FAULTS_INTERPOSE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

enum fault_call { F_FDATASYNC, F_FSYNC, F_PWRITE, F_WRITEV, F_FALLOCATE, F__COUNT };

static int fault_errno[F__COUNT];
static int fault_skip[F__COUNT];
static int fault_hits[F__COUNT];
static const char *fault_path;
/* pwrite: write the first half for real before failing (what part of a
 * refused write may leave in the file) */
static int fault_partial;

static inline void fault_reset(void)
{
    memset(fault_errno, 0, sizeof(fault_errno));
    memset(fault_skip, 0, sizeof(fault_skip));
    memset(fault_hits, 0, sizeof(fault_hits));
    fault_path = NULL;
    fault_partial = 0;
}

static int fault_check(enum fault_call c, int fd)
{
    if (fault_errno[c] == 0)
        return 0;
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    if (fault_path != NULL) {
        char link[64], path[4096];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        long n = syscall(SYS_readlinkat, AT_FDCWD, link, path, sizeof(path) - 1);
        if (n <= 0)
            return 0;
        path[n] = '\0';
        if (strstr(path, fault_path) == NULL)
            return 0;
    }
    if (fault_skip[c] > 0) {
        fault_skip[c]--;
        return 0;
    }
    fault_hits[c]++;
    return fault_errno[c];
}

int fdatasync(int fd)
{
    int e = fault_check(F_FDATASYNC, fd);
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_fdatasync, fd);
}

int fsync(int fd)
{
    int e = fault_check(F_FSYNC, fd);
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t off)
{
    int e = fault_check(F_PWRITE, fd);
    if (e) {
        if (fault_partial && n > 1)
            (void)syscall(SYS_pwrite64, fd, b, n / 2, off);
        errno = e;
        return -1;
    }
    return syscall(SYS_pwrite64, fd, b, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    int e = fault_check(F_WRITEV, fd);
    if (e) {
        errno = e;
        return -1;
    }
    return syscall(SYS_writev, fd, iov, cnt);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    int e = fault_check(F_FALLOCATE, fd);
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_fallocate, fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    int e = fault_check(F_FALLOCATE, fd);
    if (e)
        return e;
    return syscall(SYS_fallocate, fd, 0, off, len) == 0 ? 0 : errno;
}

#endif
