r"""The kernel bodies: the forward and backward pass of one sequence, as statements of the DSL
(:mod:`companion.mesa.lanes.dsl`) over lane vectors, generated per d with every coordinate loop unrolled.

Each generated function computes a group of the equations below (derived in :mod:`companion.mesa.lanes`);
the names in brackets are the temporaries of the generated statements (complex values, each a pair
``name_r``, ``name_i``; ``{j}`` is a coordinate index). Bars are complex conjugates, ``\circ`` the
entrywise product, ``\Lambda = \operatorname{diag}(\lambda)``.

``maps`` (once per block): the per-sequence maps, from the weights ``wk{i}_{k}`` (:math:`W^{KQ}`) and
``wp{a}_{k}`` (:math:`W^{PV}`) and the sequence ``z{j}`` (:math:`z = x_1`), ``lam{j}``
(:math:`\lambda`), ``K{j}_{k}`` (:math:`K`):

.. math::

    N = A_{11} + A_{12}\bar\Lambda \;[\texttt{N}], \quad
    O = A_{21} + A_{22}\bar\Lambda \;[\texttt{O}], \quad
    M = N + \Lambda O \;[\texttt{M}], \quad
    M_a = \operatorname{diag}(\bar z)\, M \;[\texttt{Ma}], \quad
    R = P_1 + P_2\bar\Lambda \;[\texttt{R}],

.. math::

    C = \bigl[\, M_a^T \;\big|\; (K M_a)^T \,[\texttt{KMa}] \;\big|\; M_a^T \mathbf 1
        \;\big|\; N^T \bar z \,[\texttt{NTz}] \,\bigr], \qquad
    R_v = \begin{bmatrix} (R \operatorname{diag} z)^T \,[\texttt{Rz}] \\
        (P_1 z)^T \,[\texttt{P1z}] \end{bmatrix},

stored into the scratch ``ACC`` (C column by column, :math:`R_v^T` row by row).

``step0``, ``step1``, ``step2`` (once per position t; ``tp`` is t, ``ir`` is :math:`1/\rho_t = 1/(t-1)`,
``x{k}`` is :math:`x_t`, ``lamt{k}`` is :math:`\lambda^t`): the forward pass

.. math::

    F_t = C^T x_t = (a_t,\; K a_t,\; s_t,\; s'_t) \;[\texttt{a},\ \texttt{Ka},\ \texttt{s},\ \texttt{sp}],

.. math::

    w_t = t\, a_t + \lambda^t \circ K(\bar\lambda^t \circ a_t) - K a_t - s_t \mathbf 1
    \;[\texttt{w};\ \bar\lambda^t\circ a_t:\ \texttt{ua},\ K(\cdot):\ \texttt{Kua},\
    \lambda^t\circ K(\cdot):\ \texttt{lamKua}],

.. math::

    \rho_t \hat y_t = R_v^T \omega_t,\quad \omega_t = (w_t, s'_t) \;[\texttt{yrho}], \qquad
    r_t = \hat y_t - x_{t+1} \;[\texttt{r}], \qquad
    \ell \mathrel{+}= |r_t|^2 \;[\texttt{LOSS}],

(``step2`` also stores :math:`\hat y_t`), and in ``step1`` the backward pass, in PyTorch's convention
(:math:`\nabla = \partial/\partial\operatorname{Re} + i\,\partial/\partial\operatorname{Im}`):

.. math::

    g_t = \frac{w_n}{\rho_t} r_t \;[\texttt{g};\ w_n/\rho_t:\ \texttt{gscale}], \qquad
    \nabla R_v \mathrel{+}= \bar\omega_t\, g_t^T \;[\texttt{ACC}],

.. math::

    (\gamma_t, \gamma'_t) = \bar R_v\, g_t \;[\texttt{gw},\ \texttt{gsp}],

.. math::

    \nabla a_t = t\,\gamma_t + \lambda^t \circ K^H(\bar\lambda^t \circ \gamma_t)
    \;[\texttt{ga};\ \bar\lambda^t\circ\gamma_t:\ \texttt{gu},\ K^H(\cdot):\ \texttt{KHgu},\
    \lambda^t\circ K^H(\cdot):\ \texttt{lamKHgu}], \quad
    \nabla(K a_t) = -\gamma_t \;[\texttt{gKa}], \quad
    \nabla s_t = -\mathbf 1^T \gamma_t \;[\texttt{gs}], \quad
    \nabla s'_t = \gamma'_t,

.. math::

    \nabla C \mathrel{+}= \bar x_t\, (\nabla F_t)^T \;[\texttt{ACC}],

each column of :math:`\nabla F_t` added to the running sum as soon as it is known.

``lift`` (once per block, mode 1): from the running sums back to the weights, summed over the lanes
(``GOUT[j] = RED(...)``):

.. math::

    \nabla M_a = (\nabla C_{\cdot,a})^T + K^H (\nabla C_{\cdot,Ka})^T + \mathbf 1 (\nabla C_{\cdot,s})^T
    \;[\texttt{gMa}], \qquad
    \nabla M = \operatorname{diag}(z)\, \nabla M_a \;[\texttt{gM}], \qquad
    \nabla N = \nabla M + z\, (\nabla C_{\cdot,s'})^T \;[\texttt{gN};\ z(\cdot)^T:\ \texttt{zgsp}],

.. math::

    \nabla A_{11} = \nabla N, \quad \nabla A_{12} = \nabla N \Lambda \;[\texttt{gA12}], \quad
    \nabla A_{21} = \bar\Lambda \nabla M \;[\texttt{gA21}], \quad
    \nabla A_{22} = \bar\Lambda \nabla M \Lambda \;[\texttt{gA22}],

.. math::

    \nabla R = (\nabla R_{v,1:d})^T \operatorname{diag}(\bar z) \;[\texttt{gR}], \qquad
    \nabla P_1 = \nabla R + (\nabla R_{v,d+1})^T z^H \;[\texttt{gP1};\ \texttt{gRz}], \qquad
    \nabla P_2 = \nabla R \Lambda \;[\texttt{gP2}].

The order of the statements is chosen for the register allocator (few vectors live at once; see
:mod:`companion.mesa.lanes`) and is part of the kernel's speed: the generated IR is compared with the
previous version's when this module changes.
"""

