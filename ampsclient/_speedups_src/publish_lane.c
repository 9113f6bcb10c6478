/* ------------------------------------------------------------------ PublishLane
 *
 * AsyncHAClient.publish's common case in C: a plain publish (topic and data, no options)
 * while the client can send and nobody holds its publish lock or the store's lock. It does
 * what the Python path does (AsyncHAClient.publish -> _store_and_send -> store_parts of
 * MemoryPublishStore or FilePublishStore), in the same order:
 *
 *   payload = head + b"%d" % s + suffix(topic) + data, s = the store's index_next, head the
 *   core encoder's head of a stored p (publish_header("p", "", sequenced=True)[0], given);
 *   (file store) the record of (s, payload) copied into the active segment's mapping
 *   (store.segment_log, SegmentLog.write_stores in ampsclient/stores/publish/segments.py);
 *   the payload appended to the store's index; the length-prefixed frame to the client's
 *   write queue; then, outside the atomic part, wake the writer / wait while blocked.
 *
 * Anything else goes to the Python publish given at construction: options, data that is
 * neither bytes nor ASCII str, a topic seen for the first time, a closed or broken store,
 * a store index with trailing holes, a record that would grow or roll the segment, and
 * every moment a lock is held (a reconnect replaying, a discard running, another thread
 * in the Python path). Between its checks and its writes it calls no Python code and
 * creates no object the garbage collector tracks (bytes and ints only), so under the GIL
 * the whole step is atomic with respect to the Python methods, which keep their locks.
 * The store's fields are those of this module's PublishIndexFields and SegmentLogFields;
 * the HA client's publish state (the store, the publish lock, the suffix cache, the gate
 * can_send) those of the StoreForwardFields it is built on; the writer's flags (transport,
 * wake_pending, blocked, caller_writes) those of its WriterFields. The rest (the head, the
 * write queue and its append, the writer's wake/wait/caller-write) is given to the
 * constructor, as values: nothing is looked up by an attribute name of ours.
 */

#include "speedups.h"

#ifndef Py_GIL_DISABLED

PyObject *str_locked = NULL; /* threading.Lock's locked(): the standard library's name */

typedef struct {
    PyObject_HEAD
    SFFields *state;          /* the HA client's publish state: the gate is read per publish */
    PyObject *store;          /* state->store, taken at construction */
    PyObject *log;            /* store.segment_log (a file store), else NULL */
    PyObject *head;           /* the core encoder's head of a stored p, up to its "s": */
    PyObject *pub_locked;     /* state->lock's .locked */
    PyObject *store_locked;   /* the store's index_lock, its .locked */
    PyObject *suffixes;       /* state->suffixes: topic -> b',"a":"persisted","t":"..."}' */
    Waker w;                  /* the writer's flags, queue, wake, wait, caller write */
    PyObject *slow;           /* AsyncHAClient.publish, bound */
    int file;                 /* a FilePublishStore: write the record too */
    int enabled;
    unsigned long long fast;  /* publishes done here (tests, statistics) */
    Py_ssize_t o_closed, o_next, o_count, o_first, o_pad, o_buf;
    Py_ssize_t o_broken, o_mm, o_active, o_map_size, o_segment_size, o_write_gen;
} PublishLane;

static int
publane_traverse(PublishLane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->state);
    Py_VISIT(self->store);
    Py_VISIT(self->log);
    Py_VISIT(self->head);
    Py_VISIT(self->pub_locked);
    Py_VISIT(self->store_locked);
    Py_VISIT(self->suffixes);
    Py_VISIT(self->slow);
    return waker_traverse(&self->w, visit, arg);
}

static int
publane_clear(PublishLane *self)
{
    Py_CLEAR(self->state);
    Py_CLEAR(self->store);
    Py_CLEAR(self->log);
    Py_CLEAR(self->head);
    Py_CLEAR(self->pub_locked);
    Py_CLEAR(self->store_locked);
    Py_CLEAR(self->suffixes);
    Py_CLEAR(self->slow);
    waker_clear(&self->w);
    self->enabled = 0;
    return 0;
}

