"""The lab's allowlist reads a server's arguments flag by flag, by what each flag does
(benchmarks/engine/backends/flags.py). The declarations are held to the pinned servers' own help:
a flag the pinned llama-server or vLLM has and the declaration does not classify (or the reverse,
or a flag whose number of values differs) fails here. How a reading takes values is checked on
its own, without a server."""
import json
import subprocess

import pytest

from benchmarks.engine.backends import flags as f
from benchmarks.engine.backends.llamacpp_flags import LLAMA_SERVER_FLAGS
from benchmarks.engine.backends.vllm_flags import VLLM_SERVER_FLAGS
from conftest import ROOT

LLM_SERVERS = ROOT / "scripts" / "llm-servers.sh"
# vLLM's own parser, as `vllm serve` and its API server build it (internal to the pinned 0.32.0).
VLLM_PARSER = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = make_arg_parser(FlexibleArgumentParser())
json.dump({"allow_abbrev": p.allow_abbrev,
           "actions": [{"names": a.option_strings, "nargs": a.nargs} for a in p._actions if a.option_strings]},
          sys.stdout)
"""


def differences(declared: dict, pinned: dict) -> list[str]:
    out = [f"unclassified: {' '.join(names)} (takes {v})" for names, v in pinned.items() if names not in declared]
    out += [f"not in the pinned server: {' '.join(names)}" for names in declared if names not in pinned]
    out += [f"{' '.join(names)} takes {pinned[names]}, declared {v}" for names, v in declared.items()
            if names in pinned and pinned[names] != v]
    return out


@pytest.mark.real_server
def test_every_flag_of_the_pinned_llama_server_is_classified():
    binary = subprocess.run(["bash", str(LLM_SERVERS), "path"], capture_output=True, text=True).stdout.split()[0]
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
    pinned = f.flags_from_llama_help(text)
    assert len(pinned) > 200, "the help was read"
    assert differences(f.declared(LLAMA_SERVER_FLAGS), pinned) == []


@pytest.mark.real_server
def test_every_flag_of_the_pinned_vllm_is_classified():
    venv = subprocess.run(["bash", str(LLM_SERVERS), "vllm-setup"], check=True, capture_output=True, text=True,
                          timeout=1800).stdout.split()[-1]
    out = subprocess.run([f"{venv}/bin/python", "-c", VLLM_PARSER], capture_output=True, text=True, timeout=300,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    parser = json.loads(out.stdout)
    assert parser["allow_abbrev"] == VLLM_SERVER_FLAGS.abbreviations
    pinned = f.flags_from_argparse(parser["actions"])
    assert len(pinned) > 250, "the parser was read"
    assert differences(f.declared(VLLM_SERVER_FLAGS), pinned) == []


# --- how a reading takes values (no server) ---------------------------------------------------

TOY = f.FlagTable("toy", [f.Flag(("-p", "--path"), f.PATH, 1), f.Flag(("--on",), f.SAFE, 0),
                          f.Flag(("--fa",), f.SAFE, f.OPTIONAL), f.Flag(("--many",), f.NAME, f.MANY),
                          f.Flag(("--range",), f.SAFE, 2), f.Flag(("--run",), f.REFUSED, 1, "runs things"),
                          f.Flag(("--runway",), f.SAFE, 1)], abbreviations=True, equals=True)


def test_a_flags_value_is_the_next_word_whatever_it_starts_with():
    r = TOY.read(["--path", "--/../../etc/passwd", "--on"])
    assert [(g.name, g.values) for g in r.given] == [("--path", ("--/../../etc/passwd",)), ("--on", ())]
    assert TOY.read(["--path"]).problem == "the flag --path needs 1 value"
    assert [g.values for g in TOY.read(["--range", "1", "-2"]).given] == [("1", "-2")]


def test_optional_and_many_values_stop_at_the_next_flag():
    r = TOY.read(["--fa", "--on", "--fa", "on", "--many", "a", "b", "--on"])
    assert [(g.name, g.values) for g in r.given] == [("--fa", ()), ("--on", ()), ("--fa", ("on",)),
                                                      ("--many", ("a", "b")), ("--on", ())]


def test_spellings_resolve_to_the_declared_flag_or_are_refused():
    assert TOY.read(["--path=/x"]).given[0].values == ("/x",)
    assert TOY.read(["--pa", "/x"]).given[0].flag.names == ("-p", "--path")  # a unique prefix
    assert "abbreviates several flags" in TOY.read(["--ru", "x"]).problem
    assert TOY.refused(TOY.read(["--run", "x"])) == "the flag --run is refused on a lab host: it runs things"
    assert "is not a flag toy declares" in TOY.read(["--nope"]).problem
    assert "'--' ends toy's flags" in TOY.read(["--on", "--", "x"]).problem
    assert TOY.read(["--on", "x"]).positional == [(1, "x")]


def test_a_declaration_says_why_it_refuses_and_names_each_flag_once():
    with pytest.raises(ValueError, match="refused without saying why"):
        f.FlagTable("bad", [f.Flag(("--x",), f.REFUSED, 0)])
    with pytest.raises(ValueError, match="declared twice"):
        f.FlagTable("bad", [f.Flag(("--x",), f.SAFE, 0), f.Flag(("--x",), f.SAFE, 1)])


def test_the_help_reader_takes_names_and_values_as_llama_cpp_prints_them():
    text = "\n".join(["----- common params -----",
                      "-c,    --ctx-size N                     size of the prompt context",
                      "-fa,   --flash-attn [on|off|auto]       set Flash Attention use",
                      "--control-vector-layer-range START END  layer range",
                      "--spec-draft-type-k, -ctkd, --cache-type-k-draft TYPE",
                      "                                        KV cache data type for K for the draft model",
                      "--perf, --no-perf                       whether to enable internal libllama performance"])
    assert f.flags_from_llama_help(text) == {("-c", "--ctx-size"): 1, ("-fa", "--flash-attn"): f.OPTIONAL,
                                             ("--control-vector-layer-range",): 2,
                                             ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"): 1,
                                             ("--perf", "--no-perf"): 0}
