/* tests/faults/diskfault.c: an LD_PRELOAD shim that makes chosen disk calls
 * fail (ENOSPC, EIO, ...) or stall, for the disk fault tests
 * (tests/integration/test_disk_faults.py, docs/faults.md).
 *
 *   LD_PRELOAD=build/tests/faults/libdiskfault.so \
 *   DISKFAULT_CALLS=fdatasync DISKFAULT_PATH=/member/wal/ DISKFAULT_AFTER=20 \
 *   DISKFAULT_ERRNO=EIO quorum ...
 *
 * Environment (read once, at load):
 *   DISKFAULT_CALLS    comma list of the calls to fault: write, pwrite
 *                      (pwrite and pwrite64), writev (writev, pwritev),
 *                      fdatasync, fsync, rename, fallocate (fallocate and
 *                      posix_fallocate), msync, ftruncate; "all" for every
 *                      one. Unset: the shim does nothing.
 *   DISKFAULT_PATH     a substring the file's path must contain (the path
 *                      of the descriptor, from /proc/self/fd; for rename
 *                      either name). Unset: any regular file. Descriptors
 *                      that are not regular files (sockets, pipes, the
 *                      terminal, directories for fsync unless DISKFAULT_DIRS
 *                      is 1) are never faulted.
 *   DISKFAULT_AFTER    this many matching calls pass before the first fault
 *                      (counted while armed); default 0.
 *   DISKFAULT_COUNT    faults to inject, then pass again; 0 (default) =
 *                      every matching call while armed.
 *   DISKFAULT_ERRNO    ENOSPC, EIO, EDQUOT, EROFS or a number; default EIO.
 *                      "none" with DISKFAULT_DELAY_MS: only delay.
 *   DISKFAULT_DELAY_MS sleep this long in each faulted call (before failing,
 *                      or before doing it when DISKFAULT_ERRNO=none).
 *   DISKFAULT_CONTROL  a file checked on each matching call: if it holds
 *                      "off" the shim passes everything (space came back,
 *                      the disk healed); "on" arms it; absent: armed unless
 *                      DISKFAULT_ARMED=0. So a test starts disarmed and arms
 *                      mid-load, or removes the fault without a restart.
 *   DISKFAULT_DIRS     1: fsync/fdatasync on directories match too.
 *
 * Every injected fault is reported on stderr as one line
 * "diskfault: CALL(PATH) -> ERRNAME (#n)" so a test can see it happened.
 * The real calls are reached through dlsym(RTLD_NEXT) (write and the sync
 * calls straight through syscall(2), which is all glibc does for them).
 */
#undef _FILE_OFFSET_BITS /* define both the plain and the 64 entry points */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum call {
    C_WRITE = 1u << 0,
    C_PWRITE = 1u << 1,
    C_WRITEV = 1u << 2,
    C_FDATASYNC = 1u << 3,
    C_FSYNC = 1u << 4,
    C_RENAME = 1u << 5,
    C_FALLOCATE = 1u << 6,
    C_MSYNC = 1u << 7,
    C_FTRUNCATE = 1u << 8,
};

static const struct {
    const char *name;
    unsigned bit;
} call_names[] = {
    {"write", C_WRITE},         {"pwrite", C_PWRITE}, {"writev", C_WRITEV},
    {"fdatasync", C_FDATASYNC}, {"fsync", C_FSYNC},   {"rename", C_RENAME},
    {"fallocate", C_FALLOCATE}, {"msync", C_MSYNC},   {"ftruncate", C_FTRUNCATE},
};

static unsigned cfg_calls;
static char cfg_path[PATH_MAX];
static long cfg_after, cfg_count, cfg_delay_ms;
static int cfg_errno = EIO;
static char cfg_control[PATH_MAX];
static bool cfg_armed_default = true, cfg_dirs;
static atomic_long seen, injected;

