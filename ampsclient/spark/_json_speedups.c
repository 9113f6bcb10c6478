/* The fields of flat JSON objects, read into Arrow column buffers in one pass.
 *
 * json_fields(offsets, data, n, names, kinds, strict) -> (columns, redo)
 * payload_fields(payloads, names, kinds, strict) -> (columns, redo): the same, of the bodies
 *     of delivery payloads (after each header's closing brace)
 *
 * Each function here has a pure-Python twin, the reference of its result
 * (ampsclient.spark._jsonfields.py_json_fields, which documents it; AMPSCLIENT_PUREPYTHON=1
 * forces it). tests/spark/test_jsonfields.py runs both on the same cases, and checks both
 * against the row-by-row conversion (json.loads and RowBuilder's converters), which is the
 * specification: a row this code cannot convert exactly as that path does is not guessed
 * but listed in `redo`, for the caller to convert that path.
 *
 * Input: `n` bodies, body i = data[offsets[i]:offsets[i + 1]] (int32 offsets, the layout of
 * an Arrow binary array); the wanted top-level keys (`names`, UTF-8 bytes) and one kind a
 * field (`kinds`: q int64, i int32, h int16, b int8, d double, ? bool, s UTF-8 string).
 * Output: one tuple per field, (values, validity) or for strings (offsets, data, validity),
 * validity None when no value is null; `redo`, the rows left null for the caller.
 *
 * Pure: reads bytes, returns new bytes objects, touches no other state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64   /* deeper nesting: redo (json.loads' own limit is the recursion's) */
#define MAX_NUMBER 600 /* longer number tokens: redo (int's str-digits limit, >= 640) */
#define SCRATCH 256    /* an escaped key up to this long is decoded on the stack */

enum { V_MISSING, V_NULL, V_TRUE, V_FALSE, V_INT, V_FLOAT, V_STR, V_NEST };

typedef struct {
    int type;
    const unsigned char *p; /* a number's token, a string's content (without quotes) */
    Py_ssize_t len;
    int escaped; /* a string with a backslash */
    int ascii;   /* a string of ASCII bytes only */
} Span;

typedef struct {
    char kind;
    const char *name;
    Py_ssize_t name_len;
    unsigned char *values; /* n * width bytes (bits for bool), NULL for strings */
    unsigned char *valid;  /* (n + 7) / 8 bytes */
    Py_ssize_t nulls;
    int32_t *offsets;     /* strings: n + 1 */
    unsigned char *sdata; /* strings: the data, grown as needed */
    Py_ssize_t slen, scap;
    PyObject *values_obj, *valid_obj, *offsets_obj;
} Field;

/* ------------------------------------------------------------------------ scanning */

static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4)
        return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return 0;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 1;
}

/* The closing quote of a string whose content starts at p, or NULL (not a string json.loads
 * takes, or one with a lone surrogate escape: \ud800 alone cannot be UTF-8). */
static const unsigned char *scan_string(const unsigned char *p, const unsigned char *end,
                                        int *escaped, int *ascii) {
    for (;;) {
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p >= end)
            return NULL;
        unsigned char c = *p;
        if (c == '"')
            return p;
        if (c < 0x20)
            return NULL; /* a control character: json.loads (strict) refuses it */
        if (c == '\\') {
            *escaped = 1;
            if (++p >= end)
                return NULL;
            switch (*p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p++;
                continue;
            case 'u': {
                unsigned u;
                if (!hex4(p + 1, end, &u))
                    return NULL;
                p += 5;
                if (u >= 0xDC00 && u <= 0xDFFF)
                    return NULL; /* a lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, end, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return NULL; /* a lone high surrogate */
                    p += 6;
                }
                continue;
            }
            default:
                return NULL;
            }
        }
        /* a UTF-8 sequence, as strict as Python's decoder */
        *ascii = 0;
        Py_ssize_t left = end - p;
        if (c >= 0xC2 && c <= 0xDF) {
            if (left < 2 || (p[1] & 0xC0) != 0x80)
                return NULL;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
                return NULL;
            if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))
                return NULL; /* overlong, or a surrogate */
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
                (p[3] & 0xC0) != 0x80)
                return NULL;
            if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))
                return NULL; /* overlong, or past U+10FFFF */
            p += 4;
        } else {
            return NULL;
        }
    }
}

