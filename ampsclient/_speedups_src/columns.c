/* ------------------------------------------------------------------ delivery_columns
 *
 * delivery_columns(payloads, aliases): the column buffers of a batch of deliveries (twin:
 * ampsclient.protocol.columns.delivery_columns, which documents the result). A pure
 * function: bytes in, bytes out; None when one payload is not of the usual shape.
 */

#include "speedups.h"

SP_DOC(delivery_columns_doc,
"delivery_columns(payloads, aliases) -> tuple | None\n\n"
"Arrow-layout column buffers of the headers (t, bm, k, x as strings; bm's publisher id as\n"
"decimal128 and sequence as int64; ts as int64 microseconds) and bodies of a list of\n"
"delivery payloads; None when one is irregular (ampsclient.protocol.columns).");

/* An output column written in place in its bytes object: presized from the input's sizes
 * (an upper bound: the pages never written are never touched), cut to its length at the end
 * (a shrinking realloc, no copy). Grows only when the bound could not be had. */
typedef struct {
    PyObject *obj;
    unsigned char *buf;
    Py_ssize_t len, cap;
} DcOut;

static int dc_open(DcOut *o, Py_ssize_t cap, Py_ssize_t fallback)
{
    o->len = 0;
    o->obj = PyBytes_FromStringAndSize(NULL, cap > 0 ? cap : 1);
    if (o->obj == NULL && fallback < cap) {
        PyErr_Clear();
        cap = fallback;
        o->obj = PyBytes_FromStringAndSize(NULL, cap > 0 ? cap : 1);
    }
    if (o->obj == NULL) return -1;
    o->cap = cap > 0 ? cap : 1;
    o->buf = (unsigned char *)PyBytes_AS_STRING(o->obj);
    return 0;
}

static int dc_reserve(DcOut *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap) return 0;
    Py_ssize_t cap = o->cap;
    while (cap < o->len + n) cap *= 2;
    if (_PyBytes_Resize(&o->obj, cap) < 0) return -1; /* (o->obj is NULL then) */
    o->cap = cap;
    o->buf = (unsigned char *)PyBytes_AS_STRING(o->obj);
    return 0;
}

/* The finished bytes (the reference moves to the caller), or NULL. */
static PyObject *dc_close(DcOut *o)
{
    if (o->obj != NULL && o->len != o->cap && _PyBytes_Resize(&o->obj, o->len) < 0) return NULL;
    PyObject *done = o->obj;
    o->obj = NULL;
    return done;
}

/* n bytes from s (no overlap, n within the reserved room): short spans by word moves. */
static inline void dc_copy(unsigned char *d, const unsigned char *s, Py_ssize_t n)
{
    if (n > 32 && n <= 64) {
        memcpy(d, s, 32);
        memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n > 64) {
        memcpy(d, s, (size_t)n);
    } else {
        for (Py_ssize_t k = 0; k < n; k++) d[k] = s[k];
    }
}

/* v as `width` little-endian bytes (width 4 or 8) */
static inline void dc_le(unsigned char *d, uint64_t v, int width)
{
#if PY_LITTLE_ENDIAN
    if (width == 8) memcpy(d, &v, 8);
    else { uint32_t w = (uint32_t)v; memcpy(d, &w, 4); }
#else
    for (int k = 0; k < width; k++) d[k] = (unsigned char)(v >> (8 * k));
#endif
}

/* A validity bitmap as bytes, or None when no value is null. */
static PyObject *dc_bitmap(const unsigned char *bits, Py_ssize_t n, Py_ssize_t nulls)
{
    if (nulls == 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)bits, (n + 7) / 8);
}

static int dc_is_digits(const unsigned char *p, Py_ssize_t n)
{
    if (n <= 0) return 0;
    for (Py_ssize_t i = 0; i < n; i++) if (p[i] < '0' || p[i] > '9') return 0;
    return 1;
}

static long long dc_num(const unsigned char *p, Py_ssize_t n)
{
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    return v;
}

