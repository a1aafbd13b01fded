/* tests/http/test_ui.c: criterion tests for the console's embedding
 * (tools/embed_ui.py -> ui_files.c, src/http/ui.c): the table built into
 * the binary holds every file of src/http/ui/ byte for byte, with the
 * content type its extension calls for and a strong ETag of its content;
 * paths under /ui map to files and nothing else; If-None-Match matching. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/ui.h"

#ifndef UI_SRC_DIR
#error "UI_SRC_DIR: the source directory of the console's files"
#endif

static const char *type_for(const char *name)
{
    const char *dot = strrchr(name, '.');
    cr_assert_not_null(dot, "%s has no extension", name);
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".png") == 0)
        return "image/png";
    cr_assert_fail("%s: a file the test does not know the type of", name);
    return NULL;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

Test(ui_embed, every_source_file_with_its_type_and_bytes)
{
    DIR *d = opendir(UI_SRC_DIR);
    cr_assert_not_null(d, "opendir %s", UI_SRC_DIR);
    size_t seen = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        seen++;
        const struct ui_file *f = NULL;
        for (size_t i = 0; i < ui_nfiles; i++)
            if (strcmp(ui_files[i].name, e->d_name) == 0)
                f = &ui_files[i];
        cr_assert_not_null(f, "%s is not built in (src/http/meson.build's http_ui_files)",
                           e->d_name);
        cr_expect_str_eq(f->type, type_for(e->d_name), "%s", e->d_name);
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", UI_SRC_DIR, e->d_name);
        size_t len;
        unsigned char *want = slurp(path, &len);
        cr_expect_eq(f->len, len, "%s: %zu bytes built in, %zu in the file", e->d_name, f->len,
                     len);
        cr_expect(f->len == len && memcmp(f->data, want, len) == 0, "%s: other bytes", e->d_name);
        free(want);
        /* a strong ETag: 16 hex digits in quotes */
        cr_expect_eq(strlen(f->etag), 18, "%s: etag %s", e->d_name, f->etag);
        cr_expect(f->etag[0] == '"' && f->etag[17] == '"', "%s: etag %s", e->d_name, f->etag);
        cr_expect_eq(strspn(f->etag + 1, "0123456789abcdef"), 16, "%s", f->etag);
    }
    closedir(d);
    cr_expect_eq(seen, ui_nfiles, "%zu files in %s, %zu built in", seen, UI_SRC_DIR, ui_nfiles);
    for (size_t i = 1; i < ui_nfiles; i++)
        cr_expect_lt(strcmp(ui_files[i - 1].name, ui_files[i].name), 0, "sorted by name");
    for (size_t i = 0; i < ui_nfiles; i++)
        for (size_t j = i + 1; j < ui_nfiles; j++)
            cr_expect_str_neq(ui_files[i].etag, ui_files[j].etag, "distinct contents");
}

Test(ui_embed, the_console_needs_these)
{
    const char *const need[] = {"index.html", "app.js", "app.css"};
    for (size_t i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof(path), "/%s", need[i]);
        cr_expect_not_null(ui_lookup(path), "%s", need[i]);
    }
    /* the page loads its script and style by these absolute paths */
    const struct ui_file *idx = ui_lookup("/");
    cr_assert_not_null(idx);
    char *html = strndup((const char *)idx->data, idx->len);
    cr_expect_not_null(strstr(html, "src=\"/ui/app.js\""));
    cr_expect_not_null(strstr(html, "href=\"/ui/app.css\""));
    /* nothing from anywhere else */
    cr_expect_null(strstr(html, "http://"));
    cr_expect_null(strstr(html, "https://"));
    free(html);
}

Test(ui_lookup, paths)
{
    const struct ui_file *idx = ui_lookup("/index.html");
    cr_assert_not_null(idx);
    cr_expect_eq(ui_lookup(""), idx, "/ui");
    cr_expect_eq(ui_lookup("/"), idx, "/ui/");
    cr_expect_str_eq(ui_lookup("/app.js")->name, "app.js");
    const char *const bad[] = {"x",          "/nope.js",   "//app.js",  "/app.js/",
                               "/../app.js", "/./app.js",  "/APP.JS",   "/app.js%00",
                               "/%61pp.js",  "/ui/app.js", "/app.js?x", "/index.html/..",
                               "/.",         "/..",        "//",        "/app.j"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_null(ui_lookup(bad[i]), "%s", bad[i]);
}

Test(ui_etag, if_none_match)
{
    const char *t = "\"0123456789abcdef\"";
    cr_expect(ui_etag_matches("\"0123456789abcdef\"", t));
    cr_expect(ui_etag_matches("W/\"0123456789abcdef\"", t), "weak comparison");
    cr_expect(ui_etag_matches("\"x\", \"0123456789abcdef\"", t), "in a list");
    cr_expect(ui_etag_matches("\"x\",W/\"0123456789abcdef\"", t));
    cr_expect(ui_etag_matches("*", t));
    cr_expect_not(ui_etag_matches(NULL, t));
    cr_expect_not(ui_etag_matches("", t));
    cr_expect_not(ui_etag_matches("\"0123456789abcde\"", t));
    cr_expect_not(ui_etag_matches("0123456789abcdef", t), "unquoted");
    cr_expect_not(ui_etag_matches("\"0123456789abcdef", t), "unterminated");
    cr_expect_not(ui_etag_matches("\"x\" junk \"0123456789abcdef\"", t));
}
