/* tools/quorumctl/admin.c: lease, member, endpoint, defrag, alarm,
 * move-leader, snapshot save, lock and elect, with etcdctl 3.4's flags,
 * output and errors. */
#include "quorumctl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"

static int64_t lease_arg(const char *s)
{
    return ctl_lease_id(s, "lease ID arg");
}

static uint64_t member_arg(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno || *end || end == s || *s == '-')
        ctl_die(CTL_EXIT_BAD_ARGS,
                "bad member ID arg (strconv.ParseUint: parsing \"%s\": "
                "invalid syntax), expecting ID in Hex",
                s);
    return v;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* go_duration formats seconds as Go's time.Duration.String() */
static void go_duration(double sec, char *out, size_t cap)
{
    long long ns = (long long)(sec * 1e9);
    if (ns < 1000)
        snprintf(out, cap, "%lldns", ns);
    else if (ns < 1000000)
        snprintf(out, cap, "%gµs", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(out, cap, "%.9gms", (double)ns / 1e6);
    else
        snprintf(out, cap, "%.9gs", (double)ns / 1e9);
}

static const char *alarm_name(Etcdserverpb__AlarmType t)
{
    return t == ETCDSERVERPB__ALARM_TYPE__NOSPACE   ? "NOSPACE"
           : t == ETCDSERVERPB__ALARM_TYPE__CORRUPT ? "CORRUPT"
                                                    : "NONE";
}

static int call_failed(int rc, const struct qc_status *st)
{
    ctl_fail(rc, st);
    return CTL_EXIT_ERROR;
}

/* ---- lease ---- */

/* lease_fields: -w fields of a lease grant or keep-alive */
static void lease_fields(const Etcdserverpb__ResponseHeader *h, int64_t id, int64_t ttl)
{
    ctl_fields_hdr(h);
    printf("\"ID\" : %lld\n\"TTL\" : %lld\n", (long long)id, (long long)ttl);
}

static int lease_keepalive(struct ctl *ctl, qc_client *c, int64_t id, bool once)
{
    qc_stream *s;
    struct qc_status st;
    int rc = qc_stream_open(c, QC_METHOD_LEASE_KEEPALIVE, &s);
    if (rc < 0)
        return call_failed(rc, &st);
    setvbuf(stdout, NULL, _IOLBF, 0);
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = id;
    for (;;) {
        rc = qc_stream_send(s, &req.base);
        Etcdserverpb__LeaseKeepAliveResponse *r = NULL;
        if (rc == 0)
            rc = qc_stream_recv(s, &etcdserverpb__lease_keep_alive_response__descriptor,
                                (ProtobufCMessage **)&r, (int)ctl->command_timeout_ms, &st);
        if (rc == 1) {
            rc = QC_ESTATUS;
        }
        if (rc < 0) {
            qc_stream_free(s);
            if (once) {
                ctl_fail(rc, &st);
                return CTL_EXIT_BAD_CONNECTION;
            }
            break;
        }
        if (r->ttl <= 0) {
            protobuf_c_message_free_unpacked(&r->base, NULL);
            qc_stream_free(s);
            if (once)
                ctl_die(CTL_EXIT_BAD_CONNECTION, "etcdserver: requested lease not found");
            break;
        }
        if (ctl->format == CTL_JSON) {
            ctl_json_header_fields(stdout, r->header);
            printf("%s\"ID\":%lld,\"TTL\":%lld}\n", r->header ? "," : "", (long long)r->id,
                   (long long)r->ttl);
        } else if (ctl->format == CTL_FIELDS) {
            lease_fields(r->header, r->id, r->ttl);
        } else
            printf("lease %016llx keepalived with TTL(%lld)\n", (unsigned long long)r->id,
                   (long long)r->ttl);
        int64_t ttl = r->ttl;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (once) {
            qc_stream_free(s);
            return 0;
        }
        /* clientv3 sends a keep-alive every TTL/3 */
        double wait = (double)ttl / 3.0;
        if (wait < 0.5)
            wait = 0.5;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (ctl->format == CTL_SIMPLE)
        printf("lease %016llx expired or revoked.\n", (unsigned long long)id);
    return 0;
}

int cmd_lease(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "lease needs a subcommand: grant, revoke, timetolive, list, "
                                   "keep-alive");
    const char *sub = argv[0];
    bool keys = false, once = false, b;
    char *pos[4];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (ctl_bool(argv[i], "keys", &b))
            keys = b;
        else if (ctl_bool(argv[i], "once", &b))
            once = b;
        else
            ctl_positional(pos, 4, &np, argv[i]);
    }
    ctl_unsupported(ctl, CTL_TABLE);
    struct qc_status st;
    int rc;
    if (strcmp(sub, "grant") == 0) {
        if (np != 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "lease grant command needs TTL argument");
        char *end;
        long long ttl = strtoll(pos[0], &end, 10);
        if (*end || end == pos[0])
            ctl_die(CTL_EXIT_BAD_ARGS,
                    "bad TTL (strconv.ParseInt: parsing \"%s\": invalid "
                    "syntax)",
                    pos[0]);
        qc_client *c = ctl_connect(ctl);
        Etcdserverpb__LeaseGrantResponse *r;
        if ((rc = qc_lease_grant(c, ttl, 0, &r, &st)) < 0)
            ctl_die(CTL_EXIT_ERROR, "failed to grant lease (%s)", st.message);
        if (ctl->format == CTL_JSON) {
            ctl_json_header_fields(stdout, r->header);
            printf("%s\"ID\":%lld,\"TTL\":%lld,\"Error\":", r->header ? "," : "", (long long)r->id,
                   (long long)r->ttl);
            ctl_json_string(stdout, r->error ? r->error : "");
            printf("}\n");
        } else if (ctl->format == CTL_FIELDS)
            lease_fields(r->header, r->id, r->ttl);
        else
            printf("lease %016llx granted with TTL(%llds)\n", (unsigned long long)r->id,
                   (long long)r->ttl);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        qc_close(c);
        return 0;
    }
    if (strcmp(sub, "revoke") == 0) {
        if (np != 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "lease revoke command needs 1 argument");
        int64_t id = lease_arg(pos[0]);
        qc_client *c = ctl_connect(ctl);
        Etcdserverpb__LeaseRevokeResponse *r;
        if ((rc = qc_lease_revoke(c, id, &r, &st)) < 0) {
            char t[512];
            ctl_errtext(rc, &st, t, sizeof(t));
            ctl_die(CTL_EXIT_ERROR, "failed to revoke lease (%s)", t);
        }
        if (ctl->format == CTL_JSON)
            ctl_print_json(&r->base);
        else if (ctl->format == CTL_FIELDS)
            ctl_fields_hdr(r->header);
        else
            printf("lease %016llx revoked\n", (unsigned long long)id);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        qc_close(c);
        return 0;
    }
    if (strcmp(sub, "timetolive") == 0) {
        if (np != 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "lease timetolive command needs lease ID as argument");
        int64_t id = lease_arg(pos[0]);
        qc_client *c = ctl_connect(ctl);
        Etcdserverpb__LeaseTimeToLiveResponse *r;
        if ((rc = qc_lease_timetolive(c, id, keys, &r, &st)) < 0)
            return call_failed(rc, &st);
        if (ctl->format == CTL_JSON) {
            /* clientv3.LeaseTimeToLiveResponse */
            ctl_json_header_fields(stdout, r->header);
            printf(
                "%s\"id\":%lld,\"ttl\":%lld,\"granted-ttl\":%lld,\"keys\":", r->header ? "," : "",
                (long long)r->id, (long long)r->ttl, (long long)r->grantedttl);
            if (r->n_keys == 0) {
                printf("null");
            } else {
                putchar('[');
                for (size_t i = 0; i < r->n_keys; i++) {
                    printf("%s\"", i ? "," : "");
                    ctl_json_b64(stdout, r->keys[i].data, r->keys[i].len);
                    printf("\"");
                }
                putchar(']');
            }
            printf("}\n");
        } else if (ctl->format == CTL_FIELDS) {
            ctl_fields_hdr(r->header);
            printf("\"ID\" : %lld\n\"TTL\" : %lld\n\"GrantedTTL\" : %lld\n", (long long)r->id,
                   (long long)r->ttl, (long long)r->grantedttl);
            for (size_t i = 0; i < r->n_keys; i++) {
                printf("\"Key\" : ");
                ctl_go_quote(r->keys[i].data, r->keys[i].len);
                putchar('\n');
            }
        } else if (r->grantedttl == 0 && r->ttl == -1) {
            printf("lease %016llx already expired\n", (unsigned long long)r->id);
        } else {
            printf("lease %016llx granted with TTL(%llds), remaining(%llds)",
                   (unsigned long long)r->id, (long long)r->grantedttl, (long long)r->ttl);
            if (keys) {
                printf(", attached keys([");
                for (size_t i = 0; i < r->n_keys; i++) {
                    if (i)
                        putchar(' ');
                    if (r->keys[i].len > 0)
                        fwrite(r->keys[i].data, 1, r->keys[i].len, stdout);
                }
                printf("])");
            }
            putchar('\n');
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
        qc_close(c);
        return 0;
    }
    if (strcmp(sub, "list") == 0) {
        if (np != 0)
            ctl_die(CTL_EXIT_BAD_ARGS, "lease list command does not accept arguments");
        qc_client *c = ctl_connect(ctl);
        Etcdserverpb__LeaseLeasesResponse *r;
        if ((rc = qc_lease_leases(c, &r, &st)) < 0) {
            char t[512];
            ctl_errtext(rc, &st, t, sizeof(t));
            ctl_die(CTL_EXIT_ERROR, "failed to list leases (%s)", t);
        }
        if (ctl->format == CTL_JSON) {
            /* clientv3.LeaseLeasesResponse: Leases []LeaseStatus `json:"leases"` */
            ctl_json_header_fields(stdout, r->header);
            printf("%s\"leases\":", r->header ? "," : "");
            if (r->n_leases == 0)
                printf("null");
            else {
                putchar('[');
                for (size_t i = 0; i < r->n_leases; i++)
                    printf("%s{\"id\":%lld}", i ? "," : "", (long long)r->leases[i]->id);
                putchar(']');
            }
            printf("}\n");
        } else if (ctl->format == CTL_FIELDS) {
            ctl_fields_hdr(r->header);
            for (size_t i = 0; i < r->n_leases; i++)
                printf("\"ID\" : %lld\n", (long long)r->leases[i]->id);
        } else {
            printf("found %zu leases\n", r->n_leases);
            for (size_t i = 0; i < r->n_leases; i++)
                printf("%016llx\n", (unsigned long long)r->leases[i]->id);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
        qc_close(c);
        return 0;
    }
    if (strcmp(sub, "keep-alive") == 0) {
        if (np != 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "lease keep-alive command needs lease ID as argument");
        int64_t id = lease_arg(pos[0]);
        qc_client *c = ctl_connect(ctl);
        int ret = lease_keepalive(ctl, c, id, once);
        qc_close(c);
        return ret;
    }
    ctl_die(CTL_EXIT_BAD_ARGS, "unknown command \"%s\" for \"quorumctl lease\"", sub);
}

/* ---- member ---- */

static void member_rows(const Etcdserverpb__MemberListResponse *r, char ****rows_out)
{
    char ***rows = ctl_calloc(r->n_members + 1, sizeof(char **));
    for (size_t i = 0; i < r->n_members; i++) {
        const Etcdserverpb__Member *m = r->members[i];
        char **row = ctl_calloc(6, sizeof(char *));
        char b[32];
        snprintf(b, sizeof(b), "%llx", (unsigned long long)m->id);
        row[0] = ctl_strdup(b);
        row[1] = ctl_strdup(m->name && *m->name ? "started" : "unstarted");
        row[2] = ctl_strdup(m->name ? m->name : "");
        row[3] = ctl_join(m->peerurls, m->n_peerurls, ",");
        row[4] = ctl_join(m->clienturls, m->n_clienturls, ",");
        row[5] = ctl_strdup(m->islearner ? "true" : "false");
        rows[i] = row;
    }
    *rows_out = rows;
}

static int member_list(struct ctl *ctl, qc_client *c)
{
    Etcdserverpb__MemberListResponse *r;
    struct qc_status st;
    int rc = qc_member_list(c, &r, &st);
    if (rc < 0)
        return call_failed(rc, &st);
    if (ctl->format == CTL_JSON) {
        ctl_print_json(&r->base);
    } else if (ctl->format == CTL_FIELDS) {
        ctl_fields_hdr(r->header);
        for (size_t i = 0; i < r->n_members; i++) {
            const Etcdserverpb__Member *m = r->members[i];
            printf("\"ID\" : %llu\n", (unsigned long long)m->id);
            ctl_fields_quoted("Name", m->name);
            for (size_t k = 0; k < m->n_peerurls; k++)
                ctl_fields_quoted("PeerURL", m->peerurls[k]);
            for (size_t k = 0; k < m->n_clienturls; k++)
                ctl_fields_quoted("ClientURL", m->clienturls[k]);
            printf("\"IsLearner\" : %s\n\n", m->islearner ? "true" : "false");
        }
    } else {
        char ***rows;
        member_rows(r, &rows);
        if (ctl->format == CTL_TABLE) {
            static const char *hdr[] = {"ID",         "Status",       "Name",
                                        "Peer Addrs", "Client Addrs", "Is Learner"};
            ctl_table(6, hdr, (int)r->n_members, rows);
        } else {
            for (size_t i = 0; i < r->n_members; i++)
                printf("%s, %s, %s, %s, %s, %s\n", rows[i][0], rows[i][1], rows[i][2], rows[i][3],
                       rows[i][4], rows[i][5]);
        }
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return 0;
}

static size_t split_urls(const char *s, char ***out)
{
    struct ctl tmp = {.endpoints = s};
    return ctl_endpoints(&tmp, out);
}

/* unsupported_after: etcdctl has no table or fields printer of member
 * add/remove/update/promote and move-leader, and finds out after the request:
 * the change is made, then "Error: table not supported as output format" */
static void unsupported_after(struct ctl *ctl, qc_client *c, ProtobufCMessage *r)
{
    if (ctl->format != CTL_TABLE && ctl->format != CTL_FIELDS)
        return;
    protobuf_c_message_free_unpacked(r, NULL);
    qc_close(c);
    ctl_unsupported(ctl, ctl->format);
}

int cmd_member(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "member needs a subcommand: list, add, remove, update, "
                                   "promote");
    const char *sub = argv[0];
    const char *peer_urls = NULL;
    bool learner = false, b;
    char *pos[4];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = ctl_flag(argc, argv, &i, "peer-urls")) != NULL)
            peer_urls = v;
        else if (ctl_bool(argv[i], "learner", &b))
            learner = b;
        else
            ctl_positional(pos, 4, &np, argv[i]);
    }
    struct qc_status st;
    int rc;
    if (strcmp(sub, "list") == 0) {
        qc_client *c = ctl_connect(ctl);
        int ret = member_list(ctl, c);
        qc_close(c);
        return ret;
    }
    if (strcmp(sub, "add") == 0) {
        if (np < 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "member name not provided");
        if (np > 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "too many arguments");
        if (peer_urls == NULL || *peer_urls == '\0')
            ctl_die(CTL_EXIT_BAD_ARGS, "member peer urls not provided");
        char **urls;
        size_t n = split_urls(peer_urls, &urls);
        qc_client *c = ctl_connect(ctl);
        Etcdserverpb__MemberAddResponse *r;
        if ((rc = qc_member_add(c, (const char *const *)urls, n, learner, &r, &st)) < 0)
            return call_failed(rc, &st);
        unsupported_after(ctl, c, &r->base);
        if (ctl->format == CTL_JSON) {
            ctl_print_json(&r->base);
        } else {
            /* etcdctl 3.4 says "added to" for a learner too */
            printf("Member %16llx added to cluster %16llx\n", (unsigned long long)r->member->id,
                   (unsigned long long)r->header->cluster_id);
            uint64_t new_id = r->member->id;
            Etcdserverpb__MemberListResponse *l;
            if ((rc = qc_member_list(c, &l, &st)) < 0)
                return call_failed(rc, &st);
            printf("\nETCD_NAME=\"%s\"\nETCD_INITIAL_CLUSTER=\"", pos[0]);
            int first = 1;
            for (size_t i = 0; i < l->n_members; i++) {
                const Etcdserverpb__Member *m = l->members[i];
                for (size_t k = 0; k < m->n_peerurls; k++) {
                    printf("%s%s=%s", first ? "" : ",", m->id == new_id ? pos[0] : m->name,
                           m->peerurls[k]);
                    first = 0;
                }
            }
            printf("\"\nETCD_INITIAL_ADVERTISE_PEER_URLS=\"");
            for (size_t i = 0; i < n; i++)
                printf("%s%s", i ? "," : "", urls[i]);
            printf("\"\nETCD_INITIAL_CLUSTER_STATE=\"existing\"\n");
            protobuf_c_message_free_unpacked(&l->base, NULL);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
        qc_close(c);
        return 0;
    }
    if (strcmp(sub, "remove") == 0 || strcmp(sub, "promote") == 0 || strcmp(sub, "update") == 0) {
        if (np != 1)
            ctl_die(CTL_EXIT_BAD_ARGS, "member ID is not provided");
        uint64_t id = member_arg(pos[0]);
        if (strcmp(sub, "update") == 0 && (peer_urls == NULL || *peer_urls == '\0'))
            ctl_die(CTL_EXIT_BAD_ARGS, "member peer urls not provided");
        qc_client *c = ctl_connect(ctl);
        ProtobufCMessage *r = NULL;
        const char *verb;
        if (strcmp(sub, "remove") == 0) {
            rc = qc_member_remove(c, id, (Etcdserverpb__MemberRemoveResponse **)&r, &st);
            verb = "removed from";
        } else if (strcmp(sub, "promote") == 0) {
            rc = qc_member_promote(c, id, (Etcdserverpb__MemberPromoteResponse **)&r, &st);
            verb = "promoted in";
        } else {
            char **urls;
            size_t n = split_urls(peer_urls, &urls);
            rc = qc_member_update(c, id, (const char *const *)urls, n,
                                  (Etcdserverpb__MemberUpdateResponse **)&r, &st);
            verb = "updated in";
        }
        if (rc < 0)
            return call_failed(rc, &st);
        /* (etcdctl 3.4 panics here on promote's: its printer lacks MemberPromote) */
        unsupported_after(ctl, c, r);
        /* every one of these responses starts with its header */
        Etcdserverpb__ResponseHeader *h = ((Etcdserverpb__MemberRemoveResponse *)r)->header;
        if (ctl->format == CTL_JSON)
            ctl_print_json(r);
        else
            printf("Member %16llx %s cluster %16llx\n", (unsigned long long)id, verb,
                   (unsigned long long)(h ? h->cluster_id : 0));
        protobuf_c_message_free_unpacked(r, NULL);
        qc_close(c);
        return 0;
    }
    ctl_die(CTL_EXIT_BAD_ARGS, "unknown command \"%s\" for \"quorumctl member\"", sub);
}