from __future__ import annotations

from companion.mesa.lanes.layout import scratch_offsets, sequence_offsets, table_offsets

__all__ = ["bodies"]

Complex = tuple[str, str]  # (real part, imaginary part) as DSL expressions


def _c(name: str) -> Complex:
    """The DSL names of the complex value ``name``."""
    return f"{name}_r", f"{name}_i"


class _Writer:
    """Collects statements for one generated function, with the row names of the layout for dimension d."""

    def __init__(self, d: int):
        self.d = d
        self.nc = 2 * d + 2  # columns of C
        self.out: list[str] = []
        self._acc = scratch_offsets(d)
        self._sq = sequence_offsets(d)
        self._tb = table_offsets(d)

    def e(self, statement: str) -> None:
        self.out.append(statement)

    def take(self) -> list[str]:
        out, self.out = self.out, []
        return out

    # ---- rows of the layout
    def acc(self, family: str, idx: int) -> str:
        return f"ACC[{self._acc[family] + idx}]"

    def sq(self, family: str, idx: int) -> str:
        return f"SQ[{self._sq[family] + idx}]"

    def tb(self, family: str, idx: int) -> str:
        return f"TB[{self._tb[family] + idx}]"

    def C(self, c: int, k: int) -> Complex:
        """C[k, c] (coordinate k of column c)."""
        i = c * self.d + k
        return self.acc("Cr", i), self.acc("Ci", i)

    def RvT(self, a: int, i: int) -> Complex:
        """R_v[i, a]."""
        i = a * (self.d + 1) + i
        return self.acc("Vr", i), self.acc("Vi", i)

    def gC(self, k: int, c: int) -> Complex:
        """The running sum dL/dC[k, c]."""
        i = k * self.nc + c
        return self.acc("gCr", i), self.acc("gCi", i)

    def gRv(self, i: int, a: int) -> Complex:
        """The running sum dL/dR_v[i, a]."""
        i = i * self.d + a
        return self.acc("gRr", i), self.acc("gRi", i)

    # ---- complex arithmetic
    def cmul(self, dst: str, a: Complex, b: Complex, conj_a: bool = False) -> None:
        """dst = a b (or conj(a) b)."""
        re, im = _product(a, b, conj_a)
        self.e(f"{dst}_r = {re}")
        self.e(f"{dst}_i = {im}")

    def csum(self, dst: str, terms: list[tuple[Complex, Complex]], conj_a: bool = False,
             init: Complex | None = None) -> None:
        """dst = init + sum of the products a b (or conj(a) b) over ``terms`` (a, b)."""
        products = [_product(a, b, conj_a) for a, b in terms]
        rs = ([] if init is None else [init[0]]) + [re for re, _ in products]
        is_ = ([] if init is None else [init[1]]) + [im for _, im in products]
        self.e(f"{dst}_r = " + (" + ".join(rs) if rs else "0.0"))
        self.e(f"{dst}_i = " + (" + ".join(is_) if is_ else "0.0"))

    def plus_times_conj_lam(self, dst: str, w0: str, w1: str, k: int) -> None:
        """dst = w0 + w1 conj(lam_k), w0 and w1 weights (``wk..`` or ``wp..`` without the part suffix)."""
        self.e(f"{dst}_r = {w0}_r + {w1}_r * lam{k}_r + {w1}_i * lam{k}_i")
        self.e(f"{dst}_i = {w0}_i + {w1}_i * lam{k}_r - {w1}_r * lam{k}_i")

    def store(self, dst: Complex, value: str) -> None:
        self.e(f"{dst[0]} = {value}_r")
        self.e(f"{dst[1]} = {value}_i")

    # ---- the sequence's rows (loaded where they are used)
    def load_K(self) -> None:
        d = self.d
        for j in range(d):
            for k in range(d):
                self.e(f"K{j}_{k}_r = {self.sq('Kr', j * d + k)}")
                self.e(f"K{j}_{k}_i = {self.sq('Ki', j * d + k)}")

    def load_sequence(self) -> None:
        for j in range(self.d):
            self.e(f"z{j}_r = {self.sq('zr', j)}")
            self.e(f"z{j}_i = {self.sq('zi', j)}")
            self.e(f"lam{j}_r = {self.sq('lr', j)}")
            self.e(f"lam{j}_i = {self.sq('li', j)}")
        self.load_K()


