/* tests/http/test_jsonpb.c: criterion tests for src/http/jsonpb.c, the JSON
 * mapping of etcd 3.4's gateway.
 *
 * Expected texts marked "etcd:" were printed by etcd 3.4.23 (Debian
 * etcd-server 3.4.23, started on 127.0.0.1 with an empty data dir) for the
 * curl shown, with P=http://127.0.0.1:<client port>; an error text is the
 * "error" member of the gateway's answer. Outputs are checked by reading
 * etcd's text into the message and writing it back byte for byte; inputs
 * by what they decode to and by the error text. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/jsonpb.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

static char errbuf[512];

/* parse: |json| into a message of |d|; fails the test on error */
static ProtobufCMessage *parse(const ProtobufCMessageDescriptor *d, const char *json)
{
    ProtobufCMessage *m = NULL;
    errbuf[0] = 0;
    int rc = jsonpb_parse(d, json, strlen(json), &m, errbuf, sizeof(errbuf));
    cr_assert_eq(rc, 0, "parse %s: %d %s", json, rc, errbuf);
    cr_assert_not_null(m);
    return m;
}

/* text: |m| as JSON, NUL-terminated (caller frees) */
static char *text(const ProtobufCMessage *m)
{
    struct buf b = {0};
    cr_assert_eq(jsonpb_write(m, &b), 0);
    cr_assert_eq(buf_append_byte(&b, 0), 0);
    return (char *)b.data;
}

/* same: |in| decodes (to packed bytes), and those encode to |want| */
static void same(const ProtobufCMessageDescriptor *d, const char *in, const char *want)
{
    struct buf pb = {0}, js = {0};
    int rc = jsonpb_decode(d, in, strlen(in), &pb, errbuf, sizeof(errbuf));
    cr_assert_eq(rc, 0, "decode %s: %d %s", in, rc, errbuf);
    cr_assert_eq(jsonpb_encode(d, pb.data, pb.len, &js), 0);
    cr_assert_eq(js.len, strlen(want), "%s:\n got %.*s\nwant %s", in, (int)js.len, js.data, want);
    cr_assert(memcmp(js.data, want, js.len) == 0, "%s:\n got %.*s\nwant %s", in, (int)js.len,
              js.data, want);
    buf_free(&pb);
    buf_free(&js);
}

/* etcd_out: etcd's text for a message of |d| reads and writes back as is */
static void etcd_out(const ProtobufCMessageDescriptor *d, const char *etcd)
{
    same(d, etcd, etcd);
}

/* fails: |in| is refused with |want| */
static void fails(const ProtobufCMessageDescriptor *d, const char *in, size_t len, const char *want)
{
    struct buf pb = {0};
    errbuf[0] = 0;
    int rc = jsonpb_decode(d, in, len, &pb, errbuf, sizeof(errbuf));
    cr_assert_eq(rc, -EINVAL, "%.*s: rc %d (want %s)", (int)len, in, rc, want);
    cr_assert_str_eq(errbuf, want, "%.*s", (int)len, in);
    cr_assert_eq(pb.len, 0);
    buf_free(&pb);
}

#define FAILS(d, in, want) fails(d, in, strlen(in), want)

static bool bytes_is(ProtobufCBinaryData b, const char *s)
{
    return b.len == strlen(s) && (b.len == 0 || memcmp(b.data, s, b.len) == 0);
}

#define RANGE_REQ (&etcdserverpb__range_request__descriptor)
#define PUT_REQ (&etcdserverpb__put_request__descriptor)
#define TXN_REQ (&etcdserverpb__txn_request__descriptor)
#define WATCH_REQ (&etcdserverpb__watch_request__descriptor)

/* ------------------------------------------------------------ requests */

