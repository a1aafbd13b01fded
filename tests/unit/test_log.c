/* Unit tests for base/log: the zap JSON and capnslog renderings, Go
 * duration strings, etcd's checks of --logger/--log-outputs/--log-level,
 * file and journal outputs. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"

static char *render(enum log_format fmt, enum log_level level, const char *msg,
                    const struct log_field *f, size_t n)
{
    struct log_record r = {.level = level,
                           .file = "../src/server/node.c",
                           .line = 1094,
                           .module = "raft",
                           .msg = msg,
                           .fields = f,
                           .n_fields = n};
    r.ts.tv_sec = 1795309323; /* 2026-11-22 01:02:03 UTC */
    r.ts.tv_nsec = 123456789;
    size_t len = 0;
    char *s = log_render(fmt, &r, &len);
    cr_assert_not_null(s);
    cr_assert_eq(strlen(s), len);
    cr_assert_eq(s[len - 1], '\n');
    return s;
}

static void dur(int64_t ns, const char *want)
{
    char b[64];
    log_go_duration(b, sizeof(b), ns);
    cr_expect_str_eq(b, want, "%lld ns", (long long)ns);
}

Test(log, go_durations)
{
    dur(0, "0s");
    dur(1, "1ns");
    dur(999, "999ns");
    dur(1000, "1\xc2\xb5s");
    dur(1500, "1.5\xc2\xb5s");
    dur(272006, "272.006\xc2\xb5s");
    dur(1000000, "1ms");
    dur(100000000, "100ms");
    dur(6562318, "6.562318ms");
    dur(1000000000, "1s");
    dur(1234000000, "1.234s");
    dur(1000000001, "1.000000001s");
    dur(60000000000LL, "1m0s");
    dur(90500000000LL, "1m30.5s");
    dur(3600000000000LL, "1h0m0s");
    dur(7384500000000LL, "2h3m4.5s");
    dur(-1500000, "-1.5ms");
}

Test(log, human_bytes)
{
    char b[32];
    log_human_bytes(b, sizeof(b), 0);
    cr_expect_str_eq(b, "0 B");
    log_human_bytes(b, sizeof(b), 9);
    cr_expect_str_eq(b, "9 B");
    log_human_bytes(b, sizeof(b), 999);
    cr_expect_str_eq(b, "999 B");
    log_human_bytes(b, sizeof(b), 20480); /* etcd: "current-db-size":"20 kB" */
    cr_expect_str_eq(b, "20 kB");
    log_human_bytes(b, sizeof(b), 16384);
    cr_expect_str_eq(b, "16 kB");
    log_human_bytes(b, sizeof(b), 2147483648u); /* etcd: "quota-size":"2.1 GB" */
    cr_expect_str_eq(b, "2.1 GB");
    log_human_bytes(b, sizeof(b), 1500);
    cr_expect_str_eq(b, "1.5 kB");
}

Test(log, caller_is_dir_and_file)
{
    char b[128];
    log_caller(b, sizeof(b), "../src/server/node.c", 12);
    cr_expect_str_eq(b, "server/node.c:12");
    log_caller(b, sizeof(b), "/work/x/src/mvcc/kvstore.c", 7);
    cr_expect_str_eq(b, "mvcc/kvstore.c:7");
    log_caller(b, sizeof(b), "main.c", 3);
    cr_expect_str_eq(b, "main.c:3");
    log_caller(b, sizeof(b), "../tests/unit/test_log.c", 3);
    cr_expect_str_eq(b, "unit/test_log.c:3");
}

