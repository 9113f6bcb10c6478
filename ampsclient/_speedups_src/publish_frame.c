/* ------------------------------------------------------------------ publish_frame
 *
 * One publish as a TCP frame: the 4-byte big-endian payload length, then head, the sequence
 * in decimal (none for None), tail, data. The twin of ampsclient.core.publish.publish_frame
 * (the core's encoder makes head and tail: publish_header); both publish lanes spell their
 * frames with spell_publish, so a lane and the Python paths send the same bytes.
 *
 * join_seq is the same spelling without the length: a stored publish's payload
 * (head + sequence + tail; twin: ampsclient.stores.publish.base.join_seq). The helpers
 * both lanes use too (u64_digits, publish_frame_size, spell_publish) are in speedups.h.
 */

#include "speedups.h"

SP_DOC(publish_frame_doc,
"publish_frame(head, sequence, tail, data) -> bytes\n\n"
"One publish as a TCP frame: length, head, the sequence in decimal (None: none), tail, data\n"
"(twin: ampsclient.core.publish.publish_frame).");

PyObject *
publish_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[2])
        || !PyBytes_CheckExact(args[3]) || (args[1] != Py_None && !PyLong_CheckExact(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "publish_frame(head: bytes, sequence: int | None, "
                                         "tail: bytes, data: bytes)");
        return NULL;
    }
    char buf[24];
    const char *digits = buf;
    Py_ssize_t ndigits = 0;
    PyObject *text = NULL; /* the digits of a sequence outside 0..2**64-1 */
    if (args[1] != Py_None) {
        int overflow = 0;
        long long seq = PyLong_AsLongLongAndOverflow(args[1], &overflow);
        if (seq == -1 && !overflow && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow || seq < 0) {
            PyObject *str = PyObject_Str(args[1]);
            text = str == NULL ? NULL : PyUnicode_AsASCIIString(str);
            Py_XDECREF(str);
            if (text == NULL) {
                return NULL;
            }
            digits = PyBytes_AS_STRING(text);
            ndigits = PyBytes_GET_SIZE(text);
        }
        else {
            char *end = buf + sizeof buf;
            digits = u64_digits((unsigned long long)seq, end);
            ndigits = end - digits;
        }
    }
    Py_ssize_t hn = PyBytes_GET_SIZE(args[0]), tn = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t bn = PyBytes_GET_SIZE(args[3]);
    Py_ssize_t size = publish_frame_size(hn, ndigits, tn, bn);
    PyObject *out = NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_OverflowError, "publish_frame: the payload is over 4 GiB");
    }
    else {
        out = PyBytes_FromStringAndSize(NULL, size);
    }
    if (out != NULL) {
        spell_publish(PyBytes_AS_STRING(out), PyBytes_AS_STRING(args[0]), hn, digits, ndigits,
                      PyBytes_AS_STRING(args[2]), tn, PyBytes_AS_STRING(args[3]), bn);
    }
    Py_XDECREF(text);
    return out;
}

/* ------------------------------------------------------------------ join_seq */

SP_DOC(join_seq_doc,
"join_seq(head, sequence, tail) -> bytes\n\n"
"``head + b\"%d\" % sequence + tail`` in one allocation (a publish store's payload).");

PyObject *
join_seq(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[2])
        || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "join_seq(head: bytes, sequence: int, tail: bytes)");
        return NULL;
    }
    int overflow = 0;
    long long seq = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (overflow || (seq == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        /* huge: the slow, exact way */
        PyObject *text = PyObject_Str(args[1]);
        if (text == NULL) {
            return NULL;
        }
        PyObject *mid = PyUnicode_AsASCIIString(text);
        Py_DECREF(text);
        if (mid == NULL) {
            return NULL;
        }
        PyObject *out = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(args[0])
                                                  + PyBytes_GET_SIZE(mid) + PyBytes_GET_SIZE(args[2]));
        if (out != NULL) {
            char *p = PyBytes_AS_STRING(out);
            memcpy(p, PyBytes_AS_STRING(args[0]), (size_t)PyBytes_GET_SIZE(args[0]));
            p += PyBytes_GET_SIZE(args[0]);
            memcpy(p, PyBytes_AS_STRING(mid), (size_t)PyBytes_GET_SIZE(mid));
            p += PyBytes_GET_SIZE(mid);
            memcpy(p, PyBytes_AS_STRING(args[2]), (size_t)PyBytes_GET_SIZE(args[2]));
        }
        Py_DECREF(mid);
        return out;
    }
    char buf[24];
    char *end = buf + sizeof buf, *digits = end;
    unsigned long long v = seq < 0 ? 0ULL - (unsigned long long)seq : (unsigned long long)seq;
    digits = u64_digits(v, end);
    if (seq < 0) {
        *--digits = '-';
    }
    int len = (int)(end - digits);
    Py_ssize_t hn = PyBytes_GET_SIZE(args[0]), tn = PyBytes_GET_SIZE(args[2]);
    PyObject *out = PyBytes_FromStringAndSize(NULL, hn + len + tn);
    if (out == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, PyBytes_AS_STRING(args[0]), (size_t)hn);
    memcpy(p + hn, digits, (size_t)len);
    memcpy(p + hn + len, PyBytes_AS_STRING(args[2]), (size_t)tn);
    return out;
}
