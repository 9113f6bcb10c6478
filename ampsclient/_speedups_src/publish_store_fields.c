/* ------------------------------------------------------------------ publish store fields
 *
 * The fields of the two bundled publish stores that the HA publish lane (publish_lane.c)
 * reads and writes, in two types this module owns (their structs: speedups.h).
 */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

/* PublishIndexFields: the fields of the bundled publish stores' index
 * (ampsclient.stores.publish.base.IndexedPublishStore is built on it and documents them)
 * that the publish lane reads and writes, a type this module owns (twin:
 * ampsclient._accel.PyPublishIndexFields). */

static int
idxfields_traverse(IdxFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->index_closed);
    Py_VISIT(self->index_next);
    Py_VISIT(self->index_count);
    Py_VISIT(self->index_first);
    Py_VISIT(self->index_pad);
    Py_VISIT(self->index_buf);
    Py_VISIT(self->index_lock);
    Py_VISIT(self->index_log);
    return 0;
}

static int
idxfields_clear(IdxFields *self)
{
    Py_CLEAR(self->index_closed);
    Py_CLEAR(self->index_next);
    Py_CLEAR(self->index_count);
    Py_CLEAR(self->index_first);
    Py_CLEAR(self->index_pad);
    Py_CLEAR(self->index_buf);
    Py_CLEAR(self->index_lock);
    Py_CLEAR(self->index_log);
    return 0;
}

static void
idxfields_dealloc(IdxFields *self)
{
    PyObject_GC_UnTrack(self);
    idxfields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef idxfields_members[] = {
    {"index_closed", T_OBJECT_EX, offsetof(IdxFields, index_closed), 0,
     "True once the store is closed."},
    {"index_next", T_OBJECT_EX, offsetof(IdxFields, index_next), 0,
     "The sequence number the next store gets (an int)."},
    {"index_count", T_OBJECT_EX, offsetof(IdxFields, index_count), 0,
     "Live messages in the index (an int)."},
    {"index_first", T_OBJECT_EX, offsetof(IdxFields, index_first), 0,
     "The lowest live sequence number (an int; meaningful when index_count)."},
    {"index_pad", T_OBJECT_EX, offsetof(IdxFields, index_pad), 0,
     "Sequence numbers dropped from the end since the last store (an int)."},
    {"index_buf", T_OBJECT_EX, offsetof(IdxFields, index_buf), 0,
     "The index: a list of payloads (None for a hole)."},
    {"index_lock", T_OBJECT_EX, offsetof(IdxFields, index_lock), 0,
     "The lock that guards every field above."},
    {"index_log", T_OBJECT_EX, offsetof(IdxFields, index_log), 0,
     "The segment files records are written to (a file store), else None."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject IdxFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.PublishIndexFields",
    .tp_basicsize = sizeof(IdxFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PublishIndexFields()\n\nThe index fields of the bundled publish stores that "
              "the publish lane works on (twin: ampsclient._accel.PyPublishIndexFields). A new "
              "instance has no field set.",
    .tp_traverse = (traverseproc)idxfields_traverse,
    .tp_clear = (inquiry)idxfields_clear,
    .tp_dealloc = (destructor)idxfields_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = idxfields_members,
};

/* SegmentLogFields: the fields of ampsclient.stores.publish.segments.SegmentLog that the
 * publish lane reads and writes, a type this module owns (twin:
 * ampsclient._accel.PySegmentLogFields); SegmentLog is built on it and documents them. */

static int
segfields_traverse(SegFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->broken);
    Py_VISIT(self->mm);
    Py_VISIT(self->active_size);
    Py_VISIT(self->map_size);
    Py_VISIT(self->segment_size);
    Py_VISIT(self->write_gen);
    return 0;
}

static int
segfields_clear(SegFields *self)
{
    Py_CLEAR(self->broken);
    Py_CLEAR(self->mm);
    Py_CLEAR(self->active_size);
    Py_CLEAR(self->map_size);
    Py_CLEAR(self->segment_size);
    Py_CLEAR(self->write_gen);
    return 0;
}

static void
segfields_dealloc(SegFields *self)
{
    PyObject_GC_UnTrack(self);
    segfields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef segfields_members[] = {
    {"broken", T_OBJECT_EX, offsetof(SegFields, broken), 0,
     "Why the files refuse writes after an I/O error it could not undo, or None."},
    {"mm", T_OBJECT_EX, offsetof(SegFields, mm), 0,
     "The active segment's mapping (an mmap), or None."},
    {"active_size", T_OBJECT_EX, offsetof(SegFields, active_size), 0,
     "Bytes of data in the active segment (an int)."},
    {"map_size", T_OBJECT_EX, offsetof(SegFields, map_size), 0,
     "Bytes mapped of the active segment (an int)."},
    {"segment_size", T_OBJECT_EX, offsetof(SegFields, segment_size), 0,
     "Roll to a new segment past this many bytes (an int)."},
    {"write_gen", T_OBJECT_EX, offsetof(SegFields, write_gen), 0,
     "Write generation, bumped by each write (an int; group commit)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject SegFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.SegmentLogFields",
    .tp_basicsize = sizeof(SegFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SegmentLogFields()\n\nThe fields of a file publish store's SegmentLog that "
              "the publish lane works on (twin: ampsclient._accel.PySegmentLogFields). A new "
              "instance has no field set.",
    .tp_traverse = (traverseproc)segfields_traverse,
    .tp_clear = (inquiry)segfields_clear,
    .tp_dealloc = (destructor)segfields_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = segfields_members,
};

#endif /* Py_GIL_DISABLED */
