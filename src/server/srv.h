/* server/srv.h: DNS SRV bootstrap (--discovery-srv, --discovery-srv-name),
 * as etcd's pkg/srv.GetCluster. Included by bootstrap.c and the tests. */
#ifndef QUORUM_SERVER_SRV_H
#define QUORUM_SERVER_SRV_H

#include <stddef.h>
#include <stdint.h>

#include "server/config.h"

#define SRV_MAX_RECORDS 32

/* One SRV record of an answer. */
struct srv_record {
    uint16_t priority, weight, port;
    char target[256]; /* without the trailing dot */
};

/* srv_parse reads the SRV records of the answer section of DNS message
 * |msg| (RFC 1035, name compression followed with a loop guard; records of
 * other types skipped) into |out| (at most |max|), sorted by priority, then
 * by weight, highest first (Go's net.LookupSRV orders by priority and
 * shuffles by weight; quorum's order is deterministic). Returns the count,
 * or -EINVAL for a message that is not a well-formed answer, -ENOENT for
 * an answer with an error code (NXDOMAIN, SERVFAIL, ...). Outside bytes:
 * never reads past |len| (tests/fuzz/fuzz_srv.c). */
int srv_parse(const uint8_t *msg, size_t len, struct srv_record *out, size_t max);

/* srv_lookup asks the system's resolver (libc, /etc/resolv.conf) for the
 * SRV records of |name|; with QUORUM_DNS_SERVER=IP:PORT in the
 * environment (tests only) it asks that server instead. Returns the count
 * or a negative code with Go's wording in |err| ("lookup NAME on SERVER:
 * no such host"). */
int srv_lookup(const char *name, struct srv_record *out, size_t max, char *err, size_t cap);

/* A lookup function (srv_lookup, or a test's). */
typedef int (*srv_lookup_fn)(const char *name, struct srv_record *out, size_t max, char *err,
                             size_t cap);

/* srv_cluster builds --initial-cluster from SRV records as etcd's
 * GetDNSClusterNames: "_etcd-server-ssl._tcp.<domain>" (https://) and
 * "_etcd-server._tcp.<domain>" (http://), each service with
 * "-<discovery-srv-name>" when given. A record whose target and port
 * resolve (|resolve|, as config.h's) to the address of one of this
 * member's --initial-advertise-peer-urls is this member (its --name);
 * the others are named "0", "1", ... in order. It replaces
 * c->initial_cluster. Errors, with etcd's words in |err|: no record at
 * all ("error querying DNS SRV records for _etcd-server-ssl ..."), a
 * scheme mismatch with this member's URL, or this member's name absent
 * ("cannot find local etcd member \"NAME\" in SRV records"). Each member
 * found is logged as etcd's "got bootstrap from DNS for etcd-server at
 * N=URL". */
int srv_cluster(struct config *c, srv_lookup_fn lookup, config_resolve_fn resolve, void *arg,
                char *err, size_t cap);

#endif
