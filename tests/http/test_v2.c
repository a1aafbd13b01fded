/* tests/http/test_v2.c: criterion tests for the pure helpers of the v2 keys
 * emulation (src/http/v2_util.c, v2_node.c): Go's path.Clean and ServeMux
 * cleaning, etcd v2v3's key layout, form parsing as Go's net/http does it,
 * Go's JSON strings, RFC 3339 times, v2 events and errors.
 *
 * Expected texts marked "etcd:" were printed by etcd 3.4.23 (go1.19.8)
 * in v2v3 mode for the curl shown; the others are what Go's library
 * functions return for the input (path.Clean, url.ParseQuery,
 * strconv.ParseBool, strconv.Quote, time.RFC3339Nano). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http/v2_int.h"
#include "kv.pb-c.h"

static char *clean(const char *p)
{
    static char out[256];
    v2_path_clean(p, strlen(p), out);
    return out;
}

static char *mux(const char *p)
{
    static char out[256];
    v2_mux_clean(p, strlen(p), out);
    return out;
}

Test(v2_path, clean_as_go)
{
    static const char *const cases[][2] = {
        {"", "."},
        {"/", "/"},
        {"abc", "abc"},
        {"/abc/", "/abc"},
        {"a//b", "a/b"},
        {"/1/a/./b", "/1/a/b"},
        {"/1/a/../b", "/1/b"},
        {"/..", "/"},
        {"/../a", "/a"},
        {"a/../..", ".."},
        {"../../a", "../../a"},
        {"/1//a//", "/1/a"},
        {"/1/.", "/1"},
        {"./a", "a"},
        {"a/b/..", "a"},
        {"/a/b/c/../../d", "/a/d"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_str_eq(clean(cases[i][0]), cases[i][1], "clean(%s)", cases[i][0]);
}

Test(v2_path, mux_keeps_trailing_slash)
{
    cr_assert_str_eq(mux(""), "/");
    cr_assert_str_eq(mux("/v2/keys/"), "/v2/keys/");
    cr_assert_str_eq(mux("/v2/keys//k"), "/v2/keys/k");
    cr_assert_str_eq(mux("/v2/keys/x/../k"), "/v2/keys/k");
    cr_assert_str_eq(mux("/v2/keys/a//"), "/v2/keys/a/");
    cr_assert_str_eq(mux("v2/keys"), "/v2/keys");
    cr_assert_str_eq(mux("/.."), "/");
    cr_assert_str_eq(mux("/../"), "/");
}

Test(v2_path, escape_as_url_escaped_path)
{
    struct buf b = {0};
    static const char in[] = "/v2/keys/a b?c%\x01\xff~$&+,:;=@";
    cr_assert_eq(v2_path_escape(&b, in, sizeof(in) - 1), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    cr_assert_str_eq((char *)b.data, "/v2/keys/a%20b%3Fc%25%01%FF~$&+,:;=@");
    buf_free(&b);
}

static char *key(const char *path, int add, bool dir)
{
    static struct buf b;
    cr_assert_eq(v2_key(&b, "/v2v3", path, strlen(path), add, dir), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    return (char *)b.data;
}

Test(v2_layout, keys_as_etcd)
{
    /* etcd: notes/v2.md section 1 */
    cr_assert_str_eq(key("/1/foo", 0, false), "/v2v3/002/k//1/foo");
    cr_assert_str_eq(key("/1/a/b", 0, false), "/v2v3/003/k//1/a/b");
    cr_assert_str_eq(key("/1/dir", 0, true), "/v2v3/002/k//1/dir/");
    cr_assert_str_eq(key("/1/dir", 1, false), "/v2v3/003/k//1/dir");
    cr_assert_str_eq(key("/1", 1, false), "/v2v3/002/k//1");
    cr_assert_str_eq(key("/1/d", 63, true), "/v2v3/065/k//1/d/");
}

static bool path_of(const char *k, char *out, bool *dir)
{
    struct buf b = {0};
    bool ok = v2_key_path("/v2v3", (const uint8_t *)k, strlen(k), &b, dir);
    if (ok) {
        memcpy(out, b.data, b.len);
        out[b.len] = 0;
    }
    buf_free(&b);
    return ok;
}

Test(v2_layout, paths_back)
{
    char p[256];
    bool dir = false;
    cr_assert(path_of("/v2v3/003/k//1/a/b", p, &dir));
    cr_assert_str_eq(p, "/1/a/b");
    cr_assert(!dir);
    cr_assert(path_of("/v2v3/002/k//1/dir/", p, &dir));
    cr_assert_str_eq(p, "/1/dir");
    cr_assert(dir);
    /* not nodes: the act key, keys beside the prefix, paths not under /1 */
    cr_assert(!path_of("/v2v3/act", p, &dir));
    cr_assert(!path_of("/v2v3x/002/k//1/a", p, &dir));
    cr_assert(!path_of("/v2v3/002/k//2/a", p, &dir));
    cr_assert(!path_of("/v2v3/002/k//1x", p, &dir));
    cr_assert(!path_of("/v2v3/0a2/k//1/a", p, &dir));
    cr_assert(!path_of("/v2v3/002/x//1/a", p, &dir));
    cr_assert(!path_of("", p, &dir));
}

