/* ------------------------------------------------------------------ LaneMethod
 *
 * LaneMethod(attr, method): a method of a class (its twin: ampsclient._accel.py_lane_method,
 * the decorator ampsclient._accel.lane_method picks one of the two). Called on an instance
 * ``obj`` with arguments ``args``, it calls ``obj.<attr>(*args)`` when that attribute holds
 * something other than None (a C lane's method: the common case in C, no Python frame),
 * else ``method(obj, *args)`` (the Python method written under the decorator). It is a method
 * descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR): ``obj.name(...)`` calls it with ``obj`` first and
 * makes no bound method, as for a Python function. When the lane is itself a lane method
 * bound to another object, that object's lane is looked up at once (no second dispatch).
 * ``attr`` is the attribute the class that declares the method names for its own lane (no
 * other class's field): a slot of that class (read at its offset, found
 * once per type version) or an entry of the instance's __dict__.
 */

#include "speedups.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *attr;   /* str (interned): the instance attribute that holds the lane, or None */
    PyObject *method; /* the Python method (a function taking the instance first) */
    unsigned int version; /* the type (its version tag) whose slot ``attr`` is at... */
    Py_ssize_t offset;    /* ...this offset (0: no slot cached) */
} LaneMethod;

/* obj's lane for lm, a new reference in *lane (NULL: not set). The attribute is a slot of
 * obj's class (__slots__: read at its offset, cached per type version) or an entry of obj's
 * __dict__. -1 on error. */
static int
lanemethod_lane(LaneMethod *lm, PyObject *obj, PyObject **lane)
{
    PyTypeObject *tp = Py_TYPE(obj);
    Py_ssize_t offset = 0;
    if (lm->version != 0 && tp->tp_version_tag == lm->version) {
        offset = lm->offset;
    }
    else {
        PyObject *descr = _PyType_Lookup(tp, lm->attr); /* borrowed; sets the version tag */
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && member->offset > 0) {
                offset = member->offset;
                if (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) {
                    lm->version = tp->tp_version_tag;
                    lm->offset = offset;
                }
            }
        }
    }
    if (offset > 0) {
        *lane = Py_XNewRef(*(PyObject **)((char *)obj + offset));
        return 0;
    }
    PyObject **dictptr = _PyObject_GetDictPtr(obj);
    if (dictptr == NULL) {
        PyErr_Format(PyExc_TypeError, "LaneMethod: %R has neither the slot nor a __dict__", obj);
        return -1;
    }
    /* (an exact-str key: the lookup runs no Python code) */
    *lane = *dictptr == NULL ? NULL : PyDict_GetItemWithError(*dictptr, lm->attr);
    Py_XINCREF(*lane);
    return *lane == NULL && PyErr_Occurred() ? -1 : 0;
}

#define LANE_FOLD_MAX 4     /* lane methods followed through (a facade's, its client's...) */
#define LANE_STACK_ARGS 8   /* arguments a folded body call copies on the C stack */

/* (c_lane_direct, which Relay uses too: speedups.h) */

static PyObject *
lanemethod_vectorcall(LaneMethod *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%R needs the instance as its first argument",
                     self->method);
        return NULL;
    }
    /* Follow the lanes: when one is itself a lane method bound to another object (a sync
     * facade's lane is its asyncio client's method), look that object's lane up here too,
     * instead of calling through one more bound method and dispatch. */
    LaneMethod *lm = (LaneMethod *)Py_NewRef(self);
    PyObject *obj = Py_NewRef(args[0]);
    PyObject *lane = NULL;
    for (int depth = 0;; depth++) {
        if (lanemethod_lane(lm, obj, &lane) < 0) {
            goto error;
        }
        if (lane == NULL || lane == Py_None) {
            Py_CLEAR(lane);
            break; /* not set (yet) or None: lm's Python method, on obj */
        }
        if (depth < LANE_FOLD_MAX && PyMethod_Check(lane)
            && Py_IS_TYPE(PyMethod_GET_FUNCTION(lane), &LaneMethodType)) {
            Py_SETREF(lm, (LaneMethod *)Py_NewRef(PyMethod_GET_FUNCTION(lane)));
            Py_SETREF(obj, Py_NewRef(PyMethod_GET_SELF(lane)));
            Py_CLEAR(lane);
            if (lm->vectorcall == NULL) {
                PyErr_SetString(PyExc_RuntimeError, "LaneMethod is not initialised");
                goto error;
            }
            continue;
        }
        break;
    }
    PyObject *r;
    if (lane != NULL && c_lane_direct(lane, args + 1, nargs - 1, kwnames, &r)) {
        Py_DECREF(lane); /* a C lane's method: its function, called as the interpreter would */
    }
    else if (lane != NULL) {
        /* args[0] may be overwritten by the callee: the slot before args[1] is ours */
        r = PyObject_Vectorcall(lane, args + 1,
                                (size_t)(nargs - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
        Py_DECREF(lane);
    }
    else if (obj == args[0]) {
        r = PyObject_Vectorcall(lm->method, args, nargsf, kwnames);
    }
    else {
        /* the body of a lane method further down: the same arguments, its own instance */
        PyObject *method = Py_NewRef(lm->method);
        Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
        if (total <= LANE_STACK_ARGS) {
            PyObject *stack[LANE_STACK_ARGS];
            stack[0] = obj;
            for (Py_ssize_t i = 1; i < total; i++) {
                stack[i] = args[i];
            }
            r = PyObject_Vectorcall(method, stack, (size_t)nargs, kwnames);
        }
        else {
            PyObject *bound = PyMethod_New(method, obj);
            r = bound == NULL ? NULL
                              : PyObject_Vectorcall(bound, args + 1, (size_t)(nargs - 1), kwnames);
            Py_XDECREF(bound);
        }
        Py_DECREF(method);
    }
    Py_DECREF(obj);
    Py_DECREF(lm);
    return r;

error:
    Py_DECREF(obj);
    Py_DECREF(lm);
    return NULL;
}

/* obj.name: the lane itself when it is a C function (followed through lane methods, as a
 * call follows them), so that a caller who holds ``obj.name`` calls the lane with no dispatch
 * at all (the interpreter calls a C function directly); else a bound method, which looks the
 * lane up at each call. A C lane is never replaced under a holder: a replaced publish lane
 * is disabled (it then calls the Python body), the bookmark discard lane is a Relay whose
 * target follows the store. */
static PyObject *
lanemethod_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    LaneMethod *lm = (LaneMethod *)self;
    PyObject *at = obj; /* borrowed: obj, or the self of a bound lane method held below */
    PyObject *lane = NULL;
    for (int depth = 0; depth <= LANE_FOLD_MAX; depth++) {
        if (lm->vectorcall == NULL || lanemethod_lane(lm, at, &lane) < 0) {
            PyErr_Clear(); /* (the call reports it) */
            break;
        }
        if (lane == NULL || lane == Py_None) {
            break;
        }
        if (PyCFunction_CheckExact(lane)) {
            return lane;
        }
        if (PyMethod_Check(lane) && Py_IS_TYPE(PyMethod_GET_FUNCTION(lane), &LaneMethodType)) {
            lm = (LaneMethod *)PyMethod_GET_FUNCTION(lane);
            at = PyMethod_GET_SELF(lane);
            Py_DECREF(lane); /* (lm and at stay alive: held by the object one level up) */
            lane = NULL;
            continue;
        }
        break;
    }
    Py_XDECREF(lane);
    return PyMethod_New(self, obj);
}

