"""The fused mesa kernel with sixteen sequences in the lanes of one SIMD vector (LLVM IR via llvmlite).

Why. The numba kernel this module replaced vectorised along the positions t of one sequence: about 120
short vector loops per sequence (N = 98 positions at T = 100), each paying a set-up, a horizontal sum and a
remainder. At N = 2 a paper-size epoch still took 13 of 47 ms there. Here the vector runs across 16 sequences
instead: every per-position quantity of the closed-form forward and backward pass (the formulas of
:mod:`companion.mesa.kernels`, its module docstring) is one ``<16 x float>`` value, the loops over
coordinates are unrolled when the code is generated (one kernel per d), and nothing is left for an
auto-vectoriser to guess. numba could not be made to vectorise that body (written as a loop over the lanes,
LLVM gave up on the run-time alias checks, even with numba's ``noalias`` flag), so this module writes the
LLVM IR itself and compiles it with llvmlite (numba's own LLVM) for the host CPU: about a second per d
and dtype, against 8 s for the numba kernel it replaced.

Layout, per block of 16 sequences (lane l = sequence 16 b + l; the last block is padded with zero
sequences, whose loss and gradients are 0):

* ``TB[b, t, row, l]`` with rows ``x_re, x_im, lam^t_re, lam^t_im, y_re, y_im`` (d each): the tables;
* ``SQ[b, row, l]`` with rows ``z_re, z_im, lam_re, lam_im, K_re, K_im`` (d, d, d, d, d^2, d^2);
* a scratch ``ACC[row, l]`` per thread: the maps C and Rv, and the running sums of the backward pass.

:func:`companion.mesa.kernels.sweep` calls the compiled function on ranges of blocks. The gradient of each
block of 16 sequences is summed over its lanes in float64 and written to the block's own slot, so the result
does not depend on the number of threads.

What the generated code does to keep its values in registers (measured on this machine's AVX-512 core, 32
vector registers: a paper-size loss-and-gradient sweep 41 ms in the numba kernel, 31 ms in the first version
of this one, 24 ms now; the loss alone 26, 18 and 13 ms):

* every function is ``noinline`` (one call per position costs nothing; inlined, LLVM hoisted the sequence's
  rows out of the position loop and spilled them);
* rows that a function never writes (the tables, the sequences, the maps while the positions run) are
  loaded with ``!invariant.load`` from ``dereferenceable`` arguments, so the register allocator reloads them
  instead of spilling them, and each table row is reloaded where it is used rather than kept in a name;
* the forward pass computes the columns of F where they are needed, and the backward pass adds each
  column of dL/dF to dL/dC as soon as it is known.

Compiled code is cached on disk (object code keyed by the IR text, the CPU, its features and the LLVM
version, followed by its own sha256 so that a damaged file is compiled again), so only the first process on
a machine pays the compilation.
"""

from __future__ import annotations

import ast
import ctypes
import hashlib
import os
import struct
import threading

import numpy as np

NL = 16  # lanes per vector
_FM = "reassoc nsz arcp contract"  # IEEE-safe fast math, as numba's kernel: NaN and Inf propagate


# ----------------------------------------------------------------------------------------------------------
# The bodies, written as straight-line Python-like statements over lane vectors (generated per d)
# ----------------------------------------------------------------------------------------------------------

def table_rows(d: int) -> int:
    """Rows (of 16 lanes) of the tables per block and position: x_t, lam^t, x_{t+1}, real and imaginary."""
    return 6 * d


def sequence_rows(d: int) -> int:
    """Rows (of 16 lanes) of the sequences per block: x_1, lam (d each) and K (d^2), real and imaginary."""
    return 4 * d + 2 * d * d


def gradient_slots(d: int) -> int:
    """float64 numbers of one block's gradient: dL/dW_KQ (2d x 2d) then dL/dW_PV (d x 2d), complex."""
    return 2 * (4 * d * d + 2 * d * d)


def scratch_rows(d: int) -> int:
    """Rows (of 16 lanes) of the scratch ACC a thread needs for coordinate dimension d."""
    return _rows(d)["total"]


def _rows(d: int) -> dict[str, int]:
    """First row of each scratch family in ACC, and ``"total"``."""
    nc = 2 * d + 2
    rows, nxt = {}, 0
    for name, n in (("Cr", nc * d), ("Ci", nc * d), ("Vr", d * (d + 1)), ("Vi", d * (d + 1)),
                    ("gCr", d * nc), ("gCi", d * nc), ("gRr", (d + 1) * d), ("gRi", (d + 1) * d)):
        rows[name] = nxt
        nxt += n
    rows["total"] = nxt
    return rows


