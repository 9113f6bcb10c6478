/* Optional C versions of the queue engine's per-message loops.
 *
 * Each function here has exactly one pure-Python twin, the reference (see
 * ampsclient_server_stub/queues/speedups.py, which picks one or the other;
 * AMPSCLIENT_PUREPYTHON=1 forces the Python ones). tests/queues/test_queue_speedups.py runs
 * both on the same cases.
 *
 *   plain_run  the run of plain intake frames ...,"bm":"<bookmark>"}BODY from a position:
 *              (end, [(bookmark, body), ...])  (queues.intake.plain_run)
 *   run_pairs  (bookmark, body) of each message of a journaled run (queues.intake.run_pairs)
 *   split_bookmarks  an acknowledgement's bookmark list in one pass, or None
 *              (queues.acking.split_bookmarks)
 *   frame_run  the delivery frames start + bookmark + tail + body of a run of leases, each
 *              appended to its subscription's list; where the run ends (queues.framing.frame_run)
 *   ack_run    plain acks of leased messages for a run of bookmarks (queues.acking.ack_run)
 *   lease_run  the messages and leases of a run of new arrivals (queues.leasing.lease_run)
 *   QueueMessage  the queue's message type (queues.message.PyQueueMessage)
 *
 * Nothing here changes server state but what the Python twin changes: plain_run,
 * run_pairs and split_bookmarks read lists, tuples, bytes and str; frame_run reads the leases' messages and appends to the lists it is
 * given; ack_run changes the messages' fields, the dicts and the list given; lease_run makes
 * messages and adds them to the dicts, the heap and the list given. The functions read and
 * write a QueueMessage's fields in place when it is of the exact C type (a subclass, or the
 * Python class, through its attributes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static const char BM[] = ",\"bm\":\""; /* 7 */
static const char KEY[] = ",\"k\":\""; /* 6 */
#define BM_LEN 7
#define KEY_LEN 6

/* The first occurrence of needle[0:n] entirely inside hay[0:len], or -1 (bytes.find). */
static Py_ssize_t find(const char *hay, Py_ssize_t len, const char *needle, Py_ssize_t n) {
    const char *p = hay;
    const char *last = hay + len - n; /* the last start a match may have */
    while (p <= last) {
        const char *c = memchr(p, needle[0], (size_t)(last - p + 1));
        if (c == NULL)
            return -1;
        if (memcmp(c, needle, (size_t)n) == 0)
            return c - hay;
        p = c + 1;
    }
    return -1;
}

/* ------------------------------------------------------------------ QueueMessage
 *
 * The C twin of queues.message.PyQueueMessage: the same sixteen fields (each an object, as a
 * Python slot holds, unset until set: reading an unset one raises AttributeError), the same
 * constructor and defaults. The type is subclassable: a subclass (with __slots__ of its own,
 * or a property in place of a field) is built through setattr, field by field in the
 * Python __init__'s order, so its properties' setters run; the exact type gets its fields
 * set in place. No __dict__, no weak references (as the Python class).
 */
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *barrier, *bookmark, *cancels, *data, *deliveries, *doc, *enqueued, *expires,
        *lease_deadline, *leased_at, *lessee, *order, *owner, *rank, *state, *x;
} QueueMessage;

static PyTypeObject QueueMessageType;
static PyObject *unparsed;         /* queues.message.UNPARSED */
static PyObject *zero, *zero_float; /* 0 (AVAILABLE, rank, counts), 0.0 (leased_at) */

#define QM(o) ((QueueMessage *)(o))
#define QM_EXACT(o) Py_IS_TYPE((o), &QueueMessageType)
#define QM_FIELDS(X)                                                                           \
    X(barrier) X(bookmark) X(cancels) X(data) X(deliveries) X(doc) X(enqueued) X(expires)       \
    X(lease_deadline) X(leased_at) X(lessee) X(order) X(owner) X(rank) X(state) X(x)

static int qm_traverse(PyObject *self, visitproc visit, void *arg) {
#define VISIT(f) Py_VISIT(QM(self)->f);
    QM_FIELDS(VISIT)
#undef VISIT
    return 0;
}

static int qm_clear(PyObject *self) {
#define CLEAR(f) Py_CLEAR(QM(self)->f);
    QM_FIELDS(CLEAR)
#undef CLEAR
    return 0;
}

static void qm_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, qm_dealloc)
    qm_clear(self);
    Py_TYPE(self)->tp_free(self);
    Py_TRASHCAN_END
}

