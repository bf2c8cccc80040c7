/*
 * mploader.scan._walk: the compiled fast path of Phase 1's walk.
 *
 * walk_v2(buf, start, end, check_crc, parse_markers) -> (p, rows) runs the "fast path" loop of
 * mploader.scan.walk.scan_buffer (the pure-Python reference) over any object with the buffer protocol
 * (bytes, memoryview, mmap), without the GIL:
 *
 *     while p < end - 23:
 *         offset, size, epoch, magic, crc, attributes = struct.unpack_from(">qiibIh", buf, p)
 *         total = size + 12
 *         if (magic < 2 or size < 49 or total > end - p or attributes & 0x20
 *                 or (check_crc and crc32c(buf[p + 21 : p + total]) != crc)):
 *             break
 *         positions.append(p)
 *         p += total
 *
 * and, beyond it, the control batches the reference leaves to its general path when they are simple:
 * one without a producer id (or any, when parse_markers is false) is accepted as a data batch is, and
 * one whose marker _canonical_marker parses (a 78-byte COMMIT or ABORT) is accepted with that marker.
 * Any other control batch stops the loop, and Python parses it.  Control batches are 2-7% of a
 * transactional topic's batches, and the general path costs ~5 us each against ~0.1 us here (perf/walk.py).
 *
 * Returns where it stopped and the batch-table rows of the batches it accepted (a bytearray of
 * mploader.scan.table.BATCH_TABLE rows, ROW_FIELDS), filled as scan.walk.batch_table fills the rows of v2
 * batches: what numpy's gather of the headers costs ~45 ns a batch, writing the row here a few.  Everything
 * after the loop breaks (every stop reason, other control batches, legacy entries) stays in Python.
 *
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, the value of the crc32c package): the
 * CPU's instruction where present (SSE4.2 on x86-64, the ARMv8 CRC extension on AArch64), three
 * streams interleaved over blocks of 3 x 256 and 3 x 65536 bytes and combined with "append n zero
 * bytes" operators (the method of Mark Adler's crc32c.c); otherwise slicing-by-8 tables.
 *
 * Built with -DMPLOADER_WALK_NO_PYTHON, the file holds only the CRC code (no Python.h), for a
 * stand-alone check on another architecture.
 */

#ifndef MPLOADER_WALK_NO_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * CRC-32C
 */

#define CRC32C_POLY 0x82f63b78u
/* Block sizes of the three-stream CRC. Measured on the development VM (AMD EPYC): LONG_BLOCK 8192 ran at
 * 33 GB/s in cache but 16 GB/s over a 256 MB buffer in memory, 65536 at 33 and 27 GB/s; batches below
 * 3 x LONG_BLOCK (all but the largest) use the SHORT_BLOCK streams only (28 GB/s in cache). */
#define SHORT_BLOCK 256
#define LONG_BLOCK 65536

typedef uint32_t (*crc_fn)(uint32_t crc, const unsigned char *p, size_t n);

static uint32_t crc_table[8][256];    /* slicing-by-8: crc_table[k][b] = byte b followed by k zero bytes */
static uint32_t shift_short[4][256];  /* the operator "append SHORT_BLOCK zero bytes", byte by byte */
static uint32_t shift_long[4][256];   /* ... LONG_BLOCK zero bytes */

static inline uint64_t load_le64(const unsigned char *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24
        | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint16_t load_le16(const unsigned char *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t load_be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* The portable CRC: slicing-by-8 (little-endian word assembly, so any host byte order). */
static uint32_t crc32c_portable(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint64_t w = load_le64(p) ^ c;
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff]
            ^ crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff]
            ^ crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

/* GF(2) 32x32 matrices (mat[i] = the image of bit i), for the zero-byte operators. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1)
            sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* op = the operator that appends len zero bytes to a raw CRC register (len a power of two). */
static void zeros_op(uint32_t *op, size_t len) {
    uint32_t odd[32], even[32];
    odd[0] = CRC32C_POLY; /* one zero bit */
    for (int n = 1; n < 32; n++)
        odd[n] = 1u << (n - 1);
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    for (;;) {             /* then 1, 2, 4, ... zero bytes */
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) {
            memcpy(op, even, sizeof even);
            return;
        }
        gf2_square(odd, even);
        len >>= 1;
        if (len == 0) {
            memcpy(op, odd, sizeof odd);
            return;
        }
    }
}

