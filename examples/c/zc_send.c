/* zc_send FILE HOST PORT [--sendfile]: sends FILE over TCP with libzcnet.
 *
 * By default the file is mapped and each 256 KiB of it is loaned to the kernel with
 * MSG_ZEROCOPY (zcnet_zc_send); the mapping stays until every completion is back
 * (zcnet_zc_reap, zcnet_zc_drain). With --sendfile it goes by zcnet_send_file.
 * Build: cc -I crates/zcnet-ffi/include zc_send.c -L target/release -lzcnet */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "zcnet.h"

#define CHUNK (256 * 1024)


int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: zc_send FILE HOST PORT [--sendfile]\n");
        return 2;
    }
    int use_sendfile = argc > 4 && strcmp(argv[4], "--sendfile") == 0;
    int file = open(argv[1], O_RDONLY);
    struct stat st;
    if (file < 0 || fstat(file, &st) < 0) {
        perror(argv[1]);
        return 1;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
    int rc = getaddrinfo(argv[2], argv[3], &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "zc_send: %s: %s\n", argv[2], gai_strerror(rc));
        return 1;
    }
    int sock = socket(ai->ai_family, SOCK_STREAM, 0);
    if (sock < 0 || connect(sock, ai->ai_addr, ai->ai_addrlen) < 0) {
        perror("connect");
        return 1;
    }
    freeaddrinfo(ai);
    size_t size = (size_t)st.st_size;
    if (use_sendfile) {
        ZcnetFileResult r;
        if (zcnet_send_file(sock, file, 0, size, ZCNET_FILE_MODE_AUTO, &r) < 0) {
            fprintf(stderr, "zc_send: %s\n", zcnet_last_error());
            return 1;
        }
        printf("sent %llu bytes, %llu without a user copy\n", (unsigned long long)r.sent,
               (unsigned long long)r.zero_copy_bytes);
    } else {
        const uint8_t *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, file, 0) : NULL;
        if (map == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        ZcnetZcSender *s;
        if (zcnet_zc_sender_new(sock, ZCNET_MODE_ZERO_COPY, &s) < 0) {
            fprintf(stderr, "zc_send: %s\n", zcnet_last_error());
            return 1;
        }
        ZcnetCompletion done[64];
        size_t n, back = 0, chunks = 0;
        for (size_t off = 0; off < size; off += CHUNK, chunks++) {
            size_t len = size - off < CHUNK ? size - off : CHUNK;
            /* Loaned: the mapping stays until this chunk's completion comes back. */
            if (zcnet_zc_send(s, map + off, len, off) < 0 ||
                zcnet_zc_reap(s, done, 64, &n) < 0) {
                fprintf(stderr, "zc_send: %s\n", zcnet_last_error());
                return 1;
            }
            back += n;
        }
        if (zcnet_zc_drain(s, 10000) < 0) {
            fprintf(stderr, "zc_send: %s\n", zcnet_last_error());
            return 1;
        }
        do {
            zcnet_zc_reap(s, done, 64, &n);
            back += n;
        } while (n > 0);
        ZcnetZcCounters c;
        zcnet_zc_counters(s, &c);
        printf("sent %llu bytes in %zu chunks, %zu back; zerocopy calls %llu, copied %llu, "
               "really zero-copy %llu bytes\n",
               (unsigned long long)(c.loaned_bytes + c.copy_bytes), chunks, back,
               (unsigned long long)c.loaned_calls, (unsigned long long)c.copied_calls,
               (unsigned long long)c.zero_copy_bytes);
        zcnet_zc_sender_free(s);
        if (size)
            munmap((void *)map, size);
    }
    /* Half-close, then wait for the receiver's end: "sent" means delivered. */
    shutdown(sock, SHUT_WR);
    char rest[256];
    while (read(sock, rest, sizeof rest) > 0) {
    }
    close(sock);
    close(file);
    return 0;
}
