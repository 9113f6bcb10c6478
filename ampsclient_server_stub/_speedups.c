/* Optional C versions of the reference server's per-message loops.
 *
 * Each function here has one pure-Python twin that is the reference (see
 * ampsclient_server_stub/accel.py, which picks one or the other; AMPSCLIENT_PUREPYTHON=1
 * forces the Python ones). tests/server/test_server_speedups.py runs both on the same cases.
 *
 *   scan_publishes  the run of fast-shaped publishes in one read (wire.scan_publishes)
 *   delivery_frames the delivery frames of a run for one connection (wire.delivery_frames)
 *   frame_join      length-prefixed TCP framing of a list of payloads (net.tcp.frame_join)
 *   replay_frames   delivery frames straight from a block of journal records
 *                   (wire.replay_frames)
 *   ws_client_frames the data messages of a client's WebSocket frames (net.ws.client_frames)
 *   ws_server_frames the WebSocket frames of a list of deliveries (net.ws.server_frames)
 *   ws_commands     AMPS commands from a client's WebSocket messages (net.ws.ws_commands)
 *   ws_client_commands AMPS commands straight from a client's WebSocket bytes
 *                   (net.ws.client_commands)
 *   journal_frames  journal records of a run of publishes, CRC'd, appended to the journal's
 *                   buffer (engine.journal_append.journal_frames)
 *
 * Nothing here touches server state: inputs and outputs are lists, tuples, bytes and str.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#include <stdlib.h>
#include <zlib.h>

static const char PLAIN[] = "{\"c\":\"p\",\"t\":\"";              /* 14 */
static const char SEQ[] = "{\"c\":\"p\",\"s\":";                    /* 13 */
static const char SEQ_MID[] = ",\"a\":\"persisted\",\"t\":\"";     /* 22 */
static const char SEQ_T_MID[] = "\",\"a\":\"persisted\",\"s\":";   /* 22 */
#define PLAIN_LEN 14
#define SEQ_LEN 13
#define MID_LEN 22

static const char *find_byte(const char *p, const char *end, char c) {
    return p < end ? memchr(p, c, (size_t)(end - p)) : NULL;
}