/* The end of a JSON number starting at p (RFC 8259's grammar, which is json.loads'), or
 * NULL. A '.' or an exponent without digits fails here, as it fails json.loads after the
 * number. */
static const unsigned char *scan_number(const unsigned char *p, const unsigned char *end,
                                        int *is_float) {
    *is_float = 0;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return NULL; /* includes -Infinity: json.loads takes it, we redo */
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *is_float = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *is_float = 1;
    }
    return p;
}

static const unsigned char *scan_value(const unsigned char *p, const unsigned char *end,
                                       int depth, Span *span);

/* An object or array (its opening byte at p), validated and skipped. */
static const unsigned char *scan_nested(const unsigned char *p, const unsigned char *end,
                                        int depth) {
    if (depth > MAX_DEPTH)
        return NULL;
    Span ignored;
    if (*p == '[') {
        p = skip_ws(p + 1, end);
        if (p < end && *p == ']')
            return p + 1;
        for (;;) {
            p = scan_value(p, end, depth, &ignored);
            if (p == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == ']')
                return p + 1;
            if (*p != ',')
                return NULL;
            p = skip_ws(p + 1, end);
        }
    }
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        int escaped = 0, ascii = 1;
        if (p >= end || *p != '"')
            return NULL;
        p = scan_string(p + 1, end, &escaped, &ascii);
        if (p == NULL)
            return NULL;
        p = skip_ws(p + 1, end);
        if (p >= end || *p != ':')
            return NULL;
        p = scan_value(skip_ws(p + 1, end), end, depth, &ignored);
        if (p == NULL)
            return NULL;
        p = skip_ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == '}')
            return p + 1;
        if (*p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

/* One value at p (no whitespace before it): its span, and where it ends, or NULL. */
static const unsigned char *scan_value(const unsigned char *p, const unsigned char *end,
                                       int depth, Span *span) {
    if (p >= end)
        return NULL;
    span->p = p;
    switch (*p) {
    case '"': {
        span->escaped = 0;
        span->ascii = 1;
        const unsigned char *q = scan_string(p + 1, end, &span->escaped, &span->ascii);
        if (q == NULL)
            return NULL;
        span->type = V_STR;
        span->p = p + 1;
        span->len = q - (p + 1);
        return q + 1;
    }
    case '{':
    case '[': {
        const unsigned char *q = scan_nested(p, end, depth + 1);
        if (q == NULL)
            return NULL;
        span->type = V_NEST;
        span->len = q - p;
        return q;
    }
    case 't':
        if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
            span->type = V_TRUE;
            return p + 4;
        }
        return NULL;
    case 'f':
        if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
            span->type = V_FALSE;
            return p + 5;
        }
        return NULL;
    case 'n':
        if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
            span->type = V_NULL;
            return p + 4;
        }
        return NULL;
    default: {
        int is_float;
        const unsigned char *q = scan_number(p, end, &is_float);
        if (q == NULL || q - p > MAX_NUMBER)
            return NULL; /* NaN, Infinity (json.loads takes them): redo too */
        span->type = is_float ? V_FLOAT : V_INT;
        span->len = q - p;
        return q;
    }
    }
}

/* ----------------------------------------------------------------------- converting */

/* The string's content decoded (escapes) as UTF-8 into out (at least len bytes: decoding
 * never grows a string); its length. The content was validated by scan_string. */