Test(v2_layout, prefix_end)
{
    struct buf b = {0};
    cr_assert_eq(v2_prefix_end(&b, (const uint8_t *)"/v2v3", 5), 0);
    cr_assert_eq(b.len, 5);
    cr_assert_eq(memcmp(b.data, "/v2v4", 5), 0);
    cr_assert_eq(v2_prefix_end(&b, (const uint8_t *)"a\xff\xff", 3), 0);
    cr_assert_eq(b.len, 1);
    cr_assert_eq(b.data[0], 'b');
    cr_assert_eq(v2_prefix_end(&b, (const uint8_t *)"\xff", 1), 0);
    cr_assert_eq(b.len, 1);
    cr_assert_eq(b.data[0], 0);
    buf_free(&b);
}

static const char *get(const struct v2_form *f, const char *name)
{
    const struct v2_field *x = v2_form_get(f, name);
    return x ? x->v : NULL;
}

Test(v2_form, parse_as_go)
{
    struct v2_form f = {0};
    char err[128] = "";
    const char *s = "value=a+b%20c&ttl=&dir&prevValue=x&value=second&&%41=%42";
    cr_assert_eq(v2_form_parse(&f, s, strlen(s), err, sizeof(err)), 0);
    cr_assert_str_eq(get(&f, "value"), "a b c"); /* the first one */
    cr_assert_str_eq(get(&f, "ttl"), "");
    cr_assert_str_eq(get(&f, "dir"), "");
    cr_assert_str_eq(get(&f, "A"), "B");
    cr_assert_null(get(&f, "missing"));
    cr_assert_eq(f.n, 6);
    /* a value with a NUL */
    cr_assert_eq(v2_form_parse(&f, "z=a%00b", 7, err, sizeof(err)), 0);
    const struct v2_field *z = v2_form_get(&f, "z");
    cr_assert_eq(z->vn, 3);
    cr_assert_eq(memcmp(z->v, "a\0b", 3), 0);
    v2_form_free(&f);
}

Test(v2_form, errors_as_go)
{
    struct v2_form f = {0};
    char err[128] = "";
    /* etcd: curl -XPUT 'P/v2/keys/k?a=%zz' -> cause "invalid URL escape \"%zz\"" */
    cr_assert_eq(v2_form_parse(&f, "a=%zz&b=1", 9, err, sizeof(err)), 1);
    cr_assert_str_eq(err, "invalid URL escape \"%zz\"");
    cr_assert_str_eq(get(&f, "b"), "1"); /* the rest is kept */
    cr_assert_eq(v2_form_parse(&f, "c=%4", 4, err, sizeof(err)), 1);
    cr_assert_str_eq(err, "invalid URL escape \"%4\"");
    cr_assert_eq(v2_form_parse(&f, "%=1", 3, err, sizeof(err)), 1); /* the key is "%" */
    cr_assert_str_eq(err, "invalid URL escape \"%\"");
    cr_assert_eq(v2_form_parse(&f, "d=%\xc3\xa9", 5, err, sizeof(err)), 1);
    cr_assert_str_eq(err, "invalid URL escape \"%\xc3\xa9\"");
    cr_assert_eq(v2_form_parse(&f, "d=%\xff\x01", 5, err, sizeof(err)), 1);
    cr_assert_str_eq(err, "invalid URL escape \"%\\xff\\x01\"");
    /* etcd: curl -XPUT 'P/v2/keys/a?x;y=2' -> "invalid semicolon separator in query";
     * the first error is kept, but a ";" always wins (Go 1.17+) */
    strcpy(err, "");
    cr_assert_eq(v2_form_parse(&f, "a=%zz&x;y=2", 11, err, sizeof(err)), 1);
    cr_assert_str_eq(err, "invalid semicolon separator in query");
    cr_assert_eq(v2_form_parse(&f, "x;y=2&a=%zz", 11, err, sizeof(err)), 1);
    cr_assert_str_eq(err, "invalid semicolon separator in query");
    v2_form_free(&f);
}

