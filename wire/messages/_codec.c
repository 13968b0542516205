/* C message codec: the encode and decode that wire/messages/runtime.py compiles to Python for
 * each (struct class, version), run from a "program" instead of from generated source.
 *
 * wire/messages/program.py builds a Program from the same field tables and the same rules as
 * runtime._compile (which fields a version carries, which are tagged, each field's flexible
 * encoding, nullability, defaults, lenient responses); this file only walks it. The Python
 * compiler stays the reference: wire/tests/test_message_codec_c.py compares the two on every
 * message and version, on random messages and on corrupt and truncated bytes.
 *
 *   Program(cls, ops, absent, tagged, flexible)    built once per (class, version, flexible,
 *                                                  lenient) and cached like the Python codecs
 *   Program.decode(mv, pos) -> (obj, end)           runtime's `dec(mv, pos)`
 *   Program.encode(obj, out, opaque) -> None        runtime's `enc(o, b, opaque)`
 *   configure(DecodeError, EncodeError, is_default, uuid_from, uuid_bytes, sort_tagged)
 *
 * Safety: every read checks the position against the end of its buffer first (`need`); lengths
 * are checked against the remaining bytes before any allocation, as runtime's `take` does, so
 * a peer claiming a 2 GB string costs nothing. Garbage raises DecodeError (or, as in Python,
 * UnicodeDecodeError, which Message.decode_from turns into one); never a read out of bounds.
 * Encoding errors are the Python code's kinds (EncodeError, TypeError, OverflowError,
 * AttributeError), which Message.encode_into turns into EncodeError.
 *
 * Programs hold their class and their sub-structs' programs; a class holds its programs in its
 * codec cache. Generated classes live as long as the process, so the type is not collected.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define CODEC_VERSION 1

static PyObject *DecodeError, *EncodeError, *is_default_fn, *uuid_from_fn, *uuid_bytes_fn,
    *sort_tagged_fn, *empty_tuple, *str_unknown_tagged, *str_size;

enum { K_BOOL = 1, K_INT8, K_INT16, K_UINT16, K_INT32, K_UINT32, K_INT64, K_FLOAT64,
       K_STRING, K_BYTES, K_RECORDS, K_UUID, K_STRUCT, K_ARRAY };

typedef struct Op {
    int kind, flex, nullable, lenient;
    PyObject *name;             /* attribute (interned); NULL for an array's element */
    PyObject *sub;              /* K_STRUCT: the struct's Program */
    struct Op *elem;            /* K_ARRAY: its element */
    PyObject *what;             /* decode: "null <what>" when not nullable */
    PyObject *not_nullable;     /* encode: the EncodeError text for a None */
} Op;

typedef struct {                /* a field that takes its default (absent or tagged) */
    PyObject *name;
    PyObject *value;            /* the constant default, or NULL: a fresh one from `factory` */
    PyObject *factory;
    PyObject *field;            /* its F, for runtime._is_default */
    PyObject *error;            /* absent fields: EncodeError text unless default; or NULL */
    PyObject *proto;            /* a struct field without a literal default: a default instance */
    PyObject *names;            /* ... and the names of all its fields, compared one by one */
    int is_array;               /* an array without a literal default: default when empty */
} Dflt;

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    Py_ssize_t nops, nabsent, ntagged;
    Op *ops;
    Dflt *absent;
    int flexible;
    Op *tops;                   /* tagged fields, sorted by tag */
    Dflt *tdflt;
    long *tags;
} Program;

static PyTypeObject ProgramType;

/* -- building --------------------------------------------------------------------------------- */

static void op_clear(Op *op)
{
    Py_CLEAR(op->name);
    Py_CLEAR(op->sub);
    Py_CLEAR(op->what);
    Py_CLEAR(op->not_nullable);
    if (op->elem != NULL) {
        op_clear(op->elem);
        PyMem_Free(op->elem);
        op->elem = NULL;
    }
}

static void dflt_clear(Dflt *d)
{
    Py_CLEAR(d->name);
    Py_CLEAR(d->value);
    Py_CLEAR(d->factory);
    Py_CLEAR(d->field);
    Py_CLEAR(d->error);
    Py_CLEAR(d->proto);
    Py_CLEAR(d->names);
}

static PyObject *none_to_null(PyObject *o)
{
    if (o == Py_None)
        return NULL;
    Py_INCREF(o);
    return o;
}

