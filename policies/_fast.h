/* What the compiled hot loops (policies/_fast_*.c) share: reading tuple fields and numbers,
 * and Python's float floor division, so each loop computes exactly what its Python reference
 * computes. See policies/fast_paths.py. */
#ifndef SLO_GATEWAY_FAST_H
#define SLO_GATEWAY_FAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

/* A field of a NamedTuple (a tuple subclass) by the index policies/fast_paths.py configured. */
#define FIELD(t, i) PyTuple_GET_ITEM((t), (i))

/* 0 when `o` is a tuple (a NamedTuple) of at least `size` fields, else -1 with a TypeError:
 * FIELD reads without a check, so every record is checked once before its fields are read. */
static inline int check_record(PyObject *o, Py_ssize_t size, const char *what)
{
    if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) >= size) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s must be a NamedTuple of at least %zd fields", what, size);
    return -1;
}

/* One more than the largest of `count` field positions: the size a record must have. */
static inline Py_ssize_t record_size(const Py_ssize_t *positions, int count)
{
    Py_ssize_t size = 0;
    for (int i = 0; i < count; i++) {
        size = positions[i] >= size ? positions[i] + 1 : size;
    }
    return size;
}

/* A Python number as a double, as float arithmetic would see it (an int converts exactly below
 * 2**53). Returns -1 with an exception set when it is not a number. */
static inline int as_double(PyObject *o, double *out)
{
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* A Python int as a long long; -1 with an exception set on overflow or a non-int. */
static inline int as_long(PyObject *o, long long *out)
{
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Python's truthiness of a number that may be None (None, 0 and 0.0 are false). */
static inline int truthy_number(PyObject *o, double *out)
{
    if (o == Py_None) {
        *out = 0.0;
        return 0;
    }
    return as_double(o, out);
}

/* `x // y` for floats, as CPython's float_floor_div computes it (y != 0). */
static inline double floor_div(double x, double y)
{
    double mod = fmod(x, y);
    double div = (x - mod) / y;
    if (mod) {
        if ((y < 0) != (mod < 0)) {
            div -= 1.0;
        }
    }
    if (div) {
        double floored = floor(div);
        if (div - floored > 0.5) {
            floored += 1.0;
        }
        return floored;
    }
    return copysign(0.0, x / y);
}

/* Borrowed value of `dict[key]`, or NULL when absent (check PyErr_Occurred for an error). */
#define DICT_GET(d, k) PyDict_GetItemWithError((d), (k))

/* A METH_FASTCALL function as a method table takes it. */
#define FASTCALL(f) (PyCFunction)(void (*)(void))(f)

/* The module object and init function every compiled module ends with: `name` follows PyInit_
 * (the module's last name part), `dotted` is its import path, `methods` its method table. */
#define FAST_MODULE(name, dotted, methods)                                                      \
    static struct PyModuleDef name##_module = {                                                 \
        PyModuleDef_HEAD_INIT, .m_name = dotted, .m_size = -1, .m_methods = methods};           \
    PyMODINIT_FUNC PyInit_##name(void)                                                          \
    {                                                                                           \
        return PyModule_Create(&name##_module);                                                 \
    }

#endif