/* ---- endpoint ---- */

/* With one member down etcdctl 3.4 reports that member and carries on with
 * the others. Its endpoint status, endpoint hashkv and defrag make one
 * client of every --endpoint (logging in there once with --user: a login
 * that fails ends the command, exit 2), then ask each endpoint in turn over
 * a connection of its own, each call within --command-timeout: an endpoint
 * that fails is a line on stderr, the others are printed, and the exit code
 * is 1. endpoint health checks every endpoint at once, each with a client
 * of its own. quorumctl does the same, one connection per endpoint
 * (ctl_open); a dead member costs at most the dial timeout (a refused
 * connection fails at once, where grpc-go retries until the command's
 * deadline), and its error reads as etcdctl's, "context deadline
 * exceeded". */

/* endpoint_list: --endpoints, or with --cluster every member's client URLs,
 * asked of any endpoint that answers, without logging in (as etcdctl) */
static size_t endpoint_list(struct ctl *ctl, bool cluster, char ***out)
{
    if (!cluster)
        return ctl_endpoints(ctl, out);
    char **given;
    size_t ng = ctl_endpoints(ctl, &given);
    qc_client *c;
    struct qc_status st;
    int rc = ctl_dial(ctl, (const char *const *)given, ng, &c, &st);
    if (rc == -EINVAL && st.code == QC_INVALID_ARGUMENT && (ctl->cacert || ctl->cert || ctl->key))
        ctl_die(CTL_EXIT_ERROR, "%s", st.message); /* etcdctl: ExitError here */
    ctl_setup_fatal(ctl, rc, &st);
    Etcdserverpb__MemberListResponse *r = NULL;
    if (rc == 0) {
        rc = qc_member_list(c, &r, &st);
        qc_close(c);
    }
    if (rc < 0) {
        char t[512];
        ctl_errtext(rc, &st, t, sizeof(t));
        ctl_die(CTL_EXIT_ERROR, "failed to fetch endpoints from etcd cluster member list: %s", t);
    }
    size_t n = 0;
    char **v = NULL;
    for (size_t i = 0; i < r->n_members; i++)
        for (size_t k = 0; k < r->members[i]->n_clienturls; k++) {
            v = realloc(v, (n + 1) * sizeof(char *));
            v[n++] = ctl_strdup(r->members[i]->clienturls[k]);
        }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    *out = n ? ctl_keep(v) : NULL;
    return n;
}

