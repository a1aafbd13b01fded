/* http/ui.h: the console's static files, built into the binary.
 *
 * tools/embed_ui.py turns src/http/ui/ into ui_files[] at build time (a
 * meson custom_target: ui_files.c in the build dir); ui.c serves them at
 * GET /ui, /ui/ (index.html) and /ui/<name>. The page itself talks to the
 * member that served it through the JSON gateway and /metrics
 * (docs/observability.md, "Console").
 */
#ifndef QUORUM_HTTP_UI_H
#define QUORUM_HTTP_UI_H

#include <stddef.h>

struct ui_file {
    const char *name; /* "app.js": the file's base name */
    const char *type; /* its Content-Type */
    const char *etag; /* a strong ETag, quoted: hash of the content */
    const unsigned char *data;
    size_t len;
};

/* sorted by name */
extern const struct ui_file ui_files[];
extern const size_t ui_nfiles;

/* ui_lookup maps the path after "/ui" ("", "/", "/app.js", undecoded) to
 * its file: index.html for "" and "/", a file's exact name after the
 * slash; NULL for anything else (a deeper path, "..", an escape). */
const struct ui_file *ui_lookup(const char *rest);

/* ui_etag_matches: whether an If-None-Match value names |etag| (a
 * comma-separated list of entity tags, weak ones compared weakly as RFC
 * 9110 says for If-None-Match, or "*"). */
#include <stdbool.h>
bool ui_etag_matches(const char *if_none_match, const char *etag);

#endif
