#!/usr/bin/env python3
"""sgkgen: emits each backend's kernel source from the portable dialect.

    sgkgen.py --target {c,cuda,hip,opencl} [--args-header FILE] INPUT... OUTPUT

The dialect (kernels/README.md) is C with a handful of @-constructs: kernels
and phases are work-group programs, @for_local spreads a loop over the
group's work-items, @barrier separates phases, @local arrays carry data
across barriers. Everything the targets differ in lives in this file; the
kernel logic lives only in the .sgk input. Output is deterministic: the same
input gives the same bytes (no dates, no paths, sorted nothing-dependent).
Python 3 standard library only.
"""
import argparse
import os
import re
import sys

TARGETS = ("c", "cuda", "hip", "opencl")


class DialectError(Exception):
    pass


def match_close(text, i, open_ch, close_ch):
    """Index just past the bracket closing the one at text[i]."""
    depth = 0
    for k in range(i, len(text)):
        if text[k] == open_ch:
            depth += 1
        elif text[k] == close_ch:
            depth -= 1
            if depth == 0:
                return k + 1
    raise DialectError("unbalanced %r at offset %d" % (open_ch, i))


def split_args(s):
    """Split on commas outside parentheses and brackets."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def phase_param(p):
    """(name, declaration or None) of a phase parameter: 'int M' or
    '@global const float *A' declare a value the C target passes to the
    phase's function; a bare name is replaced by its argument's text."""
    m = re.match(r"^(.*[\s*])(\w+)$", p.strip())
    if not m or not m.group(1).strip():
        return p.strip(), None
    return m.group(2), p.strip()


def parse(text):
    """Top-level @phase and @kernel definitions, plus the leading comment."""
    phases, kernels, pos = {}, [], 0
    head = re.compile(r"@(phase|kernel)\s+(\w+)\s*\(")
    comments = []
    while True:
        m = head.search(text, pos)
        if not m:
            break
        comments.append(text[pos:m.start()])
        p_open = m.end() - 1
        p_close = match_close(text, p_open, "(", ")")
        params = split_args(text[p_open + 1:p_close - 1])
        b_open = text.index("{", p_close)
        b_close = match_close(text, b_open, "{", "}")
        body = text[b_open + 1:b_close - 1]
        if m.group(1) == "phase":
            phases[m.group(2)] = ([phase_param(p) for p in params], body)
        else:
            kernels.append((m.group(2), params, body, comments[-1]))
        pos = b_close
    if not kernels:
        raise DialectError("no @kernel in input")
    lead = comments[0] if comments else ""
    return lead, phases, kernels


def rewrite_calls(body, pattern, replace):
    """Rewrites every construct `pattern(args)` in body. replace(match, args,
    end) gets the split arguments and the offset just past the closing
    parenthesis, and returns the replacement text and where scanning goes on."""
    out, pos = [], 0
    while True:
        m = pattern.search(body, pos)
        if not m:
            out.append(body[pos:])
            return "".join(out)
        out.append(body[pos:m.start()])
        a_open = m.end() - 1
        a_close = match_close(body, a_open, "(", ")")
        text, pos = replace(m, split_args(body[a_open + 1:a_close - 1]), a_close)
        out.append(text)


USE = re.compile(r"@use\s+(\w+)\s*\(")


def expand_uses(body, phases, depth=0, fns=None):
    """Inline every @use NAME(args) [@tok=@val ...]; with its phase's body.
    With fns (the C target), a phase that declares parameters becomes a
    function of its own instead, one for each text of its other parameters
    and of the declared ones given as integer literals: fns maps (phase,
    specialised body) to (function name, declarations, body), and the @use
    becomes a call through SGK_FN."""
    if depth > 8:
        raise DialectError("@use nested too deep")

    def inline(m, args, end):
        semi = body.index(";", end)
        extra = body[end:semi].split()
        name = m.group(1)
        if name not in phases:
            raise DialectError("@use of unknown phase %s" % name)
        params, pbody = phases[name]
        if len(args) != len(params):
            raise DialectError("@use %s: %d arguments for %d parameters" % (name, len(args), len(params)))
        as_fn = fns is not None and any(decl for _, decl in params)
        # an integer literal is written into the function (a stride of 1
        # that the compiler sees is what lets it vectorise), not passed
        if as_fn:
            params = [(pname, None if decl and re.fullmatch(r"\(*\s*\d+\s*\)*", arg) else decl)
                      for (pname, decl), arg in zip(params, args)]
        # A phase-local name that an argument also uses would capture it.
        local_names = set(re.findall(r"\b(?:float|int|sgk_off)\s*\*?\s*(\w+)\s*=", pbody))
        for (pname, decl), arg in zip(params, args):
            if as_fn and decl:
                continue
            clash = local_names & set(re.findall(r"\b[A-Za-z_]\w*\b", arg))
            if clash:
                raise DialectError("@use %s: argument '%s' names %s, declared inside the phase"
                                   % (name, arg, ", ".join(sorted(clash))))
        # All parameters at once, so that an argument naming another
        # parameter is not substituted twice.
        table = {pname: arg for (pname, decl), arg in zip(params, args) if not (as_fn and decl)}
        inl = pbody
        if table:
            pat = re.compile(r"\b(" + "|".join(re.escape(p) for p in table) + r")\b")
            inl = pat.sub(lambda mm: "(" + table[mm.group(1)] + ")", pbody)
        for kv in extra:
            tok, val = kv.split("=")
            inl = inl.replace(tok, val)
        if not as_fn:
            return "{ /* phase %s */%s}" % (name, expand_uses(inl, phases, depth + 1, fns)), semi + 1
        key = (name, inl)
        if key not in fns:
            fns[key] = ("sgk_%s_%d" % (name, len(fns)), [decl for _, decl in params if decl],
                        expand_uses(inl, phases, depth + 1, fns))
        call_args = ", ".join(arg for (pname, decl), arg in zip(params, args) if decl)
        return "{ /* phase %s */ SGK_FN(%s)(%s); }" % (name, fns[key][0], call_args), semi + 1

    return rewrite_calls(body, USE, inline)


FOR_LOCAL = re.compile(r"@for_local(_simd)?\s*\(")


def lower_for_local(body, target):
    """@for_local (i, ni [, j, nj ...]) spreads the index space ni x nj x ...
    over the group: nested loops on the C target (no division), one loop
    over the flattened space elsewhere. @for_local_simd also asks the C
    compiler to vectorise the innermost index (its iterations are
    independent, as every @for_local's are)."""
    def loop(m, args, end):
        if len(args) < 2 or len(args) % 2:
            raise DialectError("@for_local takes (index, count) pairs, got %d arguments" % len(args))
        pairs = [(args[i], args[i + 1]) for i in range(0, len(args), 2)]
        simd = m.group(1) is not None
        if target == "c":
            out = []
            for n, (var, count) in enumerate(pairs):
                if simd and n == len(pairs) - 1:
                    out.append('_Pragma("omp simd") ')
                out.append("for (int %s = 0; %s < (%s); ++%s) " % (var, var, count, var))
            return "".join(out).rstrip(), end
        if len(pairs) == 1:
            var, count = pairs[0]
            return "for (int %s = SGK_LID; %s < (%s); %s += SGK_LSIZE)" % (var, var, count, var), end
        # flattened: e over the product; the indices, innermost first, are
        # declared by a loop that runs its body once
        flat = "sgk_e_" + "_".join(v for v, _ in pairs)
        total = " * ".join("(%s)" % c for _, c in pairs)
        decl, rest = [], flat
        for n, (var, count) in enumerate(reversed(pairs)):
            if n == len(pairs) - 1:
                decl.append("%s = %s" % (var, rest))
            else:
                decl.append("%s = %s %% (%s)" % (var, rest, count))
                rest = "(%s / (%s))" % (rest, count)
        return ("for (int %s = SGK_LID; %s < %s; %s += SGK_LSIZE) for (int %s, sgk_once = 1; sgk_once; "
                "sgk_once = 0)" % (flat, flat, total, flat, ", ".join(decl)), end)

    return rewrite_calls(body, FOR_LOCAL, loop)


def lower_tokens(body, target):
    body = re.sub(r"@group_id\((\d)\)", lambda m: "SGK_GROUP_ID_%s" % m.group(1), body)
    unroll = {"c": '_Pragma("GCC unroll 16") ', "cuda": '_Pragma("unroll") ', "hip": '_Pragma("unroll") '}
    body = body.replace("@unroll ", unroll.get(target, ""))
    body = body.replace("@simd ", '_Pragma("omp simd") ' if target == "c" else "")
    if target == "c":
        body = body.replace("@barrier;", "/* barrier */")
        body = re.sub(r"@simd_sum\(([\w, ]+)\)", r'_Pragma("omp simd reduction(+:\1)")', body)
    else:
        body = body.replace("@barrier;", "SGK_BARRIER();")
        body = re.sub(r"[ \t]*@simd_sum\([\w, ]+\)\n", "", body)
    space = {"opencl": ("__global ", "__local ")}.get(target, ("", ""))
    body = body.replace("@global ", space[0]).replace("@local ", space[1])
    if target == "c":
        body = body.replace("@global_or_local ", "")
    if "@" in body:
        bad = body[body.index("@"):].split()[0]
        raise DialectError("unknown construct %s" % bad)
    return body


# Register tiles (kernels/README.md): rows (SGK_RM) and columns (SGK_RN, or
# SGK_RNS, SGK_RNT where a product is narrow) of outputs one work-item holds, and
# SGK_PAD, the multiple every padded row length is of (a multiple of both
# column counts). GPUs spread columns over work-items, so their tiles are
# small; a CPU work-item is a whole SIMD register file, so the C target has
# one set per instruction set, chosen at run time (sgk_cpu_isa, C_ISAS).
GPU_TILES = {"SGK_RM": 4, "SGK_RN": 4, "SGK_RNS": 4, "SGK_RNT": 4, "SGK_PAD": 4}
C_PAD = 32
# (name, GCC target attribute or None, tiles): widest first
C_ISAS = (
    ("avx512", "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt",
     {"SGK_RM": 8, "SGK_RN": 32, "SGK_RNS": 16, "SGK_RNT": 8}),
    ("avx2", "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt", {"SGK_RM": 6, "SGK_RN": 16, "SGK_RNS": 8, "SGK_RNT": 4}),
    ("base", None, {"SGK_RM": 4, "SGK_RN": 8, "SGK_RNS": 4, "SGK_RNT": 4}),
)

GPU_DEFINES = "".join("#define %s %d\n" % kv for kv in GPU_TILES.items())

PRELUDE = {
    "c": """#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
typedef int64_t sgk_off;
typedef unsigned char uchar;
#define SGK_TC_MMA 0
#define SGK_INF INFINITY
#define sgk_sqrt sqrtf
#define sgk_log logf
#define SGK_PAD %d
/* SGK_CPU_BASE_ONLY builds the baseline kernels alone (a build that checks
 * the API rather than the kernels, such as the fuzzer's, spends a third of
 * the compile time) */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(SGK_CPU_BASE_ONLY)
#define SGK_X86 1
#else
#define SGK_X86 0
#endif
static inline float sgk_as_float(unsigned int u) { float f; memcpy(&f, &u, sizeof f); return f; }
static inline unsigned int sgk_as_uint(float f) { unsigned int u; memcpy(&u, &f, sizeof u); return u; }
/* a where c holds, else b, both computed: a choice the compiler vectorises
 * for every instruction set. A ?: with float arithmetic in an arm is not:
 * GCC moves the arithmetic into the arm and then will not compute it for
 * lanes that do not take it (it could trap) unless the instruction set has
 * masked lanes, so that on AVX2, SSE or NEON the whole loop stayed scalar. */
static inline float sgk_sel(int c, float a, float b)
{
    const unsigned int m = 0u - (unsigned int)(c != 0);
    return sgk_as_float((sgk_as_uint(a) & m) | (sgk_as_uint(b) & ~m));
}
/* x = n ln2 + r with n an integer and |r| <= ln2 / 2 (ln2 in two parts,
 * Cody and Waite's, so that r is exact to float's precision): the range
 * reduction of sgk_exp and sgk_silu. n by adding and removing 1.5 * 2^23,
 * which rounds x / ln2 to an integer in float arithmetic. */
static inline float sgk_exp_n(float x) { return (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; }
static inline float sgk_exp_r(float x, float n) { return (x - n * 0.693359375f) + n * 2.12194440e-4f; }

/* e^x from float arithmetic alone, so that loops calling it vectorise (libm's
 * expf is a call). x = n ln2 + r with |r| <= ln2 / 2; e^r by a degree-7
 * polynomial (Cephes' expf coefficients), times 2^n as two factors so that
 * results past FLT_MAX round once to inf. Within one ulp of e^x down to
 * FLT_MIN; below it 0: arithmetic on subnormals takes a microcode assist
 * on x86 that costs a hundred cycles, and weights that small vanish beside
 * the largest anyway (softmax) or beside 1 (silu's 1 + e^-t). e^-inf = 0,
 * e^inf = inf, NaN stays NaN (the clamps' comparisons are false for NaN,
 * and n is not converted from it). */
static inline float sgk_exp(float x)
{
    const float xc = sgk_sel(x > 89.0f, 89.0f, x);
    const float n = sgk_exp_n(xc), r = sgk_exp_r(xc, n);
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* NaN's n would be no int, nor would -inf's: 0 instead, and p carries
     * the NaN (-inf returns below) */
    const int ni = (int)sgk_sel((n == n) & (n > -200.0f), n, 0.0f), n1 = ni >> 1, n2 = ni - n1;
    const float e = p * sgk_as_float((unsigned int)(n1 + 127) << 23) * sgk_as_float((unsigned int)(n2 + 127) << 23);
    return sgk_sel(x < -87.33654f, 0.0f, e);
}

/* 1 / x for x >= 1, from float arithmetic alone (a division is a long
 * instruction that loops calling this would wait on): a first guess from
 * the bits, three Newton steps and a last correction, within one ulp; 0
 * from 2^126 on, where 1 / x would be subnormal. */
static inline float sgk_recip(float x)
{
    float y = sgk_as_float(0x7EF311C3u - sgk_as_uint(x));
    y = y * (2.0f - x * y);
    y = y * (2.0f - x * y);
    y = y * (2.0f - x * y);
    y = y + y * (1.0f - x * y);
    return sgk_sel(x >= 8.507059e37f, 0.0f, y);
}

/* 1 / (1 + e^-t), the logistic function of the relation MLP's activation:
 * silu runs once per hidden unit and pair, more often than any other
 * transcendental of the layer, so this takes fewer operations than
 * sgk_recip(1 + sgk_exp(-t)). e = e^-|t| never overflows, so the exponent
 * needs one factor and no clamp above; e^r is 1 + r + r^2 q(r) with q of
 * degree 4 (a minimax fit on |r| <= ln2 / 2, relative error 3e-9); 1 + e
 * lies in [1, 2], where a quadratic first guess of its reciprocal (error
 * 1/99) needs two Newton steps; t < 0 gives e / (1 + e). e is 0 below
 * e^-87, so that nothing subnormal is computed (sgk_exp's reason). Within
 * four ulps; 1 for a NaN (the exponent's argument is replaced so that n
 * stays an int), which silu's factor t then carries. */
static inline float sgk_sigmoid(float t)
{
    const float a = sgk_as_float(sgk_as_uint(t) | 0x80000000u);
    const int in = a >= -87.0f;
    const float x = sgk_sel(in, a, -87.0f);
    const float n = sgk_exp_n(x), r = sgk_exp_r(x, n);
    float q = 1.3814613186e-3f;
    q = q * r + 8.3687098230e-3f;
    q = q * r + 4.1668387363e-2f;
    q = q * r + 1.6666520690e-1f;
    q = q * r + 4.9999993452e-1f;
    const float p = q * (r * r) + r + 1.0f;
    const float e = sgk_sel(in, p * sgk_as_float((unsigned int)((int)n + 127) << 23), 0.0f);
    const float d = 1.0f + e;
    float y = (0.323232323f * d - 1.45454545f) * d + 2.12121212f;
    y = y + y * (1.0f - d * y);
    y = y + y * (1.0f - d * y);
    return sgk_sel(t < 0.0f, e * y, y);
}

/* t / (1 + e^-t) */
static inline float sgk_silu(float t) { return t * sgk_sigmoid(t); }

/* The instruction set whose kernels run: 2 AVX-512, 1 AVX2 and FMA, 0 the
 * compiler's baseline; SGK_CPU_ISA=avx512|avx2|base lowers it (never
 * raises it past what the processor has). Found once per process. */
static int sgk_isa_level = -1;
static const char *const sgk_isa_names[3] = {"base", "avx2", "avx512"};
int sgk_cpu_isa(void)
{
    int level = __atomic_load_n(&sgk_isa_level, __ATOMIC_RELAXED);
    if (level >= 0)
        return level;
    level = 0;
#if SGK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        level = 1;
    if (level == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
        level = 2;
#endif
    const char *cap = getenv("SGK_CPU_ISA");
    for (int i = 0; cap && i < level; i++)
        if (strcmp(cap, sgk_isa_names[i]) == 0)
            level = i;
    __atomic_store_n(&sgk_isa_level, level, __ATOMIC_RELAXED);
    return level;
}
const char *sgk_cpu_isa_name(void) { return sgk_isa_names[sgk_cpu_isa()]; }
""" % C_PAD,
    "cuda": """#include <cuda_runtime.h>
#include <math_constants.h>
typedef long long sgk_off;
typedef unsigned char uchar;
#define SGK_INF CUDART_INF_F
#define sgk_exp expf
#define sgk_sqrt sqrtf
#define sgk_log logf
#define sgk_recip(x) (1.0f / (x))
#define sgk_sigmoid(t) sgk_recip(1.0f + sgk_exp(-(t)))
#define sgk_silu(t) ((t) * sgk_sigmoid(t))
#define sgk_sel(c, a, b) ((c) ? (a) : (b))
#define SGK_LID ((int)threadIdx.x)
#define SGK_LSIZE ((int)blockDim.x)
#define SGK_GROUP_ID_0 ((int)blockIdx.x)
#define SGK_GROUP_ID_1 ((int)blockIdx.y)
#define SGK_BARRIER() __syncthreads()
#define sgk_as_float __uint_as_float
#define sgk_as_uint __float_as_uint
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SGK_TC_MMA 1
#else
#define SGK_TC_MMA 0
#endif
""" + GPU_DEFINES + "@MMA_CUDA@",
    "hip": """#include <hip/hip_runtime.h>
typedef long long sgk_off;
typedef unsigned char uchar;
/* matrix cores (v_mfma_f32_16x16x4f32, wave64) on CDNA's device code only */
#if defined(__HIP_DEVICE_COMPILE__) && __AMDGCN_WAVEFRONT_SIZE == 64 && \\
    (defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#define SGK_TC_MMA 1
#else
#define SGK_TC_MMA 0
#endif
#define SGK_INF __builtin_huge_valf()
#define sgk_exp expf
#define sgk_sqrt sqrtf
#define sgk_log logf
#define sgk_recip(x) (1.0f / (x))
#define sgk_sigmoid(t) sgk_recip(1.0f + sgk_exp(-(t)))
#define sgk_silu(t) ((t) * sgk_sigmoid(t))
#define sgk_sel(c, a, b) ((c) ? (a) : (b))
#define SGK_LID ((int)threadIdx.x)
#define SGK_LSIZE ((int)blockDim.x)
#define SGK_GROUP_ID_0 ((int)blockIdx.x)
#define SGK_GROUP_ID_1 ((int)blockIdx.y)
#define SGK_BARRIER() __syncthreads()
#define sgk_as_float __uint_as_float
#define sgk_as_uint __float_as_uint
""" + GPU_DEFINES + "@MMA_HIP@",
    "opencl": """typedef long sgk_off;
#define SGK_TC_MMA 0
#define SGK_INF INFINITY
#define sgk_exp exp
#define sgk_sqrt sqrt
#define sgk_log log
#define sgk_recip(x) (1.0f / (x))
#define sgk_sigmoid(t) sgk_recip(1.0f + sgk_exp(-(t)))
#define sgk_silu(t) ((t) * sgk_sigmoid(t))
#define sgk_sel(c, a, b) ((c) ? (a) : (b))
#define SGK_LID ((int)get_local_id(0))
#define SGK_LSIZE ((int)get_local_size(0))
#define SGK_GROUP_ID_0 ((int)get_group_id(0))
#define SGK_GROUP_ID_1 ((int)get_group_id(1))
#define SGK_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define sgk_as_float as_float
#define sgk_as_uint as_uint
""" + GPU_DEFINES,
}


# Definitions every target shares, after its prelude.
COMMON = """/* Floats between two queries' rows of the relation MLP's hidden layer in
 * local memory (TK keys of P each), skipping multiples of 1024 floats: rows
 * 4 KB apart share a CPU's level-1 cache sets, and a register tile reads
 * SGK_RM of them at once. kernels/plan.c sizes the scratch by the same rule. */
#define sgk_hid_row(tk, p) ((tk) * (p) % 1024 == 0 ? (tk) * (p) + SGK_PAD : (tk) * (p))
"""


def pad_of(target):
    """SGK_PAD of a target: what the host's plan rounds row lengths to."""
    return C_PAD if target == "c" else GPU_TILES["SGK_PAD"]


def param_info(p):
    """(is_local, is_pointer, ctype_without_space, name) of one kernel parameter."""
    is_local = p.startswith("@local ")
    name = re.search(r"(\w+)\s*$", p).group(1)
    ctype = p[:p.rindex(name)].replace("@global ", "").replace("@local ", "").strip()
    return is_local, "*" in ctype, ctype, name


def emit_kernel(name, params, body, target, isa=None):
    infos = [param_info(p) for p in params]
    smem = [i for i in infos if i[0]]
    if len(smem) != 1 or smem[0][3] != "smem" or infos[-1][3] != "smem":
        raise DialectError("kernel %s: the last parameter must be '@local float *smem'" % name)
    plain = infos[:-1]
    body = lower_tokens(lower_for_local(body, target), target)
    if target == "c":
        sig = ", ".join("%s %s" % (t, n) for _, _, t, n in plain)
        return (
            "static SGK_ISA_ATTR void sgk_group_%s_%s(int sgk_g0, int sgk_g1, float *smem, %s)\n{\n"
            "#define SGK_GROUP_ID_0 sgk_g0\n#define SGK_GROUP_ID_1 sgk_g1\n"
            "    (void)sgk_g0; (void)sgk_g1; (void)smem;%s\n#undef SGK_GROUP_ID_0\n#undef SGK_GROUP_ID_1\n}\n\n"
            % (name, isa, sig, body))
    if target == "opencl":
        sig = ", ".join(("__global " if ptr else "") + "%s %s" % (t, n) for _, ptr, t, n in plain)
        return "__kernel void %s(%s, __local float *smem)\n{%s}\n\n" % (name, sig, body)
    # cuda, hip
    sig = ", ".join("%s %s" % (t, n) for _, _, t, n in plain)
    args = ", ".join(n for _, _, _, n in plain)
    rt = "cuda" if target == "cuda" else "hip"
    return (
        "extern \"C\" __global__ void sgk_k_%s(%s)\n{\n"
        "    extern __shared__ float sgk_dyn_smem[];\n    [[maybe_unused]] float *smem = sgk_dyn_smem;%s}\n\n"
        "/* Enqueues (ng0 x ng1) groups of threads work-items with smem_bytes of\n"
        " * dynamic shared memory; returns the launch's error. */\n"
        "extern \"C\" %sError_t sgk_launch_%s(int ng0, int ng1, int threads, size_t smem_bytes,\n"
        "        %sStream_t stream, %s)\n{\n"
        "    sgk_k_%s<<<dim3(ng0, ng1), dim3(threads), smem_bytes, stream>>>(%s);\n"
        "    return %sGetLastError();\n}\n\n" % (name, sig, body, rt, name, rt, sig, name, args, rt))


def emit_c_dispatch(name, params):
    """sgk_cpu_NAME: the group function of the instruction set in use, run
    over the groups by an OpenMP loop; each thread owns smem_floats of pool."""
    plain = [param_info(p) for p in params][:-1]
    sig = ", ".join("%s %s" % (t, n) for _, _, t, n in plain)
    args = ", ".join(n for _, _, _, n in plain)
    # sgk_cpu_isa's level n is C_ISAS[-1 - n]
    pick = "sgk_group_%s_base" % name
    for level, (isa, _, _) in list(enumerate(reversed(C_ISAS)))[1:]:
        pick = "level == %d ? sgk_group_%s_%s : %s" % (level, name, isa, pick)
    return (
        "void sgk_cpu_%s(int threads, int ng0, int ng1, float *pool, size_t smem_floats, %s)\n{\n"
        "    void (*sgk_group)(int, int, float *, %s) = sgk_group_%s_base;\n"
        "#if SGK_X86\n    const int level = sgk_cpu_isa();\n    sgk_group = %s;\n#endif\n"
        "    /* Every region with the same team, however few its groups: libgomp\n"
        "     * ends the threads a smaller team leaves out and starts them again\n"
        "     * for the next larger one, at a thread creation each. One group\n"
        "     * runs on the calling thread. */\n"
        "    if ((int64_t)ng0 * ng1 == 1) {\n"
        "        sgk_group(0, 0, pool, %s);\n"
        "        return;\n"
        "    }\n"
        "#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads > 0 ? threads : 1)\n"
        "    for (int sgk_g1 = 0; sgk_g1 < ng1; ++sgk_g1)\n"
        "        for (int sgk_g0 = 0; sgk_g0 < ng0; ++sgk_g0) {\n"
        "#ifdef _OPENMP\n            float *sgk_sm = pool + (size_t)omp_get_thread_num() * smem_floats;\n"
        "#else\n            float *sgk_sm = pool;\n#endif\n"
        "            sgk_group(sgk_g0, sgk_g1, sgk_sm, %s);\n"
"        }\n}\n\n" % (name, sig, ", ".join(t for _, _, t, _ in plain), name, pick, args, args))


# host types of the kernels' scalar parameters, for clSetKernelArg
CL_SCALAR = {"int": "cl_int", "float": "cl_float", "sgk_off": "cl_long"}


def emit_cl_args(kernels):
    """C helpers that set an OpenCL kernel's arguments in the dialect's order."""
    out = ["/* Generated by sgkgen.py from the kernels/ .sgk sources: do not edit. */",
           "#ifndef SGK_CL_ARGS_H", "#define SGK_CL_ARGS_H", "#include <CL/cl.h>", "",
           "/* what the host's plan rounds padded row lengths to (kernels/plan.h) */",
           "#define SGK_GEN_PAD %d" % pad_of("opencl"), ""]
    for name, params, _, _ in kernels:
        infos = [param_info(p) for p in params][:-1]
        sig = ", ".join(("cl_mem %s" if ptr else "%s %%s" % CL_SCALAR.get(t, t)) % n for _, ptr, t, n in infos)
        out.append("static inline cl_int sgk_cl_args_%s(cl_kernel k, %s, size_t smem_bytes)\n{" % (name, sig))
        out.append("    cl_int e = CL_SUCCESS;")
        for idx, (_, ptr, t, n) in enumerate(infos):
            ty = "cl_mem" if ptr else CL_SCALAR.get(t, "cl_" + t)
            out.append("    if (e == CL_SUCCESS) e = clSetKernelArg(k, %d, sizeof(%s), &%s);" % (idx, ty, n))
        out.append("    if (e == CL_SUCCESS) e = clSetKernelArg(k, %d, smem_bytes, NULL);" % len(infos))
        out.append("    return e;\n}\n")
    out.append("#endif")
    return "\n".join(out) + "\n"


def emit_decls(kernels, target):
    """Prototypes of the generated entry points, for the backend's host code."""
    out = []
    for name, params, _, _ in kernels:
        infos = [param_info(p) for p in params][:-1]
        sig = ", ".join("%s %s" % (t, n) for _, _, t, n in infos)
        if target == "c":
            out.append("void sgk_cpu_%s(int threads, int ng0, int ng1, float *pool, size_t smem_floats, %s);"
                       % (name, sig))
        else:
            rt = "cuda" if target == "cuda" else "hip"
            out.append("%sError_t sgk_launch_%s(int ng0, int ng1, int threads, size_t smem_bytes, "
                       "%sStream_t stream, %s);" % (rt, name, rt, sig))
    return "\n".join(out) + "\n"


def generate(text, target):
    lead, phases, kernels = parse(text)
    prelude = PRELUDE[target]
    for tag, header in (("@MMA_CUDA@", "mma_cuda.h"), ("@MMA_HIP@", "mma_hip.h")):
        if tag in prelude:
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), header)) as f:
                prelude = prelude.replace(tag, f.read())
    parts = ["/* Generated by sgkgen.py --target %s from the kernels/ .sgk sources: do not edit. */\n" % target,
             prelude, COMMON, "\n"]
    fns = {} if target == "c" else None
    expanded = [(name, params, expand_uses(body, phases, 0, fns), comment)
                for name, params, body, comment in kernels]
    if target != "c":
        for name, params, body, comment in expanded:
            parts.append(comment.strip() + "\n" if comment.strip() else "")
            parts.append(emit_kernel(name, params, body, target))
        return "".join(parts), kernels
    for n, (isa, attr, tiles) in enumerate(C_ISAS):
        if attr:
            parts.append("#if SGK_X86\n#define SGK_ISA_ATTR __attribute__((target(\"%s\")))\n" % attr)
        else:
            parts.append("#define SGK_ISA_ATTR\n")
        parts.append("".join("#define %s %d\n" % kv for kv in tiles.items()))
        parts.append("#define SGK_FN(f) f##_%s\n\n" % isa)
        # the phases with parameters of their own, each a function: the
        # compiler allocates its registers for it alone
        for fname, decls, fbody in sorted(fns.values()):
            fbody = lower_tokens(lower_for_local(fbody, "c"), "c")
            parts.append("static SGK_ISA_ATTR __attribute__((noinline)) void %s_%s(%s)\n{%s}\n\n"
                         % (fname, isa, lower_tokens(", ".join(decls) + " ", "c").strip(), fbody))
        for name, params, body, comment in expanded:
            if n == 0:
                parts.append(comment.strip() + "\n" if comment.strip() else "")
            parts.append(emit_kernel(name, params, body, target, isa))
        parts.append("".join("#undef %s\n" % k for k in tiles) + "#undef SGK_FN\n#undef SGK_ISA_ATTR\n")
        parts.append("#endif\n\n" if attr else "\n")
    for name, params, _, _ in expanded:
        parts.append(emit_c_dispatch(name, params))
    return "".join(parts), kernels


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=TARGETS, required=True)
    ap.add_argument("--decls", help="also write prototypes of the entry points (c, cuda, hip)")
    ap.add_argument("--args-header", help="opencl: also write the clSetKernelArg helpers")
    ap.add_argument("--embed", help="opencl: also write the source as a C string constant in this file")
    ap.add_argument("paths", nargs="+", metavar="INPUT... OUTPUT",
                    help="the .sgk sources, read as one text in this order, then the output")
    a = ap.parse_args(argv)
    if len(a.paths) < 2:
        ap.error("give one input or more, then the output")
    inputs, output = a.paths[:-1], a.paths[-1]
    text = ""
    for path in inputs:
        with open(path, encoding="utf-8") as f:
            text += f.read() + "\n"
    try:
        src, kernels = generate(text, a.target)
    except DialectError as e:
        sys.stderr.write("sgkgen: %s: %s\n" % (" ".join(inputs), e))
        return 1
    with open(output, "w", encoding="utf-8", newline="\n") as f:
        f.write(src)
    if a.decls:
        with open(a.decls, "w", encoding="utf-8", newline="\n") as f:
            guard = "SGK_GEN_%s_H" % a.target.upper()
            f.write("/* Generated by sgkgen.py: do not edit. */\n#ifndef %s\n#define %s\n" % (guard, guard))
            f.write("/* what the host's plan rounds padded row lengths to (kernels/plan.h) */\n"
                    "#define SGK_GEN_PAD %d\n" % pad_of(a.target))
            if a.target == "c":
                f.write("#include <stddef.h>\n#include <stdint.h>\ntypedef unsigned char uchar;\n"
                        "typedef int64_t sgk_off;\n"
                        "/* the instruction set the kernels run with (0 base, 1 avx2, 2 avx512) */\n"
                        "int sgk_cpu_isa(void);\nconst char *sgk_cpu_isa_name(void);\n")
            else:
                f.write("typedef long long sgk_off;\n")
            f.write(emit_decls(kernels, a.target) + "#endif\n")
    if a.args_header:
        with open(a.args_header, "w", encoding="utf-8", newline="\n") as f:
            f.write(emit_cl_args(kernels))
    if a.embed:
        with open(a.embed, "w", encoding="utf-8", newline="\n") as f:
            f.write("/* Generated by sgkgen.py: the OpenCL C source as a string. */\n")
            f.write("static const char sgk_opencl_source[] =\n")
            for line in src.splitlines():
                f.write('    "%s\\n"\n' % line.replace("\\", "\\\\").replace('"', '\\"'))
            f.write("    ;\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