/* login_once: etcdctl's mustClientFromCmd before it asks endpoint by
 * endpoint: with --user, a client of every endpoint that logs in, or the
 * command ends there (exit 2: no endpoint answers, or the login is refused) */
static void login_once(struct ctl *ctl)
{
    if (ctl->user == NULL || ctl->user[0] == '\0')
        return;
    char **eps;
    size_t n = ctl_endpoints(ctl, &eps);
    qc_client *c;
    struct qc_status st;
    int rc = ctl_dial(ctl, (const char *const *)eps, n, &c, &st);
    ctl_setup_fatal(ctl, rc, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        exit(CTL_EXIT_BAD_CONNECTION);
    }
    ctl_login(ctl, c);
    qc_close(c);
}

/* open_ep: a logged-in client of |ep| alone, or the error that endpoint's
 * call fails with */
static int open_ep(struct ctl *ctl, const char *ep, qc_client **c, struct qc_status *st)
{
    int rc = ctl_open(ctl, ep, true, c, st);
    ctl_setup_fatal(ctl, rc, st);
    return rc;
}

static int endpoint_status(struct ctl *ctl, char **eps, size_t n)
{
    Etcdserverpb__StatusResponse **rs = ctl_calloc(n, sizeof(*rs));
    int ret = 0;
    size_t ok = 0;
    char **good = ctl_calloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        qc_client *c;
        struct qc_status st;
        Etcdserverpb__StatusResponse *r = NULL;
        int rc = open_ep(ctl, eps[i], &c, &st);
        if (rc == 0) {
            rc = qc_maint_status(c, &r, &st);
            qc_close(c);
        }
        if (rc < 0) {
            char t[512];
            ctl_errtext(rc, &st, t, sizeof(t));
            fprintf(stderr, "Failed to get the status of endpoint %s (%s)\n", eps[i], t);
            ret = CTL_EXIT_ERROR; /* etcdctl: exit 1, no "Error: ..." line */
            continue;
        }
        good[ok] = eps[i];
        rs[ok++] = r;
    }
    if (ctl->format == CTL_FIELDS) {
        for (size_t i = 0; i < ok; i++) {
            Etcdserverpb__StatusResponse *r = rs[i];
            ctl_fields_hdr(r->header);
            ctl_fields_quoted("Version", r->version);
            printf("\"DBSize\" : %lld\n\"Leader\" : %llu\n\"IsLearner\" : %s\n"
                   "\"RaftIndex\" : %llu\n\"RaftTerm\" : %llu\n\"RaftAppliedIndex\" : %llu\n"
                   "\"Errors\" : [%s]\n",
                   (long long)r->dbsize, (unsigned long long)r->leader,
                   r->islearner ? "true" : "false", (unsigned long long)r->raftindex,
                   (unsigned long long)r->raftterm, (unsigned long long)r->raftappliedindex,
                   ctl_join(r->errors, r->n_errors, " "));
            ctl_fields_quoted("Endpoint", good[i]);
            putchar('\n');
        }
    } else if (ctl->format == CTL_JSON) {
        /* []epStatus{Ep string `json:"Endpoint"`; Resp *StatusResponse `json:"Status"`} */
        putchar('[');
        for (size_t i = 0; i < ok; i++) {
            if (i)
                putchar(',');
            printf("{\"Endpoint\":");
            ctl_json_string(stdout, good[i]);
            printf(",\"Status\":");
            ctl_json_message(stdout, &rs[i]->base);
            putchar('}');
        }
        printf("]\n");
    } else {
        char ***rows = ctl_calloc(ok + 1, sizeof(char **));
        for (size_t i = 0; i < ok; i++) {
            Etcdserverpb__StatusResponse *r = rs[i];
            char **row = ctl_calloc(10, sizeof(char *));
            char b[64];
            uint64_t mid = r->header ? r->header->member_id : 0;
            row[0] = good[i];
            snprintf(b, sizeof(b), "%llx", (unsigned long long)mid);
            row[1] = ctl_strdup(b);
            row[2] = r->version ? r->version : "";
            ctl_humanize((uint64_t)r->dbsize, b, sizeof(b));
            row[3] = ctl_strdup(b);
            row[4] = r->leader == mid ? "true" : "false";
            row[5] = r->islearner ? "true" : "false";
            snprintf(b, sizeof(b), "%llu", (unsigned long long)r->raftterm);
            row[6] = ctl_strdup(b);
            snprintf(b, sizeof(b), "%llu", (unsigned long long)r->raftindex);
            row[7] = ctl_strdup(b);
            snprintf(b, sizeof(b), "%llu", (unsigned long long)r->raftappliedindex);
            row[8] = ctl_strdup(b);
            row[9] = ctl_join(r->errors, r->n_errors, ", ");
            rows[i] = row;
        }
        if (ctl->format == CTL_TABLE) {
            static const char *hdr[] = {"endpoint",  "ID",         "version",
                                        "db size",   "is leader",  "is learner",
                                        "raft term", "raft index", "raft applied index",
                                        "errors"};
            ctl_table(10, hdr, (int)ok, rows);
        } else {
            for (size_t i = 0; i < ok; i++) {
                for (int k = 0; k < 10; k++)
                    printf("%s%s", k ? ", " : "", rows[i][k]);
                putchar('\n');
            }
        }
    }
    for (size_t i = 0; i < ok; i++)
        protobuf_c_message_free_unpacked(&rs[i]->base, NULL);
    fflush(stdout);
    return ret;
}

