/* tools/quorumctl/recipes.c: the coordination recipes of the C client
 * (api/quorum/recipes.h) as commands: rwlock, semaphore, barrier,
 * double-barrier, queue, priority-queue, 2pc, membership and counter.
 *
 * They follow etcdctl's lock: a hold runs the command given and lets go
 * when it exits (its exit status becomes "Error: exit status N"), or,
 * without a command, prints the held key and keeps it until SIGINT or
 * SIGTERM; a lost session ends the command with "Error: session expired".
 * Errors are "Error: <text>" on stderr with exit status 1, bad arguments
 * exit 128 (etcdctl's ExitBadArgs). Waits have no deadline unless
 * --timeout is given ("context deadline exceeded" then). */
#include "quorumctl.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "quorum/recipes.h"

/* the flags every recipe command takes */
struct ropts {
    int ttl;        /* --ttl, seconds: the session's lease */
    int timeout_ms; /* --timeout: -1 = wait forever */
    char **pos;     /* the positional arguments */
    int np;
    char **cmd; /* what follows the fixed arguments (NULL-terminated), or NULL */
};

/* parse_timeout: a Go duration ("30s", "500ms", "2m") or plain seconds */
static int parse_timeout(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    double mul = 1000;
    if (end == s || v < 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid argument \"%s\" for \"--timeout\" flag", s);
    if (strcmp(end, "ms") == 0)
        mul = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        mul = 1000;
    else if (strcmp(end, "m") == 0)
        mul = 60000;
    else if (strcmp(end, "h") == 0)
        mul = 3600000;
    else
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid argument \"%s\" for \"--timeout\" flag", s);
    double ms = v * mul;
    return ms > 2e9 ? 2000000000 : (int)ms;
}

/* parse_args takes --ttl and --timeout anywhere before the command, the
 * first |fixed| positionals (fewer when a word of |stop_words| ends them
 * early is not needed: the caller checks np), and the rest as the command */
static void parse_args(int argc, char **argv, int fixed, int ttl, struct ropts *o)
{
    o->ttl = ttl;
    o->timeout_ms = -1;
    o->pos = ctl_calloc((size_t)argc + 1, sizeof(char *));
    o->np = 0;
    o->cmd = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (o->np >= fixed) {
            if (strcmp(argv[i], "--") == 0)
                i++;
            if (i < argc)
                o->cmd = argv + i;
            return;
        }
        if ((v = ctl_flag(argc, argv, &i, "ttl")) != NULL) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end != '\0' || t <= 0 || t > 1000000)
                ctl_die(CTL_EXIT_BAD_ARGS, "invalid argument \"%s\" for \"--ttl\" flag", v);
            o->ttl = (int)t;
        } else if ((v = ctl_flag(argc, argv, &i, "timeout")) != NULL) {
            o->timeout_ms = parse_timeout(v);
        } else if (strcmp(argv[i], "--") == 0) {
            continue;
        } else {
            if (!(argv[i][0] == '-' && argv[i][1] >= '0' && argv[i][1] <= '9')) /* -2 */
                ctl_unknown_flag(argv[i]);
            o->pos[o->np++] = argv[i];
        }
    }
}

/* recipe_fail prints the error as etcdctl would and returns exit status 1 */
static int recipe_fail(int rc, const struct qc_status *st)
{
    if (rc <= QC_ELOST && rc >= QC_EBADVALUE) {
        if (rc == QC_ELOST)
            fprintf(stderr, "Error: session expired\n");
        else
            fprintf(stderr, "Error: %s\n", st->message);
    } else {
        ctl_fail(rc, st);
    }
    return CTL_EXIT_ERROR;
}

static void block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

static qc_session *open_session(struct ctl *ctl, qc_client **c, int ttl)
{
    *c = ctl_connect(ctl);
    qc_session *s;
    struct qc_status st;
    int rc = qc_session_open(*c, ttl, &s, &st);
    if (rc < 0)
        exit(recipe_fail(rc, &st));
    return s;
}

