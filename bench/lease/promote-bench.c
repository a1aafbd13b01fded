/* bench/lease/promote-bench: what a new leader pays for its leases (not a
 * test; run by hand). Grants N leases on a real LMDB store in a temp dir,
 * then times lessor_promote (what node.c calls when the member becomes
 * leader) and the lease ticks after it (lessor_expired and
 * lessor_due_checkpoints, which the server calls every 100 ms and every
 * second): the longest single call is what the core loop is held for.
 *
 *   ninja -C build bench/lease/promote-bench
 *   build/bench/lease/promote-bench [N]        (default 1000000)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "lease/lessor.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    char dir[] = "/tmp/promote-bench-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    struct backend_options o = {.dir = dir};
    backend *be;
    lessor *ls;
    if (backend_open(&o, &be) != 0 || lessor_open(be, 2, &ls) != 0)
        return 1;
    double t0 = now_ms();
    for (long i = 1; i <= n;) {
        if (backend_batch_begin(be) != 0)
            return 1;
        for (long k = 0; k < 100000 && i <= n; k++, i++) {
            int64_t g;
            if (lessor_grant(ls, i, 60 + i % 600, 0, &g) != 0)
                return 1;
        }
        if (backend_batch_commit(be) != 0)
            return 1;
    }
    printf("promote-bench: %ld leases granted in %.0f ms\n", n, now_ms() - t0);
    double t = now_ms();
    lessor_promote(ls, 1000);
    double promote = now_ms() - t;
    /* the ticks of the next 60 s: an expiry pass every 100 ms, a
     * checkpoint pass every second (none due: nothing expires this soon) */
    double longest_exp = 0, longest_ck = 0;
    int64_t ids[1000], rem[1000];
    for (int64_t ms = 1100; ms <= 61000; ms += 100) {
        t = now_ms();
        (void)lessor_expired(ls, ms, ids, 100);
        double d = now_ms() - t;
        if (d > longest_exp)
            longest_exp = d;
        if (ms % 1000 == 0) {
            t = now_ms();
            (void)lessor_due_checkpoints(ls, ms, 5000, ids, rem, 1000);
            d = now_ms() - t;
            if (d > longest_ck)
                longest_ck = d;
        }
    }
    printf("promote-bench: %ld leases: lessor_promote %.1f ms; longest expiry tick %.1f ms; "
           "longest checkpoint tick %.1f ms\n",
           n, promote, longest_exp, longest_ck);
    lessor_close(ls);
    backend_close(be);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