def _product(a: Complex, b: Complex, conj_a: bool) -> Complex:
    """The real and imaginary parts of a b (or conj(a) b) as DSL expressions."""
    (ar, ai), (br, bi) = a, b
    if conj_a:
        return f"{ar} * {br} + {ai} * {bi}", f"{ar} * {bi} - {ai} * {br}"
    return f"{ar} * {br} - {ai} * {bi}", f"{ar} * {bi} + {ai} * {br}"


def _omega(d: int, i: int) -> str:
    """omega_t = (w_t, s'_t): entry i."""
    return f"w{i}" if i < d else "sp"


def _gomega(d: int, i: int) -> str:
    """(gamma_t, gamma'_t) = conj(R_v) g_t: entry i."""
    return f"gw{i}" if i < d else "gsp"


# ----------------------------------------------------------------------------------------------------------
# maps: C and R_v of each lane's sequence
# ----------------------------------------------------------------------------------------------------------

def _maps(W: _Writer) -> None:
    d = W.d
    W.load_sequence()
    for i in range(d):
        for k in range(d):
            # N_ik = A11_ik + A12_ik conj(lam_k), O_ik = A21_ik + A22_ik conj(lam_k), M_ik = N_ik + lam_i O_ik
            W.plus_times_conj_lam(f"N{i}_{k}", f"wk{i}_{k}", f"wk{i}_{d + k}", k)
            W.plus_times_conj_lam("O", f"wk{d + i}_{k}", f"wk{d + i}_{d + k}", k)
            W.cmul(f"M{i}_{k}", _c(f"lam{i}"), _c("O"))
            W.e(f"M{i}_{k}_r = M{i}_{k}_r + N{i}_{k}_r")
            W.e(f"M{i}_{k}_i = M{i}_{k}_i + N{i}_{k}_i")
            W.cmul(f"Ma{i}_{k}", _c(f"z{i}"), _c(f"M{i}_{k}"), conj_a=True)  # (M_a)_ik = conj(z_i) M_ik
            W.store(W.C(i, k), f"Ma{i}_{k}")  # column i of C: M_a^T
            # R_v[k, i] = (R diag z)_ik = R_ik z_k with R_ik = P1_ik + P2_ik conj(lam_k)
            W.plus_times_conj_lam("R", f"wp{i}_{k}", f"wp{i}_{d + k}", k)
            W.cmul("Rz", _c("R"), _c(f"z{k}"))
            W.store(W.RvT(i, k), "Rz")
    for k in range(d):
        W.e(f"{W.C(2 * d, k)[0]} = " + " + ".join(f"Ma{j}_{k}_r" for j in range(d)))  # column 2d: M_a^T 1
        W.e(f"{W.C(2 * d, k)[1]} = " + " + ".join(f"Ma{j}_{k}_i" for j in range(d)))
        for j in range(d):  # column d+j: (K M_a)^T
            W.csum("KMa", [(_c(f"Ma{q}_{k}"), _c(f"K{j}_{q}")) for q in range(d)])
            W.store(W.C(d + j, k), "KMa")
        W.csum("NTz", [(_c(f"z{j}"), _c(f"N{j}_{k}")) for j in range(d)], conj_a=True)  # column 2d+1: N^T conj(z)
        W.store(W.C(2 * d + 1, k), "NTz")
    for a in range(d):  # R_v[d, a] = (P1 z)_a
        W.csum("P1z", [(_c(f"wp{a}_{j}"), _c(f"z{j}")) for j in range(d)])
        W.store(W.RvT(a, d), "P1z")


