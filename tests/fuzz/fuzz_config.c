/* tests/fuzz/fuzz_config.c: libFuzzer target for src/server/config.c, the
 * reading of what an operator hands quorum: byte 0 picks what the rest is
 *   0  a --config-file's bytes (YAML through libyaml, etcd's JSON rules)
 *   1  argv, NUL-separated (Go's flag syntax, every flag's value parser)
 *   2  the environment, NUL-separated "K=V" (ETCD_* variables)
 * then whatever parsed is checked as at start (config_validate,
 * config_check_cluster). Every outcome must be one of config_parse's
 * documented results with a NUL-terminated message; anything else aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "server/config.h"

static struct config cfg;

/* split |n| bytes at |p| on NUL into a NULL-terminated vector after |first| */
static char **split(const uint8_t *p, size_t n, char *first, char **store)
{
    size_t k = 0, cap = 64;
    char **v = calloc(cap + 2, sizeof(*v));
    char *s = malloc(n + 1);
    if (v == NULL || s == NULL)
        abort();
    memcpy(s, p, n);
    s[n] = '\0';
    *store = s;
    if (first != NULL)
        v[k++] = first;
    for (size_t i = 0, start = 0; i <= n && k < cap; i++)
        if (i == n || s[i] == '\0') {
            if (i > start || i < n)
                v[k++] = s + start;
            start = i + 1;
        }
    v[k] = NULL;
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0] % 3;
    data++, size--;
    char err[4096];
    memset(err, 'x', sizeof(err));
    err[sizeof(err) - 1] = '\0';
    char *store = NULL, **argv = NULL, **envp = NULL;
    char *noenv[] = {NULL};
    char path[64] = "";
    int fd = -1;
    if (mode == 0) {
        fd = memfd_create("quorum-fuzz-config", 0);
        if (fd < 0 || write(fd, data, size) != (ssize_t)size)
            abort();
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        static char *args[4] = {"quorum", "--config-file", NULL, NULL};
        args[2] = path;
        argv = args;
        envp = noenv;
    } else if (mode == 1) {
        argv = split(data, size, "quorum", &store);
        envp = noenv;
    } else {
        static char *args[] = {"quorum", "--data-dir", "/nonexistent/fuzz", NULL};
        argv = args;
        envp = split(data, size, NULL, &store);
    }
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    int rv = config_parse_env(&cfg, argc, argv, envp, err, sizeof(err));
    if (rv != 0 && rv != 1 && rv != CONFIG_ERR_USAGE && rv != CONFIG_ERR_VERIFY &&
        rv != CONFIG_ERR_FATAL)
        abort();
    if (cfg.n_notes > sizeof(cfg.notes) / sizeof(cfg.notes[0]))
        abort();
    for (size_t i = 0; i < cfg.n_notes; i++)
        if (strnlen(cfg.notes[i].text, sizeof(cfg.notes[i].text)) == sizeof(cfg.notes[i].text))
            abort();
    if (rv == 0) {
        if (config_validate(&cfg, err, sizeof(err)) != 0 && strlen(err) == 0)
            abort();
        (void)config_check_cluster(&cfg, err, sizeof(err));
        if (cfg.n_listen_client > CONFIG_MAX_URLS || cfg.n_initial_cluster > CONFIG_MAX_MEMBERS)
            abort();
    } else if (rv != 1 && rv != CONFIG_ERR_FATAL && strlen(err) == 0) {
        abort();
    }
    if (fd >= 0)
        close(fd);
    if (mode == 1)
        free(argv);
    if (mode == 2)
        free(envp);
    free(store);
    return 0;
}
