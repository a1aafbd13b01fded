/* http/health.c: GET /version, /health (etcd 3.4), /livez and /readyz
 * (etcd 3.6).
 *
 * /health is etcd's checkHealth: unhealthy when an alarm is raised (unless
 * ?exclude=ALARM names it), when the member knows no leader, or when a
 * read does not come back within a second (linearizable unless
 * ?serializable=true). The alarms and the leader come from a local
 * Maintenance/Status call, the read is a local KV/Range of one key, so
 * the probe takes the path a client's request takes. Under auth the Range
 * may be refused for want of a user; it reached the server and so counts
 * as answered (etcd's probe reads through the v2 path, outside auth).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/err.h"
#include "base/log.h"
#include "http/http_int.h"
#include "rpc.pb-c.h"

#define HEALTH_TIMEOUT_MS 1000

void http_serve_version(struct hreq *r)
{
    if (strcmp(r->method, "GET") != 0) {
        http_method_not_allowed(r, "GET");
        return;
    }
    char body[160];
    int n = snprintf(body, sizeof(body), "{\"etcdserver\":\"%s\",\"etcdcluster\":\"%s\"}",
                     http_cfg.server_version ? http_cfg.server_version : "3.4.0",
                     http_cfg.cluster_version ? http_cfg.cluster_version : "3.4.0");
    hreq_respond(r, 200, "application/json", NULL, body, (size_t)n);
}

enum kind { K_HEALTH, K_LIVEZ, K_READYZ };

struct probe {
    struct hreq *r;
    enum kind kind;
    bool serializable;
    struct lcall *lc;
    uv_timer_t timer;
    bool timer_on;
    bool answered;
    bool alarm; /* failed for an alarm: etcd 3.4 does not count it */
};

static void probe_closed(uv_handle_t *h)
{
    free(h->data);
}

static void probe_end(struct probe *p)
{
    if (p->timer_on) {
        uv_timer_stop(&p->timer);
        uv_close((uv_handle_t *)&p->timer, probe_closed);
    } else {
        free(p);
    }
}

static void answer(struct probe *p, bool ok, const char *reason)
{
    if (p->answered)
        return;
    p->answered = true;
    struct hreq *r = p->r;
    p->r = NULL;
    if (r == NULL)
        return;
    r->on_abort = NULL;
    char body[256];
    int n;
    if (!ok)
        log_warn("http", "/%s error: %s (status code 503)",
                 p->kind == K_HEALTH ? "health" : p->kind == K_LIVEZ ? "livez" : "readyz", reason);
    if (p->kind == K_HEALTH) {
        /* etcd 3.4's checkHealth counts a success, and a failure for want
         * of a leader or of a read; one for an alarm returns uncounted */
        if (ok || !p->alarm)
            metrics_inc(ok ? http_metrics.health_success : http_metrics.health_failures);
        /* etcd 3.4 logs the reason; its body says only true or false */
        n = snprintf(body, sizeof(body), "{\"health\":\"%s\"}", ok ? "true" : "false");
        if (ok) {
            /* Go sniffs the type of what etcd writes: text */
            hreq_respond(r, 200, "text/plain; charset=utf-8", NULL, body, (size_t)n);
        } else {
            body[n++] = '\n'; /* http.Error adds it */
            hreq_respond(r, 503, "text/plain; charset=utf-8",
                         "X-Content-Type-Options: nosniff\r\n", body, (size_t)n);
        }
        return;
    }
    /* etcd 3.6's /livez and /readyz: "ok", or the failed check */
    if (ok)
        n = snprintf(body, sizeof(body), "ok");
    else
        n = snprintf(body, sizeof(body), "[-]%s failed: reason withheld\n", reason);
    hreq_respond(r, ok ? 200 : 503, "text/plain; charset=utf-8",
                 "X-Content-Type-Options: nosniff\r\n", body, (size_t)n);
}

static void on_timeout(uv_timer_t *t)
{
    struct probe *p = t->data;
    lcall_cancel(p->lc);
    p->lc = NULL;
    answer(p, false, p->kind == K_HEALTH ? "QGET ERROR:context deadline exceeded"
                                         : "linearizable_read");
    probe_end(p);
}