/* The defaults of the fields the constructor does not take, in place (exact type). */
static void qm_set_defaults(QueueMessage *m, PyObject *bookmark, PyObject *data, PyObject *x,
                            PyObject *order, PyObject *enqueued) {
    Py_XSETREF(m->bookmark, Py_NewRef(bookmark));
    Py_XSETREF(m->data, Py_NewRef(data));
    Py_XSETREF(m->x, Py_NewRef(x));
    Py_XSETREF(m->order, Py_NewRef(order));
    Py_XSETREF(m->rank, Py_NewRef(zero));
    Py_XSETREF(m->barrier, Py_NewRef(Py_False));
    Py_XSETREF(m->enqueued, Py_NewRef(enqueued));
    Py_XSETREF(m->expires, Py_NewRef(Py_None));
    Py_XSETREF(m->state, Py_NewRef(zero));
    Py_XSETREF(m->lessee, Py_NewRef(Py_None));
    Py_XSETREF(m->lease_deadline, Py_NewRef(Py_None));
    Py_XSETREF(m->deliveries, Py_NewRef(zero));
    Py_XSETREF(m->cancels, Py_NewRef(zero));
    Py_XSETREF(m->doc, Py_NewRef(unparsed));
    Py_XSETREF(m->owner, Py_NewRef(Py_None));
    Py_XSETREF(m->leased_at, Py_NewRef(zero_float));
}

static PyObject *s_x, *s_barrier, *s_lease_deadline, *s_bookmark, *s_data;
static PyObject *s_lessee, *s_state, *s_owner, *s_leased;
static PyObject *s_order, *s_rank, *s_enqueued, *s_expires, *s_deliveries, *s_cancels, *s_doc,
    *s_leased_at, *s_backlog;

static int qm_init(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"bookmark", "data", "x", "order", "enqueued", NULL};
    PyObject *bookmark, *data, *x, *order, *enqueued;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO:QueueMessage", kwlist, &bookmark,
                                     &data, &x, &order, &enqueued))
        return -1;
    if (QM_EXACT(self)) {
        qm_set_defaults(QM(self), bookmark, data, x, order, enqueued);
        return 0;
    }
    /* a subclass: through its attributes, in the Python __init__'s order */
    PyObject *names[] = {s_bookmark, s_data,  s_x,              s_order,      s_rank,
                         s_barrier,  s_enqueued, s_expires,     s_state,      s_lessee,
                         s_lease_deadline, s_deliveries, s_cancels, s_doc,    s_owner,
                         s_leased_at};
    PyObject *values[] = {bookmark, data,  x,       order, zero,    Py_False, enqueued, Py_None,
                          zero,     Py_None, Py_None, zero, zero,   unparsed, Py_None, zero_float};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (PyObject_SetAttr(self, names[i], values[i]) < 0)
            return -1;
    return 0;
}

/* A new exact QueueMessage, as QueueMessage(bookmark, data, None, order, enqueued). */
static QueueMessage *qm_new(PyObject *bookmark, PyObject *data, PyObject *order,
                            PyObject *enqueued) {
    QueueMessage *m = (QueueMessage *)QueueMessageType.tp_alloc(&QueueMessageType, 0);
    if (m != NULL)
        qm_set_defaults(m, bookmark, data, Py_None, order, enqueued);
    return m;
}

#define MEMBER(f) {#f, T_OBJECT_EX, offsetof(QueueMessage, f), 0, NULL},
static PyMemberDef qm_members[] = {QM_FIELDS(MEMBER){NULL, 0, 0, 0, NULL}};
#undef MEMBER

