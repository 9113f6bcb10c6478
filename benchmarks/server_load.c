/* A near-zero-cost AMPS publisher and subscriber in C, to measure the reference server.
 *
 *   server_load pub  tcp|ws PORT N TOPIC plain|seq    publish N messages, then wait for the
 *        flush's processed ack (plain) or for the persisted ack of sequence N (seq: the
 *        HAClient shape {"c":"p","s":N,"a":"persisted","t":"T"}). Prints
 *        "START_NS END_NS" (CLOCK_MONOTONIC) from the first publish to that ack.
 *   server_load sub  tcp|ws PORT N TOPIC [BOOKMARK]   subscribe (a bookmark subscription with
 *        BOOKMARK), print "ready" once the subscribe is acked, then count deliveries until
 *        N arrived and print "FIRST_NS LAST_NS". It checks every delivery: the body's "id"
 *        must be the previous one + 1 (no loss, no duplicate, publisher order), else it
 *        exits with status 3.
 *
 * Bodies are {"id":I,"sym":"IBM","px":101.5} with I = 1..N. ws: the AMPS WebSocket framing
 * (protocol.md §12): per command a 4-byte little-endian count message, the header, the body;
 * from the server one message per header and one per body. Loopback only. Built by
 * benchmarks/server_bench.py with the system's cc.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int fd, ws;
static char *in;
static size_t in_len, in_cap;
static long long want, got, last_id, persisted;
static int flushed, subscribed;
static long long first_ns, last_ns;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what) { perror(what); exit(1); }

/* ------------------------------------------------------------------ output */

static char *out;
static size_t out_len, out_cap;

static void reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 1 << 20;
    while (n < need) n *= 2;
    *buf = realloc(*buf, n);
    if (!*buf) die("realloc");
    *cap = n;
}

static void put(const void *p, size_t n) {
    reserve(&out, &out_cap, out_len + n);
    memcpy(out + out_len, p, n);
    out_len += n;
}

/* one WebSocket message from the client (masked with a zero key: XOR is the identity) */
static void ws_message(int opcode, const char *p, size_t n) {
    unsigned char h[14];
    size_t hl = 0;
    h[hl++] = (unsigned char)(0x80 | opcode);
    if (n < 126) h[hl++] = (unsigned char)(0x80 | n);
    else if (n < 65536) { h[hl++] = 0x80 | 126; h[hl++] = (unsigned char)(n >> 8); h[hl++] = (unsigned char)n; }
    else { h[hl++] = 0x80 | 127; for (int i = 7; i >= 0; i--) h[hl++] = (unsigned char)(n >> (8 * i)); }
    memset(h + hl, 0, 4);
    hl += 4;
    put(h, hl);
    put(p, n);
}

/* one AMPS command: header + optional body */
static void command(const char *hdr, size_t hl, const char *body, size_t bl) {
    if (ws) {
        unsigned char count[4] = {(unsigned char)(body ? 2 : 1), 0, 0, 0};
        ws_message(2, (const char *)count, 4);
        ws_message(1, hdr, hl);
        if (body) ws_message(1, body, bl);
        return;
    }
    size_t n = hl + bl;
    unsigned char pre[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n};
    put(pre, 4);
    put(hdr, hl);
    if (body) put(body, bl);
}

/* ------------------------------------------------------------------ input */

static void on_frame(const char *p, size_t n);

static long long field_int(const char *p, size_t n, const char *key) {
    const char *q = memmem(p, n, key, strlen(key));
    if (!q) return -1;
    q += strlen(key);
    if (*q == '"') q++;
    return atoll(q);
}

static int ws_expect_body; /* ws: the next message is the body of a delivery */

static void on_delivery_body(const char *p, size_t n) {
    long long id = field_int(p, n, "\"id\":");
    if (id != last_id + 1) {
        fprintf(stderr, "delivery %lld: id %lld after %lld\n", got + 1, id, last_id);
        exit(3);
    }
    last_id = id;
    if (++got == 1) first_ns = now_ns();
    if (got == want) last_ns = now_ns();
}

static void on_frame(const char *p, size_t n) {
    if (ws && ws_expect_body) { ws_expect_body = 0; on_delivery_body(p, n); return; }
    if (n > 8 && memcmp(p, "{\"c\":\"p\"", 8) == 0) {
        if (ws) { ws_expect_body = 1; return; }
        const char *b = memchr(p, '}', n);
        if (!b) { fprintf(stderr, "bad delivery\n"); exit(3); }
        on_delivery_body(b + 1, n - (size_t)(b + 1 - p));
        return;
    }
    if (n > 10 && memcmp(p, "{\"c\":\"ack\"", 10) == 0) {
        if (memmem(p, n, "\"a\":\"persisted\"", 15)) {
            long long s = field_int(p, n, "\"s\":");
            if (s > persisted) persisted = s;
        } else if (memmem(p, n, "\"cid\":\"flush\"", 13)) {
            flushed = 1;
        } else if (memmem(p, n, "\"cid\":\"sub\"", 11)) {
            subscribed = 1;
        } else if (memmem(p, n, "\"status\":\"failure\"", 18)) {
            fprintf(stderr, "failure: %.*s\n", (int)n, p);
            exit(4);
        }
    }
}

