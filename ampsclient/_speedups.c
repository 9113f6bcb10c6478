/* Optional C versions of the client's two per-message loops.
 *
 * Each function here has a pure-Python twin that is the reference (see
 * ampsclient/_accel.py, which picks one or the other; AMPSCLIENT_PUREPYTHON=1 forces
 * the Python ones). Both are run by the same tests. Nothing here parses AMPS headers: the
 * functions only split the TCP stream and route deliveries by prefixes the Python code
 * learned, exactly as the Python loops do.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------ no layout table
 *
 * This module names no attribute of another class and reads no other class's slots or
 * instance __dict__. Its functions take and return values (bytes, lists, tuples, dicts,
 * callables given at construction) and the fields of its own types: a Message, the
 * bookmark store's records, the publish stores' index and segment files, the queue-ack
 * batches and a client writer's flags are built on (or hold) MessageFields,
 * BookmarkSubscriptionFields, BookmarkPublisherFields, PublishIndexFields, SegmentLogFields,
 * AckBatches and WriterFields, whose fields it reaches through their structs. The names it
 * looks up are the standard library's (a lock's locked). tests/test_speedups.py checks.
 */

/* ------------------------------------------------------------------ split_frames */

PyDoc_STRVAR(split_frames_doc,
"split_frames(data, pos, limit, out) -> int\n\n"
"Append every whole 4-byte-length-prefixed payload of ``data[pos:]`` to the list ``out``;\n"
"return the offset of the first byte not consumed. A length prefix above ``limit`` stops\n"
"the loop and returns ``-1 - offset`` of that prefix (the caller raises).");

static PyObject *
split_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "split_frames() takes 4 arguments");
        return NULL;
    }
    PyObject *data = args[0];
    PyObject *out = args[3];
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "split_frames(): data must be bytes");
        return NULL;
    }
    if (!PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "split_frames(): out must be a list");
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
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    if (pos < 0) {
        pos = 0;
    }
    while (end - pos >= 4) {
        const unsigned char *p = buf + pos;
        unsigned long long n = ((unsigned long long)p[0] << 24) | ((unsigned long long)p[1] << 16)
                               | ((unsigned long long)p[2] << 8) | (unsigned long long)p[3];
        if ((long long)n > limit) {
            return PyLong_FromSsize_t(-1 - pos);
        }
        if ((unsigned long long)(end - pos - 4) < n) {
            break;
        }
        PyObject *frame = PyBytes_FromStringAndSize((const char *)p + 4, (Py_ssize_t)n);
        if (frame == NULL) {
            return NULL;
        }
        int rc = PyList_Append(out, frame);
        Py_DECREF(frame);
        if (rc < 0) {
            return NULL;
        }
        pos += 4 + (Py_ssize_t)n;
    }
    return PyLong_FromSsize_t(pos);
}

/* ------------------------------------------------------------------ ws_encode
 *
 * A client's AMPS-over-WebSocket writes: each payload of a TCP-framed buffer becomes the
 * messages count (u32 little-endian: 1, or 2 with a body), header[, body], each a masked
 * RFC 6455 frame (binary for the count; text for header and body in a text session). This
 * is what WebSocketTransport.write + BatchingMixin.frame_many do in Python; anything the
 * fast scan does not settle (a backslash before the header's end, non-ASCII text in a text
 * session, no random source) returns None and Python does the whole buffer.
 */

#if defined(__linux__)
#include <sys/random.h>
#define HAVE_GETRANDOM 1
#endif

/* The body offset, as protocol.message.body_offset's fast path finds it: the first '}' with
 * an even number of quotes before it. -1: a backslash came first, or there is no such '}'. */
static Py_ssize_t
header_end(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t quotes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\\') {
            return -1;
        }
        if (c == '"') {
            quotes++;
        }
        else if (c == '}' && !(quotes & 1)) {
            return i + 1;
        }
    }
    return -1;
}

static int
all_ascii(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            return 0;
        }
    }
    return 1;
}

static inline Py_ssize_t
ws_frame_size(Py_ssize_t n)
{
    return (n < 126 ? 2 : n < 0x10000 ? 4 : 10) + 4 + n;
}

/* One masked frame of ``n`` bytes at ``out``; returns the bytes written. */
static Py_ssize_t
put_ws_frame(unsigned char *out, unsigned char first, const unsigned char *data, Py_ssize_t n,
             const unsigned char key[4])
{
    unsigned char *q = out;
    *q++ = first;
    if (n < 126) {
        *q++ = (unsigned char)(0x80 | n);
    }
    else if (n < 0x10000) {
        *q++ = 0x80 | 126;
        *q++ = (unsigned char)(n >> 8);
        *q++ = (unsigned char)n;
    }
    else {
        *q++ = 0x80 | 127;
        for (int i = 7; i >= 0; i--) {
            *q++ = (unsigned char)((unsigned long long)n >> (8 * i));
        }
    }
    memcpy(q, key, 4);
    q += 4;
    for (Py_ssize_t i = 0; i < n; i++) {
        q[i] = data[i] ^ key[i & 3];
    }
    return (q - out) + n;
}

PyDoc_STRVAR(ws_encode_doc,
"ws_encode(data, text) -> bytes | None\n\n"
"The masked WebSocket frames a client sends for the 4-byte-length-prefixed payloads in\n"
"``data`` (count, header, body messages; see the C source), or None when the Python path\n"
"must do it.");

static PyObject *
ws_encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "ws_encode(data: bytes, text: bool)");
        return NULL;
    }
#ifndef HAVE_GETRANDOM
    Py_RETURN_NONE;
#else
    int text = PyObject_IsTrue(args[1]);
    if (text < 0) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]), pos = 0, size = 0, messages = 0;
    while (pos < n) { /* pass 1: sizes, and whether this path can take it all */
        if (n - pos < 4) {
            PyErr_SetString(PyExc_ValueError, "ws_encode(): truncated length prefix");
            return NULL;
        }
        Py_ssize_t len = (Py_ssize_t)((uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16
                                      | (uint32_t)p[pos + 2] << 8 | p[pos + 3]);
        pos += 4;
        if (len > n - pos) {
            PyErr_SetString(PyExc_ValueError, "ws_encode(): truncated payload");
            return NULL;
        }
        Py_ssize_t head = header_end(p + pos, len);
        if (head < 0 || (text && !all_ascii(p + pos, len))) {
            Py_RETURN_NONE;
        }
        size += ws_frame_size(4) + ws_frame_size(head);
        messages += 2;
        if (len > head) {
            size += ws_frame_size(len - head);
            messages += 1;
        }
        pos += len;
    }
    unsigned char *keys = PyMem_Malloc(messages ? (size_t)messages * 4 : 1);
    if (keys == NULL) {
        return PyErr_NoMemory();
    }
    size_t want = (size_t)messages * 4, got = 0;
    while (got < want) {
        ssize_t r = getrandom(keys + got, want - got, 0);
        if (r < 0) {
            PyMem_Free(keys);
            Py_RETURN_NONE; /* no random source here: Python's os.urandom path */
        }
        got += (size_t)r;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        PyMem_Free(keys);
        return NULL;
    }
    unsigned char *q = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *key = keys;
    unsigned char text_op = text ? 0x81 : 0x82;
    pos = 0;
    while (pos < n) { /* pass 2: the frames */
        Py_ssize_t len = (Py_ssize_t)((uint32_t)p[pos] << 24 | (uint32_t)p[pos + 1] << 16
                                      | (uint32_t)p[pos + 2] << 8 | p[pos + 3]);
        pos += 4;
        Py_ssize_t head = header_end(p + pos, len);
        unsigned char count[4] = {len > head ? 2 : 1, 0, 0, 0};
        q += put_ws_frame(q, 0x82, count, 4, key);
        key += 4;
        q += put_ws_frame(q, text_op, p + pos, head, key);
        key += 4;
        if (len > head) {
            q += put_ws_frame(q, text_op, p + pos + head, len - head, key);
            key += 4;
        }
        pos += len;
    }
    PyMem_Free(keys);
    return out;
#endif
}

/* ------------------------------------------------------------------ deliver */

/* MessageFields: the storage of an ampsclient.Message, a type this module owns (its twin:
 * ampsclient._accel.PyMessageFields). ampsclient/protocol/message.py builds Message on it and
 * documents its six fields; the receive pass below fills them as Message.refill does. Its
 * fields are public members of a C type, written here through the struct: no attribute of
 * any other class is read or written. */

