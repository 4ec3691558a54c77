"""No secret leaks (issue 24): credentials in a URL are refused before any request, and a secret
planted in every URL form and in ``storage_options`` never appears in anything the package shows:
exception text (with its causes), warnings, log records, the command line's stdout and stderr, and
the reprs of what an open returns. Over a table of working and failing operations, against the moto
S3 server the other object-storage tests use.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import traceback
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from s3_server import REGION, S3Server

from xr_zstrings import StorePermissionError, ZStringsError, convert, read_arrow, to_nczarr, to_zarr_v3
from xr_zstrings.cli import main
from xr_zstrings.io.redact import has_credentials, redact
from xr_zstrings.io.store import open_store

SECRET = "PLANTED+sEcReT/0xZ9"  # '/' and '+' as in AWS secret keys: '/' ends a URL's authority early
TOKEN = "PLANTEDtoKen42"
KEY_ID = "AKIAPLANTEDKEY"
LEAKS = (SECRET, TOKEN, urllib.parse.quote(SECRET, safe=""), urllib.parse.quote(SECRET), "sEcReT")
BUCKET = "zstrings-redact"
DS = xr.Dataset({"s": ("x", np.array(["a", "bé"], dtype=np.dtypes.StringDType()))})


# ---------------------------------------------------------------------------------------------
# redact and has_credentials on their own
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("s3://AKIA:abc@bucket/x.zarr", "s3://***@bucket/x.zarr"),
    ("s3://AKIA:ab/c+d@bucket/x.zarr", "s3://***@bucket/x.zarr"),  # a '/' in the secret
    ("s3://TOKEN@bucket/x", "s3://***@bucket/x"),
    ("Cannot open 'https://u:p@host:9000/b/k#mode=nczarr,s3' now", "Cannot open 'https://***@host:9000/b/k#mode=nczarr,s3' now"),
    ("https://h/b/k?X-Amz-Signature=abc&X-Amz-Date=1&X-Amz-Credential=AKIA%2F1#mode=nczarr,s3",
     "https://h/b/k?X-Amz-Signature=***&X-Amz-Date=1&X-Amz-Credential=***#mode=nczarr,s3"),
    ("az://c/k?sv=2020&sig=abc&se=1", "az://c/k?sv=2020&sig=***&se=1"),
    ("s3://b/k?api_key=abc&token=def&password=ghi", "s3://b/k?api_key=***&token=***&password=***"),
    ("s3://b/k#mode=nczarr,s3&aws.region=eu-west-1", "s3://b/k#mode=nczarr,s3&aws.region=eu-west-1"),
    ("file:///data/a@b.zarr and /plain/path@x", "file:///data/a@b.zarr and /plain/path@x"),
    ("s3://bucket/key@v1.zarr", "s3://bucket/key@v1.zarr"),  # an '@' in a key is no userinfo
    ("no url here: user:pw@host", "no url here: user:pw@host"),
])
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_redact_masks_the_values_a_caller_knows() -> None:
    assert redact("failed: secret abcdef rejected", secrets=["abcdef", None, 3, "ab"]) == "failed: secret *** rejected"


@pytest.mark.parametrize(("url", "expected"), [
    ("s3://k:s@b/x", True), ("s3://k:s/x@b/x", True), ("s3://tok@b/x", True), ("https://u:p@h/b/k#mode=s3", True),
    ("file://u:p@localhost/x", True), ("s3://b/x", False), ("s3://b/k@1", False),
    ("https://h:9000/b/k@1#mode=nczarr,s3", False), ("/a/u:p@h", False), ("C:\\data\\x.zarr", False),
])
def test_has_credentials(url: str, expected: bool) -> None:
    assert has_credentials(url) is expected


# ---------------------------------------------------------------------------------------------
# The table: every URL form x every operation, nothing shown holds the secret
# ---------------------------------------------------------------------------------------------

FAST = {"timeout": 5, "connect_timeout": 2, "max_retries": 0, "retry_timeout": 1}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forms(ep: str, tmp: Path) -> dict[str, tuple[str, str]]:
    """name -> (URL with a secret in it, what happens: "refused" (credentials), "query" (refused: a
    URL query), "works" or "fails"); ``ep`` is the S3 server's endpoint."""
    return {
        "s3 user:password@": (f"s3://{KEY_ID}:{SECRET}@{BUCKET}/x.zarr", "refused"),
        "s3 token@": (f"s3://{TOKEN}@{BUCKET}/x.zarr", "refused"),
        "http path style user:password@": (f"{ep.replace('://', f'://{KEY_ID}:{SECRET}@')}/{BUCKET}/x.zarr#mode=nczarr,s3",
                                           "refused"),
        "https without mode fragment": (f"https://user:{SECRET}@example.invalid/x.zarr", "refused"),
        "file user:password@": (f"file://user:{SECRET}@localhost{tmp}/x.zarr", "refused"),
        "unsupported scheme": (f"gs://user:{SECRET}@{BUCKET}/x.zarr", "refused"),
        "s3 presigned query": (f"s3://{BUCKET}/x.zarr?X-Amz-Signature={SECRET}&X-Amz-Credential={TOKEN}", "query"),
        "http path style token query": (f"{ep}/{BUCKET}/x.zarr?token={SECRET}#mode=nczarr,s3", "query"),
        "s3 fragment password": (f"s3://{BUCKET}/x.zarr#mode=nczarr,s3&password={SECRET}", "works"),
        "missing key, sig query": (f"s3://{BUCKET}/missing.zarr?sig={SECRET}", "query"),
        "missing bucket, token query": (f"s3://no-such-bucket-i24/x.zarr?X-Amz-Security-Token={SECRET}", "query"),
        "missing key": (f"s3://{BUCKET}/missing.zarr#mode=nczarr,s3&sig={SECRET}", "fails"),
    }


