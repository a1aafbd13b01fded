/* tests/unit/test_config.c: server/config.c's reading and checking of the
 * flags, in etcd 3.4's words (the texts were taken from etcd 3.4.23 run
 * with each bad flag; tests/integration/test_startup.py runs both
 * binaries): URL errors as Go's url.Parse and etcd's types.NewURLs say
 * them, embed.Config.Validate's checks, --initial-cluster's, the
 * comparison of advertised and initial peer URLs by address, and the ids a
 * joining member takes from the cluster's member list. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "server/config.h"

static struct config cfg;
static char err[4096];

/* parse: quorum --data-dir x ARGS... */
static int parse(const char *args)
{
    char buf[2048];
    snprintf(buf, sizeof(buf), "%s", args);
    char *argv[64] = {"quorum", "--data-dir", "/tmp/nonexistent-config-test"};
    int argc = 3;
    for (char *t = strtok(buf, " "); t != NULL && argc < 63; t = strtok(NULL, " "))
        argv[argc++] = t;
    err[0] = '\0';
    return config_parse(&cfg, argc, argv, err, sizeof(err));
}

static void expect_flag_error(const char *args, const char *text)
{
    cr_assert_eq(parse(args), -EINVAL, "%s: parsed", args);
    cr_assert_str_eq(err, text);
}

Test(config, url_errors_as_go_and_etcd)
{
    expect_flag_error("--listen-client-urls http://127.0.0.1:abc",
                      "invalid value \"http://127.0.0.1:abc\" for flag -listen-client-urls: parse "
                      "\"http://127.0.0.1:abc\": invalid port \":abc\" after host");
    expect_flag_error("--listen-client-urls 127.0.0.1:2379",
                      "invalid value \"127.0.0.1:2379\" for flag -listen-client-urls: parse "
                      "\"127.0.0.1:2379\": first path segment in URL cannot contain colon");
    expect_flag_error("--advertise-client-urls http://[::1",
                      "invalid value \"http://[::1\" for flag -advertise-client-urls: parse "
                      "\"http://[::1\": missing ']' in host");
    expect_flag_error("--listen-peer-urls ftp://127.0.0.1:2380",
                      "invalid value \"ftp://127.0.0.1:2380\" for flag -listen-peer-urls: URL "
                      "scheme must be http, https, unix, or unixs: ftp://127.0.0.1:2380");
    expect_flag_error("--listen-client-urls http://127.0.0.1",
                      "invalid value \"http://127.0.0.1\" for flag -listen-client-urls: URL "
                      "address does not have the form \"host:port\": http://127.0.0.1");
    expect_flag_error("--listen-client-urls http://127.0.0.1:2379/x",
                      "invalid value \"http://127.0.0.1:2379/x\" for flag -listen-client-urls: "
                      "URL must not contain a path: http://127.0.0.1:2379/x");
    expect_flag_error("--initial-advertise-peer-urls http://a:1,",
                      "invalid value \"http://a:1,\" for flag -initial-advertise-peer-urls: URL "
                      "scheme must be http, https, unix, or unixs: ");
    /* IPv6 and names are fine */
    cr_assert_eq(parse("--listen-client-urls http://[::1]:2379 --advertise-client-urls "
                       "http://db1.example:2379"),
                 0, "%s", err);
    cr_assert_str_eq(cfg.listen_client[0].host, "::1");
    cr_assert_str_eq(cfg.advertise_client[0].name, "db1.example");
    cr_assert_str_eq(cfg.advertise_client[0].host, "db1.example");
    cr_assert_eq(cfg.advertise_client[0].port, 2379);
}

Test(config, other_flag_errors_as_go)
{
    expect_flag_error("--heartbeat-interval abc",
                      "invalid value \"abc\" for flag -heartbeat-interval: parse error");
    expect_flag_error("--election-timeout -5",
                      "invalid value \"-5\" for flag -election-timeout: parse error");
    expect_flag_error("--initial-cluster-state bogus",
                      "invalid value \"bogus\" for flag -initial-cluster-state: invalid value");
    expect_flag_error("--no-such-flag", "flag provided but not defined: -no-such-flag");
    expect_flag_error("--name", "flag needs an argument: -name");
    expect_flag_error("--auto-tls=maybe", "invalid boolean value \"maybe\" for -auto-tls: parse error");
    cr_assert_eq(parse("--auto-tls=T --enable-v2=False"), 0, "%s", err);
    cr_assert(cfg.client_tls.auto_tls && !cfg.enable_v2);
}

