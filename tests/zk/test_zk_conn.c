/* tests/zk/test_zk_conn.c: src/zk/conn.c, the ZooKeeper listener and its
 * connections on a libuv loop: packets cut out of a stream that arrives a
 * byte at a time, the ConnectRequest decoded, later packets handed whole,
 * answers framed, a four-letter word answered and the connection closed,
 * a packet over the limit and a malformed ConnectRequest closing it, and
 * on_close always from the loop. Real TCP on 127.0.0.1.
 *
 * Each case runs twice: with the handler's own connections, and relayed
 * (zk.h, "Relaying"): a relaying listener owns the sockets and the
 * handler's listener holds relayed connections, the two sides reaching
 * each other only through queues drained once per loop pass, as the
 * front loops and the core do (server/front.c), so every post is
 * asynchronous. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "zk/zk.h"

struct seen {
    int connects, packets, closes, fourlw;
    uint8_t arg[16]; /* what came after the last four-letter word */
    size_t arg_len;
    int32_t timeout;
    uint8_t last[64];
    size_t last_len;
    zk_conn *held; /* the connection the handler paused ("hold") */
    bool in_send; /* set while the test calls zk_conn_send/close */
    bool closed_inside;
};
static struct seen seen;

static void h_connect(zk_conn *c, const struct zk_connect_req *req)
{
    seen.connects++;
    seen.timeout = req->timeout;
    /* answer with a 4-byte packet */
    seen.in_send = true;
    zk_conn_send(c, (const uint8_t *)"okay", 4);
    seen.in_send = false;
}

static void h_packet(zk_conn *c, const uint8_t *p, size_t n)
{
    seen.packets++;
    seen.last_len = n < sizeof(seen.last) ? n : sizeof(seen.last);
    memcpy(seen.last, p, seen.last_len);
    if (n == 4 && memcmp(p, "hold", 4) == 0) {
        seen.held = c;
        zk_conn_pause(c, true);
    }
    if (n == 4 && memcmp(p, "bye!", 4) == 0) {
        seen.in_send = true;
        zk_conn_close(c);
        seen.in_send = false;
    }
}

static void h_4lw(zk_conn *c, const char *cmd, const uint8_t *arg, size_t n_arg,
                  struct buf *out)
{
    (void)c;
    seen.fourlw++;
    seen.arg_len = n_arg;
    memcpy(seen.arg, arg, n_arg < sizeof(seen.arg) ? n_arg : sizeof(seen.arg));
    buf_append(out, cmd, 4);
    buf_append(out, " answered\n", 10);
}

static void h_close(zk_conn *c)
{
    (void)c;
    seen.closes++;
    if (seen.in_send)
        seen.closed_inside = true;
}

static struct zk_served served; /* what on_served was given, summed */
static int served_calls;

static void h_served(zk_conn *c, const struct zk_served *sv)
{
    (void)c;
    served_calls++;
    served.packets += sv->packets;
    served.bytes_in += sv->bytes_in;
    served.bytes_out += sv->bytes_out;
    served.last_op = sv->last_op;
    served.last_xid = sv->last_xid;
    served.last_zxid = sv->last_zxid;
}

static const struct zk_conn_handler handler = {h_connect, h_packet, h_4lw, h_close, NULL, h_served};

struct env {
    uv_loop_t loop;
    zk_listener *l;  /* the handler's */
    zk_listener *sl; /* relayed: the sockets' (relaying), else NULL */
    uv_check_t pump; /* relayed: drains the two queues */
    int port;
    bool l_closed, sl_closed;
};

/* ---- the relay between the two listeners (relayed runs) ---- */

struct pair {
    zk_conn *sock; /* the sockets' side; NULL once closed */
    zk_conn *rel;  /* the handler's side; NULL before and after */
};

enum { OP_OPEN, OP_DATA, OP_GONE, OP_SEND, OP_PAUSE, OP_CLOSE, OP_RELEASE };

struct op {
    struct op *next;
    int kind;
    struct pair *p;
    bool paused;
    size_t len;
    uint8_t data[];
};

/* to the handler's side and to the sockets' side, each in order */
static struct op *q_in, **q_in_tail = &q_in, *q_out, **q_out_tail = &q_out;
static int relay_sends; /* bytes the handler's side sent through the relay */