static Py_ssize_t decode_string(const unsigned char *p, Py_ssize_t len, unsigned char *out) {
    const unsigned char *end = p + len;
    unsigned char *o = out;
    while (p < end) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        unsigned char c = *p++;
        switch (c) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned u = 0, lo = 0;
            hex4(p, end, &u);
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                hex4(p + 2, end, &lo);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u < 0x80) {
                *o++ = (unsigned char)u;
            } else if (u < 0x800) {
                *o++ = (unsigned char)(0xC0 | (u >> 6));
                *o++ = (unsigned char)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                *o++ = (unsigned char)(0xE0 | (u >> 12));
                *o++ = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                *o++ = (unsigned char)(0x80 | (u & 0x3F));
            } else {
                *o++ = (unsigned char)(0xF0 | (u >> 18));
                *o++ = (unsigned char)(0x80 | ((u >> 12) & 0x3F));
                *o++ = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                *o++ = (unsigned char)(0x80 | (u & 0x3F));
            }
            break;
        }
        default: *o++ = c; break; /* " \ / */
        }
    }
    return o - out;
}

/* Outcome of converting one value. */
enum { C_NULL, C_VALUE, C_MISMATCH, C_REDO, C_ERROR };

static const int64_t LO[] = {INT64_MIN, INT32_MIN, INT16_MIN, INT8_MIN};
static const int64_t HI[] = {INT64_MAX, INT32_MAX, INT16_MAX, INT8_MAX};

static int int_index(char kind) {
    return kind == 'q' ? 0 : kind == 'i' ? 1 : kind == 'h' ? 2 : 3;
}

/* Decimal digits [sign]digits as an integer in [lo, hi]: C_VALUE, or C_MISMATCH (out of
 * range, which is what Python's int() then the range check say). */
static int digits_int(const unsigned char *p, Py_ssize_t len, int64_t lo, int64_t hi,
                      int64_t *out) {
    int neg = 0;
    if (len && (*p == '-' || *p == '+')) {
        neg = *p == '-';
        p++;
        len--;
    }
    while (len > 1 && *p == '0') {
        p++;
        len--;
    }
    if (len > 19)
        return C_MISMATCH;
    uint64_t m = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        m = m * 10 + (uint64_t)(p[i] - '0');
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1)
            return C_MISMATCH;
        int64_t v = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
        if (v < lo)
            return C_MISMATCH;
        *out = v;
    } else {
        if (m > (uint64_t)hi)
            return C_MISMATCH;
        *out = (int64_t)m;
    }
    return C_VALUE;
}

/* float(token) as Python computes it (correctly rounded, locale-free); token validated. */
static int token_double(const unsigned char *p, Py_ssize_t len, double *out) {
    char buf[MAX_NUMBER + 1];
    if (len > MAX_NUMBER)
        return C_REDO;
    memcpy(buf, p, (size_t)len);
    buf[len] = 0;
    char *stop;
    double d = PyOS_string_to_double(buf, &stop, NULL);
    if (stop != buf + len) {
        PyErr_Clear();
        return C_REDO;
    }
    *out = d;
    return C_VALUE;
}

/* Is the whole of p[0:len] one JSON number? (a numeric string for a DOUBLE field) */
static int is_json_number(const unsigned char *p, Py_ssize_t len) {
    int is_float;
    const unsigned char *q = scan_number(p, p + len, &is_float);
    return q == p + len;
}