Test(jsonpb, range_request_every_field)
{
    const char *in = "{\"key\":\"Zm9v\",\"range_end\":\"Zm9w\",\"limit\":\"10\",\"revision\":-3,"
                     "\"sort_order\":\"DESCEND\",\"sort_target\":4,\"serializable\":true,"
                     "\"keys_only\":true,\"count_only\":false,\"min_mod_revision\":\"1\","
                     "\"max_mod_revision\":\"9223372036854775807\",\"min_create_revision\":"
                     "\"-9223372036854775808\",\"max_create_revision\":5}";
    Etcdserverpb__RangeRequest *r = (Etcdserverpb__RangeRequest *)parse(RANGE_REQ, in);
    cr_assert(bytes_is(r->key, "foo") && bytes_is(r->range_end, "fop"));
    cr_assert_eq(r->limit, 10);
    cr_assert_eq(r->revision, -3);
    cr_assert_eq(r->sort_order, ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND);
    cr_assert_eq(r->sort_target, ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE);
    cr_assert(r->serializable && r->keys_only && !r->count_only);
    cr_assert_eq(r->min_mod_revision, 1);
    cr_assert_eq(r->max_mod_revision, INT64_MAX);
    cr_assert_eq(r->min_create_revision, INT64_MIN);
    cr_assert_eq(r->max_create_revision, 5);
    char *t = text(&r->base);
    /* declaration order, .proto names, 64-bit ints quoted, false left out */
    cr_assert_str_eq(
        t, "{\"key\":\"Zm9v\",\"range_end\":\"Zm9w\",\"limit\":\"10\",\"revision\":\"-3\","
           "\"sort_order\":\"DESCEND\",\"sort_target\":\"VALUE\",\"serializable\":true,"
           "\"keys_only\":true,\"min_mod_revision\":\"1\",\"max_mod_revision\":"
           "\"9223372036854775807\",\"min_create_revision\":\"-9223372036854775808\","
           "\"max_create_revision\":\"5\"}");
    free(t);
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

Test(jsonpb, put_request)
{
    Etcdserverpb__PutRequest *p = (Etcdserverpb__PutRequest *)parse(
        PUT_REQ, "{\"key\":\"Zm9v\",\"value\":\"YmFy\",\"lease\":\"7587869424462340101\","
                 "\"prev_kv\":true,\"ignore_value\":false,\"ignoreLease\":true}");
    cr_assert(bytes_is(p->key, "foo") && bytes_is(p->value, "bar"));
    cr_assert_eq(p->lease, 7587869424462340101LL);
    cr_assert(p->prev_kv && !p->ignore_value && p->ignore_lease);
    protobuf_c_message_free_unpacked(&p->base, NULL);
    /* curl -XPOST $P/v3/kv/put -d '{"key":"Zm9v","value":"YmFy"}' was
     * accepted; an empty value is the default and is left out */
    same(PUT_REQ, "{\"key\":\"Zm9v\",\"value\":\"\",\"lease\":0,\"prev_kv\":false}",
         "{\"key\":\"Zm9v\"}");
}

Test(jsonpb, txn_request_compares_and_nested_ops)
{
    /* etcd accepted this body (curl -XPOST $P/v3/kv/txn -d '...') */
    const char *in =
        "{\"compare\":[{\"key\":\"Zm9v\",\"result\":\"EQUAL\",\"target\":\"VALUE\",\"value\":"
        "\"YmF6\"},"
        "{\"key\":\"Zm9v\",\"result\":\"GREATER\",\"target\":\"VERSION\",\"version\":\"0\"},"
        "{\"key\":\"YQ==\",\"range_end\":\"Yg==\",\"result\":\"LESS\",\"target\":\"MOD\","
        "\"mod_revision\":\"12\"},{\"target\":\"LEASE\",\"lease\":\"77\",\"result\":3}],"
        "\"success\":[{\"request_range\":{\"key\":\"Zm9v\"}},{\"request_delete_range\":"
        "{\"key\":\"eA==\"}},{\"request_txn\":{\"success\":[{\"request_range\":{\"key\":\"Zm9v\","
        "\"count_only\":true}}]}}],\"failure\":[{\"request_put\":{\"key\":\"Zm9v\",\"value\":"
        "\"YmF6\"}}]}";
    Etcdserverpb__TxnRequest *t = (Etcdserverpb__TxnRequest *)parse(TXN_REQ, in);
    cr_assert_eq(t->n_compare, 4);
    cr_assert_eq(t->compare[0]->target_union_case, ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE);
    cr_assert(bytes_is(t->compare[0]->value, "baz"));
    cr_assert_eq(t->compare[1]->result, ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER);
    cr_assert_eq(t->compare[1]->target_union_case, ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION);
    cr_assert_eq(t->compare[1]->version, 0);
    cr_assert_eq(t->compare[2]->mod_revision, 12);
    cr_assert(bytes_is(t->compare[2]->range_end, "b"));
    cr_assert_eq(t->compare[3]->result, ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL);
    cr_assert_eq(t->compare[3]->lease, 77);
    cr_assert_eq(t->n_success, 3);
    cr_assert_eq(t->success[1]->request_case,
                 ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE);
    cr_assert_eq(t->success[2]->request_case, ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN);
    Etcdserverpb__TxnRequest *inner = t->success[2]->request_txn;
    cr_assert_eq(inner->n_success, 1);
    cr_assert(inner->success[0]->request_range->count_only);
    cr_assert_eq(t->n_failure, 1);
    cr_assert(bytes_is(t->failure[0]->request_put->value, "baz"));
    char *s = text(&t->base);
    /* a set oneof member is written even at its default: "version":"0";
     * range_end (64) follows the oneof as in the .proto */
    cr_assert_str_eq(
        s, "{\"compare\":[{\"target\":\"VALUE\",\"key\":\"Zm9v\",\"value\":\"YmF6\"},"
           "{\"result\":\"GREATER\",\"key\":\"Zm9v\",\"version\":\"0\"},{\"result\":\"LESS\","
           "\"target\":\"MOD\",\"key\":\"YQ==\",\"mod_revision\":\"12\",\"range_end\":\"Yg==\"},"
           "{\"result\":\"NOT_EQUAL\",\"target\":\"LEASE\",\"lease\":\"77\"}],\"success\":"
           "[{\"request_range\":{\"key\":\"Zm9v\"}},{\"request_delete_range\":{\"key\":\"eA==\"}},"
           "{\"request_txn\":{\"success\":[{\"request_range\":{\"key\":\"Zm9v\",\"count_only\":"
           "true}}]}}],\"failure\":[{\"request_put\":{\"key\":\"Zm9v\",\"value\":\"YmF6\"}}]}");
    free(s);
    protobuf_c_message_free_unpacked(&t->base, NULL);
    /* an empty op and an empty nested txn are still written, as {} */
    same(TXN_REQ, "{\"success\":[{},{\"request_txn\":{}}]}",
         "{\"success\":[{},{\"request_txn\":{}}]}");
}

Test(jsonpb, oneof_members)
{
    /* two members: the later field wins here (etcd: Go map order) */
    same(
        TXN_REQ,
        "{\"success\":[{\"request_put\":{\"key\":\"eg==\"},\"request_range\":{\"key\":\"Zm9v\"}}]}",
        "{\"success\":[{\"request_put\":{\"key\":\"eg==\"}}]}");
    same(TXN_REQ, "{\"compare\":[{\"value\":\"YQ==\",\"version\":\"3\",\"lease\":\"4\"}]}",
         "{\"compare\":[{\"lease\":\"4\"}]}");
    /* null: a scalar member is set to zero (Go sets the wrapper); a message
     * member is left unset (Go's nil message marshals to nothing) */
    same(TXN_REQ, "{\"compare\":[{\"version\":null},{\"value\":null},{\"value\":\"\"}]}",
         "{\"compare\":[{\"version\":\"0\"},{\"value\":\"\"},{\"value\":\"\"}]}");
    same(TXN_REQ, "{\"success\":[{\"request_put\":null}]}", "{\"success\":[{}]}");
    same(WATCH_REQ, "{\"cancel_request\":{\"watch_id\":\"3\"}}",
         "{\"cancel_request\":{\"watch_id\":\"3\"}}");
    same(WATCH_REQ, "{\"progress_request\":{}}", "{\"progress_request\":{}}");
    /* a key naming the oneof itself is not known here (see jsonpb.h) */
    same(TXN_REQ, "{\"compare\":[{\"targetUnion\":1}]}", "{\"compare\":[{}]}");
}

Test(jsonpb, watch_create_request)
{
    /* curl -N -XPOST $P/v3/watch -d '{"create_request":{"key":"dw==",
     * "filters":[1,"NOPUT"],"watch_id":"5","progress_notify":true}}' */
    Etcdserverpb__WatchRequest *w = (Etcdserverpb__WatchRequest *)parse(
        WATCH_REQ,
        "{\"create_request\":{\"key\":\"dw==\",\"range_end\":\"eA==\",\"start_revision\":"
        "\"7\",\"filters\":[1,\"NOPUT\",9],\"watch_id\":\"5\",\"progress_notify\":true,"
        "\"prevKv\":true,\"fragment\":true}}");
    cr_assert_eq(w->request_union_case, ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST);
    Etcdserverpb__WatchCreateRequest *c = w->create_request;
    cr_assert(bytes_is(c->key, "w") && bytes_is(c->range_end, "x"));
    cr_assert_eq(c->start_revision, 7);
    cr_assert_eq(c->n_filters, 3);
    cr_assert_eq(c->filters[0], ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE);
    cr_assert_eq(c->filters[1], ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT);
    cr_assert_eq((int)c->filters[2], 9);
    cr_assert(c->progress_notify && c->prev_kv && c->fragment);
    cr_assert_eq(c->watch_id, 5);
    char *t = text(&w->base);
    /* an enum number without a name is written as the bare number */
    cr_assert_str_eq(
        t, "{\"create_request\":{\"key\":\"dw==\",\"range_end\":\"eA==\",\"start_revision\""
           ":\"7\",\"progress_notify\":true,\"filters\":[\"NODELETE\",\"NOPUT\",9],"
           "\"prev_kv\":true,\"watch_id\":\"5\",\"fragment\":true}}");
    free(t);
    protobuf_c_message_free_unpacked(&w->base, NULL);
}

Test(jsonpb, lower_camel_names)
{
    /* etcd: {"sortOrder":"DESCEND"} and {"keysOnly":true} are accepted; with
     * both spellings the JSON name wins whatever the order: curl
     * -XPOST $P/v3/kv/range -d '{"key":"Zm9v","sortOrder":"DESCEND",
     * "sort_order":"BAD"}' answers normally */
    same(
        RANGE_REQ,
        "{\"rangeEnd\":\"AA==\",\"sortOrder\":\"DESCEND\",\"sortTarget\":\"MOD\",\"keysOnly\":true,"
        "\"countOnly\":true,\"minModRevision\":\"1\",\"maxModRevision\":\"2\","
        "\"minCreateRevision\":\"3\",\"maxCreateRevision\":\"4\"}",
        "{\"range_end\":\"AA==\",\"sort_order\":\"DESCEND\",\"sort_target\":\"MOD\",\"keys_only\":"
        "true,"
        "\"count_only\":true,\"min_mod_revision\":\"1\",\"max_mod_revision\":\"2\","
        "\"min_create_revision\":\"3\",\"max_create_revision\":\"4\"}");
    same(RANGE_REQ, "{\"sortOrder\":\"DESCEND\",\"sort_order\":\"BAD\"}",
         "{\"sort_order\":\"DESCEND\"}");
    same(RANGE_REQ, "{\"sort_order\":\"BAD\",\"sortOrder\":\"ASCEND\"}",
         "{\"sort_order\":\"ASCEND\"}");
    /* etcd: {"key":"Zm9v","key":"YmFy"} reads "bar": the last key */
    same(RANGE_REQ, "{\"key\":\"Zm9v\",\"key\":\"YmFy\"}", "{\"key\":\"YmFy\"}");
    /* etcd: {"k\u0065y":"Zm9v"} is the key "foo" */
    same(RANGE_REQ, "{\"k\\u0065y\":\"Zm9v\"}", "{\"key\":\"Zm9v\"}");
    /* names are case-sensitive: etcd granted {"ttl":60} its minimum TTL */
    same(&etcdserverpb__lease_grant_request__descriptor, "{\"ttl\":60,\"TTL\":\"5\",\"ID\":9}",
         "{\"TTL\":\"5\",\"ID\":\"9\"}");
    /* field names that are their own JSON names (authpb.Permission) */
    same(&etcdserverpb__auth_role_grant_permission_request__descriptor,
         "{\"name\":\"r1\",\"perm\":{\"permType\":\"READWRITE\",\"key\":\"Zm9v\",\"rangeEnd\":"
         "\"Zm9w\",\"perm_type\":\"WRITE\"}}",
         "{\"name\":\"r1\",\"perm\":{\"permType\":\"READWRITE\",\"key\":\"Zm9v\",\"range_end\":"
         "\"Zm9w\"}}");
}

Test(jsonpb, unknown_fields_ignored)
{
    /* etcd: curl -XPOST $P/v3/kv/range -d '{"key":"Zm9v","foo":1}' answers
     * the range (grpc-gateway's unmarshaler allows unknown fields) */
    same(RANGE_REQ, "{\"key\":\"Zm9v\",\"foo\":1,\"bar\":{\"x\":[1,{\"y\":null}]}}",
         "{\"key\":\"Zm9v\"}");
    same(TXN_REQ, "{\"success\":[{\"request_put\":{\"key\":\"Zm9v\",\"zzz\":true}}]}",
         "{\"success\":[{\"request_put\":{\"key\":\"Zm9v\"}}]}");
}

Test(jsonpb, empty_null_and_trailing)
{
    struct buf pb = {0};
    /* etcd: an empty body, blanks, null, {} x and {} {} are all the empty
     * RangeRequest ("etcdserver: key is not provided") */
    const char *empty[] = {
        "",
        "   \n\t",
        "null",
        "{}x",
        "{} {}",
        " {}",
        "{\"key\":null}",
        "{\"limit\":\"null\"}",
        "{\"limit\":null,\"sort_order\":null,\"keys_only\":null,\"range_end\":null}"};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        cr_assert_eq(
            jsonpb_decode(RANGE_REQ, empty[i], strlen(empty[i]), &pb, errbuf, sizeof(errbuf)), 0,
            "%s: %s", empty[i], errbuf);
        cr_assert_eq(pb.len, 0, "%s", empty[i]);
    }
    /* what follows the value is not read, not even a syntax error */
    same(RANGE_REQ, "{\"key\":\"Zm9v\"}{\"key\":", "{\"key\":\"Zm9v\"}");
    same(RANGE_REQ, "{\"key\":\"Zm9v\"} x", "{\"key\":\"Zm9v\"}");
    /* repeated fields: null and [] are no elements */
    same(TXN_REQ, "{\"compare\":null,\"success\":[]}", "{}");
    /* null as a repeated message element: an empty message (etcd's gateway
     * drops the connection) */
    same(TXN_REQ, "{\"compare\":[null]}", "{\"compare\":[{}]}");
    buf_free(&pb);
}

