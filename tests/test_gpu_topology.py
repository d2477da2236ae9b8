"""The GPU topology in the probe: per pair the nearest common PCIe ancestor (as nvidia-smi's legend
names it), P2P read/write and NVLinks, from a fake NVML of two and four GPUs (PCIe under one
switch, NVLink, across CPU sockets); stored with the host and shown on its admin page as a
`nvidia-smi topo -m` matrix."""
import re

import pynvml
import pytest
from django.urls import reverse

from benchmarks.engine import gpu
from benchmarks.engine.gpu import GpuPair, Topology, probe
from benchmarks.models import Host
from benchmarks.services import host_probe_store
from factories import user
from test_gpu_telemetry import NOT_SUPPORTED, FakeGpu, FakeNVML

SINGLE, MULTIPLE, HOSTBRIDGE = pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_MULTIPLE, pynvml.NVML_TOPOLOGY_HOSTBRIDGE
NODE, SYSTEM = pynvml.NVML_TOPOLOGY_NODE, pynvml.NVML_TOPOLOGY_SYSTEM


def bus(i):
    return f"00000000:{0x18 + 0x20 * i:02X}:00.0"  # as FakeNVML makes them


def two_pcie_under_one_switch():
    return FakeNVML([FakeGpu(), FakeGpu(uuid="GPU-2")], ancestors={(0, 1): SINGLE})


def four_across_sockets():
    # Two GPUs per socket, each pair under its own switch; the sockets joined by UPI.
    ancestors = {(0, 1): SINGLE, (2, 3): SINGLE, (0, 2): SYSTEM, (0, 3): SYSTEM, (1, 2): SYSTEM, (1, 3): SYSTEM}
    return FakeNVML([FakeGpu(uuid=f"GPU-{i}") for i in range(4)], ancestors=ancestors)


def four_nvlink():
    """V100 SXM2-like: six links per GPU, two to each neighbour in a ring of four, one each to the
    GPU across (a hybrid cube-mesh cut to four); PCIe: two switches on one host bridge."""
    links = {0: [1, 1, 3, 3, 2, 2], 1: [0, 0, 2, 2, 3, 3], 2: [1, 1, 3, 3, 0, 0], 3: [2, 2, 0, 0, 1, 1]}
    gpus = [FakeGpu(name="Tesla V100-SXM2-32GB", uuid=f"GPU-{i}", nvlinks=[True] * 6,
                    nvlink_remote=[bus(j) for j in links[i]]) for i in range(4)]
    gpus[3].nvlinks[5] = False  # one link down: GPU3 reaches GPU1 over one link, GPU1 over two
    ancestors = {(0, 1): SINGLE, (2, 3): SINGLE, (0, 2): HOSTBRIDGE, (0, 3): HOSTBRIDGE,
                 (1, 2): HOSTBRIDGE, (1, 3): HOSTBRIDGE}
    return FakeNVML(gpus, ancestors=ancestors), links


def codes(topology):
    return [[c["code"] for c in row["cells"]] for row in topology.matrix()["rows"]]


def test_two_pcie_gpus_under_one_switch():
    host = probe(nvml=two_pcie_under_one_switch())
    t = host.topology
    assert t.status == "ok" and t.gpus == (0, 1) and host.interconnect == "pcie"
    assert [g.pci_bus_id for g in host.gpus] == [bus(0), bus(1)]  # upper case, as NVML writes it
    pair = t.pair(1, 0)
    assert (pair.level, pair.code, pair.kind, pair.nvlinks) == ("single", "PIX", "single", 0)
    assert (pair.p2p_read, pair.p2p_write) == ("ok", "ok")
    assert codes(t) == [["X", "PIX"], ["PIX", "X"]]


def test_four_gpus_across_two_sockets():
    t = probe(nvml=four_across_sockets()).topology
    assert codes(t) == [["X", "PIX", "SYS", "SYS"], ["PIX", "X", "SYS", "SYS"],
                        ["SYS", "SYS", "X", "PIX"], ["SYS", "SYS", "PIX", "X"]]
    # The fake answers P2P only under one switch: across the sockets, the chipset refuses it.
    assert t.pair(0, 2).p2p_read == "chipset not supported" and t.pair(2, 3).p2p_write == "ok"
    assert t.slowest([0, 1]).kind == "single" and t.slowest().kind == "system"
    assert "socket" in t.pair(1, 3).words


def test_four_nvlink_gpus_count_their_links_per_pair():
    nv, links = four_nvlink()
    host = probe(nvml=nv)
    t = host.topology
    assert host.interconnect == "nvlink"

    def expected(a, b):  # links listed for a towards b, only the active ones (GPU3's last is down)
        return sum(1 for k, j in enumerate(links[a]) if j == b and nv.gpus[a].nvlinks[k])

    for a in range(4):
        for b in range(a + 1, 4):
            assert t.pair(a, b).nvlinks == expected(a, b) and t.pair(a, b).code == f"NV{expected(a, b)}"
    assert t.pair(1, 3).code == "NV2" and t.pair(0, 2).code == "NV2"
    assert [(link.link, link.version, link.remote_gpu) for link in t.links[0]][:2] == [(0, 2, 1), (1, 2, 1)]
    assert len(t.links[3]) == 5
    assert t.slowest().kind == "nvlink"


