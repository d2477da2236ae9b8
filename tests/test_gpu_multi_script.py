"""The two-GPU script's pure parts (no GPU here): what it starts, how it reads `nvidia-smi topo -m`
beside the probe's topology (a fake NVML), its table, and that it stops on a machine without two GPUs."""
import importlib.util
import re
import shlex
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal

from benchmarks.engine import gpu
from benchmarks.engine.launcher import ServerSpec
from conftest import ROOT
from test_gpu_topology import four_across_sockets, two_pcie_under_one_switch

spec = importlib.util.spec_from_file_location("gpu_multi", ROOT / "scripts" / "gpu_multi.py")
gpu_multi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_multi)

# As nvidia-smi 550 prints it: underlined header, a NIC column, affinities after the matrix.
SMI_FOUR = ("\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tPIX\tSYS\tSYS\tNODE\t0-23\t0\t\tN/A\n"
            "GPU1\tPIX\t X \tSYS\tSYS\tNODE\t0-23\t0\t\tN/A\n"
            "GPU2\tSYS\tSYS\t X \tPIX\tSYS\t24-47\t1\t\tN/A\n"
            "GPU3\tSYS\tSYS\tPIX\t X \tSYS\t24-47\t1\t\tN/A\n"
            "NIC0\tNODE\tNODE\tSYS\tSYS\t X \n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe\n")
# What SMI_FOUR's GPU columns say, row by row: two pairs under a switch each, on two sockets.
SMI_FOUR_GPUS = (("X", "PIX", "SYS", "SYS"),
                 ("PIX", "X", "SYS", "SYS"),
                 ("SYS", "SYS", "X", "PIX"),
                 ("SYS", "SYS", "PIX", "X"))


def _command(line: str) -> tuple[dict, list, dict]:
    """A shell command line as (environment assignments, the program and its positional words,
    --flag/-f -> value)."""
    words = shlex.split(line)
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    program, flags, i = [words.pop(0)], {}, 0
    while i < len(words):
        if words[i].startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            flags[words[i]] = words[i + 1]
            i += 2
        elif words[i].startswith("-"):
            flags[words[i]] = True
            i += 1
        else:
            program.append(words[i])
            i += 1
    return env, program, flags


def test_it_starts_each_model_on_one_gpu_and_split_both_ways_over_two():
    models = {"7b": "/w/qwen2-7b-q4_k_m.gguf", "14b": "/w/qwen2-14b-q4_k_m.gguf"}
    plan = gpu_multi.plan(models)
    # Per model in order: one GPU unsplit, then both GPUs split by layer and by row.
    expected = [(m, gpus, mode) for m in models for gpus, mode in [((0,), "none"), ((0, 1), "layer"), ((0, 1), "row")]]
    assert [(p["model"], p["gpus"], p["setting"]["--split-mode"]) for p in plan] == expected
    for p in plan:
        n = len(p["gpus"])
        assert p["path"] == models[p["model"]] and p["gpus_used"] == n
        assert p["label"] == (f"{p['model']} Q4_K_M, one GPU" if n == 1 else
                              f"{p['model']} Q4_K_M, {n} GPUs, {p['setting']['--split-mode']} split")
        command = ServerSpec("/w/llama-server", p["path"], gpu_multi.ARGS, p["setting"],
                             gpus=p["gpus"]).command_line(18123)
        env, program, flags = _command(command)
        assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, p["gpus"]))}
        assert program == ["/w/llama-server"]
        assert flags["-m"] == p["path"] and flags["--port"] == "18123"
        assert flags["--split-mode"] == p["setting"]["--split-mode"]
        # A slot for each user of the highest level, each holding one request as gpu_lab's
        # measure_levels sends it (512 prompt and 100 output tokens).
        assert int(flags["--parallel"]) >= max(gpu_multi.LEVELS)
        assert int(flags["-c"]) // int(flags["--parallel"]) >= 512 + 100


def test_nvidia_smi_s_matrix_is_read_and_set_beside_the_probe_s():
    read = gpu_multi.parse_topo_matrix(SMI_FOUR)
    assert read == {(f"GPU{r}", f"GPU{c}"): code for r, row in enumerate(SMI_FOUR_GPUS)
                    for c, code in enumerate(row)}  # the NIC column and the affinities left out
    probed = gpu.probe(nvml=four_across_sockets()).topology
    assert gpu_multi.topology_agreement(probed, SMI_FOUR) == {"compared": True, "cells": 16, "differ": []}
    # A probe that says PIX where nvidia-smi says SYS is shown, cell by cell.
    pair = gpu.probe(nvml=two_pcie_under_one_switch()).topology
    smi = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-47\nGPU1\tSYS\t X \t0-47\n"
    differ = gpu_multi.topology_agreement(pair, smi)["differ"]
    assert differ == [{"cell": "GPU0/GPU1", "probe": "PIX", "nvidia-smi": "SYS"},
                      {"cell": "GPU1/GPU0", "probe": "PIX", "nvidia-smi": "SYS"}]
    assert gpu_multi.topology_agreement(pair, "")["compared"] is False


HEADER = ["server", "users", "decode p50", "aggregate", "per GPU: peak GiB / util %"]
WIDTHS = (40, 5, 10, 9)  # the columns before the per-GPU figures, one space apart; two before those
GPU = re.compile(r"GPU(\d+) +(\d+\.\d) / +(\d+)")


