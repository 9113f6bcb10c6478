/* Optional C versions of the client's two per-message loops.
 *
 * Each function here has a pure-Python twin that is the reference (see
 * ampsclient/_accel.py, which picks one or the other; AMPSCLIENT_PUREPYTHON=1 forces
 * the Python ones). Both are run by the same tests. Nothing here parses AMPS headers: the
 * functions only split the TCP stream and route deliveries by prefixes the Python code
 * learned, exactly as the Python loops do.
 *
 * This file is the module: its function table and PyInit__speedups. The functions and types
 * are in the other files of this directory, one concept each (the list: speedups.h).
 */

#include "speedups.h"

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