/* ---- endpoint health: every endpoint at once ---- */

struct health {
    struct ctl *ctl;
    const char *ep;
    bool healthy;
    int setup_rc; /* ctl_open's -EINVAL: the command can't be set up */
    struct qc_status setup_st;
    char took[64];
    char err[512];
    /* completion order, as etcdctl prints what its goroutines send */
    pthread_mutex_t *mu;
    size_t *done;
    struct health **order;
};

static void *health_check(void *arg)
{
    struct health *h = arg;
    qc_client *c;
    struct qc_status st;
    double t0 = now_s();
    int rc = ctl_open(h->ctl, h->ep, true, &c, &st);
    if (rc == -EINVAL) {
        h->setup_rc = rc;
        h->setup_st = st;
    }
    if (rc < 0 && h->ctl->login_name != NULL) {
        /* etcdctl: with --user the client (a login) could not be made:
         * the error, and no time taken */
        h->took[0] = '\0';
    } else {
        if (rc == 0) {
            /* etcdctl: a linearizable get of "health"; PermissionDenied
             * counts as healthy (it got through consensus) */
            rc = qc_get(c, "health", 6, NULL, NULL, &st);
            if (rc == QC_ESTATUS && st.code == QC_PERMISSION_DENIED)
                rc = 0;
        }
        go_duration(now_s() - t0, h->took, sizeof(h->took));
    }
    qc_close(c);
    h->healthy = rc == 0;
    if (rc < 0)
        ctl_errtext(rc, &st, h->err, sizeof(h->err));
    pthread_mutex_lock(h->mu);
    h->order[(*h->done)++] = h;
    pthread_mutex_unlock(h->mu);
    return NULL;
}

