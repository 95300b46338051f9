/* `_states`'s loop (policies/admission.py), compiled: each endpoint's pressure and its next
 * saturation by hysteresis, and the state a request of a given footprint would find it in. The
 * same arithmetic in the same order as the Python, so the states are equal
 * (tests/unit/test_compiled_paths.py). Change both together; see policies/fast_paths.py. */
#include "_fast.h"

static Py_ssize_t S_ID, S_IN_FLIGHT, S_IN_FLIGHT_TOKENS, S_LIMIT, S_ENGINE;
static Py_ssize_t E_AGE, E_KV_USAGE, E_KV_CAPACITY, E_WAITING_FOR_CAPACITY, E_WAITING,
    E_PREEMPTIONS;
static Py_ssize_t S_SIZE, E_SIZE; /* the records' sizes these positions need */
static PyObject *STATES[3]; /* Saturation.OPEN, RESERVED, SATURATED */

static PyObject *configure(PyObject *self, PyObject *args)
{
    PyObject *open, *reserved, *saturated;
    if (!PyArg_ParseTuple(args, "(nnnnn)(nnnnnn)(OOO)", &S_ID, &S_IN_FLIGHT, &S_IN_FLIGHT_TOKENS,
                          &S_LIMIT, &S_ENGINE, &E_AGE, &E_KV_USAGE, &E_KV_CAPACITY,
                          &E_WAITING_FOR_CAPACITY, &E_WAITING, &E_PREEMPTIONS, &open, &reserved,
                          &saturated)) {
        return NULL;
    }
    Py_ssize_t snapshot[] = {S_ID, S_IN_FLIGHT, S_IN_FLIGHT_TOKENS, S_LIMIT, S_ENGINE};
    Py_ssize_t engine[] = {E_AGE, E_KV_USAGE, E_KV_CAPACITY, E_WAITING_FOR_CAPACITY, E_WAITING,
                           E_PREEMPTIONS};
    S_SIZE = record_size(snapshot, 5);
    E_SIZE = record_size(engine, 6);
    PyObject *given[3] = {open, reserved, saturated};
    for (int i = 0; i < 3; i++) {
        Py_XSETREF(STATES[i], Py_NewRef(given[i]));
    }
    Py_RETURN_NONE;
}

/* `Limits`, in its field order. */
typedef struct {
    double in_flight_threshold, max_age_s, kv_threshold, queue_threshold, band, reserved_at;
    double preemption_threshold_per_s;
} Limits;

/* `_saturation`: the state at `level`, by hysteresis from `previous` (0, 1, 2). */
static int saturation(int previous, double level, const Limits *l)
{
    if (level < l->reserved_at - l->band) {
        return 0;
    }
    if (level >= 1 || (previous == 2 && level >= 1 - l->band)) {
        return 2;
    }
    if (level >= l->reserved_at) {
        return 1;
    }
    if (previous != 0 && level >= l->reserved_at - l->band) {
        return 1;
    }
    return 0;
}

static inline double larger(double x, double y)
{
    return x > y ? x : y; /* `x if x > y else y`, as the Python writes max() */
}

/* The pressure of one endpoint without and with the footprint (`level`, `added`). */
static int pressure(PyObject *snapshot, const Limits *l, long long footprint, double *level,
                    double *added)
{
    *level = *added = 0.0;
    PyObject *limit_of = FIELD(snapshot, S_LIMIT);
    double limit;
    if (truthy_number(limit_of, &limit)) {
        return -1;
    }
    if (limit) {
        double in_flight;
        if (as_double(FIELD(snapshot, S_IN_FLIGHT), &in_flight)) {
            return -1;
        }
        *level = in_flight / (limit * l->in_flight_threshold);
    }
    PyObject *engine = FIELD(snapshot, S_ENGINE);
    double age_s;
    if (engine == Py_None) {
        return 0;
    }
    if (check_record(engine, E_SIZE, "engine signals")) {
        return -1;
    }
    if (FIELD(engine, E_AGE) == Py_None) {
        return 0;
    }
    if (as_double(FIELD(engine, E_AGE), &age_s)) {
        return -1;
    }
    if (age_s > l->max_age_s) { /* stale gauges are left out (fail open) */
        return 0;
    }
    PyObject *kv_of = FIELD(engine, E_KV_USAGE);
    if (kv_of != Py_None) {
        double kv_usage, capacity;
        if (as_double(kv_of, &kv_usage) || truthy_number(FIELD(engine, E_KV_CAPACITY), &capacity)) {
            return -1;
        }
        if (capacity) {
            double tokens;
            if (as_double(FIELD(snapshot, S_IN_FLIGHT_TOKENS), &tokens)) {
                return -1;
            }
            kv_usage = larger(kv_usage, tokens / capacity);
            *added = (kv_usage + (double)footprint / capacity) / l->kv_threshold;
        }
        *level = larger(kv_usage / l->kv_threshold, *level);
    }
    PyObject *waiting_of = FIELD(engine, E_WAITING_FOR_CAPACITY);
    if (waiting_of == Py_None) {
        waiting_of = FIELD(engine, E_WAITING);
    }
    if (waiting_of != Py_None) {
        double waiting;
        if (as_double(waiting_of, &waiting)) {
            return -1;
        }
        *level = larger(waiting / l->queue_threshold, *level);
    }
    double preempting;
    if (truthy_number(FIELD(engine, E_PREEMPTIONS), &preempting)) {
        return -1;
    }
    if (preempting) {
        *level = larger(preempting / l->preemption_threshold_per_s, *level);
    }
    return 0;
}

