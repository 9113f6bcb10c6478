/* ------------------------------------------------------------------ queue auto-ack
 *
 * autoack_take(pending, caps, batch_size, payload): the auto-ack of one leased queue
 * delivery in one call (twin: ampsclient.acks.autoack_take). It reads the topic and the
 * bookmark from the start of the delivery's header when it has the reference server's
 * form {"c":"p","t":"<topic>","sids":"<ids>","bm":"<bookmark>","lp":"<lease> (a non-empty
 * topic, bookmark and lease, no quote or backslash inside them, valid UTF-8), and adds the
 * bookmark to the topic's batch in pending (topic -> list of bookmark str). The batch limit
 * is batch_size capped at caps[topic] (at least 1). Returns None when the payload is not in
 * that form (the caller parses the header), (topic, bookmarks) when an ack is to be sent now
 * (the batch is full, then it is removed from pending and its bookmarks joined with ",";
 * or no batching: the one bookmark), else the number of bookmarks now in the batch.
 * The caller holds the batches' lock; nothing here calls back into Python code. */

#include "speedups.h"

SP_DOC(autoack_take_doc,
"autoack_take(pending, caps, batch_size, payload) -> None | (topic, bookmarks) | int\n\n"
"Add a leased delivery's bookmark to its topic's pending ack batch (see the C source).");

/* the value of the string field starting at p (after its opening quote): its end (the
 * closing quote) or NULL when a backslash or the end comes first */
static const char *
autoack_value_end(const char *p, const char *end)
{
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (q == NULL || memchr(p, '\\', (size_t)(q - p)) != NULL) {
        return NULL;
    }
    return q;
}

/* autoack_take's work on checked arguments (pending and caps exact dicts, the payload a
 * bytes object): a new reference to None, (topic, bookmarks) or the count; NULL on error */
static PyObject *
autoack_core(PyObject *pending, PyObject *caps, Py_ssize_t limit, PyObject *payload,
             PyObject **topic_cache)
{
    static const char start[] = "{\"c\":\"p\",\"t\":\"";
    static const char sids[] = "\",\"sids\":\"";
    static const char bm[] = "\",\"bm\":\"";
    static const char lp[] = "\",\"lp\":\"";
    const char *p = PyBytes_AS_STRING(payload);
    const char *end = p + PyBytes_GET_SIZE(payload);
    if (end - p < (Py_ssize_t)sizeof(start) - 1 || memcmp(p, start, sizeof(start) - 1) != 0) {
        Py_RETURN_NONE;
    }
    const char *topic = p + sizeof(start) - 1;
    const char *topic_end = autoack_value_end(topic, end);
    if (topic_end == NULL || topic_end == topic || end - topic_end < (Py_ssize_t)sizeof(sids) - 1
        || memcmp(topic_end, sids, sizeof(sids) - 1) != 0) {
        Py_RETURN_NONE;
    }
    const char *ids_end = autoack_value_end(topic_end + sizeof(sids) - 1, end);
    if (ids_end == NULL || end - ids_end < (Py_ssize_t)sizeof(bm) - 1
        || memcmp(ids_end, bm, sizeof(bm) - 1) != 0) {
        Py_RETURN_NONE;
    }
    const char *mark = ids_end + sizeof(bm) - 1;
    const char *mark_end = autoack_value_end(mark, end);
    if (mark_end == NULL || mark_end == mark || end - mark_end < (Py_ssize_t)sizeof(lp)
        || memcmp(mark_end, lp, sizeof(lp) - 1) != 0) {
        Py_RETURN_NONE;
    }
    char lease = mark_end[sizeof(lp) - 1];
    if (lease == '"' || lease == '\\') {
        Py_RETURN_NONE;
    }
    /* the topic: the cached str when it is the same text (its hash is cached with it), so
     * a subscription's deliveries decode and hash their topic once */
    PyObject *t = NULL;
    if (topic_cache != NULL && *topic_cache != NULL) {
        Py_ssize_t cached_len;
        const char *cached = PyUnicode_AsUTF8AndSize(*topic_cache, &cached_len);
        if (cached == NULL) {
            return NULL;
        }
        if (cached_len == topic_end - topic && memcmp(cached, topic, (size_t)cached_len) == 0) {
            t = Py_NewRef(*topic_cache);
        }
    }
    if (t == NULL) {
        t = PyUnicode_DecodeUTF8(topic, topic_end - topic, NULL);
        if (t == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            return NULL;
        }
        if (topic_cache != NULL) {
            Py_XSETREF(*topic_cache, Py_NewRef(t));
        }
    }
    PyObject *b = PyUnicode_DecodeUTF8(mark, mark_end - mark, NULL);
    if (b == NULL) {
        Py_DECREF(t);
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    PyObject *cap = PyDict_GetItemWithError(caps, t); /* borrowed */
    if (cap == NULL && PyErr_Occurred()) {
        goto fail;
    }
    if (cap != NULL) {
        Py_ssize_t c = PyLong_AsSsize_t(cap);
        if (c == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (c < limit) {
            limit = c < 1 ? 1 : c;
        }
    }
    PyObject *batch = PyDict_GetItemWithError(pending, t); /* borrowed */
    if (batch == NULL) {
        if (PyErr_Occurred()) {
            goto fail;
        }
        if (limit <= 1) {
            return Py_BuildValue("(NN)", t, b);
        }
        batch = PyList_New(0);
        if (batch == NULL) {
            goto fail;
        }
        int rc = PyDict_SetItem(pending, t, batch);
        Py_DECREF(batch); /* the dict holds it */
        if (rc < 0) {
            goto fail;
        }
    }
    else if (!PyList_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "autoack_take: a pending batch is not a list");
        goto fail;
    }
    if (PyList_Append(batch, b) < 0) {
        goto fail;
    }
    Py_DECREF(b);
    Py_ssize_t n = PyList_GET_SIZE(batch);
    if (n < limit) {
        Py_DECREF(t);
        return PyLong_FromSsize_t(n);
    }
    Py_INCREF(batch);
    if (PyDict_DelItem(pending, t) < 0) {
        Py_DECREF(batch);
        Py_DECREF(t);
        return NULL;
    }
    PyObject *comma = PyUnicode_FromStringAndSize(",", 1);
    PyObject *joined = comma == NULL ? NULL : PyUnicode_Join(comma, batch);
    Py_XDECREF(comma);
    Py_DECREF(batch);
    if (joined == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    return Py_BuildValue("(NN)", t, joined);
fail:
    Py_DECREF(t);
    Py_DECREF(b);
    return NULL;
}

PyObject *
autoack_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[1])
        || !PyLong_Check(args[2]) || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "autoack_take(pending: dict, caps: dict, batch_size: int, payload: bytes)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return autoack_core(args[0], args[1], limit, args[3], NULL);
}

