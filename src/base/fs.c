/* base/fs.c: see fs.h. */
#include "base/fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

int fs_mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(tmp))
        return -EINVAL;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}