def bodies(d: int) -> dict[str, list[str]]:
    """Statements of the generated functions ``maps``, ``step0`` (loss), ``step1`` (loss and gradient),
    ``step2`` (loss and predictions) and ``lift``, over lane vectors.

    Names: ``ACC[r]``, ``SQ[r]``, ``TB[r]``, ``PRED[r]`` are rows of 16 lanes; ``WB`` the lanes' weights;
    ``LOSS`` the lanes' loss (float64); ``tp``, ``ir`` the position t and 1/(t-1); ``wk{i}_{k}_{r,i}`` and
    ``wp{a}_{k}_{r,i}`` the weights W_KQ and W_PV (the same in every lane); ``GOUT[j] = RED(ACC[r])`` sums
    a row over the lanes into float64 slot j of the block's gradient."""
    D = 2 * d
    nc = 2 * d + 2
    rows = _rows(d)

    def A(name, idx):
        return f"ACC[{rows[name] + idx}]"

    sq_off = {"zr": 0, "zi": d, "lr": 2 * d, "li": 3 * d, "Kr": 4 * d, "Ki": 4 * d + d * d}
    tb_off = {"xr": 0, "xi": d, "pr": 2 * d, "pi": 3 * d, "yr": 4 * d, "yi": 5 * d}

    def Q(kind, idx):
        return f"SQ[{sq_off[kind] + idx}]"

    def T(kind, idx):
        return f"TB[{tb_off[kind] + idx}]"

    out: list[str] = []
    e = out.append

    def cmul(dst, a, b, conj_a=False):  # dst = a b (or conj(a) b), a and b (re, im) expressions
        ar, ai = a
        br, bi = b
        if conj_a:
            e(f"{dst}_r = {ar} * {br} + {ai} * {bi}")
            e(f"{dst}_i = {ar} * {bi} - {ai} * {br}")
        else:
            e(f"{dst}_r = {ar} * {br} - {ai} * {bi}")
            e(f"{dst}_i = {ar} * {bi} + {ai} * {br}")

    def csum(dst, terms, conj_a=False, init=None):  # dst = init + sum of products
        rs = [] if init is None else [init[0]]
        is_ = [] if init is None else [init[1]]
        for (ar, ai), (br, bi) in terms:
            if conj_a:
                rs.append(f"{ar} * {br} + {ai} * {bi}")
                is_.append(f"{ar} * {bi} - {ai} * {br}")
            else:
                rs.append(f"{ar} * {br} - {ai} * {bi}")
                is_.append(f"{ar} * {bi} + {ai} * {br}")
        e(f"{dst}_r = " + (" + ".join(rs) if rs else "0.0"))
        e(f"{dst}_i = " + (" + ".join(is_) if is_ else "0.0"))

    def v(name):
        return (f"{name}_r", f"{name}_i")

    def load_K():
        for j in range(d):
            for k in range(d):
                e(f"K{j}_{k}_r = {Q('Kr', j * d + k)}")
                e(f"K{j}_{k}_i = {Q('Ki', j * d + k)}")

    def load_seq():
        for j in range(d):
            e(f"z{j}_r = {Q('zr', j)}")
            e(f"z{j}_i = {Q('zi', j)}")
            e(f"lm{j}_r = {Q('lr', j)}")
            e(f"lm{j}_i = {Q('li', j)}")
        load_K()

    result: dict[str, list[str]] = {}

    # ---- maps: C (columns Ma^T, (K Ma)^T, Ma^T 1, N^T conj z) and Rv of each lane's sequence
    load_seq()
    for i in range(d):
        for k in range(d):
            # N_ik = A[i,k] + A[i,d+k] conj(lam_k);  M_ik = N_ik + lam_i (A[d+i,k] + A[d+i,d+k] conj(lam_k))
            e(f"N{i}_{k}_r = wk{i}_{k}_r + wk{i}_{d + k}_r * lm{k}_r + wk{i}_{d + k}_i * lm{k}_i")
            e(f"N{i}_{k}_i = wk{i}_{k}_i + wk{i}_{d + k}_i * lm{k}_r - wk{i}_{d + k}_r * lm{k}_i")
            e(f"q_r = wk{d + i}_{k}_r + wk{d + i}_{d + k}_r * lm{k}_r + wk{d + i}_{d + k}_i * lm{k}_i")
            e(f"q_i = wk{d + i}_{k}_i + wk{d + i}_{d + k}_i * lm{k}_r - wk{d + i}_{d + k}_r * lm{k}_i")
            cmul(f"M{i}_{k}", v(f"lm{i}"), ("q_r", "q_i"))
            e(f"M{i}_{k}_r = M{i}_{k}_r + N{i}_{k}_r")
            e(f"M{i}_{k}_i = M{i}_{k}_i + N{i}_{k}_i")
            cmul(f"C{i}_{k}", v(f"z{i}"), v(f"M{i}_{k}"), conj_a=True)  # column i, coordinate k
            e(f"{A('Cr', i * d + k)} = C{i}_{k}_r")
            e(f"{A('Ci', i * d + k)} = C{i}_{k}_i")
            # (R diag z)^T[k, i] = (W_PV[i,k] + W_PV[i,d+k] conj(lam_k)) z_k
            e(f"q_r = wp{i}_{k}_r + wp{i}_{d + k}_r * lm{k}_r + wp{i}_{d + k}_i * lm{k}_i")
            e(f"q_i = wp{i}_{k}_i + wp{i}_{d + k}_i * lm{k}_r - wp{i}_{d + k}_r * lm{k}_i")
            cmul("vv", ("q_r", "q_i"), v(f"z{k}"))
            e(f"{A('Vr', i * (d + 1) + k)} = vv_r")
            e(f"{A('Vi', i * (d + 1) + k)} = vv_i")
    for k in range(d):
        e(f"{A('Cr', 2 * d * d + k)} = " + " + ".join(f"C{j}_{k}_r" for j in range(d)))  # column 2d: Ma^T 1
        e(f"{A('Ci', 2 * d * d + k)} = " + " + ".join(f"C{j}_{k}_i" for j in range(d)))
        for j in range(d):  # column d+j: (K Ma)^T
            csum("kk", [(v(f"C{q}_{k}"), v(f"K{j}_{q}")) for q in range(d)])
            e(f"{A('Cr', (d + j) * d + k)} = kk_r")
            e(f"{A('Ci', (d + j) * d + k)} = kk_i")
        csum("kk", [(v(f"z{j}"), v(f"N{j}_{k}")) for j in range(d)], conj_a=True)  # column 2d+1: N^T conj z
        e(f"{A('Cr', (2 * d + 1) * d + k)} = kk_r")
        e(f"{A('Ci', (2 * d + 1) * d + k)} = kk_i")
    for a in range(d):  # (W_PV1 z)
        csum("kk", [((f"wp{a}_{j}_r", f"wp{a}_{j}_i"), v(f"z{j}")) for j in range(d)])
        e(f"{A('Vr', a * (d + 1) + d)} = kk_r")
        e(f"{A('Vi', a * (d + 1) + d)} = kk_i")
    result["maps"] = out[:]

    # ---- one position: forward (all modes), predictions (mode 2), backward (mode 1)
    def Fcol(c, dst):  # column c of F = C^T x
        csum(dst, [((A('Cr', c * d + k), A('Ci', c * d + k)), v(f"x{k}")) for k in range(d)])

    def forward(pred: bool):
        # ordered so that few vectors are live at once: a = F_0..d-1 and u = conj(lam^t) a first, then each
        # w_j with its column (K a)_j; x and lam^t are table rows, reloaded where they are used
        for k in range(d):
            e(f"x{k}_r = {T('xr', k)}")
            e(f"x{k}_i = {T('xi', k)}")
            e(f"p{k}_r = {T('pr', k)}")
            e(f"p{k}_i = {T('pi', k)}")
        Fcol(2 * d, "Fs")
        for k in range(d):
            Fcol(k, f"F{k}")
            cmul(f"u{k}", v(f"p{k}"), v(f"F{k}"), conj_a=True)
        for j in range(d):  # w_j = t a_j + lam_j^t (K conj(lam^t) a)_j - (K a)_j - s
            csum("h", [(v(f"K{j}_{k}"), v(f"u{k}")) for k in range(d)])
            cmul("ph", v(f"p{j}"), ("h_r", "h_i"))
            Fcol(d + j, "Fb")
            e(f"w{j}_r = tp * F{j}_r + ph_r - Fb_r - Fs_r")
            e(f"w{j}_i = tp * F{j}_i + ph_i - Fb_i - Fs_i")
        Fcol(2 * d + 1, f"w{d}")
        terms = []
        for a in range(d):  # residual r = Rv^T [w; s'] / (t-1) - y
            csum("yh", [((A('Vr', a * (d + 1) + i), A('Vi', a * (d + 1) + i)), v(f"w{i}")) for i in range(d + 1)])
            e(f"r{a}_r = yh_r * ir - {T('yr', a)}")
            e(f"r{a}_i = yh_i * ir - {T('yi', a)}")
            terms.append(f"r{a}_r * r{a}_r + r{a}_i * r{a}_i")
            if pred:
                e(f"PRED[{a}] = yh_r * ir")
                e(f"PRED[{d + a}] = yh_i * ir")
        e("LOSS += " + " + ".join(terms))

    def gC_col(c, dF):  # dL/dC[:, c] += x conj(dF_c) (the complex convention of the package)
        for k in range(d):
            e(f"{A('gCr', k * nc + c)} += x{k}_r * {dF}_r + x{k}_i * {dF}_i")
            e(f"{A('gCi', k * nc + c)} += x{k}_r * {dF}_i - x{k}_i * {dF}_r")

    def backward():
        e("sc = ir * WB")
        for a in range(d):
            e(f"g{a}_r = r{a}_r * sc")
            e(f"g{a}_i = r{a}_i * sc")
        for i in range(d + 1):  # dL/dRv
            for a in range(d):
                e(f"{A('gRr', i * d + a)} += w{i}_r * g{a}_r + w{i}_i * g{a}_i")
                e(f"{A('gRi', i * d + a)} += w{i}_r * g{a}_i - w{i}_i * g{a}_r")
        for i in range(d + 1):
            csum(f"gw{i}", [((A('Vr', a * (d + 1) + i), A('Vi', a * (d + 1) + i)), v(f"g{a}")) for a in range(d)],
                 conj_a=True)
        for j in range(d):
            cmul(f"uu{j}", v(f"p{j}"), v(f"gw{j}"), conj_a=True)
        for k in range(d):  # the columns of dL/dF, each added to dL/dC as soon as it is known
            csum("hb", [(v(f"K{j}_{k}"), v(f"uu{j}")) for j in range(d)], conj_a=True)
            cmul("ph", v(f"p{k}"), ("hb_r", "hb_i"))
            e(f"dF_r = tp * gw{k}_r + ph_r")
            e(f"dF_i = tp * gw{k}_i + ph_i")
            gC_col(k, "dF")
            e(f"dF_r = -gw{k}_r")
            e(f"dF_i = -gw{k}_i")
            gC_col(d + k, "dF")
        e("dF_r = -(" + " + ".join(f"gw{k}_r" for k in range(d)) + ")")
        e("dF_i = -(" + " + ".join(f"gw{k}_i" for k in range(d)) + ")")
        gC_col(2 * d, "dF")
        gC_col(2 * d + 1, f"gw{d}")

    for mode in (0, 1, 2):
        out.clear()
        load_K()
        forward(mode == 2)
        if mode == 1:
            backward()
        result[f"step{mode}"] = out[:]

    # ---- lift: dL/dW_KQ and dL/dW_PV of each lane from dL/dC and dL/dRv, summed over the lanes into the
    # block's float64 slots (gA then gP, complex as (re, im)), each right after its value is computed
    out.clear()
    load_seq()

    def red(p, q, val, base=0):
        e(f"GOUT[{base + 2 * (p * D + q)}] = RED({val}_r)")
        e(f"GOUT[{base + 2 * (p * D + q) + 1}] = RED({val}_i)")

    for k in range(d):
        for j in range(d):
            terms = [((f"K{q}_{j}_r", f"K{q}_{j}_i"), (A('gCr', k * nc + d + q), A('gCi', k * nc + d + q)))
                     for q in range(d)]
            init = (f"{A('gCr', k * nc + j)} + {A('gCr', k * nc + 2 * d)}",
                    f"{A('gCi', k * nc + j)} + {A('gCi', k * nc + 2 * d)}")
            csum("ac", terms, conj_a=True, init=init)
            cmul("gM", ("ac_r", "ac_i"), v(f"z{j}"))  # dL/dM[j, k]
            cmul("zg", v(f"z{j}"), (A('gCr', k * nc + 2 * d + 1), A('gCi', k * nc + 2 * d + 1)))
            e("gN_r = gM_r + zg_r")  # dL/dN[j, k]
            e("gN_i = gM_i + zg_i")
            red(j, k, "gN")
            cmul("tt", ("gN_r", "gN_i"), v(f"lm{k}"))
            red(j, d + k, "tt")
            cmul("mm", v(f"lm{j}"), ("gM_r", "gM_i"), conj_a=True)
            red(d + j, k, "mm")
            cmul("tm", ("mm_r", "mm_i"), v(f"lm{k}"))
            red(d + j, d + k, "tm")
    for a in range(d):
        for j in range(d):
            cmul("gR", v(f"z{j}"), (A('gRr', j * d + a), A('gRi', j * d + a)), conj_a=True)
            cmul("gv", v(f"z{j}"), (A('gRr', d * d + a), A('gRi', d * d + a)), conj_a=True)
            e("gP_r = gR_r + gv_r")
            e("gP_i = gR_i + gv_i")
            red(a, j, "gP", 2 * D * D)
            cmul("tt", ("gR_r", "gR_i"), v(f"lm{j}"))
            red(a, d + j, "tt", 2 * D * D)
    result["lift"] = out[:]
    return result