/* the bytes of a bare (unquoted) header value: digits, letters, . + - _ */
static const unsigned char dc_bare_tab[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['.'] = 1, ['+'] = 1, ['-'] = 1, ['_'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
};

/* days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil) */
static long long dc_days(long long y, long long m, long long d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* YYYYmmddTHHMMSS.ffffffZ -> microseconds; 0 when not of that form */
static int dc_micros(const unsigned char *t, Py_ssize_t n, long long *out)
{
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n != 23 || t[8] != 'T' || t[15] != '.' || t[22] != 'Z' || !dc_is_digits(t, 8)
        || !dc_is_digits(t + 9, 6) || !dc_is_digits(t + 16, 6))
        return 0;
    long long y = dc_num(t, 4), mo = dc_num(t + 4, 2), d = dc_num(t + 6, 2);
    long long h = dc_num(t + 9, 2), mi = dc_num(t + 11, 2), s = dc_num(t + 13, 2);
    int leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > (mo == 2 && !leap ? 28 : mdays[mo - 1]))
        return 0;
    if (h > 23 || mi > 59 || s > 59) return 0;
    *out = ((dc_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 1000000) + dc_num(t + 16, 6);
    return 1;
}

#define DC_KEYS 5 /* t, bm, k, x (string columns), ts */

static int dc_key(const unsigned char *k, Py_ssize_t n)
{
    if (n == 1) {
        if (k[0] == 't') return 0;
        if (k[0] == 'k') return 2;
        if (k[0] == 'x') return 3;
    } else if (n == 2) {
        if (k[0] == 'b' && k[1] == 'm') return 1;
        if (k[0] == 't' && k[1] == 's') return 4;
    }
    return -1;
}

/* The aliases of a call: their lengths as a bit mask (lengths 0-63), so that most keys are
 * cleared without a compare; `longer`: one is 64 bytes or more. */
typedef struct {
    PyObject *aliases;
    uint64_t lengths;
    int longer;
} DcAliases;

static int dc_aliased(const DcAliases *al, const unsigned char *key, Py_ssize_t klen)
{
    if (klen < 64 ? !((al->lengths >> klen) & 1) : !al->longer) return 0;
    Py_ssize_t na = PyTuple_GET_SIZE(al->aliases);
    for (Py_ssize_t a = 0; a < na; a++) {
        PyObject *alias = PyTuple_GET_ITEM(al->aliases, a);
        if (PyBytes_GET_SIZE(alias) == klen
            && memcmp(PyBytes_AS_STRING(alias), key, (size_t)klen) == 0)
            return 1;
    }
    return 0;
}

/* The wanted values and the body's offset of one payload; 0: irregular. The quotes are
 * scanned inline (keys and values are short: a memchr call costs more than the scan). */
static int dc_header(const unsigned char *p, Py_ssize_t n, const DcAliases *al,
                     const unsigned char **vals, Py_ssize_t *lens, Py_ssize_t *body)
{
    for (int k = 0; k < DC_KEYS; k++) vals[k] = NULL, lens[k] = 0;
    if (n < 2 || p[0] != '{') return 0;
    Py_ssize_t i = 1;
    if (p[i] == '}') { *body = 2; return 1; }
    for (;;) {
        if (i >= n || p[i] != '"') return 0;
        Py_ssize_t j = i + 1;
        while (j < n && p[j] != '"') {
            if (p[j] == '\\') return 0; /* an escape in a key */
            j++;
        }
        if (j >= n) return 0;
        const unsigned char *key = p + i + 1;
        Py_ssize_t klen = j - i - 1;
        i = j + 1;
        if (i >= n || p[i] != ':') return 0;
        i++;
        if (i >= n) return 0;
        int which = dc_key(key, klen);
        if (which < 0 && dc_aliased(al, key, klen)) return 0;
        if (p[i] == '"') {
            j = i + 1;
            int escaped = 0;
            uint64_t high = 0; /* the OR of the bytes scanned: a high bit if one is not ASCII */
            while (j + 8 <= n) { /* 8 bytes at a time while none is a quote or a backslash */
                uint64_t w, q, e, mq, me;
                memcpy(&w, p + j, 8);
                q = w ^ 0x2222222222222222ULL;
                e = w ^ 0x5C5C5C5C5C5C5C5CULL;
                /* the high bit of each byte that is 0 (exact up to the first such byte) */
                mq = (q - 0x0101010101010101ULL) & ~q & 0x8080808080808080ULL;
                me = (e - 0x0101010101010101ULL) & ~e & 0x8080808080808080ULL;
                if (mq | me) {
#if PY_LITTLE_ENDIAN && defined(__GNUC__)
                    /* the first is a quote: the value ends there (its bytes before, once) */
                    int at = __builtin_ctzll(mq | me);
                    if (mq && (me == 0 || __builtin_ctzll(mq) < __builtin_ctzll(me))) {
                        high |= w & ((1ULL << at) - 1);
                        j += at >> 3;
                    }
#endif
                    break;
                }
                high |= w;
                j += 8;
            }
            while (j < n && p[j] != '"') {
                if (p[j] == '\\') { escaped = 1; j += 2; }
                else high |= p[j++];
            }
            if (j >= n) return 0;
            if (which >= 0) {
                if (escaped || vals[which] != NULL || (high & 0x8080808080808080ULL)) return 0;
                vals[which] = p + i + 1;
                lens[which] = j - i - 1;
            }
            i = j + 1;
        } else {
            if (which >= 0) return 0;
            j = i;
            while (j < n && dc_bare_tab[p[j]]) j++;
            if (j == i) return 0;
            i = j;
        }
        if (i >= n) return 0;
        if (p[i] == ',') { i++; continue; }
        if (p[i] == '}') { *body = i + 1; return 1; }
        return 0;
    }
}

/* bm's publisherId|sequence|... -> the two numbers; 0: not of that form. One pass over the
 * digits (the same checks as the twin's _bookmark: 1-20 digits below 2**64, then 1-19 digits
 * up to 2**63 - 1, each closed by a '|'). */
static int dc_bookmark(const unsigned char *b, Py_ssize_t bl, uint64_t *pid, long long *seq)
{
    uint64_t pv = 0;
    Py_ssize_t k = 0;
#if PY_LITTLE_ENDIAN
    /* the first 16 digits 8 at a time (simdjson's is_made_of_eight_digits_fast and
     * parse_eight_digits_unrolled), the rest one by one */
    while (k + 8 <= bl && k < 16) {
        uint64_t w;
        memcpy(&w, b + k, 8);
        if (((w & 0xF0F0F0F0F0F0F0F0ULL)
             | (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4))
            != 0x3333333333333333ULL)
            break;
        w -= 0x3030303030303030ULL;
        w = w * 10 + (w >> 8);
        w = (((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)))
             + (((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))))
            >> 32;
        pv = pv * 100000000ULL + (uint32_t)w;
        k += 8;
    }
#endif
    while (k < bl && b[k] >= '0' && b[k] <= '9') {
        unsigned d = (unsigned)(b[k] - '0');
        if (k >= 19 && (k >= 20 || pv > (UINT64_MAX - d) / 10)) return 0; /* 19 digits fit */
        pv = pv * 10 + d;
        k++;
    }
    if (k == 0 || k >= bl || b[k] != '|') return 0;
    Py_ssize_t s = ++k;
    unsigned long long qv = 0;
    while (k < bl && b[k] >= '0' && b[k] <= '9') {
        if (k - s >= 19) return 0;
        qv = qv * 10 + (unsigned)(b[k] - '0');
        k++;
    }
    if (k == s || k >= bl || b[k] != '|' || qv > (unsigned long long)INT64_MAX) return 0;
    *pid = pv;
    *seq = (long long)qv;
    return 1;
}

