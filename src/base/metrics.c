/* base/metrics.c: the registry, the shards and the Prometheus text
 * exposition (metrics.h). */
#include "base/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/buf.h"

#define MAX_SHARDS 128
#define MAX_HOOKS 16

struct metrics_series {
    struct metrics_series *next; /* published with a release store */
    struct metrics_family *family;
    uint32_t slot;
    char *values[METRICS_MAX_LABELS]; /* in the family's sorted label order */
    double (*fn)(void *arg);
    void *arg;
    uint64_t set_bits; /* __atomic: a double */
};

struct metrics_family {
    struct metrics_family *next; /* published with a release store */
    char *name, *help;
    enum metrics_type type;
    size_t nlabels;
    char *labels[METRICS_MAX_LABELS]; /* sorted */
    int order[METRICS_MAX_LABELS];    /* given position -> sorted position */
    double bounds[METRICS_MAX_BOUNDS];
    size_t nbounds;
    struct metrics_family *alias_of;
    struct metrics_series *series, *tail;
    size_t nseries; /* __atomic */
};

_Thread_local uint64_t *metrics_tls;
uint64_t metrics_shared[METRICS_SLOTS];

static atomic_flag reg_lock = ATOMIC_FLAG_INIT;
static struct metrics_family *families, *families_tail;
static size_t nfamilies;       /* __atomic */
static uint32_t next_slot = 1; /* slot 0 is the sink */
static uint64_t *shards[MAX_SHARDS];
static bool shard_free[MAX_SHARDS];
static size_t nshards; /* __atomic */
static struct {
    void (*fn)(void *);
    void *arg;
} hooks[MAX_HOOKS];
static size_t nhooks; /* __atomic */

static void lock(void)
{
    while (atomic_flag_test_and_set_explicit(&reg_lock, memory_order_acquire))
        ;
}

static void unlock(void)
{
    atomic_flag_clear_explicit(&reg_lock, memory_order_release);
}

/* ---- registration ---- */

static struct metrics_family *find_family(const char *name)
{
    for (struct metrics_family *f = families; f != NULL; f = f->next)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

static void publish_family(struct metrics_family *f)
{
    if (families_tail == NULL)
        __atomic_store_n(&families, f, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&families_tail->next, f, __ATOMIC_RELEASE);
    families_tail = f;
    __atomic_store_n(&nfamilies, nfamilies + 1, __ATOMIC_RELEASE);
}

static struct metrics_family *family_new(const char *name, const char *help, enum metrics_type type)
{
    struct metrics_family *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->type = type;
    if (f->name == NULL || f->help == NULL) {
        free(f->name);
        free(f->help);
        free(f);
        return NULL;
    }
    return f;
}

struct metrics_family *metrics_family(const char *name, const char *help, enum metrics_type type,
                                      const char *const *labels, const double *bounds,
                                      size_t nbounds)
{
    lock();
    struct metrics_family *f = find_family(name);
    if (f != NULL) {
        unlock();
        return f;
    }
    f = family_new(name, help, type);
    if (f == NULL) {
        unlock();
        return NULL;
    }
    size_t n = 0;
    while (labels != NULL && labels[n] != NULL && n < METRICS_MAX_LABELS) {
        f->labels[n] = strdup(labels[n]);
        f->order[n] = (int)n;
        n++;
    }
    f->nlabels = n;
    /* sort the names; order[] maps a given position to its sorted one */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(f->labels[j - 1], f->labels[j]) > 0; j--) {
            char *t = f->labels[j - 1];
            f->labels[j - 1] = f->labels[j];
            f->labels[j] = t;
            for (size_t k = 0; k < n; k++) {
                if (f->order[k] == (int)j)
                    f->order[k] = (int)j - 1;
                else if (f->order[k] == (int)j - 1)
                    f->order[k] = (int)j;
            }
        }
    if (type == METRICS_HISTOGRAM) {
        if (nbounds > METRICS_MAX_BOUNDS)
            nbounds = METRICS_MAX_BOUNDS;
        memcpy(f->bounds, bounds, nbounds * sizeof(*bounds));
        f->nbounds = nbounds;
    }
    publish_family(f);
    unlock();
    return f;
}

struct metrics_family *metrics_alias(const char *name, const char *help, struct metrics_family *of)
{
    if (of == NULL)
        return NULL;
    lock();
    struct metrics_family *f = find_family(name);
    if (f == NULL && (f = family_new(name, help, of->type)) != NULL) {
        f->alias_of = of;
        publish_family(f);
    }
    unlock();
    return f;
}

