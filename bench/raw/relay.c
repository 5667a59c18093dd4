/* raw_relay: the hops of a Quad request through the broker, without Quad:
 * DEALER client -> ROUTER (frontend) | relay | ROUTER (backend) -> DEALER
 * worker, and back, over tcp loopback with a 200-byte payload. Client,
 * relay and each worker are separate processes, as in the stack.
 *
 * The relay routes like the broker: it queues requests and gives each worker
 * at most CREDIT at a time (1, the default, is the broker's rule: a worker
 * holds one request), least loaded first.
 *
 *   relay [-n N] [-i INFLIGHT] [-w WORKERS] [-k CREDIT] [-W WARMUP] [-c]
 *     N         measured requests (default 100000)
 *     INFLIGHT  requests the client keeps outstanding (default 1; try 8, 64)
 *     WORKERS   worker processes (default 1)
 *     CREDIT    requests a worker may hold at once (default 1)
 *     WARMUP    unmeasured requests first (default 2000)
 *     -c        CURVE on the frontend, as Quad's public frontend has it: the
 *               relay is the CURVE server (a key pair made at start), the
 *               client a CURVE client with a key pair of its own; the
 *               backend stays plain, as Quad's internal sockets are
 *
 * Latency is per request, from the client's send to its reply. Prints
 * {"bench":"raw_relay","inflight":..,"workers":..,"credit":..,"curve":..,"p50_us":..,"p99_us":..,"rps":..,"n":..}. */
#include "common.h"

#define MAX_WORKERS 64
#define ID_MAX 256

struct worker_slot {
    zmq_msg_t id;
    int out;
};

struct pending {
    zmq_msg_t client, body;
};

/* A ring of queued requests, grown on demand. */
struct queue {
    struct pending *items;
    size_t cap, head, len;
};

static struct pending *queue_push(struct queue *q) {
    if (q->len == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 256;
        struct pending *items = malloc(cap * sizeof *items);
        if (!items) die("malloc");
        for (size_t k = 0; k < q->len; k++) items[k] = q->items[(q->head + k) % q->cap];
        free(q->items);
        q->items = items;
        q->cap = cap;
        q->head = 0;
    }
    return &q->items[(q->head + q->len++) % q->cap];
}

static struct pending queue_pop(struct queue *q) {
    struct pending p = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return p;
}

static int more_of(void *sock) {
    int more = 0;
    size_t len = sizeof more;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len);
    return more;
}

