/* base/metrics.h: counters, gauges and histograms in the Prometheus text
 * format, cheap enough to update on every request.
 *
 * MODEL. A family has a name, a help text, a type, fixed label names and
 * (histograms) fixed bucket bounds; its series are the label values known
 * at start (every gRPC method and code, every peer as it is added).
 * Registration is done once, at start or when a peer joins, never on a
 * request's path; it is idempotent (the same name gives the same family,
 * the same label values the same series), so several servers in one
 * process share them.
 *
 * WHERE VALUES LIVE. Every series owns one slot (a histogram nbounds + 2:
 * its buckets, +Inf and the sum) in an array of uint64 that each thread
 * has a copy of, its shard. A loop thread (the core, each front loop)
 * attaches a shard of its own once (metrics_thread_attach); an update is
 * then a relaxed load and store on the calling thread's own shard: no
 * lock, no atomic read-modify-write, no cache line shared with another
 * writer. A thread without a shard (libuv's workers: the WAL fsync, the
 * snapshot copies) adds to one shared shard with an atomic add. A shard
 * outlives its thread (a detached shard is handed to the next thread that
 * attaches), so counters never go back.
 *
 * READING. metrics_expose sums each slot over the shards with relaxed
 * loads, under no lock (a value read while it changes is the old or the
 * new one; a histogram's buckets and sum may be one observation apart),
 * and writes every family sorted by name, its series sorted by label
 * values, as Go's client_golang writes them (text format 0.0.4; numbers
 * as Go's strconv.FormatFloat(v, 'g', -1, 64)), so a scrape of quorum
 * reads like one of etcd. A gauge's value is the sum of three parts: what
 * was added to its slot (metrics_add, signed), what was set
 * (metrics_set), and what a function computes at scrape time
 * (metrics_series_fn): state the core publishes in atomics (has_leader,
 * db size) is read then rather than pushed on every change.
 *
 * Threading: metrics_add/_observe from any thread; registration and
 * metrics_expose from any thread (registration is serialized by a spin
 * lock; readers walk append-only lists published with release stores).
 */
#ifndef QUORUM_BASE_METRICS_H
#define QUORUM_BASE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct buf;

/* Slots per shard (64 KiB). quorum registers about 3,000 with 16 peers and
 * --metrics=extensive; a series that does not fit gets slot 0, which is
 * never shown. */
#define METRICS_SLOTS 8192
#define METRICS_MAX_LABELS 4
#define METRICS_MAX_BOUNDS 32

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

/* a counter's or gauge's slot; 0 takes updates and shows nothing (the
 * value of a metric that was never registered: unit tests, tools) */
typedef uint32_t metric_t;

struct metrics_family;
struct metrics_series;

/* ---- registration ---- */

/* metrics_family registers (or finds, by name) a family. |labels| is NULL
 * or NULL-terminated (at most METRICS_MAX_LABELS; written sorted by name,
 * as Go does); |bounds| the upper bounds of a histogram's buckets,
 * ascending (at most METRICS_MAX_BOUNDS; +Inf is implied). Strings are
 * copied. NULL only when out of memory. */
struct metrics_family *metrics_family(const char *name, const char *help, enum metrics_type type,
                                      const char *const *labels, const double *bounds,
                                      size_t nbounds);
/* metrics_alias registers |name| as a second family showing |of|'s series
 * (etcd 3.4 shows etcd_mvcc_put_total and etcd_debugging_mvcc_put_total,
 * one count under two names). */
struct metrics_family *metrics_alias(const char *name, const char *help, struct metrics_family *of);
/* metrics_series registers (or finds) the series of |f| with |values| (one
 * per label, in the order the labels were given; NULL for a family
 * without labels). NULL when |f| is NULL or out of memory. */
struct metrics_series *metrics_series(struct metrics_family *f, const char *const *values);
/* metrics_slot is the slot a counter or gauge series is updated through
 * (0 for NULL). */
