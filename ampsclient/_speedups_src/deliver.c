/* ------------------------------------------------------------------ deliver
 *
 * The receive pass: route each payload to its handler through a recycled message, whose
 * MessageFields (message.c) it fills (twins: ampsclient.core.routes.deliver and
 * deliver_stream); a bookmark subscription's payload is numbered by its store's
 * BookmarkLane (bookmark_lane.c) without a call when the lane takes it.
 */

#include "speedups.h"

static inline void
set_field(PyObject **field, PyObject *value)
{
    Py_INCREF(value);
    Py_XSETREF(*field, value);
}

/* set_field, skipped when the field already holds ``value`` */
static inline void
set_field_if(PyObject **field, PyObject *value)
{
    if (*field != value) {
        Py_INCREF(value);
        Py_XSETREF(*field, value);
    }
}

/* Call report(exc) for an Exception raised by a handler; 0 on success, -1 to propagate. */
static int
report_exception(PyObject *report)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return -1; /* KeyboardInterrupt, SystemExit...: not ours to swallow */
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    PyObject *r = PyObject_CallOneArg(report, value != NULL ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Up to 8 prefix lengths from a sequence of ints; their count, or -1 on error. */
static Py_ssize_t
read_lengths(PyObject *obj, Py_ssize_t *lengths)
{
    PyObject *seq = PySequence_Fast(obj, "deliver(): lengths must be a sequence");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), n = 0;
    for (Py_ssize_t i = 0; i < count && n < 8; i++) {
        Py_ssize_t v = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        lengths[n++] = v;
    }
    Py_DECREF(seq);
    return n;
}

/* The key object of small dict ``cache`` equal to bytes ``key`` (borrowed), else NULL. */
static PyObject *
cache_key_like(PyObject *cache, PyObject *key)
{
    if (PyDict_GET_SIZE(cache) > 16) {
        return NULL;
    }
    Py_ssize_t pos = 0, size = PyBytes_GET_SIZE(key);
    PyObject *k, *v;
    while (PyDict_Next(cache, &pos, &k, &v)) {
        if (PyBytes_CheckExact(k) && PyBytes_GET_SIZE(k) == size
            && memcmp(PyBytes_AS_STRING(k), PyBytes_AS_STRING(key), (size_t)size) == 0) {
            return k;
        }
    }
    return NULL;
}


/* One pass of deliveries: what deliver() and deliver_stream() share. */
typedef struct {
    PyObject *cache, *lengths_obj, *cls, *unrouted, *report;
    const char *marker;
    Py_ssize_t marker_len, nlengths;
    Py_ssize_t lengths[8];
    PyObject *message;  /* the recycled message_type instance */
    /* The last prefix looked up, as a bytes object: the next payload of the same stream
     * starts with the same bytes, and looking it up again with this object costs neither an
     * allocation nor a hash (bytes cache theirs). The lookup is the same as with a new key. */
    PyObject *last_key;
} Pass;

/* args: cache, lengths, message_type, unrouted, report, bm_next; 0, or -1 on error */
static int
pass_start(Pass *p, PyObject *const *args, const char *fn)
{
    memset(p, 0, sizeof *p);
    p->cache = args[0];
    p->lengths_obj = args[1];
    p->cls = args[2];
    p->unrouted = args[3];
    p->report = args[4];
    PyObject *bm_next = args[5];
    if (!PyDict_CheckExact(p->cache) || !PyBytes_CheckExact(bm_next)) {
        PyErr_Format(PyExc_TypeError, "%s(): bad argument types", fn);
        return -1;
    }
    if (check_message_type(p->cls) < 0) {
        return -1;
    }
    p->nlengths = read_lengths(p->lengths_obj, p->lengths);
    if (p->nlengths < 0) {
        return -1;
    }
    p->marker = PyBytes_AS_STRING(bm_next);
    p->marker_len = PyBytes_GET_SIZE(bm_next);
    p->message = PyObject_CallNoArgs(p->cls);
    return p->message == NULL ? -1 : 0;
}

static void
pass_end(Pass *p)
{
    Py_CLEAR(p->last_key);
    Py_CLEAR(p->message);
}

