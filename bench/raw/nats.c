/* nats: the peer a user would pick instead of Quad, measured with the same
 * payloads: request/reply and pub/sub through a running nats-server, with a
 * small client of NATS's text protocol on plain sockets (CONNECT, PUB, SUB,
 * MSG, PING/PONG; replies to an inbox subject, as NATS clients' request()
 * does). Client, responder (or subscriber) and nats-server are separate
 * processes, as Quad's client, broker and worker are.
 *
 *   nats -a HOST:PORT reqrep [-n N] [-i INFLIGHT] [-s BYTES] [-W WARMUP]
 *     a responder process subscribes to bench.req and answers each request
 *     with its payload; the client keeps INFLIGHT requests outstanding
 *     (default 1), each with reply subject _INBOX.bench.<client>. Prints
 *     {"bench":"nats_reqrep","inflight":..,"p50_us":..,"p99_us":..,"rps":..,"n":..}.
 *   nats -a HOST:PORT pubsub [-n N] [-s BYTES] [-t SUBJECT]
 *     a subscriber process subscribes to SUBJECT (default
 *     favorites.bench.event) and confirms with PING/PONG; then the client
 *     publishes N messages as fast as it can (writes batched to 64 KiB, as
 *     NATS clients buffer). Events per second at the subscriber, first to
 *     last: {"bench":"nats_pubsub","events_per_s":..,"bytes":..,"n":..}.
 *
 * With -T every connection speaks TLS (OpenSSL; the server's certificate is
 * not verified, as a benchmark of the cipher's cost, not of trust): the peer
 * with encryption, as Quad's public frontend has CURVE. nats-server sends
 * its INFO in plain text, then the client starts the handshake. The JSON
 * line then carries "tls":true.
 *
 * BYTES is the payload size (default 200, the relay's). The first 8 bytes
 * of a request carry its send time. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "nats: %s: %s\n", what, errno ? strerror(errno) : "failed");
    exit(1);
}

/* -T: speak TLS to nats-server. */
static int tls = 0;

/* One connection to nats-server with a read buffer (messages are parsed in
 * place) and a write buffer (flushed by nc_flush). */
struct conn {
    int fd;
    SSL *ssl; /* with -T: every read and write goes through it */
    char *in;
    size_t in_cap, in_len, in_pos;
    char *out;
    size_t out_cap, out_len;
};

/* A MSG as received: pointers into the read buffer, valid until the next nc_next. */
struct msg {
    const char *subject, *reply;
    size_t subject_len, reply_len;
    const char *data;
    size_t len;
};

static void nc_write_all(struct conn *c, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w;
        if (c->ssl) {
            int k = SSL_write(c->ssl, p, (int)(n > 1 << 30 ? 1 << 30 : n));
            if (k <= 0) { ERR_print_errors_fp(stderr); errno = 0; die("SSL_write"); }
            w = k;
        } else {
            w = write(c->fd, p, n);
        }
        if (w < 0) {
            if (errno == EINTR) continue;
            die("write");
        }
        p += w;
        n -= (size_t)w;
    }
}

static void nc_flush(struct conn *c) {
    nc_write_all(c, c->out, c->out_len);
    c->out_len = 0;
}

