"""A seeded mutator over the shipped inputs, and a fork server that runs each mutant through the real CLI.

Why our own: the inputs that broke HeteroSim were typos in real files (a rate off by 1e30, a YAML alias
bomb, a `--set` value that is not YAML, `--out` naming a file), so every case starts from a shipped
scenario, topology, sweep, HF config or measurement CSV and changes one thing. Each case runs in a forked
child (imports paid once) under a time and an address-space limit, in its own empty working directory,
and is classified:

  clean            exit 2, no traceback, one line on stderr that names the file or flag (or sweep's
                   documented exit 1: every point ran, the failed ones recorded in results.csv)
  ok               exit 0 on an input the mutator did not mark invalid
  accepted-invalid exit 0 on an input the mutator marked invalid (a value no real system has)
  traceback        a Python traceback, or an exit code other than 0/2
  unnamed          exit 2 with one line that names neither the file nor the flag
  multi-line       exit 2 with more than one line on stderr (usage boxes)
  hang             past the time budget, or a MemoryError / over the memory budget
  leftover         anything written on failure, a temp dir left behind, or a path the user did not ask
                   HeteroSim to create (an existing file at ``--out``) changed

Run a large corpus:  PYTHONPATH=$PWD python tests/fuzz/fuzzer.py --cases 1000 --seed 1
"""
from __future__ import annotations

import argparse
import collections
import copy
import io
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

#: Time budget per case, seconds (a quickstart run takes ~2 s on one core; 30 s is a hang).
TIME_BUDGET_S = 30
#: Peak resident memory allowed per case, over the fork server's own (runaway memory from one typo).
MEMORY_BUDGET_BYTES = 2 << 30
#: Address-space cap on the child, so a runaway case cannot take the machine down before we see it.
ADDRESS_SPACE_SLACK_BYTES = 4 << 30

CATEGORIES = ("clean", "ok", "accepted-invalid", "traceback", "unnamed", "multi-line", "hang", "leftover")


@dataclass
class Case:
    kind: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    """Relative path (inside the case's base dir) -> content."""
    invalid: bool = False
    """The mutator knows this input is invalid: exit 0 is a bug."""
    names: list[str] = field(default_factory=list)
    """A clean error line must contain one of these (file name, flag)."""
    note: str = ""
    protect: list[str] = field(default_factory=list)
    """Existing paths (relative) that must be unchanged afterwards (not ours to touch)."""
    out: str | None = None
    """The output location (relative): on failure nothing may be there."""
    setup: str | None = None
    """Special set-up: 'fifo' / 'chardev' / 'file' / 'dir' at ``out``."""
    py: str | None = None
    """Instead of the CLI, call this in-process entry (``measurements``)."""


# ---------------------------------------------------------------- seeds
#: Every command that writes a file or folder the user names (issue 40: audit every writer).
OUT_WRITERS = ["run", "compile", "collective", "plan-json", "sweep", "compare", "traffic", "export-chakra",
               "compare-suite", "calibrate"]
#: Names each writer puts in its folder: a foreign folder holding them must still be refused.
WRITER_FILES = {"run": ["summary.json"], "compile": ["ir.json", "summary.json"], "sweep": ["sweep.json"],
                "compare": ["compare.csv"], "traffic": ["summary.json", "fct.csv"],
                "export-chakra": ["comm_group.json"], "compare-suite": ["suite.csv", "suite.md"]}


def _writer_argv(cmd: str, q: str, target: str) -> list[str]:
    """The command line of one writer pointed at ``target`` (kept fast: flow backend, no plots)."""
    return {
        "run": ["run", q, "--out", target, "--quiet", "--set", "output.plots=false"],
        "compile": ["compile", q, "--out", target],
        "collective": ["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "1MiB", "--json",
                       "--png", target],
        "plan-json": ["plan", q, "--top", "1", "--simulate", "0", "--json", target],
        "sweep": ["sweep", "sweep.yaml", "--out", target, "--quiet"],
        "compare": ["compare", q, "--backend", "flow", "--cc", "dcqcn,none", "--out", target],
        "traffic": ["traffic", "scenarios/traffic/dcqcn-incast.yaml", "--backend", "flow", "--out", target],
        "export-chakra": ["export-chakra", q, "--out", target],
        "compare-suite": ["compare-suite", "suite", "--no-naive", "--jobs", "1", "--out", target],
        "calibrate": ["calibrate", str(REPO / "heterosim/hardware/measured/h100-sxm"), "--out", target],
    }[cmd]