static int all_digits(const char *p, const char *end) {
    if (p >= end) return 0;
    for (; p < end; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

/* the digits [p, end) as a value, -1 above LLONG_MAX */
static long long to_ll(const char *p, const char *end) {
    long long v = 0;
    for (; p < end; p++) {
        int d = *p - '0';
        if (v > (LLONG_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    return v;
}

/* One publish of the shapes parse_plain_publish / parse_seq_publish take (wire.py).
 * Sets topic [*t0, *t1), *seq (-1 for plain) and *body; 0 when it is not such a publish, or
 * one this function leaves to Python (a sequence above LLONG_MAX). */
static int parse_one(const char *p, Py_ssize_t n, int plain, const char **t0, const char **t1,
                     long long *seq, Py_ssize_t *body) {
    const char *end = p + n;
    if (n < PLAIN_LEN) return 0;
    if (plain) {
        if (memcmp(p, PLAIN, PLAIN_LEN) != 0) return 0;
        const char *j = find_byte(p + PLAIN_LEN, end, '"');
        if (!j || j == p + PLAIN_LEN || j + 1 >= end || j[1] != '}') return 0;
        if (memchr(p + PLAIN_LEN, '\\', (size_t)(j - p - PLAIN_LEN))) return 0;
        *t0 = p + PLAIN_LEN; *t1 = j; *seq = -1; *body = (j - p) + 2;
        return 1;
    }
    if (memcmp(p, PLAIN, PLAIN_LEN) == 0) { /* {"c":"p","t":"T","a":"persisted","s":N} */
        const char *j = find_byte(p + PLAIN_LEN, end, '"');
        if (!j || j == p + PLAIN_LEN) return 0;
        if (end - j < MID_LEN || memcmp(j, SEQ_T_MID, MID_LEN) != 0) return 0;
        const char *k = j + MID_LEN;
        const char *lim = k + 21 < end ? k + 21 : end;
        const char *e = find_byte(k, lim, '}');
        if (!e || e == k || !all_digits(k, e)) return 0;
        if (memchr(p, '\\', (size_t)(j - p))) return 0;
        if ((*seq = to_ll(k, e)) < 0) return 0;
        *t0 = p + PLAIN_LEN; *t1 = j; *body = (e - p) + 1;
        return 1;
    }
    if (memcmp(p, SEQ, SEQ_LEN) != 0) return 0; /* {"c":"p","s":N,"a":"persisted","t":"T"} */
    const char *lim = p + SEQ_LEN + 21 + MID_LEN < end ? p + SEQ_LEN + 21 + MID_LEN : end;
    const char *i = p + SEQ_LEN;
    const char *found = NULL;
    for (; i + MID_LEN <= lim; i++)
        if (*i == ',' && memcmp(i, SEQ_MID, MID_LEN) == 0) { found = i; break; }
    if (!found) return 0;
    const char *ts = found + MID_LEN;
    const char *j = find_byte(ts, end, '"');
    if (!j || j == ts || j + 1 >= end || j[1] != '}') return 0;
    if (!all_digits(p + SEQ_LEN, found)) return 0;
    if (memchr(ts, '\\', (size_t)(j - ts))) return 0;
    if ((*seq = to_ll(p + SEQ_LEN, found)) < 0) return 0;
    *t0 = ts; *t1 = j; *body = (j - p) + 2;
    return 1;
}

PyDoc_STRVAR(scan_publishes_doc,
"scan_publishes(payloads, start, plain, last_seq, topics) -> (end, batch)\n\n"
"The publishes at payloads[start:] that can be batched: fast-shaped (plain, or sequenced\n"
"when not plain), sequence above the previous one, topic a key of `topics`. batch holds\n"
"(sequence, topic, body) per publish (plain ones numbered from last_seq + 1); end is the\n"
"index of the first payload not taken.");

static PyObject *scan_publishes(PyObject *self, PyObject *args) {
    PyObject *payloads, *topics;
    Py_ssize_t start;
    int plain;
    long long last_seq;
    if (!PyArg_ParseTuple(args, "O!npLO!", &PyList_Type, &payloads, &start, &plain, &last_seq,
                          &PyDict_Type, &topics))
        return NULL;
    PyObject *batch = PyList_New(0);
    if (!batch) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(payloads), i = start < 0 ? 0 : start;
    PyObject *topic = NULL; /* the last topic (owned); ltp/ltn: its bytes in a payload */
    const char *ltp = NULL;
    Py_ssize_t ltn = 0;
    for (; i < n; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        if (!PyBytes_CheckExact(payload)) break;
        const char *p = PyBytes_AS_STRING(payload);
        const char *t0, *t1;
        long long seq;
        Py_ssize_t body;
        if (!parse_one(p, PyBytes_GET_SIZE(payload), plain, &t0, &t1, &seq, &body)) break;
        Py_ssize_t tn = t1 - t0;
        if (!(topic && tn == ltn && memcmp(t0, ltp, (size_t)tn) == 0)) {
            PyObject *s = PyUnicode_DecodeUTF8(t0, tn, NULL);
            if (!s) { PyErr_Clear(); break; }
            PyObject *known = PyDict_GetItemWithError(topics, s); /* borrowed */
            if (!known) {
                Py_DECREF(s);
                if (PyErr_Occurred()) goto error;
                break;
            }
            Py_XSETREF(topic, s);
            ltp = t0;
            ltn = tn;
        }
        if (seq < 0) seq = last_seq + 1;
        else if (seq <= last_seq) break;
        PyObject *item = PyTuple_New(3);
        if (!item) goto error;
        PyObject *sq = PyLong_FromLongLong(seq);
        PyObject *bd = PyBytes_FromStringAndSize(p + body, PyBytes_GET_SIZE(payload) - body);
        if (!sq || !bd) { Py_XDECREF(sq); Py_XDECREF(bd); Py_DECREF(item); goto error; }
        Py_INCREF(topic);
        PyTuple_SET_ITEM(item, 0, sq);
        PyTuple_SET_ITEM(item, 1, topic);
        PyTuple_SET_ITEM(item, 2, bd);
        int rc = PyList_Append(batch, item);
        Py_DECREF(item);
        if (rc < 0) goto error;
        last_seq = seq;
    }
    Py_XDECREF(topic);
    return Py_BuildValue("(nN)", i, batch);
error:
    Py_XDECREF(topic);
    Py_DECREF(batch);
    return NULL;
}

PyDoc_STRVAR(delivery_frames_doc,
"delivery_frames(head, batch) -> list[bytes]\n\n"
"head + b'%d|\"}' % sequence + body for each (sequence, topic, body) of batch.");

static char *put_ll(char *w, long long v) {
    char tmp[24];
    int k = 0;
    unsigned long long u = v < 0 ? (unsigned long long)(-v) : (unsigned long long)v;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) *w++ = '-';
    while (k) *w++ = tmp[--k];
    return w;
}

static PyObject *delivery_frames(PyObject *self, PyObject *args) {
    const char *head;
    Py_ssize_t hl;
    PyObject *batch;
    if (!PyArg_ParseTuple(args, "y#O!", &head, &hl, &PyList_Type, &batch)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(batch);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) goto bad;
        PyObject *seqo = PyTuple_GET_ITEM(item, 0), *data = PyTuple_GET_ITEM(item, 2);
        if (!PyBytes_Check(data)) goto bad;
        long long seq = PyLong_AsLongLong(seqo);
        if (seq == -1 && PyErr_Occurred()) { Py_DECREF(out); return NULL; }
        char digits[24];
        Py_ssize_t dl = put_ll(digits, seq) - digits, bl = PyBytes_GET_SIZE(data);
        PyObject *frame = PyBytes_FromStringAndSize(NULL, hl + dl + 3 + bl);
        if (!frame) { Py_DECREF(out); return NULL; }
        char *w = PyBytes_AS_STRING(frame);
        memcpy(w, head, (size_t)hl); w += hl;
        memcpy(w, digits, (size_t)dl); w += dl;
        memcpy(w, "|\"}", 3); w += 3;
        memcpy(w, PyBytes_AS_STRING(data), (size_t)bl);
        PyList_SET_ITEM(out, i, frame);
    }
    return out;
bad:
    Py_DECREF(out);
    PyErr_SetString(PyExc_TypeError, "batch items must be (int, str, bytes)");
    return NULL;
}

PyDoc_STRVAR(frame_join_doc,
"frame_join(payloads) -> bytes\n\n"
"Each payload after its 4-byte big-endian length, all in one bytes object.");

static PyObject *frame_join(PyObject *self, PyObject *arg) {
    if (!PyList_Check(arg)) { PyErr_SetString(PyExc_TypeError, "a list of payloads"); return NULL; }
    Py_ssize_t n = PyList_GET_SIZE(arg), total = 0;
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    if (!views) return PyErr_NoMemory();
    PyObject *out = NULL;
    Py_ssize_t got = 0;
    for (; got < n; got++) { /* bytes, bytearray, memoryview: any contiguous buffer */
        if (PyObject_GetBuffer(PyList_GET_ITEM(arg, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        if ((uint64_t)views[got].len > 0xffffffffu) {
            PyBuffer_Release(&views[got]);
            PyErr_SetString(PyExc_ValueError, "payload too large");
            goto done;
        }
        total += 4 + views[got].len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = (size_t)views[i].len;
        w[0] = (unsigned char)(len >> 24); w[1] = (unsigned char)(len >> 16);
        w[2] = (unsigned char)(len >> 8); w[3] = (unsigned char)len;
        memcpy(w + 4, views[i].buf, len);
        w += 4 + len;
    }
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    return out;
}

PyDoc_STRVAR(replay_frames_doc,
"replay_frames(data, pos, expected, stop, prefix, suffix, head, pid, out, stamp=False,\n"
"              until=-1) -> (pos, expected, sequence)\n\n"
"Frames head + b'%d|\"}' % sequence + payload for the journal records of `data` from `pos`\n"
"(indexes `expected` up to `stop`), appended to `out`, while each record is whole, its CRC\n"
"and index right, its publisher `pid` and its msgpack part prefix + len + payload + suffix;\n"
"a whole record to another topic than prefix's (any publisher) is skipped;\n"
"with `stamp`, head + b'%d|\",\"ts\":\"YYYYmmddTHHMMSS.ffffffZ\"}' + payload (the record's\n"
"time, UTC). With `until` >= 0 it stops at a record received after `until` (microseconds).\n"
"Returns where it stopped and the last sequence framed (-1: none).");

/* "YYYYmmddTHHMMSS." of a second since the epoch (UTC, proleptic Gregorian; Howard
 * Hinnant's civil_from_days), 16 characters; 0 after the year 9999. */
static int second_prefix(long long secs, char *w) {
    long long days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
    long long rem = secs - days * 86400;
    long long z = days + 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long y = yoe + era * 400;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    long long d = doy - (153 * mp + 2) / 5 + 1;
    long long m = mp < 10 ? mp + 3 : mp - 9;
    if (m <= 2) y++;
    if (y > 9999) return 0; /* (from 1970 on: never below 1000) */
    int v[6] = {(int)y, (int)m, (int)d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60)};
    w[0] = (char)('0' + v[0] / 1000); w[1] = (char)('0' + v[0] / 100 % 10);
    w[2] = (char)('0' + v[0] / 10 % 10); w[3] = (char)('0' + v[0] % 10);
    char *q = w + 4;
    for (int i = 1; i < 6; i++) {
        if (i == 3) *q++ = 'T';
        *q++ = (char)('0' + v[i] / 10); *q++ = (char)('0' + v[i] % 10);
    }
    *q = '.';
    return 1;
}

/* CRC-32 (zlib's: reflected 0xEDB88320): carry-less multiplication for 64 bytes and more
 * where the CPU has it (x86-64 PCLMULQDQ), slicing by 8 otherwise and for the rest. zlib
 * 1.2.13's crc32 takes about 250 ns for a 60-byte journal record here; this takes a
 * fraction of it. Same values as zlib.crc32 (the twins use that; the differential tests
 * compare the bytes; AMPSCLIENT_NO_CLMUL=1 at import keeps to the table). */
static uint32_t crc_tab[8][256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][n] = (crc_tab[t - 1][n] >> 8) ^ crc_tab[0][crc_tab[t - 1][n] & 0xff];
}

static uint32_t crc32_table(uint32_t c, const unsigned char *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^ crc_tab[5][(lo >> 16) & 0xff]
            ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff]
            ^ crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--) c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1
static int use_clmul;

/* Folding with carry-less multiplication (Intel, "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ"; the constants of zlib's reflected polynomial, as Chromium's
 * zlib has them). n >= 64 and a multiple of 16; c is the running (inverted) value. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t c, const unsigned char *p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    x0 = k1k2;
    p += 64;
    n -= 64;
    while (n >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        n -= 64;
    }
    x0 = k3k4; /* fold the four into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)p);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_fast(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
#ifdef HAVE_CLMUL_CRC
    if (use_clmul && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        c = crc32_clmul(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
#endif
    return crc32_table(c, p, n) ^ 0xffffffffu;
}

#define J_FRAME_OVERHEAD 40 /* length, crc, then index, ts, publisher, sequence */
#define J_MIN_BODY 32

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* A msgpack str at p (fixstr, str 8/16/32) within [p, end): its content's offset and length
 * in *at and *len; 0 when it is not one. */
static int mp_str(const unsigned char *p, const unsigned char *end, Py_ssize_t *at, Py_ssize_t *len) {
    if (p >= end) return 0;
    Py_ssize_t h, l;
    if ((*p & 0xe0) == 0xa0) { h = 1; l = *p & 0x1f; }
    else if (*p == 0xd9 && end - p >= 2) { h = 2; l = p[1]; }
    else if (*p == 0xda && end - p >= 3) { h = 3; l = (p[1] << 8) | p[2]; }
    else if (*p == 0xdb && end - p >= 5) { h = 5; l = (Py_ssize_t)((uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4]); }
    else return 0;
    if (end - p - h < l) return 0;
    *at = h;
    *len = l;
    return 1;
}

/* Is the journal record body m[0:n] (msgpack [command, topic, payload, fields]) to a topic
 * other than want (want_n bytes)? 0 when it is to want, or not of that form. */
static int other_topic(const unsigned char *m, Py_ssize_t n, const unsigned char *want, Py_ssize_t want_n) {
    const unsigned char *end = m + n;
    Py_ssize_t at, len;
    if (n < 1 || m[0] != 0x94 || !mp_str(m + 1, end, &at, &len)) return 0;
    const unsigned char *t = m + 1 + at + len;
    if (!mp_str(t, end, &at, &len)) return 0;
    return len != want_n || memcmp(t + at, want, (size_t)len) != 0;
}

static PyObject *replay_frames(PyObject *self, PyObject *args) {
    Py_buffer data, prefix, suffix, head;
    Py_ssize_t pos;
    unsigned long long expected, stop, pid;
    PyObject *out;
    int stamp = 0;
    long long until = -1;
    if (!PyArg_ParseTuple(args, "y*nKKy*y*y*KO!|pL", &data, &pos, &expected, &stop, &prefix,
                          &suffix, &head, &pid, &PyList_Type, &out, &stamp, &until))
        return NULL;
    const unsigned char *d = data.buf;
    Py_ssize_t n = data.len, pl = prefix.len, sl = suffix.len, hl = head.len;
    long long last = -1;
    long long prefix_secs = -1; /* the second whose text is in ts_text */
    char ts_text[9 + 23 + 2] = "|\",\"ts\":\"";     /* |","ts":" + time + "} */
    /* the wanted topic: prefix is \x94 \xa1 p, the topic's msgpack str, \xc4 */
    Py_ssize_t want_at = 0, want_n = -1;
    const unsigned char *pre = prefix.buf;
    if (pl >= 4 && !mp_str(pre + 3, pre + pl - 1, &want_at, &want_n)) want_n = -1;
    PyObject *result = NULL;
    while (expected < stop && pos >= 0) {
        if (pos + J_FRAME_OVERHEAD > n) break;
        const unsigned char *r = d + pos;
        uint32_t length = le32(r), crc = le32(r + 4);
        Py_ssize_t end = pos + 8 + (Py_ssize_t)length;
        if (length < J_MIN_BODY || end > n) break;
        if (le64(r + 8) != expected) break;
        if (want_n >= 0 && other_topic(r + J_FRAME_OVERHEAD, end - pos - J_FRAME_OVERHEAD,
                                       pre + 3 + want_at, want_n)) {
            /* another topic's record (any publisher): checked, skipped */
            if (until >= 0 && le64(r + 16) > (unsigned long long)until) break;
            if (crc32_fast(r + 8, length) != crc) break;
            pos = end;
            expected++;
            continue;
        }
        if (le64(r + 24) != pid) break;
        Py_ssize_t p = pos + J_FRAME_OVERHEAD + pl; /* the payload's length byte */
        if (p >= end || memcmp(r + J_FRAME_OVERHEAD, prefix.buf, (size_t)pl) != 0) break;
        Py_ssize_t bl = d[p];
        if (p + 1 + bl + sl != end || memcmp(d + end - sl, suffix.buf, (size_t)sl) != 0) break;
        if (crc32_fast(r + 8, length) != crc) break;
        unsigned long long seq = le64(r + 32);
        if (seq > (unsigned long long)LLONG_MAX) break;
        unsigned long long ts = le64(r + 16);
        if (until >= 0 && ts > (unsigned long long)until) break;
        Py_ssize_t tl = 3; /* |"} or |","ts":"...Z"} */
        if (stamp) {
            if (ts > (unsigned long long)LLONG_MAX) break;
            long long secs = (long long)(ts / 1000000);
            if (secs != prefix_secs) {
                if (!second_prefix(secs, ts_text + 9)) break;
                prefix_secs = secs;
            }
            unsigned long long us = ts % 1000000;
            for (int i = 30; i >= 25; i--) { ts_text[i] = (char)('0' + us % 10); us /= 10; }
            ts_text[31] = 'Z'; ts_text[32] = '"'; ts_text[33] = '}';
            tl = 34;
        }
        char digits[24];
        Py_ssize_t dl = put_ll(digits, (long long)seq) - digits;
        PyObject *frame = PyBytes_FromStringAndSize(NULL, hl + dl + tl + bl);
        if (!frame) goto done;
        char *w = PyBytes_AS_STRING(frame);
        memcpy(w, head.buf, (size_t)hl); w += hl;
        memcpy(w, digits, (size_t)dl); w += dl;
        if (stamp) memcpy(w, ts_text, 34);
        else memcpy(w, "|\"}", 3);
        w += tl;
        memcpy(w, d + p + 1, (size_t)bl);
        int rc = PyList_Append(out, frame);
        Py_DECREF(frame);
        if (rc < 0) goto done;
        last = (long long)seq;
        pos = end;
        expected++;
    }
    result = Py_BuildValue("(nKL)", pos, expected, last);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&suffix);
    PyBuffer_Release(&head);
    return result;
}

PyDoc_STRVAR(ws_client_frames_doc,
"ws_client_frames(data, max_size) -> (end, messages, whole)\n\n"
"The data messages (payload, is_text) of the WebSocket frames a client sent, from the start\n"
"of `data`, while each frame is a whole unfragmented masked text or binary message of at\n"
"most max_size bytes without RSV bits (text is not validated: websockets' parser does not\n"
"either). end: where it stopped;\n"
"whole: it stopped only for want of bytes (else the frame at end is another kind).");

static PyObject *ws_client_frames(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t max_size;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &max_size)) return NULL;
    const unsigned char *d = buf.buf;
    Py_ssize_t n = buf.len, pos = 0;
    int whole = 1;
    PyObject *messages = PyList_New(0);
    if (!messages) { PyBuffer_Release(&buf); return NULL; }
    while (pos < n) {
        if (n - pos < 2) break;
        unsigned char b0 = d[pos], b1 = d[pos + 1];
        int opcode = b0 & 0x0f;
        if ((b0 & 0xf0) != 0x80 || (opcode != 1 && opcode != 2) || !(b1 & 0x80)) { whole = 0; break; }
        uint64_t len = b1 & 0x7f;
        Py_ssize_t h = 2;
        if (len == 126) {
            if (n - pos < 4) break;
            len = ((uint64_t)d[pos + 2] << 8) | d[pos + 3];
            h = 4;
        } else if (len == 127) {
            if (n - pos < 10) break;
            len = 0;
            for (int i = 0; i < 8; i++) len = (len << 8) | d[pos + 2 + i];
            h = 10;
        }
        if (max_size >= 0 && len > (uint64_t)max_size) { whole = 0; break; }
        if (len > (uint64_t)PY_SSIZE_T_MAX / 2) { whole = 0; break; }
        if ((uint64_t)(n - pos) < (uint64_t)h + 4 + len) break;
        const unsigned char *mask = d + pos + h, *src = mask + 4;
        PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
        if (!data) goto error;
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(data);
        for (uint64_t i = 0; i < len; i++) w[i] = src[i] ^ mask[i & 3];
        PyObject *item = Py_BuildValue("(NO)", data, opcode == 1 ? Py_True : Py_False);
        if (!item) goto error;
        int rc = PyList_Append(messages, item);
        Py_DECREF(item);
        if (rc < 0) goto error;
        pos += h + 4 + (Py_ssize_t)len;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("(nNO)", pos, messages, whole ? Py_True : Py_False);
error:
    PyBuffer_Release(&buf);
    Py_DECREF(messages);
    return NULL;
}

PyDoc_STRVAR(ws_server_frames_doc,
"ws_server_frames(payloads, text) -> bytes | None\n\n"
"The WebSocket frames (unmasked, text or binary) of deliveries {\"c\":\"p\",...}BODY: the\n"
"header and the body, each its own message. None when a payload is of another kind, its\n"
"header has a backslash before its end, or (text) it is not ASCII.");

static Py_ssize_t ws_head_len(Py_ssize_t n) { return n < 126 ? 2 : n < 65536 ? 4 : 10; }

static unsigned char *ws_head(unsigned char *w, int first, Py_ssize_t n) {
    *w++ = (unsigned char)first;
    if (n < 126) { *w++ = (unsigned char)n; return w; }
    if (n < 65536) { *w++ = 126; *w++ = (unsigned char)(n >> 8); *w++ = (unsigned char)n; return w; }
    *w++ = 127;
    for (int i = 7; i >= 0; i--) *w++ = (unsigned char)((uint64_t)n >> (8 * i));
    return w;
}

/* body_offset's fast path (ampsclient.protocol.message): the first '}' with no backslash
 * before it and an even number of quotes before it; -1 when it does not apply */
static Py_ssize_t header_end(const char *p, Py_ssize_t n) {
    int quotes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\') return -1;
        if (c == '"') quotes++;
        else if (c == '}' && !(quotes & 1)) return i + 1;
    }
    return -1;
}