/* (kind, name, flex, nullable, lenient, sub, elem, what, not_nullable) */
static int op_from(Op *op, PyObject *spec)
{
    PyObject *name, *sub, *elem, *what, *not_nullable;
    if (!PyArg_ParseTuple(spec, "iOpppOOOO", &op->kind, &name, &op->flex, &op->nullable,
                          &op->lenient, &sub, &elem, &what, &not_nullable))
        return -1;
    if (op->kind < K_BOOL || op->kind > K_ARRAY) {
        PyErr_Format(PyExc_ValueError, "unknown op kind %d", op->kind);
        return -1;
    }
    op->name = none_to_null(name);
    if (op->name != NULL)
        PyUnicode_InternInPlace(&op->name);
    op->what = none_to_null(what);
    op->not_nullable = none_to_null(not_nullable);
    if (op->kind == K_STRUCT) {
        if (!PyObject_TypeCheck(sub, &ProgramType)) {
            PyErr_SetString(PyExc_TypeError, "a struct op needs its Program");
            return -1;
        }
        Py_INCREF(sub);
        op->sub = sub;
    }
    if (op->kind == K_ARRAY) {
        op->elem = PyMem_Calloc(1, sizeof(Op));
        if (op->elem == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        return op_from(op->elem, elem);
    }
    return 0;
}

/* (name, value or MISSING, factory or None, field, error or None, proto or None,
 *  names or None, is_array) */
static int dflt_from(Dflt *d, PyObject *spec, PyObject *missing)
{
    PyObject *value, *factory, *error, *proto, *names;
    if (!PyArg_ParseTuple(spec, "UOOOOOOp", &d->name, &value, &factory, &d->field, &error,
                          &proto, &names, &d->is_array))
        return -1;
    d->proto = none_to_null(proto);
    d->names = none_to_null(names);
    if (d->names != NULL && !PyTuple_Check(d->names)) {
        PyErr_SetString(PyExc_TypeError, "field names must be a tuple");
        return -1;
    }
    Py_INCREF(d->name);
    PyUnicode_InternInPlace(&d->name);
    Py_INCREF(d->field);
    d->value = value == missing ? NULL : (Py_INCREF(value), value);
    d->factory = none_to_null(factory);
    d->error = none_to_null(error);
    if (d->value == NULL && d->factory == NULL) {
        PyErr_SetString(PyExc_ValueError, "a default needs a value or a factory");
        return -1;
    }
    return 0;
}

static void Program_dealloc(Program *p)
{
    Py_ssize_t i;
    for (i = 0; p->ops != NULL && i < p->nops; i++)
        op_clear(&p->ops[i]);
    for (i = 0; p->absent != NULL && i < p->nabsent; i++)
        dflt_clear(&p->absent[i]);
    for (i = 0; p->tops != NULL && p->tdflt != NULL && i < p->ntagged; i++) {
        op_clear(&p->tops[i]);
        dflt_clear(&p->tdflt[i]);
    }
    PyMem_Free(p->ops);
    PyMem_Free(p->absent);
    PyMem_Free(p->tops);
    PyMem_Free(p->tdflt);
    PyMem_Free(p->tags);
    Py_XDECREF(p->cls);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *Program_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *cls, *ops, *absent, *tagged, *missing;
    int flexible;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!O!O!OpO", &PyType_Type, &cls, &PyTuple_Type, &ops,
                          &PyTuple_Type, &absent, &tagged, &flexible, &missing))
        return NULL;
    Program *p = (Program *)type->tp_alloc(type, 0);
    if (p == NULL)
        return NULL;
    Py_INCREF(cls);
    p->cls = (PyTypeObject *)cls;
    p->flexible = flexible;
    p->nops = PyTuple_GET_SIZE(ops);
    p->nabsent = PyTuple_GET_SIZE(absent);
    p->ntagged = tagged == Py_None ? 0 : PyTuple_Size(tagged);
    if (p->ntagged < 0)
        goto fail;
    p->ops = PyMem_Calloc(p->nops + 1, sizeof(Op));
    p->absent = PyMem_Calloc(p->nabsent + 1, sizeof(Dflt));
    p->tops = PyMem_Calloc(p->ntagged + 1, sizeof(Op));
    p->tdflt = PyMem_Calloc(p->ntagged + 1, sizeof(Dflt));
    p->tags = PyMem_Calloc(p->ntagged + 1, sizeof(long));
    if (!p->ops || !p->absent || !p->tops || !p->tdflt || !p->tags) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < p->nops; i++)
        if (op_from(&p->ops[i], PyTuple_GET_ITEM(ops, i)) < 0)
            goto fail;
    for (i = 0; i < p->nabsent; i++)
        if (dflt_from(&p->absent[i], PyTuple_GET_ITEM(absent, i), missing) < 0)
            goto fail;
    for (i = 0; i < p->ntagged; i++) {
        /* (tag, op spec, default spec) */
        PyObject *t = PyTuple_GetItem(tagged, i), *opspec, *dspec;
        if (t == NULL || !PyArg_ParseTuple(t, "lOO", &p->tags[i], &opspec, &dspec))
            goto fail;
        if (op_from(&p->tops[i], opspec) < 0 || dflt_from(&p->tdflt[i], dspec, missing) < 0)
            goto fail;
        if (i > 0 && p->tags[i] <= p->tags[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "tagged fields must be sorted by tag");
            goto fail;
        }
    }
    return (PyObject *)p;