def _shipped() -> dict[str, str]:
    files = {}
    for sub in ("scenarios", "topologies"):
        for p in sorted((REPO / sub).rglob("*.yaml")):
            files[str(p.relative_to(REPO))] = p.read_text()
    return files


# Public HuggingFace config.json values (meta-llama/Llama-2-7b-hf, openai-community/gpt2).
HF_SEEDS = {
    "llama": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
              "max_position_embeddings": 4096, "hidden_act": "silu", "tie_word_embeddings": False},
    "gpt2": {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None, "vocab_size": 50257,
             "n_positions": 1024, "activation_function": "gelu_new"},
}

CSV_SEED = ("op_class,device,precision,m,n,k,flops,bytes,time_us\n"
            "gemm,H100-SXM,bf16,4096,4096,4096,,,200.0\n"
            "gemm,H100-SXM,bf16,8192,8192,8192,,,1500.0\n")

SWEEP_SEED = {"scenario": "../scenarios/quickstart.yaml", "mode": "grid",
              "parameters": {"training.global_batch_size": [32]}, "timeout_s": 60}

# Values that no real rate, size or count has; putting one in a numeric field makes the input invalid.
INVALID_NUMBERS = [".inf", "-.inf", ".nan", "1e30", "-1", "true", "false", "abc", "[1, 2]", "{a: 1}", "''", "1e300",
                   "-1e-9"]
MAYBE_NUMBERS = ["0", "1", "1e-9", "1e9", "100000", "0.5", "3", "null", "~"]
TEXT_VALUES = ["''", "x", "[1]", "{a: 1}", "1", "true", "null", "'a b/c'", "\"\\u0000\""]
SET_TEXTS = ["[", "'abc", "\"abc", "*alias", "!tag x", "{", "a: b: c", "- 1\n- 2", "", "1e30", ".inf",
             "true", "-1", "{a: 1}", "[1, 2]", "%", "@x", "`x", "!!python/object:os.system ls"]
SET_PATHS = ["parallelism..tp", ".tp", "parallelism.tp.", "[0]", "training.global_batch_size[0]", "a" * 300,
             "cluster.groups[99].num_nodes", "cluster.groups[-1].num_nodes", "model.zoo.x", "parallelism[0]",
             "parallelism.tp=2", "  ", "network.ecn..kmin_kb"]


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    else:
        yield path, node


def _set(node, path, value):
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _delete(node, path):
    for p in path[:-1]:
        node = node[p]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        del node[path[-1]]


def _dotted(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=1000)


class _Raw(str):
    """A YAML fragment written verbatim in place of a value."""


def _dump_with_raw(data) -> str:
    """Dump, then splice raw fragments (``.inf``, ``*a``...) in where placeholders stand."""
    raws: dict[str, str] = {}

    def sub(n):
        if isinstance(n, _Raw):
            key = f"RAW{len(raws)}X"
            raws[key] = str(n)
            return key
        if isinstance(n, dict):
            return {k: sub(v) for k, v in n.items()}
        if isinstance(n, list):
            return [sub(v) for v in n]
        return n

    text = _dump(sub(data))
    for k, v in raws.items():
        text = text.replace(k, v)
    return text