#ifndef Py_GIL_DISABLED
/* ------------------------------------------------------------------ AutoAck
 *
 * AutoAck(handler, batches, settled, lock, hand_out, settle, after, send_now, arm): a queue
 * subscription's handler with auto-ack, the route's handler itself (twin:
 * ampsclient.acks.AutoAckCall). Called with a message it does what the twin does:
 *   - settled (the dict of acks the application made itself) not empty: hand_out(message)
 *     first;
 *   - handler(message); when it raises: settle(message, True) (the cancel), then the
 *     exception goes on;
 *   - then, in the common case (settled empty, nobody holds lock, a StoreLock), the work of
 *     autoack_take on the fields of batches (an AckBatches, this module's own type) and
 *     the message's payload (its MessageFields field), all under the GIL without calling Python
 *     code, so without taking the lock; then send_now(topic, bookmarks) when an ack is to go
 *     out, arm() when a new batch began. Anything else (the payload not in the form, settled
 *     not empty, the lock held by a thread) calls after(message), the Python path that takes
 *     the lock. */

/* AckBatches: a client's pending queue-ack batches, a type this module owns (its twin:
 * ampsclient._accel.PyAckBatches). ampsclient.acks.QueueAcks holds one and documents its
 * three public fields: pending (topic -> the bookmarks of its open batch), caps (topic -> the
 * smallest max_backlog of its subscriptions) and batch_size (the ack batch size). QueueAcks
 * alone replaces them, under its lock; AutoAck reads them here, through the struct. */

typedef struct {
    PyObject_HEAD
    PyObject *pending;
    PyObject *caps;
    PyObject *batch_size;
} AckBatches;

static int
ab_traverse(AckBatches *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pending);
    Py_VISIT(self->caps);
    Py_VISIT(self->batch_size);
    return 0;
}

static int
ab_clear(AckBatches *self)
{
    Py_CLEAR(self->pending);
    Py_CLEAR(self->caps);
    Py_CLEAR(self->batch_size);
    return 0;
}