static PyTypeObject QueueMessageType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ampsclient_server_stub.queues._queue_speedups.QueueMessage",
    .tp_basicsize = sizeof(QueueMessage),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "QueueMessage(bookmark, data, x, order, enqueued)\n--\n\nA message in the queue "
              "(the C twin of queues.message.PyQueueMessage).",
    .tp_traverse = qm_traverse,
    .tp_clear = qm_clear,
    .tp_dealloc = qm_dealloc,
    .tp_members = qm_members,
    .tp_init = qm_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *plain_run(PyObject *self, PyObject *args) {
    PyObject *frames;
    Py_ssize_t start;
    int sow_keys;
    if (!PyArg_ParseTuple(args, "Onp:plain_run", &frames, &start, &sow_keys))
        return NULL;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "plain_run: start must be >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(frames, "plain_run: frames must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t pos = start;
    for (; pos < count; pos++) {
        PyObject *frame = items[pos];
        if (!PyBytes_Check(frame))
            break; /* (frames are bytes; anything else is left to the caller) */
        const char *buf = PyBytes_AS_STRING(frame);
        Py_ssize_t len = PyBytes_GET_SIZE(frame);
        Py_ssize_t i = find(buf, len, BM, BM_LEN);
        if (i <= 0)
            break;
        const char *q = memchr(buf + i + BM_LEN, '"', (size_t)(len - i - BM_LEN));
        if (q == NULL)
            break;
        Py_ssize_t j = q - buf;
        if (j + 1 >= len || buf[j + 1] != '}')
            break;
        if (sow_keys && find(buf, i, KEY, KEY_LEN) >= 0)
            break;
        PyObject *bookmark = PyUnicode_DecodeUTF8(buf + i + BM_LEN, j - i - BM_LEN, NULL);
        if (bookmark == NULL)
            goto error;
        PyObject *body = PyBytes_FromStringAndSize(buf + j + 2, len - j - 2);
        if (body == NULL) {
            Py_DECREF(bookmark);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(bookmark);
            Py_DECREF(body);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, bookmark);
        PyTuple_SET_ITEM(pair, 1, body);
        int failed = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (failed)
            goto error;
    }
    Py_DECREF(seq);
    PyObject *result = Py_BuildValue("(nN)", pos, out);
    return result;
error:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* [(prefix + str(seq) + "|", body) for seq, _topic, body in batch]: a journaled run's
 * bookmarks (prefix is "PID|", ASCII) and bodies, as plain_run reads them from its frames. */
static PyObject *run_pairs(PyObject *self, PyObject *args) {
    PyObject *prefix, *batch;
    if (!PyArg_ParseTuple(args, "UO!:run_pairs", &prefix, &PyList_Type, &batch))
        return NULL;
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "run_pairs: the prefix must be ASCII");
        return NULL;
    }
    const char *pre = (const char *)PyUnicode_1BYTE_DATA(prefix);
    Py_ssize_t pl = PyUnicode_GET_LENGTH(prefix), n = PyList_GET_SIZE(batch);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3 ||
            !PyLong_Check(PyTuple_GET_ITEM(item, 0)) || !PyBytes_Check(PyTuple_GET_ITEM(item, 2))) {
            PyErr_SetString(PyExc_TypeError, "run_pairs: batch items must be (int, str, bytes)");
            goto error;
        }
        long long seq = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        if (seq == -1 && PyErr_Occurred())
            goto error;
        char digits[24], *end = digits + sizeof digits, *d = end; /* "%lld|", backwards */
        unsigned long long v = seq < 0 ? 0ULL - (unsigned long long)seq : (unsigned long long)seq;
        *--d = '|';
        do
            *--d = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        if (seq < 0)
            *--d = '-';
        Py_ssize_t dl = end - d;
        PyObject *bookmark = PyUnicode_New(pl + dl, 127);
        if (bookmark == NULL)
            goto error;
        memcpy(PyUnicode_1BYTE_DATA(bookmark), pre, (size_t)pl);
        memcpy(PyUnicode_1BYTE_DATA(bookmark) + pl, d, (size_t)dl);
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(bookmark);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, bookmark);
        PyTuple_SET_ITEM(pair, 1, Py_NewRef(PyTuple_GET_ITEM(item, 2)));
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

/* The items of a comma list of n characters, or 0 when one is empty or it has whitespace.
 * Inlined with a constant kind for ASCII (one test per byte). */
static inline Py_ssize_t count_items(int kind, const void *data, Py_ssize_t n) {
    Py_ssize_t items = 1, start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch == ',') {
            if (i == start)
                return 0; /* an empty item */
            items++;
            start = i + 1;
        } else if (ch <= ' ' || ch >= 0x80) {
            if (Py_UNICODE_ISSPACE(ch))
                return 0;
        }
    }
    return start == n ? 0 : items; /* (start == n: a trailing comma, or nothing) */
}

