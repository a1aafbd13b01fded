/* tests/unit/test_srv.c: server/srv.c, DNS SRV answers and the initial
 * cluster built from them (--discovery-srv). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "server/srv.h"

/* ---- building DNS messages ---- */

struct msg {
    uint8_t b[2048];
    size_t n;
};

static void put8(struct msg *m, uint8_t v)
{
    m->b[m->n++] = v;
}
static void put16(struct msg *m, uint16_t v)
{
    put8(m, (uint8_t)(v >> 8));
    put8(m, (uint8_t)v);
}
static void put_name(struct msg *m, const char *name)
{
    while (*name) {
        const char *dot = strchr(name, '.');
        size_t l = dot ? (size_t)(dot - name) : strlen(name);
        put8(m, (uint8_t)l);
        memcpy(m->b + m->n, name, l);
        m->n += l;
        name += l + (dot ? 1 : 0);
    }
    put8(m, 0);
}

/* header with |an| answers and one question |q| (at offset 12) */
static void head(struct msg *m, unsigned rcode, unsigned an, const char *q)
{
    m->n = 0;
    put16(m, 0x1234);
    put8(m, 0x81);
    put8(m, (uint8_t)(0x80 | rcode));
    put16(m, 1);
    put16(m, (uint16_t)an);
    put16(m, 0);
    put16(m, 0);
    put_name(m, q);
    put16(m, 33);
    put16(m, 1);
}

/* an SRV answer whose owner points at the question (0xc00c) */
static void srv(struct msg *m, uint16_t prio, uint16_t weight, uint16_t port, const char *target)
{
    put16(m, 0xc00c);
    put16(m, 33);
    put16(m, 1);
    put16(m, 0);
    put16(m, 60);
    size_t at = m->n;
    put16(m, 0);
    put16(m, prio);
    put16(m, weight);
    put16(m, port);
    put_name(m, target);
    uint16_t rdlen = (uint16_t)(m->n - at - 2);
    m->b[at] = (uint8_t)(rdlen >> 8);
    m->b[at + 1] = (uint8_t)rdlen;
}

Test(srv, parse_sorted_by_priority_then_weight)
{
    struct msg m;
    head(&m, 0, 3, "_etcd-server._tcp.example.test");
    srv(&m, 10, 5, 2380, "c.example.test");
    srv(&m, 0, 1, 2381, "a.example.test");
    srv(&m, 0, 9, 2382, "b.example.test");
    struct srv_record r[8];
    cr_assert_eq(srv_parse(m.b, m.n, r, 8), 3);
    cr_assert_str_eq(r[0].target, "b.example.test");
    cr_assert_eq(r[0].port, 2382);
    cr_assert_str_eq(r[1].target, "a.example.test");
    cr_assert_str_eq(r[2].target, "c.example.test");
    cr_assert_eq(r[2].priority, 10);
}

Test(srv, parse_compressed_target)
{
    struct msg m;
    head(&m, 0, 1, "_etcd-server._tcp.example.test");
    /* target "m0" + pointer to "example.test" inside the question */
    put16(&m, 0xc00c);
    put16(&m, 33);
    put16(&m, 1);
    put16(&m, 0);
    put16(&m, 60);
    put16(&m, 6 + 3 + 2);
    put16(&m, 0);
    put16(&m, 0);
    put16(&m, 2380);
    put8(&m, 2);
    put8(&m, 'm');
    put8(&m, '0');
    put16(&m, 0xc000 | (12 + 1 + 12 + 1 + 4)); /* "example.test" of the question */
    struct srv_record r[2];
    cr_assert_eq(srv_parse(m.b, m.n, r, 2), 1);
    cr_assert_str_eq(r[0].target, "m0.example.test");
}

Test(srv, parse_refuses_bad_messages)
{
    struct msg m;
    struct srv_record r[2];
    head(&m, 3, 0, "_etcd-server._tcp.example.test"); /* NXDOMAIN */
    cr_assert_eq(srv_parse(m.b, m.n, r, 2), -ENOENT);
    head(&m, 0, 1, "_etcd-server._tcp.example.test");
    srv(&m, 0, 0, 1, "x.example.test");
    for (size_t cut = 0; cut < m.n; cut++) /* every truncation */
        cr_assert_lt(srv_parse(m.b, cut, r, 2), 1, "cut at %zu", cut);
    /* a pointer loop */
    head(&m, 0, 1, "a");
    put16(&m, 0xc000 | (uint16_t)m.n);
    cr_assert_eq(srv_parse(m.b, m.n, r, 2), -EINVAL);
    /* not a response */
    head(&m, 0, 0, "a");
    m.b[2] = 0;
    cr_assert_eq(srv_parse(m.b, m.n, r, 2), -EINVAL);
}

/* ---- the cluster from records ---- */