static struct op *push(struct op ***tail, int kind, struct pair *p, const void *d, size_t len)
{
    struct op *o = calloc(1, sizeof(*o) + len);
    cr_assert_not_null(o);
    o->kind = kind;
    o->p = p;
    o->len = len;
    if (len)
        memcpy(o->data, d, len);
    **tail = o;
    *tail = &o->next;
    return o;
}

static int r_send(void *ctx, const uint8_t *p, size_t len)
{
    relay_sends += (int)len;
    push(&q_out_tail, OP_SEND, ctx, p, len);
    return 0;
}
static void r_pause(void *ctx, bool paused)
{
    push(&q_out_tail, OP_PAUSE, ctx, NULL, 0)->paused = paused;
}
static void r_close(void *ctx)
{
    push(&q_out_tail, OP_CLOSE, ctx, NULL, 0);
}
static const struct zk_relay relay = {r_send, r_pause, r_close};

static void s_bytes(zk_conn *c, const uint8_t *p, size_t n)
{
    struct pair *pr = zk_conn_get_data(c);
    if (pr == NULL) {
        pr = calloc(1, sizeof(*pr));
        pr->sock = c;
        zk_conn_set_data(c, pr);
        push(&q_in_tail, OP_OPEN, pr, NULL, 0);
    }
    push(&q_in_tail, OP_DATA, pr, p, n);
}
static void s_close(zk_conn *c)
{
    struct pair *pr = zk_conn_get_data(c);
    if (pr == NULL)
        return;
    pr->sock = NULL;
    push(&q_in_tail, OP_GONE, pr, NULL, 0);
}
static const struct zk_conn_handler relaying = {NULL, NULL, NULL, s_close, s_bytes, NULL};

static struct op *take(struct op **head, struct op ***tail)
{
    struct op *o = *head;
    *head = NULL;
    *tail = head;
    return o;
}

static void on_pump(uv_check_t *h)
{
    struct env *e = h->data;
    for (struct op *o = take(&q_in, &q_in_tail), *n; o != NULL; o = n) {
        n = o->next;
        struct pair *pr = o->p;
        if (o->kind == OP_OPEN) {
            if (e->l_closed || zk_conn_relayed(e->l, &relay, pr, "127.0.0.1:1", "127.0.0.1",
                                               NULL, &pr->rel) != 0)
                push(&q_out_tail, OP_CLOSE, pr, NULL, 0);
        } else if (o->kind == OP_DATA && pr->rel != NULL) {
            zk_conn_relay_input(pr->rel, o->data, o->len);
        } else if (o->kind == OP_GONE) {
            zk_conn *c = pr->rel;
            pr->rel = NULL;
            if (c != NULL)
                zk_conn_relay_gone(c);
            push(&q_out_tail, OP_RELEASE, pr, NULL, 0);
        }
        free(o);
    }
    for (struct op *o = take(&q_out, &q_out_tail), *n; o != NULL; o = n) {
        n = o->next;
        struct pair *pr = o->p;
        if (o->kind == OP_RELEASE)
            free(pr);
        else if (pr->sock == NULL)
            ; /* gone: its GONE is on the way */
        else if (o->kind == OP_SEND)
            zk_conn_write(pr->sock, o->data, o->len);
        else if (o->kind == OP_PAUSE)
            zk_conn_pause(pr->sock, o->paused);
        else if (o->kind == OP_CLOSE)
            zk_conn_close(pr->sock);
        free(o);
    }
}

static void on_l_closed(void *arg)
{
    ((struct env *)arg)->l_closed = true;
}
static void on_sl_closed(void *arg)
{
    ((struct env *)arg)->sl_closed = true;
}

