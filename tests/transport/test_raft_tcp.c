/* tests/transport/test_raft_tcp.c: real Raft cores (src/raft) talking over
 * the transport on 127.0.0.1: election, replication and a snapshot sent to
 * a member that starts late, with every message passing through the codec
 * and a socket. The Ready loop is the simplest correct one (no disk: the
 * state lives in memory), run after every input. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "transport/transport.h"

#include "../free_port.h"

#define N 3
#define CLUSTER 0xabcdef
#define DEADLINE_MS 60000
#define SNAP_PAD (3u << 20) /* snapshot payload padding: several chunks */

struct member {
    uv_loop_t *loop;
    uint64_t id;
    int port;
    char dir[64];
    struct raft *r;
    struct transport *t;
    /* the state machine: entries applied and a running CRC of their data */
    uint64_t applied, count;
    uint32_t crc;
    int snaps_in;
    bool closed;
};

static struct member mem[N];

static void pump(struct member *m);

static void on_message(const struct raft_msg *msg, void *arg)
{
    struct member *m = arg;
    raft_step(m->r, msg);
    pump(m);
}

static void on_snapshot(const struct raft_msg *msg, const char *path, void *arg)
{
    struct member *m = arg;
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    size_t len = msg->snapshot->len;
    uint8_t *data = malloc(len ? len : 1);
    cr_assert_eq(fread(data, 1, len, f), len);
    fclose(f);
    unlink(path);
    struct raft_snapshot s = *msg->snapshot;
    s.data = data;
    struct raft_msg copy = *msg;
    copy.snapshot = &s;
    m->snaps_in++;
    raft_step(m->r, &copy);
    free(data);
    pump(m);
}

/* snapshot data: count, crc, then padding */
static uint8_t *snap_make(const struct member *m, size_t *len)
{
    *len = 12 + SNAP_PAD;
    uint8_t *d = calloc(1, *len);
    memcpy(d, &m->count, 8);
    memcpy(d + 8, &m->crc, 4);
    for (size_t i = 0; i < SNAP_PAD; i++)
        d[12 + i] = (uint8_t)(i * 31);
    return d;
}

static void pump(struct member *m)
{
    while (m->r != NULL && raft_has_ready(m->r)) {
        struct raft_ready rd;
        cr_assert_eq(raft_ready(m->r, &rd), 0);
        /* nothing to persist: this test keeps the state in memory */
        for (size_t i = 0; i < rd.n_msgs; i++) {
            int rv = transport_send(m->t, &rd.msgs[i]);
            cr_assert(rv == 0, "send: %d", rv);
        }
        if (rd.snapshot != NULL) {
            cr_assert_geq(rd.snapshot->len, 12);
            memcpy(&m->count, rd.snapshot->data, 8);
            memcpy(&m->crc, (const uint8_t *)rd.snapshot->data + 8, 4);
            const uint8_t *pad = (const uint8_t *)rd.snapshot->data + 12;
            cr_assert_eq(rd.snapshot->len, 12 + SNAP_PAD);
            for (size_t i = 0; i < SNAP_PAD; i += 4099)
                cr_assert_eq(pad[i], (uint8_t)(i * 31));
            m->applied = rd.snapshot->index;
        }
        for (size_t i = 0; i < rd.n_committed; i++) {
            const struct raft_entry *e = &rd.committed[i];
            if (e->type == RAFT_ENTRY_NORMAL && e->len > 0) {
                m->count++;
                m->crc = crc32c_update(m->crc, e->data, e->len);
            }
            m->applied = e->index;
        }
        raft_advance(m->r);
    }
}

static void on_tick(uv_timer_t *h)
{
    for (int i = 0; i < N; i++) {
        if (mem[i].r != NULL) {
            raft_tick(mem[i].r);
            pump(&mem[i]);
        }
    }
}

static void member_start(struct member *m)
{
    struct raft_config cfg;
    raft_config_default(&cfg, m->id);
    struct raft_membership boot = {.voters = {1, 2, 3}, .n_voters = 3};
    cr_assert_eq(raft_new(&cfg, NULL, &boot, &m->r), 0);
    struct transport_options o = {
        .id = m->id,
        .cluster_id = CLUSTER,
        .snap_dir = m->dir,
        .cb = {.on_message = on_message, .on_snapshot = on_snapshot},
        .arg = m,
    };
    cr_assert_eq(transport_new(m->loop, &o, &m->t), 0);
    int port;
    cr_assert_eq(transport_listen(m->t, "127.0.0.1", m->port, &port), 0);
    cr_assert_eq(port, m->port);
    for (int j = 0; j < N; j++)
        if (mem[j].id != m->id)
            cr_assert_eq(transport_add_peer(m->t, mem[j].id, "127.0.0.1", mem[j].port), 0);
}

