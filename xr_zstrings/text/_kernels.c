/*
 * xr_zstrings.text._kernels: the string hot paths in C.
 *
 * Decoding builds numpy StringDType arrays directly (numpy 2's NpyString C API) from
 *   - fixed-width NUL padded UTF-8 (NCZarr NC_STRING |Sn, NC_CHAR rows): a value ends at its first
 *     NUL (netcdf-c's rule), then UTF-8 is validated (RFC 3629) under a policy;
 *   - offsets + data (Arrow layout, zarrs.vlen, any VlenChunk);
 *   - the numcodecs vlen-utf8 layout (u32 count, then u32 length + bytes per item).
 * Encoding turns StringDType or object-of-str arrays into UTF-8 lengths (utf8_scan), NUL padded
 * |Sn rows (fill_fixed_bounded), packed offsets + data (utf8_pack, for every v3 layout) and
 * numcodecs vlen-utf8 chunks (vlen_utf8_from_offsets); T_to_objects is astype(object).
 * Arrow: vlen-utf8 chunks and fixed-width rows become (int64 offsets, compacted data) in one pass
 * (vlen_to_offsets, fixed_to_offsets), UTF-8 validated on the way, UTF-32 rows become UTF-8
 * (utf32_to_offsets); offsets_check checks given offsets and their UTF-8 in one pass.
 *
 * Policies: 0 "strict", 1 "drop" (an incomplete-but-valid-so-far UTF-8 sequence at the very end
 * of a value is dropped, anything else invalid is bad), 2 "replace".  Under "drop" the decoders
 * also report how many output values were shortened and the first one's position (an optional
 * int64 `stats` array), so the Python layer can warn: nothing changes without a word.  The kernels never build
 * error messages or replacement strings: they return the positions of bad values and the Python
 * layer (xr_zstrings.text.fixed / vlen) handles those exactly as its pure-Python fallback does, so
 * both paths give identical results and identical errors.
 *
 * Every decoder works in two phases: (1) scan/validate into a small per-value length table with
 * the GIL released and no lock held; (2) pack the values into the output array holding its
 * StringDType allocator lock (still without the GIL).  Chunks therefore decode concurrently on
 * threads even when they write into one output array.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#define NPY_TARGET_VERSION NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define POLICY_STRICT 0
#define POLICY_DROP 1
#define POLICY_REPLACE 2

/* ------------------------------------------------------------------------------------------
 * UTF-8
 * ---------------------------------------------------------------------------------------- */

/* UTF-8 validation as a table-driven automaton (RFC 3629: no overlongs, no surrogates, nothing
 * above U+10FFFF), so multibyte text costs no data-dependent branches.  States: */
enum { U_OK, U_BAD, U_C1, U_C2, U_C3, U_E0, U_ED, U_F0, U_F4, U_NSTATES };
static uint8_t utf8_next[U_NSTATES][256];

static void
utf8_table_init(void)
{
    for (int st = 0; st < U_NSTATES; st++) {
        for (int c = 0; c < 256; c++) {
            int cont = c >= 0x80 && c <= 0xBF;
            uint8_t nx = U_BAD;
            switch (st) {
            case U_OK:
                if (c < 0x80) nx = U_OK;
                else if (c >= 0xC2 && c <= 0xDF) nx = U_C1;
                else if (c == 0xE0) nx = U_E0;
                else if (c == 0xED) nx = U_ED;
                else if (c >= 0xE1 && c <= 0xEF) nx = U_C2;
                else if (c == 0xF0) nx = U_F0;
                else if (c >= 0xF1 && c <= 0xF3) nx = U_C3;
                else if (c == 0xF4) nx = U_F4;
                break;
            case U_C1: nx = cont ? U_OK : U_BAD; break;
            case U_C2: nx = cont ? U_C1 : U_BAD; break;
            case U_C3: nx = cont ? U_C2 : U_BAD; break;
            case U_E0: nx = (c >= 0xA0 && c <= 0xBF) ? U_C1 : U_BAD; break;
            case U_ED: nx = (c >= 0x80 && c <= 0x9F) ? U_C1 : U_BAD; break;
            case U_F0: nx = (c >= 0x90 && c <= 0xBF) ? U_C2 : U_BAD; break;
            case U_F4: nx = (c >= 0x80 && c <= 0x8F) ? U_C2 : U_BAD; break;
            default: nx = U_BAD;
            }
            utf8_next[st][c] = nx;
        }
    }
}

/* 0 valid; 1 invalid; 2 ends with an incomplete but so-far-valid sequence starting at *tail
 * (what Python calls "unexpected end of data" when it is the first error). */
static inline int
utf8_check(const uint8_t *s, Py_ssize_t n, Py_ssize_t *tail)
{
    unsigned st = U_OK;
    Py_ssize_t last = 0, i = 0;
    while (i < n) {
        if (st == U_OK) {
            /* between characters: skip ASCII a word at a time, then jump straight to the first
             * byte >= 0x80 (only multibyte sequences go through the automaton) */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                uint64_t h = w & 0x8080808080808080ULL;
                if (h) {
                    i += __builtin_ctzll(h) >> 3;
                    break;
                }
                i += 8;
            }
#endif
            while (i < n && s[i] < 0x80) i++;
            if (i >= n) break;
            last = i;
        }
        st = utf8_next[st][s[i]];
        i++;
        if (st == U_BAD) return 1;
    }
    if (st == U_OK) return 0;
    *tail = last;
    return 2;
}

/* Fixed-width row of n bytes: the length before its first NUL (n if none), and whether any of
 * those bytes is >= 0x80 (so UTF-8 validation is needed). Word at a time on little-endian GCC/Clang. */
static inline Py_ssize_t
row_first_nul(const uint8_t *p, Py_ssize_t n, int *non_ascii)
{
#if defined(__SSE2__) && defined(__GNUC__)
    /* 64 bytes at a time into bitmaps of NUL bytes and high bytes: no data-dependent branch
     * per word, so random value lengths cost no branch mispredictions */
    const __m128i zero = _mm_setzero_si128();
    int na = 0;
    for (Py_ssize_t base = 0; base < n; base += 64) {
        Py_ssize_t m = n - base < 64 ? n - base : 64;
        uint64_t zm = 0, hm = 0;
        Py_ssize_t j = 0;
        for (; j + 16 <= m; j += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + base + j));
            zm |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero)) << j;
            hm |= (uint64_t)(uint32_t)_mm_movemask_epi8(v) << j;
        }
        if (j < m && m >= 16) {
            /* the last (partial) 16 bytes as one load overlapping the previous one: the bytes
             * seen twice set the same bits */
            __m128i v = _mm_loadu_si128((const __m128i *)(p + base + m - 16));
            zm |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero)) << (m - 16);
            hm |= (uint64_t)(uint32_t)_mm_movemask_epi8(v) << (m - 16);
            j = m;
        }
        for (; j < m; j++) {
            uint8_t c = p[base + j];
            zm |= (uint64_t)(c == 0) << j;
            hm |= (uint64_t)(c >> 7) << j;
        }
        if (zm) {
            int b = __builtin_ctzll(zm);
            na |= (hm & ((1ULL << b) - 1)) != 0;
            *non_ascii = na;
            return base + b;
        }
        na |= hm != 0;
    }
    *non_ascii = na;
    return n;
#elif defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t hi = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t z = (w - ones) & ~w & highs; /* lowest set bit marks the first NUL exactly */
        if (z) {
            int b = __builtin_ctzll(z) >> 3;
            if (b) hi |= w & ((1ULL << (8 * b)) - 1);
            *non_ascii = (hi & highs) != 0;
            return i + b;
        }
        hi |= w;
    }
    int na = (hi & highs) != 0;
    for (; i < n; i++) {
        if (!p[i]) break;
        na |= p[i] >= 0x80;
    }
    *non_ascii = na;
    return i;
#else
    const uint8_t *z = (const uint8_t *)memchr(p, 0, (size_t)n);
    Py_ssize_t L = z ? (Py_ssize_t)(z - p) : n;
    int na = 0;
    for (Py_ssize_t i = 0; i < L; i++) na |= p[i] >= 0x80;
    *non_ascii = na;
    return L;
#endif
}

/* Whether bytes p[0:n] include one >= 0x80.  `end` is the end of the readable buffer: whole
 * words are read (and masked) past n when they stay inside it, so short values cost no per-byte
 * loop. */
