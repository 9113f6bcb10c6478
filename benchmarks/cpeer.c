/* A minimal AMPS peer in C for client benchmarks: it costs far less than the clients it measures.
 *
 *   cpeer sink          acks logon/flush/subscribe (processed, cid echoed); conflates persisted
 *                       acks ("s" = highest publish sequence seen) over 1 ms, and sends the
 *                       pending one before a flush's ack.
 *   cpeer pump COUNT    as sink, and answers a subscribe with COUNT deliveries
 *                       {"c":"p","t":T,"sids":SUB,"bm":"12345|i|"}BODY as fast as the socket
 *                       takes them.
 *
 * It prints its port on stdout and serves until stdin closes. Loopback only. Built by
 * benchmarks/cpeer.py with the system's cc; the Python twin is benchmarks/sink.py.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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

#define MAXCONN 16
#define CHUNK 5000
static const char BODY[] = "{\"id\":1,\"sym\":\"IBM\",\"px\":101.5}";

typedef struct {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
    long long top;          /* highest publish sequence not acked yet, -1: none */
    double top_since;       /* when top became pending */
    long long pump_next, pump_end;
    char sub[128], topic[256];
} conn_t;

static conn_t conns[MAXCONN];
static long long pump_count;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 65536;
    while (n < need) n *= 2;
    *buf = realloc(*buf, n);
    if (!*buf) { perror("realloc"); exit(1); }
    *cap = n;
}

static void out_append(conn_t *c, const char *data, size_t len) {
    reserve(&c->out, &c->out_cap, c->out_len + len);
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
}

/* frame a header (no body) */
static void send_header(conn_t *c, const char *hdr, size_t len) {
    unsigned char pre[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
                            (unsigned char)(len >> 8), (unsigned char)len};
    out_append(c, (const char *)pre, 4);
    out_append(c, hdr, len);
}

/* the value of "key":"..." (or a bare number) in the header [p, end) */
static int field(const char *p, const char *end, const char *key, char *val, size_t cap) {
    size_t klen = strlen(key);
    const char *q = p;
    while ((q = memmem(q, (size_t)(end - q), key, klen)) != NULL) {
        if (q > p && (q[-1] == '{' || q[-1] == ',')) {
            q += klen;
            size_t n = 0;
            if (q < end && *q == '"') {
                q++;
                while (q < end && *q != '"' && n + 1 < cap) val[n++] = *q++;
            } else {
                while (q < end && *q >= '0' && *q <= '9' && n + 1 < cap) val[n++] = *q++;
            }
            val[n] = 0;
            return 1;
        }
        q += klen;
    }
    return 0;
}

static void persisted_ack(conn_t *c) {
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{\"c\":\"ack\",\"a\":\"persisted\",\"s\":%lld,\"status\":\"success\"}", c->top);
    send_header(c, hdr, (size_t)n);
    c->top = -1;
}

static void command(conn_t *c, const char *p, size_t len) {
    const char *end = p + (len < 512 ? len : 512);
    char cmd[32], cid[128], name[256], sub[128], topic[256];
    if (!field(p, end, "\"c\":", cmd, sizeof cmd)) return;
    if (!field(p, end, "\"cid\":", cid, sizeof cid)) return;
    char hdr[1024];
    int n;
    if (strcmp(cmd, "logon") == 0) {
        if (!field(p, end, "\"client_name\":", name, sizeof name)) name[0] = 0;
        n = snprintf(hdr, sizeof hdr,
                     "{\"c\":\"ack\",\"cid\":\"%s\",\"a\":\"processed\",\"status\":\"success\",\"s\":0,"
                     "\"client_name\":\"%s\",\"version\":\"5.3.5.0\"}", cid, name);
    } else if (strcmp(cmd, "flush") == 0) {
        if (c->top >= 0) persisted_ack(c);
        n = snprintf(hdr, sizeof hdr,
                     "{\"c\":\"ack\",\"cid\":\"%s\",\"a\":\"processed\",\"status\":\"success\"}", cid);
    } else if (strcmp(cmd, "subscribe") == 0) {
        if (!field(p, end, "\"sub_id\":", sub, sizeof sub)) snprintf(sub, sizeof sub, "%s", cid);
        if (!field(p, end, "\"t\":", topic, sizeof topic)) snprintf(topic, sizeof topic, "t");
        n = snprintf(hdr, sizeof hdr,
                     "{\"c\":\"ack\",\"cid\":\"%s\",\"a\":\"processed\",\"status\":\"success\","
                     "\"sub_id\":\"%s\"}", cid, sub);
        if (pump_count > 0) {
            snprintf(c->sub, sizeof c->sub, "%s", sub);
            snprintf(c->topic, sizeof c->topic, "%s", topic);
            c->pump_next = 1;
            c->pump_end = pump_count + 1;
        }
    } else {
        return;
    }
    send_header(c, hdr, (size_t)n);
}

