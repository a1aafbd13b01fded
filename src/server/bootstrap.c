/* server/bootstrap.c: what a member checks and takes before it creates
 * anything on disk, and how it creates its member directory.
 *
 * etcd 3.4's order (etcdmain, embed.StartEtcd, etcdserver.NewServer), which
 * quorum keeps, with one difference: etcd creates <data-dir>/member/snap
 * and its database before it has checked --initial-cluster; quorum creates
 * nothing until every check has passed.
 *   1. the flags (config_validate, main.c);
 *   2. the data dir can be listed and written (server_check_data_dir);
 *   3. the peer listener, then the client listeners, bound and listening
 *      (server_listen): a busy port stops the start here;
 *   4. without a log (server_bootstrap): --initial-cluster read and checked
 *      (config_check_cluster); a new member's --initial-advertise-peer-urls
 *      match its --initial-cluster entry, host names resolved
 *      (config_advertise_matches); a joining member (state existing) asks
 *      the members it was given for the cluster's member list and takes its
 *      id and the cluster's id from it, by peer URL (config_assign_ids), as
 *      etcd does: --initial-cluster-token plays no part in a join;
 *      with --discovery-srv, --initial-cluster is first built from the
 *      DNS SRV records of the domain (srv.c);
 *   5. the member directory built under <data-dir>/member.tmp (the store
 *      with the initial members, the log with the cluster's first entry)
 *      and renamed to <data-dir>/member when complete. A start that fails
 *      at any point before leaves no member behind: the next start with
 *      corrected flags is a first start again. A store restored by
 *      `quorumctl snapshot restore` (member/db, no log) keeps its place;
 *      only its log is built aside and renamed in.
 *
 * The member's identity is its log (member/wal): a member with a log
 * restarts from it and ignores the --initial-cluster flags, as etcd's. */
#include "server/server_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"
#include "server/etcd_import.h"
#include "server/srv.h"
#include "transport/transport.h"
#include "wal/wal.h"

#define RESOLVE_TIMEOUT_MS 30000 /* etcd's, for matching URLs by address */
#define FETCH_TIMEOUT_MS 10000   /* etcd's, per peer asked for the members */
#define STAGE "member.tmp"

/* go_strerror: errno as Go's syscall package says it ("address already in
 * use"): strerror's text with a lower-case first letter */
static const char *go_strerror(int errnum, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", strerror(errnum));
    if (buf[0] >= 'A' && buf[0] <= 'Z' && (buf[1] < 'A' || buf[1] > 'Z'))
        buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
}

/* ---- 2. the data dir ---- */

int server_check_data_dir(const char *dir, char *err, size_t cap)
{
    char why[128];
    struct stat st;
    if (stat(dir, &st) == 0) {
        /* etcd lists it (identifyDataDirOrDie), then touches it */
        DIR *d = S_ISDIR(st.st_mode) ? opendir(dir) : NULL;
        if (d == NULL) {
            snprintf(err, cap, "error listing data dir: %s", dir);
            return -ENOTDIR;
        }
        closedir(d);
        if (access(dir, W_OK | X_OK) != 0) {
            int e = errno;
            snprintf(err, cap, "cannot access data directory: open %s/.touch: %s", dir,
                     go_strerror(e, why, sizeof(why)));
            return -e;
        }
        /* an etcd 3.4 member dir is converted once, here (etcd_import.c) */
        return server_etcd_import(dir, err, cap);
    }
    if (errno != ENOENT) {
        snprintf(err, cap, "error listing data dir: %s", dir);
        return -errno;
    }
    /* it would be created: under the nearest ancestor that exists, which
     * must be a directory we may write */
    char path[1024], first[1024];
    snprintf(path, sizeof(path), "%s", dir);
    snprintf(first, sizeof(first), "%s", dir);
    for (;;) {
        char *slash = strrchr(path, '/');
        while (slash != NULL && slash > path && slash[1] == '\0') { /* trailing '/' */
            *slash = '\0';
            slash = strrchr(path, '/');
        }
        if (slash == NULL) {
            snprintf(path, sizeof(path), ".");
        } else if (slash == path) {
            path[1] = '\0';
        } else {
            *slash = '\0';
        }
        if (stat(path, &st) == 0)
            break;
        if (errno != ENOENT || strcmp(path, ".") == 0 || strcmp(path, "/") == 0) {
            snprintf(err, cap, "error listing data dir: %s", dir);
            return -errno;
        }
        snprintf(first, sizeof(first), "%s", path);
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, cap, "error listing data dir: %s", dir);
        return -ENOTDIR;
    }
    if (access(path, W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(err, cap, "cannot access data directory: mkdir %s: %s", first,
                 go_strerror(e, why, sizeof(why)));
        return -e;
    }
    return 0;
}