static PyObject *ws_server_frames(PyObject *self, PyObject *args) {
    PyObject *payloads;
    int text;
    if (!PyArg_ParseTuple(args, "O!p", &PyList_Type, &payloads, &text)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(payloads), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(payloads, i);
        if (!PyBytes_CheckExact(o)) Py_RETURN_NONE;
        const char *p = PyBytes_AS_STRING(o);
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        if (len < 9 || memcmp(p, "{\"c\":\"p\",", 9) != 0) Py_RETURN_NONE;
        if (text)
            for (Py_ssize_t j = 0; j < len; j++)
                if ((unsigned char)p[j] >= 0x80) Py_RETURN_NONE;
        Py_ssize_t e = header_end(p, len);
        if (e < 0) Py_RETURN_NONE;
        total += ws_head_len(e) + ws_head_len(len - e) + len;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    int first = text ? 0x81 : 0x82;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(payloads, i);
        const char *p = PyBytes_AS_STRING(o);
        Py_ssize_t len = PyBytes_GET_SIZE(o), e = header_end(p, len);
        w = ws_head(w, first, e);
        memcpy(w, p, (size_t)e); w += e;
        w = ws_head(w, first, len - e);
        memcpy(w, p + e, (size_t)(len - e)); w += len - e;
    }
    return out;
}

