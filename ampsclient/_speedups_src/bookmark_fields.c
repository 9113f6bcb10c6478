/* ------------------------------------------------------------------ bookmark record fields
 *
 * The bookmark store's two record types' fields, types this module owns (twins:
 * ampsclient._accel.PyBookmarkSubscriptionFields, PyBookmarkPublisherFields): the records of
 * ampsclient.stores.bookmark.memory are built on them and document their public fields; the
 * lane (bookmark_lane.c) reads and writes those fields through these structs (speedups.h),
 * no other class's slot. */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

static int
bmsubfields_traverse(BmSubFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->inflight);
    Py_VISIT(self->last_pub);
    Py_VISIT(self->next_no);
    Py_VISIT(self->pubs);
    Py_VISIT(self->points);
    Py_VISIT(self->loaded_ts);
    Py_VISIT(self->recent);
    return 0;
}

static int
bmsubfields_clear(BmSubFields *self)
{
    Py_CLEAR(self->inflight);
    Py_CLEAR(self->last_pub);
    Py_CLEAR(self->next_no);
    Py_CLEAR(self->pubs);
    Py_CLEAR(self->points);
    Py_CLEAR(self->loaded_ts);
    Py_CLEAR(self->recent);
    return 0;
}

static void
bmsubfields_dealloc(BmSubFields *self)
{
    PyObject_GC_UnTrack(self);
    bmsubfields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef bmsubfields_members[] = {
    {"inflight", T_OBJECT_EX, offsetof(BmSubFields, inflight), 0,
     "The one logged, undiscarded entry kept out of the queues, or None."},
    {"last_pub", T_OBJECT_EX, offsetof(BmSubFields, last_pub), 0,
     "Publisher id of the last message logged, or None."},
    {"next_no", T_OBJECT_EX, offsetof(BmSubFields, next_no), 0,
     "The next number log() hands out (an int)."},
    {"pubs", T_OBJECT_EX, offsetof(BmSubFields, pubs), 0,
     "Publisher id -> its record (a dict, first-seen order)."},
    {"points", T_OBJECT_EX, offsetof(BmSubFields, points), 0,
     "Every publisher's point by slot (a list of str, empty for none)."},
    {"loaded_ts", T_OBJECT_EX, offsetof(BmSubFields, loaded_ts), 0,
     "Timestamp item recovered from the adapter, or None."},
    {"recent", T_OBJECT_EX, offsetof(BmSubFields, recent), 0,
     "The cached recovery point, or None (recompute)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject BmSubFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.BookmarkSubscriptionFields",
    .tp_basicsize = sizeof(BmSubFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "BookmarkSubscriptionFields()\n\nThe fields of MemoryBookmarkStore's "
              "per-subscription record that its lane works on (twin: "
              "ampsclient._accel.PyBookmarkSubscriptionFields). A new instance has no field set.",
    .tp_traverse = (traverseproc)bmsubfields_traverse,
    .tp_clear = (inquiry)bmsubfields_clear,
    .tp_dealloc = (destructor)bmsubfields_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = bmsubfields_members,
};

static int
bmpubfields_traverse(BmPubFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->high);
    Py_VISIT(self->done);
    Py_VISIT(self->point);
    Py_VISIT(self->queue);
    Py_VISIT(self->slot);
    return 0;
}

static int
bmpubfields_clear(BmPubFields *self)
{
    Py_CLEAR(self->high);
    Py_CLEAR(self->done);
    Py_CLEAR(self->point);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->slot);
    return 0;
}

static void
bmpubfields_dealloc(BmPubFields *self)
{
    PyObject_GC_UnTrack(self);
    bmpubfields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef bmpubfields_members[] = {
    {"high", T_OBJECT_EX, offsetof(BmPubFields, high), 0,
     "Highest sequence logged or recovered (an int)."},
    {"done", T_OBJECT_EX, offsetof(BmPubFields, done), 0,
     "Highest sequence such that everything up to it is discarded (an int)."},
    {"point", T_OBJECT_EX, offsetof(BmPubFields, point), 0,
     "This publisher's recovery item, or None."},
    {"queue", T_OBJECT_EX, offsetof(BmPubFields, queue), 0,
     "Logged entries not folded into point yet (a deque)."},
    {"slot", T_OBJECT_EX, offsetof(BmPubFields, slot), 0,
     "Index of point in the subscription's points (an int)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject BmPubFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.BookmarkPublisherFields",
    .tp_basicsize = sizeof(BmPubFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "BookmarkPublisherFields()\n\nThe fields of MemoryBookmarkStore's "
              "per-publisher record that its lane works on (twin: "
              "ampsclient._accel.PyBookmarkPublisherFields). A new instance has no field set.",
    .tp_traverse = (traverseproc)bmpubfields_traverse,
    .tp_clear = (inquiry)bmpubfields_clear,
    .tp_dealloc = (destructor)bmpubfields_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = bmpubfields_members,
};

#endif /* Py_GIL_DISABLED */