def _renamed(url: str, name: str) -> str:
    return url.replace("/x.zarr", f"/{name}").replace("/missing.zarr", f"/{name}")


def _api(url: str, opts: dict[str, Any], tmp: Path, name: str) -> dict[str, Callable[[], list[str]]]:
    """operation -> a call that returns the reprs it can show (raising is fine too)."""

    def opened() -> list[str]:
        ds = xr.open_dataset(url, engine="zstrings", storage_options=opts).load()
        assert ds["s"].values.tolist() == ["a", "bé"]
        return [repr(ds), repr(ds.encoding), *(repr(v.encoding) for v in ds.variables.values()),
                repr(ds["s"].variable._data)]

    def tree() -> list[str]:
        t = xr.open_datatree(url, engine="zstrings", storage_options=opts)
        return [repr(t), repr(xr.open_groups(url, engine="zstrings", storage_options=opts))]

    def store() -> list[str]:
        zs = open_store(url, storage_options=opts)
        return [repr(zs), zs.display, repr(zs.store)]

    def write() -> list[str]:
        to_nczarr(DS, _renamed(url, f"w-{name}.zarr"), mode="w", storage_options=opts)
        return []

    def write_exclusive() -> list[str]:
        to_nczarr(DS, url, mode="w-", storage_options=opts)  # exists (or cannot be reached)
        return []

    def add_to_missing() -> list[str]:
        to_nczarr(DS.rename(s="t"), _renamed(url, f"none-{name}.zarr"), mode="a", storage_options=opts)
        return []

    def v3() -> list[str]:
        dst = _renamed(url, f"v3-{name}.zarr")
        to_zarr_v3(DS, dst, mode="w", storage_options=opts)
        return [repr(read_arrow(dst, "s", storage_options=opts))]

    def convert_from() -> list[str]:
        convert(url, tmp / f"c-{name}.zarr")
        return []

    return {"open_dataset": opened, "open_datatree/open_groups": tree, "open_store": store, "to_nczarr": write,
            "to_nczarr w-": write_exclusive, "to_nczarr a": add_to_missing, "to_zarr_v3/read_arrow": v3,
            "convert": convert_from}


