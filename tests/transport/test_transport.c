/* tests/transport/test_transport.c: peer links (src/transport/transport.c)
 * over real TCP on 127.0.0.1. Each test runs its own uv loop; waits are
 * bounded by a generous deadline (a hung link fails the test, nothing is
 * asserted about how fast things are). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "transport/transport.h"

#define CLUSTER 0xcdf818194e3a8c32ULL
#define MAXN 4
#define DEADLINE_MS 60000

/* ---- one member under test ---- */

struct node {
    uv_loop_t *loop;
    struct transport *t;
    uint64_t id;
    int port;
    char dir[64];
    /* received, per sender id */
    uint64_t got[MAXN + 1];
    uint64_t last[MAXN + 1];
    bool strict; /* every message in order, no gaps */
    int rejected;
    char reject_reason[256];
    uint64_t rejected_id;
    int snaps;
    uint64_t snap_index, snap_size;
    uint32_t snap_crc;
    int sent_ok, sent_fail;
    bool closed;
    bool close_on_message; /* transport_close from inside on_message */
};

static const uint8_t ordered_types[] = {
    RAFT_MSG_APP,        RAFT_MSG_APP_RESP,        RAFT_MSG_VOTE,
    RAFT_MSG_VOTE_RESP,  RAFT_MSG_PRE_VOTE,        RAFT_MSG_PRE_VOTE_RESP,
    RAFT_MSG_HEARTBEAT,  RAFT_MSG_HEARTBEAT_RESP,  RAFT_MSG_TIMEOUT_NOW,
    RAFT_MSG_READ_INDEX, RAFT_MSG_READ_INDEX_RESP,
};
#define NTYPES (sizeof(ordered_types) / sizeof(ordered_types[0]))

struct genbuf {
    struct raft_entry ents[4];
    char data[4][48];
};

/* gen builds message number |seq| from |from| to |to|: every field is a
 * function of seq, so the receiver can check the whole content. */
static struct raft_msg gen(uint64_t from, uint64_t to, uint64_t seq, struct genbuf *g)
{
    struct raft_msg m;
    memset(&m, 0, sizeof(m));
    m.type = ordered_types[seq % NTYPES];
    m.from = from;
    m.to = to;
    m.term = seq * 3 + 1;
    m.log_term = seq;
    m.index = seq;
    m.commit = seq / 2;
    m.reject_hint = seq ^ 0x55;
    m.ctx = seq * 7919;
    m.reject = seq % 3 == 0;
    m.force = seq % 5 == 0;
    if (m.type == RAFT_MSG_APP) {
        m.n_entries = seq % 5;
        for (size_t k = 0; k < m.n_entries; k++) {
            int n = snprintf(g->data[k], sizeof(g->data[k]), "entry %llu/%zu from %llu",
                             (unsigned long long)seq, k, (unsigned long long)from);
            g->ents[k] = (struct raft_entry){.term = seq,
                                             .index = seq * 10 + k,
                                             .type = (uint8_t)(k % 2),
                                             .data = g->data[k],
                                             .len = (size_t)n};
        }
        m.entries = g->ents;
    }
    return m;
}

static void check_msg(const struct raft_msg *m)
{
    struct genbuf g;
    struct raft_msg e = gen(m->from, m->to, m->index, &g);
    cr_assert_eq(m->type, e.type);
    cr_assert_eq(m->term, e.term);
    cr_assert_eq(m->log_term, e.log_term);
    cr_assert_eq(m->commit, e.commit);
    cr_assert_eq(m->reject_hint, e.reject_hint);
    cr_assert_eq(m->ctx, e.ctx);
    cr_assert_eq(m->reject, e.reject);
    cr_assert_eq(m->force, e.force);
    cr_assert_eq(m->n_entries, e.n_entries);
    cr_assert_null(m->snapshot);
    for (size_t k = 0; k < e.n_entries; k++) {
        cr_assert_eq(m->entries[k].term, e.entries[k].term);
        cr_assert_eq(m->entries[k].index, e.entries[k].index);
        cr_assert_eq(m->entries[k].type, e.entries[k].type);
        cr_assert_eq(m->entries[k].len, e.entries[k].len);
        cr_assert_eq(memcmp(m->entries[k].data, e.entries[k].data, e.entries[k].len), 0);
    }
}

static void closed_cb(void *arg);

static void on_message(const struct raft_msg *m, void *arg)
{
    struct node *n = arg;
    if (n->close_on_message) {
        cr_assert_not_null(n->t, "no callback after transport_close");
        transport_close(n->t, closed_cb, n);
        n->t = NULL;
    }
    cr_assert_eq(m->to, n->id);
    cr_assert(m->from >= 1 && m->from <= MAXN);
    check_msg(m);
    /* in order per link: exactly the next one, or (after a lost
     * connection) a later one, never an earlier one or a duplicate */
    if (n->strict)
        cr_assert_eq(m->index, n->got[m->from], "from %llu: got seq %llu, want %llu",
                     (unsigned long long)m->from, (unsigned long long)m->index,
                     (unsigned long long)n->got[m->from]);
    else if (n->got[m->from] > 0)
        cr_assert_gt(m->index, n->last[m->from]);
    n->last[m->from] = m->index;
    n->got[m->from]++;
}

static void on_rejected(uint64_t id, const char *reason, void *arg)
{
    struct node *n = arg;
    n->rejected++;
    n->rejected_id = id;
    snprintf(n->reject_reason, sizeof(n->reject_reason), "%s", reason);
}

static void on_snapshot(const struct raft_msg *m, const char *path, void *arg)
{
    struct node *n = arg;
    cr_assert_eq(m->type, RAFT_MSG_SNAP);
    cr_assert_not_null(m->snapshot);
    n->snaps++;
    n->snap_index = m->snapshot->index;
    n->snap_size = m->snapshot->len;
    cr_assert_eq(m->snapshot->conf.n_voters, 3);
    cr_assert_eq(m->snapshot->conf.voters[2], 3);
    cr_assert_eq(m->snapshot->conf.n_learners, 1);
    cr_assert_eq(m->snapshot->conf.learners[0], 4);
    /* the file is ours now: check it, then remove it */
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static uint8_t b[1 << 16];
    size_t k, total = 0;
    uint32_t crc = 0;
    while ((k = fread(b, 1, sizeof(b), f)) > 0) {
        crc = crc32c_update(crc, b, k);
        total += k;
    }
    fclose(f);
    cr_assert_eq(total, m->snapshot->len);
    n->snap_crc = crc;
    unlink(path);
}

