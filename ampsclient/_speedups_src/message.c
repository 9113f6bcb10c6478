/* ------------------------------------------------------------------ MessageFields */

/* MessageFields: the storage of an ampsclient.Message, a type this module owns (its twin:
 * ampsclient._accel.PyMessageFields). ampsclient/protocol/message.py builds Message on it and
 * documents its six fields; the receive pass (deliver.c) fills them as Message.refill does. Its
 * fields are public members of a C type, written here through the struct: no attribute of
 * any other class is read or written. The struct: speedups.h. */

#include "speedups.h"

static int
mf_traverse(MessageFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->payload);
    Py_VISIT(self->sub_id);
    Py_VISIT(self->header);
    Py_VISIT(self->data);
    Py_VISIT(self->bookmark);
    Py_VISIT(self->body);
    return 0;
}

static int
mf_clear(MessageFields *self)
{
    Py_CLEAR(self->payload);
    Py_CLEAR(self->sub_id);
    Py_CLEAR(self->header);
    Py_CLEAR(self->data);
    Py_CLEAR(self->bookmark);
    Py_CLEAR(self->body);
    return 0;
}

/* (a Python subclass's dealloc and traverse see to its type's reference) */
static void
mf_dealloc(MessageFields *self)
{
    PyObject_GC_UnTrack(self);
    mf_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef mf_members[] = {
    {"payload_bytes", T_OBJECT_EX, offsetof(MessageFields, payload), 0,
     "The frame's payload, header and body (b\"\" for a message built by the application)."},
    {"routed_sub_id", T_OBJECT_EX, offsetof(MessageFields, sub_id), 0,
     "The subscription the receive path routed the message to, or None."},
    {"parsed_header", T_OBJECT_EX, offsetof(MessageFields, header), 0,
     "The decoded header once parsed (or given), else None."},
    {"parsed_data", T_OBJECT_EX, offsetof(MessageFields, data), 0,
     "The body bytes once cut (or given), else None."},
    {"seen_bookmark", T_OBJECT_EX, offsetof(MessageFields, bookmark), 0,
     "The bm value when the receive path read it without parsing the header, else None."},
    {"body_start", T_OBJECT_EX, offsetof(MessageFields, body), 0,
     "The offset of the body in payload_bytes, -1 while not known."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject MessageFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.MessageFields",
    .tp_basicsize = sizeof(MessageFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "MessageFields()\n\nThe six fields of an ampsclient.Message (its storage; twin: "
              "ampsclient._accel.PyMessageFields). A new instance has none set.",
    .tp_traverse = (traverseproc)mf_traverse,
    .tp_clear = (inquiry)mf_clear,
    .tp_dealloc = (destructor)mf_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = mf_members,
};

PyObject *minus_one = NULL, *plus_one = NULL;

/* ``cls`` is a class whose instances are MessageFields: 0, else -1 with TypeError */
int
check_message_type(PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &MessageFieldsType)) {
        PyErr_SetString(PyExc_TypeError,
                        "message_type must be a subclass of ampsclient._speedups.MessageFields");
        return -1;
    }
    return 0;
}

/* A weak reference to the last class is_message() accepted: a client's deliveries are all of
 * one class (its per-connection Message subclass), so the check is mostly two loads and a
 * comparison instead of a call that walks the MRO (the bookmark lane checks each message
 * twice, in log and in discard). Weak, so that class and what it holds (its client's ack
 * function) are never kept alive from here; a class that died cleared the reference before
 * its memory could hold another class, so a stale address never matches. */
PyObject *message_type_seen = NULL;

int
is_message_slow(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (!PyType_IsSubtype(tp, &MessageFieldsType)) {
        return 0;
    }
#ifndef Py_GIL_DISABLED
    /* (the type's shared plain weak reference once it has one: no allocation then) */
    PyObject *ref = PyWeakref_NewRef((PyObject *)tp, NULL);
    if (ref == NULL) {
        PyErr_Clear(); /* (only the cache is lost) */
    }
    else {
        Py_XSETREF(message_type_seen, ref);
    }
#endif
    return 1;
}