static void closed_cb(void *arg)
{
    ((struct member *)arg)->closed = true;
}

struct waiter {
    bool (*pred)(void);
    uint64_t deadline;
    bool ok;
};

static void wait_tick(uv_timer_t *h)
{
    struct waiter *w = h->data;
    if (w->pred()) {
        w->ok = true;
        uv_stop(h->loop);
    } else if (uv_now(h->loop) >= w->deadline) {
        uv_stop(h->loop);
    }
}

static bool run_until(uv_loop_t *loop, bool (*pred)(void))
{
    uv_timer_t tm;
    struct waiter w = {pred, uv_now(loop) + DEADLINE_MS, false};
    uv_timer_init(loop, &tm);
    tm.data = &w;
    uv_timer_start(&tm, wait_tick, 5, 5);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&tm, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return w.ok;
}

static struct member *leader(void)
{
    for (int i = 0; i < N; i++)
        if (mem[i].r != NULL && raft_get_role(mem[i].r) == RAFT_LEADER)
            return &mem[i];
    return NULL;
}

static bool has_leader(void)
{
    return leader() != NULL;
}

static uint64_t target;
static int live = N;

static bool all_applied(void)
{
    for (int i = 0; i < live; i++)
        if (mem[i].r == NULL || mem[i].applied < target)
            return false;
    return true;
}

static bool all_closed(void)
{
    for (int i = 0; i < N; i++)
        if (mem[i].t != NULL && !mem[i].closed)
            return false;
    return true;
}

static void propose_batch(int n, int base)
{
    struct member *l = leader();
    cr_assert_not_null(l);
    for (int k = 0; k < n; k++) {
        char v[32];
        int len = snprintf(v, sizeof(v), "value-%d", base + k);
        uint64_t idx;
        cr_assert_eq(raft_propose(l->r, v, (size_t)len, &idx), 0);
        target = idx;
    }
    pump(l);
}

static void cluster_run(bool late_third)
{
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t loop;
    uv_loop_init(&loop);
    for (int i = 0; i < N; i++) {
        memset(&mem[i], 0, sizeof(mem[i]));
        mem[i].loop = &loop;
        mem[i].id = (uint64_t)i + 1;
        mem[i].port = free_port();
        snprintf(mem[i].dir, sizeof(mem[i].dir), "/tmp/qraft-tcp-XXXXXX");
        cr_assert_not_null(mkdtemp(mem[i].dir));
    }
    live = late_third ? N - 1 : N;
    for (int i = 0; i < live; i++)
        member_start(&mem[i]);
    uv_timer_t tick;
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, on_tick, 10, 10);
    cr_assert(run_until(&loop, has_leader), "no leader elected");
    for (int round = 0; round < 5; round++) {
        propose_batch(60, round * 60);
        cr_assert(run_until(&loop, all_applied), "round %d not applied", round);
    }
    if (late_third) {
        /* the leader compacts its log, so the late member needs a snapshot */
        struct member *l = leader();
        size_t len;
        uint8_t *d = snap_make(l, &len);
        cr_assert_eq(raft_compact(l->r, d, len), 0);
        free(d);
        live = N;
        member_start(&mem[N - 1]);
        propose_batch(10, 1000);
        cr_assert(run_until(&loop, all_applied), "late member did not catch up");
        cr_assert_geq(mem[N - 1].snaps_in, 1);
    }
    for (int i = 1; i < N; i++) {
        cr_assert_eq(mem[i].count, mem[0].count);
        cr_assert_eq(mem[i].crc, mem[0].crc);
    }
    cr_assert_eq(mem[0].count, late_third ? 310 : 300);
    uv_close((uv_handle_t *)&tick, NULL);
    for (int i = 0; i < N; i++) {
        transport_close(mem[i].t, closed_cb, &mem[i]);
        raft_free(mem[i].r);
        mem[i].r = NULL;
    }
    cr_assert(run_until(&loop, all_closed));
    uv_run(&loop, UV_RUN_NOWAIT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    for (int i = 0; i < N; i++)
        rmdir(mem[i].dir);
}

Test(raft_tcp, three_members_elect_and_replicate, .timeout = 120)
{
    cluster_run(false);
}

Test(raft_tcp, late_member_catches_up_by_snapshot, .timeout = 120)
{
    cluster_run(true);
}