static inline int
span_non_ascii(const uint8_t *p, Py_ssize_t n, const uint8_t *end)
{
    const uint64_t highs = 0x8080808080808080ULL;
    uint64_t acc = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    Py_ssize_t r = n - i;
    if (r) {
        if (p + i + 8 <= end) {
            uint64_t w;
            memcpy(&w, p + i, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            acc |= w & ~(~0ULL >> (8 * r));
#else
            acc |= w & ((1ULL << (8 * r)) - 1);
#endif
        }
        else {
            for (; i < n; i++) acc |= p[i];
        }
    }
    return (acc & highs) != 0;
}

/* Length to keep for a value of n bytes under policy, or -1 if the value is bad. */
static inline Py_ssize_t
keep_len(const uint8_t *s, Py_ssize_t n, int policy)
{
    Py_ssize_t tail = 0;
    int r = utf8_check(s, n, &tail);
    if (r == 0) return n;
    if (r == 2 && policy == POLICY_DROP) return tail;
    return -1;
}

/* ------------------------------------------------------------------------------------------
 * output iteration: C order over an N-d StringDType array of any strides
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    int nd;
    npy_intp shape[NPY_MAXDIMS];
    npy_intp strides[NPY_MAXDIMS];
    npy_intp idx[NPY_MAXDIMS];
    char *base;
    npy_intp inner, inner_stride, outer_total;
} out_iter;

static void
out_iter_init(out_iter *it, PyArrayObject *out)
{
    int nd = PyArray_NDIM(out);
    it->base = PyArray_BYTES(out);
    if (nd == 0) {
        it->nd = 0;
        it->inner = 1;
        it->inner_stride = 0;
        it->outer_total = 1;
        return;
    }
    it->nd = nd;
    it->outer_total = 1;
    for (int d = 0; d < nd; d++) {
        it->shape[d] = PyArray_DIM(out, d);
        it->strides[d] = PyArray_STRIDE(out, d);
        it->idx[d] = 0;
        if (d < nd - 1) it->outer_total *= it->shape[d];
    }
    it->inner = it->shape[nd - 1];
    it->inner_stride = it->strides[nd - 1];
}

/* pointer to the k-th element in C order, computed incrementally by the callers' loops */
#define OUT_LOOP_BEGIN(it)                                                              \
    {                                                                                  \
        npy_intp _k = 0;                                                               \
        char *_row = (it).base;                                                        \
        for (npy_intp _o = 0; _o < (it).outer_total; _o++) {                           \
            for (npy_intp _j = 0; _j < (it).inner; _j++, _k++) {                       \
                npy_packed_static_string *dst =                                        \
                    (npy_packed_static_string *)(_row + _j * (it).inner_stride);       \
                npy_intp k = _k;

#define OUT_LOOP_END(it)                                                                \
            }                                                                          \
            for (int _d = (it).nd - 2; _d >= 0; _d--) {                                \
                (it).idx[_d]++;                                                        \
                _row += (it).strides[_d];                                              \
                if ((it).idx[_d] < (it).shape[_d]) break;                              \
                _row -= (it).strides[_d] * (it).shape[_d];                             \
                (it).idx[_d] = 0;                                                      \
            }                                                                          \
        }                                                                              \
    }

static int
check_out(PyObject *obj, PyArrayObject **out)
{
    if (!PyArray_Check(obj) || PyArray_TYPE((PyArrayObject *)obj) != NPY_VSTRING) {
        PyErr_SetString(PyExc_TypeError, "out must be a numpy StringDType array");
        return -1;
    }
    if (!PyArray_ISWRITEABLE((PyArrayObject *)obj)) {
        PyErr_SetString(PyExc_ValueError, "out must be writeable");
        return -1;
    }
    *out = (PyArrayObject *)obj;
    return 0;
}

/* sel: None or a 1-D C-contiguous int64 array with one source index per output element */
static int
get_sel(PyObject *obj, npy_intp size, npy_intp n_src, const int64_t **sel)
{
    *sel = NULL;
    if (obj == Py_None) {
        if (size != n_src) {
            PyErr_Format(PyExc_ValueError, "out has %zd elements but the source %zd", (Py_ssize_t)size,
                         (Py_ssize_t)n_src);
            return -1;
        }
        return 0;
    }
    if (!PyArray_Check(obj) || PyArray_TYPE((PyArrayObject *)obj) != NPY_INT64 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj) || !PyArray_ISALIGNED((PyArrayObject *)obj) ||
        PyArray_SIZE((PyArrayObject *)obj) != size) {
        PyErr_SetString(PyExc_TypeError, "sel must be an aligned C-contiguous int64 array of out.size");
        return -1;
    }
    const int64_t *s = (const int64_t *)PyArray_DATA((PyArrayObject *)obj);
    for (npy_intp k = 0; k < size; k++) {
        if (s[k] < 0 || s[k] >= n_src) {
            PyErr_SetString(PyExc_IndexError, "sel index out of range");
            return -1;
        }
    }
    *sel = s;
    return 0;
}

/* Phase 2 shared by every decoder: pack value k = (start[src], len[src]) into the output. */
typedef struct {
    const uint8_t *data;
    const int64_t *start; /* per source element: byte offset into data (NULL: src * stride) */
    int64_t stride;
    const int32_t *len;   /* per source element: bytes to keep, -1 = bad (left as "") */
    npy_intp n_src;       /* number of source elements (sel is re-checked against it) */
} spans;

static int
pack_all(PyArrayObject *out, const spans *sp, const int64_t *sel)
{
    out_iter it;
    out_iter_init(&it, out);
    int failed = 0;
    npy_string_allocator *alloc = NpyString_acquire_allocator(
        (const PyArray_StringDTypeObject *)PyArray_DESCR(out));
    OUT_LOOP_BEGIN(it)
        npy_intp src = sel ? (npy_intp)sel[k] : k;
        if (src < 0 || src >= sp->n_src) { /* sel changed since get_sel (another thread) */
            failed = 2;
            goto done;
        }
        int32_t L = sp->len[src];
        if (L < 0) L = 0;
        int64_t off = sp->start ? sp->start[src] : (int64_t)src * sp->stride;
        if (NpyString_pack(alloc, dst, (const char *)sp->data + off, (size_t)L) < 0) {
            failed = 1;
            goto done;
        }
    OUT_LOOP_END(it)
done:
    NpyString_release_allocator(alloc);
    return failed ? -failed : 0;
}

/* Python error for pack_all's result r (< 0); call with the GIL held */
static void
pack_error(int r)
{
    if (r == -2) PyErr_SetString(PyExc_IndexError, "sel index out of range (sel changed during the call)");
    else PyErr_NoMemory();
}

/* positions k (output order) whose source value is bad, as an intp array (only the first one
 * when first_only) */
static PyObject *
bad_positions(PyArrayObject *out, const int32_t *len, const int64_t *sel, npy_intp n_src, npy_intp n_bad_src,
              int first_only)
{
    npy_intp size = PyArray_SIZE(out);
    npy_intp cap = 0;
    if (n_bad_src > 0) {
        for (npy_intp k = 0; k < size; k++) {
            npy_intp src = sel ? (npy_intp)sel[k] : k;
            if (src < 0 || src >= n_src) goto changed;
            if (len[src] < 0) {
                cap++;
                if (first_only) break;
            }
        }
    }
    npy_intp dims[1] = {cap};
    PyArrayObject *res = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INTP);
    if (res == NULL) return NULL;
    npy_intp *r = (npy_intp *)PyArray_DATA(res);
    npy_intp m = 0;
    for (npy_intp k = 0; k < size && m < cap; k++) {
        npy_intp src = sel ? (npy_intp)sel[k] : k;
        if (src < 0 || src >= n_src) {
            Py_DECREF(res);
            goto changed;
        }
        if (len[src] < 0) r[m++] = k;
    }
    return (PyObject *)res;
changed:
    PyErr_SetString(PyExc_IndexError, "sel index out of range (sel changed during the call)");
    return NULL;
}


/* ------------------------------------------------------------------------------------------
 * drop accounting: which values lost an incomplete trailing character under "drop"
 * ---------------------------------------------------------------------------------------- */

/* remember that source value i was shortened (the flag table is allocated on the first drop, so
 * valid data never pays for it); -1 when out of memory. Safe without the GIL. */
static inline int
mark_drop(uint8_t **dropped, npy_intp n_src, npy_intp i)
{
    if (!*dropped) {
        *dropped = (uint8_t *)PyMem_RawCalloc((size_t)(n_src ? n_src : 1), 1);
        if (!*dropped) return -1;
    }
    (*dropped)[i] = 1;
    return 0;
}

/* stats: None, or a writeable C-contiguous int64 array of >= 2 (6 for the source counts) */
static int
check_stats(PyObject *obj)
{
    if (obj == Py_None) return 0;
    if (!PyArray_Check(obj) || PyArray_TYPE((PyArrayObject *)obj) != NPY_INT64 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj) || !PyArray_ISWRITEABLE((PyArrayObject *)obj) ||
        PyArray_SIZE((PyArrayObject *)obj) < 2) {
        PyErr_SetString(PyExc_TypeError, "stats must be None or a writeable contiguous int64 array of 2 or 6");
        return -1;
    }
    return 0;
}

/* stats[0] = output values (in out's C order) that lost a trailing character under "drop",
 * stats[1] = the first one's position (-1: none); when stats has 6 elements, the same over every
 * source value whether selected or not (a variable-length chunk is decoded whole): stats[2:4] for
 * drops, stats[4:6] for bad values (source indices).  The output and the sources are walked only
 * when something was dropped or bad. */
static void
fill_stats(PyObject *stats_obj, npy_intp size, const uint8_t *dropped, const int64_t *sel, npy_intp n_src,
           const int32_t *len, npy_intp n_bad)
{
    if (stats_obj == Py_None) return;
    int64_t *st = (int64_t *)PyArray_DATA((PyArrayObject *)stats_obj);
    int64_t count = 0, first = -1;
    if (dropped) {
        for (npy_intp k = 0; k < size; k++) {
            npy_intp src = sel ? (npy_intp)sel[k] : k;
            if (src >= 0 && src < n_src && dropped[src]) {
                if (first < 0) first = k;
                count++;
            }
        }
    }
    st[0] = count;
    st[1] = first;
    if (PyArray_SIZE((PyArrayObject *)stats_obj) < 6) return;
    int64_t dcount = 0, dfirst = -1, bfirst = -1;
    if (dropped) {
        for (npy_intp i = 0; i < n_src; i++) {
            if (dropped[i]) {
                if (dfirst < 0) dfirst = i;
                dcount++;
            }
        }
    }
    if (n_bad) {
        for (npy_intp i = 0; i < n_src; i++) {
            if (len[i] < 0) {
                bfirst = i;
                break;
            }
        }
    }
    st[2] = dcount;
    st[3] = dfirst;
    st[4] = n_bad;
    st[5] = bfirst;
}

/* ------------------------------------------------------------------------------------------
 * fixed width: fixed_to_T(buf, width, out, sel, policy[, trailing]) -> intp array of bad positions
 * A value ends at its first NUL (NC_STRING, netcdf-c); with trailing=1 only trailing NULs are
 * stripped and embedded ones kept (NC_CHAR joined as netCDF4/xarray join it).
 * ---------------------------------------------------------------------------------------- */

