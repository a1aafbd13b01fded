/* Unit tests for base/metrics: the text exposition as Go's client_golang
 * writes it (etcd's /metrics), histogram buckets, sums over the shards of
 * several threads and the shared shard, and the cost of an update. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/metrics.h"

static char *expose(void)
{
    struct buf b = {0};
    cr_assert_eq(metrics_expose(&b), 0);
    buf_append_byte(&b, 0);
    return (char *)b.data;
}

/* the lines of |text| that belong to family |name| (its HELP, TYPE and
 * samples), concatenated */
static char *family_text(const char *text, const char *name)
{
    struct buf b = {0};
    size_t nl = strlen(name);
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) + 1 : strlen(p);
        const char *n = p;
        if (strncmp(n, "# HELP ", 7) == 0 || strncmp(n, "# TYPE ", 7) == 0)
            n += 7;
        if (strncmp(n, name, nl) == 0 &&
            (n[nl] == ' ' || n[nl] == '{' || strncmp(n + nl, "_bucket", 7) == 0 ||
             strncmp(n + nl, "_sum", 4) == 0 || strncmp(n + nl, "_count", 6) == 0))
            buf_append(&b, p, len);
        p += len;
    }
    buf_append_byte(&b, 0);
    return (char *)b.data;
}

static void expect_family(const char *name, const char *want)
{
    char *t = expose();
    char *f = family_text(t, name);
    cr_assert_str_eq(f, want, "%s:\n%s\nwanted:\n%s", name, f, want);
    free(f);
    free(t);
}

