"""Starting and stopping an inference server on this host, from a recipe: the lab.

A `ServerSpec` is what to start — an executable and its arguments as a list (never a shell),
with the placeholders `{port}`, `{model}` and `{host}` filled in, one setting of the sweep
parameters applied, and environment variables. What this host lets be started is the host's
own decision, an `Allowlist` from the worker's settings: the executables it may start, the
folders models (and any other path in the arguments or the environment) may come from, the
addresses a server may listen on, the ports it owns and the environment variables a recipe may
set. It judges the final command as the server's backend reads it (every --host, --port and
model flag, however spelled, and the backend's default address), not the recipe's fields. A
spec outside it is refused with the reason before anything starts. A server gets a minimal
environment (INHERITED_ENV and its recipe's), a working folder of its own and, with LAB_RUN_AS,
another user than the worker's.

`start()` starts the server in its own process group (session), records what it started
(pid, process group, port) in a file under the worker's state folder, waits for `/health`
and times it, times the first token of a probe request from the start, and reads the memory
the server holds once loaded: per process from NVML on a GPU host, else the resident memory
(RSS) of its processes, and says which. A server that exits or never answers is a
`StartFailure`: its exit code or signal, the last lines of its log and, where the log says
it, a recognised cause. `Server.stop()` sends SIGTERM to the whole group, then SIGKILL after
a grace period, and `wait_freed()` checks that the memory it held was given back.

A worker killed while its server runs leaves it behind; `reap_orphans()` on the next worker
finds the records whose worker is gone and stops those servers before anything is measured.

Linux only (process groups, /proc). Django-free: `scripts/gpu_lab.py` drives it alone.
"""
from __future__ import annotations

import ipaddress
import json
import os
import pwd
import re
import shlex
import signal
import socket
import fcntl
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import unquote, urlparse

import httpx

from . import backends
from .backends.base import inline_code_at
from .backends.flags import MODEL, NAME, PATH, PATHS, PORT
from . import gpu as gpu_telemetry

PLACEHOLDERS = ("port", "model", "host")
_PLACEHOLDER = re.compile(r"\{(port|model|host)\}")
# Never set by a recipe, whatever the host allows: they change what code a started process loads or runs.
REFUSED_ENV = re.compile(r"^(LD_.*|DYLD_.*|PYTHON.*|PERL5.*|RUBY.*|NODE_OPTIONS|BASH_ENV|ENV|PATH|IFS)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# One folder per machine, whatever each worker's state folder: every worker on it leases ports here.
PORT_LEASES = Path(tempfile.gettempdir()) / "lab-port-leases"
# The whole environment of a started server, besides what its recipe sets (from the backend's
# and the host's allowlist) and its GPU list: taken from the worker's, nothing else, for the
# worker holds database and broker credentials a server has no business seeing. What is kept
# is the operator's, never a recipe's: PATH and CUDA_HOME (servers compile kernels with the
# host's compilers), LD_LIBRARY_PATH (CUDA hosts and containers find the driver's libraries
# through it), the worker's GPUs when a recipe gives none, and the caches' places. HOME, USER
# and LOGNAME are the LAB_RUN_AS user's when servers run as another user.
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
                 "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "HF_HOME", "HF_HUB_OFFLINE",
                 "TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME")
# A started server's working directory, under the state folder: empty, so a bare file name in its
# arguments (a log, a slot file) lands there, never among the worker's records and logs.
SERVER_CWD = "workdir"
# Which GPUs a server gets: a recipe's GPU list (or a sweep's "gpus" values, not a flag), set as
# CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers the GPUs as NVML (the probe,
# the telemetry) does: CUDA's own default order puts the fastest GPU first.
GPUS_KEY = "gpus"
GPU_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES"})
MAX_GPU_INDEX = 63
LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 16_000
STORED_VERSION = 2  # 2: earlier_starts (a run of several trials starts the server once per trial)


class Refused(Exception):
    """This host does not allow what was asked; the message says why."""


# ---------------------------------------------------------------------------------- the spec
def format_value(value) -> str:
    """A sweep value as an argument: 4 -> "4", 0.92 -> "0.92"."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse_gpus(text) -> tuple[int, ...]:
    """ "0,1" -> (0, 1); a ValueError says what is wrong (not indices, one twice)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"GPUs are indices separated by commas, e.g. 0 or 0,1, not {text!r}")
    indices = tuple(int(p) for p in parts)
    if len(set(indices)) != len(indices):
        raise ValueError(f"a GPU is listed twice in {text!r}")
    if max(indices) > MAX_GPU_INDEX:
        raise ValueError(f"GPU indices go up to {MAX_GPU_INDEX}, not {max(indices)}")
    return indices


ENV_MASK = "…"
_ENV_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")


def mask_env(command: str) -> str:
    """A command line as shown to people: the values of its leading NAME=value environment
    assignments masked (NAME=…), except the GPU variables (not secrets). For stored commands
    written before command_line masked them, and for typed launch commands."""
    if not command or "=" not in command:
        return command or ""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: mask every assignment-like word, to be safe
        return re.sub(r"(?<!\S)([A-Za-z_][A-Za-z0-9_]*)=\S*",
                      lambda m: m.group(0) if m.group(1) in GPU_ENV else f"{m.group(1)}={ENV_MASK}", command)
    env, i = [], 0
    while i < len(words):
        m = _ENV_ASSIGNMENT.match(words[i])
        if not m:
            break
        name = m.group(1)
        env.append(f"{name}={shlex.quote(words[i][m.end():])}" if name in GPU_ENV else f"{name}={ENV_MASK}")
        i += 1
    if not env:
        return command
    rest = shlex.join(words[i:])
    return " ".join(env) + (" " + rest if rest else "")


def gpu_env(gpus) -> dict:
    """The environment that gives a server exactly these GPUs (NVML's indices)."""
    if gpus is None:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus)}


