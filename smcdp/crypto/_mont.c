/*
 * smcdp.crypto._mont -- Montgomery-domain kernels for the Paillier engine.
 *
 * Why this file exists (docs/benchmarks.md): with gmpy2 every step of a
 * fixed-base exponentiation or of Pippenger's bucket method is a Python-level
 * `a * b % m`, i.e. a GMP multiplication followed by a GMP *division*, plus two
 * object allocations and the interpreter's dispatch.  The profile showed that
 * division and overhead, not the multiplication, dominate.  No maintained Python
 * package exposes Montgomery multiplication or fixed-base / multi-exponentiation
 * loops over GMP (gmpy2 offers powmod only), so the two hot loops live here:
 *
 *   FixedBase(base, modulus, exp_bits, window).pow(exponent)
 *       base^exponent mod modulus from a BGMW table of base^(d * 2^(w*i)),
 *       kept in Montgomery form: ceil(exp_bits / w) Montgomery products.
 *   multi_exp(bases, exps, modulus, window)
 *       prod bases[j]^exps[j] mod modulus by Pippenger's bucket method.
 *
 * The arithmetic is GMP's own assembly (mpn_mul_n / mpn_sqr / mpn_addmul_1); the
 * only thing written here is Montgomery reduction (REDC) on top of them, which
 * GMP uses internally for mpz_powm but does not export.  Integers cross the
 * boundary as little-endian byte strings; the Python wrapper (native.py) converts.
 * Every call releases the GIL while it computes.
 *
 * Where the CPU has AVX-512 IFMA (Intel since Ice Lake and Sapphire Rapids, AMD since Zen 4) and the
 * modulus has 1400 to 16 * 416 - 2 bits, the Montgomery products run there instead (mm52_* below):
 * residues as digits of 52 bits in 64-bit words, R = 2^(52 L), eight digit products per instruction --
 * 3.2x GMP's product at 4096 bits (n^2 of a 2048-bit key), 1.8x at 2048 (docs/crypto.md and
 * bench/native_bench.py).
 * GMP offers no such kernel and OpenSSL's (RSAZ) handles only 1024..2048-bit moduli of RSA's CRT,
 * so it is written here; `SMCDP_NATIVE_IFMA=0` switches it off and the tests compare both paths.
 *
 * Not constant time: table indices and the final conditional subtraction depend
 * on the (secret) exponent, as with phe/gmpy2.  See docs/crypto.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <gmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define HAVE_PTHREADS 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_IFMA_BUILD 1
#endif

#define MAX_WINDOW 20
/* Size limits: every size below is checked against these before anything is allocated, so no
 * input can make this file exhaust memory or a stack.  A modulus of 2^20 bits (128 KiB) is 32
 * times the largest one smcdp uses (n^2 of a 16384-bit Paillier key); 4 GiB bounds a table or
 * the buckets of one multi-exponentiation (the Python side budgets 192 MB per table). */
#define MAX_MODULUS_BYTES ((Py_ssize_t)1 << 17)
#define MAX_TABLE_BYTES ((size_t)1 << 32)
#define MAX_EXPONENT_BYTES ((Py_ssize_t)1 << 20)
/* multi_exp_rows shares its work among at most this many threads */
#define MAX_ROW_THREADS 16

/* ------------------------------------------------------------------ Montgomery context */
struct mont_ctx;
typedef void (*mm52_fn)(uint64_t *r, const uint64_t *a, const uint64_t *b, const struct mont_ctx *c);
typedef void (*mm52x2_fn)(uint64_t *r1, const uint64_t *a1, const uint64_t *b1, const struct mont_ctx *c1,
                          uint64_t *r2, const uint64_t *a2, const uint64_t *b2, const struct mont_ctx *c2);

/* A residue is `w` 64-bit words: GMP's n limbs (R = 2^(64 n)), or with IFMA L = 8 V digits of 52 bits
 * (R = 2^(52 L) > 4 m, and every residue is kept below 2 m: the almost-Montgomery product's range). */
typedef struct mont_ctx {
    mp_size_t n;     /* limbs of the modulus (top limb non-zero) */
    mp_size_t w;     /* words of a residue: n, or L with IFMA */
    mp_limb_t *m;    /* the odd modulus */
    mp_limb_t minv;  /* -m^-1 mod 2^GMP_NUMB_BITS */
    mp_limb_t *r2;   /* R^2 mod m, a residue: converts into Montgomery form */
    uint64_t *m52;   /* IFMA: m in L digits of 52 bits (NULL: GMP's path) */
    uint64_t m0inv;  /* IFMA: -m^-1 mod 2^52 */
    mm52_fn mm52;    /* IFMA: the product for this L */
} mont_ctx;

static void ctx_free(mont_ctx *c)
{
    PyMem_Free(c->m);
    PyMem_Free(c->r2);
    PyMem_Free(c->m52);
    c->m = c->r2 = NULL;
    c->m52 = NULL;
}

/* ------------------------------------------------------------------ AVX-512 IFMA products */
#define MASK52 ((uint64_t)0xFFFFFFFFFFFFFull)
#define IFMA_MAX_V 16 /* digit vectors: L <= 128 digits, moduli up to 6654 bits (n^2 of 3072-bit keys) */
/* Below this the serial part of a digit step (a lane to a scalar and back) outweighs the eight-way
 * products: measured 0.3-0.9x GMP's at 256-1280 bits, 1.15x at 1400, 1.8x at 2048, 3x at 4096. */
#define IFMA_MIN_BITS 1400

/* 1 where the CPU and the OS run AVX-512 IFMA and SMCDP_NATIVE_IFMA is not "0" (set once at import;
 * _set_ifma lets the tests compare both paths in one process). */
static int use_ifma = 0;

/* n limbs -> L digits of 52 bits */
static void limbs_to_52(uint64_t *d, const mp_limb_t *x, mp_size_t n, mp_size_t L)
{
    for (mp_size_t j = 0; j < L; j++) {
        size_t bit = (size_t)j * 52, li = bit / 64, off = bit % 64;
        uint64_t v = 0;
        if ((mp_size_t)li < n) {
            v = x[li] >> off;
            if (off > 12 && (mp_size_t)(li + 1) < n)
                v |= x[li + 1] << (64 - off);
        }
        d[j] = v & MASK52;
    }
}

/* L digits of 52 bits (each below 2^52) -> n limbs; the value must fit n limbs */
static void limbs_from_52(mp_limb_t *x, const uint64_t *d, mp_size_t n, mp_size_t L)
{
    memset(x, 0, (size_t)n * sizeof(mp_limb_t));
    for (mp_size_t j = 0; j < L; j++) {
        size_t bit = (size_t)j * 52, li = bit / 64, off = bit % 64;
        if ((mp_size_t)li < n)
            x[li] |= d[j] << off;
        if (off > 12 && (mp_size_t)(li + 1) < n)
            x[li + 1] |= d[j] >> (64 - off);
    }
}

#ifdef HAVE_IFMA_BUILD
/* r = a b / 2^(52 L) mod m, "almost": r < 2m for a, b < 2m (R > 4m).  Digit-serial Montgomery with
 * lazy carries: per digit b_i the low halves of a b_i and m y go to the accumulator's lanes, y making
 * its lowest digit vanish; the accumulator moves down one digit (the lowest one's carry into the new
 * lowest) and the high halves, which belong one digit up, are added in place.  A lane takes at most
 * four 52-bit halves a step for at most L <= 128 steps: below 2^61, no overflow.  V is a constant in
 * each instance so that the accumulator, a and m can stay in the 32 vector registers: they do for V <= 9
 * (3742 bits); from V = 10 (4158 bits, n^2 of a 2048-bit key) some spill to the stack. */
#define DEF_MM52(VV)                                                                                       \
    __attribute__((target("avx512f,avx512ifma"))) static void mm52_##VV(                                 \
        uint64_t *r, const uint64_t *a, const uint64_t *b, const mont_ctx *c)                            \
    {                                                                                                    \
        enum { V = VV, L = 8 * VV };                                                                     \
        __m512i acc[V], A[V], M[V];                                                                      \
        const __m512i zero = _mm512_setzero_si512();                                                     \
        _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                             \
        {                                                                                                \
            acc[v] = zero;                                                                               \
            A[v] = _mm512_loadu_si512((const void *)(a + 8 * v));                                       \
            M[v] = _mm512_loadu_si512((const void *)(c->m52 + 8 * v));                                   \
        }                                                                                                \
        const uint64_t m0inv = c->m0inv;                                                                 \
        for (int i = 0; i < L; i++) {                                                                    \
            const __m512i B = _mm512_set1_epi64((long long)b[i]);                                        \
            _Pragma("GCC unroll 16") for (int v = 0; v < V; v++) acc[v] =                                \
                _mm512_madd52lo_epu64(acc[v], A[v], B);                                                  \
            uint64_t t0 = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(acc[0]));                   \
            const __m512i Y = _mm512_set1_epi64((long long)((t0 * m0inv) & MASK52));                     \
            _Pragma("GCC unroll 16") for (int v = 0; v < V; v++) acc[v] =                                \
                _mm512_madd52lo_epu64(acc[v], M[v], Y);                                                  \
            uint64_t carry = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(acc[0])) >> 52;          \
            _Pragma("GCC unroll 16") for (int v = 0; v < V - 1; v++) acc[v] =                            \
                _mm512_alignr_epi64(acc[v + 1], acc[v], 1);                                              \
            acc[V - 1] = _mm512_alignr_epi64(zero, acc[V - 1], 1);                                       \
            acc[0] = _mm512_add_epi64(acc[0], _mm512_maskz_set1_epi64(1, (long long)carry));             \
            _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                         \
            {                                                                                            \
                acc[v] = _mm512_madd52hi_epu64(acc[v], A[v], B);                                         \
                acc[v] = _mm512_madd52hi_epu64(acc[v], M[v], Y);                                         \
            }                                                                                            \
        }                                                                                                \
        uint64_t tmp[L], carry = 0;                                                                      \
        _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                             \
            _mm512_storeu_si512((void *)(tmp + 8 * v), acc[v]);                                          \
        for (int j = 0; j < L; j++) { /* r < 2m < R: no carry leaves the top digit */                   \
            uint64_t s = tmp[j] + carry;                                                                 \
            r[j] = s & MASK52;                                                                           \
            carry = s >> 52;                                                                             \
        }                                                                                                \
    }