def _cli(url: str, tmp: Path, name: str) -> dict[str, list[str]]:
    """command -> argv; the reading ones first (the writing ones may create the URL's store)."""
    local = str(tmp / f"local-{name}.zarr")
    return {"info": ["info", url], "dump": ["dump", url], "check": ["check", url], "show": ["show", url],
            "convert from": ["convert", url, str(tmp / f"cli-{name}.zarr"), "-q"],
            "convert --overwrite": ["convert", local, _renamed(url, f"cli-{name}.zarr"), "--overwrite"],
            "convert onto": ["convert", local, url]}


def _commands(argvs: dict[str, list[str]], capsys: pytest.CaptureFixture[str]) -> dict[str, Callable[[], list[str]]]:
    """Each command as a call that returns its stdout and stderr, or raises with them."""

    def command(argv: list[str]) -> list[str]:
        capsys.readouterr()
        code = main(argv)
        out, err = capsys.readouterr()
        if code != 0:
            raise ZStringsError(f"exit {code}\n{out}\n{err}")
        return [out, err]

    return {f"zstrings {op}": (lambda a: lambda: command(a))(argv) for op, argv in argvs.items()}


def _shown(exc: BaseException | None) -> list[str]:
    return [] if exc is None else ["".join(traceback.format_exception(exc)), repr(exc)]