Test(jsonpb, int64_forms)
{
    /* etcd accepted each of these limits */
    same(RANGE_REQ, "{\"limit\":\" 5 \"}", "{\"limit\":\"5\"}");
    same(RANGE_REQ, "{\"limit\":\"-0\"}", "{}");
    same(RANGE_REQ, "{\"limit\":-9223372036854775808}", "{\"limit\":\"-9223372036854775808\"}");
    same(RANGE_REQ, "{\"limit\":\"9223372036854775807\"}", "{\"limit\":\"9223372036854775807\"}");
    same(&etcdserverpb__member_remove_request__descriptor, "{\"ID\":18446744073709551615}",
         "{\"ID\":\"18446744073709551615\"}");
    same(RANGE_REQ, "{\"sort_order\":-1}", "{\"sort_order\":-1}");
    same(RANGE_REQ, "{\"sort_order\":\"NONE\",\"sort_target\":0}", "{}");
}

Test(jsonpb, base64)
{
    /* etcd accepted: Zm8= (fo), +/8= , newlines anywhere, even in padding */
    same(RANGE_REQ, "{\"key\":\"Zm8=\"}", "{\"key\":\"Zm8=\"}");
    same(RANGE_REQ, "{\"key\":\"+/8=\"}", "{\"key\":\"+/8=\"}");
    same(RANGE_REQ, "{\"key\":\"Zm\\n9v\"}", "{\"key\":\"Zm9v\"}");
    same(RANGE_REQ, "{\"key\":\"Zm9v\\r\\n\"}", "{\"key\":\"Zm9v\"}");
    same(RANGE_REQ, "{\"key\":\"Zg=\\n=\"}", "{\"key\":\"Zg==\"}");
    same(RANGE_REQ, "{\"key\":\"Zm9vYg\\n\\n=\\r=\"}", "{\"key\":\"Zm9vYg==\"}");
    same(RANGE_REQ, "{\"key\":\"Zh==\"}", "{\"key\":\"Zg==\"}"); /* not strict: Go drops the bits */
    same(RANGE_REQ, "{\"key\":\"Zm\\u0039v\"}", "{\"key\":\"Zm9v\"}");
    /* encoding/json also reads []byte from an array of numbers:
     * etcd: {"key":[102,111,111]} ranged over "foo" */
    same(RANGE_REQ, "{\"key\":[102,111,null,111]}", "{\"key\":\"Zm8Abw==\"}");
    same(RANGE_REQ, "{\"key\":[]}", "{}");
    /* every byte value, out and back */
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    p.key.data = all, p.key.len = sizeof(all);
    for (size_t n = 0; n <= 5; n++) {
        p.value.data = all, p.value.len = n;
        char *t = text(&p.base);
        Etcdserverpb__PutRequest *q = (Etcdserverpb__PutRequest *)parse(PUT_REQ, t);
        cr_assert_eq(q->key.len, 256);
        cr_assert(memcmp(q->key.data, all, 256) == 0);
        cr_assert_eq(q->value.len, n);
        cr_assert(n == 0 || memcmp(q->value.data, all, n) == 0);
        free(t);
        protobuf_c_message_free_unpacked(&q->base, NULL);
    }
    p.key.len = 4, p.value.len = 0;
    char *t = text(&p.base);
    cr_assert_str_eq(t, "{\"key\":\"//79/A==\"}");
    free(t);
}