static int grow(Field *f, Py_ssize_t extra) {
    if (f->slen + extra <= f->scap)
        return 0;
    Py_ssize_t cap = f->scap ? f->scap : 1024;
    while (cap < f->slen + extra)
        cap *= 2;
    unsigned char *p = PyMem_Realloc(f->sdata, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    f->sdata = p;
    f->scap = cap;
    return 0;
}

static int append(Field *f, const void *bytes, Py_ssize_t len) {
    if (grow(f, len) < 0)
        return C_ERROR;
    memcpy(f->sdata + f->slen, bytes, (size_t)len);
    f->slen += len;
    return C_VALUE;
}

/* The value of span for a STRING field appended to f's data. */
static int to_string(Field *f, const Span *s) {
    switch (s->type) {
    case V_STR:
        if (!s->escaped)
            return append(f, s->p, s->len);
        if (grow(f, s->len) < 0)
            return C_ERROR;
        f->slen += decode_string(s->p, s->len, f->sdata + f->slen);
        return C_VALUE;
    case V_TRUE:
        return append(f, "True", 4);
    case V_FALSE:
        return append(f, "False", 5);
    case V_INT:
        if (s->len == 2 && s->p[0] == '-' && s->p[1] == '0')
            return append(f, "0", 1); /* str(int("-0")) */
        return append(f, s->p, s->len);
    case V_FLOAT: {
        double d;
        int r = token_double(s->p, s->len, &d);
        if (r != C_VALUE)
            return r;
        char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL)
            return C_ERROR;
        r = append(f, text, (Py_ssize_t)strlen(text)); /* repr(float) */
        PyMem_Free(text);
        return r;
    }
    default:
        return C_REDO; /* an object or array: json.dumps of it, left to the caller */
    }
}

/* A string's text: its content, or decoded into buf (cap bytes) or a heap block (*heap, for
 * the caller to free); NULL with an exception set when out of memory. */