/* bytes of a row without its trailing NULs; whether any kept byte is >= 0x80 */
static Py_ssize_t
row_rstrip_nul(const uint8_t *p, Py_ssize_t n, int *non_ascii)
{
    Py_ssize_t L = n;
    while (L >= 8) { /* the padding a word at a time */
        uint64_t w;
        memcpy(&w, p + L - 8, 8);
        if (w) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            L -= __builtin_clzll(w) >> 3; /* the NUL bytes above the last non-NUL one */
            goto found;
#else
            break;
#endif
        }
        L -= 8;
    }
    while (L > 0 && p[L - 1] == 0) L--;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
found:
#endif
    *non_ascii = span_non_ascii(p, L, p + n);
    return L;
}

static PyObject *
fixed_to_T(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t width;
    PyObject *out_obj, *sel_obj, *stats_obj = Py_None;
    int policy, trailing = 0;
    if (!PyArg_ParseTuple(args, "y*nOOi|pO", &view, &width, &out_obj, &sel_obj, &policy, &trailing, &stats_obj))
        return NULL;
    PyObject *result = NULL;
    int64_t *start = NULL;
    int32_t *len = NULL;
    uint8_t *dropped = NULL;
    PyArrayObject *out;
    const int64_t *sel;
    if (check_out(out_obj, &out) < 0 || check_stats(stats_obj) < 0) goto finish;
    if (width <= 0 || view.len % width != 0 || width > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "buffer size is not a multiple of a positive width");
        goto finish;
    }
    npy_intp n_src = view.len / width;
    npy_intp size = PyArray_SIZE(out);
    if (get_sel(sel_obj, size, n_src, &sel) < 0) goto finish;
    len = (int32_t *)PyMem_RawMalloc(sizeof(int32_t) * (n_src ? n_src : 1));
    if (!len) {
        PyErr_NoMemory();
        goto finish;
    }
    npy_intp n_bad = 0;
    int failed = 0;
    const uint8_t *data = (const uint8_t *)view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < n_src; i++) {
        const uint8_t *p = data + i * width;
        int non_ascii;
        Py_ssize_t L = trailing ? row_rstrip_nul(p, width, &non_ascii) : row_first_nul(p, width, &non_ascii);
        Py_ssize_t keep = L;
        if (non_ascii) {
            keep = keep_len(p, L, policy);
            if (keep >= 0 && keep < L && mark_drop(&dropped, n_src, i) < 0) {
                failed = -3;
                break;
            }
        }
        if (trailing && keep < L) /* a cut character dropped: NULs before it are padding too */
            while (keep > 0 && p[keep - 1] == 0) keep--;
        len[i] = (int32_t)keep;
        if (keep < 0) n_bad++;
    }
    spans sp = {data, NULL, width, len, n_src};
    if (size && !failed) failed = pack_all(out, &sp, sel);
    Py_END_ALLOW_THREADS
    if (failed) {
        pack_error(failed);
        goto finish;
    }
    result = bad_positions(out, len, sel, n_src, n_bad, policy != POLICY_REPLACE);
    if (result) fill_stats(stats_obj, size, dropped, sel, n_src, len, n_bad);
finish:
    PyMem_RawFree(dropped);
    PyMem_RawFree(start);
    PyMem_RawFree(len);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * offsets + data: offsets_to_T(data, offsets, out, sel, policy) -> bad positions
 * ---------------------------------------------------------------------------------------- */

/* offsets: a 1-D aligned C-contiguous native int32/int64/uint32/uint64 array of n+1 >= 1; its
 * type number in *t */
static int
check_offsets(PyObject *obj, PyArrayObject **off, int *t)
{
    if (!PyArray_Check(obj) || PyArray_NDIM((PyArrayObject *)obj) != 1 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj) || !PyArray_ISALIGNED((PyArrayObject *)obj) ||
        PyArray_DIM((PyArrayObject *)obj, 0) < 1) {
        PyErr_SetString(PyExc_TypeError, "offsets must be a 1-D aligned contiguous integer array of n+1");
        return -1;
    }
    *off = (PyArrayObject *)obj;
    *t = PyArray_TYPE(*off);
    if (!PyArray_ISNBO(PyArray_DESCR(*off)->byteorder) ||
        !(*t == NPY_INT32 || *t == NPY_INT64 || *t == NPY_UINT32 || *t == NPY_UINT64)) {
        PyErr_SetString(PyExc_TypeError, "offsets must be native int32/int64/uint32/uint64");
        return -1;
    }
    return 0;
}

/* offset i of a check_offsets array as int64 (-1 for a uint64 above INT64_MAX: out of bounds) */
static inline int64_t
read_offset(const char *od, int t, npy_intp i)
{
    switch (t) {
    case NPY_INT32: return (int64_t)((const int32_t *)od)[i];
    case NPY_INT64: return ((const int64_t *)od)[i];
    case NPY_UINT32: return (int64_t)((const uint32_t *)od)[i];
    default: {
        uint64_t v = ((const uint64_t *)od)[i];
        return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
    }
    }
}

static PyObject *
offsets_to_T(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *off_obj, *out_obj, *sel_obj, *stats_obj = Py_None;
    int policy;
    if (!PyArg_ParseTuple(args, "y*OOOi|O", &view, &off_obj, &out_obj, &sel_obj, &policy, &stats_obj)) return NULL;
    PyObject *result = NULL;
    int64_t *start = NULL;
    int32_t *len = NULL;
    uint8_t *dropped = NULL;
    PyArrayObject *out, *off;
    const int64_t *sel;
    if (check_out(out_obj, &out) < 0 || check_stats(stats_obj) < 0) goto finish;
    int t;
    if (check_offsets(off_obj, &off, &t) < 0) goto finish;
    npy_intp n_src = PyArray_DIM(off, 0) - 1;
    npy_intp size = PyArray_SIZE(out);
    if (get_sel(sel_obj, size, n_src, &sel) < 0) goto finish;
    start = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * (n_src ? n_src : 1));
    len = (int32_t *)PyMem_RawMalloc(sizeof(int32_t) * (n_src ? n_src : 1));
    if (!start || !len) {
        PyErr_NoMemory();
        goto finish;
    }
    const char *od = PyArray_BYTES(off);
    int64_t dlen = (int64_t)view.len;
    npy_intp n_bad = 0;
    int err = 0; /* 1 = offsets out of bounds/decreasing, 2 = value too long, 3 = memory, 4 = sel changed */
    const uint8_t *data = (const uint8_t *)view.buf;
    Py_BEGIN_ALLOW_THREADS
#define OFF(i) read_offset(od, t, i)
    int64_t first = OFF(0);
    int64_t prev = first;
    if (prev < 0 || prev > dlen) err = 1;
    /* pass 1: offsets, lengths, and whether every value starts on a character boundary */
    int boundary_bad = 0;
    for (npy_intp i = 0; i < n_src && !err; i++) {
        int64_t nxt = OFF(i + 1);
        if (nxt < prev || nxt > dlen) {
            err = 1;
            break;
        }
        if (nxt - prev > INT32_MAX) {
            err = 2;
            break;
        }
        start[i] = prev;
        len[i] = (int32_t)(nxt - prev);
        uint8_t c0 = prev < nxt ? data[prev] : 0;
        boundary_bad |= (c0 & 0xC0) == 0x80;
        prev = nxt;
    }
#undef OFF
    /* the values are contiguous: if all of them together are valid UTF-8 and each starts on a
     * character boundary, each one is valid (one long validation instead of n short ones) */
    Py_ssize_t tail_unused;
    if (!err && (boundary_bad || utf8_check(data + first, (Py_ssize_t)(prev - first), &tail_unused) != 0)) {
        for (npy_intp i = 0; i < n_src; i++) {
            const uint8_t *p = data + start[i];
            Py_ssize_t keep = span_non_ascii(p, len[i], data + dlen) ? keep_len(p, len[i], policy) : len[i];
            if (keep >= 0 && keep < len[i] && mark_drop(&dropped, n_src, i) < 0) {
                err = 3;
                break;
            }
            len[i] = (int32_t)keep;
            if (keep < 0) n_bad++;
        }
    }
    if (!err && size) {
        spans sp = {data, start, 0, len, n_src};
        int r = pack_all(out, &sp, sel);
        if (r < 0) err = r == -2 ? 4 : 3;
    }
    Py_END_ALLOW_THREADS
    if (err == 4) {
        pack_error(-2);
        goto finish;
    }
    if (err == 1) {
        PyErr_SetString(PyExc_ValueError, "offsets out of bounds or decreasing");
        goto finish;
    }
    if (err == 2) {
        PyErr_SetString(PyExc_OverflowError, "a value longer than 2 GiB");
        goto finish;
    }
    if (err == 3) {
        PyErr_NoMemory();
        goto finish;
    }
    result = bad_positions(out, len, sel, n_src, n_bad, policy != POLICY_REPLACE);
    if (result) fill_stats(stats_obj, size, dropped, sel, n_src, len, n_bad);
finish:
    PyMem_RawFree(dropped);
    PyMem_RawFree(start);
    PyMem_RawFree(len);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * numcodecs vlen-utf8: vlen_utf8_to_T(buf, n_expected, allow_trailing, out, sel, policy)
 *   -> bad positions, or None when the chunk is malformed (the caller re-walks it in Python
 *      to raise its detailed ChunkError)
 * ---------------------------------------------------------------------------------------- */

