/* ------------------------------------------------------------------ crc32
 *
 * CRC-32 as zlib computes it (reflected 0xEDB88320), slicing by 8: a file publish store's
 * records (record.c) carry it; crc32() lets the tests compare it with zlib.crc32.
 */

#include "speedups.h"

static uint32_t crc_table[8][256];

void
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

uint32_t
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

SP_DOC(crc32_doc, "crc32(data, value=0) -> int\n\nzlib.crc32, computed here (tests).");

PyObject *
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
