/* ------------------------------------------------------------------ BookmarkLane
 *
 * MemoryBookmarkStore's common case in C: a delivery whose publisher already has a point
 * and nothing pending becomes the subscription's one in-flight message (log), and
 * discarding that message moves the publisher's point (discard). This is exactly the
 * first branch of MemoryBookmarkStore.log and .discard_message (see there); anything else,
 * including every error, goes to the Python methods given at construction.
 *
 * The lane keeps the numbers of that common case as C state and writes them back into the
 * store's records (the fields of their C base types, bookmark_fields.c) only when a Python
 * method of the store takes its lock:
 * the store's lock is a StoreLock (store_lock.c), whose acquire() writes the lane's state back
 * (lane_flush) before the Python code runs. While it is held the lane stays out of the way
 * (its flag is read without a call; the Python method then waits for the lock). So the
 * Python methods always see the records as if every call had gone through them, and
 * the common case costs no Python object per message beyond the bookmark string itself.
 *
 * What the lane caches between two flushes: one subscription (its sub id, record and
 * publisher record, the publisher's id), that publisher's highest sequence, its done
 * sequence and point, the subscription's next number, and at most one in-flight message
 * (bookmark, sequence, number). Nothing else can change those records meanwhile: every
 * Python method that does takes the lock first.
 */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

struct Lane {
    PyObject_HEAD
    PyObject *subs;          /* the store's dict: sub id -> subscription record */
    StoreLock *lock;         /* the store's lock */
    PyObject *slow_log;      /* MemoryBookmarkStore.log (bound) */
    PyObject *slow_discard;  /* MemoryBookmarkStore.discard_message (bound) */
    PyTypeObject *sub_type, *pub_type;
    int fast_discard;        /* no adapter: discard may finish here */
    int enabled;
    unsigned long long fast_logs, fast_discards, flushes; /* calls done here (tests, statistics) */
    /* the subscription record's fields (offsets in BmSubFields) */
    Py_ssize_t s_inflight, s_last_pub, s_next_no, s_pubs, s_points, s_loaded_ts, s_recent;
    /* the publisher record's fields (offsets in BmPubFields) */
    Py_ssize_t p_high, p_done, p_point, p_queue, p_slot;
    /* the cached common case (c_sub == NULL: nothing cached) */
    PyObject *c_sid, *c_sub, *c_pub, *c_key, *c_point, *c_bm;
    long long c_high, c_done, c_next, c_seq, c_no;
    Py_ssize_t c_slot;
    int c_logged, c_discarded;
};

/* put() (speedups.h) of a new reference (stolen); -1 when value is NULL (an error is set) */
static inline int
put_new(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    if (value == NULL) {
        return -1;
    }
    Py_XSETREF(SLOT(obj, offset), value);
    return 0;
}

static void
lane_forget(Lane *self)
{
    Py_CLEAR(self->c_sid);
    Py_CLEAR(self->c_sub);
    Py_CLEAR(self->c_pub);
    Py_CLEAR(self->c_key);
    Py_CLEAR(self->c_point);
    Py_CLEAR(self->c_bm);
    self->c_logged = self->c_discarded = 0;
}

/* Write the cached state back into the records and forget it; 0, or -1 on error (then
 * nothing is forgotten). */
int
lane_flush(Lane *self)
{
    PyObject *sub = self->c_sub, *pub = self->c_pub;
    if (sub == NULL) {
        return 0;
    }
    if (self->c_logged || self->c_discarded) {
        self->flushes++;
    }
    if (self->c_logged) {
        if (put_new(pub, self->p_high, PyLong_FromLongLong(self->c_high)) < 0
            || put_new(sub, self->s_next_no, PyLong_FromLongLong(self->c_next)) < 0) {
            return -1;
        }
        put(sub, self->s_last_pub, self->c_key);
        self->c_logged = 0;
    }
    if (self->c_discarded) {
        PyObject *points = SLOT(sub, self->s_points);
        if (put_new(pub, self->p_done, PyLong_FromLongLong(self->c_done)) < 0) {
            return -1;
        }
        put(pub, self->p_point, self->c_point);
        if (points != NULL && PyList_CheckExact(points) && self->c_slot < PyList_GET_SIZE(points)) {
            Py_INCREF(self->c_point);
            PyList_SetItem(points, self->c_slot, self->c_point); /* steals */
        }
        put(sub, self->s_loaded_ts, Py_None);
        put(sub, self->s_recent, Py_None);
        self->c_discarded = 0;
    }
    if (self->c_bm != NULL) { /* the in-flight entry: [publisher, sequence, bookmark, number, discarded] */
        PyObject *entry = PyList_New(5);
        PyObject *seq = PyLong_FromLongLong(self->c_seq), *no = PyLong_FromLongLong(self->c_no);
        if (entry == NULL || seq == NULL || no == NULL) {
            Py_XDECREF(entry);
            Py_XDECREF(seq);
            Py_XDECREF(no);
            return -1;
        }
        Py_INCREF(pub);
        PyList_SET_ITEM(entry, 0, pub);
        PyList_SET_ITEM(entry, 1, seq);
        PyList_SET_ITEM(entry, 2, self->c_bm); /* the reference moves */
        self->c_bm = NULL;
        PyList_SET_ITEM(entry, 3, no);
        Py_INCREF(Py_False);
        PyList_SET_ITEM(entry, 4, Py_False);
        put_new(sub, self->s_inflight, entry);
    }
    lane_forget(self);
    return 0;
}

