"""The two-GPU script's pure parts (no GPU here): what it starts, how it reads `nvidia-smi topo -m`
beside the probe's topology (a fake NVML), its table, and that it stops on a machine without two GPUs."""
import importlib.util
import subprocess
import sys

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


def test_it_starts_each_model_on_one_gpu_and_split_both_ways_over_two():
    plan = gpu_multi.plan({"7b": "/w/qwen2-7b-q4_k_m.gguf", "14b": "/w/qwen2-14b-q4_k_m.gguf"})
    assert [(p["model"], p["gpus"], p["setting"]["--split-mode"], p["gpus_used"]) for p in plan] == [
        ("7b", (0,), "none", 1), ("7b", (0, 1), "layer", 2), ("7b", (0, 1), "row", 2),
        ("14b", (0,), "none", 1), ("14b", (0, 1), "layer", 2), ("14b", (0, 1), "row", 2)]
    assert plan[2]["label"] == "7b Q4_K_M, 2 GPUs, row split"
    one = plan[4]
    command = ServerSpec("/w/llama-server", "/w/m.gguf", gpu_multi.ARGS, one["setting"], gpus=one["gpus"]).command_line(1)
    assert command.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 /w/llama-server")
    assert "--split-mode layer" in command and "--parallel 32" in command
    assert max(gpu_multi.LEVELS) <= 32  # a slot per user of the highest level


def test_nvidia_smi_s_matrix_is_read_and_set_beside_the_probe_s():
    read = gpu_multi.parse_topo_matrix(SMI_FOUR)
    assert read[("GPU0", "GPU1")] == "PIX" and read[("GPU3", "GPU0")] == "SYS" and read[("GPU2", "GPU2")] == "X"
    assert ("GPU0", "NIC0") not in read and len(read) == 16
    probed = gpu.probe(nvml=four_across_sockets()).topology
    assert gpu_multi.topology_agreement(probed, SMI_FOUR) == {"compared": True, "cells": 16, "differ": []}
    # A probe that says PIX where nvidia-smi says SYS is shown, cell by cell.
    pair = gpu.probe(nvml=two_pcie_under_one_switch()).topology
    smi = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-47\nGPU1\tSYS\t X \t0-47\n"
    differ = gpu_multi.topology_agreement(pair, smi)["differ"]
    assert differ == [{"cell": "GPU0/GPU1", "probe": "PIX", "nvidia-smi": "SYS"},
                      {"cell": "GPU1/GPU0", "probe": "PIX", "nvidia-smi": "SYS"}]
    assert gpu_multi.topology_agreement(pair, "")["compared"] is False


def test_the_table_gives_each_gpu_its_own_figures():
    level = {"concurrency": 8, "decode_tok_s_p50": 41.5, "aggregate_tok_s": 320.0,
             "gpus": [{"index": 0, "peak_memory_used_mib": 10240, "mean_utilization_gpu": 71},
                      {"index": 1, "peak_memory_used_mib": 5120, "mean_utilization_gpu": 35}]}
    result = {"servers": [{"label": "7b Q4_K_M, 2 GPUs, layer split", "levels": [level], "report": {"status": "stopped"}},
                          {"label": "14b Q4_K_M, one GPU", "error": "", "report": {
                              "status": "did_not_start", "failure": "exited", "cause": {"line": "out of memory"}}}],
              "topology_vs_nvidia_smi": {"compared": True, "differ": []}}
    lines = gpu_multi.table(result)
    assert "GPU0  10.0 /  71  GPU1   5.0 /  35" in lines[1] and "41.5" in lines[1] and "320.0" in lines[1]
    assert "did_not_start: exited out of memory" in lines[2]
    assert lines[-1] == "topology: the probe agrees with nvidia-smi topo -m"


def test_it_stops_where_there_are_not_two_gpus():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_multi.py"), "--server", "/bin/true",
                           "--model", "7b=/tmp/none.gguf"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "two GPUs needed" in done.stderr
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_multi.sh")]).returncode == 0
    usage = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_multi.sh")], capture_output=True, text=True)
    assert usage.returncode == 2 and "prepare SRC WORK" in usage.stderr
