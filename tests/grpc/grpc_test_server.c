/* tests/grpc/grpc_test_server.c: a gRPC server built on src/grpc with test
 * methods, driven by the Python (grpcio) and h2load tests. It listens on
 * 127.0.0.1 (a free port unless --port is given), prints the port on
 * stdout, and exits when stdin closes or on SIGTERM.
 *
 * Methods (service test.Echo; messages are raw bytes):
 *   Unary         echo the request
 *   Later         echo the request from a 20 ms timer
 *   Fail          finish with status = first byte, message = the rest
 *   ServerStream  request "N" or "N,SIZE": send N messages "i" (padded with
 *                 'x' to SIZE bytes), paced with grpc_call_pending_bytes
 *   Bidi          echo each message; OK when the client half-closes
 *   Sum           client streaming: decimal integers, answers their sum
 *   Stats         "live=L closes=C": calls holding server state, on_close
 *                 count of those calls
 *
 * Usage: grpc-test-server [--max-recv BYTES] [--port PORT]
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "base/err.h"
#include "grpc/grpc.h"

enum { K_LATER, K_STREAM, K_BIDI, K_SUM };

/* per-call state of the methods that outlive on_message */
struct cstate {
    uv_timer_t timer;
    int timer_on; /* timer initialized (must be closed) */
    grpc_call *call;
    int kind;
    long n, i;
    size_t size;
    int64_t sum;
    uint8_t *req;
    size_t req_len;
};

static uv_loop_t *loop;
static grpc_server *server;
static uv_async_t stop_async;
static uv_signal_t sigterm;
static long live_calls, closes;

static void free_state_cb(uv_handle_t *h)
{
    struct cstate *s = h->data;
    free(s->req);
    free(s);
}

static struct cstate *state_new(grpc_call *call, int kind)
{
    struct cstate *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->call = call;
    s->kind = kind;
    grpc_call_set_data(call, s);
    live_calls++;
    return s;
}

/* on_close for every method with state: forget the call, and free the
 * state now or once its timer handle is closed. */
static void stateful_close(grpc_call *call)
{
    struct cstate *s = grpc_call_get_data(call);
    if (s == NULL)
        return;
    live_calls--;
    closes++;
    s->call = NULL;
    grpc_call_set_data(call, NULL);
    if (s->timer_on) {
        uv_timer_stop(&s->timer);
        s->timer.data = s;
        uv_close((uv_handle_t *)&s->timer, free_state_cb);
    } else {
        free(s->req);
        free(s);
    }
}

static void unary_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    grpc_call_send(call, msg, len);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void later_fire(uv_timer_t *t)
{
    struct cstate *s = t->data;
    if (s->call == NULL)
        return;
    grpc_call_send(s->call, s->req, s->req_len);
    grpc_call_finish(s->call, GRPC_STATUS_OK, NULL);
}

static void later_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct cstate *s = state_new(call, K_LATER);
    if (s == NULL || (s->req = malloc(len ? len : 1)) == NULL) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    memcpy(s->req, msg, len);
    s->req_len = len;
    uv_timer_init(loop, &s->timer);
    s->timer_on = 1;
    s->timer.data = s;
    uv_timer_start(&s->timer, later_fire, 20, 0);
}

static void fail_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    char text[4096];
    int status = len > 0 ? msg[0] : GRPC_STATUS_UNKNOWN;
    size_t n = len > 0 ? len - 1 : 0;
    if (n >= sizeof(text))
        n = sizeof(text) - 1;
    memcpy(text, msg + (len > 0), n);
    text[n] = 0;
    grpc_call_finish(call, status, text);
}

/* stream_pump sends messages while less than 32 KiB wait in the queue,
 * then comes back from a timer: a producer that respects backpressure. */
static void stream_pump(uv_timer_t *t)
{
    struct cstate *s = t->data;
    char m[65536];
    while (s->call != NULL && s->i < s->n) {
        if (grpc_call_pending_bytes(s->call) > 32 * 1024) {
            uv_timer_start(&s->timer, stream_pump, 1, 0);
            return;
        }
        int k = snprintf(m, sizeof(m), "%ld", s->i);
        size_t len = (size_t)k;
        if (s->size > len) {
            memset(m + k, 'x', s->size - len);
            len = s->size;
        }
        if (grpc_call_send(s->call, (const uint8_t *)m, len) != 0)
            return;
        s->i++;
    }
    if (s->call != NULL)
        grpc_call_finish(s->call, GRPC_STATUS_OK, NULL);
}

