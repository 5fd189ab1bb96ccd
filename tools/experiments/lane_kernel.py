"""Experiment (not used by the package): the mesa kernel with SIMD lanes across sequences.

Why. The fused kernel (:mod:`companion.mesa.kernels`) vectorises along the positions t of one sequence. It
runs about 90 short vector loops per sequence (N = 98 positions), and each pays a set-up, a horizontal sum
and a remainder: at N = 2 an epoch (m = 1e4, d = 5) still takes 13 ms of the 47 ms at N = 98, and the slope
is about 3x the AVX-512 FMA bound of this machine (znver5). Grouping the two largest families of sums (four
rows per pass) gave 1.16-1.18x; the rest needs a different layout.

What. This generator writes, for one d, a numba kernel that puts 16 sequences in the lanes of one vector and
keeps every per-position intermediate in a named scalar (no loop over coordinates is left, so the only loop
LLVM vectorises is the one over lanes). Measured on this machine (m = 1e4, T = 100, d = 5, float32, 1 thread),
against the package's kernel (47 ms per loss-and-gradient sweep before the grouping, 41 ms after; 27 ms per loss):

* agreement: per-sequence loss to 2e-7, gradients to 1.2e-7 (relative to their largest entry);
* as numba compiles it, the lane loops are NOT vectorised ("too many memory checks needed"): 86 ms / 194 ms;
* with LLVM's run-time alias-check limits raised (``--llvm-checks``, process-wide options) the loss sweep
  takes 13.6 ms (2.0x faster) but the loss-and-gradient sweep 39.6 ms (1.2x: LLVM picks 8 lanes for it);
* compile time: about 48 s per dtype for d = 5 (the package's kernel: 8 s), a cost every test process pays.

So it is not a drop-in replacement yet. What is left to try: fewer alias checks (the tables, the weights and
the scratch in one buffer), the gradient body split in two lane loops, and a smaller generated body.

Run: ``python tools/experiments/lane_kernel.py [--llvm-checks] [--d 5]`` (about a minute).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

import numpy as np

NL = 16


def source(d: int) -> str:
    """Source of a module with ``sweep_blocks`` (the lane kernel for this d) and ``ROWS`` (scratch rows)."""
    D = 2 * d
    nc = 2 * d + 2
    # ACC rows
    rows = {}
    nxt = [0]

    def alloc(name, n):
        rows[name] = nxt[0]
        nxt[0] += n

    alloc("Cr", nc * d)
    alloc("Ci", nc * d)
    alloc("Vr", d * (d + 1))
    alloc("Vi", d * (d + 1))
    alloc("gCr", d * nc)
    alloc("gCi", d * nc)
    alloc("gRr", (d + 1) * d)
    alloc("gRi", (d + 1) * d)
    alloc("LAr", D * D)
    alloc("LAi", D * D)
    alloc("LPr", d * D)
    alloc("LPi", d * D)
    nrows = nxt[0]

    def A(name, idx):  # ACC element of row name+idx for lane l
        return f"ACC[U({(rows[name] + idx) * NL}) + l]"

    # SQ rows: zr d, zi d, lr d, li d, Kr d*d, Ki d*d
    def Q(kind, idx):
        off = {"zr": 0, "zi": d, "lr": 2 * d, "li": 3 * d, "Kr": 4 * d, "Ki": 4 * d + d * d}[kind]
        return f"sq[U({(off + idx) * NL}) + l]"

    def T(kind, idx):  # table row at this position
        off = {"xr": 0, "xi": d, "pr": 2 * d, "pi": 3 * d, "yr": 4 * d, "yi": 5 * d}[kind]
        return f"tb[U({(off + idx) * NL}) + l]"

    out = []
    ind = [0]

    def e(s):
        out.append("    " * ind[0] + s)

    def cmul(dst, a, b, conj_a=False):  # dst = a*b (or conj(a) b); a, b are (re, im) expressions
        ar, ai = a
        br, bi = b
        if conj_a:
            e(f"{dst}_r = {ar} * {br} + {ai} * {bi}")
            e(f"{dst}_i = {ar} * {bi} - {ai} * {br}")
        else:
            e(f"{dst}_r = {ar} * {br} - {ai} * {bi}")
            e(f"{dst}_i = {ar} * {bi} + {ai} * {br}")

    def csum(dst, terms, conj_a=False, init=None):  # dst = init + sum a*b
        rs = [] if init is None else [init[0]]
        is_ = [] if init is None else [init[1]]
        for (ar, ai), (br, bi) in terms:
            if conj_a:
                rs.append(f"{ar} * {br} + {ai} * {bi}")
                is_.append(f"{ar} * {bi} - {ai} * {br}")
            else:
                rs.append(f"{ar} * {br} - {ai} * {bi}")
                is_.append(f"{ar} * {bi} + {ai} * {br}")
        e(f"{dst}_r = " + (" + ".join(rs) if rs else "zero"))
        e(f"{dst}_i = " + (" + ".join(is_) if is_ else "zero"))

    def v(name):
        return (f"{name}_r", f"{name}_i")

    def load_seq():  # x_1, lam and K of this lane's sequence as scalars
        for j in range(d):
            e(f"z{j}_r = {Q('zr', j)}")
            e(f"z{j}_i = {Q('zi', j)}")
            e(f"lm{j}_r = {Q('lr', j)}")
            e(f"lm{j}_i = {Q('li', j)}")
        load_K()

    def load_K():
        for j in range(d):
            for k in range(d):
                e(f"K{j}_{k}_r = {Q('Kr', j * d + k)}")
                e(f"K{j}_{k}_i = {Q('Ki', j * d + k)}")

    e("@njit(fastmath=_FLAGS, cache=True, nogil=True)")
    e("def sweep_blocks(b0, b1, TB, SQ, tpos, inv_rho, WK, WP, wn, mode, loss, gA, gP, pred, ACC):")
    ind[0] += 1
    e("N = TB.shape[1]")
    e("zero = TB[0, 0, 0] - TB[0, 0, 0]")
    for name, arr, rows_w in (("wk", "WK", D), ("wp", "WP", d)):  # the weights as scalars (real, imaginary parts)
        for i in range(rows_w):
            for k in range(D):
                e(f"{name}{i}_{k}_r = {arr}[0, {i}, {k}]")
                e(f"{name}{i}_{k}_i = {arr}[1, {i}, {k}]")
    e("for b in range(b0, b1):")
    ind[0] += 1
    e("sq = SQ[b]")
    e("wb = wn[b]")
    # ---------------- maps
    e("for l in range(UNL):")
    ind[0] += 1
    load_seq()
    for i in range(d):
        for k in range(d):
            # N_ik = A[i,k] + A[i,d+k] conj(lam_k);  M_ik = N_ik + lam_i (A[d+i,k] + A[d+i,d+k] conj(lam_k))
            e(f"N{i}_{k}_r = wk{i}_{k}_r + wk{i}_{d + k}_r * lm{k}_r + wk{i}_{d + k}_i * lm{k}_i")
            e(f"N{i}_{k}_i = wk{i}_{k}_i + wk{i}_{d + k}_i * lm{k}_r - wk{i}_{d + k}_r * lm{k}_i")
            e(f"q_r = wk{d + i}_{k}_r + wk{d + i}_{d + k}_r * lm{k}_r + wk{d + i}_{d + k}_i * lm{k}_i")
            e(f"q_i = wk{d + i}_{k}_i + wk{d + i}_{d + k}_i * lm{k}_r - wk{d + i}_{d + k}_r * lm{k}_i")
            cmul(f"M{i}_{k}", v(f"lm{i}"), ("q_r", "q_i"))
            e(f"M{i}_{k}_r += N{i}_{k}_r")
            e(f"M{i}_{k}_i += N{i}_{k}_i")
            cmul(f"C{i}_{k}", v(f"z{i}"), v(f"M{i}_{k}"), conj_a=True)  # F column c=i, coordinate k
            e(f"{A('Cr', i * d + k)} = C{i}_{k}_r")
            e(f"{A('Ci', i * d + k)} = C{i}_{k}_i")
            # V[a=i, k] = (W_PV[i,k] + W_PV[i,d+k] conj(lam_k)) z_k
            e(f"q_r = wp{i}_{k}_r + wp{i}_{d + k}_r * lm{k}_r + wp{i}_{d + k}_i * lm{k}_i")
            e(f"q_i = wp{i}_{k}_i + wp{i}_{d + k}_i * lm{k}_r - wp{i}_{d + k}_r * lm{k}_i")
            cmul("vv", ("q_r", "q_i"), v(f"z{k}"))
            e(f"{A('Vr', i * (d + 1) + k)} = vv_r")
            e(f"{A('Vi', i * (d + 1) + k)} = vv_i")
    for k in range(d):
        # column 2d: s = sum_j C[k, j]  (C{j}_{k} is column j, coordinate k)
        e(f"{A('Cr', 2 * d * d + k)} = " + " + ".join(f"C{j}_{k}_r" for j in range(d)))
        e(f"{A('Ci', 2 * d * d + k)} = " + " + ".join(f"C{j}_{k}_i" for j in range(d)))
        for j in range(d):  # column d+j: sum_q C[k, q] K[j, q]
            csum("kk", [(v(f"C{q}_{k}"), v(f"K{j}_{q}")) for q in range(d)])
            e(f"{A('Cr', (d + j) * d + k)} = kk_r")
            e(f"{A('Ci', (d + j) * d + k)} = kk_i")
        # column 2d+1: sum_j N[j, k] conj(z_j)
        csum("kk", [(v(f"z{j}"), v(f"N{j}_{k}")) for j in range(d)], conj_a=True)
        e(f"{A('Cr', (2 * d + 1) * d + k)} = kk_r")
        e(f"{A('Ci', (2 * d + 1) * d + k)} = kk_i")
    for a in range(d):
        csum("kk", [((f"wp{a}_{j}_r", f"wp{a}_{j}_i"), v(f"z{j}")) for j in range(d)])
        e(f"{A('Vr', a * (d + 1) + d)} = kk_r")
        e(f"{A('Vi', a * (d + 1) + d)} = kk_i")
    e("if mode == 1:")
    ind[0] += 1
    for r in range(rows["gCr"], rows["LAr"]):
        e(f"ACC[U({r * NL}) + l] = zero")
    ind[0] -= 1
    e("loss[b, l] = 0.0")
    ind[0] -= 1

    # ---------------- positions
    def forward(pred: bool):
        for k in range(d):
            e(f"x{k}_r = {T('xr', k)}")
            e(f"x{k}_i = {T('xi', k)}")
            e(f"p{k}_r = {T('pr', k)}")
            e(f"p{k}_i = {T('pi', k)}")
        for c in range(nc):
            csum(f"F{c}", [((A('Cr', c * d + k), A('Ci', c * d + k)), v(f"x{k}")) for k in range(d)])
        for k in range(d):
            cmul(f"u{k}", v(f"p{k}"), v(f"F{k}"), conj_a=True)
        for j in range(d):
            csum("h", [(v(f"K{j}_{k}"), v(f"u{k}")) for k in range(d)])
            cmul("ph", v(f"p{j}"), ("h_r", "h_i"))
            e(f"w{j}_r = tp * F{j}_r + ph_r - F{d + j}_r - F{2 * d}_r")
            e(f"w{j}_i = tp * F{j}_i + ph_i - F{d + j}_i - F{2 * d}_i")
        e(f"w{d}_r = F{2 * d + 1}_r")
        e(f"w{d}_i = F{2 * d + 1}_i")
        terms = []
        for a in range(d):
            csum("yh", [((A('Vr', a * (d + 1) + i), A('Vi', a * (d + 1) + i)), v(f"w{i}")) for i in range(d + 1)])
            e(f"r{a}_r = yh_r * ir - {T('yr', a)}")
            e(f"r{a}_i = yh_i * ir - {T('yi', a)}")
            terms.append(f"r{a}_r * r{a}_r + r{a}_i * r{a}_i")
            if pred:
                e(f"pred[b, t, U({a * NL}) + l] = yh_r * ir")
                e(f"pred[b, t, U({(d + a) * NL}) + l] = yh_i * ir")
        e("loss[b, l] += " + " + ".join(terms))

    def backward():
        e("sc = ir * wb[l]")
        for a in range(d):
            e(f"g{a}_r = r{a}_r * sc")
            e(f"g{a}_i = r{a}_i * sc")
        for i in range(d + 1):
            for a in range(d):
                e(f"{A('gRr', i * d + a)} += w{i}_r * g{a}_r + w{i}_i * g{a}_i")
                e(f"{A('gRi', i * d + a)} += w{i}_r * g{a}_i - w{i}_i * g{a}_r")
        for i in range(d + 1):
            csum(f"gw{i}", [((A('Vr', a * (d + 1) + i), A('Vi', a * (d + 1) + i)), v(f"g{a}")) for a in range(d)],
                 conj_a=True)
        for j in range(d):
            cmul(f"uu{j}", v(f"p{j}"), v(f"gw{j}"), conj_a=True)
        for k in range(d):
            csum("hb", [(v(f"K{j}_{k}"), v(f"uu{j}")) for j in range(d)], conj_a=True)
            cmul("ph", v(f"p{k}"), ("hb_r", "hb_i"))
            e(f"dF{k}_r = tp * gw{k}_r + ph_r")
            e(f"dF{k}_i = tp * gw{k}_i + ph_i")
            e(f"dF{d + k}_r = -gw{k}_r")
            e(f"dF{d + k}_i = -gw{k}_i")
        e(f"dF{2 * d}_r = -(" + " + ".join(f"gw{k}_r" for k in range(d)) + ")")
        e(f"dF{2 * d}_i = -(" + " + ".join(f"gw{k}_i" for k in range(d)) + ")")
        e(f"dF{2 * d + 1}_r = gw{d}_r")
        e(f"dF{2 * d + 1}_i = gw{d}_i")
        for k in range(d):
            for c in range(nc):
                e(f"{A('gCr', k * nc + c)} += x{k}_r * dF{c}_r + x{k}_i * dF{c}_i")
                e(f"{A('gCi', k * nc + c)} += x{k}_r * dF{c}_i - x{k}_i * dF{c}_r")

    e("for t in range(N):")
    ind[0] += 1
    e("tb = TB[b, t]")
    e("tp = tpos[t]")
    e("ir = inv_rho[t]")
    for mode, label in ((1, "if mode == 1:"), (2, "elif mode == 2:"), (0, "else:")):
        e(label)
        ind[0] += 1
        e("for l in range(UNL):")
        ind[0] += 1
        load_K()
        forward(mode == 2)
        if mode == 1:
            backward()
        ind[0] -= 2
    ind[0] -= 1
    e("for l in range(UNL):")
    e("    loss[b, l] *= 0.5")
    e("if mode != 1:")
    e("    continue")
    # ---------------- lift
    e("for l in range(UNL):")
    ind[0] += 1
    load_seq()
    for k in range(d):
        for j in range(d):
            terms = [((f"K{q}_{j}_r", f"K{q}_{j}_i"), (A('gCr', k * nc + d + q), A('gCi', k * nc + d + q)))
                     for q in range(d)]
            init = (f"{A('gCr', k * nc + j)} + {A('gCr', k * nc + 2 * d)}",
                    f"{A('gCi', k * nc + j)} + {A('gCi', k * nc + 2 * d)}")
            csum("ac", terms, conj_a=True, init=init)
            cmul("gM", ("ac_r", "ac_i"), v(f"z{j}"))
            cmul("zg", v(f"z{j}"), (A('gCr', k * nc + 2 * d + 1), A('gCi', k * nc + 2 * d + 1)))
            e("gN_r = gM_r + zg_r")
            e("gN_i = gM_i + zg_i")
            e(f"{A('LAr', j * D + k)} = gN_r")
            e(f"{A('LAi', j * D + k)} = gN_i")
            cmul("tt", ("gN_r", "gN_i"), v(f"lm{k}"))
            e(f"{A('LAr', j * D + d + k)} = tt_r")
            e(f"{A('LAi', j * D + d + k)} = tt_i")
            cmul("mm", v(f"lm{j}"), ("gM_r", "gM_i"), conj_a=True)
            e(f"{A('LAr', (d + j) * D + k)} = mm_r")
            e(f"{A('LAi', (d + j) * D + k)} = mm_i")
            cmul("tt", ("mm_r", "mm_i"), v(f"lm{k}"))
            e(f"{A('LAr', (d + j) * D + d + k)} = tt_r")
            e(f"{A('LAi', (d + j) * D + d + k)} = tt_i")
    for a in range(d):
        for j in range(d):
            cmul("gR", v(f"z{j}"), (A('gRr', j * d + a), A('gRi', j * d + a)), conj_a=True)
            cmul("gv", v(f"z{j}"), (A('gRr', d * d + a), A('gRi', d * d + a)), conj_a=True)
            e(f"{A('LPr', a * D + j)} = gR_r + gv_r")
            e(f"{A('LPi', a * D + j)} = gR_i + gv_i")
            cmul("tt", ("gR_r", "gR_i"), v(f"lm{j}"))
            e(f"{A('LPr', a * D + d + j)} = tt_r")
            e(f"{A('LPi', a * D + d + j)} = tt_i")
    ind[0] -= 1
    e(f"for p in range({D}):")
    e(f"    for q in range({D}):")
    e("        sr = 0.0")
    e("        si = 0.0")
    e(f"        for l in range({NL}):")
    e(f"            sr += ACC[({rows['LAr']} + p * {D} + q) * {NL} + l]")
    e(f"            si += ACC[({rows['LAi']} + p * {D} + q) * {NL} + l]")
    e("        gA[b, p, q] = complex(sr, si)")
    e(f"for p in range({d}):")
    e(f"    for q in range({D}):")
    e("        sr = 0.0")
    e("        si = 0.0")
    e(f"        for l in range({NL}):")
    e(f"            sr += ACC[({rows['LPr']} + p * {D} + q) * {NL} + l]")
    e(f"            si += ACC[({rows['LPi']} + p * {D} + q) * {NL} + l]")
    e("        gP[b, p, q] = complex(sr, si)")
    head = ("import numpy as np\nfrom numba import njit\n\nU = np.uint64\nUNL = np.uint64(16)\n_FLAGS = {'contract', 'reassoc', 'nsz', 'arcp'}\n"
            f"NL = {NL}\nROWS = {nrows}\n\n\n")
    return head + "\n".join(out) + "\n"



def lane_tables(Xr, Xi, Pr, Pi, Yr, Yi):
    """(m, d, N) tables -> TB (nb, N, 6 d L), padding with zero sequences."""
    m, d, N = Xr.shape
    L = NL
    nb = -(-m // L)
    TB = np.zeros((nb * L, 6, d, N), Xr.dtype)
    for q, a in enumerate((Xr, Xi, Pr, Pi, Yr, Yi)):
        TB[:m, q] = a
    TB[m:, 2] = 1.0  # lam^t of a padding sequence: 1 (x = 0)
    # (nb, L, 6, d, N) -> (nb, N, 6, d, L)
    return np.ascontiguousarray(TB.reshape(nb, L, 6, d, N).transpose(0, 4, 2, 3, 1)).reshape(nb, N, 6 * d * L)


def lane_seq(z, lam, K, rdt):
    m, d = z.shape
    L = NL
    nb = -(-m // L)
    zz = np.zeros((nb * L, d), complex)
    zz[:m] = z
    ll = np.ones((nb * L, d), complex)
    ll[:m] = lam
    KK = np.zeros((nb * L, d, d), complex)
    KK[:m] = K
    if m < nb * L:  # padding: the phases of sequence 0 (finite K), x_1 = 0
        ll[m:] = lam[0]
        KK[m:] = K[0]
    rows = np.concatenate([zz.real, zz.imag, ll.real, ll.imag, KK.real.reshape(-1, d * d), KK.imag.reshape(-1, d * d)], axis=1)
    return np.ascontiguousarray(rows.reshape(nb, L, -1).transpose(0, 2, 1)).reshape(nb, -1).astype(rdt)




def load(d: int):
    """Write the generated source for d to a temporary directory and import it (numba caches it there)."""
    folder = os.path.join(tempfile.gettempdir(), f"companion-lane-kernel-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"lanes_d{d}.py")
    src = source(d)
    if not os.path.exists(path) or open(path).read() != src:
        with open(path + ".tmp", "w") as fh:
            fh.write(src)
        os.replace(path + ".tmp", path)
    spec = importlib.util.spec_from_file_location(f"companion_lanes_d{d}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=5)
    ap.add_argument("--llvm-checks", action="store_true", help="raise LLVM's run-time alias-check limits")
    args = ap.parse_args()
    if args.llvm_checks:
        import llvmlite.binding as llvm

        llvm.set_option("", "-runtime-memory-check-threshold=512")
        llvm.set_option("", "-memory-check-merge-threshold=2048")
    import torch

    from companion.mesa import kernels as K0
    from companion.mesa import model
    from companion.mesa.data import generate

    d, T, m = args.d, 100, 10_000
    data = generate("gaussian", m, d, T, 1.0, np.random.default_rng(1), torch.complex64)
    pos = np.arange(2, T)
    rdt = np.float32
    tabs = K0.split_tables(data.theta, data.x1.numpy(), pos, rdt)
    z, lam, Kc = np.array(data.x1.numpy()), np.array(data.lam.numpy()), np.array(model._cauchy(data)[0].numpy())
    rng = np.random.default_rng(0)
    W_KQ = (0.3 * rng.standard_normal((2 * d, 2 * d)) + 0.3j * rng.standard_normal((2 * d, 2 * d))).astype(np.complex64)
    W_PV = (0.3 * rng.standard_normal((d, 2 * d)) + 0.2j * rng.standard_normal((d, 2 * d))).astype(np.complex64)
    wn = rng.uniform(0.5, 1.5, m)
    wn /= wn.sum()
    K0.set_threads(1)

    def ref(mode):
        per_seq = np.empty(m)
        gA = np.zeros((64, 2 * d, 2 * d), np.complex128)
        gP = np.zeros((64, d, 2 * d), np.complex128)
        K0.sweep(*tabs, pos.astype(rdt), (1.0 / (pos - 1)).astype(rdt), W_KQ, W_PV, z, lam, Kc, wn.astype(rdt), mode, per_seq, gA, gP,
                 np.empty((1, 1, 1, 1), rdt), (0,) * d)
        return per_seq, gA.sum(0), gP.sum(0)

    t0 = time.perf_counter()
    G = load(d)
    TB = lane_tables(*tabs)
    SQ = lane_seq(z, lam, Kc, rdt)
    nb = TB.shape[0]
    wl = np.zeros(nb * NL)
    wl[:m] = wn
    wl = wl.reshape(nb, NL).astype(rdt)
    WK = np.stack([W_KQ.real, W_KQ.imag]).astype(rdt)
    WP = np.stack([W_PV.real, W_PV.imag]).astype(rdt)
    ACC = np.zeros(G.ROWS * NL, rdt)

    def new(mode):
        loss = np.empty((nb, NL))
        gA = np.zeros((nb, 2 * d, 2 * d), np.complex128)
        gP = np.zeros((nb, d, 2 * d), np.complex128)
        G.sweep_blocks(0, nb, TB, SQ, pos.astype(rdt), (1.0 / (pos - 1)).astype(rdt), WK, WP, wl, mode, loss, gA, gP, np.empty((1, 1, 1), rdt), ACC)
        return loss.ravel()[:m], gA.sum(0), gP.sum(0)

    new(1)
    print(f"generated kernel ready in {time.perf_counter() - t0:.1f} s (compile or numba cache)")
    a, b = ref(1), new(1)
    for name, x, y in zip(("loss", "grad W_KQ", "grad W_PV"), a, b):
        print(f"{name}: relative difference {np.abs(x - y).max() / np.abs(x).max():.1e}")
    for mode, what in ((0, "loss"), (1, "loss and gradient")):
        for label, f in (("package kernel", ref), ("lane kernel", new)):
            f(mode)
            ts = []
            for _ in range(5):
                t = time.perf_counter()
                f(mode)
                ts.append(time.perf_counter() - t)
            print(f"{what:18s} {label:15s} {1e3 * min(ts):6.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
