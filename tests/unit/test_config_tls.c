/* tests/unit/test_config_tls.c: what server/config.c makes of TLS and
 * unix-socket URLs and flags: https:// and unixs:// set url.tls, unix
 * sockets keep their path, and etcd 3.4's start-up errors (https without a
 * certificate, an unknown cipher suite) come with etcd's words. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "server/config.h"

Test(config_tls, urls)
{
    struct url u[4];
    size_t n = 0;
    char err[256] = "";
    cr_assert_eq(config_parse_urls("https://127.0.0.1:2379,http://[::1]:2380", u, 4, &n, err,
                                   sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(n, 2);
    cr_assert(u[0].tls);
    cr_assert(!u[0].unix_sock);
    cr_assert_str_eq(u[0].host, "127.0.0.1");
    cr_assert_eq(u[0].port, 2379);
    cr_assert_str_eq(u[0].text, "https://127.0.0.1:2379");
    cr_assert(!u[1].tls);
    cr_assert_str_eq(u[1].host, "::1");
    cr_assert_eq(config_parse_urls("unix://localhost:2379,unixs:///run/q.sock", u, 4, &n, err,
                                   sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(n, 2);
    cr_assert(u[0].unix_sock && !u[0].tls);
    cr_assert_str_eq(u[0].host, "localhost:2379");
    cr_assert_str_eq(u[0].text, "unix://localhost:2379");
    cr_assert(u[1].unix_sock && u[1].tls);
    cr_assert_str_eq(u[1].host, "/run/q.sock");
    cr_assert_eq(config_parse_urls("ftp://x:1", u, 4, &n, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "scheme") != NULL, "%s", err);
    cr_assert_eq(config_parse_urls("unix://", u, 4, &n, err, sizeof(err)), -EINVAL);
}

static int parse(char *err, size_t cap, const char *const *extra, int nextra)
{
    static struct config c;
    char *argv[32] = {"quorum", "--data-dir", "/tmp/nonexistent-config-test",
                      "--advertise-client-urls", "http://127.0.0.1:2379"};
    int argc = 5;
    for (int i = 0; i < nextra; i++)
        argv[argc++] = (char *)extra[i];
    memset(&c, 0, sizeof(c));
    int rv = config_parse(&c, argc, argv, err, cap);
    return rv != 0 ? rv : config_validate(&c, err, cap);
}

Test(config_tls, etcd_start_up_errors)
{
    char err[512] = "";
    const char *https[] = {"--listen-client-urls", "https://127.0.0.1:2379"};
    cr_assert_eq(parse(err, sizeof(err), https, 2), -EINVAL);
    cr_assert_str_eq(err, "TLS key/cert (--cert-file, --key-file) must be provided for client "
                          "url https://127.0.0.1:2379 with HTTPS scheme");
    const char *https_ok[] = {"--listen-client-urls", "https://127.0.0.1:2379", "--cert-file",
                              "a.crt", "--key-file", "a.key"};
    cr_assert_eq(parse(err, sizeof(err), https_ok, 6), 0, "%s", err);
    const char *auto_ok[] = {"--listen-client-urls", "unixs://x.sock", "--auto-tls"};
    cr_assert_eq(parse(err, sizeof(err), auto_ok, 3), 0, "%s", err);
    const char *peer[] = {"--listen-peer-urls", "https://127.0.0.1:2380",
                          "--initial-advertise-peer-urls", "https://127.0.0.1:2380"};
    cr_assert_eq(parse(err, sizeof(err), peer, 4), -EINVAL);
    cr_assert_str_eq(err,
                     "cannot listen on TLS for 127.0.0.1:2380: KeyFile and CertFile are not "
                     "presented");
    const char *cipher[] = {"--cipher-suites",
                            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NOPE"};
    cr_assert_eq(parse(err, sizeof(err), cipher, 2), -EINVAL);
    cr_assert_str_eq(err, "unexpected TLS cipher suite \"TLS_NOPE\"");
    const char *unix_peer[] = {"--listen-peer-urls", "unix://p.sock"};
    cr_assert_eq(parse(err, sizeof(err), unix_peer, 2), -EINVAL);
    cr_assert(strstr(err, "client URLs only") != NULL, "%s", err);
}