static const unsigned char *text_of(const Span *s, unsigned char *buf, Py_ssize_t cap,
                                    Py_ssize_t *len, unsigned char **heap) {
    *heap = NULL;
    if (!s->escaped) {
        *len = s->len;
        return s->p;
    }
    unsigned char *out = buf;
    if (s->len > cap) {
        out = *heap = PyMem_Malloc((size_t)s->len);
        if (out == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    *len = decode_string(s->p, s->len, out);
    return out;
}

/* int(text.strip()) for a string's text of [+-]digits (at most MAX_NUMBER bytes); any
 * other text (spaces, underscores, other digits...) is left to the caller. */
static int text_int(const unsigned char *t, Py_ssize_t len, int64_t lo, int64_t hi,
                    int64_t *out) {
    Py_ssize_t i = (len && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
    if (i == len || len > MAX_NUMBER)
        return C_REDO;
    for (; i < len; i++)
        if (t[i] < '0' || t[i] > '9')
            return C_REDO;
    return digits_int(t, len, lo, hi, out);
}

/* float(text) for a string's text that is one JSON number (at most MAX_NUMBER bytes). */
static int text_double(const unsigned char *t, Py_ssize_t len, double *out) {
    if (len > MAX_NUMBER || !is_json_number(t, len))
        return C_REDO; /* float(text) takes more forms: the caller's */
    return token_double(t, len, out);
}

/* A string's text as a boolean: "true"/"false" in any case; other ASCII text does not fit;
 * non-ASCII text is left to the caller (str.lower() of it). */
static int text_bool(const unsigned char *t, Py_ssize_t len, int *out) {
    for (Py_ssize_t i = 0; i < len; i++)
        if (t[i] >= 0x80)
            return C_REDO;
    if (len == 4 && PyOS_strnicmp((const char *)t, "true", 4) == 0) {
        *out = 1;
        return C_VALUE;
    }
    if (len == 5 && PyOS_strnicmp((const char *)t, "false", 5) == 0) {
        *out = 0;
        return C_VALUE;
    }
    return C_MISMATCH;
}

/* A string value for a field of another kind: the text's conversion. */
static int from_text(const Span *s, char kind, int64_t lo, int64_t hi, int64_t *i64,
                     double *d, int *b) {
    unsigned char buf[MAX_NUMBER + 40], *heap;
    Py_ssize_t len;
    const unsigned char *t = text_of(s, buf, (Py_ssize_t)sizeof(buf), &len, &heap);
    if (t == NULL)
        return C_ERROR;
    int r = kind == 'd' ? text_double(t, len, d)
            : kind == '?' ? text_bool(t, len, b)
                          : text_int(t, len, lo, hi, i64);
    PyMem_Free(heap);
    return r;
}

static int to_int(const Span *s, int64_t lo, int64_t hi, int64_t *out) {
    switch (s->type) {
    case V_INT:
        return digits_int(s->p, s->len, lo, hi, out);
    case V_FLOAT: {
        double d;
        int r = token_double(s->p, s->len, &d);
        if (r != C_VALUE)
            return r;
        if (!isfinite(d) || d != floor(d))
            return C_MISMATCH; /* not float.is_integer() */
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
            return C_MISMATCH;
        int64_t v = (int64_t)d;
        if (v < lo || v > hi)
            return C_MISMATCH;
        *out = v;
        return C_VALUE;
    }
    case V_STR: {
        double d;
        int b;
        return from_text(s, 'q', lo, hi, out, &d, &b);
    }
    default:
        return C_MISMATCH; /* a boolean, an object, an array */
    }
}

static int to_double(const Span *s, double *out) {
    switch (s->type) {
    case V_INT: {
        if (s->len == 2 && s->p[0] == '-' && s->p[1] == '0') {
            *out = 0.0; /* float(int("-0")) is 0.0, not -0.0 */
            return C_VALUE;
        }
        if (s->len > 300)
            return C_REDO; /* float(int) may overflow where strtod gives inf */
        return token_double(s->p, s->len, out);
    }
    case V_FLOAT:
        return token_double(s->p, s->len, out);
    case V_STR: {
        int64_t v;
        int b;
        return from_text(s, 'd', 0, 0, &v, out, &b);
    }
    default:
        return C_MISMATCH;
    }
}

static int to_bool(const Span *s, int *out) {
    switch (s->type) {
    case V_TRUE:
        *out = 1;
        return C_VALUE;
    case V_FALSE:
        *out = 0;
        return C_VALUE;
    case V_STR: {
        int64_t v;
        double d;
        return from_text(s, '?', 0, 0, &v, &d, out);
    }
    default:
        return C_MISMATCH;
    }
}

static inline void set_bit(unsigned char *bits, Py_ssize_t i) {
    bits[i >> 3] |= (unsigned char)(1u << (i & 7));
}

/* ------------------------------------------------------------------------- the pass */

/* The spans of the wanted fields of one body; 0, or -1 when it is not an object json.loads
 * reads the same way (then the row is redone), -2 with an exception set. */
static int scan_body(const unsigned char *p, const unsigned char *end, Field *fields,
                     Py_ssize_t nf, Span *spans, unsigned char *scratch) {
    for (Py_ssize_t j = 0; j < nf; j++)
        spans[j].type = V_MISSING;
    p = skip_ws(p, end);
    if (p >= end || *p != '{')
        return -1;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return skip_ws(p + 1, end) == end ? 0 : -1;
    for (;;) {
        int escaped = 0, ascii = 1;
        if (p >= end || *p != '"')
            return -1;
        const unsigned char *key = p + 1;
        p = scan_string(key, end, &escaped, &ascii);
        if (p == NULL)
            return -1;
        Py_ssize_t key_len = p - key;
        p = skip_ws(p + 1, end);
        if (p >= end || *p != ':')
            return -1;
        Span span;
        p = scan_value(skip_ws(p + 1, end), end, 1, &span);
        if (p == NULL)
            return -1;
        if (escaped) { /* compare the key's text */
            unsigned char *heap = NULL, *text = scratch;
            if (key_len > SCRATCH) {
                text = heap = PyMem_Malloc((size_t)key_len);
                if (heap == NULL) {
                    PyErr_NoMemory();
                    return -2;
                }
            }
            key_len = decode_string(key, key_len, text);
            key = text;
            for (Py_ssize_t j = 0; j < nf; j++)
                if (key_len == fields[j].name_len && memcmp(key, fields[j].name, (size_t)key_len) == 0)
                    spans[j] = span; /* the last of equal keys wins, as in a dict */
            PyMem_Free(heap);
        } else {
            for (Py_ssize_t j = 0; j < nf; j++)
                if (key_len == fields[j].name_len && memcmp(key, fields[j].name, (size_t)key_len) == 0)
                    spans[j] = span;
        }
        p = skip_ws(p, end);
        if (p >= end)
            return -1;
        if (*p == '}')
            return skip_ws(p + 1, end) == end ? 0 : -1;
        if (*p != ',')
            return -1;
        p = skip_ws(p + 1, end);
    }
}

/* Convert one row's spans into the fields; C_VALUE (row written), C_REDO or C_ERROR. */
static int convert_row(Field *fields, Py_ssize_t nf, const Span *spans, Py_ssize_t i,
                       int strict, unsigned char *ok) {
    for (Py_ssize_t j = 0; j < nf; j++) {
        Field *f = &fields[j];
        const Span *s = &spans[j];
        ok[j] = 0;
        int r;
        if (s->type == V_MISSING || s->type == V_NULL) {
            r = C_NULL;
        } else if (f->kind == 's') {
            r = to_string(f, s);
        } else if (f->kind == 'd') {
            double d;
            r = to_double(s, &d);
            if (r == C_VALUE)
                memcpy(f->values + i * 8, &d, 8);
        } else if (f->kind == '?') {
            int b;
            r = to_bool(s, &b);
            if (r == C_VALUE && b)
                set_bit(f->values, i);
        } else {
            int k = int_index(f->kind);
            int64_t v;
            r = to_int(s, LO[k], HI[k], &v);
            if (r == C_VALUE) {
                if (k == 0) {
                    memcpy(f->values + i * 8, &v, 8);
                } else if (k == 1) {
                    int32_t w = (int32_t)v;
                    memcpy(f->values + i * 4, &w, 4);
                } else if (k == 2) {
                    int16_t w = (int16_t)v;
                    memcpy(f->values + i * 2, &w, 2);
                } else {
                    int8_t w = (int8_t)v;
                    memcpy(f->values + i, &w, 1);
                }
            }
        }
        if (r == C_MISMATCH)
            r = strict ? C_REDO : C_NULL;
        if (r == C_REDO || r == C_ERROR)
            return r;
        ok[j] = r == C_VALUE;
    }
    return C_VALUE;
}

static int width(char kind) {
    switch (kind) {
    case 'q': case 'd': return 8;
    case 'i': return 4;
    case 'h': return 2;
    default: return 1;
    }
}

/* Where the bodies are: Arrow binary buffers (json_fields), or a list of delivery payloads
 * whose bodies follow their headers (payload_fields). */
typedef struct {
    const int32_t *offs;
    const unsigned char *data;
    Py_ssize_t data_len;
    PyObject *payloads;
} Bodies;

/* The body of a payload: after the header's first '}' with no backslash before it and an
 * even number of quotes before it (ampsclient.protocol.message.body_offset's fast path).
 * 1, or 0 when there is none such (the row is redone: the row path decodes the header). */
static int after_header(const unsigned char *p, Py_ssize_t n, Py_ssize_t *body) {
    Py_ssize_t quotes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '"')
            quotes++;
        else if (c == '\\')
            return 0;
        else if (c == '}' && (quotes & 1) == 0) {
            *body = i + 1;
            return 1;
        }
    }
    return 0;
}

/* Row i's body: 1, 0 (no body found: redo), -1 (an exception is set). */
static int body_of(const Bodies *src, Py_ssize_t i, const unsigned char **p, Py_ssize_t *len) {
    if (src->payloads == NULL) {
        int32_t a = src->offs[i], b = src->offs[i + 1];
        if (a < 0 || b < a || b > src->data_len) {
            PyErr_SetString(PyExc_ValueError, "json_fields: offsets outside the data");
            return -1;
        }
        *p = src->data + a;
        *len = b - a;
        return 1;
    }
    PyObject *item = PyList_GET_ITEM(src->payloads, i);
    if (!PyBytes_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "payload_fields: payloads must be bytes");
        return -1;
    }
    const unsigned char *q = (const unsigned char *)PyBytes_AS_STRING(item);
    Py_ssize_t n = PyBytes_GET_SIZE(item), body;
    if (!after_header(q, n, &body))
        return 0;
    *p = q + body;
    *len = n - body;
    return 1;
}