DEF_MM52(1)
DEF_MM52(2)
DEF_MM52(3)
DEF_MM52(4)
DEF_MM52(5)
DEF_MM52(6)
DEF_MM52(7)
DEF_MM52(8)
DEF_MM52(9)
DEF_MM52(10)
DEF_MM52(11)
DEF_MM52(12)
DEF_MM52(13)
DEF_MM52(14)
DEF_MM52(15)
DEF_MM52(16)
static const mm52_fn mm52_for[IFMA_MAX_V + 1] = {
    NULL,     mm52_1,  mm52_2,  mm52_3,  mm52_4,  mm52_5,  mm52_6,  mm52_7,  mm52_8,
    mm52_9,   mm52_10, mm52_11, mm52_12, mm52_13, mm52_14, mm52_15, mm52_16,
};

/* Two independent products of the same digit count, interleaved step by step: r1 = a1 b1 / R mod m1 and
 * r2 = a2 b2 / R mod m2 (almost, as mm52_*).  A digit step of one product is a serial chain (the lowest
 * lane to a scalar, y, back to a vector, the shift) of a few dozen cycles, and at V <= 5 (a 2048-bit p^2)
 * it leaves the IFMA units mostly idle: the other product's step fills them (OpenSSL's rsaz_avx512 "x2"
 * does this for RSA's two CRT halves).  Same arithmetic and bounds as mm52_*; V <= 5 keeps all 6 V
 * vectors in registers. */
#define DEF_MM52X2(VV)                                                                                     \
    __attribute__((target("avx512f,avx512ifma"))) static void mm52x2_##VV(                               \
        uint64_t *r1, const uint64_t *a1, const uint64_t *b1, const mont_ctx *c1, uint64_t *r2,          \
        const uint64_t *a2, const uint64_t *b2, const mont_ctx *c2)                                      \
    {                                                                                                    \
        enum { V = VV, L = 8 * VV };                                                                     \
        __m512i acc1[V], A1[V], M1[V], acc2[V], A2[V], M2[V];                                            \
        const __m512i zero = _mm512_setzero_si512();                                                     \
        _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                             \
        {                                                                                                \
            acc1[v] = acc2[v] = zero;                                                                    \
            A1[v] = _mm512_loadu_si512((const void *)(a1 + 8 * v));                                      \
            M1[v] = _mm512_loadu_si512((const void *)(c1->m52 + 8 * v));                                 \
            A2[v] = _mm512_loadu_si512((const void *)(a2 + 8 * v));                                      \
            M2[v] = _mm512_loadu_si512((const void *)(c2->m52 + 8 * v));                                 \
        }                                                                                                \
        const uint64_t m0inv1 = c1->m0inv, m0inv2 = c2->m0inv;                                           \
        for (int i = 0; i < L; i++) {                                                                    \
            const __m512i B1 = _mm512_set1_epi64((long long)b1[i]);                                      \
            const __m512i B2 = _mm512_set1_epi64((long long)b2[i]);                                      \
            _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                         \
            {                                                                                            \
                acc1[v] = _mm512_madd52lo_epu64(acc1[v], A1[v], B1);                                     \
                acc2[v] = _mm512_madd52lo_epu64(acc2[v], A2[v], B2);                                     \
            }                                                                                            \
            uint64_t t1 = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(acc1[0]));                  \
            uint64_t t2 = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(acc2[0]));                  \
            const __m512i Y1 = _mm512_set1_epi64((long long)((t1 * m0inv1) & MASK52));                   \
            const __m512i Y2 = _mm512_set1_epi64((long long)((t2 * m0inv2) & MASK52));                   \
            _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                         \
            {                                                                                            \
                acc1[v] = _mm512_madd52lo_epu64(acc1[v], M1[v], Y1);                                     \
                acc2[v] = _mm512_madd52lo_epu64(acc2[v], M2[v], Y2);                                     \
            }                                                                                            \
            uint64_t k1 = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(acc1[0])) >> 52;            \
            uint64_t k2 = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(acc2[0])) >> 52;            \
            _Pragma("GCC unroll 16") for (int v = 0; v < V - 1; v++)                                     \
            {                                                                                            \
                acc1[v] = _mm512_alignr_epi64(acc1[v + 1], acc1[v], 1);                                  \
                acc2[v] = _mm512_alignr_epi64(acc2[v + 1], acc2[v], 1);                                  \
            }                                                                                            \
            acc1[V - 1] = _mm512_alignr_epi64(zero, acc1[V - 1], 1);                                     \
            acc2[V - 1] = _mm512_alignr_epi64(zero, acc2[V - 1], 1);                                     \
            acc1[0] = _mm512_add_epi64(acc1[0], _mm512_maskz_set1_epi64(1, (long long)k1));              \
            acc2[0] = _mm512_add_epi64(acc2[0], _mm512_maskz_set1_epi64(1, (long long)k2));              \
            _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                         \
            {                                                                                            \
                acc1[v] = _mm512_madd52hi_epu64(acc1[v], A1[v], B1);                                     \
                acc2[v] = _mm512_madd52hi_epu64(acc2[v], A2[v], B2);                                     \
                acc1[v] = _mm512_madd52hi_epu64(acc1[v], M1[v], Y1);                                     \
                acc2[v] = _mm512_madd52hi_epu64(acc2[v], M2[v], Y2);                                     \
            }                                                                                            \
        }                                                                                                \
        uint64_t tmp1[L], tmp2[L], carry1 = 0, carry2 = 0;                                               \
        _Pragma("GCC unroll 16") for (int v = 0; v < V; v++)                                             \
        {                                                                                                \
            _mm512_storeu_si512((void *)(tmp1 + 8 * v), acc1[v]);                                        \
            _mm512_storeu_si512((void *)(tmp2 + 8 * v), acc2[v]);                                        \
        }                                                                                                \
        for (int j = 0; j < L; j++) { /* r < 2m < R: no carry leaves the top digit */                   \
            uint64_t s1 = tmp1[j] + carry1, s2 = tmp2[j] + carry2;                                       \
            r1[j] = s1 & MASK52;                                                                         \
            carry1 = s1 >> 52;                                                                           \
            r2[j] = s2 & MASK52;                                                                         \
            carry2 = s2 >> 52;                                                                           \
        }                                                                                                \
    }
#define IFMA_X2_MAX_V 8
DEF_MM52X2(1)
DEF_MM52X2(2)
DEF_MM52X2(3)
DEF_MM52X2(4)
DEF_MM52X2(5)
DEF_MM52X2(6)
DEF_MM52X2(7)
DEF_MM52X2(8)
static const mm52x2_fn mm52x2_for[IFMA_X2_MAX_V + 1] = {
    NULL, mm52x2_1, mm52x2_2, mm52x2_3, mm52x2_4, mm52x2_5, mm52x2_6, mm52x2_7, mm52x2_8,
};

static int cpu_has_ifma(void)
{
    __builtin_cpu_init();
    /* libgcc's and compiler-rt's checks include the OS's saving of the ZMM state (XCR0) */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512ifma");
}
#else
static const mm52_fn mm52_for[IFMA_MAX_V + 1] = {NULL};
#define IFMA_X2_MAX_V 8
static const mm52x2_fn mm52x2_for[IFMA_X2_MAX_V + 1] = {NULL};
static int cpu_has_ifma(void) { return 0; }
#endif

/* x := x mod m for a residue x < 2m in 52-bit digits */
static void canon52(uint64_t *x, const mont_ctx *c)
{
    mp_size_t L = c->w;
    mp_size_t j = L;
    while (j-- > 0)
        if (x[j] != c->m52[j])
            break;
    if (j >= 0 && x[j] < c->m52[j])
        return; /* x < m */
    uint64_t borrow = 0;
    for (j = 0; j < L; j++) {
        uint64_t d = x[j] - c->m52[j] - borrow;
        borrow = d >> 63;
        x[j] = d & MASK52;
    }
}

/* little-endian bytes -> n limbs (zero-padded); caller checks that len fits */
static void bytes_to_limbs(const unsigned char *b, Py_ssize_t len, mp_limb_t *out, mp_size_t n)
{
    memset(out, 0, (size_t)n * sizeof(mp_limb_t));
    for (Py_ssize_t k = 0; k < len; k++)
        out[k / sizeof(mp_limb_t)] |= (mp_limb_t)b[k] << (8 * (k % sizeof(mp_limb_t)));
}