typedef struct {
    PyObject_HEAD
    PyObject *payload;  /* payload_bytes: the frame's payload (header and body) */
    PyObject *sub_id;   /* routed_sub_id: the subscription it was routed to, or None */
    PyObject *header;   /* parsed_header: the decoded header, or None */
    PyObject *data;     /* parsed_data: the body bytes, or None */
    PyObject *bookmark; /* seen_bookmark: the bm value read without parsing, or None */
    PyObject *body;     /* body_start: the body's offset, -1 when not known */
} MessageFields;

static PyTypeObject MessageFieldsType;

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

static PyTypeObject MessageFieldsType = {
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

#define MF(obj) ((MessageFields *)(obj))

static PyObject *minus_one = NULL, *plus_one = NULL;

/* ``cls`` is a class whose instances are MessageFields: 0, else -1 with TypeError */
static int
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
static PyObject *message_type_seen = NULL;

static int
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

static inline int
is_message(PyObject *obj)
{
#ifndef Py_GIL_DISABLED
    PyObject *seen = message_type_seen;
    if (seen != NULL && ((PyWeakReference *)seen)->wr_object == (PyObject *)Py_TYPE(obj)) {
        return 1;
    }
#endif
    return Py_IS_TYPE(obj, &MessageFieldsType) || is_message_slow(obj);
}

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

#ifndef Py_GIL_DISABLED
typedef struct Lane Lane;
static Lane *lane_of(PyObject *log);
static long long lane_log_number(Lane *self, PyObject *message);
static PyObject *lane_slow_log(Lane *self);
#endif

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

PyDoc_STRVAR(deliver_doc,
"deliver(payloads, cache, lengths, message_type, unrouted, report, bm_next) -> None\n\n"
"``ampsclient.core.routes.deliver`` in C (see there): route each payload by\n"
"its first ``length`` bytes through ``cache``, fill one recycled ``message_type`` instance\n"
"and call the route's handler (a route to a list: the payload is appended to it);\n"
"payloads no prefix routes go to ``unrouted(payload)``;\n"
"an Exception raised by a handler goes to ``report(exc)``.");

static PyObject *
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

PyDoc_STRVAR(deliver_stream_doc,
"deliver_stream(data, pos, limit, cache, lengths, message_type, unrouted, report, bm_next)\n"
"-> (int, int)\n\n"
"``split_frames`` and ``deliver`` in one pass (``ampsclient.core.routes.deliver_stream``):\n"
"each whole 4-byte-length-prefixed payload of ``data[pos:]`` is delivered as it is cut.\n"
"Returns (the offset of the first byte not consumed, how many payloads were delivered);\n"
"a length prefix above ``limit`` stops the pass and gives ``-1 - offset`` of that prefix.\n"
"A payload's bytes object is refilled for the next payload when nothing but the recycled\n"
"message held it (no allocation per payload in the common case).");

static PyObject *
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

/* ------------------------------------------------------------------ a publisher's write */

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* (a platform without it: Python ignores SIGPIPE anyway) */
#endif

PyDoc_STRVAR(send_nowait_doc,
"send_nowait(fd, data) -> int\n\n"
"Send ``data`` on the socket ``fd`` without waiting: the bytes the socket took, 0 when it\n"
"is full. Unlike ``socket.send`` it keeps the GIL: the call is short (it copies at most\n"
"what fits in the socket's buffer), and a thread that let go of the GIL for it would\n"
"hand it to the process's other threads and wait to get it back (ampsclient.writer:\n"
"a publisher thread's writes and the loop's). Raises OSError for other errors.");

static PyObject *
send_nowait(PyObject *self, PyObject *args)
{
    int fd;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*:send_nowait", &fd, &data)) {
        return NULL;
    }
    ssize_t sent;
    do {
        sent = send(fd, data.buf, (size_t)data.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    int err = errno;
    PyBuffer_Release(&data);
    if (sent >= 0) {
        return PyLong_FromSsize_t(sent);
    }
    if (err == EAGAIN || err == EWOULDBLOCK) {
        return PyLong_FromLong(0);
    }
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* ------------------------------------------------------------------ publish stores */

/* The decimal digits of v, written backwards ending at ``end``; returns where they start.
 * The division by 10 is spelled as the multiply compilers use for it: GCC treats the lane's
 * common case, after its many "take the slow path" checks, as cold code, optimises it for
 * size and emitted a 64-bit ``div`` per digit there (about 90 ns of a 6-digit sequence). */
static inline char *
u64_digits(unsigned long long v, char *end)
{
    do {
        unsigned long long q = (unsigned long long)(((unsigned __int128)v * 0xCCCCCCCCCCCCCCCDULL) >> 67);
        *--end = (char)('0' + (v - q * 10));
        v = q;
    } while (v);
    return end;
}

PyDoc_STRVAR(join_seq_doc,
"join_seq(head, sequence, tail) -> bytes\n\n"
"``head + b\"%d\" % sequence + tail`` in one allocation (a publish store's payload).");

static PyObject *
join_seq(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[2])
        || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "join_seq(head: bytes, sequence: int, tail: bytes)");
        return NULL;
    }
    int overflow = 0;
    long long seq = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (overflow || (seq == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        /* huge: the slow, exact way */
        PyObject *text = PyObject_Str(args[1]);
        if (text == NULL) {
            return NULL;
        }
        PyObject *mid = PyUnicode_AsASCIIString(text);
        Py_DECREF(text);
        if (mid == NULL) {
            return NULL;
        }
        PyObject *out = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(args[0])
                                                  + PyBytes_GET_SIZE(mid) + PyBytes_GET_SIZE(args[2]));
        if (out != NULL) {
            char *p = PyBytes_AS_STRING(out);
            memcpy(p, PyBytes_AS_STRING(args[0]), (size_t)PyBytes_GET_SIZE(args[0]));
            p += PyBytes_GET_SIZE(args[0]);
            memcpy(p, PyBytes_AS_STRING(mid), (size_t)PyBytes_GET_SIZE(mid));
            p += PyBytes_GET_SIZE(mid);
            memcpy(p, PyBytes_AS_STRING(args[2]), (size_t)PyBytes_GET_SIZE(args[2]));
        }
        Py_DECREF(mid);
        return out;
    }
    char buf[24];
    char *end = buf + sizeof buf, *digits = end;
    unsigned long long v = seq < 0 ? 0ULL - (unsigned long long)seq : (unsigned long long)seq;
    digits = u64_digits(v, end);
    if (seq < 0) {
        *--digits = '-';
    }
    int len = (int)(end - digits);
    Py_ssize_t hn = PyBytes_GET_SIZE(args[0]), tn = PyBytes_GET_SIZE(args[2]);
    PyObject *out = PyBytes_FromStringAndSize(NULL, hn + len + tn);
    if (out == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, PyBytes_AS_STRING(args[0]), (size_t)hn);
    memcpy(p + hn, digits, (size_t)len);
    memcpy(p + hn + len, PyBytes_AS_STRING(args[2]), (size_t)tn);
    return out;
}

/* CRC-32 as zlib computes it (reflected 0xEDB88320), slicing by 8. */
static uint32_t crc_table[8][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
        }
    }
}

static uint32_t
crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                            | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16
                     | (uint32_t)p[7] << 24;
        crc = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF]
              ^ crc_table[5][(a >> 16) & 0xFF] ^ crc_table[4][a >> 24]
              ^ crc_table[3][b & 0xFF] ^ crc_table[2][(b >> 8) & 0xFF]
              ^ crc_table[1][(b >> 16) & 0xFF] ^ crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    }
    return ~crc;
}

PyDoc_STRVAR(crc32_doc, "crc32(data, value=0) -> int\n\nzlib.crc32, computed here (tests).");

static PyObject *
crc32_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "crc32(data: bytes, value: int = 0)");
        return NULL;
    }
    unsigned long start = 0;
    if (nargs == 2) {
        start = PyLong_AsUnsignedLongMask(args[1]);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    return PyLong_FromUnsignedLong(crc32_update((uint32_t)start,
                                                (const unsigned char *)PyBytes_AS_STRING(args[0]),
                                                (size_t)PyBytes_GET_SIZE(args[0])));
}

/* ------------------------------------------------------------------ delivery_columns
 *
 * delivery_columns(payloads, aliases): the column buffers of a batch of deliveries (twin:
 * ampsclient.protocol.columns.delivery_columns, which documents the result). A pure
 * function: bytes in, bytes out; None when one payload is not of the usual shape.
 */