static void
publane_dealloc(PublishLane *self)
{
    PyObject_GC_UnTrack(self);
    publane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
take_attr(PyObject *obj, PyObject *name, PyObject **field)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) {
        return -1;
    }
    Py_XSETREF(*field, value);
    return 0;
}

static int
publane_init(PublishLane *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"state", "file", "publish", "head", WAKER_KWDS, NULL};
    PyObject *state_obj, *slow, *head;
    int file;
    Waker given = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!pOSOOOOOO:PublishLane", kwlist, &SFFieldsType,
                                     &state_obj, &file, &slow, &head, WAKER_ARGS(given))) {
        return -1;
    }
    SFFields *state = (SFFields *)state_obj;
    PyObject *store = state->store, *lock = state->lock, *suffixes = state->suffixes;
    if (store == NULL || !PyObject_TypeCheck(store, &IdxFieldsType)) {
        PyErr_SetString(PyExc_TypeError, "PublishLane: the store must be built on "
                                         "PublishIndexFields");
        return -1;
    }
    if (lock == NULL || suffixes == NULL || !PyDict_CheckExact(suffixes)
        || !PyBytes_CheckExact(head)) {
        PyErr_SetString(PyExc_TypeError, "PublishLane: the state needs a lock and a suffixes "
                                         "dict, head must be bytes");
        return -1;
    }
    if (waker_take(&self->w, &given, "PublishLane") < 0) {
        return -1;
    }
    /* the fields of this module's own PublishIndexFields (the stores are built on it) */
    self->o_closed = offsetof(IdxFields, index_closed);
    self->o_next = offsetof(IdxFields, index_next);
    self->o_count = offsetof(IdxFields, index_count);
    self->o_first = offsetof(IdxFields, index_first);
    self->o_pad = offsetof(IdxFields, index_pad);
    self->o_buf = offsetof(IdxFields, index_buf);
    IdxFields *index = (IdxFields *)store;
    if (index->index_lock == NULL) {
        PyErr_SetString(PyExc_TypeError, "PublishLane: the store has no index_lock");
        return -1;
    }
    if (file) {
        /* the segment files (ampsclient/stores/publish/segments.py), the store's index_log */
        Py_XSETREF(self->log, Py_XNewRef(index->index_log));
        if (self->log == NULL || !PyObject_TypeCheck(self->log, &SegFieldsType)) {
            PyErr_SetString(PyExc_TypeError, "PublishLane: the store's segment log must be "
                                             "built on SegmentLogFields");
            return -1;
        }
        /* the fields of this module's own SegmentLogFields (SegmentLog is built on it) */
        self->o_broken = offsetof(SegFields, broken);
        self->o_mm = offsetof(SegFields, mm);
        self->o_active = offsetof(SegFields, active_size);
        self->o_map_size = offsetof(SegFields, map_size);
        self->o_segment_size = offsetof(SegFields, segment_size);
        self->o_write_gen = offsetof(SegFields, write_gen);
    }
    if (take_attr(lock, str_locked, &self->pub_locked) < 0
        || take_attr(index->index_lock, str_locked, &self->store_locked) < 0) {
        return -1;
    }
    Py_XSETREF(self->state, (SFFields *)Py_NewRef(state));
    Py_XSETREF(self->head, Py_NewRef(head));
    Py_XSETREF(self->suffixes, Py_NewRef(suffixes));
    Py_XSETREF(self->store, Py_NewRef(store));
    Py_XSETREF(self->slow, Py_NewRef(slow));
    self->file = file;
    self->enabled = 1;
    return 0;
}

/* 1 when the callable (a lock's .locked) says the lock is free, 0 held, -1 error */
static int
lock_free(PyObject *locked)
{
    PyObject *r = PyObject_CallNoArgs(locked);
    if (r == NULL) {
        return -1;
    }
    int held = PyObject_IsTrue(r);
    Py_DECREF(r);
    return held < 0 ? -1 : !held;
}

