/* ------------------------------------------------------------------ PlainPublishLane
 *
 * AsyncClient.publish's common case in C: publish(topic, data) with data bytes or ASCII
 * str, a topic whose header prefix the Python path has cached, and a connection. It queues
 * len + prefix + data and then wakes the writer or waits for room, as the Python path does;
 * anything else (options, other data, a new topic, no connection) calls the Python publish.
 */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

typedef struct {
    PyObject_HEAD
    PyObject *prefixes;      /* topic -> (b'{"c":"p","t":"..."}', length): the encoder's heads */
    Waker w;                 /* the writer's flags, queue, wake, wait, caller write */
    PyObject *slow;          /* AsyncClient.publish, bound */
    PyObject *result;        /* what publish returns: the official 0 (one awaitable int) */
    int enabled;
    unsigned long long fast;
} PlainLane;

static int
plainlane_traverse(PlainLane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->prefixes);
    Py_VISIT(self->slow);
    Py_VISIT(self->result);
    return waker_traverse(&self->w, visit, arg);
}

static int
plainlane_clear(PlainLane *self)
{
    Py_CLEAR(self->prefixes);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->result);
    waker_clear(&self->w);
    self->enabled = 0;
    return 0;
}

static void
plainlane_dealloc(PlainLane *self)
{
    PyObject_GC_UnTrack(self);
    plainlane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
plainlane_init(PlainLane *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"publish", "result", "prefixes", WAKER_KWDS, NULL};
    PyObject *slow, *result, *prefixes;
    Waker given = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!OOOOOO:PlainPublishLane", kwlist, &slow,
                                     &result, &PyDict_Type, &prefixes, WAKER_ARGS(given))) {
        return -1;
    }
    if (!PyDict_CheckExact(prefixes)) {
        PyErr_SetString(PyExc_TypeError, "PlainPublishLane: prefixes must be a dict");
        return -1;
    }
    if (waker_take(&self->w, &given, "PlainPublishLane") < 0) {
        return -1;
    }
    Py_XSETREF(self->prefixes, Py_NewRef(prefixes));
    Py_XSETREF(self->slow, Py_NewRef(slow));
    Py_XSETREF(self->result, Py_NewRef(result));
    self->enabled = 1;
    return 0;
}

static PyObject *
plainlane_publish(PlainLane *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!self->enabled || nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        goto slow;
    }
    PyObject *topic = args[0];
    const char *body;
    Py_ssize_t body_len;
    if (!fast_body(args[1], &body, &body_len) || !PyUnicode_CheckExact(topic)) {
        goto slow;
    }
    PyObject *cached = PyDict_GetItemWithError(self->prefixes, topic); /* borrowed */
    if (cached == NULL || !PyTuple_CheckExact(cached) || PyTuple_GET_SIZE(cached) != 2
        || !PyBytes_CheckExact(PyTuple_GET_ITEM(cached, 0))) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        goto slow; /* a new topic: Python builds and caches its prefix */
    }
    PyObject *transport = self->w.fields->transport;
    if (transport == NULL || transport == Py_None) {
        goto slow; /* not connected: Python raises DisconnectedError */
    }
    PyObject *prefix = PyTuple_GET_ITEM(cached, 0); /* the core encoder's header */
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(prefix);
    Py_ssize_t size = publish_frame_size(prefix_len, 0, 0, body_len);
    if (size < 0) {
        goto slow;
    }
    PyObject *frame = PyBytes_FromStringAndSize(NULL, size);
    if (frame == NULL) {
        return NULL;
    }
    /* publish_frame(prefix, None, b"", body) */
    spell_publish(PyBytes_AS_STRING(frame), PyBytes_AS_STRING(prefix), prefix_len, "", 0, "", 0,
                  body, body_len);
    PyObject *r = PyObject_CallOneArg(self->w.enqueue, frame);
    Py_DECREF(frame);
    if (r == NULL) {
        return NULL;
    }
    Py_DECREF(r);
    self->fast++;
    if (after_enqueue(&self->w) < 0) {
        return NULL;
    }
    if (self->result == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PlainPublishLane is cleared");
        return NULL;
    }
    return Py_NewRef(self->result); /* the official publish's 0 (no store), awaitable */

slow:
    if (self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PlainPublishLane is cleared");
        return NULL;
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
plainlane_disable(PlainLane *self, PyObject *unused)
{
    self->enabled = 0;
    Py_RETURN_NONE;
}

static PyMethodDef plainlane_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))plainlane_publish, METH_FASTCALL | METH_KEYWORDS,
     "AsyncClient.publish, its common case in C (same arguments)."},
    {"disable", (PyCFunction)plainlane_disable, METH_NOARGS,
     "From now on every call goes to the Python publish."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef plainlane_members[] = {
    {"enabled", T_INT, offsetof(PlainLane, enabled), READONLY, "Whether the C path runs."},
    {"fast", T_ULONGLONG, offsetof(PlainLane, fast), READONLY,
     "How many publishes the C path did."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject PlainLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.PlainPublishLane",
    .tp_basicsize = sizeof(PlainLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PlainPublishLane(publish, result, prefixes, fields, outq, enqueue, wake, "
              "wait_writable, caller_write)\n\nAsyncClient.publish's common case in C (see the "
              "C source).",
    .tp_traverse = (traverseproc)plainlane_traverse,
    .tp_clear = (inquiry)plainlane_clear,
    .tp_dealloc = (destructor)plainlane_dealloc,
    .tp_init = (initproc)plainlane_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = plainlane_methods,
    .tp_members = plainlane_members,
};

#endif /* Py_GIL_DISABLED */
