/* ------------------------------------------------------------------ ws_encode
 *
 * A client's AMPS-over-WebSocket writes: each payload of a TCP-framed buffer becomes the
 * messages count (u32 little-endian: 1, or 2 with a body), header[, body], each a masked
 * RFC 6455 frame (binary for the count; text for header and body in a text session). This
 * is what WebSocketTransport.write + BatchingMixin.frame_many do in Python; anything the
 * fast scan does not settle (a backslash before the header's end, non-ASCII text in a text
 * session, no random source) returns None and Python does the whole buffer.
 */

#include "speedups.h"

#if defined(__linux__)
#include <sys/random.h>
#define HAVE_GETRANDOM 1
#endif

/* The body offset, as protocol.message.body_offset's fast path finds it: the first '}' with
 * an even number of quotes before it. -1: a backslash came first, or there is no such '}'. */
static Py_ssize_t
header_end(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t quotes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\\') {
            return -1;
        }
        if (c == '"') {
            quotes++;
        }
        else if (c == '}' && !(quotes & 1)) {
            return i + 1;
        }
    }
    return -1;
}

static int
all_ascii(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            return 0;
        }
    }
    return 1;
}

static inline Py_ssize_t
ws_frame_size(Py_ssize_t n)
{
    return (n < 126 ? 2 : n < 0x10000 ? 4 : 10) + 4 + n;
}

/* One masked frame of ``n`` bytes at ``out``; returns the bytes written. */
static Py_ssize_t
put_ws_frame(unsigned char *out, unsigned char first, const unsigned char *data, Py_ssize_t n,
             const unsigned char key[4])
{
    unsigned char *q = out;
    *q++ = first;
    if (n < 126) {
        *q++ = (unsigned char)(0x80 | n);
    }
    else if (n < 0x10000) {
        *q++ = 0x80 | 126;
        *q++ = (unsigned char)(n >> 8);
        *q++ = (unsigned char)n;
    }
    else {
        *q++ = 0x80 | 127;
        for (int i = 7; i >= 0; i--) {
            *q++ = (unsigned char)((unsigned long long)n >> (8 * i));
        }
    }
    memcpy(q, key, 4);
    q += 4;
    for (Py_ssize_t i = 0; i < n; i++) {
        q[i] = data[i] ^ key[i & 3];
    }
    return (q - out) + n;
}

SP_DOC(ws_encode_doc,
"ws_encode(data, text) -> bytes | None\n\n"
"The masked WebSocket frames a client sends for the 4-byte-length-prefixed payloads in\n"
"``data`` (count, header, body messages; see the C source), or None when the Python path\n"
"must do it.");

PyObject *
ws_encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "ws_encode(data: bytes, text: bool)");
        return NULL;
    }
#ifndef HAVE_GETRANDOM
    Py_RETURN_NONE;
#else
    int text = PyObject_IsTrue(args[1]);
    if (text < 0) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]), pos = 0, size = 0, messages = 0;
    while (pos < n) { /* pass 1: sizes, and whether this path can take it all */
        if (n - pos < 4) {
            PyErr_SetString(PyExc_ValueError, "ws_encode(): truncated length prefix");
            return NULL;
        }
        Py_ssize_t len = (Py_ssize_t)((uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16
                                      | (uint32_t)p[pos + 2] << 8 | p[pos + 3]);
        pos += 4;
        if (len > n - pos) {
            PyErr_SetString(PyExc_ValueError, "ws_encode(): truncated payload");
            return NULL;
        }
        Py_ssize_t head = header_end(p + pos, len);
        if (head < 0 || (text && !all_ascii(p + pos, len))) {
            Py_RETURN_NONE;
        }
        size += ws_frame_size(4) + ws_frame_size(head);
        messages += 2;
        if (len > head) {
            size += ws_frame_size(len - head);
            messages += 1;
        }
        pos += len;
    }
    unsigned char *keys = PyMem_Malloc(messages ? (size_t)messages * 4 : 1);
    if (keys == NULL) {
        return PyErr_NoMemory();
    }
    size_t want = (size_t)messages * 4, got = 0;
    while (got < want) {
        ssize_t r = getrandom(keys + got, want - got, 0);
        if (r < 0) {
            PyMem_Free(keys);
            Py_RETURN_NONE; /* no random source here: Python's os.urandom path */
        }
        got += (size_t)r;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        PyMem_Free(keys);
        return NULL;
    }
    unsigned char *q = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *key = keys;
    unsigned char text_op = text ? 0x81 : 0x82;
    pos = 0;
    while (pos < n) { /* pass 2: the frames */
        Py_ssize_t len = (Py_ssize_t)((uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16
                                      | (uint32_t)p[pos + 2] << 8 | p[pos + 3]);
        pos += 4;
        Py_ssize_t head = header_end(p + pos, len);
        unsigned char count[4] = {len > head ? 2 : 1, 0, 0, 0};
        q += put_ws_frame(q, 0x82, count, 4, key);
        key += 4;
        q += put_ws_frame(q, text_op, p + pos, head, key);
        key += 4;
        if (len > head) {
            q += put_ws_frame(q, text_op, p + pos + head, len - head, key);
            key += 4;
        }
        pos += len;
    }
    PyMem_Free(keys);
    return out;
#endif
}