static int listen_fd(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    socklen_t l = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static void setup(struct env *e, size_t max, bool relayed)
{
    memset(&seen, 0, sizeof(seen));
    memset(&served, 0, sizeof(served));
    served_calls = 0;
    memset(e, 0, sizeof(*e));
    relay_sends = 0;
    uv_loop_init(&e->loop);
    cr_assert_eq(zk_listener_new(&e->loop, &handler, NULL, max, &e->l), 0);
    zk_listener *owner = e->l;
    if (relayed) {
        cr_assert_eq(zk_listener_new(&e->loop, &relaying, NULL, max, &e->sl), 0);
        owner = e->sl;
        uv_check_init(&e->loop, &e->pump);
        e->pump.data = e;
        uv_check_start(&e->pump, on_pump);
    }
    cr_assert_eq(zk_listener_adopt(owner, listen_fd(&e->port), NULL), 0);
    cr_assert_eq(zk_listener_start(owner), 0);
}

static void teardown(struct env *e)
{
    /* the handler's side first, as the server closes its ZooKeeper
     * service before the front loops */
    zk_listener_close(e->l, on_l_closed, e);
    if (e->sl != NULL) {
        for (int i = 0; i < 2000 && !e->l_closed; i++)
            uv_run(&e->loop, UV_RUN_NOWAIT);
        cr_assert(e->l_closed, "the relayed connections' ends came back");
        zk_listener_close(e->sl, on_sl_closed, e);
        for (int i = 0; i < 2000 && !e->sl_closed; i++)
            uv_run(&e->loop, UV_RUN_NOWAIT);
        cr_assert(e->sl_closed);
        on_pump(&e->pump); /* the releases */
        cr_assert_null(q_in);
        cr_assert_null(q_out);
        uv_close((uv_handle_t *)&e->pump, NULL);
    }
    uv_run(&e->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&e->loop), 0);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* spin the loop until |cond| or about two seconds */
#define SPIN(e, cond)                                                                              \
    do {                                                                                           \
        for (int i_ = 0; i_ < 2000 && !(cond); i_++) {                                             \
            uv_run(&(e)->loop, UV_RUN_NOWAIT);                                                     \
            usleep(1000);                                                                          \
        }                                                                                          \
    } while (0)

static size_t connect_request(uint8_t *p)
{
    /* length 45, protocol 0, zxid 0, timeOut 30000, session 0, 16-byte
     * password, readOnly false */
    memset(p, 0, 49);
    p[3] = 45;
    p[4 + 14] = 0x75;
    p[4 + 15] = 0x30;
    p[4 + 27] = 16;
    return 49;
}

static bool readable(int fd, uint8_t *out, size_t want)
{
    size_t got = 0;
    for (int i = 0; i < 2000 && got < want; i++) {
        ssize_t n = recv(fd, out + got, want - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0)
            return false;
        else
            usleep(1000);
    }
    return got == want;
}

static void find_conn(zk_conn *c, void *arg)
{
    *(zk_conn **)arg = c;
}

static void byte_at_a_time_then_answers_framed(bool relayed)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER, relayed);
    int fd = dial(e.port);
    uint8_t req[64];
    size_t n = connect_request(req);
    /* a packet after the connect, in the same stream */
    const uint8_t pkt[] = {0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 11};
    memcpy(req + n, pkt, sizeof(pkt));
    n += sizeof(pkt);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(send(fd, req + i, 1, 0), 1);
        uv_run(&e.loop, UV_RUN_NOWAIT);
    }
    SPIN(&e, seen.packets == 1);
    cr_assert_eq(seen.connects, 1);
    cr_assert_eq(seen.timeout, 30000);
    cr_assert_eq(seen.packets, 1);
    cr_assert_eq(seen.last_len, 8);
    cr_assert_arr_eq(seen.last, pkt + 4, 8);
    uint8_t ans[8];
    SPIN(&e, false);
    cr_assert(readable(fd, ans, 8));
    cr_assert_arr_eq(ans, ((uint8_t[]){0, 0, 0, 4, 'o', 'k', 'a', 'y'}), 8);
    /* the handler closes: on_close comes from the loop, not inside */
    const uint8_t bye[] = {0, 0, 0, 4, 'b', 'y', 'e', '!'};
    send(fd, bye, sizeof(bye), 0);
    SPIN(&e, seen.closes == 1);
    cr_assert_eq(seen.closes, 1);
    cr_assert_not(seen.closed_inside);
    close(fd);
    teardown(&e);
}