static int endpoint_health(struct ctl *ctl, char **eps, size_t n)
{
    ctl_credentials(ctl); /* asked once, before the threads */
    struct health *hs = ctl_calloc(n, sizeof(*hs)), **order = ctl_calloc(n, sizeof(*order));
    pthread_t *th = ctl_calloc(n, sizeof(*th));
    bool *started = ctl_calloc(n, sizeof(bool));
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        hs[i] = (struct health){.ctl = ctl, .ep = eps[i], .mu = &mu, .done = &done, .order = order};
        started[i] = pthread_create(&th[i], NULL, health_check, &hs[i]) == 0;
        if (!started[i])
            health_check(&hs[i]);
    }
    for (size_t i = 0; i < n; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    for (size_t i = 0; i < n; i++)
        if (hs[i].setup_rc)
            ctl_setup_fatal(ctl, hs[i].setup_rc, &hs[i].setup_st);
    bool bad = false;
    for (size_t i = 0; i < n; i++)
        bad |= !hs[i].healthy;
    if (ctl->format == CTL_JSON) {
        /* epHealth: {"endpoint","health","took","error,omitempty"} */
        putchar('[');
        for (size_t i = 0; i < n; i++) {
            printf("%s{\"endpoint\":", i ? "," : "");
            ctl_json_string(stdout, order[i]->ep);
            printf(",\"health\":%s,\"took\":", order[i]->healthy ? "true" : "false");
            ctl_json_string(stdout, order[i]->took);
            if (!order[i]->healthy) {
                printf(",\"error\":");
                ctl_json_string(stdout, order[i]->err);
            }
            putchar('}');
        }
        printf("]\n");
    } else if (ctl->format == CTL_FIELDS) {
        for (size_t i = 0; i < n; i++) {
            ctl_fields_quoted("Endpoint", order[i]->ep);
            printf("\"Health\" : %s\n\"Took\" : %s\n\"Error\" : %s\n\n",
                   order[i]->healthy ? "true" : "false", order[i]->took,
                   order[i]->healthy ? "" : order[i]->err);
        }
    } else if (ctl->format == CTL_TABLE) {
        char ***rows = ctl_calloc(n + 1, sizeof(char **));
        for (size_t i = 0; i < n; i++) {
            rows[i] = ctl_calloc(4, sizeof(char *));
            rows[i][0] = (char *)order[i]->ep;
            rows[i][1] = order[i]->healthy ? "true" : "false";
            rows[i][2] = order[i]->took;
            rows[i][3] = order[i]->healthy ? "" : order[i]->err;
        }
        static const char *hdr[] = {"endpoint", "health", "took", "error"};
        ctl_table(4, hdr, (int)n, rows);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (order[i]->healthy)
                fprintf(stderr, "%s is healthy: successfully committed proposal: took = %s\n",
                        order[i]->ep, order[i]->took);
            else
                fprintf(stderr, "%s is unhealthy: failed to commit proposal: %s\n", order[i]->ep,
                        order[i]->err);
        }
    }
    fflush(stdout);
    if (bad)
        ctl_die(CTL_EXIT_ERROR, "unhealthy cluster");
    return 0;
}

static int endpoint_hashkv(struct ctl *ctl, char **eps, size_t n, int64_t rev)
{
    Etcdserverpb__HashKVResponse **rs = ctl_calloc(n, sizeof(*rs));
    char **good = ctl_calloc(n, sizeof(char *));
    size_t ok = 0;
    char last_err[512] = "";
    for (size_t i = 0; i < n; i++) {
        qc_client *c;
        struct qc_status st;
        Etcdserverpb__HashKVResponse *r = NULL;
        int rc = open_ep(ctl, eps[i], &c, &st);
        if (rc == 0) {
            rc = qc_maint_hashkv(c, rev, &r, &st);
            qc_close(c);
        }
        if (rc < 0) {
            ctl_errtext(rc, &st, last_err, sizeof(last_err));
            fprintf(stderr, "Failed to get the hash of endpoint %s (%s)\n", eps[i], last_err);
            continue;
        }
        good[ok] = eps[i];
        rs[ok++] = r;
    }
    if (ctl->format == CTL_JSON) {
        putchar('[');
        for (size_t i = 0; i < ok; i++) {
            printf("%s{\"Endpoint\":", i ? "," : "");
            ctl_json_string(stdout, good[i]);
            printf(",\"HashKV\":");
            ctl_json_message(stdout, &rs[i]->base);
            putchar('}');
        }
        printf("]\n");
    } else if (ctl->format == CTL_FIELDS) {
        for (size_t i = 0; i < ok; i++) {
            ctl_fields_hdr(rs[i]->header);
            ctl_fields_quoted("Endpoint", good[i]);
            printf("\"Hash\" : %u\n\n", rs[i]->hash);
        }
    } else if (ctl->format == CTL_TABLE) {
        char ***rows = ctl_calloc(ok + 1, sizeof(char **));
        for (size_t i = 0; i < ok; i++) {
            rows[i] = ctl_calloc(2, sizeof(char *));
            rows[i][0] = good[i];
            char b[32];
            snprintf(b, sizeof(b), "%u", rs[i]->hash);
            rows[i][1] = ctl_strdup(b);
        }
        static const char *hdr[] = {"endpoint", "hash"};
        ctl_table(2, hdr, (int)ok, rows);
    } else {
        for (size_t i = 0; i < ok; i++)
            printf("%s, %u\n", good[i], rs[i]->hash);
    }
    for (size_t i = 0; i < ok; i++)
        protobuf_c_message_free_unpacked(&rs[i]->base, NULL);
    fflush(stdout);
    if (last_err[0]) /* etcdctl: the last endpoint's error */
        ctl_die(CTL_EXIT_ERROR, "%s", last_err);
    return 0;
}