fail:
    Py_DECREF(p);
    return NULL;
}

/* -- decoding --------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    Py_ssize_t end;             /* reads stop here (a tagged field's end inside its struct) */
    Py_ssize_t pos;
    PyObject *mv;               /* the caller's memoryview: records fields are slices of it */
} reader;

/* runtime's take(): n bytes must remain */
static int need(reader *r, int64_t n)
{
    if (n < 0 || n > (int64_t)(r->end - r->pos)) {
        PyErr_Format(DecodeError, "length %lld exceeds the %zd bytes remaining", (long long)n,
                     r->end - r->pos);
        return -1;
    }
    return 0;
}

/* primitives.read_uvarint: at most 5 bytes, a value below 2**32 */
static int rd_uvarint(reader *r, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < 5; i++) {
        if (r->pos >= r->end) {
            PyErr_SetString(DecodeError, "truncated varint");
            return -1;
        }
        uint8_t b = r->buf[r->pos++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            if (result > 0xFFFFFFFFu) {
                PyErr_SetString(DecodeError, "varint out of range");
                return -1;
            }
            *out = (int64_t)result;
            return 0;
        }
        shift += 7;
    }
    PyErr_SetString(DecodeError, "varint longer than 5 bytes");
    return -1;
}

static int rd_fixed(reader *r, int size, const char *what)
{
    if (r->end - r->pos < size) {
        PyErr_Format(DecodeError, "%s needs %d bytes, %zd remain", what, size, r->end - r->pos);
        return -1;
    }
    return 0;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static PyObject *decode_program(Program *p, reader *r);

/* a length: compact (uvarint - 1), int16 or int32; < 0 is null */
static int rd_length(reader *r, int flex, int is_short, int64_t *n)
{
    if (flex) {
        if (rd_uvarint(r, n) < 0)
            return -1;
        *n -= 1;
        return 0;
    }
    int size = is_short ? 2 : 4;
    if (rd_fixed(r, size, "length") < 0)
        return -1;
    *n = is_short ? (int16_t)be(r->buf + r->pos, 2) : (int32_t)be(r->buf + r->pos, 4);
    r->pos += size;
    return 0;
}

static const int FIXED_SIZE[] = {0, 1, 1, 2, 2, 4, 4, 8, 8};

static PyObject *rd_fixed_value(reader *r, int kind)
{
    int size = FIXED_SIZE[kind];
    if (rd_fixed(r, size, "fixed-width field") < 0)
        return NULL;
    const uint8_t *q = r->buf + r->pos;
    r->pos += size;
    switch (kind) {
    case K_BOOL: return PyBool_FromLong(q[0] != 0);
    case K_INT8: return PyLong_FromLong((int8_t)q[0]);
    case K_INT16: return PyLong_FromLong((int16_t)be(q, 2));
    case K_UINT16: return PyLong_FromLong((long)be(q, 2));
    case K_INT32: return PyLong_FromLong((int32_t)be(q, 4));
    case K_UINT32: return PyLong_FromUnsignedLong((unsigned long)be(q, 4));
    case K_INT64: return PyLong_FromLongLong((int64_t)be(q, 8));
    default: return PyFloat_FromDouble(PyFloat_Unpack8((const char *)q, 0));
    }
}

static PyObject *decode_value(Op *op, reader *r);

static PyObject *decode_array(Op *op, reader *r)
{
    int64_t n;
    if (rd_length(r, op->flex, 0, &n) < 0)
        return NULL;
    if (n < 0) {
        if (op->nullable)
            Py_RETURN_NONE;
        return PyErr_Format(DecodeError, "null %U", op->what);
    }
    int kind = op->elem->kind;
    if (kind <= K_FLOAT64) {
        if (need(r, n * FIXED_SIZE[kind]) < 0)
            return NULL;
    } else if (need(r, n) < 0) {     /* every element takes at least one byte */
        return NULL;
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
        PyObject *x = decode_value(op->elem, r);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

static PyObject *decode_value(Op *op, reader *r)
{
    int64_t n;
    int kind = op->kind;
    if (kind <= K_FLOAT64)
        return rd_fixed_value(r, kind);
    switch (kind) {
    case K_STRING:
    case K_BYTES:
    case K_RECORDS:
        if (rd_length(r, op->flex, kind == K_STRING, &n) < 0)
            return NULL;
        if (n < 0) {
            if (op->nullable)
                Py_RETURN_NONE;
            return PyErr_Format(DecodeError, "null %U", op->what);
        }
        if (need(r, n) < 0)
            return NULL;
        {
            Py_ssize_t at = r->pos;
            r->pos += (Py_ssize_t)n;
            if (kind == K_STRING)
                return PyUnicode_DecodeUTF8((const char *)r->buf + at, (Py_ssize_t)n, NULL);
            if (kind == K_BYTES)
                return PyBytes_FromStringAndSize((const char *)r->buf + at, (Py_ssize_t)n);
            return PySequence_GetSlice(r->mv, at, at + (Py_ssize_t)n);
        }
    case K_UUID: {
        if (need(r, 16) < 0)
            return NULL;
        PyObject *raw = PyBytes_FromStringAndSize((const char *)r->buf + r->pos, 16);
        if (raw == NULL)
            return NULL;
        r->pos += 16;
        PyObject *u = PyObject_CallOneArg(uuid_from_fn, raw);
        Py_DECREF(raw);
        return u;
    }
    case K_STRUCT:
        if (op->nullable) {
            if (rd_fixed(r, 1, "struct presence marker") < 0)
                return NULL;
            if ((int8_t)r->buf[r->pos++] < 0)
                Py_RETURN_NONE;
        }
        return decode_program((Program *)op->sub, r);
    default:
        return decode_array(op, r);
    }
}

static int set_default(PyObject *o, Dflt *d)
{
    PyObject *v = d->value != NULL ? (Py_INCREF(d->value), d->value)
                                   : PyObject_CallNoArgs(d->factory);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(o, d->name, v);
    Py_DECREF(v);
    return rc;
}

static int decode_tagged(Program *p, PyObject *o, reader *r)
{
    int64_t nt, tag, size, last = -1;
    for (Py_ssize_t i = 0; i < p->ntagged; i++)
        if (set_default(o, &p->tdflt[i]) < 0)
            return -1;
    if (PyObject_SetAttr(o, str_unknown_tagged, Py_None) < 0)
        return -1;
    if (rd_uvarint(r, &nt) < 0 || need(r, nt * 2) < 0)
        return -1;
    PyObject *unknown = NULL;
    for (int64_t k = 0; k < nt; k++) {
        if (rd_uvarint(r, &tag) < 0 || rd_uvarint(r, &size) < 0 || need(r, size) < 0)
            goto fail;
        Py_ssize_t end = r->pos + (Py_ssize_t)size;
        if (tag <= last) {
            PyErr_SetString(DecodeError, "tagged fields out of order");
            goto fail;
        }
        last = tag;
        Py_ssize_t i = 0;
        while (i < p->ntagged && p->tags[i] != tag)
            i++;
        if (i < p->ntagged) {
            reader sub = {r->buf, end, r->pos, r->mv};
            PyObject *v = decode_value(&p->tops[i], &sub);
            if (v == NULL)
                goto fail;
            int rc = PyObject_SetAttr(o, p->tops[i].name, v);
            Py_DECREF(v);
            if (rc < 0)
                goto fail;
        } else {
            if (unknown == NULL && (unknown = PyList_New(0)) == NULL)
                goto fail;
            PyObject *item = Py_BuildValue("(Ly#)", (long long)tag, r->buf + r->pos,
                                           (Py_ssize_t)size);
            if (item == NULL || PyList_Append(unknown, item) < 0) {
                Py_XDECREF(item);
                goto fail;
            }
            Py_DECREF(item);
        }
        r->pos = end;
    }
    if (unknown != NULL) {
        int rc = PyObject_SetAttr(o, str_unknown_tagged, unknown);
        Py_DECREF(unknown);
        return rc;
    }
    return 0;
fail:
    Py_XDECREF(unknown);
    return -1;
}

static PyObject *decode_program(Program *p, reader *r)
{
    PyObject *o = PyBaseObject_Type.tp_new(p->cls, empty_tuple, NULL);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < p->nops; i++) {
        PyObject *v = decode_value(&p->ops[i], r);
        if (v == NULL)
            goto fail;
        int rc = PyObject_SetAttr(o, p->ops[i].name, v);
        Py_DECREF(v);
        if (rc < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < p->nabsent; i++)
        if (set_default(o, &p->absent[i]) < 0)
            goto fail;
    if (p->flexible) {
        if (decode_tagged(p, o, r) < 0)
            goto fail;
    } else if (PyObject_SetAttr(o, str_unknown_tagged, Py_None) < 0) {
        goto fail;
    }
    return o;
fail:
    Py_DECREF(o);
    return NULL;
}

static PyObject *Program_decode(Program *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode(mv, pos)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || pos > view.len) {
        PyErr_Format(DecodeError, "position %zd outside a buffer of %zd bytes", pos, view.len);
    } else {
        reader r = {(const uint8_t *)view.buf, view.len, pos, args[0]};
        PyObject *o = decode_program(p, &r);
        if (o != NULL)
            result = Py_BuildValue("(Nn)", o, r.pos);
    }
    PyBuffer_Release(&view);
    return result;
}

/* -- encoding --------------------------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    PyObject *opaque;           /* records objects with a size: (position, object) */
    Py_ssize_t base;            /* bytes already in the caller's bytearray */
} writer;

static int w_room(writer *w, Py_ssize_t n)
{
    if (w->len + n <= w->cap)
        return 0;
    Py_ssize_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n)
        cap *= 2;
    char *q = PyMem_Realloc(w->p, cap);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->p = q;
    w->cap = cap;
    return 0;
}

