"""The named seed streams (companion.seeds): each gives fixed integers (a changed offset or key would change every
recorded verdict), and no two streams of one run share a seed, at every seed and replicate index the book's pages use (their defaults, their
smoke points and their domain points)."""

from __future__ import annotations

import re
from itertools import combinations

import numpy as np
import pytest

from companion import notebooks as nbs
from companion import seeds

from _util import ROOT, domain_points, smoke_parameters

#: how far the mesa replicate designs reach: companion.mesa.evidence.replicate_sets draws replicate_seed(seed,
#: 1 + k) and replicate_seed(seed, 17 + k) for k < n_rep <= MAX_REPLICATES = 16
MESA_REPLICATES = range(0, 33)


def _points() -> list[tuple[str, dict]]:
    """(notebook, parameters) of every page's default point, smoke point and domain points."""
    smoke, domain = smoke_parameters(), domain_points()
    out = []
    for name in nbs.all_notebooks(toc_only=True):
        if not name.startswith(("mesa/", "cot/")):
            continue
        defaults = {k: p.default_value for k, p in nbs.parameters(name).items()}
        for extra in [{}, smoke.get(name, {}), *domain.get(name, [])]:
            out.append((name, {**defaults, **extra}))
    return out


POINTS = _points()


def _numpy_entropy(entropy) -> tuple:
    """A NumPy seed as the generator sees it: a seed sequence pads its entropy with zeros, so ``[s, 0]`` and ``s``
    are one generator (trailing zeros dropped here)."""
    words = list(np.atleast_1d(entropy)) if not isinstance(entropy, tuple) else list(entropy)
    while len(words) > 1 and words[-1] == 0:
        words.pop()
    return tuple(int(w) for w in words)


def _cot_streams(seed: int, replicates: int) -> dict[str, set]:
    """The torch seeds each cot stream gives at ``seed`` for replicates 0..replicates-1."""
    rs = range(max(1, replicates))
    return {s.name: {s.replicate(seed, r) for r in rs} | {s(seed)} for s in seeds.STREAMS.values()
            if s.name.startswith("cot.")}


def _mesa_streams(seed: int) -> dict[str, set]:
    """The NumPy seeds each mesa spawn-key stream gives for the runs of a page at ``seed`` (the page's own seed
    and every replicate seed of its replicate designs)."""
    runs = {seeds.replicate_seed(seed, r) for r in MESA_REPLICATES}
    return {k.name: {_numpy_entropy(k.entropy(t)) for t in runs} for k in seeds.SPAWN_KEYS.values()}


def _disjoint(streams: dict[str, set]) -> list[str]:
    return [f"{a} and {b} share {sorted(streams[a] & streams[b])[:3]}"
            for a, b in combinations(sorted(streams), 2) if streams[a] & streams[b]]


@pytest.mark.parametrize("name, point", POINTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(POINTS)])
def test_no_two_streams_of_one_run_share_a_seed(name, point):
    seed = int(point["seed"])
    if name.startswith("cot/"):
        clash = _disjoint(_cot_streams(seed, int(point.get("replicates", 1))))
    else:
        clash = _disjoint(_mesa_streams(seed))
    assert not clash, f"{name} at seed {seed}: " + "; ".join(clash)


def test_the_check_sees_a_clash():
    """The check above is not vacuous: a stream one replicate stride away from another, or a reused spawn key,
    is caught."""
    bad = seeds.SeedStream("cot.bad", seeds.REPLICATE_STRIDE, "")
    streams = _cot_streams(1, 2) | {bad.name: {bad(1)}}
    assert _disjoint(streams)
    assert _disjoint({"a": {_numpy_entropy(seeds.SpawnKey("a", 0, "").entropy(3))}, "b": {_numpy_entropy(3)}})


def test_streams_have_distinct_names_offsets_and_keys():
    cot = [s for s in seeds.STREAMS.values() if s.name.startswith("cot.")]
    assert len({s.offset for s in cot}) == len(cot)
    assert len({k.key for k in seeds.SPAWN_KEYS.values()}) == len(seeds.SPAWN_KEYS)
    assert set(seeds.__all__) >= {n for n in dir(seeds) if n.startswith(("COT_", "MESA_"))}


def test_each_stream_keeps_its_integers_so_recorded_verdicts_reproduce():
    # cot: torch.Generator seeds, seed + offset; replicate r (seed + offset + 1_000_003 r) mod 2**32
    assert seeds.COT_PROMPTS(1) == 1 and seeds.COT_PROMPTS.replicate(1, 3) == 1 + 3 * 1_000_003
    assert seeds.COT_TRAIN_EVAL(3) == 3 + 10_000_019
    assert seeds.COT_EVAL(1) == 8 and seeds.COT_EVAL.replicate(1, 2) == 8 + 2 * 1_000_003
    assert seeds.COT_ISO_EVAL.replicate(4, 1) == 4 + 5 + 1_000_003
    assert seeds.COT_SPARSE_SIM(1) == 4 and seeds.COT_OOD_EVAL(1) == 12 and seeds.COT_OOD_EVAL.replicate(6, 5) == 17 + 5_000_015
    assert seeds.replicate_seed(2**32 - 1, 1) == 1_000_002  # modulo 2**32
    assert seeds.COT_EVAL(2**32 - 1) == 2**32 + 6  # an offset is not reduced modulo 2**32
    assert seeds.MESA_RANDOM_WEIGHTS(5) == 5
    # mesa: NumPy seed sequences [seed, key]
    keys = {"mesa.train_data": 0, "mesa.test_data": 1, "mesa.init": 2, "mesa.one_step_eval": 3,
            "mesa.position_eval": 4, "mesa.hessian_data": 5, "mesa.offdiag_mc": 7, "mesa.loss_eval": 8,
            "mesa.equivariant_mc": 9, "mesa.formula_mc": 10}
    assert {k.name: k.key for k in seeds.SPAWN_KEYS.values()} == keys
    for k in seeds.SPAWN_KEYS.values():
        assert k.entropy(3) == (3, keys[k.name])
        assert k.rng(3).bit_generator.state == np.random.default_rng([3, keys[k.name]]).bit_generator.state


def test_replicate_seed_has_one_home():
    import companion
    from companion.cot import train

    assert companion.replicate_seed is seeds.replicate_seed is train.replicate_seed


def test_mesa_pages_discard_the_notebook_generator():
    """``seed_everything(seed)`` returns ``default_rng(seed)``, the very generator of the training stream
    ``[seed, 0]``: a mesa page must not draw from it (it seeds the globals only)."""
    assert _numpy_entropy(seeds.MESA_TRAIN_DATA.entropy(7)) == _numpy_entropy(7)
    for path in sorted((ROOT / "notebooks" / "mesa").glob("*.md")):
        assert not re.search(r"=\s*seed_everything\(", path.read_text()), path.name


#: the one place integer offsets and spawn keys may be written
_ALLOWED = {"src/companion/seeds.py"}
_OFFSET = re.compile(r"\bseed\s*\+\s*\d|default_rng\(\[|1_000_003|10_000_019")


def test_no_unnamed_seed_offset_in_the_package_or_the_notebooks():
    files = [*(ROOT / "src" / "companion").rglob("*.py"), *(ROOT / "notebooks").rglob("*.md")]
    hits = []
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        if rel in _ALLOWED:
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _OFFSET.search(code) and "``" not in code:
                hits.append(f"{rel}:{i}: {line.strip()}")
    assert not hits, "seed offsets outside companion.seeds (name the stream there):\n" + "\n".join(hits)