static void four_letter_word(bool relayed)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER, relayed);
    int fd = dial(e.port);
    send(fd, "srvr", 4, 0);
    SPIN(&e, seen.closes == 1);
    cr_assert_eq(seen.fourlw, 1);
    uint8_t out[14];
    cr_assert(readable(fd, out, 14));
    cr_assert_arr_eq(out, "srvr answered\n", 14);
    uint8_t more;
    SPIN(&e, false);
    cr_assert_eq(recv(fd, &more, 1, 0), 0, "closed after the answer");
    cr_assert_eq(seen.connects, 0);
    cr_assert_eq(seen.arg_len, 0);
    close(fd);
    /* stmk's mask comes in the same read as the word: the handler gets it */
    fd = dial(e.port);
    const uint8_t msg[12] = {'s', 't', 'm', 'k', 0, 0, 0, 0, 0, 0, 1, 2};
    send(fd, msg, sizeof(msg), 0);
    SPIN(&e, seen.closes == 2);
    cr_assert_eq(seen.fourlw, 2);
    cr_assert_eq(seen.arg_len, 8);
    cr_assert_arr_eq(seen.arg, msg + 4, 8);
    close(fd);
    teardown(&e);
}

static void refusals_close_the_connection(bool relayed)
{
    struct env e;
    setup(&e, 1000, relayed);
    /* a packet over the limit */
    int fd = dial(e.port);
    const uint8_t big[] = {0, 0, 0x10, 0};
    send(fd, big, 4, 0);
    SPIN(&e, seen.closes == 1);
    cr_assert_eq(seen.closes, 1);
    cr_assert_eq(seen.connects, 0);
    close(fd);
    /* a ConnectRequest cut short inside its frame */
    fd = dial(e.port);
    const uint8_t bad[] = {0, 0, 0, 6, 0, 0, 0, 0, 0, 0};
    send(fd, bad, sizeof(bad), 0);
    SPIN(&e, seen.closes == 2);
    cr_assert_eq(seen.closes, 2);
    cr_assert_eq(seen.connects, 0);
    close(fd);
    /* a client that goes away: on_close too */
    fd = dial(e.port);
    uint8_t req[64];
    size_t n = connect_request(req);
    send(fd, req, n, 0);
    SPIN(&e, seen.connects == 1);
    close(fd);
    SPIN(&e, seen.closes == 3);
    cr_assert_eq(seen.closes, 3);
    teardown(&e);
}

static void close_with_connections_open(bool relayed)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER, relayed);
    int fds[3];
    uint8_t req[64];
    size_t n = connect_request(req);
    for (int i = 0; i < 3; i++) {
        fds[i] = dial(e.port);
        send(fds[i], req, n, 0);
    }
    SPIN(&e, seen.connects == 3);
    cr_assert_eq(zk_listener_conns(e.l), 3);
    teardown(&e); /* every connection's on_close, every handle closed */
    cr_assert_eq(seen.closes, 3);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

/* a handler that pauses a connection gets nothing more from it until it
 * resumes, then what came meanwhile, in order (relayed: what was already
 * on its way when the socket's side heard of the pause too) */
static void pause_holds_packets(bool relayed)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER, relayed);
    int fd = dial(e.port);
    uint8_t req[96];
    size_t n = connect_request(req);
    const uint8_t hold[] = {0, 0, 0, 4, 'h', 'o', 'l', 'd'};
    const uint8_t next[] = {0, 0, 0, 4, 'n', 'e', 'x', 't'};
    memcpy(req + n, hold, 8);
    memcpy(req + n + 8, next, 8); /* in the same read as the hold */
    send(fd, req, n + 16, 0);
    SPIN(&e, seen.held != NULL);
    cr_assert_not_null(seen.held);
    cr_assert_eq(seen.packets, 1);
    const uint8_t last[] = {0, 0, 0, 4, 'l', 'a', 's', 't'};
    send(fd, last, 8, 0);
    SPIN(&e, seen.packets > 1); /* two seconds: nothing comes */
    cr_assert_eq(seen.packets, 1, "paused: nothing handed on");
    zk_conn_pause(seen.held, false);
    SPIN(&e, seen.packets == 3);
    cr_assert_eq(seen.packets, 3);
    cr_assert_arr_eq(seen.last, "last", 4, "in order, the last one last");
    close(fd);
    SPIN(&e, seen.closes == 1);
    cr_assert_eq(seen.closes, 1);
    teardown(&e);
}

/* what the sockets' side answered itself (the front loop's reads) counts
 * in the relayed connection's figures beside what it handled, and reaches
 * the handler; nothing once the connection is closing */