PyDoc_STRVAR(delivery_columns_doc,
"delivery_columns(payloads, aliases) -> tuple | None\n\n"
"Arrow-layout column buffers of the headers (t, bm, k, x as strings; bm's publisher id as\n"
"decimal128 and sequence as int64; ts as int64 microseconds) and bodies of a list of\n"
"delivery payloads; None when one is irregular (ampsclient.protocol.columns).");

/* An output column written in place in its bytes object: presized from the input's sizes
 * (an upper bound: the pages never written are never touched), cut to its length at the end
 * (a shrinking realloc, no copy). Grows only when the bound could not be had. */
typedef struct {
    PyObject *obj;
    unsigned char *buf;
    Py_ssize_t len, cap;
} DcOut;

static int dc_open(DcOut *o, Py_ssize_t cap, Py_ssize_t fallback)
{
    o->len = 0;
    o->obj = PyBytes_FromStringAndSize(NULL, cap > 0 ? cap : 1);
    if (o->obj == NULL && fallback < cap) {
        PyErr_Clear();
        cap = fallback;
        o->obj = PyBytes_FromStringAndSize(NULL, cap > 0 ? cap : 1);
    }
    if (o->obj == NULL) return -1;
    o->cap = cap > 0 ? cap : 1;
    o->buf = (unsigned char *)PyBytes_AS_STRING(o->obj);
    return 0;
}

static int dc_reserve(DcOut *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap) return 0;
    Py_ssize_t cap = o->cap;
    while (cap < o->len + n) cap *= 2;
    if (_PyBytes_Resize(&o->obj, cap) < 0) return -1; /* (o->obj is NULL then) */
    o->cap = cap;
    o->buf = (unsigned char *)PyBytes_AS_STRING(o->obj);
    return 0;
}

/* The finished bytes (the reference moves to the caller), or NULL. */
static PyObject *dc_close(DcOut *o)
{
    if (o->obj != NULL && o->len != o->cap && _PyBytes_Resize(&o->obj, o->len) < 0) return NULL;
    PyObject *done = o->obj;
    o->obj = NULL;
    return done;
}

/* n bytes from s (no overlap, n within the reserved room): short spans by word moves. */
static inline void dc_copy(unsigned char *d, const unsigned char *s, Py_ssize_t n)
{
    if (n > 32 && n <= 64) {
        memcpy(d, s, 32);
        memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n > 64) {
        memcpy(d, s, (size_t)n);
    } else {
        for (Py_ssize_t k = 0; k < n; k++) d[k] = s[k];
    }
}

/* v as `width` little-endian bytes (width 4 or 8) */
static inline void dc_le(unsigned char *d, uint64_t v, int width)
{
#if PY_LITTLE_ENDIAN
    if (width == 8) memcpy(d, &v, 8);
    else { uint32_t w = (uint32_t)v; memcpy(d, &w, 4); }
#else
    for (int k = 0; k < width; k++) d[k] = (unsigned char)(v >> (8 * k));
#endif
}

/* A validity bitmap as bytes, or None when no value is null. */
static PyObject *dc_bitmap(const unsigned char *bits, Py_ssize_t n, Py_ssize_t nulls)
{
    if (nulls == 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)bits, (n + 7) / 8);
}

static int dc_is_digits(const unsigned char *p, Py_ssize_t n)
{
    if (n <= 0) return 0;
    for (Py_ssize_t i = 0; i < n; i++) if (p[i] < '0' || p[i] > '9') return 0;
    return 1;
}

static long long dc_num(const unsigned char *p, Py_ssize_t n)
{
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    return v;
}

/* the bytes of a bare (unquoted) header value: digits, letters, . + - _ */
static const unsigned char dc_bare_tab[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['.'] = 1, ['+'] = 1, ['-'] = 1, ['_'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
};

/* days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil) */
static long long dc_days(long long y, long long m, long long d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* YYYYmmddTHHMMSS.ffffffZ -> microseconds; 0 when not of that form */
static int dc_micros(const unsigned char *t, Py_ssize_t n, long long *out)
{
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n != 23 || t[8] != 'T' || t[15] != '.' || t[22] != 'Z' || !dc_is_digits(t, 8)
        || !dc_is_digits(t + 9, 6) || !dc_is_digits(t + 16, 6))
        return 0;
    long long y = dc_num(t, 4), mo = dc_num(t + 4, 2), d = dc_num(t + 6, 2);
    long long h = dc_num(t + 9, 2), mi = dc_num(t + 11, 2), s = dc_num(t + 13, 2);
    int leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > (mo == 2 && !leap ? 28 : mdays[mo - 1]))
        return 0;
    if (h > 23 || mi > 59 || s > 59) return 0;
    *out = ((dc_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 1000000) + dc_num(t + 16, 6);
    return 1;
}

#define DC_KEYS 5 /* t, bm, k, x (string columns), ts */

static int dc_key(const unsigned char *k, Py_ssize_t n)
{
    if (n == 1) {
        if (k[0] == 't') return 0;
        if (k[0] == 'k') return 2;
        if (k[0] == 'x') return 3;
    } else if (n == 2) {
        if (k[0] == 'b' && k[1] == 'm') return 1;
        if (k[0] == 't' && k[1] == 's') return 4;
    }
    return -1;
}

/* The aliases of a call: their lengths as a bit mask (lengths 0-63), so that most keys are
 * cleared without a compare; `longer`: one is 64 bytes or more. */
typedef struct {
    PyObject *aliases;
    uint64_t lengths;
    int longer;
} DcAliases;

static int dc_aliased(const DcAliases *al, const unsigned char *key, Py_ssize_t klen)
{
    if (klen < 64 ? !((al->lengths >> klen) & 1) : !al->longer) return 0;
    Py_ssize_t na = PyTuple_GET_SIZE(al->aliases);
    for (Py_ssize_t a = 0; a < na; a++) {
        PyObject *alias = PyTuple_GET_ITEM(al->aliases, a);
        if (PyBytes_GET_SIZE(alias) == klen
            && memcmp(PyBytes_AS_STRING(alias), key, (size_t)klen) == 0)
            return 1;
    }
    return 0;
}

/* The wanted values and the body's offset of one payload; 0: irregular. The quotes are
 * scanned inline (keys and values are short: a memchr call costs more than the scan). */
static int dc_header(const unsigned char *p, Py_ssize_t n, const DcAliases *al,
                     const unsigned char **vals, Py_ssize_t *lens, Py_ssize_t *body)
{
    for (int k = 0; k < DC_KEYS; k++) vals[k] = NULL, lens[k] = 0;
    if (n < 2 || p[0] != '{') return 0;
    Py_ssize_t i = 1;
    if (p[i] == '}') { *body = 2; return 1; }
    for (;;) {
        if (i >= n || p[i] != '"') return 0;
        Py_ssize_t j = i + 1;
        while (j < n && p[j] != '"') {
            if (p[j] == '\\') return 0; /* an escape in a key */
            j++;
        }
        if (j >= n) return 0;
        const unsigned char *key = p + i + 1;
        Py_ssize_t klen = j - i - 1;
        i = j + 1;
        if (i >= n || p[i] != ':') return 0;
        i++;
        if (i >= n) return 0;
        int which = dc_key(key, klen);
        if (which < 0 && dc_aliased(al, key, klen)) return 0;
        if (p[i] == '"') {
            j = i + 1;
            int escaped = 0;
            uint64_t high = 0; /* the OR of the bytes scanned: a high bit if one is not ASCII */
            while (j + 8 <= n) { /* 8 bytes at a time while none is a quote or a backslash */
                uint64_t w, q, e, mq, me;
                memcpy(&w, p + j, 8);
                q = w ^ 0x2222222222222222ULL;
                e = w ^ 0x5C5C5C5C5C5C5C5CULL;
                /* the high bit of each byte that is 0 (exact up to the first such byte) */
                mq = (q - 0x0101010101010101ULL) & ~q & 0x8080808080808080ULL;
                me = (e - 0x0101010101010101ULL) & ~e & 0x8080808080808080ULL;
                if (mq | me) {
#if PY_LITTLE_ENDIAN && defined(__GNUC__)
                    /* the first is a quote: the value ends there (its bytes before, once) */
                    int at = __builtin_ctzll(mq | me);
                    if (mq && (me == 0 || __builtin_ctzll(mq) < __builtin_ctzll(me))) {
                        high |= w & ((1ULL << at) - 1);
                        j += at >> 3;
                    }
#endif
                    break;
                }
                high |= w;
                j += 8;
            }
            while (j < n && p[j] != '"') {
                if (p[j] == '\\') { escaped = 1; j += 2; }
                else high |= p[j++];
            }
            if (j >= n) return 0;
            if (which >= 0) {
                if (escaped || vals[which] != NULL || (high & 0x8080808080808080ULL)) return 0;
                vals[which] = p + i + 1;
                lens[which] = j - i - 1;
            }
            i = j + 1;
        } else {
            if (which >= 0) return 0;
            j = i;
            while (j < n && dc_bare_tab[p[j]]) j++;
            if (j == i) return 0;
            i = j;
        }
        if (i >= n) return 0;
        if (p[i] == ',') { i++; continue; }
        if (p[i] == '}') { *body = i + 1; return 1; }
        return 0;
    }
}

/* bm's publisherId|sequence|... -> the two numbers; 0: not of that form. One pass over the
 * digits (the same checks as the twin's _bookmark: 1-20 digits below 2**64, then 1-19 digits
 * up to 2**63 - 1, each closed by a '|'). */
static int dc_bookmark(const unsigned char *b, Py_ssize_t bl, uint64_t *pid, long long *seq)
{
    uint64_t pv = 0;
    Py_ssize_t k = 0;
#if PY_LITTLE_ENDIAN
    /* the first 16 digits 8 at a time (simdjson's is_made_of_eight_digits_fast and
     * parse_eight_digits_unrolled), the rest one by one */
    while (k + 8 <= bl && k < 16) {
        uint64_t w;
        memcpy(&w, b + k, 8);
        if (((w & 0xF0F0F0F0F0F0F0F0ULL)
             | (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4))
            != 0x3333333333333333ULL)
            break;
        w -= 0x3030303030303030ULL;
        w = w * 10 + (w >> 8);
        w = (((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)))
             + (((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))))
            >> 32;
        pv = pv * 100000000ULL + (uint32_t)w;
        k += 8;
    }
#endif
    while (k < bl && b[k] >= '0' && b[k] <= '9') {
        unsigned d = (unsigned)(b[k] - '0');
        if (k >= 19 && (k >= 20 || pv > (UINT64_MAX - d) / 10)) return 0; /* 19 digits fit */
        pv = pv * 10 + d;
        k++;
    }
    if (k == 0 || k >= bl || b[k] != '|') return 0;
    Py_ssize_t s = ++k;
    unsigned long long qv = 0;
    while (k < bl && b[k] >= '0' && b[k] <= '9') {
        if (k - s >= 19) return 0;
        qv = qv * 10 + (unsigned)(b[k] - '0');
        k++;
    }
    if (k == s || k >= bl || b[k] != '|' || qv > (unsigned long long)INT64_MAX) return 0;
    *pid = pv;
    *seq = (long long)qv;
    return 1;
}