Test(log, zap_shape_and_field_types)
{
    static const char *const urls[] = {"http://a:1", "http://b:2"};
    struct log_field f[] = {
        LF_DUR("took", 148919837),  LF_DUR("expected-duration", 100000000),
        LF_STR("prefix", ""),       LF_INT("compact-revision", -3),
        LF_UINT("big", UINT64_MAX), LF_ID("local-member-id", 0x8e9e05c52164694dull),
        LF_ID("small-id", 0x1234),  LF_BOOL("yes", 1),
        LF_BOOL("no", 0),           LF_STRS("peer-urls", urls, 2),
        LF_STR("error", NULL),      LF_STRS("none", urls, 0),
    };
    char *s = render(LOG_FORMAT_ZAP, LOG_WARN, "apply request took too long", f,
                     sizeof(f) / sizeof(f[0]));
    /* the time is local with zap's ISO8601 encoder: check the rest exactly */
    cr_assert(strncmp(s, "{\"level\":\"warn\",\"ts\":\"", 22) == 0, "%s", s);
    const char *rest = strstr(s, "\",\"caller\"");
    cr_assert_not_null(rest, "%s", s);
    cr_expect_str_eq(rest,
                     "\",\"caller\":\"server/node.c:1094\",\"msg\":\"apply request took too long\","
                     "\"took\":\"148.919837ms\",\"expected-duration\":\"100ms\",\"prefix\":\"\","
                     "\"compact-revision\":-3,\"big\":18446744073709551615,"
                     "\"local-member-id\":\"8e9e05c52164694d\",\"small-id\":\"1234\","
                     "\"yes\":true,\"no\":false,\"peer-urls\":[\"http://a:1\",\"http://b:2\"],"
                     "\"none\":[]}\n");
    /* "2026-11-22T01:02:03.123Z" in UTC, an offset elsewhere */
    const char *ts = s + 22;
    cr_expect(ts[4] == '-' && ts[7] == '-' && ts[10] == 'T' && ts[13] == ':' && ts[19] == '.');
    cr_expect(strncmp(ts + 19, ".123", 4) == 0, "%s", s);
    free(s);
}

Test(log, zap_utc_timestamp)
{
    setenv("TZ", "UTC", 1);
    tzset();
    char *s = render(LOG_FORMAT_ZAP, LOG_INFO, "m", NULL, 0);
    cr_expect_str_eq(s, "{\"level\":\"info\",\"ts\":\"2026-11-22T01:02:03.123Z\","
                        "\"caller\":\"server/node.c:1094\",\"msg\":\"m\"}\n");
    free(s);
    setenv("TZ", "CET-1", 1); /* one hour east, no DST rule */
    tzset();
    s = render(LOG_FORMAT_ZAP, LOG_ERROR, "m", NULL, 0);
    cr_expect(strstr(s, "\"level\":\"error\",\"ts\":\"2026-11-22T02:02:03.123+0100\"") != NULL,
              "%s", s);
    free(s);
    unsetenv("TZ");
    tzset();
}