int cmd_endpoint(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "endpoint needs a subcommand: status, health, hashkv");
    bool cluster = false, b;
    int64_t rev = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (ctl_bool(argv[i], "cluster", &b))
            cluster = b;
        else if ((v = ctl_flag(argc, argv, &i, "rev")) != NULL)
            rev = strtoll(v, NULL, 10);
        else {
            ctl_unknown_flag(argv[i]);
            ctl_die(CTL_EXIT_BAD_ARGS, "too many arguments");
        }
    }
    bool status = strcmp(argv[0], "status") == 0, hashkv = strcmp(argv[0], "hashkv") == 0;
    if (!status && !hashkv && strcmp(argv[0], "health") != 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "unknown command \"%s\" for \"quorumctl endpoint\"", argv[0]);
    /* etcdctl: status and hashkv make their client (the login) first, then
     * list the endpoints; health lists them, then makes a client of each */
    if (status || hashkv)
        login_once(ctl);
    char **eps;
    size_t n = endpoint_list(ctl, cluster, &eps);
    if (status)
        return endpoint_status(ctl, eps, n);
    if (hashkv)
        return endpoint_hashkv(ctl, eps, n, rev);
    return endpoint_health(ctl, eps, n);
}

/* ---- defrag, alarm, move-leader ---- */

int cmd_defrag(struct ctl *ctl, int argc, char **argv)
{
    bool cluster = false, b;
    for (int i = 0; i < argc; i++) {
        if (ctl_bool(argv[i], "cluster", &b))
            cluster = b;
        else {
            ctl_unknown_flag(argv[i]);
            ctl_die(CTL_EXIT_BAD_ARGS, "defrag command does not accept arguments");
        }
    }
    login_once(ctl); /* etcdctl's mustClientFromCmd, before the endpoint list */
    char **eps;
    size_t n = endpoint_list(ctl, cluster, &eps);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        qc_client *c;
        struct qc_status st;
        int rc = open_ep(ctl, eps[i], &c, &st);
        if (rc == 0) {
            rc = qc_maint_defragment(c, (int)ctl->command_timeout_ms, NULL, &st);
            qc_close(c);
        }
        if (rc < 0) {
            char t[512];
            ctl_errtext(rc, &st, t, sizeof(t));
            fprintf(stderr, "Failed to defragment etcd member[%s] (%s)\n", eps[i], t);
            failed = 1;
        } else {
            printf("Finished defragmenting etcd member[%s]\n", eps[i]);
        }
        fflush(stdout);
    }
    return failed ? CTL_EXIT_ERROR : 0;
}

static void print_alarms(struct ctl *ctl, Etcdserverpb__AlarmResponse *r)
{
    if (ctl->format == CTL_JSON) {
        ctl_print_json(&r->base);
        return;
    }
    if (ctl->format == CTL_FIELDS)
        ctl_fields_hdr(r->header);
    for (size_t i = 0; i < r->n_alarms; i++) {
        const char *a = alarm_name(r->alarms[i]->alarm);
        unsigned long long m = (unsigned long long)r->alarms[i]->memberid;
        if (ctl->format == CTL_FIELDS)
            printf("\"MemberID\" : %llu\n\"AlarmType\" : %s\n\n", m, a);
        else /* %+v of *pb.AlarmMember: the proto text format */
            printf("memberID:%llu alarm:%s \n", m, a);
    }
}

int cmd_alarm(struct ctl *ctl, int argc, char **argv)
{
    if (argc != 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "alarm needs one subcommand: list or disarm");
    ctl_unsupported(ctl, CTL_TABLE);
    qc_client *c = ctl_connect(ctl);
    struct qc_status st;
    Etcdserverpb__AlarmResponse *r;
    int rc;
    if (strcmp(argv[0], "list") == 0) {
        rc = qc_maint_alarm(c, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET, 0,
                            ETCDSERVERPB__ALARM_TYPE__NONE, &r, &st);
    } else if (strcmp(argv[0], "disarm") == 0) {
        /* clientv3 AlarmDisarm with an empty member: list, then deactivate each */
        Etcdserverpb__AlarmResponse *l;
        rc = qc_maint_alarm(c, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET, 0,
                            ETCDSERVERPB__ALARM_TYPE__NONE, &l, &st);
        if (rc < 0)
            return call_failed(rc, &st);
        r = l;
        for (size_t i = 0; i < l->n_alarms; i++) {
            Etcdserverpb__AlarmResponse *d;
            rc = qc_maint_alarm(c, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE,
                                l->alarms[i]->memberid, l->alarms[i]->alarm, &d, &st);
            if (rc < 0)
                return call_failed(rc, &st);
            protobuf_c_message_free_unpacked(&d->base, NULL);
        }
    } else {
        ctl_die(CTL_EXIT_BAD_ARGS, "unknown command \"%s\" for \"quorumctl alarm\"", argv[0]);
    }
    if (rc < 0)
        return call_failed(rc, &st);
    print_alarms(ctl, r);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    qc_close(c);
    return 0;
}