/* Route one payload (borrowed) to its handler; 0, or -1 on error. */
static int
pass_one(Pass *p, PyObject *payload)
{
    PyObject *route = NULL;
    Py_ssize_t length = 0;
    if (PyBytes_CheckExact(payload)) {
        const char *raw = PyBytes_AS_STRING(payload);
        Py_ssize_t size = PyBytes_GET_SIZE(payload);
        for (Py_ssize_t k = 0; k < p->nlengths; k++) {
            length = p->lengths[k];
            Py_ssize_t take = length < size ? length : size;
            if (take < 0) {
                take = 0;
            }
            PyObject *key, *last_key = p->last_key;
            if (last_key != NULL && PyBytes_GET_SIZE(last_key) == take
                && memcmp(PyBytes_AS_STRING(last_key), raw, (size_t)take) == 0) {
                key = last_key;
                Py_INCREF(key);
            }
            else {
                key = PyBytes_FromStringAndSize(raw, take);
                if (key == NULL) {
                    return -1;
                }
            }
            route = PyDict_GetItemWithError(p->cache, key); /* borrowed */
            if (route != NULL && key != last_key) {
                /* keep the cache's own key object when it is quick to find: the next
                 * lookups then match it by identity, without comparing bytes */
                PyObject *keep = cache_key_like(p->cache, key);
                keep = keep != NULL ? keep : key;
                Py_INCREF(keep);
                Py_XSETREF(p->last_key, keep);
            }
            Py_DECREF(key);
            if (route == NULL && PyErr_Occurred()) {
                return -1;
            }
            if (route != NULL) {
                break;
            }
        }
    }
    if (route == NULL || !PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 5) {
        PyObject *r = PyObject_CallOneArg(p->unrouted, payload);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
        /* unrouted may have learned a route: see it for the rest of this pass */
        p->nlengths = read_lengths(p->lengths_obj, p->lengths);
        return p->nlengths < 0 ? -1 : 0;
    }
    PyObject *handler = PyTuple_GET_ITEM(route, 1);
    if (PyList_Check(handler)) { /* a payload sink: appended, no message, no call */
        return PyList_Append(handler, payload);
    }
    PyObject *message = p->message;
    Py_INCREF(route); /* the handler may change the cache */
    /* a recycled message mostly holds these already (same stream, nothing parsed) */
    MessageFields *f = MF(message);
    set_field_if(&f->payload, payload);
    set_field_if(&f->sub_id, PyTuple_GET_ITEM(route, 0));
    set_field_if(&f->header, Py_None);
    set_field_if(&f->data, Py_None);
    set_field_if(&f->bookmark, Py_None);
    set_field_if(&f->body, minus_one);
    PyObject *result = NULL;
    PyObject *flag = PyTuple_GET_ITEM(route, 2);
    int wants_bm = flag == Py_True ? 1 : flag == Py_False ? 0 : PyObject_IsTrue(flag);
    if (wants_bm < 0) {
        Py_DECREF(route);
        return -1;
    }
    const char *raw = PyBytes_AS_STRING(payload);
    Py_ssize_t size = PyBytes_GET_SIZE(payload);
    Py_ssize_t start = length + p->marker_len;
    const char *close = NULL;
    if (wants_bm && length >= 0 && start <= size
        && memcmp(raw + length, p->marker, (size_t)p->marker_len) == 0) {
        close = memchr(raw + start, '"', (size_t)(size - start));
    }
    if (close != NULL) {
        PyObject *bm = PyUnicode_DecodeUTF8(raw + start, close - (raw + start), NULL);
        if (bm != NULL) {
            set_field(&f->bookmark, bm);
            Py_DECREF(bm);
            PyObject *log = PyTuple_GET_ITEM(route, 3);
#ifndef Py_GIL_DISABLED
            Lane *lane = log != Py_None ? lane_of(log) : NULL;
            long long no = lane != NULL ? lane_log_number(lane, message) : 0;
            if (no > 0) { /* the store's lane numbered it, no call and no int */
                result = PyObject_CallOneArg(PyTuple_GET_ITEM(route, 4), message);
            }
            else if (no < 0) {
                result = NULL;
            }
            else
#endif
            if (log != Py_None) {
#ifndef Py_GIL_DISABLED
                if (lane != NULL) {
                    log = lane_slow_log(lane); /* what the lane's log calls next */
                }
#endif
                PyObject *logged = PyObject_CallOneArg(log, message);
                if (logged != NULL) {
                    int yes = PyObject_IsTrue(logged);
                    Py_DECREF(logged);
                    if (yes > 0) {
                        result = PyObject_CallOneArg(PyTuple_GET_ITEM(route, 4), message);
                    }
                    else if (yes == 0) {
                        result = PyObject_CallOneArg(handler, message);
                    }
                }
            }
            else {
                result = PyObject_CallOneArg(handler, message);
            }
        }
    }
    else {
        result = PyObject_CallOneArg(handler, message);
    }
    Py_DECREF(route);
    if (result == NULL) {
        if (report_exception(p->report) < 0) {
            return -1;
        }
    }
    else {
        Py_DECREF(result);
    }
    if (Py_REFCNT(message) > 1) {
        /* the handler kept it: never touch it again */
        Py_DECREF(message);
        p->message = PyObject_CallNoArgs(p->cls);
        if (p->message == NULL) {
            return -1;
        }
    }
    return 0;
}