static void zeros_table(uint32_t table[4][256], size_t len) {
    uint32_t op[32];
    zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            table[k][n] = gf2_times(op, n << (8 * k));
}

static inline uint32_t crc_shift(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static void crc_init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^ crc_table[0][crc_table[k - 1][n] & 0xff];
    zeros_table(shift_short, SHORT_BLOCK);
    zeros_table(shift_long, LONG_BLOCK);
}

/*
 * The hardware CRC, one body for both instruction sets: STEP64/32/16/8 update a raw register with
 * 8/4/2/1 bytes.  Three independent streams over three consecutive blocks keep the CRC unit busy
 * (one instruction per cycle against a latency of three); the block CRCs are then joined by
 * shifting the running CRC over a block of zeros and adding the next block's CRC.
 */
#define CRC_HW_BODY(STEP64, STEP32, STEP16, STEP8)                                                    \
    uint64_t c0 = (uint32_t)~crc;                                                                     \
    while (n >= 3 * LONG_BLOCK) {                                                                     \
        uint64_t c1 = 0, c2 = 0;                                                                      \
        const unsigned char *block_end = p + LONG_BLOCK;                                              \
        do {                                                                                          \
            c0 = STEP64(c0, load_le64(p));                                                            \
            c1 = STEP64(c1, load_le64(p + LONG_BLOCK));                                               \
            c2 = STEP64(c2, load_le64(p + 2 * LONG_BLOCK));                                           \
            p += 8;                                                                                   \
        } while (p < block_end);                                                                      \
        c0 = crc_shift(shift_long, (uint32_t)c0) ^ c1;                                                \
        c0 = crc_shift(shift_long, (uint32_t)c0) ^ c2;                                                \
        p += 2 * LONG_BLOCK;                                                                          \
        n -= 3 * LONG_BLOCK;                                                                          \
    }                                                                                                 \
    while (n >= 3 * SHORT_BLOCK) {                                                                    \
        uint64_t c1 = 0, c2 = 0;                                                                      \
        const unsigned char *block_end = p + SHORT_BLOCK;                                             \
        do {                                                                                          \
            c0 = STEP64(c0, load_le64(p));                                                            \
            c1 = STEP64(c1, load_le64(p + SHORT_BLOCK));                                              \
            c2 = STEP64(c2, load_le64(p + 2 * SHORT_BLOCK));                                          \
            p += 8;                                                                                   \
        } while (p < block_end);                                                                      \
        c0 = crc_shift(shift_short, (uint32_t)c0) ^ c1;                                               \
        c0 = crc_shift(shift_short, (uint32_t)c0) ^ c2;                                               \
        p += 2 * SHORT_BLOCK;                                                                         \
        n -= 3 * SHORT_BLOCK;                                                                         \
    }                                                                                                 \
    while (n >= 8) {                                                                                  \
        c0 = STEP64(c0, load_le64(p));                                                                \
        p += 8;                                                                                       \
        n -= 8;                                                                                       \
    }                                                                                                 \
    uint32_t c = (uint32_t)c0;                                                                        \
    if (n & 4) {                                                                                      \
        c = STEP32(c, load_le32(p));                                                                  \
        p += 4;                                                                                       \
    }                                                                                                 \
    if (n & 2) {                                                                                      \
        c = STEP16(c, load_le16(p));                                                                  \
        p += 2;                                                                                       \
    }                                                                                                 \
    if (n & 1)                                                                                        \
        c = STEP8(c, *p);                                                                             \
    return ~c;

