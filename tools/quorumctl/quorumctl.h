/* tools/quorumctl/quorumctl.h: what the command files of quorumctl share. */
#ifndef QUORUM_TOOLS_QUORUMCTL_H
#define QUORUM_TOOLS_QUORUMCTL_H

#include <stdbool.h>
#include <stdint.h>

enum ctl_format { CTL_SIMPLE, CTL_JSON, CTL_TABLE, CTL_FIELDS };

/* The global flags (etcdctl's names). */
struct ctl {
    const char *endpoints;  /* --endpoints, comma-separated */
    enum ctl_format format; /* -w, --write-out */
    bool hex;               /* --hex: keys and values hex-encoded in simple output */
    unsigned command_timeout_ms;
    unsigned dial_timeout_ms;
    bool print_value_only; /* get/watch --print-value-only */
    const char *user;      /* --user name[:password] */
    const char *password;  /* --password */
    /* the name and password to log in with, resolved once from --user and
     * --password (asked for when not given) by ctl_credentials */
    const char *login_name, *login_pw;
    /* TLS, etcdctl's flags: --cacert, --cert, --key,
     * --insecure-skip-tls-verify */
    const char *cacert, *cert, *key;
    bool insecure_skip_tls_verify;
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
/* ctl_dial connects to |eps| with the global timeouts; qc_connect's result */
int ctl_dial(const struct ctl *ctl, const char *const *eps, size_t n, qc_client **c,
             struct qc_status *st);
/* ctl_open: a client of |ep| alone, as etcdctl makes one per endpoint for
 * endpoint status/health/hashkv and defrag: connected within the dial
 * timeout and, with |login|, logged in as --user (ctl_credentials first).
 * It does not exit: it returns ctl_dial's or the login's result (*c NULL on
 * failure) so that the caller reports that endpoint and goes on. Thread-safe.
 * ctl_setup_fatal exits as ctl_connect does when |rc| says the command
 * could not be set up at all (-EINVAL: a TLS file that cannot be read, a
 * malformed endpoint); it returns otherwise. */
int ctl_open(const struct ctl *ctl, const char *ep, bool login, qc_client **c,
             struct qc_status *st);
void ctl_setup_fatal(const struct ctl *ctl, int rc, const struct qc_status *st);
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
/* ctl_print_kv: key and value lines (--print-value-only, --hex); ctl_print_get:
 * a range response in simple or fields output */
void ctl_print_kv(struct ctl *ctl, const Mvccpb__KeyValue *kv);
void ctl_print_get(struct ctl *ctl, const Etcdserverpb__RangeResponse *r);
/* -w fields: Go's %q of bytes, "name" : %q, the header's four lines and a
 * key-value's six (names prefixed with |pfx|), as etcdctl's fieldsPrinter */
void ctl_go_quote(const uint8_t *p, size_t n);
void ctl_fields_quoted(const char *name, const char *s);
void ctl_fields_hdr(const Etcdserverpb__ResponseHeader *h);
void ctl_fields_kv(const char *pfx, const Mvccpb__KeyValue *kv);
/* ctl_unsupported dies "<f> not supported as output format" when -w is |f| */
void ctl_unsupported(struct ctl *ctl, enum ctl_format f);
/* ctl_join: v[0..n) joined with sep, in memory kept until exit */
char *ctl_join(char *const *v, size_t n, const char *sep);
/* ctl_progress: the "\r<what> [####   ]  42% 1.2 MB / 3.0 MB" bar on stderr */
void ctl_progress(const char *what, uint64_t done, uint64_t total);
/* ctl_keep takes memory that lives until exit (freed then; dies on NULL);
 * ctl_calloc, ctl_strdup and ctl_prefix_end return such memory */
void *ctl_keep(void *p);
void *ctl_calloc(size_t n, size_t size);
char *ctl_strdup(const char *s);
uint8_t *ctl_prefix_end(const uint8_t *key, size_t len, size_t *out_len);

/* kv.c; ctl_flag takes --name=v or --name v, ctl_bool --name[=<bool>] and
 * ctl_bool_short also -c[=<bool>] (<bool> as Go's strconv.ParseBool; dies with
 * etcdctl's error on another value);
 * ctl_positional dies on an unknown flag, else keeps |a| in pos[*np] (while
 * *np < cap) and counts it; ctl_lease_id parses a hex lease ID, dying with
 * "bad <what> (...), expecting ID in Hex" */
const char *ctl_flag(int argc, char **argv, int *i, const char *name);
bool ctl_bool(const char *a, const char *name, bool *out);
bool ctl_bool_short(const char *a, char shrt, const char *name, bool *out);
void ctl_unknown_flag(const char *a);
void ctl_positional(char **pos, int cap, int *np, char *a);
int64_t ctl_lease_id(const char *s, const char *what);
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

/* recipes.c: the coordination recipes of api/quorum/recipes.h */
int cmd_rwlock(struct ctl *ctl, int argc, char **argv);
int cmd_semaphore(struct ctl *ctl, int argc, char **argv);
int cmd_barrier(struct ctl *ctl, int argc, char **argv);
int cmd_double_barrier(struct ctl *ctl, int argc, char **argv);
int cmd_queue(struct ctl *ctl, int argc, char **argv);
int cmd_priority_queue(struct ctl *ctl, int argc, char **argv);
int cmd_2pc(struct ctl *ctl, int argc, char **argv);
int cmd_membership(struct ctl *ctl, int argc, char **argv);
int cmd_counter(struct ctl *ctl, int argc, char **argv);

/* auth.c: ctl_login authenticates a new connection as --user (asking for
 * the password when not given) and exits as etcdctl when that fails;
 * ctl_credentials resolves the name and password once (on the main
 * thread), after which ctl_try_login (any thread) logs a connection in and
 * returns qc_authenticate's result (0 without --user); the commands auth,
 * user and role */
void ctl_login(struct ctl *ctl, qc_client *c);
void ctl_credentials(struct ctl *ctl);
int ctl_try_login(const struct ctl *ctl, qc_client *c, struct qc_status *st);
int cmd_auth(struct ctl *ctl, int argc, char **argv);
int cmd_user(struct ctl *ctl, int argc, char **argv);
int cmd_role(struct ctl *ctl, int argc, char **argv);

/* Commands: argv holds what follows the command words; the return value is
 * the exit status. */
int cmd_snapshot_status(struct ctl *ctl, int argc, char **argv);
int cmd_snapshot_restore(struct ctl *ctl, int argc, char **argv);

/* ctl_print_snapshot_status prints as etcdctl's `snapshot status`. */
void ctl_print_snapshot_status(struct ctl *ctl, uint32_t hash, int64_t rev, uint64_t keys,
                               uint64_t size);

#endif