PyObject *
delivery_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "delivery_columns(payloads: list, aliases: tuple)");
        return NULL;
    }
    PyObject *payloads = args[0], *aliases = args[1];
    DcAliases al = {aliases, 0, 0};
    for (Py_ssize_t a = 0; a < PyTuple_GET_SIZE(aliases); a++) {
        PyObject *alias = PyTuple_GET_ITEM(aliases, a);
        if (!PyBytes_Check(alias)) {
            PyErr_SetString(PyExc_TypeError, "aliases must be bytes");
            return NULL;
        }
        Py_ssize_t alen = PyBytes_GET_SIZE(alias);
        if (alen < 64) al.lengths |= (uint64_t)1 << alen;
        else al.longer = 1;
    }
    Py_ssize_t n = PyList_GET_SIZE(payloads), nb = (n + 7) / 8;
    /* The input's size bounds each data column (a value lies inside its payload). */
    Py_ssize_t total = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *item = PyList_GET_ITEM(payloads, r);
        if (PyBytes_Check(item)) total += PyBytes_GET_SIZE(item);
    }
    DcOut off[5] = {{0}}, data[5] = {{0}}, pid = {0}, seq = {0}, mic = {0}; /* 4: body */
    unsigned char *bits[5] = {NULL}; /* t, bm, k, x, ts */
    Py_ssize_t nulls[5] = {0};
    PyObject *result = NULL, *items[18] = {NULL};
    int regular = 1;
    for (int c = 0; c < 5; c++) {
        bits[c] = PyMem_Calloc((size_t)(nb ? nb : 1), 1);
        if (bits[c] == NULL) { PyErr_NoMemory(); goto done; }
        if (dc_open(&off[c], 4 * (n + 1), 4 * (n + 1)) < 0) goto done;
        if (dc_open(&data[c], total, 256) < 0) goto done;
        dc_le(off[c].buf, 0, 4);
        off[c].len = 4;
    }
    if (dc_open(&pid, 16 * n, 16 * n) < 0 || dc_open(&seq, 8 * n, 8 * n) < 0
        || dc_open(&mic, 8 * n, 8 * n) < 0)
        goto done;
    for (Py_ssize_t r = 0; r < n && regular; r++) {
        PyObject *item = PyList_GET_ITEM(payloads, r);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "payloads must be bytes");
            goto done;
        }
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t len = PyBytes_GET_SIZE(item), body = 0;
        const unsigned char *vals[DC_KEYS];
        Py_ssize_t lens[DC_KEYS];
        if (!dc_header(p, len, &al, vals, lens, &body)) { regular = 0; break; }
        /* bm: publisherId|sequence| */
        uint64_t pv = 0;
        long long sv = 0;
        if (vals[1] != NULL && !dc_bookmark(vals[1], lens[1], &pv, &sv)) { regular = 0; break; }
        long long us = 0;
        if (vals[4] != NULL) {
            if (!dc_micros(vals[4], lens[4], &us)) { regular = 0; break; }
            bits[4][r >> 3] |= (unsigned char)(1u << (r & 7));
        } else {
            nulls[4]++;
        }
        vals[4] = p + body; /* from here on, 4 is the body */
        lens[4] = len - body;
        for (int c = 0; c < 5; c++) {
            const unsigned char *v = vals[c];
            Py_ssize_t vl = lens[c];
            if (c < 4) {
                if (v == NULL) nulls[c]++;
                else bits[c][r >> 3] |= (unsigned char)(1u << (r & 7));
            }
            if (v != NULL && vl) {
                if (dc_reserve(&data[c], vl) < 0) goto done;
                dc_copy(data[c].buf + data[c].len, v, vl);
                data[c].len += vl;
            }
            if (data[c].len > INT32_MAX) { regular = 0; break; }
            dc_le(off[c].buf + off[c].len, (uint64_t)data[c].len, 4);
            off[c].len += 4;
        }
        if (!regular) break;
        unsigned char *d = pid.buf + pid.len;
        dc_le(d, pv, 8);
        dc_le(d + 8, 0, 8);
        pid.len += 16;
        dc_le(seq.buf + seq.len, (uint64_t)sv, 8);
        seq.len += 8;
        dc_le(mic.buf + mic.len, (uint64_t)us, 8);
        mic.len += 8;
    }
    if (!regular) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (int c = 0; c < 4; c++) {
        items[3 * c] = dc_close(&off[c]);
        items[3 * c + 1] = dc_close(&data[c]);
        items[3 * c + 2] = dc_bitmap(bits[c], n, nulls[c]);
    }
    items[12] = dc_close(&pid);
    items[13] = dc_close(&seq);
    items[14] = dc_close(&mic);
    items[15] = dc_bitmap(bits[4], n, nulls[4]);
    items[16] = dc_close(&off[4]);
    items[17] = dc_close(&data[4]);
    for (int k = 0; k < 18; k++) if (items[k] == NULL) goto done;
    result = PyTuple_New(18);
    if (result == NULL) goto done;
    for (int k = 0; k < 18; k++) {
        PyTuple_SET_ITEM(result, k, items[k]);
        items[k] = NULL;
    }
done:
    for (int k = 0; k < 18; k++) Py_XDECREF(items[k]);
    for (int c = 0; c < 5; c++) {
        Py_XDECREF(off[c].obj);
        Py_XDECREF(data[c].obj);
        PyMem_Free(bits[c]);
    }
    Py_XDECREF(pid.obj);
    Py_XDECREF(seq.obj);
    Py_XDECREF(mic.obj);
    return result;
}
