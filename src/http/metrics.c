/* http/metrics.c: GET /metrics, the Prometheus text exposition of every
 * metric the member registered (base/metrics.h), on the client port and on
 * the listeners of --listen-metrics-urls, as etcd serves it; and the
 * counters of the HTTP face itself (scrapes, /health outcomes).
 *
 * A scrape sums the shards of the loop threads and reads /proc/self on the
 * loop of its connection: no lock, no I/O beyond /proc, a few hundred
 * microseconds for quorum's ~2,500 series. */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/metrics.h"
#include "http/http_int.h"

struct http_metrics http_metrics;

static struct metrics_series *inflight;
static metric_t scrapes[3]; /* by code: 200, 500, 503 */

void http_metrics_register(void)
{
    http_metrics.health_success = metrics_counter("etcd_server_health_success",
                                                  "The total number of successful health checks");
    http_metrics.health_failures =
        metrics_counter("etcd_server_health_failures", "The total number of failed health checks");
    inflight = metrics_series(metrics_family("promhttp_metric_handler_requests_in_flight",
                                             "Current number of scrapes being served.",
                                             METRICS_GAUGE, NULL, NULL, 0),
                              NULL);
    const char *const code[] = {"code", NULL};
    struct metrics_family *f = metrics_family("promhttp_metric_handler_requests_total",
                                              "Total number of scrapes by HTTP status code.",
                                              METRICS_COUNTER, code, NULL, 0);
    static const char *const codes[] = {"200", "500", "503"};
    for (int i = 0; i < 3; i++)
        scrapes[i] = metrics_slot(metrics_series(f, (const char *[]){codes[i]}));
}

void http_serve_metrics(struct hreq *r)
{
    /* promhttp serves any method */
    metric_t in = metrics_slot(inflight);
    metrics_gauge_add(in, 1);
    struct buf b = {0};
    int rv = metrics_expose(&b);
    metrics_gauge_add(in, -1);
    if (rv != 0) {
        static const char oom[] = "An error has occurred while serving metrics:\n\nout of memory\n";
        hreq_respond(r, 500, "text/plain; charset=utf-8", NULL, oom, sizeof(oom) - 1);
        metrics_inc(scrapes[1]);
    } else {
        hreq_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
        metrics_inc(scrapes[0]);
    }
    buf_free(&b);
}