#if defined(MPLOADER_WALK_NO_HW_CRC) /* a build without the CPU's CRC instruction (portable tables only) */
#define HAVE_HW_CRC 0

#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
#define HW_CRC_NAME "sse4.2"
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    CRC_HW_BODY(_mm_crc32_u64, _mm_crc32_u32, _mm_crc32_u16, _mm_crc32_u8)
}

static int hw_crc_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}

#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__ARM_FEATURE_CRC32) || defined(__linux__) || defined(__APPLE__))
/* The instructions by inline assembly (".arch_extension crc" lets the assembler take them whatever
 * -march says), so no compiler needs the CRC extension enabled for this file; the CPU is asked at
 * run time (Linux: HWCAP_CRC32; Apple Silicon and -march=...+crc builds always have it). */
#define HAVE_HW_CRC 1
#define HW_CRC_NAME "armv8-crc"
#if !defined(__ARM_FEATURE_CRC32) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

#define ARM_CRC_STEP(insn, width, type)                                                       \
    static inline uint32_t arm_crc_##width(uint32_t c, type v) {                            \
        __asm__(".arch_extension crc\n\t" insn " %w0, %w0, %w1" : "+r"(c) : "r"((uint32_t)v)); \
        return c;                                                                           \
    }
ARM_CRC_STEP("crc32cw", 32, uint32_t)
ARM_CRC_STEP("crc32ch", 16, uint16_t)
ARM_CRC_STEP("crc32cb", 8, uint8_t)
static inline uint64_t arm_crc_64(uint64_t c, uint64_t v) {
    uint32_t r = (uint32_t)c;
    __asm__(".arch_extension crc\n\tcrc32cx %w0, %w0, %x1" : "+r"(r) : "r"(v));
    return r;
}

static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    CRC_HW_BODY(arm_crc_64, arm_crc_32, arm_crc_16, arm_crc_8)
}

static int hw_crc_available(void) {
#if defined(__ARM_FEATURE_CRC32) || defined(__APPLE__)
    return 1;
#else
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
}

#else
#define HAVE_HW_CRC 0
#endif

#if !HAVE_HW_CRC
#define HW_CRC_NAME "none"
static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    return crc32c_portable(crc, p, n);
}
static int hw_crc_available(void) {
    return 0;
}
#endif

static int hw_crc;                          /* the CPU has the instruction */
static crc_fn crc32c_fn = crc32c_portable; /* what walk_v2 and crc32c() use */

static void crc_init(void) {
    crc_init_tables();
    hw_crc = HAVE_HW_CRC && hw_crc_available();
    crc32c_fn = hw_crc ? crc32c_hardware : crc32c_portable;
}

#ifndef MPLOADER_WALK_NO_PYTHON

/* ---------------------------------------------------------------------------------------------
 * The walk
 */

#define ATTR_CONTROL 0x20
#define ATTR_CODEC 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define FIRST_ROWS 256 /* the first room for rows: a 16 KB segment of 64-byte batches */

/*
 * The arguments both walks share: (buf, start, end, ...). Returns 0 with view held (the caller releases it), or -1
 * with a Python error set (TypeError for the count, ValueError for a range outside the buffer).
 */
