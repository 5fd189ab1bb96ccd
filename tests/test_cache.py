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