static size_t slots_of(const struct metrics_family *f)
{
    return f->type == METRICS_HISTOGRAM ? f->nbounds + 2 : 1;
}

struct metrics_series *metrics_series(struct metrics_family *f, const char *const *values)
{
    if (f == NULL || f->alias_of != NULL)
        return NULL;
    lock();
    for (struct metrics_series *s = f->series; s != NULL; s = s->next) {
        bool same = true;
        for (size_t i = 0; i < f->nlabels && same; i++)
            same = strcmp(s->values[f->order[i]], values[i]) == 0;
        if (same) {
            unlock();
            return s;
        }
    }
    struct metrics_series *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        unlock();
        return NULL;
    }
    s->family = f;
    for (size_t i = 0; i < f->nlabels; i++) {
        s->values[f->order[i]] = strdup(values[i] ? values[i] : "");
        if (s->values[f->order[i]] == NULL) {
            for (size_t k = 0; k < f->nlabels; k++)
                free(s->values[k]);
            free(s);
            unlock();
            return NULL;
        }
    }
    size_t need = slots_of(f);
    if (next_slot + need <= METRICS_SLOTS) {
        s->slot = next_slot;
        next_slot += (uint32_t)need;
    }
    if (f->tail == NULL)
        __atomic_store_n(&f->series, s, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&f->tail->next, s, __ATOMIC_RELEASE);
    f->tail = s;
    __atomic_store_n(&f->nseries, f->nseries + 1, __ATOMIC_RELEASE);
    unlock();
    return s;
}

metric_t metrics_slot(const struct metrics_series *s)
{
    return s != NULL && s->family->type != METRICS_HISTOGRAM ? s->slot : 0;
}

void metrics_series_fn(struct metrics_series *s, double (*fn)(void *arg), void *arg)
{
    if (s == NULL)
        return;
    lock();
    __atomic_store_n(&s->arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&s->fn, fn, __ATOMIC_RELEASE);
    unlock();
}

void metrics_set(struct metrics_series *s, double v)
{
    if (s == NULL)
        return;
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    __atomic_store_n(&s->set_bits, bits, __ATOMIC_RELAXED);
}

metric_t metrics_counter(const char *name, const char *help)
{
    return metrics_slot(
        metrics_series(metrics_family(name, help, METRICS_COUNTER, NULL, NULL, 0), NULL));
}

metric_t metrics_gauge(const char *name, const char *help)
{
    return metrics_slot(
        metrics_series(metrics_family(name, help, METRICS_GAUGE, NULL, NULL, 0), NULL));
}

struct metrics_series *metrics_histogram(const char *name, const char *help, const double *bounds,
                                         size_t nbounds)
{
    return metrics_series(metrics_family(name, help, METRICS_HISTOGRAM, NULL, bounds, nbounds),
                          NULL);
}

struct metrics_series *metrics_gauge_fn(const char *name, const char *help, double (*fn)(void *arg),
                                        void *arg)
{
    struct metrics_series *s =
        metrics_series(metrics_family(name, help, METRICS_GAUGE, NULL, NULL, 0), NULL);
    metrics_series_fn(s, fn, arg);
    return s;
}

double *metrics_exp_buckets(double start, double factor, size_t n, double *out)
{
    double v = start;
    for (size_t i = 0; i < n; i++) {
        out[i] = v;
        v *= factor;
    }
    return out;
}

void metrics_on_scrape(void (*fn)(void *arg), void *arg)
{
    lock();
    for (size_t i = 0; i < nhooks; i++)
        if (hooks[i].fn == fn && hooks[i].arg == arg) {
            unlock();
            return;
        }
    if (nhooks < MAX_HOOKS) {
        hooks[nhooks].fn = fn;
        hooks[nhooks].arg = arg;
        __atomic_store_n(&nhooks, nhooks + 1, __ATOMIC_RELEASE);
    }
    unlock();
}

/* ---- threads ---- */

void metrics_thread_attach(void)
{
    if (metrics_tls != NULL)
        return;
    lock();
    for (size_t i = 0; i < nshards; i++)
        if (shard_free[i]) {
            shard_free[i] = false;
            metrics_tls = shards[i];
            unlock();
            return;
        }
    if (nshards < MAX_SHARDS) {
        uint64_t *v = calloc(METRICS_SLOTS, sizeof(*v));
        if (v != NULL) {
            shards[nshards] = v;
            __atomic_store_n(&nshards, nshards + 1, __ATOMIC_RELEASE);
            metrics_tls = v;
        }
    }
    unlock();
}

void metrics_thread_detach(void)
{
    if (metrics_tls == NULL)
        return;
    lock();
    for (size_t i = 0; i < nshards; i++)
        if (shards[i] == metrics_tls)
            shard_free[i] = true;
    metrics_tls = NULL;
    unlock();
}