static void on_snapshot_sent(uint64_t to, bool ok, void *arg)
{
    struct node *n = arg;
    if (ok)
        n->sent_ok++;
    else
        n->sent_fail++;
}

static struct transport_options node_opts(struct node *n, uint64_t cluster)
{
    struct transport_options o;
    memset(&o, 0, sizeof(o));
    o.id = n->id;
    o.cluster_id = cluster;
    o.snap_dir = n->dir;
    o.cb.on_message = on_message;
    o.cb.on_snapshot = on_snapshot;
    o.cb.on_snapshot_sent = on_snapshot_sent;
    o.cb.on_peer_rejected = on_rejected;
    o.arg = n;
    return o;
}

/* node_start creates the transport and listens on n->port (0: any). */
static void node_start_opts(struct node *n, const struct transport_options *o)
{
    n->closed = false;
    cr_assert_eq(transport_new(n->loop, o, &n->t), 0);
    int port = 0;
    cr_assert_eq(transport_listen(n->t, "127.0.0.1", n->port, &port), 0);
    cr_assert_gt(port, 0);
    n->port = port;
}

static void node_init(struct node *n, uv_loop_t *loop, uint64_t id)
{
    memset(n, 0, sizeof(*n));
    n->loop = loop;
    n->id = id;
    n->strict = true;
    snprintf(n->dir, sizeof(n->dir), "/tmp/qtransport-XXXXXX");
    cr_assert_not_null(mkdtemp(n->dir));
}

static void node_start(struct node *n, uint64_t cluster)
{
    struct transport_options o = node_opts(n, cluster);
    node_start_opts(n, &o);
}

static void closed_cb(void *arg)
{
    ((struct node *)arg)->closed = true;
}

/* ---- running the loop ---- */

struct waiter {
    bool (*pred)(void *);
    void *arg;
    uint64_t deadline;
    bool ok;
};

static void wait_tick(uv_timer_t *h)
{
    struct waiter *w = h->data;
    if (w->pred(w->arg)) {
        w->ok = true;
        uv_stop(h->loop);
    } else if (uv_now(h->loop) >= w->deadline) {
        uv_stop(h->loop);
    }
}

/* run_until runs |loop| until |pred| holds (true) or |ms| passed (false). */
static bool run_until(uv_loop_t *loop, bool (*pred)(void *), void *arg, unsigned ms)
{
    uv_timer_t tm;
    struct waiter w = {pred, arg, uv_now(loop) + ms, false};
    uv_timer_init(loop, &tm);
    tm.data = &w;
    uv_timer_start(&tm, wait_tick, 2, 2);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&tm, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return w.ok;
}

static bool never(void *arg)
{
    return false;
}

static bool node_closed(void *arg)
{
    return ((struct node *)arg)->closed;
}

static void node_stop(struct node *n)
{
    if (n->t == NULL)
        return;
    transport_close(n->t, closed_cb, n);
    n->t = NULL;
    cr_assert(run_until(n->loop, node_closed, n, DEADLINE_MS));
}

static void dir_remove(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *de;
    char f[512];
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
        unlink(f);
    }
    closedir(d);
    rmdir(path);
}

static int dir_count(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    if (d != NULL)
        closedir(d);
    return n;
}

static void loop_finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_NOWAIT);
    /* every handle the transports opened is closed */
    cr_assert_eq(uv_loop_close(loop), 0);
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
}