# ----------------------------------------------------------------------------------------------------------
# one position: forward (all modes), predictions (mode 2), backward (mode 1)
# ----------------------------------------------------------------------------------------------------------

def _F_column(W: _Writer, c: int, dst: str) -> None:
    """dst = F_c = (C^T x_t)_c."""
    W.csum(dst, [(W.C(c, k), _c(f"x{k}")) for k in range(W.d)])


def _forward(W: _Writer, pred: bool) -> None:
    # ordered so that few vectors are live at once: a = F_0..d-1 and ua = conj(lam^t) a first, then each
    # w_j with its column (K a)_j; x_t and lam^t are table rows, reloaded where they are used
    d = W.d
    for k in range(d):
        W.e(f"x{k}_r = {W.tb('xr', k)}")
        W.e(f"x{k}_i = {W.tb('xi', k)}")
        W.e(f"lamt{k}_r = {W.tb('pr', k)}")
        W.e(f"lamt{k}_i = {W.tb('pi', k)}")
    _F_column(W, 2 * d, "s")
    for k in range(d):
        _F_column(W, k, f"a{k}")
        W.cmul(f"ua{k}", _c(f"lamt{k}"), _c(f"a{k}"), conj_a=True)
    for j in range(d):  # w_j = t a_j + lam_j^t (K (conj(lam^t) a))_j - (K a)_j - s
        W.csum("Kua", [(_c(f"K{j}_{k}"), _c(f"ua{k}")) for k in range(d)])
        W.cmul("lamKua", _c(f"lamt{j}"), _c("Kua"))
        _F_column(W, d + j, "Ka")
        W.e(f"w{j}_r = tp * a{j}_r + lamKua_r - Ka_r - s_r")
        W.e(f"w{j}_i = tp * a{j}_i + lamKua_i - Ka_i - s_i")
    _F_column(W, 2 * d + 1, _omega(d, d))  # s'
    _residual(W, pred)


