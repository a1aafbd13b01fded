/* tools/quorumctl/quorumctl.h: what the command files of quorumctl share. */
#ifndef QUORUM_TOOLS_QUORUMCTL_H
#define QUORUM_TOOLS_QUORUMCTL_H

#include <stdbool.h>
#include <stdint.h>

enum ctl_format { CTL_SIMPLE, CTL_JSON, CTL_TABLE };

/* The global flags (etcdctl's names). */
struct ctl {
    const char *endpoints; /* --endpoints, comma-separated */
    enum ctl_format format; /* -w, --write-out */
    unsigned command_timeout_ms;
    unsigned dial_timeout_ms;
};

/* Commands: argv holds what follows the command words; the return value is
 * the exit status. */
int cmd_snapshot_status(struct ctl *ctl, int argc, char **argv);
int cmd_snapshot_restore(struct ctl *ctl, int argc, char **argv);

/* ctl_print_snapshot_status prints as etcdctl's `snapshot status`. */
void ctl_print_snapshot_status(struct ctl *ctl, uint32_t hash, int64_t rev, uint64_t keys,
                               const char *size);

#endif
