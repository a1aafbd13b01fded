/* bench/raft/bench.c: raw throughput of the Raft core.
 *
 * A 3-node cluster in one process with a zero-cost network (messages are
 * stepped into the receiver straight from the sender's Ready) and a
 * zero-cost disk (persisting is a no-op): what remains is the CPU cost of
 * the core itself. Proposals go in batches of |batch| per loop pass, like
 * the group commit of the server's Ready loop. Prints entries committed per
 * second by the leader for batch sizes 1 and 64.
 *
 * Usage: raft-bench [--entries N] (entries per batch size, default 2000000) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "raft/raft.h"

#define NODES 3

static struct raft *nodes[NODES + 1];

/* CPU time of this process: the machine may be shared, and the point is
 * the core's CPU cost. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t sink;

/* pass runs one Ready cycle on every node; returns whether any had work. */
static int pass(void)
{
    int work = 0;
    for (int k = 1; k <= NODES; k++) {
        struct raft *r = nodes[k];
        if (!raft_has_ready(r))
            continue;
        work = 1;
        struct raft_ready rd;
        if (raft_ready(r, &rd) != 0)
            abort();
        for (size_t j = 0; j < rd.n_msgs; j++) {
            const struct raft_msg *m = &rd.msgs[j];
            if (m->to >= 1 && m->to <= NODES && raft_step(nodes[m->to], m) != 0)
                abort();
        }
        for (size_t j = 0; j < rd.n_committed; j++)
            sink += rd.committed[j].len; /* "apply" */
        raft_advance(r);
    }
    return work;
}

static void setup(void)
{
    struct raft_membership boot = {.n_voters = NODES};
    for (int k = 1; k <= NODES; k++)
        boot.voters[k - 1] = (uint64_t)k;
    for (int k = 1; k <= NODES; k++) {
        struct raft_config cfg;
        raft_config_default(&cfg, (uint64_t)k);
        cfg.max_msg_entries = 256;
        cfg.max_inflight = 1024;
        if (raft_new(&cfg, NULL, &boot, &nodes[k]) != 0)
            abort();
    }
    raft_campaign(nodes[1]);
    while (pass())
        ;
    if (raft_get_role(nodes[1]) != RAFT_LEADER) {
        fprintf(stderr, "raft-bench: no leader\n");
        exit(1);
    }
}

static void teardown(void)
{
    for (int k = 1; k <= NODES; k++)
        raft_free(nodes[k]), nodes[k] = NULL;
}

static void run(int batch, uint64_t entries)
{
    setup();
    struct raft *l = nodes[1];
    uint8_t payload[64];
    memset(payload, 'x', sizeof(payload));
    uint64_t start_commit = raft_get_commit(l), proposed = 0;
    double t0 = now_s(), w0 = wall_s();
    while (raft_get_commit(l) - start_commit < entries) {
        for (int b = 0; b < batch && proposed < entries; b++, proposed++)
            if (raft_propose(l, payload, sizeof(payload), NULL) != 0)
                abort();
        pass();
        /* Compact now and then so memory stays flat, as a server would. */
        if (raft_get_applied(l) - raft_get_first_index(l) > 100000)
            for (int k = 1; k <= NODES; k++)
                raft_compact(nodes[k], "s", 1);
    }
    while (pass())
        ;
    double dt = now_s() - t0, dw = wall_s() - w0;
    uint64_t done = raft_get_commit(l) - start_commit;
    printf("raft-bench batch=%d entries/s=%.0f (%" PRIu64 " entries in %.3f s of CPU; "
           "wall %.3f s = %.0f/s; 64-byte payloads)\n",
           batch, (double)done / dt, done, dt, dw, (double)done / dw);
    teardown();
}

int main(int argc, char **argv)
{
    uint64_t entries = 2000000;
    for (int k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--entries") && k + 1 < argc)
            entries = strtoull(argv[++k], NULL, 10);
        else {
            fprintf(stderr, "usage: raft-bench [--entries N]\n");
            return 2;
        }
    }
    run(1, entries / 4);
    run(64, entries);
    return sink == 0xdeadbeef; /* keep the apply loop from being optimized away */
}
