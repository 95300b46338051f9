/* `Estimator.predict_rows`'s loop (policies/estimate.py), compiled: the same arithmetic in the
 * same order, on the same fields, so every row equals the Python one bit for bit
 * (tests/unit/test_compiled_paths.py). Change both together; policies/fast_paths.py explains why
 * this exists and how it is loaded. */
#include "_fast.h"

/* Field positions, set by `configure` from the NamedTuples' `_fields`. */
static Py_ssize_t S_ID, S_IN_FLIGHT, S_LIMIT, S_ENGINE, S_LATENCY, S_PREFILL;
static Py_ssize_t E_WAITING, E_RUNNING, E_WAITING_FOR_CAPACITY, E_AGE, E_PREEMPTIONS;
static Py_ssize_t S_SIZE, E_SIZE; /* the records' sizes these positions need */
static double MAX_RECOMPUTE_SHARE = 0.9;

static PyObject *configure(PyObject *self, PyObject *args)
{
    if (!PyArg_ParseTuple(args, "(nnnnnn)(nnnnn)d", &S_ID, &S_IN_FLIGHT, &S_LIMIT, &S_ENGINE,
                          &S_LATENCY, &S_PREFILL, &E_WAITING, &E_RUNNING, &E_WAITING_FOR_CAPACITY,
                          &E_AGE, &E_PREEMPTIONS, &MAX_RECOMPUTE_SHARE)) {
        return NULL;
    }
    Py_ssize_t snapshot[] = {S_ID, S_IN_FLIGHT, S_LIMIT, S_ENGINE, S_LATENCY, S_PREFILL};
    Py_ssize_t engine[] = {E_WAITING, E_RUNNING, E_WAITING_FOR_CAPACITY, E_AGE, E_PREEMPTIONS};
    S_SIZE = record_size(snapshot, 6);
    E_SIZE = record_size(engine, 5);
    Py_RETURN_NONE;
}

/* The endpoint's fit as `FitRow` lays it out (`EndpointFit`, policies/estimate_params.py). */
typedef struct {
    double a, b, mean_service_s, ttft_scale, tpot_scale, warmth, tpot_base_s, tpot_slope_s;
    double penalty_mean_s, penalty_p95_s, idle_tpot_s, doubling_running, prefill_weight;
    int has_tpot_base;
    PyObject *uncertainty, *cold, *prior_slots; /* borrowed from the fit */
} Fit;

static int read_fit(PyObject *fit, Fit *f)
{
    if (!PyTuple_Check(fit) || PyTuple_GET_SIZE(fit) != 17) {
        PyErr_SetString(PyExc_TypeError, "an endpoint fit must be a 17-tuple");
        return -1;
    }
    PyObject *tpot_base = FIELD(fit, 7);
    f->has_tpot_base = tpot_base != Py_None;
    f->tpot_base_s = 0.0;
    f->uncertainty = FIELD(fit, 11);
    f->cold = FIELD(fit, 12);
    f->prior_slots = FIELD(fit, 13);
    if (as_double(FIELD(fit, 1), &f->a) || as_double(FIELD(fit, 2), &f->b)
        || as_double(FIELD(fit, 3), &f->mean_service_s) || as_double(FIELD(fit, 4), &f->ttft_scale)
        || as_double(FIELD(fit, 5), &f->tpot_scale) || as_double(FIELD(fit, 6), &f->warmth)
        || (f->has_tpot_base && as_double(tpot_base, &f->tpot_base_s))
        || as_double(FIELD(fit, 8), &f->tpot_slope_s)
        || as_double(FIELD(fit, 9), &f->penalty_mean_s)
        || as_double(FIELD(fit, 10), &f->penalty_p95_s)
        || as_double(FIELD(fit, 14), &f->idle_tpot_s)
        || truthy_number(FIELD(fit, 15), &f->doubling_running)
        || as_double(FIELD(fit, 16), &f->prefill_weight)) {
        return -1;
    }
    return 0;
}

typedef struct {
    double queued, running, trust, preempting;
} Load;

/* The fused load (estimate.py, "Load"), as predict_rows inlines it. */
static int fused_load(PyObject *snapshot, const Fit *f, long long in_flight, long long limit,
                      double half_life_s, Load *load)
{
    long long slots = limit;
    int bounded = limit != 0;
    if (!bounded && f->prior_slots != Py_None) {
        if (as_long(f->prior_slots, &slots)) {
            return -1;
        }
        bounded = 1;
    }
    load->queued = 0.0;
    load->running = (double)in_flight;
    load->trust = 0.0;
    load->preempting = 0.0;
    if (bounded && in_flight > slots) {
        load->queued = (double)(in_flight - slots);
        load->running = (double)slots;
    }
    PyObject *engine = FIELD(snapshot, S_ENGINE);
    if (engine == Py_None) {
        return 0;
    }
    if (check_record(engine, E_SIZE, "engine signals")) {
        return -1;
    }
    if (FIELD(engine, E_AGE) == Py_None) {
        return 0;
    }
    double age_s, waiting = 0.0, running = 0.0;
    PyObject *waiting_of = FIELD(engine, E_WAITING_FOR_CAPACITY);
    if (waiting_of == Py_None) {
        waiting_of = FIELD(engine, E_WAITING);
    }
    PyObject *running_of = FIELD(engine, E_RUNNING);
    if (as_double(FIELD(engine, E_AGE), &age_s)
        || (waiting_of != Py_None && as_double(waiting_of, &waiting))
        || (running_of != Py_None && as_double(running_of, &running))
        || truthy_number(FIELD(engine, E_PREEMPTIONS), &load->preempting)) {
        return -1;
    }
    load->trust = age_s > 0 ? pow(0.5, age_s / half_life_s) : 1.0;
    if (waiting_of != Py_None) {
        load->queued += load->trust * (waiting - load->queued);
    }
    if (running_of != Py_None) {
        load->running += load->trust * (running - load->running);
    }
    if (limit && (double)(in_flight - limit) > load->queued) {
        load->queued = (double)(in_flight - limit);
    }
    return 0;
}