static PyObject *limbs_to_bytes(const mp_limb_t *x, mp_size_t n)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * (Py_ssize_t)sizeof(mp_limb_t));
    if (!out)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (mp_size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof(mp_limb_t); k++)
            *p++ = (unsigned char)(x[i] >> (8 * k));
    return out;
}

/* a residue (below 2m) as the n-limb little-endian bytes of its value mod m; tp: 2w words of scratch (it
 * uses tp[0, w + n), and w >= n) */
static PyObject *res_to_bytes(const mp_limb_t *x, const mont_ctx *c, mp_limb_t *tp)
{
    if (!c->m52)
        return limbs_to_bytes(x, c->n);
    memcpy(tp, x, (size_t)c->w * sizeof(uint64_t));
    canon52(tp, c);
    limbs_from_52(tp + c->w, tp, c->n, c->w);
    return limbs_to_bytes(tp + c->w, c->n);
}

/* significant length of a little-endian byte string */
static Py_ssize_t trimmed_len(const unsigned char *b, Py_ssize_t len)
{
    while (len > 0 && b[len - 1] == 0)
        len--;
    return len;
}

/* bit length of a little-endian byte string */
static size_t byte_bits(const unsigned char *b, Py_ssize_t len)
{
    len = trimmed_len(b, len);
    if (len == 0)
        return 0;
    size_t bits = (size_t)(len - 1) * 8;
    for (unsigned top = b[len - 1]; top; top >>= 1)
        bits++;
    return bits;
}

static mp_size_t limbs_for(Py_ssize_t bytes)
{
    return (mp_size_t)((bytes + (Py_ssize_t)sizeof(mp_limb_t) - 1) / (Py_ssize_t)sizeof(mp_limb_t));
}

/* x mod m for a k-limb x into n limbs (k may be < n).  The quotient goes to the heap, never
 * the stack: its size follows the modulus, which the caller may choose.  Returns 0, or -1
 * when out of memory (no Python exception set: this may run without the GIL). */
static int reduce_into(mp_limb_t *rp, const mp_limb_t *xp, mp_size_t k, const mont_ctx *c)
{
    mp_size_t n = c->n;
    if (k < n) { /* already below m, whose top limb is non-zero */
        memset(rp, 0, (size_t)n * sizeof(mp_limb_t));
        memcpy(rp, xp, (size_t)k * sizeof(mp_limb_t));
        return 0;
    }
    mp_limb_t *q = malloc((size_t)(k - n + 1) * sizeof(mp_limb_t));
    if (!q)
        return -1;
    mpn_tdiv_qr(q, rp, 0, xp, k, c->m, n);
    free(q);
    return 0;
}

/* Returns 0 on success, -1 with a Python exception set. */
static int ctx_init(mont_ctx *c, const unsigned char *mb, Py_ssize_t mlen)
{
    memset(c, 0, sizeof(*c));
    mlen = trimmed_len(mb, mlen);
    if (mlen == 0 || (mb[0] & 1) == 0 || (mlen == 1 && mb[0] == 1)) {
        PyErr_SetString(PyExc_ValueError, "Montgomery arithmetic needs an odd modulus > 1");
        return -1;
    }
    if (mlen > MAX_MODULUS_BYTES) {
        PyErr_Format(PyExc_ValueError, "modulus of %zd bytes is larger than the limit of %zd bytes",
                     mlen, MAX_MODULUS_BYTES);
        return -1;
    }
    mp_size_t n = limbs_for(mlen);
    c->n = n;
    c->m = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    c->r2 = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    mp_limb_t *t = PyMem_Calloc((size_t)(2 * n + 1), sizeof(mp_limb_t));
    if (!c->m || !c->r2 || !t) {
        PyMem_Free(t);
        ctx_free(c);
        PyErr_NoMemory();
        return -1;
    }
    bytes_to_limbs(mb, mlen, c->m, n);
    /* Newton iteration for m^-1 mod 2^64: each step doubles the correct bits (3 -> 96). */
    mp_limb_t inv = c->m[0];
    for (int i = 0; i < 5; i++)
        inv *= (mp_limb_t)2 - c->m[0] * inv;
    c->minv = (mp_limb_t)0 - inv;
    c->w = n;
    size_t bits = byte_bits(mb, mlen), V = (bits + 2 + 415) / 416; /* 52 L >= bits + 2: R > 4m */
    if (use_ifma && bits >= IFMA_MIN_BITS && V <= IFMA_MAX_V && mm52_for[V]) {
        mp_size_t L = (mp_size_t)(8 * V), rl = (mp_size_t)((104 * (size_t)L) / 64 + 1);
        mp_limb_t *big = PyMem_Calloc((size_t)rl, sizeof(mp_limb_t));
        c->m52 = PyMem_Calloc((size_t)L, sizeof(uint64_t));
        PyMem_Free(c->r2);
        c->r2 = PyMem_Calloc((size_t)L, sizeof(uint64_t));
        if (!big || !c->m52 || !c->r2) {
            PyMem_Free(big);
            PyMem_Free(t);
            ctx_free(c);
            PyErr_NoMemory();
            return -1;
        }
        big[rl - 1] = (mp_limb_t)1 << ((104 * (size_t)L) % 64); /* R^2 = 2^(104 L) */
        int rc = reduce_into(t, big, rl, c);
        PyMem_Free(big);
        if (rc < 0) {
            PyMem_Free(t);
            ctx_free(c);
            PyErr_NoMemory();
            return -1;
        }
        limbs_to_52(c->r2, t, n, L);
        limbs_to_52(c->m52, c->m, n, L);
        c->m0inv = c->minv & MASK52;
        c->mm52 = mm52_for[V];
        c->w = L;
        PyMem_Free(t);
        return 0;
    }
    t[2 * n] = 1; /* R^2 */
    int rc = reduce_into(c->r2, t, 2 * n + 1, c);
    PyMem_Free(t);
    if (rc < 0) {
        ctx_free(c);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* rp = tp / R mod m; tp has 2n limbs and is destroyed (GMP's redc_1 scheme). */
static void redc(mp_limb_t *rp, mp_limb_t *tp, const mont_ctx *c)
{
    mp_size_t n = c->n;
    for (mp_size_t i = 0; i < n; i++) {
        mp_limb_t q = tp[i] * c->minv;
        tp[i] = mpn_addmul_1(tp + i, c->m, n, q); /* tp[i] became 0: keep the carry there */
    }
    mp_limb_t cy = mpn_add_n(rp, tp + n, tp, n);
    if (cy || mpn_cmp(rp, c->m, n) >= 0)
        mpn_sub_n(rp, rp, c->m, n);
}

/* rp = ap * bp / R mod m; rp may alias ap or bp; tp is 2n limbs of scratch. */
static void mont_mul(mp_limb_t *rp, const mp_limb_t *ap, const mp_limb_t *bp, const mont_ctx *c,
                     mp_limb_t *tp)
{
    if (c->m52) {
        c->mm52(rp, ap, bp, c);
        return;
    }
    if (ap == bp)
        mpn_sqr(tp, ap, c->n);
    else
        mpn_mul_n(tp, ap, bp, c->n);
    redc(rp, tp, c);
}

/* the residue 1 (normal form) */
static void res_one(mp_limb_t *x, const mont_ctx *c)
{
    memset(x, 0, (size_t)c->w * sizeof(mp_limb_t));
    x[0] = 1;
}

static void from_mont(mp_limb_t *rp, const mp_limb_t *xp, const mont_ctx *c, mp_limb_t *tp)
{
    if (c->m52) { /* x / R: the product with 1, below m + 1 */
        uint64_t one[8 * IFMA_MAX_V] = {1};
        c->mm52(rp, xp, one, c);
        canon52(rp, c);
        return;
    }
    memcpy(tp, xp, (size_t)c->n * sizeof(mp_limb_t));
    memset(tp + c->n, 0, (size_t)c->n * sizeof(mp_limb_t));
    redc(rp, tp, c);
}

/* Digit of `w` bits at bit position `pos` of the k-limb exponent e. */
static unsigned digit_at(const mp_limb_t *e, mp_size_t k, size_t pos, int w)
{
    size_t li = pos / GMP_NUMB_BITS, off = pos % GMP_NUMB_BITS;
    if ((mp_size_t)li >= k)
        return 0;
    mp_limb_t v = e[li] >> off;
    if (off + (size_t)w > GMP_NUMB_BITS && (mp_size_t)(li + 1) < k)
        v |= e[li + 1] << (GMP_NUMB_BITS - off);
    return (unsigned)(v & (((mp_limb_t)1 << w) - 1));
}

/* Reads a Python bytes-like (little-endian, at most n limbs) into the residue out, reduced mod m,
 * and converted to Montgomery form when `convert` is set.  tp: scratch of 2w words. */
static int load_residue(PyObject *obj, const mont_ctx *c, mp_limb_t *out, mp_limb_t *tp, int convert)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return -1;
    Py_ssize_t len = trimmed_len(view.buf, view.len);
    mp_size_t k = limbs_for(len);
    if (k > c->n) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "residue is wider than the modulus");
        return -1;
    }
    bytes_to_limbs(view.buf, len, tp, c->n); /* tp has 2w >= 2n words */
    PyBuffer_Release(&view);
    mp_limb_t *reduced = c->m52 ? tp + c->n : out;
    if (reduce_into(reduced, tp, c->n, c) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (c->m52)
        limbs_to_52(out, reduced, c->n, c->w);
    if (convert)
        mont_mul(out, out, c->r2, c, tp);
    return 0;
}

/* rp = xp^e (Montgomery form in and out) for a k-limb exponent e >= 1; rp != xp. */
static void mont_pow_limbs(mp_limb_t *rp, const mp_limb_t *xp, const mp_limb_t *e, mp_size_t k,
                           const mont_ctx *c, mp_limb_t *tp)
{
    while (k > 1 && e[k - 1] == 0)
        k--;
    int top = GMP_NUMB_BITS - 1;
    while (top > 0 && !((e[k - 1] >> top) & 1))
        top--;
    memcpy(rp, xp, (size_t)c->w * sizeof(mp_limb_t));
    for (mp_size_t li = k; li-- > 0;)
        for (int b = (li == k - 1 ? top - 1 : GMP_NUMB_BITS - 1); b >= 0; b--) {
            mont_mul(rp, rp, rp, c, tp);
            if ((e[li] >> b) & 1)
                mont_mul(rp, rp, xp, c, tp);
        }
}

/* ------------------------------------------------------------------ FixedBase */

/* Tables are tens of MB read at random: on Linux ask for transparent huge pages, so that
 * a lookup costs a cache miss but not also a TLB miss.  Advisory; plain memory otherwise. */
static void *table_alloc(size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes) != 0)
        return NULL;
    (void)madvise(p, bytes, MADV_HUGEPAGE);
    return p;