metric_t metrics_slot(const struct metrics_series *s);
/* metrics_series_fn makes |fn|(|arg|) part of the series' value at every
 * scrape (gauges and counters computed from state; called on the scraping
 * thread: it must only read what is safe to read from any thread). */
void metrics_series_fn(struct metrics_series *s, double (*fn)(void *arg), void *arg);
/* metrics_set sets the part of the value that is set (gauges: a version,
 * the quota; the process figures read at scrape time). */
void metrics_set(struct metrics_series *s, double v);

/* Shortcuts for families without labels: the series of a new family. */
metric_t metrics_counter(const char *name, const char *help);
metric_t metrics_gauge(const char *name, const char *help);
struct metrics_series *metrics_histogram(const char *name, const char *help, const double *bounds,
                                         size_t nbounds);
struct metrics_series *metrics_gauge_fn(const char *name, const char *help, double (*fn)(void *arg),
                                        void *arg);

/* metrics_exp_buckets fills |out| with |n| bounds start, start*factor, ...
 * (Go's prometheus.ExponentialBuckets) and returns |out|. */
double *metrics_exp_buckets(double start, double factor, size_t n, double *out);

/* metrics_on_scrape runs |fn|(|arg|) before each exposition (it sets the
 * series it owns; the process collector reads /proc then). */
void metrics_on_scrape(void (*fn)(void *arg), void *arg);

/* metrics_process_register registers process_* (CPU, memory, open files,
 * their limit, start time) and etcd's os_fd_used/os_fd_limit, read from
 * /proc/self at each scrape. */
void metrics_process_register(void);

/* ---- threads ---- */

/* metrics_thread_attach gives the calling thread a shard of its own (a
 * loop thread, once; a second call does nothing); detach hands it back
 * (the values stay) before the thread ends. */
void metrics_thread_attach(void);
void metrics_thread_detach(void);

/* ---- updates ---- */

extern _Thread_local uint64_t *metrics_tls;
extern uint64_t metrics_shared[METRICS_SLOTS];

/* metrics_add adds |n| to a counter, or to a gauge (a negative change as
 * (uint64_t)-n: gauges sum as signed). */
static inline void metrics_add(metric_t m, uint64_t n)
{
    uint64_t *s = metrics_tls;
    if (__builtin_expect(s != NULL, 1)) {
        /* this thread is the slot's only writer: no read-modify-write */
        __atomic_store_n(&s[m], __atomic_load_n(&s[m], __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_add(&metrics_shared[m], n, __ATOMIC_RELAXED);
    }
}

static inline void metrics_inc(metric_t m)
{
    metrics_add(m, 1);
}

static inline void metrics_gauge_add(metric_t m, int64_t d)
{
    metrics_add(m, (uint64_t)d);
}

/* metrics_observe adds |v| to a histogram (NULL: nothing). */
void metrics_observe(const struct metrics_series *h, double v);

/* metrics_now_ns: a monotonic clock for durations (vDSO, ~20 ns). */
static inline uint64_t metrics_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* metrics_observe_since observes the seconds since |t0_ns|. */
static inline void metrics_observe_since(const struct metrics_series *h, uint64_t t0_ns)
{
    if (h != NULL)
        metrics_observe(h, (double)(metrics_now_ns() - t0_ns) / 1e9);
}

/* ---- reading ---- */

/* metrics_expose appends every family to |out| in the Prometheus text
 * format (Content-Type "text/plain; version=0.0.4; charset=utf-8").
 * Errors: -ENOMEM. */
int metrics_expose(struct buf *out);

/* metrics_value is a series' current value (a histogram's: its count),
 * for tests and benchmarks. */
double metrics_value(const struct metrics_series *s);

/* metrics_format_float writes |v| as Go's strconv.FormatFloat(v, 'g', -1,
 * 64) does (the shortest digits that read back as |v|; the exponent form
 * below 1e-4 and from 1e6 on: "20480", "2.147483648e+09", "1e-05";
 * "+Inf", "-Inf", "NaN") into |out| (32 bytes) and returns the length. */
int metrics_format_float(double v, char *out);

#endif