static void
ab_dealloc(AckBatches *self)
{
    PyObject_GC_UnTrack(self);
    ab_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef ab_members[] = {
    {"pending", T_OBJECT_EX, offsetof(AckBatches, pending), 0,
     "topic -> the bookmarks of its open batch (a dict)."},
    {"caps", T_OBJECT_EX, offsetof(AckBatches, caps), 0,
     "topic -> the smallest max_backlog its subscriptions reported (a dict)."},
    {"batch_size", T_OBJECT_EX, offsetof(AckBatches, batch_size), 0,
     "Plain acks per batch (an int; 0 or 1: each ack at once)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject AckBatchesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.AckBatches",
    .tp_basicsize = sizeof(AckBatches),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "AckBatches()\n\nA client's pending queue-ack batches (twin: "
              "ampsclient._accel.PyAckBatches). A new instance has no field set.",
    .tp_traverse = (traverseproc)ab_traverse,
    .tp_clear = (inquiry)ab_clear,
    .tp_dealloc = (destructor)ab_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = ab_members,
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *handler;
    PyObject *batches; /* an AckBatches */
    PyObject *settled;
    PyObject *lock;
    PyObject *hand_out;
    PyObject *settle;
    PyObject *after;
    PyObject *send_now;
    PyObject *arm;
    PyObject *topic;     /* the last topic seen (see autoack_core) */
    unsigned long long fast;
} AutoAck;

static PyObject *
autoack_message(AutoAck *self, PyObject *message)
{
    PyObject *r;
    if (PyDict_GET_SIZE(self->settled) != 0) {
        r = PyObject_CallOneArg(self->hand_out, message);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
    }
    PyObject *result = PyObject_CallOneArg(self->handler, message);
    if (result == NULL) {
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb);
        r = PyObject_CallFunctionObjArgs(self->settle, message, Py_True, NULL);
        if (r == NULL) {
            _PyErr_ChainExceptions(et, ev, etb);
            return NULL;
        }
        Py_DECREF(r);
        PyErr_Restore(et, ev, etb);
        return NULL;
    }
    if (PyDict_GET_SIZE(self->settled) == 0 && !((StoreLock *)self->lock)->held) {
        PyObject *raw = NULL; /* (not a MessageFields: the Python path) */
        if (is_message(message)) {
            raw = Py_XNewRef(MF(message)->payload); /* its field, read in place */
        }
        AckBatches *b = (AckBatches *)self->batches; /* its own fields, as they are now */
        PyObject *pending = Py_XNewRef(b->pending);
        PyObject *caps = Py_XNewRef(b->caps);
        PyObject *size = Py_XNewRef(b->batch_size);
        PyObject *done = NULL;
        int checked = raw != NULL && pending != NULL && caps != NULL && size != NULL
                      && PyBytes_Check(raw) && PyDict_CheckExact(pending)
                      && PyDict_CheckExact(caps) && PyLong_CheckExact(size);
        if (checked) {
            Py_ssize_t limit = PyLong_AsSsize_t(size);
            if (limit != -1 || !PyErr_Occurred()) {
                done = autoack_core(pending, caps, limit, raw, &self->topic);
            }
        }
        Py_XDECREF(raw);
        Py_XDECREF(pending);
        Py_XDECREF(caps);
        Py_XDECREF(size);
        if (done == NULL) {
            PyErr_Clear(); /* not our objects' usual form: the Python path says what is wrong */
        }
        else if (done != Py_None) {
            if (PyTuple_CheckExact(done)) {
                r = PyObject_Call(self->send_now, done, NULL);
            }
            else if (PyLong_AsSsize_t(done) == 1) {
                r = PyObject_CallNoArgs(self->arm);
            }
            else {
                r = Py_NewRef(Py_None);
            }
            Py_DECREF(done);
            if (r == NULL) {
                Py_DECREF(result);
                return NULL;
            }
            Py_DECREF(r);
            self->fast++;
            return result;
        }
        Py_XDECREF(done);
    }
    r = PyObject_CallOneArg(self->after, message);
    if (r == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    Py_DECREF(r);
    return result;
}

static PyObject *
autoack_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "an auto-ack handler takes one message");
        return NULL;
    }
    return autoack_message((AutoAck *)callable, args[0]);
}