PyDoc_STRVAR(ws_commands_doc,
"ws_commands(messages, start, max_size) -> (end, payloads)\n\n"
"The AMPS commands in messages[start:] ((data, is_text) each): a binary 4-byte\n"
"little-endian count of 1 or 2, then that many parts, joined into one payload of at most\n"
"max_size bytes. Stops at anything else, at a command not whole in `messages`, and at a\n"
"short (<= 6 bytes) non-ASCII text part (the caller's framer takes it from there).");

static PyObject *ws_commands(PyObject *self, PyObject *args) {
    PyObject *messages;
    Py_ssize_t start, max_size;
    if (!PyArg_ParseTuple(args, "O!nn", &PyList_Type, &messages, &start, &max_size)) return NULL;
    PyObject *payloads = PyList_New(0);
    if (!payloads) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(messages), i = start < 0 ? 0 : start;
    PyObject *parts[2];
    while (i < n) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        if (!PyTuple_CheckExact(m) || PyTuple_GET_SIZE(m) != 2) break;
        PyObject *d = PyTuple_GET_ITEM(m, 0);
        if (!PyBytes_CheckExact(d) || PyTuple_GET_ITEM(m, 1) != Py_False || PyBytes_GET_SIZE(d) != 4)
            break;
        const unsigned char *c = (const unsigned char *)PyBytes_AS_STRING(d);
        uint32_t count = le32(c);
        if (count < 1 || count > 2 || i + (Py_ssize_t)count >= n) break;
        Py_ssize_t total = 0;
        int ok = 1;
        for (uint32_t k = 0; k < count && ok; k++) {
            PyObject *pm = PyList_GET_ITEM(messages, i + 1 + (Py_ssize_t)k);
            if (!PyTuple_CheckExact(pm) || PyTuple_GET_SIZE(pm) != 2) { ok = 0; break; }
            PyObject *pd = PyTuple_GET_ITEM(pm, 0);
            if (!PyBytes_CheckExact(pd)) { ok = 0; break; }
            Py_ssize_t len = PyBytes_GET_SIZE(pd);
            if (PyTuple_GET_ITEM(pm, 1) == Py_True && len <= 6) {
                const unsigned char *q = (const unsigned char *)PyBytes_AS_STRING(pd);
                for (Py_ssize_t j = 0; j < len; j++)
                    if (q[j] >= 0x80) { ok = 0; break; }
            }
            parts[k] = pd;
            total += len;
        }
        if (!ok || total > max_size) break;
        PyObject *payload;
        if (count == 1) {
            payload = parts[0];
            Py_INCREF(payload);
        } else {
            Py_ssize_t l0 = PyBytes_GET_SIZE(parts[0]);
            payload = PyBytes_FromStringAndSize(NULL, total);
            if (!payload) { Py_DECREF(payloads); return NULL; }
            memcpy(PyBytes_AS_STRING(payload), PyBytes_AS_STRING(parts[0]), (size_t)l0);
            memcpy(PyBytes_AS_STRING(payload) + l0, PyBytes_AS_STRING(parts[1]), (size_t)(total - l0));
        }
        int rc = PyList_Append(payloads, payload);
        Py_DECREF(payload);
        if (rc < 0) { Py_DECREF(payloads); return NULL; }
        i += 1 + (Py_ssize_t)count;
    }
    return Py_BuildValue("(nN)", i, payloads);
}

