/* An attacker's tool for the Docker gateway tests: hands an open directory from one container
   to another over a unix socket in a volume they share.

   fdpass get SOCK CMD...   listen on SOCK (mode 0777), take one descriptor as fd 3, exec CMD
   fdpass dir SOCK DIR      connect to SOCK and send a descriptor of directory DIR

   Built statically by the test (the test image has busybox alone). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct sockaddr_un addr(const char *path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    return a;
}

int main(int argc, char **argv) {
    char byte = 'x', control[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&byte, 1};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    if (argc >= 4 && !strcmp(argv[1], "get")) {
        struct sockaddr_un a = addr(argv[2]);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        unlink(argv[2]);
        if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1) || chmod(argv[2], 0777)) {
            perror("listen");
            return 1;
        }
        int c = accept(s, 0, 0);
        if (recvmsg(c, &m, 0) < 0 || !CMSG_FIRSTHDR(&m)) {
            perror("recvmsg");
            return 1;
        }
        int fd;
        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fd);
        if (dup2(fd, 3) < 0) return 1;
        execvp(argv[3], argv + 3);
        perror("exec");
        return 1;
    }
    if (argc == 4 && !strcmp(argv[1], "dir")) {
        struct sockaddr_un a = addr(argv[2]);
        int s = socket(AF_UNIX, SOCK_STREAM, 0), fd = open(argv[3], O_RDONLY | O_DIRECTORY);
        if (fd < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            return 1;
        }
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof fd);
        if (sendmsg(s, &m, 0) < 0) {
            perror("sendmsg");
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "usage: fdpass get SOCK CMD... | fdpass dir SOCK DIR\n");
    return 2;
}