/* ---- BookmarkLane */

static int
lane_traverse(Lane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->subs);
    Py_VISIT(self->slow_log);
    Py_VISIT(self->slow_discard);
    Py_VISIT(self->sub_type);
    Py_VISIT(self->pub_type);
    Py_VISIT(self->c_sub);
    Py_VISIT(self->c_pub);
    return 0;
}

static int
lane_clear(Lane *self)
{
    if (self->lock != NULL && self->lock->lane == self) {
        self->lock->lane = NULL;
    }
    lane_forget(self);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->subs);
    Py_CLEAR(self->slow_log);
    Py_CLEAR(self->slow_discard);
    Py_CLEAR(self->sub_type);
    Py_CLEAR(self->pub_type);
    return 0;
}

static void
lane_dealloc(Lane *self)
{
    PyObject_GC_UnTrack(self);
    lane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
lane_init(Lane *self, PyObject *args, PyObject *kwds)
{
    PyObject *subs, *lock, *slow_log, *slow_discard, *sub_type, *pub_type, *msg_type;
    int fast_discard;
    if (!PyArg_ParseTuple(args, "O!O!OOO!O!Op:BookmarkLane", &PyDict_Type, &subs,
                          &StoreLockType, &lock, &slow_log, &slow_discard, &PyType_Type,
                          &sub_type, &PyType_Type, &pub_type, &msg_type, &fast_discard)) {
        return -1;
    }
    if (self->lock != NULL || ((StoreLock *)lock)->lane != NULL) {
        PyErr_SetString(PyExc_ValueError, "BookmarkLane: that lock already has a lane");
        return -1;
    }
    if (check_message_type(msg_type) < 0) {
        return -1;
    }
    PyTypeObject *st = (PyTypeObject *)sub_type, *pt = (PyTypeObject *)pub_type;
    if (!PyType_IsSubtype(st, &BmSubFieldsType) || !PyType_IsSubtype(pt, &BmPubFieldsType)) {
        PyErr_SetString(PyExc_TypeError, "BookmarkLane: the record types must be built on "
                                         "BookmarkSubscriptionFields and BookmarkPublisherFields");
        return -1;
    }
    /* the fields of this module's own record types (the records' classes are built on them) */
    self->s_inflight = offsetof(BmSubFields, inflight);
    self->s_last_pub = offsetof(BmSubFields, last_pub);
    self->s_next_no = offsetof(BmSubFields, next_no);
    self->s_pubs = offsetof(BmSubFields, pubs);
    self->s_points = offsetof(BmSubFields, points);
    self->s_loaded_ts = offsetof(BmSubFields, loaded_ts);
    self->s_recent = offsetof(BmSubFields, recent);
    self->p_high = offsetof(BmPubFields, high);
    self->p_done = offsetof(BmPubFields, done);
    self->p_point = offsetof(BmPubFields, point);
    self->p_queue = offsetof(BmPubFields, queue);
    self->p_slot = offsetof(BmPubFields, slot);
    Py_INCREF(lock);
    self->lock = (StoreLock *)lock;
    self->lock->lane = self;
    Py_INCREF(subs);
    Py_XSETREF(self->subs, subs);
    Py_INCREF(slow_log);
    Py_XSETREF(self->slow_log, slow_log);
    Py_INCREF(slow_discard);
    Py_XSETREF(self->slow_discard, slow_discard);
    Py_INCREF(sub_type);
    Py_XSETREF(self->sub_type, st);
    Py_INCREF(pub_type);
    Py_XSETREF(self->pub_type, pt);
    self->fast_discard = fast_discard;
    self->enabled = 1;
    return 0;
}

/* the message's bookmark and sub id when both are set str slots (borrowed), else 0 */
static int
message_ids(PyObject *message, PyObject **bm, PyObject **sid)
{
    if (!is_message(message)) {
        return 0;
    }
    *bm = MF(message)->bookmark;
    *sid = MF(message)->sub_id;
    return *bm != NULL && *sid != NULL && PyUnicode_CheckExact(*bm) && PyUnicode_CheckExact(*sid)
           && PyUnicode_GET_LENGTH(*sid) > 0;
}

static inline int
same_str(PyObject *a, PyObject *b)
{
    return a == b
           || (PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) && PyUnicode_IS_ASCII(a)
               && PyUnicode_IS_ASCII(b)
               && memcmp(PyUnicode_1BYTE_DATA(a), PyUnicode_1BYTE_DATA(b),
                         (size_t)PyUnicode_GET_LENGTH(a)) == 0);
}