static long parse_int(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || v < lo || v > hi)
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid %s \"%s\"", what, s);
    return v;
}

/* run_held runs |cmd| with the held key and revision in its environment
 * (ETCD_LOCK_KEY, ETCD_LOCK_REV, as etcdctl lock sets them) and returns 0,
 * or 1 after printing etcdctl's error when the command failed */
static int run_held(char **cmd, const sigset_t *set, const char *key, int64_t rev)
{
    char kenv[4096], renv[64];
    snprintf(kenv, sizeof(kenv), "ETCD_LOCK_KEY=%s", key != NULL ? key : "");
    snprintf(renv, sizeof(renv), "ETCD_LOCK_REV=%lld", (long long)rev);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "Error: fork: %s\n", strerror(errno));
        return CTL_EXIT_ERROR;
    }
    if (pid == 0) {
        pthread_sigmask(SIG_UNBLOCK, set, NULL);
        putenv(kenv);
        putenv(renv);
        execvp(cmd[0], cmd);
        fprintf(stderr, "Error: exec: \"%s\": %s\n", cmd[0], strerror(errno));
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(ws) && WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "Error: exit status %d\n", WEXITSTATUS(ws));
        return CTL_EXIT_ERROR;
    }
    if (WIFSIGNALED(ws)) {
        fprintf(stderr, "Error: signal: %s\n", strsignal(WTERMSIG(ws)));
        return CTL_EXIT_ERROR;
    }
    return 0;
}

/* hold_until_signal prints |key| and waits for SIGINT/SIGTERM: 0, or 1
 * ("session expired") when the session is lost first */
static int hold_until_signal(qc_session *s, const sigset_t *set, const char *key)
{
    if (key != NULL)
        printf("%s\n", key);
    fflush(stdout);
    for (;;) {
        struct timespec ts = {0, 250000000};
        if (sigtimedwait(set, NULL, &ts) > 0)
            return 0;
        if (qc_session_lost(s)) {
            fprintf(stderr, "Error: session expired\n");
            return CTL_EXIT_ERROR;
        }
    }
}

/* ---- rwlock, semaphore ---- */

int cmd_rwlock(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 2, 10, &o);
    if (o.np != 2 || (strcmp(o.pos[1], "read") != 0 && strcmp(o.pos[1], "write") != 0))
        ctl_die(CTL_EXIT_BAD_ARGS, "rwlock takes a lock name, read or write, and an optional "
                                   "command to execute");
    sigset_t set;
    block_signals(&set);
    qc_client *c;
    qc_session *s = open_session(ctl, &c, o.ttl);
    qc_rwlock *l;
    if (qc_rwlock_new(s, o.pos[0], &l) < 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid lock name");
    struct qc_status st;
    int rc = o.pos[1][0] == 'r' ? qc_rwlock_rlock(l, o.timeout_ms, &st)
                                : qc_rwlock_wlock(l, o.timeout_ms, &st);
    if (rc < 0) {
        qc_rwlock_free(l);
        qc_session_close(s);
        qc_close(c);
        return recipe_fail(rc, &st);
    }
    int ret = o.cmd != NULL ? run_held(o.cmd, &set, qc_rwlock_key(l), qc_rwlock_token(l))
                            : hold_until_signal(s, &set, qc_rwlock_key(l));
    qc_rwlock_unlock(l, NULL);
    qc_rwlock_free(l);
    qc_session_close(s);
    qc_close(c);
    return ret;
}