Test(log, zap_escaping)
{
    struct log_field f[] = {
        LF_STR("request", "key:\"foo\\bar\" <&>"),
        LF_STR("ctl", "a\nb\rc\td\x01\x1f\x7f"),
        LF_STR("utf8", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
        LF_STR("bad", "x\xff\xc3(\xed\xa0\x80y"), /* stray byte, cut sequence, surrogate */
        LF_STR("odd \"key\"", "v"),
    };
    char *s = render(LOG_FORMAT_ZAP, LOG_INFO, "a \"quoted\" msg\n", f, 5);
    const char *rest = strstr(s, ",\"msg\"");
    cr_assert_not_null(rest);
    cr_expect_str_eq(rest, ",\"msg\":\"a \\\"quoted\\\" msg\\n\","
                           "\"request\":\"key:\\\"foo\\\\bar\\\" <&>\","
                           "\"ctl\":\"a\\nb\\rc\\td\\u0001\\u001f\x7f\","
                           "\"utf8\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
                           "\"bad\":\"x\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffdy\","
                           "\"odd \\\"key\\\"\":\"v\"}\n");
    free(s);
}

Test(log, capnslog_console)
{
    char *s = render(LOG_FORMAT_CAPNSLOG, LOG_INFO, "leader is 1 at term 2", NULL, 0);
    cr_expect_str_eq(s, "2026-11-22 01:02:03.123456 I | raft: leader is 1 at term 2\n");
    free(s);
    struct log_field f[] = {LF_INT("compact-revision", 3), LF_DUR("took", 1099250),
                            LF_STR("error", NULL), LF_STR("path", "a\"b")};
    s = render(LOG_FORMAT_CAPNSLOG, LOG_WARN, "finished scheduled compaction", f, 4);
    cr_expect_str_eq(s,
                     "2026-11-22 01:02:03.123456 W | raft: finished scheduled compaction "
                     "{\"compact-revision\": 3, \"took\": \"1.09925ms\", \"path\": \"a\\\"b\"}\n");
    free(s);
    s = render(LOG_FORMAT_CAPNSLOG, LOG_ERROR, "x", NULL, 0);
    cr_expect(strstr(s, " E | raft: x\n") != NULL);
    free(s);
    s = render(LOG_FORMAT_CAPNSLOG, LOG_DEBUG, "x", NULL, 0);
    cr_expect(strstr(s, " D | raft: x\n") != NULL);
    free(s);
}

Test(log, long_lines_are_whole)
{
    size_t n = 100000;
    char *big = malloc(n + 1);
    memset(big, 'k', n);
    big[n] = '\0';
    struct log_field f[] = {LF_STR("request", big)};
    char *s = render(LOG_FORMAT_ZAP, LOG_WARN, "m", f, 1);
    cr_expect(strlen(s) > n);
    cr_expect(strstr(s, "kkk\"}\n") != NULL);
    free(s);
    free(big);
}

Test(log, levels)
{
    cr_expect_eq(log_parse_level("debug"), LOG_DEBUG);
    cr_expect_eq(log_parse_level("info"), LOG_INFO);
    cr_expect_eq(log_parse_level("warn"), LOG_WARN);
    cr_expect_eq(log_parse_level("error"), LOG_ERROR);
    cr_expect_eq(log_parse_level("panic"), LOG_FATAL);
    cr_expect_eq(log_parse_level("fatal"), LOG_FATAL);
    cr_expect_eq(log_parse_level("WARN"), -1);
    cr_expect_eq(log_parse_level("bogus"), -1);
}

Test(log, setup_refusals_as_etcd)
{
    char err[512];
    cr_expect_neq(log_setup("foo", "default", "info", "q", err, sizeof(err)), 0);
    cr_expect_str_eq(err, "unknown logger option \"foo\"");
    cr_expect_neq(log_setup("zap", "default", "bogus", "q", err, sizeof(err)), 0);
    cr_expect_str_eq(err, "unknown level \"bogus\"");
    cr_expect_neq(log_setup("zap", "default,stdout", "info", "q", err, sizeof(err)), 0);
    cr_expect_str_eq(err, "multi logoutput for \"default\" is not supported yet");
    cr_expect_neq(log_setup("zap", "/nonexistent/dir/x.log", "info", "q", err, sizeof(err)), 0);
    cr_expect_str_eq(err, "open sink \"/nonexistent/dir/x.log\": open /nonexistent/dir/x.log: "
                          "no such file or directory");
    log_journal_socket("/nonexistent/journal.sock");
    cr_expect_neq(log_setup("zap", "systemd/journal", "info", "q", err, sizeof(err)), 0);
    cr_expect_str_eq(err, "can't find journal (dial unixgram /nonexistent/journal.sock: connect: "
                          "no such file or directory)");
    cr_expect_neq(log_setup("zap", "systemd/journal,stderr", "info", "q", err, sizeof(err)), 0);
    cr_expect(strstr(err, "running with systemd/journal but other '--log-outputs' values") == err);
    cr_expect_eq(log_min_level, LOG_INFO, "a refused setup changes nothing");
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

Test(log, file_outputs_append_and_levels)
{
    char dir[] = "/tmp/test_log_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char a[64], b[64], both[256];
    snprintf(a, sizeof(a), "%s/a.log", dir);
    snprintf(b, sizeof(b), "%s/b.log", dir);
    FILE *pre = fopen(a, "w");
    fputs("existing line\n", pre);
    fclose(pre);
    snprintf(both, sizeof(both), "%s,%s,%s", a, b, a); /* a twice: written once */
    char err[512] = "";
    cr_assert_eq(log_setup("zap", both, "warn", "q", err, sizeof(err)), 0, "%s", err);
    log_info("test", "not kept: below warn");
    log_kv(LOG_WARN, "test", "kept", LF_INT("n", 1));
    log_error("test", "formatted %d", 42);
    log_defaults();
    struct stat st;
    cr_assert_eq(stat(b, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0644 & ~(mode_t)umask(022));
    char *text = slurp(a);
    cr_expect(strncmp(text, "existing line\n{\"level\":\"warn\"", 29) == 0, "%s", text);
    cr_expect(strstr(text, "\"msg\":\"kept\",\"n\":1}\n") != NULL, "%s", text);
    cr_expect(strstr(text, "\"level\":\"error\"") != NULL);
    cr_expect(strstr(text, "\"msg\":\"formatted 42\"}\n") != NULL);
    cr_expect(strstr(text, "not kept") == NULL);
    cr_expect(strstr(text, "\"caller\":\"../") == NULL, "%s", text);
    int lines = 0;
    for (char *p = text; *p; p++)
        lines += *p == '\n';
    cr_expect_eq(lines, 3, "%s", text);
    text = slurp(b);
    cr_expect(strstr(text, "\"msg\":\"kept\"") != NULL);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

Test(log, journal_native_protocol)
{
    char dir[] = "/tmp/test_log_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%s/journal.sock", dir);
    int srv = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    cr_assert_eq(bind(srv, (struct sockaddr *)&sa, sizeof(sa)), 0);
    log_journal_socket(path);
    char err[512] = "";
    cr_assert_eq(log_setup("zap", "systemd/journal", "info", "/usr/bin/quorum", err, sizeof(err)),
                 0, "%s", err);
    log_kv(LOG_WARN, "wal", "slow fdatasync", LF_DUR("took", 1500000000),
           LF_DUR("expected-duration", 1000000000));
    log_info("server", "two\nlines");
    log_defaults();
    char buf[4096];
    ssize_t n = recv(srv, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_expect(strncmp(buf, "MESSAGE={\"level\":\"warn\",", 24) == 0, "%s", buf);
    cr_expect(strstr(buf, "\"msg\":\"slow fdatasync\",\"took\":\"1.5s\","
                          "\"expected-duration\":\"1s\"}\nPRIORITY=4\n") != NULL,
              "%s", buf);
    cr_expect(strstr(buf, "\nPACKAGE=unit\n") != NULL, "%s", buf); /* tests/unit/test_log.c */
    cr_expect(strstr(buf, "\nSYSLOG_IDENTIFIER=quorum\n") != NULL, "%s", buf);
    /* the JSON line has no raw newline; a console line would use the
     * binary form; this one has none either (escaped in JSON) */
    n = recv(srv, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_expect(strstr(buf, "\"msg\":\"two\\nlines\"}\nPRIORITY=6\n") != NULL, "%s", buf);
    close(srv);
    unlink(path);
    rmdir(dir);
}

Test(log, journal_binary_field_for_newlines)
{
    char dir[] = "/tmp/test_log_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%s/journal.sock", dir);
    int srv = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    cr_assert_eq(bind(srv, (struct sockaddr *)&sa, sizeof(sa)), 0);
    log_journal_socket(path);
    char err[512] = "";
    cr_assert_eq(log_setup("capnslog", "systemd/journal", "info", "q", err, sizeof(err)), 0);
    log_info("server", "a\nb");
    log_defaults();
    char buf[4096];
    ssize_t n = recv(srv, buf, sizeof(buf), MSG_DONTWAIT);
    cr_assert_gt(n, 20);
    cr_assert(memcmp(buf, "MESSAGE\n", 8) == 0);
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)(uint8_t)buf[8 + i] << (8 * i);
    cr_assert_lt(16 + len, (uint64_t)n);
    cr_expect(memmem(buf + 16, len, " I | server: a\nb", 16) != NULL, "%.*s", (int)len, buf + 16);
    cr_expect_eq(buf[16 + len], '\n');
    cr_expect(memmem(buf, (size_t)n, "\nPRIORITY=6\n", 12) != NULL);
    close(srv);
    unlink(path);
    rmdir(dir);
}