static void nc_put(struct conn *c, const char *p, size_t n) {
    if (c->out_len + n > c->out_cap) nc_flush(c);
    if (n > c->out_cap) {
        nc_write_all(c, p, n);
        return;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

/* PUB subject [reply] len\r\npayload\r\n into the write buffer. */
static void nc_pub(struct conn *c, const char *subject, const char *reply, const void *data, size_t len) {
    char head[512];
    int h = reply ? snprintf(head, sizeof head, "PUB %s %s %zu\r\n", subject, reply, len)
                  : snprintf(head, sizeof head, "PUB %s %zu\r\n", subject, len);
    nc_put(c, head, (size_t)h);
    nc_put(c, data, len);
    nc_put(c, "\r\n", 2);
}

/* Reads more into the buffer (compacting it first); dies on EOF. */
static void nc_fill(struct conn *c) {
    if (c->in_pos > 0) {
        memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
        c->in_len -= c->in_pos;
        c->in_pos = 0;
    }
    if (c->in_len == c->in_cap) {
        c->in_cap *= 2;
        c->in = realloc(c->in, c->in_cap);
        if (!c->in) die("realloc");
    }
    ssize_t r;
    if (c->ssl) {
        int k = SSL_read(c->ssl, c->in + c->in_len, (int)(c->in_cap - c->in_len > 1 << 30 ? 1 << 30 : c->in_cap - c->in_len));
        if (k <= 0 && SSL_get_error(c->ssl, k) != SSL_ERROR_ZERO_RETURN) { ERR_print_errors_fp(stderr); errno = 0; die("SSL_read"); }
        r = k < 0 ? 0 : k;
    } else {
        do r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len); while (r < 0 && errno == EINTR);
    }
    if (r < 0) die("read");
    if (r == 0) { errno = 0; die("nats-server closed the connection"); }
    c->in_len += (size_t)r;
}

/* The next MSG (returns 1); answers PING, skips INFO and +OK, dies on -ERR.
 * A PONG returns 0 and counts in *pong when pong is given (else skipped).
 * With block 0, returns 0 when no whole message is buffered. */
static int nc_next(struct conn *c, struct msg *m, int block, int *pong) {
    for (;;) {
        char *start = c->in + c->in_pos, *end = c->in + c->in_len;
        char *eol = memmem(start, (size_t)(end - start), "\r\n", 2);
        if (eol) {
            size_t line = (size_t)(eol - start);
            if (line >= 4 && memcmp(start, "MSG ", 4) == 0) {
                /* MSG <subject> <sid> [reply-to] <#bytes> */
                char *f[5];
                size_t fl[5];
                int nf = 0;
                char *p = start + 4;
                while (p < eol && nf < 5) {
                    while (p < eol && *p == ' ') p++;
                    if (p >= eol) break;
                    f[nf] = p;
                    while (p < eol && *p != ' ') p++;
                    fl[nf] = (size_t)(p - f[nf]);
                    nf++;
                }
                if (nf != 3 && nf != 4) { errno = 0; die("malformed MSG line"); }
                size_t len = strtoul(f[nf - 1], NULL, 10);
                if ((size_t)(end - (eol + 2)) < len + 2) {
                    if (!block) return 0;
                    nc_fill(c);
                    continue;
                }
                m->subject = f[0];
                m->subject_len = fl[0];
                m->reply = nf == 4 ? f[2] : NULL;
                m->reply_len = nf == 4 ? fl[2] : 0;
                m->data = eol + 2;
                m->len = len;
                c->in_pos = (size_t)(eol + 2 + len + 2 - c->in);
                return 1;
            }
            if (line >= 4 && memcmp(start, "PING", 4) == 0) {
                nc_put(c, "PONG\r\n", 6);
                nc_flush(c);
            } else if (line >= 4 && memcmp(start, "PONG", 4) == 0) {
                c->in_pos += line + 2;
                if (pong) {
                    (*pong)++;
                    return 0; /* the caller waits for this PONG */
                }
                continue;
            } else if (line >= 4 && memcmp(start, "-ERR", 4) == 0) {
                fprintf(stderr, "nats: server said %.*s\n", (int)line, start);
                exit(1);
            }
            c->in_pos += line + 2;
            continue;
        }
        if (!block) return 0;
        nc_fill(c);
    }
}

/* Connects, reads INFO, sends CONNECT (no verbose +OK), waits for a PONG. */
static void nc_connect(struct conn *c, const char *address) {
    char host[256];
    const char *colon = strrchr(address, ':');
    if (!colon || (size_t)(colon - address) >= sizeof host) { fprintf(stderr, "nats: -a must be HOST:PORT, got '%s'\n", address); exit(64); }
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = 0;
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) { fprintf(stderr, "nats: cannot resolve %s\n", address); exit(1); }
    c->fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (c->fd < 0) die("socket");
    if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) != 0) die("connect");
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->in_cap = 1 << 16;
    c->in = malloc(c->in_cap);
    c->out_cap = 1 << 16;
    c->out = malloc(c->out_cap);
    c->in_len = c->in_pos = c->out_len = 0;
    c->ssl = NULL;
    if (!c->in || !c->out) die("malloc");
    /* INFO comes first, in plain text; with TLS the handshake follows it. */
    while (!memmem(c->in, c->in_len, "\r\n", 2)) nc_fill(c);
    int required = memmem(c->in, c->in_len, "\"tls_required\":true", 19) != NULL;
    if (required && !tls) { errno = 0; die("nats-server requires TLS: pass -T"); }
    if (tls && !required) { errno = 0; die("-T, but nats-server does not offer TLS (no tls block in its config?)"); }
    if (tls) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx) die("SSL_CTX_new");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        c->ssl = SSL_new(ctx);
        if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) die("SSL_new");
        if (SSL_connect(c->ssl) != 1) { ERR_print_errors_fp(stderr); errno = 0; die("TLS handshake with nats-server"); }
    }
    const char *hello = "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"quad-bench\",\"lang\":\"c\",\"version\":\"1\",\"protocol\":1}\r\nPING\r\n";
    nc_put(c, hello, strlen(hello));
    nc_flush(c);
    int pong = 0;
    struct msg m;
    while (!pong) nc_next(c, &m, 1, &pong);
}

