"""What ``zstrings`` prints when something is wrong (issue 36, items 9-11): usage errors with URL
secrets redacted, the CLI's own words (``--overwrite``) for an existing target, local permission
problems and read-only file systems named as such, ``--traceback`` keeping the exit code, and
``info`` naming NC_CHAR ``char`` as ncdump does whatever the Zarr version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xr_zstrings.cli import main
from xr_zstrings.sample import sample_path

#: a URL whose userinfo is an AWS-style key pair (the secret holds a '/', as 40% of AWS secrets do)
KEY, SECRET = "AKIAEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRET"
URL = f"s3://{KEY}:{SECRET}@bucket/obs.zarr"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _no_secret(text: str) -> None:
    assert SECRET not in text and SECRET.split("/")[-1] not in text and KEY not in text, text


# ---------------------------------------------------------------------------------------------
# item 9: argparse's usage errors go through the one redaction
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    [URL],  # the URL where the command goes: "invalid choice: '...'"
    ["migrate", "a.zarr", "b.zarr", URL],  # one argument too many: "unrecognized arguments: ..."
    ["convert", "a.zarr", "b.zarr", "--format", URL],  # a subcommand's parser: "invalid choice"
    ["dump", "a.zarr", "--limit", URL],  # "invalid int value: '...'"
], ids=["invalid-command", "unrecognized-argument", "subcommand-choice", "subcommand-type"])
def test_usage_errors_redact_url_secrets(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2
    _no_secret(out + err)
    assert err.startswith("usage: zstrings") and "zstrings" in err.splitlines()[-1]
    assert "s3://***@bucket/obs.zarr" in err  # the URL is still recognisable, its secret gone


def test_usage_error_in_a_real_process_redacts_and_exits_2():
    proc = subprocess.run([sys.executable, "-m", "xr_zstrings", URL], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    _no_secret(proc.stdout + proc.stderr)
    assert "invalid choice: 's3://***@bucket/obs.zarr'" in proc.stderr


# ---------------------------------------------------------------------------------------------
# item 10: the CLI's words, local causes, --traceback
# ---------------------------------------------------------------------------------------------


def test_migrate_to_an_existing_dst_names_overwrite(tmp_path, capsys):
    src, dst = tmp_path / "s.zarr", tmp_path / "v3.zarr"
    shutil.copytree(sample_path(), src)
    assert run(capsys, "migrate", str(src), str(dst))[0] == 0
    code, _, err = run(capsys, "migrate", str(src), str(dst))
    assert code == 2
    assert err == f"zstrings: error: DST {dst} exists; pass --overwrite to replace it, or choose another DST.\n"
    # the same words as convert's for an existing target (docs/cli.md, "Messages")
    code, _, err_convert = run(capsys, "convert", str(src), str(dst))
    assert code == 2 and err_convert == err


def test_migrate_to_an_existing_s3_dst_names_overwrite(s3, tmp_path, capsys, monkeypatch):
    from s3_server import KEY as S3_KEY
    from s3_server import REGION
    from s3_server import SECRET as S3_SECRET

    for name, value in (("AWS_ENDPOINT_URL", s3.endpoint), ("AWS_ACCESS_KEY_ID", S3_KEY),
                        ("AWS_SECRET_ACCESS_KEY", S3_SECRET), ("AWS_REGION", REGION), ("AWS_ALLOW_HTTP", "true")):
        monkeypatch.setenv(name, value)
    dst = f"s3://{s3.bucket('messages')}/v3.zarr"
    assert run(capsys, "migrate", str(sample_path()), dst)[0] == 0
    code, _, err = run(capsys, "migrate", str(sample_path()), dst)  # the writer's refusal, translated
    assert code == 2
    assert err == f"zstrings: error: DST {dst} exists; pass --overwrite to replace it, or choose another DST.\n"
    assert run(capsys, "migrate", str(sample_path()), dst, "--overwrite")[0] == 0


def test_migrate_overwrite_refuses_a_folder_of_user_files_in_cli_words(tmp_path, capsys):
    src, notes = tmp_path / "s.zarr", tmp_path / "notes"
    shutil.copytree(sample_path(), src)
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    code, _, err = run(capsys, "migrate", str(src), str(notes), "--overwrite")
    assert code == 2
    assert "even with --overwrite" in err and "todo.txt" in err
    assert "mode=" not in err and "append_dim" not in err
    assert (notes / "todo.txt").read_text() == "keep me" and sorted(os.listdir(notes)) == ["todo.txt"]


def test_traceback_shows_the_traceback_and_keeps_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "--traceback", "info", str(tmp_path / "missing.zarr"))
    assert code == 2
    assert "Traceback (most recent call last)" in err and "StoreNotFoundError" in err
    assert err.rstrip("\n").splitlines()[-1].startswith("zstrings: error: No ")
    code, _, err = run(capsys, "--traceback", "info", URL)  # a URL with credentials: refused
    assert code == 2 and "Traceback (most recent call last)" in err
    _no_secret(err)


def _zstrings(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xr_zstrings", *argv], capture_output=True, text=True,
                          timeout=300, check=False, cwd=cwd)


def _as_an_unprivileged_owner() -> list[str]:
    """A command prefix under which file modes apply: as root, root without the capabilities that
    override them (setpriv drops them from the bounding set, so the exec'd Python lacks them)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux's setpriv: file modes cannot be made to apply")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def test_local_permission_error_names_the_path_and_no_credentials(tmp_path):
    src = tmp_path / "s.zarr"
    shutil.copytree(sample_path(), src)
    other = tmp_path / "other.zarr"
    shutil.copytree(sample_path(), other)
    chunk, group = src / "station" / "0", other / ".zgroup"
    locked = tmp_path / "locked"
    locked.mkdir()
    chunk.chmod(0)
    group.chmod(0)
    locked.chmod(0o555)
    try:
        zstrings = [*_as_an_unprivileged_owner(), sys.executable, "-m", "xr_zstrings"]
        runs = {
            "dump": [*zstrings, "dump", str(src)],
            "migrate": [*zstrings, "migrate", str(src), str(locked / "v3.zarr")],
            "repair": [*zstrings, "repair", str(other)],
        }
        results = {k: subprocess.run(v, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
                   for k, v in runs.items()}
    finally:
        chunk.chmod(0o644)
        group.chmod(0o644)
        locked.chmod(0o755)
    dump, migrate, repair = results["dump"], results["migrate"], results["repair"]
    assert dump.returncode == 2, dump.stderr
    assert f"permission denied on the local path '{chunk}'" in dump.stderr
    assert "local file permission problem" in dump.stderr
    assert repair.returncode == 2, repair.stderr
    assert f"permission denied on the local path '{group}'" in repair.stderr
    assert not repair.stderr.startswith("zstrings: error: [Errno"), repair.stderr
    for proc in (dump, migrate, repair):
        assert "credentials" not in proc.stderr and "AWS_" not in proc.stderr and "bucket" not in proc.stderr
    assert migrate.returncode == 2, migrate.stderr
    assert f"Cannot write to {locked / 'v3.zarr'}" in migrate.stderr
    assert f"permission denied on the local path '{locked / '.v3.zarr.zstrings-lock'}'" in migrate.stderr
    assert sorted(os.listdir(locked)) == []


def _on_a_read_only_mount(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``zstrings ARGV`` with ``tmp_path/ro`` a read-only bind mount of ``tmp_path/rw`` (in a user and
    mount namespace of its own: no privilege needed, nothing left mounted)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux's unshare is not installed: no read-only file system to test on")
    probe = subprocess.run([unshare, "-rm", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here ({probe.stderr.strip()}): no read-only mount")
    (tmp_path / "ro").mkdir(exist_ok=True)
    script = 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"'
    return subprocess.run([unshare, "-rm", "sh", "-c", script, "sh", str(tmp_path / "rw"), str(tmp_path / "ro"),
                           sys.executable, "-m", "xr_zstrings", *argv], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)


def test_read_only_file_system_is_named_and_read_commands_need_no_lock(tmp_path):
    shutil.copytree(sample_path(), tmp_path / "rw" / "s.zarr")
    ro = tmp_path / "ro" / "s.zarr"
    for command in (["check", str(ro)], ["info", str(ro)], ["dump", str(ro)], ["show", str(ro)]):
        proc = _on_a_read_only_mount(tmp_path, *command)
        assert proc.returncode == 0, (command, proc.stderr)  # no lock file, nothing written
        assert proc.stderr == "", (command, proc.stderr)
    for command in (["migrate", str(ro)], ["repair", str(ro)], ["convert", str(sample_path()), str(tmp_path / "ro" / "n.zarr")]):
        proc = _on_a_read_only_mount(tmp_path, *command)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "is on a read-only file system" in proc.stderr, proc.stderr
        target = command[-1]
        assert f"Cannot write to {target}" in proc.stderr, proc.stderr
    assert sorted(os.listdir(tmp_path / "rw")) == ["s.zarr"]


# ---------------------------------------------------------------------------------------------
# item 11: NC_CHAR is `char` in info, as ncdump names it, in every Zarr version
# ---------------------------------------------------------------------------------------------


def _declaration(cdl: str, name: str) -> str:
    """The declaration line of variable ``name`` in a CDL header, without its comment."""
    for line in cdl.splitlines():
        words = line.split(" //")[0].strip()
        if words.endswith(" ;") and f" {name}(" in words and ":" not in words:
            return words
    raise AssertionError(f"no declaration of {name} in:\n{cdl}")


@pytest.mark.skipif(shutil.which("ncdump") is None, reason="ncdump (Debian's netcdf-bin) is not installed; "
                    ".ci/run installs it")
def test_info_names_nc_char_char_as_ncdump_does_for_zarr_v3(tmp_path, capsys):
    nc, v3 = tmp_path / "s.nc", tmp_path / "s3.zarr"
    assert run(capsys, "convert", str(sample_path()), str(nc), "-q")[0] == 0
    ncdump = subprocess.run(["ncdump", "-h", str(nc)], capture_output=True, text=True, check=True).stdout
    assert run(capsys, "migrate", str(sample_path()), str(v3))[0] == 0
    code, out, _ = run(capsys, "info", str(v3))
    assert code == 0
    assert _declaration(out, "code") == _declaration(ncdump, "code") == "char code(station, code_len) ;"
    assert "xr_zstrings.nc_char code" not in out


def test_an_unexpected_exception_is_redacted_and_exits_3(capsys, monkeypatch):
    """A bug (an exception no command expects) still prints nothing secret: its traceback and line
    go through the one redaction, and its exit code (3) is neither 'problems' (1) nor bad input (2)."""
    from xr_zstrings.cli import info

    def boom(args):
        raise RuntimeError(f"unexpected while reading {URL}")

    monkeypatch.setattr(info, "_cmd_info", boom)
    code, out, err = run(capsys, "info", str(sample_path()))
    assert code == 3
    _no_secret(out + err)
    assert "Traceback (most recent call last)" in err and "RuntimeError" in err
    assert err.splitlines()[-1].startswith("zstrings: internal error: unexpected while reading s3://***@bucket")
