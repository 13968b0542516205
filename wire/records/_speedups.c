/* C accelerator for the hot loops of wire/records (RecordBatch v2 record bodies).
 *
 * The pure-Python code in record_codec.py and columns.py is the reference: every function here
 * mirrors one Python function step by step, with the same checks in the same order and the same
 * DecodeError messages, so tests can compare the two on any input (valid, truncated, corrupt).
 *
 *   decode_records(data, count, base_offset, base_timestamp, log_append_time)
 *       -> list[DecodedRecord]                         (record_codec.decode_records_py)
 *   decode_columns(body, count, base_offset, base_ts, lat, ts_type, lo, hi, limit,
 *                  offsets, timestamps, types, key_offsets, key_data, key_valid,
 *                  value_offsets, value_data, value_valid, headers) -> records appended
 *                                                      (columns._decode_body)
 *   encode_record(out, attributes, timestamp_delta, offset_delta, key, value, headers)
 *       -> bytes appended to the bytearray `out`       (record_codec.encode_record_py)
 *   encode_records(out, pending, base_timestamp, now, now_marker)
 *       -> (max_timestamp, last_offset_delta)          (record_codec._encode_records_py)
 *   configure(DecodedRecord, field_names)              called once by batch.py
 *
 * Safety: every read goes through `reader`, which checks the position against the end of the
 * buffer before touching a byte; lengths are int64 and checked against the remaining bytes
 * before any copy. Corrupt input raises DecodeError (wire.errors), never reads out of bounds.
 * Checked under AddressSanitizer + UBSan with the tests and a fuzz loop.
 *
 * Portability: plain C99 plus GCC/Clang's __builtin_*_overflow. A compiler without them fails
 * the build, which setup.py marks optional: the pure-Python code is then used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SPEEDUPS_VERSION 1

static PyObject *DecodeError;          /* wire.errors.DecodeError */
static PyTypeObject *DecodedRecordType; /* set by configure() */
static PyObject *field_descr[5];        /* offset, timestamp, key, value, headers slots */

/* -- reading ------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    Py_ssize_t n;
    Py_ssize_t pos;
} reader;

static int fail(const char *msg)
{
    PyErr_SetString(DecodeError, msg);
    return -1;
}

static inline int64_t unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* record_codec._varint: the 1- and 2-byte fast path, then primitives.read_varint (<= 5 bytes,
 * value below 2**32) or read_varlong (<= 10 bytes, below 2**64). Truncation inside the first two
 * bytes says "varint" even for a varlong, as the Python fast path does.
 * read_head returns -1 (error set), 1 (value read) or 0 (longer: take the slow path). */
static int read_head(reader *r, int64_t *out)
{
    Py_ssize_t p = r->pos;
    if (p >= r->n)
        return fail("truncated varint");
    uint8_t b = r->buf[p];
    if (b < 0x80) {
        *out = unzigzag(b);
        r->pos = p + 1;
        return 1;
    }
    if (p + 1 >= r->n)
        return fail("truncated varint");
    uint8_t c = r->buf[p + 1];
    if (c < 0x80) {
        *out = unzigzag((uint64_t)(b & 0x7F) | (uint64_t)c << 7);
        r->pos = p + 2;
        return 1;
    }
    return 0;
}

static int read_varint(reader *r, int64_t *out)
{
    int head = read_head(r, out);
    if (head != 0)
        return head < 0 ? -1 : 0;
    uint64_t result = 0;
    Py_ssize_t p = r->pos;
    for (int i = 0; i < 5; i++) {
        if (p >= r->n)
            return fail("truncated varint");
        uint8_t b = r->buf[p++];
        result |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            if (result > 0xFFFFFFFFu)
                return fail("varint out of range");
            *out = unzigzag(result);
            r->pos = p;
            return 0;
        }
    }
    return fail("varint longer than 5 bytes");
}