static int w_put(writer *w, const void *data, Py_ssize_t n)
{
    if (w_room(w, n) < 0)
        return -1;
    memcpy(w->p + w->len, data, n);
    w->len += n;
    return 0;
}

static int w_be(writer *w, uint64_t v, int n)
{
    uint8_t b[8];
    for (int i = n - 1; i >= 0; i--) {
        b[i] = (uint8_t)v;
        v >>= 8;
    }
    return w_put(w, b, n);
}

/* primitives.uvarint_bytes */
static int w_uvarint(writer *w, int64_t value)
{
    if (value < 0) {
        PyErr_SetString(PyExc_ValueError, "unsigned varint cannot be negative");
        return -1;
    }
    uint8_t b[10];
    int n = 0;
    uint64_t v = (uint64_t)value;
    while (v >= 0x80) {
        b[n++] = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    return w_put(w, b, n);
}

/* struct.pack's integer rules: an integer (or __index__) within the format's range */
static int w_int(writer *w, PyObject *v, int kind)
{
    static const long long lo[] = {0, 0, -128, -32768, 0, -2147483648LL, 0, 0};
    static const long long hi[] = {0, 0, 127, 32767, 65535, 2147483647LL, 4294967295LL, 0};
    PyObject *i = PyNumber_Index(v);
    if (i == NULL)
        return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || (kind != K_INT64 && (x < lo[kind] || x > hi[kind]))) {
        PyErr_SetString(PyExc_OverflowError, "integer out of range for its field");
        return -1;
    }
    return w_be(w, (uint64_t)x, FIXED_SIZE[kind]);
}

