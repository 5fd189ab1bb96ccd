from companion import cache

CALLS = []


def square(x, *, offset=0):
    CALLS.append(x)
    return x * x + offset


def test_cached_runs_once_per_argument_set(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path))
    CALLS.clear()
    f = cache.cached(square)
    assert f(3) == 9 and f(3) == 9 and f(3, offset=1) == 10
    assert CALLS == [3, 3]
    assert cache.cache_dir() == tmp_path / cache.source_hash()
    assert any(cache.cache_dir().iterdir())


def test_a_package_function_is_cached_under_the_hash_of_its_own_import_closure(tmp_path, monkeypatch):
    """The cot training runs (``cot.train``) are kept when the mesa code or the site changes, and dropped when
    any code they can run changes."""
    from companion import stats

    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path))
    assert cache.cached(stats.combine)(3.0, 4.0) == 5.0
    assert [p.name for p in tmp_path.iterdir()] == ["stats-" + cache.source_hash(cache.import_closure("companion.stats"))]
    closure = cache.import_closure("companion.cot.train")
    assert {"cot/train.py", "cot/model.py", "cache.py", "stats.py"} <= set(closure)
    assert not any(f.startswith(("mesa/", "site/", "run/")) for f in closure)


def test_cache_off_always_computes(monkeypatch):
    monkeypatch.setenv("COMPANION_CACHE_DIR", "off")
    CALLS.clear()
    f = cache.cached(square)
    f(2), f(2)
    assert CALLS == [2, 2] and cache.cache_dir() is None


def test_source_hash_is_stable_hex():
    h = cache.source_hash()
    assert len(h) == 16 and int(h, 16) >= 0 and h == cache.source_hash()


def test_hash_changes_with_contents_and_names(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    h1 = cache.hash_files(tmp_path, [a])
    a.write_text("x = 2\n")
    h2 = cache.hash_files(tmp_path, [a])
    b = tmp_path / "b.py"
    b.write_text("x = 2\n")
    assert h1 != h2 and h2 != cache.hash_files(tmp_path, [b])


def test_import_closure_follows_relative_and_absolute_imports():
    closure = cache.import_closure("companion.mesa.train")
    # train imports the model, which imports the kernels; every package __init__ on the way runs too
    for f in ("mesa/train.py", "mesa/model.py", "mesa/lanes/host.py", "mesa/data.py", "params.py",
              "__init__.py", "mesa/__init__.py"):
        assert f in closure, f
    assert not any(f.startswith("cot/") for f in closure)
    # relative imports (``from . import notebooks``, ``from .verdict import slug``) are followed too
    book_closure = cache.import_closure("companion.site.book")
    for f in ("notebooks.py", "paths.py", "verdict.py"):
        assert f in book_closure, f


def test_a_files_imports_are_read_once_per_modification(tmp_path, monkeypatch):
    """The closures share their files: each file's imports are parsed once per process, and again once it changes
    (its modification time is part of the key), so an edited module's new import is followed."""
    import os

    f = tmp_path / "mod.py"
    f.write_text("import json\n")
    parsed = []
    real = cache.module_imports
    monkeypatch.setattr(cache, "module_imports", lambda p, m: parsed.append(p) or real(p, m))
    first = cache._imports_of(f, "companion.fake", f.stat().st_mtime_ns)
    assert cache._imports_of(f, "companion.fake", f.stat().st_mtime_ns) == first and len(parsed) == 1
    f.write_text("import json\nfrom .threads import threads1\n")
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    again = cache._imports_of(f, "companion.fake", f.stat().st_mtime_ns)
    assert len(parsed) == 2 and ("companion.threads", ["threads1"], 2, False) in again


def test_run_cache_is_keyed_on_everything_training_imports():
    from companion.mesa import train

    assert set(train.RUN_SOURCES) == set(cache.import_closure("companion.mesa.train"))


def test_run_cache_key_ignores_prose_but_not_code(tmp_path):
    """The key of the run cache is the code: a docstring or comment edited in a copy of mesa/train.py keeps
    it, a changed constant changes it (a key on the raw bytes re-trained every paper run after a typo fix)."""
    from pathlib import Path

    from companion.mesa import train

    text = Path(train.__file__).read_text()
    f = tmp_path / "train.py"
    f.write_text(text)
    key = cache.hash_files(tmp_path, [f])
    assert text.startswith('"""') and "\nimport" in text
    f.write_text('"""A fixed typo. ' + text[3:].replace("\nimport", "\n# a new comment\n\nimport", 1))
    assert cache.hash_files(tmp_path, [f]) == key
    assert "    lr: float = 1e-4\n" in text
    f.write_text(text.replace("    lr: float = 1e-4\n", "    lr: float = 2e-4\n", 1))
    assert cache.hash_files(tmp_path, [f]) != key
    f.write_text(text + "\nEXTRA = 1\n")
    assert cache.hash_files(tmp_path, [f]) != key


def test_key_includes_the_stack_and_the_kernel_cpu(monkeypatch, tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    key = cache.hash_files(tmp_path, [a])
    sig = cache.stack_signature()
    assert "cpu=" in sig and "numba==" in sig and "llvmlite==" in sig
    monkeypatch.setattr(cache, "stack_signature", lambda: sig.replace("cpu=", "cpu=other-"))
    assert cache.hash_files(tmp_path, [a]) != key


def _slow_logged(x, log):
    """Appends a line to ``log`` per call (so calls in other processes are counted), then takes a while."""
    import time

    with open(log, "a") as fh:
        fh.write(f"{x}\n")
    time.sleep(1.0)
    return x + 1


def _call_cached(args):
    import os

    loc, x, log = args
    os.environ["COMPANION_CACHE_DIR"] = loc
    return cache.cached(_slow_logged)(x, log)


def test_concurrent_misses_compute_once(tmp_path):
    """Two processes that miss on the same key at the same time: one computes, the other waits for its lock
    and reads the stored result (two pages of a build sharing a training run); another key is not blocked."""
    import multiprocessing as mp

    log = tmp_path / "calls.log"
    jobs = [(str(tmp_path / "c"), 5, str(log)), (str(tmp_path / "c"), 5, str(log)), (str(tmp_path / "c"), 6, str(log))]
    with mp.get_context("fork").Pool(3) as pool:
        assert pool.map(_call_cached, jobs) == [6, 6, 7]
    assert sorted(log.read_text().split()) == ["5", "6"]


def test_a_cache_folder_is_current_when_its_module_closure_hashes_to_its_name(tmp_path, monkeypatch):
    """``is_current``: the name of a folder that ``cached`` writes now is current, the same module under another
    hash is not, a bare hash only when it is every source's; a name of no key is not judged (None)."""
    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path))
    stats_key = "stats-" + cache.source_hash(cache.import_closure("companion.stats"))
    assert cache.module_cache_dir("companion.stats") == tmp_path / stats_key
    assert cache.is_current(stats_key) is True
    assert cache.is_current("stats-0123456789abcdef") is False
    assert cache.is_current("mesa.train-" + cache.source_hash(cache.import_closure("companion.mesa.train"))) is True
    assert cache.is_current(cache.source_hash()) is True and cache.is_current("0123456789abcdef") is False
    assert cache.is_current("no.such.module-0123456789abcdef") is None
    assert cache.is_current("notes") is None and cache.is_current("stats-0123") is None
