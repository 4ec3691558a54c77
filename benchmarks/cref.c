/*
 * The "straightforward C loop" references of issue 6, for benchmarks/run.py only (built on the
 * fly by benchmarks/_cref.py, never installed).  Each builds a StringDType array from buffers
 * already in memory, single threaded, with no UTF-8 validation and no error handling:
 *   fixed(list_of_chunk_buffers, width, out)    first NUL via memchr, NpyString_pack
 *   vlen_utf8(list_of_chunk_buffers, out)       numcodecs header walk, NpyString_pack
 *   offsets(list_of_(data, int64 offsets), out) Arrow / zarrs.vlen spans, NpyString_pack
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#define NPY_TARGET_VERSION NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>
#include <string.h>
#include <stdint.h>

static PyObject *
fixed(PyObject *self, PyObject *args)
{
    PyObject *lst; Py_ssize_t w; PyArrayObject *out;
    if (!PyArg_ParseTuple(args, "OnO!", &lst, &w, &PyArray_Type, &out)) return NULL;
    char *o = PyArray_BYTES(out);
    npy_string_allocator *a = NpyString_acquire_allocator((PyArray_StringDTypeObject *)PyArray_DESCR(out));
    Py_ssize_t k = 0;
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(lst); c++) {
        Py_buffer v;
        if (PyObject_GetBuffer(PyList_GET_ITEM(lst, c), &v, PyBUF_SIMPLE) < 0) { NpyString_release_allocator(a); return NULL; }
        const char *p = v.buf;
        for (Py_ssize_t i = 0; i < v.len / w; i++, k++) {
            const char *z = memchr(p + i * w, 0, w);
            NpyString_pack(a, (npy_packed_static_string *)(o + 16 * k), p + i * w, z ? (size_t)(z - (p + i * w)) : (size_t)w);
        }
        PyBuffer_Release(&v);
    }
    NpyString_release_allocator(a);
    Py_RETURN_NONE;
}

static PyObject *
vlen_utf8(PyObject *self, PyObject *args)
{
    PyObject *lst; PyArrayObject *out;
    if (!PyArg_ParseTuple(args, "OO!", &lst, &PyArray_Type, &out)) return NULL;
    char *o = PyArray_BYTES(out);
    npy_string_allocator *a = NpyString_acquire_allocator((PyArray_StringDTypeObject *)PyArray_DESCR(out));
    Py_ssize_t k = 0;
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(lst); c++) {
        Py_buffer v;
        if (PyObject_GetBuffer(PyList_GET_ITEM(lst, c), &v, PyBUF_SIMPLE) < 0) { NpyString_release_allocator(a); return NULL; }
        const uint8_t *p = v.buf;
        uint32_t n; memcpy(&n, p, 4);
        size_t pos = 4;
        for (uint32_t i = 0; i < n; i++, k++) {
            uint32_t ln; memcpy(&ln, p + pos, 4); pos += 4;
            NpyString_pack(a, (npy_packed_static_string *)(o + 16 * k), (const char *)p + pos, ln);
            pos += ln;
        }
        PyBuffer_Release(&v);
    }
    NpyString_release_allocator(a);
    Py_RETURN_NONE;
}

static PyObject *
offsets(PyObject *self, PyObject *args)
{
    PyObject *lst; PyArrayObject *out;
    if (!PyArg_ParseTuple(args, "OO!", &lst, &PyArray_Type, &out)) return NULL;
    char *o = PyArray_BYTES(out);
    npy_string_allocator *a = NpyString_acquire_allocator((PyArray_StringDTypeObject *)PyArray_DESCR(out));
    Py_ssize_t k = 0;
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(lst); c++) {
        PyObject *t = PyList_GET_ITEM(lst, c);
        Py_buffer d, f;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(t, 0), &d, PyBUF_SIMPLE) < 0) { NpyString_release_allocator(a); return NULL; }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(t, 1), &f, PyBUF_SIMPLE) < 0) { PyBuffer_Release(&d); NpyString_release_allocator(a); return NULL; }
        const int64_t *off = f.buf;
        Py_ssize_t n = f.len / 8 - 1;
        for (Py_ssize_t i = 0; i < n; i++, k++)
            NpyString_pack(a, (npy_packed_static_string *)(o + 16 * k), (const char *)d.buf + off[i], (size_t)(off[i + 1] - off[i]));
        PyBuffer_Release(&d); PyBuffer_Release(&f);
    }
    NpyString_release_allocator(a);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fixed", fixed, METH_VARARGS, NULL},
    {"vlen_utf8", vlen_utf8, METH_VARARGS, NULL},
    {"offsets", offsets, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef md = {PyModuleDef_HEAD_INIT, "cref_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_cref_ext(void) { import_array(); return PyModule_Create(&md); }