def _cells(line: str) -> list[str]:
    """A line of the table cut into its columns."""
    cells, at = [], 0
    for width in WIDTHS:
        cells.append(line[at:at + width].strip())
        at += width
        assert line[at] == " ", line
        at += 1
    assert line[at] == " ", line
    return cells + [line[at + 1:]]


def _row(line: str) -> dict:
    """A measured row of the table as numbers."""
    server, users, decode, aggregate, per_gpu = _cells(line)
    gpus = GPU.findall(per_gpu)
    assert "  ".join(g.group(0) for g in GPU.finditer(per_gpu)) == per_gpu.strip(), line  # nothing else
    return {"server": server, "users": int(users), "decode": float(decode), "aggregate": float(aggregate),
            "gpus": [(int(i), float(gib), int(util)) for i, gib, util in gpus]}


def _shown(value: float, digits: int) -> float:
    """`value` to `digits` decimals (the test's own rounding, half up; the data has no ties)."""
    return float(Decimal(repr(value)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def test_the_table_gives_each_gpu_its_own_figures():
    label = "7b Q4_K_M, 2 GPUs, layer split"
    levels = [{"concurrency": 1, "decode_tok_s_p50": 43.26, "aggregate_tok_s": 43.04,
               "gpus": [{"index": 0, "peak_memory_used_mib": 9830, "mean_utilization_gpu": 38.6},
                        {"index": 1, "peak_memory_used_mib": 4710, "mean_utilization_gpu": 17.2}]},
              {"concurrency": 8, "decode_tok_s_p50": 41.52, "aggregate_tok_s": 318.77,
               "gpus": [{"index": 0, "peak_memory_used_mib": 10700, "mean_utilization_gpu": 71.4},
                        {"index": 1, "peak_memory_used_mib": 5350, "mean_utilization_gpu": 35.4}]}]
    cause = "CUDA error: out of memory"
    result = {"servers": [{"label": label, "levels": levels, "report": {"status": "stopped"}},
                          {"label": "14b Q4_K_M, one GPU", "error": "", "report": {
                              "status": "did_not_start", "failure": "exited", "cause": {"line": cause}}},
                          {"label": "14b Q4_K_M, 2 GPUs, row split", "error": "", "report": {
                              "status": "refused", "refusal": "port 9999 is outside 18100-18199"}}],
              "topology_vs_nvidia_smi": {"compared": True, "differ": []}}
    lines = gpu_multi.table(result)
    assert len(lines) == 1 + len(levels) + 2 + 1
    assert _cells(lines[0]) == HEADER
    # Each level's row: its users, decode and aggregate speed, and per GPU its peak memory in
    # GiB (MiB / 1024) and its mean utilization, in the order the level lists its GPUs.
    for line, lv in zip(lines[1:], levels):
        assert _row(line) == {
            "server": label, "users": lv["concurrency"], "decode": _shown(lv["decode_tok_s_p50"], 1),
            "aggregate": _shown(lv["aggregate_tok_s"], 1),
            "gpus": [(g["index"], _shown(g["peak_memory_used_mib"] / 1024, 1), _shown(g["mean_utilization_gpu"], 0))
                     for g in lv["gpus"]]}
    # A server that did not start: its status, then why (the launcher's summary and the log's cause).
    failed, refused = lines[3], lines[4]
    assert failed[:40].rstrip() == "14b Q4_K_M, one GPU"
    assert failed[40:].split() == ["did_not_start:", "exited", *cause.split()]
    assert refused[:40].rstrip() == "14b Q4_K_M, 2 GPUs, row split"
    assert refused[40:].split() == ["refused:", *"port 9999 is outside 18100-18199".split()]
    assert lines[-1] == "topology: the probe agrees with nvidia-smi topo -m"
    differ = [{"cell": "GPU0/GPU1", "probe": "PIX", "nvidia-smi": "SYS"}]
    last = gpu_multi.table({**result, "topology_vs_nvidia_smi": {"compared": True, "differ": differ}})[-1]
    assert last.startswith("topology: differs") and all(v in last for v in differ[0].values())
    assert gpu_multi.table({**result, "topology_vs_nvidia_smi": {"compared": False, "differ": []}})[-1] == \
        "topology: nvidia-smi not compared"


def test_a_figure_not_measured_is_a_dash_never_zero():
    level = {"concurrency": 4, "decode_tok_s_p50": None, "aggregate_tok_s": 12.5,
             "gpus": [{"index": 0, "peak_memory_used_mib": None, "mean_utilization_gpu": None}]}
    result = {"servers": [{"label": "7b", "levels": [level], "report": {"status": "stopped"}}],
              "topology_vs_nvidia_smi": {"compared": False, "differ": []}}
    row = gpu_multi.table(result)[1]
    assert row[40:].split() == ["4", "-", "12.5", "GPU0", "-", "/", "-"]
    assert " 0.0" not in row and " 0 " not in row


def test_it_stops_where_there_are_not_two_gpus():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_multi.py"), "--server", "/bin/true",
                           "--model", "7b=/tmp/none.gguf"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "two GPUs needed" in done.stderr
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_multi.sh")]).returncode == 0
    usage = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_multi.sh")], capture_output=True, text=True)
    assert usage.returncode == 2 and "prepare SRC WORK" in usage.stderr
