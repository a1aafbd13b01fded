/* tools/quorumctl/main.c: quorum's admin and user CLI, with etcdctl's
 * command names and flags (--endpoints, -w simple|json|table).
 *
 * Built so far: the offline snapshot commands (snapshot status, snapshot
 * restore). The commands that talk to a cluster come with the C client
 * library (api/); until then etcdctl 3.4 does them against quorum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quorumctl.h"

#define QUORUMCTL_VERSION "0.1.0"

static void usage(FILE *f)
{
    fprintf(f, "usage: quorumctl [global flags] <command> [args]\n"
               "\n"
               "commands:\n"
               "  snapshot status <file>             hash, revision, keys and size of a "
               "snapshot file\n"
               "  snapshot restore <file> --data-dir <dir> [--name ...] [--skip-hash-check]\n"
               "                                     a new member's data dir from a snapshot\n"
               "  version                            print the version\n"
               "\n"
               "global flags:\n"
               "  --endpoints=127.0.0.1:2379   -w, --write-out=simple|json|table\n"
               "  --command-timeout=5s   --dial-timeout=2s\n");
}

void ctl_print_snapshot_status(struct ctl *ctl, uint32_t hash, int64_t rev, uint64_t keys,
                               const char *size)
{
    switch (ctl->format) {
    case CTL_JSON:
        printf("{\"hash\":%u,\"revision\":%lld,\"totalKey\":%llu,\"totalSize\":\"%s\"}\n", hash,
               (long long)rev, (unsigned long long)keys, size);
        break;
    case CTL_TABLE: {
        char h[16], r[32], k[32];
        snprintf(h, sizeof(h), "%x", hash);
        snprintf(r, sizeof(r), "%lld", (long long)rev);
        snprintf(k, sizeof(k), "%llu", (unsigned long long)keys);
        int w[4] = {8, 8, 10, 10};
        const char *cells[4] = {h, r, k, size};
        for (int i = 0; i < 4; i++)
            if ((int)strlen(cells[i]) > w[i])
                w[i] = (int)strlen(cells[i]);
        const char *hd[4] = {"HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"};
        for (int row = 0; row < 5; row++) {
            if (row == 0 || row == 2 || row == 4) {
                for (int i = 0; i < 4; i++) {
                    printf("+");
                    for (int j = 0; j < w[i] + 2; j++)
                        putchar('-');
                }
                printf("+\n");
                continue;
            }
            for (int i = 0; i < 4; i++) {
                const char *c = row == 1 ? hd[i] : cells[i];
                int pad = w[i] - (int)strlen(c);
                printf("| %*s%s%*s ", pad / 2, "", c, pad - pad / 2, "");
            }
            printf("|\n");
        }
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

int main(int argc, char **argv)
{
    struct ctl ctl = {.endpoints = "127.0.0.1:2379", .format = CTL_SIMPLE,
                      .command_timeout_ms = 5000, .dial_timeout_ms = 2000};
    int i = 1;
    /* global flags come first or among the command's own: take them out */
    char **rest = calloc((size_t)argc + 1, sizeof(char *));
    int nrest = 0;
    if (rest == NULL)
        return 1;
    for (; i < argc; i++) {
        const char *v;
        if ((v = flag_value(argc, argv, &i, "endpoints", NULL)) != NULL) {
            ctl.endpoints = v;
        } else if ((v = flag_value(argc, argv, &i, "write-out", "-w")) != NULL) {
            if (strcmp(v, "json") == 0)
                ctl.format = CTL_JSON;
            else if (strcmp(v, "table") == 0)
                ctl.format = CTL_TABLE;
            else if (strcmp(v, "simple") == 0)
                ctl.format = CTL_SIMPLE;
            else {
                fprintf(stderr, "Error: unsupported output format %s\n", v);
                return 1;
            }
        } else if (flag_value(argc, argv, &i, "command-timeout", NULL) != NULL ||
                   flag_value(argc, argv, &i, "dial-timeout", NULL) != NULL) {
            /* accepted; used by the commands that talk to a cluster */
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    int ret;
    if (nrest >= 1 && strcmp(rest[0], "version") == 0) {
        printf("quorumctl version: %s\nAPI version: 3.4\n", QUORUMCTL_VERSION);
        ret = 0;
    } else if (nrest >= 2 && strcmp(rest[0], "snapshot") == 0 &&
               strcmp(rest[1], "status") == 0) {
        ret = cmd_snapshot_status(&ctl, nrest - 2, rest + 2);
    } else if (nrest >= 2 && strcmp(rest[0], "snapshot") == 0 &&
               strcmp(rest[1], "restore") == 0) {
        ret = cmd_snapshot_restore(&ctl, nrest - 2, rest + 2);
    } else {
        if (nrest > 0)
            fprintf(stderr, "Error: unknown command \"%s\"\n", rest[0]);
        usage(stderr);
        ret = 1;
    }
    free(rest);
    return ret;
}