int cmd_semaphore(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 2, 10, &o);
    if (o.np != 2)
        ctl_die(CTL_EXIT_BAD_ARGS, "semaphore takes a name, the number of holders and an "
                                   "optional command to execute");
    int n = (int)parse_int(o.pos[1], "number of holders", 1, 1000000);
    sigset_t set;
    block_signals(&set);
    qc_client *c;
    qc_session *s = open_session(ctl, &c, o.ttl);
    qc_semaphore *m;
    if (qc_semaphore_new(s, o.pos[0], n, &m) < 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid semaphore name");
    struct qc_status st;
    int rc = qc_semaphore_acquire(m, o.timeout_ms, &st);
    if (rc < 0) {
        qc_semaphore_free(m);
        qc_session_close(s);
        qc_close(c);
        return recipe_fail(rc, &st);
    }
    int ret = o.cmd != NULL ? run_held(o.cmd, &set, qc_semaphore_key(m), 0)
                            : hold_until_signal(s, &set, qc_semaphore_key(m));
    qc_semaphore_release(m, NULL);
    qc_semaphore_free(m);
    qc_session_close(s);
    qc_close(c);
    return ret;
}

/* ---- barrier, double barrier ---- */

int cmd_barrier(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 3, 10, &o);
    if (o.np != 2 || o.cmd != NULL ||
        (strcmp(o.pos[1], "hold") != 0 && strcmp(o.pos[1], "release") != 0 &&
         strcmp(o.pos[1], "wait") != 0))
        ctl_die(CTL_EXIT_BAD_ARGS, "barrier takes a name and hold, release or wait");
    qc_client *c = ctl_connect(ctl);
    struct qc_status st;
    int rc;
    if (strcmp(o.pos[1], "hold") == 0)
        rc = qc_barrier_hold(c, o.pos[0], &st);
    else if (strcmp(o.pos[1], "release") == 0)
        rc = qc_barrier_release(c, o.pos[0], &st);
    else
        rc = qc_barrier_wait(c, o.pos[0], o.timeout_ms, &st);
    qc_close(c);
    if (rc < 0)
        return recipe_fail(rc, &st);
    if (strcmp(o.pos[1], "wait") != 0)
        printf("OK\n");
    return 0;
}

int cmd_double_barrier(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 2, 10, &o);
    if (o.np != 2)
        ctl_die(CTL_EXIT_BAD_ARGS, "double-barrier takes a name, the number of participants "
                                   "and an optional command to execute");
    int n = (int)parse_int(o.pos[1], "number of participants", 1, 1000000);
    sigset_t set;
    block_signals(&set);
    qc_client *c;
    qc_session *s = open_session(ctl, &c, o.ttl);
    struct qc_status st;
    qc_dbarrier *b;
    if (qc_dbarrier_new(s, o.pos[0], n, &b) < 0)
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid double barrier name");
    int rc = qc_dbarrier_enter(b, o.timeout_ms, &st);
    if (rc < 0) {
        qc_dbarrier_free(b);
        qc_session_close(s);
        qc_close(c);
        return recipe_fail(rc, &st);
    }
    int ret = o.cmd != NULL ? run_held(o.cmd, &set, NULL, 0) : 0;
    rc = qc_dbarrier_leave(b, o.timeout_ms, &st);
    qc_dbarrier_free(b);
    qc_session_close(s);
    qc_close(c);
    if (rc < 0)
        return recipe_fail(rc, &st);
    return ret;
}

/* ---- queues ---- */

static void print_value(struct ctl *ctl, const char *v, size_t n)
{
    if (ctl->hex) {
        for (size_t i = 0; i < n; i++)
            printf("\\x%02x", (unsigned char)v[i]);
        printf("\n");
    } else {
        fwrite(v, 1, n, stdout);
        printf("\n");
    }
}

int cmd_queue(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 4, 10, &o);
    bool put = o.np == 3 && strcmp(o.pos[1], "put") == 0;
    bool take = o.np == 2 && strcmp(o.pos[1], "take") == 0;
    if ((!put && !take) || o.cmd != NULL)
        ctl_die(CTL_EXIT_BAD_ARGS, "queue takes a name and put <value> or take");
    qc_client *c = ctl_connect(ctl);
    struct qc_status st;
    int rc;
    char *v = NULL;
    size_t vlen = 0;
    if (put)
        rc = qc_queue_put(c, o.pos[0], o.pos[2], strlen(o.pos[2]), &st);
    else
        rc = qc_queue_take(c, o.pos[0], o.timeout_ms, &v, &vlen, &st);
    qc_close(c);
    if (rc < 0)
        return recipe_fail(rc, &st);
    if (put)
        printf("OK\n");
    else
        print_value(ctl, v, vlen);
    free(v);
    return 0;
}

