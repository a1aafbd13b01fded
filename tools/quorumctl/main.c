/* tools/quorumctl/main.c: quorum's admin and user CLI, with etcdctl's
 * command names and flags (--endpoints, -w simple|json|table|fields, --hex).
 *
 * The online commands are built on the C client library
 * (api/quorum/client.h): kv.c (put, get, del, txn, watch, compaction) and
 * admin.c (lease, member, endpoint, defrag, alarm, move-leader, snapshot
 * save, lock, elect), recipes.c (rwlock, semaphore, barrier,
 * double-barrier, queue, priority-queue, 2pc, membership, counter: the
 * recipes of api/quorum/recipes.h); snapshot.c holds the offline snapshot status and
 * restore. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/version.h"
#include "quorumctl.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: quorumctl [global flags] <command> [args]\n"
               "\n"
               "commands:\n"
               "  put [--lease=<hex>] [--prev-kv] <key> [value]\n"
               "  get [--prefix|--from-key] [--rev=N] [--limit=N] [--keys-only]\n"
               "      [--print-value-only] [--consistency=l|s] [--sort-by=KEY|CREATE|MODIFY|"
               "VALUE|VERSION]\n"
               "      [--order=ASCEND|DESCEND] <key> [range_end]\n"
               "  del [--prefix|--from-key] [--prev-kv] <key> [range_end]\n"
               "  txn [-i]                           compares, blank line, success ops, blank "
               "line,\n"
               "                                     failure ops, blank line (from stdin)\n"
               "  watch [--prefix] [--rev=N] [--prev-kv] <key> [range_end]\n"
               "  lease grant <ttl> | revoke <id> | timetolive <id> [--keys] | list |\n"
               "        keep-alive [--once] <id>\n"
               "  member list | add <name> --peer-urls=<urls> [--learner] | remove <id> |\n"
               "         update <id> --peer-urls=<urls> | promote <id>\n"
               "  endpoint status|health|hashkv [--cluster] [--rev=N (hashkv)]\n"
               "  compaction [--physical] <rev>\n"
               "  defrag [--cluster]\n"
               "  alarm list | disarm\n"
               "  move-leader <member id>\n"
               "  lock [--ttl=10] <name> [command args...]\n"
               "  elect [--ttl=60] <name> <proposal> | elect -l <name>\n"
               "  rwlock [--ttl=10] [--timeout=D] <name> read|write [command args...]\n"
               "  semaphore [--ttl=10] [--timeout=D] <name> <n> [command args...]\n"
               "  barrier [--timeout=D] <name> hold|release|wait\n"
               "  double-barrier [--ttl=10] [--timeout=D] <name> <n> [command args...]\n"
               "  queue [--timeout=D] <name> put <value> | take\n"
               "  priority-queue [--timeout=D] <name> put <priority> <value> | take\n"
               "  2pc [--ttl=10] [--timeout=D] <name> coordinate <n> | vote commit|abort |\n"
               "      outcome | reset\n"
               "  membership [--ttl=10] <group> join <member-id> [command args...] | list |"
               " watch\n"
               "  counter <name> add <n> | get\n"
               "  snapshot save <file>               stream a member's database into a file\n"
               "  snapshot status <file>             hash, revision, keys and size of a "
               "snapshot file\n"
               "  snapshot restore <file> --data-dir <dir> [--name ...] [--skip-hash-check]\n"
               "                                     a new member's data dir from a snapshot\n"
               "  auth enable | disable\n"
               "  user add <name[:password]> [--no-password] [--interactive=false] |\n"
               "       delete|get [--detail]|passwd <name> | list |\n"
               "       grant-role|revoke-role <name> <role>\n"
               "  role add|delete|get <role> | list |\n"
               "       grant-permission [--prefix|--from-key] <role> read|write|readwrite <key> "
               "[end] |\n"
               "       revoke-permission [--prefix|--from-key] <role> <key> [end]\n"
               "  version                            print the version\n"
               "\n"
               "global flags:\n"
               "  --endpoints=127.0.0.1:2379   -w, --write-out=simple|json|table|fields\n"
               "  --command-timeout=5s   --dial-timeout=2s\n"
               "  --cacert=ca.crt   --cert=client.crt   --key=client.key   (TLS; https:// "
               "endpoints)\n"
               "  --insecure-skip-tls-verify   TLS without verifying the server's certificate\n"
               "  --user=name[:password] --password=<password>   log in (auth enabled)\n"
               "  --hex                  print keys and values as hex (\\x6b\\x31) in simple "
               "output\n");
}

void ctl_print_snapshot_status(struct ctl *ctl, uint32_t hash, int64_t rev, uint64_t keys,
                               uint64_t bytes)
{
    char size[32];
    ctl_humanize(bytes, size, sizeof(size));
    switch (ctl->format) {
    case CTL_FIELDS:
        printf("\"Hash\" : %u\n\"Revision\" : %lld\n\"Keys\" : %llu\n\"Size\" : %llu\n", hash,
               (long long)rev, (unsigned long long)keys, (unsigned long long)bytes);
        break;
    case CTL_JSON: /* snapshot.Status: totalSize in bytes */
        printf("{\"hash\":%u,\"revision\":%lld,\"totalKey\":%llu,\"totalSize\":%llu}\n", hash,
               (long long)rev, (unsigned long long)keys, (unsigned long long)bytes);
        break;
    case CTL_TABLE: {
        char h[16], r[32], k[32];
        snprintf(h, sizeof(h), "%x", hash);
        snprintf(r, sizeof(r), "%lld", (long long)rev);
        snprintf(k, sizeof(k), "%llu", (unsigned long long)keys);
        char *cells[4] = {h, r, k, size}, **rows[1] = {cells};
        static const char *hdr[4] = {"hash", "revision", "total keys", "total size"};
        ctl_table(4, hdr, 1, rows);
        break;
    }
    default:
        printf("%x, %lld, %llu, %s\n", hash, (long long)rev, (unsigned long long)keys, size);
    }
}