def apply_setting(args: list[str], setting: dict) -> list[str]:
    """`args` with each flag of `setting` set to its value: the value after the flag (or after
    `flag=`) replaced where the flag is there, else the flag and value appended. A value of
    True is the flag alone, False removes it. The GPU list ("gpus") is no argument."""
    out = list(args)
    for flag, value in setting.items():
        if flag == GPUS_KEY:
            continue
        at = next((i for i, a in enumerate(out) if a == flag or a.startswith(flag + "=")), None)
        if value is False:
            if at is not None:
                takes_value = "=" not in out[at] and at + 1 < len(out) and not out[at + 1].startswith("-")
                del out[at:at + (2 if takes_value else 1)]
            continue
        if value is True:
            if at is None:
                out.append(flag)
            continue
        text = format_value(value)
        if at is None:
            out += [flag, text]
        elif out[at].startswith(flag + "="):
            out[at] = f"{flag}={text}"
        elif at + 1 < len(out):
            out[at + 1] = text
        else:
            out.append(text)
    return out


def setting_label(setting: dict) -> str:
    """ "--parallel 4 -c 8192"; "" for no setting."""
    parts = []
    for flag, value in setting.items():
        parts.append(flag if value is True else f"{flag} off" if value is False else f"{flag} {format_value(value)}")
    return " ".join(parts)


@dataclass(frozen=True)
class ServerSpec:
    """One server to start: a recipe with one setting of its sweep parameters applied."""

    executable: str
    model_path: str
    args: tuple[str, ...] = ()
    setting: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    listen_host: str = "127.0.0.1"
    backend: str = "openai"
    served_model: str = ""  # the id in /v1/models; "" = the only one served
    label: str = ""  # for records and logs: the recipe and its setting
    gpus: tuple[int, ...] | None = None  # NVML indices the server gets; None: the worker's environment

    @property
    def full_env(self) -> dict:
        """What the recipe sets in the server's environment: its variables and its GPUs."""
        return {**{str(k): str(v) for k, v in self.env.items()}, **gpu_env(self.gpus)}

    def argv(self, port: int) -> list[str]:
        values = {"port": str(port), "model": self.model_path, "host": self.listen_host}
        args = apply_setting(list(self.args), self.setting)
        return [self.executable] + [_PLACEHOLDER.sub(lambda m: values[m.group(1)], a) for a in args]

    def command_line(self, port: int) -> str:
        """The command as a person would type it (for the page and the endpoint's record), the
        recipe's environment values masked (NAME=…: they may be secrets, an HF_TOKEN); the GPU
        variables the worker derives from the GPU list are shown."""
        env = " ".join(f"{k}={shlex.quote(str(v))}" if k in GPU_ENV else f"{k}={ENV_MASK}"
                       for k, v in self.full_env.items())
        return (env + " " if env else "") + shlex.join(self.argv(port))

    @property
    def connect_host(self) -> str:
        """Where the worker reaches it: the listen address, or loopback for a wildcard one."""
        address = ipaddress.ip_address(self.listen_host)
        if address.is_unspecified:
            return "::1" if address.version == 6 else "127.0.0.1"
        return self.listen_host

    def base_url(self, port: int) -> str:
        host = self.connect_host
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


# ---------------------------------------------------------------------------------- the host's allowlist
def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _exact(path: str) -> str:
    """An executable as named, normalised but not resolved: allowing a venv's `bin/python`
    (a symlink) must not allow every Python on the host."""
    return os.path.normpath(os.path.expanduser(path))


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False


def parse_ports(text: str) -> tuple[int, int]:
    """ "18100-18199" -> (18100, 18199); a ValueError says what is wrong."""
    m = re.fullmatch(r"\s*(\d{1,5})\s*-\s*(\d{1,5})\s*", text or "")
    if not m:
        raise ValueError(f"a port range is written LOW-HIGH, e.g. 18100-18199, not {text!r}")
    lo, hi = int(m.group(1)), int(m.group(2))
    if not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"the port range {lo}-{hi} must lie within 1024-65535, low first")
    return lo, hi


def _split(value) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value or ()]


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# What separates the paths in a value: name=path, lists, JSON ({"path": "/x"}), quoting.
_BETWEEN_PATHS = re.compile(r"""[\s=,;'"`(){}\[\]<>]+""")


def path_pieces(text: str) -> Iterator[str]:
    """The parts of an argument (or an environment value) a server may open as a path: in the
    value of `--flag=value` or of a joined short option (`-m/path`), each piece of `name=path`,
    of a list or of JSON; a `file:` URL's path; `@path`. A piece is a path when it holds a /,
    starts with ~ or is .. (the folder above the server's)."""
    if text.startswith("--"):
        text = text.partition("=")[2]
    elif text.startswith("-"):
        text = text[2:]
    if text.lstrip()[:1] in ("{", "["):  # JSON: its strings as decoded (\u002f is a /), then the text too
        try:
            for leaf in _json_strings(json.loads(text)):
                yield from path_pieces(leaf)
        except (ValueError, RecursionError):
            pass
    for piece in _BETWEEN_PATHS.split(text):
        piece = piece.lstrip("@")
        if piece[:5].lower() == "file:":
            piece = unquote(urlparse(piece).path)
        elif _URL.match(piece):
            continue  # an address of another scheme: not a file on this host
        if "/" in piece or piece.startswith("~") or piece == "..":
            yield piece


_BARE_FILE = re.compile(r"[\w-]+(\.[\w-]+)+")  # tmpl.jinja, adapter.gguf: a file name, relative


def _json_strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _json_strings(k)
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)


