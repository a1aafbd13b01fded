/* tests/zk/test_zk_conn.c: src/zk/conn.c, the ZooKeeper listener and its
 * connections on a libuv loop: packets cut out of a stream that arrives a
 * byte at a time, the ConnectRequest decoded, later packets handed whole,
 * answers framed, a four-letter word answered and the connection closed,
 * a packet over the limit and a malformed ConnectRequest closing it, and
 * on_close always from the loop. Real TCP on 127.0.0.1. */
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

static const struct zk_conn_handler handler = {h_connect, h_packet, h_4lw, h_close};

struct env {
    uv_loop_t loop;
    zk_listener *l;
    int port;
};

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

static void setup(struct env *e, size_t max)
{
    memset(&seen, 0, sizeof(seen));
    uv_loop_init(&e->loop);
    cr_assert_eq(zk_listener_new(&e->loop, &handler, NULL, max, &e->l), 0);
    cr_assert_eq(zk_listener_adopt(e->l, listen_fd(&e->port), NULL), 0);
    cr_assert_eq(zk_listener_start(e->l), 0);
}

static void teardown(struct env *e)
{
    zk_listener_close(e->l, NULL, NULL);
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

Test(zk_conn, byte_at_a_time_then_answers_framed)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER);
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

Test(zk_conn, four_letter_word)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER);
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

Test(zk_conn, refusals_close_the_connection)
{
    struct env e;
    setup(&e, 1000);
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

Test(zk_conn, close_with_connections_open)
{
    struct env e;
    setup(&e, JUTE_MAX_BUFFER);
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