Test(jsonpb, errors_syntax)
{
    /* etcd: curl -XPOST $P/v3/kv/range --data-binary <body>, "error" */
    FAILS(RANGE_REQ, "x", "invalid character 'x' looking for beginning of value");
    FAILS(RANGE_REQ, "{\"key\":", "unexpected EOF");
    FAILS(RANGE_REQ, "{", "unexpected EOF");
    FAILS(RANGE_REQ, "\"", "unexpected EOF");
    FAILS(RANGE_REQ, "{\"a\":tru", "unexpected EOF");
    FAILS(RANGE_REQ, "-", "unexpected EOF");
    FAILS(RANGE_REQ, "{\"a\" 1}", "invalid character '1' after object key");
    FAILS(RANGE_REQ, "{\"a\":1 \"b\"}", "invalid character '\"' after object key:value pair");
    FAILS(RANGE_REQ, "{,}", "invalid character ',' looking for beginning of object key string");
    FAILS(RANGE_REQ, "[1 2]", "invalid character '2' after array element");
    FAILS(RANGE_REQ, "{\"a\":tru}", "invalid character '}' in literal true (expecting 'e')");
    FAILS(RANGE_REQ, "{\"a\":trux}", "invalid character 'x' in literal true (expecting 'e')");
    FAILS(RANGE_REQ, "{\"a\":nul}", "invalid character '}' in literal null (expecting 'l')");
    FAILS(RANGE_REQ, "{\"a\":-x}", "invalid character 'x' in numeric literal");
    FAILS(RANGE_REQ, "{\"a\":1.x}", "invalid character 'x' after decimal point in numeric literal");
    FAILS(RANGE_REQ, "{\"a\":1ex}", "invalid character 'x' in exponent of numeric literal");
    FAILS(RANGE_REQ, "{\"a\":\"\\x\"}", "invalid character 'x' in string escape code");
    FAILS(RANGE_REQ, "{\"a\":\"\\u12x\"}",
          "invalid character 'x' in \\u hexadecimal character escape");
    FAILS(RANGE_REQ, "{\"a\":\"\x01\"}", "invalid character '\\x01' in string literal");
    FAILS(RANGE_REQ, "\x01", "invalid character '\\x01' looking for beginning of value");
    FAILS(RANGE_REQ, "\xc3\xa9", "invalid character '\xc3\x83' looking for beginning of value");
    FAILS(RANGE_REQ, "\xc2\x85", "invalid character '\xc3\x82' looking for beginning of value");
    FAILS(RANGE_REQ, "\x85", "invalid character '\\u0085' looking for beginning of value");
    FAILS(RANGE_REQ, "'", "invalid character '\\'' looking for beginning of value");
    FAILS(RANGE_REQ, "\\", "invalid character '\\\\' looking for beginning of value");
    FAILS(RANGE_REQ, "{\"a\":01}", "invalid character '1' after object key:value pair");
    fails(RANGE_REQ, "\0", 1, "invalid character '\\x00' looking for beginning of value");
}

Test(jsonpb, errors_depth)
{
    /* etcd: {"a": + 9999 '[' and ']' is the empty request; one more '['
     * (10001 levels) is "invalid character '[' exceeded max depth" */
    size_t n = 10000;
    char *s = malloc(2 * n + 16);
    cr_assert_not_null(s);
    for (size_t depth = n - 1; depth <= n; depth++) {
        size_t k = 5;
        memcpy(s, "{\"a\":", k);
        memset(s + k, '[', depth), k += depth;
        memset(s + k, ']', depth), k += depth;
        s[k++] = '}';
        struct buf pb = {0};
        int rc = jsonpb_decode(RANGE_REQ, s, k, &pb, errbuf, sizeof(errbuf));
        if (depth < n) {
            cr_assert_eq(rc, 0, "%s", errbuf);
        } else {
            cr_assert_eq(rc, -EINVAL);
            cr_assert_str_eq(errbuf, "invalid character '[' exceeded max depth");
        }
        buf_free(&pb);
    }
    memset(s, '[', n + 1);
    fails(RANGE_REQ, s, n + 1, "invalid character '[' exceeded max depth");
    free(s);
    /* messages: a txn nested JSONPB_MAX_DEPTH deep is read, one more is not */
    struct buf b = {0};
    for (int depth = JSONPB_MAX_DEPTH / 2; depth <= JSONPB_MAX_DEPTH / 2 + 1; depth++) {
        buf_reset(&b);
        for (int i = 0; i < depth; i++)
            buf_append(&b, "{\"success\":[{\"request_txn\":", 27);
        buf_append(&b, "{}", 2);
        for (int i = 0; i < depth; i++)
            buf_append(&b, "}]}", 3);
        struct buf pb = {0}, js = {0};
        int rc = jsonpb_decode(TXN_REQ, (char *)b.data, b.len, &pb, errbuf, sizeof(errbuf));
        if (depth == JSONPB_MAX_DEPTH / 2) {
            cr_assert_eq(rc, 0, "%s", errbuf);
            cr_assert_eq(jsonpb_encode(TXN_REQ, pb.data, pb.len, &js), 0);
            cr_assert_eq(js.len, b.len);
            cr_assert(memcmp(js.data, b.data, b.len) == 0);
        } else {
            cr_assert_eq(rc, -EINVAL);
            cr_assert_str_eq(errbuf, "jsonpb: messages nested deeper than 100");
        }
        buf_free(&pb);
        buf_free(&js);
    }
    buf_free(&b);
}