/* The state of `key` in `previous` (OPEN when unknown) as 0, 1 or 2; -1 on an error. */
static int state_of(PyObject *previous, PyObject *key)
{
    PyObject *state = DICT_GET(previous, key);
    if (state == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    long value = PyLong_AsLong(state);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    return value < 0 ? 0 : value > 2 ? 2 : (int)value;
}

/* states(previous, snapshots, limits, footprint_tokens, request) -> each endpoint's next
 * state; into `request` (a dict, or None) the state this request would find it in. */
static PyObject *states(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Limits l;
    long long footprint;
    if (nargs != 5 || !PyDict_Check(args[0]) || (args[4] != Py_None && !PyDict_Check(args[4]))
        || !PyArg_ParseTuple(args[2], "ddddddd", &l.in_flight_threshold, &l.max_age_s,
                             &l.kv_threshold, &l.queue_threshold, &l.band, &l.reserved_at,
                             &l.preemption_threshold_per_s)
        || as_long(args[3], &footprint)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "states(previous: dict, snapshots, limits, "
                            "footprint_tokens, request: dict | None)");
        }
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "snapshots must be a sequence");
    PyObject *found = seq == NULL ? NULL : PyDict_New();
    Py_ssize_t count = seq == NULL ? 0 : PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; found != NULL && i < count; i++) {
        PyObject *snapshot = PySequence_Fast_GET_ITEM(seq, i);
        if (check_record(snapshot, S_SIZE, "a snapshot")) {
            Py_CLEAR(found);
            break;
        }
        PyObject *key = FIELD(snapshot, S_ID);
        double level, added;
        int before = pressure(snapshot, &l, footprint, &level, &added) ? -1
                                                                       : state_of(args[0], key);
        if (before < 0) {
            Py_CLEAR(found);
            break;
        }
        int state = saturation(before, level, &l);
        double loaded = larger(added, level);
        int alone = saturation(0, loaded, &l);
        if (PyDict_SetItem(found, key, STATES[state])
            || (args[4] != Py_None
                && PyDict_SetItem(args[4], key, STATES[alone > state ? alone : state]))) {
            Py_CLEAR(found);
        }
    }
    Py_XDECREF(seq);
    return found;
}

/* within(candidates, states, highest) -> the candidates whose state (OPEN when unknown) is at
 * most `highest`: `with_headroom`'s filter. */
static PyObject *within(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long highest;
    if (nargs != 3 || !PyDict_Check(args[1])
        || ((highest = PyLong_AsLong(args[2])) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "within(candidates, states: dict, highest)");
        }
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "candidates must be a sequence");
    PyObject *kept = seq == NULL ? NULL : PyList_New(0);
    Py_ssize_t count = seq == NULL ? 0 : PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; kept != NULL && i < count; i++) {
        PyObject *candidate = PySequence_Fast_GET_ITEM(seq, i);
        int state = check_record(candidate, S_SIZE, "a snapshot")
                        ? -1
                        : state_of(args[1], FIELD(candidate, S_ID));
        if (state < 0 || (state <= highest && PyList_Append(kept, candidate))) {
            Py_CLEAR(kept);
        }
    }
    Py_XDECREF(seq);
    return kept;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Field positions and the Saturation members."},
    {"within", FASTCALL(within), METH_FASTCALL,
     "with_headroom's filter (policies/admission.py)."},
    {"states", FASTCALL(states), METH_FASTCALL,
     "_states's loop (policies/admission.py)."},
    {NULL, NULL, 0, NULL},
};

FAST_MODULE(_fast_admission, "policies._fast_admission", methods)