#else
    return malloc(bytes);
#endif
}
typedef struct {
    PyObject_HEAD
    mont_ctx ctx;
    int window;
    Py_ssize_t windows;
    Py_ssize_t exp_bits;
    mp_limb_t *table; /* windows rows of (2^w - 1) residues, Montgomery form */
} FixedBaseObject;

static void FixedBase_dealloc(FixedBaseObject *self)
{
    free(self->table);
    ctx_free(&self->ctx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int FixedBase_init(FixedBaseObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"base", "modulus", "exp_bits", "window", NULL};
    PyObject *base;
    Py_buffer mod;
    Py_ssize_t exp_bits;
    int window;
    if (self->table || self->ctx.m) {
        PyErr_SetString(PyExc_RuntimeError, "FixedBase is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*ni", kwlist, &base, &mod, &exp_bits, &window))
        return -1;
    if (window < 1 || window > MAX_WINDOW || exp_bits < 1) {
        PyBuffer_Release(&mod);
        PyErr_Format(PyExc_ValueError, "need 1 <= window <= %d and exp_bits >= 1", MAX_WINDOW);
        return -1;
    }
    int rc = ctx_init(&self->ctx, mod.buf, mod.len);
    PyBuffer_Release(&mod);
    if (rc < 0)
        return -1;
    mp_size_t n = self->ctx.w; /* words of a residue */
    Py_ssize_t windows = (exp_bits + window - 1) / window;
    size_t per_row = ((size_t)1 << window) - 1;
    if ((size_t)windows > MAX_TABLE_BYTES / per_row / (size_t)n / sizeof(mp_limb_t)) {
        PyErr_Format(PyExc_ValueError, "a table of %zd windows of %zu residues of %zd limbs exceeds "
                     "the limit of %zu bytes", windows, per_row, (Py_ssize_t)n, MAX_TABLE_BYTES);
        return -1;
    }
    size_t entries = (size_t)windows * per_row;
    mp_limb_t *table = table_alloc(entries * (size_t)n * sizeof(mp_limb_t));
    mp_limb_t *tp = PyMem_Malloc((size_t)(2 * n) * sizeof(mp_limb_t));
    mp_limb_t *g = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    if (!table || !tp || !g) {
        free(table);
        PyMem_Free(tp);
        PyMem_Free(g);
        PyErr_NoMemory();
        return -1;
    }
    if (load_residue(base, &self->ctx, g, tp, 1) < 0) {
        free(table);
        PyMem_Free(tp);
        PyMem_Free(g);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < windows; i++) {
        mp_limb_t *row = table + (size_t)i * per_row * (size_t)n; /* row[d-1] = g^d */
        memcpy(row, g, (size_t)n * sizeof(mp_limb_t));
        for (size_t d = 1; d < per_row; d++)
            mont_mul(row + d * (size_t)n, row + (d - 1) * (size_t)n, g, &self->ctx, tp);
        mont_mul(g, row + (per_row - 1) * (size_t)n, g, &self->ctx, tp); /* g^(2^w) */
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(tp);
    PyMem_Free(g);
    self->table = table;
    self->window = window;
    self->windows = windows;
    self->exp_bits = exp_bits;
    return 0;
}

static PyObject *FixedBase_pow(FixedBaseObject *self, PyObject *args)
{
    PyObject *arg, *factor = NULL;
    if (!PyArg_ParseTuple(args, "O|O:pow", &arg, &factor))
        return NULL;
    if (!self->table) {
        PyErr_SetString(PyExc_RuntimeError, "FixedBase is not initialised");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t len = trimmed_len(view.buf, view.len);
    if (byte_bits(view.buf, len) > (size_t)self->exp_bits) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "exponent out of the table's range");
        return NULL;
    }
    mp_size_t n = self->ctx.w, k = limbs_for(len) > 0 ? limbs_for(len) : 1;
    mp_limb_t *e = PyMem_Calloc((size_t)k, sizeof(mp_limb_t));
    mp_limb_t *acc = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    mp_limb_t *f = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    mp_limb_t *tp = PyMem_Malloc((size_t)(2 * n) * sizeof(mp_limb_t));
    if (!e || !acc || !f || !tp) {
        PyBuffer_Release(&view);
        PyMem_Free(e);
        PyMem_Free(acc);
        PyMem_Free(f);
        PyMem_Free(tp);
        return PyErr_NoMemory();
    }
    bytes_to_limbs(view.buf, len, e, k);
    PyBuffer_Release(&view);
    /* optional factor, kept in normal form: Montgomery-multiplying the Montgomery-form power
     * by it yields factor * base^e in normal form, so the factor costs nothing extra */
    if (factor) {
        if (load_residue(factor, &self->ctx, f, tp, 0) < 0) {
            PyMem_Free(e);
            PyMem_Free(acc);
            PyMem_Free(f);
            PyMem_Free(tp);
            return NULL;
        }
    }
    else
        res_one(f, &self->ctx);
    size_t per_row = ((size_t)1 << self->window) - 1;
    int have = 0;
    Py_BEGIN_ALLOW_THREADS
    /* The table is far larger than the caches and the digits are random, so every step
     * would wait for DRAM: fetch the next non-zero digit's entry while multiplying. */
    const mp_limb_t *next = NULL;
    Py_ssize_t i = 0;
    for (; i < self->windows && !next; i++) {
        unsigned d = digit_at(e, k, (size_t)i * (size_t)self->window, self->window);
        if (d)
            next = self->table + ((size_t)i * per_row + d - 1) * (size_t)n;
    }
    while (next) {
        const mp_limb_t *entry = next;
        next = NULL;
        for (; i < self->windows && !next; i++) {
            unsigned d = digit_at(e, k, (size_t)i * (size_t)self->window, self->window);
            if (d)
                next = self->table + ((size_t)i * per_row + d - 1) * (size_t)n;
        }
        if (next)
            for (size_t off = 0; off < (size_t)n * sizeof(mp_limb_t); off += 64)
                __builtin_prefetch((const char *)next + off, 0, 0);
        if (have)
            mont_mul(acc, acc, entry, &self->ctx, tp);
        else {
            memcpy(acc, entry, (size_t)n * sizeof(mp_limb_t));
            have = 1;
        }
    }
    if (have)
        mont_mul(acc, acc, f, &self->ctx, tp); /* = factor * base^e, normal form */
    else /* exponent 0 */
        memcpy(acc, f, (size_t)n * sizeof(mp_limb_t));
    Py_END_ALLOW_THREADS
    PyObject *out = res_to_bytes(acc, &self->ctx, tp);
    PyMem_Free(e);
    PyMem_Free(acc);
    PyMem_Free(f);
    PyMem_Free(tp);
    return out;
}

static PyObject *FixedBase_get_window(FixedBaseObject *self, void *closure)
{
    return PyLong_FromLong(self->window);
}

static PyObject *FixedBase_get_nbytes(FixedBaseObject *self, void *closure)
{
    size_t per_row = ((size_t)1 << self->window) - 1;
    return PyLong_FromSize_t((size_t)self->windows * per_row * (size_t)self->ctx.w * sizeof(mp_limb_t));
}

static PyMethodDef FixedBase_methods[] = {
    {"pow", (PyCFunction)FixedBase_pow, METH_VARARGS,
     "pow(exponent[, factor]) -> bytes: [factor *] base^exponent mod modulus; integers as "
     "little-endian bytes, factor at most as wide as the modulus"},
    {NULL},
};

static PyGetSetDef FixedBase_getset[] = {
    {"window", (getter)FixedBase_get_window, NULL, "window width in bits", NULL},
    {"table_bytes", (getter)FixedBase_get_nbytes, NULL, "memory held by the table", NULL},
    {NULL},
};

static PyTypeObject FixedBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "smcdp.crypto._mont.FixedBase",
    .tp_doc = "FixedBase(base: bytes, modulus: bytes, exp_bits: int, window: int) -- "
              "windowed fixed-base exponentiation in Montgomery form (little-endian byte integers)",
    .tp_basicsize = sizeof(FixedBaseObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FixedBase_init,
    .tp_dealloc = (destructor)FixedBase_dealloc,
    .tp_methods = FixedBase_methods,
    .tp_getset = FixedBase_getset,
};

/* ------------------------------------------------------------------ multi_exp */

/* Bos-Coster for exponents of one limb (< 2^64): repeatedly take the two largest exponents
 * e1 >= e2 and rewrite b1^e1 * b2^e2 = b1^(e1 mod e2) * (b2 * b1^q)^e2, q = e1 div e2.
 * For many terms this needs 30-50 % fewer multiplications than Pippenger (820 terms of
 * 48 bits: ~5.2k against ~7.5k).  B holds the t bases in Montgomery form and is
 * overwritten; the result (Montgomery form) goes to res.  Returns 0 if every exponent is 0. */
typedef struct {
    mp_limb_t e;
    Py_ssize_t i;
} heap_item;

static void heap_down(heap_item *h, Py_ssize_t size, Py_ssize_t at)
{
    for (;;) {
        Py_ssize_t l = 2 * at + 1, r = l + 1, big = at;
        if (l < size && h[l].e > h[big].e)
            big = l;
        if (r < size && h[r].e > h[big].e)
            big = r;
        if (big == at)
            return;
        heap_item tmp = h[at];
        h[at] = h[big];
        h[big] = tmp;
        at = big;
    }
}

static int bos_coster(mp_limb_t *B, const mp_limb_t *E, Py_ssize_t t, const mont_ctx *c, mp_limb_t *res,
                      mp_limb_t *tmp, mp_limb_t *tp, heap_item *h)
{
    mp_size_t n = c->w;
    Py_ssize_t size = 0;
    for (Py_ssize_t j = 0; j < t; j++)
        if (E[j]) {
            h[size].e = E[j];
            h[size].i = j;
            size++;
        }
    if (size == 0)
        return 0;
    for (Py_ssize_t at = size / 2; at-- > 0;)
        heap_down(h, size, at);
    while (size > 1) {
        heap_item top = h[0];
        /* the second largest is one of the root's children */
        Py_ssize_t s = (size > 2 && h[2].e > h[1].e) ? 2 : 1;
        mp_limb_t e2 = h[s].e, q = top.e / e2;
        mp_limb_t *b1 = B + (size_t)top.i * (size_t)n, *b2 = B + (size_t)h[s].i * (size_t)n;
        if (q == 1)
            mont_mul(b2, b2, b1, c, tp);
        else {
            mont_pow_limbs(tmp, b1, &q, 1, c, tp);
            mont_mul(b2, b2, tmp, c, tp);
        }
        top.e -= q * e2;
        if (top.e) {
            h[0] = top;
        } else {
            h[0] = h[--size];
        }
        heap_down(h, size, 0);
    }
    mont_pow_limbs(res, B + (size_t)h[0].i * (size_t)n, &h[0].e, 1, c, tp);
    return 1;
}

static PyObject *multi_exp(PyObject *module, PyObject *args)
{
    PyObject *bases_in, *exps_in;
    Py_buffer mod;
    int c;
    if (!PyArg_ParseTuple(args, "OOy*i", &bases_in, &exps_in, &mod, &c))
        return NULL;
    PyObject *bases = NULL, *exps = NULL, *out = NULL;
    mont_ctx ctx;
    mp_limb_t *S = NULL, *B = NULL, *E = NULL, *buckets = NULL, *tp = NULL, *res = NULL, *run = NULL, *acc = NULL;
    unsigned char *filled = NULL;
    heap_item *heap = NULL;
    if (c < 1 || c > 16) {
        PyBuffer_Release(&mod);
        PyErr_SetString(PyExc_ValueError, "need 1 <= window <= 16");
        return NULL;
    }
    int rc = ctx_init(&ctx, mod.buf, mod.len);
    PyBuffer_Release(&mod);
    if (rc < 0)
        return NULL;
    bases = PySequence_Fast(bases_in, "bases must be a sequence of bytes");
    exps = bases ? PySequence_Fast(exps_in, "exps must be a sequence of bytes") : NULL;
    if (!exps)
        goto done;
    Py_ssize_t t = PySequence_Fast_GET_SIZE(bases);
    if (PySequence_Fast_GET_SIZE(exps) != t) {
        PyErr_SetString(PyExc_ValueError, "bases and exps differ in length");
        goto done;
    }
    mp_size_t n = ctx.w; /* words of a residue */
    /* exponent width: the longest exponent, in limbs */
    mp_size_t k = 1;
    size_t bits = 0;
    for (Py_ssize_t j = 0; j < t; j++) {
        PyObject *o = PySequence_Fast_GET_ITEM(exps, j);
        if (!PyBytes_Check(o)) {
            PyErr_SetString(PyExc_TypeError, "exponents must be bytes (little-endian, non-negative)");
            goto done;
        }
        const unsigned char *eb = (const unsigned char *)PyBytes_AS_STRING(o);
        if (trimmed_len(eb, PyBytes_GET_SIZE(o)) > MAX_EXPONENT_BYTES) {
            PyErr_Format(PyExc_ValueError, "exponent %zd is longer than the limit of %zd bytes", j,
                         MAX_EXPONENT_BYTES);
            goto done;
        }
        size_t bj = byte_bits(eb, PyBytes_GET_SIZE(o));
        mp_size_t kj = limbs_for(trimmed_len(eb, PyBytes_GET_SIZE(o)));
        if (kj > k)
            k = kj;
        if (bj > bits)
            bits = bj;
    }
    size_t nb = (size_t)1 << c;
    size_t terms = (size_t)(t > 0 ? t : 1);
    if (nb > MAX_TABLE_BYTES / (size_t)n / sizeof(mp_limb_t)
        || terms > MAX_TABLE_BYTES / (size_t)n / sizeof(mp_limb_t)
        || terms > MAX_TABLE_BYTES / (size_t)k / sizeof(mp_limb_t)) {
        PyErr_Format(PyExc_ValueError, "multi_exp of %zd terms (%zd-limb exponents, window %d) over a "
                     "%zd-limb modulus exceeds the limit of %zu bytes", t, (Py_ssize_t)k, c,
                     (Py_ssize_t)n, MAX_TABLE_BYTES);
        goto done;
    }
    tp = PyMem_Malloc((size_t)(2 * n) * sizeof(mp_limb_t));
    B = PyMem_Malloc((size_t)(t > 0 ? t : 1) * (size_t)n * sizeof(mp_limb_t));
    E = PyMem_Calloc((size_t)(t > 0 ? t : 1) * (size_t)k, sizeof(mp_limb_t));
    buckets = PyMem_Malloc(nb * (size_t)n * sizeof(mp_limb_t));
    filled = PyMem_Malloc(nb);
    res = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    run = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    acc = PyMem_Malloc((size_t)n * sizeof(mp_limb_t));
    heap = PyMem_Malloc((size_t)(t > 0 ? t : 1) * sizeof(heap_item));
    S = PyMem_Calloc((size_t)(k + 1), sizeof(mp_limb_t));
    if (!tp || !B || !E || !buckets || !filled || !res || !run || !acc || !heap || !S) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < t; j++) {
        if (load_residue(PySequence_Fast_GET_ITEM(bases, j), &ctx, B + (size_t)j * (size_t)n, tp, 0) < 0)
            goto done;
        PyObject *o = PySequence_Fast_GET_ITEM(exps, j);
        const unsigned char *eb = (const unsigned char *)PyBytes_AS_STRING(o);
        bytes_to_limbs(eb, trimmed_len(eb, PyBytes_GET_SIZE(o)), E + (size_t)j * (size_t)k, k);
        S[k] += mpn_add_n(S, S, E + (size_t)j * (size_t)k, k);
    }
    size_t windows = (bits + (size_t)c - 1) / (size_t)c;
    int have_res = 0;
    Py_BEGIN_ALLOW_THREADS
    if (k == 1 && t > 1) {
        windows = 0; /* skip the bucket method */
        have_res = bos_coster(B, E, t, &ctx, res, run, tp, heap);
    }
    for (size_t wi = windows; wi-- > 0;) {
        if (have_res)
            for (int s = 0; s < c; s++)
                mont_mul(res, res, res, &ctx, tp);
        memset(filled, 0, nb);
        int any = 0;
        for (Py_ssize_t j = 0; j < t; j++) {
            unsigned d = digit_at(E + (size_t)j * (size_t)k, k, wi * (size_t)c, c);
            if (!d)
                continue;
            mp_limb_t *bd = buckets + (size_t)d * (size_t)n;
            if (filled[d])
                mont_mul(bd, bd, B + (size_t)j * (size_t)n, &ctx, tp);
            else {
                memcpy(bd, B + (size_t)j * (size_t)n, (size_t)n * sizeof(mp_limb_t));
                filled[d] = 1;
            }
            any = 1;
        }
        if (!any)
            continue;
        /* sum_d d * bucket[d] as a running product: acc = prod_d run_d, run_d = prod_{d' >= d} bucket[d'] */
        int have_run = 0, have_acc = 0;
        for (size_t d = nb - 1; d >= 1; d--) {
            if (filled[d]) {
                if (have_run)
                    mont_mul(run, run, buckets + d * (size_t)n, &ctx, tp);
                else {
                    memcpy(run, buckets + d * (size_t)n, (size_t)n * sizeof(mp_limb_t));
                    have_run = 1;
                }
            }
            if (have_run) {
                if (have_acc)
                    mont_mul(acc, acc, run, &ctx, tp);
                else {
                    memcpy(acc, run, (size_t)n * sizeof(mp_limb_t));
                    have_acc = 1;
                }
            }
        }
        if (have_res)
            mont_mul(res, res, acc, &ctx, tp);
        else {
            memcpy(res, acc, (size_t)n * sizeof(mp_limb_t));
            have_res = 1;
        }
    }
    if (have_res) {
        /* The bases were used as given, i.e. as the Montgomery forms of b/R, so res is the
         * Montgomery form of prod (b/R)^e = V * R^-S with S = sum e.  Multiplying by the
         * Montgomery form of R^S, which is (R mod m)^S computed from R^2 mod m, gives V:
         * one short exponentiation instead of t conversions into Montgomery form. */
        mont_pow_limbs(acc, ctx.r2, S, k + 1, &ctx, tp);
        mont_mul(res, res, acc, &ctx, tp);
        from_mont(res, res, &ctx, tp);
    }
    Py_END_ALLOW_THREADS
    if (!have_res) {
        memset(res, 0, (size_t)n * sizeof(mp_limb_t));
        res[0] = 1;
    }
    out = res_to_bytes(res, &ctx, tp);
done:
    Py_XDECREF(bases);
    Py_XDECREF(exps);
    PyMem_Free(B);
    PyMem_Free(E);
    PyMem_Free(buckets);
    PyMem_Free(filled);
    PyMem_Free(tp);
    PyMem_Free(res);
    PyMem_Free(run);
    PyMem_Free(acc);
    PyMem_Free(heap);
    PyMem_Free(S);
    ctx_free(&ctx);
    return out;
}