Test(jsonpb, errors_types)
{
    /* etcd, curl -XPOST $P/v3/kv/range or /v3/kv/txn -d <body> */
    FAILS(RANGE_REQ, "[]",
          "json: cannot unmarshal array into Go value of type map[string]json.RawMessage");
    FAILS(RANGE_REQ, "\"a\"",
          "json: cannot unmarshal string into Go value of type map[string]json.RawMessage");
    FAILS(RANGE_REQ, "1x",
          "json: cannot unmarshal number into Go value of type map[string]json.RawMessage");
    FAILS(RANGE_REQ, "{\"key\":1}", "json: cannot unmarshal number into Go value of type []uint8");
    FAILS(RANGE_REQ, "{\"key\":true}", "json: cannot unmarshal bool into Go value of type []uint8");
    FAILS(RANGE_REQ, "{\"key\":{}}", "json: cannot unmarshal object into Go value of type []uint8");
    FAILS(RANGE_REQ, "{\"key\":[256]}",
          "json: cannot unmarshal number 256 into Go value of type uint8");
    FAILS(RANGE_REQ, "{\"key\":[true]}", "json: cannot unmarshal bool into Go value of type uint8");
    FAILS(RANGE_REQ, "{\"limit\":1.5}",
          "json: cannot unmarshal number 1.5 into Go value of type int64");
    FAILS(RANGE_REQ, "{\"limit\":\"1.5\"}",
          "json: cannot unmarshal number 1.5 into Go value of type int64");
    FAILS(RANGE_REQ, "{\"limit\":1e2}",
          "json: cannot unmarshal number 1e2 into Go value of type int64");
    FAILS(RANGE_REQ, "{\"limit\":true}", "json: cannot unmarshal bool into Go value of type int64");
    FAILS(RANGE_REQ, "{\"limit\":99999999999999999999}",
          "json: cannot unmarshal number 99999999999999999999 into Go value of type int64");
    FAILS(RANGE_REQ, "{\"limit\":\"9223372036854775808\"}",
          "json: cannot unmarshal number 9223372036854775808 into Go value of type int64");
    FAILS(RANGE_REQ, "{\"limit\":\"[]\"}",
          "json: cannot unmarshal array into Go value of type int64");
    /* a quoted 64-bit int: json.Unmarshal of the raw text between quotes */
    FAILS(RANGE_REQ, "{\"limit\":\"abc\"}", "invalid character 'a' looking for beginning of value");
    FAILS(RANGE_REQ, "{\"limit\":\"\\u0031\"}",
          "invalid character '\\\\' looking for beginning of value");
    FAILS(RANGE_REQ, "{\"limit\":\"\\\"1\\\"\"}",
          "invalid character '\\\\' looking for beginning of value");
    FAILS(RANGE_REQ, "{\"limit\":\"1\\t\"}", "invalid character '\\\\' after top-level value");
    FAILS(RANGE_REQ, "{\"limit\":\"\"}", "unexpected end of JSON input");
    FAILS(RANGE_REQ, "{\"limit\":\" \"}", "unexpected end of JSON input");
    FAILS(RANGE_REQ, "{\"limit\":\"{\"}", "unexpected end of JSON input");
    FAILS(RANGE_REQ, "{\"limit\":\"1 2\"}", "invalid character '2' after top-level value");
    FAILS(RANGE_REQ, "{\"limit\":\"01\"}", "invalid character '1' after top-level value");
    FAILS(RANGE_REQ, "{\"limit\":\"1e\"}", "invalid character ' ' in exponent of numeric literal");
    FAILS(RANGE_REQ, "{\"limit\":\"-\"}", "invalid character ' ' in numeric literal");
    FAILS(RANGE_REQ, "{\"limit\":\"tru\"}",
          "invalid character ' ' in literal true (expecting 'e')");
    FAILS(RANGE_REQ, "{\"limit\":\"\xc3\xa9\"}",
          "invalid character '\xc3\x83' looking for beginning of value");
    /* etcd, /v3/cluster/member/remove -d '{"ID":...}' (uint64) */
    FAILS(&etcdserverpb__member_remove_request__descriptor, "{\"ID\":\"-1\"}",
          "json: cannot unmarshal number -1 into Go value of type uint64");
    FAILS(&etcdserverpb__member_remove_request__descriptor, "{\"ID\":\"-0\"}",
          "json: cannot unmarshal number -0 into Go value of type uint64");
    FAILS(&etcdserverpb__member_remove_request__descriptor, "{\"ID\":1.0}",
          "json: cannot unmarshal number 1.0 into Go value of type uint64");
    FAILS(&etcdserverpb__member_remove_request__descriptor, "{\"ID\":18446744073709551616}",
          "json: cannot unmarshal number 18446744073709551616 into Go value of type uint64");
    /* bools */
    FAILS(RANGE_REQ, "{\"keys_only\":\"true\"}",
          "json: cannot unmarshal string into Go value of type bool");
    FAILS(RANGE_REQ, "{\"keys_only\":1}",
          "json: cannot unmarshal number into Go value of type bool");
    /* enums */
    FAILS(RANGE_REQ, "{\"sort_order\":\"BOGUS\"}",
          "unknown value \"BOGUS\" for enum etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":\"2\"}",
          "unknown value \"2\" for enum etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":\"\\u0041\"}",
          "unknown value \"\\\\u0041\" for enum etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":\"\xc3\xa9\\u0001\"}",
          "unknown value \"\xc3\xa9\\\\u0001\" for enum etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":1.5}",
          "json: cannot unmarshal number 1.5 into Go value of type "
          "etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":true}",
          "json: cannot unmarshal bool into Go value of type etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":3000000000}",
          "json: cannot unmarshal number 3000000000 into Go value of type "
          "etcdserverpb.RangeRequest_SortOrder");
    FAILS(
        RANGE_REQ, "{\"sort_order\":{}}",
        "json: cannot unmarshal object into Go value of type etcdserverpb.RangeRequest_SortOrder");
    FAILS(RANGE_REQ, "{\"sort_order\":[]}",
          "json: cannot unmarshal array into Go value of type etcdserverpb.RangeRequest_SortOrder");
    FAILS(TXN_REQ, "{\"compare\":[{\"key\":\"Zm9v\",\"version\":\"x\",\"target\":\"BAD\"}]}",
          "unknown value \"BAD\" for enum etcdserverpb.Compare_CompareTarget");
    FAILS(&etcdserverpb__auth_role_grant_permission_request__descriptor,
          "{\"perm\":{\"permType\":\"ALL\"}}",
          "unknown value \"ALL\" for enum authpb.Permission_Type");
    /* repeated and nested */
    FAILS(TXN_REQ, "{\"compare\":{}}",
          "json: cannot unmarshal object into Go value of type []json.RawMessage");
    FAILS(TXN_REQ, "{\"compare\":\"x\"}",
          "json: cannot unmarshal string into Go value of type []json.RawMessage");
    FAILS(TXN_REQ, "{\"compare\":[1]}",
          "json: cannot unmarshal number into Go value of type map[string]json.RawMessage");
    FAILS(TXN_REQ, "{\"success\":[{\"request_put\":\"x\"}]}",
          "json: cannot unmarshal string into Go value of type map[string]json.RawMessage");
    /* base64 (encoding/base64's offsets) */
    FAILS(RANGE_REQ, "{\"key\":\"Zm9v!\"}", "illegal base64 data at input byte 4");
    FAILS(RANGE_REQ, "{\"key\":\"Zm9\"}", "illegal base64 data at input byte 0");
    FAILS(RANGE_REQ, "{\"key\":\"Zm8\"}", "illegal base64 data at input byte 0");
    FAILS(RANGE_REQ, "{\"key\":\"-_8=\"}", "illegal base64 data at input byte 0");
    FAILS(RANGE_REQ, "{\"key\":\"Zm\\\\n9v\"}", "illegal base64 data at input byte 2");
    FAILS(RANGE_REQ, "{\"key\":\"Zm9v==\",\"x\":1}", "illegal base64 data at input byte 4");
    FAILS(RANGE_REQ, "{\"key\":\"Zg==Zg==\"}", "illegal base64 data at input byte 4");
    FAILS(RANGE_REQ, "{\"key\":\"Zg=\"}", "illegal base64 data at input byte 3");
    FAILS(RANGE_REQ, "{\"key\":\"Zg=x\"}", "illegal base64 data at input byte 2");
    FAILS(RANGE_REQ, "{\"key\":\"Zm9=v\"}", "illegal base64 data at input byte 4");
    FAILS(RANGE_REQ, "{\"key\":\"Z\"}", "illegal base64 data at input byte 0");
    FAILS(RANGE_REQ, "{\"key\":\"Zm9vZ\"}", "illegal base64 data at input byte 4");
    FAILS(RANGE_REQ, "{\"key\":\"Zg====\"}", "illegal base64 data at input byte 4");
    FAILS(RANGE_REQ, "{\"key\":\"====\"}", "illegal base64 data at input byte 0");
    FAILS(TXN_REQ, "{\"compare\":[{\"key\":\"Zm9v\",\"range_end\":\"!\",\"version\":\"x\"}]}",
          "illegal base64 data at input byte 0");
    /* Go's order: plain fields in order, then oneofs, whatever the JSON order */
    FAILS(RANGE_REQ, "{\"key\":\"Zm9v\",\"limit\":\"abc\",\"sort_order\":\"X\"}",
          "invalid character 'a' looking for beginning of value");
    FAILS(RANGE_REQ, "{\"sort_order\":\"X\",\"key\":1}",
          "json: cannot unmarshal number into Go value of type []uint8");
    FAILS(TXN_REQ, "{\"compare\":[{\"createRevision\":\"x\"}]}",
          "invalid character 'x' looking for beginning of value");
    /* strings, and what protobuf-c cannot carry */
    FAILS(&etcdserverpb__auth_user_add_request__descriptor, "{\"name\":1}",
          "json: cannot unmarshal number into Go value of type string");
    FAILS(&etcdserverpb__auth_user_add_request__descriptor, "{\"name\":\"a\\u0000b\"}",
          "jsonpb: string field \"name\" holds a NUL character");
}

/* ------------------------------------------------------------ responses */