Test(v2_form, content_type)
{
    cr_assert(v2_ctype_is_form("application/x-www-form-urlencoded"));
    cr_assert(v2_ctype_is_form("Application/X-WWW-Form-Urlencoded; charset=utf-8"));
    cr_assert(v2_ctype_is_form(" application/x-www-form-urlencoded ;x=y"));
    cr_assert(!v2_ctype_is_form(NULL));
    cr_assert(!v2_ctype_is_form("text/plain"));
    cr_assert(!v2_ctype_is_form("application/json"));
    cr_assert(!v2_ctype_is_form("multipart/form-data; boundary=x"));
}

Test(v2_form, bools_and_uints)
{
    bool b;
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < 6; i++) {
        cr_assert(v2_parse_bool(yes[i], strlen(yes[i]), &b) && b);
        cr_assert(v2_parse_bool(no[i], strlen(no[i]), &b) && !b);
    }
    static const char *const bad[] = {"", "yes", "tRUE", "2", " true", "true "};
    for (size_t i = 0; i < 6; i++)
        cr_assert(!v2_parse_bool(bad[i], strlen(bad[i]), &b), "%s", bad[i]);
    uint64_t u;
    cr_assert(v2_parse_uint("0", 1, &u) && u == 0);
    cr_assert(v2_parse_uint("18446744073709551615", 20, &u) && u == UINT64_MAX);
    cr_assert(!v2_parse_uint("18446744073709551616", 20, &u));
    cr_assert(!v2_parse_uint("", 0, &u));
    cr_assert(!v2_parse_uint("-1", 2, &u));
    cr_assert(!v2_parse_uint("+1", 2, &u));
    cr_assert(!v2_parse_uint("1_0", 3, &u));
    cr_assert(!v2_parse_uint("abc", 3, &u));
}