/* ---- 3. listeners ---- */

static int listen_unix_fd(const struct url *u, int *out, char *err, size_t cap)
{
    char why[128];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(u->host); /* config.c refuses longer paths */
    if (n >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, u->host, n + 1);
    /* as etcd: a stale socket file from an earlier run is removed first */
    if (unlink(u->host) != 0 && errno != ENOENT) {
        int e = errno;
        snprintf(err, cap, "listen unix %s: bind: %s", u->host, go_strerror(e, why, sizeof(why)));
        return -e;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    const char *step = "bind";
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || (step = "listen", listen(fd, 511)) != 0) {
        int e = errno;
        snprintf(err, cap, "listen unix %s: %s: %s", u->host, step,
                 go_strerror(e, why, sizeof(why)));
        close(fd);
        return -e;
    }
    *out = fd;
    return 0;
}

int server_listen_fd(const struct url *u, int *out, char *err, size_t cap)
{
    if (u->unix_sock)
        return listen_unix_fd(u, out, err, cap);
    char why[128];
    struct sockaddr_storage ss;
    int rv = uv_ip4_addr(u->host, u->port, (struct sockaddr_in *)&ss);
    if (rv != 0)
        rv = uv_ip6_addr(u->host, u->port, (struct sockaddr_in6 *)&ss);
    bool v6 = ss.ss_family == AF_INET6;
    if (rv != 0) { /* config_validate lets only addresses and localhost through */
        snprintf(err, cap, "listen tcp %s:%d: cannot bind a host name", u->host, u->port);
        return -EINVAL;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    const char *step = "bind";
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || (step = "listen", listen(fd, 511)) != 0) {
        int e = errno;
        /* Go's words: "listen tcp 127.0.0.1:2379: bind: address already in use" */
        snprintf(err, cap, "listen tcp %s%s%s:%d: %s: %s", v6 ? "[" : "", u->host, v6 ? "]" : "",
                 u->port, step, go_strerror(e, why, sizeof(why)));
        close(fd);
        return -e;
    }
    *out = fd;
    return 0;
}

void server_listeners_close(struct server *s)
{
    if (s->peer_fd >= 0)
        close(s->peer_fd);
    s->peer_fd = -1;
    for (size_t i = 0; i < s->n_client_fds; i++) {
        if (s->client_fds[i] < 0)
            continue;
        close(s->client_fds[i]);
        s->client_fds[i] = -1;
        if (s->cfg.listen_client[i].unix_sock)
            unlink(s->cfg.listen_client[i].host);
    }
}

int server_listen(struct server *s, char *err, size_t cap)
{
    const struct config *c = &s->cfg;
    s->peer_fd = -1;
    for (size_t i = 0; i < CONFIG_MAX_URLS; i++)
        s->client_fds[i] = -1;
    /* the peer port first, as etcd's configurePeerListeners; the
     * transport serves the first --listen-peer-urls */
    int rv = 0;
    if (c->n_listen_peer > 0 && (rv = server_listen_fd(&c->listen_peer[0], &s->peer_fd, err, cap)))
        return rv;
    for (size_t i = 0; i < c->n_listen_client; i++) {
        if ((rv = server_listen_fd(&c->listen_client[i], &s->client_fds[i], err, cap)) != 0) {
            s->n_client_fds = i;
            server_listeners_close(s);
            return rv;
        }
    }
    s->n_client_fds = c->n_listen_client;
    return 0;
}

/* ---- resolving names before the loop runs ---- */