static void on_range(void *arg, int status, const char *msg, const uint8_t *resp, size_t len)
{
    struct probe *p = arg;
    p->lc = NULL;
    bool ok = status == GRPC_STATUS_OK || status == GRPC_STATUS_PERMISSION_DENIED ||
              status == GRPC_STATUS_INVALID_ARGUMENT; /* auth: "user name is empty" */
    char reason[200];
    snprintf(reason, sizeof(reason), "QGET ERROR:%s", msg ? msg : "");
    answer(p, ok, p->kind == K_HEALTH ? reason : "linearizable_read");
    probe_end(p);
}

static void on_status(void *arg, int status, const char *msg, const uint8_t *resp, size_t len)
{
    struct probe *p = arg;
    p->lc = NULL;
    if (p->r == NULL || p->answered) {
        probe_end(p);
        return;
    }
    Etcdserverpb__StatusResponse *st =
        status == GRPC_STATUS_OK
            ? etcdserverpb__status_response__unpack(NULL, len, resp)
            : NULL;
    if (st == NULL) {
        answer(p, false, p->kind == K_HEALTH ? "STATUS ERROR" : "serializable_read");
        probe_end(p);
        return;
    }
    /* errors are the alarms, "memberID:N alarm:NAME " */
    char alarm[32] = "";
    for (size_t i = 0; i < st->n_errors && !alarm[0]; i++) {
        const char *a = strstr(st->errors[i], "alarm:");
        if (a == NULL)
            continue;
        a += 6;
        size_t n = strcspn(a, " ");
        if (p->kind == K_LIVEZ && (n != 7 || memcmp(a, "CORRUPT", 7) != 0))
            continue; /* 3.6: only corruption makes a member not live */
        if (p->r != NULL && hreq_query_has(p->r, "exclude", a, n))
            continue; /* ?exclude=NOSPACE (may repeat; case matters, as etcd) */
        snprintf(alarm, sizeof(alarm), "%.*s", (int)(n < 31 ? n : 31), a);
    }
    bool leader = st->leader != 0;
    char reason[64];
    if (alarm[0]) {
        snprintf(reason, sizeof(reason), p->kind == K_HEALTH ? "ALARM %s" : "alarm %s", alarm);
        etcdserverpb__status_response__free_unpacked(st, NULL);
        p->alarm = true;
        answer(p, false, p->kind == K_HEALTH ? reason : "data_corruption");
        probe_end(p);
        return;
    }
    etcdserverpb__status_response__free_unpacked(st, NULL);
    if (p->kind == K_LIVEZ) {
        answer(p, true, "");
        probe_end(p);
        return;
    }
    if (!leader) {
        answer(p, false, p->kind == K_HEALTH ? "RAFT NO LEADER" : "leader");
        probe_end(p);
        return;
    }
    Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rr.key.data = (uint8_t *)"health";
    rr.key.len = 6;
    rr.limit = 1;
    rr.keys_only = true;
    rr.serializable = p->serializable;
    uv_timer_start(&p->timer, on_timeout, HEALTH_TIMEOUT_MS, 0);
    int rv = lcall_unary(hreq_server(p->r), "/etcdserverpb.KV/Range", &rr.base, NULL, on_range, p,
                         &p->lc);
    if (rv != 0) {
        answer(p, false, "QGET ERROR:server closing");
        probe_end(p);
    }
}

static void probe_abort(struct hreq *r)
{
    struct probe *p = r->ctx;
    p->r = NULL;
    lcall_cancel(p->lc);
    p->lc = NULL;
    probe_end(p);
}

void http_serve_health(struct hreq *r, const char *which)
{
    if (strcmp(r->method, "GET") != 0) {
        http_method_not_allowed(r, "GET");
        return;
    }
    struct probe *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        hreq_respond(r, 500, NULL, NULL, NULL, 0);
        return;
    }
    p->r = r;
    p->kind = strcmp(which, "health") == 0 ? K_HEALTH
              : strcmp(which, "livez") == 0 ? K_LIVEZ
                                            : K_READYZ;
    char v[16];
    p->serializable = hreq_query_get(r, "serializable", v, sizeof(v)) >= 0 &&
                      strcmp(v, "true") == 0;
    uv_timer_init(grpc_server_loop(hreq_server(r)), &p->timer);
    p->timer.data = p;
    p->timer_on = true;
    r->ctx = p;
    r->on_abort = probe_abort;
    Etcdserverpb__StatusRequest sr = ETCDSERVERPB__STATUS_REQUEST__INIT;
    int rv = lcall_unary(hreq_server(r), "/etcdserverpb.Maintenance/Status", &sr.base, NULL,
                         on_status, p, &p->lc);
    if (rv != 0) {
        answer(p, false, "server closing");
        probe_end(p);
    }
}