@contextlib.contextmanager
def _everything_shown(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """Collects warnings and log records (and whatever the caller adds)."""
    out: list[str] = []
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        yield out
    out += [str(w.message) for w in caught]
    out += [r.getMessage() for r in caplog.records if not r.name.startswith(_HARNESS_LOGGERS)]


#: the S3 server (moto runs in this process and logs each request it receives, headers included)
#: and the boto3 client the fixtures create buckets with: not ours to show
_HARNESS_LOGGERS = ("moto", "werkzeug", "botocore", "boto3", "urllib3")


@pytest.fixture(scope="module")
def stores(s3: S3Server) -> None:
    s3.bucket(BUCKET)
    to_nczarr(DS, f"s3://{BUCKET}/x.zarr", mode="w", storage_options=s3.options())


def _leaks(texts: list[str]) -> list[str]:
    return [t for t in texts for leak in LEAKS if leak in t]


@pytest.mark.parametrize("form", list(_forms("http://h:1", Path("/t"))))
def test_no_secret_in_any_output(s3: S3Server, stores: None, tmp_path: Path, form: str,
                                 caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, expect = _forms(s3.endpoint, tmp_path)[form]
    name = "".join(c if c.isalnum() else "-" for c in form)
    opts = {**s3.options(key=KEY_ID, secret=SECRET, token=TOKEN), **FAST}
    # the command line (and convert's source) take credentials from the environment
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    monkeypatch.setenv("AWS_REGION", REGION)
    to_nczarr(DS, tmp_path / f"local-{name}.zarr")
    outcomes: dict[str, BaseException | None] = {}
    with _everything_shown(caplog) as collected:
        api = _api(url, opts, tmp_path, name)
        reads = {op: api.pop(op) for op in ("open_dataset", "open_datatree/open_groups", "open_store")}
        for op, call in [*reads.items(), *_commands(_cli(url, tmp_path, name), capsys).items(), *api.items()]:
            try:
                collected += call()
                outcomes[op] = None
            except Exception as e:  # what it shows is the point
                outcomes[op] = e
                collected += _shown(e)
    assert not _leaks(collected), f"{form}: the secret is shown in {_leaks(collected)[:1]}"
    if expect == "refused":  # before any request: the refusal itself, never a store error
        for op, e in outcomes.items():
            assert e is not None and "holds credentials" in str(e) and "storage_options" in str(e), (op, e)
        # (a file:// URL's userinfo was taken for a path: the writers made the folder /user:PLANTED+...)
        assert not Path(f"/user:{SECRET.split('/')[0]}").exists()
    elif expect == "query":  # refused before any request too: a query would be ignored
        for op, e in outcomes.items():
            assert e is not None and "has a query" in str(e) and "storage_options" in str(e), (op, e)
    elif expect == "works":
        assert outcomes["open_dataset"] is None and outcomes["to_zarr_v3/read_arrow"] is None
        assert outcomes["zstrings check"] is None and outcomes["zstrings convert from"] is None
        assert isinstance(outcomes["to_nczarr w-"], ZStringsError)  # exists
    else:
        assert isinstance(outcomes["open_dataset"], ZStringsError)
        assert isinstance(outcomes["zstrings info"], ZStringsError)


@pytest.mark.parametrize("url", ["s3://b/x.zarr?versionId=3", "s3://b/x.zarr?versionId=3#mode=nczarr,s3",
                                 "https://h/b/x.zarr?versionId=3#mode=nczarr,s3", "file://{tmp}/x.zarr?versionId=3"])
def test_url_query_refused_before_any_request(url: str, tmp_path: Path) -> None:
    """A query would be ignored (an object version read as the newest one): refused, for reads and
    writes, before any request (the endpoint has no server: a request would fail differently)."""
    url = url.format(tmp=tmp_path)
    opts = {"endpoint_url": f"http://127.0.0.1:{_free_port()}", "key": KEY_ID, "secret": SECRET, **FAST}
    for call in (lambda: xr.open_dataset(url, engine="zstrings", storage_options=opts),
                 lambda: to_nczarr(DS, url, mode="w", storage_options=opts),
                 lambda: to_zarr_v3(DS, url, mode="w", storage_options=opts)):
        with pytest.raises(ZStringsError, match=r"has a query .* Remove the query"):
            call()
    assert list(tmp_path.iterdir()) == []  # the file:// form wrote nothing, under either name


def test_question_mark_in_a_plain_path_is_a_name(tmp_path: Path) -> None:
    """Only URLs have queries: a local folder named with a '?' is written and read as named."""
    to_nczarr(DS, tmp_path / "a?b.zarr")
    assert xr.open_dataset(str(tmp_path / "a?b.zarr"), engine="zstrings")["s"].values.tolist() == ["a", "bé"]


def test_no_secret_from_storage_options_when_the_server_refuses_them(s3: S3Server, stores: None,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Wrong credentials (moto checking signatures): a permission error that names the fix and
    does not show the secret."""
    with s3.enforce_auth() as keys, _everything_shown(caplog) as collected:
        opts = {**s3.options(key=keys["admin"][0], secret=SECRET), **FAST}
        with pytest.raises(StorePermissionError) as e:
            xr.open_dataset(f"s3://{BUCKET}/x.zarr", engine="zstrings", storage_options=opts)
        collected += _shown(e.value)
    assert "credentials" in str(e.value)
    assert not _leaks(collected)


def test_no_secret_from_storage_options_when_there_is_no_server(caplog: pytest.LogCaptureFixture) -> None:
    opts = {"endpoint_url": f"http://127.0.0.1:{_free_port()}", "key": KEY_ID, "secret": SECRET, "token": TOKEN,
            "region": REGION, **FAST}
    with _everything_shown(caplog) as collected:
        for call in (lambda: xr.open_dataset("s3://b/x.zarr", engine="zstrings", storage_options=opts),
                     lambda: to_nczarr(DS, "s3://b/x.zarr", storage_options=opts),
                     lambda: open_store("s3://b/x.zarr", storage_options={**opts, "request_payer": SECRET})):
            with pytest.raises(ZStringsError) as e:
                call()
            collected += _shown(e.value)
    assert not _leaks(collected)
