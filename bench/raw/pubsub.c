/* Raw PUB/SUB through an XSUB/XPUB proxy: the hops of Quad's events
 * (outbox relay PUB -> broker XSUB|XPUB -> subscriber SUB), in three
 * processes, messages of two frames (topic, body) of the given sizes.
 * Prints {"bench":"pubsub","events_per_s":..,"n":..,"bytes":..}.
 * Usage: pubsub [-n N] [-s BODY_BYTES] [-t TOPIC] */
#include "common.h"

static char topic[128] = "favorites/bench.event";
static size_t body_bytes = PAYLOAD_BYTES;
static long count = 100000;

/* The proxy: XSUB and XPUB on ephemeral ports; reports "XSUB XPUB". */
static void serve_proxy(void *arg, int report_fd) {
    (void)arg;
    void *ctx = zmq_ctx_new();
    void *xsub = zmq_socket(ctx, ZMQ_XSUB), *xpub = zmq_socket(ctx, ZMQ_XPUB);
    int zero = 0;
    zmq_setsockopt(xsub, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(xpub, ZMQ_SNDHWM, &zero, sizeof zero);
    if (zmq_bind(xsub, "tcp://127.0.0.1:*") != 0) die("bind xsub");
    if (zmq_bind(xpub, "tcp://127.0.0.1:*") != 0) die("bind xpub");
    char a[ENDPOINT_MAX], b[ENDPOINT_MAX], both[2 * ENDPOINT_MAX + 2];
    size_t la = sizeof a, lb = sizeof b;
    zmq_getsockopt(xsub, ZMQ_LAST_ENDPOINT, a, &la);
    zmq_getsockopt(xpub, ZMQ_LAST_ENDPOINT, b, &lb);
    snprintf(both, sizeof both, "%s %s", a, b);
    if (write(report_fd, both, strlen(both)) < 0) die("write endpoint");
    close(report_fd);
    zmq_proxy(xsub, xpub, NULL);
}

static char xsub_ep[2 * ENDPOINT_MAX + 2];

/* The publisher: waits for the subscription to travel, then sends count messages. */
static void serve_publisher(void *arg, int report_fd) {
    (void)arg;
    void *ctx = zmq_ctx_new();
    void *pub = zmq_socket(ctx, ZMQ_PUB);
    int zero = 0;
    zmq_setsockopt(pub, ZMQ_SNDHWM, &zero, sizeof zero);
    if (zmq_connect(pub, xsub_ep) != 0) die("connect pub");
    if (write(report_fd, "pub", 3) < 0) die("write");
    close(report_fd);
    usleep(500 * 1000);
    char *body = malloc(body_bytes);
    memset(body, 'x', body_bytes);
    for (long k = 0; k < count; k++) {
        if (zmq_send(pub, topic, strlen(topic), ZMQ_SNDMORE) < 0) die("send topic");
        if (zmq_send(pub, body, body_bytes, 0) < 0) die("send body");
    }
    sleep(30); /* keep the socket until the parent has read everything (it kills us) */
}

int main(int argc, char **argv) {
    int opt;
    if (argc > 1 && strcmp(argv[1], "--help") == 0) argv[1] = "-h";
    while ((opt = getopt(argc, argv, "n:s:t:h")) != -1) {
        switch (opt) {
        case 'n': count = atol(optarg); break;
        case 's': body_bytes = (size_t)atol(optarg); break;
        case 't': snprintf(topic, sizeof topic, "%s", optarg); break;
        case 'h':
            printf("Usage: pubsub [-n N] [-s BODY_BYTES] [-t TOPIC]\n"
                   "Raw PUB -> XSUB|XPUB proxy -> SUB over tcp loopback; prints events per second.\n");
            return 0;
        default:
            fprintf(stderr, "Usage: pubsub [-n N] [-s BODY_BYTES] [-t TOPIC]\n");
            return 64;
        }
    }
    if (count <= 0 || body_bytes == 0 || body_bytes > (1 << 20)) {
        fprintf(stderr, "pubsub: -n must be > 0 and -s from 1 to 1048576\n");
        return 64;
    }
    char eps[2 * ENDPOINT_MAX + 2];
    pid_t proxy = spawn(serve_proxy, NULL, eps);
    char *space = strchr(eps, ' ');
    if (!space) { fprintf(stderr, "pubsub: bad proxy endpoints '%s'\n", eps); return 1; }
    *space = 0;
    snprintf(xsub_ep, sizeof xsub_ep, "%s", eps);

    void *ctx = zmq_ctx_new();
    void *sub = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(sub, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic, strlen(topic));
    if (zmq_connect(sub, space + 1) != 0) die("connect sub");
    usleep(100 * 1000);
    char ignored[ENDPOINT_MAX];
    pid_t publisher = spawn(serve_publisher, NULL, ignored);

    char buf[1 << 16];
    uint64_t first = 0, last = 0;
    int timeout = 10000;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    for (long got = 0; got < count; got++) {
        if (zmq_recv(sub, buf, sizeof buf, 0) < 0) die("recv topic (lost messages?)");
        if (zmq_recv(sub, buf, sizeof buf, 0) < 0) die("recv body");
        last = now_ns();
        if (got == 0) first = last;
    }
    stop(publisher);
    stop(proxy);
    double seconds = (double)(last - first) / 1e9;
    printf("{\"bench\":\"pubsub\",\"events_per_s\":%.0f,\"n\":%ld,\"bytes\":%zu}\n",
           seconds > 0 ? (double)(count - 1) / seconds : 0.0, count, body_bytes);
    return 0;
}