int cmd_priority_queue(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 5, 10, &o);
    bool put = o.np == 4 && strcmp(o.pos[1], "put") == 0;
    bool take = o.np == 2 && strcmp(o.pos[1], "take") == 0;
    if ((!put && !take) || o.cmd != NULL)
        ctl_die(CTL_EXIT_BAD_ARGS, "priority-queue takes a name and put <priority> <value> or "
                                   "take");
    uint32_t prio = 0;
    if (put)
        prio = (uint32_t)parse_int(o.pos[2], "priority", 0, 4294967295L);
    qc_client *c = ctl_connect(ctl);
    struct qc_status st;
    int rc;
    char *v = NULL;
    size_t vlen = 0;
    if (put)
        rc = qc_pqueue_put(c, o.pos[0], prio, o.pos[3], strlen(o.pos[3]), &st);
    else
        rc = qc_pqueue_take(c, o.pos[0], o.timeout_ms, &v, &vlen, &prio, &st);
    qc_close(c);
    if (rc < 0)
        return recipe_fail(rc, &st);
    if (put)
        printf("OK\n");
    else
        print_value(ctl, v, vlen);
    free(v);
    return 0;
}

/* ---- two-phase commit ---- */

int cmd_2pc(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 4, 10, &o);
    const char *verb = o.np >= 2 ? o.pos[1] : "";
    bool coord = o.np == 3 && strcmp(verb, "coordinate") == 0;
    bool vote = o.np == 3 && strcmp(verb, "vote") == 0 &&
                (strcmp(o.pos[2], "commit") == 0 || strcmp(o.pos[2], "abort") == 0);
    bool outcome = o.np == 2 && strcmp(verb, "outcome") == 0;
    bool reset = o.np == 2 && strcmp(verb, "reset") == 0;
    if ((!coord && !vote && !outcome && !reset) || o.cmd != NULL)
        ctl_die(CTL_EXIT_BAD_ARGS, "2pc takes a name and coordinate <n>, vote commit|abort, "
                                   "outcome or reset");
    int n = coord ? (int)parse_int(o.pos[2], "number of participants", 1, 1000000) : 0;
    struct qc_status st;
    int rc, out = QC_2PC_ABORT;
    qc_client *c;
    if (vote) {
        qc_session *s = open_session(ctl, &c, o.ttl);
        rc = qc_2pc_vote(s, o.pos[0], o.pos[2][0] == 'c', o.timeout_ms, &out, &st);
        /* the vote goes with the session: the outcome, not the votes, is
         * what stays */
        qc_session_close(s);
    } else {
        c = ctl_connect(ctl);
        if (coord)
            rc = qc_2pc_coordinate(c, o.pos[0], n, o.timeout_ms, &out, &st);
        else if (outcome)
            rc = qc_2pc_outcome(c, o.pos[0], &out, &st);
        else
            rc = qc_2pc_reset(c, o.pos[0], &st);
    }
    qc_close(c);
    if (rc < 0)
        return recipe_fail(rc, &st);
    if (reset)
        printf("OK\n");
    else if (outcome && rc == 0)
        printf("undecided\n");
    else
        printf("%s\n", out == QC_2PC_COMMIT ? "commit" : "abort");
    return 0;
}

/* ---- membership ---- */