SP_DOC(deliver_doc,
"deliver(payloads, cache, lengths, message_type, unrouted, report, bm_next) -> None\n\n"
"``ampsclient.core.routes.deliver`` in C (see there): route each payload by\n"
"its first ``length`` bytes through ``cache``, fill one recycled ``message_type`` instance\n"
"and call the route's handler (a route to a list: the payload is appended to it);\n"
"payloads no prefix routes go to ``unrouted(payload)``;\n"
"an Exception raised by a handler goes to ``report(exc)``.");

PyObject *
deliver(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "deliver() takes 7 arguments");
        return NULL;
    }
    PyObject *payloads = args[0];
    if (!PyList_CheckExact(payloads)) {
        PyErr_SetString(PyExc_TypeError, "deliver(): bad argument types");
        return NULL;
    }
    Pass p;
    if (pass_start(&p, args + 1, "deliver") < 0) {
        pass_end(&p);
        return NULL;
    }
    /* payloads may not change under us: hold our own reference to the list */
    Py_INCREF(payloads);
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(payloads); i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        Py_INCREF(payload);
        rc = pass_one(&p, payload);
        Py_DECREF(payload);
    }
    pass_end(&p);
    Py_DECREF(payloads);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

SP_DOC(deliver_stream_doc,
"deliver_stream(data, pos, limit, cache, lengths, message_type, unrouted, report, bm_next)\n"
"-> (int, int)\n\n"
"``split_frames`` and ``deliver`` in one pass (``ampsclient.core.routes.deliver_stream``):\n"
"each whole 4-byte-length-prefixed payload of ``data[pos:]`` is delivered as it is cut.\n"
"Returns (the offset of the first byte not consumed, how many payloads were delivered);\n"
"a length prefix above ``limit`` stops the pass and gives ``-1 - offset`` of that prefix.\n"
"A payload's bytes object is refilled for the next payload when nothing but the recycled\n"
"message held it (no allocation per payload in the common case).");

PyObject *
deliver_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "deliver_stream() takes 9 arguments");
        return NULL;
    }
    PyObject *data = args[0];
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "deliver_stream(): data must be bytes");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long limit = PyLong_AsLongLong(args[2]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Pass p;
    if (pass_start(&p, args + 3, "deliver_stream") < 0) {
        pass_end(&p);
        return NULL;
    }
    Py_INCREF(data);
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data), count = 0;
    if (pos < 0) {
        pos = 0;
    }
    PyObject *payload = NULL; /* ours: the last payload cut, refilled when nobody else has it */
    int rc = 0;
    while (end - pos >= 4) {
        const unsigned char *q = buf + pos;
        unsigned long long n = ((unsigned long long)q[0] << 24) | ((unsigned long long)q[1] << 16)
                               | ((unsigned long long)q[2] << 8) | (unsigned long long)q[3];
        if ((long long)n > limit) {
            pos = -1 - pos;
            break;
        }
        if ((unsigned long long)(end - pos - 4) < n) {
            break;
        }
        /* Refill the previous payload in place when the recycled message is its only other
         * holder (it gets the new payload next) and it has the same size: a bytes object
         * nobody else can see, as CPython's own in-place concatenation does. */
#ifndef Py_GIL_DISABLED
        if (payload != NULL && n > 1 /* (never the shared empty and one-byte bytes) */
            && Py_REFCNT(payload) == 2 && Py_REFCNT(p.message) == 1
            && MF(p.message)->payload == payload
            && PyBytes_GET_SIZE(payload) == (Py_ssize_t)n) {
            memcpy(PyBytes_AS_STRING(payload), q + 4, (size_t)n);
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
            ((PyBytesObject *)payload)->ob_shash = -1; /* its cached hash, if any, is stale */
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
        }
        else
#endif
        {
            Py_XDECREF(payload);
            payload = PyBytes_FromStringAndSize((const char *)q + 4, (Py_ssize_t)n);
            if (payload == NULL) {
                rc = -1;
                break;
            }
        }
        pos += 4 + (Py_ssize_t)n;
        count++;
        rc = pass_one(&p, payload);
        if (rc < 0) {
            break;
        }
    }
    Py_XDECREF(payload);
    pass_end(&p);
    Py_DECREF(data);
    if (rc < 0) {
        return NULL;
    }
    return Py_BuildValue("(nn)", pos, count);
}