static int read_varlong(reader *r, int64_t *out)
{
    int head = read_head(r, out);
    if (head != 0)
        return head < 0 ? -1 : 0;
    uint64_t result = 0;
    Py_ssize_t p = r->pos;
    for (int i = 0; i < 10; i++) {
        if (p >= r->n)
            return fail("truncated varlong");
        uint8_t b = r->buf[p++];
        if (i < 9)
            result |= (uint64_t)(b & 0x7F) << (7 * i);
        else
            result |= (uint64_t)(b & 0x01) << 63;
        if (!(b & 0x80)) {
            /* the 10th byte holds bit 63 only; anything above is >= 2**64 */
            if (i == 9 && (b & 0x7F) > 1)
                return fail("varlong out of range");
            *out = unzigzag(result);
            r->pos = p;
            return 0;
        }
    }
    return fail("varlong longer than 10 bytes");
}

/* record_codec._read_bytes without the copy: *start = -1 for null, else [start, start+len) */
static int read_span(reader *r, Py_ssize_t *start, int64_t *len)
{
    if (read_varint(r, len) < 0)
        return -1;
    if (*len < 0) {
        *start = -1;
        return 0;
    }
    if (r->pos + *len > r->n)
        return fail("record field runs past the end of the batch");
    *start = r->pos;
    r->pos += (Py_ssize_t)*len;
    return 0;
}

static PyObject *span_bytes(reader *r, Py_ssize_t start, int64_t len)
{
    if (start < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)r->buf + start, (Py_ssize_t)len);
}

/* One record's framing and fields, everything decode_records checks before building objects.
 * Header spans are left for the caller to walk (see read_headers). */
typedef struct {
    Py_ssize_t end, headers_pos;
    int64_t ts_delta, off_delta, nh, key_len, value_len;
    Py_ssize_t key_start, value_start;
} record_view;

static int skip_headers(reader *r, int64_t nh)
{
    Py_ssize_t s;
    int64_t l;
    for (int64_t i = 0; i < nh; i++) {
        if (read_span(r, &s, &l) < 0)
            return -1;
        Py_ssize_t ks = s;
        if (read_span(r, &s, &l) < 0)
            return -1;
        if (ks < 0)
            return fail("null header key");
    }
    return 0;
}

static int read_record(reader *r, record_view *v)
{
    int64_t length;
    if (read_varint(r, &length) < 0)
        return -1;
    if (length < 1 || r->pos + length > r->n)
        return fail("record length runs past the end of the batch");
    v->end = r->pos + (Py_ssize_t)length;
    r->pos += 1;                                   /* attributes: unused */
    if (read_varlong(r, &v->ts_delta) < 0 || read_varint(r, &v->off_delta) < 0 ||
        read_span(r, &v->key_start, &v->key_len) < 0 ||
        read_span(r, &v->value_start, &v->value_len) < 0 || read_varint(r, &v->nh) < 0)
        return -1;
    if (v->nh < 0 || v->nh > (int64_t)(v->end - r->pos))
        return fail("bad header count");
    v->headers_pos = r->pos;
    if (skip_headers(r, v->nh) < 0)
        return -1;
    if (r->pos != v->end)
        return fail("record length does not match its fields");
    return 0;
}

/* list[tuple[str, bytes | None]] of a record whose headers read_record already validated */
static PyObject *read_headers(reader *r, const record_view *v)
{
    PyObject *list = PyList_New((Py_ssize_t)v->nh);
    if (list == NULL)
        return NULL;
    reader h = {r->buf, r->n, v->headers_pos};
    for (int64_t i = 0; i < v->nh; i++) {
        Py_ssize_t ks, vs;
        int64_t kl, vl;
        if (read_span(&h, &ks, &kl) < 0 || read_span(&h, &vs, &vl) < 0)
            goto error;
        /* Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); so do we */
        PyObject *key = PyUnicode_DecodeUTF8((const char *)h.buf + ks, (Py_ssize_t)kl,
                                             "replace");
        if (key == NULL)
            goto error;
        PyObject *value = span_bytes(&h, vs, vl);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL)
            goto error;
        PyList_SET_ITEM(list, (Py_ssize_t)i, pair);
    }
    return list;
error:
    Py_DECREF(list);
    return NULL;
}

/* base + delta as a Python int; exact (unbounded) like Python's + when int64 overflows */
static PyObject *add_int(int64_t base, PyObject *base_obj, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *d = PyLong_FromLongLong(delta);
    if (d == NULL)
        return NULL;
    PyObject *res = PyNumber_Add(base_obj, d);
    Py_DECREF(d);
    return res;
}

