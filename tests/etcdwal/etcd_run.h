/* tests/etcdwal/etcd_run.h: run the real etcd 3.4 (/usr/bin/etcd) in a temp
 * dir on free ports, write to it with etcdctl, stop it: the WAL and .snap
 * files the etcdwal tests read are etcd's own. */
#ifndef QUORUM_TESTS_ETCDWAL_ETCD_RUN_H
#define QUORUM_TESTS_ETCDWAL_ETCD_RUN_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../free_port.h"

struct etcd_run {
    pid_t pid;
    int cport, pport;
    char ep[64];
};

/* etcd_start starts etcd with <dir> as --data-dir; extra flags (NULL-ended)
 * after. Waits until it answers (etcdctl endpoint health). 0 or -1. */
static inline int etcd_start(struct etcd_run *r, const char *dir, ...)
{
    r->cport = free_port();
    r->pport = free_port();
    snprintf(r->ep, sizeof(r->ep), "127.0.0.1:%d", r->cport);
    char curl[64], purl[64], ic[96], log[1100];
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", r->cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", r->pport);
    snprintf(ic, sizeof(ic), "n1=%s", purl);
    snprintf(log, sizeof(log), "%s.log", dir);
    const char *argv[32] = {"/usr/bin/etcd",
                            "--name",
                            "n1",
                            "--data-dir",
                            dir,
                            "--listen-client-urls",
                            curl,
                            "--advertise-client-urls",
                            curl,
                            "--listen-peer-urls",
                            purl,
                            "--initial-advertise-peer-urls",
                            purl,
                            "--initial-cluster",
                            ic};
    int argc = 15;
    va_list ap;
    va_start(ap, dir);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    r->pid = fork();
    if (r->pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (r->pid < 0)
        return -1;
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints %s --dial-timeout 1s endpoint health "
             ">/dev/null 2>&1",
             r->ep);
    for (int i = 0; i < 200; i++) {
        if (system(cmd) == 0)
            return 0;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    return -1;
}

/* etcdctl runs "etcdctl --endpoints <ep> <args>" (a printf format); its
 * exit status. */
static inline int etcdctl(const struct etcd_run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int etcdctl(const struct etcd_run *r, const char *fmt, ...)
{
    char args[512], cmd[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints %s %s >/dev/null", r->ep,
             args);
    return system(cmd);
}

/* etcd_stop sends |sig| and waits for the process. */
static inline void etcd_stop(struct etcd_run *r, int sig)
{
    if (r->pid > 0) {
        kill(r->pid, sig);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

#endif
