/* base/version.h: what quorum says it is, in one place.
 *
 * QUORUM_VERSION is quorum's own release, the project version of
 * meson.build (passed to every compilation as -DQUORUM_VERSION).
 *
 * quorum speaks the etcd v3 API of etcd 3.4. Tools that print versions say
 * so as etcdctl does ("API version: 3.4"). Where etcd's own API carries an
 * etcd server version (Maintenance/Status's version field, which etcd
 * clients parse as a semantic version, and /version's "etcdserver") quorum
 * reports QUORUM_ETCD_VERSION: the 3.4 API level, not the release of any
 * particular etcd binary. "/version"'s "etcdcluster" is the cluster
 * version, QUORUM_ETCD_CLUSTER_VERSION, as etcd 3.4 reports it. */
#ifndef QUORUM_BASE_VERSION_H
#define QUORUM_BASE_VERSION_H

#ifndef QUORUM_VERSION
#error "QUORUM_VERSION comes from meson.build (add_project_arguments)"
#endif

#define QUORUM_ETCD_API_VERSION "3.4"
#define QUORUM_ETCD_VERSION "3.4.0"
#define QUORUM_ETCD_CLUSTER_VERSION "3.4.0"

#endif