def _residual(W: _Writer, pred: bool) -> None:
    """``r_t = R_v^T omega_t / rho_t - x_{t+1}``, the loss ``|r_t|^2`` and (``pred``) the predictions."""
    d = W.d
    terms = []
    for a in range(d):
        W.csum("yrho", [(W.RvT(a, i), _c(_omega(d, i))) for i in range(d + 1)])
        W.e(f"r{a}_r = yrho_r * ir - {W.tb('yr', a)}")
        W.e(f"r{a}_i = yrho_i * ir - {W.tb('yi', a)}")
        terms.append(f"r{a}_r * r{a}_r + r{a}_i * r{a}_i")
        if pred:
            W.e(f"PRED[{a}] = yrho_r * ir")
            W.e(f"PRED[{d + a}] = yrho_i * ir")
    W.e("LOSS += " + " + ".join(terms))


def _add_to_gC(W: _Writer, c: int, gF: str) -> None:
    """dL/dC[:, c] += conj(x_t) dL/dF_c (column c of the running sum)."""
    for k in range(W.d):
        gr, gi = W.gC(k, c)
        W.e(f"{gr} += x{k}_r * {gF}_r + x{k}_i * {gF}_i")
        W.e(f"{gi} += x{k}_r * {gF}_i - x{k}_i * {gF}_r")


def _backward(W: _Writer) -> None:
    d = W.d
    W.e("gscale = ir * WB")  # g_t = (w_n / rho_t) r_t
    for a in range(d):
        W.e(f"g{a}_r = r{a}_r * gscale")
        W.e(f"g{a}_i = r{a}_i * gscale")
    for i in range(d + 1):  # dL/dR_v += conj(omega_t) g_t^T
        om = _omega(d, i)
        for a in range(d):
            gr, gi = W.gRv(i, a)
            W.e(f"{gr} += {om}_r * g{a}_r + {om}_i * g{a}_i")
            W.e(f"{gi} += {om}_r * g{a}_i - {om}_i * g{a}_r")
    for i in range(d + 1):  # (gamma, gamma') = conj(R_v) g_t
        W.csum(_gomega(d, i), [(W.RvT(a, i), _c(f"g{a}")) for a in range(d)], conj_a=True)
    for j in range(d):
        W.cmul(f"gu{j}", _c(f"lamt{j}"), _c(f"gw{j}"), conj_a=True)  # conj(lam^t) gamma
    for k in range(d):  # the columns of dL/dF, each added to dL/dC as soon as it is known
        W.csum("KHgu", [(_c(f"K{j}_{k}"), _c(f"gu{j}")) for j in range(d)], conj_a=True)
        W.cmul("lamKHgu", _c(f"lamt{k}"), _c("KHgu"))
        W.e(f"ga_r = tp * gw{k}_r + lamKHgu_r")  # dL/da_k = t gamma_k + lam_k^t (K^H (conj(lam^t) gamma))_k
        W.e(f"ga_i = tp * gw{k}_i + lamKHgu_i")
        _add_to_gC(W, k, "ga")
        W.e(f"gKa_r = -gw{k}_r")  # dL/d(K a)_k = -gamma_k
        W.e(f"gKa_i = -gw{k}_i")
        _add_to_gC(W, d + k, "gKa")
    W.e("gs_r = -(" + " + ".join(f"gw{k}_r" for k in range(d)) + ")")  # dL/ds = -sum_k gamma_k
    W.e("gs_i = -(" + " + ".join(f"gw{k}_i" for k in range(d)) + ")")
    _add_to_gC(W, 2 * d, "gs")
    _add_to_gC(W, 2 * d + 1, _gomega(d, d))  # dL/ds' = gamma'


