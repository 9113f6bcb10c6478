/* ------------------------------------------------------------------ write_record
 *
 * A FilePublishStore record written in place (twin: write_record in
 * ampsclient/stores/publish/record.py, which describes the format): [u32 length][u32 crc]
 * [msgpack head][payload]. The HA publish lane writes its records with put_record.
 */

#include "speedups.h"

/* The msgpack head of a stored-message record body, [sequence, bin(n)]; returns its size. */
static Py_ssize_t
record_head(unsigned char head[15], unsigned long long seq, Py_ssize_t n)
{
    head[0] = 0x92;
    head[1] = 0xCF;
    for (int i = 0; i < 8; i++) {
        head[2 + i] = (unsigned char)(seq >> (56 - 8 * i));
    }
    if (n < 0x100) {
        head[10] = 0xC4;
        head[11] = (unsigned char)n;
        return 12;
    }
    if (n < 0x10000) {
        head[10] = 0xC5;
        head[11] = (unsigned char)(n >> 8);
        head[12] = (unsigned char)n;
        return 13;
    }
    head[10] = 0xC6;
    be32(head + 11, (uint32_t)n);
    return 15;
}

/* (record_size: speedups.h) */

/* Write the record of (seq, payload) at p, which has record_size(n) bytes of room. */
void
put_record(unsigned char *p, unsigned long long seq, const unsigned char *payload, Py_ssize_t n)
{
    unsigned char head[15];
    Py_ssize_t hlen = record_head(head, seq, n);
    uint32_t crc = crc32_update(crc32_update(0, head, (size_t)hlen), payload, (size_t)n);
    be32(p, (uint32_t)(hlen + n));
    be32(p + 4, crc);
    memcpy(p + 8, head, (size_t)hlen);
    memcpy(p + 8 + hlen, payload, (size_t)n);
}

SP_DOC(write_record_doc,
"write_record(buffer, start, sequence, payload) -> int\n\n"
"Write the FilePublishStore record of ``payload`` (see store_record in\n"
"stores/publish/record.py) into the writable ``buffer`` at ``start``; return its end. The\n"
"caller makes room first (ValueError otherwise).");

PyObject *
write_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "write_record(buffer, start: int, sequence: int, payload: bytes)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[2]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[3]);
    if (n > 0xFFFFFFF0) {
        PyErr_SetString(PyExc_ValueError, "write_record(): payload too large");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    Py_ssize_t end = start + record_size(n);
    if (start < 0 || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "write_record(): no room in the buffer");
        return NULL;
    }
    put_record((unsigned char *)view.buf + start, seq,
               (const unsigned char *)PyBytes_AS_STRING(args[3]), n);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(end);
}
