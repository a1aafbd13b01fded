/* base/coro.h: a function run on a stack of its own, on the calling
 * thread, that can stop part-way and be continued later (a coroutine).
 *
 * The core applies a Raft entry that changes millions of keys in steps
 * (mvcc.h, "Big revisions in steps"); between two steps it must go back to
 * its libuv loop and continue in a later pass, from deep inside apply/ and
 * mvcc/. The apply runs on a coroutine: a step's end yields (coro_yield)
 * and the loop continues it (coro_resume) in its next pass. Everything
 * stays on one thread, so LMDB's write transaction, thread-local state and
 * the libuv loop see nothing unusual.
 *
 * Built on ucontext (swapcontext), with the switches annotated for
 * AddressSanitizer. The stack is a private mapping reserved once per coro
 * (pages are committed as they are touched) with a guard page below it.
 *
 * Rules: one coroutine runs at a time per thread; only the function on the
 * coroutine yields, and only the thread that started it resumes it; a
 * coroutine that yielded must be resumed until it returns before
 * coro_free (its stack holds its caller's state: nothing is unwound). */
#ifndef QUORUM_BASE_CORO_H
#define QUORUM_BASE_CORO_H

#include <stdbool.h>
#include <stddef.h>

typedef struct coro coro;
typedef void (*coro_fn)(void *arg);

/* coro_new reserves a stack of |stack_bytes| (rounded up to pages).
 * Errors: -ENOMEM. */
int coro_new(size_t stack_bytes, coro **out);
/* coro_free releases |c| (NULL is fine); it must not be suspended. */
void coro_free(coro *c);

/* coro_start runs fn(arg) on |c|'s stack until it yields or returns;
 * coro_resume continues one that yielded, until it yields again or
 * returns. Both return true if the function yielded (it is suspended),
 * false once it returned. coro_start needs |c| not suspended. */
bool coro_start(coro *c, coro_fn fn, void *arg);
bool coro_resume(coro *c);

/* coro_yield, called by the function running on |c|, goes back to whoever
 * started or resumed it; it returns when the coroutine is resumed. */
void coro_yield(coro *c);

/* coro_suspended: started, yielded, not yet returned. coro_running: the
 * caller is on |c|'s stack now. */
bool coro_suspended(const coro *c);
bool coro_running(const coro *c);

#endif
