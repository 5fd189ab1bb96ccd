"""The IR-building DSL: straight-line statements over lane vectors, translated into one LLVM function.

The kernel bodies (:mod:`companion.mesa.lanes.bodies`) are written as Python-syntax statements, one per
line, over names that stand for ``<16 x float>`` (or ``double``) values, one sequence per lane. This module
parses each statement with ``ast`` and emits SSA LLVM IR for it: every assignment of a name is a new
value, every row access a vector load or store at a constant offset.

The statements:

* ``name = expr`` with ``+``, ``-`` (binary and unary), ``*`` and float constants; a name assigned a row of
  ``SQ`` or ``TB`` is not loaded there but where it is used (the rows are reloaded rather than kept live);
* ``ACC[r] = expr``, ``ACC[r] += expr``, ``PRED[r] = expr``: stores (and updates) of a row;
* ``LOSS += expr``: the lanes' loss, accumulated in float64;
* ``GOUT[j] = RED(expr)``: the sum of a value over the 16 lanes, in float64, into slot j of the block's
  gradient.

Reserved names: ``ACC``, ``SQ``, ``TB``, ``PRED`` (rows of 16 lanes, see :mod:`companion.mesa.lanes.layout`),
``WB`` (the lanes' weights w_n), ``LOSS``, ``GOUT``, ``RED``, ``tp`` and ``ir`` (the position t and
1/rho_t = 1/(t-1), the same in every lane), and every name starting with ``wk`` or ``wp``:
``wk{i}_{k}_{r|i}`` is W_KQ[i, k] and ``wp{a}_{k}_{r|i}`` is W_PV[a, k] (real or imaginary part), loaded once
and broadcast to every lane.

Arithmetic carries the fast-math flags ``reassoc nsz arcp contract``: LLVM may fuse a product and a sum
into an FMA and reassociate, but NaN and Inf propagate (no ``nnan``/``ninf``), as in numba's kernel.
"""

from __future__ import annotations

import ast
import struct

from companion.mesa.lanes.layout import NL, scratch_rows, sequence_rows, table_rows, weight_offset

__all__ = ["FAST_MATH", "Function", "const"]

FAST_MATH = "reassoc nsz arcp contract"  # IEEE-safe fast math, as numba's kernel: NaN and Inf propagate


def const(x: float) -> str:
    """A float constant as LLVM writes it (the 64-bit pattern of the double, exact for float too)."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]


class Function:
    """Translates statements of :mod:`companion.mesa.lanes.bodies` into one LLVM function (SSA: every
    assignment of a name is a new value; every row access is a vector load or store at a constant offset).

    Parameters
    ----------
    F : {"float", "double"}
        The element type of the lanes.
    d : int
        The coordinate dimension (for the weights' offsets and the sizes of the pointer arguments).
    name : str
        The LLVM name of the function.
    params : list of (type, name)
        Its arguments, e.g. ``("ptr", "ACC")``; pointers to ``TB``, ``SQ`` and ``ACC`` are declared
        ``noalias dereferenceable`` with their sizes.
    acc_fixed : int
        Rows of ACC below this one are not written by this function: their loads are marked
        ``!invariant.load``.
    """

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
        off = weight_offset(self.d, name)
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
        """Emit the instructions of an expression; returns the name of its value."""
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
            c = const(node.value)
            return f"<{', '.join([f'{self.F} {c}'] * NL)}>"
        if isinstance(node, ast.Subscript):
            return self._load("%" + node.value.id, node.slice.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            a = self.expr(node.operand)
            r = self._new()
            self._emit(f"{r} = fneg {FAST_MATH} {self.V} {a}")
            return r
        if isinstance(node, ast.BinOp):
            a, b = self.expr(node.left), self.expr(node.right)
            opc = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul"}[type(node.op)]
            r = self._new()
            self._emit(f"{r} = {opc} {FAST_MATH} {self.V} {a}, {b}")
            return r
        raise TypeError(f"{self.name}: cannot translate {ast.dump(node)}")

    def statement(self, src: str) -> None:
        """Emit the instructions of one statement (see the module docstring for the forms)."""
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
            self._emit(f"{r} = fadd {FAST_MATH} {self.DV} {old}, {x}")
            self._emit(f"store {self.DV} {r}, ptr %LOSS, align 8")
        elif isinstance(node, ast.AugAssign):
            tgt = node.target
            x = self.expr(node.value)
            old = self._load("%" + tgt.value.id, tgt.slice.value)
            r = self._new()
            self._emit(f"{r} = fadd {FAST_MATH} {self.V} {old}, {x}")
            self._store("%" + tgt.value.id, tgt.slice.value, r)
        else:
            raise TypeError(f"{self.name}: cannot translate {src!r}")

    def text(self, statements: list[str]) -> str:
        """The LLVM function (``internal``, ``noinline``) whose body is ``statements``."""
        for s in statements:
            self.statement(s)
        d = self.d
        deref = {"TB": table_rows(d) * NL * self.size, "SQ": sequence_rows(d) * NL * self.size,
                 "ACC": scratch_rows(d) * NL * self.size}

        def attrs(ty, nm):
            if ty != "ptr":
                return ""
            return "noalias " + (f"dereferenceable({deref[nm]}) align {self.size} " if nm in deref else "")
        args = ", ".join(f"{ty} {attrs(ty, nm)}%{nm}" for ty, nm in self.params)
        return (f"define internal void @{self.name}({args}) nounwind noinline {{\nentry:\n" + "\n".join(self.lines)
                + "\n  ret void\n}\n")