/* ---- updates ---- */

static void add_double(uint64_t *p, double v, bool own)
{
    uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED), nb;
    double d;
    do {
        memcpy(&d, &old, sizeof(d));
        d += v;
        memcpy(&nb, &d, sizeof(nb));
        if (own) {
            __atomic_store_n(p, nb, __ATOMIC_RELAXED);
            return;
        }
    } while (!__atomic_compare_exchange_n(p, &old, nb, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

void metrics_observe(const struct metrics_series *h, double v)
{
    if (h == NULL || h->slot == 0)
        return;
    const struct metrics_family *f = h->family;
    size_t i = 0;
    while (i < f->nbounds && v > f->bounds[i])
        i++;
    uint64_t *s = metrics_tls;
    if (s != NULL) {
        uint64_t *b = &s[h->slot + i];
        __atomic_store_n(b, __atomic_load_n(b, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
        add_double(&s[h->slot + f->nbounds + 1], v, true);
    } else {
        __atomic_fetch_add(&metrics_shared[h->slot + i], 1, __ATOMIC_RELAXED);
        add_double(&metrics_shared[h->slot + f->nbounds + 1], v, false);
    }
}

/* ---- reading ---- */

static uint64_t slot_sum(uint32_t slot)
{
    uint64_t v = __atomic_load_n(&metrics_shared[slot], __ATOMIC_RELAXED);
    size_t n = __atomic_load_n(&nshards, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        v += __atomic_load_n(&shards[i][slot], __ATOMIC_RELAXED);
    return v;
}

static double slot_sum_double(uint32_t slot)
{
    double total = 0, d;
    uint64_t b = __atomic_load_n(&metrics_shared[slot], __ATOMIC_RELAXED);
    memcpy(&d, &b, sizeof(d));
    total += d;
    size_t n = __atomic_load_n(&nshards, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++) {
        b = __atomic_load_n(&shards[i][slot], __ATOMIC_RELAXED);
        memcpy(&d, &b, sizeof(d));
        total += d;
    }
    return total;
}

/* the parts of a counter's or gauge's value that are not a histogram */
static double scalar_value(const struct metrics_series *s)
{
    double v = 0;
    if (s->slot != 0) {
        uint64_t u = slot_sum(s->slot);
        v = s->family->type == METRICS_GAUGE ? (double)(int64_t)u : (double)u;
    }
    uint64_t bits = __atomic_load_n(&s->set_bits, __ATOMIC_RELAXED);
    double set;
    memcpy(&set, &bits, sizeof(set));
    v += set;
    double (*fn)(void *) = __atomic_load_n(&s->fn, __ATOMIC_ACQUIRE);
    if (fn != NULL)
        v += fn(__atomic_load_n(&s->arg, __ATOMIC_RELAXED));
    return v;
}

double metrics_value(const struct metrics_series *s)
{
    if (s == NULL)
        return 0;
    if (s->family->type != METRICS_HISTOGRAM)
        return scalar_value(s);
    uint64_t count = 0;
    for (size_t i = 0; s->slot != 0 && i <= s->family->nbounds; i++)
        count += slot_sum(s->slot + (uint32_t)i);
    return (double)count;
}

int metrics_format_float(double v, char *out)
{
    if (isnan(v))
        return sprintf(out, "NaN");
    if (isinf(v))
        return sprintf(out, v > 0 ? "+Inf" : "-Inf");
    if (v == 0)
        return sprintf(out, "0");
    /* the shortest %e that reads back as v */
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e: [-]d[.ddd]e(+|-)XX */
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    size_t nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp < -4 || exp >= 6) { /* Go: %e when exp < -4 || exp >= 6 for the shortest */
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp - 1; i++)
            *o++ = '0';
        memcpy(o, digits, nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp; i++)
            *o++ = (size_t)i < nd ? digits[i] : '0';
        if (nd > (size_t)exp + 1) {
            *o++ = '.';
            memcpy(o, digits + exp + 1, nd - (size_t)exp - 1);
            o += nd - (size_t)exp - 1;
        }
    }
    *o = 0;
    return (int)(o - out);
}

static int put(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

/* escape: HELP escapes \ and newline; label values also " */
static int put_escaped(struct buf *b, const char *s, bool quote)
{
    int rv = 0;
    for (; *s && rv == 0; s++) {
        if (*s == '\\')
            rv = put(b, "\\\\");
        else if (*s == '\n')
            rv = put(b, "\\n");
        else if (*s == '"' && quote)
            rv = put(b, "\\\"");
        else
            rv = buf_append_byte(b, (uint8_t)*s);
    }
    return rv;
}

static int put_float(struct buf *b, double v)
{
    char t[40];
    int n = metrics_format_float(v, t);
    return buf_append(b, t, (size_t)n);
}

/* put_sample writes name[suffix]{labels[,le="le"]} value */
static int put_sample(struct buf *b, const struct metrics_family *f, const char *name,
                      const struct metrics_series *s, const char *suffix, const char *le, double v)
{
    int rv = put(b, name);
    if (rv == 0 && suffix != NULL)
        rv = put(b, suffix);
    if (rv == 0 && (f->nlabels > 0 || le != NULL)) {
        rv = buf_append_byte(b, '{');
        for (size_t i = 0; i < f->nlabels && rv == 0; i++) {
            if (i > 0)
                rv = buf_append_byte(b, ',');
            if (rv == 0)
                rv = put(b, f->labels[i]);
            if (rv == 0)
                rv = put(b, "=\"");
            if (rv == 0)
                rv = put_escaped(b, s->values[i], true);
            if (rv == 0)
                rv = buf_append_byte(b, '"');
        }
        if (rv == 0 && le != NULL) {
            if (f->nlabels > 0)
                rv = buf_append_byte(b, ',');
            if (rv == 0)
                rv = put(b, "le=\"");
            if (rv == 0)
                rv = put(b, le);
            if (rv == 0)
                rv = buf_append_byte(b, '"');
        }
        if (rv == 0)
            rv = buf_append_byte(b, '}');
    }
    if (rv == 0)
        rv = buf_append_byte(b, ' ');
    if (rv == 0)
        rv = put_float(b, v);
    if (rv == 0)
        rv = buf_append_byte(b, '\n');
    return rv;
}

static int family_cmp(const void *a, const void *b)
{
    const struct metrics_family *x = *(const struct metrics_family *const *)a;
    const struct metrics_family *y = *(const struct metrics_family *const *)b;
    return strcmp(x->name, y->name);
}

static int series_cmp(const void *a, const void *b)
{
    const struct metrics_series *x = *(const struct metrics_series *const *)a;
    const struct metrics_series *y = *(const struct metrics_series *const *)b;
    for (size_t i = 0; i < x->family->nlabels; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

static int expose_family(struct buf *b, const struct metrics_family *shown)
{
    const struct metrics_family *f = shown->alias_of ? shown->alias_of : shown;
    size_t n = __atomic_load_n(&f->nseries, __ATOMIC_ACQUIRE);
    if (n == 0)
        return 0; /* as Go: a vector without children shows nothing */
    struct metrics_series **v = malloc(n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (struct metrics_series *s = __atomic_load_n(&f->series, __ATOMIC_ACQUIRE);
         s != NULL && k < n; s = __atomic_load_n(&s->next, __ATOMIC_ACQUIRE))
        v[k++] = s;
    n = k;
    if (f->nlabels > 0)
        qsort(v, n, sizeof(*v), series_cmp);
    static const char *const types[] = {"counter", "gauge", "histogram"};
    int rv = put(b, "# HELP ");
    if (rv == 0)
        rv = put(b, shown->name);
    if (rv == 0)
        rv = buf_append_byte(b, ' ');
    if (rv == 0)
        rv = put_escaped(b, shown->help, false);
    if (rv == 0)
        rv = put(b, "\n# TYPE ");
    if (rv == 0)
        rv = put(b, shown->name);
    if (rv == 0)
        rv = buf_append_byte(b, ' ');
    if (rv == 0)
        rv = put(b, types[f->type]);
    if (rv == 0)
        rv = buf_append_byte(b, '\n');
    for (size_t i = 0; i < n && rv == 0; i++) {
        const struct metrics_series *s = v[i];
        if (f->type != METRICS_HISTOGRAM) {
            rv = put_sample(b, f, shown->name, s, NULL, NULL, scalar_value(s));
            continue;
        }
        uint64_t cum = 0;
        for (size_t j = 0; j <= f->nbounds && rv == 0; j++) {
            char le[40] = "+Inf";
            if (j < f->nbounds)
                metrics_format_float(f->bounds[j], le);
            if (s->slot != 0)
                cum += slot_sum(s->slot + (uint32_t)j);
            rv = put_sample(b, f, shown->name, s, "_bucket", le, (double)cum);
        }
        double sum = s->slot != 0 ? slot_sum_double(s->slot + (uint32_t)f->nbounds + 1) : 0;
        if (rv == 0)
            rv = put_sample(b, f, shown->name, s, "_sum", NULL, sum);
        if (rv == 0)
            rv = put_sample(b, f, shown->name, s, "_count", NULL, (double)cum);
    }
    free(v);
    return rv;
}

int metrics_expose(struct buf *out)
{
    size_t nh = __atomic_load_n(&nhooks, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < nh; i++)
        hooks[i].fn(hooks[i].arg);
    size_t n = __atomic_load_n(&nfamilies, __ATOMIC_ACQUIRE);
    if (n == 0)
        return 0;
    struct metrics_family **v = malloc(n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (struct metrics_family *f = __atomic_load_n(&families, __ATOMIC_ACQUIRE);
         f != NULL && k < n; f = __atomic_load_n(&f->next, __ATOMIC_ACQUIRE))
        v[k++] = f;
    qsort(v, k, sizeof(*v), family_cmp);
    int rv = 0;
    for (size_t i = 0; i < k && rv == 0; i++)
        rv = expose_family(out, v[i]);
    free(v);
    return rv;
}

/* ---- the process collector ---- */

static struct {
    struct metrics_series *cpu, *open_fds, *max_fds, *rss, *vsize, *vmax, *start, *fd_used,
        *fd_limit;
} proc;

static double boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    double bt = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "btime ", 6) == 0) {
            bt = strtod(line + 6, NULL);
            break;
        }
    if (f != NULL)
        fclose(f);
    return bt;
}

static void process_scrape(void *arg)
{
    (void)arg;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = 0;
    /* after "pid (comm) ": state is field 3; utime 14, stime 15,
     * starttime 22, vsize 23, rss 24 */
    const char *p = strrchr(buf, ')');
    if (p != NULL && tick > 0) {
        unsigned long long fld[25] = {0};
        int i = 3;
        p += 2;
        while (*p && i <= 24) {
            if (i >= 14)
                fld[i] = strtoull(p, NULL, 10);
            while (*p && *p != ' ')
                p++;
            while (*p == ' ')
                p++;
            i++;
        }
        metrics_set(proc.cpu, (double)(fld[14] + fld[15]) / (double)tick);
        metrics_set(proc.vsize, (double)fld[23]);
        metrics_set(proc.rss, (double)fld[24] * (double)page);
    }
    double fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.')
                fds++;
        closedir(d);
        fds--; /* the directory's own descriptor */
    }
    metrics_set(proc.open_fds, fds);
    metrics_set(proc.fd_used, fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        metrics_set(proc.max_fds, (double)rl.rlim_cur);
        metrics_set(proc.fd_limit, (double)rl.rlim_cur);
    }
    if (getrlimit(RLIMIT_AS, &rl) == 0)
        metrics_set(proc.vmax,
                    rl.rlim_cur == RLIM_INFINITY ? 18446744073709551615.0 : (double)rl.rlim_cur);
}

static struct metrics_series *gauge_series(const char *name, const char *help, bool counter)
{
    return metrics_series(
        metrics_family(name, help, counter ? METRICS_COUNTER : METRICS_GAUGE, NULL, NULL, 0), NULL);
}

void metrics_process_register(void)
{
    proc.cpu = gauge_series("process_cpu_seconds_total",
                            "Total user and system CPU time spent in seconds.", true);
    proc.open_fds = gauge_series("process_open_fds", "Number of open file descriptors.", false);
    proc.max_fds =
        gauge_series("process_max_fds", "Maximum number of open file descriptors.", false);
    proc.rss =
        gauge_series("process_resident_memory_bytes", "Resident memory size in bytes.", false);
    proc.vsize =
        gauge_series("process_virtual_memory_bytes", "Virtual memory size in bytes.", false);
    proc.vmax = gauge_series("process_virtual_memory_max_bytes",
                             "Maximum amount of virtual memory available in bytes.", false);
    proc.start = gauge_series("process_start_time_seconds",
                              "Start time of the process since unix epoch in seconds.", false);
    proc.fd_used = gauge_series("os_fd_used", "The number of used file descriptors.", false);
    proc.fd_limit = gauge_series("os_fd_limit", "The file descriptor limit.", false);
    /* the start time, once: from /proc/self/stat's starttime (clock ticks
     * after boot) and the boot time */
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    long tick = sysconf(_SC_CLK_TCK);
    for (int i = 2; p != NULL && i < 22; i++) /* field 22 is the 20th after ")" */
        p = strchr(p + 1, ' ');
    if (p != NULL && tick > 0)
        metrics_set(proc.start, boot_time() + (double)strtoull(p + 1, NULL, 10) / (double)tick);
    metrics_on_scrape(process_scrape, NULL);
}