/* flag_value matches --name=v, --name v, -n v; advances *i. */
static const char *flag_value(int argc, char **argv, int *i, const char *lng, const char *shrt)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);
    if (strncmp(a, "--", 2) == 0 && strncmp(a + 2, lng, n) == 0) {
        if (a[2 + n] == '=')
            return a + 3 + n;
        if (a[2 + n] == '\0' && *i + 1 < argc)
            return argv[++*i];
    }
    if (shrt != NULL && strcmp(a, shrt) == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

/* parse_duration reads a Go duration ("5s", "500ms", "1m30s") into ms */
static int parse_duration(const char *s, unsigned *out)
{
    double total = 0;
    const char *p = s;
    if (*p == '\0')
        return -1;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p)
            return -1;
        p = end;
        double mul;
        if (strncmp(p, "ms", 2) == 0) {
            mul = 1;
            p += 2;
        } else if (strncmp(p, "us", 2) == 0 || strncmp(p, "µs", 3) == 0) {
            mul = 0.001;
            p += p[0] == 'u' ? 2 : 3;
        } else if (strncmp(p, "ns", 2) == 0) {
            mul = 0.000001;
            p += 2;
        } else if (*p == 's') {
            mul = 1000;
            p++;
        } else if (*p == 'm') {
            mul = 60000;
            p++;
        } else if (*p == 'h') {
            mul = 3600000;
            p++;
        } else {
            return -1;
        }
        total += v * mul;
    }
    *out = total < 1 ? 1 : (unsigned)total;
    return 0;
}

static int bad_duration(const char *v, const char *flag)
{
    fprintf(stderr, "Error: invalid argument \"%s\" for \"--%s\" flag: time: invalid duration %s\n",
            v, flag, v);
    return 1;
}

static const struct {
    const char *name;
    int (*fn)(struct ctl *, int, char **);
} commands[] = {
    {"put", cmd_put},       {"get", cmd_get},       {"del", cmd_del},
    {"txn", cmd_txn},       {"watch", cmd_watch},   {"compaction", cmd_compaction},
    {"lease", cmd_lease},   {"member", cmd_member}, {"endpoint", cmd_endpoint},
    {"defrag", cmd_defrag}, {"alarm", cmd_alarm},   {"move-leader", cmd_move_leader},
    {"lock", cmd_lock},     {"elect", cmd_elect},   {"auth", cmd_auth},
    {"user", cmd_user},     {"role", cmd_role},
    /* recipes.c */
    {"rwlock", cmd_rwlock}, {"semaphore", cmd_semaphore}, {"barrier", cmd_barrier},
    {"double-barrier", cmd_double_barrier}, {"queue", cmd_queue},
    {"priority-queue", cmd_priority_queue}, {"2pc", cmd_2pc}, {"membership", cmd_membership},
    {"counter", cmd_counter},
};

static int (*find_command(const char *name))(struct ctl *, int, char **)
{
    for (size_t k = 0; k < sizeof(commands) / sizeof(commands[0]); k++)
        if (strcmp(commands[k].name, name) == 0)
            return commands[k].fn;
    return NULL;
}