/* Cache subscription ``sid``'s publisher ``text[:key_len]`` when the common case applies
 * to it (the records as MemoryBookmarkStore.log's first branch needs them): 1; 0 when it
 * does not (the Python method decides); -1 on error. Writes back what was cached first. */
static int
lane_load(Lane *self, PyObject *sid, PyObject *bm, Py_ssize_t key_len)
{
    if (lane_flush(self) < 0) {
        return -1;
    }
    PyObject *sub = PyDict_GetItemWithError(self->subs, sid); /* borrowed */
    if (sub == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!Py_IS_TYPE(sub, self->sub_type) || SLOT(sub, self->s_inflight) != Py_None) {
        return 0;
    }
    PyObject *pubs = SLOT(sub, self->s_pubs), *next_no = SLOT(sub, self->s_next_no);
    PyObject *points = SLOT(sub, self->s_points);
    if (pubs == NULL || !PyDict_CheckExact(pubs) || next_no == NULL || !PyLong_CheckExact(next_no)
        || points == NULL || !PyList_CheckExact(points)) {
        return 0;
    }
    PyObject *key = SLOT(sub, self->s_last_pub);
    const char *text = (const char *)PyUnicode_1BYTE_DATA(bm);
    if (key != NULL && PyUnicode_CheckExact(key) && PyUnicode_IS_ASCII(key)
        && PyUnicode_GET_LENGTH(key) == key_len
        && memcmp(PyUnicode_1BYTE_DATA(key), text, (size_t)key_len) == 0) {
        Py_INCREF(key);
    }
    else {
        key = PyUnicode_Substring(bm, 0, key_len);
        if (key == NULL) {
            return -1;
        }
    }
    PyObject *pub = PyDict_GetItemWithError(pubs, key); /* borrowed */
    if (pub == NULL || !Py_IS_TYPE(pub, self->pub_type)) {
        Py_DECREF(key);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *high = SLOT(pub, self->p_high), *done = SLOT(pub, self->p_done);
    PyObject *point = SLOT(pub, self->p_point), *queue = SLOT(pub, self->p_queue);
    PyObject *slot_obj = SLOT(pub, self->p_slot);
    if (high == NULL || !PyLong_CheckExact(high) || done == NULL || !PyLong_CheckExact(done)
        || point == NULL || !PyUnicode_CheckExact(point) || queue == NULL || slot_obj == NULL
        || !PyLong_CheckExact(slot_obj)) {
        Py_DECREF(key);
        return 0;
    }
    int o1 = 0, o2 = 0, o3 = 0;
    long long h = PyLong_AsLongLongAndOverflow(high, &o1);
    long long d = PyLong_AsLongLongAndOverflow(done, &o2);
    long long n = PyLong_AsLongLongAndOverflow(next_no, &o3);
    Py_ssize_t slot = PyLong_AsSsize_t(slot_obj);
    Py_ssize_t queued = PyObject_Length(queue);
    if (PyErr_Occurred() || queued < 0) {
        Py_DECREF(key);
        return -1;
    }
    if (o1 || o2 || o3 || queued != 0 || slot < 0 || slot >= PyList_GET_SIZE(points)
        || n >= LLONG_MAX - 1) {
        Py_DECREF(key);
        return 0;
    }
    Py_INCREF(sid);
    self->c_sid = sid;
    Py_INCREF(sub);
    self->c_sub = sub;
    Py_INCREF(pub);
    self->c_pub = pub;
    self->c_key = key; /* the reference moves */
    Py_INCREF(point);
    self->c_point = point;
    self->c_high = h;
    self->c_done = d;
    self->c_next = n;
    self->c_slot = slot;
    return 1;
}

/* MemoryBookmarkStore.log's common case: its number (> 0), 0 when the Python method must
 * decide (nothing changed), -1 on error. */
long long
lane_log_number(Lane *self, PyObject *message)
{
    PyObject *bm, *sid;
    if (!self->enabled || self->lock->held || !message_ids(message, &bm, &sid)
        || !PyUnicode_IS_ASCII(bm)) {
        return 0;
    }
    /* publisherId|sequence| with a plain decimal sequence (anything else: Python decides) */
    const char *text = (const char *)PyUnicode_1BYTE_DATA(bm);
    Py_ssize_t size = PyUnicode_GET_LENGTH(bm);
    const char *bar = memchr(text, '|', (size_t)size);
    if (bar == NULL || size < 2 || text[size - 1] != '|') {
        return 0;
    }
    Py_ssize_t key_len = bar - text, digits_at = key_len + 1, digits = size - 1 - digits_at;
    if (digits < 1 || digits > 18) {
        return 0;
    }
    long long seq = 0;
    for (Py_ssize_t i = digits_at; i < size - 1; i++) {
        char ch = text[i];
        if (ch < '0' || ch > '9') {
            return 0;
        }
        seq = seq * 10 + (ch - '0');
    }
    PyObject *key = self->c_key;
    if (self->c_sub == NULL || !same_str(sid, self->c_sid) || PyUnicode_GET_LENGTH(key) != key_len
        || memcmp(PyUnicode_1BYTE_DATA(key), text, (size_t)key_len) != 0) {
        int r = lane_load(self, sid, bm, key_len);
        if (r <= 0) {
            return r;
        }
    }
    if (self->c_bm != NULL || seq <= self->c_high) {
        return 0; /* something in flight already, or a duplicate: Python's branches */
    }
    Py_INCREF(bm);
    self->c_bm = bm;
    self->c_seq = self->c_high = seq;
    self->c_no = self->c_next++;
    self->c_logged = 1;
    self->fast_logs++;
    return self->c_no;
}

PyObject *
lane_log(Lane *self, PyObject *message)
{
    long long no = lane_log_number(self, message);
    if (no < 0) {
        return NULL;
    }
    if (no > 0) {
        return PyLong_FromLongLong(no);
    }
    return PyObject_CallOneArg(self->slow_log, message);
}

static PyObject *
lane_discard(Lane *self, PyObject *message)
{
    PyObject *bm, *sid;
    if (self->c_bm != NULL && self->fast_discard && self->enabled && !self->lock->held
        && message_ids(message, &bm, &sid) && same_str(sid, self->c_sid)) {
        PyObject *inflight = self->c_bm;
        if (inflight == bm || (PyUnicode_IS_ASCII(bm) && same_str(bm, inflight))) {
            /* discard_message's common case: the publisher's only pending message */
            self->c_done = self->c_seq;
            Py_SETREF(self->c_point, inflight); /* the reference moves */
            self->c_bm = NULL;
            self->c_discarded = 1;
            self->fast_discards++;
            Py_RETURN_NONE;
        }
    }
    return PyObject_CallOneArg(self->slow_discard, message);
}

static PyObject *
lane_disable(Lane *self, PyObject *unused)
{
    if (lane_flush(self) < 0) {
        return NULL;
    }
    self->enabled = 0;
    Py_RETURN_NONE;
}

static PyMethodDef lane_methods[] = {
    {"log", (PyCFunction)lane_log, METH_O,
     "MemoryBookmarkStore.log, its common case in C."},
    {"discard", (PyCFunction)lane_discard, METH_O,
     "MemoryBookmarkStore.discard_message, its common case in C."},
    {"disable", (PyCFunction)lane_disable, METH_NOARGS,
     "From now on every call goes to the Python methods (the store closed)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef lane_members[] = {
    {"fast_logs", T_ULONGLONG, offsetof(Lane, fast_logs), READONLY,
     "How many log calls the C path finished."},
    {"fast_discards", T_ULONGLONG, offsetof(Lane, fast_discards), READONLY,
     "How many discard calls the C path finished."},
    {"flushes", T_ULONGLONG, offsetof(Lane, flushes), READONLY,
     "How many times the C state was written back into the store's records."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.BookmarkLane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "BookmarkLane(subs, lock, log, discard_message, Subscription, Publisher, Message, "
              "fast_discard)\n\nMemoryBookmarkStore's common case in C (see the C source); "
              "lock is the store's StoreLock.",
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_init = (initproc)lane_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = lane_methods,
    .tp_members = lane_members,
};

PyObject *
lane_slow_log(Lane *self)
{
    return self->slow_log;
}

/* (lane_of, which the receive pass inlines: speedups.h) */

#endif /* Py_GIL_DISABLED */