/* a non-negative int slot's value, or -1 (not set, not an int, negative or huge) */
static long long
slot_ll(PyObject *obj, Py_ssize_t offset)
{
    PyObject *v = SLOT(obj, offset);
    if (v == NULL || !PyLong_CheckExact(v)) {
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || x < 0) {
        PyErr_Clear();
        return -1;
    }
    return x;
}

static PyObject *
publane_publish(PublishLane *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *payload = NULL, *frame = NULL, *next_obj = NULL, *count_obj = NULL;
    PyObject *active_obj = NULL, *gen_obj = NULL;
    Py_buffer view;
    view.obj = NULL;
    if (!self->enabled || nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        goto slow;
    }
    PyObject *topic = args[0];
    const char *body;
    Py_ssize_t body_len;
    if (!fast_body(args[1], &body, &body_len) || !PyUnicode_CheckExact(topic)) {
        goto slow;
    }
    PyObject *suffix = PyDict_GetItemWithError(self->suffixes, topic); /* borrowed */
    if (suffix == NULL || !PyBytes_CheckExact(suffix)) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        goto slow; /* a new topic: Python builds and caches its suffix */
    }
    /* the gate open (logged on, replayed: the state's), the writer connected (its fields) */
    PyObject *transport = self->state->can_send == Py_True ? self->w.fields->transport : NULL;
    if (transport == NULL || transport == Py_None) {
        goto slow;
    }
    int free_ = lock_free(self->pub_locked);
    if (free_ > 0) {
        free_ = lock_free(self->store_locked);
    }
    if (free_ <= 0) {
        if (free_ < 0) {
            goto error;
        }
        goto slow;
    }
    /* the store: open, no trailing holes to restore */
    PyObject *store = self->store;
    PyObject *buf = SLOT(store, self->o_buf);
    long long seq = slot_ll(store, self->o_next), count = slot_ll(store, self->o_count);
    if (SLOT(store, self->o_closed) != Py_False || slot_ll(store, self->o_pad) != 0 || seq < 0
        || count < 0 || seq >= LLONG_MAX || buf == NULL || !PyList_CheckExact(buf)) {
        goto slow;
    }
    char digits_buf[24];
    char *digits_end = digits_buf + sizeof digits_buf, *digits = digits_end;
    digits = u64_digits((unsigned long long)seq, digits_end);
    Py_ssize_t ndigits = digits_end - digits, suffix_len = PyBytes_GET_SIZE(suffix);
    Py_ssize_t head_len = PyBytes_GET_SIZE(self->head);
    Py_ssize_t n = head_len + ndigits + suffix_len + body_len;
    if (publish_frame_size(head_len, ndigits, suffix_len, body_len) < 0) {
        goto slow;
    }
    long long start = 0, end = 0, gen = 0;
    if (self->file) {
        PyObject *log = self->log;
        PyObject *mm = SLOT(log, self->o_mm);
        start = slot_ll(log, self->o_active);
        gen = slot_ll(log, self->o_write_gen);
        long long map_size = slot_ll(log, self->o_map_size);
        long long segment_size = slot_ll(log, self->o_segment_size);
        end = start + record_size(n);
        if (SLOT(log, self->o_broken) != Py_None || mm == NULL || mm == Py_None || start < 0
            || gen < 0 || map_size < 0 || segment_size < 0 || end > map_size
            || end >= segment_size || n > 0xFFFFFFF0) {
            goto slow; /* broken, or the segment must grow or roll: Python does it */
        }
        if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            view.obj = NULL;
            goto slow;
        }
        if (end > view.len) {
            goto slow;
        }
        active_obj = PyLong_FromLongLong(end);
        gen_obj = PyLong_FromLongLong(gen + 1);
        if (active_obj == NULL || gen_obj == NULL) {
            goto error;
        }
    }
    /* every object first (bytes and ints: no GC), then the writes, which cannot fail */
    frame = PyBytes_FromStringAndSize(NULL, 4 + n);
    next_obj = PyLong_FromLongLong(seq + 1);
    count_obj = PyLong_FromLongLong(count + 1);
    if (frame == NULL || next_obj == NULL || count_obj == NULL) {
        goto error;
    }
    /* the frame as publish_frame spells it; the stored payload is the frame after its length */
    const char *p = spell_publish(PyBytes_AS_STRING(frame), PyBytes_AS_STRING(self->head), head_len,
                                  digits, ndigits, PyBytes_AS_STRING(suffix), suffix_len, body,
                                  body_len);
    payload = PyBytes_FromStringAndSize(p, n);
    if (payload == NULL) {
        goto error;
    }
    if (PyList_Append(buf, payload) < 0) { /* the only write that can fail: first */
        goto error;
    }
    if (self->file) {
        put_record((unsigned char *)view.buf + start, (unsigned long long)seq,
                   (const unsigned char *)p, n);
        PyBuffer_Release(&view);
        view.obj = NULL;
        Py_XSETREF(SLOT(self->log, self->o_active), active_obj);
        Py_XSETREF(SLOT(self->log, self->o_write_gen), gen_obj);
        active_obj = gen_obj = NULL;
    }
    PyObject *seq_obj = SLOT(store, self->o_next);
    Py_INCREF(seq_obj); /* returned */
    if (count == 0) {
        put(store, self->o_first, seq_obj);
    }
    Py_XSETREF(SLOT(store, self->o_count), count_obj);
    Py_XSETREF(SLOT(store, self->o_next), next_obj); /* drops the slot's reference to seq */
    count_obj = next_obj = NULL;
    self->fast++;
    Py_DECREF(payload);
    /* the frame goes out in sequence order: nothing ran since the checks */
    PyObject *r = PyObject_CallOneArg(self->w.enqueue, frame);
    Py_DECREF(frame);
    if (r == NULL) {
        goto after_error;
    }
    Py_DECREF(r);
    if (after_enqueue(&self->w) < 0) {
        goto after_error;
    }
    return seq_obj;

