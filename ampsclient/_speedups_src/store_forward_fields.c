/* ------------------------------------------------------------------ StoreForwardFields
 *
 * StoreForwardFields: an HA client's publish state (ampsclient.ha.store_forward.StoreAndForward
 * holds one as its ``fields``, documents them and alone writes them), a type this module owns
 * (twin: ampsclient._accel.PyStoreForwardFields). The HA publish lane is built on it: it
 * takes the store, the lock and the suffix cache from it once, and reads the gate on each
 * publish. The struct: speedups.h. */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

static int
sffields_traverse(SFFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->store);
    Py_VISIT(self->lock);
    Py_VISIT(self->suffixes);
    Py_VISIT(self->can_send);
    return 0;
}

static int
sffields_clear(SFFields *self)
{
    Py_CLEAR(self->store);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->suffixes);
    Py_CLEAR(self->can_send);
    return 0;
}

static void
sffields_dealloc(SFFields *self)
{
    PyObject_GC_UnTrack(self);
    sffields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef sffields_members[] = {
    {"store", T_OBJECT_EX, offsetof(SFFields, store), 0,
     "The publish store: its index assigns each publish its sequence number."},
    {"lock", T_OBJECT_EX, offsetof(SFFields, lock), 0,
     "Held while a publish is stored and queued, while the gate moves and while replaying."},
    {"suffixes", T_OBJECT_EX, offsetof(SFFields, suffixes), 0,
     "topic -> the tail of a stored publish of that topic (after its sequence number)."},
    {"can_send", T_OBJECT_EX, offsetof(SFFields, can_send), 0,
     "The publish gate: False while publishes are stored, not sent (reconnecting, replaying)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject SFFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.StoreForwardFields",
    .tp_basicsize = sizeof(SFFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "StoreForwardFields()\n\nAn HA client's publish state, which the HA publish lane "
              "is built on (twin: ampsclient._accel.PyStoreForwardFields). A new instance has no "
              "field set.",
    .tp_traverse = (traverseproc)sffields_traverse,
    .tp_clear = (inquiry)sffields_clear,
    .tp_dealloc = (destructor)sffields_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = sffields_members,
};

#endif /* Py_GIL_DISABLED */