Test(jsonpb, range_response_from_etcd)
{
    /* curl -XPOST $P/v3/kv/range -d '{"key":"Zm9v"}' */
    etcd_out(&etcdserverpb__range_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"2\",\"raft_term\":\"2\"},\"kvs\":[{\"key\":\"Zm9v\",\"create_"
             "revision\":\"2\","
             "\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"YmFy\"}],\"count\":\"1\"}");
    /* curl -XPOST $P/v3/kv/range -d '{"key":"AA==","range_end":"AA==",
     * "limit":"1","sort_order":"DESCEND","sort_target":"MOD"}' */
    etcd_out(
        &etcdserverpb__range_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"10\",\"raft_term\":\"2\"},\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":"
        "\"10\",\"mod_revision\":\"10\",\"version\":\"1\",\"value\":\"YmFy\"}],\"more\":true,"
        "\"count\":\"2\"}");
    /* curl -XPOST $P/v3/kv/range -d '{"key":"eA==","count_only":true}' */
    etcd_out(&etcdserverpb__range_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"5\",\"raft_term\":\"2\"}}");
    /* the same built here */
    Mvccpb__KeyValue kv = MVCCPB__KEY_VALUE__INIT, *kvs[] = {&kv};
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__RangeResponse r = ETCDSERVERPB__RANGE_RESPONSE__INIT;
    h.cluster_id = 5253559638163113374ULL, h.member_id = 13328448381644391632ULL;
    h.revision = 2, h.raft_term = 2;
    kv.key = (ProtobufCBinaryData){3, (uint8_t *)"foo"};
    kv.value = (ProtobufCBinaryData){3, (uint8_t *)"bar"};
    kv.create_revision = kv.mod_revision = 2, kv.version = 1;
    r.header = &h, r.kvs = kvs, r.n_kvs = 1, r.count = 1;
    char *t = text(&r.base);
    cr_assert_str_eq(t, "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
                        "\"13328448381644391632\",\"revision\":\"2\",\"raft_term\":\"2\"},\"kvs\":"
                        "[{\"key\":\"Zm9v\",\"create_revision\":\"2\",\"mod_revision\":\"2\","
                        "\"version\":\"1\",\"value\":\"YmFy\"}],\"count\":\"1\"}");
    free(t);
    /* jsonpb_to_json: the same as a jansson value */
    json_t *j = jsonpb_to_json(&r.base);
    cr_assert_not_null(j);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "header"), "cluster_id")),
                     "5253559638163113374");
    cr_assert_eq(json_array_size(json_object_get(j, "kvs")), 1);
    ProtobufCMessage *back = NULL;
    cr_assert_eq(jsonpb_from_json(&etcdserverpb__range_response__descriptor, j, &back, errbuf,
                                  sizeof(errbuf)),
                 0, "%s", errbuf);
    Etcdserverpb__RangeResponse *rb = (Etcdserverpb__RangeResponse *)back;
    cr_assert_eq(rb->header->member_id, 13328448381644391632ULL);
    cr_assert(bytes_is(rb->kvs[0]->value, "bar"));
    protobuf_c_message_free_unpacked(back, NULL);
    json_decref(j);
}

Test(jsonpb, responses_from_etcd)
{
    /* curl -XPOST $P/v3/kv/put -d '{"key":"Zm9v","value":"","prev_kv":true}' */
    etcd_out(
        &etcdserverpb__put_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"4\",\"raft_term\":\"2\"},\"prev_kv\":{\"key\":\"Zm9v\",\"create_revision\":"
        "\"2\",\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"YmFy\"}}");
    /* curl -XPOST $P/v3/kv/deleterange -d '{"key":"ZA==","prev_kv":true}' */
    etcd_out(
        &etcdserverpb__delete_range_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"12\",\"raft_term\":\"2\"},\"deleted\":\"1\",\"prev_kvs\":[{\"key\":\"ZA=="
        "\","
        "\"create_revision\":\"11\",\"mod_revision\":\"11\",\"version\":\"1\",\"value\":\"MQ==\","
        "\"lease\":\"77\"}]}");
    /* curl -XPOST $P/v3/kv/txn -d '{"compare":[{"key":"ZQ==","target":"LEASE",
     * "result":"EQUAL","lease":"77"}],"success":[{"request_range":{"key":"ZQ=="}},
     * {"request_put":{"key":"ZQ==","value":"Mg==","prev_kv":true,"ignore_lease":true}},
     * {"request_delete_range":{"key":"eHg="}},{"request_txn":{}}]}' */
    etcd_out(
        &etcdserverpb__txn_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"14\",\"raft_term\":\"2\"},\"succeeded\":true,\"responses\":[{\"response_"
        "range\":"
        "{\"header\":{\"revision\":\"13\"},\"kvs\":[{\"key\":\"ZQ==\",\"create_revision\":\"13\","
        "\"mod_revision\":\"13\",\"version\":\"1\",\"value\":\"MQ==\",\"lease\":\"77\"}],\"count\":"
        "\"1\"}},{\"response_put\":{\"header\":{\"revision\":\"14\"},\"prev_kv\":{\"key\":\"ZQ==\","
        "\"create_revision\":\"13\",\"mod_revision\":\"13\",\"version\":\"1\",\"value\":\"MQ==\","
        "\"lease\":\"77\"}}},{\"response_delete_range\":{\"header\":{\"revision\":\"14\"}}},"
        "{\"response_txn\":{\"header\":{},\"succeeded\":true}}]}");
    /* curl -XPOST $P/v3/lease/grant -d '{"TTL":"600","ID":"77"}' */
    etcd_out(&etcdserverpb__lease_grant_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"10\",\"raft_term\":\"2\"},\"ID\":\"77\",\"TTL\":\"600\"}");
    /* curl -XPOST $P/v3/lease/timetolive -d '{"ID":"77","keys":true}' */
    etcd_out(&etcdserverpb__lease_time_to_live_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"13\",\"raft_term\":\"2\"},\"ID\":\"77\",\"TTL\":\"599\","
             "\"grantedTTL\":\"600\","
             "\"keys\":[\"ZQ==\"]}");
    /* curl -XPOST $P/v3/lease/timetolive -d '{"ID":"7","keys":true}' (expired) */
    etcd_out(&etcdserverpb__lease_time_to_live_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"10\",\"raft_term\":\"2\"},\"ID\":\"7\",\"TTL\":\"-1\"}");
    /* curl -XPOST $P/v3/lease/leases -d '{}' */
    etcd_out(&etcdserverpb__lease_leases_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"6\",\"raft_term\":\"2\"},\"leases\":[{\"ID\":\"4958641390924807718\"},"
             "{\"ID\":\"7\"},{\"ID\":\"4958641390924807716\"}]}");
    /* curl -XPOST $P/v3/maintenance/status -d '{}' */
    etcd_out(&etcdserverpb__status_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"6\",\"raft_term\":\"2\"},\"version\":\"3.4.23\",\"dbSize\":\"20480\","
             "\"leader\":\"13328448381644391632\",\"raftIndex\":\"16\",\"raftTerm\":\"2\","
             "\"raftAppliedIndex\":\"16\",\"dbSizeInUse\":\"16384\"}");
    /* curl -XPOST $P/v3/maintenance/hash -d '{}': uint32 as a number */
    etcd_out(&etcdserverpb__hash_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"6\",\"raft_term\":\"2\"},\"hash\":1591083585}");
    /* curl -XPOST $P/v3/cluster/member/list -d '{}' */
    etcd_out(
        &etcdserverpb__member_list_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"raft_term\":\"2\"},\"members\":[{\"ID\":\"13328448381644391632\",\"name\":\"default\","
        "\"peerURLs\":[\"http://127.0.0.1:31480\"],\"clientURLs\":[\"http://127.0.0.1:31479\"]}]}");
    /* curl -XPOST $P/v3/maintenance/alarm -d '{"action":"GET"}' */
    etcd_out(&etcdserverpb__alarm_response__descriptor, "{}");
}