/* value.split(",") when value is a str with no whitespace and no empty item; else None. */
static PyObject *split_bookmarks(PyObject *self, PyObject *value) {
    if (!PyUnicode_CheckExact(value))
        Py_RETURN_NONE;
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    if (!PyUnicode_IS_ASCII(value)) {
        if (count_items(PyUnicode_KIND(value), PyUnicode_DATA(value), n) == 0)
            Py_RETURN_NONE;
        PyObject *comma = PyUnicode_FromOrdinal(',');
        if (comma == NULL)
            return NULL;
        PyObject *out = PyUnicode_Split(value, comma, -1);
        Py_DECREF(comma);
        return out;
    }
    const char *data = (const char *)PyUnicode_1BYTE_DATA(value);
    Py_ssize_t items = count_items(PyUnicode_1BYTE_KIND, data, n);
    if (items == 0)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(items); /* the ASCII items: memchr and memcpy */
    if (out == NULL)
        return NULL;
    const char *p = data, *end = data + n;
    for (Py_ssize_t k = 0; k < items; k++) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        Py_ssize_t len = (comma != NULL ? comma : end) - p;
        PyObject *item = PyUnicode_New(len, 127);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        memcpy(PyUnicode_1BYTE_DATA(item), p, (size_t)len);
        PyList_SET_ITEM(out, k, item);
        p += len + 1;
    }
    return out;
}

/* msg.<name> is (not) `want`: 1 when it is not, 0 when it is, -1 on error. */
static int attr_is_not(PyObject *msg, PyObject *name, PyObject *want) {
    PyObject *value = PyObject_GetAttr(msg, name);
    if (value == NULL)
        return -1;
    int differs = value != want;
    Py_DECREF(value);
    return differs;
}

/* start + bm + tail + data as one new bytes object (a delivery frame). */
static PyObject *join_frame(PyObject *start, const char *bm, Py_ssize_t bm_len, const char *tail,
                            Py_ssize_t tail_len, PyObject *data) {
    Py_ssize_t start_len = PyBytes_GET_SIZE(start), data_len = PyBytes_GET_SIZE(data);
    PyObject *frame = PyBytes_FromStringAndSize(NULL, start_len + bm_len + tail_len + data_len);
    if (frame != NULL) {
        char *out = PyBytes_AS_STRING(frame);
        memcpy(out, PyBytes_AS_STRING(start), (size_t)start_len);
        out += start_len;
        memcpy(out, bm, (size_t)bm_len);
        out += bm_len;
        memcpy(out, tail, (size_t)tail_len);
        out += tail_len;
        memcpy(out, PyBytes_AS_STRING(data), (size_t)data_len);
    }
    return frame;
}

static PyObject *frame_run(PyObject *self, PyObject *args) {
    PyObject *leases, *starts, *deadline, *tail;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "OnO!OO!:frame_run", &leases, &pos, &PyDict_Type, &starts,
                          &deadline, &PyBytes_Type, &tail))
        return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "frame_run: pos must be >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(leases, "frame_run: leases must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const char *tail_buf = PyBytes_AS_STRING(tail);
    Py_ssize_t tail_len = PyBytes_GET_SIZE(tail);
    for (; pos < count; pos++) {
        PyObject *pair = items[pos];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "frame_run: each lease must be a 2-tuple");
            goto error;
        }
        PyObject *msg = PyTuple_GET_ITEM(pair, 1);
        PyObject *entry = PyDict_GetItemWithError(starts, PyTuple_GET_ITEM(pair, 0));
        if (entry == NULL) {
            if (PyErr_Occurred())
                goto error;
            break; /* a subscription without its start yet: the caller makes it */
        }
        QueueMessage *m = QM_EXACT(msg) ? QM(msg) : NULL; /* fields read in place */
        int stop;
        if (m != NULL && m->x != NULL && m->barrier != NULL && m->lease_deadline != NULL) {
            stop = m->x != Py_None || m->barrier != Py_False || m->lease_deadline != deadline;
        } else {
            stop = attr_is_not(msg, s_x, Py_None);
            if (stop == 0)
                stop = attr_is_not(msg, s_barrier, Py_False);
            if (stop == 0)
                stop = attr_is_not(msg, s_lease_deadline, deadline);
        }
        if (stop < 0)
            goto error;
        if (stop)
            break;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(entry, 0)) || !PyList_Check(PyTuple_GET_ITEM(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "frame_run: starts values must be (bytes, list)");
            goto error;
        }
        PyObject *start = PyTuple_GET_ITEM(entry, 0);
        PyObject *bookmark = m != NULL && m->bookmark != NULL ? Py_NewRef(m->bookmark)
                                                              : PyObject_GetAttr(msg, s_bookmark);
        if (bookmark == NULL)
            goto error;
        Py_ssize_t bm_len;
        const char *bm = PyUnicode_Check(bookmark) ? PyUnicode_AsUTF8AndSize(bookmark, &bm_len)
                                                   : NULL;
        if (bm == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "frame_run: bookmark must be str");
            Py_DECREF(bookmark);
            goto error;
        }
        PyObject *data = m != NULL && m->data != NULL ? Py_NewRef(m->data)
                                                      : PyObject_GetAttr(msg, s_data);
        if (data == NULL || !PyBytes_Check(data)) {
            if (data != NULL)
                PyErr_SetString(PyExc_TypeError, "frame_run: data must be bytes");
            Py_XDECREF(data);
            Py_DECREF(bookmark);
            goto error;
        }
        PyObject *frame = join_frame(start, bm, bm_len, tail_buf, tail_len, data);
        Py_DECREF(bookmark);
        Py_DECREF(data);
        if (frame == NULL)
            goto error;
        int failed = PyList_Append(PyTuple_GET_ITEM(entry, 1), frame);
        Py_DECREF(frame);
        if (failed)
            goto error;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(pos);
