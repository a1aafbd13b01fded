/* src/http/jsonpb.h: the proto3 JSON mapping of etcd 3.4's JSON gateway
 * (POST /v3/kv/range etc.), for any protobuf-c message descriptor.
 *
 * etcd 3.4's gateway is grpc-gateway v1 with runtime.JSONPb{OrigName:
 * true}, i.e. golang/protobuf 1.3 jsonpb over Go 1.19 encoding/json. This
 * module reproduces what that stack writes and accepts, error texts
 * included, checked against the etcd 3.4.23 binary (tests/http/test_jsonpb.c
 * holds the outputs and the curl lines that produced them).
 *
 * Output (jsonpb_write, jsonpb_encode, jsonpb_to_json):
 *   - compact, fields in the descriptor's order (protobuf-c sorts them by
 *     number; Go writes declaration order: the same for every etcd message),
 *     under their .proto names ("sort_order", "permType", "TTL");
 *   - proto3 fields holding their default (0, false, "", empty bytes, no
 *     elements, no message) are left out; a oneof member that is set is
 *     written even when it holds the default ("version":"0");
 *   - int64/uint64 (and the s/fixed kinds) as strings, 32-bit ints as
 *     numbers, bytes as padded standard base64, enums by name (a number
 *     with no name as a bare number), float/double as Go's encoding/json
 *     prints them ("NaN", "Infinity", "-Infinity" quoted);
 *   - strings escaped as Go's json.Marshal does: <, >, & as \u003c \u003e
 *     \u0026, U+2028/9 as \u2028/9, control characters other than \n \r \t
 *     as \u00XX (\b and \f too: Go 1.19), invalid UTF-8 as \ufffd.
 *
 * Input (jsonpb_parse, jsonpb_decode, jsonpb_from_json):
 *   - one JSON value is read as Go's json.Decoder reads it: what follows it
 *     is ignored; an empty or all-blank body, or null, is the empty message
 *     (the gateway ignores io.EOF); syntax errors are Go's texts ("invalid
 *     character 'x' looking for beginning of value", "unexpected EOF",
 *     "invalid character '[' exceeded max depth" beyond 10000 levels);
 *   - a field may be named by its .proto name or its lowerCamel JSON name;
 *     if both are there the JSON name wins; of repeated keys the last one;
 *   - unknown fields are IGNORED: the gateway's jsonpb.Unmarshaler runs
 *     with AllowUnknownFields (etcd 3.4.23 answers {"key":"Zm9v","foo":1}
 *     normally);
 *   - int64/uint64 from a number or a string holding one; 32-bit ints and
 *     floats from a number only (floats also "NaN", "Infinity",
 *     "-Infinity"); bools from true/false; enums from the name or any
 *     int32 number; bytes from padded standard base64 only (URL-safe or
 *     unpadded input is refused, as etcd does: "illegal base64 data at
 *     input byte N", \r and \n skipped) or from an array of numbers 0-255;
 *   - null leaves a field at its default (a oneof scalar member given null
 *     is set to its zero value, as Go sets the wrapper);
 *   - type errors read as Go's: "json: cannot unmarshal string into Go
 *     value of type bool", "... number 1.5 into Go value of type int64",
 *     "unknown value \"X\" for enum etcdserverpb.RangeRequest_SortOrder",
 *     "... array into Go value of type map[string]json.RawMessage"; the
 *     first error in Go's order (the message's plain fields in order, then
 *     its oneof members) is the one reported.
 *
 * Known differences from etcd 3.4.23:
 *   - a key naming a oneof itself ("target_union", "request") is ignored
 *     like any unknown key; etcd refuses a non-null value there with "json:
 *     cannot unmarshal object into Go value of type
 *     etcdserverpb.isCompare_TargetUnion" (protobuf-c 1.4 descriptors do
 *     not carry oneof names);
 *   - two members of one oneof in one object: etcd keeps one at random (Go
 *     map order), here the one with the higher field number;
 *   - null as an element of a repeated message field is an empty message;
 *     etcd's gateway panics and drops the connection;
 *   - a string value holding \u0000 is refused ("jsonpb: string field
 *     \"name\" holds a NUL character"): protobuf-c strings are C strings;
 *   - messages nested deeper than JSONPB_MAX_DEPTH (txns nested 50
 *     deep: TxnRequest and RequestOp are a level each) are refused
 *     ("jsonpb: messages nested deeper than 100"), where etcd takes what
 *     fits in encoding/json's 10000 levels; it bounds the recursion here
 *     and in protobuf-c's pack and free;
 *   - in "unknown value %q" errors, non-ASCII characters are quoted as Go's
 *     strconv.Quote does for Latin-1 and the common format/space
 *     characters only (Go consults the full Unicode tables);
 *   - map fields (none in etcd's protos) are written as arrays of entries;
 *     proto3 JSON wants objects.
 * Strings and bytes parse into fresh allocations; nothing points into the
 * input text.
 *
 * Every function is reentrant; none keeps state between calls. */
#ifndef QUORUM_HTTP_JSONPB_H
#define QUORUM_HTTP_JSONPB_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "base/buf.h"

/* message nesting allowed in input and output: the top message is level
 * 0, a RequestOp in its TxnRequest level 1, a TxnRequest in that level 2 */
#define JSONPB_MAX_DEPTH 100

/* jsonpb_write appends |m| as compact JSON to |out|: what etcd's gateway
 * writes for it. 0, -ENOMEM, -EINVAL (messages nested deeper than
 * JSONPB_MAX_DEPTH); on error |out| is as it was. */
int jsonpb_write(const ProtobufCMessage *m, struct buf *out);

/* jsonpb_encode: the packed message |msg|/|len| of descriptor |d| as
 * compact JSON text appended to |out|. -EINVAL if the bytes do not unpack
 * (or nest too deep), -ENOMEM. */
int jsonpb_encode(const ProtobufCMessageDescriptor *d, const uint8_t *msg, size_t len,
                  struct buf *out);

/* jsonpb_to_json: |m| as a jansson value (new reference; the text of
 * jsonpb_write, loaded), or NULL on ENOMEM or too deep a message. */
json_t *jsonpb_to_json(const ProtobufCMessage *m);

/* jsonpb_parse: a new message of |d| from the JSON text |text|/|len| (free
 * it with protobuf_c_message_free_unpacked(m, NULL): every part is
 * malloc'd as protobuf-c's unpacker lays it out). On error returns -EINVAL
 * (or -ENOMEM) and writes the error text etcd's gateway would answer with
 * into |err| (cap |errlen|; |err| may be NULL). */
int jsonpb_parse(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                 ProtobufCMessage **out, char *err, size_t errlen);

/* jsonpb_from_json: jsonpb_parse of |j| (its compact dump: numbers read as
 * jansson prints them). */
int jsonpb_from_json(const ProtobufCMessageDescriptor *d, const json_t *j, ProtobufCMessage **out,
                     char *err, size_t errlen);

/* jsonpb_decode: jsonpb_parse, packed: the protobuf bytes of the message
 * appended to |out| (nothing for an empty body). Errors as jsonpb_parse;
 * |out| is as it was. */
int jsonpb_decode(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                  struct buf *out, char *err, size_t errlen);

#endif