static PyObject *
delivery_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "delivery_columns(payloads: list, aliases: tuple)");
        return NULL;
    }
    PyObject *payloads = args[0], *aliases = args[1];
    DcAliases al = {aliases, 0, 0};
    for (Py_ssize_t a = 0; a < PyTuple_GET_SIZE(aliases); a++) {
        PyObject *alias = PyTuple_GET_ITEM(aliases, a);
        if (!PyBytes_Check(alias)) {
            PyErr_SetString(PyExc_TypeError, "aliases must be bytes");
            return NULL;
        }
        Py_ssize_t alen = PyBytes_GET_SIZE(alias);
        if (alen < 64) al.lengths |= (uint64_t)1 << alen;
        else al.longer = 1;
    }
    Py_ssize_t n = PyList_GET_SIZE(payloads), nb = (n + 7) / 8;
    /* The input's size bounds each data column (a value lies inside its payload). */
    Py_ssize_t total = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *item = PyList_GET_ITEM(payloads, r);
        if (PyBytes_Check(item)) total += PyBytes_GET_SIZE(item);
    }
    DcOut off[5] = {{0}}, data[5] = {{0}}, pid = {0}, seq = {0}, mic = {0}; /* 4: body */
    unsigned char *bits[5] = {NULL}; /* t, bm, k, x, ts */
    Py_ssize_t nulls[5] = {0};
    PyObject *result = NULL, *items[18] = {NULL};
    int regular = 1;
    for (int c = 0; c < 5; c++) {
        bits[c] = PyMem_Calloc((size_t)(nb ? nb : 1), 1);
        if (bits[c] == NULL) { PyErr_NoMemory(); goto done; }
        if (dc_open(&off[c], 4 * (n + 1), 4 * (n + 1)) < 0) goto done;
        if (dc_open(&data[c], total, 256) < 0) goto done;
        dc_le(off[c].buf, 0, 4);
        off[c].len = 4;
    }
    if (dc_open(&pid, 16 * n, 16 * n) < 0 || dc_open(&seq, 8 * n, 8 * n) < 0
        || dc_open(&mic, 8 * n, 8 * n) < 0)
        goto done;
    for (Py_ssize_t r = 0; r < n && regular; r++) {
        PyObject *item = PyList_GET_ITEM(payloads, r);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "payloads must be bytes");
            goto done;
        }
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t len = PyBytes_GET_SIZE(item), body = 0;
        const unsigned char *vals[DC_KEYS];
        Py_ssize_t lens[DC_KEYS];
        if (!dc_header(p, len, &al, vals, lens, &body)) { regular = 0; break; }
        /* bm: publisherId|sequence| */
        uint64_t pv = 0;
        long long sv = 0;
        if (vals[1] != NULL && !dc_bookmark(vals[1], lens[1], &pv, &sv)) { regular = 0; break; }
        long long us = 0;
        if (vals[4] != NULL) {
            if (!dc_micros(vals[4], lens[4], &us)) { regular = 0; break; }
            bits[4][r >> 3] |= (unsigned char)(1u << (r & 7));
        } else {
            nulls[4]++;
        }
        vals[4] = p + body; /* from here on, 4 is the body */
        lens[4] = len - body;
        for (int c = 0; c < 5; c++) {
            const unsigned char *v = vals[c];
            Py_ssize_t vl = lens[c];
            if (c < 4) {
                if (v == NULL) nulls[c]++;
                else bits[c][r >> 3] |= (unsigned char)(1u << (r & 7));
            }
            if (v != NULL && vl) {
                if (dc_reserve(&data[c], vl) < 0) goto done;
                dc_copy(data[c].buf + data[c].len, v, vl);
                data[c].len += vl;
            }
            if (data[c].len > INT32_MAX) { regular = 0; break; }
            dc_le(off[c].buf + off[c].len, (uint64_t)data[c].len, 4);
            off[c].len += 4;
        }
        if (!regular) break;
        unsigned char *d = pid.buf + pid.len;
        dc_le(d, pv, 8);
        dc_le(d + 8, 0, 8);
        pid.len += 16;
        dc_le(seq.buf + seq.len, (uint64_t)sv, 8);
        seq.len += 8;
        dc_le(mic.buf + mic.len, (uint64_t)us, 8);
        mic.len += 8;
    }
    if (!regular) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (int c = 0; c < 4; c++) {
        items[3 * c] = dc_close(&off[c]);
        items[3 * c + 1] = dc_close(&data[c]);
        items[3 * c + 2] = dc_bitmap(bits[c], n, nulls[c]);
    }
    items[12] = dc_close(&pid);
    items[13] = dc_close(&seq);
    items[14] = dc_close(&mic);
    items[15] = dc_bitmap(bits[4], n, nulls[4]);
    items[16] = dc_close(&off[4]);
    items[17] = dc_close(&data[4]);
    for (int k = 0; k < 18; k++) if (items[k] == NULL) goto done;
    result = PyTuple_New(18);
    if (result == NULL) goto done;
    for (int k = 0; k < 18; k++) {
        PyTuple_SET_ITEM(result, k, items[k]);
        items[k] = NULL;
    }
done:
    for (int k = 0; k < 18; k++) Py_XDECREF(items[k]);
    for (int c = 0; c < 5; c++) {
        Py_XDECREF(off[c].obj);
        Py_XDECREF(data[c].obj);
        PyMem_Free(bits[c]);
    }
    Py_XDECREF(pid.obj);
    Py_XDECREF(seq.obj);
    Py_XDECREF(mic.obj);
    return result;
}

