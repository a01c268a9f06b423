import pytest

from evalctl._plugin.registry import set_registry


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EVALCTL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    for name in ("EVALCTL_DISABLE_PLUGINS", "EVALCTL_STRICT_PLUGINS", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    set_registry(None)
    yield
    set_registry(None)
