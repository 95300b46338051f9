/* `_tiers`'s loop (policies/slo_aware.py), compiled: each candidate's sort key in its tier's
 * list, from its prediction row. The same arithmetic in the same order as the Python, and the
 * same calls of the tie-breaking rng, so the keys are equal (tests/unit/test_compiled_paths.py).
 * Change both together; see policies/fast_paths.py. */
#include "_fast.h"

static Py_ssize_t S_ID, S_KIND, S_IN_FLIGHT, S_LIMIT, S_INPUT_PRICE, S_OUTPUT_PRICE,
    S_CACHED_PRICE;

static Py_ssize_t S_SIZE; /* the snapshot's size these positions need */

static PyObject *configure(PyObject *self, PyObject *args)
{
    if (!PyArg_ParseTuple(args, "(nnnnnnn)", &S_ID, &S_KIND, &S_IN_FLIGHT, &S_LIMIT,
                          &S_INPUT_PRICE, &S_OUTPUT_PRICE, &S_CACHED_PRICE)) {
        return NULL;
    }
    Py_ssize_t snapshot[] = {S_ID, S_KIND, S_IN_FLIGHT, S_LIMIT, S_INPUT_PRICE, S_OUTPUT_PRICE,
                             S_CACHED_PRICE};
    S_SIZE = record_size(snapshot, 7);
    Py_RETURN_NONE;
}

/* The class's targets; `has_*` false where it sets none. */
typedef struct {
    double ttft_s, tpot_s, deadline_s;
    int has_ttft, has_tpot, has_deadline;
} Targets;

static int target(PyObject *value, double *out, int *has)
{
    *has = value != Py_None;
    *out = 0.0;
    if (*has && as_double(value, out)) {
        return -1;
    }
    return 0;
}

/* `x / y`, raising where Python's float division would (y == 0). */
static int divide(double x, double y, double *out)
{
    if (y == 0.0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
        return -1;
    }
    *out = x / y;
    return 0;
}

/* The largest p95/target ratio (0 without targets), as `_tiers` works it out. */
static int ratio_of(const Targets *t, double ttft_p95_s, double tpot_p95_s, double output,
                    double *ratio)
{
    *ratio = 0.0;
    if (t->has_ttft && divide(ttft_p95_s, t->ttft_s, ratio)) {
        return -1;
    }
    if (t->has_tpot && tpot_p95_s > *ratio * t->tpot_s && divide(tpot_p95_s, t->tpot_s, ratio)) {
        return -1;
    }
    if (t->has_deadline) {
        double e2e_p95_s = ttft_p95_s + tpot_p95_s * output;
        if (e2e_p95_s > *ratio * t->deadline_s && divide(e2e_p95_s, t->deadline_s, ratio)) {
            return -1;
        }
    }
    return 0;
}

/* 0 when `row` is a prediction row (`PredictionRow`, a plain 8-tuple), else -1 with a TypeError. */
static int check_row(PyObject *row)
{
    if (PyTuple_Check(row) && PyTuple_GET_SIZE(row) == 8) {
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "a row is an 8-tuple");
    return -1;
}

/* What `_tiers` reads per request, besides the candidates and rows. */
typedef struct {
    Targets targets;
    double prompt_tokens, output_tokens, tenth, band_width, comfort;
    PyObject *cached, *tie, *session, *rendezvous; /* cached, session: None when absent */
} Request;

/* The key of one candidate that is not a miss: `cost` and `ratio` already worked out. */
static PyObject *passing_key(const Request *r, PyObject *snapshot, double ratio, double cost,
                             double cached, PyObject *tie, PyObject *index)
{
    double in_flight, limit;
    if (as_double(FIELD(snapshot, S_IN_FLIGHT), &in_flight)
        || truthy_number(FIELD(snapshot, S_LIMIT), &limit)) {
        return NULL;
    }
    double used = limit ? in_flight / limit : in_flight;
    if (!(ratio <= 1.0)) { /* unproven */
        return Py_BuildValue("(ddOO)", used, cost, tie, index);
    }
    PyObject *kind = FIELD(snapshot, S_KIND);
    int vllm = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "vllm") == 0;
    double band = r->band_width ? floor_div(ratio, r->band_width) : ratio;
    double tight = ratio > r->comfort ? 1.0 : 0.0;
    PyObject *missed = r->session != Py_None
                           ? PyObject_CallFunctionObjArgs(r->rendezvous, r->session,
                                                          FIELD(snapshot, S_ID), NULL)
                           : PyFloat_FromDouble(floor_div(r->prompt_tokens - cached, r->tenth));
    if (missed == NULL) {
        return NULL;
    }
    PyObject *key = Py_BuildValue("(ddddNddOO)", tight, cost, vllm ? 0.0 : 1.0, band, missed,
                                  used, ratio, tie, index);
    return key;
}