static void say(const char *fmt, ...)
{
    char line[PATH_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 1;
    if (n > 0)
        (void)syscall(SYS_write, 2, line, (size_t)n);
}

static int parse_errno(const char *s)
{
    static const struct {
        const char *n;
        int e;
    } t[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS}, {"none", 0}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcmp(s, t[i].n) == 0)
            return t[i].e;
    return atoi(s);
}

static const char *errno_name(int e)
{
    switch (e) {
    case ENOSPC:
        return "ENOSPC";
    case EIO:
        return "EIO";
    case EDQUOT:
        return "EDQUOT";
    case EROFS:
        return "EROFS";
    default:
        return "errno";
    }
}

__attribute__((constructor)) static void diskfault_init(void)
{
    const char *v = getenv("DISKFAULT_CALLS");
    if (v == NULL || *v == '\0')
        return;
    char list[256];
    snprintf(list, sizeof(list), "%s", v);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "all") == 0)
            cfg_calls = ~0u;
        for (size_t i = 0; i < sizeof(call_names) / sizeof(call_names[0]); i++)
            if (strcmp(t, call_names[i].name) == 0)
                cfg_calls |= call_names[i].bit;
    }
    if ((v = getenv("DISKFAULT_PATH")) != NULL)
        snprintf(cfg_path, sizeof(cfg_path), "%s", v);
    if ((v = getenv("DISKFAULT_AFTER")) != NULL)
        cfg_after = atol(v);
    if ((v = getenv("DISKFAULT_COUNT")) != NULL)
        cfg_count = atol(v);
    if ((v = getenv("DISKFAULT_DELAY_MS")) != NULL)
        cfg_delay_ms = atol(v);
    if ((v = getenv("DISKFAULT_ERRNO")) != NULL)
        cfg_errno = parse_errno(v);
    if ((v = getenv("DISKFAULT_CONTROL")) != NULL)
        snprintf(cfg_control, sizeof(cfg_control), "%s", v);
    if ((v = getenv("DISKFAULT_ARMED")) != NULL)
        cfg_armed_default = strcmp(v, "0") != 0;
    if ((v = getenv("DISKFAULT_DIRS")) != NULL)
        cfg_dirs = strcmp(v, "1") == 0;
}

static bool armed(void)
{
    if (cfg_control[0] == '\0')
        return cfg_armed_default;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, cfg_control, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cfg_armed_default;
    char b[8] = {0};
    long n = syscall(SYS_read, fd, b, sizeof(b) - 1);
    syscall(SYS_close, fd);
    if (n >= 3 && memcmp(b, "off", 3) == 0)
        return false;
    if (n >= 2 && memcmp(b, "on", 2) == 0)
        return true;
    return cfg_armed_default;
}

static bool fd_path(int fd, char *out, size_t cap)
{
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0)
        return false;
    if (!S_ISREG(st.st_mode) && !(cfg_dirs && S_ISDIR(st.st_mode)))
        return false;
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, out, cap - 1);
    if (n <= 0)
        return false;
    out[n] = '\0';
    return true;
}

/* fault decides for one call: 0 = do it, else the errno to fail with
 * (after the delay). A delay-only fault sleeps and returns 0. */