int main(int argc, char **argv)
{
    struct ctl ctl = {.endpoints = "127.0.0.1:2379",
                      .format = CTL_SIMPLE,
                      .command_timeout_ms = 5000,
                      .dial_timeout_ms = 2000};
    int i = 1;
    /* global flags come first or among the command's own: take them out */
    char **rest = ctl_calloc((size_t)argc + 1, sizeof(char *)); /* freed at exit */
    int nrest = 0;
    for (; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--") == 0) {
            /* as pflag: no flag after "--" is quorumctl's (lock's command
             * keeps its own --endpoints); the command sees "--" itself */
            while (i < argc)
                rest[nrest++] = argv[i++];
            break;
        }
        if ((v = flag_value(argc, argv, &i, "endpoints", NULL)) != NULL) {
            ctl.endpoints = v;
        } else if ((v = flag_value(argc, argv, &i, "write-out", "-w")) != NULL) {
            if (strcmp(v, "json") == 0)
                ctl.format = CTL_JSON;
            else if (strcmp(v, "table") == 0)
                ctl.format = CTL_TABLE;
            else if (strcmp(v, "simple") == 0)
                ctl.format = CTL_SIMPLE;
            else if (strcmp(v, "fields") == 0)
                ctl.format = CTL_FIELDS;
            else /* etcdctl 3.4: NewPrinter gives nil */
                ctl_die(CTL_EXIT_BAD_FEATURE, "unsupported output format");
        } else if ((v = flag_value(argc, argv, &i, "user", NULL)) != NULL) {
            ctl.user = v;
        } else if ((v = flag_value(argc, argv, &i, "password", NULL)) != NULL) {
            ctl.password = v;
        } else if ((v = flag_value(argc, argv, &i, "command-timeout", NULL)) != NULL) {
            if (parse_duration(v, &ctl.command_timeout_ms) < 0)
                return bad_duration(v, "command-timeout");
        } else if ((v = flag_value(argc, argv, &i, "dial-timeout", NULL)) != NULL) {
            if (parse_duration(v, &ctl.dial_timeout_ms) < 0)
                return bad_duration(v, "dial-timeout");
        } else if ((v = flag_value(argc, argv, &i, "cacert", NULL)) != NULL) {
            ctl.cacert = v;
        } else if ((v = flag_value(argc, argv, &i, "cert", NULL)) != NULL) {
            ctl.cert = v;
        } else if ((v = flag_value(argc, argv, &i, "key", NULL)) != NULL) {
            ctl.key = v;
        } else if (ctl_bool(argv[i], "insecure-skip-tls-verify", &ctl.insecure_skip_tls_verify)) {
            /* TLS without checking the server's certificate */
        } else if (ctl_bool(argv[i], "hex", &ctl.hex)) {
            /* print byte strings as hex encoded strings */
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    int ret;
    int (*cmd)(struct ctl *, int, char **);
    /* --version as the version command (etcdctl 3.4 knows only the command) */
    bool version_flag = false;
    for (int k = 0; k < nrest; k++)
        version_flag = version_flag || strcmp(rest[k], "--version") == 0;
    if (version_flag || (nrest >= 1 && strcmp(rest[0], "version") == 0)) {
        /* etcdctl's shape: its own version, then the API it speaks */
        printf("quorumctl version: %s\nAPI version: %s\n", QUORUM_VERSION, QUORUM_ETCD_API_VERSION);
        ret = 0;
    } else if (nrest >= 2 && strcmp(rest[0], "snapshot") == 0 && strcmp(rest[1], "status") == 0) {
        ret = cmd_snapshot_status(&ctl, nrest - 2, rest + 2);
    } else if (nrest >= 2 && strcmp(rest[0], "snapshot") == 0 && strcmp(rest[1], "restore") == 0) {
        ret = cmd_snapshot_restore(&ctl, nrest - 2, rest + 2);
    } else if (nrest >= 2 && strcmp(rest[0], "snapshot") == 0 && strcmp(rest[1], "save") == 0) {
        ret = cmd_snapshot_save(&ctl, nrest - 2, rest + 2);
    } else if (nrest >= 1 && (cmd = find_command(rest[0])) != NULL) {
        ret = cmd(&ctl, nrest - 1, rest + 1);
    } else {
        if (nrest > 0)
            fprintf(stderr, "Error: unknown command \"%s\"\n", rest[0]);
        usage(stderr);
        ret = 1;
    }
    return ret;
}
