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
    for f in ("mesa/train.py", "mesa/model.py", "mesa/kernels.py", "mesa/data.py", "params.py",
              "__init__.py", "mesa/__init__.py"):
        assert f in closure, f
    assert not any(f.startswith("cot/") for f in closure)
    # relative imports (``from . import notebooks``, ``from .verdict import slug``) are followed too
    book_closure = cache.import_closure("companion.book")
    for f in ("notebooks.py", "paths.py", "verdict.py"):
        assert f in book_closure, f


def test_run_cache_is_keyed_on_everything_training_imports():
    from companion.mesa import train

    assert set(train.RUN_SOURCES) == set(cache.import_closure("companion.mesa.train"))