static int check_count(Py_ssize_t count, Py_ssize_t n)
{
    if (count < 0 || count > n) {
        PyErr_Format(DecodeError, "record count %zd does not fit the %zd bytes of records",
                     count, n);
        return -1;
    }
    return 0;
}

static int check_filled(const reader *r, Py_ssize_t count)
{
    if (r->pos != r->n) {
        /* Kafka rejects a batch whose records do not fill it exactly ("records still remaining") */
        PyErr_Format(DecodeError, "%zd bytes left after the batch's %zd records",
                     r->n - r->pos, count);
        return -1;
    }
    return 0;
}

/* -- decode_records -------------------------------------------------------------------------- */

static PyObject *new_decoded_record(PyObject *values[5])
{
    PyObject *obj = DecodedRecordType->tp_alloc(DecodedRecordType, 0);
    if (obj == NULL)
        return NULL;
    for (int i = 0; i < 5; i++) {
        if (Py_TYPE(field_descr[i])->tp_descr_set(field_descr[i], obj, values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 5 arguments");
        return NULL;
    }
    if (DecodedRecordType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.configure() was not called");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_ts = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *lat = args[4];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    reader r = {view.buf, view.len, 0};
    PyObject *out = NULL;
    /* A batch decodes into thousands of GC-tracked objects (a DecodedRecord and a headers list
     * per record), and in CPython 3.11 every 700 of them start a collection whose older
     * generations scan the whole heap: measured at 3-5x the decode itself in a process holding
     * a few hundred thousand objects. Nothing built here can be part of a cycle until we
     * return, so collections are paused for the call (the previous state is restored on every
     * path; the next allocation after it runs one young-generation collection). */
    int gc_was_enabled = 0;
    if (check_count(count, r.n) < 0)
        goto done;
    out = PyList_New(count);
    if (out == NULL)
        goto done;
    gc_was_enabled = PyGC_Disable();
    for (Py_ssize_t i = 0; i < count; i++) {
        record_view v;
        if (read_record(&r, &v) < 0)
            goto error;
        PyObject *vals[5];
        vals[0] = add_int(base_offset, args[2], v.off_delta);
        if (lat != Py_None) {
            Py_INCREF(lat);
            vals[1] = lat;
        } else {
            vals[1] = add_int(base_ts, args[3], v.ts_delta);
        }
        vals[2] = span_bytes(&r, v.key_start, v.key_len);
        vals[3] = span_bytes(&r, v.value_start, v.value_len);
        vals[4] = read_headers(&r, &v);
        PyObject *rec = NULL;
        if (vals[0] && vals[1] && vals[2] && vals[3] && vals[4])
            rec = new_decoded_record(vals);
        for (int k = 0; k < 5; k++)
            Py_XDECREF(vals[k]);
        if (rec == NULL)
            goto error;
        PyList_SET_ITEM(out, i, rec);
    }
    if (check_filled(&r, count) < 0)
        goto error;
    goto done;
error:
    Py_CLEAR(out);
done:
    if (gc_was_enabled)
        PyGC_Enable();
    PyBuffer_Release(&view);
    return out;
}

/* -- decode_columns ------------------------------------------------------------------------- */

/* An output column: a caller's bytearray grown once per body by the most this body can add
 * (so the record loop writes through a plain pointer instead of resizing nine bytearrays per
 * record), then cut back to what was written. While we write, we hold a buffer export on it:
 * any other resize (say, from a __del__ run by the garbage collector during an allocation)
 * fails with BufferError instead of moving the memory under our pointer. */
typedef struct {
    PyObject *ba;
    Py_buffer view;
    char *base, *p;
} column;

static int column_open(column *c, PyObject *ba, Py_ssize_t reserve)
{
    Py_ssize_t start = PyByteArray_GET_SIZE(ba);
    if (PyByteArray_Resize(ba, start + reserve) < 0)
        return -1;
    if (PyObject_GetBuffer(ba, &c->view, PyBUF_WRITABLE) < 0)
        return -1;
    c->ba = ba;
    c->base = c->view.buf;
    c->p = c->base + start;
    return 0;
}

static int column_close(column *c)
{
    Py_ssize_t size = c->p - c->base;
    PyBuffer_Release(&c->view);
    return PyByteArray_Resize(c->ba, size);
}

static inline void put_le(char *dst, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        dst[i] = (char)(v >> (8 * i));
}

#define MAX_I32 2147483647

/* One binary value (or a null) into an Arrow binary column: data, end offset, 0/1 flag. */
static int put_binary(const reader *r, Py_ssize_t start, int64_t len, column *data,
                      column *offsets, column *valid)
{
    if (start >= 0) {
        memcpy(data->p, r->buf + start, (size_t)len);
        data->p += len;
    }
    Py_ssize_t end = data->p - data->base;
    if (end > MAX_I32) {
        PyErr_SetString(PyExc_ValueError,
                        "more than 2 GiB of keys or values: too large for Arrow binary");
        return -1;
    }
    put_le(offsets->p, (uint64_t)end, 4);
    offsets->p += 4;
    *valid->p++ = (char)(start >= 0);
    return 0;
}

enum { C_OFFSETS, C_TIMESTAMPS, C_TYPES, C_KEY_OFFSETS, C_KEY_DATA, C_KEY_VALID,
       C_VALUE_OFFSETS, C_VALUE_DATA, C_VALUE_VALID, N_COLUMNS };

static PyObject *decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 19) {
        PyErr_SetString(PyExc_TypeError, "decode_columns takes 19 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_ts = PyLong_AsLongLong(args[3]);
    long long lat = args[4] == Py_None ? 0 : PyLong_AsLongLong(args[4]);
    long long ts_type = PyLong_AsLongLong(args[5]);
    long long lo = PyLong_AsLongLong(args[6]);
    long long hi = PyLong_AsLongLong(args[7]);
    long long limit = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    int has_lat = args[4] != Py_None;
    PyObject *headers = args[18];
    for (int i = 0; i < N_COLUMNS; i++) {
        if (!PyByteArray_Check(args[9 + i])) {
            PyErr_SetString(PyExc_TypeError, "decode_columns: column buffers must be bytearrays");
            return NULL;
        }
    }
    if (headers != Py_None && !PyList_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "decode_columns: headers must be a list or None");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    reader r = {view.buf, view.len, 0};
    long long kept = 0;
    int stopped = 0;          /* hit `limit`: the rest of the body is not read (nor checked) */
    int opened = 0, gc_was_enabled = 0;
    PyObject *result = NULL;
    column col[N_COLUMNS];
    if (check_count(count, r.n) < 0)
        goto done;
    /* at most `count` records, and all keys (or all values) fit in the body's n bytes */
    if (headers != Py_None)       /* a list per record: pause the GC as decode_records does */
        gc_was_enabled = PyGC_Disable();
    const Py_ssize_t widths[N_COLUMNS] = {8, 8, 4, 4, -1, 1, 4, -1, 1};
    for (; opened < N_COLUMNS; opened++) {
        Py_ssize_t w = widths[opened];
        if (column_open(&col[opened], args[9 + opened], w < 0 ? r.n : w * count) < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (kept >= limit) {
            stopped = 1;
            break;
        }
        record_view v;
        if (read_record(&r, &v) < 0)
            goto done;
        int64_t offset;
        /* an offset that overflows int64 is outside any [lo, hi) of int64s: dropped */
        if (__builtin_add_overflow((int64_t)base_offset, v.off_delta, &offset) ||
            offset < lo || offset >= hi)
            continue;
        int64_t ts = lat;
        if (!has_lat && __builtin_add_overflow((int64_t)base_ts, v.ts_delta, &ts)) {
            fail("record timestamp out of the int64 range");
            goto done;
        }
        put_le(col[C_OFFSETS].p, (uint64_t)offset, 8);
        col[C_OFFSETS].p += 8;
        put_le(col[C_TIMESTAMPS].p, (uint64_t)ts, 8);
        col[C_TIMESTAMPS].p += 8;
        put_le(col[C_TYPES].p, (uint64_t)ts_type, 4);
        col[C_TYPES].p += 4;
        if (put_binary(&r, v.key_start, v.key_len, &col[C_KEY_DATA], &col[C_KEY_OFFSETS],
                       &col[C_KEY_VALID]) < 0 ||
            put_binary(&r, v.value_start, v.value_len, &col[C_VALUE_DATA],
                       &col[C_VALUE_OFFSETS], &col[C_VALUE_VALID]) < 0)
            goto done;
        if (headers != Py_None) {
            PyObject *hs = read_headers(&r, &v);
            if (hs == NULL)
                goto done;
            int rc = PyList_Append(headers, hs);
            Py_DECREF(hs);
            if (rc < 0)
                goto done;
        }
        kept++;
    }
    if (!stopped && check_filled(&r, count) < 0)
        goto done;
    result = PyLong_FromLongLong(kept);
done:
    /* cut every column back to what was written (also on error: no stray reserved bytes) */
    for (int i = 0; i < opened; i++) {
        if (column_close(&col[i]) < 0)
            Py_CLEAR(result);
    }
    if (gc_was_enabled)
        PyGC_Enable();
    PyBuffer_Release(&view);
    return result;
}

/* Grow bytearray `ba` by `extra` bytes; returns where they start (NULL with an error set). */
static char *grow(PyObject *ba, Py_ssize_t extra)
{
    Py_ssize_t n = PyByteArray_GET_SIZE(ba);
    if (PyByteArray_Resize(ba, n + extra) < 0)
        return NULL;
    return PyByteArray_AS_STRING(ba) + n;
}

/* -- encode_record -------------------------------------------------------------------------- */

static inline uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (v < 0 ? ~(uint64_t)0 : 0);
}

static inline int varint_size(int64_t v)
{
    uint64_t z = zigzag(v);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline char *put_varint(char *p, int64_t v)
{
    uint64_t z = zigzag(v);
    while (z >= 0x80) {
        *p++ = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (char)z;
    return p;
}

/* A key, value or header field to encode: bytes-like, str (header keys), or None. */
typedef struct {
    const char *ptr;
    Py_ssize_t len;       /* -1 for None */
    Py_buffer view;
    int has_view;
} field;

static int field_get(PyObject *obj, field *f, int allow_str)
{
    f->has_view = 0;
    if (obj == Py_None) {
        f->ptr = NULL;
        f->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        f->ptr = PyBytes_AS_STRING(obj);
        f->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (allow_str && PyUnicode_Check(obj)) {
        f->ptr = PyUnicode_AsUTF8AndSize(obj, &f->len);   /* cached in the str object */
        return f->ptr == NULL ? -1 : 0;
    }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0)
        return -1;
    f->has_view = 1;
    f->ptr = f->view.buf;
    f->len = f->view.len;
    return 0;
}

static void field_release(field *f)
{
    if (f->has_view) {
        PyBuffer_Release(&f->view);
        f->has_view = 0;
    }
}

static inline Py_ssize_t field_size(const field *f)
{
    return f->len < 0 ? 1 : varint_size(f->len) + f->len;
}

static inline char *put_field(char *p, const field *f)
{
    if (f->len < 0)
        return put_varint(p, -1);
    p = put_varint(p, f->len);
    if (f->len)
        memcpy(p, f->ptr, f->len);
    return p + f->len;
}

static int as_int64(PyObject *o, int64_t *out, const char *what)
{
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s out of the int64 range", what);
        }
        return -1;
    }
    *out = v;
    return 0;
}

#define SMALL_HEADERS 8

/* Append one record to bytearray `out`; returns the bytes appended, -1 with an error set. */
static Py_ssize_t encode_one(PyObject *out, int64_t attributes, int64_t ts_delta,
                             int64_t off_delta, PyObject *key_obj, PyObject *value_obj,
                             PyObject *headers_obj)
{
    PyObject *headers = PySequence_Fast(headers_obj, "record headers must be iterable");
    if (headers == NULL)
        return -1;
    Py_ssize_t nh = PySequence_Fast_GET_SIZE(headers);
    field key, value, small[2 * SMALL_HEADERS], *hf = small;
    Py_ssize_t got = 0;      /* header fields acquired so far */
    Py_ssize_t result = -1;
    key.has_view = value.has_view = 0;
    if (nh > SMALL_HEADERS) {
        hf = PyMem_Malloc(sizeof(field) * 2 * nh);
        if (hf == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (field_get(key_obj, &key, 0) < 0) {
        key.has_view = 0;
        goto done;
    }
    if (field_get(value_obj, &value, 0) < 0) {
        value.has_view = 0;
        goto done;
    }
    Py_ssize_t body = 1 + varint_size(ts_delta) + varint_size(off_delta) + field_size(&key) +
                      field_size(&value) + varint_size(nh);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *pair = items[i];
        PyObject *hk, *hv;
        if ((PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2)) {
            hk = PyTuple_GET_ITEM(pair, 0);
            hv = PyTuple_GET_ITEM(pair, 1);
        } else if (PyList_CheckExact(pair) && PyList_GET_SIZE(pair) == 2) {
            hk = PyList_GET_ITEM(pair, 0);
            hv = PyList_GET_ITEM(pair, 1);
        } else {
            PyErr_SetString(PyExc_ValueError, "a record header must be a (key, value) pair");
            goto done;
        }
        if (hk == Py_None) {
            PyErr_SetString(PyExc_TypeError, "a record header key cannot be None");
            goto done;
        }
        if (field_get(hk, &hf[got], 1) < 0)
            goto done;
        got++;
        if (field_get(hv, &hf[got], 0) < 0)
            goto done;
        got++;
        body += field_size(&hf[got - 2]) + field_size(&hf[got - 1]);
    }
    Py_ssize_t total = varint_size(body) + body;
    char *p = grow(out, total);
    if (p == NULL)
        goto done;
    p = put_varint(p, body);
    *p++ = (char)(attributes & 0x7F);
    p = put_varint(p, ts_delta);
    p = put_varint(p, off_delta);
    p = put_field(p, &key);
    p = put_field(p, &value);
    p = put_varint(p, nh);
    for (Py_ssize_t i = 0; i < 2 * nh; i++)
        p = put_field(p, &hf[i]);
    result = total;
done:
    field_release(&key);
    field_release(&value);
    for (Py_ssize_t i = 0; i < got; i++)
        field_release(&hf[i]);
    if (hf != small)
        PyMem_Free(hf);
    Py_DECREF(headers);
    return result;
}

static PyObject *encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_record takes 7 arguments");
        return NULL;
    }
    if (!PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "encode_record: out must be a bytearray");
        return NULL;
    }
    int64_t attributes, ts_delta, off_delta;
    if (as_int64(args[1], &attributes, "attributes") < 0 ||
        as_int64(args[2], &ts_delta, "timestamp delta") < 0 ||
        as_int64(args[3], &off_delta, "offset delta") < 0)
        return NULL;
    Py_ssize_t n = encode_one(args[0], attributes, ts_delta, off_delta, args[4], args[5],
                              args[6]);
    return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

/* One pending item of encode_records: its timestamp delta, then the record. */
static int encode_pending(PyObject *out, PyObject *item, int64_t base_ts, int64_t now,
                          PyObject *now_marker, int64_t *max_ts, int *have_max,
                          int64_t *last_delta)
{
    PyObject *ts_obj = PyTuple_GET_ITEM(item, 1);
    int64_t off_delta, attributes, ts_delta, ts;
    if (as_int64(PyTuple_GET_ITEM(item, 0), &off_delta, "offset delta") < 0 ||
        as_int64(PyTuple_GET_ITEM(item, 5), &attributes, "attributes") < 0)
        return -1;
    if (ts_obj == Py_None) {
        if (as_int64(PyTuple_GET_ITEM(item, 6), &ts_delta, "timestamp delta") < 0)
            return -1;
    } else {
        if (ts_obj == now_marker)
            ts = now;
        else if (as_int64(ts_obj, &ts, "timestamp") < 0)
            return -1;
        if (__builtin_sub_overflow(ts, base_ts, &ts_delta)) {
            PyErr_SetString(PyExc_ValueError, "timestamp delta out of the int64 range");
            return -1;
        }
    }
    if (__builtin_add_overflow(base_ts, ts_delta, &ts)) {
        PyErr_SetString(PyExc_ValueError, "record timestamp out of the int64 range");
        return -1;
    }
    if (!*have_max || ts > *max_ts) {
        *max_ts = ts;
        *have_max = 1;
    }
    if (off_delta > *last_delta)
        *last_delta = off_delta;
    return encode_one(out, attributes, ts_delta, off_delta, PyTuple_GET_ITEM(item, 2),
                      PyTuple_GET_ITEM(item, 3), PyTuple_GET_ITEM(item, 4)) < 0 ? -1 : 0;
}

/* RecordBatchBuilder.build's loop: `pending` is a list of (offset_delta, ts, key, value,
 * headers, attributes, timestamp_delta) tuples where ts is an absolute timestamp, the `now`
 * marker object, or None (keep timestamp_delta). Returns (max_timestamp, last_offset_delta). */
static PyObject *encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_records takes 5 arguments");
        return NULL;
    }
    PyObject *out = args[0], *pending = args[1], *now_marker = args[4];
    int64_t base_ts, now;
    if (!PyByteArray_Check(out) || !PyList_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "encode_records(bytearray, list, ...)");
        return NULL;
    }
    if (as_int64(args[2], &base_ts, "base timestamp") < 0 || as_int64(args[3], &now, "now") < 0)
        return NULL;
    int64_t max_ts = 0, last_delta = 0;
    int have_max = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pending); i++) {
        PyObject *item = PyList_GET_ITEM(pending, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 7) {
            PyErr_SetString(PyExc_TypeError, "encode_records: pending items are 7-tuples");
            return NULL;
        }
        /* a headers iterable may run Python code that changes `pending`: keep our item */
        Py_INCREF(item);
        int rc = encode_pending(out, item, base_ts, now, now_marker, &max_ts, &have_max,
                                &last_delta);
        Py_DECREF(item);
        if (rc < 0)
            return NULL;
    }
    if (!have_max)
        return Py_BuildValue("(OL)", Py_None, (long long)last_delta);
    return Py_BuildValue("(LL)", (long long)max_ts, (long long)last_delta);
}