after_error: /* stored and queued; waking or waiting failed */
    Py_DECREF(seq_obj);
    return NULL;

error:
    if (view.obj != NULL) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(payload);
    Py_XDECREF(frame);
    Py_XDECREF(next_obj);
    Py_XDECREF(count_obj);
    Py_XDECREF(active_obj);
    Py_XDECREF(gen_obj);
    return NULL;

slow:
    if (view.obj != NULL) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(active_obj);
    Py_XDECREF(gen_obj);
    if (self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PublishLane is cleared");
        return NULL;
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
publane_disable(PublishLane *self, PyObject *unused)
{
    self->enabled = 0;
    Py_RETURN_NONE;
}

static PyMethodDef publane_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))publane_publish, METH_FASTCALL | METH_KEYWORDS,
     "AsyncHAClient.publish, its common case in C (same arguments)."},
    {"disable", (PyCFunction)publane_disable, METH_NOARGS,
     "From now on every call goes to the Python publish."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef publane_members[] = {
    {"enabled", T_INT, offsetof(PublishLane, enabled), READONLY, "Whether the C path runs."},
    {"fast", T_ULONGLONG, offsetof(PublishLane, fast), READONLY,
     "How many publishes the C path did."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject PublishLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.PublishLane",
    .tp_basicsize = sizeof(PublishLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PublishLane(state, file, publish, head, fields, outq, enqueue, wake, "
              "wait_writable, caller_write)\n\nAsyncHAClient.publish's common case in C (see "
              "the C source).",
    .tp_traverse = (traverseproc)publane_traverse,
    .tp_clear = (inquiry)publane_clear,
    .tp_dealloc = (destructor)publane_dealloc,
    .tp_init = (initproc)publane_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = publane_methods,
    .tp_members = publane_members,
};

#endif /* Py_GIL_DISABLED */