/* ------------------------------------------------------------------ multi_exp_rows */

/* One thread's share of multi_exp_rows: tables of groups [g0, g1), then rows [r0, r1).  Every share
 * reads the same tables, so the two phases are separated by a join: no share evaluates a row before
 * every table is complete. */
typedef struct {
    const mont_ctx *ctx;
    mp_limb_t *T;           /* groups x 2^g residues: the subset products, Montgomery form */
    const mp_limb_t *E;     /* r x t exponents of k limbs */
    mp_limb_t *R;           /* r results, residues */
    unsigned char *have;    /* per row: R holds a value yet */
    mp_limb_t *tp;          /* 2w words of this share's scratch */
    size_t groups, entries, tt, bits, g0, g1;
    Py_ssize_t t, r0, r1;
    mp_size_t k;
    int g;
} rows_share;

static void rows_tables(rows_share *s)
{
    const mont_ctx *c = s->ctx;
    size_t n = (size_t)c->w, g = (size_t)s->g;
    for (size_t G = s->g0; G < s->g1; G++) {        /* every subset product of the group's bases */
        size_t rem = (size_t)s->t - G * g, size = rem < g ? rem : g;
        mp_limb_t *tab = s->T + G * s->entries * n;
        for (size_t mask = 3; mask < ((size_t)1 << size); mask++) {
            size_t low = mask & (~mask + 1);
            if (low == mask)
                continue;                             /* a single base: loaded by the caller */
            mont_mul(tab + mask * n, tab + (mask ^ low) * n, tab + low * n, c, s->tp);
        }
    }
}

