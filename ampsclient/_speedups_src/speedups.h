/* What the files of the client's C speedups share: they are compiled into one extension
 * module, ampsclient._speedups (setup.py), one concept per file:
 *
 *   module.c                the module: its function table and PyInit__speedups
 *   frames.c                split_frames: the TCP stream cut into payloads
 *   ws.c                    ws_encode: TCP-framed commands as masked WebSocket frames
 *   message.c               MessageFields, the storage of a Message
 *   deliver.c               the receive pass: deliver, deliver_stream
 *   writer.c                a client writer's side: WriterFields, what a lane does after it
 *                           queued a frame (Waker, after_enqueue), send_nowait
 *   publish_frame.c         a publish's bytes: publish_frame, join_seq
 *   crc32.c                 CRC-32 as zlib computes it
 *   record.c                a file publish store's record: write_record
 *   columns.c               delivery_columns: the Spark source's header cut
 *   bookmark_fields.c       BookmarkSubscriptionFields, BookmarkPublisherFields
 *   store_lock.c            StoreLock: a bookmark store's lock
 *   bookmark_lane.c         BookmarkLane: MemoryBookmarkStore.log/discard's common case
 *   publish_store_fields.c  PublishIndexFields, SegmentLogFields: the publish stores' fields
 *   store_forward_fields.c  StoreForwardFields: an HA client's publish state
 *   publish_lane.c          PublishLane: HAClient.publish's common case
 *   plain_lane.c            PlainPublishLane: Client.publish's common case
 *   autoack.c               autoack_take, AckBatches, AutoAck: a queue subscription's auto-ack
 *   lane_method.c           LaneMethod: the lane_method decorator's descriptor
 *   relay.c                 Relay: a lane whose target its owner may change
 *
 * Internal, not an API: the interface is the module, which ampsclient/_accel.py picks or
 * replaces by the Python twins. What a file uses of another file is declared here, hidden
 * (SP_INTERNAL: not exported from the shared object); what one file alone uses stays static
 * in it. The small helpers of the hot paths are static inline here, so that a lane calls
 * them without a call, as when all of this was one file.
 */

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

#ifndef AMPSCLIENT_SPEEDUPS_H
#define AMPSCLIENT_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define SP_INTERNAL __attribute__((visibility("hidden")))
#else
#define SP_INTERNAL
#endif

/* PyDoc_STRVAR for a docstring module.c's table uses (declared below) */
#define SP_DOC(name, str) SP_INTERNAL const char name[] = PyDoc_STR(str)

/* ------------------------------------------------------------------ the module's functions */

SP_INTERNAL extern const char split_frames_doc[];
SP_INTERNAL PyObject *split_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char ws_encode_doc[];
SP_INTERNAL PyObject *ws_encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char deliver_doc[];
SP_INTERNAL PyObject *deliver(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char deliver_stream_doc[];
SP_INTERNAL PyObject *deliver_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char send_nowait_doc[];
SP_INTERNAL PyObject *send_nowait(PyObject *self, PyObject *args);
SP_INTERNAL extern const char join_seq_doc[];
SP_INTERNAL PyObject *join_seq(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char publish_frame_doc[];
SP_INTERNAL PyObject *publish_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char crc32_doc[];
SP_INTERNAL PyObject *crc32_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char delivery_columns_doc[];
SP_INTERNAL PyObject *delivery_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char write_record_doc[];
SP_INTERNAL PyObject *write_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SP_INTERNAL extern const char autoack_take_doc[];
SP_INTERNAL PyObject *autoack_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* ------------------------------------------------------------------ MessageFields (message.c) */

typedef struct {
    PyObject_HEAD
    PyObject *payload;  /* payload_bytes: the frame's payload (header and body) */
    PyObject *sub_id;   /* routed_sub_id: the subscription it was routed to, or None */
    PyObject *header;   /* parsed_header: the decoded header, or None */
    PyObject *data;     /* parsed_data: the body bytes, or None */
    PyObject *bookmark; /* seen_bookmark: the bm value read without parsing, or None */
    PyObject *body;     /* body_start: the body's offset, -1 when not known */
} MessageFields;

#define MF(obj) ((MessageFields *)(obj))

SP_INTERNAL extern PyTypeObject MessageFieldsType;
SP_INTERNAL extern PyObject *minus_one, *plus_one;
SP_INTERNAL extern PyObject *message_type_seen;
SP_INTERNAL int check_message_type(PyObject *cls);
SP_INTERNAL int is_message_slow(PyObject *obj);

/* obj is a MessageFields (see message_type_seen in message.c) */
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

/* ------------------------------------------------------------------ a publish's bytes */

static inline void
be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

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

/* One publish as a TCP frame (publish_frame.c): */

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

/* A file publish store's record (record.c): */

/* The record's size: [u32 length][u32 crc][head][payload]. */
static inline Py_ssize_t
record_size(Py_ssize_t n)
{
    return 8 + (n < 0x100 ? 12 : n < 0x10000 ? 13 : 15) + n;
}

SP_INTERNAL void put_record(unsigned char *p, unsigned long long seq,
                            const unsigned char *payload, Py_ssize_t n);

/* crc32.c */
SP_INTERNAL void crc_init(void);
SP_INTERNAL uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n);

/* ------------------------------------------------------------------ LaneMethod, Relay */

SP_INTERNAL extern PyTypeObject LaneMethodType;
SP_INTERNAL extern PyTypeObject RelayType;

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

#ifndef Py_GIL_DISABLED

/* ------------------------------------------------------------------ the bookmark store */

/* the records' fields (bookmark_fields.c) */

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

typedef struct {
    PyObject_HEAD
    PyObject *high;
    PyObject *done;
    PyObject *point;
    PyObject *queue;
    PyObject *slot;
} BmPubFields;

SP_INTERNAL extern PyTypeObject BmSubFieldsType;
SP_INTERNAL extern PyTypeObject BmPubFieldsType;

/* the store's lock (store_lock.c) and its lane (bookmark_lane.c) */

typedef struct Lane Lane;

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    int held;   /* acquired (read by the lane without a call) */
    Lane *lane; /* borrowed: the lane whose state a Python acquire writes back */
} StoreLock;

