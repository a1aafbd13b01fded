/* server/main.c: the quorum binary. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/log.h"
#include "base/version.h"
#include "server/config.h"
#include "server/server.h"

static void log_notes(const struct config *cfg, bool own)
{
    for (size_t i = 0; i < cfg->n_notes; i++) {
        const struct config_note *n = &cfg->notes[i];
        if ((n->level == 'W' && strcmp(n->module, "main") == 0) != own)
            continue;
        enum log_level lv = n->level == 'C' ? LOG_FATAL : n->level == 'W' ? LOG_WARN : LOG_INFO;
        log_msg(lv, n->module, "%s", n->text);
    }
}

int main(int argc, char **argv)
{
    static struct config cfg;
    char err[4096] = "";
    int rv = config_parse(&cfg, argc, argv, err, sizeof(err));
    /* what parsing had to say (ETCD_* variables, ignored flags, the config
     * file), as etcd logs it: before its logger is set up, even before
     * --version or a flag error; quorum's own warnings (flags without
     * effect) once the logger is set up */
    log_notes(&cfg, false);
    if (rv == 1)
        return 0;
    if (rv == CONFIG_ERR_USAGE) {
        /* as Go's flag package: the reason, then etcd's usage line; exit 2 */
        fprintf(stderr, "%s\n", err);
        config_usage(stderr);
        return 2;
    }
    if (rv == CONFIG_ERR_FATAL)
        return 1;
    if (rv != 0) {
        log_error("main", "error verifying flags, %s. See 'quorum --help'.", err);
        return 1;
    }
    /* --logger, --log-outputs, --log-level: refused as etcd 3.4 refuses them */
    if (log_setup(cfg.logger, cfg.log_outputs, cfg.log_level, argv[0], err, sizeof(err)) != 0) {
        fprintf(stderr, "quorum: error verifying flags, %s\n", err);
        return 2;
    }
    log_notes(&cfg, true);
    signal(SIGPIPE, SIG_IGN);
    /* as etcd's first lines ("etcd Version: 3.4.23") */
    log_info("main", "quorum Version: %s, etcd API Version: %s (reported to clients as %s)",
             QUORUM_VERSION, QUORUM_ETCD_API_VERSION, QUORUM_ETCD_VERSION);
    if (config_validate(&cfg, err, sizeof(err)) != 0) {
        log_error("main", "%s", err);
        return 1;
    }

    uv_loop_t *loop = uv_default_loop();
    struct server *s;
    rv = server_start(loop, &cfg, &s);
    if (rv != 0)
        return 1;
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    log_info("server", "stopped");
    return 0;
}