static int walk_arguments(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, const char *name,
                          const char *params, Py_buffer *view, Py_ssize_t *start, Py_ssize_t *end) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s(%s) takes %zd arguments (%zd given)", name, params, expected, nargs);
        return -1;
    }
    *start = PyLong_AsSsize_t(args[1]);
    if (*start == -1 && PyErr_Occurred())
        return -1;
    *end = PyLong_AsSsize_t(args[2]);
    if (*end == -1 && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return -1;
    if (*start < 0 || *end > view->len) {
        PyErr_Format(PyExc_ValueError, "%s: range [%zd, %zd) outside a buffer of %zd bytes", name, *start, *end,
                     view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/*
 * A row of mploader.scan.table.BATCH_TABLE: little-endian fields, packed, ROW_BYTES long. ROW_FIELDS below names
 * them for Python, which checks them against BATCH_TABLE before it uses this module (mploader.scan.compiled).
 */
#define ROW_BYTES 80
#define ROW_POSITION 0
#define ROW_SIZE 8
#define ROW_MAGIC 16
#define ROW_ATTRIBUTES 17
#define ROW_BASE_OFFSET 21
#define ROW_LAST_OFFSET 29
#define ROW_MAX_TIMESTAMP 37
#define ROW_PARTITION_LEADER_EPOCH 45
#define ROW_PRODUCER_ID 49
#define ROW_PRODUCER_EPOCH 57
#define ROW_BASE_SEQUENCE 59
#define ROW_RECORDS_COUNT 63
#define ROW_MARKER 67
#define ROW_COORDINATOR_EPOCH 68
#define ROW_MARKER_TIMESTAMP 72
#define MARKER_NONE (-1)

static inline void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static inline int64_t load_be64s(const unsigned char *p) {
    return (int64_t)(((uint64_t)load_be32(p) << 32) | load_be32(p + 4));
}

static inline int load_be16s(const unsigned char *p) {
    return (int)(int16_t)(uint16_t)((p[0] << 8) | p[1]);
}

/*
 * scan.walk._canonical_marker for the batch at h (a control batch of `total` bytes, its CRC already checked):
 * an uncompressed batch of 78 bytes holding one 17-byte COMMIT/ABORT record with 1-byte varints and no headers.
 * Fills (type, coordinator epoch, timestamp) and returns 1; 0 for any other batch (the Python record parser's).
 */
static int canonical_marker(const unsigned char *h, int64_t total, int64_t out[3]) {
    const unsigned char *r = h + 61;
    if (total != 78 || load_be32(h + 57) != 1 || (h[22] & ATTR_CODEC))
        return 0;
    /* record: length, attributes, timestamp delta, offset delta, key length, key (version, type),
     * value length, value (version, coordinator epoch), header count */
    int ts_delta = r[2], ctype = load_be16s(r + 7);
    if (r[0] != 32 || r[4] != 8 || r[9] != 12 || r[16] != 0 || (ts_delta & 0x80) || (r[3] & 0x80)
        || load_be16s(r + 5) < 0 || load_be16s(r + 10) < 0 || (ctype != 0 && ctype != 1))
        return 0;
    out[0] = ctype;
    out[1] = (int32_t)load_be32(r + 12);
    /* a Java long's addition: it wraps */
    out[2] = (h[22] & ATTR_LOG_APPEND_TIME)
        ? load_be64s(h + 35)
        : (int64_t)((uint64_t)load_be64s(h + 27) + (uint64_t)(int64_t)((ts_delta >> 1) ^ -(ts_delta & 1)));
    return 1;
}

/* The batch-table row of the v2 batch at h (position p, `total` bytes), as scan.walk.batch_table fills it. */
static void fill_row(unsigned char *row, const unsigned char *h, int64_t p, int64_t total, const int64_t *marker) {
    int64_t base_offset = load_be64s(h);
    put_le(row + ROW_POSITION, (uint64_t)p, 8);
    put_le(row + ROW_SIZE, (uint64_t)total, 8);
    row[ROW_MAGIC] = h[16];
    put_le(row + ROW_ATTRIBUTES, (uint64_t)((h[21] << 8) | h[22]), 4);
    put_le(row + ROW_BASE_OFFSET, (uint64_t)base_offset, 8);
    /* numpy's int64 addition: it wraps */
    put_le(row + ROW_LAST_OFFSET, (uint64_t)base_offset + (uint64_t)(int64_t)(int32_t)load_be32(h + 23), 8);
    put_le(row + ROW_MAX_TIMESTAMP, (uint64_t)load_be64s(h + 35), 8);
    put_le(row + ROW_PARTITION_LEADER_EPOCH, load_be32(h + 12), 4);
    put_le(row + ROW_PRODUCER_ID, (uint64_t)load_be64s(h + 43), 8);
    put_le(row + ROW_PRODUCER_EPOCH, (uint64_t)((h[51] << 8) | h[52]), 2);
    put_le(row + ROW_BASE_SEQUENCE, load_be32(h + 53), 4);
    put_le(row + ROW_RECORDS_COUNT, load_be32(h + 57), 4);
    row[ROW_MARKER] = (unsigned char)(marker == NULL ? MARKER_NONE : marker[0]);
    put_le(row + ROW_COORDINATOR_EPOCH, marker == NULL ? (uint64_t)-1 : (uint64_t)marker[1], 4);
    put_le(row + ROW_MARKER_TIMESTAMP, marker == NULL ? (uint64_t)-1 : (uint64_t)marker[2], 8);
}

static PyObject *walk_v2(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Py_ssize_t start, end;
    if (walk_arguments(args, nargs, 5, "walk_v2", "buf, start, end, check_crc, parse_markers", &view, &start,
                       &end) < 0)
        return NULL;
    /* one truth test at a time: the second must not run with the first's exception set */
    int check = PyObject_IsTrue(args[3]);
    int parse_markers = check < 0 ? -1 : PyObject_IsTrue(args[4]);
    PyObject *table = parse_markers < 0 ? NULL : PyByteArray_FromStringAndSize(NULL, 0);
    if (table == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }

    /* The rows go straight into the bytearray handed back. It grows (doubling) with the GIL held, when an accepted
     * batch finds it full (that batch is checked again after the growth: log2(rows) times a walk); so a walk that
     * accepts nothing allocates nothing (the Python walk calls this after each legacy entry it takes). The walk
     * between two growths runs without the GIL: nothing else can reach the new bytearray meanwhile. */
    const unsigned char *buf = (const unsigned char *)view.buf;
    const int64_t e = end, fast_end = e - 23;
    const crc_fn crc = crc32c_fn;
    int64_t p = start;
    size_t n = 0, cap = 0;
    int full = 0;
    do {
        if (full) {
            size_t grown = cap ? cap * 2 : FIRST_ROWS;
            if (PyByteArray_Resize(table, (Py_ssize_t)(grown * ROW_BYTES)) < 0) {
                PyBuffer_Release(&view);
                Py_DECREF(table);
                return NULL;
            }
            cap = grown;
        }
        unsigned char *rows = (unsigned char *)PyByteArray_AS_STRING(table);
        full = 0;
        Py_BEGIN_ALLOW_THREADS
        while (p < fast_end) {
            const unsigned char *h = buf + p;
            /* size: signed int32 at 8; magic: signed int8 at 16; crc: uint32 at 17; attributes at 21 */
            uint32_t usize = load_be32(h + 8);
            int64_t size = (int64_t)usize - ((usize & 0x80000000u) ? INT64_C(0x100000000) : 0);
            int magic = (int)h[16] - ((h[16] & 0x80) ? 256 : 0);
            int64_t total = size + 12;
            if (magic < 2 || size < 49 || total > e - p)
                break;
            if (check && crc(0, h + 21, (size_t)(total - 21)) != load_be32(h + 17))
                break;
            /* a control batch with a producer id: its marker, when it is the canonical one (else Python parses it) */
            int64_t marker[3];
            int has_marker = (h[22] & ATTR_CONTROL) && parse_markers && load_be64s(h + 43) >= 0;
            if (has_marker && !canonical_marker(h, total, marker))
                break;
            if (n == cap) {
                full = 1;
                break;
            }
            fill_row(rows + ROW_BYTES * n++, h, p, total, has_marker ? marker : NULL);
            p += total;
        }
        Py_END_ALLOW_THREADS
    } while (full);

    PyBuffer_Release(&view);
    if (PyByteArray_Resize(table, (Py_ssize_t)(n * ROW_BYTES)) < 0) {
        Py_DECREF(table);
        return NULL;
    }
    return Py_BuildValue("(LN)", (long long)p, table);
}

/*
 * last_entry: FileLogInputStream's framing alone (size fields, nothing else read), to find the last complete
 * entry of a range: what LogSegment.readNextOffset walks to (mploader.format.log.last_entry is the reference).
 */
static PyObject *last_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Py_ssize_t start, end;
    if (walk_arguments(args, nargs, 3, "last_entry", "buf, start, end", &view, &start, &end) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    int64_t p = start, last = -1, corrupt = 0;
    const int64_t e = end;
    Py_BEGIN_ALLOW_THREADS
    while (p < e - 17) {
        uint32_t usize = load_be32(buf + p + 8);
        int64_t size = (int64_t)usize - ((usize & 0x80000000u) ? INT64_C(0x100000000) : 0);
        if (size < 14) { /* CorruptRecordException */
            corrupt = 1;
            break;
        }
        if (p > e - 12 - size) /* a torn last entry: the walk ends */
            break;
        last = p;
        p += 12 + size;
    }
    Py_END_ALLOW_THREADS
    int64_t bad_size = 0;
    if (corrupt) {
        uint32_t usize = load_be32(buf + p + 8);
        bad_size = (int64_t)usize - ((usize & 0x80000000u) ? INT64_C(0x100000000) : 0);
    }
    PyBuffer_Release(&view);
    if (corrupt)
        return Py_BuildValue("(LLL)", (long long)last, (long long)p, (long long)bad_size);
    return Py_BuildValue("(LLO)", (long long)last, (long long)p, Py_None);
}

/*
 * index_draft(table, base_offset, interval) -> rows: scan.draft.index_draft of a batch table (a C-contiguous buffer
 * of ROW_BYTES-byte rows), in one pass where numpy needs log2(rows) gathers to follow the chain of indexed batches.
 * LogSegment.recover indexes a batch starting more than `interval` bytes after the last indexed one (byte 0 before
 * the first), offering the largest timestamp so far (at least -1) and the last offset of the batch that set it
 * (base_offset while none did). Returns a bytearray of DRAFT_BYTES-byte rows of little-endian int64s: row, offset,
 * position, max_timestamp, max_timestamp_offset (scan.draft.INDEX_DRAFT).
 */
#define DRAFT_BYTES 40
static PyObject *index_draft(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "index_draft(table, base_offset, interval) takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    long long base_offset = PyLong_AsLongLong(args[1]), interval = PyLong_AsLongLong(args[2]);
    if ((base_offset == -1 || interval == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.len % ROW_BYTES) {
        PyErr_Format(PyExc_ValueError, "index_draft: a buffer of %zd bytes is not a table of %d-byte rows", view.len,
                     ROW_BYTES);
        PyBuffer_Release(&view);
        return NULL;
    }
    const size_t n = (size_t)view.len / ROW_BYTES;
    const unsigned char *rows = (const unsigned char *)view.buf;
    /* at most one entry per row: the bytearray is sized for all, then cut to what was chosen */
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * DRAFT_BYTES));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *draft = (unsigned char *)PyByteArray_AS_STRING(out);
    size_t chosen = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t running = -1, holder_offset = base_offset, last = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *row = rows + ROW_BYTES * i;
        int64_t ts = (int64_t)load_le64(row + ROW_MAX_TIMESTAMP), position = (int64_t)load_le64(row + ROW_POSITION);
        int64_t last_offset = (int64_t)load_le64(row + ROW_LAST_OFFSET);
        if (ts > running) { /* this batch raises the largest timestamp */
            running = ts;
            holder_offset = last_offset;
        }
        if (position - last > interval) {
            unsigned char *d = draft + DRAFT_BYTES * chosen++;
            put_le(d, (uint64_t)i, 8);
            put_le(d + 8, (uint64_t)last_offset, 8);
            put_le(d + 16, (uint64_t)position, 8);
            put_le(d + 24, (uint64_t)running, 8);
            put_le(d + 32, (uint64_t)holder_offset, 8);
            last = position;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (PyByteArray_Resize(out, (Py_ssize_t)(chosen * DRAFT_BYTES)) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* crc32c(data, value=0) with the implementation given: the crc32c package's signature. */
static PyObject *crc_call(PyObject *const *args, Py_ssize_t nargs, const char *name, crc_fn fn) {
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s(data, value=0) takes 1 or 2 arguments (%zd given)", name, nargs);
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2) {
        value = PyLong_AsUnsignedLong(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (value > 0xffffffffUL) {
            PyErr_SetString(PyExc_OverflowError, "value must fit in 32 bits");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = fn((uint32_t)value, (const unsigned char *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return crc_call(args, nargs, "crc32c", crc32c_fn);
}

static PyObject *py_crc32c_portable(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return crc_call(args, nargs, "crc32c_portable", crc32c_portable);
}

static PyObject *py_crc32c_hardware(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (!hw_crc) {
        PyErr_SetString(PyExc_RuntimeError, "this CPU (or this build) has no CRC-32C instruction");
        return NULL;
    }
    return crc_call(args, nargs, "crc32c_hardware", crc32c_hardware);
}

static PyObject *py_crc_implementation(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyUnicode_FromString(crc32c_fn == crc32c_portable ? "portable" : HW_CRC_NAME);
}

static PyObject *py_hardware_crc(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyBool_FromLong(hw_crc);
}

static PyObject *py_use_portable_crc(PyObject *module, PyObject *flag) {
    (void)module;
    int portable = PyObject_IsTrue(flag);
    if (portable < 0)
        return NULL;
    int was = crc32c_fn == crc32c_portable;
    crc32c_fn = portable || !hw_crc ? crc32c_portable : crc32c_hardware;
    return PyBool_FromLong(was);
}

static PyMethodDef walk_methods[] = {
    {"walk_v2", (PyCFunction)(void (*)(void))walk_v2, METH_FASTCALL,
     "walk_v2(buf, start, end, check_crc, parse_markers) -> (p, rows)\n\n"
     "Walk v2 record batches of buf from byte start, as scan_buffer's fast loop does: stop at the first\n"
     "entry that is not a v2 batch (magic >= 2, size field >= 49, inside [start, end), CRC-32C valid when\n"
     "check_crc), at a control batch with a producer id whose marker is not a canonical COMMIT/ABORT record\n"
     "(when parse_markers), or when fewer than 24 bytes are left before end. Returns the position where the\n"
     "walk stopped and the batch-table rows of the accepted batches (a bytearray of ROW_BYTES-byte rows laid\n"
     "out as ROW_FIELDS says). The GIL is released during the walk."},
    {"last_entry", (PyCFunction)(void (*)(void))last_entry, METH_FASTCALL,
     "last_entry(buf, start, end) -> (last, stop, bad_size)\n\n"
     "Walk entries of buf from byte start by their size fields alone, as FileLogInputStream does: stop when\n"
     "17 or fewer bytes are left before end, at an entry that does not fit before end, or at a size field\n"
     "below 14 (then bad_size is that field, else None). Returns the start of the last complete entry (-1:\n"
     "none) and where the walk stopped. The GIL is released during the walk."},
    {"index_draft", (PyCFunction)(void (*)(void))index_draft, METH_FASTCALL,
     "index_draft(table, base_offset, interval) -> rows\n\n"
     "scan.draft.index_draft of a batch table (a C-contiguous buffer of ROW_BYTES-byte rows) in one pass: a\n"
     "bytearray of DRAFT_BYTES-byte rows of little-endian int64s (row, offset, position, max_timestamp,\n"
     "max_timestamp_offset). The GIL is released during the pass."},
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL,
     "crc32c(data, value=0) -> int: CRC-32C of data continuing value, with the implementation walk_v2 uses."},
    {"crc32c_portable", (PyCFunction)(void (*)(void))py_crc32c_portable, METH_FASTCALL,
     "crc32c_portable(data, value=0) -> int: CRC-32C by slicing-by-8 tables."},
    {"crc32c_hardware", (PyCFunction)(void (*)(void))py_crc32c_hardware, METH_FASTCALL,
     "crc32c_hardware(data, value=0) -> int: CRC-32C by the CPU's instruction (RuntimeError without one)."},
    {"crc_implementation", py_crc_implementation, METH_NOARGS,
     "crc_implementation() -> str: 'sse4.2', 'armv8-crc' or 'portable': what walk_v2 and crc32c use now."},
    {"hardware_crc", py_hardware_crc, METH_NOARGS,
     "hardware_crc() -> bool: whether this CPU and build have a CRC-32C instruction."},
    {"use_portable_crc", py_use_portable_crc, METH_O,
     "use_portable_crc(flag) -> bool: make walk_v2 and crc32c use the portable tables (True) or the CPU's\n"
     "instruction where present (False); returns whether the portable tables were in use. For tests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walk_module = {
    PyModuleDef_HEAD_INIT, "mploader.scan._walk",
    "The compiled fast path of Phase 1's walk (see mploader.scan.walk) and its CRC-32C.", -1, walk_methods,
    NULL, NULL, NULL, NULL,
};

/* What mploader.scan.compiled expects (its VERSION): raised whenever a function's arguments, results or meaning
 * change, so that a build of an older _walk.c is refused even where its row layouts still match. */
#define WALK_VERSION 1

PyMODINIT_FUNC PyInit__walk(void) {
    crc_init();
    PyObject *module = PyModule_Create(&walk_module);
    if (module == NULL)
        return NULL;
    /* the row layout walk_v2 writes: (name, byte offset) of each field in order, and the row's size */
    PyObject *fields = Py_BuildValue(
        "((si)(si)(si)(si)(si)(si)(si)(si)(si)(si)(si)(si)(si)(si)(si))", "position", ROW_POSITION, "size", ROW_SIZE,
        "magic", ROW_MAGIC, "attributes", ROW_ATTRIBUTES, "base_offset", ROW_BASE_OFFSET, "last_offset",
        ROW_LAST_OFFSET, "max_timestamp", ROW_MAX_TIMESTAMP, "partition_leader_epoch", ROW_PARTITION_LEADER_EPOCH,
        "producer_id", ROW_PRODUCER_ID, "producer_epoch", ROW_PRODUCER_EPOCH, "base_sequence", ROW_BASE_SEQUENCE,
        "records_count", ROW_RECORDS_COUNT, "marker", ROW_MARKER, "coordinator_epoch", ROW_COORDINATOR_EPOCH,
        "marker_timestamp", ROW_MARKER_TIMESTAMP);
    PyObject *draft_fields = Py_BuildValue("(sssss)", "row", "offset", "position", "max_timestamp",
                                           "max_timestamp_offset");
    /* PyModule_AddObjectRef takes its own reference (or none when it fails): ours are dropped either way */
    int failed = fields == NULL || draft_fields == NULL || PyModule_AddObjectRef(module, "ROW_FIELDS", fields) < 0
                 || PyModule_AddIntConstant(module, "VERSION", WALK_VERSION) < 0
                 || PyModule_AddIntConstant(module, "ROW_BYTES", ROW_BYTES) < 0
                 || PyModule_AddIntConstant(module, "DRAFT_BYTES", DRAFT_BYTES) < 0
                 || PyModule_AddObjectRef(module, "DRAFT_FIELDS", draft_fields) < 0;
    Py_XDECREF(fields);
    Py_XDECREF(draft_fields);
    if (failed) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

#endif /* MPLOADER_WALK_NO_PYTHON */
