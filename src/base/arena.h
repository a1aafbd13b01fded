/* base/arena.h: a bump allocator for memory that lives exactly as long as one
 * request (decoded fields, response structs, copies of keys and values).
 *
 * A zeroed struct arena is empty. Everything allocated from it is freed at
 * once by arena_reset or arena_free; nothing is freed singly. */
#ifndef QUORUM_BASE_ARENA_H
#define QUORUM_BASE_ARENA_H

#include <stddef.h>

struct arena_chunk;

struct arena {
    struct arena_chunk *head; /* chunk being filled; older chunks follow */
    size_t used;              /* bytes used in head */
};

/* arena_alloc returns |n| bytes aligned for any type, zeroed, or NULL when
 * out of memory. Valid until arena_reset/arena_free. */
void *arena_alloc(struct arena *a, size_t n);
/* arena_dup copies |n| bytes; NULL on out of memory (n == 0 gives a valid
 * pointer to nothing). */
void *arena_dup(struct arena *a, const void *p, size_t n);
/* arena_reset frees everything but the first chunk, for reuse. */
void arena_reset(struct arena *a);
void arena_free(struct arena *a);

#endif