static int fake_lookup(const char *name, struct srv_record *out, size_t max, char *err, size_t cap)
{
    if (strcmp(name, "_etcd-server-ssl-both._tcp.example.test") == 0 && max >= 2) {
        memset(out, 0, 2 * sizeof(*out));
        snprintf(out[0].target, sizeof(out[0].target), "n0.example.test");
        out[0].port = 2380;
        snprintf(out[1].target, sizeof(out[1].target), "n1.example.test");
        out[1].port = 2380;
        return 2;
    }
    if (strcmp(name, "_etcd-server-both._tcp.example.test") == 0 && max >= 1) {
        memset(out, 0, sizeof(*out));
        snprintf(out[0].target, sizeof(out[0].target), "n2.example.test");
        out[0].port = 2380;
        return 1;
    }
    if (strcmp(name, "_etcd-server-x._tcp.example.test") == 0) {
        const uint16_t ports[3] = {2380, 2480, 2580};
        for (int i = 0; i < 3 && (size_t)i < max; i++) {
            memset(&out[i], 0, sizeof(out[i]));
            snprintf(out[i].target, sizeof(out[i].target), "n%d.example.test", i);
            out[i].port = ports[i];
        }
        return 3;
    }
    snprintf(err, cap, "lookup %s on 127.0.0.1:53: no such host", name);
    return -ENOENT;
}

static int fake_resolve(const char *name, char *addr, size_t cap, char *why, size_t whycap,
                        void *arg)
{
    (void)arg;
    if (strncmp(name, "n", 1) == 0 && strstr(name, ".example.test") != NULL) {
        snprintf(addr, cap, "10.0.0.%c", name[1] + 1);
        return 0;
    }
    snprintf(why, whycap, "lookup %s: no such host", name);
    return -ENOENT;
}

static void base_cfg(struct config *c, const char *name, const char *advertise)
{
    char err[512];
    char a1[300], a2[300];
    snprintf(a1, sizeof(a1), "--initial-advertise-peer-urls=%s", advertise);
    snprintf(a2, sizeof(a2), "--name=%s", name);
    char *argv[] = {"quorum", a1, a2, "--discovery-srv=example.test", "--discovery-srv-name=x",
                    NULL};
    cr_assert_eq(config_parse(c, 5, argv, err, sizeof(err)), 0, "%s", err);
}

Test(srv, cluster_names_itself_and_numbers_the_others)
{
    static struct config c;
    base_cfg(&c, "me", "http://10.0.0.2:2480"); /* n1's address */
    char err[1024] = "";
    cr_assert_eq(srv_cluster(&c, fake_lookup, fake_resolve, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(c.n_initial_cluster, 3);
    cr_assert_str_eq(c.initial_cluster[0].name, "0");
    cr_assert_str_eq(c.initial_cluster[0].peer_urls[0].text, "http://n0.example.test:2380");
    cr_assert_str_eq(c.initial_cluster[1].name, "me");
    cr_assert_str_eq(c.initial_cluster[1].peer_urls[0].text, "http://n1.example.test:2480");
    cr_assert_str_eq(c.initial_cluster[2].name, "1");
    cr_assert_eq(config_check_cluster(&c, err, sizeof(err)), 0, "%s", err);
}

Test(srv, cluster_errors)
{
    static struct config c;
    char err[1024] = "";
    base_cfg(&c, "me", "http://10.0.0.9:2380"); /* no record has it */
    cr_assert_neq(srv_cluster(&c, fake_lookup, fake_resolve, NULL, err, sizeof(err)), 0);
    cr_assert_str_eq(err, "error setting up initial cluster: cannot find local etcd member "
                          "\"me\" in SRV records");
    base_cfg(&c, "me", "https://10.0.0.1:2380"); /* found, but https vs an http record */
    cr_assert_neq(srv_cluster(&c, fake_lookup, fake_resolve, NULL, err, sizeof(err)), 0);
    cr_assert(strstr(err, "cannot find local etcd member") != NULL, "%s", err);
    base_cfg(&c, "me", "http://10.0.0.1:2380");
    snprintf(c.discovery_srv_name, sizeof(c.discovery_srv_name), "other");
    cr_assert_eq(srv_cluster(&c, fake_lookup, fake_resolve, NULL, err, sizeof(err)), -ENOENT);
    cr_assert_str_eq(err, "error setting up initial cluster: error querying DNS SRV records for "
                          "_etcd-server-ssl-other lookup "
                          "_etcd-server-ssl-other._tcp.example.test on 127.0.0.1:53: no such "
                          "host");
}

/* ssl records first (https://), then plain ones (http://), numbered on
 * across both (etcd 3.4 would use the ssl ones only: docs/cluster-flags.md) */
Test(srv, cluster_from_ssl_and_plain_records)
{
    static struct config c;
    base_cfg(&c, "me", "https://10.0.0.2:2380"); /* n1 */
    snprintf(c.discovery_srv_name, sizeof(c.discovery_srv_name), "both");
    char err[1024] = "";
    cr_assert_eq(srv_cluster(&c, fake_lookup, fake_resolve, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(c.n_initial_cluster, 3);
    cr_assert_str_eq(c.initial_cluster[0].name, "0");
    cr_assert_str_eq(c.initial_cluster[0].peer_urls[0].text, "https://n0.example.test:2380");
    cr_assert(c.initial_cluster[0].peer_urls[0].tls);
    cr_assert_str_eq(c.initial_cluster[1].name, "me");
    cr_assert_str_eq(c.initial_cluster[2].name, "1");
    cr_assert_str_eq(c.initial_cluster[2].peer_urls[0].text, "http://n2.example.test:2380");
}
