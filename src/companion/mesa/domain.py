"""The parameter domains shared by the mesa notebooks: one validation of the sizes and of the diagonal
initialisations (Assumption 3.1), so that every page rejects bad input with the same one-line message
naming the parameter (:class:`companion.params.ParameterError`)."""

from __future__ import annotations

from companion import params

__all__ = ["sizes", "diagonal_inits"]


def sizes(d, T, m, m_test, epochs, *, d_min: int = 2, m_min: int = 160, m_test_min: int = 100):
    """Validated ``(d, T, m, m_test, epochs)``: d_min <= d <= 8, 5 <= T <= 1000, m_min <= m <= 1e6,
    m_test_min <= m_test <= 1e6, 1 <= epochs <= 1e5."""
    return (params.integer("d", d, min=d_min, max=8), params.integer("T", T, min=5, max=1000),
            params.integer("m", m, min=m_min, max=10**6), params.integer("m_test", m_test, min=m_test_min, max=10**6),
            params.integer("epochs", epochs, min=1, max=10**5))


def diagonal_inits(a0s, b0s) -> list[tuple[float, float]]:
    """The diagonal inits (a0 I, b0 I) as a list of pairs: one b0 per a0, each ``|a0|, |b0| <= 5`` with ``a0 b0 > 0``."""
    a0s = params.real_list("a0s", a0s, min=-5, max=5)
    b0s = params.real_list("b0s", b0s, min=-5, max=5)
    params.require(len(a0s) == len(b0s) and len(a0s) >= 1, "b0s", f"needs one b0 per a0 ({len(a0s)}); got {len(b0s)}")
    for a_, b_ in zip(a0s, b0s):
        params.require(a_ * b_ > 0, "a0s", f"every init needs a0*b0 > 0; got ({a_}, {b_})")
    return list(zip(a0s, b0s))