static inline void
be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* The msgpack head of a stored-message record body, [sequence, bin(n)]; returns its size. */
static Py_ssize_t
record_head(unsigned char head[15], unsigned long long seq, Py_ssize_t n)
{
    head[0] = 0x92;
    head[1] = 0xCF;
    for (int i = 0; i < 8; i++) {
        head[2 + i] = (unsigned char)(seq >> (56 - 8 * i));
    }
    if (n < 0x100) {
        head[10] = 0xC4;
        head[11] = (unsigned char)n;
        return 12;
    }
    if (n < 0x10000) {
        head[10] = 0xC5;
        head[11] = (unsigned char)(n >> 8);
        head[12] = (unsigned char)n;
        return 13;
    }
    head[10] = 0xC6;
    be32(head + 11, (uint32_t)n);
    return 15;
}

/* The record's size: [u32 length][u32 crc][head][payload]. */
static inline Py_ssize_t
record_size(Py_ssize_t n)
{
    return 8 + (n < 0x100 ? 12 : n < 0x10000 ? 13 : 15) + n;
}

/* Write the record of (seq, payload) at p, which has record_size(n) bytes of room. */
static void
put_record(unsigned char *p, unsigned long long seq, const unsigned char *payload, Py_ssize_t n)
{
    unsigned char head[15];
    Py_ssize_t hlen = record_head(head, seq, n);
    uint32_t crc = crc32_update(crc32_update(0, head, (size_t)hlen), payload, (size_t)n);
    be32(p, (uint32_t)(hlen + n));
    be32(p + 4, crc);
    memcpy(p + 8, head, (size_t)hlen);
    memcpy(p + 8 + hlen, payload, (size_t)n);
}

PyDoc_STRVAR(write_record_doc,
"write_record(buffer, start, sequence, payload) -> int\n\n"
"Write the FilePublishStore record of ``payload`` (see store_record in\n"
"stores/publish/record.py) into the writable ``buffer`` at ``start``; return its end. The\n"
"caller makes room first (ValueError otherwise).");

static PyObject *
write_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "write_record(buffer, start: int, sequence: int, payload: bytes)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[2]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[3]);
    if (n > 0xFFFFFFF0) {
        PyErr_SetString(PyExc_ValueError, "write_record(): payload too large");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    Py_ssize_t end = start + record_size(n);
    if (start < 0 || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "write_record(): no room in the buffer");
        return NULL;
    }
    put_record((unsigned char *)view.buf + start, seq,
               (const unsigned char *)PyBytes_AS_STRING(args[3]), n);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(end);
}

/* ------------------------------------------------------------------ publish_frame
 *
 * One publish as a TCP frame: the 4-byte big-endian payload length, then head, the sequence
 * in decimal (none for None), tail, data. The twin of ampsclient.core.publish.publish_frame
 * (the core's encoder makes head and tail: publish_header); both publish lanes spell their
 * frames with spell_publish, so a lane and the Python paths send the same bytes. */

/* the frame's length (4 + payload), or -1 when the payload would not fit the 32-bit length */
static inline Py_ssize_t
publish_frame_size(Py_ssize_t head_len, Py_ssize_t ndigits, Py_ssize_t tail_len,
                   Py_ssize_t body_len)
{
    Py_ssize_t n = head_len + ndigits + tail_len + body_len;
    return n > (Py_ssize_t)0xFFFFFFFF - 4 ? -1 : 4 + n;
}

/* write the frame into out (publish_frame_size bytes); returns the payload's start. Inline,
 * and no call for an empty part: the plain lane (no sequence, no tail) pays for two copies */
static inline char *
spell_publish(char *out, const char *head, Py_ssize_t head_len, const char *digits,
              Py_ssize_t ndigits, const char *tail, Py_ssize_t tail_len, const char *body,
              Py_ssize_t body_len)
{
    be32((unsigned char *)out, (uint32_t)(head_len + ndigits + tail_len + body_len));
    char *p = out + 4;
    memcpy(p, head, (size_t)head_len);
    if (ndigits > 0) {
        memcpy(p + head_len, digits, (size_t)ndigits);
    }
    if (tail_len > 0) {
        memcpy(p + head_len + ndigits, tail, (size_t)tail_len);
    }
    memcpy(p + head_len + ndigits + tail_len, body, (size_t)body_len);
    return p;
}

PyDoc_STRVAR(publish_frame_doc,
"publish_frame(head, sequence, tail, data) -> bytes\n\n"
"One publish as a TCP frame: length, head, the sequence in decimal (None: none), tail, data\n"
"(twin: ampsclient.core.publish.publish_frame).");

static PyObject *
publish_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[2])
        || !PyBytes_CheckExact(args[3]) || (args[1] != Py_None && !PyLong_CheckExact(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "publish_frame(head: bytes, sequence: int | None, "
                                         "tail: bytes, data: bytes)");
        return NULL;
    }
    char buf[24];
    const char *digits = buf;
    Py_ssize_t ndigits = 0;
    PyObject *text = NULL; /* the digits of a sequence outside 0..2**64-1 */
    if (args[1] != Py_None) {
        int overflow = 0;
        long long seq = PyLong_AsLongLongAndOverflow(args[1], &overflow);
        if (seq == -1 && !overflow && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow || seq < 0) {
            PyObject *str = PyObject_Str(args[1]);
            text = str == NULL ? NULL : PyUnicode_AsASCIIString(str);
            Py_XDECREF(str);
            if (text == NULL) {
                return NULL;
            }
            digits = PyBytes_AS_STRING(text);
            ndigits = PyBytes_GET_SIZE(text);
        }
        else {
            char *end = buf + sizeof buf;
            digits = u64_digits((unsigned long long)seq, end);
            ndigits = end - digits;
        }
    }
    Py_ssize_t hn = PyBytes_GET_SIZE(args[0]), tn = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t bn = PyBytes_GET_SIZE(args[3]);
    Py_ssize_t size = publish_frame_size(hn, ndigits, tn, bn);
    PyObject *out = NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_OverflowError, "publish_frame: the payload is over 4 GiB");
    }
    else {
        out = PyBytes_FromStringAndSize(NULL, size);
    }
    if (out != NULL) {
        spell_publish(PyBytes_AS_STRING(out), PyBytes_AS_STRING(args[0]), hn, digits, ndigits,
                      PyBytes_AS_STRING(args[2]), tn, PyBytes_AS_STRING(args[3]), bn);
    }
    Py_XDECREF(text);
    return out;
}

/* ------------------------------------------------------------------ StoreLock, BookmarkLane
 *
 * MemoryBookmarkStore's common case in C: a delivery whose publisher already has a point
 * and nothing pending becomes the subscription's one in-flight message (log), and
 * discarding that message moves the publisher's point (discard). This is exactly the
 * first branch of MemoryBookmarkStore.log and .discard_message (see there); anything else,
 * including every error, goes to the Python methods given at construction.
 *
 * The lane keeps the numbers of that common case as C state and writes them back into the
 * store's records (the fields of their C base types, below) only when a Python method of
 * the store takes its lock:
 * the store's lock is a StoreLock (below), whose acquire() writes the lane's state back
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

#ifndef Py_GIL_DISABLED

/* The bookmark store's two record types' fields, types this module owns (twins:
 * ampsclient._accel.PyBookmarkSubscriptionFields, PyBookmarkPublisherFields): the records of
 * ampsclient.stores.bookmark.memory are built on them and document their public fields; the
 * lane reads and writes those fields through these structs, no other class's slot. */

typedef struct {
    PyObject_HEAD
    PyObject *inflight;
    PyObject *last_pub;
    PyObject *next_no;
    PyObject *pubs;
    PyObject *points;
    PyObject *loaded_ts;
    PyObject *recent;
} BmSubFields;

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

