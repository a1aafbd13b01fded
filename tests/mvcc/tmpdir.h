/* tests/mvcc/tmpdir.h: a throw-away data directory per test. */
#ifndef QUORUM_TESTS_MVCC_TMPDIR_H
#define QUORUM_TESTS_MVCC_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* tmpdir_make creates a fresh directory and returns its path (static
 * storage, one at a time per process: criterion runs each test in its own). */
static inline const char *tmpdir_make(void)
{
    static char path[64];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof(path), "%s/qmvcc-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(path);
}

/* tmpdir_remove deletes |path| and the files directly in it. */
static inline void tmpdir_remove(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *de;
    char f[512];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
        unlink(f);
    }
    closedir(d);
    rmdir(path);
}

#endif
