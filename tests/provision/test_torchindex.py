"""The torch step's own uv configuration (provision/torchindex.py) and the reading of uv's index failures
(provision/uvfail.py), against the texts uv 0.13 prints (captured from it against tests/indexserver.py)."""

from __future__ import annotations

import tomllib

from indexserver import _Quiet
from mw_env.provision.torchindex import PYPI, config_text, step_env, step_indexes
from mw_env.provision.uvfail import index_failure

AMD = "https://repo.amd.com/rocm/whl-multi-arch/"


def test_the_torch_index_comes_first_with_its_403_ignored_then_the_users_extras_then_the_default():
    env = {
        "UV_INDEX": "mirror=https://m.example/simple https://x.example/simple",
        "UV_DEFAULT_INDEX": "https://d/",
    }
    ixs = step_indexes(
        torch_index=AMD, torch_name="amd-multiarch", unserved=403, env=env, extra_index_urls=["https://p/"]
    )
    assert [(i.name, i.url, i.role) for i in ixs] == [
        ("amd-multiarch", AMD, "torch"),
        ("mirror", "https://m.example/simple", "extra"),
        ("extra-2", "https://x.example/simple", "extra"),
        ("extra-3", "https://p/", "extra"),
        ("default", "https://d/", "default"),
    ]
    data = tomllib.loads(config_text(ixs))
    assert data["index-strategy"] == "first-index"
    assert data["index"][0] == {"name": "amd-multiarch", "url": AMD, "ignore-error-codes": [403]}
    assert data["index"][-1] == {"name": "default", "url": "https://d/", "default": True}
    assert all("ignore-error-codes" not in ix for ix in data["index"][1:])


def test_an_index_that_answers_404_gets_uvs_default_and_no_user_default_means_pypi():
    ixs = step_indexes(torch_index="https://download.example/cpu", torch_name="cpu", unserved=404, env={})
    assert ixs[0].ignore_codes == () and "answers 404" in ixs[0].behaviour
    assert ixs[-1].url == PYPI and ixs[-1].origin == "uv's default"
    # A wheelhouse holds torch: no torch index, the default still answers torch's dependencies.
    assert [i.role for i in step_indexes(torch_index=None, torch_name="x", unserved=403, env={})] == [
        "default"
    ]


def test_a_url_with_quotes_or_credentials_is_a_valid_toml_string():
    url = 'https://u:t%22@h.example/simple/"x'
    data = tomllib.loads(config_text(step_indexes(torch_index=url, torch_name="a", unserved=403, env={})))
    assert data["index"][0]["url"] == url


def test_the_variables_that_would_reorder_the_indexes_or_the_strategy_are_not_passed_to_uv():
    env = {
        "UV_INDEX": "a",
        "UV_EXTRA_INDEX_URL": "b",
        "UV_DEFAULT_INDEX": "c",
        "UV_INDEX_URL": "d",
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_CONFIG_FILE": "/etc/mine.toml",
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": "/cache",
    }
    assert step_env(env) == {"UV_CACHE_DIR": "/cache"}


IXS = step_indexes(
    torch_index="http://127.0.0.1:4/ma/",
    torch_name="amd-multiarch",
    unserved=404,
    env={"UV_DEFAULT_INDEX": "http://127.0.0.1:4/pypi/"},
)

# uv 0.13.9's own output (tests/indexserver.py, the AMD index as a plain --index; 401 and 500 answers).
UV_403 = """error: No solution found when resolving dependencies
  cause: Because setuptools was not found in the package registry and all versions of torch depend on setuptools, we can conclude that all versions of torch cannot be used.
         And because you require torch[device-gfx1103]==2.14.0+rocm7.14.0, we can conclude that your requirements are unsatisfiable.

hint: An index (http://127.0.0.1:4/ma/) returned a 403 Forbidden error, but uv received a successful response from another request to the index. If the failing package is not present on this index, consider adding `ignore-error-codes = [403]` to the index's `[[tool.uv.index]]` entry to continue searching across indexes.
"""
UV_401 = """error: No solution found when resolving dependencies
  cause: Because there is no version of torch[device-gfx1103]==2.14.0+rocm7.14.0 and you require torch[device-gfx1103]==2.14.0+rocm7.14.0, we can conclude that your requirements are unsatisfiable.

hint: An index URL (http://127.0.0.1:4/ma/) could not be queried due to a lack of valid authentication credentials (401 Unauthorized)
"""
UV_500 = """error: Request failed after 3 retries in 8.3s
  cause: Failed to fetch: http://127.0.0.1:4/pypi/filelock/
  cause: HTTP status server error (500 Internal Server Error) for url (http://127.0.0.1:4/pypi/filelock/)
"""
UV_DNS = """error: Request failed after 3 retries in 6.0s
  cause: Failed to fetch: http://nonexistent.invalid/simple/torch/
  cause: error sending request for url (http://nonexistent.invalid/simple/torch/)
  cause: client error (Connect)
  cause: dns error
  cause: failed to lookup address information: Name or service not known
"""


def test_uvs_403_names_the_index_the_project_and_the_cure():
    f = index_failure(UV_403, IXS)
    assert f is not None and (f.name, f.project, f.status) == ("amd-multiarch", "setuptools", "403")
    assert f.message == "the index amd-multiarch (http://127.0.0.1:4/ma/) answered HTTP 403 for setuptools"
    assert "ignore-error-codes = [403]" in f.hint


def test_uvs_401_500_and_dns_failures_are_named():
    f401, f500, fdns = (index_failure(t, IXS) for t in (UV_401, UV_500, UV_DNS))
    assert f401 is not None and (f401.status, f401.project, f401.name) == ("401", "torch", "amd-multiarch")
    assert "wants credentials for torch" in f401.hint
    assert f500 is not None and (f500.status, f500.project, f500.name) == ("500", "filelock", "default")
    assert f500.message == "the index default (http://127.0.0.1:4/pypi/) answered HTTP 500 for filelock"
    assert (
        fdns is not None
        and fdns.status == "DNS"
        and fdns.message.endswith("could not be resolved (DNS) for torch")
    )


def test_a_resolution_failure_that_is_not_an_index_is_left_to_the_generic_reading():
    text = "error: No solution found when resolving dependencies\n  cause: Because there is no version of torch==9\n"
    assert index_failure(text, IXS) is None


def test_a_client_that_hangs_up_prints_no_traceback(capsys):
    server = _Quiet.__new__(_Quiet)  # handle_error reads nothing of the server but the exception
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
