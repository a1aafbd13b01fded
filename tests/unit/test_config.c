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
#include <stdlib.h>
#include <unistd.h>

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

/* ---- etcd 3.4's configuration surface: Go's flag syntax, ETCD_*
 * variables, the YAML config file (texts as etcd 3.4.23 prints them) ---- */

/* parse_argv: config_parse_env with argv and envp given whole */
static int parse_argv(char **argv, char **envp)
{
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    err[0] = '\0';
    return config_parse_env(&cfg, argc, argv, envp, err, sizeof(err));
}

#define ARGV(...) ((char *[]){"quorum", __VA_ARGS__, NULL})
#define ENVP(...) ((char *[]){__VA_ARGS__, NULL})
static char *no_env[] = {NULL};

static bool has_note(char level, const char *module, const char *text)
{
    for (size_t i = 0; i < cfg.n_notes; i++)
        if (cfg.notes[i].level == level && strcmp(cfg.notes[i].module, module) == 0 &&
            strcmp(cfg.notes[i].text, text) == 0)
            return true;
    return false;
}

Test(config, defaults_as_etcd)
{
    cr_assert_eq(parse_argv(ARGV("--data-dir", "/tmp/x"), no_env), 0, "%s", err);
    cr_assert_eq(cfg.max_concurrent_streams, 4294967295ull);
    cr_assert_eq(cfg.grpc_keepalive_min_time_ms, 5000);
    cr_assert_eq(cfg.grpc_keepalive_interval_ms, 2 * 3600 * 1000);
    cr_assert_eq(cfg.grpc_keepalive_timeout_ms, 20000);
    cr_assert(cfg.strict_reconfig_check);
    cr_assert_eq(cfg.max_snapshots, 5);
    cr_assert_eq(cfg.max_wals, 5);
    cr_assert(!cfg.force_new_cluster && !cfg.unsafe_no_fsync && !cfg.initial_corrupt_check);
    cr_assert_str_eq(cfg.discovery_srv, "");
    cr_assert_eq(cfg.quota_backend_bytes, 2ull << 30);
    cr_assert_eq(cfg.compaction_batch_limit, 1000);
    cr_assert_str_eq(cfg.proxy, "off");
    cr_assert_str_eq(cfg.cors, "*");
    cr_assert(cfg.initial_election_tick_advance && cfg.enable_grpc_gateway);
    cr_assert_eq(cfg.n_notes, 0);
    cr_assert_str_eq(cfg.advertise_client[0].text, "http://localhost:2379");
}