def env_name_problem(name: str, backend: str) -> str:
    """Why no host lets a recipe set the environment variable `name` for a server of `backend`,
    or "" (the host's allowlist then decides). One definition for the recipe form and the worker."""
    if not ENV_NAME.match(name):
        return f"{name!r} is not an environment variable name"
    if REFUSED_ENV.match(name):
        return f"a recipe may not set {name}: it changes what code the server loads"
    known = backends.BACKENDS.get(backend)
    if known is not None and name.startswith(known.flag_env):
        return (f"a recipe may not set {name}: {known.label} reads it as a flag, and flags go in the arguments, "
                f"where the host's allowlist judges them")
    return ""


def _run_as_problem(user: str) -> str:
    """Why this worker cannot start servers as `user` (LAB_RUN_AS), or ""."""
    try:
        target = pwd.getpwnam(user)
    except KeyError:
        return f"LAB_RUN_AS is {user!r}, a user this host does not have"
    if target.pw_uid == 0:
        return "LAB_RUN_AS must name an unprivileged user, not root"
    if target.pw_uid == os.geteuid():
        return (f"LAB_RUN_AS is the worker's own user ({user}): its servers could read the worker's environment; "
                f"name another user, or leave LAB_RUN_AS empty")
    if os.geteuid() != 0 and not _can_switch_user():
        return (f"this worker (uid {os.geteuid()}) cannot start servers as {user} (LAB_RUN_AS): run it as root "
                f"or give it CAP_SETUID and CAP_SETGID")
    return ""