int cmd_membership(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    bool join = false;
    for (int i = 0, np = 0; i < argc && np < 2; i++) {
        if (strcmp(argv[i], "--ttl") == 0 || strcmp(argv[i], "--timeout") == 0)
            i++; /* and its value */
        else if (argv[i][0] != '-' && np++ == 1)
            join = strcmp(argv[i], "join") == 0;
    }
    parse_args(argc, argv, join ? 3 : 2, 10, &o);
    bool list = o.np == 2 && strcmp(o.pos[1], "list") == 0 && o.cmd == NULL;
    bool watch = o.np == 2 && strcmp(o.pos[1], "watch") == 0 && o.cmd == NULL;
    join = join && o.np == 3;
    if (!join && !list && !watch)
        ctl_die(CTL_EXIT_BAD_ARGS, "membership takes a group and join <member-id> [command], "
                                   "list or watch");
    const char *group = o.pos[0];
    struct qc_status st;
    int rc;
    sigset_t set;
    block_signals(&set);
    if (join) {
        qc_client *c;
        qc_session *s = open_session(ctl, &c, o.ttl);
        rc = qc_group_join(s, group, o.pos[2], "", 0, &st);
        if (rc < 0) {
            qc_session_close(s);
            qc_close(c);
            return recipe_fail(rc, &st);
        }
        char *key = ctl_join((char *[]){(char *)group, o.pos[2]}, 2, "/");
        int ret = o.cmd != NULL ? run_held(o.cmd, &set, key, 0) : hold_until_signal(s, &set, key);
        qc_group_leave(s, group, o.pos[2], NULL);
        qc_session_close(s);
        qc_close(c);
        return ret;
    }
    qc_client *c = ctl_connect(ctl);
    struct qc_members *ms;
    rc = qc_group_list(c, group, &ms, &st);
    if (rc < 0) {
        qc_close(c);
        return recipe_fail(rc, &st);
    }
    if (list) {
        for (size_t i = 0; i < ms->n; i++)
            printf("%s\n", ms->m[i].id);
        qc_members_free(ms);
        qc_close(c);
        return 0;
    }
    /* watch: the members now, then each change as it comes */
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < ms->n; i++)
        printf("member %s\n", ms->m[i].id);
    qc_group_watcher *w;
    rc = qc_group_watch_open(c, group, ms->revision, &w, &st);
    qc_members_free(ms);
    if (rc < 0) {
        qc_close(c);
        return recipe_fail(rc, &st);
    }
    int ret = 0;
    for (;;) {
        struct timespec z = {0, 0};
        if (sigtimedwait(&set, NULL, &z) > 0)
            break;
        char *id;
        int joined;
        rc = qc_group_watch_next(w, 250, &id, &joined, &st);
        if (rc == QC_ETIMEDOUT)
            continue;
        if (rc < 0) {
            ret = recipe_fail(rc, &st);
            break;
        }
        printf("%s %s\n", joined ? "joined" : "left", id);
        free(id);
    }
    qc_group_watch_close(w);
    qc_close(c);
    return ret;
}

/* ---- counter ---- */

int cmd_counter(struct ctl *ctl, int argc, char **argv)
{
    struct ropts o;
    parse_args(argc, argv, 4, 10, &o);
    bool add = o.np == 3 && strcmp(o.pos[1], "add") == 0;
    bool get = o.np == 2 && strcmp(o.pos[1], "get") == 0;
    if ((!add && !get) || o.cmd != NULL)
        ctl_die(CTL_EXIT_BAD_ARGS, "counter takes a name and add <n> or get");
    char *end;
    errno = 0;
    long long delta = add ? strtoll(o.pos[2], &end, 10) : 0;
    if (add && (errno != 0 || *end != '\0' || end == o.pos[2]))
        ctl_die(CTL_EXIT_BAD_ARGS, "invalid number \"%s\"", o.pos[2]);
    qc_client *c = ctl_connect(ctl);
    struct qc_status st;
    int64_t v = 0;
    int rc =
        add ? qc_counter_add(c, o.pos[0], delta, &v, &st) : qc_counter_get(c, o.pos[0], &v, &st);
    qc_close(c);
    if (rc < 0)
        return recipe_fail(rc, &st);
    printf("%lld\n", (long long)v);
    return 0;
}
