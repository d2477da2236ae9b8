"""A server's flags, each declared by what it does, so that the lab's allowlist judges a recipe's
final arguments flag by flag rather than by spelling. A flag the declaration does not hold is
refused: an unknown flag could do anything.

The kinds:
- SAFE: tunes the server; its value, if any, is a setting, never opened, run or dialled.
- PATH: its value is a file or folder the server reads: under the host's model folders, whole.
- PATHS: its value holds paths among other text (`name=/path`, JSON): each under the model folders.
- MODEL: a model it loads: a path under the model folders (nothing is downloaded).
- HOST and PORT: where it listens: the host's listen addresses, the port the worker picks.
- NAME: a name it serves or checks (`--api-key`, `--alias`): never read as a path.
- REFUSED: what no recipe may ask, with why (it runs programs, imports code, downloads, writes
  files, dials or listens elsewhere, or exits without serving).

A declaration is made from the pinned server's own help (`flags_from_llama_help`,
`flags_from_argparse`); tests/test_server_flags.py fails when the pinned server has a flag the
declaration does not classify, or the declaration one the server lacks. Django-free.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

SAFE, PATH, PATHS, MODEL, HOST, PORT, NAME, REFUSED = "safe", "path", "paths", "model", "host", "port", "name", "refused"
KINDS = (SAFE, PATH, PATHS, MODEL, HOST, PORT, NAME, REFUSED)
OPTIONAL, MANY = -1, -2  # values: an optional one (`-fa [on|off]`), or every word up to the next flag


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    kind: str
    values: int  # 0, 1, 2, OPTIONAL or MANY
    why: str = ""  # REFUSED: what it would do, in words


@dataclass(frozen=True)
class Given:
    """One flag as the arguments give it: its index, the name written, and its values."""

    index: int
    name: str
    flag: Flag
    values: tuple[str, ...]
    value_indices: tuple[int, ...]


@dataclass
class Reading:
    """What a server's arguments say, flag by flag; `problem` is why they are refused ("" if not)."""

    given: list[Given] = field(default_factory=list)
    positional: list[tuple[int, str]] = field(default_factory=list)
    problem: str = ""


def _long(name: str) -> str:
    # llama.cpp and vLLM read --n_gpu_layers as --n-gpu-layers.
    return name.replace("_", "-") if name.startswith("--") else name


class FlagTable:
    """A server's declared flags. `abbreviations`: it takes a unique prefix of a long flag (argparse's
    allow_abbrev); `equals`: it takes `--flag=value`."""

    def __init__(self, server: str, flags: list[Flag], *, abbreviations: bool = False, equals: bool = False):
        self.server, self.abbreviations, self.equals = server, abbreviations, equals
        self.flags = flags
        self.by_name: dict[str, Flag] = {}
        for f in flags:
            if f.kind not in KINDS:
                raise ValueError(f"{server}: {f.names[0]}: unknown kind {f.kind!r}")
            if f.kind == REFUSED and not f.why:
                raise ValueError(f"{server}: {f.names[0]} is refused without saying why")
            for name in f.names:
                if name in self.by_name:
                    raise ValueError(f"{server}: {name} declared twice")
                self.by_name[name] = f

    def lookup(self, written: str) -> tuple[str, Flag | None, str]:
        """(the flag's name, its declaration or None, why not when None) for a word as written."""
        name = _long(written)
        if name in self.by_name:
            return name, self.by_name[name], ""
        if self.abbreviations and name.startswith("--") and len(name) > 2:
            hits = sorted({f.names[0] for n, f in self.by_name.items() if n.startswith(name) and n.startswith("--")})
            if len(hits) == 1:
                return name, self.by_name[hits[0]], ""
            if hits:
                return name, None, f"{written} abbreviates several flags of {self.server} ({', '.join(hits[:4])})"
        return name, None, f"{written} is not a flag {self.server} declares, and a flag this host does not know is refused"

    def read(self, args: list[str], start: int = 0) -> Reading:
        """Read `args` from `start` (indices are into `args`): each flag with its values, as the
        server would take them (a flag's value is the next word, even one that starts with '-')."""
        out = Reading()
        i = start
        while i < len(args):
            word = args[i]
            if word == "--":
                out.problem = f"'--' ends {self.server}'s flags: what follows it could not be judged flag by flag"
                return out
            if not word.startswith("-") or len(word) == 1 or _number(word):
                out.positional.append((i, word))
                i += 1
                continue
            written, eq, inline = word.partition("=") if (self.equals and word.startswith("--")) else (word, "", "")
            name, flag, why = self.lookup(written)
            if flag is None:
                out.problem = f"the flag {why}"
                return out
            values, indices = [], []
            if eq:
                values, indices = [inline], [i]
            elif flag.values in (1, 2):
                for k in range(flag.values):
                    if i + 1 + k >= len(args):
                        out.problem = f"the flag {written} needs {flag.values} value{'s' if flag.values > 1 else ''}"
                        return out
                    values.append(args[i + 1 + k])
                    indices.append(i + 1 + k)
            elif flag.values in (OPTIONAL, MANY):
                j = i + 1
                while j < len(args) and not (args[j].startswith("-") and not _number(args[j])):
                    values.append(args[j])
                    indices.append(j)
                    j += 1
                    if flag.values == OPTIONAL:
                        break
            out.given.append(Given(i, written, flag, tuple(values), tuple(indices)))
            i = (indices[-1] if indices and not eq else i) + 1
        return out

    def refused(self, reading: Reading) -> str:
        """The first refused flag of a reading, in words ("" when none)."""
        for g in reading.given:
            if g.flag.kind == REFUSED:
                return f"the flag {g.name} is refused on a lab host: it {g.flag.why}"
        return ""


