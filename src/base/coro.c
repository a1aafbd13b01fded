/* base/coro.c: coroutines on ucontext (coro.h). */
#include "base/coro.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CORO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CORO_ASAN 1
#endif
#endif

#ifdef CORO_ASAN
#include <dlfcn.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>

/* ASan's swapcontext interceptor prints "WARNING: ASan doesn't fully
 * support makecontext/swapcontext functions..." to stderr at the first
 * switch (a member's stderr is part of what its tests check), and all it
 * does besides is clear the target stack's shadow. The switches here are
 * annotated (__sanitizer_*_switch_fiber) and the coroutine's stack is
 * unpoisoned at each start, so libc's own swapcontext is called instead. */
typedef int (*swapcontext_fn)(ucontext_t *, const ucontext_t *);

static swapcontext_fn libc_swapcontext(void)
{
    static swapcontext_fn fn; /* the core thread's; the same value on any */
    if (fn == NULL) {
        void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL)
            fn = (swapcontext_fn)dlsym(h, "swapcontext");
        if (fn == NULL)
            fn = swapcontext;
    }
    return fn;
}
#define SWAPCONTEXT(from, to) libc_swapcontext()(from, to)
#else
#define SWAPCONTEXT(from, to) swapcontext(from, to)
#endif

/* ThreadSanitizer is deliberately not told of the switches (no
 * __tsan_switch_to_fiber): as a TSan fiber the coroutine is a thread of its
 * own for mutex ownership, and LMDB's writer mutex, locked by the batch's
 * write txn on the loop's stack and unlocked by a step's commit on the
 * coroutine's (or the other way round), was reported as unlocked by a wrong
 * thread. Untold, TSan sees one thread, which is what it is; the price is
 * that a report's stack may mix frames of the two stacks. */

struct coro {
    ucontext_t caller, self;
    void *map; /* guard page + stack */
    size_t map_len;
    void *stack; /* above the guard page */
    size_t stack_len;
    coro_fn fn;
    void *arg;
    bool suspended, running;
#ifdef CORO_ASAN
    void *caller_fake, *self_fake;
    const void *caller_bottom;
    size_t caller_size;
#endif
};

/* the coro being started: makecontext passes only ints */
static __thread coro *starting;

int coro_new(size_t stack_bytes, coro **out)
{
    *out = NULL;
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    size_t len = (stack_bytes + page - 1) / page * page;
    if (len == 0)
        len = page;
    coro *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->map_len = len + page;
    c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (c->map == MAP_FAILED) {
        free(c);
        return -ENOMEM;
    }
    (void)mprotect(c->map, page, PROT_NONE); /* an overflow faults */
    c->stack = (char *)c->map + page;
    c->stack_len = len;
    *out = c;
    return 0;
}

void coro_free(coro *c)
{
    if (c == NULL)
        return;
    if (c->suspended)
        abort(); /* its caller's frames would be lost */
    munmap(c->map, c->map_len);
    free(c);
}

/* to_caller switches from the coroutine back to whoever ran it. |done|:
 * the function returned, this stack is not coming back. */
static void to_caller(coro *c, bool done)
{
#ifdef CORO_ASAN
    __sanitizer_start_switch_fiber(done ? NULL : &c->self_fake, c->caller_bottom, c->caller_size);
#endif
    if (done) {
        setcontext(&c->caller);
        abort(); /* not reached */
    }
    SWAPCONTEXT(&c->self, &c->caller);
#ifdef CORO_ASAN
    __sanitizer_finish_switch_fiber(c->self_fake, &c->caller_bottom, &c->caller_size);
#endif
}

static void trampoline(void)
{
    coro *c = starting;
    starting = NULL;
#ifdef CORO_ASAN
    __sanitizer_finish_switch_fiber(NULL, &c->caller_bottom, &c->caller_size);
#endif
    c->fn(c->arg);
    c->suspended = false;
    c->running = false;
    to_caller(c, true);
}

/* to_coro switches into the coroutine until it yields or returns. */
static bool to_coro(coro *c)
{
    c->running = true;
#ifdef CORO_ASAN
    __sanitizer_start_switch_fiber(&c->caller_fake, c->stack, c->stack_len);
#endif
    SWAPCONTEXT(&c->caller, &c->self);
#ifdef CORO_ASAN
    __sanitizer_finish_switch_fiber(c->caller_fake, NULL, NULL);
#endif
    return c->suspended;
}

bool coro_start(coro *c, coro_fn fn, void *arg)
{
    if (c->suspended || c->running)
        abort();
    if (getcontext(&c->self) != 0)
        abort();
    c->self.uc_stack.ss_sp = c->stack;
    c->self.uc_stack.ss_size = c->stack_len;
    c->self.uc_link = NULL;
    makecontext(&c->self, trampoline, 0);
    c->fn = fn;
    c->arg = arg;
    starting = c;
#ifdef CORO_ASAN
    /* nothing lives on it: what an earlier run poisoned (its frames'
     * redzones) must not trip this one */
    __asan_unpoison_memory_region(c->stack, c->stack_len);
#endif
    return to_coro(c);
}

bool coro_resume(coro *c)
{
    if (!c->suspended || c->running)
        abort();
    return to_coro(c);
}

void coro_yield(coro *c)
{
    if (!c->running)
        abort();
    c->suspended = true;
    c->running = false;
    to_caller(c, false);
    c->running = true;
}

bool coro_suspended(const coro *c)
{
    return c != NULL && c->suspended;
}

bool coro_running(const coro *c)
{
    return c != NULL && c->running;
}