static inline uint32_t
rd_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static PyObject *
vlen_utf8_to_T(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n_expected;
    int allow_trailing, policy;
    PyObject *out_obj, *sel_obj, *stats_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*npOOi|O", &view, &n_expected, &allow_trailing, &out_obj, &sel_obj, &policy,
                          &stats_obj))
        return NULL;
    PyObject *result = NULL;
    int64_t *start = NULL;
    int32_t *len = NULL;
    uint8_t *dropped = NULL;
    PyArrayObject *out;
    const int64_t *sel;
    const uint8_t *a = (const uint8_t *)view.buf;
    int64_t B = (int64_t)view.len;
    if (check_out(out_obj, &out) < 0 || check_stats(stats_obj) < 0) goto finish;
    if (B < 4) goto malformed;
    int64_t n = rd_u32le(a);
    if ((n_expected >= 0 && n != n_expected) || n > (B - 4) / 4) goto malformed;
    npy_intp size = PyArray_SIZE(out);
    if (get_sel(sel_obj, size, (npy_intp)n, &sel) < 0) goto finish;
    start = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * (n ? n : 1));
    len = (int32_t *)PyMem_RawMalloc(sizeof(int32_t) * (n ? n : 1));
    if (!start || !len) {
        PyErr_NoMemory();
        goto finish;
    }
    int err = 0; /* 1 malformed, 3 memory, 4 sel changed */
    npy_intp n_bad = 0;
    Py_BEGIN_ALLOW_THREADS
    /* pass 1: the header walk */
    int64_t p = 4;
    int64_t long_value = 0;
    for (int64_t i = 0; i < n; i++) {
        if (p + 4 > B) {
            err = 1;
            break;
        }
        int64_t ln = rd_u32le(a + p);
        p += 4;
        if (ln > B - p || ln > INT32_MAX) {
            err = 1;
            break;
        }
        start[i] = p;
        len[i] = (int32_t)ln;
        long_value |= ln >= 0x80;
        p += ln;
    }
    if (!err && p < B && !allow_trailing) err = 1;
    /* when every length is < 128 its 4 header bytes are ASCII (< 0x80), which can neither
     * continue nor be continued by a multibyte sequence: the values and headers together are
     * valid UTF-8 exactly when every value is, so one long validation replaces n short ones */
    Py_ssize_t tail_unused;
    if (!err && (long_value || utf8_check(a + 4, (Py_ssize_t)(p - 4), &tail_unused) != 0)) {
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *v = a + start[i];
            Py_ssize_t keep = span_non_ascii(v, len[i], a + B) ? keep_len(v, len[i], policy) : len[i];
            if (keep >= 0 && keep < len[i] && mark_drop(&dropped, (npy_intp)n, (npy_intp)i) < 0) {
                err = 3;
                break;
            }
            len[i] = (int32_t)keep;
            if (keep < 0) n_bad++;
        }
    }
    if (!err && size) {
        spans sp = {a, start, 0, len, (npy_intp)n};
        int r = pack_all(out, &sp, sel);
        if (r < 0) err = r == -2 ? 4 : 3;
    }
    Py_END_ALLOW_THREADS
    if (err == 1) goto malformed;
    if (err == 4) {
        pack_error(-2);
        goto finish;
    }
    if (err == 3) {
        PyErr_NoMemory();
        goto finish;
    }
    result = bad_positions(out, len, sel, (npy_intp)n, n_bad, policy != POLICY_REPLACE);
    if (result) fill_stats(stats_obj, size, dropped, sel, (npy_intp)n, len, n_bad);
    goto finish;
malformed:
    result = Py_NewRef(Py_None);
finish:
    PyMem_RawFree(dropped);
    PyMem_RawFree(start);
    PyMem_RawFree(len);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------
 * encoding
 * ---------------------------------------------------------------------------------------- */

/* UTF-8 length of a str in one pass that also looks for NUL: -1 on a lone surrogate, -2 on a
 * NUL character unless allow_nul (compact ASCII: the length is known, memchr finds a NUL) */
static Py_ssize_t
str_utf8_scan(PyObject *s, int allow_nul)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *d = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) return (!allow_nul && n && memchr(d, 0, (size_t)n)) ? -2 : n;
    int kind = PyUnicode_KIND(s);
    Py_ssize_t total = n, nul = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *u = (const Py_UCS1 *)d;
        for (Py_ssize_t i = 0; i < n; i++) {
            total += u[i] >= 0x80;
            nul |= u[i] == 0;
        }
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *u = (const Py_UCS2 *)d;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS2 c = u[i];
            total += (c >= 0x80) + (c >= 0x800);
            nul |= c == 0;
            if (c >= 0xD800 && c <= 0xDFFF) return -1;
        }
    }
    else {
        const Py_UCS4 *u = (const Py_UCS4 *)d;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = u[i];
            total += (c >= 0x80) + (c >= 0x800) + (c >= 0x10000);
            nul |= c == 0;
            if (c >= 0xD800 && c <= 0xDFFF) return -1;
        }
    }
    return (nul && !allow_nul) ? -2 : total;
}

/* write the first `limit` bytes of a str's UTF-8 encoding (limit is on a character boundary) */
static void
str_utf8_write(PyObject *s, uint8_t *o, Py_ssize_t limit)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *d = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        memcpy(o, d, (size_t)(limit < n ? limit : n));
        return;
    }
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, d, i);
        int k = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (w + k > limit) return;
        if (k == 1) o[w] = (uint8_t)c;
        else if (k == 2) {
            o[w] = (uint8_t)(0xC0 | (c >> 6));
            o[w + 1] = (uint8_t)(0x80 | (c & 0x3F));
        }
        else if (k == 3) {
            o[w] = (uint8_t)(0xE0 | (c >> 12));
            o[w + 1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            o[w + 2] = (uint8_t)(0x80 | (c & 0x3F));
        }
        else {
            o[w] = (uint8_t)(0xF0 | (c >> 18));
            o[w + 1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
            o[w + 2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            o[w + 3] = (uint8_t)(0x80 | (c & 0x3F));
        }
        w += k;
    }
}

/* UTF-8 of a str into o (room for 4 bytes per character, or 1 when ASCII): bytes written,
 * -1 on a lone surrogate.  One pass, one loop per storage kind. */
static Py_ssize_t
str_utf8_encode(PyObject *s, uint8_t *o)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *d = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        memcpy(o, d, (size_t)n);
        return n;
    }
    uint8_t *w = o;
    int kind = PyUnicode_KIND(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *u = (const Py_UCS1 *)d;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS1 c = u[i];
            if (c < 0x80) *w++ = c;
            else {
                w[0] = (uint8_t)(0xC0 | (c >> 6));
                w[1] = (uint8_t)(0x80 | (c & 0x3F));
                w += 2;
            }
        }
    }
    else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *u = (const Py_UCS2 *)d;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS2 c = u[i];
            if (c < 0x80) *w++ = (uint8_t)c;
            else if (c < 0x800) {
                w[0] = (uint8_t)(0xC0 | (c >> 6));
                w[1] = (uint8_t)(0x80 | (c & 0x3F));
                w += 2;
            }
            else {
                if (c >= 0xD800 && c <= 0xDFFF) return -1;
                w[0] = (uint8_t)(0xE0 | (c >> 12));
                w[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
                w[2] = (uint8_t)(0x80 | (c & 0x3F));
                w += 3;
            }
        }
    }
    else {
        const Py_UCS4 *u = (const Py_UCS4 *)d;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = u[i];
            if (c < 0x80) *w++ = (uint8_t)c;
            else if (c < 0x800) {
                w[0] = (uint8_t)(0xC0 | (c >> 6));
                w[1] = (uint8_t)(0x80 | (c & 0x3F));
                w += 2;
            }
            else if (c < 0x10000) {
                if (c >= 0xD800 && c <= 0xDFFF) return -1;
                w[0] = (uint8_t)(0xE0 | (c >> 12));
                w[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
                w[2] = (uint8_t)(0x80 | (c & 0x3F));
                w += 3;
            }
            else {
                w[0] = (uint8_t)(0xF0 | (c >> 18));
                w[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
                w[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
                w[3] = (uint8_t)(0x80 | (c & 0x3F));
                w += 4;
            }
        }
    }
    return (Py_ssize_t)(w - o);
}

/* where to cut a UTF-8 value of len bytes at most `width` bytes: numpy-fallback rule, back off
 * over at most 3 continuation bytes */
static inline Py_ssize_t
cut_at(const uint8_t *s, Py_ssize_t len, Py_ssize_t width)
{
    if (len <= width) return len;
    Py_ssize_t cut = width;
    for (int r = 0; r < 3 && cut > 0 && (s[cut] & 0xC0) == 0x80; r++) cut--;
    return cut;
}

static int
check_values(PyObject *obj, PyArrayObject **arr, int *is_obj)
{
    if (!PyArray_Check(obj) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj)) {
        PyErr_SetString(PyExc_TypeError, "values must be a C-contiguous StringDType or object array");
        return -1;
    }
    int t = PyArray_TYPE((PyArrayObject *)obj);
    if (t != NPY_VSTRING && t != NPY_OBJECT) {
        PyErr_SetString(PyExc_TypeError, "values must be a StringDType or object array");
        return -1;
    }
    *arr = (PyArrayObject *)obj;
    *is_obj = t == NPY_OBJECT;
    return 0;
}

/* The UTF-8 length of every value of a StringDType array into L (GIL released): 0, or the
 * utf8_scan status (1 NUL unless allow_nul, 2 missing/unreadable) with its index in *bad. */
static int
scan_T(PyArrayObject *arr, int allow_nul, int64_t *L, npy_intp *bad)
{
    npy_intp N = PyArray_SIZE(arr);
    const char *base = PyArray_BYTES(arr);
    const npy_intp esz = PyArray_ITEMSIZE(arr); /* the packed string's size: numpy's, not ours */
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    npy_string_allocator *alloc = NpyString_acquire_allocator(
        (const PyArray_StringDTypeObject *)PyArray_DESCR(arr));
    for (npy_intp i = 0; i < N; i++) {
        npy_static_string u = {0, NULL};
        if (NpyString_load(alloc, (const npy_packed_static_string *)(base + esz * i), &u) != 0) {
            status = 2;
            *bad = i;
            break;
        }
        if (!allow_nul && u.size && memchr(u.buf, 0, u.size)) {
            status = 1;
            *bad = i;
            break;
        }
        L[i] = (int64_t)u.size;
    }
    NpyString_release_allocator(alloc);
    Py_END_ALLOW_THREADS
    return status;
}