def _number(word: str) -> bool:
    return bool(re.fullmatch(r"-\d+(\.\d+)?", word))


# A server of no declared backend (any OpenAI-compatible one; SGLang until it is declared) may be told
# where it listens, what it loads and its names, and be given words its own program reads (each
# held to the model folders if it is a path); any other flag is one nobody here has judged, refused.
GENERIC_FLAGS = FlagTable("a server of no declared backend", [
    Flag(("--host",), HOST, 1), Flag(("--port",), PORT, 1), Flag(("--model", "--model-path"), MODEL, 1),
    Flag(("--api-key",), NAME, 1), Flag(("--served-model-name",), NAME, 1)])


# --- declarations from a server's own help -------------------------------------------------------

def flags_from_llama_help(text: str) -> dict[tuple[str, ...], int]:
    """llama.cpp's `--help`: each entry's names (aliases together) and how many values it takes
    (`-c, --ctx-size N`: 1; `-fa, --flash-attn [on|off|auto]`: OPTIONAL; `--control-vector-layer-range
    START END`: 2)."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("-") or line.startswith("-----"):
            continue
        head = re.split(r"\s{2,}", re.sub(r",\s+", ", ", line.strip()), maxsplit=1)[0]
        names, metavar = [], ""
        for item in head.split(", "):
            name, _, rest = item.partition(" ")
            names.append(name)
            metavar = rest or metavar
        if not metavar:
            values = 0
        elif metavar.startswith("[") and metavar.endswith("]"):
            values = OPTIONAL
        elif re.fullmatch(r"[A-Z_]+ [A-Z_]+", metavar):
            values = 2
        else:
            values = 1
        out[tuple(names)] = values
    return out


NARGS = {0: 0, None: 1, "?": OPTIONAL, "+": MANY, "*": MANY}


def flags_from_argparse(actions: list[dict]) -> dict[tuple[str, ...], int]:
    """An argparse parser's options (`{"names": option_strings, "nargs": nargs}` each, as
    tests/test_server_flags.py reads them from vLLM's own parser): names and values taken."""
    return {tuple(a["names"]): NARGS.get(a["nargs"], 1) for a in actions if a.get("names")}


def declared(table: FlagTable) -> dict[tuple[str, ...], int]:
    """A table's flags in the same shape, to compare with the server's own."""
    return {f.names: f.values for f in table.flags}