def _can_switch_user() -> bool:
    """The capabilities to set a child's user and groups (CAP_SETGID 6, CAP_SETUID 7)."""
    try:
        line = next(li for li in Path("/proc/self/status").read_text().splitlines() if li.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return int(line.split()[1], 16) & 0b11000000 == 0b11000000


@dataclass(frozen=True)
class Allowlist:
    """What this host lets its worker start (the worker's own settings, never the database)."""

    executables: tuple[str, ...] = ()
    model_dirs: tuple[str, ...] = ()
    ports: tuple[int, int] = (18100, 18199)
    listen_hosts: tuple[str, ...] = ("127.0.0.1", "::1")
    gpus: tuple[int, ...] | None = None  # the GPUs a server may be given; None: any (LAB_GPUS blank)
    env_allowed: tuple[str, ...] = ()  # environment variables a recipe may set beyond its backend's safe ones
    run_as: str = ""  # the user servers run as; "": the worker's own
    inline_code: bool = False  # LAB_ALLOW_INLINE_CODE: `python -c CODE` stand-ins may start (a test bench)

    @classmethod
    def from_settings(cls, executables="", model_dirs="", ports="18100-18199",
                      listen_hosts="127.0.0.1,::1", gpus="", env_allowed="", run_as="",
                      inline_code: bool = False) -> "Allowlist":
        return cls(tuple(_exact(e) for e in _split(executables)), tuple(_real(d) for d in _split(model_dirs)),
                   parse_ports(ports) if isinstance(ports, str) else tuple(ports),
                   tuple(str(ipaddress.ip_address(h)) for h in _split(listen_hosts)),
                   parse_gpus(gpus) if str(gpus or "").strip() else None,
                   tuple(_split(env_allowed)), str(run_as or "").strip(), bool(inline_code))

    def refusal(self, spec: ServerSpec, port: int | None = None) -> str:
        """Why this host will not start `spec` on `port` (the one the worker picked; the first
        of its range when not picked yet), or "" when it may. Judged on the final command and
        environment, as the server's backend reads them, not on the recipe's fields alone."""
        if not self.executables:
            return "this host's worker may start no servers: LAB_EXECUTABLES is empty in its settings"
        if not os.path.isabs(spec.executable):
            return f"the executable must be an absolute path, not {spec.executable!r}"
        if _exact(spec.executable) not in self.executables:
            return (f"{spec.executable} is not among the executables this host allows "
                    f"(LAB_EXECUTABLES: {', '.join(self.executables)})")
        if not self.model_dirs:
            return "this host allows models from no folder: LAB_MODEL_DIRS is empty in its settings"
        if not os.path.isabs(spec.model_path):
            return f"the model path must be an absolute path on the host, not {spec.model_path!r}"
        if not self._in_model_dirs(spec.model_path):
            return (f"the model {spec.model_path} is outside the folders this host allows "
                    f"(LAB_MODEL_DIRS: {', '.join(self.model_dirs)})")
        try:
            backend = backends.get(spec.backend)
        except backends.UnknownBackend as exc:
            return str(exc)
        port = self.ports[0] if port is None else port
        argv = spec.argv(port)
        flags = backend.server_flags(argv)
        if not self.inline_code and inline_code_at(argv) is not None:
            return (f"the arguments give {os.path.basename(spec.executable)} its program inline (-c): what it runs "
                    f"no allowlist can judge (LAB_ALLOW_INLINE_CODE is off on this host)")
        reading = backend.read_flags(argv)
        names = frozenset(i for g in (reading.given if reading else ()) if g.flag.kind == NAME for i in g.value_indices)
        return (self._declared_problem(reading, backend) or self._flags_problem(flags, backend, port)
                or self._paths_problem(argv, flags.not_paths | names)
                or self._env_problem(spec, backend) or self._gpus_problem(spec)
                or self._listen_problem(spec.listen_host) or (_run_as_problem(self.run_as) if self.run_as else ""))

    def allows_model(self, path: str) -> bool:
        """Whether `path` lies under one of LAB_MODEL_DIRS."""
        return bool(self.model_dirs) and self._in_model_dirs(path)

    def _in_model_dirs(self, path: str) -> bool:
        return any(_inside(_real(path), d) for d in self.model_dirs)

    def _listen_problem(self, host: str, how: str = "") -> str:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return f"the listen address must be an IP address, not {host!r}{how}"
        if str(address) not in self.listen_hosts:
            return (f"this host lets servers listen on {', '.join(self.listen_hosts)} only "
                    f"(LAB_LISTEN_ADDRESSES), not {host}{how}")
        return ""

    def _flags_problem(self, flags, backend, port: int) -> str:
        """Where the server would listen and what it would load, as its backend reads its arguments."""
        how = (f" ({backend.label} listens there when no {backend.host_flags[0]} is given: give "
               f"{backend.host_flags[0]} {{host}})" if flags.host_is_default else " (a --host in its arguments)")
        for host in flags.hosts:
            problem = self._listen_problem(host, how)
            if problem:
                return problem
        for value in flags.ports:
            if value != str(port):
                return (f"the arguments make the server listen on port {value}: its port is the one the worker "
                        f"picks for {{port}} (from LAB_PORTS {self.ports[0]}-{self.ports[1]}), one --port only")
        for model in flags.models:
            if not (os.path.isabs(model) and self._in_model_dirs(model)):
                return (f"the arguments give {backend.label} the model {model!r}, not a path under the folders this "
                        f"host allows (LAB_MODEL_DIRS: {', '.join(self.model_dirs)}); nothing is downloaded")
        if flags.configs:
            return (f"the arguments make {backend.label} read more flags from {flags.configs[0]!r}, where this "
                    f"host's allowlist cannot see: give the flags in the arguments")
        return ""

    def _declared_problem(self, reading, backend) -> str:
        """Flag by flag, by what each does (backends/flags.py): refused and unknown flags, and every
        path, paths' piece and model a flag's value or the one model word gives under the model
        folders (a value is a value whatever it starts with: `--chat-template-file --/../x`)."""
        if reading is None:
            return ""
        if reading.problem:
            return reading.problem
        kinds = {g.flag.kind for g in reading.given}
        if PORT not in kinds and not backend.positional_words:  # a generic server may take {port} as a word
            return "the arguments give no --port: the server would listen on its default port, not the worker's {port}"
        models = [(f"the model {word!r}", word) for _, word in reading.positional[:1] if backend.positional_model]
        if backend.needs_model and not models and MODEL not in kinds:
            return "the arguments name no model: the server would look for its default one, which nothing downloads"
        for g in reading.given:
            for value in g.values:
                if g.flag.kind == PATH:  # the whole value, read as a path (a file: URL as its path)
                    pieces = list(path_pieces(value)) or [value]
                elif g.flag.kind == PATHS:  # a bare file name among them is a path too (`tmpl.jinja`)
                    pieces = list(path_pieces(value)) or ([value] if _BARE_FILE.fullmatch(value) else [])
                elif g.flag.kind == MODEL:
                    models.append((f"the flag {g.name}'s model {value!r}", value))
                    continue
                else:
                    continue
                for piece in pieces:
                    problem = self._path_problem(piece)
                    if problem:
                        return f"the flag {g.name}'s value {value!r} {problem}"
        for what, model in models:
            if not (os.path.isabs(model) and self._in_model_dirs(model)):
                return (f"{what} is not a path under the folders this host allows (LAB_MODEL_DIRS: "
                        f"{', '.join(self.model_dirs)}); nothing is downloaded")
        return ""

    def _paths_problem(self, argv: list[str], not_paths) -> str:
        """Every path in the arguments lies under LAB_MODEL_DIRS (or is an allowed executable)."""
        for i, arg in enumerate(argv[1:], start=1):
            if i in not_paths:
                continue
            for piece in path_pieces(arg):
                problem = self._path_problem(piece)
                if problem:
                    before = argv[i - 1] if i > 1 and argv[i - 1].startswith("-") and not arg.startswith("-") else ""
                    return f"the flag {before}'s value {arg!r} {problem}" if before else f"the argument {arg!r} {problem}"
        return ""

    def _path_problem(self, piece: str) -> str:
        dirs = ", ".join(self.model_dirs)
        if not piece.startswith("/"):
            # Refused rather than resolved: what it names depends on the folder the server
            # starts in (and ~ on whose home), which the recipe's author does not see.
            return (f"names the relative path {piece!r}, which is refused: give an absolute path under the "
                    f"folders this host allows (LAB_MODEL_DIRS: {dirs})")
        if _exact(piece) in self.executables or self._in_model_dirs(piece):
            return ""
        return f"names a path outside the folders this host allows (LAB_MODEL_DIRS: {dirs})"

    def _env_problem(self, spec: ServerSpec, backend) -> str:
        """Only names the backend documents as safe or the host adds (LAB_ENV_ALLOWED), their
        paths under the model folders."""
        for name, value in spec.env.items():
            name = str(name)
            problem = env_name_problem(name, spec.backend)
            if problem:
                return problem
            if name in GPU_ENV:
                return f"a recipe gives a server its GPUs with its GPU list, not {name}"
            if name in backend.offline_env and str(value) != backend.offline_env[name]:
                return (f"{name} is forced to {backend.offline_env[name]} on a lab host (offline: nothing is "
                        f"downloaded), not {value!r}")
            if name not in backend.safe_env and name not in self.env_allowed:
                return (f"a recipe may not set {name} on this host: only what {backend.label} documents as safe "
                        f"and what LAB_ENV_ALLOWED adds ({', '.join(self.env_allowed) or 'nothing'})")
            # A variable its backend reads as a path is one whole (a bare name too); others' values by piece.
            pieces = [str(value)] if name in backend.path_env else path_pieces(str(value))
            for piece in pieces:
                problem = self._path_problem(piece)
                if problem:
                    return f"the value of {name} {problem}"  # never the value: it may be a secret
        return ""

    def _gpus_problem(self, spec: ServerSpec) -> str:
        if spec.gpus is not None and self.gpus is not None and not set(spec.gpus) <= set(self.gpus):
            beyond = sorted(set(spec.gpus) - set(self.gpus))
            return (f"GPU {', '.join(map(str, beyond))} is not among the GPUs this host lets servers use "
                    f"(LAB_GPUS: {', '.join(map(str, self.gpus))})")
        return ""

    def lease_port(self, host: str = "127.0.0.1") -> "PortLease":
        """The first port of this worker's range that no other worker on this machine holds and
        nothing listens on, held until the lease is released. Without the lease two workers would
        pick the same port while a server loads: vLLM binds its port only once its model is in."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for port in range(self.ports[0], self.ports[1] + 1):
            lease = PortLease.take(port)
            if lease is None:
                continue
            with socket.socket(family, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    lease.release()
                    continue
            return lease
        raise Refused(f"every port of this worker's range {self.ports[0]}-{self.ports[1]} is in use (LAB_PORTS)")


class PortLease:
    """A port held by this process: an exclusive lock on a file named after it under PORT_LEASES.
    The lock ends with the process that holds it, so a killed worker leaves no stale lease (its
    orphaned server still holds the port itself until the next worker stops it)."""

    def __init__(self, port: int, fd: int):
        self.port, self._fd = port, fd

    @classmethod
    def take(cls, port: int) -> "PortLease | None":
        PORT_LEASES.mkdir(mode=0o1777, exist_ok=True)
        try:
            fd = os.open(PORT_LEASES / str(port), os.O_RDONLY | os.O_CREAT, 0o444)
        except OSError:
            return None  # a lease file another user made and we cannot read: theirs
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return cls(port, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# ---------------------------------------------------------------------------------- processes
def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def process_start(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, it names one process
    even after the pid is reused."""
    stat = _stat(pid)
    return int(stat[19]) if stat else None


def alive(pid: int, started: int | None = None) -> bool:
    stat = _stat(pid)
    if not stat or stat[0] in ("Z", "X"):
        return False
    return started is None or int(stat[19]) == started


def group_pids(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (a server and the workers it forked)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat and stat[0] not in ("Z", "X") and int(stat[2]) == pgid:
                pids.append(int(entry))
    return sorted(pids)


def rss_mib(pids) -> float:
    """Resident memory of these processes, MiB."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])  # kB
        except OSError:
            continue
    return total / 1024


def describe_exit(returncode: int | None) -> tuple[int | None, str]:
    """(exit code, signal name) of a Popen returncode; a negative one is a signal."""
    if returncode is None:
        return None, ""
    if returncode < 0:
        try:
            return None, signal.Signals(-returncode).name
        except ValueError:
            return None, f"signal {-returncode}"
    return returncode, ""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").replace("\x00", "")
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------------------------- causes
# What a server's log says when it cannot start, most specific first. Each is (code, what it
# means, pattern); the first that matches a line names the cause, and that line is kept.
CAUSES = [
    ("unsupported_quantization", "the quantization is not supported here", re.compile(
        r"quantization method \S+ is not supported|unknown quantization|unsupported quantization|"
        r"quantization .{0,60}not supported|does not support .{0,40}quantization|"
        r"(fp8|awq|gptq|marlin).{0,80}(not supported|requires|minimum capability)", re.I)),
    ("unsupported_gpu", "the GPU's compute capability is not supported", re.compile(
        r"compute capability|minimum capability|no kernel image is available|"
        r"sm_\d+ is not (a )?supported|unsupported (gpu|architecture|cuda arch)|"
        r"requires .{0,40}(ampere|hopper|sm_?8\d|sm_?9\d)|bfloat16 is only supported", re.I)),
    ("out_of_memory", "out of memory", re.compile(
        r"out of memory|OutOfMemoryError|cudaMalloc failed|failed to allocate|cannot allocate memory|"
        r"not enough memory|insufficient memory|no available memory for the cache blocks|"
        r"std::bad_alloc|larger than the available KV cache memory", re.I)),
    ("port_in_use", "the port is already in use", re.compile(
        r"address already in use|couldn't bind|could not bind|errno 98|bind\(\) failed", re.I)),
    ("missing_file", "a file it needs is missing", re.compile(
        r"no such file or directory|does not exist|file not found|is not a local folder|"
        r"does not appear to have a file named|can't load tokenizer|repo id must be in the form|"
        r"repository not found|not a valid model identifier", re.I)),
    ("bad_flag", "an argument it does not accept", re.compile(
        r"unrecognized arguments?|invalid argument|unknown argument|unknown option|unrecognized option|"
        r"error while handling argument|"
        r"error: argument |invalid choice|expected one argument|invalid value", re.I)),
    # Vaguer words last: they follow a more precise line when there is one.
    ("missing_file", "a file it needs is missing", re.compile(
        r"failed to open|failed to load model|unable to load model", re.I)),
]
SIGNAL_CAUSES = {"SIGILL": ("illegal_instruction", "the CPU refused an instruction: the binary was built for "
                                                    "another CPU"),
                 "SIGKILL": ("killed", "killed (by the kernel's out-of-memory killer, or someone)")}


@dataclass(frozen=True)
class Cause:
    code: str = ""  # one of CAUSES' codes, or "" when the log does not say
    label: str = ""
    line: str = ""  # the log line that says it

    def to_dict(self) -> dict:
        return asdict(self)


def recognise(log: str, exit_signal: str = "") -> Cause:
    """Why a server did not start, from its log and how it ended: the first cause of CAUSES
    that a line says, and the first line that says it (later lines tend to be consequences:
    "failed to load model" after "No such file or directory")."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for code, label, pattern in CAUSES:
        hits = [line for line in lines if pattern.search(line)]
        if hits:
            return Cause(code, label, hits[0][:500])
    if exit_signal in SIGNAL_CAUSES:
        code, label = SIGNAL_CAUSES[exit_signal]
        return Cause(code, label, "")
    return Cause()


# ---------------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class MemoryReading:
    """Memory at one moment, from NVML (`source` "gpu": each GPU's used MiB and the server's
    processes' MiB) or, with no GPU, the resident memory of the server's processes (`source`
    "rss", `note` saying so)."""

    source: str = ""  # "gpu" | "rss" | ""
    server_mib: float | None = None  # what the server's processes hold
    device_used_mib: dict = field(default_factory=dict)  # GPU index (str) -> MiB in use on the device
    per_process_mib: dict = field(default_factory=dict)  # pid (str) -> MiB
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data) -> "MemoryReading":
        data = data if isinstance(data, dict) else {}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def device_total_mib(self) -> float | None:
        return sum(self.device_used_mib.values()) if self.device_used_mib else None


RSS_NOTE = "no GPU here: resident memory (RSS) of the server's processes, not GPU memory"


def read_memory(pgid: int | None, gpu_indices=None, nvml=None, baseline: MemoryReading | None = None) -> MemoryReading:
    """The server's memory now. On a GPU host NVML's per-process figures for the group's
    processes; where NVML names none of them (a container hiding host pids) the rise in the
    devices' used memory over `baseline`, and the note says so. No GPU: RSS."""
    pids = group_pids(pgid) if pgid else []
    now = gpu_telemetry.memory_now(pids, gpu_indices, nvml)
    if now.status == "ok" and now.used_mib:
        per_process = {str(p): m for p, m in now.process_mib.items() if m is not None}
        device = {str(i): round(m, 1) for i, m in now.used_mib.items()}
        if per_process:
            return MemoryReading("gpu", round(sum(per_process.values()), 1), device,
                                 {p: round(m, 1) for p, m in per_process.items()}, "per process, from NVML")
        if baseline is not None and baseline.device_total_mib is not None and pids:
            rise = sum(now.used_mib.values()) - baseline.device_total_mib
            return MemoryReading("gpu", round(max(rise, 0.0), 1), device, {},
                                 "NVML names none of the server's processes: the rise in the GPUs' used memory "
                                 "since before it started")
        return MemoryReading("gpu", 0.0 if not pids else None, device, {},
                             "before start" if baseline is None and not pids else "")
    return MemoryReading("rss", round(rss_mib(pids), 1), {}, {}, RSS_NOTE)


class MemoryWatch:
    """The peak of `read_memory` while the levels run, read every `interval_s` in a thread."""

    def __init__(self, pgid: int, gpu_indices=None, interval_s: float = 0.5, baseline=None):
        self.pgid, self.gpu_indices, self.interval_s, self.baseline = pgid, gpu_indices, interval_s, baseline
        self.peak: MemoryReading | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-memory", daemon=True)

    def _read(self) -> None:
        reading = read_memory(self.pgid, self.gpu_indices, baseline=self.baseline)
        if reading.server_mib is not None and (self.peak is None or self.peak.server_mib is None
                                               or reading.server_mib > self.peak.server_mib):
            self.peak = reading

    def _run(self) -> None:
        while True:
            self._read()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> "MemoryWatch":
        self._thread.start()
        return self

    def stop(self) -> MemoryReading | None:
        self._stop.set()
        self._thread.join()
        return self.peak


# ---------------------------------------------------------------------------------- records
def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def record_dir(state_dir) -> Path:
    d = Path(state_dir) / "servers"
    d.mkdir(parents=True, exist_ok=True)
    return d


def reap_orphans(state_dir, grace_s: float = 10.0) -> list[dict]:
    """Stop every server recorded under `state_dir` whose worker is gone (a worker killed while
    its server ran), and forget it. A record whose worker still runs is left alone (two workers
    may share a host). Returns what was stopped, each with `stopped`: how."""
    stopped = []
    for path in sorted(record_dir(state_dir).glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if alive(rec.get("owner_pid", -1), rec.get("owner_start")):
            continue
        pgid = rec.get("pgid")
        leader_here = alive(rec.get("pid", -1), rec.get("start"))
        # The leader may be gone and its forked workers still hold the GPU: the group is what
        # is stopped, but only a group the record's leader made (a reused id would not match).
        members = group_pids(pgid) if pgid and (leader_here or _group_is_ours(pgid, rec)) else []
        if members:
            how = _stop_group(pgid, grace_s, lambda: not group_pids(pgid))
            stopped.append({**rec, "stopped": how, "members": members})
        path.unlink(missing_ok=True)
    return stopped


def _group_is_ours(pgid: int, rec: dict) -> bool:
    """No process of the group started before the recorded leader did."""
    start = rec.get("start")
    starts = [process_start(p) for p in group_pids(pgid)]
    return start is not None and bool(starts) and all(s is not None and s >= start for s in starts)


def _stop_group(pgid: int, grace_s: float, gone: Callable[[], bool]) -> str:
    """SIGTERM to the group, SIGKILL after `grace_s`. Returns how it ended."""
    t0 = time.monotonic()
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "already gone"
    while time.monotonic() - t0 < grace_s:
        if gone():
            return f"SIGTERM, gone after {time.monotonic() - t0:.1f} s"
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return f"SIGTERM, gone after {time.monotonic() - t0:.1f} s"
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    return f"SIGKILL after {grace_s:g} s of SIGTERM"


# ---------------------------------------------------------------------------------- a started server
@dataclass(frozen=True)
class StartFailure:
    """A server that did not start: how it ended and what its log says."""

    summary: str  # one sentence
    exit_code: int | None = None
    exit_signal: str = ""
    cause: Cause = field(default_factory=Cause)
    log_tail: str = ""
    seconds: float | None = None  # from start until it was seen to fail


class Server:
    """A server this worker started: its process group, port and log."""

    def __init__(self, spec: ServerSpec, proc: subprocess.Popen, port: int, log_path: Path, record: Path,
                 t0: float, lease: PortLease | None = None):
        self.spec, self.proc, self.port, self.log_path, self.record, self.t0 = spec, proc, port, log_path, record, t0
        self.lease = lease
        self.pid = self.pgid = proc.pid
        self.start_ticks = process_start(proc.pid)
        self.base_url = spec.base_url(port)
        self.stopped_how = ""

    def log_tail(self) -> str:
        return log_tail(self.log_path)

    def running(self) -> bool:
        return self.proc.poll() is None

    def failure(self, summary: str) -> StartFailure:
        code, sig = describe_exit(self.proc.poll())
        tail = self.log_tail()
        return StartFailure(summary, code, sig, recognise(tail, sig), tail, round(time.monotonic() - self.t0, 3))

    def stop(self, grace_s: float = 20.0) -> str:
        """SIGTERM to its group, SIGKILL after `grace_s`; forgets the record. Returns how."""
        def gone():
            return self.proc.poll() is not None and not group_pids(self.pgid)
        if gone():
            how = "it had exited"
        else:
            how = _stop_group(self.pgid, grace_s, gone)
        self.proc.wait()
        self.record.unlink(missing_ok=True)
        if self.lease is not None:
            self.lease.release()
        self.stopped_how = how
        return how


def server_env(spec: ServerSpec, user: pwd.struct_passwd | None = None) -> dict:
    """A started server's whole environment: INHERITED_ENV from the worker's (the home and names
    of `user` when it runs as another), then what its recipe sets (already allowed)."""
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    if user is not None:
        env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    env.update(spec.full_env)
    env.update(backends.get(spec.backend).offline_env)  # last: no recipe turns offline mode off
    return env


def as_user(user: pwd.struct_passwd | None) -> dict:
    """subprocess.Popen's arguments that start a process as `user` (none: the worker's own)."""
    return dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if user is not None else {}


def launch(spec: ServerSpec, allowlist: Allowlist, state_dir, port: int | None = None, label: str = "",
           owner: dict | None = None) -> Server:
    """Start `spec` (refused with the reason when this host does not allow it, judged on the
    port it gets): its own process group, as the LAB_RUN_AS user when there is one, in a folder
    of its own under `state_dir`, its output to a log there, a record of it beside. Raises
    Refused, or OSError when the executable cannot be run at all."""
    lease = None if port else allowlist.lease_port(spec.connect_host)
    try:
        port = port or lease.port
        problem = allowlist.refusal(spec, port)
        if problem:
            raise Refused(problem)
        logs = Path(state_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"server-{port}-{int(time.time())}.log"
        user = pwd.getpwnam(allowlist.run_as) if allowlist.run_as else None
        cwd = Path(state_dir) / SERVER_CWD
        cwd.mkdir(exist_ok=True)
        if user is not None:
            os.chown(cwd, user.pw_uid, user.pw_gid)
        argv = spec.argv(port)
        with open(log_path, "wb") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=server_env(spec, user), cwd=str(cwd), start_new_session=True,
                                    close_fds=True, **as_user(user))
    except BaseException:
        if lease is not None:
            lease.release()
        raise
    record = record_dir(state_dir) / f"{proc.pid}.json"
    server = Server(spec, proc, port, log_path, record, t0, lease)
    me = os.getpid()
    _write_json(record, {"pid": proc.pid, "pgid": proc.pid, "start": server.start_ticks, "port": port,
                         "argv": argv, "label": label or spec.label, "log": str(log_path),
                         "owner_pid": me, "owner_start": process_start(me), "started_at": time.time(),
                         **(owner or {})})
    return server


def wait_healthy(server: Server, timeout_s: float, should_stop: Callable[[], bool] | None = None,
                 poll_s: float = 0.2) -> float | StartFailure:
    """Seconds from the start until /health answered 200, or why it never did (it exited, or
    `timeout_s` passed: then it is left running for the caller to stop)."""
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            if not server.running():
                return server.failure("the server exited while starting")
            elapsed = time.monotonic() - server.t0
            if elapsed > timeout_s:
                return server.failure(f"/health did not answer 200 within {timeout_s:g} s")
            if should_stop is not None and should_stop():
                return server.failure("stopped while starting")
            try:
                if client.get(server.base_url + "/health").status_code == 200:
                    return round(time.monotonic() - server.t0, 3)
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)


@dataclass(frozen=True)
class Probe:
    """The first request to a freshly started server."""

    first_token_s: float | None = None  # from the server's start to the probe's first token
    ttft_ms: float | None = None  # the probe's own time to first token
    model: str = ""
    error: str = ""


def probe_first_token(server: Server, timeout_s: float = 300.0, prompt: str = "Hello") -> Probe:
    """One streamed completion of a few tokens: when did its first token arrive?"""
    model = server.spec.served_model
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            if not model:
                listed = client.get(server.base_url + "/v1/models").json().get("data") or []
                model = str(listed[0].get("id", "")) if listed else ""
            body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0.0, "stream": True}
            sent = time.monotonic()
            with client.stream("POST", server.base_url + "/v1/completions", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    return Probe(model=model, error=f"HTTP {response.status_code}: {response.text[:300]}")
                for line in response.iter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    try:
                        choices = json.loads(line[5:]).get("choices") or []
                    except ValueError:
                        continue
                    if choices and (choices[0].get("text") or ""):
                        now = time.monotonic()
                        return Probe(round(now - server.t0, 3), round((now - sent) * 1000, 1), model)
        return Probe(model=model, error="the probe's answer held no token")
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return Probe(model=model, error=f"{type(exc).__name__}: {exc}")


def wait_freed(server: Server, before: MemoryReading, gpu_indices=None, timeout_s: float = 30.0,
               tolerance_mib: float = 256.0) -> tuple[bool, MemoryReading, str]:
    """After `stop()`: is the memory the server held given back? On a GPU, none of its processes
    listed and the devices' used memory back within `tolerance_mib` of before it started; with
    no GPU, its processes gone. Returns (freed, the last reading, what was checked)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = group_pids(server.pgid)
        reading = read_memory(None, gpu_indices)
        if reading.source == "gpu" and before.source == "gpu" and before.device_total_mib is not None:
            rise = (reading.device_total_mib or 0.0) - before.device_total_mib
            freed = not left and rise <= tolerance_mib
            said = f"GPU memory used {rise:+.0f} MiB against before the start (allowed {tolerance_mib:g})"
        else:
            freed = not left
            said = "its processes are gone" if freed else f"processes {left} still run"
        if freed or time.monotonic() > deadline:
            return freed, reading, said
        time.sleep(0.5)


# ---------------------------------------------------------------------------------- the whole start
@dataclass
class LaunchReport:
    """What starting one server from a recipe showed: stored with the run (one writer, `to_dict`,
    one reader, `from_dict`). `status`: "refused" (the host's allowlist said no; nothing
    started), "did_not_start" (it exited or never answered /health: exit code or signal, log
    tail and cause), "running" (up, being measured) or "stopped" (measured and stopped)."""

    status: str = ""
    refusal: str = ""
    command: str = ""
    port: int | None = None
    pid: int | None = None
    health_s: float | None = None  # start -> /health 200
    first_token_s: float | None = None  # start -> the probe's first token
    probe_ttft_ms: float | None = None
    probe_error: str = ""
    memory_before: MemoryReading = field(default_factory=MemoryReading)
    memory_loaded: MemoryReading = field(default_factory=MemoryReading)
    memory_peak: MemoryReading = field(default_factory=MemoryReading)
    memory_after_stop: MemoryReading = field(default_factory=MemoryReading)
    memory_freed: bool | None = None
    memory_freed_check: str = ""
    failure: str = ""
    exit_code: int | None = None
    exit_signal: str = ""
    cause: Cause = field(default_factory=Cause)
    log_tail: str = ""
    stopped: str = ""
    orphans_stopped: list = field(default_factory=list)
    # The earlier starts of the same launch when each trial started the server afresh, oldest
    # first: {"pid", "port", "health_s", "first_token_s", "stopped", "memory_freed"}; this
    # report's own figures are of the latest start. [] in version 1 (one start per launch).
    earlier_starts: list = field(default_factory=list)

    def start_record(self) -> dict:
        """This start in brief, for the next start's `earlier_starts`."""
        return {"pid": self.pid, "port": self.port, "health_s": self.health_s, "first_token_s": self.first_token_s,
                "stopped": self.stopped, "memory_freed": self.memory_freed}

    def fail(self, failure: StartFailure) -> "LaunchReport":
        self.status = "did_not_start"
        self.failure, self.exit_code, self.exit_signal = failure.summary, failure.exit_code, failure.exit_signal
        self.cause, self.log_tail = failure.cause, failure.log_tail
        return self

    def to_dict(self) -> dict:
        data = asdict(self)
        data["version"] = STORED_VERSION
        return data

    @classmethod
    def from_dict(cls, data) -> "LaunchReport":
        data = dict(data) if isinstance(data, dict) else {}
        known = set(cls.__dataclass_fields__)
        out = {k: v for k, v in data.items() if k in known}
        for key in ("memory_before", "memory_loaded", "memory_peak", "memory_after_stop"):
            out[key] = MemoryReading.from_dict(out.get(key))
        out["command"] = mask_env(str(out.get("command") or ""))  # older reports stored the values
        cause = out.get("cause") if isinstance(out.get("cause"), dict) else {}
        out["cause"] = Cause(**{k: str(v) for k, v in cause.items() if k in Cause.__dataclass_fields__})
        return cls(**out)


def start(spec: ServerSpec, allowlist: Allowlist, state_dir, *, timeout_s: float = 900.0,
          should_stop: Callable[[], bool] | None = None, gpu_indices=None, stop_grace_s: float = 20.0,
          owner: dict | None = None) -> tuple[Server | None, LaunchReport]:
    """Start `spec` and wait until it serves: the server (None when it did not start) and the
    report so far — start-up times, memory before and after load, or why it did not start (a
    server that never answered is stopped here)."""
    report = LaunchReport()
    problem = allowlist.refusal(spec)
    if problem:
        report.status, report.refusal = "refused", problem
        return None, report
    report.memory_before = read_memory(None, gpu_indices)
    try:
        server = launch(spec, allowlist, state_dir, owner=owner)
    except Refused as exc:
        report.status, report.refusal = "refused", str(exc)
        return None, report
    except OSError as exc:  # the executable is missing or not executable
        cause = Cause("missing_file", "a file it needs is missing", str(exc)) if isinstance(
            exc, FileNotFoundError) else Cause("", "", str(exc))
        report.command = spec.command_line(0)
        return None, report.fail(StartFailure(f"it could not be run: {exc}", cause=cause))
    report.command, report.port, report.pid = spec.command_line(server.port), server.port, server.pid
    ready = wait_healthy(server, timeout_s, should_stop)
    if isinstance(ready, StartFailure):
        report.stopped = server.stop(stop_grace_s)
        return None, report.fail(ready)
    report.health_s = ready
    probe = probe_first_token(server)
    report.first_token_s, report.probe_ttft_ms, report.probe_error = probe.first_token_s, probe.ttft_ms, probe.error
    report.memory_loaded = read_memory(server.pgid, gpu_indices, baseline=report.memory_before)
    report.status = "running"
    return server, report


def finish(server: Server, report: LaunchReport, *, gpu_indices=None, stop_grace_s: float = 20.0,
           peak: MemoryReading | None = None, freed_timeout_s: float = 30.0) -> LaunchReport:
    """Stop a started server and check its memory was given back."""
    if peak is not None:
        report.memory_peak = peak
    report.stopped = server.stop(stop_grace_s)
    report.memory_freed, report.memory_after_stop, report.memory_freed_check = wait_freed(
        server, report.memory_before, gpu_indices, freed_timeout_s)
    report.status = "stopped"
    return report