/*
 * utf8_scan(values) -> (status, index, lengths)
 *   status 0: lengths (int64, UTF-8 bytes per value) are valid;
 *   status 1: value `index` contains a NUL (unless allow_nul);
 *   status 2: value `index` is not a str, is missing (NA), or holds a lone surrogate:
 *             the caller's Python path reports it.
 */
static PyObject *
utf8_scan(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int allow_nul = 0;
    if (!PyArg_ParseTuple(args, "O|p", &obj, &allow_nul)) return NULL;
    PyArrayObject *arr;
    int is_obj;
    if (check_values(obj, &arr, &is_obj) < 0) return NULL;
    npy_intp N = PyArray_SIZE(arr);
    npy_intp dims[1] = {N};
    PyArrayObject *lens = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64);
    if (!lens) return NULL;
    int64_t *L = (int64_t *)PyArray_DATA(lens);
    int status = 0;
    npy_intp bad = -1;
    if (is_obj) {
        PyObject **v = (PyObject **)PyArray_DATA(arr);
        for (npy_intp i = 0; i < N; i++) {
            PyObject *s = v[i];
            if (s == NULL || !PyUnicode_Check(s)) {
                status = 2;
                bad = i;
                break;
            }
            Py_ssize_t n = str_utf8_scan(s, allow_nul);
            if (n < 0) {
                status = n == -2 ? 1 : 2;
                bad = i;
                break;
            }
            L[i] = n;
        }
    }
    else {
        status = scan_T(arr, allow_nul, L, &bad);
    }
    return Py_BuildValue("inN", status, (Py_ssize_t)bad, (PyObject *)lens);
}

/* Copy every value of a StringDType array to o at its offset (off: n+1 running sums of the
 * lengths scan_T measured; GIL released).  1 when a value changed meanwhile, else 0.  Only
 * memcpy while the allocator is held: numpy forbids Python C-API calls under it. */
static int
copy_T(PyArrayObject *arr, const int64_t *off, char *o)
{
    npy_intp N = PyArray_SIZE(arr);
    const char *base = PyArray_BYTES(arr);
    const npy_intp esz = PyArray_ITEMSIZE(arr);
    const PyArray_StringDTypeObject *descr = (const PyArray_StringDTypeObject *)PyArray_DESCR(arr);
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    npy_string_allocator *alloc = NpyString_acquire_allocator(descr);
    for (npy_intp i = 0; i < N; i++) {
        npy_static_string u = {0, NULL};
        /* re-check each length: the array may change while the GIL is released */
        if (NpyString_load(alloc, (const npy_packed_static_string *)(base + esz * i), &u) != 0 ||
            (int64_t)u.size != off[i + 1] - off[i]) {
            changed = 1;
            break;
        }
        if (u.size) memcpy(o + off[i], u.buf, u.size);
    }
    NpyString_release_allocator(alloc);
    Py_END_ALLOW_THREADS
    return changed;
}

/* utf8_pack for a StringDType array: lengths first, then one exact-size copy (GIL released) */
static PyObject *
utf8_pack_T(PyArrayObject *arr, int allow_nul)
{
    npy_intp N = PyArray_SIZE(arr);
    npy_intp dims[1] = {N + 1};
    PyArrayObject *offs = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64);
    if (!offs) return NULL;
    int64_t *off = (int64_t *)PyArray_DATA(offs);
    npy_intp bad = -1;
    off[0] = 0;
    int status = scan_T(arr, allow_nul, off + 1, &bad); /* lengths, then their running sum */
    for (npy_intp i = 0; i < N && !status; i++) off[i + 1] += off[i];
    if (status) {
        Py_DECREF(offs);
        return Py_BuildValue("inOO", status, (Py_ssize_t)bad, Py_None, Py_None);
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)off[N]);
    if (!data) {
        Py_DECREF(offs);
        return NULL;
    }
    int changed = copy_T(arr, off, PyBytes_AS_STRING(data));
    if (changed) {
        Py_DECREF(offs);
        Py_DECREF(data);
        PyErr_SetString(PyExc_ValueError, "values changed during utf8_pack");
        return NULL;
    }
    return Py_BuildValue("inNN", status, (Py_ssize_t)bad, (PyObject *)offs, data);
}

/*
 * fill_fixed_bounded(values, width, out, zeroed=False) -> (status, index, n_over, longest)
 *   NUL padded rows in ONE pass over the values when the width is known (a given maxstrlen, or
 *   the longest length from utf8_scan): each value's
 *   UTF-8 into its `width`-byte row of `out`, values longer than `width` cut at a character
 *   boundary and counted (n_over; longest is the longest UTF-8 length seen), so the caller can
 *   raise, warn or widen afterwards.  status as utf8_scan (1 NUL, 2 not a str / NA / lone
 *   surrogate at `index`: the caller's Python path reports it; the rows are then incomplete).
 */
static PyObject *
fill_fixed_bounded(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t width;
    Py_buffer outb;
    int zeroed = 0;
    if (!PyArg_ParseTuple(args, "Onw*|p", &obj, &width, &outb, &zeroed)) return NULL;
    PyObject *result = NULL;
    PyArrayObject *arr;
    int is_obj;
    if (check_values(obj, &arr, &is_obj) < 0) goto finish;
    npy_intp N = PyArray_SIZE(arr);
    if (width <= 0 || N > PY_SSIZE_T_MAX / width || outb.len != (Py_ssize_t)N * width) {
        PyErr_SetString(PyExc_ValueError, "width must be > 0 and out hold exactly N * width bytes");
        goto finish;
    }
    uint8_t *o = (uint8_t *)outb.buf;
    int status = 0;
    npy_intp bad = -1;
    Py_ssize_t n_over = 0, longest = 0;
    if (is_obj) {
        PyObject **v = (PyObject **)PyArray_DATA(arr);
        for (npy_intp i = 0; i < N; i++) {
            PyObject *s = v[i];
            uint8_t *row = o + (Py_ssize_t)i * width;
            Py_ssize_t n = (s != NULL && PyUnicode_Check(s)) ? str_utf8_scan(s, 0) : -1;
            if (n < 0) {
                status = n == -2 ? 1 : 2;
                bad = i;
                break;
            }
            if (n > longest) longest = n;
            if (n <= width) {
                if (PyUnicode_IS_ASCII(s)) memcpy(row, PyUnicode_DATA(s), (size_t)n);
                else str_utf8_encode(s, row); /* exactly n <= width bytes */
                if (!zeroed) memset(row + n, 0, (size_t)(width - n));
            }
            else {
                n_over++;
                if (!zeroed) memset(row, 0, (size_t)width);
                str_utf8_write(s, row, width); /* whole characters only */
            }
        }
    }
    else {
        const char *base = PyArray_BYTES(arr);
        const npy_intp esz = PyArray_ITEMSIZE(arr);
        Py_BEGIN_ALLOW_THREADS
        npy_string_allocator *alloc = NpyString_acquire_allocator(
            (const PyArray_StringDTypeObject *)PyArray_DESCR(arr));
        for (npy_intp i = 0; i < N; i++) {
            npy_static_string u = {0, NULL};
            if (NpyString_load(alloc, (const npy_packed_static_string *)(base + esz * i), &u) != 0) {
                status = 2;
                bad = i;
                break;
            }
            Py_ssize_t L = (Py_ssize_t)u.size;
            if (L && memchr(u.buf, 0, (size_t)L)) {
                status = 1;
                bad = i;
                break;
            }
            if (L > longest) longest = L;
            Py_ssize_t keep = L;
            if (L > width) {
                n_over++;
                keep = cut_at((const uint8_t *)u.buf, L, width);
            }
            uint8_t *row = o + (Py_ssize_t)i * width;
            if (keep) memcpy(row, u.buf, (size_t)keep);
            if (!zeroed) memset(row + keep, 0, (size_t)(width - keep));
        }
        NpyString_release_allocator(alloc);
        Py_END_ALLOW_THREADS
    }
    result = Py_BuildValue("innn", status, (Py_ssize_t)bad, n_over, longest);
finish:
    PyBuffer_Release(&outb);
    return result;
}

/*
 * T_to_objects(values) -> object array of str, same shape
 *   numpy's astype(object) for StringDType, with an ASCII fast path (PyUnicode_New + memcpy
 *   instead of a UTF-8 decode); StringDType holds valid UTF-8, so decoding cannot fail.  Only
 *   for arrays without an NA object (the caller checks).
 */
static PyObject *
T_to_objects(PyObject *self, PyObject *arg)
{
    PyArrayObject *arr;
    int is_obj;
    if (check_values(arg, &arr, &is_obj) < 0) return NULL;
    if (is_obj) {
        PyErr_SetString(PyExc_TypeError, "values must be a StringDType array");
        return NULL;
    }
    /* the values are copied out first (scan_T + copy_T, under the allocator: memcpy only), then
     * the str objects are made from the copy: numpy forbids Python C-API calls while a
     * StringDType allocator is held (its lock could deadlock against the GIL) */
    npy_intp N = PyArray_SIZE(arr);
    int64_t *off = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * (size_t)(N + 1));
    if (!off) return PyErr_NoMemory();
    npy_intp bad = -1;
    off[0] = 0;
    if (scan_T(arr, 1, off + 1, &bad) != 0) {
        PyMem_RawFree(off);
        PyErr_SetString(PyExc_ValueError, "values must not hold missing (NA) strings");
        return NULL;
    }
    for (npy_intp i = 0; i < N; i++) off[i + 1] += off[i];
    char *buf = (char *)PyMem_RawMalloc((size_t)(off[N] ? off[N] : 1));
    if (!buf) {
        PyMem_RawFree(off);
        return PyErr_NoMemory();
    }
    if (copy_T(arr, off, buf)) {
        PyMem_RawFree(off);
        PyMem_RawFree(buf);
        PyErr_SetString(PyExc_ValueError, "values changed during T_to_objects");
        return NULL;
    }
    PyArrayObject *res = (PyArrayObject *)PyArray_SimpleNew(PyArray_NDIM(arr), PyArray_DIMS(arr), NPY_OBJECT);
    if (!res) {
        PyMem_RawFree(off);
        PyMem_RawFree(buf);
        return NULL;
    }
    PyObject **o = (PyObject **)PyArray_DATA(res);
    for (npy_intp i = 0; i < N; i++) o[i] = NULL;
    int failed = 0;
    for (npy_intp i = 0; i < N; i++) {
        const uint8_t *b = (const uint8_t *)buf + off[i];
        Py_ssize_t L = (Py_ssize_t)(off[i + 1] - off[i]);
        PyObject *str;
        if (!span_non_ascii(b, L, b + L)) {
            str = PyUnicode_New(L, 127);
            if (str && L) memcpy(PyUnicode_DATA(str), b, (size_t)L);
        }
        else {
            str = PyUnicode_DecodeUTF8((const char *)b, L, "strict");
        }
        if (!str) {
            failed = 1;
            break;
        }
        o[i] = str;
    }
    PyMem_RawFree(off);
    PyMem_RawFree(buf);
    if (failed) {
        Py_DECREF(res); /* NULL slots are skipped by numpy's dealloc */
        return NULL;
    }
    return (PyObject *)res;
}