static void send_seq(struct node *from, uint64_t to, uint64_t seq)
{
    struct genbuf g;
    struct raft_msg m = gen(from->id, to, seq, &g);
    cr_assert_eq(transport_send(from->t, &m), 0);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* ---- tests ---- */

#define PER_LINK 4000

struct mesh {
    struct node *n;
    int count;
    uint64_t want;
};

static bool mesh_done(void *arg)
{
    struct mesh *m = arg;
    for (int i = 0; i < m->count; i++)
        for (int j = 0; j < m->count; j++)
            if (i != j && m->n[i].got[m->n[j].id] < m->want)
                return false;
    return true;
}

Test(transport, three_members_exchange_thousands_in_order, .init = setup, .timeout = 120)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node n[3];
    for (int i = 0; i < 3; i++) {
        node_init(&n[i], &loop, (uint64_t)i + 1);
        node_start(&n[i], CLUSTER);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (i != j)
                cr_assert_eq(transport_add_peer(n[i].t, n[j].id, "127.0.0.1", n[j].port), 0);
    /* first half before any connection exists (queued, lazy connect) */
    for (uint64_t s = 0; s < PER_LINK / 2; s++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                if (i != j)
                    send_seq(&n[i], n[j].id, s);
    struct mesh m = {n, 3, 1};
    cr_assert(run_until(&loop, mesh_done, &m, DEADLINE_MS));
    /* the rest in batches across loop passes, over live connections */
    for (uint64_t s = PER_LINK / 2; s < PER_LINK; s += 250) {
        for (uint64_t k = s; k < s + 250; k++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    if (i != j)
                        send_seq(&n[i], n[j].id, k);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    m.want = PER_LINK;
    cr_assert(run_until(&loop, mesh_done, &m, DEADLINE_MS));
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            if (i == j)
                continue;
            cr_assert_eq(n[i].got[n[j].id], PER_LINK);
            struct transport_peer_stats st;
            cr_assert_eq(transport_peer_stats(n[i].t, n[j].id, &st), 0);
            cr_assert_eq(st.dropped, 0);
            cr_assert_eq(st.sent, PER_LINK);
            cr_assert_eq(st.queued, 0);
            cr_assert(st.connected);
            cr_assert_eq(st.connects, 1);
            /* coalesced: far fewer writes than messages */
            cr_assert_lt(st.writes, PER_LINK / 10);
        }
    }
    cr_assert_eq(transport_peer_stats(n[0].t, 99, &(struct transport_peer_stats){0}), -ENOENT);
    for (int i = 0; i < 3; i++) {
        node_stop(&n[i]);
        dir_remove(n[i].dir);
    }
    loop_finish(&loop);
}

struct want1 {
    struct node *n;
    uint64_t from, want;
};

static bool got_enough(void *arg)
{
    struct want1 *w = arg;
    return w->n->got[w->from] >= w->want;
}

Test(transport, peer_down_at_first_is_reached_later, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    b.port = free_port();
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    for (uint64_t s = 0; s < 100; s++)
        send_seq(&a, 2, s);
    /* nobody listens: connects fail and back off; the queue waits */
    run_until(&loop, never, NULL, 700);
    struct transport_peer_stats st;
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_eq(st.connects, 0);
    cr_assert_eq(st.queued, 100);
    /* backoff: attempts at about 0, 100, 300 ms (then 700): timers never
     * fire early, so more than 4 would mean no exponential backoff */
    cr_assert_geq(st.dials, 1);
    cr_assert_leq(st.dials, 4, "dials %llu", (unsigned long long)st.dials);
    node_start(&b, CLUSTER);
    struct want1 w = {&b, 1, 100};
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_eq(st.connects, 1);
    cr_assert_eq(st.dropped, 0);
    /* the 100 queued messages went out coalesced in one write */
    cr_assert_eq(st.writes, 1);
    cr_assert_eq(st.sent, 100);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

/* A sender that keeps sending a batch every few milliseconds. */
struct pump {
    struct node *from;
    uint64_t to, seq;
    uv_timer_t tm;
};

static void pump_tick(uv_timer_t *h)
{
    struct pump *p = h->data;
    for (int k = 0; k < 50; k++)
        send_seq(p->from, p->to, p->seq++);
}

Test(transport, connection_killed_mid_stream_recovers, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    b.strict = false; /* messages in flight at the kill are lost */
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    struct pump p = {.from = &a, .to = 2};
    uv_timer_init(&loop, &p.tm);
    p.tm.data = &p;
    uv_timer_start(&p.tm, pump_tick, 1, 3);
    struct want1 w = {&b, 1, 2000};
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    for (int round = 0; round < 3; round++) {
        /* kill the receiver mid-stream and start it again on its port */
        uint64_t before = b.got[1];
        node_stop(&b);
        node_start(&b, CLUSTER);
        w.want = before + 2000;
        cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS), "round %d", round);
    }
    struct transport_peer_stats st;
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_geq(st.connects, 4);
    uv_close((uv_handle_t *)&p.tm, NULL);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

/* Captures stderr (where base/log writes) into a file for inspection. */
struct capture {
    int saved;
    char path[64];
};

static void capture_start(struct capture *c)
{
    snprintf(c->path, sizeof(c->path), "/tmp/qtransport-log-XXXXXX");
    int fd = mkstemp(c->path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    c->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(struct capture *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    FILE *f = fopen(c->path, "rb");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(c->path);
    fputs(text, stderr);
    return text;
}

static bool rejected(void *arg)
{
    return ((struct node *)arg)->rejected > 0;
}

Test(transport, cluster_id_mismatch_is_refused_on_both_sides, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 0x8e9e05c52164694dULL);
    node_init(&b, &loop, 2);
    node_start(&a, 0x1234);
    node_start(&b, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    struct capture cap;
    capture_start(&cap);
    struct genbuf g;
    struct raft_msg m = gen(a.id, 2, 0, &g);
    cr_assert_eq(transport_send(a.t, &m), 0);
    bool ok = run_until(&loop, rejected, &a, DEADLINE_MS);
    char *log = capture_end(&cap);
    cr_assert(ok);
    cr_assert_eq(a.rejected_id, 2);
    cr_assert_str_eq(a.reject_reason, "cluster ID mismatch (local cdf818194e3a8c32, remote 1234)");
    /* the listener's log names the sender and the reason */
    cr_assert_not_null(strstr(log, "rejected connection from member 8e9e05c52164694d: "
                                   "cluster ID mismatch (local cdf818194e3a8c32, remote 1234)"),
                       "%s", log);
    /* the sender's log too */
    cr_assert_not_null(strstr(log, "member 2 rejected our connection: cluster ID mismatch"), "%s",
                       log);
    cr_assert_eq(b.got[1], 0);
    struct transport_peer_stats st;
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_geq(st.rejections, 1);
    cr_assert_eq(st.connects, 0);
    cr_assert_eq(st.dropped, 1);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

static uint64_t learned_cid;

static void on_cid(uint64_t cid, void *arg)
{
    (void)arg;
    learned_cid = cid;
}

static bool b_got_two(void *arg)
{
    return ((struct node *)arg)->got[1] >= 2;
}

/* A joining member (cluster id 0) adopts the id of the first peer that
 * connects addressed to it, and refuses other clusters from then on. */
Test(transport, joining_member_learns_cluster_id, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b, c;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_init(&c, &loop, 3);
    node_start(&a, CLUSTER);
    struct transport_options o = node_opts(&b, 0);
    o.cb.on_cluster_id = on_cid;
    learned_cid = 0;
    node_start_opts(&b, &o);
    node_start(&c, 0x77);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    struct genbuf g;
    struct raft_msg m = gen(1, 2, 0, &g);
    cr_assert_eq(transport_send(a.t, &m), 0);
    m = gen(1, 2, 1, &g);
    cr_assert_eq(transport_send(a.t, &m), 0);
    cr_assert(run_until(&loop, b_got_two, &b, DEADLINE_MS));
    cr_assert_eq(learned_cid, CLUSTER);
    /* another cluster is refused now */
    cr_assert_eq(transport_add_peer(c.t, 2, "127.0.0.1", b.port), 0);
    m = gen(3, 2, 0, &g);
    cr_assert_eq(transport_send(c.t, &m), 0);
    cr_assert(run_until(&loop, rejected, &c, DEADLINE_MS));
    cr_assert_eq(c.rejected_id, 2);
    cr_assert_eq(b.got[3], 0);
    node_stop(&a);
    node_stop(&b);
    node_stop(&c);
    dir_remove(a.dir);
    dir_remove(b.dir);
    dir_remove(c.dir);
    loop_finish(&loop);
}

Test(transport, wrong_member_id_is_refused, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    /* a thinks member 3 lives at b's address */
    cr_assert_eq(transport_add_peer(a.t, 3, "127.0.0.1", b.port), 0);
    struct genbuf g;
    struct raft_msg m = gen(1, 3, 0, &g);
    cr_assert_eq(transport_send(a.t, &m), 0);
    cr_assert(run_until(&loop, rejected, &a, DEADLINE_MS));
    cr_assert_eq(a.rejected_id, 3);
    cr_assert_str_eq(a.reject_reason, "member ID mismatch (local 2, remote expects 3)");
    /* fixing the address makes the link work */
    cr_assert_eq(transport_remove_peer(a.t, 3), 0);
    cr_assert_eq(transport_remove_peer(a.t, 3), -ENOENT);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", 1), 0);
    cr_assert_eq(transport_update_peer(a.t, 2, "127.0.0.1", b.port), 0);
    send_seq(&a, 2, 0);
    struct want1 w = {&b, 1, 1};
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

/* A new address for a peer whose link is up leaves the link up (the peer
 * listens at the old one until it restarts). */
Test(transport, update_keeps_a_live_link, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    send_seq(&a, 2, 0);
    struct want1 w = {&b, 1, 1};
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    cr_assert_eq(transport_update_peer(a.t, 2, "127.0.0.1", 1), 0); /* nobody there */
    for (uint64_t k = 1; k < 50; k++)
        send_seq(&a, 2, k);
    w.want = 50;
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    struct transport_peer_stats st;
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_eq(st.dials, 1, "redialled (%llu dials)", (unsigned long long)st.dials);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

Test(transport, full_queue_drops_instead_of_growing, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    struct transport_options o = node_opts(&a, CLUSTER);
    o.max_queue_msgs = 100;
    node_start_opts(&a, &o);
    b.port = free_port();
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    for (uint64_t s = 0; s < 1000; s++)
        send_seq(&a, 2, s);
    struct transport_peer_stats st;
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_eq(st.queued, 100);
    cr_assert_eq(st.dropped, 900);
    /* the peer comes up: exactly the first 100 arrive, in order */
    node_start(&b, CLUSTER);
    struct want1 w = {&b, 1, 100};
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    run_until(&loop, never, NULL, 100);
    cr_assert_eq(b.got[1], 100);
    cr_assert_eq(b.last[1], 99);
    node_stop(&a);

    /* the byte bound: 1 KiB entries against a 10 KiB queue */
    o.max_queue_msgs = 0;
    o.max_queue_bytes = 10 * 1024;
    node_start_opts(&a, &o);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", free_port()), 0);
    static char big[1024];
    struct raft_entry e = {.term = 1, .index = 1, .data = big, .len = sizeof(big)};
    struct raft_msg m = {.type = RAFT_MSG_APP, .from = 1, .to = 2, .entries = &e, .n_entries = 1};
    for (int i = 0; i < 100; i++)
        cr_assert_eq(transport_send(a.t, &m), 0);
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_leq(st.queued_bytes, 10 * 1024);
    cr_assert_eq(st.queued, 9);
    cr_assert_eq(st.dropped, 91);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

/* ---- snapshots ---- */

#define SNAP_SIZE (50u << 20)

static uint8_t snap_byte(uint64_t off)
{
    uint64_t x = off * 0x9e3779b97f4a7c15ULL;
    return (uint8_t)(x >> 56);
}

static int gen_read(void *rarg, uint64_t off, void *dst, size_t len)
{
    int *calls = rarg;
    (*calls)++;
    uint8_t *d = dst;
    for (size_t i = 0; i < len; i++)
        d[i] = snap_byte(off + i);
    return 0;
}

static void gen_release(void *rarg)
{
    int *calls = rarg;
    *calls = -*calls; /* marks the release */
}

static uint32_t gen_crc(uint64_t size)
{
    static uint8_t b[1 << 16];
    uint32_t crc = 0;
    for (uint64_t off = 0; off < size; off += sizeof(b)) {
        size_t n = size - off < sizeof(b) ? (size_t)(size - off) : sizeof(b);
        gen_read(&(int){0}, off, b, n);
        crc = crc32c_update(crc, b, n);
    }
    return crc;
}

static struct raft_snapshot snap_meta(uint64_t index)
{
    struct raft_snapshot s;
    memset(&s, 0, sizeof(s));
    s.index = index;
    s.term = 3;
    s.conf.n_voters = 3;
    s.conf.voters[0] = 1;
    s.conf.voters[1] = 2;
    s.conf.voters[2] = 3;
    s.conf.n_learners = 1;
    s.conf.learners[0] = 4;
    return s;
}

struct snapwait {
    struct node *sender;
    int sent;
};

static bool snap_reported(void *arg)
{
    struct snapwait *w = arg;
    return w->sender->sent_ok + w->sender->sent_fail >= w->sent;
}

Test(transport, big_snapshot_streams_with_crc, .init = setup, .timeout = 120)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    struct raft_snapshot s = snap_meta(1000);
    struct raft_msg m = {.type = RAFT_MSG_SNAP, .from = 1, .to = 2, .term = 3, .snapshot = &s};
    int calls = 0;
    struct transport_snap_reader r = {SNAP_SIZE, gen_read, gen_release, &calls};
    cr_assert_eq(transport_send_snapshot(a.t, &m, NULL, &r), 0);
    cr_assert_eq(transport_send_snapshot(a.t, &m, NULL, &r), -EBUSY);
    /* heartbeats keep flowing on the message link meanwhile */
    for (uint64_t k = 0; k < 10; k++)
        send_seq(&a, 2, k);
    struct snapwait w = {&a, 1};
    cr_assert(run_until(&loop, snap_reported, &w, DEADLINE_MS));
    cr_assert_eq(a.sent_ok, 1);
    cr_assert_eq(b.snaps, 1);
    cr_assert_eq(b.snap_index, 1000);
    cr_assert_eq(b.snap_size, SNAP_SIZE);
    cr_assert_eq(b.snap_crc, gen_crc(SNAP_SIZE));
    cr_assert_eq(b.got[1], 10);
    run_until(&loop, never, NULL, 50); /* let the connections close */
    cr_assert_eq(calls, -(int)(SNAP_SIZE >> 20), "chunks read then released: %d", calls);

    /* from a file */
    char path[128];
    snprintf(path, sizeof(path), "%s/source.snap", a.dir);
    FILE *f = fopen(path, "wb");
    static uint8_t blk[1 << 16];
    for (uint64_t off = 0; off < 3 * 1000 * 1000 + 7; off += sizeof(blk)) {
        size_t n =
            3 * 1000 * 1000 + 7 - off < sizeof(blk) ? 3 * 1000 * 1000 + 7 - off : sizeof(blk);
        gen_read(&(int){0}, off, blk, n);
        fwrite(blk, 1, n, f);
    }
    fclose(f);
    s.index = 2000;
    cr_assert_eq(transport_send_snapshot(a.t, &m, path, NULL), 0);
    w.sent = 2;
    cr_assert(run_until(&loop, snap_reported, &w, DEADLINE_MS));
    cr_assert_eq(a.sent_ok, 2);
    cr_assert_eq(b.snaps, 2);
    cr_assert_eq(b.snap_index, 2000);
    cr_assert_eq(b.snap_crc, gen_crc(3 * 1000 * 1000 + 7));
    unlink(path);

    /* a SNAP message through transport_send: its in-memory data */
    static uint8_t mem[100000];
    for (size_t i = 0; i < sizeof(mem); i++)
        mem[i] = snap_byte(i);
    s.index = 3000;
    s.data = mem;
    s.len = sizeof(mem);
    cr_assert_eq(transport_send(a.t, &m), 0);
    w.sent = 3;
    cr_assert(run_until(&loop, snap_reported, &w, DEADLINE_MS));
    cr_assert_eq(a.sent_ok, 3);
    cr_assert_eq(b.snaps, 3);
    cr_assert_eq(b.snap_crc, gen_crc(sizeof(mem)));

    /* an empty snapshot */
    s.index = 4000;
    s.len = 0;
    cr_assert_eq(transport_send(a.t, &m), 0);
    w.sent = 4;
    cr_assert(run_until(&loop, snap_reported, &w, DEADLINE_MS));
    cr_assert_eq(a.sent_ok, 4);
    cr_assert_eq(b.snaps, 4);
    cr_assert_eq(b.snap_size, 0);
    /* the receiver's temp files were all handed over and removed */
    cr_assert_eq(dir_count(b.dir), 0);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

Test(transport, snapshot_to_a_dead_peer_fails_and_close_mid_transfer_is_clean, .init = setup,
     .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", free_port()), 0);
    struct raft_snapshot s = snap_meta(7);
    struct raft_msg m = {.type = RAFT_MSG_SNAP, .from = 1, .to = 2, .term = 3, .snapshot = &s};
    int calls = 0;
    struct transport_snap_reader r = {SNAP_SIZE, gen_read, gen_release, &calls};
    cr_assert_eq(transport_send_snapshot(a.t, &m, NULL, &r), 0);
    struct snapwait w = {&a, 1};
    cr_assert(run_until(&loop, snap_reported, &w, DEADLINE_MS));
    cr_assert_eq(a.sent_fail, 1);
    cr_assert_eq(transport_send_snapshot(a.t, &m, "/nonexistent/file", NULL), -ENOENT);
    node_stop(&a);

    /* now a live receiver, and both sides closed while data flows */
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    calls = 0;
    cr_assert_eq(transport_send_snapshot(a.t, &m, NULL, &r), 0);
    struct want1 dummy = {0};
    (void)dummy;
    run_until(&loop, never, NULL, 30);
    node_stop(&b);
    node_stop(&a);
    cr_assert_lt(calls, 0, "the reader was released");
    cr_assert_eq(a.sent_ok, 0);
    cr_assert_eq(dir_count(b.dir), 0, "no partial snapshot file left");
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

/* ---- a raw peer, speaking the protocol by hand from a thread ---- */

struct raw {
    int port;
    uint64_t cluster, from, to;
    bool corrupt; /* send a wrong CRC */
    bool garbage; /* send no handshake at all */
    bool partial; /* send half a handshake, then wait */
    int verdict;  /* the byte the listener answered, -1: closed */
    int reply_status;
    atomic_bool done;
};

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        return -1;
    return fd;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const uint8_t *q = p;
    while (n > 0) {
        ssize_t k = write(fd, q, n);
        if (k <= 0)
            return false;
        q += k;
        n -= (size_t)k;
    }
    return true;
}

static bool read_all(int fd, void *p, size_t n)
{
    uint8_t *q = p;
    while (n > 0) {
        ssize_t k = read(fd, q, n);
        if (k <= 0)
            return false;
        q += k;
        n -= (size_t)k;
    }
    return true;
}

static void be(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

static void *raw_run(void *arg)
{
    struct raw *r = arg;
    r->verdict = -1;
    r->reply_status = -1;
    int fd = raw_connect(r->port);
    if (fd < 0)
        goto out;
    if (r->partial) {
        write_all(fd, "QRMT", 4);
        uint8_t c;
        if (read(fd, &c, 1) == 1) /* 0: the listener hung up */
            r->verdict = c;
        close(fd);
        goto out;
    }
    if (r->garbage) {
        static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n.....";
        write_all(fd, junk, sizeof(junk));
        uint8_t c;
        if (read(fd, &c, 1) == 1)
            r->verdict = c;
        close(fd);
        goto out;
    }
    uint8_t hs[32];
    memcpy(hs, "QRMT", 4);
    be(hs + 4, 1, 2);
    hs[6] = 1;
    hs[7] = 0;
    be(hs + 8, r->cluster, 8);
    be(hs + 16, r->from, 8);
    be(hs + 24, r->to, 8);
    uint8_t reply[26];
    if (!write_all(fd, hs, 32) || !read_all(fd, reply, 26))
        goto done;
    r->reply_status = reply[6];
    if (reply[6] != 0)
        goto done;
    struct raft_snapshot s = snap_meta(55);
    struct raft_msg m = {.type = RAFT_MSG_SNAP, .from = r->from, .to = r->to, .snapshot = &s};
    struct buf b = {0};
    uint8_t z[8] = {0};
    buf_append(&b, z, 4);
    transport_msg_encode(&m, &b);
    be(b.data, b.len - 4, 4);
    size_t size = 3 << 20;
    be(z, size, 8);
    buf_append(&b, z, 8);
    uint8_t *data = malloc(size);
    for (size_t i = 0; i < size; i++)
        data[i] = snap_byte(i);
    uint32_t crc = crc32c_update(0, data, size);
    if (r->corrupt)
        data[size / 2] ^= 1; /* a flipped bit in transit */
    be(z, crc, 4);
    bool ok = write_all(fd, b.data, b.len) && write_all(fd, data, size) && write_all(fd, z, 4);
    free(data);
    buf_free(&b);
    uint8_t v;
    if (ok && read_all(fd, &v, 1))
        r->verdict = v;
done:
    close(fd);
out:
    atomic_store(&r->done, true);
    return NULL;
}

static bool raw_done(void *arg)
{
    return atomic_load(&((struct raw *)arg)->done);
}

static void run_raw(uv_loop_t *loop, struct raw *r)
{
    pthread_t th;
    atomic_store(&r->done, false);
    cr_assert_eq(pthread_create(&th, NULL, raw_run, r), 0);
    bool ok = run_until(loop, raw_done, r, DEADLINE_MS);
    cr_assert(ok); /* before joining a thread that may be stuck */
    pthread_join(th, NULL);
}

Test(transport, corrupted_snapshot_is_rejected, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node b;
    node_init(&b, &loop, 2);
    node_start(&b, CLUSTER);
    struct raw r = {.port = b.port, .cluster = CLUSTER, .from = 1, .to = 2, .corrupt = true};
    run_raw(&loop, &r);
    cr_assert_eq(r.reply_status, 0);
    cr_assert_eq(r.verdict, 1, "the listener refuses the data");
    cr_assert_eq(b.snaps, 0);
    run_until(&loop, never, NULL, 50);
    cr_assert_eq(dir_count(b.dir), 0, "the temp file is removed");

    /* the same bytes with the right CRC are accepted: the test can fail */
    r.corrupt = false;
    run_raw(&loop, &r);
    cr_assert_eq(r.verdict, 0);
    cr_assert_eq(b.snaps, 1);
    cr_assert_eq(b.snap_index, 55);
    cr_assert_eq(b.snap_crc, gen_crc(3 << 20));

    /* a snapshot from another cluster is refused at the handshake */
    r.cluster = 77;
    run_raw(&loop, &r);
    cr_assert_eq(r.reply_status, 1);
    cr_assert_eq(b.snaps, 1);

    /* something that is not our protocol is closed without an answer */
    r.garbage = true;
    run_raw(&loop, &r);
    cr_assert_eq(r.verdict, -1);
    node_stop(&b);
    dir_remove(b.dir);
    loop_finish(&loop);
}

Test(transport, close_from_inside_a_callback, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    b.close_on_message = true;
    /* many messages in one frame batch: the rest must not be delivered */
    for (uint64_t s = 0; s < 500; s++)
        send_seq(&a, 2, s);
    cr_assert(run_until(&loop, node_closed, &b, DEADLINE_MS));
    cr_assert_eq(b.got[1], 1);
    node_stop(&a);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

Test(transport, silent_connection_times_out, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node b;
    node_init(&b, &loop, 2);
    struct transport_options o = node_opts(&b, CLUSTER);
    o.handshake_timeout_ms = 100;
    node_start_opts(&b, &o);
    struct raw r = {.port = b.port, .partial = true};
    run_raw(&loop, &r);
    cr_assert_eq(r.verdict, -1);
    node_stop(&b);
    dir_remove(b.dir);
    loop_finish(&loop);
}

Test(transport, bad_arguments, .init = setup)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a;
    node_init(&a, &loop, 1);
    struct transport_options o = node_opts(&a, CLUSTER);
    struct transport *t;
    o.id = 0;
    cr_assert_eq(transport_new(&loop, &o, &t), -EINVAL);
    o = node_opts(&a, CLUSTER);
    o.cb.on_message = NULL;
    cr_assert_eq(transport_new(&loop, &o, &t), -EINVAL);
    node_start(&a, CLUSTER);
    cr_assert_eq(transport_listen(a.t, "127.0.0.1", 0, NULL), -EINVAL);
    cr_assert_eq(transport_add_peer(a.t, 1, "127.0.0.1", 1), -EINVAL);
    cr_assert_eq(transport_add_peer(a.t, 0, "127.0.0.1", 1), -EINVAL);
    cr_assert_eq(transport_add_peer(a.t, 2, "", 1), -EINVAL); /* a name is fine, not none */
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", 70000), -EINVAL);
    cr_assert_eq(transport_add_peer(a.t, 2, "::1", 1), 0);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", 1), -EEXIST);
    cr_assert_eq(transport_update_peer(a.t, 3, "127.0.0.1", 1), -ENOENT);
    struct raft_msg m = {.type = RAFT_MSG_HEARTBEAT, .from = 1, .to = 3};
    cr_assert_eq(transport_send(a.t, &m), -ENOENT);
    m.to = 2;
    m.type = RAFT_MSG__COUNT;
    cr_assert_eq(transport_send(a.t, &m), -EINVAL);
    m.type = RAFT_MSG_HEARTBEAT;
    cr_assert_eq(transport_send_snapshot(a.t, &m, NULL, NULL), -EINVAL);
    node_stop(&a);
    dir_remove(a.dir);
    loop_finish(&loop);
}

/* Host names: resolved (uv_getaddrinfo) before every dial; a name that
 * does not resolve is retried, and a new name reaches the peer. */
Test(transport, named_peers_are_resolved_at_each_dial, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_start(&a, CLUSTER);
    node_start(&b, CLUSTER);
    cr_assert_eq(transport_add_peer(a.t, 2, "nosuch.invalid", b.port), 0);
    send_seq(&a, 2, 0);
    run_until(&loop, never, NULL, 300);
    cr_assert_eq(b.got[1], 0);
    cr_assert_eq(transport_update_peer(a.t, 2, "localhost", b.port), 0);
    send_seq(&a, 2, 1);
    struct want1 w = {&b, 1, 2}; /* the one queued meanwhile too */
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    /* the link breaks: the name is looked up again for the next dial */
    node_stop(&b);
    node_start(&b, CLUSTER);
    b.strict = false; /* what was written to the old link is lost */
    for (uint64_t k = 2; k < 10; k++)
        send_seq(&a, 2, k);
    w.want = 3;
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    struct transport_peer_stats st;
    cr_assert_eq(transport_peer_stats(a.t, 2, &st), 0);
    cr_assert_geq(st.dials, 2);
    /* removed while its name is being looked up: nothing dangles */
    cr_assert_eq(transport_add_peer(a.t, 3, "localhost", 1), 0);
    send_seq(&a, 3, 0);
    cr_assert_eq(transport_remove_peer(a.t, 3), 0);
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

static int members_list(struct buf *out, void *arg)
{
    return buf_append(out, "three members", 13);
}

struct fetched {
    bool done;
    int status;
    uint64_t cid;
    char list[64];
    char err[400];
};

static void on_fetched(int status, uint64_t cid, const uint8_t *list, size_t len, const char *err,
                       void *arg)
{
    struct fetched *f = arg;
    cr_assert(!f->done, "called twice");
    f->done = true;
    f->status = status;
    f->cid = cid;
    snprintf(f->list, sizeof(f->list), "%.*s", (int)len, list ? (const char *)list : "");
    snprintf(f->err, sizeof(f->err), "%s", err ? err : "");
}

static bool fetched_done(void *arg)
{
    return ((struct fetched *)arg)->done;
}

/* A member about to join asks a peer port for the member list; the
 * listener must serve it (members_query), anyone else is refused. The
 * listening socket of |a| is bound by the test (transport_listen_fd). */
Test(transport, member_list_for_a_joining_member, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    struct transport_options o = node_opts(&a, CLUSTER);
    o.cb.members_query = members_list;
    cr_assert_eq(transport_new(&loop, &o, &a.t), 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    a.port = ntohs(sa.sin_port);
    cr_assert_eq(transport_listen_fd(a.t, fd), 0);
    node_start(&b, CLUSTER);
    struct fetched f = {0};
    cr_assert_eq(transport_fetch_members(&loop, "localhost", a.port, NULL, 0, on_fetched, &f), 0);
    cr_assert(run_until(&loop, fetched_done, &f, DEADLINE_MS));
    cr_assert_eq(f.status, 0, "%s", f.err);
    cr_assert_eq(f.cid, CLUSTER);
    cr_assert_str_eq(f.list, "three members");
    /* b serves no list */
    memset(&f, 0, sizeof(f));
    cr_assert_eq(transport_fetch_members(&loop, "127.0.0.1", b.port, NULL, 0, on_fetched, &f), 0);
    cr_assert(run_until(&loop, fetched_done, &f, DEADLINE_MS));
    cr_assert_neq(f.status, 0);
    cr_assert(strstr(f.err, "rejected: the member list cannot be served") != NULL, "%s", f.err);
    /* nobody listens: Go's words */
    int dead = free_port();
    memset(&f, 0, sizeof(f));
    cr_assert_eq(transport_fetch_members(&loop, "127.0.0.1", dead, NULL, 0, on_fetched, &f), 0);
    cr_assert(run_until(&loop, fetched_done, &f, DEADLINE_MS));
    char want[100];
    snprintf(want, sizeof(want), "dial tcp 127.0.0.1:%d: connect: connection refused", dead);
    cr_assert_str_eq(f.err, want);
    /* an unresolvable name */
    memset(&f, 0, sizeof(f));
    cr_assert_eq(transport_fetch_members(&loop, "nosuch.invalid", 1, NULL, 0, on_fetched, &f), 0);
    cr_assert(run_until(&loop, fetched_done, &f, DEADLINE_MS));
    cr_assert(strncmp(f.err, "lookup nosuch.invalid:", 22) == 0, "%s", f.err);
    node_stop(&a);
    node_stop(&b);
    run_until(&loop, never, NULL, 50); /* the fetches' handles close */
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
}

/* ---- TLS (tls/): the same links with certificates made by the openssl
 * CLI at test time: a CA, a member certificate (IP:127.0.0.1) used on
 * both sides, and a certificate from another CA ---- */

#include "tls/tls.h"

static char tlsdir[64];

static void tls_sh(const char *cmd)
{
    char full[2048];
    snprintf(full, sizeof(full), "cd %s && (%s) >/dev/null 2>&1", tlsdir, cmd);
    cr_assert_eq(system(full), 0, "%s", cmd);
}

#define TLS_EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static void tls_certs(void)
{
    snprintf(tlsdir, sizeof(tlsdir), "/tmp/qtransport-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(tlsdir));
    tls_sh("printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
           "> san.ext");
    tls_sh("openssl req -x509 " TLS_EC " -keyout ca.key -out ca.crt -days 30 -subj /CN=ca");
    tls_sh("openssl req " TLS_EC " -keyout peer.key -out peer.csr -subj /CN=peer && "
           "openssl x509 -req -in peer.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
           "-out peer.crt -days 30 -extfile san.ext");
    tls_sh("openssl req -x509 " TLS_EC " -keyout ca2.key -out ca2.crt -days 30 -subj /CN=ca2");
    tls_sh("openssl req " TLS_EC " -keyout other.key -out other.csr -subj /CN=peer && "
           "openssl x509 -req -in other.csr -CA ca2.crt -CAkey ca2.key -CAcreateserial "
           "-out other.crt -days 30 -extfile san.ext");
}

static tls_ctx *tls_make(enum tls_role role, const char *cert, const char *allowed_cn)
{
    char c[128], k[128], ca[128], err[512] = "";
    snprintf(c, sizeof(c), "%s/%s.crt", tlsdir, cert ? cert : "");
    snprintf(k, sizeof(k), "%s/%s.key", tlsdir, cert ? cert : "");
    snprintf(ca, sizeof(ca), "%s/ca.crt", tlsdir);
    struct tls_config cfg = {
        .role = role,
        .cert_file = cert ? c : NULL,
        .key_file = cert ? k : NULL,
        .ca_file = ca,
        .client_cert_auth = true,
        .allowed_cn = allowed_cn,
        .label = "peer",
    };
    tls_ctx *ctx = NULL;
    cr_assert_eq(tls_ctx_new(&cfg, &ctx, err, sizeof(err)), 0, "%s", err);
    return ctx;
}

static void tls_node_start(struct node *n, tls_ctx *srv, tls_ctx *cli)
{
    struct transport_options o = node_opts(n, CLUSTER);
    o.tls_server = srv;
    o.tls_client = cli;
    node_start_opts(n, &o);
}

Test(transport, tls_messages_and_snapshot, .init = setup, .timeout = 120)
{
    tls_certs();
    tls_ctx *srv = tls_make(TLS_SERVER, "peer", "peer");
    tls_ctx *cli = tls_make(TLS_CLIENT, "peer", NULL);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    tls_node_start(&a, srv, cli);
    tls_node_start(&b, srv, cli);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", b.port), 0);
    cr_assert_eq(transport_add_peer(b.t, 1, "127.0.0.1", a.port), 0);
    cr_assert_eq(transport_peer_set_tls(a.t, 2, true), 0);
    cr_assert_eq(transport_peer_set_tls(b.t, 1, true), 0);
    cr_assert_eq(transport_peer_set_tls(b.t, 9, true), -ENOENT);
    for (uint64_t k = 0; k < 2000; k++) {
        send_seq(&a, 2, k);
        send_seq(&b, 1, k);
        if (k % 500 == 0)
            uv_run(&loop, UV_RUN_NOWAIT);
    }
    struct want1 w1 = {&b, 1, 2000}, w2 = {&a, 2, 2000};
    cr_assert(run_until(&loop, got_enough, &w1, DEADLINE_MS));
    cr_assert(run_until(&loop, got_enough, &w2, DEADLINE_MS));
    /* a snapshot of several chunks on its own TLS connection */
    struct raft_snapshot s = snap_meta(1000);
    struct raft_msg m = {.type = RAFT_MSG_SNAP, .from = 1, .to = 2, .term = 3, .snapshot = &s};
    int calls = 0;
    struct transport_snap_reader r = {SNAP_SIZE, gen_read, gen_release, &calls};
    cr_assert_eq(transport_send_snapshot(a.t, &m, NULL, &r), 0);
    struct snapwait w = {&a, 1};
    cr_assert(run_until(&loop, snap_reported, &w, DEADLINE_MS));
    cr_assert_eq(a.sent_ok, 1);
    cr_assert_eq(b.snaps, 1);
    cr_assert_eq(b.snap_size, SNAP_SIZE);
    cr_assert_eq(b.snap_crc, gen_crc(SNAP_SIZE));
    node_stop(&a);
    node_stop(&b);
    dir_remove(a.dir);
    dir_remove(b.dir);
    loop_finish(&loop);
    tls_ctx_free(srv);
    tls_ctx_free(cli);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tlsdir);
    cr_assert_eq(system(cmd), 0);
}

struct dialwait {
    struct node *n;
    uint64_t peer;
    uint64_t dials;
};

static bool dialed(void *arg)
{
    struct dialwait *d = arg;
    struct transport_peer_stats st;
    return transport_peer_stats(d->n->t, d->peer, &st) == 0 && st.dials >= d->dials;
}

/* a peer without a certificate, with one from another CA, or speaking
 * plain TCP to a TLS listener never gets a message through; the listener
 * keeps serving the member that has the right one */
Test(transport, tls_refuses_peers_without_the_right_certificate, .init = setup, .timeout = 120)
{
    tls_certs();
    tls_ctx *srv = tls_make(TLS_SERVER, "peer", NULL);
    tls_ctx *good = tls_make(TLS_CLIENT, "peer", NULL);
    tls_ctx *nocert = tls_make(TLS_CLIENT, NULL, NULL);
    tls_ctx *other = tls_make(TLS_CLIENT, "other", NULL);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct node a, b, c, d, e;
    node_init(&a, &loop, 1);
    node_init(&b, &loop, 2);
    node_init(&c, &loop, 3);
    node_init(&d, &loop, 5); /* never delivers: beyond MAXN is fine */
    node_init(&e, &loop, 4);
    tls_node_start(&a, srv, good);
    tls_node_start(&b, NULL, nocert);
    tls_node_start(&c, NULL, other);
    node_start(&d, CLUSTER); /* plain TCP */
    tls_node_start(&e, NULL, good);
    struct node *senders[] = {&b, &c, &d, &e};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(transport_add_peer(senders[i]->t, 1, "127.0.0.1", a.port), 0);
        if (senders[i] != &d)
            cr_assert_eq(transport_peer_set_tls(senders[i]->t, 1, true), 0);
    }
    for (uint64_t k = 0; k < 10; k++)
        for (int i = 0; i < 4; i++)
            send_seq(senders[i], 1, k);
    struct want1 w = {&a, 4, 10};
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    /* each refused sender tried, failed and tried again */
    for (int i = 0; i < 3; i++) {
        struct dialwait dw = {senders[i], 1, 2};
        cr_assert(run_until(&loop, dialed, &dw, DEADLINE_MS));
        struct transport_peer_stats st;
        cr_assert_eq(transport_peer_stats(senders[i]->t, 1, &st), 0);
        cr_assert_eq(st.connects, 0);
        if (senders[i]->id <= MAXN)
            cr_assert_eq(a.got[senders[i]->id], 0);
    }
    for (uint64_t k = 10; k < 20; k++)
        send_seq(&e, 1, k);
    w.want = 20;
    cr_assert(run_until(&loop, got_enough, &w, DEADLINE_MS));
    struct node *all[] = {&a, &b, &c, &d, &e};
    for (int i = 0; i < 5; i++) {
        node_stop(all[i]);
        dir_remove(all[i]->dir);
    }
    loop_finish(&loop);
    tls_ctx_free(srv);
    tls_ctx_free(good);
    tls_ctx_free(nocert);
    tls_ctx_free(other);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tlsdir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- the source address of outgoing links (options.local_addr) ---- */

struct src_probe {
    int fd;        /* a plain listening socket standing in for a peer */
    char seen[64]; /* the address the accepted connection came from */
};

static bool src_accepted(void *arg)
{
    struct src_probe *sp = arg;
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int c = accept(sp->fd, (struct sockaddr *)&a, &len);
    if (c < 0)
        return false;
    inet_ntop(AF_INET, &a.sin_addr, sp->seen, sizeof(sp->seen));
    close(c);
    return true;
}

/* dial_from makes a transport with |local| as its local_addr, has it send
 * one message to a plain socket listening on 127.0.0.1 and returns (in
 * |seen|) the address the connection came from. */
static void dial_from(uv_loop_t *loop, const char *local, char *seen, size_t cap)
{
    struct node a;
    node_init(&a, loop, 1);
    struct transport_options o = node_opts(&a, CLUSTER);
    o.local_addr = local;
    node_start_opts(&a, &o);
    struct src_probe sp = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)};
    struct sockaddr_in la = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(sp.fd, (struct sockaddr *)&la, sizeof(la)), 0);
    cr_assert_eq(listen(sp.fd, 8), 0);
    socklen_t len = sizeof(la);
    getsockname(sp.fd, (struct sockaddr *)&la, &len);
    cr_assert_eq(transport_add_peer(a.t, 2, "127.0.0.1", ntohs(la.sin_port)), 0);
    send_seq(&a, 2, 0);
    cr_assert(run_until(loop, src_accepted, &sp, DEADLINE_MS), "no connection came");
    snprintf(seen, cap, "%s", sp.seen);
    close(sp.fd);
    node_stop(&a);
    dir_remove(a.dir);
}

/* Members on their own loopback addresses (127.0.0.x, a test cluster whose
 * links are cut per address pair) must dial from their own address: the
 * kernel's choice is 127.0.0.1 for every destination in 127/8. */
Test(transport, outgoing_links_leave_from_local_addr, .init = setup, .timeout = 60)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char seen[64];
    dial_from(&loop, "127.0.0.7", seen, sizeof(seen));
    cr_assert_str_eq(seen, "127.0.0.7");
    /* without one, the system's choice (127.0.0.1 on loopback) */
    dial_from(&loop, NULL, seen, sizeof(seen));
    cr_assert_str_eq(seen, "127.0.0.1");
    /* an IPv6 local address is not applied to an IPv4 peer */
    dial_from(&loop, "::1", seen, sizeof(seen));
    cr_assert_str_eq(seen, "127.0.0.1");
    /* not a numeric address: refused at creation */
    struct node b;
    node_init(&b, &loop, 1);
    struct transport_options o = node_opts(&b, CLUSTER);
    struct transport *t;
    o.local_addr = "localhost";
    cr_assert_eq(transport_new(&loop, &o, &t), -EINVAL);
    o.local_addr = "127.0.0.300";
    cr_assert_eq(transport_new(&loop, &o, &t), -EINVAL);
    dir_remove(b.dir);
    loop_finish(&loop);
}