class Mutator:
    """Makes :class:`Case` objects from the shipped files, one change each; same seed, same cases."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.shipped = _shipped()
        self.scenarios = {k: v for k, v in self.shipped.items() if k.startswith("scenarios/")
                          and "sweeps" not in k}
        self.small = ["scenarios/quickstart.yaml", "scenarios/stage-tp.yaml"]
        self.topologies = {k: v for k, v in self.shipped.items() if k.startswith("topologies/")
                           and "node_types" not in k}
        self.n = 0

    # -- helpers
    def _scen_case(self, rel: str, text: str | bytes, *, invalid: bool, note: str, argv_extra=(), cmd=None,
                   extra_files=None) -> Case:
        self.n += 1
        name = Path(rel).with_name(f"_fuzz{self.n}.yaml")
        small = rel in self.small
        cmd = cmd or self.rng.choice(["validate", "validate", "run", "compile"] if small else ["validate"])
        argv = [cmd, str(name)]
        out = None
        if cmd in ("run", "compile"):
            out = "work/out"
            argv += ["--out", "out"]
            if cmd == "run":
                argv += ["--quiet"]
        data = text.encode() if isinstance(text, str) else text
        files = {str(name): data, **(extra_files or {})}
        return Case("scenario", argv + list(argv_extra), files, invalid, [name.name, "--set"], note, out=out)

    def scenario_leaf(self) -> Case:
        rel = self.rng.choice(list(self.scenarios))
        data = yaml.safe_load(self.scenarios[rel])
        leaves = [(p, v) for p, v in _leaves(data) if p and p[0] not in ("name", "description")]
        path, old = self.rng.choice(leaves)
        r = self.rng.random()
        invalid = False
        if isinstance(old, bool):
            new = self.rng.choice(["1", "0.5", "abc", "[true]", "2"])
            invalid = True
        elif isinstance(old, (int, float)):
            if r < 0.7:
                new = self.rng.choice(INVALID_NUMBERS)
                invalid = True
            else:
                new = self.rng.choice(MAYBE_NUMBERS)
        else:
            new = self.rng.choice(TEXT_VALUES + ["1e30", "-1"])
            invalid = new in ("[1]", "{a: 1}")
        _set(data, path, _Raw(new))
        return self._scen_case(rel, _dump_with_raw(data), invalid=invalid, note=f"{_dotted(path)}: {old!r} -> {new}")

    def scenario_struct(self) -> Case:
        rel = self.rng.choice(list(self.scenarios))
        data = yaml.safe_load(self.scenarios[rel])
        r = self.rng.randrange(6)
        if r == 0:  # unknown key somewhere
            paths = [p for p, _ in _leaves(data) if len(p) > 1 and not isinstance(p[-1], int)]
            path = self.rng.choice(paths)
            node = data
            for p in path[:-1]:
                node = node[p]
            node["colour" + str(self.n)] = 1
            note, invalid = f"unknown key next to {_dotted(path)}", True
        elif r == 1:  # delete a key
            path = self.rng.choice([p for p, _ in _leaves(data) if p])
            _delete(data, path[:1] if self.rng.random() < 0.3 else path)
            note, invalid = f"deleted {_dotted(path)}", False
        elif r == 2:  # bad references
            bad = self.rng.choice([{"hf_config": [1]}, {"zoo": ["x"]}, {"zoo": {"a": 1}}, {"hf_config": 3},
                                   5, ["gpt3-1.7b"], {"hf_config": "missing.json"}, {"zoo": None}])
            data["model"] = bad
            note, invalid = f"model: {bad!r}", True
        elif r == 3:
            bad = self.rng.choice([{"file": [1]}, {"file": 3}, {"file": "nope.yaml"}, {"file": None}, "x",
                                   {"file": "../scenarios"}, {"file": "/dev/zero"}])
            data[self.rng.choice(["system", "cluster", "fabric"])] = bad
            note, invalid = f"reference {bad!r}", True
        elif r == 4:  # network/comm strings run rejects
            key, val = self.rng.choice([("comm", {"algorithm": "bogus"}), ("comm", {"protocol": "bogus"}),
                                        ("comm", {"channels": 100000}), ("network", {"backend": "bogus"}),
                                        ("network", {"background": {"cdf": "bogus", "load": 0.3}}),
                                        ("network", {"background": {"cdf": "websearch", "load": 1.0}}),
                                        ("network", {"background": {"cdf": "websearch", "load": 0.3,
                                                                    "hosts": ["nosuch/nic0"]}}),
                                        ("network", {"background": {"cdf": "nosuch.csv", "load": 0.3}}),
                                        ("network", {"header_bytes": 100000}),
                                        ("training", {"iterations": 1000000}),
                                        ("training", {"global_batch_size": 1000000000}),
                                        ("training", {"seq_length": 1000000}),
                                        ("training", {"precision": "fp8"})])
            sub = data.setdefault(key, {})
            if isinstance(sub, dict):
                sub.update(copy.deepcopy(val))
            note = f"{key}: {val}"
            invalid = not (key == "training" and val == {"precision": "fp8"})
        else:  # huge cluster
            g = data["cluster"]["groups"][0] if isinstance(data.get("cluster"), dict) else None
            if g is None:
                return self.scenario_leaf()
            g["num_nodes"] = self.rng.choice([12500, 100000, 10**7])
            note, invalid = f"num_nodes {g['num_nodes']}", False
        return self._scen_case(rel, _dump(data), invalid=invalid, note=note)

    def scenario_text(self) -> Case:
        rel = self.rng.choice(list(self.scenarios))
        text = self.scenarios[rel]
        r = self.rng.randrange(7)
        lines = text.splitlines(keepends=True)
        invalid = True
        if r == 0:  # duplicate a top-level key line block
            keys = [i for i, l in enumerate(lines) if l[:1].isalpha() and ":" in l]
            i = self.rng.choice(keys)
            lines.append(lines[i].split(":")[0] + ": " + self.rng.choice(["1", "{}", "x"]) + "\n")
            new, note = "".join(lines), f"duplicate key {lines[i].split(':')[0]}"
        elif r == 1:  # alias bomb under an unknown key
            bomb = 'zz0: &a0 ["x","x","x","x","x","x","x","x","x"]\n'
            for k in range(1, 9):
                bomb += f"zz{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 9) + "]\n"
            new, note = text + "bomb:\n" + "".join("  " + b for b in bomb.splitlines(keepends=True)), "alias bomb"
        elif r == 2:  # invalid UTF-8
            pos = self.rng.randrange(len(text))
            data = text.encode()[:pos] + self.rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"]) \
                + text.encode()[pos:]
            return self._scen_case(rel, data, invalid=True, note="invalid UTF-8 / NUL")
        elif r == 3:  # deep nesting
            depth = self.rng.choice([1000, 5000, 20000])
            new, note = text + "deep: " + "[" * depth + "]" * depth + "\n", f"nesting {depth}"
        elif r == 4:  # truncate
            new, note, invalid = text[: self.rng.randrange(len(text))], "truncated", False
        elif r == 5:  # a tab / stray characters
            pos = self.rng.randrange(len(text))
            new, note = text[:pos] + self.rng.choice(["\t", ": :", "{", "]", "&", "*x", "!!binary x"]) + text[pos:], \
                "stray chars"
            invalid = False
        else:  # anchors used legitimately but many
            new, note, invalid = text + "x_anchor: &big " + json.dumps(list(range(100))) + "\nx_use: *big\n", \
                "anchor + unknown keys", True
        return self._scen_case(rel, new, invalid=invalid, note=note)

    def scenario_set(self) -> Case:
        rel = self.rng.choice(self.small)
        data = yaml.safe_load(self.scenarios[rel])
        r = self.rng.random()
        if r < 0.5:
            path, old = self.rng.choice([(p, v) for p, v in _leaves(data) if p and p[0] != "description"])
            text = self.rng.choice(SET_TEXTS)
            yaml_ok = text in ("1e30", ".inf", "true", "-1", "{a: 1}", "[1, 2]", "")
            invalid = not yaml_ok or (isinstance(old, (int, float)) and text not in ("", "-1")) \
                or (isinstance(old, bool) and text != "true")
            if isinstance(old, (int, float)) and not isinstance(old, bool) and text == "-1":
                invalid = True
            arg = f"{_dotted(path)}={text}"
        else:
            arg = f"{self.rng.choice(SET_PATHS)}={self.rng.choice(['2', '[', 'x'])}"
            invalid = True
        return self._scen_case(rel, self.scenarios[rel], invalid=invalid, note=f"--set {arg!r}",
                               argv_extra=["--set", arg])

    def flags(self) -> Case:
        self.n += 1
        q = "scenarios/quickstart.yaml"
        base = {q: self.scenarios[q].encode()}
        choices = [
            (["plan", q, "--top", "-1"], True, ["--top"]),
            (["plan", q, "--top", "0"], True, ["--top"]),
            (["plan", q, "--simulate", "-3"], True, ["--simulate"]),
            (["plan", q, "--max-candidates", "-1"], True, ["--max-candidates"]),
            (["run", q, "--backend", ""], True, ["--backend"]),
            (["run", q, "--backend", "ns4"], True, ["--backend", "ns4"]),
            (["run", q, "--bogus-flag"], True, ["--bogus-flag"]),
            (["run", q, "--set"], True, ["--set"]),
            (["run", q, "--quiet=3"], True, ["--quiet"]),
            (["validate"], True, ["SCENARIO", "scenario"]),
            (["nosuchcommand"], True, ["nosuchcommand"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "1e30", "--json"], True,
             ["--size"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "nan", "--json"], True,
             ["--size"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "-1", "--json"], True,
             ["--size"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "1MiB", "--gpus", "-2",
              "--json"], True, ["--gpus"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "1MiB", "--op", "",
              "--json"], True, ["--op"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--max-size", "1e30"], True,
             ["--max-size"]),
            (["collective", "--topology", "topologies/h100-single-node.yaml", "--size", "1MiB", "--algo", "bogus",
              "--json"], True, ["--algo", "bogus"]),
            (["sweep", "sweep.yaml", "--timeout", "nan", "--out", "out"], True, ["--timeout"]),
            (["sweep", "sweep.yaml", "--timeout", "-1", "--out", "out"], True, ["--timeout"]),
            (["sweep", "sweep.yaml", "--jobs", "-4", "--out", "out"], True, ["--jobs"]),
            (["sweep", "sweep.yaml", "--executor", "bogus", "--out", "out"], True, ["--executor"]),
            (["compare", q, "--cc", "bogus", "--backend", "flow", "--out", "out"], True, ["--cc", "bogus"]),
            (["compare", q, "--cc", "", "--backend", "flow", "--out", "out"], True, ["--cc"]),
            (["compare", q, "--cc", "dcqcn", "--workers", "-1", "--out", "out"], True, ["--workers"]),
        ]
        argv, invalid, names = self.rng.choice(choices)
        files = dict(base)
        if argv[0] == "sweep":
            files["work/sweep.yaml"] = _dump(SWEEP_SEED).replace("../scenarios", "../scenarios").encode()
        out = "work/out" if "--out" in argv else None
        return Case("flag", list(argv), files, invalid, names, " ".join(argv), out=out)

    def out_paths(self, cmd: str | None = None, setup: str | None = None) -> Case:
        """A writer's output at something HeteroSim did not create: must be refused and left untouched.

        Every writer takes part (``OUT_WRITERS``), and a foreign folder holds the very file names that
        writer would write (a user's own ``sweep.json``, ``summary.json``)."""
        self.n += 1
        q = "scenarios/quickstart.yaml"
        setup = setup or self.rng.choice(["file", "fifo", "chardev", "dir", "empty", "under-file", "symlink"])
        cmd = cmd or self.rng.choice(OUT_WRITERS)
        target = "" if setup == "empty" else "out/sub" if setup == "under-file" else "out"
        argv = _writer_argv(cmd, q, target)
        files = {q: self.scenarios[q].encode()}
        if cmd == "sweep":
            files["work/sweep.yaml"] = _dump(SWEEP_SEED).encode()
        elif cmd == "compare-suite":
            files["work/suite/q.yaml"] = self.scenarios[q].replace("name: quickstart", "name: q").encode()
        protect = []
        if setup in ("file", "under-file"):
            files["work/out"] = b"precious user data\n"
            protect = ["work/out"]
        elif setup == "dir":
            for name in ("mine.txt", *WRITER_FILES.get(cmd, ())):
                files[f"work/out/{name}"] = b"precious user data\n"
                protect.append(f"work/out/{name}")
        elif setup == "symlink":
            files["work/target.txt"] = b"precious user data\n"
            protect = ["work/target.txt"]
        # a plain file / device / fifo / foreign dir is the user's: refusing is the only right answer
        invalid = setup != "symlink" or cmd != "collective"
        if cmd == "collective" and setup == "dir":
            invalid = True
        return Case("out", argv, files, invalid, ["--out", "--png", "--json", "out", "''"],
                    f"{cmd} -> {setup}", protect=protect, out=None, setup=setup)

    def topology(self) -> Case:
        self.n += 1
        rel = self.rng.choice(list(self.topologies))
        data = yaml.safe_load(self.topologies[rel])
        leaves = [(p, v) for p, v in _leaves(data) if p]
        path, old = self.rng.choice(leaves)
        if isinstance(old, (int, float)) and not isinstance(old, bool):
            new = self.rng.choice(INVALID_NUMBERS + ["1e-9", "1e30", "1e20"])
            invalid = new != "1e-9" or "gbps" in str(path[-1])
        else:
            new = self.rng.choice(TEXT_VALUES)
            invalid = new in ("[1]", "{a: 1}")
        _set(data, path, _Raw(new))
        name = Path(rel).with_name(f"_fuzz{self.n}.yaml")
        argv = ["collective", "--topology", str(name), "--size", "1MiB", "--gpus", "2", "--json"]
        return Case("topology", argv, {str(name): _dump_with_raw(data).encode()}, invalid,
                    [name.name], f"{_dotted(path)}: {old!r} -> {new}")

    def hf(self) -> Case:
        self.n += 1
        fam = self.rng.choice(list(HF_SEEDS))
        data = copy.deepcopy(HF_SEEDS[fam])
        key = self.rng.choice(list(data))
        new = self.rng.choice([[1], {"a": 1}, 1e30, -1, True, "x", None, 1e20, 2**40, 0.5, float("inf")])
        data[key] = new
        text = json.dumps(data)
        invalid = not (new is None and key in ("n_inner", "num_key_value_heads", "max_position_embeddings",
                                                "n_positions", "hidden_act", "tie_word_embeddings",
                                                "activation_function"))
        if self.rng.random() < 0.15:
            text, key = text[:10] + "\udcff" + text[10:], "utf8"
            raw = text.encode("utf-8", "surrogateescape")
        else:
            raw = text.encode()
        return Case("hf", ["import-hf", "m/config.json"], {"work/m/config.json": raw}, invalid,
                    ["config.json"], f"{key} -> {new!r}")

    def sweep(self) -> Case:
        self.n += 1
        data = copy.deepcopy(SWEEP_SEED)
        k = self.rng.randrange(6)
        if k == 0:
            data["timeout_s"] = _Raw(self.rng.choice([".nan", ".inf", "-1", "0", "true"]))
        elif k == 1:
            data["parameters"] = {self.rng.choice(SET_PATHS): [1]}
        elif k == 2:
            data["parameters"] = {"training.global_batch_size": _Raw(self.rng.choice(["[]", "3", "{a: 1}", "[.inf]"]))}
        elif k == 3:
            data["scenario"] = _Raw(self.rng.choice(["[1]", "3", "nope.yaml", "''"]))
        elif k == 4:
            data["mode"] = _Raw(self.rng.choice(["bogus", "1", "[grid]"]))
        else:
            data["parameters"] = {"parallelism.tp": [_Raw(self.rng.choice(["[", "*x", ".inf", "true"]))]}
        text = _dump_with_raw(data)
        return Case("sweep", ["sweep", "sweep.yaml", "--out", "out", "--quiet"], {"work/sweep.yaml": text.encode()},
                    True, ["sweep.yaml"], f"sweep {k}: {text.splitlines()[1:4]}", out="work/out")

    def csv(self) -> Case:
        self.n += 1
        rows = CSV_SEED.splitlines()
        r = self.rng.randrange(4)
        if r == 0:
            cells = rows[1].split(",")
            col = self.rng.randrange(len(cells))
            cells[col] = self.rng.choice(["inf", "nan", "-1", "1e309", "", "x", "1e-300", "0"])
            rows[1] = ",".join(cells)
            note = f"col {col} -> {cells[col]}"
        elif r == 1:
            rows[0] = rows[0].replace("time_us", "time_ms")
            note = "renamed column"
        elif r == 2:
            rows.append("gemm,H100-SXM,bf16,1,2")
            note = "short row"
        else:
            text = "\n".join(rows).encode()[:40] + b"\xff\xfe" + "\n".join(rows).encode()[40:]
            return Case("csv", [], {"work/m.csv": text}, True, ["m.csv"], "invalid UTF-8", py="measurements")
        text = "\n".join(rows) + "\n"
        invalid = "-> 0" not in note and "1e-300" not in note and "-> \n" not in note and not note.endswith("-> ")
        return Case("csv", [], {"work/m.csv": text.encode()}, invalid, ["m.csv"], note, py="measurements")

    def case(self) -> Case:
        weights = [(self.scenario_leaf, 30), (self.scenario_struct, 14), (self.scenario_text, 12),
                   (self.scenario_set, 12), (self.flags, 8), (self.out_paths, 8), (self.topology, 6), (self.hf, 6),
                   (self.sweep, 3), (self.csv, 3)]
        fn = self.rng.choices([w[0] for w in weights], [w[1] for w in weights])[0]
        return fn()


# ---------------------------------------------------------------- running

def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _prepare(case: Case, base: Path) -> None:
    for rel, data in case.files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (base / "work").mkdir(exist_ok=True)
    for sub in ("scenarios", "topologies"):  # references resolve against the real tree, read-only
        if not (base / sub).exists():
            (base / sub).mkdir()
    for rel, text in _shipped().items():
        if not (base / rel).exists():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(text)
    out = base / "work" / "out"
    if case.setup == "fifo":
        os.mkfifo(out)
    elif case.setup == "chardev":
        os.mknod(out, 0o666 | 0o020000, os.makedev(1, 3))  # a private null device node, never /dev/null itself
    elif case.setup == "symlink":
        os.symlink("target.txt", out)


def _child(case: Case, base: Path, stdout: Path, stderr: Path, as_limit: int) -> None:
    fd1 = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    fd2 = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd1, 1)
    os.dup2(fd2, 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
    os.chdir(base / "work")
    resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    signal.alarm(TIME_BUDGET_S)
    code = 0
    try:
        if case.py == "measurements":
            from heterosim.errors import UserError
            from heterosim.hardware.compute import Measurements

            try:
                Measurements("m.csv")
            except UserError as err:
                print(f"error: {err}", file=sys.stderr)
                code = 2
        else:
            argv = [("../" + a if a.startswith(("scenarios/", "topologies/")) else a) for a in case.argv]
            sys.argv = ["heterosim", *argv]
            from heterosim.cli import main

            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except MemoryError:
        code = 137
        print("MemoryError", file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


@dataclass
class Outcome:
    case: Case
    category: str
    code: int
    wall_s: float
    maxrss_bytes: int
    stderr: str
    cpu_s: float = 0.0


def run_case(case: Case, root: Path, baseline_rss: int, as_limit: int) -> Outcome:
    base = root / "b"
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    _prepare(case, base)
    before = _snapshot(base)
    protected = {p: (base / p).read_bytes() for p in case.protect if (base / p).exists()}
    so, se = root / "stdout", root / "stderr"
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(case, base, so, se, as_limit)
    killed = False
    while True:
        wpid, status, ru = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() - t0 > TIME_BUDGET_S + 10:
            os.killpg(pid, signal.SIGKILL) if False else os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.01)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    err = se.read_text(errors="replace")
    maxrss = ru.ru_maxrss * 1024
    after = _snapshot(base)
    lines = [l for l in err.strip().splitlines() if l.strip()]
    if killed or code == -signal.SIGALRM or code in (137, -9) or "MemoryError" in err \
            or maxrss - baseline_rss > MEMORY_BUDGET_BYTES:
        cat = "hang"
    elif "Traceback" in err or code not in (0, 2) and not (code == 1 and case.argv[:1] == ["sweep"]):
        cat = "traceback"  # (sweep's documented exit 1: its points ran and some failed, recorded per point)
    else:
        cat = None
    # leftovers: temp dirs anywhere, protected paths changed, anything new on failure
    new = [p for p in after if p not in before]
    changed = [p for p in protected if not (base / p).is_file() or (base / p).read_bytes() != protected[p]]
    if case.setup in ("fifo", "chardev"):
        st = (base / "work/out").lstat() if os.path.lexists(base / "work/out") else None
        import stat as _stat
        kind_ok = st is not None and (_stat.S_ISFIFO(st.st_mode) if case.setup == "fifo" else _stat.S_ISCHR(st.st_mode))
        if not kind_ok:
            changed.append("work/out")
    if case.setup == "symlink" and not os.path.islink(base / "work/out"):
        changed.append("work/out")
    tmp_left = [p for p in new if ".tmp-" in p or ".old-" in p or Path(p).name.startswith("..")]
    if cat is None and code == 1:  # a sweep whose points failed: results.csv records them, as documented
        leftover = tmp_left or changed
        lines = lines[-1:] or ["error: sweep: some points failed"]
    elif cat is None and code != 0:
        leftover = tmp_left or [p for p in new if p.startswith("work/")] or changed
    else:
        leftover = tmp_left or changed
    if cat is None and leftover:
        cat = "leftover"
    if cat is None:
        if code == 0:
            cat = "accepted-invalid" if case.invalid else "ok"
        elif len(lines) != 1:
            cat = "multi-line"
        elif code == 1:
            cat = "clean"
        elif not any(n and n in lines[0] for n in case.names):
            cat = "unnamed"
        else:
            cat = "clean"
    return Outcome(case, cat, code, wall, maxrss, err.strip()[-2000:], ru.ru_utime + ru.ru_stime)


def run_corpus(n: int, seed: int, *, root: Path | None = None, log=None, deadline_s: float | None = None,
               kinds: set[str] | None = None) -> list[Outcome]:
    """Generate ``n`` cases from ``seed`` and run them; stops early past ``deadline_s``."""
    import heterosim.cli  # noqa: F401  (the fork server pays the imports once)

    own = root is None
    root = Path(tempfile.mkdtemp(prefix="hs-fuzz-")) if own else root
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    vm = _vmsize()
    as_limit = vm + ADDRESS_SPACE_SLACK_BYTES
    mut = Mutator(seed)
    results = []
    t0 = time.monotonic()
    try:
        for i in range(n):
            case = mut.case()
            if kinds and case.kind not in kinds:
                continue
            if deadline_s is not None and time.monotonic() - t0 > deadline_s:
                break
            o = run_case(case, root, baseline, as_limit)
            results.append(o)
            if log:
                last = o.stderr.splitlines()[-1][:300] if o.stderr else ""
                log(f"{i:5d} {o.category:16s} {o.code:4d} {o.wall_s:6.1f}s {o.cpu_s:6.1f}cpu "
                    f"{o.maxrss_bytes >> 20:6d}MiB {case.kind:8s} {' '.join(case.argv)[:70]} | {case.note[:80]}"
                    + ("" if o.category in ("clean", "ok") else f"\n      {last}"))
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)
    return results


def _vmsize() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2 << 30


def summarize(results: list[Outcome]) -> str:
    counts = collections.Counter(o.category for o in results)
    by_kind = collections.defaultdict(collections.Counter)
    for o in results:
        by_kind[o.case.kind][o.category] += 1
    lines = [f"{len(results)} inputs: " + ", ".join(f"{c} {counts.get(c, 0)}" for c in CATEGORIES)]
    for k, c in sorted(by_kind.items()):
        lines.append(f"  {k:9s} " + ", ".join(f"{cat} {c[cat]}" for cat in CATEGORIES if c[cat]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", type=Path)
    ap.add_argument("--kinds", default="")
    args = ap.parse_args(argv)
    fh = open(args.log, "w") if args.log else None

    def log(msg):
        if fh:
            fh.write(msg + "\n")
            fh.flush()

    res = run_corpus(args.cases, args.seed, log=log, kinds=set(filter(None, args.kinds.split(","))) or None)
    print(summarize(res))
    if fh:
        fh.write(summarize(res) + "\n")
        fh.close()
    bad = sum(1 for o in res if o.category not in ("clean", "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