static void rows_eval(rows_share *s)
{
    const mont_ctx *c = s->ctx;
    size_t n = (size_t)c->w, g = (size_t)s->g, k = (size_t)s->k, t = (size_t)s->t;
    for (Py_ssize_t i = s->r0; i < s->r1; i++) {
        mp_limb_t *acc = s->R + (size_t)i * n;
        const mp_limb_t *Ei = s->E + (size_t)i * s->tt * k;
        for (size_t b = s->bits; b-- > 0;) {
            if (s->have[i])
                mont_mul(acc, acc, acc, c, s->tp);
            size_t li = b / GMP_NUMB_BITS, off = b % GMP_NUMB_BITS;
            for (size_t G = 0; G < s->groups; G++) {
                size_t idx = 0;
                for (size_t jj = 0; jj < g && G * g + jj < t; jj++)
                    idx |= (size_t)((Ei[(G * g + jj) * k + li] >> off) & 1) << jj;
                if (!idx)
                    continue;
                const mp_limb_t *e = s->T + (G * s->entries + idx) * n;
                if (s->have[i])
                    mont_mul(acc, acc, e, c, s->tp);
                else {
                    memcpy(acc, e, n * sizeof(mp_limb_t));
                    s->have[i] = 1;
                }
            }
        }
        if (s->have[i])
            from_mont(acc, acc, c, s->tp);
        else {
            memset(acc, 0, n * sizeof(mp_limb_t));
            acc[0] = 1;
        }
    }
}

static void *rows_tables_thread(void *arg)
{
    rows_tables((rows_share *)arg);
    return NULL;
}

static void *rows_eval_thread(void *arg)
{
    rows_eval((rows_share *)arg);
    return NULL;
}

/* Run phase `fn` of every share: shares 1.. on threads of their own (they inherit the caller's
 * scheduling priority), share 0 here; a share whose thread cannot start runs here too. */
static void rows_phase(rows_share *sh, int nsh, void (*fn)(rows_share *), void *(*thread_fn)(void *))
{
#ifdef HAVE_PTHREADS
    pthread_t tid[MAX_ROW_THREADS];
    int started[MAX_ROW_THREADS] = {0};
    for (int i = 1; i < nsh; i++)
        started[i] = pthread_create(&tid[i], NULL, thread_fn, &sh[i]) == 0;
    fn(&sh[0]);
    for (int i = 1; i < nsh; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            fn(&sh[i]);
    }
#else
    (void)thread_fn;
    for (int i = 0; i < nsh; i++)
        fn(&sh[i]);
#endif
}

/* Many multi-exponentiations over the same bases (Bob's emission rows, 50 rows over the 79
 * product ciphertexts of a block): prod_j bases[j]^rows[i][j] for every row i, by Straus's method with
 * the tables shared by all rows.  The bases are cut into groups of g; for each group every subset
 * product is made once (2^g - g - 1 multiplications); each row then costs one squaring per exponent
 * bit and one multiplication per group and bit (the group's bits at that position index its table).
 * For 50 rows of 79 terms with 45-bit exponents: ~27k multiplications against ~51k for Bos-Coster per
 * row.  Bases are converted into Montgomery form once (t multiplications).  With `threads` > 1 the
 * groups' tables, then the rows, are shared among that many threads, all reading one set of tables
 * (one call per core would build every table once per core). */