Test(jsonpb, watch_responses_from_etcd)
{
    /* curl -N -XPOST $P/v3/watch -d '{"create_request":{"key":"ZA==","prev_kv":true}}'
     * then a put and a delete of "d": each line is {"result":<this>} */
    etcd_out(&etcdserverpb__watch_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"10\",\"raft_term\":\"2\"},\"created\":true}");
    etcd_out(
        &etcdserverpb__watch_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"11\",\"raft_term\":\"2\"},\"events\":[{\"kv\":{\"key\":\"ZA==\","
        "\"create_revision\":\"11\",\"mod_revision\":\"11\",\"version\":\"1\",\"value\":\"MQ==\","
        "\"lease\":\"77\"}}]}");
    etcd_out(
        &etcdserverpb__watch_response__descriptor,
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"12\",\"raft_term\":\"2\"},\"events\":[{\"type\":\"DELETE\",\"kv\":{\"key\":"
        "\"ZA==\",\"mod_revision\":\"12\"},\"prev_kv\":{\"key\":\"ZA==\",\"create_revision\":"
        "\"11\","
        "\"mod_revision\":\"11\",\"version\":\"1\",\"value\":\"MQ==\",\"lease\":\"77\"}}]}");
    /* ... -d '{"create_request":{"key":"dw==","filters":[1,"NOPUT"],"watch_id":"5",...}}' */
    etcd_out(&etcdserverpb__watch_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"6\",\"raft_term\":\"2\"},\"watch_id\":\"5\",\"created\":true}");
}

Test(jsonpb, auth_role_get_response)
{
    /* curl -XPOST $P/v3/auth/role/add -d '{"name":"r1"}', then role/grant
     * with {"permType":"READWRITE","key":"Zm9v","range_end":"Zm9w"},
     * {"permType":1,"key":"YQ=="}, {"perm_type":"WRITE","key":"Yg=="} (an
     * unknown name: READ) and {"key":"Yw=="}; then
     * curl -XPOST $P/v3/auth/role/get -d '{"role":"r1"}' */
    const char *etcd =
        "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
        "\"13328448381644391632\","
        "\"revision\":\"6\",\"raft_term\":\"2\"},\"perm\":[{\"permType\":\"WRITE\",\"key\":\"YQ=="
        "\"},"
        "{\"key\":\"Yg==\"},{\"key\":\"Yw==\"},{\"permType\":\"READWRITE\",\"key\":\"Zm9v\","
        "\"range_end\":\"Zm9w\"}]}";
    etcd_out(&etcdserverpb__auth_role_get_response__descriptor, etcd);
    Etcdserverpb__AuthRoleGetResponse *r = (Etcdserverpb__AuthRoleGetResponse *)parse(
        &etcdserverpb__auth_role_get_response__descriptor, etcd);
    cr_assert_eq(r->n_perm, 4);
    cr_assert_eq(r->perm[0]->permtype, AUTHPB__PERMISSION__TYPE__WRITE);
    cr_assert_eq(r->perm[1]->permtype, AUTHPB__PERMISSION__TYPE__READ);
    cr_assert_eq(r->perm[3]->permtype, AUTHPB__PERMISSION__TYPE__READWRITE);
    cr_assert(bytes_is(r->perm[3]->range_end, "fop"));
    protobuf_c_message_free_unpacked(&r->base, NULL);
    /* curl -XPOST $P/v3/auth/role/list -d '{}' */
    etcd_out(&etcdserverpb__auth_role_list_response__descriptor,
             "{\"header\":{\"cluster_id\":\"5253559638163113374\",\"member_id\":"
             "\"13328448381644391632\","
             "\"revision\":\"6\",\"raft_term\":\"2\"},\"roles\":[\"r1\"]}");
}

Test(jsonpb, string_escapes)
{
    /* curl -XPOST $P/v3/auth/user/add -d '{"name":"a<b>&\u2028\u2029\u00e9
     * \u007f\u0008\u000c\t\n\"\\/\u0000\ud800x\udc00\ud83d\ude00","password":"p"}'
     * (without the \u0000 here: see jsonpb.h), etcdctl user add $'bad\xff\xc3name'
     * then curl -XPOST $P/v3/auth/user/list -d '{}' printed these names */
    const char *in = "{\"name\":\"a<b>&\\u2028\\u2029\\u00e9\\u007f\\u0008\\u000c\\t\\n\\\"\\\\/"
                     "\\ud800x\\udc00\\ud83d\\ude00\",\"password\":\"p\"}";
    Etcdserverpb__AuthUserAddRequest *u = (Etcdserverpb__AuthUserAddRequest *)parse(
        &etcdserverpb__auth_user_add_request__descriptor, in);
    cr_assert_str_eq(u->name, "a<b>&\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9\x7f\b\f\t\n\"\\/\xef\xbf\xbdx"
                              "\xef\xbf\xbd\xf0\x9f\x98\x80");
    protobuf_c_message_free_unpacked(&u->base, NULL);
    char *users[] = {"a<b>&\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9\x7f\b\f\t\n\"\\/"
                     "\xef\xbf\xbdx\xef\xbf\xbd\xf0\x9f\x98\x80",
                     "bad\xff\xc3name"};
    Etcdserverpb__AuthUserListResponse l = ETCDSERVERPB__AUTH_USER_LIST_RESPONSE__INIT;
    l.users = users, l.n_users = 2;
    char *t = text(&l.base);
    cr_assert_str_eq(
        t,
        "{\"users\":[\"a\\u003cb\\u003e\\u0026\\u2028\\u2029\xc3\xa9\x7f\\u0008\\u000c"
        "\\t\\n\\\"\\\\/\xef\xbf\xbdx\xef\xbf\xbd\xf0\x9f\x98\x80\",\"bad\\ufffd\\ufffdname\"]}");
    free(t);
    /* surrogate pairs and lone halves as Go's unquote reads them */
    same(&etcdserverpb__auth_user_add_request__descriptor,
         "{\"name\":\"\\ud800\\ud800\\udc00\\udc00\\ud83d\"}",
         "{\"name\":\"\xef\xbf\xbd\xf0\x90\x80\x80\xef\xbf\xbd\xef\xbf\xbd\"}");
    /* invalid UTF-8 in the input: U+FFFD per bad byte */
    same(&etcdserverpb__auth_user_add_request__descriptor,
         "{\"name\":\"a\xff\xe2\x82z\xed\xa0\x80\"}",
         "{\"name\":"
         "\"a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"}");
}

Test(jsonpb, defaults_omitted)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    char *t = text(&r.base);
    cr_assert_str_eq(t, "{}");
    free(t);
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT;
    c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
    t = text(&c.base);
    cr_assert_str_eq(t, "{\"version\":\"0\"}");
    free(t);
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT; /* no message: Go's null */
    t = text(&op.base);
    cr_assert_str_eq(t, "{\"request_put\":null}");
    free(t);
    /* an empty header is still there */
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__TxnResponse tr = ETCDSERVERPB__TXN_RESPONSE__INIT;
    tr.header = &h;
    t = text(&tr.base);
    cr_assert_str_eq(t, "{\"header\":{}}");
    free(t);
}

Test(jsonpb, encode_bad_bytes_and_buffer_kept)
{
    struct buf b = {0};
    buf_append(&b, "x", 1);
    const uint8_t junk[] = {0x0a, 0x05, 'a'}; /* length past the end */
    cr_assert_eq(jsonpb_encode(&etcdserverpb__range_response__descriptor, junk, sizeof(junk), &b),
                 -EINVAL);
    cr_assert_eq(b.len, 1);
    /* appended after what was there */
    const uint8_t ok[] = {0x18, 0x01}; /* more = true */
    cr_assert_eq(jsonpb_encode(&etcdserverpb__range_response__descriptor, ok, sizeof(ok), &b), 0);
    cr_assert_eq(b.len, 1 + strlen("{\"more\":true}"));
    cr_assert(memcmp(b.data, "x{\"more\":true}", b.len) == 0);
    /* a decode error leaves the output alone too */
    cr_assert_eq(jsonpb_decode(RANGE_REQ, "{\"key\":1}", 9, &b, NULL, 0), -EINVAL);
    cr_assert_eq(b.len, 1 + strlen("{\"more\":true}"));
    buf_free(&b);
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    cr_assert_eq(jsonpb_from_json(RANGE_REQ, NULL, &m, errbuf, sizeof(errbuf)), -EINVAL);
    cr_assert_null(m);
}

