/* base/fs.h: small file-system helpers shared by the modules and tools. */
#ifndef QUORUM_BASE_FS_H
#define QUORUM_BASE_FS_H

/* fs_mkdir_p creates |path| and its missing parents (mode 0700), like
 * `mkdir -p`. Errors: -EINVAL (empty or too long), -errno. */
int fs_mkdir_p(const char *path);

#endif
