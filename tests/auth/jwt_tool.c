/* tests/auth/jwt_tool.c: command line front end to src/auth/jwt.c, used by
 * tests/auth/jwt_vs_etcd.py to compare with a real etcd.
 *
 *   jwt_tool load OPTS                       -> "ok ALG TTL_MS CAN_SIGN" | "error RC: TEXT"
 *   jwt_tool sign OPTS USER REV [NOW]        -> token (NOW default: time(NULL))
 *   jwt_tool sign-exp OPTS USER REV EXP      -> token with that exp claim
 *   jwt_tool verify OPTS TOKEN [NOW]         -> "ok USER REV" | "error RC"
 * OPTS is what follows "jwt," in --auth-token. Exit status 0 on success. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth/jwt.h"

static int usage(void)
{
    fprintf(stderr, "usage: jwt_tool load OPTS | sign OPTS USER REV [NOW] | "
                    "sign-exp OPTS USER REV EXP | verify OPTS TOKEN [NOW]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *cmd = argv[1];
    char err[512], detail[1024];
    jwt_keys *k = NULL;
    int rc = jwt_keys_load_ex(argv[2], &k, err, sizeof(err), detail, sizeof(detail));
    if (rc != 0) {
        printf("error %d: %s\n", rc, err);
        if (detail[0] != '\0')
            fprintf(stderr, "detail: %s\n", detail);
        return 1;
    }
    if (detail[0] != '\0')
        fprintf(stderr, "warning: %s\n", detail);
    int ret = 0;
    if (strcmp(cmd, "load") == 0) {
        printf("ok %s %" PRIu64 " %d\n", jwt_keys_alg(k), jwt_keys_ttl_ms(k),
               jwt_keys_can_sign(k));
    } else if ((strcmp(cmd, "sign") == 0 || strcmp(cmd, "sign-exp") == 0) && argc >= 5) {
        uint64_t rev = strtoull(argv[4], NULL, 10);
        char *tok = NULL;
        if (strcmp(cmd, "sign") == 0) {
            int64_t now = argc > 5 ? strtoll(argv[5], NULL, 10) : (int64_t)time(NULL);
            rc = jwt_sign(k, argv[3], rev, now, &tok);
        } else {
            if (argc < 6) {
                jwt_keys_free(k);
                return usage();
            }
            rc = jwt_sign_exp(k, argv[3], rev, strtoll(argv[5], NULL, 10), &tok);
        }
        if (rc != 0) {
            printf("error %d\n", rc);
            ret = 1;
        } else {
            printf("%s\n", tok);
            free(tok);
        }
    } else if (strcmp(cmd, "verify") == 0 && argc >= 4) {
        int64_t now = argc > 4 ? strtoll(argv[4], NULL, 10) : (int64_t)time(NULL);
        char user[256];
        uint64_t rev = 0;
        rc = jwt_verify(k, argv[3], strlen(argv[3]), now, user, sizeof(user), &rev);
        if (rc != 0) {
            printf("error %d\n", rc);
            ret = 1;
        } else {
            printf("ok %s %" PRIu64 "\n", user, rev);
        }
    } else {
        ret = usage();
    }
    jwt_keys_free(k);
    return ret;
}