Test(metrics, go_float_format)
{
    struct {
        double v;
        const char *s;
    } cases[] = {
        {0, "0"},
        {1, "1"},
        {20480, "20480"},
        {123456, "123456"},
        {1e6, "1e+06"},
        {2147483648.0, "2.147483648e+09"},
        {1795612751.31, "1.79561275131e+09"},
        {0.000293172, "0.000293172"},
        {0.0001, "0.0001"},
        {0.00001, "1e-05"},
        {0.005, "0.005"},
        {1.024, "1.024"},
        {1048576, "1.048576e+06"},
        {18446744073709551615.0, "1.8446744073709552e+19"},
        {0.025740570999999997, "0.025740570999999997"},
        {-3.5, "-3.5"},
        {1.0 / 0.0, "+Inf"},
        {-1.0 / 0.0, "-Inf"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[40];
        metrics_format_float(cases[i].v, out);
        cr_assert_str_eq(out, cases[i].s, "%.17g", cases[i].v);
    }
}

Test(metrics, counter_and_gauge_text)
{
    metric_t c = metrics_counter("t_requests_total", "Requests seen.\nTwo lines \\ here.");
    metric_t g = metrics_gauge("t_inflight", "In flight.");
    metrics_add(c, 41);
    metrics_inc(c);
    metrics_gauge_add(g, 5);
    metrics_gauge_add(g, -7);
    expect_family("t_requests_total", "# HELP t_requests_total Requests seen.\\nTwo lines \\\\ "
                                      "here.\n# TYPE t_requests_total counter\n"
                                      "t_requests_total 42\n");
    expect_family("t_inflight",
                  "# HELP t_inflight In flight.\n# TYPE t_inflight gauge\nt_inflight -2\n");
    /* registering again finds the same series */
    cr_assert_eq(metrics_counter("t_requests_total", "other"), c);
}

Test(metrics, labels_sorted_and_escaped)
{
    /* labels given out of order are written sorted by name, series sorted
     * by their values, as Go does */
    const char *labels[] = {"Remote", "Local", NULL};
    struct metrics_family *f = metrics_family("t_peers", "Peers.", METRICS_GAUGE, labels, NULL, 0);
    struct metrics_series *b = metrics_series(f, (const char *[]){"b", "l"});
    struct metrics_series *a = metrics_series(f, (const char *[]){"a\"q\\\n", "l"});
    cr_assert_eq(metrics_series(f, (const char *[]){"b", "l"}), b);
    metrics_set(b, 1);
    metrics_gauge_add(metrics_slot(a), 3);
    expect_family("t_peers", "# HELP t_peers Peers.\n# TYPE t_peers gauge\n"
                             "t_peers{Local=\"l\",Remote=\"a\\\"q\\\\\\n\"} 3\n"
                             "t_peers{Local=\"l\",Remote=\"b\"} 1\n");
    /* a family without series shows nothing, as a Go vector without
     * children */
    metrics_family("t_empty", "Nothing.", METRICS_COUNTER, (const char *[]){"To", NULL}, NULL, 0);
    char *t = expose();
    cr_assert_null(strstr(t, "t_empty"));
    free(t);
}

Test(metrics, histogram_buckets)
{
    double bounds[4];
    metrics_exp_buckets(0.001, 2, 4, bounds);
    cr_assert_float_eq(bounds[3], 0.008, 1e-12);
    struct metrics_series *h = metrics_histogram("t_fsync_seconds", "Fsyncs.", bounds, 4);
    metrics_observe(h, 0.0005); /* le 0.001 */
    metrics_observe(h, 0.001);  /* le 0.001: bounds are inclusive */
    metrics_observe(h, 0.003);  /* le 0.004 */
    metrics_observe(h, 5);      /* +Inf */
    expect_family("t_fsync_seconds", "# HELP t_fsync_seconds Fsyncs.\n"
                                     "# TYPE t_fsync_seconds histogram\n"
                                     "t_fsync_seconds_bucket{le=\"0.001\"} 2\n"
                                     "t_fsync_seconds_bucket{le=\"0.002\"} 2\n"
                                     "t_fsync_seconds_bucket{le=\"0.004\"} 3\n"
                                     "t_fsync_seconds_bucket{le=\"0.008\"} 3\n"
                                     "t_fsync_seconds_bucket{le=\"+Inf\"} 4\n"
                                     "t_fsync_seconds_sum 5.0045\n"
                                     "t_fsync_seconds_count 4\n");
    cr_assert_float_eq(metrics_value(h), 4, 0);
    /* labels first, le last */
    struct metrics_family *f = metrics_family("t_rtt_seconds", "RTT.", METRICS_HISTOGRAM,
                                              (const char *[]){"To", NULL}, bounds, 1);
    metrics_observe(metrics_series(f, (const char *[]){"abc"}), 0.5);
    expect_family("t_rtt_seconds", "# HELP t_rtt_seconds RTT.\n# TYPE t_rtt_seconds histogram\n"
                                   "t_rtt_seconds_bucket{To=\"abc\",le=\"0.001\"} 0\n"
                                   "t_rtt_seconds_bucket{To=\"abc\",le=\"+Inf\"} 1\n"
                                   "t_rtt_seconds_sum{To=\"abc\"} 0.5\n"
                                   "t_rtt_seconds_count{To=\"abc\"} 1\n");
}

static double answer(void *arg)
{
    return *(double *)arg;
}

Test(metrics, computed_alias_and_sorted_families)
{
    static double v = 7;
    metrics_gauge_fn("t_zz_state", "State.", answer, &v);
    struct metrics_family *f =
        metrics_family("t_b_put_total", "Puts.", METRICS_COUNTER, NULL, NULL, 0);
    metric_t p = metrics_slot(metrics_series(f, NULL));
    metrics_alias("t_a_debug_put_total", "Puts (debug).", f);
    metrics_add(p, 3);
    v = 8;
    char *t = expose();
    cr_assert_not_null(strstr(t, "t_zz_state 8\n"));
    cr_assert_not_null(strstr(t, "# TYPE t_a_debug_put_total counter\nt_a_debug_put_total 3\n"));
    char *a = strstr(t, "t_a_debug"), *b = strstr(t, "t_b_put"), *z = strstr(t, "t_zz_state");
    cr_assert(a < b && b < z, "families are sorted by name");
    free(t);
}

#define THREADS 4
#define ADDS 200000

static metric_t race_counter;
static struct metrics_series *race_hist;

static void *adder(void *arg)
{
    bool attach = arg != NULL;
    if (attach)
        metrics_thread_attach();
    for (int i = 0; i < ADDS; i++) {
        metrics_inc(race_counter);
        if (i % 100 == 0)
            metrics_observe(race_hist, 0.5);
    }
    if (attach)
        metrics_thread_detach();
    return NULL;
}

Test(metrics, shards_sum_across_threads)
{
    race_counter = metrics_counter("t_race_total", "Adds from many threads.");
    double b = 1;
    race_hist = metrics_histogram("t_race_seconds", "Observed from many threads.", &b, 1);
    /* two threads with shards of their own, two on the shared shard (as
     * libuv's workers), and a reader meanwhile */
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, adder, i % 2 ? (void *)1 : NULL);
    for (int k = 0; k < 5; k++)
        free(expose());
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    char want[64];
    snprintf(want, sizeof(want), "t_race_total %d\n", THREADS * ADDS);
    char *t = expose();
    cr_assert_not_null(strstr(t, want), "%s", family_text(t, "t_race_total"));
    snprintf(want, sizeof(want), "t_race_seconds_count %d\n", THREADS * ADDS / 100);
    cr_assert_not_null(strstr(t, want));
    snprintf(want, sizeof(want), "t_race_seconds_sum %d\n", THREADS * ADDS / 200);
    cr_assert_not_null(strstr(t, want));
    free(t);
    /* a detached shard is reused and its values stay */
    metrics_thread_attach();
    metrics_inc(race_counter);
    metrics_thread_detach();
    cr_assert_float_eq(
        metrics_value(metrics_series(metrics_family("t_race_total", "", 0, NULL, NULL, 0), NULL)),
        THREADS * ADDS + 1, 0);
}