error:
    Py_DECREF(seq);
    return NULL;
}

static PyObject *state_leased, *state_gone; /* queues.states.LEASED, GONE */

/* 1: msg is leased (a lessee, state LEASED, with strict: the lessee's owner is owner),
 * 0: not, -1: error. On 1, *lessee_out holds a new reference to the lessee. */
static int leased_here(PyObject *msg, PyObject *owner, int strict, PyObject **lessee_out) {
    QueueMessage *m = QM_EXACT(msg) ? QM(msg) : NULL; /* fields read in place */
    PyObject *lessee = m != NULL && m->lessee != NULL ? Py_NewRef(m->lessee)
                                                      : PyObject_GetAttr(msg, s_lessee);
    if (lessee == NULL)
        return -1;
    if (lessee == Py_None) {
        Py_DECREF(lessee);
        return 0;
    }
    PyObject *state = m != NULL && m->state != NULL ? Py_NewRef(m->state)
                                                    : PyObject_GetAttr(msg, s_state);
    if (state == NULL) {
        Py_DECREF(lessee);
        return -1;
    }
    int take = PyObject_RichCompareBool(state, state_leased, Py_EQ);
    Py_DECREF(state);
    if (take == 1 && strict) {
        PyObject *its_owner = PyObject_GetAttr(lessee, s_owner);
        take = its_owner == NULL ? -1 : its_owner == owner;
        Py_XDECREF(its_owner);
    }
    if (take != 1) {
        Py_DECREF(lessee);
        return take;
    }
    *lessee_out = lessee;
    return 1;
}

/* The lease of msg by lessee ends and msg leaves messages; 1: lessee.leased held it,
 * 0: it did not, -1: error. cache holds the last lessee and its leased dict (new
 * references, NULL at first): an ack's messages mostly share their lessee. */
static int ack_one(PyObject *messages, PyObject *bookmark, PyObject *msg, PyObject *lessee,
                   PyObject *removed, PyObject *cache[2]) {
    PyObject *leased;
    if (cache[0] == lessee) {
        leased = Py_NewRef(cache[1]);
    } else {
        leased = PyObject_GetAttr(lessee, s_leased);
        if (leased == NULL)
            return -1;
        if (!PyDict_Check(leased)) {
            PyErr_SetString(PyExc_TypeError, "ack_run: lessee.leased must be a dict");
            Py_DECREF(leased);
            return -1;
        }
        Py_XSETREF(cache[0], Py_NewRef(lessee));
        Py_XSETREF(cache[1], Py_NewRef(leased));
    }
    PyObject *held = PyDict_GetItemWithError(leased, bookmark); /* borrowed */
    int freed = 0;
    if (held != NULL) {
        freed = held != Py_None; /* (the twin's pop(bookmark, None) is not None) */
        if (PyDict_DelItem(leased, bookmark) < 0) {
            Py_DECREF(leased);
            return -1;
        }
    } else if (PyErr_Occurred()) {
        Py_DECREF(leased);
        return -1;
    }
    Py_DECREF(leased);
    if (QM_EXACT(msg)) { /* fields written in place (what setattr does for this type) */
        QueueMessage *m = QM(msg);
        Py_XSETREF(m->lessee, Py_NewRef(Py_None));
        Py_XSETREF(m->lease_deadline, Py_NewRef(Py_None));
        Py_XSETREF(m->state, Py_NewRef(state_gone));
        if (PyDict_DelItem(messages, bookmark) < 0 || PyList_Append(removed, bookmark) < 0)
            return -1;
        return freed;
    }
    if (PyObject_SetAttr(msg, s_lessee, Py_None) < 0 ||
        PyObject_SetAttr(msg, s_lease_deadline, Py_None) < 0 ||
        PyObject_SetAttr(msg, s_state, state_gone) < 0 || PyDict_DelItem(messages, bookmark) < 0 ||
        PyList_Append(removed, bookmark) < 0)
        return -1;
    return freed;
}

