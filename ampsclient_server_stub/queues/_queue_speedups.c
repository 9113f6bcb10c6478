/* Optional C versions of the queue engine's per-message loops.
 *
 * Each function here has exactly one pure-Python twin, the reference (see
 * ampsclient_server_stub/queues/speedups.py, which picks one or the other;
 * AMPSCLIENT_PUREPYTHON=1 forces the Python ones). tests/queues/test_queue_speedups.py runs
 * both on the same cases.
 *
 *   plain_run  the run of plain intake frames ...,"bm":"<bookmark>"}BODY from a position:
 *              (end, [(bookmark, body), ...])  (queues.intake.plain_run)
 *
 * Nothing here touches server state: inputs and outputs are lists, tuples, bytes and str.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static const char BM[] = ",\"bm\":\""; /* 7 */
static const char KEY[] = ",\"k\":\""; /* 6 */
#define BM_LEN 7
#define KEY_LEN 6

/* The first occurrence of needle[0:n] entirely inside hay[0:len], or -1 (bytes.find). */
static Py_ssize_t find(const char *hay, Py_ssize_t len, const char *needle, Py_ssize_t n) {
    const char *p = hay;
    const char *last = hay + len - n; /* the last start a match may have */
    while (p <= last) {
        const char *c = memchr(p, needle[0], (size_t)(last - p + 1));
        if (c == NULL)
            return -1;
        if (memcmp(c, needle, (size_t)n) == 0)
            return c - hay;
        p = c + 1;
    }
    return -1;
}

static PyObject *plain_run(PyObject *self, PyObject *args) {
    PyObject *frames;
    Py_ssize_t start;
    int sow_keys;
    if (!PyArg_ParseTuple(args, "Onp:plain_run", &frames, &start, &sow_keys))
        return NULL;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "plain_run: start must be >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(frames, "plain_run: frames must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t pos = start;
    for (; pos < count; pos++) {
        PyObject *frame = items[pos];
        if (!PyBytes_Check(frame))
            break; /* (frames are bytes; anything else is left to the caller) */
        const char *buf = PyBytes_AS_STRING(frame);
        Py_ssize_t len = PyBytes_GET_SIZE(frame);
        Py_ssize_t i = find(buf, len, BM, BM_LEN);
        if (i <= 0)
            break;
        const char *q = memchr(buf + i + BM_LEN, '"', (size_t)(len - i - BM_LEN));
        if (q == NULL)
            break;
        Py_ssize_t j = q - buf;
        if (j + 1 >= len || buf[j + 1] != '}')
            break;
        if (sow_keys && find(buf, i, KEY, KEY_LEN) >= 0)
            break;
        PyObject *bookmark = PyUnicode_DecodeUTF8(buf + i + BM_LEN, j - i - BM_LEN, NULL);
        if (bookmark == NULL)
            goto error;
        PyObject *body = PyBytes_FromStringAndSize(buf + j + 2, len - j - 2);
        if (body == NULL) {
            Py_DECREF(bookmark);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(bookmark);
            Py_DECREF(body);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, bookmark);
        PyTuple_SET_ITEM(pair, 1, body);
        int failed = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (failed)
            goto error;
    }
    Py_DECREF(seq);
    PyObject *result = Py_BuildValue("(nN)", pos, out);
    return result;
error:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"plain_run", plain_run, METH_VARARGS,
     "plain_run(frames, start, sow_keys) -> (end, [(bookmark, body), ...]): the run of plain "
     "intake frames from start (twin of queues.intake.plain_run)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_queue_speedups",
    "Optional C versions of the queue engine's per-message loops.", -1, methods,
};

PyMODINIT_FUNC PyInit__queue_speedups(void) { return PyModule_Create(&module); }