/*
 * utf8_pack(values, allow_nul=False) -> (status, index, offsets, data)
 *   An object (or StringDType) array of str -> UTF-8 of every value concatenated (bytes; a bytearray for objects) + int64
 *   offsets (n+1).  Objects: ONE pass (they are scattered over the heap: reading them twice costs
 *   more than writing the scratch copy).  status as utf8_scan; offsets/data are None unless 0.
 */
static PyObject *
utf8_pack(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int allow_nul = 0;
    if (!PyArg_ParseTuple(args, "O|p", &obj, &allow_nul)) return NULL;
    PyArrayObject *arr;
    int is_obj;
    if (check_values(obj, &arr, &is_obj) < 0) return NULL;
    if (!is_obj) return utf8_pack_T(arr, allow_nul);
    npy_intp N = PyArray_SIZE(arr);
    npy_intp dims[1] = {N + 1};
    PyArrayObject *offs = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_INT64);
    if (!offs) return NULL;
    int64_t *off = (int64_t *)PyArray_DATA(offs);
    Py_ssize_t cap = (Py_ssize_t)N * 24 + 64;
    /* a bytearray: PyByteArray_Resize is public API (bytes' resize is a private CPython call) */
    PyObject *data = PyByteArray_FromStringAndSize(NULL, cap);
    if (!data) {
        Py_DECREF(offs);
        return NULL;
    }
    PyObject **v = (PyObject **)PyArray_DATA(arr);
    Py_ssize_t pos = 0;
    int status = 0;
    npy_intp bad = -1;
    off[0] = 0;
    for (npy_intp i = 0; i < N; i++) {
        PyObject *s = v[i];
        if (s == NULL || !PyUnicode_Check(s)) {
            status = 2;
            bad = i;
            break;
        }
        Py_ssize_t room = PyUnicode_GET_LENGTH(s) * (PyUnicode_IS_ASCII(s) ? 1 : 4);
        if (pos + room > cap) {
            Py_ssize_t ncap = cap * 2 > pos + room ? cap * 2 : pos + room + 64;
            if (PyByteArray_Resize(data, ncap) < 0) {
                Py_DECREF(offs);
                Py_DECREF(data);
                return NULL;
            }
            cap = ncap;
        }
        uint8_t *o = (uint8_t *)PyByteArray_AS_STRING(data) + pos;
        Py_ssize_t n = str_utf8_encode(s, o);
        if (n < 0) {
            status = 2;
            bad = i;
            break;
        }
        if (!allow_nul && n && memchr(o, 0, (size_t)n)) {
            status = 1;
            bad = i;
            break;
        }
        pos += n;
        off[i + 1] = pos;
    }
    if (status) {
        Py_DECREF(offs);
        Py_DECREF(data);
        return Py_BuildValue("inOO", status, (Py_ssize_t)bad, Py_None, Py_None);
    }
    if (PyByteArray_Resize(data, pos) < 0) {
        Py_DECREF(offs);
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("inNN", status, (Py_ssize_t)bad, (PyObject *)offs, data);
}

/*
 * vlen_utf8_from_offsets(data, offsets) -> bytes in the numcodecs vlen-utf8 layout
 *   (u32 count, then u32 length + bytes per value) of data[offsets[i]:offsets[i+1]]; offsets
 *   int64 (n+1, non-decreasing, within data; they need not start at 0).
 */
static PyObject *
vlen_utf8_from_offsets(PyObject *self, PyObject *args)
{
    Py_buffer d;
    PyObject *off_obj;
    if (!PyArg_ParseTuple(args, "y*O", &d, &off_obj)) return NULL;
    PyObject *result = NULL;
    if (!PyArray_Check(off_obj) || PyArray_TYPE((PyArrayObject *)off_obj) != NPY_INT64 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)off_obj) || !PyArray_ISALIGNED((PyArrayObject *)off_obj) ||
        PyArray_NDIM((PyArrayObject *)off_obj) != 1 || PyArray_SIZE((PyArrayObject *)off_obj) < 1) {
        PyErr_SetString(PyExc_TypeError, "offsets must be an aligned contiguous 1-D int64 array of n+1");
        goto finish;
    }
    npy_intp N = PyArray_SIZE((PyArrayObject *)off_obj) - 1;
    /* a private copy: the offsets are read again without the GIL */
    int64_t *off = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * (size_t)(N + 1));
    if (!off) {
        PyErr_NoMemory();
        goto finish;
    }
    memcpy(off, PyArray_DATA((PyArrayObject *)off_obj), sizeof(int64_t) * (size_t)(N + 1));
    if ((uint64_t)N > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_OverflowError, "more than 2**32-1 values do not fit a vlen-utf8 chunk");
        PyMem_RawFree(off);
        goto finish;
    }
    for (npy_intp i = 0; i < N; i++) {
        if (off[i] < 0 || off[i + 1] < off[i] || off[i + 1] > (int64_t)d.len || off[i + 1] - off[i] > 0xFFFFFFFFLL) {
            PyErr_SetString(PyExc_ValueError, "offsets out of bounds, decreasing, or a value over 4 GiB");
            PyMem_RawFree(off);
            goto finish;
        }
    }
    if (off[0] < 0 || off[0] > (int64_t)d.len) {
        PyErr_SetString(PyExc_ValueError, "offsets out of bounds, decreasing, or a value over 4 GiB");
        PyMem_RawFree(off);
        goto finish;
    }
    int64_t payload = off[N] - off[0];
    if (payload > PY_SSIZE_T_MAX - 4 - 4 * (int64_t)N) {
        PyErr_NoMemory();
        PyMem_RawFree(off);
        goto finish;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 + 4 * (int64_t)N + payload));
    if (!result) {
        PyMem_RawFree(off);
        goto finish;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *src = (const uint8_t *)d.buf;
    Py_BEGIN_ALLOW_THREADS
    uint32_t n32 = (uint32_t)N;
    o[0] = (uint8_t)n32; o[1] = (uint8_t)(n32 >> 8); o[2] = (uint8_t)(n32 >> 16); o[3] = (uint8_t)(n32 >> 24);
    uint8_t *w = o + 4;
    for (npy_intp i = 0; i < N; i++) {
        uint32_t L = (uint32_t)(off[i + 1] - off[i]);
        w[0] = (uint8_t)L; w[1] = (uint8_t)(L >> 8); w[2] = (uint8_t)(L >> 16); w[3] = (uint8_t)(L >> 24);
        if (L) memcpy(w + 4, src + off[i], L);
        w += 4 + (size_t)L;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(off);
finish:
    PyBuffer_Release(&d);
    return result;
}

static PyObject *pack_at_impl(PyArrayObject *out, PyObject *pos_obj, PyObject *vals);

/* ------------------------------------------------------------------------------------------
 * pack_at(out, positions, values): out's elements at C-order positions (an intp array, or None
 * for every element) get values[i] (UTF-8 bytes; with positions None, values[0] everywhere).
 * Like out[...] = ..., but the allocator lock is only ever taken with the GIL released, so it
 * cannot deadlock against a thread packing without the GIL (tracemalloc's raw-allocation hook
 * takes the GIL inside numpy's allocator).
 * ---------------------------------------------------------------------------------------- */

static PyObject *
pack_at(PyObject *self, PyObject *args)
{
    PyObject *out_obj, *pos_obj, *vals_list;
    if (!PyArg_ParseTuple(args, "OOO!", &out_obj, &pos_obj, &PyList_Type, &vals_list)) return NULL;
    PyArrayObject *out;
    if (check_out(out_obj, &out) < 0) return NULL;
    /* an immutable snapshot we own: another thread may mutate (and free the items of) the
     * caller's list while the GIL is released below */
    PyObject *vals = PyList_AsTuple(vals_list);
    if (vals == NULL) return NULL;
    PyObject *result = pack_at_impl(out, pos_obj, vals);
    Py_DECREF(vals);
    return result;
}

static PyObject *
pack_at_impl(PyArrayObject *out, PyObject *pos_obj, PyObject *vals)
{
    npy_intp size = PyArray_SIZE(out);
    Py_ssize_t nv = PyTuple_GET_SIZE(vals);
    const npy_intp *pos = NULL;
    npy_intp npos = size;
    if (pos_obj != Py_None) {
        if (!PyArray_Check(pos_obj) || PyArray_TYPE((PyArrayObject *)pos_obj) != NPY_INTP ||
            !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)pos_obj) || !PyArray_ISALIGNED((PyArrayObject *)pos_obj)) {
            PyErr_SetString(PyExc_TypeError, "positions must be an aligned contiguous intp array or None");
            return NULL;
        }
        pos = (const npy_intp *)PyArray_DATA((PyArrayObject *)pos_obj);
        npos = PyArray_SIZE((PyArrayObject *)pos_obj);
        if (nv != npos) {
            PyErr_SetString(PyExc_ValueError, "one value per position");
            return NULL;
        }
        for (npy_intp i = 0; i < npos; i++) {
            if (pos[i] < 0 || pos[i] >= size) {
                PyErr_SetString(PyExc_IndexError, "position out of range");
                return NULL;
            }
        }
    }
    else if (nv != 1) {
        PyErr_SetString(PyExc_ValueError, "one value to fill with");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nv; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(vals, i))) {
            PyErr_SetString(PyExc_TypeError, "values must be bytes");
            return NULL;
        }
    }
    /* the tuple (ours, immutable) keeps the bytes alive while the GIL is released */
    out_iter it;
    out_iter_init(&it, out);
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    npy_string_allocator *alloc = NpyString_acquire_allocator(
        (const PyArray_StringDTypeObject *)PyArray_DESCR(out));
    if (pos == NULL) {
        PyObject *b = PyTuple_GET_ITEM(vals, 0);
        const char *buf = PyBytes_AS_STRING(b);
        size_t n = (size_t)PyBytes_GET_SIZE(b);
        OUT_LOOP_BEGIN(it)
            (void)k;
            if (NpyString_pack(alloc, dst, buf, n) < 0) {
                failed = 1;
                goto done;
            }
        OUT_LOOP_END(it)
    }
    else {
        for (npy_intp i = 0; i < npos; i++) {
            /* C-order position -> address */
            npy_intp rem = pos[i];
            if (rem < 0 || rem >= size) { /* positions changed since checked (another thread) */
                failed = 2;
                break;
            }
            char *ptr = it.base;
            for (int d = it.nd - 1; d >= 0; d--) {
                ptr += (rem % it.shape[d]) * it.strides[d];
                rem /= it.shape[d];
            }
            PyObject *b = PyTuple_GET_ITEM(vals, i);
            if (NpyString_pack(alloc, (npy_packed_static_string *)ptr, PyBytes_AS_STRING(b),
                               (size_t)PyBytes_GET_SIZE(b)) < 0) {
                failed = 1;
                break;
            }
        }
    }