struct resolver {
    uint64_t deadline_ms;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* resolve_blocking: getaddrinfo, the first IPv4 address (Go's "tcp"
 * resolver's choice), retried every second until the deadline as etcd's
 * resolveURL retries. Runs before the loop does. */
static int resolve_blocking(const char *name, char *addr, size_t cap, char *why, size_t whycap,
                            void *arg)
{
    struct resolver *r = arg;
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(name, NULL, &hints, &res);
        const struct addrinfo *pick = NULL;
        for (const struct addrinfo *a = res; rc == 0 && a != NULL; a = a->ai_next)
            if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
                (pick == NULL || (pick->ai_family == AF_INET6 && a->ai_family == AF_INET)))
                pick = a;
        if (pick != NULL) {
            const void *p = pick->ai_family == AF_INET
                                ? (const void *)&((const struct sockaddr_in *)pick->ai_addr)->sin_addr
                                : (const void *)&((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr;
            inet_ntop(pick->ai_family, p, addr, (socklen_t)cap);
            freeaddrinfo(res);
            return 0;
        }
        if (res != NULL)
            freeaddrinfo(res);
        if (rc == EAI_NONAME || rc == 0)
            snprintf(why, whycap, "lookup %s: no such host", name);
        else
            snprintf(why, whycap, "lookup %s: %s", name, gai_strerror(rc));
        if (now_ms() >= r->deadline_ms)
            return -ENOENT;
        log_warn("server", "failed to resolve URL host %s (%s); retrying in 1s", name, why);
        sleep(1);
    }
}

/* ---- 4. a joining member asks the cluster who it is ---- */

struct fetch_result {
    bool done;
    int status;
    uint64_t cluster_id;
    struct buf list;
    char err[400];
};

static void on_members(int status, uint64_t cid, const uint8_t *list, size_t len, const char *err,
                       void *arg)
{
    struct fetch_result *f = arg;
    f->done = true;
    f->status = status;
    f->cluster_id = cid;
    if (status == 0 && buf_append(&f->list, list, len) != 0)
        f->status = -ENOMEM;
    snprintf(f->err, sizeof(f->err), "%s", err ? err : "");
}

/* unpack_members turns a member list (a packed MemberListResponse) into
 * config_remote_member entries; the count, or -EINVAL. */
static int unpack_members(const struct buf *b, struct config_remote_member *out, size_t max,
                          uint64_t *cluster_id)
{
    Etcdserverpb__MemberListResponse *r =
        etcdserverpb__member_list_response__unpack(NULL, b->len, b->data);
    if (r == NULL)
        return -EINVAL;
    if (r->header != NULL && r->header->cluster_id != 0)
        *cluster_id = r->header->cluster_id;
    size_t n = 0;
    for (size_t i = 0; i < r->n_members && n < max; i++) {
        const Etcdserverpb__Member *m = r->members[i];
        struct config_remote_member *o = &out[n++];
        memset(o, 0, sizeof(*o));
        o->id = m->id;
        o->learner = m->islearner;
        snprintf(o->name, sizeof(o->name), "%s", m->name ? m->name : "");
        for (size_t k = 0; k < m->n_peerurls && o->n_peer < CONFIG_MAX_URLS; k++)
            snprintf(o->peer[o->n_peer++], sizeof(o->peer[0]), "%s", m->peerurls[k]);
        for (size_t k = 0; k < m->n_clienturls && o->n_client < CONFIG_MAX_URLS; k++)
            snprintf(o->client[o->n_client++], sizeof(o->client[0]), "%s", m->clienturls[k]);
    }
    int rv = r->n_members > max ? -E2BIG : (int)n;
    etcdserverpb__member_list_response__free_unpacked(r, NULL);
    return rv;
}

static int cmp_url_text(const void *a, const void *b)
{
    return strcmp(((const struct url *)a)->text, ((const struct url *)b)->text);
}

/* fetch_cluster: etcd's GetClusterFromRemotePeers, over the peer URLs of
 * the other members of --initial-cluster, sorted, one try each (10 s), on
 * a loop of its own (the member's loop does not run yet). */
static int fetch_cluster(struct server *s, struct config_remote_member *ms, size_t max, size_t *n,
                         uint64_t *cluster_id, char *err, size_t cap)
{
    const struct config *c = &s->cfg;
    struct url urls[CONFIG_MAX_MEMBERS * CONFIG_MAX_URLS];
    size_t nu = 0;
    for (size_t i = 0; i < c->n_initial_cluster; i++)
        if (strcmp(c->initial_cluster[i].name, c->name) != 0)
            for (size_t k = 0; k < c->initial_cluster[i].n_peer_urls; k++)
                urls[nu++] = c->initial_cluster[i].peer_urls[k];
    qsort(urls, nu, sizeof(urls[0]), cmp_url_text);
    uv_loop_t loop;
    int rv = uv_loop_init(&loop);
    if (rv != 0)
        return rv;
    bool empty = false;
    rv = -ENOENT;
    for (size_t i = 0; i < nu && rv != 0 && !empty; i++) {
        struct fetch_result f = {0};
        int frv = transport_fetch_members(&loop, urls[i].host, urls[i].port,
                                          urls[i].tls ? s->tls.peer_client : NULL,
                                          FETCH_TIMEOUT_MS, on_members, &f);
        if (frv == 0)
            uv_run(&loop, UV_RUN_DEFAULT); /* until the exchange and its handles end */
        else
            snprintf(f.err, sizeof(f.err), "%s", uv_strerror(frv));
        if (frv == 0 && f.status == 0) {
            int k = unpack_members(&f.list, ms, max, cluster_id);
            if (k > 0) {
                if (*cluster_id == 0)
                    *cluster_id = f.cluster_id;
                *n = (size_t)k;
                rv = 0;
            } else if (k == 0) {
                empty = true;
            } else {
                log_warn("server", "could not get cluster response from %s: a member list that "
                                   "cannot be read",
                         urls[i].text);
            }
        } else {
            log_warn("server", "could not get cluster response from %s: %s", urls[i].text, f.err);
        }
        buf_free(&f.list);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (rv != 0)
        snprintf(err, cap, "cannot fetch cluster info from peer urls: %s",
                 empty ? "failed to get raft cluster member(s) from the given URLs"
                       : "could not retrieve cluster information from the given URLs");
    return rv;
}

/* ---- 5. the member directory, built aside ---- */

/* put_remote_members records the members a joining member was told of
 * (ids, names, URLs): its peers until the leader's log or snapshot says
 * more (in the open batch). */
static int put_remote_members(struct server *s, const struct config_remote_member *ms, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct member_info mi = {.id = ms[i].id};
        snprintf(mi.name, sizeof(mi.name), "%s", ms[i].name);
        for (size_t k = 0; k < ms[i].n_peer; k++)
            snprintf(mi.peer[mi.n_peer++], sizeof(mi.peer[0]), "%s", ms[i].peer[k]);
        for (size_t k = 0; k < ms[i].n_client; k++)
            snprintf(mi.client[mi.n_client++], sizeof(mi.client[0]), "%s", ms[i].client[k]);
        int rv = server_member_put(s, &mi);
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* build_member writes the store's part (members, consistent index) in
 * |dbdir| and the log in <stage>/member/wal. */
static int build_member(struct server *s, const char *stage, const char *dbdir, bool join,
                        const uint64_t *ids, uint64_t member_id, uint64_t cluster_id,
                        const struct config_remote_member *ms, size_t nms, char *err, size_t cap)
{
    const struct config *c = &s->cfg;
    int rv = fs_mkdir_p(dbdir);
    if (rv != 0) {
        snprintf(err, cap, "cannot create %s: %s", dbdir, strerror(-rv));
        return rv;
    }
    struct backend_options bo = {.dir = dbdir, .map_size = 0};
    backend *be = NULL;
    if ((rv = backend_open(&bo, &be)) != 0) {
        snprintf(err, cap, "cannot open the store in %s: %s", dbdir, q_strerror(rv));
        return rv;
    }
    s->be = be; /* for members.c, until closed below */
    if ((rv = backend_batch_begin(be)) == 0) {
        /* the members (a restored store's are cleared); the consistent
         * index the log's first entry leaves (1 for a new member's
         * bootstrap entry, 0 for a joining member that has nothing) */
        rv = server_members_clear(s);
        if (rv == 0)
            rv = join ? put_remote_members(s, ms, nms) : server_members_bootstrap(s, ids);
        if (rv == 0)
            rv = backend_meta_put(be, "consistent_index", join ? 0 : 1);
        if (rv == 0)
            rv = backend_batch_commit(be);
        else
            backend_batch_abort(be);
    }
    backend_close(be);
    s->be = NULL;
    if (rv != 0) {
        snprintf(err, cap, "cannot write the store in %s: %s", dbdir, q_strerror(rv));
        return rv;
    }
    struct wal_options wo = {.data_dir = stage, .node_id = member_id, .cluster_id = cluster_id};
    struct wal *w = NULL;
    char werr[WAL_ERR_LEN] = "";
    if ((rv = wal_create(&wo, &w, werr, sizeof(werr))) != 0) {
        snprintf(err, cap, "cannot create the log: %s", werr[0] ? werr : q_strerror(rv));
        return rv;
    }
    if (!join) {
        /* what the Raft core of a new member persists first (raft_new with
         * a bootstrap membership): the initial membership, committed, at
         * index 1, term 1 */
        struct raft_membership boot = {0};
        for (size_t i = 0; i < c->n_initial_cluster && i < RAFT_MAX_MEMBERS; i++)
            boot.voters[boot.n_voters++] = ids[i];
        uint8_t buf[8 * (2 + 2 * RAFT_MAX_MEMBERS)];
        size_t len = raft_membership_encode(&boot, buf);
        struct raft_entry e = {.term = 1, .index = 1, .type = RAFT_ENTRY_CONF, .data = buf, .len = len};
        struct raft_hard_state hs = {.term = 1, .vote = 0, .commit = 1};
        if ((rv = wal_save(w, &hs, &e, 1)) == 0)
            rv = wal_sync(w);
        if (rv != 0)
            snprintf(err, cap, "cannot write the log: %s", q_strerror(rv));
    }
    wal_close(w);
    return rv;
}

int server_bootstrap(struct server *s, char *err, size_t cap)
{
    const struct config *c = &s->cfg;
    int rv;
    if (c->discovery_srv[0] != '\0') {
        /* --discovery-srv: the initial cluster comes from DNS (srv.h);
         * the SRV targets are resolved once, without etcd's retries for
         * --initial-cluster hosts (as its net.ResolveTCPAddr) */
        struct resolver once = {.deadline_ms = 0};
        if ((rv = srv_cluster(&s->cfg, srv_lookup, resolve_blocking, &once, err, cap)) != 0)
            return rv;
    }
    rv = config_check_cluster(c, err, cap);
    if (rv != 0)
        return rv;
    bool join = strcmp(c->initial_cluster_state, "existing") == 0;
    struct resolver r = {.deadline_ms = now_ms() + RESOLVE_TIMEOUT_MS};
    uint64_t ids[CONFIG_MAX_MEMBERS] = {0}, cluster_id = 0;
    static struct config_remote_member ms[CONFIG_MAX_MEMBERS];
    size_t nms = 0;
    if (!join) {
        if ((rv = config_advertise_matches(c, resolve_blocking, &r, err, cap)) != 0)
            return rv;
        for (size_t i = 0; i < c->n_initial_cluster; i++) {
            const char *urls[CONFIG_MAX_URLS];
            for (size_t k = 0; k < c->initial_cluster[i].n_peer_urls; k++)
                urls[k] = c->initial_cluster[i].peer_urls[k].text;
            ids[i] = server_member_id(urls, c->initial_cluster[i].n_peer_urls,
                                      c->initial_cluster_token);
        }
        cluster_id = server_cluster_id(ids, c->n_initial_cluster);
    } else {
        if ((rv = fetch_cluster(s, ms, CONFIG_MAX_MEMBERS, &nms, &cluster_id, err, cap)) != 0)
            return rv;
        if ((rv = config_assign_ids(c, ms, nms, cluster_id, resolve_blocking, &r, ids, err,
                                    cap)) != 0)
            return rv;
    }
    uint64_t member_id = 0;
    for (size_t i = 0; i < c->n_initial_cluster; i++)
        if (strcmp(c->initial_cluster[i].name, c->name) == 0)
            member_id = ids[i];

    /* everything checked: create */
    char stage[1100], member[1100], dbdir[1200], path[1200];
    bool made_dir = access(c->data_dir, F_OK) != 0;
    if ((rv = fs_mkdir_p(c->data_dir)) != 0) {
        snprintf(err, cap, "cannot access data directory: mkdir %s: %s", c->data_dir,
                 strerror(-rv));
        return rv;
    }
    snprintf(stage, sizeof(stage), "%s/" STAGE, c->data_dir);
    snprintf(member, sizeof(member), "%s/member", c->data_dir);
    fs_remove_tree(stage); /* what a start that died while building left */
    bool restored = access(member, F_OK) == 0; /* a store, no log */
    if (restored)
        snprintf(dbdir, sizeof(dbdir), "%s/db", member);
    else
        snprintf(dbdir, sizeof(dbdir), "%s/member/db", stage);
    rv = build_member(s, stage, dbdir, join, ids, member_id, cluster_id, ms, nms, err, cap);
    if (rv == 0) {
        /* the member appears whole, or not at all */
        char from[1200];
        snprintf(from, sizeof(from), "%s/member%s", stage, restored ? "/wal" : "");
        snprintf(path, sizeof(path), "%s%s", member, restored ? "/wal" : "");
        if (rename(from, path) != 0) {
            rv = -errno;
            snprintf(err, cap, "cannot rename %s to %s: %s", from, path, strerror(errno));
        } else if ((rv = fs_fsync_dir(restored ? member : c->data_dir)) != 0) {
            snprintf(err, cap, "cannot sync %s: %s", restored ? member : c->data_dir,
                     strerror(-rv));
        }
    }
    fs_remove_tree(stage);
    if (rv != 0 && made_dir)
        rmdir(c->data_dir);
    if (rv == 0) {
        s->boot = join ? SERVER_BOOT_JOIN : SERVER_BOOT_NEW;
        for (size_t i = 0; i < c->n_initial_cluster; i++)
            s->initial_ids[i] = ids[i];
        s->have_initial_ids = true;
    }
    return rv;
}
