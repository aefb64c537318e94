#!/usr/bin/env python3
"""sgkgen: emits each backend's kernel source from the portable dialect.

    sgkgen.py --target {c,cuda,hip,opencl} [--args-header FILE] INPUT OUTPUT

The dialect (kernels/README.md) is C with a handful of @-constructs: kernels
and phases are work-group programs, @for_local spreads a loop over the
group's work-items, @barrier separates phases, @local arrays carry data
across barriers. Everything the targets differ in lives in this file; the
kernel logic lives only in the .sgk input. Output is deterministic: the same
input gives the same bytes (no dates, no paths, sorted nothing-dependent).
Python 3 standard library only.
"""
import argparse
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
            phases[m.group(2)] = (params, body)
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


def expand_uses(body, phases, depth=0):
    """Inline every @use NAME(args) [@tok=@val ...]; with its phase's body."""
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
        # A phase-local name that an argument also uses would capture it.
        local_names = set(re.findall(r"\b(?:float|int|sgk_off)\s*\*?\s*(\w+)\s*=", pbody))
        for arg in args:
            clash = local_names & set(re.findall(r"\b[A-Za-z_]\w*\b", arg))
            if clash:
                raise DialectError("@use %s: argument '%s' names %s, declared inside the phase"
                                   % (name, arg, ", ".join(sorted(clash))))
        # All parameters at once, so that an argument naming another
        # parameter is not substituted twice.
        table = dict(zip(params, args))
        pat = re.compile(r"\b(" + "|".join(re.escape(p) for p in params) + r")\b")
        inl = pat.sub(lambda mm: "(" + table[mm.group(1)] + ")", pbody)
        for kv in extra:
            tok, val = kv.split("=")
            inl = inl.replace(tok, val)
        return "{ /* phase %s */%s}" % (name, expand_uses(inl, phases, depth + 1)), semi + 1

    return rewrite_calls(body, USE, inline)


FOR_LOCAL = re.compile(r"@for_local\s*\(")


def lower_for_local(body, target):
    def loop(m, args, end):
        var, count = args
        if target == "c":
            return "for (int %s = 0; %s < (%s); ++%s)" % (var, var, count, var), end
        return "for (int %s = SGK_LID; %s < (%s); %s += SGK_LSIZE)" % (var, var, count, var), end

    return rewrite_calls(body, FOR_LOCAL, loop)


def lower_tokens(body, target):
    body = re.sub(r"@group_id\((\d)\)", lambda m: "SGK_GROUP_ID_%s" % m.group(1), body)
    if target == "c":
        body = body.replace("@barrier;", "/* barrier */")
        body = re.sub(r"@simd_sum\(([\w, ]+)\)", r'_Pragma("omp simd reduction(+:\1)")', body)
    else:
        body = body.replace("@barrier;", "SGK_BARRIER();")
        body = re.sub(r"[ \t]*@simd_sum\([\w, ]+\)\n", "", body)
    space = {"opencl": ("__global ", "__local ")}.get(target, ("", ""))
    body = body.replace("@global ", space[0]).replace("@local ", space[1])
    if "@" in body:
        bad = body[body.index("@"):].split()[0]
        raise DialectError("unknown construct %s" % bad)
    return body


PRELUDE = {
    "c": """#include <math.h>
#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
typedef int64_t sgk_off;
typedef unsigned char uchar;
#include <string.h>
#define SGK_INF INFINITY
#define sgk_exp expf
#define sgk_sqrt sqrtf
static inline float sgk_as_float(unsigned int u) { float f; memcpy(&f, &u, sizeof f); return f; }
static inline unsigned int sgk_as_uint(float f) { unsigned int u; memcpy(&u, &f, sizeof u); return u; }
""",
    "cuda": """#include <cuda_runtime.h>
#include <math_constants.h>
typedef long long sgk_off;
typedef unsigned char uchar;
#define SGK_INF CUDART_INF_F
#define sgk_exp expf
#define sgk_sqrt sqrtf
#define SGK_LID ((int)threadIdx.x)
#define SGK_LSIZE ((int)blockDim.x)
#define SGK_GROUP_ID_0 ((int)blockIdx.x)
#define SGK_GROUP_ID_1 ((int)blockIdx.y)
#define SGK_BARRIER() __syncthreads()
#define sgk_as_float __uint_as_float
#define sgk_as_uint __float_as_uint
""",
    "hip": """#include <hip/hip_runtime.h>
typedef long long sgk_off;
typedef unsigned char uchar;
#define SGK_INF __builtin_huge_valf()
#define sgk_exp expf
#define sgk_sqrt sqrtf
#define SGK_LID ((int)threadIdx.x)
#define SGK_LSIZE ((int)blockDim.x)
#define SGK_GROUP_ID_0 ((int)blockIdx.x)
#define SGK_GROUP_ID_1 ((int)blockIdx.y)
#define SGK_BARRIER() __syncthreads()
#define sgk_as_float __uint_as_float
#define sgk_as_uint __float_as_uint
""",
    "opencl": """typedef long sgk_off;
#define SGK_INF INFINITY
#define sgk_exp exp
#define sgk_sqrt sqrt
#define SGK_LID ((int)get_local_id(0))
#define SGK_LSIZE ((int)get_local_size(0))
#define SGK_GROUP_ID_0 ((int)get_group_id(0))
#define SGK_GROUP_ID_1 ((int)get_group_id(1))
#define SGK_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define sgk_as_float as_float
#define sgk_as_uint as_uint
""",
}