done:
    NpyString_release_allocator(alloc);
    Py_END_ALLOW_THREADS
    if (failed == 2) {
        PyErr_SetString(PyExc_IndexError, "position out of range (positions changed during the call)");
        return NULL;
    }
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------
 * Arrow: stored layouts -> (int64 offsets, compacted data), the buffers an Arrow
 * large_string/large_binary array then owns without another copy.  UTF-8 is validated on the
 * way (validate=True) into one flag: the Python layer (xr_zstrings.text.arrow) finds and handles
 * the bad values only when it is false, as the numpy path would.
 * ---------------------------------------------------------------------------------------- */

/* bytes validated per block of compacted output (a block starts at a value start, so the
 * values of a block are each valid exactly when the block is and each starts on a character
 * boundary) */
#define ARROW_VALIDATE_BLOCK 65536

/* (offsets, data, valid) as a new tuple, data shrunk to its first `total` bytes in place (realloc:
 * a view would keep the whole allocation, n * width or 4 bytes a code point, alive as long as the
 * Arrow array); steals nothing (the arrays stay owned by the caller) */
static PyObject *
arrow_result(PyArrayObject *off, PyArrayObject *data, int64_t total, int valid)
{
    if ((npy_intp)total < PyArray_DIM(data, 0)) {
        npy_intp dims[1] = {(npy_intp)total};
        PyArray_Dims shape = {dims, 1};
        PyObject *none = PyArray_Resize(data, &shape, 0, NPY_CORDER);
        if (none == NULL) return NULL;
        Py_DECREF(none);
    }
    return Py_BuildValue("(OOO)", (PyObject *)off, (PyObject *)data, valid ? Py_True : Py_False);
}

/* the two result arrays: n + 1 int64 offsets and data_len bytes of data (uninitialised); -1 with
 * a Python error (the caller releases what was allocated) */
static int
arrow_alloc(npy_intp n, npy_intp data_len, PyArrayObject **off, PyArrayObject **dat)
{
    npy_intp dims_off[1] = {n + 1}, dims_dat[1] = {data_len};
    *off = (PyArrayObject *)PyArray_SimpleNew(1, dims_off, NPY_INT64);
    *dat = *off ? (PyArrayObject *)PyArray_SimpleNew(1, dims_dat, NPY_UINT8) : NULL;
    return *dat ? 0 : -1;
}

/* The result buffers: numpy arrays (arrow_alloc), or the caller's writable buffers (off_out of at
 * least n + 1 int64, dat_out of at least data_len bytes: pyarrow's pool reuses freed pages where
 * fresh numpy arrays of a chunk's size fault in every page) returned as given, unshrunk. */
typedef struct {
    PyArrayObject *off, *dat;
    PyObject *off_out, *dat_out;
    Py_buffer ob, db;
    int64_t *o;
    uint8_t *d;
} arrow_bufs;

static int
arrow_bufs_get(arrow_bufs *b, npy_intp n, npy_intp data_len)
{
    if (b->off_out == Py_None) b->off_out = NULL;
    if (b->dat_out == Py_None) b->dat_out = NULL;
    if ((b->off_out == NULL) != (b->dat_out == NULL)) {
        PyErr_SetString(PyExc_ValueError, "give both output buffers or neither");
        return -1;
    }
    if (b->off_out == NULL) {
        if (arrow_alloc(n, data_len, &b->off, &b->dat) < 0) return -1;
        b->o = (int64_t *)PyArray_DATA(b->off);
        b->d = (uint8_t *)PyArray_DATA(b->dat);
        return 0;
    }
    if (PyObject_GetBuffer(b->off_out, &b->ob, PyBUF_WRITABLE) < 0) {
        b->off_out = NULL;
        b->dat_out = NULL;
        return -1;
    }
    if (PyObject_GetBuffer(b->dat_out, &b->db, PyBUF_WRITABLE) < 0) {
        b->dat_out = NULL;
        return -1;
    }
    if (b->ob.len < (Py_ssize_t)((n + 1) * 8) || b->db.len < (Py_ssize_t)data_len) {
        PyErr_Format(PyExc_ValueError, "output buffers too small: need %zd offset and %zd data bytes",
                     (Py_ssize_t)((n + 1) * 8), (Py_ssize_t)data_len);
        return -1;
    }
    b->o = (int64_t *)b->ob.buf;
    b->d = (uint8_t *)b->db.buf;
    return 0;
}

static PyObject *
arrow_bufs_result(arrow_bufs *b, int64_t total, int valid)
{
    if (b->off_out == NULL) return arrow_result(b->off, b->dat, total, valid);
    return Py_BuildValue("(OOO)", b->off_out, b->dat_out, valid ? Py_True : Py_False);
}

static void
arrow_bufs_release(arrow_bufs *b)
{
    Py_XDECREF(b->off);
    Py_XDECREF(b->dat);
    if (b->off_out) PyBuffer_Release(&b->ob);
    if (b->dat_out) PyBuffer_Release(&b->db);
}

/* vlen_to_offsets(buf, n_expected, allow_trailing, validate) -> (int64 offsets, uint8 data, valid)
 * or None when the framing is wrong (the caller's Python walk raises the detailed ChunkError):
 * the checks of vlen_utf8_to_T. The data is allocated once at its final size, len(buf) - 4 - 4n
 * (less only with allow_trailing and trailing bytes). */
static PyObject *
vlen_to_offsets(PyObject *self, PyObject *args)
{
    Py_buffer view;
    arrow_bufs bufs = {0};
    Py_ssize_t n_expected;
    int allow_trailing, validate;
    if (!PyArg_ParseTuple(args, "y*npp|OO", &view, &n_expected, &allow_trailing, &validate, &bufs.off_out, &bufs.dat_out)) return NULL;
    PyObject *result = NULL;
    const uint8_t *a = (const uint8_t *)view.buf;
    int64_t B = (int64_t)view.len;
    if (B < 4) goto malformed;
    int64_t n = rd_u32le(a);
    if ((n_expected >= 0 && n != n_expected) || n > (B - 4) / 4) goto malformed;
    if (arrow_bufs_get(&bufs, (npy_intp)n, (npy_intp)(B - 4 - 4 * n)) < 0) goto finish;
    int64_t *o = bufs.o;
    uint8_t *d = bufs.d;
    const int64_t dlen = B - 4 - 4 * n;
    int err = 0, valid = 1;
    int64_t q = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t p = 4, block = 0;
    Py_ssize_t tail_unused;
    o[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        if (p + 4 > B) {
            err = 1;
            break;
        }
        int64_t ln = rd_u32le(a + p);
        p += 4;
        if (ln > B - p) {
            err = 1;
            break;
        }
        if (ln <= 16 && q + 16 <= dlen && p + 16 <= B) {
            /* short values: a fixed 16-byte copy (the next value overwrites the rest), no
             * mispredicted copy length */
            memcpy(d + q, a + p, 16);
        }
        else {
            memcpy(d + q, a + p, (size_t)ln);
        }
        if (validate && valid && ln && (a[p] & 0xC0) == 0x80) valid = 0;
        p += ln;
        q += ln;
        o[i + 1] = q;
        if (validate && valid && q - block >= ARROW_VALIDATE_BLOCK) {
            valid = utf8_check(d + block, (Py_ssize_t)(q - block), &tail_unused) == 0;
            block = q;
        }
    }
    if (!err && p < B && !allow_trailing) err = 1;
    if (!err && validate && valid && q > block)
        valid = utf8_check(d + block, (Py_ssize_t)(q - block), &tail_unused) == 0;
    Py_END_ALLOW_THREADS
    if (err) goto malformed;
    result = arrow_bufs_result(&bufs, q, valid);
    goto finish;
malformed:
    result = Py_NewRef(Py_None);
finish:
    arrow_bufs_release(&bufs);
    PyBuffer_Release(&view);
    return result;
}