static char *json(const char *s, size_t n)
{
    static struct buf b;
    buf_reset(&b);
    cr_assert_eq(v2_json_string(&b, s, n), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    return (char *)b.data;
}

Test(v2_json, strings_as_go)
{
    /* etcd: curl -XPUT P/v2/keys/j --data-urlencode $'value=a\x08b\x0c\x01\x7f\xff<>&\u2028"\\\n\t'
     */
    static const char in[] = "a\x08"
                             "b\x0c\x01\x7f\xff<>&\xe2\x80\xa8\"\\\n\t";
    cr_assert_str_eq(json(in, sizeof(in) - 1),
                     "\"a\\u0008b\\u000c\\u0001\x7f\\ufffd\\u003c\\u003e\\u0026\\u2028\\\"\\\\"
                     "\\n\\t\"");
    /* etcd: the key of PUT P/v2/keys/x%00y */
    cr_assert_str_eq(json("/x\0y", 4), "\"/x\\u0000y\"");
    /* valid UTF-8 stays; overlong forms, surrogates and truncations do not */
    cr_assert_str_eq(json("\xc3\xa9\xf0\x9f\x98\x80", 6), "\"\xc3\xa9\xf0\x9f\x98\x80\"");
    cr_assert_str_eq(json("\xc0\xaf", 2), "\"\\ufffd\\ufffd\"");
    cr_assert_str_eq(json("\xed\xa0\x80", 3), "\"\\ufffd\\ufffd\\ufffd\"");
    cr_assert_str_eq(json("\xe2\x82", 2), "\"\\ufffd\\ufffd\"");
    cr_assert_str_eq(json("\xe2\x80\xa9", 3), "\"\\u2029\"");
    cr_assert_str_eq(json("", 0), "\"\"");
}

Test(v2_json, rfc3339)
{
    char t[64];
    v2_rfc3339(t, sizeof(t), 1795264544786799431LL);
    cr_assert_str_eq(t, "2026-11-21T12:35:44.786799431Z");
    v2_rfc3339(t, sizeof(t), 1795264544000000000LL);
    cr_assert_str_eq(t, "2026-11-21T12:35:44Z");
    v2_rfc3339(t, sizeof(t), 1795264544100000000LL);
    cr_assert_str_eq(t, "2026-11-21T12:35:44.1Z");
}

static char *event_text(const struct v2_event *ev)
{
    static struct buf b;
    buf_reset(&b);
    cr_assert_eq(v2_event_json(&b, ev), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    return (char *)b.data;
}

Test(v2_json, events_as_etcd)
{
    struct arena a = {0};
    /* etcd: PUT /foo value=bar2 over bar (notes section 5) */
    struct v2_node *n = v2_node_new(&a, "/1/foo", 6), *p = v2_node_new(&a, "/1/foo", 6);
    n->value = (const uint8_t *)"bar2";
    n->value_len = 4;
    n->modified = 2;
    n->created = 1;
    p->value = (const uint8_t *)"bar";
    p->value_len = 3;
    p->modified = p->created = 1;
    struct v2_event ev = {"set", n, p};
    cr_assert_str_eq(event_text(&ev),
                     "{\"action\":\"set\",\"node\":{\"key\":\"/foo\",\"value\":\"bar2\","
                     "\"modifiedIndex\":2,\"createdIndex\":1},\"prevNode\":{\"key\":\"/foo\","
                     "\"value\":\"bar\",\"modifiedIndex\":1,\"createdIndex\":1}}\n");
    /* the root, fresh: {"action":"get","node":{"dir":true}} */
    struct v2_node *root = v2_node_new(&a, "/1", 2);
    root->dir = true;
    ev = (struct v2_event){"get", root, NULL};
    cr_assert_str_eq(event_text(&ev), "{\"action\":\"get\",\"node\":{\"dir\":true}}\n");
    /* the v2 store's ttl fields, in their place; a child list */
    struct v2_node *d = v2_node_new(&a, "/1/d", 4), *c = v2_node_new(&a, "/1/d/x", 6);
    d->dir = true;
    d->has_exp = true;
    d->exp_ns = 1795264544786799431LL;
    d->ttl = 5;
    d->modified = d->created = 4;
    c->value = (const uint8_t *)"";
    c->modified = 5;
    cr_assert_eq(v2_node_add_child(&a, d, c), 0);
    ev = (struct v2_event){"get", d, NULL};
    cr_assert_str_eq(event_text(&ev),
                     "{\"action\":\"get\",\"node\":{\"key\":\"/d\",\"dir\":true,\"expiration\":"
                     "\"2026-11-21T12:35:44.786799431Z\",\"ttl\":5,\"nodes\":[{\"key\":\"/d/x\","
                     "\"value\":\"\",\"modifiedIndex\":5}],\"modifiedIndex\":4,"
                     "\"createdIndex\":4}}\n");
    /* noValueOnSuccess: the action alone */
    ev = (struct v2_event){"set", NULL, NULL};
    cr_assert_str_eq(event_text(&ev), "{\"action\":\"set\"}\n");
    arena_free(&a);
}

Test(v2_json, node_from_kv)
{
    struct arena a = {0};
    Mvccpb__KeyValue kv = MVCCPB__KEY_VALUE__INIT;
    kv.key = (ProtobufCBinaryData){18, (uint8_t *)"/v2v3/003/k//1/a/b"};
    kv.value = (ProtobufCBinaryData){1, (uint8_t *)"v"};
    kv.create_revision = 3;
    kv.mod_revision = 5;
    kv.lease = 7;
    struct v2_node *n = v2_node_from_kv(&a, "/v2v3", &kv);
    cr_assert_not_null(n);
    cr_assert_eq(n->key_len, 6);
    cr_assert_eq(memcmp(n->key, "/1/a/b", 6), 0);
    cr_assert_eq(n->created, 2);
    cr_assert_eq(n->modified, 4);
    cr_assert_eq(n->lease, 7);
    cr_assert_eq(n->value_len, 1);
    /* a tombstone (a delete event's kv): value "", no createdIndex */
    kv.key = (ProtobufCBinaryData){19, (uint8_t *)"/v2v3/002/k//1/dir/"};
    kv.create_revision = 0;
    kv.value = (ProtobufCBinaryData){0, NULL};
    n = v2_node_from_kv(&a, "/v2v3", &kv);
    cr_assert(n->dir);
    cr_assert_null(n->value);
    cr_assert_eq(n->created, 0);
    kv.key = (ProtobufCBinaryData){9, (uint8_t *)"/v2v3/act"};
    cr_assert_null(v2_node_from_kv(&a, "/v2v3", &kv));
    arena_free(&a);
}

Test(v2_json, errors_as_etcd)
{
    struct buf b = {0};
    /* etcd: GET /nosuch */
    cr_assert_eq(v2_error_json(&b, 100, "/nosuch", 7, 1), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    cr_assert_str_eq((char *)b.data,
                     "{\"errorCode\":100,\"message\":\"Key not found\",\"cause\":\"/nosuch\","
                     "\"index\":1}\n");
    buf_reset(&b);
    /* etcd: PUT / (no cause) */
    cr_assert_eq(v2_error_json(&b, 107, NULL, 0, 0), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    cr_assert_str_eq((char *)b.data,
                     "{\"errorCode\":107,\"message\":\"Root is read only\",\"index\":0}\n");
    buf_free(&b);
    cr_assert_eq(v2_error_status(100), 404);
    cr_assert_eq(v2_error_status(101), 412);
    cr_assert_eq(v2_error_status(102), 403);
    cr_assert_eq(v2_error_status(104), 400);
    cr_assert_eq(v2_error_status(105), 412);
    cr_assert_eq(v2_error_status(108), 403);
    cr_assert_eq(v2_error_status(300), 500);
    cr_assert_eq(v2_error_status(210), 400);
}
