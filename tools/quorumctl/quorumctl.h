/* tools/quorumctl/quorumctl.h: what the command files of quorumctl share. */
#ifndef QUORUM_TOOLS_QUORUMCTL_H
#define QUORUM_TOOLS_QUORUMCTL_H

#include <stdbool.h>
#include <stdint.h>

enum ctl_format { CTL_SIMPLE, CTL_JSON, CTL_TABLE };

/* The global flags (etcdctl's names). */
struct ctl {
    const char *endpoints;  /* --endpoints, comma-separated */
    enum ctl_format format; /* -w, --write-out */
    unsigned command_timeout_ms;
    unsigned dial_timeout_ms;
    bool print_value_only; /* get/watch --print-value-only */
};

#include <stddef.h>
#include <stdio.h>

#include "quorum/client.h"

/* etcdctl's exit codes */
#define CTL_EXIT_ERROR 1
#define CTL_EXIT_BAD_CONNECTION 2
#define CTL_EXIT_INVALID_INPUT 3
#define CTL_EXIT_BAD_FEATURE 4
#define CTL_EXIT_INTERRUPTED 5
#define CTL_EXIT_IO 6
#define CTL_EXIT_BAD_ARGS 128

/* util.c */
qc_client *ctl_connect(struct ctl *ctl);                     /* all endpoints, failover */
qc_client *ctl_connect_one(struct ctl *ctl, const char *ep); /* exits on failure */
size_t ctl_endpoints(struct ctl *ctl, char ***out);
void ctl_errtext(int rc, const struct qc_status *st, char *out, size_t cap);
void ctl_fail(int rc, const struct qc_status *st); /* prints "Error: ..." */
int ctl_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
void ctl_humanize(uint64_t n, char *out, size_t cap);
void ctl_json_string(FILE *f, const char *s);
void ctl_json_b64(FILE *f, const uint8_t *p, size_t n);
void ctl_json_message(FILE *f, const ProtobufCMessage *m);
void ctl_print_json(const ProtobufCMessage *m);
/* prints "{" and the header's fields, as Go's json of a struct embedding
 * *pb.ResponseHeader (clientv3's lease responses); the caller goes on with
 * ",..." fields (or none) and closes with "}" */
void ctl_json_header_fields(FILE *f, const Etcdserverpb__ResponseHeader *h);
void ctl_table(int ncol, const char *const *hdr, int nrow, char ***rows);
void ctl_print_kv(struct ctl *ctl, const Mvccpb__KeyValue *kv);
/* ctl_keep takes memory that lives until exit (freed then; dies on NULL);
 * ctl_calloc, ctl_strdup and ctl_prefix_end return such memory */
void *ctl_keep(void *p);
void *ctl_calloc(size_t n, size_t size);
char *ctl_strdup(const char *s);
uint8_t *ctl_prefix_end(const uint8_t *key, size_t len, size_t *out_len);

/* kv.c; ctl_flag takes --name=v or --name v, ctl_bool --name[=true|false] */
const char *ctl_flag(int argc, char **argv, int *i, const char *name);
bool ctl_bool(const char *a, const char *name, bool *out);
int cmd_put(struct ctl *ctl, int argc, char **argv);
int cmd_get(struct ctl *ctl, int argc, char **argv);
int cmd_del(struct ctl *ctl, int argc, char **argv);
int cmd_txn(struct ctl *ctl, int argc, char **argv);
int cmd_watch(struct ctl *ctl, int argc, char **argv);
int cmd_compaction(struct ctl *ctl, int argc, char **argv);

/* admin.c */
int cmd_lease(struct ctl *ctl, int argc, char **argv);
int cmd_member(struct ctl *ctl, int argc, char **argv);
int cmd_endpoint(struct ctl *ctl, int argc, char **argv);
int cmd_defrag(struct ctl *ctl, int argc, char **argv);
int cmd_alarm(struct ctl *ctl, int argc, char **argv);
int cmd_move_leader(struct ctl *ctl, int argc, char **argv);
int cmd_snapshot_save(struct ctl *ctl, int argc, char **argv);
int cmd_lock(struct ctl *ctl, int argc, char **argv);
int cmd_elect(struct ctl *ctl, int argc, char **argv);

/* Commands: argv holds what follows the command words; the return value is
 * the exit status. */
int cmd_snapshot_status(struct ctl *ctl, int argc, char **argv);
int cmd_snapshot_restore(struct ctl *ctl, int argc, char **argv);

/* ctl_print_snapshot_status prints as etcdctl's `snapshot status`. */
void ctl_print_snapshot_status(struct ctl *ctl, uint32_t hash, int64_t rev, uint64_t keys,
                               const char *size);

#endif
