"""The ns-3 module's CMakeLists.txt (for an ns-3 source tree's contrib/) lists exactly what build.py
compiles against the pip wheel, so the two builds cannot drift apart."""
from __future__ import annotations

import re

from netbackend.ns3.build import MODULE_DIR, NS3_MODULES, _sources


def _listed(text: str, section: str) -> set[str]:
    m = re.search(section + r"\s+(.*?)\n\s*(?:[A-Z_]+\s*\n|\))", text, re.S)
    assert m, section
    return set(m.group(1).split())


def test_cmakelists_lists_every_source_header_and_test():
    text = (MODULE_DIR / "CMakeLists.txt").read_text()
    lib, tests, examples, headers = _sources()
    rel = lambda paths: {str(p.relative_to(MODULE_DIR)) for p in paths}  # noqa: E731
    assert _listed(text, "SOURCE_FILES") == rel(lib)
    assert _listed(text, "HEADER_FILES") == rel(headers)
    # ns-3's own test runner replaces build.py's test main in a source tree
    assert _listed(text, "TEST_SOURCES") == rel(tests) - {"test/test-runner-main.cc"}
    assert _listed(text, "LIBRARIES_TO_LINK") == {"${lib" + m + "}" for m in NS3_MODULES}
    ex = (MODULE_DIR / "examples" / "CMakeLists.txt").read_text()
    assert set(re.findall(r"SOURCE_FILES\s+(\S+)", ex)) == {p.name for p in examples}
