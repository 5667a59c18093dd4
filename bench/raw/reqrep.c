/* raw_reqrep: a plain ZeroMQ REQ/REP round trip over tcp loopback, 200-byte
 * payload, client and server in two processes. The baseline for one hop.
 *
 *   reqrep [N] [WARMUP]     N measured round trips (default 100000),
 *                           after WARMUP unmeasured ones (default 1000)
 *
 * Prints {"bench":"raw_reqrep","p50_us":..,"p99_us":..,"rps":..,"n":..}. */
#include "common.h"

static void serve(void *arg, int report_fd) {
    (void)arg;
    void *ctx = zmq_ctx_new();
    void *rep = zmq_socket(ctx, ZMQ_REP);
    if (zmq_bind(rep, "tcp://127.0.0.1:*") != 0) die("zmq_bind");
    tell_endpoint(rep, report_fd);
    char buf[PAYLOAD_BYTES * 2];
    for (;;) {
        int n = zmq_recv(rep, buf, sizeof buf, 0);
        if (n < 0) break;
        if (zmq_send(rep, buf, (size_t)n, 0) < 0) break;
    }
    zmq_close(rep);
    zmq_ctx_term(ctx);
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: %s [N>0] [WARMUP>=0]\nREQ/REP round trips of 200 B over tcp loopback; prints one JSON line.\n", argv[0]);
        return 0;
    }
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long warmup = argc > 2 ? atol(argv[2]) : 1000;
    if (n <= 0 || warmup < 0) {
        fprintf(stderr, "usage: %s [N>0] [WARMUP>=0]\n", argv[0]);
        return 64;
    }
    char endpoint[ENDPOINT_MAX];
    pid_t server = spawn(serve, NULL, endpoint);

    void *ctx = zmq_ctx_new();
    void *req = zmq_socket(ctx, ZMQ_REQ);
    if (zmq_connect(req, endpoint) != 0) die("zmq_connect");
    char payload[PAYLOAD_BYTES], buf[PAYLOAD_BYTES * 2];
    memset(payload, 'q', sizeof payload);
    uint64_t *lat = malloc((size_t)n * sizeof *lat);
    if (!lat) die("malloc");

    uint64_t started = 0;
    for (long k = -warmup; k < n; k++) {
        if (k == 0) started = now_ns();
        uint64_t t0 = now_ns();
        if (zmq_send(req, payload, sizeof payload, 0) < 0) die("zmq_send");
        if (zmq_recv(req, buf, sizeof buf, 0) != PAYLOAD_BYTES) die("zmq_recv");
        if (k >= 0) lat[k] = now_ns() - t0;
    }
    uint64_t elapsed = now_ns() - started;
    report("raw_reqrep", lat, (size_t)n, elapsed, "");

    zmq_close(req);
    zmq_ctx_term(ctx);
    stop(server);
    free(lat);
    return 0;
}