/* The row of one endpoint, a `Prediction` as a plain tuple. */
static PyObject *row_of(PyObject *snapshot, PyObject *fit, PyObject *cached_map,
                        PyObject *output_tokens, double prompt_tokens, double half_life_s,
                        double miss_p95, int tpot)
{
    Fit f;
    Load load;
    long long in_flight, limit = 0;
    PyObject *limit_of = FIELD(snapshot, S_LIMIT);
    if (read_fit(fit, &f) || as_long(FIELD(snapshot, S_IN_FLIGHT), &in_flight)
        || (limit_of != Py_None && as_long(limit_of, &limit))
        || fused_load(snapshot, &f, in_flight, limit, half_life_s, &load)) {
        return NULL;
    }
    double wait_s = load.queued * f.mean_service_s;
    if (load.preempting) { /* recompute_stretch (policies/engine_pressure.py) */
        double share = load.trust * load.preempting * f.mean_service_s;
        wait_s *= 1.0 / (1.0 - (share < MAX_RECOMPUTE_SHARE ? share : MAX_RECOMPUTE_SHARE));
    }
    double cached = 0.0;
    if (cached_map != Py_None) {
        PyObject *found = DICT_GET(cached_map, FIELD(snapshot, S_ID));
        if ((found == NULL && PyErr_Occurred()) || (found != NULL && as_double(found, &cached))) {
            return NULL;
        }
    }
    double prefill;
    if (as_double(FIELD(snapshot, S_PREFILL), &prefill)) {
        return NULL;
    }
    /* cold (weight 1 - w): the prefill sent ahead and not yet answering, past the wait */
    double started_s = f.b * prefill - wait_s;
    double ahead_s = f.a + f.b * (prompt_tokens - cached) + wait_s;
    ahead_s += f.prefill_weight * (started_s > 0.0 ? started_s : 0.0);
    double tpot_s = NAN;
    if (tpot) {
        tpot_s = f.idle_tpot_s;
        if (f.doubling_running) {
            tpot_s = f.idle_tpot_s
                     * (1.0 + load.running / (limit ? (double)limit : f.doubling_running));
        }
        if (f.has_tpot_base) {
            double observed_s = f.tpot_base_s + f.tpot_slope_s * (double)(in_flight + 1);
            tpot_s += f.warmth * (observed_s - tpot_s);
        }
    }
    double ttft_p95_s = (ahead_s + f.b * cached * miss_p95) * f.ttft_scale
                        + wait_s * (1.0 - load.trust) + f.penalty_p95_s;
    return Py_BuildValue("(ddddOdOO)", ahead_s + f.penalty_mean_s, ttft_p95_s, tpot_s,
                         tpot_s * f.tpot_scale, output_tokens, load.queued, f.cold, f.uncertainty);
}

/* predict_rows(snapshots, fits, remember, prompt_tokens, output_tokens, cached, half_life_s,
 *              miss_p95, tpot) -> list of rows; `remember(snapshot)` works out a missing fit. */
static PyObject *predict_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    double prompt_tokens, half_life_s, miss_p95;
    if (nargs != 9 || !PyDict_Check(args[1]) || (args[5] != Py_None && !PyDict_Check(args[5]))) {
        PyErr_SetString(PyExc_TypeError, "predict_rows(snapshots, fits: dict, remember, "
                        "prompt_tokens, output_tokens, cached: dict | None, half_life_s, "
                        "miss_p95, tpot)");
        return NULL;
    }
    if (as_double(args[3], &prompt_tokens) || as_double(args[6], &half_life_s)
        || as_double(args[7], &miss_p95)) {
        return NULL;
    }
    int tpot = PyObject_IsTrue(args[8]);
    PyObject *seq = PySequence_Fast(args[0], "snapshots must be a sequence");
    if (seq == NULL || tpot < 0) {
        Py_XDECREF(seq);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *rows = PyList_New(count);
    for (Py_ssize_t i = 0; rows != NULL && i < count; i++) {
        PyObject *snapshot = PySequence_Fast_GET_ITEM(seq, i);
        if (check_record(snapshot, S_SIZE, "a snapshot")) {
            Py_CLEAR(rows);
            break;
        }
        PyObject *fit = DICT_GET(args[1], FIELD(snapshot, S_ID));
        if (fit != NULL && PyTuple_Check(fit) && PyTuple_GET_SIZE(fit) > 0
            && FIELD(fit, 0) == FIELD(snapshot, S_LATENCY)) {
            Py_INCREF(fit);
        } else {
            fit = PyErr_Occurred() ? NULL : PyObject_CallOneArg(args[2], snapshot);
        }
        PyObject *row = fit == NULL ? NULL
                                    : row_of(snapshot, fit, args[5], args[4], prompt_tokens,
                                             half_life_s, miss_p95, tpot);
        Py_XDECREF(fit);
        if (row == NULL) {
            Py_CLEAR(rows);
            break;
        }
        PyList_SET_ITEM(rows, i, row);
    }
    Py_DECREF(seq);
    return rows;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Field positions and the recompute share cap."},
    {"predict_rows", FASTCALL(predict_rows), METH_FASTCALL,
     "Estimator.predict_rows's loop (policies/estimate.py)."},
    {NULL, NULL, 0, NULL},
};

FAST_MODULE(_fast_estimate, "policies._fast_estimate", methods)
