/* tests/fuzz/fuzz_tls.c: libFuzzer target for what tls/ decodes from
 * outside bytes. Byte 0 picks:
 *   even: the rest is a DER certificate for tls_cn_from_der (the common
 *         name extraction the server uses for a peer's certificate), with
 *         output buffers of several sizes;
 *   odd:  the rest is what a client sends to a TLS server (a ClientHello
 *         and more), fed in two pieces to a server connection that then
 *         runs its handshake and reads: it must fail cleanly or wait.
 * The server's certificate is a self-signed one made once (tls.h,
 * tls_make_self_signed) in a temp dir. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tls/tls.h"

static tls_ctx *server;

static void make_server(void)
{
    char dir[] = "/tmp/fuzz-tls-XXXXXX";
    if (mkdtemp(dir) == NULL)
        abort();
    char cert[64], key[64], err[512];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    if (tls_make_self_signed(cert, key, "127.0.0.1", err, sizeof(err)) != 0)
        abort();
    struct tls_config c = {
        .role = TLS_SERVER, .cert_file = cert, .key_file = key, .alpn = "h2", .label = "fuzz"};
    if (tls_ctx_new(&c, &server, err, sizeof(err)) != 0)
        abort();
    unlink(cert);
    unlink(key);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if ((data[0] & 1) == 0) {
        static const size_t caps[] = {1, 8, 64, 256};
        for (size_t i = 0; i < 4; i++) {
            char out[256];
            int rv = tls_cn_from_der(p, n, out, caps[i]);
            if (rv == 0 && strlen(out) >= caps[i])
                abort(); /* must fit, NUL included */
        }
        return 0;
    }
    if (server == NULL)
        make_server();
    tls_conn *c;
    if (tls_conn_new(server, NULL, &c) != 0)
        return 0;
    size_t half = n / 2;
    uint8_t buf[4096];
    struct buf out = {0};
    tls_conn_feed(c, p, half);
    (void)tls_conn_handshake(c);
    tls_conn_feed(c, p + half, n - half);
    for (int i = 0; i < 4; i++) {
        ssize_t r = tls_conn_read(c, buf, sizeof(buf));
        if (r == TLS_FAILED && tls_conn_error(c)[0] == '\0')
            abort(); /* a failure always says why */
        if (r < 0)
            break;
    }
    (void)tls_conn_take_output(c, &out);
    (void)tls_conn_peer_cn(c);
    buf_free(&out);
    tls_conn_free(c);
    return 0;
}
