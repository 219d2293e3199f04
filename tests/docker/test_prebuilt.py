"""HETEROSIM_NS3_PREBUILT: the image's runtime stage has no compiler and no ns-3 headers, and
uses the module compiled in the builder stage only if it was built from these very sources."""
from __future__ import annotations

import json

import pytest

from hscommon.errors import UserError
from netbackend.ns3 import build


def _fake_build(root, info):
    (root / "include" / "ns3").mkdir(parents=True)
    (root / build.LIB_NAME).write_bytes(b"\x7fELF")
    (root / build.TEST_BIN).write_bytes(b"\x7fELF")
    for ex in build._sources()[2]:  # the example programs, named after their sources
        (root / ex.stem).write_bytes(b"\x7fELF")
    (root / "include" / "ns3" / build.FACADE_HEADER).write_text("// facade\n")
    (root / build.BUILD_INFO).write_text(json.dumps(info))


def _files():
    lib, tests, examples, headers = build._sources()
    return lib + tests + examples + headers


def test_prebuilt_is_used_without_a_compiler(tmp_path, monkeypatch):
    pre = tmp_path / "prebuilt"
    _fake_build(pre, build._build_info(_files()))
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setenv("HETEROSIM_NS3_PREBUILT", str(pre))
    got = build.ensure_built()
    assert got.root == pre and got.library == pre / build.LIB_NAME
    assert got.facade_header == pre / "include" / "ns3" / build.FACADE_HEADER


@pytest.mark.parametrize("field", ["sources_sha256", "ns3_version", "ns3_prefix"])
def test_prebuilt_from_other_sources_or_wheel_is_refused(tmp_path, monkeypatch, field):
    info = build._build_info(_files())
    info[field] = "something else"
    pre = tmp_path / "prebuilt"
    _fake_build(pre, info)
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setenv("HETEROSIM_NS3_PREBUILT", str(pre))
    with pytest.raises(UserError) as ei:
        build.ensure_built()
    assert "g++" in str(ei.value) and "\n" not in str(ei.value)


def test_sources_digest_changes_with_a_source(tmp_path, monkeypatch):
    """The digest covers file names and contents: a copy matches, an edited copy does not."""
    import shutil

    before = build._build_info(_files())["sources_sha256"]
    copy = tmp_path / "heterosim-rdma"
    shutil.copytree(build.MODULE_DIR, copy)
    monkeypatch.setattr(build, "MODULE_DIR", copy)
    files = _files()
    assert files and all(copy in f.parents for f in files)
    assert build._build_info(files)["sources_sha256"] == before
    files[0].write_bytes(files[0].read_bytes() + b"\n// edited\n")
    assert build._build_info(files)["sources_sha256"] != before
