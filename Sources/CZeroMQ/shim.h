#pragma once
#include <zmq.h>

/// zmq_msg_t is an opaque 64-byte union; these keep its handling in C.
static inline int quad_zmq_errno(void) { return zmq_errno(); }

#ifdef __linux__
#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <unistd.h>

/// epoll over the sockets' ZMQ_FD (Reactor's scalable mode): a tag for
/// each descriptor in, the tags of the ready ones out. epoll_event is a
/// packed struct on x86_64; it stays on this side.
static inline int quad_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static inline int quad_epoll_add(int ep, int fd, uint64_t tag) {
    struct epoll_event e;
    e.events = EPOLLIN;
    e.data.u64 = tag;
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}
static inline int quad_epoll_del(int ep, int fd) {
    struct epoll_event e = {0};
    return epoll_ctl(ep, EPOLL_CTL_DEL, fd, &e);
}
static inline int quad_epoll_wait(int ep, uint64_t *tags, int max, int timeout_ms) {
    struct epoll_event ev[512];
    if (max > 512) max = 512;
    int n = epoll_wait(ep, ev, max, timeout_ms);
    for (int i = 0; i < n; i++) tags[i] = ev[i].data.u64;
    return n;
}
static inline void quad_close_fd(int fd) { close(fd); }
static inline int quad_epoll_interrupted(void) { return errno == EINTR; }
#endif