# ----------------------------------------------------------------------------------------------------------
# lift: dL/dW_KQ and dL/dW_PV of each lane from dL/dC and dL/dR_v, summed over the lanes into the block's
# float64 slots (dL/dW_KQ then dL/dW_PV, complex as (re, im)), each right after its value is computed
# ----------------------------------------------------------------------------------------------------------

def _red(W: _Writer, p: int, q: int, val: str, base: int = 0) -> None:
    """Slot (p, q) of a gradient of row length 2d, from ``base``: the sum of ``val`` over the lanes."""
    D = 2 * W.d
    W.e(f"GOUT[{base + 2 * (p * D + q)}] = RED({val}_r)")
    W.e(f"GOUT[{base + 2 * (p * D + q) + 1}] = RED({val}_i)")


def _lift_KQ(W: _Writer) -> None:
    d = W.d
    for k in range(d):
        for j in range(d):
            # dL/d(M_a)_jk = dL/dC[k, j] + sum_q conj(K_qj) dL/dC[k, d+q] + dL/dC[k, 2d]
            gCa, gCs = W.gC(k, j), W.gC(k, 2 * d)
            W.csum("gMa", [(_c(f"K{q}_{j}"), W.gC(k, d + q)) for q in range(d)], conj_a=True,
                   init=(f"{gCa[0]} + {gCs[0]}", f"{gCa[1]} + {gCs[1]}"))
            W.cmul("gM", _c("gMa"), _c(f"z{j}"))  # dL/dM_jk = z_j dL/d(M_a)_jk
            W.cmul("zgsp", _c(f"z{j}"), W.gC(k, 2 * d + 1))  # dL/dN_jk = dL/dM_jk + z_j dL/dC[k, 2d+1]
            W.e("gN_r = gM_r + zgsp_r")
            W.e("gN_i = gM_i + zgsp_i")
            _red(W, j, k, "gN")  # dL/dA11
            W.cmul("gA12", _c("gN"), _c(f"lam{k}"))
            _red(W, j, d + k, "gA12")
            W.cmul("gA21", _c(f"lam{j}"), _c("gM"), conj_a=True)
            _red(W, d + j, k, "gA21")
            W.cmul("gA22", _c("gA21"), _c(f"lam{k}"))
            _red(W, d + j, d + k, "gA22")


def _lift_PV(W: _Writer) -> None:
    d = W.d
    base = 2 * (2 * d) ** 2  # after dL/dW_KQ
    for a in range(d):
        for j in range(d):
            W.cmul("gR", _c(f"z{j}"), W.gRv(j, a), conj_a=True)  # dL/dR_aj = conj(z_j) dL/dR_v[j, a]
            W.cmul("gRz", _c(f"z{j}"), W.gRv(d, a), conj_a=True)  # conj(z_j) dL/dR_v[d, a]
            W.e("gP1_r = gR_r + gRz_r")
            W.e("gP1_i = gR_i + gRz_i")
            _red(W, a, j, "gP1", base)
            W.cmul("gP2", _c("gR"), _c(f"lam{j}"))
            _red(W, a, d + j, "gP2", base)


def bodies(d: int) -> dict[str, list[str]]:
    """Statements of the generated functions ``maps``, ``step0`` (loss), ``step1`` (loss and gradient),
    ``step2`` (loss and predictions) and ``lift``, over lane vectors (the DSL of
    :mod:`companion.mesa.lanes.dsl`; the equations in the module docstring)."""
    W = _Writer(d)
    result: dict[str, list[str]] = {}
    _maps(W)
    result["maps"] = W.take()
    for mode in (0, 1, 2):
        W.load_K()
        _forward(W, pred=mode == 2)
        if mode == 1:
            _backward(W)
        result[f"step{mode}"] = W.take()
    W.load_sequence()
    _lift_KQ(W)
    _lift_PV(W)
    result["lift"] = W.take()
    return result