static void drop_rest(void *sock) {
    while (more_of(sock)) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

static int credit = 1;
static int curve = 0;
/* Z85 keys, made before the relay is forked (the child inherits them). */
static char server_public[41], server_secret[41], client_public[41], client_secret[41];

static void relay_serve(void *arg, int report_fd) {
    (void)arg;
    void *ctx = zmq_ctx_new();
    void *front = zmq_socket(ctx, ZMQ_ROUTER);
    void *back = zmq_socket(ctx, ZMQ_ROUTER);
    if (curve) {
        int one = 1;
        if (zmq_setsockopt(front, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(front, ZMQ_CURVE_SECRETKEY, server_secret, 40) != 0) die("relay CURVE server");
    }
    if (zmq_bind(front, "tcp://127.0.0.1:*") != 0 || zmq_bind(back, "tcp://127.0.0.1:*") != 0) die("relay bind");
    char ep1[ENDPOINT_MAX], ep2[ENDPOINT_MAX], both[2 * ENDPOINT_MAX + 2];
    size_t l1 = sizeof ep1, l2 = sizeof ep2;
    zmq_getsockopt(front, ZMQ_LAST_ENDPOINT, ep1, &l1);
    zmq_getsockopt(back, ZMQ_LAST_ENDPOINT, ep2, &l2);
    snprintf(both, sizeof both, "%s %s", ep1, ep2);
    if (write(report_fd, both, strlen(both)) < 0) die("write endpoints");
    close(report_fd);

    struct worker_slot workers[MAX_WORKERS];
    int nworkers = 0;
    struct queue q = {0};
    zmq_pollitem_t items[2] = {{back, 0, ZMQ_POLLIN, 0}, {front, 0, ZMQ_POLLIN, 0}};

    for (;;) {
        if (zmq_poll(items, 2, -1) < 0) break;
        if (items[0].revents & ZMQ_POLLIN) {
            zmq_msg_t wid, f2, body;
            zmq_msg_init(&wid);
            while (zmq_msg_recv(&wid, back, ZMQ_DONTWAIT) >= 0) {
                zmq_msg_init(&f2);
                zmq_msg_recv(&f2, back, 0);
                if (!more_of(back)) { /* [worker, "READY"] */
                    if (nworkers < MAX_WORKERS) {
                        zmq_msg_init(&workers[nworkers].id);
                        zmq_msg_copy(&workers[nworkers].id, &wid);
                        workers[nworkers++].out = 0;
                    }
                    zmq_msg_close(&f2);
                } else { /* [worker, client, body]: the reply goes to the client */
                    zmq_msg_init(&body);
                    zmq_msg_recv(&body, back, 0);
                    drop_rest(back);
                    zmq_msg_send(&f2, front, ZMQ_SNDMORE);
                    zmq_msg_send(&body, front, 0);
                    for (int k = 0; k < nworkers; k++) {
                        if (zmq_msg_size(&workers[k].id) == zmq_msg_size(&wid) &&
                            memcmp(zmq_msg_data(&workers[k].id), zmq_msg_data(&wid), zmq_msg_size(&wid)) == 0) {
                            workers[k].out--;
                            break;
                        }
                    }
                }
                zmq_msg_close(&wid);
                zmq_msg_init(&wid);
            }
            zmq_msg_close(&wid);
        }
        if (items[1].revents & ZMQ_POLLIN) {
            for (;;) {
                struct pending p;
                zmq_msg_init(&p.client);
                if (zmq_msg_recv(&p.client, front, ZMQ_DONTWAIT) < 0) { zmq_msg_close(&p.client); break; }
                zmq_msg_init(&p.body);
                zmq_msg_recv(&p.body, front, 0);
                drop_rest(front);
                *queue_push(&q) = p;
            }
        }
        /* Dispatch: the least loaded worker with credit left takes the oldest request. */
        while (q.len > 0) {
            int best = -1;
            for (int k = 0; k < nworkers; k++)
                if (workers[k].out < credit && (best < 0 || workers[k].out < workers[best].out)) best = k;
            if (best < 0) break;
            struct pending p = queue_pop(&q);
            zmq_msg_t id;
            zmq_msg_init(&id);
            zmq_msg_copy(&id, &workers[best].id);
            zmq_msg_send(&id, back, ZMQ_SNDMORE);
            zmq_msg_send(&p.client, back, ZMQ_SNDMORE);
            zmq_msg_send(&p.body, back, 0);
            workers[best].out++;
        }
    }
}

static char backend_endpoint[ENDPOINT_MAX];

static void worker_serve(void *arg, int report_fd) {
    (void)arg;
    void *ctx = zmq_ctx_new();
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    if (zmq_connect(dealer, backend_endpoint) != 0) die("worker connect");
    if (zmq_send(dealer, "READY", 5, 0) < 0) die("worker READY");
    if (write(report_fd, backend_endpoint, strlen(backend_endpoint)) < 0) die("write");
    close(report_fd);
    for (;;) { /* [client, body] -> the same back */
        zmq_msg_t client, body;
        zmq_msg_init(&client);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&client, dealer, 0) < 0) break;
        if (zmq_msg_recv(&body, dealer, 0) < 0) break;
        drop_rest(dealer);
        zmq_msg_send(&client, dealer, ZMQ_SNDMORE);
        zmq_msg_send(&body, dealer, 0);
    }
}

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s [-n N] [-i INFLIGHT] [-w WORKERS] [-k CREDIT] [-W WARMUP] [-c]\n", prog);
    exit(64);
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: %s [-n N] [-i INFLIGHT] [-w WORKERS] [-k CREDIT] [-W WARMUP] [-c]\n"
               "The broker's hops in raw libzmq: DEALER -> ROUTER|relay|ROUTER -> DEALER worker; prints one JSON line.\n"
               "-c: CURVE on the client-facing hop, as Quad's public frontend.\n", argv[0]);
        return 0;
    }
    long n = 100000, warmup = 2000;
    int inflight = 1, nworkers = 1, opt;
    while ((opt = getopt(argc, argv, "n:i:w:k:W:ch")) != -1) {
        switch (opt) {
        case 'n': n = atol(optarg); break;
        case 'i': inflight = atoi(optarg); break;
        case 'w': nworkers = atoi(optarg); break;
        case 'k': credit = atoi(optarg); break;
        case 'W': warmup = atol(optarg); break;
        case 'c': curve = 1; break;
        default: usage(argv[0]);
        }
    }
    if (optind != argc || n <= 0 || warmup < 0 || inflight < 1 || nworkers < 1 || nworkers > MAX_WORKERS || credit < 1)
        usage(argv[0]);

    if (curve && (zmq_curve_keypair(server_public, server_secret) != 0 || zmq_curve_keypair(client_public, client_secret) != 0))
        die("zmq_curve_keypair");
    char endpoints[ENDPOINT_MAX], ignored[ENDPOINT_MAX], frontend[ENDPOINT_MAX];
    pid_t relay = spawn(relay_serve, NULL, endpoints);
    if (sscanf(endpoints, "%255s %255s", frontend, backend_endpoint) != 2) {
        fprintf(stderr, "relay reported '%s'\n", endpoints);
        return 1;
    }
    pid_t workers[MAX_WORKERS];
    for (int k = 0; k < nworkers; k++) workers[k] = spawn(worker_serve, NULL, ignored);

    void *ctx = zmq_ctx_new();
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    if (curve && (zmq_setsockopt(dealer, ZMQ_CURVE_SERVERKEY, server_public, 40) != 0 ||
                  zmq_setsockopt(dealer, ZMQ_CURVE_PUBLICKEY, client_public, 40) != 0 ||
                  zmq_setsockopt(dealer, ZMQ_CURVE_SECRETKEY, client_secret, 40) != 0)) die("client CURVE");
    if (zmq_connect(dealer, frontend) != 0) die("zmq_connect");

    long total = n + warmup, sent = 0, received = 0;
    uint64_t *lat = malloc((size_t)n * sizeof *lat);
    if (!lat) die("malloc");
    unsigned char payload[PAYLOAD_BYTES], reply[PAYLOAD_BYTES * 2];
    memset(payload, 'q', sizeof payload);
    uint64_t started = now_ns();

    for (; sent < inflight && sent < total; sent++) {
        uint64_t t = now_ns();
        memcpy(payload, &t, sizeof t);
        if (zmq_send(dealer, payload, sizeof payload, 0) < 0) die("zmq_send");
    }
    while (received < total) {
        int len = zmq_recv(dealer, reply, sizeof reply, 0);
        if (len != PAYLOAD_BYTES) die("zmq_recv");
        uint64_t now = now_ns(), t;
        memcpy(&t, reply, sizeof t);
        if (received == warmup) started = now; /* throughput: from the first measured reply to the last */
        if (received >= warmup) lat[received - warmup] = now - t;
        received++;
        if (sent < total) {
            uint64_t s = now_ns();
            memcpy(payload, &s, sizeof s);
            if (zmq_send(dealer, payload, sizeof payload, 0) < 0) die("zmq_send");
            sent++;
        }
    }
    uint64_t elapsed = now_ns() - started;

    char extra[128];
    snprintf(extra, sizeof extra, ",\"inflight\":%d,\"workers\":%d,\"credit\":%d,\"curve\":%s", inflight, nworkers, credit, curve ? "true" : "false");
    report("raw_relay", lat, (size_t)n, elapsed, extra);

    zmq_close(dealer);
    zmq_ctx_term(ctx);
    for (int k = 0; k < nworkers; k++) stop(workers[k]);
    stop(relay);
    free(lat);
    return 0;
}