PyDoc_STRVAR(ws_client_commands_doc,
"ws_client_commands(data, max_message, max_size) -> (end, payloads)\n\n"
"The whole AMPS commands at the start of a client's WebSocket bytes, each a binary count\n"
"message (4 bytes, little-endian 1 or 2) and that many data messages joined into one\n"
"payload of at most max_size bytes: what ws_client_frames then ws_commands take, in one\n"
"pass. Every frame must be whole, unfragmented, masked, text or binary, without RSV bits\n"
"and of at most max_message bytes (-1: any); a short (up to 6 bytes) text part must be\n"
"ASCII. end: the byte after the last command taken.");

/* One whole masked data frame at d[pos] (see ws_client_frames): 1 and its payload's
 * start, length, mask and opcode; 0 when it is not such a frame or not whole. */
static int ws_data_frame(const unsigned char *d, Py_ssize_t n, Py_ssize_t pos,
                         Py_ssize_t max_message, Py_ssize_t *start, Py_ssize_t *len,
                         const unsigned char **mask, int *opcode) {
    if (n - pos < 2) return 0;
    unsigned char b0 = d[pos], b1 = d[pos + 1];
    int op = b0 & 0x0f;
    if ((b0 & 0xf0) != 0x80 || (op != 1 && op != 2) || !(b1 & 0x80)) return 0;
    uint64_t l = b1 & 0x7f;
    Py_ssize_t h = 2;
    if (l == 126) {
        if (n - pos < 4) return 0;
        l = ((uint64_t)d[pos + 2] << 8) | d[pos + 3];
        h = 4;
    } else if (l == 127) {
        if (n - pos < 10) return 0;
        l = 0;
        for (int i = 0; i < 8; i++) l = (l << 8) | d[pos + 2 + i];
        h = 10;
    }
    if (max_message >= 0 && l > (uint64_t)max_message) return 0;
    if (l > (uint64_t)PY_SSIZE_T_MAX / 2) return 0;
    if ((uint64_t)(n - pos) < (uint64_t)h + 4 + l) return 0;
    *mask = d + pos + h;
    *start = pos + h + 4;
    *len = (Py_ssize_t)l;
    *opcode = op;
    return 1;
}

static PyObject *ws_client_commands(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t max_message, max_size;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &max_message, &max_size)) return NULL;
    const unsigned char *d = buf.buf;
    Py_ssize_t n = buf.len, pos = 0;
    PyObject *payloads = PyList_New(0);
    if (!payloads) { PyBuffer_Release(&buf); return NULL; }
    for (;;) {
        Py_ssize_t s, l, ps[2], pl[2];
        const unsigned char *m, *pm[2];
        int op, pop;
        if (!ws_data_frame(d, n, pos, max_message, &s, &l, &m, &op)) break;
        if (op != 2 || l != 4) break;
        uint32_t count = 0;
        for (int i = 3; i >= 0; i--) count = (count << 8) | (unsigned char)(d[s + i] ^ m[i]);
        if (count < 1 || count > 2) break;
        Py_ssize_t p = s + 4, total = 0;
        int ok = 1;
        for (uint32_t k = 0; k < count; k++) {
            if (!ws_data_frame(d, n, p, max_message, &ps[k], &pl[k], &pm[k], &pop)) { ok = 0; break; }
            if (pop == 1 && pl[k] <= 6)
                for (Py_ssize_t j = 0; j < pl[k]; j++)
                    if ((d[ps[k] + j] ^ pm[k][j & 3]) >= 0x80) { ok = 0; break; }
            if (!ok) break;
            total += pl[k];
            p = ps[k] + pl[k];
        }
        if (!ok || total > max_size) break;
        PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
        if (!payload) goto error;
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(payload);
        for (uint32_t k = 0; k < count; k++) {
            const unsigned char *src = d + ps[k], *mk = pm[k];
            for (Py_ssize_t j = 0; j < pl[k]; j++) *w++ = src[j] ^ mk[j & 3];
        }
        int rc = PyList_Append(payloads, payload);
        Py_DECREF(payload);
        if (rc < 0) goto error;
        pos = p;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("(nN)", pos, payloads);
error:
    PyBuffer_Release(&buf);
    Py_DECREF(payloads);
    return NULL;
}

PyDoc_STRVAR(journal_frames_doc,
"journal_frames(buf, records, start, publisher_id, index, ts, prefix, fields, size, limit,\n"
"               prev) -> (next, size, offsets, sequences, indexes)\n\n"
"Appends to bytearray `buf` the journal records of records[start:] ((sequence, topic,\n"
"payload) each): index from `index`, timestamp `ts`, msgpack prefix + topic + payload +\n"
"fields, length and CRC-32 in front; stops after the record that brings `size` to `limit`.\n"
"The sequences are checked first (each above the previous, `prev` before the first, below\n"
"2**64): on a bad one nothing is appended and next is -1 - its position. offsets,\n"
"sequences and indexes are native uint64 bytes (array('Q')).");

