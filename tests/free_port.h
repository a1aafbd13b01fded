/* tests/free_port.h: a port for a server a C test starts, as
 * tests/integration/harness.py's free_port chooses one: free on 127.0.0.1
 * now, at random BELOW the kernel's ephemeral range (a port bind(0) hands
 * out can be taken as the source port of any outgoing connection, the
 * tests running beside this one included, before the server listens on
 * it), and not one this process was given already (a member's ports are
 * all chosen before any of them listens). -1 when none was found. */
#ifndef QUORUM_TESTS_FREE_PORT_H
#define QUORUM_TESTS_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline int free_port(void)
{
    static int given[256];
    static unsigned n_given, seed;
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &lo) != 1)
            lo = 32768;
        fclose(f);
    }
    int top = (lo < 32768 ? lo : 32768) - 1;
    if (seed == 0)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 500; tries++) {
        int port = 10000 + (int)(rand_r(&seed) % (unsigned)(top - 10000 + 1));
        int seen = 0;
        for (unsigned i = 0; i < n_given && i < 256; i++)
            seen |= given[i] == port;
        if (seen)
            continue;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                 .sin_port = htons((uint16_t)port)};
        int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        if (ok) {
            given[n_given++ % 256] = port;
            return port;
        }
    }
    return -1;
}

#endif