static PyObject *multi_exp_rows(PyObject *module, PyObject *args)
{
    PyObject *bases_in, *rows_in;
    Py_buffer mod;
    int g, threads = 1;
    if (!PyArg_ParseTuple(args, "OOy*i|i", &bases_in, &rows_in, &mod, &g, &threads))
        return NULL;
    if (g < 1 || g > 12 || threads < 1 || threads > MAX_ROW_THREADS) {
        PyBuffer_Release(&mod);
        PyErr_Format(PyExc_ValueError, "need 1 <= group <= 12 and 1 <= threads <= %d", MAX_ROW_THREADS);
        return NULL;
    }
    mont_ctx ctx;
    int rc = ctx_init(&ctx, mod.buf, mod.len);
    PyBuffer_Release(&mod);
    if (rc < 0)
        return NULL;
    PyObject *bases = NULL, *rows = NULL, *out = NULL, **row_seq = NULL;
    mp_limb_t *T = NULL, *E = NULL, *R = NULL, *tp = NULL;
    unsigned char *have = NULL;
    Py_ssize_t r = 0;
    bases = PySequence_Fast(bases_in, "bases must be a sequence of bytes");
    rows = bases ? PySequence_Fast(rows_in, "rows must be a sequence of sequences of bytes") : NULL;
    if (!rows)
        goto done;
    Py_ssize_t t = PySequence_Fast_GET_SIZE(bases);
    r = PySequence_Fast_GET_SIZE(rows);
    mp_size_t n = ctx.w; /* words of a residue */
    row_seq = PyMem_Calloc((size_t)(r > 0 ? r : 1), sizeof(PyObject *));
    if (!row_seq) {
        PyErr_NoMemory();
        goto done;
    }
    /* every exponent: bytes, within the limit; the widest sets the limbs k and the bits */
    mp_size_t k = 1;
    size_t bits = 0;
    for (Py_ssize_t i = 0; i < r; i++) {
        row_seq[i] = PySequence_Fast(PySequence_Fast_GET_ITEM(rows, i), "each row must be a sequence of bytes");
        if (!row_seq[i])
            goto done;
        if (PySequence_Fast_GET_SIZE(row_seq[i]) != t) {
            PyErr_Format(PyExc_ValueError, "row %zd has %zd exponents for %zd bases", i,
                         PySequence_Fast_GET_SIZE(row_seq[i]), t);
            goto done;
        }
        for (Py_ssize_t j = 0; j < t; j++) {
            PyObject *o = PySequence_Fast_GET_ITEM(row_seq[i], j);
            if (!PyBytes_Check(o)) {
                PyErr_SetString(PyExc_TypeError, "exponents must be bytes (little-endian, non-negative)");
                goto done;
            }
            const unsigned char *eb = (const unsigned char *)PyBytes_AS_STRING(o);
            Py_ssize_t len = trimmed_len(eb, PyBytes_GET_SIZE(o));
            if (len > MAX_EXPONENT_BYTES) {
                PyErr_Format(PyExc_ValueError, "exponent %zd of row %zd is longer than the limit of %zd bytes",
                             j, i, MAX_EXPONENT_BYTES);
                goto done;
            }
            if (limbs_for(len) > k)
                k = limbs_for(len);
            size_t bj = byte_bits(eb, len);
            if (bj > bits)
                bits = bj;
        }
    }
    size_t groups = (size_t)(t + g - 1) / (size_t)g, entries = (size_t)1 << g;
    size_t limit = MAX_TABLE_BYTES / sizeof(mp_limb_t);
    size_t rr = (size_t)(r > 0 ? r : 1), tt = (size_t)(t > 0 ? t : 1);
    if ((groups > 0 && entries > limit / groups / (size_t)n) || rr > limit / tt / (size_t)k || rr > limit / (size_t)n) {
        PyErr_Format(PyExc_ValueError, "multi_exp_rows of %zd rows x %zd terms (%zd-limb exponents, group %d) "
                     "over a %zd-limb modulus exceeds the limit of %zu bytes", r, t, (Py_ssize_t)k, g,
                     (Py_ssize_t)n, MAX_TABLE_BYTES);
        goto done;
    }
    T = PyMem_Malloc((groups > 0 ? groups : 1) * entries * (size_t)n * sizeof(mp_limb_t));
    E = PyMem_Calloc(rr * tt * (size_t)k, sizeof(mp_limb_t));
    R = PyMem_Malloc(rr * (size_t)n * sizeof(mp_limb_t));
    have = PyMem_Calloc(rr, 1);
    tp = PyMem_Malloc((size_t)(2 * n) * sizeof(mp_limb_t));
    if (!T || !E || !R || !have || !tp) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < t; j++) {
        mp_limb_t *slot = T + ((size_t)(j / g) * entries + ((size_t)1 << (j % g))) * (size_t)n;
        if (load_residue(PySequence_Fast_GET_ITEM(bases, j), &ctx, slot, tp, 1) < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < r; i++)
        for (Py_ssize_t j = 0; j < t; j++) {
            PyObject *o = PySequence_Fast_GET_ITEM(row_seq[i], j);
            const unsigned char *eb = (const unsigned char *)PyBytes_AS_STRING(o);
            bytes_to_limbs(eb, trimmed_len(eb, PyBytes_GET_SIZE(o)), E + ((size_t)i * tt + (size_t)j) * (size_t)k, k);
        }
    {
        rows_share sh[MAX_ROW_THREADS];
        int nsh = threads;
        if ((Py_ssize_t)nsh > r)
            nsh = r > 0 ? (int)r : 1;
        for (int i = 0; i < nsh; i++) {
            sh[i] = (rows_share){&ctx, T, E, R, have, NULL, groups, entries, tt, bits,
                                 groups * (size_t)i / (size_t)nsh, groups * (size_t)(i + 1) / (size_t)nsh,
                                 t, r * i / nsh, r * (i + 1) / nsh, k, g};
            sh[i].tp = i ? PyMem_Malloc((size_t)(2 * n) * sizeof(mp_limb_t)) : tp;
            if (!sh[i].tp) {
                for (int j = 1; j < i; j++)
                    PyMem_Free(sh[j].tp);
                PyErr_NoMemory();
                goto done;
            }
        }
        Py_BEGIN_ALLOW_THREADS
        rows_phase(sh, nsh, rows_tables, rows_tables_thread);
        rows_phase(sh, nsh, rows_eval, rows_eval_thread);
        Py_END_ALLOW_THREADS
        for (int i = 1; i < nsh; i++)
            PyMem_Free(sh[i].tp);
    }
    out = PyList_New(r);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *b = res_to_bytes(R + (size_t)i * (size_t)n, &ctx, tp);
        if (!b) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, b);
    }
done:
    if (row_seq)
        for (Py_ssize_t i = 0; i < r; i++)
            Py_XDECREF(row_seq[i]);
    PyMem_Free(row_seq);
    Py_XDECREF(bases);
    Py_XDECREF(rows);
    PyMem_Free(T);
    PyMem_Free(E);
    PyMem_Free(R);
    PyMem_Free(have);
    PyMem_Free(tp);
    ctx_free(&ctx);
    return out;
}

/* ------------------------------------------------------------------ powmod */

/* base^exp mod modulus for one base (a Paillier decryption's CRT half, c^e mod p^2): k-ary windows over
 * Montgomery products, so that the IFMA product serves it too (gmpy2's powmod is GMP's mpz_powm). */