# ----------------------------------------------------------------------------------------------------------
# The bodies as LLVM IR over <16 x float> (or double) values
# ----------------------------------------------------------------------------------------------------------

def _const(x: float) -> str:
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]


class _Function:
    """Translates the statements of :func:`bodies` into one LLVM function (SSA: every assignment of a name
    is a new value; every row access is a vector load or store at a constant offset)."""

    def __init__(self, F: str, d: int, name: str, params: list[tuple[str, str]], acc_fixed: int = 0):
        self.F, self.d = F, d
        self.acc_fixed = acc_fixed  # rows of ACC below this one are not written by this function
        self.V = f"<{NL} x {F}>"
        self.DV = f"<{NL} x double>"
        self.size = 4 if F == "float" else 8
        self.name = name
        self.params = params
        self.lines: list[str] = []
        self.n = 0
        self.env: dict[str, str] = {}
        self.splats: dict[str, str] = {}
        self.lazy: dict[str, tuple[str, int]] = {}

    def _new(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def _emit(self, s: str) -> None:
        self.lines.append("  " + s)

    def _gep(self, base: str, off: int, ty: str) -> str:
        if off == 0:
            return base
        r = self._new()
        self._emit(f"{r} = getelementptr inbounds {ty}, ptr {base}, i64 {off}")
        return r

    def _load(self, base: str, row: int) -> str:
        p = self._gep(base, row * NL, self.F)
        r = self._new()
        # the tables and the sequences' rows are never written: marked invariant, so that the register
        # allocator reloads them (or folds them into an FMA) instead of spilling them
        inv = ", !invariant.load !0" if base in ("%SQ", "%TB") or (base == "%ACC" and row < self.acc_fixed) else ""
        self._emit(f"{r} = load {self.V}, ptr {p}, align {self.size}{inv}")
        return r

    def _store(self, base: str, row: int, val: str) -> None:
        p = self._gep(base, row * NL, self.F)
        self._emit(f"store {self.V} {val}, ptr {p}, align {self.size}")

    def _splat(self, scalar: str) -> str:
        if scalar not in self.splats:
            a, b = self._new(), self._new()
            self._emit(f"{a} = insertelement {self.V} poison, {self.F} {scalar}, i64 0")
            self._emit(f"{b} = shufflevector {self.V} {a}, {self.V} poison, <{NL} x i32> zeroinitializer")
            self.splats[scalar] = b
        return self.splats[scalar]

    def _weight(self, name: str) -> str:
        d, D = self.d, 2 * self.d
        kind, rest = name[:2], name[2:]
        i, k, part = rest.split("_")
        i, k = int(i), int(k)
        if kind == "wk":
            off = (0 if part == "r" else D * D) + i * D + k
        else:
            off = 2 * D * D + (0 if part == "r" else d * D) + i * D + k
        if name not in self.splats:
            p = self._gep("%W", off, self.F)
            s = self._new()
            self._emit(f"{s} = load {self.F}, ptr {p}, align {self.size}")
            self.splats[name] = self._splat(s)
        return self.splats[name]

    def _to_double(self, val: str) -> str:
        if self.F == "double":
            return val
        r = self._new()
        self._emit(f"{r} = fpext {self.V} {val} to {self.DV}")
        return r

    def expr(self, node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            if node.id in self.lazy:  # a row of the tables or sequences, loaded where it is used
                return self._load(*self.lazy[node.id])
            if node.id in self.env:
                return self.env[node.id]
            if node.id in ("tp", "ir"):
                return self._splat("%" + node.id)
            if node.id == "WB":
                return self._load("%WB", 0)
            if node.id[:2] in ("wk", "wp"):
                return self._weight(node.id)
            raise KeyError(f"{self.name}: name {node.id} used before it is set")
        if isinstance(node, ast.Constant):
            c = _const(node.value)
            return f"<{', '.join([f'{self.F} {c}'] * NL)}>"
        if isinstance(node, ast.Subscript):
            return self._load("%" + node.value.id, node.slice.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            a = self.expr(node.operand)
            r = self._new()
            self._emit(f"{r} = fneg {_FM} {self.V} {a}")
            return r
        if isinstance(node, ast.BinOp):
            a, b = self.expr(node.left), self.expr(node.right)
            opc = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul"}[type(node.op)]
            r = self._new()
            self._emit(f"{r} = {opc} {_FM} {self.V} {a}, {b}")
            return r
        raise TypeError(f"{self.name}: cannot translate {ast.dump(node)}")

    def statement(self, src: str) -> None:
        node = ast.parse(src).body[0]
        if isinstance(node, ast.Assign):
            tgt = node.targets[0]
            if isinstance(tgt, ast.Name):
                v = node.value
                self.lazy.pop(tgt.id, None)
                if isinstance(v, ast.Subscript) and v.value.id in ("SQ", "TB"):
                    self.lazy[tgt.id] = ("%" + v.value.id, v.slice.value)
                else:
                    self.env[tgt.id] = self.expr(v)
            elif tgt.value.id == "GOUT":  # GOUT[j] = RED(x): sum over the lanes in float64
                x = self._to_double(self.expr(node.value.args[0]))
                r = self._new()
                self._emit(f"{r} = call reassoc double @llvm.vector.reduce.fadd.v{NL}f64(double -0.0, {self.DV} {x})")
                p = self._gep("%GOUT", tgt.slice.value, "double")
                self._emit(f"store double {r}, ptr {p}, align 8")
            else:
                self._store("%" + tgt.value.id, tgt.slice.value, self.expr(node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "LOSS":
            x = self._to_double(self.expr(node.value))
            old, r = self._new(), self._new()
            self._emit(f"{old} = load {self.DV}, ptr %LOSS, align 8")
            self._emit(f"{r} = fadd {_FM} {self.DV} {old}, {x}")
            self._emit(f"store {self.DV} {r}, ptr %LOSS, align 8")
        elif isinstance(node, ast.AugAssign):
            tgt = node.target
            x = self.expr(node.value)
            old = self._load("%" + tgt.value.id, tgt.slice.value)
            r = self._new()
            self._emit(f"{r} = fadd {_FM} {self.V} {old}, {x}")
            self._store("%" + tgt.value.id, tgt.slice.value, r)
        else:
            raise TypeError(f"{self.name}: cannot translate {src!r}")

    def text(self, statements: list[str]) -> str:
        for s in statements:
            self.statement(s)
        d = self.d
        deref = {"TB": table_rows(d) * NL * self.size, "SQ": sequence_rows(d) * NL * self.size,
                 "ACC": _rows(d)["total"] * NL * self.size}

        def attrs(ty, nm):
            if ty != "ptr":
                return ""
            return "noalias " + (f"dereferenceable({deref[nm]}) align {self.size} " if nm in deref else "")
        args = ", ".join(f"{ty} {attrs(ty, nm)}%{nm}" for ty, nm in self.params)
        return (f"define internal void @{self.name}({args}) nounwind noinline {{\nentry:\n" + "\n".join(self.lines)
                + "\n  ret void\n}\n")


def _driver(F: str, d: int) -> str:
    """The exported function: blocks b0..b1-1, positions 0..N-1, the mode's step per position."""
    size = 4 if F == "float" else 8
    DV = f"<{NL} x double>"
    rows = _rows(d)
    sq_rows = sequence_rows(d)
    tb_rows = table_rows(d)
    gout = gradient_slots(d)
    g0, g1 = rows["gCr"] * NL * size, rows["total"] * NL * size
    half = ", ".join([f"double {_const(0.5)}"] * NL)
    return f"""
define void @lanes_sweep(i64 %b0, i64 %b1, i64 %N, i64 %mode, ptr noalias %TB, ptr noalias %SQ, ptr noalias %tpos,
                         ptr noalias %irho, ptr noalias %W, ptr noalias %WL, ptr noalias %LS, ptr noalias %GO,
                         ptr noalias %PR, ptr noalias %ACC) nounwind {{
entry:
  %is1 = icmp eq i64 %mode, 1
  %gz = getelementptr inbounds i8, ptr %ACC, i64 {g0}
  br label %bhead
bhead:
  %b = phi i64 [%b0, %entry], [%bn, %bend]
  %bc = icmp slt i64 %b, %b1
  br i1 %bc, label %bbody, label %exit
bbody:
  %sqo = mul i64 %b, {sq_rows * NL}
  %sqb = getelementptr inbounds {F}, ptr %SQ, i64 %sqo
  %tbs = mul i64 %N, {tb_rows * NL}
  %tbo = mul i64 %b, %tbs
  %tbb = getelementptr inbounds {F}, ptr %TB, i64 %tbo
  %wo = mul i64 %b, {NL}
  %wlb = getelementptr inbounds {F}, ptr %WL, i64 %wo
  %lb = getelementptr inbounds double, ptr %LS, i64 %wo
  %prs = mul i64 %N, {2 * d * NL}
  %pro = mul i64 %b, %prs
  %prb = getelementptr inbounds {F}, ptr %PR, i64 %pro
  call void @maps(ptr %ACC, ptr %sqb, ptr %W)
  store {DV} zeroinitializer, ptr %lb, align 8
  br i1 %is1, label %zero, label %tstart
zero:
  call void @llvm.memset.p0.i64(ptr align {size} %gz, i8 0, i64 {g1 - g0}, i1 false)
  br label %tstart
tstart:
  br label %thead
thead:
  %t = phi i64 [0, %tstart], [%tn, %tlatch]
  %tc = icmp slt i64 %t, %N
  br i1 %tc, label %tbody, label %tdone
tbody:
  %tbo2 = mul i64 %t, {tb_rows * NL}
  %tbt = getelementptr inbounds {F}, ptr %tbb, i64 %tbo2
  %tpp = getelementptr inbounds {F}, ptr %tpos, i64 %t
  %tp = load {F}, ptr %tpp, align {size}
  %irp = getelementptr inbounds {F}, ptr %irho, i64 %t
  %ir = load {F}, ptr %irp, align {size}
  switch i64 %mode, label %m0 [ i64 1, label %m1
                                i64 2, label %m2 ]
m0:
  call void @step0(ptr %ACC, ptr %sqb, ptr %tbt, {F} %tp, {F} %ir, ptr %wlb, ptr %lb, ptr %prb)
  br label %tlatch
m1:
  call void @step1(ptr %ACC, ptr %sqb, ptr %tbt, {F} %tp, {F} %ir, ptr %wlb, ptr %lb, ptr %prb)
  br label %tlatch
m2:
  %pro2 = mul i64 %t, {2 * d * NL}
  %prt = getelementptr inbounds {F}, ptr %prb, i64 %pro2
  call void @step2(ptr %ACC, ptr %sqb, ptr %tbt, {F} %tp, {F} %ir, ptr %wlb, ptr %lb, ptr %prt)
  br label %tlatch
tlatch:
  %tn = add i64 %t, 1
  br label %thead
tdone:
  %l0 = load {DV}, ptr %lb, align 8
  %l1 = fmul {DV} %l0, <{half}>
  store {DV} %l1, ptr %lb, align 8
  br i1 %is1, label %lift, label %bend
lift:
  %goo = mul i64 %b, {gout}
  %gob = getelementptr inbounds double, ptr %GO, i64 %goo
  call void @lift(ptr %ACC, ptr %sqb, ptr %gob)
  br label %bend
bend:
  %bn = add i64 %b, 1
  br label %bhead
exit:
  ret void
}}

declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare double @llvm.vector.reduce.fadd.v{NL}f64(double, {DV})
"""


def module_ir(d: int, F: str = "float") -> str:
    """The LLVM IR of the kernel for coordinate dimension d and element type F ("float" or "double")."""
    b = bodies(d)
    step = [("ptr", "ACC"), ("ptr", "SQ"), ("ptr", "TB"), (F, "tp"), (F, "ir"), ("ptr", "WB"), ("ptr", "LOSS"),
            ("ptr", "PRED")]
    parts = [_Function(F, d, "maps", [("ptr", "ACC"), ("ptr", "SQ"), ("ptr", "W")]).text(b["maps"])]
    rows = _rows(d)
    # the positions read the maps (rows below gCr) and update the sums; the lift reads everything
    parts += [_Function(F, d, f"step{m}", step, rows["gCr"]).text(b[f"step{m}"]) for m in (0, 1, 2)]
    parts.append(_Function(F, d, "lift", [("ptr", "ACC"), ("ptr", "SQ"), ("ptr", "GOUT")], rows["total"]).text(b["lift"]))
    return "\n".join(parts) + _driver(F, d) + "\n!0 = !{}\n"


# ----------------------------------------------------------------------------------------------------------
# Compilation (llvmlite, host CPU) with an on-disk cache of the object code
# ----------------------------------------------------------------------------------------------------------

_LOCK = threading.Lock()
_COMPILED: dict[tuple[int, str], tuple] = {}  # (d, F) -> (engine, ctypes function)
_SIG = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 4), *([ctypes.c_void_p] * 10))  # releases the GIL


def _cache_dir() -> str:
    """Where compiled kernels are kept: beside numba's cache of this package (``__pycache__``), else the
    temporary directory."""
    for folder in (os.environ.get("NUMBA_CACHE_DIR"), os.path.join(os.path.dirname(__file__), "__pycache__"),
                   os.path.join(__import__("tempfile").gettempdir(), f"companion-lanes-{os.getuid()}")):
        if not folder:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    raise OSError("no writable directory for the compiled mesa lane kernels")


def _target_machine():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return llvm, target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                              features=llvm.get_host_cpu_features().flatten(), opt=3,
                                              codemodel="jitdefault", jit=True)


def compiled(d: int, F: str = "float"):
    """The ctypes function of the kernel for (d, F), compiled on first use (a few seconds) or loaded from the
    disk cache (milliseconds)."""
    key = (d, F)
    with _LOCK:
        if key in _COMPILED:
            return _COMPILED[key][1]
        llvm, tm = _target_machine()
        ir = module_ir(d, F)
        tag = "\n".join([ir, tm.triple, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(),
                         ".".join(map(str, llvm.llvm_version_info))])
        path = os.path.join(_cache_dir(), f"mesa-lanes-d{d}-{F}-{hashlib.sha256(tag.encode()).hexdigest()[:16]}.o")
        obj = None
        try:
            with open(path, "rb") as fh:
                blob = fh.read()
            # the object code is followed by its sha256: a damaged file is compiled again, never loaded
            if len(blob) > 32 and hashlib.sha256(blob[:-32]).digest() == blob[-32:]:
                obj = blob[:-32]
        except OSError:
            pass
        if obj is None:
            mod = llvm.parse_assembly(ir)
            mod.verify()
            pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
            pb.getModulePassManager().run(mod, pb)
            obj = tm.emit_object(mod)
            tmp = f"{path}.{os.getpid()}.tmp"
            try:
                with open(tmp, "wb") as fh:
                    fh.write(obj + hashlib.sha256(obj).digest())
                os.replace(tmp, path)  # atomic: a concurrent process reads the whole file or none
            except OSError:  # a full or read-only disk: the kernel still runs, compiled again next time
                if os.path.exists(tmp):
                    os.unlink(tmp)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        fn = _SIG(engine.get_function_address("lanes_sweep"))
        _COMPILED[key] = (engine, fn)
        return fn


# ----------------------------------------------------------------------------------------------------------
# Layout and the sweep
# ----------------------------------------------------------------------------------------------------------

def lane_sequences(z, lam, K, real_dtype) -> np.ndarray:
    """x_1, lam and K (complex, (m, d), (m, d), (m, d, d)) in the lane layout ``(nb, sequence_rows(d) 16)``;
    padding sequences have x_1 = 0 and the phases of sequence 0."""
    m, d = z.shape
    nb = -(-m // NL)
    pad = nb * NL - m
    z = np.concatenate([z, np.zeros((pad, d), z.dtype)])
    lam = np.concatenate([lam, np.repeat(lam[:1], pad, 0)])
    K = np.concatenate([K, np.repeat(K[:1], pad, 0)])
    rows = np.concatenate([z.real, z.imag, lam.real, lam.imag, K.real.reshape(-1, d * d), K.imag.reshape(-1, d * d)],
                          axis=1)
    return np.ascontiguousarray(rows.reshape(nb, NL, -1).transpose(0, 2, 1), dtype=real_dtype).reshape(nb, -1)