static PyObject *ack_run(PyObject *self, PyObject *args) {
    PyObject *messages, *bookmarks, *owner, *removed;
    Py_ssize_t pos;
    int strict;
    if (!PyArg_ParseTuple(args, "O!OnOpO!:ack_run", &PyDict_Type, &messages, &bookmarks, &pos,
                          &owner, &strict, &PyList_Type, &removed))
        return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "ack_run: pos must be >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(bookmarks, "ack_run: bookmarks must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t freed = 0;
    PyObject *cache[2] = {NULL, NULL};
    for (; pos < count; pos++) {
        PyObject *bookmark = items[pos];
        PyObject *msg = PyDict_GetItemWithError(messages, bookmark); /* borrowed */
        if (msg == NULL) {
            if (PyErr_Occurred())
                goto error;
            break;
        }
        Py_INCREF(msg); /* (it leaves messages below) */
        PyObject *lessee = NULL;
        int take = leased_here(msg, owner, strict, &lessee);
        if (take != 1) {
            Py_DECREF(msg);
            if (take < 0)
                goto error;
            break;
        }
        int held = ack_one(messages, bookmark, msg, lessee, removed, cache);
        Py_DECREF(lessee);
        Py_DECREF(msg);
        if (held < 0)
            goto error;
        freed += held;
    }
    Py_XDECREF(cache[0]);
    Py_XDECREF(cache[1]);
    Py_DECREF(seq);
    return Py_BuildValue("(nn)", pos, freed);
error:
    Py_XDECREF(cache[0]);
    Py_XDECREF(cache[1]);
    Py_DECREF(seq);
    return NULL;
}

/* lease_run: the arrivals run[index:index + n] made messages and leased (the twin is
 * queues.leasing.lease_run; the choice is queues.leasing.lowest_ratio's). */
static PyObject *s_one;

/* The subscription with the lowest leased/backlog ratio, ties to the first (the first of
 * all when none has room): an index into leased/backlogs. */
static Py_ssize_t lowest_ratio(PyObject **leased, const Py_ssize_t *backlogs, Py_ssize_t count) {
    Py_ssize_t best = 0;
    double best_ratio = 2.0;
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t used = PyDict_GET_SIZE(leased[k]);
        if (used < backlogs[k]) {
            double ratio = (double)used / (double)backlogs[k];
            if (ratio < best_ratio) {
                best = k;
                best_ratio = ratio;
            }
        }
    }
    return best;
}