Test(config, go_flag_syntax)
{
    /* one dash or two, = or the next argument */
    cr_assert_eq(parse_argv(ARGV("-name", "a", "--snapshot-count=7", "-max-wals=0"), no_env), 0,
                 "%s", err);
    cr_assert_str_eq(cfg.name, "a");
    cr_assert_eq(cfg.snapshot_count, 7);
    cr_assert_eq(cfg.max_wals, 0);
    /* a flag given twice: the last wins (Go; etcd checks nothing more) */
    cr_assert_eq(parse_argv(ARGV("--name", "a", "--name=b"), no_env), 0, "%s", err);
    cr_assert_str_eq(cfg.name, "b");
    /* a boolean alone is true and never takes the next argument */
    cr_assert_eq(parse_argv(ARGV("--force-new-cluster", "false"), no_env), CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "'false' is not a valid flag");
    cr_assert_eq(parse_argv(ARGV("--strict-reconfig-check=0", "-unsafe-no-fsync"), no_env), 0);
    cr_assert(!cfg.strict_reconfig_check && cfg.unsafe_no_fsync);
    /* "--" ends the flags; so does the first non-flag */
    cr_assert_eq(parse_argv(ARGV("--name", "a", "--", "--name", "b"), no_env), CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "'--name' is not a valid flag");
    cr_assert_eq(parse_argv(ARGV("x", "--nope"), no_env), CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "'x' is not a valid flag");
    cr_assert_eq(parse_argv(ARGV("-"), no_env), CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "'-' is not a valid flag");
    cr_assert_eq(parse_argv(ARGV("---name", "x"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "bad flag syntax: ---name");
    cr_assert_eq(parse_argv(ARGV("-=x"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "bad flag syntax: -=x");
    cr_assert_eq(parse_argv(ARGV("--nope=1"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "flag provided but not defined: -nope");
    cr_assert_eq(parse_argv(ARGV("--debug=x"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid boolean value \"x\" for -debug: parse error");
    /* Go's integers: base prefixes, '_', ranges */
    cr_assert_eq(parse_argv(ARGV("--heartbeat-interval=0x10", "--max-txn-ops=0b1_0",
                                 "--max-request-bytes=010"),
                            no_env),
                 0, "%s", err);
    cr_assert_eq(cfg.heartbeat_ms, 16);
    cr_assert_eq(cfg.max_txn_ops, 2);
    cr_assert_eq(cfg.max_request_bytes, 8);
    cr_assert_eq(parse_argv(ARGV("--heartbeat-interval=99999999999999999999"), no_env),
                 CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid value \"99999999999999999999\" for flag -heartbeat-interval: "
                          "value out of range");
    cr_assert_eq(parse_argv(ARGV("--max-concurrent-streams=-1"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid value \"-1\" for flag -max-concurrent-streams: "
                          "strconv.ParseUint: parsing \"-1\": invalid syntax");
    cr_assert_eq(parse_argv(ARGV("--max-concurrent-streams=4294967296"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid value \"4294967296\" for flag -max-concurrent-streams: "
                          "strconv.ParseUint: parsing \"4294967296\": value out of range");
    cr_assert_eq(parse_argv(ARGV("--max-concurrent-streams=100", "--quota-backend-bytes=-1",
                                 "--backend-batch-limit=-5"),
                            no_env),
                 0, "%s", err);
    cr_assert_eq(cfg.max_concurrent_streams, 100);
    cr_assert_eq(cfg.quota_backend_bytes, UINT64_MAX); /* etcd: a negative quota is none */
    /* Go's durations: a unit is required, a sign allowed */
    cr_assert_eq(parse_argv(ARGV("--grpc-keepalive-min-time=5"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid value \"5\" for flag -grpc-keepalive-min-time: parse error");
    cr_assert_eq(parse_argv(ARGV("--grpc-keepalive-min-time=1.5h", "--grpc-keepalive-interval=-5s",
                                 "--grpc-keepalive-timeout=1m30s"),
                            no_env),
                 0, "%s", err);
    cr_assert_eq(cfg.grpc_keepalive_min_time_ms, 5400000);
    cr_assert_eq(cfg.grpc_keepalive_interval_ms, 0);
    cr_assert_eq(cfg.grpc_keepalive_timeout_ms, 90000);
    /* values etcd reads after parsing: "error verifying flags" or fatal */
    cr_assert_eq(parse_argv(ARGV("--auto-compaction-mode=foo"), no_env), CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "unknown auto-compaction-mode \"foo\"");
    cr_assert_eq(parse_argv(ARGV("--auto-compaction-retention=x"), no_env), CONFIG_ERR_FATAL);
    cr_assert(has_note('C', "main",
                       "error parsing CompactionRetention: time: invalid duration "
                       "\"x\""));
    /* etcd's selective values */
    cr_assert_eq(parse_argv(ARGV("--discovery-fallback=bad"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid value \"bad\" for flag -discovery-fallback: invalid value");
    cr_assert_eq(parse_argv(ARGV("--cors=bad"), no_env), CONFIG_ERR_USAGE);
    cr_assert_str_eq(err, "invalid value \"bad\" for flag -cors: URL scheme must be http, https, "
                          "unix, or unixs: bad");
    /* etcd 0.4's flags: a warning, and like booleans they take no value */
    cr_assert_eq(parse_argv(ARGV("--v", "-peer-heartbeat-interval=3"), no_env), 0, "%s", err);
    cr_assert(has_note('W', "pkg/flags", "flag \"-v\" is no longer supported - ignoring."));
    cr_assert(has_note('W', "pkg/flags",
                       "flag \"-peer-heartbeat-interval\" is no longer supported - ignoring."));
}

Test(config, etcd_env_variables)
{
    /* used for flags not given, in the flags' name order; logged */
    cr_assert_eq(parse_argv(ARGV("--data-dir=/tmp/x"),
                            ENVP("ETCD_NAME=env", "ETCD_SNAPSHOT_COUNT=9", "ETCD_BOGUS=1",
                                 "ETCD_MAX_CONCURRENT_STREAMS=8", "ETCD_AUTO_TLS=", "HOME=/")),
                 0, "%s", err);
    cr_assert_str_eq(cfg.name, "env");
    cr_assert_eq(cfg.snapshot_count, 9);
    cr_assert_eq(cfg.max_concurrent_streams, 8);
    cr_assert(has_note('I', "pkg/flags", "recognized and used environment variable ETCD_NAME=env"));
    cr_assert(has_note('W', "pkg/flags", "unrecognized environment variable ETCD_BOGUS=1"));
    /* an empty one is not used, so it is "unrecognized" (as etcd says) */
    cr_assert(has_note('W', "pkg/flags", "unrecognized environment variable ETCD_AUTO_TLS="));
    cr_assert_eq(cfg.n_notes, 5);
    /* a flag on the command line and its variable: etcd 3.4 stops */
    cr_assert_eq(parse_argv(ARGV("--name=flag"), ENVP("ETCD_NAME=env")), CONFIG_ERR_FATAL);
    cr_assert(has_note('C', "pkg/flags",
                       "conflicting environment variable \"ETCD_NAME\" is shadowed by "
                       "corresponding command-line flag (either unset environment variable or "
                       "disable flag)"));
    /* bad values: the last in name order is reported */
    cr_assert_eq(parse_argv(ARGV("--name=a"),
                            ENVP("ETCD_HEARTBEAT_INTERVAL=abc", "ETCD_ELECTION_TIMEOUT=x")),
                 CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "invalid value \"abc\" for ETCD_HEARTBEAT_INTERVAL: parse error");
    /* a client URL listed twice is served once, as etcd does; advertised
     * ones are kept as given */
    cr_assert_eq(parse_argv(ARGV("--listen-client-urls=http://127.0.0.1:1,http://127.0.0.1:2,"
                                 "http://127.0.0.1:1",
                                 "--advertise-client-urls=http://a:1,http://a:1"),
                            no_env),
                 0, "%s", err);
    cr_assert_eq(cfg.n_listen_client, 2);
    cr_assert_eq(cfg.listen_client[1].port, 2);
    cr_assert_eq(cfg.n_advertise_client, 2);
    /* env-given URLs count as given (etcd's advertise check) */
    cr_assert_eq(parse_argv(ARGV("--name=a"), ENVP("ETCD_LISTEN_CLIENT_URLS=http://127.0.0.1:1")),
                 0);
    cr_assert(cfg.listen_client_set && !cfg.advertise_client_set);
}

static const char *write_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/quorum-test-config-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static int parse_file(const char *text, char **envp)
{
    const char *p = write_file(text);
    char *argv[] = {"quorum", "--name", "ignored", "--config-file", (char *)p, NULL};
    int rv = parse_argv(argv, envp);
    unlink(p);
    return rv;
}

Test(config, yaml_config_file)
{
    cr_assert_eq(parse_file("name: infra1\n"
                            "data-dir: /tmp/infra1\n"
                            "listen-client-urls: http://127.0.0.1:2379,http://127.0.0.1:22379\n"
                            "advertise-client-urls: http://127.0.0.1:2379\n"
                            "initial-cluster: infra1=http://127.0.0.1:2380\n"
                            "snapshot-count: 5000\n"
                            "strict-reconfig-check: false\n"
                            "grpc-keepalive-min-time: 2000000000\n"
                            "max-concurrent-streams: 64\n"
                            "log-outputs: [stderr]\n"
                            "unknown-key: ignored as etcd does\n"
                            "client-transport-security:\n"
                            "  cert-file: /c.pem\n"
                            "  key-file: /k.pem\n"
                            "  client-cert-auth: true\n"
                            "  auto-tls: false\n"
                            "proxy: 'off'\n",
                            ENVP("ETCD_SNAPSHOT_COUNT=1", "ETCD_NAME=x")),
                 0, "%s", err);
    cr_assert_str_eq(cfg.name, "infra1"); /* not the flag's, not the variable's */
    cr_assert_str_eq(cfg.data_dir, "/tmp/infra1");
    cr_assert_eq(cfg.n_listen_client, 2);
    cr_assert_eq(cfg.listen_client[1].port, 22379);
    cr_assert_eq(cfg.snapshot_count, 5000);
    cr_assert(!cfg.strict_reconfig_check);
    cr_assert_eq(cfg.grpc_keepalive_min_time_ms, 2000);
    cr_assert_eq(cfg.max_concurrent_streams, 64);
    cr_assert_str_eq(cfg.log_outputs, "stderr");
    cr_assert_str_eq(cfg.client_tls.cert_file, "/c.pem");
    cr_assert(cfg.client_tls.client_cert_auth);
    cr_assert_str_eq(cfg.initial_cluster[0].name, "infra1");
    cr_assert(cfg.n_notes == 1 && strstr(cfg.notes[0].text, "Loading server configuration from"));
    /* a key twice: the last wins; aliases are followed; the first
     * document only */
    cr_assert_eq(parse_file("name: a\ndata-dir: &d /tmp/d\nname: b\nwal-dir: *d\n---\nname: c\n",
                            no_env),
                 0, "%s", err);
    cr_assert_str_eq(cfg.name, "b");
    cr_assert_str_eq(cfg.wal_dir, "/tmp/d");
    /* quorum's own flags are read from the file too */
    cr_assert_eq(parse_file("front-loops: 3\npin-threads: true\n"
                            "experimental-compaction-sleep-interval: 5000000\n",
                            no_env),
                 0, "%s", err);
    cr_assert_eq(cfg.front_loops, 3);
    cr_assert(cfg.pin_threads);
    cr_assert_eq(cfg.compaction_sleep_ms, 5);
    /* ETCD_CONFIG_FILE names the file when the flag does not */
    const char *p = write_file("name: fromenv\n");
    char envv[128];
    snprintf(envv, sizeof(envv), "ETCD_CONFIG_FILE=%s", p);
    cr_assert_eq(parse_argv(ARGV("--name=flag"), ENVP(envv)), 0, "%s", err);
    unlink(p);
    cr_assert_str_eq(cfg.name, "fromenv");
}

static void expect_file_error(const char *text, const char *msg)
{
    cr_assert_eq(parse_file(text, no_env), CONFIG_ERR_VERIFY, "%s", text);
    cr_assert_str_eq(err, msg);
}

Test(config, yaml_config_file_errors)
{
    char *argv[] = {"quorum", "--config-file", "/nonexistent/q.yaml", NULL};
    cr_assert_eq(parse_argv(argv, no_env), CONFIG_ERR_VERIFY);
    cr_assert_str_eq(err, "open /nonexistent/q.yaml: no such file or directory");
    expect_file_error("name: [\n", "error converting YAML to JSON: yaml: line 1: did not find "
                                   "expected node content");
    expect_file_error("name: x\nheartbeat-interval: abc\n",
                      "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
                      "string into Go struct field configYAML.heartbeat-interval of type uint");
    expect_file_error("name: yes\n", "error unmarshaling JSON: while decoding JSON: json: cannot "
                                     "unmarshal bool into Go struct field configYAML.name of "
                                     "type string");
    expect_file_error("max-concurrent-streams: -1\n",
                      "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
                      "number -1 into Go struct field configYAML.max-concurrent-streams of type "
                      "uint32");
    expect_file_error("grpc-keepalive-min-time: 5s\n",
                      "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
                      "string into Go struct field configYAML.grpc-keepalive-min-time of type "
                      "time.Duration");
    expect_file_error("client-transport-security:\n  cert-file: {a: 1}\n",
                      "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
                      "object into Go struct field "
                      "securityConfig.client-transport-security.cert-file of type string");
    expect_file_error("proxy-dial-timeout: x\n",
                      "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
                      "string into Go struct field configProxy.proxy-dial-timeout of type uint");
    expect_file_error("initial-cluster-state: bogus\n", "unexpected clusterState \"bogus\"");
    /* a number where a string goes: refused, the first key in sorted order */
    expect_file_error("proxy-dial-timeout: 5\nname: 5\nlog-outputs: [5]\n",
                      "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
                      "number into Go struct field configYAML.log-outputs of type string");
    /* but etcdmain's own keys take it as text (then as etcd: no such mode) */
    cr_assert_eq(parse_file("proxy: off\n", no_env), CONFIG_ERR_FATAL);
    cr_assert(has_note('C', "main", "unexpected error setting up proxyFlag: invalid value"));
}

Test(config, refused_or_warned_as_documented)
{
    static const struct {
        const char *args, *text;
    } refused[] = {
        {"--discovery http://d.example/x", "--discovery is not supported"},
        {"--proxy on", "--proxy is not supported"},
        {"--cors http://a.example:80", "--cors with a list of origins is not supported"},
        {"--host-whitelist a.example", "--host-whitelist with a list of hosts is not supported"},
        {"--client-cert-allowed-hostname a", "--client-cert-allowed-hostname is not supported"},
        {"--peer-cert-allowed-hostname a", "--peer-cert-allowed-hostname is not supported"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        cr_assert_eq(parse(refused[i].args), 0, "%s: %s", refused[i].args, err);
        cr_assert_eq(config_validate(&cfg, err, sizeof(err)), -EINVAL, "%s", refused[i].args);
        cr_assert(strstr(err, refused[i].text) != NULL, "%s: %s", refused[i].args, err);
    }
    /* discovery and a cluster at once: etcd's conflict */
    cr_assert_eq(parse("--discovery-srv example.com --initial-cluster default=http://a:2380"), 0);
    cr_assert_eq(config_validate(&cfg, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "error verifying flags, multiple discovery or bootstrap flags are set. "
                          "Choose one of \"initial-cluster\", \"discovery\" or \"discovery-srv\". "
                          "See 'quorum --help'.");
    /* discovery without --initial-cluster: etcd's default cluster is dropped */
    cr_assert_eq(parse("--discovery-srv example.com"), 0);
    cr_assert_eq(cfg.n_initial_cluster, 0);
    cr_assert(!cfg.initial_cluster_set);
    /* the defaults of those flags pass; flags without effect are logged
     * only when they ask for something */
    cr_assert_eq(parse("--proxy off --cors * --host-whitelist * --pre-vote --enable-pprof=false"),
                 0, "%s", err);
    cr_assert_eq(config_validate(&cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg.n_notes, 0);
    cr_assert_eq(parse("--wal-dir /w --enable-pprof --backend-batch-limit 5"), 0, "%s", err);
    cr_assert_eq(cfg.n_notes, 2);
    for (size_t i = 0; i < cfg.n_notes; i++)
        cr_assert(strstr(cfg.notes[i].text, "--wal-dir") == NULL, "%s", cfg.notes[i].text);
    /* --wal-dir is taken (bootstrap.c): without trailing slashes, and
     * naming <data-dir>/member/wal is not giving it */
    cr_assert_str_eq(cfg.wal_dir, "/w");
    cr_assert_eq(parse("--wal-dir /w/x// --data-dir /d"), 0, "%s", err);
    cr_assert_str_eq(cfg.wal_dir, "/w/x");
    cr_assert_eq(parse("--wal-dir /d/member/wal/ --data-dir /d/"), 0, "%s", err);
    cr_assert_str_eq(cfg.wal_dir, "");
    /* --debug is --log-level=debug; --log-output is --log-outputs' old name */
    cr_assert_eq(parse("--debug --log-output stdout"), 0, "%s", err);
    cr_assert_str_eq(cfg.log_level, "debug");
    cr_assert_str_eq(cfg.log_outputs, "stdout");
}

/* docs/configuration.md's table of flags is config_doc_table's output (the
 * same table makes --help): it must be current. QUORUM_DOCS_WRITE=1
 * rewrites it. */
Test(config, docs_table_current)
{
    const char *path = getenv("QUORUM_CONFIG_DOC");
    if (path == NULL)
        cr_skip_test("QUORUM_CONFIG_DOC not set");
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s", path);
    static char doc[256 * 1024];
    size_t n = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[n] = '\0';
    static const char begin[] = "<!-- flags table: made by config_doc_table -->\n",
                      end[] = "<!-- end of flags table -->\n";
    char *b = strstr(doc, begin), *e = b ? strstr(b, end) : NULL;
    cr_assert(b != NULL && e != NULL, "no table markers in %s", path);
    b += strlen(begin);
    char *table = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&table, &tlen);
    config_doc_table(m);
    fclose(m);
    bool same = (size_t)(e - b) == tlen && memcmp(b, table, tlen) == 0;
    if (!same && getenv("QUORUM_DOCS_WRITE") != NULL) {
        f = fopen(path, "w");
        fwrite(doc, 1, (size_t)(b - doc), f);
        fwrite(table, 1, tlen, f);
        fputs(e, f);
        fclose(f);
        same = true;
    }
    free(table);
    cr_assert(same,
              "%s: the flags table is stale (QUORUM_DOCS_WRITE=1 meson test -C build "
              "config rewrites it)",
              path);
}

/* the cluster-behaviour flags (docs/cluster-flags.md): etcd 3.4's
 * defaults, and each flag read */
Test(config, cluster_behaviour_flags)
{
    cr_assert_eq(parse(""), 0, "%s", err);
    cr_assert(cfg.strict_reconfig_check);
    cr_assert_eq(cfg.max_snapshots, 5);
    cr_assert_eq(cfg.max_wals, 5);
    cr_assert(!cfg.force_new_cluster && !cfg.unsafe_no_fsync && !cfg.initial_corrupt_check);
    cr_assert_str_eq(cfg.discovery_srv, "");
    cr_assert_str_eq(cfg.discovery_srv_name, "");
    cr_assert_eq(parse("--strict-reconfig-check=false --max-snapshots 0 --max-wals=7 "
                       "--force-new-cluster --unsafe-no-fsync "
                       "--experimental-initial-corrupt-check=true --discovery-srv example.com "
                       "--discovery-srv-name=prod"),
                 0, "%s", err);
    cr_assert(!cfg.strict_reconfig_check);
    cr_assert_eq(cfg.max_snapshots, 0);
    cr_assert_eq(cfg.max_wals, 7);
    cr_assert(cfg.force_new_cluster && cfg.unsafe_no_fsync && cfg.initial_corrupt_check);
    cr_assert_str_eq(cfg.discovery_srv, "example.com");
    cr_assert_str_eq(cfg.discovery_srv_name, "prod");
    expect_flag_error("--max-wals=-1", "invalid value \"-1\" for flag -max-wals: parse error");
}

/* the bounds of docs/faults.md: defaults as etcd (no limit, grpc-go's
 * 120 s handshake, no idle timeout) and their values */
Test(config, bounds_flags)
{
    cr_assert_eq(parse(""), 0, "%s", err);
    cr_assert_eq(cfg.max_client_conns, 0);
    cr_assert_eq(cfg.client_handshake_ms, 120000);
    cr_assert_eq(cfg.client_idle_ms, 0);
    cr_assert_eq(cfg.max_watch_buffer_bytes, 64u << 20);
    cr_assert_eq(parse("--max-client-connections 500 --client-handshake-timeout 5s "
                       "--client-idle-timeout=2m --max-watch-buffer-bytes 1048576"),
                 0, "%s", err);
    cr_assert_eq(cfg.max_client_conns, 500);
    cr_assert_eq(cfg.client_handshake_ms, 5000);
    cr_assert_eq(cfg.client_idle_ms, 120000);
    cr_assert_eq(cfg.max_watch_buffer_bytes, 1048576);
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

/* the ZooKeeper face's flags (docs/zookeeper.md): ZooKeeper's defaults,
 * from argv and from ETCD_* variables */
Test(config, zookeeper_flags)
{
    cr_assert_eq(parse(""), 0, "%s", err);
    cr_assert_str_eq(cfg.zk_4lw_whitelist, "srvr");
    cr_assert_eq(cfg.zk_container_check_ms, 60000);
    cr_assert_eq(parse("--zk-4lw-commands-whitelist=ruok,mntr --zk-container-check-interval 500ms"),
                 0, "%s", err);
    cr_assert_str_eq(cfg.zk_4lw_whitelist, "ruok,mntr");
    cr_assert_eq(cfg.zk_container_check_ms, 500);
    cr_assert_eq(parse_argv(ARGV("--name", "z"), ENVP("ETCD_ZK_4LW_COMMANDS_WHITELIST=*",
                                                      "ETCD_ZK_CONTAINER_CHECK_INTERVAL=2s")),
                 0, "%s", err);
    cr_assert_str_eq(cfg.zk_4lw_whitelist, "*");
    cr_assert_eq(cfg.zk_container_check_ms, 2000);
}
