"""What a plain `pip install stream-osc` brings: enough to log in to MySQL 8 with its default plugin."""
import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_caching_sha2_password_logins_need_no_extra_install():
    """PyMySQL needs `cryptography` (its `rsa` extra) for caching_sha2_password over a plain connection."""
    runtime = [dep.replace(" ", "") for dep in PYPROJECT["project"]["dependencies"]]
    assert any(dep.startswith("PyMySQL[rsa]") for dep in runtime), runtime
