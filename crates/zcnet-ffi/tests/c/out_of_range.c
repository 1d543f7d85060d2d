/* Issue 35 item 6, from C: every libzcnet function that takes a mode, called with values that
 * no ZCNET_MODE_* or ZCNET_FILE_MODE_* constant has, on a connected TCP socket over loopback.
 * Prints "FUNCTION VALUE RC" per call and, last, "peer received N bytes"; the test
 * (tests/c_examples.rs) wants -EINVAL everywhere and 0 bytes. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "zcnet.h"

int main(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0) {
        perror("listen");
        return 1;
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("connect");
        return 1;
    }
    int peer = accept(l, NULL, NULL);
    int file = open("/proc/self/exe", O_RDONLY);
    if (peer < 0 || file < 0) {
        perror("accept or open");
        return 1;
    }
    const int modes[] = {ZCNET_MODE_AUTO + 1, 99, -1, INT_MIN, INT_MAX};
    const int file_modes[] = {ZCNET_FILE_MODE_COPY + 1, 99, -1, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        ZcnetZcSender *zc = NULL;
        ZcnetRx *rx = NULL;
        ZcnetUringSender *uring = NULL;
        printf("zcnet_zc_sender_new %d %d\n", modes[i], zcnet_zc_sender_new(c, modes[i], &zc));
        printf("zcnet_rx_new %d %d\n", modes[i], zcnet_rx_new(peer, modes[i], 0, &rx));
        printf("zcnet_uring_sender_new %d %d\n", modes[i],
               zcnet_uring_sender_new(c, modes[i], &uring));
        if (zc || rx || uring) {
            printf("a handle was made for mode %d\n", modes[i]);
        }
    }
    for (size_t i = 0; i < sizeof file_modes / sizeof *file_modes; i++) {
        ZcnetFileResult r;
        printf("zcnet_send_file %d %d\n", file_modes[i],
               zcnet_send_file(c, file, 0, 4096, file_modes[i], &r));
    }
    close(c);
    char buf[4096];
    ssize_t n, got = 0;
    while ((n = read(peer, buf, sizeof buf)) > 0) {
        got += n;
    }
    printf("peer received %zd bytes\n", got);
    return 0;
}