static void expect_invalid(const char *args, const char *text)
{
    cr_assert_eq(parse(args), 0, "%s: %s", args, err);
    cr_assert_eq(config_validate(&cfg, err, sizeof(err)), -EINVAL, "%s: valid", args);
    cr_assert_str_eq(err, text);
}

#define ADV "--advertise-client-urls http://127.0.0.1:2379 "

Test(config, validate_as_etcd)
{
    expect_invalid(ADV "--election-timeout 50",
                   "error verifying flags, --election-timeout[50ms] should be at least as 5 times "
                   "as --heartbeat-interval[100ms]. See 'quorum --help'.");
    expect_invalid(ADV "--heartbeat-interval 0",
                   "error verifying flags, --heartbeat-interval must be >0 (set to 0ms). See "
                   "'quorum --help'.");
    expect_invalid(ADV "--election-timeout 0",
                   "error verifying flags, --election-timeout must be >0 (set to 0ms). See "
                   "'quorum --help'.");
    expect_invalid(ADV "--heartbeat-interval 10000 --election-timeout 50001",
                   "error verifying flags, --election-timeout[50001ms] is too long, and should be "
                   "set less than 50000ms. See 'quorum --help'.");
    expect_invalid(ADV "--listen-client-urls http://vm:2379",
                   "error verifying flags, expected IP in URL for binding (http://vm:2379). See "
                   "'quorum --help'.");
    expect_invalid(ADV "--listen-peer-urls http://db1.example:2380",
                   "error verifying flags, expected IP in URL for binding "
                   "(http://db1.example:2380). See 'quorum --help'.");
    expect_invalid("--advertise-client-urls http://:2379",
                   "error verifying flags, --advertise-client-urls \"http://:2379\" must be "
                   "\"host:port\" (unexpected empty host (http://:2379)). See 'quorum --help'.");
    expect_invalid(ADV "--initial-advertise-peer-urls http://:2380",
                   "error verifying flags, --initial-advertise-peer-urls \"http://:2380\" must be "
                   "\"host:port\" (unexpected empty host (http://:2380)). See 'quorum --help'.");
    expect_invalid("--listen-client-urls http://127.0.0.1:2379",
                   "error verifying flags, --advertise-client-urls is required when "
                   "--listen-client-urls is set explicitly. See 'quorum --help'.");
    /* localhost may be bound (etcd's special case); the defaults are valid */
    cr_assert_eq(parse(ADV "--listen-client-urls http://localhost:2379"), 0, "%s", err);
    cr_assert_eq(config_validate(&cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(cfg.listen_client[0].host, "127.0.0.1");
    cr_assert_eq(parse(""), 0, "%s", err);
    cr_assert_eq(config_validate(&cfg, err, sizeof(err)), 0, "%s", err);
}

static void expect_cluster_error(const char *args, const char *text)
{
    cr_assert_eq(parse(args), 0, "%s: %s", args, err);
    cr_assert_eq(config_check_cluster(&cfg, err, sizeof(err)), -EINVAL, "%s: valid", args);
    cr_assert_str_eq(err, text);
}

Test(config, initial_cluster_as_etcd)
{
    expect_cluster_error("--initial-cluster default",
                         "error setting up initial cluster: URL scheme must be http, https, unix, "
                         "or unixs: ");
    expect_cluster_error("--initial-cluster default=http://127.0.0.1",
                         "error setting up initial cluster: URL address does not have the form "
                         "\"host:port\": http://127.0.0.1");
    expect_cluster_error("--initial-cluster other=http://127.0.0.1:2380 --name x",
                         "couldn't find local name \"x\" in the initial cluster configuration");
    expect_cluster_error(
        "--initial-cluster default=http://127.0.0.1:2380,other=http://127.0.0.1:2380",
        "initial cluster default=http://127.0.0.1:2380,other=http://127.0.0.1:2380 has duplicate "
        "url");
    /* a name twice is one member with two URLs, as etcd's URLsMap */
    cr_assert_eq(parse("--initial-cluster a=http://127.0.0.1:2,default=http://127.0.0.1:1,"
                       "a=http://127.0.0.1:3"),
                 0);
    cr_assert_eq(config_check_cluster(&cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg.n_initial_cluster, 2);
    cr_assert_eq(cfg.initial_cluster[0].n_peer_urls, 2);
    char s[512];
    config_cluster_string(cfg.initial_cluster, cfg.n_initial_cluster, s, sizeof(s));
    cr_assert_str_eq(s, "a=http://127.0.0.1:2,a=http://127.0.0.1:3,default=http://127.0.0.1:1");
}

/* a resolver that knows "vm" and "v6" and fails on anything else */
static int fake_resolve(const char *name, char *addr, size_t cap, char *why, size_t whycap,
                        void *arg)
{
    (*(int *)arg)++;
    if (strcmp(name, "vm") == 0) {
        snprintf(addr, cap, "127.0.0.1");
        return 0;
    }
    if (strcmp(name, "v6") == 0) {
        snprintf(addr, cap, "::1");
        return 0;
    }
    snprintf(why, whycap, "lookup %s: no such host", name);
    return -ENOENT;
}

static void expect_match(const char *args, const char *text)
{
    int calls = 0;
    cr_assert_eq(parse(args), 0, "%s: %s", args, err);
    int rv = config_advertise_matches(&cfg, fake_resolve, &calls, err, sizeof(err));
    if (text == NULL) {
        cr_assert_eq(rv, 0, "%s: %s", args, err);
    } else {
        cr_assert_eq(rv, -EINVAL, "%s: matched", args);
        cr_assert_str_eq(err, text);
    }
}

Test(config, advertise_matches_cluster_as_etcd)
{
    /* names resolve on either side */
    expect_match("--initial-advertise-peer-urls http://vm:2380 "
                 "--initial-cluster default=http://127.0.0.1:2380",
                 NULL);
    expect_match("--initial-advertise-peer-urls http://127.0.0.1:2380 "
                 "--initial-cluster default=http://vm:2380",
                 NULL);
    expect_match("--initial-advertise-peer-urls http://[::1]:2380,http://vm:2381 "
                 "--initial-cluster default=http://127.0.0.1:2381,default=http://v6:2380",
                 NULL);
    /* localhost is not resolved (etcd's special case) */
    expect_match("--initial-advertise-peer-urls http://127.0.0.1:2380 "
                 "--initial-cluster default=http://localhost:2380",
                 "--initial-cluster has default=http://localhost:2380 but missing from "
                 "--initial-advertise-peer-urls=http://127.0.0.1:2380 (resolved urls: "
                 "\"http://127.0.0.1:2380\" != \"http://localhost:2380\")");
    expect_match("--initial-advertise-peer-urls http://127.0.0.1:2380,http://127.0.0.1:2 "
                 "--initial-cluster default=http://127.0.0.1:2380",
                 "--initial-advertise-peer-urls has http://127.0.0.1:2 but missing from "
                 "--initial-cluster=default=http://127.0.0.1:2,default=http://127.0.0.1:2380");
    expect_match("--initial-advertise-peer-urls http://127.0.0.1:2380 "
                 "--initial-cluster default=http://127.0.0.1:2380,default=http://127.0.0.1:2381",
                 "--initial-cluster has default=http://127.0.0.1:2381 but missing from "
                 "--initial-advertise-peer-urls=http://127.0.0.1:2380 "
                 "(len([\"http://127.0.0.1:2380\"]) != len([\"http://127.0.0.1:2380\" "
                 "\"http://127.0.0.1:2381\"]))");
    expect_match("--initial-advertise-peer-urls http://nosuch.invalid:2380 "
                 "--initial-cluster default=http://127.0.0.1:2380",
                 "--initial-cluster has default=http://127.0.0.1:2380 but missing from "
                 "--initial-advertise-peer-urls=http://nosuch.invalid:2380 (failed to resolve "
                 "\"http://nosuch.invalid:2380\" (lookup nosuch.invalid: no such host))");
}

static struct config_remote_member rm(uint64_t id, const char *name, const char *peer)
{
    struct config_remote_member m = {.id = id, .n_peer = 1};
    snprintf(m.name, sizeof(m.name), "%s", name);
    snprintf(m.peer[0], sizeof(m.peer[0]), "%s", peer);
    return m;
}

Test(config, join_takes_the_cluster_ids)
{
    int calls = 0;
    uint64_t ids[CONFIG_MAX_MEMBERS];
    cr_assert_eq(parse("--name m2 --initial-cluster-state existing --initial-cluster-token other "
                       "--initial-cluster m0=http://127.0.0.1:1,m1=http://vm:2,m2=http://127.0.0.1:3"),
                 0, "%s", err);
    struct config_remote_member ms[3] = {rm(0x30, "", "http://127.0.0.1:3"),
                                         rm(0x10, "m0", "http://127.0.0.1:1"),
                                         rm(0x20, "m1", "http://127.0.0.1:2")};
    cr_assert_eq(config_assign_ids(&cfg, ms, 3, 0xabc, fake_resolve, &calls, ids, err,
                                   sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ids[0], 0x10);
    cr_assert_eq(ids[1], 0x20);
    cr_assert_eq(ids[2], 0x30);
    /* not added yet: one member fewer (ms is sorted by id now) */
    cr_assert_eq(config_assign_ids(&cfg, ms, 2, 0xabc, fake_resolve, &calls, ids, err,
                                   sizeof(err)),
                 -EINVAL);
    cr_assert_str_eq(err, "error validating peerURLs {ClusterID:abc Members:[&{ID:10 "
                          "RaftAttributes:{PeerURLs:[http://127.0.0.1:1] IsLearner:false} "
                          "Attributes:{Name:m0 ClientURLs:[]}} &{ID:20 RaftAttributes:{PeerURLs:"
                          "[http://127.0.0.1:2] IsLearner:false} Attributes:{Name:m1 ClientURLs:"
                          "[]}}] RemovedMemberIDs:[]}: member count is unequal");
    /* added at another URL */
    ms[2] = rm(0x30, "", "http://127.0.0.1:4");
    cr_assert_eq(config_assign_ids(&cfg, ms, 3, 0xabc, fake_resolve, &calls, ids, err,
                                   sizeof(err)),
                 -EINVAL);
    cr_assert(strstr(err, ": PeerURLs: no match found for existing member (30, "
                          "[http://127.0.0.1:4]), last resolver error (resolved urls: "
                          "\"http://127.0.0.1:4\" != \"http://127.0.0.1:3\")") != NULL,
              "%s", err);
}

/* --experimental-set-member-localaddr: the first advertised peer URL with
 * a numeric, specified IP (loopback taken, unlike etcd: docs/campaign.md) */
Test(config, member_localaddr)
{
    cr_assert_eq(parse("--initial-advertise-peer-urls http://127.0.0.3:2380 "
                       "--initial-cluster default=http://127.0.0.3:2380"),
                 0, "%s", err);
    cr_assert_null(config_member_localaddr(&cfg), "off by default");
    cr_assert_eq(parse("--experimental-set-member-localaddr "
                       "--initial-advertise-peer-urls http://127.0.0.3:2380 "
                       "--initial-cluster default=http://127.0.0.3:2380"),
                 0, "%s", err);
    cr_assert_str_eq(config_member_localaddr(&cfg), "127.0.0.3");
    cr_assert_eq(parse("--experimental-set-member-localaddr=true "
                       "--initial-advertise-peer-urls "
                       "http://localhost:2380,http://0.0.0.0:2381,http://[::]:2382,"
                       "http://[fd00::7]:2383,http://10.0.0.1:2384 "
                       "--initial-cluster default=http://localhost:2380,default=http://"
                       "0.0.0.0:2381,default=http://[::]:2382,default=http://[fd00::7]:2383,"
                       "default=http://10.0.0.1:2384"),
                 0, "%s", err);
    cr_assert_str_eq(config_member_localaddr(&cfg), "fd00::7");
    cr_assert_eq(parse("--experimental-set-member-localaddr "
                       "--initial-advertise-peer-urls http://localhost:2380 "
                       "--initial-cluster default=http://localhost:2380"),
                 0, "%s", err);
    cr_assert_null(config_member_localaddr(&cfg), "a name is not an address");
}