static int w_length(writer *w, int flex, int is_short, Py_ssize_t n)
{
    if (flex)
        return w_uvarint(w, (int64_t)n + 1);
    if (n > (is_short ? 32767 : 2147483647LL)) {
        PyErr_SetString(PyExc_OverflowError, "length out of range for its field");
        return -1;
    }
    return w_be(w, (uint64_t)n, is_short ? 2 : 4);
}

static int w_null(writer *w, int flex, int is_short)
{
    if (flex)
        return w_put(w, "\x00", 1);
    return w_put(w, "\xff\xff\xff\xff", is_short ? 2 : 4);
}

static int encode_program(Program *p, PyObject *o, writer *w);
static int encode_value(Op *op, PyObject *v, writer *w);

static int encode_buffer(writer *w, PyObject *v, int flex)
{
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = w_length(w, flex, 0, view.len);
    if (rc == 0)
        rc = w_put(w, view.buf, view.len);
    PyBuffer_Release(&view);
    return rc;
}

/* runtime._encode_records */
static int encode_records(Op *op, PyObject *v, writer *w)
{
    if (v == Py_None) {
        if (!op->nullable) {
            PyErr_SetString(EncodeError, "records field is not nullable here");
            return -1;
        }
        return w_null(w, op->flex, 0);
    }
    if (PyBytes_Check(v) || PyByteArray_Check(v) || PyMemoryView_Check(v))
        return encode_buffer(w, v, op->flex);
    PyObject *size_obj = PyObject_GetAttr(v, str_size);
    if (size_obj == NULL)
        return -1;
    Py_ssize_t size = PyLong_AsSsize_t(size_obj);
    Py_DECREF(size_obj);
    if (size == -1 && PyErr_Occurred())
        return -1;
    if (w->opaque == NULL || w->opaque == Py_None) {
        PyErr_SetString(EncodeError, "an opaque records object needs encode_chunks()");
        return -1;
    }
    if (w_length(w, op->flex, 0, size) < 0)
        return -1;
    PyObject *item = Py_BuildValue("(nO)", w->base + w->len, v);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(w->opaque, item);
    Py_DECREF(item);
    return rc;
}

