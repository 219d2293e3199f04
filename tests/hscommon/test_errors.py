"""UserError's one line keeps both ends of a long value: a long path still names its file."""
from hscommon.errors import UserError


def test_a_long_path_keeps_its_file_name():
    path = "/tmp/" + "a" * 120 + "/mine/figure3.png"
    line = str(UserError("exists and was not written by HeteroSim", field="--png", value=path))
    assert "figure3.png'" in line and line.startswith("--png = '/tmp/aaa")
    assert "..." in line and len(line.split(": ")[0]) <= len("--png = ") + 80
    assert "\n" not in line


def test_a_short_value_is_whole():
    assert str(UserError("bad", field="x", value=3)) == "x = 3: bad"