/* -- configure ------------------------------------------------------------------------------ */

static PyObject *configure(PyObject *self, PyObject *args)
{
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyTuple_Type, &names))
        return NULL;
    if (PyTuple_GET_SIZE(names) != 5) {
        PyErr_SetString(PyExc_ValueError, "configure: DecodedRecord must have 5 fields");
        return NULL;
    }
    PyObject *descr[5];
    for (int i = 0; i < 5; i++) {
        descr[i] = PyObject_GetAttr(cls, PyTuple_GET_ITEM(names, i));
        if (descr[i] == NULL || Py_TYPE(descr[i])->tp_descr_set == NULL) {
            if (descr[i] != NULL)
                PyErr_SetString(PyExc_TypeError, "configure: fields must be __slots__");
            for (int k = 0; k <= i; k++)
                Py_XDECREF(descr[k]);
            return NULL;
        }
    }
    for (int i = 0; i < 5; i++)
        Py_XSETREF(field_descr[i], descr[i]);
    Py_INCREF(cls);
    Py_XSETREF(DecodedRecordType, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(data, count, base_offset, base_timestamp, log_append_time) -> list"},
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_FASTCALL,
     "decode_columns(body, count, ..., headers) -> records appended (see columns.py)"},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL,
     "encode_record(out, attributes, timestamp_delta, offset_delta, key, value, headers) "
     "-> bytes appended"},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "encode_records(out, pending, base_timestamp, now, now_marker) -> (max_ts, last_delta)"},
    {"configure", configure, METH_VARARGS, "configure(DecodedRecord, field_names)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "wire.records._speedups",
    "C accelerator for wire.records (the pure-Python code is the reference)", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *errors = PyImport_ImportModule("wire.errors");
    if (errors == NULL)
        return NULL;
    DecodeError = PyObject_GetAttrString(errors, "DecodeError");
    Py_DECREF(errors);
    if (DecodeError == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    /* batch.py refuses a build whose VERSION differs from its own (a stale in-place build
     * left by an older checkout): bump both together when an entry point changes */
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", SPEEDUPS_VERSION) < 0)
        Py_CLEAR(m);
    return m;
}
