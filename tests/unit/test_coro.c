/* tests/unit/test_coro.c: base/coro.c. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/coro.h"

struct counter {
    coro *c;
    int steps, done_at;
    char trail[64];
};

static void count_to_three(void *arg)
{
    struct counter *k = arg;
    char local[32]; /* lives on the coroutine's stack across yields */
    strcpy(local, "kept");
    for (int i = 0; i < 3; i++) {
        k->trail[strlen(k->trail)] = (char)('a' + i);
        k->steps++;
        cr_assert(coro_running(k->c));
        coro_yield(k->c);
    }
    cr_assert_str_eq(local, "kept");
    k->done_at = k->steps;
}

Test(coro, yields_and_resumes_in_order)
{
    struct counter k = {0};
    cr_assert_eq(coro_new(64 * 1024, &k.c), 0);
    cr_assert(!coro_suspended(k.c));
    cr_assert(coro_start(k.c, count_to_three, &k));
    cr_assert_str_eq(k.trail, "a");
    cr_assert(coro_suspended(k.c));
    cr_assert(!coro_running(k.c));
    k.trail[strlen(k.trail)] = '-'; /* the caller's work between passes */
    cr_assert(coro_resume(k.c));
    cr_assert(coro_resume(k.c));
    cr_assert_str_eq(k.trail, "a-bc");
    cr_assert_not(coro_resume(k.c), "returned");
    cr_assert_eq(k.done_at, 3);
    cr_assert(!coro_suspended(k.c));
    coro_free(k.c);
}

static void no_yield(void *arg)
{
    (*(int *)arg)++;
}

Test(coro, a_function_that_never_yields_returns_at_once_and_the_coro_is_reused)
{
    coro *c;
    cr_assert_eq(coro_new(16 * 1024, &c), 0);
    int n = 0;
    for (int i = 0; i < 100; i++)
        cr_assert_not(coro_start(c, no_yield, &n));
    cr_assert_eq(n, 100);
    struct counter k = {.c = c};
    cr_assert(coro_start(c, count_to_three, &k)); /* after plain runs, one that yields */
    while (coro_resume(c))
        ;
    cr_assert_eq(k.done_at, 3);
    coro_free(c);
}

static int depth(int n)
{
    volatile char pad[1024];
    pad[0] = (char)n;
    return n == 0 ? pad[0] : depth(n - 1) + 1 + (pad[0] - (char)n);
}

struct deep {
    coro *c;
    int got;
};

static void go_deep(void *arg)
{
    struct deep *d = arg;
    coro_yield(d->c);
    d->got = depth(1000); /* about 1 MiB of frames */
}

Test(coro, the_stack_holds_deep_calls)
{
    struct deep d = {0};
    cr_assert_eq(coro_new(8u << 20, &d.c), 0);
    cr_assert(coro_start(d.c, go_deep, &d));
    cr_assert_not(coro_resume(d.c));
    cr_assert_eq(d.got, 1000);
    coro_free(d.c);
}

Test(coro, free_of_null_is_fine)
{
    coro_free(NULL);
}