SP_INTERNAL extern PyTypeObject StoreLockType;
SP_INTERNAL extern PyTypeObject LaneType;
SP_INTERNAL int lane_flush(Lane *self);
SP_INTERNAL PyObject *lane_log(Lane *self, PyObject *message);
SP_INTERNAL long long lane_log_number(Lane *self, PyObject *message);
SP_INTERNAL PyObject *lane_slow_log(Lane *self);

/* the lane behind a route's log callable (its bound log method), else NULL */
static inline Lane *
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

/* a field of an object whose type is one of this module's (at an offsetof of its struct) */
#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static inline void
put(PyObject *obj, Py_ssize_t offset, PyObject *value) /* steals nothing */
{
    Py_INCREF(value);
    Py_XSETREF(SLOT(obj, offset), value);
}

/* ------------------------------------------------------------------ the publish lanes */

/* The bytes of a publish's data when a lane can take it as is: bytes, or an ASCII str
 * (its UTF-8 encoding is its own data). 0: the Python path encodes it. */
static inline int
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

/* the writer's flags (writer.c) */
typedef struct {
    PyObject_HEAD
    PyObject *transport;
    PyObject *wake_pending;
    PyObject *blocked;
    PyObject *caller_writes;
} WFields;

SP_INTERNAL extern PyTypeObject WFieldsType;

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

SP_INTERNAL int waker_traverse(Waker *w, visitproc visit, void *arg);
SP_INTERNAL void waker_clear(Waker *w);
SP_INTERNAL int waker_take(Waker *w, const Waker *given, const char *who);
SP_INTERNAL int after_enqueue(const Waker *w);

/* an HA client's publish state (store_forward_fields.c) */
typedef struct {
    PyObject_HEAD
    PyObject *store;
    PyObject *lock;
    PyObject *suffixes;
    PyObject *can_send;
} SFFields;

SP_INTERNAL extern PyTypeObject SFFieldsType;

/* the publish stores' fields (publish_store_fields.c) */
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

typedef struct {
    PyObject_HEAD
    PyObject *broken;
    PyObject *mm;
    PyObject *active_size;
    PyObject *map_size;
    PyObject *segment_size;
    PyObject *write_gen;
} SegFields;

SP_INTERNAL extern PyTypeObject IdxFieldsType;
SP_INTERNAL extern PyTypeObject SegFieldsType;

/* the lanes (publish_lane.c, plain_lane.c) */
SP_INTERNAL extern PyObject *str_locked;
SP_INTERNAL extern PyTypeObject PublishLaneType;
SP_INTERNAL extern PyTypeObject PlainLaneType;

/* ------------------------------------------------------------------ auto-ack (autoack.c) */

SP_INTERNAL extern PyTypeObject AckBatchesType;
SP_INTERNAL extern PyTypeObject AutoAckType;

#endif /* Py_GIL_DISABLED */

#endif /* AMPSCLIENT_SPEEDUPS_H */