static PyObject *powmod(PyObject *module, PyObject *args)
{
    PyObject *base;
    Py_buffer eb, mod;
    if (!PyArg_ParseTuple(args, "Oy*y*", &base, &eb, &mod))
        return NULL;
    mont_ctx ctx;
    int rc = ctx_init(&ctx, mod.buf, mod.len);
    PyBuffer_Release(&mod);
    if (rc < 0) {
        PyBuffer_Release(&eb);
        return NULL;
    }
    PyObject *out = NULL;
    mp_limb_t *e = NULL, *tab = NULL, *acc = NULL, *tp = NULL;
    Py_ssize_t elen = trimmed_len(eb.buf, eb.len);
    if (elen > MAX_EXPONENT_BYTES) {
        PyErr_Format(PyExc_ValueError, "exponent longer than the limit of %zd bytes", MAX_EXPONENT_BYTES);
        goto done;
    }
    size_t bits = byte_bits(eb.buf, elen);
    int w = bits > 768 ? 6 : bits > 160 ? 5 : bits > 24 ? 4 : 1;
    size_t n = (size_t)ctx.w;
    mp_size_t k = limbs_for(elen) > 0 ? limbs_for(elen) : 1;
    e = PyMem_Calloc((size_t)k, sizeof(mp_limb_t));
    tab = PyMem_Malloc(((size_t)1 << w) * n * sizeof(mp_limb_t)); /* tab[d] = base^d, d >= 1 */
    acc = PyMem_Malloc(n * sizeof(mp_limb_t));
    tp = PyMem_Malloc(2 * n * sizeof(mp_limb_t));
    if (!e || !tab || !acc || !tp) {
        PyErr_NoMemory();
        goto done;
    }
    bytes_to_limbs(eb.buf, elen, e, k);
    if (load_residue(base, &ctx, tab + n, tp, 1) < 0)
        goto done;
    if (bits == 0) {
        res_one(acc, &ctx);
        out = res_to_bytes(acc, &ctx, tp);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (size_t d = 2; d < ((size_t)1 << w); d++)
        mont_mul(tab + d * n, tab + (d - 1) * n, tab + n, &ctx, tp);
    size_t windows = (bits + (size_t)w - 1) / (size_t)w;
    int have = 0;
    for (size_t i = windows; i-- > 0;) {
        if (have)
            for (int sq = 0; sq < w; sq++)
                mont_mul(acc, acc, acc, &ctx, tp);
        unsigned d = digit_at(e, k, i * (size_t)w, w);
        if (!d)
            continue;
        if (have)
            mont_mul(acc, acc, tab + d * n, &ctx, tp);
        else {
            memcpy(acc, tab + d * n, n * sizeof(mp_limb_t));
            have = 1;
        }
    }
    from_mont(acc, acc, &ctx, tp);
    Py_END_ALLOW_THREADS
    out = res_to_bytes(acc, &ctx, tp);
done:
    PyBuffer_Release(&eb);
    PyMem_Free(e);
    PyMem_Free(tab);
    PyMem_Free(acc);
    PyMem_Free(tp);
    ctx_free(&ctx);
    return out;
}

/* the two products r1 = a1 b1, r2 = a2 b2 (each in its own context): interleaved by x2 when given */
static void mul2(mp_limb_t *r1, const mp_limb_t *a1, const mp_limb_t *b1, const mont_ctx *c1, mp_limb_t *r2,
                 const mp_limb_t *a2, const mp_limb_t *b2, const mont_ctx *c2, mm52x2_fn x2, mp_limb_t *tp)
{
    if (x2) {
        x2(r1, a1, b1, c1, r2, a2, b2, c2);
        return;
    }
    mont_mul(r1, a1, b1, c1, tp);
    mont_mul(r2, a2, b2, c2, tp);
}

/* (base1^exp1 mod mod1, base2^exp2 mod mod2): two powers in lock-step, window by window, their products
 * interleaved (mm52x2_*) where both moduli take IFMA products of the same width -- a Paillier
 * decryption's two CRT halves, mod p^2 and q^2.  Otherwise the same as two powmod calls. */
static PyObject *powmod2(PyObject *module, PyObject *args)
{
    PyObject *base1, *base2;
    Py_buffer eb1, mb1, eb2, mb2;
    if (!PyArg_ParseTuple(args, "Oy*y*Oy*y*", &base1, &eb1, &mb1, &base2, &eb2, &mb2))
        return NULL;
    PyObject *out = NULL, *o1 = NULL, *o2 = NULL;
    mont_ctx c1, c2;
    int init1 = 0, init2 = 0;
    mp_limb_t *e1 = NULL, *e2 = NULL, *tab1 = NULL, *tab2 = NULL, *acc1 = NULL, *acc2 = NULL, *tp = NULL;
    if (ctx_init(&c1, mb1.buf, mb1.len) < 0)
        goto done;
    init1 = 1;
    if (ctx_init(&c2, mb2.buf, mb2.len) < 0)
        goto done;
    init2 = 1;
    Py_ssize_t elen1 = trimmed_len(eb1.buf, eb1.len), elen2 = trimmed_len(eb2.buf, eb2.len);
    if (elen1 > MAX_EXPONENT_BYTES || elen2 > MAX_EXPONENT_BYTES) {
        PyErr_Format(PyExc_ValueError, "exponent longer than the limit of %zd bytes", MAX_EXPONENT_BYTES);
        goto done;
    }
    size_t bits1 = byte_bits(eb1.buf, elen1), bits2 = byte_bits(eb2.buf, elen2);
    size_t bits = bits1 > bits2 ? bits1 : bits2;
    int w = bits > 768 ? 6 : bits > 160 ? 5 : bits > 24 ? 4 : 1;
    size_t n1 = (size_t)c1.w, n2 = (size_t)c2.w, nt = n1 > n2 ? n1 : n2;
    mp_size_t k1 = limbs_for(elen1) > 0 ? limbs_for(elen1) : 1, k2 = limbs_for(elen2) > 0 ? limbs_for(elen2) : 1;
    e1 = PyMem_Calloc((size_t)k1, sizeof(mp_limb_t));
    e2 = PyMem_Calloc((size_t)k2, sizeof(mp_limb_t));
    tab1 = PyMem_Malloc(((size_t)1 << w) * n1 * sizeof(mp_limb_t)); /* tab[d] = base^d, d >= 1 */
    tab2 = PyMem_Malloc(((size_t)1 << w) * n2 * sizeof(mp_limb_t));
    acc1 = PyMem_Malloc(n1 * sizeof(mp_limb_t));
    acc2 = PyMem_Malloc(n2 * sizeof(mp_limb_t));
    tp = PyMem_Malloc(2 * nt * sizeof(mp_limb_t));
    if (!e1 || !e2 || !tab1 || !tab2 || !acc1 || !acc2 || !tp) {
        PyErr_NoMemory();
        goto done;
    }
    bytes_to_limbs(eb1.buf, elen1, e1, k1);
    bytes_to_limbs(eb2.buf, elen2, e2, k2);
    if (load_residue(base1, &c1, tab1 + n1, tp, 1) < 0 || load_residue(base2, &c2, tab2 + n2, tp, 1) < 0)
        goto done;
    mm52x2_fn x2 = NULL;
    if (c1.m52 && c2.m52 && c1.w == c2.w && (size_t)c1.w / 8 <= IFMA_X2_MAX_V)
        x2 = mm52x2_for[c1.w / 8];
    Py_BEGIN_ALLOW_THREADS
    for (size_t d = 2; d < ((size_t)1 << w); d++)
        mul2(tab1 + d * n1, tab1 + (d - 1) * n1, tab1 + n1, &c1, tab2 + d * n2, tab2 + (d - 1) * n2, tab2 + n2,
             &c2, x2, tp);
    size_t windows = bits ? (bits + (size_t)w - 1) / (size_t)w : 0;
    int have1 = 0, have2 = 0;
    for (size_t i = windows; i-- > 0;) {
        for (int sq = 0; sq < w; sq++) {
            if (have1 && have2)
                mul2(acc1, acc1, acc1, &c1, acc2, acc2, acc2, &c2, x2, tp);
            else if (have1)
                mont_mul(acc1, acc1, acc1, &c1, tp);
            else if (have2)
                mont_mul(acc2, acc2, acc2, &c2, tp);
        }
        unsigned d1 = digit_at(e1, k1, i * (size_t)w, w), d2 = digit_at(e2, k2, i * (size_t)w, w);
        if (d1 && have1 && d2 && have2)
            mul2(acc1, acc1, tab1 + d1 * n1, &c1, acc2, acc2, tab2 + d2 * n2, &c2, x2, tp);
        else {
            if (d1 && have1)
                mont_mul(acc1, acc1, tab1 + d1 * n1, &c1, tp);
            if (d2 && have2)
                mont_mul(acc2, acc2, tab2 + d2 * n2, &c2, tp);
        }
        if (d1 && !have1) {
            memcpy(acc1, tab1 + d1 * n1, n1 * sizeof(mp_limb_t));
            have1 = 1;
        }
        if (d2 && !have2) {
            memcpy(acc2, tab2 + d2 * n2, n2 * sizeof(mp_limb_t));
            have2 = 1;
        }
    }
    if (have1)
        from_mont(acc1, acc1, &c1, tp);
    else
        res_one(acc1, &c1); /* exponent 0 */
    if (have2)
        from_mont(acc2, acc2, &c2, tp);
    else
        res_one(acc2, &c2);
    Py_END_ALLOW_THREADS
    o1 = res_to_bytes(acc1, &c1, tp);
    o2 = o1 ? res_to_bytes(acc2, &c2, tp) : NULL;
    if (o1 && o2)
        out = PyTuple_Pack(2, o1, o2);
done:
    Py_XDECREF(o1);
    Py_XDECREF(o2);
    PyBuffer_Release(&eb1);
    PyBuffer_Release(&mb1);
    PyBuffer_Release(&eb2);
    PyBuffer_Release(&mb2);
    PyMem_Free(e1);
    PyMem_Free(e2);
    PyMem_Free(tab1);
    PyMem_Free(tab2);
    PyMem_Free(acc1);
    PyMem_Free(acc2);
    PyMem_Free(tp);
    if (init1)
        ctx_free(&c1);
    if (init2)
        ctx_free(&c2);
    return out;
}

static PyObject *get_ifma(PyObject *module, PyObject *noargs)
{
    return PyBool_FromLong(use_ifma);
}

static PyObject *set_ifma(PyObject *module, PyObject *arg)
{
    int want = PyObject_IsTrue(arg);
    if (want < 0)
        return NULL;
    if (want && !cpu_has_ifma()) {
        PyErr_SetString(PyExc_RuntimeError, "this CPU (or this build) has no AVX-512 IFMA");
        return NULL;
    }
    int before = use_ifma;
    use_ifma = want;
    return PyBool_FromLong(before);
}

static PyObject *get_cpu_ifma(PyObject *module, PyObject *noargs)
{
    return PyBool_FromLong(cpu_has_ifma());
}

static PyMethodDef module_methods[] = {
    {"cpu_ifma", get_cpu_ifma, METH_NOARGS,
     "cpu_ifma() -> bool: whether this CPU, its OS and this build run the AVX-512 IFMA products"},
    {"powmod", powmod, METH_VARARGS,
     "powmod(base, exp, modulus) -> bytes: base^exp mod an odd modulus (little-endian bytes; the base no "
     "wider than the modulus)"},
    {"powmod2", powmod2, METH_VARARGS,
     "powmod2(base1, exp1, mod1, base2, exp2, mod2) -> (bytes, bytes): the two powers in lock-step, their "
     "products interleaved where both moduli take IFMA products of one width (a decryption's CRT halves)"},
    {"ifma", get_ifma, METH_NOARGS,
     "ifma() -> bool: whether new Montgomery contexts use the AVX-512 IFMA products"},
    {"_set_ifma", set_ifma, METH_O,
     "_set_ifma(flag) -> bool (the previous state): for tests that compare both paths; contexts made "
     "before keep theirs"},
    {"multi_exp", multi_exp, METH_VARARGS,
     "multi_exp(bases, exps, modulus, window) -> bytes: prod bases[j]^exps[j] mod modulus "
     "(Pippenger; all integers little-endian bytes, exponents non-negative)"},
    {"multi_exp_rows", multi_exp_rows, METH_VARARGS,
     "multi_exp_rows(bases, rows, modulus, group, threads=1) -> list of bytes: prod_j bases[j]^rows[i][j] mod "
     "modulus for every row i (Straus with subset tables of `group` bases shared by the rows, the tables and "
     "then the rows shared among `threads` threads; little-endian bytes, exponents non-negative)"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "smcdp.crypto._mont",
    "Montgomery-domain fixed-base and multi-exponentiation over GMP's mpn layer.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__mont(void)
{
    const char *env = getenv("SMCDP_NATIVE_IFMA");
    use_ifma = cpu_has_ifma() && !(env && env[0] == '0' && env[1] == 0);
    if (PyType_Ready(&FixedBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Py_INCREF(&FixedBaseType);
    if (PyModule_AddObject(m, "FixedBase", (PyObject *)&FixedBaseType) < 0) {
        Py_DECREF(&FixedBaseType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "LIMB_BITS", GMP_NUMB_BITS);
    PyModule_AddIntConstant(m, "IFMA_MAX_MODULUS_BITS", IFMA_MAX_V * 416 - 2);
    PyModule_AddIntConstant(m, "IFMA_MIN_MODULUS_BITS", IFMA_MIN_BITS);
    PyModule_AddIntConstant(m, "IFMA_X2_MAX_MODULUS_BITS", IFMA_X2_MAX_V * 416 - 2);
    PyModule_AddIntConstant(m, "MAX_ROW_THREADS", MAX_ROW_THREADS);
    PyModule_AddStringConstant(m, "GMP_VERSION", gmp_version);
    return m;
}
