/* `PrefixIndex.cached` (gateway/core/prefix_index.py), compiled: one walk down the request's
 * chain ANDing holder masks, and each holder's predicted cached tokens. The same arithmetic in
 * the same order as the Python, so the mapping is equal, insertion order included
 * (tests/unit/test_compiled_paths.py). Change both together; see policies/fast_paths.py. */
#include "../../policies/_fast.h"

/* What a lookup reads; all borrowed from the caller. */
typedef struct {
    PyObject *slots_memo, *slots_of, *ids, *precision, *ends, *found;
    double scale;
} Lookup;

/* Every endpoint of `bits` matched `depth` blocks: its share of the prompt times its precision. */
static int emit(const Lookup *l, PyObject *bits, Py_ssize_t depth)
{
    double end, tokens;
    if (as_double(PySequence_Fast_GET_ITEM(l->ends, depth - 1), &end)) {
        return -1;
    }
    tokens = end * l->scale;
    PyObject *slots = DICT_GET(l->slots_memo, bits);
    if (slots == NULL && PyErr_Occurred()) {
        return -1;
    }
    slots = slots != NULL && PyObject_IsTrue(slots) ? Py_NewRef(slots)
                                                    : PyObject_CallOneArg(l->slots_of, bits);
    PyObject *seq = slots == NULL ? NULL : PySequence_Fast(slots, "slots: a sequence");
    Py_XDECREF(slots);
    if (seq == NULL) {
        return -1;
    }
    int failed = 0;
    for (Py_ssize_t i = 0; !failed && i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_ssize_t slot = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (slot < 0 || slot >= PyList_GET_SIZE(l->ids) || slot >= PyList_GET_SIZE(l->precision)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_IndexError, "a slot without an endpoint");
            }
            failed = 1;
            break;
        }
        double precision;
        PyObject *value = as_double(PyList_GET_ITEM(l->precision, slot), &precision)
                              ? NULL
                              : PyFloat_FromDouble(precision * tokens);
        failed = value == NULL || PyDict_SetItem(l->found, PyList_GET_ITEM(l->ids, slot), value);
        Py_XDECREF(value);
    }
    Py_DECREF(seq);
    return failed ? -1 : 0;
}

/* `_walk`, emitting each (bits, depth) as the Python's list holds them. */
static int walk(const Lookup *l, PyObject *masks, PyObject *hashes)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(hashes);
    PyObject *current = count ? DICT_GET(masks, PySequence_Fast_GET_ITEM(hashes, 0)) : NULL;
    if (current == NULL || !PyObject_IsTrue(current)) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(current);
    int failed = 0, done = 0;
    for (Py_ssize_t depth = 1; !failed && !done && depth < count; depth++) {
        PyObject *mask = DICT_GET(masks, PySequence_Fast_GET_ITEM(hashes, depth));
        PyObject *held = mask != NULL ? PyNumber_And(mask, current)
                         : PyErr_Occurred() ? NULL
                                            : PyLong_FromLong(0);
        int changed = held == NULL ? -1 : PyObject_RichCompareBool(held, current, Py_NE);
        if (changed > 0) {
            PyObject *gone = PyNumber_Xor(current, held);
            failed = gone == NULL || emit(l, gone, depth);
            Py_XDECREF(gone);
            Py_SETREF(current, Py_NewRef(held));
            done = !PyObject_IsTrue(held);
        }
        failed = failed || changed < 0;
        Py_XDECREF(held);
    }
    if (!failed && !done) {
        failed = emit(l, current, count) != 0;
    }
    Py_DECREF(current);
    return failed ? -1 : 0;
}

/* cached(masks, slots_memo, slots_of, ids, precision, hashes, ends, prompt_tokens) -> dict */
static PyObject *cached(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    double prompt_tokens, last = 0.0;
    if (nargs != 8 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) || !PyList_Check(args[3])
        || !PyList_Check(args[4]) || as_double(args[7], &prompt_tokens)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "cached: see gateway/core/_fast_prefix.c");
        }
        return NULL;
    }
    Lookup l = {args[1], args[2], args[3], args[4], NULL, NULL, 0.0};
    PyObject *hashes = PySequence_Fast(args[5], "hashes: a sequence");
    l.ends = hashes == NULL ? NULL : PySequence_Fast(args[6], "ends: a sequence");
    l.found = l.ends == NULL ? NULL : PyDict_New();
    Py_ssize_t ends = l.found == NULL ? 0 : PySequence_Fast_GET_SIZE(l.ends);
    if (l.found != NULL && ends < PySequence_Fast_GET_SIZE(hashes)) {
        PyErr_SetString(PyExc_IndexError, "a chain has an end per hash");
        Py_CLEAR(l.found);
    } else if (ends && as_double(PySequence_Fast_GET_ITEM(l.ends, ends - 1), &last)) {
        Py_CLEAR(l.found);
    } else if (ends && last == 0.0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "a chain ending at 0 characters");
        Py_CLEAR(l.found);
    }
    l.scale = ends ? prompt_tokens / last : 0.0;
    if (l.found != NULL && walk(&l, args[0], hashes)) {
        Py_CLEAR(l.found);
    }
    Py_XDECREF(hashes);
    Py_XDECREF(l.ends);
    return l.found;
}

static PyMethodDef methods[] = {
    {"cached", FASTCALL(cached), METH_FASTCALL,
     "PrefixIndex.cached (gateway/core/prefix_index.py)."},
    {NULL, NULL, 0, NULL},
};

FAST_MODULE(_fast_prefix, "gateway.core._fast_prefix", methods)
