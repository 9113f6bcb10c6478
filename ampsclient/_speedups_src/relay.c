/* ------------------------------------------------------------------ Relay
 *
 * Relay(target): ``relay.call(*args, **kwargs)`` calls ``relay.target`` with them (a C lane's
 * function directly: c_lane_direct). Its twin: ampsclient._accel.PyRelay. An object that hands
 * out a lane which must follow a later change (AsyncHAClient's discard: the bookmark store
 * may be replaced) hands out ``relay.call``, a C function the interpreter calls directly, and
 * changes ``target`` (it alone writes it). Types C owns, public fields only.
 */

#include "speedups.h"

typedef struct {
    PyObject_HEAD
    PyObject *target;
} Relay;

static PyObject *
relay_call(Relay *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *target = self->target;
    if (target == NULL || target == Py_None) {
        PyErr_SetString(PyExc_TypeError, "Relay: no target to call");
        return NULL;
    }
    Py_INCREF(target); /* (the call may replace it) */
    PyObject *r;
    if (!c_lane_direct(target, args, nargs, kwnames, &r)) {
        r = PyObject_Vectorcall(target, args, (size_t)nargs, kwnames);
    }
    Py_DECREF(target);
    return r;
}

static int
relay_init(Relay *self, PyObject *args, PyObject *kwds)
{
    PyObject *target;
    static char *kwlist[] = {"target", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Relay", kwlist, &target)) {
        return -1;
    }
    Py_XSETREF(self->target, Py_NewRef(target));
    return 0;
}

static int
relay_traverse(Relay *self, visitproc visit, void *arg)
{
    Py_VISIT(self->target);
    return 0;
}

static int
relay_clear(Relay *self)
{
    Py_CLEAR(self->target);
    return 0;
}

static void
relay_dealloc(Relay *self)
{
    PyObject_GC_UnTrack(self);
    relay_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef relay_methods[] = {
    {"call", (PyCFunction)(void (*)(void))relay_call, METH_FASTCALL | METH_KEYWORDS,
     "call(*args, **kwargs)\n--\n\nCall the target with these arguments."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef relay_members[] = {
    {"target", T_OBJECT, offsetof(Relay, target), 0, "What call() calls."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject RelayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.Relay",
    .tp_basicsize = sizeof(Relay),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Relay(target)\n\ncall() calls target, which its owner may change "
              "(twin: ampsclient._accel.PyRelay).",
    .tp_traverse = (traverseproc)relay_traverse,
    .tp_clear = (inquiry)relay_clear,
    .tp_dealloc = (destructor)relay_dealloc,
    .tp_init = (initproc)relay_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = relay_methods,
    .tp_members = relay_members,
};