Test(zk_conn_relayed, served_reports_count)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER, true);
    int fd = dial(e.port);
    uint8_t req[64];
    size_t n = connect_request(req);
    const uint8_t pkt[] = {0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 11};
    memcpy(req + n, pkt, sizeof(pkt));
    send(fd, req, n + sizeof(pkt), 0);
    SPIN(&e, seen.packets == 1);
    cr_assert_eq(seen.packets, 1);
    /* the relayed connection: the only one of the handler's listener */
    zk_conn *c = NULL;
    zk_conn_foreach(e.l, find_conn, &c);
    cr_assert_not_null(c);
    const struct zk_conn_stats before = *zk_conn_stats(c);
    struct zk_served sv = {3, 60, 300, 4, 17, 1234};
    zk_conn_relay_served(c, &sv);
    struct zk_served sv2 = {2, 40, 100, 3, 18, 1240};
    zk_conn_relay_served(c, &sv2);
    const struct zk_conn_stats *st = zk_conn_stats(c);
    cr_assert_eq(st->packets_in, before.packets_in + 5);
    cr_assert_eq(st->packets_out, before.packets_out + 5);
    cr_assert_eq(st->bytes_in, before.bytes_in + 100);
    cr_assert_eq(st->bytes_out, before.bytes_out + 400);
    cr_assert_eq(served_calls, 2);
    cr_assert_eq(served.packets, 5);
    cr_assert_eq(served.last_op, 3);
    cr_assert_eq(served.last_xid, 18);
    cr_assert_eq(served.last_zxid, 1240);
    zk_conn_close(c);
    zk_conn_relay_served(c, &sv);
    cr_assert_eq(served_calls, 2, "a closing connection takes no more");
    SPIN(&e, seen.closes == 1);
    cr_assert_eq(seen.closes, 1);
    close(fd);
    teardown(&e);
}

Test(zk_conn, pause_holds_packets)
{
    pause_holds_packets(false);
}
Test(zk_conn_relayed, pause_holds_packets)
{
    pause_holds_packets(true);
}
Test(zk_conn, byte_at_a_time_then_answers_framed)
{
    byte_at_a_time_then_answers_framed(false);
}
Test(zk_conn, four_letter_word)
{
    four_letter_word(false);
}
Test(zk_conn, refusals_close_the_connection)
{
    refusals_close_the_connection(false);
}
Test(zk_conn, close_with_connections_open)
{
    close_with_connections_open(false);
}
Test(zk_conn_relayed, byte_at_a_time_then_answers_framed)
{
    byte_at_a_time_then_answers_framed(true);
    cr_assert_gt(relay_sends, 0, "the answers went through the relay");
}
Test(zk_conn_relayed, four_letter_word)
{
    four_letter_word(true);
}
Test(zk_conn_relayed, refusals_close_the_connection)
{
    refusals_close_the_connection(true);
}
Test(zk_conn_relayed, close_with_connections_open)
{
    close_with_connections_open(true);
}

/* ZooKeeper's 4lw.commands.whitelist, as FourLetterCommands reads it
 * (checked against Apache ZooKeeper 3.8: " ruok , stat,bogus" lets ruok,
 * stat and srvr run and refuses mntr and isro) */
Test(zk_conn, four_letter_word_whitelist)
{
    cr_assert(zk_4lw_allowed("srvr", "srvr"));
    cr_assert(!zk_4lw_allowed("srvr", "ruok"));
    cr_assert(zk_4lw_allowed("", "srvr"), "srvr runs whatever the list");
    cr_assert(zk_4lw_allowed("ruok", "srvr"));
    cr_assert(zk_4lw_allowed(" ruok , stat,bogus", "ruok"));
    cr_assert(zk_4lw_allowed(" ruok , stat,bogus", "stat"));
    cr_assert(!zk_4lw_allowed(" ruok , stat,bogus", "mntr"));
    cr_assert(!zk_4lw_allowed(" ruok , stat,bogus", "isro"));
    cr_assert(!zk_4lw_allowed("ruok,", "ruo"));
    cr_assert(!zk_4lw_allowed("ruokx", "ruok"));
    cr_assert(zk_4lw_allowed("*", "mntr"));
    cr_assert(zk_4lw_allowed("ruok, * ", "envi"));
    cr_assert(!zk_4lw_allowed("*", "xxxx"), "* means the words ZooKeeper knows");
    cr_assert(!zk_4lw_allowed(NULL, "ruok"));
}