Test(metrics, process_collector)
{
    metrics_process_register();
    char *t = expose();
    cr_assert_not_null(strstr(t, "# TYPE process_cpu_seconds_total counter\n"));
    cr_assert_not_null(strstr(t, "# TYPE process_resident_memory_bytes gauge\n"));
    cr_assert_not_null(strstr(t, "# TYPE os_fd_limit gauge\n"));
    char *p = strstr(t, "\nprocess_open_fds ");
    cr_assert_not_null(p);
    cr_assert_gt(atof(p + 18), 2);
    p = strstr(t, "\nprocess_start_time_seconds ");
    cr_assert_gt(atof(p + 28), 1.5e9);
    free(t);
}

/* The cost the design promises: an update on a thread's own shard is a
 * load, an add and a store. Printed, and bounded loosely (sanitizer and
 * debug builds are slower). */
Test(metrics, update_cost)
{
    metric_t c = metrics_counter("t_cost_total", "Cost.");
    metrics_thread_attach();
    const int n = 10000000;
    uint64_t t0 = metrics_now_ns();
    for (int i = 0; i < n; i++)
        metrics_inc(c);
    double own = (double)(metrics_now_ns() - t0) / n;
    metrics_thread_detach();
    t0 = metrics_now_ns();
    for (int i = 0; i < n; i++)
        metrics_inc(c);
    double shared = (double)(metrics_now_ns() - t0) / n;
    double b[11];
    struct metrics_series *h =
        metrics_histogram("t_cost_seconds", "Cost.", metrics_exp_buckets(0.001, 2, 11, b), 11);
    metrics_thread_attach();
    t0 = metrics_now_ns();
    for (int i = 0; i < n / 10; i++)
        metrics_observe(h, 0.003);
    double obs = (double)(metrics_now_ns() - t0) / (n / 10);
    metrics_thread_detach();
    printf("metrics update: %.2f ns on a thread's shard, %.2f ns on the shared shard "
           "(atomic add), histogram observe %.2f ns\n",
           own, shared, obs);
    cr_assert_lt(own, 50);
}
