/* zc_recv ADDR PORT OUT: accepts one TCP connection and writes what arrives to OUT, receiving
 * by TCP_ZEROCOPY_RECEIVE through libzcnet (pages mapped, the rest copied), then prints the
 * counters. Build: cc -I crates/zcnet-ffi/include zc_recv.c -L target/release -lzcnet */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "zcnet.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: zc_recv ADDR PORT OUT\n");
        return 2;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE},
                    *ai;
    int rc = getaddrinfo(argv[1], argv[2], &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "zc_recv: %s: %s\n", argv[1], gai_strerror(rc));
        return 1;
    }
    int one = 1, l = socket(ai->ai_family, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l < 0 || bind(l, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l, 1) < 0) {
        perror("listen");
        return 1;
    }
    freeaddrinfo(ai);
    FILE *out = fopen(argv[3], "wb");
    if (!out) {
        perror(argv[3]);
        return 1;
    }
    /* Ready: the test waits for this line before starting the sender. */
    printf("listening\n");
    fflush(stdout);
    int conn = accept(l, NULL, NULL);
    if (conn < 0) {
        perror("accept");
        return 1;
    }
    ZcnetRx *rx;
    if (zcnet_rx_new(conn, ZCNET_MODE_ZERO_COPY, 0, &rx) < 0) {
        fprintf(stderr, "zc_recv: %s\n", zcnet_last_error());
        return 1;
    }
    const uint8_t *p;
    size_t n;
    for (;;) {
        /* p is valid until the next zcnet_rx_recv: use it (here: write it) before. */
        if (zcnet_rx_recv(rx, &p, &n) < 0) {
            fprintf(stderr, "zc_recv: %s\n", zcnet_last_error());
            return 1;
        }
        if (n == 0)
            break;
        if (fwrite(p, 1, n, out) != n) {
            perror(argv[3]);
            return 1;
        }
    }
    ZcnetRxCounters c;
    zcnet_rx_counters(rx, &c);
    printf("received %llu bytes, mapped %llu, copied %llu\n",
           (unsigned long long)(c.mapped_bytes + c.copied_bytes),
           (unsigned long long)c.mapped_bytes, (unsigned long long)c.copied_bytes);
    zcnet_rx_free(rx);
    fclose(out);
    close(conn);
    close(l);
    return 0;
}