static PyObject *run_pass(const Bodies *src, Py_ssize_t n, PyObject *names, PyObject *kinds_obj,
                          int strict) {
    PyObject *result = NULL, *columns = NULL, *redo = NULL;
    Field *fields = NULL;
    Span *spans = NULL;
    unsigned char *ok = NULL;
    unsigned char scratch[SCRATCH];
    Py_ssize_t nf = PyTuple_GET_SIZE(names);
    const char *kinds = PyBytes_AS_STRING(kinds_obj);
    if (PyBytes_GET_SIZE(kinds_obj) != nf) {
        PyErr_SetString(PyExc_ValueError, "json_fields: names and kinds do not match");
        goto done;
    }
    fields = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof(Field));
    spans = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof(Span));
    ok = PyMem_Calloc((size_t)(nf ? nf : 1), 1);
    redo = PyList_New(0);
    if (fields == NULL || spans == NULL || ok == NULL || redo == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nbits = (n + 7) / 8;
    for (Py_ssize_t j = 0; j < nf; j++) {
        Field *f = &fields[j];
        PyObject *name = PyTuple_GET_ITEM(names, j);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "json_fields: names must be bytes");
            goto done;
        }
        f->name = PyBytes_AS_STRING(name);
        f->name_len = PyBytes_GET_SIZE(name);
        f->kind = kinds[j];
        if (strchr("qihbd?s", f->kind) == NULL || f->kind == 0) {
            PyErr_Format(PyExc_ValueError, "json_fields: unknown kind %c", f->kind);
            goto done;
        }
        f->valid_obj = PyBytes_FromStringAndSize(NULL, nbits);
        if (f->valid_obj == NULL)
            goto done;
        f->valid = (unsigned char *)PyBytes_AS_STRING(f->valid_obj);
        memset(f->valid, 0, (size_t)nbits);
        if (f->kind == 's') {
            f->offsets_obj = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
            if (f->offsets_obj == NULL)
                goto done;
            f->offsets = (int32_t *)PyBytes_AS_STRING(f->offsets_obj);
            f->offsets[0] = 0;
        } else {
            Py_ssize_t size = f->kind == '?' ? nbits : n * width(f->kind);
            f->values_obj = PyBytes_FromStringAndSize(NULL, size);
            if (f->values_obj == NULL)
                goto done;
            f->values = (unsigned char *)PyBytes_AS_STRING(f->values_obj);
            memset(f->values, 0, (size_t)size);
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *body;
        Py_ssize_t body_len;
        int found = body_of(src, i, &body, &body_len);
        if (found < 0)
            goto done;
        int scanned = found ? scan_body(body, body + body_len, fields, nf, spans, scratch) : -1;
        if (scanned == -2)
            goto done;
        int r = scanned < 0 ? C_REDO : convert_row(fields, nf, spans, i, strict, ok);
        if (r == C_ERROR)
            goto done;
        for (Py_ssize_t j = 0; j < nf; j++) {
            Field *f = &fields[j];
            if (r == C_VALUE && ok[j]) {
                set_bit(f->valid, i);
            } else {
                f->nulls++;
                if (f->kind == '?') /* a redone row's bit may have been set */
                    f->values[i >> 3] &= (unsigned char)~(1u << (i & 7));
                else if (f->kind != 's')
                    memset(f->values + i * width(f->kind), 0, (size_t)width(f->kind));
            }
            if (f->kind == 's') {
                if (r != C_VALUE || !ok[j])
                    f->slen = f->offsets[i]; /* nothing, or what a redone row wrote */
                if (f->slen > INT32_MAX) {
                    PyErr_SetString(PyExc_OverflowError,
                                    "json_fields: a string column over 2 GiB");
                    goto done;
                }
                f->offsets[i + 1] = (int32_t)f->slen;
            }
        }
        if (r == C_REDO) {
            PyObject *k = PyLong_FromSsize_t(i);
            if (k == NULL || PyList_Append(redo, k) < 0) {
                Py_XDECREF(k);
                goto done;
            }
            Py_DECREF(k);
        }
    }
    columns = PyTuple_New(nf);
    if (columns == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < nf; j++) {
        Field *f = &fields[j];
        PyObject *valid = f->nulls ? f->valid_obj : Py_None;
        PyObject *item;
        if (f->kind == 's') {
            PyObject *sdata = PyBytes_FromStringAndSize((const char *)f->sdata, f->slen);
            if (sdata == NULL)
                goto done;
            item = PyTuple_Pack(3, f->offsets_obj, sdata, valid);
            Py_DECREF(sdata);
        } else {
            item = PyTuple_Pack(2, f->values_obj, valid);
        }
        if (item == NULL)
            goto done;
        PyTuple_SET_ITEM(columns, j, item);
    }
    result = PyTuple_Pack(2, columns, redo);