static void stream_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    char req[64];
    size_t n = len < sizeof(req) - 1 ? len : sizeof(req) - 1;
    memcpy(req, msg, n);
    req[n] = 0;
    struct cstate *s = state_new(call, K_STREAM);
    if (s == NULL) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->n = strtol(req, NULL, 10);
    char *comma = strchr(req, ',');
    s->size = comma ? strtoul(comma + 1, NULL, 10) : 0;
    if (s->size > 60000)
        s->size = 60000;
    uv_timer_init(loop, &s->timer);
    s->timer_on = 1;
    s->timer.data = s;
    stream_pump(&s->timer);
}

static void bidi_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    if (grpc_call_get_data(call) == NULL)
        state_new(call, K_BIDI);
    grpc_call_send(call, msg, len);
}

static void bidi_half_close(grpc_call *call)
{
    if (grpc_call_get_data(call) == NULL)
        state_new(call, K_BIDI);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void sum_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct cstate *s = grpc_call_get_data(call);
    if (s == NULL && (s = state_new(call, K_SUM)) == NULL) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    char num[32];
    size_t n = len < sizeof(num) - 1 ? len : sizeof(num) - 1;
    memcpy(num, msg, n);
    num[n] = 0;
    s->sum += strtoll(num, NULL, 10);
}

static void sum_half_close(grpc_call *call)
{
    struct cstate *s = grpc_call_get_data(call);
    char out[32];
    int k = snprintf(out, sizeof(out), "%" PRId64, s ? s->sum : 0);
    grpc_call_send(call, (const uint8_t *)out, (size_t)k);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void stats_msg(grpc_call *call, const uint8_t *msg, size_t len)
{
    char out[64];
    int k = snprintf(out, sizeof(out), "live=%ld closes=%ld", live_calls, closes);
    grpc_call_send(call, (const uint8_t *)out, (size_t)k);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static const struct grpc_method methods[] = {
    {"/test.Echo/Unary", GRPC_UNARY, unary_msg, NULL, NULL},
    {"/test.Echo/Later", GRPC_UNARY, later_msg, NULL, stateful_close},
    {"/test.Echo/Fail", GRPC_UNARY, fail_msg, NULL, NULL},
    {"/test.Echo/ServerStream", GRPC_SERVER_STREAMING, stream_msg, NULL, stateful_close},
    {"/test.Echo/Bidi", GRPC_BIDI_STREAMING, bidi_msg, bidi_half_close, stateful_close},
    {"/test.Echo/Sum", GRPC_CLIENT_STREAMING, sum_msg, sum_half_close, stateful_close},
    {"/test.Echo/Stats", GRPC_UNARY, stats_msg, NULL, NULL},
};

static void on_server_closed(void *arg)
{
    uv_close((uv_handle_t *)&stop_async, NULL);
    uv_close((uv_handle_t *)&sigterm, NULL);
}

static void stop(void)
{
    static int stopping;
    if (stopping)
        return;
    stopping = 1;
    grpc_server_close(server, on_server_closed, NULL);
}

static void on_stop_async(uv_async_t *a)
{
    stop();
}

static void on_sigterm(uv_signal_t *s, int sig)
{
    stop();
}

/* stdin_watch blocks in read() until stdin reaches EOF, then wakes the
 * loop: works whether stdin is a pipe, a file or a terminal. */
static void *stdin_watch(void *arg)
{
    char b[256];
    for (;;) {
        ssize_t n = read(0, b, sizeof(b));
        if (n == 0 || (n < 0 && errno != EINTR))
            break;
    }
    uv_async_send(&stop_async);
    return NULL;
}

int main(int argc, char **argv)
{
    struct grpc_server_options opts = {.max_recv_msg_size = 1024 * 1024};
    int port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--max-recv") == 0)
            opts.max_recv_msg_size = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
    }
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    int rv =
        grpc_server_new(loop, methods, sizeof(methods) / sizeof(methods[0]), &opts, NULL, &server);
    if (rv != 0) {
        fprintf(stderr, "grpc_server_new: %s\n", uv_strerror(rv));
        return 1;
    }
    int bound = 0;
    rv = grpc_server_listen(server, "127.0.0.1", port, &bound);
    if (rv != 0) {
        fprintf(stderr, "grpc_server_listen: %s\n", uv_strerror(rv));
        return 1;
    }
    uv_async_init(loop, &stop_async, on_stop_async);
    uv_signal_init(loop, &sigterm);
    uv_signal_start(&sigterm, on_sigterm, SIGTERM);
    pthread_t th;
    pthread_create(&th, NULL, stdin_watch, NULL);
    pthread_detach(th);
    printf("%d\n", bound);
    fflush(stdout);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    fprintf(stderr, "grpc-test-server: exit, live=%ld closes=%ld\n", live_calls, closes);
    return 0;
}