def param_info(p):
    """(is_local, is_pointer, ctype_without_space, name) of one kernel parameter."""
    is_local = p.startswith("@local ")
    name = re.search(r"(\w+)\s*$", p).group(1)
    ctype = p[:p.rindex(name)].replace("@global ", "").replace("@local ", "").strip()
    return is_local, "*" in ctype, ctype, name


def emit_kernel(name, params, body, target):
    infos = [param_info(p) for p in params]
    smem = [i for i in infos if i[0]]
    if len(smem) != 1 or smem[0][3] != "smem" or infos[-1][3] != "smem":
        raise DialectError("kernel %s: the last parameter must be '@local float *smem'" % name)
    plain = infos[:-1]
    body = lower_tokens(lower_for_local(body, target), target)
    if target == "c":
        sig = ", ".join("%s %s" % (t, n) for _, _, t, n in plain)
        args = ", ".join(n for _, _, _, n in plain)
        return (
            "static void sgk_group_%s(int sgk_g0, int sgk_g1, float *smem, %s)\n{\n"
            "#define SGK_GROUP_ID_0 sgk_g0\n#define SGK_GROUP_ID_1 sgk_g1\n"
            "    (void)sgk_g0; (void)sgk_g1; (void)smem;%s\n#undef SGK_GROUP_ID_0\n#undef SGK_GROUP_ID_1\n}\n\n"
            "/* Runs groups (ng0 x ng1); each OpenMP thread owns smem_floats of pool. */\n"
            "void sgk_cpu_%s(int threads, int ng0, int ng1, float *pool, size_t smem_floats, %s)\n{\n"
            "    (void)threads;\n"
            "#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)\n"
            "    for (int g1 = 0; g1 < ng1; ++g1)\n"
            "        for (int g0 = 0; g0 < ng0; ++g0) {\n"
            "#ifdef _OPENMP\n            float *sm = pool + (size_t)omp_get_thread_num() * smem_floats;\n"
            "#else\n            float *sm = pool;\n#endif\n"
            "            sgk_group_%s(g0, g1, sm, %s);\n"
            "        }\n}\n\n" % (name, sig, body, name, sig, name, args))
    if target == "opencl":
        sig = ", ".join(("__global " if ptr else "") + "%s %s" % (t, n) for _, ptr, t, n in plain)
        return "__kernel void %s(%s, __local float *smem)\n{%s}\n\n" % (name, sig, body)
    # cuda, hip
    sig = ", ".join("%s %s" % (t, n) for _, _, t, n in plain)
    args = ", ".join(n for _, _, _, n in plain)
    rt = "cuda" if target == "cuda" else "hip"
    return (
        "extern \"C\" __global__ void sgk_k_%s(%s)\n{\n"
        "    extern __shared__ float sgk_dyn_smem[];\n    float *smem = sgk_dyn_smem;\n    (void)smem;%s}\n\n"
        "/* Enqueues (ng0 x ng1) groups of threads work-items with smem_bytes of\n"
        " * dynamic shared memory; returns the launch's error. */\n"
        "extern \"C\" %sError_t sgk_launch_%s(int ng0, int ng1, int threads, size_t smem_bytes,\n"
        "        %sStream_t stream, %s)\n{\n"
        "    sgk_k_%s<<<dim3(ng0, ng1), dim3(threads), smem_bytes, stream>>>(%s);\n"
        "    return %sGetLastError();\n}\n\n" % (name, sig, body, rt, name, rt, sig, name, args, rt))


# host types of the kernels' scalar parameters, for clSetKernelArg
CL_SCALAR = {"int": "cl_int", "float": "cl_float", "sgk_off": "cl_long"}


def emit_cl_args(kernels):
    """C helpers that set an OpenCL kernel's arguments in the dialect's order."""
    out = ["/* Generated by sgkgen.py from kernels/relation.sgk: do not edit. */",
           "#ifndef SGK_CL_ARGS_H", "#define SGK_CL_ARGS_H", "#include <CL/cl.h>", ""]
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
    parts = ["/* Generated by sgkgen.py --target %s from kernels/relation.sgk: do not edit. */\n" % target,
             PRELUDE[target], "\n"]
    for name, params, body, comment in kernels:
        body = expand_uses(body, phases)
        parts.append(comment.strip() + "\n" if comment.strip() else "")
        parts.append(emit_kernel(name, params, body, target))
    return "".join(parts), kernels


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=TARGETS, required=True)
    ap.add_argument("--decls", help="also write prototypes of the entry points (c, cuda, hip)")
    ap.add_argument("--args-header", help="opencl: also write the clSetKernelArg helpers")
    ap.add_argument("--embed", help="opencl: also write the source as a C string constant in this file")
    ap.add_argument("input")
    ap.add_argument("output")
    a = ap.parse_args(argv)
    with open(a.input, encoding="utf-8") as f:
        text = f.read()
    try:
        src, kernels = generate(text, a.target)
    except DialectError as e:
        sys.stderr.write("sgkgen: %s: %s\n" % (a.input, e))
        return 1
    with open(a.output, "w", encoding="utf-8", newline="\n") as f:
        f.write(src)
    if a.decls:
        with open(a.decls, "w", encoding="utf-8", newline="\n") as f:
            guard = "SGK_GEN_%s_H" % a.target.upper()
            f.write("/* Generated by sgkgen.py: do not edit. */\n#ifndef %s\n#define %s\n" % (guard, guard))
            if a.target == "c":
                f.write("#include <stddef.h>\n#include <stdint.h>\ntypedef unsigned char uchar;\n"
                        "typedef int64_t sgk_off;\n")
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
