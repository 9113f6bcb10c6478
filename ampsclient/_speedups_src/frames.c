/* ------------------------------------------------------------------ split_frames
 *
 * The TCP stream cut into payloads (twin: ampsclient.protocol.framing.split_frames).
 */

#include "speedups.h"

SP_DOC(split_frames_doc,
"split_frames(data, pos, limit, out) -> int\n\n"
"Append every whole 4-byte-length-prefixed payload of ``data[pos:]`` to the list ``out``;\n"
"return the offset of the first byte not consumed. A length prefix above ``limit`` stops\n"
"the loop and returns ``-1 - offset`` of that prefix (the caller raises).");

PyObject *
split_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "split_frames() takes 4 arguments");
        return NULL;
    }
    PyObject *data = args[0];
    PyObject *out = args[3];
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "split_frames(): data must be bytes");
        return NULL;
    }
    if (!PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "split_frames(): out must be a list");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long limit = PyLong_AsLongLong(args[2]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    if (pos < 0) {
        pos = 0;
    }
    while (end - pos >= 4) {
        const unsigned char *p = buf + pos;
        unsigned long long n = ((unsigned long long)p[0] << 24) | ((unsigned long long)p[1] << 16)
                               | ((unsigned long long)p[2] << 8) | (unsigned long long)p[3];
        if ((long long)n > limit) {
            return PyLong_FromSsize_t(-1 - pos);
        }
        if ((unsigned long long)(end - pos - 4) < n) {
            break;
        }
        PyObject *frame = PyBytes_FromStringAndSize((const char *)p + 4, (Py_ssize_t)n);
        if (frame == NULL) {
            return NULL;
        }
        int rc = PyList_Append(out, frame);
        Py_DECREF(frame);
        if (rc < 0) {
            return NULL;
        }
        pos += 4 + (Py_ssize_t)n;
    }
    return PyLong_FromSsize_t(pos);
}
