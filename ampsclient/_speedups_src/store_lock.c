/* ------------------------------------------------------------------ StoreLock
 *
 * threading.Lock's interface, with a flag the lane reads: a MemoryBookmarkStore's lock. Its
 * acquire() writes the state its BookmarkLane keeps in C back into the store's records
 * (lane_flush, bookmark_lane.c) before the Python code that took it runs; the lane and the
 * auto-ack handler read ``held`` without a call (the struct: speedups.h).
 */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

static PyObject *
slock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "StoreLock() takes no arguments");
        return NULL;
    }
    StoreLock *self = (StoreLock *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void
slock_dealloc(StoreLock *self)
{
    if (self->lock != NULL) {
        if (self->held) {
            PyThread_release_lock(self->lock);
        }
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the lock is ours (GIL held): mark it and write the lane's state back */
static PyObject *
slock_taken(StoreLock *self)
{
    self->held = 1;
    if (self->lane != NULL && lane_flush(self->lane) < 0) {
        self->held = 0;
        PyThread_release_lock(self->lock);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyObject *
slock_acquire(StoreLock *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout)) {
        return NULL;
    }
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    if (PyThread_acquire_lock_timed(self->lock, 0, 0) == PY_LOCK_ACQUIRED) {
        return slock_taken(self);
    }
    if (!blocking) {
        Py_RETURN_FALSE;
    }
    PY_TIMEOUT_T us = timeout == -1 ? -1 : (PY_TIMEOUT_T)(timeout * 1e6);
    PyLockStatus r;
    do {
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->lock, us, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_INTR && PyErr_CheckSignals() < 0) {
            return NULL; /* e.g. KeyboardInterrupt while waiting */
        }
    } while (r == PY_LOCK_INTR);
    if (r != PY_LOCK_ACQUIRED) {
        Py_RETURN_FALSE;
    }
    return slock_taken(self);
}

static PyObject *
slock_release(StoreLock *self, PyObject *unused)
{
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    self->held = 0;
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *
slock_exit(StoreLock *self, PyObject *args)
{
    return slock_release(self, NULL);
}

static PyObject *
slock_locked(StoreLock *self, PyObject *unused)
{
    return PyBool_FromLong(self->held);
}

static PyMethodDef slock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))slock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool, as threading.Lock's."},
    {"release", (PyCFunction)slock_release, METH_NOARGS, "As threading.Lock's."},
    {"locked", (PyCFunction)slock_locked, METH_NOARGS, "As threading.Lock's."},
    {"__enter__", (PyCFunction)(void (*)(void))slock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire()"},
    {"__exit__", (PyCFunction)slock_exit, METH_VARARGS, "release()"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject StoreLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.StoreLock",
    .tp_basicsize = sizeof(StoreLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "StoreLock()\n\nA threading.Lock for a bookmark store whose BookmarkLane keeps "
              "state in C: acquiring it writes that state back first; the lane reads whether "
              "it is held without a call.",
    .tp_dealloc = (destructor)slock_dealloc,
    .tp_new = slock_new,
    .tp_methods = slock_methods,
};

#endif /* Py_GIL_DISABLED */