static char *put_u64le(char *w, uint64_t v) {
    for (int i = 0; i < 8; i++) { w[i] = (char)(v & 0xff); v >>= 8; }
    return w + 8;
}

/* msgpack header of a str (0xa0/0xd9/0xda/0xdb) or bin (0xc4/0xc5/0xc6) of n bytes */
static Py_ssize_t mp_head(unsigned char *w, Py_ssize_t n, int is_str) {
    if (is_str && n < 32) { w[0] = (unsigned char)(0xa0 | n); return 1; }
    if (n < 256) { w[0] = is_str ? 0xd9 : 0xc4; w[1] = (unsigned char)n; return 2; }
    if (n < 65536) {
        w[0] = is_str ? 0xda : 0xc5;
        w[1] = (unsigned char)(n >> 8); w[2] = (unsigned char)n;
        return 3;
    }
    w[0] = is_str ? 0xdb : 0xc6;
    w[1] = (unsigned char)(n >> 24); w[2] = (unsigned char)(n >> 16);
    w[3] = (unsigned char)(n >> 8); w[4] = (unsigned char)n;
    return 5;
}

static PyObject *journal_frames(PyObject *self, PyObject *args) {
    PyObject *buf, *records;
    Py_ssize_t start;
    unsigned long long pid, index, ts, size, limit, prev;
    Py_buffer prefix, fields;
    if (!PyArg_ParseTuple(args, "O!OnKKKy*y*KKK", &PyByteArray_Type, &buf, &records, &start,
                          &pid, &index, &ts, &prefix, &fields, &size, &limit, &prev))
        return NULL;
    PyObject *result = NULL, *seq_list = NULL, *offs = NULL, *seqs = NULL, *idxs = NULL;
    Py_buffer *views = NULL;
    const char **topics = NULL;
    Py_ssize_t *tlens = NULL;
    uint64_t *seqv = NULL;
    seq_list = PySequence_Fast(records, "records must be a sequence");
    if (!seq_list) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq_list);
    PyObject **items = PySequence_Fast_ITEMS(seq_list);
    if (start < 0 || start > n) { PyErr_SetString(PyExc_IndexError, "start out of range"); goto done; }
    Py_ssize_t count = n - start;
    seqv = PyMem_Malloc(sizeof(uint64_t) * (size_t)(count ? count : 1));
    if (!seqv) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < count; i++) { /* check every sequence before appending anything */
        PyObject *rec = items[start + i];
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 3) {
            PyErr_SetString(PyExc_TypeError, "records must be (sequence, topic, payload) tuples");
            goto done;
        }
        PyObject *s = PyTuple_GET_ITEM(rec, 0);
        if (!PyLong_Check(s)) { PyErr_SetString(PyExc_TypeError, "a sequence must be an int"); goto done; }
        int overflow = 0;
        long long sv = PyLong_AsLongLongAndOverflow(s, &overflow);
        if (sv == -1 && PyErr_Occurred()) goto done;
        unsigned long long u;
        if (overflow > 0) {
            u = PyLong_AsUnsignedLongLong(s);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) { /* 2**64 or more */
                PyErr_Clear();
                result = Py_BuildValue("(nKyyy)", -1 - (start + i), size, "", "", "");
                goto done;
            }
        } else if (overflow < 0 || sv < 0 || (unsigned long long)sv <= prev) {
            result = Py_BuildValue("(nKyyy)", -1 - (start + i), size, "", "", "");
            goto done;
        } else {
            u = (unsigned long long)sv;
        }
        if (u <= prev) {
            result = Py_BuildValue("(nKyyy)", -1 - (start + i), size, "", "", "");
            goto done;
        }
        seqv[i] = prev = u;
    }
    views = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Py_buffer));
    topics = PyMem_Malloc(sizeof(char *) * (size_t)(count ? count : 1));
    tlens = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count ? count : 1));
    if (!views || !topics || !tlens) { PyErr_NoMemory(); goto done; }
    Py_ssize_t taken = 0, total = 0;
    unsigned long long sz = size;
    while (taken < count) { /* measure up to the record that reaches the limit */
        PyObject *rec = items[start + taken];
        PyObject *topic = PyTuple_GET_ITEM(rec, 1);
        if (!PyUnicode_Check(topic)) { PyErr_SetString(PyExc_TypeError, "a topic must be a str"); goto done; }
        topics[taken] = PyUnicode_AsUTF8AndSize(topic, &tlens[taken]);
        if (!topics[taken]) goto done;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(rec, 2), &views[taken], PyBUF_SIMPLE) < 0) goto done;
        Py_ssize_t pl = views[taken].len;
        taken++;
        Py_ssize_t body = J_MIN_BODY + prefix.len + (tlens[taken - 1] < 32 ? 1 : tlens[taken - 1] < 256 ? 2 : tlens[taken - 1] < 65536 ? 3 : 5)
                          + tlens[taken - 1] + (pl < 256 ? 2 : pl < 65536 ? 3 : 5) + pl + fields.len;
        if (body > 0xffffffffLL) { PyErr_SetString(PyExc_ValueError, "journal record too large"); goto done; }
        total += body + 8;
        sz += (unsigned long long)body + 8;
        if (sz >= limit) break;
    }
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, old + total) < 0) goto done;
    offs = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 * taken));
    seqs = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 * taken));
    idxs = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 * taken));
    if (!offs || !seqs || !idxs) goto done;
    uint64_t *ov = (uint64_t *)PyBytes_AS_STRING(offs), *sqv = (uint64_t *)PyBytes_AS_STRING(seqs);
    uint64_t *iv = (uint64_t *)PyBytes_AS_STRING(idxs);
    char *w = PyByteArray_AS_STRING(buf) + old;
    sz = size;
    for (Py_ssize_t i = 0; i < taken; i++) {
        char *rec = w;
        w += 8; /* length and crc, below */
        w = put_u64le(w, index + (unsigned long long)i);
        w = put_u64le(w, ts);
        w = put_u64le(w, pid);
        w = put_u64le(w, seqv[i]);
        memcpy(w, prefix.buf, (size_t)prefix.len); w += prefix.len;
        w += mp_head((unsigned char *)w, tlens[i], 1);
        memcpy(w, topics[i], (size_t)tlens[i]); w += tlens[i];
        w += mp_head((unsigned char *)w, views[i].len, 0);
        memcpy(w, views[i].buf, (size_t)views[i].len); w += views[i].len;
        memcpy(w, fields.buf, (size_t)fields.len); w += fields.len;
        uint32_t body = (uint32_t)(w - rec - 8);
        uint32_t crc = crc32_fast((const unsigned char *)rec + 8, body);
        for (int b = 0; b < 4; b++) { rec[b] = (char)(body >> (8 * b)); rec[4 + b] = (char)(crc >> (8 * b)); }
        ov[i] = sz;
        sqv[i] = seqv[i];
        iv[i] = index + (unsigned long long)i;
        sz += (unsigned long long)body + 8;
    }
    result = Py_BuildValue("(nKOOO)", start + taken, sz, offs, seqs, idxs);
