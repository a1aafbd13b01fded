/* server/cluster_service.c: /etcdserverpb.Cluster/MemberList for the one
 * member there is. Changing membership comes with the replicated server. */
#include "server/server_int.h"

static void on_member_list(grpc_call *call, const uint8_t *msg, size_t len)
{
    struct server *s = server_of(call);
    ProtobufCMessage *req =
        server_unpack(call, &etcdserverpb__member_list_request__descriptor, msg, len);
    if (req == NULL)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    char *peer[CONFIG_MAX_URLS], *client[CONFIG_MAX_URLS];
    const struct member_cfg *mc = &s->cfg.initial_cluster[0];
    for (size_t i = 0; i < mc->n_peer_urls; i++)
        peer[i] = (char *)mc->peer_urls[i].text;
    for (size_t i = 0; i < s->cfg.n_advertise_client; i++)
        client[i] = (char *)s->cfg.advertise_client[i].text;
    Etcdserverpb__Member m = ETCDSERVERPB__MEMBER__INIT;
    m.id = s->member_id;
    m.name = s->cfg.name;
    m.peerurls = peer;
    m.n_peerurls = mc->n_peer_urls;
    m.clienturls = client;
    m.n_clienturls = s->cfg.n_advertise_client;
    Etcdserverpb__Member *members[1] = {&m};
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Etcdserverpb__MemberListResponse r = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
    server_fill_header(s, &h);
    h.revision = 0; /* etcd's Cluster service headers carry no revision */
    r.header = &h;
    r.members = members;
    r.n_members = 1;
    server_reply(s, call, &r.base);
}

const struct grpc_method server_cluster_methods[] = {
    {"/etcdserverpb.Cluster/MemberList", GRPC_UNARY, on_member_list, NULL, NULL},
};
const size_t server_cluster_methods_n =
    sizeof(server_cluster_methods) / sizeof(server_cluster_methods[0]);