/* Sends PING and waits for its PONG: every command before it was processed. */
static void nc_sync(struct conn *c) {
    int pong = 0;
    struct msg m;
    nc_put(c, "PING\r\n", 6);
    nc_flush(c);
    while (!pong)
        if (nc_next(c, &m, 1, &pong)) { errno = 0; die("a MSG before the PONG"); }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double quantile_us(const uint64_t *sorted, size_t n, double q) {
    size_t k = (size_t)(q * (double)n + 0.5);
    if (k >= 1) k -= 1;
    if (k >= n) k = n - 1;
    return (double)sorted[k] / 1000.0;
}

/* Forks a child that runs body(); the child writes one byte to the pipe when
 * ready, and dies with the parent. Returns once the child is ready. */
static pid_t spawn_ready(void (*body)(int ready_fd, void *arg), void *arg, int *result_fd) {
    int ready[2], result[2];
    if (pipe(ready) != 0 || pipe(result) != 0) die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ready[0]);
        close(result[0]);
        if (dup2(result[1], 3) < 0) die("dup2");
        body(ready[1], arg);
        _exit(0);
    }
    close(ready[1]);
    close(result[1]);
    char b;
    if (read(ready[0], &b, 1) != 1) { fprintf(stderr, "nats: child %d did not get ready\n", (int)pid); exit(1); }
    close(ready[0]);
    *result_fd = result[0];
    return pid;
}

static const char *address = "127.0.0.1:4222";
static long n = 20000, warmup = 2000;
static int inflight = 1;
static size_t bytes = 200;
static const char *subject = "favorites.bench.event";

static void responder(int ready_fd, void *arg) {
    (void)arg;
    struct conn c;
    nc_connect(&c, address);
    nc_put(&c, "SUB bench.req 1\r\n", 17);
    nc_sync(&c);
    if (write(ready_fd, "r", 1) != 1) die("write ready");
    close(ready_fd);
    struct msg m;
    char reply[256];
    for (;;) {
        nc_next(&c, &m, 1, NULL);
        /* Answer every request already buffered, then flush once. */
        do {
            if (!m.reply || m.reply_len >= sizeof reply) continue;
            memcpy(reply, m.reply, m.reply_len);
            reply[m.reply_len] = 0;
            nc_pub(&c, reply, NULL, m.data, m.len);
        } while (nc_next(&c, &m, 0, NULL));
        nc_flush(&c);
    }
}

static int reqrep(void) {
    int ignored;
    pid_t child = spawn_ready(responder, NULL, &ignored);
    struct conn c;
    nc_connect(&c, address);
    char inbox[64];
    snprintf(inbox, sizeof inbox, "_INBOX.bench.%d", (int)getpid());
    char sub[128];
    int sl = snprintf(sub, sizeof sub, "SUB %s 1\r\n", inbox);
    nc_put(&c, sub, (size_t)sl);
    nc_sync(&c);

    long total = n + warmup, sent = 0, received = 0;
    uint64_t *lat = malloc((size_t)n * sizeof *lat);
    unsigned char *payload = malloc(bytes < 8 ? 8 : bytes);
    if (!lat || !payload) die("malloc");
    memset(payload, 'q', bytes < 8 ? 8 : bytes);
    uint64_t started = now_ns();
    for (; sent < inflight && sent < total; sent++) {
        uint64_t t = now_ns();
        memcpy(payload, &t, sizeof t);
        nc_pub(&c, "bench.req", inbox, payload, bytes);
    }
    nc_flush(&c);
    struct msg m;
    while (received < total) {
        nc_next(&c, &m, 1, NULL);
        do {
            if (m.len != bytes) { errno = 0; die("a reply of another size"); }
            uint64_t now = now_ns(), t;
            memcpy(&t, m.data, sizeof t);
            if (received == warmup) started = now;
            if (received >= warmup) lat[received - warmup] = now - t;
            received++;
            if (sent < total) {
                uint64_t s = now_ns();
                memcpy(payload, &s, sizeof s);
                nc_pub(&c, "bench.req", inbox, payload, bytes);
                sent++;
            }
        } while (received < total && nc_next(&c, &m, 0, NULL));
        nc_flush(&c);
    }
    uint64_t elapsed = now_ns() - started;
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    printf("{\"bench\":\"nats_reqrep\",\"tls\":%s,\"inflight\":%d,\"bytes\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"rps\":%.0f,\"n\":%ld}\n", tls ? "true" : "false", inflight, bytes,
           quantile_us(lat, (size_t)n, 0.5), quantile_us(lat, (size_t)n, 0.99), (double)n * 1e9 / (double)elapsed, n);
    fflush(stdout);
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    return 0;
}