int cmd_move_leader(struct ctl *ctl, int argc, char **argv)
{
    if (argc != 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "move-leader command needs 1 argument");
    char *end;
    errno = 0;
    unsigned long long target = strtoull(argv[0], &end, 16);
    if (errno || *end || end == argv[0])
        ctl_die(CTL_EXIT_BAD_ARGS, "strconv.ParseUint: parsing \"%s\": invalid syntax", argv[0]);
    char **eps;
    size_t n = ctl_endpoints(ctl, &eps);
    qc_client *leader = NULL;
    uint64_t leader_id = 0;
    for (size_t i = 0; i < n && leader == NULL; i++) {
        qc_client *c = ctl_connect_one(ctl, eps[i]);
        struct qc_status st;
        Etcdserverpb__StatusResponse *r;
        int rc = qc_maint_status(c, &r, &st);
        if (rc < 0)
            return call_failed(rc, &st);
        if (r->header && r->header->member_id == r->leader) {
            leader = c;
            leader_id = r->leader;
        } else {
            qc_close(c);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    if (leader == NULL) {
        fprintf(stderr, "Error: no leader endpoint given at [");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%s%s", i ? " " : "", eps[i]);
        fprintf(stderr, "]\n");
        return CTL_EXIT_BAD_ARGS;
    }
    struct qc_status st;
    Etcdserverpb__MoveLeaderResponse *r;
    int rc = qc_maint_move_leader(leader, target, &r, &st);
    if (rc < 0)
        return call_failed(rc, &st);
    unsupported_after(ctl, leader, &r->base); /* etcdctl: after the move */
    if (ctl->format == CTL_JSON)
        ctl_print_json(&r->base);
    else
        printf("Leadership transferred from %llx to %llx\n", (unsigned long long)leader_id,
               target);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    qc_close(leader);
    return 0;
}

/* ---- snapshot save ---- */

int cmd_snapshot_save(struct ctl *ctl, int argc, char **argv)
{
    if (argc != 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "snapshot save expects one argument");
    char **eps;
    size_t n = ctl_endpoints(ctl, &eps);
    if (n != 1) {
        fprintf(stderr, "Error: snapshot must be requested to one selected node, not multiple [");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%s%s", i ? " " : "", eps[i]);
        fprintf(stderr, "]\n");
        return CTL_EXIT_INTERRUPTED; /* etcdctl 3.4 exits 5 here */
    }
    const char *path = argv[0];
    char part[4096];
    snprintf(part, sizeof(part), "%s.part", path);
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        ctl_die(CTL_EXIT_ERROR, "could not open %s (%s)", part, strerror(errno));
    bool tty = isatty(2);
    qc_client *c = ctl_connect_one(ctl, eps[0]);
    qc_stream *s;
    struct qc_status st;
    int rc = qc_stream_open(c, QC_METHOD_SNAPSHOT, &s);
    Etcdserverpb__SnapshotRequest req = ETCDSERVERPB__SNAPSHOT_REQUEST__INIT;
    if (rc == 0)
        rc = qc_stream_send(s, &req.base);
    if (rc == 0)
        rc = qc_stream_close_send(s);
    struct sha256 h;
    sha256_init(&h);
    uint64_t done = 0, total = 0;
    /* the last message's blob is the digest; hash every blob but the last */
    Etcdserverpb__SnapshotResponse *held = NULL;
    for (; rc == 0;) {
        Etcdserverpb__SnapshotResponse *r;
        rc = qc_stream_recv(s, &etcdserverpb__snapshot_response__descriptor,
                            (ProtobufCMessage **)&r, (int)(ctl->command_timeout_ms * 6), &st);
        if (rc != 0)
            break;
        if (held) {
            sha256_update(&h, held->blob.data, held->blob.len);
            protobuf_c_message_free_unpacked(&held->base, NULL);
        }
        if (write(fd, r->blob.data, r->blob.len) != (ssize_t)r->blob.len) {
            unlink(part);
            ctl_die(CTL_EXIT_IO, "could not write %s (%s)", part, strerror(errno));
        }
        done += r->blob.len;
        if (total == 0)
            total = done + r->remaining_bytes;
        if (tty)
            ctl_progress("saving", done, total);
        held = r;
    }
    qc_stream_free(s);
    qc_close(c);
    if (tty)
        fputc('\n', stderr);
    if (rc != 1 || st.code != 0) {
        close(fd);
        unlink(part);
        if (rc == 1)
            rc = QC_ESTATUS;
        ctl_fail(rc, &st);
        return CTL_EXIT_ERROR;
    }
    uint8_t sum[32];
    sha256_final(&h, sum);
    if (held == NULL || held->blob.len != 32 || memcmp(held->blob.data, sum, 32) != 0) {
        close(fd);
        unlink(part);
        ctl_die(CTL_EXIT_ERROR, "snapshot's sha256 does not match the data received");
    }
    protobuf_c_message_free_unpacked(&held->base, NULL);
    if (fsync(fd) != 0 || close(fd) != 0 || rename(part, path) != 0) {
        unlink(part);
        ctl_die(CTL_EXIT_IO, "could not save %s (%s)", path, strerror(errno));
    }
    printf("Snapshot saved at %s\n", path);
    return 0;
}

/* ---- sessions for lock and elect: a lease kept alive by a thread ---- */

struct session {
    qc_client *c;
    int64_t lease;
    int64_t ttl;
    pthread_t thread;
    volatile int lost;
};

static void *session_loop(void *arg)
{
    struct session *ss = arg;
    qc_stream *s = NULL;
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = ss->lease;
    for (;;) {
        struct timespec ts = {ss->ttl / 3 > 0 ? ss->ttl / 3 : 1, 0};
        nanosleep(&ts, NULL);
        struct qc_status st;
        if (s == NULL && qc_stream_open(ss->c, QC_METHOD_LEASE_KEEPALIVE, &s) < 0)
            continue;
        Etcdserverpb__LeaseKeepAliveResponse *r = NULL;
        int rc = qc_stream_send(s, &req.base);
        if (rc == 0)
            rc = qc_stream_recv(s, &etcdserverpb__lease_keep_alive_response__descriptor,
                                (ProtobufCMessage **)&r, 5000, &st);
        if (rc != 0) {
            qc_stream_free(s);
            s = NULL;
            continue;
        }
        if (r->ttl <= 0)
            ss->lost = 1;
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    return NULL;
}

static void session_start(struct ctl *ctl, struct session *ss, int64_t ttl)
{
    ss->c = ctl_connect(ctl);
    ss->ttl = ttl;
    Etcdserverpb__LeaseGrantResponse *g;
    struct qc_status st;
    int rc = qc_lease_grant(ss->c, ttl, 0, &g, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        exit(CTL_EXIT_ERROR);
    }
    ss->lease = g->id;
    protobuf_c_message_free_unpacked(&g->base, NULL);
    pthread_create(&ss->thread, NULL, session_loop, ss);
    pthread_detach(ss->thread);
}

static void session_end(struct session *ss)
{
    qc_lease_revoke(ss->c, ss->lease, NULL, NULL);
}

static void block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

/* print_key prints the lock's or the leader's key as etcdctl, a get of it;
 * -w table: etcdctl's error when printing (the lock or leadership is kept
 * until the session's lease expires: not released), |owner| (holding key)
 * freed first */
static void print_key(struct ctl *ctl, qc_client *c, const ProtobufCBinaryData *key,
                      ProtobufCMessage *owner)
{
    Etcdserverpb__RangeResponse *r;
    struct qc_status st;
    int rc = qc_get(c, key->data, key->len, NULL, &r, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        exit(CTL_EXIT_ERROR);
    }
    if (ctl->format == CTL_TABLE) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        protobuf_c_message_free_unpacked(owner, NULL);
        ctl_unsupported(ctl, CTL_TABLE);
    }
    if (ctl->format == CTL_JSON)
        ctl_print_json(&r->base);
    else
        ctl_print_get(ctl, r);
    fflush(stdout);
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

int cmd_lock(struct ctl *ctl, int argc, char **argv)
{
    int64_t ttl = 10;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *v;
        if ((v = ctl_flag(argc, argv, &i, "ttl")) != NULL)
            ttl = strtoll(v, NULL, 10);
        else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else
            ctl_unknown_flag(argv[i]);
    }
    if (i >= argc)
        ctl_die(CTL_EXIT_BAD_ARGS, "lock takes a lock name argument and an optional command to "
                                   "execute");
    const char *name = argv[i++];
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    sigset_t set;
    block_signals(&set);
    struct session ss = {0};
    session_start(ctl, &ss, ttl);
    V3lockpb__LockResponse *l;
    struct qc_status st;
    int rc = qc_lock(ss.c, name, strlen(name), ss.lease, -1, &l, &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        return CTL_EXIT_ERROR;
    }
    if (i < argc) {
        char kenv[4096], renv[64];
        snprintf(kenv, sizeof(kenv), "ETCD_LOCK_KEY=%.*s", (int)l->key.len, l->key.data);
        snprintf(renv, sizeof(renv), "ETCD_LOCK_REV=%lld",
                 (long long)(l->header ? l->header->revision : 0));
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            pthread_sigmask(SIG_UNBLOCK, &set, NULL);
            putenv(kenv);
            putenv(renv);
            execvp(argv[i], argv + i);
            fprintf(stderr, "Error: exec: \"%s\": %s\n", argv[i], strerror(errno));
            _exit(127);
        }
        int ws = 0;
        waitpid(pid, &ws, 0);
        qc_unlock(ss.c, l->key.data, l->key.len, NULL, NULL);
        protobuf_c_message_free_unpacked(&l->base, NULL);
        session_end(&ss);
        if (WIFEXITED(ws) && WEXITSTATUS(ws) != 0)
            ctl_die(CTL_EXIT_ERROR, "exit status %d", WEXITSTATUS(ws));
        if (WIFSIGNALED(ws))
            ctl_die(CTL_EXIT_ERROR, "signal: %s", strsignal(WTERMSIG(ws)));
        return 0;
    }
    print_key(ctl, ss.c, &l->key, &l->base);
    int sig;
    for (;;) {
        struct timespec ts = {1, 0};
        sig = sigtimedwait(&set, NULL, &ts);
        if (sig > 0)
            break;
        if (ss.lost) {
            protobuf_c_message_free_unpacked(&l->base, NULL);
            ctl_die(CTL_EXIT_ERROR, "session expired");
        }
    }
    qc_unlock(ss.c, l->key.data, l->key.len, NULL, NULL);
    protobuf_c_message_free_unpacked(&l->base, NULL);
    session_end(&ss);
    return 0;
}

int cmd_elect(struct ctl *ctl, int argc, char **argv)
{
    bool listen = false, b;
    int64_t ttl = 60;
    char *pos[3];
    int np = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (ctl_bool_short(argv[i], 'l', "listen", &b))
            listen = b;
        else if ((v = ctl_flag(argc, argv, &i, "ttl")) != NULL)
            ttl = strtoll(v, NULL, 10);
        else
            ctl_positional(pos, 3, &np, argv[i]);
    }
    if (np != 1 && np != 2)
        ctl_die(CTL_EXIT_BAD_ARGS, "elect takes one election name argument and an optional "
                                   "proposal argument");
    if (!listen && np != 2)
        ctl_die(CTL_EXIT_BAD_ARGS, "no proposal argument but -l not set");
    if (listen && np != 1)
        ctl_die(CTL_EXIT_BAD_ARGS, "proposal given but -l is set");
    const char *name = pos[0];
    sigset_t set;
    block_signals(&set);
    struct qc_status st;
    int rc;
    if (listen) {
        qc_client *c = ctl_connect(ctl);
        setvbuf(stdout, NULL, _IOLBF, 0);
        qc_stream *s;
        V3electionpb__LeaderRequest req = V3ELECTIONPB__LEADER_REQUEST__INIT;
        req.name.data = (uint8_t *)name;
        req.name.len = strlen(name);
        rc = qc_stream_open(c, QC_METHOD_OBSERVE, &s);
        if (rc == 0)
            rc = qc_stream_send(s, &req.base);
        if (rc == 0)
            rc = qc_stream_close_send(s);
        while (rc == 0) {
            V3electionpb__LeaderResponse *r;
            rc = qc_stream_recv(s, &v3electionpb__leader_response__descriptor,
                                (ProtobufCMessage **)&r, 500, &st);
            if (rc == QC_ETIMEDOUT) {
                struct timespec z = {0, 0};
                if (sigtimedwait(&set, NULL, &z) > 0)
                    break;
                rc = 0;
                continue;
            }
            if (rc != 0)
                break;
            if (r->kv && ctl->format == CTL_TABLE) {
                /* etcdctl fails when printing the first leader */
                protobuf_c_message_free_unpacked(&r->base, NULL);
                qc_stream_free(s);
                qc_close(c);
                ctl_unsupported(ctl, CTL_TABLE);
            }
            if (r->kv) {
                /* etcdctl prints what clientv3's Observe yields: a GetResponse
                 * of the leader's key and its header, without count or more */
                Etcdserverpb__RangeResponse g = ETCDSERVERPB__RANGE_RESPONSE__INIT;
                g.header = r->header;
                g.n_kvs = 1;
                g.kvs = &r->kv;
                if (ctl->format == CTL_JSON)
                    ctl_print_json(&g.base);
                else
                    ctl_print_get(ctl, &g);
            }
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        qc_stream_free(s);
        if (rc != QC_ETIMEDOUT && rc != 0) {
            if (rc == 1)
                rc = QC_ESTATUS;
            ctl_fail(rc, &st);
            return CTL_EXIT_ERROR;
        }
        return 0;
    }
    struct session ss = {0};
    session_start(ctl, &ss, ttl);
    V3electionpb__CampaignResponse *cr;
    rc = qc_election_campaign(ss.c, name, strlen(name), ss.lease, pos[1], strlen(pos[1]), -1, &cr,
                              &st);
    if (rc < 0) {
        ctl_fail(rc, &st);
        return CTL_EXIT_ERROR;
    }
    print_key(ctl, ss.c, &cr->leader->key, &cr->base);
    for (;;) {
        struct timespec ts = {1, 0};
        if (sigtimedwait(&set, NULL, &ts) > 0)
            break;
        if (ss.lost) {
            protobuf_c_message_free_unpacked(&cr->base, NULL);
            ctl_die(CTL_EXIT_ERROR, "elect: session expired");
        }
    }
    qc_election_resign(ss.c, cr->leader, NULL, NULL);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    session_end(&ss);
    return 0;
}