/* Append one candidate's key to its tier (0 meets, 1 unproven, 2 misses). */
static int add_key(const Request *r, PyObject *snapshot, PyObject *row, Py_ssize_t i,
                   PyObject *tiers[3])
{
    double ttft_p95_s, tpot_p95_s, uncertainty, cached = 0.0;
    if (check_record(snapshot, S_SIZE, "a snapshot")) {
        return -1;
    }
    if (check_row(row) || as_double(FIELD(row, 1), &ttft_p95_s)
        || as_double(FIELD(row, 3), &tpot_p95_s) || as_double(FIELD(row, 7), &uncertainty)) {
        return -1;
    }
    double ratio;
    if (ratio_of(&r->targets, ttft_p95_s, tpot_p95_s, r->output_tokens, &ratio)) {
        return -1;
    }
    PyObject *tie = PyObject_CallNoArgs(r->tie), *index = PyLong_FromSsize_t(i), *key = NULL;
    int tier = 2;
    if (tie != NULL && index != NULL && !(ratio <= uncertainty * uncertainty)) {
        key = Py_BuildValue("(ddOO)", ratio, ttft_p95_s, tie, index);
    } else if (tie != NULL && index != NULL) {
        PyObject *found = r->cached == Py_None ? NULL : DICT_GET(r->cached, FIELD(snapshot, S_ID));
        double in_price, out_price, cached_price;
        if (!PyErr_Occurred() && !(found != NULL && as_double(found, &cached))
            && !as_double(FIELD(snapshot, S_INPUT_PRICE), &in_price)
            && !as_double(FIELD(snapshot, S_CACHED_PRICE), &cached_price)
            && !as_double(FIELD(snapshot, S_OUTPUT_PRICE), &out_price)) {
            double cost = (r->prompt_tokens - cached) * in_price + cached * cached_price
                          + r->output_tokens * out_price;
            tier = ratio <= 1.0 ? 0 : 1;
            key = passing_key(r, snapshot, ratio, cost, cached, tie, index);
        }
    }
    Py_XDECREF(tie);
    Py_XDECREF(index);
    if (key == NULL) {
        return -1;
    }
    int failed = PyList_Append(tiers[tier], key);
    Py_DECREF(key);
    return failed;
}

/* tier_keys(candidates, rows, (ttft_s, tpot_s, deadline_s), prompt_tokens, cached, tie,
 *           band_width, session, rendezvous, comfort) -> (meets, unproven, misses)
 * `session`: the session whose first turn takes its rendezvous rank, else None. */
static PyObject *tier_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Request r;
    PyObject *ttft, *tpot, *deadline;
    if (nargs != 10 || (args[4] != Py_None && !PyDict_Check(args[4]))
        || !PyArg_ParseTuple(args[2], "OOO", &ttft, &tpot, &deadline)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "tier_keys: see policies/_fast_tiers.c");
        }
        return NULL;
    }
    PyObject *candidates = PySequence_Fast(args[0], "candidates must be a sequence");
    PyObject *rows = candidates == NULL ? NULL : PySequence_Fast(args[1], "rows: a sequence");
    PyObject *result = NULL;
    if (rows == NULL || target(ttft, &r.targets.ttft_s, &r.targets.has_ttft)
        || target(tpot, &r.targets.tpot_s, &r.targets.has_tpot)
        || target(deadline, &r.targets.deadline_s, &r.targets.has_deadline)
        || as_double(args[3], &r.prompt_tokens) || as_double(args[6], &r.band_width)
        || as_double(args[9], &r.comfort)) {
        goto done;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(candidates);
    if (count != PySequence_Fast_GET_SIZE(rows)) {
        PyErr_SetString(PyExc_ValueError, "one row per candidate");
        goto done;
    }
    r.output_tokens = 0.0;
    if (count > 0) {
        PyObject *first = PySequence_Fast_GET_ITEM(rows, 0);
        if (check_row(first) || as_double(FIELD(first, 4), &r.output_tokens)) {
            goto done;
        }
    }
    r.tenth = 0.1 * r.prompt_tokens + 1.0;
    r.cached = args[4];
    r.tie = args[5];
    r.session = args[7];
    r.rendezvous = args[8];
    PyObject *tiers[3] = {PyList_New(0), PyList_New(0), PyList_New(0)};
    int failed = tiers[0] == NULL || tiers[1] == NULL || tiers[2] == NULL;
    for (Py_ssize_t i = 0; !failed && i < count; i++) {
        failed = add_key(&r, PySequence_Fast_GET_ITEM(candidates, i),
                         PySequence_Fast_GET_ITEM(rows, i), i, tiers);
    }
    if (!failed) {
        result = PyTuple_Pack(3, tiers[0], tiers[1], tiers[2]);
    }
    for (int t = 0; t < 3; t++) {
        Py_XDECREF(tiers[t]);
    }
done:
    Py_XDECREF(candidates);
    Py_XDECREF(rows);
    return result;
}

/* ranked(same arguments as tier_keys) -> (candidate indices in ranking order, how many meet,
 * how many are unproven): each tier's keys sorted, as `_ranked` sorts them. */
static PyObject *ranked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tiers = tier_keys(self, args, nargs);
    if (tiers == NULL) {
        return NULL;
    }
    PyObject *order = PyList_New(0);
    for (Py_ssize_t t = 0; order != NULL && t < 3; t++) {
        PyObject *keys = PyTuple_GET_ITEM(tiers, t);
        if (PyList_Sort(keys)) {
            Py_CLEAR(order);
            break;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(keys); k++) {
            PyObject *key = PyList_GET_ITEM(keys, k); /* its index is its last item */
            if (PyList_Append(order, PyTuple_GET_ITEM(key, PyTuple_GET_SIZE(key) - 1))) {
                Py_CLEAR(order);
                break;
            }
        }
    }
    PyObject *result = order == NULL ? NULL
                                     : Py_BuildValue("(Nnn)", order,
                                                     PyList_GET_SIZE(PyTuple_GET_ITEM(tiers, 0)),
                                                     PyList_GET_SIZE(PyTuple_GET_ITEM(tiers, 1)));
    Py_DECREF(tiers);
    return result;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Field positions of EndpointSnapshot."},
    {"tier_keys", FASTCALL(tier_keys), METH_FASTCALL,
     "_tiers's loop (policies/slo_aware.py)."},
    {"ranked", FASTCALL(ranked), METH_FASTCALL,
     "_ranked (policies/slo_aware.py): the tier keys, sorted, as candidate indices."},
    {NULL, NULL, 0, NULL},
};

FAST_MODULE(_fast_tiers, "policies._fast_tiers", methods)
