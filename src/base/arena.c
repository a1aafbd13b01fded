/* base/arena.c: see arena.h. Chunks are 16 KiB, or larger for one big
 * allocation, so a request with a few small responses mallocs once. */
#include "base/arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_SIZE (16 * 1024)

struct arena_chunk {
    struct arena_chunk *next;
    size_t size;
    alignas(max_align_t) unsigned char data[];
};

void *arena_alloc(struct arena *a, size_t n)
{
    const size_t align = alignof(max_align_t);
    size_t need = (n + align - 1) & ~(align - 1);
    if (need < n)
        return NULL;
    if (a->head == NULL || a->head->size - a->used < need) {
        size_t size = need > CHUNK_SIZE ? need : CHUNK_SIZE;
        struct arena_chunk *c = malloc(sizeof(*c) + size);
        if (c == NULL)
            return NULL;
        c->size = size;
        c->next = a->head;
        a->head = c;
        a->used = 0;
    }
    void *p = a->head->data + a->used;
    a->used += need;
    memset(p, 0, n);
    return p;
}

void *arena_dup(struct arena *a, const void *p, size_t n)
{
    void *q = arena_alloc(a, n ? n : 1);
    if (q != NULL && n)
        memcpy(q, p, n);
    return q;
}

void arena_reset(struct arena *a)
{
    if (a->head == NULL)
        return;
    /* keep the oldest chunk (the last in the list): it is the common size */
    struct arena_chunk *c = a->head;
    while (c->next != NULL) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = c;
    a->used = 0;
}

void arena_free(struct arena *a)
{
    struct arena_chunk *c = a->head;
    while (c != NULL) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}
