/* http/ui.c: the console's static files (ui.h) at GET /ui, /ui/ and
 * /ui/<name>.
 *
 * Each answer carries the file's Content-Type, its ETag and
 * "Cache-Control: no-cache" (a browser revalidates, and a member upgraded
 * in place serves its new page at once; a matching If-None-Match gets 304
 * with no body). HEAD answers the head alone. index.html also carries a
 * Content-Security-Policy: scripts, styles and images only from the
 * member itself (the page loads nothing from anywhere else), requests to
 * any member (the cluster view asks each member's client URL for its
 * status, which etcd's CORS headers allow). Anything else under /ui is
 * 404, another method 405.
 */
#include <stdio.h>
#include <string.h>

#include "http/http_int.h"
#include "http/ui.h"

#define UI_CSP                                                                                     \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src *; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const struct ui_file *ui_lookup(const char *rest)
{
    if (rest[0] == 0 || (rest[0] == '/' && rest[1] == 0))
        rest = "/index.html";
    if (rest[0] != '/')
        return NULL;
    const char *name = rest + 1;
    for (size_t i = 0; i < ui_nfiles; i++)
        if (strcmp(ui_files[i].name, name) == 0)
            return &ui_files[i];
    return NULL;
}

/* an entity tag as written (quotes included) against ours */
static bool tag_equal(const char *a, size_t an, const char *b)
{
    size_t bn = strlen(b);
    return an == bn && memcmp(a, b, an) == 0;
}

bool ui_etag_matches(const char *inm, const char *etag)
{
    if (inm == NULL)
        return false;
    const char *p = inm;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == 0)
            return false;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2; /* weak comparison: the opaque tags alone */
        if (*p != '"')
            return false; /* not a list of entity tags */
        const char *end = strchr(p + 1, '"');
        if (end == NULL)
            return false;
        if (tag_equal(p, (size_t)(end + 1 - p), etag))
            return true;
        p = end + 1;
    }
}

void http_serve_ui(struct hreq *r, const char *rest)
{
    bool head = strcmp(r->method, "HEAD") == 0;
    if (!head && strcmp(r->method, "GET") != 0) {
        http_method_not_allowed(r, "GET, HEAD");
        return;
    }
    const struct ui_file *f = ui_lookup(rest);
    if (f == NULL) {
        static const char nf[] = "404 page not found\n";
        hreq_respond(r, 404, "text/plain; charset=utf-8", "X-Content-Type-Options: nosniff\r\n", nf,
                     sizeof(nf) - 1);
        return;
    }
    bool html = strcmp(f->name, "index.html") == 0;
    char extra[512];
    snprintf(extra, sizeof(extra),
             "ETag: %s\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n%s%s%s",
             f->etag, html ? "Content-Security-Policy: " : "", html ? UI_CSP : "",
             html ? "\r\n" : "");
    if (ui_etag_matches(r->if_none_match, f->etag)) {
        /* 304: the head a 200 would have (its Content-Length too), no body */
        hreq_respond(r, 304, NULL, extra, f->data, f->len);
        return;
    }
    hreq_respond(r, 200, f->type, extra, f->data, f->len);
}
