/* base/fs.h: small file-system helpers shared by the modules and tools. */
#ifndef QUORUM_BASE_FS_H
#define QUORUM_BASE_FS_H

/* fs_mkdir_p creates |path| and its missing parents (mode 0700), like
 * `mkdir -p`. Errors: -EINVAL (empty or too long), -errno. */
int fs_mkdir_p(const char *path);

/* fs_fsync_dir makes the entries of directory |path| durable. -errno. */
int fs_fsync_dir(const char *path);

/* fs_remove_tree removes |path| and everything under it (`rm -rf`; a
 * symbolic link is removed, not followed); 0 when it does not exist.
 * -errno. */
int fs_remove_tree(const char *path);

#endif
