/* base/tsan.h: ThreadSanitizer annotations for hand-offs it cannot see.
 *
 * A message passed between threads through a library TSan does not
 * instrument (liburcu's wait-free queues) carries no happens-before edge
 * TSan knows of: the producer calls tsan_release(msg) before enqueueing, the
 * consumer tsan_acquire(msg) after dequeueing. In other builds they are
 * nothing.
 */
#ifndef QUORUM_BASE_TSAN_H
#define QUORUM_BASE_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define QUORUM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QUORUM_TSAN 1
#endif
#endif

#ifdef QUORUM_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define tsan_acquire(p) __tsan_acquire((void *)(p))
#define tsan_release(p) __tsan_release((void *)(p))
#else
#define tsan_acquire(p) ((void)(p))
#define tsan_release(p) ((void)(p))
#endif

#endif