done:
    if (views) {
        for (Py_ssize_t i = 0; i < count; i++)
            if (views[i].obj) PyBuffer_Release(&views[i]);
        PyMem_Free(views);
    }
    PyMem_Free(topics);
    PyMem_Free(tlens);
    PyMem_Free(seqv);
    Py_XDECREF(offs);
    Py_XDECREF(seqs);
    Py_XDECREF(idxs);
    Py_XDECREF(seq_list);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&fields);
    return result;
}

/* ---------------------------------------------------------------- replication (blocks.py) */

/* Header size of the canonical (shortest) msgpack str (bin: 0) or bin (bin: 1) at d[p], its
 * length in *len; 0 when it is another type, not the shortest form, or runs past end. */
static Py_ssize_t mp_canonical(const unsigned char *d, Py_ssize_t p, Py_ssize_t end, int bin,
                               Py_ssize_t *len) {
    if (p >= end) return 0;
    unsigned char b = d[p];
    Py_ssize_t hs, l;
    if (!bin && b >= 0xa0 && b <= 0xbf) { hs = 1; l = b & 0x1f; }
    else if (b == (bin ? 0xc4 : 0xd9)) {
        if (p + 2 > end) return 0;
        hs = 2; l = d[p + 1];
        if (!bin && l < 32) return 0;
    } else if (b == (bin ? 0xc5 : 0xda)) {
        if (p + 3 > end) return 0;
        hs = 3; l = ((Py_ssize_t)d[p + 1] << 8) | d[p + 2];
        if (l < 256) return 0;
    } else if (b == (bin ? 0xc6 : 0xdb)) {
        if (p + 5 > end) return 0;
        hs = 5;
        l = (Py_ssize_t)(((uint32_t)d[p + 1] << 24) | ((uint32_t)d[p + 2] << 16) | ((uint32_t)d[p + 3] << 8) | d[p + 4]);
        if (l < 65536) return 0;
    } else return 0;
    if (l > end - p - hs) return 0;
    *len = l;
    return hs;
}

PyDoc_STRVAR(journal_runs_doc,
"journal_runs(data, pos, expected, stop, runs) -> (pos, expected)\n\n"
"The journal records of `data` from `pos` (indexes `expected` up to `stop`), appended to\n"
"`runs` as (publisher id, command, fields bytes, [(sequence, topic, payload), ...]) runs of\n"
"records with the same publisher, command and fields bytes (a call never extends a run it\n"
"did not start), while each record is whole, its index and CRC right and its msgpack part\n"
"an array of 4: command and topic as shortest-form UTF-8 str, payload as shortest-form bin,\n"
"then at least one byte (the fields, not decoded). Returns where it stopped.");

