"""The fused kernel (companion.mesa.lanes.host, generated LLVM IR with 16 sequences per SIMD vector:
companion.mesa.lanes) against the batched torch version of the same formulas: both dtypes, weights, position
subsets, forward-only and prediction modes, padding, thread-count invariance, the lane layout, the on-disk
cache of the compiled code, and the phase tables. (Both are checked against the naive per-prefix reference
in mesa/test_reference.py; the compiled kernel against its NumPy interpreter, companion.mesa.lanes.reference,
in mesa/test_lanes_reference.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from companion.mesa.analysis import per_sequence_loss
from companion.mesa.data import generate
from companion.mesa.lanes import host
from companion.mesa.model import loss_fast, loss_grad_fast, predict, predict_fast
from companion.mesa.train import init_gaussian
from companion.params import ParameterError


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("law,d,T", [("gaussian", 5, 40), ("full_one", 3, 17), ("sparse", 2, 6)])
def test_fused_equals_torch_complex128(law, d, T):
    # 300 sequences: 19 blocks of 16 lanes, the last one padded with 4 zero sequences, and every block starts
    # on the scratch the previous one left (a read of stale or uninitialised scratch gives wrong or NaN sums)
    data = generate(law, 300, d, T, 1.3, rng=4)
    A, Pm = init_gaussian(d, 0.4, np.random.default_rng(1), torch.complex128)
    A = A + 0.3j * torch.randn(A.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    w = torch.rand(300, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for weights in (None, w):
        for pos in (None, [2, 3, T - 1], [T - 1]):
            L1, gA1, gP1 = loss_grad_fast(data, A, Pm, weights=weights, positions=pos)
            L0, gA0, gP0 = loss_grad_fast(data, A, Pm, weights=weights, positions=pos, backend="torch")
            assert abs(float(L1) - float(L0)) <= 1e-12 * float(L0)
            assert _rel(gA1, gA0) <= 1e-11 and _rel(gP1, gP0) <= 1e-11
            assert abs(loss_fast(data, A, Pm, weights, pos) - float(L0)) <= 1e-12 * float(L0)
            assert _rel(predict_fast(data, A, Pm, pos), predict(data, A, Pm, pos)) <= 1e-12
            per_seq = per_sequence_loss(data, A, Pm, positions=pos)
            assert np.isfinite(per_seq).all() and per_seq.shape == (300,)


def test_fused_complex64_close_to_complex128():
    d = 5
    data = generate("gaussian", 2000, d, 100, 1.0, rng=6)
    A, Pm = init_gaussian(d, 0.3, np.random.default_rng(0), torch.complex128)
    L0, gA0, gP0 = loss_grad_fast(data, A, Pm, backend="torch")
    d64 = data.to(torch.complex64)
    L1, gA1, gP1 = loss_grad_fast(d64, A.to(torch.complex64), Pm.to(torch.complex64))
    # float32 round-off over ~100 positions: relative 1e-5 is ~100 ulps
    assert abs(float(L1) - float(L0)) <= 1e-5 * float(L0)
    assert _rel(gA1.to(torch.complex128), gA0) <= 1e-5 and _rel(gP1.to(torch.complex128), gP0) <= 1e-5
    assert gA1.dtype == torch.complex64


def test_result_independent_of_thread_count():
    # the sweep split over threads must visit every sequence once and sum the blocks in a fixed order: the
    # gradients and the per-sequence losses of a 3-thread sweep (more threads than cores; 32 blocks of 16
    # sequences, ranges 0-9, 10-20, 21-31) equal the 1-thread ones exactly (a range split that skips or
    # repeats a block changes them)
    data = generate("gaussian", 500, 4, 30, 1.0, rng=1)
    A, Pm = init_gaussian(4, 0.3, np.random.default_rng(2), torch.complex64)
    out = {}
    old = host.set_threads(1)
    try:
        for n in (1, 3):
            host.set_threads(n)
            out[n] = loss_grad_fast(data, A, Pm), per_sequence_loss(data, A, Pm)
    finally:
        host.set_threads(old)
    (one, seq1), (three, seq3) = out[1], out[3]
    assert float(one[0]) == float(three[0]) and np.array_equal(seq1, seq3)
    assert torch.equal(one[1], three[1]) and torch.equal(one[2], three[2])


def test_tables_match_exact_powers_in_the_lane_layout():
    # sequence n sits in lane n % 16 of block n // 16; 23 sequences: the second block has 9 padding lanes
    rng = np.random.default_rng(0)
    m, d = 23, 3
    theta = rng.uniform(0, 2 * np.pi, (m, d))
    x1 = rng.standard_normal((m, d)) + 0.5j * rng.standard_normal((m, d))
    pos = np.array([2, 3, 4, 9, 10, 57, 99])  # runs and jumps
    TB, _ = host.tables(theta, x1, np.exp(1j * theta), np.zeros((m, d, d), complex), pos, np.float64)
    N = len(pos)
    assert TB.shape == (2, N, 6 * d * 16)
    lane = TB.reshape(2, N, 6, d, 16).transpose(0, 4, 2, 3, 1).reshape(32, 6, d, N)  # (sequence, q, k, position)
    lam_t = np.exp(1j * theta[:, :, None] * pos[None, None, :])
    assert np.abs(lane[:m, 2] + 1j * lane[:m, 3] - lam_t).max() < 1e-13
    assert np.abs(lane[:m, 0] + 1j * lane[:m, 1] - x1[:, :, None] * lam_t * np.exp(-1j * theta)[:, :, None]).max() < 1e-13
    assert np.abs(lane[:m, 4] + 1j * lane[:m, 5] - x1[:, :, None] * lam_t).max() < 1e-13
    assert (lane[m:, 2] == 1).all() and not lane[m:, [0, 1, 3, 4, 5]].any()  # padding: lam^t = 1, x = 0
    TB32, _ = host.tables(theta, x1, np.exp(1j * theta), np.zeros((m, d, d), complex), pos, np.float32)
    assert TB32.dtype == np.float32 and np.array_equal(TB32, TB.astype(np.float32))


def test_backend_name_checked():
    data = generate("gaussian", 3, 2, 5, 1.0, rng=0)
    A, Pm = init_gaussian(2, 0.3, np.random.default_rng(0), torch.complex128)
    with pytest.raises(ParameterError, match="backend"):
        loss_grad_fast(data, A, Pm, backend="numba")


def test_bad_weights_are_named_before_the_kernel():
    data = generate("gaussian", 4, 2, 5, 1.0, rng=0)
    A, Pm = init_gaussian(2, 0.3, np.random.default_rng(0), torch.complex128)
    for bad, match in (([1.0, 2.0], r"shape \(4,\)"), ([1.0, -1.0, 1.0, 1.0], ">= 0"), ([0.0] * 4, "positive sum"),
                       ([1.0, float("nan"), 1.0, 1.0], "finite"), ("abc", "real numbers")):
        with pytest.raises(ParameterError, match="'weights'.*" + match):
            loss_grad_fast(data, A, Pm, weights=bad)
        with pytest.raises(ParameterError, match="'weights'"):
            loss_fast(data, A, Pm, weights=bad)


def test_thread_setting_checked(monkeypatch):
    from companion.mesa.train import run

    monkeypatch.setenv("COMPANION_THREADS", "two")
    with pytest.raises(ParameterError, match="'COMPANION_THREADS'.*>= 1.*'two'"):
        run(law="gaussian", a0=0.5, b0=0.5, lr=1e-3, epochs=1, d=2, T=5, m=4, m_test=4)
    # outside training too: the kernel reads the same variable and must not fall back to 1 thread silently
    data = generate("gaussian", 10, 2, 6, 1.0, rng=1)
    A, Pm = init_gaussian(2, 0.3, np.random.default_rng(2), torch.complex128)
    monkeypatch.setenv("COMPANION_THREADS", "0")
    with pytest.raises(ParameterError, match="'COMPANION_THREADS'.*>= 1.*'0'"):
        loss_grad_fast(data, A, Pm)


def test_a_forked_child_sweeps_on_its_own_threads():
    # a process forked after a multi-threaded sweep inherits the thread pool object but none of its threads:
    # reusing it would hang the child's first sweep (the child builds its own data: tensors sent through a
    # multiprocessing pipe are shared-memory views, not the point here)
    import multiprocessing

    old = host.set_threads(2)
    try:
        want = _two_thread_loss()  # creates the pool in this process
        with multiprocessing.get_context("fork").Pool(1) as pool:
            got = pool.apply_async(_two_thread_loss).get(timeout=60)
    finally:
        host.set_threads(old)
    assert got == want


def _two_thread_loss() -> float:
    host.set_threads(2)
    data = generate("gaussian", 200, 3, 10, 1.0, rng=3)
    A, Pm = init_gaussian(3, 0.3, np.random.default_rng(4), torch.complex128)
    return float(loss_grad_fast(data, A, Pm)[0])


def test_data_sent_to_another_process_gives_the_same_loss():
    # an ARData with cached tables, sent through a multiprocessing pipe, once gave the spawned child NaN and
    # the sender garbage (its cached numpy views pointed at storage torch had moved to shared memory)
    import multiprocessing

    data = generate("gaussian", 200, 3, 10, 1.0, rng=3)
    A, Pm = init_gaussian(3, 0.3, np.random.default_rng(4), torch.complex128)
    want = float(loss_grad_fast(data, A, Pm)[0])  # fills data._tables
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply_async(_loss_of, (data, A, Pm)).get(timeout=120)
    junk = [np.random.default_rng(k).random(1000) for k in range(1000)]  # reuse the memory torch freed  # noqa: F841
    assert got == want and float(loss_grad_fast(data, A, Pm)[0]) == want  # and the sender's own caches still hold


def _loss_of(data, A, Pm) -> float:
    return float(loss_grad_fast(data, A, Pm)[0])



def test_sequences_layout_puts_sequence_16b_plus_l_in_lane_l():
    from companion.mesa import lanes

    rng = np.random.default_rng(5)
    m, d = 21, 2  # two blocks, the second with 11 padding lanes
    z = rng.standard_normal((m, d)) + 1j * rng.standard_normal((m, d))
    lam = np.exp(1j * rng.uniform(0, 6, (m, d)))
    K = rng.standard_normal((m, d, d)) + 1j * rng.standard_normal((m, d, d))
    SQ = lanes.lane_sequences(z, lam, K, np.float64).reshape(2, 4 * d + 2 * d * d, lanes.NL)
    for n in (0, 15, 17, 20):
        b, l = divmod(n, 16)
        assert np.array_equal(SQ[b, :, l], np.concatenate([z[n].real, z[n].imag, lam[n].real, lam[n].imag,
                                                           K[n].real.ravel(), K[n].imag.ravel()]))
    assert not SQ[1, :2 * d, 5:].any()  # padding: x_1 = 0


@pytest.mark.slow  # compiles the kernel in fresh processes: not in the fast lane (make test-fast)
def test_compiled_kernel_is_cached_on_disk_and_reloaded(tmp_path):
    # the first process compiles d = 1 and writes the object code; the second loads it (no compilation) and
    # gives bit-identical losses and gradients
    import json
    import subprocess
    import sys

    code = ("import json, numpy as np, torch\n"
            "from companion.mesa import lanes\n"
            "from companion.mesa.data import generate\n"
            "from companion.mesa.model import loss_grad_fast\n"
            "from companion.mesa.train import init_gaussian\n"
            "lanes.compiled(1, 'double')\n"
            "data = generate('gaussian', 40, 1, 9, 1.0, rng=2)\n"
            "A, Pm = init_gaussian(1, 0.4, np.random.default_rng(1), torch.complex128)\n"
            "L, gA, gP = loss_grad_fast(data, A, Pm)\n"
            "print(json.dumps([float(L), gA.flatten().tolist().__repr__(), gP.flatten().tolist().__repr__()]))\n")
    env = dict(__import__("os").environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run():
        return json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                         check=True).stdout)

    first = run()
    files = list(tmp_path.glob("mesa-lanes-d1-double-*.o"))
    assert len(files) == 1 and files[0].stat().st_size > 1000
    stamp = (files[0].stat().st_ino, files[0].stat().st_mtime_ns)
    second = run()
    assert first == second
    assert list(tmp_path.glob("mesa-lanes-d1-double-*")) == files  # no second object, no leftover temporary
    assert (files[0].stat().st_ino, files[0].stat().st_mtime_ns) == stamp  # loaded, not written again
    # a damaged cache file (here: its last byte flipped) is compiled again and replaced, never loaded
    blob = bytearray(files[0].read_bytes())
    blob[-1] ^= 0xFF
    files[0].write_bytes(bytes(blob))
    assert run() == first
    assert files[0].read_bytes() != bytes(blob)


@pytest.mark.slow  # compiles the kernel in fresh processes: not in the fast lane (make test-fast)
def test_processes_that_need_a_new_kernel_at_the_same_time_compile_it_once(tmp_path):
    # three processes import, wait for one signal, then ask for the same uncompiled kernel (d = 2, double: about
    # a second of compilation) in one empty cache: one compiles it, the others wait for its lock and load the object
    import subprocess
    import sys
    import time

    go = tmp_path / "go"
    code = ("import os, time\n"
            "from companion.mesa.lanes import jit\n"
            f"while not os.path.exists({str(go)!r}):\n"
            "    time.sleep(0.005)\n"
            "jit.compiled(2, 'double')\n"
            "print(len(jit.COMPILED_HERE))\n")
    env = dict(__import__("os").environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    time.sleep(3)  # all three have imported and are polling
    go.touch()
    counts = sorted(int(p.communicate(timeout=300)[0]) for p in procs)
    assert counts == [0, 0, 1], counts
    assert len(list((tmp_path / "cache").glob("mesa-lanes-d2-double-*.o"))) == 1


def test_sweep_refuses_arrays_the_compiled_code_would_overrun():
    # the kernel reads and writes through raw pointers: a table of another d, a sequence block of another
    # dtype, a short position list or an unknown mode must be refused before the call, naming the argument
    rng = np.random.default_rng(0)
    m, d, pos = 20, 2, np.arange(2, 6)
    theta = rng.uniform(0, 6, (m, d))
    x1 = rng.standard_normal((m, d)) + 0j
    K = np.zeros((m, d, d), complex)
    TB, SQ = host.tables(theta, x1, np.exp(1j * theta), K, pos, np.float64)
    TB3, SQ3 = host.tables(rng.uniform(0, 6, (m, 3)), np.ones((m, 3), complex), np.ones((m, 3), complex),
                              np.zeros((m, 3, 3), complex), pos, np.float64)
    W_KQ, W_PV = np.zeros((2 * d, 2 * d), complex), np.zeros((d, 2 * d), complex)
    nb = TB.shape[0]

    def call(**kw):
        a = dict(TB=TB, SQ=SQ, tpos=pos, inv_rho=1.0 / (pos - 1), W_KQ=W_KQ, W_PV=W_PV, wn=np.full(m, 1.0 / m), mode=1,
                 loss=np.empty(m), gA=np.zeros((nb, 2 * d, 2 * d), complex), gP=np.zeros((nb, d, 2 * d), complex),
                 pred=np.empty((1, 1, 1, 1)))
        a.update(kw)
        host.sweep(**a)

    call()  # the consistent call runs
    for kw, name in ((dict(TB=TB3), "TB"), (dict(SQ=SQ3), "SQ"), (dict(SQ=SQ.astype(np.float32)), "SQ"),
                     (dict(tpos=pos[:3]), "tpos"), (dict(mode=3), "mode"), (dict(loss=np.empty(m + 16)), "loss"),
                     (dict(TB=np.asfortranarray(TB)), "TB")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            call(**kw)


def test_kernel_at_d7_matches_the_torch_path():
    d = 7
    data = generate("gaussian", 40, d, 9, 1.0, np.random.default_rng(3), torch.complex128)
    g = torch.Generator().manual_seed(0)
    W_KQ = 0.3 * torch.randn(2 * d, 2 * d, dtype=torch.complex128, generator=g)
    W_PV = 0.3 * torch.randn(d, 2 * d, dtype=torch.complex128, generator=g)
    L1, A1, P1 = loss_grad_fast(data, W_KQ, W_PV, backend="fused")
    L2, A2, P2 = loss_grad_fast(data, W_KQ, W_PV, backend="torch")
    assert abs(float(L1) - float(L2)) <= 1e-10 * abs(float(L2))
    assert float((A1 - A2).abs().max()) <= 1e-9 * float(A2.abs().max())
    assert float((P1 - P2).abs().max()) <= 1e-9 * float(P2.abs().max())


_TRAIN = """
import hashlib, numpy as np
from companion.mesa.train import RunConfig, train
r = train(RunConfig(law="gaussian", d=4, T=12, m=3000, m_test=20, a0=0.5, b0=1.5, lr=1e-3, epochs=5, chunk=3000,
                    dtype="complex128"))  # complex128: a changed summation order is not rounded away
print(hashlib.sha256(np.ascontiguousarray(r.W_KQ).tobytes() + np.ascontiguousarray(r.W_PV).tobytes()).hexdigest())
"""


@pytest.mark.slow  # two full training runs: not in the fast lane (make test-fast)
def test_full_training_is_bitwise_identical_at_one_and_two_threads():
    """Run in subprocesses with NUMBA_NUM_THREADS=2, so it never skips on a one-core machine."""
    from companion.mesa import lanes

    out = []
    # the kernel for this (d, dtype) is compiled (or loaded) here first, into the on-disk cache the runs read: a
    # process that JIT-compiles lays out its heap differently, and torch's complex128 products then round differently
    # in the last bit (2.9e-17 on weights of size 1.4, measured); the two compared runs both load it
    lanes.compiled(4, "double")
    for n in ("1", "2"):
        env = dict(os.environ, COMPANION_THREADS=n, NUMBA_NUM_THREADS="2", COMPANION_CACHE_DIR="off")
        proc = subprocess.run([sys.executable, "-c", _TRAIN], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        out.append(proc.stdout.strip().splitlines()[-1])
    assert out[0] == out[1]