static size_t parse(void) {
    size_t pos = 0;
    for (;;) {
        const unsigned char *u = (const unsigned char *)in + pos;
        size_t avail = in_len - pos;
        if (!ws) {
            if (avail < 4) break;
            size_t n = ((size_t)u[0] << 24) | ((size_t)u[1] << 16) | ((size_t)u[2] << 8) | u[3];
            if (avail - 4 < n) break;
            on_frame(in + pos + 4, n);
            pos += 4 + n;
            continue;
        }
        if (avail < 2) break;
        size_t n = u[1] & 0x7f, hl = 2;
        if (n == 126) { if (avail < 4) break; n = ((size_t)u[2] << 8) | u[3]; hl = 4; }
        else if (n == 127) { if (avail < 10) break; n = 0; for (int i = 0; i < 8; i++) n = (n << 8) | u[2 + i]; hl = 10; }
        if (avail < hl + n) break;
        int op = u[0] & 0x0f;
        if (op == 1 || op == 2) on_frame(in + pos + hl, n);
        else if (op == 8) { fprintf(stderr, "closed by the server\n"); exit(5); }
        pos += hl + n;
    }
    return pos;
}

/* read what is there (block up to timeout ms when nothing is); 0 when the peer closed */
static void pump(int timeout) {
    struct pollfd p = {.fd = fd, .events = POLLIN | (out_len ? POLLOUT : 0)};
    if (poll(&p, 1, timeout) < 0 && errno != EINTR) die("poll");
    if (p.revents & POLLOUT && out_len) {
        ssize_t w = write(fd, out, out_len);
        if (w < 0 && errno != EAGAIN && errno != EINTR) die("write");
        if (w > 0) { memmove(out, out + w, out_len - (size_t)w); out_len -= (size_t)w; }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        reserve(&in, &in_cap, in_len + (1 << 20));
        ssize_t r = read(fd, in + in_len, in_cap - in_len);
        if (r == 0) { fprintf(stderr, "connection closed (%lld of %lld)\n", got, want); exit(5); }
        if (r < 0) { if (errno == EAGAIN || errno == EINTR) return; die("read"); }
        in_len += (size_t)r;
        size_t used = parse();
        memmove(in, in + used, in_len - used);
        in_len -= used;
    }
}

static void drain_out(void) { while (out_len) pump(-1); }

static void connect_logon(int port, const char *name) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (ws) {
        char req[512];
        int n = snprintf(req, sizeof req,
                         "GET /amps/json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n", port);
        if (write(fd, req, (size_t)n) != n) die("write");
        char resp[4096];
        size_t have = 0;
        while (!memmem(resp, have, "\r\n\r\n", 4)) {
            ssize_t r = read(fd, resp + have, sizeof resp - have);
            if (r <= 0) die("handshake");
            have += (size_t)r;
        }
        if (memcmp(resp, "HTTP/1.1 101", 12) != 0) { fprintf(stderr, "handshake: %.*s\n", (int)have, resp); exit(1); }
        char *end = (char *)memmem(resp, have, "\r\n\r\n", 4) + 4;
        reserve(&in, &in_cap, 1 << 20);
        in_len = have - (size_t)(end - resp);
        memcpy(in, end, in_len);
        ws_message(1, "text", 4);
    }
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "{\"c\":\"logon\",\"cid\":\"logon\",\"client_name\":\"%s\",\"a\":\"processed\",\"mt\":\"json\"}", name);
    command(hdr, (size_t)n, NULL, 0);
    drain_out();
}

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: server_load pub|sub tcp|ws PORT N TOPIC [plain|seq|BOOKMARK]\n"); return 2; }
    int sub = strcmp(argv[1], "sub") == 0;
    ws = strcmp(argv[2], "ws") == 0;
    int port = atoi(argv[3]);
    want = atoll(argv[4]);
    const char *topic = argv[5];
    const char *extra = argc > 6 ? argv[6] : "";
    char name[64];
    snprintf(name, sizeof name, "load-%s-%d", argv[1], (int)getpid());
    connect_logon(port, name);
    char hdr[512];
    int hl;
    if (sub) {
        if (extra[0]) hl = snprintf(hdr, sizeof hdr, "{\"c\":\"subscribe\",\"cid\":\"sub\",\"t\":\"%s\",\"sub_id\":\"s1\",\"a\":\"processed\",\"bm\":\"%s\"}", topic, extra);
        else hl = snprintf(hdr, sizeof hdr, "{\"c\":\"subscribe\",\"cid\":\"sub\",\"t\":\"%s\",\"sub_id\":\"s1\",\"a\":\"processed\"}", topic);
        command(hdr, (size_t)hl, NULL, 0);
        drain_out();
        while (!subscribed) pump(-1);
        printf("ready\n");
        fflush(stdout);
        while (got < want) pump(-1);
        printf("%lld %lld\n", first_ns, last_ns);
        return 0;
    }
    int seq = strcmp(extra, "seq") == 0;
    char body[128];
    long long start = now_ns();
    for (long long i = 1; i <= want; i++) {
        int bl = snprintf(body, sizeof body, "{\"id\":%lld,\"sym\":\"IBM\",\"px\":101.5}", i);
        if (seq) hl = snprintf(hdr, sizeof hdr, "{\"c\":\"p\",\"s\":%lld,\"a\":\"persisted\",\"t\":\"%s\"}", i, topic);
        else hl = snprintf(hdr, sizeof hdr, "{\"c\":\"p\",\"t\":\"%s\"}", topic);
        command(hdr, (size_t)hl, body, (size_t)bl);
        if (out_len >= 256 * 1024) while (out_len >= 64 * 1024) pump(-1);
    }
    if (!seq) {
        hl = snprintf(hdr, sizeof hdr, "{\"c\":\"flush\",\"cid\":\"flush\",\"a\":\"processed\"}");
        command(hdr, (size_t)hl, NULL, 0);
    }
    drain_out();
    if (seq) while (persisted < want) pump(-1);
    else while (!flushed) pump(-1);
    printf("%lld %lld\n", start, now_ns());
    return 0;
}