static int encode_array(Op *op, PyObject *v, writer *w)
{
    if (v == Py_None) {
        if (op->nullable)
            return w_null(w, op->flex, 0);
        if (!op->lenient) {
            PyErr_SetObject(EncodeError, op->not_nullable);
            return -1;
        }
        return w_length(w, op->flex, 0, 0);     /* lenient (responses): empty */
    }
    PyObject *seq = PySequence_Fast(v, "an array field needs a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = w_length(w, op->flex, 0, n);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
        rc = encode_value(op->elem, items[i], w);
    Py_DECREF(seq);
    return rc;
}

static int encode_value(Op *op, PyObject *v, writer *w)
{
    int kind = op->kind;
    switch (kind) {
    case K_BOOL: {
        int t = PyObject_IsTrue(v);
        if (t < 0)
            return -1;
        return w_put(w, t ? "\x01" : "\x00", 1);
    }
    case K_INT8: case K_INT16: case K_UINT16: case K_INT32: case K_UINT32: case K_INT64:
        return w_int(w, v, kind);
    case K_FLOAT64: {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        char b[8];
        if (PyFloat_Pack8(d, b, 0) < 0)
            return -1;
        return w_put(w, b, 8);
    }
    case K_STRING: {
        if (v == Py_None && op->lenient && !op->nullable)
            return w_length(w, op->flex, 1, 0);      /* lenient: a null goes out empty */
        if (v == Py_None) {
            if (op->nullable)
                return w_null(w, op->flex, 1);
            PyErr_SetObject(EncodeError, op->not_nullable);
            return -1;
        }
        if (!PyUnicode_Check(v)) {
            PyErr_Format(PyExc_TypeError, "a string field needs str, not %.100s",
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s == NULL || w_length(w, op->flex, 1, n) < 0)
            return -1;
        return w_put(w, s, n);
    }
    case K_BYTES:
        if (v == Py_None && op->lenient && !op->nullable)
            return w_length(w, op->flex, 0, 0);
        if (v == Py_None) {
            if (op->nullable)
                return w_null(w, op->flex, 0);
            PyErr_SetObject(EncodeError, op->not_nullable);
            return -1;
        }
        return encode_buffer(w, v, op->flex);
    case K_RECORDS:
        return encode_records(op, v, w);
    case K_UUID: {
        PyObject *raw = PyObject_CallOneArg(uuid_bytes_fn, v);
        if (raw == NULL)
            return -1;
        int rc;
        if (PyBytes_Check(raw)) {
            rc = w_put(w, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw));
        } else {
            PyErr_SetString(PyExc_TypeError, "uuid_bytes returned no bytes");
            rc = -1;
        }
        Py_DECREF(raw);
        return rc;
    }
    case K_STRUCT:
        if (op->nullable) {
            if (v == Py_None)
                return w_put(w, "\xff", 1);
            if (w_put(w, "\x01", 1) < 0)
                return -1;
        }
        return encode_program((Program *)op->sub, v, w);
    default:
        return encode_array(op, v, w);
    }
}

/* Struct.__eq__ against the default instance, field by field (as runtime's genexpr) */
static int struct_is_default(Dflt *d, PyObject *v)
{
    Py_ssize_t n = PyTuple_GET_SIZE(d->names);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(d->names, i);
        PyObject *a = PyObject_GetAttr(v, name);
        if (a == NULL)
            return -1;
        PyObject *b = PyObject_GetAttr(d->proto, name);
        if (b == NULL) {
            Py_DECREF(a);
            return -1;
        }
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        Py_DECREF(a);
        Py_DECREF(b);
        if (eq <= 0)
            return eq;
    }
    return 1;
}