static PyTypeObject BmSubFieldsType = {
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

typedef struct {
    PyObject_HEAD
    PyObject *high;
    PyObject *done;
    PyObject *point;
    PyObject *queue;
    PyObject *slot;
} BmPubFields;

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

static PyTypeObject BmPubFieldsType = {
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

typedef struct Lane Lane;

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    int held;   /* acquired (read by the lane without a call) */
    Lane *lane; /* borrowed: the lane whose state a Python acquire writes back */
} StoreLock;

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

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static inline void
put(PyObject *obj, Py_ssize_t offset, PyObject *value) /* steals nothing */
{
    Py_INCREF(value);
    Py_XSETREF(SLOT(obj, offset), value);
}

/* put() of a new reference (stolen); -1 when value is NULL (an error is set) */
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
static int
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

/* ---- StoreLock: threading.Lock's interface, with a flag the lane reads */

static PyObject *
slock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "StoreLock() takes no arguments");
        return NULL;
    }
    StoreLock *self = (StoreLock *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void
slock_dealloc(StoreLock *self)
{
    if (self->lock != NULL) {
        if (self->held) {
            PyThread_release_lock(self->lock);
        }
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the lock is ours (GIL held): mark it and write the lane's state back */
static PyObject *
slock_taken(StoreLock *self)
{
    self->held = 1;
    if (self->lane != NULL && lane_flush(self->lane) < 0) {
        self->held = 0;
        PyThread_release_lock(self->lock);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyObject *
slock_acquire(StoreLock *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout)) {
        return NULL;
    }
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    if (PyThread_acquire_lock_timed(self->lock, 0, 0) == PY_LOCK_ACQUIRED) {
        return slock_taken(self);
    }
    if (!blocking) {
        Py_RETURN_FALSE;
    }
    PY_TIMEOUT_T us = timeout == -1 ? -1 : (PY_TIMEOUT_T)(timeout * 1e6);
    PyLockStatus r;
    do {
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->lock, us, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_INTR && PyErr_CheckSignals() < 0) {
            return NULL; /* e.g. KeyboardInterrupt while waiting */
        }
    } while (r == PY_LOCK_INTR);
    if (r != PY_LOCK_ACQUIRED) {
        Py_RETURN_FALSE;
    }
    return slock_taken(self);
}

static PyObject *
slock_release(StoreLock *self, PyObject *unused)
{
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    self->held = 0;
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *
slock_exit(StoreLock *self, PyObject *args)
{
    return slock_release(self, NULL);
}

static PyObject *
slock_locked(StoreLock *self, PyObject *unused)
{
    return PyBool_FromLong(self->held);
}

static PyMethodDef slock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))slock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool, as threading.Lock's."},
    {"release", (PyCFunction)slock_release, METH_NOARGS, "As threading.Lock's."},
    {"locked", (PyCFunction)slock_locked, METH_NOARGS, "As threading.Lock's."},
    {"__enter__", (PyCFunction)(void (*)(void))slock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire()"},
    {"__exit__", (PyCFunction)slock_exit, METH_VARARGS, "release()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StoreLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.StoreLock",
    .tp_basicsize = sizeof(StoreLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "StoreLock()\n\nA threading.Lock for a bookmark store whose BookmarkLane keeps "
              "state in C: acquiring it writes that state back first; the lane reads whether "
              "it is held without a call.",
    .tp_dealloc = (destructor)slock_dealloc,
    .tp_new = slock_new,
    .tp_methods = slock_methods,
};

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
static long long
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

static PyObject *
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

static PyTypeObject LaneType = {
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

static PyObject *
lane_slow_log(Lane *self)
{
    return self->slow_log;
}

/* the lane behind a route's log callable (its bound log method), else NULL */
static Lane *
lane_of(PyObject *log)
{
    if (PyCFunction_Check(log) && PyCFunction_GET_FUNCTION(log) == (PyCFunction)lane_log) {
        PyObject *self = PyCFunction_GET_SELF(log);
        if (self != NULL && Py_IS_TYPE(self, &LaneType)) {
            return (Lane *)self;
        }
    }
    return NULL;
}

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

static PyObject *str_locked; /* threading.Lock's locked(): the standard library's name */

/* The bytes of a publish's data when a lane can take it as is: bytes, or an ASCII str
 * (its UTF-8 encoding is its own data). 0: the Python path encodes it. */
static int
fast_body(PyObject *data, const char **body, Py_ssize_t *len)
{
    if (PyBytes_CheckExact(data)) {
        *body = PyBytes_AS_STRING(data);
        *len = PyBytes_GET_SIZE(data);
        return 1;
    }
    if (PyUnicode_CheckExact(data) && PyUnicode_IS_ASCII(data)) {
        *body = (const char *)PyUnicode_1BYTE_DATA(data);
        *len = PyUnicode_GET_LENGTH(data);
        return 1;
    }
    return 0;
}

/* ampsclient.writer.CALLER_WRITE_FRAMES (tests/test_speedups.py checks they are equal) */
#define CALLER_WRITE_FRAMES 256

/* WriterFields: a client writer's flags (ampsclient.writer.FrameWriter holds one as its
 * ``fields``, documents them and alone writes them), a type this module owns (twin:
 * ampsclient._accel.PyWriterFields). The publish lanes only read them, through this struct
 * (the Python callables they are given, such as wake, write them as before). */

typedef struct {
    PyObject_HEAD
    PyObject *transport;
    PyObject *wake_pending;
    PyObject *blocked;
    PyObject *caller_writes;
} WFields;

static int
wfields_traverse(WFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->transport);
    Py_VISIT(self->wake_pending);
    Py_VISIT(self->blocked);
    Py_VISIT(self->caller_writes);
    return 0;
}

static int
wfields_clear(WFields *self)
{
    Py_CLEAR(self->transport);
    Py_CLEAR(self->wake_pending);
    Py_CLEAR(self->blocked);
    Py_CLEAR(self->caller_writes);
    return 0;
}

static void
wfields_dealloc(WFields *self)
{
    PyObject_GC_UnTrack(self);
    wfields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef wfields_members[] = {
    {"transport", T_OBJECT_EX, offsetof(WFields, transport), 0,
     "The open transport, or None while disconnected."},
    {"wake_pending", T_OBJECT_EX, offsetof(WFields, wake_pending), 0,
     "True while the writer is scheduled (a frame queued now goes out without a wake)."},
    {"blocked", T_OBJECT_EX, offsetof(WFields, blocked), 0,
     "True while the socket's write buffer is over its high-water mark."},
    {"caller_writes", T_OBJECT_EX, offsetof(WFields, caller_writes), 0,
     "True when a publish that leaves CALLER_WRITE_FRAMES frames queued writes them."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject WFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.WriterFields",
    .tp_basicsize = sizeof(WFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "WriterFields()\n\nA client writer's flags, which the publish lanes read (twin: "
              "ampsclient._accel.PyWriterFields). A new instance has no field set.",
    .tp_traverse = (traverseproc)wfields_traverse,
    .tp_clear = (inquiry)wfields_clear,
    .tp_dealloc = (destructor)wfields_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_members = wfields_members,
};

/* StoreForwardFields: an HA client's publish state (ampsclient.ha.store_forward.StoreAndForward
 * holds one as its ``fields``, documents them and alone writes them), a type this module owns
 * (twin: ampsclient._accel.PyStoreForwardFields). The HA publish lane is built on it: it
 * takes the store, the lock and the suffix cache from it once, and reads the gate on each
 * publish. */

typedef struct {
    PyObject_HEAD
    PyObject *store;
    PyObject *lock;
    PyObject *suffixes;
    PyObject *can_send;
} SFFields;

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

static PyTypeObject SFFieldsType = {
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

/* What after_enqueue uses, given to a lane's constructor (values, owned by the lane). */
typedef struct {
    WFields *fields;         /* the writer's flags */
    PyObject *outq;          /* the write queue (a deque) */
    PyObject *enqueue;       /* its append */
    PyObject *wake;          /* schedule the writer, then wait while the socket is full */
    PyObject *wait_writable; /* wait while the socket is full */
    PyObject *caller_write;  /* write the queue from this thread */
} Waker;

#define WAKER_KWDS "fields", "outq", "enqueue", "wake", "wait_writable", "caller_write"
#define WAKER_ARGS(w) &(w).fields, &(w).outq, &(w).enqueue, &(w).wake, &(w).wait_writable, \
                      &(w).caller_write

static int
waker_traverse(Waker *w, visitproc visit, void *arg)
{
    Py_VISIT(w->fields);
    Py_VISIT(w->outq);
    Py_VISIT(w->enqueue);
    Py_VISIT(w->wake);
    Py_VISIT(w->wait_writable);
    Py_VISIT(w->caller_write);
    return 0;
}

static void
waker_clear(Waker *w)
{
    Py_CLEAR(w->fields);
    Py_CLEAR(w->outq);
    Py_CLEAR(w->enqueue);
    Py_CLEAR(w->wake);
    Py_CLEAR(w->wait_writable);
    Py_CLEAR(w->caller_write);
}

/* Keep the parsed (borrowed) values in *w; -1 with TypeError when fields is not a
 * WriterFields. */
static int
waker_take(Waker *w, const Waker *given, const char *who)
{
    if (!Py_IS_TYPE((PyObject *)given->fields, &WFieldsType)) {
        PyErr_Format(PyExc_TypeError, "%s: fields must be a WriterFields", who);
        return -1;
    }
    Py_XSETREF(w->fields, (WFields *)Py_NewRef(given->fields));
    Py_XSETREF(w->outq, Py_NewRef(given->outq));
    Py_XSETREF(w->enqueue, Py_NewRef(given->enqueue));
    Py_XSETREF(w->wake, Py_NewRef(given->wake));
    Py_XSETREF(w->wait_writable, Py_NewRef(given->wait_writable));
    Py_XSETREF(w->caller_write, Py_NewRef(given->caller_write));
    return 0;
}

/* After a frame was queued, what the Python publish paths do: wake the writer when it
 * sleeps (wake, which also waits while the socket is full), else wait while it is full
 * (wait_writable), else, when the writer lets publishes write (caller_writes) and
 * CALLER_WRITE_FRAMES frames are queued, write them from this thread (caller_write). The
 * flags are the writer's WriterFields. -1 on error. */
static int
after_enqueue(const Waker *w)
{
    PyObject *call = NULL;
    WFields *f = w->fields;
    if (f->wake_pending != Py_True) {
        call = w->wake;
    }
    else if (f->blocked == Py_True) {
        call = w->wait_writable;
    }
    else if (f->caller_writes == Py_True) {
        Py_ssize_t queued = PyObject_Size(w->outq);
        if (queued < 0) {
            return -1;
        }
        if (queued >= CALLER_WRITE_FRAMES) {
            call = w->caller_write;
        }
    }
    if (call != NULL) {
        PyObject *r = PyObject_CallNoArgs(call);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    return 0;
}

/* PublishIndexFields: the fields of the bundled publish stores' index
 * (ampsclient.stores.publish.base.IndexedPublishStore is built on it and documents them)
 * that the publish lane reads and writes, a type this module owns (twin:
 * ampsclient._accel.PyPublishIndexFields). */

typedef struct {
    PyObject_HEAD
    PyObject *index_closed;
    PyObject *index_next;
    PyObject *index_count;
    PyObject *index_first;
    PyObject *index_pad;
    PyObject *index_buf;
    PyObject *index_lock;
    PyObject *index_log;
} IdxFields;

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

static PyTypeObject IdxFieldsType = {
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

typedef struct {
    PyObject_HEAD
    PyObject *broken;
    PyObject *mm;
    PyObject *active_size;
    PyObject *map_size;
    PyObject *segment_size;
    PyObject *write_gen;
} SegFields;

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

static PyTypeObject SegFieldsType = {
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

static PyTypeObject PublishLaneType = {
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

/* ------------------------------------------------------------------ PlainPublishLane
 *
 * AsyncClient.publish's common case in C: publish(topic, data) with data bytes or ASCII
 * str, a topic whose header prefix the Python path has cached, and a connection. It queues
 * len + prefix + data and then wakes the writer or waits for room, as the Python path does;
 * anything else (options, other data, a new topic, no connection) calls the Python publish.
 */

typedef struct {
    PyObject_HEAD
    PyObject *prefixes;      /* topic -> (b'{"c":"p","t":"..."}', length): the encoder's heads */
    Waker w;                 /* the writer's flags, queue, wake, wait, caller write */
    PyObject *slow;          /* AsyncClient.publish, bound */
    PyObject *result;        /* what publish returns: the official 0 (one awaitable int) */
    int enabled;
    unsigned long long fast;
} PlainLane;

static int
plainlane_traverse(PlainLane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->prefixes);
    Py_VISIT(self->slow);
    Py_VISIT(self->result);
    return waker_traverse(&self->w, visit, arg);
}

static int
plainlane_clear(PlainLane *self)
{
    Py_CLEAR(self->prefixes);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->result);
    waker_clear(&self->w);
    self->enabled = 0;
    return 0;
}

static void
plainlane_dealloc(PlainLane *self)
{
    PyObject_GC_UnTrack(self);
    plainlane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
plainlane_init(PlainLane *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"publish", "result", "prefixes", WAKER_KWDS, NULL};
    PyObject *slow, *result, *prefixes;
    Waker given = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!OOOOOO:PlainPublishLane", kwlist, &slow,
                                     &result, &PyDict_Type, &prefixes, WAKER_ARGS(given))) {
        return -1;
    }
    if (!PyDict_CheckExact(prefixes)) {
        PyErr_SetString(PyExc_TypeError, "PlainPublishLane: prefixes must be a dict");
        return -1;
    }
    if (waker_take(&self->w, &given, "PlainPublishLane") < 0) {
        return -1;
    }
    Py_XSETREF(self->prefixes, Py_NewRef(prefixes));
    Py_XSETREF(self->slow, Py_NewRef(slow));
    Py_XSETREF(self->result, Py_NewRef(result));
    self->enabled = 1;
    return 0;
}

static PyObject *
plainlane_publish(PlainLane *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!self->enabled || nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        goto slow;
    }
    PyObject *topic = args[0];
    const char *body;
    Py_ssize_t body_len;
    if (!fast_body(args[1], &body, &body_len) || !PyUnicode_CheckExact(topic)) {
        goto slow;
    }
    PyObject *cached = PyDict_GetItemWithError(self->prefixes, topic); /* borrowed */
    if (cached == NULL || !PyTuple_CheckExact(cached) || PyTuple_GET_SIZE(cached) != 2
        || !PyBytes_CheckExact(PyTuple_GET_ITEM(cached, 0))) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        goto slow; /* a new topic: Python builds and caches its prefix */
    }
    PyObject *transport = self->w.fields->transport;
    if (transport == NULL || transport == Py_None) {
        goto slow; /* not connected: Python raises DisconnectedError */
    }
    PyObject *prefix = PyTuple_GET_ITEM(cached, 0); /* the core encoder's header */
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(prefix);
    Py_ssize_t size = publish_frame_size(prefix_len, 0, 0, body_len);
    if (size < 0) {
        goto slow;
    }
    PyObject *frame = PyBytes_FromStringAndSize(NULL, size);
    if (frame == NULL) {
        return NULL;
    }
    /* publish_frame(prefix, None, b"", body) */
    spell_publish(PyBytes_AS_STRING(frame), PyBytes_AS_STRING(prefix), prefix_len, "", 0, "", 0,
                  body, body_len);
    PyObject *r = PyObject_CallOneArg(self->w.enqueue, frame);
    Py_DECREF(frame);
    if (r == NULL) {
        return NULL;
    }
    Py_DECREF(r);
    self->fast++;
    if (after_enqueue(&self->w) < 0) {
        return NULL;
    }
    if (self->result == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PlainPublishLane is cleared");
        return NULL;
    }
    return Py_NewRef(self->result); /* the official publish's 0 (no store), awaitable */

slow:
    if (self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PlainPublishLane is cleared");
        return NULL;
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
plainlane_disable(PlainLane *self, PyObject *unused)
{
    self->enabled = 0;
    Py_RETURN_NONE;
}

static PyMethodDef plainlane_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))plainlane_publish, METH_FASTCALL | METH_KEYWORDS,
     "AsyncClient.publish, its common case in C (same arguments)."},
    {"disable", (PyCFunction)plainlane_disable, METH_NOARGS,
     "From now on every call goes to the Python publish."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef plainlane_members[] = {
    {"enabled", T_INT, offsetof(PlainLane, enabled), READONLY, "Whether the C path runs."},
    {"fast", T_ULONGLONG, offsetof(PlainLane, fast), READONLY,
     "How many publishes the C path did."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PlainLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.PlainPublishLane",
    .tp_basicsize = sizeof(PlainLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "PlainPublishLane(publish, result, prefixes, fields, outq, enqueue, wake, "
              "wait_writable, caller_write)\n\nAsyncClient.publish's common case in C (see the "
              "C source).",
    .tp_traverse = (traverseproc)plainlane_traverse,
    .tp_clear = (inquiry)plainlane_clear,
    .tp_dealloc = (destructor)plainlane_dealloc,
    .tp_init = (initproc)plainlane_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = plainlane_methods,
    .tp_members = plainlane_members,
};

#endif /* Py_GIL_DISABLED */

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

PyDoc_STRVAR(autoack_take_doc,
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

static PyObject *
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

static PyTypeObject AckBatchesType = {
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

static PyTypeObject AutoAckType = {
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

/* Call ``lane`` (a new or borrowed reference the caller keeps alive) with the arguments when
 * it is a C function the interpreter would call directly (METH_O with one positional
 * argument, or METH_FASTCALL | METH_KEYWORDS): its C function, no vectorcall in between.
 * Returns 1 with the result (or NULL and an exception) in *r, 0 when ``lane`` is another
 * kind of callable (the caller calls it). */
static inline int
c_lane_direct(PyObject *lane, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              PyObject **r)
{
    if (!PyCFunction_CheckExact(lane)) {
        return 0;
    }
    int flags = PyCFunction_GET_FLAGS(lane);
    if (flags == METH_O && nargs == 1 && kwnames == NULL) {
        *r = PyCFunction_GET_FUNCTION(lane)(PyCFunction_GET_SELF(lane), args[0]);
        return 1;
    }
    if (flags == (METH_FASTCALL | METH_KEYWORDS)) {
        _PyCFunctionFastWithKeywords f =
            (_PyCFunctionFastWithKeywords)(void (*)(void))PyCFunction_GET_FUNCTION(lane);
        *r = f(PyCFunction_GET_SELF(lane), args, nargs, kwnames);
        return 1;
    }
    return 0;
}

static PyTypeObject LaneMethodType;

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

static PyTypeObject LaneMethodType = {
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

/* ------------------------------------------------------------------ Relay
 *
 * Relay(target): ``relay.call(*args, **kwargs)`` calls ``relay.target`` with them (a C lane's
 * function directly: c_lane_direct). Its twin: ampsclient._accel.PyRelay. An object that hands
 * out a lane which must follow a later change (AsyncHAClient's discard: the bookmark store
 * may be replaced) hands out ``relay.call``, a C function the interpreter calls directly, and
 * changes ``target`` (it alone writes it). Types C owns, public fields only.
 */

typedef struct {
    PyObject_HEAD
    PyObject *target;
} Relay;

static PyObject *
relay_call(Relay *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *target = self->target;
    if (target == NULL || target == Py_None) {
        PyErr_SetString(PyExc_TypeError, "Relay: no target to call");
        return NULL;
    }
    Py_INCREF(target); /* (the call may replace it) */
    PyObject *r;
    if (!c_lane_direct(target, args, nargs, kwnames, &r)) {
        r = PyObject_Vectorcall(target, args, (size_t)nargs, kwnames);
    }
    Py_DECREF(target);
    return r;
}

static int
relay_init(Relay *self, PyObject *args, PyObject *kwds)
{
    PyObject *target;
    static char *kwlist[] = {"target", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Relay", kwlist, &target)) {
        return -1;
    }
    Py_XSETREF(self->target, Py_NewRef(target));
    return 0;
}

static int
relay_traverse(Relay *self, visitproc visit, void *arg)
{
    Py_VISIT(self->target);
    return 0;
}

static int
relay_clear(Relay *self)
{
    Py_CLEAR(self->target);
    return 0;
}

static void
relay_dealloc(Relay *self)
{
    PyObject_GC_UnTrack(self);
    relay_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef relay_methods[] = {
    {"call", (PyCFunction)(void (*)(void))relay_call, METH_FASTCALL | METH_KEYWORDS,
     "call(*args, **kwargs)\n--\n\nCall the target with these arguments."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef relay_members[] = {
    {"target", T_OBJECT, offsetof(Relay, target), 0, "What call() calls."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RelayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ampsclient._speedups.Relay",
    .tp_basicsize = sizeof(Relay),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Relay(target)\n\ncall() calls target, which its owner may change "
              "(twin: ampsclient._accel.PyRelay).",
    .tp_traverse = (traverseproc)relay_traverse,
    .tp_clear = (inquiry)relay_clear,
    .tp_dealloc = (destructor)relay_dealloc,
    .tp_init = (initproc)relay_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = relay_methods,
    .tp_members = relay_members,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef speedups_methods[] = {
    {"split_frames", (PyCFunction)(void (*)(void))split_frames, METH_FASTCALL, split_frames_doc},
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL, deliver_doc},
    {"deliver_stream", (PyCFunction)(void (*)(void))deliver_stream, METH_FASTCALL,
     deliver_stream_doc},
    {"join_seq", (PyCFunction)(void (*)(void))join_seq, METH_FASTCALL, join_seq_doc},
    {"publish_frame", (PyCFunction)(void (*)(void))publish_frame, METH_FASTCALL,
     publish_frame_doc},
    {"send_nowait", send_nowait, METH_VARARGS, send_nowait_doc},
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL, crc32_doc},
    {"delivery_columns", (PyCFunction)(void (*)(void))delivery_columns, METH_FASTCALL,
     delivery_columns_doc},
    {"write_record", (PyCFunction)(void (*)(void))write_record, METH_FASTCALL, write_record_doc},
    {"ws_encode", (PyCFunction)(void (*)(void))ws_encode, METH_FASTCALL, ws_encode_doc},
    {"autoack_take", (PyCFunction)(void (*)(void))autoack_take, METH_FASTCALL, autoack_take_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "ampsclient._speedups",
    "Optional C versions of the client's per-message loops (see ampsclient/_accel.py).",
    -1,
    speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    minus_one = PyLong_FromLong(-1);
    plus_one = PyLong_FromLong(1);
    if (minus_one == NULL || plus_one == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyType_Ready(&MessageFieldsType) < 0
        || PyModule_AddObjectRef(module, "MessageFields", (PyObject *)&MessageFieldsType) < 0
        || PyType_Ready(&LaneMethodType) < 0
        || PyModule_AddObjectRef(module, "LaneMethod", (PyObject *)&LaneMethodType) < 0
        || PyType_Ready(&RelayType) < 0
        || PyModule_AddObjectRef(module, "Relay", (PyObject *)&RelayType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#ifndef Py_GIL_DISABLED
    if (PyType_Ready(&BmSubFieldsType) < 0
        || PyModule_AddObjectRef(module, "BookmarkSubscriptionFields",
                                 (PyObject *)&BmSubFieldsType) < 0
        || PyType_Ready(&BmPubFieldsType) < 0
        || PyModule_AddObjectRef(module, "BookmarkPublisherFields", (PyObject *)&BmPubFieldsType)
               < 0
        || PyType_Ready(&LaneType) < 0
        || PyModule_AddObjectRef(module, "BookmarkLane", (PyObject *)&LaneType) < 0
        || PyType_Ready(&StoreLockType) < 0
        || PyModule_AddObjectRef(module, "StoreLock", (PyObject *)&StoreLockType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    str_locked = PyUnicode_InternFromString("locked");
    if (str_locked == NULL || PyType_Ready(&SegFieldsType) < 0
        || PyModule_AddObjectRef(module, "SegmentLogFields", (PyObject *)&SegFieldsType) < 0
        || PyType_Ready(&WFieldsType) < 0
        || PyModule_AddObjectRef(module, "WriterFields", (PyObject *)&WFieldsType) < 0
        || PyType_Ready(&SFFieldsType) < 0
        || PyModule_AddObjectRef(module, "StoreForwardFields", (PyObject *)&SFFieldsType) < 0
        || PyType_Ready(&IdxFieldsType) < 0
        || PyModule_AddObjectRef(module, "PublishIndexFields", (PyObject *)&IdxFieldsType) < 0
        || PyType_Ready(&PublishLaneType) < 0
        || PyModule_AddObjectRef(module, "PublishLane", (PyObject *)&PublishLaneType) < 0
        || PyType_Ready(&PlainLaneType) < 0
        || PyModule_AddObjectRef(module, "PlainPublishLane", (PyObject *)&PlainLaneType) < 0
        || PyModule_AddIntConstant(module, "CALLER_WRITE_FRAMES", CALLER_WRITE_FRAMES) < 0
        || PyType_Ready(&AckBatchesType) < 0
        || PyModule_AddObjectRef(module, "AckBatches", (PyObject *)&AckBatchesType) < 0
        || PyType_Ready(&AutoAckType) < 0
        || PyModule_AddObjectRef(module, "AutoAck", (PyObject *)&AutoAckType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#endif
    return module;
}