static void frames(conn_t *c) {
    size_t pos = 0;
    const char *last_pub = NULL;
    size_t last_len = 0;
    while (c->in_len - pos >= 4) {
        const unsigned char *u = (const unsigned char *)c->in + pos;
        size_t n = ((size_t)u[0] << 24) | ((size_t)u[1] << 16) | ((size_t)u[2] << 8) | u[3];
        if (c->in_len - pos - 4 < n) break;
        const char *payload = c->in + pos + 4;
        if (n >= 8 && memcmp(payload, "{\"c\":\"p\"", 8) == 0) {
            last_pub = payload;
            last_len = n;
        } else {
            command(c, payload, n);
        }
        pos += 4 + n;
    }
    if (last_pub) {
        char s[32];
        const char *end = last_pub + (last_len < 256 ? last_len : 256);
        if (field(last_pub, end, "\"s\":", s, sizeof s) && s[0]) {
            long long v = atoll(s);
            if (c->top < 0) c->top_since = now();
            if (v > c->top) c->top = v;
        }
    }
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
}

static char *itoa_ll(char *p, long long v) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

/* the next CHUNK deliveries into the output buffer */
static void pump_chunk(conn_t *c) {
    char head[512];
    int hl = snprintf(head, sizeof head, "{\"c\":\"p\",\"t\":\"%s\",\"sids\":\"%s\",\"bm\":\"12345|",
                      c->topic, c->sub);
    size_t body = sizeof BODY - 1;
    long long stop = c->pump_next + CHUNK;
    if (stop > c->pump_end) stop = c->pump_end;
    reserve(&c->out, &c->out_cap, c->out_len + (size_t)(stop - c->pump_next) * (4 + hl + 24 + body));
    char *w = c->out + c->out_len;
    for (long long i = c->pump_next; i < stop; i++) {
        char *start = w;
        w += 4;
        memcpy(w, head, (size_t)hl);
        w += hl;
        w = itoa_ll(w, i);
        memcpy(w, "|\"}", 3);
        w += 3;
        memcpy(w, BODY, body);
        w += body;
        size_t n = (size_t)(w - start - 4);
        start[0] = (char)(n >> 24); start[1] = (char)(n >> 16);
        start[2] = (char)(n >> 8); start[3] = (char)n;
    }
    c->out_len = (size_t)(w - c->out);
    c->pump_next = stop;
}

static void drop(conn_t *c) {
    close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: cpeer sink|pump [COUNT]\n"); return 2; }
    pump_count = (strcmp(argv[1], "pump") == 0 && argc > 2) ? atoll(argv[2]) : 0;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 16)) { perror("listen"); return 1; }
    socklen_t alen = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    printf("%d\n", ntohs(addr.sin_port));
    fflush(stdout);
    for (int i = 0; i < MAXCONN; i++) conns[i].fd = -1;
    struct pollfd pfd[MAXCONN + 2];
    for (;;) {
        int np = 0;
        pfd[np++] = (struct pollfd){.fd = 0, .events = POLLIN};
        pfd[np++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        int map[MAXCONN];
        int timeout = -1;
        for (int i = 0; i < MAXCONN; i++) {
            conn_t *c = &conns[i];
            if (c->fd < 0) continue;
            short ev = POLLIN;
            if (c->out_len > c->out_off || c->pump_next < c->pump_end) ev |= POLLOUT;
            if (c->top >= 0) timeout = 1;
            map[np - 2] = i;
            pfd[np++] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        if (poll(pfd, (nfds_t)np, timeout) < 0 && errno != EINTR) { perror("poll"); return 1; }
        if (pfd[0].revents) {
            char b[64];
            if (read(0, b, sizeof b) <= 0) return 0; /* the parent closed stdin */
        }
        if (pfd[1].revents & POLLIN) {
            int fd = accept(lfd, NULL, NULL);
            if (fd >= 0) {
                int slot = -1;
                for (int i = 0; i < MAXCONN; i++) if (conns[i].fd < 0) { slot = i; break; }
                if (slot < 0) close(fd);
                else {
                    fcntl(fd, F_SETFL, O_NONBLOCK);
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    memset(&conns[slot], 0, sizeof conns[slot]);
                    conns[slot].fd = fd;
                    conns[slot].top = -1;
                }
            }
        }
        double t = now();
        for (int k = 2; k < np; k++) {
            conn_t *c = &conns[map[k - 2]];
            if (c->fd < 0) continue;
            if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                for (;;) {
                    reserve(&c->in, &c->in_cap, c->in_len + 262144);
                    ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
                    if (r > 0) { c->in_len += (size_t)r; continue; }
                    if (r == 0 || (errno != EAGAIN && errno != EINTR)) { drop(c); break; }
                    break;
                }
                if (c->fd < 0) continue;
                frames(c);
            }
            if (c->top >= 0 && t - c->top_since >= 0.001) persisted_ack(c);
            for (;;) {
                if (c->out_off == c->out_len) {
                    c->out_off = c->out_len = 0;
                    if (c->pump_next < c->pump_end) pump_chunk(c);
                    else break;
                }
                ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
                if (w > 0) { c->out_off += (size_t)w; continue; }
                if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
                drop(c);
                break;
            }
        }
    }
}