static PyObject *lease_run(PyObject *self, PyObject *args) {
    PyObject *run, *enqueued, *subs, *messages, *now, *state, *deadline, *heappush, *heap, *out;
    PyObject *frames = Py_None, *tail = Py_None;
    Py_ssize_t index, n, first;
    if (!PyArg_ParseTuple(args, "O!nnnOOOOOOOOO!|OO:lease_run", &PyList_Type, &run, &index, &n,
                          &first, &enqueued, &subs, &messages, &now, &state, &deadline,
                          &heappush, &heap, &PyList_Type, &out, &frames, &tail))
        return NULL;
    if (frames != Py_None && !PyBytes_Check(tail)) {
        PyErr_SetString(PyExc_TypeError, "lease_run: frames needs tail (bytes)");
        return NULL;
    }
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "lease_run: index must be >= 0");
        return NULL;
    }
    if (n <= 0)
        Py_RETURN_NONE;
    if (index + n > PyList_GET_SIZE(run)) {
        PyErr_SetString(PyExc_IndexError, "lease_run: the run has fewer arrivals");
        return NULL;
    }
    if (messages != Py_None && !PyDict_CheckExact(messages)) {
        PyErr_SetString(PyExc_TypeError, "lease_run: messages must be a dict or None");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(subs, "lease_run: subs must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **sub_items = PySequence_Fast_ITEMS(seq);
    PyObject *result = NULL;
    PyObject *targets = NULL; /* frames: each subscription's (start, list), as a sequence */
    /* each subscription's leased dict (new references) and backlog, read once */
    PyObject **leased = PyMem_Calloc((size_t)count + 1, sizeof(PyObject *));
    Py_ssize_t *backlogs = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t));
    if (leased == NULL || backlogs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (count == 0) {
        PyErr_SetString(PyExc_IndexError, "lease_run: no subscription");
        goto done;
    }
    if (frames != Py_None) {
        targets = PySequence_Fast(frames, "lease_run: frames must be a sequence");
        if (targets == NULL)
            goto done;
        if (PySequence_Fast_GET_SIZE(targets) != count) {
            PyErr_SetString(PyExc_ValueError, "lease_run: frames must have one entry per subscription");
            goto done;
        }
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *entry = PySequence_Fast_GET_ITEM(targets, k);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
                !PyBytes_Check(PyTuple_GET_ITEM(entry, 0)) ||
                !PyList_Check(PyTuple_GET_ITEM(entry, 1))) {
                PyErr_SetString(PyExc_TypeError, "lease_run: frames entries must be (bytes, list)");
                goto done;
            }
        }
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        leased[k] = PyObject_GetAttr(sub_items[k], s_leased);
        if (leased[k] == NULL)
            goto done;
        if (!PyDict_CheckExact(leased[k])) {
            PyErr_SetString(PyExc_TypeError, "lease_run: a subscription's leased must be a dict");
            goto done;
        }
        if (count > 1) { /* (one subscription takes everything: no choice to make) */
            PyObject *backlog = PyObject_GetAttr(sub_items[k], s_backlog);
            if (backlog == NULL)
                goto done;
            backlogs[k] = PyLong_AsSsize_t(backlog);
            Py_DECREF(backlog);
            if (backlogs[k] == -1 && PyErr_Occurred())
                goto done;
        }
    }
    for (Py_ssize_t i = index; i < index + n; i++) {
        PyObject *pair = PyList_GET_ITEM(run, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "lease_run: each arrival must be a 2-tuple");
            goto done;
        }
        PyObject *bookmark = PyTuple_GET_ITEM(pair, 0);
        PyObject *order = PyLong_FromSsize_t(first + i);
        if (order == NULL)
            goto done;
        QueueMessage *msg = qm_new(bookmark, PyTuple_GET_ITEM(pair, 1), order, enqueued);
        if (msg == NULL) {
            Py_DECREF(order);
            goto done;
        }
        Py_ssize_t k = count == 1 ? 0 : lowest_ratio(leased, backlogs, count);
        PyObject *qsub = sub_items[k];
        int failed =
            (messages != Py_None && PyDict_SetItem(messages, bookmark, (PyObject *)msg) < 0) ||
            PyDict_SetItem(leased[k], bookmark, (PyObject *)msg) < 0;
        if (!failed) {
            Py_SETREF(msg->deliveries, Py_NewRef(s_one));
            Py_SETREF(msg->lessee, Py_NewRef(qsub));
            Py_SETREF(msg->leased_at, Py_NewRef(now));
            Py_SETREF(msg->state, Py_NewRef(state));
            if (deadline != Py_None) {
                Py_SETREF(msg->lease_deadline, Py_NewRef(deadline));
                PyObject *item = PyTuple_Pack(3, deadline, order, (PyObject *)msg);
                PyObject *call[2] = {heap, item};
                PyObject *pushed =
                    item == NULL ? NULL : PyObject_Vectorcall(heappush, call, 2, NULL);
                Py_XDECREF(item);
                failed = pushed == NULL;
                Py_XDECREF(pushed);
            }
        }
        Py_DECREF(order);
        if (!failed && targets != NULL) { /* the delivery frame, to the subscription's list */
            PyObject *entry = PySequence_Fast_GET_ITEM(targets, k);
            PyObject *data = PyTuple_GET_ITEM(pair, 1);
            Py_ssize_t bm_len;
            const char *bm =
                PyUnicode_Check(bookmark) ? PyUnicode_AsUTF8AndSize(bookmark, &bm_len) : NULL;
            if (bm == NULL || !PyBytes_Check(data)) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "lease_run: a framed arrival must be (str, bytes)");
                failed = 1;
            } else {
                PyObject *frame = join_frame(PyTuple_GET_ITEM(entry, 0), bm, bm_len,
                                             PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail), data);
                failed = frame == NULL || PyList_Append(PyTuple_GET_ITEM(entry, 1), frame) < 0;
                Py_XDECREF(frame);
            }
        } else if (!failed) {
            PyObject *lease = PyTuple_Pack(2, qsub, (PyObject *)msg);
            failed = lease == NULL || PyList_Append(out, lease) < 0;
            Py_XDECREF(lease);
        }
        Py_DECREF(msg);
        if (failed)
            goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(targets);
    if (leased != NULL)
        for (Py_ssize_t k = 0; k < count; k++)
            Py_XDECREF(leased[k]);
    PyMem_Free(leased);
    PyMem_Free(backlogs);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"plain_run", plain_run, METH_VARARGS,
     "plain_run(frames, start, sow_keys) -> (end, [(bookmark, body), ...]): the run of plain "
     "intake frames from start (twin of queues.intake.plain_run)."},
    {"run_pairs", run_pairs, METH_VARARGS,
     "run_pairs(prefix, batch) -> [(bookmark, body), ...]: the bookmarks (prefix + sequence + "
     "'|') and bodies of a journaled run [(sequence, topic, body), ...] (twin of "
     "queues.intake.run_pairs)."},
    {"split_bookmarks", split_bookmarks, METH_O,
     "split_bookmarks(value) -> [bookmark, ...] or None: value.split(',') when value is a str "
     "with no whitespace and no empty item, else None (twin of queues.acking.split_bookmarks)."},
    {"frame_run", frame_run, METH_VARARGS,
     "frame_run(leases, pos, starts, deadline, tail) -> end: the delivery frames of a run of "
     "leases (twin of queues.framing.frame_run)."},
    {"ack_run", ack_run, METH_VARARGS,
     "ack_run(messages, bookmarks, pos, owner, strict, removed) -> (end, freed): plain acks of "
     "leased messages (twin of queues.acking.ack_run)."},
    {"lease_run", lease_run, METH_VARARGS,
     "lease_run(run, index, n, first, enqueued, subs, messages, now, state, lease_deadline, "
     "heappush, lease_heap, out) -> None: the arrivals run[index:index + n] made messages and "
     "leased (twin of queues.leasing.lease_run)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_queue_speedups",
    "Optional C versions of the queue engine's per-message loops.", -1, methods,
};

