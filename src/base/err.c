/* base/err.c: the code -> text -> gRPC status table behind err.h. */
#include "base/err.h"

#include <errno.h>
#include <string.h>

static const struct {
    const char *text;
    int status;
} table[QERR__COUNT] = {
#define ROW_(name, status, text) [name##__IDX] = {text, GRPC_STATUS_##status},
    QERR_TABLE(ROW_)
#undef ROW_
};

int q_is_qerr(int code)
{
    return code < QERR_BASE && code >= QERR_BASE - QERR__COUNT;
}

const char *q_strerror(int code)
{
    if (code == 0)
        return "ok";
    if (q_is_qerr(code))
        return table[QERR_BASE - 1 - code].text;
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

int q_err_grpc_status(int code)
{
    if (code == 0)
        return GRPC_STATUS_OK;
    if (q_is_qerr(code))
        return table[QERR_BASE - 1 - code].status;
    switch (code) {
    case -EINVAL:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case -ENOMEM:
    case -ENOSPC:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}