/* runtime._is_default: 1, 0, or -1 (error). Tagged struct fields (three per partition of a
 * follower fetch answer) are compared here rather than through a Python call each. */
static int is_default(Dflt *d, PyObject *v)
{
    if (d->value != NULL) {
        if (v == d->value)
            return 1;
        if (v == Py_None)
            return d->value == Py_None;
        return PyObject_RichCompareBool(v, d->value, Py_EQ);
    }
    if (d->proto != NULL && Py_TYPE(v) == Py_TYPE(d->proto))
        return struct_is_default(d, v);
    if (d->is_array && v != Py_None && PyList_CheckExact(v))
        return PyList_GET_SIZE(v) == 0;
    PyObject *r = PyObject_CallFunctionObjArgs(is_default_fn, d->field, v, NULL);
    if (r == NULL)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static void w_free(writer *w)
{
    PyMem_Free(w->p);
    w->p = NULL;
    w->len = w->cap = 0;
}

/* the tagged-field block: count, then (tag, size, value) by tag, unknown tags kept */
static int encode_tagged(Program *p, PyObject *o, writer *w)
{
    writer parts[64];
    long tags[64];
    Py_ssize_t n = 0, i;
    int rc = -1;
    PyObject *unknown = NULL, *all = NULL, *sorted = NULL;
    if (p->ntagged > 64) {
        PyErr_SetString(PyExc_ValueError, "more than 64 tagged fields");
        return -1;
    }
    for (i = 0; i < p->ntagged; i++) {
        PyObject *v = PyObject_GetAttr(o, p->tops[i].name);
        if (v == NULL)
            goto done;
        int dflt = is_default(&p->tdflt[i], v);
        if (dflt == 0) {
            writer part = {NULL, 0, 0, NULL, 0};
            parts[n] = part;
            tags[n] = p->tags[i];
            n++;
            if (encode_value(&p->tops[i], v, &parts[n - 1]) < 0)
                dflt = -1;
        }
        Py_DECREF(v);
        if (dflt < 0)
            goto done;
    }
    unknown = PyObject_GetAttr(o, str_unknown_tagged);
    if (unknown == NULL)
        goto done;
    int have_unknown = PyObject_IsTrue(unknown);
    if (have_unknown < 0)
        goto done;
    if (!have_unknown) {
        if (w_uvarint(w, n) < 0)
            goto done;
        for (i = 0; i < n; i++)
            if (w_uvarint(w, tags[i]) < 0 || w_uvarint(w, parts[i].len) < 0 ||
                w_put(w, parts[i].p, parts[i].len) < 0)
                goto done;
        rc = 0;
        goto done;
    }
    /* rare: unknown tags to merge; runtime's order (a stable sort by tag) via sort_tagged */
    all = PyList_New(0);
    if (all == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(ly#)", tags[i], parts[i].p, parts[i].len);
        if (item == NULL || PyList_Append(all, item) < 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    sorted = PyObject_CallFunctionObjArgs(sort_tagged_fn, all, unknown, NULL);
    if (sorted == NULL)
        goto done;
    PyObject *seq = PySequence_Fast(sorted, "sort_tagged returns a sequence");
    if (seq == NULL)
        goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    rc = w_uvarint(w, m);
    for (i = 0; rc == 0 && i < m; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *data;
        long long tag;
        if (!PyArg_ParseTuple(item, "LO", &tag, &data)) {
            rc = -1;
            break;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            rc = -1;
            break;
        }
        rc = w_uvarint(w, tag);
        if (rc == 0)
            rc = w_uvarint(w, view.len);
        if (rc == 0)
            rc = w_put(w, view.buf, view.len);
        PyBuffer_Release(&view);
    }
    Py_DECREF(seq);
done:
    for (i = 0; i < n; i++)
        w_free(&parts[i]);
    Py_XDECREF(unknown);
    Py_XDECREF(all);
    Py_XDECREF(sorted);
    return rc;
}

static int encode_program(Program *p, PyObject *o, writer *w)
{
    Py_ssize_t i;
    for (i = 0; i < p->nabsent; i++) {
        Dflt *d = &p->absent[i];
        if (d->error == NULL)
            continue;
        PyObject *v = PyObject_GetAttr(o, d->name);
        if (v == NULL)
            return -1;
        int dflt = is_default(d, v);
        Py_DECREF(v);
        if (dflt < 0)
            return -1;
        if (!dflt) {
            PyErr_SetObject(EncodeError, d->error);
            return -1;
        }
    }
    for (i = 0; i < p->nops; i++) {
        PyObject *v = PyObject_GetAttr(o, p->ops[i].name);
        if (v == NULL)
            return -1;
        int rc = encode_value(&p->ops[i], v, w);
        Py_DECREF(v);
        if (rc < 0)
            return -1;
    }
    return p->flexible ? encode_tagged(p, o, w) : 0;
}

static PyObject *Program_encode(Program *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyByteArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode(obj, out: bytearray, opaque)");
        return NULL;
    }
    PyObject *out = args[1];
    Py_ssize_t base = PyByteArray_GET_SIZE(out);
    writer w = {NULL, 0, 0, args[2], base};
    int rc = encode_program(p, args[0], &w);
    if (rc == 0 && w.len > 0) {
        rc = PyByteArray_Resize(out, base + w.len);
        if (rc == 0)
            memcpy(PyByteArray_AS_STRING(out) + base, w.p, w.len);
    }
    w_free(&w);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* -- module ----------------------------------------------------------------------------------- */

static PyMethodDef Program_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Program_decode, METH_FASTCALL,
     "decode(mv, pos) -> (obj, end): runtime's compiled dec()"},
    {"encode", (PyCFunction)(void (*)(void))Program_encode, METH_FASTCALL,
     "encode(obj, out, opaque) -> None: runtime's compiled enc()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wire.messages._codec.Program",
    .tp_basicsize = sizeof(Program),
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One struct's encode and decode at one version (wire/messages/program.py).",
    .tp_methods = Program_methods,
    .tp_new = Program_new,
};

static PyObject *configure(PyObject *self, PyObject *args)
{
    PyObject *de, *ee, *isd, *uf, *ub, *st;
    if (!PyArg_ParseTuple(args, "OOOOOO", &de, &ee, &isd, &uf, &ub, &st))
        return NULL;
    Py_XSETREF(DecodeError, (Py_INCREF(de), de));
    Py_XSETREF(EncodeError, (Py_INCREF(ee), ee));
    Py_XSETREF(is_default_fn, (Py_INCREF(isd), isd));
    Py_XSETREF(uuid_from_fn, (Py_INCREF(uf), uf));
    Py_XSETREF(uuid_bytes_fn, (Py_INCREF(ub), ub));
    Py_XSETREF(sort_tagged_fn, (Py_INCREF(st), st));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(DecodeError, EncodeError, is_default, uuid_from, uuid_bytes, sort_tagged)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "wire.messages._codec",
    "C walker for the message codec programs of wire/messages/program.py.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__codec(void)
{
    if (PyType_Ready(&ProgramType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    str_unknown_tagged = PyUnicode_InternFromString("_unknown_tagged");
    str_size = PyUnicode_InternFromString("size");
    if (empty_tuple == NULL || str_unknown_tagged == NULL || str_size == NULL)
        return NULL;
    Py_INCREF(&ProgramType);
    if (PyModule_AddObject(m, "Program", (PyObject *)&ProgramType) < 0 ||
        PyModule_AddIntConstant(m, "VERSION", CODEC_VERSION) < 0)
        return NULL;
    return m;
}