/* ------------------------------------------------------------ every type
 *
 * etcd's protos have no floats, 32-bit ints in requests, proto2 optionals
 * or string oneofs; a descriptor made here has them. Float texts are what
 * Go's json.Marshal prints. */

typedef struct {
    ProtobufCMessage base;
    float f;
    double d;
    int32_t i32;
    uint32_t u32;
    protobuf_c_boolean has_o64;
    int64_t o64;
    uint32_t which_case;
    union {
        char *s;
        double od;
    };
    size_t n_fs;
    float *fs;
} AllTypes;

static void all_types_init(ProtobufCMessage *m);

static const ProtobufCFieldDescriptor all_fields[8] = {
    {"f", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FLOAT, 0, offsetof(AllTypes, f), NULL, NULL, 0,
     0, NULL, NULL},
    {"d", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_DOUBLE, 0, offsetof(AllTypes, d), NULL, NULL, 0,
     0, NULL, NULL},
    {"i32", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SINT32, 0, offsetof(AllTypes, i32), NULL,
     NULL, 0, 0, NULL, NULL},
    {"u32", 4, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FIXED32, 0, offsetof(AllTypes, u32), NULL,
     NULL, 0, 0, NULL, NULL},
    {"opt_i64", 5, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_SFIXED64, offsetof(AllTypes, has_o64),
     offsetof(AllTypes, o64), NULL, NULL, 0, 0, NULL, NULL},
    {"s", 6, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, offsetof(AllTypes, which_case),
     offsetof(AllTypes, s), NULL, NULL, PROTOBUF_C_FIELD_FLAG_ONEOF, 0, NULL, NULL},
    {"od", 7, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_DOUBLE, offsetof(AllTypes, which_case),
     offsetof(AllTypes, od), NULL, NULL, PROTOBUF_C_FIELD_FLAG_ONEOF, 0, NULL, NULL},
    {"fs", 8, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_FLOAT, offsetof(AllTypes, n_fs),
     offsetof(AllTypes, fs), NULL, NULL, PROTOBUF_C_FIELD_FLAG_PACKED, 0, NULL, NULL},
};
static const unsigned all_by_name[8] = {1, 0, 7, 2, 6, 4, 5, 3}; /* d f fs i32 od opt_i64 s u32 */
static const ProtobufCIntRange all_ranges[2] = {{1, 0}, {0, 8}};
static const ProtobufCMessageDescriptor all_desc = {
    .magic = PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
    .name = "test.AllTypes",
    .short_name = "AllTypes",
    .c_name = "Test__AllTypes",
    .package_name = "test",
    .sizeof_message = sizeof(AllTypes),
    .n_fields = 8,
    .fields = all_fields,
    .fields_sorted_by_name = all_by_name,
    .n_field_ranges = 1,
    .field_ranges = all_ranges,
    .message_init = all_types_init,
};

static void all_types_init(ProtobufCMessage *m)
{
    memset(m, 0, sizeof(AllTypes));
    m->descriptor = &all_desc;
}

static void float_is(double d, const char *want)
{
    AllTypes m;
    all_types_init(&m.base);
    m.d = d;
    char *t = text(&m.base);
    char w[128];
    snprintf(w, sizeof(w), "{\"d\":%s}", want);
    cr_assert_str_eq(t, w);
    free(t);
}

Test(jsonpb, floats_go_format)
{
    float_is(1.5, "1.5");
    float_is(0.1, "0.1");
    float_is(100, "100");
    float_is(1e20, "100000000000000000000");
    float_is(1e21, "1e+21");
    float_is(123456789.125, "123456789.125");
    float_is(0.000001, "0.000001");
    float_is(1e-7, "1e-7");
    float_is(-2.5e-10, "-2.5e-10");
    float_is(5e-324, "5e-324");
    float_is(1.7976931348623157e308, "1.7976931348623157e+308");
    float_is(1.0 / 3, "0.3333333333333333");
    float_is(NAN, "\"NaN\"");
    float_is(INFINITY, "\"Infinity\"");
    float_is(-INFINITY, "\"-Infinity\"");
    AllTypes m;
    all_types_init(&m.base);
    float fs[] = {0.1f, 16777216.0f, 1e21f, 3.4028235e38f, -0.0f, 1.5e-7f};
    m.fs = fs, m.n_fs = 6;
    m.f = 0.3f;
    char *t = text(&m.base);
    cr_assert_str_eq(t, "{\"f\":0.3,\"fs\":[0.1,16777216,1e+21,3.4028235e+38,-0,1.5e-7]}");
    free(t);
}

Test(jsonpb, every_type_in_and_out)
{
    const char *in =
        "{\"f\":2.5,\"d\":-1e-300,\"i32\":-2147483648,\"u32\":4294967295,\"optI64\":\"0\","
        "\"s\":\"\",\"fs\":[1,\"NaN\",\"-Infinity\",null]}";
    AllTypes *m = (AllTypes *)parse(&all_desc, in);
    cr_assert(m->f == 2.5f && m->d == -1e-300);
    cr_assert_eq(m->i32, INT32_MIN);
    cr_assert_eq(m->u32, UINT32_MAX);
    cr_assert(m->has_o64 && m->o64 == 0);
    cr_assert_eq(m->which_case, 6);
    cr_assert_str_eq(m->s, "");
    cr_assert_eq(m->n_fs, 4);
    cr_assert(isnan(m->fs[1]) && isinf(m->fs[2]) && m->fs[2] < 0 && m->fs[3] == 0);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    /* proto2 optional: written when set, even to 0; a string oneof too */
    same(&all_desc, in,
         "{\"f\":2.5,\"d\":-1e-300,\"i32\":-2147483648,\"u32\":4294967295,\"opt_i64\":\"0\",\"s\":"
         "\"\","
         "\"fs\":[1,\"NaN\",\"-Infinity\",0]}");
    same(&all_desc, "{\"s\":null}", "{\"s\":\"\"}");
    same(&all_desc, "{\"s\":\"x\",\"od\":0.5}", "{\"od\":0.5}");
    same(&all_desc, "{\"od\":0.5,\"s\":\"x\"}", "{\"od\":0.5}");
    same(&all_desc, "{\"opt_i64\":null}", "{}");
    same(&all_desc, "{\"d\":1e-400,\"f\":1e-50}", "{}"); /* underflow is no error in Go */
    /* 32-bit ints and floats from numbers only (jsonpb 1.3) */
    FAILS(&all_desc, "{\"i32\":\"5\"}",
          "json: cannot unmarshal string into Go value of type int32");
    FAILS(&all_desc, "{\"i32\":2147483648}",
          "json: cannot unmarshal number 2147483648 into Go value of type int32");
    FAILS(&all_desc, "{\"u32\":-1}",
          "json: cannot unmarshal number -1 into Go value of type uint32");
    FAILS(&all_desc, "{\"d\":\"1.5\"}",
          "json: cannot unmarshal string into Go value of type float64");
    FAILS(&all_desc, "{\"d\":1e400}",
          "json: cannot unmarshal number 1e400 into Go value of type float64");
    FAILS(&all_desc, "{\"f\":1e39}",
          "json: cannot unmarshal number 1e39 into Go value of type float32");
    FAILS(&all_desc, "{\"fs\":[true]}",
          "json: cannot unmarshal bool into Go value of type float32");
    FAILS(&all_desc, "{\"s\":[]}", "json: cannot unmarshal array into Go value of type string");
}