static int fault(unsigned call, const char *cname, int fd, const char *path1, const char *path2)
{
    if (!(cfg_calls & call))
        return 0;
    char buf[PATH_MAX];
    const char *path = path1;
    if (fd >= 0) {
        if (!fd_path(fd, buf, sizeof(buf)))
            return 0;
        path = buf;
    }
    if (cfg_path[0] != '\0') {
        bool m = (path && strstr(path, cfg_path)) || (path2 && strstr(path2, cfg_path));
        if (!m)
            return 0;
    }
    if (!armed())
        return 0;
    long n = atomic_fetch_add(&seen, 1);
    if (n < cfg_after)
        return 0;
    if (cfg_count > 0 && atomic_load(&injected) >= cfg_count)
        return 0;
    long k = atomic_fetch_add(&injected, 1) + 1;
    if (cfg_delay_ms > 0) {
        struct timespec ts = {cfg_delay_ms / 1000, (cfg_delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (cfg_errno == 0) {
        say("diskfault: %s(%s) delayed %ld ms (#%ld)\n", cname, path ? path : "?", cfg_delay_ms, k);
        return 0;
    }
    say("diskfault: %s(%s) -> %s (#%ld)\n", cname, path ? path : "?", errno_name(cfg_errno), k);
    return cfg_errno;
}

/* REAL(name) is the next definition of |name| (libc's), looked up once. */
#define REAL(name)                                                                                 \
    (__extension__({                                                                               \
        static void *p_;                                                                           \
        if (p_ == NULL)                                                                            \
            p_ = dlsym(RTLD_NEXT, #name);                                                          \
        (__typeof__(&name))p_;                                                                     \
    }))

ssize_t write(int fd, const void *b, size_t n)
{
    int e = fd > 2 ? fault(C_WRITE, "write", fd, NULL, NULL) : 0;
    if (e) {
        errno = e;
        return -1;
    }
    return syscall(SYS_write, fd, b, n);
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t off)
{
    int e = fault(C_PWRITE, "pwrite", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return syscall(SYS_pwrite64, fd, b, n, off);
}

ssize_t pwrite64(int fd, const void *b, size_t n, off64_t off)
{
    int e = fault(C_PWRITE, "pwrite", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return syscall(SYS_pwrite64, fd, b, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    int e = fd > 2 ? fault(C_WRITEV, "writev", fd, NULL, NULL) : 0;
    if (e) {
        errno = e;
        return -1;
    }
    return syscall(SYS_writev, fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    int e = fault(C_WRITEV, "pwritev", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return REAL(pwritev)(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
    int e = fault(C_WRITEV, "pwritev", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return REAL(pwritev64)(fd, iov, cnt, off);
}

int fdatasync(int fd)
{
    int e = fault(C_FDATASYNC, "fdatasync", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_fdatasync, fd);
}

int fsync(int fd)
{
    int e = fault(C_FSYNC, "fsync", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

int rename(const char *a, const char *b)
{
    int e = fault(C_RENAME, "rename", -1, a, b);
    if (e) {
        errno = e;
        return -1;
    }
    return REAL(rename)(a, b);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    int e = fault(C_FALLOCATE, "fallocate", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return REAL(fallocate)(fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    int e = fault(C_FALLOCATE, "posix_fallocate", fd, NULL, NULL);
    if (e)
        return e; /* returns the error number itself */
    return REAL(posix_fallocate)(fd, off, len);
}

int posix_fallocate64(int fd, off64_t off, off64_t len)
{
    int e = fault(C_FALLOCATE, "posix_fallocate", fd, NULL, NULL);
    if (e)
        return e;
    return REAL(posix_fallocate64)(fd, off, len);
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
    int e = fault(C_FALLOCATE, "fallocate", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return REAL(fallocate64)(fd, mode, off, len);
}

int msync(void *addr, size_t len, int flags)
{
    /* no descriptor: matched by call only (DISKFAULT_PATH does not apply) */
    if (cfg_calls & C_MSYNC) {
        if (armed()) {
            long n = atomic_fetch_add(&seen, 1);
            if (n >= cfg_after && (cfg_count == 0 || atomic_load(&injected) < cfg_count)) {
                long k = atomic_fetch_add(&injected, 1) + 1;
                say("diskfault: msync(%p) -> %s (#%ld)\n", addr, errno_name(cfg_errno), k);
                errno = cfg_errno ? cfg_errno : EIO;
                return -1;
            }
        }
    }
    return (int)syscall(SYS_msync, addr, len, flags);
}

int ftruncate(int fd, off_t len)
{
    int e = fault(C_FTRUNCATE, "ftruncate", fd, NULL, NULL);
    if (e) {
        errno = e;
        return -1;
    }
    return (int)syscall(SYS_ftruncate, fd, len);
}

int ftruncate64(int fd, off64_t len)
{
    return ftruncate(fd, (off_t)len);
}
