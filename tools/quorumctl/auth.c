/* tools/quorumctl/auth.c: `auth`, `user` and `role`, as etcdctl 3.4 has
 * them (same arguments, flags, output and errors), and logging in with
 * --user/--password (ctl_login). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "quorumctl.h"

/* read_password prints |prompt| and reads one line from the terminal
 * without echo (from stdin as it is when it is not a terminal). */
static char *read_password(const char *prompt, bool echo_off)
{
    struct termios old, quiet;
    bool tty = echo_off && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
    if (prompt != NULL) {
        fputs(prompt, stderr);
        fflush(stderr);
    }
    if (tty) {
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (tty) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
        fputc('\n', stderr);
    }
    if (n < 0) {
        free(line);
        return ctl_strdup("");
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return ctl_keep(line);
}

void ctl_credentials(struct ctl *ctl)
{
    if (ctl->user == NULL || ctl->user[0] == '\0' || ctl->login_name != NULL)
        return;
    const char *name = ctl->user, *pw = ctl->password;
    if (pw == NULL || pw[0] == '\0') {
        /* --user name:password, or name alone and ask (once, as etcdctl) */
        const char *colon = strchr(ctl->user, ':');
        if (colon != NULL) {
            char *n = ctl_strdup(ctl->user);
            n[colon - ctl->user] = '\0';
            name = n;
            pw = colon + 1;
        } else {
            pw = read_password("Password: ", true);
        }
    }
    ctl->login_pw = pw;
    ctl->login_name = name;
}

int ctl_try_login(const struct ctl *ctl, qc_client *c, struct qc_status *st)
{
    if (ctl->login_name == NULL)
        return 0;
    return qc_authenticate(c, ctl->login_name, ctl->login_pw, st);
}

void ctl_login(struct ctl *ctl, qc_client *c)
{
    ctl_credentials(ctl);
    struct qc_status st;
    int rc = ctl_try_login(ctl, c, &st);
    if (rc < 0) { /* etcdctl: the client could not be made */
        ctl_fail(rc, &st);
        exit(CTL_EXIT_BAD_CONNECTION);
    }
}

/* call runs one unary Auth method and exits with etcdctl's error on
 * failure; the response is the caller's (freed at exit). */
static ProtobufCMessage *call(struct ctl *ctl, const char *method, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *d)
{
    qc_client *c = ctl_connect(ctl); /* logs in as --user */
    ProtobufCMessage *resp = NULL;
    struct qc_status st;
    int rc = qc_unary_timeout(c, method, req, d, &resp, (int)ctl->command_timeout_ms, &st);
    qc_close(c);
    if (rc < 0) {
        ctl_fail(rc, &st);
        exit(CTL_EXIT_ERROR);
    }
    return resp;
}

static void done(ProtobufCMessage *resp)
{
    protobuf_c_message_free_unpacked(resp, NULL);
}

/* flags of the auth commands: --name[=bool] or positional */
struct args {
    char *pos[4];
    int n;
};

static int usage_err(const char *msg)
{
    ctl_die(CTL_EXIT_BAD_ARGS, "%s", msg);
}

/* ---- auth enable | disable ---- */

int cmd_auth(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        usage_err("auth command needs enable or disable");
    if (strcmp(argv[0], "enable") == 0 || strcmp(argv[0], "disable") == 0) {
        bool en = argv[0][0] == 'e';
        if (argc != 1)
            usage_err(en ? "auth enable command does not accept any arguments"
                         : "auth disable command does not accept any arguments");
        if (en) {
            /* etcdctl's: when root lacks the root role, add the role (if
             * needed), grant it and try again */
            qc_client *c = ctl_connect(ctl);
            struct qc_status st;
            int rc;
            for (;;) {
                Etcdserverpb__AuthEnableRequest r = ETCDSERVERPB__AUTH_ENABLE_REQUEST__INIT;
                ProtobufCMessage *resp = NULL;
                rc = qc_unary_timeout(c, "/etcdserverpb.Auth/AuthEnable", &r.base,
                                      &etcdserverpb__auth_enable_response__descriptor, &resp,
                                      (int)ctl->command_timeout_ms, &st);
                if (resp != NULL)
                    done(resp);
                if (rc == 0 || strcmp(st.message, "etcdserver: root user does not have root role"))
                    break;
                Etcdserverpb__AuthRoleAddRequest ra = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
                ra.name = (char *)"root";
                rc = qc_unary_timeout(c, "/etcdserverpb.Auth/RoleAdd", &ra.base,
                                      &etcdserverpb__auth_role_add_response__descriptor, &resp,
                                      (int)ctl->command_timeout_ms, &st);
                if (resp != NULL)
                    done(resp);
                if (rc != 0)
                    break;
                Etcdserverpb__AuthUserGrantRoleRequest g =
                    ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
                g.user = (char *)"root";
                g.role = (char *)"root";
                rc = qc_unary_timeout(c, "/etcdserverpb.Auth/UserGrantRole", &g.base,
                                      &etcdserverpb__auth_user_grant_role_response__descriptor,
                                      &resp, (int)ctl->command_timeout_ms, &st);
                if (resp != NULL)
                    done(resp);
                if (rc != 0)
                    break;
            }
            qc_close(c);
            if (rc < 0) {
                ctl_fail(rc, &st);
                return CTL_EXIT_ERROR;
            }
            printf("Authentication Enabled\n");
        } else {
            Etcdserverpb__AuthDisableRequest r = ETCDSERVERPB__AUTH_DISABLE_REQUEST__INIT;
            done(call(ctl, "/etcdserverpb.Auth/AuthDisable", &r.base,
                      &etcdserverpb__auth_disable_response__descriptor));
            printf("Authentication Disabled\n");
        }
        return 0;
    }
    fprintf(stderr, "Error: unknown command \"%s\" for \"etcdctl auth\"\n", argv[0]);
    return CTL_EXIT_BAD_ARGS;
}

/* ---- user ---- */

/* new_password: etcdctl's: "name:password" in the argument, or asked for
 * (twice when interactive), or a line of stdin with --interactive=false */
static const char *new_password(const char *user, bool interactive)
{
    if (!interactive)
        return read_password(NULL, false);
    char prompt[300];
    snprintf(prompt, sizeof(prompt), "Password of %s: ", user);
    const char *p1 = read_password(prompt, true);
    snprintf(prompt, sizeof(prompt), "Type password of %s again for confirmation: ", user);
    const char *p2 = read_password(prompt, true);
    if (strcmp(p1, p2) != 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "given passwords are different");
    return p1;
}

static void print_perm_range(const Authpb__Permission *p)
{
    if (p->range_end.len == 0) {
        printf("\t%.*s\n", (int)p->key.len, (const char *)p->key.data);
        return;
    }
    if (p->range_end.len == 1 && p->range_end.data[0] == 0)
        printf("\t[%.*s, <open ended>", (int)p->key.len, (const char *)p->key.data);
    else
        printf("\t[%.*s, %.*s)", (int)p->key.len, (const char *)p->key.data,
               (int)p->range_end.len, (const char *)p->range_end.data);
    size_t el;
    uint8_t *end = ctl_prefix_end(p->key.data, p->key.len, &el);
    if (el == p->range_end.len && memcmp(end, p->range_end.data, el) == 0)
        printf(" (prefix %.*s)", (int)p->key.len, (const char *)p->key.data);
    printf("\n");
}

static void print_role(const char *role, const Etcdserverpb__AuthRoleGetResponse *r)
{
    printf("Role %s\n", role);
    printf("KV Read:\n");
    for (size_t i = 0; i < r->n_perm; i++)
        if (r->perm[i]->permtype == AUTHPB__PERMISSION__TYPE__READ ||
            r->perm[i]->permtype == AUTHPB__PERMISSION__TYPE__READWRITE)
            print_perm_range(r->perm[i]);
    printf("KV Write:\n");
    for (size_t i = 0; i < r->n_perm; i++)
        if (r->perm[i]->permtype == AUTHPB__PERMISSION__TYPE__WRITE ||
            r->perm[i]->permtype == AUTHPB__PERMISSION__TYPE__READWRITE)
            print_perm_range(r->perm[i]);
}

static Etcdserverpb__AuthRoleGetResponse *role_get(struct ctl *ctl, const char *role)
{
    Etcdserverpb__AuthRoleGetRequest r = ETCDSERVERPB__AUTH_ROLE_GET_REQUEST__INIT;
    r.role = (char *)role;
    return (Etcdserverpb__AuthRoleGetResponse *)call(
        ctl, "/etcdserverpb.Auth/RoleGet", &r.base, &etcdserverpb__auth_role_get_response__descriptor);
}

static void print_json_or(struct ctl *ctl, ProtobufCMessage *resp)
{
    if (ctl->format == CTL_JSON)
        ctl_print_json(resp);
}

int cmd_user(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        usage_err("user command needs a subcommand");
    const char *sub = argv[0];
    bool interactive = true, no_password = false, detail = false, b;
    char *pos[4];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (ctl_bool(argv[i], "interactive", &b))
            interactive = b;
        else if (ctl_bool(argv[i], "no-password", &b))
            no_password = b;
        else if (ctl_bool(argv[i], "detail", &b))
            detail = b;
        else
            ctl_positional(pos, 4, &np, argv[i]);
    }
    if (strcmp(sub, "add") == 0) {
        if (np != 1)
            usage_err("user add command requires user name as its argument");
        char *name = ctl_strdup(pos[0]);
        const char *pw = "";
        char *colon = strchr(name, ':');
        if (no_password) {
            /* no password at all */
        } else if (colon != NULL) {
            *colon = '\0';
            pw = colon + 1;
        } else {
            pw = new_password(name, interactive);
        }
        Etcdserverpb__AuthUserAddRequest r = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
        Authpb__UserAddOptions o = AUTHPB__USER_ADD_OPTIONS__INIT;
        o.no_password = no_password;
        r.name = name;
        r.password = (char *)pw;
        r.options = &o;
        ProtobufCMessage *resp = call(ctl, "/etcdserverpb.Auth/UserAdd", &r.base,
                                      &etcdserverpb__auth_user_add_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else
            printf("User %s created\n", name);
        done(resp);
    } else if (strcmp(sub, "delete") == 0) {
        if (np != 1)
            usage_err("user delete command requires user name as its argument");
        Etcdserverpb__AuthUserDeleteRequest r = ETCDSERVERPB__AUTH_USER_DELETE_REQUEST__INIT;
        r.name = pos[0];
        ProtobufCMessage *resp = call(ctl, "/etcdserverpb.Auth/UserDelete", &r.base,
                                      &etcdserverpb__auth_user_delete_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else
            printf("User %s deleted\n", pos[0]);
        done(resp);
    } else if (strcmp(sub, "get") == 0) {
        if (np != 1)
            usage_err("user get command requires user name as its argument");
        Etcdserverpb__AuthUserGetRequest r = ETCDSERVERPB__AUTH_USER_GET_REQUEST__INIT;
        r.name = pos[0];
        Etcdserverpb__AuthUserGetResponse *resp = (Etcdserverpb__AuthUserGetResponse *)call(
            ctl, "/etcdserverpb.Auth/UserGet", &r.base,
            &etcdserverpb__auth_user_get_response__descriptor);
        if (ctl->format == CTL_JSON) {
            print_json_or(ctl, &resp->base);
        } else if (detail) {
            printf("User: %s\n", pos[0]);
            for (size_t i = 0; i < resp->n_roles; i++) {
                printf("\n");
                Etcdserverpb__AuthRoleGetResponse *rr = role_get(ctl, resp->roles[i]);
                print_role(resp->roles[i], rr);
                done(&rr->base);
            }
        } else {
            printf("User: %s\nRoles:", pos[0]);
            for (size_t i = 0; i < resp->n_roles; i++)
                printf(" %s", resp->roles[i]);
            printf("\n");
        }
        done(&resp->base);
    } else if (strcmp(sub, "list") == 0) {
        Etcdserverpb__AuthUserListRequest r = ETCDSERVERPB__AUTH_USER_LIST_REQUEST__INIT;
        Etcdserverpb__AuthUserListResponse *resp = (Etcdserverpb__AuthUserListResponse *)call(
            ctl, "/etcdserverpb.Auth/UserList", &r.base,
            &etcdserverpb__auth_user_list_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, &resp->base);
        else
            for (size_t i = 0; i < resp->n_users; i++)
                printf("%s\n", resp->users[i]);
        done(&resp->base);
    } else if (strcmp(sub, "passwd") == 0) {
        if (np != 1)
            usage_err("user passwd command requires user name as its argument");
        const char *pw = new_password(pos[0], interactive);
        Etcdserverpb__AuthUserChangePasswordRequest r =
            ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
        r.name = pos[0];
        r.password = (char *)pw;
        ProtobufCMessage *resp = call(ctl, "/etcdserverpb.Auth/UserChangePassword", &r.base,
                                      &etcdserverpb__auth_user_change_password_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else
            printf("Password updated\n");
        done(resp);
    } else if (strcmp(sub, "grant-role") == 0 || strcmp(sub, "revoke-role") == 0) {
        bool grant = sub[0] == 'g';
        if (np != 2)
            usage_err(grant ? "user grant command requires user name and role name as its argument"
                            : "user revoke-role requires user name and role name");
        ProtobufCMessage *resp;
        if (grant) {
            Etcdserverpb__AuthUserGrantRoleRequest r = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
            r.user = pos[0];
            r.role = pos[1];
            resp = call(ctl, "/etcdserverpb.Auth/UserGrantRole", &r.base,
                        &etcdserverpb__auth_user_grant_role_response__descriptor);
        } else {
            Etcdserverpb__AuthUserRevokeRoleRequest r =
                ETCDSERVERPB__AUTH_USER_REVOKE_ROLE_REQUEST__INIT;
            r.name = pos[0];
            r.role = pos[1];
            resp = call(ctl, "/etcdserverpb.Auth/UserRevokeRole", &r.base,
                        &etcdserverpb__auth_user_revoke_role_response__descriptor);
        }
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else if (grant)
            printf("Role %s is granted to user %s\n", pos[1], pos[0]);
        else
            printf("Role %s is revoked from user %s\n", pos[1], pos[0]);
        done(resp);
    } else {
        fprintf(stderr, "Error: unknown command \"%s\" for \"etcdctl user\"\n", sub);
        return CTL_EXIT_BAD_ARGS;
    }
    return 0;
}

/* ---- role ---- */

/* perm_range: etcdctl's rangeEnd for role grant/revoke: [key, end),
 * --prefix, --from-key; Go's strconv-free logic of etcdctl 3.4 */
static void perm_range(const char *key, const char *end, bool prefix, bool from_key,
                       ProtobufCBinaryData *k, ProtobufCBinaryData *e)
{
    if (prefix && from_key)
        ctl_die(CTL_EXIT_BAD_ARGS, "--from-key and --prefix flags are mutually exclusive");
    *k = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    *e = (ProtobufCBinaryData){0, NULL};
    if (end != NULL) {
        if (prefix || from_key)
            ctl_die(CTL_EXIT_BAD_ARGS,
                    "unexpected endkey argument with --from-key or --prefix flag");
        *e = (ProtobufCBinaryData){strlen(end), (uint8_t *)end};
    } else if (prefix) {
        if (k->len == 0) { /* every key */
            static uint8_t zero = 0;
            *k = (ProtobufCBinaryData){1, &zero};
            *e = (ProtobufCBinaryData){1, &zero};
        } else {
            size_t el;
            uint8_t *pe = ctl_prefix_end(k->data, k->len, &el);
            *e = (ProtobufCBinaryData){el, pe};
        }
    } else if (from_key) {
        static uint8_t zero = 0;
        if (k->len == 0)
            *k = (ProtobufCBinaryData){1, &zero};
        *e = (ProtobufCBinaryData){1, &zero};
    }
}

int cmd_role(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        usage_err("role command needs a subcommand");
    const char *sub = argv[0];
    bool prefix = false, from_key = false, b;
    char *pos[4];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (ctl_bool(argv[i], "prefix", &b))
            prefix = b;
        else if (ctl_bool(argv[i], "from-key", &b))
            from_key = b;
        else
            ctl_positional(pos, 4, &np, argv[i]);
    }
    if (strcmp(sub, "add") == 0 || strcmp(sub, "delete") == 0) {
        bool add = sub[0] == 'a';
        if (np != 1)
            usage_err(add ? "role add command requires role name as its argument"
                          : "role delete command requires role name as its argument");
        ProtobufCMessage *resp;
        if (add) {
            Etcdserverpb__AuthRoleAddRequest r = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
            r.name = pos[0];
            resp = call(ctl, "/etcdserverpb.Auth/RoleAdd", &r.base,
                        &etcdserverpb__auth_role_add_response__descriptor);
        } else {
            Etcdserverpb__AuthRoleDeleteRequest r = ETCDSERVERPB__AUTH_ROLE_DELETE_REQUEST__INIT;
            r.role = pos[0];
            resp = call(ctl, "/etcdserverpb.Auth/RoleDelete", &r.base,
                        &etcdserverpb__auth_role_delete_response__descriptor);
        }
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else
            printf("Role %s %s\n", pos[0], add ? "created" : "deleted");
        done(resp);
    } else if (strcmp(sub, "get") == 0) {
        if (np != 1)
            usage_err("role get command requires role name as its argument");
        Etcdserverpb__AuthRoleGetResponse *resp = role_get(ctl, pos[0]);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, &resp->base);
        else
            print_role(pos[0], resp);
        done(&resp->base);
    } else if (strcmp(sub, "list") == 0) {
        Etcdserverpb__AuthRoleListRequest r = ETCDSERVERPB__AUTH_ROLE_LIST_REQUEST__INIT;
        Etcdserverpb__AuthRoleListResponse *resp = (Etcdserverpb__AuthRoleListResponse *)call(
            ctl, "/etcdserverpb.Auth/RoleList", &r.base,
            &etcdserverpb__auth_role_list_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, &resp->base);
        else
            for (size_t i = 0; i < resp->n_roles; i++)
                printf("%s\n", resp->roles[i]);
        done(&resp->base);
    } else if (strcmp(sub, "grant-permission") == 0) {
        if (np < 3)
            usage_err("role grant command requires role name, permission type, and key "
                      "[endkey] as its argument");
        Authpb__Permission p = AUTHPB__PERMISSION__INIT;
        if (strcmp(pos[1], "read") == 0)
            p.permtype = AUTHPB__PERMISSION__TYPE__READ;
        else if (strcmp(pos[1], "write") == 0)
            p.permtype = AUTHPB__PERMISSION__TYPE__WRITE;
        else if (strcmp(pos[1], "readwrite") == 0)
            p.permtype = AUTHPB__PERMISSION__TYPE__READWRITE;
        else
            ctl_die(CTL_EXIT_BAD_ARGS, "invalid permission type: %s", pos[1]);
        perm_range(pos[2], np > 3 ? pos[3] : NULL, prefix, from_key, &p.key, &p.range_end);
        Etcdserverpb__AuthRoleGrantPermissionRequest r =
            ETCDSERVERPB__AUTH_ROLE_GRANT_PERMISSION_REQUEST__INIT;
        r.name = pos[0];
        r.perm = &p;
        ProtobufCMessage *resp = call(ctl, "/etcdserverpb.Auth/RoleGrantPermission", &r.base,
                                      &etcdserverpb__auth_role_grant_permission_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else
            printf("Role %s updated\n", pos[0]);
        done(resp);
    } else if (strcmp(sub, "revoke-permission") == 0) {
        if (np < 2)
            usage_err("role revoke-permission command requires role name and key [endkey] as "
                      "its argument");
        Etcdserverpb__AuthRoleRevokePermissionRequest r =
            ETCDSERVERPB__AUTH_ROLE_REVOKE_PERMISSION_REQUEST__INIT;
        r.role = pos[0];
        perm_range(pos[1], np > 2 ? pos[2] : NULL, prefix, from_key, &r.key, &r.range_end);
        ProtobufCMessage *resp =
            call(ctl, "/etcdserverpb.Auth/RoleRevokePermission", &r.base,
                 &etcdserverpb__auth_role_revoke_permission_response__descriptor);
        if (ctl->format == CTL_JSON)
            print_json_or(ctl, resp);
        else if (r.range_end.len == 0)
            printf("Permission of key %s is revoked from role %s\n", pos[1], pos[0]);
        else
            printf("Permission of range [%.*s, %.*s) is revoked from role %s\n",
                   (int)r.key.len, (const char *)r.key.data, (int)r.range_end.len,
                   (const char *)r.range_end.data, pos[0]);
        done(resp);
    } else {
        fprintf(stderr, "Error: unknown command \"%s\" for \"etcdctl role\"\n", sub);
        return CTL_EXIT_BAD_ARGS;
    }
    return 0;
}