static void subscriber(int ready_fd, void *arg) {
    (void)arg;
    struct conn c;
    nc_connect(&c, address);
    char sub[300];
    int sl = snprintf(sub, sizeof sub, "SUB %s 1\r\n", subject);
    nc_put(&c, sub, (size_t)sl);
    nc_sync(&c);
    if (write(ready_fd, "r", 1) != 1) die("write ready");
    close(ready_fd);
    struct msg m;
    long got = 0;
    uint64_t first = 0, last = 0;
    while (got < n) {
        nc_next(&c, &m, 1, NULL);
        last = now_ns();
        if (got == 0) first = last;
        got++;
    }
    char line[128];
    int l = snprintf(line, sizeof line, "%llu", (unsigned long long)(last - first));
    if (write(3, line, (size_t)l) != l) die("write result");
}

static int pubsub(void) {
    int result;
    pid_t child = spawn_ready(subscriber, NULL, &result);
    struct conn c;
    nc_connect(&c, address);
    unsigned char *payload = malloc(bytes);
    if (!payload) die("malloc");
    memset(payload, 'e', bytes);
    for (long k = 0; k < n; k++) nc_pub(&c, subject, NULL, payload, bytes);
    nc_flush(&c);
    char line[128] = {0};
    ssize_t r = read(result, line, sizeof line - 1);
    if (r <= 0) { fprintf(stderr, "nats: the subscriber reported nothing (slow consumer dropped?)\n"); return 1; }
    waitpid(child, NULL, 0);
    double seconds = (double)strtoull(line, NULL, 10) / 1e9;
    printf("{\"bench\":\"nats_pubsub\",\"tls\":%s,\"bytes\":%zu,\"subject\":\"%s\",\"seconds\":%.3f,\"events_per_s\":%.0f,\"n\":%ld}\n", tls ? "true" : "false", bytes, subject,
           seconds, seconds > 0 ? (double)(n - 1) / seconds : 0.0, n);
    fflush(stdout);
    return 0;
}

static void usage(FILE *to, const char *prog, int status) {
    fprintf(to, "usage: %s [-a HOST:PORT] [-T] reqrep [-n N] [-i INFLIGHT] [-s BYTES] [-W WARMUP]\n"
                "       %s [-a HOST:PORT] [-T] pubsub [-n N] [-s BYTES] [-t SUBJECT]\n"
                "NATS request/reply and pub/sub through a running nats-server (default 127.0.0.1:4222); prints one JSON line.\n"
                "-T speaks TLS (the server's certificate is not verified).\n",
            prog, prog);
    exit(status);
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) usage(stdout, argv[0], 0);
    signal(SIGPIPE, SIG_IGN);
    int opt;
    const char *mode = NULL;
    /* Options before and after the mode word. */
    while (optind < argc) {
        if ((opt = getopt(argc, argv, "+a:n:i:s:W:t:Th")) == -1) {
            if (mode) usage(stderr, argv[0], 64);
            mode = argv[optind++];
            continue;
        }
        switch (opt) {
        case 'a': address = optarg; break;
        case 'n': n = atol(optarg); break;
        case 'i': inflight = atoi(optarg); break;
        case 's': bytes = strtoul(optarg, NULL, 10); break;
        case 'W': warmup = atol(optarg); break;
        case 't': subject = optarg; break;
        case 'T': tls = 1; break;
        default: usage(stderr, argv[0], 64);
        }
    }
    if (!mode || n < 2 || warmup < 0 || inflight < 1 || bytes < 8 || bytes > 1 << 20 || strlen(subject) > 200) usage(stderr, argv[0], 64);
    if (strcmp(mode, "reqrep") == 0) return reqrep();
    if (strcmp(mode, "pubsub") == 0) return pubsub();
    usage(stderr, argv[0], 64);
}
