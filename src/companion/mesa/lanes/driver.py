"""The exported function ``lanes_sweep``: the loops over a thread's blocks of sequences and over the
positions, calling the generated bodies, and :func:`module_ir`, the whole LLVM module for one d and dtype.

``lanes_sweep(b0, b1, N, mode, TB, SQ, tpos, irho, W, WL, LS, GO, PR, ACC)`` runs blocks ``b0 .. b1-1``
(:func:`companion.mesa.lanes.host.sweep` gives each thread its own contiguous range and its own scratch
``ACC``). Per block:

1. ``maps``: the per-sequence maps C and R_v into ACC; the lanes' loss set to 0 (and, in mode 1, the
   running sums dL/dC and dL/dR_v);
2. for each position p = 0 .. N-1 (t = tpos[p], 1/rho_t = irho[p]): ``step0`` (loss), ``step1`` (loss and
   the running sums of the gradient) or ``step2`` (loss and predictions), by ``mode``;
3. the loss halved (``1/2 sum_t |r_t|^2``) and, in mode 1, ``lift``: dL/dW_KQ and dL/dW_PV of each lane,
   summed over the lanes into the block's slots of ``GO``.

Every block writes only its own slots, so the result does not depend on how the blocks are split over
threads.
"""

from __future__ import annotations

from companion.mesa.lanes.bodies import bodies
from companion.mesa.lanes.dsl import Function, const
from companion.mesa.lanes.layout import NL, gradient_slots, scratch_offsets, sequence_rows, table_rows

__all__ = ["module_ir"]


# One function of about 90 lines, most of it a single LLVM IR template: the loops over blocks and positions read
# as one piece of IR, and split into Python pieces they would no longer show the control flow.
def _driver(F: str, d: int) -> str:
    """The exported function: blocks b0..b1-1, positions 0..N-1, the mode's step per position."""
    size = 4 if F == "float" else 8
    DV = f"<{NL} x double>"
    rows = scratch_offsets(d)
    sq_rows = sequence_rows(d)
    tb_rows = table_rows(d)
    gout = gradient_slots(d)
    g0, g1 = rows["gCr"] * NL * size, rows["total"] * NL * size
    half = ", ".join([f"double {const(0.5)}"] * NL)
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
    parts = [Function(F, d, "maps", [("ptr", "ACC"), ("ptr", "SQ"), ("ptr", "W")]).text(b["maps"])]
    rows = scratch_offsets(d)
    # the positions read the maps (rows below gCr) and update the sums; the lift reads everything
    parts += [Function(F, d, f"step{m}", step, rows["gCr"]).text(b[f"step{m}"]) for m in (0, 1, 2)]
    parts.append(Function(F, d, "lift", [("ptr", "ACC"), ("ptr", "SQ"), ("ptr", "GOUT")], rows["total"]).text(b["lift"]))
    return "\n".join(parts) + _driver(F, d) + "\n!0 = !{}\n"
