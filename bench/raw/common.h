/* Shared by the raw ZeroMQ baselines: timing, percentiles, the JSON line,
 * and starting a child process that reports its endpoint through a pipe. */
#ifndef QUAD_BENCH_COMMON_H
#define QUAD_BENCH_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define PAYLOAD_BYTES 200
#define ENDPOINT_MAX 256

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, errno ? zmq_strerror(errno) : "failed");
    exit(1);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of n sorted samples, nearest rank. */
static inline double quantile_us(const uint64_t *sorted, size_t n, double q) {
    size_t k = (size_t)(q * (double)n + 0.5);
    if (k >= 1) k -= 1;
    if (k >= n) k = n - 1;
    return (double)sorted[k] / 1000.0;
}

/* Sorts the samples and prints the JSON line; extra is ",\"key\":value..." or "". */
static inline void report(const char *bench, uint64_t *lat_ns, size_t n, uint64_t elapsed_ns, const char *extra) {
    qsort(lat_ns, n, sizeof *lat_ns, cmp_u64);
    printf("{\"bench\":\"%s\"%s,\"p50_us\":%.1f,\"p99_us\":%.1f,\"rps\":%.0f,\"n\":%zu}\n", bench, extra,
           quantile_us(lat_ns, n, 0.50), quantile_us(lat_ns, n, 0.99),
           (double)n * 1e9 / (double)elapsed_ns, n);
    fflush(stdout);
}

/* Forks a child that runs serve(arg, endpoint_out) after binding; the child
 * writes the endpoint it bound to the pipe and never returns. The parent
 * gets that endpoint. The child dies with the parent (PR_SET_PDEATHSIG). */
typedef void (*serve_fn)(void *arg, int report_fd);

static inline pid_t spawn(serve_fn serve, void *arg, char endpoint[ENDPOINT_MAX]) {
    int fds[2];
    if (pipe(fds) != 0) die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        serve(arg, fds[1]);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < ENDPOINT_MAX - 1 && (r = read(fds[0], endpoint + got, ENDPOINT_MAX - 1 - got)) > 0) got += (size_t)r;
    endpoint[got] = 0;
    close(fds[0]);
    if (got == 0) { fprintf(stderr, "child %d reported no endpoint\n", (int)pid); exit(1); }
    return pid;
}

/* In a child: tells the parent where sock is bound, then closes the pipe. */
static inline void tell_endpoint(void *sock, int report_fd) {
    char ep[ENDPOINT_MAX];
    size_t len = sizeof ep;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, ep, &len) != 0) die("zmq_getsockopt LAST_ENDPOINT");
    if (write(report_fd, ep, strlen(ep)) < 0) die("write endpoint");
    close(report_fd);
}

static inline void stop(pid_t pid) {
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

#endif