def test_gpus_behind_nvswitches_are_joined_by_the_fewer_links_either_has():
    switch = "00000000:C1:00.0"  # not a GPU's address: an NVSwitch
    gpus = [FakeGpu(name="NVIDIA H100 80GB HBM3", nvlinks=[True] * 18, nvlink_remote=[switch] * 18),
            FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-2", nvlinks=[True] * 16 + [False] * 2,
                    nvlink_remote=[switch] * 18)]
    pair = probe(nvml=FakeNVML(gpus, ancestors={(0, 1): SYSTEM})).topology.pair(0, 1)
    assert (pair.code, pair.via_switch) == ("NV16", True) and "NVSwitch" in pair.words


def test_what_nvml_does_not_support_is_left_blank_per_field():
    nv = FakeNVML([FakeGpu(unsupported={"p2p"}), FakeGpu(uuid="GPU-2")])  # no common ancestor either
    host = probe(nvml=nv)
    pair = host.topology.pair(0, 1)
    assert host.ok and (pair.level, pair.code, pair.p2p_read, pair.p2p_write) == ("", "?", "", "")
    assert host.gpus[1].memory_total_mib == 16384  # the rest of the probe is read
    nv = FakeNVML([FakeGpu(unsupported={"pci"}, nvlinks=[True], nvlink_remote=None), FakeGpu(uuid="GPU-2")],
                  ancestors={(0, 1): NODE})
    t = probe(nvml=nv).topology
    assert t.pair(0, 1).code == "NODE" and t.links[0][0].remote_bus_id == "" and t.links[0][0].remote_gpu is None


def test_one_gpu_has_no_pair():
    t = probe(nvml=FakeNVML([FakeGpu()])).topology
    assert (t.status, t.pairs, t.to_dict()["gpus"]) == ("one GPU: no pair", (), [0])


def test_the_stored_shape_reads_back_and_old_probes_still_read():
    nv, _ = four_nvlink()
    t = probe(nvml=nv).topology
    stored = t.to_dict()
    assert stored["version"] == gpu.TOPOLOGY_VERSION
    assert Topology.from_dict(stored) == t
    assert Topology.from_dict({}) == Topology() and Topology.from_dict(None).status == ""
    # A later writer's extra keys are ignored; a malformed pair is skipped, not a 500.
    extra = {**stored, "pairs": [{**stored["pairs"][0], "bandwidth": 1}, {"a": 0}], "future": True}
    assert Topology.from_dict(extra).pairs == (GpuPair(**stored["pairs"][0]),)


@pytest.mark.django_db
def test_the_host_s_admin_page_shows_the_matrix_and_its_legend(client):
    host = Host.objects.create(name="xeon-4gpu")
    host_probe_store(host=host, probe=probe(nvml=four_across_sockets()))
    host.refresh_from_db()
    assert host.topology["version"] == gpu.TOPOLOGY_VERSION and host.topology_figures.pair(0, 3).level == "system"
    old = Host.objects.create(name="probed-before-topology")
    client.force_login(user("root", staff=True))
    page = client.get(reverse("admin:benchmarks_host_change", args=[host.id])).content.decode()
    matrix = page[page.index('class="topology-matrix"'):page.index("</table>", page.index('class="topology-matrix"'))]
    rows = [re.findall(r'data-code="([^"]+)"', row) for row in matrix.split("<tr>")[2:]]
    assert rows == [["X", "PIX", "SYS", "SYS"], ["PIX", "X", "SYS", "SYS"],
                    ["SYS", "SYS", "X", "PIX"], ["SYS", "SYS", "PIX", "X"]]
    for code, _ in gpu.TOPOLOGY_LEGEND:
        assert f"<dt>{code}</dt>" in page
    assert "chipset not supported" in page  # P2P across the sockets
    page = client.get(reverse("admin:benchmarks_host_change", args=[old.id])).content.decode()
    assert "Not probed" in page and "topology-matrix" not in page


@pytest.mark.django_db
def test_the_api_lists_a_host_s_topology():
    from test_api import API, token_for

    host = Host.objects.create(name="nvlink-4gpu")
    host_probe_store(host=host, probe=probe(nvml=four_nvlink()[0]))
    Host.objects.create(name="not-probed")
    api, _ = token_for()
    hosts = {h["name"]: h for h in api.get(API + "hosts/").json()}
    stored = hosts["nvlink-4gpu"]["topology"]
    assert Topology.from_dict(stored).pair(1, 3).code == "NV2" and stored["version"] == gpu.TOPOLOGY_VERSION
    assert hosts["not-probed"]["topology"] == {}