static int
lanemethod_init(LaneMethod *self, PyObject *args, PyObject *kwds)
{
    PyObject *attr, *method;
    if (!PyArg_ParseTuple(args, "UO:LaneMethod", &attr, &method)) {
        return -1;
    }
    if (!PyCallable_Check(method)) {
        PyErr_SetString(PyExc_TypeError, "LaneMethod: the method must be callable");
        return -1;
    }
    Py_INCREF(attr);
    PyUnicode_InternInPlace(&attr);
    Py_XSETREF(self->attr, attr);
    Py_XSETREF(self->method, Py_NewRef(method));
    self->version = 0;
    self->offset = 0;
    self->vectorcall = (vectorcallfunc)lanemethod_vectorcall;
    return 0;
}

static PyObject *
lanemethod_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    LaneMethod *self = (LaneMethod *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = NULL; /* until __init__ ran: tp_call refuses */
    }
    return (PyObject *)self;
}

static PyObject *
lanemethod_tp_call(PyObject *callable, PyObject *args, PyObject *kwds)
{
    if (((LaneMethod *)callable)->vectorcall == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LaneMethod is not initialised");
        return NULL;
    }
    return PyVectorcall_Call(callable, args, kwds);
}

static int
lanemethod_traverse(LaneMethod *self, visitproc visit, void *arg)
{
    Py_VISIT(self->method);
    return 0;
}

static int
lanemethod_clear(LaneMethod *self)
{
    Py_CLEAR(self->attr);
    Py_CLEAR(self->method);
    self->vectorcall = NULL;
    return 0;
}

static void
lanemethod_dealloc(LaneMethod *self)
{
    PyObject_GC_UnTrack(self);
    lanemethod_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* __doc__, __name__, __qualname__, __module__, __annotations__: the Python method's */
static PyObject *
lanemethod_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)
        || ((LaneMethod *)self)->method == NULL) {
        return r;
    }
    if (PyUnicode_Check(name) && PyUnicode_READ_CHAR(name, 0) == '_'
        && PyUnicode_GET_LENGTH(name) > 4) { /* dunders only */
        PyErr_Clear();
        return PyObject_GetAttr(((LaneMethod *)self)->method, name);
    }
    return NULL;
}

static PyObject *
lanemethod_doc(LaneMethod *self, void *unused)
{
    if (self->method == NULL) {
        Py_RETURN_NONE;
    }
    return PyObject_GetAttrString(self->method, "__doc__");
}

static PyMemberDef lanemethod_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(LaneMethod, method), READONLY, "The Python method."},
    {"attr", T_OBJECT, offsetof(LaneMethod, attr), READONLY,
     "The instance attribute that holds the lane."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef lanemethod_getset[] = {
    {"__doc__", (getter)lanemethod_doc, NULL, "The Python method's docstring.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject LaneMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.LaneMethod",
    .tp_basicsize = sizeof(LaneMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(LaneMethod, vectorcall),
    .tp_call = lanemethod_tp_call,
    .tp_descr_get = lanemethod_get,
    .tp_getattro = lanemethod_getattro,
    .tp_traverse = (traverseproc)lanemethod_traverse,
    .tp_clear = (inquiry)lanemethod_clear,
    .tp_dealloc = (destructor)lanemethod_dealloc,
    .tp_init = (initproc)lanemethod_init,
    .tp_new = lanemethod_new,
    .tp_members = lanemethod_members,
    .tp_getset = lanemethod_getset,
};