static PyObject *
autoack_call_method(AutoAck *self, PyObject *message)
{
    return autoack_message(self, message);
}

static int
autoack_init(AutoAck *self, PyObject *args, PyObject *kwds)
{
    PyObject *a[9];
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "AutoAck() takes positional arguments only");
        return -1;
    }
    if (!PyArg_UnpackTuple(args, "AutoAck", 9, 9, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5],
                           &a[6], &a[7], &a[8])) {
        return -1;
    }
    if (!PyObject_TypeCheck(a[1], &AckBatchesType) || !PyDict_CheckExact(a[2])
        || !Py_IS_TYPE(a[3], &StoreLockType)) {
        PyErr_SetString(PyExc_TypeError, "AutoAck(): batches must be an AckBatches, settled a "
                                         "dict and lock a StoreLock");
        return -1;
    }
    Py_XSETREF(self->handler, Py_NewRef(a[0]));
    Py_XSETREF(self->batches, Py_NewRef(a[1]));
    Py_XSETREF(self->settled, Py_NewRef(a[2]));
    Py_XSETREF(self->lock, Py_NewRef(a[3]));
    Py_XSETREF(self->hand_out, Py_NewRef(a[4]));
    Py_XSETREF(self->settle, Py_NewRef(a[5]));
    Py_XSETREF(self->after, Py_NewRef(a[6]));
    Py_XSETREF(self->send_now, Py_NewRef(a[7]));
    Py_XSETREF(self->arm, Py_NewRef(a[8]));
    Py_CLEAR(self->topic);
    self->vectorcall = autoack_vectorcall;
    return 0;
}

static PyObject *
autoack_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    AutoAck *self = (AutoAck *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = NULL; /* until __init__ ran: tp_call refuses */
    }
    return (PyObject *)self;
}

static PyObject *
autoack_tp_call(PyObject *callable, PyObject *args, PyObject *kwds)
{
    AutoAck *self = (AutoAck *)callable;
    if (self->handler == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "AutoAck was not initialised");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 1 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "an auto-ack handler takes one message");
        return NULL;
    }
    return autoack_message(self, PyTuple_GET_ITEM(args, 0));
}

static int
autoack_traverse(AutoAck *self, visitproc visit, void *arg)
{
    Py_VISIT(self->handler);
    Py_VISIT(self->batches);
    Py_VISIT(self->settled);
    Py_VISIT(self->lock);
    Py_VISIT(self->hand_out);
    Py_VISIT(self->settle);
    Py_VISIT(self->after);
    Py_VISIT(self->send_now);
    Py_VISIT(self->arm);
    Py_VISIT(self->topic);
    return 0;
}

static int
autoack_clear(AutoAck *self)
{
    self->vectorcall = NULL;
    Py_CLEAR(self->handler);
    Py_CLEAR(self->batches);
    Py_CLEAR(self->settled);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->hand_out);
    Py_CLEAR(self->settle);
    Py_CLEAR(self->after);
    Py_CLEAR(self->send_now);
    Py_CLEAR(self->arm);
    Py_CLEAR(self->topic);
    return 0;
}

static void
autoack_dealloc(AutoAck *self)
{
    PyObject_GC_UnTrack(self);
    autoack_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef autoack_methods[] = {
    {"call", (PyCFunction)autoack_call_method, METH_O,
     "call(message): the same as calling the object (the handler with auto-ack)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef autoack_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(AutoAck, handler), READONLY, "The application's handler."},
    {"fast", T_ULONGLONG, offsetof(AutoAck, fast), READONLY,
     "Messages acked without the Python path."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject AutoAckType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.AutoAck",
    .tp_basicsize = sizeof(AutoAck),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "AutoAck(handler, acks, settled, lock, hand_out, settle, after, send_now, arm)\n\n"
              "A queue subscription's handler with auto-ack (see the C source; twin "
              "ampsclient.acks.AutoAckCall).",
    .tp_vectorcall_offset = offsetof(AutoAck, vectorcall),
    .tp_call = autoack_tp_call,
    .tp_traverse = (traverseproc)autoack_traverse,
    .tp_clear = (inquiry)autoack_clear,
    .tp_dealloc = (destructor)autoack_dealloc,
    .tp_init = (initproc)autoack_init,
    .tp_new = autoack_new,
    .tp_methods = autoack_methods,
    .tp_members = autoack_members,
};
#endif /* Py_GIL_DISABLED */