#define INTERN(f) s_##f = PyUnicode_InternFromString(#f); if (s_##f == NULL) return NULL;

PyMODINIT_FUNC PyInit__queue_speedups(void) {
    INTERN(x) INTERN(barrier) INTERN(lease_deadline) INTERN(bookmark) INTERN(data)
    INTERN(lessee) INTERN(state) INTERN(owner) INTERN(leased) INTERN(order) INTERN(rank)
    INTERN(enqueued) INTERN(expires) INTERN(deliveries) INTERN(cancels) INTERN(doc)
    INTERN(leased_at) INTERN(backlog)
    s_one = PyLong_FromLong(1); /* a new lease's deliveries */
    if (s_one == NULL)
        return NULL;
    state_leased = PyLong_FromLong(1); /* queues.states.LEASED */
    state_gone = PyLong_FromLong(2);   /* queues.states.GONE */
    zero = PyLong_FromLong(0);         /* queues.states.AVAILABLE, and the counts' start */
    zero_float = PyFloat_FromDouble(0.0);
    unparsed = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (!state_leased || !state_gone || !zero || !zero_float || !unparsed)
        return NULL;
    if (PyType_Ready(&QueueMessageType) < 0)
        return NULL;
    /* the Python class's __slots__, for what reads them (copy, pickle: copyreg._slotnames) */
    PyObject *slots = Py_BuildValue("(ssssssssssssssss)", "barrier", "bookmark", "cancels",
                                    "data", "deliveries", "doc", "enqueued", "expires",
                                    "lease_deadline", "leased_at", "lessee", "order", "owner",
                                    "rank", "state", "x");
    if (slots == NULL)
        return NULL;
    int failed = PyDict_SetItemString(QueueMessageType.tp_dict, "__slots__", slots);
    Py_DECREF(slots);
    if (failed)
        return NULL;
    PyType_Modified(&QueueMessageType);
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "QueueMessage", (PyObject *)&QueueMessageType) < 0 ||
        PyModule_AddObjectRef(m, "UNPARSED", unparsed) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