static PyObject *journal_runs(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t pos;
    unsigned long long expected, stop;
    PyObject *runs;
    if (!PyArg_ParseTuple(args, "y*nKKO!", &data, &pos, &expected, &stop, &PyList_Type, &runs))
        return NULL;
    const unsigned char *d = data.buf;
    Py_ssize_t n = data.len;
    PyObject *result = NULL, *items = NULL, *command = NULL, *topic = NULL;
    Py_ssize_t run_fields = -1, run_flen = 0, run_cmd = -1, run_clen = 0, tp = -1, tl = 0;
    unsigned long long run_pid = 0;
    while (expected < stop && pos >= 0) {
        if (pos + J_FRAME_OVERHEAD > n) break;
        const unsigned char *r = d + pos;
        uint32_t length = le32(r), crc = le32(r + 4);
        Py_ssize_t end = pos + 8 + (Py_ssize_t)length;
        if (length < J_MIN_BODY || end > n) break;
        if (le64(r + 8) != expected) break;
        Py_ssize_t p = pos + J_FRAME_OVERHEAD, cl, ol, pl;
        if (p >= end || d[p] != 0x94) break;
        p++;
        Py_ssize_t hs = mp_canonical(d, p, end, 0, &cl);
        if (!hs) break;
        Py_ssize_t cp = p + hs;
        p = cp + cl;
        hs = mp_canonical(d, p, end, 0, &ol);
        if (!hs) break;
        Py_ssize_t op = p + hs;
        p = op + ol;
        hs = mp_canonical(d, p, end, 1, &pl);
        if (!hs) break;
        Py_ssize_t pp = p + hs;
        p = pp + pl;
        if (p >= end) break;
        if (crc32_fast(r + 8, length) != crc) break;
        unsigned long long pid = le64(r + 24), seq = le64(r + 32);
        int same = items && pid == run_pid && cl == run_clen && end - p == run_flen
                   && memcmp(d + cp, d + run_cmd, (size_t)cl) == 0
                   && memcmp(d + p, d + run_fields, (size_t)run_flen) == 0;
        PyObject *new_topic = NULL, *new_command = NULL;
        if (!(topic && ol == tl && memcmp(d + op, d + tp, (size_t)ol) == 0)) {
            new_topic = PyUnicode_DecodeUTF8((const char *)d + op, ol, NULL);
            if (!new_topic) { PyErr_Clear(); break; }
        }
        if (!same) {
            new_command = PyUnicode_DecodeUTF8((const char *)d + cp, cl, NULL);
            if (!new_command) { PyErr_Clear(); Py_XDECREF(new_topic); break; }
        }
        PyObject *item = PyTuple_New(3);
        PyObject *seqo = PyLong_FromUnsignedLongLong(seq);
        PyObject *payload = PyBytes_FromStringAndSize((const char *)d + pp, pl);
        if (!item || !seqo || !payload) {
            Py_XDECREF(item); Py_XDECREF(seqo); Py_XDECREF(payload);
            Py_XDECREF(new_topic); Py_XDECREF(new_command);
            goto done;
        }
        if (new_topic) { Py_XSETREF(topic, new_topic); tp = op; tl = ol; }
        Py_INCREF(topic);
        PyTuple_SET_ITEM(item, 0, seqo);
        PyTuple_SET_ITEM(item, 1, topic);
        PyTuple_SET_ITEM(item, 2, payload);
        if (!same) {
            Py_XSETREF(command, new_command);
            PyObject *fields = PyBytes_FromStringAndSize((const char *)d + p, end - p);
            PyObject *list = PyList_New(0);
            PyObject *pido = PyLong_FromUnsignedLongLong(pid);
            PyObject *run = (fields && list && pido) ? PyTuple_Pack(4, pido, command, fields, list) : NULL;
            Py_XDECREF(fields); Py_XDECREF(pido);
            if (!run || PyList_Append(runs, run) < 0) {
                Py_XDECREF(run); Py_XDECREF(list); Py_DECREF(item);
                goto done;
            }
            Py_DECREF(run);
            Py_XSETREF(items, list);
            run_pid = pid; run_cmd = cp; run_clen = cl; run_fields = p; run_flen = end - p;
        }
        int rc = PyList_Append(items, item);
        Py_DECREF(item);
        if (rc < 0) goto done;
        pos = end;
        expected++;
    }
    result = Py_BuildValue("(nK)", pos, expected);
done:
    Py_XDECREF(items);
    Py_XDECREF(command);
    Py_XDECREF(topic);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(journal_walk_doc,
"journal_walk(data, pos, expected, count, sent_seq, suffixes) -> (taken, pos, first_ts)\n\n"
"How many journal records of `data` from `pos` (indexes from `expected`, at most `count`)\n"
"go on as written: each whole, its index right, its msgpack part without the packed \"rp\",\n"
"its sequence above sent_seq[publisher]\n"
"(0 when absent; set to it for each that goes) and, unless `suffixes` is None, its record\n"
"ending with one of `suffixes` (a tuple of bytes); a sent_seq value that is not an int in\n"
"0..2**64-1 stops the walk. CRCs are not checked. first_ts: the timestamp of the first\n"
"record that goes (0: none).");

/* Whether the msgpack part of a record (n bytes at p) holds the packed path field name
 * (replication.blocks.PATH_MARK, msgpack of "rp": a2 72 70); memchr finds its first byte. */
static int has_path_mark(const unsigned char *p, Py_ssize_t n) {
    const unsigned char *e = p + n;
    while (e - p >= 3) {
        const unsigned char *q = memchr(p, 0xa2, (size_t)(e - p - 2));
        if (!q) return 0;
        if (q[1] == 'r' && q[2] == 'p') return 1;
        p = q + 1;
    }
    return 0;
}

static PyObject *journal_walk(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t pos, count;
    unsigned long long expected;
    PyObject *sent, *suffixes;
    if (!PyArg_ParseTuple(args, "y*nKnO!O", &data, &pos, &expected, &count, &PyDict_Type, &sent,
                          &suffixes))
        return NULL;
    const unsigned char *d = data.buf;
    Py_ssize_t n = data.len, taken = 0, nsuf = 0;
    PyObject *result = NULL;
    unsigned long long first_ts = 0;
    if (suffixes != Py_None) {
        if (!PyTuple_Check(suffixes)) { PyErr_SetString(PyExc_TypeError, "suffixes must be a tuple or None"); goto done; }
        nsuf = PyTuple_GET_SIZE(suffixes);
        for (Py_ssize_t i = 0; i < nsuf; i++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(suffixes, i))) { PyErr_SetString(PyExc_TypeError, "suffixes must be bytes"); goto done; }
    }
    int have_pid = 0;
    unsigned long long cur_pid = 0, cur_seq = 0; /* sent_seq[cur_pid], not yet written back */
    int dirty = 0;
    while (taken < count) {
        if (pos < 0 || pos + J_FRAME_OVERHEAD > n) break;
        const unsigned char *r = d + pos;
        uint32_t length = le32(r);
        Py_ssize_t end = pos + 8 + (Py_ssize_t)length;
        if (length < J_MIN_BODY || end > n) break;
        if (le64(r + 8) != expected) break;
        if (has_path_mark(r + J_FRAME_OVERHEAD, end - pos - J_FRAME_OVERHEAD)) break;
        unsigned long long ts = le64(r + 16), pid = le64(r + 24), seq = le64(r + 32);
        if (!have_pid || pid != cur_pid) {
            if (dirty) {
                PyObject *k = PyLong_FromUnsignedLongLong(cur_pid), *v = PyLong_FromUnsignedLongLong(cur_seq);
                int rc = (k && v) ? PyDict_SetItem(sent, k, v) : -1;
                Py_XDECREF(k); Py_XDECREF(v);
                if (rc < 0) goto done;
                dirty = 0;
            }
            PyObject *k = PyLong_FromUnsignedLongLong(pid);
            if (!k) goto done;
            PyObject *v = PyDict_GetItemWithError(sent, k);
            Py_DECREF(k);
            if (!v && PyErr_Occurred()) goto done;
            unsigned long long held = 0;
            if (v) { /* anything but an int in 0..2**64-1 stops the walk, as in the twin */
                if (!PyLong_CheckExact(v)) break;
                held = PyLong_AsUnsignedLongLong(v);
                if (held == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); break; }
            }
            cur_pid = pid; cur_seq = held; have_pid = 1;
        }
        if (seq <= cur_seq) break;
        if (suffixes != Py_None) {
            int ok = 0;
            for (Py_ssize_t i = 0; i < nsuf && !ok; i++) {
                PyObject *s = PyTuple_GET_ITEM(suffixes, i);
                Py_ssize_t sl = PyBytes_GET_SIZE(s);
                ok = sl <= end - pos && memcmp(d + end - sl, PyBytes_AS_STRING(s), (size_t)sl) == 0;
            }
            if (!ok) break;
        }
        if (!taken) first_ts = ts;
        cur_seq = seq;
        dirty = 1;
        pos = end;
        expected++;
        taken++;
    }
    if (dirty) {
        PyObject *k = PyLong_FromUnsignedLongLong(cur_pid), *v = PyLong_FromUnsignedLongLong(cur_seq);
        int rc = (k && v) ? PyDict_SetItem(sent, k, v) : -1;
        Py_XDECREF(k); Py_XDECREF(v);
        if (rc < 0) goto done;
    }
    result = Py_BuildValue("(nnK)", taken, pos, first_ts);
done:
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_publishes", scan_publishes, METH_VARARGS, scan_publishes_doc},
    {"delivery_frames", delivery_frames, METH_VARARGS, delivery_frames_doc},
    {"frame_join", frame_join, METH_O, frame_join_doc},
    {"replay_frames", replay_frames, METH_VARARGS, replay_frames_doc},
    {"ws_client_frames", ws_client_frames, METH_VARARGS, ws_client_frames_doc},
    {"ws_server_frames", ws_server_frames, METH_VARARGS, ws_server_frames_doc},
    {"ws_commands", ws_commands, METH_VARARGS, ws_commands_doc},
    {"ws_client_commands", ws_client_commands, METH_VARARGS, ws_client_commands_doc},
    {"journal_frames", journal_frames, METH_VARARGS, journal_frames_doc},
    {"journal_runs", journal_runs, METH_VARARGS, journal_runs_doc},
    {"journal_walk", journal_walk, METH_VARARGS, journal_walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ampsclient_server_stub._speedups",
    "Optional C versions of the reference server's per-message loops.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
#ifdef HAVE_CLMUL_CRC
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")
                && !getenv("AMPSCLIENT_NO_CLMUL");
#endif
    return PyModule_Create(&module);
}