/* fixed_to_offsets(buf, width, trailing, validate) -> (int64 offsets, uint8 data, valid): rows of
 * `width` bytes; a value ends at its first NUL (trailing=False: NC_STRING, netcdf-c) or loses its
 * trailing NULs only (trailing=True: NC_CHAR). The data array is n * width bytes of which only the
 * compacted values are written; arrow_result shrinks it to them. */
static PyObject *
fixed_to_offsets(PyObject *self, PyObject *args)
{
    Py_buffer view;
    arrow_bufs bufs = {0};
    Py_ssize_t width;
    int trailing, validate;
    if (!PyArg_ParseTuple(args, "y*npp|OO", &view, &width, &trailing, &validate, &bufs.off_out, &bufs.dat_out)) return NULL;
    PyObject *result = NULL;
    if (width <= 0 || view.len % width != 0) {
        PyErr_SetString(PyExc_ValueError, "buffer size is not a multiple of a positive width");
        goto finish;
    }
    npy_intp n = (npy_intp)(view.len / width);
    if (arrow_bufs_get(&bufs, n, (npy_intp)view.len) < 0) goto finish;
    int64_t *o = bufs.o;
    uint8_t *d = bufs.d;
    const uint8_t *src = (const uint8_t *)view.buf;
    int valid = 1;
    int64_t q = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t tail_unused;
    o[0] = 0;
    for (npy_intp i = 0; i < n; i++) {
        const uint8_t *p = src + (int64_t)i * width;
        int non_ascii;
        Py_ssize_t L = trailing ? row_rstrip_nul(p, width, &non_ascii) : row_first_nul(p, width, &non_ascii);
        /* short rows: copy the whole row (the next value overwrites the rest; q <= i * width, so it
         * stays inside the n * width bytes): one copy size, no mispredicted length */
        memcpy(d + q, p, (size_t)(width <= 64 ? width : L));
        if (validate && valid && non_ascii) valid = utf8_check(p, L, &tail_unused) == 0;
        q += L;
        o[i + 1] = q;
    }
    Py_END_ALLOW_THREADS
    result = arrow_bufs_result(&bufs, q, valid);
finish:
    arrow_bufs_release(&bufs);
    PyBuffer_Release(&view);
    return result;
}

/* utf32_to_offsets(buf, nchar, swap) -> (int64 offsets, uint8 data, True), or None when a code
 * point is not a Unicode scalar value (a surrogate or above U+10FFFF: the caller's numpy decode
 * names it): rows of `nchar` UTF-32 code points (numpy <U / >U, byte-swapped with swap) as UTF-8,
 * each without its trailing NUL code points (numpy's rule). The data array has the input's size
 * (4 bytes a code point at most) of which only the values are written. */
static PyObject *
utf32_to_offsets(PyObject *self, PyObject *args)
{
    Py_buffer view;
    arrow_bufs bufs = {0};
    Py_ssize_t nchar;
    int swap;
    if (!PyArg_ParseTuple(args, "y*np|OO", &view, &nchar, &swap, &bufs.off_out, &bufs.dat_out)) return NULL;
    PyObject *result = NULL;
    if (nchar <= 0 || view.len % (4 * nchar) != 0) {
        PyErr_SetString(PyExc_ValueError, "buffer size is not a multiple of 4 * a positive nchar");
        goto finish;
    }
    npy_intp n = (npy_intp)(view.len / (4 * nchar));
    if (arrow_bufs_get(&bufs, n, (npy_intp)view.len) < 0) goto finish;
    int64_t *o = bufs.o;
    uint8_t *d = bufs.d;
    const uint8_t *src = (const uint8_t *)view.buf;
    int bad = 0;
    int64_t q = 0;
    Py_BEGIN_ALLOW_THREADS
    o[0] = 0;
    for (npy_intp i = 0; i < n && !bad; i++) {
        const uint8_t *row = src + (int64_t)i * 4 * nchar;
        Py_ssize_t L = nchar;
        uint32_t c;
        while (L > 0) {
            memcpy(&c, row + 4 * (L - 1), 4);
            if (c) break;
            L--;
        }
        for (Py_ssize_t j = 0; j < L; j++) {
            memcpy(&c, row + 4 * j, 4);
            if (swap) c = (c >> 24) | ((c >> 8) & 0xFF00) | ((c << 8) & 0xFF0000) | (c << 24);
            if (c < 0x80) {
                d[q++] = (uint8_t)c;
            }
            else if (c < 0x800) {
                d[q++] = (uint8_t)(0xC0 | (c >> 6));
                d[q++] = (uint8_t)(0x80 | (c & 0x3F));
            }
            else if (c < 0x10000) {
                if (c >= 0xD800 && c <= 0xDFFF) {
                    bad = 1;
                    break;
                }
                d[q++] = (uint8_t)(0xE0 | (c >> 12));
                d[q++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
                d[q++] = (uint8_t)(0x80 | (c & 0x3F));
            }
            else if (c <= 0x10FFFF) {
                d[q++] = (uint8_t)(0xF0 | (c >> 18));
                d[q++] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
                d[q++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
                d[q++] = (uint8_t)(0x80 | (c & 0x3F));
            }
            else {
                bad = 1;
                break;
            }
        }
        o[i + 1] = q;
    }
    Py_END_ALLOW_THREADS
    result = bad ? Py_NewRef(Py_None) : arrow_bufs_result(&bufs, q, 1);
finish:
    arrow_bufs_release(&bufs);
    PyBuffer_Release(&view);
    return result;
}

/* offsets_check(data, offsets, validate) -> 0 (offsets inside data and monotone; with validate,
 * every value valid UTF-8), 1 (offsets out of bounds or decreasing: the caller's Python check
 * names the first bad one) or 2 (some value is not valid UTF-8).  Native int32/int64/uint32/uint64
 * offsets, the first need not be 0; the values between the first and last offset are validated as
 * one run (each value starts on a character boundary and the run is valid exactly when each value is). */
static PyObject *
offsets_check(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *off_obj;
    int validate;
    if (!PyArg_ParseTuple(args, "y*Op", &view, &off_obj, &validate)) return NULL;
    PyObject *result = NULL;
    PyArrayObject *off;
    int t;
    if (check_offsets(off_obj, &off, &t) < 0) goto finish;
    npy_intp n = PyArray_DIM(off, 0) - 1;
    const char *od = PyArray_BYTES(off);
    const uint8_t *data = (const uint8_t *)view.buf;
    int64_t dlen = (int64_t)view.len;
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
#define OFF(i) read_offset(od, t, i)
    int64_t first = OFF(0), prev = first;
    int boundary_bad = 0;
    if (prev < 0 || prev > dlen) status = 1;
    for (npy_intp i = 0; i < n && !status; i++) {
        int64_t nxt = OFF(i + 1);
        if (nxt < prev || nxt > dlen) {
            status = 1;
            break;
        }
        if (nxt > prev) boundary_bad |= (data[prev] & 0xC0) == 0x80;
        prev = nxt;
    }
#undef OFF
    Py_ssize_t tail_unused;
    if (!status && validate &&
        (boundary_bad || utf8_check(data + first, (Py_ssize_t)(prev - first), &tail_unused) != 0))
        status = 2;
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(status);
finish:
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"pack_at", pack_at, METH_VARARGS,
     "pack_at(out, positions, values): set out's C-order positions (None: all) to UTF-8 bytes"},
    {"fixed_to_T", fixed_to_T, METH_VARARGS,
     "fixed_to_T(buf, width, out, sel, policy, trailing=False, stats=None) -> intp array of bad output "
     "positions; stats[:2] = (values shortened under drop, first position)"},
    {"offsets_to_T", offsets_to_T, METH_VARARGS,
     "offsets_to_T(data, offsets, out, sel, policy, stats=None) -> bad output positions (stats as fixed_to_T)"},
    {"vlen_utf8_to_T", vlen_utf8_to_T, METH_VARARGS,
     "vlen_utf8_to_T(buf, n_expected, allow_trailing, out, sel, policy, stats=None) -> bad positions or None"},
    {"utf8_scan", utf8_scan, METH_VARARGS, "utf8_scan(values, allow_nul=False) -> (status, index, int64 lengths)"},
    {"fill_fixed_bounded", fill_fixed_bounded, METH_VARARGS,
     "fill_fixed_bounded(values, width, out, zeroed=False) -> (status, index, n_over, longest)"},
    {"T_to_objects", T_to_objects, METH_O, "T_to_objects(StringDType array) -> object array of str"},
    {"utf8_pack", utf8_pack, METH_VARARGS,
     "utf8_pack(objects_or_T, allow_nul=False) -> (status, index, offsets, data)"},
    {"vlen_utf8_from_offsets", vlen_utf8_from_offsets, METH_VARARGS,
     "vlen_utf8_from_offsets(data, int64 offsets) -> bytes (numcodecs vlen-utf8 layout)"},
    {"vlen_to_offsets", vlen_to_offsets, METH_VARARGS,
     "vlen_to_offsets(buf, n_expected, allow_trailing, validate[, off_out, dat_out]) -> (int64 offsets, uint8 data, valid) or None"},
    {"fixed_to_offsets", fixed_to_offsets, METH_VARARGS,
     "fixed_to_offsets(buf, width, trailing, validate[, off_out, dat_out]) -> (int64 offsets, uint8 data, valid)"},
    {"utf32_to_offsets", utf32_to_offsets, METH_VARARGS,
     "utf32_to_offsets(buf, nchar, swap[, off_out, dat_out]) -> (int64 offsets, uint8 data, True) or None (not text)"},
    {"offsets_check", offsets_check, METH_VARARGS,
     "offsets_check(data, offsets, validate) -> 0 ok, 1 offsets out of bounds or decreasing, 2 invalid UTF-8"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kernels", "Compiled string kernels for xr_zstrings.", -1, methods,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    import_array();
    utf8_table_init();
    return PyModule_Create(&moduledef);
}
