/* ------------------------------------------------------------------ a client writer's side
 *
 * What the C code does for a client's writer (ampsclient/writer.py): a publisher's write
 * (send_nowait), the writer's flags the publish lanes read (WriterFields), and what a lane
 * does after it queued a frame (after_enqueue, with what its constructor was given: Waker).
 */

#include "speedups.h"

#include <errno.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------ a publisher's write */

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* (a platform without it: Python ignores SIGPIPE anyway) */
#endif

SP_DOC(send_nowait_doc,
"send_nowait(fd, data) -> int\n\n"
"Send ``data`` on the socket ``fd`` without waiting: the bytes the socket took, 0 when it\n"
"is full. Unlike ``socket.send`` it keeps the GIL: the call is short (it copies at most\n"
"what fits in the socket's buffer), and a thread that let go of the GIL for it would\n"
"hand it to the process's other threads and wait to get it back (ampsclient.writer:\n"
"a publisher thread's writes and the loop's). Raises OSError for other errors.");

PyObject *
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

#ifndef Py_GIL_DISABLED

/* WriterFields: a client writer's flags (ampsclient.writer.FrameWriter holds one as its
 * ``fields``, documents them and alone writes them), a type this module owns (twin:
 * ampsclient._accel.PyWriterFields). The publish lanes only read them, through this struct
 * (the Python callables they are given, such as wake, write them as before). The struct:
 * speedups.h. */

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

PyTypeObject WFieldsType = {
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

/* ---- Waker (speedups.h): what after_enqueue uses, given to a lane's constructor */

int
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

void
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
int
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
int
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

#endif /* Py_GIL_DISABLED */