done:
    if (fields != NULL) {
        for (Py_ssize_t j = 0; j < nf; j++) {
            Py_XDECREF(fields[j].values_obj);
            Py_XDECREF(fields[j].valid_obj);
            Py_XDECREF(fields[j].offsets_obj);
            PyMem_Free(fields[j].sdata);
        }
    }
    PyMem_Free(fields);
    PyMem_Free(spans);
    PyMem_Free(ok);
    Py_XDECREF(columns);
    Py_XDECREF(redo);
    return result;
}

PyDoc_STRVAR(json_fields_doc,
"json_fields(offsets, data, n, names, kinds, strict) -> (columns, redo)\n\n"
"The wanted top-level fields of n JSON objects as Arrow column buffers (twin:\n"
"ampsclient.spark._jsonfields.py_json_fields, which documents the result).");

static PyObject *json_fields(PyObject *self, PyObject *args) {
    Py_buffer offsets_buf, data_buf;
    Py_ssize_t n;
    PyObject *names, *kinds_obj;
    int strict;
    if (!PyArg_ParseTuple(args, "y*y*nO!O!p:json_fields", &offsets_buf, &data_buf, &n,
                          &PyTuple_Type, &names, &PyBytes_Type, &kinds_obj, &strict))
        return NULL;
    PyObject *result = NULL;
    if (n < 0 || offsets_buf.len < (n + 1) * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "json_fields: the offsets do not match n");
    } else {
        Bodies src = {(const int32_t *)offsets_buf.buf, (const unsigned char *)data_buf.buf,
                      data_buf.len, NULL};
        result = run_pass(&src, n, names, kinds_obj, strict);
    }
    PyBuffer_Release(&offsets_buf);
    PyBuffer_Release(&data_buf);
    return result;
}

PyDoc_STRVAR(payload_fields_doc,
"payload_fields(payloads, names, kinds, strict) -> (columns, redo)\n\n"
"json_fields of the bodies of a list of delivery payloads, each after its header (twin:\n"
"ampsclient.spark._jsonfields.py_payload_fields).");

static PyObject *payload_fields(PyObject *self, PyObject *args) {
    PyObject *payloads, *names, *kinds_obj;
    int strict;
    if (!PyArg_ParseTuple(args, "O!O!O!p:payload_fields", &PyList_Type, &payloads,
                          &PyTuple_Type, &names, &PyBytes_Type, &kinds_obj, &strict))
        return NULL;
    Bodies src = {NULL, NULL, 0, payloads};
    return run_pass(&src, PyList_GET_SIZE(payloads), names, kinds_obj, strict);
}

static PyMethodDef methods[] = {
    {"json_fields", json_fields, METH_VARARGS, json_fields_doc},
    {"payload_fields", payload_fields, METH_VARARGS, payload_fields_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_json_speedups",
    "The fields of flat JSON objects into Arrow column buffers (optional C speedup).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__json_speedups(void) { return PyModule_Create(&module); }
